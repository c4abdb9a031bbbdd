// cross_entropy.cc: next-byte cross-entropy, loss_t = logsumexp(logits_t) - logits_t[target],
// and its gradient (softmax - onehot) / global token count.
#include <cmath>

#include "layers.h"
#include "thread_pool.h"

namespace moe {

double CrossEntropy(const float* logits, const int* targets, int rows, int vocab,
                    const LossScale& scale, float* dlogits) {
  std::vector<double> row_loss(rows);
  const float inv_tokens = static_cast<float>(1.0 / scale.tokens);
  ParallelFor(rows, static_cast<long>(rows) * vocab > 65536, [&](long lo, long hi) {
    for (int r = static_cast<int>(lo); r < hi; ++r) {
      const float* l = logits + static_cast<long>(r) * vocab;
      float max_logit = l[0];
      for (int v = 1; v < vocab; ++v) max_logit = std::fmax(max_logit, l[v]);
      double sum = 0.0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(l[v] - max_logit));
      row_loss[r] = max_logit + std::log(sum) - l[targets[r]];
      if (dlogits == nullptr) continue;
      float* d = dlogits + static_cast<long>(r) * vocab;
      for (int v = 0; v < vocab; ++v) {
        const float p = static_cast<float>(std::exp(static_cast<double>(l[v] - max_logit)) / sum);
        d[v] = (p - (v == targets[r] ? 1.0f : 0.0f)) * inv_tokens;
      }
    }
  });
  double total = 0.0;  // in row order: reproducible
  for (int r = 0; r < rows; ++r) total += row_loss[r];
  return total / scale.tokens;
}

}  // namespace moe
