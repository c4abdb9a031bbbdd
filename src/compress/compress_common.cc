// Shared pieces of the compressed collectives: see compress_common.h.
#include "compress/compress_common.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/api_internal.h"  // host streams: the compressed call queues like any other
#include "core/device_calls.h"
#include "kernels/codec.h"
#include "kernels/codec_table.h"
#include "kernels/half.h"

namespace weft::compress {

Status CheckCompressedCall(weftComm_t comm, weftDataType_t datatype, bool has_op, weftRedOp_t op,
                           const weftCompression* spec, const void* sendbuff, size_t send_elements,
                           const void* recvbuff, size_t recv_elements) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  if (datatype != weftFloat32 && datatype != weftBfloat16)
    return InvalidArgument("datatype=" + std::to_string(static_cast<int>(datatype)) +
                           " is not supported by compressed collectives (weftFloat32 or "
                           "weftBfloat16 only)");
  if (has_op && op != weftSum && op != weftAvg)
    return InvalidArgument("op=" + std::to_string(static_cast<int>(op)) +
                           " is not supported by compressed collectives (weftSum or weftAvg only)");
  if (spec == nullptr) return InvalidArgument("spec is NULL");
  const std::string problem = codec::ValidateSpec(*spec);
  if (!problem.empty()) return InvalidArgument(problem);
  // Sizes derived from the counts (float32 staging, encodings of up to
  // codec::kMaxEncodedBytesPerValue a value) must not wrap: check before any is computed.
  WEFT_RETURN_IF_ERROR(CheckCount("count", send_elements, codec::kMaxEncodedBytesPerValue, 1));
  WEFT_RETURN_IF_ERROR(CheckCount("receive count", recv_elements, codec::kMaxEncodedBytesPerValue, 1));
  if (sendbuff == nullptr && send_elements > 0)
    return InvalidArgument("sendbuff is NULL with count=" + std::to_string(send_elements));
  if (recvbuff == nullptr && recv_elements > 0)
    return InvalidArgument("recvbuff is NULL with count=" + std::to_string(recv_elements));
  if (spec->codec == weftCodecTopK && send_elements > 0xFFFFFFFFull)
    return InvalidArgument("count=" + std::to_string(send_elements) +
                           " exceeds top-k's 32-bit indices");
  return OkStatus();
}

Status FromResult(weftResult_t result, const char* what, weftComm_t comm) {
  if (result == weftSuccess) return OkStatus();
  return Status(result, std::string(what) + ": " + weftGetLastError(comm));
}

Status CommShape(weftComm_t comm, int* nranks, int* rank) {
  WEFT_RETURN_IF_ERROR(FromResult(weftCommCount(comm, nranks), "weftCommCount", comm));
  return FromResult(weftCommUserRank(comm, rank), "weftCommUserRank", comm);
}

Status RunCompressedCall(weftComm_t comm, weftStream_t stream, const char* what,
                         const std::vector<WorkExtent>& extents,
                         std::function<Status(const StagingMap&)> call) {
  if (TouchesDevice(extents, stream)) return StageHostWork(comm, extents, std::move(call), stream, what);
  return RunOnStream(stream, [call = std::move(call)] {
    return call([](const void* p) { return const_cast<void*>(p); });
  });
}

Status RunOnStream(weftStream_t stream, std::function<Status()> call) {
  if (stream == nullptr) return call();
  HostStream* hs = LookupStream(stream);
  if (hs == nullptr)
    return InvalidArgument("stream=" + PtrStr(stream) + " is not a weft host stream (use NULL or weftStreamCreate)");
  EnqueueOnStream(hs, std::move(call));
  return OkStatus();
}

size_t ElementBytes(weftDataType_t datatype) { return datatype == weftBfloat16 ? 2 : 4; }

namespace {

// The passes error feedback adds to a call over all of its values: O3 vectorizes them (the
// build's O2 does not: it would need a check that the buffers do not overlap).
#pragma GCC push_options
#pragma GCC optimize("O3")

void AddResidual(const float* __restrict values, const float* __restrict residual, size_t n,
                 float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = values[i] + residual[i];
}

void AddResidualInPlace(const float* __restrict residual, size_t n, float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] += residual[i];
}

// Residual blocks of 1 KiB: one test and, where it holds a nonzero, one clear each.
constexpr size_t kClearBlock = 256;

// Whether residual[0, n) holds any nonzero bit (-0.0 counts: it is cleared to +0.0 too).
bool AnyNonzero(const float* __restrict residual, size_t n) {
  uint32_t any = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, residual + i, sizeof(bits));
    any |= bits;
  }
  return any != 0;
}

