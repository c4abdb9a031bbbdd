/* nccl_api_test.c: a program written against nccl.h only, run through weft's NCCL shim.
 *
 * Launched as `weftrun -n N nccl_api_test`: the rank and size come from weftrun's
 * WEFT_RANK / WEFT_WORLD_SIZE, and rank 0 hands the unique ids to the others through a file
 * (as an MPI program would broadcast them). Host buffers, NULL stream. Every check prints a
 * line on failure; the last line is "N passed, M failed" and the exit status is M != 0. */
#include <nccl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nccl_test_common.h"

static void TestCollectives(ncclComm_t comm, int rank, int n) {
  enum { C = 1000 };
  float* fs = malloc(sizeof(float) * C * n);
  float* fr = malloc(sizeof(float) * C * n);
  for (int i = 0; i < C; ++i) fs[i] = (float)(rank + 1) * 0.25f + (float)i;
  OK(ncclAllReduce(fs, fr, C, ncclFloat32, ncclSum, comm, NULL));
  CHECK(fr[7] == n * 7.0f + 0.25f * n * (n + 1) / 2, "allreduce sum: %g", fr[7]);
  int32_t im = rank * 3 - 5, imr = 0;
  OK(ncclAllReduce(&im, &imr, 1, ncclInt32, ncclMax, comm, NULL));
  CHECK(imr == (n - 1) * 3 - 5, "allreduce max: %d", imr);
  double d = rank + 1.0;
  OK(ncclAllReduce(&d, &d, 1, ncclFloat64, ncclAvg, comm, NULL)); /* in place */
  CHECK(fabs(d - (n + 1) / 2.0) < 1e-12, "allreduce avg in place: %g", d);
  float one = (float)rank;
  OK(ncclBroadcast(&one, &one, 1, ncclFloat32, n - 1, comm, NULL));
  CHECK(one == (float)(n - 1), "broadcast from %d: %g", n - 1, one);
  int32_t b = rank == 0 ? 42 : -1;
  OK(ncclBcast(&b, 1, ncclInt32, 0, comm, NULL));
  CHECK(b == 42, "bcast: %d", b);
  int64_t r64 = rank + 1, sum64 = -1;
  OK(ncclReduce(&r64, &sum64, 1, ncclInt64, ncclSum, 0, comm, NULL));
  CHECK(rank != 0 || sum64 == (int64_t)n * (n + 1) / 2, "reduce: %lld", (long long)sum64);
  for (int i = 0; i < C; ++i) fs[i] = (float)(rank * C + i);
  OK(ncclAllGather(fs, fr, C, ncclFloat32, comm, NULL));
  CHECK(fr[C * (n - 1) + 3] == (float)((n - 1) * C + 3), "allgather: %g", fr[C * (n - 1) + 3]);
  for (int i = 0; i < C * n; ++i) fs[i] = (float)i;
  OK(ncclReduceScatter(fs, fr, C, ncclFloat32, ncclSum, comm, NULL));
  CHECK(fr[5] == (float)(n * (rank * C + 5)), "reducescatter: %g", fr[5]);
  for (int i = 0; i < C * n; ++i) fs[i] = (float)(rank * 100000 + i);
  OK(ncclAlltoAll(fs, fr, C, ncclFloat32, comm, NULL));
  CHECK(fr[(n - 1) * C + 2] == (float)((n - 1) * 100000 + rank * C + 2), "alltoall: %g",
        fr[(n - 1) * C + 2]);
  free(fs);
  free(fr);
}

