// Tests for the symbolic schedule checker: every registered algorithm is proved over many rank
// counts, counts, chunkings and groupings (in-place and out-of-place, avg on and off), and
// hand-made broken schedules are rejected with the message that names the fault.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "check/checker.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

// Groups used for hierarchical algorithms: blocks of `size` consecutive ranks (last shorter).
std::vector<std::vector<int>> Blocks(int p, int size) {
  std::vector<std::vector<int>> g;
  for (int r = 0; r < p; ++r) {
    if (r % size == 0) g.emplace_back();
    g.back().push_back(r);
  }
  return g;
}
// Uneven and interleaved: even ranks in one group, odd ranks in another.
std::vector<std::vector<int>> EvenOdd(int p) {
  std::vector<std::vector<int>> g(p > 1 ? 2 : 1);
  for (int r = 0; r < p; ++r) g[r % g.size()].push_back(r);
  return g;
}

// Deterministic irregular all-to-allv layout: some pairs send nothing, displacements padded.
void FillAllToAllv(ScheduleRequest* r) {
  const int p = r->nranks;
  const size_t n = p;
  r->a2av_counts.assign(n * n, 0);
  r->a2av_send_displs.assign(n * n, 0);
  r->a2av_recv_displs.assign(n * n, 0);
  for (int s = 0; s < p; ++s)
    for (int d = 0; d < p; ++d)
      r->a2av_counts[s * n + d] = (r->count * (1 + (s * 7 + d * 3) % 5)) / 3;
  for (int s = 0; s < p; ++s) {
    size_t off = 1;  // a gap: displacements need not be packed
    for (int d = 0; d < p; ++d) {
      r->a2av_send_displs[s * n + d] = off;
      off += r->a2av_counts[s * n + d];
    }
  }
  for (int d = 0; d < p; ++d) {
    size_t off = 0;
    for (int s = p - 1; s >= 0; --s) {  // reverse order on the receiving side
      r->a2av_recv_displs[d * n + s] = off;
      off += r->a2av_counts[s * n + d];
    }
  }
}

// Buffers of allgather, reduce-scatter and all-to-all(v) grow with p*count: at large p they
// get a smaller "large" count so the sweep stays fast (the chunk edges are still crossed).
bool ScalesWithRanks(Collective c) {
  return c == Collective::kAllGather || c == Collective::kReduceScatter ||
         c == Collective::kAllToAll || c == Collective::kAllToAllv;
}

std::vector<size_t> CountsFor(int p, bool many, bool scales) {
  std::vector<size_t> c = {0, 1, static_cast<size_t>(p) + 1, many ? 1000u : scales ? 37u : 300u};
  if (many) {
    c.push_back(2);
    c.push_back(static_cast<size_t>(p > 1 ? p - 1 : 3));
    c.push_back(static_cast<size_t>(p));
    c.push_back(7);
    c.push_back(13);
    c.push_back(97);
  }
  return c;
}

std::string Label(const AlgorithmInfo& a) {
  return std::string(CollectiveName(a.collective)) + ":" + a.name;
}

// Proves one algorithm over the sweep; returns the number of (request, mode) proofs done.
int ProveSweep(const AlgorithmInfo& a, int p, bool many_counts) {
  int proofs = 0;
  std::vector<std::vector<std::vector<int>>> groupings = {{}, Blocks(p, 4), EvenOdd(p)};
  if (p >= 8) groupings.push_back({{0, 1, 2}, [&] {
                                     std::vector<int> rest;
                                     for (int r = 3; r < p; ++r) rest.push_back(r);
                                     return rest;
                                   }()});
  std::vector<size_t> chunks = many_counts ? std::vector<size_t>{0, 3, 64} : std::vector<size_t>{0, 5};
  for (size_t count : CountsFor(p, many_counts, ScalesWithRanks(a.collective))) {
    for (size_t chunk : chunks) {
      for (size_t g = 0; g < groupings.size(); ++g) {
        // Groupings only matter to hierarchical algorithms; flat ones are proved once.
        bool hier = a.name.find("hierarchical") != std::string::npos;
        if (g > 0 && !hier) continue;
        ScheduleRequest r;
        r.collective = a.collective;
        r.nranks = p;
        r.count = count;
        r.root = p > 2 ? 2 : p - 1;
        r.chunk.chunk_elems = chunk;
        r.chunk.channels = chunk == 3 ? 2 : 1;
        r.groups = groupings[g];
        r.all_ranks_mappable = true;
        if (a.collective == Collective::kAllToAllv) FillAllToAllv(&r);
        if (a.applicable && !a.applicable(r)) continue;
        Status s = ProveAlgorithm(a, r);
        EXPECT_TRUE(s.ok()) << Label(a) << " grouping " << g << ": " << s.message();
        if (!s.ok()) return proofs;
        ++proofs;
      }
    }
  }
  return proofs;
}

