#include "core/device_calls.h"

#include <memory>
#include <string>

#include "core/api_internal.h"
#include "core/device_ipc.h"
#include "core/device_progress.h"
#include "core/device_staging.h"
#include "device/device_runtime.h"

namespace weft {
namespace {

using device::DeviceRuntime;
using device::EventHandle;

std::string Describe(const DeviceOps& ops) {
  if (ops.size() != 1) return "group of " + std::to_string(ops.size()) + " operations";
  if (const auto* p = std::get_if<P2POp>(&ops[0])) return p->is_send ? "send" : "recv";
  return CollectiveName(std::get<CollectiveCall>(ops[0]).collective);
}

bool IsDeviceStream(weftStream_t stream) {
  if (stream == nullptr || LookupStream(stream) != nullptr) return false;
  DeviceRuntime& rt = device::ActiveRuntime();
  return rt.DeviceCount() > 0 && rt.StreamDevice(stream) >= 0;
}

// What a queued call owns until its progress job has finished with it.
struct Job {
  std::vector<StagedPiece> pieces;
  char* staging = nullptr;
  size_t staging_class = 0;
  std::vector<EventHandle> inputs_ready;  // per piece: its device->staging copies are done
  EventHandle outputs_copied = nullptr;   // every staging->device copy is done
  // The progress counter: the host collective of pieces [0, *flag) has finished.
  uint32_t* flag() const { return reinterpret_cast<uint32_t*>(staging); }
  void Release(DeviceRuntime& rt) {
    for (EventHandle e : inputs_ready) (void)rt.EventDestroy(e);
    if (outputs_copied != nullptr) (void)rt.EventDestroy(outputs_copied);
    if (staging != nullptr) PutStaging(staging_class, staging);
  }
};

// The stream half: every piece's copies in (each followed by its event), then per piece a
// wait for the progress counter and the copies back; last, the event that frees the staging.
// The copies in of piece k+1 overlap the host collective of piece k, and the copies back of
// piece k overlap the collective of piece k+1.
Status EnqueueStreamSide(DeviceRuntime& rt, Job* job, weftStream_t stream) {
  for (size_t k = 0; k < job->pieces.size(); ++k) {
    for (const StagedRegion& r : job->pieces[k].regions)
      if (r.read)
        WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(job->staging + r.staging_offset, r.dev, r.bytes, stream));
    WEFT_RETURN_IF_ERROR(rt.EventRecord(job->inputs_ready[k], stream));
  }
  for (size_t k = 0; k < job->pieces.size(); ++k) {
    WEFT_RETURN_IF_ERROR(rt.WaitFlag(stream, job->flag(), static_cast<uint32_t>(k + 1)));
    for (const StagedRegion& r : job->pieces[k].regions)
      if (r.written)
        WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(r.dev, job->staging + r.staging_offset, r.bytes, stream));
  }
  return rt.EventRecord(job->outputs_copied, stream);
}

// Allocates the job's staging and events and queues the stream half.
Status PrepareJob(DeviceRuntime& rt, size_t staging_bytes, Job* job, weftStream_t stream) {
  job->staging_class = StagingSizeClass(staging_bytes);
  WEFT_RETURN_IF_ERROR(GetStaging(rt, &job->staging_class, &job->staging));
  __atomic_store_n(job->flag(), 0u, __ATOMIC_RELEASE);  // reused, or not zeroed
  job->inputs_ready.assign(job->pieces.size(), nullptr);
  for (EventHandle& e : job->inputs_ready) WEFT_RETURN_IF_ERROR(rt.EventCreate(&e));
  WEFT_RETURN_IF_ERROR(rt.EventCreate(&job->outputs_copied));
  return EnqueueStreamSide(rt, job, stream);
}

