"""Side-by-side benchmark of the weft and gloo torch.distributed backends (CPU tensors).

    python -m weft_torch.bench [--nprocs 2,4] [--ops all_reduce,...] [-b 8] [-e 64M] [-f 4]
                               [--rounds 5] [--budget 0.1] [--ddp-steps 10]
                               [--no-ddp] [--no-overhead]

Prints, per process count, an nccl-tests-like table per collective (float32; size = bytes of
the whole buffer as weft-perf counts it: all_reduce the tensor, all_gather the output,
reduce_scatter the input, all_to_all either buffer), with time, algbw and busbw of both
backends and weft's busbw over gloo's; then a DDP training step of a small MLP and of a small
transformer over weft, gloo and weft with weft_torch.hooks.int8_hook, with the exposed
communication share ((DDP step - local step) / DDP step); then
the backend's own per-call overhead at 8 B (WeftBackend::allreduce + wait from C++ vs a bare
weftAllReduce on the same communicator, and dist.all_reduce from Python for reference).
A measurement is the slowest rank's mean over a batch of iterations; each row repeats the
(weft, gloo) pair --rounds times, alternating which backend goes first, and reports the median
of the rounds, so both backends see the same machine load (a shared machine's bursts land in
single rounds and drop out of the median)."""
import statistics
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"]
# busbw = algbw * factor(n): the bytes each rank's link carries relative to the buffer size.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather_into_tensor": lambda n: (n - 1) / n,
    "reduce_scatter_tensor": lambda n: (n - 1) / n,
    "all_to_all_single": lambda n: (n - 1) / n,
}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def sizes(lo, hi, factor):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def make_call(op, nbytes, n, group):
    """A zero-argument blocking call of op moving nbytes (whole buffer) on group."""
    elems = max(nbytes // 4, 1)
    if op == "all_reduce":
        t = torch.ones(elems)
        return lambda: dist.all_reduce(t, group=group)
    per_rank = max(elems // n, 1)
    if op == "all_gather_into_tensor":
        x, out = torch.ones(per_rank), torch.empty(per_rank * n)
        return lambda: dist.all_gather_into_tensor(out, x, group=group)
    if op == "reduce_scatter_tensor":
        x, out = torch.ones(per_rank * n), torch.empty(per_rank)
        return lambda: dist.reduce_scatter_tensor(out, x, group=group)
    x, out = torch.ones(per_rank * n), torch.empty(per_rank * n)
    return lambda: dist.all_to_all_single(out, x, group=group)


def slowest(seconds, sync_group):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=sync_group)
    return t.item()


def time_call(call, group, sync_group, budget_s=0.25):
    for _ in range(3):
        call()
    dist.barrier(group=sync_group)
    start = time.perf_counter()
    call()
    one = slowest(time.perf_counter() - start, sync_group)
    iters = int(min(max(budget_s / max(one, 1e-7), 5), 2000))
    dist.barrier(group=sync_group)
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return slowest((time.perf_counter() - start) / iters, sync_group)


def alternated_medians(measure, names, rounds):
    """{name: median over rounds of measure(name)}, alternating which name goes first."""
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(measure(name))
    return {name: statistics.median(v) for name, v in samples.items()}


def collective_tables(args, rank, n, groups, sync_group):
    for op in args.ops:
        if rank == 0:
            print(f"\n# {op}, float32, {n} processes (median of {args.rounds} alternated rounds)")
            print(f"# {'size(B)':>10} | {'weft us':>10} {'algbw':>7} {'busbw':>7} | "
                  f"{'gloo us':>10} {'algbw':>7} {'busbw':>7} | {'speedup':>7}")
        for nbytes in sizes(args.min_bytes, args.max_bytes, args.factor):
            calls = {name: make_call(op, nbytes, n, g) for name, g in groups.items()}
            row = alternated_medians(
                lambda name: time_call(calls[name], groups[name], sync_group, args.budget),
                ["weft", "gloo"], args.rounds)
            if rank == 0:
                cells = []
                for name in ("weft", "gloo"):
                    t = row[name]
                    alg = nbytes / t / 1e9
                    cells.append(f"{t * 1e6:10.1f} {alg:7.3f} {alg * BUS_FACTOR[op](n):7.3f}")
                # speedup = gloo time / weft time = weft busbw / gloo busbw
                print(f"  {nbytes:>10} | {cells[0]} | {cells[1]} | "
                      f"{row['gloo'] / row['weft']:7.2f}", flush=True)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 512))


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=2)


MODELS = {
    "mlp": (mlp, lambda g: (torch.randn(64, 512, generator=g),)),
    "transformer": (transformer, lambda g: (torch.randn(8, 64, 256, generator=g),)),
}


