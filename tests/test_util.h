// Test helpers: thread-per-rank communicators, closed-form inputs and expected values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft_test {

// Creates n thread-per-rank communicators (weftCommInitAll), runs fn(comm, rank) on n
// threads, destroys the communicators. Returns the first failure message (empty = all ok).
std::string RunRanks(int n, const std::function<std::string(weftComm_t, int)>& fn);
// Same with existing communicators.
std::string RunOnComms(const std::vector<weftComm_t>& comms,
                       const std::function<std::string(weftComm_t, int)>& fn);

// A loopback TCP port that refuses every connection and that no other test can take while
// the returned socket is open (bound, never listening): for tests of connect timeouts. A
// closed listener's port would do until a test running beside it (ctest -j) took it. Returns
// the socket (close it at the end; -1 on failure) and sets *port.
int HoldRefusingLoopbackPort(int* port);

const std::vector<weftDataType_t>& AllTypes();
const std::vector<weftRedOp_t>& AllOps();
std::string TypeName(weftDataType_t t);
std::string OpName(weftRedOp_t o);

// Input value of `rank` at element i for `op`, chosen so every reduction order is exact in
// every type (small integers; products of 1s and 2s).
double InputValue(weftRedOp_t op, int rank, size_t i);
// Writes value v (an exact small number) as type t at dst[i].
void Store(void* dst, weftDataType_t t, size_t i, double v);
// Reads element i of type t as double.
double Load(const void* src, weftDataType_t t, size_t i);
// Fills buf (count elements) with rank's inputs starting at element offset `base`.
void FillInputs(void* buf, weftDataType_t t, weftRedOp_t op, int rank, size_t count,
                size_t base = 0);
// The exact expected reduction over nranks at element i, as the library must produce it
// (wrapping integers, avg divided once and rounded in the type).
double Expected(weftDataType_t t, weftRedOp_t op, int nranks, size_t i);
// Compares count elements of buf against Expected(.., base + k); returns "" or a message.
std::string CheckReduced(const void* buf, weftDataType_t t, weftRedOp_t op, int nranks,
                         size_t count, size_t base = 0);

// Path of a built binary (tools, tests) in the build tree.
std::string BinPath(const std::string& name);

// ---- guarded buffers and the collective harness (thread-per-rank and multi-process) ----

// A buffer with kGuardBytes of its own pattern before and after the caller's bytes, so a
// collective that writes out of bounds is caught by CheckGuards (every harness call checks).
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 64;
  explicit GuardedBuffer(size_t bytes, unsigned char fill = 0xAB);
  unsigned char* data() { return storage_.data() + kGuardBytes; }
  const unsigned char* data() const { return storage_.data() + kGuardBytes; }
  size_t size() const { return bytes_; }
  // "" when both guards hold their pattern, else names `what`, the side and the first byte hit.
  std::string CheckGuards(const std::string& what) const;

 private:
  unsigned char GuardByte(size_t k) const;
  size_t bytes_;
  uint64_t seed_ = 0;
  std::vector<unsigned char> storage_;
};

// One collective call as the harness runs it. `collective` uses the WEFT_ALGO names:
// allreduce, reducescatter, allgather, broadcast, reduce, alltoall, alltoallv, barrier.
struct CollectiveCase {
  std::string collective;
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
  size_t count = 0;
  bool in_place = false;
  int root = 0;
  uint64_t seed = 1;  // varies the inputs between calls
};
std::string Describe(const CollectiveCase& c);

// Inputs chosen so the result is exact in every reduction order (so any algorithm must match
// the reference bit for bit), yet not trivial: integers span the whole type and wrap; float
// sums are halves in [-8, 8] (negative, exact); products are +-2^k; max/min see non-exact
// values, -0/+0, +-inf and NaN. Writes element i of rank's contribution.
void StoreOrderFreeInput(void* buf, weftDataType_t t, weftRedOp_t op, int rank, size_t i,
                         uint64_t seed);
// The reference result for element i over nranks, as raw bits in dst[0..typesize): integers
// wrap, avg sums then divides once (floats x / n rounded once; integers truncate to zero).
void OrderFreeExpected(void* dst, weftDataType_t t, weftRedOp_t op, int nranks, size_t i,
                       uint64_t seed);
// Bitwise comparison of element i of two buffers; NaN equals any NaN (payloads differ by ISA).
bool SameElement(const void* a, const void* b, weftDataType_t t, size_t i);

// Runs `c` on this rank with guarded buffers and checks everything the call promises: the
// result against the reference, the guards around sendbuff and recvbuff, an unmodified
// sendbuff (out of place), an untouched recvbuff on non-roots of reduce. Returns "" or a
// message naming the case. `code` (optional) receives the call's result.
std::string RunCollectiveCase(weftComm_t comm, int rank, int nranks, const CollectiveCase& c,
                              weftResult_t* code = nullptr);

using TypeOp = std::pair<weftDataType_t, weftRedOp_t>;
// Every (dtype, op) pair; for data-movement collectives only the dtype matters.
std::vector<TypeOp> AllTypeOps();
bool IsReduction(const std::string& collective);
// The sweep the forced-algorithm tests run for one collective on n ranks: counts 0, 1 and
// chunk*k - 1, chunk*k, chunk*k + 1 elements of each dtype (chunk = chunk_bytes / typesize,
// k = 2n + 1, so every rank's share spans more than one chunk), in place and out of place
// (no in-place all-to-allv), each (dtype, op) of `combos`, roots rotating over the ranks.
std::vector<CollectiveCase> ForcedSweep(const std::string& collective, int n, size_t chunk_bytes,
                                        const std::vector<TypeOp>& combos);
