// Proofs of direct schedules across calls: a single-round oneshot allreduce returns while its
// peers may still read its window (ScheduleRequest::window_half), so safety is a property of
// call sequences, not of one schedule. The sequences are built exactly as the communicator runs
// them (WindowSequencer in algorithms/direct_pattern.h picks the half and inserts the release
// handshake) and proved by CheckCallSequence (src/check/checker.h). The negative cases show
// the checker finds the races the alternation and the release exist to prevent.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/direct_pattern.h"
#include "algorithms/registry.h"
#include "algorithms/step_table.h"
#include "check/checker.h"

namespace weft {
namespace {

// Elements per window half in these proofs: any size >= the count proves the same ordering;
// a small one keeps the checker's scratch small.
constexpr size_t kHalfElems = 1024;

ScheduleRequest Request(int p, size_t count, Collective c = Collective::kAllReduce) {
  ScheduleRequest r;
  r.collective = c;
  r.nranks = p;
  r.count = count;
  r.all_ranks_mappable = true;
  r.window_half_elems = kHalfElems;
  return r;
}

// Every rank's release handshake, as one schedule.
Schedule ReleaseSchedule(int p, size_t count, Collective c) {
  Schedule s;
  s.collective = c;
  s.algorithm = "release";
  s.nranks = p;
  s.count = count;
  s.window = p;
  for (int r = 0; r < p; ++r) s.ranks.push_back(DirectWindowRelease(r, p));
  return s;
}

// The schedules a communicator runs for `algos` called one after another (count `count` each):
// the half of each single-round call and the releases come from WindowSequencer.
std::vector<Schedule> AsCommunicatorRunsThem(const std::vector<std::string>& algos, int p,
                                             size_t count, bool with_release = true,
                                             Collective c = Collective::kAllReduce) {
  std::vector<Schedule> out;
  WindowSequencer window;
  for (const std::string& name : algos) {
    const AlgorithmInfo* info = FindAlgorithm(c, name);
    EXPECT_NE(info, nullptr) << name;
    if (info == nullptr) return out;
    ScheduleRequest req = Request(p, count, c);
    req.window_half = 0;
    const bool holds = info->holds_window && info->holds_window(req);
    req.window_half = holds ? window.NextHalf() : -1;
    StatusOr<Schedule> s = BuildSchedule(*info, req);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok()) return out;
    bool uses = false;
    for (const RankSchedule& rs : s->ranks)
      for (const Step& st : rs.steps) uses |= SemanticsOf(st.op).needs_direct;
    if (with_release && window.NeedsRelease(uses, holds)) {
      out.push_back(ReleaseSchedule(p, count, c));
      window.Released();
    }
    out.push_back(std::move(*s));
    window.Completed(uses, holds);
  }
  return out;
}

Status Prove(const std::vector<Schedule>& calls, int p, size_t count, bool avg,
             Collective c = Collective::kAllReduce) {
  std::vector<const Schedule*> ptrs;
  for (const Schedule& s : calls) ptrs.push_back(&s);
  CheckOptions o;
  o.avg = avg;
  return CheckCallSequence(ptrs, Request(p, count, c), o);
}

// Rank 1's classic schedule (window_half -1) and its single-round one in half 1, for `req`.
std::pair<StatusOr<Schedule>, StatusOr<Schedule>> ClassicAndSingle(const AlgorithmInfo& a,
                                                                   ScheduleRequest req) {
  req.scope = PlanScope::ForRank(1);
  req.window_half = -1;
  StatusOr<Schedule> classic = BuildSchedule(a, req);
  req.window_half = 1;
  return {std::move(classic), BuildSchedule(a, req)};
}

int Signals(const Schedule& s) {
  int n = 0;
  for (const Step& st : s.ranks[1].steps) n += st.op == StepOp::kSignal;
  return n;
}

TEST(WindowSequence, OneshotHoldsTheWindowOnlyWhenAskedAndInOneRound) {
  const AlgorithmInfo* oneshot = FindAlgorithm(Collective::kAllReduce, "oneshot");
  ASSERT_NE(oneshot, nullptr);
  ASSERT_TRUE(oneshot->holds_window);
  ScheduleRequest req = Request(2, 100);
  req.window_half = 0;
  EXPECT_TRUE(oneshot->holds_window(req));
  req.count = kHalfElems + 1;  // does not fit a half: the classic schedule
  EXPECT_FALSE(oneshot->holds_window(req));
  req.count = 100;
  req.chunk.chunk_elems = 10;  // several rounds: classic
  EXPECT_FALSE(oneshot->holds_window(req));
  req = Request(1, 100);
  req.window_half = 0;
  EXPECT_FALSE(oneshot->holds_window(req));  // one rank: no window at all
  // The single-round schedule has one signal per peer (the classic one two).
  auto [classic, single] = ClassicAndSingle(*oneshot, Request(3, 100));
  ASSERT_TRUE(classic.ok() && single.ok());
  EXPECT_EQ(Signals(*classic), 4);
  EXPECT_EQ(Signals(*single), 2);
  // Half 1 lies at the fixed offset kHalfElems.
  for (const Step& st : single->ranks[1].steps)
    if (st.op == StepOp::kDirectReduce || st.op == StepOp::kDirectRead)
      EXPECT_EQ(st.remote.offset, kHalfElems);
}

TEST(WindowSequence, CheckerProvesMixedSequences) {
  const std::vector<std::string> algos = {"oneshot", "oneshot", "oneshot", "twoshot", "oneshot",
                                          "oneshot", "twoshot", "twoshot", "oneshot", "ring",
                                          "oneshot", "oneshot"};
  for (int p : {2, 3, 4, 5, 8})
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}})
      for (bool avg : {false, true}) {
        std::vector<Schedule> calls = AsCommunicatorRunsThem(algos, p, count);
        Status st = Prove(calls, p, count, avg);
        EXPECT_TRUE(st.ok()) << "p=" << p << " count=" << count << ": " << st.message();
      }
}

