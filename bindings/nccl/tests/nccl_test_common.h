/* nccl_test_common.h: what the C programs of bindings/nccl/tests share: pass/fail counting
 * and handing unique ids from rank 0 to the others (as an MPI program would broadcast them).
 * They run under `weftrun -n N`, which sets WEFT_RANK / WEFT_WORLD_SIZE. */
#ifndef WEFT_BINDINGS_NCCL_TESTS_NCCL_TEST_COMMON_H_
#define WEFT_BINDINGS_NCCL_TESTS_NCCL_TEST_COMMON_H_

#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int g_passed, g_failed, g_rank;

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (cond) {                                                    \
      ++g_passed;                                                  \
    } else {                                                       \
      ++g_failed;                                                  \
      fprintf(stderr, "rank %d FAIL line %d: ", g_rank, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, " (%s)\n", ncclGetLastError(NULL));          \
    }                                                              \
  } while (0)

#define OK(call) CHECK((call) == ncclSuccess, "%s", #call)

/* The file the ids pass through: named after the program and weftrun's pid. */
static void IdsPath(char* path, size_t size, const char* program) {
  snprintf(path, size, "/tmp/weft-%s-%d.ids", program, (int)getppid());
}

/* Writes nids ids to the file (atomically: the readers never see a partial one). */
static int WriteIds(const ncclUniqueId* ids, int nids, const char* program) {
  char path[256], tmp[300];
  IdsPath(path, sizeof(path), program);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  if (!f) return -1;
  size_t put = fwrite(ids, sizeof(ncclUniqueId), nids, f);
  fclose(f);
  return put == (size_t)nids ? rename(tmp, path) : -1;
}

/* Waits (up to 30 s) for the file and reads nids ids from it. */
static int ReadIds(ncclUniqueId* ids, int nids, const char* program) {
  char path[256];
  IdsPath(path, sizeof(path), program);
  for (int tries = 0; tries < 3000; ++tries, usleep(10000)) {
    FILE* f = fopen(path, "rb");
    if (!f) continue;
    size_t got = fread(ids, sizeof(ncclUniqueId), nids, f);
    fclose(f);
    if (got == (size_t)nids) return 0;
  }
  return -1;
}

/* Rank 0 creates nids ids and writes them to the file; the others wait for it. */
static int ShareIds(ncclUniqueId* ids, int nids, int rank, const char* program) {
  if (rank != 0) return ReadIds(ids, nids, program);
  for (int i = 0; i < nids; ++i)
    if (ncclGetUniqueId(&ids[i]) != ncclSuccess) return -1;
  return WriteIds(ids, nids, program);
}

/* Rank 0 removes the file once every rank has read it (call after a collective). */
static void RemoveIds(int rank, const char* program) {
  char path[256];
  IdsPath(path, sizeof(path), program);
  if (rank == 0) unlink(path);
}

/* WEFT_RANK / WEFT_WORLD_SIZE from weftrun; 0 when unset. */
static int RankAndSize(int* rank, int* n) {
  const char* r = getenv("WEFT_RANK");
  const char* s = getenv("WEFT_WORLD_SIZE");
  if (!r || !s) {
    fprintf(stderr, "run under weftrun (WEFT_RANK/WEFT_WORLD_SIZE unset)\n");
    return 0;
  }
  *rank = atoi(r);
  *n = atoi(s);
  g_rank = *rank;
  return 1;
}

#endif /* WEFT_BINDINGS_NCCL_TESTS_NCCL_TEST_COMMON_H_ */
