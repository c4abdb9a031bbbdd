// A rank program for the multi-process tests (launched by weftrun). Uses only weft.h.
//
//   weft_test_worker kill-mid      rank 1 SIGKILLs itself during the 4th allreduce; the others
//                                  must get an error (not hang); prints "ERROR <code> after <s>"
//   weft_test_worker hang-mid      rank 1 stops calling collectives (sleeps); the others must time
//                                  out (WEFT_TIMEOUT) with an error naming a peer
//   weft_test_worker wrong-secret  rank 1 replaces WEFT_SECRET before init; it must not get in
//   weft_test_worker badargs       bad arguments on a real communicator: codes and messages
//   weft_test_worker sweep         every collective once with exact checks, prints "OK"
//   weft_test_worker matrix        every dtype x op x collective, in-place and not, exact
//   weft_test_worker split         weftCommSplit into even/odd ranks, allreduce in each
//   weft_test_worker layout        prints "LAYOUT rank R size N OK" after an allreduce
//                                  of the ranks (for the launcher-environment fallbacks)
//   weft_test_worker rank-order CHUNK COLL:ALGO...
//                                  each (reducing) algorithm forced in turn on non-exact floats
//                                  (float32/64, float16, bfloat16; sum and avg): every result
//                                  must equal the rank-order sum ((x0 + x1) + x2) + ... bit for
//                                  bit; prints "OK rank-order" or "FAIL ..."
//   weft_test_worker digest CHUNK COLL:ALGO...
//                                  each reduction forced in turn (tuning file, CHUNK bytes) on
//                                  non-exact floats; prints "DIGEST COLL:ALGO TYPE OP <hash of
//                                  recvbuff>" per float type x {sum, avg} ("-" on reduce's
//                                  non-roots), then "OK digest"
//   weft_test_worker threads       no launcher: 2 thread-per-rank communicators
//                                  (weftCommInitAll), one float32 allreduce of 100000, "OK threads"
//   weft_test_worker forced CHUNK COLL:ALGO...
//                                  for each algorithm: a tuning file forcing it with CHUNK-byte
//                                  chunks, a fresh communicator (split), the forced-algorithm
//                                  sweep (test_util ForcedSweep) on a representative subset of
//                                  dtype x op; prints "OK forced <calls>" or "FAIL ..."
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const char* what) {
  printf("FAIL %s: %s\n", what, weftGetLastError(nullptr));
  return 1;
}

int KillMid(weftComm_t comm, int rank, bool hang) {
  const size_t count = 16 << 20;  // 64 MiB of float: long enough to be mid-transfer
  std::vector<float> buf(count, 1.0f);
  double last_ok = Now();
  for (int it = 0; it < 1000; ++it) {
    if (rank == 1 && it == 3) {
      if (hang) {
        sleep(60);
        return 0;
      }
      // Die while peers are inside the collective: start a few ms after they entered.
      usleep(20000);
      raise(SIGKILL);
    }
    weftResult_t r = weftAllReduce(buf.data(), buf.data(), count, weftFloat32, weftSum, comm, nullptr);
    if (r != weftSuccess) {
      printf("ERROR %d after %.2f s: %s\n", static_cast<int>(r), Now() - last_ok, weftGetLastError(comm));
      return 0;
    }
    last_ok = Now();
  }
  printf("FAIL no error after 1000 iterations\n");
  return 1;
}

