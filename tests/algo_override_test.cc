// Tests for the WEFT_ALGO parser (algorithms/algo_override.h): good strings give the rules
// and lookups they say; bad strings are rejected with a message quoting the bad part.
#include <gtest/gtest.h>

#include <string>

#include "algorithms/algo_override.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

constexpr size_t kInf = static_cast<size_t>(-1);

AlgoOverrides MustParse(const std::string& spec) {
  StatusOr<AlgoOverrides> o = ParseAlgoOverrides(spec);
  EXPECT_TRUE(o.ok()) << "'" << spec << "': " << o.status().message();
  return o.ok() ? *o : AlgoOverrides{};
}

std::string ErrorOf(const std::string& spec) {
  StatusOr<AlgoOverrides> o = ParseAlgoOverrides(spec);
  EXPECT_FALSE(o.ok()) << "'" << spec << "' was accepted";
  if (!o.ok()) EXPECT_EQ(o.status().code(), weftInvalidUsage);
  return o.ok() ? "" : o.status().message();
}

std::string Find(const AlgoOverrides& o, Collective c, size_t bytes) {
  const std::string* name = o.Lookup(c, bytes);
  return name ? *name : "(selector)";
}

TEST(AlgoOverride, EmptyMeansSelectorDecides) {
  AlgoOverrides o = MustParse("");
  EXPECT_TRUE(o.rules.empty());
  EXPECT_EQ(Find(o, Collective::kAllReduce, 100), "(selector)");
  EXPECT_TRUE(MustParse(" ; ;").rules.empty());
}

TEST(AlgoOverride, OneAlgorithmForEverySize) {
  AlgoOverrides o = MustParse("allreduce:tree");
  ASSERT_EQ(o.rules.size(), 1u);
  EXPECT_EQ(o.rules[0].min_bytes, 0u);
  EXPECT_EQ(o.rules[0].max_bytes, kInf);
  for (size_t b : {size_t{0}, size_t{1}, size_t{1} << 40, kInf - 1})
    EXPECT_EQ(Find(o, Collective::kAllReduce, b), "tree");
  EXPECT_EQ(Find(o, Collective::kAllGather, 10), "(selector)");
}

TEST(AlgoOverride, RangesAndSeveralCollectives) {
  AlgoOverrides o = MustParse(
      "allreduce:0-64K:recursive_doubling,64K-1M:halving_doubling,1M-inf:tree;"
      " alltoall : pairwise ; broadcast:0-512:binomial");
  EXPECT_EQ(Find(o, Collective::kAllReduce, 0), "recursive_doubling");
  EXPECT_EQ(Find(o, Collective::kAllReduce, 65535), "recursive_doubling");
  EXPECT_EQ(Find(o, Collective::kAllReduce, 65536), "halving_doubling");  // LO inclusive
  EXPECT_EQ(Find(o, Collective::kAllReduce, (1u << 20) - 1), "halving_doubling");
  EXPECT_EQ(Find(o, Collective::kAllReduce, 1u << 20), "tree");           // HI exclusive
  EXPECT_EQ(Find(o, Collective::kAllToAll, 12345), "pairwise");
  EXPECT_EQ(Find(o, Collective::kBroadcast, 511), "binomial");
  EXPECT_EQ(Find(o, Collective::kBroadcast, 512), "(selector)");  // gap: selector decides
}

TEST(AlgoOverride, SizeSuffixes) {
  AlgoOverrides o = MustParse("reduce:1K-2M:chain,2M-3G:binomial");
  ASSERT_EQ(o.rules.size(), 2u);
  EXPECT_EQ(o.rules[0].min_bytes, 1024u);
  EXPECT_EQ(o.rules[0].max_bytes, 2u << 20);
  EXPECT_EQ(o.rules[1].max_bytes, size_t{3} << 30);
}

TEST(AlgoOverride, EveryRegisteredNameIsAccepted) {
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective == Collective::kSendRecv) continue;
    std::string spec = std::string(CollectiveName(a.collective)) + ":" + a.name;
    AlgoOverrides o = MustParse(spec);
    EXPECT_EQ(Find(o, a.collective, 4096), a.name) << spec;
  }
}

TEST(AlgoOverride, UnknownCollectiveIsQuoted) {
  std::string m = ErrorOf("allreduse:ring");
  EXPECT_NE(m.find("unknown collective 'allreduse'"), std::string::npos) << m;
}

TEST(AlgoOverride, UnknownAlgorithmListsKnownOnes) {
  std::string m = ErrorOf("allreduce:0-1K:ring,1K-inf:fastest");
  EXPECT_NE(m.find("unknown algorithm 'fastest'"), std::string::npos) << m;
  EXPECT_NE(m.find("halving_doubling"), std::string::npos) << m;  // a known one is listed
  EXPECT_NE(m.find("tree"), std::string::npos) << m;
  // A name known for another collective only is still unknown here.
  std::string m2 = ErrorOf("broadcast:bruck");
  EXPECT_NE(m2.find("unknown algorithm 'bruck'"), std::string::npos) << m2;
  EXPECT_NE(m2.find("chain"), std::string::npos) << m2;
}

TEST(AlgoOverride, MalformedRangesAreQuoted) {
  for (const char* bad : {"allreduce:64K:ring", "allreduce:x-1M:ring", "allreduce:0-1Q:ring",
                          "allreduce:1.5K-inf:ring", "allreduce:-5-inf:ring"}) {
    std::string m = ErrorOf(bad);
    EXPECT_NE(m.find("malformed size range"), std::string::npos) << bad << ": " << m;
  }
  std::string m = ErrorOf("allreduce:12Q-inf:ring");
  EXPECT_NE(m.find("'12Q-inf'"), std::string::npos) << m;
}

TEST(AlgoOverride, EmptyOrBackwardRange) {
  std::string m = ErrorOf("allreduce:1M-64K:ring");
  EXPECT_NE(m.find("'1M-64K'"), std::string::npos) << m;
  EXPECT_NE(m.find("LO must be below HI"), std::string::npos) << m;
  EXPECT_FALSE(ErrorOf("allreduce:64K-64K:ring").empty());
  EXPECT_FALSE(ErrorOf("allreduce:inf-inf:ring").empty());
}

TEST(AlgoOverride, OverlappingRanges) {
  std::string m = ErrorOf("allreduce:0-1M:ring,512K-inf:tree");
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  // Across rules for the same collective, too.
  std::string m2 = ErrorOf("allreduce:0-1M:ring;allreduce:tree");
  EXPECT_NE(m2.find("overlap"), std::string::npos) << m2;
  // Touching ranges do not overlap; different collectives never do.
  MustParse("allreduce:0-1M:ring,1M-inf:tree;allgather:ring");
}

TEST(AlgoOverride, MissingPieces) {
  EXPECT_NE(ErrorOf("allreduce").find("COLLECTIVE:ALGORITHM"), std::string::npos);
  EXPECT_NE(ErrorOf("allreduce:").find("missing algorithm name"), std::string::npos);
  EXPECT_NE(ErrorOf("allreduce:0-1K:").find("missing algorithm name"), std::string::npos);
  EXPECT_NE(ErrorOf("allreduce:ring,").find("missing algorithm name"), std::string::npos);
}

}  // namespace
}  // namespace weft
