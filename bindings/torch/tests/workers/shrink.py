"""torch.distributed.shrink_group on the weft backend: the last rank dies after one
collective; the survivors see the failure, shrink the group excluding it (SHRINK_ABORT) and
go on: all_reduce on the new group is exact, and its ranks are renumbered in order."""
import os
import time

import torch
import torch.distributed as dist

from common import init_world, wait_for_failure

if __name__ == "__main__":
    rank, size = init_world(timeout_s=60)
    if not hasattr(dist, "shrink_group"):
        print(f"rank {rank}: SKIP torch {torch.__version__} has no torch.distributed.shrink_group",
              flush=True)
        os._exit(0)
    t = torch.ones(1 << 14)
    dist.all_reduce(t)
    dead = size - 1
    if rank == dead:
        os._exit(3)  # no cleanup: the survivors see a dead process
    wait_for_failure(rank, t)
    start = time.monotonic()
    from torch.distributed.distributed_c10d import SHRINK_ABORT  # not re-exported by dist
    shrunk = dist.shrink_group([dead], shrink_flags=SHRINK_ABORT)
    assert shrunk.size() == size - 1, shrunk.size()
    assert dist.get_rank(shrunk) == rank, (dist.get_rank(shrunk), rank)
    for step in range(3):
        x = torch.full((1000,), float(rank + 1 + step))
        dist.all_reduce(x, group=shrunk)
        want = float(sum(r + 1 + step for r in range(size - 1)))
        assert torch.equal(x, torch.full((1000,), want)), (x[:4].tolist(), want)
    print(f"rank {rank}: shrunk to {shrunk.size()} ranks and ran 3 exact all_reduces "
          f"in {time.monotonic() - start:.2f} s after the failure; all_reduce exact", flush=True)
    os._exit(0)
