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
    : config_(config), layout_(layout) {
  params.Allocate(layout_);
  grads.Allocate(layout_);
  router_bias.assign(config_.layers, std::vector<float>(config_.experts, 0.0f));
  rope_ = MakeRopeTable(config_.seq_len, config_.HeadDim(), config_.rope_base);
  acts_.resize(config_.layers);
}

void Model::Resize(int N) {
  const size_t C = config_.dim;
  for (LayerActivations& a : acts_) {
    a.x_in.resize(N * C), a.xn1.resize(N * C), a.rstd1.resize(N), a.qkv.resize(N * 3 * C);
    a.probs.resize(static_cast<size_t>(N) * config_.heads * config_.seq_len);
    a.att_out.resize(N * C), a.x_mid.resize(N * C), a.xn2.resize(N * C), a.rstd2.resize(N);
  }
  x_final.resize(N * C), xf_.resize(N * C), rstd_f_.resize(N);
  logits_.resize(static_cast<size_t>(N) * config_.vocab);
  dx_.resize(N * C), dxn_.resize(N * C), d_att_.resize(N * C), dqkv_.resize(N * 3 * C);
  moe_out_.resize(N * C);
}

MoeWeights Model::LayerMoeWeights(int l) const {
  MoeWeights w{};
  w.router = P(LayerName(l, "router"));
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

Status Model::LayerForward(int l, int sequences, const LossScale& scale,
                           ExpertExchange* exchange, float* x_out) {
  const ModelConfig& m = config_;
  const int N = sequences * m.seq_len, C = m.dim;
  LayerActivations& a = acts_[l];
  RmsNormForward(a.x_in.data(), P(LayerName(l, "attn_norm")), a.xn1.data(), a.rstd1.data(), N, C,
                 m.norm_eps);
  Matmul(a.xn1.data(), Trans::kNo, P(LayerName(l, "wqkv")), Trans::kNo, a.qkv.data(), N, 3 * C, C,
         false);
  RopeForward(a.qkv.data(), N, C, m.heads, rope_);
  AttentionForward(a.qkv.data(), a.probs.data(), a.att_out.data(), sequences, m.seq_len, C,
                   m.heads);
  Matmul(a.att_out.data(), Trans::kNo, P(LayerName(l, "wo")), Trans::kNo, a.x_mid.data(), N, C,
         C, false);
  Add(a.x_in.data(), a.x_mid.data(), a.x_mid.data(), static_cast<long>(N) * C);
  RmsNormForward(a.x_mid.data(), P(LayerName(l, "moe_norm")), a.xn2.data(), a.rstd2.data(), N, C,
                 m.norm_eps);
  MOE_RETURN_IF_ERROR(MoeForward(m, LayerMoeWeights(l), a.xn2.data(), sequences,
                                 router_bias[l].data(), scale, exchange, &a.moe, moe_out_.data()));
  Add(a.x_mid.data(), moe_out_.data(), x_out, static_cast<long>(N) * C);
  return Status();
}

Status Model::Forward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                      ForwardResult* result) {
  const ModelConfig& m = config_;
  const int N = batch.sequences * m.seq_len, C = m.dim;
  Resize(N);
  const float* embed = P("embed");
  for (int t = 0; t < N; ++t)
    std::memcpy(&acts_[0].x_in[static_cast<size_t>(t) * C], embed + static_cast<long>(batch.inputs[t]) * C,
                C * sizeof(float));
  *result = ForwardResult();
  result->selected.assign(static_cast<size_t>(m.layers) * m.experts, 0.0);
  for (int l = 0; l < m.layers; ++l) {
    float* x_out = l + 1 < m.layers ? acts_[l + 1].x_in.data() : x_final.data();
    MOE_RETURN_IF_ERROR(LayerForward(l, batch.sequences, scale, exchange, x_out));
    const RouterOutput& r = acts_[l].moe.router;
    result->aux_loss += r.aux_loss;
    result->z_loss += r.z_loss;
    for (int e = 0; e < m.experts; ++e) result->selected[l * m.experts + e] = r.selected[e];
  }
  RmsNormForward(x_final.data(), P("final_norm"), xf_.data(), rstd_f_.data(), N, C, m.norm_eps);
  Matmul(xf_.data(), Trans::kNo, P("lm_head"), Trans::kNo, logits_.data(), N, m.vocab, C, false);
  dlogits_.resize(logits_.size());
  result->ce_loss = CrossEntropy(logits_.data(), batch.targets.data(), N, m.vocab, scale,
                                 dlogits_.data());
  return Status();
}

