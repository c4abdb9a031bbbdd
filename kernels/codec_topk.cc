// Top-k selection on the magnitude bits: a sampled threshold and one filtering pass for large
// inputs, radix select in two passes otherwise (and whenever the sample misjudged).
//
// The key of x is its bit pattern without the sign: for non-negative floats integer order is
// value order, and inf < NaN patterns sort above every finite value, so NaN/inf rank highest.
// The kept set is defined by rank = (key << 32) | (2^32 - 1 - index): the k largest ranks, so
// ties go to the lower index. Both paths compute exactly that set (deterministic).
//
// Sampled path (count >= kSampledMin, k a small fraction of count):
//   pass 1: kSamples keys at evenly spaced positions; the threshold t is the sample key whose
//           rank among the samples puts, in expectation, k plus four standard deviations of
//           the keys at or above it. Reads 1/64 of the lines or fewer.
//   pass 2: every index with key >= t, in index order, with its rank and bits; 1-2% of the
//           values for a top-1%, so the pass runs at the speed of reading the input.
//   Fewer than k candidates (an input that fools the spacing), or more than 4k + 4096 (many
//   keys equal to the threshold): the radix path below.
//   Otherwise the k-th largest candidate rank (nth_element on a copy) splits the candidates,
//   which are already in index order.
// Radix path:
//   pass 1: histogram of the top 15 key bits (32768 bins); walking down from the top bin finds
//           the bin T where the running count reaches k.
//   pass 2: every value in a bin above T is kept (emitted in index order); values in bin T are
//           candidates, of which the `need` largest ranks are kept.
// The radix path costs ~3x the sampled one at 64 MiB: the histogram's increments serialize
// when most values share a few bins (codec_bench: 21.6 ms against 7-8 for top-1%).
#include "kernels/codec_topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace weft::codec {
namespace {

constexpr int kBinShift = 16;
constexpr size_t kBins = size_t{1} << 15;
constexpr size_t kSampledMin = size_t{1} << 16;
constexpr size_t kSamples = size_t{1} << 14;

inline uint32_t Bits(const float* src, size_t i) {
  uint32_t bits;
  std::memcpy(&bits, &src[i], 4);
  return bits;
}
inline uint32_t Key(const float* src, size_t i) { return Bits(src, i) & 0x7FFFFFFFu; }
inline uint64_t RankOf(uint32_t key, size_t index) {
  return (uint64_t{key} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(index));
}
inline uint32_t IndexOf(uint64_t rank) { return 0xFFFFFFFFu - static_cast<uint32_t>(rank); }

void WriteEncoding(const std::vector<uint32_t>& indices, const float* src, size_t k, uint8_t* dst) {
  std::memcpy(dst, indices.data(), k * 4);
  for (size_t j = 0; j < k; ++j) std::memcpy(dst + 4 * k + 4 * j, &src[indices[j]], 4);
}

// ---- sampled path ----

// The key threshold of pass 1; false when sampling would not narrow much (k near count).
bool SampleThreshold(const float* src, size_t count, size_t k, uint32_t* threshold) {
  const double expected = static_cast<double>(kSamples) * static_cast<double>(k) / count;
  const double j = std::ceil(expected + 4 * std::sqrt(expected) + 16);
  if (j >= kSamples / 4) return false;
  std::vector<uint32_t> keys(kSamples);
  for (size_t s = 0; s < kSamples; ++s) keys[s] = Key(src, s * count / kSamples);
  const auto nth = keys.begin() + static_cast<ptrdiff_t>(j) - 1;
  std::nth_element(keys.begin(), nth, keys.end(), std::greater<uint32_t>());
  *threshold = *nth;
  return true;
}

// Indices with key >= threshold, in index order: their ranks and raw bits, at most `cap`;
// false when more qualify (many keys equal the threshold, e.g. an input of mostly zeros:
// the radix path copes better). Grows the vectors itself (stores through raw pointers:
// push_back's checks cost as much as the pass).
bool Collect(const float* src, size_t count, uint32_t threshold, size_t cap,
             std::vector<uint64_t>* ranks, std::vector<uint32_t>* bits) {
  size_t n = 0;
  bool over = false;
  auto take = [&](size_t at) {
    if (n == ranks->size()) {
      if (n >= cap) {
        over = true;
        return;
      }
      ranks->resize(std::min(cap, 2 * n + 1024));
      bits->resize(ranks->size());
    }
    (*ranks)[n] = RankOf(Key(src, at), at);
    (*bits)[n] = Bits(src, at);
    ++n;
  };
  size_t i = 0;
#if defined(__SSE2__)
  // 64 keys per test, four at a time. Keys are non-negative int32, so a signed compare
  // against threshold - 1 is >=.
  const __m128i magnitude = _mm_set1_epi32(0x7FFFFFFF);
  const __m128i below = _mm_set1_epi32(static_cast<int32_t>(threshold) - 1);
  for (; i + 64 <= count; i += 64) {
    uint64_t mask = 0;
    for (int q = 0; q < 16; ++q) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 4 * q));
      const __m128i hit = _mm_cmpgt_epi32(_mm_and_si128(v, magnitude), below);
      mask |= static_cast<uint64_t>(_mm_movemask_ps(_mm_castsi128_ps(hit))) << (4 * q);
    }
    for (; mask != 0; mask &= mask - 1) take(i + static_cast<size_t>(__builtin_ctzll(mask)));
    if (over) return false;
  }
