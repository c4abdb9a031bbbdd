// params.h: where every parameter lives. Two flat float buffers per rank:
//   dense  - replicated on every rank (embedding, attention, norms, router, shared expert, head)
//   expert - this rank's slice of the routed experts (E / ep of them), replicated over the
//            ranks that hold the same slice (the expert data-parallel group)
// Each buffer is cut into buckets (one per layer, plus embedding and head) that are reduced as
// soon as backward has finished them; a bucket is padded to a multiple of its group size so a
// reduce-scatter (ZeRO-1) can split it evenly. The same layout serves values, gradients and
// optimizer moments.
#ifndef MOE_TRAINER_PARAMS_H_
#define MOE_TRAINER_PARAMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.h"

namespace moe {

struct TensorInfo {
  std::string name;
  std::vector<int> shape;  // expert tensors: [local experts, rows, cols]
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
  size_t count = 0;  // padded to a multiple of the group size
};

class ParamLayout {
 public:
  // dense_group / expert_group: ranks sharing the dense / this expert slice (padding unit).
  static ParamLayout Build(const ModelConfig& model, int ep_size, int ep_rank, int dense_group,
                           int expert_group);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const TensorInfo& Get(const std::string& name) const;  // name must exist
  const TensorInfo* Find(const std::string& name) const;
  size_t dense_size() const { return dense_size_; }
  size_t expert_size() const { return expert_size_; }
  int first_local_expert() const { return first_local_expert_; }
  int local_experts() const { return local_experts_; }
  // Buckets in the order backward completes them.
  int LayerDenseBucket(int layer) const { return layer_dense_bucket_[layer]; }
  int LayerExpertBucket(int layer) const { return layer_expert_bucket_[layer]; }
  int HeadBucket() const { return head_bucket_; }
  int EmbedBucket() const { return embed_bucket_; }

 private:
  void Add(const std::string& name, std::vector<int> shape, bool expert, float init_std);
  void CloseBucket(bool expert, int pad_multiple);
  std::vector<TensorInfo> tensors_;
  std::vector<Bucket> buckets_;
  size_t dense_size_ = 0, expert_size_ = 0;
  int first_local_expert_ = 0, local_experts_ = 0;
  std::vector<int> layer_dense_bucket_, layer_expert_bucket_;
  int head_bucket_ = 0, embed_bucket_ = 0;
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

// Deterministic init: a pure function of (seed, tensor name, global expert, element), so every
// EP layout starts from the same model.
void InitParams(const ParamLayout& layout, uint64_t seed, ParamBuffers* params);

}  // namespace moe

#endif  // MOE_TRAINER_PARAMS_H_
