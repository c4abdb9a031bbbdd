// Reduce for large messages (Rabenseifner): a ring reduce-scatter of p parts into scratch
// (non-roots' output may be NULL), then every rank sends its reduced part to the root
// (a gather). Each link carries (p-1)/p of the message instead of the whole per tree level.
// The root finalizes each part as it becomes complete.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildReduceScatterAllgather(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "scatter_allgather");
  const int p = request.nranks, root = request.root;
  const size_t n = request.count;
  auto part = [&](int w, Buffer b) {
    return Region{b, PartOffset(n, p, w), PartSize(n, p, w)};
  };
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = n;
    rs.output_count = r == root ? n : 0;
    if (n == 0) continue;
    if (p == 1) {
      rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
      rs.steps.push_back(FinalizeStep(Out(0, n)));
      continue;
    }
    const int next = Mod(r + 1, p), prev = Mod(r - 1, p);
    // ring reduce-scatter: step k sends the partial sum of part r-1-k (raw input at k = 0)
    // and adds the incoming partial of part r-2-k to this rank's input. After p-1 steps this
    // rank holds part r complete (in the output if it is the root).
    for (int k = 0; k < p - 1; ++k) {
      const int sp = Mod(r - 1 - k, p), rp = Mod(r - 2 - k, p);
      Region send = part(sp, k == 0 ? Buffer::kInput : Buffer::kScratch);
      Buffer acc = (k == p - 2 && r == root) ? Buffer::kOutput : Buffer::kScratch;
      InterleaveChunks(
          send, part(rp, acc), request.chunk.chunk_elems,
          [&](Region g, size_t j) { rs.steps.push_back(SendStep(next, g, ChunkChannel(request.chunk, j))); },
          [&](Region g, size_t j) {
            rs.steps.push_back(RecvReduceStep(prev, In(g.offset, g.count), g, ChunkChannel(request.chunk, j)));
          });
    }
    // gather: every part to the root, finalized there once complete.
    if (r == root) {
      if (part(r, Buffer::kOutput).count > 0) rs.steps.push_back(FinalizeStep(part(r, Buffer::kOutput)));
      for (int w = 0; w < p; ++w) {
        if (w == root || part(w, Buffer::kOutput).count == 0) continue;
        rs.steps.push_back(RecvStep(w, part(w, Buffer::kOutput)));
        rs.steps.push_back(FinalizeStep(part(w, Buffer::kOutput)));
      }
    } else if (part(r, Buffer::kScratch).count > 0) {
      rs.steps.push_back(SendStep(root, part(r, Buffer::kScratch)));
    }
  }
  FitScratch(&s);
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kReduce, "scatter_allgather", AlwaysApplicable,
                        BuildReduceScatterAllgather);

}  // namespace
}  // namespace weft
