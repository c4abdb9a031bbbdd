"""Uneven all_gather / reduce_scatter (weftAllGatherV / weftReduceScatterV) and
torch.distributed.shrink_group (weftCommShrink) on the weft backend."""
import pytest
import torch.distributed as dist

from conftest import launch


@pytest.mark.parametrize("nprocs", [2, 3])
def test_uneven_all_gather_and_reduce_scatter(nprocs, tmp_path):
    results = launch("uneven.py", nprocs, tmp_path, timeout=150)
    assert all("uneven collectives ok" in r.output for r in results)


@pytest.mark.skipif(not hasattr(dist, "shrink_group"),
                    reason="this torch has no torch.distributed.shrink_group")
def test_shrink_group_continues_after_a_rank_dies(tmp_path):
    results = launch("shrink.py", 3, tmp_path, timeout=120, expect_ok=False)
    report = "\n".join(f"---- rank {r.rank} (exit {r.returncode}) ----\n{r.output}" for r in results)
    assert results[2].returncode == 3, report
    for r in results[:2]:
        assert r.returncode == 0, report
        assert "all_reduce exact" in r.output, report