int BadArgs(weftComm_t comm, int rank, int size) {
  float x = 0;
  struct Case {
    const char* name;
    weftResult_t got;
    weftResult_t want;
    const char* must_mention;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, weftResult_t got, weftResult_t want, const char* mention) {
    cases.push_back({name, got, want, mention});
    std::string msg = weftGetLastError(comm);
    if (got != want || msg.find(mention) == std::string::npos) {
      printf("FAIL %s: code %d (want %d), message '%s' must mention '%s'\n", name,
             static_cast<int>(got), static_cast<int>(want), msg.c_str(), mention);
      return false;
    }
    return true;
  };
  bool ok = true;
  ok &= add("null sendbuff", weftAllReduce(nullptr, &x, 1, weftFloat32, weftSum, comm, nullptr),
            weftInvalidArgument, "sendbuff");
  ok &= add("null recvbuff", weftAllReduce(&x, nullptr, 5, weftFloat32, weftSum, comm, nullptr),
            weftInvalidArgument, "recvbuff");
  ok &= add("overflow", weftAllReduce(&x, &x, SIZE_MAX / 2, weftFloat32, weftSum, comm, nullptr),
            weftInvalidArgument, "count=");
  ok &= add("bad dtype", weftAllReduce(&x, &x, 1, static_cast<weftDataType_t>(42), weftSum, comm, nullptr),
            weftInvalidArgument, "datatype=42");
  ok &= add("fp8 reserved", weftAllReduce(&x, &x, 1, weftFloat8e4m3, weftSum, comm, nullptr),
            weftInvalidArgument, "reserved");
  ok &= add("bad op", weftAllReduce(&x, &x, 1, weftFloat32, static_cast<weftRedOp_t>(9), comm, nullptr),
            weftInvalidArgument, "op=9");
  ok &= add("bad root", weftBroadcast(&x, &x, 1, weftFloat32, size, comm, nullptr),
            weftInvalidArgument, ("root=" + std::to_string(size)).c_str());
  ok &= add("bad peer", weftSend(&x, 1, weftFloat32, -1, comm, nullptr), weftInvalidArgument, "peer=-1");
  ok &= add("null comm", weftAllReduce(&x, &x, 1, weftFloat32, weftSum, nullptr, nullptr),
            weftInvalidArgument, "comm is NULL");
  ok &= add("bad stream", weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, reinterpret_cast<weftStream_t>(&x)),
            weftInvalidArgument, "stream=");
  // The communicator still works after rejected calls.
  float v = static_cast<float>(rank), sum = 0;
  if (weftAllReduce(&v, &sum, 1, weftFloat32, weftSum, comm, nullptr) != weftSuccess) return Fail("allreduce after bad args");
  if (sum != static_cast<float>(size * (size - 1) / 2)) {
    printf("FAIL sum %g\n", sum);
    return 1;
  }
  // A communicator whose init failed: a bogus unique id.
  weftUniqueId bogus;
  memset(&bogus, 0x5a, sizeof(bogus));
  weftComm_t broken = nullptr;
  weftResult_t r = weftCommInitRank(&broken, 2, bogus, 0);
  ok &= add("bogus unique id", r, weftInvalidArgument, "commId");
  ok &= add("call on failed-init comm", weftAllReduce(&x, &x, 1, weftFloat32, weftSum, broken, nullptr),
            weftInvalidUsage, "initialization failed");
  weftCommDestroy(broken);
  ok &= add("destroyed comm", weftAllReduce(&x, &x, 1, weftFloat32, weftSum, broken, nullptr),
            weftInvalidArgument, "not a live communicator");
  if (ok) printf("OK %zu cases\n", cases.size());
  return ok ? 0 : 1;
}

