// Host discovery (hwloc or /proc + /sys), host records, rank placement. See host.h.
//
// Both discovery paths fill the same HostInfo. The sysfs path is always compiled (it is the
// fallback and tests force it to compare with hwloc); network interface speeds always come
// from /sys/class/net/<if>/speed because hwloc does not report them.
#include "topo/host.h"

#include <dirent.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#ifdef WEFT_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "topo/gpu_discovery.h"

namespace weft {
namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r'))
    line.pop_back();
  return line;
}

long ReadLong(const std::string& path, long fallback) {
  std::string s = ReadLine(path);
  if (s.empty()) return fallback;
  char* end = nullptr;
  long v = strtol(s.c_str(), &end, 0);  // base 0: accepts the 0x.. of PCI class/vendor files
  return end == s.c_str() ? fallback : v;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  closedir(d);
  std::sort(out.begin(), out.end());  // deterministic order across runs and ranks
  return out;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}
std::vector<int> ParseCpuList(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    size_t dash = part.find('-');
    int lo = atoi(part.c_str());
    int hi = dash == std::string::npos ? lo : atoi(part.c_str() + dash + 1);
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

// Size strings of sysfs caches: "32K", "2048K", "32M".
int64_t ParseCacheSize(const std::string& s) {
  int64_t v = atoll(s.c_str());
  if (s.find('K') != std::string::npos) v <<= 10;
  else if (s.find('M') != std::string::npos) v <<= 20;
  return v;
}

// PCIe link "16.0 GT/s PCIe" x width -> GB/s per direction after line encoding
// (8b/10b below 8 GT/s, 128b/130b from Gen3 on: PCI-SIG base spec).
double PcieGbps(const std::string& speed, long width) {
  double gts = atof(speed.c_str());
  if (gts <= 0 || width <= 0) return 0;
  double enc = gts < 8 ? 8.0 / 10 : 128.0 / 130;
  return gts * width * enc / 8;
}

// The last path component that looks like a PCI address (dddd:bb:dd.f), or "".
std::string PciFromPath(const std::string& real) {
  std::string found;
  std::stringstream ss(real);
  std::string comp;
  while (std::getline(ss, comp, '/'))
    if (comp.size() == 12 && comp[4] == ':' && comp[7] == ':' && comp[10] == '.') found = comp;
  return found;
}

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  if (!realpath(p.c_str(), buf)) return "";
  return buf;
}

// Network interfaces and RDMA devices from sysfs (used by both discovery paths).
void DiscoverNicsSysfs(HostInfo* host) {
  for (const std::string& ib : ListDir("/sys/class/infiniband")) {
    NicInfo nic;
    nic.name = ib;
    nic.kind = "rdma";
    std::string dev = "/sys/class/infiniband/" + ib + "/device";
    nic.pci = PciFromPath(RealPath(dev));
    nic.numa = static_cast<int>(ReadLong(dev + "/numa_node", -1));
    // ports/1/rate: "400 Gb/sec (4X NDR)"
    double gbit = atof(ReadLine("/sys/class/infiniband/" + ib + "/ports/1/rate").c_str());
    nic.gbps = gbit / 8;
    nic.pcie_gbps = PcieGbps(ReadLine(dev + "/current_link_speed"), ReadLong(dev + "/current_link_width", 0));
    host->nics.push_back(nic);
  }
  for (const std::string& ifname : ListDir("/sys/class/net")) {
    std::string base = "/sys/class/net/" + ifname;
    if (ReadLong(base + "/type", 0) == 772) continue;  // ARPHRD_LOOPBACK
    std::string state = ReadLine(base + "/operstate");
    if (state == "down") continue;  // e.g. unused ifb devices: not a way out of the host
    NicInfo nic;
    nic.name = ifname;
    std::string real = RealPath(base);
    nic.pci = PciFromPath(real);
    nic.kind = real.find("/virtual/") != std::string::npos || nic.pci.empty() ? "virtual" : "eth";
    if (!nic.pci.empty()) {
      std::string dev = "/sys/bus/pci/devices/" + nic.pci;
      nic.numa = static_cast<int>(ReadLong(dev + "/numa_node", -1));
      nic.pcie_gbps = PcieGbps(ReadLine(dev + "/current_link_speed"), ReadLong(dev + "/current_link_width", 0));
    }
    long mbps = ReadLong(base + "/speed", -1);  // Mb/s; -1 (or EINVAL) when unknown (virtio, veth)
    nic.gbps = mbps > 0 ? mbps * 1e6 / 8 / 1e9 : 0;
    host->nics.push_back(nic);
  }
}

