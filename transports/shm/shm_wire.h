// transports/shm/shm_wire.h: the shm transport's 64-byte message header, as pure functions.
//
// Every message in a (sender -> owner) ring starts with a shm_detail::MsgHeader
// (shm_layout.h): {magic "msg1", channel u16, flags u16, tag u64, bytes u64, address u64},
// then the payload in the ring — or, with the single-copy flag, no payload: the receiver
// reads `bytes` at `address` in the sender's address space (process_vm_readv). The ring is
// memory another process writes, so the header is judged before anything trusts it; the
// transport and fuzz/targets/shm_wire_fuzz.cc use this one decoder. Errors name the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/status.h"
#include "transports/shm/shm_layout.h"

namespace weft {
namespace shm_wire {

// No real message is this large (a 1 TiB buffer); a header saying so is corrupt.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;

struct ShmMsg {
  uint16_t channel = 0;
  bool single_copy = false;
  uint64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t address = 0;  // single_copy: the payload in the sender's address space
};

// Judges the 64 bytes at `header64` (any alignment): a wrong magic, unknown flag bits, a
// payload larger than `max_payload_bytes`, or a single-copy message of some bytes at address
// 0 is an InternalError naming the field and value.
inline StatusOr<ShmMsg> DecodeShmHeader(const void* header64, uint64_t max_payload_bytes) {
  shm_detail::MsgHeader h;
  std::memcpy(&h, header64, sizeof(h));
  if (h.magic != shm_detail::kMsgMagic) {
    return InternalError("corrupt message header: magic " + std::to_string(h.magic) + " (expected " +
                         std::to_string(shm_detail::kMsgMagic) + ")");
  }
  if ((h.flags & ~shm_detail::kMsgSingleCopy) != 0) {
    return InternalError("corrupt message header: flags " + std::to_string(h.flags) +
                         " (known: " + std::to_string(shm_detail::kMsgSingleCopy) + ")");
  }
  if (h.bytes > max_payload_bytes) {
    return InternalError("corrupt message header: payload of " + std::to_string(h.bytes) +
                         " bytes (at most " + std::to_string(max_payload_bytes) + ")");
  }
  ShmMsg m;
  m.channel = h.channel;
  m.single_copy = (h.flags & shm_detail::kMsgSingleCopy) != 0;
  m.tag = h.tag;
  m.bytes = h.bytes;
  m.address = h.address;
  if (m.single_copy && m.bytes > 0 && m.address == 0) {
    return InternalError("corrupt message header: single-copy payload of " + std::to_string(m.bytes) +
                         " bytes at address 0");
  }
  return m;
}

}  // namespace shm_wire
}  // namespace weft
