// Top-k selection on the magnitude bits: a sampled threshold and one filtering pass for large
// inputs, radix select in two passes otherwise (and whenever the sample misjudged).
//
// The key of x is its bit pattern without the sign: for non-negative floats integer order is
// value order, and inf < NaN patterns sort above every finite value, so NaN/inf rank highest.
// The kept set is defined by rank = (key << 32) | (2^32 - 1 - index): the k largest ranks, so
// ties go to the lower index. Both paths compute exactly that set (deterministic).
//
// Sampled path (count >= kSampledMin, k a small fraction of count):
//   pass 1: kSamples keys, in runs of kSampleRun consecutive ones at evenly spaced positions
//           (so they share cache lines); the threshold t is the sample key whose rank among
//           the samples puts, in expectation, k plus four standard deviations of the keys at
//           or above it. Reads 1/256 of the lines or fewer.
//   pass 2: every index with key > t, in index order, with its rank and bits (1-2% of the
//           values for a top-1% of varied values), and the first k indices with key == t
//           (inputs of few distinct values tie there; once it has k it looks above only), so
//           the pass runs at the speed of reading the input.
//   At least k above: the k-th largest of their ranks (nth_element on a copy) splits them.
//   Fewer: all of them, then the lowest-index ties. Fewer than k at or above t (an input that
//   fools the spacing), or more than 4k + 4096 above it: the radix path below.
// Radix path, three passes:
//   1: histogram of the top 15 key bits (32768 bins); walking down from the top bin finds the
//      bin T where the running count reaches k;
//   2: histogram of the low 16 key bits of the keys in bin T: the exact threshold key;
//   3: in index order, every key above the threshold, and the first keys equal to it.
//   No candidate list and no sort, whatever the ties (mostly zeros, few distinct values).
// The values may be the sums of two arrays, added as they are read (EncodeTopKOfSum: a codec
// chain's reduce and encode in one pass); the sampled path then reads each input once.
// The radix path costs ~2x the sampled one at 64 MiB of varied values (codec_bench: 21.6 ms
// against 9.6 for top-1%): the histogram's increments serialize when most values share a few
// bins.
#include "kernels/codec_topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/reduce.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace weft::codec {
namespace {

constexpr int kBinShift = 16;
constexpr size_t kBins = size_t{1} << 15;
constexpr size_t kSampledMin = size_t{1} << 16;
constexpr size_t kSamples = size_t{1} << 14;
// Samples come in runs of consecutive values at kSamples / kSampleRun evenly spaced positions:
// where the input is still in DRAM (a codec chain's one pass reads an operand nothing has
// touched yet), scattered samples cost a cache line each; runs share lines.
constexpr size_t kSampleRun = 8;

// Where the values come from: one array, or the float32 sums of two, computed as they are read
// and never stored (a + b as kernels::Reduce adds them: the same IEEE sums, so the same bits).
struct OneArray {
  const float* x;
  uint32_t Bits(size_t i) const {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    return bits;
  }
#if defined(__SSE2__)
  __m128i Load4(size_t i) const { return _mm_castps_si128(_mm_loadu_ps(x + i)); }
#endif
};
struct SumOfTwo {
  const float *a, *b;
  uint32_t Bits(size_t i) const {
    const float v = a[i] + b[i];
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits;
  }
#if defined(__SSE2__)
  __m128i Load4(size_t i) const {
    return _mm_castps_si128(_mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
  }
#endif
};

template <typename Values>
inline uint32_t Key(const Values& v, size_t i) { return v.Bits(i) & 0x7FFFFFFFu; }
inline uint64_t RankOf(uint32_t key, size_t index) {
  return (uint64_t{key} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(index));
}
inline uint32_t IndexOf(uint64_t rank) { return 0xFFFFFFFFu - static_cast<uint32_t>(rank); }

// ---- sampled path ----

// The key threshold of pass 1; false when sampling would not narrow much (k near count).
template <typename Values>
bool SampleThreshold(const Values& src, size_t count, size_t k, uint32_t* threshold) {
  const double expected = static_cast<double>(kSamples) * static_cast<double>(k) / count;
  const double j = std::ceil(expected + 4 * std::sqrt(expected) + 16);
  if (j >= kSamples / 4) return false;
  std::vector<uint32_t> keys(kSamples);
  constexpr size_t kRuns = kSamples / kSampleRun;  // count >= kSampledMin: runs never overlap
  for (size_t r = 0; r < kRuns; ++r)
    for (size_t q = 0; q < kSampleRun; ++q) keys[r * kSampleRun + q] = Key(src, r * count / kRuns + q);
  const auto nth = keys.begin() + static_cast<ptrdiff_t>(j) - 1;
  std::nth_element(keys.begin(), nth, keys.end(), std::greater<uint32_t>());
  *threshold = *nth;
  return true;
}

// What pass 2 of the sampled path found: keys above the threshold (ranks and raw bits, in
// index order, at most `cap` of them) and keys equal to it (the first `k` indices in index
// order, and how many there are in all: ties are kept lowest index first, so no more than k
// can ever be needed). Thread-local storage: fresh vectors of a few MiB cost their page faults
// on every call (1.5 ms of 13 at 64 MiB); a thread keeps about 20 bytes per kept element of
// its largest call.
struct Candidates {
  std::vector<uint64_t> ranks, order;
  std::vector<uint32_t> bits, ties;
  size_t above = 0, tied = 0;
};

// Scans the keys: above(i) for every key > threshold, and equal(i, mask) for the keys ==
// threshold of each group of up to 64 (bit j of mask: key i + j), so that a caller with
// enough ties skips a group without visiting its bits. Each callback sees its indices in
// index order, but not interleaved with the other's. Stops early (returning false) once
// above returns false; once equal returns false (it has the ties it needs) the rest of the
// scan looks for keys above only: an input of few distinct values, where a fifth of the keys
// may tie, then runs at the speed of reading it.
template <typename Values, typename Above, typename Equal>
bool Scan(const Values& src, size_t count, uint32_t threshold, Above above, Equal equal) {
  bool ties = true;
  size_t i = 0;
#if defined(__SSE2__)
  // 64 keys per test, 16 per mask word: most groups hold no hit when the threshold is high, so
  // the scan runs at the speed of reading the input. Keys are non-negative int32, so the
  // compares' all-ones lanes pack (saturating) to all-ones bytes in index order.
  const __m128i magnitude = _mm_set1_epi32(0x7FFFFFFF);
  const __m128i t = _mm_set1_epi32(static_cast<int32_t>(threshold));
  const __m128i below = _mm_set1_epi32(static_cast<int32_t>(threshold) - 1);
  auto mask_of = [&](size_t at, auto compare) {
    auto hit = [&](size_t from) { return compare(_mm_and_si128(src.Load4(from), magnitude)); };
    auto mask16 = [&](size_t from) {  // written out: -O2 kept a loop's lanes on the stack
      const __m128i lo = _mm_packs_epi32(hit(from), hit(from + 4));
      const __m128i hi = _mm_packs_epi32(hit(from + 8), hit(from + 12));
      return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_packs_epi16(lo, hi))));
    };
    return mask16(at) | mask16(at + 16) << 16 | mask16(at + 32) << 32 | mask16(at + 48) << 48;
  };
  for (; i + 64 <= count; i += 64) {
    // One compare per key, >= while ties are wanted (> once they are in). A hit is told apart
    // by its own key: a varied input's hits (1-2% of keys, in most groups) are above; only a
    // group with a tie pays a second pass, for the == mask that hands its ties over at once.
    const __m128i low = ties ? below : t;
    const uint64_t ge = mask_of(i, [&](__m128i key) { return _mm_cmpgt_epi32(key, low); });
    for (uint64_t m = ge; m != 0; m &= m - 1) {
      const size_t j = static_cast<size_t>(__builtin_ctzll(m));
      if (Key(src, i + j) != threshold) {
        if (!above(i + j)) return false;
        continue;
      }
      // The group's first tie hands over all of them; the loop then clears bit j.
      // (j is the group's lowest tie: the bits below it were all above.)
      const uint64_t eq = mask_of(i, [&](__m128i key) { return _mm_cmpeq_epi32(key, t); });
      ties = equal(i + j, eq >> j);
      m &= ~eq | (uint64_t{1} << j);
    }
  }
