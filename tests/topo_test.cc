// Tests of topology discovery, fabrics, presets, link tables and topology files (src/topo).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "topo/fabric.h"
#include "topo/presets.h"
#include "topo/records.h"

namespace weft {
namespace {

std::string TempPath(const std::string& name) {
  return "/tmp/weft_topo_test_" + std::to_string(getpid()) + "_" + name;
}

TEST(Records, RoundTripWithAwkwardValues) {
  Record r("host");
  r.Set("name", std::string("a b=c#d%e\n")).Set("n", static_cast<int64_t>(-3)).Set("x", 0.125);
  auto parsed = ParseRecords("# comment\n\n" + r.ToLine() + "\n", "mem");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].Get("name"), "a b=c#d%e\n");
  EXPECT_EQ((*parsed)[0].GetInt("n", 0).value(), -3);
  EXPECT_EQ((*parsed)[0].GetDouble("x", 0).value(), 0.125);
}

TEST(Records, ErrorsNameLineAndField) {
  auto bad = ParseRecords("host a=1\nhost oops\n", "f.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f.txt:2"), std::string::npos) << bad.status().message();
  Record r("nic");
  r.Set("gbps", std::string("fast"));
  auto v = r.GetDouble("gbps", 0);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("gbps='fast'"), std::string::npos) << v.status().message();
}

TEST(Records, Sizes) {
  EXPECT_EQ(ParseSize("0").value(), 0u);
  EXPECT_EQ(ParseSize("64K").value(), 65536u);
  EXPECT_EQ(ParseSize("1M").value(), 1u << 20);
  EXPECT_EQ(ParseSize("2G").value(), 2ull << 30);
  EXPECT_EQ(ParseSize("inf").value(), static_cast<size_t>(-1));
  EXPECT_FALSE(ParseSize("12Q").ok());
  EXPECT_FALSE(ParseSize("-1").ok());
  EXPECT_EQ(FormatSize(1 << 20), "1M");
  EXPECT_EQ(FormatSize(1536), "1536");
}

class Discovery : public ::testing::TestWithParam<bool> {};

TEST_P(Discovery, FindsThisMachinesCoresAndNic) {
  bool force_sysfs = GetParam();
  auto h = DiscoverLocalHost(force_sysfs);
  ASSERT_TRUE(h.ok()) << h.status().message();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(h->pus, online);
  EXPECT_GE(h->cores, 1);
  EXPECT_LE(h->cores, h->pus);
  EXPECT_GE(h->numa_nodes(), 1);
  int numa_cores = 0;
  for (int c : h->numa_cores) numa_cores += c;
  EXPECT_EQ(numa_cores, h->cores);
  EXPECT_FALSE(h->caches.empty());
  EXPECT_NE(h->id.find('|'), std::string::npos);
  // Every non-loopback interface that is up must be listed (eth0 on the dev VM).
  std::ifstream eth0("/sys/class/net/eth0/operstate");
  std::string state;
  if (!(eth0 >> state) || state != "up") GTEST_SKIP() << "no eth0 that is up on this machine";
  bool found = false;
  for (const NicInfo& n : h->nics) found |= n.name == "eth0";
  EXPECT_TRUE(found) << h->Describe();
}

INSTANTIATE_TEST_SUITE_P(HwlocAndSysfs, Discovery, ::testing::Values(false, true));

TEST(Discovery, SysfsAndDefaultAgreeOnCounts) {
  auto a = DiscoverLocalHost(false), b = DiscoverLocalHost(true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->pus, b->pus);
  EXPECT_EQ(a->cores, b->cores);
  EXPECT_EQ(a->numa_nodes(), b->numa_nodes());
  EXPECT_EQ(a->gpus.size(), b->gpus.size());
}

