/*
 * weft — device memory: a small API over the active device runtime.
 *
 * weft loads a device runtime at first use, chosen by WEFT_DEVICE: "cuda" (a real GPU; the
 * default when the CUDA plugin loads and finds one), "emulated[:N]" (N emulated GPUs on the CPU,
 * default 8: device memory that faults on any host access, asynchronous in-order streams; for
 * tests and development without a GPU) or "none" (no device: every pointer is host memory).
 * These calls are thin over that runtime, for tests, tools and anyone using the emulated GPU;
 * with CUDA, cudaMalloc'd pointers and cudaStream_t are accepted by weft as well.
 *
 * Every call returns a weftResult_t; weftGetLastError(NULL) gives the message of the last
 * failing call on this thread, naming the argument and its value.
 */
#ifndef WEFT_WEFT_DEVICE_H_
#define WEFT_WEFT_DEVICE_H_

#include <stddef.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Number of devices of the active runtime (0 with "none"). */
WEFT_API weftResult_t weftDeviceGetCount(int* count);
/** "cuda", "emulated" or "none". */
WEFT_API const char* weftDeviceRuntimeName(void);
/** Allocates bytes of device memory on `device` (bytes 0: *ptr = NULL). */
WEFT_API weftResult_t weftDeviceMalloc(void** ptr, size_t bytes, int device);
/**
 * Frees memory from weftDeviceMalloc (NULL: nothing to do).
 * On CUDA, freeing, allocating and copying to pageable host memory wait for the whole
 * device. With several ranks of one process on one GPU (threads), do them only while no
 * rank's collective is queued waiting for another rank: a free that waits for a peer's
 * stream which waits for this thread's next call never returns (NCCL's rule too).
 */
WEFT_API weftResult_t weftDeviceFree(void* ptr);
/**
 * Copies bytes from src to dst and returns when the copy is complete; the direction
 * (host/device, either way) comes from the pointers. Ordered after earlier work on the
 * default stream.
 */
WEFT_API weftResult_t weftDeviceMemcpy(void* dst, const void* src, size_t bytes);
/**
 * *device = the device whose memory ptr points into (allocated or imported by the active
 * runtime), or -1 for host memory (pageable or pinned) and for NULL. For bindings that must
 * tell device buffers from host ones (the NCCL shim).
 */
WEFT_API weftResult_t weftDevicePointerGetDevice(const void* ptr, int* device);
/** A stream of `device`: work queued on it runs asynchronously, in order. */
WEFT_API weftResult_t weftDeviceStreamCreate(weftStream_t* stream, int device);
/** Waits for the work queued on stream; returns the stream's first error. NULL: default stream. */
WEFT_API weftResult_t weftDeviceStreamSynchronize(weftStream_t stream);
/** Finishes the queued work, then destroys the stream. */
WEFT_API weftResult_t weftDeviceStreamDestroy(weftStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_WEFT_DEVICE_H_ */
