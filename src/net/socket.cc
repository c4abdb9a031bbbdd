// net/socket.cc: sockets, addresses, secrets and the connection handshake (see socket.h).
//
// EINTR: every blocking or potentially blocking call here (poll, connect, accept, send, recv,
// read) can return EINTR when a signal handler runs in this thread (profilers, the launcher's
// SIGCHLD, a debugger). It is never an error: we retry, recomputing the remaining time for
// poll, so that a stream of signals can neither fail an operation nor extend a deadline.
#include "net/socket.h"
#include "common/settings.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/log.h"

namespace weft {
namespace net {

std::string ErrnoString(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (not necessarily buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return std::string(msg) + " (errno " + std::to_string(err) + ")";
}

std::string SecondsString(double seconds) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.3g s", seconds);
  return buf;
}

// ---- secret ----

Secret Secret::Random() {
  Secret s;
  size_t got = 0;
  while (got < sizeof(s.bytes)) {
    ssize_t n = getrandom(s.bytes + got, sizeof(s.bytes) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;  // interrupted before any byte: retry
    } else {
      break;  // ENOSYS on old kernels: use /dev/urandom below
    }
  }
  if (got < sizeof(s.bytes)) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < sizeof(s.bytes)) {
      ssize_t n = read(fd, s.bytes + got, sizeof(s.bytes) - got);
      if (n > 0) got += static_cast<size_t>(n);
      else if (n < 0 && errno == EINTR) continue;
      else break;
    }
    if (fd >= 0) close(fd);
  }
  if (got < sizeof(s.bytes)) {
    // No entropy source at all: still produce something unpredictable enough to tell jobs
    // apart (this is a guard against crossed jobs, not a cryptographic authentication).
    uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    uint64_t p = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull;
    for (size_t i = got; i < sizeof(s.bytes); ++i) {
      s.bytes[i] = static_cast<uint8_t>((t >> ((i % 8) * 8)) ^ (p >> (((i + 3) % 8) * 8)));
    }
  }
  return s;
}

std::string Secret::Hex() const {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(32);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

static int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

StatusOr<Secret> Secret::FromHex(const std::string& hex) {
  if (hex.size() != 32) {
    // Never echo the value: a secret in a log or an error message is a secret no more.
    return InvalidArgument("secret: expected 32 hex digits, got " +
                           std::to_string(hex.size()) + " characters");
  }
  Secret s;
  for (size_t i = 0; i < 16; ++i) {
    int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgument("secret: character " + std::to_string(2 * i + (hi < 0 ? 0 : 1)) +
                             " is not a hex digit");
    }
    s.bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return s;
}

bool SecretEquals(const Secret& a, const Secret& b) {
  // Accumulate differences over all bytes; no early exit (constant time). volatile keeps the
  // compiler from turning the loop back into an early-exit memcmp.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < sizeof(a.bytes); ++i) diff = diff | (a.bytes[i] ^ b.bytes[i]);
  return diff == 0;
}

// ---- addresses ----

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(int port) {
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(static_cast<uint16_t>(port));
  } else if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

bool SockAddr::is_loopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a)) return a.s6_addr[12] == 127;
  }
  return false;
}

bool SockAddr::is_wildcard() const {
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(&a);
  }
  return false;
}

std::string SockAddr::ToString() const {
  char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = {};
  if (family() == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
    std::string h = host;
    if (sin6->sin6_scope_id != 0) {
      char ifname[IF_NAMESIZE] = {};
      if (if_indextoname(sin6->sin6_scope_id, ifname)) h += std::string("%") + ifname;
      else h += "%" + std::to_string(sin6->sin6_scope_id);
    }
    return "[" + h + "]:" + std::to_string(port());
  }
  return "<unset>";
}

SockAddr SockAddr::FromSockaddr(const sockaddr* sa, socklen_t len) {
  SockAddr a;
  len = std::min<socklen_t>(len, sizeof(a.storage));
  std::memcpy(&a.storage, sa, len);
  a.len = len;
  return a;
}

SockAddr SockAddr::Loopback(int family, int port) {
  SockAddr a;
  if (family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_loopback;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&a.storage);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.len = sizeof(sockaddr_in);
  }
  a.set_port(port);
  return a;
}

