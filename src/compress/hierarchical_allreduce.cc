// Hierarchical compressed allreduce: full precision inside each host, compression only across
// the slow tier (issue 14 item 4). On H hosts of L ranks each:
//
//   phase 1 (intra-host, float32): weftReduceScatter over the host's ranks: local rank l gets
//            the host's float32 sum of slice l (count padded to a multiple of L with zeros).
//   phase 2 (across hosts, compressed): the flat compressed allreduce (compressed_allreduce.cc)
//            of slice l with the ranks of local index l on the other hosts: each rank encodes
//            1/L of the data, and only encoded bytes cross between hosts. Its result is
//            bitwise the same on those H ranks.
//   phase 3 (intra-host, float32): weftAllGather of the reduced slices over the host's ranks:
//            copies of bits that are already identical, so every rank of every host ends
//            with the same bits.
//
// Error feedback: the residual is added to this rank's input and zeroed before phase 1; phase
// 2 then stores in the residual's slice l what it dropped (of the host's sum of slice l, and
// of the reduced part of it this rank re-encodes). Every dropped value is thus kept by exactly
// one rank, so the next call sends it. Sums stay in sum units until the end; avg divides the
// reduced slice by the total rank count once, before phase 3.
//
// Pipelined: a large call is cut into up to kMaxPieces pieces (each split over the host's ranks
// as above). A helper thread runs the intra-host phases (phase 1 of every piece, then phase 3
// of each piece as soon as its phase 2 is done) while this thread runs phase 2 piece after
// piece, so the slow tier carries piece k while the host reduces piece k+1 and gathers piece
// k-1. Every rank cuts the same pieces, so the results are the same bits on every rank.
//
// The tiers are sub-communicators made by weftCommSplit and cached per communicator
// (host_tiers.h). Like the flat form, a composition of public collectives.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "compress/compress_common.h"
#include "compress/compressed_collectives.h"
#include "compress/host_tiers.h"

namespace weft::compress {
namespace {

constexpr size_t kMaxPieces = 4;
constexpr size_t kMinPieceBytes = size_t{8} << 20;  // smaller pieces: thread and call costs dominate

// Per-thread buffers of this file (the flat allreduce it calls uses compress_common's slots).
float* HierarchyScratch(int slot, size_t count) {
  thread_local std::vector<float> buffers[3];
  if (buffers[slot].size() < count) buffers[slot].resize(count);
  return buffers[slot].data();
}

// How the call is cut: `pieces` pieces of per_host x part elements (the last padded with
// zeros); this rank owns part elements of each, at PartOffset.
struct Layout {
  size_t pieces = 1, per_host = 1, part = 0, padded = 0, local_rank = 0, count = 0;
  size_t PieceOffset(size_t k) const { return k * per_host * part; }
  size_t PartOffset(size_t k) const { return PieceOffset(k) + local_rank * part; }
  size_t Valid(size_t k) const {  // elements of this rank's part of piece k inside count
    const size_t at = PartOffset(k);
    return at < count ? std::min(part, count - at) : 0;
  }
};

Layout MakeLayout(size_t count, const HostTiers& tiers) {
  Layout l;
  l.count = count;
  l.per_host = static_cast<size_t>(tiers.local_size);
  l.local_rank = static_cast<size_t>(tiers.local_rank);
  l.pieces = std::clamp<size_t>(count * sizeof(float) / kMinPieceBytes, 1, kMaxPieces);
  l.part = (count + l.pieces * l.per_host - 1) / (l.pieces * l.per_host);
  l.padded = l.pieces * l.per_host * l.part;
  return l;
}

// The float32 input of phase 1, padded: sendbuff itself when nothing needs adding, converting
// or padding; else input + residual in scratch (the residual is then zeroed).
const float* PhaseOneInput(const void* sendbuff, const Layout& l, weftDataType_t datatype,
                           float* residual) {
  if (datatype == weftFloat32 && residual == nullptr && l.padded == l.count)
    return static_cast<const float*>(sendbuff);
  float* x = HierarchyScratch(0, l.padded);
  LoadWithResidual(sendbuff, datatype, l.count, residual, x);
  std::memset(x + l.count, 0, (l.padded - l.count) * sizeof(float));
  if (residual != nullptr) std::memset(residual, 0, l.count * sizeof(float));
  return x;
}

// Hand-off between the intra-host thread and the across-hosts one: how many pieces each has
// finished, and the first failure (which stops both).
class Handoff {
 public:
  void Publish(size_t* counter, Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok() && failure_.ok()) failure_ = st;
    if (st.ok()) ++*counter;
    cv_.notify_all();
  }
  // Waits until *counter > k; false when the other side failed first.
  bool WaitFor(const size_t* counter, size_t k) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return *counter > k || !failure_.ok(); });
    return *counter > k;
  }
  Status failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  size_t reduced = 0, crossed = 0;  // pieces done by phase 1, phase 2

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;
};

