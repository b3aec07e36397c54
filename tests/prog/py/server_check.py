"""server_check.py SERVER_CMD... -- GEN CKPT: talks to text_gen_server over
real HTTP on loopback and prints "ok - ..." / "not ok - ..." lines.

Starts the server (SERVER_CMD plus --port P, a free port), waits for
/health, then checks: greedy PUT /api answers equal lib/infer's own
generation by the megac_generate tool (GEN) for the same prompt ids; 32
concurrent clients each get the answer they get alone; Megatron's
validation messages come back as HTTP 400 with {"error": ...}; a body over
--max-body-bytes gets 413; an unknown path 404; a client that disconnects
mid-request or mid-body does not disturb the next request; SIGTERM during a
request lets it finish, and the server exits 0.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap, free_port, wait_health  # noqa: E402

sep = sys.argv.index("--")
server_cmd, (gen, ckpt) = sys.argv[1:sep], sys.argv[sep + 1:]
tap = Tap()
check = tap.check


port = free_port()
log = tempfile.NamedTemporaryFile(prefix="server", suffix=".log", delete=False)
proc = subprocess.Popen(server_cmd + ["--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
base = "http://127.0.0.1:%d" % port


JSON = {"Content-Type": "application/json"}


def call(method, path, body=None, raw=None, timeout=60):
    """(status, JSON) of a request; (None, the reason) when the server did
    not answer (a crash must fail checks, not end this script)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method, headers=JSON)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (OSError, ValueError) as e:
        return None, repr(e)


def alive(name):
    check("the server is still running after " + name, proc.poll() is None, open(log.name).read()[-3000:])


wait_health(base)
check("the server answers /health", call("GET", "/health") == (200, {"status": "ok"}))

# greedy answers against the engine's own generation
prompts = ["In the beginning God created", "And the earth was", "Hello", "The Lord is my shepherd; I shall"]
st, r = call("PUT", "/api", {"prompts": prompts, "tokens_to_generate": 8, "top_k": 1, "logprobs": True})
ok = st == 200 and len(r["tokens"]) == 4
first = r if ok else None
check("PUT /api, greedy, 4 prompts", ok, (st, r))
if ok:
    ids = [t[:len(t) - 8] for t in r["tokens"]]
    with tempfile.TemporaryDirectory() as d:
        open(d + "/p.json", "w").write(json.dumps(ids))
        subprocess.run([gen, ckpt, d + "/p.json", "8", d + "/g.json"], check=True)
        want = json.load(open(d + "/g.json"))
    check("the answers are the engine's greedy continuations, token for token",
          all(t[len(i):] == w["tokens"] for t, i, w in zip(r["tokens"], ids, want)), (r["tokens"], want))
    worst = max(abs(a - b) for x, w in zip(r["logprobs"], want) for a, b in zip(x, w["logprobs"]))
    check("log-probs equal the engine's (%.2g)" % worst, worst < 1e-5)
    check("text is the prompt plus the generated text",
          all(t.startswith(p) and len(t) > len(p) for t, p in zip(r["text"], prompts)), r["text"])
    check("segments: one piece per token, joining to the text",
          all(len(sg) == len(tk) and "".join(sg) == tx for sg, tk, tx in zip(r["segments"], r["tokens"], r["text"])),
          r["segments"])

# stop_token: generation ends before the first generated token equal to it
if first:
    gen = first["tokens"][0][-8:]
    stop = gen[2]
    st, r = call("PUT", "/api", {"prompts": [prompts[0]], "tokens_to_generate": 8, "top_k": 1, "stop_token": stop})
    want = first["tokens"][0][:len(first["tokens"][0]) - 8] + gen[:gen.index(stop)]
    check("stop_token ends the generation before it", st == 200 and r["tokens"][0] == want, (r, want))

