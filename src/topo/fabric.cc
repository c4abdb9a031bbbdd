// Fabric construction, routes, description and topology files (see fabric.h).
#include "topo/fabric.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "common/settings.h"
#include "topo/presets.h"

namespace weft {

Fabric::Fabric(std::vector<HostInfo> hosts, std::vector<RankPlacement> ranks, LinkTable table,
               NetworkConfig network, std::string name)
    : hosts_(std::move(hosts)), ranks_(std::move(ranks)), table_(std::move(table)),
      network_(network), name_(std::move(name)) {
  BuildResources();
}

// The physical machine of host h: namespaces of one box share its kernel and its cores.
std::string Fabric::MachineOf(int h) const {
  const std::string& id = hosts_[h].id;
  std::string machine = id.substr(0, id.rfind('|'));
  return machine.empty() ? "host" + std::to_string(h) : machine;
}

int Fabric::AddResource(std::string name, double gbps, double dram_gbps, int host) {
  resources_.push_back(FabricResource{std::move(name), gbps, dram_gbps, host});
  return static_cast<int>(resources_.size()) - 1;
}

static double NicCapacity(const NicInfo& n, const LinkTable& t) {
  if (n.gbps > 0) return n.gbps;
  // Unknown speed (virtio, veth): RDMA ports default to the network table entry, others are
  // limited by the TCP stack anyway, so use the loopback figure.
  return n.kind == "rdma" ? t.link(LinkType::kNetwork).bw_gbps : t.link(LinkType::kLoopback).bw_gbps;
}

bool Fabric::AnyCoreShared() const {
  for (const std::vector<int>& mates : core_mates_)
    if (!mates.empty()) return true;
  return false;
}

// One compute resource per GPU and per CPU rank. When a machine runs more CPU ranks than it
// has cores, its ranks are dealt to the cores round-robin (rank order) and the ranks dealt to
// one core are recorded as its mates (CoreMates): the engine slows a rank's CPU work by the
// number of mates busy at the time (the kernel time-slices them: processor sharing).
void Fabric::BuildComputeResources() {
  compute_res_.assign(ranks_.size(), -1);
  core_mates_.assign(ranks_.size(), {});
  machine_mem_.assign(ranks_.size(), -1);
  std::map<std::string, std::vector<int>> machine_ranks;  // hostname|boot_id -> CPU ranks
  for (size_t r = 0; r < ranks_.size(); ++r)
    if (ranks_[r].gpu < 0) machine_ranks[MachineOf(ranks_[r].host)].push_back(static_cast<int>(r));
  for (const auto& kv : machine_ranks) {
    const std::vector<int>& rs = kv.second;
    // The machine's memory bus, shared by its ranks' cores (engine.h): only where it is
    // measured and two ranks can contend for it.
    if (table_.cpu().dram_all_cores_gbps > 0 && rs.size() > 1) {
      const int bus = AddResource("h" + std::to_string(ranks_[rs[0]].host) + ".machine.dram",
                                  table_.cpu().dram_all_cores_gbps);
      for (int r : rs) machine_mem_[r] = bus;
    }
    const size_t cores = static_cast<size_t>(std::max(1, hosts_[ranks_[rs[0]].host].cores));
    if (rs.size() <= cores) continue;
    for (size_t i = 0; i < rs.size(); ++i)
      for (size_t j = i % cores; j < rs.size(); j += cores) core_mates_[rs[i]].push_back(rs[j]);
  }
  std::map<std::pair<int, int>, int> gpu_compute;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const RankPlacement& pl = ranks_[r];
    if (pl.gpu >= 0) {
      auto key = std::make_pair(pl.host, pl.gpu);
      auto it = gpu_compute.find(key);
      if (it == gpu_compute.end())
        it = gpu_compute.emplace(key, AddResource("h" + std::to_string(pl.host) + ".gpu" + std::to_string(pl.gpu) + ".sm",
                                                  table_.gpu().reduce_gbps)).first;
      compute_res_[r] = it->second;
    } else {
      compute_res_[r] = AddResource("rank" + std::to_string(r) + ".core", table_.cpu().reduce_gbps,
                                    table_.cpu().dram_reduce_gbps, pl.host);
    }
  }
}