TEST(Discovery, NetworkNamespaceIsAnotherHost) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    std::string id = unshare(CLONE_NEWNET) == 0 ? TopoHostIdentity() : std::string("unshare-failed");
    ssize_t w = write(fds[1], id.data(), id.size());
    _exit(w == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  close(fds[1]);
  char buf[512];
  ssize_t n = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_GT(n, 0);
  std::string child(buf, n);
  if (child == "unshare-failed") GTEST_SKIP() << "unshare(CLONE_NEWNET) not permitted here";
  std::string mine = TopoHostIdentity();
  EXPECT_NE(child, mine);
  // Same machine: hostname|boot_id agree, only the namespace inode differs.
  EXPECT_EQ(child.substr(0, child.rfind('|')), mine.substr(0, mine.rfind('|')));
}

class LocalFabric : public ::testing::TestWithParam<int> {};

TEST_P(LocalFabric, SummariesOfOneHostMakeOneGroup) {
  const int n = GetParam();
  std::vector<std::string> summaries;
  for (int r = 0; r < n; ++r) {
    auto s = DescribeLocalRank(r);
    ASSERT_TRUE(s.ok()) << s.status().message();
    summaries.push_back(s.value());
  }
  auto f = BuildFabric(summaries);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->nranks(), n);
  EXPECT_EQ((*f)->nhosts(), 1);
  ASSERT_EQ((*f)->HostGroups().size(), 1u);
  EXPECT_EQ((*f)->HostGroups()[0].size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE((*f)->SameHost(0, r));
    EXPECT_EQ((*f)->rank(r).local_rank, r);
  }
  if (n > 1) {
    LinkType t = (*f)->Link(0, 1, true);
    EXPECT_TRUE(t == LinkType::kSameNuma || t == LinkType::kCrossSocket) << LinkTypeName(t);
    EXPECT_EQ((*f)->Link(0, 1, false), LinkType::kLoopback);
  }
  EXPECT_NE((*f)->Describe().find("rank"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalFabric, ::testing::Values(1, 2, 3, 4, 5, 8));

TEST(Fabric, DistinctHostIdsMakeDistinctHosts) {
  auto s = DescribeLocalRank(0);
  ASSERT_TRUE(s.ok());
  // Ranks 0,2 claim host A, ranks 1,3 host B (as two namespaces would).
  auto recs = ParseRecords(s.value(), "summary").value();
  std::vector<std::string> summaries;
  for (int r = 0; r < 4; ++r) {
    std::vector<Record> copy = recs;
    for (Record& rec : copy)
      if (rec.kind == "host") rec.Set("id", rec.Get("id") + (r % 2 ? "-B" : "-A"));
    summaries.push_back(FormatRecords(copy));
  }
  auto f = BuildFabric(summaries);
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto groups = (*f)->HostGroups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(groups[1], (std::vector<int>{1, 3}));
  EXPECT_FALSE((*f)->SameHost(0, 1));
  LinkType t = (*f)->Link(0, 1, true);
  EXPECT_TRUE(t == LinkType::kNetwork || t == LinkType::kNetworkSpine);
  EXPECT_FALSE((*f)->AllRanksMappable(true));
}

TEST(Fabric, BadSummaryIsAnError) {
  auto f = BuildFabric({"host host=0 id=x cores=zero\nrank rank=-1\n"});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("cores='zero'"), std::string::npos) << f.status().message();
}

TEST(Presets, DgxH100) {
  auto f = MakePreset("dgx-h100");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->nranks(), 8);
  EXPECT_EQ((*f)->nhosts(), 1);
  EXPECT_EQ((*f)->Link(0, 7, true), LinkType::kNvlink);
  Route r = (*f)->RouteOf(0, 7, true);
  ASSERT_EQ(r.nres, 2);
  EXPECT_DOUBLE_EQ((*f)->resource(r.res[0]).gbps, 450.0);
  // Host buffers map through shm only, GPU ranks' too; device buffers through IPC.
  EXPECT_FALSE((*f)->AllRanksMappable(false));
  EXPECT_TRUE((*f)->AllRanksMappable(true));
  EXPECT_TRUE((*f)->AllGpusPeerMapped());
}

