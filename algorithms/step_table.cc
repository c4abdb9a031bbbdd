// The rows of the step-semantics table (see step_table.h for what each field means).
#include "algorithms/step_table.h"

#include <array>

namespace weft {
namespace {

using Table = std::array<StepSemantics, kNumStepOps>;

// Every row starts blank: a local step that touches nothing. Each op then states only what
// it does, so a reader compares rows by their differences.
constexpr StepSemantics& Row(Table& t, StepOp op, const char* name) {
  StepSemantics& m = t[static_cast<size_t>(op)];
  m = StepSemantics{op, name, StepCombine::kNothing, StepOperand::kNone, StepOperand::kNone,
                    false, false, false, false, StepOperand::kNone, false, false, false, false,
                    false, StepFence::kNone, false, false, StepCodec::kNone};
  return m;
}

constexpr void MessageRows(Table& t) {
  StepSemantics& send = Row(t, StepOp::kSend, "send");
  send.reads_src = true;
  send.sends = StepOperand::kSrc;
  send.asynchronous = true;

  StepSemantics& recv = Row(t, StepOp::kRecv, "recv");
  recv.combine = StepCombine::kCopyIn;
  recv.lhs = StepOperand::kReceived;
  recv.writes_dst = recv.receives = recv.asynchronous = true;

  // Local data first, received second: the order every reducing schedule documents.
  StepSemantics& rr = Row(t, StepOp::kRecvReduce, "recv_reduce");
  rr.combine = StepCombine::kReduceIn;
  rr.lhs = StepOperand::kSrc;
  rr.rhs = StepOperand::kReceived;
  rr.reads_src = rr.writes_dst = rr.receives = rr.asynchronous = rr.same_size_src_dst = true;

  // Fused: recv_reduce, then the result goes on to `to` (the hazard on dst covers the send's
  // read of it, so dst is not overwritten while the message is in flight).
  StepSemantics& rrs = Row(t, StepOp::kRecvReduceSend, "recv_reduce_send");
  rrs = rr;
  rrs.op = StepOp::kRecvReduceSend;
  rrs.name = "recv_reduce_send";
  rrs.sends = StepOperand::kDst;
  rrs.sends_to_second_peer = true;

  StepSemantics& rcs = Row(t, StepOp::kRecvCopySend, "recv_copy_send");
  rcs = recv;
  rcs.op = StepOp::kRecvCopySend;
  rcs.name = "recv_copy_send";
  rcs.sends = StepOperand::kDst;
  rcs.sends_to_second_peer = true;
}

constexpr void LocalRows(Table& t) {
  StepSemantics& copy = Row(t, StepOp::kCopy, "copy");
  copy.combine = StepCombine::kCopyIn;
  copy.lhs = StepOperand::kSrc;
  copy.reads_src = copy.writes_dst = copy.same_size_src_dst = true;

  // dst = dst (op) src: the accumulator is the left operand.
  StepSemantics& reduce = Row(t, StepOp::kReduce, "reduce");
  reduce.combine = StepCombine::kReduceIn;
  reduce.lhs = StepOperand::kDst;
  reduce.rhs = StepOperand::kSrc;
  reduce.reads_src = reduce.reads_dst = reduce.writes_dst = reduce.same_size_src_dst = true;

  // Finalize rewrites dst in place; the write covers the read for the hazard rule.
  StepSemantics& fin = Row(t, StepOp::kFinalize, "finalize");
  fin.combine = StepCombine::kFinalizeIn;
  fin.lhs = StepOperand::kDst;
  fin.writes_dst = true;
}

constexpr void DirectRows(Table& t) {
  StepSemantics& read = Row(t, StepOp::kDirectRead, "direct_read");
  read.combine = StepCombine::kCopyIn;
  read.lhs = StepOperand::kRemote;
  read.writes_dst = read.reads_remote = read.needs_direct = true;

  StepSemantics& red = Row(t, StepOp::kDirectReduce, "direct_reduce");
  red.combine = StepCombine::kReduceIn;
  red.lhs = StepOperand::kSrc;
  red.rhs = StepOperand::kRemote;
  red.reads_src = red.writes_dst = red.reads_remote = red.needs_direct = true;
  red.same_size_src_dst = true;

  StepSemantics& sig = Row(t, StepOp::kSignal, "signal");
  sig.signals = sig.needs_direct = true;
  sig.fence = StepFence::kRelease;

  StepSemantics& wait = Row(t, StepOp::kWait, "wait");
  wait.waits = wait.needs_direct = wait.asynchronous = true;
  wait.fence = StepFence::kAcquire;
}

// Codec steps are local (the CPU backend completes them at issue) and read a src of another
// size than dst: values -> encoded elements, or back (schedule.h). Encoded bytes travel in
// ordinary send/recv steps.
constexpr void CodecRows(Table& t) {
  StepSemantics& enc = Row(t, StepOp::kEncode, "encode");
  enc.combine = StepCombine::kCopyIn;
  enc.lhs = StepOperand::kSrc;
  enc.reads_src = enc.writes_dst = true;
  enc.codec = StepCodec::kEncodeSrc;

  StepSemantics& dec = Row(t, StepOp::kDecode, "decode");
  dec = enc;
  dec.op = StepOp::kDecode;
  dec.name = "decode";
  dec.codec = StepCodec::kDecodeSrc;

  // dst = dst (op) decode(src): the accumulator first, as kReduce (rank order of the sum).
  StepSemantics& dr = Row(t, StepOp::kDecodeReduce, "decode_reduce");
  dr.combine = StepCombine::kReduceIn;
  dr.lhs = StepOperand::kDst;
  dr.rhs = StepOperand::kSrc;
  dr.reads_src = dr.reads_dst = dr.writes_dst = true;
  dr.codec = StepCodec::kDecodeSrc;
}

constexpr Table BuildTable() {
  Table t{};
  MessageRows(t);
  LocalRows(t);
  DirectRows(t);
  CodecRows(t);
  return t;
}

}  // namespace

namespace step_table_internal {
// Built at compile time (constexpr), so SemanticsOf can be inline and needs no guard for a
// function-local static: it is on the executor's per-step path and the checker's inner loops.
constexpr std::array<StepSemantics, kNumStepOps> kRows = BuildTable();
// An out-of-range value (a corrupted schedule) gets a blank row named "unknown": it touches
// nothing and has no peer, so the checker rejects it by name rather than crashing.
constexpr StepSemantics kUnknownRow{static_cast<StepOp>(255), "unknown", StepCombine::kNothing, StepOperand::kNone,
                                    StepOperand::kNone, false, false, false, false,
                                    StepOperand::kNone, false, false, false, false, false,
                                    StepFence::kNone, false, false, StepCodec::kNone};
}  // namespace step_table_internal

}  // namespace weft
