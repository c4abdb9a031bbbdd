#include "core/device_calls.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/api_internal.h"
#include "core/device_progress.h"
#include "device/device_runtime.h"
#include "kernels/dtype.h"

namespace weft {
namespace {

using device::DeviceRuntime;
using device::EventHandle;

// One buffer of a call: where it is and how many bytes the call may touch.
struct Extent {
  char* ptr;
  size_t bytes;
  bool written;
};

size_t AllToAllvExtent(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t end = 0;
  for (size_t i = 0; i < counts.size() && i < displs.size(); ++i)
    if (counts[i] > 0) end = std::max(end, displs[i] + counts[i]);
  return end;
}

void AddExtents(const CollectiveCall& c, int nranks, std::vector<Extent>* out) {
  const size_t elem = TypeSize(c.dtype);
  const size_t n = static_cast<size_t>(nranks);
  size_t send = c.count, recv = c.count;
  switch (c.collective) {
    case Collective::kAllGather: recv = n * c.count; break;
    case Collective::kReduceScatter: send = n * c.count; break;
    case Collective::kAllToAll: send = recv = n * c.count; break;
    case Collective::kAllToAllv:
      send = AllToAllvExtent(c.sendcounts, c.sdispls);
      recv = AllToAllvExtent(c.recvcounts, c.rdispls);
      break;
    case Collective::kBarrier: return;
    default: break;
  }
  out->push_back({static_cast<char*>(const_cast<void*>(c.sendbuff)), send * elem, false});
  out->push_back({static_cast<char*>(c.recvbuff), recv * elem, true});
}

std::vector<Extent> ExtentsOf(const std::vector<std::variant<CollectiveCall, P2POp>>& ops,
                              int nranks) {
  std::vector<Extent> all;
  for (const auto& op : ops) {
    if (const auto* p = std::get_if<P2POp>(&op)) {
      all.push_back({static_cast<char*>(p->buff), p->count * TypeSize(p->dtype), !p->is_send});
    } else {
      AddExtents(std::get<CollectiveCall>(op), nranks, &all);
    }
  }
  return all;
}

// A merged device range and where it lives in the staging block.
struct StagedRegion {
  char* dev;
  size_t bytes;
  bool written;
  size_t staging_offset;
};

constexpr size_t kFlagBytes = 64;  // the `done` flag, alone in its cache line

// Device extents merged where they overlap (in-place and aliased buffers share staging).
std::vector<StagedRegion> PlanRegions(std::vector<Extent> extents, const DeviceRuntime& rt,
                                size_t* staging_bytes) {
  extents.erase(std::remove_if(extents.begin(), extents.end(),
                               [&](const Extent& e) {
                                 return e.ptr == nullptr || e.bytes == 0 ||
                                        !rt.PointerInfo(e.ptr).is_device;
                               }),
                extents.end());
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.ptr < b.ptr; });
  std::vector<StagedRegion> regions;
  for (const Extent& e : extents) {
    if (!regions.empty() && e.ptr < regions.back().dev + regions.back().bytes) {
      StagedRegion& r = regions.back();
      r.bytes = std::max(r.bytes, static_cast<size_t>(e.ptr + e.bytes - r.dev));
      r.written = r.written || e.written;
    } else {
      regions.push_back({e.ptr, e.bytes, e.written, 0});
    }
  }
  size_t offset = kFlagBytes;
  for (StagedRegion& r : regions) {
    r.staging_offset = offset;
    offset += (r.bytes + 63) / 64 * 64;
  }
  *staging_bytes = offset;
  return regions;
}

// The staging address of a device pointer (unchanged for host pointers).
template <typename P>
P ToStaging(P p, const std::vector<StagedRegion>& regions, char* staging) {
  const char* c = static_cast<const char*>(p);
  for (const StagedRegion& r : regions)
    if (c >= r.dev && c < r.dev + r.bytes)
      return static_cast<P>(static_cast<void*>(staging + r.staging_offset + (c - r.dev)));
  return p;
}

void Retarget(std::vector<std::variant<CollectiveCall, P2POp>>* ops,
              const std::vector<StagedRegion>& regions, char* staging) {
  for (auto& op : *ops) {
    if (auto* p = std::get_if<P2POp>(&op)) {
      p->buff = ToStaging(p->buff, regions, staging);
    } else {
      auto& c = std::get<CollectiveCall>(op);
      c.sendbuff = ToStaging(const_cast<void*>(c.sendbuff), regions, staging);
      c.recvbuff = ToStaging(c.recvbuff, regions, staging);
    }
  }
}

std::string Describe(const std::vector<std::variant<CollectiveCall, P2POp>>& ops) {
  if (ops.size() != 1) return "group of " + std::to_string(ops.size()) + " operations";
  if (const auto* p = std::get_if<P2POp>(&ops[0])) return p->is_send ? "send" : "recv";
  return CollectiveName(std::get<CollectiveCall>(ops[0]).collective);
}

bool IsDeviceStream(weftStream_t stream) {
  if (stream == nullptr || LookupStream(stream) != nullptr) return false;
  DeviceRuntime& rt = device::ActiveRuntime();
  return rt.DeviceCount() > 0 && rt.StreamDevice(stream) >= 0;
}

// Pinned staging blocks are kept for reuse (cudaHostAlloc costs milliseconds), by power-of-two
// size class, up to kPoolBytes in all; the rest are freed.
constexpr size_t kPoolBytes = size_t{256} << 20;

size_t SizeClass(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c <<= 1;
  return c;
}

