#!/usr/bin/env python3
"""check_megatron_mem.py BIN FIXTURE [RANDOM]: runs report_memory on every case of the fixture
(tests/fixtures/megatron_mem/megatron_mem.json: what Megatron's own
theoretical_memory_usage.py printed and returned for the same arguments) and prints one
"ok"/"not ok" line per case: --json's weight/activation/total MB within 1e-6 MB of
Megatron's return values, and the default output holding Megatron's printed lines verbatim.
With RANDOM, only the first RANDOM of the fixture's random cases ("random N") run, the named
ones all."""
import json, subprocess, sys

binary, fixture = sys.argv[1], sys.argv[2]
cases = json.load(open(fixture))
if len(sys.argv) > 3:
    keep, n = int(sys.argv[3]), 0
    chosen = []
    for case in cases:
        if case["name"].startswith("random "):
            n += 1
            if n > keep:
                continue
        chosen.append(case)
    print("# %d of the %d random cases (the rest under make check-long)" % (min(keep, n), n))
    cases = chosen
worst = 0.0
for case in cases:
    why = []
    cmd = [binary] + case["flags"]
    j = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
    t = subprocess.run(cmd, capture_output=True, text=True)
    if j.returncode or t.returncode:
        why.append("exit %d/%d: %s" % (j.returncode, t.returncode, (j.stderr + t.stderr).strip()))
    else:
        m = json.loads(j.stdout)["megatron_formula"]
        for key, mega in (("weight_and_optimizer_MB", "weight_and_optimizer_MB"),
                          ("activation_MB", "activation_MB"), ("total_MB", "total_MB")):
            d = abs(m[key] - case[mega])
            worst = max(worst, d)
            if d > 1e-6:
                why.append("%s %.6f, Megatron %.6f" % (key, m[key], case[mega]))
        if case["printed"] not in t.stdout:
            why.append("printed report differs:\n" + "\n".join(
                "  megatron | " + l for l in case["printed"].splitlines()) + "\n" + "\n".join(
                "  megac    | " + l for l in t.stdout.splitlines()))
    if why:
        print("not ok - Megatron's report for %s" % case["name"])
        print("#   " + " ".join(cmd))
        for w in why:
            for line in w.splitlines():
                print("#   " + line)
    else:
        print("ok - Megatron's report for %s" % case["name"])
print("# largest difference from Megatron: %.3g MB" % worst)
