// Calibration (src/topo/calibrate.h, weft-topo --calibrate): a 2-process job measures its
// fabric and writes a topology file that loads with positive, plausible constants; applying
// measurements changes the model the way a shaped link should; bad input errors clearly.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_util.h"
#include "topo/calibrate.h"
#include "topo/fabric.h"
#include "topo/presets.h"

using namespace weft;
using weft_test::BinPath;
using weft_test::ExitedZero;
using weft_test::LaunchOutcome;
using weft_test::LaunchRanks;

namespace {

int RunShell(const std::string& cmd, std::string* out) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p)) *out += buf;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string TempPath(const std::string& name) {
  return "/tmp/weft-calibrate-test-" + std::to_string(getpid()) + "-" + name;
}

// A measured network tier between ranks 0 and 2 (hosts 0 and 1 of netns:2x2).
TierMeasurement Tier(LinkType type, int a, int b, double oneway_us, double gbps) {
  TierMeasurement m;
  m.type = type;
  m.a = a;
  m.b = b;
  m.oneway_us = oneway_us;
  m.gbps = gbps;
  return m;
}
TierMeasurement NetworkTier(double oneway_us, double gbps) { return Tier(LinkType::kNetwork, 0, 2, oneway_us, gbps); }

}  // namespace

// Two processes on this host: the only tier is shared memory. The saved file loads, is
// marked calibrated, and its same_numa constants are measured ones within physical bounds
// (a memory stream between 50 MB/s and 1 TB/s, a one-way latency below 10 ms).
TEST(Calibrate, TwoProcessesWriteALoadableCalibratedTopologyFile) {
  std::string file = TempPath("two.topo");
  LaunchOutcome o = LaunchRanks(2, {BinPath("weft-topo"), "--calibrate", "--calibrate-ms", "5", "--save", file,
                                    "--explain", "allreduce", "64M"},
                                {}, 120);
  ASSERT_FALSE(o.timed_out);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
  EXPECT_NE(o.output[0].find("same_numa (rank 0 -> 1): one-way"), std::string::npos) << o.output[0];
  EXPECT_NE(o.output[0].find("calibration took"), std::string::npos) << o.output[0];
  EXPECT_EQ(o.output[1].find("Calibration"), std::string::npos) << "only rank 0 reports:\n" << o.output[1];

  StatusOr<std::shared_ptr<const Fabric>> loaded = LoadTopologyFile(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Fabric& f = *loaded.value();
  EXPECT_EQ(f.nranks(), 2);
  EXPECT_EQ(f.name().rfind("calibrated", 0), 0u) << f.name();
  const LinkParams& p = f.table().link(LinkType::kSameNuma);
  EXPECT_GT(p.flow_gbps, 0.05);
  EXPECT_LT(p.flow_gbps, 1000.0);
  EXPECT_GT(p.dram_flow_gbps, 0.05);
  EXPECT_LT(p.dram_flow_gbps, 1000.0);
  EXPECT_GE(p.latency_us, 0.0);
  EXPECT_LT(p.latency_us, 10000.0);
  // Measured, not the defaults: the chance that a measurement equals the table's value
  // exactly is nil.
  EXPECT_NE(p.flow_gbps, LinkTable::Defaults().link(LinkType::kSameNuma).flow_gbps);
  EXPECT_NE(p.dram_flow_gbps, LinkTable::Defaults().link(LinkType::kSameNuma).dram_flow_gbps);
  // The CPU kernels were timed too (rank 0): measured copy and reduce rates.
  const ComputeParams& cpu = f.table().cpu();
  for (double r : {cpu.copy_gbps, cpu.reduce_gbps, cpu.dram_copy_gbps, cpu.dram_reduce_gbps}) {
    EXPECT_GT(r, 0.05);
    EXPECT_LT(r, 1000.0);
  }
  EXPECT_NE(cpu.copy_gbps, LinkTable::Defaults().cpu().copy_gbps);
  EXPECT_NE(o.output[0].find("cpu kernels (rank 0): copy"), std::string::npos) << o.output[0];
  // Every core copying at once (the machine's memory bus): at least one core's DRAM rate and
  // at most one per core; measured only where the host has two cores or more.
  if (f.host(0).cores >= 2) {
    EXPECT_GE(cpu.dram_all_cores_gbps, cpu.dram_copy_gbps);
    EXPECT_LE(cpu.dram_all_cores_gbps, std::min(f.host(0).cores, 16) * cpu.dram_copy_gbps * 1.0001);
    EXPECT_GE(f.MachineMemoryResource(0), 0);
    EXPECT_NE(o.output[0].find("every core copying at once"), std::string::npos) << o.output[0];
  } else {
    EXPECT_EQ(cpu.dram_all_cores_gbps, 0.0);
  }
  // Every codec's kernels, beyond the LLC and in the cache, which the file carries by name.
  EXPECT_NE(o.output[0].find("codecs (rank 0, GB/s of float32"), std::string::npos) << o.output[0];
  for (int k = weftCodecBf16; k <= weftCodecSign1; ++k) {
    const ComputeParams::CodecRates& c = cpu.codecs[k];
    for (double r : {c.encode_gbps, c.decode_gbps, c.encode_cache_gbps, c.decode_cache_gbps}) {
      EXPECT_GT(r, 0.01) << weftCodecName(static_cast<weftCodec_t>(k));
      EXPECT_LT(r, 1000.0) << weftCodecName(static_cast<weftCodec_t>(k));
    }
  }
  // ...and the cache a call can use, which the file carries on the host record.
  EXPECT_NE(o.output[0].find("cache a call can use"), std::string::npos) << o.output[0];
  if (f.LlcBytes(0) > 0) {
    EXPECT_GT(f.host(0).cache_bytes, 0);
    EXPECT_LE(f.host(0).cache_bytes, f.LlcBytes(0));
    EXPECT_EQ(f.CacheBytes(0), f.host(0).cache_bytes);
  }
  unlink(file.c_str());
}

// Over TCP between the two processes (shm disabled) the tier is loopback.
TEST(Calibrate, ShmDisabledMeasuresTheLoopbackTier) {
  std::string file = TempPath("lo.topo");
  LaunchOutcome o = LaunchRanks(2, {BinPath("weft-topo"), "--calibrate", "--calibrate-ms", "5", "--save", file,
                                    "-C", "broadcast"},
                                {{"WEFT_SHM_DISABLE", "1"}}, 120);
  ASSERT_FALSE(o.timed_out);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ExitedZero(o.status[r])) << "rank " << r << ":\n" << o.output[r];
  EXPECT_NE(o.output[0].find("loopback (rank 0 -> 1)"), std::string::npos) << o.output[0];
  StatusOr<std::shared_ptr<const Fabric>> loaded = LoadTopologyFile(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const LinkParams& p = loaded.value()->table().link(LinkType::kLoopback);
  EXPECT_GT(p.flow_gbps, 0.01);
  EXPECT_LT(p.flow_gbps, 1000.0);
  EXPECT_NE(p.flow_gbps, LinkTable::Defaults().link(LinkType::kLoopback).flow_gbps);
  unlink(file.c_str());
}

// The tiers of a 2-host x 2-rank fabric: shm inside a host, network between them, each with a
// pair that actually has that link.
TEST(Calibrate, TiersOfTwoHostsAreShmAndNetwork) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::vector<TierMeasurement> tiers = CalibrationTiers(*f.value(), true);
  ASSERT_EQ(tiers.size(), 2u);
  for (const TierMeasurement& t : tiers) EXPECT_EQ(f.value()->Link(t.a, t.b, true), t.type);
  EXPECT_EQ(tiers[0].type, LinkType::kSameNuma);
  EXPECT_EQ(tiers[1].type, LinkType::kNetwork);
}

