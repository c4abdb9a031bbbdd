// Records text format (see records.h).
#include "topo/records.h"

#include "common/settings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace weft {

Record& Record::Set(const std::string& key, const std::string& value) {
  for (auto& f : fields)
    if (f.first == key) { f.second = value; return *this; }
  fields.emplace_back(key, value);
  return *this;
}
Record& Record::Set(const std::string& key, int64_t value) { return Set(key, std::to_string(value)); }
Record& Record::Set(const std::string& key, double value) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", value);  // 9 digits: survives a round trip of our constants
  return Set(key, std::string(buf));
}
bool Record::Has(const std::string& key) const {
  for (const auto& f : fields)
    if (f.first == key) return true;
  return false;
}
std::string Record::Get(const std::string& key, const std::string& fallback) const {
  for (const auto& f : fields)
    if (f.first == key) return f.second;
  return fallback;
}
StatusOr<int64_t> Record::GetInt(const std::string& key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  std::string v = Get(key);
  char* end = nullptr;
  errno = 0;
  long long x = strtoll(v.c_str(), &end, 10);
  // The whole value must be the number: a decoded value may hold a NUL (%00), where the C
  // parse stops, and "\0garbage" must not read as 0 (a saved file would then reload to
  // something else: fuzz/crashes/topology_file-save-reload-digest-differs).
  if (v.empty() || end != v.c_str() + v.size() || errno != 0)
    return InvalidArgument("record '" + kind + "': field " + key + "='" + PercentEncode(v) +
                           "' is not an integer");
  return static_cast<int64_t>(x);
}
StatusOr<double> Record::GetDouble(const std::string& key, double fallback) const {
  if (!Has(key)) return fallback;
  std::string v = Get(key);
  char* end = nullptr;
  double x = strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x))  // NUL: see GetInt
    return InvalidArgument("record '" + kind + "': field " + key + "='" + PercentEncode(v) +
                           "' is not a number");
  return x;
}
std::string Record::ToLine() const {
  std::string line = kind;
  for (const auto& f : fields) line += " " + f.first + "=" + PercentEncode(f.second);
  return line;
}

std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c == '=' || c == '#' || c >= 0x7f) {
      char buf[4];
      snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}
std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(strtol(s.substr(i + 1, 2).c_str(), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

StatusOr<std::vector<Record>> ParseRecords(const std::string& text, const std::string& origin) {
  std::vector<Record> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::istringstream words(line);
    std::string word;
    Record rec;
    while (words >> word) {
      if (rec.kind.empty()) {
        if (word[0] == '#') break;
        rec.kind = word;
        continue;
      }
      size_t eq = word.find('=');
      if (eq == std::string::npos || eq == 0)
        return InvalidArgument(origin + ":" + std::to_string(lineno) + ": expected key=value, got '" +
                               ShownValue(word) + "'");
      rec.fields.emplace_back(word.substr(0, eq), PercentDecode(word.substr(eq + 1)));
    }
    if (!rec.kind.empty()) out.push_back(std::move(rec));
  }
  return out;
}

std::string FormatRecords(const std::vector<Record>& records) {
  std::string out;
  for (const Record& r : records) out += r.ToLine() + "\n";
  return out;
}

StatusOr<std::string> ReadTextFile(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return SystemError("cannot open '" + ShownValue(path) + "': " + strerror(errno));
  // Read at most max_bytes + 1: a device (/dev/zero, /dev/urandom) or a huge file named by
  // mistake fails here instead of filling memory.
  std::string text;
  char buf[65536];
  while (text.size() <= max_bytes && f) {
    f.read(buf, static_cast<std::streamsize>(std::min(sizeof(buf), max_bytes + 1 - text.size())));
    text.append(buf, static_cast<size_t>(f.gcount()));
  }
  if (text.size() > max_bytes)
    return InvalidArgument("'" + ShownValue(path) + "' is larger than " +
                           std::to_string(max_bytes) + " bytes: not a weft text file");
  if (f.bad()) return SystemError("cannot read '" + ShownValue(path) + "'");
  return text;
}
Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return SystemError("cannot create '" + path + "': " + strerror(errno));
  f << text;
  f.close();
  if (!f) return SystemError("cannot write '" + path + "': " + strerror(errno));
  return OkStatus();
}

uint64_t Fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

StatusOr<size_t> ParseSize(const std::string& s) {
  if (s == "inf") return static_cast<size_t>(-1);
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s.c_str(), &end, 10);
  if (s.empty() || end == s.c_str() || errno != 0 || s[0] == '-' ||
      s.find('\0') != std::string::npos)  // a NUL would end the parse early: see GetInt
    return InvalidArgument("size '" + PercentEncode(s) +
                           "' is not a number (examples: 0, 512, 64K, 1M, 2G, inf)");
  std::string suffix(end);
  unsigned long long mult = 1;
  if (suffix == "" || suffix == "B") mult = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KB") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MB") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GB") mult = 1ull << 30;
  else if (suffix == "T" || suffix == "t" || suffix == "TB") mult = 1ull << 40;
  else return InvalidArgument("size '" + s + "' has an unknown suffix '" + suffix + "'");
  return static_cast<size_t>(v * mult);
}

std::string FormatSize(size_t bytes) {
  if (bytes == static_cast<size_t>(-1)) return "inf";
  const char* suffixes[] = {"", "K", "M", "G", "T"};
  int i = 0;
  size_t v = bytes;
  while (i < 4 && v >= 1024 && v % 1024 == 0) { v /= 1024; ++i; }
  return std::to_string(v) + suffixes[i];
}

}  // namespace weft
