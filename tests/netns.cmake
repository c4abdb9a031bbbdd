# Several hosts on one machine: 2 network namespaces x 2 ranks, 2 Gbit/s shaped links, weft-perf
# checking allreduce exactly from 8 B to 4 MiB (shm inside a namespace, TCP across).
# perf/netns/run.sh exits 77 (skipped) when not root or when namespaces/tbf are unavailable;
# its own --timeout ends the run and removes the namespaces before ctest's timeout would.
if(TARGET weft-perf)
  add_test(NAME netns_2x2_allreduce
    COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host 2
            --rate 2gbit --timeout 540 --
            $<TARGET_FILE:weft-perf> -C allreduce -b 8 -e 4M -f 4 -c 1)
  set_tests_properties(netns_2x2_allreduce PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS "netns;multiprocess")
endif()
