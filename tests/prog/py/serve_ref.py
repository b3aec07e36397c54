"""serve_ref.py - a text_gen_server under test against a reference, for
tests/prog/infer_moe.sh. Standard library only (runs under /usr/bin/python3).

  ask LOG PID PROMPTS.json MAX_NEW OUT.json [--up S] [--timeout S]
      Waits (at most --up seconds, default 60) for the server whose output
      goes to LOG (started with --port 0) to print the port it listens on
      and to answer GET /health, failing at once if process PID ends first;
      then one greedy PUT /api (Megatron's endpoint: top_k 1, logprobs true,
      tokens_to_generate MAX_NEW) with the prompts of PROMPTS.json
      ([[id, ...], ...]) written as NullTokenizer text ("5 900 31"). Checks
      that the answer echoes each prompt's ids, and writes OUT.json in
      hf_ref.py generate's form: [{"tokens": [new ids], "logprobs": [the
      log-prob of every token of the sequence from its second]}, ...].
      Prints one line: what came back and how long the request took.
  same REF.json GOT.json TOL [--eod ID]
      GOT's tokens equal REF's, and its log-probs are within TOL of REF's.
      A server stops a request at the end-of-document id (--eod): where one
      side is shorter, its last token must be --eod and the rest a prefix
      of the other's; the log-probs are compared over the common length.
  routing R.json [--margin M]
      hf_ref.py generate --routing's report: every expert of every layer
      took some token, and no token's k-th and (k+1)-th routing
      probabilities lie within M (default 1e-4) of each other, so that the
      comparisons' rounding cannot flip a routing decision.

Exit 0 with one summary line on stdout; 1 with the reason on stdout.
"""
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request


class Fail(Exception):
    pass