SockAddr SockAddr::Any(int family, int port) {
  SockAddr a;
  if (family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_any;
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&a.storage);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_ANY);
    a.len = sizeof(sockaddr_in);
  }
  a.set_port(port);
  return a;
}

bool operator==(const SockAddr& a, const SockAddr& b) {
  if (a.family() != b.family() || a.port() != b.port()) return false;
  if (a.family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b.storage)->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b.storage);
    return std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr)) == 0 &&
           x->sin6_scope_id == y->sin6_scope_id;
  }
  return a.family() == AF_UNSPEC;
}

static void Put16(uint8_t* p, uint16_t v) { p[0] = v >> 8; p[1] = v & 0xff; }
static void Put32(uint8_t* p, uint32_t v) {
  p[0] = v >> 24; p[1] = (v >> 16) & 0xff; p[2] = (v >> 8) & 0xff; p[3] = v & 0xff;
}
static uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
static uint32_t Get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}

// Wire families are fixed numbers (AF_* values differ between operating systems).
constexpr uint16_t kWireInet = 4, kWireInet6 = 6;

void EncodeSockAddr(const SockAddr& addr, uint8_t out[kSockAddrWireBytes]) {
  std::memset(out, 0, kSockAddrWireBytes);
  if (addr.family() == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&addr.storage);
    Put16(out, kWireInet);
    Put16(out + 2, static_cast<uint16_t>(addr.port()));
    std::memcpy(out + 4, &sin->sin_addr, 4);
  } else if (addr.family() == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    Put16(out, kWireInet6);
    Put16(out + 2, static_cast<uint16_t>(addr.port()));
    std::memcpy(out + 4, &sin6->sin6_addr, 16);
    Put32(out + 20, sin6->sin6_scope_id);
    Put32(out + 24, sin6->sin6_flowinfo);
  }
}

StatusOr<SockAddr> DecodeSockAddr(const uint8_t in[kSockAddrWireBytes]) {
  uint16_t fam = Get16(in);
  SockAddr a;
  if (fam == kWireInet) {
    a = SockAddr::Any(AF_INET, 0);
    std::memcpy(&reinterpret_cast<sockaddr_in*>(&a.storage)->sin_addr, in + 4, 4);
  } else if (fam == kWireInet6) {
    a = SockAddr::Any(AF_INET6, 0);
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    std::memcpy(&sin6->sin6_addr, in + 4, 16);
    sin6->sin6_scope_id = Get32(in + 20);
    sin6->sin6_flowinfo = Get32(in + 24);
  } else {
    return InvalidArgument("encoded address has unknown family " + std::to_string(fam));
  }
  a.set_port(Get16(in + 2));
  return a;
}

static int FamilyFromEnv(const std::string& spec) {
  if (spec == "AF_INET" || spec == "4" || spec == "inet" || spec == "ipv4") return AF_INET;
  if (spec == "AF_INET6" || spec == "6" || spec == "inet6" || spec == "ipv6") return AF_INET6;
  return -1;
}

