// Fuzz target: the TCP transport's message stream (24-byte frame headers {magic, channel,
// tag, bytes} and payloads) as a peer that passed the handshake sends it: a buggy or stale
// rank, or anyone who knows the job secret. The bytes go through a real TcpTransport over
// loopback, so each input costs a transport creation (the header decoder alone is fuzzed at
// full speed by tcp_wire_fuzz.cc).
//
// Input: byte 0 = recvs to post (0-3) | post before the bytes arrive (bit 2) | stream
// index bit (bit 3); then per recv {channel u8, tag u8, bytes u16 (<= 4 KiB)}; the rest is sent
// on the data connection after a valid hello. Promise checked: the transport never crashes,
// every posted recv ends (success, or an error naming the peer) once the peer disconnects.
// Setup failures (no loopback) abort: they are not findings.
#include <sys/socket.h>

#include <vector>

#include "fuzz_common.h"
#include "loopback_job.h"
#include "transports/tcp/tcp_transport.h"

namespace {

struct PlannedRecv {
  int channel;
  uint64_t tag;
  size_t bytes;
};

weft_fuzz::LoopbackJob& Job() {
  static weft_fuzz::LoopbackJob* job = new weft_fuzz::LoopbackJob();  // lives for the process
  return *job;
}

std::unique_ptr<weft::TcpTransport> NewTransportPair() {
  std::unique_ptr<weft::TcpTransport> mine;
  weft::TcpOptions options;
  options.listen_addr = weft::net::SockAddr::Loopback(AF_INET, 0);
  // A small unexpected-message limit: inputs reach both sides of it, and a header naming the
  // default's 1 GiB would cost ASan 128 MiB of shadow per input.
  options.max_unexpected_bytes = 1 << 20;
  Job().Together(
      [&](weft::Bootstrap* bs) { (void)weft::TcpTransport::Create(bs, options); },
      [&](weft::Bootstrap* bs) {
        auto t = weft::TcpTransport::Create(bs, options);
        FuzzCheck(t.ok(), "tcp transport creation failed");
        mine = std::move(*t);
      });
  return mine;
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

  std::unique_ptr<weft::TcpTransport> t = NewTransportPair();
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
  hello.secret = Job().secret();
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
  if (!(mode & 4)) post();
  for (int round = 0; round < 50 && !AllDone(reqs); ++round) (void)t->Progress(100);
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
