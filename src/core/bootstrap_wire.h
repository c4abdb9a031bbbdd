// core/bootstrap_wire.h: the bootstrap's small fixed-size wire records, as pure functions
// (bootstrap.cc sends and judges them; fuzz/targets/bootstrap_wire_fuzz.cc fuzzes them alone).
//
//   root -> rank verdict head (8 bytes):  u32 result code, u32 message length (then the
//                                         message, then on success the address table)
//   ring call header (16 bytes):          u32 op, u32 sequence, u32 bytes, i32 root
// All integers big-endian. A decoder's error names the field and its value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "weft/weft.h"

namespace weft {
namespace bootstrap_wire {

constexpr size_t kVerdictHeadBytes = 8;
constexpr size_t kCallHeaderBytes = 16;
// The root's messages are one line naming ranks (at most 16 listed): far below this.
constexpr uint32_t kMaxVerdictMessageBytes = 1u << 20;

inline void Put32(uint8_t* p, uint32_t v) {
  p[0] = v >> 24; p[1] = (v >> 16) & 0xff; p[2] = (v >> 8) & 0xff; p[3] = v & 0xff;
}
inline uint32_t Get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}

struct RootVerdictHead {
  weftResult_t code = weftSuccess;
  uint32_t message_bytes = 0;
};

inline void EncodeRootVerdictHead(weftResult_t code, uint32_t message_bytes, uint8_t out[kVerdictHeadBytes]) {
  Put32(out, static_cast<uint32_t>(code));
  Put32(out + 4, message_bytes);
}

// A code outside weftResult_t (the root's fault: casting it would be undefined behaviour) or
// a message longer than kMaxVerdictMessageBytes is an InternalError naming it.
inline StatusOr<RootVerdictHead> DecodeRootVerdictHead(const uint8_t head[kVerdictHeadBytes]) {
  uint32_t code = Get32(head), len = Get32(head + 4);
  if (code >= static_cast<uint32_t>(weftNumResults)) {
    return InternalError("root verdict: result code " + std::to_string(code) + " is not a weftResult_t (0.." +
                         std::to_string(weftNumResults - 1) + ")");
  }
  if (len > kMaxVerdictMessageBytes) {
    return InternalError("root verdict: message length " + std::to_string(len) + " (at most " +
                         std::to_string(kMaxVerdictMessageBytes) + ")");
  }
  RootVerdictHead h;
  h.code = static_cast<weftResult_t>(code);
  h.message_bytes = len;
  return h;
}

enum class CallOp : uint32_t { kAllGather = 1, kBroadcast = 2, kBarrier = 3 };

inline const char* CallOpName(CallOp op) {
  switch (op) {
    case CallOp::kAllGather: return "allgather";
    case CallOp::kBroadcast: return "broadcast";
    case CallOp::kBarrier: return "barrier";
  }
  return "?";
}

struct CallHeader {
  CallOp op = CallOp::kAllGather;
  uint32_t sequence = 0;
  uint32_t bytes = 0;  // the low 32 bits of the call's byte count
  int32_t root = 0;
};

inline void EncodeCallHeader(const CallHeader& c, uint8_t out[kCallHeaderBytes]) {
  Put32(out, static_cast<uint32_t>(c.op));
  Put32(out + 4, c.sequence);
  Put32(out + 8, c.bytes);
  Put32(out + 12, static_cast<uint32_t>(c.root));
}

// An op that is not one of CallOp is an InternalError naming it (the ring is out of sync).
inline StatusOr<CallHeader> DecodeCallHeader(const uint8_t in[kCallHeaderBytes]) {
  uint32_t op = Get32(in);
  if (op < static_cast<uint32_t>(CallOp::kAllGather) || op > static_cast<uint32_t>(CallOp::kBarrier)) {
    return InternalError("call header: op " + std::to_string(op) + " is not a setup collective (1..3)");
  }
  CallHeader c;
  c.op = static_cast<CallOp>(op);
  c.sequence = Get32(in + 4);
  c.bytes = Get32(in + 8);
  c.root = static_cast<int32_t>(Get32(in + 12));
  return c;
}

}  // namespace bootstrap_wire
}  // namespace weft
