// Calls on device buffers: staged through pinned host memory, or device to device over IPC
// (selector.h, "calls on device buffers"). Phases: the call's shape -> the staged candidate
// (PCIe copies + the host selector's algorithm on the CPU-rank view) -> one candidate per
// registered direct algorithm, and across hosts hierarchical_direct (simulated on the GPU
// ranks' routes) -> the fastest.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "algorithms/direct_pattern.h"
#include "common/log.h"
#include "tune/cost_model.h"
#include "tune/selector.h"

namespace weft {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Us(double us) {
  char buf[48];
  snprintf(buf, sizeof buf, "%.2f us", us);
  return buf;
}

bool PerRankBlocks(Collective c) {
  return c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll;
}

bool Modelled(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kAllGather || c == Collective::kReduceScatter ||
         c == Collective::kAllToAll || c == Collective::kBroadcast || c == Collective::kReduce;
}

ScheduleRequest CallRequest(const Fabric& fabric, Collective c, size_t bytes, const DeviceChoiceOptions& o) {
  ScheduleRequest req;
  req.collective = c;
  req.nranks = fabric.nranks();
  req.root = o.root;
  const size_t per = PerRankBlocks(c) ? static_cast<size_t>(req.nranks) : 1;
  req.count = std::max<size_t>(1, bytes / o.elem_size / per);
  req.out_of_place = true;
  return req;
}

// Bytes each rank copies device -> host before, and host -> device after, the host algorithm.
void StagedBytes(Collective c, size_t bytes, int nranks, double* in, double* out) {
  const double whole = static_cast<double>(bytes);
  const double block = whole / std::max(1, nranks);
  *in = c == Collective::kAllGather ? block : whole;
  *out = c == Collective::kReduceScatter ? block : whole;
}

// One rank's copy of `bytes` over its GPU's PCIe link, which the ranks on that GPU share.
double PcieCopyUs(const Fabric& f, int r, double bytes) {
  const RankPlacement& p = f.rank(r);
  const LinkParams& link = f.table().link(LinkType::kPcie);
  double gbps = link.bw_gbps;
  if (p.gpu >= 0 && f.host(p.host).gpus[p.gpu].pcie_gbps > 0) gbps = f.host(p.host).gpus[p.gpu].pcie_gbps;
  gbps = std::min(gbps, link.flow_gbps);
  int sharing = 0;
  for (int q = 0; q < f.nranks(); ++q) sharing += f.SameGpu(r, q) || q == r;
  return link.latency_us + link.overhead_us + bytes * sharing / (gbps * 1e3);
}

DeviceCandidate StagedCandidate(const Fabric& fabric, const ScheduleRequest& call, size_t bytes,
                                const DeviceChoiceOptions& o) {
  DeviceCandidate c{"staged", kInf, ""};
  std::shared_ptr<const Fabric> cpu = fabric.CpuRanksView();
  Selector host(cpu, AlgoOverrides(), o.shm_enabled);
  ScheduleRequest req = call;
  StatusOr<Decision> d = host.Choose(&req, o.elem_size);
  if (!d.ok()) {
    c.why = "staged: no host algorithm: " + d.status().message();
    return c;
  }
  CostOptions co;
  co.shm_enabled = o.shm_enabled;
  StatusOr<CostEstimate> est = PredictCost(*d->algorithm, req, o.elem_size, *cpu, co);
  const double host_us = est.ok() ? est->time_us : d->predicted_us;
  double in = 0, out = 0, copy_in = 0, copy_out = 0;
  StagedBytes(call.collective, bytes, fabric.nranks(), &in, &out);
  for (int r = 0; r < fabric.nranks(); ++r) {  // the slowest rank's copies bound the call
    copy_in = std::max(copy_in, PcieCopyUs(fabric, r, in));
    copy_out = std::max(copy_out, PcieCopyUs(fabric, r, out));
  }
  c.predicted_us = copy_in + host_us + copy_out;
  c.why = "staged: " + Us(c.predicted_us) + " = device->host " + Us(copy_in) + " + host " + d->algorithm->name +
          " " + Us(host_us) + " + host->device " + Us(copy_out) + " (PCIe copies, host algorithm on CPU ranks)";
  return c;
}

// A direct algorithm over IPC on one host, or (across hosts) hierarchical_direct with its
// in-host steps over IPC and its messages across hosts staged through pinned host memory
// (core/device_hybrid): the latter adds one PCIe copy each way of the call's bytes per rank,
// an upper bound (only the leaders' cross-host parts are staged).
DeviceCandidate IpcCandidate(const Fabric& fabric, const AlgorithmInfo& a, const ScheduleRequest& call, size_t bytes,
                             const DeviceChoiceOptions& o, const std::string& unavailable) {
  const bool across_hosts = !a.direct;  // hierarchical_direct
  const std::string label = a.name + (across_hosts ? " (IPC inside hosts, staged across)" : " (IPC)");
  DeviceCandidate c{a.name, kInf, ""};
  if (!unavailable.empty()) {
    c.why = label + ": not available: " + unavailable;
    return c;
  }
  ScheduleRequest req = call;
  req.groups = fabric.HostGroups();
  req.all_ranks_mappable = !across_hosts;
  req.groups_mappable = true;
  if (!a.applicable(req)) {
    c.why = label + ": not applicable to this call";
    return c;
  }
  if (!across_hosts) (void)AskSingleRound(a, &req, o.elem_size);  // timed as the communicator runs it
  CostOptions co;
  co.shm_enabled = o.shm_enabled;
  StatusOr<CostEstimate> est = PredictCost(a, req, o.elem_size, fabric, co);
  if (!est.ok()) {
    c.why = label + ": " + est.status().message();
    return c;
  }
  double staging = 0, in = 0, out = 0;
  if (across_hosts) {
    StagedBytes(call.collective, bytes, fabric.nranks(), &in, &out);
    for (int r = 0; r < fabric.nranks(); ++r)
      staging = std::max(staging, PcieCopyUs(fabric, r, in) + PcieCopyUs(fabric, r, out));
  }
  c.predicted_us = est->time_us + staging;
  c.why = label + ": " + Us(c.predicted_us) + " = " + Us(est->time_us) + " simulated on the GPUs' links" +
          (est->sim.hottest_resource.empty() ? std::string() : " (bottleneck " + est->sim.hottest_resource + ")") +
          (across_hosts ? " + staging across hosts " + Us(staging) : std::string());
  return c;
}

// Why IPC cannot run the call's algorithms on this fabric, or "" when it can: all ranks on
// one host with peer access (direct algorithms), or each host's ranks so (hierarchical).
std::string IpcUnavailable(const Fabric& fabric, const DeviceChoiceOptions& o, bool hierarchical) {
  if (!o.ipc_enabled) return "WEFT_IPC=0";
  std::string why;
  const bool ok = hierarchical ? fabric.HostGpusPeerMapped(&why) : fabric.AllGpusPeerMapped(&why);
  return ok ? std::string() : why;
}

std::mutex g_cache_mu;
// (fabric digest, collective, element size, bucket, root, ipc, shm, ranks): no string to build
// per call.
using DeviceKey = std::tuple<uint64_t, int, size_t, int, int, bool, bool, int>;
std::map<DeviceKey, std::string>& DeviceCache() {
  static std::map<DeviceKey, std::string> cache;
  return cache;
}

}  // namespace

