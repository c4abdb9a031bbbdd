// CHECK(call): the tests/gpu programs' one way to fail on a CUDA runtime error: print the call
// and the error, exit 2 (a measurement program has nothing to recover).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)
