// Helpers shared by the direct (same-host, one-sided) generators: oneshot, twoshot and the
// direct allgather / reduce-scatter / alltoall. They read peers' Scratch windows, ordered by
// counted signal/wait fences (see algorithms/schedule.h).
#pragma once

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

}  // namespace weft
