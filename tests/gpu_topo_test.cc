// GPU topology (issue 36, item 3): NVML discovery (a stand-in library, and its absence), the
// emulated GPUs' presets and topology files, peer access and NIC affinity, and the device
// candidates the selector weighs (staged vs IPC), which flip with the link model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "device_test_util.h"
#include "topo/fabric.h"
#include "topo/gpu_discovery.h"
#include "topo/presets.h"
#include "tune/selector.h"

using namespace weft;

namespace {

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One DGX-shaped host (2 sockets, 112 cores: the dgx-h100 preset's) holding `gpus`, with
// `nranks` ranks placed as discovery places them (GPU = local rank % GPUs).
std::shared_ptr<const Fabric> HostWith(const GpuDiscovery& gpus, int nranks) {
  std::shared_ptr<const Fabric> dgx = MakePreset("dgx-h100").value();
  HostInfo host = dgx->host(0);
  host.gpus = gpus.gpus;
  host.nvswitch = gpus.nvswitch;
  std::vector<RankPlacement> ranks;
  for (int r = 0; r < nranks; ++r) {
    RankPlacement p;
    p.local_rank = r;
    p.gpu = r % static_cast<int>(host.gpus.size());
    p.numa = host.gpus[p.gpu].numa;
    p.nic = host.NearestNic(p.gpu, p.numa, p.gpu);
    ranks.push_back(p);
  }
  return std::make_shared<Fabric>(std::vector<HostInfo>{host}, ranks, dgx->table(), NetworkConfig(), "test");
}

std::shared_ptr<const Fabric> Emulated(const std::string& preset, int gpus, int nranks) {
  StatusOr<GpuDiscovery> d = EmulatedGpus(preset, gpus);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return HostWith(*d, nranks);
}

std::string TempFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  FILE* f = fopen(path.c_str(), "w");
  fputs(text.c_str(), f);
  fclose(f);
  return path;
}

}  // namespace

TEST(EmulatedGpus, NvswitchPresetHasEightH100sAllToAll) {
  StatusOr<GpuDiscovery> d = EmulatedGpus("nvswitch", 8);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->gpus.size(), 8u);
  EXPECT_TRUE(d->nvswitch);
  EXPECT_EQ(d->gpus[0].numa, 0);
  EXPECT_EQ(d->gpus[7].numa, 1);
  std::shared_ptr<const Fabric> f = HostWith(*d, 8);
  for (int b = 1; b < 8; ++b) EXPECT_EQ(f->Link(0, b, true), LinkType::kNvlink) << b;
  EXPECT_TRUE(f->AllGpusPeerMapped());
  EXPECT_TRUE(Has(DescribeGpuLinks(f->host(0)), "NVSwitch")) << DescribeGpuLinks(f->host(0));
  // The default (empty WEFT_EMULATED_TOPO) is this preset.
  EXPECT_TRUE(EmulatedGpus("", 8)->nvswitch);
}

TEST(EmulatedGpus, PciePresetPairsSwitchesAndSplitsSockets) {
  StatusOr<GpuDiscovery> d = EmulatedGpus("pcie", 8);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_FALSE(d->nvswitch);
  HostInfo host;
  host.gpus = d->gpus;
  for (const GpuInfo& g : host.gpus) EXPECT_EQ(g.nvlink_gbps, 0);
  EXPECT_EQ(host.gpus[0].pcie_switch, host.gpus[1].pcie_switch);
  EXPECT_NE(host.gpus[1].pcie_switch, host.gpus[2].pcie_switch);
  EXPECT_TRUE(host.PeerAccess(0, 1));   // one switch
  EXPECT_TRUE(host.PeerAccess(0, 3));   // one socket's root complex
  EXPECT_FALSE(host.PeerAccess(0, 4));  // across sockets: no P2P
  std::string matrix = DescribeGpuLinks(host);
  EXPECT_TRUE(Has(matrix, "GPU0  X     SW    PCI   PCI   -")) << matrix;
  std::string why;
  EXPECT_FALSE(HostWith(*d, 8)->AllGpusPeerMapped(&why));
  EXPECT_TRUE(Has(why, "no peer access")) << why;
  EXPECT_TRUE(HostWith(*d, 4)->AllGpusPeerMapped());  // GPUs 0-3: one socket
}

