// Codec chains (see codec_chain.h).
#include "exec/codec_chain.h"

#include <algorithm>
#include <cstring>

#include "algorithms/step_table.h"
#include "common/settings.h"
#include "kernels/codec.h"
#include "kernels/codec_reduce.h"
#include "kernels/reduce.h"

namespace weft {
namespace {

bool SameRegion(const Region& a, const Region& b) {
  return a.buffer == b.buffer && a.offset == b.offset && a.count == b.count;
}
bool Inside(const Region& r, const Region& p) {
  return r.buffer == p.buffer && r.offset >= p.offset && r.offset + r.count <= p.offset + p.count;
}
bool Touches(const Region& r, const Region& p) {
  return r.count > 0 && p.count > 0 && r.buffer == p.buffer && r.offset < p.offset + p.count &&
         p.offset < r.offset + r.count;
}
bool Opens(StepOp op) {
  return op == StepOp::kCopy || op == StepOp::kReduce || op == StepOp::kDecode ||
         op == StepOp::kDecodeReduce;
}
bool Continues(StepOp op) {
  return op == StepOp::kReduce || op == StepOp::kDecodeReduce || op == StepOp::kFinalize;
}
bool Decodes(StepOp op) { return op == StepOp::kDecode || op == StepOp::kDecodeReduce; }

// Whether a step after the chain reads or writes p on this rank.
bool TouchedAfter(const std::vector<Step>& steps, size_t from, const Region& p) {
  for (size_t i = from; i < steps.size(); ++i) {
    const StepRegions g = LocalRegions(steps[i]);
    for (const Region* r : {g.read[0], g.read[1], g.write})
      if (r != nullptr && Touches(*r, p)) return true;
  }
  return false;
}

// Steps [first, end_lead) build P, [end_lead, end) encode parts of it: whether they may run as
// a chain (the tiles of one step never read what a later step's earlier tiles wrote).
bool Chainable(const std::vector<Step>& steps, size_t first, size_t end_lead, size_t end,
               const Region& p, size_t align) {
  bool decodes = false;
  for (size_t i = first; i < end_lead; ++i) {
    decodes = decodes || Decodes(steps[i].op);
    if (steps[i].op != StepOp::kFinalize && Touches(steps[i].src, p)) return false;
  }
  std::vector<std::pair<size_t, size_t>> parts;  // [lo, hi) of each encode inside P
  for (size_t e = end_lead; e < end; ++e) {
    const Region& dst = steps[e].dst;
    if (Touches(dst, p)) return false;
    for (size_t i = first; i < e; ++i)
      if (Touches(dst, steps[i].op == StepOp::kEncode ? steps[i].dst : steps[i].src)) return false;
    const size_t lo = steps[e].src.offset - p.offset, hi = lo + steps[e].src.count;
    // Tiles of P decode on their own only from aligned offsets (an encode's tiles start at
    // its own first value).
    if (decodes && (lo % align != 0 || (hi % align != 0 && hi != p.count))) return false;
    parts.emplace_back(lo, hi);
  }
  std::sort(parts.begin(), parts.end());
  for (size_t k = 1; k < parts.size(); ++k)
    if (parts[k].first < parts[k - 1].second) return false;  // one encode per value
  return true;
}

}  // namespace

bool CodecChainsEnabled() {
  static const bool enabled = SettingFlagOr("WEFT_FUSE_CODEC_STEPS", true);
  return enabled;
}

double CodecChainSpeedup(const ComputeParams& core) {
  return core.dram_copy_gbps > 0 ? std::max(1.0, core.copy_gbps / core.dram_copy_gbps) : 1.0;
}

std::vector<CodecChain> FindCodecChains(const std::vector<Step>& steps,
                                        const weftCompression& spec, bool keep_acc) {
  std::vector<CodecChain> chains;
  const size_t align = codec::EncodeRangeAlignment(spec);
  const bool whole = align == 0;  // top-k: its encodes run whole (FindCodecChains' note)
  for (size_t i = 0; i < steps.size();) {
    const Step& s = steps[i];
    if (!Opens(s.op) || s.dst.buffer != Buffer::kScratch || s.dst.count == 0) {
      ++i;
      continue;
    }
    const Region p = s.dst;
    size_t lead = i + 1;
    while (lead < steps.size() && Continues(steps[lead].op) && SameRegion(steps[lead].dst, p)) ++lead;
    size_t end = lead;
    while (end < steps.size() && steps[end].op == StepOp::kEncode && steps[end].src.count > 0 &&
           Inside(steps[end].src, p))
      ++end;
    // Top-k's forms: a single copy or reduce opens P (no decode, so no alignment applies), or
    // several copies and reduces build it (built: P stored, each encode whole after).
    const bool one_pass = lead == i + 1 && (s.op == StepOp::kCopy || s.op == StepOp::kReduce);
    bool builds = lead > i + 1;
    for (size_t k = i; k < lead && builds; ++k)
      builds = steps[k].op == StepOp::kCopy || steps[k].op == StepOp::kReduce;
    if (end > lead && (!whole || one_pass || builds) && Chainable(steps, i, lead, end, p, align)) {
      CodecChain c;
      c.first = i;
      c.last = end - 1;
      c.acc = p;
      c.built = whole && !one_pass;
      c.acc_dead = !keep_acc && !c.built && !TouchedAfter(steps, end, p);
      c.tiled = !whole;
      if (c.tiled || c.acc_dead || c.built) {
        chains.push_back(c);
        i = end;
        continue;
      }
    }
    i = lead;
  }
  return chains;
}

std::vector<StreamedOperand> StreamedOperands(const std::vector<Step>& steps, const CodecChain& c) {
  std::vector<StreamedOperand> out;
  if (!c.tiled && !c.built) return out;
  std::vector<int> peers;
  for (size_t j = c.first; j-- > 0;) {
    const Step& r = steps[j];
    if (r.op != StepOp::kRecv || r.dst.buffer != Buffer::kScratch || r.dst.count != c.acc.count ||
        Touches(r.dst, c.acc) || std::find(peers.begin(), peers.end(), r.peer) != peers.end())
      break;
    size_t reader = 0, readers = 0;
    bool touched = false;
    for (size_t i = c.first; i <= c.last; ++i) {
      const Step& s = steps[i];
      if ((s.op == StepOp::kCopy || s.op == StepOp::kReduce) && SameRegion(s.src, r.dst)) {
        reader = i;
        ++readers;
      } else if (Touches(s.src, r.dst) || Touches(s.dst, r.dst)) {
        touched = true;
      }
    }
    if (readers != 1 || touched || TouchedAfter(steps, c.last + 1, r.dst)) break;
    peers.push_back(r.peer);
    out.insert(out.begin(), StreamedOperand{j, reader - c.first});
  }
  return out;
}

namespace {

// 16 KiB of float32 per tile: it and a decoded tile stay in L1 between the steps.
constexpr size_t kTileValues = 4096;

// Where a copy's or reduce's source holds value `at` of acc.
const float* SrcAt(const ChainStep& s, size_t at) { return static_cast<const float*>(s.src) + (at - s.src_at); }

// The leading steps on values [at, at + n) of P: from `cur` (what P holds there) into `tile`.
void BuildTile(const std::vector<ChainStep>& steps, const float* cur, size_t at, size_t n,
               size_t acc_count, const weftCompression& spec, weftRedOp_t op, int nranks,
               float* tile, float* decoded) {
  for (const ChainStep& s : steps) {
    switch (s.op) {
      case StepOp::kCopy:
        // With an addend the source reads as src + addend (the float32 sum error feedback's
        // input takes), else as it is.
        if (s.addend != nullptr)
          kernels::Reduce(tile, SrcAt(s, at), s.addend + at, n, weftFloat32, weftSum);
        else std::memcpy(tile, SrcAt(s, at), n * sizeof(float));
        break;
      case StepOp::kReduce:
        if (s.addend != nullptr) {  // the source as it would have been built: src + addend
          kernels::Reduce(decoded, SrcAt(s, at), s.addend + at, n, weftFloat32, weftSum);
          kernels::Reduce(tile, cur, decoded, n, weftFloat32, op);
        } else {
          kernels::Reduce(tile, cur, SrcAt(s, at), n, weftFloat32, op);
        }
        break;
      case StepOp::kDecode:
        codec::DecodeRange(spec, static_cast<const uint8_t*>(s.src), acc_count, at, n, tile);
        break;
      case StepOp::kDecodeReduce:
        if (cur != tile) std::memcpy(tile, cur, n * sizeof(float));
        codec::DecodeReduceRange(spec, static_cast<const uint8_t*>(s.src), acc_count, at, n, op,
                                 tile, decoded);
        break;
      case StepOp::kFinalize:
        if (cur != tile) std::memcpy(tile, cur, n * sizeof(float));
        kernels::Finalize(tile, n, weftFloat32, op, nranks);
        break;
      default:  // encodes: the caller's
        continue;
    }
    cur = tile;
  }
}

}  // namespace

size_t CodecChainTileValues(const weftCompression& spec) {
  const size_t align = codec::EncodeRangeAlignment(spec);
  if (align == 0) return kTileValues;  // a built chain's tiles: no encode cuts them
  return std::max(align, kTileValues / align * align);
}

bool BuiltChain(const std::vector<ChainStep>& steps, const weftCompression& spec) {
  if (codec::EncodeRangeAlignment(spec) != 0) return false;
  size_t leading = 0;
  for (const ChainStep& s : steps) leading += s.op != StepOp::kEncode;
  return leading > 1;
}

void EncodeBuiltChain(const std::vector<ChainStep>& steps, const float* acc, const weftCompression& spec) {
  for (const ChainStep& s : steps) {
    if (s.op != StepOp::kEncode) continue;
    codec::Encode(spec, acc + s.offset, s.count, s.encoded, s.stream);
    if (s.residual != nullptr)
      codec::DroppedIntoResidual(spec, s.encoded, s.count, acc + s.offset, s.feedback, s.feedback_weight,
                                 s.residual);
  }
}

void PlanCodecChain(const std::vector<ChainStep>& steps, size_t acc_count, bool acc_dead,
                    const weftCompression& spec, std::vector<ChainTile>* tiles) {
  tiles->clear();
  const size_t tile_values = CodecChainTileValues(spec);
  if (BuiltChain(steps, spec)) {  // all of P, built and stored; the encodes follow whole
    for (size_t at = 0; at < acc_count; at += tile_values)
      tiles->push_back(ChainTile{at, std::min(tile_values, acc_count - at), nullptr});
    return;
  }
  // Segments of P: each encode's values, and (when P is read later) the values between them.
  std::vector<const ChainStep*> encodes;
  for (const ChainStep& s : steps)
    if (s.op == StepOp::kEncode) encodes.push_back(&s);
  std::sort(encodes.begin(), encodes.end(),
            [](const ChainStep* a, const ChainStep* b) { return a->offset < b->offset; });
  auto cut = [&](size_t lo, size_t hi, const ChainStep* encode) {
    for (size_t at = lo; at < hi; at += tile_values)
      tiles->push_back(ChainTile{at, std::min(tile_values, hi - at), encode});
  };
  size_t at = 0;
  for (const ChainStep* e : encodes) {
    if (!acc_dead && at < e->offset) cut(at, e->offset, nullptr);
    cut(e->offset, e->offset + e->count, e);
    at = e->offset + e->count;
  }
  if (!acc_dead && at < acc_count) cut(at, acc_count, nullptr);
}

void RunCodecChainTile(const std::vector<ChainStep>& steps, const ChainTile& t, const float* cur,
                       float* acc, size_t acc_count, bool acc_dead, const weftCompression& spec,
                       weftRedOp_t op, int nranks) {
  const size_t tile_values = CodecChainTileValues(spec);
  thread_local std::vector<float> tile_buf, decoded_buf;
  if (tile_buf.size() < tile_values) tile_buf.resize(tile_values);
  if (decoded_buf.size() < tile_values) decoded_buf.resize(tile_values);
  float* tile = acc_dead ? tile_buf.data() : acc + t.at;  // written back: P is read later
  BuildTile(steps, cur, t.at, t.n, acc_count, spec, op, nranks, tile, decoded_buf.data());
  const ChainStep* encode = t.encode;
  if (encode == nullptr) return;
  const size_t first = t.at - encode->offset;
  codec::EncodeRange(spec, tile, encode->count, first, t.n, encode->encoded, encode->stream);
  if (encode->residual != nullptr)  // the tile and its codes are still in L1
    codec::DroppedIntoResidualRange(spec, encode->encoded, encode->count, first, t.n, tile,
                                    encode->feedback, encode->feedback_weight,
                                    encode->residual + first);
}

namespace {

// A chain of whole encodes (top-k): steps[0] builds P (a copy or reduce), the rest encode
// parts of it. Each encode reads its values' inputs once, the sums added as they are read;
// where that does not apply (a reduction other than sum, three operands, error feedback,
// the selection's sampling misjudged) its part of P is built as the step would build it and
// encoded from there.
void RunWholeEncodes(const std::vector<ChainStep>& steps, float* acc, size_t acc_count,
                     const weftCompression& spec, weftRedOp_t op, int nranks) {
  const ChainStep& open = steps.front();
  thread_local std::vector<float> addend_sum;
  for (size_t e = 1; e < steps.size(); ++e) {
    const ChainStep& s = steps[e];
    const float* src = static_cast<const float*>(open.src) + s.offset;
    const float* addend = open.addend != nullptr ? open.addend + s.offset : nullptr;
    float* part = acc + s.offset;
    const bool copy = open.op == StepOp::kCopy;
    // The one pass over the two operands P's part would be the sum of: src + addend (a copy
    // with an addend) or part + src (a sum's reduce); false where it does not apply.
    auto encoded_in_one_pass = [&] {
      if (s.residual != nullptr) return false;
      if (copy) return codec::EncodeOfSum(spec, src, addend, s.count, s.encoded);
      return op == weftSum && addend == nullptr && codec::EncodeOfSum(spec, part, src, s.count, s.encoded);
    };
    const float* values = part;  // where the encode reads its values
    if (copy && addend == nullptr) {
      values = src;  // P would be a copy of src: encode src itself
    } else if (encoded_in_one_pass()) {
      continue;
    } else {
      if (!copy && addend != nullptr && addend_sum.size() < s.count) addend_sum.resize(s.count);
      BuildTile({open}, part, s.offset, s.count, acc_count, spec, op, nranks, part, addend_sum.data());
    }
    codec::Encode(spec, values, s.count, s.encoded, s.stream);
    if (s.residual != nullptr)
      codec::DroppedIntoResidual(spec, s.encoded, s.count, values, s.feedback, s.feedback_weight,
                                 s.residual);
  }
}

}  // namespace

void RunCodecChain(const std::vector<ChainStep>& steps, float* acc, size_t acc_count,
                   bool acc_dead, const weftCompression& spec, weftRedOp_t op, int nranks) {
  const bool built = BuiltChain(steps, spec);
  if (codec::EncodeRangeAlignment(spec) == 0 && !built) {  // the one-pass form
    RunWholeEncodes(steps, acc, acc_count, spec, op, nranks);
    return;
  }
  if (built) acc_dead = false;  // the encodes read P whole
  thread_local std::vector<ChainTile> tiles;
  PlanCodecChain(steps, acc_count, acc_dead, spec, &tiles);
  for (const ChainTile& t : tiles)
    RunCodecChainTile(steps, t, acc + t.at, acc, acc_count, acc_dead, spec, op, nranks);
  if (built) EncodeBuiltChain(steps, acc, spec);
}

}  // namespace weft