TEST(CheckerProves, EveryAlgorithmSmallRankCounts) {
  ASSERT_FALSE(AllAlgorithms().empty());
  int proofs = 0;
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective == Collective::kSendRecv) continue;
    for (int p = 1; p <= 16; ++p) proofs += ProveSweep(a, p, /*many_counts=*/true);
  }
  RecordProperty("proofs", proofs);
  EXPECT_GT(proofs, 0);
}

// Direct (same-host) algorithms carry p^2 signal/wait steps and are proved with vector clocks,
// so at large rank counts they get fewer cases (hierarchical_direct too: its groups' signals
// need the clocks); everything else gets the whole large sweep.
bool IsDirect(const AlgorithmInfo& a) {
  return a.name == "oneshot" || a.name == "twoshot" || a.name == "direct" ||
         a.name == "hierarchical_direct";
}

TEST(CheckerProves, EveryAlgorithmLargeRankCounts) {
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective == Collective::kSendRecv) continue;
    for (int p : {17, 24, 31, 32, 33, 48, 63, 64}) {
      if (IsDirect(a) && p != 17 && p != 64) continue;
      ProveSweep(a, p, /*many_counts=*/false);
    }
  }
}

TEST(CheckerProves, AvgOff) {
  // avg off accepts everything avg on does (finalize stays structurally checked).
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective == Collective::kSendRecv) continue;
    for (int p : {2, 3, 5, 8}) {
      ScheduleRequest r;
      r.collective = a.collective;
      r.nranks = p;
      r.count = 11;
      r.root = p - 1;
      r.chunk.chunk_elems = 4;
      r.groups = Blocks(p, 3);
      r.all_ranks_mappable = true;
      if (a.collective == Collective::kAllToAllv) FillAllToAllv(&r);
      if (a.applicable && !a.applicable(r)) continue;
      StatusOr<Schedule> s = a.build(r);
      ASSERT_TRUE(s.ok()) << Label(a) << ": " << s.status().message();
      for (bool in_place : {false, true}) {
        if (in_place && (a.collective == Collective::kAllToAllv || a.collective == Collective::kBarrier))
          continue;
        CheckOptions o;
        o.in_place = in_place;
        o.avg = false;
        Status st = CheckSchedule(*s, r, o);
        EXPECT_TRUE(st.ok()) << Label(a) << " p=" << p << ": " << st.message();
      }
    }
  }
}

// ---- hand-made schedules ----

ScheduleRequest Req(Collective c, int p, size_t count) {
  ScheduleRequest r;
  r.collective = c;
  r.nranks = p;
  r.count = count;
  return r;
}
Schedule Sched(Collective c, int p, size_t count, size_t in, size_t out, size_t scratch = 0) {
  Schedule s;
  s.collective = c;
  s.algorithm = "handmade";
  s.nranks = p;
  s.count = count;
  s.ranks.resize(p);
  for (auto& r : s.ranks) {
    r.input_count = in;
    r.output_count = out;
    r.scratch_count = scratch;
  }
  return s;
}
Status Check(const Schedule& s, const ScheduleRequest& r, bool in_place = false, bool avg = false) {
  CheckOptions o;
  o.in_place = in_place;
  o.avg = avg;
  return CheckSchedule(s, r, o);
}

