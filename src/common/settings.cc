// The table of WEFT_* variables and their readers: see settings.h.
#include "common/settings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace weft {
namespace {

using K = SettingKind;

// One row per variable, grouped as the README groups them. Keep the README's table in step:
// tests/settings_test.cc fails when a row is missing there or a WEFT_* name has no row here.
const std::vector<SettingInfo>& Table() {
  static const std::vector<SettingInfo> rows = {
      // Rank layout and rendezvous (weftCommInitFromEnv; weftrun sets them).
      {"WEFT_RANK", K::kInt, "launcher's", "this process's rank", 0, INT32_MAX},
      {"WEFT_WORLD_SIZE", K::kInt, "launcher's", "number of ranks", 1, INT32_MAX},
      {"WEFT_LOCAL_RANK", K::kInt, "launcher's", "rank among this host's ranks", 0, INT32_MAX},
      {"WEFT_LOCAL_SIZE", K::kInt, "launcher's", "ranks on this host (set by weftrun)", 1, INT32_MAX},
      {"WEFT_ROOT", K::kText, "launcher's", "rendezvous address host:port"},
      {"WEFT_SECRET", K::kText, "private file / derived", "32 hex digits every connection presents"},
      {"WEFT_SECRET_DIR", K::kText, "$XDG_RUNTIME_DIR", "directory of the one-host secret file"},
      {"WEFT_INIT_TIMEOUT", K::kSeconds, "120", "seconds to wait for all ranks at init"},
      // Behaviour of calls.
      {"WEFT_TIMEOUT", K::kSeconds, "300", "seconds without progress before weftTimeout"},
      {"WEFT_CHECK", K::kFlag, "0", "exchange call fingerprints before each collective"},
      {"WEFT_DEBUG", K::kChoice, "off", "stderr log level", 0, 0, "off|none|0|warn|info|trace"},
      {"WEFT_ALGO", K::kText, "selector", "force algorithms (collective:algorithm,...)"},
      {"WEFT_CHUNK_BYTES", K::kBytes, "1M", "pipelining chunk of thread communicators"},
      {"WEFT_INPROC_GROUPS", K::kText, "one host", "host groups of a thread communicator (tests)"},
      {"WEFT_FLIGHT_RECORDER", K::kInt, "64", "operations each communicator remembers (0 = off)", 0, 1 << 20},
      {"WEFT_DEBUG_FILE", K::kText, "stderr", "where flight-recorder dumps go (%r rank, %h host, %p pid)"},
      {"WEFT_METRICS_FILE", K::kText, "off", "one JSON line per completed collective (core/metrics.h; %r rank, %h host, %p pid)"},
      // Transports.
      {"WEFT_TRANSPORT", K::kText, "auto", "network transport: ucx, tcp or ^ucx"},
      {"WEFT_SOCKET_IFNAME", K::kText, "first non-loopback", "interfaces for TCP"},
      {"WEFT_SOCKET_FAMILY", K::kChoice, "any", "address family", 0, 0,
       "af_inet|af_inet6|4|6|inet|inet6|ipv4|ipv6"},
      {"WEFT_SOCKET_NSTREAMS", K::kInt, "1", "TCP streams per peer", 1, 64},
      {"WEFT_SOCKET_BUFFER", K::kInt, "0", "socket buffer bytes (0 = autotuning)", 0, 1 << 30},
      {"WEFT_SOCKET_SPIN_US", K::kInt, "policy", "TCP progress spin before polling", 0, 1000000},
      {"WEFT_SOCKET_YIELD", K::kFlag, "policy", "TCP progress yields the core when idle"},
      // 0 would fail every message that arrives before its recv: refused at init.
      {"WEFT_TCP_MAX_UNEXPECTED_BYTES", K::kBytes, "1G",
       "cap on TCP messages buffered before their recv, all peers", 1},
      {"WEFT_SHM_DISABLE", K::kFlag, "0", "same-host ranks use the network transport"},
      {"WEFT_SHM_RING_BYTES", K::kBytes, "1M", "shm ring per peer", 4096},
      {"WEFT_SHM_SLICE_BYTES", K::kBytes, "64K", "shm copy slice", 64},
      {"WEFT_SHM_WINDOW_BYTES", K::kBytes, "4M", "initial direct window", 4096},
      {"WEFT_SHM_MAX_BYTES", K::kBytes, "none", "cap on /dev/shm use"},
      {"WEFT_SHM_CMA", K::kFlag, "1", "single-copy transfers with process_vm_readv"},
      {"WEFT_SHM_MEMBARRIER", K::kFlag, "1", "signals without a fence (membarrier on the sleeper's side)"},
      {"WEFT_SHM_CMA_MIN_BYTES", K::kBytes, "256K", "smallest single-copy transfer"},
      {"WEFT_SHM_LIVENESS_MS", K::kInt, "policy", "peer liveness check period", 1, 10000000},
      {"WEFT_UCX_TLS", K::kText, "UCX's choice", "UCX transports for weft's context"},
      {"WEFT_UCX_SPIN_US", K::kInt, "policy", "UCX progress spin before waiting", 0, 1000000},
      {"WEFT_UCX_ERR_MODE", K::kChoice, "auto", "peers without failure detection", 0, 0,
       "auto|peer"},
      // Waiting and kernels.
      {"WEFT_SPIN_US", K::kInt, "2000 (oversubscribed 0)", "spin before yielding", 0, 10000000},
      {"WEFT_YIELD_US", K::kInt, "= spin (oversubscribed 1000)", "yield before sleeping", 0, 10000000},
      {"WEFT_TINY_PATH", K::kFlag, "1", "small direct calls run a compiled step list (0: the executor)"},
      {"WEFT_KERNEL_ISA", K::kChoice, "best", "reduction kernels", 0, 0, "generic|avx2"},
      {"WEFT_HUGE_PAGES", K::kFlag, "1", "huge pages for host memory peers pin: weft's buffers of 2 MiB+, reused single-copy sources folded"},
      {"WEFT_COPY_NT_THRESHOLD", K::kBytes, "16M", "copies this large use streaming stores (0 = never)"},
      // Devices.
      {"WEFT_DEVICE", K::kText, "cuda if a GPU, else none", "device runtime: cuda, emulated[:N] or none"},
      {"WEFT_EMULATED_DELAY_US", K::kInt, "0", "emulated GPU: random delay up to N us per operation", 0, 10000000},
      {"WEFT_EMULATED_TOPO", K::kText, "nvswitch", "emulated GPUs' links: preset name or topology file"},
      {"WEFT_IPC", K::kFlag, "1", "device buffers of same-host ranks go device to device through IPC"},
      {"WEFT_IPC_WINDOW_BYTES", K::kBytes, "32M", "IPC window per rank (a call larger than it runs in rounds of half of it)", 4096},
      {"WEFT_IPC_COPY", K::kChoice, "auto", "what moves ipc copies: auto (the model: SM kernel below ~2 MB), ce (copy engine), sm (SM kernel)", 0, 0, "auto|ce|sm"},
      // Topology and selection.
      {"WEFT_TOPO_FILE", K::kText, "discovery", "saved topology or preset:NAME"},
      {"WEFT_TUNING_FILE", K::kText, "none", "measured decisions replacing the model's"},
      {"WEFT_LINK_TABLE", K::kText, "built-in", "cost model link constants"},
      {"WEFT_CALIBRATE", K::kFlag, "0", "measure each link tier at init (weft-topo --calibrate)"},
      // Compression.
      {"WEFT_COMPRESSION", K::kText, "off",
       "compress float sum/avg allreduces job-wide where it pays (':always' forces it)"},
      {"WEFT_COMPRESSION_MIN_BYTES", K::kBytes, "64K", "smaller allreduces stay uncompressed"},
      {"WEFT_COMPRESSION_FEEDBACK", K::kFlag, "1", "error feedback for WEFT_COMPRESSION"},
      {"WEFT_COMPRESSION_CHUNK_BYTES", K::kBytes, "auto", "pipeline chunk of compressed collectives (0 = not pipelined)"},
      {"WEFT_FUSE_CODEC_STEPS", K::kFlag, "1", "run compressed schedules' reduce/decode/encode runs tile by tile (0: step by step)"},
      {"WEFT_STREAM_RECV_CHAINS", K::kFlag, "1", "feed a received lane into the codec chain that reduces and encodes it as it lands, in cache (0: receive it whole first)"},
      {"WEFT_STREAM_OPERANDS", K::kFlag, "1", "feed the lanes a codec chain sums from several peers into it together as they land, in cache (0: receive them whole first)"},
  };
  return rows;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status Bad(const char* name, const std::string& value, const std::string& expected) {
  return InvalidArgument(std::string(name) + "=" + ShownValue(value) + ": expected " + expected);
}

StatusOr<const SettingInfo*> Row(const char* name, SettingKind kind) {
  const SettingInfo* row = FindSetting(name);
  if (row == nullptr || row->kind != kind)
    return InternalError(std::string(name) + " has no settings row of this kind (src/common/settings.cc)");
  return row;
}

// Integer with an optional K/M/G suffix (powers of 1024); false on anything else or overflow.
bool ParseBytes(const std::string& v, size_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (end == v.c_str() || v[0] == '-' || errno != 0) return false;
  unsigned shift = 0;
  if (*end == 'k' || *end == 'K') shift = 10, ++end;
  else if (*end == 'm' || *end == 'M') shift = 20, ++end;
  else if (*end == 'g' || *end == 'G') shift = 30, ++end;
  if (*end == 'i' || *end == 'I') ++end;  // "4KiB" reads as 4K
  if ((*end == 'b' || *end == 'B') && shift != 0) ++end;
  if (*end != '\0') return false;
  if (shift != 0 && n > (~0ULL >> shift)) return false;
  *out = static_cast<size_t>(n << shift);
  return true;
}

}  // namespace

std::string ShownValue(const std::string& value, size_t max_chars) {
  if (value.size() <= max_chars) return value;
  return value.substr(0, max_chars) + "... (" + std::to_string(value.size()) + " bytes)";
}

const std::vector<SettingInfo>& AllSettings() { return Table(); }

const SettingInfo* FindSetting(const std::string& name) {
  for (const SettingInfo& s : Table())
    if (name == s.name) return &s;
  return nullptr;
}

std::string SettingText(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

StatusOr<bool> SettingFlag(const char* name, bool fallback) {
  WEFT_ASSIGN_OR_RETURN(const SettingInfo* row, Row(name, K::kFlag));
  (void)row;
  const std::string v = SettingText(name);
  if (v.empty()) return fallback;
  const std::string l = Lower(v);
  if (l == "1" || l == "on" || l == "true" || l == "yes") return true;
  if (l == "0" || l == "off" || l == "false" || l == "no") return false;
  return Bad(name, v, "0 or 1");
}

StatusOr<int64_t> SettingInt(const char* name, int64_t fallback) {
  WEFT_ASSIGN_OR_RETURN(const SettingInfo* row, Row(name, K::kInt));
  const std::string v = SettingText(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || errno != 0 || x < row->min || x > row->max)
    return Bad(name, v, "an integer in [" + std::to_string(row->min) + ", " +
                            std::to_string(row->max) + "]");
  return static_cast<int64_t>(x);
}

StatusOr<size_t> SettingBytes(const char* name, size_t fallback) {
  WEFT_ASSIGN_OR_RETURN(const SettingInfo* row, Row(name, K::kBytes));
  const std::string v = SettingText(name);
  if (v.empty()) return fallback;
  // A row documented with the default "auto" takes the word too: the caller's default.
  if (std::strcmp(row->default_text, "auto") == 0 && Lower(v) == "auto") return fallback;
  size_t x = 0;
  if (!ParseBytes(v, &x) || x < static_cast<size_t>(row->min))
    return Bad(name, v, "a byte count >= " + std::to_string(row->min) + ", optionally with K, M or G");
  return x;
}

StatusOr<double> SettingSeconds(const char* name, double fallback) {
  WEFT_ASSIGN_OR_RETURN(const SettingInfo* row, Row(name, K::kSeconds));
  (void)row;
  const std::string v = SettingText(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(d >= 0) || !std::isfinite(d))
    return Bad(name, v, "a number of seconds >= 0");
  return d;
}

StatusOr<std::string> SettingChoice(const char* name, const std::string& fallback) {
  WEFT_ASSIGN_OR_RETURN(const SettingInfo* row, Row(name, K::kChoice));
  const std::string v = SettingText(name);
  if (v.empty()) return fallback;
  const std::string l = Lower(v);
  const std::string choices = row->choices;
  size_t start = 0;
  while (start <= choices.size()) {
    const size_t bar = std::min(choices.find('|', start), choices.size());
    if (choices.compare(start, bar - start, l) == 0 && bar - start == l.size()) return l;
    start = bar + 1;
  }
  std::string listed = choices;
  for (char& c : listed) c = c == '|' ? ',' : c;
  return Bad(name, v, "one of " + listed);
}

bool SettingFlagOr(const char* name, bool fallback) {
  StatusOr<bool> v = SettingFlag(name, fallback);
  return v.ok() ? *v : fallback;
}
int64_t SettingIntOr(const char* name, int64_t fallback) {
  StatusOr<int64_t> v = SettingInt(name, fallback);
  return v.ok() ? *v : fallback;
}
size_t SettingBytesOr(const char* name, size_t fallback) {
  StatusOr<size_t> v = SettingBytes(name, fallback);
  return v.ok() ? *v : fallback;
}
double SettingSecondsOr(const char* name, double fallback) {
  StatusOr<double> v = SettingSeconds(name, fallback);
  return v.ok() ? *v : fallback;
}

Status ValidateSettings() {
  for (const SettingInfo& s : Table()) {
    Status st;
    switch (s.kind) {
      case K::kFlag: st = SettingFlag(s.name, false).status(); break;
      case K::kInt: st = SettingInt(s.name, 0).status(); break;
      case K::kBytes: st = SettingBytes(s.name, 0).status(); break;
      case K::kSeconds: st = SettingSeconds(s.name, 0).status(); break;
      case K::kChoice: st = SettingChoice(s.name, "").status(); break;
      case K::kText: break;  // checked by its own parser where it is used
    }
    if (!st.ok()) return st;
  }
  return OkStatus();
}

std::vector<std::string> UnknownSettingsInEnvironment() {
  std::vector<std::string> unknown;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "WEFT_", 5) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    const std::string name(*e, eq == nullptr ? std::strlen(*e) : static_cast<size_t>(eq - *e));
    if (FindSetting(name) == nullptr) unknown.push_back(name);
  }
  return unknown;
}

}  // namespace weft
