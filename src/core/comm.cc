// Running operations on a communicator: choose the algorithm (the selector), build (or fetch)
// this rank's plan (a schedule scoped to this rank: PlanScope), run it with the executor.
#include "core/comm.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "algorithms/direct_pattern.h"
#include "common/log.h"
#include "core/call_check.h"
#include "core/metrics.h"
#include "exec/executor.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

#include "tune/cost_model.h"
#include "tune/selector.h"

namespace weft {

Status CheckComm(const weftComm* comm) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  if (comm->magic != kCommMagic)
    return InvalidArgument("comm " + std::to_string(reinterpret_cast<uintptr_t>(comm)) +
                           " is not a live communicator (destroyed, or never initialized)");
  if (!comm->init_error.ok())
    return InvalidUsage("communicator initialization failed: " + comm->init_error.message());
  const Status sticky = comm->sticky_error.Get();
  if (!sticky.ok())
    return Status(sticky.code(),
                  "communicator is unusable after an earlier failure (destroy or abort it): " +
                      sticky.message());
  return OkStatus();
}

namespace {

std::string CacheKey(const ScheduleRequest& r, const std::string& algo) {
  std::string k = std::string(CollectiveName(r.collective)) + "/" + algo + "/" +
                  std::to_string(r.count) + "/" + std::to_string(r.root) + "/" +
                  std::to_string(r.chunk.chunk_elems) + "/" + std::to_string(r.chunk.channels) +
                  "/scope" + std::to_string(r.scope.rank);  // a one-rank plan is that rank's
  if (r.collective == Collective::kAllToAllv) {
    for (size_t v : r.a2av_counts) k += "," + std::to_string(v);
    for (size_t v : r.a2av_send_displs) k += ";" + std::to_string(v);
    for (size_t v : r.a2av_recv_displs) k += ":" + std::to_string(v);
  }
  for (size_t v : r.v_counts) k += "," + std::to_string(v);
  for (size_t v : r.v_displs) k += ";" + std::to_string(v);
  if (r.codec.codec != weftCodecNone) {  // compressed schedules (PlanSchedule)
    k += "/codec" + std::to_string(r.codec.codec) + "." + std::to_string(r.codec.block) + "." +
         std::to_string(r.codec.flags) + "." + std::to_string(r.codec.seed) + "." +
         std::to_string(r.codec.ratio) + "/e" + std::to_string(r.elem_bytes) + "/m" +
         std::to_string(r.all_ranks_mappable) +
         std::to_string(r.groups_mappable) + std::to_string(r.out_of_place);
    for (const std::vector<int>& g : r.groups) {
      k += "|";
      for (int m : g) k += std::to_string(m) + ",";
    }
  }
  return k;
}

// Calls whose shape is more than (collective, count): all-to-allv and the per-rank-count
// collectives. Their schedules are cached by their count tables (CacheKey), not per PlanKey.
bool PerCallShape(Collective c) {
  return c == Collective::kAllToAllv || c == Collective::kAllGatherV ||
         c == Collective::kReduceScatterV;
}

// The count a call's descriptor (its hash in every message tag, WEFT_CHECK's fingerprint)
// carries: the per-rank-count collectives' whole count table, hashed (FNV-1a, 64-bit), so
// that ranks passing different tables run calls that differ; all-to-allv's tables are checked
// pair by pair by its count exchange instead (0 here).
uint64_t DescriptorCount(const CollectiveCall& call) {
  if (call.collective == Collective::kAllToAllv) return 0;
  if (!PerCallShape(call.collective)) return call.count;
  uint64_t h = 1469598103934665603ULL;
  for (size_t v : call.recvcounts) h = (h ^ v) * 1099511628211ULL;
  return h;
}

// The communicator's executor call (comm.h), under the short name the call sites here use.
Status Execute(weftComm* comm, const RankSchedule& rs, int window, weftDataType_t dtype,
               weftRedOp_t op, uint64_t tag, const void* in, void* out, const char* what,
               const std::vector<PeerUserBuffers>* peer_buffers = nullptr) {
  ExecExtras extras;
  extras.peer_buffers = peer_buffers;
  return ExecuteOnComm(comm, rs, window, dtype, op, tag, in, out, what, extras);
}

}  // namespace

Status ExecuteOnComm(weftComm* comm, const RankSchedule& rs, int window, weftDataType_t dtype,
                     weftRedOp_t op, uint64_t tag, const void* in, void* out, const char* what,
                     const ExecExtras& extras) {
  ExecContext ctx;
  ctx.rank = comm->rank;
  ctx.nranks = comm->nranks;
  ctx.dtype = dtype;
  ctx.op = op;
  ctx.tag = tag;
  ctx.timeout_s = comm->timeout_s;
  ctx.peer_transport = &comm->peer_transport;
  ctx.direct = comm->direct;
  ctx.scratch = extras.scratch != nullptr ? extras.scratch : &comm->heap_scratch;
  ctx.peer_buffers = extras.peer_buffers;
  ctx.codec = extras.codec;
  ctx.feedback = extras.feedback;
  ctx.first_step = extras.first_step;
  ctx.what = what;
  ExecBuffers bufs;
  bufs.input = in;
  bufs.output = out;
  bufs.patch = extras.input_patch;
  bufs.addend = extras.input_addend;
  bufs.patched = extras.input_patched;
  Status st = ExecuteSchedule(rs, window, ctx, bufs);
  return st.ok() ? st : FailedOnComm(comm, st);
}

