// Logging: stderr only, and only when WEFT_DEBUG asks for it (WARN, INFO, TRACE).
// The library never writes to stdout.
#pragma once

#include <cstdarg>

namespace weft {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Level from WEFT_DEBUG, read once.
LogLevel CurrentLogLevel();
// Sets the rank shown in the prefix of this thread's log lines (-1 = unknown).
void SetLogRank(int rank);
void LogMessage(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace weft

#define WEFT_LOG(level, ...)                                                    \
  do {                                                                          \
    if (::weft::CurrentLogLevel() >= (level))                                   \
      ::weft::LogMessage((level), __FILE__, __LINE__, __VA_ARGS__);             \
  } while (0)
#define WEFT_WARN(...) WEFT_LOG(::weft::LogLevel::kWarn, __VA_ARGS__)
#define WEFT_INFO(...) WEFT_LOG(::weft::LogLevel::kInfo, __VA_ARGS__)
#define WEFT_TRACE(...) WEFT_LOG(::weft::LogLevel::kTrace, __VA_ARGS__)
