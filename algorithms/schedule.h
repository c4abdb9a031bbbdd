// Schedule: the intermediate representation between algorithms and the executor.
//
// An algorithm is a pure function (collective, layout, count, chunking, scope) -> Schedule. A
// schedule holds, for every rank in its scope (all ranks, or the one rank the executor runs:
// see PlanScope), a list of steps over buffer regions. Regions name a buffer (the
// caller's input or output, or a scratch buffer the executor allocates) plus an element offset
// and count, so schedules know nothing about pointers, dtypes or transports.
//
// Matching rule (shared by the checker, the executor and every transport): the k-th send from
// rank a to rank b on channel c is received by the k-th recv (or recv-reduce) at b from a on
// channel c. Channels are independent FIFO streams (a transport may map them to separate
// sockets or queues).
//
// Execution rule (the checker proves schedules under exactly this rule, the executor runs it):
// each rank issues its steps in program order, at most `window` in flight; a step is issued
// only once no earlier unfinished step touches a region it overlaps (write/read or read/write
// or write/write). Sends are rendezvous: they may complete only once the matching recv is
// posted. A schedule proved by the checker therefore cannot deadlock in the executor.
// Fences: kSignal and kWait touch no region but order direct (one-sided) accesses, so they
// are fences: a kSignal issues only after every earlier step of the rank has completed
// (release: the peer may read what we wrote), and no step after a kWait issues before the
// wait completes (acquire: we may read what the peer wrote before its signal). Local steps
// (copy, reduce, finalize, direct read/reduce, signal) complete when issued.
//
// Fused steps (kRecvReduceSend, kRecvCopySend) count as a recv from `peer` on `channel` and as
// a send to `to` on `to_channel`. Their forward is posted once their receive has completed, and
// the k-th message a->b on channel c is still the k-th in program order: a fused forward is
// posted only after every earlier fused forward to the same (to, to_channel), and a plain send
// does not issue while an earlier fused forward to its (peer, channel) is still unposted. A
// fused step holds its window slot until its receive has completed (from then on it is a
// send, as the unfused schedule's next step would be, and must not keep later receives from
// being posted), and its hazard on dst until its forward has completed.
//
// Codec steps (compressed collectives): kEncode writes dst = encode(src) with the call's codec
// (ExecContext::codec), kDecode dst = decode(src), kDecodeReduce dst = dst (op) decode(src).
// An encoded region is a Scratch region like any other, counted in elements of the call's
// element type (float32; bf16 for the all-to-all(v) and allgather, whose codec steps are
// encodes and decodes only: ScheduleRequest::elem_bytes): ceil(EncodedBytes / element size)
// elements, enough for the codec's exact encoded size (kernels/codec.h). Counting elements
// keeps one unit for the hazard rule, the matching rule (equal element counts) and the
// checker's symbolic memory; the bytes beyond the encoding (at most 3) are never sent: the
// executor sends what the encode reported, the receive reports what arrived, and the decode
// checks that size (see src/exec/executor.cc). The checker treats decode(encode(x)) as
// carrying x's contributions (src/check/checker.h).
//
// Step semantics live in one table, algorithms/step_table.h: for every op what it reads and
// writes (the regions the hazard rule applies to), what it receives and sends, how it computes
// dst, whether it is asynchronous and whether it is a fence. The executor, the checker and the
// simulator all read it; a new op is a row there plus its executor case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

enum class Collective : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllv,
  kSendRecv,
  kBarrier,
  // Per-rank counts (weftAllGatherV / weftReduceScatterV): ScheduleRequest::v_counts.
  kAllGatherV,
  kReduceScatterV,
  // New collectives go last (kLastCollective below): loops over every collective read it.
};
constexpr Collective kLastCollective = Collective::kReduceScatterV;
const char* CollectiveName(Collective c);

// Which of a rank's buffers a region lives in. In-place calls alias Input and Output the way
// NCCL defines it (allreduce: same pointer; allgather: input = output + rank*count;
// reduce-scatter: output = input + rank*count); the executor resolves the aliasing and the
// checker proves schedules both in-place and out-of-place.
enum class Buffer : uint8_t { kInput, kOutput, kScratch };

