# Issue 14: the hierarchical compressed allreduce over 2 network namespaces x 2 ranks (shm
# inside a namespace, TCP across a 2 Gbit/s shaped link): the placement is taken (its schedule,
# compressed_hierarchical, is the last algorithm the communicator ran), int8 within its bound
# for host sums, the same bits on every rank, residuals holding what was dropped (tests/compressed_collectives_test.cc,
# CompressedProcesses.DISABLED_HierarchicalWorker). A few seconds; skipped (77) without root
# or namespaces, like tests/netns.cmake.
add_test(NAME netns_2x2_hierarchical_compressed_allreduce
  COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host 2
          --rate 2gbit --timeout 120 --
          env WEFT_TIMEOUT=60 $<TARGET_FILE:compressed_collectives_test>
          --gtest_filter=CompressedProcesses.DISABLED_HierarchicalWorker
          --gtest_also_run_disabled_tests)
set_tests_properties(netns_2x2_hierarchical_compressed_allreduce PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
  FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\];PASSED  \\] 0 tests")

# Issue 39: hosts of three. Each lane owner streams the two lanes its members send into its
# host reduce's operands (exec/operand_sink.h), ~1 MiB each over shm's single-copy path; the
# same checks as above (CompressedProcesses.DISABLED_HierarchicalWorkerLargeLanes).
add_test(NAME netns_2x3_hierarchical_compressed_allreduce
  COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host 3
          --rate 2gbit --timeout 120 --
          env WEFT_TIMEOUT=60 $<TARGET_FILE:compressed_collectives_test>
          --gtest_filter=CompressedProcesses.DISABLED_HierarchicalWorkerLargeLanes
          --gtest_also_run_disabled_tests)
set_tests_properties(netns_2x3_hierarchical_compressed_allreduce PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
  FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\];PASSED  \\] 0 tests")
# The same with top-k 1%, whose host reduce on hosts of three is a built chain (P built in
# tiles from the streamed lanes, then each sub-slice encoded whole).
add_test(NAME netns_2x3_hierarchical_topk_allreduce
  COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host 3
          --rate 2gbit --timeout 120 --
          env WEFT_TIMEOUT=60 $<TARGET_FILE:compressed_collectives_test>
          --gtest_filter=CompressedProcesses.DISABLED_HierarchicalWorkerLargeLanesTopK
          --gtest_also_run_disabled_tests)
set_tests_properties(netns_2x3_hierarchical_topk_allreduce PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
  FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\];PASSED  \\] 0 tests")