static void TestRootedAndP2P(ncclComm_t comm, int rank, int n) {
  int32_t mine = 10 * rank + 1, all[64], got = -1;
  OK(ncclGather(&mine, all, 1, ncclInt32, n - 1, comm, NULL));
  if (rank == n - 1)
    for (int p = 0; p < n; ++p) CHECK(all[p] == 10 * p + 1, "gather[%d] = %d", p, all[p]);
  for (int p = 0; p < n; ++p) all[p] = 7 * p;
  OK(ncclScatter(all, &got, 1, ncclInt32, 0, comm, NULL));
  CHECK(got == 7 * rank, "scatter: %d", got);
  /* A ring exchange in one group: every rank sends right and receives from the left. */
  int32_t out = rank, in = -1;
  OK(ncclGroupStart());
  OK(ncclSend(&out, 1, ncclInt32, (rank + 1) % n, comm, NULL));
  OK(ncclRecv(&in, 1, ncclInt32, (rank + n - 1) % n, comm, NULL));
  OK(ncclGroupEnd());
  CHECK(in == (rank + n - 1) % n, "ring send/recv: %d", in);
  /* PreMulSum: sum of 0.5 * x. */
  float half = 0.5f, x = (float)(rank + 1), y = 0;
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, comm));
  OK(ncclAllReduce(&x, &y, 1, ncclFloat32, op, comm, NULL));
  CHECK(y == 0.25f * n * (n + 1), "premulsum: %g", y);
  OK(ncclRedOpDestroy(op, comm));
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, op, comm, NULL) == ncclInvalidArgument,
        "a destroyed op is refused");
}

static void TestErrorsAndVersion(ncclComm_t comm) {
  int version = 0;
  OK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE, "version %d", version);
  /* Without a device runtime ncclMemAlloc is refused; with one it allocates device memory
   * (nccl_device_test uses it). */
  void* p = NULL;
  const char* device = getenv("WEFT_DEVICE");
  if (device != NULL && strcmp(device, "none") == 0) {
    CHECK(ncclMemAlloc(&p, 64) == ncclInvalidUsage, "ncclMemAlloc is refused");
    CHECK(strstr(ncclGetLastError(comm), "ncclMemAlloc") != NULL, "message names the call: %s",
          ncclGetLastError(comm));
  } else {
    OK(ncclMemAlloc(&p, 64));
    OK(ncclMemFree(p));
  }
  float f = 0;
  CHECK(ncclAllReduce(&f, &f, 1, ncclFloat32, ncclSum, NULL, NULL) == ncclInvalidArgument,
        "NULL comm");
  CHECK(ncclAllReduce(&f, &f, 1, ncclFloat32, (ncclRedOp_t)99, comm, NULL) ==
            ncclInvalidArgument, "unknown op");
  CHECK(strcmp(ncclGetErrorString(ncclInvalidUsage), "invalid usage") == 0, "error string");
  /* A buffer this process cannot read (a device pointer on a machine without a driver looks
   * the same: an address with no host mapping) is refused, not dereferenced (issue 34, 6). */
  void* page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(page != MAP_FAILED, "mmap");
  CHECK(ncclAllReduce(page, page, 16, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidUsage,
        "an unreadable buffer is refused");
  CHECK(strstr(ncclGetLastError(comm), "not host memory") != NULL, "message: %s",
        ncclGetLastError(comm));
  CHECK(ncclBroadcast(&f, page, 16, ncclFloat32, 0, comm, NULL) == ncclInvalidUsage,
        "an unreadable receive buffer is refused");
  munmap(page, 4096);
}

/* Two communicators created in one group (their inits complete at ncclGroupEnd), and a
 * split where rank 0 opts out. */
static void TestGroupInitAndSplit(ncclComm_t comm, ncclUniqueId* ids, int rank, int n) {
  ncclComm_t a = NULL, b = NULL, half = NULL;
  OK(ncclGroupStart());
  OK(ncclCommInitRank(&a, n, ids[1], rank));
  OK(ncclCommInitRank(&b, n, ids[2], rank));
  OK(ncclGroupEnd());
  int32_t v = 1, s = 0;
  OK(ncclAllReduce(&v, &s, 1, ncclInt32, ncclSum, b, NULL));
  CHECK(s == n, "allreduce on the second group-created comm: %d", s);
  OK(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : rank % 2, rank, &half, NULL));
  CHECK((rank == 0) == (half == NULL), "split NOCOLOR gives NULL on rank 0 only");
  if (half) {
    int count = 0;
    OK(ncclCommCount(half, &count));
    int expect = 0;
    for (int r = 1; r < n; ++r) expect += (r % 2 == rank % 2);
    CHECK(count == expect, "split size %d, expected %d", count, expect);
    OK(ncclCommDestroy(half));
  }
  OK(ncclCommDestroy(a));
  OK(ncclCommDestroy(b));
}

