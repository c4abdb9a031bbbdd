// Flight recorder: a ring of a communicator's last N operations (sequence number, call,
// algorithm, bytes, peers, state, timings), written on every operation at the cost of a few
// stores and two time-stamp counter reads, and dumped when an operation times out or fails
// because of a peer, so that a hang or a dead job can be diagnosed after the fact — which
// collective each rank was inside, which ones had completed, and who the peers were.
//
// Phases: Begin() takes the next slot when an operation starts (state "running"), the caller
// fills in what it learns (algorithm, peers), Complete() stamps the end and the result; a
// failure that leaves the communicator unusable calls Dump(). Not thread-safe by itself: the
// communicator writes it only under its exec_mu (one operation at a time).
//
// Settings: WEFT_FLIGHT_RECORDER = entries kept per communicator (0 = off; default 64);
// WEFT_DEBUG_FILE = where dumps go instead of stderr, with %r (rank), %h (host), %p (pid)
// expanded as NCCL_DEBUG_FILE does; a pattern without %r or %p gets ".<rank>" appended so
// that the ranks of one job never write one file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "weft/weft.h"

namespace weft {

enum class FlightState : uint8_t { kRunning, kDone, kFailed };

struct FlightEntry {
  static constexpr int kMaxPeers = 6;  // a ring has 2, a tree 3; more are counted, not listed
  uint64_t seq = 0;                     // the communicator's collective sequence (0: send/recv)
  const char* call = "";                // "allreduce", "send/recv" (static strings)
  const std::string* algorithm = nullptr;  // registry entries live for the process
  uint64_t bytes = 0;                   // as nccl-tests' size column counts them
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;
  int root = -1;
  int npeers = 0;                       // distinct peers of this rank's part
  int peers[kMaxPeers] = {};
  FlightState state = FlightState::kRunning;
  weftResult_t code = weftSuccess;      // the result once completed
  int64_t start_ticks = 0, end_ticks = 0;  // flight_recorder.cc NowTicks (TSC on x86-64)
};

class FlightRecorder {
 public:
  // capacity 0 disables recording (Begin returns nullptr).
  explicit FlightRecorder(size_t capacity);
  // Reads WEFT_FLIGHT_RECORDER once per process.
  FlightRecorder();

  bool enabled() const { return !ring_.empty(); }
  // The slot for a starting operation, state running, start time stamped; nullptr when off.
  FlightEntry* Begin(uint64_t seq, const char* call, uint64_t bytes);
  // Stamps the end and the result of the entry Begin returned (nullptr is ignored).
  void Complete(FlightEntry* entry, const Status& result);
  // Copies peers (distinct ranks, as DistinctPeers returns them) into the entry.
  static void SetPeers(FlightEntry* entry, const std::vector<int>& peers);

  // The dump: a header naming rank, pid, host and why, then the entries oldest first.
  std::string Format(int rank, int nranks, const std::string& why) const;
  // Writes Format() to WEFT_DEBUG_FILE (expanded for this rank) or stderr. Never fails the
  // caller: an unwritable file falls back to stderr with a note.
  void Dump(int rank, int nranks, const std::string& why) const;

  uint64_t total() const { return total_; }
  size_t capacity() const { return ring_.size(); }

 private:
  std::vector<FlightEntry> ring_;
  uint64_t total_ = 0;  // entries ever begun; the newest is at (total_ - 1) % capacity
  size_t next_ = 0;     // == total_ % capacity, kept as a wrapping index: no division per call
};

// The distinct peers one rank's schedule talks to, in order of first use (computed once per
// plan, so recording costs a copy of a few ints per call).
std::vector<int> DistinctPeers(const RankSchedule& rs);

// WEFT_FLIGHT_RECORDER: entries per communicator (0 off, default 64, at most 1<<20), read once
// through the settings table; a bad value keeps the default here (ValidateSettings reports it).
size_t FlightRecorderCapacityFromEnv();

// Expands a WEFT_DEBUG_FILE pattern: %r rank, %h host name, %p pid, %% a percent sign; a
// pattern naming neither %r nor %p gets "." + rank appended (one file per rank).
std::string ExpandDebugFilePattern(const std::string& pattern, int rank, long pid,
                                   const std::string& host);

}  // namespace weft
