#!/bin/sh
# train_parity.sh - training on the GPU against training on the CPU, on the
# GPU machine (run by tests/gpu/run.sh and measure.sh; alone, it sources
# tests/gpu/env.sh for the GPU kit's programs, or bin/ built with CUDA):
#   - 20 iterations of a tiny GPT-2-style and Llama-style model (dropout on,
#     two micro-batches per step) in fp32: every iteration's lm loss on the
#     GPU equals the CPU's within rtol 1e-4, also with document masks (the
#     probs attention path), full recompute and validation, and for a
#     Mixtral-style mixture of experts (routing on the host, experts on the GPU);
#   - the same in bf16 within rtol 2e-2 (both round every activation to bf16,
#     so summation-order differences of the GEMMs move values across rounding
#     boundaries; the worst difference is printed), also at head dims 64 and
#     128 without dropout, where the GPU takes the tensor-core attention;
#   - 10 iterations straight equal 5, save, resume, 5 more, bit for bit;
#   - no cudaMalloc after the first iteration (train's "GPU memory:" line);
#   - FP8 (tensorwise, delayed, mxfp8) on a tiny Llama within rtol 2e-2;
#   - the milliseconds per iteration of a GPT-2 124M-shaped model in fp32,
#     bf16 and FP8 (tensorwise), for the record (docs/perf.md).
# TAP lines on stdout, "N passed, M failed" last; exit 1 on any failure.
# GPU_ONLY=TEXT runs only the parity cases whose name holds TEXT (measure.sh: bf16).
# GPU_DEVICE=cpu runs the "GPU" side on the CPU too: a dry run of this
# script's own mechanics on a machine without a GPU (the device checks fail).
set -u
if [ -z "${MEGAC_BIN:-}" ]; then
	. tests/gpu/env.sh || exit 1
fi
DEV=${GPU_DEVICE:-cuda}
BIN=$MEGAC_BIN
W=${1:-${TMPDIR:-/tmp}/megac-gpu-train}
rm -rf "$W"
mkdir -p "$W"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8} OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json"
GPT2="$GPT2 --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $((pass + fail)) - $*"; }
notok() { fail=$((fail + 1)); echo "not ok $((pass + fail)) - $*"; }
show() { tail -n "${2:-6}" "$1" | sed 's/^/#   /'; }

if ! "$BIN/preprocess_data" --input examples/data/kjv.jsonl.gz --output-prefix "$W/kjv" $GPT2 --append-eod \
	--workers 4 --log-interval 0 >"$W/prep.log" 2>&1; then
	notok "preprocess the bundled corpus"
	show "$W/prep.log"
	echo "$pass passed, $fail failed"
	exit 1
fi

COMMON="--seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3"
COMMON="$COMMON --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 3 --train-iters 20 --log-interval 1"
COMMON="$COMMON --data-path $W/kjv_text_document --split 95,5,0 --eval-interval 10 --eval-iters 2"
COMMON="$COMMON --data-cache-path $W/cache --seed 7 --clip-grad 1.0 --weight-decay 0.1 $GPT2"
GPTM="--num-layers 2 --hidden-size 64 --num-attention-heads 4"
LLAMA="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
LLAMA="$LLAMA --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 160"
LLAMA="$LLAMA --disable-bias-linear --untie-embeddings-and-output-weights"

# losses LOG: "iteration loss" per line, from the training log lines
losses() { sed -n 's/.* iteration *\([0-9]*\)\/.*lm loss: \([0-9.eE+-]*\).*/\1 \2/p' "$1"; }
vlosses() { sed -n 's/.*validation loss at iteration \([0-9]*\).*lm loss value: \([0-9.eE+-]*\).*/\1 \2/p' "$1"; }

