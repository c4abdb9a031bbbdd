/* nccl_device_test.c: a program written against nccl.h, on device buffers, through weft's
 * NCCL shim (issue 36, item 4).
 *
 *   weftrun -n N nccl_device_test [own|shared]
 *
 * Buffers come from weftDeviceMalloc and ncclMemAlloc, streams from weftDeviceStreamCreate
 * (standing in for cudaMalloc and cudaStreamCreate, so the same program runs on the emulated
 * GPU, WEFT_DEVICE=emulated[:N], and on CUDA, WEFT_DEVICE=cuda). "own": rank r uses device
 * r % count; "shared": every rank uses device 0. Every collective is issued on the stream
 * and its results are checked exactly after the stream is synchronized and the buffers are
 * copied back; several calls are queued back to back so the stream's ordering is what makes
 * them right. The last line is "N passed, M failed"; the exit status is M != 0. */
#include <nccl.h>
#include <weft/weft_device.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_test_common.h"

static int g_device;
static cudaStream_t g_stream;

/* Device memory of this rank's device: from weftDeviceMalloc, or ncclMemAlloc (the
 * allocation device of ncclMemAlloc is the current CUDA device, else device 0). */
static void* DevAlloc(size_t bytes, int with_nccl) {
  void* p = NULL;
  if (with_nccl)
    OK(ncclMemAlloc(&p, bytes));
  else
    CHECK(weftDeviceMalloc(&p, bytes, g_device) == weftSuccess, "weftDeviceMalloc %zu: %s", bytes,
          weftGetLastError(NULL));
  return p;
}

static void DevFree(void* p, int with_nccl) {
  if (with_nccl)
    OK(ncclMemFree(p));
  else
    CHECK(weftDeviceFree(p) == weftSuccess, "weftDeviceFree: %s", weftGetLastError(NULL));
}

static void Upload(void* dev, const void* host, size_t bytes) {
  CHECK(weftDeviceMemcpy(dev, host, bytes) == weftSuccess, "upload: %s", weftGetLastError(NULL));
}

/* After the stream's work: the stream is synchronized first. */
static void Download(void* host, const void* dev, size_t bytes) {
  CHECK(weftDeviceStreamSynchronize((weftStream_t)g_stream) == weftSuccess, "stream sync: %s",
        weftGetLastError(NULL));
  CHECK(weftDeviceMemcpy(host, dev, bytes) == weftSuccess, "download: %s", weftGetLastError(NULL));
}

/* Counts how many of got[0, count) differ from want; prints the first. */
static int Mismatches(const char* what, const float* got, const float* want, size_t count) {
  int bad = 0;
  for (size_t i = 0; i < count; ++i)
    if (got[i] != want[i] && bad++ == 0)
      fprintf(stderr, "rank %d %s: [%zu] = %g, expected %g\n", g_rank, what, i, got[i], want[i]);
  return bad;
}

/* Rank r's input of the reduction tests, chosen so every op's result is an exact float. */
static float Input(ncclRedOp_t op, int r, int n, size_t i) {
  switch (op) {
    case ncclProd: return (float)((i + r) % 3 + 1);
    case ncclMax:
    case ncclMin: return (float)((i * 7 + r * 13) % 101);
    default: return (float)(n * ((int)(i % 13) + r)); /* sum and avg */
  }
}

static float Reduced(ncclRedOp_t op, int n, size_t i) {
  float acc = Input(op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    float x = Input(op, r, n, i);
    if (op == ncclProd) acc *= x;
    else if (op == ncclMax) acc = x > acc ? x : acc;
    else if (op == ncclMin) acc = x < acc ? x : acc;
    else acc += x;
  }
  return op == ncclAvg ? acc / (float)n : acc;
}

/* Every op on count elements (odd, and large enough to be staged in pieces), the last one in
 * place; all queued on the stream before one synchronization. */
