// LinkTable: bandwidth, latency and per-message costs of every link type and compute engine
// the fabric models. Every default constant carries its unit and its source in link_table.cc;
// a file of records (`link type=nvlink bw_gbps=400 ...`, `compute kind=cpu reduce_gbps=..`)
// overrides any of them (WEFT_LINK_TABLE or a topology file's `link` records).
//
// Units everywhere: bandwidth in GB/s (1e9 bytes per second) per direction, times in
// microseconds.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "common/status.h"
#include "topo/records.h"
#include "weft/weft_compress.h"

namespace weft {

enum class LinkType : uint8_t {
  kSelf,         // a rank to itself: local copy
  kSameDevice,   // two ranks on one GPU: device-memory copy
  kSameNuma,     // CPU ranks on one NUMA node via shared memory
  kCrossSocket,  // CPU ranks on different NUMA nodes / sockets via shared memory
  kLoopback,     // CPU ranks on one host over TCP loopback (shm disabled)
  kNvlink,       // GPUs on one host through NVLink / NVSwitch
  kPcie,         // GPUs on one host through PCIe peer-to-peer
  kNetwork,      // different hosts below the same leaf switch (or same rail)
  kNetworkSpine, // different hosts whose traffic crosses the spine tier
  kNumLinkTypes,
};
const char* LinkTypeName(LinkType t);
bool ParseLinkType(const std::string& name, LinkType* out);

struct LinkParams {
  double bw_gbps = 1;       // capacity of one port (per rank/device side) per direction, GB/s
  double latency_us = 1;    // one-way wire + stack latency of a message, us
  double flow_gbps = 1;     // what one stream (one schedule channel) can reach, GB/s
  double overhead_us = 1;   // fixed software cost per message (post, progress, completion), us
  // Same-host memory links (self, same_numa, cross_socket) when the call's working set spills
  // out of the last-level cache (engine.h): the memory bus capacity and one two-sided stream's
  // rate from DRAM. 0 = no separate DRAM figure (links that do not go through host memory).
  double dram_bw_gbps = 0;
  double dram_flow_gbps = 0;
  // A receive from DRAM streamed into a codec chain (exec/chain_sink.h): the copy writes into
  // a cache-sized buffer but still reads the sender's memory and pins its pages (CMA), so it
  // is not a cache-rate copy. Measured by calibration (a receive into a 256 KiB sink); 0 = not
  // measured: the engine then halves the DRAM share of such a receive instead.
  double dram_sink_flow_gbps = 0;
  // Network tiers shaped by a token bucket (tc tbf on a veth, a cloud NIC's burst credit):
  // the bucket's depth in bytes. A message the bucket covers leaves at the unshaped line
  // rate instead of bw_gbps (engine.h). 0 = no burst (every byte at bw_gbps). Measured by
  // calibration (a probe after a pause is faster than one right after another) or set by a
  // preset that knows the shaping (netns:KxR@GBIT, as perf/netns/run.sh configures tbf).
  double burst_bytes = 0;
  // CPU the link's software stack costs per byte: one core's rate, GB/s of payload, at which
  // a sending rank's core pushes bytes through it, and at which a receiving rank's core takes
  // them out (the kernel's TCP path: copies, checksums, segmentation, the veth and bridge hops
  // of a namespace harness). The engine charges bytes / stack_cpu_gbps to each side's core
  // (engine.h). Measured by calibration (the CPU time of both ends of a network probe); 0 =
  // not charged (presets; links the CPU does not carry, such as a GPU's).
  double stack_cpu_gbps = 0;
  // Set by calibration (topo/calibrate.h): the figures were measured end to end over the
  // transport the job uses, so routes take them as they are (a TCP network route does not
  // add the loopback stack's defaults on top). Records: `measured=1`.
  bool measured = false;
};

struct ComputeParams {
  double reduce_gbps = 1;   // local reduction rate, GB/s of destination written
  double copy_gbps = 1;     // local copy rate, GB/s
  double overhead_us = 0.2; // fixed cost per local step, us
  // The same rates when the operands are DRAM-resident (working set > LLC share); 0 = same
  // as above (GPU: HBM has no such cliff at collective sizes).
  double dram_reduce_gbps = 0;
  double dram_copy_gbps = 0;
  // The machine's memory with every core copying beyond the LLC at once, GB/s of destination
  // summed over the cores (calibration: one copy thread per core). Cores share the memory
  // bus, so two that stream at once each run below dram_copy_gbps (this project's 2-vCPU VM:
  // 9.1 GB/s alone, 7.3 each with both copying, `membound 67108864 1` / `... 2`); the engine
  // books the DRAM share of every CPU step on the machine's bus of this capacity. 0 = not
  // measured: no shared limit (the presets).
  double dram_all_cores_gbps = 0;
  // Each codec's own kernels on one core (calibration, topo/calibrate_codecs.h), GB/s of
  // float32 values encoded / decoded: beyond the LLC (a codec step over a call's buffers) and
  // in the cache (a codec chain's steps work on L1-resident tiles, exec/codec_chain.h).
  // Indexed by weftCodec_t; 0 = not measured: the cost model scales its table of another
  // machine's figures by dram_copy_gbps (compress/compression_pays.h), which holds for
  // codecs that wait on memory but not for ones that wait on the core (this project's AMD
  // VM runs int8 2.7x and top-k 1.1x faster than that table scaled).
  struct CodecRates {
    double encode_gbps = 0, decode_gbps = 0;
    double encode_cache_gbps = 0, decode_cache_gbps = 0;
  };
  static constexpr int kCodecSlots = weftCodecSign1 + 1;
  std::array<CodecRates, kCodecSlots> codecs{};
};
using CodecRateTable = std::array<ComputeParams::CodecRates, ComputeParams::kCodecSlots>;

class LinkTable {
 public:
  static LinkTable Defaults();
  const LinkParams& link(LinkType t) const { return links_[static_cast<int>(t)]; }
  LinkParams& mutable_link(LinkType t) { return links_[static_cast<int>(t)]; }
  const ComputeParams& cpu() const { return cpu_; }
  const ComputeParams& gpu() const { return gpu_; }
  ComputeParams& mutable_cpu() { return cpu_; }  // calibration (topo/calibrate.h)
  // Applies `link` / `compute` records; other kinds are ignored (topology files mix kinds).
  Status Apply(const std::vector<Record>& records);
  // Every entry as records (what Apply reads back).
  std::vector<Record> ToRecords() const;

 private:
  LinkParams links_[static_cast<int>(LinkType::kNumLinkTypes)];
  ComputeParams cpu_, gpu_;
};

}  // namespace weft
