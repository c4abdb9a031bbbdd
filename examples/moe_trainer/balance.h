// balance.h: uneven data parallelism (--balance measured). Each data-parallel rank takes a
// contiguous run of the global batch's sequences, sized in proportion to its measured compute
// speed (sequences per second of its own work, time blocked in weft excluded), so a slower rank
// gets fewer sequences and the step waits less for it. Every --balance-every steps the ranks
// pool their measurements with one all-reduce and all compute the same new shares. The update
// does not depend on the split: every loss term is already scaled by the global batch's token
// count, so the summed gradients are the even split's (up to summation order).
#ifndef MOE_TRAINER_BALANCE_H_
#define MOE_TRAINER_BALANCE_H_

#include <vector>

#include "config.h"
#include "parallel.h"

namespace moe {

class Balancer {
 public:
  Balancer(const TrainConfig& config, Parallel* parallel);
  // This data rank's sequences [*first, *first + *count) of each global batch.
  void Share(int* first, int* count) const;
  // Adds one step's compute seconds of this rank; at the end of every window the shares are
  // recomputed (collective: every rank calls it every step). *changed: the shares moved.
  Status Record(double compute_seconds, bool* changed);
  const std::vector<int>& shares() const { return shares_; }

 private:
  // The batch by speed: at least one sequence each, the slowest rank's time smallest.
  void Apportion(const std::vector<double>& speed);

  TrainConfig config_;
  Parallel* parallel_;
  std::vector<int> shares_;
  double window_seconds_ = 0.0;
  long window_sequences_ = 0;
  int window_steps_ = 0;
};

}  // namespace moe

#endif  // MOE_TRAINER_BALANCE_H_
