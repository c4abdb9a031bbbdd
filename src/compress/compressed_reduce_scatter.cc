// Compressed reduce-scatter: each of this rank's nranks slices is encoded once (with error
// feedback), exchanged with weftAllToAll so that rank r receives every rank's encoding of
// slice r, then decoded and added in float32 in rank order (avg: one division at the end).
// The reduced slice is not re-encoded: the output is the exact float32 sum of the decoded
// contributions (rounded once to bf16 for bf16 outputs).
//
// A composition of weft's public collectives, not yet a schedule proved by the checker (that
// needs encode/decode steps in the schedule IR: "Core v2", issue 14).
#include "compress/compress_common.h"
#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "kernels/codec.h"

namespace weft::compress {

Status RunReduceScatterCompressed(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  weftDataType_t datatype, weftRedOp_t op,
                                  const weftCompression* spec, float* residual, weftComm_t comm,
                                  weftStream_t stream) {
  int nranks = 0, rank = 0;
  if (comm != nullptr) WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
  WEFT_RETURN_IF_ERROR(CheckCompressedCall(comm, datatype, true, op, spec, sendbuff,
                                           recvcount * nranks, recvbuff, recvcount));
  if (recvcount == 0) return OkStatus();
  return RunOnStream(stream, [=, spec = *spec]() -> Status {
    const size_t total = recvcount * nranks, bytes = codec::EncodedBytes(spec, recvcount);
    float* x = ScratchFloats(0, total);
    LoadWithResidual(sendbuff, datatype, total, residual, x);
    uint8_t* send = ScratchBytes(0, bytes * nranks);
    for (int r = 0; r < nranks; ++r)
      EncodeWithFeedback(spec, x + r * recvcount, recvcount, send + r * bytes,
                         (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(r),
                         residual ? residual + r * recvcount : nullptr);
    uint8_t* received = ScratchBytes(1, bytes * nranks);
    WEFT_RETURN_IF_ERROR(FromResult(weftAllToAll(send, received, bytes, weftUint8, comm, nullptr),
                                    "exchanging encoded contributions (weftAllToAll)", comm));
    float* sum = ScratchFloats(1, recvcount);
    float* contribution = ScratchFloats(2, recvcount);
    codec::Decode(spec, received, recvcount, sum);
    for (int q = 1; q < nranks; ++q) {
      codec::Decode(spec, received + q * bytes, recvcount, contribution);
      for (size_t i = 0; i < recvcount; ++i) sum[i] += contribution[i];
    }
    if (op == weftAvg && nranks > 1)
      for (size_t i = 0; i < recvcount; ++i) sum[i] /= static_cast<float>(nranks);
    StoreAs(sum, recvcount, datatype, recvbuff);
    return OkStatus();
  });
}

}  // namespace weft::compress

extern "C" weftResult_t weftReduceScatterCompressed(const void* sendbuff, void* recvbuff,
                                                    size_t recvcount, weftDataType_t datatype,
                                                    weftRedOp_t op, const weftCompression* spec,
                                                    float* residual, weftComm_t comm,
                                                    weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  return Report(RunReduceScatterCompressed(sendbuff, recvbuff, recvcount, datatype, op, spec,
                                           residual, comm, stream)
                    .WithContext("weftReduceScatterCompressed"));
}
