// Calibration: measure the latency and bandwidth of each link tier a job's fabric has (same
// host over shm or TCP loopback, each network tier) with short probes between the job's own
// ranks, and rebuild the fabric with the measured constants.
//
// Why: discovery cannot see a shaped link (tc tbf on a veth), a virtualized NIC or a loaded
// TCP stack; the cost model then believes the table's defaults and picks algorithms (and
// predicts times) for a machine that is not there. NCCL, Gloo and Open MPI do not measure.
//
// Used two ways (same code): `weftrun -n N weft-topo --calibrate --save FILE` (the file is a
// topology file: WEFT_TOPO_FILE=FILE loads it) and WEFT_CALIBRATE=1 at communicator init.
//
// Protocol, per tier (a LinkType present between some pair of ranks; one representative pair
// per tier, the lowest (a, b) in rank order): every rank walks the same tier list; between
// tiers all ranks pass a barrier so that probes never overlap. Rank a of the pair drives:
//   - latency: round trips of an 8-byte message; one-way = fastest round trip / 2 (slower
//     ones measure the scheduler of a shared machine, not the link);
//   - bandwidth: a sends S bytes, b answers 8 bytes; the rate is the slope between two sizes
//     (S/4 and S), so fixed costs and a token-bucket's burst (a warm-up message drains it)
//     cancel; probes double until one lasts target_ms / 4, S is 4x that;
//   - network tiers: a token bucket's burst: the S/4 probe after a target_ms pause (bucket
//     refilled) against the same probe right after an S one (drained): burst = saved time x
//     rate (2 x (target_ms + one S/4 probe) more);
//   - same-host memory tiers are probed twice: inside the last-level cache and beyond it
//     (the fabric's two figures, flow_gbps and dram_flow_gbps).
// First, rank 0 times weft's copy and float sum kernels beyond the LLC, how much more the
// machine's memory moves with one copy thread per core than with one (its cores share the
// bus: ComputeParams::dram_all_cores_gbps), the cache a call can use (FitCacheBytes over
// copies of LLC/16 to 2x LLC working sets) and the kernels inside it (the CPU compute rates
// the cost model charges local steps with).
// Rank a's figures reach every rank by one allgather, so every rank builds the same fabric
// (same digest, same decisions).
//
// Cost: the CPU kernel probe faults in 3 x LLC, a shm tier's beyond-LLC probes move ~300 MiB,
// a TCP tier runs ~5 x target_ms; the measured seconds, with their commands, are in
// perf/netns/CALIBRATION.md and perf/RESULTS.md (calibration).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "topo/fabric.h"
#include "transports/transport.h"

