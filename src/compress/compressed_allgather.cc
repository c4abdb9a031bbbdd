// Compressed allgather: this rank's block is encoded once (with error feedback) and gathered
// with weftAllGather; every rank, the sender included, decodes all blocks from the same bytes,
// so all ranks hold bitwise-identical results.
//
// A composition of weft's public collectives, not yet a schedule proved by the checker (that
// needs encode/decode steps in the schedule IR: "Core v2", issue 14).
#include "compress/compress_common.h"
#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "kernels/codec.h"

namespace weft::compress {

Status RunAllGatherCompressed(const void* sendbuff, void* recvbuff, size_t sendcount,
                              weftDataType_t datatype, const weftCompression* spec,
                              float* residual, weftComm_t comm, weftStream_t stream) {
  int nranks = 0, rank = 0;
  if (comm != nullptr) WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
  WEFT_RETURN_IF_ERROR(CheckCompressedCall(comm, datatype, false, weftSum, spec, sendbuff,
                                           sendcount, recvbuff, sendcount * nranks));
  if (sendcount == 0) return OkStatus();
  return RunOnStream(stream, [=, spec = *spec]() -> Status {
    const size_t bytes = codec::EncodedBytes(spec, sendcount), total = sendcount * nranks;
    float* x = ScratchFloats(0, sendcount);
    LoadWithResidual(sendbuff, datatype, sendcount, residual, x);
    uint8_t* own = ScratchBytes(0, bytes);
    EncodeWithFeedback(spec, x, sendcount, own, static_cast<uint64_t>(rank) << 32, residual);
    uint8_t* gathered = ScratchBytes(1, bytes * nranks);
    WEFT_RETURN_IF_ERROR(FromResult(weftAllGather(own, gathered, bytes, weftUint8, comm, nullptr),
                                    "gathering encoded blocks (weftAllGather)", comm));
    float* result = datatype == weftFloat32 ? static_cast<float*>(recvbuff) : ScratchFloats(1, total);
    for (int r = 0; r < nranks; ++r)
      codec::Decode(spec, gathered + r * bytes, sendcount, result + r * sendcount);
    StoreAs(result, total, datatype, recvbuff);
    return OkStatus();
  });
}

}  // namespace weft::compress

extern "C" weftResult_t weftAllGatherCompressed(const void* sendbuff, void* recvbuff,
                                                size_t sendcount, weftDataType_t datatype,
                                                const weftCompression* spec, float* residual,
                                                weftComm_t comm, weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  return Report(RunAllGatherCompressed(sendbuff, recvbuff, sendcount, datatype, spec, residual,
                                       comm, stream)
                    .WithContext("weftAllGatherCompressed"));
}
