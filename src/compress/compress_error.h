// Error reporting for the compression API (include/weft/weft_compress.h).
//
// weftGetLastError() reads a thread-local string owned by src/api/api.cc; the compression
// entry points set it through SetLastErrorMessage (defined there) and also keep their own
// copy (LastCompressionError), which tests read without going through the C API.
#pragma once

#include <string>

#include "common/status.h"

namespace weft {
// Sets what weftGetLastError() returns on this thread (defined in src/api/api.cc).
void SetLastErrorMessage(const std::string& message);
}  // namespace weft

namespace weft::compress {

// Records a failure (message for weftGetLastError when the hook exists, and for
// LastCompressionError always; WEFT_WARN to stderr) and returns its code.
weftResult_t Report(const Status& status);

// The message of the last failing compression call on this thread ("" if none).
const char* LastCompressionError();

}  // namespace weft::compress