Status FailedOnComm(weftComm* comm, Status st) {
  // Ranks running different calls: a usage error, not a weft bug (transports report it as
  // InternalError because they cannot tell).
  if (IsCallMismatch(st)) st = Status(weftInvalidUsage, st.message());
  // A failed operation leaves messages half-sent on the transports: later operations could
  // not be matched safely, so the communicator is unusable from here on (as NCCL's).
  comm->sticky_error.Set(st);
  return st;
}

namespace {

// The tiny-call path: runs the compiled program while each step completes at once, then
// hands the rest (from the first wait not yet signalled) to the executor.
Status ExecuteTiny(weftComm* comm, const TinyProgram& prog, const RankSchedule& rs, int window,
                   weftDataType_t dtype, weftRedOp_t op, uint64_t tag, const void* in, void* out,
                   const char* what) {
  StatusOr<size_t> stop = RunTinyProgram(prog, comm->direct, in, out, dtype, op, comm->nranks,
                                         tag, what);
  if (!stop.ok()) {
    comm->direct->Abort(stop.status());  // as the executor's Fail: tell the peers now
    return FailedOnComm(comm, stop.status());
  }
  if (*stop == prog.ops.size()) return OkStatus();
  ExecExtras extras;
  extras.first_step = *stop;
  return ExecuteOnComm(comm, rs, window, dtype, op, tag, in, out, what, extras);
}

// This rank's steps of `sched` compiled for the tiny path, or null: only direct steps, small
// regions, every peer reached through this rank's window transport (the executor's Prepare
// refuses anything else with an error, which the Runner then reports).
std::shared_ptr<const TinyProgram> CompileTiny(const weftComm* comm, const Schedule& sched,
                                               size_t elem) {
  if (comm->direct == nullptr || !TinyPathEnabled()) return nullptr;
  auto prog = std::make_shared<TinyProgram>();
  if (!CompileTinyProgram(sched.ranks[comm->rank], elem, comm->nranks, prog.get())) return nullptr;
  for (const TinyOp& t : prog->ops)
    if (t.peer >= 0 && comm->peer_transport[t.peer] != comm->direct) return nullptr;
  return prog;
}

}  // namespace

StatusOr<const AlgorithmInfo*> ChooseAlgorithm(weftComm* comm, ScheduleRequest* request,
                                               size_t elem_size, weftRedOp_t op) {
  (void)op;  // schedules are op-agnostic
  if (!comm->overrides_error.ok())
    return InvalidUsage("WEFT_ALGO is invalid: " + comm->overrides_error.message());
  if (comm->selector == nullptr) {
    // Thread-per-rank communicators have no fabric model: they get a selector without one, so
    // that the call's size and WEFT_ALGO are computed and applied in one place (the selector)
    // for every communicator. Built here, once, under exec_mu.
    comm->selector = std::make_shared<Selector>(comm->nranks, comm->host_groups, comm->overrides);
  }
  // The selector fills request->groups / all_ranks_mappable / chunk, applies WEFT_ALGO and
  // refuses a forced algorithm that cannot run the call.
  StatusOr<Decision> d = comm->selector->Choose(request, elem_size);
  if (!d.ok()) return d.status();
  if (d->algorithm == nullptr) return InternalError("selector returned no algorithm");
  return d->algorithm;
}

namespace {

// Allgathers `bytes` bytes from every rank over the data path (ring), tagged like a collective:
// used for the all-to-allv count tables and WEFT_CHECK's fingerprints.
Status AllGatherBytes(weftComm* comm, uint64_t tag, const void* mine, size_t bytes, void* all,
                      const char* what) {
  ScheduleRequest gather;
  gather.collective = Collective::kAllGather;
  gather.nranks = comm->nranks;
  gather.count = bytes;
  gather.chunk = ChunkPolicy{};
  gather.scope = PlanScope::ForRank(comm->rank);
  const AlgorithmInfo* ring = FindAlgorithm(Collective::kAllGather, "ring");
  if (ring == nullptr) return InternalError("ring allgather is not registered");
  StatusOr<Schedule> gs = BuildSchedule(*ring, gather);
  if (!gs.ok()) return gs.status();
  return Execute(comm, gs->ranks[comm->rank], gs->window, weftUint8, weftSum, tag, mine, all, what);
}

}  // namespace

