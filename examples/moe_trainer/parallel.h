// parallel.h: the trainer's use of weft. Ranks form a PP x DP x EP x TP grid,
//   rank = (pp_rank * data_size + data_rank) * tp + tp_rank,   data_rank = dp_rank * ep + ep_rank,
// so a tensor-parallel group is tp consecutive ranks (the most frequent traffic, inside a
// layer), the data-parallel ranks (DP x EP, each reading its own share of the batch) of a
// (stage, tp rank) are every tp-th rank of the stage, and a pipeline is the ranks with the same
// (data, tp) coordinates. EP groups are runs of `ep` consecutive data-parallel ranks (they
// share tokens through all-to-all), and the expert data-parallel group of a rank is every
// ep-th one (the ranks holding the same expert slice). Each dimension has its communicator
// from weftCommSplit. Dense parameters are replicated over the data-parallel ranks (tensor-
// parallel ranks hold their part of the split ones and the same values of the others), so
// dense gradients are reduced over the data-parallel group and expert gradients over the
// expert data-parallel group; pipeline stages exchange activations and their gradients with
// grouped weftSend/weftRecv (pipeline.h).
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
#include "tensor_parallel.h"

namespace moe {

class Parallel {
 public:
  // Joins the job described by the launcher's environment (weftrun, torchrun, srun), or runs
  // alone when there is none.
  static Status Create(const TrainConfig& config, std::unique_ptr<Parallel>* out);
  // The same on a communicator the caller made (a shrunk or grown world); takes it over.
  static Status CreateOn(const TrainConfig& config, weftComm_t world,
                         std::unique_ptr<Parallel>* out);
  // A replacement process joining a running job by weftCommGrow as rank `rank` of n_ranks.
  static Status Join(const TrainConfig& config, const weftUniqueId& id, int rank, int n_ranks,
                     std::unique_ptr<Parallel>* out);
  ~Parallel();

  int world_size() const { return world_size_; }
  int world_rank() const { return world_rank_; }
  int ep_size() const { return ep_size_; }
  int ep_rank() const { return data_rank_ % ep_size_; }
  int expert_dp_size() const { return data_size_ / ep_size_; }
  int expert_dp_rank() const { return data_rank_ / ep_size_; }
  // Data-parallel ranks (DP x EP) and this rank's index among them: its share of each batch.
  int data_size() const { return data_size_; }
  int data_rank() const { return data_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_size() const { return pp_size_; }
  int pp_rank() const { return pp_rank_; }
  // The part of the model this rank holds.
  ModelShard shard() const;
  ExpertExchange* exchange() { return exchange_.get(); }
  // The tensor-parallel group; null without tensor parallelism.
  TensorParallel* tensor_parallel() { return tensor_parallel_.get(); }

  // One send or receive of floats to / from another pipeline stage.
  struct StageTransfer {
    bool send = false;
    int stage = 0;
    float* data = nullptr;
    size_t count = 0;
  };
  // Posts the transfers as one weft group over the pipeline communicator (so a send and a
  // receive between neighbouring stages cannot block each other) and waits for all of them.
  Status ExchangeStages(const std::vector<StageTransfer>& transfers);

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

  // --elastic (elastic.h). Whether weft knows a rank of the world has failed.
  bool PeerFailed() const;
  // Revokes the world, drains the streams and shrinks the world to the ranks not known to
  // have failed (WEFT_SHRINK_ABORT; survivors agree on the union). This Parallel is finished
  // afterwards: its destructor aborts its communicators instead of waiting for dead peers.
  Status ShrinkWorld(weftComm_t* survivors);
  // Sends send_count floats to the next rank of the world and receives recv_count from the
  // previous.
  Status ExchangeWithBuddy(const float* send, size_t send_count, float* recv, size_t recv_count);
  // Every rank's value, in rank order; the minimum over ranks; an elementwise sum.
  Status AllGatherInt(int mine, std::vector<int>* all);
  Status MinOverWorld(int* value);
  Status SumFloatsOverWorld(std::vector<float>* values);
  // Growing back (weftrun --replace): the id new processes join with, the grow itself (the
  // world's ranks keep theirs), and rank 0's data sent to every rank.
  Status GrowId(weftUniqueId* id);
  Status Grow(int n_ranks, weftComm_t* grown);
  Status BroadcastFromFirst(void* data, size_t count, weftDataType_t type);

  double comm_seconds() const { return comm_seconds_; }  // blocked in weft, cumulative

 private:
  Parallel() = default;
  // Validation, groups, timeouts and streams over world_ (Create and CreateOn).
  Status Finish();
  // A blocking in-place all-reduce over the world.
  Status AllReduceWorld(void* data, size_t count, weftDataType_t type, weftRedOp_t op,
                        const char* what);
  Status Check(weftResult_t result, weftComm_t comm, const char* what);
  // Places this rank in the grid and splits the world into the groups it belongs to.
  Status SplitGroups();
  Status Split(int color, int key, weftComm_t* out, const char* what);
  // --step-timeout on every communicator this rank holds.
  Status ApplyStepTimeout();
  // Sum of squares, over the buffer range, of the tensors whose gradient this rank counts.
  double OwnedSumSquares(const ParamLayout& layout, const ParamBuffers& grads,
                         const Segment& range) const;
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
  int tp_size_ = 1, tp_rank_ = 0, pp_size_ = 1, pp_rank_ = 0, data_size_ = 1, data_rank_ = 0;
  weftComm_t world_ = nullptr, ep_comm_ = nullptr, expert_dp_comm_ = nullptr;
  // data_ is world_ itself without tensor or pipeline parallelism (destroyed once).
  weftComm_t data_ = nullptr, tp_comm_ = nullptr, pp_comm_ = nullptr;
  std::unique_ptr<TensorParallel> tensor_parallel_;
  weftStream_t world_stream_ = nullptr, expert_stream_ = nullptr;
  std::unique_ptr<ExpertExchange> exchange_;
  bool compress_ = false, compress_dispatch_ = false;
  int step_ = 0;
  weftCompression grad_spec_{}, dispatch_spec_{}, combine_spec_{};  // combine: bf16
  std::vector<std::vector<float>> residuals_;
  std::unique_ptr<BucketWorker> world_worker_, expert_worker_;  // compressed + overlap only
  double comm_seconds_ = 0.0;
  bool abandoned_ = false;  // shrunk away from: abort, do not wait for the dead
  friend class WeftExpertExchange;
  friend class WeftTensorParallel;
};

}  // namespace moe

#endif  // MOE_TRAINER_PARALLEL_H_
