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

# Issue 16: UCX across the 2x2 namespaces (WEFT_TRANSPORT=ucx: UCX's tcp lane on wh<i> between
# namespaces, weft's shm inside each). Every collective exactly (tests/helpers/
# ucx_collectives_worker.cc; WEFT_DEBUG=INFO must never show tcp serving a peer), with
# UCX_TLS=tcp and sm,tcp; and one-sided Put/Get/Signal/Wait through the Transport interface
# between processes in two namespaces (tests/ucx_one_sided_test.cc's rank body, which checks
# that the cross-namespace peers are ucx). Seconds each; skipped (77) like the test above.
if(WEFT_UCX_ENABLED)
  foreach(tls tcp sm,tcp)
    string(REPLACE "," "" tls_name ${tls})
    add_test(NAME netns_2x2_ucx_collectives_${tls_name}
      COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host 2
              --rate 2gbit --timeout 120 --
              env WEFT_TRANSPORT=ucx UCX_TLS=${tls} WEFT_DEBUG=INFO WEFT_TIMEOUT=60
              $<TARGET_FILE:ucx_collectives_worker>)
    set_tests_properties(netns_2x2_ucx_collectives_${tls_name} PROPERTIES
      SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess;ucx"
      FAIL_REGULAR_EXPRESSION "tcp to rank\\(s\\);FAIL ")
    add_test(NAME netns_2x2_ucx_one_sided_${tls_name}
      COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/run.sh --hosts 2 --ranks-per-host 2
              --rate 2gbit --timeout 120 --
              env ONE_SIDED_TEST_CHILD=1 ONE_SIDED_TEST_UCX_ACROSS=2 WEFT_TRANSPORT=ucx
              UCX_TLS=${tls} WEFT_TIMEOUT=60 $<TARGET_FILE:ucx_one_sided_test>)
    set_tests_properties(netns_2x2_ucx_one_sided_${tls_name} PROPERTIES
      SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess;ucx"
      FAIL_REGULAR_EXPRESSION "FAIL ")
  endforeach()
endif()

# Issue 10: one direct transport per host. allreduce, allgather and alltoall
# hierarchical_direct (forced) over the 2x2 namespaces: direct (one-sided) steps on shm windows inside each
# namespace, tcp between them, in one communicator; every collective checked exactly by the
# worker. Each of the 4 ranks must log its per-host direct transport (WEFT_DEBUG=INFO); that
# the schedules then contain direct steps, and only inside hosts, tests/hierarchical_direct_test
# checks. Skipped (77) like the tests above.
if(TARGET weft-perf)
  add_test(NAME netns_2x2_hierarchical_direct
    COMMAND bash -c "out=$(bash \"$0\" --hosts 2 --ranks-per-host 2 --rate 2gbit --timeout 120 -- env WEFT_DEBUG=INFO WEFT_TIMEOUT=60 'WEFT_ALGO=allreduce:hierarchical_direct;allgather:hierarchical_direct;alltoall:hierarchical_direct' \"$1\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 0 ] || exit $rc; n=$(grep -c 'direct (one-sided) steps inside the host' <<<\"$out\"); [ \"$n\" -eq 4 ] || { echo \"FAIL: $n of 4 ranks have a per-host direct transport\"; exit 1; }"
            ${CMAKE_SOURCE_DIR}/perf/netns/run.sh $<TARGET_FILE:ucx_collectives_worker>)
  set_tests_properties(netns_2x2_hierarchical_direct PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
    FAIL_REGULAR_EXPRESSION "FAIL ")
endif()
# Issue 36: device buffers on the 2x2 namespaces (emulated GPUs): the whole device matrix,
# allreduce / allgather / all-to-all hierarchical_direct with their in-host phases device to
# device through the ipc transport and the cross-host messages staged through pinned host
# memory; every collective checked exactly (tests/device_collectives_test.cc, DeviceWorker).
# Each of the 4 ranks must log the ipc transport for its host peer. Skipped (77) like the above.
if(TARGET device_collectives_test)
  add_test(NAME netns_2x2_device
    COMMAND bash -c "out=$(bash \"$0\" --hosts 2 --ranks-per-host 2 --rate 2gbit --timeout 240 -- env DEVICE_TEST_WORKER=1 WEFT_DEVICE=emulated:2 WEFT_EMULATED_DELAY_US=20 WEFT_DEBUG=INFO WEFT_TIMEOUT=60 \"$1\" --gtest_filter=DeviceWorker.* 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 0 ] || exit $rc; n=$(grep -c 'transports (device buffers): rank [0-9]* via ipc' <<<\"$out\"); [ \"$n\" -eq 4 ] || { echo \"FAIL: $n of 4 ranks name an ipc peer\"; exit 1; }"
            ${CMAKE_SOURCE_DIR}/perf/netns/run.sh $<TARGET_FILE:device_collectives_test>)
  set_tests_properties(netns_2x2_device PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "netns;multiprocess;device"
    FAIL_REGULAR_EXPRESSION "FAIL |\\[  FAILED  \\]")
endif()
# Calibration across the 2x2 namespaces: the network tier's rate and its stack's CPU
# (LinkParams::stack_cpu_gbps: both ends' process CPU time over a probe), and the shm tier's
# rate from DRAM into a sink (LinkParams::dram_sink_flow_gbps) reach the saved topology file. Skipped (77) like the above.
if(TARGET weft-topo)
  add_test(NAME netns_2x2_calibrate
    COMMAND bash -c "f=$(mktemp /tmp/weft_netns_cal.XXXXXX); out=$(bash \"$0\" --hosts 2 --ranks-per-host 2 --rate 2gbit --timeout 120 -- \"$1\" --calibrate --calibrate-ms 5 --save \"$f\" 2>&1); rc=$?; echo \"$out\"; g=$(grep -o 'stack_cpu_gbps=[0-9.e+-]*' \"$f\" | cut -d= -f2); k=$(grep '^link type=same_numa' \"$f\" | grep -o 'dram_sink_flow_gbps=[0-9.e+-]*' | cut -d= -f2); rm -f \"$f\"; [ $rc -eq 0 ] || exit $rc; grep -q 'network (rank 0 -> 2)' <<<\"$out\" || { echo 'FAIL: no network tier'; exit 1; }; awk -v g=\"$g\" 'BEGIN { exit !(g > 0.05 && g < 1000) }' || { echo \"FAIL: stack_cpu_gbps '$g'\"; exit 1; }; awk -v k=\"$k\" 'BEGIN { exit !(k > 0.1 && k < 1000) }' || { echo \"FAIL: dram_sink_flow_gbps '$k'\"; exit 1; }"
            ${CMAKE_SOURCE_DIR}/perf/netns/run.sh $<TARGET_FILE:weft-topo>)
  set_tests_properties(netns_2x2_calibrate PROPERTIES
    SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
    FAIL_REGULAR_EXPRESSION "FAIL ")
endif()
