// Fuzz target: WEFT_* environment variables, through every reader the library has today
// (there is no single settings facility yet: transports, backoff, the communicator and the
// socket layer each read their own). Up to four variables per input get fuzzed values; then
// every reader runs. A bad value must fail with a message naming the variable, or be
// ignored as its reader documents; nothing may crash. The launcher variables (WEFT_RANK,
// RANK, SLURM_*, OMPI_*) are read by a function private to src/core/init.cc: see
// fuzz/README.md for the extraction that would let this target reach it.
//
// Input: repeated {variable index u8, value up to a NUL byte}.
#include <cctype>
#include <cstdlib>
#include <vector>

#include "algorithms/algo_override.h"
#include "common/backoff.h"
#include "common/settings.h"
#include "core/init.h"
#include "fuzz_common.h"
#include "net/socket.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace {

const char* const kVariables[] = {
    "WEFT_SHM_DISABLE",     "WEFT_SHM_RING_BYTES",  "WEFT_SHM_SLICE_BYTES", "WEFT_SHM_WINDOW_BYTES",
    "WEFT_SHM_MAX_BYTES",   "WEFT_SHM_CMA",         "WEFT_SHM_CMA_MIN_BYTES", "WEFT_SHM_LIVENESS_MS",
    "WEFT_SOCKET_NSTREAMS", "WEFT_SOCKET_BUFFER",   "WEFT_SOCKET_SPIN_US",  "WEFT_SPIN_US",
    "WEFT_YIELD_US",        "WEFT_TIMEOUT",         "WEFT_ALGO",            "WEFT_SECRET",
    "WEFT_ROOT",            "WEFT_SOCKET_IFNAME",   "WEFT_SOCKET_FAMILY",
    "WEFT_TCP_MAX_UNEXPECTED_BYTES",
};
constexpr size_t kNumVariables = sizeof(kVariables) / sizeof(kVariables[0]);

// WEFT_ROOT is parsed by ParseHostPort, which resolves host names: only numeric hosts are
// parsed here (name resolution is the system's parser, and must not leave this machine).
bool NumericHostPort(const std::string& s) {
  // Digits and separators only: even "[abc]:1" would make getaddrinfo ask DNS for "abc".
  for (char c : s)
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == ':' || c == '[' || c == ']'))
      return false;
  return true;
}

void RunReaders() {
  weft::StatusOr<weft::ShmOptions> shm = weft::ShmOptionsFromEnv();
  if (!shm.ok()) FuzzCheck(shm.status().message().find("WEFT_SHM_") != std::string::npos,
                           "a bad WEFT_SHM_* value's error does not name the variable");
  weft::TcpOptions tcp = weft::TcpOptionsFromEnv();
  FuzzCheck(tcp.streams_per_peer >= 1 && tcp.streams_per_peer <= 64, "streams outside 1..64");
  // The unexpected-message cap: a value the settings table accepts is taken as given, a bad
  // one keeps the default (ValidateSettings reports it at communicator creation).
  const size_t default_cap = weft::TcpOptions().max_unexpected_bytes;
  weft::StatusOr<size_t> cap = weft::SettingBytes("WEFT_TCP_MAX_UNEXPECTED_BYTES", default_cap);
  FuzzCheck(tcp.max_unexpected_bytes == (cap.ok() ? *cap : default_cap),
            "WEFT_TCP_MAX_UNEXPECTED_BYTES is not what the settings table reads");
  if (!cap.ok())
    FuzzCheck(cap.status().message().find("WEFT_TCP_MAX_UNEXPECTED_BYTES") != std::string::npos,
              "a bad WEFT_TCP_MAX_UNEXPECTED_BYTES value's error does not name the variable");
  weft::BackoffPolicy backoff = weft::BackoffPolicy::FromEnv(2);
  FuzzCheck(backoff.yield_us >= backoff.spin_us, "yield stage ends before the spin stage");
  double timeout = weft::DefaultTimeoutSeconds();
  FuzzCheck(timeout >= 0, "negative default timeout");
  (void)weft::AlgoOverridesFromEnv();
  if (const char* secret = std::getenv("WEFT_SECRET")) {
    auto s = weft::net::Secret::FromHex(secret);
    if (s.ok()) FuzzCheck(weft::net::Secret::FromHex(s->Hex()).ok(), "secret hex round trip fails");
  }
  if (const char* root = std::getenv("WEFT_ROOT")) {
    if (NumericHostPort(root)) (void)weft::net::ParseHostPort(root);
  }
  const char* ifname = std::getenv("WEFT_SOCKET_IFNAME");
  const char* family = std::getenv("WEFT_SOCKET_FAMILY");
  if (ifname || family) (void)weft::net::ChooseLocalAddress(ifname ? ifname : "", family ? family : "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft_fuzz::Bytes in(data, size);
  std::vector<const char*> set;
  for (int i = 0; i < 4 && in.left() > 0; ++i) {
    const char* name = kVariables[in.U8() % kNumVariables];
    std::string value = in.Field(256);
    setenv(name, value.c_str(), 1);
    set.push_back(name);
  }
  RunReaders();
  for (const char* name : set) unsetenv(name);
  return 0;
}
