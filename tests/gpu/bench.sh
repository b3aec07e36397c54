#!/bin/sh
# bench.sh - issue 11's GPU speed measurement, on the device machine (bin/
# and build/gpu/ built with CUDA, see README.md): bf16 training of GPT-2-
# shaped models of 124M, 350M and 1.5B parameters (seq 1024) and Llama-3-style
# 1B (seq 2048) and 3B (seq 4096) models (GQA, RoPE, SwiGLU; head dims 64 and
# 128) on one GPU, each with the largest micro-batch of its list that fits,
# printing ms per iteration, tokens/s, TFLOP/s (Megatron's FLOPs formula,
# train's --log-throughput) and MFU against 989 TFLOP/s dense bf16, and peak
# memory; then where the 1.5B GPT's and the Llama 1B's steps spend their time,
# op by op (MEGAC_PROFILE_OPS); then the attention micro-benchmark
# (build/gpu/attn_bench); then, as
# time allows, the same shapes in PyTorch (tests/gpu/torch_bench.py), the
# peer. Results under $OUT (bench.txt, the logs). Synthetic data
# (--mock-data): no dataset to build. BENCH_BUDGET (seconds, default 480):
# the models not started by then are skipped, so the script fits a lease.
#   BENCH_DEVICE=cpu BENCH_TINY=1 sh tests/gpu/bench.sh   a dry run of the script on any machine
# (BENCH_PYTHON: a python3 with torch for the peer, where python3 has none)
set -u
BIN=${MEGAC_BIN:-$PWD/bin}
OUT=${OUT:-/tmp/gpu-out}
DEV=${BENCH_DEVICE:-cuda}
W=${TMPDIR:-/tmp}/megac-bench
BUDGET=${BENCH_BUDGET:-480}
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
rm -rf "$W"
mkdir -p "$W" "$OUT"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json"
GPT2="$GPT2 --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
COMMON="--mock-data --bf16 --lr 1e-4 --train-iters 8 --log-interval 1 --log-throughput --eval-interval 1000"
COMMON="$COMMON --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --data-cache-path $W/cache $GPT2"
PEAK=989 # H100/H200 dense bf16 TFLOP/s, issue 11's yardstick

# name | model flags | micro-batch sizes to try, largest first
MODELS="gpt2-124m|--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024|32 16 8 4
gpt2-350m|--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024|16 8 4 2
gpt2-1.5b|--num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --max-position-embeddings 1024|8 4 2 1
llama3-1b|--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 8192 --seq-length 2048 --max-position-embeddings 2048 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights|8 4 2 1
llama3-3b|--num-layers 28 --hidden-size 3072 --num-attention-heads 24 --group-query-attention --num-query-groups 8 --ffn-hidden-size 8192 --seq-length 4096 --max-position-embeddings 4096 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights|4 2 1"
if [ -n "${BENCH_TINY:-}" ]; then
	MODELS="tiny|--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64|4 2"
	COMMON=$(echo "$COMMON" | sed 's/--train-iters 8/--train-iters 3/')
fi

