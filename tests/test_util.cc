// Test helpers (see test_util.h).
#include "test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "kernels/half.h"

namespace weft_test {

std::string RunOnComms(const std::vector<weftComm_t>& comms,
                       const std::function<std::string(weftComm_t, int)>& fn) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { errors[r] = fn(comms[r], static_cast<int>(r)); });
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
  return "";
}

std::string RunRanks(int n, const std::function<std::string(weftComm_t, int)>& fn) {
  std::vector<weftComm_t> comms(n);
  if (weftCommInitAll(comms.data(), n, nullptr) != weftSuccess)
    return std::string("weftCommInitAll failed: ") + weftGetLastError(nullptr);
  std::string err = RunOnComms(comms, fn);
  for (weftComm_t c : comms) weftCommDestroy(c);
  return err;
}

int HoldRefusingLoopbackPort(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

const std::vector<weftDataType_t>& AllTypes() {
  static const std::vector<weftDataType_t> t = {weftInt8,    weftUint8,   weftInt32, weftUint32,
                                                weftInt64,   weftUint64,  weftFloat16,
                                                weftBfloat16, weftFloat32, weftFloat64};
  return t;
}

const std::vector<weftRedOp_t>& AllOps() {
  static const std::vector<weftRedOp_t> o = {weftSum, weftProd, weftMax, weftMin, weftAvg};
  return o;
}

std::string TypeName(weftDataType_t t) {
  switch (t) {
    case weftInt8: return "int8";
    case weftUint8: return "uint8";
    case weftInt32: return "int32";
    case weftUint32: return "uint32";
    case weftInt64: return "int64";
    case weftUint64: return "uint64";
    case weftFloat16: return "float16";
    case weftBfloat16: return "bfloat16";
    case weftFloat32: return "float32";
    case weftFloat64: return "float64";
    default: return "type" + std::to_string(static_cast<int>(t));
  }
}

std::string OpName(weftRedOp_t o) {
  switch (o) {
    case weftSum: return "sum";
    case weftProd: return "prod";
    case weftMax: return "max";
    case weftMin: return "min";
    case weftAvg: return "avg";
    default: return "op" + std::to_string(static_cast<int>(o));
  }
}

double InputValue(weftRedOp_t op, int rank, size_t i) {
  if (op == weftProd) return ((rank + i) % 3 == 0) ? 2.0 : 1.0;  // product <= 2^nranks
  return static_cast<double>((rank * 7 + i * 3) % 11);            // sum <= 10 * nranks
}

void Store(void* dst, weftDataType_t t, size_t i, double v) {
  switch (t) {
    case weftInt8: static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(v); break;
    case weftUint8: static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(v); break;
    case weftInt32: static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v); break;
    case weftUint32: static_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(v); break;
    case weftInt64: static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v); break;
    case weftUint64: static_cast<uint64_t*>(dst)[i] = static_cast<uint64_t>(v); break;
    case weftFloat16: static_cast<uint16_t*>(dst)[i] = weft::FloatToHalf(static_cast<float>(v)); break;
    case weftBfloat16: static_cast<uint16_t*>(dst)[i] = weft::FloatToBfloat16(static_cast<float>(v)); break;
    case weftFloat32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
    case weftFloat64: static_cast<double*>(dst)[i] = v; break;
    default: break;
  }
}

double Load(const void* src, weftDataType_t t, size_t i) {
  switch (t) {
    case weftInt8: return static_cast<const int8_t*>(src)[i];
    case weftUint8: return static_cast<const uint8_t*>(src)[i];
    case weftInt32: return static_cast<const int32_t*>(src)[i];
    case weftUint32: return static_cast<const uint32_t*>(src)[i];
    case weftInt64: return static_cast<double>(static_cast<const int64_t*>(src)[i]);
    case weftUint64: return static_cast<double>(static_cast<const uint64_t*>(src)[i]);
    case weftFloat16: return weft::HalfToFloat(static_cast<const uint16_t*>(src)[i]);
    case weftBfloat16: return weft::Bfloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    case weftFloat32: return static_cast<const float*>(src)[i];
    case weftFloat64: return static_cast<const double*>(src)[i];
    default: return NAN;
  }
}

void FillInputs(void* buf, weftDataType_t t, weftRedOp_t op, int rank, size_t count, size_t base) {
  for (size_t k = 0; k < count; ++k) Store(buf, t, k, InputValue(op, rank, base + k));
}

