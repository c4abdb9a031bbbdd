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
//
// Growing back (weftrun --replace): weftrun starts a replacement for each killed process, with
// WEFTRUN_JOIN_DIR (given to every rank) and WEFTRUN_JOIN_SLOT (the killed process's index
// in weftrun). After shrinking, the survivors see the directory and grow back to the job's
// size: rank 0 writes, for each lost slot, a file join.SLOT with the weftCommGetUniqueId id
// and the rank the newcomer takes; everyone calls weftCommGrow; rank 0 then broadcasts the
// assembled state (or "reload the checkpoint") and the step, so the newcomer trains on from
// the same step with the same parameters and optimizer state.
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
  // slot: this process's index in the launcher (its first world rank, or WEFTRUN_JOIN_SLOT);
  // job_size: the ranks the job is grown back to; join_dir: WEFTRUN_JOIN_DIR ("": no growing).
  Elastic(const TrainConfig& config, int slot, int job_size, const std::string& join_dir)
      : config_(config), slot_(slot), job_size_(job_size), join_dir_(join_dir) {
    config_.kill_ranks.clear(), config_.kill_step = -1;
  }
  // A replacement process: waits for its join file, grows into the job and receives the
  // state; *parallel, *trainer and *step (the next step to run) are set.
  Status Join(std::unique_ptr<Parallel>* parallel, std::unique_ptr<Trainer>* trainer,
              int* step);
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

  // Survivors: rank 0 writes the lost slots' join files, then all grow back to job_size_.
  Status GrowBack(std::unique_ptr<Parallel>* parallel);
  // Rank 0's state, step and completeness to every rank (after a grow).
  Status ShareState(Parallel& parallel, FullState* state, int* step, bool* complete);
  // A trainer on parallel holding state (or, not complete, the checkpoint's), mirrored.
  Status Rebuild(Parallel* parallel, const FullState& state, bool complete, int* step,
                 std::unique_ptr<Trainer>* trainer, std::string* note);

  TrainConfig config_;  // the test hook cleared: it fires once, in the first world
  int slot_, job_size_;
  std::string join_dir_;
  Saved saved_[2];              // by step % 2
  std::vector<float> mirror_;   // received at the end of the last step
};

}  // namespace moe

#endif  // MOE_TRAINER_ELASTIC_H_
