// parallel.h: the trainer's use of weft. Ranks form a DP x EP grid: EP groups are runs of `ep`
// consecutive ranks (they share tokens through all-to-all), and the expert data-parallel group
// of a rank is every ep-th rank (the ranks holding the same expert slice). Dense parameters
// are replicated on all ranks; every rank reads its own data, so dense gradients are reduced
// over the whole world and expert gradients over the expert data-parallel group.
//
// Gradient buckets are reduced on weft host streams as backward hands them over (all-reduce,
// or reduce-scatter for ZeRO-1); Finish() waits for them. With --compress they go through
// weft's compressed collectives instead, each bucket with its own error-feedback residual, on
// a BucketWorker thread per communicator (those calls block their caller). Time the main
// thread spends blocked in weft is counted as communication time.
#ifndef MOE_TRAINER_PARALLEL_H_
#define MOE_TRAINER_PARALLEL_H_

#include <memory>
#include <vector>

#include <weft/weft.h>
#include <weft/weft_compress.h>

#include "bucket_worker.h"
#include "config.h"
#include "expert_exchange.h"
#include "optimizer.h"
#include "params.h"
#include "status.h"

namespace moe {

class Parallel {
 public:
  // Joins the job described by the launcher's environment (weftrun, torchrun, srun), or runs
  // alone when there is none.
  static Status Create(const TrainConfig& config, std::unique_ptr<Parallel>* out);
  ~Parallel();

  int world_size() const { return world_size_; }
  int world_rank() const { return world_rank_; }
  int ep_size() const { return ep_size_; }
  int ep_rank() const { return world_rank_ % ep_size_; }
  int expert_dp_size() const { return world_size_ / ep_size_; }
  int expert_dp_rank() const { return world_rank_ / ep_size_; }
  ExpertExchange* exchange() { return exchange_.get(); }

  // Sizes per-layout state (the error-feedback residuals); call once before training.
  void Prepare(const ParamLayout& layout);
  // Error-feedback residuals, one per bucket (empty: not compressed); saved in checkpoints.
  std::vector<std::vector<float>>& residuals() { return residuals_; }
  // The step being computed: --compress-after keeps the first steps uncompressed.
  void set_step(int step) { step_ = step; }
  bool compressing() const { return compress_ && step_ >= config_.compress_after; }

  // How many ranks hold (and so reduce) this bucket's parameters: 1 when none share them.
  int BucketGroupSize(const Bucket& b) const;
  // The ranges of the parameter buffers this rank's optimizer updates.
  std::vector<Segment> OptimizerSegments(const ParamLayout& layout) const;
  // Called by backward for each finished bucket: starts its reduction (overlap on).
  Status BucketDone(const ParamLayout& layout, int bucket, ParamBuffers* grads);
  // Waits until every bucket is reduced (and reduces them now when overlap is off).
  Status FinishGradients(const ParamLayout& layout, ParamBuffers* grads);
  // ZeRO-1: gathers every bucket's updated shards into the full parameters.
  Status GatherParams(const ParamLayout& layout, ParamBuffers* params);
  // Sum of squares of the gradients this rank's optimizer sees, combined over ranks, so the
  // result is the squared norm of the full global gradient, the same on every rank.
  Status GradNormSquared(const ParamLayout& layout, const ParamBuffers& grads, double* out);
  // Sums doubles over all ranks (losses, expert counts); blocking.
  Status SumOverWorld(std::vector<double>* values);
  // Brings every rank to the same point (checkpoint writes).
  Status Barrier();

  double comm_seconds() const { return comm_seconds_; }  // blocked in weft, cumulative

 private:
  Parallel() = default;
  Status Check(weftResult_t result, weftComm_t comm, const char* what);
  // The communicator and stream that reduce a bucket; null comm = nothing to reduce.
  weftComm_t BucketComm(const Bucket& b) const;
  weftStream_t BucketStream(const Bucket& b) const;
  int BucketGroupRank(const Bucket& b) const;
  Status ReduceBucket(const ParamLayout& layout, int bucket, ParamBuffers* grads,
                      weftStream_t stream);
  Status ReduceBucketCompressed(const ParamLayout& layout, int bucket, ParamBuffers* grads);
  BucketWorker* BucketWorkerFor(const Bucket& b) const;

  TrainConfig config_;
  int world_size_ = 1, world_rank_ = 0, ep_size_ = 1;
  weftComm_t world_ = nullptr, ep_comm_ = nullptr, expert_dp_comm_ = nullptr;
  weftStream_t world_stream_ = nullptr, expert_stream_ = nullptr;
  std::unique_ptr<ExpertExchange> exchange_;
  bool compress_ = false, compress_dispatch_ = false;
  int step_ = 0;
  weftCompression grad_spec_{}, dispatch_spec_{};
  std::vector<std::vector<float>> residuals_;
  std::unique_ptr<BucketWorker> world_worker_, expert_worker_;  // compressed + overlap only
  double comm_seconds_ = 0.0;
  friend class WeftExpertExchange;
};

}  // namespace moe

#endif  // MOE_TRAINER_PARALLEL_H_
