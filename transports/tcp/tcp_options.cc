#include "transports/tcp/tcp_options.h"

#include "common/settings.h"

namespace weft {

TcpOptions TcpOptionsFromEnv() {
  TcpOptions o;
  // A bad value keeps the default here; ValidateSettings fails communicator creation on it.
  o.streams_per_peer = static_cast<int>(SettingIntOr("WEFT_SOCKET_NSTREAMS", o.streams_per_peer));
  o.socket_buffer_bytes = static_cast<size_t>(
      SettingIntOr("WEFT_SOCKET_BUFFER", static_cast<int64_t>(o.socket_buffer_bytes)));
  o.spin_us = static_cast<int>(SettingIntOr("WEFT_SOCKET_SPIN_US", o.spin_us));
  o.yield_when_idle = SettingFlagOr("WEFT_SOCKET_YIELD", o.yield_when_idle);
  o.max_unexpected_bytes = SettingBytesOr("WEFT_TCP_MAX_UNEXPECTED_BYTES", o.max_unexpected_bytes);
  return o;
}

}  // namespace weft
