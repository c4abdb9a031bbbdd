// parallel.cc: communicators, gradient bucket reduction, ZeRO-1 sharding and the EP exchange,
// all through weft's public C API.
#include "parallel.h"

#include "reshard.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace moe {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool LauncherEnvironment() {
  for (const char* name : {"WEFT_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

// weft's default waiting policy (spin 5 us, then sched_yield for 1 ms, then sleep on a futex)
// assumes a rank owns its core while it waits. A trainer rank does not: its compute thread
// runs backward on that core while weft's stream thread waits for the peer's bucket, so
// spinning or yielding takes the core from the rank's own work (and, on a shared machine,
// from the peer's). The overlapped waits are hidden behind backward anyway, so the trainer
// sleeps at once unless the user chose a policy. Measured on the loaded 2-core VM
// (README, throughput): DP=2 +38% tokens/s, +14% tokens per CPU-second.
void ChooseWaitingPolicy() {
  setenv("WEFT_SPIN_US", "0", /*overwrite=*/0);
  setenv("WEFT_YIELD_US", "0", /*overwrite=*/0);
}

// Adds the time of a blocking weft call to the communication counter.
class CommTimer {
 public:
  explicit CommTimer(double* total) : total_(total), start_(Now()) {}
  ~CommTimer() { *total_ += Now() - start_; }

 private:
  double* total_;
  double start_;
};

}  // namespace

// Dispatch and combine over the EP communicator with weftAllToAllv; with --compress-dispatch
// the forward dispatch (its codec) and combine (bf16) go through weftAllToAllvCompressed.
class WeftExpertExchange : public ExpertExchange {
 public:
  WeftExpertExchange(Parallel* parallel, weftComm_t comm, int size, int rank)
      : parallel_(parallel), comm_(comm), size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  Status ExchangeCounts(const std::vector<size_t>& send, std::vector<size_t>* recv) override {
    std::vector<uint64_t> out(send.begin(), send.end()), in(send.size());
    CommTimer timer(&parallel_->comm_seconds_);
    MOE_RETURN_IF_ERROR(parallel_->Check(
        weftAllToAll(out.data(), in.data(), send.size() / size_, weftUint64, comm_, nullptr),
        comm_, "expert dispatch counts (weftAllToAll)"));
    recv->assign(in.begin(), in.end());
    return Status();
  }

  // The backward exchanges: float32.
  Status ExchangeRows(const float* send, const std::vector<size_t>& send_rows, float* recv,
                      const std::vector<size_t>& recv_rows, int width) override {
    return MoveRows(kBackward, send, send_rows, recv, recv_rows, width);
  }
  Status DispatchRows(const float* send, const std::vector<size_t>& send_rows, float* recv,
                      const std::vector<size_t>& recv_rows, int width) override {
    return MoveRows(kDispatch, send, send_rows, recv, recv_rows, width);
  }
  Status CombineRows(const float* send, const std::vector<size_t>& send_rows, float* recv,
                     const std::vector<size_t>& recv_rows, int width) override {
    return MoveRows(kCombine, send, send_rows, recv, recv_rows, width);
  }

  std::string TrafficReport() const override {
    static const char* const kNames[] = {"dispatch", "combine", "backward"};
    std::string line;
    for (int t = 0; t < kTrafficKinds; ++t) {
      const Traffic& k = traffic_[t];
      char part[160];
      std::snprintf(part, sizeof(part), "%s%s %s calls %llu float32 %llu wire %llu",
                    t ? " | " : "", kNames[t], k.codec, static_cast<unsigned long long>(k.calls),
                    static_cast<unsigned long long>(k.float_bytes),
                    static_cast<unsigned long long>(k.wire_bytes));
      line += part;
    }
    return line;
  }

 private:
  enum Kind { kDispatch, kCombine, kBackward, kTrafficKinds };
  struct Traffic {
    const char* codec = "float32";
    unsigned long long calls = 0, float_bytes = 0, wire_bytes = 0;
  };

  // The codec a kind of traffic travels with: null = float32 (weftAllToAllv).
  const weftCompression* SpecFor(Kind kind) const {
    if (!parallel_->compress_dispatch_ || kind == kBackward) return nullptr;
    return kind == kDispatch ? &parallel_->dispatch_spec_ : &parallel_->combine_spec_;
  }

  Status MoveRows(Kind kind, const float* send, const std::vector<size_t>& send_rows, float* recv,
                  const std::vector<size_t>& recv_rows, int width) {
    std::vector<size_t> send_counts(size_), send_displs(size_), recv_counts(size_),
        recv_displs(size_);
    size_t s = 0, r = 0;
    for (int p = 0; p < size_; ++p) {
      send_counts[p] = send_rows[p] * width, send_displs[p] = s, s += send_counts[p];
      recv_counts[p] = recv_rows[p] * width, recv_displs[p] = r, r += recv_counts[p];
    }
    const weftCompression* spec = SpecFor(kind);
    Count(kind, spec, send_counts);
    static float dummy;  // weft wants valid pointers even for empty buffers
    CommTimer timer(&parallel_->comm_seconds_);
    if (spec != nullptr)
      return parallel_->Check(
          weftAllToAllvCompressed(s ? send : &dummy, send_counts.data(), send_displs.data(),
                                  r ? recv : &dummy, recv_counts.data(), recv_displs.data(),
                                  weftFloat32, spec, comm_, nullptr),
          comm_, kind == kDispatch ? "compressed token dispatch (weftAllToAllvCompressed)"
                                   : "compressed expert combine (weftAllToAllvCompressed)");
    return parallel_->Check(
        weftAllToAllv(s ? send : &dummy, send_counts.data(), send_displs.data(),
                      r ? recv : &dummy, recv_counts.data(), recv_displs.data(), weftFloat32,
                      comm_, nullptr),
        comm_, "expert rows (weftAllToAllv)");
  }

  // Adds one call to the traffic report: the blocks bound for other ranks, in float32 and as
  // the codec encodes them (weftCompressedSize is exact: each block is encoded on its own).
  void Count(Kind kind, const weftCompression* spec, const std::vector<size_t>& send_counts) {
    Traffic& t = traffic_[kind];
    t.codec = spec ? weftCodecName(spec->codec) : "float32";
    ++t.calls;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || send_counts[p] == 0) continue;
      size_t wire = send_counts[p] * sizeof(float);
      if (spec != nullptr && weftCompressedSize(spec, send_counts[p], &wire) != weftSuccess)
        wire = 0;  // cannot happen for a validated spec; a report of 0 would show it
      t.float_bytes += send_counts[p] * sizeof(float);
      t.wire_bytes += wire;
    }
  }

  Parallel* parallel_;
  weftComm_t comm_;
  int size_, rank_;
  Traffic traffic_[kTrafficKinds];
};

