// router.cc: top-k routing, with two router choices.
//
// softmax (Megatron-Core style): p = softmax(logits); the k largest p are chosen and used as
//   combine weights as they are (no renormalization). Balancing: the load-balancing loss
//   aux = coeff * E / (T^2 k) * sum_e P_e f_e per sequence (P_e = sum over the sequence's tokens
//   of p_e, f_e = tokens that chose e; Megatron's "seq_aux_loss" form, which makes the loss a
//   sum over sequences and so independent of how sequences are spread over ranks), averaged over
//   the global batch; and the z-loss z = coeff * mean over tokens of logsumexp(logits)^2.
//
// sigmoid (DeepSeek-V3): s = sigmoid(logits); the k largest s + bias are chosen (the bias only
//   selects; it is moved by +-gamma per step outside this file); gates are s normalized over the
//   k chosen. No auxiliary loss.
//
// Capacity: with a capacity factor, expert e accepts at most ceil(cf * T * k / E) assignments
// from one sequence, taken in token order and, within a token, in choice order; the rest are
// dropped (their combine weight is 0; the token keeps its residual and shared-expert path).
#include <algorithm>
#include <cmath>

#include "layers.h"

namespace moe {
namespace {

// Indices of the k largest keys, largest first; ties go to the lower index.
void TopK(const float* key, int n, int k, int* out) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= out[i] == e;
      if (!taken && (best < 0 || key[e] > key[best])) best = e;
    }
    out[j] = best;
  }
}

void ScoreToken(const ModelConfig& m, const float* logits, const float* bias, float* scores,
                float* lse, int* choice) {
  const int E = m.experts;
  if (m.router == RouterKind::kSoftmax) {
    float max_logit = logits[0];
    for (int e = 1; e < E; ++e) max_logit = std::max(max_logit, logits[e]);
    double sum = 0.0;
    for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e] - max_logit));
    for (int e = 0; e < E; ++e)
      scores[e] = static_cast<float>(std::exp(static_cast<double>(logits[e] - max_logit)) / sum);
    *lse = static_cast<float>(max_logit + std::log(sum));
    TopK(scores, E, m.top_k, choice);
  } else {
    std::vector<float> key(E);
    for (int e = 0; e < E; ++e) {
      scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      key[e] = scores[e] + bias[e];
    }
    *lse = 0.0f;
    TopK(key.data(), E, m.top_k, choice);
  }
}

// Applies the per-sequence capacity and sets the combine weights.
void AssignGates(const ModelConfig& m, int sequences, RouterOutput* r) {
  const int T = m.seq_len, k = m.top_k, E = m.experts, capacity = m.Capacity();
  std::vector<int> used(E);
  for (int b = 0; b < sequences; ++b) {
    std::fill(used.begin(), used.end(), 0);
    for (int t = b * T; t < (b + 1) * T; ++t) {
      const float* s = &r->scores[static_cast<long>(t) * E];
      double chosen_sum = 0.0;
      for (int j = 0; j < k; ++j) chosen_sum += s[r->choice[t * k + j]];
      for (int j = 0; j < k; ++j) {
        const int e = r->choice[t * k + j];
        const bool keep = capacity == 0 || used[e] < capacity;
        used[e] += keep;
        r->kept[t * k + j] = keep;
        float g = m.router == RouterKind::kSoftmax ? s[e] : static_cast<float>(s[e] / chosen_sum);
        r->gate[t * k + j] = keep ? g : 0.0f;
      }
    }
  }
}

// Per-sequence selection counts f_e (before dropping), [sequences, E].
std::vector<double> SequenceCounts(const ModelConfig& m, const RouterOutput& r, int sequences) {
  const int T = m.seq_len, k = m.top_k, E = m.experts;
  std::vector<double> f(static_cast<size_t>(sequences) * E, 0.0);
  for (int t = 0; t < sequences * T; ++t)
    for (int j = 0; j < k; ++j) f[(t / T) * E + r.choice[t * k + j]] += 1.0;
  return f;
}

}  // namespace