int Sweep(weftComm_t comm, int rank, int size) {
  const size_t n = 100003;
  std::vector<int32_t> in(n * size), out(n * size);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>((rank + 1) * (i % 7));
  if (weftAllReduce(in.data(), out.data(), n, weftInt32, weftSum, comm, nullptr)) return Fail("allreduce");
  for (size_t i = 0; i < n; ++i)
    if (out[i] != static_cast<int32_t>(size * (size + 1) / 2 * (i % 7))) return Fail("allreduce value");
  if (weftAllGather(in.data(), out.data(), n, weftInt32, comm, nullptr)) return Fail("allgather");
  for (int r = 0; r < size; ++r)
    for (size_t i = 0; i < n; i += 97)
      if (out[r * n + i] != static_cast<int32_t>((r + 1) * (i % 7))) return Fail("allgather value");
  if (weftReduceScatter(in.data(), out.data(), n, weftInt32, weftSum, comm, nullptr)) return Fail("reducescatter");
  for (size_t i = 0; i < n; ++i)
    if (out[i] != static_cast<int32_t>(size * (size + 1) / 2 * ((rank * n + i) % 7))) return Fail("reducescatter value");
  if (weftBroadcast(in.data(), out.data(), n, weftInt32, size - 1, comm, nullptr)) return Fail("broadcast");
  for (size_t i = 0; i < n; i += 13)
    if (out[i] != static_cast<int32_t>(size * (i % 7))) return Fail("broadcast value");
  if (weftBarrier(comm, nullptr)) return Fail("barrier");
  printf("OK\n");
  return 0;
}

// Small allreduces (the tiny-call path, exec/tiny_program.h) where one rank arrives late
// every fourth call: the others' compiled step list stops at the wait for it and the executor
// finishes the call (ExecContext::first_step). Sum, max and avg, in place and not, alternating
// window halves; every value checked exactly.
int LatePeer(weftComm_t comm, int rank, int size) {
  int late_calls = 0;
  for (int it = 0; it < 96; ++it) {
    const size_t count = 1 + (it * 37) % 300;  // 4 B .. 1.2 KiB
    const weftRedOp_t op = it % 3 == 0 ? weftSum : it % 3 == 1 ? weftMax : weftAvg;
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * ((i + it) % 5));
    if (it % 4 == 1 && rank == it % size) {
      usleep(3000);  // far beyond any spin in TryWait
      ++late_calls;
    }
    const bool in_place = it % 2 == 0;
    if (in_place) out = in;
    if (weftAllReduce(in_place ? out.data() : in.data(), out.data(), count, weftFloat32, op, comm,
                      nullptr) != weftSuccess)
      return Fail("late-peer allreduce");
    for (size_t i = 0; i < count; ++i) {
      const float v = static_cast<float>((i + it) % 5);
      const float want = op == weftSum   ? v * size * (size + 1) / 2
                         : op == weftMax ? v * size
                                         : v * size * (size + 1) / 2 / size;
      if (out[i] != want) {
        printf("FAIL late-peer call %d (count %zu, op %d) element %zu: %g, want %g\n", it, count,
               static_cast<int>(op), i, out[i], want);
        return 1;
      }
    }
    // An all-to-all after each allreduce: small ones run single-round in the window half the
    // allreduce did not take, so the halves alternate across collectives.
    if (it % 4 == 3 && rank == (it + 1) % size) {
      usleep(3000);
      ++late_calls;
    }
    const size_t block = 1 + (it * 13) % 100;
    auto value = [&](int from, int to, size_t i) {
      return static_cast<float>((from * 7 + to * 3 + static_cast<int>(i) + it) % 97);
    };
    // Block q of `got` (size blocks of `block`) equals want(q, i); else prints the first miss.
    auto blocks_hold = [&](const char* what, const std::vector<float>& got, auto want) {
      for (int q = 0; q < size; ++q)
        for (size_t i = 0; i < block; ++i)
          if (got[q * block + i] != want(q, i)) {
            printf("FAIL late-peer %s call %d (block %zu) block %d element %zu: %g, want %g\n", what,
                   it, block, q, i, got[q * block + i], want(q, i));
            return false;
          }
      return true;
    };
    std::vector<float> a2a_in(block * size), a2a_out(block * size, -1.0f);
    for (int q = 0; q < size; ++q)
      for (size_t i = 0; i < block; ++i) a2a_in[q * block + i] = value(rank, q, i);
    if (in_place) a2a_out = a2a_in;
    if (weftAllToAll(in_place ? a2a_out.data() : a2a_in.data(), a2a_out.data(), block, weftFloat32,
                     comm, nullptr) != weftSuccess)
      return Fail("late-peer alltoall");
    if (!blocks_hold("alltoall", a2a_out, [&](int q, size_t i) { return value(q, rank, i); }))
      return 1;
    // Then an allgather and a reduce-scatter (sum) of the same block size: small ones run
    // single-round too.
    std::vector<float> mine(block), gathered(block * size, -1.0f);
    for (size_t i = 0; i < block; ++i) mine[i] = value(rank, rank, i);
    if (in_place) std::copy(mine.begin(), mine.end(), gathered.begin() + rank * block);
    if (weftAllGather(in_place ? gathered.data() + rank * block : mine.data(), gathered.data(), block,
                      weftFloat32, comm, nullptr) != weftSuccess)
      return Fail("late-peer allgather");
    if (!blocks_hold("allgather", gathered, [&](int q, size_t i) { return value(q, q, i); }))
      return 1;
    std::vector<float> scattered(block, -1.0f);
    if (in_place) a2a_out = a2a_in;
    if (weftReduceScatter(in_place ? a2a_out.data() : a2a_in.data(),
                          in_place ? a2a_out.data() + rank * block : scattered.data(), block,
                          weftFloat32, weftSum, comm, nullptr) != weftSuccess)
      return Fail("late-peer reducescatter");
    for (size_t i = 0; i < block; ++i) {
      float want = 0;
      for (int q = 0; q < size; ++q) want += value(q, rank, i);
      const float got = in_place ? a2a_out[rank * block + i] : scattered[i];
      if (got != want) {
        printf("FAIL late-peer reducescatter call %d (block %zu) element %zu: %g, want %g\n", it,
               block, i, got, want);
        return 1;
      }
    }
  }
  printf("OK late-peer (%d late calls here)\n", late_calls);
  return 0;
}

