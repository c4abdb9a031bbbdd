// TcpTransport implementation (see tcp_transport.h for the design).
//
// All socket I/O is non-blocking and happens in Post* (an eager first write) and Progress.
// EINTR from readv/sendmsg/ppoll is retried or treated as "nothing happened this round": a
// signal must neither fail a transfer nor be mistaken for data.
#include "transports/tcp/tcp_transport.h"
#include "transports/tcp/tcp_wire.h"

#include "common/settings.h"

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>


namespace weft {

namespace {

// The frame header's format and rules live in tcp_wire.h (pure, fuzzed on its own).
using tcp_wire::kAbortMagic;
using tcp_wire::kMaxAbortNoteBytes;
constexpr size_t kHeaderBytes = tcp_wire::kFrameHeaderBytes;
// A culprit note (AnnounceCulprit) is an empty data frame on the last channel, reserved for
// it, whose tag is the rank the sender believes holds the job up. Not a failure: the stream
// stays in use. (An empty data frame keeps tcp_wire's format and rules as they are.)
constexpr uint32_t kCulpritChannel = tcp_wire::kMaxChannels - 1;
constexpr int kMaxStreams = 64;
// iovecs per sendmsg: enough to batch many small messages in one system call.
constexpr int kMaxIov = 64;

void EncodeHeader(uint32_t channel, uint64_t tag, uint64_t bytes, uint8_t out[kHeaderBytes]) {
  tcp_wire::EncodeFrameHeader(tcp_wire::kDataMagic, channel, tag, bytes, out);
}


}  // namespace

// Buffers of unexpected messages, kept for the next ones. A chunked collective's messages
// arrive before their recvs in every call (the ring allreduce's allgather chunks, sent while
// this rank still reduces), and a fresh buffer per message faulted in each of its pages as the
// socket read filled it: a 16 MiB ring allreduce with 256 KiB chunks took 7000 page faults and
// 17 ms per call, against 9.5 ms with 4 MiB chunks. Only large buffers are kept (small ones
// come from malloc's bins, already mapped), 64 MiB at most per transport.
class TcpTransport::BufferPool {
 public:
  static constexpr size_t kMinBytes = size_t{64} << 10;
  static constexpr size_t kMaxHeld = size_t{64} << 20;

  // A buffer of at least `bytes` (at most twice that, so a small message does not pin a big
  // buffer), or a new one; nullptr when the allocation fails.
  char* Take(size_t bytes, size_t* capacity) {
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].first >= bytes && free_[i].first / 2 <= bytes &&
          (best == free_.size() || free_[i].first < free_[best].first))
        best = i;
    if (best == free_.size()) {
      *capacity = std::max<size_t>(bytes, 1);
      return new (std::nothrow) char[*capacity];
    }
    *capacity = free_[best].first;
    char* data = free_[best].second.release();
    held_ -= *capacity;
    free_[best] = std::move(free_.back());
    free_.pop_back();
    return data;
  }
  void Give(std::unique_ptr<char[]> data, size_t capacity) {
    if (data == nullptr || capacity < kMinBytes || held_ + capacity > kMaxHeld) return;
    held_ += capacity;
    free_.emplace_back(capacity, std::move(data));
  }
  size_t held() const { return held_; }

 private:
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> free_;
  size_t held_ = 0;
};

struct TcpTransport::Unexpected {
  uint64_t tag = 0;
  size_t bytes = 0;
  // Not a vector: resize() would zero (and fault in) every page up front, while a recv posted
  // mid-message means only the part received so far is ever touched.
  std::unique_ptr<char[]> data;
  size_t capacity = 0;       // of data (a pooled buffer may be larger than bytes)
  BufferPool* pool = nullptr;  // where data goes back when freed
  bool complete = false;
  Stream* stream = nullptr;  // the stream still receiving it (null once complete or broken)

  // The transport's count of buffered unexpected bytes (TcpTransport::unexpected_bytes_)
  // holds this buffer's size until the buffer is freed.
  void Charge(size_t* counter, size_t n) {
    counter_ = counter;
    charged_ = n;
    *counter_ += n;
  }
  void Free() {
    if (pool != nullptr) pool->Give(std::move(data), capacity);
    data.reset();
    if (counter_ != nullptr) *counter_ -= charged_;
    counter_ = nullptr;
    charged_ = 0;
  }
  ~Unexpected() { Free(); }

 private:
  size_t* counter_ = nullptr;
  size_t charged_ = 0;
};

StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(TransportBootstrap* bootstrap,
                                                             const TcpOptions& options) {
  if (bootstrap == nullptr) return InvalidArgument("TcpTransport::Create: bootstrap is NULL");
  if (options.streams_per_peer < 1 || options.streams_per_peer > kMaxStreams) {
    return InvalidArgument("TcpTransport: streams_per_peer=" + std::to_string(options.streams_per_peer) +
                           " is outside 1.." + std::to_string(kMaxStreams));
  }
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  t->pool_ = std::make_unique<BufferPool>();
  t->rank_ = bootstrap->rank();
  t->nranks_ = bootstrap->nranks();
  t->options_ = options;
  t->secret_ = bootstrap->secret();
  const std::string me = "tcp transport rank " + std::to_string(t->rank_);

  // Listener address: explicit option, else the interface variables, else the address that
  // already reached the bootstrap root (proven routable from this host).
  Status listen_status;
  net::SockAddr addr = options.listen_addr;
  if (addr.empty()) {
    if (!SettingText("WEFT_SOCKET_IFNAME").empty() || !SettingText("WEFT_SOCKET_FAMILY").empty() ||
        bootstrap->local_address().empty()) {
      StatusOr<net::SockAddr> chosen = net::ChooseLocalAddress();
      if (chosen.ok()) addr = *chosen;
      else listen_status = chosen.status();
    } else {
      addr = bootstrap->local_address();
    }
    addr.set_port(0);
  }
  net::Socket listener;
  if (listen_status.ok()) {
    StatusOr<net::Socket> l = net::Listen(addr);
    if (l.ok()) {
      listener = std::move(*l);
      // Accepted sockets inherit buffer sizes from the listener (they must be set before the
      // SYN exchange fixes the window scale).
      (void)listener.SetBufferSizes(static_cast<int>(options.socket_buffer_bytes));  // tuning only
    } else {
      listen_status = l.status();
    }
  }
  // Exchange {address, streams}. A rank whose listener failed still takes part (with an
  // empty address), so the others fail with a message instead of waiting for a timeout.
  constexpr size_t kRecord = net::kSockAddrWireBytes + 4;
  uint8_t mine[kRecord] = {};
  if (listen_status.ok()) net::EncodeSockAddr(listener.peer(), mine);
  uint32_t streams = static_cast<uint32_t>(options.streams_per_peer);
  mine[kRecord - 4] = streams >> 24;
  mine[kRecord - 3] = (streams >> 16) & 0xff;
  mine[kRecord - 2] = (streams >> 8) & 0xff;
  mine[kRecord - 1] = streams & 0xff;
  std::vector<uint8_t> all(kRecord * static_cast<size_t>(t->nranks_));
  WEFT_RETURN_IF_ERROR_CTX(bootstrap->AllGather(mine, kRecord, all.data()), me + ": exchanging addresses");
  if (!listen_status.ok()) return listen_status.WithContext(me + ": opening the data listener");

  t->peers_.resize(t->nranks_);
  for (int r = 0; r < t->nranks_; ++r) {
    const uint8_t* rec = all.data() + kRecord * static_cast<size_t>(r);
    StatusOr<net::SockAddr> a = net::DecodeSockAddr(rec);
    if (!a.ok()) {
      return RemoteError(me + ": rank " + std::to_string(r) + " could not open its data listener");
    }
    uint32_t theirs = static_cast<uint32_t>(rec[kRecord - 4]) << 24 | rec[kRecord - 3] << 16 |
                      rec[kRecord - 2] << 8 | rec[kRecord - 1];
    Peer& p = t->peers_[r];
    p.rank = r;
    p.addr = *a;
    // Both sides of a pair compute the same count: the smaller of their settings.
    p.nstreams = static_cast<int>(std::max<uint32_t>(1, std::min<uint32_t>(theirs, streams)));
    p.streams.resize(p.nstreams);
    for (int i = 0; i < p.nstreams; ++i) p.streams[i].index = i;
  }
  t->server_ = net::HandshakeServer(std::move(listener), t->secret_, net::ConnKind::kTcpData,
                                    options.handshake_timeout_s);
  t->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->wake_fd_ < 0) return SystemError(me + ": eventfd: " + net::ErrnoString(errno));
  t->discard_.resize(64 << 10);
  t->yield_when_idle_ = options.yield_when_idle;
  t->backoff_ = Backoff(BackoffPolicy::ForNetwork(options.ranks_on_machine, options.spin_us));
  return t;
}

size_t TcpTransport::pooled_unexpected_bytes() const {
  return pool_->held();  // read between Progress calls of the owner thread, as the tests do
}

TcpTransport::~TcpTransport() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Peer& p : peers_) {
    for (Stream& s : p.streams) s.sock.Close();
  }
  server_.Close();
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string TcpTransport::PeerName(const Peer& p) const {
  return "rank " + std::to_string(p.rank) + " (" + p.addr.ToString() + ")";
}

TcpTransport::ChannelQueue& TcpTransport::Channel(Peer& p, int channel) {
  // Queues are made on first use: a header naming channel 65535 costs a pointer per channel,
  // not two deques per channel (about 80 MB per peer with libstdc++'s deque).
  if (static_cast<size_t>(channel) >= p.channels.size()) p.channels.resize(channel + 1);
  std::unique_ptr<ChannelQueue>& q = p.channels[channel];
  if (!q) q = std::make_unique<ChannelQueue>();
  return *q;
}

void TcpTransport::Complete(Peer& p, TransportRequest* req, Status st) {
  --p.pending;
  pending_.fetch_sub(1, std::memory_order_acq_rel);
  req->Complete(std::move(st));
}

Status TcpTransport::StartConnect(Peer& p) {
  p.connect_started = true;
  if (rank_ > p.rank) return OkStatus();  // the lower rank connects; we accept in Progress
  for (Stream& s : p.streams) {
    int fd = socket(p.addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      Status st = SystemError("tcp: socket() to connect to " + PeerName(p) + ": " + net::ErrnoString(errno));
      FailPeer(p, st);
      return st;
    }
    s.sock = net::Socket(fd, p.addr);
    // Tuning only (latency, window): the stream works without them.
    (void)s.sock.SetNoDelay();
    (void)s.sock.SetBufferSizes(static_cast<int>(options_.socket_buffer_bytes));  // before connect
    net::Hello hello;
    hello.kind = net::ConnKind::kTcpData;
    hello.secret = secret_;
    hello.rank = rank_;
    hello.nranks = nranks_;
    hello.index = s.index;
    uint8_t wire[net::kHelloWireBytes];
    net::EncodeHello(hello, wire);
    s.prefix.assign(reinterpret_cast<char*>(wire), sizeof(wire));
    int rc = connect(fd, p.addr.get(), p.addr.len);
    if (rc == 0) {
      s.state = StreamState::kReady;
    } else if (errno == EINPROGRESS || errno == EINTR) {
      // EINTR leaves a non-blocking connect in progress, like EINPROGRESS: wait for POLLOUT.
      s.state = StreamState::kConnecting;
    } else {
      Status st = RemoteError("tcp: connecting stream " + std::to_string(s.index) + " to " +
                              PeerName(p) + ": " + net::ErrnoString(errno));
      FailPeer(p, st);
      return st;
    }
  }
  return OkStatus();
}