Status AllGatherOnComm(weftComm* comm, const void* mine, size_t bytes, void* all, const char* what) {
  std::unique_lock<std::mutex> lock;
  WEFT_RETURN_IF_ERROR(ClaimComm(comm, &lock));
  WEFT_RETURN_IF_ERROR(CheckComm(comm));
  const uint64_t seq = ++comm->collective_seq;
  const uint32_t hash = HashCallShape(MakeCallDescriptor(Collective::kAllGather, bytes, weftUint8,
                                                         weftSum, 0, "setup exchange"));
  const uint64_t tag = MakeCallTag(MixCallType(hash, Collective::kAllGather, weftUint8, weftSum), seq);
  Status st = AllGatherBytes(comm, tag, mine, bytes, all, what);
  return st.ok() ? st : FailedOnComm(comm, st.WithContext(what));
}

namespace {

// Every rank needs every rank's counts to build an all-to-allv schedule: exchange the count
// tables (with the receive counts), then check every pair. Every rank sees the same tables,
// so a disagreement fails the call on every rank at once, naming the pair: checking only its
// own receive counts, the rank that saw it failed while the others went on into the exchange
// and waited on it for WEFT_TIMEOUT (issue 34).
Status ExchangeAllToAllvCounts(weftComm* comm, const CollectiveCall& call, uint64_t seq,
                               ScheduleRequest* req) {
  const int p = comm->nranks;
  constexpr int kTables = 4;  // sendcounts, sdispls, rdispls, recvcounts
  std::vector<size_t> mine(kTables * p);
  for (int i = 0; i < p; ++i) {
    mine[i] = call.sendcounts[i];
    mine[p + i] = call.sdispls[i];
    mine[2 * p + i] = call.rdispls[i];
    mine[3 * p + i] = call.recvcounts[i];
  }
  std::vector<size_t> all(kTables * static_cast<size_t>(p) * p);
  static const uint32_t kCountsHash = HashCallShape(
      MakeCallDescriptor(Collective::kAllToAllv, 0, weftUint8, weftSum, 0, "count exchange"));
  uint64_t tag = MakeCallTag(MixCallType(kCountsHash, Collective::kAllToAllv, call.dtype, weftSum), seq);
  WEFT_RETURN_IF_ERROR(AllGatherBytes(comm, tag, mine.data(), mine.size() * sizeof(size_t),
                                      all.data(), "alltoallv count exchange"));
  req->a2av_counts.resize(static_cast<size_t>(p) * p);
  req->a2av_send_displs.resize(static_cast<size_t>(p) * p);
  req->a2av_recv_displs.resize(static_cast<size_t>(p) * p);
  for (int src = 0; src < p; ++src) {
    const size_t* t = &all[static_cast<size_t>(src) * kTables * p];
    for (int dst = 0; dst < p; ++dst) {
      req->a2av_counts[src * p + dst] = t[dst];
      req->a2av_send_displs[src * p + dst] = t[p + dst];
      req->a2av_recv_displs[src * p + dst] = t[2 * p + dst];
    }
  }
  for (int dst = 0; dst < p; ++dst) {
    const size_t* recvcounts = &all[static_cast<size_t>(dst) * kTables * p + 3 * static_cast<size_t>(p)];
    for (int src = 0; src < p; ++src) {
      if (req->a2av_counts[src * p + dst] == recvcounts[src]) continue;
      const std::string whose = dst == comm->rank ? "this rank's" : "rank " + std::to_string(dst) + "'s";
      return InvalidUsage("alltoallv: " + whose + " recvcounts[" + std::to_string(src) + "] = " +
                          std::to_string(recvcounts[src]) + " but rank " + std::to_string(src) +
                          " sends it " + std::to_string(req->a2av_counts[src * p + dst]) +
                          " (every rank fails this call)");
    }
  }
  return OkStatus();
}

// allgatherv / reduce-scatterv: every rank must pass the same count table (each builds its
// schedule from its own, so tables that differ would pair messages of different sizes).
// Exchange the tables and compare: every rank sees the same tables, so a difference fails the
// call on every rank at once, naming the first rank and entry that differ from rank 0's.
Status ExchangeVCounts(weftComm* comm, const CollectiveCall& call, uint64_t seq,
                       ScheduleRequest* req) {
  const size_t p = static_cast<size_t>(comm->nranks);
  std::vector<size_t> all(p * p);
  static const uint32_t kCountsHash = HashCallShape(
      MakeCallDescriptor(Collective::kAllGatherV, 0, weftUint8, weftSum, 0, "count check"));
  const uint64_t tag = MakeCallTag(MixCallType(kCountsHash, call.collective, call.dtype, weftSum), seq);
  WEFT_RETURN_IF_ERROR(AllGatherBytes(comm, tag, call.recvcounts.data(), p * sizeof(size_t),
                                      all.data(), "recvcounts check"));
  for (size_t q = 1; q < p; ++q)
    for (size_t i = 0; i < p; ++i) {
      if (all[q * p + i] == all[i]) continue;
      return InvalidUsage(std::string(CollectiveName(call.collective)) + ": rank " +
                          std::to_string(q) + " passed recvcounts[" + std::to_string(i) + "] = " +
                          std::to_string(all[q * p + i]) + " but rank 0 passed " +
                          std::to_string(all[i]) +
                          " (every rank must pass the same recvcounts; every rank fails this call)");
    }
  req->v_counts = call.recvcounts;
  req->v_displs = call.rdispls;  // allgatherv: this rank's own output layout
  return OkStatus();
}

// Builds `algorithm` for `req` (this rank's scope) and checks it has every rank's entry; a
// failed build names `what` when given.
StatusOr<std::shared_ptr<const Schedule>> BuildChecked(weftComm* comm, const AlgorithmInfo& algorithm,
                                                       const ScheduleRequest& req,
                                                       const std::string* what) {
  StatusOr<Schedule> built = BuildSchedule(algorithm, req);
  if (!built.ok()) return what != nullptr ? built.status().WithContext(*what) : built.status();
  if (static_cast<int>(built->ranks.size()) != comm->nranks)
    return InternalError("algorithm " + algorithm.name + " built a schedule for " +
                         std::to_string(built->ranks.size()) + " ranks, not " +
                         std::to_string(comm->nranks));
  AddRootAgreementToken(req.collective, comm->rank, comm->nranks, &built->ranks[comm->rank]);
  return std::make_shared<const Schedule>(std::move(built.value()));
}

// The schedules of shapes that vary per call (all-to-allv tables, v-collectives, compressed
// codecs), by CacheKey: a bounded cache of recent ones.
std::shared_ptr<const Schedule> CachedSchedule(const weftComm* comm, const std::string& key) {
  auto it = comm->schedule_cache.find(key);
  return it == comm->schedule_cache.end() ? nullptr : it->second;
}
void RememberSchedule(weftComm* comm, const std::string& key, std::shared_ptr<const Schedule> sched) {
  if (comm->schedule_cache.size() > 64) comm->schedule_cache.clear();  // bounds memory
  comm->schedule_cache[key] = std::move(sched);
}

}  // namespace

