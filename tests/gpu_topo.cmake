# GPU topology (issue 36, item 3).
# - fake_nvml: a stand-in libnvidia-ml for gpu_topo_test's NVML parsing tests (no NVIDIA driver
#   here); the test gets its path at compile time.
# - weft-topo with 8 emulated GPUs on NVSwitch: `--explain allreduce 64M` lists the device
#   candidates (staged and the IPC algorithms) and the device decision (issue 36 "done when");
#   a bad WEFT_EMULATED_TOPO is refused with an error naming it.
add_library(fake_nvml SHARED ${CMAKE_CURRENT_SOURCE_DIR}/fake_nvml/fake_nvml.cc)
if(TARGET gpu_topo_test)
  add_dependencies(gpu_topo_test fake_nvml)
  target_compile_definitions(gpu_topo_test PRIVATE WEFT_FAKE_NVML="$<TARGET_FILE:fake_nvml>")
endif()
if(TARGET weft-topo)
  add_test(NAME weft_topo_device_explain
    COMMAND sh -c "out=$($0 --explain allreduce 64M) || exit 1; printf '%s\\n' \"$out\"; \
printf '%s\\n' \"$out\" | grep -q '^Device buffers: candidates for allreduce of 67108864 bytes on 8 GPU rank' && \
printf '%s\\n' \"$out\" | grep -q '^  staged: ' && \
printf '%s\\n' \"$out\" | grep -q '^  oneshot (IPC): ' && \
printf '%s\\n' \"$out\" | grep -q '^  twoshot (IPC): ' && \
printf '%s\\n' \"$out\" | grep -Eq '^Device decision \\(for every call of 67108864 to 134217727 bytes\\): (oneshot|twoshot|staged)$'"
            $<TARGET_FILE:weft-topo>)
  set_tests_properties(weft_topo_device_explain PROPERTIES
    ENVIRONMENT "WEFT_DEVICE=emulated:8;WEFT_EMULATED_TOPO=nvswitch" TIMEOUT 120 LABELS "device;weft_topo")
  add_test(NAME weft_topo_bad_emulated_topo COMMAND $<TARGET_FILE:weft-topo> --explain allreduce 1M)
  set_tests_properties(weft_topo_bad_emulated_topo PROPERTIES
    ENVIRONMENT "WEFT_DEVICE=emulated:8;WEFT_EMULATED_TOPO=no-such-preset"
    PASS_REGULAR_EXPRESSION "WEFT_EMULATED_TOPO=no-such-preset: neither a preset \\(nvswitch, nvlink-pairs, pcie\\)"
    TIMEOUT 60 LABELS "device;weft_topo")
endif()
if(TARGET weft-topo)
  # The GPU section: 4 emulated GPUs in NVLink pairs, one rank per GPU, the link matrix. (grep,
  # not PASS_REGULAR_EXPRESSION: a multi-line CMake regex backtracks for minutes on a mismatch.)
  add_test(NAME weft_topo_gpu_section
    COMMAND sh -c "out=$($0 -C barrier) || exit 1; printf '%s\\n' \"$out\"; \
printf '%s\\n' \"$out\" | grep -q \"^Fabric 'discovered': 4 rank(s)\" && \
printf '%s\\n' \"$out\" | grep -q '^  GPU 0: H100-PCIe (emulated) .* nic=' && \
printf '%s\\n' \"$out\" | grep -q '^  GPU0  X     NV12  -     -$'"
            $<TARGET_FILE:weft-topo>)
  set_tests_properties(weft_topo_gpu_section PROPERTIES
    ENVIRONMENT "WEFT_DEVICE=emulated:4;WEFT_EMULATED_TOPO=nvlink-pairs" TIMEOUT 60 LABELS "device;weft_topo")
endif()
