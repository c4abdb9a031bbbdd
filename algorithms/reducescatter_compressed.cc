// Compressed reduce-scatter, flat: each contribution quantized once, reduced in float32 at the
// owner of its block, not re-encoded (the output is the float32 sum of the decoded
// contributions).
//
// Rank r's input holds p blocks of `count`; rank j owns block j. Phases for rank r:
//   1 encode:   block j of the input -> enc[j], for every j (stochastic stream j).
//   2 exchange: step k = 1..p-1: send enc[(r+k) % p] to its owner, receive the encoding of
//               block r from rank (r-k) % p into contrib[(r-k) % p].
//   3 reduce:   output = decode(contribution of rank 0), then output += decode(contribution of
//               q) for q = 1..p-1 in rank order (own contribution read from enc[r]); finalize.
// Pipelined: each block is cut into the same pieces (CompressedPieces over the input), run in
// a software pipeline: the encodes and exchange of piece k are issued before the reduction of
// piece k-1, so decoding one piece overlaps the transfer of the next. Piece 0 keeps the
// unpipelined streams (block j: j); piece k's are k p + j.
// Wire bytes per rank: (p-1)/p of the encoded input.
// Scratch (elements), per piece: enc[p], then contrib[q] for q != r (one encoded block piece each).
#include "algorithms/compressed.h"

#include <algorithm>

#include "algorithms/patterns.h"

namespace weft {
namespace {

// Rank r's regions of one piece (elements [offset, offset + count) of every block).
struct PieceRegions {
  size_t offset = 0, count = 0;
  std::vector<Region> enc, contrib;
};

PieceRegions LayOutPiece(const weftCompression& spec, int p, int r, size_t offset, size_t count,
                         size_t* at) {
  PieceRegions piece{offset, count, {}, std::vector<Region>(p)};
  const size_t enc_elems = EncodedElements(spec, count);
  for (int j = 0; j < p; ++j, *at += enc_elems) piece.enc.push_back(Tmp(*at, enc_elems));
  for (int q = 0; q < p; ++q) {
    piece.contrib[q] = q == r ? piece.enc[r] : Tmp(*at, enc_elems);
    if (q != r) *at += enc_elems;
  }
  return piece;
}

// Phases 1-2 of piece k.
void EncodeAndExchange(const PieceRegions& P, int p, int r, size_t n, size_t k,
                       std::vector<Step>* steps) {
  for (int j = 0; j < p; ++j)
    steps->push_back(EncodeStep(In(j * n + P.offset, P.count), P.enc[j], static_cast<uint32_t>(k * p + j)));
  for (int k2 = 1; k2 < p; ++k2) {
    const int to = (r + k2) % p, from = (r - k2 + p) % p;
    steps->push_back(SendStep(to, P.enc[to]));
    steps->push_back(RecvStep(from, P.contrib[from]));
  }
}

// Phase 3 of a piece.
void Reduce(const PieceRegions& P, int p, std::vector<Step>* steps) {
  const Region out = Out(P.offset, P.count);
  steps->push_back(DecodeStep(P.contrib[0], out));
  for (int q = 1; q < p; ++q) steps->push_back(DecodeReduceStep(P.contrib[q], out));
  steps->push_back(FinalizeStep(out));
}

}  // namespace

StatusOr<Schedule> BuildReduceScatterCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "reducescatter:compressed"));
  const int p = req.nranks;
  const size_t n = req.count;
  const size_t K = std::min(CompressedPieces(req, n * p), std::max<size_t>(n, 1));
  sched.window = 2 * p * static_cast<int>(K);
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = n * p;
    rs.output_count = n;
    if (n == 0) continue;
    std::vector<PieceRegions> pieces;
    size_t at = 0;
    for (size_t k = 0; k < K; ++k)
      pieces.push_back(LayOutPiece(req.codec, p, r, PartOffset(n, static_cast<int>(K), static_cast<int>(k)),
                                   PartSize(n, static_cast<int>(K), static_cast<int>(k)), &at));
    rs.scratch_count = at;
    for (size_t k = 0; k <= K; ++k) {
      if (k < K) EncodeAndExchange(pieces[k], p, r, n, k, &rs.steps);
      if (k >= 1) Reduce(pieces[k - 1], p, &rs.steps);
    }
  }
  return sched;
}

}  // namespace weft
