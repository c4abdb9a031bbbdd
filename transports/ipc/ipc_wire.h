// ipc_wire.h: what crosses between the processes of an IPC communicator (ipc_transport.h):
// one fixed-size record per rank, allgathered once when the transport is set up, and the
// layout of a window, which every peer addresses directly in device memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "device/device_runtime.h"

namespace weft::ipc {

inline constexpr uint32_t kRecordMagic = 0x77697063;  // "wipc"
inline constexpr uint32_t kRecordVersion = 1;

// A rank's window: `header_bytes` of signal slots (slot q, a 32-bit counter at q * 4, is
// written by peer q's stream: the signals q sent this rank), then `window_bytes` of data (the
// Scratch buffer of direct schedules). One device allocation, exported as one IPC handle.
inline size_t HeaderBytes(int nranks) {
  const size_t slots = static_cast<size_t>(nranks) * sizeof(uint32_t);
  return (slots + 4095) / 4096 * 4096;  // the data stays page- (and vector-) aligned
}

struct PeerRecord {
  uint32_t magic = kRecordMagic;
  uint32_t version = kRecordVersion;
  char runtime[16] = {};       // the device runtime's name: every rank must run the same one
  int32_t rank = -1;
  int32_t pid = 0;             // for the liveness check of the watchdog
  int32_t device = -1;         // the device the window lives on
  uint32_t reserved = 0;
  uint64_t window_bytes = 0;   // data bytes (WEFT_IPC_WINDOW_BYTES: every rank the same)
  device::IpcHandle handle;    // the window's allocation
};

// Checks rank `from`'s record as seen by rank `self`: magic/version (a corrupt exchange), the
// runtime and the window size (settings that must agree). Errors name both ranks and values.
Status CheckPeerRecord(const PeerRecord& mine, const PeerRecord& theirs, int from);

}  // namespace weft::ipc
