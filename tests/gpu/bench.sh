#!/bin/sh
# bench.sh - the GPU speed measurement, on the GPU machine (the
# GPU kit of tests/gpu/pack.sh, or bin/ and build/gpu/ built with CUDA; run
# by measure.sh, or alone: it sources tests/gpu/env.sh itself then). In order,
# so that what matters most is measured first when time runs short:
#   1. the attention micro-benchmark (gpu/attn_bench): the block attention's
#      forward and backward in TFLOP/s on the fp32 and bf16 tables;
#   2. bf16 training of GPT-2-shaped models of 124M, 350M and 1.5B parameters
#      (seq 1024) and Llama-3-style 1B (seq 2048) and 3B (seq 4096) models
#      (GQA, RoPE, SwiGLU; head dims 64 and 128) on one GPU, each with the
#      largest micro-batch of its list that runs (the lists start from the
#      second-largest size an H200 might hold: an attempt that does not fit
#      costs a whole model's start-up), printing ms per
#      iteration, tokens/s, TFLOP/s (Megatron's FLOPs formula, train's
#      --log-throughput) and MFU against 989 TFLOP/s dense bf16, and peak memory;
#   3. the same shapes in PyTorch (tests/gpu/torch_bench.py, with the python
#      that has torch, at the micro-batch megac ran), the peer;
#   4. where the 1.5B GPT's and the Llama 1B's steps spend their time, op by
#      op (MEGAC_PROFILE_OPS).
# Results under $OUT (bench.txt, the logs). Synthetic data (--mock-data): no
# dataset to build. BENCH_BUDGET (seconds, default 480): no model starts
# after it; BENCH_DEADLINE (default BENCH_BUDGET + 120): every step's time
# limit is cut so that the script ends by then (measure.sh runs it under
# `timeout`, a little above).
#   BENCH_DEVICE=cpu BENCH_TINY=1 sh tests/gpu/bench.sh   a dry run of the script on any machine
# (BENCH_PYTHON: the python3 for the peer, else the first with torch: tests/gpu/torch_python.sh)
set -u
if [ -z "${MEGAC_BIN:-}" ]; then
	. tests/gpu/env.sh || exit 1
fi
BIN=$MEGAC_BIN
GPU=${MEGAC_GPU:-$PWD/build/gpu}
OUT=${OUT:-/tmp/gpu-out}
DEV=${BENCH_DEVICE:-cuda}
W=${TMPDIR:-/tmp}/megac-bench
BUDGET=${BENCH_BUDGET:-480}
DEADLINE=${BENCH_DEADLINE:-$((BUDGET + 120))}
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
# limit N: N seconds, or what is left before the deadline (less a margin) if that is less
limit() {
	_l=$((DEADLINE - $(elapsed) - 5))
	[ "$_l" -lt "$1" ] && echo "$_l" || echo "$1"
}
rm -rf "$W"
mkdir -p "$W" "$OUT"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json"
GPT2="$GPT2 --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
COMMON="--mock-data --bf16 --lr 1e-4 --train-iters 8 --log-interval 1 --log-throughput --eval-interval 1000"
COMMON="$COMMON --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --data-cache-path $W/cache $GPT2"
PEAK=989 # H100/H200 dense bf16 TFLOP/s, the MFU yardstick

# name | model flags | micro-batch sizes to try, largest first (torch_bench.py has the same lists)
MODELS="gpt2-124m|--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024|16 8 4
gpt2-350m|--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024|8 4 2
gpt2-1.5b|--num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --max-position-embeddings 1024|4 2 1
llama3-1b|--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 8192 --seq-length 2048 --max-position-embeddings 2048 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights|4 2 1
llama3-3b|--num-layers 28 --hidden-size 3072 --num-attention-heads 24 --group-query-attention --num-query-groups 8 --ffn-hidden-size 8192 --seq-length 4096 --max-position-embeddings 4096 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights|2 1"
if [ -n "${BENCH_TINY:-}" ]; then
	MODELS="tiny|--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64|4 2"
	COMMON=$(echo "$COMMON" | sed 's/--train-iters 8/--train-iters 3/')
fi

{
	date -u
	echo "# model | micro-batch | ms/iteration | tokens/s | TFLOP/s | MFU (of $PEAK) | peak MB"
} >"$OUT/bench.txt"

# 1. the attention micro-benchmark: quick, and the kernels' own speed
if [ -x "$GPU/attn_bench" ] && [ "$(limit 60)" -ge 20 ]; then
	if [ "$DEV" = cpu ]; then a="--cpu --reps 1"; else a="--reps 10"; fi
	# shellcheck disable=SC2086
	timeout "$(limit 60)" "$GPU/attn_bench" $a | tee -a "$OUT/bench.txt"
fi

