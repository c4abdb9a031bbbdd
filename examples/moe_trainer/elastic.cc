// elastic.cc: see elastic.h.
#include "elastic.h"

#include <algorithm>

#include "checkpoint.h"

namespace moe {
namespace {

// Appends the floats of every array, or splits them back after the sum.
void Concat(const std::vector<std::vector<float>*>& arrays, std::vector<float>* flat) {
  flat->clear();
  for (const std::vector<float>* a : arrays) flat->insert(flat->end(), a->begin(), a->end());
}

void Split(const std::vector<float>& flat, const std::vector<std::vector<float>*>& arrays) {
  size_t at = 0;
  for (std::vector<float>* a : arrays) {
    std::copy(flat.begin() + at, flat.begin() + at + a->size(), a->begin());
    at += a->size();
  }
}

}  // namespace

void Elastic::Snapshot(int step, Trainer& trainer) {
  Saved& s = saved_[step % 2];
  s.step = step;
  s.params = trainer.model().params;
  s.m = trainer.optimizer().m;
  s.v = trainer.optimizer().v;
  s.mirror = mirror_;
  s.router_bias = trainer.model().router_bias;
}

Status Elastic::Mirror(Trainer& trainer, Parallel& parallel) {
  if (!config_.zero1 || parallel.world_size() == 1) return Status();
  std::vector<float> send = trainer.optimizer().m;
  send.insert(send.end(), trainer.optimizer().v.begin(), trainer.optimizer().v.end());
  std::vector<float> received(send.size());  // shards are equal: buckets pad to the group
  MOE_RETURN_IF_ERROR(parallel.ExchangeWithBuddy(send.data(), received.data(), send.size()));
  mirror_.swap(received);
  return Status();
}

// Without ZeRO-1 every survivor holds all of it. With ZeRO-1 each old rank's shard is added
// once, by its owner or, when the owner is dead, by the rank that mirrors it; the sum over the
// survivors of these disjoint pieces (zeros elsewhere) is the whole state, and `cover` counts
// which old ranks' shards arrived.
Status Elastic::Assemble(const Saved& saved, const std::vector<int>& old_ranks, int old_world,
                         Parallel& survivors, const ParamLayout& old_layout, FullState* state,
                         bool* complete) {
  state->Allocate(old_layout);
  state->params = saved.params;
  state->router_bias = saved.router_bias;
  *complete = true;
  if (!config_.zero1) {
    const std::vector<Segment> all = DataParallelSegments(old_layout, false, 1, 0);
    SegmentsToFull(all, saved.m, &state->m);
    SegmentsToFull(all, saved.v, &state->v);
    return Status();
  }
  std::vector<char> alive(old_world, 0);
  for (int r : old_ranks) alive[r] = 1;
  std::vector<float> cover(old_world, 0.0f);
  auto add = [&](int owner, std::vector<float> m, std::vector<float> v) {
    const std::vector<Segment> segs = DataParallelSegments(old_layout, true, old_world, owner);
    SegmentsToFull(segs, m, &state->m);
    SegmentsToFull(segs, v, &state->v);
    cover[owner] = 1.0f;
  };
  const int me = old_ranks[survivors.world_rank()];
  add(me, saved.m, saved.v);
  const int prev = (me + old_world - 1) % old_world;
  const size_t half = saved.mirror.size() / 2;
  if (!alive[prev] && half > 0)
    add(prev, std::vector<float>(saved.mirror.begin(), saved.mirror.begin() + half),
        std::vector<float>(saved.mirror.begin() + half, saved.mirror.end()));
  const std::vector<std::vector<float>*> arrays = {&state->m.dense, &state->m.expert,
                                                   &state->v.dense, &state->v.expert, &cover};
  std::vector<float> flat;
  Concat(arrays, &flat);
  MOE_RETURN_IF_ERROR(survivors.SumFloatsOverWorld(&flat));
  Split(flat, arrays);
  for (float c : cover) *complete = *complete && c > 0.0f;
  return Status();
}

Status Elastic::Recover(int failed_step, std::unique_ptr<Parallel>* parallel,
                        std::unique_ptr<Trainer>* trainer, int* redo_step, std::string* note) {
  const int old_rank = (*parallel)->world_rank(), old_world = (*parallel)->world_size();
  weftComm_t comm = nullptr;
  MOE_RETURN_IF_ERROR((*parallel)->ShrinkWorld(&comm));
  TrainConfig config = config_;
  config.kill_ranks.clear(), config.kill_step = -1;  // the test hook fires once
  std::unique_ptr<Parallel> next;
  MOE_RETURN_IF_ERROR(Parallel::CreateOn(config, comm, &next));
  std::vector<int> old_ranks;
  MOE_RETURN_IF_ERROR(next->AllGatherInt(old_rank, &old_ranks));
  int redo = failed_step;
  MOE_RETURN_IF_ERROR(next->MinOverWorld(&redo));
  const Saved& saved = saved_[redo % 2];
  if (saved.step != redo)
    return Status::Error("elastic: no saved state for step " + std::to_string(redo));
  FullState state;
  bool complete = false;
  MOE_RETURN_IF_ERROR(Assemble(saved, old_ranks, old_world, *next, (*trainer)->model().layout(),
                               &state, &complete));
  std::unique_ptr<Trainer> rebuilt(new Trainer(config, next.get()));
  MOE_RETURN_IF_ERROR(rebuilt->Init());
  *note = "lost " + std::to_string(old_world - next->world_size()) + " of " +
          std::to_string(old_world) + " ranks in step " + std::to_string(failed_step) + "; ";
  if (complete) {
    Install(state, rebuilt.get());
    *note += "state of step " + std::to_string(redo) + " kept in memory";
  } else {
    if (config_.checkpoint_dir.empty())
      return Status::Error("elastic: a ZeRO-1 shard was lost with its buddy (two adjacent "
                           "ranks) and there is no --checkpoint-dir to reload");
    MOE_RETURN_IF_ERROR(LoadCheckpoint(config_.checkpoint_dir, next->world_rank(),
                                       next->world_size(), &redo, rebuilt.get()));
    *note += "a ZeRO-1 shard had no living copy: reloaded the checkpoint of step " +
             std::to_string(redo) + " from " + config_.checkpoint_dir;
  }
  trainer->reset();  // it points at the old Parallel
  *trainer = std::move(rebuilt);
  *parallel = std::move(next);
  mirror_.clear();
  MOE_RETURN_IF_ERROR(Mirror(**trainer, **parallel));  // the new layout's shards
  *redo_step = redo;
  return Status();
}

}  // namespace moe
