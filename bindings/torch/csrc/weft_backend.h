// WeftBackend: a c10d::Backend ("weft") that runs torch.distributed collectives on CPU and CUDA
// tensors through weft's public C API (include/weft/weft.h). CUDA calls are stream-ordered:
// issued on the caller's thread with the tensors' current stream, they return once weft queued
// them there (PendingOp; README "CUDA tensors"); what follows describes the host path.
//
// Phases of a call: the caller's thread checks the tensors (bad input raises at once, naming
// the argument), builds a PendingOp (an `issue` step that makes the weft calls and an optional
// `finish` step that copies out of staging buffers) and submits it:
//   - asynchronous calls (async_op=True, DDP's buckets) go to this backend's progress thread,
//     which runs them in submission order with weft's blocking calls, so backward keeps
//     computing while a bucket is on the wire; each Work completes when its op is done;
//   - blocking calls run inline on the caller's thread when nothing is queued (no thread
//     hand-off: the per-call overhead is weft's own plus tensor bookkeeping);
//   - between startCoalescing() and endCoalescing() ops are collected and run as one
//     weftGroupStart/End batch (batch_isend_irecv, coalesced collectives);
//   - isend/irecv (and send/recv) are held back until one of them is waited on (or a later
//     operation of another kind is submitted), then all held-back ones are posted as one weft
//     group. weft's calls block and a communicator serves one thread at a time, so posting
//     them one by one would let `irecv(peer); isend(peer)` on both ranks block each receive in
//     front of the send its peer waits for; as one group they progress together.
// Why not a weft host stream per backend: weftStreamSynchronize/Query report on the whole
// stream, not per operation, so a bucket's Future could not complete while later buckets are
// still queued; the progress thread is the same ordered worker with per-op completion.
//
// The communicator comes from torch's store: rank 0 creates a weftUniqueId (weft's root opens
// its own listener on an ephemeral port) and publishes it, secret included, through the store;
// the other ranks read it. Nothing is printed. Subgroups split the parent with weftCommSplit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <weft/weft.h>

#include "compression_spec.h"
#include "tensor_args.h"
#include "weft_work.h"

namespace weft_torch {

// One operation: weft calls, then (after they completed) copies out of staging buffers.
// An operation on CUDA tensors carries the stream it runs on: the tensors' device's current
// stream when it was submitted. It passes that stream to weft, which queues the work on it and
// returns; issue and finish then only enqueue, so they run on the submitting thread
// (RunDeviceBatch).
struct PendingOp {
  std::function<void()> issue;
  std::function<void()> finish;  // may be empty
  c10::intrusive_ptr<WeftWork> work;
  std::chrono::milliseconds timeout;  // negative: the communicator's timeout
  c10::optional<c10::Stream> stream;  // CUDA operations only
  // What weft's calls take: the CUDA stream (a cudaStream_t is a weftStream_t), or NULL
  // (blocking host call).
  weftStream_t WeftStream() const { return stream ? stream->native_handle() : nullptr; }
  bool StreamOrdered() const { return stream.has_value(); }
};

class WeftBackend : public c10d::Backend {
 public:
  // Collective over `size` processes: creates the communicator through `store`.
  WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              std::chrono::milliseconds timeout);
  // Adopts a communicator made by weftCommSplit.
  WeftBackend(weftComm_t comm, int rank, int size, std::chrono::milliseconds timeout);
  ~WeftBackend() override;