StatusOr<SockAddr> ParseHostPort(const std::string& s) {
  std::string host, port_str;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return InvalidArgument("address \"" + s + "\": expected \"[ipv6]:port\"");
    }
    host = s.substr(1, close - 1);
    port_str = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument("address \"" + s + "\": expected \"host:port\" (no port)");
    }
    if (s.find(':') != colon) {
      return InvalidArgument("address \"" + s + "\": IPv6 addresses need brackets, \"[addr]:port\"");
    }
    host = s.substr(0, colon);
    port_str = s.substr(colon + 1);
  }
  if (host.empty()) return InvalidArgument("address \"" + s + "\": empty host");
  if (port_str.empty() || port_str.size() > 5 ||
      !std::all_of(port_str.begin(), port_str.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument("address \"" + s + "\": port \"" + port_str + "\" is not a number");
  }
  int port = std::atoi(port_str.c_str());
  if (port > 65535) {
    return InvalidArgument("address \"" + s + "\": port " + port_str + " is out of range 0..65535");
  }

  const std::string fam_env = SettingText("WEFT_SOCKET_FAMILY");
  int want = !fam_env.empty() ? FamilyFromEnv(fam_env.c_str()) : -1;
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc;
  do {
    rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  } while (rc == EAI_AGAIN && false);  // resolution failures are reported, not retried
  if (rc != 0 || res == nullptr) {
    return InvalidArgument("address \"" + s + "\": cannot resolve host \"" + host +
                           "\": " + gai_strerror(rc));
  }
  // Prefer IPv4 (or the family WEFT_SOCKET_FAMILY asks for) among the results.
  const addrinfo* pick = nullptr;
  int prefer = want > 0 ? want : AF_INET;
  for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == prefer) { pick = ai; break; }
  }
  if (!pick && want < 0) {
    for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
      if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) { pick = ai; break; }
    }
  }
  if (!pick) {
    freeaddrinfo(res);
    return InvalidArgument("address \"" + s + "\": host has no address of family " +
                           (!fam_env.empty() ? fam_env : std::string("AF_INET/AF_INET6")));
  }
  SockAddr a = SockAddr::FromSockaddr(pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(res);
  a.set_port(port);
  return a;
}

namespace {

struct IfnameFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  bool Matches(const std::string& ifname) const {
    for (const std::string& n : names) {
      bool hit = exact ? ifname == n : ifname.compare(0, n.size(), n) == 0;
      if (hit) return true;
    }
    return false;
  }
  bool Accepts(const std::string& ifname) const {
    return exclude ? !Matches(ifname) : Matches(ifname);
  }
};

IfnameFilter ParseIfnameSpec(std::string spec) {
  IfnameFilter f;
  if (!spec.empty() && spec[0] == '^') { f.exclude = true; spec.erase(0, 1); }
  if (!spec.empty() && spec[0] == '=') { f.exact = true; spec.erase(0, 1); }
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) f.names.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return f;
}

bool IsLinkLocal6(const sockaddr* sa) {
  if (sa->sa_family != AF_INET6) return false;
  const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
  return IN6_IS_ADDR_LINKLOCAL(&a);
}

}  // namespace

StatusOr<SockAddr> ChooseLocalAddress(const std::string& ifname_spec,
                                      const std::string& family_spec) {
  int want_family = -1;
  if (!family_spec.empty()) {
    want_family = FamilyFromEnv(family_spec);
    if (want_family < 0) {
      return InvalidArgument("WEFT_SOCKET_FAMILY=\"" + family_spec +
                             "\": expected AF_INET or AF_INET6");
    }
  }
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return SystemError("getifaddrs: " + ErrnoString(errno));

  bool have_filter = !ifname_spec.empty();
  IfnameFilter filter = ParseIfnameSpec(ifname_spec);
  IfnameFilter default_exclude = ParseIfnameSpec("^docker,virbr,veth");

  // Candidates in interface order; link-local IPv6 only as a last resort (needs a scope and
  // rarely routes between hosts).
  const ifaddrs* best = nullptr;     // first IPv4 (routes most simply between hosts)
  const ifaddrs* best_v6 = nullptr;  // first global IPv6
  const ifaddrs* fallback_link_local = nullptr;
  const ifaddrs* loopback = nullptr;
  for (const ifaddrs* ifa = ifs; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (want_family > 0 && fam != want_family) continue;
    if (!(ifa->ifa_flags & IFF_UP)) continue;
    std::string name = ifa->ifa_name ? ifa->ifa_name : "";
    bool is_lo = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    if (have_filter) {
      if (!filter.Accepts(name)) continue;
    } else {
      if (is_lo) {
        if (!loopback) loopback = ifa;
        continue;
      }
      if (!default_exclude.Accepts(name)) continue;
    }
    if (IsLinkLocal6(ifa->ifa_addr)) {
      if (!fallback_link_local) fallback_link_local = ifa;
      continue;
    }
    if (fam == AF_INET && !best) best = ifa;
    if (fam == AF_INET6 && !best_v6) best_v6 = ifa;
  }
  const ifaddrs* pick = best ? best : best_v6 ? best_v6 : fallback_link_local ? fallback_link_local : loopback;
  if (!pick) {
    freeifaddrs(ifs);
    return InvalidArgument("no usable network interface matches WEFT_SOCKET_IFNAME=\"" +
                           ShownValue(ifname_spec) + "\" WEFT_SOCKET_FAMILY=\"" + ShownValue(family_spec) + "\"");
  }
  socklen_t len = pick->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  SockAddr a = SockAddr::FromSockaddr(pick->ifa_addr, len);
  if (a.family() == AF_INET6 && IsLinkLocal6(a.get())) {
    reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_scope_id = if_nametoindex(pick->ifa_name);
  }
  freeifaddrs(ifs);
  a.set_port(0);
  return a;
}