bool TcpTransport::OnConnectDone(Peer& p, Stream& s) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(s.sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (err == EINPROGRESS || err == EALREADY) return true;  // spurious wake-up
  if (err != 0) {
    FailPeer(p, RemoteError("tcp: connecting stream " + std::to_string(s.index) + " to " +
                            PeerName(p) + ": " + net::ErrnoString(err)));
    return false;
  }
  s.state = StreamState::kReady;
  return true;
}

void TcpTransport::OnAccepted(net::HandshakeServer::Accepted& a) {
  int r = a.hello.rank, i = a.hello.index;
  // Only lower ranks connect to us, each stream once; anything else is not from this job's
  // correct peers (the secret matched, so it is a bug or a stale process): drop it.
  if (r < 0 || r >= rank_ || a.hello.nranks != nranks_) return;
  Peer& p = peers_[r];
  if (i < 0 || i >= p.nstreams || !p.error.ok()) return;
  Stream& s = p.streams[i];
  if (s.state != StreamState::kIdle) return;
  // Progress must never block on this socket: a stream that cannot be non-blocking is
  // dropped (the peer sees the close) rather than used.
  if (!a.sock.SetNonBlocking(true).ok()) return;
  s.sock = std::move(a.sock);
  (void)s.sock.SetNoDelay();  // latency tuning only
  s.state = StreamState::kReady;
  p.connect_started = true;
  bool moved = false;
  WriteStream(p, s, &moved);  // sends queued before the peer connected can go now
}

Status TcpTransport::PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                              TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("tcp", "send", rank_, nranks_, peer, channel,
                                     static_cast<int>(kCulpritChannel) - 1, src, req));
  const void* const buf = src.ptr;
  const size_t bytes = src.bytes;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return abort_status_.ok() ? SystemError("tcp: transport aborted") : abort_status_;
  Peer& p = peers_[peer];
  if (!p.error.ok()) return p.error;
  // Channel c travels on stream c % nstreams only: that stream's state decides.
  if (p.streams[channel % p.nstreams].state == StreamState::kClosed) {
    return ClosedPeerError(p, tag, "send");
  }
  if (!p.connect_started) WEFT_RETURN_IF_ERROR(StartConnect(p));
  Stream& s = p.streams[channel % p.nstreams];
  req->Reset();
  SendOp op;
  EncodeHeader(static_cast<uint32_t>(channel), tag, bytes, op.header);
  op.buf = static_cast<const char*>(buf);
  op.bytes = bytes;
  op.req = req;
  s.sendq.push_back(op);
  ++p.pending;
  pending_.fetch_add(1, std::memory_order_acq_rel);
  if (s.state == StreamState::kReady && s.sendq.size() == 1) {
    // Eager first write: a small message leaves now instead of at the next Progress.
    bool moved = false;
    WriteStream(p, s, &moved);
  }
  return OkStatus();
}

Status TcpTransport::PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                              TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("tcp", "recv", rank_, nranks_, peer, channel,
                                     static_cast<int>(kCulpritChannel) - 1, dst, req));
  return PostRecvOp(peer, channel, RecvOp{tag, static_cast<char*>(dst.ptr), dst.bytes, req, false});
}

Status TcpTransport::PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                                  TransportRequest* req) {
  WEFT_RETURN_IF_ERROR(CheckPostArgs("tcp", "recv", rank_, nranks_, peer, channel,
                                     static_cast<int>(kCulpritChannel) - 1, dst, req));
  return PostRecvOp(peer, channel, RecvOp{tag, static_cast<char*>(dst.ptr), dst.bytes, req, true});
}

// Arguments checked by the caller (PostRecv, PostRecvUpTo).
Status TcpTransport::PostRecvOp(int peer, int channel, const RecvOp& op) {
  TransportRequest* req = op.req;
  void* buf = op.buf;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return abort_status_.ok() ? SystemError("tcp: transport aborted") : abort_status_;
  Peer& p = peers_[peer];
  ChannelQueue& q = Channel(p, channel);
  req->Reset();
  // Messages that arrived before this recv was posted (possibly from a peer that has since
  // closed normally) are matched first, in order.
  if (!q.unexpected.empty()) {
    std::shared_ptr<Unexpected> ux = q.unexpected.front();
    if (ux->tag != op.tag || !op.Fits(ux->bytes)) {
      q.unexpected.pop_front();
      req->Complete(RecvMismatch(p, channel, op, ux->tag, ux->bytes));
      return OkStatus();
    }
    req->bytes = ux->bytes;
    if (ux->complete) {
      q.unexpected.pop_front();
      if (ux->bytes > 0) std::memcpy(buf, ux->data.get(), ux->bytes);
      req->Complete();
      return OkStatus();
    }
    if (ux->stream != nullptr) {
      // Still arriving: copy what is here once, and receive the rest in place.
      q.unexpected.pop_front();
      Stream& s = *ux->stream;
      size_t got = ux->bytes - s.rx_left;
      if (got > 0) std::memcpy(buf, ux->data.get(), got);
      ux->Free();
      s.rx = RxKind::kUser;
      s.rx_dst = static_cast<char*>(buf) + got;
      s.rx_req = req;
      s.rx_unexpected.reset();
      ux->stream = nullptr;
      ++p.pending;
      pending_.fetch_add(1, std::memory_order_acq_rel);
      return OkStatus();
    }
    // Broken off when the peer failed: fall through to the peer's error.
  }
  if (!p.error.ok()) return p.error;
  // Only this channel's stream matters: another stream's EOF may come first while data for
  // this channel is still queued behind it.
  if (p.streams[channel % p.nstreams].state == StreamState::kClosed) {
    return ClosedPeerError(p, op.tag, "recv");
  }
  if (!p.connect_started) WEFT_RETURN_IF_ERROR(StartConnect(p));
  q.posted.push_back(op);
  ++p.pending;
  pending_.fetch_add(1, std::memory_order_acq_rel);
  return OkStatus();
}