// Sums and gathers over the tensor-parallel communicator (inside a layer: blocking).
class WeftTensorParallel : public TensorParallel {
 public:
  WeftTensorParallel(Parallel* parallel, weftComm_t comm, int size, int rank, bool sequence)
      : parallel_(parallel), comm_(comm), size_(size), rank_(rank), sequence_(sequence) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  bool sequence_parallel() const override { return sequence_; }
  Status AllReduceSum(float* data, size_t count) override {
    CommTimer timer(&parallel_->comm_seconds_);
    return parallel_->Check(weftAllReduce(data, data, count, weftFloat32, weftSum, comm_, nullptr),
                            comm_, "tensor-parallel all-reduce");
  }
  Status AllGather(const float* send, float* recv, size_t count) override {
    CommTimer timer(&parallel_->comm_seconds_);
    return parallel_->Check(weftAllGather(send, recv, count, weftFloat32, comm_, nullptr), comm_,
                            "tensor-parallel all-gather");
  }
  Status ReduceScatterSum(float* data, size_t count) override {
    CommTimer timer(&parallel_->comm_seconds_);
    return parallel_->Check(weftReduceScatter(data, data + rank_ * count, count, weftFloat32,
                                              weftSum, comm_, nullptr),
                            comm_, "tensor-parallel reduce-scatter (sequence parallel)");
  }

