// Reduce-scatter, pairwise exchange: in round k (1..p-1) rank r sends its input block for
// rank r+k directly to it and adds the block rank r-k sent. p-1 rounds, each rank sends and
// receives (p-1)/p of the data once, with no forwarding: good when every pair has its own link
// (switched networks, all-to-all fabrics). Blocks are pipelined by chunk.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceScatterPairwise(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "pairwise");
  const int p = request.nranks;
  const size_t c = request.count;
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = static_cast<size_t>(p) * c;
    rs.output_count = c;
    if (c == 0) continue;
    // The output accumulates (in-place it is this rank's input block already).
    rs.steps.push_back(CopyStep(In(r * c, c), Out(0, c)));
    for (int k = 1; k < p; ++k) {
      const int to = Mod(r + k, p), from = Mod(r - k, p);
      const uint16_t ch = ChunkChannel(request.chunk, static_cast<size_t>(k));
      // round k: my block for `to` goes out, `from`'s block for me is added.
      InterleaveChunks(
          In(to * c, c), Out(0, c), request.chunk.chunk_elems,
          [&](Region g, size_t) { rs.steps.push_back(SendStep(to, g, ch)); },
          [&](Region g, size_t) { rs.steps.push_back(RecvReduceStep(from, g, g, ch)); });
    }
    rs.steps.push_back(FinalizeStep(Out(0, c)));
  }
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduceScatter, "pairwise", AlwaysApplicable,
                        BuildReduceScatterPairwise);

}  // namespace
}  // namespace weft
