// Compressed allreduce, hierarchical (request.groups = hosts): full precision inside a host,
// compression only on what crosses hosts. Each host's float32 partial sum of a slice is
// encoded once, sent across, decoded and reduced in float32 at the slice's owner, the reduced
// slice encoded once and gathered across hosts; inside the host the owner forwards those same
// encodings and every member decodes them itself, so every rank of every host decodes the same
// bytes and ends bitwise identical.
//
// With H hosts of L_h ranks and M = max L_h, the count is cut into M lanes (PartOffset); lane l
// of host h is owned by its member l % L_h (uneven hosts: a smaller host's ranks own several
// lanes). Lane l is cut again into H sub-slices; sub-slice t is reduced by lane l's owner on
// host t. Phases for rank r of host h:
//   1 host reduce (float32): every member sends lane l of its input to the lane's owner, which
//     sums the members' lanes in group order (copy of the first, then reduce) into part[l].
//   2 encode: the owner encodes each sub-slice t of part[l] once (stream l * H + t).
//   3 exchange: step k = 1..H-1: send the encoding of sub-slice (h+k) % H to lane l's owner on
//     that host, receive the encoding of sub-slice h from lane l's owner on host (h-k) % H.
//   4 reduce: sum = decode(host 0's contribution), then += decode(host g's) for g = 1..H-1 in
//     host order (own one read from its encoding); finalize (avg divides once).
//   5 re-encode: sum -> gathered[l][h] (stream kReducedStream + l); gather it across hosts as
//     in 3.
//   6 share and decode: the owner forwards the H encodings of lane l to every other member of
//     its host and decodes them into its output; each member receives them and decodes them
//     into its output. Forwarding the encodings, not the decoded float32 lane, moves 1/4
//     (int8) to 1/32 (sign1) of the bytes inside the host, and a decode writes the output
//     lane once where a received float32 copy did (decoding runs at memcpy speed or above).
// One host: nothing crosses hosts, nothing is compressed (exact float32 sum, then shared).
// A host of one rank encodes its input lane directly (its part is its input); on a host of two
// the owner adds its input into the lane it received (a + b and b + a are the same bits).
//
// Pipelined: the count is cut into pieces (CompressedPieces: up to 4 of >= 8 MiB, or
// request.chunk.chunk_elems each), each run as above, in a software pipeline: phase 1 and the encodes of piece k are
// issued before the reduction of piece k-1 and the decoding of piece k-2, so the host's
// float32 work overlaps the messages across hosts. Every rank cuts the same pieces and emits
// the phases in the same order, so messages between any two ranks match in order.
// Wire bytes per rank across hosts: 2 (H-1)/H of the encoded lane (per lane it owns); inside
// the host: (L-1)/L of the count in float32 for the reduce, and the encoded lanes it owns to
// each other member for the sharing.
#include <algorithm>

#include "algorithms/compressed.h"
#include "algorithms/patterns.h"

