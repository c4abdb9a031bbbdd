// Helpers for the device tests: every test that touches the device runtime runs in a forked
// child, so the runtime starts fresh there with the child's own WEFT_DEVICE / delay settings
// (the runtime is chosen once per process) and a fault kills the child, not the test binary.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "weft/weft.h"
#include "weft/weft_device.h"

namespace weft_test {

struct ChildResult {
  bool exited = false;    // exited normally (code below) rather than by a signal
  int code = -1;
  int signal = 0;
  std::string message;    // what the child reported ("" = success)
};

// Forks; the child sets `env`, runs fn and reports its message through a pipe. Never returns
// in the child.
inline ChildResult RunInChild(const std::vector<std::pair<std::string, std::string>>& env,
                              const std::function<std::string()>& fn) {
  int fds[2];
  ChildResult r;
  if (pipe(fds) != 0) {
    r.message = "pipe failed";
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    const std::string msg = fn();
    if (!msg.empty()) (void)!write(fds[1], msg.data(), msg.size());
    close(fds[1]);
    _exit(msg.empty() ? 0 : 1);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.message.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (r.exited && r.code != 0 && r.message.empty()) r.message = "child exited with code " + std::to_string(r.code);
  if (!r.exited && r.message.empty()) r.message = "child killed by signal " + std::to_string(r.signal);
  return r;
}

// The runtime the device suites run on: WEFTTEST_DEVICE (tests/gpu/run.sh sets "cuda"), else
// `emulated` (the emulated GPU, as in CI). Not a WEFT_* name: weft warns about unknown ones.
inline std::string SuiteDevice(const std::string& emulated) {
  const char* v = std::getenv("WEFTTEST_DEVICE");
  return v != nullptr && *v != '\0' ? std::string(v) : emulated;
}

// The usual case: the child must succeed; returns "" or what went wrong.
inline std::string InChild(const std::vector<std::pair<std::string, std::string>>& env,
                           const std::function<std::string()>& fn) {
  return RunInChild(env, fn).message;
}

// Forks `nranks` processes (ForkRanks) that each join the job (weftCommInitFromEnv), create a
// stream on GPU rank % devices (fewer GPUs than ranks, as on a lent machine: they share) and
// run body(rank, comm, stream); a non-empty result fails that rank and goes to its stderr.
// The body owns comm and stream (a test whose peer died may not want to destroy them).
inline LaunchOutcome ForkDeviceRanks(
    int nranks, const std::vector<std::pair<std::string, std::string>>& env,
    const std::function<std::string(int, weftComm_t, weftStream_t)>& body, double timeout_s = 120) {
  return ForkRanks(
      nranks,
      [&](int rank) {
        weftComm_t comm = nullptr;
        weftStream_t stream = nullptr;
        int devices = 1;
        weftDeviceGetCount(&devices);
        if (weftCommInitFromEnv(&comm) != weftSuccess ||
            weftDeviceStreamCreate(&stream, rank % std::max(devices, 1)) != weftSuccess)
          return std::fprintf(stderr, "rank %d: setup: %s\n", rank, weftGetLastError(nullptr)), 1;
        const std::string e = body(rank, comm, stream);
        if (!e.empty()) return std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str()), 1;
        return 0;
      },
      env, timeout_s);
}

}  // namespace weft_test
