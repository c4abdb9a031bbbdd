// The emulated GPU's codec kernels: kernels/codec_kernels.h's bodies (the source codec.cu
// compiles for CUDA) run over the whole call on the stream's thread, one unit after another,
// on the device threads' alias of device memory. Arguments were checked when the launch was
// queued (the plan is valid, the pointers resolved).
#include <algorithm>
#include <vector>

#include "device/emulated/emulated_kernels.h"
#include "kernels/codec_kernels.h"

namespace weft::device::emulated {
namespace {

using codec::CodecPlan;

// The top-k select, serially: four 8-bit histogram passes fix the threshold key and how many
// keys equal to it are kept, then one pass in index order writes the kept pairs.
void EncodeTopK(const CodecPlan& p, const float* src, uint8_t* dst) {
  uint32_t threshold = 0, ties = static_cast<uint32_t>(p.kept);
  for (int shift = codec::kTopKFirstShift; shift >= 0; shift -= 8) {
    uint32_t histogram[codec::kTopKDigits] = {};
    for (size_t i = 0; i < p.count; ++i) {
      const uint32_t key = codec::TopKKey(src[i]);
      if (codec::TopKInPass(key, threshold, shift)) ++histogram[codec::TopKDigit(key, shift)];
    }
    threshold |= codec::TopKPickDigit(histogram, &ties) << shift;
  }
  size_t ties_before = 0, out = 0;
  for (size_t i = 0; i < p.count && out < p.kept; ++i) {
    const uint32_t key = codec::TopKKey(src[i]);
    if (codec::TopKKeeps(key, threshold, ties_before, ties))
      codec::StoreKept(dst, p.kept, out++, static_cast<uint32_t>(i), FloatBits(src[i]));
    if (key == threshold) ++ties_before;
  }
}

// The signs d and one block of room, for the codecs that rotate.
struct Rotation {
  std::vector<float> signs, block;
  explicit Rotation(const CodecPlan& p) {
    if (!p.hadamard) return;
    signs.resize(p.block);
    block.resize(p.block);
    codec::RotationSigns(p.rotation_key, p.block, signs.data());
  }
};

template <typename Sink>
void DecodeInto(const CodecPlan& p, const uint8_t* src, float* dst) {
  if (p.codec == weftCodecTopK) {  // the kept pairs over zeros, then every value to the sink
    std::vector<float> values(p.count, 0.0f);
    for (size_t j = 0; j < p.kept; ++j) codec::ScatterKeptAt(p, src, j, values.data());
    for (size_t i = 0; i < p.count; ++i) Sink::Apply(dst + i, values[i]);
    return;
  }
  if (!p.hadamard) {
    for (size_t i = 0; i < p.count; ++i) Sink::Apply(dst + i, codec::DecodeValueAt(p, src, i));
    return;
  }
  Rotation r(p);
  for (size_t b = 0; b < p.blocks; ++b) {
    codec::DecodeRotatedBlockAt(p, src, b, r.signs.data(), r.block.data());
    const size_t n = std::min(p.block, p.count - b * p.block);
    for (size_t j = 0; j < n; ++j) Sink::Apply(dst + b * p.block + j, r.block[j]);
  }
}

}  // namespace

void RunEncode(const CodecPlan& p, const float* src, uint8_t* dst) {
  if (p.codec == weftCodecBf16 || p.codec == weftCodecFp16) {
    for (size_t i = 0; i < p.count; ++i) codec::EncodeCastAt(p, src, dst, i);
  } else if (p.codec == weftCodecTopK) {
    EncodeTopK(p, src, dst);
  } else {
    Rotation r(p);
    for (size_t b = 0; b < p.blocks; ++b)
      codec::EncodeBlockAt(p, src, dst, b, r.signs.data(), r.block.data());
  }
}

void RunDecode(const CodecPlan& p, const uint8_t* src, float* dst) {
  DecodeInto<codec::StoreSink>(p, src, dst);
}

bool RunDecodeReduce(const CodecPlan& p, const uint8_t* src, float* dst, weftRedOp_t op) {
  return codec::WithReduceSink(op, [&](auto sink) { DecodeInto<decltype(sink)>(p, src, dst); });
}

}  // namespace weft::device::emulated
