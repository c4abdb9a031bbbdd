// WEFT_DEBUG logging to stderr (see log.h).
#include "common/log.h"
#include "common/settings.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace weft {
namespace {
thread_local int t_log_rank = -1;

// A bad value logs nothing here; ValidateSettings() fails communicator creation on it.
LogLevel ParseLevel(const StatusOr<std::string>& v) {
  if (!v.ok()) return LogLevel::kNone;
  if (*v == "warn") return LogLevel::kWarn;
  if (*v == "info") return LogLevel::kInfo;
  if (*v == "trace") return LogLevel::kTrace;
  return LogLevel::kNone;
}
}  // namespace

LogLevel CurrentLogLevel() {
  static const LogLevel level = ParseLevel(SettingChoice("WEFT_DEBUG", "off"));
  return level;
}

void SetLogRank(int rank) { t_log_rank = rank; }

void LogMessage(LogLevel level, const char* file, int line, const char* fmt, ...) {
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  char body[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof(body), fmt, ap);
  va_end(ap);
  const char* base = strrchr(file, '/');
  // One fprintf per line so that lines of concurrent ranks do not interleave mid-line.
  fprintf(stderr, "%s:%d:%d [%d] weft %s %s:%d %s\n", host, static_cast<int>(getpid()),
          0, t_log_rank, names[static_cast<int>(level)], base ? base + 1 : file, line, body);
}

}  // namespace weft
