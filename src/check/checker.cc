// Symbolic schedule checker (see checker.h for the model).
//
// Phases: (1) layout: the user-visible buffers of each rank resolved into one "user" address
// space per rank with NCCL's in-place aliasing, plus Scratch; (2) structure: peers, sizes,
// regions inside declared and real buffer sizes, no writes to a read-only input; (3) symbolic
// execution under the executor's issue rule, with happens-before tracking when the schedule
// has direct steps or is a barrier; (4) the final comparison with the expected result.
#include "check/checker.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/step_table.h"
#include "algorithms/vcount_pattern.h"

namespace weft {
namespace {

constexpr int kMaxRanks = 64;

// One element's symbolic value. idx -1: nothing was ever written; kEncoded: the element is
// part of an encoding (codec steps), `origin` says which.
struct Val {
  uint64_t mask = 0;  // ranks whose contribution it holds
  int32_t idx = -1;   // element index in the contributors' input
  uint8_t fin = 0;    // finalized (weftAvg division applied)
  uint8_t quant = 0;  // kQuantPartial | kQuantComplete: how the value went through a codec
  // Encoded elements: 1 + the encoding's number. Values: 1 + the encoding they were decoded
  // from (kept by copies and messages, which move the same bits), 0 for values computed here.
  uint16_t origin = 0;
};
constexpr int32_t kUnwritten = -1;
constexpr int32_t kDontCare = -2;  // expected-value marker: output element not checked
constexpr int32_t kEncoded = -3;
// A decoded value went through a codec while it held part of the contributions (a contribution
// or a partial sum), or once it held them all (the reduced result). Quantizing a partial sum
// that was quantized before is "re-quantizing at a hop"; quantizing a result twice is too.
constexpr uint8_t kQuantPartial = 1, kQuantComplete = 2;

enum Space : uint8_t { kUser = 0, kScr = 1 };

// A resolved memory range of one rank.
struct Range {
  uint8_t space = kUser;
  size_t lo = 0, hi = 0;
  bool empty() const { return lo == hi; }
  bool Overlaps(const Range& o) const { return space == o.space && lo < o.hi && o.lo < hi; }
  bool operator==(const Range& o) const { return space == o.space && lo == o.lo && hi == o.hi; }
};
struct Access {
  Range read[2];
  Range write;
};
bool Empty(const Access& a) { return a.write.empty() && a.read[0].empty() && a.read[1].empty(); }
bool Conflicts(const Access& a, const Access& b) {
  if (!a.write.empty() &&
      (a.write.Overlaps(b.write) || a.write.Overlaps(b.read[0]) || a.write.Overlaps(b.read[1])))
    return true;
  if (!b.write.empty() && (b.write.Overlaps(a.read[0]) || b.write.Overlaps(a.read[1])))
    return true;
  return false;
}

// Op properties come from the step table (algorithms/step_table.h), the executor's source too.
bool IsAsync(StepOp op) { return SemanticsOf(op).asynchronous; }
bool IsReducing(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce ||
         c == Collective::kReduceScatterV;
}

const char* BufName(Buffer b) {
  switch (b) {
    case Buffer::kInput: return "input";
    case Buffer::kOutput: return "output";
    case Buffer::kScratch: return "scratch";
  }
  return "?";
}
std::string RegionName(const Region& r) {
  return std::string(BufName(r.buffer)) + "[" + std::to_string(r.offset) + ".." +
         std::to_string(r.offset + r.count) + ")";
}
std::string StepName(int rank, size_t index, const Step& s) {
  const StepSemantics& m = SemanticsOf(s.op);
  std::string d = "rank " + std::to_string(rank) + " step " + std::to_string(index) + " (" + m.name;
  if (s.peer >= 0 && HasPeer(m)) d += (PeerIsSource(m) ? " from " : " to ") + std::to_string(s.peer);
  if (m.sends_to_second_peer) d += " forward to " + std::to_string(s.to);
  return d + ")";
}
std::string RankList(uint64_t mask) {
  std::string s;
  for (int r = 0; r < 64; ++r)
    if (mask >> r & 1) s += (s.empty() ? "" : ",") + std::to_string(r);
  return "{" + s + "}";
}
int LowestRank(uint64_t mask) {
  for (int r = 0; r < 64; ++r)
    if (mask >> r & 1) return r;
  return -1;
}

// The user buffers of one rank after aliasing: input at in_base, output at out_base in one
// address space of user_size elements; only [out_base, out_base + out_user) may be written.
struct Layout {
  size_t in_user = 0, out_user = 0;  // real sizes of the caller's buffers
  size_t in_base = 0, out_base = 0, user_size = 0;
};

using VClock = std::vector<uint32_t>;

struct RankState {
  const RankSchedule* sched = nullptr;
  Layout layout;
  std::vector<Val> user, scratch;
  size_t next = 0;
  // Async steps in flight, in no particular order, with each one's position in the list
  // (kNone: absent), so that completion is O(1): direct schedules keep thousands in flight.
  std::vector<size_t> inflight;
  std::vector<uint32_t> inflight_slot;
  static constexpr uint32_t kNone = UINT32_MAX;
  // Per element of each space: how many in-flight steps write it and read it. A new step is
  // blocked by an in-flight one exactly when Conflicts(new, in-flight) holds; counting per
  // element answers that in the length of the new step's ranges instead of a scan of
  // everything in flight (which was most of the proof time of chunked schedules).
  std::vector<uint32_t> writing[2], reading[2];
  void Count(const Access& a, int delta) {
    auto add = [&](std::vector<uint32_t>& c, const Range& g) {
      for (size_t e = g.lo; e < g.hi && e < c.size(); ++e) c[e] += delta;
    };
    add(writing[a.write.space], a.write);
    for (const Range& g : a.read) add(reading[g.space], g);
  }
  bool Blocked(const Access& a) const {
    auto any = [](const std::vector<uint32_t>& c, const Range& g) {
      for (size_t e = g.lo; e < g.hi && e < c.size(); ++e)
        if (c[e] != 0) return true;
      return false;
    };
    if (any(writing[a.write.space], a.write) || any(reading[a.write.space], a.write)) return true;
    for (const Range& g : a.read)
      if (any(writing[g.space], g)) return true;
    return false;
  }
  void AddInflight(size_t i, const Access& a) {
    inflight_slot[i] = static_cast<uint32_t>(inflight.size());
    inflight.push_back(i);
    Count(a, +1);
  }
  void RemoveInflight(size_t i, const Access& a) {
    if (inflight_slot[i] == kNone) return;
    const size_t last = inflight.back();
    inflight[inflight_slot[i]] = last;
    inflight_slot[last] = inflight_slot[i];
    inflight.pop_back();
    inflight_slot[i] = kNone;
    Count(a, -1);
  }
  int waits_inflight = 0;
  size_t received_inflight = 0;           // fused steps whose receive is done (out of the window)
  size_t completed_async = 0, total_async = 0;
  // happens-before (only when tracking)
  VClock clock;                           // knowledge of the issuing thread
  // Flat [step * p + rank] clocks of asynchronous steps: at issue, and at completion.
  std::vector<uint32_t> issue_vc, done_vc;
  std::vector<size_t> unabsorbed;         // completed recvs/waits not yet known to issue
  // Those of them that touch no memory and carry no acquire fence (most waits of a direct
  // schedule): no conflict can absorb them, only a release, so Issue does not scan them.
  std::vector<size_t> unabsorbed_quiet;
  // Per step: the ranges it reads and writes, resolved once (Initialize). Issue compares every
  // unabsorbed step's access with the new one, and resolving them again each time was half of
  // the proof time of the direct schedules (p^2 signal/wait steps).
  std::vector<Access> access;
  std::vector<uint32_t> absorbed_at;      // per step: issue epoch that learned its completion
  // Per element of each space (Space: user buffers, scratch): the last step of this rank that
  // wrote it, -1 none; and peers' direct reads of it since that write. User buffers are read
  // directly only by zero-copy schedules (ScheduleRequest::peer_buffers_mapped).
  std::vector<int32_t> writer[2];
  struct ReadRecord {
    int reader;
    size_t step;
    size_t lo, hi;
  };
  std::vector<ReadRecord> reads[2];
  // Fused steps issued whose forward is not yet posted, per (to, channel), in program order;
  // and per step whether its receive has completed (its forward may be posted).
  std::unordered_map<uint64_t, std::deque<size_t>> forwards;
  std::vector<uint8_t> received;
};

// Key of a rank's outgoing stream (to, channel).
uint64_t StreamKey(int to, uint16_t channel) { return static_cast<uint64_t>(to) * 65536 + channel; }

struct Queue {
  std::deque<std::pair<int, size_t>> sends, recvs;
};

class Checker {
 public:
  Checker(const Schedule& s, const ScheduleRequest& req, const CheckOptions& o, CheckStats* st)
      : sched_(s), req_(req), opt_(o), stats_(st) {}
  Status Run();

