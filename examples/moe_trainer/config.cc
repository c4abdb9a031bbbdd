// config.cc: presets, "--name value" parsing and validation of a TrainConfig.
#include "config.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include <weft/weft_compress.h>

namespace moe {

const char* RouterName(RouterKind kind) {
  return kind == RouterKind::kSoftmax ? "softmax" : "sigmoid";
}

int ModelConfig::Capacity() const {
  if (capacity_factor <= 0.0f) return 0;
  return static_cast<int>(std::ceil(capacity_factor * seq_len * top_k / experts));
}

namespace {

// The tiny preset is what the tests run: small enough for 2 ranks x 20 steps in seconds.
void ApplyPreset(const std::string& name, TrainConfig* c) {
  if (name == "tiny") {
    ModelConfig& m = c->model;
    m.dim = 32, m.layers = 2, m.heads = 4, m.seq_len = 32, m.experts = 8, m.top_k = 2;
    m.expert_hidden = 16, m.shared_experts = 1;
    c->batch = 8, c->steps = 20, c->warmup = 5, c->lr = 1e-2f;
    c->log_every = 5, c->val_every = 10, c->val_batches = 2;
  }
  // "default" is the struct's defaults.
}

using Setter = std::function<Status(const std::string&, TrainConfig*)>;

Status ParseInt(const std::string& name, const std::string& v, int* out) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') return Status::Error("--" + name + ": '" + v + "' is not an integer");
  if (errno == ERANGE || x < INT_MIN || x > INT_MAX)
    return Status::Error("--" + name + ": '" + v + "' is out of range (at most " +
                         std::to_string(INT_MAX) + ")");
  *out = static_cast<int>(x);
  return Status();
}

Status ParseFloat(const std::string& name, const std::string& v, float* out) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') return Status::Error("--" + name + ": '" + v + "' is not a number");
  if (!std::isfinite(x) || std::fabs(x) > 3.0e38)
    return Status::Error("--" + name + ": '" + v + "' is not a finite float32 number");
  *out = static_cast<float>(x);
  return Status();
}

#define INT_OPT(name, field) \
  {name, [](const std::string& v, TrainConfig* c) { return ParseInt(name, v, &c->field); }}
#define FLOAT_OPT(name, field) \
  {name, [](const std::string& v, TrainConfig* c) { return ParseFloat(name, v, &c->field); }}
#define STRING_OPT(name, field) \
  {name, [](const std::string& v, TrainConfig* c) { c->field = v; return Status(); }}