namespace weft {
namespace {

constexpr uint32_t kReducedStream = 0x80000000u;

// The shape every rank derives the same way: hosts, lanes and their owners, pieces.
struct HierShape {
  std::vector<std::vector<int>> hosts;
  int nlanes = 1;  // M: the largest host's rank count
  std::vector<int> host_of;  // per rank
  size_t count = 0, pieces = 1;
  int H() const { return static_cast<int>(hosts.size()); }
  int Owner(int host, int l) const {
    const std::vector<int>& g = hosts[host];
    return g[l % static_cast<int>(g.size())];
  }
  size_t PieceOffset(size_t k) const { return PartOffset(count, static_cast<int>(pieces), static_cast<int>(k)); }
  size_t PieceSize(size_t k) const { return PartSize(count, static_cast<int>(pieces), static_cast<int>(k)); }
  size_t LaneOffset(size_t k, int l) const { return PieceOffset(k) + PartOffset(PieceSize(k), nlanes, l); }
  size_t LaneSize(size_t k, int l) const { return PartSize(PieceSize(k), nlanes, l); }
  // Sub-slice t of lane l of piece k, as elements of the count.
  size_t SubOffset(size_t k, int l, int t) const {
    return LaneOffset(k, l) + PartOffset(LaneSize(k, l), H(), t);
  }
  size_t SubSize(size_t k, int l, int t) const { return PartSize(LaneSize(k, l), H(), t); }
};

StatusOr<HierShape> MakeShape(const ScheduleRequest& req) {
  HierShape s;
  WEFT_ASSIGN_OR_RETURN(s.hosts, ValidGroups(req));
  s.count = req.count;
  s.host_of.assign(req.nranks, 0);
  for (int h = 0; h < s.H(); ++h) {
    s.nlanes = std::max(s.nlanes, static_cast<int>(s.hosts[h].size()));
    for (int r : s.hosts[h]) s.host_of[r] = h;
  }
  if (s.H() > 1) s.pieces = CompressedPieces(req, req.count);
  return s;
}

// Rank r's scratch for the encodings of a lane of its host that another member owns (phase 6:
// received from the owner, decoded here), per host t.
struct SharedLane {
  int lane = 0;
  std::vector<Region> enc;
};

// Rank r's scratch for one lane it owns in one piece.
struct LaneRegions {
  size_t piece = 0;
  int lane = 0;
  Region part;                                 // the host's float32 sum of the lane
  std::vector<Region> member;                  // each member's lane (group order; own: input)
  std::vector<Region> enc, contrib, gathered;  // per host t
  Region sum;                                  // the reduced sub-slice h
};

// Rank r's regions in one piece: the lanes it owns, and (several hosts) the encodings of the
// lanes other members own.
struct PieceRegions {
  std::vector<LaneRegions> owned;
  std::vector<SharedLane> shared;
};

// Allocates rank r's regions; returns them per piece and the scratch.
size_t LayOut(const HierShape& S, const weftCompression& spec, int r,
              std::vector<PieceRegions>* pieces) {
  const int h = S.host_of[r], H = S.H();
  const std::vector<int>& group = S.hosts[h];
  size_t at = 0;
  auto take = [&at](size_t n) { const Region g = Tmp(at, n); at += n; return g; };
  pieces->assign(S.pieces, {});
  for (size_t k = 0; k < S.pieces; ++k)
    for (int l = 0; l < S.nlanes; ++l) {
      if (S.LaneSize(k, l) == 0) continue;
      if (S.Owner(h, l) != r) {
        if (H == 1) continue;  // one host: the float32 lane itself is shared
        SharedLane shared{l, {}};
        for (int t = 0; t < H; ++t) shared.enc.push_back(take(EncodedElements(spec, S.SubSize(k, l, t))));
        (*pieces)[k].shared.push_back(std::move(shared));
        continue;
      }
      LaneRegions L;
      L.piece = k;
      L.lane = l;
      const size_t n = S.LaneSize(k, l);
      for (int m : group) L.member.push_back(m == r ? In(S.LaneOffset(k, l), n) : take(n));
      if (group.size() == 1) L.part = L.member[0];
      else if (group.size() == 2) L.part = L.member[group[0] == r ? 1 : 0];  // reduced in place
      else L.part = take(n);
      if (H > 1) {
        for (int t = 0; t < H; ++t) L.enc.push_back(take(EncodedElements(spec, S.SubSize(k, l, t))));
        const size_t own = EncodedElements(spec, S.SubSize(k, l, h));
        for (int t = 0; t < H; ++t) L.contrib.push_back(t == h ? L.enc[h] : take(own));
        L.sum = take(S.SubSize(k, l, h));
        for (int t = 0; t < H; ++t)
          L.gathered.push_back(take(EncodedElements(spec, S.SubSize(k, l, t))));
      }
      (*pieces)[k].owned.push_back(std::move(L));
    }
  return at;
}

using Emitter = CompressedEmitter;

// Phase 1 of piece k: this rank's lanes to their owners; the lanes it owns summed.
void HostReduce(const HierShape& S, int r, size_t k, const std::vector<LaneRegions>& lanes,
                Emitter* em) {
  const int h = S.host_of[r];
  const std::vector<int>& group = S.hosts[h];
  for (int l = 0; l < S.nlanes; ++l) {
    const int owner = S.Owner(h, l);
    if (owner != r && S.LaneSize(k, l) > 0)
      em->Push(SendStep(owner, In(S.LaneOffset(k, l), S.LaneSize(k, l))));
  }
  if (group.size() == 1) return;
  for (const LaneRegions& L : lanes)
    for (size_t i = 0; i < group.size(); ++i)
      if (group[i] != r) em->Push(RecvStep(group[i], L.member[i]));
  for (const LaneRegions& L : lanes) {
    if (group.size() == 2) {  // the other member's lane += own: the same bits as in group order
      em->Push(ReduceStep(L.member[group[0] == r ? 0 : 1], L.part));
      continue;
    }
    em->Push(CopyStep(L.member[0], L.part));
    for (size_t i = 1; i < group.size(); ++i) em->Push(ReduceStep(L.member[i], L.part));
  }
}

// Phases 2-3 of piece k: each sub-slice of the host sum encoded once and sent to its owner.
void EncodeAndExchange(const HierShape& S, int r, size_t k, const std::vector<LaneRegions>& lanes,
                       Emitter* em) {
  const int h = S.host_of[r], H = S.H();
  for (const LaneRegions& L : lanes)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(k, L.lane, t) > 0) {
        const Region src{L.part.buffer, L.part.offset + PartOffset(S.LaneSize(k, L.lane), H, t),
                         S.SubSize(k, L.lane, t)};
        const uint32_t stream = static_cast<uint32_t>((k * S.nlanes + L.lane) * H + t);
        em->Encode(src, L.enc[t], stream, S.SubOffset(k, L.lane, t), false);
      }
  for (const LaneRegions& L : lanes)
    for (int j = 1; j < H; ++j) {
      const int to = (h + j) % H, from = (h - j + H) % H;
      if (S.SubSize(k, L.lane, to) > 0) em->Push(SendStep(S.Owner(to, L.lane), L.enc[to]));
      if (S.SubSize(k, L.lane, h) > 0) em->Push(RecvStep(S.Owner(from, L.lane), L.contrib[from]));
    }
}

// Phases 4-5 of piece k: reduce the decoded contributions in host order, encode once, gather.
void ReduceAndGather(const HierShape& S, int r, size_t k, const std::vector<LaneRegions>& lanes,
                     Emitter* em) {
  const int h = S.host_of[r], H = S.H();
  for (const LaneRegions& L : lanes) {
    if (S.SubSize(k, L.lane, h) == 0) continue;
    em->Push(DecodeStep(L.contrib[0], L.sum));
    for (int g = 1; g < H; ++g) em->Push(DecodeReduceStep(L.contrib[g], L.sum));
    em->Push(FinalizeStep(L.sum));
    em->Encode(L.sum, L.gathered[h], kReducedStream + static_cast<uint32_t>(k * S.nlanes + L.lane),
               S.SubOffset(k, L.lane, h), true);
  }
  for (const LaneRegions& L : lanes)
    for (int j = 1; j < H; ++j) {
      const int to = (h + j) % H, from = (h - j + H) % H;
      if (S.SubSize(k, L.lane, h) > 0) em->Push(SendStep(S.Owner(to, L.lane), L.gathered[h]));
      if (S.SubSize(k, L.lane, from) > 0)
        em->Push(RecvStep(S.Owner(from, L.lane), L.gathered[from]));
    }
}

// Phase 6 of piece k: forward the encodings of every sub-slice of the owned lanes to the other
// members first (they wait for them), decode them into the output; then receive and decode the
// lanes the other members own.
void ShareAndDecode(const HierShape& S, int r, size_t k, const PieceRegions& piece, Emitter* em) {
  const int h = S.host_of[r], H = S.H();
  const std::vector<int>& group = S.hosts[h];
  for (const LaneRegions& L : piece.owned)
    for (int m : group)
      if (m != r)
        for (int t = 0; t < H; ++t)
          if (S.SubSize(k, L.lane, t) > 0) em->Push(SendStep(m, L.gathered[t]));
  for (const LaneRegions& L : piece.owned)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(k, L.lane, t) > 0)
        em->Push(DecodeStep(L.gathered[t], Out(S.SubOffset(k, L.lane, t), S.SubSize(k, L.lane, t))));
  for (const SharedLane& shared : piece.shared)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(k, shared.lane, t) > 0)
        em->Push(RecvStep(S.Owner(h, shared.lane), shared.enc[t]));
  for (const SharedLane& shared : piece.shared)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(k, shared.lane, t) > 0)
        em->Push(DecodeStep(shared.enc[t],
                            Out(S.SubOffset(k, shared.lane, t), S.SubSize(k, shared.lane, t))));
}

