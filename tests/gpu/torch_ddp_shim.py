#!/usr/bin/env python3
"""Unmodified PyTorch DDP (backend "nccl") on weft's NCCL shim, 2 ranks on ONE GPU.

  torch_ddp_shim.py --shim <dir>/libnccl.so.2 --weft-lib <folder of libweft.so.0> [--logdir D]

Runs, at the same time, (a) one process on cuda:0, plain torch (no process group), training
a small MLP on a batch of 2B rows, and (b) two processes, both on cuda:0, each wrapping the
same MLP in DistributedDataParallel with backend "nccl" and training on its half (B rows) of
the same batch, with LD_PRELOAD of the shim (real NCCL refuses two ranks on one GPU; weft does
not) and WEFT_DEVICE=cuda. float32, fixed seed, SGD, 5 steps. DDP averages the gradients, so
each step's mean of the two ranks' losses must equal (a)'s loss and the final parameters
must equal (a)'s, both within 1e-5 relative (parameters: per tensor, max |ddp - single| over
max |single|). Prints the per-step figures and PASS or FAIL; exits non-zero on failure.

The run must really go through the shim: each rank checks that ncclAllReduce, as torch's
libtorch_cuda.so resolves it (the process's global symbol scope), lies in the shim's file,
and weft's WEFT_DEBUG=INFO lines must show the rank's communicator: a run that silently used
NVIDIA's NCCL fails. Every subprocess has a timeout; the whole script stays under 90 s.
Without a GPU it still checks that torch imports under the preloaded shim (no missing symbol),
then fails with a message saying no GPU is present. --cpu-gloo checks this script's own
arithmetic and plumbing on the CPU with the gloo backend (the shim is not exercised: it says so).
"""
import argparse
import ctypes
import faulthandler
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

STEPS = 5
HALF = 8  # B: rows per DDP rank; the single process trains on 2B
DIMS = (16, 32, 4)
LR = 0.1
SEED = 1234
RTOL = 1e-5
DEADLINE_S = 80  # all subprocesses together: the script stays under 90 s
DEVICE = "cuda:0"  # "cpu" with --cpu-gloo


# ---- the training, shared by the single process and the DDP ranks ----

def make_model(torch):
    torch.manual_seed(SEED)  # the same initial parameters in every process
    return torch.nn.Sequential(
        torch.nn.Linear(DIMS[0], DIMS[1]), torch.nn.Tanh(), torch.nn.Linear(DIMS[1], DIMS[2]))


def batch(torch, step):
    """The full batch (2B rows) of a step, made on the CPU so every process gets the same."""
    g = torch.Generator().manual_seed(SEED + 1 + step)
    x = torch.randn(2 * HALF, DIMS[0], generator=g)
    y = torch.randn(2 * HALF, DIMS[2], generator=g)
    return x, y


def train(torch, model, rows):
    """5 SGD steps on rows (a slice of each step's batch); the per-step losses."""
    # Exact float32 arithmetic: TF32 would make 1 rank and 2 ranks differ by ~1e-3.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = batch(torch, step)
        x, y = x[rows].to(DEVICE), y[rows].to(DEVICE)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def params_of(module):
    return [p.detach().cpu().flatten().tolist() for p in module.parameters()]


# ---- checks that the shim, not NVIDIA's NCCL, serves torch ----