// The peer finished and closed while this rank still needs it. If it left a message of
// another call behind (e.g. it was the root of a broadcast while this rank ran an allreduce:
// the root is done after its sends), the ranks' calls differed: say so, naming both tags.
// Otherwise it left early: it is the rank that failed.
Status TcpTransport::ClosedPeerError(Peer& p, uint64_t tag, const char* what) {
  for (const std::unique_ptr<ChannelQueue>& q : p.channels) {
    if (!q) continue;
    for (const std::shared_ptr<Unexpected>& ux : q->unexpected)
      if (ux->tag != tag)
        return TagMismatch("tcp " + std::string(what) + ": " + PeerName(p) +
                               " closed its connections after sending a message of another call",
                           tag, ux->tag);
  }
  NoteOrigin(p.rank, "");
  return RemoteError("tcp " + std::string(what) + ": " + PeerName(p) + " has closed its connections");
}

Status TcpTransport::RecvMismatch(const Peer& p, int channel, const RecvOp& op, uint64_t got_tag,
                                  uint64_t got_bytes) const {
  return TagMismatch("tcp recv from " + PeerName(p) + " channel " + std::to_string(channel) +
                         ": expected tag " + std::to_string(op.tag) + " (" + (op.up_to ? "at most " : "") +
                         std::to_string(op.bytes) + " bytes), received tag " + std::to_string(got_tag) +
                         " (" + std::to_string(got_bytes) + " bytes)",
                     op.tag, got_tag);
}

bool TcpTransport::WriteStream(Peer& p, Stream& s, bool* moved) {
  if (s.state != StreamState::kReady) return true;
  while (!s.prefix.empty() || !s.sendq.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    if (!s.prefix.empty()) {
      iov[n++] = {&s.prefix[0], s.prefix.size()};
      total += s.prefix.size();
    }
    for (SendOp& op : s.sendq) {
      if (n + 2 > kMaxIov) break;
      if (op.done < kHeaderBytes) {
        iov[n++] = {op.header + op.done, kHeaderBytes - op.done};
        total += kHeaderBytes - op.done;
      }
      size_t payload_done = op.done > kHeaderBytes ? op.done - kHeaderBytes : 0;
      if (op.bytes > payload_done) {
        iov[n++] = {const_cast<char*>(op.buf) + payload_done, op.bytes - payload_done};
        total += op.bytes - payload_done;
      }
    }
    msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    // MSG_NOSIGNAL: a peer that went away must give EPIPE here, not kill the process.
    ssize_t w = sendmsg(s.sock.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      OnPeerGone(p, s, errno, "send");
      return false;
    }
    *moved = true;
    size_t left = static_cast<size_t>(w);
    size_t take = std::min(left, s.prefix.size());
    s.prefix.erase(0, take);
    left -= take;
    while (!s.sendq.empty()) {
      SendOp& op = s.sendq.front();
      size_t need = kHeaderBytes + op.bytes - op.done;
      size_t step = std::min(left, need);
      op.done += step;
      left -= step;
      if (op.done < kHeaderBytes + op.bytes) break;
      TransportRequest* req = op.req;
      req->bytes = op.bytes;
      s.sendq.pop_front();
      Complete(p, req, OkStatus());
    }
    if (static_cast<size_t>(w) < total) return true;  // socket buffer full: wait for POLLOUT
  }
  return true;
}

bool TcpTransport::ReadStream(Peer& p, Stream& s, bool* moved) {
  if (s.state != StreamState::kReady) return true;
  while (true) {
    iovec iov[2];
    int n = 0;
    if (s.rx == RxKind::kHeader) {
      iov[n++] = {s.rx_header + s.rx_header_got, kHeaderBytes - s.rx_header_got};
    } else {
      bool discard = s.rx == RxKind::kDiscard;
      size_t len = discard ? std::min(s.rx_left, discard_.size()) : s.rx_left;
      iov[n++] = {discard ? discard_.data() : s.rx_dst, len};
      // The next header in the same call, but only once this payload is fully covered.
      if (len == s.rx_left) iov[n++] = {s.rx_header, kHeaderBytes};
    }
    size_t want = 0;
    for (int i = 0; i < n; ++i) want += iov[i].iov_len;
    ssize_t r = readv(s.sock.fd(), iov, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      OnPeerGone(p, s, errno, "recv");
      return false;
    }
    if (r == 0) {
      OnPeerGone(p, s, 0, "recv");
      return false;
    }
    *moved = true;
    size_t left = static_cast<size_t>(r);
    if (s.rx != RxKind::kHeader) {
      size_t take = std::min(left, iov[0].iov_len);
      if (s.rx != RxKind::kDiscard) s.rx_dst += take;
      s.rx_left -= take;
      left -= take;
      if (s.rx_left == 0) OnPayloadDone(p, s);  // back to kHeader with rx_header_got == 0
      if (!p.error.ok()) return false;            // it was an abort note
    }
    s.rx_header_got += left;  // whatever remains landed in the header buffer
    if (s.rx_header_got == kHeaderBytes && !OnHeader(p, s)) return false;
    if (static_cast<size_t>(r) < want) return true;  // drained for now
  }
}

