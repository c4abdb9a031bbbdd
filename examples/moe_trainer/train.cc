// train.cc: the MoE trainer program. Parses the configuration, joins the weft job (or runs
// alone), loads the fortunes, then trains: a progress line every --log-every steps, validation
// every --val-every, checkpoints every --checkpoint-every, and at the end a loss-curve PNG.
// Every error comes back here as a Status and ends the program with a message and exit 1.
//
//   weftrun -n 2 build/bin/moe_train --config default --plot loss.png
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include "balance.h"
#include "blas.h"
#include "checkpoint.h"
#include "data.h"
#include "elastic.h"
#include "trainer.h"

namespace moe {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU seconds of this process, all threads: with other jobs sharing the cores, tokens per
// CPU-second measures the implementation where wall-clock tokens/s measures the scheduler.
// Seconds since the epoch: compares the moment one process died with when another recovered.
double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

int DefaultThreads() {
  int local_ranks = 1;
  for (const char* name : {"WEFT_LOCAL_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(name)) {
      local_ranks = std::max(1, std::atoi(v));
      break;
    }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / local_ranks);
}

struct Curve {
  std::vector<std::pair<int, double>> train, val;
};

Status WritePlot(const std::string& png, const Curve& curve) {
  const std::string data = png + ".dat";
  {
    std::ofstream out(data);
    if (!out) return Status::Error("--plot " + png + ": cannot write " + data);
    out << "# step train_loss\n";
    for (auto& p : curve.train) out << p.first << " " << p.second << "\n";
    out << "\n\n# step val_loss\n";
    for (auto& p : curve.val) out << p.first << " " << p.second << "\n";
  }
  FILE* gp = popen("gnuplot 2>&1", "w");
  if (gp == nullptr) return Status::Error("--plot: cannot run gnuplot");
  std::fprintf(gp,
               "set terminal png size 900,560\nset output '%s'\nset xlabel 'step'\n"
               "set ylabel 'loss (nats/byte)'\nset grid\nset title 'MoE trainer on fortunes'\n"
               "plot '%s' index 0 with lines title 'train', '%s' index 1 with linespoints "
               "title 'validation'\n",
               png.c_str(), data.c_str(), data.c_str());
  if (pclose(gp) != 0)
    return Status::Error("--plot: gnuplot failed (is the 'gnuplot' package installed?)");
  return Status();
}

// FNV-1a over the bytes: replicas hold identical parameters exactly when their hashes match
// (up to a 2^-64 chance), which is what the compression tests check across ranks.
uint64_t Digest(const std::vector<float>& values) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

class Run {
 public:
  Status Main(int argc, char** argv);

 private:
  Status Setup(int argc, char** argv);
  Status Validation(int step);
  Status TrainOne(int step, Batch* batch, StepStats* stats);
  Status Rebalance(int step, double compute_seconds);
  void MakeValBatches();
  Status JoinOrCreate();
  // --kill-rank/--kill-step: this rank dies here as kill -9 would kill it.
  void MaybeKill(int step);
  // One step, then (--elastic) the ZeRO-1 mirror; a lost rank becomes a recovery, after
  // which *step is the one before the step to redo.
  Status StepOrRecover(int* step, Batch* batch, StepStats* stats, bool* done);
  void Progress(int step, const StepStats& s, double seconds, double comm_seconds, int steps);
  bool Leader() const { return parallel_->world_rank() == 0; }

