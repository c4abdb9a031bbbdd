// Two-shot direct allreduce (same host, every peer's window mapped): a direct reduce-scatter
// followed by a direct allgather, through the windows.
//
// Each rank reads 2 (p-1)/p * n elements instead of oneshot's (p-1) * n: the choice for large
// messages; it costs one more signal round per round than oneshot.
// Per round k of at most C elements at offset o, with parts PartOffset/PartSize(c, p, q) and
// double-buffered Scratch slots (slot k % 2 = [A: c_max elements | B: ceil(c_max / p)]):
//   1. copy input[o, c) into A, signal every peer "ready k";
//   2. from each peer: wait "done k-1" (consumed in order; see below), wait "ready k";
//   3. B[0, part r) = A_0[part r] (op) A_1[part r] (op) ... read from every peer's A in rank
//      order (bit-identical on every rank), finalize it, signal every peer "reduced k";
//   4. wait every peer's "reduced k"; output[o + part q] = peer q's B for every q;
//      signal every peer "done k".
// After the last round: wait every peer's last "done". Slot reuse in round k + 2 is safe: A_k
// was last read before the peers' "reduced k" (consumed in round k), B_k before their
// "done k" (consumed in round k + 1).
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
  // A + B of one slot stay within half the budget.
  const DirectRounds plan(req, n, (kDirectScratchElems / 2 - 1) * p / (p + 1));
  const size_t c_max = plan.per_round, rounds = plan.rounds;
  const size_t b_max = (c_max + p - 1) / p;
  const size_t slot_elems = c_max + b_max;
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
    rs.scratch_count = 2 * slot_elems;
    for (size_t k = 0; k < rounds; ++k) {
      const size_t o = k * c_max, c = std::min(c_max, n - o);
      const size_t a = (k % 2) * slot_elems, b = a + c_max;
      // 1. publish our contribution
      rs.steps.push_back(CopyStep(In(o, c), Tmp(a, c)));
      SignalAll(rs, r, p);
      // 2. everyone's contribution is ready
      for (int q = 0; q < p; ++q) {
        if (q == r) continue;
        if (k > 0) WaitOne(rs, q);  // done k-1
        WaitOne(rs, q);             // ready k
      }
      // 3. reduce our part, in rank order
      const size_t po = PartOffset(c, p, r), ps = PartSize(c, p, r);
      if (ps > 0) {
        for (int q = 0; q < p; ++q) {
          rs.steps.push_back(InRankOrder(r, q, q == 0, Tmp(a + po, ps), Tmp(b, ps)));
        }
        rs.steps.push_back(FinalizeStep(Tmp(b, ps)));
      }
      SignalAll(rs, r, p);  // reduced k
      WaitAll(rs, r, p);
      // 4. gather every part
      for (int q = 0; q < p; ++q) {
        const size_t qo = PartOffset(c, p, q), qs = PartSize(c, p, q);
        if (qs == 0) continue;
        if (q == r) {
          rs.steps.push_back(CopyStep(Tmp(b, qs), Out(o + qo, qs)));
        } else {
          rs.steps.push_back(DirectStep(q, Tmp(b, qs), Out(o + qo, qs), /*reduce=*/false));
        }
      }
      SignalAll(rs, r, p);  // done k
    }
    WaitAll(rs, r, p);  // last "done": our window is free again
  }
  return sched;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "twoshot",
                        AllRanksMappable,
                        BuildAllReduceTwoshot);

}  // namespace
}  // namespace weft