// One host: the exact sum, finalized, is the result, shared as in phase 6.
void OneHost(const HierShape& S, int r, const std::vector<LaneRegions>& lanes, Emitter* em) {
  HostReduce(S, r, 0, lanes, em);
  for (const LaneRegions& L : lanes) {
    const Region out = Out(S.LaneOffset(0, L.lane), S.LaneSize(0, L.lane));
    if (L.part.buffer == Buffer::kInput) {  // one rank: its input is the sum
      em->Push(CopyStep(L.part, out));
      em->Push(FinalizeStep(out));
    } else {
      em->Push(FinalizeStep(L.part));
      em->Push(CopyStep(L.part, out));
    }
  }
  const std::vector<int>& group = S.hosts[S.host_of[r]];
  for (const LaneRegions& L : lanes)
    for (int m : group)
      if (m != r) em->Push(SendStep(m, Out(S.LaneOffset(0, L.lane), S.LaneSize(0, L.lane))));
  for (int l = 0; l < S.nlanes; ++l) {
    const int owner = S.Owner(S.host_of[r], l);
    if (owner != r && S.LaneSize(0, l) > 0)
      em->Push(RecvStep(owner, Out(S.LaneOffset(0, l), S.LaneSize(0, l))));
  }
}

// The software pipeline over pieces (see the file comment).
void EmitRank(const HierShape& S, int r, const std::vector<PieceRegions>& pieces, Emitter* em) {
  if (S.H() == 1) return OneHost(S, r, pieces[0].owned, em);
  const size_t K = S.pieces;
  for (size_t k = 0; k < K + 2; ++k) {
    if (k < K) {
      HostReduce(S, r, k, pieces[k].owned, em);
      EncodeAndExchange(S, r, k, pieces[k].owned, em);
    }
    if (k >= 1 && k - 1 < K) ReduceAndGather(S, r, k - 1, pieces[k - 1].owned, em);
    if (k >= 2) ShareAndDecode(S, r, k - 2, pieces[k - 2], em);
  }
}

}  // namespace

