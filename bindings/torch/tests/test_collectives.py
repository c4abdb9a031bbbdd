"""Every collective of the weft backend equals gloo's result, on 2 and 3 processes."""
import pytest

from conftest import launch


@pytest.mark.parametrize("nprocs", [2, 3])
def test_collectives_match_gloo(nprocs, tmp_path):
    results = launch("collectives.py", nprocs, tmp_path, timeout=150)
    for r in results:
        assert "all collectives match gloo" in r.output


def test_split_group_uses_comm_split(tmp_path):
    results = launch("split.py", 3, tmp_path, timeout=120)
    assert all("split groups ok" in r.output for r in results)