// All-to-alls where rank 0 calls in place and the others do not (NCCL allows the ranks to
// differ): every rank must run the same algorithm, each its own placement's schedule. Sizes
// from the single-round direct range to pairwise and staged direct ones.
int AllToAllMixedPlacement(weftComm_t comm, int rank, int size) {
  for (size_t block : {size_t{1}, size_t{100}, size_t{1000}, size_t{20000}, size_t{300000}}) {
    auto value = [&](int from, int to, size_t i) {
      return static_cast<float>((from * 7 + to * 3 + static_cast<int>(i % 1000)) % 97);
    };
    std::vector<float> in(block * size), out(block * size, -1.0f);
    for (int q = 0; q < size; ++q)
      for (size_t i = 0; i < block; ++i) in[q * block + i] = value(rank, q, i);
    const bool in_place = rank == 0;
    if (in_place) out = in;
    for (int rep = 0; rep < 3; ++rep) {
      if (in_place) out = in;
      if (weftAllToAll(in_place ? out.data() : in.data(), out.data(), block, weftFloat32, comm,
                       nullptr) != weftSuccess)
        return Fail("mixed-placement alltoall");
      for (int q = 0; q < size; ++q)
        for (size_t i = 0; i < block; ++i)
          if (out[q * block + i] != value(q, rank, i)) {
            printf("FAIL a2a-mixed block %zu from rank %d element %zu: %g, want %g\n", block, q, i,
                   out[q * block + i], value(q, rank, i));
            return 1;
          }
    }
  }
  printf("OK a2a-mixed\n");
  return 0;
}