// A correct 2-rank allreduce: exchange inputs, reduce, finalize. (Receiving straight into the
// output would deadlock in-place: the recv_reduce's write waits for the send's read.)
Schedule GoodAllReduce2(size_t n) {
  Schedule s = Sched(Collective::kAllReduce, 2, n, n, n, n);
  for (int r = 0; r < 2; ++r) {
    s.ranks[r].steps.push_back(SendStep(1 - r, In(0, n)));
    s.ranks[r].steps.push_back(RecvStep(1 - r, Tmp(0, n)));
    s.ranks[r].steps.push_back(CopyStep(In(0, n), Out(0, n)));
    s.ranks[r].steps.push_back(ReduceStep(Tmp(0, n), Out(0, n)));
    s.ranks[r].steps.push_back(FinalizeStep(Out(0, n)));
  }
  return s;
}

TEST(CheckerRejects, InPlaceAliasingDeadlock) {
  // Receiving straight into the output while the send still reads the (aliased) input.
  Schedule s = Sched(Collective::kAllReduce, 2, 4, 4, 4);
  for (int r = 0; r < 2; ++r)
    s.ranks[r].steps = {SendStep(1 - r, In(0, 4)), RecvReduceStep(1 - r, In(0, 4), Out(0, 4)),
                        FinalizeStep(Out(0, 4))};
  EXPECT_TRUE(Check(s, Req(Collective::kAllReduce, 2, 4), false, true).ok());
  Status st = Check(s, Req(Collective::kAllReduce, 2, 4), true, true);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("in-place"));
  EXPECT_THAT(st.message(), HasSubstr("deadlock"));
}

TEST(CheckerRejects, GoodHandmadeAllReducePasses) {
  for (bool in_place : {false, true})
    for (bool avg : {false, true})
      EXPECT_TRUE(Check(GoodAllReduce2(5), Req(Collective::kAllReduce, 2, 5), in_place, avg).ok());
}

TEST(CheckerRejects, DoubleCount) {
  Schedule s = GoodAllReduce2(8);
  s.ranks[1].steps.insert(s.ranks[1].steps.begin() + 4, ReduceStep(In(0, 8), Out(0, 8)));
  Status st = Check(s, Req(Collective::kAllReduce, 2, 8));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 1 step 4 (reduce)"));
  EXPECT_THAT(st.message(), HasSubstr("already holds rank 1's contribution"));
  EXPECT_THAT(st.message(), HasSubstr("output[0..8)"));
}

TEST(CheckerRejects, DoubleCountOnRecvReduce) {
  // rank 0 receives rank 1's partial twice.
  Schedule s = Sched(Collective::kAllReduce, 2, 4, 4, 4);
  s.ranks[1].steps = {SendStep(0, In(0, 4)), SendStep(0, In(0, 4))};
  s.ranks[0].steps = {RecvReduceStep(1, In(0, 4), Out(0, 4)), RecvReduceStep(1, Out(0, 4), Out(0, 4))};
  Status st = Check(s, Req(Collective::kAllReduce, 2, 4));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 0 step 1 (recv_reduce from 1)"));
  EXPECT_THAT(st.message(), HasSubstr("double counting"));
}

TEST(CheckerRejects, MissingContribution) {
  // 3 ranks, rank 2's input never reaches anyone.
  Schedule s = Sched(Collective::kAllReduce, 3, 4, 4, 4);
  s.ranks[0].steps = {SendStep(1, In(0, 4)), RecvStep(1, Out(0, 4))};
  s.ranks[1].steps = {RecvReduceStep(0, In(0, 4), Out(0, 4)), SendStep(0, Out(0, 4))};
  s.ranks[2].steps = {CopyStep(In(0, 4), Out(0, 4))};
  Status st = Check(s, Req(Collective::kAllReduce, 3, 4));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 0 output[0] is missing the contributions of ranks {2}"));
}

