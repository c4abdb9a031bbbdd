// Flight recorder (see flight_recorder.h): the per-communicator ring of recent operations,
// its text dump, and where the dump goes (WEFT_DEBUG_FILE or stderr).
#include "core/flight_recorder.h"

#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/settings.h"
#include "kernels/dtype.h"

namespace weft {
namespace {

constexpr size_t kDefaultEntries = 64;
constexpr size_t kMaxEntries = size_t{1} << 20;

int64_t NowNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Entries are stamped in ticks: the TSC on x86-64 (about 10 ns to read in a VM, against 25
// for clock_gettime; two stamps per operation are most of the recorder's cost), nanoseconds
// of CLOCK_MONOTONIC elsewhere. Ticks become nanoseconds only when a dump is formatted, by
// the rate measured between the first recorder's creation and the dump.
int64_t NowTicks() {
#if defined(__x86_64__)
  return static_cast<int64_t>(__rdtsc());
#else
  return NowNs(CLOCK_MONOTONIC);
#endif
}

struct TickOrigin {
  int64_t ticks, mono_ns;
};
const TickOrigin& Origin() {
  static const TickOrigin origin{NowTicks(), NowNs(CLOCK_MONOTONIC)};
  return origin;
}

// Nanoseconds per tick, from the origin to now (1 where ticks are nanoseconds already, or
// when too little time has passed to measure the rate).
double NsPerTick(int64_t ticks_now, int64_t mono_now) {
#if defined(__x86_64__)
  const int64_t dt = ticks_now - Origin().ticks, dns = mono_now - Origin().mono_ns;
  if (dt > 0 && dns > 1000000) return static_cast<double>(dns) / static_cast<double>(dt);
  return 1.0 / 2.5;  // a guess (2.5 GHz) for a dump within 1 ms of the first communicator
#else
  return 1.0;
#endif
}

const char* StateName(const FlightEntry& e) {
  switch (e.state) {
    case FlightState::kRunning: return "RUNNING";
    case FlightState::kDone: return "done";
    case FlightState::kFailed: return "FAILED";
  }
  return "?";
}

// "2026-11-23T16:40:01.123456Z" for a CLOCK_REALTIME time in ns.
std::string WallTime(int64_t realtime_ns) {
  time_t secs = static_cast<time_t>(realtime_ns / 1000000000);
  tm utc;
  gmtime_r(&secs, &utc);
  char buf[64];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &utc);
  snprintf(buf + n, sizeof(buf) - n, ".%06" PRId64 "Z", (realtime_ns % 1000000000) / 1000);
  return buf;
}

bool IsReductionCall(const char* call) {
  return std::strcmp(call, "allreduce") == 0 || std::strcmp(call, "reduce") == 0 ||
         std::strcmp(call, "reducescatter") == 0;
}

std::string PeersText(const FlightEntry& e) {
  if (e.npeers == 0) return "-";
  std::string s;
  for (int i = 0; i < std::min(e.npeers, FlightEntry::kMaxPeers); ++i)
    s += (i ? "," : "") + std::to_string(e.peers[i]);
  if (e.npeers > FlightEntry::kMaxPeers)
    s += ",...(" + std::to_string(e.npeers) + " peers)";
  return s;
}

// One entry as a line of key=value fields (greppable, and readable side by side across ranks:
// the wall-clock start lets one line up the ranks of a job).
std::string EntryLine(const FlightEntry& e, int64_t ticks_now, double ns_per_tick,
                      int64_t real_now) {
  const int64_t end = e.state == FlightState::kRunning ? ticks_now : e.end_ticks;
  std::string line = "  seq=" + std::to_string(e.seq) + " call=" + e.call +
                     " algorithm=" + (e.algorithm ? *e.algorithm : std::string("-")) +
                     " bytes=" + std::to_string(e.bytes) + " dtype=" + DataTypeName(e.dtype);
  if (IsReductionCall(e.call)) line += std::string(" op=") + RedOpName(e.op);
  if (e.root >= 0) line += " root=" + std::to_string(e.root);
  line += " peers=" + PeersText(e) + " state=" + StateName(e);
  if (e.state == FlightState::kFailed) line += std::string("(") + weftGetErrorString(e.code) + ")";
  const int64_t age_ns = static_cast<int64_t>((ticks_now - e.start_ticks) * ns_per_tick);
  char timing[160];
  snprintf(timing, sizeof(timing), " started=%s duration_ms=%.3f%s",
           WallTime(real_now - age_ns).c_str(), (end - e.start_ticks) * ns_per_tick / 1e6,
           e.state == FlightState::kRunning ? " (still running)" : "");
  return line + timing + "\n";
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

}  // namespace

size_t FlightRecorderCapacityFromEnv() {
  // Through the settings table (src/common/settings.h): a bad value falls back to the default
  // here and fails communicator creation in ValidateSettings, naming the variable and value.
  static const size_t capacity = static_cast<size_t>(
      std::clamp<int64_t>(SettingIntOr("WEFT_FLIGHT_RECORDER", kDefaultEntries), 0,
                          static_cast<int64_t>(kMaxEntries)));
  return capacity;
}

std::string ExpandDebugFilePattern(const std::string& pattern, int rank, long pid,
                                   const std::string& host) {
  std::string out;
  bool per_rank = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'r') { out += std::to_string(rank); per_rank = true; }
    else if (c == 'p') { out += std::to_string(pid); per_rank = true; }
    else if (c == 'h') out += host;
    else if (c == '%') out += '%';
    else { out += '%'; out += c; }  // unknown: kept as written
  }
  if (!per_rank) out += "." + std::to_string(rank);
  return out;
}

