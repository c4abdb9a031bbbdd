// Fuzz target: the shm transport's 64-byte message header decoder alone
// (transports/shm/shm_wire.h, DecodeShmHeader), the pure twin of shm_frame (two real
// transports, ~200 inputs/s). The header sits in a ring that another process writes.
//
// Input: 64 header bytes (zero-padded), then optionally a u64 payload cap (default
// shm_wire::kMaxMessageBytes, the transport's). Promises checked: the decoder accepts exactly
// what its rules allow (magic, flags, size, single-copy address, checked independently here),
// accepted fields are the bytes' fields, and a refusal is an InternalError saying so.
#include "fuzz_common.h"
#include "transports/shm/shm_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  alignas(64) uint8_t header[sizeof(shm_detail::MsgHeader)] = {};
  std::memcpy(header, data, size < sizeof(header) ? size : sizeof(header));
  uint64_t cap = shm_wire::kMaxMessageBytes;
  if (size >= sizeof(header) + 8) std::memcpy(&cap, data + sizeof(header), 8);

  shm_detail::MsgHeader raw;
  std::memcpy(&raw, header, sizeof(raw));
  const bool single = (raw.flags & shm_detail::kMsgSingleCopy) != 0;
  const bool valid = raw.magic == shm_detail::kMsgMagic &&
                     (raw.flags & ~shm_detail::kMsgSingleCopy) == 0 && raw.bytes <= cap &&
                     !(single && raw.bytes > 0 && raw.address == 0);

  // Decoding from an unaligned copy too: the ring slot is aligned, but the decoder promises
  // any alignment.
  uint8_t unaligned[sizeof(header) + 1];
  std::memcpy(unaligned + 1, header, sizeof(header));
  StatusOr<shm_wire::ShmMsg> m = shm_wire::DecodeShmHeader(unaligned + 1, cap);
  FuzzCheck(m.ok() == valid, "DecodeShmHeader accepted a header its rules refuse, or the reverse");
  if (!m.ok()) {
    FuzzCheck(m.status().code() == weftInternalError, "a bad header is not an InternalError");
    FuzzCheck(m.status().message().find("corrupt message header") != std::string::npos,
              "a refusal does not say what was refused");
    return 0;
  }
  FuzzCheck(m->channel == raw.channel && m->tag == raw.tag && m->bytes == raw.bytes &&
                m->single_copy == single && m->address == raw.address,
            "decoded fields differ");
  return 0;
}