struct Call {
  const float* in;
  float* mine;  // this rank's parts, piece after piece (part elements each)
  float* out;   // padded result
  Layout layout;
  HostTiers tiers;
  weftRedOp_t op;
  const weftCompression* spec;
  float* residual;
  weftComm_t comm;
};

// Phases 1 and 3 (on the helper thread when pipelined): every piece's reduce-scatter, then
// each piece's allgather once phase 2 has crossed it.
void IntraHostPhases(const Call& c, Handoff* h) {
  const Layout& l = c.layout;
  for (size_t k = 0; k < l.pieces; ++k) {
    const Status st = FromResult(weftReduceScatter(c.in + l.PieceOffset(k), c.mine + k * l.part,
                                                   l.part, weftFloat32, weftSum, c.tiers.local, nullptr),
                                 "reducing inside the host (weftReduceScatter)", c.comm);
    h->Publish(&h->reduced, st);
    if (!st.ok()) return;
  }
  for (size_t k = 0; k < l.pieces; ++k) {
    if (!h->WaitFor(&h->crossed, k)) return;
    const Status st = FromResult(weftAllGather(c.mine + k * l.part, c.out + l.PieceOffset(k), l.part,
                                               weftFloat32, c.tiers.local, nullptr),
                                 "gathering inside the host (weftAllGather)", c.comm);
    if (!st.ok()) return h->Publish(&h->crossed, st);
  }
}

// Phase 2 of piece k: the compressed allreduce of this rank's part with the same-index ranks
// of the other hosts (the same Valid(k) on all of them), then avg's division.
Status AcrossHosts(const Call& c, size_t k) {
  const Layout& l = c.layout;
  const size_t valid = l.Valid(k);
  float* part = c.mine + k * l.part;
  if (valid > 0)
    WEFT_RETURN_IF_ERROR(FlatAllReduceCompressed(part, part, valid, weftFloat32, weftSum, *c.spec,
                                                 c.residual ? c.residual + l.PartOffset(k) : nullptr,
                                                 c.tiers.cross)
                             .WithContext("across hosts"));
  if (c.op == weftAvg) {
    const float n = static_cast<float>(l.per_host * static_cast<size_t>(c.tiers.nhosts));
    for (size_t i = 0; i < valid; ++i) part[i] /= n;
  }
  return OkStatus();
}

// Phase 2 on this thread (the flat allreduce's scratch stays with it from call to call) while
// the helper thread runs phases 1 and 3.
Status RunPipelined(const Call& c) {
  Handoff h;
  std::thread intra(IntraHostPhases, std::cref(c), &h);
  for (size_t k = 0; k < c.layout.pieces; ++k) {
    if (!h.WaitFor(&h.reduced, k) || !h.failure().ok()) break;
    const Status st = AcrossHosts(c, k);
    h.Publish(&h.crossed, st);
    if (!st.ok()) break;
  }
  intra.join();
  return h.failure();
}

}  // namespace

Status HierarchicalAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                       weftDataType_t datatype, weftRedOp_t op,
                                       const weftCompression& spec, float* residual,
                                       weftComm_t comm) {
  Call c;
  WEFT_RETURN_IF_ERROR(GetHostTiers(comm, &c.tiers));
  c.layout = MakeLayout(count, c.tiers);
  c.in = PhaseOneInput(sendbuff, c.layout, datatype, residual);
  c.mine = HierarchyScratch(1, c.layout.pieces * c.layout.part);
  const bool direct = datatype == weftFloat32 && c.layout.padded == count;
  c.out = direct ? static_cast<float*>(recvbuff) : HierarchyScratch(2, c.layout.padded);
  c.op = op;
  c.spec = &spec;
  c.residual = residual;
  c.comm = comm;
  if (c.layout.pieces > 1) {
    WEFT_RETURN_IF_ERROR(RunPipelined(c));
  } else {  // one piece: nothing to overlap, no thread
    WEFT_RETURN_IF_ERROR(FromResult(weftReduceScatter(c.in, c.mine, c.layout.part, weftFloat32,
                                                      weftSum, c.tiers.local, nullptr),
                                    "reducing inside the host (weftReduceScatter)", comm));
    WEFT_RETURN_IF_ERROR(AcrossHosts(c, 0));
    WEFT_RETURN_IF_ERROR(FromResult(weftAllGather(c.mine, c.out, c.layout.part, weftFloat32,
                                                  c.tiers.local, nullptr),
                                    "gathering inside the host (weftAllGather)", comm));
  }
  if (!direct) StoreAs(c.out, count, datatype, recvbuff);
  return OkStatus();
}

}  // namespace weft::compress