// Runs `cases` in order on this rank; after a wrong result it goes on (so the ranks stay in
// step) and returns the first failure; it stops at a failed call. With `algorithm` non-empty,
// every call with count > 0 must report it through weftCommGetLastAlgorithm.
std::string RunSweep(weftComm_t comm, int rank, int nranks, const std::vector<CollectiveCase>& cases,
                     const std::string& algorithm);
// ---- inputs that expose the reduction order (floating types) ----
// Element i of rank's input: a value that is not exact in sums (random significand, exponents
// spread over about 2^-8..2^8, both signs), so different association orders give different
// bits. Stored in the type (rounded once).
void StoreNonExactInput(void* buf, weftDataType_t t, int rank, size_t i, uint64_t seed);
// The same element as a double (exactly the value stored in the type).
double NonExactInput(weftDataType_t t, int rank, size_t i, uint64_t seed);
// a + b as one pairwise Reduce step in type t (weft's documented semantics): float32/float64
// in the type, float16/bfloat16 in float32 rounded once to the type. a and b hold values of t.
double AddInType(weftDataType_t t, double a, double b);
// avg's single final division: x / n in the type (float16/bfloat16: in float32, rounded once).
double DivideInType(weftDataType_t t, double x, int n);
// The sum of the ranks' inputs at element i added in exactly the order `ranks` lists them,
// ((x[ranks0] + x[ranks1]) + x[ranks2]) + ..., each step rounded in the type.
double SumInOrder(weftDataType_t t, const std::vector<int>& ranks, size_t i, uint64_t seed);

// ---- processes ----
struct LaunchOutcome {
  std::vector<int> status;  // raw wait status per process (-1: killed by the time limit)
  std::vector<std::string> output;  // stdout + stderr per process
  double seconds = 0;
  bool timed_out = false;
};
// Starts n processes of argv with the weft environment (WEFT_RANK, WEFT_WORLD_SIZE,
// WEFT_LOCAL_RANK, WEFT_ROOT on a free loopback port, WEFT_SECRET) plus `env` (applied
// after, so it may override or, with an empty value, unset those; in values "{rank}" becomes
// the process index r, "{rrank}" n - 1 - r, "{port}" the rendezvous port); waits at most
// timeout_s * SlowdownFactor(), then kills what is left. With `must_finish` non-empty, the
// others are killed as soon as those ranks have exited.
LaunchOutcome LaunchRanks(int n, const std::vector<std::string>& argv,
                          const std::vector<std::pair<std::string, std::string>>& env,
                          double timeout_s, const std::vector<int>& must_finish = {});
// Like LaunchRanks, but each process is a fork of this one that runs child(r) in that
// environment (its return value is the exit status; stdout and stderr are captured).
LaunchOutcome ForkRanks(int n, const std::function<int(int rank)>& child,
                        const std::vector<std::pair<std::string, std::string>>& env,
                        double timeout_s, const std::vector<int>& must_finish = {});
bool ExitedZero(int status);
// Every rank's output, each under a "--- rank r:" line (for failure messages).
std::string AllOutput(const LaunchOutcome& o);
// The transports multi-process tests run over: shm, tcp, and ucx when weft is built with it.
std::vector<std::string> ProcessTransports();
// The environment that makes the traffic between a job's processes take `transport`: "shm"
// (nothing to set), "tcp" (shared memory off), "ucx" (shared memory off, UCX's tcp lane with
// zero-copy off: tests/fault_matrix_test.cc says why).
std::vector<std::pair<std::string, std::string>> TransportEnv(const std::string& transport);
// Factor by which a test scales a bound on a duration: WEFTTEST_SLOWDOWN (>= 1; scripts/
// sanitize_env.sh sets it, sanitized code being slower; not WEFT_*, weft warns about unknown
// WEFT_* names), 1 when unset so the normal suite keeps its bounds. Scales LaunchRanks' limit.
double SlowdownFactor();
// True when this test executable is built with ThreadSanitizer (gcc defines
// __SANITIZE_THREAD__, clang reports __has_feature(thread_sanitizer)). TSan does not support a
// process that forks while it has threads and then starts threads in the child ("starting new
// threads after multi-threaded fork is not supported"): such a test skips under it, saying so.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kBuiltWithThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kBuiltWithThreadSanitizer = true;
#else
inline constexpr bool kBuiltWithThreadSanitizer = false;
#endif
#else
inline constexpr bool kBuiltWithThreadSanitizer = false;
#endif
// A loopback TCP port that was free a moment ago (for WEFT_ROOT in tests).
int FreeLoopbackPort();

// A tuning file (WEFT_TUNING_FILE) forcing `algorithm` with `chunk_bytes` chunks on one channel
// for every size of `collective`; returns its path (under /tmp, unique per process and name).
std::string WriteTuningFile(const std::string& collective, const std::string& algorithm,
                            size_t chunk_bytes);

// A codec spec for tests: weftCompressionDefault's, with these fields.
inline weftCompression CodecSpec(weftCodec_t codec, uint32_t block, uint32_t flags, float ratio,
                                 uint64_t seed) {
  weftCompression s;
  weftCompressionDefault(codec, &s);
  s.block = block;
  s.flags = flags;
  s.ratio = ratio;
  s.seed = seed;
  return s;
}

}  // namespace weft_test
