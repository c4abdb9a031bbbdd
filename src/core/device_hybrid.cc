#include "core/device_hybrid.h"

#include <algorithm>
#include <string>
#include <vector>

#include "algorithms/step_table.h"
#include "core/call_check.h"
#include "core/device_progress.h"
#include "core/device_staging.h"
#include "device/device_runtime.h"
#include "exec/stream_program.h"
#include "kernels/dtype.h"

namespace weft {

using device::DeviceRuntime;
using device::EventHandle;

namespace {

// A device byte range a host segment touches, and where it sits in the segment's staging.
struct StagedRange {
  char* dev = nullptr;
  size_t bytes = 0;
  size_t offset = 0;  // from the segment's base in the staging block
};

struct HostSegment {
  size_t first = 0, end = 0;       // steps [first, end) of the rank's schedule
  std::vector<StagedRange> ranges;
  size_t base = 0;                 // the segment's offset in the staging block
  size_t bytes = 0;
  RankSchedule steps;              // retargeted to the staging (Buffer::kOutput, from base)
};

bool MessageStep(StepOp op) {
  const StepSemantics& m = SemanticsOf(op);
  return (m.receives || m.sends != StepOperand::kNone) && !m.reads_remote && !m.signals && !m.waits &&
         op != StepOp::kEncode && op != StepOp::kDecode && op != StepOp::kDecodeReduce;
}

char* DeviceAddress(const Region& r, const CollectiveCall& call, ipc::IpcTransport& t, size_t elem) {
  char* base = r.buffer == Buffer::kInput ? const_cast<char*>(static_cast<const char*>(call.sendbuff))
               : r.buffer == Buffer::kOutput ? static_cast<char*>(call.recvbuff)
                                             : t.LocalWindow();
  return base + r.offset * elem;
}

// The regions of the segment's steps that hold data (read or written).
template <typename F>
void ForEachRegion(const RankSchedule& rs, size_t first, size_t end, F&& f) {
  for (size_t i = first; i < end; ++i) {
    const Step& st = rs.steps[i];
    const StepSemantics& m = SemanticsOf(st.op);
    if (m.reads_src && st.src.count > 0) f(st.src);
    if ((m.writes_dst || m.reads_dst) && st.dst.count > 0) f(st.dst);
  }
}

// Per buffer the span its regions cover; spans that overlap (in-place calls) merge, so the
// staging keeps the call's aliasing. Lays the ranges out from offset 0, each 64-aligned.
Status PlanRanges(const RankSchedule& rs, HostSegment* seg, const CollectiveCall& call,
                  ipc::IpcTransport& t, size_t elem) {
  struct Span { char* lo = nullptr; char* hi = nullptr; };
  Span spans[3];
  ForEachRegion(rs, seg->first, seg->end, [&](const Region& r) {
    Span& s = spans[static_cast<int>(r.buffer)];
    char* lo = DeviceAddress(r, call, t, elem);
    char* hi = lo + r.count * elem;
    s.lo = s.lo == nullptr ? lo : std::min(s.lo, lo);
    s.hi = s.hi == nullptr ? hi : std::max(s.hi, hi);
  });
  std::vector<Span> merged;
  for (const Span& s : spans)
    if (s.lo != nullptr) merged.push_back(s);
  std::sort(merged.begin(), merged.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  std::vector<Span> out;
  for (const Span& s : merged) {
    if (!out.empty() && s.lo < out.back().hi) {
      if ((s.lo - out.back().lo) % static_cast<ptrdiff_t>(elem) != 0)
        return InvalidArgument("the send and receive buffers overlap at an offset that is not a "
                               "whole number of elements");
      out.back().hi = std::max(out.back().hi, s.hi);
    } else {
      out.push_back(s);
    }
  }
  size_t at = 0;
  for (const Span& s : out) {
    const size_t bytes = static_cast<size_t>(s.hi - s.lo);
    seg->ranges.push_back(StagedRange{s.lo, bytes, at});
    at += (bytes + 63) / 64 * 64;
  }
  seg->bytes = at;
  return OkStatus();
}

// The segment's steps with every region moved into its staging (one buffer, kOutput).
void Retarget(const RankSchedule& rs, HostSegment* seg, const CollectiveCall& call,
              ipc::IpcTransport& t, size_t elem) {
  auto move = [&](Region* r) {
    if (r->count == 0) return;
    char* dev = DeviceAddress(*r, call, t, elem);
    for (const StagedRange& g : seg->ranges)
      if (dev >= g.dev && dev < g.dev + g.bytes) {
        r->buffer = Buffer::kOutput;
        r->offset = (g.offset + static_cast<size_t>(dev - g.dev)) / elem;
        return;
      }
  };
  seg->steps.steps.assign(rs.steps.begin() + seg->first, rs.steps.begin() + seg->end);
  for (Step& st : seg->steps.steps) {
    move(&st.src);
    move(&st.dst);
  }
  seg->steps.input_count = seg->steps.output_count = seg->bytes / elem;
  seg->steps.direct_steps = 0;
}

}  // namespace

class HybridJob {
 public:
  std::vector<HostSegment> segments;
  std::vector<EventHandle> ready;       // per segment: its copies into the staging are done
  EventHandle copied_back = nullptr;    // every copy back is done: the staging may go
  char* staging = nullptr;
  size_t staging_class = 0;
  int window = 8;
  uint64_t descriptor_hash = 0;
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
  uint32_t* flag() const { return reinterpret_cast<uint32_t*>(staging); }
  char* SegmentBase(const HostSegment& s) const { return staging + kStagingFlagBytes + s.base; }
  ~HybridJob() {
    DeviceRuntime& rt = device::ActiveRuntime();
    for (EventHandle e : ready) (void)rt.EventDestroy(e);
    if (copied_back != nullptr) (void)rt.EventDestroy(copied_back);
    if (staging != nullptr) PutStaging(staging_class, staging);
  }
};

StreamBuffers StreamBuffersOf(const CollectiveCall& call) {
  StreamBuffers b;
  b.input = static_cast<const char*>(call.sendbuff);
  b.output = static_cast<char*>(call.recvbuff);
  b.elem = TypeSize(call.dtype);
  b.dtype = call.dtype;
  b.op = call.op;
  return b;
}

bool HybridLowerable(const RankSchedule& rs, size_t elem, size_t window_bytes) {
  if (!ScratchFits(rs, elem, window_bytes)) return false;
  for (const Step& st : rs.steps)
    if (!IsStreamStep(st.op) && !MessageStep(st.op)) return false;
  return true;
}

namespace {

// Cuts rs into host segments and plans their staging; returns the staging bytes.
StatusOr<size_t> PlanSegments(const RankSchedule& rs, HybridJob* job, const CollectiveCall& call,
                              ipc::IpcTransport& t, size_t elem) {
  size_t total = 0;
  for (size_t i = 0; i < rs.steps.size();) {
    if (IsStreamStep(rs.steps[i].op)) {
      ++i;
      continue;
    }
    HostSegment seg;
    seg.first = i;
    while (i < rs.steps.size() && !IsStreamStep(rs.steps[i].op)) ++i;
    seg.end = i;
    WEFT_RETURN_IF_ERROR(PlanRanges(rs, &seg, call, t, elem));
    seg.base = total;
    total += seg.bytes;
    Retarget(rs, &seg, call, t, elem);
    job->segments.push_back(std::move(seg));
  }
  return kStagingFlagBytes + total;
}

// The stream half: stream steps as they come; per host segment the copies in, its event, the
// flag wait and the copies back.
Status EnqueueStreamHalf(const RankSchedule& rs, HybridJob* job, const CollectiveCall& call,
                         ipc::IpcTransport& t, weftStream_t stream) {
  DeviceRuntime& rt = device::ActiveRuntime();
  const StreamBuffers b = StreamBuffersOf(call);
  size_t k = 0;
  for (size_t i = 0; i < rs.steps.size();) {
    if (IsStreamStep(rs.steps[i].op)) {
      WEFT_RETURN_IF_ERROR(EnqueueStreamStep(rs.steps[i], b, t, rt, stream)
                               .WithContext("stream step " + std::to_string(i)));
      ++i;
      continue;
    }
    const HostSegment& seg = job->segments[k];
    char* base = job->SegmentBase(seg);
    for (const StagedRange& g : seg.ranges)
      WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(base + g.offset, g.dev, g.bytes, stream));
    WEFT_RETURN_IF_ERROR(rt.EventRecord(job->ready[k], stream));
    WEFT_RETURN_IF_ERROR(rt.WaitFlag(stream, job->flag(), static_cast<uint32_t>(k + 1)));
    for (const StagedRange& g : seg.ranges)
      WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(g.dev, base + g.offset, g.bytes, stream));
    i = seg.end;
    ++k;
  }
  return rt.EventRecord(job->copied_back, stream);
}

}  // namespace

