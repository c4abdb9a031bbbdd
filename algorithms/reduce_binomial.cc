// Reduce, binomial tree (pipelined by chunks): every rank adds its children's partial sums to
// its input, smallest subtree first, and sends the result to its parent. Non-roots accumulate
// in scratch (their output may be NULL); the root accumulates in its output and finalizes.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceBinomial(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "binomial");
  const int p = request.nranks, root = request.root;
  const size_t n = request.count;
  std::vector<Chunk> chunks = SplitChunks(0, n, request.chunk.chunk_elems);
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = n;
    rs.output_count = r == root ? n : 0;
    const int parent = BinomialParent(r, root, p);
    std::vector<int> children = BinomialChildren(r, root, p);
    std::reverse(children.begin(), children.end());  // smallest subtree arrives first
    for (size_t c = 0; c < chunks.size(); ++c) {
      const uint16_t ch = ChunkChannel(request.chunk, c);
      const Chunk k = chunks[c];
      Region in = In(k.offset, k.count);
      Region acc = r == root ? Out(k.offset, k.count) : Tmp(k.offset, k.count);
      // chunk c: acc = input + each child's partial sum.
      Region cur = in;
      for (int child : children) {
        rs.steps.push_back(RecvReduceStep(child, cur, acc, ch));
        cur = acc;
      }
      if (r == root) {
        if (children.empty()) rs.steps.push_back(CopyStep(in, acc));
        rs.steps.push_back(FinalizeStep(acc));
      } else {
        rs.steps.push_back(SendStep(parent, cur, ch));
      }
    }
  }
  FitScratch(&s);
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduce, "binomial", AlwaysApplicable, BuildReduceBinomial);

}  // namespace
}  // namespace weft
