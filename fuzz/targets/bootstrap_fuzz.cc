// Fuzz target: the bootstrap rendezvous messages, both directions, through the real code
// (RunRoot and Bootstrap::Join over loopback; the fixed-size records alone are fuzzed much
// faster by bootstrap_wire_fuzz.cc):
//   mode 0, to the root: anyone who can reach the root's port sends bytes; with bit 1 of the
//     mode byte the target puts the job's real secret into a hello-shaped prefix, so the
//     fuzzer gets past the secret check (an insider or a derived secret, issue 11 defect 3).
//     The root must answer or drop, never crash, and give up by its own timeout.
//   mode 1, from the root: a fake root answers a joining rank with fuzzed bytes (result
//     code, message length, message, address table). Join must fail with a message or
//     succeed, never crash, and never hand out an unknown result code. The joining rank is
//     rank 0 of 1, so the table is read but no ring connection is made: a fuzzed table must
//     not make the fuzzer connect to arbitrary addresses.
// One fake root (listener and thread) serves every mode-1 input, each on its own connection.
// Input: byte 0 = mode (bit 0) | real secret (bit 1). Each input's root is cancelled and
// joined before the next input (CancelBootstrapRoot), so a root's crash or leak is reported
// under the input that caused it.
#include <sys/socket.h>

#include <mutex>
#include <thread>

#include "core/bootstrap.h"
#include "fuzz_common.h"

namespace {

using namespace weft;

const net::Secret& JobSecret() {
  static net::Secret s = net::Secret::Random();
  return s;
}

// Sends `bytes` to a fresh root, then reads whatever it answers until it closes.
void FuzzRoot(bool real_secret, std::string bytes) {
  auto id = StartBootstrapRoot(net::SockAddr::Loopback(AF_INET, 0), JobSecret(), 0.2);
  FuzzCheck(id.ok(), "root setup failed");
  if (real_secret && bytes.size() >= net::kHelloWireBytes) {
    uint8_t hello[net::kHelloWireBytes];
    std::memcpy(hello, bytes.data(), sizeof(hello));
    // Magic, version and secret made right; kind, rank, nranks and index stay fuzzed.
    net::Hello h;
    h.secret = JobSecret();
    uint8_t right[net::kHelloWireBytes];
    net::EncodeHello(h, right);
    std::memcpy(hello, right, 6);
    std::memcpy(hello + 8, right + 8, 16);
    bytes.replace(0, sizeof(hello), reinterpret_cast<const char*>(hello), sizeof(hello));
  }
  auto sock = net::Connect(id->root, 5);
  FuzzCheck(sock.ok(), "connect to the root failed");
  (void)net::SendAll(*sock, bytes.data(), bytes.size(), net::Deadline::After(2));
  ::shutdown(sock->fd(), SHUT_WR);
  // Read the answer for a moment (a root still waiting for other ranks answers only at its
  // own 0.2 s timeout; waiting for that would cap the fuzzer at 5 inputs per second).
  char sink[1];
  net::Deadline deadline = net::Deadline::After(0.02);
  while (net::RecvAll(*sock, sink, 1, deadline).ok()) {
  }
  // Done with this root: cancelling it (and joining its thread) here means a root's crash is
  // reported under its own input, and no root outlives the process (the LeakSanitizer report
  // of HandshakeServer::Pending on detached root threads, fixed with the root registry).
  (void)CancelBootstrapRoot(*id);
}

// A fake root, one for the process: a thread that accepts each joining rank, reads its hello
// and address, answers with the current input's bytes and hangs up. (One listener and thread
// for all inputs instead of one per input: each input still gets its own connection.)
class FakeRoot {
 public:
  FakeRoot() {
    auto listener = net::Listen(net::SockAddr::Loopback(AF_INET, 0));
    FuzzCheck(listener.ok(), "fake root listen failed");
    listener_ = std::move(*listener);
    thread_ = std::thread([this] { Serve(); });
  }
  BootstrapId Id() const {
    BootstrapId id;
    id.root = listener_.peer();
    id.secret = JobSecret();
    return id;
  }
  void SetAnswer(const std::string& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = bytes;
  }

 private:
  void Serve() {
    while (true) {
      auto conn = net::Accept(listener_, net::Deadline::After(3600));
      if (!conn.ok()) continue;
      uint8_t hello[net::kHelloWireBytes + net::kSockAddrWireBytes];
      if (!net::RecvAll(*conn, hello, sizeof(hello), net::Deadline::After(5)).ok()) continue;
      std::string bytes;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bytes = answer_;
      }
      (void)net::SendAll(*conn, bytes.data(), bytes.size(), net::Deadline::After(5));
    }
  }
  net::Socket listener_;
  std::thread thread_;
  std::mutex mu_;
  std::string answer_;
};

void FuzzJoin(const std::string& bytes) {
  static FakeRoot* root = new FakeRoot();  // lives for the process
  root->SetAnswer(bytes);
  auto bs = Bootstrap::Join(root->Id(), 0, 1, 0.3);
  if (!bs.ok()) {
    weftResult_t code = bs.status().code();
    FuzzCheck(code > weftSuccess && code < weftNumResults, "join failed with an unknown result code");
    FuzzCheck(!bs.status().message().empty(), "join failed without a message");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t mode = data[0];
  std::string rest = weft_fuzz::AsString(data + 1, size - 1);
  if ((mode & 1) == 0) FuzzRoot((mode & 2) != 0, rest);
  else FuzzJoin(rest);
  return 0;
}
