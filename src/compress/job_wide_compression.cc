// WEFT_COMPRESSION for plain weftAllReduce: see job_wide_compression.h.
#include "compress/job_wide_compression.h"

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "compress/compression_pays.h"
#include "core/api_internal.h"
#include "core/comm.h"
#include "common/log.h"
#include "common/settings.h"

namespace weft::compress {
namespace {

const JobWideSettings& Settings() {
  static const JobWideSettings settings = ReadJobWideSettings();
  return settings;
}

// Residuals kept per (comm, recvbuff, count, datatype), with what weft knows they hold: only
// weft writes them, so a new one is zero everywhere and, after a call, zero outside its lanes.
using FeedbackKey = std::tuple<weftComm_t, void*, size_t, int>;
struct Feedback {
  std::vector<float> residual;
  KnownResidual known;
};
std::mutex g_feedback_mu;
std::map<FeedbackKey, Feedback> g_feedback;

Feedback* FeedbackFor(weftComm_t comm, void* recvbuff, size_t count, weftDataType_t datatype) {
  std::lock_guard<std::mutex> lock(g_feedback_mu);
  Feedback& f = g_feedback[FeedbackKey{comm, recvbuff, count, static_cast<int>(datatype)}];
  if (f.residual.size() != count) {
    f.residual.assign(count, 0.0f);
    f.known.zero_outside = KnownResidual::kZeroEverywhere;
  }
  return &f;  // stable: map nodes never move, and this entry is never resized again
}

// WEFT_DEBUG=INFO shows each size's decision once per communicator (at most kLoggedDecisions).
void LogFirstDecision(weftComm_t comm, size_t bytes, const CompressionDecision& d) {
  constexpr size_t kLoggedDecisions = 1024;
  static std::mutex mu;
  static std::set<std::pair<weftComm_t, size_t>> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.size() >= kLoggedDecisions || !logged.insert({comm, bytes}).second) return;
  WEFT_INFO("WEFT_COMPRESSION, allreduce of %zu bytes: %s", bytes, d.why.c_str());
}

// Whether this call's compression pays on comm's fabric (compression_pays.h). A handle that is
// not a live, usable communicator: false, so that weftAllReduce reports it as usual.
bool CompressionPays(const JobWideSettings& s, weftComm_t comm, size_t count, size_t element) {
  if (s.always) return true;
  if (!IsLiveComm(comm) || !CheckComm(comm).ok()) return false;
  const CompressionDecision d =
      DecideCompression(comm->fabric, comm->host_groups, s.spec, DecisionCount(count, element),
                        element);
  LogFirstDecision(comm, count * element, d);
  return d.compress;
}

}  // namespace

std::string WithoutAlwaysOption(const std::string& text, bool* always) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return text;
  std::string kept;
  size_t start = colon + 1;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string option = text.substr(start, comma - start);
    if (option == "always") *always = true;
    else kept += (kept.empty() ? "" : ",") + option;
    start = comma + 1;
  }
  return kept.empty() ? text.substr(0, colon) : text.substr(0, colon + 1) + kept;
}

JobWideSettings ReadJobWideSettings() {
  JobWideSettings s;
  const std::string text = SettingText("WEFT_COMPRESSION");
  if (text.empty()) return s;
  s.enabled = true;
  const std::string spec = WithoutAlwaysOption(text, &s.always);
  if (weftCompressionParse(spec.c_str(), &s.spec) != weftSuccess)
    s.parse_error = InvalidArgument("WEFT_COMPRESSION=" + ShownValue(text) + ": " +
                                    LastCompressionError());
  const StatusOr<size_t> min_bytes = SettingBytes("WEFT_COMPRESSION_MIN_BYTES", s.min_bytes);
  if (min_bytes.ok()) s.min_bytes = *min_bytes;
  else s.parse_error = min_bytes.status();
  const StatusOr<bool> feedback = SettingFlag("WEFT_COMPRESSION_FEEDBACK", s.feedback);
  if (feedback.ok()) s.feedback = *feedback;
  else s.parse_error = feedback.status();
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
  if (!CompressionPays(s, comm, count, element)) return false;
  Feedback* feedback = s.feedback && recvbuff != nullptr ? FeedbackFor(comm, recvbuff, count, datatype) : nullptr;
  *result = RunAllReduceCompressed(sendbuff, recvbuff, count, datatype, op, &s.spec,
                                   feedback != nullptr ? feedback->residual.data() : nullptr, comm,
                                   stream, feedback != nullptr ? &feedback->known : nullptr)
                .WithContext("WEFT_COMPRESSION");
  return true;
}

void ReleaseCommunicator(weftComm_t comm) {
  std::lock_guard<std::mutex> lock(g_feedback_mu);
  for (auto it = g_feedback.begin(); it != g_feedback.end();)
    it = std::get<0>(it->first) == comm ? g_feedback.erase(it) : std::next(it);
}

}  // namespace weft::compress