 private:
  Parallel* parallel_;
  weftComm_t comm_;
  int size_, rank_;
  bool sequence_;
};

Status Parallel::Check(weftResult_t result, weftComm_t comm, const char* what) {
  if (result == weftSuccess) return Status();
  return Status::Error(std::string(what) + " failed on rank " + std::to_string(world_rank_) +
                       ": " + weftGetErrorString(result) + ": " + weftGetLastError(comm));
}

Status Parallel::Create(const TrainConfig& config, std::unique_ptr<Parallel>* out) {
  std::unique_ptr<Parallel> p(new Parallel());
  p->config_ = config;
  if (LauncherEnvironment()) {
    ChooseWaitingPolicy();
    MOE_RETURN_IF_ERROR(p->Check(weftCommInitFromEnv(&p->world_), nullptr, "weftCommInitFromEnv"));
    weftCommCount(p->world_, &p->world_size_);
    weftCommUserRank(p->world_, &p->world_rank_);
  }
  MOE_RETURN_IF_ERROR(p->Finish());
  *out = std::move(p);
  return Status();
}

Status Parallel::CreateOn(const TrainConfig& config, weftComm_t world,
                          std::unique_ptr<Parallel>* out) {
  std::unique_ptr<Parallel> p(new Parallel());
  p->config_ = config;
  p->world_ = world;
  weftCommCount(world, &p->world_size_);
  weftCommUserRank(world, &p->world_rank_);
  MOE_RETURN_IF_ERROR(p->Finish());
  *out = std::move(p);
  return Status();
}

Status Parallel::Join(const TrainConfig& config, const weftUniqueId& id, int rank, int n_ranks,
                      std::unique_ptr<Parallel>* out) {
  ChooseWaitingPolicy();
  weftComm_t world = nullptr;
  if (weftCommGrow(nullptr, n_ranks, &id, rank, &world) != weftSuccess)
    return Status::Error("joining the job as rank " + std::to_string(rank) + " of " +
                         std::to_string(n_ranks) + " (weftCommGrow) failed: " +
                         weftGetLastError(nullptr));
  return CreateOn(config, world, out);
}

Status Parallel::Finish() {
  MOE_RETURN_IF_ERROR(Validate(config_, world_size_));
  // Validate has parsed both specs already; a failure here would be a bug, still reported.
  compress_ = !config_.compress.empty() && world_size_ > 1;
  if (compress_ && weftCompressionParse(config_.compress.c_str(), &grad_spec_) != weftSuccess)
    return Status::Error("--compress " + config_.compress + ": " + weftGetLastError(nullptr));
  compress_dispatch_ = !config_.compress_dispatch.empty();
  if (compress_dispatch_ &&
      weftCompressionParse(config_.compress_dispatch.c_str(), &dispatch_spec_) != weftSuccess)
    return Status::Error("--compress-dispatch " + config_.compress_dispatch + ": " +
                         weftGetLastError(nullptr));
  // The combine that goes with a compressed dispatch travels in bf16 (DeepEP's pairing).
  if (compress_dispatch_ && weftCompressionDefault(weftCodecBf16, &combine_spec_) != weftSuccess)
    return Status::Error(std::string("bf16 combine: ") + weftGetLastError(nullptr));
  MOE_RETURN_IF_ERROR(SplitGroups());
  MOE_RETURN_IF_ERROR(ApplyStepTimeout());
  if (data_size_ > 1)
    MOE_RETURN_IF_ERROR(Check(weftStreamCreate(&world_stream_), world_, "weftStreamCreate"));
  if (expert_dp_comm_ != nullptr)
    MOE_RETURN_IF_ERROR(Check(weftStreamCreate(&expert_stream_), world_, "weftStreamCreate"));
  if (compress_ && config_.overlap) {
    if (data_size_ > 1) world_worker_.reset(new BucketWorker());
    if (expert_dp_comm_ != nullptr) expert_worker_.reset(new BucketWorker());
  }
  return Status();
}

