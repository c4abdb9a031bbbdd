// WEFT_COMPRESSION: compression turned on job-wide for plain weftAllReduce, without code
// changes (issue 14 item 5).
//
//   WEFT_COMPRESSION=SPEC           as weftCompressionParse ("int8", "fp8", "topk:0.01", ...),
//                                   plus the option "always" ("int8:always")
//   WEFT_COMPRESSION_MIN_BYTES=N    smaller calls stay uncompressed (default 65536: small
//                                   reductions are latency-bound and often metadata)
//   WEFT_COMPRESSION_FEEDBACK=0     no error feedback (default 1)
//
// Applies to float32/bfloat16 weftSum/weftAvg allreduces; everything else runs as before.
// Per call, compression_pays.h decides whether it pays on the communicator's fabric: never on
// one host, and across hosts only when the encode/decode time is less than the wire time it
// saves on the slowest tier; "always" skips that decision (every applicable call compresses,
// on one host too: for tests and measurements).
// Error feedback is then kept by weft, one float32 residual per (comm, recvbuff, count,
// datatype): safe when each gradient buffer keeps its address from step to step (DDP buckets,
// persistent gradient arenas); if a program reuses one address for different tensors, the
// residual of one leaks into the other (bounded, but wrong) and it should set
// WEFT_COMPRESSION_FEEDBACK=0 or call weftAllReduceCompressed itself. Residuals live until the
// process ends (one float per element of each distinct buffer).
//
// weftAllReduce (src/api/api.cc) calls MaybeRunJobWideCompression first, outside groups, and
// returns its result when it returns true.
#pragma once

#include <string>

#include "common/status.h"
#include "weft/weft_compress.h"

namespace weft::compress {

// The parsed settings (for tests and tools). enabled=false when WEFT_COMPRESSION is unset/empty.
struct JobWideSettings {
  bool enabled = false;
  Status parse_error;
  weftCompression spec{};
  size_t min_bytes = 65536;
  bool feedback = true;
  bool always = false;  // the "always" option: no per-call decision
};
JobWideSettings ReadJobWideSettings();  // reads the environment now (no caching)

// WEFT_COMPRESSION's text without the option "always" (weftCompressionParse does not know it:
// it is about when to compress, not how); *always is set when it was there.
std::string WithoutAlwaysOption(const std::string& text, bool* always);

// True when WEFT_COMPRESSION applies to this call: *result then holds the outcome (a bad
// WEFT_COMPRESSION value makes every applicable call fail with weftInvalidArgument naming it).
// False: the caller runs the uncompressed allreduce. The environment is read once, at the
// first call of the process; the second form takes the settings (tests).
bool MaybeRunJobWideCompression(const void* sendbuff, void* recvbuff, size_t count,
                                weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                weftStream_t stream, Status* result);
bool MaybeRunJobWideCompression(const JobWideSettings& settings, const void* sendbuff,
                                void* recvbuff, size_t count, weftDataType_t datatype,
                                weftRedOp_t op, weftComm_t comm, weftStream_t stream,
                                Status* result);

// Frees what src/compress keeps for comm: the residuals WEFT_COMPRESSION keeps for its
// buffers. weftCommDestroy/weftCommAbort should call it first (src/core, see issue 14's note);
// until then a communicator's residuals live until the process ends.
void ReleaseCommunicator(weftComm_t comm);

}  // namespace weft::compress