TEST(CheckerRejects, Deadlock) {
  // Both ranks receive first with a window of 1: neither can issue its send.
  Schedule s = Sched(Collective::kAllReduce, 2, 4, 4, 4);
  for (int r = 0; r < 2; ++r)
    s.ranks[r].steps = {RecvReduceStep(1 - r, In(0, 4), Out(0, 4)), SendStep(1 - r, In(0, 4))};
  s.window = 1;
  Status st = Check(s, Req(Collective::kAllReduce, 2, 4));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("deadlock"));
  EXPECT_THAT(st.message(), HasSubstr("rank 0 step 0 (recv_reduce from 1) never matched"));
  EXPECT_THAT(st.message(), HasSubstr("rank 1 step 0 (recv_reduce from 0) never matched"));
  // With a window of 2 the same schedule is fine.
  s.window = 2;
  EXPECT_TRUE(Check(s, Req(Collective::kAllReduce, 2, 4)).ok());
}

TEST(CheckerRejects, HazardSerializesSendAfterRecv) {
  // The send reads what the recv writes, so it must wait for it: a cycle, even with a wide window.
  Schedule s = Sched(Collective::kAllGather, 2, 3, 3, 6);
  for (int r = 0; r < 2; ++r)
    s.ranks[r].steps = {CopyStep(In(0, 3), Out(3 * r, 3)), RecvStep(1 - r, Out(3 * (1 - r), 3)),
                        SendStep(1 - r, Out(3 * (1 - r), 3))};
  Status st = Check(s, Req(Collective::kAllGather, 2, 3));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("deadlock"));
}

TEST(CheckerRejects, SizeMismatch) {
  Schedule s = Sched(Collective::kBroadcast, 2, 4, 0, 4);
  s.ranks[0].input_count = 4;
  s.ranks[0].steps = {CopyStep(In(0, 4), Out(0, 4)), SendStep(1, In(0, 4))};
  s.ranks[1].steps = {RecvStep(0, Out(0, 3))};
  ScheduleRequest r = Req(Collective::kBroadcast, 2, 4);
  r.root = 0;
  Status st = Check(s, r);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 0 step 1 (send to 1) sends 4 elements"));
  EXPECT_THAT(st.message(), HasSubstr("rank 1 step 0 (recv from 0) expects 3"));
}

TEST(CheckerRejects, FinalizeTwice) {
  Schedule s = GoodAllReduce2(6);
  s.ranks[0].steps.push_back(FinalizeStep(Out(2, 2)));
  Status st = Check(s, Req(Collective::kAllReduce, 2, 6), false, true);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 0 step 5 (finalize)"));
  EXPECT_THAT(st.message(), HasSubstr("finalized twice"));
  // Structural: rejected with avg off too.
  EXPECT_FALSE(Check(s, Req(Collective::kAllReduce, 2, 6), false, false).ok());
}

TEST(CheckerRejects, FinalizeTooEarlyAndMissing) {
  Schedule s = GoodAllReduce2(6);
  s.ranks[1].steps.insert(s.ranks[1].steps.begin(), FinalizeStep(Out(0, 6)));
  // rank 1 finalizes output before anything wrote it.
  EXPECT_THAT(Check(s, Req(Collective::kAllReduce, 2, 6)).message(), HasSubstr("nothing wrote"));
  Schedule t = GoodAllReduce2(6);
  t.ranks[1].steps.pop_back();  // rank 1 never finalizes
  EXPECT_TRUE(Check(t, Req(Collective::kAllReduce, 2, 6), false, false).ok());
  Status st = Check(t, Req(Collective::kAllReduce, 2, 6), false, true);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 1 output[0] is never finalized"));
  // Reducing into a finalized value (avg would divide a partial sum).
  Schedule u = Sched(Collective::kAllReduce, 3, 2, 2, 2);
  u.ranks[0].steps = {FinalizeStep(Out(0, 2))};
  EXPECT_FALSE(Check(u, Req(Collective::kAllReduce, 3, 2)).ok());
  Schedule v = Sched(Collective::kAllReduce, 2, 2, 2, 2);
  v.ranks[0].steps = {CopyStep(In(0, 2), Out(0, 2)), FinalizeStep(Out(0, 2))};
  Status sv = Check(v, Req(Collective::kAllReduce, 2, 2));
  EXPECT_THAT(sv.message(), HasSubstr("finalized before it is complete (missing ranks {1})"));
}