TEST(Presets, DgxH100RailOptimized) {
  auto f = MakePreset("dgx-h100:4");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->nranks(), 32);
  EXPECT_EQ((*f)->HostGroups().size(), 4u);
  EXPECT_EQ((*f)->Link(0, 8, true), LinkType::kNetwork);        // GPU0 -> GPU0: same rail
  EXPECT_EQ((*f)->Link(0, 9, true), LinkType::kNetworkSpine);   // GPU0 -> GPU1: crosses rails
  EXPECT_EQ((*f)->Link(8, 15, true), LinkType::kNvlink);
  // A different rank count resizes by whole nodes.
  auto g = MakePreset("dgx-h100", 20);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->nhosts(), 3);
}

TEST(Presets, FatTreeAndNetns) {
  auto f = MakePreset("dgx-h100-fattree:8:2");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->nranks(), 64);
  EXPECT_EQ((*f)->Link(0, 8, true), LinkType::kNetwork);         // nodes 0,1 share a leaf
  EXPECT_EQ((*f)->Link(0, 32, true), LinkType::kNetworkSpine);   // node 4 is on the next leaf
  EXPECT_DOUBLE_EQ((*f)->network().oversubscription, 2.0);
  auto n = MakePreset("netns:3x2@10");
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ((*n)->nranks(), 6);
  EXPECT_EQ((*n)->HostGroups().size(), 3u);
  EXPECT_EQ((*n)->Link(0, 1, true), LinkType::kSameNuma);
  EXPECT_EQ((*n)->Link(0, 2, true), LinkType::kNetwork);
  EXPECT_DOUBLE_EQ((*n)->host(0).nics[0].gbps, 1.25);
  for (const char* bad : {"netns:3", "netns:0x2", "dgx-h100:x", "nope", "netns:2x2@fast"}) {
    auto b = MakePreset(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find(bad), std::string::npos) << b.status().message();
  }
  EXPECT_FALSE(MakePreset("netns:2x2", 5).ok());
}

TEST(LinkTable, OverridesApplyAndRejectNonsense) {
  LinkTable t = LinkTable::Defaults();
  auto recs = ParseRecords("link type=nvlink bw_gbps=400 latency_us=3\ncompute kind=cpu reduce_gbps=7\n", "o").value();
  ASSERT_TRUE(t.Apply(recs).ok());
  EXPECT_DOUBLE_EQ(t.link(LinkType::kNvlink).bw_gbps, 400);
  EXPECT_DOUBLE_EQ(t.link(LinkType::kNvlink).latency_us, 3);
  EXPECT_DOUBLE_EQ(t.cpu().reduce_gbps, 7);
  auto bad = ParseRecords("link type=warp bw_gbps=1\n", "o").value();
  Status st = t.Apply(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("warp"), std::string::npos);
  auto neg = ParseRecords("link type=pcie bw_gbps=-1\n", "o").value();
  EXPECT_FALSE(t.Apply(neg).ok());
}

