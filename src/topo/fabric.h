// Fabric: the communicator's model of where its ranks are and how they are connected.
//
// Built from every rank's summary (DescribeLocalRank, allgathered by the communicator), from a
// topology file (WEFT_TOPO_FILE replaces discovery) or from a preset (presets.h). It answers:
//   - groupings: which ranks share a host, NUMA node, GPU, NIC, leaf switch;
//   - typed links between ranks (LinkType) with bandwidth and latency (LinkTable);
//   - routes: the shared resources (ports, memory buses, socket links, NIC ports, switch
//     uplinks, a machine's TCP stack) a message from a to b occupies, which is what lets the
//     cost model and the simulator make concurrent transfers contend.
// A Fabric is immutable once built and identical on every rank (it is built from the same
// allgathered bytes), so decisions derived from it are identical too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "topo/host.h"
#include "topo/link_table.h"
#include "topo/records.h"

namespace weft {

// A shared capacity: one direction of a port, a memory bus, a switch uplink.
struct FabricResource {
  std::string name;  // "h0.gpu3.tx", "h1.nic0.rx", "leaf2.up", ...
  double gbps = 1;   // capacity, GB/s
  // Capacity when the call's working set on `host` exceeds its last-level cache (memory buses,
  // CPU cores: see engine.h); 0 = not memory-bound, `gbps` always applies.
  double dram_gbps = 0;
  int host = -1;     // host whose memory this resource is, -1 for network resources
  // A shaped port (token bucket, LinkParams::burst_bytes): bytes the bucket holds pass
  // without occupying `gbps`; it refills at `gbps` while idle. 0 = not shaped.
  double burst_bytes = 0;
  // A kernel's TCP stack: each message's fixed cost (Route::overhead_us: syscalls, per-packet
  // processing, polls) is CPU time of that kernel, so it takes capacity here as well as
  // delaying its own stream (engine.cc, Transfer).
  bool per_message = false;
};

// What one message from rank a to rank b goes through.
struct Route {
  static constexpr int kMaxResources = 6;
  LinkType type = LinkType::kSelf;
  int nres = 0;
  int res[kMaxResources] = {0};
  double latency_us = 0;
  double flow_gbps = 1;   // one stream's cap
  double overhead_us = 0; // per message
  // A shaped route (its ports have a burst): the stream's own cap is the unshaped line rate,
  // the ports' token buckets do the shaping. 0 = not shaped.
  double line_gbps = 0;
};

// Network shape between hosts.
struct NetworkConfig {
  // Leaf->spine capacity = (sum of the leaf's NIC port bandwidth) / oversubscription.
  double oversubscription = 1.0;
};

// The largest fabric weft models: 131072 ranks (or hosts). Topology files and presets beyond it
// are refused with an error naming the field, instead of building a model that does not fit in
// memory (a fuzzed "nhosts=100000000000" or "netns:4059x449" did that). 16x today's largest
// preset in use (dgx-h100:2048, 16384 ranks).
constexpr int64_t kMaxFabricRanks = int64_t{1} << 17;

class Fabric {
 public:
  Fabric(std::vector<HostInfo> hosts, std::vector<RankPlacement> ranks, LinkTable table,
         NetworkConfig network, std::string name);

  int nranks() const { return static_cast<int>(ranks_.size()); }
  int nhosts() const { return static_cast<int>(hosts_.size()); }
  const std::string& name() const { return name_; }
  const HostInfo& host(int h) const { return hosts_[h]; }
  const RankPlacement& rank(int r) const { return ranks_[r]; }
  const LinkTable& table() const { return table_; }
  const NetworkConfig& network() const { return network_; }