struct Region {
  Buffer buffer = Buffer::kInput;
  size_t offset = 0;  // elements
  size_t count = 0;   // elements
};

enum class StepOp : uint8_t {
  kSend,          // send `src` to `peer`
  kRecv,          // receive from `peer` into `dst`
  kRecvReduce,    // receive from `peer`, dst = src (op) received   (src may equal dst)
  kCopy,          // dst = src (local)
  kReduce,        // dst = dst (op) src (local)
  kDirectRead,    // dst = peer's `remote` region (peer memory mapped: same host)
  kDirectReduce,  // dst = src (op) peer's `remote` region
  kSignal,        // post a signal to `peer` (orders direct accesses)
  kWait,          // wait for the next signal from `peer`
  kFinalize,      // dst = finalize(dst): divides by nranks for weftAvg, no-op otherwise
  // Fused primitives (one step per ring hop, as NCCL's): receive from `peer`, write dst, then
  // forward dst to `to` on the same channel. The forward is posted the moment the data is
  // there, instead of waiting for a separate send step's turn in program order.
  kRecvReduceSend,  // dst = src (op) received from `peer`; send dst to `to`
  kRecvCopySend,    // dst = received from `peer`; send dst to `to`
  // Codec steps (see above): src and dst differ in size (values vs encoded elements).
  kEncode,        // dst = encode(src), stochastic stream (rank << 32 | codec_stream)
  kDecode,        // dst = decode(src)
  kDecodeReduce,  // dst = dst (op) decode(src): the accumulator is the left operand
  // New ops go last (kLastStepOp below) and need a row in algorithms/step_table.cc.
};
constexpr StepOp kLastStepOp = StepOp::kDecodeReduce;
const char* StepOpName(StepOp op);

struct Step {
  StepOp op = StepOp::kCopy;
  int peer = -1;        // send/recv/direct/signal/wait; -1 for local steps
  int to = -1;          // fused steps: the rank dst is forwarded to; -1 otherwise
  uint16_t channel = 0; // FIFO stream for send/recv matching
  uint16_t to_channel = 0;  // fused steps: the stream the forward travels on
  Region src;           // local operand read
  Region dst;           // local operand written
  Region remote;        // peer's region (direct ops only)
  // kEncode: which stochastic-rounding stream of this rank the encode draws from (the codec
  // gets rank << 32 | codec_stream), so every encoding of a call has its own; 0 otherwise.
  uint32_t codec_stream = 0;
};

struct RankSchedule {
  size_t input_count = 0;    // elements of Input this rank provides
  size_t output_count = 0;   // elements of Output this rank owns
  size_t scratch_count = 0;  // elements of Scratch the executor must allocate
  std::vector<Step> steps;
  // Whether steps use the direct (window) transport: 1 / 0 once known (BuildSchedule sets it,
  // so the executor does not rescan a cached plan on every call), -1 = not known, scan.
  int8_t direct_steps = -1;
  // Per step (BuildSchedule, for a one-rank plan; empty otherwise): 1 when the step writes
  // Output and no later step of this rank reads what it wrote, so the executor may write it
  // with streaming stores when the output is large (MemRef::streaming).
  std::vector<uint8_t> final_output_write;
};

// Which ranks' steps a schedule holds. The executor's path builds one rank's plan
// (ForRank(r): that rank's RankSchedule; every other entry stays empty, so memory and build
// time are what that rank's own steps cost — O(p) for ring and pairwise schedules instead of
// the O(p^2) of all ranks). The checker, the simulator and the cost model need every rank's
// steps and build AllRanks(), the default. Generators honour it through RanksToBuild
// (patterns.h); BuildSchedule (registry.h) trims the result of any generator that builds all
// ranks anyway (compositions such as the hierarchical ones), so the scope always holds.
struct PlanScope {
  int rank = -1;  // -1: every rank
  static PlanScope AllRanks() { return PlanScope{}; }
  static PlanScope ForRank(int r) {
    PlanScope s;
    s.rank = r;
    return s;
  }
  bool all() const { return rank < 0; }
  bool Includes(int r) const { return rank < 0 || rank == r; }
};

