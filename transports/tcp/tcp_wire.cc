// transports/tcp/tcp_wire.cc: encoding and judging the TCP frame header (see tcp_wire.h).
#include "transports/tcp/tcp_wire.h"

#include <endian.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace weft {
namespace tcp_wire {

namespace {

std::string Hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%08x", v);
  return b;
}

}  // namespace

void EncodeFrameHeader(uint32_t magic, uint32_t channel, uint64_t tag, uint64_t bytes,
                       uint8_t out[kFrameHeaderBytes]) {
  // Little-endian on the wire (a no-op on x86 and arm64).
  uint32_t m = htole32(magic), c = htole32(channel);
  uint64_t t = htole64(tag), b = htole64(bytes);
  std::memcpy(out, &m, 4);
  std::memcpy(out + 4, &c, 4);
  std::memcpy(out + 8, &t, 8);
  std::memcpy(out + 16, &b, 8);
}

StatusOr<TcpFrameHeader> DecodeFrameHeader(const uint8_t in[kFrameHeaderBytes],
                                           uint64_t max_payload_bytes) {
  uint32_t magic, channel;
  uint64_t tag, bytes;
  std::memcpy(&magic, in, 4);
  std::memcpy(&channel, in + 4, 4);
  std::memcpy(&tag, in + 8, 8);
  std::memcpy(&bytes, in + 16, 8);
  TcpFrameHeader h;
  h.channel = le32toh(channel);
  h.tag = le64toh(tag);
  h.bytes = le64toh(bytes);
  magic = le32toh(magic);
  if (magic == kAbortMagic) {
    h.kind = FrameKind::kAbortNote;
    if (h.bytes > kMaxAbortNoteBytes) {
      return InternalError("bad frame header: abort note of " + std::to_string(h.bytes) +
                           " bytes (at most " + std::to_string(kMaxAbortNoteBytes) + ")");
    }
    return h;
  }
  if (magic != kDataMagic) {
    return InternalError("bad frame header: magic " + Hex32(magic) + " (expected " +
                         Hex32(kDataMagic) + " or " + Hex32(kAbortMagic) + ")");
  }
  if (h.channel >= kMaxChannels) {
    return InternalError("bad frame header: channel " + std::to_string(h.channel) + " (at most " +
                         std::to_string(kMaxChannels - 1) + ")");
  }
  if (h.bytes > max_payload_bytes) {
    return InternalError("bad frame header: payload of " + std::to_string(h.bytes) +
                         " bytes (at most " + std::to_string(max_payload_bytes) + ")");
  }
  return h;
}

}  // namespace tcp_wire
}  // namespace weft