 private:
  Status Layouts();
  Status Structure();
  Status StepStructure(int r, size_t i);
  Status Initialize();
  Status Simulate();
  Status Verify();
  Status TryIssue(int r, bool* progressed);
  Status Issue(int r, size_t i);
  Status Match(const std::pair<int, size_t>& send, const std::pair<int, size_t>& recv);
  Status PostMessage(int r, size_t i, bool is_send);
  Status Received(int r, size_t i, const VClock* peer_vc);
  Status FlushForwards(int r, uint64_t stream);
  Status CompleteAsync(int r, size_t i, const VClock* peer_vc);
  Status ApplyLocal(int r, size_t i);
  Status Evaluate(int r, size_t i, const Val* received, Val* out);
  Status Combine(int r, size_t i, const Region& dst_region, const Val* a, const Val* b, Val* out,
                 size_t n, const char* what);
  Status WriteScratchCheck(int r, size_t i, const Region& dst, const uint32_t* writer_vc);
  Status ReadRemoteCheck(int r, size_t i, int peer, const Region& remote);
  Status ReadsDoneBeforeReturn() const;
  Range Resolve(int r, const Region& reg) const;
  Val* Ptr(int r, const Region& reg) {
    Range g = Resolve(r, reg);
    return (g.space == kUser ? ranks_[r].user.data() : ranks_[r].scratch.data()) + g.lo;
  }
  Access AccessOf(int r, const Step& s) const;
  // A rank's clock merged with those of its completed steps it has not absorbed yet (both
  // lists): what it knows once all its steps completed.
  VClock KnownAtEnd(const RankState& st) const {
    VClock known = st.clock;
    for (const auto* list : {&st.unabsorbed, &st.unabsorbed_quiet})
      for (size_t j : *list)
        for (int q = 0; q < p_; ++q) known[q] = std::max(known[q], st.done_vc[j * p_ + q]);
    return known;
  }
  std::string Where(int r, size_t i) const { return StepName(r, i, ranks_[r].sched->steps[i]); }