FlightRecorder::FlightRecorder(size_t capacity) : ring_(capacity) { Origin(); }
FlightRecorder::FlightRecorder() : FlightRecorder(FlightRecorderCapacityFromEnv()) {}

FlightEntry* FlightRecorder::Begin(uint64_t seq, const char* call, uint64_t bytes) {
  if (ring_.empty()) return nullptr;
  FlightEntry& e = ring_[next_];
  ++total_;
  if (++next_ == ring_.size()) next_ = 0;
  e.seq = seq;
  e.call = call;
  e.algorithm = nullptr;
  e.bytes = bytes;
  e.dtype = weftUint8;
  e.op = weftSum;
  e.root = -1;
  e.npeers = 0;
  e.state = FlightState::kRunning;
  e.code = weftSuccess;
  e.start_ticks = NowTicks();
  e.end_ticks = 0;
  return &e;
}

void FlightRecorder::Complete(FlightEntry* entry, const Status& result) {
  if (entry == nullptr) return;
  entry->end_ticks = NowTicks();
  entry->code = result.code();
  entry->state = result.ok() ? FlightState::kDone : FlightState::kFailed;
}

void FlightRecorder::SetPeers(FlightEntry* entry, const std::vector<int>& peers) {
  if (entry == nullptr) return;
  entry->npeers = static_cast<int>(peers.size());
  const size_t listed = std::min<size_t>(peers.size(), FlightEntry::kMaxPeers);
  std::copy(peers.begin(), peers.begin() + listed, entry->peers);
}

std::vector<int> DistinctPeers(const RankSchedule& rs) {
  std::vector<int> peers;
  std::vector<bool> seen;  // by rank: linear in the steps even for all-to-all on many ranks
  for (const Step& s : rs.steps) {
    if (s.peer < 0) continue;
    if (static_cast<size_t>(s.peer) >= seen.size()) seen.resize(s.peer + 1, false);
    if (seen[s.peer]) continue;
    seen[s.peer] = true;
    peers.push_back(s.peer);
  }
  return peers;
}

std::string FlightRecorder::Format(int rank, int nranks, const std::string& why) const {
  const int64_t ticks_now = NowTicks(), mono_now = NowNs(CLOCK_MONOTONIC);
  const int64_t real_now = NowNs(CLOCK_REALTIME);
  const double ns_per_tick = NsPerTick(ticks_now, mono_now);
  const size_t shown = std::min<uint64_t>(total_, ring_.size());
  std::string out = "weft flight recorder: rank " + std::to_string(rank) + " of " +
                    std::to_string(nranks) + " (pid " + std::to_string(getpid()) + ", host " +
                    HostName() + ") at " + WallTime(real_now) + ": " + why + "\n";
  out += "last " + std::to_string(shown) + " of " + std::to_string(total_) +
         " operations on this communicator, oldest first:\n";
  for (uint64_t i = total_ - shown; i < total_; ++i)
    out += EntryLine(ring_[i % ring_.size()], ticks_now, ns_per_tick, real_now);
  out += "end of flight recorder (rank " + std::to_string(rank) + ")\n";
  return out;
}

void FlightRecorder::Dump(int rank, int nranks, const std::string& why) const {
  if (ring_.empty()) return;
  const std::string text = Format(rank, nranks, why);
  const std::string pattern = SettingText("WEFT_DEBUG_FILE");
  if (!pattern.empty()) {
    const std::string path = ExpandDebugFilePattern(pattern, rank, getpid(), HostName());
    if (FILE* f = fopen(path.c_str(), "a")) {
      fwrite(text.data(), 1, text.size(), f);
      fclose(f);
      return;
    }
    fprintf(stderr, "weft: cannot write the flight recorder to WEFT_DEBUG_FILE=%s (%s): %s\n",
            path.c_str(), pattern.c_str(), strerror(errno));
  }
  fwrite(text.data(), 1, text.size(), stderr);
  fflush(stderr);
}

}  // namespace weft
