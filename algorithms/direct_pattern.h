// Helpers shared by the direct (same-host, one-sided) generators: oneshot, twoshot and the
// direct allgather / reduce-scatter / alltoall. They read peers' Scratch windows, ordered by
// counted signal/wait fences (see algorithms/schedule.h).
#pragma once

#include <algorithm>

#include "algorithms/registry.h"
#include "algorithms/schedule.h"

namespace weft {

// Window budget per rank, in elements: 512 Ki elements = the shm transport's default 4 MiB
// window even for 8-byte types, so windows never grow in normal use.
constexpr size_t kDirectScratchElems = size_t{512} << 10;

// One signal to every peer of rank r (release fence: our window writes are visible).
inline void SignalAll(RankSchedule& rs, int r, int p) {
  for (int q = 0; q < p; ++q)
    if (q != r) {
      Step s;
      s.op = StepOp::kSignal;
      s.peer = q;
      rs.steps.push_back(s);
    }
}

// Waits for the next signal from peer q (acquire fence).
inline void WaitOne(RankSchedule& rs, int q) {
  Step s;
  s.op = StepOp::kWait;
  s.peer = q;
  rs.steps.push_back(s);
}

// Waits for the next signal from every peer of rank r.
inline void WaitAll(RankSchedule& rs, int r, int p) {
  for (int q = 0; q < p; ++q)
    if (q != r) WaitOne(rs, q);
}

// Direct algorithms need every rank's window mapped (all ranks on one host, shm enabled).
inline bool AllRanksMappable(const ScheduleRequest& req) { return req.all_ranks_mappable; }

// Elements handled per round: at most `budget` (what fits the window), at most the request's
// chunk when one is set, at most the whole count; and the number of rounds for `n` elements.
struct DirectRounds {
  size_t per_round = 0;
  size_t rounds = 0;
  DirectRounds(const ScheduleRequest& req, size_t n, size_t budget) {
    per_round = budget;
    if (req.chunk.chunk_elems > 0) per_round = std::min(per_round, req.chunk.chunk_elems);
    per_round = std::max<size_t>(1, std::min(per_round, n));
    rounds = n == 0 ? 0 : NumChunks(n, per_round);
  }
};

// One rank: its result is its own input (reductions also finalize, for avg).
inline void SingleRankResult(RankSchedule& rs, size_t n, bool reduction) {
  rs.steps.push_back(CopyStep(In(0, n), Out(0, n)));
  if (reduction) rs.steps.push_back(FinalizeStep(Out(0, n)));
}

}  // namespace weft
