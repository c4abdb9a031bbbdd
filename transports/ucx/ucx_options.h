// ucx_options.h: the ucx transport's knobs and how the settings (WEFT_UCX_*) fill them; every
// transport folder has this file (transports/README.md, "File set").
#pragma once

#include <string>

namespace weft {

struct UcxOptions {
  // UCX transport list for this context (UCX_TLS syntax: "tcp", "sm,tcp", "rc,sm"). Empty:
  // whatever UCX_TLS in the environment says, else UCX's default (all it finds).
  std::string tls;
  // Microseconds of non-blocking progress before sleeping on the event fd in Progress(t > 0).
  // -1 (default): the host's waiting policy for `ranks_on_machine` ranks, as tcp's
  // (TcpOptions::spin_us): the adaptive spin stage with a core per rank, none when the
  // machine's ranks outnumber its cores. The executor waits inside Progress(2000): with the old
  // fixed 5 us, 8-byte allreduce on 2 ranks over UCX's tcp lane took 18-26 us, 10-11 us with
  // the spin. >= 0: that fixed spin (WEFT_UCX_SPIN_US).
  int spin_us = -1;
  // Ranks on this machine (all its network namespaces); 0 = unknown (one rank per core).
  int ranks_on_machine = 0;
  // UCX keepalive period (how fast a dead peer on a shared-memory lane is noticed), applied
  // unless UCX_KEEPALIVE_INTERVAL is set. UCX's own default (20 s) is too slow for weft's
  // "dead peer -> error within seconds".
  double keepalive_s = 1.0;
  // Bound on the setup hello exchange (all ranks must have created their transport).
  double connect_timeout_s = 60.0;
  // Peer-failure detection (UCP_ERR_HANDLING_MODE_PEER). UCX 1.13's shared-memory transports
  // (posix, sysv) have no peer-failure handler, so with UCX_TLS=sm no endpoint can be created
  // in that mode. kAuto: PEER, and where UCX refuses it, an endpoint without failure
  // detection (a warning says so; a dead peer is then only caught by WEFT_TIMEOUT).
  // kRequire: refuse such a peer. WEFT_UCX_ERR_MODE=auto|peer.
  enum class ErrMode { kAuto, kRequire };
  ErrMode err_mode = ErrMode::kAuto;
};

// Defaults overridden by WEFT_UCX_TLS (same as `tls`), WEFT_UCX_SPIN_US. Bad values are ignored.
UcxOptions UcxOptionsFromEnv();

}  // namespace weft
