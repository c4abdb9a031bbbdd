// Whether compressing an allreduce pays: see compression_pays.h.
#include "compress/compression_pays.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "algorithms/compressed.h"
#include "compress/compressed_schedule.h"
#include "exec/codec_chain.h"
#include "kernels/codec.h"
#include "topo/fabric.h"
#include "tune/analytic_model.h"
#include "tune/cost_model.h"
#include "tune/selector.h"

namespace weft::compress {
namespace {

// The narrowest capacity (GB/s) between two hosts' first ranks, both directions, with
// `streams` concurrent flows (each capped by the route's per-stream rate).
double TierBandwidth(const Fabric& fabric, int a, int b, int streams) {
  double gbps = std::numeric_limits<double>::infinity();
  for (const Route& route : {fabric.RouteOf(a, b, true), fabric.RouteOf(b, a, true)}) {
    for (int i = 0; i < route.nres; ++i) gbps = std::min(gbps, fabric.resource(route.res[i]).gbps);
    if (route.flow_gbps > 0) gbps = std::min(gbps, route.flow_gbps * streams);
  }
  return gbps;
}

// The slowest tier between host 0 and every other host.
double SlowestTierBandwidth(const Fabric& fabric, const std::vector<std::vector<int>>& groups,
                            int streams) {
  double gbps = std::numeric_limits<double>::infinity();
  for (size_t h = 1; h < groups.size(); ++h)
    gbps = std::min(gbps, TierBandwidth(fabric, groups[0][0], groups[h][0], streams));
  return gbps;
}

size_t LargestHost(const std::vector<std::vector<int>>& groups) {
  size_t largest = 0;
  for (const std::vector<int>& g : groups) largest = std::max(largest, g.size());
  return largest;
}

// The placement weftAllReduceCompressed takes (compressed_allreduce.cc, host_tiers.h).
bool Hierarchical(const std::vector<std::vector<int>>& groups, const weftCompression& spec) {
  return groups.size() >= 2 && LargestHost(groups) > 1 && (spec.flags & WEFT_COMPRESS_FLAT) == 0;
}

std::string Describe(const CompressionDecision& d, const weftCompression& spec, int per_host,
                     const std::string& verdict) {
  std::string cpu;
  if (d.compressed_cpu_per_rank_us > 0) {
    char part[96];
    std::snprintf(part, sizeof part, " (cores busy %.0f us per rank:", d.compressed_cpu_per_rank_us);
    cpu = part;
    for (size_t k = 0; k < kCpuWorkKinds; ++k) {
      if (!(d.compressed_cpu_work_us[k] >= 0.5)) continue;
      std::snprintf(part, sizeof part, " %s %.0f,", kCpuWorkNames[k], d.compressed_cpu_work_us[k]);
      cpu += part;
    }
    cpu.back() = ')';
  }
  char line[1024];
  std::snprintf(line, sizeof line,
                "%s: %d host(s) x %d rank(s)%s, slow tier %.3g GB/s (link bound %.0f us): "
                "%s %s %.0f us%s vs plain %s %.0f us -> %s",
                weftCodecName(spec.codec), d.hosts, per_host,
                d.hosts < 2 ? " (one host)"
                            : d.ranks_per_host > 1 ? " (full precision inside hosts)" : " (flat)",
                d.tier_gbps, d.link_bound_us,
                d.compressed_analytic ? "closed form (too large to simulate)" : "simulated",
                d.placement.c_str(), d.compressed_us, cpu.c_str(),
                d.plain_algorithm.c_str(), d.plain_us, verdict.c_str());
  return line;
}

// The plain allreduce the selector would run, and its predicted time (cached per fabric
// digest, count and element size: every codec asked about shares it).
Status PredictPlain(const Fabric& fabric, uint64_t digest, size_t count, size_t elem,
                    CompressionDecision* d) {
  static std::mutex mu;
  static std::map<std::tuple<uint64_t, size_t, size_t>, std::pair<double, std::string>> cache;
  const auto key = std::make_tuple(digest, count, elem);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      std::tie(d->plain_us, d->plain_algorithm) = it->second;
      return OkStatus();
    }
  }
  // The selector keeps the fabric only while it decides: a non-owning pointer.
  Selector selector(std::shared_ptr<const Fabric>(&fabric, [](const Fabric*) {}), AlgoOverrides{},
                    /*shm_enabled=*/true);
  ScheduleRequest req;
  req.collective = Collective::kAllReduce;
  req.nranks = fabric.nranks();
  req.count = count;
  StatusOr<Decision> plain = selector.Choose(&req, elem);
  if (!plain.ok()) return plain.status();
  d->plain_us = plain->predicted_us;
  d->plain_algorithm = plain->algorithm != nullptr ? plain->algorithm->name : "?";
  // The selector times its pick at the size bucket's representative count (sqrt 2 x its lower
  // end), while the compressed schedule is timed at `count`: the pick is timed again at count,
  // or a 64 MiB call compared 1.41x the plain bytes with the compressed ones.
  if (plain->algorithm != nullptr && selector.fabric() != nullptr) {
    req.chunk = plain->chunk;
    StatusOr<CostEstimate> at_count = PredictCost(*plain->algorithm, req, elem, fabric, CostOptions{});
    if (at_count.ok()) d->plain_us = at_count->time_us;
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, std::make_pair(d->plain_us, d->plain_algorithm));
  return OkStatus();
}