{
	date -u
	echo "# model | micro-batch | ms/iteration | tokens/s | TFLOP/s | MFU (of $PEAK) | peak MB"
} >"$OUT/bench.txt"
echo "$MODELS" | while IFS='|' read -r name flags mbs; do
	if [ "$(elapsed)" -ge "$BUDGET" ]; then
		echo "$name | skipped: the budget of $BUDGET s was spent" | tee -a "$OUT/bench.txt"
		continue
	fi
	done_one=
	for mb in $mbs; do
		log="$W/$name-mb$mb.log"
		# shellcheck disable=SC2086
		if timeout 150 "$BIN/train" $flags $COMMON --micro-batch-size "$mb" --global-batch-size "$mb" \
			--device "$DEV" >"$log" 2>&1; then
			ms=$(sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' "$log" | tail -n 3 | sort -g | head -n 2 | tail -n 1)
			tf=$(sed -n 's/.*throughput per GPU (TFLOP\/s\/GPU): \([0-9.]*\).*/\1/p' "$log" | tail -n 3 | sort -g | tail -n 2 | head -n 1)
			mem=$(sed -n 's/.*max allocated: \([0-9.]*\).*/\1/p' "$log" | sort -g | tail -n 1)
			seq=$(echo "$flags" | sed 's/.*--seq-length \([0-9]*\).*/\1/')
			tok=$(awk -v ms="$ms" -v mb="$mb" -v s="$seq" 'BEGIN { if (ms > 0) printf "%.0f", mb * s * 1000 / ms; else print "?" }')
			mfu=$(awk -v t="$tf" -v p="$PEAK" 'BEGIN { printf "%.1f%%", 100 * t / p }')
			echo "$name | $mb | $ms | $tok | $tf | $mfu | $mem" | tee -a "$OUT/bench.txt"
			cp "$log" "$OUT/" 2>/dev/null
			done_one=1
			break
		fi
		echo "# $name micro-batch $mb: $(grep -m1 -i 'error\|memory' "$log" | cut -c1-160)" >>"$OUT/bench.txt"
	done
	[ -n "$done_one" ] || echo "$name | none of the micro-batch sizes $mbs ran" | tee -a "$OUT/bench.txt"
done
# where a step's time goes, op by op (MEGAC_PROFILE_OPS, lib/kernels/profile.c): the
# 1.5B GPT and the Llama 1B at micro-batch 2, 4 iterations, the table into bench.txt
if [ -n "${BENCH_TINY:-}" ]; then PROF="tiny"; else PROF="gpt2-1.5b llama3-1b"; fi
for name in $PROF; do
	if [ "$(elapsed)" -ge "$BUDGET" ]; then
		echo "# profile $name: skipped, the budget of $BUDGET s was spent" | tee -a "$OUT/bench.txt"
		continue
	fi
	flags=$(echo "$MODELS" | grep "^$name|" | cut -d'|' -f2)
	log="$W/$name-profile.log"
	# shellcheck disable=SC2086
	MEGAC_PROFILE_OPS=1 timeout 120 "$BIN/train" $flags $(echo "$COMMON" | sed 's/--train-iters [0-9]*/--train-iters 5/') \
		--micro-batch-size 2 --global-batch-size 2 --device "$DEV" >"$log" 2>&1
	echo "# profile $name, micro-batch 2 (exit $?):" >>"$OUT/bench.txt"
	sed -n '/^op profile/,/^  all ops/p' "$log" | awk 'NR <= 16 || /^  all ops/' | tee -a "$OUT/bench.txt"
	cp "$log" "$OUT/" 2>/dev/null
done
if [ -x build/gpu/attn_bench ]; then
	if [ "$DEV" = cpu ]; then a="--cpu --reps 1"; else a="--reps 10"; fi
	# shellcheck disable=SC2086
	timeout 120 build/gpu/attn_bench $a | tee -a "$OUT/bench.txt"
fi
# the peer: the same shapes in PyTorch, as time allows
PY=${BENCH_PYTHON:-python3}
if "$PY" -c 'import torch' 2>/dev/null; then
	if [ -n "${BENCH_TINY:-}" ]; then names=tiny; else names=$(echo "$MODELS" | cut -d'|' -f1); fi
	for name in $names; do
		left=$((BUDGET + 120 - $(elapsed)))
		if [ "$left" -lt 30 ]; then
			echo "torch $name | skipped: out of time" | tee -a "$OUT/bench.txt"
			continue
		fi
		BENCH_DEVICE=$DEV timeout "$left" "$PY" tests/gpu/torch_bench.py "$name" 2>"$W/torch-$name.err" | tee -a "$OUT/bench.txt"
		grep -v '^ *$' "$W/torch-$name.err" | tail -n 3 | sed 's/^/# /' >>"$OUT/bench.txt"
	done
fi
