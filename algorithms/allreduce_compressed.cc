// Compressed allreduce, flat: each contribution quantized once, reduced in float32 at the owner
// of its slice, the reduced slice quantized once and gathered; every rank (the owner too)
// decodes the same bytes, so all ranks hold bitwise-identical results.
//
// The count is cut into p slices (PartOffset/PartSize: the first count % p one longer); rank j
// owns slice j. Phases for rank r:
//   1 encode:   slice j of the input -> enc[j], for every j (stochastic stream j).
//   2 exchange: step k = 1..p-1: send enc[(r+k) % p] to its owner, receive the encoding of
//               slice r from rank (r-k) % p into contrib[(r-k) % p].
//   3 reduce:   sum = decode(contribution of rank 0), then sum += decode(contribution of q) for
//               q = 1..p-1, in rank order (the bits do not depend on arrival order), own
//               contribution read from enc[r]; finalize (avg divides once).
//   4 re-encode: sum -> gathered[r] (stream 0xFFFFFFFF: not a contribution's).
//   5 gather:   step k = 1..p-1: send gathered[r] to rank (r+k) % p, receive gathered[(r-k) % p].
//   6 decode:   output slice j = decode(gathered[j]) for every j, r's own included.
// One rank (p = 1) encodes its input once and decodes it: its contribution is the result, and
// quantizing it a second time is what the checker forbids.
//
// Pipelined: the count is cut into pieces (CompressedPieces), each cut into p slices and run
// as above, in a software pipeline: the encodes and exchange of piece k are issued before the
// reduction, re-encode and gather of piece k-1 and the decodes of piece k-2, so one piece's
// codec and reduction work runs while another's encodings are on the wire. Every rank cuts
// the same pieces and emits the phases in the same order, so the messages between any two
// ranks match in order. Piece 0 keeps the streams of the unpipelined form (slice j: j; the
// reduced slice: 0xFFFFFFFF); piece k's are k p + j and 0xFFFFFFFF - k.
// Wire bytes per rank: 2 (p-1)/p of the encoded size, as a ring allreduce of encoded data.
// Scratch (elements), per piece: enc[p], contrib[p] (slice r's size each; own unused), sum,
// gathered[p].
#include "algorithms/compressed.h"

#include "algorithms/patterns.h"

namespace weft {
namespace {

constexpr uint32_t kReducedSliceStream = 0xFFFFFFFFu;

// Where rank r's regions of one piece (elements [base, base + count) of the call) lie in its
// scratch, from *at on.
struct CompressedLayout {
  CompressedLayout(const weftCompression& spec, int p, size_t base, size_t count, int r,
                   size_t* at)
      : p(p), base(base), count(count) {
    const size_t own_enc = EncodedElements(spec, Size(r));
    auto take = [at](size_t n) { const Region g = Tmp(*at, n); *at += n; return g; };
    for (int j = 0; j < p; ++j) enc.push_back(take(EncodedElements(spec, Size(j))));
    for (int q = 0; q < p; ++q) contrib.push_back(q == r ? enc[r] : take(own_enc));
    sum = take(Size(r));
    for (int j = 0; j < p; ++j) gathered.push_back(take(EncodedElements(spec, Size(j))));
  }
  size_t Offset(int j) const { return base + PartOffset(count, p, j); }  // of the call's count
  size_t Size(int j) const { return PartSize(count, p, j); }

