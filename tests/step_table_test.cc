// The step-semantics table (algorithms/step_table.h): every op has a row, the rows are
// internally consistent, and the executor, the checker and the simulator read the same rules
// from it (they agree on schedules whose verdict a table rule decides).
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"
#include "algorithms/step_table.h"
#include "check/checker.h"
#include "exec/executor.h"
#include "sim/engine.h"
#include "topo/presets.h"
#include "transports/inproc/inproc_transport.h"

namespace weft {
namespace {

TEST(StepTable, EveryOpHasItsOwnRow) {
  std::set<std::string> names;
  for (int i = 0; i < kNumStepOps; ++i) {
    const StepOp op = static_cast<StepOp>(i);
    const StepSemantics& m = SemanticsOf(op);
    EXPECT_EQ(static_cast<int>(m.op), i) << "row " << i << " describes another op";
    ASSERT_NE(m.name, nullptr);
    EXPECT_STRNE(m.name, "unknown") << "op " << i << " has no row in step_table.cc";
    EXPECT_TRUE(names.insert(m.name).second) << "two ops are named " << m.name;
  }
  // One past the last op is not an op: it gets the blank "unknown" row.
  EXPECT_STREQ(SemanticsOf(static_cast<StepOp>(kNumStepOps)).name, "unknown");
}

TEST(StepTable, RowsAreConsistent) {
  for (int i = 0; i < kNumStepOps; ++i) {
    const StepSemantics& m = SemanticsOf(static_cast<StepOp>(i));
    SCOPED_TRACE(m.name);
    // A step writes dst exactly when it computes a value for it.
    EXPECT_EQ(m.writes_dst, m.combine != StepCombine::kNothing);
    const bool uses_src = m.lhs == StepOperand::kSrc || m.rhs == StepOperand::kSrc ||
                          m.sends == StepOperand::kSrc;
    EXPECT_EQ(m.reads_src, uses_src) << "reads_src must match the operands";
    if (m.combine == StepCombine::kReduceIn) {
      EXPECT_NE(m.lhs, StepOperand::kNone);
      EXPECT_NE(m.rhs, StepOperand::kNone);
    }
    EXPECT_EQ(m.lhs == StepOperand::kReceived || m.rhs == StepOperand::kReceived, m.receives);
    EXPECT_EQ(m.lhs == StepOperand::kRemote || m.rhs == StepOperand::kRemote, m.reads_remote);
    // Whatever waits on another rank completes later and holds a window slot.
    if (m.receives || m.sends != StepOperand::kNone || m.waits) EXPECT_TRUE(m.asynchronous);
    if (m.waits) EXPECT_EQ(m.fence, StepFence::kAcquire);
    if (m.signals) EXPECT_EQ(m.fence, StepFence::kRelease);
    if (m.reads_remote || m.signals || m.waits) EXPECT_TRUE(m.needs_direct);
    if (m.same_size_src_dst) EXPECT_TRUE(m.reads_src && m.writes_dst);
    // Fused steps forward the value they wrote, to their second peer.
    if (ForwardsAfterReceive(m)) {
      EXPECT_EQ(m.sends, StepOperand::kDst);
      EXPECT_TRUE(m.sends_to_second_peer && m.writes_dst);
    }
    if (m.sends_to_second_peer) EXPECT_TRUE(ForwardsAfterReceive(m));
  }
}

TEST(StepTable, LocalRegionsFollowTheRow) {
  Step s;
  s.src = In(0, 4);
  s.dst = Out(0, 4);
  s.op = StepOp::kReduce;  // reads both operands, writes the accumulator
  StepRegions g = LocalRegions(s);
  EXPECT_EQ(g.read[0], &s.src);
  EXPECT_EQ(g.read[1], &s.dst);
  EXPECT_EQ(g.write, &s.dst);
  s.op = StepOp::kSend;
  g = LocalRegions(s);
  EXPECT_EQ(g.read[0], &s.src);
  EXPECT_EQ(g.write, nullptr);
  s.op = StepOp::kSignal;
  g = LocalRegions(s);
  EXPECT_EQ(g.read[0], nullptr);
  EXPECT_EQ(g.write, nullptr);
}

// Codec steps are local, read src and write dst of another size (values <-> encoded
// elements); decode_reduce also reads its accumulator, as reduce does.
TEST(StepTable, CodecRows) {
  for (StepOp op : {StepOp::kEncode, StepOp::kDecode, StepOp::kDecodeReduce}) {
    const StepSemantics& m = SemanticsOf(op);
    SCOPED_TRACE(m.name);
    EXPECT_FALSE(m.asynchronous || m.receives || HasPeer(m) || m.needs_direct);
    EXPECT_EQ(m.fence, StepFence::kNone);
    EXPECT_TRUE(m.reads_src && m.writes_dst);
    EXPECT_FALSE(m.same_size_src_dst);
  }
  EXPECT_EQ(SemanticsOf(StepOp::kEncode).codec, StepCodec::kEncodeSrc);
  EXPECT_EQ(SemanticsOf(StepOp::kDecode).codec, StepCodec::kDecodeSrc);
  EXPECT_EQ(SemanticsOf(StepOp::kDecodeReduce).codec, StepCodec::kDecodeSrc);
  EXPECT_EQ(SemanticsOf(StepOp::kDecodeReduce).combine, StepCombine::kReduceIn);
  EXPECT_EQ(SemanticsOf(StepOp::kDecodeReduce).lhs, StepOperand::kDst);  // accumulator first
  EXPECT_TRUE(SemanticsOf(StepOp::kDecodeReduce).reads_dst);
  EXPECT_FALSE(SemanticsOf(StepOp::kDecode).reads_dst);
  for (int i = 0; i < kNumStepOps; ++i) {
    const StepOp op = static_cast<StepOp>(i);
    if (op != StepOp::kEncode && op != StepOp::kDecode && op != StepOp::kDecodeReduce)
      EXPECT_EQ(SemanticsOf(op).codec, StepCodec::kNone) << SemanticsOf(op).name;
  }
}

// ---- the three consumers on one schedule ----

Schedule Sched(Collective c, int p, size_t count, size_t in, size_t out) {
  Schedule s;
  s.collective = c;
  s.algorithm = "handmade";
  s.nranks = p;
  s.count = count;
  s.ranks.resize(p);
  for (auto& r : s.ranks) {
    r.input_count = in;
    r.output_count = out;
  }
  return s;
}

ScheduleRequest Req(Collective c, int p, size_t count) {
  ScheduleRequest r;
  r.collective = c;
  r.nranks = p;
  r.count = count;
  return r;
}

// Runs `s` with the executor on threads over the inproc transport (float sum, input of rank r
// = r + 1 + i) and returns each rank's status; outputs land in `out`.
std::vector<Status> Execute(const Schedule& s, double timeout_s,
                            std::vector<std::vector<float>>* out) {
  const int p = s.nranks;
  auto hub = std::make_shared<InprocHub>(p);
  std::vector<Status> result(p);
  out->assign(p, {});
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    (*out)[r].assign(s.ranks[r].output_count, -1.0f);
    threads.emplace_back([&, r] {
      InprocTransport t(hub, r);
      std::vector<Transport*> peers(p, &t);
      std::vector<float> in(s.ranks[r].input_count);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1 + i);
      ScratchBuffer heap;
      ExecContext ctx;
      ctx.rank = r;
      ctx.nranks = p;
      ctx.tag = 7;
      ctx.timeout_s = timeout_s;
      ctx.peer_transport = &peers;
      ctx.scratch = &heap;
      ctx.what = "step table test";
      ExecBuffers b;
      b.input = in.data();
      b.output = (*out)[r].data();
      result[r] = ExecuteSchedule(s.ranks[r], s.window, ctx, b);
      if (!result[r].ok()) t.Abort(result[r]);
    });
  }
  for (auto& th : threads) th.join();
  return result;
}

