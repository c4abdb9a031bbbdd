// The decode-and-add of a block codec's encoding into a float32 sum: acc[i] = acc[i] + v[i],
// each block decoded and added in registers (the table's decode_add_block), where the unfused
// path decodes a tile into a buffer and then reduces it (kernels::Reduce, weftSum, float32).
// The result is the same bits: v[i] is exactly the float Decode writes, and the addition the
// reduction's (acc first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec_table.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft::codec {

// Adds values [first, first + n) of the encoding src of count values (spec valid; first a
// multiple of DecodeRangeAlignment(spec), as DecodeRange) into acc[0 .. n). Returns false and
// touches nothing where it does not apply -- the casts (bf16, fp16), top-k, Hadamard rotation,
// a codec without a decode_add_block entry, a misaligned first or a range past count -- so
// the caller falls back to DecodeRange + kernels::Reduce. Sum only: another op never calls it.
bool DecodeAddRange(const weftCompression& spec, const uint8_t* src, size_t count, size_t first,
                    size_t n, float* acc);

// acc[0 .. n) = acc (op) values [first, first + n) of the encoding (as DecodeRange's rule):
// sum and avg (whose division is its finalize's) through DecodeAddRange where it applies,
// else decoded into `decoded` (room for n values) and reduced by kernels::Reduce in float32.
// What the CPU backend's decode-reduce and the executor's codec chains both run.
void DecodeReduceRange(const weftCompression& spec, const uint8_t* src, size_t count,
                       size_t first, size_t n, weftRedOp_t op, float* acc, float* decoded);

// The same with a given kernel table (tests compare the generic and AVX2 tables through it).
bool DecodeAddRangeWith(const CodecKernels& kernels, const weftCompression& spec,
                        const uint8_t* src, size_t count, size_t first, size_t n, float* acc);

}  // namespace weft::codec
