# text_gen_server.sh - text_gen_server over real HTTP on loopback:
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
setup "train 4 iterations" sh -c "$BIN/train $ARGS --save $W/ck --save-interval 4 >$W/train.log 2>&1"
# shellcheck disable=SC2086
/usr/bin/python3 tests/prog/py/server_check.py $BIN/text_gen_server --load $W/ck $GPT2 --num-layers 4 --hidden-size 32 \
	--inference-max-seq-length 32 --inference-max-requests 8 --max-body-bytes 200000 \
	-- "$MEGAC_BUILD/tools/megac_generate" $W/ck || notok "server_check.py exited $?"
# --max-concurrent-requests 1: a second request while one generates gets 429
# naming the limit; /health still answers
PORT=$(free_port)
# shellcheck disable=SC2086
$BIN/text_gen_server --load $W/ck $GPT2 --inference-max-seq-length 32 --max-concurrent-requests 1 --port "$PORT" \
	>"$W/limit.log" 2>&1 &
SRV=$!
if /usr/bin/python3 - "$PORT" >"$W/limit.out" 2>&1 <<'EOF'; then
import json, sys, threading, time, urllib.error, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
wait_health(base)
def put(prompts, n):
    req = urllib.request.Request(base + "/api", data=json.dumps({"prompts": prompts, "tokens_to_generate": n,
                                 "top_k": 1}).encode(), method="PUT", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
slow = {}
t = threading.Thread(target=lambda: slow.update(r=put(["And God said"] * 128, 28)))
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
# the web page at /, in headless Chromium: a prompt and the API key typed
# into their boxes, the Generate button clicked, the streamed answer read
# from the page (the page sends JSON with the key as a Bearer token)
PORT=$(free_port)
# shellcheck disable=SC2086
$BIN/text_gen_server --load $W/ck $GPT2 --inference-max-seq-length 32 --port "$PORT" --api-key page-key-1 \
	>"$W/web.log" 2>&1 &
SRV=$!
if /usr/bin/python3 - "$PORT" "$W/want.txt" >"$W/want.log" 2>&1 <<'EOF'; then
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
wait_health(base)
page = urllib.request.urlopen(base + "/", timeout=10)
assert page.headers["Content-Type"].startswith("text/html"), page.headers
body = json.dumps({"prompt": "In the beginning God created", "max_tokens": 20, "temperature": 0}).encode()
req = urllib.request.Request(base + "/v1/completions", data=body, method="POST",
                             headers={"Content-Type": "application/json", "Authorization": "Bearer page-key-1"})
open(sys.argv[2], "w").write(json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["text"])
EOF
	/usr/bin/python3 tests/prog/py/browser_check.py "http://127.0.0.1:$PORT" "$W/want.txt" page-key-1 ||
		notok "browser_check.py exited $?"
else
	notok "the web page's reference answer"
	show "$W/want.log"
fi
kill -TERM $SRV
wait $SRV
# tensor-parallel serving: TP2 under mpirun gives the one-rank server's greedy
# answers and log-probs, for a GPT-2-style and a Llama-style model; SIGTERM to
# rank 0 drains and every rank exits 0
LL="--position-embedding-type rope --normalization RMSNorm --swiglu --num-attention-heads 8 --group-query-attention"
LL="$LL --num-query-groups 4 --untie-embeddings-and-output-weights --disable-bias-linear"
setup "train a Llama-style model" sh -c "$BIN/train $ARGS $LL --save $W/lck --save-interval 4 >$W/ltrain.log 2>&1"
MPI="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_mpi_yield_when_idle=1
for m in ck lck; do
	P1=$(free_port)
	P2=$(free_port)
	# shellcheck disable=SC2086
	$BIN/text_gen_server --load $W/$m $GPT2 --inference-max-seq-length 32 --port "$P1" >"$W/one.log" 2>&1 &
	S1=$!
	# shellcheck disable=SC2086
	$MPI -np 2 $BIN/text_gen_server --load $W/$m $GPT2 --inference-max-seq-length 32 --port "$P2" \
		--tensor-model-parallel-size 2 >"$W/tp.log" 2>&1 &
	S2=$!
	if /usr/bin/python3 - "$P1" "$P2" >"$W/tp.out" 2>&1 <<'EOF'; then
import json, sys, threading, time, urllib.request
def call(port, body):
    base = "http://127.0.0.1:%s" % port
    sys.path.insert(0, "tests/prog/py")
    from tap import wait_health
    wait_health(base)
    req = urllib.request.Request(base + "/api", data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())
body = {"prompts": ["Hello world", "In the beginning God", "And the earth was without form"],
        "tokens_to_generate": 12, "top_k": 1, "logprobs": True}
a, b = call(sys.argv[1], body), call(sys.argv[2], body)
assert a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
worst = max(abs(x - y) for p, q in zip(a["logprobs"], b["logprobs"]) for x, y in zip(p, q))
assert worst < 1e-5, worst
print("3 prompts, 12 tokens: the same, log-probs within %.2g" % worst)
EOF
		ok "$m: TP2 serving gives the one-rank answers ($(cat "$W/tp.out"))"
	else
		notok "$m: TP2 serving gives the one-rank answers"
		show "$W/tp.out"
		show "$W/tp.log"
	fi
	kill -TERM $S1
	wait $S1
	# SIGTERM to rank 0, the HTTP rank: it drains, tells rank 1 to stop, and
	# the job ends 0 (mpirun's own SIGTERM handling ends the job itself)
	R0=""
	for pid in $(pgrep -P "$S2" -f text_gen_server) $(pgrep -f "text_gen_server --load $W/$m"); do
		if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0"; then R0=$pid; fi
	done
	[ -n "$R0" ] && kill -TERM "$R0"
	wait $S2
	rc=$?
	if [ -n "$R0" ] && [ $rc = 0 ] && grep -q "SIGTERM: answering" "$W/tp.log"; then
		ok "$m: SIGTERM to rank 0: the TP2 server stops on every rank, exit 0"
	else
		notok "$m: SIGTERM to rank 0 (pid '$R0', exit $rc)"
		show "$W/tp.log"
		kill -KILL $S2 2>/dev/null
	fi
done
expect_fail "TP on more ranks than --tensor-model-parallel-size" "give --tensor-model-parallel-size 2" \
	$MPI -np 2 $BIN/text_gen_server --load $W/ck $GPT2 --port 0
# SIGTERM while keep-alive clients keep sending; OpenBLAS's own threads
# (started before main) allowed, which the signal may land on
PORT=$(free_port)
# shellcheck disable=SC2086
env -u OPENBLAS_NUM_THREADS -u OMP_NUM_THREADS /usr/bin/python3 tests/prog/py/drain_check.py "$PORT" \
	$BIN/text_gen_server --load $W/ck $GPT2 --inference-max-seq-length 32 || true
expect_fail "model flags that disagree with the checkpoint" \
	"the model flags disagree with the checkpoint: --num-layers 6 (the checkpoint has 4); --swiglu 1" \
	$BIN/text_gen_server --load $W/ck $GPT2 --num-layers 6 --swiglu --hidden-size 32 --lr 1e-4 \
	--inference-max-seq-length 32
# (without tokenizer flags the server uses the tokenizer the checkpoint records: tests/prog/ckpt_guard.sh)
expect_fail "no checkpoint" "no latest_checkpointed_iteration.txt" $BIN/text_gen_server --load $W $GPT2
rm -rf "$W"
