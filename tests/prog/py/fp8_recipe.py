"""The delayed FP8 recipe's update against a transcription of Transformer
Engine's amax_and_scale_update (the fused kernel after the amax reduction):
megac_fp8recipe runs megac's fp8_update_meta on random amax sequences with
zeros, infinities, NaNs, subnormals and huge values; every history entry and
scale must be the same float32 bits.

usage: fp8_recipe.py TOOL
"""
import random
import struct
import subprocess
import sys

import numpy as np

F32 = np.float32


def te_update(hist, scale, last, algo, scaled_max):
    """One update of one meta, float32 throughout. hist: list of F32 with
    hist[0] replaced by the reduced amax `last`."""
    n = len(hist)
    amax = F32(0)
    if last != 0:  # NaN != 0 too: a NaN amax rolls in
        new = []
        for i in range(n):
            a = hist[i + 1] if i < n - 1 else last
            amax = F32(np.fmax(amax, a))  # fmaxf: a NaN operand loses
            new.append(a if i > 0 else F32(0))
        hist = new
    if algo == "most_recent":
        amax = last
    if np.isfinite(amax) and amax > 0:
        with np.errstate(over="ignore", divide="ignore"):
            sc = F32(scaled_max / amax)
    else:
        sc = scale
    if np.isinf(sc):
        sc = F32(np.finfo(np.float32).max)
    return hist, sc


def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def draw(rng):
    r = rng.random()
    if r < 0.08:
        return F32(0)
    if r < 0.11:
        return F32(np.inf)
    if r < 0.13:
        return F32(np.nan)
    if r < 0.17:
        return F32(rng.choice([1e-45, 1e-40, 1.2e-38, 3e-39]))  # subnormal: the quotient overflows
    if r < 0.20:
        return F32(rng.choice([3.4e38, 1e30, 65504.0]))
    return F32(10 ** rng.uniform(-8, 6))


def main():
    tool = sys.argv[1]
    rng = random.Random(11)
    cases = 0
    for n in (1, 2, 5, 16):
        for algo in ("max", "most_recent"):
            for margin in (0, 1, 3, -1):
                for fmt, fmax in (("e4m3", 448.0), ("e5m2", 57344.0)):
                    seq = [draw(rng) for _ in range(40)]
                    out = subprocess.run([tool, str(n), algo, str(margin), fmt],
                                         input="".join(float(v).hex() + "\n" for v in seq),
                                         capture_output=True, text=True, check=True).stdout.split("\n")
                    scaled_max = F32(fmax) * F32(2.0 ** -margin)
                    hist, scale = [F32(0)] * n, F32(1)
                    for it, v in enumerate(seq):
                        hist = [v] + hist[1:]
                        hist, scale = te_update(hist, scale, v, algo, scaled_max)
                        got = [F32(float.fromhex(t)) for t in out[it].split()]
                        want = hist + [scale]
                        if [bits(g) for g in got] != [bits(w) for w in want]:
                            print(f"n={n} {algo} margin={margin} {fmt} iteration {it} amax {v!r}:\n"
                                  f"  megac {got}\n  TE    {want}")
                            return 1
                        cases += 1
    print(f"{cases} updates bit-exact (history lengths 1-16, max and most_recent, margins -1..3, both formats)")
    return 0


sys.exit(main())
