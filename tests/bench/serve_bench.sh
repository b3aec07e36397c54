#!/bin/sh
# serve_bench.sh - `make bench`: text_gen_server's aggregate generation
# throughput with 32 concurrent clients, batched (32 cache slots: requests
# share forward passes) against one at a time (--inference-max-requests 1:
# each request waits for the one before), measured in the same run on the
# same model: GPT-2-small-shaped width on 4 layers (hidden 768, 12 heads,
# GPT-2 vocabulary), each client asking for 32 greedy tokens after a prompt
# of ~10 tokens. Target: batched >= 4x one at a time at 32 clients.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-serve
rm -rf "$W"
mkdir -p "$W"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
export OMP_NUM_THREADS=${THREADS:-$(nproc)} OPENBLAS_NUM_THREADS=${THREADS:-$(nproc)}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $OMP_NUM_THREADS threads"
bin/train --num-layers 4 --hidden-size 768 --num-attention-heads 12 --seq-length 64 --max-position-embeddings 64 \
	--micro-batch-size 1 --lr 1e-4 --mock-data --train-iters 0 --data-cache-path "$W/cache" $GPT2 \
	--save "$W/ck" >"$W/train.log" 2>&1

run() { # SLOTS: prints "tokens seconds"
	port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	bin/text_gen_server --load "$W/ck" --port "$port" --inference-max-seq-length 64 --inference-max-requests "$1" \
		$GPT2 >"$W/server$1.log" 2>&1 &
	pid=$!
	/usr/bin/python3 - "$port" <<'EOF'
import json, sys, threading, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
wait_health(base)
words = "light darkness waters heaven earth seas grass herb fruit seed stars sun moon night day beast".split()
out = [0] * 32
def client(i):
    body = json.dumps({"prompts": ["In the beginning the %s and the %s were" % (words[i % 16], words[(3 * i) % 16])],
                       "tokens_to_generate": 32, "top_k": 1}).encode()
    req = urllib.request.Request(base + "/api", data=body, method="PUT", headers={"Content-Type": "application/json"})
    r = json.loads(urllib.request.urlopen(req, timeout=600).read())
    out[i] = len(r["tokens"][0])
t0 = time.time()
ts = [threading.Thread(target=client, args=(i,)) for i in range(32)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(32 * 32, time.time() - t0)
EOF
	kill -TERM $pid
	wait $pid
}
set -- $(run 32)
bt=$1 bs=$2
set -- $(run 1)
st=$1 ss=$2
awk -v bt="$bt" -v bs="$bs" -v st="$st" -v ss="$ss" 'BEGIN {
	printf "32 clients x 32 tokens: batched %.1f s (%.0f tokens/s), one at a time %.1f s (%.0f tokens/s): batched x%.2f\n",
		bs, bt / bs, ss, st / ss, (bt / bs) / (st / ss) }'
rm -rf "$W"
