// The "none" device runtime: no devices. Every pointer is host memory; every device call fails
// with InvalidUsage carrying `reason` (why no runtime is active: WEFT_DEVICE=none, or the plugin
// that was asked for and why it did not load).
#pragma once

#include <memory>
#include <string>

#include "device/device_runtime.h"

namespace weft::device {

std::unique_ptr<DeviceRuntime> MakeNoneRuntime(std::string reason);

}  // namespace weft::device
