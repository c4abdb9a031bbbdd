// GPU discovery: NVML through dlopen, the emulated GPUs' presets and files, PCIe switches
// from sysfs (see gpu_discovery.h).
#include "topo/gpu_discovery.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "common/log.h"
#include "common/settings.h"
#include "device/device_runtime.h"
#include "topo/records.h"

namespace weft {
namespace {

// ---- NVML, declared here as the few calls weft makes (nvml.h's types, by value) ----

using NvmlDevice = void*;
using NvmlReturn = int;  // nvmlReturn_t: 0 = NVML_SUCCESS
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr int kNvmlLinkToSwitch = 2;    // NVML_NVLINK_DEVICE_TYPE_SWITCH

struct NvmlPciInfo {        // nvmlPciInfo_t (v2 and v3 share this layout)
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];          // "00000000:18:00.0"
};

struct Nvml {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*pci)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*link_state)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*link_version)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*link_remote_pci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  // Optional (drivers from R460 on): the far end's kind, instead of guessing from its PCI id.
  NvmlReturn (*link_remote_type)(NvmlDevice, unsigned, int*) = nullptr;

  std::string Error(NvmlReturn rc) const {
    const char* s = error_string ? error_string(rc) : nullptr;
    return s ? s : "NVML error " + std::to_string(rc);
  }
};

template <typename F>
bool Bind(void* lib, const char* symbol, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!*fn && missing) *missing += std::string(missing->empty() ? "" : ", ") + symbol;
  return *fn != nullptr;
}

StatusOr<Nvml> LoadNvml(const std::string& library) {
  Nvml n;
  n.lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) {
    const char* e = dlerror();
    return InvalidUsage("NVML not loaded (" + std::string(e ? e : library) + ")");
  }
  std::string missing;
  Bind(n.lib, "nvmlInit_v2", &n.init, &missing);
  Bind(n.lib, "nvmlShutdown", &n.shutdown, &missing);
  Bind(n.lib, "nvmlErrorString", &n.error_string, &missing);
  Bind(n.lib, "nvmlDeviceGetCount_v2", &n.count, &missing);
  Bind(n.lib, "nvmlDeviceGetHandleByIndex_v2", &n.handle, &missing);
  Bind(n.lib, "nvmlDeviceGetName", &n.name, &missing);
  Bind(n.lib, "nvmlDeviceGetPciInfo_v3", &n.pci, &missing);
  Bind(n.lib, "nvmlDeviceGetNvLinkState", &n.link_state, &missing);
  Bind(n.lib, "nvmlDeviceGetNvLinkVersion", &n.link_version, &missing);
  Bind(n.lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &n.link_remote_pci, &missing);
  Bind(n.lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &n.link_remote_type, nullptr);
  if (!missing.empty()) {
    dlclose(n.lib);
    return InvalidUsage(library + " lacks " + missing + " (driver too old?)");
  }
  return n;
}

// "00000000:18:00.0" (NVML) -> "0000:18:00.0" (sysfs, hwloc): lower case, 4-digit domain.
std::string NormalizePci(const char* bus_id) {
  std::string s(bus_id);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  const size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 4) s = s.substr(colon - 4);
  return s;
}

// GB/s per direction of one NVLink of `version` (NVIDIA's NVLink pages: NVLink 1 20 GB/s,
// NVLink 2-4 25 GB/s, NVLink 5 50 GB/s per link and direction).
double NvlinkLinkGbps(unsigned version) { return version <= 1 ? 20 : version >= 5 ? 50 : 25; }

struct NvmlLink {
  std::string remote_pci;
  bool to_switch = false;
  double gbps = 0;
};

// The active NVLinks of one GPU.
std::vector<NvmlLink> NvmlLinks(const Nvml& n, NvmlDevice dev) {
  std::vector<NvmlLink> links;
  for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
    int state = 0;
    if (n.link_state(dev, l, &state) != 0 || state != 1) continue;  // 1 = NVML_FEATURE_ENABLED
    NvmlLink link;
    unsigned version = 0;
    link.gbps = NvlinkLinkGbps(n.link_version(dev, l, &version) == 0 ? version : 0);
    NvmlPciInfo remote{};
    if (n.link_remote_pci(dev, l, &remote) == 0) link.remote_pci = NormalizePci(remote.bus_id);
    int type = -1;
    if (n.link_remote_type && n.link_remote_type(dev, l, &type) == 0) link.to_switch = type == kNvmlLinkToSwitch;
    links.push_back(link);
  }
  return links;
}

