"""Multi-process harness for the weft backend tests: launches N worker processes (each a
plain `python workers/<script>.py`), gives them a rank and a FileStore / TCP rendezvous, and
fails with every rank's output when any rank fails or the run exceeds its time limit."""
import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankResult:
    def __init__(self, rank, returncode, output):
        self.rank, self.returncode, self.output = rank, returncode, output


def launch(script, nprocs, tmp_path, args=(), timeout=120, env=None, expect_ok=True):
    """Runs workers/<script> on nprocs ranks; returns [RankResult] in rank order."""
    base_env = dict(os.environ)
    base_env.update({
        "WORLD_SIZE": str(nprocs),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WEFT_TEST_STORE": str(tmp_path / "store"),
        "OMP_NUM_THREADS": "1",
        # Not the source tree's weft_torch/ (it has no built _C): only the workers' folder.
        "PYTHONPATH": os.pathsep.join(p for p in (WORKERS, base_env.get("PYTHONPATH")) if p),
    })
    base_env.update(env or {})
    procs = []
    for rank in range(nprocs):
        rank_env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(WORKERS, script), *map(str, args)], env=rank_env,
            cwd=tmp_path,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    results, timed_out = [], False
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            out, _ = proc.communicate()
        results.append(RankResult(rank, proc.returncode, out))
    report = "\n".join(f"---- rank {r.rank} (exit {r.returncode}) ----\n{r.output}"
                       for r in results)
    if timed_out:
        pytest.fail(f"{script} on {nprocs} ranks did not finish within {timeout} s\n{report}")
    if expect_ok and any(r.returncode != 0 for r in results):
        pytest.fail(f"{script} on {nprocs} ranks failed\n{report}")
    return results
