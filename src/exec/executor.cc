// Executor (see executor.h): in-order issue, bounded window, hazard tracking, staged backoff.
#include "exec/executor.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/step_table.h"
#include "common/log.h"
#include "exec/chain_sink.h"
#include "exec/operand_sink.h"
#include "exec/codec_chain.h"
#include "kernels/codec_backend.h"
#include "kernels/codec_layout.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

struct ByteRange {
  uintptr_t lo = 0, hi = 0;  // [lo, hi); empty when lo == hi
  bool Overlaps(const ByteRange& o) const { return lo < o.hi && o.lo < hi; }
  bool empty() const { return lo == hi; }
};

// Memory a step touches on this rank (peer memory of direct steps is ordered by fences).
struct Access {
  ByteRange read[2];
  ByteRange write;
};

bool Conflicts(const Access& a, const Access& b) {
  if (!a.write.empty()) {
    if (a.write.Overlaps(b.write) || a.write.Overlaps(b.read[0]) || a.write.Overlaps(b.read[1]))
      return true;
  }
  if (!b.write.empty()) {
    if (b.write.Overlaps(a.read[0]) || b.write.Overlaps(a.read[1])) return true;
  }
  return false;
}

struct InFlight {
  size_t index = 0;
  const Step* step = nullptr;
  Access access;
  Transport* transport = nullptr;
  TransportRequest req;
  // A recv-reduce's landing buffer (host memory: the transports move host memory), kept with
  // its request slot between operations, and the part of it this step's receive uses.
  ScratchBuffer staging;
  MemRef landing;
  bool is_wait = false;
  bool fused = false;       // receives, then forwards dst (recv_reduce_send, recv_copy_send)
  bool received = false;    // fused: the receive half is done
  bool forwarding = false;  // fused: `req` is now the forward's send
  bool kernel = false;      // waits on `kreq` (a local step, or a received chunk's reduction)
  bool reducing = false;    // kernel: it reduces what `req` received
  KernelRequest kreq;
  size_t* encoded_size = nullptr;  // a recv into an encoded region: where its size goes
  // A receive streamed into the codec chain after it (exec/chain_sink.h): the chain's steps
  // run as its pieces land, so the slot also holds their accesses until the receive is done.
  bool streaming = false;
  bool streams_feedback = false;  // the streamed chain reads or writes the residual
  std::vector<Access> chain_access;
  std::unique_ptr<ChainSink> sink;  // kept with the slot between operations
  // A receive streamed into a chain's operand (exec/operand_sink.h): the sink its chain's
  // receives share (each holds the chain's accesses until its own receive is done; the last
  // to land runs the chain's last tiles).
  std::shared_ptr<OperandSink> operands;
};

// Whether in-flight f holds memory that access a touches in a conflicting way.
bool Blocks(const InFlight& f, const Access& a) {
  if (Conflicts(a, f.access)) return true;
  for (const Access& c : f.chain_access)
    if (Conflicts(a, c)) return true;
  return false;
}

// An encoded region of a compressed schedule (schedule.h: codec steps) and the size of the
// encoding it holds now: set by the encode that wrote it or the receive that filled it, read
// by the send that carries it and the decode that reads it, so only the encoded bytes travel
// and a decode sees exactly what arrived.
struct EncodedRegion {
  const unsigned char* ptr = nullptr;
  size_t capacity = 0;  // bytes of the region (elements, rounded up from the encoding)
  size_t bytes = 0;     // of the encoding it holds
  bool holds = false;   // something encoded or received into it
};

// Request slots are reused across operations of a thread: a tiny collective then allocates
// nothing (its latency budget is a few hundred nanoseconds).
thread_local std::vector<std::unique_ptr<InFlight>> t_free_slots;
// Per peer: whether this operation already signalled it / waited on it (direct schedules tag
// the first of each with the call tag; see DirectTransport::Signal). Reused like the slots.
thread_local std::vector<uint8_t> t_direct_firsts;
constexpr uint8_t kSignalled = 1, kWaited = 2;

// The per-operation lists of a Runner, kept between operations of a thread so that their
// capacity survives: a fresh vector per call cost a malloc and a free each (used_transports_'s
// first push_back showed in the profile of an 8-byte allreduce). A Runner uses the thread's
// lists in place (swapping them in and out cost store-forwarding stalls on every call) and
// leaves them empty; a Runner nested in another on the same thread (none today) finds them
// busy and uses lists of its own.
struct RunnerLists {
  std::vector<std::unique_ptr<InFlight>> inflight;
  std::vector<InFlight*> unforwarded;
  std::vector<Transport*> used_transports;
  bool busy = false;
};
thread_local RunnerLists t_runner_lists;

