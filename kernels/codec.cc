// The codec entry points: the block framing (scales first, then each block's codes; Hadamard
// rotation and padding around the block kernels; spec validation and exact encoded sizes are
// kernels/codec_layout.h's), and the one dispatch point that picks the kernel table (AVX2+F16C when the CPU has both, else
// generic; WEFT_KERNEL_ISA=generic forces generic).
#include "kernels/codec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "kernels/codec_ref.h"
#include "kernels/codec_table.h"
#include "kernels/codec_topk.h"
#include "kernels/reduce.h"
#include "common/settings.h"

namespace weft::codec {
namespace {

const CodecKernels& ChooseKernels() {
  const CodecKernels* avx2 = Avx2CodecKernels();
  const StatusOr<std::string> isa = SettingChoice("WEFT_KERNEL_ISA", "");
  const bool generic = isa.ok() && *isa == "generic";
  const CodecKernels& chosen = (avx2 != nullptr && !generic) ? *avx2 : GenericCodecKernels();
  WEFT_INFO("codec kernels: %s", chosen.isa);
  return chosen;
}

// Per-thread room for one rotated block and the block's signs d (computed once per call).
struct Rotation {
  float* block = nullptr;
  const float* signs = nullptr;
};
Rotation PrepareRotation(const weftCompression& spec) {
  if (!Rotates(spec)) return {};
  thread_local std::vector<float> block, signs;
  thread_local uint64_t signs_seed = 0;
  thread_local size_t signs_block = 0;
  if (block.size() < spec.block) block.resize(spec.block);
  if (signs_block != spec.block || signs_seed != spec.seed) {
    signs.resize(spec.block);
    RotationSigns(RotationKey(spec.seed), spec.block, signs.data());
    signs_block = spec.block;
    signs_seed = spec.seed;
  }
  return {block.data(), signs.data()};
}

// Encodes blocks [first_block, end_block) of an encoding of count values into their places
// in dst (src[0] is value first_block x block).
void EncodeBlockRange(const weftCompression& spec, const float* src, size_t count,
                      size_t first_block, size_t end_block, uint8_t* dst, uint64_t stream) {
  const CodecKernels& k = ActiveCodecKernels();
  const EncodeBlockFn encode = k.encode_block[spec.codec];
  const size_t block = spec.block, blocks = BlockCount(count, block);
  const size_t stride = PayloadBytes(spec.codec, block);
  uint8_t* payload = dst + 4 * blocks;
  BlockOptions options;
  options.stochastic = (spec.flags & WEFT_COMPRESS_STOCHASTIC) != 0;
  options.key = StochasticKey(spec.seed, stream);
  const Rotation rotation = PrepareRotation(spec);
  float* rotated = rotation.block;
  for (size_t b = first_block; b < end_block; ++b) {
    const float* values = src + (b - first_block) * block;
    size_t n = std::min(block, count - b * block);
    if (rotated != nullptr) {
      k.rotate_forward(values, n, block, rotation.signs, rotated);
      values = rotated;
      n = block;
    }
    options.first_index = static_cast<uint32_t>(b * block);
    const float scale = encode(values, n, payload + b * stride, options);
    std::memcpy(dst + 4 * b, &scale, 4);
  }
}

// Decodes blocks [first_block, end_block) of an encoding of count values into dst (dst[0] is
// value first_block x block), by the kernel given or the codec's plain one.
void DecodeBlockRange(const weftCompression& spec, const uint8_t* src, size_t count,
                      size_t first_block, size_t end_block, float* dst,
                      DecodeBlockFn kernel = nullptr) {
  const CodecKernels& k = ActiveCodecKernels();
  const DecodeBlockFn decode = kernel != nullptr ? kernel : k.decode_block[spec.codec];
  const size_t block = spec.block, blocks = BlockCount(count, block);
  const size_t stride = PayloadBytes(spec.codec, block);
  const uint8_t* payload = src + 4 * blocks;
  const Rotation rotation = PrepareRotation(spec);
  float* rotated = rotation.block;
  for (size_t b = first_block; b < end_block; ++b) {
    float scale;
    std::memcpy(&scale, src + 4 * b, 4);
    const size_t n = std::min(block, count - b * block);
    float* out = dst + (b - first_block) * block;
    if (rotated == nullptr) {
      decode(payload + b * stride, n, scale, out);
      continue;
    }
    decode(payload + b * stride, block, scale, rotated);
    k.rotate_inverse(rotated, block, rotation.signs);
    std::memcpy(out, rotated, n * sizeof(float));
  }
}

void DecodeBlocks(const weftCompression& spec, const uint8_t* src, size_t count, float* dst) {
  DecodeBlockRange(spec, src, count, 0, BlockCount(count, spec.block), dst);
}

}  // namespace

const CodecKernels& ActiveCodecKernels() {
  static const CodecKernels& kernels = ChooseKernels();
  return kernels;
}

const char* ActiveCodecIsa() { return ActiveCodecKernels().isa; }

void Encode(const weftCompression& spec, const float* src, size_t count, uint8_t* dst,
            uint64_t stream) {
  if (count == 0) return;
  const CodecKernels& k = ActiveCodecKernels();
  if (k.to_cast[spec.codec] != nullptr) {
    k.to_cast[spec.codec](src, count, reinterpret_cast<uint16_t*>(dst));
  } else if (spec.codec == weftCodecTopK) {
    EncodeTopK(src, count, TopKCount(spec.ratio, count), dst);
  } else {
    EncodeBlockRange(spec, src, count, 0, BlockCount(count, spec.block), dst, stream);
  }
}

bool EncodeOfSum(const weftCompression& spec, const float* a, const float* b, size_t count,
                 uint8_t* dst) {
  if (spec.codec != weftCodecTopK || count == 0) return false;
  return EncodeTopKOfSum(a, b, count, TopKCount(spec.ratio, count), dst);
}

size_t EncodeRangeAlignment(const weftCompression& spec) { return DecodeRangeAlignment(spec); }

void EncodeRange(const weftCompression& spec, const float* src, size_t count, size_t first,
                 size_t n, uint8_t* dst, uint64_t stream) {
  if (n == 0) return;
  const CodecKernels& k = ActiveCodecKernels();
  if (k.to_cast[spec.codec] != nullptr) {
    k.to_cast[spec.codec](src, n, reinterpret_cast<uint16_t*>(dst) + first);
    return;
  }
  const size_t block = spec.block;
  EncodeBlockRange(spec, src, count, first / block, BlockCount(first + n, block), dst, stream);
}

void Decode(const weftCompression& spec, const uint8_t* src, size_t count, float* dst) {
  if (count == 0) return;
  const CodecKernels& k = ActiveCodecKernels();
  if (k.from_cast[spec.codec] != nullptr) {
    k.from_cast[spec.codec](reinterpret_cast<const uint16_t*>(src), count, dst);
  } else if (spec.codec == weftCodecTopK) {
    DecodeTopK(src, count, TopKCount(spec.ratio, count), dst);
  } else {
    DecodeBlocks(spec, src, count, dst);
  }
}

size_t DecodeRangeAlignment(const weftCompression& spec) {
  if (spec.codec == weftCodecTopK) return 0;  // one selection over the whole count
  return IsBlockCodec(spec.codec) ? spec.block : 1;
}

void DecodeRange(const weftCompression& spec, const uint8_t* src, size_t count, size_t first,
                 size_t n, float* dst) {
  if (n == 0) return;
  const CodecKernels& k = ActiveCodecKernels();
  if (k.from_cast[spec.codec] != nullptr) {
    k.from_cast[spec.codec](reinterpret_cast<const uint16_t*>(src) + first, n, dst);
    return;
  }
  const size_t block = spec.block;
  DecodeBlockRange(spec, src, count, first / block, BlockCount(first + n, block), dst);
}

namespace {

// bf16 values run a tile at a time: 16 KiB of float32 stays in L1 between the widening that
// writes it and the codec that reads it (as DroppedIntoResidual's runs).
constexpr size_t kTileValues = 4096;

// The calling thread's float32 tile (grows only; top-k's encode needs the whole count).
float* FloatTile(size_t count) {
  thread_local std::vector<float> tile;
  if (tile.size() < count) tile.resize(count);
  return tile.data();
}

// Values of one tile: a whole number of blocks for the block codecs (each block is encoded
// from its own values only), kTileValues for the casts.
size_t TileValues(const weftCompression& spec) {
  if (!IsBlockCodec(spec.codec)) return kTileValues;
  const size_t block = spec.block;
  return std::max(block, kTileValues / block * block);
}

#pragma GCC push_options
#pragma GCC optimize("O3")  // vectorized, as the other loops over every value
// The bf16 codec on a bf16 value: the value itself, as the float32 path (widen, then
// FloatToBfloat16) gives it: exact, but a NaN comes out quieted.
void CopyBf16QuietingNans(const uint16_t* __restrict src, size_t n, uint16_t* __restrict dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t x = src[i];
    dst[i] = (x & 0x7FFFu) > 0x7F80u ? static_cast<uint16_t>(x | 0x0040u) : x;
  }
}
#pragma GCC pop_options

// Top-k into bf16: zeros but for the kept positions (DecodeTopK's rule, corrupt indices
// ignored), each kept value narrowed by the bf16 cast.
void DecodeTopKToBf16(const weftCompression& spec, const uint8_t* src, size_t count,
                      uint16_t* dst) {
  const CastToFn narrow = ActiveCodecKernels().to_cast[weftCodecBf16];
  std::memset(dst, 0, count * sizeof(uint16_t));
  ForEachKept(src, count, TopKCount(spec.ratio, count),
              [narrow, dst](uint32_t index, float value) { narrow(&value, 1, dst + index); });
}

}  // namespace