// Steps of `algorithm`'s schedule for `shape` on all ranks, estimated as rank 0's (built
// alone) times the rank count: on hosts of equal size every rank owns one lane and has about
// as many. Cheap where building every rank's would not fit in memory.
StatusOr<double> EstimatedSteps(const AlgorithmInfo& algorithm, const ScheduleRequest& shape,
                                const weftCompression& spec) {
  ScheduleRequest one = shape;
  one.codec = spec;
  one.scope = PlanScope::ForRank(0);
  if (one.chunk.chunk_elems == 0) one.chunk.chunk_elems = CompressionChunkElems();  // as simulated
  StatusOr<Schedule> s = BuildSchedule(algorithm, one);
  if (!s.ok()) return s.status();
  return static_cast<double>(s->ranks[0].steps.size()) * shape.nranks;
}

// The compressed schedule's predicted time (float32 values: bf16 is widened first): simulated,
// or its closed form when the schedule is too large to simulate.
Status PredictCompressed(const Fabric& fabric, const std::vector<std::vector<int>>& groups,
                         const weftCompression& spec, size_t count, CompressionDecision* d) {
  const bool hierarchical = Hierarchical(groups, spec);
  d->placement = hierarchical ? "compressed_hierarchical" : "compressed";
  const AlgorithmInfo* algorithm = FindCompressedAlgorithm(Collective::kAllReduce, d->placement);
  if (algorithm == nullptr) return InternalError("no compressed allreduce " + d->placement);
  ScheduleRequest shape;
  shape.collective = Collective::kAllReduce;
  shape.nranks = fabric.nranks();
  shape.count = count;
  if (hierarchical) shape.groups = groups;
  StatusOr<double> steps = EstimatedSteps(*algorithm, shape, spec);
  if (!steps.ok()) return steps.status();
  if (*steps > kMaxSimulatedCompressedSteps) {
    d->compressed_us = CompressedAllReduceAnalyticUs(fabric, groups, hierarchical, spec, count);
    d->compressed_analytic = true;
    return OkStatus();
  }
  StatusOr<SimResult> sim = SimulateCompressedRequest(fabric, *algorithm, shape, spec);
  if (!sim.ok()) return sim.status();
  d->compressed_us = sim->time_us;
  d->compressed_cpu_per_rank_us = sim->cpu_busy_us / std::max(1, fabric.nranks());
  for (size_t k = 0; k < kCpuWorkKinds; ++k)
    d->compressed_cpu_work_us[k] = sim->cpu_work_us[k] / std::max(1, fabric.nranks());
  return OkStatus();
}

}  // namespace