double Expected(weftDataType_t t, weftRedOp_t op, int nranks, size_t i) {
  double acc = InputValue(op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = InputValue(op, r, i);
    switch (op) {
      case weftSum: case weftAvg: acc += v; break;
      case weftProd: acc *= v; break;
      case weftMax: acc = std::max(acc, v); break;
      case weftMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  // Integers wrap in their width (sum <= 80 and prod <= 256 only wrap for 8-bit types).
  unsigned char tmp[8];
  Store(tmp, t, 0, 0);
  switch (t) {
    case weftInt8: { int8_t x = static_cast<int8_t>(static_cast<int64_t>(acc)); acc = x; break; }
    case weftUint8: { uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(acc)); acc = x; break; }
    default: break;
  }
  if (op == weftAvg) {
    switch (t) {
      case weftFloat16: return weft::HalfToFloat(weft::FloatToHalf(static_cast<float>(acc) / nranks));
      case weftBfloat16: return weft::Bfloat16ToFloat(weft::FloatToBfloat16(static_cast<float>(acc) / nranks));
      case weftFloat32: return static_cast<float>(acc) / static_cast<float>(nranks);
      case weftFloat64: return acc / nranks;
      default: return std::trunc(acc / nranks);  // integer avg truncates
    }
  }
  return acc;
}

std::string CheckReduced(const void* buf, weftDataType_t t, weftRedOp_t op, int nranks,
                         size_t count, size_t base) {
  for (size_t k = 0; k < count; ++k) {
    double got = Load(buf, t, k), want = Expected(t, op, nranks, base + k);
    if (got != want && !(std::isnan(got) && std::isnan(want))) {
      return TypeName(t) + " " + OpName(op) + " element " + std::to_string(k) + ": got " +
             std::to_string(got) + " want " + std::to_string(want);
    }
  }
  return "";
}

std::string BinPath(const std::string& name) { return std::string(WEFT_BIN_DIR) + "/" + name; }

}  // namespace weft_test

// ---- guarded buffers and the collective harness ----
namespace weft_test {

static void InputElement(void* out, weftDataType_t t, weftRedOp_t op, int rank, size_t i,
                         uint64_t seed);

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t seed, int rank, size_t i) {
  return Mix(Mix(seed) ^ Mix(static_cast<uint64_t>(rank) + 0x1000) ^ (i * 0xD6E8FEB86659FD93ull));
}

bool IsFloat(weftDataType_t t) {
  return t == weftFloat16 || t == weftBfloat16 || t == weftFloat32 || t == weftFloat64;
}

// Raw bytes for data-movement collectives: any bit pattern (NaNs included) must arrive intact.
void StoreRaw(void* buf, size_t es, size_t i, uint64_t h) {
  memcpy(static_cast<unsigned char*>(buf) + i * es, &h, es);
}

// Float value for max/min: non-exact values, signed zeros, infinities and NaN.
double ExtremeValue(uint64_t h) {
  switch (h % 64) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return -0.0;
    case 4: return 0.0;
    default: return (static_cast<double>((h >> 8) % 20001) - 10000.0) / 7.0;
  }
}

double FloatInput(weftRedOp_t op, uint64_t h) {
  static const double kProd[] = {-2.0, -1.0, -0.5, 0.5, 1.0, 2.0};
  switch (op) {
    case weftProd: return kProd[h % 6];
    case weftMax: case weftMin: return ExtremeValue(h);
    default: return (static_cast<double>(h % 33) - 16.0) / 2.0;  // sum, avg: exact halves
  }
}

// IEEE 754-2019 maximum/minimum: NaN propagates, -0 < +0.
double MaxMin(double a, double b, bool is_max) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return (std::signbit(a) == is_max) ? b : a;
  return (a > b) == is_max ? a : b;
}

template <typename T>
void IntExpected(void* dst, weftDataType_t t, weftRedOp_t op, int n, size_t i, uint64_t seed) {
  using U = std::make_unsigned_t<T>;
  U acc = 0;
  T best = 0;
  for (int r = 0; r < n; ++r) {
    T v;
    InputElement(&v, t, op, r, i, seed);
    U u = static_cast<U>(v);
    if (r == 0) { acc = u; best = v; continue; }
    switch (op) {
      case weftProd: acc = static_cast<U>(acc * u); break;
      case weftMax: best = std::max(best, v); break;
      case weftMin: best = std::min(best, v); break;
      default: acc = static_cast<U>(acc + u); break;
    }
  }
  T out = (op == weftMax || op == weftMin) ? best : static_cast<T>(acc);
  if (op == weftAvg) out = static_cast<T>(out / static_cast<T>(n));  // truncates toward zero
  memcpy(dst, &out, sizeof(T));
}

}  // namespace

