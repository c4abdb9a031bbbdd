// A stand-in for libnvidia-ml.so.1 (tests/gpu_topo_test.cc): the NVML calls weft's GPU
// discovery makes (src/topo/gpu_discovery.cc), answering for 4 GPUs at PCI 0000:18..1b:00.0.
// FAKE_NVML_TOPO picks their links (a test's own variable, read by this stand-in only):
//   pairs (default)  GPU 0-1 and 2-3 joined by 4 NVLink 3 links each (100 GB/s per direction);
//   switch           every GPU's 18 NVLink 4 links go to an NVSwitch (PCI 0000:c0:00.0);
//   initfail         nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9).
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct PciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

constexpr int kGpus = 4;

const char* Topo() {
  const char* t = std::getenv("FAKE_NVML_TOPO");
  return t != nullptr ? t : "pairs";
}
bool Switched() { return std::strcmp(Topo(), "switch") == 0; }
long Index(void* dev) { return reinterpret_cast<long>(dev) - 1; }

void Fill(PciInfo* pci, unsigned bus) {
  std::memset(pci, 0, sizeof *pci);
  pci->bus = bus;
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02X:00.0", bus);
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return std::strcmp(Topo(), "initfail") == 0 ? 9 : 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = kGpus;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev) {
  if (i >= kGpus) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *dev = reinterpret_cast<void*>(static_cast<long>(i) + 1);
  return 0;
}
int nvmlDeviceGetName(void* dev, char* name, unsigned len) {
  std::snprintf(name, len, "Fake A100 #%ld", Index(dev));
  return 0;
}
int nvmlDeviceGetPciInfo_v3(void* dev, PciInfo* pci) {
  Fill(pci, 0x18 + static_cast<unsigned>(Index(dev)));
  return 0;
}
int nvmlDeviceGetNvLinkState(void*, unsigned link, int* state) {
  const unsigned links = Switched() ? 18 : 4;
  if (link >= 18) return 2;
  *state = link < links ? 1 : 0;
  return 0;
}
int nvmlDeviceGetNvLinkVersion(void*, unsigned, unsigned* version) {
  *version = Switched() ? 4 : 3;
  return 0;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* dev, unsigned, PciInfo* pci) {
  Fill(pci, Switched() ? 0xc0 : 0x18 + static_cast<unsigned>(Index(dev) ^ 1));
  return 0;
}

}  // extern "C"
