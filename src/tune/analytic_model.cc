// Analytic model (see analytic_model.h): per-algorithm communication patterns timed round by
// round on the Fabric's routes.
#include "tune/analytic_model.h"
#include "algorithms/patterns.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace weft {
namespace {

// One round's concurrent messages, routed once; Time() is then O(messages) per byte size.
class RoundPattern {
 public:
  RoundPattern(const Fabric& f, bool shm) : fabric_(f), shm_(shm) {}
  void Add(int from, int to) {
    if (from == to) return;
    routes_.push_back(fabric_.RouteOf(from, to, shm_));
  }
  bool empty() const { return routes_.empty(); }

  // Time of the round when every message carries `bytes`, spread over `streams` parallel
  // streams (channels): max over messages of latency + max(own stream time, the most loaded
  // resource on its route).
  double Time(double bytes, int streams = 1) const { return Rounds(bytes, streams, 1, 1); }

  // The time the round's most loaded resource takes to carry its bytes.
  double LoadTime(double bytes) const {
    if (routes_.empty() || bytes <= 0) return 0;
    const Loads load(*this, bytes);
    double worst = 0;
    for (const Route& r : routes_)
      for (int i = 0; i < r.nres; ++i) worst = std::max(worst, load.Us(r.res[i]));
    return worst;
  }

  // A ring's dependent rounds: each hop waits for the previous one, so a chain of them
  // crosses each kind of hop in proportion (the mean per-message time), not the slowest every
  // time; but no round is faster than its most loaded resource drains.
  double RingStage(double bytes, int streams = 1) const {
    return std::max(MeanTime(bytes, streams), LoadTime(bytes));
  }

  // The mean over the round's messages of the same per-message time.
  double MeanTime(double bytes, int streams = 1) const {
    if (routes_.empty() || bytes <= 0) return 0;
    const Loads load(*this, bytes);
    double sum = 0;
    for (const Route& r : routes_) {
      double t = r.overhead_us + bytes / (r.flow_gbps * 1e3 * std::max(1, streams));
      for (int i = 0; i < r.nres; ++i) t = std::max(t, load.Us(r.res[i]));
      sum += t + r.latency_us;
    }
    return sum / routes_.size();
  }

  // `rounds` repetitions of the round, each to peers of their own (a fresh stream per round,
  // as in a pairwise exchange), `per_stream` messages of `bytes` per stream and round (the
  // pieces of a chunked message, which queue on their stream), at most `concurrent` rounds in
  // flight (the generator's window; 0: all). The resources carry every round's bytes; a
  // stream only its own messages; each wave of concurrent rounds pays one latency.
  double Rounds(double bytes, int streams, double rounds, double per_stream, double concurrent = 0) const {
    if (routes_.empty() || bytes <= 0 || rounds <= 0) return 0;
    const double waves = concurrent > 0 ? std::ceil(rounds / concurrent) : 1;
    const Loads load(*this, bytes * per_stream, per_stream);
    double worst = 0;
    for (const Route& r : routes_) {
      const double stream = per_stream * (r.overhead_us + bytes / (r.flow_gbps * 1e3 * std::max(1, streams)));
      double t = waves * (stream + r.latency_us);
      for (int i = 0; i < r.nres; ++i) t = std::max(t, rounds * load.Us(r.res[i]) + r.latency_us);
      worst = std::max(worst, t);
    }
    return worst;
  }

 private:
  // Each resource's load when every route of the round carries `bytes` in `msgs` messages, in
  // the thread's scratch (zeroed again when this goes out of scope): Us(res) is its time to
  // drain. A per-message resource (a TCP stack) also carries each message's fixed cost, as
  // bytes at its rate (the engine books it the same way).
  class Loads {
   public:
    Loads(const RoundPattern& round, double bytes, double msgs = 1) : round_(round), load_(round.Scratch()) {
      for (const Route& r : round.routes_)
        for (int i = 0; i < r.nres; ++i) {
          const FabricResource& fr = round.fabric_.resource(r.res[i]);
          if (load_[r.res[i]] == 0) touched_.push_back(r.res[i]);
          load_[r.res[i]] += bytes + (fr.per_message ? r.overhead_us * msgs * fr.gbps * 1e3 : 0);
        }
    }
    ~Loads() {
      for (int id : touched_) load_[id] = 0;
    }
    double Us(int res) const { return load_[res] / (round_.fabric_.resource(res).gbps * 1e3); }

