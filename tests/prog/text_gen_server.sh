# text_gen_server.sh - text_gen_server over real HTTP on loopback (issue 7):
# a GPT-2-style model trained a few iterations is served; greedy answers equal
# lib/infer's own generation (itself checked against transformers in
# infer.sh); 32 concurrent clients get their answers alone; Megatron's
# validation as 4xx; limits; clients that go away; SIGTERM drains and exits 0
# (tests/prog/py/server_check.py).
. tests/prog_lib.sh
W=$(new_tmp text_gen_server)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
ARGS="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --train-iters 4 --mock-data --eval-interval 100"
ARGS="$ARGS --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
expect_ok "train 4 iterations" sh -c "$BIN/train $ARGS --save $W/ck --save-interval 4 >$W/train.log 2>&1"
# shellcheck disable=SC2086
/usr/bin/python3 tests/prog/py/server_check.py $BIN/text_gen_server --load $W/ck $GPT2 \
	--inference-max-seq-length 32 --inference-max-requests 8 --max-body-bytes 200000 \
	-- "$MEGAC_BUILD/tools/megac_generate" $W/ck
# --max-concurrent-requests 1: a second request while one generates gets 429
# naming the limit; /health still answers
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086
$BIN/text_gen_server --load $W/ck $GPT2 --inference-max-seq-length 32 --max-concurrent-requests 1 --port "$PORT" \
	>"$W/limit.log" 2>&1 &
SRV=$!
if /usr/bin/python3 - "$PORT" >"$W/limit.out" 2>&1 <<'EOF'; then
import json, sys, threading, time, urllib.error, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(300):
    try:
        urllib.request.urlopen(base + "/health", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
def put(prompts, n):
    req = urllib.request.Request(base + "/api", data=json.dumps({"prompts": prompts, "tokens_to_generate": n,
                                 "top_k": 1}).encode(), method="PUT")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
slow = {}
t = threading.Thread(target=lambda: slow.update(r=put(["And God said"] * 32, 28)))
t.start()
time.sleep(0.3)
st, r = put(["Hello"], 2)
t.join()
assert st == 429 and "--max-concurrent-requests 1" in r["error"], (st, r)
assert slow["r"][0] == 200, slow
assert put(["Hello"], 2)[0] == 200
print("429 while another request runs, then 200")
EOF
	ok "--max-concurrent-requests: $(cat "$W/limit.out")"
else
	notok "--max-concurrent-requests"
	show "$W/limit.out"
fi
kill -TERM $SRV
wait $SRV
# the web page at /, in headless Chromium: a prompt typed into the box, the
# Generate button clicked, the streamed answer read from the page
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086
$BIN/text_gen_server --load $W/ck $GPT2 --inference-max-seq-length 32 --port "$PORT" >"$W/web.log" 2>&1 &
SRV=$!
if /usr/bin/python3 - "$PORT" "$W/want.txt" >"$W/want.log" 2>&1 <<'EOF'; then
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(300):
    try:
        urllib.request.urlopen(base + "/health", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
page = urllib.request.urlopen(base + "/", timeout=10)
assert page.headers["Content-Type"].startswith("text/html"), page.headers
body = json.dumps({"prompt": "In the beginning God created", "max_tokens": 20, "temperature": 0}).encode()
req = urllib.request.Request(base + "/v1/completions", data=body, method="POST")
open(sys.argv[2], "w").write(json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["text"])
EOF
	/usr/bin/python3 tests/prog/py/browser_check.py "http://127.0.0.1:$PORT" "$W/want.txt"
else
	notok "the web page's reference answer"
	show "$W/want.log"
fi
kill -TERM $SRV
wait $SRV
expect_fail "no tokenizer" "needs the tokenizer flags" $BIN/text_gen_server --load $W/ck
expect_fail "no checkpoint" "no latest_checkpointed_iteration.txt" $BIN/text_gen_server --load $W $GPT2
rm -rf "$W"
