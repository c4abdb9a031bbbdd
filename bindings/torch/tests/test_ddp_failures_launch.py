"""DDP equality with gloo, a dead rank, bad inputs, and torchrun launch."""
import os
import subprocess
import sys

from conftest import WORKERS, free_port, launch


def test_ddp_matches_gloo(tmp_path):
    results = launch("ddp.py", 2, tmp_path, timeout=150)
    assert all("DDP parameters equal gloo's" in r.output for r in results)


def test_dead_rank_makes_others_raise(tmp_path):
    results = launch("dead_rank.py", 3, tmp_path, timeout=90, expect_ok=False)
    report = "\n".join(f"rank {r.rank} exit {r.returncode}: {r.output}" for r in results)
    print(report)  # the survivors' messages and how long they took (pytest -s shows them)
    assert results[2].returncode == 3, report
    for r in results[:2]:
        assert r.returncode == 0 and "raised after" in r.output, report


def test_bad_inputs_raise_clear_errors(tmp_path):
    results = launch("bad_inputs.py", 2, tmp_path, timeout=120)
    print(results[0].output)
    assert all("bad inputs raised clear errors" in r.output for r in results)


def test_torchrun_launch(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [torchrun, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
         str(free_port()), os.path.join(WORKERS, "torchrun_script.py")],
        env=env, capture_output=True, text=True, timeout=150, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("all_reduce ok") == 2, out
