// The executor's kernel-backend seam (Core v2, item 1): local steps and the reductions of
// received chunks go through a KernelBackend with asynchronous completion, like a transport
// request. A backend that completes late (as a CUDA stream would) must give the same bytes as
// the CPU backend, which completes at issue: this test runs every flat algorithm's real
// schedule both ways and compares. The deferred backend runs each kernel only on its second
// poll, so a step that read a kernel's destination before the executor saw it complete (a
// hazard the executor failed to hold) would read stale data and the outputs would differ.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "exec/executor.h"
#include "kernels/kernel_backend.h"
#include "transports/inproc/inproc_transport.h"

namespace weft {
namespace {

// Runs each kernel on the CPU at its second Poll; optionally fails the n-th kernel it runs.
class DeferredBackend final : public KernelBackend {
 public:
  explicit DeferredBackend(int fail_at = -1) : fail_at_(fail_at) {}
  const char* name() const override { return "deferred-test"; }
  bool Supports(MemKind kind) const override { return kind != MemKind::kCudaDevice; }
  Status Copy(const MemRef& dst, const MemRef& src, KernelRequest* req) override {
    return Defer(req, [=](KernelRequest* r) { return CpuKernelBackend().Copy(dst, src, r); });
  }
  Status Reduce(const MemRef& dst, const MemRef& a, const MemRef& b, size_t count,
                weftDataType_t dtype, weftRedOp_t op, KernelRequest* req) override {
    return Defer(req, [=](KernelRequest* r) {
      return CpuKernelBackend().Reduce(dst, a, b, count, dtype, op, r);
    });
  }
  Status Finalize(const MemRef& dst, size_t count, weftDataType_t dtype, weftRedOp_t op,
                  int divisor, KernelRequest* req) override {
    return Defer(req, [=](KernelRequest* r) {
      return CpuKernelBackend().Finalize(dst, count, dtype, op, divisor, r);
    });
  }
  Status Cast(const MemRef& dst, weftDataType_t dst_type, const MemRef& src,
              weftDataType_t src_type, size_t count, KernelRequest* req) override {
    return Defer(req, [=](KernelRequest* r) {
      return CpuKernelBackend().Cast(dst, dst_type, src, src_type, count, r);
    });
  }
  // Memory from the CPU backend (scratch and landing buffers are host memory here).
  StatusOr<MemRef> Allocate(size_t bytes, MemKind kind, int device) override {
    return CpuKernelBackend().Allocate(bytes, kind, device);
  }
  void Release(const MemRef& mem) override { CpuKernelBackend().Release(mem); }
  bool Poll(KernelRequest* req) override {
    auto it = pending_.find(req);
    if (it == pending_.end()) return req->done;
    if (++it->second.polls < 2) return false;
    Status st = ++ran_ == fail_at_ ? InternalError("injected kernel failure") : it->second.run(req);
    if (!st.ok()) req->Complete(st);
    pending_.erase(it);
    return req->done;
  }
  int launched() const { return launched_; }
  size_t outstanding() const { return pending_.size(); }

