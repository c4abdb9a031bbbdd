// Tests of the direct (same-host, window-based) algorithms: oneshot / twoshot allreduce and
// direct allgather / reduce-scatter / alltoall.
//  - proved by the symbolic checker (src/check) for ranks 1,2,3,4,5,8, counts 0,1,7,1000,1001
//    and several chunk sizes, in-place and out-of-place, avg on (races on windows included:
//    the checker tracks happens-before through signal/wait);
//  - only applicable when every rank is mappable; scratch stays bounded for huge counts;
//  - executed for real by the executor over the shm transport (threads, one transport each)
//    on float data, compared with closed-form results.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "check/checker.h"
#include "exec/executor.h"
#include "transports/shm/shm_transport.h"

namespace weft {
namespace {

struct Algo {
  Collective collective;
  const char* name;
};
const Algo kAlgos[] = {
    {Collective::kAllReduce, "oneshot"},
    {Collective::kAllReduce, "twoshot"},
    {Collective::kAllGather, "direct"},
    {Collective::kReduceScatter, "direct"},
    {Collective::kAllToAll, "direct"},
};

std::string AlgoName(const Algo& a) { return std::string(CollectiveName(a.collective)) + "_" + a.name; }

ScheduleRequest Request(const Algo& a, int p, size_t count, size_t chunk) {
  ScheduleRequest r;
  r.collective = a.collective;
  r.nranks = p;
  r.count = count;
  r.chunk.chunk_elems = chunk;
  r.all_ranks_mappable = true;
  return r;
}

class DirectProof
    : public ::testing::TestWithParam<std::tuple<int, int, size_t, size_t>> {};

TEST_P(DirectProof, CheckerProvesIt) {
  const Algo& a = kAlgos[std::get<0>(GetParam())];
  const int p = std::get<1>(GetParam());
  const size_t count = std::get<2>(GetParam()), chunk = std::get<3>(GetParam());
  const AlgorithmInfo* info = FindAlgorithm(a.collective, a.name);
  ASSERT_NE(info, nullptr) << AlgoName(a) << " is not registered";
  ScheduleRequest req = Request(a, p, count, chunk);
  ASSERT_TRUE(info->applicable(req));
  Status st = ProveAlgorithm(*info, req);
  EXPECT_TRUE(st.ok()) << AlgoName(a) << " p=" << p << " count=" << count << " chunk=" << chunk
                       << ": " << st.message();
}

INSTANTIATE_TEST_SUITE_P(
    AllDirect, DirectProof,
    ::testing::Combine(::testing::Range(0, 5), ::testing::Values(1, 2, 3, 4, 5, 8),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{1001}),
                       ::testing::Values(size_t{0}, size_t{3}, size_t{64})),
    [](const auto& info) {
      return AlgoName(kAlgos[std::get<0>(info.param)]) + "_p" +
             std::to_string(std::get<1>(info.param)) + "_n" +
             std::to_string(std::get<2>(info.param)) + "_c" +
             std::to_string(std::get<3>(info.param));
    });

TEST(DirectAlgorithms, DefaultChunkingProvedAcrossSeveralRounds) {
  // Counts above the default round size (256Ki elements for oneshot/allgather, 256Ki / p for
  // reduce-scatter/alltoall), so the double-buffered slots are reused.
  for (const Algo& a : kAlgos) {
    int p = 2;
    size_t count = a.collective == Collective::kAllReduce || a.collective == Collective::kAllGather
                       ? (size_t{600} << 10) + 3
                       : (size_t{300} << 10) + 5;
    const AlgorithmInfo* info = FindAlgorithm(a.collective, a.name);
    ASSERT_NE(info, nullptr);
    Status st = ProveAlgorithm(*info, Request(a, p, count, 0));
    EXPECT_TRUE(st.ok()) << AlgoName(a) << ": " << st.message();
  }
}

TEST(DirectAlgorithms, OnlyApplicableWhenEveryRankIsMappable) {
  for (const Algo& a : kAlgos) {
    const AlgorithmInfo* info = FindAlgorithm(a.collective, a.name);
    ASSERT_NE(info, nullptr);
    ScheduleRequest req = Request(a, 4, 100, 0);
    req.all_ranks_mappable = false;
    EXPECT_FALSE(info->applicable(req)) << AlgoName(a);
  }
}

TEST(DirectAlgorithms, ScratchStaysBoundedForHugeMessages) {
  // 64 Mi elements (256 MiB of float32): the window must stay <= 4 MiB even for 8-byte types.
  for (const Algo& a : kAlgos) {
    for (int p : {2, 8}) {
      const AlgorithmInfo* info = FindAlgorithm(a.collective, a.name);
      StatusOr<Schedule> s = info->build(Request(a, p, size_t{64} << 20, 0));
      ASSERT_TRUE(s.ok()) << s.status().message();
      for (const RankSchedule& rs : s->ranks)
        EXPECT_LE(rs.scratch_count * 8, size_t{4} << 20) << AlgoName(a) << " p=" << p;
    }
  }
}

TEST(DirectAlgorithms, RejectsBadRankCount) {
  for (const Algo& a : kAlgos) {
    StatusOr<Schedule> s = FindAlgorithm(a.collective, a.name)->build(Request(a, 0, 10, 0));
    EXPECT_EQ(s.status().code(), weftInvalidArgument) << AlgoName(a);
  }
}

// ---- real execution over the shm transport ----

// Minimal in-process bootstrap for ShmTransport::Create.
class ThreadBootstrap {
 public:
  struct Shared {
    explicit Shared(int n) : nranks(n), slots(2, std::vector<std::vector<unsigned char>>(n)) {}
    int nranks;
    std::atomic<int> arrived{0};
    std::vector<std::vector<std::vector<unsigned char>>> slots;
  };
  ThreadBootstrap(Shared* s, int rank) : s_(s), rank_(rank) {}
  int rank() const { return rank_; }
  int nranks() const { return s_->nranks; }
  Status AllGather(const void* mine, size_t bytes, void* all) {
    auto& slot = s_->slots[round_ % 2][rank_];
    slot.assign(static_cast<const unsigned char*>(mine), static_cast<const unsigned char*>(mine) + bytes);
    s_->arrived.fetch_add(1);
    int target = (round_ + 1) * s_->nranks;
    while (s_->arrived.load() < target) std::this_thread::yield();
    for (int r = 0; r < s_->nranks; ++r)
      std::memcpy(static_cast<unsigned char*>(all) + r * bytes, s_->slots[round_ % 2][r].data(), bytes);
    ++round_;
    return OkStatus();
  }

