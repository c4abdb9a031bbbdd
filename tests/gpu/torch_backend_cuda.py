#!/usr/bin/env python3
"""The "weft" torch.distributed backend on CUDA tensors, on the lent GPU machine (one H100).

Spawns N processes (N = 2 and 4 by default), every one on cuda:0 (several ranks share the GPU:
weft moves device memory between them through its ipc transport), runs every collective the
backend has on CUDA tensors of float32 and bfloat16, ops sum/avg/max, 1 element .. 4M elements,
and compares each result with the same collective computed in float64 on the CPU from every
rank's input (each rank regenerates all ranks' inputs from their seeds). The reference is the
CPU, not NCCL: NCCL refuses two ranks on one GPU, so "equals NCCL" cannot be run here.

Inputs are multiples of 1/4 in [-8, 8]: sums, averages (N a power of two) and maxima of them are
exact in float32 and bfloat16, so those comparisons are exact; a float32/bfloat16 all_reduce of
normal-distributed data is compared within a tolerance (rtol 1e-5 / 2e-2). Data-movement
collectives are compared bit for bit.

Also: the compressed allreduce of weft_torch.hooks on CUDA buckets (bitwise the CPU call's
result and residual); async_op=True + wait() with the collective queued behind a long kernel on a side stream,
then a kernel on the waiting (default) stream reading the result (fails if wait() does not
order the current stream after the work); get_future().then(); is_completed()/synchronize();
and the argument errors (mixed CPU/CUDA tensors; a CUDA tensor with WEFT_DEVICE=none).

Prints one line per case ("OK"/"FAIL" with the ranks' details), then "ALL OK" or the number of
failures; exit status non-zero on any failure. Every case runs under a watchdog (a rank stuck
in one case dumps its stack and exits) and every group of processes under a wall-clock limit.

Run (after tests/gpu/torch_build.sh, which prints the environment to use):
    . $WEFT_TORCH_BUILD/env.sh && python3 tests/gpu/torch_backend_cuda.py [--nprocs 2,4]
"""
import argparse
import faulthandler
import os
import socket
import subprocess
import sys
import time
from collections import OrderedDict

SIZES = (1, 7, 4099, 1 << 16, 4 << 20)  # elements; 4M is the largest
OPS = ("sum", "avg", "max")
DTYPES = ("float32", "bfloat16")


# ---------------------------------------------------------------- the worker (one rank) ----

def rank_input(torch, case_seed, rank, numel, kind="grid"):
    """Rank `rank`'s input of a case, in float64 on the CPU (every rank can rebuild it)."""
    g = torch.Generator().manual_seed(case_seed * 1009 + rank)
    if kind == "grid":  # multiples of 1/4 in [-8, 8]: exact in bf16, and so are sums of <= 4
        return torch.randint(-32, 33, (numel,), generator=g, dtype=torch.int64).double() / 4
    return torch.randn(numel, generator=g, dtype=torch.float64)


def reduce_ref(torch, inputs, op):
    stacked = torch.stack(inputs)
    if op == "sum":
        return stacked.sum(0)
    if op == "avg":
        return stacked.sum(0) / len(inputs)
    return stacked.max(0).values