  TrainConfig config_;
  std::unique_ptr<Parallel> parallel_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<Balancer> balancer_;
  std::unique_ptr<Elastic> elastic_;
  double failure_seen_ = -1.0;  // --elastic: when the last recovery began (Now())
  int join_step_ = -1;          // a replacement: the step it joined at
  FortunesData data_;
  std::vector<Batch> val_batches_;
  Curve curve_;
  FILE* loss_file_ = nullptr;
  double total_seconds_ = 0.0, total_comm_ = 0.0, total_cpu_ = 0.0;
  long total_tokens_ = 0;
  double last_val_ = 0.0;
};

Status Run::Setup(int argc, char** argv) {
  MOE_RETURN_IF_ERROR(ParseArgs(argc, argv, &config_));
  MOE_RETURN_IF_ERROR(JoinOrCreate());
  SetComputeThreads(config_.threads > 0 ? config_.threads : DefaultThreads());
  MOE_RETURN_IF_ERROR(data_.Load(config_.data_dir));
  balancer_.reset(new Balancer(config_, parallel_.get()));
  const int world = parallel_->world_size();
  MakeValBatches();
  if (Leader() && !config_.quiet)
    std::printf("moe_train: %d ranks (pp %d x dp %d x ep %d x tp %d), %d threads each, %s\n"
                "BLAS: %s\n"
                "data: %zu fortunes, %zu train / %zu val bytes; params: %zu dense + %zu expert "
                "per rank\n",
                world, config_.pp, parallel_->data_size() / config_.ep, config_.ep, config_.tp,
                ComputeThreads(),
                Describe(config_).c_str(), BlasDescription().c_str(), data_.fortunes(), data_.train_bytes(),
                data_.val_bytes(), trainer_->model().layout().dense_size(),
                trainer_->model().layout().expert_size());
  return Status();
}

// Each data rank evaluates its share of every validation batch.
void Run::MakeValBatches() {
  val_batches_.clear();
  for (int i = 0; i < config_.val_batches; ++i) {
    Batch b;
    data_.ValBatch(config_.seed, i, config_.batch, config_.model.seq_len, parallel_->data_rank(),
                   parallel_->data_size(), &b);
    val_batches_.push_back(std::move(b));
  }
}

// weftrun --replace starts a replacement for a killed rank with WEFTRUN_JOIN_SLOT set: it
// joins the running job by grow and receives the state (elastic.h) instead of starting one.
Status Run::JoinOrCreate() {
  const char* dir = std::getenv("WEFTRUN_JOIN_DIR");
  const std::string join_dir = dir != nullptr ? dir : "";
  if (const char* slot = std::getenv("WEFTRUN_JOIN_SLOT")) {
    if (!config_.elastic || join_dir.empty())
      return Status::Error(std::string("started as a replacement (WEFTRUN_JOIN_SLOT=") + slot +
                           ") without --elastic or WEFTRUN_JOIN_DIR");
    elastic_.reset(new Elastic(config_, std::atoi(slot), 0, join_dir));
    MOE_RETURN_IF_ERROR(elastic_->Join(&parallel_, &trainer_, &join_step_));
    config_.kill_ranks.clear(), config_.kill_step = -1;  // the hook was for the first world
    std::printf("rank %d: joined the job as a replacement at step %d\n", parallel_->world_rank(),
                join_step_);
    return Status();
  }
  MOE_RETURN_IF_ERROR(Parallel::Create(config_, &parallel_));
  trainer_.reset(new Trainer(config_, parallel_.get()));
  MOE_RETURN_IF_ERROR(trainer_->Init());
  if (config_.elastic)
    elastic_.reset(new Elastic(config_, parallel_->world_rank(), parallel_->world_size(), join_dir));
  return Status();
}

void Run::MaybeKill(int step) {
  const std::vector<int>& dying = config_.kill_ranks;
  if (step != config_.kill_step ||
      std::find(dying.begin(), dying.end(), parallel_->world_rank()) == dying.end())
    return;
  std::printf("rank %d: --kill-rank: dying at the start of step %d (unix time %.3f)\n",
              parallel_->world_rank(), step, UnixSeconds());
  std::fflush(stdout);
  raise(SIGKILL);
}

Status Run::StepOrRecover(int* step, Batch* batch, StepStats* stats, bool* done) {
  *done = false;
  if (elastic_) elastic_->Snapshot(*step, *trainer_);
  MaybeKill(*step);
  Status status = TrainOne(*step, batch, stats);
  if (status.ok() && elastic_) status = elastic_->Mirror(*trainer_, *parallel_);
  if (status.ok()) {
    *done = true;
    return status;
  }
  if (!elastic_ || !parallel_->PeerFailed()) return status;
  failure_seen_ = Now();
  // A recovery is printed even with --quiet: it is rare and the operator must see it.
  std::printf("rank %d: step %d failed: %s\n", parallel_->world_rank(), *step,
              status.message().c_str());
  int redo = *step;
  std::string note;
  MOE_RETURN_IF_ERROR(elastic_->Recover(*step, &parallel_, &trainer_, &redo, &note));
  config_.kill_ranks.clear(), config_.kill_step = -1;  // the hook fired; ranks are renumbered now
  balancer_.reset(new Balancer(config_, parallel_.get()));
  MakeValBatches();
  if (Leader())
    std::printf("step %5d | elastic: %s; continuing on %d ranks from step %d\n", *step,
                note.c_str(), parallel_->world_size(), redo);
  if (loss_file_) std::fprintf(loss_file_, "elastic %d %d %d\n", *step, redo, parallel_->world_size());
  *step = redo - 1;  // the loop's ++ makes it the step to redo
  return Status();
}

void Run::Progress(int step, const StepStats& s, double seconds, double comm, int steps) {
  if (!Leader() || config_.quiet) return;
  const double tokens = static_cast<double>(config_.batch) * config_.model.seq_len * steps;
  std::printf("step %5d | loss %.4f (ce %.4f aux %.2e z %.2e) | lr %.2e | norm %.3f | "
              "%7.0f tok/s | compute %6.1f ms comm %5.1f ms | max load %.2fx mean\n",
              step, s.loss, s.ce, s.aux, s.z, s.lr, s.grad_norm, tokens / seconds,
              1000.0 * (seconds - comm) / steps, 1000.0 * comm / steps, s.max_load);
  std::fflush(stdout);
}

Status Run::Validation(int step) {
  if (val_batches_.empty()) return Status();
  MOE_RETURN_IF_ERROR(trainer_->Evaluate(val_batches_, &last_val_));
  curve_.val.push_back({step, last_val_});
  if (Leader() && !config_.quiet) std::printf("step %5d | val loss %.4f\n", step, last_val_);
  if (loss_file_) std::fprintf(loss_file_, "val %d %.17g\n", step, last_val_);
  return Status();
}

// One step on this rank's share of the batch (slowed for --slow-rank R:F: the rank sleeps
// F - 1 times its compute time, inside the step's timing).
Status Run::TrainOne(int step, Batch* batch, StepStats* stats) {
  int first = 0, count = 0;
  balancer_->Share(&first, &count);
  data_.TrainSequences(config_.seed, step, config_.batch, config_.model.seq_len, first, count,
                       batch);
  const double t0 = Now(), c0 = parallel_->comm_seconds();
  MOE_RETURN_IF_ERROR(trainer_->TrainStep(step, *batch, stats));
  // The loss is summed over all ranks, so every rank stops here together.
  if (!std::isfinite(stats->loss))
    return Status::Error("step " + std::to_string(step) + ": the loss is " +
                         std::to_string(stats->loss) + " (training diverged; lower --lr, now " +
                         std::to_string(config_.lr) + ", or check --grad-clip)");
  if (parallel_->world_rank() == config_.slow_rank) {
    const double compute = (Now() - t0) - (parallel_->comm_seconds() - c0);
    std::this_thread::sleep_for(std::chrono::duration<double>((config_.slow_factor - 1) * compute));
  }
  return Status();
}

Status Run::Rebalance(int step, double compute_seconds) {
  bool changed = false;
  MOE_RETURN_IF_ERROR(balancer_->Record(compute_seconds, &changed));
  if (!changed) return Status();
  std::string shares;
  for (int s : balancer_->shares()) shares += " " + std::to_string(s);
  if (Leader() && !config_.quiet) std::printf("step %5d | balance: sequences per rank%s\n", step, shares.c_str());
  if (loss_file_) std::fprintf(loss_file_, "balance %d%s\n", step, shares.c_str());
  return Status();
}

Status Run::Main(int argc, char** argv) {
  MOE_RETURN_IF_ERROR(Setup(argc, argv));
  const int rank = parallel_->world_rank(), world = parallel_->world_size();
  int start = join_step_ >= 0 ? join_step_ : 0;
  if (config_.resume && join_step_ < 0)
    MOE_RETURN_IF_ERROR(LoadCheckpoint(config_.checkpoint_dir, rank, world, &start, trainer_.get()));
  if (Leader() && !config_.loss_file.empty()) {
    loss_file_ = std::fopen(config_.loss_file.c_str(), config_.resume ? "a" : "w");
    if (!loss_file_) return Status::Error("--loss-file " + config_.loss_file + ": cannot write");
  }
  const int end = config_.stop_after > 0 ? std::min(config_.steps, start + config_.stop_after)
                                         : config_.steps;
  double window_seconds = 0.0, window_comm = 0.0;
  int window_steps = 0;
  Batch batch;
  for (int step = start; step < end; ++step) {
    const double t0 = Now(), c0 = parallel_->comm_seconds(), cpu0 = ProcessCpuSeconds();
    StepStats stats;
    bool done = false;
    MOE_RETURN_IF_ERROR(StepOrRecover(&step, &batch, &stats, &done));
    if (!done) continue;
    if (failure_seen_ >= 0.0) {
      // Recovery time: from this rank seeing the failure to its first completed step after.
      std::printf("rank %d: elastic: recovered in %.3f s (failure seen to step %d done; "
                  "unix time %.3f)\n", parallel_->world_rank(), Now() - failure_seen_, step,
                  UnixSeconds());
      std::fflush(stdout);
      failure_seen_ = -1.0;
    }
    const double dt = Now() - t0, dc = parallel_->comm_seconds() - c0;
    MOE_RETURN_IF_ERROR(Rebalance(step, dt - dc));
    window_seconds += dt, window_comm += dc, ++window_steps;
    if (step > start) {  // the first step warms caches and allocations: not timed
      total_seconds_ += dt, total_comm_ += dc, total_cpu_ += ProcessCpuSeconds() - cpu0;
      total_tokens_ += config_.batch * config_.model.seq_len;
    }
    curve_.train.push_back({step, stats.loss});
    if (loss_file_) std::fprintf(loss_file_, "train %d %.17g %.17g\n", step, stats.loss, stats.ce);
    if (step % config_.log_every == 0 || step + 1 == config_.steps) {
      Progress(step, stats, window_seconds, window_comm, window_steps);
      window_seconds = window_comm = 0.0, window_steps = 0;
    }
    if (config_.val_every > 0 && ((step + 1) % config_.val_every == 0 || step + 1 == config_.steps))
      MOE_RETURN_IF_ERROR(Validation(step + 1));
    const bool save = !config_.checkpoint_dir.empty() &&
                      ((config_.checkpoint_every > 0 && (step + 1) % config_.checkpoint_every == 0) ||
                       step + 1 == end);
    if (save) {
      MOE_RETURN_IF_ERROR(SaveCheckpoint(config_.checkpoint_dir, parallel_->world_rank(),
                                         parallel_->world_size(), step + 1, trainer_.get()));
      MOE_RETURN_IF_ERROR(parallel_->Barrier());
    }
  }
  if (loss_file_) std::fclose(loss_file_);
  if (Leader() && !config_.quiet && total_seconds_ > 0)
    std::printf("done: steps %d-%d | last val loss %.4f | %.1f s | %.0f tok/s | %.0f tok/CPU-s "
                "(rank 0) | comm %.1f%% of step time\n",
                start, end - 1, last_val_, total_seconds_, total_tokens_ / total_seconds_,
                total_cpu_ > 0 ? total_tokens_ / total_cpu_ : 0.0,
                100.0 * total_comm_ / total_seconds_);
  if (config_.digest) {
    const ParamBuffers& p = trainer_->model().params;
    std::printf("params digest rank %d: dense %016llx experts %016llx\n", parallel_->world_rank(),
                static_cast<unsigned long long>(Digest(p.dense)),
                static_cast<unsigned long long>(Digest(p.expert)));
    const std::string traffic = parallel_->exchange()->TrafficReport();
    if (!traffic.empty())
      std::printf("expert exchange rank %d: %s\n", parallel_->world_rank(), traffic.c_str());
    std::fflush(stdout);
  }
  if (Leader() && !config_.plot_png.empty()) {
    MOE_RETURN_IF_ERROR(WritePlot(config_.plot_png, curve_));
    if (!config_.quiet) std::printf("loss curve: %s\n", config_.plot_png.c_str());
  }
  return Status();
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  moe::UseFastBlasKernel(argv);  // may re-execute this program (before anything else runs)
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("%s", moe::UsageText().c_str());
      return 0;
    }
  moe::Run run;
  moe::Status status = run.Main(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "moe_train: error: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