// Each GPU's ports: NVLink (or its PCIe link when it has none) and, for a GPU with NVLink, its
// PCIe link apart: staging to host memory and peers without NVLink go over PCIe.
void Fabric::BuildGpuPorts(int h) {
  const HostInfo& host = hosts_[h];
  const std::string p = "h" + std::to_string(h) + ".";
  for (size_t g = 0; g < host.gpus.size(); ++g) {
    const GpuInfo& gpu = host.gpus[g];
    bool nvl = host.nvswitch || gpu.nvlink_gbps > 0;
    double cap = nvl ? (gpu.nvlink_gbps > 0 ? gpu.nvlink_gbps : table_.link(LinkType::kNvlink).bw_gbps)
                     : (gpu.pcie_gbps > 0 ? gpu.pcie_gbps : table_.link(LinkType::kPcie).bw_gbps);
    port_tx_[h].push_back(AddResource(p + "gpu" + std::to_string(g) + ".tx", cap));
    port_rx_[h].push_back(AddResource(p + "gpu" + std::to_string(g) + ".rx", cap));
    if (nvl) {
      double pcie = gpu.pcie_gbps > 0 ? gpu.pcie_gbps : table_.link(LinkType::kPcie).bw_gbps;
      pcie_tx_[h].push_back(AddResource(p + "gpu" + std::to_string(g) + ".pcie.tx", pcie));
      pcie_rx_[h].push_back(AddResource(p + "gpu" + std::to_string(g) + ".pcie.rx", pcie));
    } else {
      pcie_tx_[h].push_back(port_tx_[h].back());
      pcie_rx_[h].push_back(port_rx_[h].back());
    }
  }
}

void Fabric::BuildResources() {
  const int H = nhosts();
  port_tx_.assign(H, {});
  port_rx_.assign(H, {});
  pcie_tx_.assign(H, {});
  pcie_rx_.assign(H, {});
  numa_bus_.assign(H, {});
  socket_link_.assign(H, -1);
  tcp_stack_.assign(H, -1);
  nic_tx_.assign(H, {});
  nic_rx_.assign(H, {});
  std::map<std::string, int> machine_stack;  // hostname|boot_id -> TCP stack resource
  std::map<int, double> leaf_capacity;
  for (int h = 0; h < H; ++h) {
    const HostInfo& host = hosts_[h];
    std::string p = "h" + std::to_string(h) + ".";
    BuildGpuPorts(h);
    for (int n = 0; n < host.numa_nodes(); ++n)
      numa_bus_[h].push_back(AddResource(p + "numa" + std::to_string(n) + ".membus",
                                         table_.link(LinkType::kSameNuma).bw_gbps,
                                         table_.link(LinkType::kSameNuma).dram_bw_gbps, h));
    socket_link_[h] = AddResource(p + "socketlink.up", table_.link(LinkType::kCrossSocket).bw_gbps);
    AddResource(p + "socketlink.down", table_.link(LinkType::kCrossSocket).bw_gbps);
    // Namespaces of one machine share its kernel's TCP stack (and its cores): one resource
    // per hostname|boot_id, which is what makes netns "hosts" on one box contend. Its copies
    // run at the loopback's cache or DRAM figure by the working set of the first host on the
    // machine (engine.h; the namespaces of one box share its memory too).
    std::string machine = MachineOf(h);
    auto it = machine_stack.find(machine);
    if (it == machine_stack.end())
      it = machine_stack.emplace(machine, AddResource(p + "tcpstack", table_.link(LinkType::kLoopback).bw_gbps,
                                                      table_.link(LinkType::kLoopback).dram_bw_gbps, h)).first;
    resources_[it->second].per_message = true;
    tcp_stack_[h] = it->second;
    size_t nnics = std::max<size_t>(1, host.nics.size());
    for (size_t n = 0; n < nnics; ++n) {
      double cap = n < host.nics.size() ? NicCapacity(host.nics[n], table_) : table_.link(LinkType::kNetwork).bw_gbps;
      nic_tx_[h].push_back(AddResource(p + "nic" + std::to_string(n) + ".tx", cap));
      nic_rx_[h].push_back(AddResource(p + "nic" + std::to_string(n) + ".rx", cap));
      // A TCP NIC of a shaped tier (tbf on a veth) has the tier's token bucket on both ports,
      // as perf/netns/run.sh shapes both directions.
      if (n < host.nics.size() && host.nics[n].kind != "rdma") {
        resources_[nic_tx_[h].back()].burst_bytes = table_.link(LinkType::kNetwork).burst_bytes;
        resources_[nic_rx_[h].back()].burst_bytes = table_.link(LinkType::kNetwork).burst_bytes;
      }
      int leaf = n < host.nics.size() ? host.nics[n].leaf : 0;
      leaf_capacity[leaf] += cap;
    }
  }
  int max_leaf = leaf_capacity.empty() ? 0 : leaf_capacity.rbegin()->first;
  leaf_up_.assign(max_leaf + 1, -1);
  leaf_down_.assign(max_leaf + 1, -1);
  for (const auto& kv : leaf_capacity) {
    double cap = kv.second / std::max(1e-9, network_.oversubscription);
    leaf_up_[kv.first] = AddResource("leaf" + std::to_string(kv.first) + ".up", cap);
    leaf_down_[kv.first] = AddResource("leaf" + std::to_string(kv.first) + ".down", cap);
  }
  BuildComputeResources();
  // Last-level cache per host: the highest level that holds data (unified or data), all its
  // instances: ranks of the host share them.
  llc_bytes_.assign(H, 0);
  for (int h = 0; h < H; ++h) {
    int level = 0;
    for (const CacheInfo& c : hosts_[h].caches) {
      if (c.type == "instruction" || c.size_bytes <= 0) continue;
      int64_t total = c.size_bytes * std::max(1, c.count);
      if (c.level > level) { level = c.level; llc_bytes_[h] = total; }
      else if (c.level == level) llc_bytes_[h] += total;
    }
  }
}