 private:
  Shared* s_;
  int rank_;
  int round_ = 0;
};

// Input of rank r at element i: small integers, exact in float in any summation order.
float InputAt(int r, size_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 17)); }

class DirectExec : public ::testing::TestWithParam<std::tuple<int, int, size_t, bool>> {};

TEST_P(DirectExec, ShmExecutionMatchesClosedForm) {
  const Algo& a = kAlgos[std::get<0>(GetParam())];
  const int p = std::get<1>(GetParam());
  const size_t n = std::get<2>(GetParam());
  const bool in_place = std::get<3>(GetParam());
  const AlgorithmInfo* info = FindAlgorithm(a.collective, a.name);
  ASSERT_NE(info, nullptr);
  StatusOr<Schedule> sched = info->build(Request(a, p, n, 64));  // chunk 64: several rounds
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  ThreadBootstrap::Shared shared(p);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      ThreadBootstrap boot(&shared, r);
      ShmOptions o;
      o.ring_bytes_per_peer = 64 << 10;
      o.initial_window_bytes = 64 << 10;
      auto t = ShmTransport::Create(&boot, [&] { std::vector<int> v; for (int i = 0; i < p; ++i) v.push_back(i); return v; }(), o);
      ASSERT_TRUE(t.ok()) << t.status().message();
      const RankSchedule& rs = sched->ranks[r];
      // Buffers: in-place aliases input with output as NCCL defines it.
      std::vector<float> out(std::max<size_t>(rs.output_count, 1)), in_buf(std::max<size_t>(rs.input_count, 1));
      float* input = in_buf.data();
      if (in_place) {
        if (a.collective == Collective::kAllGather) input = out.data() + r * n;
        else if (a.collective == Collective::kReduceScatter) { out.resize(p * n + 1); input = out.data(); }
        else input = out.data();
      }
      for (size_t i = 0; i < rs.input_count; ++i) input[i] = InputAt(r, i);
      std::vector<Transport*> peers(p, t->get());
      ExecContext ctx;
      ctx.rank = r;
      ctx.nranks = p;
      ctx.dtype = weftFloat32;
      ctx.op = weftSum;
      ctx.tag = 1;
      ctx.timeout_s = 30;
      ctx.peer_transport = &peers;
      ctx.direct = t->get();
      ScratchBuffer heap;
      ctx.scratch = &heap;
      ctx.what = "direct test";
      ExecBuffers bufs;
      bufs.input = input;
      bufs.output = (in_place && a.collective == Collective::kReduceScatter) ? out.data() + r * n : out.data();
      Status st = ExecuteSchedule(rs, sched->window, ctx, bufs);
      if (!st.ok()) {
        ADD_FAILURE() << "rank " << r << ": " << st.message();
        ++failures;
        return;
      }
      const float* res = static_cast<const float*>(bufs.output);
      for (size_t i = 0; i < rs.output_count; ++i) {
        float want = 0;
        switch (a.collective) {
          case Collective::kAllReduce:
            for (int q = 0; q < p; ++q) want += InputAt(q, i);
            break;
          case Collective::kReduceScatter:
            for (int q = 0; q < p; ++q) want += InputAt(q, r * n + i);
            break;
          case Collective::kAllGather: want = InputAt(static_cast<int>(i / n), i % n); break;
          default: want = InputAt(static_cast<int>(i / n), r * n + i % n); break;  // alltoall
        }
        if (res[i] != want) {
          ADD_FAILURE() << AlgoName(a) << " rank " << r << " element " << i << ": " << res[i]
                        << " != " << want;
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    AllDirect, DirectExec,
    ::testing::Combine(::testing::Range(0, 5), ::testing::Values(1, 2, 3, 5, 8),
                       ::testing::Values(size_t{1}, size_t{7}, size_t{1000}),
                       ::testing::Bool()),
    [](const auto& info) {
      return AlgoName(kAlgos[std::get<0>(info.param)]) + "_p" +
             std::to_string(std::get<1>(info.param)) + "_n" +
             std::to_string(std::get<2>(info.param)) + (std::get<3>(info.param) ? "_inplace" : "");
    });

// ---- figures: 2 processes, allreduce float32 over the shm windows ----
// Prints time per call for a tiny (2 floats) and a 64 MiB allreduce with each direct
// algorithm, plus a 64 MiB memcpy as the memory-bandwidth reference. Asserts correctness only.
struct ProcHub {
  std::atomic<int> arrived;
  unsigned char slots[2][2][256];
};
class ProcBootstrap {
 public:
  ProcBootstrap(ProcHub* h, int rank) : h_(h), rank_(rank) {}
  int rank() const { return rank_; }
  int nranks() const { return 2; }
  Status AllGather(const void* mine, size_t bytes, void* all) {
    std::memcpy(h_->slots[round_ % 2][rank_], mine, bytes);
    h_->arrived.fetch_add(1);
    auto start = std::chrono::steady_clock::now();
    while (h_->arrived.load() < (round_ + 1) * 2) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30))
        return TimeoutError("proc bootstrap timed out");
      usleep(50);
    }
    for (int r = 0; r < 2; ++r)
      std::memcpy(static_cast<unsigned char*>(all) + r * bytes, h_->slots[round_ % 2][r], bytes);
    ++round_;
    return OkStatus();
  }

 private:
  ProcHub* h_;
  int rank_;
  int round_ = 0;
};

