// Broadcast, binomial tree (pipelined by chunks): the root sends to the roots of its subtrees,
// largest first; every rank forwards each chunk to its children as soon as it arrives.
// ceil(log2 p) hops: the latency choice for small and medium messages.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildBroadcastBinomial(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "binomial");
  const int p = request.nranks, root = request.root;
  const size_t n = request.count;
  std::vector<Chunk> chunks = SplitChunks(0, n, request.chunk.chunk_elems);
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = r == root ? n : 0;
    rs.output_count = n;
    if (r == root && n > 0) rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
    const int parent = BinomialParent(r, root, p);
    const std::vector<int> children = BinomialChildren(r, root, p);
    for (size_t c = 0; c < chunks.size(); ++c) {
      const uint16_t ch = ChunkChannel(request.chunk, c);
      const Chunk k = chunks[c];
      // chunk c: from the parent (the root has it), then to every child, largest subtree first.
      Region from = r == root ? In(k.offset, k.count) : Out(k.offset, k.count);
      if (parent >= 0) rs.steps.push_back(RecvStep(parent, Out(k.offset, k.count), ch));
      for (int child : children) rs.steps.push_back(SendStep(child, from, ch));
    }
  }
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kBroadcast, "binomial", AlwaysApplicable,
                        BuildBroadcastBinomial);

}  // namespace
}  // namespace weft
