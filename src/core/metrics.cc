// core/metrics.cc: WEFT_METRICS_FILE's writer (core/metrics.h has the line's format).
#include "core/metrics.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "common/settings.h"
#include "kernels/dtype.h"
#include "tune/cost_model.h"

namespace weft {
namespace {

std::string HostName() {
  char host[256] = {};
  return gethostname(host, sizeof(host) - 1) == 0 ? host : "unknown-host";
}

// One stream per expanded file name, line-buffered (a killed job keeps its complete lines).
FILE* StreamFor(int rank) {
  static std::mutex mu;
  static std::map<std::string, FILE*> open;
  const std::string path = ExpandDebugFilePattern(SettingText("WEFT_METRICS_FILE"), rank, getpid(), HostName());
  std::lock_guard<std::mutex> lock(mu);
  auto it = open.find(path);
  if (it != open.end()) return it->second;
  FILE* f = fopen(path.c_str(), "a");
  if (f == nullptr) fprintf(stderr, "weft: cannot write WEFT_METRICS_FILE %s: metrics of rank %d are lost\n", path.c_str(), rank);
  else setvbuf(f, nullptr, _IOLBF, 0);
  open[path] = f;
  return f;
}

// The transports the communicator's peers use ("shm", "tcp", "shm+tcp").
std::string TransportTier(const weftComm* comm) {
  std::set<std::string> names;
  for (const weft::Transport* t : comm->peer_transport)
    if (t != nullptr) names.insert(t->name());
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : "+") + n;
  return s.empty() ? "self" : s;
}

}  // namespace

bool MetricsEnabled() {
  static const bool on = [] {
    const std::string v = SettingText("WEFT_METRICS_FILE");
    return !v.empty() && v != "off" && v != "0";
  }();
  return on;
}

int64_t MetricsNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void RecordCallMetrics(const weftComm* comm, const CollectiveCall& call, uint64_t seq,
                       uint64_t bytes, int64_t ns) {
  FILE* f = StreamFor(comm->rank);
  if (f == nullptr) return;
  const double seconds = ns > 0 ? ns * 1e-9 : 1e-9;
  const double algbw = bytes / seconds / 1e9;
  fprintf(f,
          "{\"comm\":\"%p\",\"rank\":%d,\"nranks\":%d,\"seq\":%llu,\"collective\":\"%s\","
          "\"bytes\":%llu,\"dtype\":\"%s\",\"algorithm\":\"%s\",\"transport\":\"%s\","
          "\"time_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f}\n",
          static_cast<const void*>(comm), comm->rank, comm->nranks, static_cast<unsigned long long>(seq),
          CollectiveName(call.collective), static_cast<unsigned long long>(bytes), DataTypeName(call.dtype),
          comm->last_algorithm != nullptr ? comm->last_algorithm->c_str() : "-", TransportTier(comm).c_str(),
          ns / 1e3, algbw, algbw * BusBandwidthFactor(call.collective, comm->nranks));
}

}  // namespace weft
