#!/bin/sh
# demo.sh - `make demo`: the main job end to end on the bundled corpus.
# The King James Bible and the BSD fortunes (examples/data/) become one
# GPT-2 token dataset, which is read back and decoded; then train pretrains
# a small GPT on it for a few minutes (the loss falls from ~10.8 to ~5),
# evaluating on the validation split and saving an HDF5 checkpoint; last,
# text_gen_server serves the checkpoint and answers one question over HTTP.
# DEMO_ITERS sets the iterations (default 300).
set -eu
cd "$(dirname "$0")/.."
OUT=build/demo
rm -rf "$OUT"
mkdir -p "$OUT"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
WORKERS=$(nproc 2>/dev/null || echo 2)

echo "== preprocess_data: examples/data/kjv.jsonl.gz + fortunes.jsonl.gz -> $OUT/corpus_text_document"
bin/preprocess_data --input examples/data/kjv.jsonl.gz examples/data/fortunes.jsonl.gz \
	--output-prefix "$OUT/corpus" $GPT2 --append-eod --workers "$WORKERS" --log-interval 4000

echo
echo "== what was written"
ls -l "$OUT"
echo
bin/dataset_info --input "$OUT/corpus_text_document" $GPT2 --document 0 --max-tokens 60
echo
bin/dataset_info --input "$OUT/corpus_text_document" $GPT2 --document 1189 --max-tokens 60

echo
echo "== train: a 4-layer GPT (hidden 256) on the corpus, $((${DEMO_ITERS:-300})) iterations of 8 x 128 tokens"
bin/train --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 \
	--max-position-embeddings 128 --micro-batch-size 8 --global-batch-size 8 \
	--train-iters "${DEMO_ITERS:-300}" --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 \
	--weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0 --attention-dropout 0 \
	--data-path "$OUT/corpus_text_document" --split 98,2,0 --data-cache-path "$OUT/cache" \
	--eval-interval 100 --eval-iters 5 --log-interval 20 --log-throughput \
	--save "$OUT/checkpoints" --save-interval 100 --metrics-file "$OUT/metrics.jsonl" \
	--tensorboard-dir "$OUT/tensorboard" $GPT2
echo
echo "== checkpoint: $OUT/checkpoints/iter_$(printf %07d "$(cat "$OUT/checkpoints/latest_checkpointed_iteration.txt")")"
ls -l "$OUT/checkpoints/iter_$(printf %07d "$(cat "$OUT/checkpoints/latest_checkpointed_iteration.txt")")"
echo "metrics: $OUT/metrics.jsonl; TensorBoard: tensorboard --logdir $OUT/tensorboard"

echo
echo "== text_gen_server: serve the checkpoint and ask it one question over HTTP"
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bin/text_gen_server --load "$OUT/checkpoints" --port "$PORT" --inference-max-seq-length 128 $GPT2 \
	>"$OUT/server.log" 2>&1 &
SERVER=$!
i=0
until /usr/bin/python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
	"http://127.0.0.1:$PORT/health" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $SERVER 2>/dev/null; then
		echo "the server did not come up:" >&2
		cat "$OUT/server.log" >&2
		exit 1
	fi
	sleep 0.1
done
echo "PUT /api {\"prompts\": [\"And God said\"], \"tokens_to_generate\": 40, \"top_k\": 1}"
/usr/bin/python3 - "http://127.0.0.1:$PORT/api" <<'PYEOF'
import json, sys, urllib.request
body = json.dumps({"prompts": ["And God said"], "tokens_to_generate": 40, "top_k": 1}).encode()
req = urllib.request.Request(sys.argv[1], data=body, method="PUT", headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    print("answer:", json.loads(r.read())["text"][0])
PYEOF
kill -TERM $SERVER
wait $SERVER
echo "server stopped"