/* ncclCommShrink of a copy of comm without its last rank (alive: it just takes no part), an
 * allreduce on the rest, then ncclCommRevoke: later calls fail, destroy succeeds. */
static void TestShrinkAndRevoke(ncclComm_t comm, int rank, int n) {
  ncclComm_t dup = NULL, small = NULL;
  OK(ncclCommSplit(comm, 0, rank, &dup, NULL));
  if (n > 1 && rank != n - 1) {
    int last = n - 1, count = 0;
    OK(ncclCommShrink(dup, &last, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
    OK(ncclCommCount(small, &count));
    CHECK(count == n - 1, "shrunk size %d, expected %d", count, n - 1);
    int32_t v = 1, s = 0;
    OK(ncclAllReduce(&v, &s, 1, ncclInt32, ncclSum, small, NULL));
    CHECK(s == n - 1, "allreduce on the shrunk comm: %d", s);
    OK(ncclCommRevoke(small, NCCL_REVOKE_DEFAULT));
    CHECK(ncclAllReduce(&v, &s, 1, ncclInt32, ncclSum, small, NULL) != ncclSuccess,
          "an allreduce on a revoked comm fails");
    OK(ncclCommDestroy(small));
  }
  CHECK(ncclCommRevoke(dup, 1) == ncclInvalidArgument, "revokeFlags 1 is refused");
  OK(ncclCommDestroy(dup));
}

/* Several ranks driven by one thread: ncclCommInitAll and a group spanning its comms. */
static void TestInitAllOneThread(void) {
  ncclComm_t comms[2];
  OK(ncclCommInitAll(comms, 2, NULL));
  float x[2] = {1.5f, 2.5f}, y[2] = {0, 0};
  OK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) OK(ncclAllReduce(&x[i], &y[i], 1, ncclFloat32, ncclSum, comms[i], NULL));
  OK(ncclGroupEnd());
  CHECK(y[0] == 4.0f && y[1] == 4.0f, "initall group allreduce: %g %g", y[0], y[1]);
  for (int i = 0; i < 2; ++i) OK(ncclCommDestroy(comms[i]));
}

int main(void) {
  int rank = 0, n = 0;
  if (!RankAndSize(&rank, &n)) return 2;
  ncclUniqueId ids[3];
  if (ShareIds(ids, 3, rank, "nccl-api-test") != 0) {
    fprintf(stderr, "rank %d: could not share the unique ids\n", rank);
    return 2;
  }
  /* Non-blocking init: ncclInProgress until ncclCommGetAsyncError says done. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t ir = ncclCommInitRankConfig(&comm, n, ids[0], rank, &config);
  CHECK(ir == ncclInProgress || ir == ncclSuccess, "non-blocking init returned %d", ir);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    OK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) usleep(1000);
  }
  CHECK(state == ncclSuccess, "init finished with %d", state);
  int count = 0, me = -1;
  OK(ncclCommCount(comm, &count));
  OK(ncclCommUserRank(comm, &me));
  CHECK(count == n && me == rank, "count %d rank %d", count, me);
  TestErrorsAndVersion(comm);
  TestCollectives(comm, rank, n);
  TestRootedAndP2P(comm, rank, n);
  TestGroupInitAndSplit(comm, ids, rank, n);
  TestShrinkAndRevoke(comm, rank, n);
  TestInitAllOneThread();
  float done = 0;
  OK(ncclAllReduce(&done, &done, 1, ncclFloat32, ncclSum, comm, NULL)); /* all read the ids */
  RemoveIds(rank, "nccl-api-test");
  OK(ncclCommFinalize(comm));
  OK(ncclCommDestroy(comm));
  printf("rank %d: %d passed, %d failed\n", rank, g_passed, g_failed);
  return g_failed != 0;
}