class StagingPool {
 public:
  Status Get(DeviceRuntime& rt, size_t size_class, char** out) {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = free_.find(size_class);
      if (it != free_.end()) {
        *out = it->second;
        free_.erase(it);
        pooled_ -= size_class;
        return OkStatus();
      }
    }
    void* p = nullptr;
    WEFT_RETURN_IF_ERROR(rt.HostAlloc(&p, size_class));
    *out = static_cast<char*>(p);
    return OkStatus();
  }
  void Put(DeviceRuntime& rt, size_t size_class, char* p) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pooled_ + size_class <= kPoolBytes) {
        free_.emplace(size_class, p);
        pooled_ += size_class;
        return;
      }
    }
    (void)rt.HostFree(p);
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, char*> free_;
  size_t pooled_ = 0;
};

StagingPool& Pool() {
  static StagingPool* pool = new StagingPool();  // leaked: jobs may finish during exit
  return *pool;
}

// What a queued call owns until its progress job has finished with it.
struct Job {
  char* staging = nullptr;
  size_t staging_class = 0;
  EventHandle inputs_ready = nullptr;
  EventHandle outputs_copied = nullptr;
  void Release(DeviceRuntime& rt) {
    if (inputs_ready != nullptr) (void)rt.EventDestroy(inputs_ready);
    if (outputs_copied != nullptr) (void)rt.EventDestroy(outputs_copied);
    if (staging != nullptr) Pool().Put(rt, staging_class, staging);
  }
};

// Queues the stream half: copies in, the event, the flag wait, copies out, the event.
Status EnqueueStreamSide(DeviceRuntime& rt, const std::vector<StagedRegion>& regions, Job* job,
                         weftStream_t stream) {
  for (const StagedRegion& r : regions)
    WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(job->staging + r.staging_offset, r.dev, r.bytes, stream));
  WEFT_RETURN_IF_ERROR(rt.EventRecord(job->inputs_ready, stream));
  WEFT_RETURN_IF_ERROR(rt.WaitFlag(stream, reinterpret_cast<uint32_t*>(job->staging), 1));
  for (const StagedRegion& r : regions)
    if (r.written)
      WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(r.dev, job->staging + r.staging_offset, r.bytes, stream));
  return rt.EventRecord(job->outputs_copied, stream);
}

}  // namespace

bool NeedsDevicePath(const weftComm* comm, const CollectiveCall& call, weftStream_t stream) {
  DeviceRuntime& rt = device::ActiveRuntime();
  if (rt.DeviceCount() == 0) return false;  // "none": every pointer is host memory
  if ((call.sendbuff != nullptr && rt.PointerInfo(call.sendbuff).is_device) ||
      (call.recvbuff != nullptr && rt.PointerInfo(call.recvbuff).is_device))
    return true;
  return IsDeviceStream(stream);
}

bool NeedsDevicePath(const weftComm* comm, const std::variant<CollectiveCall, P2POp>& op,
                     weftStream_t stream) {
  if (const auto* c = std::get_if<CollectiveCall>(&op)) return NeedsDevicePath(comm, *c, stream);
  DeviceRuntime& rt = device::ActiveRuntime();
  if (rt.DeviceCount() == 0) return false;
  const P2POp& p = std::get<P2POp>(op);
  return (p.buff != nullptr && rt.PointerInfo(p.buff).is_device) || IsDeviceStream(stream);
}

Status SubmitDeviceOps(weftComm* comm, std::vector<std::variant<CollectiveCall, P2POp>> ops,
                       weftStream_t stream) {
  if (stream != nullptr && LookupStream(stream) != nullptr)
    return InvalidArgument("stream=" + PtrStr(stream) +
                           " is a weft host stream, but the buffers are device memory: pass a "
                           "device stream (weftDeviceStreamCreate, a cudaStream_t) or NULL");
  DeviceRuntime& rt = device::ActiveRuntime();
  size_t staging_bytes = 0;
  const std::vector<StagedRegion> regions = PlanRegions(ExtentsOf(ops, comm->nranks), rt, &staging_bytes);
  auto job = std::make_shared<Job>();
  job->staging_class = SizeClass(staging_bytes);
  Status s = Pool().Get(rt, job->staging_class, &job->staging);
  if (s.ok()) *reinterpret_cast<uint32_t*>(job->staging) = 0;  // reused, or not zeroed
  if (s.ok()) s = rt.EventCreate(&job->inputs_ready);
  if (s.ok()) s = rt.EventCreate(&job->outputs_copied);
  if (s.ok()) s = EnqueueStreamSide(rt, regions, job.get(), stream);
  if (!s.ok()) {
    // Nothing was handed to the progress thread: release here. (A stream that already
    // queued part of the sequence waits for a flag nobody sets; setting it lets it drain.)
    if (job->staging != nullptr) {
      __atomic_store_n(reinterpret_cast<uint32_t*>(job->staging), 1u, __ATOMIC_RELEASE);
      (void)rt.StreamSynchronize(stream);
    }
    job->Release(rt);
    return s.WithContext("device call");
  }
  Retarget(&ops, regions, job->staging);
  const std::string what = "rank " + std::to_string(comm->rank) + ": " + Describe(ops) +
                           " on device buffers (stream " + PtrStr(stream) + ")";
  EnqueueDeviceJob(comm, [comm, job, ops = std::move(ops), what]() mutable {
    DeviceRuntime& runtime = device::ActiveRuntime();
    Status st = runtime.EventSynchronize(job->inputs_ready);
    if (st.ok()) st = RunOps(comm, std::move(ops));
    if (!st.ok()) SetDeviceAsyncError(comm, st.WithContext(what));
    // The stream copies the staging back whatever happened, so it never hangs on a failure.
    __atomic_store_n(reinterpret_cast<uint32_t*>(job->staging), 1u, __ATOMIC_RELEASE);
    (void)runtime.EventSynchronize(job->outputs_copied);
    job->Release(runtime);
  });
  return OkStatus();
}

}  // namespace weft
