// The C API's argument checks, error reporting and registry of live communicators
// (api_internal.h). Every entry point turns internal Status values into a weftResult_t and
// records the message for weftGetLastError() on the calling thread.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "common/log.h"
#include "compress/compress_error.h"
#include "compress/job_wide_compression.h"
#include "core/api_internal.h"
#include "core/bootstrap.h"
#include "core/device_ipc.h"
#include "core/device_progress.h"
#include "core/init.h"
#include "kernels/dtype.h"

namespace weft {
namespace {
thread_local std::string t_last_error;
std::mutex g_comms_mu;
std::set<weftComm*> g_comms;  // live handles (detects use after destroy)
// Bumped whenever a handle leaves g_comms. A thread remembers the last handle it found live
// and the generation it saw then: while no communicator was freed since, the handle is still
// live and the lookup under the global mutex is skipped (every collective call checks its
// communicator; the mutex and the set walk were a measurable part of a tiny allreduce).
std::atomic<uint64_t> g_comms_freed{0};
thread_local const weftComm* t_live_comm = nullptr;
thread_local uint64_t t_live_comm_freed = 0;
}  // namespace

uint64_t CommsFreedCount() { return g_comms_freed.load(std::memory_order_acquire); }

void SetLastErrorMessage(const std::string& message) { t_last_error = message; }
const std::string& LastErrorMessage() { return t_last_error; }

weftResult_t Report(const Status& s) {
  if (!s.ok()) {
    t_last_error = s.message();
    WEFT_WARN("%s: %s", weftGetErrorString(s.code()), s.message().c_str());
  }
  return s.code();
}

std::string PtrStr(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

Status CheckType(weftDataType_t t) {
  if (IsValidDataType(t)) return OkStatus();
  if (t == weftFloat8e4m3 || t == weftFloat8e5m2)
    return InvalidArgument("datatype=" + std::to_string(static_cast<int>(t)) +
                           " (fp8) is reserved and not yet supported by collectives");
  return InvalidArgument("datatype=" + std::to_string(static_cast<int>(t)) +
                         " is not a valid weftDataType_t");
}

Status CheckOp(weftRedOp_t op) {
  if (IsValidRedOp(op)) return OkStatus();
  return InvalidArgument("op=" + std::to_string(static_cast<int>(op)) +
                         " is not a valid weftRedOp_t");
}

// count * multiplier * elem must fit in a signed size (no buffer can be larger).
Status CheckCount(const char* name, size_t count, size_t multiplier, size_t elem) {
  const size_t limit = static_cast<size_t>(std::numeric_limits<ptrdiff_t>::max());
  if (elem == 0) return OkStatus();
  // count * multiplier * elem <= limit, by overflow-checked multiplication: the same test as
  // count <= limit / multiplier / elem without its two divisions (~80 cycles on every call).
  size_t blocks = 0, bytes = 0;
  if (!__builtin_mul_overflow(count, multiplier, &blocks) &&
      !__builtin_mul_overflow(blocks, elem, &bytes) && bytes <= limit)
    return OkStatus();
  return InvalidArgument(std::string(name) + "=" + std::to_string(count) +
                         " overflows: " + std::to_string(count) + " x " +
                         std::to_string(multiplier) + " x " + std::to_string(elem) +
                         " bytes does not fit in a buffer");
}

Status CheckBuffer(const char* name, const void* p, size_t count) {
  if (p == nullptr && count > 0)
    return InvalidArgument(std::string(name) + " is NULL with count=" + std::to_string(count));
  return OkStatus();
}

Status CheckRank(const char* name, int value, const weftComm* comm) {
  if (value < 0 || value >= comm->nranks)
    return InvalidArgument(std::string(name) + "=" + std::to_string(value) +
                           " is outside [0, " + std::to_string(comm->nranks) + ")");
  return OkStatus();
}

// One side of an all-to-allv: counts[p] elements at displs[p]. Every block's end
// (displs[p] + counts[p]) and its size in bytes, and the sum of all counts, are computed
// without wrap-around: an unchecked unsigned sum lets (SIZE_MAX - 1) + 2 == 0 pass and the
// copy then reads or writes before the buffer. *extent = elements the buffer must hold.
Status CheckBlockTable(const char* side, const size_t* counts, const size_t* displs, int nranks,
                       size_t elem, size_t* extent, const char* displs_name) {
  const std::string cname = std::string(side) + "counts";
  const std::string dname = displs_name != nullptr ? displs_name : side[0] == 's' ? "sdispls" : "rdispls";
  size_t total = 0;
  *extent = 0;
  for (int p = 0; p < nranks; ++p) {
    const std::string at = "[" + std::to_string(p) + "]";
    WEFT_RETURN_IF_ERROR(CheckCount((cname + at).c_str(), counts[p], 1, elem));
    size_t end = 0;
    if (__builtin_add_overflow(displs[p], counts[p], &end))
      return InvalidArgument(dname + at + "=" + std::to_string(displs[p]) + " + " + cname + at +
                             "=" + std::to_string(counts[p]) + " overflows size_t");
    Status fits = CheckCount((dname + at + " + " + cname + at).c_str(), end, 1, elem);
    if (!fits.ok()) return fits;
    if (__builtin_add_overflow(total, counts[p], &total))
      return InvalidArgument("the sum of " + cname + " overflows size_t (at " + cname + at + "=" +
                             std::to_string(counts[p]) + ")");
    if (counts[p] > 0) *extent = std::max(*extent, end);
  }
  return CheckCount(("sum of " + cname).c_str(), total, 1, elem);
}

Status CheckLiveComm(const weftComm* comm) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  const uint64_t freed = g_comms_freed.load(std::memory_order_acquire);
  if (comm != t_live_comm || freed != t_live_comm_freed) {
    std::lock_guard<std::mutex> l(g_comms_mu);
    if (!g_comms.count(const_cast<weftComm*>(comm)))
      return InvalidArgument("comm=" + PtrStr(comm) +
                             " is not a live communicator (destroyed, or never initialized)");
    t_live_comm = comm;
    // Read under the mutex: a handle erased after this point bumps the counter past it.
    t_live_comm_freed = g_comms_freed.load(std::memory_order_relaxed);
  }
  return CheckComm(comm);
}

bool IsLiveComm(const weftComm* comm) {
  std::lock_guard<std::mutex> l(g_comms_mu);
  return g_comms.count(const_cast<weftComm*>(comm)) > 0;
}

weftComm* NewComm() {
  auto* c = new weftComm();
  InitCommon(c);
  std::lock_guard<std::mutex> l(g_comms_mu);
  g_comms.insert(c);
  return c;
}

void FreeComm(weftComm* c, const Status& why) {
  // Device calls still queued run (or fail) before the communicator goes away.
  StopDeviceProgress(c);
  ReleaseIpc(c);  // its window, after the device calls that used it
  // Compression's per-communicator state: its host-tier sub-communicators and the
  // WEFT_COMPRESSION residuals (keyed by this address, which a new communicator may reuse).
  compress::ReleaseCommunicator(c);
  {
    std::lock_guard<std::mutex> l(g_comms_mu);
    g_comms.erase(c);
    g_comms_freed.fetch_add(1, std::memory_order_release);
  }
  for (auto& t : c->transports) t->Abort(why);
  if (c->bootstrap) c->bootstrap->Abort();
  {
    // Wait for an operation still running on another thread (Abort from a watchdog) to
    // notice the aborted transports and return before freeing what it uses.
    std::lock_guard<std::mutex> l(c->exec_mu);
    c->magic = 0;
  }
  delete c;
}

}  // namespace weft
