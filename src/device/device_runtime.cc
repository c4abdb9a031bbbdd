// The device-runtime registry: reads WEFT_DEVICE once, loads the plugin it names with dlopen
// (found next to the module holding this code: libweft.so, or the executable that links
// weft_core statically, then one folder up, then the loader's own search path) and keeps it for
// the life of the process (never unloaded: its stream threads may still run at exit).
#include "device/device_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/settings.h"
#include "device/none_runtime.h"

namespace weft::device {
namespace {

struct Selection {
  std::string runtime;  // "cuda", "emulated", "none", or "" (the default: cuda, else none)
  int emulated_devices = 8;
  Status error;
};

Selection ParseSelection(const std::string& text) {
  Selection s;
  if (text.empty()) return s;
  const std::string::size_type colon = text.find(':');
  s.runtime = text.substr(0, colon);
  if (s.runtime != "cuda" && s.runtime != "emulated" && s.runtime != "none") {
    s.error = InvalidArgument("WEFT_DEVICE=" + text + ": expected cuda, emulated[:N] or none");
    return s;
  }
  if (colon == std::string::npos) return s;
  const std::string count = text.substr(colon + 1);
  char* end = nullptr;
  const long n = std::strtol(count.c_str(), &end, 10);
  if (s.runtime != "emulated" || count.empty() || *end != '\0' || n < 1 || n > 64) {
    s.error = InvalidArgument("WEFT_DEVICE=" + text +
                              ": only emulated takes a device count, an integer in [1, 64]");
  }
  s.emulated_devices = static_cast<int>(n);
  return s;
}

// Folders to look for plugins in: where this code's module lives, and its parent (tests and
// tools run from <build>/bin while libweft.so and the plugins sit in <build>).
std::vector<std::string> PluginFolders() {
  std::vector<std::string> folders;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ActiveRuntime), &info) != 0 && info.dli_fname != nullptr) {
    std::string path = info.dli_fname;
    const std::string::size_type slash = path.rfind('/');
    if (slash != std::string::npos) {
      const std::string folder = path.substr(0, slash);
      folders.push_back(folder + "/");
      folders.push_back(folder + "/../");
      folders.push_back(folder + "/../lib/");
    }
  }
  folders.push_back("");  // the dynamic loader's own search (LD_LIBRARY_PATH, rpath)
  return folders;
}

// Loads libweft-device-<name>.so and creates its runtime; nullptr with *why on failure.
DeviceRuntime* LoadPlugin(const std::string& name, PluginOptions options, std::string* why) {
  const std::string file = "libweft-device-" + name + ".so";
  std::string tried;
  for (const std::string& folder : PluginFolders()) {
    void* lib = dlopen((folder + file).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e != nullptr ? e : folder + file);
      continue;
    }
    auto create = reinterpret_cast<PluginCreateFn>(dlsym(lib, kPluginEntry));
    if (create == nullptr) {
      *why = folder + file + " has no entry point " + kPluginEntry;
      return nullptr;
    }
    char error[512] = {};
    options.error = error;
    options.error_bytes = sizeof error;
    DeviceRuntime* runtime = create(&options);
    if (runtime == nullptr) *why = file + ": " + (error[0] != '\0' ? error : "failed to start");
    return runtime;
  }
  *why = "cannot load " + file + " (" + tried + ")";
  return nullptr;
}

std::unique_ptr<DeviceRuntime> Select() {
  const Selection sel = ParseSelection(SettingText("WEFT_DEVICE"));
  if (!sel.error.ok()) return MakeNoneRuntime(sel.error.message());
  if (sel.runtime == "none") return MakeNoneRuntime("WEFT_DEVICE=none");
  PluginOptions options;
  options.emulated_devices = sel.emulated_devices;
  StatusOr<int64_t> delay = SettingInt("WEFT_EMULATED_DELAY_US", 0);
  if (!delay.ok()) return MakeNoneRuntime(delay.status().message());
  options.emulated_delay_us = static_cast<uint32_t>(*delay);
  std::string why;
  const std::string name = sel.runtime.empty() ? "cuda" : sel.runtime;
  DeviceRuntime* runtime = LoadPlugin(name, options, &why);
  if (runtime != nullptr) {
    WEFT_INFO("device runtime: %s, %d device(s)", runtime->name(), runtime->DeviceCount());
    return std::unique_ptr<DeviceRuntime>(runtime);
  }
  if (sel.runtime.empty()) {
    WEFT_INFO("device runtime: none (no CUDA: %s)", why.c_str());
    return MakeNoneRuntime("no GPU runtime found; WEFT_DEVICE=emulated selects the emulated GPU");
  }
  WEFT_WARN("WEFT_DEVICE=%s: %s", name.c_str(), why.c_str());
  return MakeNoneRuntime("WEFT_DEVICE=" + name + ": " + why);
}

}  // namespace

DeviceRuntime& ActiveRuntime() {
  // Leaked on purpose: a plugin's threads may outlive static destruction.
  static DeviceRuntime* runtime = Select().release();
  return *runtime;
}

bool IsDevicePointer(const void* ptr) {
  return ptr != nullptr && ActiveRuntime().PointerInfo(ptr).is_device;
}

}  // namespace weft::device