TEST(WindowSequence, CheckerFindsTheRaceOfReusingOneHalf) {
  const AlgorithmInfo* oneshot = FindAlgorithm(Collective::kAllReduce, "oneshot");
  ASSERT_NE(oneshot, nullptr);
  for (int p : {2, 4}) {
    ScheduleRequest req = Request(p, 7);
    req.window_half = 0;
    StatusOr<Schedule> a = BuildSchedule(*oneshot, req);
    StatusOr<Schedule> b = BuildSchedule(*oneshot, req);
    ASSERT_TRUE(a.ok() && b.ok());
    Status st = Prove({*a, *b}, p, 7, false);  // the same half twice in a row
    ASSERT_FALSE(st.ok()) << "p=" << p;
    EXPECT_NE(st.message().find("race"), std::string::npos) << st.message();
  }
}

TEST(WindowSequence, CheckerFindsTheRaceOfSkippingTheRelease) {
  for (int p : {2, 3}) {
    std::vector<Schedule> calls =
        AsCommunicatorRunsThem({"oneshot", "twoshot"}, p, 7, /*with_release=*/false);
    ASSERT_EQ(calls.size(), 2u);
    Status st = Prove(calls, p, 7, false);
    ASSERT_FALSE(st.ok()) << "p=" << p;
    EXPECT_NE(st.message().find("race"), std::string::npos) << st.message();
    // And with the release the communicator inserts, the same pair is proved.
    calls = AsCommunicatorRunsThem({"oneshot", "twoshot"}, p, 7);
    ASSERT_EQ(calls.size(), 3u);
    Status ok = Prove(calls, p, 7, false);
    EXPECT_TRUE(ok.ok()) << ok.message();
  }
}

// All-to-all direct has the same single-round variant: its p blocks in one half of the window.
TEST(WindowSequence, AllToAllDirectHoldsTheWindowWhenItsBlocksFitAHalf) {
  const AlgorithmInfo* direct = FindAlgorithm(Collective::kAllToAll, "direct");
  ASSERT_NE(direct, nullptr);
  ASSERT_TRUE(direct->holds_window);
  ScheduleRequest req = Request(4, kHalfElems / 4, Collective::kAllToAll);
  req.window_half = 0;
  EXPECT_TRUE(direct->holds_window(req));
  req.count = kHalfElems / 4 + 1;  // 4 blocks no longer fit a half
  EXPECT_FALSE(direct->holds_window(req));
  req.count = 10;
  req.peer_buffers_mapped = req.out_of_place = true;  // zero-copy: no window at all
  EXPECT_FALSE(direct->holds_window(req));
  // The single-round schedule signals each peer once (the classic one twice) and reads block r
  // of the peer's half 1 at the fixed offset kHalfElems.
  auto [classic, single] = ClassicAndSingle(*direct, Request(3, 10, Collective::kAllToAll));
  ASSERT_TRUE(classic.ok() && single.ok());
  EXPECT_EQ(Signals(*classic), 4);
  EXPECT_EQ(Signals(*single), 2);
  for (const Step& st : single->ranks[1].steps)
    if (st.op == StepOp::kDirectRead) EXPECT_EQ(st.remote.offset, kHalfElems + 1 * 10);
}

// All-to-all, allgather and reduce-scatter direct single-round calls mixed with the
// collective's message-based algorithms (their scratch is private: CheckCallSequence).
TEST(WindowSequence, CheckerProvesAllToAllAllGatherAndReduceScatterSequences) {
  const std::vector<std::pair<Collective, std::vector<std::string>>> cases = {
      {Collective::kAllToAll, {"direct", "direct", "direct", "pairwise", "direct", "bruck", "direct", "direct"}},
      {Collective::kAllGather, {"direct", "direct", "ring", "direct", "direct", "bruck", "direct"}},
      {Collective::kReduceScatter, {"direct", "direct", "ring", "direct", "direct", "pairwise", "direct"}},
  };
  for (const auto& [c, algos] : cases)
    for (int p : {2, 3, 4, 8})
      for (size_t count : {size_t{1}, size_t{7}, size_t{100}})
        for (bool avg : {false, true}) {
          if (avg && c != Collective::kReduceScatter) continue;
          std::vector<Schedule> calls = AsCommunicatorRunsThem(algos, p, count, true, c);
          Status st = Prove(calls, p, count, avg, c);
          EXPECT_TRUE(st.ok()) << CollectiveName(c) << " p=" << p << " count=" << count << ": "
                               << st.message();
        }
}

// The same half twice in a row is a race the checker finds.
TEST(WindowSequence, CheckerFindsTheSameHalfRaceForEveryDirectCollective) {
  for (Collective c : {Collective::kAllToAll, Collective::kAllGather, Collective::kReduceScatter}) {
    const AlgorithmInfo* direct = FindAlgorithm(c, "direct");
    ASSERT_NE(direct, nullptr) << CollectiveName(c);
    ASSERT_TRUE(direct->holds_window) << CollectiveName(c);
    ScheduleRequest req = Request(3, 7, c);
    req.window_half = 0;
    ASSERT_TRUE(direct->holds_window(req)) << CollectiveName(c);
    StatusOr<Schedule> a = BuildSchedule(*direct, req);
    StatusOr<Schedule> b = BuildSchedule(*direct, req);
    ASSERT_TRUE(a.ok() && b.ok());
    Status st = Prove({*a, *b}, 3, 7, false, c);
    ASSERT_FALSE(st.ok()) << CollectiveName(c);
    EXPECT_NE(st.message().find("race"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace weft
