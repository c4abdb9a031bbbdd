// weft-perf — nccl-tests-shaped sweeps of weft's collectives (bin/weft-perf).
//
// Ranks: one per process from the launcher's environment (weftrun, torchrun, Slurm, Open MPI;
// weftCommInitFromEnv), or -t N ranks as threads of this process (weftCommInitAll), or a
// single rank when no launcher variable is set. The sweep, the exact check and the table are
// perf/perf_driver.h, shared with the peers (gloo-perf, mpi-perf, nccl-perf) so rows pair up.
// --algo SPEC sets WEFT_ALGO before the communicator exists (algorithms/algo_override.h).
// --compress CODEC runs the compressed collectives of weft/weft_compress.h instead (without
// error feedback: the timing is the collective's), checks results against the codec's stated
// bound, and reports the encoded bytes in the wire column.
// -R / --registered: the send and receive buffers come from weftMemAlloc and are registered
// with weftCommRegister (every rank), so same-host direct collectives read peers' buffers in
// place (zero-copy; the algo column then ends in "+zerocopy"). Parsed here, before the shared
// driver's options.
// --device: the buffers are device memory of the active device runtime (weft/weft_device.h:
// WEFT_DEVICE=cuda, or emulated for the emulated GPU), device rank % count, and every call is
// queued on a device stream (stream-ordered, as NCCL); the driver uploads inputs, downloads
// results and synchronizes the stream through the backend's hooks.
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "compress/compress_error.h"
#include "compress/compressed_collectives.h"
#include "compress/job_wide_compression.h"
#include "kernels/codec.h"
#include "perf/perf_driver.h"
#include "weft/weft.h"
#include "weft/weft_compress.h"
#include "weft/weft_device.h"

