// Communicator creation helpers used by the C API (src/api/api.cc).
#pragma once

#include <memory>
#include <string>

#include "core/comm.h"

namespace weft {

struct BootstrapId;
class Bootstrap;

double DefaultTimeoutSeconds();
// Magic, timeout, WEFT_ALGO: what every communicator starts with.
void InitCommon(weftComm* comm);
// Starts a rendezvous service in this process and returns its id (weftGetUniqueId).
StatusOr<BootstrapId> CreateUniqueId();
// Joins the rendezvous `id` as `rank` of `nranks` and sets up transports.
Status JoinAndInit(weftComm* comm, const BootstrapId& id, int nranks, int rank);
Status InitOverBootstrap(weftComm* comm, std::unique_ptr<Bootstrap> bootstrap);
// One rank of a thread-per-rank group sharing `hub`.
// `host_ids` (split children): each rank's host identity, instead of WEFT_INPROC_GROUPS.
Status InitInproc(weftComm* comm, std::shared_ptr<InprocHub> hub, int rank,
                  const std::vector<std::string>* host_ids = nullptr);
// weftCommInitFromEnv.
Status InitFromEnvironment(weftComm* comm);

}  // namespace weft

namespace weft {
// weftCommSplit's work: on success *joined tells whether `child` was initialized (false for
// WEFT_SPLIT_NOCOLOR).
Status SplitComm(weftComm* parent, int color, int key, weftComm* child, bool* joined);
}  // namespace weft