  // Ranks grouped by host, in order of each host's lowest rank; ranks ascending inside.
  std::vector<std::vector<int>> HostGroups() const;
  std::vector<std::vector<int>> NumaGroups() const;  // by (host, NUMA node)
  bool SameHost(int a, int b) const { return ranks_[a].host == ranks_[b].host; }
  bool SameNuma(int a, int b) const { return SameHost(a, b) && ranks_[a].numa == ranks_[b].numa; }
  bool SameGpu(int a, int b) const {
    return SameHost(a, b) && ranks_[a].gpu >= 0 && ranks_[a].gpu == ranks_[b].gpu;
  }
  bool IsGpu(int r) const { return ranks_[r].gpu >= 0; }
  // Leaf switch (or rail) of the rank's NIC.
  int Leaf(int r) const;
  // Host memory (the selector's calls on host buffers, and staged device buffers): true when
  // all ranks are on one host and shared memory is enabled, so direct algorithms may map every
  // peer's window. GPU ranks too: their host buffers are mapped through shm, not IPC (device
  // buffers: AllGpusPeerMapped).
  bool AllRanksMappable(bool shm_enabled) const;
  // True when all ranks are GPU ranks on one host and every pair of their GPUs has peer
  // access (HostInfo::PeerAccess): device buffers may be mapped through IPC. `why` (optional)
  // gets the first reason it is false.
  bool AllGpusPeerMapped(std::string* why = nullptr) const;
  // The same inside each host: every rank is a GPU rank and the GPUs of each host's ranks have
  // peer access (hierarchical algorithms with their in-host steps device to device).
  bool HostGpusPeerMapped(std::string* why = nullptr) const;
  // True when every rank can map the other ranks of its own host (host memory: shared memory
  // enabled): hierarchical schedules may use direct steps inside each host group.
  bool GroupsMappable(bool shm_enabled) const;

  LinkType Link(int a, int b, bool shm_enabled) const;
  // The route of one message from a to b (resources it occupies, latency, stream cap).
  Route RouteOf(int a, int b, bool shm_enabled) const;
  // The resource a rank's local copy / reduction runs on, with its rate for this op.
  int ComputeResource(int r) const { return compute_res_[r]; }
  const ComputeParams& Compute(int r) const { return IsGpu(r) ? table_.gpu() : table_.cpu(); }
  // The ranks that share rank r's core (r included), in rank order, when its machine
  // (namespaces of one box count as one machine) runs more CPU ranks than it has cores:
  // ranks are dealt to cores round-robin in rank order. Empty when r has a core of its own.
  // Ranks waiting for messages yield their core (src/core backoff), so only busy mates slow r.
  const std::vector<int>& CoreMates(int r) const { return core_mates_[r]; }
  bool CoreShared(int r) const { return !core_mates_[r].empty(); }
  // The memory bus rank r's machine shares among its cores (capacity
  // ComputeParams::dram_all_cores_gbps), -1 for GPU ranks, for a machine with one CPU rank,
  // and when the table has no such figure.
  int MachineMemoryResource(int r) const { return machine_mem_[r]; }
  // Whether any rank shares its core (some machine runs more CPU ranks than it has cores).
  bool AnyCoreShared() const;
  // The memory bus a CPU rank's local traffic uses (its NUMA node's); -1 for GPU ranks.
  int MemoryResource(int r) const { return IsGpu(r) ? -1 : numa_bus_[ranks_[r].host][ranks_[r].numa]; }
  // Last-level cache of host h in bytes (all instances together: the share its ranks split),
  // from discovery / the topology file's cache records; 0 = unknown (the cost model then
  // assumes cache-resident data, the behaviour before working-set awareness).
  int64_t LlcBytes(int h) const { return llc_bytes_[h]; }
  // The cache the host's ranks can hold a call's working set in (engine.h): what calibration
  // measured (HostInfo::cache_bytes), else 3/8 of the LLC. Why not all of it: a call's
  // buffers share the LLC with the transport's rings and windows, the executor and other
  // processes (a VM's with other guests); on this project's VM (32 MiB L3) calibration's copy
  // sweep puts it at 12-16.6 MiB, and ~300 measured collective configurations fit 11-14.7 MiB
  // best (perf/model_fit.py).
  int64_t CacheBytes(int h) const {
    return hosts_[h].cache_bytes > 0 ? hosts_[h].cache_bytes : llc_bytes_[h] / 8 * 3;
  }

