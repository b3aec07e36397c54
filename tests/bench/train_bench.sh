#!/bin/sh
# train_bench.sh - `make bench`: CPU training throughput of train beside
# PyTorch (Debian's python3-torch: the same GPT, AdamW, the same thread
# count) measured in the same run, for two shapes:
#   small: 4 layers, 4 heads, hidden 256, seq 64, micro-batch 4, GPT-2 vocab
#   124M:  GPT-2 small (12 layers, 12 heads, hidden 768), seq 64, micro-batch 4
# and the llm.c CPU trainer's figure for the small shape on this machine kind
# (719 ms/step; quoted, not measured here). Peak memory is each process's
# maximum resident set. Targets: >= 1.5x PyTorch tokens/s, >= 3x
# llm.c, peak memory no higher than PyTorch's.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-train
rm -rf "$W"
mkdir -p "$W"
THREADS=${THREADS:-$(nproc)}
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $THREADS threads each"

bench() { # name layers hidden heads iters
	name=$1 L=$2 H=$3 A=$4 N=$5
	half=$((N / 2))
	OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS /usr/bin/time -f "%M" -o "$W/time" \
		bin/train --num-layers "$L" --hidden-size "$H" --num-attention-heads "$A" --seq-length 64 \
		--max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 4 --lr 1e-4 \
		--hidden-dropout 0 --attention-dropout 0 --mock-data --train-iters "$N" --log-interval "$half" \
		--eval-iters 0 --eval-interval "$N" --data-cache-path "$W/cache" $GPT2 >"$W/$name.log" 2>"$W/$name.err"
	# the last line's interval excludes the first iterations (start-up, first touches)
	ours=$(grep -o "elapsed time per iteration (ms): [0-9.]*" "$W/$name.log" | tail -1 | awk '{ print $NF }')
	ours_rss=$(cat "$W/time")
	peer=$(/usr/bin/python3 tests/bench/peer_train.py --layers "$L" --hidden "$H" --heads "$A" --seq 64 \
		--batch 4 --threads "$THREADS" --warmup 2 --steps "$half")
	peer_ms=$(echo "$peer" | sed 's/.*ms_per_step=\([0-9.]*\).*/\1/')
	peer_rss=$(echo "$peer" | sed 's/.*maxrss_kb=\([0-9]*\).*/\1/')
	awk -v n="$name" -v o="$ours" -v p="$peer_ms" -v orss="$ours_rss" -v prss="$peer_rss" 'BEGIN {
		printf "%-6s megac %7.1f ms/step %6.0f tok/s %5.0f MB | PyTorch %7.1f ms/step %6.0f tok/s %5.0f MB | speed x%.2f, memory x%.2f\n",
			n, o, 256000 / o, orss / 1024, p, 256000 / p, prss / 1024, p / o, orss / prss }'
	if [ "$name" = small ]; then
		awk -v o="$ours" 'BEGIN { printf "small  llm.c CPU trainer 719 ms/step (quoted): megac x%.2f\n", 719 / o }'
	fi
}
bench small 4 256 4 20
bench 124M 12 768 12 6