// A shaped tier's token bucket: the netns preset with a rate carries perf/netns/run.sh's tbf
// burst on every veth port, a topology file keeps it, and a negative one is refused by name.
TEST(LinkTable, TokenBucketBurstReachesPortsAndSurvivesAFile) {
  auto f = MakePreset("netns:2x2@2");
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(f.value()->table().link(LinkType::kNetwork).burst_bytes, 1e6);
  int shaped = 0;
  for (int i = 0; i < f.value()->num_resources(); ++i)
    if (f.value()->resource(i).burst_bytes == 1e6) ++shaped;
  EXPECT_EQ(shaped, 4);  // nic0.tx and nic0.rx of both hosts
  auto reloaded = FabricFromRecords(f.value()->ToRecords(), "saved");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  EXPECT_DOUBLE_EQ(reloaded.value()->table().link(LinkType::kNetwork).burst_bytes, 1e6);
  EXPECT_EQ(reloaded.value()->Digest(), f.value()->Digest());
  auto slow = MakePreset("netns:2x2@0.1");  // 12.5 MB/s: 4 ms (50 kB) is below the 128 KiB floor
  ASSERT_TRUE(slow.ok());
  EXPECT_DOUBLE_EQ(slow.value()->table().link(LinkType::kNetwork).burst_bytes, 131072);
  LinkTable t = LinkTable::Defaults();
  auto neg = ParseRecords("link type=network bw_gbps=1 burst_bytes=-5\n", "o").value();
  Status st = t.Apply(neg);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("burst_bytes=-5"), std::string::npos) << st.message();
}

// The machine's memory bus (ComputeParams::dram_all_cores_gbps, calibration): a topology file
// keeps it, the namespaces of one box share one bus, a table without it has none (and its
// records do not mention it, so older files and digests stay as they were), and a negative
// figure is refused by name.
TEST(LinkTable, AllCoresMemoryRateSurvivesAFileAndIsOneBusPerMachine) {
  auto f = MakePreset("netns:2x2@2");
  ASSERT_TRUE(f.ok());
  EXPECT_LT(f.value()->MachineMemoryResource(0), 0);
  std::vector<Record> records = f.value()->ToRecords();
  for (const Record& r : records) EXPECT_EQ(r.ToLine().find("dram_all_cores_gbps"), std::string::npos);
  for (Record& r : records)
    if (r.kind == "compute" && r.Get("kind") == "cpu") r.Set("dram_all_cores_gbps", 12.5);
  auto bus = FabricFromRecords(records, "saved");
  ASSERT_TRUE(bus.ok()) << bus.status().message();
  EXPECT_DOUBLE_EQ(bus.value()->table().cpu().dram_all_cores_gbps, 12.5);
  const int res = bus.value()->MachineMemoryResource(0);
  ASSERT_GE(res, 0);
  EXPECT_DOUBLE_EQ(bus.value()->resource(res).gbps, 12.5);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(bus.value()->MachineMemoryResource(r), res) << "rank " << r;
  auto again = FabricFromRecords(bus.value()->ToRecords(), "saved again");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value()->Digest(), bus.value()->Digest());
  EXPECT_NE(bus.value()->Digest(), f.value()->Digest());
  LinkTable t = LinkTable::Defaults();
  Status st = t.Apply(ParseRecords("compute kind=cpu dram_all_cores_gbps=-3\n", "o").value());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dram_all_cores_gbps=-3"), std::string::npos) << st.message();
}

// A calibrated link field that presets leave at 0 (`field` of the link record `type`): a
// topology file keeps it and it changes the digest, a table without it does not mention it
// (older files and digests stay as they were), and a negative figure is refused by name.
void ExpectMeasuredLinkFieldSurvivesAFile(const std::string& type, const std::string& field,
                                          double LinkParams::*member) {
  auto f = MakePreset("netns:2x2@2");
  ASSERT_TRUE(f.ok());
  LinkType lt;
  ASSERT_TRUE(ParseLinkType(type, &lt));
  EXPECT_EQ(f.value()->table().link(lt).*member, 0.0) << field;
  std::vector<Record> records = f.value()->ToRecords();
  for (const Record& r : records) EXPECT_EQ(r.ToLine().find(field), std::string::npos) << field;
  for (Record& r : records)
    if (r.kind == "link" && r.Get("type") == type) r.Set(field, 3.5);
  auto measured = FabricFromRecords(records, "saved");
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  EXPECT_DOUBLE_EQ(measured.value()->table().link(lt).*member, 3.5) << field;
  auto again = FabricFromRecords(measured.value()->ToRecords(), "saved again");
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again.value()->table().link(lt).*member, 3.5) << field;
  EXPECT_EQ(again.value()->Digest(), measured.value()->Digest()) << field;
  EXPECT_NE(measured.value()->Digest(), f.value()->Digest()) << field;
  LinkTable t = LinkTable::Defaults();
  Status st = t.Apply(ParseRecords("link type=" + type + " bw_gbps=1 " + field + "=-2\n", "o").value());
  ASSERT_FALSE(st.ok()) << field;
  EXPECT_NE(st.message().find(field + "=-2"), std::string::npos) << st.message();
}

