// tensor_parallel.h: what the model needs from its tensor-parallel group (Megatron-style):
// a sum over the group after each row-parallel product (attention output, shared expert, and
// the input gradients of column-parallel ones) and an all-gather of the vocabulary-split
// logits. Implemented over a weft communicator in parallel.cc; the model holds none when the
// group has one rank.
#ifndef MOE_TRAINER_TENSOR_PARALLEL_H_
#define MOE_TRAINER_TENSOR_PARALLEL_H_

#include <cstddef>

#include "status.h"

namespace moe {

class TensorParallel {
 public:
  virtual ~TensorParallel() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // data[0, count) summed over the group, in place; every rank gets the same values.
  virtual Status AllReduceSum(float* data, size_t count) = 0;
  // Rank r's send[0, count) lands at recv[r * count].
  virtual Status AllGather(const float* send, float* recv, size_t count) = 0;
};

}  // namespace moe

#endif  // MOE_TRAINER_TENSOR_PARALLEL_H_
