// Tests for src/net/socket.*: address parsing and printing, secrets, interface choice,
// IPv4/IPv6 listen/connect/send/recv on loopback, deadlines, and the handshake (wrong secret
// and silent clients dropped while good clients are still served).
#include "net/socket.h"

#include <gtest/gtest.h>

#include "test_util.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace weft {
namespace net {
namespace {

bool HaveIPv6Loopback() {
  StatusOr<Socket> s = Listen(SockAddr::Loopback(AF_INET6, 0));
  return s.ok();
}

TEST(SecretTest, HexRoundTrip) {
  for (int i = 0; i < 20; ++i) {
    Secret s = Secret::Random();
    std::string hex = s.Hex();
    ASSERT_EQ(hex.size(), 32u);
    StatusOr<Secret> back = Secret::FromHex(hex);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_TRUE(*back == s);
    EXPECT_EQ(std::memcmp(back->bytes, s.bytes, 16), 0);
  }
  StatusOr<Secret> upper = Secret::FromHex("00112233445566778899AABBCCDDEEFF");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(upper->Hex(), "00112233445566778899aabbccddeeff");
}

TEST(SecretTest, RandomSecretsDiffer) {
  Secret a = Secret::Random(), b = Secret::Random();
  EXPECT_FALSE(a == b);
  Secret c = a;
  c.bytes[15] ^= 1;
  EXPECT_FALSE(a == c);
  c.bytes[15] ^= 1;
  EXPECT_TRUE(a == c);
}

// A bad secret is refused with a reason (length, or which character), and the value itself is
// never echoed: a secret in a log is a secret no more (issue 11, defect 3).
TEST(SecretTest, BadHexIsRefusedWithoutEchoingIt) {
  for (const char* bad : {"", "abc", "0011223344556677889900aabbccddeeffgg",
                          "0011223344556677889900aabbccddeg"}) {
    StatusOr<Secret> s = Secret::FromHex(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), weftInvalidArgument);
    EXPECT_NE(s.status().message().find("secret"), std::string::npos) << s.status().message();
    if (bad[0] != '\0')
      EXPECT_EQ(s.status().message().find(bad), std::string::npos) << s.status().message();
  }
}

struct ParseCase {
  const char* input;
  int family;
  int port;
  const char* printed;
};

class ParseHostPortTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseHostPortTest, ParsesAndPrints) {
  const ParseCase& c = GetParam();
  StatusOr<SockAddr> a = ParseHostPort(c.input);
  ASSERT_TRUE(a.ok()) << c.input << ": " << a.status().message();
  EXPECT_EQ(a->family(), c.family);
  EXPECT_EQ(a->port(), c.port);
  if (c.printed) {
    EXPECT_EQ(a->ToString(), c.printed);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Valid, ParseHostPortTest,
    ::testing::Values(ParseCase{"127.0.0.1:5", AF_INET, 5, "127.0.0.1:5"},
                      ParseCase{"1.2.3.4:65535", AF_INET, 65535, "1.2.3.4:65535"},
                      ParseCase{"0.0.0.0:0", AF_INET, 0, "0.0.0.0:0"},
                      ParseCase{"[::1]:5", AF_INET6, 5, "[::1]:5"},
                      ParseCase{"[fd00::2]:29500", AF_INET6, 29500, "[fd00::2]:29500"},
                      ParseCase{"localhost:80", AF_INET, 80, "127.0.0.1:80"}));

TEST(ParseHostPortTest, BadInputNamesTheString) {
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":80", "1.2.3.4:65536", "1.2.3.4:http",
                          "::1:5", "[::1]5", "[::1]", "no-such-host.invalid:5",
                          "1.2.3.4:-1"}) {
    StatusOr<SockAddr> a = ParseHostPort(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), weftInvalidArgument) << bad;
    EXPECT_NE(a.status().message().find(std::string("\"") + bad + "\""), std::string::npos)
        << a.status().message();
  }
}