static void TestAllReduceOps(ncclComm_t comm, int rank, int n, size_t count) {
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  enum { kOps = 5 };
  size_t bytes = count * sizeof(float);
  float* host = malloc(bytes);
  float* want = malloc(bytes);
  void *send[kOps], *recv[kOps];
  for (int k = 0; k < kOps; ++k) {
    send[k] = DevAlloc(bytes, k == 1);
    recv[k] = k == kOps - 1 ? send[k] : DevAlloc(bytes, 0);
    for (size_t i = 0; i < count; ++i) host[i] = Input(ops[k], rank, n, i);
    Upload(send[k], host, bytes);
  }
  for (int k = 0; k < kOps; ++k)
    OK(ncclAllReduce(send[k], recv[k], count, ncclFloat32, ops[k], comm, g_stream));
  for (int k = 0; k < kOps; ++k) {
    Download(host, recv[k], bytes);
    for (size_t i = 0; i < count; ++i) want[i] = Reduced(ops[k], n, i);
    CHECK(Mismatches("allreduce", host, want, count) == 0, "allreduce op %d count %zu%s", ops[k],
          count, k == kOps - 1 ? " in place" : "");
    if (recv[k] != send[k]) DevFree(recv[k], 0);
    DevFree(send[k], k == 1);
  }
  free(host);
  free(want);
}

/* Broadcast (out of place from the last rank, then ncclBcast in place), reduce, allgather,
 * reducescatter and alltoall, queued back to back: each reads the previous one's output. */
static void TestChain(ncclComm_t comm, int rank, int n) {
  enum { C = 1001 };
  size_t bytes = sizeof(float) * C * n;
  float* h = malloc(bytes);
  float* want = malloc(bytes);
  float *a = DevAlloc(bytes, 0), *b = DevAlloc(bytes, 1), *c = DevAlloc(bytes, 0);
  for (int i = 0; i < C; ++i) h[i] = (float)(rank * 1000 + i);
  Upload(a, h, sizeof(float) * C);
  OK(ncclBroadcast(a, b, C, ncclFloat32, n - 1, comm, g_stream)); /* b = rank n-1's a */
  OK(ncclBcast(b, C, ncclFloat32, 0, comm, g_stream));              /* unchanged: all equal */
  OK(ncclReduce(b, c, C, ncclFloat32, ncclSum, 0, comm, g_stream)); /* c = n * b on rank 0 */
  Download(h, b, sizeof(float) * C);
  for (int i = 0; i < C; ++i) want[i] = (float)((n - 1) * 1000 + i);
  CHECK(Mismatches("broadcast", h, want, C) == 0, "broadcast + bcast");
  if (rank == 0) {
    Download(h, c, sizeof(float) * C);
    for (int i = 0; i < C; ++i) want[i] = (float)n * (float)((n - 1) * 1000 + i);
    CHECK(Mismatches("reduce", h, want, C) == 0, "reduce to 0");
  }
  for (int i = 0; i < C; ++i) h[i] = (float)(rank * C + i);
  Upload(a, h, sizeof(float) * C);
  OK(ncclAllGather(a, b, C, ncclFloat32, comm, g_stream));                /* b[j] = j */
  OK(ncclReduceScatter(b, c, C, ncclFloat32, ncclSum, comm, g_stream));   /* c = n * my block */
  OK(ncclAlltoAll(b, a, C, ncclFloat32, comm, g_stream)); /* block p of a = my block of b */
  Download(h, b, bytes);
  for (int i = 0; i < C * n; ++i) want[i] = (float)i;
  CHECK(Mismatches("allgather", h, want, (size_t)C * n) == 0, "allgather");
  Download(h, c, sizeof(float) * C);
  for (int i = 0; i < C; ++i) want[i] = (float)n * (float)(rank * C + i);
  CHECK(Mismatches("reducescatter", h, want, C) == 0, "reducescatter");
  Download(h, a, bytes);
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < C; ++i) want[p * C + i] = (float)(rank * C + i);
  CHECK(Mismatches("alltoall", h, want, (size_t)C * n) == 0, "alltoall");
  DevFree(a, 0);
  DevFree(b, 1);
  DevFree(c, 0);
  free(h);
  free(want);
}