const std::map<std::string, Setter>& Options() {
  static const std::map<std::string, Setter> options = {
      INT_OPT("dim", model.dim), INT_OPT("layers", model.layers), INT_OPT("heads", model.heads),
      INT_OPT("seq-len", model.seq_len), INT_OPT("experts", model.experts),
      INT_OPT("top-k", model.top_k), INT_OPT("expert-hidden", model.expert_hidden),
      INT_OPT("shared-experts", model.shared_experts),
      FLOAT_OPT("capacity-factor", model.capacity_factor),
      FLOAT_OPT("aux-loss", model.aux_loss_coeff), FLOAT_OPT("z-loss", model.z_loss_coeff),
      FLOAT_OPT("bias-gamma", model.bias_gamma), INT_OPT("batch", batch), INT_OPT("steps", steps),
      INT_OPT("warmup", warmup), FLOAT_OPT("lr", lr), FLOAT_OPT("min-lr-ratio", min_lr_ratio),
      FLOAT_OPT("weight-decay", weight_decay), FLOAT_OPT("grad-clip", grad_clip),
      INT_OPT("ep", ep), INT_OPT("tp", tp), INT_OPT("pp", pp),
      INT_OPT("micro-batches", micro_batches), INT_OPT("threads", threads), INT_OPT("log-every", log_every),
      INT_OPT("val-every", val_every), INT_OPT("val-batches", val_batches),
      INT_OPT("checkpoint-every", checkpoint_every), INT_OPT("stop-after", stop_after),
      STRING_OPT("data", data_dir), STRING_OPT("checkpoint-dir", checkpoint_dir),
      STRING_OPT("loss-file", loss_file), STRING_OPT("plot", plot_png),
      STRING_OPT("compress", compress), STRING_OPT("compress-dispatch", compress_dispatch),
      INT_OPT("compress-after", compress_after), FLOAT_OPT("step-timeout", step_timeout),
      STRING_OPT("balance", balance), INT_OPT("balance-every", balance_every),
      INT_OPT("kill-step", kill_step),
      {"kill-rank",
       [](const std::string& v, TrainConfig* c) {  // R or R1,R2,...
         c->kill_ranks.clear();
         std::stringstream list(v);
         for (std::string item; std::getline(list, item, ',');) {
           int r = 0;
           MOE_RETURN_IF_ERROR(ParseInt("kill-rank", item, &r));
           c->kill_ranks.push_back(r);
         }
         return Status();
       }},
      {"slow-rank",
       [](const std::string& v, TrainConfig* c) {
         const size_t colon = v.find(':');
         if (colon == std::string::npos)
           return Status::Error("--slow-rank: '" + v + "' is not RANK:FACTOR (e.g. 1:2)");
         MOE_RETURN_IF_ERROR(ParseInt("slow-rank", v.substr(0, colon), &c->slow_rank));
         return ParseFloat("slow-rank", v.substr(colon + 1), &c->slow_factor);
       }},
      {"router",
       [](const std::string& v, TrainConfig* c) {
         if (v == "softmax") c->model.router = RouterKind::kSoftmax;
         else if (v == "sigmoid") c->model.router = RouterKind::kSigmoid;
         else return Status::Error("--router: '" + v + "' is not softmax or sigmoid");
         return Status();
       }},
      {"seed",
       [](const std::string& v, TrainConfig* c) {
         int s = 0;
         MOE_RETURN_IF_ERROR(ParseInt("seed", v, &s));
         c->seed = static_cast<uint64_t>(s);
         return Status();
       }},
  };
  return options;
}

const std::map<std::string, bool TrainConfig::*>& Flags() {
  static const std::map<std::string, bool TrainConfig::*> flags = {
      {"zero1", &TrainConfig::zero1}, {"resume", &TrainConfig::resume},
      {"quiet", &TrainConfig::quiet}, {"digest", &TrainConfig::digest},
      {"onebit-adam", &TrainConfig::onebit_adam}, {"elastic", &TrainConfig::elastic},
      {"sequence-parallel", &TrainConfig::sequence_parallel}};
  return flags;
}

}  // namespace

Status ParseArgs(int argc, char** argv, TrainConfig* config) {
  for (int i = 1; i + 1 < argc; ++i)  // the preset first, so other options override it
    if (std::string(argv[i]) == "--config") config->preset = argv[i + 1];
  if (config->preset != "tiny" && config->preset != "default")
    return Status::Error("--config: unknown preset '" + config->preset + "' (tiny, default)");
  ApplyPreset(config->preset, config);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return Status::Error("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2);
    if (name == "config") { ++i; continue; }
    if (name == "no-overlap") { config->overlap = false; continue; }
    auto flag = Flags().find(name);
    if (flag != Flags().end()) { config->*(flag->second) = true; continue; }
    auto option = Options().find(name);
    if (option == Options().end()) return Status::Error("unknown option '" + arg + "'");
    if (i + 1 >= argc) return Status::Error("option '" + arg + "' needs a value");
    MOE_RETURN_IF_ERROR(option->second(argv[++i], config));
  }
  if (config->onebit_adam && config->compress.empty()) config->compress = "1bit";
  return Status();
}

namespace {
// More compute threads than this is a typo, not a machine: thread creation would fail.
constexpr int kMaxThreads = 1024;

Status Require(bool ok, const std::string& message) {
  return ok ? Status() : Status::Error(message);
}
}  // namespace

Status ParseCompression(const std::string& option, const std::string& text, weftCompression* spec) {
  if (weftCompressionParse(text.c_str(), spec) == weftSuccess) return Status();
  return Status::Error("--" + option + " '" + text + "' is not a compression spec (int8, fp8, "
                       "1bit, ... as weftCompressionParse): " + weftGetLastError(nullptr));
}