StatusOr<SockAddr> ChooseLocalAddress() {
  return ChooseLocalAddress(SettingText("WEFT_SOCKET_IFNAME"), SettingText("WEFT_SOCKET_FAMILY"));
}

// ---- deadlines ----

Deadline Deadline::After(double seconds) {
  Deadline d;
  if (seconds > 0) {
    d.never_ = false;
    d.when_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds));
  }
  return d;
}

bool Deadline::expired() const {
  return !never_ && std::chrono::steady_clock::now() >= when_;
}

int Deadline::RemainingMs(int cap_ms) const {
  if (never_) return cap_ms;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  when_ - std::chrono::steady_clock::now()).count();
  // Round up so that a poll does not return just before the deadline and spin.
  if (left < 0) return 0;
  return static_cast<int>(std::min<long long>(left + 1, cap_ms));
}

double Deadline::RemainingSeconds() const {
  if (never_) return 1e9;
  return std::chrono::duration<double>(when_ - std::chrono::steady_clock::now()).count();
}

// ---- sockets ----

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    peer_ = o.peer_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) {
    // close() is not retried on EINTR: on Linux the fd is released even then, and retrying
    // could close an fd another thread has just been given.
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status Socket::SetNonBlocking(bool on) {
  int flags = fcntl(fd_, F_GETFL, 0);
  if (flags < 0) return SystemError("fcntl(F_GETFL) on socket to " + peer_.ToString() + ": " + ErrnoString(errno));
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd_, F_SETFL, flags) < 0) {
    return SystemError("fcntl(F_SETFL) on socket to " + peer_.ToString() + ": " + ErrnoString(errno));
  }
  return OkStatus();
}

Status Socket::SetNoDelay() {
  int one = 1;
  if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0) {
    return SystemError("TCP_NODELAY on socket to " + peer_.ToString() + ": " + ErrnoString(errno));
  }
  return OkStatus();
}

Status Socket::SetBufferSizes(int bytes) {
  if (bytes <= 0) return OkStatus();
  // The kernel caps these at net.core.{w,r}mem_max (and doubles them for bookkeeping); a cap
  // is not an error.
  if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) < 0 ||
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) < 0) {
    return SystemError("SO_SNDBUF/SO_RCVBUF=" + std::to_string(bytes) + " on socket to " +
                       peer_.ToString() + ": " + ErrnoString(errno));
  }
  return OkStatus();
}

StatusOr<SockAddr> Socket::LocalAddress() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  if (getsockname(fd_, a.get(), &a.len) < 0) {
    return SystemError("getsockname: " + ErrnoString(errno));
  }
  return a;
}

StatusOr<Socket> Listen(const SockAddr& addr, int backlog) {
  if (addr.family() != AF_INET && addr.family() != AF_INET6) {
    return InvalidArgument("listen address " + addr.ToString() + " has no IPv4/IPv6 family");
  }
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SystemError("socket() for listening on " + addr.ToString() + ": " + ErrnoString(errno));
  Socket sock(fd, addr);
  int one = 1;
  // SO_REUSEADDR: a fixed port (WEFT_ROOT=host:port) can be bound again while connections of
  // a previous job are in TIME_WAIT.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, addr.get(), addr.len) < 0) {
    return SystemError("bind to " + addr.ToString() + ": " + ErrnoString(errno));
  }
  if (listen(fd, backlog) < 0) {
    return SystemError("listen on " + addr.ToString() + ": " + ErrnoString(errno));
  }
  WEFT_ASSIGN_OR_RETURN(SockAddr bound, sock.LocalAddress());
  return Socket(sock.Release(), bound);
}