def mapped_file(address):
    """The file /proc/self/maps says holds address, or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else None
    return None


def nccl_allreduce_address(torch):
    """ncclAllReduce as libtorch_cuda.so binds it: the loader searches the global scope
    (the program, LD_PRELOAD, RTLD_GLOBAL libraries) first, then the library's own
    dependencies (dlsym on its handle)."""
    scopes = [None, os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")]
    for scope in scopes:
        try:
            fn = ctypes.CDLL(scope).ncclAllReduce
            return ctypes.cast(fn, ctypes.c_void_p).value
        except (AttributeError, OSError):
            continue
    return None


def shim_check(shim):
    """Which file holds the ncclAllReduce torch calls, and which NCCL libraries are mapped."""
    import torch  # loads libtorch_cuda.so and whatever NCCL it pulls in
    address = nccl_allreduce_address(torch)
    where = mapped_file(address) if address is not None else None
    ncclish = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libnccl" in os.path.basename(path) or "libweft_nccl" in os.path.basename(path):
                ncclish.add(path)
    return {
        "ncclAllReduce_in": where,
        "through_shim": where is not None and os.path.realpath(where) == os.path.realpath(shim),
        "nccl_libraries_mapped": sorted(ncclish),
    }


# ---- the processes ----

def run_single(out):
    import torch
    model = make_model(torch).to(DEVICE)
    losses = train(torch, model, slice(0, 2 * HALF))
    with open(out, "w") as f:
        json.dump({"losses": losses, "params": params_of(model)}, f)


def run_rank(rank, shim, out):
    import datetime
    import torch
    import torch.distributed as dist
    check = shim_check(shim)
    gpu = DEVICE != "cpu"
    if gpu:
        torch.cuda.set_device(0)  # both ranks on the one GPU
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    model = torch.nn.parallel.DistributedDataParallel(make_model(torch).to(DEVICE),
                                                      device_ids=[0] if gpu else None)
    losses = train(torch, model, slice(rank * HALF, (rank + 1) * HALF))
    version = None
    if gpu:
        torch.cuda.synchronize()
        version = torch.cuda.nccl.version()
    # The figures are kept before the teardown: a failing destroy still shows what trained.
    with open(out, "w") as f:
        json.dump({"losses": losses, "params": params_of(model.module), "check": check,
                   "nccl_version": list(version) if isinstance(version, tuple) else version}, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(args, port, rank):
    env = dict(os.environ)
    # A bundle (tests/gpu/bundle.sh) keeps the host libraries libweft links (hwloc, UCX) in
    # <folder>/lib, beside libweft.so.0.
    lib = os.path.realpath(args.weft_lib)
    folders = [lib] + ([os.path.join(lib, "lib")] if os.path.isdir(os.path.join(lib, "lib")) else [])
    if env.get("LD_LIBRARY_PATH"):
        folders.append(env["LD_LIBRARY_PATH"])
    env.update({
        "LD_PRELOAD": os.path.realpath(args.shim),
        "LD_LIBRARY_PATH": ":".join(folders),
        "WEFT_DEVICE": "cuda", "WEFT_DEBUG": "INFO",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
    })
    return env


def start(cmd, env, log):
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(procs, deadline):
    """Waits for every process until deadline; kills the late ones. Exit codes (None: killed)."""
    codes = {}
    for name, p in procs.items():
        try:
            codes[name] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes[name] = None
    return codes


def tail(path, n=25):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def preload_check(args, logdir):
    """Without a GPU: torch imports under the preloaded shim, and resolves NCCL to it."""
    out = os.path.join(logdir, "preload.json")
    log_path = os.path.join(logdir, "preload.log")
    cmd = [sys.executable, __file__, "--role", "preload", "--shim", args.shim, "--out", out]
    with open(log_path, "w") as log:
        p = start(cmd, rank_env(args, 0, 0), log)
        code = finish({"preload": p}, time.monotonic() + 60)["preload"]
    if code != 0:
        print(f"preload check exited {code}:\n{tail(log_path)}")
        return False
    check = json.load(open(out))
    print(f"preload check: ncclAllReduce resolves in {check['ncclAllReduce_in']}; "
          f"NCCL libraries mapped: {check['nccl_libraries_mapped']}")
    return check["through_shim"]


def rel_diff(a, b):
    scale = max(abs(v) for v in b) or 1.0
    return max(abs(x - y) for x, y in zip(a, b)) / scale


def compare(single, ranks, logs, check_shim):
    ok = True
    print(f"{'step':>4} {'1 rank, 2B':>14} {'mean of 2 DDP':>14} {'rank 0':>12} {'rank 1':>12} "
          f"{'rel diff':>10}")
    for step in range(STEPS):
        ref = single["losses"][step]
        mean = (ranks[0]["losses"][step] + ranks[1]["losses"][step]) / 2
        rel = abs(mean - ref) / max(abs(ref), 1e-30)
        ok &= rel <= RTOL
        print(f"{step:>4} {ref:>14.8f} {mean:>14.8f} {ranks[0]['losses'][step]:>12.8f} "
              f"{ranks[1]['losses'][step]:>12.8f} {rel:>10.2e}{'' if rel <= RTOL else '  > 1e-5'}")
    for i, (p_single, p0, p1) in enumerate(zip(single["params"], ranks[0]["params"],
                                               ranks[1]["params"])):
        rel = rel_diff(p0, p_single)
        same = p0 == p1
        ok &= rel <= RTOL and same
        print(f"param {i} ({len(p0)} values): rel diff vs 1 rank {rel:.2e}; "
              f"rank 0 == rank 1: {same}")
    for r in (0, 1) if check_shim else ():
        check = ranks[r]["check"]
        print(f"rank {r}: ncclAllReduce in {check['ncclAllReduce_in']}; NCCL libraries mapped: "
              f"{check['nccl_libraries_mapped']}; torch.cuda.nccl.version() = "
              f"{ranks[r]['nccl_version']}")
        if not check["through_shim"]:
            print(f"rank {r}: torch's NCCL calls do NOT go to the shim")
            ok = False
        text = open(logs[r], errors="replace").read()
        weft_lines = [l for l in text.splitlines() if "weft INFO" in l]
        shown = [l for l in weft_lines if "device runtime" in l or "transports:" in l]
        print(f"rank {r}: {len(weft_lines)} weft INFO lines; " + " | ".join(shown[:3]))
        if not any(f"rank {r}/2" in l for l in weft_lines):
            print(f"rank {r}: no weft communicator in its WEFT_DEBUG=INFO log")
            ok = False
    return ok


def orchestrate(args):
    logdir = args.logdir or tempfile.mkdtemp(prefix="torch_ddp_shim.")
    os.makedirs(logdir, exist_ok=True)
    print(f"shim {os.path.realpath(args.shim)}, weft libraries {os.path.realpath(args.weft_lib)},"
          f" logs in {logdir}")
    for path, what in ((args.shim, "--shim"), (args.weft_lib, "--weft-lib")):
        if not os.path.exists(path):
            print(f"FAIL: {what} {path} does not exist")
            return 2
    try:
        import torch
    except ImportError as e:
        print(f"FAIL: {sys.executable} cannot import torch ({e}): set PYTHON to one that can")
        return 2
    print(f"torch {torch.__version__}")
    if not torch.cuda.is_available() and not args.cpu_gloo:
        shim_ok = preload_check(args, logdir)
        print(f"torch imports under the preloaded shim{'' if shim_ok else ' NOT'} resolving "
              "NCCL to it")
        print("FAIL: no CUDA GPU is available (torch.cuda.is_available() is False): this test "
              "needs one GPU; the DDP comparison did not run")
        return 2
    port = free_port()
    me = [sys.executable, __file__] + (["--cpu-gloo"] if args.cpu_gloo else [])
    outs = {n: os.path.join(logdir, f"{n}.json") for n in ("single", "rank0", "rank1")}
    logs = {n: os.path.join(logdir, f"{n}.log") for n in outs}
    files = {n: open(logs[n], "w") for n in outs}
    plain = dict(os.environ)
    plain.pop("LD_PRELOAD", None)
    procs = {"single": start(me + ["--role", "single", "--out", outs["single"]], plain,
                             files["single"])}
    for r in (0, 1):
        procs[f"rank{r}"] = start(me + ["--role", "rank", "--rank", str(r), "--shim", args.shim,
                                        "--out", outs[f"rank{r}"]],
                                  rank_env(args, port, r), files[f"rank{r}"])
    codes = finish(procs, time.monotonic() + DEADLINE_S)
    for f in files.values():
        f.close()
    failed = [n for n, c in codes.items() if c != 0]
    for n in failed:
        why = "killed at the time limit" if codes[n] is None else f"exited {codes[n]}"
        print(f"--- {n} {why}; its log ends:\n{tail(logs[n])}")
    if not all(os.path.exists(o) for o in outs.values()):
        print("FAIL")
        return 1
    single = json.load(open(outs["single"]))
    ranks = [json.load(open(outs[f"rank{r}"])) for r in (0, 1)]
    ok = compare(single, ranks, [logs["rank0"], logs["rank1"]], not args.cpu_gloo) and not failed
    if args.cpu_gloo:
        print(("arithmetic matches" if ok else "arithmetic differs") +
              " on the CPU with gloo: NOT a test of the shim (run without --cpu-gloo on a GPU)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--shim", help="the shim library (<dir>/libnccl.so.2)")
    ap.add_argument("--weft-lib", help="the folder holding libweft.so.0")
    ap.add_argument("--logdir", help="where the processes' logs go (default: a temp folder)")
    ap.add_argument("--role", default="main", choices=["main", "single", "rank", "preload"])
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--cpu-gloo", action="store_true",
                    help="check the script itself on the CPU with gloo (the shim is not used)")
    args = ap.parse_args()
    global DEVICE
    if args.cpu_gloo:
        DEVICE = "cpu"
    if args.role != "main":
        # A process still running near the deadline prints its Python stacks before it is killed.
        faulthandler.dump_traceback_later(DEADLINE_S - 8, exit=False)
    if args.role == "single":
        return run_single(args.out)
    if args.role == "rank":
        return run_rank(args.rank, args.shim, args.out)
    if args.role == "preload":
        json.dump(shim_check(args.shim), open(args.out, "w"))
        return 0
    if not args.shim or not args.weft_lib:
        ap.error("--shim and --weft-lib are required")
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
