// GPU discovery beyond the PCI bus (issue 36, item 3): what a host's GPUs are joined by.
//
// Three sources, applied by DiscoverLocalHost (host.h) after hwloc or sysfs found the PCI GPUs:
//   - NVML, loaded at run time with dlopen (libnvidia-ml.so.1; weft links no NVIDIA library):
//     names, NVLink links per GPU pair, their speed (by NVLink version) and NVSwitch (links
//     whose far end is a switch). Absent (no driver, as on this project's machines): discovery
//     goes on with the PCI view and says why at WEFT_DEBUG=INFO.
//   - The emulated GPU (WEFT_DEVICE=emulated[:N]): the host's GPUs are the N emulated ones, and
//     their links come from WEFT_EMULATED_TOPO, a preset or a topology file:
//       nvswitch      N H100 SXM on NVSwitch (450 GB/s NVLink per direction per GPU, PCIe 5.0),
//                     one PCIe switch per GPU, GPUs 0..N/2-1 on socket 0, the rest on socket 1
//                     (a DGX/HGX H100);
//       nvlink-pairs  N H100 PCIe, GPU 2k and 2k+1 joined by an NVLink bridge (12 links,
//                     300 GB/s per direction) and sharing a PCIe switch; other pairs over PCIe;
//       pcie          N PCIe 4.0 GPUs without NVLink, two per PCIe switch, half per socket:
//                     peer access inside a socket, none across (HostInfo::PeerAccess);
//       FILE          a topology file (records, as weft-topo --save writes): host 0's `gpu`
//                     records and its `nvswitch`; it must list exactly N GPUs.
//     The emulated GPUs' NUMA node is the preset's socket (what peer access is decided by),
//     even on a host with fewer NUMA nodes; rank placement keeps its own NUMA node then.
//   - PCIe switches of GPUs and NICs from sysfs (the PCI path of each device: two devices
//     below one switch's upstream port share the switch), which NearestNic prefers.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topo/host.h"

namespace weft {

struct GpuDiscovery {
  std::vector<GpuInfo> gpus;
  bool nvswitch = false;
  std::string source;  // "nvml", "emulated:nvswitch", "emulated:<file>"
};

// NVML's view of this host's GPUs. `library`: what dlopen loads (tests pass another). An
// error says why NVML is not usable (library missing, nvmlInit failed, no GPU).
StatusOr<GpuDiscovery> DiscoverNvmlGpus(const std::string& library = "libnvidia-ml.so.1");

// The presets WEFT_EMULATED_TOPO names (for help texts and errors).
std::vector<std::string> EmulatedTopologyPresets();
// `count` emulated GPUs linked as `spec` (a preset name or a topology file) says. Errors name
// WEFT_EMULATED_TOPO and the value.
StatusOr<GpuDiscovery> EmulatedGpus(const std::string& spec, int count);

// The GPU section of weft-topo: per GPU its name, NUMA node, NVLink and PCIe bandwidth, PCIe
// switch and nearest NIC; then "NVSwitch" or the link matrix between GPUs, as
// `nvidia-smi topo -m` prints it: NV<k> (k NVLinks), SW (one PCIe switch), PCI (through the
// root complex), "-" (no peer access: staged through host memory). "" for a host without GPUs.
std::string DescribeGpuLinks(const HostInfo& host);

// Replaces or completes host->gpus from the sources above (the emulated GPUs when the active
// device runtime is emulated, else NVML when it loads) and numbers the PCIe switches of local
// GPUs and NICs. Errors: a bad WEFT_EMULATED_TOPO only (NVML missing is not an error).
Status DiscoverGpuLinks(HostInfo* host);

}  // namespace weft