// Every buffer gets its own guard bytes (a counter-seeded hash), so bytes copied out of
// another rank's guard (a peer reading past its buffer and sending that) do not match ours.
GuardedBuffer::GuardedBuffer(size_t bytes, unsigned char fill)
    : bytes_(bytes), storage_(bytes + 2 * kGuardBytes, fill) {
  static std::atomic<uint64_t> instances{0};
  seed_ = Mix(++instances);
  for (size_t k = 0; k < kGuardBytes; ++k) {
    storage_[k] = GuardByte(k);
    storage_[kGuardBytes + bytes + k] = GuardByte(kGuardBytes + k);
  }
}

unsigned char GuardedBuffer::GuardByte(size_t k) const {
  return static_cast<unsigned char>(Mix(seed_ + k) >> 56);
}

std::string GuardedBuffer::CheckGuards(const std::string& what) const {
  for (size_t k = 0; k < kGuardBytes; ++k) {
    if (storage_[kGuardBytes + bytes_ + k] != GuardByte(kGuardBytes + k))
      return what + ": byte " + std::to_string(k) + " past the end (" + std::to_string(bytes_) +
             " bytes) was overwritten";
    if (storage_[kGuardBytes - 1 - k] != GuardByte(kGuardBytes - 1 - k))
      return what + ": byte " + std::to_string(k + 1) + " before the start was overwritten";
  }
  return "";
}

std::string Describe(const CollectiveCase& c) {
  return c.collective + " " + TypeName(c.dtype) + " " + OpName(c.op) + " count " +
         std::to_string(c.count) + (c.in_place ? " in-place" : " out-of-place") + " root " +
         std::to_string(c.root);
}

void StoreOrderFreeInput(void* buf, weftDataType_t t, weftRedOp_t op, int rank, size_t i,
                         uint64_t seed) {
  const uint64_t h = Hash(seed, rank, i);
  if (!IsFloat(t)) return StoreRaw(buf, weftTypeSize(t), i, h);
  Store(buf, t, i, FloatInput(op, h));
}

// Element i of rank's input, written at out[0].
static void InputElement(void* out, weftDataType_t t, weftRedOp_t op, int rank, size_t i,
                         uint64_t seed) {
  const uint64_t h = Hash(seed, rank, i);
  if (!IsFloat(t)) return StoreRaw(out, weftTypeSize(t), 0, h);
  Store(out, t, 0, FloatInput(op, h));
}

void OrderFreeExpected(void* dst, weftDataType_t t, weftRedOp_t op, int n, size_t i,
                       uint64_t seed) {
  switch (t) {
    case weftInt8: return IntExpected<int8_t>(dst, t, op, n, i, seed);
    case weftUint8: return IntExpected<uint8_t>(dst, t, op, n, i, seed);
    case weftInt32: return IntExpected<int32_t>(dst, t, op, n, i, seed);
    case weftUint32: return IntExpected<uint32_t>(dst, t, op, n, i, seed);
    case weftInt64: return IntExpected<int64_t>(dst, t, op, n, i, seed);
    case weftUint64: return IntExpected<uint64_t>(dst, t, op, n, i, seed);
    default: break;
  }
  // Floats: every partial result is exact in the type, so a double reference is exact.
  double acc = 0;
  unsigned char tmp[8];
  for (int r = 0; r < n; ++r) {
    InputElement(tmp, t, op, r, i, seed);
    double v = Load(tmp, t, 0);
    if (r == 0) acc = v;
    else if (op == weftProd) acc *= v;
    else if (op == weftMax || op == weftMin) acc = MaxMin(acc, v, op == weftMax);
    else acc += v;
  }
  if (op == weftAvg) {
    // One division at the end, in the type (float16/bfloat16 divide in float32, round once).
    if (t == weftFloat64) acc = acc / n;
    else acc = static_cast<float>(acc) / static_cast<float>(n);
  }
  Store(dst, t, 0, acc);
}

