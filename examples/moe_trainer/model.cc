// model.cc: forward and backward of the whole model, layer by layer. Backward reports each
// parameter bucket the moment its gradients are final (head first, then layers from the top,
// embedding last) so the data-parallel reduction overlaps the rest of backward.
#include "model.h"

#include <cstring>

#include "blas.h"

namespace moe {

namespace {
std::string LayerName(int l, const char* name) { return "l" + std::to_string(l) + "." + name; }

void Add(const float* a, const float* b, float* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace

Model::Model(const ModelConfig& config, const ParamLayout& layout)
    : config_(config), layout_(layout), shard_(layout.shard()) {
  params.Allocate(layout_);
  grads.Allocate(layout_);
  router_bias.assign(config_.layers, std::vector<float>(config_.experts, 0.0f));
  rope_ = MakeRopeTable(config_.seq_len, config_.HeadDim(), config_.rope_base);
  first_layer_ = shard_.FirstLayer(config_);
  end_layer_ = shard_.EndLayer(config_);
  tp_dim_ = config_.dim / shard_.tp_size;
  tp_heads_ = config_.heads / shard_.tp_size;
  tp_vocab_ = config_.vocab / shard_.tp_size;
  UseSlot(0);
}

void Model::UseSlot(int slot) {
  if (static_cast<int>(slots_.size()) <= slot) slots_.resize(slot + 1);
  slot_ = &slots_[slot];
  slot_->layers.resize(end_layer_ - first_layer_);
}

void Model::Resize(int N) {
  const size_t C = config_.dim, Ct = tp_dim_, H = HeldTokens(N);
  for (LayerActivations& a : slot_->layers) {
    a.x_in.resize(H * C), a.xn1.resize(N * C), a.rstd1.resize(H), a.qkv.resize(N * 3 * Ct);
    a.probs.resize(static_cast<size_t>(N) * tp_heads_ * config_.seq_len);
    a.att_out.resize(N * Ct), a.x_mid.resize(H * C), a.xn2.resize(N * C), a.rstd2.resize(H);
  }
  slot_->x_final.resize(H * C), slot_->xf.resize(N * C), slot_->rstd_f.resize(H);
  if (shard_.HasHead()) slot_->logits.resize(static_cast<size_t>(N) * config_.vocab);
  dx_.resize(H * C), dxn_.resize(N * C), d_att_.resize(N * Ct), dqkv_.resize(N * 3 * Ct);
  moe_out_.resize(H * C);
  if (H < static_cast<size_t>(N)) full_.resize(N * C), norm_dw_.resize(2 * C);
}

Status Model::AddNormGrads(const std::vector<const char*>& names) {
  const size_t C = config_.dim;
  MOE_RETURN_IF_ERROR(tp_->AllReduceSum(norm_dw_.data(), names.size() * C));
  for (size_t i = 0; i < names.size(); ++i) {
    float* g = G(names[i]);
    for (size_t c = 0; c < C; ++c) g[c] += norm_dw_[i * C + c];
  }
  return Status();
}

Status Model::GatherOutputGrad(int N, const float** full) {
  *full = dx_.data();
  const HeldRows held = RowsHeld(tp_, N);
  if (held.count == N) return Status();
  const size_t C = config_.dim;
  std::memcpy(&full_[held.first * C], dx_.data(), held.count * C * sizeof(float));
  *full = full_.data();
  return GatherHeldRows(tp_, full_.data(), N, config_.dim);
}

MoeWeights Model::LayerMoeWeights(int l) const {
  MoeWeights w{};
  w.router = P(LayerName(l, "router"));
  w.shared_hidden = config_.SharedHidden() / shard_.tp_size;
  if (config_.SharedHidden() > 0)
    w.shared = SwigluWeights{P(LayerName(l, "shared_w1")), P(LayerName(l, "shared_w3")),
                             P(LayerName(l, "shared_w2"))};
  w.expert_w1 = P(LayerName(l, "expert_w1"));
  w.expert_w3 = P(LayerName(l, "expert_w3"));
  w.expert_w2 = P(LayerName(l, "expert_w2"));
  w.local_experts = layout_.local_experts();
  return w;
}

MoeGrads Model::LayerMoeGrads(int l) {
  MoeGrads g{};
  g.router = G(LayerName(l, "router"));
  if (config_.SharedHidden() > 0)
    g.shared = SwigluGrads{G(LayerName(l, "shared_w1")), G(LayerName(l, "shared_w3")),
                           G(LayerName(l, "shared_w2"))};
  g.expert_w1 = G(LayerName(l, "expert_w1"));
  g.expert_w3 = G(LayerName(l, "expert_w3"));
  g.expert_w2 = G(LayerName(l, "expert_w2"));
  return g;
}

// With tensor parallelism the attention is this rank's heads: wqkv's columns for them
// (column-parallel), wo's rows for them (row-parallel), and the partial outputs summed over
// the group before the residual add. The norms and residual adds run on the held rows (all
// of them, or this rank's run with sequence parallelism, gathered before each block).
Status Model::LayerForward(int l, int sequences, const LossScale& scale,
                           ExpertExchange* exchange, float* x_out) {
  const ModelConfig& m = config_;
  const int N = sequences * m.seq_len, C = m.dim, Ct = tp_dim_;
  const HeldRows held = RowsHeld(tp_, N);
  const long H = held.count, first = static_cast<long>(held.first) * C;
  LayerActivations& a = Acts(l);
  RmsNormForward(a.x_in.data(), P(LayerName(l, "attn_norm")), a.xn1.data() + first,
                 a.rstd1.data(), H, C, m.norm_eps);
  MOE_RETURN_IF_ERROR(GatherHeldRows(tp_, a.xn1.data(), N, C));
  Matmul(a.xn1.data(), Trans::kNo, P(LayerName(l, "wqkv")), Trans::kNo, a.qkv.data(), N, 3 * Ct,
         C, false);
  RopeForward(a.qkv.data(), N, Ct, tp_heads_, rope_);
  AttentionForward(a.qkv.data(), a.probs.data(), a.att_out.data(), sequences, m.seq_len, Ct,
                   tp_heads_);
  float* projected = H == N ? a.x_mid.data() : full_.data();  // every row, partial over TP
  Matmul(a.att_out.data(), Trans::kNo, P(LayerName(l, "wo")), Trans::kNo, projected, N, C, Ct,
         false);
  float* attended = nullptr;
  MOE_RETURN_IF_ERROR(ReduceToHeldRows(tp_, projected, N, C, &attended));
  Add(a.x_in.data(), attended, a.x_mid.data(), H * C);
  RmsNormForward(a.x_mid.data(), P(LayerName(l, "moe_norm")), a.xn2.data() + first,
                 a.rstd2.data(), H, C, m.norm_eps);
  MOE_RETURN_IF_ERROR(GatherHeldRows(tp_, a.xn2.data(), N, C));
  MOE_RETURN_IF_ERROR(MoeForward(m, LayerMoeWeights(l), a.xn2.data(), sequences,
                                 router_bias[l].data(), scale, exchange, &a.moe, moe_out_.data(),
                                 tp_));
  Add(a.x_mid.data(), moe_out_.data(), x_out, H * C);
  return Status();
}

// The LM head is vocabulary-parallel: each tensor-parallel rank computes the logits of its
// slice of the vocabulary, and an all-gather assembles every token's full row, so the
// cross-entropy (and its gradient) is computed whole on every rank.
Status Model::HeadForward(const Batch& batch, const LossScale& scale, ForwardResult* result) {
  const ModelConfig& m = config_;
  const int N = batch.sequences * m.seq_len, C = m.dim, V = m.vocab, Vt = tp_vocab_;
  StageActivations& s = *slot_;
  const HeldRows held = RowsHeld(tp_, N);
  RmsNormForward(s.x_final.data(), P("final_norm"), s.xf.data() + static_cast<long>(held.first) * C,
                 s.rstd_f.data(), held.count, C, m.norm_eps);
  MOE_RETURN_IF_ERROR(GatherHeldRows(tp_, s.xf.data(), N, C));
  if (tp_ == nullptr) {
    Matmul(s.xf.data(), Trans::kNo, P("lm_head"), Trans::kNo, s.logits.data(), N, V, C, false);
  } else {
    const int T = tp_->size();
    std::vector<float> part(static_cast<size_t>(N) * Vt);
    s.logits_part.resize(part.size() * T);
    Matmul(s.xf.data(), Trans::kNo, P("lm_head"), Trans::kNo, part.data(), N, Vt, C, false);
    MOE_RETURN_IF_ERROR(tp_->AllGather(part.data(), s.logits_part.data(), part.size()));
    for (int r = 0; r < T; ++r)  // [T, N, V/T] -> [N, V]
      for (int t = 0; t < N; ++t)
        std::memcpy(&s.logits[static_cast<size_t>(t) * V + r * Vt],
                    &s.logits_part[(static_cast<size_t>(r) * N + t) * Vt], Vt * sizeof(float));
  }
  s.dlogits.resize(s.logits.size());
  result->ce_loss = CrossEntropy(s.logits.data(), batch.targets.data(), N, V, scale,
                                 s.dlogits.data());
  return Status();
}

Status Model::Forward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                      ForwardResult* result, const float* x_in) {
  const ModelConfig& m = config_;
  const int N = batch.sequences * m.seq_len, C = m.dim;
  const HeldRows held = RowsHeld(tp_, N);
  Resize(N);
  float* x0 = slot_->layers.empty() ? slot_->x_final.data() : Acts(first_layer_).x_in.data();
  if (shard_.HasEmbedding()) {
    const float* embed = P("embed");
    for (int t = 0; t < held.count; ++t)
      std::memcpy(x0 + static_cast<size_t>(t) * C,
                  embed + static_cast<long>(batch.inputs[held.first + t]) * C, C * sizeof(float));
  } else {
    std::memcpy(x0, x_in, sizeof(float) * held.count * C);
  }
  *result = ForwardResult();
  result->selected.assign(static_cast<size_t>(m.layers) * m.experts, 0.0);
  for (int l = first_layer_; l < end_layer_; ++l) {
    float* x_out = l + 1 < end_layer_ ? Acts(l + 1).x_in.data() : slot_->x_final.data();
    MOE_RETURN_IF_ERROR(LayerForward(l, batch.sequences, scale, exchange, x_out));
    const RouterOutput& r = Acts(l).moe.router;
    result->aux_loss += r.aux_loss;
    result->z_loss += r.z_loss;
    for (int e = 0; e < m.experts; ++e) result->selected[l * m.experts + e] = r.selected[e];
  }
  return shard_.HasHead() ? HeadForward(batch, scale, result) : Status();
}

Status Model::LayerBackward(int l, int sequences, const LossScale& scale,
                            ExpertExchange* exchange) {
  const ModelConfig& m = config_;
  const int N = sequences * m.seq_len, C = m.dim, Ct = tp_dim_;
  const int H = HeldTokens(N);
  const bool sequence = H < N;  // norms' weight gradients: partial here, summed below
  if (sequence) std::fill(norm_dw_.begin(), norm_dw_.end(), 0.0f);
  LayerActivations& a = Acts(l);
  // MoE branch: dx (gradient of the block output) flows to the residual and into the MoE.
  const float* d_out = nullptr;
  MOE_RETURN_IF_ERROR(GatherOutputGrad(N, &d_out));
  MOE_RETURN_IF_ERROR(MoeBackward(m, LayerMoeWeights(l), a.xn2.data(), sequences, scale, exchange,
                                  d_out, &a.moe, dxn_.data(), LayerMoeGrads(l), tp_));
  RmsNormBackward(a.x_mid.data(), P(LayerName(l, "moe_norm")), a.rstd2.data(), dxn_.data(),
                  dx_.data(), sequence ? &norm_dw_[0] : G(LayerName(l, "moe_norm")), H, C);
  // Attention branch.
  MOE_RETURN_IF_ERROR(GatherOutputGrad(N, &d_out));
  Matmul(a.att_out.data(), Trans::kYes, d_out, Trans::kNo, G(LayerName(l, "wo")), Ct, C, N, true);
  Matmul(d_out, Trans::kNo, P(LayerName(l, "wo")), Trans::kYes, d_att_.data(), N, Ct, C, false);
  AttentionBackward(a.qkv.data(), a.probs.data(), d_att_.data(), dqkv_.data(), sequences,
                    m.seq_len, Ct, tp_heads_);
  RopeBackward(dqkv_.data(), N, Ct, tp_heads_, rope_);
  Matmul(a.xn1.data(), Trans::kYes, dqkv_.data(), Trans::kNo, G(LayerName(l, "wqkv")), C, 3 * Ct,
         N, true);
  Matmul(dqkv_.data(), Trans::kNo, P(LayerName(l, "wqkv")), Trans::kYes, dxn_.data(), N, C,
         3 * Ct, false);
  float* d_norm = nullptr;  // this rank's heads' part, summed over the group
  MOE_RETURN_IF_ERROR(ReduceToHeldRows(tp_, dxn_.data(), N, C, &d_norm));
  RmsNormBackward(a.x_in.data(), P(LayerName(l, "attn_norm")), a.rstd1.data(), d_norm, dx_.data(),
                  sequence ? &norm_dw_[C] : G(LayerName(l, "attn_norm")), H, C);
  if (!sequence) return Status();
  const std::string moe_norm = LayerName(l, "moe_norm"), attn_norm = LayerName(l, "attn_norm");
  return AddNormGrads({moe_norm.c_str(), attn_norm.c_str()});
}

// Head: logits = xf lm_head; xf = rmsnorm(x_final). dx_ is the gradient of x_final after.
Status Model::HeadBackward(int N) {
  const ModelConfig& m = config_;
  const int C = m.dim, V = m.vocab, Vt = tp_vocab_;
  StageActivations& s = *slot_;
  const float* dlogits = s.dlogits.data();
  std::vector<float> part;
  if (tp_ != nullptr) {  // this rank's vocabulary columns of the (whole) logits' gradient
    part.resize(static_cast<size_t>(N) * Vt);
    for (int t = 0; t < N; ++t)
      std::memcpy(&part[static_cast<size_t>(t) * Vt],
                  &s.dlogits[static_cast<size_t>(t) * V + tp_->rank() * Vt], Vt * sizeof(float));
    dlogits = part.data();
  }
  Matmul(s.xf.data(), Trans::kYes, dlogits, Trans::kNo, G("lm_head"), C, Vt, N, true);
  Matmul(dlogits, Trans::kNo, P("lm_head"), Trans::kYes, dxn_.data(), N, C, Vt, false);
  float* d_norm = nullptr;
  MOE_RETURN_IF_ERROR(ReduceToHeldRows(tp_, dxn_.data(), N, C, &d_norm));
  std::fill(dx_.begin(), dx_.end(), 0.0f);
  const int H = HeldTokens(N);
  if (H == N) {
    RmsNormBackward(s.x_final.data(), P("final_norm"), s.rstd_f.data(), d_norm, dx_.data(),
                    G("final_norm"), N, C);
    return Status();
  }
  std::fill(norm_dw_.begin(), norm_dw_.end(), 0.0f);
  RmsNormBackward(s.x_final.data(), P("final_norm"), s.rstd_f.data(), d_norm, dx_.data(),
                  norm_dw_.data(), H, C);
  return AddNormGrads({"final_norm"});
}

Status Model::Backward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                       const std::function<Status(int bucket)>& bucket_done, const float* dy) {
  const ModelConfig& m = config_;
  const int N = batch.sequences * m.seq_len, C = m.dim;
  if (shard_.HasHead()) {
    MOE_RETURN_IF_ERROR(HeadBackward(N));
    MOE_RETURN_IF_ERROR(bucket_done(layout_.HeadBucket()));
  } else {
    std::memcpy(dx_.data(), dy, sizeof(float) * HeldTokens(N) * C);
  }
  for (int l = end_layer_ - 1; l >= first_layer_; --l) {
    MOE_RETURN_IF_ERROR(LayerBackward(l, batch.sequences, scale, exchange));
    MOE_RETURN_IF_ERROR(bucket_done(layout_.LayerExpertBucket(l)));
    MOE_RETURN_IF_ERROR(bucket_done(layout_.LayerDenseBucket(l)));
  }
  if (!shard_.HasEmbedding()) return Status();
  // Every token's gradient (gathered with sequence parallelism), so the embedding's gradient
  // is whole and the same on every tensor-parallel rank.
  const float* d_x0 = nullptr;
  MOE_RETURN_IF_ERROR(GatherOutputGrad(N, &d_x0));
  float* d_embed = G("embed");
  for (int t = 0; t < N; ++t) {  // in token order: reproducible sums for repeated bytes
    float* row = d_embed + static_cast<long>(batch.inputs[t]) * C;
    const float* d = d_x0 + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) row[c] += d[c];
  }
  return bucket_done(layout_.EmbedBucket());
}

}  // namespace moe
