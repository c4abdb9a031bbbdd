# No library function over 80 lines (issue 34); the scanner's own self-test first.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME structure.function_length_self_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/function_length_test.py --self-test)
  add_test(NAME structure.function_length
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/function_length_test.py ${CMAKE_SOURCE_DIR})
  set_tests_properties(structure.function_length structure.function_length_self_test
                       PROPERTIES LABELS house_in_order_test TIMEOUT 120)
else()
  message(WARNING "python3 not found: the function-length check (structure.function_length) is not registered")
endif()
