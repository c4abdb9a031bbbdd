// ucx_collectives_worker: one rank of tests/ucx_collectives_test.cc and of the 2x2 namespace
// tests (tests/netns.cmake): every collective of weft.h once at a small and at a large size
// (past every UCX lane's eager limit), with exact int32 checks, on a communicator from the
// environment (WEFT_TRANSPORT=ucx forces UCX for the pairs shm does not take).
// Which transport serves each peer is what WEFT_DEBUG=INFO logs at init ("transports: ucx to
// rank(s) ..."); the tests check that line. Prints "OK ucx collectives <calls>" or "FAIL <what>: <weftGetLastError>".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace {

weftComm_t g_comm = nullptr;

int Fail(const std::string& what) {
  printf("FAIL %s: %s\n", what.c_str(), weftGetLastError(g_comm));
  fflush(stdout);
  return 1;
}

// x(rank, i): what rank `rank` contributes at element i.
int32_t X(int rank, size_t i) { return static_cast<int32_t>((rank + 1) * 1000 + i % 101); }

// The reductions and data movers at `count` elements per rank; returns calls made or -1.
int Collectives(int rank, int n, size_t count) {
  std::vector<int32_t> in(count * n), out(count * n);
  for (size_t i = 0; i < in.size(); ++i) in[i] = X(rank, i);
  auto sum = [&](size_t i) {
    int32_t s = 0;
    for (int r = 0; r < n; ++r) s += X(r, i);
    return s;
  };
  const std::string at = " (" + std::to_string(count) + " elements)";
  if (weftAllReduce(in.data(), out.data(), count, weftInt32, weftSum, g_comm, nullptr)) return Fail("allreduce" + at), -1;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != sum(i)) return Fail("allreduce value at " + std::to_string(i) + at), -1;
  const int root = n - 1;
  if (weftReduce(in.data(), out.data(), count, weftInt32, weftSum, root, g_comm, nullptr)) return Fail("reduce" + at), -1;
  for (size_t i = 0; rank == root && i < count; ++i)
    if (out[i] != sum(i)) return Fail("reduce value at " + std::to_string(i) + at), -1;
  if (weftBroadcast(in.data(), out.data(), count, weftInt32, 0, g_comm, nullptr)) return Fail("broadcast" + at), -1;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != X(0, i)) return Fail("broadcast value at " + std::to_string(i) + at), -1;
  if (weftAllGather(in.data(), out.data(), count, weftInt32, g_comm, nullptr)) return Fail("allgather" + at), -1;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      if (out[r * count + i] != X(r, i)) return Fail("allgather value from rank " + std::to_string(r) + at), -1;
  if (weftReduceScatter(in.data(), out.data(), count, weftInt32, weftSum, g_comm, nullptr))
    return Fail("reducescatter" + at), -1;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != sum(rank * count + i)) return Fail("reducescatter value at " + std::to_string(i) + at), -1;
  if (weftAllToAll(in.data(), out.data(), count, weftInt32, g_comm, nullptr)) return Fail("alltoall" + at), -1;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      if (out[r * count + i] != X(r, rank * count + i)) return Fail("alltoall value from rank " + std::to_string(r) + at), -1;
  return 6;
}

// AllToAllv (block r -> d holds d + 1 + r elements), a send/recv ring, a barrier.
int Irregular(int rank, int n) {
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t st = 0, rt = 0;
  for (int d = 0; d < n; ++d) {
    sc[d] = d + 1 + rank, sd[d] = st, st += sc[d];
    rc[d] = rank + 1 + d, rd[d] = rt, rt += rc[d];
  }
  std::vector<int32_t> send(st), recv(rt, -1);
  for (int d = 0; d < n; ++d)
    for (size_t i = 0; i < sc[d]; ++i) send[sd[d] + i] = rank * 10000 + d * 100 + static_cast<int32_t>(i);
  if (weftAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), weftInt32, g_comm, nullptr))
    return Fail("alltoallv"), -1;
  for (int s = 0; s < n; ++s)
    for (size_t i = 0; i < rc[s]; ++i)
      if (recv[rd[s] + i] != s * 10000 + rank * 100 + static_cast<int32_t>(i))
        return Fail("alltoallv value from rank " + std::to_string(s)), -1;
  const size_t m = 300000;  // 1.2 MB
  std::vector<int32_t> a(m), b(m, -1);
  for (size_t i = 0; i < m; ++i) a[i] = X(rank, i);
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  weftGroupStart();
  weftSend(a.data(), m, weftInt32, next, g_comm, nullptr);
  weftRecv(b.data(), m, weftInt32, prev, g_comm, nullptr);
  if (weftGroupEnd()) return Fail("send/recv ring"), -1;
  for (size_t i = 0; i < m; ++i)
    if (b[i] != X(prev, i)) return Fail("send/recv value at " + std::to_string(i)), -1;
  if (weftBarrier(g_comm, nullptr)) return Fail("barrier"), -1;
  return 3;
}

}  // namespace

int main() {
  if (weftCommInitFromEnv(&g_comm) != weftSuccess) return Fail("init");
  int rank = 0, n = 1;
  weftCommUserRank(g_comm, &rank);
  weftCommCount(g_comm, &n);
  int calls = 0;
  for (size_t count : {size_t{1}, size_t{3}, size_t{100003}}) {
    int c = Collectives(rank, n, count);
    if (c < 0) return 1;
    calls += c;
  }
  int c = Irregular(rank, n);
  if (c < 0) return 1;
  calls += c;
  weftCommDestroy(g_comm);
  printf("OK ucx collectives %d\n", calls);
  return 0;
}