class Runner {
 public:
  Runner(const RankSchedule& s, int window, const ExecContext& ctx, const ExecBuffers& b)
      : sched_(s), window_(window < 1 ? 1 : window), ctx_(ctx), bufs_(b),
        elem_(TypeSize(ctx.dtype)),
        kb_(ctx.kernels != nullptr ? *ctx.kernels : CpuKernelBackend()),
        kernels_at_issue_(kb_.CompletesAtIssue()),
        lists_(t_runner_lists.busy ? *new RunnerLists() : t_runner_lists),
        inflight_(lists_.inflight), unforwarded_(lists_.unforwarded),
        used_transports_(lists_.used_transports) {
    lists_.busy = true;
  }
  ~Runner() {
    // Run leaves nothing in flight (Fail drops what was); clear anyway, keeping the capacity.
    inflight_.clear();
    unforwarded_.clear();
    used_transports_.clear();
    lists_.busy = false;
    if (&lists_ != &t_runner_lists) delete &lists_;
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  Status Run();

 private:
  Status Prepare();
  void UseScratch(const MemRef& m) {
    scratch_ = static_cast<unsigned char*>(m.ptr);
    scratch_kind_ = m.kind;
    scratch_device_ = m.device;
  }
  unsigned char* Resolve(const Region& r) const {
    unsigned char* base = nullptr;
    switch (r.buffer) {
      case Buffer::kInput: base = static_cast<unsigned char*>(const_cast<void*>(InputBase(r))); break;
      case Buffer::kOutput: base = static_cast<unsigned char*>(bufs_.output); break;
      case Buffer::kScratch: base = scratch_; break;
    }
    return base + r.offset * elem_;
  }
  // ExecBuffers::patched: the range r lies in, else -1.
  int PatchedRange(const Region& r) const {
    if (bufs_.patched == nullptr || bufs_.patched->empty()) return -1;
    const std::vector<ElementRange>& p = *bufs_.patched;
    auto it = std::upper_bound(p.begin(), p.end(), r.offset,
                               [](size_t at, const ElementRange& e) { return at < e.begin; });
    if (it == p.begin() || r.offset >= std::prev(it)->end) return -1;
    return static_cast<int>(std::prev(it) - p.begin());
  }
  // The input, or the patch where r lies in a range built there (ExecBuffers::patch).
  const void* InputBase(const Region& r) const {
    const int k = PatchedRange(r);
    return k >= 0 && patch_built_[static_cast<size_t>(k)] ? bufs_.patch : bufs_.input;
  }
  // What a chain adds to its input source r (a patched range left to the chains), else null.
  const float* ChainAddend(const Region& r) const {
    if (r.buffer != Buffer::kInput) return nullptr;
    const int k = PatchedRange(r);
    return k >= 0 && !patch_built_[static_cast<size_t>(k)] ? bufs_.addend + r.offset : nullptr;
  }
  Status PrepareInputPatch();
  // The region as the kernel backend sees it: its kind is its buffer's.
  MemRef Ref(const Region& r) const {
    MemKind kind = r.buffer == Buffer::kScratch ? scratch_kind_ : bufs_.kind;
    int device = r.buffer == Buffer::kScratch ? scratch_device_ : bufs_.device;
    return MemRef{Resolve(r), r.count * elem_, kind, device, 0};
  }
  // The destination of step `index`, marked streaming when the output is large and this
  // step's write is final (RankSchedule::final_output_write: nothing later reads it back).
  MemRef DstRef(size_t index, const Region& r, bool decode = false) const {
    MemRef m = Ref(r);
    m.streaming = (decode ? decode_streaming_ : output_streaming_) &&
                  index < sched_.final_output_write.size() && sched_.final_output_write[index] != 0;
    return m;
  }
  ByteRange RangeOf(const Region& r) const {
    if (r.count == 0) return ByteRange{};
    uintptr_t lo = reinterpret_cast<uintptr_t>(Resolve(r));
    return ByteRange{lo, lo + r.count * elem_};
  }
  Access AccessOf(const Step& s) const;
  // Where a direct step's remote region lies in this process: the peer's window (Scratch) or,
  // in zero-copy schedules, its mapped registered buffers (Input/Output).
  StatusOr<MemRef> PeerRegion(const Step& s);
  Transport* TransportFor(int rank, const Step& s, Status* st) const;
  // Issues step `index`, whose semantics and memory the issue loop already looked up.
  Status Issue(size_t index, const StepSemantics& m, const Access& access);
  Status IssueLocal(size_t index);
  // Runs steps from *next on while each completes at once (see the definition).
  Status RunReady(size_t* next);
  Status IssueInOrder(size_t* next);
  StatusOr<bool> RetireCompleted();
  Status IssueCodec(size_t index);
  StatusOr<MemRef> HeldEncoding(const Step& s, size_t index);
  // Codec chains (exec/codec_chain.h): found by Prepare when the CPU kernels run a compressed
  // schedule; ChainAt(i) is the chain starting at step i, if any.
  void FindChains();
  const CodecChain* ChainAt(size_t index) const {
    if (chain_at_.empty() || chain_at_[index] < 0) return nullptr;
    return &chains_[static_cast<size_t>(chain_at_[index])];
  }
  bool ChainBlocked(const CodecChain& c) const;
  Status ResolveChain(const CodecChain& c, std::vector<ChainStep>* steps);
  Status RunChain(const CodecChain& c);
  // Receives streamed into their chains (FindChains): StreamedAt(i) is the chain step i's
  // receive feeds, when that may stream. IssueStreamed: false when a hazard holds it back.
  const CodecChain* StreamedAt(size_t index) const {
    if (streamed_at_.empty() || streamed_at_[index] < 0) return nullptr;
    return &chains_[static_cast<size_t>(streamed_at_[index])];
  }
  bool ChainFeedsBack(const CodecChain& c) const;
  bool StreamedFeedbackInFlight() const;
  StatusOr<bool> IssueStreamed(size_t index, const CodecChain& c);
  StatusOr<bool> ReadyToStream(size_t index, const CodecChain& c, std::vector<Access>* accesses,
                               std::vector<ChainStep>* steps, bool* feeds_back);
  // Receives streamed into a chain's operands (FindChains): OperandsAt(i) is the chain whose
  // operand receives start at step i, when they may stream. IssueOperandStreams: false when
  // a hazard or the window holds them back.
  const CodecChain* OperandsAt(size_t index) const {
    if (operands_at_.empty() || operands_at_[index] < 0) return nullptr;
    return &chains_[static_cast<size_t>(operands_at_[index])];
  }
  StatusOr<bool> IssueOperandStreams(size_t index, const CodecChain& c, bool* posted);
  // Error feedback (ExecContext::feedback): each encode step's span, checked by Prepare, and
  // the feedback of an encode that ran on its own.
  Status FindFeedbackSpans();
  const EncodedSpan* FeedbackSpan(size_t index) const {
    if (feedback_at_.empty() || feedback_at_[index] < 0) return nullptr;
    return &(*ctx_.feedback.spans)[static_cast<size_t>(feedback_at_[index])];
  }
  void FeedBack(size_t index);
  // Compressed schedules: the encoded regions (Prepare), and the one `r` resolves to, if any.
  Status FindEncodedRegions();
  EncodedRegion* EncodedAt(const Region& r);
  std::unique_ptr<InFlight> TakeSlot(size_t index, const Access& access);
  // Runs one kernel through the backend: at once when it completes at issue, else in flight.
  template <typename Launch>
  Status RunKernel(size_t index, Launch launch);
  StatusOr<bool> AfterReceive(InFlight& f);
  Status PostAsync(InFlight& f);
  void NoteTransport(Transport* t);
  bool ForwardPending(int to, uint16_t channel) const;
  Status PostForwards();
  StatusOr<bool> Complete(InFlight& f);
  Status WaitForProgress(int idle_rounds);
  std::string Describe(const Step& s, size_t index) const;
  Status Fail(Status st);
  // The error for a call that made no progress for `idle` seconds (after asking the peers).
  Status TimedOut(double idle);
  // Follows the culprits the peers announced, from `rank` on, to the first silent rank.
  int FollowCulprits(int rank) const;
  // Tells every transport used (the direct one too) whom this failure is blamed on, before
  // they abort: the first that saw a rank fail, else the timeout's culprit.
  void ShareFailedOrigin();
  int timeout_culprit_ = -1;  // TimedOut's verdict, -1 before

  const RankSchedule& sched_;
  int window_;
  const ExecContext& ctx_;
  const ExecBuffers& bufs_;
  size_t elem_;
  unsigned char* scratch_ = nullptr;
  // The kind of the scratch in use: the window transport's (shm: kHostShared) or what the
  // caller's ScratchBuffer holds (the communicator's: host memory).
  MemKind scratch_kind_ = MemKind::kHost;
  int scratch_device_ = -1;
  KernelBackend& kb_;
  const bool kernels_at_issue_;
  // The outputs of the ranks sharing this host's cache reach the streaming threshold (about
  // the cache's size): final writes into ours may stream (DstRef), since the rest of the call
  // would evict them anyway. Set by Prepare (direct schedules: every rank is on this host).
  bool output_streaming_ = false;
  // The same for a decode's final write, in place too: a compressed schedule's final decodes
  // follow its exchange across hosts, and the call's traffic since its first phase read the
  // output (in place: the input) has evicted those lines.
  bool decode_streaming_ = false;
  RunnerLists& lists_;  // the thread's (or, nested, our own): the three lists below
  std::vector<std::unique_ptr<InFlight>>& inflight_;
  std::vector<InFlight*>& unforwarded_;  // fused steps in flight, forward not posted, in order
  size_t received_fused_ = 0;  // fused steps in flight whose receive is done: out of the window
  std::vector<std::unique_ptr<InFlight>>& free_ = t_free_slots;
  bool fence_wait_ = false;  // a kWait is in flight: nothing issues after it
  std::vector<Transport*>& used_transports_;
  std::vector<uint8_t>& direct_firsts_ = t_direct_firsts;
  bool direct_used_ = false;  // the schedule has direct steps (window, signals)  // kSignalled | kWaited per peer
  std::vector<EncodedRegion> encoded_;  // compressed schedules only (ctx_.codec set)
  std::vector<CodecChain> chains_;
  std::vector<int32_t> chain_at_;  // per step: its chain's index when one starts there, else -1
  std::vector<int32_t> streamed_at_;  // per step: the chain its receive streams into, else -1
  std::vector<int32_t> operands_at_;  // per step: the chain whose operand receives start here, else -1
  std::vector<std::vector<StreamedOperand>> chain_operands_;  // per chain: its streamed operands
  std::vector<int32_t> feedback_at_;  // per step: an encode's index in ctx_.feedback.spans, else -1
  std::vector<uint8_t> patch_built_;  // per patched range: input + addend built into the patch
  // The call tag of the first signal to / wait on `peer` in this operation, else 0.
  uint64_t FirstTag(int peer, uint8_t which) {
    uint64_t tag = PeekFirstTag(peer, which);
    direct_firsts_[peer] |= which;
    return tag;
  }
  uint64_t PeekFirstTag(int peer, uint8_t which) const {
    return (direct_firsts_[peer] & which) ? 0 : ctx_.tag;
  }
};

std::string Runner::Describe(const Step& s, size_t index) const {
  return DescribeStep(ctx_.what, index, s.op, s.peer, s.to);
}

// The regions come from the step table, so the executor's hazards are the checker's.
Access Runner::AccessOf(const Step& s) const {
  StepRegions g = LocalRegions(s);
  Access a;
  for (int i = 0; i < 2; ++i)
    if (g.read[i] != nullptr) a.read[i] = RangeOf(*g.read[i]);
  if (g.write != nullptr) a.write = RangeOf(*g.write);
  return a;
}

Transport* Runner::TransportFor(int rank, const Step& s, Status* st) const {
  if (rank < 0 || rank >= ctx_.nranks || rank == ctx_.rank) {
    *st = InternalError(Describe(s, 0) + ": invalid peer " + std::to_string(rank));
    return nullptr;
  }
  Transport* t = (*ctx_.peer_transport)[rank];
  if (t == nullptr) *st = InternalError("no transport reaches rank " + std::to_string(rank));
  return t;
}

Status Runner::Prepare() {
  size_t scratch_bytes = sched_.scratch_count * elem_;
  bool direct = false;
  // A plan from BuildSchedule says whether it has direct steps; hand-made schedules are scanned.
  if (sched_.direct_steps != 0) {
    for (const Step& s : sched_.steps) {
      if (!SemanticsOf(s.op).needs_direct) continue;
      direct = true;
      // Direct steps reach only the ranks that this rank's window transport maps (its host).
      if (ctx_.direct == nullptr || s.peer < 0 || s.peer >= ctx_.nranks ||
          (*ctx_.peer_transport)[s.peer] != ctx_.direct)
        return InternalError(std::string(ctx_.what) + ": schedule has a direct step with rank " +
                             std::to_string(s.peer) +
                             " but no window transport of this rank maps that rank");
    }
  }
  // In place, the output's lines were read earlier in the call and are in the cache: plain
  // stores keep them there (streaming measured 20% slower for a 4-rank all-to-all in place).
  const size_t host_outputs = sched_.output_count * elem_ * (direct ? ctx_.nranks : 1);
  decode_streaming_ = host_outputs >= kernels::StreamingThreshold();
  output_streaming_ = bufs_.output != bufs_.input && decode_streaming_;
  if (direct) {
    direct_used_ = true;
    direct_firsts_.assign(static_cast<size_t>(ctx_.nranks), 0);
    WEFT_RETURN_IF_ERROR(ctx_.direct->PrepareWindow(scratch_bytes));
    UseScratch(ctx_.direct->LocalWindow());
  } else if (scratch_bytes > 0) {
    if (ctx_.scratch == nullptr)
      return InternalError(std::string(ctx_.what) + ": the schedule needs " +
                           std::to_string(scratch_bytes) + " bytes of scratch but none was given");
    StatusOr<MemRef> m = ctx_.scratch->Reserve(scratch_bytes, kb_);
    if (!m.ok()) return m.status().WithContext(ctx_.what);
    UseScratch(*m);
  }
  // Encoded regions resolve into the scratch just placed.
  if (ctx_.codec != nullptr) WEFT_RETURN_IF_ERROR(FindEncodedRegions());
  if (ctx_.codec != nullptr) FindChains();
  WEFT_RETURN_IF_ERROR(FindFeedbackSpans());
  WEFT_RETURN_IF_ERROR(PrepareInputPatch());
  // Refuse up front what the backend cannot touch (e.g. device buffers on the CPU backend):
  // failing at the first kernel would leave the peers half-way through the schedule.
  for (MemKind k : {bufs_.kind, scratch_kind_})
    if (!kb_.Supports(k))
      return InvalidArgument(std::string(ctx_.what) + ": the " + kb_.name() +
                             " kernel backend cannot access " + MemKindName(k) + " memory");
  return OkStatus();
}

StatusOr<MemRef> Runner::PeerRegion(const Step& s) {
  const size_t lo = s.remote.offset * elem_, bytes = s.remote.count * elem_;
  if (s.remote.buffer == Buffer::kScratch) {
    StatusOr<MemRef> w = ctx_.direct->PeerWindow(s.peer, lo + bytes);
    if (!w.ok()) return w.status();
    return w->Slice(lo, bytes);
  }
  const bool input = s.remote.buffer == Buffer::kInput;
  const char* which = input ? "input" : "output";
  if (ctx_.peer_buffers == nullptr || s.peer < 0 ||
      static_cast<size_t>(s.peer) >= ctx_.peer_buffers->size())
    return InternalError(std::string("reads rank ") + std::to_string(s.peer) + "'s " + which +
                         " but no peer buffers are mapped for this call (not registered)");
  const PeerUserBuffers& b = (*ctx_.peer_buffers)[s.peer];
  const MemRef& mapped = input ? b.input : b.output;
  const size_t have = mapped.bytes;
  if (mapped.ptr == nullptr || lo > have || bytes > have - lo)
    return InternalError(std::string("reads bytes [") + std::to_string(lo) + ", " +
                         std::to_string(lo + bytes) + ") of rank " + std::to_string(s.peer) + "'s " +
                         which + ", of which " + std::to_string(have) + " bytes are mapped");
  return mapped.Slice(lo, bytes);
}

std::unique_ptr<InFlight> Runner::TakeSlot(size_t index, const Access& access) {
  std::unique_ptr<InFlight> f;
  if (!free_.empty()) {
    f = std::move(free_.back());
    free_.pop_back();
  } else {
    f = std::make_unique<InFlight>();
  }
  const Step& s = sched_.steps[index];
  f->index = index;
  f->step = &s;
  f->access = access;
  f->is_wait = f->fused = f->received = f->forwarding = f->kernel = f->reducing = false;
  f->encoded_size = nullptr;
  f->streaming = f->streams_feedback = false;
  f->chain_access.clear();
  f->operands.reset();
  f->transport = nullptr;  // a pooled slot's transport may be another communicator's
  return f;
}

template <typename Launch>
Status Runner::RunKernel(size_t index, Launch launch) {
  if (kernels_at_issue_) {  // the CPU: no slot, no polling (the tiny-message hot path)
    KernelRequest req;
    Status st = launch(&req);
    if (st.ok() && !req.done)
      st = InternalError(std::string(kb_.name()) + " kernel backend left a kernel running");
    // Status holds a std::string: copy it (an out-of-line call) only when it is an error.
    if (st.ok() && !req.status.ok()) st = req.status;
    if (st.ok()) return st;
    return st.WithContext(Describe(sched_.steps[index], index));
  }
  std::unique_ptr<InFlight> f = TakeSlot(index, AccessOf(sched_.steps[index]));
  f->kernel = true;
  f->kreq = KernelRequest();
  Status st = launch(&f->kreq);
  if (!st.ok()) return st.WithContext(Describe(sched_.steps[index], index));
  inflight_.push_back(std::move(f));  // retired by Poll, like a transport request
  return OkStatus();
}

// Local steps go to the kernel backend; the CPU's complete at issue, a stream backend's stay
// in flight (their memory guarded by the hazards, their completion polled).
Status Runner::IssueLocal(size_t index) {
  const Step& s = sched_.steps[index];
  const weftDataType_t dt = ctx_.dtype;
  const weftRedOp_t op = ctx_.op;
  switch (s.op) {
    case StepOp::kCopy:
      if (s.src.count == 0 || Resolve(s.dst) == Resolve(s.src)) return OkStatus();
      return RunKernel(index, [&](KernelRequest* r) {
        return kb_.Copy(DstRef(index, s.dst), Ref(s.src), r);
      });
    case StepOp::kReduce:
      return RunKernel(index, [&](KernelRequest* r) {
        return kb_.Reduce(Ref(s.dst), Ref(s.dst), Ref(s.src), s.dst.count, dt, op, r);
      });
    case StepOp::kFinalize:
      // Only an average changes anything at the end (the division by the number of ranks);
      // for the other ops the step is a no-op, so the backend is not called for it.
      if (op != weftAvg) return OkStatus();
      return RunKernel(index, [&](KernelRequest* r) {
        return kb_.Finalize(Ref(s.dst), s.dst.count, dt, op, ctx_.nranks, r);
      });
    case StepOp::kDirectRead:
    case StepOp::kDirectReduce: {
      StatusOr<MemRef> w = PeerRegion(s);
      if (!w.ok()) return w.status().WithContext(Describe(s, index));
      const MemRef remote = *w;
      if (s.op == StepOp::kDirectRead)
        return RunKernel(index, [&](KernelRequest* r) { return kb_.Copy(DstRef(index, s.dst), remote, r); });
      return RunKernel(index, [&](KernelRequest* r) {
        return kb_.Reduce(Ref(s.dst), Ref(s.src), remote, s.dst.count, dt, op, r);
      });
    }
    case StepOp::kEncode:
    case StepOp::kDecode:
    case StepOp::kDecodeReduce:
      return IssueCodec(index);
    case StepOp::kSignal: {
      // Describe() builds strings: only on the error path (this is the tiny-message hot path).
      if (s.peer < 0 || s.peer >= ctx_.nranks)
        return InternalError(Describe(s, index) + ": invalid peer");
      Status st = ctx_.direct->Signal(s.peer, FirstTag(s.peer, kSignalled));
      if (st.ok()) return st;
      return st.WithContext(Describe(s, index));
    }
    default:
      return InternalError(Describe(s, index) + ": not a local step");
  }
}

// The regions that may hold an encoding: what encode steps write, what decode steps read, and
// what a receive fills and a plain send passes on unchanged (a relay of an encoding). Fused
// steps never carry encodings (their forward would send the whole region, not the encoding),
// so they may not touch one; the checker refuses the same (check/checker.cc).
Status Runner::FindEncodedRegions() {
  encoded_.clear();
  auto add = [&](const Region& r) {
    if (r.count == 0 || EncodedAt(r) != nullptr) return;
    EncodedRegion e;
    e.ptr = Resolve(r);
    e.capacity = r.count * elem_;
    encoded_.push_back(e);
  };
  for (const Step& s : sched_.steps) {
    const StepCodec c = SemanticsOf(s.op).codec;
    if (c != StepCodec::kNone) add(c == StepCodec::kEncodeSrc ? s.dst : s.src);
  }
  for (size_t i = 0; i < sched_.steps.size(); ++i) {
    const Step& recv = sched_.steps[i];
    if (recv.op != StepOp::kRecv || EncodedAt(recv.dst) != nullptr) continue;
    for (size_t j = i + 1; j < sched_.steps.size(); ++j) {
      const Step& send = sched_.steps[j];
      if (send.op == StepOp::kSend && send.src.buffer == recv.dst.buffer &&
          send.src.offset == recv.dst.offset && send.src.count == recv.dst.count) {
        add(recv.dst);
        break;
      }
    }
  }
  for (size_t i = 0; i < sched_.steps.size(); ++i) {
    const Step& s = sched_.steps[i];
    if (ForwardsAfterReceive(SemanticsOf(s.op)) && EncodedAt(s.dst) != nullptr)
      return InternalError(Describe(s, i) + ": a fused step cannot carry an encoded region");
  }
  return OkStatus();
}

EncodedRegion* Runner::EncodedAt(const Region& r) {
  if (encoded_.empty() || r.count == 0) return nullptr;
  const unsigned char* p = Resolve(r);
  for (EncodedRegion& e : encoded_)
    if (e.ptr == p && e.capacity == r.count * elem_) return &e;
  return nullptr;
}

// Codec steps: the encode notes the size it wrote, decodes read exactly the encoding their
// region holds (what an encode wrote or a receive delivered). Encodes and decodes run on the
// call's values, float32 or bf16 (the backend refuses what it cannot take, by name); a
// decode-reduce sums in float32, so its schedule must be a float32 one.
Status Runner::IssueCodec(size_t index) {
  const Step& s = sched_.steps[index];
  const weftDataType_t dt = ctx_.dtype;
  if (ctx_.codec == nullptr || (s.op == StepOp::kDecodeReduce && dt != weftFloat32))
    return InvalidArgument(Describe(s, index) + ": codec steps need the call's codec, and a "
                           "decode_reduce float32 values (ExecContext::codec, dtype " +
                           std::to_string(dt) + ")");
  const weftCompression& spec = *ctx_.codec;
  if (s.op == StepOp::kEncode) {
    EncodedRegion* e = EncodedAt(s.dst);  // found by Prepare (FindEncodedRegions)
    if (e == nullptr) return InternalError(Describe(s, index) + ": its dst is no encoded region");
    e->holds = true;
    const uint64_t stream = static_cast<uint64_t>(ctx_.rank) << 32 | s.codec_stream;
    WEFT_RETURN_IF_ERROR(RunKernel(index, [&](KernelRequest* r) {
      return kb_.Encode(Ref(s.dst), Ref(s.src), s.src.count, dt, spec, stream, &e->bytes, r);
    }));
    FeedBack(index);  // the CPU kernels completed the encode at issue (FindFeedbackSpans)
    return OkStatus();
  }
  StatusOr<MemRef> held = HeldEncoding(s, index);
  if (!held.ok()) return held.status();
  const MemRef encoded = *held;
  if (s.op == StepOp::kDecode)
    return RunKernel(index, [&](KernelRequest* r) {
      return kb_.Decode(DstRef(index, s.dst, /*decode=*/true), encoded, s.dst.count, dt, spec, r);
    });
  return RunKernel(index, [&](KernelRequest* r) {
    return kb_.DecodeReduce(Ref(s.dst), encoded, s.dst.count, spec, ctx_.op, r);
  });
}

// The encoding a decode step reads (what an encode wrote or a receive delivered there), as
// memory of exactly its size.
StatusOr<MemRef> Runner::HeldEncoding(const Step& s, size_t index) {
  EncodedRegion* e = EncodedAt(s.src);
  if (e == nullptr || !e->holds)
    return InvalidArgument(Describe(s, index) + ": decodes " + std::to_string(s.src.count) +
                           " elements that hold no encoding (nothing encoded or received them)");
  MemRef encoded = Ref(s.src);  // the encoding itself, not the whole region
  encoded.bytes = e->bytes;
  return encoded;
}

// Chains run on the CPU kernels only (they call the host codecs and reductions directly), on
// float32 values; WEFT_FUSE_CODEC_STEPS=0 keeps the steps one by one.
void Runner::FindChains() {
  chains_.clear();
  chain_at_.clear();
  if (!CodecChainsEnabled() || ctx_.dtype != weftFloat32 || &kb_ != &CpuKernelBackend() ||
      !codec::ValidateSpec(*ctx_.codec).empty())
    return;
  // Error feedback runs inside the chains (RunChain): their sums stay dead where no step reads them.
  chains_ = FindCodecChains(sched_.steps, *ctx_.codec, /*keep_acc=*/false);
  if (chains_.empty()) return;
  chain_at_.assign(sched_.steps.size(), -1);
  for (size_t i = 0; i < chains_.size(); ++i) chain_at_[chains_[i].first] = static_cast<int32_t>(i);
  streamed_at_.clear();
  operands_at_.clear();
  if (!StreamedChainsEnabled() || bufs_.kind != MemKind::kHost) return;
  for (size_t i = 0; i < chains_.size(); ++i) {
    const CodecChain& c = chains_[i];
    if (c.first == 0 || !StreamsIntoChain(sched_.steps, c.first - 1, c)) continue;
    if (EncodedAt(sched_.steps[c.first - 1].dst) != nullptr) continue;
    if (streamed_at_.empty()) streamed_at_.assign(sched_.steps.size(), -1);
    streamed_at_[c.first - 1] = static_cast<int32_t>(i);
  }
  chain_operands_.assign(chains_.size(), {});
  for (size_t i = 0; i < chains_.size(); ++i) {
    const CodecChain& c = chains_[i];
    if (!streamed_at_.empty() && c.first > 0 && streamed_at_[c.first - 1] >= 0) continue;
    std::vector<StreamedOperand> ops = OperandStreamsFor(sched_.steps, c, window_);
    if (ops.empty()) continue;
    if (operands_at_.empty()) operands_at_.assign(sched_.steps.size(), -1);
    operands_at_[ops.front().recv] = static_cast<int32_t>(i);
    chain_operands_[i] = std::move(ops);
  }
}

// Every input region must resolve whole: inside one patched range or outside all of them. A
// range that a step outside the chains reads is built now, before any step runs (so no step
// has changed the addend yet: error feedback stores into it later in the call); the others
// are left to the chains, which add the addend tile by tile.
Status Runner::PrepareInputPatch() {
  patch_built_.clear();
  if (bufs_.patched == nullptr || bufs_.patched->empty()) return OkStatus();
  if (bufs_.patch == nullptr || bufs_.addend == nullptr || bufs_.kind != MemKind::kHost ||
      ctx_.dtype != weftFloat32)
    return InvalidArgument(std::string(ctx_.what) + ": an input patch needs host float32 buffers, its addend and its space");
  const std::vector<ElementRange>& p = *bufs_.patched;
  patch_built_.assign(p.size(), 0);
  std::vector<uint8_t> in_chain(sched_.steps.size(), 0);
  for (const CodecChain& c : chains_)
    for (size_t i = c.first; i <= c.last; ++i) in_chain[i] = 1;
  for (size_t i = 0; i < sched_.steps.size(); ++i) {
    const StepRegions g = LocalRegions(sched_.steps[i]);
    for (const Region* r : {g.read[0], g.read[1], g.write}) {
      if (r == nullptr || r->buffer != Buffer::kInput || r->count == 0) continue;
      for (size_t k = 0; k < p.size(); ++k) {
        const ElementRange& e = p[k];
        const bool overlaps = r->offset < e.end && e.begin < r->offset + r->count;
        const bool inside = e.begin <= r->offset && r->offset + r->count <= e.end;
        if (overlaps && !inside)
          return InternalError(Describe(sched_.steps[i], i) + ": input elements [" +
                               std::to_string(r->offset) + ", " + std::to_string(r->offset + r->count) +
                               ") straddle the patched range [" + std::to_string(e.begin) + ", " +
                               std::to_string(e.end) + ")");
        if (inside && !in_chain[i]) patch_built_[k] = 1;
      }
    }
  }
  const float* in = static_cast<const float*>(bufs_.input);
  for (size_t k = 0; k < p.size(); ++k)
    if (patch_built_[k])
      kernels::Reduce(bufs_.patch + p[k].begin, in + p[k].begin, bufs_.addend + p[k].begin,
                      p[k].end - p[k].begin, weftFloat32, weftSum);
  return OkStatus();
}

// Feedback runs where the encodes do, on the CPU kernels at issue (so it follows the encode at
// once, in program order: a reduced result's add after its elements' store), on float32.
Status Runner::FindFeedbackSpans() {
  feedback_at_.clear();
  if (!ctx_.feedback.on()) return OkStatus();
  if (ctx_.feedback.spans == nullptr || ctx_.codec == nullptr || ctx_.dtype != weftFloat32 ||
      !kernels_at_issue_)
    return InvalidArgument(std::string(ctx_.what) + ": error feedback needs the call's codec and "
                           "spans, float32 values and the CPU kernels (the " + kb_.name() + " backend ran)");
  feedback_at_.assign(sched_.steps.size(), -1);
  size_t k = 0;
  for (size_t i = 0; i < sched_.steps.size(); ++i)
    if (sched_.steps[i].op == StepOp::kEncode) feedback_at_[i] = static_cast<int32_t>(k++);
  if (k != ctx_.feedback.spans->size())
    return InternalError(std::string(ctx_.what) + ": error feedback got " +
                         std::to_string(ctx_.feedback.spans->size()) + " spans for " +
                         std::to_string(k) + " encode steps");
  return OkStatus();
}

void Runner::FeedBack(size_t index) {
  const EncodedSpan* span = FeedbackSpan(index);
  if (span == nullptr) return;
  const Step& s = sched_.steps[index];
  codec::DroppedIntoResidual(*ctx_.codec, Resolve(s.dst), s.src.count,
                             reinterpret_cast<const float*>(Resolve(s.src)),
                             span->reduced ? codec::Feedback::kAdd : codec::Feedback::kStore,
                             ctx_.feedback.reduced_weight, ctx_.feedback.residual + span->offset);
}

bool Runner::ChainBlocked(const CodecChain& c) const {
  if (inflight_.empty()) return false;
  if (StreamedFeedbackInFlight() && ChainFeedsBack(c)) return true;
  for (size_t i = c.first; i <= c.last; ++i) {
    const Access a = AccessOf(sched_.steps[i]);
    for (const auto& f : inflight_)
      if (Blocks(*f, a)) return true;
  }
  return false;
}

// The chain's steps with their memory resolved and checked as IssueCodec checks them, then
// run tile by tile.
Status Runner::RunChain(const CodecChain& c) {
  thread_local std::vector<ChainStep> steps;
  WEFT_RETURN_IF_ERROR(ResolveChain(c, &steps));
  RunCodecChain(steps, reinterpret_cast<float*>(Resolve(c.acc)), c.acc.count, c.acc_dead,
                *ctx_.codec, ctx_.op, ctx_.nranks);
  return OkStatus();
}

Status Runner::ResolveChain(const CodecChain& c, std::vector<ChainStep>* out) {
  const weftCompression& spec = *ctx_.codec;
  std::vector<ChainStep>& steps = *out;
  steps.clear();
  for (size_t i = c.first; i <= c.last; ++i) {
    const Step& s = sched_.steps[i];
    ChainStep cs;
    cs.op = s.op;
    if (s.op == StepOp::kDecode || s.op == StepOp::kDecodeReduce) {
      StatusOr<MemRef> held = HeldEncoding(s, i);
      if (!held.ok()) return held.status();
      Status st = CheckDecodeSrc(*held, s.dst.count, spec);  // as the backend's decodes check
      if (!st.ok()) return st.WithContext(Describe(s, i));
      cs.src = held->ptr;
    } else if (s.op == StepOp::kEncode) {
      EncodedRegion* e = EncodedAt(s.dst);
      if (e == nullptr) return InternalError(Describe(s, i) + ": its dst is no encoded region");
      e->holds = true;
      e->bytes = codec::EncodedBytes(spec, s.src.count);
      cs.encoded = Resolve(s.dst);
      cs.offset = s.src.offset - c.acc.offset;
      cs.count = s.src.count;
      cs.stream = static_cast<uint64_t>(ctx_.rank) << 32 | s.codec_stream;
      if (const EncodedSpan* span = FeedbackSpan(i)) {
        cs.residual = ctx_.feedback.residual + span->offset;
        cs.feedback = span->reduced ? codec::Feedback::kAdd : codec::Feedback::kStore;
        cs.feedback_weight = ctx_.feedback.reduced_weight;
      }
    } else if (s.op != StepOp::kFinalize) {
      cs.src = Resolve(s.src);
      cs.addend = ChainAddend(s.src);
    }
    steps.push_back(cs);
  }
  return OkStatus();
}

// Error feedback's residual is no schedule region, so the hazards do not order its users: a
// chain or encode that reads or writes it waits while a streamed chain that does is in flight
// (program order, as when every chain ran at issue).
bool Runner::ChainFeedsBack(const CodecChain& c) const {
  for (size_t i = c.first; i <= c.last; ++i) {
    const Step& s = sched_.steps[i];
    if (FeedbackSpan(i) != nullptr || (s.op != StepOp::kEncode && ChainAddend(s.src) != nullptr))
      return true;
  }
  return false;
}

bool Runner::StreamedFeedbackInFlight() const {
  for (const auto& f : inflight_)
    if (f->streams_feedback) return true;
  return false;
}

// Whether the receives from `index` on and chain c after them may issue now (no hazard with
// what is in flight, no other streamed chain feeding back): then their accesses (steps index
// to c.last), the chain's resolved steps and whether it feeds back.
StatusOr<bool> Runner::ReadyToStream(size_t index, const CodecChain& c, std::vector<Access>* accesses,
                                     std::vector<ChainStep>* steps, bool* feeds_back) {
  accesses->clear();
  for (size_t i = index; i <= c.last; ++i) accesses->push_back(AccessOf(sched_.steps[i]));
  for (const auto& f : inflight_)
    for (const Access& a : *accesses)
      if (Blocks(*f, a)) return false;
  *feeds_back = ChainFeedsBack(c);
  if (*feeds_back && StreamedFeedbackInFlight()) return false;
  WEFT_RETURN_IF_ERROR(ResolveChain(c, steps));
  return true;
}

// Posts the receive at `index` into a sink that runs chain c (the next steps) as it lands.
StatusOr<bool> Runner::IssueStreamed(size_t index, const CodecChain& c) {
  const Step& s = sched_.steps[index];
  thread_local std::vector<Access> accesses;
  thread_local std::vector<ChainStep> steps;
  bool feeds_back = false;
  StatusOr<bool> ready = ReadyToStream(index, c, &accesses, &steps, &feeds_back);
  if (!ready.ok() || !*ready) return ready;
  std::unique_ptr<InFlight> f = TakeSlot(index, accesses[0]);
  f->chain_access.assign(accesses.begin() + 1, accesses.end());
  f->streaming = true;
  f->streams_feedback = feeds_back;
  if (f->sink == nullptr) f->sink = std::make_unique<ChainSink>();
  f->sink->Start(steps, reinterpret_cast<float*>(Resolve(c.acc)), c.acc.count, *ctx_.codec,
                 ctx_.op, ctx_.nranks);
  Status st;
  f->transport = TransportFor(s.peer, s, &st);
  if (!st.ok()) return st;
  NoteTransport(f->transport);
  st = f->transport->PostRecvToSink(s.peer, s.channel, ctx_.tag, c.acc.count * elem_,
                                    f->sink.get(), &f->req);
  if (!st.ok()) return st.WithContext(Describe(s, index));
  inflight_.push_back(std::move(f));
  return true;
}

// Posts the receives from `index` on into the operands of chain c (the steps after them),
// which runs tile by tile as they land; *posted says so. Where a transport takes no sinks,
// nothing is posted and the steps issue one by one as usual.
StatusOr<bool> Runner::IssueOperandStreams(size_t index, const CodecChain& c, bool* posted) {
  *posted = false;
  const std::vector<StreamedOperand>& ops = chain_operands_[static_cast<size_t>(operands_at_[index])];
  thread_local std::vector<Transport*> transports;
  transports.clear();
  for (const StreamedOperand& o : ops) {
    Status st;
    Transport* t = TransportFor(sched_.steps[o.recv].peer, sched_.steps[o.recv], &st);
    if (t == nullptr || !t->TakesSinks()) return true;  // the caller issues them one by one
    transports.push_back(t);
  }
  if (static_cast<int>(inflight_.size() - received_fused_ + ops.size()) > window_) return false;
  thread_local std::vector<Access> accesses;
  thread_local std::vector<ChainStep> steps;
  bool feeds_back = false;
  StatusOr<bool> ready = ReadyToStream(index, c, &accesses, &steps, &feeds_back);
  if (!ready.ok() || !*ready) return ready;
  thread_local std::vector<OperandSink::Source> sources;
  sources.clear();
  for (const StreamedOperand& o : ops)
    sources.push_back({o.reader, reinterpret_cast<float*>(Resolve(sched_.steps[o.recv].dst))});
  auto sink = std::make_shared<OperandSink>();
  sink->Start(steps, sources, reinterpret_cast<float*>(Resolve(c.acc)), c.acc.count, c.acc_dead,
              *ctx_.codec, ctx_.op, ctx_.nranks);
  const size_t chain_from = ops.back().recv + 1 - index;  // the chain's accesses
  for (size_t k = 0; k < ops.size(); ++k) {
    const Step& s = sched_.steps[ops[k].recv];
    std::unique_ptr<InFlight> f = TakeSlot(ops[k].recv, accesses[ops[k].recv - index]);
    f->chain_access.assign(accesses.begin() + static_cast<std::ptrdiff_t>(chain_from), accesses.end());
    f->streams_feedback = feeds_back;
    f->operands = sink;
    f->transport = transports[k];
    NoteTransport(f->transport);
    Status st = f->transport->PostRecvToSink(s.peer, s.channel, ctx_.tag, c.acc.count * elem_,
                                             sink->source(k), &f->req);
    if (!st.ok()) return st.WithContext(Describe(s, ops[k].recv));
    inflight_.push_back(std::move(f));
  }
  *posted = true;
  return true;
}

// Asynchronous steps are posted to their transport and retired when it completes them.
Status Runner::PostAsync(InFlight& f) {
  const Step& s = *f.step;
  const uint16_t ch = s.channel;
  Status st;
  switch (s.op) {
    case StepOp::kWait:
      f.transport = ctx_.direct;
      if (s.peer < 0 || s.peer >= ctx_.nranks)
        return InternalError(Describe(s, f.index) + ": invalid peer");
      return ctx_.direct->PostWait(s.peer, &f.req, FirstTag(s.peer, kWaited));
    case StepOp::kSend: {
      f.transport = TransportFor(s.peer, s, &st);
      if (!st.ok()) return st;
      size_t bytes = s.src.count * elem_;
      if (EncodedRegion* e = EncodedAt(s.src)) {  // only the encoding travels
        if (!e->holds) return InternalError(Describe(s, f.index) + ": sends an encoded region nothing encoded or received");
        bytes = e->bytes;
      }
      return f.transport->PostSend(s.peer, ch, ctx_.tag, Ref(s.src).Slice(0, bytes), &f.req);
    }
    case StepOp::kRecv:
    case StepOp::kRecvCopySend:  // lands in dst; forwarded from there (Forward)
      f.transport = TransportFor(s.peer, s, &st);
      if (!st.ok()) return st;
      if (s.op == StepOp::kRecv) {
        if (EncodedRegion* e = EncodedAt(s.dst)) {  // an encoding: its size arrives with it
          e->holds = false;
          f.encoded_size = &e->bytes;
          return f.transport->PostRecvUpTo(s.peer, ch, ctx_.tag, Ref(s.dst).Slice(0, e->capacity), &f.req);
        }
      }
      return f.transport->PostRecv(s.peer, ch, ctx_.tag, Ref(s.dst), &f.req);
    case StepOp::kRecvReduce:
    case StepOp::kRecvReduceSend:  // lands in staging, reduced into dst on arrival
      f.transport = TransportFor(s.peer, s, &st);
      if (!st.ok()) return st;
    {
      StatusOr<MemRef> landing = f.staging.Reserve(s.dst.count * elem_, kb_);
      if (!landing.ok()) return landing.status();
      f.landing = *landing;
      return f.transport->PostRecv(s.peer, ch, ctx_.tag, f.landing, &f.req);
    }
    default:
      return InternalError(Describe(s, f.index) + ": not an asynchronous step");
  }
}

Status Runner::Issue(size_t index, const StepSemantics& m, const Access& access) {
  const Step& s = sched_.steps[index];
  if (!m.asynchronous) return IssueLocal(index);
  std::unique_ptr<InFlight> f = TakeSlot(index, access);
  f->is_wait = m.fence == StepFence::kAcquire;
  f->fused = ForwardsAfterReceive(m);
  Status st = PostAsync(*f);
  // A post that fails (the peer already closed) still makes its transport one this call
  // used, so that Fail aborts it and its other peers are told now, not at their timeout.
  if (f->transport != nullptr) NoteTransport(f->transport);
  if (!st.ok()) return st.WithContext(Describe(s, index));
  if (f->is_wait) fence_wait_ = true;
  if (f->fused) unforwarded_.push_back(f.get());
  inflight_.push_back(std::move(f));
  return OkStatus();
}

void Runner::NoteTransport(Transport* t) {
  for (Transport* u : used_transports_)
    if (u == t) return;
  used_transports_.push_back(t);
}

// A plain send may not overtake an earlier fused forward to the same (peer, channel).
bool Runner::ForwardPending(int to, uint16_t channel) const {
  for (const InFlight* f : unforwarded_)
    if (f->step->to == to && f->step->to_channel == channel) return true;
  return false;
}

// Posts, oldest first, the forwards whose receives are done; on each (to, channel) stream a
// forward still waiting for its data holds back the later ones (program order per stream).
Status Runner::PostForwards() {
  for (size_t k = 0; k < unforwarded_.size();) {
    InFlight& f = *unforwarded_[k];
    bool earlier_waiting = false;
    for (size_t j = 0; j < k && !earlier_waiting; ++j)
      earlier_waiting = unforwarded_[j]->step->to == f.step->to &&
                        unforwarded_[j]->step->to_channel == f.step->to_channel;
    if (!f.received || earlier_waiting) { ++k; continue; }
    const Step& s = *f.step;
    Status st;
    f.transport = TransportFor(s.to, s, &st);
    if (!st.ok()) return st;
    f.req.Reset();
    f.forwarding = true;
    st = f.transport->PostSend(s.to, s.to_channel, ctx_.tag, Ref(s.dst), &f.req);
    if (!st.ok()) return st.WithContext(Describe(s, f.index));
    NoteTransport(f.transport);
    unforwarded_.erase(unforwarded_.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return OkStatus();
}

// A request or kernel finished. Returns whether the step is complete (a received chunk may go
// on to be reduced, a fused step whose receive is done goes on to forward: both stay in flight).
StatusOr<bool> Runner::Complete(InFlight& f) {
  const Step& s = *f.step;
  if (f.kernel) {
    f.kernel = false;
    if (!f.kreq.status.ok()) return f.kreq.status.WithContext(Describe(s, f.index));
    if (!f.reducing) return true;  // a local step
    f.reducing = false;
    return AfterReceive(f);
  }
  if (!f.req.status.ok()) return f.req.status.WithContext(Describe(s, f.index));
  if (f.streaming && !f.sink->Finished())
    return InternalError(Describe(s, f.index) + ": the receive streamed into a chain completed "
                         "before every tile of the chain landed");
  if (f.operands != nullptr && f.operands->AllLanded() && !f.operands->Finished())
    return InternalError(Describe(s, f.index) + ": every receive streamed into a chain's operands "
                         "landed, but not every tile of the chain ran");
  if (f.encoded_size != nullptr) {  // the receive into an encoded region: note its size
    *f.encoded_size = f.req.bytes;
    EncodedAt(s.dst)->holds = true;
  }
  const bool reduce_on_arrival =
      s.op == StepOp::kRecvReduce || (s.op == StepOp::kRecvReduceSend && !f.forwarding);
  if (reduce_on_arrival) {
    f.kreq = KernelRequest();
    Status st = kb_.Reduce(Ref(s.dst), Ref(s.src), f.landing, s.dst.count, ctx_.dtype, ctx_.op, &f.kreq);
    if (!st.ok()) return st.WithContext(Describe(s, f.index));
    if (!f.kreq.done) {
      f.kernel = f.reducing = true;
      return false;
    }
    if (!f.kreq.status.ok()) return f.kreq.status.WithContext(Describe(s, f.index));
  }
  return AfterReceive(f);
}

// What follows a finished receive (and its reduction), or a fused step's forward.
StatusOr<bool> Runner::AfterReceive(InFlight& f) {
  if (f.fused && !f.forwarding) {
    f.received = true;
    ++received_fused_;
    WEFT_RETURN_IF_ERROR(PostForwards());
    return false;
  }
  if (f.is_wait) fence_wait_ = false;
  if (f.fused) --received_fused_;
  return true;
}

Status Runner::WaitForProgress(int idle_rounds) {
  // One busy transport: wait inside it. Its Progress() owns the waiting policy (shm: spin,
  // then yield, then futex; tcp: ppoll), which knows best how to give the core away when
  // ranks outnumber cores and how to wake fast when the peer answers.
  // Several busy transports (e.g. shm inside a host + tcp across hosts): poll each without
  // blocking and yield for a while, then wait briefly in each in turn so none is starved.
  Transport* busy_one = nullptr;
  int busy = 0;
  for (Transport* t : used_transports_)
    if (t->HasPending()) {
      ++busy;
      busy_one = t;
    }
  if (busy == 1) return busy_one->Progress(2000);
  if (busy == 0) return OkStatus();
  constexpr int kYieldRounds = 64;
  for (Transport* t : used_transports_)
    if (t->HasPending()) WEFT_RETURN_IF_ERROR(t->Progress(idle_rounds < kYieldRounds ? 0 : 50));
  if (idle_rounds < kYieldRounds) sched_yield();
  return OkStatus();
}

Status Runner::Fail(Status st) {
  // Stop every transport we used from touching the caller's buffers after we return, and
  // tell the peers: after a failure the transports are out of step with them (the
  // communicator refuses further work), and a peer that waits on us must fail now rather
  // than at its timeout — e.g. when only this rank saw that the ranks' calls differ.
  ShareFailedOrigin();
  for (Transport* t : used_transports_) t->Abort(st);
  if (ctx_.direct != nullptr && direct_used_) ctx_.direct->Abort(st);
  // Slots abandoned with a failed transport are dropped (the transport was aborted and no
  // longer references them); the pool only keeps completed ones.
  inflight_.clear();
  unforwarded_.clear();
  received_fused_ = 0;
  return st;
}

void Runner::ShareFailedOrigin() {
  std::vector<Transport*> all = used_transports_;
  if (ctx_.direct != nullptr && direct_used_) all.push_back(ctx_.direct);
  int origin = -1;
  for (Transport* t : all)
    if (origin < 0) origin = t->FailedOrigin();
  if (origin < 0) origin = timeout_culprit_;
  if (origin < 0 || origin == ctx_.rank) return;
  for (Transport* t : all) t->NoteFailedOrigin(origin);
}

int Runner::FollowCulprits(int rank) const {
  std::vector<bool> seen(static_cast<size_t>(ctx_.nranks), false);
  while (rank >= 0 && rank < ctx_.nranks && rank != ctx_.rank && !seen[rank]) {
    seen[rank] = true;
    Transport* t = ctx_.peer_transport != nullptr ? (*ctx_.peer_transport)[rank] : nullptr;
    int next = t != nullptr ? t->AnnouncedCulprit(rank) : -1;
    if (next < 0 || next == ctx_.rank) break;  // silent (the culprit), or the wait loops back
    rank = next;
  }
  return rank;
}

// Before blaming the rank it waits on, a timed-out rank announces that rank as its culprit
// and listens for a grace period: every survivor's timer fires within milliseconds of the
// others' (they stopped moving together), and one that waits on a healthy neighbour — who
// waits too — learns from that neighbour's announcement whom to blame. Only the stopped (or
// dead) rank stays silent, so the chain of announcements ends at it. A failure note that
// arrives meanwhile (a neighbour saw the peer die) is the better error and is returned.
Status Runner::TimedOut(double idle) {
  const InFlight& f = *inflight_.front();
  const std::string what = Describe(*f.step, f.index);
  if (f.kernel)
    return TimeoutError(what + ": the " + kb_.name() + " kernel backend did not complete it in " +
                        std::to_string(static_cast<int>(idle)) + " s (WEFT_TIMEOUT / weftCommSetTimeout = " +
                        std::to_string(ctx_.timeout_s) + " s)");
  // A fused step past its receive waits on its forward's peer.
  const int waited_on = f.received ? f.step->to : f.step->peer;
  int culprit = waited_on;
  for (Transport* t : used_transports_) t->AnnounceCulprit(culprit);
  const double grace_s = std::min(2.0, std::max(0.25, ctx_.timeout_s / 4));
  const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(grace_s));
  while (Clock::now() < until) {
    for (Transport* t : used_transports_) {
      Status st = t->Progress(t->HasPending() ? 1000 : 0);
      if (!st.ok()) return st;
    }
    int next = FollowCulprits(waited_on);
    if (next != culprit) {
      culprit = next;
      for (Transport* t : used_transports_) t->AnnounceCulprit(culprit);
    }
    if (!used_transports_.empty() && std::none_of(used_transports_.begin(), used_transports_.end(),
                                                  [](Transport* t) { return t->HasPending(); }))
      usleep(1000);
  }
  timeout_culprit_ = culprit;
  std::string blame = "rank " + std::to_string(culprit) + " may be stuck, dead, or calling a different collective";
  if (culprit != waited_on)
    blame = "it waits on rank " + std::to_string(waited_on) + ", which reports waiting in turn: " + blame;
  return TimeoutError(what + " made no progress for " + std::to_string(static_cast<int>(idle)) +
                      " s (WEFT_TIMEOUT / weftCommSetTimeout = " + std::to_string(ctx_.timeout_s) +
                      " s); " + blame);
}

// Steps that complete at once, run in program order while nothing is in flight: local steps
// (the CPU backend completes them at issue), signals, and waits whose signal has already
// arrived (TryWait: no request slot, no transport lock). With nothing in flight there is no
// hazard to check and a wait is the only fence, so this is Run's issue loop with its
// bookkeeping left out: all of a tiny direct collective whose peers are on time. Stops at the
// first step that has to be posted and waited for, leaving *next at it.
Status Runner::RunReady(size_t* next) {
  const size_t n = sched_.steps.size();
  while (*next < n) {
    const Step& s = sched_.steps[*next];
    const StepSemantics& m = SemanticsOf(s.op);
    if (const CodecChain* c = ChainAt(*next)) {
      WEFT_RETURN_IF_ERROR(RunChain(*c));
      *next = c->last;
    } else if (!m.asynchronous) {
      WEFT_RETURN_IF_ERROR(IssueLocal(*next));
    } else if (s.op == StepOp::kWait && direct_used_ && s.peer >= 0 &&
               s.peer < ctx_.nranks) {
      Status st;
      if (!ctx_.direct->TryWait(s.peer, PeekFirstTag(s.peer, kWaited), &st)) return OkStatus();
      FirstTag(s.peer, kWaited);  // the tag was checked: later waits on this peer carry none
      if (!st.ok()) return st.WithContext(Describe(s, *next));
    } else {
      return OkStatus();
    }
    ++*next;
  }
  return OkStatus();
}

// Issues steps in program order from *next while the window and hazards allow.
Status Runner::IssueInOrder(size_t* next) {
  const size_t n = sched_.steps.size();
  while (*next < n && !fence_wait_ && static_cast<int>(inflight_.size() - received_fused_) < window_) {
    const Step& s = sched_.steps[*next];
    const StepSemantics& m = SemanticsOf(s.op);
    if (m.fence == StepFence::kRelease && !inflight_.empty()) break;
    if (m.sends != StepOperand::kNone && !m.receives && !unforwarded_.empty() &&
        ForwardPending(s.peer, s.channel))
      break;
    if (const CodecChain* c = StreamedAt(*next)) {
      Status st;
      Transport* t = TransportFor(s.peer, s, &st);
      if (t != nullptr && t->TakesSinks()) {
        StatusOr<bool> issued = IssueStreamed(*next, *c);
        if (!issued.ok()) return issued.status();
        if (!*issued) break;
        *next = c->last + 1;
        continue;
      }
    }
    if (const CodecChain* c = OperandsAt(*next)) {
      bool posted = false;
      StatusOr<bool> issued = IssueOperandStreams(*next, *c, &posted);
      if (!issued.ok()) return issued.status();
      if (!*issued) break;
      if (posted) {  // else a transport takes no sinks: the steps issue one by one
        *next = c->last + 1;
        continue;
      }
    }
    if (const CodecChain* c = ChainAt(*next)) {  // every step of it may run now, or none
      if (ChainBlocked(*c)) break;
      WEFT_RETURN_IF_ERROR(RunChain(*c));
      *next = c->last + 1;
      continue;
    }
    // A local step issued with nothing in flight needs no hazard check and no slot: skip
    // resolving its memory (the tiny-message path issues most of its steps so).
    Access a;
    if (m.asynchronous || !inflight_.empty()) {
      a = AccessOf(s);
      bool blocked = false;
      for (const auto& f : inflight_)
        if (Blocks(*f, a)) { blocked = true; break; }
      if (blocked) break;
    }
    if (FeedbackSpan(*next) != nullptr && StreamedFeedbackInFlight()) break;
    WEFT_RETURN_IF_ERROR(Issue(*next, m, a));
    ++*next;
  }
  return OkStatus();
}

// Retires completed requests (any order: hazards were checked at issue); true if any moved.
StatusOr<bool> Runner::RetireCompleted() {
  bool progressed = false;
  for (size_t i = 0; i < inflight_.size();) {
    InFlight& f = *inflight_[i];
    // A fused step that received but waits for an earlier forward's turn has nothing new.
    const bool waiting_turn = f.received && !f.forwarding;
    const bool finished = f.kernel ? kb_.Poll(&f.kreq) : f.req.done.load(std::memory_order_acquire);
    if (waiting_turn || !finished) { ++i; continue; }
    WEFT_ASSIGN_OR_RETURN(bool done, Complete(f));
    progressed = true;
    if (!done) { ++i; continue; }
    free_.push_back(std::move(inflight_[i]));
    inflight_[i] = std::move(inflight_.back());
    inflight_.pop_back();
  }
  return progressed;
}

Status Runner::Run() {
  WEFT_RETURN_IF_ERROR(Prepare());
  const size_t n = sched_.steps.size();
  size_t next = std::min(ctx_.first_step, n);
  if (direct_used_)  // the tiny path's steps carried the call tag on their first signal/wait
    for (size_t i = 0; i < next; ++i) {
      const Step& s = sched_.steps[i];
      if ((s.op == StepOp::kSignal || s.op == StepOp::kWait) && s.peer >= 0 && s.peer < ctx_.nranks)
        FirstTag(s.peer, s.op == StepOp::kSignal ? kSignalled : kWaited);
    }
  int idle_rounds = 0;
  // The clock is read only while idle (it costs tens of ns per call; a tiny collective
  // completes in a few hundred): the first check of an idle stretch starts its timer.
  bool idle_timer_running = false;
  Clock::time_point idle_since;
  while (next < n || !inflight_.empty()) {
    bool progressed = false;
    if (inflight_.empty() && kernels_at_issue_) {
      const size_t from = next;
      Status st = RunReady(&next);
      if (!st.ok()) return Fail(st);
      progressed = next != from;
      if (next == n) break;
    }
    {
      const size_t from = next;
      Status st = IssueInOrder(&next);
      if (!st.ok()) return Fail(st);
      progressed = progressed || next != from;
    }
    // Nothing in flight: nothing of ours for a transport to move (local steps complete at
    // issue). With one transport and nothing issued in this pass, WaitForProgress below polls
    // it first thing (and returns at once if that moved something), so a poll here would only
    // repeat it. Each skipped poll saves a transport lock and a scan of its peers.
    const bool issued = progressed;
    if (!inflight_.empty() && (issued || used_transports_.size() > 1)) {
      for (Transport* t : used_transports_) {
        Status st = t->Progress(0);
        if (!st.ok()) return Fail(st);
      }
    }
    {
      StatusOr<bool> retired = RetireCompleted();
      if (!retired.ok()) return Fail(retired.status());
      progressed = progressed || *retired;
    }
    if (progressed) {
      idle_rounds = 0;
      idle_timer_running = false;
      continue;
    }
    if (ctx_.timeout_s > 0 && (idle_rounds & 63) == 63) {
      if (!idle_timer_running) {
        idle_timer_running = true;
        idle_since = Clock::now();
      }
      double idle = std::chrono::duration<double>(Clock::now() - idle_since).count();
      if (idle > ctx_.timeout_s) return Fail(TimedOut(idle));
    }
    Status st = WaitForProgress(idle_rounds);
    if (!st.ok()) return Fail(st);
    ++idle_rounds;
  }
  return OkStatus();
}

}  // namespace

std::string DescribeStep(const char* what, size_t index, StepOp op, int peer, int to) {
  const StepSemantics& m = SemanticsOf(op);
  std::string d = std::string(what) + " step " + std::to_string(index) + " (" + m.name;
  if (peer >= 0) d += (PeerIsSource(m) ? " from rank " : " to rank ") + std::to_string(peer);
  if (m.sends_to_second_peer) d += " forward to rank " + std::to_string(to);
  return d + ")";
}

Status ExecuteSchedule(const RankSchedule& schedule, int window, const ExecContext& ctx,
                       const ExecBuffers& buffers) {
  Runner runner(schedule, window, ctx, buffers);
  return runner.Run();
}

}  // namespace weft
