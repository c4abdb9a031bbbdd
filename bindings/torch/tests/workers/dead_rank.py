"""The last rank exits abruptly after one collective; the others must raise (weft's message
naming the peer) within seconds instead of hanging."""
import os

import torch
import torch.distributed as dist

from common import init_world, wait_for_failure

if __name__ == "__main__":
    rank, size = init_world(timeout_s=60)
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == size - 1:
        os._exit(3)  # no cleanup: the peers see a dead process
    elapsed = wait_for_failure(rank, t)
    assert elapsed < 20, f"took {elapsed:.1f} s to notice the dead rank"
    # The group refuses further work with a clear error, not a hang.
    try:
        dist.all_reduce(t)
        raise AssertionError("all_reduce succeeded on a failed group")
    except dist.DistBackendError as err:
        print(f"rank {rank}: later call raised: {err}", flush=True)
    os._exit(0)