// The progress half, on the communicator's thread: piece by piece, wait for its inputs, run
// the host collective on the staging, advance the counter. After a failure the remaining
// pieces are skipped but the counter still advances, so the stream never hangs on it.
void RunJob(weftComm* comm, Job* job, const std::string& what) {
  DeviceRuntime& rt = device::ActiveRuntime();
  Status failed;
  for (size_t k = 0; k < job->pieces.size(); ++k) {
    Status st = rt.EventSynchronize(job->inputs_ready[k]);
    if (st.ok() && failed.ok())
      st = job->pieces[k].host_work ? job->pieces[k].host_work(job->staging)
                                    : RunOps(comm, std::move(job->pieces[k].ops));
    if (!st.ok() && failed.ok()) {
      failed = st;
      SetDeviceAsyncError(comm, st.WithContext(what));
    }
    __atomic_store_n(job->flag(), static_cast<uint32_t>(k + 1), __ATOMIC_RELEASE);
  }
  (void)rt.EventSynchronize(job->outputs_copied);
  job->Release(rt);
}

// Device buffers run on a device stream (or NULL), never on a weft host stream.
Status RefuseHostStream(weftStream_t stream) {
  if (stream == nullptr || LookupStream(stream) == nullptr) return OkStatus();
  return InvalidArgument("stream=" + PtrStr(stream) +
                         " is a weft host stream, but the buffers are device memory: pass a "
                         "device stream (weftDeviceStreamCreate, a cudaStream_t) or NULL");
}

// Queues a planned job: its stream half on stream, its progress half on comm's thread.
Status SubmitJob(weftComm* comm, std::shared_ptr<Job> job, size_t staging_bytes, weftStream_t stream,
                 const std::string& what) {
  DeviceRuntime& rt = device::ActiveRuntime();
  Status s = PrepareJob(rt, staging_bytes, job.get(), stream);
  if (!s.ok()) {
    // Nothing reached the progress thread: release here, after letting a stream that already
    // queued part of the sequence drain (it would wait for a counter nobody advances).
    if (job->staging != nullptr) {
      __atomic_store_n(job->flag(), static_cast<uint32_t>(job->pieces.size()), __ATOMIC_RELEASE);
      (void)rt.StreamSynchronize(stream);
    }
    job->Release(rt);
    return s.WithContext("device call");
  }
  Retarget(&job->pieces, job->staging);
  EnqueueDeviceJob(comm, [comm, job, what] { RunJob(comm, job.get(), what); });
  return OkStatus();
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

Status SubmitDeviceOps(weftComm* comm, DeviceOps ops, weftStream_t stream) {
  WEFT_RETURN_IF_ERROR(RefuseHostStream(stream));
  bool taken = false;
  Status ipc = TrySubmitIpc(comm, ops, stream, &taken);  // device to device (device_ipc.h)
  if (taken) return ipc;
  const std::string what = "rank " + std::to_string(comm->rank) + ": " + Describe(ops) +
                           " on device buffers (stream " + PtrStr(stream) + ")";
  auto job = std::make_shared<Job>();
  size_t staging_bytes = 0;
  job->pieces = PlanPieces(std::move(ops), comm->nranks, comm->rank, device::ActiveRuntime(), &staging_bytes);
  return SubmitJob(comm, std::move(job), staging_bytes, stream, what);
}

bool TouchesDevice(const std::vector<WorkExtent>& extents, weftStream_t stream) {
  DeviceRuntime& rt = device::ActiveRuntime();
  if (rt.DeviceCount() == 0) return false;
  for (const WorkExtent& e : extents)
    if (e.ptr != nullptr && e.bytes > 0 && rt.PointerInfo(e.ptr).is_device) return true;
  return IsDeviceStream(stream);
}

Status StageHostWork(weftComm* comm, const std::vector<WorkExtent>& extents, HostWork work,
                     weftStream_t stream, const std::string& what) {
  WEFT_RETURN_IF_ERROR(RefuseHostStream(stream));
  auto job = std::make_shared<Job>();
  size_t staging_bytes = 0;
  StagedPiece piece = PlanHostWork(extents, device::ActiveRuntime(), &staging_bytes);
  job->pieces.push_back(std::move(piece));
  const StagedPiece* planned = &job->pieces[0];  // stable: the vector is not resized again
  job->pieces[0].host_work = [planned, work = std::move(work)](char* staging) {
    return work([planned, staging](const void* p) { return StagingAddress(*planned, staging, p); });
  };
  const std::string where = "rank " + std::to_string(comm->rank) + ": " + what +
                            " on device buffers, staged (stream " + PtrStr(stream) + ")";
  return SubmitJob(comm, std::move(job), staging_bytes, stream, where);
}

}  // namespace weft