int Fabric::NicOf(int r) const {
  const RankPlacement& p = ranks_[r];
  int n = p.nic;
  if (n < 0 || n >= static_cast<int>(nic_tx_[p.host].size())) n = 0;
  return n;
}

int Fabric::Leaf(int r) const {
  const HostInfo& h = hosts_[ranks_[r].host];
  int n = NicOf(r);
  return n < static_cast<int>(h.nics.size()) ? h.nics[n].leaf : 0;
}

std::vector<std::vector<int>> Fabric::HostGroups() const {
  std::map<int, int> slot;  // host -> group index, in order of first rank
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < nranks(); ++r) {
    auto it = slot.find(ranks_[r].host);
    if (it == slot.end()) {
      it = slot.emplace(ranks_[r].host, static_cast<int>(groups.size())).first;
      groups.emplace_back();
    }
    groups[it->second].push_back(r);
  }
  return groups;
}

std::vector<std::vector<int>> Fabric::NumaGroups() const {
  std::map<std::pair<int, int>, int> slot;
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < nranks(); ++r) {
    auto key = std::make_pair(ranks_[r].host, ranks_[r].numa);
    auto it = slot.find(key);
    if (it == slot.end()) {
      it = slot.emplace(key, static_cast<int>(groups.size())).first;
      groups.emplace_back();
    }
    groups[it->second].push_back(r);
  }
  return groups;
}

bool Fabric::AllRanksMappable(bool shm_enabled) const {
  for (int r = 1; r < nranks(); ++r)
    if (!SameHost(0, r)) return false;
  return shm_enabled;
}

bool Fabric::GroupsMappable(bool shm_enabled) const { return shm_enabled; }

bool Fabric::GpuRanksPeerMapped(const std::vector<int>& ranks, std::string* why) const {
  for (int r : ranks) {
    if (IsGpu(r)) continue;
    if (why) *why = "rank " + std::to_string(r) + " has no GPU";
    return false;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (size_t j = i + 1; j < ranks.size(); ++j) {
      const RankPlacement& a = ranks_[ranks[i]];
      const RankPlacement& b = ranks_[ranks[j]];
      if (hosts_[a.host].PeerAccess(a.gpu, b.gpu)) continue;
      if (why)
        *why = "GPU " + std::to_string(a.gpu) + " (rank " + std::to_string(ranks[i]) + ") and GPU " +
               std::to_string(b.gpu) + " (rank " + std::to_string(ranks[j]) +
               ") have no peer access (no NVLink, different PCIe root complexes)";
      return false;
    }
  }
  return true;
}

