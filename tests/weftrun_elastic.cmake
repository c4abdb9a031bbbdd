# weftrun --elastic / --replace with shell ranks (tests/weftrun_elastic_test.sh).
add_test(NAME weftrun_elastic
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/weftrun_elastic_test.sh ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(weftrun_elastic PROPERTIES TIMEOUT 240)
