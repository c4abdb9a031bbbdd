// Reduce, pipelined chain towards the root: root+p-1 -> root+p-2 -> ... -> root (mod p).
//
// Chunk c travels down the chain; each inner rank adds its input on the way
// (recv_reduce_send: reduced into scratch and forwarded in one fused step), so intermediate
// ranks never touch their output buffer (NCCL lets non-roots pass NULL). The root reduces into its output and finalizes each
// chunk once it holds every contribution (weftAvg divides there, exactly once).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceChain(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "chain");
  const int p = request.nranks, root = request.root;
  const size_t n = request.count;
  for (int r : RanksToBuild(request)) {
    s.ranks[r].input_count = n;
    s.ranks[r].output_count = r == root ? n : 0;
  }
  if (n == 0) return s;
  if (p == 1) {  // root == 0, the only rank: always in scope
    s.ranks[root].steps.push_back(CopyStep(In(0, n), Out(0, n)));
    s.ranks[root].steps.push_back(FinalizeStep(Out(0, n)));
    return s;
  }
  std::vector<Chunk> chunks = SplitChunks(0, n, request.chunk.chunk_elems);
  for (int pos = 0; pos < p; ++pos) {
    const int rank = (root + pos) % p;
    const int towards_root = (root + pos - 1 + p) % p, from = (root + pos + 1) % p;
    if (!request.scope.Includes(rank)) continue;  // only the plan's rank (PlanScope)
    auto& steps = s.ranks[rank].steps;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const uint16_t ch = ChunkChannel(request.chunk, c);
      const Chunk k = chunks[c];
      if (pos == p - 1) {  // chain end: send the raw input
        steps.push_back(SendStep(towards_root, In(k.offset, k.count), ch));
      } else if (pos > 0) {  // inner: partial = input + received, forwarded in the same step
        steps.push_back(RecvReduceSendStep(from, In(k.offset, k.count), Tmp(k.offset, k.count),
                                           towards_root, ch, ch));
      } else {  // root: the last contribution completes the chunk
        steps.push_back(RecvReduceStep(from, In(k.offset, k.count), Out(k.offset, k.count), ch));
        steps.push_back(FinalizeStep(Out(k.offset, k.count)));
      }
    }
  }
  FitScratch(&s);
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduce, "chain", AlwaysApplicable, BuildReduceChain);

}  // namespace
}  // namespace weft
