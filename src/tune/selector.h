// Selector: picks the algorithm, chunk size and channel count of every collective call.
//
// Every communicator has one, and it is the only place a call's size and WEFT_ALGO are
// computed and applied (CallBytes).
// Order of authority: WEFT_ALGO (AlgoOverrides) > tuning file (WEFT_TUNING_FILE, measured
// sweeps) > the cost model (cost_model.h: each candidate's schedule simulated on the fabric).
// Candidates = every registered, applicable algorithm for the collective x chunk sizes
// {none, 64K, 512K, 4M} x channels {1, 2, 4}; the minimum predicted time wins, ties to the
// earlier candidate (registry order), so the decision is a pure function of (fabric,
// registry, call shape) and identical on every rank.
// At scale (more than kFullSimulationMaxRanks ranks) an analytic pre-filter runs first
// (analytic_model.h): every algorithm gets a closed-form estimate (best over the chunk grid),
// and only those within kPrefilterFactor of the best estimate, and at least the
// kPrefilterMinKept best, are simulated; algorithms without a pattern are always simulated.
// Simulations there run under a work budget (cost_model.h: coarser chunks, or the analytic
// time for a schedule too large to build). Up to kFullSimulationMaxRanks ranks every
// candidate is simulated, exactly as before the pre-filter existed. Decisions are cached per (collective,
// dtype size, size bucket = floor(log2(nccl-tests bytes)), root); a bucket is evaluated at
// its geometric middle, never at whatever count happened to come first, so the cache cannot
// make ranks or runs diverge. DecisionDigest() lets the communicator compare ranks
// (WEFT_CHECK_DECISIONS=1 / WEFT_DEBUG=TRACE).
//
// Thread safety: Choose/Explain may be called from several threads (one mutex).
//
// Example:
//   Selector sel(fabric, overrides, /*shm_enabled=*/true);
//   ScheduleRequest req; req.collective = Collective::kAllReduce; req.nranks = 8; req.count = n;
//   StatusOr<Decision> d = sel.Choose(&req, sizeof(float));   // fills req.groups/.chunk
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algo_override.h"
#include "algorithms/registry.h"
#include "common/status.h"
#include "topo/fabric.h"
#include "tune/cost_model.h"
#include "tune/tuning_file.h"

namespace weft {

struct Decision {
  const AlgorithmInfo* algorithm = nullptr;
  ChunkPolicy chunk;
  double predicted_us = 0;
  // Tie-breaks (Pick), in this order: the call alone, its shaped links' buckets full
  // (SimResult::isolated_us; = predicted_us on unshaped fabrics), then the CPU time the call
  // keeps the cores busy (SimResult::cpu_busy_us).
  double isolated_us = 0;
  double cpu_busy_us = 0;
  std::string why;  // "model: ...", "WEFT_ALGO: ...", "tuning file f:3: ..."
};

class Selector {
 public:
  static constexpr int kFullSimulationMaxRanks = 64;
  static constexpr double kPrefilterFactor = 2.0;
  static constexpr int kPrefilterMinKept = 2;
  // Build + simulation work (step visits) allowed per candidate at scale.
  static constexpr double kScaleBuildBudget = 1e6;

  Selector(std::shared_ptr<const Fabric> fabric, AlgoOverrides overrides, bool shm_enabled);
  // A selector without a fabric model, for communicators no fabric describes (thread-per-rank
  // communicators: memcpy through an in-process hub). The same path as above — WEFT_ALGO,
  // then the tuning file — and, instead of the model, the default algorithm per collective
  // (ring, chain, pairwise, dissemination; the first applicable one when the default cannot
  // run) with WEFT_CHUNK_BYTES chunks. No direct algorithms (nothing is mapped).
  Selector(int nranks, std::vector<std::vector<int>> host_groups, AlgoOverrides overrides);

  // The call's size in bytes: the one number WEFT_ALGO ranges, tuning rules and the decision
  // cache read (nccl-tests' "size", cost_model.h's NcclBytes). For alltoallv it is the mean
  // of the bytes each rank sends (the whole count table's sum / nranks): every rank holds the
  // whole table after the count exchange, so every rank computes the same number and makes
  // the same choice (a rank's own send total, or its largest block, differs between ranks
  // with uneven counts and could force different algorithms on different ranks: a hang),
  // and with even counts it equals alltoall's nranks*count*elem, so one WEFT_ALGO range
  // means the same size for both.
  static size_t CallBytes(const ScheduleRequest& request, size_t elem_size);