StatusOr<Socket> Connect(const SockAddr& addr, double timeout_s) {
  if (addr.family() != AF_INET && addr.family() != AF_INET6) {
    return InvalidArgument("connect address " + addr.ToString() + " has no IPv4/IPv6 family");
  }
  Deadline deadline = Deadline::After(timeout_s);
  int backoff_ms = 1;
  std::string last_error;
  while (true) {
    int fd = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return SystemError("socket() to connect to " + addr.ToString() + ": " + ErrnoString(errno));
    Socket sock(fd, addr);
    int rc = connect(fd, addr.get(), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS || err == EINTR) {
      // EINTR on a connect leaves it in progress (POSIX): wait for completion like EINPROGRESS.
      while (true) {
        pollfd p = {fd, POLLOUT, 0};
        int n = poll(&p, 1, deadline.RemainingMs(100));
        if (n < 0 && errno == EINTR) continue;
        if (n > 0) {
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          break;
        }
        if (deadline.expired()) { err = ETIMEDOUT; break; }
      }
    }
    if (err == 0) {
      WEFT_RETURN_IF_ERROR(sock.SetNonBlocking(false));
      return sock;
    }
    last_error = ErrnoString(err);
    bool transient = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET ||
                     err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN || err == ECONNABORTED;
    if (!transient) {
      return SystemError("connect to " + addr.ToString() + ": " + last_error);
    }
    if (deadline.expired()) {
      return TimeoutError("connect to " + addr.ToString() + ": still failing after " +
                          SecondsString(timeout_s) + ": " + last_error);
    }
    // Back off exponentially up to 100 ms: quick when the peer is about to listen, gentle on
    // the CPU when it is late.
    sock.Close();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoff_ms, deadline.RemainingMs(100))));
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
}

StatusOr<Socket> Accept(const Socket& listener, const Deadline& deadline) {
  while (true) {
    pollfd p = {listener.fd(), POLLIN, 0};
    int n = poll(&p, 1, deadline.RemainingMs(1000));
    if (n < 0 && errno != EINTR) return SystemError("poll on listener " + listener.peer().ToString() + ": " + ErrnoString(errno));
    if (n > 0) {
      SockAddr peer;
      peer.len = sizeof(peer.storage);
      int fd = accept4(listener.fd(), peer.get(), &peer.len, SOCK_CLOEXEC);
      if (fd >= 0) return Socket(fd, peer);
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        return SystemError("accept on " + listener.peer().ToString() + ": " + ErrnoString(errno));
      }
    }
    if (deadline.expired()) {
      return TimeoutError("no connection on " + listener.peer().ToString() + " before the deadline");
    }
  }
}

static Status IoError(const Socket& sock, const char* what, int err) {
  if (err == 0) {
    return RemoteError("peer " + sock.peer().ToString() + " closed the connection (" + what + ")");
  }
  if (err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT || err == EHOSTUNREACH) {
    return RemoteError(std::string(what) + " with peer " + sock.peer().ToString() + ": " + ErrnoString(err));
  }
  return SystemError(std::string(what) + " with peer " + sock.peer().ToString() + ": " + ErrnoString(err));
}

