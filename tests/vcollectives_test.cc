// weftAllGatherV / weftReduceScatterV (per-rank counts):
//  - every v-collective schedule is proved by the checker for 1-9 ranks with zero, equal,
//    uneven and very uneven count tables, packed and gapped/reordered displacements, chunked
//    and not, in place and out of place;
//  - exact results over threads (1-5 ranks, every dtype and op sampled, in place and out of
//    place, gaps between allgatherv blocks left untouched) and over processes on every
//    transport (shm, tcp, ucx where built);
//  - bad arguments fail with a message naming the argument; ranks passing different counts
//    fail on every rank (and the communicator stays usable).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/registry.h"
#include "check/checker.h"
#include "test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using weft_test::Load;
using weft_test::Store;

// Count tables of p ranks: all zero, equal, uneven with zeros, one rank holding almost all.
std::vector<std::vector<size_t>> CountTables(int p) {
  std::vector<std::vector<size_t>> tables(4, std::vector<size_t>(p));
  for (int q = 0; q < p; ++q) {
    tables[1][q] = 5;
    tables[2][q] = static_cast<size_t>((q * 7 + 3) % 5) * 3;  // 9, 0, 6, 12, 3, ...
    tables[3][q] = q == p / 2 ? 1000 : q % 2;
  }
  return tables;
}

// Packed displacements (prefix sums), or blocks in reverse rank order with a gap of 2 before
// each (allgatherv's output may be laid out any way).
std::vector<size_t> Displs(const std::vector<size_t>& counts, bool gapped) {
  std::vector<size_t> d(counts.size());
  size_t at = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const size_t q = gapped ? counts.size() - 1 - k : k;
    at += gapped ? 2 : 0;
    d[q] = at;
    at += counts[q];
  }
  return d;
}

TEST(VCollectiveProof, CheckerProvesEveryAlgorithm) {
  int proved = 0;
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective != Collective::kAllGatherV && a.collective != Collective::kReduceScatterV)
      continue;
    for (int p = 1; p <= 9; ++p)
      for (const std::vector<size_t>& counts : CountTables(p))
        for (bool gapped : {false, true})
          for (size_t chunk : {size_t{0}, size_t{4}}) {
            if (gapped && a.collective == Collective::kReduceScatterV) continue;
            ScheduleRequest r;
            r.collective = a.collective;
            r.nranks = p;
            r.v_counts = counts;
            r.v_displs = Displs(counts, gapped);
            r.chunk.chunk_elems = chunk;
            r.chunk.channels = chunk ? 2 : 1;
            if (!a.applicable(r)) continue;
            Status st = ProveAlgorithm(a, r);
            EXPECT_TRUE(st.ok()) << CollectiveName(a.collective) << " " << a.name << " p=" << p
                                 << " counts[0]=" << counts[0] << " gapped=" << gapped
                                 << " chunk=" << chunk << ": " << st.message();
            ++proved;
          }
  }
  EXPECT_GE(proved, 2 * 9 * 4 * 2) << "both ring schedules must be registered and proved";
}

// A wrong table is refused by the generator (the API checks first; this is the schedule's own
// guard).
TEST(VCollectiveProof, GeneratorsRefuseTablesOfTheWrongSize) {
  for (Collective c : {Collective::kAllGatherV, Collective::kReduceScatterV}) {
    const AlgorithmInfo* ring = FindAlgorithm(c, "ring");
    ASSERT_NE(ring, nullptr) << CollectiveName(c);
    ScheduleRequest r;
    r.collective = c;
    r.nranks = 3;
    r.v_counts = {1, 2};
    r.v_displs = {0, 1};
    StatusOr<Schedule> s = BuildSchedule(*ring, r);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("3 counts"), std::string::npos) << s.status().message();
  }
}

// allgatherv's element i of rank q's block: small integers, exact in every dtype.
double GatherValue(int q, size_t i) { return static_cast<double>((q * 7 + static_cast<int>(i)) % 61); }
constexpr double kGap = 99;  // what allgatherv must leave between blocks

// One allgatherv on `comm`; "" or what went wrong.
std::string RunAllGatherV(weftComm_t comm, int rank, int p, weftDataType_t t,
                          const std::vector<size_t>& counts, bool gapped, bool in_place) {
  const size_t elem = weftTypeSize(t);
  const std::vector<size_t> displs = Displs(counts, gapped);
  size_t extent = 0;
  for (int q = 0; q < p; ++q) extent = std::max(extent, displs[q] + counts[q]);
  std::vector<unsigned char> out((extent + 1) * elem), in((counts[rank] + 1) * elem);
  for (size_t i = 0; i < extent; ++i) Store(out.data(), t, i, kGap);
  unsigned char* send = in_place ? out.data() + displs[rank] * elem : in.data();
  for (size_t i = 0; i < counts[rank]; ++i) Store(send, t, i, GatherValue(rank, i));
  if (weftAllGatherV(send, counts[rank], out.data(), counts.data(), displs.data(), t, comm, nullptr) !=
      weftSuccess)
    return std::string("weftAllGatherV failed: ") + weftGetLastError(comm);
  for (size_t i = 0; i < extent; ++i) {
    double want = kGap;
    for (int q = 0; q < p; ++q)
      if (i >= displs[q] && i < displs[q] + counts[q]) want = GatherValue(q, i - displs[q]);
    if (Load(out.data(), t, i) != want)
      return "allgatherv " + weft_test::TypeName(t) + (in_place ? " in place" : "") + " rank " +
             std::to_string(rank) + ": output[" + std::to_string(i) + "] = " +
             std::to_string(Load(out.data(), t, i)) + ", expected " + std::to_string(want);
  }
  return "";
}