void EncodeValues(const weftCompression& spec, weftDataType_t type, const void* src,
                  size_t count, uint8_t* dst, uint64_t stream) {
  if (type == weftFloat32) return Encode(spec, static_cast<const float*>(src), count, dst, stream);
  if (count == 0) return;
  const auto* in = static_cast<const uint16_t*>(src);
  if (spec.codec == weftCodecBf16)
    return CopyBf16QuietingNans(in, count, reinterpret_cast<uint16_t*>(dst));
  const CastFromFn widen = ActiveCodecKernels().from_cast[weftCodecBf16];
  if (spec.codec == weftCodecTopK) {  // the selection reads every value: widened whole
    float* values = FloatTile(count);
    widen(in, count, values);
    return EncodeTopK(values, count, TopKCount(spec.ratio, count), dst);
  }
  const size_t tile = TileValues(spec);
  float* values = FloatTile(tile);
  for (size_t first = 0; first < count; first += tile) {
    const size_t n = std::min(tile, count - first);
    widen(in + first, n, values);
    EncodeRange(spec, values, count, first, n, dst, stream);
  }
}

void DecodeValues(const weftCompression& spec, const uint8_t* src, size_t count,
                  weftDataType_t type, void* dst) {
  if (type == weftFloat32) return Decode(spec, src, count, static_cast<float*>(dst));
  if (count == 0) return;
  auto* out = static_cast<uint16_t*>(dst);
  if (spec.codec == weftCodecBf16)
    return CopyBf16QuietingNans(reinterpret_cast<const uint16_t*>(src), count, out);
  if (spec.codec == weftCodecTopK) return DecodeTopKToBf16(spec, src, count, out);
  const CastToFn narrow = ActiveCodecKernels().to_cast[weftCodecBf16];
  const size_t tile = TileValues(spec);
  float* values = FloatTile(tile);
  for (size_t first = 0; first < count; first += tile) {
    const size_t n = std::min(tile, count - first);
    DecodeRange(spec, src, count, first, n, values);
    narrow(values, n, out + first);
  }
}