// GPUs, links and NVSwitch from an initialized NVML.
StatusOr<GpuDiscovery> ReadNvml(const Nvml& n) {
  unsigned count = 0;
  NvmlReturn rc = n.count(&count);
  if (rc != 0) return InvalidUsage("nvmlDeviceGetCount: " + n.Error(rc));
  if (count == 0) return InvalidUsage("NVML sees no GPU");
  GpuDiscovery out;
  out.source = "nvml";
  std::vector<std::vector<NvmlLink>> links(count);
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice dev = nullptr;
    if ((rc = n.handle(i, &dev)) != 0) return InvalidUsage("nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + n.Error(rc));
    GpuInfo g;
    char name[96] = {};
    if (n.name(dev, name, sizeof name) == 0) g.name = name;
    NvmlPciInfo pci{};
    if (n.pci(dev, &pci) == 0) g.pci = NormalizePci(pci.bus_id);
    links[i] = NvmlLinks(n, dev);
    for (const NvmlLink& l : links[i]) g.nvlink_gbps += l.gbps;
    out.gpus.push_back(g);
  }
  std::map<std::string, int> index;
  for (size_t i = 0; i < out.gpus.size(); ++i) index[out.gpus[i].pci] = static_cast<int>(i);
  int gpus_on_switch = 0;
  for (unsigned i = 0; i < count; ++i) {
    bool switched = false;
    std::vector<int> to(count, 0);
    for (const NvmlLink& l : links[i]) {
      auto it = index.find(l.remote_pci);
      // A far end that is none of the GPUs is an NVSwitch (when NVML cannot say the kind).
      if (l.to_switch || it == index.end()) switched = true;
      else to[it->second]++;
    }
    gpus_on_switch += switched;
    if (!switched && !links[i].empty()) out.gpus[i].nvlinks = to;
  }
  out.nvswitch = count > 1 && gpus_on_switch == static_cast<int>(count);
  return out;
}

// ---- emulated GPUs ----

int Socket(int g, int count) { return count > 1 ? g * 2 / count : 0; }

GpuDiscovery EmulatedPreset(const std::string& preset, int count) {
  GpuDiscovery out;
  out.source = "emulated:" + preset;
  out.nvswitch = preset == "nvswitch" && count > 1;
  for (int g = 0; g < count; ++g) {
    GpuInfo gpu;
    char pci[32];
    snprintf(pci, sizeof pci, "0000:%02x:00.0", 0x18 + g);
    gpu.pci = pci;
    gpu.numa = Socket(g, count);
    if (preset == "nvswitch") {
      gpu.name = "H100-SXM (emulated)";
      gpu.nvlink_gbps = 450;  // NVLink 4: 18 links x 25 GB/s per direction
      gpu.pcie_gbps = 63;     // PCIe 5.0 x16
      gpu.pcie_switch = g;
    } else if (preset == "nvlink-pairs") {
      gpu.name = "H100-PCIe (emulated)";
      gpu.pcie_gbps = 63;
      gpu.pcie_switch = g / 2;
      if ((g ^ 1) < count) {
        gpu.nvlinks.assign(count, 0);
        gpu.nvlinks[g ^ 1] = 12;  // NVLink bridge: 12 links x 25 GB/s per direction
        gpu.nvlink_gbps = 300;
      }
    } else {  // pcie
      gpu.name = "PCIe-GPU (emulated)";
      gpu.pcie_gbps = 31.5;  // PCIe 4.0 x16 after 128b/130b encoding
      gpu.pcie_switch = g / 2;
    }
    out.gpus.push_back(gpu);
  }
  return out;
}

