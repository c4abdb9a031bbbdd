// checkpoint.h: save and restore everything a rank needs to continue bit for bit: the step,
// parameters (dense and this rank's experts), the optimizer moments (full, or this rank's ZeRO
// shards), the router biases and, with --compress, the error-feedback residuals. One file per
// rank, written to a temporary name and renamed, so a crash mid-write leaves the previous
// checkpoint intact. The data loader needs no state (batches are a function of the step).
#ifndef MOE_TRAINER_CHECKPOINT_H_
#define MOE_TRAINER_CHECKPOINT_H_

#include <string>

#include "status.h"
#include "trainer.h"

namespace moe {

std::string CheckpointPath(const std::string& dir, int rank);
// next_step: the first step a resumed run will execute.
Status SaveCheckpoint(const std::string& dir, int rank, int world, int next_step,
                      Trainer* trainer);
// A data-parallel checkpoint written by another number of ranks is resharded onto this
// layout (reshard.h): --elastic reloads on fewer ranks, a job may resume on fewer or more.
Status LoadCheckpoint(const std::string& dir, int rank, int world, int* next_step,
                      Trainer* trainer);

}  // namespace moe

#endif  // MOE_TRAINER_CHECKPOINT_H_
