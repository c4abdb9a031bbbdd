// checkpoint.cc: the per-rank checkpoint file: a text header naming the configuration and
// layout (a resume with a different one is refused), then raw float32 arrays.
#include "checkpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <vector>

namespace moe {
namespace {

std::string Header(const Trainer& t, int world) {
  return "moe-ckpt 1 world=" + std::to_string(world) + " " + Describe(t.config()) + "\n";
}

// The arrays in file order.
std::vector<std::vector<float>*> Arrays(Trainer* t) {
  std::vector<std::vector<float>*> arrays = {&t->model().params.dense, &t->model().params.expert,
                                             &t->optimizer().m, &t->optimizer().v};
  for (auto& bias : t->model().router_bias) arrays.push_back(&bias);
  // Error-feedback residuals (--compress): what the codec still owes the next step.
  for (auto& residual : t->parallel().residuals())
    if (!residual.empty()) arrays.push_back(&residual);
  return arrays;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".ckpt";
}

Status SaveCheckpoint(const std::string& dir, int rank, int world, int next_step,
                      Trainer* trainer) {
  mkdir(dir.c_str(), 0755);  // may exist already; a failure shows up at open
  const std::string path = CheckpointPath(dir, rank), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Error("--checkpoint-dir " + dir + ": cannot write " + tmp);
    out << Header(*trainer, world) << "step " << next_step << "\n";
    for (std::vector<float>* a : Arrays(trainer)) {
      const uint64_t n = a->size();
      out.write(reinterpret_cast<const char*>(&n), sizeof(n));
      out.write(reinterpret_cast<const char*>(a->data()), n * sizeof(float));
    }
    if (!out) return Status::Error("writing " + tmp + " failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::Error("cannot rename " + tmp + " to " + path);
  return Status();
}

Status LoadCheckpoint(const std::string& dir, int rank, int world, int* next_step,
                      Trainer* trainer) {
  const std::string path = CheckpointPath(dir, rank);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("--resume: cannot open " + path);
  std::string header, step_line;
  std::getline(in, header);
  if (header + "\n" != Header(*trainer, world))
    return Status::Error("--resume: " + path + " was written by a different configuration or "
                         "layout:\n  file: " + header + "\n  now:  " + Header(*trainer, world));
  std::getline(in, step_line);
  if (std::sscanf(step_line.c_str(), "step %d", next_step) != 1)
    return Status::Error(path + ": bad step line '" + step_line + "'");
  for (std::vector<float>* a : Arrays(trainer)) {
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), sizeof(n));
    if (!in || n != a->size())
      return Status::Error(path + ": array of " + std::to_string(n) + " floats, expected " +
                           std::to_string(a->size()));
    in.read(reinterpret_cast<char*>(a->data()), n * sizeof(float));
    if (!in) return Status::Error(path + ": truncated");
  }
  return Status();
}

}  // namespace moe
