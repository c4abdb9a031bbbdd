// The tiny-call path (tiny_program.h): compile a small direct schedule, run it in one loop.
#include "exec/tiny_program.h"

#include <string>

#include "common/settings.h"
#include "exec/executor.h"
#include "kernels/reduce.h"

namespace weft {
namespace {

bool Small(const Region& r, size_t elem) { return r.count * elem <= kTinyMaxRegionBytes; }

// One step as an op; false for a step the tiny path does not run.
bool CompileStep(const Step& s, size_t elem, int nranks, TinyOp* t) {
  t->op = s.op;
  t->peer = s.peer;
  t->dst_buffer = s.dst.buffer;
  t->src_buffer = s.src.buffer;
  t->dst_offset = s.dst.offset * elem;
  t->src_offset = s.src.offset * elem;
  t->remote_offset = s.remote.offset * elem;
  t->count = s.dst.count;
  t->bytes = s.dst.count * elem;
  switch (s.op) {
    case StepOp::kCopy:
    case StepOp::kReduce:
      return Small(s.dst, elem) && Small(s.src, elem) && s.src.count == s.dst.count;
    case StepOp::kFinalize:
      return Small(s.dst, elem);
    case StepOp::kDirectRead:
    case StepOp::kDirectReduce:
      // Zero-copy steps read a peer's Input/Output through its registration: the Runner's.
      return s.remote.buffer == Buffer::kScratch && Small(s.dst, elem) &&
             s.remote.count == s.dst.count && s.peer >= 0 && s.peer < nranks;
    case StepOp::kSignal:
    case StepOp::kWait:
      return s.peer >= 0 && s.peer < nranks;
    default:
      return false;
  }
}

unsigned char* Base(Buffer b, const void* in, void* out, unsigned char* window) {
  switch (b) {
    case Buffer::kInput: return static_cast<unsigned char*>(const_cast<void*>(in));
    case Buffer::kOutput: return static_cast<unsigned char*>(out);
    case Buffer::kScratch: return window;
  }
  return nullptr;
}

// As the executor names a step in its messages.
std::string Describe(const TinyOp& t, size_t index, const char* what) {
  return DescribeStep(what, index, t.op, t.peer);
}

}  // namespace

bool CompileTinyProgram(const RankSchedule& rs, size_t elem, int nranks, TinyProgram* out) {
  TinyProgram p;
  p.scratch_bytes = rs.scratch_count * elem;
  p.ops.resize(rs.steps.size());
  std::vector<uint8_t> firsts;  // per peer: kSignalled | kWaited seen (the executor's FirstTag)
  for (size_t i = 0; i < rs.steps.size(); ++i) {
    const Step& s = rs.steps[i];
    if (!CompileStep(s, elem, nranks, &p.ops[i])) return false;
    if (s.op != StepOp::kSignal && s.op != StepOp::kWait) continue;
    if (static_cast<size_t>(s.peer) >= firsts.size()) firsts.resize(s.peer + 1, 0);
    const uint8_t bit = s.op == StepOp::kSignal ? 1 : 2;
    p.ops[i].tagged = (firsts[s.peer] & bit) == 0;
    firsts[s.peer] |= bit;
  }
  *out = std::move(p);
  return true;
}

StatusOr<size_t> RunTinyProgram(const TinyProgram& prog, DirectTransport* direct, const void* in,
                                void* out, weftDataType_t dtype, weftRedOp_t op, int nranks,
                                uint64_t tag, const char* what) {
  WEFT_RETURN_IF_ERROR(direct->PrepareWindow(prog.scratch_bytes));
  // The tiny path is a compiled form of a host plan: it touches the window with the CPU.
  const MemRef local = direct->LocalWindow();
  if (!local.is_host())
    return InternalError(std::string(what) + ": the tiny-call path runs on host memory only, the " +
                         direct->name() + " window is " + MemKindName(local.kind) + " memory");
  unsigned char* window = static_cast<unsigned char*>(local.ptr);
  for (size_t i = 0; i < prog.ops.size(); ++i) {
    const TinyOp& t = prog.ops[i];
    unsigned char* dst = Base(t.dst_buffer, in, out, window) + t.dst_offset;
    const unsigned char* src = Base(t.src_buffer, in, out, window) + t.src_offset;
    switch (t.op) {
      case StepOp::kCopy:
        if (t.bytes == 0 || dst == src) break;
        if (t.dst_buffer == Buffer::kScratch)
          kernels::CopyToShared(dst, src, t.bytes);  // a publish: another core reads it
        else
          kernels::Copy(dst, src, t.bytes);
        break;
      case StepOp::kReduce:
        kernels::Reduce(dst, dst, src, t.count, dtype, op);
        break;
      case StepOp::kFinalize:
        // Only an average changes anything (the executor skips it likewise).
        if (op == weftAvg) kernels::Finalize(dst, t.count, dtype, op, nranks);
        break;
      case StepOp::kDirectRead:
      case StepOp::kDirectReduce: {
        StatusOr<MemRef> w = direct->PeerWindow(t.peer, t.remote_offset + t.bytes);
        if (!w.ok()) return w.status().WithContext(Describe(t, i, what));
        const unsigned char* remote = static_cast<const unsigned char*>(w->ptr) + t.remote_offset;
        if (t.op == StepOp::kDirectRead)
          kernels::Copy(dst, remote, t.bytes);
        else
          kernels::Reduce(dst, src, remote, t.count, dtype, op);
        break;
      }
      case StepOp::kSignal:
        if (Status st = direct->Signal(t.peer, t.tagged ? tag : 0); !st.ok())
          return st.WithContext(Describe(t, i, what));
        break;
      case StepOp::kWait: {
        Status st;
        if (!direct->TryWait(t.peer, t.tagged ? tag : 0, &st)) return i;  // the executor waits
        if (!st.ok()) return st.WithContext(Describe(t, i, what));
        break;
      }
      default:
        return InternalError(Describe(t, i, what) + ": not a tiny-path step");
    }
  }
  return prog.ops.size();
}

bool TinyPathEnabled() {
  static const bool on = SettingFlagOr("WEFT_TINY_PATH", true);
  return on;
}

}  // namespace weft