TEST(CheckerRejects, UninitializedReadAndReadOnlyInput) {
  Schedule s = Sched(Collective::kAllGather, 2, 2, 2, 4, 2);
  s.ranks[0].steps = {SendStep(1, Tmp(0, 2))};
  s.ranks[1].steps = {RecvStep(0, Out(0, 2))};
  Status st = Check(s, Req(Collective::kAllGather, 2, 2));
  EXPECT_THAT(st.message(), HasSubstr("rank 0 step 0 (send to 1): scratch[0..2) element 0 is sent "
                                      "before anything wrote it"));
  Schedule t = Sched(Collective::kAllGather, 2, 2, 2, 4);
  t.ranks[0].steps = {CopyStep(Out(0, 2), In(0, 2))};
  EXPECT_THAT(Check(t, Req(Collective::kAllGather, 2, 2)).message(),
              HasSubstr("the caller's input is read-only"));
}

TEST(CheckerRejects, StructuralErrors) {
  Schedule s = GoodAllReduce2(4);
  s.ranks[0].steps[0].peer = 0;
  EXPECT_THAT(Check(s, Req(Collective::kAllReduce, 2, 4)).message(), HasSubstr("peer is the rank itself"));
  s.ranks[0].steps[0].peer = 5;
  EXPECT_THAT(Check(s, Req(Collective::kAllReduce, 2, 4)).message(), HasSubstr("peer 5 out of range"));
  Schedule t = GoodAllReduce2(4);
  t.ranks[1].steps[0].src = In(2, 4);
  EXPECT_THAT(Check(t, Req(Collective::kAllReduce, 2, 4)).message(),
              HasSubstr("src input[2..6) exceeds rank 1's input_count 4"));
  Schedule u = GoodAllReduce2(4);
  u.ranks[1].output_count = 5;
  EXPECT_THAT(Check(u, Req(Collective::kAllReduce, 2, 4)).message(),
              HasSubstr("output_count 5 but the caller's output holds 4"));
  EXPECT_THAT(Check(u, Req(Collective::kAllGather, 2, 4)).message(), HasSubstr("schedule is for allreduce"));
}

// Direct reads: rank 0 publishes its input in its window, rank 1 reads it.
Schedule DirectPair(bool with_sync, bool with_second_round, bool overwrite) {
  Schedule s = Sched(Collective::kBroadcast, 2, 4, 0, 4, 4);
  s.ranks[0].input_count = 4;
  auto& a = s.ranks[0].steps;
  auto& b = s.ranks[1].steps;
  a.push_back(CopyStep(In(0, 4), Out(0, 4)));
  a.push_back(CopyStep(In(0, 4), Tmp(0, 4)));
  Step sig; sig.op = StepOp::kSignal; sig.peer = 1;
  Step wait; wait.op = StepOp::kWait; wait.peer = 0;
  Step rd; rd.op = StepOp::kDirectRead; rd.peer = 0; rd.dst = Out(0, 4); rd.remote = Tmp(0, 4);
  if (with_sync) { a.push_back(sig); b.push_back(wait); }
  b.push_back(rd);
  if (with_second_round) {
    Step sig1 = sig; sig1.peer = 0;
    Step wait0 = wait; wait0.peer = 1;
    b.push_back(sig1);
    a.push_back(wait0);
  }
  if (overwrite) a.push_back(CopyStep(Out(0, 4), Tmp(0, 4)));
  return s;
}