// NVIDIA GPUs from the PCI bus (class 0x03xx, vendor 0x10de).
void DiscoverGpusSysfs(HostInfo* host) {
  for (const std::string& pci : ListDir("/sys/bus/pci/devices")) {
    std::string dev = "/sys/bus/pci/devices/" + pci;
    long cls = ReadLong(dev + "/class", 0), vendor = ReadLong(dev + "/vendor", 0);
    if ((cls >> 16) != 0x03 || vendor != 0x10de) continue;
    GpuInfo g;
    g.pci = pci;
    long device = ReadLong(dev + "/device", 0);
    char name[32];
    snprintf(name, sizeof name, "nvidia:%04lx", device);
    g.name = device == 0x2330 ? "H100-SXM" : name;  // 0x2330 = H100 SXM5 80GB (pci.ids)
    g.numa = static_cast<int>(ReadLong(dev + "/numa_node", -1));
    g.pcie_gbps = PcieGbps(ReadLine(dev + "/current_link_speed"), ReadLong(dev + "/current_link_width", 0));
    host->gpus.push_back(g);
  }
}

StatusOr<HostInfo> DiscoverSysfs() {
  HostInfo h;
  h.source = "sysfs";
  std::vector<int> cpus = ParseCpuList(ReadLine("/sys/devices/system/cpu/online"));
  if (cpus.empty()) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 0; i < n; ++i) cpus.push_back(i);
  }
  std::map<int, std::pair<int, int>> core_of;  // cpu -> (package, core id)
  std::set<std::pair<int, int>> cores;
  std::set<int> packages;
  for (int c : cpus) {
    std::string t = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    int pkg = static_cast<int>(ReadLong(t + "physical_package_id", 0));
    int core = static_cast<int>(ReadLong(t + "core_id", c));
    core_of[c] = {pkg, core};
    cores.insert({pkg, core});
    packages.insert(pkg);
  }
  h.pus = static_cast<int>(cpus.size());
  h.cores = std::max<int>(1, cores.size());
  h.packages = std::max<int>(1, packages.size());
  for (const std::string& node : ListDir("/sys/devices/system/node")) {
    if (node.rfind("node", 0) != 0 || node.size() < 5 || !isdigit(node[4])) continue;
    std::vector<int> ncpus = ParseCpuList(ReadLine("/sys/devices/system/node/" + node + "/cpulist"));
    std::set<std::pair<int, int>> ncores;
    for (int c : ncpus) ncores.insert(core_of.count(c) ? core_of[c] : std::make_pair(0, c));
    if (ncpus.empty()) continue;  // memory-only node (CXL, HBM): no ranks live there
    h.numa_package.push_back(core_of.count(ncpus[0]) ? core_of[ncpus[0]].first : 0);
    h.numa_cores.push_back(static_cast<int>(ncores.size()));
  }
  if (h.numa_package.empty()) {
    h.numa_package = {0};
    h.numa_cores = {h.cores};
  }
  // Caches: one instance per distinct (level, type, shared_cpu_list).
  std::set<std::tuple<int, std::string, std::string>> seen;
  std::map<std::tuple<int, std::string, int64_t>, int> counts;
  for (int c : cpus) {
    std::string cdir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/cache";
    for (const std::string& idx : ListDir(cdir)) {
      if (idx.rfind("index", 0) != 0) continue;
      std::string d = cdir + "/" + idx + "/";
      int level = static_cast<int>(ReadLong(d + "level", 0));
      std::string type = ReadLine(d + "type");
      std::transform(type.begin(), type.end(), type.begin(), ::tolower);
      std::string shared = ReadLine(d + "shared_cpu_list");
      if (!seen.insert({level, type, shared}).second) continue;
      counts[{level, type, ParseCacheSize(ReadLine(d + "size"))}]++;
    }
  }
  for (const auto& kv : counts) {
    CacheInfo ci;
    ci.level = std::get<0>(kv.first);
    ci.type = std::get<1>(kv.first);
    ci.size_bytes = std::get<2>(kv.first);
    ci.count = kv.second;
    h.caches.push_back(ci);
  }
  DiscoverGpusSysfs(&h);
  DiscoverNicsSysfs(&h);
  return h;
}