StatusOr<std::shared_ptr<const Schedule>> PlanSchedule(weftComm* comm, const AlgorithmInfo& algorithm,
                                                       const ScheduleRequest& req) {
  const std::string key = CacheKey(req, algorithm.name);
  if (std::shared_ptr<const Schedule> cached = CachedSchedule(comm, key)) return cached;
  StatusOr<std::shared_ptr<const Schedule>> built = BuildChecked(comm, algorithm, req, nullptr);
  if (built.ok()) RememberSchedule(comm, key, *built);
  return built;
}

namespace {

// Builds a plan for a call shape not seen before: algorithm, schedule (cached for alltoallv
// by its count tables), descriptor hash.
Status BuildPlan(weftComm* comm, const CollectiveCall& call, ScheduleRequest* req, size_t elem,
                 Plan* plan) {
  StatusOr<const AlgorithmInfo*> algo = ChooseAlgorithm(comm, req, elem, call.op);
  if (!algo.ok()) return algo.status();
  plan->algorithm = *algo;
  plan->what = std::string(CollectiveName(req->collective)) + " " + plan->algorithm->name;
  const bool cacheable = !PerCallShape(call.collective);
  plan->zero_copy = req->peer_buffers_mapped;
  plan->shape_hash = HashCallShape(MakeCallDescriptor(call.collective, DescriptorCount(call),
                                                      call.dtype, call.op, call.root,
                                                      plan->algorithm->name +
                                                          (plan->zero_copy ? kZeroCopySuffix : "")));
  // This rank's plan only (its own steps: O(p) for ring and pairwise schedules, where all
  // ranks' would be O(p^2)); the selector above evaluated candidates with every rank's.
  req->scope = PlanScope::ForRank(comm->rank);
  std::string skey = cacheable ? "" : CacheKey(*req, plan->algorithm->name);
  if (!cacheable) {
    plan->schedule = CachedSchedule(comm, skey);
    if (plan->schedule != nullptr) {
      // A cached schedule still says whether it uses the window: the release before it
      // depends on that (today's per-call shapes use none, a direct one would).
      plan->uses_window = plan->schedule->ranks[comm->rank].direct_steps == 1;
      return OkStatus();
    }
  }
  // Single-round direct schedules: one per window half (see ScheduleRequest::window_half).
  if (cacheable) plan->holds_window = AskSingleRound(*plan->algorithm, req, elem);
  StatusOr<std::shared_ptr<const Schedule>> built = BuildChecked(comm, *plan->algorithm, *req, &plan->what);
  if (!built.ok()) return built.status();
  plan->schedule = *built;
  if (plan->holds_window) {
    req->window_half = 1;
    built = BuildChecked(comm, *plan->algorithm, *req, &plan->what);
    if (!built.ok()) return built.status();
    plan->other_half = *built;
  }
  plan->uses_window = plan->schedule->ranks[comm->rank].direct_steps == 1;  // BuildSchedule's
  if (plan->uses_window && !plan->zero_copy && cacheable) {
    plan->tiny = CompileTiny(comm, *plan->schedule, elem);
    if (plan->tiny != nullptr && plan->holds_window) {
      plan->tiny_other_half = CompileTiny(comm, *plan->other_half, elem);
      if (plan->tiny_other_half == nullptr) plan->tiny = nullptr;  // both halves or neither
    }
  }
  WEFT_INFO("rank %d: %s count=%zu dtype=%s -> %s%s (chunk %zu elems, %d channels)", comm->rank,
            CollectiveName(req->collective), req->count, DataTypeName(call.dtype),
            plan->algorithm->name.c_str(),
            plan->zero_copy ? " zero-copy (registered buffers read in place, no staging)" : "",
            req->chunk.chunk_elems, req->chunk.channels);
  if (!cacheable) RememberSchedule(comm, skey, plan->schedule);
  return OkStatus();
}

CallDescriptor DescriptorOf(const CollectiveCall& call, const Plan& plan) {
  return MakeCallDescriptor(call.collective, DescriptorCount(call), call.dtype, call.op,
                            call.root, plan.algorithm->name);
}

// WEFT_CHECK=1: every rank's full call fingerprint, compared before any data moves.
Status CheckFingerprints(weftComm* comm, const CollectiveCall& call, const Plan& plan,
                         uint64_t seq) {
  std::vector<unsigned char> mine(kFingerprintBytes), all(kFingerprintBytes * comm->nranks);
  EncodeFingerprint(DescriptorOf(call, plan), seq, mine.data());
  static const uint32_t kCheckHash = HashCallShape(
      MakeCallDescriptor(Collective::kAllGather, kFingerprintBytes, weftUint8, weftSum, 0, "WEFT_CHECK"));
  uint64_t tag = MakeCallTag(kCheckHash, seq);
  WEFT_RETURN_IF_ERROR(AllGatherBytes(comm, tag, mine.data(), mine.size(), all.data(),
                                      "WEFT_CHECK fingerprint exchange"));
  Status st = CompareFingerprints(all.data(), comm->nranks, comm->rank);
  // Every rank saw the same records, so every rank fails alike: the communicator stays in step
  // but the call would corrupt data; make it unusable as any failed collective does.
  if (!st.ok()) comm->sticky_error.Set(st);
  return st;
}

}  // namespace

