// Fault matrix: a rank of a multi-process job fails mid-collective in each way a rank can
// fail — killed (kill -9), stopped (SIGSTOP), its sockets reset, weftCommAbort,
// weftCommDestroy — over shared memory, over TCP (WEFT_SHM_DISABLE=1) and over UCX
// (WEFT_TRANSPORT=ucx, UCX_TLS=tcp: UCX's tcp lane, the one this machine has; built with UCX
// only), with 2, 3 and 4 ranks. Every survivor must get an error (not success, not a hang) that names the failed
// rank, within 5 s of the fault (stop: within the 2 s timeout plus slack), and nothing of
// the job may be left in /dev/shm afterwards.
//
// The ranks are tests/helpers/fault_worker.cc processes (public API only); rank 1 is always
// the victim, so with 3-4 ranks some survivors are not its ring neighbours and only learn
// of the failure second-hand. Where it can (root), the test runs in a private mount
// namespace with its own /dev/shm, so the leftover check sees only this test's segments.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

constexpr int kVictim = 1;
// Faults detected by the transports (a dead process, closed or reset connections, a closed
// communicator) must reach every survivor within this bound. The library's own figure is
// 30-75 ms; the rest is slack for a loaded 2-core machine.
constexpr double kDetectBoundS = 5.0;
// A stopped rank is only detectable by the timeout: WEFT_TIMEOUT plus slack.
constexpr double kStopTimeoutS = 2.0;
constexpr double kStopBoundS = kStopTimeoutS + 4.0;
// Detected faults run under a long timeout, so a survivor that only times out fails the bound.
constexpr const char* kLongTimeout = "30";

bool g_private_shm = false;

// A private /dev/shm (new mount namespace + tmpfs), when this process may create one.
class PrivateShmEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    if (unshare(CLONE_NEWNS) != 0) return;
    if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return;
    g_private_shm = mount("weft-fault-matrix", "/dev/shm", "tmpfs", 0, "size=512m,mode=1777") == 0;
    if (!g_private_shm)
      printf("note: no private /dev/shm (needs root): leftovers are judged by a before/after diff\n");
  }
};
testing::Environment* const kEnv = testing::AddGlobalTestEnvironment(new PrivateShmEnvironment);

std::set<std::string> WeftShmEntries() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("weft", 0) == 0) names.insert(n);
    }
    closedir(d);
  }
  return names;
}

struct Job {
  std::vector<int> status;  // wait status, -1 = killed by us after the survivors finished
  std::vector<std::string> output;
  bool hung = false;
};

// Starts n fault_worker ranks (weft_test::LaunchRanks); waits until every survivor exited (or
// `limit_s`: hung), then SIGKILLs whatever is left (the victim idles or is stopped).
Job RunJob(int n, const std::string& fault, const std::vector<std::pair<std::string, std::string>>& env,
           double limit_s) {
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (r != kVictim) survivors.push_back(r);
  weft_test::LaunchOutcome o =
      weft_test::LaunchRanks(n, {weft_test::BinPath("fault_worker"), fault, std::to_string(kVictim)},
                             env, limit_s, survivors);
  Job job;
  job.status = std::move(o.status);
  job.output = std::move(o.output);
  job.hung = o.timed_out;
  return job;
}

struct Case {
  std::string transport;  // shm, tcp or ucx: what carries the job's traffic
  std::string fault;
  int nranks;
  bool network() const { return transport != "shm"; }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.transport << " " << c.fault << " with " << c.nranks << " ranks";
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return info.param.transport + "_" + info.param.fault + "_" + std::to_string(info.param.nranks) + "ranks";
}

class FaultMatrix : public testing::TestWithParam<Case> {};