bool Fabric::AllGpusPeerMapped(std::string* why) const {
  for (int r = 1; r < nranks(); ++r) {
    if (SameHost(0, r)) continue;
    if (why) *why = "ranks 0 and " + std::to_string(r) + " are on different hosts";
    return false;
  }
  std::vector<int> all(nranks());
  for (int r = 0; r < nranks(); ++r) all[r] = r;
  return GpuRanksPeerMapped(all, why);
}

bool Fabric::HostGpusPeerMapped(std::string* why) const {
  for (const std::vector<int>& group : HostGroups())
    if (!GpuRanksPeerMapped(group, why)) return false;
  return true;
}

std::shared_ptr<const Fabric> Fabric::CpuRanksView() const {
  std::vector<RankPlacement> ranks = ranks_;
  for (RankPlacement& p : ranks) p.gpu = -1;
  return std::make_shared<Fabric>(hosts_, std::move(ranks), table_, network_, name_ + " (CPU ranks)");
}

LinkType Fabric::Link(int a, int b, bool shm_enabled) const { return RouteOf(a, b, shm_enabled).type; }

// Between hosts: NIC, the leaf/spine links when the leaves differ, and over TCP the kernels'
// stacks; over TCP the loopback's measured costs bound the table's RDMA defaults.
Route Fabric::NetworkRoute(int a, int b) const {
  Route r;
  auto add = [&r](int id) {
    if (id >= 0 && r.nres < Route::kMaxResources) r.res[r.nres++] = id;
  };
  const RankPlacement& pa = ranks_[a];
  const RankPlacement& pb = ranks_[b];
  int na = NicOf(a), nb = NicOf(b);
  int la = Leaf(a), lb = Leaf(b);
  r.type = la == lb ? LinkType::kNetwork : LinkType::kNetworkSpine;
  add(nic_tx_[pa.host][na]);
  if (la != lb) {
    add(leaf_up_[la]);
    add(leaf_down_[lb]);
  }
  add(nic_rx_[pb.host][nb]);
  const HostInfo& ha = hosts_[pa.host];
  bool tcp = ha.nics.empty() || ha.nics[na].kind != "rdma";
  if (tcp) {
    // TCP: both ends' kernels copy the bytes; one resource when they share a machine.
    add(tcp_stack_[pa.host]);
    if (tcp_stack_[pb.host] != tcp_stack_[pa.host]) add(tcp_stack_[pb.host]);
  }
  const LinkParams& p = table_.link(r.type);
  r.latency_us = p.latency_us;
  r.flow_gbps = p.flow_gbps;
  r.overhead_us = p.overhead_us;
  if (tcp && !p.measured) {
    // Table defaults describe RDMA; over TCP the kernel stack's costs apply at least.
    const LinkParams& lo = table_.link(LinkType::kLoopback);
    r.latency_us = std::max(r.latency_us, lo.latency_us);
    r.flow_gbps = std::min(r.flow_gbps, lo.flow_gbps);
    r.overhead_us = std::max(r.overhead_us, lo.overhead_us);
  }
  if (tcp) {
    // The kernel's socket copies are not charged to the cores here either: over
    // a link 20x slower than a copy they are spread thin over the transfer and interleave
    // with the rank's other work; booking each message's copy in one piece would block
    // the core (a 2x4 netns 64 MiB call: +5% predicted, measured at the link bound).
    const LinkParams& lo = table_.link(LinkType::kLoopback);
    // A shaped link: the stream itself runs at what TCP moves unshaped on this machine; the
    // NIC ports' token buckets (FabricResource::burst_bytes) hold it to the shaped rate.
    if (resources_[nic_tx_[pa.host][na]].burst_bytes > 0) r.line_gbps = std::max(r.flow_gbps, lo.flow_gbps);
  }
  return r;
}