TEST(CheckerRejects, RaceOnDirectRead) {
  ScheduleRequest r = Req(Collective::kBroadcast, 2, 4);
  r.root = 0;
  EXPECT_TRUE(Check(DirectPair(true, true, true), r).ok()) << Check(DirectPair(true, true, true), r).message();
  EXPECT_TRUE(Check(DirectPair(true, false, false), r).ok());
  Status st = Check(DirectPair(false, false, false), r);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 1 step 0 (direct_read from 0) reads scratch[0] of rank 0"));
  EXPECT_THAT(st.message(), HasSubstr("rank 0 step 1 (copy)"));
  EXPECT_THAT(st.message(), HasSubstr("race"));
  // Overwriting the window without waiting for the reader's signal is a race too.
  // (Which side the report names depends on the interleaving simulated; both are the race.)
  Status st2 = Check(DirectPair(true, false, true), r);
  ASSERT_FALSE(st2.ok());
  EXPECT_THAT(st2.message(), HasSubstr("rank 0 step 3 (copy)"));
  EXPECT_THAT(st2.message(), HasSubstr("rank 1 step 1 (direct_read from 0)"));
  EXPECT_THAT(st2.message(), HasSubstr("race"));
}

TEST(CheckerRejects, RaceWhenSignalPrecedesArrival) {
  // Rank 0 receives into its window from rank 2 and signals rank 1; the signal is a release
  // fence, so this is fine. Without the fence (modelled by reading before the wait) it races.
  Schedule s = Sched(Collective::kBroadcast, 3, 2, 0, 2, 2);
  s.ranks[2].input_count = 2;
  s.ranks[2].steps = {CopyStep(In(0, 2), Out(0, 2)), SendStep(0, In(0, 2))};
  Step sig; sig.op = StepOp::kSignal; sig.peer = 1;
  Step wait; wait.op = StepOp::kWait; wait.peer = 0;
  Step rd; rd.op = StepOp::kDirectRead; rd.peer = 0; rd.dst = Out(0, 2); rd.remote = Tmp(0, 2);
  s.ranks[0].steps = {RecvStep(2, Tmp(0, 2)), sig, CopyStep(Tmp(0, 2), Out(0, 2))};
  s.ranks[1].steps = {wait, rd};
  ScheduleRequest r = Req(Collective::kBroadcast, 3, 2);
  r.root = 2;
  EXPECT_TRUE(Check(s, r).ok()) << Check(s, r).message();
  s.ranks[1].steps = {rd, wait};
  // Reported as a race or as a read of never-written data, depending on the interleaving.
  EXPECT_THAT(Check(s, r).message(), HasSubstr("rank 1 step 0 (direct_read from 0)"));
  EXPECT_FALSE(Check(s, r).ok());
}

TEST(CheckerRejects, BarrierMustSynchronize) {
  // Zero-count rounds are not ordered by any region, so they do not synchronize.
  const int p = 8;
  Schedule s = Sched(Collective::kBarrier, p, 0, 0, 0);
  for (int r = 0; r < p; ++r)
    for (int k = 0; k < 3; ++k) {
      s.ranks[r].steps.push_back(SendStep((r + (1 << k)) % p, Tmp(0, 0)));
      s.ranks[r].steps.push_back(RecvStep((r - (1 << k) + p) % p, Tmp(0, 0)));
    }
  Status st = Check(s, Req(Collective::kBarrier, p, 0));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("can leave before rank"));
  const AlgorithmInfo* d = FindAlgorithm(Collective::kBarrier, "dissemination");
  ASSERT_NE(d, nullptr);
  for (int q = 1; q <= 9; ++q) EXPECT_TRUE(ProveAlgorithm(*d, Req(Collective::kBarrier, q, 0)).ok());
}

TEST(CheckerRejects, WrongPlacement) {
  // allgather that puts rank 1's block where rank 0's belongs.
  Schedule s = Sched(Collective::kAllGather, 2, 2, 2, 4);
  s.ranks[0].steps = {CopyStep(In(0, 2), Out(0, 2)), SendStep(1, In(0, 2)), RecvStep(1, Out(2, 2))};
  s.ranks[1].steps = {CopyStep(In(0, 2), Out(0, 2)), RecvStep(0, Out(2, 2)), SendStep(0, In(0, 2))};
  Status st = Check(s, Req(Collective::kAllGather, 2, 2));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 1 output[0] holds input element 0 of ranks {1}, expected "
                                      "element 0 of ranks {0}"));
}