// --compress: any codec weft has. --compress-dispatch: tokens are used as they arrive (no
// error feedback can repair them), so only codecs that keep every value approximately.
Status ValidateCompression(const TrainConfig& c) {
  weftCompression spec;
  if (!c.compress.empty()) MOE_RETURN_IF_ERROR(ParseCompression("compress", c.compress, &spec));
  if (c.compress_after < 0 || (c.compress_after > 0 && c.compress.empty()))
    return Status::Error("--compress-after " + std::to_string(c.compress_after) +
                         " must be >= 0 and needs --compress");
  if (c.onebit_adam && c.compress_after < 1)
    return Status::Error("--onebit-adam needs --compress-after N >= 1 (got " +
                         std::to_string(c.compress_after) + "): the full-precision warm-up "
                         "whose Adam variance it then freezes");
  if (c.onebit_adam && c.zero1)
    return Status::Error("--onebit-adam with --zero1: 1-bit Adam all-reduces whole momenta, "
                         "ZeRO-1 shards them; use one or the other");
  if (c.compress_dispatch.empty()) return Status();
  MOE_RETURN_IF_ERROR(ParseCompression("compress-dispatch", c.compress_dispatch, &spec));
  if (spec.codec == weftCodecTopK || spec.codec == weftCodecSign1)
    return Status::Error("--compress-dispatch '" + c.compress_dispatch + "': " +
                         weftCodecName(spec.codec) + " drops or flattens token values; use a "
                         "cast or block codec (fp8, int8, bf16, ...)");
  if (c.ep < 2)
    return Status::Error("--compress-dispatch '" + c.compress_dispatch + "' needs --ep >= 2 "
                         "(with --ep " + std::to_string(c.ep) + " no tokens are dispatched)");
  return Status();
}

// Sizes that fit an int one by one can still multiply past what a rank can hold (and past
// the int offsets the kernels use): the parameters and the largest activation are bounded.
Status ValidateSizes(const TrainConfig& c) {
  const ModelConfig& m = c.model;
  const double d = m.dim, hidden = static_cast<double>(m.expert_hidden) * (m.experts + m.shared_experts);
  const double params = m.layers * (4.0 * d * d + 3.0 * d * hidden + d * m.experts) + 2.0 * m.vocab * d;
  const double tokens = static_cast<double>(c.batch) * m.seq_len;
  const double activation = tokens * std::max({d, static_cast<double>(m.vocab),
                                               static_cast<double>(m.expert_hidden) * m.top_k,
                                               static_cast<double>(m.seq_len) * m.heads});
  constexpr double kMaxParams = 1e9, kMaxActivation = 1e9;
  std::ostringstream o;
  o << "--dim " << m.dim << ", --layers " << m.layers << ", --experts " << m.experts
    << ", --expert-hidden " << m.expert_hidden << ", --shared-experts " << m.shared_experts;
  if (params > kMaxParams)
    return Status::Error(o.str() + " give " + std::to_string(params) + " parameters; at most " +
                         std::to_string(kMaxParams) + " are supported (a float32 CPU trainer)");
  if (activation > kMaxActivation)
    return Status::Error("--batch " + std::to_string(c.batch) + " x --seq-len " +
                         std::to_string(m.seq_len) + " with " + o.str() + " give activations of " +
                         std::to_string(activation) + " values; at most " +
                         std::to_string(kMaxActivation) + " are supported");
  return Status();
}