Route Fabric::RouteOf(int a, int b, bool shm_enabled) const {
  Route r;
  auto add = [&r](int id) {
    if (id >= 0 && r.nres < Route::kMaxResources) r.res[r.nres++] = id;
  };
  const RankPlacement& pa = ranks_[a];
  const RankPlacement& pb = ranks_[b];
  if (a == b) {
    r.type = LinkType::kSelf;
    add(compute_res_[a]);
  } else if (pa.host == pb.host) {
    int h = pa.host;
    const HostInfo& host = hosts_[h];
    if (pa.gpu >= 0 && pb.gpu >= 0) {
      if (pa.gpu == pb.gpu) {
        r.type = LinkType::kSameDevice;
        add(compute_res_[a]);
      } else {
        const bool nvl = host.NvlinkBetween(pa.gpu, pb.gpu);
        r.type = nvl ? LinkType::kNvlink : LinkType::kPcie;
        add(nvl ? port_tx_[h][pa.gpu] : pcie_tx_[h][pa.gpu]);
        add(nvl ? port_rx_[h][pb.gpu] : pcie_rx_[h][pb.gpu]);
      }
    } else if (pa.gpu >= 0 || pb.gpu >= 0) {
      r.type = LinkType::kPcie;  // host <-> device copy
      if (pa.gpu >= 0) add(pcie_tx_[h][pa.gpu]); else add(numa_bus_[h][pa.numa]);
      if (pb.gpu >= 0) add(pcie_rx_[h][pb.gpu]); else add(numa_bus_[h][pb.numa]);
    } else if (!shm_enabled) {
      r.type = LinkType::kLoopback;
      add(tcp_stack_[h]);
      // The kernel's socket copies are not charged to the ranks' cores. Charging each
      // message's copy on both ends (session 7) fitted the sweeps better (tcp2 -48..-62% ->
      // -26..-51%) but made the selector drop the ring's 512K chunks for one piece, which
      // measured 1.4-1.9x faster at 2-32 MiB and 1.17-1.18x slower at 64 MiB (quiet,
      // perf/model/selection_guard.sh, perf/regression.sh): the 64 MiB row is the TCP goal's.
    } else if (pa.numa == pb.numa) {
      r.type = LinkType::kSameNuma;
      add(numa_bus_[h][pa.numa]);
    } else {
      r.type = LinkType::kCrossSocket;
      add(numa_bus_[h][pa.numa]);
      add(socket_link_[h] + (pa.numa < pb.numa ? 0 : 1));
      add(numa_bus_[h][pb.numa]);
    }
  } else {
    return NetworkRoute(a, b);
  }
  const LinkParams& p = table_.link(r.type);
  r.latency_us = p.latency_us;
  r.flow_gbps = p.flow_gbps;
  r.overhead_us = p.overhead_us;
  return r;
}

std::string Fabric::Describe() const {
  std::ostringstream o;
  o << "Fabric '" << name_ << "': " << nranks() << " rank(s) on " << nhosts() << " host(s)\n";
  // Identical hosts (presets) are described once.
  for (int h = 0; h < nhosts(); ++h) {
    if (h >= 2 && h < nhosts() - 1) {
      if (h == 2) o << "  ... hosts 2.." << nhosts() - 2 << " described like host 1\n";
      continue;
    }
    std::string d = hosts_[h].Describe();
    std::istringstream in(d);
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
      o << (first ? "[host " + std::to_string(h) + "] " : "  ") << line << "\n";
      first = false;
    }
  }
  o << "Ranks (rank: host local numa gpu nic leaf):\n";
  for (int r = 0; r < nranks(); ++r) {
    if (r >= 16 && r < nranks() - 4) {
      if (r == 16) o << "  ...\n";
      continue;
    }
    const RankPlacement& p = ranks_[r];
    o << "  " << r << ": h" << p.host << " local=" << p.local_rank << " numa=" << p.numa << " gpu=" << p.gpu
      << " nic=" << p.nic << " leaf=" << Leaf(r) << "\n";
  }
  std::vector<std::vector<int>> groups = HostGroups();
  o << "Host groups: " << groups.size() << " (sizes";
  for (size_t g = 0; g < groups.size() && g < 16; ++g) o << " " << groups[g].size();
  if (groups.size() > 16) o << " ...";
  o << ")\nNUMA groups: " << NumaGroups().size() << "\n";
  // Link classes seen from rank 0 (and counts), with the table's constants.
  std::map<LinkType, int> seen;
  for (int b = 0; b < nranks(); ++b) seen[Link(0, b, true)]++;
  o << "Links from rank 0 (shm on):\n";
  for (const auto& kv : seen) {
    const LinkParams& p = table_.link(kv.first);
    o << "  " << LinkTypeName(kv.first) << " x" << kv.second << ": " << p.bw_gbps << " GB/s, "
      << p.latency_us << " us, stream " << p.flow_gbps << " GB/s, +" << p.overhead_us << " us/msg\n";
  }
  if (network_.oversubscription != 1.0) o << "Network oversubscription " << network_.oversubscription << ":1\n";
  return o.str();
}

