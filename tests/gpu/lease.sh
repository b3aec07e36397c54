#!/bin/sh
# lease.sh - issue 11's device call: the speed measurement in one command
# that fits a lease (about nine minutes; carry bin and build after pack.sh,
# as run.sh), results under $OUT, a summary in $OUT/summary.txt:
#   1. the attention ops against the CPU first (build/gpu/parity --only
#      attention: the fp32 kernels and the tensor-core ones of the bf16/fp16
#      tables, the forward on wgmma and again on mma.sync), so no speed is
#      reported for kernels that compute wrong;
#   2. tests/gpu/bench.sh: the GPT-2 and Llama-3 shapes' tokens/s, TFLOP/s,
#      MFU and memory, the attention micro-benchmark, and PyTorch on the same
#      shapes as time allows;
#   3. with time left, the bf16 training parity cases (tests/gpu/train_parity.sh).
# run.sh remains the whole correctness pass (issue 8's): a second call.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" build/tmp
START=$(date +%s)
. tests/gpu/env.sh
machine_info >"$OUT/machine.txt" 2>&1
head -n 3 "$OUT/machine.txt" | tail -n 2

if [ -x build/gpu/parity ]; then
	MEGAC_CUDA_SYNC=1 timeout 100 build/gpu/parity --no-big --only attention >"$OUT/parity_attention.txt" \
		2>"$OUT/parity_attention_timings.txt"
	say "parity --only attention: exit $?, $(tail -n 1 "$OUT/parity_attention.txt") ($(elapsed) s)"
	grep -A2 '^not ok' "$OUT/parity_attention.txt" | head -n 30
	# the same with the forward on mma.sync instead of wgmma (attn_tc.cu)
	MEGAC_TC_WGMMA=0 MEGAC_CUDA_SYNC=1 timeout 60 build/gpu/parity --no-big --only attention_block \
		>"$OUT/parity_attention_mma.txt" 2>/dev/null
	say "parity --only attention_block, MEGAC_TC_WGMMA=0: exit $?, $(tail -n 1 "$OUT/parity_attention_mma.txt") ($(elapsed) s)"
	grep -A2 '^not ok' "$OUT/parity_attention_mma.txt" | head -n 20
fi

BENCH_BUDGET=$((330 - $(elapsed))) timeout $((530 - $(elapsed))) sh tests/gpu/bench.sh >"$OUT/bench.log" 2>&1
say "bench: exit $? ($(elapsed) s)"

if [ "$(elapsed)" -lt 450 ]; then
	OPENBLAS_NUM_THREADS=8 OMP_NUM_THREADS=8 GPU_ONLY=bf16 timeout $((560 - $(elapsed))) \
		sh tests/gpu/train_parity.sh build/tmp/gpu-train >"$OUT/train_parity_bf16.txt" 2>&1
	say "train_parity (bf16 cases): exit $?, $(tail -n 1 "$OUT/train_parity_bf16.txt") ($(elapsed) s)"
	grep -A3 '^not ok' "$OUT/train_parity_bf16.txt" | head -n 20
fi
echo "== bench.txt"
cat "$OUT/bench.txt"
