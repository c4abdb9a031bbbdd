// Compressed allreduce, hierarchical (request.groups = hosts): full precision inside a host,
// compression only on what crosses hosts. Each host's float32 partial sum of a slice is
// encoded once, sent across, decoded and reduced in float32 at the slice's owner, the reduced
// slice encoded once and gathered across hosts; inside the host the decoded result is shared
// as float32 (the decoded bits themselves), so every rank of every host ends bitwise identical.
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
//   6 decode: the owner decodes all H sub-slices of lane l into its output, then sends that
//     float32 lane to every other member of its host, which receives it into its output.
// One host: nothing crosses hosts, nothing is compressed (exact float32 sum, then shared).
// A host of one rank encodes its input lane directly (its part is its input).
// Wire bytes per rank across hosts: 2 (H-1)/H of the encoded lane (per lane it owns); inside
// the host: (L-1)/L of the count in float32 for the reduce, the same again for the sharing.
#include <algorithm>

#include "algorithms/compressed.h"
#include "algorithms/patterns.h"

namespace weft {
namespace {

constexpr uint32_t kReducedStream = 0x80000000u;

// The shape every rank derives the same way: hosts, lanes and their owners.
struct HierShape {
  std::vector<std::vector<int>> hosts;
  int nlanes = 1;          // M
  size_t count = 0;
  std::vector<int> host_of, index_of;  // per rank
  int H() const { return static_cast<int>(hosts.size()); }
  size_t LaneOffset(int l) const { return PartOffset(count, nlanes, l); }
  size_t LaneSize(int l) const { return PartSize(count, nlanes, l); }
  int Owner(int host, int l) const {
    const std::vector<int>& g = hosts[host];
    return g[l % static_cast<int>(g.size())];
  }
  // Sub-slice t of lane l, as elements of the count.
  size_t SubOffset(int l, int t) const { return LaneOffset(l) + PartOffset(LaneSize(l), H(), t); }
  size_t SubSize(int l, int t) const { return PartSize(LaneSize(l), H(), t); }
};

StatusOr<HierShape> MakeShape(const ScheduleRequest& req) {
  HierShape s;
  WEFT_ASSIGN_OR_RETURN(s.hosts, ValidGroups(req));
  s.count = req.count;
  s.host_of.assign(req.nranks, 0);
  s.index_of.assign(req.nranks, 0);
  for (int h = 0; h < s.H(); ++h) {
    s.nlanes = std::max(s.nlanes, static_cast<int>(s.hosts[h].size()));
    for (size_t i = 0; i < s.hosts[h].size(); ++i) {
      s.host_of[s.hosts[h][i]] = h;
      s.index_of[s.hosts[h][i]] = static_cast<int>(i);
    }
  }
  return s;
}

// Rank r's scratch for one lane it owns.
struct LaneRegions {
  int lane = 0;
  Region part;                          // the host's float32 sum of the lane
  std::vector<Region> member;           // received lanes of the other members (group order)
  std::vector<Region> enc, contrib, gathered;  // per host t
  Region sum;                           // the reduced sub-slice h
};

// Allocates rank r's regions for the lanes it owns; returns the scratch used.
size_t LayOut(const HierShape& S, const weftCompression& spec, int r,
              std::vector<LaneRegions>* lanes) {
  const int h = S.host_of[r], H = S.H();
  const std::vector<int>& group = S.hosts[h];
  size_t at = 0;
  auto take = [&at](size_t n) { const Region g = Tmp(at, n); at += n; return g; };
  for (int l = 0; l < S.nlanes; ++l) {
    if (S.Owner(h, l) != r || S.LaneSize(l) == 0) continue;
    LaneRegions L;
    L.lane = l;
    const size_t n = S.LaneSize(l);
    L.part = group.size() == 1 ? In(S.LaneOffset(l), n) : take(n);
    for (int m : group) L.member.push_back(m == r ? In(S.LaneOffset(l), n) : take(n));
    if (H > 1) {
      for (int t = 0; t < H; ++t) L.enc.push_back(take(EncodedElements(spec, S.SubSize(l, t))));
      const size_t own = EncodedElements(spec, S.SubSize(l, h));
      for (int t = 0; t < H; ++t) L.contrib.push_back(t == h ? L.enc[h] : take(own));
      L.sum = take(S.SubSize(l, h));
      for (int t = 0; t < H; ++t) L.gathered.push_back(take(EncodedElements(spec, S.SubSize(l, t))));
    }
    lanes->push_back(std::move(L));
  }
  return at;
}

// Phase 1: send this rank's lanes to their owners, and sum the lanes it owns in group order.
void AddHostReduce(const HierShape& S, int r, const std::vector<LaneRegions>& lanes,
                   std::vector<Step>* steps) {
  const int h = S.host_of[r];
  const std::vector<int>& group = S.hosts[h];
  for (int l = 0; l < S.nlanes; ++l) {
    const int owner = S.Owner(h, l);
    if (owner != r && S.LaneSize(l) > 0) steps->push_back(SendStep(owner, In(S.LaneOffset(l), S.LaneSize(l))));
  }
  if (group.size() == 1) return;
  for (const LaneRegions& L : lanes)
    for (size_t i = 0; i < group.size(); ++i)
      if (group[i] != r) steps->push_back(RecvStep(group[i], L.member[i]));
  for (const LaneRegions& L : lanes) {
    steps->push_back(CopyStep(L.member[0], L.part));
    for (size_t i = 1; i < group.size(); ++i) steps->push_back(ReduceStep(L.member[i], L.part));
  }
}

// Phases 2-5 for the lanes rank r owns (H > 1).
void AddAcrossHosts(const HierShape& S, int r, const std::vector<LaneRegions>& lanes,
                    std::vector<Step>* steps) {
  const int h = S.host_of[r], H = S.H();
  for (const LaneRegions& L : lanes)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(L.lane, t) > 0) {
        const Region src{L.part.buffer, L.part.offset + PartOffset(S.LaneSize(L.lane), H, t),
                         S.SubSize(L.lane, t)};
        steps->push_back(EncodeStep(src, L.enc[t], static_cast<uint32_t>(L.lane * H + t)));
      }
  for (const LaneRegions& L : lanes)
    for (int k = 1; k < H; ++k) {
      const int to = (h + k) % H, from = (h - k + H) % H;
      if (S.SubSize(L.lane, to) > 0) steps->push_back(SendStep(S.Owner(to, L.lane), L.enc[to]));
      if (S.SubSize(L.lane, h) > 0) steps->push_back(RecvStep(S.Owner(from, L.lane), L.contrib[from]));
    }
  for (const LaneRegions& L : lanes) {
    if (S.SubSize(L.lane, h) == 0) continue;
    steps->push_back(DecodeStep(L.contrib[0], L.sum));
    for (int g = 1; g < H; ++g) steps->push_back(DecodeReduceStep(L.contrib[g], L.sum));
    steps->push_back(FinalizeStep(L.sum));
    steps->push_back(EncodeStep(L.sum, L.gathered[h], kReducedStream + static_cast<uint32_t>(L.lane)));
  }
  for (const LaneRegions& L : lanes)
    for (int k = 1; k < H; ++k) {
      const int to = (h + k) % H, from = (h - k + H) % H;
      if (S.SubSize(L.lane, h) > 0) steps->push_back(SendStep(S.Owner(to, L.lane), L.gathered[h]));
      if (S.SubSize(L.lane, from) > 0)
        steps->push_back(RecvStep(S.Owner(from, L.lane), L.gathered[from]));
    }
  for (const LaneRegions& L : lanes)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(L.lane, t) > 0)
        steps->push_back(DecodeStep(L.gathered[t], Out(S.SubOffset(L.lane, t), S.SubSize(L.lane, t))));
}