#endif
  for (; i < count; ++i) {
    const uint32_t key = Key(src, i);
    if (key > threshold && !above(i)) return false;
    if (ties && key == threshold) ties = equal(i, 1);
  }
  return true;
}

// Takes the ties of mask (bit j: index i + j) in index order while fewer than `limit` are
// taken; returns how many ties the mask held.
template <typename Take>
size_t TakeTies(size_t i, uint64_t mask, size_t taken, size_t limit, Take take) {
  const size_t ties = static_cast<size_t>(__builtin_popcountll(mask));
  for (; mask != 0 && taken < limit; mask &= mask - 1, ++taken)
    take(i + static_cast<size_t>(__builtin_ctzll(mask)));
  return ties;
}

// False when more than `cap` keys lie above the threshold (the radix path copes better).
// Stores through raw pointers (push_back's checks cost as much as the pass), and counts and
// pointers in locals while the scan runs: kept in c's fields, every store through the
// uint64_t ranks (or the uint32_t ties) could alias them, and the compiler reloaded them
// after each.
template <typename Values>
bool Collect(const Values& src, size_t count, uint32_t threshold, size_t k, size_t cap,
             Candidates* c) {
  c->ties.resize(k);
  uint64_t* ranks = c->ranks.data();
  uint32_t* bits = c->bits.data();
  uint32_t* const ties = c->ties.data();
  size_t above = 0, room = c->ranks.size(), tied = 0;
  auto keep_above = [&](size_t at) {
    if (above == room) {
      if (above >= cap) return false;
      c->ranks.resize(std::min(cap, 2 * above + 1024));
      c->bits.resize(c->ranks.size());
      ranks = c->ranks.data(), bits = c->bits.data(), room = c->ranks.size();
    }
    const uint32_t b = src.Bits(at);
    ranks[above] = RankOf(b & 0x7FFFFFFFu, at);
    bits[above] = b;
    ++above;
    return true;
  };
  auto keep_ties = [&](size_t i, uint64_t mask) {
    size_t taken = tied;
    tied += TakeTies(i, mask, tied, k, [&](size_t at) { ties[taken++] = static_cast<uint32_t>(at); });
    return tied < k;  // no more than k ties can ever be kept
  };
  const bool complete = Scan(src, count, threshold, keep_above, keep_ties);
  c->above = above, c->tied = tied;
  return complete;
}