// A measured 2 Gbit/s network tier makes the model see the shaped link: every host's NIC and
// the network stream carry the measured rate, and a 64 MiB transfer between hosts is
// predicted near 64 MiB / 0.25 GB/s instead of the unshaped default.
TEST(Calibrate, AppliedNetworkRateReachesRoutesAndNics) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok());
  TierMeasurement net = NetworkTier(/*oneway_us=*/60, /*gbps=*/0.25);
  auto cal = ApplyCalibration(*f.value(), {net});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  const Fabric& c = *cal.value();
  for (int h = 0; h < c.nhosts(); ++h)
    for (const NicInfo& n : c.host(h).nics) EXPECT_DOUBLE_EQ(n.gbps, 0.25);
  Route r = c.RouteOf(0, 2, true);
  EXPECT_DOUBLE_EQ(r.flow_gbps, 0.25);
  EXPECT_GE(r.latency_us + r.overhead_us, 60.0 - 1e-9);
  double slowest = 1e300;
  for (int i = 0; i < r.nres; ++i) slowest = std::min(slowest, c.resource(r.res[i]).gbps);
  EXPECT_DOUBLE_EQ(slowest, 0.25);
  // Same digest on every rank needs the same numbers to give the same fabric.
  auto again = ApplyCalibration(*f.value(), {net});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value()->Digest(), c.Digest());
  EXPECT_NE(f.value()->Digest(), c.Digest());
  // A measured TCP network latency below the loopback default is what routes use (the
  // defaults' TCP floor applies to unmeasured tables only), and it survives a save/load.
  net.oneway_us = 5;
  auto fast = ApplyCalibration(*f.value(), {net});
  ASSERT_TRUE(fast.ok());
  Route rf = fast.value()->RouteOf(0, 2, true);
  EXPECT_NEAR(rf.latency_us + rf.overhead_us, 5.0, 1e-9);
  std::string file = TempPath("fast.topo");
  ASSERT_TRUE(SaveTopologyFile(*fast.value(), file).ok());
  auto reloaded = LoadTopologyFile(file);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  Route rr = reloaded.value()->RouteOf(0, 2, true);
  EXPECT_NEAR(rr.latency_us + rr.overhead_us, 5.0, 1e-6);
  unlink(file.c_str());
}

