// Codec chains: the executor's fusion of a compressed schedule's local work.
//
// A compressed schedule builds a float32 value and encodes it: the hierarchical allreduce's
// owner adds its lane into the member's lane it received, then encodes each sub-slice of the
// sum; the owner of a reduced slice decodes the first host's contribution, decode-reduces the
// others', finalizes, then encodes the result. Run step by step, each step is a pass over
// memory (the sum written, read back, written, read again), and on a machine whose cores wait
// on DRAM those passes are the call's CPU time. Run as a chain, tile by tile (16 KiB of
// float32: L1-resident), every step touches each tile while it is in the cache: the inputs and
// encodings are read once, the encodings written once, and the float32 value is written back
// only when something reads it later (or never, when it is dead).
//
// The chain computes exactly what the steps compute, element by element and in the same order
// (the reductions, decodes and finalize are element-wise; EncodeRange/DecodeRange of aligned
// ranges give the whole call's bits), so fused and step-by-step runs are bitwise identical
// (tests/codec_chain_test.cc; WEFT_FUSE_CODEC_STEPS=0 runs the steps one by one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "kernels/codec.h"
#include "topo/link_table.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"

namespace weft {

struct CodecChain {
  size_t first = 0, last = 0;  // steps [first, last] of the rank's schedule
  Region acc;                  // float32 region the leading steps write and the encodes read
  bool acc_dead = false;       // no step after `last` touches acc: its values need no store
  // Tile by tile (block codecs), or each encode whole (top-k, whose selection reads all of an
  // encode's values: RunCodecChain passes its inputs once per encode instead).
  bool tiled = true;
  // Top-k's host reduce on a host of 3+ ranks (several copies and reduces build P): P is
  // built tile by tile, every operand read once and P written once, then each encode runs
  // whole on it (BuiltChain). Not tiled, and P is stored (acc_dead false).
  bool built = false;
};

// The chains of a rank's steps: a run that opens with a copy, reduce, decode or decode-reduce
// into a Scratch region P, continues with reduces, decode-reduces and finalizes of exactly P,
// and ends with encodes of parts of P (at least one of each kind), where every encode's
// boundaries inside P lie on the codec's range alignment (so each tile of P decodes and
// encodes on its own). Top-k selects over a whole encode, so its chains are the one form
// that needs no tiles (tiled = false): a single copy or reduce opens P, nothing continues it,
// the encodes follow and P is dead after them; each encode then reads its inputs in one pass
// (codec::EncodeOfSum) and P is never written. With several copies and reduces (no decodes)
// before top-k's encodes, the chain is `built`: P built in tiles, the encodes whole after. `keep_acc`: P is never dead (for a caller
// that reads it after the call; error feedback needs no such thing: the chain feeds back
// each tile as it encodes it, ChainStep::residual).
std::vector<CodecChain> FindCodecChains(const std::vector<Step>& steps,
                                        const weftCompression& spec, bool keep_acc);

// A receive whose values only one copy or reduce of a chain reads, and nothing after: it may
// land in the cache instead of memory (exec/operand_sink.h).
struct StreamedOperand {
  size_t recv = 0;    // the receive's step index
  size_t reader = 0;  // the chain step that reads it, counted from c.first
};
// The receives right before tiled chain c (steps [c.first - k, c.first), in order, k >= 0 as
// many as qualify) that feed its operands: each fills a scratch region of c.acc's size,
// apart from acc, from a peer none of the others comes from, which exactly one copy or reduce
// of the chain reads whole and no other step of the chain or after it touches.
std::vector<StreamedOperand> StreamedOperands(const std::vector<Step>& steps, const CodecChain& c);

// Whether the executor runs chains (WEFT_FUSE_CODEC_STEPS, default on; read once): the
// executor, the simulator's pricing and the closed form all ask this.
bool CodecChainsEnabled();

// How much faster a chain's steps after its first run than the same steps over DRAM: the
// core's cache copy rate over its DRAM copy rate, at least 1 (1 without a DRAM rate).
double CodecChainSpeedup(const ComputeParams& core);

// One step of a chain with its memory resolved by the executor (float32 values; encodings as
// bytes, their sizes already checked).
struct ChainStep {
  StepOp op = StepOp::kCopy;
  const void* src = nullptr;  // copy/reduce: values aligned with acc; decodes: the encoding
  const float* addend = nullptr;  // copy/reduce: src reads as src + addend (ExecBuffers::addend)
  // copy/reduce: the value of acc that src[0] lines up with (0: src spans all of acc). A
  // streamed operand (exec/operand_sink.h) points src at the part that has landed.
  size_t src_at = 0;
  uint8_t* encoded = nullptr;  // encode: where the encoding goes
  size_t offset = 0;           // encode: its first value's offset in acc
  size_t count = 0;            // encode: its values
  uint64_t stream = 0;         // encode: stochastic-rounding stream
  // encode with error feedback (exec/executor.h CodecFeedback): the residual of its first
  // value, and how what the encoding drops goes there, tile by tile (codec::DroppedIntoResidual).
  float* residual = nullptr;
  codec::Feedback feedback = codec::Feedback::kStore;
  float feedback_weight = 1.0f;
};

// Whether resolved chain steps are a built chain's (CodecChain::built): a codec that encodes
// whole (top-k) after more than one step that builds P.
bool BuiltChain(const std::vector<ChainStep>& steps, const weftCompression& spec);
// A built chain's encodes, each whole on P (acc) once every tile of P is built.
void EncodeBuiltChain(const std::vector<ChainStep>& steps, const float* acc, const weftCompression& spec);

// One tile of a chain: values [at, at + n) of acc, and the encode they belong to (nullptr:
// values between encodes, built only where acc is read later).
struct ChainTile {
  size_t at = 0, n = 0;
  const ChainStep* encode = nullptr;
};
// The values per tile (16 KiB of float32, whole codec blocks).
size_t CodecChainTileValues(const weftCompression& spec);
// A chain's tiles in order of acc (RunCodecChain runs them so); a built chain's cover all of
// acc and encode nothing (EncodeBuiltChain follows them).
void PlanCodecChain(const std::vector<ChainStep>& steps, size_t acc_count, bool acc_dead,
                    const weftCompression& spec, std::vector<ChainTile>* tiles);
// Runs one tile, reading what acc holds at t.at from `cur`: acc + t.at itself, or where those
// values landed from a peer (exec/chain_sink.h, which streams a receive into a chain).
void RunCodecChainTile(const std::vector<ChainStep>& steps, const ChainTile& t, const float* cur,
                       float* acc, size_t acc_count, bool acc_dead, const weftCompression& spec,
                       weftRedOp_t op, int nranks);
// Runs a chain over acc[0..acc_count) (see FindCodecChains; the steps in schedule order).
// op/nranks: the call's reduction and the average's divisor. Host memory, CPU kernels.
void RunCodecChain(const std::vector<ChainStep>& steps, float* acc, size_t acc_count,
                   bool acc_dead, const weftCompression& spec, weftRedOp_t op, int nranks);

}  // namespace weft
