// Fuzz target: the TCP transport's message stream (24-byte frame headers {magic, channel,
// tag, bytes} and payloads) as a peer that passed the handshake sends it: a buggy or stale
// rank, or anyone who knows the job secret. The bytes go through a real TcpTransport (rank 1
// of 2) over loopback; the fuzzer plays rank 0 with a raw socket. The header decoder alone is
// fuzzed at full speed by tcp_wire_fuzz.cc.
//
// Input: byte 0 = recvs to post (0-3) | post before the bytes arrive (bit 2) | stream
// index bit (bit 3); then per recv {channel u8, tag u8, bytes u16 (<= 4 KiB)}; the rest is sent
// on the data connection after a valid hello. Promise checked: the transport never crashes,
// every posted recv ends (success, or an error naming the peer) once the peer disconnects.
// Setup failures (no loopback) abort: they are not findings.
//
// Cost per input (why it is built this way): the transport is created through a one-rank
// stand-in for the bootstrap (rank 0's transport took no part in the stream, so no second
// transport, no rendezvous and no helper thread per input), and instead of fixed waits the
// target progresses the transport exactly until it has read every byte sent (our socket's
// send queue and the transport's receive queue both empty) or dropped the connection. Each
// input still gets a fresh transport: a peer that hung up leaves it failed for good.
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <vector>

#include "fuzz_common.h"
#include "transports/tcp/tcp_transport.h"

namespace {

struct PlannedRecv {
  int channel;
  uint64_t tag;
  size_t bytes;
};

// Stands in for the bootstrap of a two-rank job, as rank 1: the address exchange gives rank 0
// a copy of rank 1's record (rank 0 dials rank 1, so its address is only ever printed).
class StandInBootstrap : public weft::TransportBootstrap {
 public:
  int rank() const override { return 1; }
  int nranks() const override { return 2; }
  const weft::net::Secret& secret() const override { return secret_; }
  const weft::net::SockAddr& local_address() const override { return local_; }
  weft::Status AllGather(const void* mine, size_t bytes, void* all) override {
    std::memcpy(all, mine, bytes);
    std::memcpy(static_cast<char*>(all) + bytes, mine, bytes);
    return weft::OkStatus();
  }
  weft::Status Barrier() override { return weft::OkStatus(); }

 private:
  weft::net::Secret secret_ = weft::net::Secret::Random();
  weft::net::SockAddr local_ = weft::net::SockAddr::Loopback(AF_INET, 0);
};

StandInBootstrap& Bootstrap() {
  static StandInBootstrap* bs = new StandInBootstrap();  // lives for the process
  return *bs;
}

std::unique_ptr<weft::TcpTransport> NewTransport() {
  weft::TcpOptions options;
  options.listen_addr = weft::net::SockAddr::Loopback(AF_INET, 0);
  // A small unexpected-message limit: inputs reach both sides of it, and a header naming the
  // default's 1 GiB would cost ASan 128 MiB of shadow per input.
  options.max_unexpected_bytes = 1 << 20;
  auto t = weft::TcpTransport::Create(&Bootstrap(), options);
  FuzzCheck(t.ok(), "tcp transport creation failed");
  return std::move(*t);
}

// The transport's end of our connection (it lives in this process): the socket whose peer
// address is our socket's local address; -1 while the transport has not accepted it.
int TransportEndOf(int ours) {
  sockaddr_storage mine{}, theirs{};
  socklen_t len = sizeof(mine);
  if (getsockname(ours, reinterpret_cast<sockaddr*>(&mine), &len) != 0) return -1;
  for (int fd = 3; fd < 1024; ++fd) {
    if (fd == ours) continue;
    socklen_t tlen = sizeof(theirs);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &tlen) == 0 && tlen == len &&
        std::memcmp(&theirs, &mine, len) == 0)
      return fd;
  }
  return -1;
}