#ifdef WEFT_HAVE_HWLOC
// Fills `h` from a loaded hwloc topology. NICs still come from sysfs (speeds), GPUs from hwloc
// PCI objects, NVLink bandwidth from hwloc's "NVLinkBandwidth" distances (NVML plugin) when
// present.
void FillFromHwloc(hwloc_topology_t topo, HostInfo* h, bool local) {
  h->packages = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  h->cores = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
  h->pus = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
  int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  h->numa_package.clear();
  h->numa_cores.clear();
  for (int i = 0; i < nnuma; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE);
    if (ncores <= 0) continue;  // memory-only node
    hwloc_obj_t pkg = hwloc_get_next_obj_covering_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_PACKAGE, nullptr);
    h->numa_package.push_back(pkg ? static_cast<int>(pkg->logical_index) : 0);
    h->numa_cores.push_back(ncores);
  }
  if (h->numa_package.empty()) {
    h->numa_package = {0};
    h->numa_cores = {h->cores};
  }
  h->caches.clear();
  const hwloc_obj_type_t cache_types[] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L1ICACHE, HWLOC_OBJ_L2CACHE,
                                          HWLOC_OBJ_L3CACHE};
  for (hwloc_obj_type_t t : cache_types) {
    int n = hwloc_get_nbobjs_by_type(topo, t);
    if (n <= 0) continue;
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, t, 0);
    CacheInfo ci;
    ci.level = static_cast<int>(o->attr->cache.depth);
    ci.type = o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION ? "instruction"
              : o->attr->cache.type == HWLOC_OBJ_CACHE_DATA      ? "data"
                                                                  : "unified";
    ci.size_bytes = static_cast<int64_t>(o->attr->cache.size);
    ci.count = n;
    h->caches.push_back(ci);
  }
  h->gpus.clear();
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o; o = hwloc_get_next_pcidev(topo, o)) {
    const auto& p = o->attr->pcidev;
    if ((p.class_id >> 8) != 0x03 || p.vendor_id != 0x10de) continue;
    GpuInfo g;
    char pci[32];
    snprintf(pci, sizeof pci, "%04x:%02x:%02x.%01x", p.domain, p.bus, p.dev, p.func);
    g.pci = pci;
    char name[32];
    snprintf(name, sizeof name, "nvidia:%04x", p.device_id);
    g.name = p.device_id == 0x2330 ? "H100-SXM" : name;
    g.pcie_gbps = p.linkspeed;  // hwloc: GB/s, already after encoding
    // NUMA affinity: the first node of the nearest non-I/O ancestor (a package or group);
    // -1 when that ancestor spans the whole machine of a multi-node host (unknown locality).
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
      g.numa = hwloc_bitmap_first(anc->nodeset);
    h->gpus.push_back(g);
  }
  // NVLink bandwidth matrix from the NVML plugin (hwloc >= 2.5), values in MB/s.
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &nr, &dist, 0) == 0 && nr > 0 && dist) {
    for (unsigned i = 0; i < dist->nbobjs && i < h->gpus.size(); ++i) {
      double total = 0;
      for (unsigned j = 0; j < dist->nbobjs; ++j)
        if (i != j) total += static_cast<double>(dist->values[i * dist->nbobjs + j]);
      h->gpus[i].nvlink_gbps = total / 1000.0;
    }
    hwloc_distances_release(topo, dist);
  }
  if (local) DiscoverNicsSysfs(h);
}
#endif

}  // namespace

std::string TopoHostIdentity() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  std::string boot = ReadLine("/proc/sys/kernel/random/boot_id");
  struct stat st;
  unsigned long long netns = stat("/proc/self/ns/net", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
  return std::string(name) + "|" + boot + "|" + std::to_string(netns);
}

StatusOr<HostInfo> DiscoverLocalHost(bool force_sysfs) {
  HostInfo h;
#ifdef WEFT_HAVE_HWLOC
  if (!force_sysfs) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return SystemError("hwloc_topology_init failed");
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
      hwloc_topology_destroy(topo);
      return SystemError("hwloc_topology_load failed");
    }
    h.source = "hwloc";
    FillFromHwloc(topo, &h, /*local=*/true);
    hwloc_topology_destroy(topo);
  } else
