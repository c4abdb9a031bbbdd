// Preset fabrics (see presets.h). Hardware figures: NVIDIA DGX H100 user guide (2x Xeon
// Platinum 8480C, 56 cores each; 8x H100 SXM5 via 4 NVSwitch chips; 8x ConnectX-7 400 Gb/s
// for the compute fabric) and the link table's sources.
#include "topo/presets.h"

#include <algorithm>
#include <cstdlib>

namespace weft {
namespace {

HostInfo DgxH100Host(int node, int nodes_per_leaf, bool rail_optimized) {
  HostInfo h;
  h.hostname = "dgx" + std::to_string(node);
  h.id = "dgx" + std::to_string(node) + "|preset|0";
  h.source = "preset";
  h.packages = 2;
  h.cores = 112;
  h.pus = 224;
  h.numa_package = {0, 1};
  h.numa_cores = {56, 56};
  h.caches = {{1, "data", 48 << 10, 112}, {2, "unified", 2 << 20, 112}, {3, "unified", 105 << 20, 2}};
  h.nvswitch = true;
  for (int g = 0; g < 8; ++g) {
    GpuInfo gpu;
    char pci[32];
    snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x18 + 0x10 * g);
    gpu.pci = pci;
    gpu.name = "H100-SXM";
    gpu.numa = g < 4 ? 0 : 1;
    gpu.nvlink_gbps = 450;  // NVLink 4: 18 links x 25 GB/s per direction
    gpu.pcie_gbps = 63;     // PCIe 5.0 x16
    h.gpus.push_back(gpu);
    NicInfo nic;
    nic.name = "mlx5_" + std::to_string(g);
    snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x19 + 0x10 * g);
    nic.pci = pci;
    nic.kind = "rdma";
    nic.numa = gpu.numa;
    nic.gbps = 50;  // 400 Gb/s
    nic.pcie_gbps = 63;
    nic.leaf = rail_optimized ? g : node / nodes_per_leaf;
    h.nics.push_back(nic);
  }
  return h;
}

StatusOr<int> ParsePositive(const std::string& s, const std::string& what, const std::string& preset) {
  char* end = nullptr;
  long v = strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v <= 0 || v > (1 << 20))
    return InvalidArgument("preset '" + preset + "': " + what + " '" + s + "' is not a positive integer");
  return static_cast<int>(v);
}

std::shared_ptr<const Fabric> Dgx(int nodes, int nranks, bool rail, double oversub, const std::string& name) {
  std::vector<HostInfo> hosts;
  std::vector<RankPlacement> ranks;
  const int per_leaf = 4;  // fat-tree: 4 nodes x 8 NICs = 32 down-ports of a 64-port leaf
  for (int n = 0; n < nodes; ++n) hosts.push_back(DgxH100Host(n, per_leaf, rail));
  for (int r = 0; r < nranks; ++r) {
    RankPlacement p;
    p.host = r / 8;
    p.local_rank = r % 8;
    p.gpu = r % 8;
    p.numa = p.gpu < 4 ? 0 : 1;
    p.nic = p.gpu;
    ranks.push_back(p);
  }
  NetworkConfig net;
  net.oversubscription = oversub;
  return std::make_shared<Fabric>(std::move(hosts), std::move(ranks), LinkTable::Defaults(), net, name);
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"dgx-h100", "dgx-h100:N", "dgx-h100-fattree:N[:OVERSUB]", "netns:KxR[@GBITS]", "host:R"};
}

