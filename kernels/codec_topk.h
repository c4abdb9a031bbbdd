// Internal: top-k sparsification (semantics in codec_ref.h): keep the k largest |x| exactly,
// as k uint32 indices (ascending) followed by k float32 values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::codec {

// Writes 8*k bytes. count < 2^32, 1 <= k <= count.
void EncodeTopK(const float* src, size_t count, size_t k, uint8_t* dst);
// dst[0..count) = 0 except the kept positions.
void DecodeTopK(const uint8_t* src, size_t count, size_t k, float* dst);

}  // namespace weft::codec