bool TcpTransport::OnHeader(Peer& p, Stream& s) {
  s.rx_header_got = 0;
  StatusOr<tcp_wire::TcpFrameHeader> decoded = tcp_wire::DecodeFrameHeader(s.rx_header, tcp_wire::kMaxFrameBytes);
  if (decoded.ok() && decoded->kind == tcp_wire::FrameKind::kAbortNote &&
      decoded->channel >= static_cast<uint32_t>(nranks_)) {
    decoded = InternalError("bad frame header: abort note from origin rank " + std::to_string(decoded->channel) +
                            " (the job has " + std::to_string(nranks_) + " ranks)");
  }
  if (!decoded.ok()) {
    FailPeer(p, InternalError("tcp: stream " + std::to_string(s.index) + " from " + PeerName(p) +
                              " is out of sync (" + decoded.status().message() + ")"));
    return false;
  }
  const tcp_wire::TcpFrameHeader& h = *decoded;
  if (h.kind == tcp_wire::FrameKind::kAbortNote) {
    s.rx_channel = static_cast<int>(h.channel);  // the origin
    s.abort_note.assign(h.bytes, '\0');
    s.rx = RxKind::kAbortNote;
    s.rx_dst = &s.abort_note[0];
    s.rx_left = h.bytes;
    if (h.bytes == 0) OnPayloadDone(p, s);
    return p.error.ok();
  }
  if (h.channel == kCulpritChannel && h.bytes == 0 && h.tag < static_cast<uint64_t>(nranks_)) {
    p.announced_culprit = static_cast<int>(h.tag);
    return true;  // not a failure: the next header follows
  }
  ChannelQueue& q = Channel(p, static_cast<int>(h.channel));
  s.rx_tag = h.tag;
  s.rx_channel = static_cast<int>(h.channel);
  s.rx_left = h.bytes;
  if (!q.posted.empty()) {
    RecvOp op = q.posted.front();
    q.posted.pop_front();
    if (op.tag != h.tag || !op.Fits(h.bytes)) {
      Complete(p, op.req, RecvMismatch(p, static_cast<int>(h.channel), op, h.tag, h.bytes));
      s.rx = RxKind::kDiscard;  // drop the payload; the stream stays usable
    } else {
      s.rx = RxKind::kUser;
      s.rx_dst = op.buf;
      s.rx_req = op.req;
      op.req->bytes = h.bytes;
    }
  } else if (!StartUnexpected(p, s, q, h.tag, h.bytes)) {
    return false;
  }
  if (h.bytes == 0) OnPayloadDone(p, s);
  return true;
}

// A message whose recv is not posted yet is buffered, within options_.max_unexpected_bytes
// for all peers together: the size comes off the wire, and a desynchronized or hostile peer
// must fail, not make this rank commit (or, under ASan, shadow) any size it names — found by
// fuzz/targets/tcp_frame (fuzz/crashes/tcp_frame-rss-over-2g-unexpected-queue).
bool TcpTransport::StartUnexpected(Peer& p, Stream& s, ChannelQueue& q, uint64_t tag, uint64_t bytes) {
  const size_t cap = options_.max_unexpected_bytes;
  char* data = nullptr;
  size_t capacity = 0;
  if (bytes <= cap && unexpected_bytes_ <= cap - bytes) data = pool_->Take(bytes, &capacity);
  if (data == nullptr) {
    FailPeer(p, InternalError(
                    "tcp: stream " + std::to_string(s.index) + " from " + PeerName(p) + " announced a " +
                    std::to_string(bytes) + "-byte message on channel " + std::to_string(s.rx_channel) +
                    " before its recv was posted, with " + std::to_string(unexpected_bytes_) +
                    " bytes already buffered; the limit is " + std::to_string(cap) +
                    " (TcpOptions::max_unexpected_bytes, WEFT_TCP_MAX_UNEXPECTED_BYTES)" +
                    (bytes <= cap && unexpected_bytes_ <= cap - bytes ? " but the allocation failed" : "") +
                    ": the peer is out of sync, or a recv was posted far too late"));
    return false;
  }
  auto ux = std::make_shared<Unexpected>();
  ux->tag = tag;
  ux->bytes = bytes;
  ux->data.reset(data);
  ux->capacity = capacity;
  ux->pool = pool_.get();
  ux->Charge(&unexpected_bytes_, bytes);
  ux->stream = &s;
  q.unexpected.push_back(ux);
  s.rx = RxKind::kUnexpected;
  s.rx_dst = ux->data.get();
  s.rx_unexpected = std::move(ux);
  return true;
}

void TcpTransport::OnPayloadDone(Peer& p, Stream& s) {
  switch (s.rx) {
    case RxKind::kUser: {
      TransportRequest* req = s.rx_req;
      s.rx_req = nullptr;
      Complete(p, req, OkStatus());
      break;
    }
    case RxKind::kUnexpected:
      s.rx_unexpected->complete = true;
      s.rx_unexpected->stream = nullptr;
      s.rx_unexpected.reset();
      break;
    case RxKind::kAbortNote:
      OnAbortNote(p, s);  // fails p: its streams are closed and reset
      return;
    case RxKind::kDiscard:
    case RxKind::kHeader:
      break;
  }
  s.rx = RxKind::kHeader;
  s.rx_header_got = 0;
  s.rx_dst = nullptr;
  s.rx_left = 0;
}