TEST_P(FaultMatrix, EverySurvivorGetsAnErrorNamingTheFailedRank) {
  const Case& c = GetParam();
  bool stop = c.fault == "stop";
  std::vector<std::pair<std::string, std::string>> env = {
      {"WEFT_TIMEOUT", stop ? std::to_string(kStopTimeoutS) : kLongTimeout},
      {"WEFT_INIT_TIMEOUT", "30"}};
  if (c.network()) env.push_back({"WEFT_SHM_DISABLE", "1"});
  if (c.transport == "tcp") env.push_back({"WEFT_TRANSPORT", "tcp"});
  if (c.transport == "ucx") {
    env.push_back({"WEFT_TRANSPORT", "ucx"});
    env.push_back({"UCX_TLS", "tcp"});
    // UCX 1.13's tcp lane (Debian 12) aborts the *survivor* with "uct_iface.h:884 Assertion
    // `comp->count > 0' failed ... status=-80" when a peer's connection breaks while zero-copy
    // sends to it are in flight (measured: 2 of 25 runs of ucx reset with 2 ranks; 0 of 50
    // with zero-copy off). A UCX defect, not weft's (transports/ucx/README.md, "Known
    // issues"): the matrix checks weft's failure handling with zero-copy off on that lane.
    env.push_back({"UCX_ZCOPY_THRESH", "inf"});
    env.push_back({"UCX_TCP_PUT_ENABLE", "n"});
  }
  std::set<std::string> shm_before = WeftShmEntries();

  Job job = RunJob(c.nranks, c.fault, env, 40);
  std::string all;
  for (int r = 0; r < c.nranks; ++r) all += "--- rank " + std::to_string(r) + ":\n" + job.output[r];
  ASSERT_FALSE(job.hung) << "a survivor hung (no error within 40 s):\n" << all;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.output[kVictim], m, std::regex("FAULT [a-z]+ AT ([0-9.]+)")))
      << "the victim never injected its fault:\n" << all;
  double fault_at = std::stod(m[1]);
  double bound = stop ? kStopBoundS : kDetectBoundS;
  // "rank 1" as the peer (not "rank 1/4", a rank naming itself; not "rank 10").
  const std::regex names_victim("rank " + std::to_string(kVictim) + "(?![0-9/])");
  std::string blamed_other;
  int timeouts = 0;
  for (int r = 0; r < c.nranks; ++r) {
    if (r == kVictim) continue;
    const std::string& out = job.output[r];
    EXPECT_TRUE(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0)
        << "rank " << r << " crashed or failed:\n" << out;
    std::smatch e;
    if (!std::regex_search(out, e, std::regex("ERROR ([0-9]+) AT ([0-9.]+): (.*)"))) {
      ADD_FAILURE() << "rank " << r << " got no error:\n" << out;
      continue;
    }
    int code = std::stoi(e[1]);
    double after = std::stod(e[2]) - fault_at;
    EXPECT_TRUE(code == weftRemoteError || code == weftTimeout || code == weftSystemError)
        << "rank " << r << " got code " << code << ":\n" << out;
    if (code == weftTimeout) ++timeouts;
    EXPECT_LT(after, bound) << "rank " << r << " learned of the fault after " << after << " s:\n" << out;
    if (!std::regex_search(std::string(e[3]), names_victim))
      blamed_other += "rank " + std::to_string(r) + " (" + std::to_string(after) + " s): " + std::string(e[3]) + "\n";
  }

  // A stopped rank is alive, so only a timeout can tell: at least one survivor times out
  // (the others may learn of it as a remote error when that survivor tears down).
  if (stop) EXPECT_GE(timeouts, 1) << "nobody timed out waiting for the stopped rank:\n" << all;

  // Nothing of the job may remain in /dev/shm (ranks unlink their segments once mapped; a
  // killed rank's window is unlinked by survivors). Short grace: survivors exit first.
  std::set<std::string> left;
  for (int i = 0; i < 50; ++i) {
    left.clear();
    for (const std::string& n : WeftShmEntries())
      if (!shm_before.count(n)) left.insert(n);
    if (left.empty()) break;
    usleep(20000);
  }
  std::string left_list;
  for (const std::string& n : left) left_list += " " + n;
  EXPECT_TRUE(left.empty()) << "left in /dev/shm" << (g_private_shm ? " (private tmpfs)" : "")
                            << ":" << left_list;

  // Over TCP and UCX, survivors that are not the victim's neighbours learn of it from the
  // abort note the neighbour forwards, which names the origin (e6d3351, 36a9191; ucx:
  // transports/ucx/ucx_abort_notes.cc). A stopped (SIGSTOP) victim sends no note: survivors
  // time out together, and before reporting, each announces the rank it waits on and follows
  // the announcements of the others to the silent rank (executor: drain, bb1e27c).
  EXPECT_TRUE(blamed_other.empty())
      << "a survivor's error does not name the failed rank " << kVictim << ":\n" << blamed_other;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  std::vector<std::string> transports = {"shm", "tcp"};
#ifdef WEFT_HAVE_UCX
  transports.push_back("ucx");
#endif
  for (const std::string& transport : transports) {
    for (const char* fault : {"kill", "stop", "reset", "abort", "destroy"}) {
      // Resetting sockets only disturbs TCP: shared-memory data never crosses a socket.
      if (transport == "shm" && std::string(fault) == "reset") continue;
      for (int n : {2, 3, 4}) cases.push_back({transport, fault, n});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultMatrix, testing::ValuesIn(AllCases()), CaseName);

}  // namespace
