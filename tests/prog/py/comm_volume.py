"""comm_volume.py - the bytes world rank 0 sends per training iteration in
each process group, from the layout and the model (docs/parallel.md,
"Communication volumes"), checked against train --log-comm.

usage: comm_volume.py LOG key=value ...   (keys: see Layout below)

Counting rules (lib/dist): an all-reduce of n bytes over p ranks sends
2(p-1)/p n, an all-gather or reduce-scatter (p-1)/p of the whole buffer, a
point-to-point send n. World rank 0 is the first pipeline stage, tensor,
context and data-parallel rank 0.

Mixture of experts (E > 0, every layer MoE, dropless): the expert groups
only (expert-model-parallel, expert-tensor-parallel, expert-data-parallel),
exact when every token takes every expert (topk = E), as the tests run it:
each TP rank sends its sequence shard's rows once to each expert's EP rank,
whose expert-TP peers gather them (docs/moe.md).
"""
import re
import sys


def ring(p, n):
    return 2 * (p - 1) * n // p


def expected(h, L, S, V, mbs, gbs, tp=1, pp=1, vpp=1, cp=1, dp=1, sp=0, distopt=0, llama=0,
             heads=4, groups=4, ffn=None, E=0, topk=0, moeffn=0, ep=1, etp=0, swiglu=0):
    if E:
        return expected_moe(h, L, S, mbs, gbs, tp, pp, cp, dp, sp, distopt, E, topk, moeffn, ep, etp or tp, swiglu)
    t, p, v, c, d = tp, pp, vpp, cp, dp
    f = ffn or 4 * h
    k = h // heads
    m = gbs // (mbs * d)                 # micro-batches per iteration
    N = mbs * S // c                     # tokens of a micro-batch on this rank
    Nl = N // t if sp else N             # rows of the residual stream here
    hid = 4 * N * h                      # bytes of a full [N, h] activation
    Ll = L // p                          # layers on this rank (all its chunks)
    pre, post = 1, int(p == 1)           # rank 0 holds the embedding; the head only without PP
    # this rank's parameters (its TP slices)
    if llama:
        layer = h + (heads + 2 * groups) * k * h // t + h * heads * k // t + h + 2 * f * h // t + f * h // t
        P = V // t * h + Ll * layer + post * (h + V // t * h)
        norms = Ll * 2 * h + post * h
    else:
        layer = (2 * h + 3 * h * h // t + 3 * h // t + h * h // t + h + 2 * h + 4 * h * h // t + 4 * h // t
                 + 4 * h * h // t + h)
        P = V // t * h + S * h + Ll * layer + post * 2 * h
        norms = Ll * 4 * h + post * 2 * h
    out = {}
    # tensor parallel: per micro-batch, per iteration the grad-norm sum (+ SP's norm grads)
    if t > 1:
        if sp:
            per = (10 * Ll + 2 * pre + 2 * post) * (t - 1) * hid // t
        else:
            per = (4 * Ll + pre + post) * ring(t, hid)
        per += post * ring(t, 3 * 4 * N)  # the vocabulary-parallel loss
        if groups < t:  # KV groups shared by ranks: the fused QKV output gathered, its gradient scattered
            per += Ll * 2 * (t - 1) * 4 * N * (heads + 2 * groups) * k // t
        out["tensor-model-parallel"] = m * per + ring(t, 8) + (ring(t, 4 * norms) if sp else 0)
    else:
        out["tensor-model-parallel"] = 0
    # pipeline: an activation forward and a gradient backward per chunk boundary,
    # plus the loss sums and the grad-norm sum
    if p > 1:
        sends = 2 * v - 1                # the first stage's first chunk sends no gradient
        out["pipeline-model-parallel"] = m * sends * 4 * Nl * h + ring(p, 16) + ring(p, 8)
        out["embedding"] = 0 if llama else ring(2, 4 * V // t * h)
    else:
        out["pipeline-model-parallel"] = 0
        out["embedding"] = 0
    # context parallel: ring attention, per layer and micro-batch K/V forward,
    # K/V and dK/dV backward
    g = groups // t if groups >= t else 1  # a rank holds one group when they are fewer than TP ranks
    out["context-parallel"] = m * Ll * 24 * (c - 1) * mbs * g * k * S // c if c > 1 else 0
    # data parallel (with context parallel): gradients, loss sums, the sharded norm
    n = d * c
    grads = 0
    if n > 1:
        if distopt:
            grads = 2 * ((n - 1) * 4 * P // n) + ring(n, 16) + ring(n, 8)
        else:
            grads = ring(n, 4 * P) + ring(n, 16)
    out["data-parallel with context-parallel" if c > 1 else "data-parallel"] = grads
    return out


def expected_moe(h, L, S, mbs, gbs, t, p, c, d, sp, distopt, E, k, F, ep, etp, swiglu):
    m = gbs // (mbs * d)                 # micro-batches per iteration
    N = mbs * S // c                     # tokens of a micro-batch on this rank
    Ns = N // t if sp else N             # of them, this TP rank's sequence shard
    rows = Ns * k                        # the shard's rows, each sent once
    El = E // ep                         # this rank's experts
    Lm = L // p                          # MoE layers on this rank
    world = t * c * d * p
    out = {}
    # per layer and micro-batch: the counts all-gathered, then four all-to-alls
    # (rows forward and back, gradients forward and back), each sending the
    # rows of the other EP ranks' experts
    out["expert-model-parallel"] = m * Lm * ((ep - 1) * E * 4 + 4 * (ep - 1) * rows // ep * 4 * h) if ep > 1 else 0
    # expert TP: the rows an EP rank received (rows, balanced) to every other
    # expert-TP rank, the partial outputs back, the same for the gradients
    g = etp if etp > 1 and (sp or etp != t) else 1
    out["expert-tensor-parallel"] = m * Lm * ((g - 1) * El * 4 + 4 * (g - 1) * rows * 4 * h) if g > 1 else 0
    # the experts' gradients over expert data parallelism
    ne = world // (etp * ep * p)
    Pe = Lm * El * ((2 if swiglu else 1) * F * h + h * F) // etp
    if ne > 1:
        edp = 2 * ((ne - 1) * 4 * Pe // ne) + ring(ne, 8) if distopt else ring(ne, 4 * Pe)
    else:
        edp = 0
    out["expert-data-parallel"] = edp
    return out


def main():
    log = sys.argv[1]
    kw = {}
    for a in sys.argv[2:]:
        key, val = a.split("=")
        kw[key] = int(val)
    want = expected(**kw)
    lines = [l for l in open(log) if "communication per iteration" in l]
    assert len(lines) >= 4, "only %d --log-comm lines" % len(lines)
    # iterations 2-4: no evaluation (it runs after iteration 4's line) or set-up inside
    for l in lines[1:4]:
        got = {key: int(val) for key, val in re.findall(r"\| ([a-z -]+): (\d+)", l)}
        for key, val in want.items():
            assert got.get(key) == val, "%s: %s bytes, expected %d (all: %s)" % (key, got.get(key), val, got)
    print(", ".join("%s %d" % (key, val) for key, val in want.items() if val))


if __name__ == "__main__":
    main()