namespace weft {

// What calibration needs from a communicator, and nothing more (so topo does not depend on
// core): the transport to each peer (index = rank, null for self) and a setup allgather.
struct CalibrationPeers {
  int rank = 0;
  int nranks = 0;
  std::vector<Transport*> peer_transport;
  bool shm_enabled = true;  // same-host peers go through shm (false: TCP loopback)
  // Gathers `bytes` from every rank into `all` (rank order), like Bootstrap::AllGather.
  std::function<Status(const void* mine, size_t bytes, void* all)> allgather;
};

struct CalibrateOptions {
  int latency_round_trips = 30;
  double target_ms = 25;          // duration aimed at for the large bandwidth probe
  size_t max_probe_bytes = 64u << 20;
  size_t min_probe_bytes = 256u << 10;
  double timeout_s = 60;          // a probe that makes no progress this long fails
};

// One tier's measurement (rank a -> rank b).
struct TierMeasurement {
  LinkType type = LinkType::kSelf;
  int a = -1, b = -1;
  double oneway_us = 0;     // small message, one way (latency + per-message overhead)
  double gbps = 0;          // one stream's rate, GB/s (cache-resident buffers for memory tiers)
  double dram_gbps = 0;     // memory tiers: one stream beyond the LLC; 0 = not measured
  // Memory tiers whose transport takes sinks: the same source received into a cache-sized
  // sink (LinkParams::dram_sink_flow_gbps); 0 = not measured.
  double dram_sink_gbps = 0;
  // Network tiers: a token bucket's depth (bytes that leave at the line rate after a pause:
  // the S/4 probe after a target_ms pause vs right after an S one); 0 = none seen.
  double burst_bytes = 0;
  // Network tiers: the CPU its software stack costs, GB/s of payload per core and end
  // (LinkParams::stack_cpu_gbps; Driver::StackCpuGbps); 0 = not measured.
  double stack_cpu_gbps = 0;
  double probe_bytes = 0;   // the large probe's size
  double seconds = 0;       // wall time this tier's probes took
  // Slowest / fastest repetition of the large probe: near 1 on a quiet machine; well above
  // it, the figures measure the machine's load as much as the link (the fastest is kept).
  double spread = 1;
};

// This host's CPU kernels (weft's own Copy / float32 sum Reduce), timed by rank 0 alone
// while the others wait: GB/s of destination written, inside the LLC and beyond it.
struct ComputeMeasurement {
  double copy_gbps = 0, reduce_gbps = 0;
  double dram_copy_gbps = 0, dram_reduce_gbps = 0;
  // The cache a call's working set can use on this host, bytes (HostInfo::cache_bytes);
  // 0 = not measured. See FitCacheBytes.
  int64_t cache_bytes = 0;
  double seconds = 0;
  // Every core of the machine copying beyond the LLC at once, GB/s summed (ComputeParams::
  // dram_all_cores_gbps); 0 = not measured (one core).
  double dram_all_cores_gbps = 0;
  // Each codec's kernels on this core, beyond the LLC and in the cache (ComputeParams::
  // codecs, MeasureCodecRates); 0 = not measured.
  CodecRateTable codecs{};
};

// Each codec's Encode and Decode (kernels/codec.h, the active kernel table) on this core over
// gradient-like values: `dram_values` float32 values (a working set beyond the LLC), best of
// 2, and 64 Ki values (256 KiB: L2-resident, the nearest a timed pass gets to a chain's L1
// tiles), best of 9. Top-k at its default ratio (1%). About 0.2-0.8 s for 16 Mi values.
CodecRateTable MeasureCodecRates(size_t dram_values);

// The cache a call can use, fitted to the cost model's blend (sim/engine.h) from copy rates
// over working sets: `points` = (working set bytes, GB/s), `dram_gbps` = the rate well
// beyond the LLC. With the fastest point as the cache rate c, a working set W whose rate r
// lies clearly between the two gives C = W (1/r - 1/d) / (1/c - 1/d) (the model's hit share
// times W); the median of those. A sharp cliff gives the last working set still at c; a
// sweep that never slows, or a cache no faster than DRAM, gives `llc`. At most `llc`.
// Why: a VM's LLC is shared with other guests (this project's 2-vCPU VM reports a 32 MiB L3;
// copies slow from 8-16 MiB working sets on), which discovery cannot see.
int64_t FitCacheBytes(const std::vector<std::pair<double, double>>& points, double dram_gbps, int64_t llc);

struct CalibrationResult {
  std::shared_ptr<const Fabric> fabric;  // the input fabric with the measured constants
  std::vector<TierMeasurement> tiers;
  ComputeMeasurement compute;            // zeros when no CPU rank measured it
  double seconds = 0;                    // whole calibration, wall time on this rank
  // "tier a->b: one-way X us, Y GB/s [dram Z GB/s], N MiB probes, T ms" per line.
  std::string Describe() const;
};

// WEFT_CALIBRATE: unset/"0" -> false, "1" -> true, anything else -> InvalidArgument naming it.
StatusOr<bool> CalibrationRequested();

// The tiers of `fabric` and the pair that represents each (deterministic: identical on every
// rank). Self links are not tiers.
std::vector<TierMeasurement> CalibrationTiers(const Fabric& fabric, bool shm_enabled);

// Runs the probes (collective: every rank of `peers` must call it) and returns the fabric
// with the measured constants applied.
StatusOr<CalibrationResult> CalibrateFabric(std::shared_ptr<const Fabric> fabric, const CalibrationPeers& peers,
                                            const CalibrateOptions& options = CalibrateOptions());

// Pure: `fabric` with the measurements applied (link table entries of each tier; for network
// tiers also every host's NIC rate). Bad measurements (non-positive rates, negative times)
// are refused naming the tier.
// `compute` (when its rates are > 0) replaces the CPU compute rates.
StatusOr<std::shared_ptr<const Fabric>> ApplyCalibration(const Fabric& fabric,
                                                         const std::vector<TierMeasurement>& tiers,
                                                         const ComputeMeasurement& compute = ComputeMeasurement());

}  // namespace weft