TEST(SockAddrTest, WireRoundTrip) {
  for (const char* s : {"10.1.2.3:4567", "[fd00::2]:1", "127.0.0.1:0"}) {
    StatusOr<SockAddr> a = ParseHostPort(s);
    ASSERT_TRUE(a.ok());
    uint8_t wire[kSockAddrWireBytes];
    EncodeSockAddr(*a, wire);
    StatusOr<SockAddr> b = DecodeSockAddr(wire);
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(*a == *b) << a->ToString() << " vs " << b->ToString();
    EXPECT_EQ(b->ToString(), s);
  }
  uint8_t garbage[kSockAddrWireBytes] = {0, 9};
  EXPECT_FALSE(DecodeSockAddr(garbage).ok());
}

TEST(SockAddrTest, SetPortAndPredicates) {
  SockAddr a = SockAddr::Loopback(AF_INET, 0);
  a.set_port(1234);
  EXPECT_EQ(a.port(), 1234);
  EXPECT_TRUE(a.is_loopback());
  EXPECT_FALSE(a.is_wildcard());
  EXPECT_TRUE(SockAddr::Any(AF_INET6, 0).is_wildcard());
  EXPECT_TRUE(SockAddr::Loopback(AF_INET6, 7).is_loopback());
  EXPECT_EQ(SockAddr().ToString(), "<unset>");
}

TEST(ChooseLocalAddressTest, LoopbackByName) {
  StatusOr<SockAddr> a = ChooseLocalAddress("=lo", "AF_INET");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->ToString(), "127.0.0.1:0");
  StatusOr<SockAddr> b = ChooseLocalAddress("lo", "AF_INET6");
  if (!HaveIPv6Loopback()) GTEST_SKIP() << "no IPv6 loopback on this machine";
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->ToString(), "[::1]:0");
}

TEST(ChooseLocalAddressTest, DefaultIsUsableAndExcludeWorks) {
  StatusOr<SockAddr> a = ChooseLocalAddress("", "");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(a->family() == AF_INET || a->family() == AF_INET6);
  // Whatever the default picks must be listenable.
  StatusOr<Socket> l = Listen(*a);
  EXPECT_TRUE(l.ok()) << a->ToString() << ": " << l.status().message();
  // IPv4 is preferred when an interface has both families.
  StatusOr<SockAddr> any_family = ChooseLocalAddress("^lo", "");
  StatusOr<SockAddr> v4 = ChooseLocalAddress("^lo", "AF_INET");
  if (any_family.ok() && v4.ok()) {
    EXPECT_EQ(any_family->family(), AF_INET) << any_family->ToString();
  }
  // Excluding everything but loopback's name prefix gives a non-loopback address or nothing.
  StatusOr<SockAddr> ex = ChooseLocalAddress("^lo", "AF_INET");
  if (ex.ok()) {
    EXPECT_FALSE(ex->is_loopback()) << ex->ToString();
  }
}

TEST(ChooseLocalAddressTest, PrefixExactAndExclude) {
  // "l" is a prefix of "lo"; "=l" names no interface exactly.
  StatusOr<SockAddr> prefix = ChooseLocalAddress("l", "AF_INET");
  ASSERT_TRUE(prefix.ok()) << prefix.status().message();
  EXPECT_TRUE(prefix->is_loopback());
  EXPECT_FALSE(ChooseLocalAddress("=l", "AF_INET").ok());
  // A list: the first listed that exists matches ("nosuch" does not).
  StatusOr<SockAddr> list = ChooseLocalAddress("nosuch,lo", "AF_INET");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->is_loopback());
  // Excluding exactly "lo" leaves only other interfaces (or none).
  StatusOr<SockAddr> ex = ChooseLocalAddress("^=lo", "AF_INET");
  if (ex.ok()) {
    EXPECT_FALSE(ex->is_loopback()) << ex->ToString();
  }
}

TEST(ChooseLocalAddressTest, BadSpecsAreErrors) {
  StatusOr<SockAddr> a = ChooseLocalAddress("=no_such_if0", "");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("no_such_if0"), std::string::npos);
  StatusOr<SockAddr> b = ChooseLocalAddress("", "AF_BOGUS");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("AF_BOGUS"), std::string::npos);
}

class LoopbackTest : public ::testing::TestWithParam<int> {};

