// Hierarchical compressed allreduce: full precision inside each host, compression only across
// the slow tier (issue 14 item 4). On H hosts of L ranks each:
//
//   phase 1 (intra-host, float32): weftReduceScatter over the host's ranks: local rank l gets
//            the host's float32 sum of slice l (count padded to a multiple of L with zeros).
//   phase 2 (across hosts, compressed): the flat compressed allreduce (compressed_allreduce.cc)
//            of slice l with the ranks of local index l on the other hosts: each rank encodes
//            1/L of the data, and only encoded bytes cross between hosts. Its result is
//            bitwise the same on those H ranks.
//   phase 3 (intra-host): weftAllGather over the host's ranks of the *encoded* reduced slices
//            that phase 2 ends with (what its ranks decode), and every rank decodes all of
//            them: the same bytes decoded the same way, so every rank of every host ends with
//            the same bits, and the host moves encoded bytes rather than float32 results.
//
// Error feedback: the residual is added to this rank's input and zeroed before phase 1; phase
// 2 then stores in the residual's slice l what it dropped (of the host's sum of slice l, and
// of the reduced part of it this rank re-encodes). Every dropped value is thus kept by exactly
// one rank, so the next call sends it. Sums stay in sum units until the end; avg divides the
// decoded result by the total rank count once.
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
#include "kernels/codec.h"

