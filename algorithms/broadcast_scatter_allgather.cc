// Broadcast for large messages (van de Geijn): the root scatters p parts (part v to relative
// rank v), then a ring allgather of the parts. The root sends each byte once and every link
// carries (p-1)/p of the message, instead of the whole message per tree level.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildBroadcastScatterAllgather(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "scatter_allgather");
  const int p = request.nranks, root = request.root;
  const size_t n = request.count;
  auto part = [&](int v, bool from_input) {  // part of relative rank v
    size_t off = PartOffset(n, p, v), cnt = PartSize(n, p, v);
    return from_input ? In(off, cnt) : Out(off, cnt);
  };
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = r == root ? n : 0;
    rs.output_count = n;
    const int v = Mod(r - root, p);
    if (n == 0) continue;
    if (v == 0) {
      rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
      // scatter: part w to relative rank w.
      for (int w = 1; w < p; ++w)
        if (part(w, true).count > 0) rs.steps.push_back(SendStep(Mod(w + root, p), part(w, true)));
    } else if (part(v, false).count > 0) {
      rs.steps.push_back(RecvStep(root, part(v, false)));
    }
    // ring allgather over relative ranks, opened at the root (it has every part already):
    // step k: relative rank v sends part v-k to v+1 and receives part v-k-1 from v-1.
    const int next = Mod(r + 1, p), prev = Mod(r - 1, p);
    for (int k = 0; k < p - 1; ++k) {
      const int send_part = Mod(v - k, p), recv_part = Mod(v - k - 1, p);
      // The root's predecessor sends nothing (the ring is open there), the root receives nothing.
      Region sp = v != p - 1 ? part(send_part, v == 0) : Out(0, 0);
      Region rp = v != 0 ? part(recv_part, false) : Out(0, 0);
      InterleaveChunks(
          sp, rp, request.chunk.chunk_elems,
          [&](Region g, size_t j) { rs.steps.push_back(SendStep(next, g, ChunkChannel(request.chunk, j))); },
          [&](Region g, size_t j) { rs.steps.push_back(RecvStep(prev, g, ChunkChannel(request.chunk, j))); });
    }
  }
  s.window = 16;
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kBroadcast, "scatter_allgather", AlwaysApplicable,
                        BuildBroadcastScatterAllgather);

}  // namespace
}  // namespace weft
