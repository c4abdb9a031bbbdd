// Receives streamed into codec chains (see chain_sink.h).
#include "exec/chain_sink.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "algorithms/step_table.h"
#include "common/settings.h"

namespace weft {
namespace {

std::atomic<uint64_t> g_started{0};

bool SameRegion(const Region& a, const Region& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.count == b.count;
}

}  // namespace

// The pool of TakeSinkBuffer.
thread_local std::vector<std::unique_ptr<float[]>> t_bounces;

float* TakeSinkBuffer() {
  if (t_bounces.empty()) return new float[kBounceBytes / sizeof(float)];
  float* b = t_bounces.back().release();
  t_bounces.pop_back();
  return b;
}

void GiveSinkBuffer(float* b) {
  if (b != nullptr) t_bounces.emplace_back(b);
}

bool StreamedChainsEnabled() {
  static const bool enabled = SettingFlagOr("WEFT_STREAM_RECV_CHAINS", true);
  return enabled;
}

uint64_t StreamedChainsStarted() { return g_started.load(std::memory_order_relaxed); }

bool StreamsIntoChain(const std::vector<Step>& steps, size_t recv, const CodecChain& c) {
  if (recv + 1 != c.first || c.first >= steps.size() || !c.acc_dead || !c.tiled) return false;
  const Step& r = steps[recv];
  const StepOp opener = steps[c.first].op;
  // The opener must read P as it is (a reduce or decode-reduce into P): a copy or decode
  // would overwrite what was received.
  return r.op == StepOp::kRecv && SameRegion(r.dst, c.acc) &&
         (opener == StepOp::kReduce || opener == StepOp::kDecodeReduce);
}

ChainSink::~ChainSink() { GiveSinkBuffer(bounce_); }

void ChainSink::Start(const std::vector<ChainStep>& steps, float* acc, size_t acc_count,
                      const weftCompression& spec, weftRedOp_t op, int nranks) {
  steps_ = steps;  // before planning: the tiles point into steps_
  PlanCodecChain(steps_, acc_count, /*acc_dead=*/true, spec, &tiles_);
  next_ = 0;
  acc_ = acc;
  acc_count_ = acc_count;
  spec_ = &spec;
  op_ = op;
  nranks_ = nranks;
  if (bounce_ == nullptr) bounce_ = TakeSinkBuffer();
  base_ = filled_ = 0;
  g_started.fetch_add(1, std::memory_order_relaxed);
}

unsigned char* ChainSink::Space(size_t* room) {
  // RunLandedTiles leaves less than a tile (16 KiB) plus 3 bytes behind, so room is > 0.
  *room = kBounceBytes - filled_;
  return reinterpret_cast<unsigned char*>(bounce_) + filled_;
}

void ChainSink::Landed(size_t bytes) {
  filled_ += bytes;
  RunLandedTiles();
}

// Runs every tile that has fully landed, then moves what later tiles still need (less than
// one tile) to the front of the buffer.
void ChainSink::RunLandedTiles() {
  const size_t end = base_ + filled_;
  while (next_ < tiles_.size()) {
    const ChainTile& t = tiles_[next_];
    if ((t.at + t.n) * sizeof(float) > end) break;
    const float* cur = bounce_ + (t.at * sizeof(float) - base_) / sizeof(float);
    RunCodecChainTile(steps_, t, cur, acc_, acc_count_, /*acc_dead=*/true, *spec_, op_, nranks_);
    ++next_;
  }
  // Keep from the next tile's first value; values no tile reads (between encodes) go.
  const size_t whole = end / sizeof(float) * sizeof(float);
  const size_t keep = next_ < tiles_.size() ? std::min(tiles_[next_].at * sizeof(float), whole) : whole;
  if (keep <= base_) return;
  unsigned char* b = reinterpret_cast<unsigned char*>(bounce_);
  std::memmove(b, b + (keep - base_), end - keep);
  filled_ = end - keep;
  base_ = keep;
}

}  // namespace weft