# compare NAME RTOL A B: the same iterations, every loss within rtol
compare() {
	if [ ! -s "$3" ] || [ "$(wc -l <"$3")" -ne "$(wc -l <"$4")" ]; then
		notok "$1: the runs logged $(wc -l <"$3") and $(wc -l <"$4") losses"
		return
	fi
	# "bad" (never a number) when the iterations differ or a loss is not a number
	worst=$(paste "$3" "$4" | awk '
		{ if ($1 != $3 || $2 !~ /^[0-9.eE+-]+$/ || $4 !~ /^[0-9.eE+-]+$/) { bad = 1; exit }
		  d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; rel = d / (m > 1e-30 ? m : 1e-30)
		  if (rel > worst) worst = rel }
		END { if (bad) print "bad"; else printf "%.3g\n", worst + 0 }')
	if [ "$worst" != bad ] && awk -v w="$worst" -v r="$2" 'BEGIN { exit !(w + 0 <= r + 0) }'; then
		ok "$1: $(wc -l <"$3") losses agree, worst relative difference $worst (rtol $2)"
	else
		notok "$1: worst relative difference $worst (rtol $2)"
		paste "$3" "$4" | head -n 5 | sed 's/^/#   /'
	fi
}

# run NAME ROLE DEVICE ARGS...: one training run, its log in $W/NAME.ROLE.log
# (ROLE: cpu for the reference, gpu for the device under test)
run() {
	_n=$1
	_role=$2
	_d=$3
	shift 3
	timeout 90 "$BIN/train" "$@" --device "$_d" >"$W/$_n.$_role.log" 2>&1
	_rc=$?
	[ $_rc -eq 0 ] && return 0
	notok "$_n on $_d (exit $_rc)"
	show "$W/$_n.$_role.log"
	return 1
}

# parity NAME RTOL ARGS...: the same run on the CPU and the GPU
parity() {
	_n=$1
	_r=$2
	shift 2
	case "$_n" in *"${GPU_ONLY:-}"*) ;; *) return ;; esac
	run "$_n" cpu cpu "$@" || return
	run "$_n" gpu "$DEV" "$@" || return
	if grep -q "compute on CUDA device" "$W/$_n.gpu.log"; then
		ok "$_n: train says it computes on the GPU"
	else
		notok "$_n: no 'compute on CUDA device' line"
		show "$W/$_n.gpu.log"
	fi
	losses "$W/$_n.cpu.log" >"$W/$_n.cpu.loss"
	losses "$W/$_n.gpu.log" >"$W/$_n.gpu.loss"
	compare "$_n training" "$_r" "$W/$_n.cpu.loss" "$W/$_n.gpu.loss"
	vlosses "$W/$_n.cpu.log" >"$W/$_n.cpu.vloss"
	vlosses "$W/$_n.gpu.log" >"$W/$_n.gpu.vloss"
	compare "$_n validation" "$_r" "$W/$_n.cpu.vloss" "$W/$_n.gpu.vloss"
	if grep -q "GPU memory: .* allocations .*, 0 after it" "$W/$_n.gpu.log"; then
		ok "$_n: no device allocation after the first iteration"
	else
		notok "$_n: device allocations after the first iteration"
		grep "GPU memory" "$W/$_n.gpu.log" | sed 's/^/#   /'
	fi
	echo "# $_n ms/iteration: cpu $(sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' "$W/$_n.cpu.log" | tail -n 1), gpu $(sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' "$W/$_n.gpu.log" | tail -n 1)"
}

parity gpt2-fp32 1e-4 $GPTM $COMMON
parity llama-fp32 1e-4 $LLAMA $COMMON
parity llama-docmask-fp32 1e-4 $LLAMA $COMMON --reset-attention-mask --reset-position-ids --eod-mask-loss
parity gpt2-recompute-fp32 1e-4 $GPTM $COMMON --recompute-granularity full --recompute-method uniform \
	--recompute-num-layers 1
