// Two-shot direct allreduce (same host, every peer's window mapped): a direct reduce-scatter
// followed by a direct allgather, through the windows.
//
// Each rank reads 2 (p-1)/p * n elements instead of oneshot's (p-1) * n: the choice for large
// messages; it costs one more signal round per round than oneshot.
// Per round k of at most C elements at offset o, with parts PartOffset/PartSize(c, p, q) and
// double-buffered Scratch slots (slot k % 2 = A: c_max elements, part q of it at part q's
// offset; this rank's own part of A holds its reduced part, "B"):
//   1. copy input[o + part q] into A[part q] for every q != r (what the peers need: a rank's
//      own part is read from its input, never staged), signal every peer "ready k";
//   2. from each peer: wait "done k-1" (consumed in order; see below), wait "ready k";
//   3. B = x_0 (op) x_1 (op) ... in rank order, x_q = peer q's A[part r] read in its window,
//      x_r = input[o + part r] (bit-identical on every rank), finalize it, signal "reduced k";
//   4. wait every peer's "reduced k"; output[o + part q] = peer q's B for every q;
//      signal every peer "done k".
// After the last round: wait every peer's last "done". Slot reuse in round k + 2 is safe: A_k
// was last read before the peers' "reduced k" (consumed in round k), B_k before their
// "done k" (consumed in round k + 1).
// Per rank and element of n: reads 2.5 and writes 2 on 2 ranks (staging all of the input
// would cost 3 and 2.5: the own part's copy in and its read back).
//
// Zero-copy variant (ScheduleRequest::peer_buffers_mapped: every rank's buffers registered
// and mapped by its peers), one round over the whole count, no staging:
//   1. signal every peer "ready", wait for theirs (their inputs are published);
//   2. output[part r] = input_0[part r] (op) input_1[part r] (op) ... read in place from the
//      peers' inputs in rank order (ZeroCopyReduceInRankOrder), finalize;
//   3. signal "reduced", wait for every peer's: every part is final in its owner's output,
//      and no peer reads our input any more, so in place we may overwrite it;
//   4. output[part q] = peer q's output[part q] for every q != r;
//   5. signal "done", wait for every peer's: nobody reads our output, the call may return.
// Per rank: reads (1 + (p-1)/p) n elements and writes n (2-rank: 1.5 n read, n written,
// against 3.5 n read and 2.5 n written with staging).
#include <algorithm>

#include "algorithms/direct_pattern.h"
#include "algorithms/patterns.h"
#include "algorithms/registry.h"

namespace weft {
namespace {

// B = x_0 (op) x_1 (op) ... (op) x_{p-1} folded left in rank order, where x_q is peer q's
// Scratch region `slot` (the same region in every window: B's own) and x_r is `own` (this
// rank's input, read in place). The first peer's term is copied into B, then the others are
// reduced in: a plain copy pulls a peer's freshly written lines across cores faster than the
// reduction loop does (at 64 MiB on 2 ranks, reducing straight from the peer's window cost
// 1.6x the whole call when the two cores share no cache). Rank 0 computes x_1 (op) x_0: the
// same bits as x_0 (op) x_1, every weft reduction being commutative elementwise; the staging
// and zero-copy schedules fold alike, so both give the same bits.
void StagedReduceInRankOrder(RankSchedule& rs, int r, int p, Region slot, Region own) {
  const int first = r == 0 ? 1 : 0;
  rs.steps.push_back(DirectStep(first, slot, slot, /*reduce=*/false));
  for (int q = 0; q < p; ++q) {
    if (q == first) continue;
    if (q == r) rs.steps.push_back(ReduceStep(own, slot));
    else rs.steps.push_back(DirectStep(q, slot, slot, /*reduce=*/true));
  }
}

// The zero-copy variant's steps for rank r (see the file comment).
void BuildZeroCopyRank(RankSchedule& rs, int r, int p, size_t n) {
  const size_t po = PartOffset(n, p, r), ps = PartSize(n, p, r);
  rs.scratch_count = ZeroCopyReduceScratch(r, ps);
  SignalRound(rs, r, p);  // 1. ready
  if (ps > 0) {           // 2. reduce our part
    ZeroCopyReduceInRankOrder(rs, r, p, In(po, ps), Out(po, ps), /*tmp=*/0);
    rs.steps.push_back(FinalizeStep(Out(po, ps)));
  }
  SignalRound(rs, r, p);  // 3. reduced
  for (int q = 0; q < p; ++q) {  // 4. gather the other parts
    const size_t qo = PartOffset(n, p, q), qs = PartSize(n, p, q);
    if (q != r && qs > 0)
      rs.steps.push_back(DirectStep(q, Out(qo, qs), Out(qo, qs), /*reduce=*/false));
  }
  SignalRound(rs, r, p);  // 5. done
}

StatusOr<Schedule> BuildAllReduceTwoshot(const ScheduleRequest& req) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(req));
  Schedule sched = NewSchedule(req, "twoshot");
  const int p = req.nranks;
  const size_t n = req.count;
  // One slot is half the budget.
  const DirectRounds plan(req, n, DirectScratchElems(req) / 2);
  const size_t c_max = plan.per_round, rounds = plan.rounds;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n;
    if (n == 0) continue;
    if (p == 1) {
      SingleRankResult(rs, n, /*reduction=*/true);
      continue;
    }
    if (req.peer_buffers_mapped) {
      BuildZeroCopyRank(rs, r, p, n);
      continue;
    }
    rs.scratch_count = 2 * c_max;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o);
      const size_t a = (k % 2) * c_max;
      const size_t po = PartOffset(c, p, r), ps = PartSize(c, p, r);
      // 1. publish the parts the peers reduce (everything but our own part)
      if (po > 0) rs.steps.push_back(CopyStep(In(o, po), Tmp(a, po)));
      if (po + ps < c) rs.steps.push_back(CopyStep(In(o + po + ps, c - po - ps), Tmp(a + po + ps, c - po - ps)));
      // 2. everyone's contribution is ready
      ReadyRound(rs, r, p, /*wait_done_first=*/k > 0);
      // 3. reduce our part, in rank order, into B (our own part of A)
      if (ps > 0) {
        StagedReduceInRankOrder(rs, r, p, Tmp(a + po, ps), In(o + po, ps));
        rs.steps.push_back(FinalizeStep(Tmp(a + po, ps)));
      }
      SignalAll(rs, r, p);  // reduced k
      WaitAll(rs, r, p);
      // 4. gather every part
      for (int q = 0; q < p; ++q) {
        const size_t qo = PartOffset(c, p, q), qs = PartSize(c, p, q);
        if (qs == 0) continue;
        if (q == r) {
          rs.steps.push_back(CopyStep(Tmp(a + qo, qs), Out(o + qo, qs)));
        } else {
          rs.steps.push_back(DirectStep(q, Tmp(a + qo, qs), Out(o + qo, qs), /*reduce=*/false));
        }
      }
      SignalAll(rs, r, p);  // done k
    }
    WaitAll(rs, r, p);  // last "done": our window is free again
  }
  return sched;
}

WEFT_REGISTER_DIRECT_ALGORITHM(Collective::kAllReduce, "twoshot", BuildAllReduceTwoshot, nullptr);

}  // namespace
}  // namespace weft