TEST(EmulatedGpus, NvlinkPairsLinkPairsAndRouteOthersOverPcie) {
  std::shared_ptr<const Fabric> f = Emulated("nvlink-pairs", 4, 4);
  EXPECT_EQ(f->Link(0, 1, true), LinkType::kNvlink);
  EXPECT_EQ(f->Link(2, 3, true), LinkType::kNvlink);
  EXPECT_EQ(f->Link(0, 2, true), LinkType::kPcie);
  Route r = f->RouteOf(0, 2, true);
  ASSERT_EQ(r.nres, 2);
  EXPECT_TRUE(Has(f->resource(r.res[0]).name, "gpu0.pcie.tx")) << f->resource(r.res[0]).name;
  EXPECT_DOUBLE_EQ(f->resource(r.res[0]).gbps, 63.0);
  EXPECT_DOUBLE_EQ(f->resource(f->RouteOf(0, 1, true).res[0]).gbps, 300.0);
  EXPECT_TRUE(Has(DescribeGpuLinks(f->host(0)), "GPU0  X     NV12  -     -")) << DescribeGpuLinks(f->host(0));
}

TEST(EmulatedGpus, BadValueIsRefusedNamingIt) {
  StatusOr<GpuDiscovery> d = EmulatedGpus("nvswich", 8);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), weftInvalidArgument);
  EXPECT_TRUE(Has(d.status().message(), "WEFT_EMULATED_TOPO=nvswich: neither a preset (nvswitch, nvlink-pairs, pcie)"))
      << d.status().message();
}

TEST(EmulatedGpus, BadValueFailsDiscoveryUnderTheEmulatedRuntime) {
  const std::string msg = weft_test::InChild({{"WEFT_DEVICE", "emulated:4"}, {"WEFT_EMULATED_TOPO", "bogus"}}, [] {
    StatusOr<HostInfo> h = DiscoverLocalHost();
    if (h.ok()) return std::string("discovery accepted WEFT_EMULATED_TOPO=bogus");
    return Has(h.status().message(), "WEFT_EMULATED_TOPO=bogus") ? std::string() : h.status().message();
  });
  EXPECT_EQ(msg, "");
}

TEST(EmulatedGpus, DiscoveryPlacesRanksOnTheEmulatedGpus) {
  const std::string msg = weft_test::InChild({{"WEFT_DEVICE", "emulated:4"}, {"WEFT_EMULATED_TOPO", "nvlink-pairs"}}, [] {
    StatusOr<HostInfo> h = DiscoverLocalHost();
    if (!h.ok()) return h.status().message();
    if (h->gpus.size() != 4 || !h->NvlinkBetween(0, 1) || h->NvlinkBetween(1, 2))
      return std::string("unexpected GPUs:\n") + h->Describe();
    RankPlacement p = PlaceLocalRank(*h, 6);  // local_rank % GPUs
    return p.gpu == 2 ? std::string() : "local rank 6 placed on GPU " + std::to_string(p.gpu);
  });
  EXPECT_EQ(msg, "");
}

TEST(EmulatedGpus, TopologyFileGivesTheLinksAndMustMatchTheCount) {
  std::string text = "host host=0 id=x nvswitch=0\n";
  for (int g = 0; g < 4; ++g)
    text += "gpu host=0 pci=0000:0" + std::to_string(g) + ":00.0 name=T numa=0 nvlink_gbps=50 pcie_gbps=32 nvlinks=" +
            std::string(g < 2 ? (g == 0 ? "0,2,0,0" : "2,0,0,0") : (g == 2 ? "0,0,0,2" : "0,0,2,0")) + "\n";
  const std::string path = TempFile("gpu_topo_test_links.txt", text);
  StatusOr<GpuDiscovery> d = EmulatedGpus(path, 4);
  ASSERT_TRUE(d.ok()) << d.status().message();
  HostInfo host;
  host.gpus = d->gpus;
  EXPECT_TRUE(host.NvlinkBetween(0, 1));
  EXPECT_FALSE(host.NvlinkBetween(0, 2));
  StatusOr<GpuDiscovery> wrong = EmulatedGpus(path, 8);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(Has(wrong.status().message(), "describes 4 GPU(s) on host 0, but the emulated runtime has 8"))
      << wrong.status().message();
}

TEST(HostRecords, NvlinksAndPcieSwitchesRoundTrip) {
  HostInfo h = MakePreset("dgx-h100").value()->host(0);
  h.nvswitch = false;
  h.gpus[0].nvlinks = {0, 4, 0, 0, 0, 0, 0, 0};
  h.gpus[0].pcie_switch = 3;
  h.nics[0].pcie_switch = 3;
  StatusOr<HostInfo> back = HostFromRecords(h.ToRecords(0), 0);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gpus[0].nvlinks, h.gpus[0].nvlinks);
  EXPECT_EQ(back->gpus[0].pcie_switch, 3);
  EXPECT_EQ(back->gpus[1].pcie_switch, -1);
  EXPECT_EQ(back->nics[0].pcie_switch, 3);
  std::vector<Record> bad = h.ToRecords(0);
  for (Record& r : bad)
    if (r.kind == "gpu") r.Set("nvlinks", std::string("1,x"));
  EXPECT_FALSE(HostFromRecords(bad, 0).ok());
}