void DecodeValuesStreamed(const weftCompression& spec, const uint8_t* src, size_t count,
                          weftDataType_t type, void* dst) {
  if (type != weftFloat32 || count < kTileValues) return DecodeValues(spec, src, count, type, dst);
  auto* out = static_cast<float*>(dst);
  if (spec.codec == weftCodecTopK) {  // zeros and a few values: a tile built, then streamed
    if (!DecodeTopKStreamed(src, count, TopKCount(spec.ratio, count), out))
      Decode(spec, src, count, out);
    return;
  }
  const DecodeBlockFn stream = ActiveCodecKernels().decode_stream_block[spec.codec];
  // Every block's first value 16-byte aligned; a rotated block decodes into a scratch block.
  if (stream == nullptr || Rotates(spec) || spec.block % 4 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return Decode(spec, src, count, out);
  DecodeBlockRange(spec, src, count, 0, BlockCount(count, spec.block), out, stream);
  kernels::StreamingFence();
}

void DecodeWithDropped(const weftCompression& spec, const uint8_t* encoded, size_t count,
                       const float* src_values, float* dst, float* dropped) {
  Decode(spec, encoded, count, dst);
  for (size_t i = 0; i < count; ++i) {
    const float d = src_values[i] - dst[i];
    dropped[i] = std::isfinite(dst[i]) && std::isfinite(d) ? d : 0.0f;
  }
}

namespace {

// The loops below are what error feedback costs per call: O3 vectorizes them (the build's O2
// does not, and they then run at a quarter of the decode's speed), as reduce_loops.h.
#pragma GCC push_options
#pragma GCC optimize("O3")

inline bool Finite(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & 0x7F800000u) != 0x7F800000u;
}

// What the encoding dropped of one value (the rule DecodeWithDropped states).
inline float DroppedValue(float value, float decoded) {
  const float d = value - decoded;
  return (Finite(decoded) & Finite(d)) ? d : 0.0f;  // &, not &&: no branch, so it vectorizes
}

void ApplyDropped(const float* __restrict values, const float* __restrict decoded, size_t n,
                  Feedback mode, float weight, float* __restrict residual) {
  if (mode == Feedback::kStore) {
    for (size_t i = 0; i < n; ++i) residual[i] = DroppedValue(values[i], decoded[i]);
  } else {
    for (size_t i = 0; i < n; ++i) residual[i] += weight * DroppedValue(values[i], decoded[i]);
  }
}

// A run that decodes to zeros (top-k between its kept positions).
void ApplyDroppedOfZeros(const float* __restrict values, size_t n, Feedback mode, float weight,
                         float* __restrict residual) {
  if (mode == Feedback::kStore) {
    for (size_t i = 0; i < n; ++i) residual[i] = DroppedValue(values[i], 0.0f);
  } else {
    for (size_t i = 0; i < n; ++i) residual[i] += weight * DroppedValue(values[i], 0.0f);
  }
}

#pragma GCC pop_options

// Top-k decodes to zeros but for k positions, ascending as its encoder writes them: the runs
// between them as zeros, each kept one with its value. (Error feedback reads this rank's own
// encodings: an index out of order or past count, which the encoder never writes, is skipped.)
void TopKDroppedIntoResidual(const weftCompression& spec, const uint8_t* encoded, size_t count,
                             const float* values, Feedback mode, float weight, float* residual) {
  const size_t k = TopKCount(spec.ratio, count);
  size_t next = 0;  // the first position not yet written
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    float kept;
    std::memcpy(&index, encoded + 4 * j, 4);
    std::memcpy(&kept, encoded + 4 * k + 4 * j, 4);
    if (index < next || index >= count) continue;
    ApplyDroppedOfZeros(values + next, index - next, mode, weight, residual + next);
    ApplyDropped(values + index, &kept, 1, mode, weight, residual + index);
    next = size_t{index} + 1;
  }
  ApplyDroppedOfZeros(values + next, count - next, mode, weight, residual + next);
}

}  // namespace