Status Parallel::Split(int color, int key, weftComm_t* out, const char* what) {
  return Check(weftCommSplit(world_, color, key, out), world_, what);
}

// Every rank makes the same weftCommSplit calls in the same order (they are collective); a
// dimension of size 1 needs no communicator.
Status Parallel::SplitGroups() {
  ep_size_ = config_.ep, tp_size_ = config_.tp, pp_size_ = config_.pp;
  data_size_ = DataRanks(config_, world_size_);
  tp_rank_ = world_rank_ % tp_size_;
  data_rank_ = world_rank_ / tp_size_ % data_size_;
  pp_rank_ = world_rank_ / (tp_size_ * data_size_);
  const int plane = pp_rank_ * tp_size_ + tp_rank_;  // one (stage, tp rank): its data ranks
  const int ep = ep_size_, d = data_rank_;
  data_ = world_;
  if (tp_size_ * pp_size_ > 1)
    MOE_RETURN_IF_ERROR(Split(plane, d, &data_, "weftCommSplit (data-parallel group)"));
  if (tp_size_ > 1) {
    MOE_RETURN_IF_ERROR(Split(world_rank_ / tp_size_, tp_rank_, &tp_comm_,
                              "weftCommSplit (tensor-parallel group)"));
    tensor_parallel_.reset(new WeftTensorParallel(this, tp_comm_, tp_size_, tp_rank_,
                                                  config_.sequence_parallel));
  }
  if (pp_size_ > 1)
    MOE_RETURN_IF_ERROR(Split(d * tp_size_ + tp_rank_, pp_rank_, &pp_comm_,
                              "weftCommSplit (pipeline group)"));
  if (ep > 1) {
    MOE_RETURN_IF_ERROR(Split(plane * (data_size_ / ep) + d / ep, d % ep, &ep_comm_,
                              "weftCommSplit (EP group)"));
    exchange_.reset(new WeftExpertExchange(this, ep_comm_, ep, d % ep));
    if (data_size_ / ep > 1)
      MOE_RETURN_IF_ERROR(Split(plane * ep + d % ep, d / ep, &expert_dp_comm_,
                                "weftCommSplit (expert data-parallel group)"));
  } else {
    exchange_.reset(new LocalExpertExchange());
  }
  return Status();
}

ModelShard Parallel::shard() const {
  ModelShard s;
  s.ep_size = ep_size_, s.ep_rank = ep_rank();
  s.tp_size = tp_size_, s.tp_rank = tp_rank_;
  s.pp_size = pp_size_, s.pp_rank = pp_rank_;
  return s;
}

Status Parallel::ExchangeStages(const std::vector<StageTransfer>& transfers) {
  if (transfers.empty()) return Status();
  CommTimer timer(&comm_seconds_);
  MOE_RETURN_IF_ERROR(Check(weftGroupStart(), pp_comm_, "weftGroupStart (pipeline)"));
  weftResult_t first_error = weftSuccess;
  for (const StageTransfer& t : transfers) {
    const weftResult_t r =
        t.send ? weftSend(t.data, t.count, weftFloat32, t.stage, pp_comm_, nullptr)
               : weftRecv(t.data, t.count, weftFloat32, t.stage, pp_comm_, nullptr);
    if (first_error == weftSuccess) first_error = r;
  }
  const weftResult_t end = weftGroupEnd();  // always: keeps this thread's group depth balanced
  MOE_RETURN_IF_ERROR(Check(first_error, pp_comm_, "pipeline send/recv (weftSend/weftRecv)"));
  return Check(end, pp_comm_, "pipeline send/recv (weftGroupEnd)");
}