  int num_resources() const { return static_cast<int>(resources_.size()); }
  const FabricResource& resource(int i) const { return resources_[i]; }

  // The same hosts and ranks with every rank a CPU rank (placement's GPU dropped): the model
  // of calls on host memory, and of the host part of a staged device call, whose bytes move
  // through host memory and shared memory however the rank's GPU is linked.
  std::shared_ptr<const Fabric> CpuRanksView() const;

  // Human-readable: hosts (like lstopo), ranks and their placement, groups, link classes.
  std::string Describe() const;
  // Records for a topology file: fabric, network, hosts (+caches/gpus/nics), ranks, links.
  std::vector<Record> ToRecords() const;
  // Stable digest of everything that influences decisions (for cross-rank checks).
  uint64_t Digest() const;

 private:
  Route NetworkRoute(int a, int b) const;  // RouteOf between two hosts
  void BuildResources();
  void BuildGpuPorts(int h);
  void BuildComputeResources();
  std::string MachineOf(int h) const;
  int AddResource(std::string name, double gbps, double dram_gbps = 0, int host = -1);
  int NicOf(int r) const;  // NIC index used by rank r (0 when the host lists none)
  // Ranks of one host: all GPU ranks with pairwise peer access (why: the first pair without).
  bool GpuRanksPeerMapped(const std::vector<int>& ranks, std::string* why) const;

  std::vector<HostInfo> hosts_;
  std::vector<RankPlacement> ranks_;
  LinkTable table_;
  NetworkConfig network_;
  std::string name_;

  std::vector<FabricResource> resources_;
  std::vector<std::vector<int>> port_tx_, port_rx_;   // [host][gpu] NVLink, or PCIe without
  std::vector<std::vector<int>> pcie_tx_, pcie_rx_;   // [host][gpu] the GPU's PCIe link
  std::vector<std::vector<int>> numa_bus_;            // [host][numa]
  std::vector<int> socket_link_;                       // [host] (two ids: +0 up, +1 down)
  std::vector<int> tcp_stack_;                         // [host] -> resource shared per machine
  std::vector<std::vector<int>> nic_tx_, nic_rx_;     // [host][nic]
  std::vector<int> leaf_up_, leaf_down_;               // [leaf]
  std::vector<int> compute_res_;                       // [rank]
  std::vector<std::vector<int>> core_mates_;           // [rank] (empty: own core)
  std::vector<int> machine_mem_;                       // [rank] -> resource shared per machine
  std::vector<int64_t> llc_bytes_;                     // [host]
};

// ---- the interface the communicator calls ----

// Serialized summary of this rank's host and placement (records text). Cheap enough to call
// once per rank at init (discovery is cached per process).
StatusOr<std::string> DescribeLocalRank(int local_rank);
// Builds the fabric from all ranks' summaries (index = rank). WEFT_TOPO_FILE, when set,
// replaces discovery: the file's fabric is used (its rank count must match). WEFT_LINK_TABLE
// names a file of link/compute records applied on top of the defaults.
StatusOr<std::shared_ptr<const Fabric>> BuildFabric(const std::vector<std::string>& summaries);

// ---- topology files ----
// Text records (see records.h); hosts may name an hwloc XML file (relative to the topology
// file) holding their full tree. Save writes FILE and, when this host was discovered with
// hwloc, FILE.host<i>.xml for the local host.
Status SaveTopologyFile(const Fabric& fabric, const std::string& path);
StatusOr<std::shared_ptr<const Fabric>> LoadTopologyFile(const std::string& path);
StatusOr<std::shared_ptr<const Fabric>> FabricFromRecords(const std::vector<Record>& records,
                                                         const std::string& origin);

}  // namespace weft
