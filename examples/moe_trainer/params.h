// params.h: where every parameter lives. Two flat float buffers per rank:
//   dense  - replicated on every rank (embedding, attention, norms, router, shared expert, head)
//   expert - this rank's slice of the routed experts (E / ep of them), replicated over the
//            ranks that hold the same slice (the expert data-parallel group)
// Each buffer is cut into buckets (one per layer, plus embedding and head) that are reduced as
// soon as backward has finished them; a bucket is padded to whole 16-float units (64-byte
// aligned ZeRO-1 shards), and to a multiple of its group only where a collective without
// per-rank counts must split it evenly (BucketPadGroup). The same layout serves values,
// gradients and optimizer moments.
#ifndef MOE_TRAINER_PARAMS_H_
#define MOE_TRAINER_PARAMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.h"

namespace moe {

// How a tensor is cut over the tensor-parallel group (Megatron): whole (replicated), its
// columns (column-parallel; `parts` equal column blocks, e.g. q|k|v, each cut in tp pieces),
// or its rows (row-parallel).
enum class TpSplit { kNone, kColumns, kRows };

struct TensorInfo {
  std::string name;
  std::vector<int> shape;  // this rank's part; expert tensors: [local experts, rows, cols]
  TpSplit split = TpSplit::kNone;
  int parts = 1;           // column blocks cut separately (kColumns)
  bool expert = false;     // lives in the expert buffer
  bool decay = true;       // AdamW weight decay (not for norm weights)
  float init_std = 0.02f;  // 0 = constant 1 (norm weights)
  size_t offset = 0;       // in its buffer
  size_t size = 0;
  int bucket = 0;
};

struct Bucket {
  bool expert = false;
  size_t offset = 0;
  size_t count = 0;  // padded to a multiple of 16 x the pad group (BucketPadGroup)
};

// ZeRO-1's cut of a bucket over the `group` ranks that reduce it: rank r's elements
// [begin, begin + count). Whole 16-float units, as even as they go (the first units % group
// ranks take one more), so a bucket that does not divide by the group is cut unevenly instead
// of padded (weftReduceScatterV / weftAllGatherV) and a rank may get nothing.
struct Shard {
  size_t begin = 0, count = 0;
};
Shard ShardOf(const Bucket& b, int group, int rank);
// Every rank's shard of b: counts and offsets, as the v-collectives take them.
void ShardTable(const Bucket& b, int group, std::vector<size_t>* counts,
                std::vector<size_t>* displs);
// What ParamLayout::Build pads a bucket reduced over `group` ranks to (in 16-float units):
// the group itself when ZeRO-1 reduce-scatters compressed (weftReduceScatterCompressed has
// no per-rank counts, so its shards must be equal); otherwise 1.
int BucketPadGroup(const TrainConfig& config, int group);

// The part of the model one rank holds: its tensor-parallel piece of the layers of its
// pipeline stage, and its EP slice of the routed experts.
struct ModelShard {
  int ep_size = 1, ep_rank = 0;
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_rank = 0;
  int FirstLayer(const ModelConfig& m) const { return pp_rank * (m.layers / pp_size); }
  int EndLayer(const ModelConfig& m) const { return (pp_rank + 1) * (m.layers / pp_size); }
  bool HasEmbedding() const { return pp_rank == 0; }
  bool HasHead() const { return pp_rank + 1 == pp_size; }
};

class ParamLayout {
 public:
  // dense_pad / expert_pad: what the dense / expert buckets pad to (BucketPadGroup).
  static ParamLayout Build(const ModelConfig& model, const ModelShard& shard, int dense_pad,
                           int expert_pad);
  const ModelShard& shard() const { return shard_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const TensorInfo& Get(const std::string& name) const;  // name must exist
  const TensorInfo* Find(const std::string& name) const;
  size_t dense_size() const { return dense_size_; }
  size_t expert_size() const { return expert_size_; }
  int first_local_expert() const { return first_local_expert_; }
  int local_experts() const { return local_experts_; }
  // Buckets in the order backward completes them (layer: the global layer index; -1 when this
  // stage does not hold the embedding or head).
  int LayerDenseBucket(int layer) const { return layer_dense_bucket_[layer - first_layer_]; }
  int LayerExpertBucket(int layer) const { return layer_expert_bucket_[layer - first_layer_]; }
  int HeadBucket() const { return head_bucket_; }
  int EmbedBucket() const { return embed_bucket_; }

 private:
  // shape: the whole tensor's; a split one keeps this rank's part of it.
  void Add(const std::string& name, std::vector<int> shape, bool expert, float init_std,
           TpSplit split = TpSplit::kNone, int parts = 1);
  void CloseBucket(bool expert, int pad_multiple);
  std::vector<TensorInfo> tensors_;
  std::vector<Bucket> buckets_;
  size_t dense_size_ = 0, expert_size_ = 0;
  int first_local_expert_ = 0, local_experts_ = 0;
  std::vector<int> layer_dense_bucket_, layer_expert_bucket_;
  int head_bucket_ = -1, embed_bucket_ = -1, first_layer_ = 0;
  ModelShard shard_;
};

// Values (or gradients, or moments) laid out by a ParamLayout.
struct ParamBuffers {
  std::vector<float> dense, expert;
  void Allocate(const ParamLayout& layout);
  void Zero();
  float* Ptr(const TensorInfo& t) { return (t.expert ? expert.data() : dense.data()) + t.offset; }
  const float* Ptr(const TensorInfo& t) const {
    return (t.expert ? expert.data() : dense.data()) + t.offset;
  }
  float* BucketPtr(const Bucket& b) { return (b.expert ? expert.data() : dense.data()) + b.offset; }
};

// Deterministic init: a pure function of (seed, tensor name, global expert, element of the
// whole tensor), so every EP, TP and PP layout starts from the same model.
void InitParams(const ParamLayout& layout, uint64_t seed, ParamBuffers* params);

}  // namespace moe

#endif  // MOE_TRAINER_PARAMS_H_