bool SameElement(const void* a, const void* b, weftDataType_t t, size_t i) {
  const size_t es = weftTypeSize(t);
  const unsigned char* pa = static_cast<const unsigned char*>(a) + i * es;
  const unsigned char* pb = static_cast<const unsigned char*>(b) + i * es;
  if (IsFloat(t) && std::isnan(Load(pa, t, 0)) && std::isnan(Load(pb, t, 0))) return true;
  return memcmp(pa, pb, es) == 0;
}

}  // namespace weft_test

// ---- RunCollectiveCase: one call per family, every promise of the call checked ----
namespace weft_test {
namespace {

struct CaseContext {
  weftComm_t comm;
  int rank, n;
  const CollectiveCase& c;
  size_t es;
  weftResult_t* code;
  std::string Fail(const std::string& m) const { return Describe(c) + ": " + m; }
  std::string CallFailed() const {
    return Fail("returned " + std::to_string(*code) + ": " + weftGetLastError(comm));
  }
};

std::string FirstDifference(const void* got, const void* want, weftDataType_t t, size_t count,
                            const std::string& what) {
  for (size_t k = 0; k < count; ++k)
    if (!SameElement(got, want, t, k))
      return what + " element " + std::to_string(k) + ": got " + std::to_string(Load(got, t, k)) +
             " want " + std::to_string(Load(want, t, k));
  return "";
}

std::string Guards(const GuardedBuffer& send, const GuardedBuffer& recv) {
  std::string e = send.CheckGuards("sendbuff");
  return e.empty() ? recv.CheckGuards("recvbuff") : e;
}

// allreduce, reduce, reducescatter: recvbuff against the order-free reference.
std::string RunReduction(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  const bool scatter = c.collective == "reducescatter";
  const size_t in_count = scatter ? c.count * x.n : c.count;
  const size_t base = scatter ? x.rank * c.count : 0;
  GuardedBuffer send(in_count * x.es), recv(c.count * x.es), want(c.count * x.es);
  for (size_t k = 0; k < in_count; ++k) StoreOrderFreeInput(send.data(), c.dtype, c.op, x.rank, k, c.seed);
  std::vector<unsigned char> input(send.data(), send.data() + send.size());
  unsigned char* dst = !c.in_place ? recv.data() : send.data() + base * x.es;
  if (c.collective == "allreduce")
    *x.code = weftAllReduce(send.data(), dst, c.count, c.dtype, c.op, x.comm, nullptr);
  else if (c.collective == "reduce")
    *x.code = weftReduce(send.data(), dst, c.count, c.dtype, c.op, c.root, x.comm, nullptr);
  else
    *x.code = weftReduceScatter(send.data(), dst, c.count, c.dtype, c.op, x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  // count 0: input is empty and its data() null, which memcmp may not get even for 0 bytes.
  if (!c.in_place && !input.empty() && memcmp(input.data(), send.data(), input.size()) != 0)
    return x.Fail("sendbuff was modified");
  if (c.collective == "reduce" && x.rank != c.root) {
    // Non-roots' recvbuff is not part of the call (NCCL lets them pass NULL).
    GuardedBuffer untouched(c.count * x.es);
    if (!c.in_place && memcmp(recv.data(), untouched.data(), recv.size()) != 0)
      return x.Fail("a non-root's recvbuff was written");
    return "";
  }
  for (size_t k = 0; k < c.count; ++k)
    OrderFreeExpected(want.data() + k * x.es, c.dtype, c.op, x.n, base + k, c.seed);
  std::string d = FirstDifference(dst, want.data(), c.dtype, c.count, "result");
  return d.empty() ? "" : x.Fail(d);
}

// Raw bits of element i of `rank`'s buffer for data-movement collectives.
void Raw(void* buf, size_t es, size_t at, int rank, size_t i, uint64_t seed) {
  StoreRaw(buf, es, at, Hash(seed ^ 0x5eed, rank, i));
}

std::string RunAllGather(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  GuardedBuffer send(c.count * x.es), recv(c.count * x.n * x.es), want(c.count * x.n * x.es);
  unsigned char* src = c.in_place ? recv.data() + x.rank * c.count * x.es : send.data();
  for (size_t k = 0; k < c.count; ++k) Raw(src, x.es, k, x.rank, k, c.seed);
  *x.code = weftAllGather(src, recv.data(), c.count, c.dtype, x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  for (int q = 0; q < x.n; ++q)
    for (size_t k = 0; k < c.count; ++k) Raw(want.data(), x.es, q * c.count + k, q, k, c.seed);
  if (memcmp(want.data(), recv.data(), recv.size()) != 0)
    return x.Fail(FirstDifference(recv.data(), want.data(), weftUint8, recv.size(), "byte"));
  if (!c.in_place)
    for (size_t k = 0; k < c.count; ++k) Raw(want.data(), x.es, k, x.rank, k, c.seed);
  if (!c.in_place && memcmp(want.data(), send.data(), send.size()) != 0) return x.Fail("sendbuff was modified");
  return "";
}

std::string RunBroadcast(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  GuardedBuffer send(c.count * x.es), recv(c.count * x.es), want(c.count * x.es), mine(c.count * x.es);
  for (size_t k = 0; k < c.count; ++k) {
    Raw(send.data(), x.es, k, x.rank, k, c.seed);
    Raw(mine.data(), x.es, k, x.rank, k, c.seed);
    Raw(want.data(), x.es, k, c.root, k, c.seed);
  }
  unsigned char* dst = c.in_place ? send.data() : recv.data();
  *x.code = weftBroadcast(send.data(), dst, c.count, c.dtype, c.root, x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  if (memcmp(want.data(), dst, want.size()) != 0)
    return x.Fail(FirstDifference(dst, want.data(), weftUint8, want.size(), "byte"));
  if (!c.in_place && memcmp(mine.data(), send.data(), send.size()) != 0) return x.Fail("sendbuff was modified");
  return "";
}

std::string RunAllToAll(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  const size_t total = c.count * x.n;
  GuardedBuffer send(total * x.es), recv(total * x.es), want(total * x.es);
  for (size_t k = 0; k < total; ++k) Raw(send.data(), x.es, k, x.rank, k, c.seed);
  unsigned char* dst = c.in_place ? send.data() : recv.data();
  *x.code = weftAllToAll(send.data(), dst, c.count, c.dtype, x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  // Block q of the result is block `rank` of rank q's input.
  for (int q = 0; q < x.n; ++q)
    for (size_t k = 0; k < c.count; ++k) Raw(want.data(), x.es, q * c.count + k, q, x.rank * c.count + k, c.seed);
  if (memcmp(want.data(), dst, want.size()) != 0)
    return x.Fail(FirstDifference(dst, want.data(), weftUint8, want.size(), "byte"));
  return "";
}

// Skewed per-pair counts ((r + q) % 3 * count / 2, zeros included) with a one-element gap
// between blocks: the gaps must stay untouched.
std::string RunAllToAllv(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  const int n = x.n;
  auto pair_count = [&](int from, int to) { return static_cast<size_t>((from + to) % 3) * c.count / 2; };
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t so = 0, ro = 0;
  for (int q = 0; q < n; ++q) {
    sc[q] = pair_count(x.rank, q);
    rc[q] = pair_count(q, x.rank);
    sd[q] = so;
    rd[q] = ro;
    so += sc[q] + 1;
    ro += rc[q] + 1;
  }
  GuardedBuffer send(so * x.es), recv(ro * x.es), want(ro * x.es);
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < sc[q]; ++k) Raw(send.data(), x.es, sd[q] + k, x.rank, q * 1000003 + k, c.seed);
  *x.code = weftAllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), c.dtype,
                          x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < rc[q]; ++k) Raw(want.data(), x.es, rd[q] + k, q, x.rank * 1000003 + k, c.seed);
  if (memcmp(want.data(), recv.data(), recv.size()) != 0)
    return x.Fail(FirstDifference(recv.data(), want.data(), weftUint8, recv.size(), "byte (gaps included)"));
  return "";
}

// The per-rank-count collectives' table: uneven, with zeros (rank q: count + q, every third
// rank 0).
std::vector<size_t> PerRankCounts(const CaseContext& x) {
  std::vector<size_t> counts(x.n);
  for (int q = 0; q < x.n; ++q) counts[q] = q % 3 == 2 ? 0 : x.c.count + q;
  return counts;
}

// allgatherv with PerRankCounts, blocks packed with a one-element gap before each: the gaps
// must stay untouched.
std::string RunAllGatherV(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  const std::vector<size_t> counts = PerRankCounts(x);
  std::vector<size_t> displs(x.n);
  size_t extent = 0;
  for (int q = 0; q < x.n; ++q) {
    displs[q] = extent + 1;
    extent = displs[q] + counts[q];
  }
  const size_t mine = counts[x.rank];
  GuardedBuffer send(mine * x.es), recv(extent * x.es), want(extent * x.es);
  unsigned char* src = c.in_place ? recv.data() + displs[x.rank] * x.es : send.data();
  for (size_t k = 0; k < mine; ++k) Raw(src, x.es, k, x.rank, k, c.seed);
  memcpy(want.data(), recv.data(), recv.size());
  *x.code = weftAllGatherV(src, mine, recv.data(), counts.data(), displs.data(), c.dtype, x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  for (int q = 0; q < x.n; ++q)
    for (size_t k = 0; k < counts[q]; ++k) Raw(want.data(), x.es, displs[q] + k, q, k, c.seed);
  if (memcmp(want.data(), recv.data(), recv.size()) != 0)
    return x.Fail(FirstDifference(recv.data(), want.data(), weftUint8, recv.size(), "byte (gaps included)"));
  return "";
}

// reduce-scatterv with PerRankCounts: this rank's block against the order-free reference.
std::string RunReduceScatterV(const CaseContext& x) {
  const CollectiveCase& c = x.c;
  const std::vector<size_t> counts = PerRankCounts(x);
  size_t total = 0, base = 0;
  for (int q = 0; q < x.n; ++q) {
    if (q == x.rank) base = total;
    total += counts[q];
  }
  const size_t mine = counts[x.rank];
  GuardedBuffer send(total * x.es), recv(mine * x.es), want(mine * x.es);
  for (size_t k = 0; k < total; ++k) StoreOrderFreeInput(send.data(), c.dtype, c.op, x.rank, k, c.seed);
  unsigned char* dst = c.in_place ? send.data() + base * x.es : recv.data();
  *x.code = weftReduceScatterV(send.data(), dst, counts.data(), c.dtype, c.op, x.comm, nullptr);
  if (*x.code != weftSuccess) return x.CallFailed();
  std::string e = Guards(send, recv);
  if (!e.empty()) return x.Fail(e);
  for (size_t k = 0; k < mine; ++k)
    OrderFreeExpected(want.data() + k * x.es, c.dtype, c.op, x.n, base + k, c.seed);
  std::string d = FirstDifference(dst, want.data(), c.dtype, mine, "result");
  return d.empty() ? "" : x.Fail(d);
}

}  // namespace

std::string RunCollectiveCase(weftComm_t comm, int rank, int nranks, const CollectiveCase& c,
                              weftResult_t* code) {
  weftResult_t ignored;
  CaseContext x{comm, rank, nranks, c, weftTypeSize(c.dtype), code ? code : &ignored};
  *x.code = weftSuccess;
  const std::string& k = c.collective;
  if (k == "allreduce" || k == "reduce" || k == "reducescatter") return RunReduction(x);
  if (k == "allgather") return RunAllGather(x);
  if (k == "broadcast") return RunBroadcast(x);
  if (k == "alltoall") return RunAllToAll(x);
  if (k == "alltoallv") return RunAllToAllv(x);
  if (k == "allgatherv") return RunAllGatherV(x);
  if (k == "reducescatterv") return RunReduceScatterV(x);
  if (k == "barrier") {
    *x.code = weftBarrier(comm, nullptr);
    return *x.code == weftSuccess ? "" : x.CallFailed();
  }
  return "unknown collective '" + k + "'";
}

}  // namespace weft_test

namespace weft_test {

std::vector<TypeOp> AllTypeOps() {
  std::vector<TypeOp> all;
  for (weftDataType_t t : AllTypes())
    for (weftRedOp_t o : AllOps()) all.push_back({t, o});
  return all;
}

bool IsReduction(const std::string& k) {
  return k == "allreduce" || k == "reduce" || k == "reducescatter";
}

std::vector<CollectiveCase> ForcedSweep(const std::string& collective, int n, size_t chunk_bytes,
                                        const std::vector<TypeOp>& combos) {
  std::vector<CollectiveCase> cases;
  if (collective == "barrier") {
    cases.push_back({collective});
    return cases;
  }
  std::vector<TypeOp> used;
  for (const TypeOp& to : combos) {
    TypeOp x = IsReduction(collective) ? to : TypeOp{to.first, weftSum};
    if (std::find(used.begin(), used.end(), x) == used.end()) used.push_back(x);
  }
  uint64_t seed = 1;
  for (const TypeOp& to : used) {
    const size_t chunk = std::max<size_t>(1, chunk_bytes / weftTypeSize(to.first));
    const size_t k = 2 * n + 1;
    for (size_t count : {size_t{0}, size_t{1}, chunk * k - 1, chunk * k, chunk * k + 1})
      for (bool in_place : {false, true}) {
        if (in_place && collective == "alltoallv") continue;
        CollectiveCase c{collective, to.first, to.second, count, in_place, 0, seed};
        c.root = static_cast<int>(seed % n);
        ++seed;
        cases.push_back(c);
      }
  }
  return cases;
}

std::string RunSweep(weftComm_t comm, int rank, int nranks, const std::vector<CollectiveCase>& cases,
                     const std::string& algorithm) {
  std::string first;
  for (const CollectiveCase& c : cases) {
    weftResult_t code = weftSuccess;
    std::string e = RunCollectiveCase(comm, rank, nranks, c, &code);
    if (e.empty() && !algorithm.empty() && c.count > 0 && c.collective != "barrier") {
      const char* used = nullptr;
      weftCommGetLastAlgorithm(comm, &used);
      if (!used || algorithm != used)
        e = Describe(c) + ": ran " + (used ? used : "(none)") + " instead of " + algorithm;
    }
    if (first.empty()) first = e;
    if (code != weftSuccess) break;  // the communicator refuses further work
  }
  return first;
}

std::string WriteTuningFile(const std::string& collective, const std::string& algorithm,
                            size_t chunk_bytes) {
  std::string path = "/tmp/weft_test_" + std::to_string(getpid()) + "_" + collective + "_" +
                     algorithm + ".tune";
  FILE* f = fopen(path.c_str(), "w");
  if (f) {
    fprintf(f, "%s 0-inf %s %zu 1\n", collective.c_str(), algorithm.c_str(), chunk_bytes);
    fclose(f);
  }
  return path;
}

}  // namespace weft_test

// ---- processes ----
namespace weft_test {

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

namespace {

// In a forked rank: output to `file`, the weft environment (see LaunchRanks) plus `env`.
void SetUpRank(int r, int n, const std::string& root, const std::string& file,
               const std::vector<std::pair<std::string, std::string>>& env) {
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 1);
  dup2(fd, 2);
  setenv("WEFT_RANK", std::to_string(r).c_str(), 1);
  setenv("WEFT_WORLD_SIZE", std::to_string(n).c_str(), 1);
  setenv("WEFT_LOCAL_RANK", std::to_string(r).c_str(), 1);
  setenv("WEFT_ROOT", root.c_str(), 1);
  setenv("WEFT_SECRET", "0123456789abcdef0123456789abcdef", 1);
  const std::string port = root.substr(root.rfind(':') + 1);
  for (const auto& [k, value] : env) {
    std::string v = value;
    auto replace = [&](const std::string& key, const std::string& with) {
      for (size_t at; (at = v.find(key)) != std::string::npos;) v.replace(at, key.size(), with);
    };
    replace("{rank}", std::to_string(r));
    replace("{rrank}", std::to_string(n - 1 - r));
    replace("{port}", port);
    if (v.empty()) unsetenv(k.c_str());
    else setenv(k.c_str(), v.c_str(), 1);
  }
}

}  // namespace

bool ExitedZero(int status) { return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string AllOutput(const LaunchOutcome& o) {
  std::string all;
  for (size_t r = 0; r < o.output.size(); ++r) all += "--- rank " + std::to_string(r) + ":\n" + o.output[r];
  return all;
}

std::vector<std::string> ProcessTransports() {
  std::vector<std::string> t = {"shm", "tcp"};
#ifdef WEFT_HAVE_UCX
  t.push_back("ucx");
#endif
  return t;
}

std::vector<std::pair<std::string, std::string>> TransportEnv(const std::string& transport) {
  std::vector<std::pair<std::string, std::string>> env;
  if (transport != "shm") env.push_back({"WEFT_SHM_DISABLE", "1"});
  if (transport == "tcp") env.push_back({"WEFT_TRANSPORT", "tcp"});
  if (transport == "ucx") {
    env.push_back({"WEFT_TRANSPORT", "ucx"});
    env.push_back({"UCX_TLS", "tcp"});
    env.push_back({"UCX_ZCOPY_THRESH", "inf"});
    env.push_back({"UCX_TCP_PUT_ENABLE", "n"});
  }
  return env;
}

double SlowdownFactor() {
  const char* v = std::getenv("WEFTTEST_SLOWDOWN");
  if (v == nullptr || *v == '\0') return 1.0;
  char* end = nullptr;
  const double f = std::strtod(v, &end);
  // A typo must not silently shrink or drop every bound: refuse it loudly (tests only).
  if (*end != '\0' || !(f >= 1.0) || f > 1000.0) {
    std::fprintf(stderr, "WEFTTEST_SLOWDOWN='%s' is not a factor in [1, 1000]\n", v);
    std::abort();
  }
  return f;
}

LaunchOutcome LaunchRanks(int n, const std::vector<std::string>& argv,
                          const std::vector<std::pair<std::string, std::string>>& env,
                          double timeout_s, const std::vector<int>& must_finish) {
  return ForkRanks(
      n,
      [&](int) {
        std::vector<char*> args;
        for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        return 127;
      },
      env, timeout_s, must_finish);
}

LaunchOutcome ForkRanks(int n, const std::function<int(int rank)>& child,
                        const std::vector<std::pair<std::string, std::string>>& env,
                        double timeout_s, const std::vector<int>& must_finish) {
  LaunchOutcome o;
  o.status.assign(n, -1);
  o.output.assign(n, "");
  const std::string root = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  std::vector<pid_t> pids(n);
  std::vector<std::string> files(n);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (int r = 0; r < n; ++r) {
    files[r] = "/tmp/weft_launch_" + std::to_string(getpid()) + "_" + std::to_string(r);
    pid_t pid = fork();
    if (pid == 0) {
      SetUpRank(r, n, root, files[r], env);
      int code = child(r);
      fflush(nullptr);
      _exit(code);
    }
    pids[r] = pid;
  }
  int left = n;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r)
        if (pids[r] == pid) { o.status[r] = st; --left; }
      continue;
    }
    bool finished = !must_finish.empty();
    for (int r : must_finish) finished &= o.status[r] != -1;
    if (elapsed() > timeout_s * SlowdownFactor() || finished) {
      o.timed_out = !finished;
      for (int r = 0; r < n; ++r)
        if (o.status[r] == -1) kill(pids[r], SIGKILL);
      for (int r = 0; r < n; ++r)
        if (o.status[r] == -1) waitpid(pids[r], &st, 0);
      break;
    }
    usleep(10000);
  }
  o.seconds = elapsed();
  for (int r = 0; r < n; ++r) {
    std::ifstream f(files[r]);
    std::stringstream ss;
    ss << f.rdbuf();
    o.output[r] = ss.str();
    unlink(files[r].c_str());
  }
  return o;
}

}  // namespace weft_test

