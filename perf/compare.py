#!/usr/bin/env python3
"""compare.py - pairs the rows of weft-perf and its peers' --json files and prints ratios.

  compare.py BASE.json PEER.json [PEER2.json ...] [--markdown] [--placement oop|ip]

The first file is the reference (normally weft). Rows pair by (collective, size, type, redop,
root); for each peer and size it prints both times and busbw, and the ratios
  time ratio  = peer time / base time    (> 1: the base is faster)
  busbw ratio = base busbw / peer busbw  (> 1: the base is faster)
Python 3 standard library only.
"""
import argparse
import json
import math
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    d["_path"] = path
    return d


def key(doc, row):
    return (doc["collective"], row["size"], doc["type"], doc["redop"], row["root"])


def fmt_time(us):
    if us is None:
        return "-"
    if us >= 10000:
        return f"{us:.0f}"
    if us >= 100:
        return f"{us:.1f}"
    return f"{us:.2f}"


def ratio(a, b):
    if a is None or b is None or b == 0 or a == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def compare(base, peers, placement, markdown, out=sys.stdout):
    field = "out_of_place" if placement == "oop" else "in_place"
    bname, brows = base["backend"], {key(base, r): r for r in base["rows"]}
    lines = []
    summary = []
    for peer in peers:
        pname = peer["backend"]
        prows = {key(peer, r): r for r in peer["rows"]}
        common = [k for k in brows if k in prows]
        common.sort(key=lambda k: k[1])
        title = (f"{base['collective']} {base['type']} {base['redop']}, "
                 f"{base['nranks']} ranks: {bname} vs {pname} ({placement})")
        header = ["size (B)", f"{bname} time (us)", f"{pname} time (us)", "time ratio",
                  f"{bname} busbw (GB/s)", f"{pname} busbw (GB/s)", "busbw ratio",
                  f"{bname} algo", f"{pname} algo"]
        time_ratios, bw_ratios = [], []
        table = []
        for k in common:
            b, p = brows[k].get(field), prows[k].get(field)
            if b is None or p is None:
                continue
            tr = ratio(p["time_us"], b["time_us"])
            br = ratio(b["busbw"], p["busbw"])
            time_ratios.append(tr)
            if br is not None:
                bw_ratios.append(br)
            table.append([str(k[1]), fmt_time(b["time_us"]), fmt_time(p["time_us"]),
                          fmt_ratio(tr), f"{b['busbw']:.3f}", f"{p['busbw']:.3f}",
                          fmt_ratio(br), brows[k]["algo"], prows[k]["algo"]])
        g = geomean(time_ratios)
        summary.append((pname, g, len(table)))
        if markdown:
            lines.append(f"**{title}**\n")
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---:|" * 7 + "---|---|")
            for row in table:
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
            lines.append(f"Geometric mean of time ratios ({pname}/{bname}) over {len(table)} "
                         f"sizes: {fmt_ratio(g)}\n")
        else:
            lines.append(f"# {title}")
            widths = [max(len(header[i]), *(len(r[i]) for r in table)) if table else
                      len(header[i]) for i in range(len(header))]
            lines.append("  ".join(h.rjust(w) for h, w in zip(header, widths)))
            for row in table:
                lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths)))
            lines.append(f"# geomean time ratio {pname}/{bname}: {fmt_ratio(g)} "
                         f"over {len(table)} sizes")
            lines.append("")
    out.write("\n".join(lines) + "\n")
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("peers", nargs="+")
    ap.add_argument("--placement", choices=["oop", "ip"], default="oop")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    try:
        base = load(a.base)
        peers = [load(p) for p in a.peers]
    except (OSError, ValueError) as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    for p in peers:
        if (p["collective"], p["type"], p["redop"]) != (base["collective"], base["type"],
                                                       base["redop"]):
            print(f"compare.py: {p['_path']} measures {p['collective']} {p['type']} "
                  f"{p['redop']}, {a.base} {base['collective']} {base['type']} "
                  f"{base['redop']}: rows would not pair", file=sys.stderr)
            return 2
    compare(base, peers, a.placement, a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