// ---- fused primitives (recv_reduce_send, recv_copy_send) ----

size_t FusedSteps(const Schedule& s) {
  size_t n = 0;
  for (const RankSchedule& rs : s.ranks)
    for (const Step& st : rs.steps)
      n += st.op == StepOp::kRecvReduceSend || st.op == StepOp::kRecvCopySend;
  return n;
}

// The generators that forward what they receive build fused steps, and the checker proves
// each of them for many rank counts, counts and chunkings (in-place, out-of-place, avg).
TEST(CheckerProvesFused, EveryForwardingAlgorithmManyRankCounts) {
  const std::vector<std::pair<Collective, const char*>> fused = {
      {Collective::kAllReduce, "tree"},
      {Collective::kAllReduce, "hierarchical"}, {Collective::kReduceScatter, "ring"},
      {Collective::kAllGather, "ring"},        {Collective::kReduce, "chain"},
      {Collective::kBroadcast, "chain"}};
  int proofs = 0;
  for (const auto& [collective, name] : fused) {
    const AlgorithmInfo* a = FindAlgorithm(collective, name);
    ASSERT_NE(a, nullptr) << CollectiveName(collective) << ":" << name;
    for (int p = 1; p <= 40; ++p) {
      for (size_t count : {size_t{0}, size_t{1}, size_t(p - 1), size_t(p), size_t(p + 1), size_t{97}}) {
        for (size_t chunk : {size_t{0}, size_t{3}}) {
          ScheduleRequest r = Req(collective, p, count);
          r.root = p > 2 ? 2 : p - 1;
          r.chunk.chunk_elems = chunk;
          r.chunk.channels = chunk == 3 ? 2 : 1;
          r.groups = Blocks(p, 4);
          StatusOr<Schedule> s = a->build(r);
          ASSERT_TRUE(s.ok()) << Label(*a) << ": " << s.status().message();
          // 3+ ranks and some data: there is a hop that receives and forwards.
          if (p >= 3 && count >= static_cast<size_t>(p))
            EXPECT_GT(FusedSteps(*s), 0u) << Label(*a) << " p=" << p << " count=" << count;
          Status st = ProveAlgorithm(*a, r);
          ASSERT_TRUE(st.ok()) << Label(*a) << " p=" << p << " count=" << count << ": " << st.message();
          ++proofs;
        }
      }
    }
  }
  RecordProperty("proofs", proofs);
}

// Replaces the first step of `op` in `s` (any rank) by `f(step)`; false when there is none.
template <typename F>
bool MutateFirst(Schedule* s, StepOp op, F f) {
  for (RankSchedule& rs : s->ranks)
    for (Step& st : rs.steps)
      if (st.op == op) {
        f(st);
        return true;
      }
  return false;
}

// The fused ring reduce-scatter (recv_reduce_send on every inner hop).
Schedule RingReduceScatter(int p, size_t count) {
  ScheduleRequest r = Req(Collective::kReduceScatter, p, count);
  StatusOr<Schedule> s = FindAlgorithm(Collective::kReduceScatter, "ring")->build(r);
  EXPECT_TRUE(s.ok());
  return *s;
}

TEST(CheckerRejectsFused, ReduceSendThatOnlyCopiesLosesAContribution) {
  Schedule s = RingReduceScatter(4, 10);
  ASSERT_TRUE(Check(s, Req(Collective::kReduceScatter, 4, 10)).ok());
  // recv_copy_send instead of recv_reduce_send: the hop forgets its own input.
  ASSERT_TRUE(MutateFirst(&s, StepOp::kRecvReduceSend, [](Step& st) { st.op = StepOp::kRecvCopySend; }));
  Status st = Check(s, Req(Collective::kReduceScatter, 4, 10));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("missing"));
}

