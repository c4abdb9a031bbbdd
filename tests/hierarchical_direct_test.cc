// hierarchical_direct, the compositions for one direct transport per host (ScheduleRequest::
// groups_mappable): allreduce, allgather and alltoall use direct (one-sided) steps inside each
// group and messages only between groups. For many groupings (even, uneven, interleaved,
// singletons), counts and chunkings, every schedule is proved by the checker, has direct
// steps exactly when some group has more than one member, and never reaches across a group
// with a direct step nor inside one with a message. The variant applies only to mappable
// groups, two or more; the message variant ("hierarchical") never has direct steps; the
// selector marks the groups mappable only where a window transport can exist (shm on).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/step_table.h"
#include "check/checker.h"
#include "topo/fabric.h"
#include "topo/presets.h"
#include "tune/selector.h"

namespace weft {
namespace {

struct Shape {
  const char* name;
  std::vector<std::vector<int>> groups;
};

std::vector<Shape> Shapes() {
  return {{"2x2", {{0, 1}, {2, 3}}},
          {"3+2", {{0, 1, 2}, {3, 4}}},
          {"interleaved", {{0, 2, 4}, {1, 3, 5}}},
          {"singletons", {{0}, {1}, {2}}},
          {"2+1+3", {{0, 1}, {2}, {3, 4, 5}}}};
}

int NumRanks(const Shape& s) {
  int n = 0;
  for (const auto& g : s.groups) n += static_cast<int>(g.size());
  return n;
}

// What the schedule's steps say about where data moves; fails the test on a direct step
// across groups or a message inside one.
int CountDirectSteps(const Schedule& sched, const Shape& shape, const std::string& label) {
  std::vector<int> group_of(sched.ranks.size(), -1);
  for (size_t g = 0; g < shape.groups.size(); ++g)
    for (int r : shape.groups[g]) group_of[r] = static_cast<int>(g);
  int direct = 0;
  for (size_t r = 0; r < sched.ranks.size(); ++r)
    for (const Step& s : sched.ranks[r].steps) {
      const StepSemantics& m = SemanticsOf(s.op);
      if (m.needs_direct) {
        ++direct;
        EXPECT_EQ(group_of[s.peer], group_of[r]) << label << ": direct step from rank " << r
                                                 << " to rank " << s.peer << " in another group";
      }
      const int to = SendPeer(s);
      if (to >= 0 && shape.groups.size() > 1)
        EXPECT_NE(group_of[to], group_of[r])
            << label << ": rank " << r << " sends to rank " << to << " of its own group";
    }
  return direct;
}

TEST(HierarchicalDirect, ProvedAndDirectInsideGroupsOnly) {
  int proofs = 0;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kAllToAll}) {
    const AlgorithmInfo* info = FindAlgorithm(c, "hierarchical_direct");
    ASSERT_NE(info, nullptr);
    for (const Shape& shape : Shapes()) {
      bool any_pair = false;
      for (const auto& g : shape.groups) any_pair |= g.size() > 1;
      for (size_t count : {size_t{1}, size_t{5}, size_t{1000}})
        for (size_t chunk : {size_t{0}, size_t{64}}) {
          ScheduleRequest r;
          r.collective = c;
          r.nranks = NumRanks(shape);
          r.count = count;
          r.chunk.chunk_elems = chunk;
          r.groups = shape.groups;
          r.groups_mappable = true;
          const std::string label = std::string(CollectiveName(c)) + " " + shape.name +
                                    " count " + std::to_string(count) + " chunk " +
                                    std::to_string(chunk);
          Status proved = ProveAlgorithm(*info, r);
          ASSERT_TRUE(proved.ok()) << label << ": " << proved.message();
          ++proofs;
          StatusOr<Schedule> sched = info->build(r);
          ASSERT_TRUE(sched.ok()) << label << ": " << sched.status().message();
          ASSERT_TRUE(info->applicable(r)) << label;
          const int direct = CountDirectSteps(*sched, shape, label);
          EXPECT_EQ(direct > 0, any_pair) << label << ": " << direct << " direct steps";
        }
    }
  }
  RecordProperty("proofs", proofs);
}