Status SendRecvAll(Socket& out, const void* send_buf, size_t send_bytes, Socket& in,
                   void* recv_buf, size_t recv_bytes, const Deadline& deadline) {
  const char* sp = static_cast<const char*>(send_buf);
  char* rp = static_cast<char*>(recv_buf);
  size_t sent = 0, got = 0;
  while (sent < send_bytes || got < recv_bytes) {
    pollfd fds[2];
    int nfds = 0;
    int si = -1, ri = -1;
    if (sent < send_bytes) { si = nfds; fds[nfds++] = {out.fd(), POLLOUT, 0}; }
    if (got < recv_bytes) { ri = nfds; fds[nfds++] = {in.fd(), POLLIN, 0}; }
    int n = poll(fds, nfds, deadline.RemainingMs(1000));
    if (n < 0) {
      if (errno == EINTR) continue;
      return SystemError("poll: " + ErrnoString(errno));
    }
    if (n == 0) {
      if (deadline.expired()) {
        std::string what;
        if (got < recv_bytes) what += "receiving " + std::to_string(recv_bytes - got) + " more bytes from " + in.peer().ToString();
        if (sent < send_bytes) {
          if (!what.empty()) what += " and ";
          what += "sending " + std::to_string(send_bytes - sent) + " more bytes to " + out.peer().ToString();
        }
        return TimeoutError("timed out " + what);
      }
      continue;
    }
    if (si >= 0 && fds[si].revents) {
      ssize_t w = send(out.fd(), sp + sent, send_bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent += static_cast<size_t>(w);
      else if (w < 0 && errno != EINTR && errno != EAGAIN) return IoError(out, "send", errno);
    }
    if (ri >= 0 && fds[ri].revents) {
      ssize_t r = recv(in.fd(), rp + got, recv_bytes - got, MSG_DONTWAIT);
      if (r > 0) got += static_cast<size_t>(r);
      else if (r == 0) return IoError(in, "recv", 0);
      else if (errno != EINTR && errno != EAGAIN) return IoError(in, "recv", errno);
    }
  }
  return OkStatus();
}

Status SendAll(Socket& sock, const void* buf, size_t bytes, const Deadline& deadline) {
  return SendRecvAll(sock, buf, bytes, sock, nullptr, 0, deadline);
}

Status RecvAll(Socket& sock, void* buf, size_t bytes, const Deadline& deadline) {
  return SendRecvAll(sock, nullptr, 0, sock, buf, bytes, deadline);
}

// ---- handshake ----

void EncodeHello(const Hello& h, uint8_t out[kHelloWireBytes]) {
  Put32(out, kHelloMagic);
  Put16(out + 4, kHelloVersion);
  Put16(out + 6, static_cast<uint16_t>(h.kind));
  std::memcpy(out + 8, h.secret.bytes, 16);
  Put32(out + 24, static_cast<uint32_t>(h.rank));
  Put32(out + 28, static_cast<uint32_t>(h.nranks));
  Put32(out + 32, static_cast<uint32_t>(h.index));
}

StatusOr<Hello> DecodeHello(const uint8_t in[kHelloWireBytes]) {
  uint32_t magic = Get32(in);
  if (magic != kHelloMagic) {
    return InvalidArgument("handshake magic " + std::to_string(magic) + " is not weft's");
  }
  uint16_t version = Get16(in + 4);
  if (version != kHelloVersion) {
    return InvalidArgument("handshake version " + std::to_string(version) + ", this build speaks " +
                           std::to_string(kHelloVersion));
  }
  Hello h;
  h.kind = static_cast<ConnKind>(Get16(in + 6));
  std::memcpy(h.secret.bytes, in + 8, 16);
  h.rank = static_cast<int32_t>(Get32(in + 24));
  h.nranks = static_cast<int32_t>(Get32(in + 28));
  h.index = static_cast<int32_t>(Get32(in + 32));
  return h;
}

Status SendHello(Socket& sock, const Hello& hello, const Deadline& deadline) {
  uint8_t buf[kHelloWireBytes];
  EncodeHello(hello, buf);
  return SendAll(sock, buf, sizeof(buf), deadline).WithContext("handshake");
}

HandshakeServer::HandshakeServer(Socket listener, const Secret& secret, ConnKind kind,
                                 double handshake_timeout_s)
    : listener_(std::move(listener)), secret_(secret), kind_(kind),
      handshake_timeout_s_(handshake_timeout_s) {
  // Non-blocking: Step() must never wait (the TCP transport calls it inside Progress).
  // A blocking listener would make Step() wait in accept(): without this, serve nothing
  // (Step then reports the closed listener).
  if (!listener_.SetNonBlocking(true).ok()) listener_.Close();
}

void HandshakeServer::AppendPollFds(std::vector<pollfd>* fds) const {
  if (listener_.valid()) fds->push_back({listener_.fd(), POLLIN, 0});
  for (const Pending& p : pending_) fds->push_back({p.sock.fd(), POLLIN, 0});
}

void HandshakeServer::AppendListenerFd(std::vector<pollfd>* fds) const {
  if (listener_.valid()) fds->push_back({listener_.fd(), POLLIN, 0});
}

bool HandshakeServer::StepDue() const {
  return !pending_.empty() &&
         std::chrono::steady_clock::now() - last_step_ >= kPendingStepInterval;
}

void HandshakeServer::Reject(Pending& p, const std::string& why) {
  ++rejected_;
  last_rejection_ = "connection from " + p.sock.peer().ToString() + " dropped: " + why;
  p.sock.Close();  // no reply: a wrong-secret client learns nothing
  // A warning, not an error: the server keeps serving, but a user whose job hangs at setup
  // wants to see that a connection (another job? a stale secret?) was turned away.
  WEFT_WARN("%s", last_rejection_.c_str());
}

Status HandshakeServer::Step(std::vector<Accepted>* out) {
  if (!listener_.valid()) return OkStatus();
  // Accept everything queued.
  while (true) {
    SockAddr peer;
    peer.len = sizeof(peer.storage);
    int fd = accept4(listener_.fd(), peer.get(), &peer.len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Out of fds and similar: the listener is still fine, try again on the next step.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) break;
      return SystemError("accept on " + listener_.peer().ToString() + ": " + ErrnoString(errno));
    }
    if (pending_.size() >= kMaxPending) {
      // Evict the oldest: a real peer sends its hello right after connecting, so the
      // oldest connection still silent is the least likely to be one.
      auto oldest = std::find_if(pending_.begin(), pending_.end(),
                                 [](const Pending& q) { return q.sock.valid(); });
      if (oldest != pending_.end())
        Reject(*oldest, "more than " + std::to_string(kMaxPending) +
                            " connections in handshake: the oldest is dropped");
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                    [](const Pending& q) { return !q.sock.valid(); }),
                     pending_.end());
    }
    Pending p;
    p.sock = Socket(fd, peer);
    p.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(handshake_timeout_s_));
    pending_.push_back(std::move(p));
  }
  auto now = std::chrono::steady_clock::now();
  last_step_ = now;
  for (Pending& p : pending_) {
    while (p.got < kHelloWireBytes) {
      ssize_t r = recv(p.sock.fd(), p.buf + p.got, kHelloWireBytes - p.got, MSG_DONTWAIT);
      if (r > 0) { p.got += static_cast<size_t>(r); continue; }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      Reject(p, r == 0 ? "closed before completing the handshake" : "recv: " + ErrnoString(errno));
      break;
    }
    if (!p.sock.valid()) continue;
    if (p.got < kHelloWireBytes) {
      if (now >= p.deadline) Reject(p, "no handshake within " + SecondsString(handshake_timeout_s_));
      continue;
    }
    StatusOr<Hello> hello = DecodeHello(p.buf);
    if (!hello.ok()) { Reject(p, hello.status().message()); continue; }
    if (!SecretEquals(hello->secret, secret_)) { Reject(p, "wrong secret"); continue; }
    if (hello->kind != kind_) {
      Reject(p, "connection kind " + std::to_string(static_cast<int>(hello->kind)) + ", expected " +
                    std::to_string(static_cast<int>(kind_)));
      continue;
    }
    if (!p.sock.SetNonBlocking(false).ok()) { Reject(p, "cannot make the socket blocking"); continue; }
    out->push_back(Accepted{std::move(p.sock), *hello});
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const Pending& p) { return !p.sock.valid(); }),
                 pending_.end());
  return OkStatus();
}

Status HandshakeServer::WaitStep(const Deadline& deadline, std::vector<Accepted>* out) {
  size_t before = out->size();
  while (true) {
    WEFT_RETURN_IF_ERROR(Step(out));
    if (out->size() > before || deadline.expired()) return OkStatus();
    std::vector<pollfd> fds;
    AppendPollFds(&fds);
    // Wake at least every 100 ms so handshake timeouts of silent clients are enforced.
    int n = poll(fds.data(), fds.size(), deadline.RemainingMs(100));
    if (n < 0 && errno != EINTR) return SystemError("poll on " + listener_.peer().ToString() + ": " + ErrnoString(errno));
  }
}

void HandshakeServer::Close() {
  pending_.clear();
  listener_.Close();
}

}  // namespace net
}  // namespace weft
