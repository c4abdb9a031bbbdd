# WEFT_COMPRESSION through weftAllReduce's pipeline: checked first, then compressed
# (tests/compressed_collectives_test.cc, JobWideCompression.DISABLED_AfterTheArgumentChecks;
# the setting is read once per process, hence a process of its own).
add_test(NAME compressed_collectives_test.job_wide_after_checks
         COMMAND $<TARGET_FILE:compressed_collectives_test> --gtest_also_run_disabled_tests
                 --gtest_filter=JobWideCompression.DISABLED_AfterTheArgumentChecks)
set_tests_properties(compressed_collectives_test.job_wide_after_checks PROPERTIES
  ENVIRONMENT "WEFT_COMPRESSION=int8:always;WEFT_COMPRESSION_MIN_BYTES=0"
  LABELS "compressed_collectives_test" TIMEOUT 300)