TEST(HostPlacement, NearestNicPrefersTheGpusPcieSwitch) {
  HostInfo h = MakePreset("dgx-h100").value()->host(0);
  for (size_t i = 0; i < h.gpus.size(); ++i) {
    h.gpus[i].pcie_switch = static_cast<int>(i);
    h.nics[i].pcie_switch = static_cast<int>(h.gpus.size() - 1 - i);  // NIC 7 beside GPU 0
  }
  EXPECT_EQ(h.NearestNic(0, 0, 0), 7);
  EXPECT_EQ(h.NearestNic(5, 1, 5), 2);
  EXPECT_EQ(h.NearestNic(-1, 0, 1), 1);  // a CPU rank: its NUMA node's NICs, spread
}

TEST(Nvml, AbsentLibraryIsAnErrorThatSaysWhy) {
  StatusOr<GpuDiscovery> d = DiscoverNvmlGpus("libnvidia-ml-not-here.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(Has(d.status().message(), "NVML not loaded")) << d.status().message();
  EXPECT_TRUE(Has(d.status().message(), "libnvidia-ml-not-here.so.1")) << d.status().message();
  // Discovery goes on without it (this machine has no NVIDIA driver; with one it uses it).
  StatusOr<HostInfo> h = DiscoverLocalHost();
  EXPECT_TRUE(h.ok()) << h.status().message();
}

TEST(Nvml, StandInPairsGiveTheLinkMatrix) {
  const std::string msg = weft_test::InChild({{"FAKE_NVML_TOPO", "pairs"}}, [] {
    StatusOr<GpuDiscovery> d = DiscoverNvmlGpus(WEFT_FAKE_NVML);
    if (!d.ok()) return d.status().message();
    if (d->gpus.size() != 4 || d->nvswitch) return std::string("expected 4 GPUs without NVSwitch");
    const GpuInfo& g0 = d->gpus[0];
    if (g0.pci != "0000:18:00.0" || g0.name != "Fake A100 #0") return "GPU 0: pci=" + g0.pci + " name=" + g0.name;
    if (g0.nvlinks != std::vector<int>{0, 4, 0, 0}) return std::string("GPU 0's links are not 4 to GPU 1");
    if (g0.nvlink_gbps != 100) return "GPU 0 nvlink_gbps=" + std::to_string(g0.nvlink_gbps);
    return d->gpus[3].nvlinks == std::vector<int>{0, 0, 4, 0} ? std::string() : std::string("GPU 3's links");
  });
  EXPECT_EQ(msg, "");
}

TEST(Nvml, StandInSwitchIsNvswitch) {
  const std::string msg = weft_test::InChild({{"FAKE_NVML_TOPO", "switch"}}, [] {
    StatusOr<GpuDiscovery> d = DiscoverNvmlGpus(WEFT_FAKE_NVML);
    if (!d.ok()) return d.status().message();
    if (!d->nvswitch) return std::string("links to a non-GPU far end should mean NVSwitch");
    if (!d->gpus[2].nvlinks.empty()) return std::string("switched GPUs list no per-pair links");
    return d->gpus[2].nvlink_gbps == 450 ? std::string() : "nvlink_gbps=" + std::to_string(d->gpus[2].nvlink_gbps);
  });
  EXPECT_EQ(msg, "");
}

TEST(Nvml, InitFailureSaysWhy) {
  const std::string msg = weft_test::InChild({{"FAKE_NVML_TOPO", "initfail"}}, [] {
    StatusOr<GpuDiscovery> d = DiscoverNvmlGpus(WEFT_FAKE_NVML);
    if (d.ok()) return std::string("nvmlInit failure not reported");
    return Has(d.status().message(), "nvmlInit: Driver Not Loaded") ? std::string() : d.status().message();
  });
  EXPECT_EQ(msg, "");
}

// ---- the device candidates ----

TEST(DeviceChoice, NvswitchOneshotSmallTwoshotLarge) {
  std::shared_ptr<const Fabric> f = Emulated("nvswitch", 8, 8);
  // 256 KiB: one round of reads from 7 peers beats twoshot's two rounds and staging's PCIe.
  EXPECT_EQ(ChooseDeviceAlgorithm(*f, f->Digest(), Collective::kAllReduce, 256 << 10, 8), "oneshot");
  EXPECT_EQ(ChooseDeviceAlgorithm(*f, f->Digest(), Collective::kAllReduce, 64 << 20, 8), "twoshot");
  StatusOr<DeviceChoice> all = ExplainDeviceChoice(*f, Collective::kAllReduce, 64 << 20, 8);
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_EQ(all->candidates.size(), 3u);  // staged, oneshot, twoshot
  for (const DeviceCandidate& c : all->candidates) EXPECT_TRUE(std::isfinite(c.predicted_us)) << c.why;
  EXPECT_EQ(all->candidates.back().name, "staged");  // NVLink beats PCIe + host at 64 MiB
  EXPECT_EQ(ChooseDeviceAlgorithm(*f, f->Digest(), Collective::kAllGather, 64 << 20, 8), "direct");
  // The same through the selector a communicator holds; without a model: staged.
  Selector sel(f, AlgoOverrides(), true);
  EXPECT_EQ(sel.ChooseDevice(Collective::kAllReduce, 64 << 20, 4), "twoshot");
  EXPECT_EQ(sel.ChooseDevice(Collective::kAllReduce, 64 << 20, 4, 0, /*ipc_enabled=*/false), "staged");
  Selector modelless(8, {{0, 1, 2, 3, 4, 5, 6, 7}}, AlgoOverrides());
  EXPECT_EQ(modelless.ChooseDevice(Collective::kAllReduce, 256 << 10, 4), "staged");
}

TEST(DeviceChoice, StagedWhereGpusHaveNoPeerAccess) {
  std::shared_ptr<const Fabric> across = Emulated("pcie", 8, 8);
  for (size_t bytes : {size_t{4096}, size_t{64} << 20}) {
    EXPECT_EQ(ChooseDeviceAlgorithm(*across, across->Digest(), Collective::kAllReduce, bytes, 8), "staged") << bytes;
    StatusOr<DeviceChoice> all = ExplainDeviceChoice(*across, Collective::kAllReduce, bytes, 8);
    ASSERT_TRUE(all.ok());
    EXPECT_TRUE(Has(all->candidates.back().why, "not available: GPU 0 (rank 0) and GPU 4 (rank 4) have no peer access"))
        << all->candidates.back().why;
  }
  // The same GPUs inside one socket reach each other over PCIe P2P: IPC for a large call.
  std::shared_ptr<const Fabric> inside = Emulated("pcie", 8, 4);
  EXPECT_NE(ChooseDeviceAlgorithm(*inside, inside->Digest(), Collective::kAllReduce, 64 << 20, 4), "staged");
}

TEST(DeviceChoice, StagedWithoutIpcOrForCpuRanks) {
  std::shared_ptr<const Fabric> f = Emulated("nvswitch", 8, 8);
  DeviceChoiceOptions no_ipc;
  no_ipc.ipc_enabled = false;
  StatusOr<DeviceChoice> off = ExplainDeviceChoice(*f, Collective::kAllReduce, 64 << 20, 8, no_ipc);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->algorithm, "staged");
  EXPECT_TRUE(Has(off->candidates.back().why, "WEFT_IPC=0")) << off->candidates.back().why;
  std::shared_ptr<const Fabric> cpu = MakePreset("host:4").value();
  EXPECT_EQ(ChooseDeviceAlgorithm(*cpu, cpu->Digest(), Collective::kAllReduce, 1 << 20, 4), "staged");
  StatusOr<DeviceChoice> mismatch = ExplainDeviceChoice(*f, Collective::kAllReduce, 1024, 4);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_TRUE(Has(mismatch.status().message(), "nranks=4 but the fabric has 8")) << mismatch.status().message();
}

