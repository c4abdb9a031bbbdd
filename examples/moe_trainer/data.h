// data.h: the fortunes corpus (Debian package `fortunes`, /usr/share/games/fortunes) as byte
// tokens. Every fortune of every collection (files in name order, the .dat indexes and .u8
// links skipped) is numbered; fortune i goes to validation when i % 20 == 0, the rest to
// training, so the split is deterministic. A batch is `batch` windows of seq_len + 1 bytes at
// positions drawn from a counter-based generator keyed by (seed, step, sequence): the global
// batch of a step does not depend on the number of ranks, each rank takes its contiguous share
// of it, and resuming at step k needs no loader state.
#ifndef MOE_TRAINER_DATA_H_
#define MOE_TRAINER_DATA_H_

#include <cstdint>
#include <string>

#include "model.h"
#include "status.h"

namespace moe {

class FortunesData {
 public:
  Status Load(const std::string& dir);
  size_t train_bytes() const { return train_.size(); }
  size_t val_bytes() const { return val_.size(); }
  size_t fortunes() const { return fortunes_; }
  // This rank's share (sequences [rank*B/W, (rank+1)*B/W)) of the global batch of `step`.
  void TrainBatch(uint64_t seed, int step, int global_batch, int seq_len, int rank, int ranks,
                  Batch* batch) const;
  // Sequences [first, first + count) of the global batch of `step` (uneven shares).
  void TrainSequences(uint64_t seed, int step, int global_batch, int seq_len, int first,
                      int count, Batch* batch) const;
  // Validation batch `index` (fixed windows, the same for every run with the same seed).
  void ValBatch(uint64_t seed, int index, int global_batch, int seq_len, int rank, int ranks,
                Batch* batch) const;

 private:
  // Sequences [first_sequence, + count) of the batch whose first index is `first`.
  void Sample(const std::string& text, uint64_t seed, uint64_t stream, uint64_t first,
              int seq_len, int first_sequence, int count, Batch* batch) const;
  std::string train_, val_;
  size_t fortunes_ = 0;
};

}  // namespace moe

#endif  // MOE_TRAINER_DATA_H_
