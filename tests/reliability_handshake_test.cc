// Regression tests for issue 11, defect 4: silent (unauthenticated) connections to a data port
// must be closed at their handshake deadline even if they never become readable, their number
// is capped, and a real peer still gets in while they are open. Before the fix the deadline was
// only checked for readable sockets, so 50 silent connections stayed open forever, and there
// was no cap (5000 made every progress round poll 5000 fds).
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "net/socket.h"

using namespace weft;
using namespace weft::net;

namespace {

struct Server {
  HandshakeServer server;
  SockAddr addr;
};

Server MakeServer(const Secret& secret, double handshake_timeout_s) {
  StatusOr<Socket> l = Listen(SockAddr::Loopback(AF_INET, 0));
  EXPECT_TRUE(l.ok()) << l.status().message();
  Server s;
  s.addr = l->peer();
  s.server = HandshakeServer(std::move(*l), secret, ConnKind::kTcpData, handshake_timeout_s);
  return s;
}

std::vector<Socket> OpenSilent(const SockAddr& addr, int n) {
  std::vector<Socket> v;
  for (int i = 0; i < n; ++i) {
    StatusOr<Socket> c = Connect(addr, 5);
    EXPECT_TRUE(c.ok()) << c.status().message();
    if (c.ok()) v.push_back(std::move(*c));
  }
  return v;
}

// A closed-by-server socket reads EOF (or reset).
int CountClosedByServer(std::vector<Socket>& socks) {
  int closed = 0;
  for (Socket& s : socks) {
    pollfd p{s.fd(), POLLIN, 0};
    char c;
    if (poll(&p, 1, 0) == 1 && recv(s.fd(), &c, 1, MSG_DONTWAIT) <= 0) ++closed;
  }
  return closed;
}

// Steps the server polling only its listener, so that silent connections are never readable
// here: their deadline must be enforced by the timer (StepDue), not by readiness. (The TCP
// transport still polls connections in handshake too, at most kMaxPending of them.)
void TransportLikeRounds(HandshakeServer& server, double seconds, std::vector<HandshakeServer::Accepted>* out) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::vector<pollfd> fds;
    server.AppendListenerFd(&fds);
    EXPECT_EQ(fds.size(), 1u);  // never the connections in handshake
    bool ready = poll(fds.data(), fds.size(), 1) == 1;
    if (ready || server.StepDue()) ASSERT_TRUE(server.Step(out).ok());
  }
}

TEST(ReliabilityHandshake, SilentConnectionsAreClosedAtTheDeadline) {
  Secret secret = Secret::Random();
  Server s = MakeServer(secret, 0.3);
  std::vector<Socket> silent = OpenSilent(s.addr, 50);
  std::vector<HandshakeServer::Accepted> accepted;
  TransportLikeRounds(s.server, 1.5, &accepted);  // 5x the deadline: generous under load
  EXPECT_TRUE(accepted.empty());
  EXPECT_EQ(s.server.pending(), 0u) << "silent connections still held after their deadline";
  EXPECT_EQ(s.server.rejected(), 50);
  EXPECT_EQ(CountClosedByServer(silent), 50);
}

TEST(ReliabilityHandshake, PendingConnectionsAreCappedAndARealPeerGetsIn) {
  Secret secret = Secret::Random();
  Server s = MakeServer(secret, 30);  // deadline far away: only the cap limits them
  std::vector<Socket> silent = OpenSilent(s.addr, 300);
  std::vector<HandshakeServer::Accepted> accepted;
  TransportLikeRounds(s.server, 0.5, &accepted);
  EXPECT_LE(s.server.pending(), HandshakeServer::kMaxPending);
  EXPECT_GE(s.server.rejected(), 300 - static_cast<int>(HandshakeServer::kMaxPending));
  // A real peer connecting now is accepted although silent connections are still pending.
  StatusOr<Socket> real = Connect(s.addr, 5);
  ASSERT_TRUE(real.ok());
  Hello h;
  h.kind = ConnKind::kTcpData;
  h.secret = secret;
  h.rank = 1;
  ASSERT_TRUE(SendHello(*real, h, Deadline::After(5)).ok());
  TransportLikeRounds(s.server, 0.5, &accepted);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].hello.rank, 1);
}

}  // namespace