MOE="$LLAMA --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 0.01"
MOE="$MOE --moe-z-loss-coeff 0.001 --moe-shared-expert-intermediate-size 32 --moe-expert-capacity-factor 1.5"
parity moe-fp32 1e-4 $MOE $COMMON
parity gpt2-bf16 2e-2 $GPTM $COMMON --bf16
parity llama-bf16 2e-2 $LLAMA $COMMON --bf16
# head dims 64 and 128 without dropout: the bf16 table's tensor-core attention (attn_tc.cuh)
TC="--attention-dropout 0 --hidden-dropout 0"
parity gpt2-bf16-tc-attn 2e-2 --num-layers 2 --hidden-size 128 --num-attention-heads 2 $TC $COMMON --bf16
parity llama-bf16-tc-attn 2e-2 $(echo "$LLAMA" | sed 's/--hidden-size 64 --num-attention-heads 4/--hidden-size 256 --num-attention-heads 2/;
	s/--num-query-groups 2/--num-query-groups 1/') $TC $COMMON --bf16
# FP8 (docs/fp8.md): tensorwise and delayed on cuBLASLt's FP8 matmul, mxfp8 dequantized
parity llama-fp8-tensorwise 2e-2 $LLAMA $COMMON --bf16 --fp8-format hybrid --fp8-recipe tensorwise
parity llama-fp8-delayed 2e-2 $LLAMA $COMMON --bf16 --fp8-format hybrid --fp8-recipe delayed \
	--fp8-amax-history-len 16 --fp8-amax-compute-algo max
parity llama-fp8-mxfp8 2e-2 $LLAMA $COMMON --bf16 --fp8-format e4m3 --fp8-recipe mxfp8

if [ -n "${GPU_ONLY:-}" ]; then
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
	exit
fi

# resume on the GPU: bit for bit
R="$LLAMA $COMMON --train-iters 10 --eval-interval 100"
if run straight gpu "$DEV" $R --save "$W/ck-a" --save-interval 5 && run half1 gpu "$DEV" $R --save "$W/ck-b" --save-interval 5 \
	--exit-interval 5 && run half2 gpu "$DEV" $R --load "$W/ck-b" --save "$W/ck-b" --save-interval 5; then
	losses "$W/straight.gpu.log" | sed -n '6,$p' >"$W/s.loss"
	losses "$W/half2.gpu.log" >"$W/r.loss"
	if [ -s "$W/s.loss" ] && cmp -s "$W/s.loss" "$W/r.loss"; then
		ok "resume on the GPU: iterations 6-10 print the straight run's losses bit for bit"
	else
		notok "resume on the GPU is not bit-exact"
		paste "$W/s.loss" "$W/r.loss" | head -n 5 | sed 's/^/#   /'
	fi
fi

# for the record: a GPT-2 124M-shaped model on one GPU (not a benchmark: a
# first reading for docs/perf.md; tests/gpu/bench.sh is that)
BIG="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024"
BIG="$BIG --micro-batch-size 4 --global-batch-size 8 --lr 1e-4 --train-iters 6 --log-interval 1 --log-throughput"
BIG="$BIG --data-path $W/kjv_text_document --split 100,0,0 --eval-interval 1000 --eval-iters 0"
BIG="$BIG --data-cache-path $W/cache $GPT2"
for prec in $([ "$DEV" = cpu ] || echo fp32 bf16 fp8); do
	flag=
	[ $prec = bf16 ] && flag=--bf16
	[ $prec = fp8 ] && flag="--bf16 --fp8-format hybrid --fp8-recipe tensorwise"
	if run gpt2-124m-$prec gpu "$DEV" $BIG $flag; then
		ms=$(sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' "$W/gpt2-124m-$prec.gpu.log" | tail -n 1)
		tf=$(sed -n 's/.*throughput per GPU (TFLOP\/s\/GPU): \([0-9.]*\).*/\1/p' "$W/gpt2-124m-$prec.gpu.log" | tail -n 1)
		ok "GPT-2 124M shape, $prec, micro-batch 4 x 1024, 2 micro-batches: $ms ms/iteration, ${tf:-?} TFLOP/s"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
