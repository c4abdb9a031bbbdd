// elastic.cc: see elastic.h.
#include "elastic.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

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
  // The previous rank's shard may be a few floats longer or shorter than this one's.
  const int world = parallel.world_size(), prev = (parallel.world_rank() + world - 1) % world;
  size_t prev_count = 0;
  for (const Segment& seg : DataParallelSegments(trainer.model().layout(), true, world, prev))
    prev_count += 2 * seg.count;  // its m and v
  std::vector<float> received(prev_count);
  MOE_RETURN_IF_ERROR(
      parallel.ExchangeWithBuddy(send.data(), send.size(), received.data(), received.size()));
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
  state->data_ranks = old_world;
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
  // No mirror yet: the loss is in this process's first step. From step 0 every moment is
  // zero, which the buffers already hold; a resumed run's first step finds no copy and reloads
  // the checkpoint it resumed from, which is that step's state.
  if (!alive[prev] && half == 0 && saved.step == 0) cover[prev] = 1.0f;
  const std::vector<std::vector<float>*> arrays = {&state->m.dense, &state->m.expert,
                                                   &state->v.dense, &state->v.expert, &cover};
  std::vector<float> flat;
  Concat(arrays, &flat);
  MOE_RETURN_IF_ERROR(survivors.SumFloatsOverWorld(&flat));
  Split(flat, arrays);
  for (float c : cover) *complete = *complete && c > 0.0f;
  return Status();
}

std::string JoinPath(const std::string& dir, int slot) {
  return dir + "/join." + std::to_string(slot);
}

// The join file: the grow id, then the newcomer's rank and the grown size. Written under a
// temporary name and renamed, so a newcomer never reads half of it.
struct JoinTicket {
  weftUniqueId id;
  int rank = 0, n_ranks = 0;
};

Status Elastic::GrowBack(std::unique_ptr<Parallel>* parallel) {
  std::vector<int> slots;
  MOE_RETURN_IF_ERROR((*parallel)->AllGatherInt(slot_, &slots));
  std::vector<int> lost;
  for (int s = 0; s < job_size_; ++s)
    if (std::find(slots.begin(), slots.end(), s) == slots.end()) lost.push_back(s);
  if ((*parallel)->world_rank() == 0) {
    JoinTicket ticket;
    MOE_RETURN_IF_ERROR((*parallel)->GrowId(&ticket.id));
    ticket.n_ranks = job_size_;
    for (size_t i = 0; i < lost.size(); ++i) {
      ticket.rank = (*parallel)->world_size() + static_cast<int>(i);
      const std::string path = JoinPath(join_dir_, lost[i]), tmp = path + ".tmp";
      std::ofstream(tmp, std::ios::binary)
          .write(reinterpret_cast<const char*>(&ticket), sizeof(ticket));
      if (std::rename(tmp.c_str(), path.c_str()) != 0)
        return Status::Error("elastic: cannot write the join file " + path);
    }
  }
  weftComm_t grown = nullptr;
  MOE_RETURN_IF_ERROR((*parallel)->Grow(job_size_, &grown));
  parallel->reset();  // the smaller world: nothing in flight, destroyed normally
  return Parallel::CreateOn(config_, grown, parallel);
}

Status Elastic::ShareState(Parallel& parallel, FullState* state, int* step, bool* complete) {
  int header[3] = {*step, state->data_ranks, *complete ? 1 : 0};
  MOE_RETURN_IF_ERROR(parallel.BroadcastFromFirst(header, 3, weftInt32));
  *step = header[0], *complete = header[2] != 0;
  if (parallel.world_rank() != 0) {  // a newcomer: sized as rank 0's
    state->Allocate(DataParallelLayout(config_, header[1]));
    state->data_ranks = header[1];
    state->router_bias.assign(config_.model.layers,
                              std::vector<float>(config_.model.experts, 0.0f));
  }
  if (!*complete) return Status();  // every rank reloads the checkpoint instead
  std::vector<std::vector<float>*> arrays = {&state->params.dense, &state->params.expert,
                                             &state->m.dense,      &state->m.expert,
                                             &state->v.dense,      &state->v.expert};
  for (auto& bias : state->router_bias) arrays.push_back(&bias);
  std::vector<float> flat;
  Concat(arrays, &flat);
  MOE_RETURN_IF_ERROR(parallel.BroadcastFromFirst(flat.data(), flat.size(), weftFloat32));
  Split(flat, arrays);
  return Status();
}