// Splits into even/odd ranks (reversed by key) and allreduces inside each half.
int SplitRun(weftComm_t comm, int rank, int size) {
  weftComm_t sub = nullptr;
  if (weftCommSplit(comm, rank % 2, size - rank, &sub) != weftSuccess) return Fail("split");
  int n = 0, r = 0;
  weftCommCount(sub, &n);
  weftCommUserRank(sub, &r);
  int want_n = (size + 1 - rank % 2) / 2;
  int want_r = want_n - 1 - rank / 2;
  if (n != want_n || r != want_r) {
    printf("FAIL split: size %d rank %d, want %d %d\n", n, r, want_n, want_r);
    return 1;
  }
  int v = rank, sum = 0, want = 0;
  for (int q = rank % 2; q < size; q += 2) want += q;
  if (weftAllReduce(&v, &sum, 1, weftInt32, weftSum, sub, nullptr) != weftSuccess) return Fail("allreduce on split");
  weftCommDestroy(sub);
  if (sum != want) {
    printf("FAIL split sum %d want %d\n", sum, want);
    return 1;
  }
  printf("OK split\n");
  return 0;
}

// Every dtype x op for the reducing collectives, in-place and out-of-place, exact values;
// allgather / broadcast / alltoall per dtype. Counts straddle the selector's size buckets.
int Matrix(weftComm_t comm, int rank, int n) {
  using namespace weft_test;
  for (size_t count : {size_t{1}, size_t{1001}, size_t{70001}}) {
    for (weftDataType_t t : AllTypes()) {
      size_t es = weftTypeSize(t);
      std::vector<unsigned char> a(count * n * es + 8), b(count * n * es + 8);
      for (weftRedOp_t op : AllOps()) {
        for (bool ip : {false, true}) {
          FillInputs(a.data(), t, op, rank, count);
          void* dst = ip ? a.data() : b.data();
          if (weftAllReduce(a.data(), dst, count, t, op, comm, nullptr)) return Fail("allreduce");
          std::string e = CheckReduced(dst, t, op, n, count);
          if (!e.empty()) { printf("FAIL allreduce %s %s\n", ip ? "in-place" : "", e.c_str()); return 1; }
          FillInputs(a.data(), t, op, rank, count * n);
          dst = ip ? a.data() + rank * count * es : b.data();
          if (weftReduceScatter(a.data(), dst, count, t, op, comm, nullptr)) return Fail("reducescatter");
          e = CheckReduced(dst, t, op, n, count, rank * count);
          if (!e.empty()) { printf("FAIL reducescatter %s\n", e.c_str()); return 1; }
          FillInputs(a.data(), t, op, rank, count);
          dst = ip ? a.data() : b.data();
          if (weftReduce(a.data(), dst, count, t, op, n - 1, comm, nullptr)) return Fail("reduce");
          e = rank == n - 1 ? CheckReduced(dst, t, op, n, count) : "";
          if (!e.empty()) { printf("FAIL reduce %s\n", e.c_str()); return 1; }
        }
      }
      for (bool ip : {false, true}) {
        void* src = ip ? b.data() + rank * count * es : a.data();
        FillInputs(src, t, weftSum, rank, count);
        if (weftAllGather(src, b.data(), count, t, comm, nullptr)) return Fail("allgather");
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; i += 7)
            if (Load(b.data(), t, r * count + i) != InputValue(weftSum, r, i)) { printf("FAIL allgather\n"); return 1; }
        FillInputs(a.data(), t, weftSum, rank, count);
        void* dst = ip ? a.data() : b.data();
        if (weftBroadcast(a.data(), dst, count, t, 0, comm, nullptr)) return Fail("broadcast");
        for (size_t i = 0; i < count; i += 7)
          if (Load(dst, t, i) != InputValue(weftSum, 0, i)) { printf("FAIL broadcast\n"); return 1; }
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; ++i) Store(a.data(), t, q * count + i, (rank * 13 + q * 5 + i) % 100);
        dst = ip ? a.data() : b.data();
        if (weftAllToAll(a.data(), dst, count, t, comm, nullptr)) return Fail("alltoall");
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < count; i += 5)
            if (Load(dst, t, q * count + i) != static_cast<double>((q * 13 + rank * 5 + i) % 100)) {
              printf("FAIL alltoall\n");
              return 1;
            }
      }
    }
  }
  printf("OK matrix\n");
  return 0;
}