Parallel::~Parallel() {
  world_worker_.reset();  // joins: nothing of theirs may run once the communicators go
  expert_worker_.reset();
  if (world_stream_) weftStreamDestroy(world_stream_);
  if (expert_stream_) weftStreamDestroy(expert_stream_);
  exchange_.reset();
  tensor_parallel_.reset();
  if (abandoned_) {  // elastic: the world is revoked and its dead ranks cannot answer
    weftCommAbort(world_);
    return;
  }
  weftCommDestroy(expert_dp_comm_);
  weftCommDestroy(ep_comm_);
  weftCommDestroy(pp_comm_);
  weftCommDestroy(tp_comm_);
  if (data_ != world_) weftCommDestroy(data_);
  weftCommDestroy(world_);
}

Status Parallel::ApplyStepTimeout() {
  if (config_.step_timeout <= 0.0f) return Status();  // weft's default (WEFT_TIMEOUT or 300 s)
  for (weftComm_t comm : {world_, ep_comm_, expert_dp_comm_, data_, tp_comm_, pp_comm_})
    if (comm != nullptr)
      MOE_RETURN_IF_ERROR(Check(weftCommSetTimeout(comm, config_.step_timeout), comm,
                                "weftCommSetTimeout (--step-timeout)"));
  return Status();
}

weftComm_t Parallel::BucketComm(const Bucket& b) const {
  if (!b.expert || ep_size_ == 1) return data_size_ > 1 ? data_ : nullptr;
  return expert_dp_comm_;  // null when every rank holds its own experts
}

weftStream_t Parallel::BucketStream(const Bucket& b) const {
  return (!b.expert || ep_size_ == 1) ? world_stream_ : expert_stream_;
}

int Parallel::BucketGroupSize(const Bucket& b) const {
  if (BucketComm(b) == nullptr) return 1;
  return b.expert && ep_size_ > 1 ? expert_dp_size() : data_size_;
}

int Parallel::BucketGroupRank(const Bucket& b) const {
  if (BucketComm(b) == nullptr) return 0;
  return b.expert && ep_size_ > 1 ? expert_dp_rank() : data_rank_;
}

std::vector<Segment> Parallel::OptimizerSegments(const ParamLayout& layout) const {
  if (!config_.zero1) return DataParallelSegments(layout, false, 1, 0);
  std::vector<Segment> segments;
  for (const Bucket& b : layout.buckets()) {
    const Shard s = ShardOf(b, BucketGroupSize(b), BucketGroupRank(b));
    if (s.count > 0) segments.push_back(Segment{b.expert, b.offset + s.begin, s.count});
  }
  return segments;
}

void Parallel::Prepare(const ParamLayout& layout) {
  residuals_.assign(layout.buckets().size(), std::vector<float>());
  if (!compress_) return;
  for (size_t i = 0; i < layout.buckets().size(); ++i) {
    const Bucket& b = layout.buckets()[i];
    if (BucketComm(b) != nullptr) residuals_[i].assign(b.count, 0.0f);  // zero: nothing owed yet
  }
}

BucketWorker* Parallel::BucketWorkerFor(const Bucket& b) const {
  return (!b.expert || ep_size_ == 1) ? world_worker_.get() : expert_worker_.get();
}

// The residual carries what the codec dropped from this bucket last step into the next, so
// the error does not accumulate (error feedback). Each bucket keeps its own: the codec's
// error depends on the bucket's values and the residual must meet the same elements again.
Status Parallel::ReduceBucketCompressed(const ParamLayout& layout, int bucket,
                                        ParamBuffers* grads) {
  const Bucket& b = layout.buckets()[bucket];
  weftComm_t comm = BucketComm(b);
  float* data = grads->BucketPtr(b);
  float* residual = residuals_[bucket].data();
  if (config_.zero1) {  // equal shards here (BucketPadGroup); in place like the plain path
    const Shard s = ShardOf(b, BucketGroupSize(b), BucketGroupRank(b));
    return Check(weftReduceScatterCompressed(data, data + s.begin, s.count,
                                             weftFloat32, weftSum, &grad_spec_, residual, comm,
                                             nullptr),
                 comm, "compressed gradient reduce-scatter (weftReduceScatterCompressed)");
  }
  return Check(weftAllReduceCompressed(data, data, b.count, weftFloat32, weftSum, &grad_spec_,
                                       residual, comm, nullptr),
               comm, "compressed gradient all-reduce (weftAllReduceCompressed)");
}