// Writes index and value j of the encoding.
inline void Emit(uint8_t* dst, size_t k, size_t j, uint32_t index, uint32_t bits) {
  std::memcpy(dst + 4 * j, &index, 4);
  std::memcpy(dst + 4 * k + 4 * j, &bits, 4);
}

// Writes the encoding of the kept indices a and b (each ascending, together k).
template <typename Values, typename A, typename B>
void EmitMerged(const Values& src, size_t k, const A& a, const B& b, uint8_t* dst) {
  size_t i = 0, j = 0;
  for (size_t out = 0; out < k; ++out) {
    const bool from_a = j == b.size() || (i < a.size() && a[i] < b[j]);
    const uint32_t index = static_cast<uint32_t>(from_a ? a[i++] : b[j++]);
    Emit(dst, k, out, index, src.Bits(index));
  }
}

// The k-th largest of the distinct ranks[0..n), 1 <= k <= n. A histogram of the keys (the
// ranks' high halves) in 4096 bins over their span finds the bin that holds it, and only that
// bin's ranks are selected among: keys are float bit patterns, so the bins are log-spaced and
// even a span of outliers at 100x leaves a few hundred bins to the bulk just above the sample's
// threshold (nth_element over every candidate was a quarter of a 64 MiB encode).
uint64_t KthLargest(const uint64_t* ranks, size_t n, size_t k, std::vector<uint64_t>* scratch) {
  uint32_t lo = 0xFFFFFFFFu, hi = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t key = static_cast<uint32_t>(ranks[j] >> 32);
    lo = std::min(lo, key), hi = std::max(hi, key);
  }
  constexpr int kSelectBinBits = 12;
  int shift = 0;
  while (((hi - lo) >> shift) >> kSelectBinBits != 0) ++shift;
  uint32_t counts[size_t{1} << kSelectBinBits] = {};
  for (size_t j = 0; j < n; ++j) ++counts[(static_cast<uint32_t>(ranks[j] >> 32) - lo) >> shift];
  size_t above = 0;
  uint32_t bin = (hi - lo) >> shift;
  for (; above + counts[bin] < k; --bin) above += counts[bin];
  scratch->clear();
  for (size_t j = 0; j < n; ++j)
    if ((static_cast<uint32_t>(ranks[j] >> 32) - lo) >> shift == bin) scratch->push_back(ranks[j]);
  const auto kth = scratch->begin() + static_cast<ptrdiff_t>(k - above) - 1;
  std::nth_element(scratch->begin(), kth, scratch->end(), std::greater<uint64_t>());
  return *kth;
}