// Thread-per-rank communicators have no selector, so WEFT_ALGO / WEFT_CHUNK_BYTES decide.
int Threads() {
  weftComm_t comms[2];
  if (weftCommInitAll(comms, 2, nullptr) != weftSuccess) return Fail("weftCommInitAll");
  std::vector<float> a(100000, 1.0f), b(100000, 2.0f);
  weftResult_t ra = weftSuccess, rb = weftSuccess;
  std::thread other([&] { rb = weftAllReduce(b.data(), b.data(), b.size(), weftFloat32, weftSum, comms[1], nullptr); });
  ra = weftAllReduce(a.data(), a.data(), a.size(), weftFloat32, weftSum, comms[0], nullptr);
  other.join();
  weftCommDestroy(comms[0]);
  weftCommDestroy(comms[1]);
  if (ra != weftSuccess || rb != weftSuccess || a[99999] != 3.0f || b[0] != 3.0f) return Fail("allreduce");
  printf("OK threads\n");
  return 0;
}

int Layout(weftComm_t comm, int rank, int size) {
  int sum = 0;
  if (weftAllReduce(&rank, &sum, 1, weftInt32, weftSum, comm, nullptr) != weftSuccess) return Fail("allreduce");
  if (sum != size * (size - 1) / 2) {
    printf("FAIL sum %d of ranks 0..%d\n", sum, size - 1);
    return 1;
  }
  printf("LAYOUT rank %d size %d OK\n", rank, size);
  return 0;
}

// One forced reduction on non-exact inputs; returns "" when every element equals the rank-order
// sum (avg: divided once), else the first difference.
std::string RankOrderCheck(weftComm_t comm, int rank, int n, const std::string& coll, weftDataType_t t,
                           weftRedOp_t op) {
  using namespace weft_test;
  const size_t count = 2003, es = weftTypeSize(t), seed = 77;
  const size_t in_count = coll == "reducescatter" ? count * n : count;
  const size_t base = coll == "reducescatter" ? rank * count : 0;
  GuardedBuffer send(in_count * es), recv(count * es);
  for (size_t i = 0; i < in_count; ++i) StoreNonExactInput(send.data(), t, rank, i, seed);
  weftResult_t r = coll == "allreduce"
                       ? weftAllReduce(send.data(), recv.data(), count, t, op, comm, nullptr)
                   : coll == "reduce"
                       ? weftReduce(send.data(), recv.data(), count, t, op, /*root=*/0, comm, nullptr)
                       : weftReduceScatter(send.data(), recv.data(), count, t, op, comm, nullptr);
  if (r != weftSuccess) return weftGetLastError(comm);
  if (coll == "reduce" && rank != 0) return "";  // only the root's buffer holds a result
  std::string g = recv.CheckGuards("recvbuff");
  if (!g.empty()) return g;
  std::vector<int> order;
  for (int q = 0; q < n; ++q) order.push_back(q);
  unsigned char want[8];
  for (size_t i = 0; i < count; ++i) {
    double sum = SumInOrder(t, order, base + i, seed);
    Store(want, t, 0, op == weftAvg ? DivideInType(t, sum, n) : sum);
    if (!SameElement(recv.data() + i * es, want, t, 0))
      return TypeName(t) + " " + OpName(op) + " element " + std::to_string(i) + ": got " +
             std::to_string(Load(recv.data(), t, i)) + " want (rank order) " + std::to_string(Load(want, t, 0));
  }
  return "";
}