StatusOr<DeviceChoice> ExplainDeviceChoice(const Fabric& fabric, Collective collective, size_t bytes, int nranks,
                                           const DeviceChoiceOptions& options) {
  if (nranks != fabric.nranks())
    return InvalidArgument("device choice: nranks=" + std::to_string(nranks) + " but the fabric has " +
                           std::to_string(fabric.nranks()) + " ranks");
  if (options.elem_size == 0) return InvalidArgument("device choice: elem_size=0");
  DeviceChoice out;
  if (!Modelled(collective)) {
    out.algorithm = "staged";
    out.why = std::string("staged: ") + CollectiveName(collective) + " has no IPC algorithm";
    out.candidates.push_back(DeviceCandidate{"staged", 0, out.why});
    return out;
  }
  const ScheduleRequest call = CallRequest(fabric, collective, bytes, options);
  out.candidates.push_back(StagedCandidate(fabric, call, bytes, options));
  // One host: the direct algorithms. Several: hierarchical_direct (direct steps inside each
  // host), and the direct algorithms listed as unavailable, saying why.
  const bool across_hosts = fabric.HostGroups().size() > 1;
  const std::string direct_unavailable = IpcUnavailable(fabric, options, false);
  for (const AlgorithmInfo& a : AllAlgorithms()) {
    if (a.collective != collective) continue;
    if (a.direct) out.candidates.push_back(IpcCandidate(fabric, a, call, bytes, options, direct_unavailable));
    else if (across_hosts && a.name == "hierarchical_direct")
      out.candidates.push_back(IpcCandidate(fabric, a, call, bytes, options, IpcUnavailable(fabric, options, true)));
  }
  // Fastest first; stable, so staged (listed first) wins ties.
  std::stable_sort(out.candidates.begin(), out.candidates.end(),
                   [](const DeviceCandidate& x, const DeviceCandidate& y) { return x.predicted_us < y.predicted_us; });
  const DeviceCandidate& best = out.candidates.front();
  if (!std::isfinite(best.predicted_us))
    return InternalError("device choice: no candidate for " + std::string(CollectiveName(collective)) + ": " + best.why);
  out.algorithm = best.name;
  out.predicted_us = best.predicted_us;
  out.why = best.why;
  if (out.candidates.size() > 1 && std::isfinite(out.candidates[1].predicted_us))
    out.why += "; next best " + out.candidates[1].name + " " + Us(out.candidates[1].predicted_us);
  return out;
}