// --tp x --pp x --ep and the data-parallel degree derived from the world size.
Status ValidateLayout(const TrainConfig& c, int world_size) {
  const ModelConfig& m = c.model;
  auto s = [](auto v) { return std::to_string(v); };
  for (auto [name, value] : {std::pair<const char*, int>{"ep", c.ep}, {"tp", c.tp}, {"pp", c.pp}})
    MOE_RETURN_IF_ERROR(Require(value >= 1, std::string("--") + name + " " + s(value) +
                                                " must be >= 1"));
  MOE_RETURN_IF_ERROR(Require(m.experts % c.ep == 0,
      "--experts " + s(m.experts) + " is not divisible by --ep " + s(c.ep)));
  MOE_RETURN_IF_ERROR(Require(m.heads % c.tp == 0,
      "--tp " + s(c.tp) + " must divide --heads " + s(m.heads) + " (heads are split)"));
  MOE_RETURN_IF_ERROR(Require(m.SharedHidden() % c.tp == 0 && m.vocab % c.tp == 0,
      "--tp " + s(c.tp) + " must divide the shared experts' hidden width " + s(m.SharedHidden()) +
      " (--shared-experts x --expert-hidden) and the vocabulary " + s(m.vocab)));
  MOE_RETURN_IF_ERROR(Require(m.layers % c.pp == 0,
      "--pp " + s(c.pp) + " must divide --layers " + s(m.layers) + " (equal stages)"));
  MOE_RETURN_IF_ERROR(Require(!c.sequence_parallel || (c.tp > 1 && m.seq_len % c.tp == 0),
      "--sequence-parallel needs --tp >= 2 dividing --seq-len " + s(m.seq_len) + " (got --tp " +
      s(c.tp) + "): each tensor-parallel rank holds 1/tp of the tokens"));
  MOE_RETURN_IF_ERROR(Require(world_size % (c.tp * c.pp) == 0,
      "--tp " + s(c.tp) + " x --pp " + s(c.pp) + " must divide the number of ranks " +
      s(world_size)));
  const int data_ranks = DataRanks(c, world_size);
  MOE_RETURN_IF_ERROR(Require(data_ranks % c.ep == 0,
      "--ep " + s(c.ep) + " must divide the number of ranks " + s(world_size) + " over --tp " +
      s(c.tp) + " x --pp " + s(c.pp) + " (" + s(data_ranks) + " data-parallel ranks)"));
  // --elastic keeps the global batch when ranks are lost: the survivors may share it unevenly
  // (balance.h apportions it; the loss is normalized by the global batch either way).
  MOE_RETURN_IF_ERROR(Require(c.batch > 0 && (c.batch % data_ranks == 0 ||
                                              (c.elastic && c.batch >= data_ranks)),
      "--batch " + s(c.batch) + " (global sequences per step) must be a positive multiple of the "
      "number of data-parallel ranks " + s(data_ranks) + " (ranks " + s(world_size) + " / (--tp " +
      s(c.tp) + " x --pp " + s(c.pp) + "))" + (c.elastic ? " or, with --elastic, at least that" : "")));
  const int local = c.batch / data_ranks;
  MOE_RETURN_IF_ERROR(Require(c.micro_batches >= 0 && local % MicroBatches(c) == 0,
      "--micro-batches " + s(MicroBatches(c)) + " must divide the " + s(local) +
      " sequences of each data-parallel rank (--batch " + s(c.batch) + " / " + s(data_ranks) + ")"));
  return Status();
}

Status ValidateBalance(const TrainConfig& c, int world_size) {
  auto s = [](auto v) { return std::to_string(v); };
  MOE_RETURN_IF_ERROR(Require(c.balance == "even" || c.balance == "measured",
      "--balance '" + c.balance + "' is not even or measured"));
  MOE_RETURN_IF_ERROR(Require(c.balance_every >= 1,
      "--balance-every " + s(c.balance_every) + " must be >= 1"));
  MOE_RETURN_IF_ERROR(Require(c.balance == "even" || (c.tp == 1 && c.pp == 1 &&
                                                      c.micro_batches <= 1),
      "--balance measured needs --tp 1, --pp 1 and one micro-batch (a rank's share of the "
      "batch changes from step to step)"));
  MOE_RETURN_IF_ERROR(Require(c.balance == "even" || c.batch >= DataRanks(c, world_size),
      "--balance measured: --batch " + s(c.batch) + " must give every data-parallel rank a "
      "sequence"));
  if (c.slow_rank < 0 && c.slow_factor == 1.0f) return Status();
  return Require(c.slow_rank >= 0 && c.slow_rank < world_size && c.slow_factor >= 1.0f &&
                 c.slow_factor <= 100.0f,
                 "--slow-rank " + s(c.slow_rank) + ":" + s(c.slow_factor) + ": the rank must be in "
                 "[0, " + s(world_size) + ") and the factor in [1, 100]");
}

