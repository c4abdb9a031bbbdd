// cuda_probe: what the NCCL shim needs to know about CUDA, without linking against it.
//
// libweft_nccl.so must load and work on a machine with no GPU and no CUDA driver, so the
// driver (libcuda.so.1) is opened with dlopen on first use. When it is absent every pointer
// is host memory and streams are never touched.
#ifndef WEFT_BINDINGS_NCCL_CUDA_PROBE_H_
#define WEFT_BINDINGS_NCCL_CUDA_PROBE_H_

namespace weft_nccl {

// True when ptr is CUDA device (or managed) memory according to the driver. Host memory,
// pinned host memory and any pointer on a machine without a driver give false.
bool IsDevicePointer(const void* ptr);

// True when this process can read the byte at `ptr` as host memory. A device pointer on a
// machine without a driver (or any unmapped address) gives false, so the shim refuses it
// instead of dereferencing it. One process_vm_readv of a byte, skipped for the two pointers
// this thread checked last (a training loop passes the same buffers every step).
bool IsReadableHostAddress(const void* ptr);

// Waits for the work enqueued so far on a cudaStream_t (NULL = legacy default stream), so a
// host-buffer collective observes what earlier stream work wrote. False if the driver
// reported an error; true (nothing to wait for) without a driver.
bool SynchronizeStream(void* stream);

// The current context's device ordinal, or -1 when there is no driver or no current context.
int CurrentDevice();

}  // namespace weft_nccl

#endif  // WEFT_BINDINGS_NCCL_CUDA_PROBE_H_
