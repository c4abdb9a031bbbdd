#!/usr/bin/env python3
"""ngram_baseline.py: what "learning" means for the trainer's validation loss. Byte n-gram
models counted on the trainer's training text and scored on its validation text (the same
split as data.cc, fortunes.py), in nats per byte like moe_train's "val" loss:

  python3 ngram_baseline.py [--data DIR] [--max-order N]

Order 1 is byte frequencies (unigram), order n conditions on the n-1 bytes before. Smoothing
is interpolated Witten-Bell down to the uniform 1/256 (no parameter to tune on the validation
text). The model's validation windows start anywhere in a 128-byte context, the n-gram's
context is at most n-1 bytes, so an n-gram loss is what a model that only learned n-byte
statistics would score. Stdlib only.
"""
import argparse
import math
import sys
from collections import Counter

from fortunes import fortunes_split


def counts(text, order):
    """counts[n]: n-gram counts; followers[n]: distinct next bytes of each (n-1)-byte context."""
    grams, followers, totals = [None], [None], [None]
    for n in range(1, order + 1):
        c = Counter(text[i:i + n] for i in range(len(text) - n + 1))
        f, t = Counter(), Counter()
        for gram, k in c.items():
            f[gram[:-1]] += 1
            t[gram[:-1]] += k
        grams.append(c), followers.append(f), totals.append(t)
    return grams, followers, totals


def cross_entropy(val, model, n):
    grams, followers, totals = model
    total = 0.0
    for i in range(len(val)):
        p = 1.0 / 256
        for m in range(1, n + 1):  # interpolate from the shortest context up
            if i - (m - 1) < 0:
                break
            ctx = val[i - m + 1:i]
            seen = totals[m].get(ctx, 0)
            if seen == 0:
                break  # a longer context containing this one is unseen too
            kinds = followers[m][ctx]
            p = (grams[m].get(val[i - m + 1:i + 1], 0) + kinds * p) / (seen + kinds)
        total -= math.log(p)
    return total / len(val)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--max-order", type=int, default=5)
    args = ap.parse_args()
    train, val = fortunes_split(args.data)
    print("train %d bytes, validation %d bytes" % (len(train), len(val)))
    model = counts(train, args.max_order)
    print("| n-gram order (context bytes) | validation loss (nats/byte) |")
    print("|---|---|")
    print("| uniform (none) | %.4f |" % math.log(256))
    for n in range(1, args.max_order + 1):
        print("| %d (%d) | %.4f |" % (n, n - 1, cross_entropy(val, model, n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
