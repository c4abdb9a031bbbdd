#!/usr/bin/env python3
"""The include graph between libweft's layers is one-way (issue 34: no cycle between src/core
and src/compress): no file under a lower layer includes a header of a layer above it.

    src/api  ->  src/compress  ->  src/core

Exit 1 naming each offending #include, 0 when none. `--self-test` checks that a planted
include of compress/ from core/ is caught.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from function_length_test import source_files  # noqa: E402  (the one tree walk)

# layer -> the layers it must not include
FORBIDDEN = {"src/core": ["compress/", "api/"], "src/compress": ["api/"]}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def offenders(layer, text):
    return [inc for inc in INCLUDE.findall(text) if any(inc.startswith(f) for f in FORBIDDEN[layer])]


def main():
    if "--self-test" in sys.argv:
        assert offenders("src/core", '#include "compress/job_wide_compression.h"\n') == ["compress/job_wide_compression.h"]
        assert offenders("src/core", '#include "core/comm.h"\n') == []
        print("self-test: a core -> compress include is caught, core -> core is not")
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    for layer in FORBIDDEN:
        for rel, text in source_files(root, [layer], (".cc", ".h")):
            bad.extend(f"{rel} includes {inc}" for inc in offenders(layer, text))
    for b in bad:
        print(b)
    print(f"{len(bad)} include(s) against the layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