TEST(DeviceChoice, AcrossHostsHierarchicalDirectInsideHosts) {
  std::shared_ptr<const Fabric> two = MakePreset("dgx-h100:2").value();
  StatusOr<DeviceChoice> all = ExplainDeviceChoice(*two, Collective::kAllReduce, 64 << 20, 16);
  ASSERT_TRUE(all.ok()) << all.status().message();
  bool hybrid = false;
  for (const DeviceCandidate& c : all->candidates) {
    if (c.name == "oneshot" || c.name == "twoshot") EXPECT_TRUE(Has(c.why, "different hosts")) << c.why;
    if (c.name != "hierarchical_direct") continue;
    hybrid = true;
    EXPECT_TRUE(std::isfinite(c.predicted_us)) << c.why;
    EXPECT_TRUE(Has(c.why, "staging across hosts")) << c.why;
  }
  EXPECT_TRUE(hybrid);
  // NVLink inside the hosts and one PCIe copy each way beat staging the whole call.
  EXPECT_EQ(all->algorithm, "hierarchical_direct") << all->why;
  DeviceChoiceOptions no_ipc;
  no_ipc.ipc_enabled = false;
  EXPECT_EQ(ChooseDeviceAlgorithm(*two, two->Digest(), Collective::kAllReduce, 64 << 20, 16, no_ipc), "staged");
}
