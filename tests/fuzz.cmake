# Short fuzzing runs in the suite: the libFuzzer targets of fuzz/ (every parser that reads
# bytes from outside weft), built with clang + ASan + UBSan into <build>/fuzz by
# scripts/fuzz.sh, then each run for WEFT_FUZZ_SECONDS from the committed seeds (fuzz/corpus/).
# Cost on 2 cores: the clang build (~2-4 min CPU, once) plus 8 s per target. Skipped (77) where
# clang/libFuzzer are not installed. Long campaigns: scripts/fuzz.sh --runs 10000000.
set(WEFT_FUZZ_BUILD ${CMAKE_BINARY_DIR}/fuzz)
add_test(NAME fuzz_build
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --build-only --build-dir ${WEFT_FUZZ_BUILD})
set_tests_properties(fuzz_build PROPERTIES FIXTURES_SETUP weft_fuzz SKIP_RETURN_CODE 77
  TIMEOUT 900 LABELS fuzz)

# Targets whose short run currently finds a known library defect (reproducer committed in
# fuzz/crashes/, described in fuzz/README.md) would be listed here: registered but DISABLED, so
# ctest lists them as "Disabled" until the defect is fixed. Empty: every target is clean
# (bootstrap and tcp_frame were re-enabled when the root registry and the unexpected-message
# limit fixed their findings).
set(WEFT_FUZZ_KNOWN_FAILING)
# Seconds per target: 15 targets x 8 s keeps the suite's fuzzing near 2 minutes on 2 cores.
set(WEFT_FUZZ_SECONDS 8)
file(GLOB WEFT_FUZZ_TARGET_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/targets/*_fuzz.cc)
foreach(src ${WEFT_FUZZ_TARGET_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "_fuzz$" "" target ${name})
  add_test(NAME fuzz_${target}
    COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --no-build --seconds ${WEFT_FUZZ_SECONDS}
            --build-dir ${WEFT_FUZZ_BUILD} ${target})
  set_tests_properties(fuzz_${target} PROPERTIES FIXTURES_REQUIRED weft_fuzz SKIP_RETURN_CODE 77
    TIMEOUT 300 LABELS fuzz)
  if(target IN_LIST WEFT_FUZZ_KNOWN_FAILING)
    set_tests_properties(fuzz_${target} PROPERTIES DISABLED TRUE)
  endif()
endforeach()