TEST(DirectPerf, TwoProcessAllReduceFloat32) {
  void* mem = mmap(nullptr, sizeof(ProcHub), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ProcHub* hub = new (mem) ProcHub();
  hub->arrived.store(0);
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] != 0) continue;
    ProcBootstrap boot(hub, r);
    auto t = ShmTransport::Create(&boot, {0, 1}, ShmOptions());
    if (!t.ok()) _exit(1);
    std::vector<Transport*> peers(2, t->get());
    ScratchBuffer heap;
    const size_t big = size_t{16} << 20;  // elements: 64 MiB of float32
    std::vector<float> in(big), out(big);
    for (size_t i = 0; i < big; ++i) in[i] = InputAt(r, i);
    for (const char* algo : {"oneshot", "twoshot"}) {
      const AlgorithmInfo* info = FindAlgorithm(Collective::kAllReduce, algo);
      for (size_t n : {size_t{2}, big}) {
        ScheduleRequest req = Request(Algo{Collective::kAllReduce, algo}, 2, n, 0);
        StatusOr<Schedule> sched = info->build(req);
        if (!sched.ok()) _exit(2);
        ExecContext ctx;
        ctx.rank = r;
        ctx.nranks = 2;
        ctx.peer_transport = &peers;
        ctx.direct = t->get();
        ctx.scratch = &heap;
        ExecBuffers b{in.data(), out.data()};
        int iters = n == big ? 5 : 5000;
        double best = 1e9;
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          auto s0 = std::chrono::steady_clock::now();
          ctx.tag = i;
          if (!ExecuteSchedule(sched->ranks[r], sched->window, ctx, b).ok()) _exit(3);
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
        }
        double avg = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
        for (size_t i = 0; i < n; i += 4097)
          if (out[i] != InputAt(0, i) + InputAt(1, i)) _exit(4);
        if (r == 0)
          fprintf(stderr, "[direct perf] allreduce %-7s %9zu B: avg %10.2f us, best %10.2f us%s\n",
                  algo, n * 4, avg * 1e6, best * 1e6,
                  n == big ? (" = " + std::to_string(n * 4 / best / 1e9) + " GB/s algbw").c_str() : "");
      }
    }
    if (r == 0) {
      double best = 1e9;
      for (int i = 0; i < 4; ++i) {
        auto s0 = std::chrono::steady_clock::now();
        std::memcpy(out.data(), in.data(), big * 4);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
      }
      fprintf(stderr, "[direct perf] memcpy 64 MiB: %.2f GB/s (memory-bandwidth reference)\n",
              big * 4 / best / 1e9);
    }
    _exit(0);
  }
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
  }
  munmap(mem, sizeof(ProcHub));
}

}  // namespace
}  // namespace weft