// The network stack's CPU (LinkParams::stack_cpu_gbps) and a shm receive from DRAM into a
// sink (LinkParams::dram_sink_flow_gbps), both from calibration.
TEST(LinkTable, MeasuredLinkFieldsSurviveAFile) {
  ExpectMeasuredLinkFieldSurvivesAFile("network", "stack_cpu_gbps", &LinkParams::stack_cpu_gbps);
  ExpectMeasuredLinkFieldSurvivesAFile("same_numa", "dram_sink_flow_gbps", &LinkParams::dram_sink_flow_gbps);
}

// Each codec's calibrated rates (ComputeParams::codecs): a topology file keeps them under
// the codec's name, a table without them does not mention them (older files and digests stay
// as they were), they change the digest, and a negative or unparsable one is refused by name.
TEST(LinkTable, CodecRatesSurviveAFileUnderTheCodecsName) {
  auto f = MakePreset("netns:2x2@2");
  ASSERT_TRUE(f.ok());
  std::vector<Record> records = f.value()->ToRecords();
  for (const Record& r : records) EXPECT_EQ(r.ToLine().find("_encode_gbps"), std::string::npos);
  for (Record& r : records)
    if (r.kind == "compute" && r.Get("kind") == "cpu")
      r.Set("int8_encode_gbps", 16.5).Set("int8_decode_gbps", 25.25).Set("topk_encode_cache_gbps", 4.5);
  auto saved = FabricFromRecords(records, "saved");
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  const ComputeParams& cpu = saved.value()->table().cpu();
  EXPECT_DOUBLE_EQ(cpu.codecs[weftCodecInt8].encode_gbps, 16.5);
  EXPECT_DOUBLE_EQ(cpu.codecs[weftCodecInt8].decode_gbps, 25.25);
  EXPECT_DOUBLE_EQ(cpu.codecs[weftCodecInt8].encode_cache_gbps, 0);
  EXPECT_DOUBLE_EQ(cpu.codecs[weftCodecTopK].encode_cache_gbps, 4.5);
  EXPECT_DOUBLE_EQ(cpu.codecs[weftCodecSign1].encode_gbps, 0);
  auto again = FabricFromRecords(saved.value()->ToRecords(), "saved again");
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again.value()->table().cpu().codecs[weftCodecInt8].decode_gbps, 25.25);
  EXPECT_EQ(again.value()->Digest(), saved.value()->Digest());
  EXPECT_NE(saved.value()->Digest(), f.value()->Digest());
  for (const char* key : {"fp8e4m3_decode_gbps=-2", "sign1_encode_gbps=fast"}) {
    LinkTable t = LinkTable::Defaults();
    Status st = t.Apply(ParseRecords(std::string("compute kind=cpu ") + key + "\n", "o").value());
    ASSERT_FALSE(st.ok()) << key;
    const std::string name = std::string(key).substr(0, std::string(key).find('='));
    EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
  }
}

