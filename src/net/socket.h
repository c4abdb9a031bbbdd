// net/socket.h: the socket layer shared by the bootstrap and the TCP transport.
//
// What is here, bottom to top:
//   Secret       128-bit job secret every connection must present (constant-time compare).
//   SockAddr     an IPv4/IPv6 address + port; parsing "host:port" / "[v6]:port"; choosing
//                the local interface to listen on (WEFT_SOCKET_IFNAME / WEFT_SOCKET_FAMILY).
//   Socket       RAII fd; Listen / Connect (retrying until a deadline) / Accept; blocking
//                SendAll / RecvAll bounded by a Deadline (poll-based, never hang forever).
//   Hello        the first bytes of every weft connection {magic, version, kind, secret,
//                rank, nranks, index}; HandshakeServer accepts connections and reads their
//                hellos without blocking, dropping (never answering) wrong secrets and
//                silent clients, so one bad client cannot stall the others.
//
// Nothing here prints or exits; every error names the address (and peer) involved.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace weft {
namespace net {

// ---- secret ----

struct Secret {
  uint8_t bytes[16] = {};

  // 16 bytes from getrandom() (falls back to /dev/urandom).
  static Secret Random();
  // 32 lowercase hex digits.
  std::string Hex() const;
  // Accepts exactly 32 hex digits (either case); anything else -> InvalidArgument naming it.
  static StatusOr<Secret> FromHex(const std::string& hex);
};

// Constant-time: the time taken does not depend on where the secrets differ, so a client
// cannot guess the secret byte by byte from response timing.
bool SecretEquals(const Secret& a, const Secret& b);
inline bool operator==(const Secret& a, const Secret& b) { return SecretEquals(a, b); }
inline bool operator!=(const Secret& a, const Secret& b) { return !SecretEquals(a, b); }

// ---- addresses ----

struct SockAddr {
  sockaddr_storage storage = {};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }  // AF_INET, AF_INET6 or AF_UNSPEC (empty)
  bool empty() const { return len == 0; }
  int port() const;
  void set_port(int port);
  bool is_loopback() const;
  bool is_wildcard() const;  // 0.0.0.0 or ::
  // "1.2.3.4:5", "[::1]:5", "[fe80::1%eth0]:5"; "<unset>" when empty.
  std::string ToString() const;

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }

  static SockAddr FromSockaddr(const sockaddr* sa, socklen_t len);
  static SockAddr Loopback(int family, int port);  // 127.0.0.1 or ::1
  static SockAddr Any(int family, int port);       // 0.0.0.0 or ::
};

bool operator==(const SockAddr& a, const SockAddr& b);  // family, address and port

// Compact, endian-neutral wire form used inside the unique id and the bootstrap tables.
constexpr size_t kSockAddrWireBytes = 28;  // family u16, port u16, addr[16], scope u32, flow u32
void EncodeSockAddr(const SockAddr& addr, uint8_t out[kSockAddrWireBytes]);
StatusOr<SockAddr> DecodeSockAddr(const uint8_t in[kSockAddrWireBytes]);

// "host:port", "[v6]:port", "v6addr" is refused (ambiguous) unless bracketed; host may be a
// name resolved with getaddrinfo (the first result, IPv4 preferred unless WEFT_SOCKET_FAMILY
// says AF_INET6). Bad input -> InvalidArgument naming the string.
StatusOr<SockAddr> ParseHostPort(const std::string& host_port);

// The address (port 0) this rank listens on and advertises to peers.
//   WEFT_SOCKET_IFNAME: comma-separated interface-name prefixes to use ("eth,ib"); a leading
//     '^' excludes the listed prefixes instead ("^docker,lo"); a leading '=' (after any '^')
//     makes the names exact instead of prefixes ("=eth0", "^=docker0").
//   WEFT_SOCKET_FAMILY: AF_INET or AF_INET6 restricts the address family.
// Default (no IFNAME): the first UP non-loopback interface (skipping docker*, virbr*, veth*,
// which are host-local bridges other hosts cannot reach), else loopback.
// IPv6 link-local addresses are only used when nothing else matches.
StatusOr<SockAddr> ChooseLocalAddress();
// Same, with the two variables given explicitly (tests; empty = unset).
StatusOr<SockAddr> ChooseLocalAddress(const std::string& ifname_spec,
                                      const std::string& family_spec);

// ---- deadlines ----

// A point in time after which blocking operations give up. seconds <= 0 means "never"
// (only for callers that have their own way out, e.g. Abort()).
class Deadline {
 public:
  static Deadline After(double seconds);
  static Deadline Never() { return Deadline(); }
  bool expired() const;
  // Milliseconds left, clamped to [0, cap_ms]; cap_ms when there is no deadline.
  int RemainingMs(int cap_ms = 1000) const;
  double RemainingSeconds() const;  // large when there is no deadline
  bool never() const { return never_; }

 private:
  bool never_ = true;
  std::chrono::steady_clock::time_point when_;
};

// ---- sockets ----

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd, SockAddr peer = SockAddr()) : fd_(fd), peer_(peer) {}
  ~Socket() { Close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_), peer_(o.peer_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // The remote address (connected sockets) or the bound address (listeners).
  const SockAddr& peer() const { return peer_; }
  void Close();
  // Gives up ownership of the fd (returns it; the Socket becomes invalid).
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Wakes any thread blocked on this socket (poll returns, reads see EOF) without closing
  // the fd, so it is safe while another thread uses it. Used by Abort().
  void Shutdown();

  Status SetNonBlocking(bool on);
  Status SetNoDelay();
  // bytes <= 0 leaves the kernel's autotuning alone.
  Status SetBufferSizes(int bytes);
  StatusOr<SockAddr> LocalAddress() const;

 private:
  int fd_ = -1;
  SockAddr peer_;
};