// False (nothing written) when the sample misjudged: fewer than k keys at or above its
// threshold, or more than 4k + 4096 above it.
template <typename Values>
bool EncodeSampled(const Values& src, size_t count, size_t k, uint8_t* dst) {
  uint32_t threshold = 0;
  if (!SampleThreshold(src, count, k, &threshold)) return false;
  thread_local Candidates candidates;
  Candidates& c = candidates;  // one thread-local address, not one per access
  c.ranks.resize(k + k / 2 + 64);
  c.bits.resize(c.ranks.size());
  if (!Collect(src, count, threshold, k, 4 * k + 4096, &c) || c.above + c.tied < k) return false;
  size_t out = 0;
  if (c.above >= k) {
    // The k largest of the candidates above: the k-th rank splits them (ranks are distinct).
    const uint64_t cut = KthLargest(c.ranks.data(), c.above, k, &c.order);
    // Without a branch: a fifth to a third of the candidates fall below the cut, in no order a
    // predictor learns (a mispredict each cost more than the rest of the loop). Each candidate
    // is written at the next place and kept there only if it makes the cut; the kept ones are
    // all written once out reaches k (the ranks are distinct: exactly k are >= cut).
    const uint64_t* ranks = c.ranks.data();  // locals: Emit's byte stores may alias c's fields
    const uint32_t* bits = c.bits.data();
    for (size_t j = 0, n = c.above; j < n && out < k; ++j) {
      Emit(dst, k, out, IndexOf(ranks[j]), bits[j]);
      out += ranks[j] >= cut ? 1 : 0;
    }
    return true;
  }
  // Every key above, then the lowest-index ties: two index-ordered lists, merged.
  c.ties.resize(k - c.above);
  c.order.resize(c.above);
  for (size_t j = 0; j < c.above; ++j) c.order[j] = IndexOf(c.ranks[j]);
  EmitMerged(src, k, c.order, c.ties, dst);
  return true;
}

// ---- radix path ----

// Counts of (key >> shift) & (bins - 1), over every key or (only_bin >= 0) over the keys in
// that top bin. Four interleaved tables: a run of equal keys (zeros, few distinct values)
// would otherwise serialize every increment on one counter.
std::vector<uint32_t> Histogram(const OneArray& src, size_t count, int shift, size_t bins,
                                int64_t only_bin) {
  std::vector<uint32_t> tables(4 * bins, 0);
  auto add = [&](size_t i) {
    const uint32_t key = Key(src, i);
    if (only_bin >= 0 && (key >> kBinShift) != static_cast<uint32_t>(only_bin)) return true;
    ++tables[(i & 3) * bins + ((key >> shift) & (bins - 1))];
    return true;
  };
  if (only_bin >= 0) {  // the bin's keys are >= its first key: scan for those only
    const uint32_t first = static_cast<uint32_t>(only_bin) << kBinShift;
    Scan(src, count, first, add, [&](size_t i, uint64_t mask) {
      for (; mask != 0; mask &= mask - 1) add(i + static_cast<size_t>(__builtin_ctzll(mask)));
      return true;
    });
  } else {
    for (size_t i = 0; i < count; ++i) add(i);
  }
  for (size_t b = 0; b < bins; ++b) tables[b] += tables[bins + b] + tables[2 * bins + b] + tables[3 * bins + b];
  tables.resize(bins);
  return tables;
}

// Walking down from the top bin: the bin where the running count reaches `need`, and the
// count of the bins above it.
uint32_t FindThreshold(const std::vector<uint32_t>& histogram, size_t need, size_t* above) {
  size_t running = 0;
  for (size_t b = histogram.size(); b-- > 0;) {
    if (running + histogram[b] >= need) {
      *above = running;
      return static_cast<uint32_t>(b);
    }
    running += histogram[b];
  }
  *above = running;
  return 0;
}