#endif
  {
    WEFT_ASSIGN_OR_RETURN(h, DiscoverSysfs());
  }
  (void)force_sysfs;
  h.id = TopoHostIdentity();
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  h.hostname = name;
  // NVSwitch systems (DGX/HGX H100) give every GPU the same large NVLink bandwidth; a GPU with
  // NVLink on such a host reaches all others at full rate.
  h.nvswitch = h.gpus.size() > 2 && std::all_of(h.gpus.begin(), h.gpus.end(),
                                                [](const GpuInfo& g) { return g.nvlink_gbps > 0; });
  // NVML (or the emulated GPUs' topology) knows the links better than the PCI view.
  WEFT_RETURN_IF_ERROR(DiscoverGpuLinks(&h));
  return h;
}

StatusOr<std::string> ExportLocalHwlocXml() {
#ifdef WEFT_HAVE_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return SystemError("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return SystemError("hwloc_topology_load failed");
  }
  char* buf = nullptr;
  int len = 0;
  int rc = hwloc_topology_export_xmlbuffer(topo, &buf, &len, 0);
  std::string xml = rc == 0 && buf ? std::string(buf, len > 0 ? len - 1 : 0) : "";
  if (buf) hwloc_free_xmlbuffer(topo, buf);
  hwloc_topology_destroy(topo);
  if (rc != 0) return SystemError("hwloc_topology_export_xmlbuffer failed");
  return xml;
#else
  return InvalidUsage("hwloc XML export: weft was built without hwloc (WEFT_HWLOC=OFF or not found)");
#endif
}

StatusOr<HostInfo> DiscoverHostFromHwlocXml(const std::string& path) {
#ifdef WEFT_HAVE_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return SystemError("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_set_xml(topo, path.c_str()) != 0 || hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return InvalidArgument("hwloc XML '" + path + "' cannot be loaded");
  }
  HostInfo h;
  h.source = "hwloc-xml";
  FillFromHwloc(topo, &h, /*local=*/false);
  hwloc_topology_destroy(topo);
  h.hwloc_xml = path;
  return h;
#else
  return InvalidUsage("hwloc XML '" + path + "': weft was built without hwloc");
#endif
}

bool HostInfo::NvlinkBetween(int a, int b) const {
  if (a == b) return false;
  if (nvswitch) return true;
  const GpuInfo& ga = gpus[a];
  const GpuInfo& gb = gpus[b];
  if (!ga.nvlinks.empty() && b < static_cast<int>(ga.nvlinks.size())) return ga.nvlinks[b] > 0;
  if (!gb.nvlinks.empty() && a < static_cast<int>(gb.nvlinks.size())) return gb.nvlinks[a] > 0;
  return ga.nvlink_gbps > 0 && gb.nvlink_gbps > 0;
}

bool HostInfo::PeerAccess(int a, int b) const {
  if (a == b || NvlinkBetween(a, b)) return true;
  const GpuInfo& ga = gpus[a];
  const GpuInfo& gb = gpus[b];
  if (ga.pcie_switch >= 0 && ga.pcie_switch == gb.pcie_switch) return true;
  return ga.numa < 0 || gb.numa < 0 || ga.numa == gb.numa;
}

int HostInfo::NearestNic(int gpu, int numa, int spread) const {
  auto rank_kind = [](const std::string& k) { return k == "rdma" ? 0 : k == "eth" ? 1 : 2; };
  const int sw = gpu >= 0 && gpu < static_cast<int>(gpus.size()) ? gpus[gpu].pcie_switch : -1;
  int best_score = 1 << 30;
  std::vector<int> best;
  for (size_t i = 0; i < nics.size(); ++i) {
    const NicInfo& n = nics[i];
    // Lower is nearer: kind first (a virtual interface is never the way out when a real one
    // exists), then the GPU's own PCIe switch (no root complex crossed), then its NUMA node.
    const bool same_switch = sw >= 0 && n.pcie_switch == sw;
    const bool same_numa = n.numa < 0 || n.numa == numa;
    int score = rank_kind(n.kind) * 4 + (same_switch ? 0 : 2) + (same_numa ? 0 : 1);
    if (score < best_score) { best_score = score; best.clear(); }
    if (score == best_score) best.push_back(static_cast<int>(i));
  }
  return best.empty() ? -1 : best[static_cast<size_t>(std::max(0, spread)) % best.size()];
}

