// Error reporting for the compression API: see compress_error.h.
#include "compress/compress_error.h"

#include "common/log.h"

namespace weft::compress {
namespace {
thread_local std::string t_last_compression_error;
}  // namespace

weftResult_t Report(const Status& status) {
  if (status.ok()) return weftSuccess;
  t_last_compression_error = status.message();
  SetLastErrorMessage(status.message());
  WEFT_WARN("%s: %s", weftGetErrorString(status.code()), status.message().c_str());
  return status.code();
}

const char* LastCompressionError() { return t_last_compression_error.c_str(); }

}  // namespace weft::compress
