// Whether compressing an allreduce pays: see compression_pays.h.
#include "compress/compression_pays.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "kernels/codec.h"
#include "topo/fabric.h"

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

bool EvenHosts(const std::vector<std::vector<int>>& groups) {
  for (const std::vector<int>& g : groups)
    if (g.size() != groups[0].size()) return false;
  return true;
}

// Codec microseconds per rank (see the header's model).
double CodecMicroseconds(const weftCompression& spec, size_t count, int hosts, int per_host,
                         double contention) {
  const CodecSpeed speed = MeasuredCodecSpeed(spec);
  const double slice = static_cast<double>(count) / per_host;
  const double encoded = slice * (1.0 + 1.0 / hosts), decoded = 2.0 * slice;
  const double seconds = 4.0 * encoded / (speed.encode_gbps * 1e9) +
                         4.0 * decoded / (speed.decode_gbps * 1e9);
  return seconds * 1e6 * contention;
}

// What a compressed call costs beyond its codec and wire time, whatever its size: it is a
// composition of public collectives (reduce-scatter, all-to-all-v, allgather, allgather
// hierarchical; the middle two flat), each a call of its own with its own synchronization
// (kCallMicroseconds: a small collective's latency on the 2-core development machine), and the
// exchange of encoded contributions is one more round across the slow tier than a ring's
// pipelined steps (the route's latency and per-message overhead, per other host).
constexpr double kCallMicroseconds = 25.0;

double FixedMicroseconds(const Fabric& fabric, const std::vector<std::vector<int>>& groups,
                         bool hierarchical) {
  const Route route = fabric.RouteOf(groups[0][0], groups[1][0], true);
  const double round = route.latency_us + route.overhead_us;
  return (hierarchical ? 4 : 2) * kCallMicroseconds + round * static_cast<double>(groups.size() - 1);
}

std::string Describe(const CompressionDecision& d, const weftCompression& spec) {
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: %d host(s) x %d rank(s)%s, slow tier %.3g GB/s: wire %.0f us uncompressed, "
                "%.0f us compressed + %.0f us encode/decode + %.0f us fixed -> %s",
                weftCodecName(spec.codec), d.hosts, d.ranks_per_host,
                d.ranks_per_host > 1 ? " (full precision inside hosts)" : " (flat)", d.tier_gbps,
                d.uncompressed_wire_us, d.compressed_wire_us, d.codec_us, d.fixed_us,
                d.compress ? "compress" : "do not compress (it does not pay)");
  return line;
}

}  // namespace

CodecSpeed MeasuredCodecSpeed(const weftCompression& spec) {
  // codec_bench, one core, 64 MiB (perf/RESULTS.md "### Compression").
  CodecSpeed s{10.0, 10.0};
  switch (spec.codec) {
    case weftCodecBf16:
    case weftCodecFp16: s = {12.9, 11.0}; break;
    case weftCodecFp8E4M3: s = {7.8, 8.8}; break;
    case weftCodecFp8E5M2: s = {8.9, 9.7}; break;
    case weftCodecInt8: s = {11.9, 12.5}; break;
    case weftCodecInt4: s = {10.0, 13.8}; break;
    case weftCodecSign1: s = {15.4, 13.5}; break;
    case weftCodecTopK: s = {2.6, 20.0}; break;  // 25.7 ms / 3.3 ms for 1% of 64 MiB
    default: break;
  }
  if (spec.flags & WEFT_COMPRESS_STOCHASTIC) s.encode_gbps = std::min(s.encode_gbps, 7.5);
  if (spec.flags & WEFT_COMPRESS_HADAMARD) s = {std::min(s.encode_gbps, 4.6), std::min(s.decode_gbps, 3.7)};
  return s;
}

CompressionDecision DecideCompression(const Fabric* fabric,
                                      const std::vector<std::vector<int>>& host_groups,
                                      const weftCompression& spec, size_t count, size_t elem) {
  CompressionDecision d;
  d.hosts = static_cast<int>(host_groups.size());
  if (d.hosts < 2) {
    d.why = std::string(weftCodecName(spec.codec)) +
            ": one host, no slow tier to save -> do not compress";
    return d;
  }
  const bool hierarchical = EvenHosts(host_groups) && host_groups[0].size() > 1 &&
                            (spec.flags & WEFT_COMPRESS_FLAT) == 0;
  d.ranks_per_host = hierarchical ? static_cast<int>(host_groups[0].size()) : 1;
  if (fabric == nullptr) {
    d.compress = true;
    d.why = std::string(weftCodecName(spec.codec)) + ": " + std::to_string(d.hosts) +
            " hosts, no fabric model (thread communicator) -> compress";
    return d;
  }
  const size_t per_host = host_groups[0].size();
  d.tier_gbps = SlowestTierBandwidth(*fabric, host_groups, static_cast<int>(per_host));
  const double cross = 2.0 * (d.hosts - 1) / d.hosts;
  const double bytes = static_cast<double>(count) * elem;
  const double encoded = static_cast<double>(codec::EncodedBytes(spec, count));
  d.uncompressed_wire_us = cross * bytes / (d.tier_gbps * 1e3);
  // Flat placement: each of a host's ranks sends its own encoded data across.
  d.compressed_wire_us = cross * encoded * (hierarchical ? 1.0 : static_cast<double>(per_host)) /
                         (d.tier_gbps * 1e3);
  const int cores = std::max(1, fabric->host(fabric->rank(host_groups[0][0]).host).cores);
  const double contention = std::max(1.0, static_cast<double>(per_host) / cores);
  d.codec_us = CodecMicroseconds(spec, count, d.hosts, d.ranks_per_host, contention);
  d.fixed_us = FixedMicroseconds(*fabric, host_groups, hierarchical);
  d.compress = d.fixed_us + d.codec_us + d.compressed_wire_us < d.uncompressed_wire_us;
  d.why = Describe(d, spec);
  return d;
}

}  // namespace weft::compress