namespace {

// A codec chain's encode and decode rates, as the engine prices a chain's later steps: the
// measured cache rates, else the DRAM rates x the core's cache over DRAM copy rate; the DRAM
// rates without chains (WEFT_FUSE_CODEC_STEPS=0), and for top-k, whose decodes are never in a
// chain and whose encodes are only in a host of two's (OnePassTopK).
struct ChainRates {
  double encode_gbps, decode_gbps;
};
ChainRates CacheRatesOf(const ComputeParams& c, const CodecSpeed& s) {
  const double speedup = CodecChainSpeedup(c);
  return {s.encode_chain_gbps > 0 ? s.encode_chain_gbps : s.encode_gbps * speedup,
          s.decode_chain_gbps > 0 ? s.decode_chain_gbps : s.decode_gbps * speedup};
}
ChainRates ChainRatesOf(const ComputeParams& c, const weftCompression& spec, const CodecSpeed& s) {
  if (!CodecChainsEnabled() || codec::EncodeRangeAlignment(spec) == 0) return {s.encode_gbps, s.decode_gbps};
  return CacheRatesOf(c, s);
}

// Top-k's untiled chain (exec/codec_chain.h): on a host of two the owner's chain is one
// reduce and the encodes, which read both lanes in one pass and write no sum (the engine's
// kOnePassOpener): the reduce costs a copy's traffic, and the encodes' own work the cache rate.
bool OnePassTopK(const weftCompression& spec, int ranks_per_host) {
  return ranks_per_host == 2 && spec.codec == weftCodecTopK && CodecChainsEnabled();
}

}  // namespace

double CompressedAllReduceAnalyticUs(const Fabric& fabric, const std::vector<std::vector<int>>& host_groups,
                                     bool hierarchical, const weftCompression& spec, size_t count) {
  std::vector<std::vector<int>> hosts;
  if (hierarchical) {
    hosts = host_groups;
  } else {  // flat: every rank is its own "host"
    for (int r = 0; r < fabric.nranks(); ++r) hosts.push_back({r});
  }
  const int H = static_cast<int>(hosts.size()), L = static_cast<int>(LargestHost(hosts));
  if (H == 0 || count == 0) return 0;
  auto owner = [&](int h, int l) { return hosts[h][l % hosts[h].size()]; };
  // Pieces as the generator cuts them (CompressedPieces, WEFT_COMPRESSION_CHUNK_BYTES).
  ScheduleRequest cut;
  cut.chunk.chunk_elems = CompressionChunkElems();
  const double pieces = H > 1 ? static_cast<double>(CompressedPieces(cut, count)) : 1;
  const double lane = count / pieces / L;             // values per lane and piece
  const double lane_bytes = lane * sizeof(float);
  const double sub_enc = static_cast<double>(codec::EncodedBytes(spec, static_cast<size_t>(std::ceil(lane / H))));
  const ComputeParams& c = fabric.Compute(0);
  const CodecSpeed speed = CodecSpeedOn(spec, c);
  auto local = [&](double calls, double fixed_us, double bytes, double gbps) {
    return calls * (c.overhead_us + fixed_us) + bytes / (gbps * 1e3);
  };
  const bool shm = true;
  // The local work of one piece in the pipeline's three stages (encode, reduce, decode).
  double encode_stage = 0, reduce_stage = 0, decode_stage = 0;
  // 1. host reduce: every member sends each lane to its owner, who reduces L-1 of them.
  if (L > 1) {
    std::vector<std::pair<int, int>> to_owner, from_owner;
    for (int h = 0; h < H; ++h)
      for (int l = 0; l < L; ++l)
        for (int m : hosts[h])
          if (m != owner(h, l)) {
            to_owner.push_back({m, owner(h, l)});
            from_owner.push_back({owner(h, l), m});
          }
    encode_stage += RoundTime(fabric, shm, to_owner, lane_bytes) +
                    local(L - 1, 0, (L - 1) * lane_bytes, OnePassTopK(spec, L) ? c.copy_gbps : c.reduce_gbps);
    // 6. share: the owner forwards the H encodings of its lane to every other member.
    decode_stage += RoundTime(fabric, shm, from_owner, H * sub_enc);
  }
  // 2 and 5: encode the lane's H sub-slices, then the reduced one. The executor's codec chains
  // (exec/codec_chain.h) encode the host sum (hosts of several ranks) and the reduced slice
  // from the cache, and decode-reduce all but the first contribution there (as the engine
  // prices them).
  const ChainRates chain = ChainRatesOf(c, spec, speed);
  const double host_encode_gbps =
      OnePassTopK(spec, L) ? CacheRatesOf(c, speed).encode_gbps : L > 1 ? chain.encode_gbps : speed.encode_gbps;
  encode_stage += local(H, speed.encode_fixed_us, lane_bytes, host_encode_gbps);
  reduce_stage += local(1, speed.encode_fixed_us, lane_bytes / H, chain.encode_gbps);
  // 4: decode the H contributions and reduce them; 6: decode every lane of the host.
  reduce_stage += local(1, speed.decode_fixed_us, lane_bytes / H, speed.decode_gbps) +
                  local(H - 1, speed.decode_fixed_us, lane_bytes * (H - 1) / H, chain.decode_gbps) +
                  local(H - 1, 0, lane_bytes * (H - 1) / H, c.reduce_gbps);
  decode_stage += local(double(L) * H, speed.decode_fixed_us, L * lane_bytes, speed.decode_gbps);
  // 3 and 5 on the cores: the network stack (LinkParams::stack_cpu_gbps) holds the sender's
  // and the receiver's core for each sub-slice encoding; an owner sends and receives H-1 of
  // them in each round (the engine charges the same).
  const double stack_gbps = fabric.table().link(LinkType::kNetwork).stack_cpu_gbps;
  if (H > 1 && stack_gbps > 0) reduce_stage += 4.0 * (H - 1) * sub_enc / (stack_gbps * 1e3);
  const double host = encode_stage + reduce_stage + decode_stage;
  // 3 and 5: exchange and gather, H-1 messages each to distinct hosts, all in flight at once.
  double round = 0;
  if (H > 1) {
    std::vector<std::pair<int, int>> shift;
    for (int h = 0; h < H; ++h)
      for (int l = 0; l < L; ++l) shift.push_back({owner(h, l), owner((h + 1) % H, l)});
    round = RoundTime(fabric, shm, shift, sub_enc, 1, H - 1);
  }
  // The pipeline over pieces: bound by the wire (every piece's two rounds, plus the local work
  // of one piece that nothing overlaps: the first encode, the last reduce and decode) or by
  // the cores (every piece's local work, plus the last gather they wait for). One piece: the
  // sum of both.
  return std::max(pieces * host + round, pieces * 2 * round + host);
}

