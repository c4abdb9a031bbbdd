// Built-in fabrics for tests, the simulator and what-if questions (weft-topo --preset).
//
//   dgx-h100            one DGX H100: 2 sockets, 8 H100 on NVSwitch (450 GB/s per direction
//                       per GPU), 8 ConnectX-7 400 Gb/s NICs, GPU i next to NIC i.
//   dgx-h100:N          N of them, rail-optimized: NIC i of every node on rail switch i;
//                       traffic between different rails crosses the spine.
//   dgx-h100-fattree:N[:O]  N nodes, 4 nodes per leaf switch, leaf->spine oversubscribed O:1
//                       (default 1).
//   netns:KxR[@G]       K hosts (network namespaces on this machine) of R CPU ranks each,
//                       joined by a veth link shaped to G Gbit/s (default: unshaped, i.e.
//                       limited by the shared TCP stack) — the multi-host test harness.
//   host:R              this machine as one host with R CPU ranks (shm / TCP loopback).
// A rank count (weft-topo -n, a communicator's size) other than the preset's natural one
// adds or drops whole nodes (dgx) so that every rank has a place; netns/host must match.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "topo/fabric.h"

namespace weft {

// nranks <= 0: the preset's own size.
StatusOr<std::shared_ptr<const Fabric>> MakePreset(const std::string& name, int nranks = 0);
std::vector<std::string> PresetNames();  // for help texts

}  // namespace weft