TEST(Calibrate, BadMeasurementsAreRefusedNamingTheTier) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok());
  TierMeasurement bad;
  bad.type = LinkType::kNetwork;
  bad.gbps = 0;
  bad.oneway_us = 10;
  auto cal = ApplyCalibration(*f.value(), {bad});
  ASSERT_FALSE(cal.ok());
  EXPECT_NE(cal.status().message().find("network"), std::string::npos) << cal.status().message();
}

// A measured token-bucket burst lands on the network entry and on every host's NIC ports;
// a negative one is refused naming the tier.
TEST(Calibrate, MeasuredBurstReachesTheNicPorts) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok());
  TierMeasurement net = NetworkTier(/*oneway_us=*/12, /*gbps=*/0.239);
  net.burst_bytes = 9.5e5;
  auto cal = ApplyCalibration(*f.value(), {net});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_DOUBLE_EQ(cal.value()->table().link(LinkType::kNetwork).burst_bytes, 9.5e5);
  Route r = cal.value()->RouteOf(0, 2, true);
  ASSERT_GT(r.line_gbps, net.gbps);
  int ports = 0;
  for (int i = 0; i < r.nres; ++i)
    if (cal.value()->resource(r.res[i]).burst_bytes == 9.5e5) ++ports;
  EXPECT_EQ(ports, 2);  // the sender's tx and the receiver's rx
  net.burst_bytes = -1;
  auto bad = ApplyCalibration(*f.value(), {net});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("network"), std::string::npos) << bad.status().message();
}

// A measured network stack's CPU lands on the network entry; a negative one is refused
// naming the tier.
TEST(Calibrate, MeasuredStackCpuReachesTheNetworkLink) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok());
  TierMeasurement net = NetworkTier(/*oneway_us=*/12, /*gbps=*/0.239);
  net.stack_cpu_gbps = 3.5;
  auto cal = ApplyCalibration(*f.value(), {net});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_DOUBLE_EQ(cal.value()->table().link(LinkType::kNetwork).stack_cpu_gbps, 3.5);
  net.stack_cpu_gbps = -1;
  auto bad = ApplyCalibration(*f.value(), {net});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("network"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("stack CPU"), std::string::npos) << bad.status().message();
}

// A memory tier's rate from DRAM into a sink lands on that tier's entry; a negative one is
// refused naming the tier.
TEST(Calibrate, MeasuredSinkRateReachesTheMemoryLink) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok());
  TierMeasurement shm = Tier(LinkType::kSameNuma, 0, 1, /*oneway_us=*/0.3, /*gbps=*/14);
  shm.dram_gbps = 4.8;
  shm.dram_sink_gbps = 5.1;
  auto cal = ApplyCalibration(*f.value(), {shm});
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  EXPECT_DOUBLE_EQ(cal.value()->table().link(LinkType::kSameNuma).dram_sink_flow_gbps, 5.1);
  EXPECT_DOUBLE_EQ(cal.value()->table().link(LinkType::kSameNuma).dram_flow_gbps, 4.8);
  shm.dram_sink_gbps = -1;
  auto bad = ApplyCalibration(*f.value(), {shm});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("same_numa"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("into a sink"), std::string::npos) << bad.status().message();
}