def gone(pid):
    """True once process pid has ended (a zombie not yet waited for counts
    as ended: the shell that started it reaps it only at its next wait)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].startswith(("Z", "X"))


def tail(path, n=12):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return str(e)


def wait_up(log, pid, seconds):
    """The port the server listens on, once GET /health answers 200."""
    end = time.time() + seconds
    port = None
    while time.time() < end:
        if port is None:
            try:
                m = re.search(r"\(port (\d+)\)", open(log, errors="replace").read())
            except OSError:
                m = None
            if m:
                port = int(m.group(1))
        if port is not None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                    if r.status == 200:
                        return port
            except OSError:
                pass
        if gone(pid):
            raise Fail("the server (pid %d) ended before answering; its log ends:\n%s" % (pid, tail(log)))
        time.sleep(0.1)
    raise Fail("the server did not answer /health within %g s (%s); its log ends:\n%s"
               % (seconds, "port %s" % port if port else "no port in its log", tail(log)))


def cmd_ask(a, o):
    log, pid, prompts, max_new, out = a[0], int(a[1]), json.load(open(a[2])), int(a[3]), a[4]
    up, timeout = o.get("--up", 60.0), o.get("--timeout", 120.0)
    port = wait_up(log, pid, up)
    body = {"prompts": [" ".join(str(t) for t in p) for p in prompts], "tokens_to_generate": max_new,
            "top_k": 1, "logprobs": True}
    req = urllib.request.Request("http://127.0.0.1:%d/api" % port, data=json.dumps(body).encode(),
                                 method="PUT", headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            got = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise Fail("PUT /api: HTTP %d %s; the server's log ends:\n%s"
                   % (e.code, e.read()[:500].decode(errors="replace"), tail(log)))
    except OSError as e:
        raise Fail("PUT /api: %r (after %.1f s); the server's log ends:\n%s" % (e, time.time() - t0, tail(log)))
    dt = time.time() - t0
    res = []
    for i, p in enumerate(prompts):
        toks, lps = got["tokens"][i], got["logprobs"][i]
        if toks[:len(p)] != p:
            raise Fail("prompt %d: the answer's tokens %s do not start with the prompt %s" % (i, toks, p))
        if len(lps) != len(toks) - 1:
            raise Fail("prompt %d: %d tokens but %d log-probs" % (i, len(toks), len(lps)))
        res.append({"tokens": toks[len(p):], "logprobs": lps})
    json.dump(res, open(out, "w"))
    return "%d prompts, %s new tokens, in %.0f ms" % (len(res), "/".join(str(len(r["tokens"])) for r in res),
                                                       1000 * dt)


def cmd_same(a, o):
    ref, got, tol = json.load(open(a[0])), json.load(open(a[1])), float(a[2])
    eod = o.get("--eod")
    if len(ref) != len(got):
        raise Fail("%d answers, the reference has %d" % (len(got), len(ref)))
    worst, n = 0.0, 0
    for i, (x, y) in enumerate(zip(ref, got)):
        tx, ty = x["tokens"], y["tokens"]
        k = min(len(tx), len(ty))
        if tx[:k] != ty[:k]:
            raise Fail("prompt %d: tokens %s, the reference's %s" % (i, ty, tx))
        if len(tx) != len(ty):
            short = tx if len(tx) < len(ty) else ty
            if eod is None or not short or short[-1] != int(eod):
                raise Fail("prompt %d: %d tokens, the reference %d, and the shorter does not end with the "
                           "end-of-document id %s" % (i, len(ty), len(tx), eod if eod is None else int(eod)))
        nprompt = len(x["logprobs"]) - len(tx) + 1
        m = nprompt - 1 + k
        if len(y["logprobs"]) - len(ty) + 1 != nprompt:
            raise Fail("prompt %d: log-probs for %d prompt tokens, the reference for %d"
                       % (i, len(y["logprobs"]) - len(ty) + 1, nprompt))
        d = [abs(p - q) for p, q in zip(x["logprobs"][:m], y["logprobs"][:m])]
        if d and max(d) > tol:
            j = max(range(len(d)), key=d.__getitem__)
            raise Fail("prompt %d: log-prob %d differs by %.3g > %g (%r vs the reference's %r)"
                       % (i, j, d[j], tol, y["logprobs"][j], x["logprobs"][j]))
        worst = max([worst] + d)
        n += k
    return "%d prompts, %d new tokens equal, log-probs within %.2g" % (len(ref), n, worst)


def cmd_routing(a, o):
    r, margin = json.load(open(a[0])), o.get("--margin", 1e-4)
    counts = []
    for l, layer in enumerate(r["layers"]):
        if min(layer["tokens_per_expert"]) == 0:
            raise Fail("layer %d: an expert took no token (tokens per expert %s)" % (l, layer["tokens_per_expert"]))
        if layer["min_margin"] < margin:
            raise Fail("layer %d: a token's k-th and (k+1)-th routing probabilities are %.3g apart (< %g)"
                       % (l, layer["min_margin"], margin))
        counts.append(layer["tokens_per_expert"])
    return "top-%d of %d experts; tokens per expert %s; smallest top-k margin %.2g" % (
        r["topk"], r["experts"], counts, min(x["min_margin"] for x in r["layers"]))


OPTS = ("--up", "--timeout", "--eod", "--margin")


def main():
    cmds = {"ask": (cmd_ask, 5), "same": (cmd_same, 3), "routing": (cmd_routing, 1)}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__)
        return 2
    f, n = cmds[sys.argv[1]]
    pos, o, rest = [], {}, sys.argv[2:]
    try:
        while rest:
            x = rest.pop(0)
            if x in OPTS:
                o[x] = float(rest.pop(0))
            else:
                pos.append(x)
        if len(pos) != n:
            raise ValueError("wants %d arguments, got %d" % (n, len(pos)))
        print(f(pos, o))
    except Fail as e:
        print(str(e))
        return 1
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print("serve_ref.py %s: %r" % (sys.argv[1], e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
