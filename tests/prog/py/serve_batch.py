"""serve_batch.py - greedy answers of a text_gen_server under test, several at once.

  serve_batch.py PORT N OUT.json PROMPT...

Waits for the server, asks PUT /api for each prompt's ids (tokens_to_generate 0), then sends
the prompts for N greedy tokens with log-probs, all at the same time: the first three
together in one request (so they start in the same forward step, prompts of different
lengths side by side), each other one in a request of its own from its own thread (they join
the running batch as they arrive). OUT.json: [{"prompt": ids, "tokens": the N generated,
"logprobs": log p of each prompt token from the second, then of each generated one}, ...]
in the order of the prompts, the form of tests/tools/megac_generate's output plus the
prompt.
"""
import json
import sys
import threading
import urllib.request

from tap import wait_health


def put(base, body):
    req = urllib.request.Request(base + "/api", data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def main(port, n, out_path, prompts):
    base = "http://127.0.0.1:%s" % port
    if not wait_health(base):
        sys.exit("no server at " + base)
    ids = put(base, {"prompts": prompts, "tokens_to_generate": 0, "logprobs": True})["tokens"]
    groups = [list(range(min(3, len(prompts))))] + [[i] for i in range(3, len(prompts))]
    answers = {}

    def ask(group):
        r = put(base, {"prompts": [prompts[i] for i in group], "tokens_to_generate": n, "top_k": 1,
                       "logprobs": True})
        for k, i in enumerate(group):
            answers[i] = (r["tokens"][k], r["logprobs"][k])

    threads = [threading.Thread(target=ask, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = []
    for i, p in enumerate(ids):
        tokens, lps = answers[i]
        if tokens[:len(p)] != p:
            sys.exit("prompt %d: the answer does not start with the prompt's ids" % i)
        out.append({"prompt": p, "tokens": tokens[len(p):], "logprobs": lps})
    json.dump(out, open(out_path, "w"))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
