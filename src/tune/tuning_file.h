// Tuning file (WEFT_TUNING_FILE): decisions measured by sweeps, replacing the model's.
//
// One rule per line, whitespace-separated; '#' starts a comment:
//     COLLECTIVE  LO-HI  ALGORITHM  CHUNK  CHANNELS
//     allreduce   0-64K  recursive_doubling  0  1
//     allreduce   64K-inf  ring  512K  2
// LO-HI are nccl-tests sizes in bytes (LO inclusive, HI exclusive; K/M/G suffixes, "inf");
// CHUNK is bytes per chunk (0 = no pipelining). The first matching rule wins. Algorithms are
// checked against the registry when the file is loaded.
#pragma once

#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"

namespace weft {

struct TuningRule {
  Collective collective = Collective::kAllReduce;
  size_t min_bytes = 0;
  size_t max_bytes = static_cast<size_t>(-1);
  std::string algorithm;
  size_t chunk_bytes = 0;
  int channels = 1;
  int line = 0;  // for messages
};

struct TuningTable {
  std::string origin;
  std::vector<TuningRule> rules;
  const TuningRule* Lookup(Collective c, size_t bytes) const;
};

bool ParseCollectiveName(const std::string& name, Collective* out);
// `check_registry`: unknown algorithm names are errors (listing the known ones).
StatusOr<TuningTable> ParseTuningTable(const std::string& text, const std::string& origin, bool check_registry);
StatusOr<TuningTable> LoadTuningFile(const std::string& path);

}  // namespace weft
