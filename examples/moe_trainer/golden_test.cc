// golden_test.cc: the C++ model against its PyTorch twin (twin.py), both float32 on the CPU.
// For each reference file: load the twin's weights and batch, then check
//   logits          max |cpp - ref| <= 1e-4
//   every gradient  max |cpp - ref| <= 1e-3 * max |ref| (per tensor)
//   10 AdamW steps  |loss_cpp - loss_ref| <= 1e-4 at every step
// Usage: moe_golden_test FILE...   (exit 0 = all pass)
#include <cmath>
#include <cstdio>
#include <cstring>

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

Status LoadBatch(const ReferenceFile& ref, const TrainConfig& c, Batch* batch) {
  const ReferenceTensor* in = ref.Find("inputs");
  const ReferenceTensor* tg = ref.Find("targets");
  if (in == nullptr || tg == nullptr) return Status::Error("reference lacks inputs/targets");
  batch->sequences = c.batch;
  for (float v : in->data) batch->inputs.push_back(static_cast<int>(v));
  for (float v : tg->data) batch->targets.push_back(static_cast<int>(v));
  return Status();
}

// Returns the number of failed checks through *failures.
Status CheckFile(const std::string& path, int* failures) {
  ReferenceFile ref;
  MOE_RETURN_IF_ERROR(ref.Load(path));
  TrainConfig c;
  MOE_RETURN_IF_ERROR(ref.ToTrainConfig(&c));
  std::printf("== %s (router %s, capacity %d)\n", path.c_str(), RouterName(c.model.router),
              c.model.Capacity());
  std::unique_ptr<Parallel> parallel;
  MOE_RETURN_IF_ERROR(Parallel::Create(c, &parallel));
  Trainer trainer(c, parallel.get());
  MOE_RETURN_IF_ERROR(trainer.Init());
  MOE_RETURN_IF_ERROR(LoadWeights(ref, &trainer.model()));
  Batch batch;
  MOE_RETURN_IF_ERROR(LoadBatch(ref, c, &batch));
  StepStats stats;
  MOE_RETURN_IF_ERROR(trainer.ComputeGradients(batch, &stats));
  auto report = [&](const std::string& what, double diff, double limit) {
    const bool ok = diff <= limit;
    *failures += !ok;
    std::printf("%-6s %-28s diff %.3g (limit %.3g)\n", ok ? "ok" : "FAIL", what.c_str(), diff, limit);
  };
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
