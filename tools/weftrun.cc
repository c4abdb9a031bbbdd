// weftrun: launches N local ranks of a program with the weft environment set.
//
//   weftrun -n N [--no-prefix] [--timeout SECONDS] [--elastic | --replace] PROGRAM [ARGS...]
//
// Every rank gets WEFT_RANK, WEFT_WORLD_SIZE, WEFT_LOCAL_RANK, WEFT_LOCAL_SIZE, WEFT_ROOT
// (127.0.0.1:<free port>, served by rank 0) and a random WEFT_SECRET, so programs call
// weftCommInitFromEnv(). Each output line is prefixed with "[rank] ". As soon as one rank
// fails (non-zero exit or a signal) the others are stopped (SIGTERM, then SIGKILL after 3 s)
// and weftrun exits with that rank's status (128 + signal for a signal). With --timeout,
// ranks still running after SECONDS are stopped and weftrun exits 124. With --elastic (for
// programs that survive a lost rank, e.g. moe_train --elastic) a rank killed by a signal is
// reported and the others keep running; weftrun then exits 0 when every other rank exits 0.
// A rank that exits with a non-zero status still stops the job: that is the program's error.
// --replace (implies --elastic) starts a new process in a killed rank's place, with
// WEFTRUN_JOIN_SLOT=<its rank> and, for every process, WEFTRUN_JOIN_DIR (a private directory):
// the program joins the running job by weftCommGrow (moe_train --elastic: join files there).
//
// Flight recorder dumps: a rank whose collective times out or loses a peer writes its last
// operations to WEFT_DEBUG_FILE (src/core/flight_recorder.h). Unless the caller set that
// variable, weftrun points it at a private directory of its own; once the ranks are gone it
// prints every rank's dump to stderr, one block per rank, so the ranks of a hung job can be
// compared side by side, and removes the directory. A WEFT_DEBUG_FILE set by the caller is
// honoured: its files are printed too, and left in place.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/flight_recorder.h"

namespace {

struct Rank {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;
};

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

int FreePort() {
  // Bind to port 0 to let the kernel pick a free port, then release it for rank 0. The small
  // window where another process could take it is acceptable for a local launcher.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// The job secret: from the kernel's CSPRNG (getrandom(2)). std::random_device may be a
// deterministic engine on some standard libraries, and a guessable secret lets an outsider
// join the job (issue 11, defect 3). Empty when the kernel cannot provide randomness.
std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    got += static_cast<size_t>(n);
  }
  std::string s;
  char buf[3];
  for (unsigned char b : raw) {
    snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>(b));
    s += buf;
  }
  return s;
}

// Where the ranks' flight recorder dumps go: the caller's WEFT_DEBUG_FILE, else a file
// pattern in a private directory made here (*own_dir set, removed by the caller).
std::string DebugFilePattern(std::string* own_dir) {
  const char* user = getenv("WEFT_DEBUG_FILE");
  if (user != nullptr && *user != '\0') return user;
  const char* tmp = getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/weftrun-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";  // no dumps collected; ranks use stderr
  *own_dir = templ;
  return templ + "/flight.%r";
}

std::string HostName() {
  char host[256] = {};
  return gethostname(host, sizeof(host) - 1) == 0 ? host : "unknown-host";
}

// Prints each rank's flight recorder dump (if it wrote one) to stderr, then removes the
// files when they are in weftrun's own directory.
void CollectDumps(const std::string& pattern, const std::string& own_dir,
                  const std::vector<pid_t>& pids) {
  if (pattern.empty()) return;
  const std::string host = HostName();
  for (size_t r = 0; r < pids.size(); ++r) {
    const std::string path = weft::ExpandDebugFilePattern(pattern, static_cast<int>(r), pids[r], host);
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    if (!text.str().empty()) {
      fprintf(stderr, "weftrun: flight recorder of rank %zu (%s):\n%s", r,
              own_dir.empty() ? path.c_str() : "collected by weftrun", text.str().c_str());
      if (text.str().back() != '\n') fputc('\n', stderr);
    }
    if (!own_dir.empty()) unlink(path.c_str());
  }
  if (!own_dir.empty()) rmdir(own_dir.c_str());
}

void Emit(FILE* to, int rank, std::string* buf, bool prefix, bool flush_partial) {
  size_t pos;
  while ((pos = buf->find('\n')) != std::string::npos) {
    if (prefix) fprintf(to, "[%d] ", rank);
    fwrite(buf->data(), 1, pos + 1, to);
    buf->erase(0, pos + 1);
  }
  if (flush_partial && !buf->empty()) {
    if (prefix) fprintf(to, "[%d] ", rank);
    fwrite(buf->data(), 1, buf->size(), to);
    fputc('\n', to);
    buf->clear();
  }
  fflush(to);
}

int Usage() {
  fprintf(stderr, "usage: weftrun -n N [--no-prefix] [--timeout SECONDS] [--elastic | --replace] "
          "PROGRAM [ARGS...]\n");
  return 2;
}

// What every rank's environment and command line share.
struct Launch {
  int n = 0;
  std::string root, secret, dump_pattern, join_dir;
  char** argv = nullptr;  // the program and its arguments, NULL-terminated
};