TEST_P(LoopbackTest, ListenConnectSendRecv) {
  int family = GetParam();
  if (family == AF_INET6 && !HaveIPv6Loopback()) GTEST_SKIP() << "no IPv6 loopback";
  StatusOr<Socket> listener = Listen(SockAddr::Loopback(family, 0));
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  ASSERT_NE(listener->peer().port(), 0);
  SockAddr addr = listener->peer();

  std::vector<uint8_t> payload(3 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> got(payload.size());
  std::thread server([&] {
    StatusOr<Socket> s = Accept(*listener, Deadline::After(10));
    ASSERT_TRUE(s.ok()) << s.status().message();
    Status st = RecvAll(*s, got.data(), got.size(), Deadline::After(10));
    ASSERT_TRUE(st.ok()) << st.message();
    st = SendAll(*s, got.data(), 8, Deadline::After(10));
    ASSERT_TRUE(st.ok()) << st.message();
  });
  StatusOr<Socket> c = Connect(addr, 10);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(SendAll(*c, payload.data(), payload.size(), Deadline::After(10)).ok());
  uint8_t echo[8];
  ASSERT_TRUE(RecvAll(*c, echo, 8, Deadline::After(10)).ok());
  server.join();
  EXPECT_EQ(got, payload);
  EXPECT_EQ(std::memcmp(echo, payload.data(), 8), 0);
  // The server closed: the next read is a RemoteError naming the server's address.
  Status eof = RecvAll(*c, echo, 1, Deadline::After(5));
  ASSERT_FALSE(eof.ok());
  EXPECT_EQ(eof.code(), weftRemoteError);
  EXPECT_NE(eof.message().find(addr.ToString()), std::string::npos) << eof.message();
}

INSTANTIATE_TEST_SUITE_P(Families, LoopbackTest, ::testing::Values(AF_INET, AF_INET6),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == AF_INET ? std::string("IPv4") : std::string("IPv6");
                         });

TEST(SocketTest, RecvTimesOut) {
  StatusOr<Socket> listener = Listen(SockAddr::Loopback(AF_INET, 0));
  ASSERT_TRUE(listener.ok());
  StatusOr<Socket> c = Connect(listener->peer(), 5);
  ASSERT_TRUE(c.ok());
  char b;
  auto t0 = std::chrono::steady_clock::now();
  Status st = RecvAll(*c, &b, 1, Deadline::After(0.2));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(st.code(), weftTimeout) << st.message();
  EXPECT_GE(took, 0.15);
  EXPECT_LT(took, 5.0);
}

TEST(SocketTest, ConnectRetriesUntilListenerAppears) {
  // Find a free port, close it, start listening on it only after a delay.
  int port;
  {
    StatusOr<Socket> tmp = Listen(SockAddr::Loopback(AF_INET, 0));
    ASSERT_TRUE(tmp.ok());
    port = tmp->peer().port();
  }
  SockAddr addr = SockAddr::Loopback(AF_INET, port);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    StatusOr<Socket> l = Listen(addr);
    ASSERT_TRUE(l.ok()) << l.status().message();
    StatusOr<Socket> s = Accept(*l, Deadline::After(10));
    EXPECT_TRUE(s.ok());
  });
  StatusOr<Socket> c = Connect(addr, 10);
  EXPECT_TRUE(c.ok()) << c.status().message();
  late.join();
}

TEST(SocketTest, ConnectGivesUpWithTimeoutNamingAddress) {
  // A port bound but not listening refuses every connection, and stays ours for the whole
  // test: a port merely closed again could be taken by a test running beside this one (ctest
  // -j), whose listener would then accept us (seen once: this test and HandshakeTest's both
  // failed).
  int port = 0;
  const int held = weft_test::HoldRefusingLoopbackPort(&port);
  ASSERT_GE(held, 0) << std::strerror(errno);
  SockAddr addr = SockAddr::Loopback(AF_INET, port);
  StatusOr<Socket> c = Connect(addr, 0.3);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), weftTimeout);
  EXPECT_NE(c.status().message().find(addr.ToString()), std::string::npos);
  close(held);
}

TEST(HelloTest, WireRoundTripAndBadMagic) {
  Hello h;
  h.kind = ConnKind::kTcpData;
  h.secret = Secret::Random();
  h.rank = 5;
  h.nranks = 8;
  h.index = 3;
  uint8_t wire[kHelloWireBytes];
  EncodeHello(h, wire);
  StatusOr<Hello> back = DecodeHello(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->kind, ConnKind::kTcpData);
  EXPECT_TRUE(back->secret == h.secret);
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->nranks, 8);
  EXPECT_EQ(back->index, 3);
  wire[0] ^= 0xff;
  EXPECT_EQ(DecodeHello(wire).status().code(), weftInvalidArgument);
}