// The cache a call can use, fitted to the engine's blend from (working set, copy rate) points.
TEST(Calibrate, CacheFitFindsWhereCopiesSlowDown) {
  const int64_t llc = int64_t{32} << 20;
  const double c = 48, d = 16;
  // Points generated by the model itself with a 12 MiB cache: the fit gives it back.
  auto model = [&](double ws, double cache) {
    double hit = std::min(1.0, cache / ws);
    return 1 / (hit / c + (1 - hit) / d);
  };
  std::vector<std::pair<double, double>> pts;
  for (double ws = 2 << 20; ws <= 64 << 20; ws *= 2) pts.emplace_back(ws, model(ws, 12 << 20));
  EXPECT_NEAR(static_cast<double>(FitCacheBytes(pts, d, llc)), 12 << 20, 0.01 * (12 << 20));
  // A sweep that never slows down: the LLC.
  std::vector<std::pair<double, double>> flat{{2 << 20, 48}, {8 << 20, 47}, {32 << 20, 48}};
  EXPECT_EQ(FitCacheBytes(flat, d, llc), llc);
  // A cliff straight to DRAM: the last working set still at the cache rate.
  std::vector<std::pair<double, double>> cliff{{2 << 20, 48}, {4 << 20, 47}, {8 << 20, 16}, {16 << 20, 16}};
  EXPECT_EQ(FitCacheBytes(cliff, d, llc), int64_t{4} << 20);
  // A cache no faster than DRAM (or nothing measured): the LLC.
  EXPECT_EQ(FitCacheBytes({{2 << 20, 17}, {64 << 20, 16}}, d, llc), llc);
  EXPECT_EQ(FitCacheBytes({}, d, llc), llc);
  // Never more than the LLC.
  std::vector<std::pair<double, double>> big;
  for (double ws = 2 << 20; ws <= 256 << 20; ws *= 2) big.emplace_back(ws, model(ws, 64 << 20));
  EXPECT_EQ(FitCacheBytes(big, d, llc), llc);
}

// A measured cache reaches every host (as the kernel rates do); a negative one is refused.
TEST(Calibrate, MeasuredCacheReachesTheHostsAndTheTopologyFile) {
  auto f = MakePreset("netns:2x2");
  ASSERT_TRUE(f.ok());
  ComputeMeasurement cm;
  cm.cache_bytes = int64_t{12} << 20;
  auto cal = ApplyCalibration(*f.value(), {}, cm);
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  for (int h = 0; h < cal.value()->nhosts(); ++h) EXPECT_EQ(cal.value()->CacheBytes(h), int64_t{12} << 20);
  std::string file = TempPath("cache.topo");
  ASSERT_TRUE(SaveTopologyFile(*cal.value(), file).ok());
  auto loaded = LoadTopologyFile(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded.value()->host(1).cache_bytes, int64_t{12} << 20);
  unlink(file.c_str());
  cm.cache_bytes = -1;
  auto bad = ApplyCalibration(*f.value(), {}, cm);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cache"), std::string::npos) << bad.status().message();
}

// The settings facility's flag words, as every flag (issue 34: "on" was refused here alone).
TEST(Calibrate, EnvironmentSwitchTakesTheFlagWords) {
  unsetenv("WEFT_CALIBRATE");
  ASSERT_TRUE(CalibrationRequested().ok());
  EXPECT_FALSE(CalibrationRequested().value());
  setenv("WEFT_CALIBRATE", "1", 1);
  EXPECT_TRUE(CalibrationRequested().value());
  setenv("WEFT_CALIBRATE", "on", 1);
  EXPECT_TRUE(CalibrationRequested().value());
  setenv("WEFT_CALIBRATE", "off", 1);
  EXPECT_FALSE(CalibrationRequested().value());
  setenv("WEFT_CALIBRATE", "yes please", 1);
  StatusOr<bool> bad = CalibrationRequested();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("WEFT_CALIBRATE=yes please"), std::string::npos) << bad.status().message();
  unsetenv("WEFT_CALIBRATE");
}

// Bad arguments: each fails with exit code 2 (usage) or 1 and a message naming the problem.
TEST(Calibrate, ToolRejectsBadArgumentsClearly) {
  std::string tool = BinPath("weft-topo");
  std::string out;
  EXPECT_EQ(RunShell(tool + " --calibrate --calibrate-ms abc", &out), 2);
  EXPECT_NE(out.find("--calibrate-ms 'abc'"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunShell(tool + " --calibrate --calibrate-ms -5", &out), 2);
  EXPECT_NE(out.find("--calibrate-ms '-5'"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunShell(tool + " --calibrate --preset host:2", &out), 2);
  EXPECT_NE(out.find("--calibrate measures the job's own fabric"), std::string::npos) << out;
  out.clear();
  // Not launched as a job: no rank environment to join.
  EXPECT_EQ(RunShell("env -u WEFT_RANK -u WEFT_WORLD_SIZE -u WEFT_ROOT -u RANK -u WORLD_SIZE -u MASTER_ADDR "
                     "-u SLURM_PROCID -u OMPI_COMM_WORLD_RANK " + tool + " --calibrate",
                     &out),
            1);
  EXPECT_NE(out.find("runs as one, e.g. weftrun -n 2 weft-topo --calibrate"), std::string::npos) << out;
}
