"""Shared worker setup: the world as a weft group (rendezvous through a FileStore) and a gloo
group over the same ranks for reference results."""
import os

import torch
import torch.distributed as dist

import weft_torch  # noqa: F401  registers "weft"


def init_world(backend="weft", timeout_s=60):
    from datetime import timedelta
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, init_method="file://" + os.environ["WEFT_TEST_STORE"],
                            rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s))
    torch.manual_seed(1234 + rank)
    return rank, size


def check_equal(name, got, want, exact=True, rtol=0.0, atol=0.0):
    if exact:
        ok = torch.equal(got, want)
    else:
        ok = torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol)
    if not ok:
        raise AssertionError(f"{name}: weft {got.flatten()[:8].tolist()} != "
                             f"gloo {want.flatten()[:8].tolist()} (dtype {got.dtype})")


def wait_for_failure(rank, tensor, group=None):
    """all_reduce until the group fails (a peer died); returns the seconds it took. Raises when
    it never fails."""
    import time
    start = time.monotonic()
    try:
        for _ in range(100000):
            dist.all_reduce(tensor, group=group)
    except dist.DistBackendError as err:
        elapsed = time.monotonic() - start
        print(f"rank {rank}: raised after {elapsed:.2f} s: {err}", flush=True)
        assert "weft" in str(err), err
        return elapsed
    raise AssertionError("all_reduce kept succeeding after a rank died")
