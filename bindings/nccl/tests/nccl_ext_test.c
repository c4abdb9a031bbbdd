/* nccl_ext_test.c: the shim's entry points newer than nccl.h 2.28 (nccl_ext.h), and the
 * calls PyTorch's ProcessGroupNCCL makes at init, on 3 processes: `weftrun -n 3 nccl_ext_test`.
 *
 * Ranks 0 and 1 create a communicator as torch does (ncclGetVersion, a config struct of
 * NCCL 2.30's larger size with blocking = 0, ncclCommGetAsyncError polled until the init is
 * done), check that the polling returns while a collective is in flight (torch's watchdog
 * thread), split it, use a PreMulSum op, suspend and resume it, read its memory statistics;
 * then ranks 0 and 1 grow it with rank 2, a new process, through ncclCommGetUniqueId /
 * ncclCommGrow, and all three allreduce exactly on the grown communicator. Every process
 * checks the refusals (windows, signals, the device API): ncclInvalidUsage and a message
 * naming the function. Host buffers, WEFT_DEVICE=none. The last line is "N passed, M failed"
 * and the exit status is M != 0. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_ext.h"
#include "nccl_test_common.h"

#define REFUSED(call, name)                                                          \
  do {                                                                               \
    ncclResult_t r_ = (call);                                                        \
    CHECK(r_ == ncclInvalidUsage, "%s answered %d, not ncclInvalidUsage", name, r_); \
    CHECK(strstr(ncclGetLastError(NULL), name) != NULL, "message names %s: %s", name, \
          ncclGetLastError(NULL));                                                   \
  } while (0)

static void TestRefusals(ncclComm_t comm) {
  ncclWindow_t win = NULL;
  void* ptr = NULL;
  float x = 1.0f;
  ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
  char reqs[256] = {0}, devcomm[256] = {0}; /* opaque: only their addresses are passed */
  REFUSED(ncclWinGetUserPtr(comm, win, &ptr), "ncclWinGetUserPtr");
  REFUSED(ncclPutSignal(&x, 1, ncclFloat32, 0, win, 0, 0, 0, 0, comm, NULL), "ncclPutSignal");
  REFUSED(ncclSignal(0, 0, 0, 0, comm, NULL), "ncclSignal");
  REFUSED(ncclWaitSignal(1, &desc, comm, NULL), "ncclWaitSignal");
  REFUSED(ncclDevCommCreate(comm, (const struct ncclDevCommRequirements*)reqs,
                            (struct ncclDevComm*)devcomm),
          "ncclDevCommCreate");
  REFUSED(ncclDevCommDestroy(comm, (const struct ncclDevComm*)devcomm), "ncclDevCommDestroy");
  REFUSED(ncclGetLsaMultimemDevicePointer(win, 0, &ptr), "ncclGetLsaMultimemDevicePointer");
  REFUSED(ncclGetPeerDevicePointer(win, 0, 1, &ptr), "ncclGetPeerDevicePointer");
}

/* torch's init: the version first (it gates features: shrink needs >= 2.27, suspend/resume
 * and memory statistics >= 2.29.7, which the shim does not claim), then a non-blocking
 * ncclCommInitRankConfig with a config as large as NCCL 2.30's, polled to completion. */
static ncclComm_t InitLikeTorch(ncclUniqueId id, int rank) {
  int version = 0;
  OK(ncclGetVersion(&version));
  CHECK(version >= NCCL_VERSION(2, 27, 0) && version < NCCL_VERSION(2, 29, 7),
        "version %d: shrink on, suspend/resume off in torch", version);
  union {
    ncclConfig_t config;
    char bytes[sizeof(ncclConfig_t) + 64]; /* a newer nccl.h's fields follow */
  } big;
  memset(&big, 0x5a, sizeof(big));
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  init.blocking = 0;
  init.commName = "torch-like";
  init.splitShare = 0;
  big.config = init;
  big.config.size = sizeof(big);
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &big.config);
  CHECK(r == ncclInProgress || r == ncclSuccess, "init with a 2.30-sized config: %d", r);
  ncclResult_t state = ncclInProgress;
  for (int polls = 0; polls < 30000 && state == ncclInProgress; ++polls) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
    if (state == ncclInProgress) usleep(1000);
  }
  CHECK(state == ncclSuccess, "non-blocking init completed: %d", state);
  return comm;
}

struct Poller {
  ncclComm_t comm;
  volatile int started, done;
  int returned_in_flight, errors;
};

/* torch's watchdog: polls the async error while the main thread is inside a collective. */
static void* Poll(void* arg) {
  struct Poller* p = arg;
  while (!p->done) {
    int started = p->started;
    ncclResult_t state = ncclInternalError;
    if (ncclCommGetAsyncError(p->comm, &state) != ncclSuccess || state != ncclSuccess)
      ++p->errors;
    if (started && !p->done) ++p->returned_in_flight;
    usleep(1000);
  }
  return NULL;
}

static void TestPollDuringCollective(ncclComm_t comm, int rank) {
  float v = (float)(rank + 1), sum = 0.0f;
  if (rank == 1) {
    sleep(1); /* rank 0's allreduce waits for this one: its poller runs meanwhile */
    OK(ncclAllReduce(&v, &sum, 1, ncclFloat32, ncclSum, comm, NULL));
  } else {
    struct Poller p = {comm, 0, 0, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, Poll, &p);
    p.started = 1;
    OK(ncclAllReduce(&v, &sum, 1, ncclFloat32, ncclSum, comm, NULL));
    p.done = 1;
    pthread_join(t, NULL);
    CHECK(p.returned_in_flight >= 5,
          "ncclCommGetAsyncError returned %d times while the allreduce waited", p.returned_in_flight);
    CHECK(p.errors == 0, "%d polls reported an error", p.errors);
  }
  CHECK(sum == 3.0f, "allreduce: %g", sum);
}