// Progresses the transport until it has read every byte we sent (nothing in our send queue,
// nothing unread on its end) or closed our connection (handshake rejected, peer failed).
void ProgressUntilRead(weft::TcpTransport* t, int ours) {
  int theirs = -1;
  for (int round = 0; round < 2000; ++round) {
    if (theirs < 0) theirs = TransportEndOf(ours);
    // Until accepted, wait for the listener or the handshake step (at most 1 ms a round).
    (void)t->Progress(theirs < 0 ? 1000 : 0);
    pollfd p{ours, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return;  // dropped
    if (theirs < 0) continue;
    int unsent = 0, unread = 0;
    if (ioctl(ours, SIOCOUTQ, &unsent) != 0 || ioctl(theirs, FIONREAD, &unread) != 0) return;
    if (unsent == 0 && unread == 0) {
      (void)t->Progress(0);  // what the last read completed is handed out in this round
      return;
    }
  }
}

bool AllDone(const std::vector<weft::TransportRequest>& reqs) {
  for (const auto& r : reqs)
    if (!r.done.load()) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft_fuzz::Bytes in(data, size);
  uint8_t mode = in.U8();
  std::vector<PlannedRecv> plan;
  for (int i = 0; i < (mode & 3); ++i) {
    PlannedRecv r;
    r.channel = in.U8() % 4;
    r.tag = in.U8();
    r.bytes = in.U32() % 4097;
    plan.push_back(r);
  }
  std::string stream = in.Rest();

  std::unique_ptr<weft::TcpTransport> t = NewTransport();
  std::vector<weft::TransportRequest> reqs(plan.size());
  std::vector<std::vector<char>> bufs(plan.size());
  auto post = [&] {
    for (size_t i = 0; i < plan.size(); ++i) {
      bufs[i].resize(plan[i].bytes);
      weft::Status st = t->PostRecv(0, plan[i].channel, plan[i].tag, bufs[i].data(), plan[i].bytes, &reqs[i]);
      // Refused at once (the peer already failed or hung up): as good as failing later.
      if (!st.ok()) reqs[i].Complete(st);
    }
  };
  if (mode & 4) post();

  // Rank 0, misbehaving: a valid hello, then the fuzzed stream, then hang up.
  auto sock = weft::net::Connect(t->listen_address(), 5);
  FuzzCheck(sock.ok(), "connect to the data listener failed");
  weft::net::Hello hello;
  hello.kind = weft::net::ConnKind::kTcpData;
  hello.secret = Bootstrap().secret();
  hello.rank = 0;
  hello.nranks = 2;
  hello.index = (mode >> 3) & 1;  // 1 is an invalid stream index: the transport must drop it
  weft::net::Deadline deadline = weft::net::Deadline::After(5);
  (void)weft::net::SendHello(*sock, hello, deadline);
  // The transport reads while we write (large inputs exceed the socket buffers).
  size_t sent = 0;
  sock->SetNonBlocking(true);
  for (int round = 0; round < 10000 && sent < stream.size(); ++round) {
    ssize_t n = ::send(sock->fd(), stream.data() + sent, stream.size() - sent, MSG_NOSIGNAL);
    if (n > 0) sent += static_cast<size_t>(n);
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
    (void)t->Progress(0);
  }
  ProgressUntilRead(t.get(), sock->fd());
  if (!(mode & 4)) post();  // now every message that arrived waits as unexpected
  for (int round = 0; round < 3 && !AllDone(reqs); ++round) (void)t->Progress(0);
  sock->Close();  // the peer is gone: whatever is still posted must fail, not hang
  // With a bad stream index the connection is dropped at the handshake: rank 0 never
  // connected, so its recvs wait (the executor's timeout ends them, not the transport).
  if (hello.index != 0) return 0;
  for (int round = 0; round < 2000 && !AllDone(reqs); ++round) (void)t->Progress(1000);
  FuzzCheck(AllDone(reqs), "a posted recv neither completed nor failed after the peer left");
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].status.ok()) {
      FuzzCheck(reqs[i].status.message().find("rank 0") != std::string::npos,
                "a failed recv's error does not name the peer");
    }
  }
  return 0;
}
