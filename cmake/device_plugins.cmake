# Device-runtime plugins (src/device/device_runtime.h): shared libraries libweft.so loads with
# dlopen at first use, so that libweft.so itself links no device library. They land next to
# libweft.so (<build>/, installed beside it in lib/).
#
#   libweft-device-emulated.so  always: the emulated GPU (src/device/emulated/).
#   libweft-device-cuda.so      with WEFT_CUDA: the CUDA runtime (src/device/cuda/) and the
#                               nvcc-compiled kernels (kernels/*.cu, weft_cuda_kernels).
#
# Paths are relative to this file, not CMAKE_SOURCE_DIR: fuzz/ builds the library as a
# subdirectory of its own project.
set(WEFT_ROOT_DIR ${CMAKE_CURRENT_LIST_DIR}/..)

function(weft_device_plugin target output_name)
  add_library(${target} SHARED ${ARGN})
  target_include_directories(${target} PRIVATE ${WEFT_ROOT_DIR}/include ${WEFT_ROOT_DIR}/src
                             ${WEFT_ROOT_DIR})
  target_link_libraries(${target} PRIVATE Threads::Threads)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  # Only the entry point is exported. A plugin needs no symbol of libweft (libweft exports
  # only the C API): dlopen(RTLD_NOW) in the tests and the install test would fail otherwise.
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${output_name} PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  # Anything that links weft's objects may load the plugin: build it with them.
  add_dependencies(weft_objects ${target})
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

file(GLOB WEFT_EMULATED_SOURCES CONFIGURE_DEPENDS ${WEFT_ROOT_DIR}/src/device/emulated/*.cc)
weft_device_plugin(weft_device_emulated weft-device-emulated ${WEFT_EMULATED_SOURCES})

if(WEFT_CUDA_ENABLED)
  # The CUDA kernels, compiled by nvcc from kernels/element_ops.h and kernels/codec_kernels.h
  # (one source with the CPU and the emulated GPU): linked into the cuda plugin and into the GPU
  # kernel test, never libweft.
  file(GLOB WEFT_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS ${WEFT_ROOT_DIR}/kernels/*.cu)
  add_library(weft_cuda_kernels STATIC ${WEFT_CUDA_KERNEL_SOURCES})
  target_include_directories(weft_cuda_kernels PUBLIC ${WEFT_ROOT_DIR}/include ${WEFT_ROOT_DIR})
  target_compile_definitions(weft_cuda_kernels PUBLIC WEFT_HAVE_CUDA=1)
  target_link_libraries(weft_cuda_kernels PUBLIC CUDA::cudart_static)
  set_target_properties(weft_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # The CPU's float semantics, stated rather than left to defaults: no multiply-add contraction
  # (the codecs' x * inv + magic must round twice, as on the CPU), subnormals kept, IEEE
  # division and square root. The kernels equal the CPU's bit for bit only so.
  target_compile_options(weft_cuda_kernels PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false -ftz=false -prec-div=true -prec-sqrt=true>)

  file(GLOB WEFT_CUDA_PLUGIN_SOURCES CONFIGURE_DEPENDS ${WEFT_ROOT_DIR}/src/device/cuda/*.cc)
  weft_device_plugin(weft_device_cuda weft-device-cuda ${WEFT_CUDA_PLUGIN_SOURCES})
  target_link_libraries(weft_device_cuda PRIVATE weft_cuda_kernels)
endif()
