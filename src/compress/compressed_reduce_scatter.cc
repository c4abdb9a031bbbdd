// Compressed reduce-scatter: each of this rank's nranks slices is encoded once (with error
// feedback), sent to its owner so that rank r receives every rank's encoding of
// slice r, then decoded and added in float32 in rank order (avg: one division at the end).
// The reduced slice is not re-encoded: the output is the exact float32 sum of the decoded
// contributions (rounded once to bf16 for bf16 outputs).
//
// Runs as the compressed schedule (algorithms/reducescatter_compressed.cc: encode/decode steps
// the checker proves) through the executor; error feedback is read back from its encodings.
#include "compress/compress_common.h"
#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "compress/compressed_schedule.h"
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
  const size_t elem = ElementBytes(datatype);
  const std::vector<WorkExtent> extents{{sendbuff, recvcount * nranks * elem, true, false},
                                        {recvbuff, recvcount * elem, false, true},
                                        {residual, recvcount * nranks * sizeof(float), true, true}};
  return RunCompressedCall(comm, stream, "weftReduceScatterCompressed", extents,
                           [=, spec = *spec](const StagingMap& at) -> Status {
    void* recv = at(recvbuff);
    float* res = static_cast<float*>(at(residual));
    const size_t total = recvcount * nranks;
    float* x = ScratchFloats(0, total);
    LoadWithResidual(at(sendbuff), datatype, total, res, x);
    float* result = datatype == weftFloat32 ? static_cast<float*>(recv) : ScratchFloats(1, recvcount);
    ResidualFeedback feedback;
    feedback.residual = res;
    WEFT_RETURN_IF_ERROR(RunCompressedSchedule(comm, Collective::kReduceScatter, recvcount, spec,
                                               op, x, result, &CompressedScheduleScratch(), &feedback));
    StoreAs(result, recvcount, datatype, recv);
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
  return Report(weft::CatchExceptions([&] { return RunReduceScatterCompressed(sendbuff, recvbuff, recvcount, datatype, op, spec,
                                           residual, comm, stream); })
                    .WithContext("weftReduceScatterCompressed"));
}