StatusOr<GpuDiscovery> EmulatedFromFile(const std::string& path, int count) {
  const std::string what = "WEFT_EMULATED_TOPO=" + ShownValue(path);
  StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) {
    std::string known;
    for (const std::string& p : EmulatedTopologyPresets()) known += (known.empty() ? "" : ", ") + p;
    return InvalidArgument(what + ": neither a preset (" + known + ") nor a readable topology file (" +
                           text.status().message() + ")");
  }
  StatusOr<std::vector<Record>> records = ParseRecords(*text, path);
  if (!records.ok()) return records.status().WithContext(what);
  StatusOr<HostInfo> host = HostFromRecords(*records, 0);
  if (!host.ok()) return host.status().WithContext(what);
  if (static_cast<int>(host->gpus.size()) != count)
    return InvalidArgument(what + " describes " + std::to_string(host->gpus.size()) + " GPU(s) on host 0, but the emulated runtime has " +
                           std::to_string(count) + " (WEFT_DEVICE=emulated:N)");
  for (const GpuInfo& g : host->gpus)
    if (!g.nvlinks.empty() && static_cast<int>(g.nvlinks.size()) != count)
      return InvalidArgument(what + ": gpu " + g.pci + " lists nvlinks for " + std::to_string(g.nvlinks.size()) +
                             " GPU(s), expected " + std::to_string(count));
  GpuDiscovery out;
  out.source = "emulated:" + path;
  out.gpus = host->gpus;
  out.nvswitch = host->nvswitch;
  return out;
}

// ---- PCIe switches (sysfs) ----

// The upstream port of the outermost PCIe switch above `pci`, or "" when the device hangs off
// a root port directly. The device's sysfs path lists the PCI hops from the root complex:
// root port, switch upstream port, switch downstream port(s), device.
std::string SwitchOf(const std::string& pci) {
  if (pci.empty()) return "";
  char buf[PATH_MAX];
  if (!realpath(("/sys/bus/pci/devices/" + pci).c_str(), buf)) return "";
  std::vector<std::string> hops;
  std::stringstream ss(buf);
  std::string comp;
  while (std::getline(ss, comp, '/'))
    if (comp.size() == 12 && comp[4] == ':' && comp[7] == ':' && comp[10] == '.') hops.push_back(comp);
  return hops.size() >= 4 ? hops[1] : "";
}

void NumberPcieSwitches(HostInfo* host) {
  std::map<std::string, int> number;  // sorted: the same numbers on every run
  std::vector<std::string> gpu_sw, nic_sw;
  for (const GpuInfo& g : host->gpus) gpu_sw.push_back(SwitchOf(g.pci));
  for (const NicInfo& n : host->nics) nic_sw.push_back(SwitchOf(n.pci));
  for (const std::string& s : gpu_sw) if (!s.empty()) number[s] = 0;
  for (const std::string& s : nic_sw) if (!s.empty()) number[s] = 0;
  int next = 0;
  for (auto& kv : number) kv.second = next++;
  for (size_t i = 0; i < gpu_sw.size(); ++i)
    if (!gpu_sw[i].empty()) host->gpus[i].pcie_switch = number[gpu_sw[i]];
  for (size_t i = 0; i < nic_sw.size(); ++i)
    if (!nic_sw[i].empty()) host->nics[i].pcie_switch = number[nic_sw[i]];
}

// NVML's GPUs, completed by what the PCI view knows of each (NUMA node, PCIe link, switch).
void MergeNvml(GpuDiscovery nvml, HostInfo* host) {
  for (GpuInfo& g : nvml.gpus) {
    for (const GpuInfo& p : host->gpus) {
      if (p.pci != g.pci) continue;
      g.numa = p.numa;
      g.pcie_gbps = p.pcie_gbps;
      g.pcie_switch = p.pcie_switch;
      if (g.name.empty()) g.name = p.name;
    }
  }
  host->gpus = std::move(nvml.gpus);
  host->nvswitch = nvml.nvswitch;
}

}  // namespace

StatusOr<GpuDiscovery> DiscoverNvmlGpus(const std::string& library) {
  WEFT_ASSIGN_OR_RETURN(Nvml n, LoadNvml(library));
  NvmlReturn rc = n.init();
  if (rc != 0) {
    std::string why = "nvmlInit: " + n.Error(rc);
    dlclose(n.lib);
    return InvalidUsage(why);
  }
  StatusOr<GpuDiscovery> out = ReadNvml(n);
  n.shutdown();
  // The library stays loaded: unloading NVML while the driver's threads run is not safe, and
  // discovery happens once per process.
  return out;
}