// Starts rank r (a replacement for it when join is set: WEFTRUN_JOIN_SLOT tells the program
// to join the running job instead of starting one). False, with a message, on failure.
bool Spawn(const Launch& launch, int r, bool join, Rank* rank) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) {
    fprintf(stderr, "weftrun: pipe: %s\n", strerror(errno));
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "weftrun: fork: %s\n", strerror(errno));
    return false;
  }
  if (pid == 0) {
    // Own process group: stopping a rank also stops what it started (a shell's children
    // would otherwise keep the output pipes open after the rank itself died). Not its own
    // session: with the kernel's session autogroup (sched_autogroup_enabled) each session is
    // its own scheduling group, and on EEVDF kernels (Linux 6.6+) sched_yield() only yields
    // within the caller's group, so ranks in separate sessions cannot hand a shared core to
    // each other by yielding, which is how oversubscribed ranks wait (src/common/backoff.h).
    // Measured with one setsid() per rank: 4 ranks on 2 cores, broadcast 32 KiB, 10-20x the
    // futex and sched_yield calls and ~25% more time per call (perf stat; RESULTS.md, session 5).
    setpgid(0, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]); close(out[1]); close(err[0]); close(err[1]);
    setenv("WEFT_RANK", std::to_string(r).c_str(), 1);
    setenv("WEFT_WORLD_SIZE", std::to_string(launch.n).c_str(), 1);
    setenv("WEFT_LOCAL_RANK", std::to_string(r).c_str(), 1);
    setenv("WEFT_LOCAL_SIZE", std::to_string(launch.n).c_str(), 1);
    setenv("WEFT_ROOT", launch.root.c_str(), 1);
    setenv("WEFT_SECRET", launch.secret.c_str(), 1);
    if (!launch.dump_pattern.empty()) setenv("WEFT_DEBUG_FILE", launch.dump_pattern.c_str(), 1);
    if (!launch.join_dir.empty()) setenv("WEFTRUN_JOIN_DIR", launch.join_dir.c_str(), 1);
    if (join) setenv("WEFTRUN_JOIN_SLOT", std::to_string(r).c_str(), 1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execvp(launch.argv[0], launch.argv);
    fprintf(stderr, "weftrun: cannot run %s: %s\n", launch.argv[0], strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  setpgid(pid, pid);  // also here: no race with the child's own call
  *rank = Rank();
  rank->pid = pid;
  rank->out_fd = out[0];
  rank->err_fd = err[0];
  return true;
}

// A dead rank's pipes: what it wrote before dying, then closed (its slot is reused).
void DrainDead(int r, bool prefix, Rank* rank) {
  for (int* fd : {&rank->out_fd, &rank->err_fd}) {
    if (*fd < 0) continue;
    fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK);  // a child it left may hold it open
    std::string& b = fd == &rank->out_fd ? rank->out_buf : rank->err_buf;
    char buf[65536];
    ssize_t got;
    while ((got = read(*fd, buf, sizeof(buf))) > 0) b.append(buf, got);
    Emit(fd == &rank->out_fd ? stdout : stderr, r, &b, prefix, true);
    close(*fd);
    *fd = -1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n = -1;
  bool prefix = true;
  double timeout_s = 0;
  bool elastic = false, replace = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "-n" || a == "-np") && i + 1 < argc) {
      char* end = nullptr;
      n = static_cast<int>(strtol(argv[++i], &end, 10));
      if (*end != '\0' || n < 1) {
        fprintf(stderr, "weftrun: -n %s: expected a positive number of ranks\n", argv[i]);
        return 2;
      }
    } else if (a == "--elastic") {
      elastic = true;
    } else if (a == "--replace") {
      elastic = replace = true;
    } else if (a == "--no-prefix") {
      prefix = false;
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout_s = atof(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      Usage();
      return 0;
    } else if (a == "--") {
      ++i;
      break;
    } else {
      break;
    }
  }
  if (n < 1 || i >= argc) return Usage();

  int port = FreePort();
  if (port < 0) {
    fprintf(stderr, "weftrun: cannot find a free TCP port on 127.0.0.1: %s\n", strerror(errno));
    return 1;
  }
  std::string root = "127.0.0.1:" + std::to_string(port);
  std::string secret = RandomHex(16);
  if (secret.empty()) {
    fprintf(stderr, "weftrun: cannot read random bytes for the job secret (getrandom): %s\n",
            strerror(errno));
    return 1;
  }
  std::string own_dump_dir;
  const std::string dump_pattern = DebugFilePattern(&own_dump_dir);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGHUP, OnSignal);  // the terminal went away: stop the ranks too
  signal(SIGPIPE, SIG_IGN);

  Launch launch;
  launch.n = n;
  launch.root = root;
  launch.secret = secret;
  launch.dump_pattern = dump_pattern;
  launch.argv = argv + i;
  if (replace) {  // where survivors leave the replacements' join files (moe_train --elastic)
    const char* tmp = getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/weftrun-join-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      fprintf(stderr, "weftrun: --replace: cannot create a directory: %s\n", strerror(errno));
      return 1;
    }
    launch.join_dir = templ;
  }
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; ++r) {
    if (!Spawn(launch, r, false, &ranks[r])) {
      if (!own_dump_dir.empty()) rmdir(own_dump_dir.c_str());
      return 1;
    }
  }

  auto start = std::chrono::steady_clock::now();
  int exit_code = 0;
  int failed_rank = -1;
  int lost = 0, lost_code = 0;  // --elastic: ranks killed by a signal while the others went on
  int replaced = 0;             // --replace: at most n, a replacement that keeps dying is not
                                // retried forever
  bool stopping = false;
  std::chrono::steady_clock::time_point stop_time;
  auto stop_all = [&](int sig) {
    for (Rank& k : ranks)  // the whole group, even if the leader exited; just the rank if
      if (kill(-k.pid, sig) != 0 && errno == ESRCH) kill(k.pid, sig);  // its group is not made yet
  };
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // rank, is_stderr
    for (int r = 0; r < n; ++r) {
      if (ranks[r].out_fd >= 0) { fds.push_back({ranks[r].out_fd, POLLIN, 0}); who.push_back({r, false}); }
      if (ranks[r].err_fd >= 0) { fds.push_back({ranks[r].err_fd, POLLIN, 0}); who.push_back({r, true}); }
    }
    poll(fds.data(), fds.size(), 100);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& rk = ranks[who[k].first];
      char buf[65536];
      ssize_t got = read(fds[k].fd, buf, sizeof(buf));
      std::string& b = who[k].second ? rk.err_buf : rk.out_buf;
      FILE* to = who[k].second ? stderr : stdout;
      if (got > 0) {
        b.append(buf, got);
        Emit(to, who[k].first, &b, prefix, false);
      } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        Emit(to, who[k].first, &b, prefix, true);
        close(fds[k].fd);
        (who[k].second ? rk.err_fd : rk.out_fd) = -1;
      }
    }
    // Reap.
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (int r = 0; r < n; ++r) {
        if (ranks[r].pid != pid) continue;
        ranks[r].exited = true;
        ranks[r].status = status;
        int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                     : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (elastic && WIFSIGNALED(status) && !stopping) {
          fprintf(stderr, "weftrun: rank %d was killed by signal %d (%s); --elastic: the other "
                  "ranks continue\n", r, WTERMSIG(status), strsignal(WTERMSIG(status)));
          ++lost, lost_code = code;
          if (replace && replaced < n) {
            DrainDead(r, prefix, &ranks[r]);
            if (Spawn(launch, r, true, &ranks[r])) {
              fprintf(stderr, "weftrun: --replace: started a replacement for rank %d\n", r);
              ++replaced, --lost;  // its slot is running again
            }
          }
          continue;
        }
        if (code != 0 && failed_rank < 0 && !stopping) {
          failed_rank = r;
          exit_code = code;
          if (WIFSIGNALED(status))
            fprintf(stderr, "weftrun: rank %d was killed by signal %d (%s); stopping the other ranks\n",
                    r, WTERMSIG(status), strsignal(WTERMSIG(status)));
          else
            fprintf(stderr, "weftrun: rank %d exited with status %d; stopping the other ranks\n", r, code);
          stopping = true;
          stop_time = std::chrono::steady_clock::now();
          stop_all(SIGTERM);
        }
      }
    }
    bool all_exited = true, all_closed = true;
    for (const Rank& k : ranks) {
      all_exited &= k.exited;
      all_closed &= k.out_fd < 0 && k.err_fd < 0;
    }
    if (all_exited && all_closed) break;
    // Ranks gone but something they started still holds the pipes: stop waiting for it.
    if (all_exited && stopping &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stop_time).count() > 4) {
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (g_signal && !stopping) {
      fprintf(stderr, "weftrun: received signal %d; stopping the ranks\n", static_cast<int>(g_signal));
      exit_code = 128 + g_signal;
      stopping = true;
      stop_time = now;
      stop_all(SIGTERM);
    }
    if (timeout_s > 0 && !stopping &&
        std::chrono::duration<double>(now - start).count() > timeout_s) {
      fprintf(stderr, "weftrun: ranks still running after --timeout %.0f s; stopping them\n", timeout_s);
      exit_code = 124;
      stopping = true;
      stop_time = now;
      stop_all(SIGTERM);
    }
    if (stopping && std::chrono::duration<double>(now - stop_time).count() > 3) {
      stop_all(SIGKILL);
      stop_time = now + std::chrono::hours(1);  // once
    }
  }
  std::vector<pid_t> pids;
  for (const Rank& k : ranks) pids.push_back(k.pid);
  CollectDumps(dump_pattern, own_dump_dir, pids);
  if (exit_code == 0 && lost == n) exit_code = lost_code;  // nobody survived
  if (!launch.join_dir.empty()) {  // join files nobody took (a replacement that never came up)
    for (int r = 0; r < n; ++r)
      for (const char* suffix : {"", ".tmp"})
        unlink((launch.join_dir + "/join." + std::to_string(r) + suffix).c_str());
    rmdir(launch.join_dir.c_str());
  }
  return exit_code;
}