/* Split (torch's new_group with a bound device) and PreMulSum (its AVG on some types). */
static void TestSplitAndPreMulSum(ncclComm_t comm, int rank) {
  ncclComm_t sub = NULL;
  OK(ncclCommSplit(comm, 0, 1 - rank, &sub, NULL)); /* same color, reversed order */
  int subrank = -1;
  OK(ncclCommUserRank(sub, &subrank));
  CHECK(subrank == 1 - rank, "split rank %d", subrank);
  float scale = 0.5f, in = (float)(rank + 1) * 2.0f, out = 0.0f;
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat32, ncclScalarHostImmediate, sub));
  OK(ncclAllReduce(&in, &out, 1, ncclFloat32, op, sub, NULL));
  CHECK(out == 3.0f, "premulsum: %g", out);
  OK(ncclRedOpDestroy(op, sub));
  OK(ncclCommDestroy(sub));
}

static void TestSuspendResume(ncclComm_t comm, int rank) {
  uint64_t value = 99;
  OK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &value));
  CHECK(value == 0, "suspended before suspend: %llu", (unsigned long long)value);
  CHECK(ncclCommSuspend(comm, 0x10) == ncclInvalidArgument, "bad suspend flags accepted");
  OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  OK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &value));
  CHECK(value == 1, "suspended: %llu", (unsigned long long)value);
  OK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &value));
  CHECK(value == 0, "weft accounts no device memory per comm: %llu", (unsigned long long)value);
  CHECK(ncclCommMemStats(comm, (ncclCommMemStat_t)7, &value) == ncclInvalidArgument,
        "stat 7 accepted");
  float v = 1.0f;
  CHECK(ncclAllReduce(&v, &v, 1, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidUsage,
        "allreduce on a suspended comm");
  CHECK(strstr(ncclGetLastError(NULL), "suspended") != NULL, "message: %s",
        ncclGetLastError(NULL));
  CHECK(ncclCommSuspend(comm, 0) == ncclInvalidUsage, "suspended twice");
  OK(ncclCommResume(comm));
  CHECK(ncclCommResume(comm) == ncclInvalidUsage, "resumed twice");
  OK(ncclAllReduce(&v, &v, 1, ncclFloat32, ncclSum, comm, NULL));
  CHECK(v == 2.0f, "allreduce after resume: %g", v);
}

/* Grow to 3: rank 0 (the root) makes the id, rank 1 passes NULL, rank 2 joins anew. */
static void TestGrow(ncclComm_t comm, int rank) {
  ncclUniqueId id;
  ncclComm_t grown = NULL;
  if (rank == 0) {
    OK(ncclCommGetUniqueId(comm, &id));
    CHECK(WriteIds(&id, 1, "nccl-ext-test-grow") == 0, "writing the grow id");
  }
  if (rank == 2) {
    CHECK(ReadIds(&id, 1, "nccl-ext-test-grow") == 0, "reading the grow id");
    OK(ncclCommGrow(NULL, 3, &id, 2, &grown, NULL));
  } else {
    OK(ncclCommGrow(comm, 3, rank == 0 ? &id : NULL, -1, &grown, NULL));
  }
  int n = 0, r = -1;
  OK(ncclCommCount(grown, &n));
  OK(ncclCommUserRank(grown, &r));
  CHECK(n == 3 && r == rank, "grown: rank %d of %d", r, n);
  enum { C = 4099 };
  static int32_t in[C], out[C];
  for (int i = 0; i < C; ++i) in[i] = i * 3 + rank * 1000;
  OK(ncclAllReduce(in, out, C, ncclInt32, ncclSum, grown, NULL));
  int bad = 0;
  for (int i = 0; i < C; ++i) bad += out[i] != i * 9 + 3000;
  CHECK(bad == 0, "%d elements wrong after grow", bad);
  if (rank == 0) {
    char path[256];
    IdsPath(path, sizeof(path), "nccl-ext-test-grow");
    unlink(path); /* every rank has read it: all three joined the allreduce */
  }
  OK(ncclCommAbort(grown)); /* torch's shutdown path on error */
}

int main(void) {
  int rank = 0, n = 0;
  if (!RankAndSize(&rank, &n)) return 2;
  if (n != 3) {
    fprintf(stderr, "nccl_ext_test runs on 3 processes (weftrun -n 3), not %d\n", n);
    return 2;
  }
  ncclComm_t comm = NULL;
  if (rank < 2) {
    ncclUniqueId id;
    if (ShareIds(&id, 1, rank, "nccl-ext-test") != 0) {
      fprintf(stderr, "rank %d: no unique id\n", rank);
      return 1;
    }
    comm = InitLikeTorch(id, rank);
    TestPollDuringCollective(comm, rank);
    RemoveIds(rank, "nccl-ext-test");
    TestSplitAndPreMulSum(comm, rank);
    TestSuspendResume(comm, rank);
  }
  TestRefusals(comm);
  TestGrow(comm, rank);
  if (comm != NULL) OK(ncclCommDestroy(comm));
  printf("rank %d: %d passed, %d failed\n", rank, g_passed, g_failed);
  return g_failed != 0;
}