class Worker:
    def __init__(self, torch, dist, rank, size, case_timeout, device):
        self.torch, self.dist = torch, dist
        self.rank, self.size = rank, size
        self.case_timeout = case_timeout
        self.dev = torch.device(device)
        self.seed = 0

    def report(self, name, ok, detail=""):
        print(f"CASE {name} {'OK' if ok else 'FAIL'} {detail}".rstrip(), flush=True)

    def run_case(self, name, fn):
        self.seed += 1
        print(f"START {name}", flush=True)
        faulthandler.dump_traceback_later(self.case_timeout, exit=True)
        try:
            ok, detail = fn(self.seed)
        except Exception as err:  # a failing case is reported, the next one still runs
            ok, detail = False, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        finally:
            faulthandler.cancel_dump_traceback_later()
        self.report(name, ok, detail)

    def inputs(self, seed, numel, kind="grid"):
        return [rank_input(self.torch, seed, r, numel, kind) for r in range(self.size)]

    def cuda(self, t64, dtype):
        return t64.to(getattr(self.torch, dtype)).to(self.dev)

    def compare(self, got, ref64, dtype, exact=True):
        """got (CUDA, dtype) against the float64 reference rounded to dtype."""
        torch = self.torch
        got64 = got.double().cpu()
        want = ref64.to(getattr(torch, dtype)).double()
        if got64.shape != want.shape:
            return False, f"shape {tuple(got64.shape)} != {tuple(want.shape)}"
        if exact:
            bad = (got64 != want).nonzero()
        else:
            tol = 1e-5 if dtype == "float32" else 2e-2
            bad = (~torch.isclose(got64, want, rtol=tol, atol=tol * self.size)).nonzero()
        if len(bad):
            i = bad[0].tolist()
            i = tuple(i) if len(i) > 1 else i[0]
            return False, (f"{len(bad)} of {want.numel()} differ; first at {i}: got "
                           f"{got64[i].item()!r}, want {want[i].item()!r}")
        return True, ""

    def op(self, name):
        return {"sum": self.dist.ReduceOp.SUM, "avg": self.dist.ReduceOp.AVG,
                "max": self.dist.ReduceOp.MAX}[name]

    # ---- reductions ----
    def all_reduce(self, dtype, op, numel, kind="grid"):
        def fn(seed):
            ins = self.inputs(seed, numel, kind)
            t = self.cuda(ins[self.rank], dtype)
            self.dist.all_reduce(t, op=self.op(op))
            return self.compare(t, reduce_ref(self.torch, self.inputs_rounded(ins, dtype), op),
                                dtype, exact=(kind == "grid"))
        return fn

    def inputs_rounded(self, ins, dtype):
        return [x.to(getattr(self.torch, dtype)).double() for x in ins]

    def reduce(self, dtype, op, numel):
        def fn(seed):
            root = seed % self.size
            ins = self.inputs_rounded(self.inputs(seed, numel), dtype)
            t = self.cuda(ins[self.rank], dtype)
            self.dist.reduce(t, dst=root, op=self.op(op))
            if self.rank != root:  # non-roots keep their input
                return self.compare(t, ins[self.rank], dtype)
            return self.compare(t, reduce_ref(self.torch, ins, op), dtype)
        return fn

    def reduce_scatter(self, dtype, op, numel, as_tensor):
        def fn(seed):
            block = max(1, numel // self.size)
            ins = self.inputs_rounded(self.inputs(seed, block * self.size), dtype)
            out = self.torch.empty(block, dtype=getattr(self.torch, dtype), device=self.dev)
            mine = self.cuda(ins[self.rank], dtype)
            if as_tensor:
                self.dist.reduce_scatter_tensor(out, mine, op=self.op(op))
            else:
                self.dist.reduce_scatter(out, list(mine.chunk(self.size)), op=self.op(op))
            ref = reduce_ref(self.torch, ins, op)[self.rank * block:(self.rank + 1) * block]
            return self.compare(out, ref, dtype)
        return fn

    # ---- data movement (bitwise) ----
    def broadcast(self, dtype, numel):
        def fn(seed):
            root = (self.size - 1) if seed % 2 else 0
            ins = self.inputs(seed, numel)
            t = self.cuda(ins[self.rank], dtype)
            self.dist.broadcast(t, src=root)
            return self.compare(t, ins[root], dtype)
        return fn

    def all_gather(self, dtype, numel, as_tensor):
        def fn(seed):
            ins = self.inputs(seed, numel)
            mine = self.cuda(ins[self.rank], dtype)
            if as_tensor:
                out = self.torch.empty(numel * self.size, dtype=mine.dtype, device=self.dev)
                self.dist.all_gather_into_tensor(out, mine)
            else:
                parts = [self.torch.empty_like(mine) for _ in range(self.size)]
                self.dist.all_gather(parts, mine)
                out = self.torch.cat(parts)
            return self.compare(out, self.torch.cat(ins), dtype)
        return fn

    def all_to_all(self, dtype, numel, single):
        def fn(seed):
            block = max(1, numel // self.size)
            ins = self.inputs(seed, block * self.size)
            mine = self.cuda(ins[self.rank], dtype)
            if single:
                out = self.torch.empty_like(mine)
                self.dist.all_to_all_single(out, mine)
            else:
                parts = [self.torch.empty(block, dtype=mine.dtype, device=self.dev)
                         for _ in range(self.size)]
                self.dist.all_to_all(parts, list(mine.chunk(self.size)))
                out = self.torch.cat(parts)
            ref = self.torch.cat([ins[src][self.rank * block:(self.rank + 1) * block]
                                  for src in range(self.size)])
            return self.compare(out, ref, dtype)
        return fn

    def send_recv(self, dtype, numel):
        """A ring: every rank sends to rank+1 and receives from rank-1 (batch_isend_irecv)."""
        def fn(seed):
            ins = self.inputs(seed, numel)
            mine = self.cuda(ins[self.rank], dtype)
            got = self.torch.empty_like(mine)
            nxt, prv = (self.rank + 1) % self.size, (self.rank - 1) % self.size
            ops = [self.dist.P2POp(self.dist.isend, mine, nxt),
                   self.dist.P2POp(self.dist.irecv, got, prv)]
            for w in self.dist.batch_isend_irecv(ops):
                w.wait()
            ok, detail = self.compare(got, ins[prv], dtype)
            if not ok:
                return ok, "batch_isend_irecv: " + detail
            # Plain send/recv pairs too: even ranks send first, odd ranks receive first.
            got2 = self.torch.empty_like(mine)
            if self.rank % 2 == 0:
                self.dist.send(mine, nxt)
                self.dist.recv(got2, prv)
            else:
                self.dist.recv(got2, prv)
                self.dist.send(mine, nxt)
            ok, detail = self.compare(got2, ins[prv], dtype)
            return ok, ("send/recv: " + detail) if not ok else ""
        return fn

    def barrier(self, seed):
        self.dist.barrier()
        return True, ""

    # ---- stream semantics ----
    def async_wait_other_stream(self, seed):
        """The collective is queued on a side stream behind a ~50 ms kernel; the default stream
        waits on the Work and reads the result at once. Without wait() ordering the default
        stream after the work, the read sees the input."""
        torch = self.torch
        numel = 1 << 20
        ins = self.inputs(seed, numel)
        side = torch.cuda.Stream(device=self.dev)
        side.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(side):
            t = self.cuda(ins[self.rank], "float32")
            torch.cuda._sleep(100_000_000)  # cycles: tens of ms on the side stream
            work = self.dist.all_reduce(t, async_op=True)
        work.wait()  # the default stream now waits for the work
        doubled = t * 2  # a kernel on the default stream reading the result
        ok, detail = self.compare(doubled, 2 * reduce_ref(torch, ins, "sum"), "float32")
        if not ok:
            return ok, "read after wait(): " + detail
        work.synchronize()
        if not work.is_completed():
            return False, "is_completed() is False after synchronize()"
        # t was allocated on the side stream and used on the default one: tell the allocator.
        t.record_stream(torch.cuda.current_stream(self.dev))
        return True, ""

    def future_then(self, seed):
        torch = self.torch
        ins = self.inputs(seed, 4099)
        t = self.cuda(ins[self.rank], "float32")
        torch.cuda._sleep(50_000_000)
        fut = self.dist.all_reduce(t, async_op=True).get_future()
        fut2 = fut.then(lambda f: f.value()[0] * 3)
        got = fut2.wait()
        return self.compare(got, 3 * reduce_ref(torch, ins, "sum"), "float32")

    def async_many(self, seed):
        """Several async collectives in flight on the current stream, waited on in order."""
        torch = self.torch
        ins = [self.inputs(seed * 10 + i, 65536) for i in range(4)]
        ts = [self.cuda(x[self.rank], "float32") for x in ins]
        works = [self.dist.all_reduce(t, async_op=True) for t in ts]
        for w in works:
            w.wait()
        for i, t in enumerate(ts):
            ok, detail = self.compare(t, reduce_ref(torch, ins[i], "sum"), "float32")
            if not ok:
                return ok, f"tensor {i}: {detail}"
        return True, ""

    def compressed(self, numel):
        """weft_torch.hooks' compressed allreduce (int8, error feedback) on a CUDA tensor gives
        the bits of the same call on the CPU (weft's device path runs the host codecs on a
        staged copy), and so does the residual it leaves."""
        def fn(seed):
            from weft_torch import hooks
            torch = self.torch
            x = rank_input(torch, seed, self.rank, numel, "normal").float()
            results = []
            for device in ("cpu", self.dev):
                state = hooks.CompressionState(codec="int8")
                t = x.to(device)
                hooks.compressed_all_reduce(t, state).wait()
                results.append((t.cpu(), state.residuals[0].cpu(), state.residuals[0].device))
            (cpu, cpu_res, _), (dev, dev_res, res_device) = results
            if res_device != self.dev:
                return False, f"the residual of a {self.dev} bucket is on {res_device}"
            if not torch.equal(cpu, dev):
                bad = (cpu != dev).nonzero()[0].item()
                return False, f"result differs from the CPU call's at {bad}: {dev[bad]} vs {cpu[bad]}"
            if not torch.equal(cpu_res, dev_res):
                return False, "residual differs from the CPU call's"
            return True, ""
        return fn

    # ---- argument errors ----
    def mixed_devices(self, seed):
        torch = self.torch
        mine = torch.ones(4, device=self.dev)
        parts = [torch.empty(4) for _ in range(self.size)]  # CPU outputs for a CUDA input
        try:
            self.dist.all_gather(parts, mine)
        except ValueError as err:
            text = str(err)
            ok = "tensor_list[0]" in text and "cuda:0" in text and "cpu" in text
            return ok, "" if ok else f"message lacks the argument or devices: {text}"
        return False, "no ValueError for CPU outputs with a CUDA input"

    def cases(self, sizes):
        c = OrderedDict()
        for dtype in DTYPES:
            for n in sizes:
                for op in OPS:
                    c[f"all_reduce/{dtype}/{op}/n={n}"] = self.all_reduce(dtype, op, n)
                    c[f"reduce/{dtype}/{op}/n={n}"] = self.reduce(dtype, op, n)
                    c[f"reduce_scatter/{dtype}/{op}/n={n}"] = self.reduce_scatter(dtype, op, n, False)
                    c[f"reduce_scatter_tensor/{dtype}/{op}/n={n}"] = self.reduce_scatter(dtype, op, n, True)
                c[f"all_reduce/{dtype}/sum/normal/n={n}"] = self.all_reduce(dtype, "sum", n, "normal")
                c[f"broadcast/{dtype}/n={n}"] = self.broadcast(dtype, n)
                c[f"all_gather/{dtype}/n={n}"] = self.all_gather(dtype, n, False)
                c[f"all_gather_into_tensor/{dtype}/n={n}"] = self.all_gather(dtype, n, True)
                c[f"all_to_all_single/{dtype}/n={n}"] = self.all_to_all(dtype, n, True)
                c[f"all_to_all/{dtype}/n={n}"] = self.all_to_all(dtype, n, False)
                c[f"send_recv/{dtype}/n={n}"] = self.send_recv(dtype, n)
        c["barrier"] = self.barrier
        if self.dev.type != "cuda":  # --device cpu: checks this script's references only
            return c
        c["async_op+wait on another stream, then a kernel"] = self.async_wait_other_stream
        c["get_future().then()"] = self.future_then
        c["4 async all_reduce in flight"] = self.async_many
        for n in (4099, 1 << 20):
            c[f"compressed all_reduce (hooks, int8) equals the CPU call's bits/n={n}"] = \
                self.compressed(n)
        c["ValueError: CPU tensor_list with a CUDA input"] = self.mixed_devices
        return c


def worker_main(args):
    import torch
    import torch.distributed as dist
    import weft_torch  # noqa: F401  (registers "weft")
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        torch.cuda.set_device(0)
    if args.runtime_mismatch:
        return runtime_mismatch(torch, dist, rank, size)
    dist.init_process_group("weft", rank=rank, world_size=size)
    w = Worker(torch, dist, rank, size, args.case_timeout, args.device)
    for name, fn in w.cases(args.sizes).items():
        w.run_case(name, fn)
    if args.device == "cuda":
        torch.cuda.synchronize()
    dist.destroy_process_group()
    print("WORKER DONE", flush=True)
    return 0


def runtime_mismatch(torch, dist, rank, size):
    """WEFT_DEVICE=none: a CUDA tensor must raise a ValueError saying to set WEFT_DEVICE=cuda."""
    dist.init_process_group("weft", rank=rank, world_size=size)
    t = torch.ones(3, device="cuda:0")
    try:
        dist.all_reduce(t)
        ok, detail = False, "no ValueError for a CUDA tensor with WEFT_DEVICE=none"
    except ValueError as err:
        text = str(err)
        ok = all(s in text for s in ("tensor[0]", "cuda:0", '"none"', "WEFT_DEVICE=cuda"))
        detail = "" if ok else f"message lacks argument/device/runtime/advice: {text}"
    print(f"CASE ValueError: CUDA tensor with WEFT_DEVICE=none {'OK' if ok else 'FAIL'} {detail}",
          flush=True)
    dist.destroy_process_group()
    print("WORKER DONE", flush=True)
    return 0


# ---------------------------------------------------------------- the launcher ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nprocs, extra, env_extra, limit):
    """Runs nprocs workers; returns [(rank, returncode, output)], killing all at `limit` s."""
    env = dict(os.environ, WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="2", **env_extra)
    procs = []
    for rank in range(nprocs):
        log = open(os.path.join(args_global.logdir, f"n{nprocs}{extra_tag(extra)}-rank{rank}.log"),
                   "w+")
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", *extra],
                             env=dict(env, RANK=str(rank)), stdout=log, stderr=subprocess.STDOUT)
        procs.append((rank, p, log))
    deadline = time.monotonic() + limit
    for _, p, _ in procs:
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    results = []
    for rank, p, log in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)
            code = f"killed after {limit} s"
        else:
            code = p.returncode
        log.seek(0)
        results.append((rank, code, log.read()))
        log.close()
    return results


