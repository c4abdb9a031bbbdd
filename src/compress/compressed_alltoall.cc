// Compressed all-to-all(v) for token dispatch (e.g. MoE with fp8 and one scale per 128
// channels): every block bound for a peer is encoded on its own, the encodings are exchanged
// with weftAllToAllv on uint8 (sizes follow from the element counts, so every receive is
// exact-size), and each received block is decoded into place. No error feedback: tokens are
// not accumulated across calls.
//
// Runs as the compressed all-to-all(v) schedule (algorithms/alltoallv_compressed.cc), proved by
// the checker, through the executor: the same encodings (stream rank << 32 | destination) and
// decodes as the composition over weftAllToAllv it replaced, so the same bits. float32 and bf16
// tokens run the schedule on the caller's buffers as they are: the encodes read bf16 values
// and the decodes write them (codec::EncodeValues / DecodeValues), with no float32 copy of
// either buffer, and the bits of the float32 call on the widened tokens, rounded to bf16.
#include <algorithm>
#include <string>
#include <vector>

#include "compress/compress_common.h"
#include "core/api_internal.h"
#include "compress/compress_error.h"
#include "algorithms/compressed.h"
#include "compress/compressed_schedule.h"
#include "kernels/codec.h"

namespace weft::compress {
namespace {

// Element counts and displacements of one all-to-all-v call (this rank's).
struct Layout {
  const size_t* sendcounts;
  const size_t* sdispls;
  const size_t* recvcounts;
  const size_t* rdispls;
};

// The plain all-to-allv's table checks (NULL tables, counts and displacements whose sums
// overflow), with the elements' size.
Status CheckLayout(const Layout& l, int nranks, size_t elem, size_t* send_extent,
                   size_t* recv_extent) {
  if (!l.sendcounts || !l.sdispls || !l.recvcounts || !l.rdispls)
    return InvalidArgument(std::string(!l.sendcounts ? "sendcounts" : !l.sdispls ? "sdispls"
                                       : !l.recvcounts ? "recvcounts" : "rdispls") + " is NULL");
  WEFT_RETURN_IF_ERROR(CheckBlockTable("send", l.sendcounts, l.sdispls, nranks, elem, send_extent));
  return CheckBlockTable("recv", l.recvcounts, l.rdispls, nranks, elem, recv_extent);
}

// The request of this rank's plan: its send row and receive column of the count table (the
// schedule of rank r reads nothing else), as elements of float32.
ScheduleRequest AllToAllvShape(const Layout& l, int nranks, int rank) {
  ScheduleRequest shape;
  shape.collective = Collective::kAllToAllv;
  shape.nranks = nranks;
  const size_t n = static_cast<size_t>(nranks);
  shape.a2av_counts.assign(n * n, 0);
  shape.a2av_send_displs.assign(n * n, 0);
  shape.a2av_recv_displs.assign(n * n, 0);
  for (size_t q = 0; q < n; ++q) {
    shape.a2av_counts[rank * n + q] = l.sendcounts[q];
    shape.a2av_send_displs[rank * n + q] = l.sdispls[q];
    shape.a2av_counts[q * n + rank] = l.recvcounts[q];
    shape.a2av_recv_displs[rank * n + q] = l.rdispls[q];
  }
  return shape;
}

// Runs the compressed all-to-all(v) schedule (algorithms/alltoallv_compressed.cc, proved by the
// checker) on the caller's buffers, float32 or bf16 values alike.
Status AllToAllvCompressed(const void* sendbuff, const Layout& l, void* recvbuff,
                           weftDataType_t datatype, const weftCompression& spec, int nranks,
                           int rank, weftComm_t comm) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(Collective::kAllToAllv);
  if (algorithm == nullptr) return InternalError("no compressed all-to-allv schedule");
  return RunCompressedRequestOn(comm, *algorithm, AllToAllvShape(l, nranks, rank), spec, weftSum,
                                datatype, sendbuff, recvbuff, &CompressedScheduleScratch(),
                                nullptr);
}

Status RunAllToAllv(const void* sendbuff, const Layout& l, void* recvbuff, weftDataType_t datatype,
                    const weftCompression* spec, weftComm_t comm, weftStream_t stream) {
  int nranks = 0, rank = 0;
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
  size_t send_extent = 0, recv_extent = 0;
  const size_t elem = ElementBytes(datatype);  // a datatype it does not take fails below
  WEFT_RETURN_IF_ERROR(CheckLayout(l, nranks, elem, &send_extent, &recv_extent));
  WEFT_RETURN_IF_ERROR(CheckCompressedCall(comm, datatype, false, weftSum, spec, sendbuff,
                                           send_extent, recvbuff, recv_extent));
  // A queued call outlives the caller's count tables (weftAllToAllCompressed's are its own
  // locals): it keeps copies.
  auto copy = [nranks](const size_t* t) { return std::vector<size_t>(t, t + nranks); };
  // The receive buffer is read too: a staged call's copy back must keep what the call leaves
  // alone (the gaps between blocks).
  const std::vector<WorkExtent> extents{{sendbuff, send_extent * elem, true, false},
                                        {recvbuff, recv_extent * elem, true, true}};
  return RunCompressedCall(comm, stream, "weftAllToAllvCompressed", extents,
                           [=, spec = *spec, sc = copy(l.sendcounts), sd = copy(l.sdispls),
                            rc = copy(l.recvcounts), rd = copy(l.rdispls)](const StagingMap& at) {
    const Layout own{sc.data(), sd.data(), rc.data(), rd.data()};
    return AllToAllvCompressed(at(sendbuff), own, at(recvbuff), datatype, spec, nranks, rank,
                               comm);
  });
}

}  // namespace
}  // namespace weft::compress

extern "C" {

weftResult_t weftAllToAllvCompressed(const void* sendbuff, const size_t* sendcounts,
                                     const size_t* sdispls, void* recvbuff,
                                     const size_t* recvcounts, const size_t* rdispls,
                                     weftDataType_t datatype, const weftCompression* spec,
                                     weftComm_t comm, weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  const Layout layout{sendcounts, sdispls, recvcounts, rdispls};
  return weft::compress::Report(weft::CatchExceptions([&] {
                  return RunAllToAllv(sendbuff, layout, recvbuff, datatype, spec, comm, stream);
                }).WithContext("weftAllToAllvCompressed"));
}

weftResult_t weftAllToAllCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                    weftDataType_t datatype, const weftCompression* spec,
                                    weftComm_t comm, weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  weft::Status st = weft::CatchExceptions([&]() -> weft::Status {
    int nranks = 0, rank = 0;
    if (comm == nullptr) return weft::InvalidArgument("comm is NULL");
    WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
    // The block displacements p * count must fit before they are computed.
    WEFT_RETURN_IF_ERROR(weft::CheckCount("count", count, static_cast<size_t>(nranks),
                                          ElementBytes(datatype)));
    std::vector<size_t> counts(nranks, count), displs(nranks);
    for (int p = 0; p < nranks; ++p) displs[p] = static_cast<size_t>(p) * count;
    const Layout layout{counts.data(), displs.data(), counts.data(), displs.data()};
    return RunAllToAllv(sendbuff, layout, recvbuff, datatype, spec, comm, stream);
  });
  return weft::compress::Report(st.WithContext("weftAllToAllCompressed"));
}

}  // extern "C"