namespace {

// perf_dtype_t / perf_op_t mirror weft's enums, so a cast converts them.
static_assert(static_cast<int>(PERF_HALF) == static_cast<int>(weftFloat16) &&
                  static_cast<int>(PERF_FLOAT) == static_cast<int>(weftFloat) &&
                  static_cast<int>(PERF_BF16) == static_cast<int>(weftBfloat16) &&
                  static_cast<int>(PERF_UINT64) == static_cast<int>(weftUint64) &&
                  static_cast<int>(PERF_DOUBLE) == static_cast<int>(weftDouble),
              "perf_dtype_t mirrors weftDataType_t");
static_assert(static_cast<int>(PERF_AVG) == static_cast<int>(weftAvg) &&
                  static_cast<int>(PERF_MIN) == static_cast<int>(weftMin) &&
                  static_cast<int>(PERF_PROD) == static_cast<int>(weftProd),
              "perf_op_t mirrors weftRedOp_t");

bool g_registered = false;  // -R, for the header line
bool g_device = false;      // --device, for the header line

struct WeftContext {
  weftComm_t comm = nullptr;
  bool registered = false;  // -R: buffers from weftMemAlloc, registered with the communicator
  std::vector<std::pair<void*, void*>> registrations;  // (buffer, handle)
  const weftCompression* compression = nullptr;  // --compress, or nullptr
  // WEFT_COMPRESSION's codec when it may compress this run's allreduces (job-wide, inside
  // weftAllReduce: job_wide_compression.h), else nullptr. Calls it compressed report
  // "compressed" as their algorithm; their wire bytes are the encoded ones.
  const weftCompression* job_wide = nullptr;
  std::string last_algorithm = "-";  // of the last measured collective (not of bookkeeping calls)
  const char* last_algorithm_source = nullptr;  // the name last_algorithm was copied from
  weftStream_t stream = nullptr;  // --device: the device stream every call is queued on
  int device = -1;                // --device: this rank's device
};

weftComm_t Comm(perf_backend_t* b) { return static_cast<WeftContext*>(b->ctx)->comm; }
// The stream collectives are issued on: NULL (blocking, host buffers) or --device's stream.
weftStream_t Stream(perf_backend_t* b) { return static_cast<WeftContext*>(b->ctx)->stream; }

// The algorithm weft ran for the row's collective (WEFT_ALGO or the selector's choice),
// recorded right after the measured call: the driver's own timing reductions run later.
const char* WeftAlgorithmName(perf_backend_t* b, perf_coll_t coll, size_t bytes) {
  (void)coll;
  (void)bytes;
  return static_cast<WeftContext*>(b->ctx)->last_algorithm.c_str();
}

void RecordAlgorithm(perf_backend_t* b) {
  const char* name = nullptr;
  bool known = weftCommGetLastAlgorithm(Comm(b), &name) == weftSuccess && name != nullptr && *name != '\0';
  auto* ctx = static_cast<WeftContext*>(b->ctx);
  // Names live as long as the library: copy only when it changes (this runs after every timed
  // call; a string copy per call would be charged to weft's latency).
  const char* shown = known ? name : "-";  // "-": nothing ran (count 0)
  if (shown == ctx->last_algorithm_source) return;
  ctx->last_algorithm_source = shown;
  ctx->last_algorithm = shown;
}

int Fail(weftResult_t r, weftComm_t comm, const char* what, char* err, size_t errlen) {
  if (r == weftSuccess) return 0;
  snprintf(err, errlen, "%s: %s (%s)", what, weftGetErrorString(r), weftGetLastError(comm));
  return 1;
}

// --compress: the compressed counterpart of the row's collective.
int WeftRunCompressed(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv,
                      size_t count, weftDataType_t t, weftRedOp_t o, char* err, size_t errlen) {
  weftComm_t comm = Comm(b);
  const weftCompression* spec = static_cast<WeftContext*>(b->ctx)->compression;
  switch (coll) {
    case PERF_ALLREDUCE:
      return Fail(weftAllReduceCompressed(send, recv, count, t, o, spec, nullptr, comm, nullptr),
                  comm, "weftAllReduceCompressed", err, errlen);
    case PERF_REDUCESCATTER:
      return Fail(weftReduceScatterCompressed(send, recv, count, t, o, spec, nullptr, comm, nullptr),
                  comm, "weftReduceScatterCompressed", err, errlen);
    case PERF_ALLGATHER:
      return Fail(weftAllGatherCompressed(send, recv, count, t, spec, nullptr, comm, nullptr),
                  comm, "weftAllGatherCompressed", err, errlen);
    case PERF_ALLTOALL:
      return Fail(weftAllToAllCompressed(send, recv, count, t, spec, comm, nullptr), comm,
                  "weftAllToAllCompressed", err, errlen);
    default:
      snprintf(err, errlen, "--compress: %s has no compressed form", perf_coll_names[coll]);
      return 1;
  }
}

int WeftRunCollective(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv,
                      size_t count, perf_dtype_t dtype, perf_op_t op, int root, char* err,
                      size_t errlen) {
  weftComm_t comm = Comm(b);
  auto t = static_cast<weftDataType_t>(dtype);
  auto o = static_cast<weftRedOp_t>(op);
  if (static_cast<WeftContext*>(b->ctx)->compression != nullptr)
    return WeftRunCompressed(b, coll, send, recv, count, t, o, err, errlen);
  switch (coll) {
    case PERF_ALLREDUCE:
      return Fail(weftAllReduce(send, recv, count, t, o, comm, Stream(b)), comm, "weftAllReduce",
                  err, errlen);
    case PERF_ALLGATHER:
      return Fail(weftAllGather(send, recv, count, t, comm, Stream(b)), comm, "weftAllGather", err,
                  errlen);
    case PERF_REDUCESCATTER:
      return Fail(weftReduceScatter(send, recv, count, t, o, comm, Stream(b)), comm,
                  "weftReduceScatter", err, errlen);
    case PERF_ALLTOALL:
      return Fail(weftAllToAll(send, recv, count, t, comm, Stream(b)), comm, "weftAllToAll", err,
                  errlen);
    case PERF_BROADCAST:
      return Fail(weftBroadcast(send, recv, count, t, root, comm, Stream(b)), comm,
                  "weftBroadcast", err, errlen);
    case PERF_REDUCE:
      return Fail(weftReduce(send, recv, count, t, o, root, comm, Stream(b)), comm, "weftReduce",
                  err, errlen);
    case PERF_SENDRECV: {
      // Ring exchange as nccl-tests: send to rank+1, receive from rank-1, grouped so the
      // matched pair cannot deadlock.
      int n = b->nranks, r = b->rank;
      weftResult_t rc = weftGroupStart();
      if (rc == weftSuccess) rc = weftSend(send, count, t, (r + 1) % n, comm, Stream(b));
      weftResult_t rc2 = weftRecv(recv, count, t, (r + n - 1) % n, comm, Stream(b));
      weftResult_t rc3 = weftGroupEnd();
      if (rc == weftSuccess) rc = rc2;
      if (rc == weftSuccess) rc = rc3;
      return Fail(rc, comm, "weftSend/weftRecv", err, errlen);
    }
    default:
      snprintf(err, errlen, "unknown collective %d", static_cast<int>(coll));
      return 1;
  }
}

int WeftRun(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv, size_t count,
            perf_dtype_t dtype, perf_op_t op, int root, char* err, size_t errlen) {
  int rc = WeftRunCollective(b, coll, send, recv, count, dtype, op, root, err, errlen);
  auto* ctx = static_cast<WeftContext*>(b->ctx);
  if (rc == 0 && ctx->compression != nullptr) {
    ctx->last_algorithm = std::string("compressed-") + weftCodecName(ctx->compression->codec);
    ctx->last_algorithm_source = nullptr;
  } else if (rc == 0 && coll != PERF_SENDRECV) {
    RecordAlgorithm(b);
  }
  return rc;
}

// Bytes this rank sends per call: the encoded payloads with --compress (as the compressed
// schedules and compositions in src/compress move them), else the bandwidth-optimal
// uncompressed volume.
size_t WeftWireBytes(perf_backend_t* b, perf_coll_t coll, size_t count, perf_dtype_t dtype) {
  const auto* ctx = static_cast<WeftContext*>(b->ctx);
  const weftCompression* spec = ctx->compression;
  if (spec == nullptr && ctx->job_wide != nullptr && ctx->last_algorithm == "compressed") spec = ctx->job_wide;
  const size_t n = static_cast<size_t>(b->nranks), elem = perf_type_sizes[dtype];
  if (spec == nullptr) {
    const size_t bytes = (coll == PERF_ALLREDUCE ? count : count * n) * elem;
    return static_cast<size_t>(static_cast<double>(bytes) * perf_busbw_factor(coll, b->nranks));
  }
  switch (coll) {
    case PERF_ALLREDUCE: {  // in the placement the call takes (hierarchical: inside + across)
      const auto w = weft::compress::AllReduceCompressedWireBytes(*spec, count, Comm(b));
      return w.inside_hosts + w.across_hosts;
    }
    case PERF_REDUCESCATTER:
    case PERF_ALLGATHER:
    case PERF_ALLTOALL:  // n - 1 encoded blocks of count elements leave this rank
      return (n - 1) * weft::codec::EncodedBytes(*spec, count);
    default:
      return 0;
  }
}

// The codec's worst-case error (kernels/codec_ref.h) relative to the largest input, for the
// driver's check: every contribution encoded once, the reduced slice once more.
double CodecErrorPerMax(const weftCompression& spec) {
  const bool stochastic = spec.flags & WEFT_COMPRESS_STOCHASTIC;
  double e;
  switch (spec.codec) {
    case weftCodecBf16: e = std::ldexp(1.0, -8); break;
    case weftCodecFp16: e = std::ldexp(1.0, -11); break;
    case weftCodecFp8E4M3: e = std::ldexp(1.0, -4) + std::ldexp(1.0, -18); break;
    case weftCodecFp8E5M2: e = std::ldexp(1.0, -3) + std::ldexp(1.0, -30); break;
    case weftCodecInt8: e = stochastic ? 1.0 / 127 : 1.0 / 254; break;
    case weftCodecInt4: e = stochastic ? 1.0 / 7 : 1.0 / 14; break;
    default: e = 1.0; break;  // sign1, top-k: a dropped value is at most the largest
  }
  // With the rotation the bound grows with the block's 2-norm: at most sqrt(block) x max.
  if (spec.flags & WEFT_COMPRESS_HADAMARD) e = (e + std::ldexp(1.0, -18)) * spec.block;
  return e * 1.01;
}

// Allowed |result - exact| for the driver's inputs (perf_input: at most perf_exact_max-bound
// small integers per rank) under --compress.
double CompressedTolerance(const perf_options_t& o, const weftCompression& spec, int nranks) {
  int64_t largest = 0;
  for (int r = 0; r < nranks; ++r)
    for (size_t j = 0; j < 64; ++j) {
      const int64_t v = perf_input(o.coll, o.op, o.dtype, r, nranks, j);
      largest = v > largest ? v : largest;
    }
  const double n = nranks;
  double tolerance = CodecErrorPerMax(spec) * (2 * n + 1) * static_cast<double>(largest);
  if (o.dtype == PERF_BF16) tolerance += std::ldexp(n * static_cast<double>(largest), -7);
  return tolerance;
}

// WEFT_COMPRESSION's codec when it may compress this run's calls (an allreduce of float or
// bfloat16, sum or avg, without --compress), else nullptr. The check then allows the codec's
// error on every size (smaller calls stay exact, which passes too).
const weftCompression* JobWideCodec(const perf_options_t& o, weftCompression* spec) {
  const weft::compress::JobWideSettings s = weft::compress::ReadJobWideSettings();
  if (o.compress != nullptr || !s.enabled || !s.parse_error.ok() || o.coll != PERF_ALLREDUCE ||
      (o.dtype != PERF_FLOAT && o.dtype != PERF_BF16) || (o.op != PERF_SUM && o.op != PERF_AVG))
    return nullptr;
  *spec = s.spec;
  return spec;
}

// "" when --compress can run this configuration, else why not.
std::string CompressionUnsupported(const perf_options_t& o) {
  if (o.coll != PERF_ALLREDUCE && o.coll != PERF_REDUCESCATTER && o.coll != PERF_ALLGATHER &&
      o.coll != PERF_ALLTOALL)
    return std::string("-C ") + perf_coll_names[o.coll] +
           " has no compressed form (allreduce, reducescatter, allgather, alltoall)";
  if (o.dtype != PERF_FLOAT && o.dtype != PERF_BF16)
    return std::string("-d ") + perf_type_names[o.dtype] + ": compression takes float or bfloat16";
  if (perf_coll_has_op(o.coll) && o.op != PERF_SUM && o.op != PERF_AVG)
    return std::string("-o ") + perf_op_names[o.op] + ": compression takes sum or avg";
  return "";
}

// -R: the driver's buffers are shareable and registered (collective: every rank allocates
// the same buffers in the same order). A failure is reported and the run stops (NULL).
void* WeftRegisteredAlloc(perf_backend_t* b, size_t bytes) {
  auto* ctx = static_cast<WeftContext*>(b->ctx);
  void* p = nullptr;
  void* handle = nullptr;
  weftResult_t r = weftMemAlloc(&p, bytes ? bytes : 1);
  if (r == weftSuccess) r = weftCommRegister(ctx->comm, p, bytes ? bytes : 1, &handle);
  if (r != weftSuccess) {
    fprintf(stderr, "weft-perf -R: %s: %s\n", weftGetErrorString(r), weftGetLastError(ctx->comm));
    if (p != nullptr) weftMemFree(p);
    return nullptr;
  }
  ctx->registrations.push_back({p, handle});
  return p;
}

void WeftRegisteredRelease(perf_backend_t* b, void* p) {
  auto* ctx = static_cast<WeftContext*>(b->ctx);
  for (auto& reg : ctx->registrations) {
    if (reg.first != p) continue;
    weftCommDeregister(ctx->comm, reg.second);
    weftMemFree(p);
    reg.first = nullptr;
    return;
  }
}

// Removes `flag` (or its long form) from argv: the shared driver does not know it; true if present.
bool TakeFlag(int* argc, char** argv, const char* flag, const char* long_flag) {
  bool found = false;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if ((flag != nullptr && std::strcmp(argv[i], flag) == 0) || std::strcmp(argv[i], long_flag) == 0) {
      found = true;
      continue;
    }
    argv[out++] = argv[i];
  }
  *argc = out;
  argv[out] = nullptr;
  return found;
}

