// Whether compressing one allreduce pays (issue 14 item 4), decided by simulating both ways on
// the communicator's fabric (src/sim/engine.h): the compressed schedule weftAllReduceCompressed
// would run (the hierarchical placement where the ranks span several hosts and some host holds
// more than one, else the flat one), its codec steps at the codec's measured speed, against
// the plain allreduce the selector would pick (its predicted time). A compressed schedule too
// large to simulate (hundreds of hosts) is timed by its closed form instead
// (CompressedAllReduceAnalyticUs, tested against the simulation where both run). Compress when the
// compressed schedule is predicted faster. WEFT_COMPRESSION (job-wide) asks this per call;
// `weft-topo --explain allreduce BYTES` prints both times and the verdict.
//
// Decisions are cached per (fabric, host groups, codec spec, element size, count); the
// job-wide path asks for the lower end of the call's size bucket (floor(log2(bytes)), as the
// selector buckets), so the cache stays small and every rank decides the same.
//
// Codec speeds are the one-core figures of codec_bench (perf/RESULTS.md "### Compression"),
// fixed in a table so every rank decides the same way (a per-process measurement could differ
// between ranks and split the job into compressing and non-compressing halves), and scaled by
// the fabric's core rates (CodecSpeedOn), which calibration measures on rank 0 and shares.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "sim/cpu_work.h"
#include "weft/weft_compress.h"

namespace weft {
class Fabric;
struct ComputeParams;
}

namespace weft::compress {

struct CompressionDecision {
  bool compress = false;
  int hosts = 1, ranks_per_host = 1;  // ranks_per_host: the largest host (1: flat placement)
  std::string placement;              // the compressed schedule simulated
  double tier_gbps = 0;               // slowest tier between hosts (GB/s), 0 when none/unknown
  // The uncompressed link bound: 2 (H-1)/H x bytes over the slowest tier (the goals' 268 ms).
  double link_bound_us = 0;
  double compressed_us = 0, plain_us = 0;  // predicted (0 without a fabric model)
  // compressed_us is the closed form (CompressedAllReduceAnalyticUs), not a simulation: the
  // compressed schedule had more than kMaxSimulatedCompressedSteps steps.
  bool compressed_analytic = false;
  // CPU time the simulated compressed call keeps the ranks' cores busy, per rank on average
  // (SimResult::cpu_busy_us / ranks; 0 for the closed form): against a run's measured CPU time
  // per call, this tells a misjudged kernel rate from a misjudged overlap.
  double compressed_cpu_per_rank_us = 0;
  // The same by kind of work (CpuWork: receive copies, network stack, copies, reductions,
  // encodes, decodes), per rank on average: what to hold against a profile of one rank.
  std::array<double, kCpuWorkKinds> compressed_cpu_work_us{};
  std::string plain_algorithm;             // the selector's pick for the plain call
  std::string why;  // one line: the figures and the verdict
};

// Encode and decode speed of one core, GB/s of float32 values, and the fixed cost of one
// encode or decode call in us, whatever its size (measured; see compression_pays.cc).
struct CodecSpeed {
  double encode_gbps, decode_gbps;
  double encode_fixed_us = 0.04, decode_fixed_us = 0.03;
  // In a codec chain (cache-resident tiles): the codec's measured cache rates; 0 = the DRAM
  // rate x CodecChainSpeedup (the core's cache over DRAM copy rate).
  double encode_chain_gbps = 0, decode_chain_gbps = 0;
};
CodecSpeed MeasuredCodecSpeed(const weftCompression& spec);
// On a calibrated core (ComputeParams::codecs measured for spec's codec): its own rates, the
// table's ratio of flagged to plain (stochastic rounding, Hadamard) applied to them. Else the
// table: the codecs mostly run near memory speed (a pass that reads 4 bytes and writes 0.1-2
// per value, or the reverse), so on another core they scale with its DRAM copy rate: the
// table's rates times cpu.dram_copy_gbps / kCodecTableDramCopyGbps (the calibrated rate of
// the machine the table was measured on; `weftrun -n 4 weft-topo --calibrate` in the same
// minutes). A preset's defaults describe the reference VM of src/topo/link_table.cc. 0: the
// table as is. The scaling misses codecs that wait on the core (this project's AMD VM: int8
// 2.7x the scaled table, top-k 1.1x), hence calibration measures each codec.
constexpr double kCodecTableDramCopyGbps = 8.55;
CodecSpeed CodecSpeedOn(const weftCompression& spec, const ComputeParams& cpu);

// For an allreduce of count elements of elem bytes (4: float32, 2: bf16) on `fabric` whose
// ranks are grouped by host as host_groups. fabric may be null (thread communicators): with
// several hosts it then compresses (no model says otherwise), on one host it does not.
CompressionDecision DecideCompression(const Fabric* fabric,
                                      const std::vector<std::vector<int>>& host_groups,
                                      const weftCompression& spec, size_t count, size_t elem);

// The same, for a communicator's fabric: its digest is computed once per fabric instance
// (the per-call path of WEFT_COMPRESSION).
CompressionDecision DecideCompression(const std::shared_ptr<const Fabric>& fabric,
                                      const std::vector<std::vector<int>>& host_groups,
                                      const weftCompression& spec, size_t count, size_t elem);

// A compressed schedule with more steps than this (all ranks together) is timed by its closed
// form instead of simulated: its messages grow as hosts^2 x lanes x pieces (1024 ranks: 7.4M
// steps, ~6 s to simulate; 16384 ranks did not fit in 24 GiB).
constexpr double kMaxSimulatedCompressedSteps = 4e6;

// The compressed allreduce of `count` float32 values in closed form, phase by phase
// (algorithms/allreduce_compressed_hierarchical.cc; `hierarchical` false: the flat placement,
// one rank per "host"): every phase is a round of concurrent messages on the fabric's routes
// (tune/analytic_model.h RoundTime) or local work at the codec's measured speed.
double CompressedAllReduceAnalyticUs(const Fabric& fabric, const std::vector<std::vector<int>>& host_groups,
                                     bool hierarchical, const weftCompression& spec, size_t count);

// The count DecideCompression is asked about for a call of `count` elements of elem bytes:
// the lower end of its size bucket (at least 1).
size_t DecisionCount(size_t count, size_t elem);

}  // namespace weft::compress