// Recovery rebuilds a data-parallel layout on fewer ranks; the other dimensions would need
// their groups re-planned (an expert slice or stage can vanish with its rank).
static Status ValidateElastic(const TrainConfig& c, int world_size) {
  auto s = [](auto v) { return std::to_string(v); };
  if (c.elastic)
    MOE_RETURN_IF_ERROR(Require(c.ep == 1 && c.tp == 1 && c.pp == 1 && c.compress.empty() &&
                                    c.compress_dispatch.empty() && !c.onebit_adam,
        "--elastic supports data parallelism only (got --ep " + s(c.ep) + " --tp " + s(c.tp) +
        " --pp " + s(c.pp) + (c.compress.empty() ? "" : " --compress " + c.compress) + ")"));
  if (c.kill_ranks.empty() && c.kill_step < 0) return Status();
  bool ranks_ok = !c.kill_ranks.empty();
  std::string ranks;
  for (int r : c.kill_ranks) {
    ranks_ok = ranks_ok && r >= 0 && r < world_size;
    ranks += (ranks.empty() ? "" : ",") + s(r);
  }
  return Require(ranks_ok && c.kill_step >= 0,
                 "--kill-rank " + ranks + " --kill-step " + s(c.kill_step) + ": both are needed, "
                 "ranks in [0, " + s(world_size) + ") and the step >= 0");
}

Status Validate(const TrainConfig& c, int world_size) {
  const ModelConfig& m = c.model;
  auto s = [](auto v) { return std::to_string(v); };
  MOE_RETURN_IF_ERROR(ValidateCompression(c));
  MOE_RETURN_IF_ERROR(Require(m.dim > 0 && m.layers > 0 && m.heads > 0 && m.seq_len > 1,
                              "--dim, --layers, --heads must be > 0 and --seq-len > 1"));
  MOE_RETURN_IF_ERROR(Require(m.dim % m.heads == 0 && m.HeadDim() % 2 == 0,
      "--dim " + s(m.dim) + " must be a multiple of --heads " + s(m.heads) +
      " with an even head size (RoPE rotates pairs)"));
  MOE_RETURN_IF_ERROR(Require(m.experts > 0 && m.expert_hidden > 0 && m.shared_experts >= 0,
      "--experts and --expert-hidden must be > 0, --shared-experts >= 0"));
  MOE_RETURN_IF_ERROR(Require(m.top_k >= 1 && m.top_k <= m.experts,
      "--top-k " + s(m.top_k) + " must be between 1 and --experts " + s(m.experts)));
  MOE_RETURN_IF_ERROR(Require(m.capacity_factor >= 0.0f,
      "--capacity-factor " + s(m.capacity_factor) + " must be >= 0 (0 = dropless)"));
  MOE_RETURN_IF_ERROR(ValidateLayout(c, world_size));
  MOE_RETURN_IF_ERROR(ValidateBalance(c, world_size));
  MOE_RETURN_IF_ERROR(Require(c.steps > 0 && c.warmup >= 0 && c.warmup <= c.steps,
      "--steps must be > 0 and 0 <= --warmup <= --steps"));
  MOE_RETURN_IF_ERROR(Require(c.lr > 0 && c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1,
      "--lr must be > 0 and --min-lr-ratio in [0, 1]"));
  MOE_RETURN_IF_ERROR(ValidateSizes(c));
  MOE_RETURN_IF_ERROR(Require(c.threads >= 0 && c.threads <= kMaxThreads,
      "--threads " + s(c.threads) + " must be between 0 (automatic) and " + s(kMaxThreads)));
  MOE_RETURN_IF_ERROR(Require(c.stop_after >= 0,
      "--stop-after " + s(c.stop_after) + " must be >= 0 (0 = run every step)"));
  MOE_RETURN_IF_ERROR(Require(c.grad_clip >= 0.0f,
      "--grad-clip " + s(c.grad_clip) + " must be >= 0 (0 = no clipping)"));
  MOE_RETURN_IF_ERROR(Require(c.step_timeout >= 0.0f,
      "--step-timeout " + s(c.step_timeout) + " must be >= 0 seconds (0 = weft's default)"));
  MOE_RETURN_IF_ERROR(Require(c.checkpoint_every >= 0,
      "--checkpoint-every " + s(c.checkpoint_every) + " must be >= 0"));
  MOE_RETURN_IF_ERROR(Require(c.log_every > 0 && c.val_every >= 0 && c.val_batches >= 0,
      "--log-every must be > 0, --val-every and --val-batches >= 0"));
  MOE_RETURN_IF_ERROR(Require(!c.resume || !c.checkpoint_dir.empty(),
      "--resume needs --checkpoint-dir"));
  return ValidateElastic(c, world_size);
}

