// Decode-and-add over a range of blocks: the framing of kernels/codec.cc's DecodeBlockRange
// (scales first, then each block's codes; codec_layout.h), each block through the table's
// fused decode_add_block.
#include "kernels/codec_reduce.h"

#include <algorithm>
#include <cstring>

#include "kernels/codec.h"
#include "kernels/codec_layout.h"
#include "kernels/reduce.h"

namespace weft::codec {

bool DecodeAddRangeWith(const CodecKernels& kernels, const weftCompression& spec,
                        const uint8_t* src, size_t count, size_t first, size_t n, float* acc) {
  if (!IsBlockCodec(spec.codec) || Rotates(spec) || spec.block == 0) return false;
  const DecodeAddBlockFn add = kernels.decode_add_block[spec.codec];
  const size_t block = spec.block;
  if (add == nullptr || first % block != 0 || first > count || n > count - first) return false;
  const size_t blocks = BlockCount(count, block), stride = PayloadBytes(spec.codec, block);
  const uint8_t* payload = src + 4 * blocks;
  const size_t end = first + n;
  // The last block stops at end, not at the block's end: acc holds n values, no more.
  for (size_t b = first / block; b * block < end; ++b) {
    float scale;
    std::memcpy(&scale, src + 4 * b, 4);
    add(payload + b * stride, std::min(block, end - b * block), scale, acc + (b * block - first));
  }
  return true;
}

bool DecodeAddRange(const weftCompression& spec, const uint8_t* src, size_t count, size_t first,
                    size_t n, float* acc) {
  return DecodeAddRangeWith(ActiveCodecKernels(), spec, src, count, first, n, acc);
}

void DecodeReduceRange(const weftCompression& spec, const uint8_t* src, size_t count,
                       size_t first, size_t n, weftRedOp_t op, float* acc, float* decoded) {
  if ((op == weftSum || op == weftAvg) && DecodeAddRange(spec, src, count, first, n, acc)) return;
  DecodeRange(spec, src, count, first, n, decoded);
  kernels::Reduce(acc, acc, decoded, n, weftFloat32, op);
}

}  // namespace weft::codec
