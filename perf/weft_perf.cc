// weft-perf — nccl-tests-shaped sweeps of weft's collectives (bin/weft-perf).
//
// Ranks: one per process from the launcher's environment (weftrun, torchrun, Slurm, Open MPI;
// weftCommInitFromEnv), or -t N ranks as threads of this process (weftCommInitAll), or a
// single rank when no launcher variable is set. The sweep, the exact check and the table are
// perf/perf_driver.h, shared with the peers (gloo-perf, mpi-perf, nccl-perf) so rows pair up.
// --algo SPEC sets WEFT_ALGO before the communicator exists (algorithms/algo_override.h).
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "perf/perf_driver.h"
#include "weft/weft.h"

namespace {

// perf_dtype_t / perf_op_t mirror weft's enums, so a cast converts them.
static_assert(static_cast<int>(PERF_HALF) == static_cast<int>(weftFloat16) &&
                  static_cast<int>(PERF_FLOAT) == static_cast<int>(weftFloat) &&
                  static_cast<int>(PERF_BF16) == static_cast<int>(weftBfloat16) &&
                  static_cast<int>(PERF_UINT64) == static_cast<int>(weftUint64) &&
                  static_cast<int>(PERF_DOUBLE) == static_cast<int>(weftDouble),
              "perf_dtype_t mirrors weftDataType_t");
static_assert(static_cast<int>(PERF_AVG) == static_cast<int>(weftAvg) &&
                  static_cast<int>(PERF_MIN) == static_cast<int>(weftMin) &&
                  static_cast<int>(PERF_PROD) == static_cast<int>(weftProd),
              "perf_op_t mirrors weftRedOp_t");

struct WeftContext {
  weftComm_t comm = nullptr;
  std::string last_algorithm = "-";  // of the last measured collective (not of bookkeeping calls)
};

weftComm_t Comm(perf_backend_t* b) { return static_cast<WeftContext*>(b->ctx)->comm; }

// The algorithm weft ran for the row's collective (WEFT_ALGO or the selector's choice),
// recorded right after the measured call: the driver's own timing reductions run later.
const char* WeftAlgorithmName(perf_backend_t* b, perf_coll_t coll, size_t bytes) {
  (void)coll;
  (void)bytes;
  return static_cast<WeftContext*>(b->ctx)->last_algorithm.c_str();
}

void RecordAlgorithm(perf_backend_t* b) {
  const char* name = nullptr;
  bool known = weftCommGetLastAlgorithm(Comm(b), &name) == weftSuccess && name != nullptr && *name != '\0';
  static_cast<WeftContext*>(b->ctx)->last_algorithm = known ? name : "-";  // "-": nothing ran (count 0)
}

int Fail(weftResult_t r, weftComm_t comm, const char* what, char* err, size_t errlen) {
  if (r == weftSuccess) return 0;
  snprintf(err, errlen, "%s: %s (%s)", what, weftGetErrorString(r), weftGetLastError(comm));
  return 1;
}

int WeftRunCollective(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv,
                      size_t count, perf_dtype_t dtype, perf_op_t op, int root, char* err,
                      size_t errlen) {
  weftComm_t comm = Comm(b);
  auto t = static_cast<weftDataType_t>(dtype);
  auto o = static_cast<weftRedOp_t>(op);
  switch (coll) {
    case PERF_ALLREDUCE:
      return Fail(weftAllReduce(send, recv, count, t, o, comm, nullptr), comm, "weftAllReduce",
                  err, errlen);
    case PERF_ALLGATHER:
      return Fail(weftAllGather(send, recv, count, t, comm, nullptr), comm, "weftAllGather", err,
                  errlen);
    case PERF_REDUCESCATTER:
      return Fail(weftReduceScatter(send, recv, count, t, o, comm, nullptr), comm,
                  "weftReduceScatter", err, errlen);
    case PERF_ALLTOALL:
      return Fail(weftAllToAll(send, recv, count, t, comm, nullptr), comm, "weftAllToAll", err,
                  errlen);
    case PERF_BROADCAST:
      return Fail(weftBroadcast(send, recv, count, t, root, comm, nullptr), comm,
                  "weftBroadcast", err, errlen);
    case PERF_REDUCE:
      return Fail(weftReduce(send, recv, count, t, o, root, comm, nullptr), comm, "weftReduce",
                  err, errlen);
    case PERF_SENDRECV: {
      // Ring exchange as nccl-tests: send to rank+1, receive from rank-1, grouped so the
      // matched pair cannot deadlock.
      int n = b->nranks, r = b->rank;
      weftResult_t rc = weftGroupStart();
      if (rc == weftSuccess) rc = weftSend(send, count, t, (r + 1) % n, comm, nullptr);
      weftResult_t rc2 = weftRecv(recv, count, t, (r + n - 1) % n, comm, nullptr);
      weftResult_t rc3 = weftGroupEnd();
      if (rc == weftSuccess) rc = rc2;
      if (rc == weftSuccess) rc = rc3;
      return Fail(rc, comm, "weftSend/weftRecv", err, errlen);
    }
    default:
      snprintf(err, errlen, "unknown collective %d", static_cast<int>(coll));
      return 1;
  }
}

int WeftRun(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv, size_t count,
            perf_dtype_t dtype, perf_op_t op, int root, char* err, size_t errlen) {
  int rc = WeftRunCollective(b, coll, send, recv, count, dtype, op, root, err, errlen);
  if (rc == 0 && coll != PERF_SENDRECV) RecordAlgorithm(b);
  return rc;
}

int WeftBarrier(perf_backend_t* b) { return weftBarrier(Comm(b), nullptr) != weftSuccess; }

int WeftMaxDouble(perf_backend_t* b, double* v) {
  return weftAllReduce(v, v, 1, weftDouble, weftMax, Comm(b), nullptr) != weftSuccess;
}

int WeftSumInt64(perf_backend_t* b, int64_t* v) {
  return weftAllReduce(v, v, 1, weftInt64, weftSum, Comm(b), nullptr) != weftSuccess;
}

std::string Description() {
  int version = 0;
  weftGetVersion(&version);
  std::string d = "weft " + std::to_string(version / 10000) + "." +
                  std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  const char* algo = getenv("WEFT_ALGO");
  d += std::string(", WEFT_ALGO=") + (algo && *algo ? algo : "(selector)");
  return d;
}

perf_backend_t MakeBackend(WeftContext* ctx, const std::string& description) {
  perf_backend_t b;
  memset(&b, 0, sizeof b);
  b.name = "weft";
  b.ctx = ctx;
  weftCommUserRank(ctx->comm, &b.rank);
  weftCommCount(ctx->comm, &b.nranks);
  b.run = WeftRun;
  b.barrier = WeftBarrier;
  b.allreduce_max_double = WeftMaxDouble;
  b.allreduce_sum_int64 = WeftSumInt64;
  b.algo_name = WeftAlgorithmName;
  b.description = description.c_str();
  return b;
}

bool LauncherEnvironmentSet() {
  for (const char* v : {"WEFT_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})
    if (getenv(v)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  perf_options_t o;
  int prc = perf_parse_options(argc, argv, &o);
  if (prc != 0) return prc > 0 ? 0 : 2;
  if (o.algo) setenv("WEFT_ALGO", o.algo, 1);
  const std::string description = Description();

  if (o.threads > 0) {
    std::vector<weftComm_t> comms(o.threads);
    weftResult_t r = weftCommInitAll(comms.data(), o.threads, nullptr);
    if (r != weftSuccess) {
      fprintf(stderr, "weft-perf: weftCommInitAll(%d): %s: %s\n", o.threads,
              weftGetErrorString(r), weftGetLastError(nullptr));
      return 2;
    }
    std::vector<WeftContext> ctxs(o.threads);
    std::vector<int> rcs(o.threads, 0);
    std::vector<std::thread> threads;
    for (int i = 0; i < o.threads; ++i) {
      ctxs[i].comm = comms[i];
      threads.emplace_back([&, i] {
        perf_backend_t b = MakeBackend(&ctxs[i], description);
        rcs[i] = perf_run(&b, &o);
      });
    }
    for (auto& t : threads) t.join();
    int rc = 0;
    for (int i = 0; i < o.threads; ++i) {
      if (rcs[i] > rc) rc = rcs[i];
      // A failed rank may leave peers mid-collective: abort rather than wait on them.
      if (rc == 2)
        weftCommAbort(comms[i]);
      else
        weftCommDestroy(comms[i]);
    }
    return rc;
  }

  WeftContext ctx;
  weftResult_t r = LauncherEnvironmentSet() ? weftCommInitFromEnv(&ctx.comm)
                                            : weftCommInitAll(&ctx.comm, 1, nullptr);
  if (r != weftSuccess) {
    fprintf(stderr, "weft-perf: communicator init: %s: %s\n", weftGetErrorString(r),
            weftGetLastError(nullptr));
    return 2;
  }
  perf_backend_t b = MakeBackend(&ctx, description);
  int rc = perf_run(&b, &o);
  if (rc == 2)
    weftCommAbort(ctx.comm);
  else
    weftCommDestroy(ctx.comm);
  return rc;
}
