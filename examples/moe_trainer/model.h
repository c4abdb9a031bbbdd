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
#include "tensor_parallel.h"

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

// x_in, rstd1, x_mid, rstd2 (and x_final, rstd_f) hold this rank's rows; xn1, xn2, xf every
// row (gathered from the held rows with sequence parallelism; tensor_parallel.h).
struct LayerActivations {
  std::vector<float> x_in, xn1, rstd1, qkv, probs, att_out, x_mid, xn2, rstd2;
  MoeActivations moe;
};

// What forward keeps for backward, for one micro-batch in flight (pipeline parallelism keeps
// up to one per stage).
struct StageActivations {
  std::vector<LayerActivations> layers;  // this stage's layers
  std::vector<float> x_final, xf, rstd_f, logits, dlogits, logits_part;
};

// The model, or with tensor/pipeline parallelism this rank's part of it (ParamLayout's
// ModelShard): the layers of its stage, each with its share of the heads and of the shared
// expert's hidden units, the embedding on the first stage and the head on the last.
class Model {
 public:
  Model(const ModelConfig& config, const ParamLayout& layout);
  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  // The tensor-parallel group (must outlive the model); none: this rank holds whole layers.
  void set_tensor_parallel(TensorParallel* tp) { tp_ = tp; }
  // Forward and Backward use the activations of micro-batch slot `slot` (from 0).
  void UseSlot(int slot);

  // Forward of this stage over the batch: from its tokens (first stage) or from x_in, the
  // previous stage's output [tokens, dim]. The last stage computes logits() and the loss.
  Status Forward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                 ForwardResult* result, const float* x_in = nullptr);
  // This stage's output of the last Forward (stages before the last send it on): the rows
  // this rank holds (HeldTokens of the micro-batch's tokens, sequence parallelism).
  const float* output() const { return slot_->x_final.data(); }
  int HeldTokens(int tokens) const { return RowsHeld(tp_, tokens).count; }
  // Backward of the slot's Forward, ADDED into grads (ZeroGrads first): from the loss (last
  // stage) or from dy, the gradient of output(). bucket_done(b) is called as soon as bucket
  // b's gradients are final, so its reduction can start while backward continues.
  Status Backward(const Batch& batch, const LossScale& scale, ExpertExchange* exchange,
                  const std::function<Status(int bucket)>& bucket_done,
                  const float* dy = nullptr);
  // The gradient of the stage's input after Backward (stages after the first send it back;
  // the held rows, like output()).
  const float* input_grad() const { return dx_.data(); }
  void ZeroGrads() { grads.Zero(); }
  const std::vector<float>& logits() const { return slot_->logits; }

  ParamBuffers params, grads;
  std::vector<std::vector<float>> router_bias;  // [layers][E], sigmoid router only

 private:
  MoeWeights LayerMoeWeights(int layer) const;
  MoeGrads LayerMoeGrads(int layer);
  const float* P(const std::string& name) const { return params.Ptr(layout_.Get(name)); }
  float* G(const std::string& name) { return grads.Ptr(layout_.Get(name)); }
  LayerActivations& Acts(int l) { return slot_->layers[l - first_layer_]; }
  void Resize(int tokens);
  // Sequence parallelism: the norm weights' gradients of the held rows (norm_dw_) summed over
  // the tensor-parallel group and added into grads.
  Status AddNormGrads(const std::vector<const char*>& names);
  // The gradient dx_ of the held rows completed to every row (full_), for the weights and
  // inputs of the block that reads all of them; dx_ itself without sequence parallelism.
  Status GatherOutputGrad(int tokens, const float** full);
  Status HeadForward(const Batch& batch, const LossScale& scale, ForwardResult* result);
  Status HeadBackward(int tokens);
  Status LayerForward(int l, int sequences, const LossScale& scale, ExpertExchange* exchange,
                      float* x_out);
  Status LayerBackward(int l, int sequences, const LossScale& scale, ExpertExchange* exchange);

  ModelConfig config_;
  ParamLayout layout_;
  ModelShard shard_;
  int first_layer_ = 0, end_layer_ = 0;
  int tp_dim_ = 0, tp_heads_ = 0, tp_vocab_ = 0;  // this rank's share of dim, heads, vocab
  TensorParallel* tp_ = nullptr;
  RopeTable rope_;
  std::vector<StageActivations> slots_;
  StageActivations* slot_ = nullptr;
  // dx_, moe_out_: held rows; dxn_: every row (partial products before their reduction);
  // full_: held rows gathered to all (sequence parallelism); norm_dw_: 2 norms' partial dw.
  std::vector<float> dx_, dxn_, d_att_, dqkv_, moe_out_, full_, norm_dw_;
};

}  // namespace moe

#endif  // MOE_TRAINER_MODEL_H_