  // `request` has collective, nranks, count, root (and a2av fields) filled; the selector
  // fills groups / all_ranks_mappable / chunk from the fabric and the decision.
  // elem_size = dtype bytes. Errors: a forced or tuned algorithm that is unknown or cannot
  // run the call (weftInvalidUsage, naming it); nranks differing from the fabric's.
  StatusOr<Decision> Choose(ScheduleRequest* request, size_t elem_size);
  // Every candidate with its predicted time, fastest first (failed candidates last, with the
  // error in `why` and predicted_us = +inf). Evaluated at the request's actual count. Each
  // `why` shows the analytic estimate; at scale, candidates the pre-filter did not simulate
  // are listed with their analytic time and say so.

  std::vector<Decision> Explain(const ScheduleRequest& request, size_t elem_size);

  // Candidates simulated by model decisions so far (tests bound the pre-filter's work).
  size_t simulated_candidates() const;

  // Digest of every decision made so far (ranks that made the same calls must agree).
  uint64_t DecisionDigest() const;
  // Restricts candidates to `algorithms` instead of the registry (unit tests' fake
  // generators). Pointers in later decisions point into this selector's copy.
  void SetCandidatesForTesting(std::vector<AlgorithmInfo> algorithms);
  // true: simulate every candidate at any rank count (no pre-filter, no work budget): the
  // reference the pre-filter is tested against.
  void SetFullSimulationForTesting(bool on) { full_simulation_for_testing_ = on; }
  // Replaces WEFT_TUNING_FILE's table (tools, tests).
  void SetTuningTable(TuningTable table);

  // The memory-kind input for calls on device buffers: ChooseDeviceAlgorithm (below) on this
  // selector's fabric and shm setting, so the communicator's device path asks the selector it
  // already holds. An IPC algorithm's name, or "staged" (also without a fabric model: a
  // thread-per-rank communicator has no GPU placement to weigh).
  std::string ChooseDevice(Collective collective, size_t bytes, size_t elem_size, int root = 0,
                           bool ipc_enabled = true) const;

  // Null for a selector without a fabric model.
  const Fabric* fabric() const { return fabric_.get(); }
  bool has_model() const { return fabric_ != nullptr; }
  bool shm_enabled() const { return shm_; }
  static int SizeBucket(size_t bytes);  // floor(log2(bytes)), -1 for 0

 private:
  struct Candidate {
    const AlgorithmInfo* algorithm;
    ChunkPolicy chunk;
    size_t chunk_bytes;
  };
  std::vector<const AlgorithmInfo*> Algorithms(Collective c) const;
  std::vector<Candidate> Grid(const AlgorithmInfo* a, size_t nccl_bytes, size_t elem) const;
  struct Evaluated {
    Decision decision;  // predicted_us = +inf when the candidate failed (error in why)
    size_t steps = 0;
  };
  Evaluated Evaluate(const Candidate& c, const ScheduleRequest& req, size_t elem, double build_budget) const;
  // The pre-filter (see above): the algorithms to simulate; `skipped` gets one analytic-only
  // row for each of the others.
  std::vector<const AlgorithmInfo*> Prefilter(const ScheduleRequest& req, size_t elem,
                                              const std::vector<const AlgorithmInfo*>& algos,
                                              std::vector<Decision>* skipped) const;
  // The fastest of `evaluated` (algorithm nullptr if none succeeded), with its runner-up.
  Decision Pick(const std::vector<Decision>& evaluated) const;
  // `trace` (optional) receives every row evaluated or skipped, for Explain.
  Decision ModelDecision(const ScheduleRequest& req, size_t elem, const AlgorithmInfo* only,
                         std::vector<Decision>* trace = nullptr) const;
  Status LoadTuningOnce();
  StatusOr<bool> Preempt(ScheduleRequest* request, size_t elem_size, size_t bytes,
                         const AlgorithmInfo** only, std::string* why_prefix, Decision* out);
  StatusOr<Decision> BucketDecision(ScheduleRequest* request, size_t elem_size, size_t bytes,
                                    const AlgorithmInfo* only, const std::string& why_prefix);
  // The decision of a selector without a fabric model (`only`: the forced algorithm).
  StatusOr<Decision> DefaultDecision(ScheduleRequest* request, size_t elem_size, const AlgorithmInfo* only,
                                     const std::string& why_prefix) const;

