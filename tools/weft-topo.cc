// weft-topo: shows the fabric weft sees (like lstopo, for ranks) and the selector's decisions.
//
//   weft-topo [-n RANKS] [--preset NAME | --topo-file FILE] [--no-shm] [-C COLLECTIVE]
//             [--explain COLLECTIVE BYTES [--compress SPEC] [--device | --memory host|device]]
//             [--save FILE] [-d DTYPE]
//   weftrun -n N weft-topo --calibrate [--calibrate-ms MS] [--save FILE] [...]
// Without --preset/--topo-file it discovers this machine (WEFT_TOPO_FILE honoured) and
// places RANKS ranks on it (default: one per GPU, else its core count), exactly as a
// communicator would; its GPUs (NVML, or WEFT_DEVICE=emulated[:N] with WEFT_EMULATED_TOPO)
// are listed with their links (gpu_discovery.h).
// Per collective it prints size -> algorithm, chunk, channels, predicted time and busbw;
// --explain lists every candidate for one call with its predicted time; for an allreduce it
// also says whether compressing it pays (src/compress/compression_pays.h), for --compress SPEC,
// else WEFT_COMPRESSION when set, else for each of int8, fp8, int4, sign1 and topk:0.01.
// On device buffers (--device, or by default when the ranks have GPUs and a device runtime
// is active) it also lists the device candidates (staged, IPC algorithms) and the device
// decision (selector.h, ChooseDeviceAlgorithm); --memory host leaves them out.
// --calibrate runs as a job (under weftrun, the namespace harness, srun...): the ranks join,
// measure each link tier of their fabric with short probes (topo/calibrate.h), and rank 0
// prints the figures and continues with the calibrated fabric (--save writes it as a topology
// file that WEFT_TOPO_FILE loads); the other ranks exit quietly.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "algorithms/algo_override.h"
#include "algorithms/registry.h"
#include "compress/compression_pays.h"
#include "compress/job_wide_compression.h"
#include "core/comm.h"
#include "core/bootstrap.h"
#include "topo/calibrate.h"
#include "common/settings.h"
#include "device/device_runtime.h"
#include "topo/fabric.h"
#include "topo/gpu_discovery.h"
#include "topo/presets.h"
#include "weft/weft.h"
#include "tune/cost_model.h"
#include "tune/selector.h"
#include "tune/tuning_file.h"
#include "tools/tool_util.h"

using namespace weft;

