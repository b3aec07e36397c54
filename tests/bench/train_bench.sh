#!/bin/sh
# train_bench.sh - `make bench`: CPU training throughput of train beside
# PyTorch (Debian's python3-torch: the same GPT, AdamW, the same thread
# count) measured in the same run, for two shapes:
#   small: 4 layers, 4 heads, hidden 256, seq 64, micro-batch 4, GPT-2 vocab
#   124M:  GPT-2 small (12 layers, 12 heads, hidden 768), seq 64, micro-batch 4
# and the llm.c CPU trainer's figure for the small shape on this machine kind
# (719 ms/step; quoted, not measured here). Peak memory is each process's
# maximum resident set. Targets: >= 1.5x PyTorch tokens/s, >= 3x
# llm.c, peak memory no higher than PyTorch's. Each shape runs ROUNDS
# (default 3) alternating rounds of both programs; medians are compared.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-train
rm -rf "$W"
mkdir -p "$W"
THREADS=${THREADS:-$(nproc)}
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $THREADS threads each"

# one run of each program; prints "ms rss_kb"
ours_run() { # layers hidden heads iters
	half=$(($4 / 2))
	OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS /usr/bin/time -f "%M" -o "$W/time" \
		bin/train --num-layers "$1" --hidden-size "$2" --num-attention-heads "$3" --seq-length 64 \
		--max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 4 --lr 1e-4 \
		--hidden-dropout 0 --attention-dropout 0 --mock-data --train-iters "$4" --log-interval "$half" \
		--eval-iters 0 --eval-interval "$4" --data-cache-path "$W/cache" $GPT2 >"$W/run.log" 2>"$W/run.err"
	# the last line's interval excludes the first iterations (start-up, first touches)
	echo "$(grep -o "elapsed time per iteration (ms): [0-9.]*" "$W/run.log" | tail -1 | awk '{ print $NF }') $(cat "$W/time")"
}
peer_run() { # layers hidden heads iters
	/usr/bin/python3 tests/bench/peer_train.py --layers "$1" --hidden "$2" --heads "$3" --seq 64 \
		--batch 4 --threads "$THREADS" --warmup 2 --steps $(($4 / 2)) |
		sed 's/.*ms_per_step=\([0-9.]*\).*maxrss_kb=\([0-9]*\).*/\1 \2/'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ROUNDS rounds, each megac then PyTorch, so a drift in the machine's speed
# (a shared VM's neighbours) lands on both; the medians are compared
ROUNDS=${ROUNDS:-3}
bench() { # name layers hidden heads iters
	name=$1
	shift
	: >"$W/$name.ours"
	: >"$W/$name.peer"
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		ours_run "$@" >>"$W/$name.ours"
		peer_run "$@" >>"$W/$name.peer"
		r=$((r + 1))
	done
	o=$(cut -d' ' -f1 "$W/$name.ours" | median)
	p=$(cut -d' ' -f1 "$W/$name.peer" | median)
	orss=$(cut -d' ' -f2 "$W/$name.ours" | median)
	prss=$(cut -d' ' -f2 "$W/$name.peer" | median)
	awk -v n="$name" -v o="$o" -v p="$p" -v orss="$orss" -v prss="$prss" -v r="$ROUNDS" \
		-v os="$(cut -d' ' -f1 "$W/$name.ours" | tr '\n' ' ')" -v ps="$(cut -d' ' -f1 "$W/$name.peer" | tr '\n' ' ')" 'BEGIN {
		printf "%-6s megac %7.1f ms/step %6.0f tok/s %5.0f MB | PyTorch %7.1f ms/step %6.0f tok/s %5.0f MB | speed x%.2f, memory x%.2f (medians of %d alternating rounds; megac %s| PyTorch %s)\n",
			n, o, 256000 / o, orss / 1024, p, 256000 / p, prss / 1024, p / o, orss / prss, r, os, ps }'
	if [ "$name" = small ]; then
		awk -v o="$o" 'BEGIN { printf "small  llm.c CPU trainer 719 ms/step (quoted): megac x%.2f\n", 719 / o }'
	fi
}
bench small 4 256 4 20
bench 124M 12 768 12 6
