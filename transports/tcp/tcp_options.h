// tcp_options.h: the tcp transport's knobs and how the settings (WEFT_SOCKET_*, WEFT_TCP_*)
// fill them; every transport folder has this file (transports/README.md, "File set").
#pragma once

#include <cstddef>

#include "net/socket.h"

namespace weft {

// Options. Their defaults were chosen from the loopback benchmark in
// tests/tcp_transport_test.cc (streams, buffer sizes, spinning); the figures and the command
// are in perf/RESULTS.md, "Transport microbenchmarks".
struct TcpOptions {
  // Connections per peer pair. One is the most CPU-efficient on loopback with a single thread
  // driving progress (perf/RESULTS.md); more help only on links one TCP flow cannot fill, and
  // only when the executor spreads work over that many channels. WEFT_SOCKET_NSTREAMS.
  int streams_per_peer = 1;
  // SO_SNDBUF/SO_RCVBUF; 0 leaves Linux's autotuning on (it grows to tcp_rmem/tcp_wmem max;
  // a fixed 4 MiB was no better, perf/RESULTS.md). WEFT_SOCKET_BUFFER (bytes).
  size_t socket_buffer_bytes = 0;
  // Microseconds of zero-timeout polls before blocking in Progress(timeout > 0). -1 (default):
  // the host's waiting policy (common/backoff.h) for `ranks_on_machine` ranks: with a core per
  // rank, the adaptive spin stage (up to 2 ms, halved after waits it could not catch), then
  // ppoll; with more ranks than cores, ppoll at once (spinning would delay the peer we wait
  // for). The executor waits inside Progress(2000), so without a spin every small message
  // paid a sleep and wake-up: 8-byte allreduce on 2 ranks over loopback 44 us, 11 us with the
  // spin. >= 0: that fixed spin (WEFT_SOCKET_SPIN_US).
  int spin_us = -1;
  // Ranks on this machine (all its network namespaces), for the waiting policy; 0 = unknown
  // (taken as one rank per core).
  int ranks_on_machine = 0;
  // Whether an idle Progress(0) yields the core while messages are pending (see Progress);
  // WEFT_SOCKET_YIELD=0 turns it off for measurements.
  bool yield_when_idle = true;
  // Bytes of messages that arrive before their recv is posted that this transport buffers, all
  // peers together (each such message is held whole until its recv is posted). A message that
  // would exceed it fails its peer as out of sync: the size comes off the wire, so without a
  // bound a corrupt or hostile header could make the rank allocate any size. A correct job
  // buffers at most what its peers send ahead of its recvs.
  size_t max_unexpected_bytes = size_t{1} << 30;
  // How long a connection may take to present its handshake before it is dropped.
  double handshake_timeout_s = 10.0;
  // Where to listen. Empty: WEFT_SOCKET_IFNAME/WEFT_SOCKET_FAMILY when set (ChooseLocalAddress),
  // else the local address through which this rank reached the bootstrap root.
  net::SockAddr listen_addr;
};

// Defaults above, overridden by WEFT_SOCKET_NSTREAMS (1..64), WEFT_SOCKET_BUFFER (bytes, 0 =
// autotune), WEFT_SOCKET_SPIN_US, WEFT_SOCKET_YIELD, read through the settings facility. A bad
// value keeps the default here: ValidateSettings fails communicator creation on it first.
TcpOptions TcpOptionsFromEnv();

}  // namespace weft
