"""compare_metrics.py - the checks the train tests make on --metrics-file output.

    compare_metrics.py same  A.jsonl B.jsonl N   B's first N iterations equal A's
    compare_metrics.py tail  A.jsonl B.jsonl I J B holds iterations I..J, equal to A's
    compare_metrics.py ref   OURS.jsonl REF.jsonl N   against torch_ref.py's lines,
                                                  whose key is "lm loss"

"Equal" is rtol 1e-5 (RTOL in the environment changes it: the emulated
device's runs against the CPU's take 1e-4 in fp32, 2e-2 in bf16 and fp16)
on the iteration's lm loss, grad norm and learning rate
and on the MoE metrics load_balancing_loss, seq_load_balancing_loss and z_loss
and the multi-token-prediction losses mtp_1 loss .. mtp_8 loss
(each where both sides have it; LOSS_ONLY=1 in the environment: the lm loss
alone; NaN equals NaN: Megatron logs z_loss 0/0 for a
zero coefficient, and JSON null is read as NaN). In "same" mode the evaluation lines
(validation and test lm loss) must agree too: both files have the same ones.
Prints the worst relative difference.
"""
import json
import math
import os
import sys

RTOL = float(os.environ.get("RTOL", "1e-5"))

LOSS = "lm loss of the iteration"


def rows(path, loss_key=LOSS):
    out = []
    for line in open(path):
        r = json.loads(line)
        if loss_key in r:
            r = dict(r)
            r["lm loss"] = r[loss_key]
            out.append(r)
    return out


KEYS = ("lm loss", "grad norm", "learning rate",
        "load_balancing_loss", "seq_load_balancing_loss", "z_loss") + tuple("mtp_%d loss" % k for k in range(1, 9))
if os.environ.get("LOSS_ONLY"):
    KEYS = ("lm loss",)


def isnan(v):
    return v is None or (isinstance(v, float) and math.isnan(v))


def check(a, b):
    worst = 0.0
    for x, y in zip(a, b):
        assert x["iteration"] == y["iteration"], (x["iteration"], y["iteration"])
        for k in KEYS:
            if k not in x or k not in y:
                continue
            if isnan(x[k]) or isnan(y[k]):
                assert isnan(x[k]) and isnan(y[k]), (x["iteration"], k, x[k], y[k])
                continue
            rel = abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
            worst = max(worst, rel)
            assert rel <= RTOL, (x["iteration"], k, x[k], y[k], rel, RTOL)
    return worst


mode = sys.argv[1]
if mode == "same":
    n = int(sys.argv[4])
    a, b = rows(sys.argv[2]), rows(sys.argv[3])
    assert len(a) == n and len(b) == n, (len(a), len(b), n)
    worst = check(a, b)
    evals = 0
    for key in ("validation lm loss", "test lm loss"):
        ea, eb = rows(sys.argv[2], key), rows(sys.argv[3], key)
        assert [r["iteration"] for r in ea] == [r["iteration"] for r in eb], (key, len(ea), len(eb))
        for x, y in zip(ea, eb):
            rel = abs(x[key] - y[key]) / max(abs(x[key]), 1e-12)
            worst = max(worst, rel)
            assert rel <= RTOL, (key, x["iteration"], x[key], y[key], rel, RTOL)
        evals += len(ea)
    print("worst relative difference %.1e over %d iterations and %d evaluations" % (worst, n, evals))
elif mode == "tail":
    lo, hi = int(sys.argv[4]), int(sys.argv[5])
    a = {r["iteration"]: r for r in rows(sys.argv[2])}
    b = rows(sys.argv[3])
    assert [r["iteration"] for r in b] == list(range(lo, hi + 1)), [r["iteration"] for r in b]
    print("worst relative difference %.1e over iterations %d-%d" % (check([a[r["iteration"]] for r in b], b), lo, hi))
elif mode == "ref":
    n = int(sys.argv[4])
    ours, ref = rows(sys.argv[2]), rows(sys.argv[3], "lm loss")
    assert len(ours) == n and len(ref) == n, (len(ours), len(ref))
    worst = check(ref, ours)
    assert ours[-1]["lm loss"] < ours[0]["lm loss"] - 0.05, "loss did not fall"
    print("worst relative difference %.2e over %d iterations" % (worst, n))
else:
    sys.exit("unknown mode " + mode)