/* Gather and scatter (rooted, built from send/recv), a ring of send/recv in one group, and
 * a group of several collectives, all with device buffers on the stream. */
static void TestRootedP2PAndGroups(ncclComm_t comm, int rank, int n) {
  enum { C = 257 };
  size_t bytes = sizeof(int32_t) * C * n;
  int32_t* h = malloc(bytes);
  int32_t *a = DevAlloc(bytes, 0), *b = DevAlloc(bytes, 0), *c = DevAlloc(bytes, 1);
  for (int i = 0; i < C; ++i) h[i] = rank * 100000 + i;
  Upload(a, h, sizeof(int32_t) * C);
  OK(ncclGather(a, b, C, ncclInt32, n - 1, comm, g_stream));
  OK(ncclScatter(b, c, C, ncclInt32, n - 1, comm, g_stream)); /* back to where it came from */
  if (rank == n - 1) {
    Download(h, b, bytes);
    int bad = 0;
    for (int p = 0; p < n; ++p)
      for (int i = 0; i < C; ++i) bad += h[p * C + i] != p * 100000 + i;
    CHECK(bad == 0, "gather to %d: %d wrong", n - 1, bad);
  }
  Download(h, c, sizeof(int32_t) * C);
  int bad = 0;
  for (int i = 0; i < C; ++i) bad += h[i] != rank * 100000 + i;
  CHECK(bad == 0, "scatter: %d wrong", bad);
  /* Ring: send a right, receive from the left into b. */
  OK(ncclGroupStart());
  OK(ncclSend(a, C, ncclInt32, (rank + 1) % n, comm, g_stream));
  OK(ncclRecv(b, C, ncclInt32, (rank + n - 1) % n, comm, g_stream));
  OK(ncclGroupEnd());
  Download(h, b, sizeof(int32_t) * C);
  bad = 0;
  for (int i = 0; i < C; ++i) bad += h[i] != ((rank + n - 1) % n) * 100000 + i;
  CHECK(bad == 0, "ring send/recv: %d wrong", bad);
  /* A group of collectives: allreduce a -> c and allgather a -> b, issued together. */
  OK(ncclGroupStart());
  OK(ncclAllReduce(a, c, C, ncclInt32, ncclMax, comm, g_stream));
  OK(ncclAllGather(a, b, C, ncclInt32, comm, g_stream));
  OK(ncclGroupEnd());
  Download(h, c, sizeof(int32_t) * C);
  bad = 0;
  for (int i = 0; i < C; ++i) bad += h[i] != (n - 1) * 100000 + i;
  CHECK(bad == 0, "grouped allreduce max: %d wrong", bad);
  Download(h, b, bytes);
  bad = 0;
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < C; ++i) bad += h[p * C + i] != p * 100000 + i;
  CHECK(bad == 0, "grouped allgather: %d wrong", bad);
  DevFree(a, 0);
  DevFree(b, 0);
  DevFree(c, 1);
  free(h);
}

/* PreMulSum with a host scalar and with a device scalar (read when the call runs, after the
 * stream's earlier work), on device buffers; then the NULL (default) stream, registration,
 * host buffers with a device stream, and the refusals. */