namespace {

using FabricOr = StatusOr<std::shared_ptr<const Fabric>>;

Status TooManyRanks(const std::string& name, int64_t ranks) {
  return InvalidArgument("preset '" + name + "' has " + std::to_string(ranks) + " ranks: at most " +
                         std::to_string(kMaxFabricRanks));
}

// A host of this development machine's shape (2 cores, one NUMA node), as the netns harness's
// namespaces and the one-host preset see it.
HostInfo TwoCoreHost(const std::string& hostname, const std::string& id) {
  HostInfo host;
  host.hostname = hostname;
  host.id = id;
  host.source = "preset";
  host.cores = 2;
  host.pus = 2;
  host.numa_package = {0};
  host.numa_cores = {2};
  return host;
}

// dgx-h100[:N] (rail-optimized) and dgx-h100-fattree[:N[:OVERSUB]].
FabricOr DgxPreset(const std::string& name, const std::string& arg, bool rail, int nranks) {
  double oversub = 1;
  int nodes = 1;
  if (!arg.empty()) {
    std::string n = arg;
    size_t c2 = arg.find(':');
    if (c2 != std::string::npos) {
      if (rail) return InvalidArgument("preset '" + name + "': dgx-h100 takes only a node count (dgx-h100:N)");
      n = arg.substr(0, c2);
      char* end = nullptr;
      oversub = strtod(arg.c_str() + c2 + 1, &end);
      if (*end || oversub < 1)
        return InvalidArgument("preset '" + name + "': oversubscription '" + arg.substr(c2 + 1) + "' must be a number >= 1");
    }
    WEFT_ASSIGN_OR_RETURN(nodes, ParsePositive(n, "node count", name));
  }
  if (nranks <= 0 && int64_t{8} * nodes > kMaxFabricRanks) return TooManyRanks(name, int64_t{8} * nodes);
  if (nranks > kMaxFabricRanks)
    return InvalidArgument("preset '" + name + "' for " + std::to_string(nranks) + " ranks: at most " +
                           std::to_string(kMaxFabricRanks));
  if (nranks <= 0) nranks = 8 * nodes;
  nodes = (nranks + 7) / 8;  // the communicator's size decides the node count
  return Dgx(nodes, nranks, rail, oversub, name);
}

// netns:KxR[@GBITS]: K namespaces ("hosts") of R ranks on this machine, veths shaped to GBITS.
FabricOr NetnsPreset(const std::string& name, const std::string& arg, int nranks) {
  size_t x = arg.find('x');
  if (x == std::string::npos)
    return InvalidArgument("preset '" + name + "': expected netns:KxR (K hosts of R ranks), e.g. netns:2x4");
  std::string rest = arg.substr(x + 1), rate;
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    rate = rest.substr(at + 1);
    rest = rest.substr(0, at);
  }
  WEFT_ASSIGN_OR_RETURN(int k, ParsePositive(arg.substr(0, x), "host count K", name));
  WEFT_ASSIGN_OR_RETURN(int per, ParsePositive(rest, "ranks per host R", name));
  double gbps = 0;
  if (!rate.empty()) {
    char* end = nullptr;
    double gbit = strtod(rate.c_str(), &end);
    if (*end || gbit <= 0) return InvalidArgument("preset '" + name + "': rate '" + rate + "' must be Gbit/s > 0");
    gbps = gbit / 8;
  }
  if (int64_t{k} * per > kMaxFabricRanks) return TooManyRanks(name, int64_t{k} * per);
  if (nranks > 0 && nranks != k * per)
    return InvalidArgument("preset '" + name + "' has " + std::to_string(k * per) + " ranks, asked for " +
                           std::to_string(nranks));
  std::vector<HostInfo> hosts;
  std::vector<RankPlacement> ranks;
  for (int h = 0; h < k; ++h) {
    // Same machine (hostname|boot_id), different netns inode: distinct hosts that share one
    // kernel TCP stack, exactly like the harness's namespaces.
    HostInfo host = TwoCoreHost("ns" + std::to_string(h), "netns-machine|preset|" + std::to_string(h));
    NicInfo veth;
    veth.name = "veth" + std::to_string(h);
    veth.kind = "virtual";
    veth.gbps = gbps;
    host.nics.push_back(veth);
    hosts.push_back(host);
    for (int i = 0; i < per; ++i) {
      RankPlacement p;
      p.host = h;
      p.local_rank = i;
      p.nic = 0;
      ranks.push_back(p);
    }
  }
  LinkTable table = LinkTable::Defaults();
  // The harness's tbf burst (perf/netns/run.sh): 4 ms of traffic at the rate, at least
  // 128 KiB (1 MB at 2 Gbit/s). Without a rate the veth is not shaped: no burst.
  if (gbps > 0) table.mutable_link(LinkType::kNetwork).burst_bytes = std::max(131072.0, gbps * 1e9 / 250);
  return std::shared_ptr<const Fabric>(std::make_shared<Fabric>(std::move(hosts), std::move(ranks),
                                                                table, NetworkConfig(), name));
}

// host[:R]: R ranks on one host of this machine's shape.
FabricOr HostPreset(const std::string& name, const std::string& arg, int nranks) {
  int per = nranks > 0 ? nranks : 2;
  if (!arg.empty()) { WEFT_ASSIGN_OR_RETURN(per, ParsePositive(arg, "rank count", name)); }
  if (per > kMaxFabricRanks) return TooManyRanks(name, per);
  if (nranks > 0 && nranks != per)
    return InvalidArgument("preset '" + name + "' has " + std::to_string(per) + " ranks, asked for " + std::to_string(nranks));
  std::vector<RankPlacement> ranks;
  for (int i = 0; i < per; ++i) {
    RankPlacement p;
    p.local_rank = i;
    ranks.push_back(p);
  }
  return std::shared_ptr<const Fabric>(std::make_shared<Fabric>(
      std::vector<HostInfo>{TwoCoreHost("host0", "host0|preset|0")}, std::move(ranks),
      LinkTable::Defaults(), NetworkConfig(), name));
}

}  // namespace

StatusOr<std::shared_ptr<const Fabric>> MakePreset(const std::string& name, int nranks) {
  std::string base = name, arg;
  size_t colon = name.find(':');
  if (colon != std::string::npos) {
    base = name.substr(0, colon);
    arg = name.substr(colon + 1);
  }
  if (base == "dgx-h100" || base == "dgx-h100-fattree") return DgxPreset(name, arg, base == "dgx-h100", nranks);
  if (base == "netns") return NetnsPreset(name, arg, nranks);
  if (base == "host") return HostPreset(name, arg, nranks);
  std::string known;
  for (const std::string& n : PresetNames()) known += " " + n;
  return InvalidArgument("unknown preset '" + name + "' (known:" + known + ")");
}

}  // namespace weft