StatusOr<SimResult> Simulate(const Schedule& s) {
  auto f = MakePreset("host:" + std::to_string(s.nranks), 0);
  if (!f.ok()) return f.status();
  return SimulateSchedule(s, **f, 4, SimOptions());
}

TEST(StepTableConsumers, AgreeOnAGoodSchedule) {
  // Two ranks: exchange inputs with recv_reduce, finalize (sum: no-op).
  Schedule s = Sched(Collective::kAllReduce, 2, 4, 4, 4);
  for (int r = 0; r < 2; ++r)
    s.ranks[r].steps = {SendStep(1 - r, In(0, 4)), RecvReduceStep(1 - r, In(0, 4), Out(0, 4)),
                        FinalizeStep(Out(0, 4))};
  CheckOptions o;
  EXPECT_TRUE(CheckSchedule(s, Req(Collective::kAllReduce, 2, 4), o).ok());
  EXPECT_TRUE(Simulate(s).ok());
  std::vector<std::vector<float>> out;
  for (const Status& st : Execute(s, 10, &out)) ASSERT_TRUE(st.ok()) << st.message();
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[r][i], static_cast<float>(3 + 2 * i));
}

TEST(StepTableConsumers, AgreeThatAHazardCycleDeadlocks) {
  // Each rank's send reads what its recv writes (the table's regions), so the send waits for
  // the recv, which waits for the peer's send: all three must see the cycle.
  Schedule s = Sched(Collective::kAllGather, 2, 3, 3, 6);
  for (int r = 0; r < 2; ++r)
    s.ranks[r].steps = {CopyStep(In(0, 3), Out(3 * r, 3)), RecvStep(1 - r, Out(3 * (1 - r), 3)),
                        SendStep(1 - r, Out(3 * (1 - r), 3))};
  CheckOptions o;
  Status checked = CheckSchedule(s, Req(Collective::kAllGather, 2, 3), o);
  EXPECT_FALSE(checked.ok());
  EXPECT_NE(checked.message().find("deadlock"), std::string::npos) << checked.message();
  auto sim = Simulate(s);
  EXPECT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("stuck"), std::string::npos) << sim.status().message();
  std::vector<std::vector<float>> out;
  for (const Status& st : Execute(s, 1, &out)) EXPECT_FALSE(st.ok());
}

