// Ring pattern shared by the ring reduce-scatter, allgather and allreduce generators.
//
// A ring over p ranks: rank r sends to (r+1) % p and receives from (r-1+p) % p. A buffer of
// `total` elements is cut into p segments (PartOffset/PartSize) and every segment into the same
// number of chunks, so that chunk j of every segment can be pipelined: step s of the ring moves
// chunk j of some segment while chunk j+1 of the previous step is still in flight.
#pragma once

#include <algorithm>

#include "algorithms/schedule.h"

namespace weft {

struct RingLayout {
  int p = 1;
  size_t total = 0;      // elements cut into p segments
  size_t chunks = 1;     // chunks per segment
  int channels = 1;

  RingLayout(int nranks, size_t total_elems, const ChunkPolicy& policy)
      : p(nranks), total(total_elems) {
    size_t largest = PartSize(total, p, 0);
    chunks = NumChunks(largest, policy.chunk_elems);
    channels = std::max(1, policy.channels);
  }
  int Next(int r) const { return (r + 1) % p; }
  int Prev(int r) const { return (r - 1 + p) % p; }
  static int Mod(int a, int p) { return ((a % p) + p) % p; }
  size_t SegOffset(int seg) const { return PartOffset(total, p, seg); }
  size_t SegSize(int seg) const { return PartSize(total, p, seg); }
  // Chunk j of segment seg: offset (relative to the whole buffer) and size.
  size_t ChunkOffset(int seg, size_t j) const {
    return SegOffset(seg) + PartOffset(SegSize(seg), static_cast<int>(chunks), static_cast<int>(j));
  }
  size_t ChunkSize(int seg, size_t j) const {
    return PartSize(SegSize(seg), static_cast<int>(chunks), static_cast<int>(j));
  }
  uint16_t Channel(size_t j) const { return static_cast<uint16_t>(j % channels); }
  // Forwards (a fused step's send: ring step 1 onwards) use their own channels, so that they
  // never queue behind step 0's sends on a stream: a fused forward takes the place of its step
  // in program order, interleaved with step 0's sends, and the receiver takes all step-0
  // messages before any forwarded one.
  uint16_t ForwardChannel(size_t j) const { return static_cast<uint16_t>(channels + j % channels); }
  // The channel ring step s's message of chunk j travels on.
  uint16_t StepChannel(int s, size_t j) const { return s == 0 ? Channel(j) : ForwardChannel(j); }
  // Steps in flight needed so every chunk of one ring step can overlap with the next.
  int Window() const { return static_cast<int>(std::min<size_t>(4 * chunks + 2, 64)); }
};

// Chunking of one block of `n` elements (allgather / reduce-scatter blocks are exactly the
// API count long), shared by the ring allgather and reduce-scatter generators.
struct BlockChunks {
  size_t n = 0;
  size_t chunks = 1;
  int channels = 1;
  BlockChunks(size_t block_elems, const ChunkPolicy& policy)
      : n(block_elems), chunks(NumChunks(block_elems, policy.chunk_elems)),
        channels(std::max(1, policy.channels)) {}
  size_t Offset(size_t j) const { return PartOffset(n, static_cast<int>(chunks), static_cast<int>(j)); }
  size_t Size(size_t j) const { return PartSize(n, static_cast<int>(chunks), static_cast<int>(j)); }
  uint16_t Channel(size_t j) const { return static_cast<uint16_t>(j % channels); }
  // As RingLayout's: step 0's sends on Channel, forwarded messages on their own channels.
  uint16_t ForwardChannel(size_t j) const { return static_cast<uint16_t>(channels + j % channels); }
  uint16_t StepChannel(int s, size_t j) const { return s == 0 ? Channel(j) : ForwardChannel(j); }
  int Window() const { return static_cast<int>(std::min<size_t>(4 * chunks + 2, 64)); }
};

}  // namespace weft