 private:
  struct Pending {
    std::function<Status(KernelRequest*)> run;
    int polls = 0;
  };
  Status Defer(KernelRequest* req, std::function<Status(KernelRequest*)> run) {
    ++launched_;
    pending_[req] = Pending{std::move(run), 0};
    return OkStatus();
  }
  std::map<KernelRequest*, Pending> pending_;
  int launched_ = 0, ran_ = 0;
  const int fail_at_;
};

struct RunResult {
  std::vector<Status> status;
  std::vector<std::vector<float>> out;
  int kernels = 0;       // kernels the deferred backends launched (all ranks)
  size_t leftover = 0;   // kernels still pending after the run
};

// Runs `s` on threads over the inproc transport, float32 sum, input of rank r = r + 1 + i/2;
// `deferred` gives every rank a DeferredBackend (failing its `fail_at`-th kernel on rank 0).
RunResult Execute(const Schedule& s, bool deferred, int fail_at = -1, double timeout_s = 20) {
  const int p = s.nranks;
  auto hub = std::make_shared<InprocHub>(p);
  RunResult res;
  res.status.resize(p);
  res.out.resize(p);
  std::vector<std::unique_ptr<DeferredBackend>> backends(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    res.out[r].assign(s.ranks[r].output_count, -1.0f);
    backends[r] = std::make_unique<DeferredBackend>(r == 0 ? fail_at : -1);
    threads.emplace_back([&, r] {
      InprocTransport t(hub, r);
      std::vector<Transport*> peers(p, &t);
      std::vector<float> in(s.ranks[r].input_count);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1) + 0.5f * i;
      ScratchBuffer heap;
      ExecContext ctx;
      ctx.rank = r;
      ctx.nranks = p;
      ctx.tag = 11;
      ctx.timeout_s = timeout_s;
      ctx.peer_transport = &peers;
      ctx.scratch = &heap;
      ctx.what = "kernel backend test";
      if (deferred) ctx.kernels = backends[r].get();
      ExecBuffers b;
      b.input = in.data();
      b.output = res.out[r].data();
      res.status[r] = ExecuteSchedule(s.ranks[r], s.window, ctx, b);
      if (!res.status[r].ok()) t.Abort(res.status[r]);
    });
  }
  for (auto& th : threads) th.join();
  for (auto& b : backends) {
    res.kernels += b->launched();
    res.leftover += b->outstanding();
  }
  return res;
}

bool RunsOnTheExecutorAlone(const AlgorithmInfo& a) {
  // Direct algorithms need a shared-memory window (not on the inproc transport); all-to-allv
  // needs per-pair counts; the rest take a plain request.
  return a.collective != Collective::kAllToAllv;
}

TEST(ExecutorKernelBackend, DeferredKernelsGiveTheCpuBackendsBytesForEveryAlgorithm) {
  int algorithms = 0;
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (!RunsOnTheExecutorAlone(a)) continue;
    for (int p : {3, 4}) {
      ScheduleRequest req;
      req.collective = a.collective;
      req.nranks = p;
      req.count = 1000;
      req.root = p - 1;
      req.chunk.chunk_elems = 128;  // several chunks: pipelined steps overlap
      if (!a.applicable(req)) continue;
      StatusOr<Schedule> s = a.build(req);
      ASSERT_TRUE(s.ok()) << a.name << ": " << s.status().message();
      SCOPED_TRACE(a.name + " p=" + std::to_string(p));
      RunResult cpu = Execute(*s, false);
      RunResult late = Execute(*s, true);
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(cpu.status[r].ok()) << cpu.status[r].message();
        ASSERT_TRUE(late.status[r].ok()) << late.status[r].message();
        ASSERT_EQ(cpu.out[r].size(), late.out[r].size());
        EXPECT_EQ(0, std::memcmp(cpu.out[r].data(), late.out[r].data(), cpu.out[r].size() * sizeof(float)))
            << "rank " << r << ": output differs when kernels complete late";
      }
      EXPECT_EQ(late.leftover, 0u) << "kernels still pending after the collective returned";
      if (late.kernels > 0) ++algorithms;
    }
  }
  // The seam must carry real work: most schedules copy or reduce locally.
  EXPECT_GE(algorithms, 10) << "too few schedules ran any kernel through the backend";
}

// Every rank's steps of a ring allreduce of `count` float32 over p ranks.
StatusOr<Schedule> RingAllReduce(int p, size_t count) {
  const AlgorithmInfo* ring = FindAlgorithm(Collective::kAllReduce, "ring");
  if (ring == nullptr) return InternalError("no ring allreduce registered");
  ScheduleRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = p;
  req.count = count;
  return ring->build(req);
}

TEST(ExecutorKernelBackend, AFailedKernelFailsTheCallNamingTheStep) {
  StatusOr<Schedule> s = RingAllReduce(3, 999);
  ASSERT_TRUE(s.ok()) << s.status().message();
  RunResult late = Execute(*s, true, /*fail_at=*/2, /*timeout_s=*/1);
  ASSERT_FALSE(late.status[0].ok());
  EXPECT_NE(late.status[0].message().find("injected kernel failure"), std::string::npos)
      << late.status[0].message();
  EXPECT_NE(late.status[0].message().find("kernel backend test step"), std::string::npos)
      << "the error should name the step: " << late.status[0].message();
  for (int r = 1; r < 3; ++r) EXPECT_FALSE(late.status[r].ok()) << "rank " << r << " returned success";
}

TEST(ExecutorKernelBackend, MemoryTheBackendCannotTouchIsRefusedBeforeAnyStep) {
  StatusOr<Schedule> s = RingAllReduce(1, 16);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> in(16, 1.0f), out(16, 0.0f);
  std::vector<Transport*> peers(1, nullptr);
  ScratchBuffer heap;
  ExecContext ctx;
  ctx.peer_transport = &peers;
  ctx.scratch = &heap;
  ExecBuffers b;
  b.input = in.data();
  b.output = out.data();
  b.kind = MemKind::kCudaDevice;
  b.device = 0;
  Status st = ExecuteSchedule(s->ranks[0], s->window, ctx, b);
  EXPECT_EQ(st.code(), weftInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("cannot access cuda-device memory"), std::string::npos) << st.message();
  EXPECT_EQ(out[0], 0.0f) << "nothing may be written";
}

}  // namespace
}  // namespace weft
