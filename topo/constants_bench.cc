// Microbenchmark behind the "measured here" constants of src/topo/link_table.cc (see
// topo/README-constants.txt): memcpy and float-sum bandwidth, TCP loopback single-stream
// bandwidth and 1-byte ping-pong latency, cache-line ping-pong between two threads.
// Not part of the build: g++ -O2 -std=c++17 topo/constants_bench.cc -o /tmp/cb -pthread
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
using clk = std::chrono::steady_clock;
static double now() { return std::chrono::duration<double>(clk::now().time_since_epoch()).count(); }
int main() {
  size_t n = 64 << 20;
  std::vector<char> a(n, 1), b(n, 2);
  memcpy(b.data(), a.data(), n);
  double t0 = now(); int reps = 20;
  for (int i = 0; i < reps; i++) memcpy(b.data(), a.data(), n);
  double t = now() - t0;
  printf("memcpy 64MB: %.2f GB/s\n", reps * n / t / 1e9);
  // float sum reduce
  std::vector<float> x(n / 4, 1.f), y(n / 4, 2.f);
  t0 = now();
  for (int r = 0; r < 10; r++) for (size_t i = 0; i < x.size(); i++) y[i] += x[i];
  t = now() - t0;
  printf("reduce float 64MB (dst+=src): %.2f GB/s of dst\n", 10.0 * n / t / 1e9);
  // tcp loopback
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{}; addr.sin_family = AF_INET; addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK); addr.sin_port = 0;
  bind(ls, (sockaddr*)&addr, sizeof addr); listen(ls, 1);
  socklen_t len = sizeof addr; getsockname(ls, (sockaddr*)&addr, &len);
  std::thread srv([&] {
    int s = accept(ls, nullptr, nullptr); int one = 1; setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, 4);
    std::vector<char> buf(1 << 20);
    // stream phase: receive 2 GB
    size_t got = 0, total = 2ull << 30;
    while (got < total) { ssize_t r = recv(s, buf.data(), buf.size(), 0); if (r <= 0) break; got += r; }
    send(s, "k", 1, 0);
    // pingpong phase
    for (int i = 0; i < 20000; i++) { char c; if (recv(s, &c, 1, MSG_WAITALL) != 1) break; send(s, &c, 1, 0); }
    close(s);
  });
  int c = socket(AF_INET, SOCK_STREAM, 0); int one = 1; setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, 4);
  connect(c, (sockaddr*)&addr, sizeof addr);
  std::vector<char> buf(1 << 20, 3);
  t0 = now(); size_t sent = 0, total = 2ull << 30;
  while (sent < total) { ssize_t r = send(c, buf.data(), std::min(buf.size(), total - sent), 0); if (r <= 0) break; sent += r; }
  char k; recv(c, &k, 1, MSG_WAITALL);
  t = now() - t0;
  printf("tcp loopback 1 stream 2GB: %.2f GB/s\n", total / t / 1e9);
  t0 = now();
  for (int i = 0; i < 20000; i++) { char ch = 'x'; send(c, &ch, 1, 0); recv(c, &ch, 1, MSG_WAITALL); }
  t = now() - t0;
  printf("tcp loopback pingpong 1B: one-way %.2f us\n", t / 20000 / 2 * 1e6);
  srv.join(); close(c);
  // thread pingpong via atomic
  std::atomic<int> flag{0};
  std::thread th([&] { for (int i = 0; i < 200000; i++) { while (flag.load() != 2 * i + 1) {} flag.store(2 * i + 2); } });
  t0 = now();
  for (int i = 0; i < 200000; i++) { flag.store(2 * i + 1); while (flag.load() != 2 * i + 2) {} }
  t = now() - t0; th.join();
  printf("shm flag pingpong: one-way %.3f us\n", t / 200000 / 2 * 1e6);
}
