// TcpTransport: weft::Transport over TCP sockets, for ranks on different hosts (and the
// fallback between any two ranks).
//
// Connections: Create() opens this rank's data listener and allgathers the listener addresses
// through the bootstrap. A pair of ranks connects lazily, on the first request between them:
// the lower rank opens `streams` non-blocking connections to the higher one, each starting
// with the weft handshake (secret, rank, stream index); the higher rank accepts inside
// Progress(), so neither side ever blocks, and drops connections with a wrong secret.
// (Under rendezvous semantics — a send may complete only once its recv is posted, which the
// schedule checker guarantees — the lower rank always touches the pair before the higher
// rank's first send can be required to finish, so waiting for it cannot deadlock.)
//
// Data: channel c of a pair travels on stream c % streams, so messages of one channel stay
// ordered, and several streams fill a fat link in parallel. Each message is a 24-byte header
// {magic, channel, tag, bytes} followed by the payload. The receiver reads the payload
// straight into the posted buffer (readv also pulls the next header in the same call). A
// message whose recv is not posted yet is received into a temporary buffer; when the recv is
// posted mid-message, what arrived so far is copied once and the rest goes to the user buffer.
// Such buffers are bounded (TcpOptions::max_unexpected_bytes, all peers together): a header
// whose unexpected message would exceed it fails that peer as out of sync, and a failed
// peer's buffered messages are freed with it. Headers are judged by tcp_wire.h.
// A header whose tag or size differs from the posted recv fails that recv with
// InternalError naming peer, channel, expected and received tag/bytes.
//
// Waiting: Progress(0) polls all sockets once and, when nothing moved while requests are
// pending, calls sched_yield() (so a peer runnable on this core is not starved by our
// caller's spinning). Progress(timeout_us > 0): when nothing can move it spins as the waiting
// policy says (TcpOptions::spin_us: zero-timeout polls) and then blocks in ppoll() until data arrives, the timeout
// passes, or Abort() wakes it through an eventfd — so waiting ranks give the CPU back.
//
// Failures: a peer that closes or resets while requests to it are pending fails them (and
// Progress) with RemoteError naming its rank and address, as soon as the kernel reports it.
// A peer that closes with nothing pending is a normal shutdown; later requests to it fail.
// Blame travels (issue 11): Abort() with requests pending or after a peer failure (not the
// abort of a finished communicator, whose peers see a normal close) first sends every
// connected peer an abort note — a header
// with its own magic naming the rank that failed (the peer this transport saw die, the origin
// named in a note it received, else itself) and the reason — then closes. A receiver fails
// that peer with "rank O failed (reported by rank P)", and forwards the same origin when it
// aborts in turn, so a survivor that is not the failed rank's neighbour names the failed rank
// and not its healthy neighbour. A note cannot interrupt a payload: a half-sent message is
// finished first; all of it within 200 ms per Abort (a peer that stopped reading gets no note
// and sees the close, as before).
//
// Threading: one thread at a time calls Post*/Progress; Abort() may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "net/socket.h"
#include "transports/bootstrap_iface.h"
#include "transports/tcp/tcp_options.h"
#include "transports/transport.h"