// One reduce-scatterv on `comm`; "" or what went wrong.
std::string RunReduceScatterV(weftComm_t comm, int rank, int p, weftDataType_t t, weftRedOp_t op,
                              const std::vector<size_t>& counts, bool in_place) {
  const size_t elem = weftTypeSize(t);
  size_t total = 0, mine = 0;
  for (int q = 0; q < p; ++q) {
    if (q == rank) mine = total;
    total += counts[q];
  }
  std::vector<unsigned char> in((total + 1) * elem), out((counts[rank] + 1) * elem);
  weft_test::FillInputs(in.data(), t, op, rank, total);
  unsigned char* recv = in_place ? in.data() + mine * elem : out.data();
  if (weftReduceScatterV(in.data(), recv, counts.data(), t, op, comm, nullptr) != weftSuccess)
    return std::string("weftReduceScatterV failed: ") + weftGetLastError(comm);
  std::string bad = weft_test::CheckReduced(recv, t, op, p, counts[rank], mine);
  return bad.empty() ? "" : "reducescatterv " + weft_test::TypeName(t) + " " + weft_test::OpName(op) +
                                (in_place ? " in place" : "") + " rank " + std::to_string(rank) +
                                ": " + bad;
}

// Every table, both placements, a sample of dtypes x ops (each dtype and each op at least once).
std::string RunSweep(weftComm_t comm, int rank, int p) {
  const std::vector<weftDataType_t>& types = weft_test::AllTypes();
  const std::vector<weftRedOp_t>& ops = weft_test::AllOps();
  size_t k = 0;
  for (const std::vector<size_t>& counts : CountTables(p))
    for (bool in_place : {false, true})
      for (size_t j = 0; j < std::max(types.size(), ops.size()); ++j, ++k) {
        const weftDataType_t t = types[(j + k) % types.size()];
        const weftRedOp_t op = ops[j % ops.size()];
        std::string bad = RunAllGatherV(comm, rank, p, t, counts, k % 2 == 1, in_place);
        if (bad.empty()) bad = RunReduceScatterV(comm, rank, p, t, op, counts, in_place);
        if (!bad.empty()) return bad;
      }
  const char* algo = nullptr;
  if (weftCommGetLastAlgorithm(comm, &algo) != weftSuccess || algo == nullptr || std::string(algo) != "ring")
    return std::string("last algorithm: ") + (algo ? algo : "(none)") + ", expected ring";
  return "";
}

TEST(VCollectives, ExactOverThreadsOneToFiveRanks) {
  for (int p = 1; p <= 5; ++p) {
    std::string bad = weft_test::RunRanks(p, [p](weftComm_t comm, int rank) { return RunSweep(comm, rank, p); });
    EXPECT_EQ(bad, "") << p << " ranks";
  }
}

TEST(VCollectives, ExactOverEveryProcessTransport) {
  if (weft_test::kBuiltWithThreadSanitizer) GTEST_SKIP() << "forks after threads start (TSan cannot)";
  for (const std::string& transport : weft_test::ProcessTransports()) {
    for (int p : {2, 3}) {
      weft_test::LaunchOutcome o = weft_test::ForkRanks(
          p,
          [p](int rank) {
            weftComm_t comm = nullptr;
            if (weftCommInitFromEnv(&comm) != weftSuccess) {
              fprintf(stderr, "init failed: %s\n", weftGetLastError(nullptr));
              return 2;
            }
            std::string bad = RunSweep(comm, rank, p);
            if (!bad.empty()) fprintf(stderr, "%s\n", bad.c_str());
            weftCommDestroy(comm);
            return bad.empty() ? 0 : 1;
          },
          weft_test::TransportEnv(transport), 120);
      ASSERT_FALSE(o.timed_out) << transport << " p=" << p << "\n" << weft_test::AllOutput(o);
      for (int r = 0; r < p; ++r)
        EXPECT_TRUE(weft_test::ExitedZero(o.status[r]))
            << transport << " p=" << p << " rank " << r << "\n" << weft_test::AllOutput(o);
    }
  }
}

// The call fails with weftInvalidArgument and a message holding `needle`.
std::string ExpectRefused(weftResult_t r, weftComm_t comm, const std::string& needle) {
  if (r != weftInvalidArgument) return "returned " + std::to_string(r) + " for " + needle;
  const std::string msg = weftGetLastError(comm);
  return msg.find(needle) != std::string::npos ? "" : "message '" + msg + "' lacks '" + needle + "'";
}

