// KernelBackend: the one interface local (kernel) steps go through — copy, reduce, finalize,
// cast, and the encode/decode hooks compression fills in — on MemRefs, with asynchronous
// completion, so that the executor can treat a local step like a send: issue it, then poll
// its request. The CPU backend runs the kernels at issue and completes at once; a CUDA
// backend will enqueue on a stream and complete through an event.
//
// The (dtype, op) -> kernel dispatch stays in one place, kernels/reduce.h (reduce_table.h):
// the CPU backend calls it, it does not duplicate it.
//
// Errors: operands that do not fit (a MemRef shorter than count * element size), invalid
// dtype/op, and memory kinds the backend cannot touch fail with a Status naming the argument
// and value; nothing is written then.
#pragma once

#include <cstddef>

#include "common/memref.h"
#include "common/status.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft {

// Completion of one kernel call. `done` is set once the destination holds the result;
// `status` is meaningful then.
struct KernelRequest {
  bool done = false;
  Status status;
  void Complete(Status s = Status()) {
    status = std::move(s);
    done = true;
  }
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual const char* name() const = 0;
  // Whether the backend's kernels can read and write memory of this kind.
  virtual bool Supports(MemKind kind) const = 0;

  // dst = src, src.bytes bytes (dst at least as long).
  virtual Status Copy(const MemRef& dst, const MemRef& src, KernelRequest* req) = 0;
  // dst = a (op) b, `count` elements (kernels/reduce.h semantics; dst may alias a or b).
  virtual Status Reduce(const MemRef& dst, const MemRef& a, const MemRef& b, size_t count,
                        weftDataType_t dtype, weftRedOp_t op, KernelRequest* req) = 0;
  // weftAvg's division by `divisor`, once, at the end (a no-op for other ops).
  virtual Status Finalize(const MemRef& dst, size_t count, weftDataType_t dtype, weftRedOp_t op,
                          int divisor, KernelRequest* req) = 0;
  // dst (dst_type) = src (src_type), `count` elements of floating types, rounding to nearest
  // even (a float64 source narrowed to float16/bfloat16 rounds through float32); the same
  // type is a copy.
  virtual Status Cast(const MemRef& dst, weftDataType_t dst_type, const MemRef& src,
                      weftDataType_t src_type, size_t count, KernelRequest* req) = 0;
  // Compression hooks (kernels/codec.h semantics): encode `count` values of src, of type
  // `dtype`, with `spec` into dst (at least codec::EncodedBytes(spec, count) bytes), drawing
  // stochastic rounding from `stream`, and report the bytes written in *encoded_bytes; decode
  // `count` values from src, whose `bytes` must be exactly the encoded size (a shorter or
  // longer encoding is a mismatched codec or a corrupt message), into dst of type `dtype`;
  // decode_reduce sets dst = dst (op) decode(src), float32. The CPU backend's encode and
  // decode take float32 or bf16 values (codec::EncodeValues / DecodeValues); a backend that
  // takes float32 only refuses another dtype by name. The base class refuses them all (a
  // backend without codecs).
  virtual Status Encode(const MemRef& dst, const MemRef& src, size_t count, weftDataType_t dtype,
                        const weftCompression& spec, uint64_t stream, size_t* encoded_bytes,
                        KernelRequest* req);
  virtual Status Decode(const MemRef& dst, const MemRef& src, size_t count, weftDataType_t dtype,
                        const weftCompression& spec, KernelRequest* req);
  virtual Status DecodeReduce(const MemRef& dst, const MemRef& src, size_t count,
                              const weftCompression& spec, weftRedOp_t op, KernelRequest* req);
  // Scratch memory of `kind` the backend's kernels can touch (executor scratch, receive
  // landing buffers), `bytes` long, not initialized; Release gives it back. The executor
  // allocates every buffer of its own here, so a schedule's scratch has the kind its
  // communicator chose (host for the CPU backend; device or pinned memory for a device
  // backend) and never a std::vector's. The base class refuses (a backend without memory).
  virtual StatusOr<MemRef> Allocate(size_t bytes, MemKind kind, int device);
  virtual void Release(const MemRef& mem);
  // Moves outstanding work forward; true once `req` is done (the CPU backend: always).
  virtual bool Poll(KernelRequest* req) { return req->done; }
  // True when every call completes before it returns (the CPU backend): the executor then
  // keeps a local step's request on its stack instead of a slot in flight.
  virtual bool CompletesAtIssue() const { return false; }
};

// The host backend (process-wide, stateless): vectorized kernels of kernels/reduce.h.
KernelBackend& CpuKernelBackend();

}  // namespace weft
