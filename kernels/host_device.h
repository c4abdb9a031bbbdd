// WEFT_HOST_DEVICE: marks a function that both compilers build from one source — nvcc as
// host and device code (the cuda plugin's kernels), the host compiler as ordinary code (the
// CPU backend and the emulated GPU's kernels). Element operations, conversions and kernel
// bodies carry it; nothing else should.
#pragma once

#if defined(__CUDACC__)
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif
