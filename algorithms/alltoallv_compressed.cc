// Compressed all-to-all(v), e.g. MoE token dispatch in fp8 (one scale per block of 128
// channels): every block is encoded once by its sender and decoded once by its receiver; the
// wire carries only encodings. The own block goes through the codec too (encoded and decoded
// locally), so a token's values do not depend on which rank its expert lives on.
//
// Phases for rank r (counts[src * p + dst], displacements as for the plain all-to-allv):
//   1 encode:   block q of the input -> enc[q], for every q with a non-empty block (stochastic
//               stream q, the composition's: rank << 32 | q).
//   2 exchange: step k = 1..p-1: send enc[(r+k) % p], receive the block of (r-k) % p into
//               recv[(r-k) % p] (sizes follow from the counts: both sides know them).
//   3 decode:   output block of q = decode(recv[q]) (own block: decode(enc[r])).
// Pipelined: every block is cut into pieces (BlockPieces over the block's own count,
// which its sender and receiver both know: a rank's request holds only its row and column of
// the table, so a rule over the whole table cut blocks differently on different ranks and
// failed with uneven counts), in a software pipeline: the encodes and exchange of piece k are
// issued before the decodes of piece k-1; a block with fewer pieces is done earlier.
// Piece 0 keeps the unpipelined streams (q); piece k's are k p + q.
// Out-of-place only (as the plain all-to-allv). No error feedback: tokens are not accumulated.
// Scratch (elements), per piece: enc[q] per destination, recv[q] per source but r. The call's
// values may be float32 or bf16 (ScheduleRequest::elem_bytes): the encoded regions count
// elements of that size, the steps are the same.
#include "algorithms/compressed.h"

#include <algorithm>
#include <numeric>

#include "algorithms/patterns.h"

namespace weft {
namespace {

// The all-to-allv tables of a request, by (source, destination).
struct A2avTables {
  const ScheduleRequest& req;
  size_t n;
  size_t count(int src, int dst) const { return req.a2av_counts[src * n + dst]; }
  size_t sdispl(int src, int dst) const { return req.a2av_send_displs[src * n + dst]; }
  size_t rdispl(int dst, int src) const { return req.a2av_recv_displs[dst * n + src]; }
};

// How many pieces a block of `count` elements is cut into. A block's piece is one message to
// one peer and one encode and decode, with no reduction behind it, so pieces pay from a much
// smaller size than the allreduce's (CompressedPieces' automatic 8 MiB): 512K elements (2 MiB
// of float32) each, at most 16 per block. Measured on the namespace harness, MoE dispatch of
// fp8 tokens (perf/RESULTS.md, session 6): 2, 4 and 8 MiB pieces ran alike at 2x2, and against
// the allreduce's rule (1-2 pieces per block there) fp8 went 91 -> 74 ms at 2x2, 39 -> 31 ms at
// 2x1, 201 -> 161 ms at 2x4: the link bound. WEFT_COMPRESSION_CHUNK_BYTES still sets it.
size_t BlockPieces(const ScheduleRequest& req, size_t count) {
  constexpr size_t kMinPieceElems = size_t{512} << 10, kMaxPieces = 16;
  if (req.chunk.chunk_elems > 0) return CompressedPieces(req, count);
  return std::clamp<size_t>(count / kMinPieceElems, 1, kMaxPieces);
}

// Piece k of a block of `count` elements, cut into BlockPieces for the block's own count: its
// sender and its receiver both know that count (each rank's request holds only its row and
// column of the table), so they cut it alike. Pieces past the block's last are empty.
struct Piece {
  size_t offset, size;
};
Piece PieceOf(const ScheduleRequest& req, size_t count, int k) {
  const int K = static_cast<int>(BlockPieces(req, count));
  if (k >= K) return {count, 0};
  return {PartOffset(count, K, k), PartSize(count, K, k)};
}

// Rank r's regions of piece k: enc[q] (to q) and recv[q] (from q; own: enc[r]).
void LayOutPiece(const A2avTables& t, int r, int k,
                 std::vector<Region>* enc, std::vector<Region>* recv, size_t* at) {
  const int p = static_cast<int>(t.n);
  auto encoded = [&t](size_t m) {
    return m > 0 ? EncodedElements(t.req.codec, m, t.req.elem_bytes) : 0;
  };
  enc->assign(p, Region{});
  recv->assign(p, Region{});
  for (int q = 0; q < p; ++q) {
    const size_t m = PieceOf(t.req, t.count(r, q), k).size;
    (*enc)[q] = Tmp(*at, encoded(m));
    *at += (*enc)[q].count;
  }
  for (int q = 0; q < p; ++q) {
    const size_t m = PieceOf(t.req, t.count(q, r), k).size;
    (*recv)[q] = q == r ? (*enc)[r] : Tmp(*at, encoded(m));
    if (q != r) *at += (*recv)[q].count;
  }
}

}  // namespace

StatusOr<Schedule> BuildAllToAllvCompressed(const ScheduleRequest& req) {
  WEFT_ASSIGN_OR_RETURN(Schedule sched, NewCompressedSchedule(req, "alltoallv:compressed"));
  const int p = req.nranks;
  const size_t n = static_cast<size_t>(p);
  if (req.a2av_counts.size() != n * n || req.a2av_send_displs.size() != n * n ||
      req.a2av_recv_displs.size() != n * n)
    return InvalidArgument("alltoallv:compressed needs nranks^2 = " + std::to_string(n * n) +
                           " counts and displacements, got " + std::to_string(req.a2av_counts.size()) +
                           "/" + std::to_string(req.a2av_send_displs.size()) + "/" +
                           std::to_string(req.a2av_recv_displs.size()));
  const A2avTables t{req, n};
  // The most pieces of any block this rank sends or receives (rank r's row and column).
  int K = 1;
  for (int r : RanksToBuild(req))
    for (int q = 0; q < p; ++q)
      K = std::max({K, static_cast<int>(BlockPieces(req, t.count(r, q))),
                    static_cast<int>(BlockPieces(req, t.count(q, r)))});
  sched.window = 2 * p * K;
  for (int r : RanksToBuild(req)) {
    RankSchedule& rs = sched.ranks[r];
    for (int q = 0; q < p; ++q) {
      rs.input_count = std::max(rs.input_count, t.sdispl(r, q) + t.count(r, q));
      rs.output_count = std::max(rs.output_count, t.rdispl(r, q) + t.count(q, r));
    }
    std::vector<std::vector<Region>> enc(K), recv(K);
    size_t at = 0;
    for (int k = 0; k < K; ++k) LayOutPiece(t, r, k, &enc[k], &recv[k], &at);
    rs.scratch_count = at;
    for (int k = 0; k <= K; ++k) {
      if (k < K) {  // phases 1-2 of piece k
        for (int q = 0; q < p; ++q) {
          const Piece piece = PieceOf(req, t.count(r, q), k);
          if (piece.size > 0)
            rs.steps.push_back(EncodeStep(In(t.sdispl(r, q) + piece.offset, piece.size), enc[k][q],
                                          static_cast<uint32_t>(k * p + q)));
        }
        for (int j = 1; j < p; ++j) {
          const int to = (r + j) % p, from = (r - j + p) % p;
          if (PieceOf(req, t.count(r, to), k).size > 0) rs.steps.push_back(SendStep(to, enc[k][to]));
          if (PieceOf(req, t.count(from, r), k).size > 0) rs.steps.push_back(RecvStep(from, recv[k][from]));
        }
      }
      if (k >= 1)  // phase 3 of piece k-1
        for (int q = 0; q < p; ++q) {
          const Piece piece = PieceOf(req, t.count(q, r), k - 1);
          if (piece.size > 0)
            rs.steps.push_back(DecodeStep(recv[k - 1][q], Out(t.rdispl(r, q) + piece.offset, piece.size)));
        }
    }
  }
  return sched;
}

}  // namespace weft
