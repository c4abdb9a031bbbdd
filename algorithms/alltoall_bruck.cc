// All-to-all, Bruck et al. (1997): ceil(log2 p) rounds instead of p-1, at the price of
// sending each block up to log2(p) times: the choice for small blocks. Scratch holds the
// blocks rotated (block j = the one for rank (r+j) % p); round k packs the blocks whose index
// has bit k set, sends them to r+2^k, receives the same positions from r-2^k and unpacks.
// At the end scratch block j came from rank (r-j) % p.
#include "algorithms/patterns.h"

namespace weft {
namespace {

StatusOr<Schedule> BuildAllToAllBruck(const ScheduleRequest& request) {
  WEFT_RETURN_IF_ERROR(CheckRequestBasics(request));
  Schedule s = NewSchedule(request, "bruck");
  const int p = request.nranks;
  const size_t c = request.count;
  const size_t pc = static_cast<size_t>(p) * c;
  for (int r : RanksToBuild(request)) {
    RankSchedule& rs = s.ranks[r];
    rs.input_count = pc;
    rs.output_count = pc;
    if (c == 0) continue;
    // rotate: scratch block j = input block (r+j) % p (two contiguous copies).
    const size_t head = static_cast<size_t>(p - r);
    rs.steps.push_back(CopyStep(In(r * c, head * c), Tmp(0, head * c)));
    if (r > 0) rs.steps.push_back(CopyStep(In(0, r * c), Tmp(head * c, r * c)));
    const size_t send_pack = pc, recv_pack = 2 * pc;  // pack areas in scratch
    for (int d = 1; d < p; d <<= 1) {
      std::vector<int> moved;
      for (int j = 1; j < p; ++j)
        if (j & d) moved.push_back(j);
      const size_t m = moved.size() * c;
      // round log2(d): pack, send to r+d, receive from r-d, unpack.
      for (size_t i = 0; i < moved.size(); ++i)
        rs.steps.push_back(CopyStep(Tmp(moved[i] * c, c), Tmp(send_pack + i * c, c)));
      rs.steps.push_back(SendStep(Mod(r + d, p), Tmp(send_pack, m)));
      rs.steps.push_back(RecvStep(Mod(r - d, p), Tmp(recv_pack, m)));
      for (size_t i = 0; i < moved.size(); ++i)
        rs.steps.push_back(CopyStep(Tmp(recv_pack + i * c, c), Tmp(moved[i] * c, c)));
    }
    // scratch block j came from rank (r-j) % p.
    for (int j = 0; j < p; ++j) rs.steps.push_back(CopyStep(Tmp(j * c, c), Out(Mod(r - j, p) * c, c)));
  }
  FitScratch(&s);
  return s;
}

WEFT_REGISTER_ALGORITHM(Collective::kAllToAll, "bruck", AlwaysApplicable, BuildAllToAllBruck);

}  // namespace
}  // namespace weft