void RouterForward(const ModelConfig& m, const float* logits, const float* bias, int sequences,
                   const LossScale& scale, RouterOutput* r) {
  const int T = m.seq_len, k = m.top_k, E = m.experts, N = sequences * T;
  r->scores.assign(static_cast<size_t>(N) * E, 0.0f);
  r->choice.assign(static_cast<size_t>(N) * k, 0);
  r->gate.assign(r->choice.size(), 0.0f);
  r->kept.assign(r->choice.size(), 0);
  r->lse.assign(N, 0.0f);
  r->selected.assign(E, 0.0);
  for (int t = 0; t < N; ++t)
    ScoreToken(m, logits + static_cast<long>(t) * E, bias, &r->scores[static_cast<long>(t) * E],
               &r->lse[t], &r->choice[t * k]);
  for (int i = 0; i < N * k; ++i) r->selected[r->choice[i]] += 1.0;
  AssignGates(m, sequences, r);
  r->aux_loss = r->z_loss = 0.0;
  if (m.router != RouterKind::kSoftmax) return;
  const std::vector<double> f = SequenceCounts(m, *r, sequences);
  const double aux_scale = m.aux_loss_coeff * E / (static_cast<double>(T) * T * k);
  for (int b = 0; b < sequences; ++b) {
    double sum = 0.0;
    for (int e = 0; e < E; ++e) {
      double P = 0.0;
      for (int t = b * T; t < (b + 1) * T; ++t) P += r->scores[static_cast<long>(t) * E + e];
      sum += P * f[b * E + e];
    }
    r->aux_loss += aux_scale * sum / scale.sequences;
  }
  for (int t = 0; t < N; ++t)
    r->z_loss += m.z_loss_coeff * static_cast<double>(r->lse[t]) * r->lse[t] / scale.tokens;
}

void RouterBackward(const ModelConfig& m, const float* logits, const RouterOutput& r,
                    const float* dgate, int sequences, const LossScale& scale, float* dlogits) {
  const int T = m.seq_len, k = m.top_k, E = m.experts, N = sequences * T;
  std::vector<double> f;
  if (m.router == RouterKind::kSoftmax) f = SequenceCounts(m, r, sequences);
  const double aux_scale =
      m.aux_loss_coeff * E / (static_cast<double>(T) * T * k) / scale.sequences;
  std::vector<double> dscore(E);
  for (int t = 0; t < N; ++t) {
    const float* s = &r.scores[static_cast<long>(t) * E];
    float* dl = dlogits + static_cast<long>(t) * E;
    std::fill(dscore.begin(), dscore.end(), 0.0);
    if (m.router == RouterKind::kSoftmax) {
      for (int j = 0; j < k; ++j)
        if (r.kept[t * k + j]) dscore[r.choice[t * k + j]] += dgate[t * k + j];
      for (int e = 0; e < E; ++e) dscore[e] += aux_scale * f[(t / T) * E + e];
      double s_dot = 0.0;
      for (int e = 0; e < E; ++e) s_dot += s[e] * dscore[e];
      const double z = m.z_loss_coeff * 2.0 * r.lse[t] / scale.tokens;
      for (int e = 0; e < E; ++e)
        dl[e] = static_cast<float>(s[e] * (dscore[e] - s_dot) + z * s[e]);
    } else {
      // gate_j = s_j / S over the chosen: ds_i = dgate_i / S - sum_j dgate_j s_j / S^2.
      double S = 0.0, weighted = 0.0;
      for (int j = 0; j < k; ++j) S += s[r.choice[t * k + j]];
      for (int j = 0; j < k; ++j)
        if (r.kept[t * k + j]) weighted += dgate[t * k + j] * s[r.choice[t * k + j]];
      for (int j = 0; j < k; ++j) {
        const int e = r.choice[t * k + j];
        dscore[e] += (r.kept[t * k + j] ? dgate[t * k + j] / S : 0.0) - weighted / (S * S);
      }
      for (int e = 0; e < E; ++e) dl[e] = static_cast<float>(dscore[e] * s[e] * (1.0f - s[e]));
    }
  }
  (void)logits;
}

}  // namespace moe
