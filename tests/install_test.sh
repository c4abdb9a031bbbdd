#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds a C program that uses only weft.h with
# `pkg-config --cflags --libs weft` and a CMake project with find_package(weft), and runs the
# C program on 2 ranks with the installed weftrun. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1; src=$2
prefix=$(mktemp -d /tmp/weft-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/weft/weft.h"
test -x "$prefix/bin/weftrun"
libdir=$(ls -d "$prefix"/lib*/ | head -1)
# Only the public API is exported from libweft.so.
if nm -D --defined-only "$libdir/libweft.so" | awk '{print $3}' | grep -v '^weft' | grep -q .; then
  echo "libweft.so exports non-API symbols:"; nm -D --defined-only "$libdir/libweft.so" | awk '{print $3}' | grep -v '^weft' | head; exit 1
fi
# libweft.so links no CUDA library (device runtimes are plugins it loads at run time).
if readelf -d "$libdir/libweft.so" | grep NEEDED | grep -Eiq 'cuda|nvidia|libnccl'; then
  echo "libweft.so depends on a CUDA library:"; readelf -d "$libdir/libweft.so" | grep NEEDED; exit 1
fi
test -f "$prefix/include/weft/weft_device.h"
test -f "$libdir/libweft-device-emulated.so"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# The installed library finds its emulated GPU plugin beside itself.
cat > "$prefix/device.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <weft/weft_device.h>
int main(void) {
  char in[64] = "device round trip", out[64] = {0};
  void* d = NULL;
  if (weftDeviceMalloc(&d, sizeof in, 0) != weftSuccess || weftDeviceMemcpy(d, in, sizeof in) != weftSuccess ||
      weftDeviceMemcpy(out, d, sizeof out) != weftSuccess || strcmp(in, out) != 0) {
    printf("device test failed: %s\n", weftGetLastError(NULL));
    return 1;
  }
  printf("runtime %s: %s\n", weftDeviceRuntimeName(), out);
  return 0;
}
C
cc -std=c99 -Wall -o "$prefix/device" "$prefix/device.c" $(pkg-config --cflags --libs weft)
LD_LIBRARY_PATH="$libdir" WEFT_DEVICE=emulated "$prefix/device" | grep -q "runtime emulated: device round trip"
cc -std=c99 -Wall -o "$prefix/hello" "$src/examples/hello_allreduce.c" $(pkg-config --cflags --libs weft)
LD_LIBRARY_PATH="$libdir" "$prefix/bin/weftrun" -n 2 "$prefix/hello" | tee "$prefix/out.txt"
test "$(grep -c 'allreduce ok' "$prefix/out.txt")" = 2
# The NCCL shim from the install prefix: a program linked against libnccl.so.2 starts with only
# the shim's folder on LD_LIBRARY_PATH (its RUNPATH must find libweft.so.0 one folder up).
if [ -e "$libdir/weft-nccl/libnccl.so.2" ]; then
  cat > "$prefix/nccl_version.c" <<'C'
#include <stdio.h>
int ncclGetVersion(int* version);
int main(void) {
  int v = 0;
  int rc = ncclGetVersion(&v);
  printf("shim rc=%d version=%d\n", rc, v);
  return rc != 0 || v <= 0;
}
C
  cc -o "$prefix/nccl_version" "$prefix/nccl_version.c" -L"$libdir/weft-nccl" -l:libnccl.so.2
  env -u LD_LIBRARY_PATH LD_LIBRARY_PATH="$libdir/weft-nccl" "$prefix/nccl_version"
  # The nccl.h program on device buffers (bindings/nccl/tests/nccl_device_test.c), built
  # against the installed headers and shim, on 2 ranks of the emulated GPU. It calls weft's
  # device API itself (weftDeviceMalloc, weftDeviceStreamCreate), so it links libweft.so.0 too,
  # found through its own RUNPATH: the loader maps a program's direct libraries before the
  # shim's, so only the check above proves the shim's RUNPATH.
  nccl_inc=$(sed -n 's/^WEFT_NCCL_INCLUDE:PATH=//p' "$build/CMakeCache.txt")
  cudart_inc=$(sed -n 's/^WEFT_CUDART_INCLUDE:PATH=//p' "$build/CMakeCache.txt")
  cc -std=gnu11 -o "$prefix/nccl_device" "$src/bindings/nccl/tests/nccl_device_test.c" \
    -I"$prefix/include" -I"$nccl_inc" -I"$cudart_inc" -L"$libdir/weft-nccl" -l:libnccl.so.2 \
    -L"$libdir" -lweft -Wl,-rpath,"$libdir"
  env -u LD_LIBRARY_PATH LD_LIBRARY_PATH="$libdir/weft-nccl" WEFT_DEVICE=emulated:2 \
    "$prefix/bin/weftrun" -n 2 "$prefix/nccl_device" own | tee "$prefix/nccl_device.txt"
  test "$(grep -c ' 0 failed' "$prefix/nccl_device.txt")" = 2
else
  echo "install test: NCCL shim not built (no nccl.h at configure time): its install check skipped"
fi
# CMake consumers.
mkdir -p "$prefix/cmake-app"
cat > "$prefix/cmake-app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(app C)
find_package(weft REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE weft::weft)
CMAKE
cp "$src/examples/hello_allreduce.c" "$prefix/cmake-app/main.c"
cmake -S "$prefix/cmake-app" -B "$prefix/cmake-app/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cmake-app/build" >/dev/null
echo "install test: OK"
