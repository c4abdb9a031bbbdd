// Fuzz target: the TCP transport's 24-byte frame header decoder alone
// (transports/tcp/tcp_wire.h, DecodeFrameHeader), the pure twin of tcp_frame (which drives a
// real transport over loopback at ~100 inputs/s). Any peer past the handshake writes these
// bytes: a desynchronized stream, or anyone who knows the job secret.
//
// Input: 24 header bytes (zero-padded), then optionally a u64 payload cap (default: the cap the
// transport uses, tcp_wire::kMaxFrameBytes). Promises checked: the decoder accepts exactly the
// headers its rules allow (an independent check of magic, channel, size), an accepted header's
// fields are the bytes' fields and re-encode to the same 24 bytes, and a refusal is an
// InternalError whose message names the header.
#include <endian.h>

#include "fuzz_common.h"
#include "transports/tcp/tcp_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft::tcp_wire;
  uint8_t header[kFrameHeaderBytes] = {};
  std::memcpy(header, data, size < sizeof(header) ? size : sizeof(header));
  uint64_t cap = kMaxFrameBytes;
  if (size >= sizeof(header) + 8) std::memcpy(&cap, data + sizeof(header), 8);

  uint32_t magic, channel;
  uint64_t tag, bytes;
  std::memcpy(&magic, header, 4);
  std::memcpy(&channel, header + 4, 4);
  std::memcpy(&tag, header + 8, 8);
  std::memcpy(&bytes, header + 16, 8);
  magic = le32toh(magic);
  channel = le32toh(channel);
  tag = le64toh(tag);
  bytes = le64toh(bytes);
  const bool note = magic == kAbortMagic;
  const bool valid = note ? bytes <= kMaxAbortNoteBytes
                          : magic == kDataMagic && channel < kMaxChannels && bytes <= cap;

  weft::StatusOr<TcpFrameHeader> h = DecodeFrameHeader(header, cap);
  FuzzCheck(h.ok() == valid, "DecodeFrameHeader accepted a header its rules refuse, or the reverse");
  if (!h.ok()) {
    FuzzCheck(h.status().code() == weftInternalError, "a bad header is not an InternalError");
    FuzzCheck(h.status().message().find("bad frame header") != std::string::npos,
              "a refusal does not say what was refused");
    return 0;
  }
  FuzzCheck((h->kind == FrameKind::kAbortNote) == note, "wrong frame kind");
  FuzzCheck(h->channel == channel && h->tag == tag && h->bytes == bytes, "decoded fields differ");
  uint8_t again[kFrameHeaderBytes];
  EncodeFrameHeader(note ? kAbortMagic : kDataMagic, h->channel, h->tag, h->bytes, again);
  FuzzCheck(std::memcmp(again, header, sizeof(again)) == 0, "header round trip differs");
  return 0;
}
