#include "transports/ipc/ipc_options.h"

#include <cmath>
#include <cstdint>

#include "common/settings.h"

namespace weft::ipc {

double CopyCostUs(CopyPath path, size_t bytes, const CopyModel& model) {
  const double b = static_cast<double>(bytes);
  if (path == CopyPath::kSmKernel) return model.kernel_launch_us + b / (model.kernel_gbps * 1e3);
  return model.engine_setup_us + b / (model.engine_gbps * 1e3);  // GB/s = 1e3 bytes per us
}

size_t CopyCrossoverBytes(const CopyModel& model) {
  const double head_start_us = model.engine_setup_us - model.kernel_launch_us;
  const double slower_per_byte = 1.0 / (model.kernel_gbps * 1e3) - 1.0 / (model.engine_gbps * 1e3);
  if (head_start_us <= 0) return 0;                    // the kernel never starts sooner
  if (slower_per_byte <= 0) return SIZE_MAX;           // nor is it ever slower
  return static_cast<size_t>(std::ceil(head_start_us / slower_per_byte));
}

CopyPath ChooseCopyPath(CopyPath mode, size_t bytes, const CopyModel& model) {
  if (mode != CopyPath::kAuto) return mode;
  return bytes < CopyCrossoverBytes(model) ? CopyPath::kSmKernel : CopyPath::kCopyEngine;
}

const char* CopyPathName(CopyPath path) {
  switch (path) {
    case CopyPath::kCopyEngine: return "copy engine";
    case CopyPath::kSmKernel: return "SM kernel";
    default: return "auto";
  }
}

StatusOr<IpcOptions> IpcOptionsFromEnv() {
  IpcOptions o;
  WEFT_ASSIGN_OR_RETURN(o.enabled, SettingFlag("WEFT_IPC", o.enabled));
  WEFT_ASSIGN_OR_RETURN(o.window_bytes, SettingBytes("WEFT_IPC_WINDOW_BYTES", o.window_bytes));
  WEFT_ASSIGN_OR_RETURN(const std::string copy, SettingChoice("WEFT_IPC_COPY", "auto"));
  o.copy = copy == "ce"   ? CopyPath::kCopyEngine
           : copy == "sm" ? CopyPath::kSmKernel
                          : CopyPath::kAuto;
  return o;
}

}  // namespace weft::ipc
