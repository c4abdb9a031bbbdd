// ib_discovery: RDMA NICs through libibverbs (dlopen'ed), and the port-attribute parser.
// See ib_discovery.h for the split between the pure parser and the discovery.
#include "transports/ucx/ib_discovery.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define WEFT_HAVE_VERBS_HEADER 1
#endif

namespace weft {
namespace {

struct SpeedCode {
  uint32_t code;
  const char* name;
  double lane_gbps;
};

// ibv_port_attr.active_speed codes (rdma-core's enum ibv_port_speed) with InfiniBand's
// nominal per-lane data rates. XDR only exists as an extended code (active_speed_ex).
constexpr SpeedCode kSpeeds[] = {
    {1, "SDR", 2.5},  {2, "DDR", 5},   {4, "QDR", 10},  {8, "FDR10", 10}, {16, "FDR", 14},
    {32, "EDR", 25},  {64, "HDR", 50}, {128, "NDR", 100}, {256, "XDR", 200},
};

// ibv_port_attr.active_width codes -> lanes.
int LanesForWidth(uint32_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// NUMA node and PCI address of an RDMA device, from /sys/class/infiniband/<dev>/device.
void AddSysfsPosition(IbPort* port) {
  std::string dev = "/sys/class/infiniband/" + port->device + "/device";
  std::string numa = ReadFirstLine(dev + "/numa_node");
  if (!numa.empty()) port->numa_node = std::atoi(numa.c_str());
  char resolved[PATH_MAX];
  if (realpath(dev.c_str(), resolved) != nullptr) {
    const char* slash = strrchr(resolved, '/');
    if (slash != nullptr) port->pci_address = slash + 1;
  }
}

}  // namespace

std::string IbPort::Describe() const {
  std::ostringstream s;
  s << device << " port " << port << ": " << link_layer << " " << speed_name << " " << lanes
    << "x = " << gbps << " Gbit/s (" << (active ? "active" : "down") << ")";
  if (numa_node >= 0) s << " numa " << numa_node;
  if (!pci_address.empty()) s << " pci " << pci_address;
  return s.str();
}

StatusOr<IbPort> ParseIbPort(const IbPortAttributes& a) {
  std::string where = "ib port " + a.device + ":" + std::to_string(a.port);
  IbPort p;
  p.device = a.device;
  p.port = a.port;
  p.active = a.state == 4;  // IBV_PORT_ACTIVE
  switch (a.link_layer) {
    case 0:  // IBV_LINK_LAYER_UNSPECIFIED: old drivers report IB ports this way
    case 1: p.link_layer = "InfiniBand"; break;
    case 2: p.link_layer = "Ethernet"; break;
    default:
      return InvalidArgument(where + ": link_layer=" + std::to_string(a.link_layer) +
                             " is not 0 (unspecified), 1 (InfiniBand) or 2 (Ethernet)");
  }
  uint32_t code = a.active_speed_ex != 0 ? a.active_speed_ex : a.active_speed;
  const SpeedCode* speed = nullptr;
  for (const SpeedCode& s : kSpeeds)
    if (s.code == code) speed = &s;
  if (speed == nullptr) {
    return InvalidArgument(where + ": active_speed=" + std::to_string(code) +
                           " is not a known InfiniBand speed code");
  }
  p.lanes = LanesForWidth(a.active_width);
  if (p.lanes == 0) {
    return InvalidArgument(where + ": active_width=" + std::to_string(a.active_width) +
                           " is not a known width code (1, 2, 4, 8, 16)");
  }
  p.speed_name = speed->name;
  p.lane_gbps = speed->lane_gbps;
  // A port that is not ACTIVE moves nothing, whatever speed it last negotiated.
  p.gbps = p.active ? p.lanes * p.lane_gbps : 0;
  return p;
}

double IbDiscovery::BestActiveGbps() const {
  double best = 0;
  for (const IbPort& p : ports)
    if (p.active && p.gbps > best) best = p.gbps;
  return best;
}

#ifdef WEFT_HAVE_VERBS_HEADER
namespace {

// The few libibverbs entry points discovery needs, resolved with dlsym so libweft does not
// depend on libibverbs at link time (most hosts have none).
struct Verbs {
  void* handle = nullptr;
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  // The exported (compat) symbol; newer providers answer through the context's ops instead.
  int (*query_port_compat)(ibv_context*, uint8_t, void*) = nullptr;