// Binds and listens (SO_REUSEADDR, so a fixed port can be reused right after a previous job).
// port 0 picks an ephemeral port; the returned socket's peer() is the real bound address.
StatusOr<Socket> Listen(const SockAddr& addr, int backlog = 512);

// Connects, retrying ECONNREFUSED / ETIMEDOUT / EHOSTUNREACH-style transient failures until
// `timeout_s` (the other side may not be listening yet). Returns a blocking socket.
StatusOr<Socket> Connect(const SockAddr& addr, double timeout_s);

// Waits for one connection up to the deadline. Returns a blocking socket.
StatusOr<Socket> Accept(const Socket& listener, const Deadline& deadline);

// Blocking send/recv of exactly `bytes`, poll-based so the deadline holds even on blocking
// sockets. EOF / ECONNRESET / EPIPE -> RemoteError naming the peer; deadline -> TimeoutError.
Status SendAll(Socket& sock, const void* buf, size_t bytes, const Deadline& deadline);
Status RecvAll(Socket& sock, void* buf, size_t bytes, const Deadline& deadline);
// Sends to `out` and receives from `in` at the same time (ring steps: everyone sending
// first would deadlock once messages outgrow the socket buffers).
Status SendRecvAll(Socket& out, const void* send_buf, size_t send_bytes, Socket& in,
                   void* recv_buf, size_t recv_bytes, const Deadline& deadline);

// ---- handshake ----

enum class ConnKind : uint16_t {
  kBootstrapRoot = 1,  // rank -> bootstrap root
  kBootstrapRing = 2,  // rank -> next rank in the bootstrap ring
  kTcpData = 3,        // TcpTransport stream
  kRecovery = 4,       // survivor -> the lowest survivor, shrinking (core/elastic.h)
  kTest = 99,
};

struct Hello {
  ConnKind kind = ConnKind::kTest;
  Secret secret;
  int32_t rank = -1;
  int32_t nranks = 0;
  int32_t index = 0;  // e.g. stream index
};

constexpr uint32_t kHelloMagic = 0x57454654;  // "WEFT"
constexpr uint16_t kHelloVersion = 1;
constexpr size_t kHelloWireBytes = 4 + 2 + 2 + 16 + 4 + 4 + 4;

void EncodeHello(const Hello& hello, uint8_t out[kHelloWireBytes]);
// Wrong magic/version -> InvalidArgument (not a weft peer, or another weft version).
StatusOr<Hello> DecodeHello(const uint8_t in[kHelloWireBytes]);

// Client side: sends the hello (blocking, bounded by the deadline). No answer is expected: a
// server that rejects the secret just closes, which the client sees on its next read/write.
Status SendHello(Socket& sock, const Hello& hello, const Deadline& deadline);

// Server side: accepts connections and collects their hellos without ever blocking.
// A connection whose hello does not arrive within `handshake_timeout_s`, has a bad magic or
// version, a wrong secret, or a kind other than `kind`, is closed without a reply.
class HandshakeServer {
 public:
  struct Accepted {
    Socket sock;
    Hello hello;
  };

  HandshakeServer() = default;
  HandshakeServer(Socket listener, const Secret& secret, ConnKind kind,
                  double handshake_timeout_s = 10.0);
  HandshakeServer(HandshakeServer&&) = default;
  HandshakeServer& operator=(HandshakeServer&&) = default;

  const Socket& listener() const { return listener_; }
  const SockAddr& address() const { return listener_.peer(); }

  // Adds the fds worth polling (listener + connections still in handshake), POLLIN.
  void AppendPollFds(std::vector<pollfd>* fds) const;
  // Adds only the listener: a server polled in a hot loop (the TCP transport's progress)
  // does not poll connections still in handshake every round — thousands of silent
  // connections would make every round slow. It calls Step() when the listener is readable
  // and whenever StepDue() says so, which also enforces handshake deadlines on a timer.
  void AppendListenerFd(std::vector<pollfd>* fds) const;
  // True when connections are in handshake and the last Step() is kPendingStepInterval old
  // (reads the clock only when connections are in handshake).
  bool StepDue() const;
  static constexpr std::chrono::milliseconds kPendingStepInterval{5};
  // Connections in handshake beyond this evict the oldest (a flood of silent connections
  // must neither exhaust fds nor lock real peers out).
  static constexpr size_t kMaxPending = 64;
  size_t pending() const { return pending_.size(); }
  // Accepts what is pending and reads available hello bytes; never blocks. Completed, valid
  // connections are appended to `out` as blocking sockets (the caller chooses the mode).
  // Errors are only for the listener itself failing.
  Status Step(std::vector<Accepted>* out);
  // Polls up to the deadline (or until something completes) and steps; convenience for
  // blocking servers. Returns with `out` possibly empty when the wait ran out.
  Status WaitStep(const Deadline& deadline, std::vector<Accepted>* out);

  int rejected() const { return rejected_; }  // connections dropped so far (tests)
  std::string last_rejection() const { return last_rejection_; }
  void Close();

 private:
  struct Pending {
    Socket sock;
    uint8_t buf[kHelloWireBytes] = {};
    size_t got = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  void Reject(Pending& p, const std::string& why);

  Socket listener_;
  Secret secret_;
  ConnKind kind_ = ConnKind::kTest;
  double handshake_timeout_s_ = 10.0;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point last_step_;
  int rejected_ = 0;
  std::string last_rejection_;
};

// "errno text (errno N)".
std::string ErrnoString(int err);
// "1.5 s", "0.3 s", "120 s" (for messages).
std::string SecondsString(double seconds);

}  // namespace net
}  // namespace weft