void TcpTransport::OnPeerGone(Peer& p, Stream& s, int err, const char* during) {
  // A peer that aborted sent an abort note before closing, but our send can fail (EPIPE)
  // before we read it: read what the socket still holds first, so the note names the origin.
  if (std::strcmp(during, "send") == 0 && !s.reading_after_send_error) {
    s.reading_after_send_error = true;
    bool moved = false;
    ReadStream(p, s, &moved);  // on EOF or error it comes back here with "recv"
    s.reading_after_send_error = false;
    if (!p.error.ok() || s.state == StreamState::kClosed) return;
  }
  bool mid_message = s.rx != RxKind::kHeader || s.rx_header_got > 0;
  if (p.pending > 0 || mid_message) {
    std::string why = err == 0 ? "closed the connection" : net::ErrnoString(err);
    NoteOrigin(p.rank, "");
    FailPeer(p, RemoteError("tcp: " + PeerName(p) + " " + why + " (stream " + std::to_string(s.index) +
                            ", " + during + ") with " + std::to_string(p.pending) +
                            " request(s) pending" + (mid_message ? " in the middle of a message" : "")));
    return;
  }
  // Normal shutdown: the peer finished and closed. Not an error unless someone asks for more.
  s.sock.Close();
  s.state = StreamState::kClosed;
}

void TcpTransport::NoteOrigin(int origin, const std::string& reason) {
  failure_.Note(origin, reason);
}

int TcpTransport::FailedOrigin() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_.failed();
}

void TcpTransport::NoteFailedOrigin(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank >= 0 && rank < nranks_ && rank != rank_) NoteOrigin(rank, "");
}

void TcpTransport::OnAbortNote(Peer& p, Stream& s) {
  int origin = s.rx_channel;
  std::string reason = s.abort_note;
  s.abort_note.clear();
  std::string msg = origin == p.rank
                        ? "tcp: " + PeerName(p) + " aborted the communicator: " + reason
                        : "tcp: rank " + std::to_string(origin) + " failed (reported by " + PeerName(p) +
                              "): " + reason;
  // A note always means the job is failing (a finished communicator's destroy sends none),
  // so its origin is the one to forward when this rank aborts in turn — even if this rank
  // has not yet posted anything to p and only fails when it does.
  NoteOrigin(origin, reason);
  if (p.pending > 0) {
    FailPeer(p, RemoteError(msg));
    return;
  }
  // Nothing of ours waits on p yet: later requests to it fail with the note, but this round
  // is not an error.
  Status keep = round_error_;
  FailPeer(p, RemoteError(msg));
  round_error_ = keep;
}

namespace {

using AbortClock = std::chrono::steady_clock;

// Reads and drops what the peer sent us (we are aborting): keeps a peer that is blocked
// writing to us moving, so it reads our note, and lets close() send FIN rather than a reset.
void DrainIncoming(int fd, std::vector<char>& sink) {
  for (int reads = 0; reads < 256; ++reads) {  // bounded: a streaming peer must not keep us
    ssize_t r = recv(fd, sink.data(), sink.size(), MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
  }
}

// Writes [data, data + n) on a non-blocking socket before `deadline`; false if it could not.
bool WriteBefore(int fd, const char* data, size_t n, AbortClock::time_point deadline, std::vector<char>& sink) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - AbortClock::now()).count();
    if (left <= 0) return false;
    DrainIncoming(fd, sink);
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 10)));
  }
  return true;
}

}  // namespace

// A note can only follow a whole message, so a half-sent one is finished first (its payload
// is the caller's buffer, still valid while Abort runs inside the failing call), within a
// bound shared by all peers: Abort must not hang on a peer that stopped reading.
void TcpTransport::SendAbortNotes(const Status& why) {
  int origin = failure_.NoteOrigin(rank_);
  std::string reason = failure_.NoteReason(why.message());
  if (reason.size() > kMaxAbortNoteBytes) reason.resize(kMaxAbortNoteBytes);
  std::string note(kHeaderBytes, '\0');
  tcp_wire::EncodeFrameHeader(kAbortMagic, static_cast<uint32_t>(origin), 0, reason.size(),
                              reinterpret_cast<uint8_t*>(&note[0]));
  note += reason;
  const AbortClock::time_point deadline = AbortClock::now() + std::chrono::milliseconds(200);
  ConnectForNotes(origin, deadline);
  for (Peer& p : peers_) {
    if (p.rank == rank_ || p.rank == origin || !p.error.ok()) continue;
    (void)SendNote(p, note, /*finish_partial=*/true, deadline);
  }
}

// A note needs a stream, and the lower rank of a pair makes it. A stream still connecting
// (this rank posted to p just before failing: on a loaded host the SYN exchange has not
// finished) or none at all (p waits for data this rank never got to send) would carry no
// note, and p would wait for its timeout: its half-open handshake just closes. So before the
// notes go, every higher peer gets a stream and the connects finish, within the notes' bound.
void TcpTransport::ConnectForNotes(int origin, AbortClock::time_point deadline) {
  for (Peer& p : peers_) {
    if (p.rank <= rank_ || p.rank == origin || !p.error.ok() || p.connect_started) continue;
    (void)StartConnect(p);  // a failure fails p: it gets no note, as a dead peer needs none
  }
  std::vector<pollfd> fds;
  std::vector<std::pair<Peer*, Stream*>> owners;
  while (true) {
    fds.clear();
    owners.clear();
    for (Peer& p : peers_) {
      if (p.rank == rank_ || !p.error.ok()) continue;
      for (Stream& s : p.streams)
        if (s.state == StreamState::kConnecting) {
          fds.push_back({s.sock.fd(), POLLOUT, 0});
          owners.push_back({&p, &s});
        }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - AbortClock::now()).count();
    if (fds.empty() || left <= 0) return;
    if (poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 10))) < 0 && errno != EINTR)
      return;
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents != 0 && owners[i].first->error.ok()) (void)OnConnectDone(*owners[i].first, *owners[i].second);
  }
}