struct Schedule {
  Collective collective = Collective::kAllReduce;
  std::string algorithm;  // e.g. "ring"
  int nranks = 0;
  size_t count = 0;  // the API's count argument (per-rank elements, as NCCL)
  int root = -1;     // broadcast / reduce
  int window = 8;    // max steps in flight per rank
  PlanScope scope;   // whose steps `ranks` holds (all ranks unless built for one)
  std::vector<RankSchedule> ranks;  // always nranks entries; outside `scope` they are empty
};

// Chunking choices handed to generators (the selector fills them in).
struct ChunkPolicy {
  size_t chunk_elems = 0;  // 0 = one chunk per segment (no pipelining)
  int channels = 1;        // independent FIFO streams to spread across
};

// ---- helpers shared by generators (one place for chunk arithmetic) ----

// Splits [0, total) into `parts` contiguous pieces, the first (total % parts) one longer.
// Returns the offset and size of piece i.
inline size_t PartOffset(size_t total, int parts, int i) {
  size_t base = total / parts, extra = total % parts;
  return base * i + (static_cast<size_t>(i) < extra ? i : extra);
}
inline size_t PartSize(size_t total, int parts, int i) {
  return total / parts + (static_cast<size_t>(i) < total % parts ? 1 : 0);
}
// Number of chunks of at most `chunk` elements covering `n` (at least 1).
inline size_t NumChunks(size_t n, size_t chunk) {
  if (chunk == 0 || n <= chunk) return 1;
  return (n + chunk - 1) / chunk;
}

inline Region In(size_t off, size_t n) { return Region{Buffer::kInput, off, n}; }
inline Region Out(size_t off, size_t n) { return Region{Buffer::kOutput, off, n}; }
inline Region Tmp(size_t off, size_t n) { return Region{Buffer::kScratch, off, n}; }

inline Step SendStep(int peer, Region src, uint16_t ch = 0) {
  Step s; s.op = StepOp::kSend; s.peer = peer; s.src = src; s.channel = ch; return s;
}
inline Step RecvStep(int peer, Region dst, uint16_t ch = 0) {
  Step s; s.op = StepOp::kRecv; s.peer = peer; s.dst = dst; s.channel = ch; return s;
}
inline Step RecvReduceStep(int peer, Region src, Region dst, uint16_t ch = 0) {
  Step s; s.op = StepOp::kRecvReduce; s.peer = peer; s.src = src; s.dst = dst; s.channel = ch;
  return s;
}
// Fused steps receive on `ch` and forward on `to_ch`.
inline Step RecvReduceSendStep(int peer, Region src, Region dst, int to, uint16_t ch = 0,
                               uint16_t to_ch = 0) {
  Step s = RecvReduceStep(peer, src, dst, ch);
  s.op = StepOp::kRecvReduceSend;
  s.to = to;
  s.to_channel = to_ch;
  return s;
}
inline Step RecvCopySendStep(int peer, Region dst, int to, uint16_t ch = 0, uint16_t to_ch = 0) {
  Step s = RecvStep(peer, dst, ch);
  s.op = StepOp::kRecvCopySend;
  s.to = to;
  s.to_channel = to_ch;
  return s;
}
inline Step CopyStep(Region src, Region dst) {
  Step s; s.op = StepOp::kCopy; s.src = src; s.dst = dst; return s;
}
inline Step ReduceStep(Region src, Region dst) {
  Step s; s.op = StepOp::kReduce; s.src = src; s.dst = dst; return s;
}
inline Step FinalizeStep(Region dst) {
  Step s; s.op = StepOp::kFinalize; s.dst = dst; return s;
}
inline Step EncodeStep(Region src, Region dst, uint32_t codec_stream) {
  Step s; s.op = StepOp::kEncode; s.src = src; s.dst = dst; s.codec_stream = codec_stream;
  return s;
}
inline Step DecodeStep(Region src, Region dst) {
  Step s; s.op = StepOp::kDecode; s.src = src; s.dst = dst; return s;
}
inline Step DecodeReduceStep(Region src, Region dst) {
  Step s; s.op = StepOp::kDecodeReduce; s.src = src; s.dst = dst; return s;
}

}  // namespace weft