void EncodeRadix(const OneArray& src, size_t count, size_t k, uint8_t* dst) {
  size_t above_bin = 0, above_low = 0;
  const uint32_t bin = FindThreshold(Histogram(src, count, kBinShift, kBins, -1), k, &above_bin);
  const uint32_t low =
      FindThreshold(Histogram(src, count, 0, size_t{1} << kBinShift, bin), k - above_bin, &above_low);
  // The exact threshold key: everything above it is kept, and of the keys equal to it the
  // lowest indices: one more pass finds them (two index-ordered lists, merged).
  const uint32_t threshold = (bin << kBinShift) | low;
  const size_t equal_wanted = k - above_bin - above_low;
  std::vector<uint32_t> above, equal;
  above.reserve(above_bin + above_low);
  equal.reserve(equal_wanted);
  Scan(src, count, threshold,
       [&](size_t i) {
         above.push_back(static_cast<uint32_t>(i));
         return true;
       },
       [&](size_t i, uint64_t mask) {
         TakeTies(i, mask, equal.size(), equal_wanted,
                  [&](size_t at) { equal.push_back(static_cast<uint32_t>(at)); });
         return equal.size() < equal_wanted;
       });
  EmitMerged(src, k, above, equal, dst);
}

}  // namespace

void EncodeTopK(const float* src, size_t count, size_t k, uint8_t* dst) {
  const OneArray values{src};
  if (count >= kSampledMin && EncodeSampled(values, count, k, dst)) return;
  EncodeRadix(values, count, k, dst);
}

bool EncodeTopKOfSum(const float* a, const float* b, size_t count, size_t k, uint8_t* dst) {
  return count >= kSampledMin && EncodeSampled(SumOfTwo{a, b}, count, k, dst);
}

void DecodeTopK(const uint8_t* src, size_t count, size_t k, float* dst) {
  std::memset(dst, 0, count * sizeof(float));
  ForEachKept(src, count, k, [dst](uint32_t index, float value) { dst[index] = value; });
}

namespace {

// Whether the kept indices are strictly ascending below count, as EncodeTopK writes them.
bool KeptAscending(const uint8_t* src, size_t count, size_t k) {
  uint64_t next = 0;  // the lowest index the next kept pair may have
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    std::memcpy(&index, src + 4 * j, 4);
    if (index < next || index >= count) return false;
    next = uint64_t{index} + 1;
  }
  return true;
}

// DecodeTopK's values a tile at a time (16 KiB: L1-resident), for an encoding KeptAscending:
// consume(at, n, tile) gets values [at, at + n). The thread's tile stays zero between tiles
// (each tile's kept positions are zeroed again after use), so a tile costs its kept values,
// not a clear of the whole tile.
template <typename Consume>
void ForEachDecodedTile(const uint8_t* src, size_t count, size_t k, Consume consume) {
  constexpr size_t kTile = 4096;
  thread_local std::vector<float> tile(kTile, 0.0f);
  size_t j = 0;
  for (size_t at = 0; at < count; at += kTile) {
    const size_t n = std::min(kTile, count - at), first = j;
    for (; j < k; ++j) {
      uint32_t index;
      std::memcpy(&index, src + 4 * j, 4);
      if (index >= at + n) break;
      std::memcpy(&tile[index - at], src + 4 * k + 4 * j, 4);
    }
    consume(at, n, static_cast<const float*>(tile.data()));
    for (size_t i = first; i < j; ++i) {
      uint32_t index;
      std::memcpy(&index, src + 4 * i, 4);
      tile[index - at] = 0.0f;
    }
  }
}

}  // namespace

bool DecodeAddTopK(const uint8_t* src, size_t count, size_t k, float* acc) {
  if (!KeptAscending(src, count, k)) return false;
  // Added by the reduction's own kernel, so the bits are DecodeTopK then Reduce by construction.
  ForEachDecodedTile(src, count, k, [acc](size_t at, size_t n, const float* tile) {
    kernels::Reduce(acc + at, acc + at, tile, n, weftFloat32, weftSum);
  });
  return true;
}

bool DecodeTopKStreamed(const uint8_t* src, size_t count, size_t k, float* dst) {
  if (!KeptAscending(src, count, k)) return false;
  ForEachDecodedTile(src, count, k, [dst](size_t at, size_t n, const float* tile) {
    kernels::CopyStreamingUnfenced(dst + at, tile, n * sizeof(float));
  });
  kernels::StreamingFence();
  return true;
}

}  // namespace weft::codec
