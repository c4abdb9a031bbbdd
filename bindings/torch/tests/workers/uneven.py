"""all_gather with a different tensor size per rank and reduce_scatter with a different input
size per rank: the weft backend runs them as weftAllGatherV / weftReduceScatterV. Results are
compared with closed forms (small integers: exact in every dtype); zero sizes included."""
import torch
import torch.distributed as dist

from common import check_equal, init_world

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32]


def block(owner, numel, dtype, salt):
    """What rank `owner` contributes: small integers, exact in every dtype."""
    return ((torch.arange(numel) * 3 + owner * 7 + salt) % 11 - 5).to(dtype)


def sizes_for(size, pattern):
    if pattern == "uneven":
        return [q * 2 + 1 for q in range(size)]
    if pattern == "zeros":
        return [0 if q % 2 == 1 else 4 + q for q in range(size)]
    return [1000 if q == size - 1 else 1 for q in range(size)]  # very uneven


def check_all_gather(rank, size, dtype, pattern):
    sizes = sizes_for(size, pattern)
    out = [torch.full((n,), -99, dtype=dtype) for n in sizes]
    dist.all_gather(out, block(rank, sizes[rank], dtype, 1))
    for q in range(size):
        check_equal(f"all_gather {pattern} {dtype} block {q}", out[q], block(q, sizes[q], dtype, 1))
    # 2-D tensors of different row counts
    rows = [s + 1 for s in sizes]
    out2 = [torch.zeros((r, 3), dtype=dtype) for r in rows]
    dist.all_gather(out2, block(rank, rows[rank] * 3, dtype, 2).view(rows[rank], 3))
    for q in range(size):
        check_equal(f"all_gather 2-D {pattern} {dtype} block {q}", out2[q],
                    block(q, rows[q] * 3, dtype, 2).view(rows[q], 3))


def check_reduce_scatter(rank, size, dtype, pattern):
    sizes = sizes_for(size, pattern)
    ops = [(dist.ReduceOp.SUM, lambda xs: sum(xs)),
           (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values)]
    for op, ref in ops:
        inputs = [block(rank * 5 + q, sizes[q], dtype, 3) for q in range(size)]
        out = torch.full((sizes[rank],), -99, dtype=dtype)
        dist.reduce_scatter(out, inputs, op=op)
        want = ref([block(r * 5 + rank, sizes[rank], dtype, 3) for r in range(size)]).to(dtype)
        check_equal(f"reduce_scatter {op} {pattern} {dtype}", out, want)


def check_bad_sizes(rank, size):
    """This rank's own block must match its input: refused on the caller's thread, naming it."""
    out = [torch.zeros(q + 1) for q in range(size)]
    try:
        dist.all_gather(out, torch.zeros(rank + 2))
        raise AssertionError("all_gather accepted an input of the wrong size")
    except ValueError as err:
        assert f"tensor_list[{rank}]" in str(err), err


if __name__ == "__main__":
    rank, size = init_world()
    for dtype in DTYPES:
        for pattern in ("uneven", "zeros", "very uneven"):
            check_all_gather(rank, size, dtype, pattern)
            check_reduce_scatter(rank, size, dtype, pattern)
    check_bad_sizes(rank, size)
    dist.barrier()
    print(f"rank {rank}: uneven collectives ok", flush=True)
    dist.destroy_process_group()
