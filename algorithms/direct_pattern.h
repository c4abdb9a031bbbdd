// Helpers shared by the direct (same-host, one-sided) generators: oneshot, twoshot and the
// direct allgather / reduce-scatter / alltoall. They read peers' Scratch windows, ordered by
// counted signal/wait fences (see algorithms/schedule.h).
#pragma once

#include <algorithm>

#include "algorithms/patterns.h"
#include "algorithms/registry.h"
#include "algorithms/schedule.h"

namespace weft {

// Window budget per rank, in elements: 512 Ki elements = the shm transport's default 4 MiB
// window even for 8-byte types, so windows never grow in normal use.
constexpr size_t kDirectScratchElems = size_t{512} << 10;
// The request's budget: ScheduleRequest::direct_scratch_elems, else kDirectScratchElems.
inline size_t DirectScratchElems(const ScheduleRequest& req) {
  return req.direct_scratch_elems > 0 ? req.direct_scratch_elems : kDirectScratchElems;
}

// One signal to peer q (release fence: our window writes are visible).
inline void SignalOne(RankSchedule& rs, int q) {
  Step s;
  s.op = StepOp::kSignal;
  s.peer = q;
  rs.steps.push_back(s);
}

// One signal to every peer of rank r.
inline void SignalAll(RankSchedule& rs, int r, int p) {
  for (int q = 0; q < p; ++q)
    if (q != r) SignalOne(rs, q);
}

// Reads `remote` (a Scratch region of `peer`) into dst, or reduces it into dst.
inline Step DirectStep(int peer, Region remote, Region dst, bool reduce) {
  Step s;
  s.op = reduce ? StepOp::kDirectReduce : StepOp::kDirectRead;
  s.peer = peer;
  s.remote = remote;
  s.dst = dst;
  if (reduce) s.src = dst;
  return s;
}

// One term of a reduction in rank order into dst: the contribution of rank q, published in
// q's Scratch at `slot` (the same region in every rank's window). The first term is copied,
// later ones are reduced in; rank `self`'s own contribution is read locally.
inline Step InRankOrder(int self, int q, bool first, Region slot, Region dst) {
  if (q == self) return first ? CopyStep(slot, dst) : ReduceStep(slot, dst);
  return DirectStep(q, slot, dst, /*reduce=*/!first);
}

// Waits for the next signal from peer q (acquire fence).
inline void WaitOne(RankSchedule& rs, int q) {
  Step s;
  s.op = StepOp::kWait;
  s.peer = q;
  rs.steps.push_back(s);
}

// Waits for the next signal from every peer of rank r.
inline void WaitAll(RankSchedule& rs, int r, int p) {
  for (int q = 0; q < p; ++q)
    if (q != r) WaitOne(rs, q);
}

// The "ready" round of a direct round: signal every peer that our staged data is published,
// then from each peer wait its "done" of the round before (when there is one: counted signals
// are consumed in the order they were sent) and its "ready".
inline void ReadyRound(RankSchedule& rs, int r, int p, bool wait_done_first) {
  SignalAll(rs, r, p);
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    if (wait_done_first) WaitOne(rs, q);
    WaitOne(rs, q);
  }
}

// Direct algorithms need every rank's window mapped (all ranks on one host, shm enabled).
inline bool AllRanksMappable(const ScheduleRequest& req) { return req.all_ranks_mappable; }

// Elements handled per round: at most `budget` (what fits the window), at most the request's
// chunk when one is set, at most the whole count; and the number of rounds for `n` elements.
struct DirectRounds {
  size_t per_round = 0;
  size_t rounds = 0;
  DirectRounds(const ScheduleRequest& req, size_t n, size_t budget) {
    per_round = budget;
    if (req.chunk.chunk_elems > 0) per_round = std::min(per_round, req.chunk.chunk_elems);
    per_round = std::max<size_t>(1, std::min(per_round, n));
    rounds = n == 0 ? 0 : NumChunks(n, per_round);
  }
};

// Single-round direct schedules (ScheduleRequest::window_half): each half of the window is
// kWindowHalfBytes, at a fixed byte offset, whatever the dtype.
constexpr size_t kWindowHalfBytes = size_t{1} << 20;

// Asks for `algorithm`'s single-round schedule in half 0 of the window when it has one for
// `req` (AlgorithmInfo::holds_window); returns whether it does, else leaves req classic
// (window_half -1). The communicator plans with it, and the selector times what will run.
inline bool AskSingleRound(const AlgorithmInfo& algorithm, ScheduleRequest* req, size_t elem) {
  if (!algorithm.holds_window) return false;
  req->window_half = 0;
  req->window_half_elems = kWindowHalfBytes / std::max<size_t>(elem, 1);
  if (algorithm.holds_window(*req)) return true;
  req->window_half = -1;
  return false;
}

// A single-round schedule's Scratch is both halves of the window, fixed so that the window
// never grows between such calls; returns where half req.window_half starts.
inline size_t SingleRoundHalf(const ScheduleRequest& req, RankSchedule& rs) {
  rs.scratch_count = 2 * req.window_half_elems;
  return static_cast<size_t>(req.window_half) * req.window_half_elems;
}

// Whether `req` asks for a single-round schedule in one half of the window, for a call that
// runs in one round (`plan`) and stages `staged` elements in the window (else the generator
// builds its classic schedule).
inline bool SingleRoundInHalf(const ScheduleRequest& req, size_t staged, const DirectRounds& plan) {
  return (req.window_half == 0 || req.window_half == 1) && req.window_half_elems > 0 &&
         staged > 0 && staged <= req.window_half_elems && plan.rounds == 1;
}