TEST(CheckerRejectsFused, ForwardToTheWrongRank) {
  Schedule s = RingReduceScatter(4, 10);
  ASSERT_TRUE(MutateFirst(&s, StepOp::kRecvReduceSend, [](Step& st) { st.to = (st.to + 1) % 4; }));
  Status st = Check(s, Req(Collective::kReduceScatter, 4, 10));
  ASSERT_FALSE(st.ok());  // the intended receiver starves, the other gets a surplus message
  EXPECT_THAT(st.message(), HasSubstr("forward to"));
}

TEST(CheckerRejectsFused, ForwardToItselfOrOutOfRange) {
  Schedule self = RingReduceScatter(4, 10);
  bool found = false;
  for (Step& st : self.ranks[0].steps)
    if (!found && st.op == StepOp::kRecvReduceSend) {
      st.to = 0;
      found = true;
    }
  ASSERT_TRUE(found);
  Status st = Check(self, Req(Collective::kReduceScatter, 4, 10));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("forwards to the rank itself"));
  Schedule range = RingReduceScatter(4, 10);
  ASSERT_TRUE(MutateFirst(&range, StepOp::kRecvReduceSend, [](Step& s) { s.to = 9; }));
  EXPECT_THAT(Check(range, Req(Collective::kReduceScatter, 4, 10)).message(),
              HasSubstr("forward rank 9 out of range"));
}

TEST(CheckerRejectsFused, ForwardKeepsProgramOrderPerStream) {
  // Rank 1 forwards rank 0's data, then sends its own input, both to rank 2 on channel 0.
  // The forward waits for its data, and the plain send may not overtake it: rank 2's first
  // receive gets rank 0's element. Expecting rank 1's there (as a reordering would) fails.
  Schedule s = Sched(Collective::kAllGather, 3, 1, 1, 3);
  s.ranks[0].steps = {CopyStep(In(0, 1), Out(0, 1)), SendStep(1, In(0, 1)), RecvStep(2, Out(2, 1)),
                      RecvStep(2, Out(1, 1))};
  s.ranks[1].steps = {CopyStep(In(0, 1), Out(1, 1)), RecvCopySendStep(0, Out(0, 1), 2),
                      SendStep(2, In(0, 1)), RecvStep(2, Out(2, 1))};
  s.ranks[2].steps = {CopyStep(In(0, 1), Out(2, 1)), RecvStep(1, Out(0, 1)), RecvStep(1, Out(1, 1)),
                      SendStep(0, In(0, 1)), SendStep(0, Out(1, 1)), SendStep(1, In(0, 1))};
  EXPECT_TRUE(Check(s, Req(Collective::kAllGather, 3, 1)).ok()) << Check(s, Req(Collective::kAllGather, 3, 1)).message();
  std::swap(s.ranks[2].steps[1].dst, s.ranks[2].steps[2].dst);  // expects rank 1's first
  Status st = Check(s, Req(Collective::kAllGather, 3, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("holds input element 0 of ranks {0}, expected element 0 of ranks {1}"));
}

TEST(CheckerRejectsFused, ForwardedSizeMustMatchTheReceiver) {
  Schedule s = Sched(Collective::kBroadcast, 3, 4, 4, 4);
  s.root = 0;
  s.ranks[0].steps = {CopyStep(In(0, 4), Out(0, 4)), SendStep(1, In(0, 4))};
  s.ranks[1].steps = {RecvCopySendStep(0, Out(0, 4), 2)};
  s.ranks[2].steps = {RecvStep(1, Out(0, 3))};
  s.ranks[1].input_count = s.ranks[2].input_count = 0;  // broadcast: only the root has input
  ScheduleRequest r = Req(Collective::kBroadcast, 3, 4);
  r.root = 0;
  Status st = Check(s, r);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 1 step 0 (recv_copy_send from 0 forward to 2) sends 4"));
  EXPECT_THAT(st.message(), HasSubstr("size mismatch"));
}

}  // namespace
}  // namespace weft
