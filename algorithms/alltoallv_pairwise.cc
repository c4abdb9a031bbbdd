// All-to-allv, pairwise exchange with the per-pair counts and displacements of the request:
// round k (1..p-1) sends the block for r+k and receives the block from r-k; empty blocks are
// skipped on both sides (both know the counts). Out-of-place only (as MPI_Alltoallv).
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllToAllvPairwise(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  const int p = request.nranks;
  const size_t n = static_cast<size_t>(p);
  if (request.a2av_counts.size() != n * n || request.a2av_send_displs.size() != n * n ||
      request.a2av_recv_displs.size() != n * n)
    return InvalidArgument("alltoallv needs nranks^2 = " + std::to_string(n * n) +
                           " counts and displacements, got " +
                           std::to_string(request.a2av_counts.size()) + "/" +
                           std::to_string(request.a2av_send_displs.size()) + "/" +
                           std::to_string(request.a2av_recv_displs.size()));
  Schedule s = NewSchedule(request, "pairwise");
  auto count = [&](int src, int dst) { return request.a2av_counts[src * n + dst]; };
  auto sdispl = [&](int src, int dst) { return request.a2av_send_displs[src * n + dst]; };
  auto rdispl = [&](int dst, int src) { return request.a2av_recv_displs[dst * n + src]; };
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    for (int q = 0; q < p; ++q) {
      rs.input_count = std::max(rs.input_count, sdispl(r, q) + count(r, q));
      rs.output_count = std::max(rs.output_count, rdispl(r, q) + count(q, r));
    }
    if (count(r, r) > 0) rs.steps.push_back(CopyStep(In(sdispl(r, r), count(r, r)), Out(rdispl(r, r), count(r, r))));
    for (int k = 1; k < p; ++k) {
      const int to = Mod(r + k, p), from = Mod(r - k, p);
      const uint16_t ch = ChunkChannel(request.chunk, static_cast<size_t>(k));
      InterleaveChunks(
          In(sdispl(r, to), count(r, to)), Out(rdispl(r, from), count(from, r)), request.chunk.chunk_elems,
          [&](Region g, size_t) { rs.steps.push_back(SendStep(to, g, ch)); },
          [&](Region g, size_t) { rs.steps.push_back(RecvStep(from, g, ch)); });
    }
  }
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllToAllv, "pairwise", AlwaysApplicable,
                        BuildAllToAllvPairwise);

}  // namespace
}  // namespace weft
