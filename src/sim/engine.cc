// Discrete-event schedule execution (see engine.h for the rules and the timing model).
#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "algorithms/step_table.h"
#include "exec/chain_sink.h"
#include "exec/codec_chain.h"
#include "exec/operand_sink.h"
#include "transports/shm/shm_transport.h"  // kShmSingleCopyMinBytesDefault

namespace weft {
namespace {

bool Overlap(const Region& a, const Region& b) {
  return a.count > 0 && b.count > 0 && a.buffer == b.buffer && a.offset < b.offset + b.count &&
         b.offset < a.offset + a.count;
}

// Hazards on the local regions the step table names (peer regions are ordered by fences): a
// step may not issue while an in-flight step writes what it reads or writes, or reads what it
// writes.
bool Conflicts(const Step& earlier, const Step& later) {
  StepRegions e = LocalRegions(earlier), l = LocalRegions(later);
  auto hits = [](const Region* w, const Region* x) { return w && x && Overlap(*w, *x); };
  if (e.write && (hits(e.write, l.write) || hits(e.write, l.read[0]) || hits(e.write, l.read[1])))
    return true;
  return l.write && (hits(l.write, e.read[0]) || hits(l.write, e.read[1]));
}

// The same check against many in-flight steps at once: their local regions indexed by
// (buffer, offset), so that it costs a lookup instead of a scan of the window. Used for wide
// windows only (Engine::kIndexedWindow): compressed schedules keep up to 4096 messages of a
// rank in flight, and scanning them cost a 1024-rank compressed allreduce ~4e9 comparisons
// (23 s); for the usual 8-64 a scan is cheaper than the index's upkeep.
class InflightRegions {
 public:
  void Add(int step, const Step& st) {
    const StepRegions a = LocalRegions(st);
    if (a.write) Insert(&writes_, *a.write, step);
    for (const Region* r : a.read)
      if (r) Insert(&reads_, *r, step);
  }
  void Remove(const Step& st) {
    const StepRegions a = LocalRegions(st);
    if (a.write) Erase(&writes_, *a.write);
    for (const Region* r : a.read)
      if (r) Erase(&reads_, *r);
  }
  // An in-flight step that `st` conflicts with, or -1. (With several holders of one region it
  // names the latest added, which may have completed while others still hold the region: the
  // caller then only looks again, and still finds the conflict.)
  int FindConflict(const Step& st) const {
    const StepRegions a = LocalRegions(st);
    int hit = -1;
    if (a.write && ((hit = Find(writes_, *a.write)) >= 0 || (hit = Find(reads_, *a.write)) >= 0)) return hit;
    for (const Region* r : a.read)
      if (r && (hit = Find(writes_, *r)) >= 0) return hit;
    return -1;
  }

 private:
  // (buffer, first element, one past the last) -> how many in-flight steps hold that region,
  // and the latest of them (reported as the conflict). Identical regions share an entry: a
  // rank's sends of one encoded slice to many peers would otherwise be scanned one by one.
  using Key = std::tuple<int, size_t, size_t>;
  struct Holders {
    int count;
    int step;
  };
  using Map = std::map<Key, Holders>;
  // Regions by length class (floor(log2(count))): a region of class c is shorter than 2^(c+1)
  // elements, so only entries of that class starting less than 2^(c+1) before r can reach
  // it. (One bound for all lengths let a single long region widen every search.)
  static constexpr int kClasses = 64;
  struct ByLength {
    Map map[kClasses];
    uint64_t used = 0;  // bit c: map[c] is not empty
  };
  static int LengthClass(size_t count) { return 63 - __builtin_clzll(count); }

  static void Insert(ByLength* m, const Region& r, int step) {
    if (r.count == 0) return;
    const int c = LengthClass(r.count);
    Holders& h = m->map[c][Key{static_cast<int>(r.buffer), r.offset, r.offset + r.count}];
    ++h.count;
    h.step = step;
    m->used |= uint64_t{1} << c;
  }
  static void Erase(ByLength* m, const Region& r) {
    if (r.count == 0) return;
    const int c = LengthClass(r.count);
    auto it = m->map[c].find(Key{static_cast<int>(r.buffer), r.offset, r.offset + r.count});
    if (it == m->map[c].end() || --it->second.count > 0) return;
    m->map[c].erase(it);
    if (m->map[c].empty()) m->used &= ~(uint64_t{1} << c);
  }
  // A region of `m` overlapping r: one that starts before r ends and ends after r starts.
  static int Find(const ByLength& m, const Region& r) {
    if (r.count == 0) return -1;
    const int buffer = static_cast<int>(r.buffer);
    const size_t end = r.offset + r.count;
    for (uint64_t used = m.used; used != 0; used &= used - 1) {
      const int c = __builtin_ctzll(used);
      const size_t longest = c >= 63 ? std::numeric_limits<size_t>::max() : (size_t{2} << c) - 1;
      const size_t from = r.offset >= longest ? r.offset - longest + 1 : 0;
      const Map& map = m.map[c];
      for (auto it = map.lower_bound(Key{buffer, from, 0});
           it != map.end() && std::get<0>(it->first) == buffer && std::get<1>(it->first) < end; ++it)
        if (std::get<2>(it->first) > r.offset) return it->second.step;
    }
    return -1;
  }

