// All-to-all, pairwise exchange: in round k (1..p-1) rank r sends its block for r+k and
// receives the block from r-k. Every pair talks once, nothing is forwarded: the bandwidth
// choice (the MoE dispatch/combine default on flat networks).
//
// In-place (one buffer) the block received from s may only be written after our own block for
// s has left. The send of block s happens in round p-j when it arrives in round j, so blocks
// arriving in rounds j <= p/2 (before or with their send) are staged in scratch and copied in
// after round p-j; later ones are received in place (the issue rule makes the recv wait for
// the earlier send of the same region).
// Out-of-place calls (ScheduleRequest::out_of_place) receive every block straight into the
// output: nothing to protect, and the staging copy would move (p-1)/2 of the blocks twice.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllToAllPairwise(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "pairwise");
  const int p = request.nranks;
  const size_t c = request.count;
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = static_cast<size_t>(p) * c;
    rs.output_count = static_cast<size_t>(p) * c;
    if (c == 0) continue;
    // Our own block is copied locally right after round 1 is posted, so the peers'
    // transfers (which a single-copy transport performs on their side) overlap the copy.
    if (p == 1) rs.steps.push_back(CopyStep(In(r * c, c), Out(r * c, c)));
    auto staged = [&](int j) {  // arrives no later than its send, into a shared buffer
      return !request.out_of_place && 2 * j <= p;
    };
    for (int k = 1; k < p; ++k) {
      const int to = Mod(r + k, p), from = Mod(r - k, p);
      const uint16_t ch = ChunkChannel(request.chunk, static_cast<size_t>(k));
      Region dst = staged(k) ? Tmp((k - 1) * c, c) : Out(from * c, c);
      // round k: block for `to` out, block from `from` in.
      InterleaveChunks(
          In(to * c, c), dst, request.chunk.chunk_elems,
          [&](Region g, size_t) { rs.steps.push_back(SendStep(to, g, ch)); },
          [&](Region g, size_t) { rs.steps.push_back(RecvStep(from, g, ch)); });
      if (k == 1) rs.steps.push_back(CopyStep(In(r * c, c), Out(r * c, c)));
      // The staged block that arrived in round j = p-k can go in place now that its own
      // block (sent this round) has left.
      const int j = p - k;
      if (j >= 1 && staged(j))
        rs.steps.push_back(CopyStep(Tmp((j - 1) * c, c), Out(Mod(r - j, p) * c, c)));
    }
  }
  FitScratch(&s);
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllToAll, "pairwise", AlwaysApplicable,
                        BuildAllToAllPairwise);

}  // namespace
}  // namespace weft
