// reshard.cc: see reshard.h.
#include "reshard.h"

#include <algorithm>

namespace moe {
namespace {

// Tensor by tensor: the values of a tensor are laid out the same way in every data-parallel
// layout, only where the tensor starts changes.
void Relayout(const ParamLayout& from, const ParamBuffers& src, const ParamLayout& to,
              ParamBuffers* dst) {
  for (const TensorInfo& t : to.tensors()) {
    const TensorInfo& f = from.Get(t.name);
    std::copy(src.Ptr(f), src.Ptr(f) + std::min(f.size, t.size), dst->Ptr(t));
  }
}

}  // namespace

void FullState::Allocate(const ParamLayout& from) {
  layout = from;
  params.Allocate(layout);
  m.Allocate(layout);
  v.Allocate(layout);
}

std::vector<Segment> DataParallelSegments(const ParamLayout& layout, bool zero1, int group,
                                          int rank) {
  std::vector<Segment> segments;
  if (!zero1) {
    if (layout.dense_size() > 0) segments.push_back(Segment{false, 0, layout.dense_size()});
    if (layout.expert_size() > 0) segments.push_back(Segment{true, 0, layout.expert_size()});
    return segments;
  }
  for (const Bucket& b : layout.buckets()) {
    const Shard s = ShardOf(b, group, rank);
    if (s.count > 0) segments.push_back(Segment{b.expert, b.offset + s.begin, s.count});
  }
  return segments;
}

void SegmentsToFull(const std::vector<Segment>& segments, const std::vector<float>& flat,
                    ParamBuffers* full) {
  size_t at = 0;
  for (const Segment& s : segments) {
    float* dst = (s.expert ? full->expert.data() : full->dense.data()) + s.begin;
    std::copy(flat.begin() + at, flat.begin() + at + s.count, dst);
    at += s.count;
  }
}

void FullToSegments(const std::vector<Segment>& segments, const ParamBuffers& full,
                    std::vector<float>* flat) {
  flat->clear();
  for (const Segment& s : segments) {
    const float* src = (s.expert ? full.expert.data() : full.dense.data()) + s.begin;
    flat->insert(flat->end(), src, src + s.count);
  }
}

ParamLayout DataParallelLayout(const TrainConfig& config, int data_ranks) {
  const int pad = BucketPadGroup(config, data_ranks);
  return ParamLayout::Build(config.model, ModelShard(), pad, pad);
}

void Install(const FullState& state, Trainer* trainer) {
  const ParamLayout& to = trainer->model().layout();
  Relayout(state.layout, state.params, to, &trainer->model().params);
  ParamBuffers m, v;
  m.Allocate(to);
  v.Allocate(to);
  Relayout(state.layout, state.m, to, &m);
  Relayout(state.layout, state.v, to, &v);
  AdamW& opt = trainer->optimizer();
  FullToSegments(opt.segments(), m, &opt.m);
  FullToSegments(opt.segments(), v, &opt.v);
  trainer->model().router_bias = state.router_bias;
}

}  // namespace moe