// --device: the driver's buffers are device memory; inputs and results cross with
// weftDeviceMemcpy; sync waits for the device stream.
void* WeftDeviceAlloc(perf_backend_t* b, size_t bytes) {
  void* p = nullptr;
  const int device = static_cast<WeftContext*>(b->ctx)->device;
  if (weftDeviceMalloc(&p, bytes ? bytes : 1, device) != weftSuccess) {
    fprintf(stderr, "weft-perf --device: %s\n", weftGetLastError(nullptr));
    return nullptr;
  }
  return p;
}
void WeftDeviceRelease(perf_backend_t*, void* p) { weftDeviceFree(p); }
int WeftDeviceCopy(perf_backend_t*, void* dst, const void* src, size_t bytes) {
  return weftDeviceMemcpy(dst, src, bytes) != weftSuccess;
}
int WeftDeviceSync(perf_backend_t* b) { return weftDeviceStreamSynchronize(Stream(b)) != weftSuccess; }

// Creates --device's stream on device rank % count; false (reported) when there is no device.
bool SetUpDevice(WeftContext* ctx) {
  int count = 0, rank = 0;
  weftCommUserRank(ctx->comm, &rank);
  if (weftDeviceGetCount(&count) != weftSuccess || count == 0) {
    fprintf(stderr, "weft-perf --device: no device (runtime %s; WEFT_DEVICE=emulated selects the "
                    "emulated GPU)\n", weftDeviceRuntimeName());
    return false;
  }
  ctx->device = rank % count;
  if (weftDeviceStreamCreate(&ctx->stream, ctx->device) != weftSuccess) {
    fprintf(stderr, "weft-perf --device: %s\n", weftGetLastError(nullptr));
    return false;
  }
  return true;
}

