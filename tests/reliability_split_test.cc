// Regression test (issue 11, minor): a weftCommSplit that fails because the process is out of
// file descriptors (RLIMIT_NOFILE) must not leave descriptors open — neither while the failed
// handle lives nor after it is destroyed. The campaign saw 4 fds left open on two ranks.
//
// Two forked processes (the limit is per process) form a communicator over the bootstrap, then
// each lowers its descriptor limit to what it has open plus `spare` and splits; the split
// fails somewhere in creating the child (rendezvous socket, connections, shared memory) for
// small `spare`. After destroying what the split returned and raising the limit again, the
// process must hold the descriptors it held before the split.
//
// Nothing is waited out: when the group leader's own join fails, it cancels the rendezvous
// root it started for the split (CancelBootstrapRoot, src/core/bootstrap.cc), which closes its
// listener and the connections of members that reached it before weftCommSplit returns.
// (Before that cancel existed the root kept them until WEFT_INIT_TIMEOUT: the 4 fds the
// campaign saw.) WEFT_INIT_TIMEOUT is 5 s so that a member waiting for a failed peer gives up.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"

namespace {

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    --n;  // the directory stream itself
  }
  return n;
}

// One rank. Exit codes: 0 the split failed and nothing leaked; 10 the split succeeded (the
// limit was not tight enough to test anything); 20 + leaked fds (capped) on a leak; 2 setup.
int RankMain(const weftUniqueId& id, int rank, int spare) {
  weftComm_t comm = nullptr;
  if (weftCommInitRank(&comm, 2, id, rank) != weftSuccess) {
    fprintf(stderr, "rank %d: init: %s\n", rank, weftGetLastError(nullptr));
    return 2;
  }
  float x = 1;
  if (weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, nullptr) != weftSuccess) return 2;
  const int before = OpenFds();
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  rlimit tight = old;
  // The lowest free descriptor must stay below the limit for `spare` more: fds are numbered
  // from 0, so the limit is the highest open fd + 1 + spare (approximated by the count plus
  // slack for holes left by closed descriptors).
  tight.rlim_cur = static_cast<rlim_t>(before + 1 + spare);
  if (setrlimit(RLIMIT_NOFILE, &tight) != 0) return 2;
  weftComm_t child = nullptr;
  weftResult_t r = weftCommSplit(comm, 0, rank, &child);
  setrlimit(RLIMIT_NOFILE, &old);
  if (child != nullptr) weftCommDestroy(child);
  const int after = OpenFds();  // right after: nothing may be released later in the background
  weftCommDestroy(comm);
  if (after > before)
    fprintf(stderr, "rank %d spare %d: %d fd(s) open right after the split\n", rank, spare, after - before);
  if (r == weftSuccess) return after > before ? 20 + std::min(after - before, 50) : 10;
  fprintf(stderr, "rank %d spare %d: split failed (%s); fds before %d after %d\n", rank, spare,
          weftGetLastError(nullptr), before, after);
  return after > before ? 20 + std::min(after - before, 50) : 0;
}

TEST(ReliabilitySplit, FailedSplitUnderALowFdLimitLeavesNoFdOpen) {
  // weftGetUniqueId starts the rendezvous root's thread in this process, and each forked rank
  // then starts weft's threads: TSan aborts the child at its first new thread.
  if (weft_test::kBuiltWithThreadSanitizer)
    GTEST_SKIP() << "ThreadSanitizer does not support starting threads in a child forked from a "
                    "multi-threaded process (this test forks its ranks after weftGetUniqueId "
                    "started the root's thread); it runs in the normal and ASan suites";
  setenv("WEFT_INIT_TIMEOUT", "5", 1);  // a rank whose peer failed early waits this long at most
  int tested = 0;
  for (int spare : {0, 1, 2, 3, 5, 8}) {
    weftUniqueId id;
    ASSERT_EQ(weftGetUniqueId(&id), weftSuccess) << weftGetLastError(nullptr);
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) _exit(RankMain(id, rank, spare));
      pids.push_back(pid);
    }
    for (int rank = 0; rank < 2; ++rank) {
      int status = 0;
      ASSERT_EQ(waitpid(pids[rank], &status, 0), pids[rank]);
      ASSERT_TRUE(WIFEXITED(status)) << "rank " << rank << " spare " << spare << " crashed";
      const int code = WEXITSTATUS(status);
      EXPECT_LT(code, 20) << "rank " << rank << " with " << spare << " spare fds leaked "
                          << code - 20 << " descriptor(s) after a failed split";
      EXPECT_NE(code, 2) << "rank " << rank << " spare " << spare << ": setup failed";
      tested += code == 0;
    }
  }
  unsetenv("WEFT_INIT_TIMEOUT");
  EXPECT_GT(tested, 0) << "no limit made the split fail: the test exercised nothing";
}

}  // namespace