  const std::string getBackendName() const override { return "weft"; }
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }
  void setSequenceNumberForGroup() override {}
  void shutdown() override;
  void abort() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // torch.distributed.shrink_group: every surviving rank calls it with the same (sorted) ranks
  // to exclude; weftCommShrink builds the survivors' communicator (the excluded ranks may be
  // dead) and the new backend adopts it. shrink_flags are torch's SHRINK_DEFAULT (0) and
  // SHRINK_ABORT (1), which are weft's WEFT_SHRINK_DEFAULT and WEFT_SHRINK_ABORT.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts_override) override;
  // Parent-side participation of a rank that joins no subgroup (torch's new_group calls it on
  // non-members when the parent supports splitting).
  void splitNoColor();
  // Number of weftCommSplit calls made on this communicator (torch names split groups by it).
  int64_t splitCount() const { return split_count_; }
  std::string lastAlgorithm();
  // weftAllReduceCompressed on `tensor` in place (average or sum over the group), queued on the
  // progress thread; `residual` (float32, one per element, or none) is the caller's error
  // feedback and must not be touched until the Work completes (compressed_allreduce.cc).
  c10::intrusive_ptr<c10d::Work> allreduceCompressed(at::Tensor& tensor,
                                                     const CompressionSpec& spec,
                                                     const c10::optional<at::Tensor>& residual,
                                                     bool average);
  // The communicator, for the overhead probe only (bypasses ordering with queued work).
  weftComm_t RawComm() const { return Comm(); }

  // ---- collectives (collectives.cc) ----
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  struct Batch {
    std::vector<PendingOp> ops;
    c10::intrusive_ptr<WeftWork> group_work;  // endCoalescing's Work, or null
  };

  // A Work for tensors on `device` (none: host tensors). A CUDA Work's Future is CUDA-aware
  // and its completion checks the communicator's asynchronous error (CheckAsyncError).
  c10::intrusive_ptr<WeftWork> NewWork(c10d::OpType type, std::vector<at::Tensor> outputs,
                                       const c10::optional<at::Device>& device = c10::nullopt);
  // An operation for the tensors dev checked: its Work, timeout and (CUDA) current stream.
  PendingOp NewOp(const CallDevice& dev, c10d::OpType type, std::vector<at::Tensor> outputs,
                  std::chrono::milliseconds timeout);
  // Throws DistBackendError when a stream-ordered operation of this communicator failed after
  // it was queued (weftCommGetAsyncError); nothing once the communicator is gone.
  void CheckAsyncError();
  // all_gather with a different size per rank (collectives.cc): weftAllGatherV.
  c10::intrusive_ptr<c10d::Work> AllGatherUneven(std::vector<at::Tensor>& targets,
                                                 const at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts,
                                                 const CallDevice& dev);
  // A reduce-scatter of `flat` (every rank's block back to back, checked by the caller):
  // weftReduceScatter when counts is empty (even blocks), else weftReduceScatterV with counts
  // (elements per rank).
  c10::intrusive_ptr<c10d::Work> ReduceScatterFlat(at::Tensor& output, at::Tensor& flat,
                                                   std::vector<size_t> counts,
                                                   const c10d::ReduceScatterOptions& opts,
                                                   const CallDevice& dev, c10d::OpType type);
  // Runs now (blocking call, nothing queued) or queues for the progress thread.
  c10::intrusive_ptr<c10d::Work> Submit(PendingOp op, bool async_op);
  void Enqueue(Batch batch);
  // Runs a batch of stream-ordered CUDA operations on this thread, once the progress thread
  // is idle (operations reach weft in submission order): weft queues them on their stream.
  void RunDeviceBatch(Batch& batch);
  // Holds a send or receive back until FlushPointToPoint (or joins the coalescing block).
  c10::intrusive_ptr<c10d::Work> SubmitPointToPoint(PendingOp op);
  // Queues every held-back send and receive, in posting order, as one batch (one weft group).
  void FlushPointToPoint();
  // Runs add_ops' operations as one weft group: inside the caller's coalescing block (they
  // complete with it; add_ops' last Work is returned), or as a group of their own.
  c10::intrusive_ptr<c10d::Work> Coalesce(
      bool async_op, const std::function<c10::intrusive_ptr<c10d::Work>()>& add_ops);
  std::exception_ptr RunBatch(Batch& batch);
  void IssueAll(std::vector<PendingOp>& ops);
  static void CompleteBatch(Batch& batch, const std::exception_ptr& error);
  // Throws ValueError when op cannot join `others` in one weft group: CPU and CUDA operations,
  // or CUDA operations on different streams.
  static void CheckGroupable(const std::vector<PendingOp>& others, const PendingOp& op,
                             const char* what);
  void ProgressLoop();
  void StopProgressThread();
  void ApplyTimeout(std::chrono::milliseconds timeout);
  weftComm_t Comm() const;  // throws when shut down

  // What torch reads back (timeout, group name) and clones for split groups.
  c10::intrusive_ptr<Options> options_ = c10::make_intrusive<Options>("weft");
  std::atomic<weftComm_t> comm_{nullptr};
  std::atomic<double> timeout_seconds_{0};  // the communicator's timeout (setTimeout / creation)
  double applied_seconds_ = 0;   // what weft has now (per-op timeouts change it briefly)
  bool failed_ = false;          // a weft call failed: destroy by abort
  uint64_t sequence_ = 0;
  int64_t split_count_ = 0;
  bool coalescing_ = false;
  std::vector<PendingOp> coalesced_;

  // Sends and receives posted but not yet queued (p2p_mu_ is taken before queue_mu_).
  std::mutex p2p_mu_;
  std::vector<PendingOp> p2p_held_;

  // busy_ serializes the communicator between the progress thread and inline calls.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Batch> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread progress_;
};

}  // namespace weft_torch
