"""server_defaults.py SERVER_CMD...: Megatron's run_text_generation_server.py
flags on text_gen_server. --top_k, --top_p, --temperature,
--num-tokens-to-generate and --return-log-probs are the defaults of the
requests that set none (a request's own field wins; top_k and top_p go
together), on PUT /api and /v1/completions alike; --max-batch-size and
--inference-max-batch-size name the request slots; without
--inference-max-seq-length a request has the model's positions (32 here).
SERVER_CMD is a text_gen_server command line without --port. Prints ok /
not ok lines."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

cmd = sys.argv[1:]
tap = Tap()
check = tap.check


def start(*extra):
    log = tempfile.NamedTemporaryFile(prefix="defaults", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd + ["--port", "0"] + list(extra), stdout=log, stderr=subprocess.STDOUT)
    end = time.time() + 60
    while time.time() < end and proc.poll() is None:
        text = open(log.name).read()
        m = re.search(r"\(port (\d+)\)", text)
        if m:
            return proc, int(m.group(1)), text
        time.sleep(0.05)
    return proc, None, open(log.name).read()


def stop(proc):
    proc.terminate()
    return proc.wait(timeout=30)


def call(port, method, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


proc, port, text = start("--top_k", "1", "--num-tokens-to-generate", "5", "--return-log-probs",
                         "--max-batch-size", "2")
check("--max-batch-size 2 names the slots; the model's 32 positions are the default length",
      port is not None and "2 request slots of 32 positions" in text, text[-400:])
api = lambda body: call(port, "PUT", "/api", body)  # noqa: E731
st, got = api({"prompts": ["In the beginning"]})
st2, want = api({"prompts": ["In the beginning"], "top_k": 1, "tokens_to_generate": 5, "logprobs": True})
check("PUT /api without fields: --top_k 1, --num-tokens-to-generate 5, --return-log-probs",
      st == st2 == 200 and got["tokens"] == want["tokens"] and got["logprobs"] == want["logprobs"]
      and got["logprobs"] is not None and len(got["tokens"][0]) <= 3 + 5, (st, got, want))
n_prompt = len(want["tokens"][0]) - 5
st, r = api({"prompts": ["In the beginning"], "tokens_to_generate": 2, "logprobs": False})
check("a request's own tokens_to_generate and logprobs win",
      st == 200 and len(r["tokens"][0]) <= n_prompt + 2 and r["logprobs"] is None, (st, r))
st, r = api({"prompts": ["In the beginning"], "top_p": 0.5, "random_seed": 3})
check("a request's top_p drops the server's --top_k (no 'cannot set both')", st == 200, (st, r))
st, r = call(port, "POST", "/v1/completions", {"prompt": "In the beginning"})
st2, w = call(port, "POST", "/v1/completions", {"prompt": "In the beginning", "max_tokens": 5, "temperature": 0,
                                                 "logprobs": 0})
check("/v1/completions without fields: the same defaults (greedy, 5 tokens, log-probs)",
      st == st2 == 200 and r["choices"][0]["text"] == w["choices"][0]["text"]
      and r["choices"][0]["logprobs"] == w["choices"][0]["logprobs"] and r["choices"][0]["logprobs"] is not None,
      (r, w))
st, r = api({"prompts": ["In the beginning"], "tokens_to_generate": 30})
check("past the model's 32 positions: 400 naming --inference-max-seq-length 32",
      st == 400 and "--inference-max-seq-length 32" in r["error"], (st, r))
check("it stops with 0", stop(proc) == 0)

proc, port, text = start("--temperature", "0.5", "--top_p", "0.9", "--inference-max-batch-size", "3")
check("--inference-max-batch-size 3 names the slots", port is not None and "3 request slots" in text, text[-400:])
st, got = api({"prompts": ["And the earth"], "tokens_to_generate": 6, "random_seed": 7})
st2, want = api({"prompts": ["And the earth"], "tokens_to_generate": 6, "random_seed": 7, "temperature": 0.5,
                 "top_p": 0.9})
st3, hot = api({"prompts": ["And the earth"], "tokens_to_generate": 6, "random_seed": 7, "temperature": 1.0,
                "top_p": 0.9})
check("PUT /api: --temperature 0.5 and --top_p 0.9 are the defaults (seeded samples equal, not those of 1.0)",
      st == st2 == st3 == 200 and got["tokens"] == want["tokens"] and got["tokens"] != hot["tokens"],
      (got["tokens"], want["tokens"], hot["tokens"]))
st, got = call(port, "POST", "/v1/completions", {"prompt": "And the earth", "max_tokens": 6, "seed": 7})
st2, want = call(port, "POST", "/v1/completions", {"prompt": "And the earth", "max_tokens": 6, "seed": 7,
                                                    "temperature": 0.5, "top_p": 0.9})
check("/v1/completions: the same defaults", st == st2 == 200
      and got["choices"][0]["text"] == want["choices"][0]["text"], (got, want))
check("it stops with 0", stop(proc) == 0)
sys.exit(1 if tap.failed else 0)
