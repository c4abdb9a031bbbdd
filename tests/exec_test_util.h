// Test helpers for running schedules through the executor directly (thread ranks, no
// communicator).
#pragma once

#include <vector>

#include "exec/executor.h"
#include "exec/scratch.h"
#include "weft/weft_compress.h"

namespace weft_test {

// The context of rank `rank` of `nranks` thread ranks whose transports are `peers`, with
// `heap` as its scratch and `codec` for codec steps (tag 7, a 5 s timeout).
inline weft::ExecContext ThreadRankContext(int rank, int nranks, std::vector<weft::Transport*>* peers,
                                           weft::ScratchBuffer* heap, const weftCompression* codec,
                                           const char* what) {
  weft::ExecContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.tag = 7;
  ctx.timeout_s = 5;
  ctx.peer_transport = peers;
  ctx.scratch = heap;
  ctx.what = what;
  ctx.codec = codec;
  return ctx;
}

}  // namespace weft_test