namespace {

// The plan of this thread's last collective, so that a loop of identical calls (the common
// case: a training step's buckets, a benchmark) skips the hash lookup (a division and a walk,
// ~8% of a tiny call's own work). The entry is trusted only while the communicator it came
// from cannot have been freed (no communicator was: CommsFreedCount unchanged, the guard
// CheckLiveComm relies on too) and its plan map was not cleared (g_plans_cleared unchanged);
// unordered_map never moves an element otherwise.
struct LastPlan {
  const weftComm* comm = nullptr;
  uint64_t comms_freed = 0;
  uint64_t plans_cleared = 0;
  PlanKey key{};
  const Plan* plan = nullptr;
};
thread_local LastPlan t_last_plan;
std::atomic<uint64_t> g_plans_cleared{0};

// Compares field by field with the call's values (not with a PlanKey just stored on the
// stack: the compiler merges the key's small fields into one wide load, which then waits for
// the narrow stores that built it, a store-forwarding stall on every call).
const Plan* CachedPlan(const weftComm* comm, const CollectiveCall& call, size_t elem,
                       bool out_of_place, bool zero_copy) {
  const LastPlan& l = t_last_plan;
  if (l.plan == nullptr || l.comm != comm || l.key.collective != call.collective ||
      l.key.count != call.count || l.key.elem_size != elem || l.key.root != call.root ||
      l.key.out_of_place != out_of_place || l.key.zero_copy != zero_copy ||
      l.plans_cleared != g_plans_cleared.load(std::memory_order_relaxed) ||
      l.comms_freed != CommsFreedCount())
    return nullptr;
  return l.plan;
}

void RememberPlan(const weftComm* comm, const PlanKey& key, const Plan* plan) {
  t_last_plan = LastPlan{comm, CommsFreedCount(), g_plans_cleared.load(std::memory_order_relaxed),
                         key, plan};
}

// An all-to-all whose send and receive buffers (nranks * count elements each) do not overlap:
// its schedule may skip in-place staging (ScheduleRequest::out_of_place). Other collectives
// keep one plan for both placements.
bool DisjointAllToAllBuffers(const weftComm* comm, const CollectiveCall& call, size_t elem) {
  if (call.collective != Collective::kAllToAll) return false;
  const uintptr_t s = reinterpret_cast<uintptr_t>(call.sendbuff);
  const uintptr_t r = reinterpret_cast<uintptr_t>(call.recvbuff);
  const uintptr_t bytes = static_cast<uintptr_t>(comm->nranks) * call.count * elem;  // checked at the API
  return s + bytes <= r || r + bytes <= s;
}

// The last call returned holding the window (a single-round direct schedule) and this one uses
// it another way: one signal round proves every peer finished reading it
// (DirectWindowRelease). Tagged with this call's tag, so ranks running different calls still
// fail as mismatched.
Status ReleaseWindow(weftComm* comm, uint64_t tag, const char* what) {
  const RankSchedule release = DirectWindowRelease(comm->rank, comm->nranks);
  WEFT_RETURN_IF_ERROR(Execute(comm, release, comm->nranks, weftUint8, weftSum, tag, nullptr,
                               nullptr, what));
  comm->window.Released();
  return OkStatus();
}

// The buffers of `call` as the zero-copy agreement sees them (sizes in bytes).
ZeroCopyCall ZeroCopyView(const weftComm* comm, const CollectiveCall& call, size_t elem) {
  ZeroCopyCall z;
  z.collective = call.collective;
  z.input = call.sendbuff;
  z.output = call.recvbuff;
  const size_t n = call.count * elem, all = n * static_cast<size_t>(comm->nranks);
  const bool alltoall = call.collective == Collective::kAllToAll;
  z.input_bytes = call.collective == Collective::kReduceScatter || alltoall ? all : n;
  z.output_bytes = call.collective == Collective::kAllGather || alltoall ? all : n;
  z.disjoint = DisjointAllToAllBuffers(comm, call, elem);
  return z;
}

// Registered buffers: whether this call reads them in place (every rank agrees, through one
// signal round tagged like the call; see core/registered_memory.h). False without running
// anything when no usable registration exists or the call is not worth it.
StatusOr<bool> AgreeOnZeroCopy(weftComm* comm, const CollectiveCall& call, size_t elem, uint64_t seq) {
  if (!comm->registry.any_usable) return false;  // the tiny-call path: one load, nothing else
  const ZeroCopyCall view = ZeroCopyView(comm, call, elem);
  if (!ZeroCopyCandidate(comm, view)) return false;
  const uint32_t hash = MixCallType(
      HashCallShape(MakeCallDescriptor(call.collective, call.count, call.dtype, call.op, call.root,
                                       "zero-copy agreement")),
      call.collective, call.dtype, call.op);
  const uint64_t tag = MakeCallTag(hash, seq);
  StatusOr<bool> agreed = AgreeZeroCopy(comm, view, [&] {
    const RankSchedule round = DirectWindowRelease(comm->rank, comm->nranks);  // signal, wait
    return Execute(comm, round, comm->nranks, weftUint8, weftSum, tag, nullptr, nullptr,
                   "zero-copy agreement");
  });
  if (!agreed.ok()) {
    // The peers may already be in the call's schedule, waiting on this rank: fail them now
    // (they see this rank closed) instead of letting them wait for the timeout.
    comm->sticky_error.SetIfOk(agreed.status());
    comm->direct->Abort(agreed.status());
  }
  return agreed;
}

// The name weftCommGetLastAlgorithm reports for a zero-copy plan of `algorithm` (interned for
// the process, as the registry's names are).
const std::string* ZeroCopyName(const std::string& algorithm) {
  static std::mutex mu;
  static auto* names = new std::map<std::string, std::string>();
  std::lock_guard<std::mutex> l(mu);
  auto it = names->find(algorithm);
  if (it == names->end()) it = names->emplace(algorithm, algorithm + kZeroCopySuffix).first;
  return &it->second;
}

// One collective after the communicator is locked and the sequence number taken: plan (cached
// per call shape), optional fingerprint check, execution. Fills in the flight entry's
// algorithm and peers as soon as the plan is known.
Status RunPlanned(weftComm* comm, const CollectiveCall& call, uint64_t seq, FlightEntry* entry) {
  const size_t elem = TypeSize(call.dtype);
  const bool out_of_place = DisjointAllToAllBuffers(comm, call, elem);
  StatusOr<bool> zero_copy = AgreeOnZeroCopy(comm, call, elem, seq);
  if (!zero_copy.ok()) return zero_copy.status();
  const Plan* plan = nullptr;
  const bool cacheable = !PerCallShape(call.collective);
  PlanKey key{call.collective, call.count, elem, call.root, out_of_place, *zero_copy};
  if (cacheable) {
    plan = CachedPlan(comm, call, elem, out_of_place, *zero_copy);
    if (plan == nullptr) {
      auto it = comm->plans.find(key);
      if (it != comm->plans.end()) plan = &it->second;
      if (plan != nullptr) RememberPlan(comm, key, plan);
    }
  }
  // A request (four vectors and a codec spec) is built only when there is a plan to make: the
  // repeated call of a training loop or a latency sweep finds its plan above.
  Plan fresh;
  if (plan == nullptr) {
    ScheduleRequest req;
    req.collective = call.collective;
    req.nranks = comm->nranks;
    req.count = call.count;
    req.root = call.root;
    if (call.collective == Collective::kAllToAllv)
      WEFT_RETURN_IF_ERROR(ExchangeAllToAllvCounts(comm, call, seq, &req));
    if (call.collective == Collective::kAllGatherV || call.collective == Collective::kReduceScatterV)
      WEFT_RETURN_IF_ERROR(ExchangeVCounts(comm, call, seq, &req));
    req.out_of_place = out_of_place;
    req.peer_buffers_mapped = *zero_copy;
    WEFT_RETURN_IF_ERROR(BuildPlan(comm, call, &req, elem, &fresh));
    fresh.peers = DistinctPeers(fresh.schedule->ranks[comm->rank]);
    if (cacheable) {
      // Bound memory for workloads with ever-changing sizes.
      if (comm->plans.size() > 1024) {
        comm->plans.clear();
        g_plans_cleared.fetch_add(1, std::memory_order_relaxed);  // invalidates every LastPlan
      }
      plan = &comm->plans.emplace(key, std::move(fresh)).first->second;
      RememberPlan(comm, key, plan);
    } else {
      plan = &fresh;
    }
  }
  // registry entries (and interned zero-copy names) live for the process
  comm->last_algorithm = plan->zero_copy ? ZeroCopyName(plan->algorithm->name) : &plan->algorithm->name;
  if (entry != nullptr) {
    entry->algorithm = comm->last_algorithm;
    FlightRecorder::SetPeers(entry, plan->peers);
  }
  if (comm->check_calls) WEFT_RETURN_IF_ERROR(CheckFingerprints(comm, call, *plan, seq));
  const uint32_t hash = MixCallType(plan->shape_hash, call.collective, call.dtype, call.op);
  const uint64_t tag = MakeCallTag(hash, seq);
  if (comm->direct != nullptr) comm->direct->PublishCurrentCall(tag);  // peers' plan check
  const Schedule* sched = plan->schedule.get();
  const TinyProgram* tiny = plan->tiny.get();
  if (plan->holds_window && comm->window.NextHalf() == 1) {
    sched = plan->other_half.get();
    tiny = plan->tiny_other_half.get();
  }
  Status st;
  if (comm->window.NeedsRelease(plan->uses_window, plan->holds_window))
    st = ReleaseWindow(comm, tag, plan->what.c_str());
  if (st.ok() && tiny != nullptr)
    st = ExecuteTiny(comm, *tiny, sched->ranks[comm->rank], sched->window, call.dtype, call.op,
                     tag, call.sendbuff, call.recvbuff, plan->what.c_str());
  else if (st.ok())
    st = Execute(comm, sched->ranks[comm->rank], sched->window, call.dtype, call.op, tag,
                 call.sendbuff, call.recvbuff, plan->what.c_str(),
                 plan->zero_copy ? &comm->registry.peer_buffers : nullptr);
  if (st.ok()) comm->window.Completed(plan->uses_window, plan->holds_window);
  if (IsCallMismatch(st)) {
    st = CallMismatchError(st, comm->rank, DescriptorOf(call, *plan), hash);
    comm->sticky_error.Set(st);
  }
  return st;
}

// Bytes of a call as the flight recorder shows them (nccl-tests' size column).
uint64_t RecordedBytes(const weftComm* comm, const CollectiveCall& call) {
  const size_t elem = TypeSize(call.dtype);
  // The selector's size (Selector::CallBytes = NcclBytes), as nccl-tests report it.
  if (call.collective == Collective::kAllGatherV || call.collective == Collective::kReduceScatterV) {
    uint64_t total = 0;  // every rank's block, once (as allgather's size); checked at the API
    for (size_t c : call.recvcounts) total += c * elem;
    return total;
  }
  if (call.collective != Collective::kAllToAllv)
    return NcclBytes(call.collective, comm->nranks, call.count, elem);
  // alltoallv: the count table is exchanged only once the call runs, so the record shows what
  // this rank sends (its own view for the dump; the selector uses the table's mean).
  uint64_t total = 0;
  for (size_t c : call.sendcounts) total += c * elem;  // validated at the API: no wrap-around
  return total;
}

// Completes the flight entry; a failure that left the communicator unusable (timeout, dead or
// mismatched peer) dumps the recorder, once: later calls are refused before they are recorded.
void FinishRecorded(weftComm* comm, FlightEntry* entry, const Status& st) {
  comm->recorder.Complete(entry, st);
  if (st.ok() || comm->sticky_error.ok() || entry == nullptr) return;
  std::string what = std::string(entry->call) +
                     (entry->algorithm ? " " + *entry->algorithm : std::string()) +
                     (entry->seq ? " (call #" + std::to_string(entry->seq) + ")" : std::string());
  comm->recorder.Dump(comm->rank, comm->nranks,
                      what + " failed: " + weftGetErrorString(st.code()) + ": " + st.message());
}

}  // namespace