namespace {

CompressionDecision Simulate(const Fabric& fabric, uint64_t digest, const std::vector<std::vector<int>>& groups,
                             const weftCompression& spec, size_t count, size_t elem) {
  CompressionDecision d;
  d.hosts = static_cast<int>(groups.size());
  d.ranks_per_host = Hierarchical(groups, spec) ? static_cast<int>(LargestHost(groups)) : 1;
  if (d.hosts >= 2) {
    d.tier_gbps = SlowestTierBandwidth(fabric, groups, static_cast<int>(LargestHost(groups)));
    d.link_bound_us = 2.0 * (d.hosts - 1) / d.hosts * static_cast<double>(count * elem) /
                      (d.tier_gbps * 1e3);
  }
  Status st = PredictPlain(fabric, digest, count, elem, &d);
  if (st.ok()) st = PredictCompressed(fabric, groups, spec, count, &d);
  if (!st.ok()) {  // no prediction: stay with the plain call
    d.why = std::string(weftCodecName(spec.codec)) + ": no prediction (" + st.message() +
            ") -> do not compress";
    return d;
  }
  // Two rules before the times: inside one host weft keeps full precision (nothing crosses a
  // slow tier; the times are then the flat placement's, for information), and a codec that
  // saves no bytes on the wire is no compression.
  std::string verdict;
  if (d.hosts < 2) {
    verdict = "do not compress (one host: full precision inside hosts)";
  } else if (codec::EncodedBytes(spec, count) >= count * elem) {
    verdict = "do not compress (the encoding saves no bytes)";
  } else {
    d.compress = d.compressed_us < d.plain_us;
    verdict = d.compress ? "compress" : "do not compress (it does not pay)";
  }
  d.why = Describe(d, spec, static_cast<int>(LargestHost(groups)), verdict);
  return d;
}

// Cache key: everything the decision depends on.
// (The last: the pieces' chunk, CompressionChunkElems: the schedule priced depends on it.)
using Key = std::tuple<uint64_t, std::vector<std::vector<int>>, int, uint32_t, uint32_t, uint32_t,
                       size_t, size_t, size_t>;

Key MakeKey(uint64_t digest, const std::vector<std::vector<int>>& groups,
            const weftCompression& spec, size_t count, size_t elem) {
  uint32_t ratio_bits = 0;
  std::memcpy(&ratio_bits, &spec.ratio, sizeof ratio_bits);
  return Key{digest, groups, static_cast<int>(spec.codec), spec.block, spec.flags, ratio_bits,
             count, elem, CompressionChunkElems()};
}

std::mutex g_cache_mu;
std::map<Key, CompressionDecision> g_cache;

}  // namespace