void DroppedIntoResidual(const weftCompression& spec, const uint8_t* encoded, size_t count,
                         const float* values, Feedback mode, float weight, float* residual) {
  if (count == 0) return;
  const size_t align = DecodeRangeAlignment(spec);
  if (align == 0)
    return TopKDroppedIntoResidual(spec, encoded, count, values, mode, weight, residual);
  DroppedIntoResidualRange(spec, encoded, count, 0, count, values, mode, weight, residual);
}

void DroppedIntoResidualRange(const weftCompression& spec, const uint8_t* encoded, size_t count,
                              size_t first, size_t n, const float* values, Feedback mode,
                              float weight, float* residual) {
  const size_t align = DecodeRangeAlignment(spec);
  if (n == 0 || align == 0) return;  // top-k: only whole (DroppedIntoResidual)
  // 16 KiB of decoded values at a time stay in L1 between the decode and the subtraction.
  constexpr size_t kRunValues = 4096;
  const size_t run = std::max(align, kRunValues / align * align);
  thread_local std::vector<float> decoded;
  if (decoded.size() < run) decoded.resize(run);
  for (size_t done = 0; done < n; done += run) {
    const size_t m = std::min(run, n - done);
    DecodeRange(spec, encoded, count, first + done, m, decoded.data());
    ApplyDropped(values + done, decoded.data(), m, mode, weight, residual + done);
  }
}

}  // namespace weft::codec