Status Elastic::Rebuild(Parallel* parallel, const FullState& state, bool complete, int* step,
                        std::unique_ptr<Trainer>* trainer, std::string* note) {
  std::unique_ptr<Trainer> rebuilt(new Trainer(config_, parallel));
  MOE_RETURN_IF_ERROR(rebuilt->Init());
  if (complete) {
    Install(state, rebuilt.get());
    *note += "state of step " + std::to_string(*step) + " kept in memory";
  } else {
    if (config_.checkpoint_dir.empty())
      return Status::Error("elastic: a ZeRO-1 shard was lost with its buddy (two adjacent "
                           "ranks) and there is no --checkpoint-dir to reload");
    MOE_RETURN_IF_ERROR(LoadCheckpoint(config_.checkpoint_dir, parallel->world_rank(),
                                       parallel->world_size(), step, rebuilt.get()));
    *note += "a ZeRO-1 shard had no living copy: reloaded the checkpoint of step " +
             std::to_string(*step) + " from " + config_.checkpoint_dir;
  }
  *trainer = std::move(rebuilt);
  return Status();
}

Status Elastic::Recover(int failed_step, std::unique_ptr<Parallel>* parallel,
                        std::unique_ptr<Trainer>* trainer, int* redo_step, std::string* note) {
  const int old_rank = (*parallel)->world_rank(), old_world = (*parallel)->world_size();
  weftComm_t comm = nullptr;
  MOE_RETURN_IF_ERROR((*parallel)->ShrinkWorld(&comm));
  std::unique_ptr<Parallel> next;
  MOE_RETURN_IF_ERROR(Parallel::CreateOn(config_, comm, &next));
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
  *note = "lost " + std::to_string(old_world - next->world_size()) + " of " +
          std::to_string(old_world) + " ranks in step " + std::to_string(failed_step) + "; ";
  if (!join_dir_.empty() && next->world_size() < job_size_) {
    MOE_RETURN_IF_ERROR(GrowBack(&next));
    MOE_RETURN_IF_ERROR(ShareState(*next, &state, &redo, &complete));
    *note += "grown back to " + std::to_string(job_size_) + " ranks by replacements; ";
  }
  std::unique_ptr<Trainer> rebuilt;
  MOE_RETURN_IF_ERROR(Rebuild(next.get(), state, complete, &redo, &rebuilt, note));
  trainer->reset();  // it points at the old Parallel
  *trainer = std::move(rebuilt);
  *parallel = std::move(next);
  mirror_.clear();
  MOE_RETURN_IF_ERROR(Mirror(**trainer, **parallel));  // the new layout's shards
  *redo_step = redo;
  return Status();
}

Status Elastic::Join(std::unique_ptr<Parallel>* parallel, std::unique_ptr<Trainer>* trainer,
                     int* step) {
  const std::string path = JoinPath(join_dir_, slot_);
  // The survivors write the file once they have shrunk: within a step timeout of the death.
  const double wait_s = std::max(60.0, 2.0 * config_.step_timeout);
  JoinTicket ticket;
  for (int i = 0; !std::ifstream(path, std::ios::binary)
                       .read(reinterpret_cast<char*>(&ticket), sizeof(ticket));
       ++i) {
    if (i * 0.01 > wait_s)
      return Status::Error("elastic: no survivor wrote " + path + " within " +
                           std::to_string(static_cast<int>(wait_s)) + " s (are they --elastic?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::remove(path.c_str());
  MOE_RETURN_IF_ERROR(Parallel::Join(config_, ticket.id, ticket.rank, ticket.n_ranks, parallel));
  job_size_ = ticket.n_ranks;
  FullState state;
  bool complete = false;
  MOE_RETURN_IF_ERROR(ShareState(**parallel, &state, step, &complete));
  std::string note;
  MOE_RETURN_IF_ERROR(Rebuild(parallel->get(), state, complete, step, trainer, &note));
  return Mirror(**trainer, **parallel);
}

}  // namespace moe
