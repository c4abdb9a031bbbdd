// The CPU KernelBackend: argument checks, then the kernels of kernels/reduce.h; every call
// completes before it returns.
#include "kernels/kernel_backend.h"

#include <new>
#include <string>

#include "common/huge_pages.h"
#include "kernels/codec.h"
#include "kernels/codec_backend.h"
#include "kernels/dtype.h"
#include "kernels/element_ops.h"
#include "kernels/reduce.h"

namespace weft {

Status KernelBackend::Encode(const MemRef&, const MemRef&, size_t, weftDataType_t,
                             const weftCompression& spec, uint64_t, size_t*, KernelRequest*) {
  return InvalidUsage(std::string(name()) + " kernel backend: encode with codec " +
                      codec::CodecName(spec.codec) + " is not implemented");
}

Status KernelBackend::Decode(const MemRef&, const MemRef&, size_t, weftDataType_t,
                             const weftCompression& spec, KernelRequest*) {
  return InvalidUsage(std::string(name()) + " kernel backend: decode with codec " +
                      codec::CodecName(spec.codec) + " is not implemented");
}

Status KernelBackend::DecodeReduce(const MemRef&, const MemRef&, size_t,
                                   const weftCompression& spec, weftRedOp_t, KernelRequest*) {
  return InvalidUsage(std::string(name()) + " kernel backend: decode_reduce with codec " +
                      codec::CodecName(spec.codec) + " is not implemented");
}

StatusOr<MemRef> KernelBackend::Allocate(size_t bytes, MemKind kind, int) {
  return InvalidUsage(std::string(name()) + " kernel backend: cannot allocate " +
                      std::to_string(bytes) + " bytes of " + MemKindName(kind) + " memory");
}

void KernelBackend::Release(const MemRef&) {}

namespace {

// `what` must hold at least `bytes` of memory this backend can touch. The test is inline (it
// runs for every operand of every kernel, the tiny collective's included); the message is
// built out of line, only on failure.
[[gnu::cold, gnu::noinline]] Status OperandError(const MemRef& m, size_t bytes, const char* what) {
  if (m.kind == MemKind::kCudaDevice)
    return InvalidArgument(std::string("cpu kernel backend: ") + what + " is " +
                           MemKindName(m.kind) + " memory (device " + std::to_string(m.device) +
                           "), which the CPU cannot access");
  if (bytes > 0 && m.ptr == nullptr)
    return InvalidArgument(std::string("cpu kernel backend: ") + what + " is null");
  return InvalidArgument(std::string("cpu kernel backend: ") + what + " holds " +
                         std::to_string(m.bytes) + " bytes, the call needs " + std::to_string(bytes));
}

inline Status CheckOperand(const MemRef& m, size_t bytes, const char* what) {
  if (m.kind != MemKind::kCudaDevice && (bytes == 0 || m.ptr != nullptr) && m.bytes >= bytes)
    return OkStatus();
  return OperandError(m, bytes, what);
}

Status CheckType(weftDataType_t dtype, const char* what) {
  if (!IsValidDataType(dtype))
    return InvalidArgument(std::string("cpu kernel backend: ") + what + " " +
                           std::to_string(static_cast<int>(dtype)) + " is not a valid weftDataType_t");
  return OkStatus();
}

// Streaming stores are worth their fence only for copies of a few pages or more.
constexpr size_t kStreamingMinBytes = size_t{16} << 10;

class CpuBackend final : public KernelBackend {
 public:
  const char* name() const override { return "cpu"; }
  bool Supports(MemKind kind) const override { return kind != MemKind::kCudaDevice; }
  bool CompletesAtIssue() const override { return true; }

  Status Copy(const MemRef& dst, const MemRef& src, KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CheckOperand(src, src.bytes, "src"));
    WEFT_RETURN_IF_ERROR(CheckOperand(dst, src.bytes, "dst"));
    if (dst.ptr != src.ptr) {
      if (dst.kind == MemKind::kHostShared)
        kernels::CopyToShared(dst.ptr, src.ptr, src.bytes);  // a publish: another core reads it
      else if (dst.streaming && src.bytes >= kStreamingMinBytes)
        kernels::CopyStreaming(dst.ptr, src.ptr, src.bytes);
      else
        kernels::Copy(dst.ptr, src.ptr, src.bytes);
    }
    req->Complete();
    return OkStatus();
  }

