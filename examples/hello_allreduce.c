/* hello_allreduce: every rank contributes (rank + 1) to each element; prints the sum.
 *
 *   weftrun -n 4 ./hello_allreduce        -> "[r] allreduce ok: 10 (expected 10)" on every rank
 *
 * Uses only weft.h; builds against the installed library with
 *   cc hello_allreduce.c $(pkg-config --cflags --libs weft)
 */
#include <stdio.h>
#include <stdlib.h>

#include <weft/weft.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    weftResult_t r_ = (call);                                                        \
    if (r_ != weftSuccess) {                                                         \
      fprintf(stderr, "%s failed: %s: %s\n", #call, weftGetErrorString(r_),          \
              weftGetLastError(NULL));                                               \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

int main(void) {
  weftComm_t comm;
  CHECK(weftCommInitFromEnv(&comm));
  int rank, size;
  CHECK(weftCommUserRank(comm, &rank));
  CHECK(weftCommCount(comm, &size));
  const size_t count = 1 << 20;
  float* buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
  CHECK(weftAllReduce(buf, buf, count, weftFloat32, weftSum, comm, NULL));
  float expected = (float)size * (size + 1) / 2;
  int ok = 1;
  for (size_t i = 0; i < count; ++i) ok &= buf[i] == expected;
  printf("allreduce %s: %g (expected %g) on rank %d of %d\n", ok ? "ok" : "WRONG", buf[0],
         expected, rank, size);
  free(buf);
  CHECK(weftCommDestroy(comm));
  return ok ? 0 : 1;
}
