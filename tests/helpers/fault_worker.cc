// fault_worker: one rank of tests/fault_matrix_test.cc. Uses only the public API (weft.h).
//
//   fault_worker FAULT VICTIM
// Every rank runs 8 MiB float allreduces in a loop. After the third one the VICTIM injects
// FAULT while the others are inside the fourth:
//   kill     a thread SIGKILLs the process while its main thread is inside the allreduce
//   stop     a thread SIGSTOPs the process likewise (survivors can only time out)
//   reset    a thread resets every socket of the process (SO_LINGER 0 + close: an RST on
//            TCP connections) while inside the allreduce, then the rank idles
//   abort    the victim calls weftCommAbort instead of the allreduce, then idles
//   destroy  the victim calls weftCommDestroy instead of the allreduce, then idles
//   hang     the victim never calls the fourth allreduce (it idles): the others can only
//            time out (tests/reliability_flight_recorder_test.cc: their flight recorder
//            dumps must name that call); survivors then exit 3, a failed job for weftrun
// "Idles" = sleeps 30 s without exiting, so survivors must notice the fault itself, not the
// process exit (the test kills it once the survivors are done).
// Output (CLOCK_MONOTONIC seconds, comparable between processes of one machine):
//   victim:    "FAULT <fault> AT <t>"   (flushed before the fault)
//   survivors: "ERROR <code> AT <t>: <weftGetLastError>"  or "FAIL <why>"
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "weft/weft.h"

namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void AnnounceFault(const std::string& fault) {
  printf("FAULT %s AT %.6f\n", fault.c_str(), Now());
  fflush(stdout);
}

// Replaces every socket of this process by /dev/null, closing it with SO_LINGER 0 so the
// kernel answers with RST: what a crashed NIC driver or a middlebox reset looks like to peers.
void ResetAllSockets() {
  int devnull = open("/dev/null", O_RDWR);
  for (int fd = 3; fd < 4096; ++fd) {
    struct stat st;
    if (fd == devnull || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    dup2(devnull, fd);  // atomically closes the socket (RST) and keeps the fd number taken
  }
}

// Runs on a thread while the main thread is inside an allreduce.
void FaultFromThread(const std::string& fault) {
  usleep(5000);  // let the main thread get into the collective
  AnnounceFault(fault);
  if (fault == "kill") raise(SIGKILL);
  if (fault == "stop") raise(SIGSTOP);
  if (fault == "reset") ResetAllSockets();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fault_worker kill|stop|reset|abort|destroy|hang VICTIM\n");
    return 2;
  }
  std::string fault = argv[1];
  int victim = atoi(argv[2]);
  weftComm_t comm;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    printf("FAIL init: %s\n", weftGetLastError(nullptr));
    return 1;
  }
  int rank = -1;
  weftCommUserRank(comm, &rank);
  const size_t count = 2 << 20;  // 8 MiB of float32: a collective long enough to be inside
  std::vector<float> buf(count, 1.0f);
  std::thread faulter;
  for (int it = 0; it < 1000; ++it) {
    if (rank == victim && it == 3) {
      if (fault == "hang") {
        AnnounceFault(fault);
        sleep(30);
        return 0;
      }
      if (fault == "abort" || fault == "destroy") {
        usleep(20000);  // the others are inside allreduce #3 by now
        AnnounceFault(fault);
        if (fault == "abort") weftCommAbort(comm);
        else weftCommDestroy(comm);
        sleep(30);
        return 0;
      }
      faulter = std::thread(FaultFromThread, fault);
    }
    weftResult_t r = weftAllReduce(buf.data(), buf.data(), count, weftFloat32, weftSum, comm, nullptr);
    if (r != weftSuccess) {
      printf("ERROR %d AT %.6f: %s\n", static_cast<int>(r), Now(), weftGetLastError(comm));
      fflush(stdout);
      if (rank == victim) {  // reset: our own call failed too; idle, do not exit
        faulter.join();
        sleep(30);
        return 0;
      }
      weftCommDestroy(comm);
      return fault == "hang" ? 3 : 0;
    }
  }
  printf("FAIL rank %d: no error after 1000 allreduces\n", rank);
  if (faulter.joinable()) faulter.join();
  return 1;
}