  ByLength writes_, reads_;
};

// A FIFO that allocates nothing before its first element and reuses its storage once
// drained. The engine keeps one per stream and direction (a 1024-rank all-to-all has ~10^6),
// and std::deque allocates a 512-byte block for each: most of 1.7 GB for 2.6M steps.
template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  const T& front() const { return items_[head_]; }
  void push_back(const T& v) { items_.push_back(v); }
  void pop_front() {
    if (++head_ < items_.size()) return;
    items_.clear();
    head_ = 0;
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

struct Event {
  double t;
  uint64_t seq;
  int rank;
  int step;  // -1: resume issuing after a local step
  bool received = false;  // a fused step's receive half is done (the step is still in flight)
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Posted {
  int rank;
  int step;
};

struct RankState {
  size_t next = 0;
  // Steps in flight, unordered; inflight_pos[step] is a step's index in it (-1: not in
  // flight), so that completing one is O(1) whatever the window; `regions` indexes their
  // local regions for the hazard check.
  std::vector<int> inflight;
  std::vector<int> inflight_pos;
  // Made only when the window is wide (Engine::indexed_): its 128 empty maps are 6 KB a
  // rank, 100 MB at 16384 ranks, for simulations that never use them.
  std::unique_ptr<InflightRegions> regions;
  // The in-flight step the next step conflicts with (-1: none known): issuing waits for it
  // without looking again on every event of the rank.
  int blocker = -1;
  int waits_inflight = 0;
  size_t received_inflight = 0;  // fused steps whose receive is done: out of the window
  double busy_until = 0;
  double done = 0;
  // Fused steps whose forward is not yet posted, per outgoing (to, channel), in program
  // order; and which steps have received (their forward may go).
  std::unordered_map<uint64_t, Fifo<int>> forwards;
  std::vector<char> received;
  // Steps that run inside a codec chain after its first (SimOptions::fused_codec); empty: none.
  std::vector<char> chained;
  // Receives the executor streams into the chain after them (exec/chain_sink.h) when they
  // come over shared memory (kStreamedRecv), and those chains' first steps (kStreamedOpener);
  // the first steps of untiled chains (top-k: each encode reads the opener's operands as it
  // selects, and the sum is never written; kOnePassOpener). Either opener costs a copy's
  // traffic: one operand read from DRAM and one written, or two read and none written.
  std::vector<char> streamed;
};
constexpr char kStreamedRecv = 1, kStreamedOpener = 2, kOnePassOpener = 3;

uint64_t StreamKey(int to, uint16_t channel) { return static_cast<uint64_t>(to) * 65536 + channel; }

class Engine {
 public:
  // `tokens`: what each shaped port's bucket holds when the call starts (empty: full).
  Engine(const Schedule& s, const Fabric& f, size_t elem, const SimOptions& o, std::vector<double> tokens = {})
      : sched_(s), fabric_(f), elem_(static_cast<double>(elem)), opt_(o), ranks_(s.nranks),
        backlog_(f.num_resources(), 0.0), busy_(f.num_resources(), 0.0), tokens_(std::move(tokens)) {
    if (tokens_.size() != static_cast<size_t>(f.num_resources())) {
      tokens_.assign(f.num_resources(), 0.0);
      for (int i = 0; i < f.num_resources(); ++i) tokens_[i] = f.resource(i).burst_bytes;
    }
    window_ = o.window > 0 ? o.window : std::max(1, s.window);
    indexed_ = window_ > kIndexedWindow;
    ClassifyWorkingSet();
    ClassifyCoRunning();
  }

  // A machine with more CPU ranks than cores (Fabric::CoreMates) has every core busy while a
  // call runs, so its ranks' work beyond the cache streams beside another core's: at most the
  // per-core share of the bus measured with every core copying at once (ComputeParams::
  // dram_all_cores_gbps), not the rate one core reaches alone. 2x2 harness (2 cores, 22.4 GB/s
  // all together against 17.8 alone, so 0.63x): the host reduce that opens a 1-bit chain,
  // measured 2.95 ms per rank where the single-core rate said 1.9, and the CMA receive of the
  // 32 MiB lane ~6.5 ms against 4.3 (perf record, 2026-12-05). 1 elsewhere.
  void ClassifyCoRunning() {
    corun_.assign(sched_.nranks, 1.0);
    for (int r = 0; r < sched_.nranks && r < fabric_.nranks(); ++r) {
      const ComputeParams& c = fabric_.Compute(r);
      const int bus = fabric_.MachineMemoryResource(r);
      if (fabric_.IsGpu(r) || bus < 0 || fabric_.CoreMates(r).size() < 2 || !(c.dram_copy_gbps > 0)) continue;
      // The cores the machine's ranks were dealt to (Fabric::BuildComputeResources).
      const double cores = std::max(1, fabric_.host(fabric_.rank(r).host).cores);
      corun_[r] = std::min(1.0, c.dram_all_cores_gbps / cores / c.dram_copy_gbps);
    }
  }

  bool Shaped() const {
    for (int i = 0; i < fabric_.num_resources(); ++i)
      if (fabric_.resource(i).burst_bytes > 0) return true;
    return false;
  }

  // After Run: what each bucket holds at time `end` (refilled since its port went idle).
  std::vector<double> TokensAt(double end) const {
    std::vector<double> t = tokens_;
    for (int i = 0; i < fabric_.num_resources(); ++i) {
      const FabricResource& fr = fabric_.resource(i);
      if (fr.burst_bytes > 0)
        t[i] = std::min(fr.burst_bytes, t[i] + std::max(0.0, end - backlog_[i]) * cap_[i] * 1e3);
    }
    return t;
  }

  StatusOr<SimResult> Run() {
    if (sched_.nranks != fabric_.nranks())
      return InvalidArgument("simulate: schedule has nranks=" + std::to_string(sched_.nranks) + " but the fabric has " +
                             std::to_string(fabric_.nranks()));
    if (!sched_.scope.all())  // a one-rank plan: the others' steps were never built
      return InvalidArgument("simulate: schedule holds only rank " + std::to_string(sched_.scope.rank) +
                             "'s steps; simulation needs every rank's (PlanScope::AllRanks)");
    if (static_cast<int>(sched_.ranks.size()) != sched_.nranks)
      return InvalidArgument("simulate: schedule lists " + std::to_string(sched_.ranks.size()) + " ranks, nranks=" +
                             std::to_string(sched_.nranks));
    for (int r = 0; r < sched_.nranks; ++r) {
      ranks_[r].received.assign(sched_.ranks[r].steps.size(), 0);
      ranks_[r].inflight_pos.assign(sched_.ranks[r].steps.size(), -1);
      if (indexed_) ranks_[r].regions = std::make_unique<InflightRegions>();
      if (opt_.fused_codec != nullptr) MarkChains(r);
    }
    for (int r = 0; r < sched_.nranks; ++r) WEFT_RETURN_IF_ERROR(Issue(r, 0.0));
    while (!events_.empty()) {
      Event ev = events_.top();
      events_.pop();
      RankState& rs = ranks_[ev.rank];
      if (ev.received) {
        rs.received[ev.step] = 1;
        ++rs.received_inflight;
        const Step& st = sched_.ranks[ev.rank].steps[ev.step];
        WEFT_RETURN_IF_ERROR(FlushForwards(ev.rank, StreamKey(st.to, st.to_channel), ev.t));
      } else if (ev.step >= 0) {
        const Step& done = sched_.ranks[ev.rank].steps[ev.step];
        RemoveInflight(rs, ev.step, done);
        const StepSemantics& m = SemanticsOf(done.op);
        if (m.waits) rs.waits_inflight--;
        if (ForwardsAfterReceive(m)) rs.received_inflight--;
        rs.done = std::max(rs.done, ev.t);
      }
      WEFT_RETURN_IF_ERROR(Issue(ev.rank, ev.t));
    }
    SimResult res;
    for (int r = 0; r < sched_.nranks; ++r) {
      const RankState& rs = ranks_[r];
      const auto& steps = sched_.ranks[r].steps;
      if (rs.next < steps.size() || !rs.inflight.empty()) {
        size_t idx = !rs.inflight.empty() ? static_cast<size_t>(rs.inflight.front()) : rs.next;
        const Step& st = steps[idx];
        return InternalError("simulate " + sched_.algorithm + ": rank " + std::to_string(r) + " stuck at step " +
                             std::to_string(idx) + " (" + SemanticsOf(st.op).name + " peer " + std::to_string(st.peer) +
                             " channel " + std::to_string(st.channel) + "): no matching step on the peer");
      }
      res.rank_done_us.push_back(rs.done);
      res.time_us = std::max(res.time_us, rs.done);
    }
    std::vector<char> counted(fabric_.num_resources(), 0);
    for (int r = 0; r < sched_.nranks; ++r) {
      const int core = fabric_.ComputeResource(r);
      if (core < 0 || counted[core]) continue;
      counted[core] = 1;
      res.cpu_busy_us += busy_[core];
    }
    res.cpu_work_us = work_;
    res.steps = steps_;
    res.dram_fraction = *std::max_element(miss_.begin(), miss_.end());
    res.dram_resident = res.dram_fraction > 0;
    res.messages = messages_;
    res.bytes_moved = bytes_;
    for (int i = 0; i < fabric_.num_resources(); ++i) {
      if (busy_[i] > 0) res.resource_busy_us.emplace_back(fabric_.resource(i).name, busy_[i]);
      if (busy_[i] > res.hottest_busy_us) {
        res.hottest_busy_us = busy_[i];
        res.hottest_resource = fabric_.resource(i).name;
      }
    }
    return res;
  }

 private:
  void Push(double t, int rank, int step, bool received = false) {
    events_.push(Event{t, seq_++, rank, step, received});
  }

  // Working set (engine.h): per host, the bytes the call touches on every CPU rank (input +
  // output + scratch, plus the staging buffer a recv-reduce lands in) against the cache the
  // host's ranks can hold (Fabric::CacheBytes). The part that does not fit streams from DRAM:
  // a fraction miss = 1 - cache / working set of every byte pays the DRAM rate, the rest the
  // cache rate (per byte, times add: 1 / rate = hit / cache + miss / dram).
  void ClassifyWorkingSet() {
    miss_.assign(fabric_.nhosts(), 0.0);
    cap_.resize(fabric_.num_resources());
    for (int i = 0; i < fabric_.num_resources(); ++i) cap_[i] = fabric_.resource(i).gbps;
    if (sched_.nranks != fabric_.nranks() || static_cast<int>(sched_.ranks.size()) != sched_.nranks) return;
    std::vector<double> ws(fabric_.nhosts(), 0.0);
    for (int r = 0; r < sched_.nranks; ++r) {
      if (fabric_.IsGpu(r)) continue;
      const RankSchedule& rs = sched_.ranks[r];
      size_t staging = 0;
      for (const Step& st : rs.steps)
        if (SemanticsOf(st.op).receives && SemanticsOf(st.op).combine == StepCombine::kReduceIn)
          staging = std::max(staging, st.dst.count);
      ws[fabric_.rank(r).host] +=
          static_cast<double>(rs.input_count + rs.output_count + rs.scratch_count + staging) * elem_;
    }
    for (int h = 0; h < fabric_.nhosts(); ++h) {
      const double cache = static_cast<double>(fabric_.CacheBytes(h));
      miss_[h] = cache > 0 && ws[h] > cache ? 1.0 - cache / ws[h] : 0.0;
    }
    for (int i = 0; i < fabric_.num_resources(); ++i) {
      const FabricResource& fr = fabric_.resource(i);
      if (fr.host >= 0 && fr.dram_gbps > 0) cap_[i] = Blend(fr.gbps, fr.dram_gbps, miss_[fr.host]);
    }
  }
  // The rate of a byte stream whose `miss` fraction runs at `dram`, the rest at `cache`
  // (dram <= 0: no separate DRAM figure).
  static double Blend(double cache, double dram, double miss) {
    if (dram <= 0 || miss <= 0) return cache;
    return 1.0 / ((1.0 - miss) / cache + miss / dram);
  }
  double Miss(int r) const { return fabric_.IsGpu(r) ? 0.0 : miss_[fabric_.rank(r).host]; }
  // Rank r's core rate for a copy or a reduction over this call's working set, GB/s.
  double CoreRate(int r, bool reduce) const {
    const ComputeParams& c = fabric_.Compute(r);
    return reduce ? Blend(c.reduce_gbps, c.dram_reduce_gbps * corun_[r], Miss(r))
                  : Blend(c.copy_gbps, c.dram_copy_gbps * corun_[r], Miss(r));
  }
  static bool MemoryLink(LinkType t) {
    return t == LinkType::kSelf || t == LinkType::kSameNuma || t == LinkType::kCrossSocket;
  }

  // Occupies the resource for `bytes`; returns when its backlog drains.
  // `cached`: the bytes come from a cache-resident window, so they cost the resource's cache
  // capacity even when the call is DRAM-bound.
  // A shaped port (burst_bytes > 0) is a token bucket: bytes it holds tokens for pass without
  // occupying it (they leave at the line rate, which the stream's cap charges); the bucket
  // refills at the port's rate while the port is idle (while it is backlogged, the shaped
  // bytes consume the refill as it comes) and starts the call full.
  double Occupy(int res, double now, double bytes, bool cached = false) {
    const FabricResource& fr = fabric_.resource(res);
    double gbps = cached ? fr.gbps : cap_[res];
    const double start = std::max(now, backlog_[res]);
    double shaped = bytes;
    if (fr.burst_bytes > 0) {
      tokens_[res] = std::min(fr.burst_bytes, tokens_[res] + (start - backlog_[res]) * gbps * 1e3);
      const double take = std::min(tokens_[res], bytes);
      tokens_[res] -= take;
      shaped -= take;
    }
    double dt = shaped / (gbps * 1e3);  // GB/s -> bytes per us
    backlog_[res] = start + dt;
    busy_[res] += dt;
    return backlog_[res];
  }

  // A message's fixed CPU cost on a per-message resource (a TCP stack), booked after its
  // bytes: later messages' bytes queue behind it, but it does not delay this message, whose
  // own overhead its stream already charged (two 8-byte messages from the two ranks of one
  // machine are not serialized by it). Without it, 64 KiB chunks looked as fast as 512 KiB
  // ones on TCP loopback, and 2-rank rings of 4-16 MiB measured 1.3-1.5x slower with them
  // (perf/RESULTS.md, session 15).
  void OccupyFor(int res, double us) {
    backlog_[res] += us;
    busy_[res] += us;
  }

  // Occupies rank r's core for `us` of CPU work from `start` (a copy its thread or its kernel
  // does, a reduction, a codec step: it queues with the rank's other work and, on a shared
  // core, with the other ranks'); returns when the core is free, and in `begin` (when given)
  // when the work started.
  double OccupyCore(int r, double start, double us, CpuWork kind, double* begin = nullptr) {
    work_[static_cast<size_t>(kind)] += us;
    int core = fabric_.ComputeResource(r);
    const double from = std::max(start, backlog_[core]);
    backlog_[core] = from + Shared(r, from, us);
    busy_[core] += us;  // the CPU work itself; sharing stretches its span, not its cost
    if (begin != nullptr) *begin = from;
    return backlog_[core];
  }

  // Oversubscription: a rank that blocked (on a signal or a message) shares its core with a
  // mate that runs meanwhile; it continues only after the kernel switches back to it. The
  // executor's waiting rank yields (backoff.h), so that is one sched_yield handoff: 1.35 us
  // measured on this project's 2-vCPU VM (two threads on one core, 2.7 us per yield round
  // trip), 1.5 us with the process switch. Without it the model counted a signal round on
  // 4 ranks over 2 cores at ~0.3 us and chose twoshot's four rounds over oneshot's one at
  // 2 KiB (13 us measured against 5).
  static constexpr double kSharedCoreHandoffUs = 1.5;
  double Handoff(int r) const { return fabric_.CoreMates(r).size() > 1 ? kSharedCoreHandoffUs : 0.0; }

  // The machine's memory bus (Fabric::MachineMemoryResource), shared by its cores: a CPU step
  // whose DRAM share would take `dram_us` alone at rank r's DRAM copy rate moves what a copy
  // moves in that time, booked on the bus from `begin`; returns when the bus has served it (0:
  // no bus). Alone, the bus (every core's rate together) serves a step sooner than its core
  // does, so only work that overlaps on several cores waits for it.
  double MachineMemory(int r, double begin, double dram_us) {
    const int bus = fabric_.MachineMemoryResource(r);
    const double gbps = fabric_.Compute(r).dram_copy_gbps;
    if (bus < 0 || dram_us <= 0 || gbps <= 0) return 0;
    return Occupy(bus, begin, dram_us * gbps * 1e3);
  }
  // The DRAM share of a copy (or reduction) of `bytes` by rank r, us at its core's DRAM rate.
  double DramShareUs(int r, double bytes, bool reduce) const {
    const ComputeParams& c = fabric_.Compute(r);
    const double gbps = reduce ? c.dram_reduce_gbps : c.dram_copy_gbps;
    return gbps > 0 ? Miss(r) * bytes / (gbps * 1e3) : 0.0;
  }

  // Oversubscription (Fabric::CoreMates): `dt` us of CPU work rank r starts at `t` on a core
  // it shares. The kernel time-slices the busy ranks (idle ones wait in the kernel or yield),
  // i.e. processor sharing: while a mate still has work pending, both run at half speed, so
  // the work is stretched by the overlap with each mate's pending work, min(dt, pending), and
  // the mate's pending work by the same overlap (exact for two jobs). The mate's step already
  // scheduled keeps its end; its later CPU work starts from the moved backlog. Without moving
  // it, two mates got 1.5 cores' worth of one core: the 2x2 netns harness (4 ranks, 2 vCPUs)
  // was predicted 34 ms for a 1-bit allreduce that measured 53, its ranks' CPU work being
  // ~24 ms each (perf record, 2026-12-03).
  double Shared(int r, double t, double dt) {
    double stretched = dt;
    for (int m : fabric_.CoreMates(r)) {
      if (m == r) continue;
      double& mate = backlog_[fabric_.ComputeResource(m)];
      const double overlap = std::min(dt, std::max(0.0, mate - t));
      stretched += overlap;
      mate += overlap;
    }
    return stretched;
  }

  // Time at which a transfer of `bytes` along a->b on `channel`, started at `now`, is
  // delivered. A (a, b, channel) stream is a FIFO (one socket / queue in a transport): its
  // messages pay their fixed overhead and stream-rate time one after another; the route's
  // shared resources add their backlog on top.
  // `copies`: the receiver's (reader's) thread moves the bytes itself, holding its core (see
  // below); false for a direct reduce, whose reduction step charges the core.
  // `into_cache`: the receiver streams the message into a chain (exec/chain_sink.h): its
  // copy writes into the cache, so half of the DRAM traffic (the reads) remains; the copy's
  // rate from DRAM is the calibrated one into a sink (LinkParams::dram_sink_flow_gbps: its
  // reads and page pinning keep it near the stored copy's), or without one the DRAM rate
  // for half the share.
  double Transfer(int a, int b, uint32_t channel, double now, double bytes, bool direct = false,
                  bool copies = true, bool into_cache = false) {
    Route route = fabric_.RouteOf(a, b, opt_.shm_enabled);
    const LinkParams& link = fabric_.table().link(route.type);
    const bool sink_rate = into_cache && link.dram_sink_flow_gbps > 0;
    const double miss = Miss(b) * (into_cache && !sink_rate ? 0.5 : 1.0);
    // A direct read is a load from mapped memory: no transport post/poll/complete path, only
    // the local step's own cost.
    if (direct) route.overhead_us = fabric_.Compute(b).overhead_us;
    // Two-sided shm message: the stream runs at the cache rate, blended with the DRAM path's
    // for the share of the working set beyond the cache. Direct reads come from the peer's
    // window (bounded scratch that stays cache-resident) and keep the cache figures.
    const bool dram_msg = !direct && MemoryLink(route.type) && miss > 0;
    if (dram_msg)
      route.flow_gbps = Blend(route.flow_gbps, sink_rate ? link.dram_sink_flow_gbps : link.dram_flow_gbps, miss);
    // Below the transport's single-copy threshold a two-sided shm message goes through the
    // ring: the sender's thread copies into a slot while the receiver's copies the previous
    // one out, at the cores' copy rate inside the cache (no page pinning, cache-hot slots).
    // The share from DRAM streams at the DRAM path's rate either way (2-rank all-to-all of
    // 16 MiB: 64 KiB ring messages 1.8-2.8 ms, CMA 1.9-2.0 ms). Above the threshold, the
    // receiver makes one CMA copy at the link's stream rate (what calibration measures).
    const bool cpu_pair = MemoryLink(route.type) && !fabric_.IsGpu(a) && !fabric_.IsGpu(b);
    const bool ring_path = cpu_pair && !direct && bytes / Multiplicity(bytes) < kShmSingleCopyMinBytes;
    if (ring_path)
      route.flow_gbps = Blend(std::min(fabric_.Compute(a).copy_gbps, fabric_.Compute(b).copy_gbps),
                              fabric_.table().link(route.type).dram_flow_gbps, miss);
    // A shaped route: the stream runs at the line rate, the ports' token buckets shape it.
    if (route.line_gbps > 0) route.flow_gbps = route.line_gbps;
    double& stream = streams_[Key(a, b, sched_.nranks, channel)];
    double start = std::max(now, stream);
    double xfer = bytes / (route.flow_gbps * 1e3);
    double done = start + route.overhead_us * Multiplicity(bytes) + xfer;
    stream = done;
    for (int i = 0; i < route.nres; ++i) {
      done = std::max(done, Occupy(route.res[i], start, bytes, direct));
      if (fabric_.resource(route.res[i]).per_message) OccupyFor(route.res[i], route.overhead_us * Multiplicity(bytes));
    }
    // The receiver's thread copies a two-sided shm message (draining the ring, or CMA's single
    // copy), and a direct read is a copy by the reading rank (b): the copy holds its core, so
    // it queues with the rank's reductions and other receives. A rank's receives thus run at
    // one core's rate however many channels carry them: 2 channels measured no faster than 1
    // for 2-rank rings at 128 KiB-4 MiB (perf/RESULTS.md), while a model without this
    // charge chose them. The ring's copy in holds the sender's core as well.
    if (copies && MemoryLink(route.type) && !fabric_.IsGpu(b)) {
      done = std::max(done, OccupyCore(b, start, xfer, CpuWork::kReceiveCopy));
      if (dram_msg) done = std::max(done, MachineMemory(b, start, DramShareUs(b, bytes * (into_cache ? 0.5 : 1.0), false)));
    }
    if (ring_path) done = std::max(done, OccupyCore(a, start, bytes / (CoreRate(a, false) * 1e3), CpuWork::kReceiveCopy));
    // A route through a software stack (TCP: LinkParams::stack_cpu_gbps) holds both ends'
    // cores: the sender's as the stack takes the bytes, the receiver's as it hands them over.
    // On a host whose ranks outnumber its cores that is CPU the other ranks' codec work waits
    // for (2x2 harness: 0.7 ms per MB sent and received per rank, by the gap between the
    // model's CPU and /usr/bin/time's as the codecs' wire bytes vary).
    const double stack_gbps = fabric_.table().link(route.type).stack_cpu_gbps;
    if (stack_gbps > 0 && !MemoryLink(route.type))
      for (int end : {a, b})
        if (!fabric_.IsGpu(end)) done = std::max(done, OccupyCore(end, start, bytes / (stack_gbps * 1e3), CpuWork::kStack));
    return done + route.latency_us;
  }

  // The shm transport's default single-copy threshold (a job that sets WEFT_SHM_CMA_MIN_BYTES
  // is modelled with the default).
  static constexpr double kShmSingleCopyMinBytes = static_cast<double>(kShmSingleCopyMinBytesDefault);
  // How many real messages a simulated one of `bytes` stands for (see SimOptions).
  double Multiplicity(double bytes) const {
    if (opt_.overhead_multiplier <= 1 || opt_.real_chunk_elems == 0) return 1;
    double m = bytes / elem_ / static_cast<double>(opt_.real_chunk_elems);
    return std::max(1.0, std::min(opt_.overhead_multiplier, std::ceil(m)));
  }

  // `cached`: the operands are in the cache whatever the call's working set (a codec chain).
  double Compute(int r, double start, double bytes, bool reduce, bool staging = false,
                 bool cached = false) {
    const ComputeParams& c = fabric_.Compute(r);
    const double miss = cached ? 0.0 : Miss(r);
    const double rate = cached ? (reduce ? c.reduce_gbps : c.copy_gbps) : CoreRate(r, reduce);
    double begin = start;
    double end = OccupyCore(r, start, bytes / (rate * 1e3), reduce ? CpuWork::kReduce : CpuWork::kCopy, &begin);
    if (!cached) end = std::max(end, MachineMemory(r, begin, DramShareUs(r, bytes, reduce)));
    // Recv-reduce staging: the message landed in a staging buffer, and reducing it re-reads
    // it and writes the DRAM-resident result: an extra pass over the memory bus, shared with
    // the host's other ranks. (Plain local steps of direct algorithms work next to a
    // cache-resident window; their cost is the core rate.)
    int bus = fabric_.MemoryResource(r);
    if (miss > 0 && staging && bus >= 0) end = std::max(end, Occupy(bus, start, bytes * miss));
    return end + c.overhead_us * Multiplicity(bytes);
  }

  static uint64_t Key(int from, int to, int n, uint32_t channel) {
    return ((static_cast<uint64_t>(from) * static_cast<uint64_t>(n) + static_cast<uint64_t>(to)) << 17) | channel;
  }

  Status Match(const Posted& send, const Posted& recv, double now) {
    const Step& s = sched_.ranks[send.rank].steps[send.step];
    const Step& r = sched_.ranks[recv.rank].steps[recv.step];
    size_t rcount = r.dst.count;
    const size_t scount = SentRegion(s).count;
    if (scount != rcount)
      return InvalidArgument("simulate " + sched_.algorithm + ": rank " + std::to_string(send.rank) + " step " +
                             std::to_string(send.step) + " sends " + std::to_string(scount) +
                             " elements but rank " + std::to_string(recv.rank) + " step " + std::to_string(recv.step) +
                             " receives " + std::to_string(rcount));
    double bytes = static_cast<double>(scount) * elem_;
    const RankState& rr = ranks_[recv.rank];
    const bool streamed = !rr.streamed.empty() && rr.streamed[recv.step] == kStreamedRecv &&
                          StreamsOver(send.rank, recv.rank);
    double arrive = Transfer(send.rank, recv.rank, SendChannel(s), now, bytes, false, true, streamed);
    ++messages_;
    bytes_ += bytes;
    Push(arrive, send.rank, send.step);
    // A receiver with nothing left to do blocked on this message: on a shared core it runs
    // again only after a handoff.
    if (ranks_[recv.rank].busy_until <= arrive) arrive += Handoff(recv.rank);
    // A receive that reduces lands in staging and is reduced from there (executor.cc).
    const bool reduces = SemanticsOf(r.op).combine == StepCombine::kReduceIn;
    double done = reduces ? Compute(recv.rank, arrive, bytes, true, /*staging=*/true) : arrive;
    // A fused step goes on to forward what it received; it completes with its forward.
    Push(done, recv.rank, recv.step, ForwardsAfterReceive(SemanticsOf(r.op)));
    return OkStatus();
  }

  Status Issue(int r, double now) {
    RankState& rs = ranks_[r];
    if (now < rs.busy_until) return OkStatus();  // a resume event is pending
    const std::vector<Step>& steps = sched_.ranks[r].steps;
    const int n = sched_.nranks;
    while (rs.next < steps.size()) {
      if (rs.waits_inflight > 0) break;  // acquire fence
      const Step& st = steps[rs.next];
      const StepSemantics& m = SemanticsOf(st.op);
      if (m.asynchronous && static_cast<int>(rs.inflight.size() - rs.received_inflight) >= window_)
        break;
      if (m.fence == StepFence::kRelease && !rs.inflight.empty()) break;
      // A plain send waits for earlier fused forwards to its stream (program order per stream).
      if (m.sends != StepOperand::kNone && !m.receives) {
        auto f = rs.forwards.find(StreamKey(st.peer, st.channel));
        if (f != rs.forwards.end() && !f->second.empty()) break;
      }
      if (rs.blocker >= 0 && rs.inflight_pos[rs.blocker] >= 0) break;
      rs.blocker = rs.regions ? rs.regions->FindConflict(st) : ScanConflicts(rs, steps, st);
      if (rs.blocker >= 0) break;
      int idx = static_cast<int>(rs.next++);
      ++steps_;
      if (st.peer >= n || (st.peer < 0 && HasPeer(m)) ||
          (m.sends_to_second_peer && (st.to < 0 || st.to >= n)))
        return InvalidArgument("simulate " + sched_.algorithm + ": rank " + std::to_string(r) + " step " +
                               std::to_string(idx) + " (" + m.name + ") has peer " + std::to_string(st.peer) +
                               " outside [0," + std::to_string(n) + ")");
      if (m.asynchronous) {
        rs.inflight_pos[idx] = static_cast<int>(rs.inflight.size());
        rs.inflight.push_back(idx);
        if (rs.regions) rs.regions->Add(idx, st);
        WEFT_RETURN_IF_ERROR(PostAsync(r, idx, now));
        continue;
      }
      // Local step: runs on the rank's thread; issuing resumes when it is done.
      const bool copy_traffic = !rs.streamed.empty() &&
                                (rs.streamed[idx] == kStreamedOpener || rs.streamed[idx] == kOnePassOpener);
      double end = RunLocal(r, st, now, !rs.chained.empty() && rs.chained[idx] != 0, copy_traffic);
      rs.busy_until = end;
      rs.done = std::max(rs.done, end);
      Push(end, r, -1);
      return OkStatus();
    }
    return OkStatus();
  }

  static int ScanConflicts(const RankState& rs, const std::vector<Step>& steps, const Step& st) {
    for (int idx : rs.inflight)
      if (Conflicts(steps[idx], st)) return idx;
    return -1;
  }

  static void RemoveInflight(RankState& rs, int step, const Step& st) {
    const int pos = rs.inflight_pos[step];
    if (pos < 0) return;
    rs.inflight[pos] = rs.inflight.back();
    rs.inflight_pos[rs.inflight[pos]] = pos;
    rs.inflight.pop_back();
    rs.inflight_pos[step] = -1;
    if (rs.regions) rs.regions->Remove(st);
  }

  // An asynchronous step: its message (or wait) joins the queue of its stream and is matched
  // with the peer's side when that is there.
  Status PostAsync(int r, int idx, double now) {
    const Step& st = sched_.ranks[r].steps[idx];
    const StepSemantics& m = SemanticsOf(st.op);
    const int n = sched_.nranks;
    if (m.waits) {
      ranks_[r].waits_inflight++;
      auto& q = signals_[Key(st.peer, r, n, 0)];
      if (!q.arrivals.empty()) {
        const double arrival = q.arrivals.front();
        Push(arrival > now ? arrival + Handoff(r) : now, r, idx);  // not there yet: r blocks
        q.arrivals.pop_front();
      } else {
        q.waits.push_back(Posted{r, idx});
      }
      return OkStatus();
    }
    if (m.sends != StepOperand::kNone && !m.receives) return PostSend(r, idx, now);
    if (ForwardsAfterReceive(m)) ranks_[r].forwards[StreamKey(st.to, st.to_channel)].push_back(idx);
    auto& q = queues_[Key(st.peer, r, n, st.channel)];
    if (q.sends.empty()) {
      q.recvs.push_back(Posted{r, idx});
      return OkStatus();
    }
    Posted sd = q.sends.front();
    q.sends.pop_front();
    return Match(sd, Posted{r, idx}, now);
  }

  // Step idx's message joins its stream (to SendPeer) and meets the receiver's post if there.
  Status PostSend(int r, int idx, double now) {
    const Step& st = sched_.ranks[r].steps[idx];
    auto& q = queues_[Key(r, SendPeer(st), sched_.nranks, SendChannel(st))];
    if (q.recvs.empty()) {
      q.sends.push_back(Posted{r, idx});
      return OkStatus();
    }
    Posted rv = q.recvs.front();
    q.recvs.pop_front();
    return Match(Posted{r, idx}, rv, now);
  }

  // Posts the forwards of `stream` whose receives are done, oldest first (program order per
  // stream, as the executor keeps it).
  Status FlushForwards(int r, uint64_t stream, double now) {
    Fifo<int>& q = ranks_[r].forwards[stream];
    while (!q.empty() && ranks_[r].received[q.front()]) {
      int idx = q.front();
      q.pop_front();
      WEFT_RETURN_IF_ERROR(PostSend(r, idx, now));
    }
    return OkStatus();
  }

  // A synchronous step's cost, from what its row of the step table says it does; returns when
  // the rank's thread is free again.
  // The executor's chains of rank r (exec/codec_chain.h), as it finds them (no feedback).
  void MarkChains(int r) {
    const std::vector<Step>& steps = sched_.ranks[r].steps;
    for (const CodecChain& c : FindCodecChains(steps, *opt_.fused_codec, false)) {
      if (ranks_[r].chained.empty()) ranks_[r].chained.assign(steps.size(), 0);
      for (size_t i = c.first + 1; i <= c.last; ++i) ranks_[r].chained[i] = 1;
      if (!c.tiled && !c.built) {
        if (ranks_[r].streamed.empty()) ranks_[r].streamed.assign(steps.size(), 0);
        ranks_[r].streamed[c.first] = kOnePassOpener;
        continue;
      }
      if (!StreamedChainsEnabled() || c.first == 0) continue;
      if (StreamsIntoChain(steps, c.first - 1, c)) {
        if (!StreamsOver(steps[c.first - 1].peer, r)) continue;
        if (ranks_[r].streamed.empty()) ranks_[r].streamed.assign(steps.size(), 0);
        ranks_[r].streamed[c.first - 1] = kStreamedRecv;
        ranks_[r].streamed[c.first] = kStreamedOpener;
        continue;
      }
      MarkOperandStreams(r, c);
    }
  }

  // Receives the executor streams into chain c's operands (exec/operand_sink.h): each lands in
  // the cache, and the chain's tiles read one operand from memory (the rank's own lane) and
  // write nothing: a copy's traffic, which the opener carries.
  void MarkOperandStreams(int r, const CodecChain& c) {
    const std::vector<Step>& steps = sched_.ranks[r].steps;
    const std::vector<StreamedOperand> ops = OperandStreamsFor(steps, c, window_);
    if (ops.empty()) return;
    for (const StreamedOperand& o : ops)
      if (!StreamsOver(steps[o.recv].peer, r)) return;
    if (ranks_[r].streamed.empty()) ranks_[r].streamed.assign(steps.size(), 0);
    for (const StreamedOperand& o : ops) ranks_[r].streamed[o.recv] = kStreamedRecv;
    ranks_[r].streamed[c.first] = kStreamedOpener;
  }

  // The executor streams receives into chains on shm only (the transport that takes sinks).
  bool StreamsOver(int from, int to) const {
    if (from < 0 || from >= sched_.nranks || fabric_.IsGpu(from) || fabric_.IsGpu(to)) return false;
    return MemoryLink(fabric_.RouteOf(from, to, opt_.shm_enabled).type);
  }

  // `chained`: the step runs in a codec chain after its first (SimOptions::fused_codec).
  // `copy_traffic`: the first step of a chain whose receive streamed into it (what arrived is
  // in the cache, so only its other operand, the input lane, comes from DRAM) or of an
  // untiled chain (both operands read, the sum never written): a copy's traffic.
  double RunLocal(int r, const Step& st, double now, bool chained = false, bool copy_traffic = false) {
    const StepSemantics& m = SemanticsOf(st.op);
    const double bytes = static_cast<double>(st.dst.count) * elem_;
    if (m.signals) {
      // A signal is a flag store into the peer's mapped memory: a local step's cost,
      // visible after the link's latency.
      Route route = fabric_.RouteOf(r, st.peer, opt_.shm_enabled);
      double end = now + fabric_.Compute(r).overhead_us;
      double arrival = end + route.latency_us;
      auto& q = signals_[Key(r, st.peer, sched_.nranks, 0)];
      if (!q.waits.empty()) {
        Posted w = q.waits.front();
        q.waits.pop_front();
        Push(arrival + Handoff(w.rank), w.rank, w.step);  // the waiter blocked on it
      } else {
        q.arrivals.push_back(arrival);
      }
      return end;
    }
    if (m.codec != StepCodec::kNone) return RunCodec(r, st, now, chained);
    if (m.reads_remote) {
      // A direct read is a copy by this rank's thread; a direct reduce is one pass that loads
      // the peer's bytes as it reduces them: the transfer and the reduction overlap, and the
      // reduction holds the core.
      const bool reduce = m.combine == StepCombine::kReduceIn;
      double end = Transfer(st.peer, r, kDirectChannel, now, bytes, /*direct=*/true, /*copies=*/!reduce);
      if (reduce) end = std::max(end, Compute(r, now, bytes, true));
      ++messages_;
      bytes_ += bytes;
      return end;
    }
    switch (m.combine) {
      case StepCombine::kCopyIn: return Compute(r, now, bytes, false, false, chained);
      case StepCombine::kReduceIn: return Compute(r, now, bytes, !copy_traffic, false, chained);
      case StepCombine::kFinalizeIn: return now + fabric_.Compute(r).overhead_us;
      case StepCombine::kNothing: break;
    }
    return now;
  }

  // Codec steps run on the rank's core at the codec's speed (SimOptions: GB/s of float32
  // values, measured by codec_bench), counted on the values side: src for an encode, dst for
  // a decode (plus the reduction of a decode_reduce), plus the codec call's fixed cost
  // (SimOptions::encode_fixed_us / decode_fixed_us, measured at 1 value) and the rank's
  // per-step overhead. Without a speed, the copy rate. The encoded bytes then travel as
  // ordinary messages of the encoded region's size.
  double RunCodec(int r, const Step& st, double now, bool chained = false) {
    const StepSemantics& m = SemanticsOf(st.op);
    const bool encode = m.codec == StepCodec::kEncodeSrc;
    const bool reduces = m.combine == StepCombine::kReduceIn;
    // A sparse decode-reduce (top-k) decodes its kept values only, and adds each into its cache
    // line of dst: 16 float32 values a line, so at most 16x the kept share of dst is touched.
    const double density = !encode && reduces ? std::clamp(opt_.decode_reduce_density, 0.0, 1.0) : 1.0;
    const double lines = std::min(1.0, 16 * density);
    const double dense = static_cast<double>(encode ? st.src.count : st.dst.count) * elem_;
    const double values = dense * density;
    const double chain_gbps = encode ? opt_.encode_chain_gbps : opt_.decode_chain_gbps;
    double gbps = chained && chain_gbps > 0
                      ? chain_gbps
                      : (encode ? opt_.encode_gbps : opt_.decode_gbps) * (chained ? CodecChainSpeedup(fabric_.Compute(r)) : 1.0);
    if (!chained && gbps > 0 && chain_gbps > gbps && corun_[r] < 1) {
      // Beside another core's streaming (ClassifyCoRunning) the step's stalls on memory
      // stretch, its compute does not: per value, the time in the cache (compute) plus what
      // the DRAM rate adds to it (stalls) over the co-running share. 1-bit's decode (47 GB/s
      // in the cache, 25 beyond it) then runs at 19, top-k's encode (14, 12.9) at 12.3.
      const double stall = 1.0 / gbps - 1.0 / chain_gbps;
      gbps = 1.0 / (1.0 / chain_gbps + stall / corun_[r]);
    }
    const double fixed_us = encode ? opt_.encode_fixed_us : opt_.decode_fixed_us;
    double end = now;
    if (gbps <= 0) {
      end = Compute(r, now, values, false, false, chained) + fixed_us;
    } else {
      double begin = now;
      end = OccupyCore(r, now, fixed_us + values / (gbps * 1e3), encode ? CpuWork::kEncode : CpuWork::kDecode, &begin);
      // The codec speeds are DRAM figures (codec_bench at 64 MiB); a chain's later steps work
      // in the cache. On the bus the step moves what it reads and writes (values and
      // encoding), booked as a copy of half that (a copy reads and writes its bytes), not
      // for its whole time: a codec that waits on the core (top-k's selection, fp8's
      // conversions) leaves the bus to the other cores meanwhile.
      const double encoded = static_cast<double>(encode ? st.dst.count : st.src.count) * elem_;
      if (!chained) end = std::max(end, MachineMemory(r, begin, DramShareUs(r, (values + encoded) / 2, false)));
    }
    if (reduces) end = Compute(r, end, dense * lines, true, false, chained);
    return end + fabric_.Compute(r).overhead_us;
  }

  struct Queue {
    Fifo<Posted> sends, recvs;
  };
  struct SignalQueue {
    Fifo<double> arrivals;
    Fifo<Posted> waits;
  };

  const Schedule& sched_;
  const Fabric& fabric_;
  double elem_;
  SimOptions opt_;
  int window_;
  // Wider windows than this index the in-flight regions (InflightRegions) instead of scanning.
  static constexpr int kIndexedWindow = 64;
  bool indexed_ = false;
  std::vector<RankState> ranks_;
  std::vector<double> backlog_, busy_;
  std::vector<double> tokens_;     // shaped ports: bytes the token bucket holds (at backlog_)
  std::vector<double> cap_;        // resource capacity for this call (cache or DRAM rate)
  std::vector<double> miss_;       // [host] fraction of the working set beyond the cache
  std::array<double, kCpuWorkKinds> work_{};  // CPU us by kind, every rank (SimResult::cpu_work_us)
  std::vector<double> corun_;      // [rank] DRAM rates' factor with every core busy (ClassifyCoRunning)
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::unordered_map<uint64_t, Queue> queues_;
  std::unordered_map<uint64_t, SignalQueue> signals_;
  std::unordered_map<uint64_t, double> streams_;  // FIFO stream -> when it is free
  static constexpr uint32_t kDirectChannel = 0x10000;  // direct reads: own stream per pair
  uint64_t seq_ = 0;
  size_t steps_ = 0, messages_ = 0;
  double bytes_ = 0;
};

}  // namespace

StatusOr<SimResult> SimulateSchedule(const Schedule& schedule, const Fabric& fabric, size_t elem_size,
                                     const SimOptions& options) {
  Engine engine(schedule, fabric, elem_size, options);
  StatusOr<SimResult> full = engine.Run();
  if (full.ok()) full->isolated_us = full->time_us;
  if (!full.ok() || !engine.Shaped()) return full;
  // Shaped ports: the call is timed as one of a sequence of back-to-back calls of its size (a
  // sweep, a training step's buckets), whose buckets hold what the previous call left. From
  // a full bucket: if the call gives back what it took (refills while its ports idle), full is
  // the steady state. Otherwise the sequence drains it: iterate the call from an empty bucket
  // twice (the level rises towards the fixed point; the second pass is close to it).
  std::vector<double> after = engine.TokensAt(full->time_us);
  bool drains = false;
  for (int i = 0; i < fabric.num_resources(); ++i)
    if (fabric.resource(i).burst_bytes > 0 && after[i] < fabric.resource(i).burst_bytes - 1) drains = true;
  if (!drains) return full;
  Engine from_empty(schedule, fabric, elem_size, options, std::vector<double>(fabric.num_resources(), 0.0));
  StatusOr<SimResult> first = from_empty.Run();
  if (!first.ok()) return first;
  Engine steady(schedule, fabric, elem_size, options, from_empty.TokensAt(first->time_us));
  StatusOr<SimResult> result = steady.Run();
  if (result.ok()) result->isolated_us = full->time_us;
  return result;
}

}  // namespace weft