std::vector<Record> Fabric::ToRecords() const {
  std::vector<Record> out;
  Record f("fabric");
  f.Set("version", static_cast<int64_t>(1)).Set("name", name_);
  f.Set("nhosts", static_cast<int64_t>(nhosts())).Set("nranks", static_cast<int64_t>(nranks()));
  out.push_back(f);
  Record n("network");
  n.Set("oversubscription", network_.oversubscription);
  out.push_back(n);
  for (int h = 0; h < nhosts(); ++h)
    for (Record& r : hosts_[h].ToRecords(h)) out.push_back(std::move(r));
  for (int r = 0; r < nranks(); ++r) out.push_back(ranks_[r].ToRecord(r));
  for (Record& r : table_.ToRecords()) out.push_back(std::move(r));
  return out;
}

uint64_t Fabric::Digest() const {
  std::string s;
  for (Record r : ToRecords()) {
    if (r.kind == "fabric") continue;  // the name does not influence decisions
    if (r.kind == "host") { r.Set("hwloc_xml", std::string()); r.Set("source", std::string()); }
    s += r.ToLine() + "\n";
  }
  return Fnv1a(s);
}

// ---- construction from records / summaries ----

StatusOr<std::shared_ptr<const Fabric>> FabricFromRecords(const std::vector<Record>& records,
                                                         const std::string& origin) {
  int64_t nhosts = -1, nranks = -1;
  std::string name = "file";
  NetworkConfig net;
  std::map<int64_t, const Record*> rank_records;
  for (const Record& r : records) {
    if (r.kind == "fabric") {
      WEFT_ASSIGN_OR_RETURN(nhosts, r.GetInt("nhosts", -1));
      WEFT_ASSIGN_OR_RETURN(nranks, r.GetInt("nranks", -1));
      name = r.Get("name", name);
    } else if (r.kind == "network") {
      WEFT_ASSIGN_OR_RETURN(net.oversubscription, r.GetDouble("oversubscription", 1.0));
      if (net.oversubscription <= 0)
        return InvalidArgument(origin + ": network oversubscription=" + r.Get("oversubscription") + " must be > 0");
    } else if (r.kind == "rank") {
      WEFT_ASSIGN_OR_RETURN(int64_t idx, r.GetInt("rank", -1));
      rank_records[idx] = &r;
    }
  }
  if (nhosts <= 0 || nranks <= 0)
    return InvalidArgument(origin + ": missing 'fabric nhosts=.. nranks=..' record");
  if (nhosts > kMaxFabricRanks || nranks > kMaxFabricRanks)
    return InvalidArgument(origin + ": fabric nhosts=" + std::to_string(nhosts) + " nranks=" + std::to_string(nranks) +
                           ": at most " + std::to_string(kMaxFabricRanks) + " of each");
  // Group host-scoped records by host index once (files with 1000s of hosts stay linear).
  std::vector<std::vector<Record>> per_host(nhosts);
  for (const Record& r : records) {
    if (r.kind != "host" && r.kind != "cache" && r.kind != "gpu" && r.kind != "nic") continue;
    WEFT_ASSIGN_OR_RETURN(int64_t h, r.GetInt("host", 0));
    if (h < 0 || h >= nhosts)
      return InvalidArgument(origin + ": " + r.kind + " record host=" + std::to_string(h) + " out of range [0," +
                             std::to_string(nhosts) + ")");
    per_host[h].push_back(r);
  }
  std::vector<HostInfo> hosts;
  for (int64_t h = 0; h < nhosts; ++h) {
    auto host = HostFromRecords(per_host[h], static_cast<int>(h));
    if (!host.ok()) return host.status().WithContext(origin);
    hosts.push_back(std::move(host.value()));
  }
  std::vector<RankPlacement> ranks;
  for (int64_t r = 0; r < nranks; ++r) {
    auto it = rank_records.find(r);
    if (it == rank_records.end()) return InvalidArgument(origin + ": no 'rank' record for rank=" + std::to_string(r));
    auto p = PlacementFromRecord(*it->second);
    if (!p.ok()) return p.status().WithContext(origin + ": rank " + std::to_string(r));
    const RankPlacement& pl = p.value();
    if (pl.host < 0 || pl.host >= nhosts)
      return InvalidArgument(origin + ": rank " + std::to_string(r) + " host=" + std::to_string(pl.host) + " out of range");
    const HostInfo& host = hosts[pl.host];
    if (pl.numa < 0 || pl.numa >= host.numa_nodes())
      return InvalidArgument(origin + ": rank " + std::to_string(r) + " numa=" + std::to_string(pl.numa) +
                             " but host " + std::to_string(pl.host) + " has " + std::to_string(host.numa_nodes()) + " NUMA node(s)");
    if (pl.gpu >= static_cast<int>(host.gpus.size()))
      return InvalidArgument(origin + ": rank " + std::to_string(r) + " gpu=" + std::to_string(pl.gpu) + " but host " +
                             std::to_string(pl.host) + " has " + std::to_string(host.gpus.size()) + " GPU(s)");
    if (pl.nic >= static_cast<int>(host.nics.size()))
      return InvalidArgument(origin + ": rank " + std::to_string(r) + " nic=" + std::to_string(pl.nic) + " but host " +
                             std::to_string(pl.host) + " has " + std::to_string(host.nics.size()) + " NIC(s)");
    ranks.push_back(pl);
  }
  LinkTable table = LinkTable::Defaults();
  WEFT_RETURN_IF_ERROR_CTX(table.Apply(records), origin);
  return std::shared_ptr<const Fabric>(std::make_shared<Fabric>(std::move(hosts), std::move(ranks), table, net, name));
}