namespace weft_test {

// The value of element i of rank's non-exact input, before rounding to a type.
static double NonExactValue(int rank, size_t i, uint64_t seed) {
  const uint64_t h = Hash(seed ^ 0x0ddba11, rank, i);
  const double significand = 1.0 + static_cast<double>(h >> 12 & 0xFFFFFFFFFFull) / 1099511627776.0;
  const int exponent = static_cast<int>((h >> 4) % 17) - 8;
  return ((h & 1) ? -1.0 : 1.0) * std::ldexp(significand, exponent);
}

void StoreNonExactInput(void* buf, weftDataType_t t, int rank, size_t i, uint64_t seed) {
  Store(buf, t, i, NonExactValue(rank, i, seed));
}

double NonExactInput(weftDataType_t t, int rank, size_t i, uint64_t seed) {
  unsigned char tmp[8];
  Store(tmp, t, 0, NonExactValue(rank, i, seed));
  return Load(tmp, t, 0);
}

double AddInType(weftDataType_t t, double a, double b) {
  unsigned char tmp[8];
  if (t == weftFloat64) return a + b;
  Store(tmp, t, 0, static_cast<float>(a) + static_cast<float>(b));  // float32 op, rounded once
  return Load(tmp, t, 0);
}

double DivideInType(weftDataType_t t, double x, int n) {
  unsigned char tmp[8];
  if (t == weftFloat64) return x / n;
  Store(tmp, t, 0, static_cast<float>(x) / static_cast<float>(n));
  return Load(tmp, t, 0);
}

double SumInOrder(weftDataType_t t, const std::vector<int>& ranks, size_t i, uint64_t seed) {
  double acc = 0;
  for (size_t k = 0; k < ranks.size(); ++k) {
    const double v = NonExactInput(t, ranks[k], i, seed);
    acc = k == 0 ? v : AddInType(t, acc, v);
  }
  return acc;
}

}  // namespace weft_test
