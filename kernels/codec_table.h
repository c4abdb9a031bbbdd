// Internal: the per-instruction-set codec kernels behind kernels/codec.h.
//
// codec_generic.cc and codec_avx2.cc each fill one CodecKernels; codec.cc picks one at startup
// (the one dispatch point). Every entry computes exactly what codec_ref.h defines, bit for bit;
// tests run every table the CPU supports against the reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/weft_compress.h"

namespace weft::codec {

// What a block encoder needs beyond the values: stochastic rounding's stream.
struct BlockOptions {
  bool stochastic = false;
  uint32_t key = 0;
  uint32_t first_index = 0;  // index of the block's first value within the encode call
};

// Encodes n values (n <= block) into payload, returns the block's scale.
using EncodeBlockFn = float (*)(const float* x, size_t n, uint8_t* payload, const BlockOptions& o);
// Decodes n values of one block.
using DecodeBlockFn = void (*)(const uint8_t* payload, size_t n, float scale, float* out);
// Adds the n decoded values of one block into acc: acc[i] = acc[i] + v[i], v[i] the exact float
// DecodeBlockFn writes (a float32 sum's operand order, kernels::Reduce's), fused so that the
// decoded block never goes through memory (kernels/codec_reduce.h).
using DecodeAddBlockFn = void (*)(const uint8_t* payload, size_t n, float scale, float* acc);
using CastToFn = void (*)(const float* src, size_t n, uint16_t* dst);
// The Hadamard rotation of one block (codec_ref.h RotateForward / RotateInverse).
using RotateForwardFn = void (*)(const float* x, size_t n, size_t b, const float* signs, float* y);
using RotateInverseFn = void (*)(float* y, size_t b, const float* signs);
using CastFromFn = void (*)(const uint16_t* src, size_t n, float* dst);

struct CodecKernels {
  const char* isa = "";
  CastToFn to_cast[weftNumCodecs] = {};      // bf16, fp16
  CastFromFn from_cast[weftNumCodecs] = {};
  EncodeBlockFn encode_block[weftNumCodecs] = {};  // fp8 e4m3/e5m2, int8, int4, sign1
  DecodeBlockFn decode_block[weftNumCodecs] = {};
  DecodeAddBlockFn decode_add_block[weftNumCodecs] = {};  // the block codecs, sum only
  // The block codecs' decoders with streaming stores (dst 16-byte aligned; the caller fences):
  // codec::DecodeValuesStreamed. nullptr: no such kernel, the plain one runs.
  DecodeBlockFn decode_stream_block[weftNumCodecs] = {};
  RotateForwardFn rotate_forward = nullptr;
  RotateInverseFn rotate_inverse = nullptr;
};

const CodecKernels& GenericCodecKernels();
const CodecKernels* Avx2CodecKernels();  // nullptr when the build or the CPU lacks AVX2+F16C
const CodecKernels& ActiveCodecKernels();

}  // namespace weft::codec