StatusOr<std::shared_ptr<HybridJob>> EnqueueHybrid(weftComm* comm, const CollectiveCall& call,
                                                   const Schedule& plan, ipc::IpcTransport& t,
                                                   weftStream_t stream) {
  DeviceRuntime& rt = device::ActiveRuntime();
  const RankSchedule& rs = plan.ranks[comm->rank];
  const size_t elem = TypeSize(call.dtype);
  auto job = std::make_shared<HybridJob>();
  job->window = plan.window;
  job->dtype = call.dtype;
  job->op = call.op;
  const uint32_t shape = HashCallShape(
      MakeCallDescriptor(call.collective, call.count, call.dtype, call.op, call.root, plan.algorithm + "+ipc"));
  job->descriptor_hash = MixCallType(shape, call.collective, call.dtype, call.op);
  StatusOr<size_t> bytes = PlanSegments(rs, job.get(), call, t, elem);
  if (!bytes.ok()) return bytes.status();
  job->staging_class = StagingSizeClass(*bytes);
  WEFT_RETURN_IF_ERROR(GetStaging(rt, &job->staging_class, &job->staging));
  __atomic_store_n(job->flag(), 0u, __ATOMIC_RELEASE);  // a reused block holds an old count
  job->ready.assign(job->segments.size(), nullptr);
  for (EventHandle& e : job->ready) WEFT_RETURN_IF_ERROR(rt.EventCreate(&e));
  WEFT_RETURN_IF_ERROR(rt.EventCreate(&job->copied_back));
  Status s = EnqueueStreamHalf(rs, job.get(), call, t, stream);
  if (!s.ok()) {
    // Part of the stream half may be queued: let it drain (no flag or wait holds it) before
    // the staging goes back to the pool.
    __atomic_store_n(job->flag(), static_cast<uint32_t>(job->segments.size()), __ATOMIC_RELEASE);
    (void)t.ReleaseWaits();
    (void)rt.StreamSynchronize(stream);
    return s;
  }
  return job;
}

