// moe_layer.h: the mixture-of-experts feed-forward of one block (DeepSeekMoE shape): a router
// picks top-k of E fine-grained experts per token, the chosen rows travel to the EP rank that
// holds each expert (dispatch), come back (combine) weighted by their gates, and are added to
// the always-on shared expert's output.
#ifndef MOE_TRAINER_MOE_LAYER_H_
#define MOE_TRAINER_MOE_LAYER_H_

#include <vector>

#include "expert_exchange.h"
#include "layers.h"
#include "status.h"
#include "tensor_parallel.h"

namespace moe {

struct MoeWeights {
  const float* router;      // [C, E]
  SwigluWeights shared;     // null pointers when there is no shared expert
  int shared_hidden = 0;    // this rank's hidden units of the shared expert (tensor parallel)
  const float* expert_w1;   // [local E, C, F]
  const float* expert_w3;   // [local E, C, F]
  const float* expert_w2;   // [local E, F, C]
  int local_experts = 0;
};

struct MoeGrads {
  float* router;
  SwigluGrads shared;
  float* expert_w1;
  float* expert_w3;
  float* expert_w2;
};

// Everything forward keeps for backward, plus backward's scratch.
struct MoeActivations {
  std::vector<float> logits;       // [N, E]
  RouterOutput router;
  std::vector<int> slot;           // [N, k] row in the dispatch buffer; -1 when dropped
  std::vector<size_t> send_counts; // [E] rows this rank sends to each global expert
  std::vector<size_t> recv_counts; // [ep, local E] rows received per (source rank, expert)
  std::vector<float> send_x, recv_x, recv_h1, recv_h3, recv_y, send_y;
  std::vector<float> shared_h1, shared_h3, shared_y;  // shared_y: partial rows (sequence par.)
  std::vector<float> d_send, d_recv, dgate, dlogits, scratch;
};

// xn: [N, C] normalized input of `sequences` sequences; out: [held rows, C] overwritten (all N
// rows, or with sequence parallelism this rank's run of them: tensor_parallel.h).
// With a tensor-parallel group (tp not null) the shared expert is split column -> row over it
// (w.shared_hidden units here) and its partial output summed over the group (all-reduced, or
// reduce-scattered into the held rows); the router and the routed experts are whole on every
// rank of the group (the same computation on every token).
Status MoeForward(const ModelConfig& m, const MoeWeights& w, const float* xn, int sequences,
                  const float* router_bias, const LossScale& scale, ExpertExchange* exchange,
                  MoeActivations* a, float* out, TensorParallel* tp = nullptr);
// dout: [N, C] (every row); dxn: [held rows, C] overwritten; gradients added into g.
Status MoeBackward(const ModelConfig& m, const MoeWeights& w, const float* xn, int sequences,
                   const LossScale& scale, ExpertExchange* exchange, const float* dout,
                   MoeActivations* a, float* dxn, const MoeGrads& g, TensorParallel* tp = nullptr);

}  // namespace moe

#endif  // MOE_TRAINER_MOE_LAYER_H_