def step_timer(model, make_input, sync_group):
    """A function timing `steps` training steps of model (slowest rank's mean per step)."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(dist.get_rank())
    inputs = [make_input(g) for _ in range(4)]

    def step(i):
        opt.zero_grad()
        model(*inputs[i % 4]).float().pow(2).mean().backward()
        opt.step()

    for i in range(2):  # warm-up; DDP rebuilds its buckets after the first step
        step(i)

    def timed(steps):
        dist.barrier(group=sync_group)
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        return slowest((time.perf_counter() - start) / steps, sync_group)
    return timed


def ddp_table(args, rank, n, groups, sync_group):
    from torch.nn.parallel import DistributedDataParallel as DDP
    if rank == 0:
        print(f"\n# DDP training step, {n} processes (SGD; exposed comm share = "
              f"(DDP step - local step) / DDP step; median of {args.rounds} alternated rounds)")
        print(f"# {'model':>12} {'params':>9} | {'local ms':>9} | {'weft ms':>8} {'share':>6} | "
              f"{'gloo ms':>8} {'share':>6} | {'weft+int8_hook ms':>8} {'share':>6}")
    from . import hooks
    for name, (build, make_input) in MODELS.items():
        timers = {}
        for config in ("local", "weft", "gloo", "weft+int8"):
            torch.manual_seed(0)
            model = build()
            if config != "local":
                model = DDP(model, process_group=groups[config.split("+")[0]])
            if config == "weft+int8":
                model.register_comm_hook(hooks.CompressionState(), hooks.int8_hook)
            timers[config] = step_timer(model, make_input, sync_group)
        times = alternated_medians(lambda c: timers[c](args.ddp_steps), list(timers),
                                   args.rounds)
        if rank == 0:
            local = times["local"]
            params = sum(p.numel() for p in build().parameters())
            cells = " | ".join(f"{times[b] * 1e3:8.2f} {max(0.0, 1 - local / times[b]):6.1%}"
                               for b in ("weft", "gloo", "weft+int8"))
            print(f"  {name:>12} {params:>9} | {local * 1e3:9.2f} | {cells}", flush=True)


def overhead_table(args, rank, n, groups, sync_group):
    from . import _C
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    dist.barrier(group=sync_group)
    through, bare = _C._measure_overhead(backend, 2, args.overhead_iters)
    through = slowest(through * 1e-6, sync_group) * 1e6
    bare = slowest(bare * 1e-6, sync_group) * 1e6
    calls = {name: make_call("all_reduce", 8, n, g) for name, g in groups.items()}
    py = alternated_medians(
        lambda name: time_call(calls[name], groups[name], sync_group, args.budget) * 1e6,
        ["weft", "gloo"], args.rounds)
    if rank == 0:
        print(f"\n# per-call cost of an 8 B float32 all_reduce, {n} processes (us; medians "
              "of alternated blocks/rounds)")
        print(f"  bare weftAllReduce (C)                    {bare:8.2f}")
        print(f"  WeftBackend::allreduce + wait (C++)       {through:8.2f}"
              f"   -> backend overhead {through - bare:6.2f}")
        print(f"  dist.all_reduce, weft (Python)            {py['weft']:8.2f}")
        print(f"  dist.all_reduce, gloo (Python)            {py['gloo']:8.2f}", flush=True)


def worker(rank, n, args, store_path):
    torch.set_num_threads(1)
    import weft_torch  # noqa: F401  registers "weft"
    dist.init_process_group("weft", init_method="file://" + store_path, rank=rank, world_size=n)
    gloo = dist.new_group(backend="gloo")
    groups = {"weft": dist.group.WORLD, "gloo": gloo}
    if args.ops:
        collective_tables(args, rank, n, groups, gloo)
    if args.ddp:
        ddp_table(args, rank, n, groups, gloo)
    if args.overhead:
        overhead_table(args, rank, n, groups, gloo)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nprocs", default="2,4", help="comma-separated process counts")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated; '' for none")
    p.add_argument("-b", "--min-bytes", default="8", type=parse_size)
    p.add_argument("-e", "--max-bytes", default="64M", type=parse_size)
    p.add_argument("-f", "--factor", default=4, type=int)
    p.add_argument("--no-ddp", dest="ddp", action="store_false")
    p.add_argument("--ddp-steps", default=10, type=int, help="DDP steps per round")
    p.add_argument("--rounds", default=5, type=int,
                   help="alternated (weft, gloo) rounds per row; the median is reported")
    p.add_argument("--budget", default=0.1, type=float,
                   help="seconds of iterations per collective measurement (at least 5 calls)")
    p.add_argument("--no-overhead", dest="overhead", action="store_false")
    p.add_argument("--overhead-iters", default=20000, type=int)
    args = p.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    for op in args.ops:
        if op not in OPS:
            p.error(f"--ops: unknown collective {op!r} (choose from {', '.join(OPS)})")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for n in (int(x) for x in args.nprocs.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(n, args, os.path.join(tmp, "store")), nprocs=n, join=True)


if __name__ == "__main__":
    main()
