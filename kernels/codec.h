// CPU compression codecs: encode float32 values into a codec's bytes and back.
//
// The semantics (and each codec's worst-case error) are defined once, in kernels/codec_ref.h;
// this is the entry point that frames them (block loop, scale layout, Hadamard padding) and
// dispatches to the active kernel table (codec_table.h: AVX2 when the CPU has it, else the
// generic one; WEFT_KERNEL_ISA=generic forces the generic one, as for reductions).
//
// Preconditions: spec passed ValidateSpec; buffers hold EncodedBytes / count elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/codec_layout.h"
#include "weft/weft_compress.h"

namespace weft::codec {

// ValidateSpec, IsBlockCodec, TopKCount, EncodedBytes (the exact size of an encoding) and
// CodecName are defined inline in kernels/codec_layout.h: the device plugins share them.

// No codec's encoding takes more than this many bytes per value (top-k: index + value; bf16:
// 2; block codecs: under 2 with their scales): callers bound counts with it before sizing.
constexpr size_t kMaxEncodedBytesPerValue = 8;

// Encodes src[0..count) into dst. `stream` selects the stochastic-rounding stream (ignored
// without WEFT_COMPRESS_STOCHASTIC). top-k needs count < 2^32.
void Encode(const weftCompression& spec, const float* src, size_t count, uint8_t* dst,
            uint64_t stream);
// Encode of the float32 sums a[i] + b[i] without storing them, where the codec selects over
// its whole input (top-k: one pass reads a and b; a block codec's chain tiles instead):
// false, nothing written, for another codec or where top-k's sampled selection does not
// apply, and the caller encodes the stored sums.
bool EncodeOfSum(const weftCompression& spec, const float* a, const float* b, size_t count,
                 uint8_t* dst);
// Decodes count values from src (as written by Encode with the same spec) into dst.
void Decode(const weftCompression& spec, const uint8_t* src, size_t count, float* dst);

// Encode and Decode on values of `type`, weftFloat32 or weftBfloat16 (the compressed
// all-to-all(v) runs on the caller's bf16 tokens with these). bf16 values never go through a
// float32 copy of the whole buffer: block codecs and casts widen or narrow a cache-sized tile
// at a time (whole blocks), the bf16 codec copies, top-k's decode scatters its k values; top-k's
// encode alone widens the whole input first (its selection needs every value). The bits are
// exactly those of Encode on the widened values (bf16 -> float32 is exact) and of Decode
// followed by the bf16 cast (nearest even; NaN stays NaN, quieted): tests/codecs_test.cc proves
// it for every codec.
void EncodeValues(const weftCompression& spec, weftDataType_t type, const void* src,
                  size_t count, uint8_t* dst, uint64_t stream);
void DecodeValues(const weftCompression& spec, const uint8_t* src, size_t count,
                  weftDataType_t type, void* dst);
// DecodeValues for a destination nothing reads soon (a call's final output beyond the cache:
// MemRef::streaming), with streaming stores (x86-64), so no destination line is read before it
// is written: a decode is all stores, and plain ones read each line first (64 MiB of sign1:
// 3.3 ms plain, 2.5 streamed on one core). The block codecs' decoders store each block so
// (CodecKernels::decode_stream_block); top-k builds a cache-sized tile and streams it. The bits
// are DecodeValues'. bf16 values, counts under a tile, casts, rotated or 16-byte-unaligned
// blocks, an unaligned dst, and a top-k encoding whose indices are not strictly ascending
// below count decode as DecodeValues.
void DecodeValuesStreamed(const weftCompression& spec, const uint8_t* src, size_t count,
                          weftDataType_t type, void* dst);

// Values [first, first + n) of an encoding of count values decode on their own, into dst[0..n),
// when first is a multiple of DecodeRangeAlignment(spec) (the block for block codecs, 1 for
// casts) and first + n is count or also a multiple; the bits are those Decode writes there.
// Alignment 0: the codec decodes only whole (top-k), DecodeRange must not be called.
size_t DecodeRangeAlignment(const weftCompression& spec);
void DecodeRange(const weftCompression& spec, const uint8_t* src, size_t count, size_t first,
                 size_t n, float* dst);

// The encoding's counterpart: values src[0..n), which are values [first, first + n) of count
// values, encode on their own into their places in dst (an encoding of count values: scales
// and codes), under the same alignment rule (EncodeRangeAlignment == DecodeRangeAlignment; 0:
// top-k selects over the whole count, EncodeRange must not be called). Encoding every range of
// a partition writes the bits Encode writes (stochastic rounding keys on the value's index).
size_t EncodeRangeAlignment(const weftCompression& spec);
void EncodeRange(const weftCompression& spec, const float* src, size_t count, size_t first,
                 size_t n, uint8_t* dst, uint64_t stream);

// Decodes into dst and, in the same pass over the data, stores dropped[i] = src_values[i] -
// dst[i] (0 where dst[i] is not finite): what error feedback carries into the next call.
void DecodeWithDropped(const weftCompression& spec, const uint8_t* encoded, size_t count,
                       const float* src_values, float* dst, float* dropped);

// Error feedback without a decoded copy: for dropped_i = values[i] - decode(encoded)[i] (0
// where the decoded value or the difference is not finite, as DecodeWithDropped), stores
// residual[i] = dropped_i (Feedback::kStore) or adds residual[i] += weight * dropped_i
// (Feedback::kAdd). Decodes a cache-sized run at a time (top-k: merges its sorted indices),
// so it reads values and the encoding once and touches residual once: bitwise what
// DecodeWithDropped and the loop after it give, in one pass instead of three.
enum class Feedback { kStore, kAdd };
void DroppedIntoResidual(const weftCompression& spec, const uint8_t* encoded, size_t count,
                         const float* values, Feedback mode, float weight, float* residual);
// The same over values [first, first + n) of the encoding of count values, under
// DecodeRange's alignment rule (not top-k): values and residual point at value `first`.
// Every range of a partition gives DroppedIntoResidual's bits.
void DroppedIntoResidualRange(const weftCompression& spec, const uint8_t* encoded, size_t count,
                              size_t first, size_t n, const float* values, Feedback mode,
                              float weight, float* residual);
// Name of the kernel table in use ("avx2" or "generic").
const char* ActiveCodecIsa();

}  // namespace weft::codec