#endif
  for (; i < count; ++i)
    if (Key(src, i) >= threshold) take(i);
  ranks->resize(n);
  bits->resize(n);
  return !over;
}

// False (nothing written) when the sample misjudged: fewer than k or too many candidates.
bool EncodeSampled(const float* src, size_t count, size_t k, uint8_t* dst) {
  uint32_t threshold = 0;
  if (!SampleThreshold(src, count, k, &threshold)) return false;
  // Kept per thread: fresh vectors of a few MiB cost their page faults on every call (1.5 ms
  // of 13 at 64 MiB). A thread keeps about 20 bytes per kept element of its largest call.
  thread_local std::vector<uint64_t> ranks, order;
  thread_local std::vector<uint32_t> bits;
  const size_t expect = k + k / 2 + 64;
  ranks.resize(expect);
  bits.resize(expect);
  if (!Collect(src, count, threshold, 4 * k + 4096, &ranks, &bits) || ranks.size() < k) return false;
  order.assign(ranks.begin(), ranks.end());
  const auto kth = order.begin() + static_cast<ptrdiff_t>(k) - 1;
  std::nth_element(order.begin(), kth, order.end(), std::greater<uint64_t>());
  const uint64_t cut = *kth;  // ranks are distinct: exactly k candidates reach it
  size_t out = 0;
  for (size_t c = 0; c < ranks.size(); ++c) {
    if (ranks[c] < cut) continue;
    const uint32_t index = IndexOf(ranks[c]);
    std::memcpy(dst + 4 * out, &index, 4);
    std::memcpy(dst + 4 * k + 4 * out, &bits[c], 4);
    ++out;
  }
  return true;
}

// ---- radix path ----

// The bin where the count of keys from the top reaches k, and how many keys lie above it.
void FindThresholdBin(const float* src, size_t count, size_t k, uint32_t* bin, size_t* above) {
  std::vector<uint32_t> histogram(kBins, 0);
  for (size_t i = 0; i < count; ++i) ++histogram[Key(src, i) >> kBinShift];
  size_t running = 0;
  for (size_t b = kBins; b-- > 0;) {
    if (running + histogram[b] >= k) {
      *bin = static_cast<uint32_t>(b);
      *above = running;
      return;
    }
    running += histogram[b];
  }
  *bin = 0;
  *above = running;
}

void EncodeRadix(const float* src, size_t count, size_t k, uint8_t* dst) {
  uint32_t threshold_bin = 0;
  size_t above = 0;
  FindThresholdBin(src, count, k, &threshold_bin, &above);
  std::vector<uint32_t> kept;
  std::vector<uint32_t> candidates;
  kept.reserve(above);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bin = Key(src, i) >> kBinShift;
    if (bin > threshold_bin) {
      kept.push_back(static_cast<uint32_t>(i));
    } else if (bin == threshold_bin) {
      candidates.push_back(static_cast<uint32_t>(i));
    }
  }
  // The `need` largest candidates by rank.
  const size_t need = k - kept.size();
  auto larger = [src](uint32_t a, uint32_t b) { return RankOf(Key(src, a), a) > RankOf(Key(src, b), b); };
  std::nth_element(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(need),
                   candidates.end(), larger);
  candidates.resize(need);
  std::sort(candidates.begin(), candidates.end());
  std::vector<uint32_t> indices(k);
  std::merge(kept.begin(), kept.end(), candidates.begin(), candidates.end(), indices.begin());
  WriteEncoding(indices, src, k, dst);
}

}  // namespace

void EncodeTopK(const float* src, size_t count, size_t k, uint8_t* dst) {
  if (count >= kSampledMin && EncodeSampled(src, count, k, dst)) return;
  EncodeRadix(src, count, k, dst);
}

void DecodeTopK(const uint8_t* src, size_t count, size_t k, float* dst) {
  std::memset(dst, 0, count * sizeof(float));
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    float value;
    std::memcpy(&index, src + 4 * j, 4);
    std::memcpy(&value, src + 4 * k + 4 * j, 4);
    if (index < count) dst[index] = value;  // a corrupt index is ignored, never written out of bounds
  }
}

}  // namespace weft::codec