namespace weft::compress {
namespace {

constexpr size_t kMaxPieces = 4;
constexpr size_t kMinPieceBytes = size_t{8} << 20;  // smaller pieces: thread and call costs dominate

// compress_common's per-thread scratch slots of this file (the flat allreduce it calls in
// between uses slots 0-3).
constexpr int kInputSlot = 4, kPartsSlot = 5, kResultSlot = 6;  // floats
constexpr int kEncodedSlot = 4, kGatheredSlot = 5;              // bytes

// How the call is cut: `pieces` pieces of per_host x part elements (the last padded with
// zeros); local rank j owns part elements of each, at PartOffset(j, k). Phase 2 of a part
// ends with nhosts encoded sub-slices, at most blob bytes in all.
struct Layout {
  size_t pieces = 1, per_host = 1, nhosts = 1, part = 0, padded = 0, local_rank = 0, count = 0;
  size_t blob = 0;
  size_t PieceOffset(size_t k) const { return k * per_host * part; }
  size_t PartOffset(size_t j, size_t k) const { return PieceOffset(k) + j * part; }
  size_t Valid(size_t j, size_t k) const {  // elements of rank j's part of piece k inside count
    const size_t at = PartOffset(j, k);
    return at < count ? std::min(part, count - at) : 0;
  }
};

Layout MakeLayout(size_t count, const HostTiers& tiers, const weftCompression& spec) {
  Layout l;
  l.count = count;
  l.per_host = static_cast<size_t>(tiers.local_size);
  l.nhosts = static_cast<size_t>(tiers.nhosts);
  l.local_rank = static_cast<size_t>(tiers.local_rank);
  l.pieces = std::clamp<size_t>(count * sizeof(float) / kMinPieceBytes, 1, kMaxPieces);
  l.part = (count + l.pieces * l.per_host - 1) / (l.pieces * l.per_host);
  l.padded = l.pieces * l.per_host * l.part;
  // A part's largest sub-slice encoding x nhosts: no smaller part encodes to more.
  l.blob = l.nhosts * codec::EncodedBytes(spec, SliceCount(l.part, tiers.nhosts, 0));
  return l;
}

// The float32 input of phase 1, padded: sendbuff itself when nothing needs adding, converting
// or padding; else input + residual in scratch (the residual is then zeroed).
const float* PhaseOneInput(const void* sendbuff, const Layout& l, weftDataType_t datatype,
                           float* residual) {
  if (datatype == weftFloat32 && residual == nullptr && l.padded == l.count)
    return static_cast<const float*>(sendbuff);
  float* x = ScratchFloats(kInputSlot, l.padded);
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
  float* mine;         // this rank's float32 parts, piece after piece (part elements each)
  uint8_t* encoded;    // this rank's phase-2 encodings, piece after piece (blob bytes each)
  uint8_t* gathered;   // every local rank's, piece after piece (per_host x blob bytes each)
  float* out;          // count results
  Layout layout;
  HostTiers tiers;
  weftRedOp_t op;
  const weftCompression* spec;
  float* residual;
  weftComm_t comm;
};

// Phase 1 of piece k.
Status ReducePiece(const Call& c, size_t k) {
  const Layout& l = c.layout;
  return FromResult(weftReduceScatter(c.in + l.PieceOffset(k), c.mine + k * l.part, l.part,
                                      weftFloat32, weftSum, c.tiers.local, nullptr),
                    "reducing inside the host (weftReduceScatter)", c.comm);
}

// Phase 2 of piece k: the compressed allreduce of this rank's part with the same-index ranks
// of the other hosts (the same Valid on all of them), kept encoded for phase 3.
Status AcrossHosts(const Call& c, size_t k) {
  const Layout& l = c.layout;
  const size_t valid = l.Valid(l.local_rank, k);
  if (valid == 0) return OkStatus();
  const uint8_t* gathered = nullptr;
  size_t stride = 0;
  WEFT_RETURN_IF_ERROR(FlatAllReduceToEncoded(
                           c.mine + k * l.part, valid, weftFloat32, weftSum, *c.spec,
                           c.residual ? c.residual + l.PartOffset(l.local_rank, k) : nullptr,
                           c.tiers.cross, &gathered, &stride)
                           .WithContext("across hosts"));
  std::memcpy(c.encoded + k * l.blob, gathered, l.nhosts * stride);
  return OkStatus();
}

// Phase 3 of piece k: gathers the host's encodings and decodes every part (avg: divided).
Status GatherPiece(const Call& c, size_t k) {
  const Layout& l = c.layout;
  uint8_t* all = c.gathered + k * l.per_host * l.blob;
  WEFT_RETURN_IF_ERROR(FromResult(weftAllGather(c.encoded + k * l.blob, all, l.blob, weftUint8,
                                                c.tiers.local, nullptr),
                                  "gathering inside the host (weftAllGather)", c.comm));
  const float n = static_cast<float>(l.per_host * l.nhosts);
  for (size_t j = 0; j < l.per_host; ++j) {
    const size_t valid = l.Valid(j, k);
    if (valid == 0) continue;
    float* out = c.out + l.PartOffset(j, k);
    DecodeGathered(*c.spec, all + j * l.blob,
                   codec::EncodedBytes(*c.spec, SliceCount(valid, c.tiers.nhosts, 0)), valid,
                   c.tiers.nhosts, out);
    if (c.op == weftAvg)
      for (size_t i = 0; i < valid; ++i) out[i] /= n;
  }
  return OkStatus();
}

// Phases 1 and 3 (on the helper thread): every piece's reduce-scatter, then each piece's
// gather once phase 2 has crossed it.
void IntraHostPhases(const Call& c, Handoff* h) {
  for (size_t k = 0; k < c.layout.pieces; ++k) {
    const Status st = ReducePiece(c, k);
    h->Publish(&h->reduced, st);
    if (!st.ok()) return;
  }
  for (size_t k = 0; k < c.layout.pieces; ++k) {
    if (!h->WaitFor(&h->crossed, k)) return;
    const Status st = GatherPiece(c, k);
    if (!st.ok()) return h->Publish(&h->crossed, st);
  }
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
  const Layout& l = c.layout = MakeLayout(count, c.tiers, spec);
  c.in = PhaseOneInput(sendbuff, l, datatype, residual);
  c.mine = ScratchFloats(kPartsSlot, l.pieces * l.part);
  c.encoded = ScratchBytes(kEncodedSlot, l.pieces * l.blob);
  c.gathered = ScratchBytes(kGatheredSlot, l.pieces * l.per_host * l.blob);
  // bf16: results in float32 scratch of their own (phase 1's input may still be read by a
  // peer of the host when phase 3 starts here).
  c.out = datatype == weftFloat32 ? static_cast<float*>(recvbuff) : ScratchFloats(kResultSlot, count);
  c.op = op;
  c.spec = &spec;
  c.residual = residual;
  c.comm = comm;
  if (l.pieces > 1) {
    WEFT_RETURN_IF_ERROR(RunPipelined(c));
  } else {  // one piece: nothing to overlap, no thread
    WEFT_RETURN_IF_ERROR(ReducePiece(c, 0));
    WEFT_RETURN_IF_ERROR(AcrossHosts(c, 0));
    WEFT_RETURN_IF_ERROR(GatherPiece(c, 0));
  }
  if (datatype != weftFloat32) StoreAs(c.out, count, datatype, recvbuff);
  return OkStatus();
}

AllReduceWireBytes HierarchicalWireBytes(const weftCompression& spec, size_t count, int local_size,
                                         int local_rank, int nhosts, int host) {
  HostTiers shape;
  shape.local_size = local_size;
  shape.local_rank = local_rank;
  shape.nhosts = nhosts;
  const Layout l = MakeLayout(count, shape, spec);
  AllReduceWireBytes bytes;
  for (size_t k = 0; k < l.pieces; ++k) {
    // A bandwidth-optimal reduce-scatter sends per_host - 1 parts; the gather, per_host - 1
    // copies of this rank's encodings.
    bytes.inside_hosts += (l.per_host - 1) * (l.part * sizeof(float) + l.blob);
    bytes.across_hosts += AllReduceCompressedWireBytes(spec, l.Valid(l.local_rank, k), nhosts, host);
  }
  return bytes;
}

}  // namespace weft::compress