// Large vectors, chunked: whatever the chunk size (here one chunk as large as the vector), the
// allreduce is cut into parts of at most 512 Ki elements (allreduce_hierarchical.cc,
// kDirectPartElems), so no direct step reads a larger window region; unchunked it stays one
// part (one direct read covers a whole slice). Every such schedule is proved.
TEST(HierarchicalDirect, LargeAllReduceIsCutIntoBoundedParts) {
  const AlgorithmInfo* info = FindAlgorithm(Collective::kAllReduce, "hierarchical_direct");
  ASSERT_NE(info, nullptr);
  const size_t part_elems = size_t{512} << 10, count = 4 * part_elems + 3;
  for (const Shape& shape : {Shapes()[0], Shapes()[1]})
    for (size_t chunk : {size_t{0}, count}) {
      ScheduleRequest r;
      r.collective = Collective::kAllReduce;
      r.nranks = NumRanks(shape);
      r.count = count;
      r.chunk.chunk_elems = chunk;
      r.groups = shape.groups;
      r.groups_mappable = true;
      const std::string label = std::string(shape.name) + " chunk " + std::to_string(chunk);
      Status proved = ProveAlgorithm(*info, r);
      ASSERT_TRUE(proved.ok()) << label << ": " << proved.message();
      StatusOr<Schedule> sched = info->build(r);
      ASSERT_TRUE(sched.ok()) << label << ": " << sched.status().message();
      size_t largest = 0, reads = 0;
      for (const RankSchedule& rs : sched->ranks)
        for (const Step& st : rs.steps)
          if (SemanticsOf(st.op).needs_direct && st.remote.count > 0) {
            largest = std::max(largest, st.remote.count);
            ++reads;
          }
      EXPECT_GT(reads, 0u) << label;
      if (chunk > 0)
        EXPECT_LE(largest, part_elems) << label << ": a direct read of " << largest << " elements";
      else
        EXPECT_GT(largest, part_elems) << label << ": unchunked, yet no read covers a whole slice";
    }
}

// The direct variant needs mappable groups, two or more; the message variant never has
// direct steps, mappable or not.
TEST(HierarchicalDirect, ApplicabilityAndTheMessageVariant) {
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kAllToAll}) {
    ScheduleRequest r;
    r.collective = c;
    r.nranks = 4;
    r.count = 100;
    r.groups = {{0, 1}, {2, 3}};
    const AlgorithmInfo* direct = FindAlgorithm(c, "hierarchical_direct");
    EXPECT_FALSE(direct->applicable(r)) << CollectiveName(c) << ": groups not mappable";
    r.groups_mappable = true;
    EXPECT_TRUE(direct->applicable(r)) << CollectiveName(c);
    StatusOr<Schedule> sched = FindAlgorithm(c, "hierarchical")->build(r);
    ASSERT_TRUE(sched.ok());
    for (const RankSchedule& rs : sched->ranks)
      for (const Step& s : rs.steps) EXPECT_FALSE(SemanticsOf(s.op).needs_direct) << CollectiveName(c);
    r.groups = {{0, 1, 2, 3}};
    EXPECT_FALSE(direct->applicable(r)) << CollectiveName(c) << ": one host";
  }
}

// The selector hands generators mappable groups for a 2-host fabric exactly when shared
// memory is on (a window transport per host), and never all-ranks-mappable across hosts.
TEST(HierarchicalDirect, SelectorMarksGroupsMappableWithShm) {
  StatusOr<std::shared_ptr<const Fabric>> fabric = MakePreset("netns:2x2");
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  for (bool shm : {true, false}) {
    Selector sel(*fabric, AlgoOverrides(), shm);
    ScheduleRequest r;
    r.collective = Collective::kAllReduce;
    r.nranks = (*fabric)->nranks();
    r.count = 1024;
    StatusOr<Decision> d = sel.Choose(&r, 4);
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ(r.groups_mappable, shm);
    EXPECT_FALSE(r.all_ranks_mappable);
    EXPECT_EQ(r.groups.size(), 2u);
  }
}

}  // namespace
}  // namespace weft