   private:
    const RoundPattern& round_;
    std::vector<double>& load_;
    std::vector<int> touched_;
  };

  std::vector<double>& Scratch() const {
    thread_local std::vector<double> load;
    if (static_cast<int>(load.size()) < fabric_.num_resources()) load.assign(fabric_.num_resources(), 0.0);
    return load;
  }
  const Fabric& fabric_;
  bool shm_;
  std::vector<Route> routes_;
};

// Everything a pattern needs about the call.
struct Call {
  const ScheduleRequest& req;
  const Fabric& fabric;
  bool shm;
  double elem;
  double bytes;        // count * elem (per-rank vector)
  double chunk_bytes;  // 0 = unpipelined
  int streams;
  double ReduceUs(double b) const {
    const ComputeParams& c = fabric.Compute(0);
    return b > 0 ? c.overhead_us + b / (c.reduce_gbps * 1e3) : 0;
  }
  // `calls` local copies moving `b` bytes in all.
  double CopyUs(double calls, double b) const {
    const ComputeParams& c = fabric.Compute(0);
    return calls * c.overhead_us + b / (c.copy_gbps * 1e3);
  }
  // Chunks of `chunk_bytes` covering `b` (at least 1).
  double Chunks(double b) const { return chunk_bytes > 0 && b > chunk_bytes ? std::ceil(b / chunk_bytes) : 1; }
};

int FloorPow2(int p) {
  int x = 1;
  while (x * 2 <= p) x *= 2;
  return x;
}
int Log2(int p2) {
  int l = 0;
  while ((1 << l) < p2) ++l;
  return l;
}
std::string Fmt(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[160];
  snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

// Every rank r sending to r+d (mod p): a ring's round (d = 1), a bruck or pairwise round.
RoundPattern Shift(const Call& c, int d) {
  const int p = c.req.nranks;
  RoundPattern round(c.fabric, c.shm);
  for (int r = 0; r < p; ++r) round.Add(r, ((r + d) % p + p) % p);
  return round;
}

// ---- flat patterns over ranks 0..p-1 ----

AnalyticEstimate Ring(const Call& c) {
  const int p = c.req.nranks;
  const RoundPattern round = Shift(c, 1);
  const double seg = c.bytes / p, m = c.Chunks(seg);
  // m chunks per round queue on their stream (each paying its overhead); the resources carry
  // the round's bytes, and a TCP stack each chunk's overhead too (Loads).
  const double per = round.Rounds(seg / m, c.streams, 1, m);
  AnalyticEstimate e;
  e.time_us = 2 * (p - 1) * per + (p - 1) * c.ReduceUs(seg);
  e.steps = p * (4.0 * (p - 1) * m + 1);
  e.formula = Fmt("2(p-1)=%.0f rounds x %.2f us", 2.0 * (p - 1), per);
  return e;
}

// Participants v < p2 of a folded power-of-two exchange; rank of v (Fold in patterns.h).
int FoldRank(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }

// Fold rounds for non-powers of two: ranks 2i hand `in_bytes` over to 2i+1, which (`reduce`)
// reduces them, and get `out_bytes` back at the end.
double FoldTime(const Call& c, int rem, double in_bytes, bool reduce, double out_bytes) {
  if (rem == 0) return 0;
  RoundPattern in(c.fabric, c.shm), out(c.fabric, c.shm);
  for (int i = 0; i < rem; ++i) {
    in.Add(2 * i, 2 * i + 1);
    out.Add(2 * i + 1, 2 * i);
  }
  return in.Time(in_bytes) + (reduce ? c.ReduceUs(in_bytes) : 0) + out.Time(out_bytes);
}

RoundPattern Exchange(const Call& c, int p2, int rem, int mask) {
  RoundPattern round(c.fabric, c.shm);
  for (int v = 0; v < p2; ++v) round.Add(FoldRank(v, rem), FoldRank(v ^ mask, rem));
  return round;
}

AnalyticEstimate RecursiveDoubling(const Call& c) {
  const int p = c.req.nranks, p2 = FloorPow2(p), rem = p - p2, L = Log2(p2);
  AnalyticEstimate e;
  e.time_us = FoldTime(c, rem, c.bytes, true, c.bytes);
  for (int mask = 1; mask < p2; mask <<= 1)
    e.time_us += Exchange(c, p2, rem, mask).Time(c.bytes) + c.ReduceUs(c.bytes);
  e.steps = p * (3.0 * L + 3);
  e.formula = Fmt("log2(p)=%.0f rounds of %.0f bytes", L, c.bytes);
  return e;
}

AnalyticEstimate HalvingDoubling(const Call& c) {
  const int p = c.req.nranks, p2 = FloorPow2(p), rem = p - p2, L = Log2(p2);
  AnalyticEstimate e;
  e.time_us = FoldTime(c, rem, c.bytes, true, c.bytes);
  for (int mask = p2 >> 1; mask >= 1; mask >>= 1) {
    const double b = c.bytes * mask / p2;
    RoundPattern round = Exchange(c, p2, rem, mask);
    e.time_us += round.Time(b) + c.ReduceUs(b);  // reduce-scatter round
    e.time_us += round.Time(b);                  // its allgather mirror
  }
  e.steps = p * (5.0 * L + 4);
  e.formula = Fmt("2log2(p)=%.0f rounds, %.0f bytes moved per rank", 2.0 * L, 2.0 * c.bytes * (p2 - 1) / p2);
  return e;
}

AnalyticEstimate Tree(const Call& c) {
  const int p = c.req.nranks;
  RoundPattern up(c.fabric, c.shm);
  int depth = 0;
  for (int t = 0; t < 2; ++t)
    for (int r = 0; r < p; ++r) {
      int d = 0;
      for (int x = r; DoubleTreeParent(t, x, p) >= 0 && d <= p; x = DoubleTreeParent(t, x, p)) ++d;
      depth = std::max(depth, d);
      if (DoubleTreeParent(t, r, p) >= 0) up.Add(r, DoubleTreeParent(t, r, p));
    }
  const double half = c.bytes / 2, m = c.Chunks(half), piece = half / m;
  // Pipeline: up the tree (each stage: children's pieces in, reduce both) and down again;
  // the two directions use opposite port halves and overlap.
  const double stage = up.Time(piece, c.streams);
  AnalyticEstimate e;
  // The generator's window (32 steps, ~8 per chunk and rank) keeps about 4 chunks in flight:
  // beyond that the pipeline drains once per group of 4.
  const double in_flight = 4, fill = 2 * depth + m - 1;
  e.time_us = std::max(fill, std::ceil(m / in_flight) * 2 * depth) * stage + (depth + m - 1) * 2 * c.ReduceUs(piece);
  e.steps = 8.0 * p * m;
  e.formula = Fmt("depth %.0f, %.0f pipeline stages x %.2f us", depth, 2 * depth + m - 1, stage);
  return e;
}

// ---- hierarchical patterns (groups = hosts) ----

struct Groups {
  std::vector<std::vector<int>> g;
  int k = 1;      // smallest group
  int gmax = 1;   // largest group
};
Groups GroupsOf(const ScheduleRequest& req) {
  Groups out;
  out.g = req.groups;
  if (out.g.empty()) {
    out.g.emplace_back();
    for (int r = 0; r < req.nranks; ++r) out.g[0].push_back(r);
  }
  out.k = static_cast<int>(out.g[0].size());
  out.gmax = 0;
  for (const auto& x : out.g) {
    out.k = std::min(out.k, static_cast<int>(x.size()));
    out.gmax = std::max(out.gmax, static_cast<int>(x.size()));
  }
  return out;
}

// Chain inside every group (member j hands to member j-1): in-group reduce / broadcast.
RoundPattern InGroupChain(const Call& c, const Groups& gs) {
  RoundPattern round(c.fabric, c.shm);
  for (const auto& g : gs.g)
    for (size_t j = 0; j < g.size(); ++j) round.Add(g[j], g[(j + g.size() - 1) % g.size()]);
  return round;
}

// Pipelined chain over `len` members moving `b` bytes in chunks.
double ChainTime(const Call& c, const RoundPattern& round, int len, double b, bool reduce) {
  if (len <= 1 || b <= 0) return 0;
  const double m = c.Chunks(b), piece = b / m;
  return (len - 1 + m - 1) * (round.Time(piece, c.streams) + (reduce ? c.ReduceUs(piece) : 0));
}

// Ring allreduce among `members` lists (one ring per list, all concurrent) of `b` bytes each.
double RingsTime(const Call& c, const std::vector<std::vector<int>>& rings, double b) {
  if (rings.empty() || rings[0].size() <= 1) return 0;
  RoundPattern round(c.fabric, c.shm);
  for (const auto& ring : rings)
    for (size_t i = 0; i < ring.size(); ++i) round.Add(ring[i], ring[(i + 1) % ring.size()]);
  const double n = static_cast<double>(rings[0].size()), seg = b / n;
  return 2 * (n - 1) * round.Time(seg, c.streams) + (n - 1) * c.ReduceUs(seg);
}

AnalyticEstimate Hierarchical(const Call& c) {
  const Groups gs = GroupsOf(c.req);
  const int G = static_cast<int>(gs.g.size()), K = gs.k;
  const size_t n = c.req.count;
  const size_t chunk_elems = c.req.chunk.chunk_elems;
  const double parts =
      chunk_elems == 0 ? 1 : std::min<double>(32, std::ceil(static_cast<double>(n) / (chunk_elems * K)));
  const double bp = c.bytes / std::max(1.0, parts);
  RoundPattern chain = InGroupChain(c, gs);
  std::vector<std::vector<int>> rails(K);
  for (int l = 0; l < K; ++l)
    for (const auto& g : gs.g) rails[l].push_back(g[l]);
  const double t1 = ChainTime(c, chain, gs.gmax, bp / K, true);
  const double t2 = RingsTime(c, rails, bp / K);
  const double t3 = ChainTime(c, chain, gs.gmax, bp / K, false);
  AnalyticEstimate e;
  e.time_us = t1 + t2 + t3 + (parts - 1) * std::max({t1, t2, t3});
  const double m1 = c.Chunks(bp / K);
  const double steps_part = 4.0 * c.req.nranks * K * m1 + K * G * (4.0 * (G - 1) + 1);
  e.steps = parts * steps_part;
  // Every embedded sub-schedule (a reduce and a broadcast per group and slice, a ring per
  // rail) rescans the partial schedule (patterns.h FitScratch): build work ~ embeds x size/2.
  const double embeds = 2.0 * G * K + K;
  e.build_cost = parts * (embeds * steps_part / 2) + parts * e.steps / 2;
  e.formula = Fmt("in-group %.2f + rails %.2f + in-group %.2f us per part", t1, t2, t3) +
              Fmt(", %.0f part(s)", parts);
  return e;
}

AnalyticEstimate HierarchicalLeader(const Call& c) {
  const Groups gs = GroupsOf(c.req);
  const int G = static_cast<int>(gs.g.size());
  RoundPattern chain = InGroupChain(c, gs);
  std::vector<std::vector<int>> leaders(1);
  for (const auto& g : gs.g) leaders[0].push_back(g[0]);
  const double t1 = ChainTime(c, chain, gs.gmax, c.bytes, true);
  const double t2 = RingsTime(c, leaders, c.bytes);
  const double t3 = ChainTime(c, chain, gs.gmax, c.bytes, false);
  AnalyticEstimate e;
  e.time_us = t1 + t2 + t3;
  const double m = c.Chunks(c.bytes), mr = c.Chunks(c.bytes / G);
  e.steps = 4.0 * c.req.nranks * m + G * (4.0 * (G - 1) * mr + 1);
  e.build_cost = (2.0 * G + 1) * e.steps / 2;
  e.formula = Fmt("reduce to leader %.2f + leaders' ring %.2f + broadcast %.2f us", t1, t2, t3);
  return e;
}

// hierarchical_direct (algorithms/allreduce_hierarchical.cc): inside each group every member
// publishes its part in its window and owner l reduces slice l from the members' windows; the
// rails allreduce the slices across groups; every member then reads the finished slices from
// the owners' windows. Only the rails send messages.
// Parts mirror the generator's NumParts: one unchunked; chunked, about one chunk per rail slice
// but at least one part per kDirectPartElems elements, at most 32. Its fences let parts
// overlap little; the estimate lets them overlap fully (optimistic, as a pre-filter must be).
constexpr double kDirectPartElems = 512 * 1024;  // allreduce_hierarchical.cc
constexpr double kMaxHierarchicalParts = 32;      // allreduce_hierarchical.cc kMaxParts

AnalyticEstimate HierarchicalDirect(const Call& c) {
  const Groups gs = GroupsOf(c.req);
  const int G = static_cast<int>(gs.g.size()), K = gs.k;
  const double n = static_cast<double>(c.req.count);
  const double chunk_elems = static_cast<double>(c.req.chunk.chunk_elems);
  double parts = 1;
  if (chunk_elems > 0)
    parts = std::min(kMaxHierarchicalParts,
                     std::max(std::ceil(n / (chunk_elems * K)), std::ceil(n / kDirectPartElems)));
  const double bp = c.bytes / parts, slice = bp / K;
  const Route in_group = K > 1 ? c.fabric.RouteOf(gs.g[0][0], gs.g[0][1], c.shm) : Route{};
  auto read = [&](double b) { return c.fabric.Compute(0).overhead_us + b / (in_group.flow_gbps * 1e3); };
  std::vector<std::vector<int>> rails(K);
  for (int l = 0; l < K; ++l)
    for (const auto& g : gs.g) rails[l].push_back(g[l]);
  double t1 = 0, t3 = 0;
  if (K > 1) {
    t1 = c.CopyUs(1, bp) + in_group.latency_us + (K - 1) * (read(slice) + c.ReduceUs(slice));
    t3 = c.CopyUs(1, slice) + in_group.latency_us + (K - 1) * read(slice);
  }
  const double t2 = RingsTime(c, rails, slice);
  AnalyticEstimate e;
  e.time_us = t1 + t2 + t3 + (parts - 1) * std::max({t1, t2, t3});
  // Per part: 10K-7 in-group steps per rank (copy, signals, waits, reads), a finalize per
  // rail member, and the rails' rings.
  const double m1 = c.Chunks(slice / std::max(1, G));
  const double steps_part = c.req.nranks * (10.0 * K - 6) + K * G * (4.0 * (G - 1) * m1 + 1);
  e.steps = parts * steps_part;
  // Each rail is embedded (a rescan of the partial schedule, patterns.h), and each part.
  e.build_cost = parts * (K * steps_part / 2) + parts * e.steps / 2;
  e.formula = Fmt("in-group %.2f + rails %.2f + in-group %.2f us per part", t1, t2, t3) +
              Fmt(", %.0f part(s)", parts);
  return e;
}

// ---- direct (one host, mapped peers) ----

AnalyticEstimate DirectAllReduce(const Call& c, bool two_shot) {
  const int p = c.req.nranks;
  AnalyticEstimate e;
  if (p <= 1) {
    e.time_us = c.ReduceUs(c.bytes);
    e.steps = 2;
    return e;
  }
  const Route r = c.fabric.RouteOf(0, 1, c.shm);
  const double over = c.fabric.Compute(0).overhead_us;
  auto read = [&](double b) { return over + b / (r.flow_gbps * 1e3); };
  if (!two_shot) {
    e.time_us = r.latency_us + (p - 1) * (read(c.bytes) + c.ReduceUs(c.bytes));
    e.steps = p * (2.0 * p + 2);
    e.formula = Fmt("p-1=%.0f reads of %.0f bytes", p - 1, c.bytes);
  } else {
    const double slice = c.bytes / p;
    e.time_us = 2 * r.latency_us + (p - 1) * (read(slice) + c.ReduceUs(slice)) + (p - 1) * read(slice);
    e.steps = p * (4.0 * p + 2);
    e.formula = Fmt("2(p-1)=%.0f reads of %.0f bytes", 2.0 * (p - 1), slice);
  }
  return e;
}

// ---- all-to-all (count = one block: `bytes` per peer) ----

// The two kinds of round of a pairwise exchange (round k: r -> r+k) on hosts of K ranks: a
// shift by K sends every message across hosts, a shift inside each host none. Their
// resources differ, so the two kinds overlap.
struct ExchangeRounds {
  RoundPattern across, inside;
  int host_size;
};
ExchangeRounds ExchangeRoundsOf(const Call& c) {
  const int p = c.req.nranks;
  const Groups gs = GroupsOf(c.req);
  const int K = std::min(gs.k, p);
  ExchangeRounds x{gs.g.size() > 1 ? Shift(c, K) : RoundPattern(c.fabric, c.shm), RoundPattern(c.fabric, c.shm), K};
  for (const auto& g : gs.g)
    for (size_t j = 0; j < g.size(); ++j) x.inside.Add(g[j], g[(j + 1) % g.size()]);
  return x;
}

// Pairwise exchange (alltoall_pairwise.cc): round k, r -> r+k, the rounds across hosts and
// those inside them overlapping (ExchangeRounds).
AnalyticEstimate AllToAllPairwise(const Call& c) {
  const int p = c.req.nranks;
  const ExchangeRounds x = ExchangeRoundsOf(c);
  const RoundPattern &across = x.across, &inside = x.inside;
  const int K = x.host_size;
  const double m = c.Chunks(c.bytes), piece = c.bytes / m;
  AnalyticEstimate e;
  const double own = c.CopyUs(1, c.bytes);
  // The generator's window of 16 steps holds a send and a receive per message in flight.
  const double concurrent = std::max(1.0, 8 / m);
  e.time_us = own + std::max(across.Rounds(piece, c.streams, p - K, m, concurrent),
                             inside.Rounds(piece, c.streams, K - 1, m, concurrent));
  e.steps = p * (2.0 * (p - 1) * m + p / 2.0 + 1);
  e.formula = Fmt("%.0f rounds across hosts, %.0f inside, of %.0f bytes", p - K, K - 1, c.bytes);
  return e;
}

// Bruck (alltoall_bruck.cc): ceil(log2 p) rounds r -> r+d carrying the blocks whose index has
// bit d, each packed and unpacked block by block; a rotation before and after.
AnalyticEstimate AllToAllBruck(const Call& c) {
  const int p = c.req.nranks;
  AnalyticEstimate e;
  e.time_us = c.CopyUs(2, p * c.bytes) + c.CopyUs(p, p * c.bytes);  // rotations
  double steps = 2 + p;
  int rounds = 0;
  for (int d = 1; d < p; d <<= 1, ++rounds) {
    double moved = 0;  // j in [1, p) with bit d set
    for (int base = 0; base < p; base += 2 * d) moved += std::max(0, std::min(base + 2 * d, p) - (base + d));
    e.time_us += Shift(c, d).Time(moved * c.bytes, c.streams) + c.CopyUs(2 * moved, 2 * moved * c.bytes);
    steps += 2 * moved + 2;
  }
  e.steps = p * steps;
  e.formula = Fmt("%.0f rounds of about %.0f bytes", rounds, p / 2.0 * c.bytes);
  return e;
}

// Hierarchical (alltoall_hierarchical.cc, both variants): members hand their input to the
// group leader, leaders pack one message per other group and swap them pairwise, then
// assemble and hand out each member's output.
AnalyticEstimate AllToAllHierarchical(const Call& c) {
  const int p = c.req.nranks;
  const Groups gs = GroupsOf(c.req);
  const int G = static_cast<int>(gs.g.size()), K = gs.gmax;
  RoundPattern to_leader(c.fabric, c.shm), from_leader(c.fabric, c.shm), leaders(c.fabric, c.shm);
  for (int g = 0; g < G; ++g) {
    for (size_t i = 1; i < gs.g[g].size(); ++i) {
      to_leader.Add(gs.g[g][i], gs.g[g][0]);
      from_leader.Add(gs.g[g][0], gs.g[g][i]);
    }
    if (G > 1) leaders.Add(gs.g[g][0], gs.g[(g + 1) % G][0]);
  }
  const double whole = p * c.bytes;  // one rank's input or output
  AnalyticEstimate e;
  // The leader packs group h+1's message while h's travels, and hands out member j's output
  // while it assembles the next: each pair overlaps (optimistic).
  e.time_us = to_leader.Time(whole, c.streams) +
              std::max(c.CopyUs((G - 1.0) * K * K, (G - 1.0) * K * K * c.bytes),
                       leaders.Rounds(K * K * c.bytes, c.streams, G - 1, 1, 16)) +
              std::max(c.CopyUs(double(K) * p, K * whole), from_leader.Time(whole, c.streams));
  e.steps = G * ((G - 1.0) * K * K + double(K) * p + 2.0 * K + 2.0 * G);
  e.formula = Fmt("%.0f leaders' rounds of %.0f bytes, %.0f members per leader", G - 1, K * K * c.bytes, K);
  return e;
}

// Direct (one host, every peer mapped): each rank reads a block from every peer's window and
// either places it (all-to-all, allgather: its own block is a local copy at the same cost) or
// reduces it into its own (reduce-scatter).
AnalyticEstimate DirectReads(const Call& c, bool reduce) {
  const int p = c.req.nranks;
  const Route r = c.fabric.RouteOf(0, 1 % p, c.shm);
  const double read = c.fabric.Compute(0).overhead_us + c.bytes / (r.flow_gbps * 1e3);
  AnalyticEstimate e;
  e.time_us = r.latency_us + (reduce ? (p - 1) * (read + c.ReduceUs(c.bytes)) : p * read);
  e.steps = p * (3.0 * p + 2);
  e.formula = Fmt(reduce ? "%.0f reads and reductions of %.0f bytes" : "%.0f reads of %.0f bytes", p - 1, c.bytes);
  return e;
}

// ---- reduce-scatter (count = one rank's block: `bytes` per rank) ----

// Ring reduce-scatter and allgather (reducescatter_ring.cc, allgather_ring.cc): p-1
// dependent hops r -> r+1 of one block (reduced on arrival for reduce-scatter), chunks
// pipelined through the ring.
AnalyticEstimate RingPass(const Call& c, bool reduce) {
  const int p = c.req.nranks;
  const double m = c.Chunks(c.bytes), piece = c.bytes / m;
  const double stage = Shift(c, 1).RingStage(piece, c.streams) + (reduce ? c.ReduceUs(piece) : 0);
  AnalyticEstimate e;
  e.time_us = (p - 1 + m - 1) * stage;
  e.steps = p * ((reduce ? 1.0 : 2.0) * (p - 1) * m + 2);
  e.formula = Fmt("p-1=%.0f hops of %.0f bytes, %.0f chunk(s)", p - 1, c.bytes, m);
  return e;
}

// Pairwise (reducescatter_pairwise.cc): round k, r -> r+k, and the received block reduced
// into the output. Every round's receive reduces into the same output block, so receives
// wait for each other: the rounds run one after another.
AnalyticEstimate ReduceScatterPairwise(const Call& c) {
  const int p = c.req.nranks;
  const ExchangeRounds x = ExchangeRoundsOf(c);
  const RoundPattern &across = x.across, &inside = x.inside;
  const int K = x.host_size;
  const double m = c.Chunks(c.bytes), piece = c.bytes / m;
  const double round_across = across.Rounds(piece, c.streams, 1, m), round_inside = inside.Rounds(piece, c.streams, 1, m);
  AnalyticEstimate e;
  e.time_us = (p - K) * round_across + (K - 1) * round_inside + (p - 1) * c.ReduceUs(c.bytes);
  e.steps = p * (3.0 * (p - 1) * m + 2);
  e.formula = Fmt("%.0f rounds across hosts, %.0f inside, of %.0f bytes", p - K, K - 1, c.bytes);
  return e;
}

// Recursive halving (reducescatter_halving_doubling.cc): the allreduce's first half.
AnalyticEstimate ReduceScatterHalving(const Call& c) {
  const int p = c.req.nranks, p2 = FloorPow2(p), rem = p - p2, L = Log2(p2);
  const double all = c.bytes * p;  // every block
  AnalyticEstimate e;
  e.time_us = FoldTime(c, rem, all, true, c.bytes);  // the whole input in, its block back
  for (int mask = p2 >> 1; mask >= 1; mask >>= 1) {
    const double b = all * mask / p2;
    e.time_us += Exchange(c, p2, rem, mask).Time(b) + c.ReduceUs(b);
  }
  e.steps = p * (3.0 * L + 4);
  e.formula = Fmt("log2(p)=%.0f rounds, %.0f bytes sent per rank", L, all * (p2 - 1) / p2);
  return e;
}

// ---- allgather (count = one rank's block: `bytes` per rank) ----

// Recursive doubling (allgather_recursive_doubling.cc): round k swaps the 2^k blocks gathered
// so far with the partner at distance 2^k; non-powers of two fold first and get everything
// back at the end.
AnalyticEstimate AllGatherRecursiveDoubling(const Call& c) {
  const int p = c.req.nranks, p2 = FloorPow2(p), rem = p - p2, L = Log2(p2);
  AnalyticEstimate e;
  e.time_us = FoldTime(c, rem, c.bytes, false, c.bytes * p);  // its block in, everything back
  // Blocks a participant sends: one in the first round, doubling. (One that folded in a
  // neighbour holds two from the start; counting one keeps the estimate optimistic.)
  double have = 1;
  for (int mask = 1; mask < p2; mask <<= 1, have *= 2)
    e.time_us += Exchange(c, p2, rem, mask).Time(have * c.bytes);
  e.steps = p * (2.0 * L + 4);
  e.formula = Fmt("log2(p)=%.0f rounds, %.0f bytes received per rank", L, c.bytes * (p - 1));
  return e;
}

// Bruck (allgather_bruck.cc): round k sends min(2^k, p-2^k) blocks to r-2^k; a rotation
// before and after.
AnalyticEstimate AllGatherBruck(const Call& c) {
  const int p = c.req.nranks;
  AnalyticEstimate e;
  e.time_us = c.CopyUs(2, 2 * p * c.bytes);  // rotations
  int rounds = 0;
  for (int d = 1; d < p; d <<= 1, ++rounds) e.time_us += Shift(c, -d).Time(std::min(d, p - d) * c.bytes, c.streams);
  e.steps = p * (2.0 * rounds + 4);
  e.formula = Fmt("%.0f rounds, %.0f bytes received per rank", rounds, c.bytes * (p - 1));
  return e;
}

// The registered generators each pattern describes. Broadcast has none: its best
// large-message candidate (a chain of 64 KiB chunks, 1M steps at 1024 ranks) is just over the
// work budget, and coarsening it misjudges its pipeline (6.4 ms against 3.6 ms simulated
// whole), so its candidates are all simulated. The reduce-scatter and allgather hierarchical
// compositions have none either: tens of steps per rank, always cheap to simulate.
struct PatternEntry {
  Collective collective;
  const char* name;
  AnalyticEstimate (*estimate)(const Call&);
};
const PatternEntry kPatterns[] = {
    {Collective::kAllReduce, "ring", Ring},
    {Collective::kAllReduce, "recursive_doubling", RecursiveDoubling},
    {Collective::kAllReduce, "halving_doubling", HalvingDoubling},
    {Collective::kAllReduce, "tree", Tree},
    {Collective::kAllReduce, "hierarchical", Hierarchical},
    {Collective::kAllReduce, "hierarchical_leader", HierarchicalLeader},
    {Collective::kAllReduce, "hierarchical_direct", HierarchicalDirect},
    {Collective::kAllReduce, "oneshot", [](const Call& c) { return DirectAllReduce(c, false); }},
    {Collective::kAllReduce, "twoshot", [](const Call& c) { return DirectAllReduce(c, true); }},
    {Collective::kAllToAll, "pairwise", AllToAllPairwise},
    {Collective::kAllToAll, "bruck", AllToAllBruck},
    {Collective::kAllToAll, "hierarchical", AllToAllHierarchical},
    {Collective::kAllToAll, "hierarchical_direct", AllToAllHierarchical},
    {Collective::kAllToAll, "direct", [](const Call& c) { return DirectReads(c, false); }},
    {Collective::kReduceScatter, "ring", [](const Call& c) { return RingPass(c, true); }},
    {Collective::kReduceScatter, "pairwise", ReduceScatterPairwise},
    {Collective::kReduceScatter, "halving_doubling", ReduceScatterHalving},
    {Collective::kReduceScatter, "direct", [](const Call& c) { return DirectReads(c, true); }},
    {Collective::kAllGather, "ring", [](const Call& c) { return RingPass(c, false); }},
    {Collective::kAllGather, "recursive_doubling", AllGatherRecursiveDoubling},
    {Collective::kAllGather, "bruck", AllGatherBruck},
    {Collective::kAllGather, "direct", [](const Call& c) { return DirectReads(c, false); }},
};

}  // namespace

double RoundTime(const Fabric& fabric, bool shm_enabled, const std::vector<std::pair<int, int>>& messages,
                 double bytes, int streams, double rounds) {
  RoundPattern round(fabric, shm_enabled);
  for (const auto& m : messages) round.Add(m.first, m.second);
  return round.Rounds(bytes, streams, rounds, 1);
}

AnalyticEstimate EstimateAnalytic(const AlgorithmInfo& algorithm, const ScheduleRequest& request,
                                  size_t elem_size, const Fabric& fabric, bool shm_enabled) {
  AnalyticEstimate e;
  if (request.nranks != fabric.nranks() || request.nranks < 1) return e;
  const double elem = static_cast<double>(std::max<size_t>(1, elem_size));
  Call c{request, fabric, shm_enabled, elem, static_cast<double>(request.count) * elem,
         static_cast<double>(request.chunk.chunk_elems) * elem, std::max(1, request.chunk.channels)};
  // Patterns describe the registered generators; a look-alike (a test's fake named "ring")
  // is not known.
  if (FindAlgorithm(algorithm.collective, algorithm.name) != &algorithm) return e;
  for (const PatternEntry& p : kPatterns)
    if (p.collective == request.collective && algorithm.name == p.name) {
      e = p.estimate(c);
      e.known = true;
      e.build_cost = std::max(e.build_cost, e.steps);
      return e;
    }
  return e;
}

}  // namespace weft