std::string ChooseDeviceAlgorithm(const Fabric& fabric, uint64_t fabric_digest, Collective collective,
                                  size_t bytes, int nranks, const DeviceChoiceOptions& options) {
  const int bucket = Selector::SizeBucket(bytes);
  const DeviceKey key{fabric_digest, static_cast<int>(collective), options.elem_size, bucket, options.root,
                      options.ipc_enabled, options.shm_enabled, nranks};
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = DeviceCache().find(key);
    if (it != DeviceCache().end()) return it->second;
  }
  // The bucket's geometric middle, as the selector decides host calls.
  const size_t rep = bucket < 0 ? 0 : static_cast<size_t>(std::ldexp(1.4142135623730951, bucket));
  StatusOr<DeviceChoice> choice = ExplainDeviceChoice(fabric, collective, rep, nranks, options);
  std::string name = "staged";
  if (choice.ok()) {
    name = choice->algorithm;
    WEFT_INFO("device decision %s (bucket 2^%d): %s", CollectiveName(collective), bucket, choice->why.c_str());
  } else {
    WEFT_INFO("device decision %s (bucket 2^%d): staged (%s)", CollectiveName(collective), bucket,
              choice.status().message().c_str());
  }
  std::lock_guard<std::mutex> lock(g_cache_mu);
  DeviceCache()[key] = name;
  return name;
}

std::string Selector::ChooseDevice(Collective collective, size_t bytes, size_t elem_size, int root,
                                   bool ipc_enabled) const {
  if (!fabric_) return "staged";
  DeviceChoiceOptions o;
  o.elem_size = elem_size;
  o.root = root;
  o.ipc_enabled = ipc_enabled;
  o.shm_enabled = shm_;
  return ChooseDeviceAlgorithm(*fabric_, fabric_digest_, collective, bytes, nranks_, o);
}

}  // namespace weft
