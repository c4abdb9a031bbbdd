// golden_test.cc: the C++ model against its PyTorch twin (twin.py), both float32 on the CPU.
// A tiny reference file (golden_softmax.bin, golden_sigmoid.bin): load the twin's weights and
// batch, then check
//   logits          max |cpp - ref| <= 1e-4
//   every gradient  max |cpp - ref| <= 1e-3 * max |ref| (per tensor)
//   10 AdamW steps  |loss_cpp - loss_ref| <= 1e-4 at every step
// A replayed file (golden_default.bin: the default config's shape, "config replay 1"): the
// weights are moe_train's own (InitParams from the seed), which the twin rebuilt (rng.h
// ported), and each step has its own batch; check
//   initial weights  the twin's sampled elements equal ours (max |cpp - ref| <= 1e-6 |ref|)
//   step-0 gradient  at every sampled element: |cpp - ref| <= kGradRtol * max(|ref|, floor),
//                    floor = kGradFloor * max |ref| of the tensor (an element near zero is
//                    the difference of larger terms: its error is theirs, not its own size)
//   5 AdamW steps    |loss_cpp - loss_ref| <= kReplayLossTol at every step
// Usage: moe_golden_test FILE...   (exit 0 = all pass)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "blas.h"
#include "reference_file.h"
#include "trainer.h"

namespace moe {
namespace {

double MaxAbsDiff(const float* a, const float* b, size_t n, double* max_ref) {
  double diff = 0.0;
  *max_ref = 0.0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    *max_ref = std::max(*max_ref, std::fabs(static_cast<double>(b[i])));
  }
  return diff;
}

Status LoadWeights(const ReferenceFile& ref, Model* model) {
  for (const TensorInfo& t : model->layout().tensors()) {
    const ReferenceTensor* r = ref.Find("param." + t.name);
    if (r == nullptr || r->data.size() != t.size)
      return Status::Error("reference lacks param." + t.name + " of " + std::to_string(t.size) + " floats");
    std::memcpy(model->params.Ptr(t), r->data.data(), t.size * sizeof(float));
  }
  return Status();
}

// suffix: "" (one batch) or ".STEP" (a replayed run's batch of that step).
Status LoadBatch(const ReferenceFile& ref, const TrainConfig& c, Batch* batch,
                 const std::string& suffix = "") {
  const ReferenceTensor* in = ref.Find("inputs" + suffix);
  const ReferenceTensor* tg = ref.Find("targets" + suffix);
  if (in == nullptr || tg == nullptr) return Status::Error("reference lacks inputs/targets" + suffix);
  batch->sequences = c.batch;
  for (float v : in->data) batch->inputs.push_back(static_cast<int>(v));
  for (float v : tg->data) batch->targets.push_back(static_cast<int>(v));
  return Status();
}

using Report = std::function<void(const std::string& what, double diff, double limit)>;

// Measured (torch 2.15 twin; OpenBLAS's Prescott, Haswell and Zen kernels here): worst
// element 2.8e-5 of max(|ref|, floor), worst step loss 7.7e-7.
constexpr double kGradRtol = 1e-3, kGradFloor = 1e-2, kReplayLossTol = 1e-5;

// Element i of the n evenly spaced ones twin.py samples from a tensor of numel elements.
size_t SampleIndex(size_t i, size_t numel, size_t n) { return numel <= n ? i : i * numel / n; }

// The worst element of ours against the sampled reference: max |a - ref| / max(|ref|, floor).
double WorstRelative(const float* ours, size_t numel, const std::vector<float>& ref, size_t n) {
  double max_ref = 0.0;
  for (float r : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(r)));
  const double floor = std::max(kGradFloor * max_ref, 1e-30);
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = ours[SampleIndex(i, numel, n)], r = ref[i];
    worst = std::max(worst, std::fabs(a - r) / std::max(std::fabs(r), floor));
  }
  return worst;
}

