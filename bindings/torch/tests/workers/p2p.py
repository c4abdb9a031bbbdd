"""Point-to-point exchanges between the two ends of every pair, in every posting and waiting
order, small to several MiB (issue 38: `irecv(peer); isend(peer); wait()` deadlocked at 300
floats and `isend; irecv` at 1M floats when each operation ran alone as a blocking weft call).
Every received tensor is checked against the closed form the sender filled it with. The group's
timeout is short so that a deadlock fails within seconds, not after weft's default 300 s."""
import sys

import torch
import torch.distributed as dist

from common import check_equal, init_world

SIZES = [1, 300, 65536, 1 << 20, 3 << 20]  # floats: 4 B .. 12 MiB


def payload(src, dst, numel, salt):
    return torch.arange(numel, dtype=torch.float32) + float(1000 * src + 10 * dst + salt)


def exchange(peer, numel, order, wait_order, salt):
    """Both ranks post a send to and a receive from peer in `order`, then wait in wait_order."""
    rank = dist.get_rank()
    out = payload(rank, peer, numel, salt)
    got = torch.empty(numel)
    works = {}
    for kind in order:
        works[kind] = dist.isend(out, peer) if kind == "send" else dist.irecv(got, peer)
    for kind in wait_order:
        works[kind].wait()
    check_equal(f"{order} then wait {wait_order}, {numel} floats from {peer}", got,
                payload(peer, rank, numel, salt))


def check_pairs(rank, size):
    """Rank pairs (0,1), (2,3)...: every ordering of isend/irecv and of the waits."""
    peer = rank ^ 1
    if peer >= size:
        return
    orders = [("recv", "send"), ("send", "recv")]
    for salt, numel in enumerate(SIZES):
        for order in orders:
            for wait_order in orders:
                exchange(peer, numel, order, wait_order, salt)
        # Blocking calls, the lower rank sending first (ordered as MPI's safe exchange).
        out, got = payload(rank, peer, numel, salt), torch.empty(numel)
        if rank < peer:
            dist.send(out, peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(out, peer)
        check_equal(f"send/recv {numel} floats from {peer}", got, payload(peer, rank, numel, salt))


def check_ring(rank, size):
    """Every rank sends to the next and receives from the previous, both posting orders, and
    several messages to one peer arrive in posting order."""
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for numel in (300, 1 << 20):
        for recv_first in (True, False):
            got = [torch.empty(numel) for _ in range(3)]
            works = []
            if recv_first:
                works += [dist.irecv(g, prv) for g in got]
            works += [dist.isend(payload(rank, nxt, numel, k), nxt) for k in range(3)]
            if not recv_first:
                works += [dist.irecv(g, prv) for g in got]
            for w in reversed(works):
                w.wait()
            for k, g in enumerate(got):
                check_equal(f"ring message {k}, {numel} floats", g, payload(prv, rank, numel, k))


def check_then_collective(rank, size):
    """A send nobody has waited on yet goes out before a later collective (no hang)."""
    peer = rank ^ 1
    if peer < size:
        got = torch.empty(1000)
        works = [dist.irecv(got, peer), dist.isend(payload(rank, peer, 1000, 7), peer)]
    t = torch.ones(4)
    dist.all_reduce(t)
    check_equal("all_reduce after held-back p2p", t, torch.full((4,), float(size)))
    if peer < size:
        assert all(w.is_completed() or w.wait() for w in works)
        check_equal("p2p before all_reduce", got, payload(peer, rank, 1000, 7))


if __name__ == "__main__":
    rank, size = init_world(timeout_s=float(sys.argv[1]) if len(sys.argv) > 1 else 20)
    check_pairs(rank, size)
    check_ring(rank, size)
    check_then_collective(rank, size)
    dist.barrier()
    print(f"rank {rank}: point-to-point ok", flush=True)
    dist.destroy_process_group()
