# Short fuzzing runs in the suite: the libFuzzer targets of fuzz/ (every parser that reads
# bytes from outside weft), built with clang + ASan + UBSan into <build>/fuzz by
# scripts/fuzz.sh, then each run for 10 s from the committed seeds (fuzz/corpus/). Cost on
# 2 cores: the clang build (~2-4 min CPU, once) plus 10 s per target. Skipped (77) where
# clang/libFuzzer are not installed. Long campaigns: scripts/fuzz.sh --runs 10000000.
set(WEFT_FUZZ_BUILD ${CMAKE_BINARY_DIR}/fuzz)
add_test(NAME fuzz_build
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --build-only --build-dir ${WEFT_FUZZ_BUILD})
set_tests_properties(fuzz_build PROPERTIES FIXTURES_SETUP weft_fuzz SKIP_RETURN_CODE 77
  TIMEOUT 900 LABELS fuzz)

# Targets whose short run currently finds a known library defect (reproducer committed in
# fuzz/crashes/, described in fuzz/README.md). They stay registered but DISABLED, so ctest
# lists them as "Disabled" until the defect is fixed; then delete the name from this list.
set(WEFT_FUZZ_KNOWN_FAILING
  # The defects of fuzz/crashes/bootstrap-verdict-unknown-result-code and
  # tcp_frame-unexpected-message-huge-size* are fixed (1e53636; the files replay clean), but
  # longer runs found new ones (fuzz/README.md, "Findings"):
  # bootstrap: RunRoot's tables sized by a forged nranks near 2^31 is fixed (nranks <= 2^24);
  # a 60 s run then reports LeakSanitizer leaks of HandshakeServer::Pending entries allocated on
  # the detached root thread (RunRoot -> WaitStep -> Step, socket.cc), open.
  bootstrap
  tcp_frame      # fuzz/crashes/tcp_frame-rss-over-2g-unexpected-queue: RSS over 2 GiB within 15 s (unexpected-message queue)
)
# topology_file is enabled again: link_table.cc ToRecords now writes dram_*=0 (60 s clean).
file(GLOB WEFT_FUZZ_TARGET_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/targets/*_fuzz.cc)
foreach(src ${WEFT_FUZZ_TARGET_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "_fuzz$" "" target ${name})
  add_test(NAME fuzz_${target}
    COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh --no-build --seconds 10
            --build-dir ${WEFT_FUZZ_BUILD} ${target})
  set_tests_properties(fuzz_${target} PROPERTIES FIXTURES_REQUIRED weft_fuzz SKIP_RETURN_CODE 77
    TIMEOUT 300 LABELS fuzz)
  if(target IN_LIST WEFT_FUZZ_KNOWN_FAILING)
    set_tests_properties(fuzz_${target} PROPERTIES DISABLED TRUE)
  endif()
endforeach()
