"""Every collective of the weft backend against gloo's result on the same ranks.

Inputs are small integers stored in each dtype, so sums, products, min and max are exact in
every dtype and every reduction order: weft and gloo must agree bit for bit (AVG, which gloo
lacks, is checked against gloo's SUM divided by the world size)."""
import torch
import torch.distributed as dist

from common import check_equal, init_world

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]


def values(shape, dtype, salt=0):
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + salt)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def both(fn):
    """fn(group) on the weft world and on the gloo group; returns (weft, gloo) results."""
    return fn(None), fn(GLOO)


def check_allreduce(dtype, size):
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    for op in ops:
        for numel in (1, 7, 1000):
            w, g = both(lambda grp: _allreduce(values((numel,), dtype, numel), op, grp))
            check_equal(f"all_reduce {op} {numel}", w, g)
    # AVG: weft sums then divides once (integers truncate toward zero).
    w = _allreduce(values((33,), dtype, 5), dist.ReduceOp.AVG, None)
    s = _allreduce(values((33,), dtype, 5), dist.ReduceOp.SUM, GLOO)
    want = torch.div(s, size, rounding_mode="trunc") if not dtype.is_floating_point else \
        (s.double() / size).to(dtype)
    check_equal("all_reduce AVG", w, want)
    if dtype.is_floating_point:
        premul = dist._make_nccl_premul_sum(0.5)
        w = _allreduce(values((65,), dtype, 6), premul, None)
        g = _allreduce(values((65,), dtype, 6) * 0.5, dist.ReduceOp.SUM, GLOO)
        check_equal("all_reduce PREMUL_SUM(0.5)", w, g)
    # Non-contiguous tensor (a transpose) and async with a Future, as DDP hooks use it.
    base = values((6, 5), dtype, 7)
    w, g = base.clone().t(), base.clone().t()
    dist.all_reduce(w)
    dist.all_reduce(g, group=GLOO)
    check_equal("all_reduce non-contiguous", w, g)
    t = values((100,), dtype, 8)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    g = _allreduce(values((100,), dtype, 8), dist.ReduceOp.SUM, GLOO) * 2
    check_equal("all_reduce future", fut.wait(), g)


def _allreduce(t, op, group):
    dist.all_reduce(t, op=op, group=group)
    return t


def check_gathers(dtype, size):
    x = values((5, 3), dtype, 10)
    w, g = both(lambda grp: _all_gather_list(x, size, grp))
    check_equal("all_gather", w, g)
    w, g = both(lambda grp: _all_gather_tensor(x, size, grp))
    check_equal("all_gather_into_tensor", w, g)
    root = size - 1
    w, g = both(lambda grp: _gather(x, size, root, grp))
    if dist.get_rank() == root:
        check_equal("gather", w, g)
    w, g = both(lambda grp: _scatter(dtype, size, 0, grp))
    check_equal("scatter", w, g)
    w, g = both(lambda grp: _broadcast(values((17,), dtype, 11), 1 % size, grp))
    check_equal("broadcast", w, g)


def _all_gather_list(x, size, group):
    out = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(out, x, group=group)
    return torch.stack(out)


def _all_gather_tensor(x, size, group):
    out = torch.empty((size * x.shape[0], x.shape[1]), dtype=x.dtype)
    dist.all_gather_into_tensor(out, x, group=group)
    return out


def _gather(x, size, root, group):
    out = [torch.empty_like(x) for _ in range(size)] if dist.get_rank() == root else None
    dist.gather(x, out, dst=root, group=group)
    return torch.stack(out) if out else None


def _scatter(dtype, size, root, group):
    out = torch.empty(9, dtype=dtype)
    chunks = [values((9,), dtype, 20 + r) for r in range(size)] if dist.get_rank() == root else None
    dist.scatter(out, chunks, src=root, group=group)
    return out


def _broadcast(t, root, group):
    dist.broadcast(t, src=root, group=group)
    return t


def check_reductions_rooted(dtype, size):
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        w, g = both(lambda grp: _reduce_scatter_tensor(values((size * 6,), dtype, 30), op, grp))
        check_equal(f"reduce_scatter_tensor {op}", w, g)
        w, g = both(lambda grp: _reduce_scatter_list(dtype, size, op, grp))
        check_equal(f"reduce_scatter {op}", w, g)
        root = size - 1
        w, g = both(lambda grp: _reduce(values((12,), dtype, 32), op, root, grp))
        if dist.get_rank() == root:
            check_equal(f"reduce {op}", w, g)


