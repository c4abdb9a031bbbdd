// Discrete-event execution of a Schedule on a Fabric: the one timing engine behind both the
// selector's cost model (src/tune) and weft-sim.
//
// It follows the executor's execution rule (algorithms/schedule.h, src/check/checker.h), with
// each op's reads, writes, messages and fences taken from algorithms/step_table.h:
// ranks issue steps in program order, at most `window` asynchronous steps (send, recv,
// recv_reduce, wait) in flight, a step only once no in-flight step of the rank overlaps it;
// signal is a release fence, an in-flight wait an acquire fence; sends are rendezvous (the
// k-th send a->b on channel c meets the k-th recv at b from a on c; a fused step's forward
// is posted once its receive and reduction are done). Local steps (copy,
// reduce, finalize, direct read/reduce, signal) run synchronously on the rank's thread.
//
// Timing (alpha-beta with contention): a message starts when both sides have posted. Its
// (sender, receiver, channel) stream is a FIFO that spends overhead + bytes / stream cap on
// it (so more channels = more parallel streams), and every resource of its route (fabric.h:
// ports, memory buses, NIC ports, switch uplinks, TCP stacks) keeps a fluid backlog,
// backlog_end = max(start, backlog_end) + bytes / capacity; the message is delivered at
//   max(stream done, backlogs drained) + latency.
// Concurrent messages through one port thus share its capacity, a lone stream is limited by
// its own cap. Reductions queue on the rank's compute resource; local steps block the rank's
// issuing thread for their duration.
// Two-sided same-host messages to a CPU rank occupy the receiver's core for their transfer
// time (its thread does the copy), so they queue with its reductions and other receives.
// Below the shm transport's single-copy threshold (256 KiB) they go through its ring: both
// sides' threads copy, at the CPU copy rate; above it, the receiver's one CMA copy runs at the
// link's stream rate (page pinning included: what calibration measures).
// Working set (same-host memory): per host, the bytes the call touches on its CPU ranks
// (each rank's input + output + scratch, plus the staging buffer a recv-reduce lands in) are
// compared with the cache the host's ranks can use (Fabric::CacheBytes: the LLC, or what
// calibration measured). The share that does not fit, miss = 1 - cache / working set, runs at
// the DRAM figures and the rest at the table's cache figures, byte by byte (1 / rate =
// (1 - miss) / cache rate + miss / DRAM rate): memory buses and TCP stacks take blended
// capacities, CPU cores blended copy/reduce rates, two-sided same-host streams a blend with
// the link's dram_flow_gbps; the DRAM share of a recv-reduce's staging buffer also occupies
// the memory bus (an extra read + write). A blend, not a switch: a cache shared with other
// processes spills gradually (4 MiB calls on this project's VM, whose 32 MiB L3 other guests
// share, run 1.3-2x slower per byte than 1 MiB ones, not the 4x of the DRAM figures). Direct
// reads keep the cache figures: they read a peer's bounded window, which stays cached.
// Token-bucket links (LinkParams::burst_bytes, e.g. tc tbf on the netns harness's veths):
// a shaped port lets the bytes its bucket holds pass without occupying it (they leave at the
// line rate: the route's stream cap is then the unshaped TCP rate) and refills at its rate
// while idle. A call is timed as one of a sequence of back-to-back calls of its size: if a
// call from a full bucket gives back what it took, full is its steady state; otherwise the
// call is run from an empty bucket, then once more from the level that run left.
// Shared cores (Fabric::CoreMates: a machine with more CPU ranks than cores): a rank's CPU
// work, its receive copies included, is stretched by its overlap with each busy mate's
// pending work (processor sharing).
// Shared memory (Fabric::MachineMemoryResource: calibration measured every core copying at
// once, ComputeParams::dram_all_cores_gbps): the DRAM share of a CPU rank's copies, reductions,
// codec steps outside chains and receive copies is also booked on its machine's memory bus,
// as the bytes a copy would move in that share's time, so cores that stream at once slow
// each other as they do (2-vCPU VM: 1.24x with both copying).
// The model is deterministic (ties broken by event order), so every rank predicts the same.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/schedule.h"
#include "sim/cpu_work.h"
#include "common/status.h"
#include "topo/fabric.h"
#include "weft/weft_compress.h"

namespace weft {

struct SimOptions {
  bool shm_enabled = true;
  // Coarsened schedules (cost_model.h): a simulated message of S elements stands for
  // clamp(S / real_chunk_elems, 1, overhead_multiplier) real ones, whose fixed per-message
  // overheads are all paid. Messages no larger than the real chunk (generators that ignore
  // the chunk policy) count once.
  double overhead_multiplier = 1.0;
  size_t real_chunk_elems = 0;
  int window = -1;  // -1: the schedule's own window
  // Codec steps (compressed schedules): one core's encode and decode speed in GB/s of float32
  // values (compress::MeasuredCodecSpeed); 0 = the rank's copy rate. And the fixed cost of one
  // codec call, us, whatever its size (top-k's selection setup), on top of the rank's
  // per-step overhead.
  double encode_gbps = 0, decode_gbps = 0;
  double encode_fixed_us = 0, decode_fixed_us = 0;
  // The share of a decode-reduce's values it touches: 1 for the block codecs; top-k's kept
  // share (its ratio) for a sum, whose decode-add scatters the kept values into dst
  // (kernels/codec_backend.cc) instead of decoding all of them and reducing every one.
  double decode_reduce_density = 1.0;
  // The codec of a compressed schedule, when its runs of local codec work run fused (the
  // executor's chains, exec/codec_chain.h): a chain's steps after its first work on a tile in
  // the cache, so they run at the core's cache rates: the codec's own (encode_chain_gbps /
  // decode_chain_gbps, measured by calibration), else its DRAM rate x copy_gbps /
  // dram_copy_gbps. nullptr: every step at its DRAM rate.
  double encode_chain_gbps = 0, decode_chain_gbps = 0;
  const weftCompression* fused_codec = nullptr;
};

struct SimResult {
  double time_us = 0;                 // makespan: last rank's last step
  // The same call alone, its shaped ports' buckets full (engine: time_us is a call in a
  // back-to-back sequence). Equal to time_us on fabrics without token buckets.
  double isolated_us = 0;
  // CPU time the call keeps the ranks' cores busy (copies, reductions, codecs, kernel copies;
  // summed over ranks): what competes with other processes on a shared machine. The work
  // itself: a core shared by several ranks stretches each one's span, not its cost.
  double cpu_busy_us = 0;
  // cpu_busy_us by kind of work (CpuWork), summed over ranks: where the CPU goes, to hold
  // against a profile of the measured call (weft-topo --explain for compressed calls).
  std::array<double, kCpuWorkKinds> cpu_work_us{};
  std::vector<double> rank_done_us;   // per rank
  size_t steps = 0;
  bool dram_resident = false;         // some host's working set exceeded its cache (see above)
  double dram_fraction = 0;           // the largest share of a host's working set beyond it
  size_t messages = 0;
  double bytes_moved = 0;             // sum of message sizes
  std::string hottest_resource;       // resource with the most busy time
  double hottest_busy_us = 0;
  // Every resource the call kept busy (name, busy us), in fabric order: where the time went
  // (weft-sim --breakdown).
  std::vector<std::pair<std::string, double>> resource_busy_us;
};

// Errors: a schedule that cannot finish (unmatched send/recv, wait without signal) is
// reported naming the rank, step index, op and peer where it stuck.
StatusOr<SimResult> SimulateSchedule(const Schedule& schedule, const Fabric& fabric, size_t elem_size,
                                     const SimOptions& options);

}  // namespace weft
