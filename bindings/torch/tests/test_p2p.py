"""isend/irecv/send/recv in every ordering and size, on 2 and 3 processes (issue 38)."""
import pytest

from conftest import launch


@pytest.mark.parametrize("nprocs", [2, 3])
def test_point_to_point_orderings(nprocs, tmp_path):
    results = launch("p2p.py", nprocs, tmp_path, args=(20,), timeout=120)
    assert all("point-to-point ok" in r.output for r in results)
