// tensor_parallel.cc: the held-row helpers of tensor_parallel.h.
#include "tensor_parallel.h"

namespace moe {

HeldRows RowsHeld(const TensorParallel* tp, int rows) {
  if (tp == nullptr || !tp->sequence_parallel()) return HeldRows{0, rows};
  const int run = rows / tp->size();  // --tp divides --seq-len (Validate), so any token count
  return HeldRows{tp->rank() * run, run};
}

Status ReduceToHeldRows(TensorParallel* tp, float* partial, int rows, int width, float** held) {
  *held = partial;
  if (tp == nullptr) return Status();
  const size_t width_z = static_cast<size_t>(width);
  if (!tp->sequence_parallel()) return tp->AllReduceSum(partial, static_cast<size_t>(rows) * width_z);
  const HeldRows mine = RowsHeld(tp, rows);
  *held = partial + static_cast<size_t>(mine.first) * width_z;
  return tp->ReduceScatterSum(partial, static_cast<size_t>(mine.count) * width_z);
}

Status GatherHeldRows(TensorParallel* tp, float* full, int rows, int width) {
  if (tp == nullptr || !tp->sequence_parallel()) return Status();
  const HeldRows mine = RowsHeld(tp, rows);
  const size_t count = static_cast<size_t>(mine.count) * width;
  return tp->AllGather(full + static_cast<size_t>(mine.first) * width, full, count);
}

}  // namespace moe