TEST(VCollectives, BadArgumentsAreRefusedNamingThem) {
  std::string bad = weft_test::RunRanks(2, [](weftComm_t comm, int rank) {
    std::vector<float> in(64), out(64);
    const size_t counts[2] = {3, 4}, displs[2] = {0, 3};
    const size_t huge = SIZE_MAX / 2 + 1;
    const size_t wrapping[2] = {huge, huge}, overlapping_displs[2] = {0, 2};
    const size_t big[2] = {SIZE_MAX / 4, 1};  // x 4 bytes overflows
    const size_t mine = counts[rank];
    std::vector<std::string> fails = {
        ExpectRefused(weftAllGatherV(in.data(), mine, out.data(), nullptr, displs, weftFloat32, comm, nullptr),
                      comm, "recvcounts is NULL"),
        ExpectRefused(weftAllGatherV(in.data(), mine, out.data(), counts, nullptr, weftFloat32, comm, nullptr),
                      comm, "displs is NULL"),
        ExpectRefused(weftAllGatherV(in.data(), mine + 1, out.data(), counts, displs, weftFloat32, comm, nullptr),
                      comm, "sendcount=" + std::to_string(mine + 1)),
        ExpectRefused(weftAllGatherV(in.data(), mine, out.data(), counts, overlapping_displs, weftFloat32, comm,
                                     nullptr),
                      comm, "overlap"),
        ExpectRefused(weftAllGatherV(in.data(), big[rank], out.data(), big, displs, weftFloat32, comm, nullptr),
                      comm, "recvcounts[0]"),
        ExpectRefused(weftAllGatherV(nullptr, mine, out.data(), counts, displs, weftFloat32, comm, nullptr),
                      comm, "sendbuff is NULL"),
        ExpectRefused(weftAllGatherV(in.data(), mine, out.data(), counts, displs, static_cast<weftDataType_t>(77),
                                     comm, nullptr),
                      comm, "77"),
        ExpectRefused(weftReduceScatterV(in.data(), out.data(), nullptr, weftFloat32, weftSum, comm, nullptr),
                      comm, "recvcounts is NULL"),
        ExpectRefused(weftReduceScatterV(in.data(), out.data(), wrapping, weftFloat32, weftSum, comm, nullptr),
                      comm, "recvcounts[0]"),
        ExpectRefused(weftReduceScatterV(in.data(), out.data(), counts, weftFloat32, static_cast<weftRedOp_t>(42),
                                         comm, nullptr),
                      comm, "op=42"),
        ExpectRefused(weftReduceScatterV(nullptr, out.data(), counts, weftFloat32, weftSum, comm, nullptr),
                      comm, "sendbuff is NULL"),
        ExpectRefused(weftReduceScatterV(in.data(), out.data(), counts, weftFloat32, weftSum, nullptr, nullptr),
                      nullptr, "comm is NULL"),
    };
    for (const std::string& f : fails)
      if (!f.empty()) return "rank " + std::to_string(rank) + ": " + f;
    // The refused calls ran nothing: the communicator still works.
    return RunAllGatherV(comm, rank, 2, weftFloat32, {3, 4}, false, false);
  });
  EXPECT_EQ(bad, "");
}

// Ranks passing different count tables: every rank fails (no rank returns data built from
// another table), naming recvcounts, and the next agreeing call works.
TEST(VCollectives, MismatchedCountsFailOnEveryRank) {
  for (Collective c : {Collective::kAllGatherV, Collective::kReduceScatterV}) {
    std::string bad = weft_test::RunRanks(3, [c](weftComm_t comm, int rank) -> std::string {
      std::vector<size_t> counts = {2, 3, 4};
      if (rank == 1) counts = {2, 4, 3};  // same total, different split
      const std::vector<size_t> displs = {0, 2, 6};
      std::vector<float> in(16, 1.0f), out(16, 0.0f);
      weftResult_t r = c == Collective::kAllGatherV
                           ? weftAllGatherV(in.data(), counts[rank], out.data(), counts.data(), displs.data(),
                                            weftFloat32, comm, nullptr)
                           : weftReduceScatterV(in.data(), out.data(), counts.data(), weftFloat32, weftSum,
                                                comm, nullptr);
      if (r == weftSuccess) return "rank " + std::to_string(rank) + " succeeded with mismatched recvcounts";
      const std::string msg = weftGetLastError(comm);
      if (msg.find("recvcounts") == std::string::npos)
        return "rank " + std::to_string(rank) + ": message lacks recvcounts: " + msg;
      return c == Collective::kAllGatherV ? RunAllGatherV(comm, rank, 3, weftInt32, {1, 0, 2}, true, true)
                                          : RunReduceScatterV(comm, rank, 3, weftInt32, weftMax, {1, 0, 2}, true);
    });
    EXPECT_EQ(bad, "") << CollectiveName(c);
  }
}

}  // namespace
}  // namespace weft