Status Parallel::ReduceBucket(const ParamLayout& layout, int bucket, ParamBuffers* grads,
                              weftStream_t stream) {
  const Bucket& b = layout.buckets()[bucket];
  weftComm_t comm = BucketComm(b);
  if (comm == nullptr || b.count == 0) return Status();
  if (compressing()) return ReduceBucketCompressed(layout, bucket, grads);
  float* data = grads->BucketPtr(b);
  if (config_.zero1) {  // in place: each rank's reduced shard lands where it was
    std::vector<size_t> counts, displs;
    ShardTable(b, BucketGroupSize(b), &counts, &displs);
    const size_t mine = displs[BucketGroupRank(b)];
    return Check(weftReduceScatterV(data, data + mine, counts.data(), weftFloat32, weftSum, comm,
                                    stream),
                 comm, "gradient reduce-scatter (weftReduceScatterV)");
  }
  return Check(weftAllReduce(data, data, b.count, weftFloat32, weftSum, comm, stream), comm,
               "gradient all-reduce");
}

Status Parallel::BucketDone(const ParamLayout& layout, int bucket, ParamBuffers* grads) {
  if (!config_.overlap) return Status();
  const Bucket& b = layout.buckets()[bucket];
  if (!compressing()) return ReduceBucket(layout, bucket, grads, BucketStream(b));
  BucketWorker* worker = BucketWorkerFor(b);
  if (worker == nullptr) return Status();  // no group to reduce over
  worker->Submit([this, &layout, bucket, grads] { return ReduceBucket(layout, bucket, grads, nullptr); });
  return Status();
}

Status Parallel::FinishGradients(const ParamLayout& layout, ParamBuffers* grads) {
  CommTimer timer(&comm_seconds_);
  if (!config_.overlap) {
    for (size_t i = 0; i < layout.buckets().size(); ++i)
      MOE_RETURN_IF_ERROR(ReduceBucket(layout, static_cast<int>(i), grads, nullptr));
    return Status();
  }
  if (world_worker_) MOE_RETURN_IF_ERROR(world_worker_->Wait());
  if (expert_worker_) MOE_RETURN_IF_ERROR(expert_worker_->Wait());
  if (world_stream_)
    MOE_RETURN_IF_ERROR(Check(weftStreamSynchronize(world_stream_), world_, "gradient stream"));
  if (expert_stream_)
    MOE_RETURN_IF_ERROR(Check(weftStreamSynchronize(expert_stream_), expert_dp_comm_,
                              "expert gradient stream"));
  return Status();
}

Status Parallel::GatherParams(const ParamLayout& layout, ParamBuffers* params) {
  if (!config_.zero1) return Status();
  CommTimer timer(&comm_seconds_);
  for (const Bucket& b : layout.buckets()) {
    weftComm_t comm = BucketComm(b);
    if (comm == nullptr || b.count == 0) continue;
    std::vector<size_t> counts, displs;
    ShardTable(b, BucketGroupSize(b), &counts, &displs);
    const int r = BucketGroupRank(b);
    float* data = params->BucketPtr(b);
    MOE_RETURN_IF_ERROR(Check(weftAllGatherV(data + displs[r], counts[r], data, counts.data(),
                                             displs.data(), weftFloat32, comm, BucketStream(b)),
                              comm, "parameter all-gather (weftAllGatherV)"));
  }
  if (world_stream_)
    MOE_RETURN_IF_ERROR(Check(weftStreamSynchronize(world_stream_), world_, "parameter stream"));
  if (expert_stream_)
    MOE_RETURN_IF_ERROR(Check(weftStreamSynchronize(expert_stream_), expert_dp_comm_,
                              "expert parameter stream"));
  return Status();
}