# 32 concurrent clients: each answer is the one it gets alone
words = "light darkness waters heaven earth seas grass herb fruit seed stars sun moon night day beast".split()
many = ["The %s and the %s" % (words[i % 16], words[(i * 7 + 3) % 16]) for i in range(32)]
alone = [call("PUT", "/api", {"prompts": [p], "tokens_to_generate": 8, "top_k": 1})[1]["tokens"][0] for p in many]
together = [None] * 32


def client(i):
    together[i] = call("PUT", "/api", {"prompts": [many[i]], "tokens_to_generate": 8, "top_k": 1})[1]["tokens"][0]


t0 = time.time()
threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("32 concurrent clients each get their answer alone (%.2f s)" % (time.time() - t0), together == alone,
      [(a, b) for a, b in zip(alone, together) if a != b][:3])

# validation: Megatron's messages, as 4xx
bad = [
    ({}, "prompts argument required"),
    ({"prompts": ["a"], "max_len": 3}, "max_len is no longer used.  Replace with tokens_to_generate"),
    ({"prompts": "a"}, "prompts is not a list of strings"),
    ({"prompts": [1]}, "prompts is not a list of strings"),
    ({"prompts": []}, "prompts is empty"),
    ({"prompts": ["a"] * 129}, "Maximum number of prompts is 128"),
    ({"prompts": ["a"], "tokens_to_generate": "x"}, "tokens_to_generate must be an integer greater than 0"),
    ({"prompts": ["a"], "tokens_to_generate": -1},
     "tokens_to_generate must be an integer greater than or equal to 0"),
    ({"prompts": ["a"], "tokens_to_generate": 0}, "tokens_to_generate=0 implies logprobs should be True"),
    ({"prompts": ["a"], "logprobs": "yes"}, "logprobs must be a boolean value"),
    ({"prompts": ["a"], "temperature": 0}, "temperature must be a positive number less than or equal to 100.0"),
    ({"prompts": ["a"], "top_k": 1001}, "top_k must be equal to or greater than 0 and less than or equal to 1000"),
    ({"prompts": ["a"], "top_p": 1}, "top_p must be a positive float less than or equal to 1.0"),
    ({"prompts": ["a"], "top_p": 0.5, "top_k": 2}, "cannot set both top-k and top-p samplings."),
    ({"prompts": [""]}, "Empty prompts require add_BOS=true"),
    ({"prompts": ["a"], "random_seed": -2}, "random_seed must be a positive integer"),
    ({"prompts": ["a " * 40], "tokens_to_generate": 8}, "--inference-max-seq-length"),
]
for body, msg in bad:
    st, r = call("PUT", "/api", body)
    check("400 %s" % msg, st == 400 and isinstance(r, dict) and msg in r.get("error", ""), (st, r))
st, r = call("PUT", "/api", raw=b'{"prompts": ["a"')
check("malformed JSON: 400", st == 400 and "JSON" in r["error"], (st, r))
st, r = call("PUT", "/api", raw=b'{"prompts": ["' + b"a" * 300000 + b'"]}')
check("a body over --max-body-bytes: 413", st == 413 and "--max-body-bytes" in r["error"], (st, r))
check("an unknown path: 404", call("GET", "/nope")[0] == 404)
check("/api with GET: 405", call("GET", "/api")[0] == 405)
st, r = call("PUT", "/api", {"prompts": [""], "add_BOS": True, "tokens_to_generate": 2, "top_k": 1})
check("an empty prompt with add_BOS", st == 200 and len(r["tokens"][0]) == 3, (st, r))

# clients that go away: in the middle of the body, and while generating
HEAD = b"PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
for cut in (HEAD + b'Content-Length: 100\r\n\r\n{"prompts": [',
            HEAD + b'Content-Length: 55\r\n\r\n{"prompts": ["abc"], "tokens_to_generate": 20, "top_k":1}'):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(cut)
    time.sleep(0.05)
    s.close()
st, r = call("PUT", "/api", {"prompts": ["Hello"], "tokens_to_generate": 8, "top_k": 1})
check("the next request after clients went away gets its answer",
      st == 200 and first is not None and r["tokens"][0] == first["tokens"][2], (st, r))

