# Structure checks (issue 34): no library function over 80 lines; the include graph between
# src/api, src/compress and src/core one-way. Each scanner's self-test beside it.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME structure.function_length_self_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/function_length_test.py --self-test)
  add_test(NAME structure.function_length
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/function_length_test.py ${CMAKE_SOURCE_DIR})
  add_test(NAME structure.include_layers_self_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/include_layers_test.py --self-test)
  add_test(NAME structure.include_layers
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/include_layers_test.py ${CMAKE_SOURCE_DIR})
  set_tests_properties(structure.function_length structure.function_length_self_test
                       structure.include_layers structure.include_layers_self_test
                       PROPERTIES LABELS house_in_order_test TIMEOUT 120)
else()
  message(WARNING "python3 not found: the function-length check (structure.function_length) is not registered")
endif()
