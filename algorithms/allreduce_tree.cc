// Allreduce, double binary tree (as NCCL builds it): two binary trees over the ranks, the
// second the mirror (even p) or the shift by one (odd p) of the first, so that most ranks are
// a leaf in one tree and an inner node in the other. Each tree carries half of the vector:
// pipelined reduce up the tree, then broadcast down, chunk by chunk. log2(p) depth with
// bandwidth close to a ring's: the choice for large rank counts. Inner nodes use the fused
// primitives: the last child's partial is reduced and forwarded up in one step, and the result
// coming down is received and forwarded to the first child in one step.
//
// The trees' parent function is DoubleTreeParent (algorithms/patterns.h), shared with the
// cost model.
#include "algorithms/patterns.h"

namespace weft {
namespace {

// One chunk on one tree at a rank. up: out = input + every child's partial sum, the last
// child's receive fused with the send to the parent (recv_reduce_send); down: the complete,
// finalized chunk comes back from the parent and goes on to the first child in the same step
// (recv_copy_send), then to the others. Order of additions: input, then children in order.
void AddTreeChunk(const std::vector<int>& kids, int parent, Region in, Region out, uint16_t ch,
                  RankSchedule* rs) {
  Region cur = in;
  for (size_t c = 0; c < kids.size(); ++c) {
    if (c + 1 == kids.size() && parent >= 0)
      rs->steps.push_back(RecvReduceSendStep(kids[c], cur, out, parent, ch, ch));
    else
      rs->steps.push_back(RecvReduceStep(kids[c], cur, out, ch));
    cur = out;
  }
  if (parent >= 0 && kids.empty()) {  // leaf: send the input up, receive the result
    rs->steps.push_back(SendStep(parent, in, ch));
    rs->steps.push_back(RecvStep(parent, out, ch));
    return;
  }
  if (parent >= 0) {
    rs->steps.push_back(RecvCopySendStep(parent, out, kids[0], ch, ch));
    for (size_t c = 1; c < kids.size(); ++c) rs->steps.push_back(SendStep(kids[c], out, ch));
    return;
  }
  if (kids.empty()) rs->steps.push_back(CopyStep(in, out));
  rs->steps.push_back(FinalizeStep(out));
  for (int child : kids) rs->steps.push_back(SendStep(child, out, ch));
}

StatusOr<Schedule> BuildAllReduceTree(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "tree");
  const int p = request.nranks;
  const size_t n = request.count;
  // children lists derived from the parent function, so the two always agree.
  std::vector<std::vector<int>> parent(2, std::vector<int>(p));
  std::vector<std::vector<std::vector<int>>> children(2, std::vector<std::vector<int>>(p));
  for (int t = 0; t < 2; ++t)
    for (int r = 0; r < p; ++r) {
      parent[t][r] = DoubleTreeParent(t, r, p);
      if (parent[t][r] >= 0) children[t][parent[t][r]].push_back(r);
    }
  const size_t half = n / 2;
  const std::vector<Chunk> halves[2] = {SplitChunks(0, half, request.chunk.chunk_elems),
                                        SplitChunks(half, n - half, request.chunk.chunk_elems)};
  const size_t nchunks = std::max(halves[0].size(), halves[1].size());
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = n;
    rs.output_count = n;
    for (size_t c = 0; c < nchunks; ++c) {
      for (int t = 0; t < 2; ++t) {
        if (c >= halves[t].size()) continue;
        const Chunk k = halves[t][c];
        // Tree t uses channels [t*C, t*C + C): the trees are independent streams.
        const uint16_t ch = static_cast<uint16_t>(t * std::max(1, request.chunk.channels) +
                                                  ChunkChannel(request.chunk, c));
        Region in = In(k.offset, k.count), out = Out(k.offset, k.count);
        AddTreeChunk(children[t][r], parent[t][r], in, out, ch, &rs);
      }
    }
  }
  s.window = 32;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllReduce, "tree", AlwaysApplicable, BuildAllReduceTree);

}  // namespace
}  // namespace weft