alive("the validation cases")

# values that once crashed the engine: each a 400, and the server stays up
for path, body, msg in [
        ("/api", {"prompts": ["hi"], "top_p": -0.5, "tokens_to_generate": 2}, "top_p"),
        ("/api", {"prompts": ["hi"], "temperature": 1e-50, "tokens_to_generate": 2}, "temperature"),
        ("/api", {"prompts": ["hi"], "tokens_to_generate": 9223372036854775807}, "--inference-max-seq-length"),
        ("/api", {"prompts": ["hi"], "top_p": 0.5, "top_p_decay": 2.0}, "top_p_decay"),
        ("/api", {"prompts": ["hi"], "top_p_bound": 0.1}, "top_p_bound cannot be set without top_p"),
        ("/api", {"prompts": ["hi"], "length_penalty": 1}, "length_penalty must be a float"),
        ("/v1/completions", {"prompt": "hi", "temperature": 1e-300}, "temperature"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 9223372036854775807}, "--inference-max-seq-length")]:
    st, r = call("PUT" if path == "/api" else "POST", path, body)
    check("400 %s %s" % (path, json.dumps(body)[:60]), st == 400 and msg in r.get("error", ""), (st, r))
st, r = call("PUT", "/api", {"prompts": ["hi"], "temperature": 1e-30, "tokens_to_generate": 3})
check("a tiny temperature that is a normal float samples (the largest logit)", st == 200, (st, r))
alive("the values that once crashed it")

