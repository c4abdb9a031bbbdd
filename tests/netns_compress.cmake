# The hierarchical compressed allreduce over 2 network namespaces x L ranks (shm inside a
# namespace, TCP across a 2 Gbit/s shaped link): the placement is taken (its schedule,
# compressed_hierarchical, is the last algorithm the communicator ran), the host reduce's
# receives stream into its chain, the result is within the codec's bound for host sums, the
# same bits on every rank, residuals holding what was dropped (tests/compressed_collectives_test.cc,
# CompressedProcesses.DISABLED_HierarchicalWorker*). A few seconds each; skipped (77) without
# root or namespaces, like tests/netns.cmake.
function(weft_netns_compress_test name ranks_per_host worker)
  add_test(NAME ${name}
    COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host ${ranks_per_host}
            --rate 2gbit --timeout 120 --
            env WEFT_TIMEOUT=60 $<TARGET_FILE:compressed_collectives_test>
            --gtest_filter=CompressedProcesses.DISABLED_${worker}
            --gtest_also_run_disabled_tests)
  set_tests_properties(${name} PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
    FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\];PASSED  \\] 0 tests")
endfunction()

# Issue 14: hosts of two, int8 (each owner's received lane streams into its chain).
weft_netns_compress_test(netns_2x2_hierarchical_compressed_allreduce 2 HierarchicalWorker)
# Issue 39: hosts of three. Each lane owner streams the two lanes its members send into its
# host reduce's operands (exec/operand_sink.h), ~1 MiB each over shm's single-copy path.
weft_netns_compress_test(netns_2x3_hierarchical_compressed_allreduce 3 HierarchicalWorkerLargeLanes)
# The same with top-k 1%, whose host reduce on hosts of three is a built chain (P built in
# tiles from the streamed lanes, then each sub-slice encoded whole).
weft_netns_compress_test(netns_2x3_hierarchical_topk_allreduce 3 HierarchicalWorkerLargeLanesTopK)
