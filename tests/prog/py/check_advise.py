"""check_advise.py - report_memory --advise --json against the step-time model
of docs/report-memory.md, restated here independently.

usage: check_advise.py ADVISE.json BUDGET_BYTES [ALL.json] key=value ...
  keys: h L S V heads groups ffn llama swiglu (model; V unpadded, padded as
  train pads it to 64 x TP), gbs (the global batch)

Checks: every listed layout's peak fits the budget; the list is ordered by
step time; the counts add up; with ALL.json (the same run with a budget that
fits everything) the list is exactly ALL's layouts whose peak fits; for each
layout the bytes per group equal comm_volume.py's table (the one train
--log-comm is tested against), the messages per group the documented
count of ring steps and sends, and compute, bubble and comm seconds equal
the model's terms recomputed from Megatron's FLOPs formula
(num_floating_point_operations in megatron/training/training.py).
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import comm_volume  # noqa: E402


def flops(h, L, S, Vp, heads, groups, ffn, swiglu, gbs):
    k = h // heads
    Q, KV = k * heads, k * groups
    F = 3 if swiglu else 2
    tokens, sq = gbs * S, gbs * S * S
    mlp = 6 * h * ffn * F * L
    attn = 6 * (h * (Q + 2 * KV) + Q * h) * L
    logits = 6 * h * Vp
    core = 6 * Q * L
    return tokens * (mlp + attn + logits) + sq * core, tokens * logits, sq * core


def messages(L, m, t, p, v, c, d, sp, distopt, llama, groups):
    """Ring steps and sends of world rank 0 per group: 2(p-1) per all-reduce,
    p-1 per all-gather or reduce-scatter, one per point-to-point send."""
    Ll, pre, post = L // p, 1, int(p == 1)
    out = {}
    if t > 1:
        allreduce = 2 * (t - 1)
        if sp:
            norm_tensors = Ll * (2 if llama else 4) + post * (1 if llama else 2)
            out["tensor-model-parallel"] = (m * (10 * Ll + 2 * pre + 2 * post) * (t - 1)
                                            + (3 * m * post + 1 + norm_tensors) * allreduce)
        else:
            out["tensor-model-parallel"] = (m * (4 * Ll + pre + post + 3 * post) + 1) * allreduce
        if groups < t:  # the fused QKV output's all-gather and its gradient's reduce-scatter
            out["tensor-model-parallel"] += m * Ll * 2 * (t - 1)
    if p > 1:
        out["pipeline-model-parallel"] = m * (2 * v - 1) + 2 * 2 * (p - 1)
        if not llama:
            out["embedding"] = 2
    if c > 1:
        out["context-parallel"] = m * Ll * 3 * (c - 1)
    n = d * c
    if n > 1:
        key = "data-parallel with context-parallel" if c > 1 else "data-parallel"
        out[key] = (2 * (n - 1) + 2 * 2 * (n - 1)) if distopt else 2 * 2 * (n - 1)
    return out


def main():
    adv = json.load(open(sys.argv[1]))["advise"]
    budget = float(sys.argv[2])
    rest = sys.argv[3:]
    every = None
    if rest and not "=" in rest[0]:
        every = json.load(open(rest[0]))["advise"]
        rest = rest[1:]
    kw = {a.split("=")[0]: float(a.split("=")[1]) for a in rest}
    h, L, S, V, gbs = int(kw["h"]), int(kw["L"]), int(kw["S"]), int(kw["V"]), int(kw["gbs"])
    heads, groups, ffn = int(kw["heads"]), int(kw["groups"]), int(kw["ffn"])
    llama, swiglu = int(kw.get("llama", 0)), int(kw.get("swiglu", 0))
    rates = adv["assumptions"]
    lays = adv["layouts"]
    assert lays, "no layouts"
    assert adv["layouts_considered"] == adv["layouts_refused"] + adv["layouts_too_large"] + adv["layouts_fitting"], adv
    assert len(lays) == adv["layouts_fitting"], "run with --advise-top 0"
    best = min(l["step_time_s"] for l in lays)
    for a, b in zip(lays, lays[1:]):
        assert a["step_time_s"] <= b["step_time_s"] + 1.5e-6 * best, (a["flags"], b["flags"])
    for l in lays:
        assert l["peak_MB"] * 2**20 <= budget, (l["flags"], l["peak_MB"])
        t, p, v, c, d, mbs = l["tp"], l["pp"], l["vpp"], l["cp"], l["dp"], l["micro_batch_size"]
        assert t * p * c * d == adv["world_size"], l
        m = gbs // (mbs * d)
        assert m * mbs * d == gbs and l["num_microbatches"] == m, (l["flags"], gbs)
        Vp = -(-V // (64 * t)) * 64 * t
        want = comm_volume.expected(h, L, S, Vp, mbs, gbs, tp=t, pp=p, vpp=v, cp=c, dp=d,
                                    sp=int(l["sequence_parallel"]), distopt=int(l["distributed_optimizer"]),
                                    llama=llama, heads=heads, groups=groups, ffn=ffn)
        want = {g: n for g, n in want.items() if n}
        assert want == l["comm_bytes"], (l["flags"], want, l["comm_bytes"])
        msgs = messages(L, m, t, p, v, c, d, l["sequence_parallel"], l["distributed_optimizer"], llama,
                        groups)
        assert msgs == l["comm_messages"], (l["flags"], msgs, l["comm_messages"])
        total, logits, core = flops(h, L, S, Vp, heads, groups, ffn, swiglu, gbs)
        layers = total - logits
        layers += {"none": 0, "selective": core / 3, "full": layers / 3}[l["recompute"]]
        f = (layers / p + logits) / (t * c * d)
        assert math.isclose(f, l["flops_per_rank"], rel_tol=1e-12), (l["flags"], f, l["flops_per_rank"])
        compute = f / (rates["gpu_tflops"] * 1e12)
        assert math.isclose(compute, l["compute_s"], rel_tol=1e-12), l
        assert math.isclose(compute * (p - 1) / (v * m), l["bubble_s"], rel_tol=1e-12, abs_tol=1e-300), l
        gpn = rates["gpus_per_node"]
        span = {"tensor-model-parallel": t, "context-parallel": t * c, "data-parallel": t * c * d,
                "data-parallel with context-parallel": t * c * d, "pipeline-model-parallel": t * c * d * p,
                "embedding": t * c * d * p}
        comm = 0.0
        for g, n in l["comm_bytes"].items():
            inter = span[g] > gpn
            assert l["comm_inter_node"][g] == inter, (l["flags"], g)
            bw = (rates["inter_node_GBs"] if inter else rates["intra_node_GBs"]) * 1e9
            comm += n / bw + l["comm_messages"][g] * rates["link_latency_us"] * 1e-6
        assert math.isclose(comm, l["comm_s"], rel_tol=1e-9), (l["flags"], comm, l["comm_s"])
        assert math.isclose(l["compute_s"] + l["bubble_s"] + l["comm_s"], l["step_time_s"], rel_tol=1e-12), l
    if every is not None:
        fits = sorted(x["flags"] for x in every["layouts"] if x["peak_MB"] * 2**20 <= budget)
        assert fits == sorted(x["flags"] for x in lays), "the fitting layouts differ from the whole list's"
        assert every["layouts_considered"] == adv["layouts_considered"], (every, adv)
        assert len(every["layouts"]) > len(lays), "the budget excludes nothing"
    print("%d of %d layouts fit, first: %s (%.2f MB)" % (len(lays), adv["layouts_considered"], lays[0]["flags"],
                                                        lays[0]["peak_MB"]))


if __name__ == "__main__":
    main()
