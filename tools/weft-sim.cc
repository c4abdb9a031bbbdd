// weft-sim: predicts collective times on a modelled fabric by discrete-event simulation of the
// real schedules (src/sim/engine.h), printing nccl-tests-shaped rows.
//
//   weft-sim --preset dgx-h100:128 -C allreduce -b 1M -e 1G [-f 2] [-d float]
//            [-a ALGO] [--chunk BYTES] [--channels N] [--max-chunks K] [--no-shm] [--breakdown]
//            [--in-place]
//            [--topo-file FILE] [-n RANKS]
// Without -a the selector decides (WEFT_ALGO / WEFT_TUNING_FILE honoured, as in the library);
// the decided schedule is then simulated at finer granularity than the selector's estimate
// (up to K chunks per segment, default clamp(8192 / ranks, 1, 32); a simulated chunk stands
// for the real ones it covers, their per-message overheads counted). Columns "select(s)" and
// "sim(s)" are this tool's own wall time. A schedule too large to build and simulate (over
// 2e7 step visits) is reported with the analytic model's time and "analytic" as its steps.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "algorithms/algo_override.h"
#include "algorithms/registry.h"
#include "sim/engine.h"
#include "topo/fabric.h"
#include "topo/presets.h"
#include "tune/cost_model.h"
#include "tune/selector.h"
#include "tune/tuning_file.h"
#include "tools/tool_util.h"

using namespace weft;