bool TcpTransport::SendNote(Peer& p, const std::string& note, bool finish_partial,
                            AbortClock::time_point deadline) {
  // One note per peer, on its first usable stream (a stream whose handshake is out).
  for (Stream& st : p.streams) {
    if (st.state != StreamState::kReady) continue;
    // The hello goes first. Aborting, this rank writes it here; a transport that lives on
    // leaves it to WriteStream, which owns the stream's order.
    if (!st.prefix.empty() && !finish_partial) continue;
    const bool partial = !st.sendq.empty() && st.sendq.front().done > 0;
    // Without finishing it (the transport lives on), a half-sent message rules the stream out.
    if (partial && !finish_partial) continue;
    const int fd = st.sock.fd();
    if (!st.prefix.empty()) {
      if (!WriteBefore(fd, st.prefix.data(), st.prefix.size(), deadline, discard_)) return false;
      st.prefix.clear();
    }
    bool boundary = true;
    if (partial) {
      SendOp& op = st.sendq.front();
      if (op.done < kHeaderBytes)
        boundary = WriteBefore(fd, reinterpret_cast<const char*>(op.header) + op.done, kHeaderBytes - op.done,
                               deadline, discard_);
      size_t payload_done = op.done > kHeaderBytes ? op.done - kHeaderBytes : 0;
      boundary = boundary && WriteBefore(fd, op.buf + payload_done, op.bytes - payload_done, deadline, discard_);
    }
    bool sent = boundary && WriteBefore(fd, note.data(), note.size(), deadline, discard_);
    if (finish_partial) DrainIncoming(fd, discard_);  // aborting: what they send is dropped
    return sent;
  }
  return false;
}

void TcpTransport::AnnounceCulprit(int culprit) {
  if (culprit < 0 || culprit >= nranks_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!abort_status_.ok()) return;
  std::string note(kHeaderBytes, '\0');
  EncodeHeader(kCulpritChannel, static_cast<uint64_t>(culprit), 0, reinterpret_cast<uint8_t*>(&note[0]));
  // Short: a peer that is not reading (the stopped rank) must not hold the announcement up.
  const AbortClock::time_point deadline = AbortClock::now() + std::chrono::milliseconds(20);
  for (Peer& p : peers_)
    if (p.rank != rank_ && p.rank != culprit && p.error.ok())
      (void)SendNote(p, note, /*finish_partial=*/false, deadline);
}

int TcpTransport::AnnouncedCulprit(int peer) const {
  if (peer < 0 || peer >= nranks_) return -1;
  return peers_[peer].announced_culprit;
}

void TcpTransport::FailPeer(Peer& p, const Status& st) {
  if (!p.error.ok()) return;
  p.error = st;
  if (round_error_.ok()) round_error_ = st;
  for (Stream& s : p.streams) {
    while (!s.sendq.empty()) {
      TransportRequest* req = s.sendq.front().req;
      s.sendq.pop_front();
      Complete(p, req, st);
    }
    if (s.rx == RxKind::kUser && s.rx_req != nullptr) Complete(p, s.rx_req, st);
    if (s.rx_unexpected) s.rx_unexpected->stream = nullptr;  // broken: never completes
    s.rx_unexpected.reset();
    s.rx_req = nullptr;
    s.rx = RxKind::kHeader;
    s.rx_header_got = 0;
    s.prefix.clear();
    s.sock.Close();
    s.state = StreamState::kClosed;
  }
  for (std::unique_ptr<ChannelQueue>& q : p.channels) {
    if (!q) continue;
    while (!q->posted.empty()) {
      TransportRequest* req = q->posted.front().req;
      q->posted.pop_front();
      Complete(p, req, st);
    }
    // What this peer sent ahead is dropped with it: later recvs from it fail with p.error,
    // and its buffers go back to the unexpected budget at once.
    q->unexpected.clear();
  }
}

// The poll set: the wake fd (when the caller may block), the listener, and each live stream
// (POLLOUT while connecting or with bytes queued).
void TcpTransport::BuildPollSet(bool may_block) {
  fds_.clear();
  owners_.clear();
  if (may_block) {
    // The wake fd only matters when we may block.
    fds_.push_back({wake_fd_, POLLIN, 0});
    owners_.push_back({-2, 0});
  }
  // Only the listener: connections still in handshake (at most HandshakeServer::kMaxPending)
  // are read by Step() when the listener is readable or every kPendingStepInterval (StepDue),
  // which also enforces their deadlines — so silent unauthenticated connections neither cost
  // every progress round a poll entry each nor stay open (issue 11, defect 4).
  server_.AppendListenerFd(&fds_);
  owners_.resize(fds_.size(), FdOwner{-1, 0});
  for (Peer& p : peers_) {
    if (p.rank == rank_ || !p.error.ok()) continue;
    for (Stream& s : p.streams) {
      if (!s.sock.valid()) continue;
      short events;
      if (s.state == StreamState::kConnecting) {
        events = POLLOUT;
      } else if (s.state == StreamState::kReady) {
        events = POLLIN;
        if (!s.prefix.empty() || !s.sendq.empty()) events |= POLLOUT;
      } else {
        continue;
      }
      fds_.push_back({s.sock.fd(), events, 0});
      owners_.push_back({p.rank, s.index});
    }
  }
}

