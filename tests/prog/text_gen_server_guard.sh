# text_gen_server_guard.sh - text_gen_server against what a reliability
# review found (docs/inference.md, "Who may ask", "Slow clients",
# "Stopping"), over real HTTP
# on loopback (tests/prog/py/server_guard.py): loopback by default, --host,
# the Host check, --api-key, JSON bodies only, HEAD, conflicting
# Content-Length, --port 0; slow clients (--request-timeout, uploads not
# counted, --max-connections-per-ip); hang-ups cancel their generation; the
# drain (listening socket closed, /health 503, --drain-timeout, a second
# signal); Megatron's flags as the requests' defaults, the model's length as
# --inference-max-seq-length's; bad serving flags exit 128.
# shellcheck disable=SC2086 # $S and $GPT2 are words
. tests/prog_lib.sh
W=$(new_tmp text_gen_server_guard)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
ARGS="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 2 --global-batch-size 4 --lr 2e-3 --train-iters 2 --mock-data --eval-interval 100"
ARGS="$ARGS --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
setup "train 2 iterations (32 positions)" sh -c "$BIN/train $ARGS --save $W/ck --save-interval 2 >$W/train.log 2>&1"
/usr/bin/python3 tests/prog/py/server_guard.py $BIN/text_gen_server --load $W/ck $GPT2 ||
	notok "server_guard.py exited $?"
/usr/bin/python3 tests/prog/py/server_defaults.py $BIN/text_gen_server --load $W/ck $GPT2 ||
	notok "server_defaults.py exited $?"
S="$BIN/text_gen_server --load $W/ck $GPT2 --port 0"
expect_fail "--request-timeout 0" "--request-timeout 0: give seconds above 0" $S --request-timeout 0
expect_fail "--drain-timeout -1" "--drain-timeout -1: give seconds from 0" $S --drain-timeout -1
expect_fail "--max-connections-per-ip -1" "--max-connections-per-ip -1: give 0 (no limit) to 65535" \
	$S --max-connections-per-ip -1
expect_fail "--api-key with a space" "--api-key: give visible ASCII characters only" $S --api-key "a b"
expect_fail "--host ''" "--host: give an address to listen on" $S --host ""
expect_fail "--temperature 0" "--temperature 0: give a number above 0, at most 100" $S --temperature 0
expect_fail "--top_k 1001" "--top_k 1001: give 0 to 1000" $S --top_k 1001
expect_fail "--top_p 1.5" "--top_p 1.5: give 0 to 1" $S --top_p 1.5
expect_fail "--top_k with --top_p" "--top_k 5 and --top_p 0.5: give one of them" $S --top_k 5 --top_p 0.5
expect_fail "--num-tokens-to-generate past the model's 32 positions" \
	"--num-tokens-to-generate 32: a request has 32 positions" $S --num-tokens-to-generate 32
expect_fail "--inference-max-seq-length past the model's 32 learned positions" \
	"--inference-max-seq-length 64: the model has 32 learned positions" $S --inference-max-seq-length 64
# a port in use: the address, the port and the reason
PORT=$(free_port)
/usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(20)' "$PORT" &
HOLD=$!
sleep 0.3
expect_fail "a port in use" "cannot listen on 127.0.0.1 port $PORT: Address already in use" \
	"$BIN/text_gen_server" --load "$W/ck" $GPT2 --port "$PORT"
kill $HOLD
wait $HOLD 2>/dev/null
rm -rf "$W"