  Status Reduce(const MemRef& dst, const MemRef& a, const MemRef& b, size_t count,
                weftDataType_t dtype, weftRedOp_t op, KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CheckType(dtype, "dtype"));
    if (!IsValidRedOp(op))
      return InvalidArgument("cpu kernel backend: op " + std::to_string(static_cast<int>(op)) +
                             " is not a valid weftRedOp_t");
    const size_t bytes = count * TypeSize(dtype);
    WEFT_RETURN_IF_ERROR(CheckOperand(a, bytes, "a"));
    WEFT_RETURN_IF_ERROR(CheckOperand(b, bytes, "b"));
    WEFT_RETURN_IF_ERROR(CheckOperand(dst, bytes, "dst"));
    kernels::Reduce(dst.ptr, a.ptr, b.ptr, count, dtype, op);
    req->Complete();
    return OkStatus();
  }

  Status Finalize(const MemRef& dst, size_t count, weftDataType_t dtype, weftRedOp_t op,
                  int divisor, KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CheckType(dtype, "dtype"));
    WEFT_RETURN_IF_ERROR(CheckOperand(dst, count * TypeSize(dtype), "dst"));
    kernels::Finalize(dst.ptr, count, dtype, op, divisor);
    req->Complete();
    return OkStatus();
  }

  Status Cast(const MemRef& dst, weftDataType_t dst_type, const MemRef& src,
              weftDataType_t src_type, size_t count, KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CheckType(dst_type, "dst_type"));
    WEFT_RETURN_IF_ERROR(CheckType(src_type, "src_type"));
    WEFT_RETURN_IF_ERROR(CheckOperand(src, count * TypeSize(src_type), "src"));
    WEFT_RETURN_IF_ERROR(CheckOperand(dst, count * TypeSize(dst_type), "dst"));
    if (src_type == dst_type) return Copy(dst, src.Slice(0, count * TypeSize(src_type)), req);
    if (!kernels::IsFloatingType(src_type) || !kernels::IsFloatingType(dst_type))
      return InvalidArgument("cpu kernel backend: cast from type " +
                             std::to_string(static_cast<int>(src_type)) + " to " +
                             std::to_string(static_cast<int>(dst_type)) +
                             ": only floating types convert into each other");
    // Rounds to nearest even; float16/bfloat16 go through float32 (one rounding from float32
    // or narrower sources, two from float64). Shared with the device kernels.
    kernels::CastBody(dst.ptr, dst_type, src.ptr, src_type, 0, count, 1);
    req->Complete();
    return OkStatus();
  }

  // Host memory only: pinned or device memory comes from a device runtime's backend.
  StatusOr<MemRef> Allocate(size_t bytes, MemKind kind, int device) override {
    if (kind != MemKind::kHost)
      return InvalidArgument(std::string("cpu kernel backend: cannot allocate ") +
                             MemKindName(kind) + " memory (kind=" +
                             std::to_string(static_cast<int>(kind)) + ")");
    (void)device;
    // Not filled, so growing a buffer does not fault in pages that a receive is about to
    // overwrite (measured on large compressed calls); large ones on huge pages (huge_pages.h).
    void* p = AllocateHostBuffer(bytes);
    if (bytes != 0 && p == nullptr)
      return Status(weftSystemError, "cpu kernel backend: out of memory allocating " +
                                         std::to_string(bytes) + " bytes of scratch");
    return MemRef::Host(p, bytes);
  }
  void Release(const MemRef& mem) override { FreeHostBuffer(mem.ptr, mem.bytes); }

  // The codec hooks (kernels/codec_backend.cc).
  Status Encode(const MemRef& dst, const MemRef& src, size_t count, weftDataType_t dtype,
                const weftCompression& spec, uint64_t stream, size_t* encoded_bytes,
                KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CpuEncode(dst, src, count, spec, stream, encoded_bytes, dtype));
    req->Complete();
    return OkStatus();
  }
  Status Decode(const MemRef& dst, const MemRef& src, size_t count, weftDataType_t dtype,
                const weftCompression& spec, KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CpuDecode(dst, src, count, spec, dtype));
    req->Complete();
    return OkStatus();
  }
  Status DecodeReduce(const MemRef& dst, const MemRef& src, size_t count,
                      const weftCompression& spec, weftRedOp_t op, KernelRequest* req) override {
    WEFT_RETURN_IF_ERROR(CpuDecodeReduce(dst, src, count, spec, op));
    req->Complete();
    return OkStatus();
  }
};

}  // namespace

KernelBackend& CpuKernelBackend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace weft