namespace {
std::mutex g_discovery_mu;
bool g_discovered = false;
StatusOr<HostInfo> g_local_host{HostInfo()};
}  // namespace

StatusOr<std::string> DescribeLocalRank(int local_rank) {
  if (local_rank < 0) return InvalidArgument("DescribeLocalRank: local_rank=" + std::to_string(local_rank) + " must be >= 0");
  HostInfo host;
  {
    // Discovery walks /sys (or hwloc) and takes milliseconds; thread-per-rank tests call
    // this once per rank, so do it once per process.
    std::lock_guard<std::mutex> lock(g_discovery_mu);
    if (!g_discovered) {
      g_local_host = DiscoverLocalHost();
      g_discovered = true;
    }
    if (!g_local_host.ok()) return g_local_host.status().WithContext("topology discovery");
    host = g_local_host.value();
  }
  RankPlacement p = PlaceLocalRank(host, local_rank);
  std::vector<Record> recs = host.ToRecords(0);
  recs.push_back(p.ToRecord(-1));
  return FormatRecords(recs);
}

StatusOr<std::shared_ptr<const Fabric>> BuildFabric(const std::vector<std::string>& summaries) {
  const int n = static_cast<int>(summaries.size());
  if (n == 0) return InvalidArgument("BuildFabric: no summaries (nranks=0)");
  std::shared_ptr<const Fabric> fabric;
  const std::string spec = SettingText("WEFT_TOPO_FILE");
  if (!spec.empty()) {
    StatusOr<std::shared_ptr<const Fabric>> loaded =
        spec.rfind("preset:", 0) == 0 ? MakePreset(spec.substr(7), n) : LoadTopologyFile(spec);
    if (!loaded.ok()) return loaded.status().WithContext("WEFT_TOPO_FILE=" + ShownValue(spec));
    if (loaded.value()->nranks() != n)
      return InvalidUsage("WEFT_TOPO_FILE=" + ShownValue(spec) + " describes " + std::to_string(loaded.value()->nranks()) +
                          " ranks but the communicator has " + std::to_string(n));
    fabric = loaded.value();
  } else {
    std::vector<HostInfo> hosts;
    std::map<std::string, int> host_index;
    std::vector<RankPlacement> ranks;
    for (int r = 0; r < n; ++r) {
      std::string origin = "summary of rank " + std::to_string(r);
      WEFT_ASSIGN_OR_RETURN(std::vector<Record> recs, ParseRecords(summaries[r], origin));
      auto host = HostFromRecords(recs, 0);
      if (!host.ok()) return host.status().WithContext(origin);
      const Record* rank_rec = nullptr;
      for (const Record& rec : recs)
        if (rec.kind == "rank") rank_rec = &rec;
      if (!rank_rec) return InvalidArgument(origin + ": no 'rank' record");
      auto p = PlacementFromRecord(*rank_rec);
      if (!p.ok()) return p.status().WithContext(origin);
      auto it = host_index.find(host.value().id);
      if (it == host_index.end()) {
        it = host_index.emplace(host.value().id, static_cast<int>(hosts.size())).first;
        hosts.push_back(host.value());
      }
      RankPlacement pl = p.value();
      pl.host = it->second;
      const HostInfo& h = hosts[pl.host];
      if (pl.numa < 0 || pl.numa >= h.numa_nodes()) pl.numa = 0;
      if (pl.gpu >= static_cast<int>(h.gpus.size())) pl.gpu = -1;
      if (pl.nic >= static_cast<int>(h.nics.size())) pl.nic = -1;
      ranks.push_back(pl);
    }
    // Ranks in one process (thread-per-rank) all report local_rank from their launcher;
    // renumber local ranks per host in rank order so they are distinct and dense.
    std::map<int, int> next_local;
    for (RankPlacement& p : ranks) p.local_rank = next_local[p.host]++;
    fabric = std::make_shared<Fabric>(std::move(hosts), std::move(ranks), LinkTable::Defaults(), NetworkConfig(),
                                      "discovered");
  }
  const std::string table_file = SettingText("WEFT_LINK_TABLE");
  if (!table_file.empty()) {
    WEFT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(table_file));
    WEFT_ASSIGN_OR_RETURN(std::vector<Record> recs, ParseRecords(text, table_file));
    LinkTable table = fabric->table();
    WEFT_RETURN_IF_ERROR_CTX(table.Apply(recs), "WEFT_LINK_TABLE=" + ShownValue(table_file));
    std::vector<HostInfo> hosts;
    std::vector<RankPlacement> ranks;
    for (int h = 0; h < fabric->nhosts(); ++h) hosts.push_back(fabric->host(h));
    for (int r = 0; r < fabric->nranks(); ++r) ranks.push_back(fabric->rank(r));
    fabric = std::make_shared<Fabric>(std::move(hosts), std::move(ranks), table, fabric->network(), fabric->name());
  }
  return fabric;
}

