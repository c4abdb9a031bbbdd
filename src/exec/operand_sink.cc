// Receives streamed into a codec chain's operands (see operand_sink.h).
#include "exec/operand_sink.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/settings.h"
#include "exec/chain_sink.h"

namespace weft {
namespace {

static_assert(OperandSink::kSourceBytes <= kBounceBytes, "a source's buffer comes from the sink pool");

std::atomic<uint64_t> g_started{0}, g_spilled{0};

}  // namespace

bool OperandStreamsEnabled() {
  static const bool enabled = SettingFlagOr("WEFT_STREAM_OPERANDS", true);
  return enabled;
}

std::vector<StreamedOperand> OperandStreamsFor(const std::vector<Step>& steps, const CodecChain& c,
                                               int window) {
  if (!OperandStreamsEnabled()) return {};
  std::vector<StreamedOperand> ops = StreamedOperands(steps, c);
  if (static_cast<int>(ops.size()) >= window) ops.clear();  // they take window slots at once
  return ops;
}

uint64_t OperandStreamsStarted() { return g_started.load(std::memory_order_relaxed); }
uint64_t OperandSourcesSpilled() { return g_spilled.load(std::memory_order_relaxed); }

OperandSink::~OperandSink() {
  for (Input& in : inputs_) GiveSinkBuffer(reinterpret_cast<float*>(in.bounce));
}

void OperandSink::Start(const std::vector<ChainStep>& steps, const std::vector<Source>& sources,
                        float* acc, size_t acc_count, bool acc_dead, const weftCompression& spec,
                        weftRedOp_t op, int nranks) {
  steps_ = steps;  // before planning: the tiles point into steps_
  PlanCodecChain(steps_, acc_count, acc_dead, spec, &tiles_);
  next_ = 0;
  acc_ = acc;
  acc_count_ = acc_count;
  built_ = BuiltChain(steps_, spec);
  acc_dead_ = acc_dead && !built_;  // a built chain's encodes read P whole
  spec_ = &spec;
  op_ = op;
  nranks_ = nranks;
  sources_ = sources;
  // Keep the buffers of a sink restarted with as many sources (the executor's pooled slots).
  for (size_t i = sources.size(); i < inputs_.size(); ++i)
    GiveSinkBuffer(reinterpret_cast<float*>(inputs_[i].bounce));
  inputs_.resize(sources.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Input& in = inputs_[i];
    if (in.bounce == nullptr) in.bounce = reinterpret_cast<unsigned char*>(TakeSinkBuffer());
    in.owner = this;
    in.index = i;
    in.base = in.filled = in.landed = 0;
    in.spilled = in.waiting = false;
  }
  g_started.fetch_add(1, std::memory_order_relaxed);
}

bool OperandSink::AllLanded() const {
  const size_t bytes = acc_count_ * sizeof(float);
  for (const Input& in : inputs_)
    if (in.landed < bytes) return false;
  return true;
}

unsigned char* OperandSink::Input::Space(size_t* room) {
  const size_t bytes = owner->acc_count_ * sizeof(float);
  if (!spilled && filled == kSourceBytes) owner->Compact(*this);
  if (!spilled && filled == kSourceBytes) owner->Spill(*this);  // the transport cannot wait
  if (spilled) {
    *room = bytes - landed;
    return reinterpret_cast<unsigned char*>(owner->sources_[index].memory) + landed;
  }
  *room = std::min(kSourceBytes - filled, bytes - landed);
  return bounce + filled;
}

void OperandSink::Input::Landed(size_t bytes) {
  landed += bytes;
  if (!spilled) filled += bytes;
  waiting = false;
  owner->RunReadyTiles();
}

// Full with the others behind: come back later, for up to kPatience; then spill.
bool OperandSink::Input::Later() {
  if (spilled || kSourceBytes - filled >= kMinPiece) return false;
  owner->Compact(*this);
  if (kSourceBytes - filled >= kMinPiece) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!waiting) {
    waiting = true;
    waiting_since = now;
    return true;
  }
  if (now - waiting_since < owner->patience_) return true;
  owner->Spill(*this);
  return false;
}

// From in.base on, the source's bytes go to (and are read from) the receive's own region.
void OperandSink::Spill(Input& in) {
  std::memcpy(reinterpret_cast<unsigned char*>(sources_[in.index].memory) + in.base, in.bounce,
              in.filled);
  in.spilled = true;
  in.filled = 0;
  g_spilled.fetch_add(1, std::memory_order_relaxed);
}

// Drops the bytes no tile still needs from the front of in's buffer (what later tiles need is
// less than the buffer, and usually less than a tile: the sources land in step).
void OperandSink::Compact(Input& in) {
  if (in.spilled) return;
  const size_t end = in.base + in.filled;
  const size_t whole = end / sizeof(float) * sizeof(float);
  const size_t keep = next_ < tiles_.size() ? std::min(tiles_[next_].at * sizeof(float), whole) : whole;
  if (keep <= in.base) return;
  std::memmove(in.bounce, in.bounce + (keep - in.base), end - keep);
  in.filled = end - keep;
  in.base = keep;
}

// Runs every tile that all sources have landed, each streamed operand read where it is.
void OperandSink::RunReadyTiles() {
  size_t ready = acc_count_ * sizeof(float);
  for (const Input& in : inputs_) ready = std::min(ready, in.landed);
  if (next_ == tiles_.size() || (tiles_[next_].at + tiles_[next_].n) * sizeof(float) > ready) return;
  for (const Input& in : inputs_) {
    ChainStep& s = steps_[sources_[in.index].step];
    s.src = in.spilled ? static_cast<const void*>(sources_[in.index].memory) : in.bounce;
    s.src_at = in.spilled ? 0 : in.base / sizeof(float);
  }
  while (next_ < tiles_.size()) {
    const ChainTile& t = tiles_[next_];
    if ((t.at + t.n) * sizeof(float) > ready) break;
    RunCodecChainTile(steps_, t, acc_ + t.at, acc_, acc_count_, acc_dead_, *spec_, op_, nranks_);
    ++next_;
  }
  if (built_ && next_ == tiles_.size()) EncodeBuiltChain(steps_, acc_, *spec_);
}

}  // namespace weft
