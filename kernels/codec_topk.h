// Internal: top-k sparsification (semantics in codec_ref.h): keep the k largest |x| exactly,
// as k uint32 indices (ascending) followed by k float32 values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace weft::codec {

// Writes 8*k bytes. count < 2^32, 1 <= k <= count.
void EncodeTopK(const float* src, size_t count, size_t k, uint8_t* dst);
// EncodeTopK of the float32 sums a[i] + b[i] (kernels::Reduce's), which are never stored: one
// pass reads both inputs, where storing the sums and encoding them reads three and writes one.
// Runs the sampled selection only: false (nothing written) where it does not apply (count
// below its minimum) or misjudged, and the caller stores the sums and calls EncodeTopK.
bool EncodeTopKOfSum(const float* a, const float* b, size_t count, size_t k, uint8_t* dst);
// dst[0..count) = 0 except the kept positions.
void DecodeTopK(const uint8_t* src, size_t count, size_t k, float* dst);
// acc[i] = acc[i] + (the kept value at i, else +0.0f), in one pass over acc: the bits of
// DecodeTopK then kernels::Reduce (sum; its x + 0.0f turns -0.0 into +0.0 and quiets a
// signalling NaN), the decoded values built a cache-sized tile at a time instead of a zeroed
// array of count written and read back.
// False, acc untouched, where the kept indices are not strictly ascending below count (an
// encoding EncodeTopK did not write: DecodeTopK's rule, the last write wins, applies).
bool DecodeAddTopK(const uint8_t* src, size_t count, size_t k, float* acc);
// DecodeTopK's values written with streaming stores, a tile at a time (codec::
// DecodeValuesStreamed), then a store fence. False, dst untouched, as DecodeAddTopK.
bool DecodeTopKStreamed(const uint8_t* src, size_t count, size_t k, float* dst);

// Calls keep(index, value) for each of the k kept pairs of an encoding whose index is below
// count (a corrupt index is skipped: never written out of bounds), in the encoding's order.
template <typename Keep>
void ForEachKept(const uint8_t* src, size_t count, size_t k, Keep keep) {
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    float value;
    std::memcpy(&index, src + 4 * j, 4);
    std::memcpy(&value, src + 4 * k + 4 * j, 4);
    if (index < count) keep(index, value);
  }
}

}  // namespace weft::codec