static void TestPreMulSumAndMisc(ncclComm_t comm, int rank, int n) {
  enum { C = 333 };
  float h[C], want[C];
  float *x = DevAlloc(sizeof h, 0), *y = DevAlloc(sizeof h, 0), *s = DevAlloc(sizeof(float), 1);
  for (int i = 0; i < C; ++i) h[i] = (float)(4 * (i + rank));
  Upload(x, h, sizeof h);
  float half = 0.5f, quarter = 0.25f;
  ncclRedOp_t hop, dop;
  OK(ncclRedOpCreatePreMulSum(&hop, &half, ncclFloat32, ncclScalarHostImmediate, comm));
  Upload(s, &quarter, sizeof quarter);
  OK(ncclRedOpCreatePreMulSum(&dop, s, ncclFloat32, ncclScalarDevice, comm));
  OK(ncclAllReduce(x, y, C, ncclFloat32, hop, comm, g_stream));
  Download(h, y, sizeof h);
  for (int i = 0; i < C; ++i) want[i] = (float)(2 * (n * i + n * (n - 1) / 2));
  CHECK(Mismatches("premulsum host scalar", h, want, C) == 0, "premulsum host scalar");
  OK(ncclReduceScatter(x, y, C / n, ncclFloat32, dop, comm, g_stream));
  Download(h, y, sizeof(float) * (C / n));
  for (int i = 0; i < C / n; ++i) {
    int j = rank * (C / n) + i;
    want[i] = (float)(n * j + n * (n - 1) / 2);
  }
  CHECK(Mismatches("premulsum device scalar", h, want, C / n) == 0, "premulsum device scalar");
  /* Inside a group (its scaled input is kept until the group's stream work has read it). */
  OK(ncclGroupStart());
  OK(ncclAllReduce(x, y, C, ncclFloat32, dop, comm, g_stream));
  OK(ncclGroupEnd());
  Download(h, y, sizeof h);
  for (int i = 0; i < C; ++i) want[i] = (float)(n * i + n * (n - 1) / 2);
  CHECK(Mismatches("grouped premulsum", h, want, C) == 0, "grouped premulsum device scalar");
  OK(ncclRedOpDestroy(hop, comm));
  OK(ncclRedOpDestroy(dop, comm));
  /* The default stream (NULL). */
  OK(ncclAllReduce(x, y, C, ncclFloat32, ncclSum, comm, NULL));
  CHECK(weftDeviceStreamSynchronize(NULL) == weftSuccess, "default stream sync");
  CHECK(weftDeviceMemcpy(h, y, sizeof h) == weftSuccess, "download");
  for (int i = 0; i < C; ++i) want[i] = (float)(4 * (n * i + n * (n - 1) / 2));
  CHECK(Mismatches("allreduce on the NULL stream", h, want, C) == 0, "NULL stream");
  /* Registration is accepted (a hint); the registered buffer works as before. */
  void* handle = NULL;
  OK(ncclCommRegister(comm, x, sizeof h, &handle));
  OK(ncclAllReduce(x, y, C, ncclFloat32, ncclSum, comm, g_stream));
  Download(h, y, sizeof h);
  CHECK(Mismatches("allreduce on a registered buffer", h, want, C) == 0, "registered");
  OK(ncclCommDeregister(comm, handle));
  /* Host buffers with a device stream: the shim waits for the stream and completes the call
   * before returning. */
  int32_t hv = rank + 1, hs = 0;
  OK(ncclAllReduce(&hv, &hs, 1, ncclInt32, ncclSum, comm, g_stream));
  CHECK(hs == n * (n + 1) / 2, "host buffers with a device stream: %d", hs);
  ncclWindow_t win;
  CHECK(ncclCommWindowRegister(comm, x, sizeof h, &win, 0) == ncclInvalidUsage,
        "window register is refused");
  CHECK(strstr(ncclGetLastError(comm), "ncclCommWindowRegister") != NULL, "message: %s",
        ncclGetLastError(comm));
  DevFree(x, 0);
  DevFree(y, 0);
  DevFree(s, 1);
}

/* One thread driving two ranks (ncclCommInitAll), each on its own stream and device buffers,
 * in one group spanning both communicators. */
