"""megatron_compare.py: the comparisons of tests/prog/megatron_ckpt.sh.

  logits OURS.npy MEGATRON.npy            max |difference| < 1e-4
  losses WANT.json GOT FIRST RTOL          GOT's losses of iterations FIRST.. equal
                                           WANT's (a losses file of make_fixtures.py
                                           train: {"losses": [...]} from iteration 1)
                                           within RTOL; GOT is megac's metrics file
                                           (JSON lines), or another losses file
                                           (its "first" iteration must be FIRST)
  differ WANT.json GOT.jsonl ITER MIN      the loss of ITER differs by more than MIN
                                           (relative): the check sees what it tests

Prints a one-line summary; exits non-zero (assertion) otherwise.
"""
import json
import sys

import numpy as np


def megac_losses(path):
    rows = [json.loads(line) for line in open(path)]
    return [r["iteration"] for r in rows], [r["lm loss"] for r in rows]


def main():
    what = sys.argv[1]
    if what == "logits":
        a, b = np.load(sys.argv[2]), np.load(sys.argv[3])
        assert a.shape == b.shape, (a.shape, b.shape)
        d = float(np.abs(a - b).max())
        assert d < 1e-4, d
        print("max |difference| %.2g of logits up to %.2g" % (d, float(np.abs(b).max())))
        return
    want = json.load(open(sys.argv[2]))["losses"]
    if what == "differ":
        it, least = int(sys.argv[4]), float(sys.argv[5])
        its, got = megac_losses(sys.argv[3])
        g, w = got[its.index(it)], want[it - 1]
        assert abs(g - w) / abs(w) > least, (g, w)
        print("%.7f against %.7f" % (g, w))
        return
    assert what == "losses", what
    first, rtol = int(sys.argv[4]), float(sys.argv[5])
    if sys.argv[3].endswith(".json"):
        other = json.load(open(sys.argv[3]))
        assert other["first"] == first, other["first"]
        got = other["losses"]
        its = list(range(first, first + len(got)))
    else:
        its, got = megac_losses(sys.argv[3])
    want = want[first - 1:first - 1 + len(got)]
    assert its == list(range(first, len(want) + first)) and got, its
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    assert worst <= rtol, (got, want)
    print("losses %s, Megatron: %s; worst relative difference %.1e" % (
        ", ".join("%.7f" % x for x in got), ", ".join("%.7f" % x for x in want), worst))


if __name__ == "__main__":
    main()
