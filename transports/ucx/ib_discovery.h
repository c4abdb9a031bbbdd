// ib_discovery: which RDMA NICs (InfiniBand / RoCE) this host has, through libibverbs.
//
// Two halves, so the arithmetic is testable on a machine without a NIC:
//   - ParseIbPort(): a pure function from the attributes ibv_query_port() reports for one
//     port (state, link layer, active speed and width codes) to a described link with its
//     bandwidth in Gbit/s. Unit tests feed it recorded attributes of HDR and NDR ports.
//   - DiscoverIbDevices(): opens libibverbs with dlopen (the build does not link it: see
//     transports/ucx/README.md), lists devices and ports, and adds the NUMA node and PCI
//     address from sysfs. No library, or no device, is a normal answer that says so in
//     `summary`; only an unexpected verbs failure is an error.
//
// Speeds are the nominal per-lane data rates InfiniBand names (ibstat's "Rate"): SDR 2.5,
// DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25, HDR 50, NDR 100, XDR 200 Gbit/s per lane, times
// the lane count (1x, 2x, 4x, 8x, 12x). Encoding overhead (64b/66b etc.) is not subtracted:
// the cost model applies its own efficiency factor to nominal link rates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft {

// What ibv_query_port() says about one port, in verbs' own codes (struct ibv_port_attr).
struct IbPortAttributes {
  std::string device;       // "mlx5_0"
  int port = 1;             // 1-based, as verbs numbers ports
  int state = 0;            // enum ibv_port_state: 4 = IBV_PORT_ACTIVE
  int link_layer = 0;       // 0 unspecified (= InfiniBand), 1 InfiniBand, 2 Ethernet (RoCE)
  uint32_t active_speed = 0;     // 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR, 64 HDR, 128 NDR
  uint32_t active_speed_ex = 0;  // newer rdma-core: extended code (256 = XDR); 0 = use active_speed
  uint32_t active_width = 0;     // 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x
};

struct IbPort {
  std::string device;
  int port = 1;
  bool active = false;
  std::string link_layer;  // "InfiniBand" or "Ethernet"
  std::string speed_name;  // "HDR", "NDR", ...
  int lanes = 0;
  double lane_gbps = 0;    // nominal per-lane rate
  double gbps = 0;         // lanes * lane_gbps (0 when the port is down)
  int numa_node = -1;      // from sysfs; -1 unknown
  std::string pci_address; // "0000:17:00.0"; empty unknown
  std::string Describe() const;  // "mlx5_0 port 1: InfiniBand HDR 4x = 200 Gbit/s (active)"
};

// Decodes one port's attributes. Unknown speed or width codes are an InvalidArgument naming
// the device, port and code (a newer NIC than this table must not be silently mis-rated).
StatusOr<IbPort> ParseIbPort(const IbPortAttributes& attrs);

struct IbDiscovery {
  bool library_found = false;  // libibverbs.so.1 could be opened
  std::vector<IbPort> ports;   // every port of every device (active or not)
  std::string summary;         // one line: "no RDMA devices (...)" or the ports
  double BestActiveGbps() const;
};

// Lists this host's RDMA devices. Never fails for a missing library or zero devices.
StatusOr<IbDiscovery> DiscoverIbDevices();

}  // namespace weft
