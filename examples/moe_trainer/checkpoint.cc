// checkpoint.cc: the per-rank checkpoint file: a text header naming the configuration and
// layout (a resume with a different one is refused), then raw float32 arrays.
#include "checkpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "reshard.h"

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

namespace {

// Opens path and checks its header against `expected`; *next_step from the step line.
Status OpenCheckpoint(const std::string& path, const std::string& expected, std::ifstream* in,
                      int* next_step) {
  in->open(path, std::ios::binary);
  if (!*in) return Status::Error("--resume: cannot open " + path);
  std::string header, step_line;
  std::getline(*in, header);
  if (header + "\n" != expected)
    return Status::Error("--resume: " + path + " was written by a different configuration or "
                         "layout:\n  file: " + header + "\n  now:  " + expected);
  std::getline(*in, step_line);
  if (std::sscanf(step_line.c_str(), "step %d", next_step) != 1)
    return Status::Error(path + ": bad step line '" + step_line + "'");
  return Status();
}

Status ReadArrays(const std::string& path, std::ifstream& in,
                  const std::vector<std::vector<float>*>& arrays) {
  for (std::vector<float>* a : arrays) {
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

// The world a checkpoint directory was written by (rank 0's header), 0 when unreadable.
int SavedWorld(const std::string& dir) {
  std::ifstream in(CheckpointPath(dir, 0));
  std::string header;
  std::getline(in, header);
  int world = 0;
  return std::sscanf(header.c_str(), "moe-ckpt 1 world=%d", &world) == 1 ? world : 0;
}

// Data parallelism only: every old rank's file holds the parameters and its moments (all
// of them, or its ZeRO-1 shard); together they are the whole state, installed on this layout.
Status LoadResharded(const std::string& dir, int old_world, int* next_step, Trainer* trainer) {
  const TrainConfig& config = trainer->config();
  FullState state;
  state.Allocate(DataParallelLayout(config, old_world));
  state.data_ranks = old_world;
  state.router_bias = trainer->model().router_bias;
  for (int r = 0; r < old_world; ++r) {
    const std::string path = CheckpointPath(dir, r);
    std::ifstream in;
    int step = 0;
    MOE_RETURN_IF_ERROR(OpenCheckpoint(path, Header(*trainer, old_world), &in, &step));
    if (r > 0 && step != *next_step)
      return Status::Error(path + ": step " + std::to_string(step) + ", rank 0's file has " +
                           std::to_string(*next_step) + " (a checkpoint written half-way?)");
    *next_step = step;
    const std::vector<Segment> segs = DataParallelSegments(state.layout, config.zero1, old_world, r);
    size_t moments = 0;
    for (const Segment& s : segs) moments += s.count;
    std::vector<float> m(moments), v(moments);
    std::vector<std::vector<float>*> arrays = {&state.params.dense, &state.params.expert, &m, &v};
    for (auto& bias : state.router_bias) arrays.push_back(&bias);
    MOE_RETURN_IF_ERROR(ReadArrays(path, in, arrays));
    SegmentsToFull(segs, m, &state.m);
    SegmentsToFull(segs, v, &state.v);
  }
  Install(state, trainer);
  return Status();
}

bool DataParallelOnly(const TrainConfig& c) {
  return c.ep == 1 && c.tp == 1 && c.pp == 1 && c.compress.empty() && c.compress_dispatch.empty();
}

}  // namespace

// A checkpoint written by another number of ranks is resharded onto this one when the layout
// is data-parallel (--elastic's fallback, or a job resumed on fewer ranks); any other
// difference is refused.
Status LoadCheckpoint(const std::string& dir, int rank, int world, int* next_step,
                      Trainer* trainer) {
  const int saved_world = SavedWorld(dir);
  if (saved_world > 0 && saved_world != world && DataParallelOnly(trainer->config()))
    return LoadResharded(dir, saved_world, next_step, trainer);
  const std::string path = CheckpointPath(dir, rank);
  std::ifstream in;
  MOE_RETURN_IF_ERROR(OpenCheckpoint(path, Header(*trainer, world), &in, next_step));
  return ReadArrays(path, in, Arrays(trainer));
}

}  // namespace moe