int WeftBarrier(perf_backend_t* b) { return weftBarrier(Comm(b), nullptr) != weftSuccess; }

int WeftMaxDouble(perf_backend_t* b, double* v) {
  return weftAllReduce(v, v, 1, weftDouble, weftMax, Comm(b), nullptr) != weftSuccess;
}

int WeftSumInt64(perf_backend_t* b, int64_t* v) {
  return weftAllReduce(v, v, 1, weftInt64, weftSum, Comm(b), nullptr) != weftSuccess;
}

std::string Description() {
  int version = 0;
  weftGetVersion(&version);
  std::string d = "weft " + std::to_string(version / 10000) + "." +
                  std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  const char* algo = getenv("WEFT_ALGO");
  d += std::string(", WEFT_ALGO=") + (algo && *algo ? algo : "(selector)");
  if (g_registered) d += ", registered buffers (-R: weftMemAlloc + weftCommRegister)";
  if (g_device) d += std::string(", device buffers (--device: ") + weftDeviceRuntimeName() + ", stream-ordered)";
  const char* compression = getenv("WEFT_COMPRESSION");
  if (compression && *compression) d += std::string(", WEFT_COMPRESSION=") + compression;
  return d;
}

perf_backend_t MakeBackend(WeftContext* ctx, const std::string& description) {
  perf_backend_t b;
  memset(&b, 0, sizeof b);
  b.name = "weft";
  b.ctx = ctx;
  weftCommUserRank(ctx->comm, &b.rank);
  weftCommCount(ctx->comm, &b.nranks);
  b.run = WeftRun;
  b.barrier = WeftBarrier;
  b.allreduce_max_double = WeftMaxDouble;
  b.allreduce_sum_int64 = WeftSumInt64;
  b.algo_name = WeftAlgorithmName;
  b.description = description.c_str();
  b.wire_bytes = WeftWireBytes;
  b.compresses = 1;
  if (ctx->registered) {
    b.alloc = WeftRegisteredAlloc;
    b.release = WeftRegisteredRelease;
  }
  if (ctx->stream != nullptr) {
    b.alloc = WeftDeviceAlloc;
    b.release = WeftDeviceRelease;
    b.upload = WeftDeviceCopy;
    b.download = WeftDeviceCopy;
    b.sync = WeftDeviceSync;
    b.compresses = 0;
  }
  return b;
}

