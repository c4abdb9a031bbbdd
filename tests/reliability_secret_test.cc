// Regression tests for issue 11, defect 3: without WEFT_SECRET, an outsider who knows only the
// job's public parameters (root address, port, world size) must not be able to join, and the
// root must listen only on the address it was given. Before the fix the secret was derived
// from exactly those parameters and the root listened on every interface: the outsider below
// joined as rank 1.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "net/socket.h"
#include "test_util.h"

namespace {

int FreePort() { return weft_test::FreeLoopbackPort(); }

// Starts rank `rank` of an `n`-rank job on `root` with no WEFT_SECRET.
pid_t StartRank(int rank, int n, const std::string& root, const std::string& out) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    unsetenv("WEFT_SECRET");
    setenv("WEFT_RANK", std::to_string(rank).c_str(), 1);
    setenv("WEFT_WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("WEFT_LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("WEFT_ROOT", root.c_str(), 1);
    setenv("WEFT_INIT_TIMEOUT", "8", 1);
    std::string bin = weft_test::BinPath("reliability_mismatch_worker");
    execl(bin.c_str(), bin.c_str(), "match", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The secret weft derived before the fix from public values only (init.cc, DerivedSecret).
weft::net::Secret PublicDerivedSecret(const std::string& root, int size) {
  std::string s = root + "|" + std::to_string(size) + "|";
  uint64_t a = 1469598103934665603ULL, b = 7809847782465536322ULL;
  for (char c : s) {
    a = (a ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    b = (b ^ static_cast<unsigned char>(c)) * 1099511628211ULL + 0x9e3779b97f4a7c15ULL;
  }
  weft::net::Secret sec;
  std::memcpy(sec.bytes, &a, 8);
  std::memcpy(sec.bytes + 8, &b, 8);
  return sec;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ReliabilitySecret, OutsiderWithPublicParametersCannotJoin) {
  const std::string root = "127.0.0.1:" + std::to_string(FreePort());
  pid_t rank0 = StartRank(0, 2, root, "/tmp/weft_secret_test_r0_" + std::to_string(getpid()));
  weft::BootstrapId id;
  weft::StatusOr<weft::net::SockAddr> addr = weft::net::ParseHostPort(root);
  ASSERT_TRUE(addr.ok());
  id.root = *addr;
  id.secret = PublicDerivedSecret(root, 2);
  auto joined = weft::Bootstrap::Join(id, 1, 2, 3);
  if (!joined.ok()) printf("outsider refused: %s\n", joined.status().message().c_str());
  EXPECT_FALSE(joined.ok()) << "an outsider joined the job as rank 1 with a secret computed "
                               "from public parameters";
  kill(rank0, SIGKILL);
  WaitExit(rank0);
}

TEST(ReliabilitySecret, SameHostJobWithoutSecretStillRuns) {
  const std::string root = "127.0.0.1:" + std::to_string(FreePort());
  std::string out0 = "/tmp/weft_secret_test_a_" + std::to_string(getpid());
  std::string out1 = out0 + "b";
  pid_t r0 = StartRank(0, 2, root, out0), r1 = StartRank(1, 2, root, out1);
  EXPECT_EQ(WaitExit(r0), 0);
  EXPECT_EQ(WaitExit(r1), 0);
  unlink(out0.c_str());
  unlink(out1.c_str());
}

TEST(ReliabilitySecret, RootListensOnlyOnTheGivenAddress) {
  weft::StatusOr<weft::net::SockAddr> other = weft::net::ChooseLocalAddress();
  if (!other.ok() || other->is_loopback() || other->family() != AF_INET)
    GTEST_SKIP() << "no non-loopback IPv4 address on this host to probe from";
  int port = FreePort();
  const std::string root = "127.0.0.1:" + std::to_string(port);
  pid_t rank0 = StartRank(0, 2, root, "/tmp/weft_secret_test_r0b_" + std::to_string(getpid()));
  usleep(500 * 1000);  // let it start listening
  weft::net::SockAddr probe = *other;
  probe.set_port(port);
  weft::BootstrapId id;
  id.root = probe;
  id.secret = PublicDerivedSecret(root, 2);
  auto joined = weft::Bootstrap::Join(id, 1, 2, 2);
  EXPECT_FALSE(joined.ok()) << "the root of a 127.0.0.1 job answered on " << probe.ToString();
  kill(rank0, SIGKILL);
  WaitExit(rank0);
}

TEST(ReliabilitySecret, BadSecretIsNotEchoed) {
  const std::string bad = "zzzz456789abcdef0123456789abcdeX";
  auto s = weft::net::Secret::FromHex(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message().find("zzzz4567"), std::string::npos) << s.status().message();
}

}  // namespace