int RankOrder(weftComm_t comm, int rank, int size, int argc, char** argv) {
  using namespace weft_test;
  int failures = 0;
  for (int a = 3; a < argc; ++a) {
    std::string spec = argv[a];
    std::string coll = spec.substr(0, spec.find(':')), algo = spec.substr(spec.find(':') + 1);
    std::string tuning = WriteTuningFile(coll, algo, strtoull(argv[2], nullptr, 10));
    setenv("WEFT_TUNING_FILE", tuning.c_str(), 1);
    weftComm_t sub = nullptr;
    if (weftCommSplit(comm, 0, rank, &sub) != weftSuccess) return Fail(("split for " + spec).c_str());
    weftCommSetTimeout(sub, 60);
    std::string first;
    for (weftDataType_t t : {weftFloat32, weftFloat64, weftFloat16, weftBfloat16})
      for (weftRedOp_t op : {weftSum, weftAvg}) {
        std::string e = RankOrderCheck(sub, rank, size, coll, t, op);
        const char* used = nullptr;
        weftCommGetLastAlgorithm(sub, &used);
        if (e.empty() && (!used || algo != used)) e = std::string("ran ") + (used ? used : "(none)");
        if (first.empty()) first = e;
      }
    weftCommDestroy(sub);
    unlink(tuning.c_str());
    if (!first.empty()) {
      printf("FAIL %s: %s\n", spec.c_str(), first.c_str());
      ++failures;
    }
  }
  unsetenv("WEFT_TUNING_FILE");
  if (failures == 0) printf("OK rank-order\n");
  return failures == 0 ? 0 : 1;
}

int Digest(weftComm_t comm, int rank, int size, int argc, char** argv) {
  using namespace weft_test;
  int failures = 0;
  for (int a = 3; a < argc; ++a) {
    std::string spec = argv[a];
    std::string coll = spec.substr(0, spec.find(':')), algo = spec.substr(spec.find(':') + 1);
    std::string tuning = WriteTuningFile(coll, algo, strtoull(argv[2], nullptr, 10));
    setenv("WEFT_TUNING_FILE", tuning.c_str(), 1);
    weftComm_t sub = nullptr;
    if (weftCommSplit(comm, 0, rank, &sub) != weftSuccess) return Fail(("split for " + spec).c_str());
    weftCommSetTimeout(sub, 60);
    for (weftDataType_t t : {weftFloat32, weftFloat64, weftFloat16, weftBfloat16})
      for (weftRedOp_t op : {weftSum, weftAvg}) {
        const size_t count = 1001, es = weftTypeSize(t), in_count = coll == "reducescatter" ? count * size : count;
        std::vector<unsigned char> send(in_count * es), recv(count * es);
        for (size_t i = 0; i < in_count; ++i) StoreNonExactInput(send.data(), t, rank, i, 5);
        weftResult_t r = coll == "allreduce" ? weftAllReduce(send.data(), recv.data(), count, t, op, sub, nullptr)
                         : coll == "reduce" ? weftReduce(send.data(), recv.data(), count, t, op, 0, sub, nullptr)
                                            : weftReduceScatter(send.data(), recv.data(), count, t, op, sub, nullptr);
        const char* used = nullptr;
        weftCommGetLastAlgorithm(sub, &used);
        if (r != weftSuccess || !used || algo != used) {
          printf("FAIL %s %s: %s\n", spec.c_str(), used ? used : "(none)", weftGetLastError(sub));
          ++failures;
          continue;
        }
        uint64_t h = 1469598103934665603ull;
        for (unsigned char byte : recv) h = (h ^ byte) * 1099511628211ull;
        if (coll == "reduce" && rank != 0) printf("DIGEST %s %s %s -\n", spec.c_str(), TypeName(t).c_str(), OpName(op).c_str());
        else printf("DIGEST %s %s %s %016llx\n", spec.c_str(), TypeName(t).c_str(), OpName(op).c_str(),
                    static_cast<unsigned long long>(h));
      }
    weftCommDestroy(sub);
    unlink(tuning.c_str());
  }
  unsetenv("WEFT_TUNING_FILE");
  if (failures == 0) printf("OK digest\n");
  return failures == 0 ? 0 : 1;
}