bool LauncherEnvironmentSet() {
  for (const char* v : {"WEFT_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})
    if (getenv(v)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  perf_options_t o;
  const bool registered = TakeFlag(&argc, argv, "-R", "--registered");
  g_registered = registered;
  g_device = TakeFlag(&argc, argv, nullptr, "--device");
  int prc = perf_parse_options(argc, argv, &o);
  if (prc > 0)
    printf("  -R, --registered        weft-perf only: buffers from weftMemAlloc, registered with\n"
           "                          weftCommRegister (zero-copy same-host collectives)\n"
           "  --device                weft-perf only: device buffers (WEFT_DEVICE=cuda|emulated),\n"
           "                          calls queued on a device stream\n");
  if (prc != 0) return prc > 0 ? 0 : 2;
  if (g_device && (registered || o.compress != nullptr)) {
    fprintf(stderr, "weft-perf: --device takes neither -R nor --compress\n");
    return 2;
  }
  if (o.algo) setenv("WEFT_ALGO", o.algo, 1);
  weftCompression compression;
  if (o.compress) {
    if (weftCompressionParse(o.compress, &compression) != weftSuccess) {
      fprintf(stderr, "weft-perf: --compress %s: %s\n", o.compress, weft::compress::LastCompressionError());
      return 2;
    }
    const std::string why = CompressionUnsupported(o);
    if (!why.empty()) {
      fprintf(stderr, "weft-perf: --compress %s: %s\n", o.compress, why.c_str());
      return 2;
    }
  }
  const std::string description =
      Description() + (o.compress ? std::string(", compressed: ") + o.compress + " (" +
                                        weft::codec::ActiveCodecIsa() + " codecs; composition "
                                        "of public collectives, no error feedback)"
                                  : "");

  weftCompression job_wide_spec;
  const weftCompression* job_wide = JobWideCodec(o, &job_wide_spec);
  // The codec whose error the check allows: --compress's, else WEFT_COMPRESSION's (JobWideCodec
  // is nullptr under --compress), else none.
  const weftCompression* lossy = o.compress ? &compression : job_wide;
  if (o.threads > 0) {
    if (lossy) o.tolerance = CompressedTolerance(o, *lossy, o.threads);
    std::vector<weftComm_t> comms(o.threads);
    weftResult_t r = weftCommInitAll(comms.data(), o.threads, nullptr);
    if (r != weftSuccess) {
      fprintf(stderr, "weft-perf: weftCommInitAll(%d): %s: %s\n", o.threads,
              weftGetErrorString(r), weftGetLastError(nullptr));
      return 2;
    }
    std::vector<WeftContext> ctxs(o.threads);
    std::vector<int> rcs(o.threads, 0);
    std::vector<std::thread> threads;
    for (int i = 0; i < o.threads; ++i) {
      ctxs[i].comm = comms[i];
      ctxs[i].compression = o.compress ? &compression : nullptr;
      ctxs[i].job_wide = job_wide;
      ctxs[i].registered = registered;
      threads.emplace_back([&, i] {
        if (g_device && !SetUpDevice(&ctxs[i])) {
          rcs[i] = 2;
          return;
        }
        perf_backend_t b = MakeBackend(&ctxs[i], description);
        rcs[i] = perf_run(&b, &o);
      });
    }
    for (auto& t : threads) t.join();
    int rc = 0;
    for (int i = 0; i < o.threads; ++i) {
      if (rcs[i] > rc) rc = rcs[i];
      // A failed rank may leave peers mid-collective: abort rather than wait on them.
      if (rc == 2)
        weftCommAbort(comms[i]);
      else
        weftCommDestroy(comms[i]);
    }
    return rc;
  }

  WeftContext ctx;
  weftResult_t r = LauncherEnvironmentSet() ? weftCommInitFromEnv(&ctx.comm)
                                            : weftCommInitAll(&ctx.comm, 1, nullptr);
  if (r != weftSuccess) {
    fprintf(stderr, "weft-perf: communicator init: %s: %s\n", weftGetErrorString(r),
            weftGetLastError(nullptr));
    return 2;
  }
  ctx.compression = o.compress ? &compression : nullptr;
  ctx.job_wide = job_wide;
  ctx.registered = registered;
  if (g_device && !SetUpDevice(&ctx)) {
    weftCommAbort(ctx.comm);
    return 2;
  }
  perf_backend_t b = MakeBackend(&ctx, description);
  if (lossy) o.tolerance = CompressedTolerance(o, *lossy, b.nranks);
  int rc = perf_run(&b, &o);
  if (rc == 2)
    weftCommAbort(ctx.comm);
  else
    weftCommDestroy(ctx.comm);
  return rc;
}
