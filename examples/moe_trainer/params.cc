// params.cc: building the parameter layout (tensors, buckets, padding) and initializing values.
#include "params.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "rng.h"

namespace moe {

void ParamLayout::Add(const std::string& name, std::vector<int> shape, bool expert,
                      float init_std, TpSplit split, int parts) {
  TensorInfo t;
  t.name = name;
  t.split = shard_.tp_size > 1 ? split : TpSplit::kNone;
  t.parts = parts;
  if (t.split == TpSplit::kColumns) shape.back() /= shard_.tp_size;
  if (t.split == TpSplit::kRows) shape[shape.size() - 2] /= shard_.tp_size;
  t.shape = std::move(shape);
  t.expert = expert;
  t.init_std = init_std;
  t.decay = init_std != 0.0f;
  t.size = 1;
  for (int d : t.shape) t.size *= static_cast<size_t>(d);
  size_t& end = expert ? expert_size_ : dense_size_;
  t.offset = end;
  end += t.size;
  t.bucket = static_cast<int>(buckets_.size());  // the bucket being filled
  tensors_.push_back(t);
}

// Ends the bucket being filled in one buffer: pads it to a multiple of pad_multiple * 16 floats
// (64-byte aligned shards; BucketPadGroup says when the shards must also be equal).
void ParamLayout::CloseBucket(bool expert, int pad_multiple) {
  size_t& end = expert ? expert_size_ : dense_size_;
  size_t start = 0;
  for (const Bucket& b : buckets_)
    if (b.expert == expert) start = b.offset + b.count;
  const size_t unit = static_cast<size_t>(pad_multiple) * 16;
  size_t count = end - start;
  count = (count + unit - 1) / unit * unit;
  end = start + count;
  buckets_.push_back(Bucket{expert, start, count});
}

ParamLayout ParamLayout::Build(const ModelConfig& m, const ModelShard& shard, int dense_pad,
                               int expert_pad) {
  ParamLayout p;
  p.shard_ = shard;
  p.local_experts_ = m.experts / shard.ep_size;
  p.first_local_expert_ = shard.ep_rank * p.local_experts_;
  p.first_layer_ = shard.FirstLayer(m);
  const int C = m.dim, F = m.expert_hidden, Fs = m.SharedHidden(), E = p.local_experts_;
  const float out_std = 0.02f / std::sqrt(2.0f * m.layers);  // residual projections (GPT-2)
  if (shard.HasEmbedding()) {
    p.Add("embed", {m.vocab, C}, false, 0.02f);
    p.embed_bucket_ = 0;
    p.CloseBucket(false, dense_pad);
  }
  for (int l = p.first_layer_; l < shard.EndLayer(m); ++l) {
    const std::string pre = "l" + std::to_string(l) + ".";
    p.Add(pre + "attn_norm", {C}, false, 0.0f);
    p.Add(pre + "wqkv", {C, 3 * C}, false, 0.02f, TpSplit::kColumns, 3);  // heads split
    p.Add(pre + "wo", {C, C}, false, out_std, TpSplit::kRows);
    p.Add(pre + "moe_norm", {C}, false, 0.0f);
    p.Add(pre + "router", {C, m.experts}, false, 0.02f);
    if (Fs > 0) {
      p.Add(pre + "shared_w1", {C, Fs}, false, 0.02f, TpSplit::kColumns);
      p.Add(pre + "shared_w3", {C, Fs}, false, 0.02f, TpSplit::kColumns);
      p.Add(pre + "shared_w2", {Fs, C}, false, out_std, TpSplit::kRows);
    }
    p.layer_dense_bucket_.push_back(static_cast<int>(p.buckets_.size()));
    p.CloseBucket(false, dense_pad);
    p.Add(pre + "expert_w1", {E, C, F}, true, 0.02f);
    p.Add(pre + "expert_w3", {E, C, F}, true, 0.02f);
    p.Add(pre + "expert_w2", {E, F, C}, true, out_std);
    p.layer_expert_bucket_.push_back(static_cast<int>(p.buckets_.size()));
    p.CloseBucket(true, expert_pad);
  }
  if (shard.HasHead()) {
    p.Add("final_norm", {C}, false, 0.0f);
    p.Add("lm_head", {C, m.vocab}, false, 0.02f, TpSplit::kColumns);  // vocabulary split
    p.head_bucket_ = static_cast<int>(p.buckets_.size());
    p.CloseBucket(false, dense_pad);
  }
  return p;
}

namespace {
constexpr size_t kShardUnit = 16;  // floats: 64-byte aligned shards
}  // namespace

Shard ShardOf(const Bucket& b, int group, int rank) {
  const size_t units = (b.count + kShardUnit - 1) / kShardUnit;
  const size_t base = units / group, extra = units % group, r = rank;
  Shard s;
  s.begin = std::min(b.count, (r * base + std::min(r, extra)) * kShardUnit);
  s.count = std::min(b.count, s.begin + (base + (r < extra ? 1 : 0)) * kShardUnit) - s.begin;
  return s;
}

void ShardTable(const Bucket& b, int group, std::vector<size_t>* counts,
                std::vector<size_t>* displs) {
  counts->resize(group);
  displs->resize(group);
  for (int r = 0; r < group; ++r) {
    const Shard s = ShardOf(b, group, r);
    (*counts)[r] = s.count, (*displs)[r] = s.begin;
  }
}

int BucketPadGroup(const TrainConfig& config, int group) {
  return config.zero1 && !config.compress.empty() ? group : 1;
}

const TensorInfo* ParamLayout::Find(const std::string& name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& ParamLayout::Get(const std::string& name) const {
  const TensorInfo* t = Find(name);
  if (t == nullptr) throw std::logic_error("no parameter named " + name);  // a programming error
  return *t;
}

void ParamBuffers::Allocate(const ParamLayout& layout) {
  dense.assign(layout.dense_size(), 0.0f);
  expert.assign(layout.expert_size(), 0.0f);
}

void ParamBuffers::Zero() {
  std::fill(dense.begin(), dense.end(), 0.0f);
  std::fill(expert.begin(), expert.end(), 0.0f);
}

namespace {
// Element index in the whole tensor of element i of this rank's part of a split one.
size_t WholeIndex(const TensorInfo& t, const ModelShard& shard, size_t i) {
  const size_t cols = t.shape.back();
  const size_t row = i / cols, col = i % cols;
  const size_t tp = shard.tp_size, r = shard.tp_rank;
  if (t.split == TpSplit::kRows)  // rows r*R .. (r+1)*R of the whole; same columns
    return (r * (t.shape[t.shape.size() - 2]) + row) * cols + col;
  // Columns: each of `parts` blocks of the whole (block width cols/parts*tp) gives slice r.
  const size_t local_block = cols / t.parts, whole_cols = cols * tp;
  const size_t part = col / local_block, j = col % local_block;
  return row * whole_cols + part * local_block * tp + r * local_block + j;
}
}  // namespace

void InitParams(const ParamLayout& layout, uint64_t seed, ParamBuffers* params) {
  params->Zero();  // padding stays zero
  for (const TensorInfo& t : layout.tensors()) {
    float* p = params->Ptr(t);
    if (t.init_std == 0.0f) {
      std::fill(p, p + t.size, 1.0f);
      continue;
    }
    if (t.split != TpSplit::kNone) {  // never an expert tensor
      const uint64_t stream = HashString(t.name);
      for (size_t i = 0; i < t.size; ++i)
        p[i] = static_cast<float>(t.init_std * Normal(seed, stream, WholeIndex(t, layout.shard(), i)));
      continue;
    }
    // Expert tensors: one random stream per global expert, so sharding does not matter.
    const size_t experts = t.expert ? static_cast<size_t>(t.shape[0]) : 1;
    const size_t per_expert = t.size / experts;
    for (size_t e = 0; e < experts; ++e) {
      std::string stream_name = t.name;
      if (t.expert) stream_name += "#" + std::to_string(layout.first_local_expert() + e);
      const uint64_t stream = HashString(stream_name);
      for (size_t i = 0; i < per_expert; ++i)
        p[e * per_expert + i] = static_cast<float>(t.init_std * Normal(seed, stream, i));
    }
  }
}

}  // namespace moe
