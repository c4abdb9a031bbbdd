// Compressed allgather: this rank's block is encoded once (with error feedback) and sent to
// every other rank; every rank, the sender included, decodes all blocks from the same bytes,
// so all ranks hold bitwise-identical results.
//
// Runs as the compressed schedule (algorithms/allgather_compressed.cc: encode/decode steps the
// checker proves) through the executor; error feedback is read back from its encoding. bf16
// values without a residual run the schedule on the caller's buffers (the encode reads bf16,
// the decodes write it: codec::EncodeValues / DecodeValues); with a residual they are widened
// into float32 first, since error feedback adds to and subtracts from float32 values.
#include "compress/compress_common.h"
#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "compress/compressed_schedule.h"
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
  const size_t elem = ElementBytes(datatype);
  const std::vector<WorkExtent> extents{{sendbuff, sendcount * elem, true, false},
                                        {recvbuff, sendcount * nranks * elem, false, true},
                                        {residual, sendcount * sizeof(float), true, true}};
  return RunCompressedCall(comm, stream, "weftAllGatherCompressed", extents,
                           [=, spec = *spec](const StagingMap& at) -> Status {
    const void* send = at(sendbuff);
    void* recv = at(recvbuff);
    float* res = static_cast<float*>(at(residual));
    if (res == nullptr) {
      ScheduleRequest shape;
      shape.collective = Collective::kAllGather;
      shape.count = sendcount;
      return RunCompressedRequestOn(comm, *FindCompressedAlgorithm(Collective::kAllGather), shape,
                                    spec, weftSum, datatype, send, recv,
                                    &CompressedScheduleScratch(), nullptr);
    }
    const size_t total = sendcount * nranks;
    float* x = ScratchFloats(0, sendcount);
    LoadWithResidual(send, datatype, sendcount, res, x);
    float* result = datatype == weftFloat32 ? static_cast<float*>(recv) : ScratchFloats(1, total);
    ResidualFeedback feedback;
    feedback.residual = res;
    WEFT_RETURN_IF_ERROR(RunCompressedSchedule(comm, Collective::kAllGather, sendcount, spec,
                                               weftSum, x, result, &CompressedScheduleScratch(),
                                               &feedback));
    StoreAs(result, total, datatype, recv);
    return OkStatus();
  });
}

}  // namespace weft::compress

extern "C" weftResult_t weftAllGatherCompressed(const void* sendbuff, void* recvbuff,
                                                size_t sendcount, weftDataType_t datatype,
                                                const weftCompression* spec, float* residual,
                                                weftComm_t comm, weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  return Report(weft::CatchExceptions([&] { return RunAllGatherCompressed(sendbuff, recvbuff, sendcount, datatype, spec, residual,
                                       comm, stream); })
                    .WithContext("weftAllGatherCompressed"));
}