CodecSpeed MeasuredCodecSpeed(const weftCompression& spec) {
  // Rates (GB/s of float32 values): codec_bench on one core, 64 MiB, medians of 3, quiet
  // (2026-11-28 04:36 UTC, perf/RESULTS.md "Issue 39, wave 3 session 6"), on a machine whose
  // calibrated DRAM copy rate was kCodecTableDramCopyGbps (CodecSpeedOn scales from there).
  // Fixed costs (us per call): the CPU backend's CpuEncode / CpuDecode (kernels/
  // codec_backend.h: spec check, size checks, the codec) of ONE value in a loop, best of 5 x
  // 200000 calls, this 2-vCPU VM at load ~10 (2026-11-24): 0.02-0.04 us for every codec but
  // top-k, whose encode sets up its selection (a histogram of the values' top bits) for
  // 6.5-6.9 us however few values it keeps. The executor's own per-step cost is the fabric's
  // compute overhead, which the simulator charges every local step on top.
  CodecSpeed s{4.0, 4.0};
  switch (spec.codec) {
    case weftCodecBf16: s = {4.90, 5.05, 0.02, 0.03}; break;
    case weftCodecFp16: s = {6.64, 6.62, 0.02, 0.03}; break;
    // fp8: int8's figures times int8's time over fp8's in the same codec_bench runs (5 runs,
    // 64 MiB, 2026-12-02 07:35 UTC, perf/RESULTS.md "wave 3 session 8"): fp8 after its kernels
    // encodes and decodes about as fast as int8, a little slower (e4m3 0.95x / 0.93x, e5m2
    // 0.96x / 0.86x). Before, the 04:36 figures times the fp8 kernels' gain put fp8 at 1.35x
    // int8's encode, and the model priced fp8 calls below int8's while they measured 10% above.
    case weftCodecFp8E4M3: s = {3.79, 5.50, 0.04, 0.03}; break;
    case weftCodecFp8E5M2: s = {3.83, 5.06, 0.04, 0.03}; break;
    case weftCodecInt8: s = {3.99, 5.91, 0.04, 0.03}; break;
    case weftCodecInt4: s = {3.88, 6.03, 0.03, 0.02}; break;
    case weftCodecSign1: s = {5.41, 5.87, 0.03, 0.02}; break;
    case weftCodecTopK: s = {4.17, 10.1, 6.9, 0.05}; break;  // 16.1 ms / 6.6 ms for 1% of 64 MiB
    default: break;
  }
  if (spec.flags & WEFT_COMPRESS_STOCHASTIC) s.encode_gbps = std::min(s.encode_gbps, 3.79);
  if (spec.flags & WEFT_COMPRESS_HADAMARD) {
    s.encode_gbps = std::min(s.encode_gbps, 1.92);
    s.decode_gbps = std::min(s.decode_gbps, 2.52);
  }
  return s;
}