namespace {
double SumSquares(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}
}  // namespace

// An element of the global gradient is counted on one rank only: tensor-parallel ranks
// count the tensors split over them and the first of them the others; without ZeRO-1 the
// first rank of the (expert) data-parallel group counts its replicated buffers (with ZeRO-1
// the segments are already disjoint shards).
double Parallel::OwnedSumSquares(const ParamLayout& layout, const ParamBuffers& grads,
                                 const Segment& range) const {
  const bool expert_group = range.expert && ep_size_ > 1;
  if (!config_.zero1 && (expert_group ? expert_dp_rank() : data_rank_) != 0) return 0.0;
  const float* base = range.expert ? grads.expert.data() : grads.dense.data();
  double total = 0.0;
  for (const TensorInfo& t : layout.tensors()) {
    if (t.expert != range.expert || (t.split == TpSplit::kNone && tp_rank_ != 0)) continue;
    const size_t begin = std::max(t.offset, range.begin);
    const size_t end = std::min(t.offset + t.size, range.begin + range.count);
    if (begin < end) total += SumSquares(base + begin, end - begin);
  }
  return total;
}

Status Parallel::GradNormSquared(const ParamLayout& layout, const ParamBuffers& grads,
                                 double* out) {
  if (tp_size_ * pp_size_ > 1) {  // each rank holds part of the model: add up owned parts
    std::vector<double> total(1, 0.0);
    for (const Segment& s : OptimizerSegments(layout)) total[0] += OwnedSumSquares(layout, grads, s);
    MOE_RETURN_IF_ERROR(SumOverWorld(&total));
    *out = total[0];
    return Status();
  }
  if (config_.zero1) {  // every element of the global gradient is in exactly one shard
    std::vector<double> total(1, 0.0);
    for (const Segment& s : OptimizerSegments(layout))
      total[0] += SumSquares((s.expert ? grads.expert.data() : grads.dense.data()) + s.begin, s.count);
    MOE_RETURN_IF_ERROR(SumOverWorld(&total));
    *out = total[0];
    return Status();
  }
  // Dense gradients are identical everywhere. Experts: one sum per (layer, expert), gathered
  // over the EP group and added in global expert order, so every layout adds the same numbers
  // in the same order.
  double total = SumSquares(grads.dense.data(), grads.dense.size());
  std::vector<double> local;
  for (const TensorInfo& t : layout.tensors())
    if (t.expert && t.name.find("expert_w1") != std::string::npos) {
      const std::string prefix = t.name.substr(0, t.name.find('.') + 1);
      const size_t per_expert = t.size / t.shape[0];
      for (int e = 0; e < t.shape[0]; ++e) {
        double s = 0.0;
        for (const char* w : {"expert_w1", "expert_w3", "expert_w2"})
          s += SumSquares(grads.Ptr(layout.Get(prefix + w)) + e * per_expert, per_expert);
        local.push_back(s);
      }
    }
  std::vector<double> all(local.size() * ep_size_);
  if (ep_size_ > 1) {
    CommTimer timer(&comm_seconds_);
    MOE_RETURN_IF_ERROR(Check(weftAllGather(local.data(), all.data(), local.size(), weftFloat64,
                                            ep_comm_, nullptr),
                              ep_comm_, "gradient norm all-gather"));
  } else {
    all = local;
  }
  const int experts_local = layout.local_experts();
  const size_t per_rank = local.size(), layer_count = per_rank / experts_local;
  for (size_t l = 0; l < layer_count; ++l)
    for (int r = 0; r < ep_size_; ++r)
      for (int e = 0; e < experts_local; ++e) total += all[r * per_rank + l * experts_local + e];
  *out = total;
  return Status();
}

Status Parallel::AllReduceWorld(void* data, size_t count, weftDataType_t type, weftRedOp_t op,
                                const char* what) {
  if (world_size_ == 1 || count == 0) return Status();
  CommTimer timer(&comm_seconds_);
  return Check(weftAllReduce(data, data, count, type, op, world_, nullptr), world_, what);
}

