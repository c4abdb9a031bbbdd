// Whether compressing one allreduce pays (issue 14 item 4): the time a rank spends encoding and
// decoding, at the codec's measured speed, against the wire time the encoding saves on the
// slowest tier the call crosses, from the fabric model. WEFT_COMPRESSION (job-wide) asks this
// per call; `weft-topo --explain allreduce BYTES` prints it.
//
// The model, for H hosts of L ranks (the hierarchical placement, host_tiers.h; uneven hosts or
// one rank per host: the flat placement, L = 1 and every rank encodes everything):
//   tier bandwidth bw = the narrowest resource on a route between hosts (NIC port, TCP stack,
//                       switch uplink), capped by L streams' cap;
//   wire time    = 2 (H - 1) / H x bytes / bw    (each host sends and receives this much);
//   codec time   = (encoded values / encode speed + decoded values / decode speed) per rank,
//                  x L / cores when more ranks than cores share a host; a rank encodes its
//                  1/L slice once and its 1/(L H) reduced part once more, and decodes H
//                  contributions of 1/(L H) and the gathered 1/L;
//   fixed time   = the composition's extra calls and its one extra round across the tier;
//   compress when fixed + codec time + compressed wire time < uncompressed wire time
//   (so small calls stay uncompressed even on a slow tier).
// Inside one host nothing crosses a slow tier: never compressed. The intra-host phases are the
// same with and without compression and cancel out.
//
// Codec speeds are the one-core figures of codec_bench (perf/RESULTS.md "### Compression"),
// fixed in a table so every rank decides the same way (a per-process measurement could differ
// between ranks and split the job into compressing and non-compressing halves).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "weft/weft_compress.h"

namespace weft {
class Fabric;
}

namespace weft::compress {

struct CompressionDecision {
  bool compress = false;
  int hosts = 1, ranks_per_host = 1;  // ranks_per_host 1: flat placement
  double tier_gbps = 0;            // slow tier bandwidth (GB/s), 0 when unknown
  double uncompressed_wire_us = 0, compressed_wire_us = 0, codec_us = 0;
  double fixed_us = 0;  // the composition's own cost, whatever the size (compression_pays.cc)
  std::string why;  // one line: the figures and the verdict
};

// Encode and decode speed of one core, GB/s of float32 values (measured; see above).
struct CodecSpeed {
  double encode_gbps, decode_gbps;
};
CodecSpeed MeasuredCodecSpeed(const weftCompression& spec);

// For an allreduce of count elements of elem bytes (4: float32, 2: bf16) on `fabric` whose
// ranks are grouped by host as host_groups. fabric may be null (thread communicators): with
// several hosts it then compresses (no model says otherwise), on one host it does not.
CompressionDecision DecideCompression(const Fabric* fabric,
                                      const std::vector<std::vector<int>>& host_groups,
                                      const weftCompression& spec, size_t count, size_t elem);

}  // namespace weft::compress
