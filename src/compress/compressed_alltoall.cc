// Compressed all-to-all(v) for token dispatch (e.g. MoE with fp8 and one scale per 128
// channels): every block bound for a peer is encoded on its own, the encodings are exchanged
// with weftAllToAllv on uint8 (sizes follow from the element counts, so every receive is
// exact-size), and each received block is decoded into place. No error feedback: tokens are
// not accumulated across calls.
//
// A composition of weft's public collectives, not yet a schedule proved by the checker (that
// needs encode/decode steps in the schedule IR: "Core v2", issue 14).
#include <algorithm>
#include <string>
#include <vector>

#include "compress/compress_common.h"
#include "compress/compress_error.h"
#include "kernels/codec.h"

namespace weft::compress {
namespace {

// Element counts and displacements of one all-to-all-v call.
struct Layout {
  const size_t* sendcounts;
  const size_t* sdispls;
  const size_t* recvcounts;
  const size_t* rdispls;
};

Status CheckLayout(const Layout& l, int nranks, size_t* send_extent, size_t* recv_extent) {
  if (!l.sendcounts || !l.sdispls || !l.recvcounts || !l.rdispls)
    return InvalidArgument(std::string(!l.sendcounts ? "sendcounts" : !l.sdispls ? "sdispls"
                                       : !l.recvcounts ? "recvcounts" : "rdispls") + " is NULL");
  *send_extent = *recv_extent = 0;
  for (int p = 0; p < nranks; ++p) {
    *send_extent = std::max(*send_extent, l.sdispls[p] + l.sendcounts[p]);
    *recv_extent = std::max(*recv_extent, l.rdispls[p] + l.recvcounts[p]);
  }
  return OkStatus();
}

Status AllToAllvCompressed(const void* sendbuff, const Layout& l, void* recvbuff,
                           weftDataType_t datatype, const weftCompression& spec, int nranks,
                           int rank, weftComm_t comm) {
  std::vector<size_t> send_bytes(nranks), send_displs(nranks), recv_bytes(nranks), recv_displs(nranks);
  size_t send_total = 0, recv_total = 0, max_count = 0;
  for (int p = 0; p < nranks; ++p) {
    send_bytes[p] = codec::EncodedBytes(spec, l.sendcounts[p]);
    send_displs[p] = send_total;
    send_total += send_bytes[p];
    recv_bytes[p] = codec::EncodedBytes(spec, l.recvcounts[p]);
    recv_displs[p] = recv_total;
    recv_total += recv_bytes[p];
    max_count = std::max({max_count, l.sendcounts[p], l.recvcounts[p]});
  }
  const size_t elem = ElementBytes(datatype);
  float* block = ScratchFloats(0, max_count);
  uint8_t* send = ScratchBytes(0, send_total);
  for (int p = 0; p < nranks; ++p) {
    LoadWithResidual(static_cast<const uint8_t*>(sendbuff) + l.sdispls[p] * elem, datatype,
                     l.sendcounts[p], nullptr, block);
    codec::Encode(spec, block, l.sendcounts[p], send + send_displs[p],
                  (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(p));
  }
  uint8_t* received = ScratchBytes(1, recv_total);
  WEFT_RETURN_IF_ERROR(FromResult(
      weftAllToAllv(send, send_bytes.data(), send_displs.data(), received, recv_bytes.data(),
                    recv_displs.data(), weftUint8, comm, nullptr),
      "exchanging encoded blocks (weftAllToAllv)", comm));
  for (int q = 0; q < nranks; ++q) {
    codec::Decode(spec, received + recv_displs[q], l.recvcounts[q], block);
    StoreAs(block, l.recvcounts[q], datatype, static_cast<uint8_t*>(recvbuff) + l.rdispls[q] * elem);
  }
  return OkStatus();
}

Status RunAllToAllv(const void* sendbuff, const Layout& l, void* recvbuff, weftDataType_t datatype,
                    const weftCompression* spec, weftComm_t comm, weftStream_t stream) {
  int nranks = 0, rank = 0;
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  WEFT_RETURN_IF_ERROR(CommShape(comm, &nranks, &rank));
  size_t send_extent = 0, recv_extent = 0;
  WEFT_RETURN_IF_ERROR(CheckLayout(l, nranks, &send_extent, &recv_extent));
  WEFT_RETURN_IF_ERROR(CheckCompressedCall(comm, datatype, false, weftSum, spec, sendbuff,
                                           send_extent, recvbuff, recv_extent));
  // A queued call outlives the caller's count tables (weftAllToAllCompressed's are its own
  // locals): it keeps copies.
  auto copy = [nranks](const size_t* t) { return std::vector<size_t>(t, t + nranks); };
  return RunOnStream(stream, [=, spec = *spec, sc = copy(l.sendcounts), sd = copy(l.sdispls),
                              rc = copy(l.recvcounts), rd = copy(l.rdispls)] {
    const Layout own{sc.data(), sd.data(), rc.data(), rd.data()};
    return AllToAllvCompressed(sendbuff, own, recvbuff, datatype, spec, nranks, rank, comm);
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
  return Report(RunAllToAllv(sendbuff, layout, recvbuff, datatype, spec, comm, stream)
                    .WithContext("weftAllToAllvCompressed"));
}

weftResult_t weftAllToAllCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                    weftDataType_t datatype, const weftCompression* spec,
                                    weftComm_t comm, weftStream_t stream) {
  using namespace weft::compress;  // NOLINT
  int nranks = 0, rank = 0;
  weft::Status st = comm == nullptr ? weft::InvalidArgument("comm is NULL") : CommShape(comm, &nranks, &rank);
  if (!st.ok()) return Report(st.WithContext("weftAllToAllCompressed"));
  std::vector<size_t> counts(nranks, count), displs(nranks);
  for (int p = 0; p < nranks; ++p) displs[p] = static_cast<size_t>(p) * count;
  const Layout layout{counts.data(), displs.data(), counts.data(), displs.data()};
  return Report(RunAllToAllv(sendbuff, layout, recvbuff, datatype, spec, comm, stream)
                    .WithContext("weftAllToAllCompressed"));
}

}  // extern "C"