std::string Describe(const TrainConfig& c) {
  const ModelConfig& m = c.model;
  std::ostringstream o;
  o << "dim=" << m.dim << " layers=" << m.layers << " heads=" << m.heads
    << " seq_len=" << m.seq_len << " experts=" << m.experts << " top_k=" << m.top_k
    << " expert_hidden=" << m.expert_hidden << " shared=" << m.shared_experts
    << " router=" << RouterName(m.router) << " capacity_factor=" << m.capacity_factor
    << " batch=" << c.batch << " steps=" << c.steps << " warmup=" << c.warmup << " lr=" << c.lr
    << " ep=" << c.ep << " zero1=" << c.zero1 << " seed=" << c.seed;
  if (c.tp > 1) o << " tp=" << c.tp << (c.sequence_parallel ? " sequence_parallel=1" : "");
  if (c.balance != "even") o << " balance=" << c.balance << " balance_every=" << c.balance_every;
  if (c.pp > 1 || c.micro_batches > 0) o << " pp=" << c.pp << " micro_batches=" << MicroBatches(c);
  if (!c.compress.empty()) o << " compress=" << c.compress;
  if (c.compress_after > 0) o << " compress_after=" << c.compress_after;
  if (c.onebit_adam) o << " onebit_adam=1";
  if (!c.compress_dispatch.empty()) o << " compress_dispatch=" << c.compress_dispatch;
  return o.str();
}

std::string UsageText() {
  return "usage: moe_train [--config tiny|default] [--router softmax|sigmoid] [--ep N] [--zero1]\n"
         "  layout: --tp T (tensor parallel) --pp P (pipeline stages) --ep E (expert parallel);\n"
         "          data parallel = ranks / (T x P); --micro-batches M (1F1B, default P)\n"
         "          --sequence-parallel (with --tp: norms and residuals on 1/T of the tokens,\n"
         "           reduce-scatter + all-gather instead of all-reduce)\n"
         "          --balance even|measured (shares of the batch by measured speed, DP only)\n"
         "          --balance-every N (re-measure every N steps, default 10)\n"
         "          --slow-rank R:F (rank R computes F times slower: tests, demos)\n"
         "  model: --dim --layers --heads --seq-len --experts --top-k --expert-hidden\n"
         "         --shared-experts --capacity-factor (0 = dropless) --aux-loss --z-loss --bias-gamma\n"
         "  train: --batch (global) --steps --warmup --lr --min-lr-ratio --weight-decay --grad-clip\n"
         "         --seed --threads --no-overlap\n"
         "         --step-timeout S (weft timeout per communicator, default 60; 0 = weft's)\n"
         "  comm:  --compress int8|fp8|1bit|SPEC (gradients, error feedback per bucket)\n"
         "         --compress-after N (the first N steps uncompressed)\n"
         "         --onebit-adam (1-bit Adam: after the --compress-after warm-up, freeze Adam's\n"
         "           variance and all-reduce momenta with --compress, default 1bit)\n"
         "         --compress-dispatch fp8|SPEC (EP token dispatch; the combine then goes bf16)\n"
         "  ops:   --log-every --val-every --val-batches --data DIR --checkpoint-dir DIR\n"
         "         --checkpoint-every N --resume --stop-after N --loss-file F --plot F.png --quiet\n"
         "         --digest (every rank prints a hash of its parameters and, with EP, its\n"
         "         expert-exchange bytes at the end)\n"
         "  fault: --elastic (survive a lost rank: shrink, re-split the batch, continue; DP only)\n"
         "         --kill-rank R[,R...] --kill-step S (test hook: the ranks kill themselves at S)\n"
         "  launch N ranks with: weftrun -n N moe_train ...\n";
}

}  // namespace moe
