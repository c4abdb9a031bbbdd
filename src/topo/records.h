// Records: the small line-oriented text format used for rank summaries, topology files,
// link-table overrides and tuning files.
//
// One record per line: a kind word, then key=value fields separated by blanks:
//     host id=node7|3f2a..|4026531840 name=node7 packages=2 numa=2 cores=64
// '#' starts a comment line; blank lines are skipped. Values are percent-encoded (space, '%',
// '=', '#', newline) so any string survives a round trip. The format is deliberately trivial:
// it must be diffable, hand-editable, and parsed identically on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft {

struct Record {
  std::string kind;
  std::vector<std::pair<std::string, std::string>> fields;  // in file order

  Record() = default;
  explicit Record(std::string k) : kind(std::move(k)) {}
  Record& Set(const std::string& key, const std::string& value);
  Record& Set(const std::string& key, int64_t value);
  Record& Set(const std::string& key, double value);
  bool Has(const std::string& key) const;
  // The value of `key`, or `fallback` when absent.
  std::string Get(const std::string& key, const std::string& fallback = "") const;
  // Typed getters: error names the record kind, key and bad value.
  StatusOr<int64_t> GetInt(const std::string& key, int64_t fallback) const;
  StatusOr<double> GetDouble(const std::string& key, double fallback) const;
  std::string ToLine() const;
};

// Parses text into records; `origin` (a file name) prefixes error messages with line numbers.
StatusOr<std::vector<Record>> ParseRecords(const std::string& text, const std::string& origin);
std::string FormatRecords(const std::vector<Record>& records);

std::string PercentEncode(const std::string& s);
std::string PercentDecode(const std::string& s);

// Whole-file helpers (errors name the path and errno text).
// The file's contents; a file over `max_bytes` (or an endless device) is an InvalidArgument.
StatusOr<std::string> ReadTextFile(const std::string& path, size_t max_bytes = size_t{16} << 20);
Status WriteTextFile(const std::string& path, const std::string& text);

// Stable 64-bit FNV-1a, used for digests that every rank must compute identically.
uint64_t Fnv1a(const std::string& s, uint64_t seed = 1469598103934665603ull);

// Parses sizes like "0", "512", "64K", "1M", "2G" (powers of 1024) or "inf".
StatusOr<size_t> ParseSize(const std::string& s);
// Formats bytes nccl-tests style compactly: 1024 -> "1K", 1536 -> "1536".
std::string FormatSize(size_t bytes);

}  // namespace weft
