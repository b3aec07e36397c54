"""check_gpt_index.py: compare build_gpt_index's output with Megatron's.

  check_gpt_index.py cases MANIFEST            -> one line per case: name, then its argv
  check_gpt_index.py indices MANIFEST CASE     -> the sample indices the fixture holds
  check_gpt_index.py check MANIFEST CASE CACHEDIR SAMPLES.jsonl
      prints "ok - ..." / "not ok - ..." lines: every cache file Megatron wrote
      exists under CACHEDIR with the same name and sha256 and nothing else is
      there; every recorded sample (tokens, labels, loss mask, position ids,
      attention mask, blend member) equals ours.
"""
import hashlib
import json
import os
import sys

mode, manifest = sys.argv[1], json.load(open(sys.argv[2]))
cases = {c["name"]: c for c in manifest["cases"]}

if mode == "cases":
    for c in manifest["cases"]:
        print(c["name"], " ".join(c["argv"][1:]))
    sys.exit(0)

case = cases[sys.argv[3]]
if mode == "indices":
    idx = set()
    for v in case["splits"].values():
        for s in (v or {}).get("samples", []):
            idx.add(s["index"])
    print(" ".join(str(i) for i in sorted(idx)))
    sys.exit(0)

name, cachedir, samples = sys.argv[3], sys.argv[4], sys.argv[5]
def report(good, what):
    print(("ok - " if good else "not ok - ") + name + ": " + what)


want = {f["file"]: f for f in case["cache_files"]}
have = set(os.listdir(cachedir)) if os.path.isdir(cachedir) else set()
bad = []
for f, meta in want.items():
    p = os.path.join(cachedir, f)
    if not os.path.isfile(p):
        bad.append("missing " + f)
    elif hashlib.sha256(open(p, "rb").read()).hexdigest() != meta["sha256"]:
        bad.append("differs " + f)
extra = sorted(have - set(want))
for b in bad + ["extra " + e for e in extra]:
    print("#   " + b)
report(not bad and not extra, "%d cache files byte-identical to Megatron's" % len(want))

ours = {}
for line in open(samples):
    s = json.loads(line)
    ours[(s["split"], s["index"])] = s
n = 0
samples_ok = True
for split, v in case["splits"].items():
    if not v:
        continue
    for s in v.get("samples", []):
        o = ours.get((split, s["index"]))
        n += 1
        if o is None:
            print("#   %s sample %d not printed" % (split, s["index"]))
            samples_ok = False
            continue
        if o["len"] != v["len"]:
            print("#   %s has %d samples, Megatron %d" % (split, o["len"], v["len"]))
            samples_ok = False
        for key in ("tokens", "labels", "loss_mask", "position_ids", "attention_mask", "dataset_id"):
            if key not in s:
                continue
            a, b = o.get(key), s[key]
            if key == "attention_mask":
                b = [[int(x) for x in row] for row in b]
            if a != b:
                print("#   %s sample %d: %s differs" % (split, s["index"], key))
                samples_ok = False
                print("#   ours     %s" % str(a)[:200])
                print("#   Megatron %s" % str(b)[:200])
report(samples_ok and n > 0, "%d samples identical to Megatron's" % n)