std::string DescribeGpuLinks(const HostInfo& host) {
  const int n = static_cast<int>(host.gpus.size());
  if (n == 0) return "";
  std::ostringstream o;
  o << "GPUs of " << host.hostname << ": " << n << "\n";
  for (int g = 0; g < n; ++g) {
    const GpuInfo& gpu = host.gpus[g];
    const int nic = host.NearestNic(g, gpu.numa, g);
    char line[256];
    snprintf(line, sizeof line, "  GPU %d: %-22s numa=%-2d nvlink=%6.1f GB/s  pcie=%5.1f GB/s  pcie_switch=%-3s nic=%s\n",
             g, gpu.name.c_str(), gpu.numa, gpu.nvlink_gbps, gpu.pcie_gbps,
             gpu.pcie_switch >= 0 ? std::to_string(gpu.pcie_switch).c_str() : "-",
             nic >= 0 ? host.nics[nic].name.c_str() : "-");
    o << line;
  }
  if (host.nvswitch) {
    o << "  NVSwitch: every GPU reaches every other at its NVLink bandwidth\n";
    return o.str();
  }
  o << "  Links (NV<k>: k NVLinks, SW: one PCIe switch, PCI: through the root complex, -: no peer access):\n";
  auto column = [](const std::string& text) {
    char buf[32];
    snprintf(buf, sizeof buf, " %-5s", text.c_str());
    return std::string(buf);
  };
  auto trimmed = [](std::string line) { return line.erase(line.find_last_not_of(' ') + 1) + "\n"; };
  std::string header = "       ";
  for (int b = 0; b < n; ++b) header += column("GPU" + std::to_string(b));
  o << trimmed(header);
  for (int a = 0; a < n; ++a) {
    const GpuInfo& ga = host.gpus[a];
    std::string row = "  " + std::string("GPU" + std::to_string(a) + "    ").substr(0, 5);
    for (int b = 0; b < n; ++b) {
      std::string cell = a == b ? "X" : "-";
      if (a != b && host.NvlinkBetween(a, b))
        cell = !ga.nvlinks.empty() && b < static_cast<int>(ga.nvlinks.size()) ? "NV" + std::to_string(ga.nvlinks[b]) : "NV";
      else if (a != b && ga.pcie_switch >= 0 && ga.pcie_switch == host.gpus[b].pcie_switch) cell = "SW";
      else if (a != b && host.PeerAccess(a, b)) cell = "PCI";
      row += column(cell);
    }
    o << trimmed(row);
  }
  return o.str();
}

std::vector<std::string> EmulatedTopologyPresets() { return {"nvswitch", "nvlink-pairs", "pcie"}; }

StatusOr<GpuDiscovery> EmulatedGpus(const std::string& spec, int count) {
  if (count < 1 || count > 64)
    return InvalidArgument("emulated GPU count " + std::to_string(count) + " is outside 1..64");
  const std::string preset = spec.empty() ? "nvswitch" : spec;
  for (const std::string& p : EmulatedTopologyPresets())
    if (preset == p) return EmulatedPreset(preset, count);
  return EmulatedFromFile(preset, count);
}

Status DiscoverGpuLinks(HostInfo* host) {
  // Only the emulated runtime is asked (for its device count): starting CUDA here would tie
  // the driver to a process that may fork its ranks afterwards.
  const bool emulated_selected = SettingText("WEFT_DEVICE").rfind("emulated", 0) == 0;
  device::DeviceRuntime* runtime = emulated_selected ? &device::ActiveRuntime() : nullptr;
  if (runtime != nullptr && std::strcmp(runtime->name(), "emulated") == 0) {
    StatusOr<GpuDiscovery> emulated = EmulatedGpus(SettingText("WEFT_EMULATED_TOPO"), runtime->DeviceCount());
    if (!emulated.ok()) return emulated.status();
    host->gpus = emulated->gpus;
    host->nvswitch = emulated->nvswitch;
    // The real NICs share no PCIe switch with GPUs that do not exist: no switch numbers for
    // them, so that the emulated switches (0..N) never seem to hold one.
    WEFT_INFO("GPU discovery: %zu emulated GPU(s), links from %s", host->gpus.size(), emulated->source.c_str());
    return OkStatus();
  }
  NumberPcieSwitches(host);
  StatusOr<GpuDiscovery> nvml = DiscoverNvmlGpus();
  if (!nvml.ok()) {
    WEFT_INFO("GPU discovery: %s; %zu GPU(s) from the PCI bus, NVLink %s", nvml.status().message().c_str(),
              host->gpus.size(), host->gpus.empty() ? "not applicable" : "only as hwloc reports it");
    return OkStatus();
  }
  MergeNvml(std::move(nvml.value()), host);
  WEFT_INFO("GPU discovery: %zu GPU(s) from NVML%s", host->gpus.size(), host->nvswitch ? ", on NVSwitch" : "");
  return OkStatus();
}

}  // namespace weft