// Good clients are served while a wrong-secret client is dropped without any reply and a
// silent client is dropped after the handshake timeout.
TEST(HandshakeTest, WrongSecretAndSilentClientsAreDropped) {
  Secret secret = Secret::Random();
  StatusOr<Socket> listener = Listen(SockAddr::Loopback(AF_INET, 0));
  ASSERT_TRUE(listener.ok());
  SockAddr addr = listener->peer();
  HandshakeServer server(std::move(*listener), secret, ConnKind::kTest, 0.3);

  StatusOr<Socket> silent = Connect(addr, 5);
  ASSERT_TRUE(silent.ok());
  StatusOr<Socket> wrong = Connect(addr, 5);
  ASSERT_TRUE(wrong.ok());
  Hello bad;
  bad.secret = Secret::Random();
  bad.rank = 66;
  ASSERT_TRUE(SendHello(*wrong, bad, Deadline::After(5)).ok());
  StatusOr<Socket> good = Connect(addr, 5);
  ASSERT_TRUE(good.ok());
  Hello ok;
  ok.secret = secret;
  ok.rank = 7;
  ok.index = 2;
  ASSERT_TRUE(SendHello(*good, ok, Deadline::After(5)).ok());

  std::vector<HandshakeServer::Accepted> accepted;
  Deadline d = Deadline::After(5);
  while (accepted.empty() && !d.expired()) ASSERT_TRUE(server.WaitStep(d, &accepted).ok());
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].hello.rank, 7);
  EXPECT_EQ(accepted[0].hello.index, 2);

  // The wrong-secret client reads EOF (or a reset): no answer, a RemoteError.
  char b;
  Status st = RecvAll(*wrong, &b, 1, Deadline::After(5));
  EXPECT_EQ(st.code(), weftRemoteError) << st.message();
  EXPECT_GE(server.rejected(), 1);

  // The silent client is dropped once its handshake time is over.
  Deadline d2 = Deadline::After(5);
  while (server.rejected() < 2 && !d2.expired()) ASSERT_TRUE(server.WaitStep(Deadline::After(0.1), &accepted).ok());
  EXPECT_EQ(server.rejected(), 2) << server.last_rejection();
  st = RecvAll(*silent, &b, 1, Deadline::After(5));
  EXPECT_EQ(st.code(), weftRemoteError) << st.message();

  // The server still serves new clients afterwards.
  StatusOr<Socket> again = Connect(addr, 5);
  ASSERT_TRUE(again.ok());
  ok.rank = 8;
  ASSERT_TRUE(SendHello(*again, ok, Deadline::After(5)).ok());
  accepted.clear();
  Deadline d3 = Deadline::After(5);
  while (accepted.empty() && !d3.expired()) ASSERT_TRUE(server.WaitStep(d3, &accepted).ok());
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].hello.rank, 8);
}

TEST(HandshakeTest, WrongKindIsDropped) {
  Secret secret = Secret::Random();
  StatusOr<Socket> listener = Listen(SockAddr::Loopback(AF_INET, 0));
  ASSERT_TRUE(listener.ok());
  SockAddr addr = listener->peer();
  HandshakeServer server(std::move(*listener), secret, ConnKind::kTcpData, 5);
  StatusOr<Socket> c = Connect(addr, 5);
  ASSERT_TRUE(c.ok());
  Hello h;
  h.secret = secret;
  h.kind = ConnKind::kBootstrapRing;
  ASSERT_TRUE(SendHello(*c, h, Deadline::After(5)).ok());
  std::vector<HandshakeServer::Accepted> accepted;
  Deadline d = Deadline::After(2);
  while (server.rejected() == 0 && !d.expired()) ASSERT_TRUE(server.WaitStep(Deadline::After(0.1), &accepted).ok());
  EXPECT_TRUE(accepted.empty());
  EXPECT_EQ(server.rejected(), 1);
}

}  // namespace
}  // namespace net
}  // namespace weft
