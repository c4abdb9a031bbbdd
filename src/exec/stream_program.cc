#include "exec/stream_program.h"

#include <string>

namespace weft {
namespace {

struct Lowering {
  const StreamBuffers& b;
  ipc::IpcTransport& t;
  device::DeviceRuntime& rt;
  device::StreamHandle s;

  char* At(const Region& r) const {
    const size_t off = r.offset * b.elem;
    switch (r.buffer) {
      case Buffer::kInput: return const_cast<char*>(b.input) + off;
      case Buffer::kOutput: return b.output + off;
      case Buffer::kScratch: return t.LocalWindow() + off;
    }
    return nullptr;
  }
  const char* Remote(const Step& st) const { return t.PeerWindow(st.peer) + st.remote.offset * b.elem; }

  // dst = src, skipped when they are the same bytes (in place); a partial overlap is a
  // schedule the host executor would also refuse to copy with a plain memcpy.
  Status Copy(char* dst, const char* src, size_t count) const {
    const size_t bytes = count * b.elem;
    if (bytes == 0 || dst == src) return OkStatus();
    if (dst < src + bytes && src < dst + bytes)
      return InternalError("copy between overlapping regions");
    return t.Copy(dst, src, bytes, s);  // the copy engine or an SM kernel, by size
  }

  Status Run(const Step& st) const {
    switch (st.op) {
      case StepOp::kCopy: return Copy(At(st.dst), At(st.src), st.src.count);
      case StepOp::kDirectRead: return Copy(At(st.dst), Remote(st), st.remote.count);
      case StepOp::kReduce:
        if (st.dst.count == 0) return OkStatus();
        return rt.LaunchReduce(At(st.dst), At(st.dst), At(st.src), st.dst.count, b.dtype, b.op, s);
      case StepOp::kDirectReduce:
        if (st.dst.count == 0) return OkStatus();
        return rt.LaunchReduce(At(st.dst), At(st.src), Remote(st), st.dst.count, b.dtype, b.op, s);
      case StepOp::kFinalize:
        if (st.dst.count == 0) return OkStatus();
        return rt.LaunchFinalize(At(st.dst), st.dst.count, b.dtype, b.op, t.nranks(), s);
      case StepOp::kSignal: return t.Signal(st.peer, s);
      case StepOp::kWait: return t.Wait(st.peer, s);
      default:
        return InternalError(std::string("step ") + StepOpName(st.op) + " cannot run on a stream");
    }
  }
};

}  // namespace

bool IsStreamStep(StepOp op) {
  switch (op) {
    case StepOp::kCopy:
    case StepOp::kReduce:
    case StepOp::kDirectRead:
    case StepOp::kDirectReduce:
    case StepOp::kFinalize:
    case StepOp::kSignal:
    case StepOp::kWait:
      return true;
    default:
      return false;
  }
}

bool ScratchFits(const RankSchedule& rs, size_t elem, size_t window_bytes) {
  return rs.scratch_count <= window_bytes / (elem == 0 ? 1 : elem);
}

bool StreamLowerable(const RankSchedule& rs, size_t elem, size_t window_bytes) {
  if (!ScratchFits(rs, elem, window_bytes)) return false;
  for (const Step& st : rs.steps)
    if (!IsStreamStep(st.op)) return false;
  return true;
}

Status EnqueueStreamStep(const Step& step, const StreamBuffers& b, ipc::IpcTransport& t,
                         device::DeviceRuntime& rt, device::StreamHandle stream) {
  return Lowering{b, t, rt, stream}.Run(step);
}

Status EnqueueStreamProgram(const RankSchedule& rs, const StreamBuffers& b, ipc::IpcTransport& t,
                            device::DeviceRuntime& rt, device::StreamHandle stream) {
  const Lowering l{b, t, rt, stream};
  for (size_t i = 0; i < rs.steps.size(); ++i) {
    Status st = l.Run(rs.steps[i]);
    if (!st.ok())
      return st.WithContext("stream step " + std::to_string(i) + " (" + StepOpName(rs.steps[i].op) + ")");
  }
  return OkStatus();
}

}  // namespace weft
