// WEFT_ALGO parser (grammar in algo_override.h).
#include "algorithms/algo_override.h"
#include "common/settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "algorithms/registry.h"

namespace weft {
namespace {

const Collective kAllCollectives[] = {
    Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
    Collective::kBroadcast, Collective::kReduce,    Collective::kAllToAll,
    Collective::kAllToAllv, Collective::kBarrier,   Collective::kAllGatherV,
    Collective::kReduceScatterV};

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

bool ParseCollective(const std::string& name, Collective* out) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  if (n == "reduce_scatter") n = "reducescatter";
  if (n == "all_reduce") n = "allreduce";
  if (n == "all_gather") n = "allgather";
  if (n == "all_to_all") n = "alltoall";
  for (Collective c : kAllCollectives)
    if (n == CollectiveName(c)) { *out = c; return true; }
  return false;
}

// "0", "512", "64K", "1M", "2G", "inf" -> bytes (inf -> SIZE_MAX).
bool ParseSize(const std::string& text, size_t* out) {
  std::string s = Trim(text);
  if (s == "inf" || s == "INF") { *out = static_cast<size_t>(-1); return true; }
  if (s.empty()) return false;
  size_t i = 0;
  unsigned long long v = 0;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) {
    unsigned long long d = static_cast<unsigned long long>(s[i] - '0');
    if (v > (~0ULL - d) / 10) return false;
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) return false;
  unsigned long long mult = 1;
  if (i < s.size()) {
    char c = static_cast<char>(toupper(static_cast<unsigned char>(s[i])));
    if (c == 'K') mult = 1ULL << 10;
    else if (c == 'M') mult = 1ULL << 20;
    else if (c == 'G') mult = 1ULL << 30;
    else return false;
    ++i;
    if (i < s.size() && (s[i] == 'B' || s[i] == 'b')) ++i;  // "64KB"
    if (i != s.size()) return false;
  }
  if (v > ~0ULL / mult) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

std::string KnownAlgorithms(Collective c) {
  std::string names;
  for (const AlgorithmInfo& a : AllAlgorithms())
    if (a.collective == c) names += (names.empty() ? "" : ", ") + a.name;
  return names.empty() ? "(none)" : names;
}

}  // namespace

const std::string* AlgoOverrides::Lookup(Collective collective, size_t bytes) const {
  for (const AlgoRule& r : rules)
    if (r.collective == collective && bytes >= r.min_bytes && bytes < r.max_bytes) return &r.algorithm;
  return nullptr;
}

StatusOr<AlgoOverrides> ParseAlgoOverrides(const std::string& spec) {
  AlgoOverrides out;
  for (const std::string& raw_rule : Split(spec, ';')) {
    std::string rule = Trim(raw_rule);
    if (rule.empty()) continue;  // tolerate "a;b;" and empty specs
    size_t colon = rule.find(':');
    if (colon == std::string::npos)
      return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "' needs COLLECTIVE:ALGORITHM");
    std::string coll_name = Trim(rule.substr(0, colon));
    Collective coll;
    if (!ParseCollective(coll_name, &coll))
      return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': unknown collective '" + ShownValue(coll_name) +
                          "' (allreduce, allgather, reducescatter, broadcast, reduce, alltoall, "
                          "alltoallv, barrier)");
    std::vector<AlgoRule> mine;
    for (const std::string& raw_choice : Split(rule.substr(colon + 1), ',')) {
      std::string choice = Trim(raw_choice);
      AlgoRule r;
      r.collective = coll;
      size_t c2 = choice.find(':');
      std::string name = choice;
      if (c2 != std::string::npos) {
        std::string range = Trim(choice.substr(0, c2));
        name = choice.substr(c2 + 1);
        size_t dash = range.find('-');
        if (dash == std::string::npos || !ParseSize(range.substr(0, dash), &r.min_bytes) ||
            !ParseSize(range.substr(dash + 1), &r.max_bytes))
          return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': malformed size range '" + ShownValue(range) +
                              "' (want LO-HI such as 0-64K or 1M-inf)");
        if (r.min_bytes >= r.max_bytes)
          return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': empty size range '" + ShownValue(range) +
                              "' (LO must be below HI)");
      }
      name = Trim(name);
      if (name.empty())
        return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': missing algorithm name");
      if (FindAlgorithm(coll, name) == nullptr)
        return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': unknown algorithm '" + ShownValue(name) +
                            "' for " + CollectiveName(coll) + " (known: " +
                            KnownAlgorithms(coll) + ")");
      r.algorithm = name;
      for (const AlgoRule& other : out.rules)
        if (other.collective == coll && r.min_bytes < other.max_bytes && other.min_bytes < r.max_bytes)
          return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': size range of '" + ShownValue(name) +
                              "' overlaps an earlier range for " + CollectiveName(coll));
      for (const AlgoRule& other : mine)
        if (r.min_bytes < other.max_bytes && other.min_bytes < r.max_bytes)
          return InvalidUsage("WEFT_ALGO rule '" + ShownValue(rule) + "': size ranges overlap");
      mine.push_back(r);
    }
    out.rules.insert(out.rules.end(), mine.begin(), mine.end());
  }
  return out;
}

StatusOr<AlgoOverrides> AlgoOverridesFromEnv() {
  const std::string spec = SettingText("WEFT_ALGO");
  if (spec.empty()) return AlgoOverrides();
  return ParseAlgoOverrides(spec);
}

}  // namespace weft
