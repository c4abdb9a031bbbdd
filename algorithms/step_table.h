// The step-semantics table: for every StepOp, what it reads, what it writes, what it receives
// or sends, whether it completes asynchronously and whether it is a fence. Defined once here
// and read by the executor (src/exec), the checker (src/check) and the simulator (src/sim), so
// the three cannot disagree about an op: adding an op means one row here plus its executor
// case (the kernel or transport call that carries it out).
//
// The value a step writes is described as dst = Combine(lhs, rhs):
//   kCopyIn     dst = lhs               (copy, recv, direct read, the forwarding recv_copy_send)
//   kReduceIn   dst = lhs (op) rhs      (the operand order is the reduction order: it decides
//                                        the bits of non-associative float sums)
//   kFinalizeIn dst = finalize(dst)     (avg's division, once)
//   kNothing    no local write          (send, signal, wait)
// where an operand is the step's src or dst region, the message received from `peer`, or the
// peer's `remote` region (direct steps). A step that `sends` posts a message of its src (plain
// send, to `peer`) or of the value it just wrote to dst (fused steps, to `to`).
//
// Codec steps pass their src operand through the codec first (StepCodec): kEncode is
// dst = encode(src) (a kCopyIn of the encoded src), kDecode dst = decode(src), kDecodeReduce
// dst = dst (op) decode(src).
#pragma once

#include <array>
#include <cstdint>

#include "algorithms/schedule.h"

namespace weft {

enum class StepOperand : uint8_t { kNone, kSrc, kDst, kReceived, kRemote };
enum class StepCombine : uint8_t { kNothing, kCopyIn, kReduceIn, kFinalizeIn };
// kRelease: issues only once every earlier step of the rank has completed (what we wrote is
// visible before the peer learns of it). kAcquire: while in flight, no later step issues
// (what the peer wrote before its signal is visible to everything after the wait).
enum class StepFence : uint8_t { kNone, kRelease, kAcquire };
// What the codec does to the src operand before combine: nothing, encode it (dst holds the
// encoding, src the values), or decode it (src holds an encoding, dst the values).
enum class StepCodec : uint8_t { kNone, kEncodeSrc, kDecodeSrc };

struct StepSemantics {
  StepOp op;
  const char* name;
  StepCombine combine;
  StepOperand lhs, rhs;   // operands of combine (kNone where unused)
  bool reads_src;         // the local src region is read (by combine or by the send)
  bool reads_dst;         // the local dst region is read before it is written (reduce)
  bool writes_dst;        // the local dst region is written
  bool receives;          // consumes the next message from `peer` on `channel`
  StepOperand sends;      // kSrc / kDst: posts a message of that region; kNone: no message
  bool sends_to_second_peer;  // the message goes to `to` (fused steps), else to `peer`
  bool reads_remote;      // reads the peer's mapped `remote` region
  bool signals, waits;    // direct-transport counters (signal to / wait for `peer`)
  bool asynchronous;      // completes after issue (holds a window slot while in flight)
  StepFence fence;
  bool needs_direct;      // needs the same-host window transport
  bool same_size_src_dst; // src and dst must hold the same number of elements
  StepCodec codec;        // codec steps: how src is transformed (sizes then differ)
};

// Number of StepOp values (the enum is dense from 0).
constexpr int kNumStepOps = static_cast<int>(kLastStepOp) + 1;

namespace step_table_internal {
extern const std::array<StepSemantics, kNumStepOps> kRows;  // step_table.cc, built at compile time
extern const StepSemantics kUnknownRow;
}  // namespace step_table_internal

// The row of `op`; every StepOp has one (tests/step_table_test.cc checks the enum is covered).
// Out-of-range values get a blank row named "unknown".
inline const StepSemantics& SemanticsOf(StepOp op) {
  const size_t i = static_cast<size_t>(op);
  const auto& rows = step_table_internal::kRows;
  return i < rows.size() && rows[i].name != nullptr ? rows[i] : step_table_internal::kUnknownRow;
}

// ---- derived properties every consumer needs (one definition each) ----

// A step talks to another rank (peer must be a valid other rank).
inline bool HasPeer(const StepSemantics& m) {
  return m.receives || m.sends != StepOperand::kNone || m.reads_remote || m.signals || m.waits;
}
// The rank a step's message goes to, or -1 when it sends nothing.
inline int SendPeer(const Step& s) {
  const StepSemantics& m = SemanticsOf(s.op);
  if (m.sends == StepOperand::kNone) return -1;
  return m.sends_to_second_peer ? s.to : s.peer;
}
// The channel a step's message travels on (valid when it sends).
inline uint16_t SendChannel(const Step& s) {
  return SemanticsOf(s.op).sends_to_second_peer ? s.to_channel : s.channel;
}
// The region a step's message carries (valid when it sends).
inline const Region& SentRegion(const Step& s) {
  return SemanticsOf(s.op).sends == StepOperand::kDst ? s.dst : s.src;
}
// A step whose message is posted only after its own receive completed (fused forwarding).
inline bool ForwardsAfterReceive(const StepSemantics& m) {
  return m.receives && m.sends != StepOperand::kNone;
}
// "from rank p" (data or signal comes from the peer) or "to rank p" in messages.
inline bool PeerIsSource(const StepSemantics& m) {
  return m.receives || m.reads_remote || m.waits;
}

// The local regions a step reads and writes, as pointers into the step (nullptr = none). The
// hazard rule (schedule.h) is applied to these by all three consumers; peers' memory is ordered
// by fences instead.
struct StepRegions {
  const Region* read[2] = {nullptr, nullptr};
  const Region* write = nullptr;
};
inline StepRegions LocalRegions(const Step& s) {
  const StepSemantics& m = SemanticsOf(s.op);
  StepRegions a;
  int n = 0;
  if (m.reads_src) a.read[n++] = &s.src;
  if (m.reads_dst) a.read[n++] = &s.dst;
  if (m.writes_dst) a.write = &s.dst;
  return a;
}

}  // namespace weft