// Four (dtype, op) pairs per algorithm: avg in float32 (one division at the end), wrapping
// int8 sums, float16 max with NaN/inf/-0, and one more pair rotating with the algorithm's
// position so the process runs together cover many of the 50 pairs.
std::vector<weft_test::TypeOp> ProcessCombos(size_t algo_index) {
  std::vector<weft_test::TypeOp> all = weft_test::AllTypeOps();
  return {{weftFloat32, weftAvg}, {weftInt8, weftSum}, {weftFloat16, weftMax},
          all[(algo_index * 7 + 3) % all.size()]};
}

int Forced(weftComm_t comm, int rank, int size, int argc, char** argv) {
  using namespace weft_test;
  const size_t chunk = strtoull(argv[2], nullptr, 10);
  size_t calls = 0;
  int failures = 0;
  for (int a = 3; a < argc; ++a) {
    std::string spec = argv[a];
    std::string coll = spec.substr(0, spec.find(':')), algo = spec.substr(spec.find(':') + 1);
    std::string tuning = WriteTuningFile(coll, algo, chunk);
    setenv("WEFT_TUNING_FILE", tuning.c_str(), 1);
    weftComm_t sub = nullptr;
    if (weftCommSplit(comm, 0, rank, &sub) != weftSuccess) return Fail(("split for " + spec).c_str());
    weftCommSetTimeout(sub, 60);
    std::vector<CollectiveCase> cases = ForcedSweep(coll, size, chunk, ProcessCombos(a));
    std::string e = RunSweep(sub, rank, size, cases, algo);
    calls += cases.size();
    weftCommDestroy(sub);
    unlink(tuning.c_str());
    if (!e.empty()) {
      printf("FAIL %s: %s\n", spec.c_str(), e.c_str());
      ++failures;
    }
  }
  unsetenv("WEFT_TUNING_FILE");
  if (failures == 0) printf("OK forced %zu calls\n", calls);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: weft_test_worker kill-mid|hang-mid|wrong-secret|badargs|sweep\n");
    return 2;
  }
  std::string mode = argv[1];
  const char* rank_env = getenv("WEFT_RANK");
  int env_rank = rank_env ? atoi(rank_env) : 0;
  if (mode == "wrong-secret" && env_rank == 1) setenv("WEFT_SECRET", "00112233445566778899aabbccddeeff", 1);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (mode == "threads") return Threads();
  weftComm_t comm = nullptr;
  weftResult_t r = weftCommInitFromEnv(&comm);
  if (mode == "wrong-secret") {
    printf("INIT %d: %s\n", static_cast<int>(r), r == weftSuccess ? "joined" : weftGetLastError(comm));
    weftCommDestroy(comm);
    // Rank 1 must not get in; the others must fail init (rank 1 never arrives), not hang.
    return r == weftSuccess ? 1 : 0;
  }
  if (r != weftSuccess) return Fail("init");
  int rank = 0, size = 0;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &size);
  int rc = 2;
  if (mode == "kill-mid") rc = KillMid(comm, rank, false);
  else if (mode == "hang-mid") rc = KillMid(comm, rank, true);
  else if (mode == "badargs") rc = BadArgs(comm, rank, size);
  else if (mode == "sweep") rc = Sweep(comm, rank, size);
  else if (mode == "split") rc = SplitRun(comm, rank, size);
  else if (mode == "matrix") rc = Matrix(comm, rank, size);
  else if (mode == "late-peer") rc = LatePeer(comm, rank, size);
  else if (mode == "a2a-mixed") rc = AllToAllMixedPlacement(comm, rank, size);
  else if (mode == "layout") rc = Layout(comm, rank, size);
  else if (mode == "rank-order" && argc >= 3) rc = RankOrder(comm, rank, size, argc, argv);
  else if (mode == "digest" && argc >= 3) rc = Digest(comm, rank, size, argc, argv);
  else if (mode == "forced" && argc >= 3) rc = Forced(comm, rank, size, argc, argv);
  if (mode == "kill-mid" || mode == "hang-mid") weftCommAbort(comm);
  else weftCommDestroy(comm);
  return rc;
}