def _reduce_scatter_tensor(x, op, group):
    out = torch.empty(x.numel() // dist.get_world_size(), dtype=x.dtype)
    dist.reduce_scatter_tensor(out, x, op=op, group=group)
    return out


def _reduce_scatter_list(dtype, size, op, group):
    out = torch.empty(4, dtype=dtype)
    dist.reduce_scatter(out, [values((4,), dtype, 40 + r) for r in range(size)], op=op, group=group)
    return out


def _reduce(t, op, root, group):
    dist.reduce(t, dst=root, op=op, group=group)
    return t


def check_all_to_all(dtype, size):
    rank = dist.get_rank()
    x = values((size * 4, 3), dtype, 50)
    w, g = both(lambda grp: _a2a_single(x, None, None, grp))
    check_equal("all_to_all_single even", w, g)
    # Uneven (MoE dispatch): rank r sends r + j + 1 rows to rank j.
    in_splits = [rank + j + 1 for j in range(size)]
    out_splits = [j + rank + 1 for j in range(size)]
    x = values((sum(in_splits), 3), dtype, 51)
    w, g = both(lambda grp: _a2a_single(x, out_splits, in_splits, grp))
    check_equal("all_to_all_single splits", w, g)
    ins = [values((5,), dtype, 60 + j) for j in range(size)]
    w, g = both(lambda grp: _a2a_list(ins, [5] * size, dtype, grp))
    check_equal("all_to_all", w, g)
    # Uneven lists (gloo requires equal sizes): closed form, rank j sent full(100 j + rank).
    ins = [torch.full((rank + j + 1,), 10 * rank + j).to(dtype) for j in range(size)]
    w = _a2a_list(ins, [j + rank + 1 for j in range(size)], dtype, None)
    want = torch.cat([torch.full((j + rank + 1,), 10 * j + rank) for j in range(size)]).to(dtype)
    check_equal("all_to_all uneven", w, want)


def _a2a_single(x, out_splits, in_splits, group):
    rows = sum(out_splits) if out_splits else x.shape[0]
    out = torch.empty((rows, x.shape[1]), dtype=x.dtype)
    dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
    return out


def _a2a_list(ins, out_sizes, dtype, group):
    outs = [torch.empty(n, dtype=dtype) for n in out_sizes]
    dist.all_to_all(outs, ins, group=group)
    return torch.cat(outs)


def check_p2p_and_coalesced(dtype, size):
    rank = dist.get_rank()
    # Ring exchange posted together (batch_isend_irecv -> one weft group).
    send = values((1000,), dtype, 70)
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % size),
           dist.P2POp(dist.irecv, recv, (rank - 1) % size)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    expect = torch.empty_like(send)
    gops = [dist.P2POp(dist.isend, send, (rank + 1) % size, group=GLOO),
            dist.P2POp(dist.irecv, expect, (rank - 1) % size, group=GLOO)]
    for req in dist.batch_isend_irecv(gops):
        req.wait()
    check_equal("batch_isend_irecv ring", recv, expect)
    # Plain send/recv: rank 0 -> rank 1.
    t = values((33,), dtype, 71)
    if rank == 0:
        dist.send(torch.arange(33).to(dtype), dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
        check_equal("send/recv", t, torch.arange(33).to(dtype))
    # Coalesced all_reduce (one weft group) against separate gloo calls.
    tensors = [values((n,), dtype, 80 + n) for n in (3, 40, 500)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in tensors:
            dist.all_reduce(t)
    cm.wait()
    for n, t in zip((3, 40, 500), tensors):
        check_equal(f"coalesced all_reduce {n}", t, _allreduce(values((n,), dtype, 80 + n),
                                                               dist.ReduceOp.SUM, GLOO))
    dist.barrier()


def check_subgroup(size):
    """new_group: each group is a weft communicator of its members, built through the group's
    store prefix (not a weftCommSplit of the world, whose split count must not move); groups
    may overlap, a non-member gets GroupMember.NON_GROUP_MEMBER, and the world keeps working."""
    world = dist.group.WORLD._get_backend(torch.device("cpu"))
    splits_before = world.comm_split_count()
    rank = dist.get_rank()
    for members in ([0, 1], [0, size - 1], list(range(1, size))):
        sub = dist.new_group(members, backend="weft")
        gsub = dist.new_group(members, backend="gloo")
        if rank not in members:
            assert sub == dist.GroupMember.NON_GROUP_MEMBER, sub
            continue
        assert dist.get_world_size(sub) == len(members)
        assert dist.get_rank(sub) == members.index(rank)
        assert sub._get_backend(torch.device("cpu")).comm_split_count() == 0
        w, g = values((10,), torch.float32, 90), values((10,), torch.float32, 90)
        dist.all_reduce(w, group=sub)
        dist.all_reduce(g, group=gsub)
        check_equal(f"new_group({members}) all_reduce", w, g)
        x = torch.full((3,), float(rank))
        dist.broadcast(x, group_src=0, group=sub)  # the group's rank 0, a world rank members[0]
        assert torch.equal(x, torch.full((3,), float(members[0]))), x
    assert world.comm_split_count() == splits_before, "new_group split the world communicator"
    t = torch.ones(5)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), float(size))), t


if __name__ == "__main__":
    rank, size = init_world()
    GLOO = dist.new_group(backend="gloo")
    for dtype in DTYPES:
        check_allreduce(dtype, size)
        check_gathers(dtype, size)
        check_reductions_rooted(dtype, size)
        check_all_to_all(dtype, size)
        check_p2p_and_coalesced(dtype, size)
    check_subgroup(size)
    print(f"rank {rank}: all collectives match gloo for {[str(d) for d in DTYPES]}", flush=True)
    dist.destroy_process_group()