// out = values + residual, then residual = 0 where it was not already.
void AddAndZeroResidual(const float* __restrict values, float* __restrict residual, size_t n,
                        float* __restrict out) {
  for (size_t i = 0; i < n; i += kClearBlock) {
    const size_t m = std::min(kClearBlock, n - i);
    for (size_t j = 0; j < m; ++j) out[i + j] = values[i + j] + residual[i + j];
    if (AnyNonzero(residual + i, m)) std::memset(residual + i, 0, m * sizeof(float));
  }
}

void ZeroResidual(float* __restrict residual, size_t n) {
  for (size_t i = 0; i < n; i += kClearBlock) {
    const size_t m = std::min(kClearBlock, n - i);
    if (AnyNonzero(residual + i, m)) std::memset(residual + i, 0, m * sizeof(float));
  }
}

#pragma GCC pop_options

}  // namespace

void LoadWithResidual(const void* in, weftDataType_t datatype, size_t count,
                      const float* residual, float* out) {
  if (datatype == weftBfloat16) {
    codec::ActiveCodecKernels().from_cast[weftCodecBf16](static_cast<const uint16_t*>(in), count, out);
  } else if (in != out) {
    if (residual != nullptr)  // one pass: the copy and the sum
      return AddResidual(static_cast<const float*>(in), residual, count, out);
    std::memcpy(out, in, count * sizeof(float));
  }
  if (residual != nullptr) AddResidualInPlace(residual, count, out);
}

namespace {

// Calls fn(begin, end, inside) over [0, count) cut at the sorted, disjoint `ranges`: the gaps
// (inside false) and the ranges (inside true), in order, each non-empty.
template <typename Fn>
void ForGapsAndRanges(size_t count, const std::vector<ElementRange>& ranges, Fn fn) {
  size_t at = 0;
  for (size_t k = 0; k <= ranges.size(); ++k) {
    const size_t gap_end = k < ranges.size() ? std::min(ranges[k].begin, count) : count;
    if (gap_end > at) fn(at, gap_end, false);
    if (k == ranges.size()) return;
    at = std::max(at, gap_end);
    const size_t end = std::min(ranges[k].end, count);
    if (end > at) fn(at, end, true);
    at = std::max(at, end);
  }
}

}  // namespace

void TakeResidual(const void* in, weftDataType_t datatype, size_t count, float* residual,
                  float* out, const std::vector<ElementRange>& stored) {
  const bool fused = datatype == weftFloat32 && in != out;
  if (!fused) LoadWithResidual(in, datatype, count, residual, out);
  const float* values = static_cast<const float*>(in);
  // The gaps between the stored ranges are taken (added and zeroed), the ranges only added.
  ForGapsAndRanges(count, stored, [&](size_t lo, size_t hi, bool inside) {
    if (!fused) {
      if (!inside) ZeroResidual(residual + lo, hi - lo);
    } else if (inside) {
      AddResidual(values + lo, residual + lo, hi - lo, out + lo);
    } else {
      AddAndZeroResidual(values + lo, residual + lo, hi - lo, out + lo);
    }
  });
}

bool ResidualZeroOutside(const float* residual, size_t count, const std::vector<ElementRange>& ranges) {
  bool zero = true;
  ForGapsAndRanges(count, ranges, [&](size_t lo, size_t hi, bool inside) {
    for (size_t i = lo; zero && !inside && i < hi; i += kClearBlock)
      zero = !AnyNonzero(residual + i, std::min(kClearBlock, hi - i));
  });
  return zero;
}

void StoreAs(const float* values, size_t count, weftDataType_t datatype, void* out) {
  if (datatype == weftBfloat16) {
    codec::ActiveCodecKernels().to_cast[weftCodecBf16](values, count, static_cast<uint16_t*>(out));
  } else if (values != out) {
    std::memcpy(out, values, count * sizeof(float));
  }
}

size_t SliceCount(size_t count, int nranks, int r) {
  const size_t n = static_cast<size_t>(nranks);
  return count / n + (static_cast<size_t>(r) < count % n ? 1 : 0);
}

size_t SliceOffset(size_t count, int nranks, int r) {
  const size_t n = static_cast<size_t>(nranks), i = static_cast<size_t>(r);
  return i * (count / n) + std::min(i, count % n);
}

float* ScratchFloats(int slot, size_t count) {
  thread_local std::vector<float> buffers[kScratchSlots];
  if (buffers[slot].size() < count) buffers[slot].resize(count);
  return buffers[slot].data();
}

uint8_t* ScratchBytes(int slot, size_t count) {
  thread_local std::vector<uint8_t> buffers[kScratchSlots];
  if (buffers[slot].size() < count) buffers[slot].resize(count);
  return buffers[slot].data();
}

void EncodeWithFeedback(const weftCompression& spec, const float* values, size_t count,
                        uint8_t* encoded, uint64_t stream, float* residual) {
  codec::Encode(spec, values, count, encoded, stream);
  if (residual == nullptr) return;
  codec::DroppedIntoResidual(spec, encoded, count, values, codec::Feedback::kStore, 1.0f, residual);
}

}  // namespace weft::compress