# 2. megac's training speed; the micro-batch each model ran goes to $W/ran
: >"$W/ran"
echo "$MODELS" | while IFS='|' read -r name flags mbs; do
	if [ "$(elapsed)" -ge "$BUDGET" ] || [ "$(limit 120)" -lt 30 ]; then
		echo "$name | skipped: the budget of $BUDGET s was spent" | tee -a "$OUT/bench.txt"
		continue
	fi
	done_one=
	for mb in $mbs; do
		[ "$(limit 120)" -ge 20 ] || break
		log="$W/$name-mb$mb.log"
		# shellcheck disable=SC2086
		if timeout "$(limit 120)" "$BIN/train" $flags $COMMON --micro-batch-size "$mb" --global-batch-size "$mb" \
			--device "$DEV" >"$log" 2>&1; then
			ms=$(sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' "$log" | tail -n 3 | sort -g | head -n 2 | tail -n 1)
			tf=$(sed -n 's/.*throughput per GPU (TFLOP\/s\/GPU): \([0-9.]*\).*/\1/p' "$log" | tail -n 3 | sort -g | tail -n 2 | head -n 1)
			mem=$(sed -n 's/.*max allocated: \([0-9.]*\).*/\1/p' "$log" | sort -g | tail -n 1)
			seq=$(echo "$flags" | sed 's/.*--seq-length \([0-9]*\).*/\1/')
			tok=$(awk -v ms="$ms" -v mb="$mb" -v s="$seq" 'BEGIN { if (ms > 0) printf "%.0f", mb * s * 1000 / ms; else print "?" }')
			mfu=$(awk -v t="$tf" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * t / p }')
			echo "$name | $mb | $ms | $tok | $tf | $mfu | $mem" | tee -a "$OUT/bench.txt"
			echo "$name=$mb" >>"$W/ran"
			cp "$log" "$OUT/" 2>/dev/null
			done_one=1
			break
		fi
		echo "# $name micro-batch $mb: $(grep -m1 -i 'error\|memory' "$log" | cut -c1-160)" >>"$OUT/bench.txt"
	done
	[ -n "$done_one" ] || echo "$name | none of the micro-batch sizes $mbs ran" | tee -a "$OUT/bench.txt"
done

# 3. the peer: the same shapes in PyTorch at the micro-batch megac ran, as time allows
PY=${BENCH_PYTHON:-${MEGAC_PYTHON:-}}
[ -n "$PY" ] || PY=$(sh tests/gpu/torch_python.sh 2>/dev/null)
if [ -n "$PY" ] && "$PY" -c 'import torch' 2>/dev/null; then
	if [ -s "$W/ran" ]; then names=$(cat "$W/ran"); else names=$(echo "$MODELS" | cut -d'|' -f1); fi
	for name in $names; do
		left=$(limit 150)
		if [ "$left" -lt 30 ]; then
			echo "torch ${name%=*} | skipped: out of time" | tee -a "$OUT/bench.txt"
			continue
		fi
		BENCH_DEVICE=$DEV timeout "$left" "$PY" tests/gpu/torch_bench.py "$name" 2>"$W/torch-${name%=*}.err" |
			tee -a "$OUT/bench.txt"
		grep -v '^ *$' "$W/torch-${name%=*}.err" | tail -n 3 | sed 's/^/# /' >>"$OUT/bench.txt"
	done
else
	echo "# torch peer: no python3 with torch (${PY:-none found})" | tee -a "$OUT/bench.txt"
fi

# 4. where a step's time goes, op by op (MEGAC_PROFILE_OPS, lib/kernels/profile.c): the
# 1.5B GPT and the Llama 1B at micro-batch 2, 5 iterations, the table into bench.txt
if [ -n "${BENCH_TINY:-}" ]; then PROF="tiny"; else PROF="gpt2-1.5b llama3-1b"; fi
for name in $PROF; do
	if [ "$(limit 120)" -lt 30 ]; then
		echo "# profile $name: skipped, out of time" | tee -a "$OUT/bench.txt"
		continue
	fi
	flags=$(echo "$MODELS" | grep "^$name|" | cut -d'|' -f2)
	log="$W/$name-profile.log"
	# shellcheck disable=SC2086
	MEGAC_PROFILE_OPS=1 timeout "$(limit 120)" "$BIN/train" $flags $(echo "$COMMON" | sed 's/--train-iters [0-9]*/--train-iters 5/') \
		--micro-batch-size 2 --global-batch-size 2 --device "$DEV" >"$log" 2>&1
	echo "# profile $name, micro-batch 2 (exit $?):" >>"$OUT/bench.txt"
	sed -n '/^op profile/,/^  all ops/p' "$log" | awk 'NR <= 16 || /^  all ops/' | tee -a "$OUT/bench.txt"
	cp "$log" "$OUT/" 2>/dev/null
done