Status Parallel::SumOverWorld(std::vector<double>* values) {
  return AllReduceWorld(values->data(), values->size(), weftFloat64, weftSum,
                        "all-reduce of step statistics");
}

Status Parallel::Barrier() {
  if (world_size_ == 1) return Status();
  CommTimer timer(&comm_seconds_);
  return Check(weftBarrier(world_, nullptr), world_, "barrier");
}

bool Parallel::PeerFailed() const {
  int count = 0;
  return world_ != nullptr && weftCommFailedRanks(world_, nullptr, 0, &count) == weftSuccess &&
         count > 0;
}

Status Parallel::ShrinkWorld(weftComm_t* survivors) {
  abandoned_ = true;
  weftCommRevoke(world_, 0);  // wakes the survivors still blocked in this step's collectives
  // The streams' queued reductions fail once the world is revoked; drain them so nothing of
  // this step still writes into the trainer's buffers.
  if (world_stream_) weftStreamSynchronize(world_stream_);
  int count = 0;
  MOE_RETURN_IF_ERROR(Check(weftCommFailedRanks(world_, nullptr, 0, &count), world_,
                            "weftCommFailedRanks"));
  std::vector<int> failed(count);
  if (count > 0) weftCommFailedRanks(world_, failed.data(), count, &count);
  return Check(weftCommShrink(world_, failed.data(), count, survivors, WEFT_SHRINK_ABORT), world_,
               "weftCommShrink");
}

Status Parallel::ExchangeWithBuddy(const float* send, size_t send_count, float* recv,
                                   size_t recv_count) {
  if (world_size_ == 1 || send_count + recv_count == 0) return Status();
  CommTimer timer(&comm_seconds_);
  const int next = (world_rank_ + 1) % world_size_;
  const int prev = (world_rank_ + world_size_ - 1) % world_size_;
  MOE_RETURN_IF_ERROR(Check(weftGroupStart(), world_, "weftGroupStart (buddy mirror)"));
  const weftResult_t sent = weftSend(send, send_count, weftFloat32, next, world_, nullptr);
  const weftResult_t got = weftRecv(recv, recv_count, weftFloat32, prev, world_, nullptr);
  const weftResult_t end = weftGroupEnd();  // always: keeps this thread's group depth balanced
  MOE_RETURN_IF_ERROR(Check(sent != weftSuccess ? sent : got, world_, "buddy mirror send/recv"));
  return Check(end, world_, "buddy mirror (weftGroupEnd)");
}

Status Parallel::AllGatherInt(int mine, std::vector<int>* all) {
  all->assign(world_size_, mine);
  if (world_size_ == 1) return Status();
  CommTimer timer(&comm_seconds_);
  return Check(weftAllGather(&mine, all->data(), 1, weftInt32, world_, nullptr), world_,
               "all-gather of one int");
}

Status Parallel::MinOverWorld(int* value) {
  return AllReduceWorld(value, 1, weftInt32, weftMin, "all-reduce (min)");
}

Status Parallel::SumFloatsOverWorld(std::vector<float>* values) {
  return AllReduceWorld(values->data(), values->size(), weftFloat32, weftSum,
                        "all-reduce of recovered state");
}

Status Parallel::GrowId(weftUniqueId* id) {
  return Check(weftCommGetUniqueId(world_, id), world_, "weftCommGetUniqueId");
}

Status Parallel::Grow(int n_ranks, weftComm_t* grown) {
  return Check(weftCommGrow(world_, n_ranks, nullptr, -1, grown), world_, "weftCommGrow");
}

Status Parallel::BroadcastFromFirst(void* data, size_t count, weftDataType_t type) {
  if (world_size_ == 1 || count == 0) return Status();
  CommTimer timer(&comm_seconds_);
  return Check(weftBroadcast(data, data, count, type, 0, world_, nullptr), world_,
               "broadcast of the training state");
}

}  // namespace moe
