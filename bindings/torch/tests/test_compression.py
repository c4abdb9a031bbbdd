"""DDP compression hooks (weft_torch.hooks) and WEFT_COMPRESSION under the weft backend."""
from conftest import launch


def test_compression_hooks_and_job_wide_compression(tmp_path):
    # WEFT_COMPRESSION is read once per process: the workers start with it set. Buckets of the
    # DDP runs stay below WEFT_COMPRESSION_MIN_BYTES, so only the hooks compress them.
    # ":always": two processes on one host would not compress otherwise (it does not pay there).
    env = {"WEFT_COMPRESSION": "int8:always", "WEFT_COMPRESSION_MIN_BYTES": "1048576"}
    results = launch("compression.py", 2, tmp_path, timeout=150, env=env)
    print(results[0].output)  # the measured errors and bounds (pytest -s shows them)
    assert all("compression hooks ok" in r.output for r in results)
