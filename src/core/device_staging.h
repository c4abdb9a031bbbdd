// How a device call is staged through pinned host memory (core/device_calls.h): the call's
// operations are cut into pieces (a large allreduce, reduce or broadcast into chunks, so that
// the stream copies one chunk while the host collective runs on the previous one), each piece's
// device buffer ranges are merged where they overlap (in-place and aliased buffers share
// staging) and laid out in one pinned block, and the pieces' operations are retargeted to it.
// Pinned blocks are pooled.
#pragma once

#include <cstddef>
#include <functional>
#include <variant>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "device/device_runtime.h"

namespace weft {

using DeviceOps = std::vector<std::variant<CollectiveCall, P2POp>>;

// A merged device range and where it lives in the staging block.
struct StagedRegion {
  char* dev;
  size_t bytes;
  bool read;     // the call reads it: copied in before the piece
  bool written;  // holds a receive buffer: copied back after the piece
  size_t staging_offset;
};

struct StagedPiece {
  DeviceOps ops;  // retargeted to staging by Retarget
  std::vector<StagedRegion> regions;
  // Host work instead of ops (the compressed collectives: StageHostWork): called on the
  // progress thread with the piece's staging block.
  std::function<Status(char* staging)> host_work;
};

// A buffer host work touches (StageHostWork): the bytes it may read and whether it writes them.
struct WorkExtent {
  const void* ptr;
  size_t bytes;
  bool read;
  bool written;
};

// Bytes at the start of every staging block: the progress flag, alone in its cache line.
inline constexpr size_t kStagingFlagBytes = 64;
// A split allreduce / reduce / broadcast goes in about kDevicePieces chunks of at least
// kDeviceChunkMinBytes: enough pieces for the copies in, the transfers and the copies out to
// overlap, few enough that each piece's own call overhead stays small (512 KiB pieces made a
// 16 MiB emulated-GPU allreduce 3x slower than 4 pieces). Every rank cuts at the same elements.
inline constexpr size_t kDeviceChunkMinBytes = size_t{1} << 20;
inline constexpr size_t kDevicePieces = 4;

// Cuts ops into pieces and plans each piece's regions; *staging_bytes = the block's size.
std::vector<StagedPiece> PlanPieces(DeviceOps ops, int nranks, int rank,
                                    const device::DeviceRuntime& rt, size_t* staging_bytes);
// One piece for host work over extents (device ones staged, merged where they overlap; host
// ones left where they are); *staging_bytes = the block's size.
StagedPiece PlanHostWork(const std::vector<WorkExtent>& extents, const device::DeviceRuntime& rt,
                         size_t* staging_bytes);
// Where p lives for the piece's host work: its staging address if it is in one of the
// piece's regions, else p itself.
void* StagingAddress(const StagedPiece& piece, char* staging, const void* p);
// Points every device buffer of the pieces' ops into the staging block.
void Retarget(std::vector<StagedPiece>* pieces, char* staging);

// Pinned blocks by power-of-two size class (cudaHostAlloc costs milliseconds). GetStaging
// may hand a larger pooled block and then sets *size_class to its class. PutStaging only
// pools (it runs on progress threads, where a free could deadlock with the device);
// TrimStaging frees the pool down to its limit, from a thread whose jobs have drained.
size_t StagingSizeClass(size_t bytes);
Status GetStaging(device::DeviceRuntime& rt, size_t* size_class, char** block);
void PutStaging(size_t size_class, char* block);
void TrimStaging(device::DeviceRuntime& rt);

}  // namespace weft
