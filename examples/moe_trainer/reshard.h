// reshard.h: training state moved between data-parallel layouts of different sizes. ZeRO-1
// cuts each bucket over the group (params.h, ShardOf), so the optimizer moments are cut
// differently on 4 and on 3 ranks (and, where buckets pad to the group, offsets differ too).
// FullState holds the whole state in one layout's buffers (every moment, not a shard);
// Install copies it tensor by tensor, by name, into a trainer built for another layout.
// Used by --elastic (elastic.h) and by resuming a checkpoint on another number of ranks.
#ifndef MOE_TRAINER_RESHARD_H_
#define MOE_TRAINER_RESHARD_H_

#include <vector>

#include "optimizer.h"
#include "params.h"
#include "trainer.h"

namespace moe {

struct FullState {
  ParamLayout layout;  // what params, m and v follow
  int data_ranks = 1;  // the data-parallel size that layout was built for
  ParamBuffers params, m, v;
  std::vector<std::vector<float>> router_bias;
  void Allocate(const ParamLayout& from);
};

// Whole buffers (no ZeRO-1), or the rank's shard of every bucket (ZeRO-1): what the
// optimizer of rank `rank` of a data-parallel group of `group` ranks updates.
std::vector<Segment> DataParallelSegments(const ParamLayout& layout, bool zero1, int group,
                                          int rank);
// Moments concatenated over segments (AdamW's m, v) to and from whole buffers.
void SegmentsToFull(const std::vector<Segment>& segments, const std::vector<float>& flat,
                    ParamBuffers* full);
void FullToSegments(const std::vector<Segment>& segments, const ParamBuffers& full,
                    std::vector<float>* flat);
// The data-parallel layout of this configuration on `data_ranks` ranks.
ParamLayout DataParallelLayout(const TrainConfig& config, int data_ranks);
// Copies parameters, moments (this rank's segments of them) and router biases into trainer.
void Install(const FullState& state, Trainer* trainer);

}  // namespace moe

#endif  // MOE_TRAINER_RESHARD_H_
