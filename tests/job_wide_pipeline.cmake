# WEFT_COMPRESSION through weftAllReduce's pipeline: checked first, then compressed
# (tests/compressed_collectives_test.cc, JobWideCompression.DISABLED_AfterTheArgumentChecks;
# the setting is read once per process, hence a process of its own).
add_test(NAME compressed_collectives_test.job_wide_after_checks
         COMMAND $<TARGET_FILE:compressed_collectives_test> --gtest_also_run_disabled_tests
                 --gtest_filter=JobWideCompression.DISABLED_AfterTheArgumentChecks)
set_tests_properties(compressed_collectives_test.job_wide_after_checks PROPERTIES
  ENVIRONMENT "WEFT_COMPRESSION=int8:always;WEFT_COMPRESSION_MIN_BYTES=0"
  LABELS "compressed_collectives_test" TIMEOUT 300)

# The hierarchical compressed allreduce's final decodes with streaming stores, bitwise
# (HierarchicalCompressedAllReduce.DISABLED_StreamedFinalDecodesGiveTheSameBits): outputs of
# 400 KB pass a 64 KiB WEFT_COPY_NT_THRESHOLD, which each process reads once.
add_test(NAME compressed_collectives_test.streamed_final_decodes
         COMMAND $<TARGET_FILE:compressed_collectives_test> --gtest_also_run_disabled_tests
                 --gtest_filter=HierarchicalCompressedAllReduce.DISABLED_StreamedFinalDecodesGiveTheSameBits)
set_tests_properties(compressed_collectives_test.streamed_final_decodes PROPERTIES
  ENVIRONMENT "WEFT_COPY_NT_THRESHOLD=64K" LABELS "compressed_collectives_test" TIMEOUT 300)
