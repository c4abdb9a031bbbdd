// Settings: every WEFT_* environment variable weft reads, in one table (Core v2, item 6).
//
// Each variable has one row in settings.cc: its name, what kind of value it takes, its default
// and one line of documentation (the README's table says the same; tests/settings_test.cc
// checks that every WEFT_* name in the sources has a row and every row is in the README).
//
// One rule for bad values: a value that does not parse is an InvalidArgument naming the
// variable and the value ("WEFT_SPIN_US=fast: expected an integer in [0, 10000000]"), never
// silently replaced by the default. The typed readers below return that error; code that cannot
// return an error (the log level, the kernel ISA choice) uses the Or-default forms, and
// ValidateSettings(), run when a communicator is created, fails creation on the first bad value
// so that such a value never goes unnoticed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft {

enum class SettingKind {
  kFlag,     // 0 or 1 (also off/on, false/true, no/yes)
  kInt,      // an integer in [min, max]
  kBytes,    // a byte count, optionally with K/M/G (powers of 1024)
  kSeconds,  // a non-negative number of seconds (fractions allowed)
  kChoice,   // one of the words in `choices` (case-insensitive)
  kText,     // free text checked by its own parser where it is used (paths, specs, addresses)
};

struct SettingInfo {
  const char* name;
  SettingKind kind;
  const char* default_text;  // as documented ("off", "300", "1 MiB", "first non-loopback")
  const char* doc;           // one line
  int64_t min = 0;           // kInt and kBytes: the smallest value accepted
  int64_t max = 0;           // kInt
  const char* choices = "";  // kChoice: words separated by '|'
};

// Every WEFT_* variable weft (library, tools) reads.
const std::vector<SettingInfo>& AllSettings();
// The row for `name`, or nullptr.
const SettingInfo* FindSetting(const std::string& name);

// The raw value: empty when unset or empty.
std::string SettingText(const char* name);

// Typed readers: unset or empty -> `fallback`; a bad value -> InvalidArgument naming it.
// `name` must have a row of the matching kind (a missing row is an InternalError: a weft bug).
StatusOr<bool> SettingFlag(const char* name, bool fallback);
StatusOr<int64_t> SettingInt(const char* name, int64_t fallback);
StatusOr<size_t> SettingBytes(const char* name, size_t fallback);
StatusOr<double> SettingSeconds(const char* name, double fallback);
StatusOr<std::string> SettingChoice(const char* name, const std::string& fallback);  // lower-case

// The same, falling back on a bad value too (ValidateSettings reports it at creation).
bool SettingFlagOr(const char* name, bool fallback);
int64_t SettingIntOr(const char* name, int64_t fallback);
size_t SettingBytesOr(const char* name, size_t fallback);
double SettingSecondsOr(const char* name, double fallback);

// `value` cut to `max_chars` for an error message (a pasted 100 KB value is not echoed whole).
std::string ShownValue(const std::string& value, size_t max_chars = 80);

// Checks every variable of the table that is set; the first bad value's error, else OK.
Status ValidateSettings();

// WEFT_* variables set in the environment that have no row (likely typos, e.g. WEFT_ALOG).
std::vector<std::string> UnknownSettingsInEnvironment();

}  // namespace weft