  std::shared_ptr<const Fabric> fabric_;
  AlgoOverrides overrides_;
  bool shm_;
  uint64_t fabric_digest_;  // keys the process-wide decision cache
  int nranks_;
  std::vector<std::vector<int>> groups_;  // host groups handed to generators
  bool mappable_;                         // every rank's window mapped (direct algorithms)
  bool groups_mappable_;                  // each host group's windows mapped (hierarchical)
  bool cores_shared_;                     // some host runs more ranks than cores
  std::vector<AlgorithmInfo> test_candidates_;
  bool use_test_candidates_ = false;
  bool full_simulation_for_testing_ = false;

  mutable std::mutex mu_;
  bool tuning_loaded_ = false;
  Status tuning_status_;
  TuningTable tuning_;
  std::map<std::string, Decision> cache_;  // key string -> decision
  mutable std::atomic<size_t> simulated_{0};
};

// ---- calls on device buffers (issue 36): which path a call on device memory takes ----
//
// A call on device buffers has its own candidates, each with a predicted time on the fabric
// (device_choice.cc):
//   staged   copy the input device -> pinned host memory over the GPU's PCIe link, run the host
//            algorithm the selector picks for host memory (ranks modelled as CPU ranks:
//            Fabric::CpuRanksView), copy the output back; the copies are not assumed to overlap
//            the host algorithm (an upper bound where the staging pipelines). Always available.
//   IPC      the registered direct algorithms (allreduce oneshot/twoshot; allgather,
//            reduce-scatter and all-to-all direct) run device to device over NVLink/NVSwitch
//            or PCIe P2P, simulated on the GPU ranks' routes; available when WEFT_IPC is on,
//            every rank is a GPU rank on one host and every pair of their GPUs has peer access
//            (Fabric::AllGpusPeerMapped).
//   hybrid   across hosts: hierarchical_direct (allreduce, allgather, all-to-all) with its
//            in-host steps over IPC (Fabric::HostGpusPeerMapped) and its messages across hosts
//            staged: simulated on the GPU ranks' routes, plus one PCIe copy each way of the
//            call's bytes per rank (an upper bound: only the cross-host parts are staged).
// The fastest available candidate wins; ties go to staged (the path that always runs).
struct DeviceCandidate {
  std::string name;     // "staged", or the IPC algorithm's name ("oneshot", "direct", ...)
  double predicted_us;  // +inf when not available (why says why)
  std::string why;
};

struct DeviceChoice {
  std::string algorithm;  // the IPC algorithm's registered name, or "staged"
  double predicted_us = 0;
  std::string why;
  std::vector<DeviceCandidate> candidates;  // fastest first, unavailable ones last
};

struct DeviceChoiceOptions {
  size_t elem_size = 4;      // dtype bytes
  int root = 0;              // broadcast / reduce
  bool ipc_enabled = true;   // WEFT_IPC (the caller reads the setting)
  bool shm_enabled = true;   // the staged host algorithms' transport between same-host ranks
};

// Every device candidate of a call of `bytes` (nccl-tests size, as Selector::CallBytes) on
// `nranks` ranks (the fabric's), evaluated at this exact size. Errors: nranks differing from
// the fabric's, elem_size 0.
StatusOr<DeviceChoice> ExplainDeviceChoice(const Fabric& fabric, Collective collective, size_t bytes, int nranks,
                                           const DeviceChoiceOptions& options = DeviceChoiceOptions());

// The path the device data path takes for a call: the IPC algorithm's registered name (to be
// run over the IPC transport; "hierarchical_direct" across hosts), or "staged" (run the host selector's algorithm through pinned
// host memory). Decided per power-of-two size bucket at the bucket's geometric middle, as
// Selector::Choose, and cached per (fabric digest, collective, dtype size, bucket, root,
// options), so every rank of a communicator gets the same answer. "staged" too when the call
// cannot be modelled (an error from ExplainDeviceChoice, logged at WEFT_DEBUG=INFO).
// fabric_digest is fabric.Digest(), computed once by the caller: it serializes the whole
// fabric, far too slow for every call (it was a third of an 8 B device call's host time).
// Thread-safe.
std::string ChooseDeviceAlgorithm(const Fabric& fabric, uint64_t fabric_digest, Collective collective,
                                  size_t bytes, int nranks,
                                  const DeviceChoiceOptions& options = DeviceChoiceOptions());

}  // namespace weft
