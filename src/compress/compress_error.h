// Error reporting for the compression API (include/weft/weft_compress.h).
//
// weftGetLastError() reads a thread-local string private to src/core/api.cc. Until api.cc
// exports the hook declared here (see the report of issue 14), the compression entry points
// keep their own thread-local message (LastCompressionError) and forward it through the hook
// when the hook exists: it is declared weak, so it is simply absent today and picked up,
// without a change here, once src/core defines it.
#pragma once

#include <string>

#include "common/status.h"

namespace weft {
// To be defined in src/core/api.cc: `void SetLastErrorMessage(const std::string& m)
// { t_last_error = m; }`. Weak: may be missing (its address is then null).
void SetLastErrorMessage(const std::string& message) __attribute__((weak));
}  // namespace weft

namespace weft::compress {

// Records a failure (message for weftGetLastError when the hook exists, and for
// LastCompressionError always; WEFT_WARN to stderr) and returns its code.
weftResult_t Report(const Status& status);

// The message of the last failing compression call on this thread ("" if none).
const char* LastCompressionError();

// Whether weftGetLastError() sees compression errors (the src/core hook is linked in).
bool LastErrorHookPresent();

}  // namespace weft::compress
