// ucx_wire.h: how UcxTransport lays out the 64-bit UCP tag (internal to transports/ucx).
//
//   [63..44] source rank (20 bits) | [43..32] channel (12 bits) | [31..0] FoldTag(operation tag)
//
// Receives match on source and channel only (kMatchMask), so UCP's in-order matching gives
// "k-th recv on (peer, channel) takes the k-th message"; the folded tag is compared after.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>

namespace weft {
namespace ucx_tag {

constexpr int kRankBits = 20;
constexpr int kChannelShift = 32;
constexpr int kRankShift = 44;
constexpr ucp_tag_t kMatchMask = 0xFFFFFFFF00000000ull;  // source + channel
constexpr ucp_tag_t kFoldMask = 0x00000000FFFFFFFFull;
constexpr int kHelloChannel = 4095;   // setup hellos
constexpr int kSignalChannel = 4094;  // one-sided Signal/PostWait (ucx_one_sided.cc)
constexpr int kNoteChannel = 4093;    // abort notes (who failed), see ucx_transport.h
constexpr int kCulpritChannel = 4092; // AnnounceCulprit (transport.h: timeout diagnosis)
// User channels are 0..4091 (UcxTransport::kMaxUserChannel).

// The operation tag folded into 32 bits: low word XOR high word. Two tags with the same high
// word (the executor's call descriptor) fold to different values exactly when their low words
// (sequence numbers) differ; tags with different high words collide with probability 2^-32.
inline uint32_t FoldTag(uint64_t tag) { return static_cast<uint32_t>(tag ^ (tag >> 32)); }

inline ucp_tag_t MakeTag(int source, int channel, uint64_t tag) {
  return (static_cast<ucp_tag_t>(source) << kRankShift) |
         (static_cast<ucp_tag_t>(channel) << kChannelShift) | FoldTag(tag);
}

}  // namespace ucx_tag
}  // namespace weft