def extra_tag(extra):
    return "-mismatch" if "--runtime-mismatch" in extra else ""


def summarize(title, results, expect_cases=None):
    """Prints one line per case over all ranks; returns the number of failures."""
    cases, started = OrderedDict(), {}
    for rank, _, out in results:
        for line in out.splitlines():
            if line.startswith("START "):
                started[rank] = line[6:]
            elif line.startswith("CASE "):
                body = line[5:]
                for verdict in (" OK", " FAIL"):
                    at = body.find(verdict)
                    if at >= 0 and (body[at + len(verdict):] == "" or
                                    body[at + len(verdict)] == " "):
                        name, rest = body[:at], body[at + len(verdict):].strip()
                        cases.setdefault(name, []).append((rank, verdict.strip(), rest))
                        started.pop(rank, None)
                        break
    failures = 0
    for name, verdicts in cases.items():
        bad = [(r, d) for r, v, d in verdicts if v != "OK"]
        missing = len(results) - len(verdicts)
        if bad or missing:
            failures += 1
            detail = "; ".join(f"rank {r}: {d}" for r, d in bad)
            if missing:
                detail += f"{'; ' if detail else ''}{missing} rank(s) did not report"
            print(f"{title} {name}: FAIL ({detail})")
        else:
            print(f"{title} {name}: OK")
    for rank, code, out in results:
        if code != 0 or "WORKER DONE" not in out:
            failures += 1
            where = f" while running {started[rank]!r}" if rank in started else ""
            print(f"{title} rank {rank}: exit {code}{where}; last output:")
            for line in out.splitlines()[-25:]:
                print(f"    {line}")
    if expect_cases is not None and len(cases) < expect_cases:
        failures += 1
        print(f"{title}: only {len(cases)} of {expect_cases} cases reported")
    return failures