# OpenAI's endpoints
st, r = call("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0, "logprobs": 1})
greedy_text = first["text"][2][len("Hello"):] if first else None
check("/v1/completions, temperature 0: the greedy text of /api",
      st == 200 and r["object"] == "text_completion" and r["choices"][0]["text"] == greedy_text
      and r["choices"][0]["finish_reason"] == "length", (st, r, greedy_text))
check("/v1/completions: usage", st == 200 and r["usage"] == {"prompt_tokens": len(first["tokens"][2]) - 8,
      "completion_tokens": 8, "total_tokens": len(first["tokens"][2])}, r.get("usage"))
check("/v1/completions: log-probs of the chosen tokens equal /api's",
      st == 200 and max(abs(a - b) for a, b in zip(r["choices"][0]["logprobs"]["token_logprobs"],
                                                   first["logprobs"][2][-8:])) < 1e-5, r)
cut = greedy_text[greedy_text.index(" ", 1):] if greedy_text and " " in greedy_text[1:] else None
if cut:
    st, r = call("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0, "stop": [cut[:3]]})
    check("stop: the text ends before the stop string, finish_reason stop",
          st == 200 and r["choices"][0]["text"] == greedy_text[:greedy_text.index(cut[:3])]
          and r["choices"][0]["finish_reason"] == "stop", (st, r, cut))
body = {"prompt": ["The heaven", "The earth"], "max_tokens": 10, "temperature": 0.9, "top_p": 0.9, "n": 2, "seed": 5}
st1, r1 = call("POST", "/v1/completions", body)
st2, r2 = call("POST", "/v1/completions", body)
check("n 2 of 2 prompts, seeded sampling: 4 choices, the same twice",
      st1 == 200 and len(r1["choices"]) == 4 and [c["text"] for c in r1["choices"]] == [c["text"] for c in r2["choices"]],
      (r1, r2))


def stream(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST", headers=JSON)
    events = []
    with urllib.request.urlopen(req, timeout=60) as resp:
        ctype = resp.headers.get("Content-Type")
        for line in resp:
            line = line.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
    return ctype, events


ctype, ev = stream("/v1/completions", {"prompt": "Hello", "max_tokens": 8, "temperature": 0, "stream": True})
chunks = [json.loads(e) for e in ev[:-1]]
check("stream: server-sent events, text/event-stream, [DONE] last",
      ctype == "text/event-stream" and ev and ev[-1] == "[DONE]" and len(chunks) >= 2, (ctype, ev))
check("stream: the deltas make the whole text, finish_reason on the last chunk",
      "".join(c["choices"][0]["text"] for c in chunks) == greedy_text
      and chunks[-1]["choices"][0]["finish_reason"] == "length"
      and all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1]), chunks)
# characters cut between tokens: the stream's text equals the whole answer's
for prompt in ["\u00e93", "\u4e2d\u6587", "\u00fc\u00f6\u00e4 caf\u00e9"]:
    st, r = call("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 10, "temperature": 0})
    ctype, ev = stream("/v1/completions", {"prompt": prompt, "max_tokens": 10, "temperature": 0, "stream": True})
    joined = "".join(json.loads(e)["choices"][0]["text"] for e in ev[:-1])
    check("stream of %r: the same text as the whole answer" % prompt,
          st == 200 and joined == r["choices"][0]["text"], (joined, r))
st, r = call("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                             "max_tokens": 6, "temperature": 0})
check("/v1/chat/completions: an assistant message", st == 200 and r["object"] == "chat.completion"
      and r["choices"][0]["message"]["role"] == "assistant"
      and isinstance(r["choices"][0]["message"]["content"], str), (st, r))
ctype, ev = stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6,
                                            "temperature": 0, "stream": True})
content = "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in ev[:-1])
check("/v1/chat/completions streamed: the same content", ev[-1] == "[DONE]" and content ==
      r["choices"][0]["message"]["content"], (content, r))
st, r = call("GET", "/v1/models")
check("/v1/models lists the model", st == 200 and r["object"] == "list" and r["data"][0]["object"] == "model", r)
for body, msg in [({"max_tokens": 3}, "prompt must be"), ({"prompt": "a", "max_tokens": -1}, "max_tokens"),
                  ({"prompt": "a", "temperature": 3}, "temperature"), ({"prompt": "a", "n": 0}, "n must"),
                  ({"prompt": "a", "stop": [1]}, "stop must"), ({"prompt": "a", "top_p": 0}, "top_p")]:
    st, r = call("POST", "/v1/completions", body)
    check("/v1/completions 400: %s" % msg, st == 400 and msg in r["error"], (st, r))
st, r = call("POST", "/v1/chat/completions", {"messages": []})
check("/v1/chat/completions 400: no messages", st == 400 and "messages" in r["error"], (st, r))
# a streaming client that hangs up after the first event
s = socket.create_connection(("127.0.0.1", port))
b = json.dumps({"prompt": "And the", "max_tokens": 24, "temperature": 0, "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(b) + b)
s.recv(200)
s.close()
st, r = call("PUT", "/api", {"prompts": ["Hello"], "tokens_to_generate": 8, "top_k": 1})
check("the next request after a streaming client hung up", st == 200 and r["tokens"][0] == first["tokens"][2],
      (st, r))

alive("the OpenAI endpoints")

# SIGTERM while a request streams: sent after its first event; the stream
# still ends with [DONE], and the server exits 0
req = urllib.request.Request(base + "/v1/completions", data=json.dumps(
    {"prompt": "And God said", "max_tokens": 28, "temperature": 0, "stream": True, "n": 4}).encode(), method="POST",
    headers=JSON)
events = []
try:
    with urllib.request.urlopen(req, timeout=60) as resp:
        for line in resp:
            line = line.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 1:
                    proc.send_signal(signal.SIGTERM)
except OSError as e:
    events.append(repr(e))
rc = proc.wait(timeout=60)
check("a stream in flight at SIGTERM runs to [DONE] (%d events)" % len(events),
      len(events) > 4 and events[-1] == "[DONE]", events[-3:])
check("the server exits 0 after SIGTERM", rc == 0, open(log.name).read()[-2000:])
os.unlink(log.name)
sys.exit(1 if tap.failed else 0)
