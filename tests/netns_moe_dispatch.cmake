# Issue 39: the MoE dispatch benchmark (perf/moe_dispatch_bench.cc) on the namespace harness,
# 2 hosts x 2 and 2 hosts x 4 ranks at 2 Gbit/s, a small shape (512 tokens x 512 hidden, top-2
# of 16 experts, uneven counts): every mode's tokens (float32, bf16, fp8 from bf16 and from
# float32, the bf16 codec) arrive across the shaped link, exact or within the codec's bound
# (the bench exits 1 otherwise). Seconds; skipped (77) without root or namespaces, like
# tests/netns.cmake. The figures themselves: perf/netns/moe_dispatch.sh, perf/RESULTS.md.
if(TARGET moe_dispatch_bench)
  foreach(r 2 4)
    add_test(NAME netns_2x${r}_moe_dispatch
      COMMAND bash ${CMAKE_SOURCE_DIR}/perf/netns/moe_dispatch.sh
              $<TARGET_FILE_DIR:moe_dispatch_bench> ${r} 1 2
              --tokens 512 --hidden 512 --experts 16)
    set_tests_properties(netns_2x${r}_moe_dispatch PROPERTIES
      SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS "netns;multiprocess"
      FAIL_REGULAR_EXPRESSION "OUT OF BOUND;exit [0-9]")
  endforeach()
endif()
