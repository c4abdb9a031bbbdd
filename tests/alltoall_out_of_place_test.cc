// All-to-all schedules built for out-of-place calls (ScheduleRequest::out_of_place): pairwise
// then receives every block straight into the output (no staging copy). The checker proves
// those schedules out-of-place for many rank counts and chunkings, and the in-place run of the
// same schedule fails (the flag really changes what is safe: it must only be set for disjoint
// buffers, as src/core/comm.cc does).
#include <gtest/gtest.h>

#include "algorithms/registry.h"
#include "check/checker.h"

namespace weft {
namespace {

ScheduleRequest Request(int p, size_t count, size_t chunk, bool out_of_place) {
  ScheduleRequest r;
  r.collective = Collective::kAllToAll;
  r.nranks = p;
  r.count = count;
  r.chunk.chunk_elems = chunk;
  r.out_of_place = out_of_place;
  return r;
}

size_t CopiedElements(const Schedule& s) {
  size_t n = 0;
  for (const RankSchedule& rs : s.ranks)
    for (const Step& st : rs.steps)
      if (st.op == StepOp::kCopy) n += st.dst.count;
  return n;
}

TEST(AllToAllOutOfPlace, PairwiseIsProvedAndCopiesOnlyTheOwnBlock) {
  const AlgorithmInfo* pairwise = FindAlgorithm(Collective::kAllToAll, "pairwise");
  ASSERT_NE(pairwise, nullptr);
  for (int p : {1, 2, 3, 4, 5, 8})
    for (size_t count : {size_t{1}, size_t{7}, size_t{100}})
      for (size_t chunk : {size_t{0}, size_t{3}}) {
        ScheduleRequest req = Request(p, count, chunk, /*out_of_place=*/true);
        Status st = ProveAlgorithm(*pairwise, req);
        EXPECT_TRUE(st.ok()) << "p=" << p << " count=" << count << ": " << st.message();
        StatusOr<Schedule> s = BuildSchedule(*pairwise, req);
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(CopiedElements(*s), static_cast<size_t>(p) * count) << "p=" << p;  // own blocks only
      }
}

TEST(AllToAllOutOfPlace, TheOutOfPlaceScheduleIsWrongInPlace) {
  const AlgorithmInfo* pairwise = FindAlgorithm(Collective::kAllToAll, "pairwise");
  ASSERT_NE(pairwise, nullptr);
  for (int p : {2, 3, 4}) {
    ScheduleRequest req = Request(p, 5, 0, /*out_of_place=*/true);
    StatusOr<Schedule> s = BuildSchedule(*pairwise, req);
    ASSERT_TRUE(s.ok());
    CheckOptions in_place;
    in_place.in_place = true;
    EXPECT_FALSE(CheckSchedule(*s, req, in_place).ok()) << "p=" << p;
    // The default (in-place safe) schedule passes both.
    EXPECT_TRUE(ProveAlgorithm(*pairwise, Request(p, 5, 0, false)).ok()) << "p=" << p;
  }
}

}  // namespace
}  // namespace weft
