// Top-k selection by radix select on the magnitude bits, in two passes over the values.
//
// The key of x is its bit pattern without the sign: for non-negative floats integer order is
// value order, and inf < NaN patterns sort above every finite value, so NaN/inf rank highest.
//   pass 1: histogram of the top 15 key bits (32768 bins); walking down from the top bin finds
//           the bin T where the running count reaches k.
//   pass 2: every value in a bin above T is kept (emitted in index order); values in bin T are
//           candidates, of which the `need` largest keys (ties: lower index) are kept.
// The kept indices are merged into one ascending list. Deterministic, and O(n) plus the
// candidates' partial sort (few, unless most values share their top 15 bits).
#include "kernels/codec_topk.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace weft::codec {
namespace {

constexpr int kBinShift = 16;
constexpr size_t kBins = size_t{1} << 15;

inline uint32_t Key(const float* src, size_t i) {
  uint32_t bits;
  std::memcpy(&bits, &src[i], 4);
  return bits & 0x7FFFFFFFu;
}

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

}  // namespace

void EncodeTopK(const float* src, size_t count, size_t k, uint8_t* dst) {
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
  // The `need` largest candidates; ties broken by the lower index (a strict total order).
  const size_t need = k - kept.size();
  auto larger = [src](uint32_t a, uint32_t b) {
    const uint32_t ka = Key(src, a), kb = Key(src, b);
    return ka != kb ? ka > kb : a < b;
  };
  std::nth_element(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(need),
                   candidates.end(), larger);
  candidates.resize(need);
  std::sort(candidates.begin(), candidates.end());
  std::vector<uint32_t> indices(k);
  std::merge(kept.begin(), kept.end(), candidates.begin(), candidates.end(), indices.begin());
  std::memcpy(dst, indices.data(), k * 4);
  for (size_t j = 0; j < k; ++j) std::memcpy(dst + 4 * k + 4 * j, &src[indices[j]], 4);
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
