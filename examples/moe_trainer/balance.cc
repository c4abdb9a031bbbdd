// balance.cc: measured shares of the batch (see balance.h).
#include "balance.h"

#include <algorithm>
#include <numeric>

namespace moe {

Balancer::Balancer(const TrainConfig& config, Parallel* parallel)
    : config_(config), parallel_(parallel) {
  const int ranks = parallel->data_size();
  shares_.assign(ranks, config.batch / ranks);
  for (int r = 0; r < config.batch % ranks; ++r) ++shares_[r];  // never: Validate, but exact
}

void Balancer::Share(int* first, int* count) const {
  const int rank = parallel_->data_rank();
  *first = std::accumulate(shares_.begin(), shares_.begin() + rank, 0);
  *count = shares_[rank];
}

// One sequence each, then each further sequence to the rank that would finish it first
// ((share + 1) / speed smallest; ties to the lower rank): this minimizes the slowest rank's
// time in whole sequences. (A largest-remainder split of the rest by speed rounds a small share
// up: with 2 sequences per rank of 8 and one rank 2x slower it kept the even split, whose step
// takes 4 sequence-times instead of 3.)
void Balancer::Apportion(const std::vector<double>& speed) {
  const int ranks = static_cast<int>(speed.size());
  std::fill(shares_.begin(), shares_.end(), 1);
  for (int given = ranks; given < config_.batch; ++given) {
    int best = 0;
    for (int r = 1; r < ranks; ++r)
      if ((shares_[r] + 1) / speed[r] < (shares_[best] + 1) / speed[best]) best = r;
    ++shares_[best];
  }
}

Status Balancer::Record(double compute_seconds, bool* changed) {
  *changed = false;
  if (config_.balance != "measured" || parallel_->data_size() == 1) return Status();
  window_seconds_ += compute_seconds;
  window_sequences_ += shares_[parallel_->data_rank()];
  if (++window_steps_ < config_.balance_every) return Status();
  // [seconds, sequences] per data rank; each rank fills its own pair, the sum gathers them.
  const int ranks = parallel_->data_size(), me = parallel_->data_rank();
  std::vector<double> pooled(2 * ranks, 0.0);
  pooled[2 * me] = window_seconds_;
  pooled[2 * me + 1] = static_cast<double>(window_sequences_);
  MOE_RETURN_IF_ERROR(parallel_->SumOverWorld(&pooled));
  window_seconds_ = 0.0, window_sequences_ = 0, window_steps_ = 0;
  std::vector<double> speed(ranks);
  for (int r = 0; r < ranks; ++r)
    speed[r] = pooled[2 * r + 1] / std::max(pooled[2 * r], 1e-9);
  const std::vector<int> before = shares_;
  Apportion(speed);
  *changed = shares_ != before;
  return Status();
}

}  // namespace moe