CodecSpeed CodecSpeedOn(const weftCompression& spec, const ComputeParams& cpu) {
  CodecSpeed s = MeasuredCodecSpeed(spec);
  const int k = static_cast<int>(spec.codec);
  const ComputeParams::CodecRates* m = k > 0 && k < ComputeParams::kCodecSlots ? &cpu.codecs[k] : nullptr;
  if (m != nullptr && m->encode_gbps > 0 && m->decode_gbps > 0) {
    // Calibration timed the plain codec (no flags): the table's flagged/plain ratio on top.
    weftCompression plain_spec = spec;
    plain_spec.flags &= ~static_cast<uint32_t>(WEFT_COMPRESS_STOCHASTIC | WEFT_COMPRESS_HADAMARD);
    const CodecSpeed plain = MeasuredCodecSpeed(plain_spec);
    const double enc = s.encode_gbps / plain.encode_gbps, dec = s.decode_gbps / plain.decode_gbps;
    s.encode_gbps = m->encode_gbps * enc;
    s.decode_gbps = m->decode_gbps * dec;
    s.encode_chain_gbps = m->encode_cache_gbps * enc;
    s.decode_chain_gbps = m->decode_cache_gbps * dec;
    return s;
  }
  if (cpu.dram_copy_gbps > 0) {
    const double scale = cpu.dram_copy_gbps / kCodecTableDramCopyGbps;
    s.encode_gbps *= scale;
    s.decode_gbps *= scale;
  }
  return s;
}

size_t DecisionCount(size_t count, size_t elem) {
  const int bucket = Selector::SizeBucket(count * elem);
  if (bucket < 0) return 1;
  return std::max<size_t>(1, (size_t{1} << bucket) / elem);
}

namespace {

CompressionDecision WithoutModel(const std::vector<std::vector<int>>& host_groups,
                                 const weftCompression& spec) {
  CompressionDecision d;
  d.hosts = static_cast<int>(host_groups.size());
  d.ranks_per_host = Hierarchical(host_groups, spec) ? static_cast<int>(LargestHost(host_groups)) : 1;
  d.compress = d.hosts >= 2;
  d.why = std::string(weftCodecName(spec.codec)) + ": " +
          (d.hosts >= 2 ? std::to_string(d.hosts) + " hosts, no fabric model (thread communicator) -> compress"
                        : "one host, no fabric model: no slow tier to save -> do not compress");
  return d;
}

// The cached decision for the fabric whose Digest() is `digest`: a fabric freed and another
// made at the same address must not reuse decisions.
CompressionDecision Cached(const Fabric& fabric, uint64_t digest,
                           const std::vector<std::vector<int>>& host_groups,
                           const weftCompression& spec, size_t count, size_t elem) {
  const Key key = MakeKey(digest, host_groups, spec, count, elem);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) return it->second;
  }
  const CompressionDecision d = Simulate(fabric, digest, host_groups, spec, count, elem);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache.emplace(key, d);
  return d;
}

}  // namespace

CompressionDecision DecideCompression(const Fabric* fabric,
                                      const std::vector<std::vector<int>>& host_groups,
                                      const weftCompression& spec, size_t count, size_t elem) {
  if (fabric == nullptr) return WithoutModel(host_groups, spec);
  return Cached(*fabric, fabric->Digest(), host_groups, spec, count, elem);
}

CompressionDecision DecideCompression(const std::shared_ptr<const Fabric>& fabric,
                                      const std::vector<std::vector<int>>& host_groups,
                                      const weftCompression& spec, size_t count, size_t elem) {
  if (fabric == nullptr) return WithoutModel(host_groups, spec);
  // Digests per fabric instance: a weak pointer keeps the control block, so no later fabric
  // can compare equal to an expired entry.
  static std::mutex mu;
  static std::map<std::weak_ptr<const Fabric>, uint64_t, std::owner_less<std::weak_ptr<const Fabric>>>
      digests;
  uint64_t digest = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = digests.find(fabric);
    if (it != digests.end()) {
      digest = it->second;
    } else {
      for (auto e = digests.begin(); e != digests.end();) e = e->first.expired() ? digests.erase(e) : std::next(e);
      digest = digests.emplace(fabric, fabric->Digest()).first->second;
    }
  }
  return Cached(*fabric, digest, host_groups, spec, count, elem);
}

}  // namespace weft::compress
