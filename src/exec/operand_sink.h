// Receives streamed into a codec chain's operands (issue 39: hosts of three and more ranks).
//
// The hierarchical compressed allreduce's lane owner on a host of L >= 3 ranks receives the
// L - 1 other members' float32 lanes into scratch, then a chain sums them with its own lane in
// group order and encodes the sum tile by tile (algorithms/allreduce_compressed_hierarchical.cc
// phase 1, codec_chain.h). Step by step each received lane goes through DRAM twice: the
// kernel's cross-memory copy writes it, the chain reads it back. On the 2 hosts x 4 harness
// that is 96 MiB of a rank's ~230 MiB of memory traffic per 64 MiB call, on a machine whose
// eight ranks are bound by the memory bus.
//
// Streamed, each member's lane lands piece by piece in a buffer of its own that stays in the
// cache (a source), and the chain runs a tile as soon as every source has landed it: the lanes
// are never stored. The chain's steps and tiles are the unstreamed chain's, only a streamed
// operand is read from its source's buffer, so the result is bitwise the same
// (tests/codec_chain_test.cc, OperandSink.*). Top-k's chain (CodecChain::built) streams the
// same way into P, then encodes it whole after the last tile.
//
// The sources are separate peers whose senders run when the kernel lets them: when one lags
// (its process is off the core), the others' buffers fill and their transport is asked to
// come back later (RecvSink::Later), for up to kPatience. After that, or where a transport
// cannot wait (bytes it already holds), a source spills: what it has buffered and all it
// receives later go to the receive's own region in memory, which the tiles then read, as the
// unstreamed chain does. So the sink never waits on one peer for another's sake for long, and
// a schedule in which one source's sender waits for another's receive still completes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "exec/codec_chain.h"
#include "transports/transport.h"

namespace weft {

// WEFT_STREAM_OPERANDS (default on; read once). The executor also needs streamed chains on
// (StreamedChainsEnabled) and a transport that TakesSinks().
bool OperandStreamsEnabled();
// The receives the executor streams into chain c's operands (StreamedOperands), where it does:
// with operand streams on and a window that holds all of them at once (the executor and the
// simulator both ask this). Empty: the steps run one by one.
std::vector<StreamedOperand> OperandStreamsFor(const std::vector<Step>& steps, const CodecChain& c,
                                               int window);
// Tests and logs: operand streams started, and sources that spilled, in this process.
uint64_t OperandStreamsStarted();
uint64_t OperandSourcesSpilled();

class OperandSink {
 public:
  // How long a full source waits for the others before it spills.
  static constexpr std::chrono::milliseconds kPatience{20};
  // Each source's buffer: three of them and the chain's tile stay in a 1 MiB L2.
  static constexpr size_t kSourceBytes = size_t{256} << 10;
  // A source with less free room than this asks for later instead of reading a sliver (each
  // read is a system call that pins the sender's pages).
  static constexpr size_t kMinPiece = size_t{64} << 10;

  struct Source {
    size_t step = 0;           // the chain step (index into the steps) that reads it
    float* memory = nullptr;   // the receive's own region (acc_count values): where it spills
  };

  OperandSink() = default;
  ~OperandSink();
  OperandSink(const OperandSink&) = delete;
  OperandSink& operator=(const OperandSink&) = delete;

  // Takes the chain's resolved steps (acc as in RunCodecChain) and its streamed operands.
  void Start(const std::vector<ChainStep>& steps, const std::vector<Source>& sources, float* acc,
             size_t acc_count, bool acc_dead, const weftCompression& spec, weftRedOp_t op,
             int nranks);
  // Where source i's receive puts its bytes (valid until the next Start).
  RecvSink* source(size_t i) { return &inputs_[i]; }
  size_t sources() const { return inputs_.size(); }
  // Every source has landed all its bytes, and so every tile ran.
  bool Finished() const { return next_ == tiles_.size(); }
  bool AllLanded() const;
  // Tests: another patience than kPatience (kept across Start).
  void set_patience(std::chrono::microseconds p) { patience_ = p; }

 private:
  struct Input final : RecvSink {
    OperandSink* owner = nullptr;
    size_t index = 0;
    unsigned char* bounce = nullptr;  // kSourceBytes, from a per-thread pool
    size_t base = 0;                  // byte of the message at bounce[0] (a multiple of 4)
    size_t filled = 0;                // bytes held in bounce from base on
    size_t landed = 0;                // bytes of the message landed in all
    bool spilled = false;             // from base on, the bytes are in memory
    std::chrono::steady_clock::time_point waiting_since{};
    bool waiting = false;
    unsigned char* Space(size_t* room) override;
    void Landed(size_t bytes) override;
    bool Later() override;
  };
  void Spill(Input& in);
  void RunReadyTiles();
  void Compact(Input& in);

  std::vector<ChainStep> steps_;
  std::vector<Source> sources_;
  std::vector<Input> inputs_;
  std::vector<ChainTile> tiles_;  // point into steps_
  size_t next_ = 0;               // the first tile not run
  float* acc_ = nullptr;
  size_t acc_count_ = 0;
  bool acc_dead_ = false;
  bool built_ = false;  // BuiltChain: the encodes run whole after the last tile
  const weftCompression* spec_ = nullptr;
  weftRedOp_t op_ = weftSum;
  int nranks_ = 1;
  std::chrono::microseconds patience_ = kPatience;
};

}  // namespace weft
