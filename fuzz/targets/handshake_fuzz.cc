// Fuzz target: the bytes every weft connection starts with (bootstrap root, bootstrap ring
// and TCP data connections): the 40-byte hello and the 28-byte encoded socket address that
// follows it on the way to the root (and fills the root's address table). Any peer that can
// reach a listening port can send these, before it has proved it knows the secret.
#include "fuzz_common.h"
#include "net/socket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft::net;
  uint8_t hello_wire[kHelloWireBytes] = {};
  uint8_t addr_wire[kSockAddrWireBytes] = {};
  size_t n = size < sizeof(hello_wire) ? size : sizeof(hello_wire);
  std::memcpy(hello_wire, data, n);
  if (size > n) {
    size_t m = size - n < sizeof(addr_wire) ? size - n : sizeof(addr_wire);
    std::memcpy(addr_wire, data + n, m);
  }

  weft::StatusOr<Hello> hello = DecodeHello(hello_wire);
  if (hello.ok()) {
    uint8_t again[kHelloWireBytes];
    EncodeHello(*hello, again);
    // Every byte of the hello is a field: an accepted hello re-encodes to the same bytes.
    FuzzCheck(std::memcmp(again, hello_wire, sizeof(again)) == 0, "hello round trip differs");
  }

  weft::StatusOr<SockAddr> addr = DecodeSockAddr(addr_wire);
  if (addr.ok()) {
    FuzzCheck(addr->family() == AF_INET || addr->family() == AF_INET6, "decoded a non-IP family");
    std::string text = addr->ToString();  // what error messages print: must not crash
    FuzzCheck(!text.empty(), "empty address text");
    uint8_t again[kSockAddrWireBytes];
    EncodeSockAddr(*addr, again);
    weft::StatusOr<SockAddr> round = DecodeSockAddr(again);
    FuzzCheck(round.ok() && *round == *addr, "address round trip differs");
    (void)addr->is_loopback();
    (void)addr->is_wildcard();
  }
  return 0;
}