RankPlacement PlaceLocalRank(const HostInfo& host, int local_rank) {
  RankPlacement p;
  p.local_rank = local_rank;
  // NUMA: if this process is bound inside one node, that node; else spread by local rank
  // (the same rule the executor would use to bind).
  p.numa = local_rank % host.numa_nodes();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    std::vector<std::string> nodes = ListDir("/sys/devices/system/node");
    int only = -1, idx = 0;
    bool single = true;
    for (const std::string& node : nodes) {
      if (node.rfind("node", 0) != 0 || node.size() < 5 || !isdigit(node[4])) continue;
      std::vector<int> cpus = ParseCpuList(ReadLine("/sys/devices/system/node/" + node + "/cpulist"));
      if (cpus.empty()) continue;
      bool touches = false;
      for (int c : cpus) touches |= c < CPU_SETSIZE && CPU_ISSET(c, &set);
      if (touches) {
        if (only >= 0) single = false;
        only = idx;
      }
      ++idx;
    }
    if (single && only >= 0 && only < host.numa_nodes()) p.numa = only;
  }
  if (!host.gpus.empty()) {
    p.gpu = local_rank % static_cast<int>(host.gpus.size());
    if (host.gpus[p.gpu].numa >= 0 && host.gpus[p.gpu].numa < host.numa_nodes()) p.numa = host.gpus[p.gpu].numa;
  }
  p.nic = host.NearestNic(p.gpu, p.numa, p.gpu >= 0 ? p.gpu : local_rank);
  return p;
}

std::vector<Record> HostInfo::ToRecords(int index) const {
  std::vector<Record> out;
  Record h("host");
  h.Set("host", static_cast<int64_t>(index)).Set("id", id).Set("name", hostname).Set("source", source);
  h.Set("packages", static_cast<int64_t>(packages)).Set("cores", static_cast<int64_t>(cores));
  h.Set("pus", static_cast<int64_t>(pus));
  std::string np, nc;
  for (size_t i = 0; i < numa_package.size(); ++i) {
    np += (i ? "," : "") + std::to_string(numa_package[i]);
    nc += (i ? "," : "") + std::to_string(numa_cores[i]);
  }
  h.Set("numa_package", np).Set("numa_cores", nc).Set("nvswitch", static_cast<int64_t>(nvswitch));
  if (!hwloc_xml.empty()) h.Set("hwloc_xml", hwloc_xml);
  if (cache_bytes > 0) h.Set("cache_bytes", cache_bytes);
  out.push_back(h);
  for (const CacheInfo& c : caches) {
    Record r("cache");
    r.Set("host", static_cast<int64_t>(index)).Set("level", static_cast<int64_t>(c.level)).Set("type", c.type);
    r.Set("size", c.size_bytes).Set("count", static_cast<int64_t>(c.count));
    out.push_back(r);
  }
  for (const GpuInfo& g : gpus) {
    Record r("gpu");
    r.Set("host", static_cast<int64_t>(index)).Set("pci", g.pci).Set("name", g.name);
    r.Set("numa", static_cast<int64_t>(g.numa)).Set("nvlink_gbps", g.nvlink_gbps).Set("pcie_gbps", g.pcie_gbps);
    if (!g.nvlinks.empty()) {
      std::string links;
      for (size_t i = 0; i < g.nvlinks.size(); ++i) links += (i ? "," : "") + std::to_string(g.nvlinks[i]);
      r.Set("nvlinks", links);
    }
    if (g.pcie_switch >= 0) r.Set("pcie_switch", static_cast<int64_t>(g.pcie_switch));
    out.push_back(r);
  }
  for (const NicInfo& n : nics) {
    Record r("nic");
    r.Set("host", static_cast<int64_t>(index)).Set("name", n.name).Set("pci", n.pci).Set("kind", n.kind);
    r.Set("numa", static_cast<int64_t>(n.numa)).Set("gbps", n.gbps).Set("pcie_gbps", n.pcie_gbps);
    r.Set("leaf", static_cast<int64_t>(n.leaf));
    if (n.pcie_switch >= 0) r.Set("pcie_switch", static_cast<int64_t>(n.pcie_switch));
    out.push_back(r);
  }
  return out;
}

Record RankPlacement::ToRecord(int rank) const {
  Record r("rank");
  r.Set("rank", static_cast<int64_t>(rank)).Set("host", static_cast<int64_t>(host));
  r.Set("local_rank", static_cast<int64_t>(local_rank)).Set("numa", static_cast<int64_t>(numa));
  r.Set("gpu", static_cast<int64_t>(gpu)).Set("nic", static_cast<int64_t>(nic));
  return r;
}

