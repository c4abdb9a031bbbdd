// Algorithm registry: the menu the selector chooses from and WEFT_ALGO forces from.
//
// Each algorithm file (algorithms/<collective>_<name>.cc) defines one generator and registers
// it with WEFT_REGISTER_ALGORITHM. Generators are pure: ScheduleRequest -> Schedule, building
// the ranks in request.scope (RanksToBuild in patterns.h); call them through BuildSchedule.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "weft/weft_compress.h"

namespace weft {

// Everything a generator may depend on. No pointers, no dtype (schedules count elements).
struct ScheduleRequest {
  Collective collective = Collective::kAllReduce;
  int nranks = 1;
  size_t count = 0;  // API count (per rank)
  int root = 0;      // broadcast / reduce
  ChunkPolicy chunk;
  // Grouping of ranks for hierarchical algorithms (e.g. by host): every rank in exactly one
  // group; groups may be uneven. Empty = one group per rank... i.e. unknown (flat only).
  std::vector<std::vector<int>> groups;
  // Ranks whose memory this rank can map (same host) — direct algorithms need all of them.
  bool all_ranks_mappable = false;
  // Every rank can map the windows of the other members of its group (one direct transport
  // per host): hierarchical compositions then run their in-group phases with direct
  // (one-sided) steps and keep messages for the phases across groups.
  bool groups_mappable = false;
  // all-to-allv: counts[src * nranks + dst] elements from src to dst, and per-rank
  // displacements (elements) of each block in the sender's input / receiver's output.
  std::vector<size_t> a2av_counts;
  std::vector<size_t> a2av_send_displs;  // [src * nranks + dst]
  std::vector<size_t> a2av_recv_displs;  // [dst * nranks + src]
  // Whose steps to build (schedule.h): every rank (checker, simulator, cost model) or the one
  // rank that will run the plan (the communicator). Schedule caches key on it.
  PlanScope scope;
  // Single-round direct schedules (added last, as these fields are set only by the
  // communicator; algorithms/allreduce_oneshot.cc): a schedule that returns while its peers may
  // still read this rank's window saves the trailing "done" signal round. Calls alternate
  // between two halves of the window at fixed byte offsets (window_half_elems = a fixed byte
  // size / the element size, so halves of calls with different dtypes never overlap): a peer's
  // first signal in call n proves it finished reading call n - 1, so call n + 1 may rewrite
  // that half. -1 (default, and in every composition): the classic schedule, which releases
  // the window before it returns. See AlgorithmInfo::holds_window.
  int window_half = -1;
  size_t window_half_elems = 0;
  // The call's send and receive buffers do not overlap (set by the communicator, from the
  // call's pointers; added last for the same reason): a generator may then skip what only an
  // in-place call needs (alltoall pairwise: staging blocks that arrive before their own block
  // left, one extra copy of most of the data). Such a schedule is correct out-of-place only;
  // the checker proves it so (ProveAlgorithm skips the in-place run).
  bool out_of_place = false;
  // Zero-copy (set by the communicator, added last like the fields above): every rank's input
  // and output of this call lie in registered, shareable memory that every peer has mapped
  // (weftCommRegister; src/core/registered_memory.h), and all ranks agreed on it. The direct
  // generators (allreduce twoshot, allgather, reduce-scatter and, with out_of_place on every
  // rank, alltoall direct) then read peers'
  // Input/Output regions in place instead of staging through the Scratch windows, and keep
  // every peer from returning before its readers are done (a trailing "done" round).
  bool peer_buffers_mapped = false;
  // Compressed schedules (algorithms/*_compressed.cc): the call's codec, which sizes the
  // encoded regions (schedule.h); codec weftCodecNone (the default) for every other request.
  // Only the compressed generators read it, and only they apply when it is set.
  weftCompression codec = {};
  // allgatherv / reduce-scatterv (added last like the fields above): v_counts[q] elements
  // belong to rank q (the same table on every rank: the communicator checks that), and for
  // allgatherv v_displs[q] is where rank q's block starts in this rank's output (reduce-scatterv
  // blocks lie back to back in the input: offset sum(v_counts[0..q))). `count` is unused.
  std::vector<size_t> v_counts;
  std::vector<size_t> v_displs;
  // The window a direct schedule may use per rank, in elements (added last like the fields
  // above): 0 = kDirectScratchElems (shm's initial window, algorithms/direct_pattern.h). The ipc
  // transport sets its own window (WEFT_IPC_WINDOW_BYTES): fewer, larger rounds per call, each
  // of which costs a few stream operations and a signal round trip on the GPU.
  size_t direct_scratch_elems = 0;
  // The bytes of one element of the call (added last like the fields above). Only the
  // compressed all-to-all(v) and allgather read it, and only they may run on bf16 values (2):
  // their encoded regions count elements of this size (schedule.h). Every other schedule is
  // float32 (4; the compressed generators refuse other sizes) or does not size regions by bytes.
  size_t elem_bytes = sizeof(float);
};

struct AlgorithmInfo {
  std::string name;  // WEFT_ALGO name: "ring", "tree", ...
  Collective collective;
  // Whether this algorithm can run the request (e.g. direct needs mappable peers).
  std::function<bool(const ScheduleRequest&)> applicable;
  std::function<StatusOr<Schedule>(const ScheduleRequest&)> build;
  // Non-null for generators that honour ScheduleRequest::window_half: whether the schedule
  // built for `request` (window_half 0 or 1) returns holding the window, i.e. peers may still
  // read this rank's window afterwards. The communicator then alternates halves per call and,
  // before the next schedule that uses the window another way, runs a release handshake
  // (DirectWindowRelease in algorithms/direct_pattern.h).
  std::function<bool(const ScheduleRequest&)> holds_window;
  // A same-host direct generator (WEFT_REGISTER_DIRECT_ALGORITHM): it needs every rank's
  // window mapped and runs in rounds of at most one window slot, each closed by signal rounds;
  // a chunk policy only cuts the rounds smaller.
  bool direct = false;
};

// What building a schedule cost: the steps the generator emitted (before BuildSchedule trims a
// whole-schedule generator's result to the requested scope). Tests bound one rank's build
// with it, in steps rather than wall time.
struct BuildStats {
  size_t emitted_steps = 0;
};

// Builds `algorithm`'s schedule for `request` within request.scope: the one entry point the
// communicator uses. A generator that honours the scope emits only that rank's steps; one
// that builds every rank (compositions) is trimmed to it here, so the result always holds
// exactly the scope's steps (schedule.scope says which). Errors: a scope rank outside
// [0, nranks) (InvalidArgument naming it), or the generator's own.
StatusOr<Schedule> BuildSchedule(const AlgorithmInfo& algorithm, const ScheduleRequest& request,
                                 BuildStats* stats = nullptr);

// All registered algorithms (for every collective), in registration order.
const std::vector<AlgorithmInfo>& AllAlgorithms();
// The algorithm `name` for `collective`, or nullptr.
const AlgorithmInfo* FindAlgorithm(Collective collective, const std::string& name);
// Used by WEFT_REGISTER_ALGORITHM; returns true.
bool RegisterAlgorithm(AlgorithmInfo info);

}  // namespace weft

// Registers a generator at static-initialization time. The library is linked as a whole
// archive / shared object, so registrations are never dropped.
#define WEFT_REGISTER_ALGORITHM(collective, name, applicable_fn, build_fn)              \
  static const bool WEFT_CONCAT(weft_registered_, __LINE__) = ::weft::RegisterAlgorithm( \
      ::weft::AlgorithmInfo{name, collective, applicable_fn, build_fn, nullptr})

// A same-host direct generator (AlgorithmInfo::direct), applicable when every rank's window is
// mapped (ScheduleRequest::all_ranks_mappable); holds_fn is its AlgorithmInfo::holds_window
// (nullptr: it has no single-round variant).
#define WEFT_REGISTER_DIRECT_ALGORITHM(collective, name, build_fn, holds_fn)              \
  static const bool WEFT_CONCAT(weft_registered_, __LINE__) = ::weft::RegisterAlgorithm( \
      ::weft::AlgorithmInfo{name, collective, ::weft::AllRanksMappable, build_fn, holds_fn, true})