// One host: the exact sum, finalized, is the result.
void AddOneHostResult(const HierShape& S, const std::vector<LaneRegions>& lanes,
                      std::vector<Step>* steps) {
  for (const LaneRegions& L : lanes) {
    const Region out = Out(S.LaneOffset(L.lane), S.LaneSize(L.lane));
    if (L.part.buffer == Buffer::kInput) {  // one rank: its input is the sum
      steps->push_back(CopyStep(L.part, out));
      steps->push_back(FinalizeStep(out));
    } else {
      steps->push_back(FinalizeStep(L.part));
      steps->push_back(CopyStep(L.part, out));
    }
  }
}

// Phase 6's sharing: each owned lane's float32 result to the other members; the others' in.
void AddHostShare(const HierShape& S, int r, const std::vector<LaneRegions>& lanes,
                  std::vector<Step>* steps) {
  const int h = S.host_of[r];
  const std::vector<int>& group = S.hosts[h];
  if (group.size() == 1) return;
  for (const LaneRegions& L : lanes)
    for (int m : group)
      if (m != r) steps->push_back(SendStep(m, Out(S.LaneOffset(L.lane), S.LaneSize(L.lane))));
  for (int l = 0; l < S.nlanes; ++l) {
    const int owner = S.Owner(h, l);
    if (owner != r && S.LaneSize(l) > 0) steps->push_back(RecvStep(owner, Out(S.LaneOffset(l), S.LaneSize(l))));
  }
}

}  // namespace

StatusOr<Schedule> BuildAllReduceCompressedHierarchical(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched,
                        NewCompressedSchedule(req, "allreduce:compressed_hierarchical"));
  sched.algorithm = "compressed_hierarchical";
  WEFT_ASSIGN_OR_RETURN(const HierShape S, MakeShape(req));
  // Every message of a rank may be in flight: the host's lanes out and in, and per lane it
  // owns the exchange and gather across hosts, and the sharing.
  sched.window = 4 * req.nranks + 4 * S.nlanes * S.H();
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = rs.output_count = req.count;
    if (req.count == 0) continue;
    std::vector<LaneRegions> lanes;
    rs.scratch_count = LayOut(S, req.codec, r, &lanes);
    AddHostReduce(S, r, lanes, &rs.steps);
    if (S.H() > 1) {
      AddAcrossHosts(S, r, lanes, &rs.steps);
    } else {
      AddOneHostResult(S, lanes, &rs.steps);
    }
    AddHostShare(S, r, lanes, &rs.steps);
  }
  return sched;
}

std::vector<EncodedSpan> AllReduceHierarchicalEncodedSpans(const ScheduleRequest& req, int rank) {
  std::vector<EncodedSpan> spans;
  StatusOr<HierShape> shape = MakeShape(req);
  if (!shape.ok() || req.count == 0 || shape->H() < 2) return spans;
  const HierShape& S = *shape;
  const int h = S.host_of[rank], H = S.H();
  std::vector<LaneRegions> lanes;
  LayOut(S, req.codec, rank, &lanes);
  // In the order AddAcrossHosts emits the encodes.
  for (const LaneRegions& L : lanes)
    for (int t = 0; t < H; ++t)
      if (S.SubSize(L.lane, t) > 0) spans.push_back({S.SubOffset(L.lane, t), false});
  for (const LaneRegions& L : lanes)
    if (S.SubSize(L.lane, h) > 0) spans.push_back({S.SubOffset(L.lane, h), true});
  return spans;
}

}  // namespace weft
