// Compressed allgather, flat: each rank's block is encoded once and sent to every other rank;
// every rank, the sender included, decodes all blocks from the same bytes, so all ranks hold
// bitwise-identical results.
//
// Phases for rank r:
//   1 encode:   the input -> gathered[r] (stochastic stream 0).
//   2 exchange: step k = 1..p-1: send gathered[r] to rank (r+k) % p, receive gathered[(r-k) % p].
//   3 decode:   output block q = decode(gathered[q]) for every q, r's own included.
// Pipelined: the block is cut into pieces (CompressedPieces over the output), in a software
// pipeline: the encode and sends of piece k are issued before the decodes of piece k-1. Piece
// 0 keeps the unpipelined stream (0); piece k's is k.
// Wire bytes per rank: (p-1) encoded blocks, as a ring allgather of the encoded block.
// Scratch (elements), per piece: gathered[p], one encoded block piece each. The values may be
// float32 or bf16 (ScheduleRequest::elem_bytes): the encoded regions count elements of that size.
#include "algorithms/compressed.h"

#include <algorithm>

#include "algorithms/patterns.h"

namespace weft {

StatusOr<Schedule> BuildAllGatherCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "allgather:compressed"));
  const int p = req.nranks;
  const size_t n = req.count;
  const int K = static_cast<int>(std::min(CompressedPieces(req, n * p), std::max<size_t>(n, 1)));
  sched.window = 2 * p * K;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n;
    rs.output_count = n * p;
    if (n == 0) continue;
    std::vector<std::vector<Region>> gathered(K);  // [piece][rank]
    size_t at = 0;
    for (int k = 0; k < K; ++k)
      for (int q = 0; q < p; ++q) {
        const size_t enc_elems = EncodedElements(req.codec, PartSize(n, K, k), req.elem_bytes);
        gathered[k].push_back(Tmp(at, enc_elems));
        at += enc_elems;
      }
    rs.scratch_count = at;
    for (int k = 0; k <= K; ++k) {
      if (k < K) {
        rs.steps.push_back(EncodeStep(In(PartOffset(n, K, k), PartSize(n, K, k)), gathered[k][r],
                                      static_cast<uint32_t>(k)));
        for (int j = 1; j < p; ++j) {
          rs.steps.push_back(SendStep((r + j) % p, gathered[k][r]));
          rs.steps.push_back(RecvStep((r - j + p) % p, gathered[k][(r - j + p) % p]));
        }
      }
      if (k >= 1)
        for (int q = 0; q < p; ++q)
          rs.steps.push_back(DecodeStep(gathered[k - 1][q], Out(q * n + PartOffset(n, K, k - 1), PartSize(n, K, k - 1))));
    }
  }
  return sched;
}

}  // namespace weft
