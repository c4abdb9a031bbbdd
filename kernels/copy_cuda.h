// The SM copy kernel (DeviceRuntime::LaunchCopy on CUDA): bytes moved by a grid of threads
// instead of the copy engine, for the small copies where a kernel launch beats the DMA set-up
// (transports/ipc/ipc_options.h's model decides). Asynchronous on `cudaStream` (a cudaStream_t
// as void*); dst and src are device memory (this GPU's or a peer's mapped through IPC) and do
// not overlap. Results: weftSuccess or weftUnhandledCudaError when the launch fails.
// Only built with WEFT_HAVE_CUDA, as reduce_cuda.h.
#pragma once

#include <cstddef>

#include "weft/weft.h"

namespace weft::kernels::cuda {

#ifdef WEFT_HAVE_CUDA
weftResult_t Copy(void* dst, const void* src, size_t bytes, void* cudaStream);
#endif

}  // namespace weft::kernels::cuda
