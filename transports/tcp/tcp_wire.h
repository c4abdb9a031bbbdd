// transports/tcp/tcp_wire.h: the TCP transport's 24-byte frame header, as pure functions.
//
// Every message on a data connection (past the handshake) starts with
//   {magic u32, channel u32, tag u64, bytes u64}, little-endian,
// followed by `bytes` of payload. Two magics exist: "WTCP" for a data message and "WTCA" for
// an abort note (channel = the rank that failed, payload = the reason, at most
// kMaxAbortNoteBytes). The decoder is the only place that judges a header's fields, so the
// transport and the fuzz target (fuzz/targets/tcp_wire_fuzz.cc) apply the same rules; an
// error names the field and its value, and means the byte stream is out of sync (or hostile).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace weft {
namespace tcp_wire {

constexpr size_t kFrameHeaderBytes = 24;
constexpr uint32_t kDataMagic = 0x57544350;   // "WTCP"
constexpr uint32_t kAbortMagic = 0x57544341;  // "WTCA"
// Channels are small integers chosen by the executor (uint16 in its steps); a larger value
// in a header means the stream is out of sync, not a real channel.
constexpr uint32_t kMaxChannels = 1u << 16;
constexpr size_t kMaxAbortNoteBytes = 1024;
// No real message is this large (a 1 TiB buffer); a header saying so is out of sync.
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 40;

enum class FrameKind { kData, kAbortNote };

struct TcpFrameHeader {
  FrameKind kind = FrameKind::kData;
  uint32_t channel = 0;  // kAbortNote: the rank that failed (the origin)
  uint64_t tag = 0;
  uint64_t bytes = 0;    // payload bytes that follow the header
};

// Writes a header (magic kDataMagic or kAbortMagic) into out[0..24).
void EncodeFrameHeader(uint32_t magic, uint32_t channel, uint64_t tag, uint64_t bytes,
                       uint8_t out[kFrameHeaderBytes]);

// Judges one header: an unknown magic, a data channel >= kMaxChannels, a data payload larger
// than `max_payload_bytes`, or an abort note longer than kMaxAbortNoteBytes is an
// InternalError naming the field and value. Whether an abort note's origin is a rank of the
// job is for the caller (it knows nranks).
StatusOr<TcpFrameHeader> DecodeFrameHeader(const uint8_t in[kFrameHeaderBytes],
                                           uint64_t max_payload_bytes);

}  // namespace tcp_wire
}  // namespace weft
