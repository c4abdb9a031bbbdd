# Installed library usable by C (pkg-config) and CMake (find_package) consumers.
add_test(NAME install_pkgconfig_and_cmake_package
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(install_pkgconfig_and_cmake_package PROPERTIES TIMEOUT 300)