// Namespaces of one machine share its cores: 2 hosts x 2 ranks on a 2-core box deal the 4
// ranks to 2 cores; 2 x 1 fits.
TEST(Fabric, RanksOutnumberingTheMachinesCoresShareThem) {
  auto over = MakePreset("netns:2x2@2");
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over.value()->CoreMates(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(over.value()->CoreMates(3), (std::vector<int>{1, 3}));
  auto fits = MakePreset("netns:2x1@2");
  ASSERT_TRUE(fits.ok());
  EXPECT_FALSE(fits.value()->CoreShared(0));
  EXPECT_FALSE(fits.value()->CoreShared(1));
  auto gpus = MakePreset("dgx-h100:2");  // GPU ranks have their own engines
  ASSERT_TRUE(gpus.ok());
  for (int r = 0; r < gpus.value()->nranks(); ++r) EXPECT_FALSE(gpus.value()->CoreShared(r));
}

class TopologyFiles : public ::testing::TestWithParam<std::string> {};

TEST_P(TopologyFiles, RoundTrip) {
  std::shared_ptr<const Fabric> f;
  if (GetParam() == "discovered") {
    std::vector<std::string> summaries;
    for (int r = 0; r < 3; ++r) summaries.push_back(DescribeLocalRank(r).value());
    auto b = BuildFabric(summaries);
    ASSERT_TRUE(b.ok()) << b.status().message();
    f = b.value();
  } else {
    auto p = MakePreset(GetParam());
    ASSERT_TRUE(p.ok()) << p.status().message();
    f = p.value();
  }
  std::string path = TempPath("rt.topo");
  ASSERT_TRUE(SaveTopologyFile(*f, path).ok());
  auto g = LoadTopologyFile(path);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)->Digest(), f->Digest());
  EXPECT_EQ((*g)->nranks(), f->nranks());
  EXPECT_EQ((*g)->HostGroups(), f->HostGroups());
  for (int a = 0; a < f->nranks(); a += 3)
    for (int b = 0; b < f->nranks(); b += 5) EXPECT_EQ((*g)->Link(a, b, true), f->Link(a, b, true));
  // WEFT_TOPO_FILE replaces discovery for a communicator of the same size...
  setenv("WEFT_TOPO_FILE", path.c_str(), 1);
  std::vector<std::string> dummy(f->nranks(), "garbage that is never parsed");
  auto h = BuildFabric(dummy);
  EXPECT_TRUE(h.ok()) << h.status().message();
  if (h.ok()) {
    EXPECT_EQ((*h)->Digest(), f->Digest());
  }
  // ...and refuses one of another size.
  dummy.push_back("x");
  auto wrong = BuildFabric(dummy);
  EXPECT_FALSE(wrong.ok());
  unsetenv("WEFT_TOPO_FILE");
  remove(path.c_str());
  remove((path + ".host0.xml").c_str());
}