namespace {

int Usage(const char* msg) {
  if (msg) fprintf(stderr, "weft-topo: %s\n", msg);
  fprintf(stderr,
          "usage: weft-topo [-n RANKS] [--preset NAME | --topo-file FILE] [--no-shm] [-C COLLECTIVE]\n"
          "                 [--explain COLLECTIVE BYTES [--compress SPEC] [--device | --memory host|device]]\n"
          "                 [--save FILE] [-d DTYPE]\n"
          "       weftrun -n N weft-topo --calibrate [--calibrate-ms MS] [--save FILE] [-C ..] [--explain ..]\n"
          "         (measures each link tier between the job's ranks; rank 0 prints and saves)\n"
          "presets: dgx-h100, dgx-h100:N, dgx-h100-fattree:N[:OVERSUB], netns:KxR[@GBIT], host:R\n");
  return 2;
}

bool EnvFlagSet(const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Joins the job from the launcher's environment, calibrates its fabric and leaves the job.
// Sets *is_root for rank 0 (the one that reports).
StatusOr<std::shared_ptr<const Fabric>> CalibrateJob(const CalibrateOptions& options, bool* is_root) {
  weftComm_t comm = nullptr;
  if (weftCommInitFromEnv(&comm) != weftSuccess) {
    std::string why = weftGetLastError(comm);
    if (comm) (void)weftCommDestroy(comm);
    return InvalidUsage("--calibrate cannot join the job (" + why +
                        "); it runs as one, e.g. weftrun -n 2 weft-topo --calibrate --save FILE");
  }
  *is_root = comm->rank == 0;
  CalibrationPeers peers;
  peers.rank = comm->rank;
  peers.nranks = comm->nranks;
  peers.peer_transport = comm->peer_transport;
  peers.shm_enabled = !EnvFlagSet("WEFT_SHM_DISABLE");
  Bootstrap* bs = comm->bootstrap.get();
  peers.allgather = [bs](const void* mine, size_t bytes, void* all) { return bs->AllGather(mine, bytes, all); };
  StatusOr<CalibrationResult> result = InvalidUsage("no fabric: weft was built without topology support");
  if (comm->fabric) result = CalibrateFabric(comm->fabric, peers, options);
  (void)weftCommDestroy(comm);
  if (!result.ok()) return result.status();
  if (*is_root) printf("Calibration (%d ranks):\n%s\n", peers.nranks, result->Describe().c_str());
  return result->fabric;
}

ScheduleRequest Request(Collective c, int n, size_t bytes, size_t elem) {
  ScheduleRequest req;
  req.collective = c;
  req.nranks = n;
  size_t per = (c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll)
                   ? static_cast<size_t>(n) : 1;
  req.count = bytes / elem / per;
  return req;
}

// --explain allreduce: whether compression pays for this call, per codec asked for.
int ExplainCompression(const Fabric& f, const std::string& spec_text, size_t count, size_t elem) {
  std::vector<std::string> specs;
  const char* env = getenv("WEFT_COMPRESSION");
  if (!spec_text.empty()) specs = {spec_text};
  else if (env != nullptr && *env != '\0') specs = {env};
  else specs = {"int8", "fp8", "int4", "sign1", "topk:0.01"};
  if (elem != 4 && elem != 2) {
    printf("Compression: applies to float and bfloat16 only\n");
    return 0;
  }
  printf("Compression (the compressed and the plain schedule predicted on this fabric: simulated, or in closed form where too large):\n");
  for (const std::string& text : specs) {
    weftCompression spec;
    bool always = false;
    const std::string parsed = compress::WithoutAlwaysOption(text, &always);
    if (weftCompressionParse(parsed.c_str(), &spec) != weftSuccess) {
      fprintf(stderr, "weft-topo: --compress '%s' is not a compression spec (as WEFT_COMPRESSION)\n", text.c_str());
      return 2;
    }
    printf("  %s\n", compress::DecideCompression(&f, f.HostGroups(), spec, count, elem).why.c_str());
  }
  return 0;
}

// --explain on device buffers: the staged and IPC candidates, then the device decision.
int ExplainDevice(const Fabric& f, Collective c, size_t bytes, size_t elem, bool shm) {
  DeviceChoiceOptions o;
  o.elem_size = elem;
  o.shm_enabled = shm;
  o.ipc_enabled = SettingFlagOr("WEFT_IPC", true);
  StatusOr<DeviceChoice> all = ExplainDeviceChoice(f, c, bytes, f.nranks(), o);
  if (!all.ok()) {
    printf("Device decision: error: %s\n", all.status().message().c_str());
    return 1;
  }
  printf("Device buffers: candidates for %s of %zu bytes on %d GPU rank(s), fastest first:\n", CollectiveName(c), bytes,
         f.nranks());
  for (const DeviceCandidate& d : all->candidates) printf("  %s\n", d.why.c_str());
  const int bucket = Selector::SizeBucket(bytes);
  printf("Device decision (for every call of %.0f to %.0f bytes): %s\n", std::ldexp(1.0, std::max(0, bucket)),
         std::ldexp(2.0, std::max(0, bucket)) - 1, ChooseDeviceAlgorithm(f, f.Digest(), c, bytes, f.nranks(), o).c_str());
  printf("  at %zu bytes: %s\n", bytes, all->why.c_str());
  return 0;
}

// The GPU section: each host with GPUs (identical preset hosts once).
void PrintGpus(const Fabric& f) {
  for (int h = 0; h < f.nhosts(); ++h) {
    if (f.host(h).gpus.empty()) continue;
    printf("%s", DescribeGpuLinks(f.host(h)).c_str());
    if (f.nhosts() > 1) printf("  (%d more host(s), not shown)\n", f.nhosts() - h - 1);
    return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset, topo_file, save, only_coll, explain_coll, dtype = "float", compress_spec, memory = "auto";
  size_t explain_bytes = 0;
  int nranks = 0;
  bool shm = true, calibrate = false;
  CalibrateOptions cal_options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") return Usage(nullptr);
    if (a == "--no-shm") { shm = false; continue; }
    if (a == "--calibrate") { calibrate = true; continue; }
    if (a == "--device") { memory = "device"; continue; }
    if (!(v = next())) return Usage(("missing value after " + a).c_str());
    if (a == "--preset") preset = v;
    else if (a == "--topo-file") topo_file = v;
    else if (a == "-n") nranks = atoi(v);
    else if (a == "--save") save = v;
    else if (a == "-C") only_coll = v;
    else if (a == "-d") dtype = v;
    else if (a == "--compress") compress_spec = v;
    else if (a == "--memory") {
      memory = v;
      if (memory != "host" && memory != "device") return Usage(("--memory '" + memory + "': expected host or device").c_str());
    }
    else if (a == "--calibrate-ms") {
      char* end = nullptr;
      cal_options.target_ms = strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(cal_options.target_ms > 0) || cal_options.target_ms > 10000)
        return Usage(("--calibrate-ms '" + std::string(v) + "': expected milliseconds in (0, 10000]").c_str());
    }
    else if (a == "--explain") {
      explain_coll = v;
      const char* b = next();
      if (!b) return Usage("--explain needs COLLECTIVE BYTES");
      StatusOr<size_t> s = ParseSize(b);
      if (!s.ok()) return Usage(s.status().message().c_str());
      explain_bytes = s.value();
    } else {
      return Usage(("unknown option " + a).c_str());
    }
  }
  size_t elem = DtypeSizeByName(dtype);
  if (elem == 0) return Usage(("unknown dtype " + dtype).c_str());
  if (!compress_spec.empty()) {
    bool always = false;
    weftCompression spec;
    if (weftCompressionParse(compress::WithoutAlwaysOption(compress_spec, &always).c_str(), &spec) != weftSuccess)
      return Usage(("--compress '" + compress_spec + "' is not a compression spec (as WEFT_COMPRESSION)").c_str());
  }
  StatusOr<std::shared_ptr<const Fabric>> fabric = InvalidArgument("no fabric");
  if (calibrate && (!preset.empty() || !topo_file.empty() || nranks > 0))
    return Usage("--calibrate measures the job's own fabric: it takes no --preset, --topo-file or -n");
  if (calibrate) {
    bool is_root = false;
    fabric = CalibrateJob(cal_options, &is_root);
    if (fabric.ok() && !is_root) return 0;
  } else if (!preset.empty()) {
    fabric = MakePreset(preset, nranks);
  } else if (!topo_file.empty()) {
    fabric = LoadTopologyFile(topo_file);
  } else {
    int n = nranks;
    if (n <= 0) {  // one rank per GPU, else per core
      StatusOr<HostInfo> local = DiscoverLocalHost();
      if (!local.ok()) {
        fprintf(stderr, "weft-topo: %s\n", local.status().message().c_str());
        return 1;
      }
      n = !local->gpus.empty() ? static_cast<int>(local->gpus.size()) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    }
    std::vector<std::string> summaries;
    for (int r = 0; r < n; ++r) {
      StatusOr<std::string> s = DescribeLocalRank(r);
      if (!s.ok()) {
        fprintf(stderr, "weft-topo: %s\n", s.status().message().c_str());
        return 1;
      }
      summaries.push_back(s.value());
    }
    fabric = BuildFabric(summaries);
  }
  if (!fabric.ok()) {
    fprintf(stderr, "weft-topo: %s\n", fabric.status().message().c_str());
    return 1;
  }
  const Fabric& f = *fabric.value();
  if (!save.empty()) {
    Status st = SaveTopologyFile(f, save);
    if (!st.ok()) {
      fprintf(stderr, "weft-topo: %s\n", st.message().c_str());
      return 1;
    }
    printf("saved %s\n", save.c_str());
  }
  StatusOr<AlgoOverrides> overrides = AlgoOverridesFromEnv();
  if (!overrides.ok()) {
    fprintf(stderr, "weft-topo: WEFT_ALGO: %s\n", overrides.status().message().c_str());
    return 1;
  }
  Selector selector(fabric.value(), overrides.value(), shm);
  const int n = f.nranks();

  if (!explain_coll.empty()) {
    Collective c;
    if (!ParseCollectiveName(explain_coll, &c)) return Usage(("unknown collective " + explain_coll).c_str());
    ScheduleRequest req = Request(c, n, explain_bytes, elem);
    printf("Candidates for %s of %zu bytes (%s) on %d ranks, fastest first:\n", explain_coll.c_str(), explain_bytes,
           dtype.c_str(), n);
    std::vector<Decision> all = selector.Explain(req, elem);
    if (all.empty()) printf("  (no registered algorithm for %s)\n", explain_coll.c_str());
    for (const Decision& d : all) printf("  %s\n", d.why.c_str());
    StatusOr<Decision> chosen = selector.Choose(&req, elem);
    // The selector decides once per power-of-two size bucket, modelled at the bucket's
    // geometric middle: its predicted time is that size's, not the one listed above.
    const int bucket = Selector::SizeBucket(explain_bytes);
    if (chosen.ok() && bucket >= 0)
      printf("Decision (for every call of %.0f to %.0f bytes, modelled at %.0f): %s\n", std::ldexp(1.0, bucket),
             std::ldexp(2.0, bucket) - 1, std::floor(std::ldexp(1.4142135623730951, bucket)), chosen->why.c_str());
    else if (chosen.ok()) printf("Decision: %s\n", chosen->why.c_str());
    else printf("Decision: error: %s\n", chosen.status().message().c_str());
    const bool device = memory == "device" ||
                        (memory == "auto" && f.IsGpu(0) && device::ActiveRuntime().DeviceCount() > 0);
    if (device && ExplainDevice(f, c, explain_bytes, elem, shm) != 0) return 1;
    if (c == Collective::kAllReduce) return ExplainCompression(f, compress_spec, req.count, elem);
    return 0;
  }

  printf("%s", f.Describe().c_str());
  PrintGpus(f);
  std::vector<std::vector<int>> groups = f.HostGroups();
  printf("Groups by host:\n");
  for (size_t g = 0; g < groups.size() && g < 8; ++g) {
    printf("  host %zu:", g);
    for (int r : groups[g]) printf(" %d", r);
    printf("\n");
  }
  if (groups.size() > 8) printf("  ... %zu more\n", groups.size() - 8);

  const Collective colls[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll};
  for (Collective c : colls) {
    if (!only_coll.empty() && only_coll != CollectiveName(c)) continue;
    bool any = false;
    for (const AlgorithmInfo& a : AllAlgorithms()) any |= a.collective == c;
    printf("\n%s (%s, shm %s):\n", CollectiveName(c), dtype.c_str(), shm ? "on" : "off");
    if (!any) {
      printf("  no registered algorithm\n");
      continue;
    }
    printf("  %12s  %-20s %8s %3s %12s %11s\n", "size", "algorithm", "chunk", "ch", "time(us)", "busbw(GB/s)");
    size_t per = (c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll)
                     ? static_cast<size_t>(n) : 1;
    for (size_t bytes = 8; bytes <= (1ull << 30); bytes *= 8) {
      if (bytes < elem * per) continue;
      ScheduleRequest req = Request(c, n, bytes, elem);
      StatusOr<Decision> d = selector.Choose(&req, elem);
      if (!d.ok()) {
        printf("  %12zu  error: %s\n", bytes, d.status().message().c_str());
        continue;
      }
      // The decision was made for the size bucket; report this size's own prediction.
      CostOptions co;
      co.shm_enabled = shm;
      StatusOr<CostEstimate> est = PredictCost(*d->algorithm, req, elem, f, co);
      double us = est.ok() ? est->time_us : NAN;
      double busbw = us > 0 ? bytes / (us * 1e3) * BusBandwidthFactor(c, n) : 0;
      std::string chunk = d->chunk.chunk_elems ? FormatSize(d->chunk.chunk_elems * elem) : "none";
      printf("  %12zu  %-20s %8s %3d %12.2f %11.2f\n", bytes, d->algorithm->name.c_str(), chunk.c_str(),
             d->chunk.channels, us, busbw);
    }
  }
  printf("\ndecision digest: %016llx  fabric digest: %016llx\n", static_cast<unsigned long long>(selector.DecisionDigest()),
         static_cast<unsigned long long>(f.Digest()));
  return 0;
}