namespace {
StatusOr<std::vector<int>> IntList(const Record& r, const std::string& key) {
  std::vector<int> out;
  std::stringstream ss(r.Get(key));
  std::string part;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    errno = 0;
    long v = strtol(part.c_str(), &end, 10);
    // The whole part must be the number (a decoded NUL ends the C parse early) and fit an int.
    if (part.empty() || end != part.c_str() + part.size() || errno != 0 || v < INT_MIN || v > INT_MAX)
      return InvalidArgument("record '" + r.kind + "': " + key + "='" + PercentEncode(r.Get(key)) +
                             "' is not a list of integers");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// `pcie_switch` of a gpu or nic record: -1 (none) or a switch number below 2^20.
StatusOr<int> PcieSwitchField(const Record& r, int host_index) {
  WEFT_ASSIGN_OR_RETURN(int64_t v, r.GetInt("pcie_switch", -1));
  if (v < -1 || v > (1 << 20))
    return InvalidArgument(r.kind + " record of host " + std::to_string(host_index) + ": pcie_switch=" +
                           std::to_string(v) + " is outside -1..1048576");
  return static_cast<int>(v);
}
}  // namespace

StatusOr<HostInfo> HostFromRecords(const std::vector<Record>& records, int host_index) {
  HostInfo h;
  bool found = false;
  for (const Record& r : records) {
    WEFT_ASSIGN_OR_RETURN(int64_t idx, r.GetInt("host", 0));
    if (idx != host_index) continue;
    if (r.kind == "host") {
      found = true;
      h.id = r.Get("id");
      h.hostname = r.Get("name");
      h.source = r.Get("source", "file");
      h.hwloc_xml = r.Get("hwloc_xml");
      WEFT_ASSIGN_OR_RETURN(int64_t v, r.GetInt("packages", 1));
      h.packages = static_cast<int>(v);
      WEFT_ASSIGN_OR_RETURN(v, r.GetInt("cores", 1));
      h.cores = static_cast<int>(v);
      WEFT_ASSIGN_OR_RETURN(v, r.GetInt("pus", h.cores));
      h.pus = static_cast<int>(v);
      WEFT_ASSIGN_OR_RETURN(v, r.GetInt("nvswitch", 0));
      h.nvswitch = v != 0;
      WEFT_ASSIGN_OR_RETURN(h.cache_bytes, r.GetInt("cache_bytes", 0));
      if (h.cache_bytes < 0)
        return InvalidArgument("host " + std::to_string(host_index) + ": cache_bytes=" + std::to_string(h.cache_bytes) +
                               " must be >= 0");
      WEFT_ASSIGN_OR_RETURN(h.numa_package, IntList(r, "numa_package"));
      WEFT_ASSIGN_OR_RETURN(h.numa_cores, IntList(r, "numa_cores"));
      if (h.numa_package.size() != h.numa_cores.size())
        return InvalidArgument("host " + std::to_string(host_index) + ": numa_package and numa_cores differ in length");
      if (h.numa_package.empty()) { h.numa_package = {0}; h.numa_cores = {h.cores}; }
    } else if (r.kind == "cache") {
      CacheInfo c;
      WEFT_ASSIGN_OR_RETURN(int64_t v, r.GetInt("level", 0));
      c.level = static_cast<int>(v);
      c.type = r.Get("type");
      WEFT_ASSIGN_OR_RETURN(c.size_bytes, r.GetInt("size", 0));
      WEFT_ASSIGN_OR_RETURN(v, r.GetInt("count", 1));
      c.count = static_cast<int>(v);
      h.caches.push_back(c);
    } else if (r.kind == "gpu") {
      GpuInfo g;
      g.pci = r.Get("pci");
      g.name = r.Get("name");
      WEFT_ASSIGN_OR_RETURN(int64_t v, r.GetInt("numa", -1));
      g.numa = static_cast<int>(v);
      WEFT_ASSIGN_OR_RETURN(g.nvlink_gbps, r.GetDouble("nvlink_gbps", 0));
      WEFT_ASSIGN_OR_RETURN(g.pcie_gbps, r.GetDouble("pcie_gbps", 0));
      WEFT_ASSIGN_OR_RETURN(g.nvlinks, IntList(r, "nvlinks"));
      for (int links : g.nvlinks)
        if (links < 0 || links > 64)
          return InvalidArgument("gpu record of host " + std::to_string(host_index) + ": nvlinks='" +
                                 PercentEncode(r.Get("nvlinks")) + "' has a count outside 0..64");
      WEFT_ASSIGN_OR_RETURN(g.pcie_switch, PcieSwitchField(r, host_index));
      h.gpus.push_back(g);
    } else if (r.kind == "nic") {
      NicInfo n;
      n.name = r.Get("name");
      n.pci = r.Get("pci");
      n.kind = r.Get("kind", "eth");
      WEFT_ASSIGN_OR_RETURN(int64_t v, r.GetInt("numa", -1));
      n.numa = static_cast<int>(v);
      WEFT_ASSIGN_OR_RETURN(n.gbps, r.GetDouble("gbps", 0));
      WEFT_ASSIGN_OR_RETURN(n.pcie_gbps, r.GetDouble("pcie_gbps", 0));
      WEFT_ASSIGN_OR_RETURN(v, r.GetInt("leaf", 0));
      // The fabric indexes its leaf switches by this number (found by fuzz/targets/topology_file).
      if (v < 0 || v > (1 << 20))
        return InvalidArgument("nic record of host " + std::to_string(host_index) + ": leaf=" +
                               std::to_string(v) + " is outside 0..1048576");
      n.leaf = static_cast<int>(v);
      WEFT_ASSIGN_OR_RETURN(n.pcie_switch, PcieSwitchField(r, host_index));
      h.nics.push_back(n);
    }
  }
  if (!found) return InvalidArgument("no 'host' record with host=" + std::to_string(host_index));
  return h;
}

StatusOr<RankPlacement> PlacementFromRecord(const Record& r) {
  RankPlacement p;
  WEFT_ASSIGN_OR_RETURN(int64_t v, r.GetInt("host", 0));
  p.host = static_cast<int>(v);
  WEFT_ASSIGN_OR_RETURN(v, r.GetInt("local_rank", 0));
  p.local_rank = static_cast<int>(v);
  WEFT_ASSIGN_OR_RETURN(v, r.GetInt("numa", 0));
  p.numa = static_cast<int>(v);
  WEFT_ASSIGN_OR_RETURN(v, r.GetInt("gpu", -1));
  p.gpu = static_cast<int>(v);
  WEFT_ASSIGN_OR_RETURN(v, r.GetInt("nic", -1));
  p.nic = static_cast<int>(v);
  return p;
}

std::string HostInfo::Describe() const {
  std::ostringstream o;
  o << "Host " << hostname << " (" << source << ")  id=" << id << "\n";
  o << "  " << packages << " package(s), " << numa_nodes() << " NUMA node(s), " << cores << " core(s), "
    << pus << " PU(s)\n";
  for (int i = 0; i < numa_nodes(); ++i)
    o << "  NUMA " << i << ": package " << numa_package[i] << ", " << numa_cores[i] << " cores\n";
  for (const CacheInfo& c : caches)
    o << "  L" << c.level << " " << c.type << " " << (c.size_bytes >> 10) << " KiB x" << c.count << "\n";
  for (size_t i = 0; i < gpus.size(); ++i)
    o << "  GPU " << i << ": " << gpus[i].name << " pci=" << gpus[i].pci << " numa=" << gpus[i].numa
      << " nvlink=" << gpus[i].nvlink_gbps << " GB/s pcie=" << gpus[i].pcie_gbps << " GB/s"
      << (gpus[i].pcie_switch >= 0 ? " pcie_switch=" + std::to_string(gpus[i].pcie_switch) : std::string()) << "\n";
  for (size_t i = 0; i < nics.size(); ++i)
    o << "  NIC " << i << ": " << nics[i].name << " (" << nics[i].kind << ") pci="
      << (nics[i].pci.empty() ? "-" : nics[i].pci) << " numa=" << nics[i].numa << " speed="
      << (nics[i].gbps > 0 ? std::to_string(nics[i].gbps) + " GB/s" : std::string("unknown"))
      << " leaf=" << nics[i].leaf << "\n";
  if (nvswitch) o << "  NVSwitch: all GPUs all-to-all\n";
  if (cache_bytes > 0) o << "  cache a call can use (calibrated): " << (cache_bytes >> 10) << " KiB\n";
  return o.str();
}

}  // namespace weft
