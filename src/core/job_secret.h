// Job secret for weftCommInitFromEnv when the launcher hands out none (issue 11, defect 3).
//
// weftrun sets a random WEFT_SECRET; the PyTorch backend passes the unique id (which holds a
// random secret) through torch's store. torchrun, srun and mpirun hand out nothing secret, and
// a secret derived from the job's public parameters (root address, port, world size, job id)
// lets anyone who can reach the root's port and guess those join as a rank. Where all ranks
// run on the root's host (the root address is loopback), something outsiders lack does exist:
// a file only this user can read. Rank 0 writes a random secret to a 0600 file in a 0700
// per-user directory ($WEFT_SECRET_DIR, else $XDG_RUNTIME_DIR, else /tmp/weft-<uid>), named
// by a hash of the public parameters; the other ranks wait for it and read it; rank 0 removes
// it once every rank has joined. Across hosts no such channel is known to exist: the derived
// secret is used and a warning says so on stderr (whatever WEFT_DEBUG says) — set
// WEFT_SECRET there (e.g. `export WEFT_SECRET=$(openssl rand -hex 16)` before srun).
#pragma once

#include <ctime>
#include <string>

#include "common/status.h"
#include "net/socket.h"

namespace weft {

// The file that carries the secret of the job identified by `job_key` (public parameters).
StatusOr<std::string> PrivateSecretPath(const std::string& job_key);
// Rank 0: writes `secret` to the file (atomically: temporary file + rename).
Status PublishPrivateSecret(const std::string& path, const net::Secret& secret);
// Other ranks: waits up to `timeout_s` for a file written at or after `not_before` and reads it.
StatusOr<net::Secret> ReadPrivateSecret(const std::string& path, double timeout_s, time_t not_before);

}  // namespace weft