  int p;
  size_t base, count;
  std::vector<Region> enc, contrib, gathered;
  Region sum;
};

// Phases 1-2 of piece k.
void EncodeAndExchange(const CompressedLayout& L, int r, size_t k, CompressedEmitter* em) {
  const int p = L.p;
  for (int j = 0; j < p; ++j)
    if (L.Size(j) > 0)
      em->Encode(In(L.Offset(j), L.Size(j)), L.enc[j], static_cast<uint32_t>(k * p + j),
                 L.Offset(j), false);
  for (int k2 = 1; k2 < p; ++k2) {
    const int to = (r + k2) % p, from = (r - k2 + p) % p;
    if (L.Size(to) > 0) em->Push(SendStep(to, L.enc[to]));
    if (L.Size(r) > 0) em->Push(RecvStep(from, L.contrib[from]));
  }
}

// Phases 3-5 of piece k.
void ReduceAndGather(const CompressedLayout& L, int r, size_t k, CompressedEmitter* em) {
  const int p = L.p;
  if (L.Size(r) > 0) {
    em->Push(DecodeStep(L.contrib[0], L.sum));
    for (int q = 1; q < p; ++q) em->Push(DecodeReduceStep(L.contrib[q], L.sum));
    em->Push(FinalizeStep(L.sum));
    em->Encode(L.sum, L.gathered[r], kReducedSliceStream - static_cast<uint32_t>(k), L.Offset(r),
               true);
  }
  for (int k2 = 1; k2 < p; ++k2) {
    const int to = (r + k2) % p, from = (r - k2 + p) % p;
    if (L.Size(r) > 0) em->Push(SendStep(to, L.gathered[r]));
    if (L.Size(from) > 0) em->Push(RecvStep(from, L.gathered[from]));
  }
}

// Phase 6 of a piece.
void DecodeGathered(const CompressedLayout& L, CompressedEmitter* em) {
  for (int j = 0; j < L.p; ++j)
    if (L.Size(j) > 0) em->Push(DecodeStep(L.gathered[j], Out(L.Offset(j), L.Size(j))));
}

// Rank r's pieces; returns its scratch.
size_t LayOut(const ScheduleRequest& req, int r, std::vector<CompressedLayout>* pieces) {
  const size_t K = CompressedPieces(req, req.count);
  size_t at = 0;
  for (size_t k = 0; k < K; ++k)
    pieces->emplace_back(req.codec, req.nranks, PartOffset(req.count, static_cast<int>(K), static_cast<int>(k)),
                         PartSize(req.count, static_cast<int>(K), static_cast<int>(k)), r, &at);
  return at;
}

// The software pipeline over pieces (see the file comment).
void EmitRank(const std::vector<CompressedLayout>& pieces, int r, CompressedEmitter* em) {
  const size_t K = pieces.size();
  for (size_t k = 0; k < K + 2; ++k) {
    if (k < K) EncodeAndExchange(pieces[k], r, k, em);
    if (k >= 1 && k - 1 < K) ReduceAndGather(pieces[k - 1], r, k - 1, em);
    if (k >= 2) DecodeGathered(pieces[k - 2], em);
  }
}

}  // namespace

StatusOr<Schedule> BuildAllReduceCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "allreduce:compressed"));
  const int p = req.nranks;
  const size_t n = req.count;
  if (p > 1) sched.window = 2 * p * static_cast<int>(CompressedPieces(req, n));
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    rs.input_count = rs.output_count = n;
    if (n == 0) continue;
    if (p == 1) {
      const Region enc = Tmp(0, EncodedElements(req.codec, n));
      rs.scratch_count = enc.count;
      rs.steps.push_back(EncodeStep(In(0, n), enc, 0));
      rs.steps.push_back(DecodeStep(enc, Out(0, n)));
      rs.steps.push_back(FinalizeStep(Out(0, n)));
      continue;
    }
    std::vector<CompressedLayout> pieces;
    rs.scratch_count = LayOut(req, r, &pieces);
    CompressedEmitter em{&rs.steps, nullptr};
    EmitRank(pieces, r, &em);
  }
  return sched;
}

std::vector<EncodedSpan> AllReduceFlatEncodedSpans(const ScheduleRequest& req, int rank) {
  std::vector<EncodedSpan> spans;
  if (req.count == 0) return spans;
  if (req.nranks == 1) return {{0, false}};
  std::vector<CompressedLayout> pieces;
  LayOut(req, rank, &pieces);
  std::vector<Step> steps;
  CompressedEmitter em{&steps, &spans};
  EmitRank(pieces, rank, &em);
  return spans;
}

}  // namespace weft
