// HostInfo: what discovery finds on one host, and the placement of one rank on it.
//
// Discovery uses hwloc (>= 2) when built with WEFT_HAVE_HWLOC, otherwise /proc and /sys:
// packages, NUMA nodes, cores, caches, PCI GPUs and NICs (link speed/width, NUMA affinity),
// NVLink where hwloc's NVML plugin exposes it, and network interfaces with their speed
// (/sys/class/net/*/speed); then gpu_discovery.h: NVML (dlopen) for NVLink pairs and NVSwitch,
// or the emulated GPUs (WEFT_DEVICE=emulated[:N], links from WEFT_EMULATED_TOPO), and PCIe
// switches. Everything serializes to records (records.h), which is what ranks
// exchange and what topology files hold.
//
// Host identity = hostname + boot_id + inode of /proc/self/ns/net: two network namespaces on
// one machine are two hosts, which is how tests emulate several hosts.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topo/records.h"

namespace weft {

struct CacheInfo {
  int level = 0;            // 1, 2, 3
  std::string type;         // "data", "instruction", "unified"
  int64_t size_bytes = 0;   // of one instance
  int count = 0;            // instances on the host
};

struct GpuInfo {
  std::string pci;          // "0000:18:00.0"
  std::string name;         // "H100" / PCI id when unknown
  int numa = -1;
  double nvlink_gbps = 0;   // per direction to the NVLink fabric; 0 = no NVLink
  double pcie_gbps = 0;     // link speed x width, GB/s per direction; 0 = unknown
  // NVLinks to each GPU of the host, by index (NVML; presets). Empty = not known per pair:
  // any two GPUs that both have NVLink are joined (the NVSwitch case, and hwloc's matrix).
  std::vector<int> nvlinks;
  int pcie_switch = -1;     // PCIe switch the GPU hangs off (host-wide number), -1 = none known
};

struct NicInfo {
  std::string name;         // netdev ("eth0") or RDMA device ("mlx5_0")
  std::string pci;          // empty for virtual interfaces (veth, bridges)
  std::string kind;         // "rdma", "eth", "virtual"
  int numa = -1;
  double gbps = 0;          // line rate, GB/s per direction; 0 = unknown (-1 in sysfs)
  double pcie_gbps = 0;
  int leaf = 0;             // switch (or rail) this port hangs off; presets set it
  int pcie_switch = -1;     // PCIe switch the NIC hangs off (as GpuInfo::pcie_switch)
};

struct HostInfo {
  std::string id;           // hostname|boot_id|netns inode
  std::string hostname;
  std::string source;       // "hwloc", "sysfs", "preset", "file"
  int packages = 1;
  int cores = 1;
  int pus = 1;
  std::vector<int> numa_package;  // package index of each NUMA node (size = NUMA nodes)
  std::vector<int> numa_cores;    // cores in each NUMA node
  std::vector<CacheInfo> caches;
  std::vector<GpuInfo> gpus;
  std::vector<NicInfo> nics;
  bool nvswitch = false;    // GPUs all-to-all through NVSwitch (vs point-to-point NVLink)
  std::string hwloc_xml;    // hwloc XML file with the full tree (topology files), optional
  // The cache a call's working set can use on this host, bytes, as calibration measured it
  // (topo/calibrate.h): less than the LLC where other processes or guests share it. 0 = not
  // measured (the cost model then takes the LLC). Record field `cache_bytes`.
  int64_t cache_bytes = 0;

  int numa_nodes() const { return numa_package.empty() ? 1 : static_cast<int>(numa_package.size()); }
  // GPUs a and b (indices into gpus) are joined by NVLink: through NVSwitch, by links listed
  // between them, or (no per-pair list) both have NVLink.
  bool NvlinkBetween(int a, int b) const;
  // GPU a can read and write GPU b's memory directly (IPC peer access): the same GPU, NVLink,
  // one PCIe switch, or one root complex (same NUMA node, or either unknown). GPUs on
  // different sockets have no peer access: P2P through the socket interconnect is unsupported
  // or slower than staging on most platforms (NCCL disables it by default, its PATH_SYS).
  bool PeerAccess(int a, int b) const;
  // The NIC a rank on `numa` using GPU `gpu` (-1 = CPU rank) sends through: the fastest kind
  // (rdma > eth > virtual), then the GPU's PCIe switch, then its NUMA node; equals are spread
  // by `spread` (GPU i -> NIC i on a rail-optimized host). -1 when the host lists none.
  int NearestNic(int gpu, int numa, int spread) const;
  // Records with host=<index>: "host", "cache", "gpu", "nic".
  std::vector<Record> ToRecords(int index) const;
  // One line per item, like a compact lstopo.
  std::string Describe() const;
};

// Where a rank sits on its host.
struct RankPlacement {
  int host = 0;        // index into the fabric's hosts (summaries: 0)
  int local_rank = 0;
  int numa = 0;
  int gpu = -1;        // index into HostInfo::gpus, -1 = CPU rank
  int nic = -1;        // nearest NIC (index into HostInfo::nics), -1 = none
  Record ToRecord(int rank) const;
};

// Collects records of kind host/cache/gpu/nic for `host_index` into a HostInfo.
StatusOr<HostInfo> HostFromRecords(const std::vector<Record>& records, int host_index);
StatusOr<RankPlacement> PlacementFromRecord(const Record& r);

// The identity string of this process's host (hostname|boot_id|netns inode).
std::string TopoHostIdentity();
// Discovers this host (hwloc when available, /proc + /sys otherwise; `force_sysfs` for tests).
StatusOr<HostInfo> DiscoverLocalHost(bool force_sysfs = false);
// Chooses this rank's NUMA node (from its CPU affinity), GPU and nearest NIC. The GPU is
// local_rank % GPUs (one rank per GPU in local-rank order, several per GPU when there are more
// ranks than GPUs), which is what launchers do with CUDA_VISIBLE_DEVICES unset; the rank's
// NUMA node then follows its GPU's.
RankPlacement PlaceLocalRank(const HostInfo& host, int local_rank);

// hwloc XML of this host (empty string + error when built without hwloc).
StatusOr<std::string> ExportLocalHwlocXml();
// Discovery from a saved hwloc XML file (needs hwloc).
StatusOr<HostInfo> DiscoverHostFromHwlocXml(const std::string& path);

}  // namespace weft