void RunHybrid(weftComm* comm, HybridJob& job, ipc::IpcTransport& t, const std::string& what) {
  DeviceRuntime& rt = device::ActiveRuntime();
  Status failed;
  uint64_t seq = 0;
  {
    std::unique_lock<std::mutex> lock;
    failed = ClaimComm(comm, &lock);
    if (failed.ok()) failed = CheckComm(comm);
    if (failed.ok()) seq = ++comm->collective_seq;
  }
  const uint64_t tag = MakeCallTag(static_cast<uint32_t>(job.descriptor_hash), seq);
  for (size_t k = 0; k < job.segments.size(); ++k) {
    Status st = rt.EventSynchronize(job.ready[k]);
    if (st.ok() && failed.ok()) {
      std::unique_lock<std::mutex> lock;
      st = ClaimComm(comm, &lock);
      char* base = job.SegmentBase(job.segments[k]);
      if (st.ok())
        st = ExecuteOnComm(comm, job.segments[k].steps, job.window, job.dtype, job.op, tag, base,
                           base, what.c_str());
    }
    if (!st.ok() && failed.ok()) {
      failed = st;
      // Now, not at the end: the stream may be parked on a direct wait before the next
      // segment's copies, and the next EventSynchronize would wait for it forever.
      (void)t.ReleaseWaits();
    }
    __atomic_store_n(job.flag(), static_cast<uint32_t>(k + 1), __ATOMIC_RELEASE);
  }
  if (!failed.ok()) SetDeviceAsyncError(comm, failed.WithContext(what));
  (void)rt.EventSynchronize(job.copied_back);
}

}  // namespace weft
