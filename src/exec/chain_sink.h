// A receive streamed into the codec chain that consumes it (issue 39: less work per byte).
//
// The hierarchical compressed allreduce's lane owner receives the member's float32 lane, adds
// its own input and encodes the sum (a codec chain, codec_chain.h). Step by step the received
// lane goes through DRAM twice: the transport writes all of it (for shm, the kernel's
// cross-memory copy), then the chain reads it back. Streamed, the transport writes it piece by
// piece into a 256 KiB buffer that stays in the core's L2, and the chain runs each tile there
// as soon as it has landed: the lane is never stored, and its tiles are reduced and encoded
// while later pieces are still being read from the peer.
//
// The tiles are the chain's own (PlanCodecChain) and each runs RunCodecChainTile on the same
// values as the unstreamed chain, so the result is bitwise the same (tests/codec_chain_test.cc, ChainSink.*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "exec/codec_chain.h"
#include "transports/transport.h"

namespace weft {

// Whether steps[recv] (a receive) may stream into chain c: c opens at recv + 1 by reading
// what the receive wrote (a reduce or decode-reduce into exactly its region), and that region
// is dead after the chain (so its values are never needed in memory). The executor also
// needs a transport that TakesSinks() and that this is on (StreamedChainsEnabled()).
bool StreamsIntoChain(const std::vector<Step>& steps, size_t recv, const CodecChain& c);

// 256 KiB: 16 tiles, inside a core's L2 (512 KiB on the CI machines) beside the input lane's
// tile and the encodings being written; a cross-memory read per 256 KiB costs ~1 us of
// syscall against ~20 us of copy.
inline constexpr size_t kBounceBytes = size_t{256} << 10;
// kBounceBytes of host memory from this thread's pool (a fresh one is an mmap and 64 page
// faults), and back to it: the sinks take one at Start and give it back when destroyed.
float* TakeSinkBuffer();
void GiveSinkBuffer(float* b);

// WEFT_STREAM_RECV_CHAINS (default on; read once).
bool StreamedChainsEnabled();
// Streamed receives started in this process (tests check the path was taken).
uint64_t StreamedChainsStarted();

class ChainSink final : public RecvSink {
 public:
  ChainSink() = default;
  ~ChainSink() override;
  ChainSink(const ChainSink&) = delete;
  ChainSink& operator=(const ChainSink&) = delete;

  // Takes the chain's resolved steps; acc is the chain's (dead) region, whose values arrive.
  void Start(const std::vector<ChainStep>& steps, float* acc, size_t acc_count,
             const weftCompression& spec, weftRedOp_t op, int nranks);
  unsigned char* Space(size_t* room) override;
  void Landed(size_t bytes) override;
  // Every tile ran (the message was whole).
  bool Finished() const { return next_ == tiles_.size(); }

 private:
  void RunLandedTiles();

  std::vector<ChainStep> steps_;
  std::vector<ChainTile> tiles_;  // point into steps_
  size_t next_ = 0;               // the first tile not run
  float* acc_ = nullptr;
  size_t acc_count_ = 0;
  const weftCompression* spec_ = nullptr;
  weftRedOp_t op_ = weftSum;
  int nranks_ = 1;
  float* bounce_ = nullptr;  // kBounceBytes, from a per-thread pool
  size_t base_ = 0;          // byte of the message at bounce_[0] (a multiple of 4)
  size_t filled_ = 0;        // bytes landed in bounce_
};

}  // namespace weft
