// Compressed schedules on a communicator (see compressed_schedule.h).
#include "compress/compressed_schedule.h"

#include <mutex>
#include <string>

#include "algorithms/compressed.h"
#include "compress/compress_common.h"
#include "compress/compression_pays.h"
#include "core/call_check.h"
#include "core/comm.h"
#include "exec/executor.h"
#include "kernels/codec.h"
#include "transports/transport.h"

namespace weft::compress {
namespace {

// The call's descriptor for message tags: ranks whose calls differ (count, codec) fail as
// mismatched instead of exchanging encodings of different shapes.
uint32_t DescriptorHash(Collective collective, size_t count, const weftCompression& spec,
                        weftRedOp_t op) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ count;
  for (uint64_t v : {static_cast<uint64_t>(spec.codec), static_cast<uint64_t>(spec.block),
                     static_cast<uint64_t>(spec.flags), spec.seed}) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  }
  return MixCallType(static_cast<uint32_t>(h ^ (h >> 32)), collective, weftFloat32, op);
}

Status Execute(weftComm_t comm, const RankSchedule& rs, int window, const weftCompression& spec,
               weftRedOp_t op, uint64_t tag, const float* in, float* out,
               std::vector<unsigned char>* scratch, const char* what) {
  ExecExtras extras;
  extras.codec = &spec;
  extras.heap_scratch = scratch;
  return ExecuteOnComm(comm, rs, window, weftFloat32, op, tag, in, out, what, extras);
}

}  // namespace

Status RunCompressedSchedule(weftComm_t comm, Collective collective, size_t count,
                             const weftCompression& spec, weftRedOp_t op, const float* in,
                             float* out, std::vector<unsigned char>* scratch,
                             RankSchedule* rank_schedule) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(collective);
  if (algorithm == nullptr)
    return InternalError(std::string("no compressed schedule for ") + CollectiveName(collective));
  std::lock_guard<std::mutex> lock(comm->exec_mu);
  WEFT_RETURN_IF_ERROR(CheckComm(comm));
  ScheduleRequest req;
  req.collective = collective;
  req.nranks = comm->nranks;
  req.count = count;
  req.codec = spec;
  req.scope = PlanScope::ForRank(comm->rank);
  StatusOr<Schedule> sched = BuildSchedule(*algorithm, req);
  if (!sched.ok()) return sched.status();
  const uint64_t seq = ++comm->collective_seq;
  const std::string what = std::string(CollectiveName(collective)) + " compressed";
  FlightEntry* entry = comm->recorder.Begin(seq, CollectiveName(collective), count * sizeof(float));
  if (entry != nullptr) {
    static const std::string kName = "compressed";
    entry->algorithm = &kName;
    entry->dtype = weftFloat32;
    entry->op = op;
  }
  const RankSchedule& rs = sched->ranks[comm->rank];
  Status st = Execute(comm, rs, sched->window, spec, op,
                      MakeCallTag(DescriptorHash(collective, count, spec, op), seq), in, out,
                      scratch, what.c_str());
  comm->recorder.Complete(entry, st);
  if (st.ok() && rank_schedule != nullptr) *rank_schedule = rs;
  return st;
}

StatusOr<SimResult> SimulateCompressedSchedule(const Fabric& fabric, Collective collective,
                                               int nranks, size_t count,
                                               const weftCompression& spec) {
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(collective);
  if (algorithm == nullptr)
    return InvalidArgument(std::string("no compressed schedule for ") + CollectiveName(collective));
  ScheduleRequest req;
  req.collective = collective;
  req.nranks = nranks;
  req.count = count;
  req.codec = spec;
  StatusOr<Schedule> sched = BuildSchedule(*algorithm, req);
  if (!sched.ok()) return sched.status();
  const CodecSpeed speed = MeasuredCodecSpeed(spec);
  SimOptions options;
  options.encode_gbps = speed.encode_gbps;
  options.decode_gbps = speed.decode_gbps;
  return SimulateSchedule(*sched, fabric, sizeof(float), options);
}

std::vector<unsigned char>& CompressedScheduleScratch() {
  static thread_local std::vector<unsigned char> scratch;
  return scratch;
}

void ResidualFromEncodings(const weftCompression& spec, const RankSchedule& steps,
                           const float* in, const unsigned char* scratch, size_t reduced_offset,
                           float weight, float* residual) {
  for (const Step& s : steps.steps) {
    if (s.op != StepOp::kEncode || s.src.count == 0) continue;
    const size_t n = s.src.count;
    const uint8_t* encoded = scratch + s.dst.offset * sizeof(float);
    float* decoded = ScratchFloats(2, n);
    if (s.src.buffer == Buffer::kInput) {
      codec::DecodeWithDropped(spec, encoded, n, in + s.src.offset, decoded,
                               residual + s.src.offset);
      continue;
    }
    // The reduced slice: what re-encoding dropped joins the owner's residual (times nranks
    // for avg, since the next call divides it again).
    const float* reduced = reinterpret_cast<const float*>(scratch) + s.src.offset;
    float* dropped = ScratchFloats(3, n);
    codec::DecodeWithDropped(spec, encoded, n, reduced, decoded, dropped);
    for (size_t i = 0; i < n; ++i) residual[reduced_offset + i] += weight * dropped[i];
  }
}

}  // namespace weft::compress
