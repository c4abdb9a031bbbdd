// Helper for tests/reliability_mismatch_test.cc: one rank of a job whose ranks call
// collectives that do not match (issue 11, defect 1). Launched with the weft environment
// (WEFT_RANK, WEFT_WORLD_SIZE, WEFT_ROOT, ...).
//
//   reliability_mismatch_worker SCENARIO
//
// Each scenario gives rank 0 one call and the other ranks another (`count4`: rank 3 differs;
// `root`, `root64k`, `reduce_root`: rank 1 says it is the root, the others say rank 0). The worker runs one matched allreduce first (so the mismatch is not
// the communicator's first message), then its scenario call, then prints one line:
//   RESULT rank=R code=C check=ok|WRONG|- msg=...
// `check` is the verification of the output when the call returned success: a success with
// wrong data is the defect. Exit code: 0 success, 1 failure, 2 success with wrong data.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace {

struct Call {
  enum Kind { kAllReduce, kBroadcast, kReduce } kind = kAllReduce;
  size_t count = 0;
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
  int root = 0;
};

// This rank's call in `scenario` (rank 0 differs from the others unless said otherwise).
bool ScenarioCall(const std::string& scenario, int rank, Call* c) {
  bool first = rank == 0;
  if (scenario == "count") {  // 1000 vs 2000 elements
    c->count = first ? 1000 : 2000;
  } else if (scenario == "count4") {  // 4 ranks, only rank 3 differs
    c->count = rank == 3 ? 2000 : 1000;
  } else if (scenario == "count_large") {  // 262144 vs 1048576 elements
    c->count = first ? 262144 : 1048576;
  } else if (scenario == "bcast_vs_allreduce") {  // same bytes
    c->count = 4096;
    c->kind = first ? Call::kBroadcast : Call::kAllReduce;
  } else if (scenario == "dtype") {  // float32 vs int32, same bytes
    c->count = 1000;
    c->dtype = first ? weftFloat32 : weftInt32;
  } else if (scenario == "op") {  // sum vs max
    c->count = 1000;
    c->op = first ? weftSum : weftMax;
  } else if (scenario == "root") {  // broadcast: rank 1 says root 1, the others root 0
    c->count = 1000;
    c->kind = Call::kBroadcast;
    c->root = rank == 1 ? 1 : 0;
  } else if (scenario == "root64k") {  // the same with 64K elements (issue 34, defect 1)
    c->count = 65536;
    c->kind = Call::kBroadcast;
    c->root = rank == 1 ? 1 : 0;
  } else if (scenario == "reduce_root") {  // reduce: rank 1 says root 1, the others root 0
    c->count = 1000;
    c->kind = Call::kReduce;
    c->root = rank == 1 ? 1 : 0;
  } else if (scenario == "match") {
    c->count = 1000;
  } else {
    return false;
  }
  return true;
}

double Get(const std::vector<unsigned char>& b, weftDataType_t t, size_t i) {
  if (t == weftInt32) { int32_t v; std::memcpy(&v, &b[i * 4], 4); return v; }
  float v; std::memcpy(&v, &b[i * 4], 4); return v;
}
void Put(std::vector<unsigned char>& b, weftDataType_t t, size_t i, double x) {
  if (t == weftInt32) { int32_t v = static_cast<int32_t>(x); std::memcpy(&b[i * 4], &v, 4); return; }
  float v = static_cast<float>(x); std::memcpy(&b[i * 4], &v, 4);
}

// Runs the call; on success checks the output against what this rank's own call means.
weftResult_t RunCall(weftComm_t comm, const Call& c, int rank, int nranks, std::string* check) {
  std::vector<unsigned char> in(c.count * 4), out(c.count * 4);
  for (size_t i = 0; i < c.count; ++i) {
    Put(in, c.dtype, i, rank + 1 + (i % 7));
    Put(out, c.dtype, i, -12345);  // stale data must not pass for a result
  }
  weftResult_t r = c.kind == Call::kBroadcast
      ? weftBroadcast(in.data(), out.data(), c.count, c.dtype, c.root, comm, nullptr)
      : c.kind == Call::kReduce
      ? weftReduce(in.data(), out.data(), c.count, c.dtype, c.op, c.root, comm, nullptr)
      : weftAllReduce(in.data(), out.data(), c.count, c.dtype, c.op, comm, nullptr);
  if (r != weftSuccess) { *check = "-"; return r; }
  *check = "ok";
  if (c.kind == Call::kReduce && rank != c.root) return r;  // only the root's output is defined
  for (size_t i = 0; i < c.count; ++i) {
    double want;
    if (c.kind == Call::kBroadcast) want = c.root + 1 + (i % 7);
    else if (c.kind == Call::kReduce) want = nranks * (nranks + 1) / 2.0 + nranks * static_cast<double>(i % 7);
    else if (c.op == weftMax) want = nranks + (i % 7);
    else want = nranks * (nranks + 1) / 2.0 + nranks * static_cast<double>(i % 7);
    if (Get(out, c.dtype, i) != want) { *check = "WRONG"; break; }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s SCENARIO\n", argv[0]); return 3; }
  weftComm_t comm;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    printf("INIT-FAILED %s\n", weftGetLastError(nullptr));
    return 3;
  }
  int rank = 0, nranks = 0;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &nranks);
  weftCommSetTimeout(comm, 20);  // a hang shows as a timeout, well inside the test's bound
  Call warmup, call;
  warmup.count = 16;
  std::string check;
  if (RunCall(comm, warmup, rank, nranks, &check) != weftSuccess || check != "ok") {
    printf("WARMUP-FAILED %s\n", weftGetLastError(comm));
    return 3;
  }
  if (!ScenarioCall(argv[1], rank, &call)) { fprintf(stderr, "unknown scenario\n"); return 3; }
  weftResult_t r = RunCall(comm, call, rank, nranks, &check);
  printf("RESULT rank=%d code=%d check=%s msg=%s\n", rank, static_cast<int>(r), check.c_str(),
         r == weftSuccess ? "" : weftGetLastError(comm));
  fflush(stdout);
  weftCommDestroy(comm);
  return r != weftSuccess ? 1 : (check == "ok" ? 0 : 2);
}