// golden_default.bin: see the file comment.
Status CheckReplay(const ReferenceFile& ref, const TrainConfig& c, Trainer* trainer,
                   const Report& report) {
  const size_t n = std::stoul(ref.config.at("golden_sample"));
  const Model& model = trainer->model();
  double worst_param = 0.0;
  for (const TensorInfo& t : model.layout().tensors()) {
    const ReferenceTensor* p = ref.Find("param." + t.name);
    const ReferenceTensor* g = ref.Find("grad." + t.name);
    if (p == nullptr || g == nullptr || p->data.size() != std::min(n, t.size))
      return Status::Error("reference lacks the samples of " + t.name);
    for (size_t i = 0; i < p->data.size(); ++i) {
      const double a = model.params.Ptr(t)[SampleIndex(i, t.size, n)], r = p->data[i];
      worst_param = std::max(worst_param, std::fabs(a - r) / std::max(std::fabs(r), 1e-30));
    }
  }
  report("initial weights (rel.)", worst_param, 1e-6);
  const ReferenceTensor* losses = ref.Find("losses");
  if (losses == nullptr) return Status::Error("reference lacks losses");
  for (int step = 0; step < static_cast<int>(losses->data.size()); ++step) {
    Batch batch;
    MOE_RETURN_IF_ERROR(LoadBatch(ref, c, &batch, "." + std::to_string(step)));
    StepStats stats;
    MOE_RETURN_IF_ERROR(trainer->ComputeGradients(batch, &stats));
    if (step == 0)
      for (const TensorInfo& t : model.layout().tensors())
        report("grad " + t.name + " (elem.)",
               WorstRelative(model.grads.Ptr(t), t.size, ref.Find("grad." + t.name)->data, n),
               kGradRtol);
    report("step " + std::to_string(step) + " loss " + std::to_string(stats.loss),
           std::fabs(stats.loss - losses->data[step]), kReplayLossTol);
    MOE_RETURN_IF_ERROR(trainer->ApplyUpdate(step, &stats));
  }
  return Status();
}

// Returns the number of failed checks through *failures.
Status CheckFile(const std::string& path, int* failures) {
  ReferenceFile ref;
  MOE_RETURN_IF_ERROR(ref.Load(path));
  TrainConfig c;
  MOE_RETURN_IF_ERROR(ref.ToTrainConfig(&c));
  const bool replay = ref.config.count("replay") > 0;
  std::printf("== %s (router %s, capacity %d, dim %d, layers %d, %s)\n", path.c_str(),
              RouterName(c.model.router), c.model.Capacity(), c.model.dim, c.model.layers,
              replay ? "moe_train's weights and batches, replayed by the twin" : "twin's weights");
  std::unique_ptr<Parallel> parallel;
  MOE_RETURN_IF_ERROR(Parallel::Create(c, &parallel));
  Trainer trainer(c, parallel.get());
  MOE_RETURN_IF_ERROR(trainer.Init());
  const Report report = [&](const std::string& what, double diff, double limit) {
    const bool ok = diff <= limit;
    *failures += !ok;
    std::printf("%-6s %-34s diff %.3g (limit %.3g)\n", ok ? "ok" : "FAIL", what.c_str(), diff, limit);
  };
  if (replay) return CheckReplay(ref, c, &trainer, report);
  MOE_RETURN_IF_ERROR(LoadWeights(ref, &trainer.model()));
  Batch batch;
  MOE_RETURN_IF_ERROR(LoadBatch(ref, c, &batch));
  StepStats stats;
  MOE_RETURN_IF_ERROR(trainer.ComputeGradients(batch, &stats));
  double max_ref = 0.0;
  const ReferenceTensor* logits = ref.Find("logits");
  const std::vector<float>& ours = trainer.model().logits();
  if (logits == nullptr || logits->data.size() != ours.size()) return Status::Error("logits size");
  report("logits", MaxAbsDiff(ours.data(), logits->data.data(), ours.size(), &max_ref), 1e-4);
  report("loss", std::fabs(stats.loss - ref.Find("loss")->data[0]), 1e-4);
  for (const TensorInfo& t : trainer.model().layout().tensors()) {
    const ReferenceTensor* g = ref.Find("grad." + t.name);
    if (g == nullptr) return Status::Error("reference lacks grad." + t.name);
    const double diff = MaxAbsDiff(trainer.model().grads.Ptr(t), g->data.data(), t.size, &max_ref);
    report("grad " + t.name, diff, 1e-3 * max_ref);
  }
  const ReferenceTensor* losses = ref.Find("losses");
  if (losses == nullptr) return Status::Error("reference lacks losses");
  for (int step = 0; step < static_cast<int>(losses->data.size()); ++step) {
    if (step > 0) MOE_RETURN_IF_ERROR(trainer.ComputeGradients(batch, &stats));
    report("step " + std::to_string(step) + " loss " + std::to_string(stats.loss),
           std::fabs(stats.loss - losses->data[step]), 1e-4);
    MOE_RETURN_IF_ERROR(trainer.ApplyUpdate(step, &stats));
  }
  return Status();
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s GOLDEN_FILE...\n", argv[0]);
    return 2;
  }
  moe::SetComputeThreads(1);
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    moe::Status s = moe::CheckFile(argv[i], &failures);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
  }
  std::printf("%s: %d failed checks\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