namespace weft {


class TcpTransport : public Transport {
 public:
  // Collective over the bootstrap's ranks: opens this rank's data listener and exchanges
  // addresses (and stream counts: a pair uses the smaller of its two) through `bootstrap`.
  // The bootstrap must outlive nothing here: only its rank, size and secret are kept.
  static StatusOr<std::unique_ptr<TcpTransport>> Create(TransportBootstrap* bootstrap,
                                                       const TcpOptions& options);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  using Transport::PostRecv;
  using Transport::PostRecvUpTo;
  using Transport::PostSend;
  Status PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                  TransportRequest* req) override;
  Status PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                  TransportRequest* req) override;
  Status PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                      TransportRequest* req) override;
  Status Progress(int timeout_us) override;
  bool HasPending() const override { return pending_.load(std::memory_order_acquire) > 0; }
  void Abort(const Status& why) override;
  void AnnounceCulprit(int culprit) override;
  int AnnouncedCulprit(int peer) const override;
  int FailedOrigin() const override;
  void NoteFailedOrigin(int rank) override;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const net::SockAddr& listen_address() const { return server_.address(); }
  const net::SockAddr& peer_address(int peer) const { return peers_[peer].addr; }
  // Connections dropped at the handshake (wrong secret, silent, garbage): for tests/logs.
  int rejected_connections() const { return server_.rejected(); }
  // Bytes of unexpected messages buffered now (tests; see TcpOptions::max_unexpected_bytes).
  size_t buffered_unexpected_bytes() const { return unexpected_bytes_; }
  // Bytes of freed unexpected-message buffers kept for the next ones (tests).
  size_t pooled_unexpected_bytes() const;
  const TcpOptions& options() const { return options_; }
  // How Progress(timeout > 0) waits (TcpOptions::spin_us, ranks_on_machine).
  const BackoffPolicy& waiting_policy() const { return backoff_.policy(); }

 private:
  struct Unexpected;
  class BufferPool;
  struct SendOp {
    uint8_t header[24];
    const char* buf;
    size_t bytes;
    size_t done = 0;  // bytes of header + payload handed to the kernel
    TransportRequest* req;
  };
  struct RecvOp {
    uint64_t tag;
    char* buf;
    size_t bytes;
    TransportRequest* req;
    bool up_to = false;  // `bytes` is a maximum (PostRecvUpTo)
    // Whether a message of `got` bytes may land in this recv.
    bool Fits(uint64_t got) const { return up_to ? got <= bytes : got == bytes; }
  };
  // kIdle: not connected yet (the higher rank waits for the lower one to connect).
  // kClosed: the peer closed it with nothing pending (normal shutdown), or it failed.
  enum class StreamState { kIdle, kConnecting, kReady, kClosed };
  enum class RxKind { kHeader, kUser, kUnexpected, kDiscard, kAbortNote };
  struct Stream {
    int index = 0;
    net::Socket sock;
    StreamState state = StreamState::kIdle;
    std::string prefix;  // handshake bytes still to send (connector side)
    std::deque<SendOp> sendq;
    // Receive state machine.
    RxKind rx = RxKind::kHeader;
    uint8_t rx_header[24];
    size_t rx_header_got = 0;
    char* rx_dst = nullptr;
    size_t rx_left = 0;
    uint64_t rx_tag = 0;
    int rx_channel = 0;
    TransportRequest* rx_req = nullptr;
    std::shared_ptr<Unexpected> rx_unexpected;
    std::string abort_note;  // text of an abort note being received
    bool reading_after_send_error = false;  // OnPeerGone is reading what is left
  };
  struct ChannelQueue {
    std::deque<RecvOp> posted;
    std::deque<std::shared_ptr<Unexpected>> unexpected;
  };
  struct Peer {
    int rank = -1;
    net::SockAddr addr;
    int nstreams = 1;
    bool connect_started = false;
    Status error;         // sticky failure
    std::vector<Stream> streams;
    std::vector<std::unique_ptr<ChannelQueue>> channels;  // made on first use (Channel())
    int pending = 0;  // requests to/from this peer not yet done
    int announced_culprit = -1;  // AnnounceCulprit's note from this peer, -1 = none yet
  };

  TcpTransport() = default;
  Status PostRecvOp(int peer, int channel, const RecvOp& op);
  Status RecvMismatch(const Peer& p, int channel, const RecvOp& op, uint64_t got_tag,
                      uint64_t got_bytes) const;
  // The error for a send/recv (`what`) of call `tag` to a peer that closed normally.
  Status ClosedPeerError(Peer& p, uint64_t tag, const char* what);
  Status StartConnect(Peer& p);
  ChannelQueue& Channel(Peer& p, int channel);
  void Complete(Peer& p, TransportRequest* req, Status st);
  // Non-blocking I/O on one stream; return false when the peer failed.
  bool WriteStream(Peer& p, Stream& s, bool* moved);
  bool ReadStream(Peer& p, Stream& s, bool* moved);
  bool OnHeader(Peer& p, Stream& s);
  bool StartUnexpected(Peer& p, Stream& s, ChannelQueue& q, uint64_t tag, uint64_t bytes);
  void OnPayloadDone(Peer& p, Stream& s);
  bool OnConnectDone(Peer& p, Stream& s);
  void OnAccepted(net::HandshakeServer::Accepted& a);
  // The peer hung up or broke: fail (when anything is pending) or mark closed.
  void OnPeerGone(Peer& p, Stream& s, int err, const char* during);
  void FailPeer(Peer& p, const Status& st);
  // An abort note from p has fully arrived: fail p naming the origin it reports.
  void OnAbortNote(Peer& p, Stream& s);
  // Abort: tells every connected peer which rank failed and why (best effort, never blocks).
  void SendAbortNotes(const Status& why);
  // Abort: gives every higher peer (not `origin`) a connected stream for its note, by `deadline`.
  void ConnectForNotes(int origin, std::chrono::steady_clock::time_point deadline);
  // Writes a whole note (header + text) to p on its first stream that is at a message
  // boundary; false if none is or the write did not finish before `deadline`.
  bool SendNote(Peer& p, const std::string& note, bool finish_partial,
                std::chrono::steady_clock::time_point deadline);
  void NoteOrigin(int origin, const std::string& reason);
  // One poll round over every socket, waiting up to timeout_ns; true if anything moved.
  bool PollOnce(int64_t timeout_ns);
  void BuildPollSet(bool may_block);
  void HandleReady(bool* moved, bool* server_ready);
  void AbortLocked(const Status& why);
  std::string PeerName(const Peer& p) const;

  int rank_ = 0;
  int nranks_ = 1;
  TcpOptions options_;
  net::Secret secret_;
  net::HandshakeServer server_;
  // Bytes of unexpected messages buffered now, all peers (options_.max_unexpected_bytes caps
  // it). Declared before peers_: the buffers it counts are freed first.
  size_t unexpected_bytes_ = 0;
  std::unique_ptr<BufferPool> pool_;  // unexpected buffers for reuse; outlives peers_' queues
  std::vector<Peer> peers_;
  std::atomic<int> pending_{0};
  Status round_error_;  // a peer failure seen during the current Progress call
  int wake_fd_ = -1;    // eventfd: Abort() wakes a blocked Progress
  std::atomic<bool> aborted_{false};
  bool yield_when_idle_ = true;  // TcpOptions::yield_when_idle
  Backoff backoff_;              // the spin stage of Progress(timeout > 0) (TcpOptions::spin_us)
  Status abort_status_;
  // The rank this transport learned failed first (a peer that died under pending requests,
  // or the origin of an abort note), and the reason to forward; -1 while none.
  FailureOrigin failure_;  // the rank this transport learned failed first (transport.h)
  mutable std::mutex mu_;  // serializes Post*/Progress against Abort from another thread
  std::vector<char> discard_;  // sink for payloads nobody will read
  std::vector<pollfd> fds_;
  struct FdOwner {
    int peer;     // -1: the handshake server, -2: the wake fd
    int stream;
  };
  std::vector<FdOwner> owners_;
};

}  // namespace weft