namespace {

int Usage(const char* msg) {
  if (msg) fprintf(stderr, "weft-sim: %s\n", msg);
  fprintf(stderr,
          "usage: weft-sim (--preset NAME | --topo-file FILE) [-n RANKS] [-C COLLECTIVE] [-b MIN] [-e MAX]\n"
          "                [-f FACTOR] [-d DTYPE] [-a ALGORITHM] [--chunk BYTES] [--channels N]\n"
          "                [--max-chunks K] [--no-shm] [--breakdown] [--in-place]\n"
          "--in-place: the in-place schedule (default: out of place; only all-to-all differs)\n"
          "--breakdown: after each row, the busy time of every resource the call used (ports,\n"
          "             memory buses, cores, TCP stacks), each rank's finish time and the bytes moved\n"
          "presets: dgx-h100, dgx-h100:N, dgx-h100-fattree:N[:OVERSUB], netns:KxR[@GBIT], host:R\n");
  return 2;
}

// Work bound for the table's own simulation (step visits, cost_model.h): schedules beyond it
// (flat rings over 16k ranks) print their analytic estimate, "analytic" in the steps column.
constexpr double kMaxBuildCost = 2e7;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Where a simulated call's time went: what a model that disagrees with a measurement is
// checked against (which resource it thinks binds, and how busy each one is).
void PrintBreakdown(const SimResult& sim) {
  printf("#   %s working set; %zu messages, %.0f bytes; cpu busy %.2f us\n",
         sim.dram_resident ? "DRAM-resident" : "cache-resident", sim.messages, sim.bytes_moved, sim.cpu_busy_us);
  for (const auto& [name, us] : sim.resource_busy_us) printf("#   busy %-28s %12.2f us\n", name.c_str(), us);
  for (size_t r = 0; r < sim.rank_done_us.size(); ++r) printf("#   rank %zu done at %.2f us\n", r, sim.rank_done_us[r]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset, topo_file, coll_name = "allreduce", dtype = "float", algo;
  int nranks = 0, channels = 0, max_chunks = 0;
  size_t min_bytes = 8, max_bytes = 128 << 20, chunk_bytes = 0;
  bool chunk_set = false, shm = true, breakdown = false, in_place = false;
  double factor = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") return Usage(nullptr);
    if (a == "--no-shm") { shm = false; continue; }
    if (a == "--breakdown") { breakdown = true; continue; }
    if (a == "--in-place") { in_place = true; continue; }
    if (!(v = next())) return Usage(("missing value after " + a).c_str());
    if (a == "--preset") preset = v;
    else if (a == "--topo-file") topo_file = v;
    else if (a == "-n") nranks = atoi(v);
    else if (a == "-C" || a == "--collective") coll_name = v;
    else if (a == "-d") dtype = v;
    else if (a == "-a") algo = v;
    else if (a == "-f") factor = atof(v);
    else if (a == "--channels") channels = atoi(v);
    else if (a == "--max-chunks") max_chunks = atoi(v);
    else if (a == "-b" || a == "-e" || a == "--chunk") {
      StatusOr<size_t> s = ParseSize(v);
      if (!s.ok()) return Usage(s.status().message().c_str());
      if (a == "-b") min_bytes = s.value();
      else if (a == "-e") max_bytes = s.value();
      else { chunk_bytes = s.value(); chunk_set = true; }
    } else {
      return Usage(("unknown option " + a).c_str());
    }
  }
  Collective coll;
  if (!ParseCollectiveName(coll_name, &coll)) return Usage(("unknown collective " + coll_name).c_str());
  size_t elem = DtypeSizeByName(dtype);
  if (elem == 0) return Usage(("unknown dtype " + dtype).c_str());
  if (factor <= 1) return Usage("-f must be > 1");
  StatusOr<std::shared_ptr<const Fabric>> fabric =
      !topo_file.empty() ? LoadTopologyFile(topo_file)
                         : MakePreset(preset.empty() ? std::string("dgx-h100") : preset, nranks);
  if (!fabric.ok()) {
    fprintf(stderr, "weft-sim: %s\n", fabric.status().message().c_str());
    return 1;
  }
  const Fabric& f = *fabric.value();
  const int n = f.nranks();
  StatusOr<AlgoOverrides> overrides = AlgoOverridesFromEnv();
  if (!overrides.ok()) {
    fprintf(stderr, "weft-sim: WEFT_ALGO: %s\n", overrides.status().message().c_str());
    return 1;
  }
  if (!algo.empty()) {
    if (!FindAlgorithm(coll, algo)) {
      std::string known;
      for (const AlgorithmInfo& a : AllAlgorithms())
        if (a.collective == coll) known += " " + a.name;
      fprintf(stderr, "weft-sim: no algorithm '%s' for %s (registered:%s)\n", algo.c_str(), coll_name.c_str(),
              known.empty() ? " none" : known.c_str());
      return 1;
    }
    // -a is WEFT_ALGO=COLLECTIVE:ALGORITHM: the selector picks that algorithm's chunk and
    // channels as the library does when the variable forces it, so a row predicts what a
    // forced run (or a sweep that chose this algorithm) executes. --chunk/--channels still
    // override.
    overrides = ParseAlgoOverrides(coll_name + ":" + algo);
    if (!overrides.ok()) {
      fprintf(stderr, "weft-sim: -a %s: %s\n", algo.c_str(), overrides.status().message().c_str());
      return 1;
    }
  }
  Selector selector(fabric.value(), overrides.value(), shm);
  int k = max_chunks > 0 ? max_chunks : std::max(1, std::min(32, 8192 / n));
  printf("# weft-sim: fabric '%s', %d ranks on %d hosts, %s, %s, shm %s, <= %d chunks/segment simulated\n",
         f.name().c_str(), n, f.nhosts(), coll_name.c_str(), dtype.c_str(), shm ? "on" : "off", k);
  printf("# %12s %12s %6s %-20s %8s %3s %12s %11s %11s %9s %9s %9s\n", "size", "count", "type", "algorithm", "chunk",
         "ch", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "select(s)", "sim(s)", "steps");
  size_t per = (coll == Collective::kAllGather || coll == Collective::kReduceScatter || coll == Collective::kAllToAll)
                   ? static_cast<size_t>(n) : 1;
  int failures = 0;
  for (double b = static_cast<double>(std::max<size_t>(min_bytes, elem * per)); b <= static_cast<double>(max_bytes) * 1.0000001;
       b *= factor) {
    size_t bytes = static_cast<size_t>(b);
    ScheduleRequest req;
    req.collective = coll;
    req.nranks = n;
    req.count = bytes / elem / per;
    req.root = 0;
    // Out of place unless --in-place, as nccl-tests' first time column and as the selector
    // decides all-to-all (only the all-to-all generators plan the two differently).
    req.out_of_place = !in_place;
    if (coll == Collective::kAllToAllv) {
      req.a2av_counts.assign(static_cast<size_t>(n) * n, req.count / n);
      req.a2av_send_displs.resize(static_cast<size_t>(n) * n);
      req.a2av_recv_displs.resize(static_cast<size_t>(n) * n);
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d) {
          req.a2av_send_displs[s * n + d] = d * (req.count / n);
          req.a2av_recv_displs[d * n + s] = s * (req.count / n);
        }
    }
    double t0 = Now();
    StatusOr<Decision> d = selector.Choose(&req, elem);
    if (!d.ok()) {
      printf("# %zu: %s\n", bytes, d.status().message().c_str());
      ++failures;
      continue;
    }
    const AlgorithmInfo* chosen = d->algorithm;
    if (chunk_set) req.chunk.chunk_elems = chunk_bytes / elem;
    if (channels > 0) req.chunk.channels = channels;
    double t1 = Now();
    CostOptions co;
    co.shm_enabled = shm;
    co.max_chunks_per_segment = k;
    co.max_build_cost = kMaxBuildCost;  // a schedule too large to build is reported analytically
    StatusOr<CostEstimate> est = PredictCost(*chosen, req, elem, f, co);
    double t2 = Now();
    if (!est.ok()) {
      printf("# %zu: %s\n", bytes, est.status().message().c_str());
      ++failures;
      continue;
    }
    double algbw = est->time_us > 0 ? static_cast<double>(bytes) / (est->time_us * 1e3) : 0;
    std::string chunk = req.chunk.chunk_elems ? FormatSize(req.chunk.chunk_elems * elem) : "none";
    std::string steps = est->analytic_only ? std::string("analytic") : std::to_string(est->sim.steps);
    printf("  %12zu %12zu %6s %-20s %8s %3d %12.2f %11.2f %11.2f %9.3f %9.3f %9s\n", bytes, req.count, dtype.c_str(),
           chosen->name.c_str(), chunk.c_str(), req.chunk.channels, est->time_us, algbw,
           algbw * BusBandwidthFactor(coll, n), t1 - t0, t2 - t1, steps.c_str());
    if (breakdown && !est->analytic_only) PrintBreakdown(est->sim);
    fflush(stdout);
  }
  return failures ? 1 : 0;
}