// ---- topology files ----

static std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Status SaveTopologyFile(const Fabric& fabric, const std::string& path) {
  std::vector<Record> recs = fabric.ToRecords();
  std::string local_id = TopoHostIdentity();
  for (Record& r : recs) {
    if (r.kind != "host") continue;
    if (r.Get("id") != local_id || r.Get("source") != "hwloc") continue;
    // The local host's full hwloc tree goes beside the file (lstopo --input can show it).
    auto xml = ExportLocalHwlocXml();
    if (!xml.ok()) continue;
    std::string name = path.substr(DirOf(path).size()) + ".host" + r.Get("host") + ".xml";
    WEFT_RETURN_IF_ERROR(WriteTextFile(DirOf(path) + name, xml.value()));
    r.Set("hwloc_xml", name);
  }
  std::string text = "# weft topology file v1: fabric, network, hosts (+cache/gpu/nic), ranks, link constants\n" +
                     FormatRecords(recs);
  return WriteTextFile(path, text).WithContext("saving topology");
}

StatusOr<std::shared_ptr<const Fabric>> LoadTopologyFile(const std::string& path) {
  WEFT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  WEFT_ASSIGN_OR_RETURN(std::vector<Record> recs, ParseRecords(text, path));
  // A host with an hwloc XML attachment takes its CPU/cache/GPU description from the XML
  // (authoritative, full tree) when weft has hwloc; NICs and placement stay from the records.
  for (Record& r : recs) {
    if (r.kind != "host" || r.Get("hwloc_xml").empty()) continue;
    std::string xml = r.Get("hwloc_xml");
    if (xml[0] != '/') xml = DirOf(path) + xml;
    auto from_xml = DiscoverHostFromHwlocXml(xml);
    if (!from_xml.ok()) continue;  // without hwloc the records already say enough
    const HostInfo& hx = from_xml.value();
    r.Set("packages", static_cast<int64_t>(hx.packages)).Set("cores", static_cast<int64_t>(hx.cores));
    r.Set("pus", static_cast<int64_t>(hx.pus));
  }
  return FabricFromRecords(recs, path);
}

}  // namespace weft