INSTANTIATE_TEST_SUITE_P(Fabrics, TopologyFiles,
                         ::testing::Values("discovered", "dgx-h100", "dgx-h100:2", "dgx-h100-fattree:8:2",
                                           "netns:2x3", "host:5"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(TopologyFiles, ErrorsNameFileAndProblem) {
  std::string path = TempPath("bad.topo");
  {
    std::ofstream o(path);
    o << "fabric version=1 nhosts=1 nranks=2\nhost host=0 id=x cores=2\nrank rank=0 host=0\nrank rank=1 host=3\n";
  }
  auto f = LoadTopologyFile(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("rank 1 host=3"), std::string::npos) << f.status().message();
  remove(path.c_str());
  auto missing = LoadTopologyFile(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

// Fuzz finding (fuzz/crashes/topology_file-save-reload-digest-differs): a value holding a
// decoded NUL ("%00") read as the number before it ("\0garbage16" as 0), because the C parse
// stops at the NUL; the saved fabric then reloaded with another digest. The whole value must
// be the number.
TEST(Records, NumbersWithAnEmbeddedNulAreRejected) {
  Record r("compute");
  r.Set("dram_copy_gbps", std::string("\0\0" "16", 4)).Set("cores", std::string("2\0" "7", 3));
  auto d = r.GetDouble("dram_copy_gbps", 1.0);
  ASSERT_FALSE(d.ok()) << "read as " << d.value();
  EXPECT_NE(d.status().message().find("dram_copy_gbps='%00%0016'"), std::string::npos)
      << d.status().message();
  EXPECT_FALSE(r.GetInt("cores", 1).ok());
  EXPECT_FALSE(ParseSize(std::string("64\0K", 4)).ok());
  // Through the text format: %00 decodes to a NUL.
  auto parsed = ParseRecords("link type=self bw_gbps=%0016\n", "mem");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_FALSE((*parsed)[0].GetDouble("bw_gbps", 0).ok());
}

TEST(TopologyFiles, FuzzReproducerIsRejectedOrReloadsToTheSameDigest) {
  auto text = ReadTextFile(std::string(WEFT_SOURCE_DIR) +
                           "/fuzz/crashes/topology_file-save-reload-digest-differs");
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto recs = ParseRecords(*text, "repro.topo");
  ASSERT_TRUE(recs.ok()) << recs.status().message();
  auto fabric = FabricFromRecords(*recs, "repro.topo");
  if (fabric.ok()) {  // accepted: a save + reload must give the identical fabric
    auto reloaded = FabricFromRecords(fabric.value()->ToRecords(), "saved");
    ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
    EXPECT_EQ(reloaded.value()->Digest(), fabric.value()->Digest());
  }
  ASSERT_FALSE(fabric.ok()) << "its overhead_us value starts with NUL bytes";
  EXPECT_NE(fabric.status().message().find("overhead_us="), std::string::npos)
      << fabric.status().message();
}


// fuzz/crashes/topology_file-zero-dram-save-reload-digest-differs: a link with dram_bw_gbps=0
// (no DRAM tier) was saved without the field and reloaded with the default, another digest.
TEST(TopologyFiles, ZeroDramReproducerReloadsToTheSameDigest) {
  auto text = ReadTextFile(std::string(WEFT_SOURCE_DIR) +
                           "/fuzz/crashes/topology_file-zero-dram-save-reload-digest-differs");
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto recs = ParseRecords(*text, "repro.topo");
  ASSERT_TRUE(recs.ok()) << recs.status().message();
  auto fabric = FabricFromRecords(*recs, "repro.topo");
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  auto reloaded = FabricFromRecords(fabric.value()->ToRecords(), "saved");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  EXPECT_EQ(reloaded.value()->Digest(), fabric.value()->Digest());
}


// Fuzz findings (fuzz/crashes/open/topology_file-nhosts-1e11-out-of-memory,
// preset-netns-4059x449-1.8m-ranks-oom): a topology file or preset naming more ranks or hosts
// than fit in memory was built anyway. Both are refused, naming the field and the value, and the
// largest preset in use (dgx-h100:2048) still builds.
TEST(TopologyFiles, AbsurdSizesAreRefusedNamingTheField) {
  auto recs = ParseRecords("fabric nhosts=100000000000 nranks=1\n", "huge.topo");
  ASSERT_TRUE(recs.ok()) << recs.status().message();
  auto fabric = FabricFromRecords(*recs, "huge.topo");
  ASSERT_FALSE(fabric.ok());
  EXPECT_NE(fabric.status().message().find("huge.topo: fabric nhosts=100000000000"), std::string::npos)
      << fabric.status().message();
  for (const char* name : {"netns:4059x449", "netns:1048576x1048576", "dgx-h100:1048576", "host:1048576"}) {
    auto p = MakePreset(name);
    ASSERT_FALSE(p.ok()) << name;
    EXPECT_NE(p.status().message().find(std::string("preset '") + name + "'"), std::string::npos)
        << p.status().message();
    EXPECT_NE(p.status().message().find("at most 131072"), std::string::npos) << p.status().message();
  }
  auto big = MakePreset("dgx-h100:2048");
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(big.value()->nranks(), 16384);
}

}  // namespace
}  // namespace weft
