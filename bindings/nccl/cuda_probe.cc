// cuda_probe.cc: the CUDA driver, opened lazily with dlopen (see cuda_probe.h for why).
// Only three driver entry points are used; their C signatures are declared here with
// plain types so that no CUDA header is needed to build the shim.
#include "cuda_probe.h"

#include <dlfcn.h>
#include <sys/uio.h>
#include <unistd.h>

#include <mutex>

namespace weft_nccl {
namespace {

// CUresult values and attribute numbers from the CUDA driver API (cuda.h), stable since
// CUDA 4.0: CUDA_SUCCESS = 0, CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_MEMORYTYPE_DEVICE = 2,
// CU_POINTER_ATTRIBUTE_IS_MANAGED = 8.
constexpr int kCudaSuccess = 0;
constexpr int kAttrMemoryType = 2;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr int kAttrIsManaged = 8;

using InitFn = int (*)(unsigned);
using PointerGetAttributeFn = int (*)(void*, int, unsigned long long);
using StreamSynchronizeFn = int (*)(void*);
using CtxGetDeviceFn = int (*)(int*);

struct Driver {
  bool usable = false;
  PointerGetAttributeFn pointer_get_attribute = nullptr;
  StreamSynchronizeFn stream_synchronize = nullptr;
  CtxGetDeviceFn ctx_get_device = nullptr;
};

const Driver& GetDriver() {
  static Driver driver;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;  // no driver: a host-only machine
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
    driver.pointer_get_attribute =
        reinterpret_cast<PointerGetAttributeFn>(dlsym(lib, "cuPointerGetAttribute"));
    driver.stream_synchronize =
        reinterpret_cast<StreamSynchronizeFn>(dlsym(lib, "cuStreamSynchronize"));
    driver.ctx_get_device = reinterpret_cast<CtxGetDeviceFn>(dlsym(lib, "cuCtxGetDevice"));
    // A driver without devices (or a broken one) fails cuInit: treat it as absent.
    driver.usable = init != nullptr && driver.pointer_get_attribute != nullptr &&
                    driver.stream_synchronize != nullptr && driver.ctx_get_device != nullptr &&
                    init(0) == kCudaSuccess;
  });
  return driver;
}

}  // namespace

bool IsDevicePointer(const void* ptr) {
  const Driver& d = GetDriver();
  if (!d.usable || ptr == nullptr) return false;
  unsigned memory_type = 0;
  if (d.pointer_get_attribute(&memory_type, kAttrMemoryType,
                              reinterpret_cast<unsigned long long>(ptr)) != kCudaSuccess)
    return false;  // not known to CUDA: pageable host memory
  if (memory_type == kMemoryTypeDevice) return true;
  unsigned managed = 0;
  return d.pointer_get_attribute(&managed, kAttrIsManaged,
                                 reinterpret_cast<unsigned long long>(ptr)) == kCudaSuccess &&
         managed != 0;
}

bool IsReadableHostAddress(const void* ptr) {
  // The last two pointers found readable (a call's send and receive buffers).
  thread_local const void* last_readable[2] = {nullptr, nullptr};
  if (ptr == last_readable[0] || ptr == last_readable[1]) return true;
  // process_vm_readv on our own pid reports EFAULT for an address we cannot read, where a
  // load would raise SIGSEGV.
  char byte = 0;
  iovec local{&byte, 1};
  iovec remote{const_cast<void*>(ptr), 1};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != 1) return false;
  last_readable[1] = last_readable[0];
  last_readable[0] = ptr;
  return true;
}

bool SynchronizeStream(void* stream) {
  const Driver& d = GetDriver();
  if (!d.usable) return true;
  return d.stream_synchronize(stream) == kCudaSuccess;
}

int CurrentDevice() {
  const Driver& d = GetDriver();
  int device = -1;
  if (!d.usable || d.ctx_get_device(&device) != kCudaSuccess) return -1;
  return device;
}

}  // namespace weft_nccl