StatusOr<Schedule> BuildAllReduceCompressedHierarchical(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched,
                        NewCompressedSchedule(req, "allreduce:compressed_hierarchical"));
  sched.algorithm = "compressed_hierarchical";
  WEFT_ASSIGN_OR_RETURN(const HierShape S, MakeShape(req));
  // Every message of a rank may be in flight: per piece the host's lanes out and in, per lane
  // it owns the exchange and gather across hosts, and the sharing of H encodings per lane.
  sched.window = static_cast<int>(std::min<size_t>(
      4096, 4 * static_cast<size_t>(req.nranks) * S.pieces +
                (4 + 2 * static_cast<size_t>(req.nranks)) * S.pieces * S.nlanes * S.H()));
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = rs.output_count = req.count;
    if (req.count == 0) continue;
    std::vector<PieceRegions> pieces;
    rs.scratch_count = LayOut(S, req.codec, r, &pieces);
    Emitter em{&rs.steps, nullptr};
    EmitRank(S, r, pieces, &em);
  }
  return sched;
}

std::vector<EncodedSpan> AllReduceHierarchicalEncodedSpans(const ScheduleRequest& req, int rank) {
  std::vector<EncodedSpan> spans;
  StatusOr<HierShape> shape = MakeShape(req);
  if (!shape.ok() || req.count == 0) return spans;
  std::vector<PieceRegions> pieces;
  LayOut(*shape, req.codec, rank, &pieces);
  std::vector<Step> steps;
  Emitter em{&steps, &spans};
  EmitRank(*shape, rank, pieces, &em);
  return spans;
}

}  // namespace weft