static void TestInitAllOneThread(int count) {
  ncclComm_t comms[2];
  OK(ncclCommInitAll(comms, 2, NULL));
  weftStream_t streams[2] = {NULL, NULL};
  float *x[2], *y[2], h[3] = {0, 0, 0};
  for (int i = 0; i < 2; ++i) {
    int device = i % count;
    CHECK(weftDeviceStreamCreate(&streams[i], device) == weftSuccess, "stream");
    CHECK(weftDeviceMalloc((void**)&x[i], sizeof h, device) == weftSuccess, "malloc");
    CHECK(weftDeviceMalloc((void**)&y[i], sizeof h, device) == weftSuccess, "malloc");
    float v[3] = {1.5f + i, 10.0f * i, -1.0f};
    Upload(x[i], v, sizeof v);
  }
  OK(ncclGroupStart());
  for (int i = 0; i < 2; ++i)
    OK(ncclAllReduce(x[i], y[i], 3, ncclFloat32, ncclSum, comms[i], (cudaStream_t)streams[i]));
  OK(ncclGroupEnd());
  for (int i = 0; i < 2; ++i) {
    CHECK(weftDeviceStreamSynchronize(streams[i]) == weftSuccess, "stream sync");
    CHECK(weftDeviceMemcpy(h, y[i], sizeof h) == weftSuccess, "download");
    CHECK(h[0] == 4.0f && h[1] == 10.0f && h[2] == -2.0f, "initall rank %d: %g %g %g", i, h[0],
          h[1], h[2]);
    OK(ncclCommDestroy(comms[i]));
    CHECK(weftDeviceFree(x[i]) == weftSuccess && weftDeviceFree(y[i]) == weftSuccess, "free");
    CHECK(weftDeviceStreamDestroy(streams[i]) == weftSuccess, "stream destroy");
  }
}

int main(int argc, char** argv) {
  int rank = 0, n = 0, count = 0;
  if (!RankAndSize(&rank, &n)) return 2;
  int shared = argc > 1 && strcmp(argv[1], "shared") == 0;
  if (weftDeviceGetCount(&count) != weftSuccess || count == 0) {
    fprintf(stderr, "no device in weft's \"%s\" runtime: set WEFT_DEVICE=emulated or cuda\n",
            weftDeviceRuntimeName());
    return 2;
  }
  g_device = shared ? 0 : rank % count;
  weftStream_t stream = NULL;
  if (weftDeviceStreamCreate(&stream, g_device) != weftSuccess) {
    fprintf(stderr, "rank %d: stream: %s\n", rank, weftGetLastError(NULL));
    return 2;
  }
  g_stream = (cudaStream_t)stream;
  ncclUniqueId id;
  if (ShareIds(&id, 1, rank, "nccl-device-test") != 0) {
    fprintf(stderr, "rank %d: could not share the unique id\n", rank);
    return 2;
  }
  ncclComm_t comm = NULL;
  OK(ncclCommInitRank(&comm, n, id, rank));
  if (comm == NULL) return 1;
  TestAllReduceOps(comm, rank, n, 1001);
  TestAllReduceOps(comm, rank, n, ((size_t)1 << 20) + 3); /* 4 MiB: staged in 1 MiB pieces */
  TestChain(comm, rank, n);
  TestRootedP2PAndGroups(comm, rank, n);
  TestPreMulSumAndMisc(comm, rank, n);
  TestInitAllOneThread(count);
  RemoveIds(rank, "nccl-device-test"); /* every rank has read it: they all joined the comm */
  ncclResult_t async = ncclInternalError;
  OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "no asynchronous error after the stream work: %d", async);
  OK(ncclCommFinalize(comm));
  OK(ncclCommDestroy(comm));
  CHECK(weftDeviceStreamDestroy(stream) == weftSuccess, "stream destroy");
  printf("rank %d (%s device %d): %d passed, %d failed\n", rank, weftDeviceRuntimeName(),
         g_device, g_passed, g_failed);
  return g_failed != 0;
}
