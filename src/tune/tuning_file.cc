// Tuning file parser (see tuning_file.h).
#include "tune/tuning_file.h"
#include "common/settings.h"

#include <cstdlib>
#include <sstream>

#include "algorithms/registry.h"
#include "topo/records.h"

namespace weft {

bool ParseCollectiveName(const std::string& name, Collective* out) {
  for (int i = 0; i <= static_cast<int>(kLastCollective); ++i) {
    Collective c = static_cast<Collective>(i);
    if (name == CollectiveName(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

const TuningRule* TuningTable::Lookup(Collective c, size_t bytes) const {
  for (const TuningRule& r : rules)
    if (r.collective == c && bytes >= r.min_bytes && bytes < r.max_bytes) return &r;
  return nullptr;
}

StatusOr<TuningTable> ParseTuningTable(const std::string& text, const std::string& origin, bool check_registry) {
  TuningTable table;
  table.origin = origin;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    std::string word;
    while (words >> word) w.push_back(word);
    if (w.empty()) continue;
    std::string where = origin + ":" + std::to_string(lineno) + ": ";
    if (w.size() != 5)
      return InvalidArgument(where + "expected 'COLLECTIVE LO-HI ALGORITHM CHUNK CHANNELS', got " +
                             std::to_string(w.size()) + " field(s) in '" + ShownValue(line) + "'");
    TuningRule rule;
    rule.line = lineno;
    if (!ParseCollectiveName(w[0], &rule.collective))
      return InvalidArgument(where + "unknown collective '" + w[0] + "'");
    size_t dash = w[1].find('-');
    if (dash == std::string::npos) return InvalidArgument(where + "size range '" + w[1] + "' is not LO-HI");
    auto lo = ParseSize(w[1].substr(0, dash));
    auto hi = ParseSize(w[1].substr(dash + 1));
    if (!lo.ok()) return lo.status().WithContext(where.substr(0, where.size() - 2));
    if (!hi.ok()) return hi.status().WithContext(where.substr(0, where.size() - 2));
    if (lo.value() >= hi.value()) return InvalidArgument(where + "empty size range '" + w[1] + "'");
    rule.min_bytes = lo.value();
    rule.max_bytes = hi.value();
    rule.algorithm = w[2];
    if (check_registry && FindAlgorithm(rule.collective, rule.algorithm) == nullptr) {
      std::string known;
      for (const AlgorithmInfo& a : AllAlgorithms())
        if (a.collective == rule.collective) known += " " + a.name;
      return InvalidArgument(where + "no algorithm '" + rule.algorithm + "' for " + w[0] + " (known:" +
                             (known.empty() ? " none" : known) + ")");
    }
    auto chunk = ParseSize(w[3]);
    if (!chunk.ok() || chunk.value() == static_cast<size_t>(-1))
      return InvalidArgument(where + "chunk '" + w[3] + "' is not a size in bytes");
    rule.chunk_bytes = chunk.value();
    char* end = nullptr;
    long ch = strtol(w[4].c_str(), &end, 10);
    if (*end || ch < 1 || ch > 64) return InvalidArgument(where + "channels '" + w[4] + "' must be 1..64");
    rule.channels = static_cast<int>(ch);
    table.rules.push_back(rule);
  }
  return table;
}

StatusOr<TuningTable> LoadTuningFile(const std::string& path) {
  WEFT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseTuningTable(text, path, /*check_registry=*/true);
}

}  // namespace weft