// Serves the fds ppoll found ready: the wake fd, the listener (noted for the caller), and
// each stream's connect completion, reads and writes.
void TcpTransport::HandleReady(bool* moved, bool* server_ready) {
  for (size_t i = 0; i < fds_.size(); ++i) {
    short re = fds_[i].revents;
    if (re == 0) continue;
    const FdOwner& o = owners_[i];
    if (o.peer == -2) {
      uint64_t v;
      while (read(wake_fd_, &v, sizeof(v)) < 0 && errno == EINTR) {
      }
      *moved = true;  // return to the caller: Abort() wants the lock
      continue;
    }
    if (o.peer == -1) {
      *server_ready = true;
      continue;
    }
    Peer& p = peers_[o.peer];
    Stream& s = p.streams[o.stream];
    // The stream may have been closed earlier in this round (its peer failed).
    if (!p.error.ok() || s.sock.fd() != fds_[i].fd) continue;
    bool just_connected = false;
    if (s.state == StreamState::kConnecting) {
      if (!OnConnectDone(p, s)) { *moved = true; continue; }
      if (s.state != StreamState::kReady) continue;
      just_connected = *moved = true;
    }
    if ((re & (POLLIN | POLLHUP | POLLERR)) && !just_connected) {
      if (!ReadStream(p, s, moved)) { *moved = true; continue; }
    }
    if (just_connected || (re & (POLLOUT | POLLERR))) {
      if (!WriteStream(p, s, moved)) { *moved = true; continue; }
    }
  }
}

bool TcpTransport::PollOnce(int64_t timeout_ns) {
  BuildPollSet(timeout_ns > 0);
  if (server_.pending() > 0) {
    // A blocking wait must still step the handshakes on time (their fds are not polled).
    timeout_ns = std::min<int64_t>(
        timeout_ns,
        std::chrono::duration_cast<std::chrono::nanoseconds>(net::HandshakeServer::kPendingStepInterval).count());
  }
  timespec ts;
  ts.tv_sec = timeout_ns / 1000000000;
  ts.tv_nsec = timeout_ns % 1000000000;
  int n = ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  if (n < 0) {
    if (errno != EINTR && round_error_.ok()) round_error_ = SystemError("tcp: ppoll: " + net::ErrnoString(errno));
    return false;
  }
  bool moved = false, server_ready = false;
  // n == 0 (nothing ready) still reaches the handshake timer below: silent connections must
  // be dropped on time even when no socket ever becomes readable.
  if (n > 0) HandleReady(&moved, &server_ready);
  if (server_ready || server_.StepDue()) {
    std::vector<net::HandshakeServer::Accepted> accepted;
    Status st = server_.Step(&accepted);
    if (!st.ok() && round_error_.ok()) round_error_ = st.WithContext("tcp: data listener");
    for (auto& a : accepted) OnAccepted(a);
    if (!accepted.empty()) moved = true;
  }
  return moved;
}

Status TcpTransport::Progress(int timeout_us) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return OkStatus();  // requests were failed by Abort
  round_error_ = OkStatus();
  if (timeout_us <= 0 || pending_.load() == 0) {
    bool moved = PollOnce(0);
    if (moved) backoff_.Reset();
    if (!moved && yield_when_idle_ && pending_.load() > 0) {
      // Callers spin on Progress(0) while they wait. On a busy host the peer we wait for is
      // often runnable on this very core (the scheduler places a woken loopback peer next
      // to its waker), and would only run once our spin ends: yielding lets it go first.
      // Measured with 64 spin rounds as the executor does: 8-byte round trip 81 us -> 18 us.
      sched_yield();
    }
  } else {
    using Clock = std::chrono::steady_clock;
    Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + std::chrono::microseconds(timeout_us);
    bool moved = false;
    // Spin stage (TcpOptions::spin_us): the reply to a small message often arrives within
    // microseconds, sooner than a sleep/wake-up round trip through the scheduler. The idle
    // clock runs across calls, so a long wait spins once and then only sleeps.
    while (!moved && !aborted_.load() && backoff_.Pause() == Backoff::Stage::kSpin &&
           Clock::now() < deadline)
      moved = PollOnce(0);
    if (!moved && !aborted_.load()) {
      // One blocking ppoll: it returns at once when something is ready, so no separate
      // non-blocking pass is needed first.
      int64_t left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now()).count();
      moved = PollOnce(std::max<int64_t>(left_ns, 0));
    }
    if (moved) backoff_.Reset();
  }
  Status st = round_error_;
  round_error_ = OkStatus();
  return st;
}

void TcpTransport::Abort(const Status& why) {
  aborted_.store(true);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;  // a full counter already means "wake up"
  }
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(why);
}

void TcpTransport::AbortLocked(const Status& why) {
  if (!abort_status_.ok()) return;  // idempotent
  abort_status_ = why.ok() ? SystemError("tcp: transport aborted") : why;
  // Notes only when something failed or was cut short: weftCommDestroy of a finished
  // communicator aborts its transports too, and its peers must see a normal close (EOF),
  // which fails only what still waits on us — with the message that says why (e.g. the
  // mismatch a peer's recv finds in our last message) rather than our note.
  // A revoke is announced even by an idle rank: stopping the peers is its purpose.
  if (pending_.load(std::memory_order_acquire) > 0 || failure_.known() ||
      abort_status_.message().find(kRevokedMarker) != std::string::npos)
    SendAbortNotes(abort_status_);
  for (Peer& p : peers_) {
    if (p.rank == rank_) continue;
    FailPeer(p, abort_status_);
    for (Stream& s : p.streams) s.sock.Close();  // also streams of peers that failed earlier
  }
  server_.Close();
  round_error_ = OkStatus();
}

}  // namespace weft