TEST(StepTableConsumers, AgreeThatWindowOneDeadlocksAndTwoDoesNot) {
  // Both ranks receive first: with one asynchronous step in flight neither can send.
  Schedule s = Sched(Collective::kAllReduce, 2, 4, 4, 4);
  for (int r = 0; r < 2; ++r)
    s.ranks[r].steps = {RecvReduceStep(1 - r, In(0, 4), Out(0, 4)), SendStep(1 - r, In(0, 4))};
  CheckOptions o;
  std::vector<std::vector<float>> out;
  s.window = 1;
  EXPECT_FALSE(CheckSchedule(s, Req(Collective::kAllReduce, 2, 4), o).ok());
  EXPECT_FALSE(Simulate(s).ok());
  for (const Status& st : Execute(s, 1, &out)) EXPECT_FALSE(st.ok());
  s.window = 2;
  EXPECT_TRUE(CheckSchedule(s, Req(Collective::kAllReduce, 2, 4), o).ok());
  EXPECT_TRUE(Simulate(s).ok());
  for (const Status& st : Execute(s, 10, &out)) EXPECT_TRUE(st.ok()) << st.message();
}

TEST(StepTableConsumers, AgreeOnFusedForwardOrder) {
  // Rank 1 forwards rank 0's element (recv_copy_send), then sends its own: same stream to
  // rank 2. The forward waits for its data and the plain send may not overtake it, so rank
  // 2's first receive holds rank 0's element in the checker, the simulator and the executor.
  Schedule s = Sched(Collective::kAllGather, 3, 1, 1, 3);
  s.ranks[0].steps = {CopyStep(In(0, 1), Out(0, 1)), SendStep(1, In(0, 1)), RecvStep(2, Out(2, 1)),
                      RecvStep(2, Out(1, 1))};
  s.ranks[1].steps = {CopyStep(In(0, 1), Out(1, 1)), RecvCopySendStep(0, Out(0, 1), 2),
                      SendStep(2, In(0, 1)), RecvStep(2, Out(2, 1))};
  s.ranks[2].steps = {CopyStep(In(0, 1), Out(2, 1)), RecvStep(1, Out(0, 1)), RecvStep(1, Out(1, 1)),
                      SendStep(0, In(0, 1)), SendStep(0, Out(1, 1)), SendStep(1, In(0, 1))};
  CheckOptions o;
  Status checked = CheckSchedule(s, Req(Collective::kAllGather, 3, 1), o);
  EXPECT_TRUE(checked.ok()) << checked.message();
  EXPECT_TRUE(Simulate(s).ok());
  std::vector<std::vector<float>> out;
  for (const Status& st : Execute(s, 10, &out)) ASSERT_TRUE(st.ok()) << st.message();
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 3; ++q) EXPECT_EQ(out[r][q], static_cast<float>(q + 1)) << r << " " << q;
}

TEST(StepTableConsumers, AgreeOnAFusedTree) {
  // The double binary tree uses recv_reduce_send up and recv_copy_send down at inner nodes.
  ScheduleRequest r = Req(Collective::kAllReduce, 4, 10);
  r.chunk.chunk_elems = 1;
  StatusOr<Schedule> s = FindAlgorithm(Collective::kAllReduce, "tree")->build(r);
  ASSERT_TRUE(s.ok());
  CheckOptions o;
  EXPECT_TRUE(CheckSchedule(*s, r, o).ok());
  EXPECT_TRUE(Simulate(*s).ok());
  std::vector<std::vector<float>> out;
  for (const Status& st : Execute(*s, 10, &out)) ASSERT_TRUE(st.ok()) << st.message();
  for (int q = 0; q < 4; ++q)
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(out[q][i], static_cast<float>(10 + 4 * i));
}

TEST(StepTableConsumers, CheckerEnforcesTheSameSizeRule) {
  // copy's row says src and dst hold the same number of elements.
  Schedule s = Sched(Collective::kAllReduce, 1, 4, 4, 4);
  s.ranks[0].steps = {CopyStep(In(0, 4), Out(0, 3))};
  CheckOptions o;
  Status st = CheckSchedule(s, Req(Collective::kAllReduce, 1, 4), o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("differ in size"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace weft
