// model.h: the MoE transformer (byte tokens -> embedding -> L x [RMSNorm, causal MHA with RoPE,
// residual, RMSNorm, MoE FFN, residual] -> RMSNorm -> LM head), its activations, and the
// hand-written forward and backward passes.
#ifndef MOE_TRAINER_MODEL_H_
#define MOE_TRAINER_MODEL_H_

#include <functional>
#include <vector>

#include "config.h"
#include "expert_exchange.h"
#include "layers.h"
#include "moe_layer.h"
#include "params.h"
#include "status.h"

namespace moe {

struct Batch {
  int sequences = 0;
  std::vector<int> inputs, targets;  // [sequences * seq_len]
};

struct ForwardResult {
  double ce_loss = 0.0;    // this rank's share of the global mean cross-entropy
  double aux_loss = 0.0;   // this rank's share of the balancing losses (all layers)
  double z_loss = 0.0;
  std::vector<double> selected;  // [layers, E] router assignments of this rank's tokens
};

struct LayerActivations {
  std::vector<float> x_in, xn1, rstd1, qkv, probs, att_out, x_mid, xn2, rstd2;
  MoeActivations moe;
};

class Model {
 public:
  Model(const ModelConfig& config, const ParamLayout& layout);
  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  // Forward over the batch; logits() holds the result afterwards.
  Status Forward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                 ForwardResult* result);
  // Backward of the last Forward into grads (zeroed first). bucket_done(b) is called as soon as
  // bucket b's gradients are final, so its reduction can start while backward continues.
  Status Backward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                  const std::function<Status(int bucket)>& bucket_done);
  const std::vector<float>& logits() const { return logits_; }

  ParamBuffers params, grads;
  std::vector<std::vector<float>> router_bias;  // [layers][E], sigmoid router only

 private:
  MoeWeights LayerMoeWeights(int layer) const;
  MoeGrads LayerMoeGrads(int layer);
  const float* P(const std::string& name) const { return params.Ptr(layout_.Get(name)); }
  float* G(const std::string& name) { return grads.Ptr(layout_.Get(name)); }
  void Resize(int tokens);
  Status LayerForward(int l, int sequences, const LossScale& scale, ExpertExchange* exchange,
                      float* x_out);
  Status LayerBackward(int l, int sequences, const LossScale& scale, ExpertExchange* exchange);

  ModelConfig config_;
  ParamLayout layout_;
  RopeTable rope_;
  std::vector<LayerActivations> acts_;
  std::vector<float> x_final, xf_, rstd_f_, logits_, dlogits_;
  std::vector<float> dx_, dxn_, d_att_, dqkv_, moe_out_;
};

}  // namespace moe

#endif  // MOE_TRAINER_MODEL_H_
