// ipc_options.h: the ipc transport's knobs and how the settings (WEFT_IPC, WEFT_IPC_WINDOW_BYTES,
// WEFT_IPC_COPY) fill them; every transport folder has this file (transports/README.md,
// "File set"). Also the model that picks, per copy, the copy engine or an SM kernel.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace weft::ipc {

// What moves the bytes of one ipc copy (a Put, a Get, a direct schedule's copy or read).
enum class CopyPath {
  kAuto,        // whichever CopyCostUs says is faster for the size (WEFT_IPC_COPY=auto)
  kCopyEngine,  // DeviceRuntime::MemcpyAsync: the GPU's DMA engines (WEFT_IPC_COPY=ce)
  kSmKernel,    // DeviceRuntime::LaunchCopy: a copy kernel on the SMs (WEFT_IPC_COPY=sm)
};

struct IpcOptions {
  // Device buffers of ranks on one host go device to device (WEFT_IPC; 0: staged through
  // pinned host memory like any other device call).
  bool enabled = true;
  // Data bytes of each rank's window. A direct schedule runs a call larger than it in rounds
  // of half the window (ScheduleRequest::direct_scratch_elems); on a stream every round is
  // serial (copy in, a signal round trip, the reduction, a second round trip: tens of us on
  // an H100, whatever the size), so fewer, larger rounds are faster. 32 MiB: a 256 MiB
  // allreduce in 16 rounds (the H100 measured 49 GB/s bus bandwidth with 256 rounds), slots of
  // 16 MiB that stay within a GPU's L2 cache (50 MB on an H100), and memory a GPU does not miss.
  size_t window_bytes = size_t{32} << 20;
  CopyPath copy = CopyPath::kAuto;
};

// The model of one device-to-device copy of `bytes` (issue 36 item 1), time = fixed cost +
// bytes / rate, with published figures for an H100 pair on NVLink (not measured by weft yet:
// tests/gpu/run.sh is where they would be calibrated):
//   copy engine  ~6 us from the enqueue to the last byte for a small cudaMemcpyAsync (DMA
//                descriptor set-up and the engine's scheduling; 5-8 us in published H100
//                measurements), then the link's rate: ~400 GB/s one way on NVLink 4;
//   SM kernel    ~2.5 us (a kernel launch and its completion, 2-3 us), then what a grid
//                capped at a quarter of the SMs moves (kernels/copy.cu: 32 blocks, leaving the
//                rest to the caller's compute kernels): ~240 GB/s, 60% of the link.
// The SM kernel wins while its 3.5 us head start outweighs its lower rate: below
// 3.5 us / (1/240 - 1/400 GB/s) = 2.1 MB (kCopyCrossoverBytes); the copy engine from there.
// NCCL reasons the same way (SM kernels for latency-bound sizes; its copy-engine collectives
// for large transfers, which also leave the SMs to compute).
struct CopyModel {
  double engine_setup_us = 6.0;
  double engine_gbps = 400.0;
  double kernel_launch_us = 2.5;
  double kernel_gbps = 240.0;
};
inline constexpr CopyModel kCopyModel{};

// Microseconds one copy of `bytes` takes on `path` (kCopyEngine or kSmKernel) by the model.
double CopyCostUs(CopyPath path, size_t bytes, const CopyModel& model = kCopyModel);
// The smallest size the copy engine is at least as fast for: the crossover (2.1 MB by default).
size_t CopyCrossoverBytes(const CopyModel& model = kCopyModel);
// The path of one copy of `bytes`: `mode` itself unless it is kAuto, else the model's choice
// (the SM kernel below CopyCrossoverBytes, the copy engine from it).
CopyPath ChooseCopyPath(CopyPath mode, size_t bytes, const CopyModel& model = kCopyModel);
// "auto", "copy engine", "SM kernel".
const char* CopyPathName(CopyPath path);

// Defaults above, overridden by WEFT_IPC, WEFT_IPC_WINDOW_BYTES and WEFT_IPC_COPY through the
// settings facility; a bad value is an error naming the variable.
StatusOr<IpcOptions> IpcOptionsFromEnv();

}  // namespace weft::ipc
