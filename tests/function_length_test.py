#!/usr/bin/env python3
"""No library function over 80 lines (issue 34): libweft's sources (src/, transports/,
algorithms/, kernels/, topo/) and the bindings' C++ (bindings/nccl, bindings/torch/csrc).
Tools' and tests' main functions are not library code.

A function is a brace block at namespace or class level whose opening brace follows a
parameter list; its length is counted from the line of `{` to the line of `}`, comments and
string literals removed first (so braces inside them do not count). Exit 1 with each offender
named (file:line, lines), 0 when none. `--self-test` checks that a planted 81-line function is
caught and an 80-line one is not.
"""
import os
import re
import sys

LIMIT = 80
ROOTS = ["src", "transports", "algorithms", "kernels", "topo", "bindings/nccl", "bindings/torch/csrc"]
EXTS = (".cc", ".h", ".cu", ".cpp")


def strip_comments_and_strings(s):
    """The source with comments and literals blanked out, newlines kept."""
    out, i, n = [], 0, len(s)
    while i < n:
        if s.startswith("//", i):
            j = s.find("\n", i)
            i = n if j < 0 else j
        elif s.startswith("/*", i):
            j = s.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * s.count("\n", i, j))
            i = j
        elif s[i] == '"' and i > 0 and s[i - 1] == "R":  # raw string R"delim( ... )delim"
            m = re.match(r'"([^(\s]*)\(', s[i:])
            end = s.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * s.count("\n", i, j))
            i = j
        elif s[i] in "\"'":
            q, j = s[i], i + 1
            while j < n and s[j] != q and s[j] != "\n":
                j += 2 if s[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


FUNC_HEAD = re.compile(r"\)\s*(const|override|noexcept|final|mutable|->\s*[\w:<>,\s*&]+|\s)*$")
CONTROL = re.compile(r"\b(if|for|while|switch|catch)\s*\([^;{}]*\)\s*$")
LAMBDA = re.compile(r"\]\s*\([^;{}]*\)\s*(mutable\s*)?(->[^{;]*)?$")


def long_functions(text, limit=LIMIT):
    """(first line, length) of each outermost function body longer than `limit` lines."""
    s = strip_comments_and_strings(text)
    stack, found = [], []
    for m in re.finditer(r"[{}]", s):
        if m.group() == "{":
            before = s[max(0, m.start() - 300):m.start()]
            is_fn = bool(FUNC_HEAD.search(before)) and not CONTROL.search(before) and not LAMBDA.search(before)
            stack.append((m.start(), is_fn))
        elif stack:
            start, is_fn = stack.pop()
            if is_fn and not any(f for _, f in stack):
                first, last = s.count("\n", 0, start), s.count("\n", 0, m.start())
                if last - first > limit:
                    found.append((first + 1, last - first))
    return found


def source_files(root, subdirs, exts):
    """(path relative to root, text) of every file under root/subdir ending in one of exts."""
    for sub in subdirs:
        for dirpath, _, files in os.walk(os.path.join(root, sub)):
            for f in sorted(files):
                if f.endswith(exts):
                    path = os.path.join(dirpath, f)
                    with open(path, errors="replace") as fh:
                        yield os.path.relpath(path, root), fh.read()


def self_test():
    def fn(lines):
        return "int f(int x) {\n" + "  x += 1;\n" * (lines - 1) + "}\n"
    assert long_functions(fn(81)) == [(1, 81)], long_functions(fn(81))
    assert long_functions(fn(80)) == []
    # braces in comments/strings and control blocks do not confuse it
    assert long_functions("void g() {\n  // }\n  const char* s = \"}\";\n" + "  if (1) {\n  }\n" * 45 + "}\n") == [(1, 93)]
    print("self-test: an 81-line function is caught, an 80-line one is not")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    for rel, text in source_files(root, ROOTS, EXTS):
        for line, length in long_functions(text):
            bad.append(f"{rel}:{line}: {length} lines")
    for b in bad:
        print(b)
    print(f"{len(bad)} library function(s) over {LIMIT} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
