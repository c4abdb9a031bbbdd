// elastic.h: --elastic, training that survives a lost rank (issue 37). Data parallelism only.
//
// Before each step a rank keeps what it needs to redo that step (Snapshot): the parameters,
// its optimizer moments and router biases, and with ZeRO-1 the copy of the previous rank's
// moment shard it mirrors (after every step each rank sends its shard to the next rank,
// its "buddy"). Snapshots of the last two steps are kept: a rank can have finished step s
// (every collective of s completed) while another still failed inside s, never more apart,
// because a collective completes only once every rank has entered it.
//
// When a step fails and weft names a failed rank, Recover: revokes and shrinks the world
// (weftCommShrink; survivors agree on who is gone), agrees on the step to redo (the lowest
// any survivor was in), rebuilds the whole state of that step from the survivors (with ZeRO-1
// a dead rank's shard comes from its buddy's mirror), and builds a new Parallel and Trainer on
// the smaller layout, which take the same global batch: only its split over ranks changes, so
// the step's math (and the loss curve) continues. Two adjacent ranks lost at once leave a
// shard with no copy: then the last checkpoint (--checkpoint-dir) is loaded on the new layout
// and the log says so; without one, recovery fails with that reason.
#ifndef MOE_TRAINER_ELASTIC_H_
#define MOE_TRAINER_ELASTIC_H_

#include <memory>
#include <string>
#include <vector>

#include "parallel.h"
#include "reshard.h"
#include "trainer.h"

namespace moe {

class Elastic {
 public:
  explicit Elastic(const TrainConfig& config) : config_(config) {}
  // At the start of `step`: keeps the state to redo it from.
  void Snapshot(int step, Trainer& trainer);
  // At the end of a step (ZeRO-1): this rank's moment shard goes to the next rank.
  Status Mirror(Trainer& trainer, Parallel& parallel);
  // After `failed_step` failed with a rank known dead: replaces *parallel and *trainer with
  // ones over the survivors holding the state of *redo_step, the step to run next. *note says
  // what happened (for the log).
  Status Recover(int failed_step, std::unique_ptr<Parallel>* parallel,
                 std::unique_ptr<Trainer>* trainer, int* redo_step, std::string* note);

 private:
  struct Saved {
    int step = -1;
    ParamBuffers params;
    std::vector<float> m, v, mirror;  // mirror: the previous rank's m then v (ZeRO-1)
    std::vector<std::vector<float>> router_bias;
  };
  // The state of `step` in the old layout, assembled over the survivors (new world).
  // *complete: false when a ZeRO-1 shard had no living copy.
  Status Assemble(const Saved& saved, const std::vector<int>& old_ranks, int old_world,
                  Parallel& survivors, const ParamLayout& old_layout, FullState* state,
                  bool* complete);

  TrainConfig config_;
  Saved saved_[2];              // by step % 2
  std::vector<float> mirror_;   // received at the end of the last step
};

}  // namespace moe

#endif  // MOE_TRAINER_ELASTIC_H_
