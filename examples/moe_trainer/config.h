// config.h: model and training configuration, the named presets, command-line parsing and the
// checks that turn a bad configuration into a clear error before any work starts.
#ifndef MOE_TRAINER_CONFIG_H_
#define MOE_TRAINER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace moe {

enum class RouterKind { kSoftmax, kSigmoid };
const char* RouterName(RouterKind kind);

struct ModelConfig {
  int vocab = 256;  // byte tokens
  int dim = 128;
  int layers = 4;
  int heads = 4;
  int seq_len = 128;
  int experts = 8;         // fine-grained routed experts per block
  int top_k = 2;
  int expert_hidden = 128;  // hidden width of one routed expert (SwiGLU)
  int shared_experts = 1;   // always-on experts, fused into one SwiGLU of shared*expert_hidden
  RouterKind router = RouterKind::kSoftmax;
  float capacity_factor = 0.0f;  // 0 = dropless; else capacity per expert per sequence
  float aux_loss_coeff = 1e-2f;  // softmax router: load-balancing loss (Megatron-Core)
  float z_loss_coeff = 1e-3f;    // softmax router: router z-loss
  float bias_gamma = 1e-3f;      // sigmoid router: aux-loss-free bias step (DeepSeek-V3)
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;
  int HeadDim() const { return dim / heads; }
  int SharedHidden() const { return shared_experts * expert_hidden; }
  // Tokens one expert accepts from one sequence; 0 = unlimited (dropless).
  int Capacity() const;
};

struct TrainConfig {
  ModelConfig model;
  std::string preset = "default";
  int batch = 16;  // global sequences per step, split over all ranks
  int steps = 400;
  int warmup = 40;
  float lr = 3e-3f;
  float min_lr_ratio = 0.1f;
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f;
  float grad_clip = 1.0f;
  uint64_t seed = 1337;
  int ep = 1;            // expert-parallel group size
  int tp = 1;            // tensor-parallel group size (attention heads, shared expert, LM head)
  int pp = 1;            // pipeline stages (contiguous runs of layers)
  int micro_batches = 0; // per step and data-parallel rank (1F1B); 0 = pp (1 without PP)
  // Megatron sequence parallelism with --tp: between the column -> row blocks (norms,
  // residuals, stage transfers) each tensor-parallel rank holds 1/tp of a micro-batch's tokens;
  // reduce-scatter and all-gather replace the row-parallel all-reduces (tensor_parallel.h).
  bool sequence_parallel = false;
  // Uneven data parallelism: "even" shares of the batch, or "measured": each data-parallel
  // rank's share proportional to its measured compute speed, re-measured every balance_every
  // steps (balance.h).
  std::string balance = "even";
  int balance_every = 10;
  int slow_rank = -1;        // --slow-rank R:F: rank R computes F times slower (tests, demos)
  float slow_factor = 1.0f;
  bool zero1 = false;    // shard optimizer state over data-parallel ranks
  bool overlap = true;   // all-reduce gradient buckets while backward continues
  int threads = 0;       // 0 = cores / local ranks
  int log_every = 20;
  int val_every = 100;
  int val_batches = 8;
  std::string data_dir = "/usr/share/games/fortunes";
  std::string checkpoint_dir;  // empty = no checkpoints
  int checkpoint_every = 0;
  bool resume = false;
  int stop_after = 0;  // stop after this many steps (tests resume); 0 = run all
  // weft timeout of every communicator (weftCommSetTimeout): a stalled rank fails the step
  // after this many seconds instead of weft's 300 s default; 0 = weft's default.
  float step_timeout = 60.0f;
  std::string loss_file;  // per-step losses (rank 0)
  std::string plot_png;   // loss curve, drawn with gnuplot at the end
  // Gradient compression (weft_compress.h spec, e.g. "int8", "fp8", "1bit"; empty = off):
  // DP buckets all-reduced (ZeRO-1: reduce-scattered) compressed, with error feedback per bucket.
  std::string compress;
  int compress_after = 0;  // the first N steps reduce uncompressed (warm-up, as 1-bit Adam)
  // 1-bit Adam (Tang et al. 2021, DeepSpeed): after the --compress-after warm-up, Adam's
  // variance is frozen and each rank's momentum (not its gradient) is all-reduced through the
  // --compress codec (default 1bit) with error feedback; see optimizer.h.
  bool onebit_adam = false;
  // EP token dispatch codec (e.g. "fp8"; empty = float32): the rows sent to the experts.
  std::string compress_dispatch;
  bool quiet = false;
  bool digest = false;    // every rank prints a hash of its parameters (+ EP traffic) at the end
  // --elastic: a lost rank does not end the job; the survivors shrink the communicator,
  // re-split the same global batch and continue from the failed step (elastic.h). Data
  // parallelism (with or without --zero1) only.
  bool elastic = false;
  // Test hook: the ranks in kill_ranks kill themselves (SIGKILL) at the start of kill_step.
  std::vector<int> kill_ranks;
  int kill_step = -1;
};

// Fills config from argv ("--name value"); --config PRESET is applied first.
Status ParseArgs(int argc, char** argv, TrainConfig* config);
// Data-parallel ranks (DP x EP) of a layout: the world over tensor- and pipeline-parallel.
inline int DataRanks(const TrainConfig& c, int world_size) { return world_size / (c.tp * c.pp); }
// Micro-batches per step on each data-parallel rank.
inline int MicroBatches(const TrainConfig& c) { return c.micro_batches > 0 ? c.micro_batches : c.pp; }
// Checks the configuration against the number of ranks.
Status Validate(const TrainConfig& config, int world_size);
std::string UsageText();
// One line describing the configuration (printed at start, stored in checkpoints).
std::string Describe(const TrainConfig& config);

}  // namespace moe

#endif  // MOE_TRAINER_CONFIG_H_
