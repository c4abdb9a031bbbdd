// Default link and compute constants, with units and sources. "Measured here" means on the
// weft development VM (AMD EPYC, 2 vCPU, KVM, Debian 12) with the microbenchmark recorded in
// topo/README-constants.txt; those are the constants for the shm / TCP-loopback / netns
// fabrics that the lead validates against real runs. Datasheet figures are per direction.
#include "topo/link_table.h"

#include <cmath>
#include <cstring>

#include "kernels/codec_layout.h"

namespace weft {

const char* LinkTypeName(LinkType t) {
  switch (t) {
    case LinkType::kSelf: return "self";
    case LinkType::kSameDevice: return "same_device";
    case LinkType::kSameNuma: return "same_numa";
    case LinkType::kCrossSocket: return "cross_socket";
    case LinkType::kLoopback: return "loopback";
    case LinkType::kNvlink: return "nvlink";
    case LinkType::kPcie: return "pcie";
    case LinkType::kNetwork: return "network";
    case LinkType::kNetworkSpine: return "network_spine";
    case LinkType::kNumLinkTypes: break;
  }
  return "unknown";
}

bool ParseLinkType(const std::string& name, LinkType* out) {
  for (int i = 0; i < static_cast<int>(LinkType::kNumLinkTypes); ++i) {
    if (name == LinkTypeName(static_cast<LinkType>(i))) {
      *out = static_cast<LinkType>(i);
      return true;
    }
  }
  return false;
}

LinkTable LinkTable::Defaults() {
  LinkTable t;
  // self: a local copy; bandwidth = measured single-thread memcpy of 64 MiB here: 9.2-16 GB/s
  // (noisy shared VM; 16 is the quiet figure). Latency: none, only the step overhead.
  t.mutable_link(LinkType::kSelf) = {16.0, 0.0, 16.0, 0.2};
  // same_device: two ranks on one GPU copy through HBM. H100 SXM HBM3 3.35 TB/s (NVIDIA H100
  // datasheet); a copy reads and writes, so ~1.6 TB/s; 2 us = kernel launch + event (CUDA
  // launch latency is typically 2-5 us).
  t.mutable_link(LinkType::kSameDevice) = {1600.0, 2.0, 1600.0, 1.0};
  // same_numa (shm) on a CPU host. Fitted (perf/model_fit.py: ranking and error over ~400
  // measured 2- and 4-rank configurations of 4 KiB-64 MiB on this project's 2-core VM, see
  // perf/RESULTS.md "The cost model against measurement"), each next to what calibration
  // measures here (`weftrun -n 2 weft-topo --calibrate`):
  //  - bw 32 GB/s: the memory bus every same-host stream shares, inside the cache. 2 threads
  //    each copying 1 MiB at once move 70 GB/s of copied bytes (`bin/membound 1048576 2`), so
  //    it rarely binds there;
  //  - flow 10.5 GB/s: one CMA stream (messages >= 256 KiB; smaller ones take the ring, copied
  //    on both sides at the CPU copy rate, engine.h). Calibration: 10.5-14.7;
  //  - latency 0.07 us: a cache-line ping-pong between the 2 cores; overhead 1.2 us per
  //    message: the executor's post/poll/complete path (fitted);
  //  - from DRAM (the share of a working set beyond the cache): bus 10.4 GB/s, one stream
  //    5.6 GB/s. Calibration: 4.1-6.1 for one stream of 128 MiB messages, alone; 2 threads
  //    copying 64 MiB each at once move 22 GB/s of copied bytes (`bin/membound 67108864 2`),
  //    which the bus here counts once per message and once per staging pass.
  t.mutable_link(LinkType::kSameNuma) = {32.0, 0.07, 10.5, 1.2};
  t.mutable_link(LinkType::kSameNuma).dram_bw_gbps = 10.4;
  t.mutable_link(LinkType::kSameNuma).dram_flow_gbps = 5.6;
  // cross_socket (shm over UPI/xGMI): one UPI 2.0 link = 16 GT/s x 2 B = 32 GB/s per direction
  // (Intel Xeon Scalable 4th gen datasheet); remote DRAM adds ~0.1 us (Intel MLC typical
  // local 80-90 ns vs remote 140-150 ns); single-core memcpy caps one stream. From DRAM: no
  // measurement on this 1-socket VM; the same-socket figures (the remote side's memory bus
  // also carries the bytes).
  t.mutable_link(LinkType::kCrossSocket) = {32.0, 0.15, 12.0, 1.0};
  t.mutable_link(LinkType::kCrossSocket).dram_bw_gbps = 10.4;
  t.mutable_link(LinkType::kCrossSocket).dram_flow_gbps = 5.6;
  // loopback (TCP over lo): the machine's TCP stack (one resource per kernel, fabric.cc) moves
  // both directions' bytes with two copies each, so its capacity depends on where the bytes
  // live. Cache-resident: 7 GB/s aggregate, DRAM-resident 3.8 GB/s: measured here, a 2-rank
  // ring allreduce with WEFT_SHM_DISABLE=1 (each rank sends and receives S) takes 312 us at
  // 1 MiB and 35.6 ms at 64 MiB (medians of 5, perf/RESULTS.md). One stream 4.6 GB/s (2 GiB
  // in 1 MiB writes). One way 10 us: the 8-byte allreduce's 8-13 us since the transport
  // spins before it blocks (27 us before, when every message paid a sleep and a wake-up).
  t.mutable_link(LinkType::kLoopback) = {7.0, 10.0, 4.6, 2.0};
  t.mutable_link(LinkType::kLoopback).dram_bw_gbps = 3.8;
  // nvlink (H100 SXM via NVSwitch): 900 GB/s bidirectional = 450 GB/s per direction per GPU
  // (NVIDIA H100 datasheet, NVLink 4, 18 links x 25 GB/s). Latency 1.0 us per message lies
  // between NCCL's own per-hop model for NVLink (src/graph/tuning.cc hwLat: LL 0.6 us, LL128
  // 1.9 us); 0.5 us per message for the in-kernel flag handling (estimate). One schedule
  // channel on a GPU is a kernel that can fill the links, so the stream cap equals the port.
  t.mutable_link(LinkType::kNvlink) = {450.0, 1.0, 450.0, 0.5};
  // pcie (GPU P2P): PCIe 5.0 x16 = 32 GT/s x 16 lanes x 128/130 = 63 GB/s raw per direction;
  // ~50 GB/s achievable after TLP overhead (PCI-SIG spec; typical p2pBandwidthLatencyTest).
  t.mutable_link(LinkType::kPcie) = {50.0, 2.0, 50.0, 1.0};
  // network (RDMA, same leaf / rail): ConnectX-7 NDR 400 Gb/s = 50 GB/s per port per direction
  // (NVIDIA ConnectX-7 datasheet); one-way latency ~2.5 us end to end (ib_write_lat ~1-2 us
  // plus proxy/progress; NCCL tuning.cc hwLat NET is of the same order); one QP reaches line
  // rate. The port bandwidth is replaced by the NIC's discovered speed where known.
  t.mutable_link(LinkType::kNetwork) = {50.0, 2.5, 50.0, 1.5};
  // network_spine: same NIC ports, two extra switch hops (leaf->spine->leaf) at a few hundred
  // ns each plus cable: +0.5 us (estimate); spine capacity is modelled separately by the
  // fabric's oversubscription factor.
  t.mutable_link(LinkType::kNetworkSpine) = {50.0, 3.0, 50.0, 1.5};

  // CPU compute: weft's copy and float32 sum kernels, GB/s of destination. Fitted as the
  // same_numa figures above, and the fit lands on calibration's measurement of the kernels
  // here: cache-resident copy 48 (calibration 44-48), reduce 32 (32); from DRAM copy 20
  // (18-20), reduce 14 (8.7-10 for dst = a + b; 13-16 for dst += src). Overhead 0.05 us per local step: an 8-byte oneshot
  // allreduce over shm on 2 ranks takes 0.48-0.5 us end to end for 8 steps per rank including
  // two signal/wait round trips (`weftrun -n 2 weft-perf -C allreduce -b 8 -e 8 -n 100000`),
  // which bounds the dispatch + loop setup of one local step to a few tens of ns.
  t.cpu_ = {32.0, 48.0, 0.05};
  t.cpu_.dram_reduce_gbps = 14.0;
  t.cpu_.dram_copy_gbps = 20.0;
  // GPU compute: a reduction reads 2 and writes 1 byte per byte of output: 3.35 TB/s / 3 ~
  // 1.1 TB/s (H100 HBM3 datasheet); copy 1.6 TB/s as same_device. Steps of one collective run
  // inside one persistent kernel (as NCCL's do), so a local step costs a loop iteration and a
  // block-wide sync, not a launch: 0.5 us (estimate).
  t.gpu_ = {1100.0, 1600.0, 0.5};
  return t;
}

namespace {

// A compute record's codec rates: `<codec>_encode_gbps`, `<codec>_decode_cache_gbps`, ...
// (int8_encode_gbps=16.5), each written only when measured.
struct CodecRateField {
  double ComputeParams::CodecRates::*rate;
  const char* suffix;
};
constexpr CodecRateField kCodecRateFields[] = {
    {&ComputeParams::CodecRates::encode_gbps, "_encode_gbps"},
    {&ComputeParams::CodecRates::decode_gbps, "_decode_gbps"},
    {&ComputeParams::CodecRates::encode_cache_gbps, "_encode_cache_gbps"},
    {&ComputeParams::CodecRates::decode_cache_gbps, "_decode_cache_gbps"},
};

std::string CodecRateKey(int codec, const CodecRateField& f) {
  return std::string(codec::CodecName(static_cast<weftCodec_t>(codec))) + f.suffix;
}

Status ApplyCodecRates(const Record& r, const std::string& kind, ComputeParams* c) {
  for (int k = weftCodecBf16; k < ComputeParams::kCodecSlots; ++k)
    for (const CodecRateField& f : kCodecRateFields) {
      const std::string key = CodecRateKey(k, f);
      WEFT_ASSIGN_OR_RETURN(c->codecs[k].*f.rate, r.GetDouble(key, c->codecs[k].*f.rate));
      if (!(c->codecs[k].*f.rate >= 0) || !std::isfinite(c->codecs[k].*f.rate))
        return InvalidArgument("compute record kind=" + kind + ": " + key + "=" + r.Get(key) +
                               " must be >= 0 (0 = not measured)");
    }
  return OkStatus();
}

}  // namespace

Status LinkTable::Apply(const std::vector<Record>& records) {
  for (const Record& r : records) {
    if (r.kind == "link") {
      LinkType type;
      if (!ParseLinkType(r.Get("type"), &type))
        return InvalidArgument("link record: unknown type='" + r.Get("type") +
                               "' (self, same_device, same_numa, cross_socket, loopback, nvlink, "
                               "pcie, network, network_spine)");
      LinkParams& p = mutable_link(type);
      WEFT_ASSIGN_OR_RETURN(p.bw_gbps, r.GetDouble("bw_gbps", p.bw_gbps));
      WEFT_ASSIGN_OR_RETURN(p.latency_us, r.GetDouble("latency_us", p.latency_us));
      WEFT_ASSIGN_OR_RETURN(p.flow_gbps, r.GetDouble("flow_gbps", p.flow_gbps));
      WEFT_ASSIGN_OR_RETURN(p.overhead_us, r.GetDouble("overhead_us", p.overhead_us));
      WEFT_ASSIGN_OR_RETURN(p.dram_bw_gbps, r.GetDouble("dram_bw_gbps", p.dram_bw_gbps));
      WEFT_ASSIGN_OR_RETURN(p.dram_flow_gbps, r.GetDouble("dram_flow_gbps", p.dram_flow_gbps));
      WEFT_ASSIGN_OR_RETURN(p.dram_sink_flow_gbps, r.GetDouble("dram_sink_flow_gbps", p.dram_sink_flow_gbps));
      WEFT_ASSIGN_OR_RETURN(p.burst_bytes, r.GetDouble("burst_bytes", p.burst_bytes));
      WEFT_ASSIGN_OR_RETURN(p.stack_cpu_gbps, r.GetDouble("stack_cpu_gbps", p.stack_cpu_gbps));
      WEFT_ASSIGN_OR_RETURN(int64_t measured, r.GetInt("measured", p.measured ? 1 : 0));
      if (measured != 0 && measured != 1)
        return InvalidArgument("link record type=" + r.Get("type") + ": measured=" + r.Get("measured") +
                               " must be 0 or 1");
      p.measured = measured == 1;
      if (p.bw_gbps <= 0 || p.flow_gbps <= 0 || p.latency_us < 0 || p.overhead_us < 0 || p.dram_bw_gbps < 0 ||
          p.dram_flow_gbps < 0 || !(p.burst_bytes >= 0))
        return InvalidArgument("link record type=" + r.Get("type") +
                               ": bandwidths must be > 0, times and burst_bytes >= 0 (burst_bytes=" + r.Get("burst_bytes") + ")");
      if (!(p.dram_sink_flow_gbps >= 0) || !std::isfinite(p.dram_sink_flow_gbps))
        return InvalidArgument("link record type=" + r.Get("type") + ": dram_sink_flow_gbps=" +
                               r.Get("dram_sink_flow_gbps") + " must be >= 0 (0 = not measured)");
      if (!(p.stack_cpu_gbps >= 0) || !std::isfinite(p.stack_cpu_gbps))
        return InvalidArgument("link record type=" + r.Get("type") + ": stack_cpu_gbps=" + r.Get("stack_cpu_gbps") +
                               " must be >= 0 (0 = the stack's CPU not charged)");
    } else if (r.kind == "compute") {
      std::string kind = r.Get("kind");
      ComputeParams* c = kind == "cpu" ? &cpu_ : kind == "gpu" ? &gpu_ : nullptr;
      if (!c) return InvalidArgument("compute record: kind='" + kind + "' (expected cpu or gpu)");
      WEFT_ASSIGN_OR_RETURN(c->reduce_gbps, r.GetDouble("reduce_gbps", c->reduce_gbps));
      WEFT_ASSIGN_OR_RETURN(c->copy_gbps, r.GetDouble("copy_gbps", c->copy_gbps));
      WEFT_ASSIGN_OR_RETURN(c->overhead_us, r.GetDouble("overhead_us", c->overhead_us));
      WEFT_ASSIGN_OR_RETURN(c->dram_reduce_gbps, r.GetDouble("dram_reduce_gbps", c->dram_reduce_gbps));
      WEFT_ASSIGN_OR_RETURN(c->dram_copy_gbps, r.GetDouble("dram_copy_gbps", c->dram_copy_gbps));
      WEFT_ASSIGN_OR_RETURN(c->dram_all_cores_gbps, r.GetDouble("dram_all_cores_gbps", c->dram_all_cores_gbps));
      if (!(c->dram_all_cores_gbps >= 0))
        return InvalidArgument("compute record kind=" + kind + ": dram_all_cores_gbps=" +
                               r.Get("dram_all_cores_gbps") + " must be >= 0 (0 = not measured)");
      WEFT_RETURN_IF_ERROR(ApplyCodecRates(r, kind, c));
      if (c->reduce_gbps <= 0 || c->copy_gbps <= 0 || c->overhead_us < 0 || c->dram_reduce_gbps < 0 ||
          c->dram_copy_gbps < 0)
        return InvalidArgument("compute record kind=" + kind + ": rates must be > 0");
    }
  }
  return OkStatus();
}

std::vector<Record> LinkTable::ToRecords() const {
  std::vector<Record> out;
  for (int i = 0; i < static_cast<int>(LinkType::kNumLinkTypes); ++i) {
    const LinkParams& p = links_[i];
    Record r("link");
    r.Set("type", std::string(LinkTypeName(static_cast<LinkType>(i))));
    r.Set("bw_gbps", p.bw_gbps).Set("latency_us", p.latency_us);
    r.Set("flow_gbps", p.flow_gbps).Set("overhead_us", p.overhead_us);
    // Always written: 0 is a value (no DRAM tier), and dropping it would reload the default.
    r.Set("dram_bw_gbps", p.dram_bw_gbps).Set("dram_flow_gbps", p.dram_flow_gbps);
    if (p.burst_bytes > 0) r.Set("burst_bytes", p.burst_bytes);
    if (p.dram_sink_flow_gbps > 0) r.Set("dram_sink_flow_gbps", p.dram_sink_flow_gbps);
    if (p.stack_cpu_gbps > 0) r.Set("stack_cpu_gbps", p.stack_cpu_gbps);
    if (p.measured) r.Set("measured", static_cast<int64_t>(1));
    out.push_back(r);
  }
  for (int g = 0; g < 2; ++g) {
    const ComputeParams& c = g ? gpu_ : cpu_;
    Record r("compute");
    r.Set("kind", std::string(g ? "gpu" : "cpu"));
    r.Set("reduce_gbps", c.reduce_gbps).Set("copy_gbps", c.copy_gbps).Set("overhead_us", c.overhead_us);
    r.Set("dram_reduce_gbps", c.dram_reduce_gbps).Set("dram_copy_gbps", c.dram_copy_gbps);
    // Only when measured: files and digests from before it stay as they were.
    if (c.dram_all_cores_gbps > 0) r.Set("dram_all_cores_gbps", c.dram_all_cores_gbps);
    for (int k = 0; k < ComputeParams::kCodecSlots; ++k)
      for (const CodecRateField& f : kCodecRateFields)
        if (c.codecs[k].*f.rate > 0) r.Set(CodecRateKey(k, f), c.codecs[k].*f.rate);
    out.push_back(r);
  }
  return out;
}

}  // namespace weft
