// tensor_parallel.h: what the model needs from its tensor-parallel group (Megatron-style):
// a sum over the group after each row-parallel product (attention output, shared expert, and
// the input gradients of column-parallel ones) and an all-gather of the vocabulary-split
// logits. Implemented over a weft communicator in parallel.cc; the model holds none when the
// group has one rank.
//
// Sequence parallelism (Korthikanti et al. 2022, Megatron-SP; --sequence-parallel): between
// the column -> row blocks, where every rank would repeat the same token-wise work (RMSNorm,
// residual adds, the stage transfers), each rank holds one contiguous run of 1/size of a
// micro-batch's tokens (its "held rows"). A block's input is all-gathered from the runs before
// the column-parallel product, and its row-parallel partial output is reduce-scattered back
// into them instead of all-reduced (the same bytes: an all-reduce is a reduce-scatter and an
// all-gather). Backward mirrors it. Weights used on the held rows only (the norms') get a
// partial gradient on each rank, summed over the group.
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
  virtual bool sequence_parallel() const = 0;
  // data[0, count) summed over the group, in place; every rank gets the same values.
  virtual Status AllReduceSum(float* data, size_t count) = 0;
  // Rank r's send[0, count) lands at recv[r * count]; send may be recv + rank * count.
  virtual Status AllGather(const float* send, float* recv, size_t count) = 0;
  // data holds size * count floats; rank r's block data[r * count, (r + 1) * count) ends
  // summed over the group, in place (the other blocks are left undefined).
  virtual Status ReduceScatterSum(float* data, size_t count) = 0;
};

// The rows [first, first + count) of an [rows, width] activation this rank holds between the
// tensor-parallel blocks: all of them, or its run with sequence parallelism.
struct HeldRows {
  int first = 0, count = 0;
};
HeldRows RowsHeld(const TensorParallel* tp, int rows);
// Sums a partial [rows, width] row-parallel product over the group into the rows this rank
// holds: every row (all-reduce, in place) or its run (reduce-scatter, in place); *held points
// at them inside partial.
Status ReduceToHeldRows(TensorParallel* tp, float* partial, int rows, int width, float** held);
// Sequence parallelism: completes full [rows, width] from every rank's run (this rank's at
// full + first * width), in place. Otherwise every row is held already: nothing to do.
Status GatherHeldRows(TensorParallel* tp, float* full, int rows, int width);

}  // namespace moe

#endif  // MOE_TRAINER_TENSOR_PARALLEL_H_