  bool Load() {
    handle = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return false;
    get_device_list = reinterpret_cast<decltype(get_device_list)>(dlsym(handle, "ibv_get_device_list"));
    free_device_list = reinterpret_cast<decltype(free_device_list)>(dlsym(handle, "ibv_free_device_list"));
    get_device_name = reinterpret_cast<decltype(get_device_name)>(dlsym(handle, "ibv_get_device_name"));
    open_device = reinterpret_cast<decltype(open_device)>(dlsym(handle, "ibv_open_device"));
    close_device = reinterpret_cast<decltype(close_device)>(dlsym(handle, "ibv_close_device"));
    query_device = reinterpret_cast<decltype(query_device)>(dlsym(handle, "ibv_query_device"));
    query_port_compat = reinterpret_cast<decltype(query_port_compat)>(dlsym(handle, "ibv_query_port"));
    return get_device_list && free_device_list && get_device_name && open_device && close_device &&
           query_device && query_port_compat;
  }
  // Mirrors verbs.h's inline ibv_query_port(): the extended op when the provider has one.
  int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
    verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
    if (vctx != nullptr) return vctx->query_port(ctx, port, attr, sizeof(*attr));
    memset(attr, 0, sizeof(*attr));
    return query_port_compat(ctx, port, attr);
  }
  ~Verbs() {
    if (handle != nullptr) dlclose(handle);
  }
};

// Appends every port of one device to `out`.
Status AddDevicePorts(Verbs& v, ibv_device* dev, IbDiscovery* out) {
  const char* name = v.get_device_name(dev);
  ibv_context* ctx = v.open_device(dev);
  if (ctx == nullptr) return SystemError(std::string("ibv_open_device(") + name + ") failed");
  ibv_device_attr dattr;
  if (v.query_device(ctx, &dattr) != 0) {
    v.close_device(ctx);
    return SystemError(std::string("ibv_query_device(") + name + ") failed");
  }
  for (int port = 1; port <= dattr.phys_port_cnt; ++port) {
    ibv_port_attr pattr;
    if (v.QueryPort(ctx, static_cast<uint8_t>(port), &pattr) != 0) continue;
    IbPortAttributes a;
    a.device = name;
    a.port = port;
    a.state = pattr.state;
    a.link_layer = pattr.link_layer;
    a.active_speed = pattr.active_speed;
    a.active_width = pattr.active_width;
    StatusOr<IbPort> parsed = ParseIbPort(a);
    if (!parsed.ok()) {
      v.close_device(ctx);
      return parsed.status();
    }
    AddSysfsPosition(&parsed.value());
    out->ports.push_back(*parsed);
  }
  v.close_device(ctx);
  return OkStatus();
}

}  // namespace

StatusOr<IbDiscovery> DiscoverIbDevices() {
  IbDiscovery d;
  Verbs v;
  if (!v.Load()) {
    d.summary = std::string("no RDMA devices (libibverbs.so.1 not usable: ") +
                (v.handle == nullptr ? dlerror() : "symbols missing") + ")";
    return d;
  }
  d.library_found = true;
  int n = 0;
  ibv_device** list = v.get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) v.free_device_list(list);
    d.summary = "no RDMA devices (libibverbs found none)";
    return d;
  }
  Status st;
  for (int i = 0; i < n && st.ok(); ++i) st = AddDevicePorts(v, list[i], &d);
  v.free_device_list(list);
  if (!st.ok()) return st;
  std::ostringstream s;
  s << n << " RDMA device(s):";
  for (const IbPort& p : d.ports) s << " [" << p.Describe() << "]";
  d.summary = s.str();
  return d;
}

#else  // no verbs.h at build time

StatusOr<IbDiscovery> DiscoverIbDevices() {
  IbDiscovery d;
  d.summary = "no RDMA devices (built without infiniband/verbs.h)";
  return d;
}

#endif

}  // namespace weft
