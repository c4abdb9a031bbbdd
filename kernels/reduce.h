// CPU reduction kernels: dst = a (op) b for every (dtype, op), the avg finalization, and copy.
//
// Semantics (user-visible: every collective's result is defined by them; the CUDA kernels in
// reduce.cu implement the same definitions and are tested bitwise against these):
//
//  * Integers (int8, uint8, int32, uint32, int64, uint64): sum and prod wrap modulo 2^bits
//    (computed in unsigned arithmetic, so there is no undefined behaviour on overflow); max/min
//    compare as the signed or unsigned type. avg = the wrapped sum, then one integer division
//    by the number of ranks truncating toward zero (-7 avg over 2 ranks -> -3).
//  * float32 / float64: IEEE arithmetic in the type itself, round to nearest even. A collective
//    adds contributions in the order its schedule dictates, so sums of more than two ranks may
//    differ in the last bits between algorithms (as in NCCL); every rank of one call gets the
//    same bits.
//  * float16 / bfloat16: each pairwise Reduce converts both operands to float32, applies the op
//    in float32 and rounds the result once, to nearest even (|x| too large -> +-inf). So a ring
//    allreduce rounds once per hop, not once overall. avg divides in float32 and rounds once.
//  * Floating max/min propagate NaN: if either operand is NaN the result is NaN. Zeros are
//    ordered -0 < +0: max(-0, +0) = +0, min(-0, +0) = -0 (IEEE 754-2019 maximum/minimum).
//  * avg reduces exactly as sum; the division by the number of ranks happens once, at the end
//    of the collective, in Finalize. Floats divide (x / n), they do not multiply by 1/n.
//  * Subnormal results assume the default floating-point environment (no FTZ/DAZ); a caller
//    that sets FTZ/DAZ gets flushed float32/float64 subnormals.
//
// Preconditions (callers validate; the API layer reports errors): dtype and op valid
// (IsValidDataType/IsValidRedOp; invalid ones make Reduce/Finalize do nothing), pointers aligned
// to the element size, and dst either disjoint from a and b or exactly equal to one of them
// (in-place). Partially overlapping buffers are not supported.
//
// Implementation: one dispatch table (dtype, op) -> function, instantiated from templates
// (reduce_loops.h), once for baseline x86-64 and once for AVX2+F16C; the AVX2 table is chosen
// at startup when the CPU has both. WEFT_KERNEL_ISA=generic forces the baseline table (for
// testing and comparisons); default: the best the CPU supports.
#pragma once

#include <cstddef>

#include "weft/weft.h"

namespace weft::kernels {

// dst[i] = a[i] (op) b[i], i < count. dst may alias a or b exactly (same pointer).
// weftAvg reduces as weftSum (the division happens once, in Finalize).
void Reduce(void* dst, const void* a, const void* b, size_t count, weftDataType_t dtype,
            weftRedOp_t op);

// For weftAvg: dst[i] = dst[i] / divisor, once, at the end of a collective. No-op for other ops
// and for divisor <= 1 (divisor is the number of ranks; 1 leaves the values unchanged).
void Finalize(void* dst, size_t count, weftDataType_t dtype, weftRedOp_t op, int divisor);

// memcpy at full speed: copies of at least WEFT_COPY_NT_THRESHOLD bytes (default 16 MiB, 0 =
// never) use non-temporal stores on x86-64, which measured ~1.5x faster than glibc memcpy
// there. dst and src must not overlap. The copy is complete and ordered before any later
// store of the calling thread (it ends with a store fence).
void Copy(void* dst, const void* src, size_t bytes);

// Copies of at least this many bytes stream (WEFT_COPY_NT_THRESHOLD; SIZE_MAX when it is 0).
size_t StreamingThreshold();
// A copy with streaming stores whatever its size (x86-64; elsewhere memcpy), for a destination
// that will not be read from the cache (MemRef::streaming). Ends with a store fence, as Copy.
void CopyStreaming(void* dst, const void* src, size_t bytes);
// CopyStreaming without its store fence, for a caller that streams many pieces (a decode, a
// cache-sized tile at a time) and then calls StreamingFence once, before anything can signal
// the data ready.
void CopyStreamingUnfenced(void* dst, const void* src, size_t bytes);
void StreamingFence();

// A copy into memory that another core reads next (an shm window: a direct schedule's
// publish; a slice of the shm transport's ring). Plain stores must first take each line back
// from the reader's cache; when the two cores share no cache (another CCX or socket: this
// project's VM flips between placements every few seconds to minutes) that ownership traffic
// cuts a publish from 8-10 GB/s to ~2 GB/s and made a 64 MiB 2-rank allreduce 2.5x slower
// (38-40 ms against 15: the "slow mode" of issue 17, perf/RESULTS.md). Publishes of 64 KiB
// and more are timed: while plain ones run below 3 GB/s they stream (non-temporal stores,
// 25-29 GB/s in either placement), with a timed plain one every 32nd to notice the placement
// change back. Smaller publishes are plain copies (the reader wants them in cache; latency
// dominates). Copies of at least WEFT_COPY_NT_THRESHOLD always stream and
// WEFT_COPY_NT_THRESHOLD=0 never does, as Copy.
void CopyToShared(void* dst, const void* src, size_t bytes);

// The function Reduce dispatches to for (dtype, op), or nullptr when either is invalid. Lets a
// caller that reduces many chunks of one collective look the kernel up once.
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
ReduceFn GetReduceFn(weftDataType_t dtype, weftRedOp_t op);

// Name of the instruction set the dispatch table uses: "avx2" or "generic".
const char* KernelIsaName();

}  // namespace weft::kernels