def parent_main(args):
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_backend_cuda: torch.cuda is not available here (this test needs a GPU)")
        return 2
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU tensors"
    print(f"torch {torch.__version__}, {where}, sizes {args.sizes}, logs in {args.logdir}",
          flush=True)
    failures = 0
    for n in args.nprocs:
        start = time.monotonic()
        results = launch(n, ["--sizes", *map(str, args.sizes), "--device", args.device,
                             "--case-timeout", str(args.case_timeout)],
                         {"WEFT_DEVICE": "cuda"} if args.device == "cuda" else {},
                         args.group_timeout)
        failures += summarize(f"[N={n}]", results)
        print(f"[N={n}] {time.monotonic() - start:.1f} s", flush=True)
    if args.device == "cuda":
        results = launch(2, ["--runtime-mismatch"], {"WEFT_DEVICE": "none"}, 90)
        failures += summarize("[N=2 WEFT_DEVICE=none]", results, expect_cases=1)
    print("ALL OK" if failures == 0 else f"{failures} FAILURE(S)", flush=True)
    return 0 if failures == 0 else 1


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--runtime-mismatch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--nprocs", default="2,4", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: the same cases on CPU tensors, to check this script without a GPU")
    p.add_argument("--case-timeout", type=float, default=60.0,
                   help="seconds one case may take on a rank before it dumps its stack and exits")
    p.add_argument("--group-timeout", type=float, default=200.0,
                   help="seconds all cases of one N may take (then every rank is killed)")
    p.add_argument("--logdir", default=os.environ.get("OUT") or "/tmp/weft-torch-cuda-logs")
    return p.parse_args()


if __name__ == "__main__":
    args_global = parse()
    os.makedirs(args_global.logdir, exist_ok=True)
    sys.exit(worker_main(args_global) if args_global.worker else parent_main(args_global))