Status ClaimComm(weftComm* comm, std::unique_lock<std::mutex>* lock) {
  *lock = std::unique_lock<std::mutex>(comm->exec_mu, std::try_to_lock);
  if (lock->owns_lock()) return OkStatus();
  char addr[32];
  std::snprintf(addr, sizeof(addr), "%p", static_cast<void*>(comm));
  return InvalidUsage(std::string("communicator ") + addr + " (rank " + std::to_string(comm->rank) +
                      " of " + std::to_string(comm->nranks) +
                      ") is running an operation on another thread: a communicator takes one "
                      "thread at a time (give each thread its own communicator, weftCommSplit)");
}

Status BeginCall(weftComm* comm, const CollectiveCall& call, uint64_t bytes, CallScope* scope) {
  WEFT_RETURN_IF_ERROR(ClaimComm(comm, &scope->lock));
  WEFT_RETURN_IF_ERROR(CheckComm(comm));
  scope->seq = ++comm->collective_seq;
  scope->bytes = bytes;
  scope->entry = comm->recorder.Begin(scope->seq, CollectiveName(call.collective), bytes);
  if (FlightEntry* entry = scope->entry; entry != nullptr) {
    entry->dtype = call.dtype;
    entry->op = call.op;
    if (call.collective == Collective::kBroadcast || call.collective == Collective::kReduce)
      entry->root = call.root;
  }
  scope->start_ns = MetricsEnabled() ? MetricsNowNs() : 0;  // WEFT_METRICS_FILE
  return OkStatus();
}