Status Model::LayerBackward(int l, int sequences, const LossScale& scale,
                            ExpertExchange* exchange) {
  const ModelConfig& m = config_;
  const int N = sequences * m.seq_len, C = m.dim;
  LayerActivations& a = acts_[l];
  // MoE branch: dx (gradient of the block output) flows to the residual and into the MoE.
  MOE_RETURN_IF_ERROR(MoeBackward(m, LayerMoeWeights(l), a.xn2.data(), sequences, scale, exchange,
                                  dx_.data(), &a.moe, dxn_.data(), LayerMoeGrads(l)));
  RmsNormBackward(a.x_mid.data(), P(LayerName(l, "moe_norm")), a.rstd2.data(), dxn_.data(),
                  dx_.data(), G(LayerName(l, "moe_norm")), N, C);
  // Attention branch.
  Matmul(a.att_out.data(), Trans::kYes, dx_.data(), Trans::kNo, G(LayerName(l, "wo")), C, C, N,
         true);
  Matmul(dx_.data(), Trans::kNo, P(LayerName(l, "wo")), Trans::kYes, d_att_.data(), N, C, C,
         false);
  AttentionBackward(a.qkv.data(), a.probs.data(), d_att_.data(), dqkv_.data(), sequences,
                    m.seq_len, C, m.heads);
  RopeBackward(dqkv_.data(), N, C, m.heads, rope_);
  Matmul(a.xn1.data(), Trans::kYes, dqkv_.data(), Trans::kNo, G(LayerName(l, "wqkv")), C, 3 * C,
         N, true);
  Matmul(dqkv_.data(), Trans::kNo, P(LayerName(l, "wqkv")), Trans::kYes, dxn_.data(), N, C,
         3 * C, false);
  RmsNormBackward(a.x_in.data(), P(LayerName(l, "attn_norm")), a.rstd1.data(), dxn_.data(),
                  dx_.data(), G(LayerName(l, "attn_norm")), N, C);
  return Status();
}

Status Model::Backward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                       const std::function<Status(int bucket)>& bucket_done) {
  const ModelConfig& m = config_;
  const int N = batch.sequences * m.seq_len, C = m.dim;
  grads.Zero();
  // Head: logits = xf lm_head; xf = rmsnorm(x_final).
  Matmul(xf_.data(), Trans::kYes, dlogits_.data(), Trans::kNo, G("lm_head"), C, m.vocab, N, true);
  Matmul(dlogits_.data(), Trans::kNo, P("lm_head"), Trans::kYes, dxn_.data(), N, C, m.vocab,
         false);
  std::fill(dx_.begin(), dx_.end(), 0.0f);
  RmsNormBackward(x_final.data(), P("final_norm"), rstd_f_.data(), dxn_.data(), dx_.data(),
                  G("final_norm"), N, C);
  MOE_RETURN_IF_ERROR(bucket_done(layout_.HeadBucket()));
  for (int l = m.layers - 1; l >= 0; --l) {
    MOE_RETURN_IF_ERROR(LayerBackward(l, batch.sequences, scale, exchange));
    MOE_RETURN_IF_ERROR(bucket_done(layout_.LayerExpertBucket(l)));
    MOE_RETURN_IF_ERROR(bucket_done(layout_.LayerDenseBucket(l)));
  }
  float* d_embed = G("embed");
  for (int t = 0; t < N; ++t) {  // in token order: reproducible sums for repeated bytes
    float* row = d_embed + static_cast<long>(batch.inputs[t]) * C;
    const float* d = &dx_[static_cast<size_t>(t) * C];
    for (int c = 0; c < C; ++c) row[c] += d[c];
  }
  return bucket_done(layout_.EmbedBucket());
}

}  // namespace moe
