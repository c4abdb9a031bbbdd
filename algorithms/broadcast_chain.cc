// Broadcast, pipelined chain: root -> root+1 -> ... -> root+p-1 (mod p).
//
// The message is cut into chunks of request.chunk.chunk_elems; every inner rank receives chunk
// c from its predecessor and forwards it while chunk c+1 is on its way, so for large messages
// the time approaches one message transfer regardless of p. Latency grows with p: for small
// messages the binomial tree is better.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildBroadcastChain(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "chain");
  const int p = request.nranks, root = request.root;
  const size_t n = request.count;
  for (int r : RanksToBuild(request)) {
    s.ranks[r].input_count = r == root ? n : 0;
    s.ranks[r].output_count = n;
  }
  // The root's own result: a local copy (the executor skips it when in-place).
  if (n > 0 && request.scope.Includes(root)) s.ranks[root].steps.push_back(CopyStep(In(0, n), Out(0, n)));
  std::vector<Chunk> chunks = SplitChunks(0, n, request.chunk.chunk_elems);
  for (int pos = 0; pos < p; ++pos) {
    const int rank = (root + pos) % p;
    const int prev = (root + pos - 1 + p) % p, next = (root + pos + 1) % p;
    if (!request.scope.Includes(rank)) continue;  // only the plan's rank (PlanScope)
    auto& steps = s.ranks[rank].steps;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const uint16_t ch = ChunkChannel(request.chunk, c);
      const Chunk k = chunks[c];
      // chunk c: receive from the predecessor, then forward to the successor.
      if (pos == 0) {
        if (p > 1) steps.push_back(SendStep(next, In(k.offset, k.count), ch));
        continue;
      }
      // Inner ranks receive and forward in one fused step (recv_copy_send).
      if (pos + 1 < p)
        steps.push_back(RecvCopySendStep(prev, Out(k.offset, k.count), next, ch, ch));
      else
        steps.push_back(RecvStep(prev, Out(k.offset, k.count), ch));
    }
  }
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kBroadcast, "chain", AlwaysApplicable, BuildBroadcastChain);

}  // namespace
}  // namespace weft