// The release handshake the communicator runs before a schedule that uses the window another
// way, after one that returned holding it (AlgorithmInfo::holds_window): every rank signals
// every peer once its own reads are done (they are: it returned) and waits for every peer's
// signal, after which no peer reads this rank's window any more. One signal round, paid only
// when a different direct schedule follows a single-round one.
inline RankSchedule DirectWindowRelease(int r, int p) {
  RankSchedule rs;
  SignalAll(rs, r, p);
  WaitAll(rs, r, p);
  return rs;
}

// The communicator's bookkeeping of its window across calls (src/core/comm.cc runs it; the
// checker's call-sequence tests replay it, so the rule they prove is the rule that runs):
// which half the next single-round call uses, and when a release must run first.
struct WindowSequencer {
  uint64_t single_round_calls = 0;  // identical on every rank: calls are the same everywhere
  bool held = false;  // the last call that used the window returned holding it
  int NextHalf() const { return static_cast<int>(single_round_calls & 1); }
  bool NeedsRelease(bool uses_window, bool holds_window) const {
    return uses_window && !holds_window && held;
  }
  void Released() { held = false; }
  void Completed(bool uses_window, bool holds_window) {
    if (!uses_window) return;  // the window is untouched: what held it still does
    held = holds_window;
    if (holds_window) ++single_round_calls;
  }
};

// ---- zero-copy schedules (ScheduleRequest::peer_buffers_mapped) ----
// Peers' Input/Output regions are read in place. Two rules keep that safe, and the checker
// proves both (src/check/checker.cc): a peer's buffer is read only after that peer's signal in
// this call (it has entered the call and published where its buffers are), and no rank
// overwrites or returns its buffers while a peer may still read them (a signal from every
// reader follows its last read: the "reduced" and "done" rounds of the generators).

// The signal round that opens and closes a zero-copy schedule: signal every peer, then wait
// for every peer's signal.
inline void SignalRound(RankSchedule& rs, int r, int p) {
  SignalAll(rs, r, p);
  WaitAll(rs, r, p);
}

// dst = x_0 (op) x_1 (op) ... (op) x_{p-1}, folded left in rank order, where x_q is the Input
// region `in` of rank q (read in place from peers). In place, dst aliases this rank's own x_r,
// which must not be overwritten before it is folded in: rank 0 starts with x_0 (op) x_1 (its
// own block as the local operand, one pass, no copy), rank 1 with x_1 (op) x_0 (the same bits
// as x_0 (op) x_1: every weft reduction is commutative elementwise), ranks >= 2 fold x_0 ..
// x_r in Scratch [tmp, tmp + n) and write dst only with the next term (or copy, when x_r is
// the last). The rank-order fold is what the staging schedules compute, so registered and
// unregistered calls give the same bits.
inline void ZeroCopyReduceInRankOrder(RankSchedule& rs, int r, int p, Region in, Region dst,
                                      size_t tmp) {
  // acc_dst = acc_src (op) x_q for a peer q
  auto fold_peer = [&](int q, Region acc_src, Region acc_dst) {
    Step s = DirectStep(q, in, acc_dst, /*reduce=*/true);
    s.src = acc_src;
    rs.steps.push_back(s);
  };
  if (r <= 1) {
    fold_peer(1 - r, in, dst);  // x_0 (op) x_1 on both (rank 1: x_1 (op) x_0, the same bits)
    for (int q = 2; q < p; ++q) fold_peer(q, dst, dst);
    return;
  }
  const Region acc = Tmp(tmp, in.count);
  rs.steps.push_back(DirectStep(0, in, acc, /*reduce=*/false));
  for (int q = 1; q < r; ++q) fold_peer(q, acc, acc);
  rs.steps.push_back(ReduceStep(in, acc));  // acc = acc (op) x_r
  if (r == p - 1) {
    rs.steps.push_back(CopyStep(acc, dst));
    return;
  }
  for (int q = r + 1; q < p - 1; ++q) fold_peer(q, acc, acc);
  fold_peer(p - 1, acc, dst);
}

// Scratch elements ZeroCopyReduceInRankOrder needs for a block of n elements on rank r.
inline size_t ZeroCopyReduceScratch(int r, size_t n) { return r >= 2 ? n : 0; }

// One rank: its result is its own input (reductions also finalize, for avg).
inline void SingleRankResult(RankSchedule& rs, size_t n, bool reduction) {
  rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
  if (reduction) rs.steps.push_back(FinalizeStep(Out(0, n)));
}

// The "done" signals of a double-buffered rooted schedule still due after its last round: a
// slot is rewritten only after the "done" of two rounds before, so the last two (or fewer).
inline size_t DoneStillDue(const DirectRounds& plan) { return std::min<size_t>(plan.rounds, 2); }

// The rooted direct schedules (broadcast and reduce direct): per rank its counts (a reduction
// reads every input and writes the root's output; a broadcast reads the root's input and
// writes every output), nothing for n = 0, the single-rank result, else the root's steps
// (root_steps(rs, plan)) or another rank's (other_steps(rs, plan)), in rounds of at most half
// the window.
template <typename RootSteps, typename OtherSteps>
Schedule BuildRootedDirect(const ScheduleRequest& req, bool reduction, RootSteps root_steps,
                           OtherSteps other_steps) {
  Schedule sched = NewSchedule(req, "direct");
  const size_t n = req.count;
  const DirectRounds plan(req, n, DirectScratchElems(req) / 2);
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    const bool root = r == req.root;
    rs.input_count = reduction || root ? n : 0;
    rs.output_count = !reduction || root ? n : 0;
    if (n == 0) continue;
    if (req.nranks == 1)
      SingleRankResult(rs, n, reduction);
    else if (root)
      root_steps(rs, plan);
    else
      other_steps(rs, plan);
  }
  return sched;
}

}  // namespace weft
