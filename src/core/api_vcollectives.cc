// weftAllGatherV and weftReduceScatterV: the collectives with a count per rank. Argument
// checks here (every message names the argument and its value), then the path every
// collective takes (SubmitCollective); the communicator checks that every rank passed the same
// counts before any data moves (comm.cc, ExchangeVCounts) and runs the per-rank-count
// schedules (algorithms/allgatherv_*.cc, reducescatterv_*.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "core/api_internal.h"
#include "kernels/dtype.h"
#include "weft/weft.h"

namespace weft {
namespace {

// allgatherv's blocks in recvbuff must not overlap: two ranks' data written over each other
// would leave what either sent undefined.
Status CheckBlocksDisjoint(const size_t* counts, const size_t* displs, int nranks) {
  std::vector<int> order;
  for (int q = 0; q < nranks; ++q)
    if (counts[q] > 0) order.push_back(q);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return displs[a] < displs[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const int a = order[i - 1], b = order[i];
    if (displs[a] + counts[a] > displs[b])
      return InvalidArgument("the blocks of ranks " + std::to_string(a) + " and " +
                             std::to_string(b) + " overlap in recvbuff: displs[" +
                             std::to_string(a) + "]=" + std::to_string(displs[a]) + " + recvcounts[" +
                             std::to_string(a) + "]=" + std::to_string(counts[a]) + " > displs[" +
                             std::to_string(b) + "]=" + std::to_string(displs[b]));
  }
  return OkStatus();
}

Status CheckAllGatherV(const void* sendbuff, size_t sendcount, const void* recvbuff,
                       const size_t* recvcounts, const size_t* displs, weftDataType_t datatype,
                       const weftComm* comm) {
  WEFT_RETURN_IF_ERROR(CheckLiveComm(comm));
  WEFT_RETURN_IF_ERROR(CheckType(datatype));
  if (recvcounts == nullptr) return InvalidArgument("recvcounts is NULL");
  if (displs == nullptr) return InvalidArgument("displs is NULL");
  size_t extent = 0;
  WEFT_RETURN_IF_ERROR(CheckBlockTable("recv", recvcounts, displs, comm->nranks,
                                       TypeSize(datatype), &extent, "displs"));
  WEFT_RETURN_IF_ERROR(CheckBlocksDisjoint(recvcounts, displs, comm->nranks));
  if (sendcount != recvcounts[comm->rank])
    return InvalidArgument("sendcount=" + std::to_string(sendcount) + " differs from recvcounts[" +
                           std::to_string(comm->rank) + "]=" +
                           std::to_string(recvcounts[comm->rank]) + " (this rank's block)");
  WEFT_RETURN_IF_ERROR(CheckBuffer("sendbuff", sendbuff, sendcount));
  return CheckBuffer("recvbuff", recvbuff, extent);
}

Status CheckReduceScatterV(const void* sendbuff, const void* recvbuff, const size_t* recvcounts,
                           weftDataType_t datatype, weftRedOp_t op, const weftComm* comm) {
  WEFT_RETURN_IF_ERROR(CheckLiveComm(comm));
  WEFT_RETURN_IF_ERROR(CheckType(datatype));
  WEFT_RETURN_IF_ERROR(CheckOp(op));
  if (recvcounts == nullptr) return InvalidArgument("recvcounts is NULL");
  const size_t elem = TypeSize(datatype);
  size_t total = 0;
  for (int q = 0; q < comm->nranks; ++q) {
    const std::string at = "recvcounts[" + std::to_string(q) + "]";
    WEFT_RETURN_IF_ERROR(CheckCount(at.c_str(), recvcounts[q], 1, elem));
    if (__builtin_add_overflow(total, recvcounts[q], &total))
      return InvalidArgument("the sum of recvcounts overflows size_t (at " + at + "=" +
                             std::to_string(recvcounts[q]) + ")");
  }
  WEFT_RETURN_IF_ERROR(CheckCount("sum of recvcounts", total, 1, elem));
  WEFT_RETURN_IF_ERROR(CheckBuffer("sendbuff", sendbuff, total));
  return CheckBuffer("recvbuff", recvbuff, recvcounts[comm->rank]);
}

// The call for the communicator: count is this rank's block; recvcounts (and rdispls:
// allgatherv's displs) are copied, as the call may run later on a stream. Zero counts still
// run (no early return as the even collectives' count 0): the count check must meet every
// rank, or a rank whose counts say "nothing" would leave the others waiting.
CollectiveCall VCall(Collective collective, const void* sendbuff, void* recvbuff,
                     const size_t* recvcounts, const size_t* displs, weftDataType_t datatype,
                     weftRedOp_t op, const weftComm* comm) {
  CollectiveCall c;
  c.collective = collective;
  c.sendbuff = sendbuff;
  c.recvbuff = recvbuff;
  c.count = recvcounts[comm->rank];
  c.dtype = datatype;
  c.op = op;
  c.recvcounts.assign(recvcounts, recvcounts + comm->nranks);
  if (displs != nullptr) c.rdispls.assign(displs, displs + comm->nranks);
  return c;
}

}  // namespace
}  // namespace weft

using namespace weft;  // NOLINT: C API implementation file

extern "C" {

weftResult_t weftAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                            const size_t* recvcounts, const size_t* displs,
                            weftDataType_t datatype, weftComm_t comm, weftStream_t stream) {
  Status st = CheckAllGatherV(sendbuff, sendcount, recvbuff, recvcounts, displs, datatype, comm);
  if (!st.ok()) return Report(st.WithContext("weftAllGatherV"));
  CollectiveCall c = VCall(Collective::kAllGatherV, sendbuff, recvbuff, recvcounts, displs,
                           datatype, weftSum, comm);
  return Report(SubmitCollective(comm, std::move(c), stream).WithContext("weftAllGatherV"));
}

weftResult_t weftReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                weftStream_t stream) {
  Status st = CheckReduceScatterV(sendbuff, recvbuff, recvcounts, datatype, op, comm);
  if (!st.ok()) return Report(st.WithContext("weftReduceScatterV"));
  CollectiveCall c = VCall(Collective::kReduceScatterV, sendbuff, recvbuff, recvcounts, nullptr,
                           datatype, op, comm);
  return Report(SubmitCollective(comm, std::move(c), stream).WithContext("weftReduceScatterV"));
}

}  // extern "C"
