// WEFT_COMPRESSION for plain weftAllReduce: see job_wide_compression.h.
#include "compress/job_wide_compression.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"

namespace weft::compress {
namespace {

const JobWideSettings& Settings() {
  static const JobWideSettings settings = ReadJobWideSettings();
  return settings;
}

// Residuals kept per (comm, recvbuff, count, datatype).
using FeedbackKey = std::tuple<weftComm_t, void*, size_t, int>;
std::mutex g_feedback_mu;
std::map<FeedbackKey, std::vector<float>> g_feedback;

float* ResidualFor(weftComm_t comm, void* recvbuff, size_t count, weftDataType_t datatype) {
  std::lock_guard<std::mutex> lock(g_feedback_mu);
  std::vector<float>& r = g_feedback[FeedbackKey{comm, recvbuff, count, static_cast<int>(datatype)}];
  if (r.size() != count) r.assign(count, 0.0f);
  return r.data();  // stable: map nodes never move, and this entry is never resized again
}

}  // namespace

JobWideSettings ReadJobWideSettings() {
  JobWideSettings s;
  const char* text = std::getenv("WEFT_COMPRESSION");
  if (text == nullptr || *text == '\0') return s;
  s.enabled = true;
  if (weftCompressionParse(text, &s.spec) != weftSuccess)
    s.parse_error = InvalidArgument(std::string("WEFT_COMPRESSION=") + text + ": " +
                                    LastCompressionError());
  if (const char* min = std::getenv("WEFT_COMPRESSION_MIN_BYTES")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(min, &end, 10);
    if (end == min || *end != '\0')
      s.parse_error = InvalidArgument(std::string("WEFT_COMPRESSION_MIN_BYTES=") + min +
                                      " is not a byte count");
    s.min_bytes = static_cast<size_t>(v);
  }
  if (const char* fb = std::getenv("WEFT_COMPRESSION_FEEDBACK")) {
    if (std::string(fb) != "0" && std::string(fb) != "1")
      s.parse_error = InvalidArgument(std::string("WEFT_COMPRESSION_FEEDBACK=") + fb + " is not 0 or 1");
    s.feedback = std::string(fb) != "0";
  }
  return s;
}

bool MaybeRunJobWideCompression(const void* sendbuff, void* recvbuff, size_t count,
                                weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                weftStream_t stream, Status* result) {
  return MaybeRunJobWideCompression(Settings(), sendbuff, recvbuff, count, datatype, op, comm,
                                    stream, result);
}

bool MaybeRunJobWideCompression(const JobWideSettings& s, const void* sendbuff,
                                void* recvbuff, size_t count, weftDataType_t datatype,
                                weftRedOp_t op, weftComm_t comm, weftStream_t stream,
                                Status* result) {
  if (!s.enabled) return false;
  if (datatype != weftFloat32 && datatype != weftBfloat16) return false;
  if (op != weftSum && op != weftAvg) return false;
  if (!s.parse_error.ok()) {
    *result = s.parse_error;
    return true;
  }
  const size_t element = datatype == weftBfloat16 ? 2 : 4;
  if (count * element < s.min_bytes) return false;
  float* residual = s.feedback && recvbuff != nullptr ? ResidualFor(comm, recvbuff, count, datatype) : nullptr;
  *result = RunAllReduceCompressed(sendbuff, recvbuff, count, datatype, op, &s.spec, residual,
                                   comm, stream)
                .WithContext("WEFT_COMPRESSION");
  return true;
}

}  // namespace weft::compress