  const Schedule& sched_;
  const ScheduleRequest& req_;
  const CheckOptions& opt_;
  CheckStats* stats_;
  int p_ = 0;
  int window_ = 1;
  bool track_values_ = true;
  bool track_hb_ = false;
  uint64_t full_ = 0;
  std::vector<RankState> ranks_;
  std::unordered_map<uint64_t, Queue> queues_;
  // signals: per (src, dst) the VC of each issued signal, and waits posted in order.
  std::unordered_map<uint64_t, std::vector<VClock>> signals_;
  std::unordered_map<uint64_t, std::deque<size_t>> waits_;
  std::unordered_map<uint64_t, size_t> waits_matched_;
  std::deque<int> work_;      // ranks to retry
  std::vector<char> dirty_;   // queued in work_
  // Encodings made by codec steps: the values each one carries (decode gives them back).
  struct Encoding {
    std::vector<Val> values;
    size_t elems = 0;  // size of the encoded region (elements)
  };
  std::vector<Encoding> encodings_;
  Status EncodeValues(int r, size_t i, const Val* src, Val* out);
  Status DecodeValues(int r, size_t i, const Val* src, std::vector<Val>* decoded);
  Status VerifyIdenticalAcrossRanks();
};

Status Checker::Layouts() {
  const size_t c = req_.count;
  const size_t pc = static_cast<size_t>(p_) * c;
  for (int r = 0; r < p_; ++r) {
    Layout& L = ranks_[r].layout;
    switch (req_.collective) {
      case Collective::kAllReduce: L.in_user = c; L.out_user = c; break;
      case Collective::kAllGather: L.in_user = c; L.out_user = pc; break;
      case Collective::kReduceScatter: L.in_user = pc; L.out_user = c; break;
      case Collective::kBroadcast: L.in_user = r == req_.root ? c : 0; L.out_user = c; break;
      case Collective::kReduce: L.in_user = c; L.out_user = r == req_.root ? c : 0; break;
      case Collective::kAllToAll: L.in_user = pc; L.out_user = pc; break;
      case Collective::kAllToAllv: {
        const size_t n = static_cast<size_t>(p_);
        if (req_.a2av_counts.size() != n * n || req_.a2av_send_displs.size() != n * n ||
            req_.a2av_recv_displs.size() != n * n)
          return InvalidArgument("alltoallv request needs nranks^2 counts and displacements, got " +
                                 std::to_string(req_.a2av_counts.size()));
        for (int q = 0; q < p_; ++q) {
          L.in_user = std::max(L.in_user, req_.a2av_send_displs[r * n + q] + req_.a2av_counts[r * n + q]);
          L.out_user = std::max(L.out_user, req_.a2av_recv_displs[r * n + q] + req_.a2av_counts[q * n + r]);
        }
        break;
      }
      case Collective::kAllGatherV:
      case Collective::kReduceScatterV: {
        WEFT_RETURN_IF_ERROR(CheckVCountRequest(req_));
        const bool gather = req_.collective == Collective::kAllGatherV;
        (gather ? L.in_user : L.out_user) = VCounts(req_)[r];
        (gather ? L.out_user : L.in_user) = VBlockExtent(req_);
        break;
      }
      case Collective::kSendRecv:
        return InvalidArgument("sendrecv is not scheduled; nothing to check");
      case Collective::kBarrier: break;
    }
    if (!opt_.in_place || req_.collective == Collective::kBarrier) {
      L.in_base = 0;
      L.out_base = L.in_user;
      L.user_size = L.in_user + L.out_user;
      continue;
    }
    switch (req_.collective) {
      case Collective::kAllGather: L.in_base = r * c; L.out_base = 0; L.user_size = pc; break;
      case Collective::kReduceScatter: L.in_base = 0; L.out_base = r * c; L.user_size = pc; break;
      case Collective::kAllToAllv:
        return InvalidArgument("alltoallv has no in-place form");
      // in place, as MPI's: allgatherv's input is its block of the output, reduce-scatterv's
      // output is its block of the input
      case Collective::kAllGatherV:
        L.in_base = VBlockOffsets(req_)[r]; L.out_base = 0; L.user_size = L.out_user; break;
      case Collective::kReduceScatterV:
        L.in_base = 0; L.out_base = VBlockOffsets(req_)[r]; L.user_size = L.in_user; break;
      default: L.in_base = 0; L.out_base = 0; L.user_size = std::max(L.in_user, L.out_user); break;
    }
  }
  return OkStatus();
}

Range Checker::Resolve(int r, const Region& reg) const {
  const Layout& L = ranks_[r].layout;
  switch (reg.buffer) {
    case Buffer::kInput: return Range{kUser, L.in_base + reg.offset, L.in_base + reg.offset + reg.count};
    case Buffer::kOutput: return Range{kUser, L.out_base + reg.offset, L.out_base + reg.offset + reg.count};
    case Buffer::kScratch: return Range{kScr, reg.offset, reg.offset + reg.count};
  }
  return Range{};
}

Access Checker::AccessOf(int r, const Step& s) const {
  Access a;
  auto R = [&](const Region* g) { return g == nullptr || g->count == 0 ? Range{} : Resolve(r, *g); };
  StepRegions g = LocalRegions(s);
  a.read[0] = R(g.read[0]);
  a.read[1] = R(g.read[1]);
  a.write = R(g.write);
  return a;
}

Status Checker::Structure() {
  if (sched_.collective != req_.collective)
    return InvalidArgument(std::string("schedule is for ") + CollectiveName(sched_.collective) +
                           ", request for " + CollectiveName(req_.collective));
  // A proof needs every rank's steps: a plan built for one rank (PlanScope) cannot be proved.
  if (!sched_.scope.all())
    return InvalidArgument("schedule holds only rank " + std::to_string(sched_.scope.rank) +
                           "'s steps (a one-rank plan); the checker needs every rank's (PlanScope::AllRanks)");
  if (sched_.nranks != req_.nranks || static_cast<int>(sched_.ranks.size()) != req_.nranks)
    return InvalidArgument("schedule has nranks " + std::to_string(sched_.nranks) + " and " +
                           std::to_string(sched_.ranks.size()) + " rank schedules, request " +
                           std::to_string(req_.nranks));
  for (int r = 0; r < p_; ++r) {
    const RankSchedule& rs = sched_.ranks[r];
    const Layout& L = ranks_[r].layout;
    const std::string who = "rank " + std::to_string(r);
    if (rs.input_count > L.in_user)
      return InvalidArgument(who + " declares input_count " + std::to_string(rs.input_count) +
                             " but the caller's input holds " + std::to_string(L.in_user));
    if (rs.output_count > L.out_user)
      return InvalidArgument(who + " declares output_count " + std::to_string(rs.output_count) +
                             " but the caller's output holds " + std::to_string(L.out_user));
    for (size_t i = 0; i < rs.steps.size(); ++i) WEFT_RETURN_IF_ERROR(StepStructure(r, i));
  }
  return OkStatus();
}

// One step's static checks, driven by its row of the step table: peers in range, regions
// inside the declared buffers, writes only to the caller's output or scratch, matching sizes.
// The step's name is built only on error (StepName): this runs for every step of every sweep.
Status Checker::StepStructure(int r, size_t i) {
  const Step& s = sched_.ranks[r].steps[i];
  const StepSemantics& m = SemanticsOf(s.op);
  const Layout& L = ranks_[r].layout;
  if (static_cast<int>(s.op) >= kNumStepOps)
    return InvalidArgument(StepName(r, i, s) + ": op " + std::to_string(static_cast<int>(s.op)) +
                           " has no row in the step table");
  if (HasPeer(m)) {
    if (s.peer < 0 || s.peer >= p_)
      return InvalidArgument(StepName(r, i, s) + ": peer " + std::to_string(s.peer) + " out of range [0, " +
                             std::to_string(p_) + ")");
    if (s.peer == r) return InvalidArgument(StepName(r, i, s) + ": peer is the rank itself");
  }
  if (m.sends_to_second_peer) {
    if (s.to < 0 || s.to >= p_)
      return InvalidArgument(StepName(r, i, s) + ": forward rank " + std::to_string(s.to) +
                             " out of range [0, " + std::to_string(p_) + ")");
    if (s.to == r) return InvalidArgument(StepName(r, i, s) + ": forwards to the rank itself");
  }
  auto in_bounds = [&](int rank, const Region& g, const char* role) -> Status {
    const RankSchedule& t = sched_.ranks[rank];
    size_t limit = g.buffer == Buffer::kInput ? t.input_count
                   : g.buffer == Buffer::kOutput ? t.output_count : t.scratch_count;
    if (g.offset + g.count > limit || g.offset + g.count < g.offset)
      return InvalidArgument(StepName(r, i, s) + ": " + role + " " + RegionName(g) + " exceeds rank " +
                             std::to_string(rank) + "'s " + BufName(g.buffer) + "_count " +
                             std::to_string(limit));
    return OkStatus();
  };
  if (m.reads_src) WEFT_RETURN_IF_ERROR(in_bounds(r, s.src, "src"));
  if (m.writes_dst || m.reads_dst) WEFT_RETURN_IF_ERROR(in_bounds(r, s.dst, "dst"));
  if (m.reads_remote) {
    if (s.remote.buffer != Buffer::kScratch && !req_.peer_buffers_mapped)
      return InvalidArgument(StepName(r, i, s) + ": remote region " + RegionName(s.remote) +
                             " must be the peer's scratch (only windows are mapped; peers' "
                             "buffers only in zero-copy schedules: peer_buffers_mapped)");
    WEFT_RETURN_IF_ERROR(in_bounds(s.peer, s.remote, "remote"));
    if (s.remote.count != s.dst.count)
      return InvalidArgument(StepName(r, i, s) + ": remote " + RegionName(s.remote) + " and dst " +
                             RegionName(s.dst) + " differ in size");
  }
  if (m.same_size_src_dst && s.src.count != s.dst.count)
    return InvalidArgument(StepName(r, i, s) + ": src " + RegionName(s.src) + " and dst " +
                           RegionName(s.dst) + " differ in size");
  if (m.writes_dst && s.dst.count > 0) {
    Range w = Resolve(r, s.dst);
    if (w.space == kUser && (w.lo < L.out_base || w.hi > L.out_base + L.out_user))
      return InvalidArgument(StepName(r, i, s) + ": writes " + RegionName(s.dst) +
                             (s.dst.buffer == Buffer::kInput ? " (the caller's input is read-only)"
                                                             : " outside the caller's output") +
                             (opt_.in_place ? " in-place" : " out-of-place"));
  }
  if (m.combine == StepCombine::kFinalizeIn && !IsReducing(req_.collective))
    return InvalidArgument(StepName(r, i, s) + ": finalize in " + CollectiveName(req_.collective) +
                           ", which reduces nothing (it would divide data)");
  // Kernels take dst disjoint from, or equal to, each operand (kernels/reduce.h).
  if (m.reads_src && m.writes_dst && s.dst.count > 0) {
    Range a = Resolve(r, s.src), b = Resolve(r, s.dst);
    if (a.Overlaps(b) && a.lo != b.lo)
      return InvalidArgument(StepName(r, i, s) + ": src " + RegionName(s.src) + " and dst " +
                             RegionName(s.dst) + " partially overlap");
  }
  if (m.codec != StepCodec::kNone) {
    // An encoding of no values is empty and only it; the codec never works in place.
    if ((s.src.count == 0) != (s.dst.count == 0))
      return InvalidArgument(StepName(r, i, s) + ": src " + RegionName(s.src) + " and dst " +
                             RegionName(s.dst) + ": one is empty, the other not");
    if (s.dst.count > 0 && Resolve(r, s.src).Overlaps(Resolve(r, s.dst)))
      return InvalidArgument(StepName(r, i, s) + ": src " + RegionName(s.src) + " and dst " +
                             RegionName(s.dst) + " overlap (codecs do not work in place)");
  }
  if (m.needs_direct) track_hb_ = true;
  if (m.asynchronous) ++ranks_[r].total_async;
  return OkStatus();
}

Status Checker::Initialize() {
  for (int r = 0; r < p_; ++r) {
    RankState& st = ranks_[r];
    st.user.assign(st.layout.user_size, Val{});
    st.scratch.assign(st.sched->scratch_count, Val{});
    st.received.assign(st.sched->steps.size(), 0);
    st.access.resize(st.sched->steps.size());
    st.inflight_slot.assign(st.sched->steps.size(), RankState::kNone);
    st.writing[kUser].assign(st.layout.user_size, 0);
    st.reading[kUser].assign(st.layout.user_size, 0);
    st.writing[kScr].assign(st.sched->scratch_count, 0);
    st.reading[kScr].assign(st.sched->scratch_count, 0);
    for (size_t i = 0; i < st.sched->steps.size(); ++i) st.access[i] = AccessOf(r, st.sched->steps[i]);
    for (size_t j = 0; j < st.layout.in_user; ++j)
      st.user[st.layout.in_base + j] = Val{uint64_t{1} << r, static_cast<int32_t>(j), 0};
    if (track_hb_) {
      st.clock.assign(p_, 0);
      st.absorbed_at.assign(st.sched->steps.size(), 0);
      st.writer[kScr].assign(st.sched->scratch_count, -1);
      st.writer[kUser].assign(st.layout.user_size, -1);
      st.issue_vc.assign(st.sched->steps.size() * p_, 0);
      st.done_vc.assign(st.sched->steps.size() * p_, 0);
    }
  }
  return OkStatus();
}

Status Checker::Combine(int r, size_t i, const Region& dst_region, const Val* a, const Val* b,
                        Val* out, size_t n, const char* what) {
  if (!track_values_) return OkStatus();
  for (size_t e = 0; e < n; ++e) {
    const Val& x = a[e];
    const Val& y = b[e];
    auto fail = [&](const std::string& why) {
      return InvalidArgument(Where(r, i) + ": " + RegionName(dst_region) + " element " +
                             std::to_string(dst_region.offset + e) + ": " + why);
    };
    if (x.idx == kUnwritten || y.idx == kUnwritten)
      return fail(std::string(what) + " reads an element nothing wrote");
    if (x.idx == kEncoded || y.idx == kEncoded)
      return fail(std::string(what) + " reduces encoded bytes (decode them first)");
    if (x.idx != y.idx)
      return fail("reduces input element " + std::to_string(x.idx) + " with input element " +
                  std::to_string(y.idx));
    if (x.mask & y.mask)
      return fail("already holds rank " + std::to_string(LowestRank(x.mask & y.mask)) +
                  "'s contribution (double counting)");
    if (x.fin || y.fin) return fail("reduces an already finalized value");
    out[e] = Val{x.mask | y.mask, x.idx, 0, static_cast<uint8_t>(x.quant | y.quant), 0};
  }
  return OkStatus();
}

// A write to this rank's scratch (or, in zero-copy schedules, its buffers) must happen-after
// every direct read of those elements by peers since the previous write (otherwise the peer
// may read the new data).
Status Checker::WriteScratchCheck(int r, size_t i, const Region& dst, const uint32_t* wvc) {
  if (!track_hb_ || dst.count == 0) return OkStatus();
  RankState& st = ranks_[r];
  const Range g = Resolve(r, dst);
  const size_t lo = g.lo, hi = g.hi;
  const char* space = g.space == kScr ? "scratch" : "its buffer";
  std::vector<RankState::ReadRecord> keep;
  for (const auto& rd : st.reads[g.space]) {
    if (rd.hi <= lo || hi <= rd.lo) {
      keep.push_back(rd);
      continue;
    }
    if (wvc[rd.reader] < rd.step + 1)
      return InvalidArgument(Where(r, i) + " writes " + space + "[" + std::to_string(std::max(lo, rd.lo)) +
                             "] while " + Where(rd.reader, rd.step) +
                             " may still be reading it (race: no signal/wait orders them)");
    // The parts of the read this write does not cover stay recorded.
    if (rd.lo < lo) keep.push_back({rd.reader, rd.step, rd.lo, lo});
    if (hi < rd.hi) keep.push_back({rd.reader, rd.step, hi, rd.hi});
  }
  st.reads[g.space].swap(keep);
  for (size_t e = lo; e < hi; ++e) st.writer[g.space][e] = static_cast<int32_t>(i);
  return OkStatus();
}

// A direct read of peer's scratch (or buffers) must happen-after the peer's last write of
// those elements; a peer's buffer it has not written in this call (its input) may be read
// only after a signal of the peer in this call (before it, the peer may not have entered the
// call, so its buffer may not hold this call's data, nor be published).
Status Checker::ReadRemoteCheck(int r, size_t i, int peer, const Region& remote) {
  RankState& me = ranks_[r];
  RankState& pst = ranks_[peer];
  const Range g = Resolve(peer, remote);
  const char* space = g.space == kScr ? "scratch" : "buffer";
  for (size_t e = g.lo; e < g.hi; ++e) {
    int32_t w = pst.writer[g.space][e];
    if (w < 0 && g.space == kUser && me.clock[peer] < 1)
      return InvalidArgument(Where(r, i) + " reads " + RegionName(remote) + " of rank " +
                             std::to_string(peer) + " before any signal of rank " +
                             std::to_string(peer) + " in this call (missing wait)");
    if (w >= 0) {
      const Step& ws = pst.sched->steps[w];
      uint32_t epoch = IsAsync(ws.op) ? pst.absorbed_at[w] : static_cast<uint32_t>(w) + 1;
      if (epoch == 0 || me.clock[peer] < epoch)
        return InvalidArgument(Where(r, i) + " reads " + space + "[" + std::to_string(e) + "] of rank " +
                               std::to_string(peer) + " written by " + Where(peer, w) +
                               " with no happens-before (race: missing signal/wait)");
    }
  }
  if (remote.count > 0) pst.reads[g.space].push_back({r, i, g.lo, g.hi});
  return OkStatus();
}

// Zero-copy: a rank's caller may reuse its buffers once the call returns, so every peer's read
// of them must happen-before the rank's last step completes (a signal from the reader after
// its read, waited for: the "done" round).
Status Checker::ReadsDoneBeforeReturn() const {
  if (!track_hb_) return OkStatus();
  for (int r = 0; r < p_; ++r) {
    const RankState& st = ranks_[r];
    if (st.reads[kUser].empty()) continue;
    const VClock last = KnownAtEnd(st);  // what the rank knows once all its steps completed
    for (const auto& rd : st.reads[kUser])
      if (last[rd.reader] < rd.step + 1)
        return InvalidArgument("rank " + std::to_string(r) + " may return while " +
                               Where(rd.reader, rd.step) +
                               " still reads its buffer (missing signal/wait after the read)");
  }
  return OkStatus();
}

// The value a step writes to dst, dst = Combine(lhs, rhs) as its row of the step table says,
// into `out`. `received`: the message's values, for steps that receive.
Status Checker::Evaluate(int r, size_t i, const Val* received, Val* out) {
  const Step& s = ranks_[r].sched->steps[i];
  const StepSemantics& m = SemanticsOf(s.op);
  const size_t n = s.dst.count;
  auto operand = [&](StepOperand o) -> const Val* {
    switch (o) {
      case StepOperand::kSrc: return Ptr(r, s.src);
      case StepOperand::kDst: return Ptr(r, s.dst);
      case StepOperand::kRemote: return Ptr(s.peer, s.remote);
      case StepOperand::kReceived: return received;
      case StepOperand::kNone: break;
    }
    return nullptr;
  };
  // "input[0..4) element 2" for messages (a received operand was checked at the sender).
  auto element_name = [&](StepOperand o, size_t e) {
    const Region& g = o == StepOperand::kRemote ? s.remote : o == StepOperand::kDst ? s.dst : s.src;
    return (o == StepOperand::kRemote ? "remote " : "") + RegionName(g) + " element " +
           std::to_string(g.offset + e);
  };
  const Val* lhs = operand(m.lhs);
  const Val* rhs = operand(m.rhs);
  // Codec steps: src goes through the codec first (step_table.h).
  std::vector<Val> decoded;
  if (m.codec == StepCodec::kEncodeSrc) return EncodeValues(r, i, Ptr(r, s.src), out);
  if (m.codec == StepCodec::kDecodeSrc) {
    WEFT_RETURN_IF_ERROR(DecodeValues(r, i, Ptr(r, s.src), &decoded));
    (m.lhs == StepOperand::kSrc ? lhs : rhs) = decoded.data();
  }
  switch (m.combine) {
    case StepCombine::kCopyIn:
      for (size_t e = 0; e < n; ++e) {
        if (lhs[e].idx == kUnwritten)
          return InvalidArgument(Where(r, i) + ": " + element_name(m.lhs, e) +
                                 " is read before anything wrote it");
        // Encodings move only through encode, plain send/recv and decode: the executor sends
        // an encoding's own size, which copies and fused forwards know nothing of.
        if (lhs[e].idx == kEncoded && !(m.receives && !ForwardsAfterReceive(m)))
          return InvalidArgument(Where(r, i) + ": " + element_name(m.lhs, e) + " is encoded: " +
                                 "only plain send/recv and decode may move an encoding");
        out[e] = lhs[e];
      }
      return OkStatus();
    case StepCombine::kReduceIn:
      return Combine(r, i, s.dst, lhs, rhs, out, n, m.name);
    case StepCombine::kFinalizeIn:
      for (size_t e = 0; e < n; ++e) {
        auto fail = [&](const std::string& why) {
          return InvalidArgument(Where(r, i) + ": " + RegionName(s.dst) + " element " +
                                 std::to_string(s.dst.offset + e) + ": " + why);
        };
        if (lhs[e].idx == kUnwritten) return fail("finalizes an element nothing wrote");
        if (lhs[e].idx == kEncoded) return fail("finalizes encoded bytes");
        if (lhs[e].fin) return fail("finalized twice");
        if (lhs[e].mask != full_)
          return fail("finalized before it is complete (missing ranks " +
                      RankList(full_ & ~lhs[e].mask) + ")");
        out[e] = lhs[e];
        out[e].fin = 1;
      }
      return OkStatus();
    case StepCombine::kNothing: break;
  }
  return OkStatus();
}

// dst = encode(src): every element of the encoded region stands for the whole encoding, which
// carries the src values exactly. A value quantized before may be quantized again only once
// it holds every contribution (the reduced slice), and then only once.
Status Checker::EncodeValues(int r, size_t i, const Val* src, Val* out) {
  const Step& s = ranks_[r].sched->steps[i];
  Encoding enc;
  enc.elems = s.dst.count;
  enc.values.assign(src, src + s.src.count);
  uint64_t mask = 0;
  for (size_t e = 0; e < s.src.count; ++e) {
    const Val& x = src[e];
    auto fail = [&](const std::string& why) {
      return InvalidArgument(Where(r, i) + ": " + RegionName(s.src) + " element " +
                             std::to_string(s.src.offset + e) + ": " + why);
    };
    if (x.idx == kUnwritten) return fail("encodes an element nothing wrote");
    if (x.idx == kEncoded) return fail("encodes encoded bytes");
    if ((x.quant & kQuantPartial) && x.mask != full_)
      return fail("re-quantizes a partial sum (ranks " + RankList(x.mask) +
                  "): each contribution is quantized once, partial sums are reduced in float32");
    if (x.quant & kQuantComplete) return fail("quantizes the reduced result a second time");
    mask |= x.mask;
  }
  if (encodings_.size() >= 65535)
    return InvalidArgument(Where(r, i) + ": more than 65535 encodings: too many to check");
  encodings_.push_back(std::move(enc));
  const uint16_t token = static_cast<uint16_t>(encodings_.size());  // 1 + its index
  for (size_t e = 0; e < s.dst.count; ++e) out[e] = Val{mask, kEncoded, 0, 0, token};
  return OkStatus();
}

// decode(src): src must be one whole encoding (every element of it, nothing else); the values
// are exactly the ones encoded, marked as quantized and as decoded from that encoding.
Status Checker::DecodeValues(int r, size_t i, const Val* src, std::vector<Val>* decoded) {
  const Step& s = ranks_[r].sched->steps[i];
  auto fail = [&](const std::string& why) {
    return InvalidArgument(Where(r, i) + ": " + RegionName(s.src) + " " + why);
  };
  const uint16_t token = src[0].origin;
  for (size_t e = 0; e < s.src.count; ++e) {
    if (src[e].idx == kUnwritten) return fail("holds bytes nothing wrote: decodes what was never encoded");
    if (src[e].idx != kEncoded) return fail("holds values, not an encoding: decodes what was never encoded");
    if (src[e].origin != token)
      return fail("mixes two encodings (element " + std::to_string(s.src.offset + e) + ")");
  }
  const Encoding& enc = encodings_[token - 1];
  if (enc.elems != s.src.count)
    return fail("is " + std::to_string(s.src.count) + " elements of an encoding of " +
                std::to_string(enc.elems) + " (decode reads exactly one whole encoding)");
  if (enc.values.size() != s.dst.count)
    return fail("encodes " + std::to_string(enc.values.size()) + " values, the decode writes " +
                std::to_string(s.dst.count));
  decoded->assign(enc.values.begin(), enc.values.end());
  for (Val& v : *decoded) {
    v.quant |= v.mask == full_ ? kQuantComplete : kQuantPartial;
    v.origin = token;
  }
  return OkStatus();
}

// Compressed collectives must leave every rank the same bits (replicas must not drift): where
// any rank's output element went through a codec, every rank's must have been decoded from
// the same encoding (and copied on unchanged), not computed on its own.
Status Checker::VerifyIdenticalAcrossRanks() {
  if (encodings_.empty()) return OkStatus();
  if (req_.collective != Collective::kAllReduce && req_.collective != Collective::kAllGather)
    return OkStatus();
  auto out = [&](int r, size_t e) -> const Val& {
    return ranks_[r].user[ranks_[r].layout.out_base + e];
  };
  for (size_t e = 0; e < ranks_[0].layout.out_user; ++e) {
    int decoded_rank = -1;
    bool quantized = false;
    for (int r = 0; r < p_; ++r) {
      quantized |= out(r, e).quant != 0;
      if (decoded_rank < 0 && out(r, e).origin != 0) decoded_rank = r;
    }
    if (!quantized) continue;
    const uint16_t want = decoded_rank < 0 ? 0 : out(decoded_rank, e).origin;
    for (int r = 0; r < p_; ++r) {
      if (want != 0 && out(r, e).origin == want) continue;
      return InvalidArgument(
          "rank " + std::to_string(r) + " output[" + std::to_string(e) + "] " +
          (out(r, e).origin == 0 ? "was computed on that rank from decoded values"
                                 : "was decoded from another encoding") +
          (decoded_rank >= 0 ? " than rank " + std::to_string(decoded_rank) + "'s" : "") +
          ": the ranks would not hold bitwise-identical results (every rank, the owner too, "
          "must decode the same encoded bytes)");
    }
  }
  return OkStatus();
}

Status Checker::ApplyLocal(int r, size_t i) {
  RankState& st = ranks_[r];
  const Step& s = st.sched->steps[i];
  const StepSemantics& m = SemanticsOf(s.op);
  const size_t n = s.dst.count;
  if (track_hb_ && m.reads_remote) WEFT_RETURN_IF_ERROR(ReadRemoteCheck(r, i, s.peer, s.remote));
  // A copy onto itself (in place: input and output alias) writes nothing: the executor skips it.
  const bool self_copy = s.op == StepOp::kCopy && Resolve(r, s.src) == Resolve(r, s.dst);
  if (track_hb_ && m.writes_dst && n > 0 && !self_copy)
    WEFT_RETURN_IF_ERROR(WriteScratchCheck(r, i, s.dst, st.clock.data()));
  if (!track_values_ || n == 0 || m.combine == StepCombine::kNothing) return OkStatus();
  std::vector<Val> tmp(n);
  WEFT_RETURN_IF_ERROR(Evaluate(r, i, nullptr, tmp.data()));
  std::copy(tmp.begin(), tmp.end(), Ptr(r, s.dst));
  return OkStatus();
}

Status Checker::Issue(int r, size_t i) {
  RankState& st = ranks_[r];
  const Step& s = st.sched->steps[i];
  const Access& a = st.access[i];
  if (stats_) ++stats_->steps;
  if (track_hb_) {
    // Completed asynchronous steps this issue is known to follow: conflicting ones (the
    // executor waited for them), and all of them for a signal (release fence) or after a wait.
    auto absorb = [&](size_t j) {
      const uint32_t* d = &st.done_vc[j * p_];
      for (int q = 0; q < p_; ++q) st.clock[q] = std::max(st.clock[q], d[q]);
      st.absorbed_at[j] = static_cast<uint32_t>(i) + 1;
    };
    const bool release = SemanticsOf(s.op).fence == StepFence::kRelease;
    size_t kept = 0;
    for (size_t j : st.unabsorbed) {
      if (release || SemanticsOf(st.sched->steps[j].op).fence == StepFence::kAcquire ||
          Conflicts(a, st.access[j]))
        absorb(j);
      else
        st.unabsorbed[kept++] = j;
    }
    st.unabsorbed.resize(kept);
    if (release) {
      for (size_t j : st.unabsorbed_quiet) absorb(j);
      st.unabsorbed_quiet.clear();
    }
    st.clock[r] = static_cast<uint32_t>(i) + 1;
  }
  if (!IsAsync(s.op)) {
    if (SemanticsOf(s.op).signals) {
      uint64_t key = static_cast<uint64_t>(r) * kMaxRanks + s.peer;
      signals_[key].push_back(track_hb_ ? st.clock : VClock());
      // A wait already posted may now complete.
      auto& q = waits_[key];
      size_t& matched = waits_matched_[key];
      while (!q.empty() && matched < signals_[key].size()) {
        size_t w = q.front();
        q.pop_front();
        const VClock* vc = track_hb_ ? &signals_[key][matched] : nullptr;
        ++matched;
        WEFT_RETURN_IF_ERROR(CompleteAsync(s.peer, w, vc));
      }
      return OkStatus();
    }
    return ApplyLocal(r, i);
  }
  st.AddInflight(i, a);
  if (track_hb_) std::copy(st.clock.begin(), st.clock.end(), st.issue_vc.begin() + i * p_);
  if (SemanticsOf(s.op).waits) {
    ++st.waits_inflight;
    uint64_t key = static_cast<uint64_t>(s.peer) * kMaxRanks + r;
    size_t& matched = waits_matched_[key];
    auto& sig = signals_[key];
    if (waits_[key].empty() && matched < sig.size()) {
      const VClock* vc = track_hb_ ? &sig[matched] : nullptr;
      ++matched;
      return CompleteAsync(r, i, vc);
    }
    waits_[key].push_back(i);
    return OkStatus();
  }
  const StepSemantics& m = SemanticsOf(s.op);
  // A fused step's forward is held back until its receive completes (FlushForwards).
  if (ForwardsAfterReceive(m)) st.forwards[StreamKey(s.to, s.to_channel)].push_back(i);
  return PostMessage(r, i, m.sends != StepOperand::kNone && !m.receives);
}

// Joins step i's send (to SendPeer) or receive (from peer) to its stream's queue and matches
// the queue's heads: the k-th send a->b on a channel meets the k-th receive.
Status Checker::PostMessage(int r, size_t i, bool is_send) {
  const Step& s = ranks_[r].sched->steps[i];
  const int src = is_send ? r : s.peer, dst = is_send ? SendPeer(s) : r;
  const uint16_t channel = is_send ? SendChannel(s) : s.channel;
  uint64_t key = (static_cast<uint64_t>(src) * kMaxRanks + dst) * 65536 + channel;
  Queue& q = queues_[key];
  (is_send ? q.sends : q.recvs).emplace_back(r, i);
  if (!q.sends.empty() && !q.recvs.empty()) {
    auto snd = q.sends.front(), rcv = q.recvs.front();
    q.sends.pop_front();
    q.recvs.pop_front();
    return Match(snd, rcv);
  }
  return OkStatus();
}

// Posts the forwards of `stream` whose receives are done, oldest first; a forward whose
// receive is still pending holds back the later ones (program order per stream).
Status Checker::FlushForwards(int r, uint64_t stream) {
  std::deque<size_t>& q = ranks_[r].forwards[stream];
  while (!q.empty() && ranks_[r].received[q.front()]) {
    size_t i = q.front();
    q.pop_front();
    WEFT_RETURN_IF_ERROR(PostMessage(r, i, /*is_send=*/true));
  }
  if (q.empty() && !dirty_[r]) {  // a plain send held back by this stream may issue now
    dirty_[r] = 1;
    work_.push_back(r);
  }
  return OkStatus();
}

// The receive half of a fused step completed (its dst is written): knowledge from the sender
// and the scratch write are recorded now; the step itself completes when its forward does.
Status Checker::Received(int r, size_t i, const VClock* peer_vc) {
  RankState& st = ranks_[r];
  const Step& s = st.sched->steps[i];
  st.received[i] = 1;
  ++st.received_inflight;  // frees its window slot: a later step may issue
  if (!dirty_[r]) {
    dirty_[r] = 1;
    work_.push_back(r);
  }
  if (track_hb_) {
    uint32_t* vc = &st.done_vc[i * p_];
    const uint32_t* iv = &st.issue_vc[i * p_];
    for (int q = 0; q < p_; ++q) vc[q] = peer_vc ? std::max(iv[q], (*peer_vc)[q]) : iv[q];
    if (s.dst.count > 0) WEFT_RETURN_IF_ERROR(WriteScratchCheck(r, i, s.dst, vc));
  }
  return FlushForwards(r, StreamKey(s.to, s.to_channel));
}

Status Checker::Match(const std::pair<int, size_t>& snd, const std::pair<int, size_t>& rcv) {
  const int a = snd.first, b = rcv.first;
  const Step& ss = ranks_[a].sched->steps[snd.second];
  const Step& rs = ranks_[b].sched->steps[rcv.second];
  const Region& sent = SentRegion(ss);
  if (sent.count != rs.dst.count)
    return InvalidArgument(Where(a, snd.second) + " sends " + std::to_string(sent.count) +
                           " elements but the matching " + Where(b, rcv.second) + " expects " +
                           std::to_string(rs.dst.count) + " (size mismatch)");
  const size_t n = sent.count;
  if (stats_) {
    ++stats_->messages;
    stats_->elements_moved += n;
    stats_->elements_sent_by_rank[a] += n;
  }
  if (track_values_ && n > 0) {
    // Data is captured at match time.
    const Val* in = Ptr(a, sent);
    for (size_t e = 0; e < n; ++e)
      if (in[e].idx == kUnwritten)
        return InvalidArgument(Where(a, snd.second) + ": " + RegionName(sent) + " element " +
                               std::to_string(sent.offset + e) + " is sent before anything wrote it");
    std::vector<Val> tmp(n);
    WEFT_RETURN_IF_ERROR(Evaluate(b, rcv.second, in, tmp.data()));
    std::copy(tmp.begin(), tmp.end(), Ptr(b, rs.dst));
  }
  VClock send_vc;
  const bool fused_sender = ForwardsAfterReceive(SemanticsOf(ss.op));
  if (track_hb_) {
    // A fused forward carries what its rank knew once its receive was done.
    const auto& vcs = fused_sender ? ranks_[a].done_vc : ranks_[a].issue_vc;
    send_vc.assign(vcs.begin() + snd.second * p_, vcs.begin() + (snd.second + 1) * p_);
  }
  // A send's completion teaches its rank nothing about the receiver: transports may complete
  // sends eagerly (buffered) before the peer posts its recv, so only the receiver learns.
  WEFT_RETURN_IF_ERROR(CompleteAsync(a, snd.second, nullptr));
  if (ForwardsAfterReceive(SemanticsOf(rs.op)))
    return Received(b, rcv.second, track_hb_ ? &send_vc : nullptr);
  return CompleteAsync(b, rcv.second, track_hb_ ? &send_vc : nullptr);
}

Status Checker::CompleteAsync(int r, size_t i, const VClock* peer_vc) {
  RankState& st = ranks_[r];
  const Step& s = st.sched->steps[i];
  st.RemoveInflight(i, st.access[i]);
  const StepSemantics& m = SemanticsOf(s.op);
  if (m.waits) --st.waits_inflight;
  if (ForwardsAfterReceive(m)) --st.received_inflight;
  ++st.completed_async;
  if (!dirty_[r]) {
    dirty_[r] = 1;
    work_.push_back(r);
  }
  // A fused step's receive was recorded by Received; its forward's completion adds nothing.
  if (track_hb_ && !ForwardsAfterReceive(m)) {
    uint32_t* vc = &st.done_vc[i * p_];
    const uint32_t* iv = &st.issue_vc[i * p_];
    for (int q = 0; q < p_; ++q) vc[q] = peer_vc ? std::max(iv[q], (*peer_vc)[q]) : iv[q];
    if (m.receives && m.writes_dst && s.dst.count > 0)
      WEFT_RETURN_IF_ERROR(WriteScratchCheck(r, i, s.dst, vc));
  }
  if (track_hb_) {
    // A send's completion carries no knowledge (see Match), so only recvs and waits matter.
    if (m.receives || m.waits) {
      const bool quiet = Empty(st.access[i]) && m.fence != StepFence::kAcquire;
      (quiet ? st.unabsorbed_quiet : st.unabsorbed).push_back(i);
    }
  }
  return OkStatus();
}

Status Checker::TryIssue(int r, bool* progressed) {
  RankState& st = ranks_[r];
  const auto& steps = st.sched->steps;
  while (st.next < steps.size() && st.waits_inflight == 0 &&
         static_cast<int>(st.inflight.size() - st.received_inflight) < window_) {
    const Step& s = steps[st.next];
    const StepSemantics& m = SemanticsOf(s.op);
    if (m.fence == StepFence::kRelease && !st.inflight.empty()) break;
    // A plain send waits for earlier fused forwards to its stream (program order per stream).
    if (m.sends != StepOperand::kNone && !m.receives) {
      auto f = st.forwards.find(StreamKey(s.peer, s.channel));
      if (f != st.forwards.end() && !f->second.empty()) break;
    }
    if (st.Blocked(st.access[st.next])) break;
    size_t i = st.next++;
    *progressed = true;
    WEFT_RETURN_IF_ERROR(Issue(r, i));
  }
  return OkStatus();
}

Status Checker::Simulate() {
  // Worklist: a rank is retried only when one of its steps completed (nothing else can unblock
  // it), so the cost is proportional to the steps, not to rounds x ranks.
  dirty_.assign(p_, 1);
  work_.clear();
  for (int r = 0; r < p_; ++r) work_.push_back(r);
  while (!work_.empty()) {
    int r = work_.front();
    work_.pop_front();
    dirty_[r] = 0;
    bool progressed = false;
    WEFT_RETURN_IF_ERROR(TryIssue(r, &progressed));
  }
  std::string blocked;
  for (int r = 0; r < p_; ++r) {
    const RankState& st = ranks_[r];
    if (st.next == st.sched->steps.size() && st.inflight.empty()) continue;
    size_t i = st.inflight.empty() ? st.next : *std::min_element(st.inflight.begin(), st.inflight.end());
    blocked += (blocked.empty() ? "" : "; ") + Where(r, i) +
               (st.inflight.empty() ? " cannot issue" : " never matched");
  }
  if (!blocked.empty()) return InvalidArgument("deadlock: " + blocked);
  return OkStatus();
}

Status Checker::Verify() {
  if (req_.collective == Collective::kBarrier) {
    if (!track_hb_) return OkStatus();
    // The barrier completes on rank r when all its steps have; that must follow every other
    // rank's first step.
    for (int r = 0; r < p_; ++r) {
      const VClock all = KnownAtEnd(ranks_[r]);
      for (int q = 0; q < p_; ++q) {
        if (q == r || ranks_[q].sched->steps.empty()) continue;
        if (all[q] < 1)
          return InvalidArgument("barrier: rank " + std::to_string(r) +
                                 " can leave before rank " + std::to_string(q) + " entered");
      }
    }
    return OkStatus();
  }
  const size_t c = req_.count;
  const bool reducing = IsReducing(req_.collective);
  const bool per_rank = req_.collective == Collective::kAllGatherV || req_.collective == Collective::kReduceScatterV;
  const std::vector<size_t> v_counts = per_rank ? VCounts(req_) : std::vector<size_t>();
  const std::vector<size_t> v_offsets = per_rank ? VBlockOffsets(req_) : std::vector<size_t>();
  for (int r = 0; r < p_; ++r) {
    const RankState& st = ranks_[r];
    const Layout& L = st.layout;
    for (size_t i = 0; i < L.out_user; ++i) {
      Val want;
      switch (req_.collective) {
        case Collective::kAllReduce: want = Val{full_, (int32_t)i, 0}; break;
        case Collective::kAllGather: want = Val{uint64_t{1} << (i / c), (int32_t)(i % c), 0}; break;
        case Collective::kReduceScatter: want = Val{full_, (int32_t)(r * c + i), 0}; break;
        case Collective::kBroadcast: want = Val{uint64_t{1} << req_.root, (int32_t)i, 0}; break;
        case Collective::kReduce: want = Val{full_, (int32_t)i, 0}; break;
        case Collective::kAllToAll:
          want = Val{uint64_t{1} << (i / c), (int32_t)(r * c + i % c), 0};
          break;
        case Collective::kAllToAllv: {
          want.idx = kDontCare;
          const size_t n = p_;
          for (int q = 0; q < p_; ++q) {
            size_t lo = req_.a2av_recv_displs[r * n + q], cnt = req_.a2av_counts[q * n + r];
            if (i >= lo && i < lo + cnt)
              want = Val{uint64_t{1} << q, (int32_t)(req_.a2av_send_displs[q * n + r] + (i - lo)), 0};
          }
          break;
        }
        case Collective::kAllGatherV:
          want.idx = kDontCare;  // gaps between blocks are never written
          for (int q = 0; q < p_; ++q) {
            const size_t lo = v_offsets[q];
            if (i >= lo && i < lo + v_counts[q]) want = Val{uint64_t{1} << q, (int32_t)(i - lo), 0};
          }
          break;
        case Collective::kReduceScatterV:
          want = Val{full_, (int32_t)(v_offsets[r] + i), 0};
          break;
        default: want.idx = kDontCare; break;
      }
      if (want.idx == kDontCare) continue;
      const Val& got = st.user[L.out_base + i];
      auto at = [&] { return "rank " + std::to_string(r) + " output[" + std::to_string(i) + "]"; };
      if (got.idx == kUnwritten) return InvalidArgument(at() + " is never written");
      if (got.idx == kEncoded)
        return InvalidArgument(at() + " holds encoded bytes that no step decoded");
      if (got.idx != want.idx || (!reducing && got.mask != want.mask))
        return InvalidArgument(at() + " holds input element " + std::to_string(got.idx) +
                               " of ranks " + RankList(got.mask) + ", expected element " +
                               std::to_string(want.idx) + " of ranks " + RankList(want.mask));
      if (got.mask != want.mask)
        return InvalidArgument(at() + " is missing the contributions of ranks " +
                               RankList(want.mask & ~got.mask) +
                               (got.mask & ~want.mask ? " and holds extra " + RankList(got.mask & ~want.mask) : ""));
      if (reducing && opt_.avg && !got.fin)
        return InvalidArgument(at() + " is never finalized (weftAvg would not divide)");
    }
  }
  return OkStatus();
}

Status Checker::Run() {
  p_ = req_.nranks;
  if (p_ < 1 || p_ > kMaxRanks)
    return InvalidArgument("nranks " + std::to_string(p_) + ": the checker handles 1.." +
                           std::to_string(kMaxRanks));
  if ((req_.collective == Collective::kBroadcast || req_.collective == Collective::kReduce) &&
      (req_.root < 0 || req_.root >= p_))
    return InvalidArgument("root " + std::to_string(req_.root) + " out of range");
  if (req_.count > static_cast<size_t>(INT32_MAX) / kMaxRanks)
    return InvalidArgument("count " + std::to_string(req_.count) + " too large to check");
  window_ = opt_.window > 0 ? opt_.window : (sched_.window < 1 ? 1 : sched_.window);
  full_ = p_ == 64 ? ~uint64_t{0} : ((uint64_t{1} << p_) - 1);
  track_values_ = req_.collective != Collective::kBarrier;
  track_hb_ = req_.collective == Collective::kBarrier;
  ranks_.resize(p_);
  for (int r = 0; r < p_ && r < static_cast<int>(sched_.ranks.size()); ++r)
    ranks_[r].sched = &sched_.ranks[r];
  if (stats_) stats_->elements_sent_by_rank.assign(p_, 0);
  WEFT_RETURN_IF_ERROR(Layouts());
  WEFT_RETURN_IF_ERROR(Structure());
  WEFT_RETURN_IF_ERROR(Initialize());
  WEFT_RETURN_IF_ERROR(Simulate());
  WEFT_RETURN_IF_ERROR(ReadsDoneBeforeReturn());
  WEFT_RETURN_IF_ERROR(Verify());
  return VerifyIdenticalAcrossRanks();
}

}  // namespace

Status CheckScheduleWithStats(const Schedule& schedule, const ScheduleRequest& request,
                              const CheckOptions& options, CheckStats* stats) {
  Checker c(schedule, request, options, stats);
  std::ostringstream what;
  what << CollectiveName(request.collective) << ":" << schedule.algorithm << " nranks "
       << request.nranks << " count " << request.count << " chunk " << request.chunk.chunk_elems
       << (options.in_place ? " in-place" : " out-of-place") << (options.avg ? " avg" : "");
  return c.Run().WithContext(what.str());
}

Status CheckSchedule(const Schedule& schedule, const ScheduleRequest& request,
                     const CheckOptions& options) {
  return CheckScheduleWithStats(schedule, request, options, nullptr);
}

Status CheckCallSequence(const std::vector<const Schedule*>& calls, const ScheduleRequest& request,
                         const CheckOptions& options) {
  if (calls.empty()) return InvalidArgument("call sequence: no calls");
  if (options.in_place) return InvalidArgument("call sequence: out-of-place only");
  // Scratch is the window only for a rank whose schedule has direct steps; the executor gives
  // the others a private heap buffer, which no peer reads. Such ranks' Scratch regions are
  // moved past the window's extent here, so that they alias each other but not the window.
  auto uses_window = [](const RankSchedule& rs) {
    if (rs.direct_steps >= 0) return rs.direct_steps == 1;  // BuildSchedule's answer
    for (const Step& st : rs.steps)
      if (SemanticsOf(st.op).needs_direct) return true;
    return false;
  };
  std::vector<std::vector<char>> window(calls.size());  // [call][rank]
  size_t window_extent = 0;
  for (size_t k = 0; k < calls.size(); ++k) {
    const Schedule& call = *calls[k];
    if (k > 0 && (!call.scope.all() || call.ranks.size() != calls[0]->ranks.size()))
      return InvalidArgument("call sequence: call " + std::to_string(k) + " (" + call.algorithm +
                             ") does not hold every rank's steps");
    for (const RankSchedule& rs : call.ranks) {
      window[k].push_back(uses_window(rs));
      if (window[k].back()) window_extent = std::max(window_extent, rs.scratch_count);
    }
  }
  Schedule joined = *calls.front();
  std::string names;
  for (RankSchedule& rs : joined.ranks) {  // refilled below from every call, the first too
    rs.steps.clear();
    rs.input_count = rs.output_count = rs.scratch_count = 0;
    rs.direct_steps = -1;
    rs.final_output_write.clear();
  }
  for (size_t k = 0; k < calls.size(); ++k) {
    const Schedule& next = *calls[k];
    names += (k ? "," : "") + next.algorithm;
    joined.window = std::max(joined.window, next.window);
    for (size_t r = 0; r < joined.ranks.size(); ++r) {
      RankSchedule& to = joined.ranks[r];
      const RankSchedule& from = next.ranks[r];
      const size_t shift = window[k][r] ? 0 : window_extent;
      to.input_count = std::max(to.input_count, from.input_count);
      to.output_count = std::max(to.output_count, from.output_count);
      if (from.scratch_count > 0) to.scratch_count = std::max(to.scratch_count, from.scratch_count + shift);
      for (Step st : from.steps) {
        for (Region* region : {&st.src, &st.dst})
          if (region->buffer == Buffer::kScratch) region->offset += shift;
        to.steps.push_back(st);
      }
    }
  }
  joined.algorithm = "sequence[" + names + "]";
  return CheckSchedule(joined, request, options);
}

Status ProveAlgorithm(const AlgorithmInfo& info, const ScheduleRequest& request) {
  ScheduleRequest all = request;
  all.scope = PlanScope::AllRanks();  // a proof covers every rank
  StatusOr<Schedule> s = BuildSchedule(info, all);
  if (!s.ok())
    return s.status().WithContext(std::string("building ") + CollectiveName(info.collective) +
                                  ":" + info.name);
  const bool reducing = IsReducing(request.collective);
  CheckOptions o;
  o.avg = reducing;
  WEFT_RETURN_IF_ERROR(CheckSchedule(*s, request, o));
  if (request.collective != Collective::kAllToAllv && request.collective != Collective::kBarrier &&
      !request.out_of_place) {  // a schedule built for out-of-place calls runs only those
    o.in_place = true;
    WEFT_RETURN_IF_ERROR(CheckSchedule(*s, request, o));
  }
  return OkStatus();
}

}  // namespace weft