Status EndCall(weftComm* comm, const CollectiveCall& call, const CallScope& scope, Status st) {
  FinishRecorded(comm, scope.entry, st);
  if (scope.start_ns != 0 && st.ok())
    RecordCallMetrics(comm, call, scope.seq, scope.bytes, MetricsNowNs() - scope.start_ns);
  return st;
}

Status RunCollective(weftComm* comm, const CollectiveCall& call) {
  CallScope scope;
  WEFT_RETURN_IF_ERROR(BeginCall(comm, call, RecordedBytes(comm, call), &scope));
  return EndCall(comm, call, scope, RunPlanned(comm, call, scope.seq, scope.entry));
}

Status RunP2P(weftComm* comm, const std::vector<P2POp>& ops) {
  std::unique_lock<std::mutex> lock;
  WEFT_RETURN_IF_ERROR(ClaimComm(comm, &lock));
  WEFT_RETURN_IF_ERROR(CheckComm(comm));
  if (ops.empty()) return OkStatus();
  // All ops of a group run as one schedule: every send/recv is posted up front (window =
  // number of ops), so any matching order between ranks completes. Regions are byte offsets
  // into one virtual address space: we pass base pointers through "input" = nullptr and
  // encode each op's absolute address as its offset (elem size 1).
  RankSchedule rs;
  std::vector<std::pair<const P2POp*, const P2POp*>> self_pairs;
  std::vector<const P2POp*> self_sends, self_recvs;
  for (const P2POp& op : ops) {
    size_t bytes = op.count * TypeSize(op.dtype);
    if (op.peer == comm->rank) {
      (op.is_send ? self_sends : self_recvs).push_back(&op);
      continue;
    }
    uintptr_t addr = reinterpret_cast<uintptr_t>(op.buff);
    if (op.is_send)
      rs.steps.push_back(SendStep(op.peer, Region{Buffer::kInput, addr, bytes}));
    else
      rs.steps.push_back(RecvStep(op.peer, Region{Buffer::kOutput, addr, bytes}));
  }
  if (self_sends.size() != self_recvs.size())
    return InvalidUsage("send/recv to self: " + std::to_string(self_sends.size()) +
                        " sends but " + std::to_string(self_recvs.size()) +
                        " receives in this group");
  for (size_t i = 0; i < self_sends.size(); ++i) {
    size_t sb = self_sends[i]->count * TypeSize(self_sends[i]->dtype);
    size_t rb = self_recvs[i]->count * TypeSize(self_recvs[i]->dtype);
    if (sb != rb)
      return InvalidUsage("send/recv to self: sizes differ (" + std::to_string(sb) + " vs " +
                          std::to_string(rb) + " bytes)");
    if (sb > 0) kernels::Copy(self_recvs[i]->buff, self_sends[i]->buff, sb);
  }
  if (rs.steps.empty()) return OkStatus();
  uint64_t bytes = 0;
  for (const Step& s : rs.steps) bytes += s.op == StepOp::kSend ? s.src.count : s.dst.count;
  FlightEntry* entry = comm->recorder.Begin(0, "send/recv", bytes);
  FlightRecorder::SetPeers(entry, DistinctPeers(rs));
  Status st = Execute(comm, rs, static_cast<int>(rs.steps.size()), weftUint8, weftSum, kP2PTag,
                      nullptr, nullptr, "send/recv");
  FinishRecorded(comm, entry, st);
  return st;
}

}  // namespace weft
