#!/bin/sh
# measure.sh - the speed measurement on a GPU machine, in one command of
# under ten minutes. On the build machine first: `sh tests/gpu/pack.sh` (the
# kit, copied to the GPU machine beside the checkout as the path it prints);
# there: `sh tests/gpu/measure.sh`. Stages, each under its own `timeout`, the
# limits adding up to 520 s (at most 540; the kit's unpacking and
# nvidia-smi add a few seconds: allow 600 s in all):
#   0. the kit loads (20 s): train --help through its wrapper, so a missing
#      library is named at once instead of failing every stage after it;
#   1. parity first (60 + 40 s): the attention ops against the CPU
#      (gpu/parity --no-big --only attention: the fp32 kernels and the
#      tensor-core ones of the bf16/fp16 tables, the forward on wgmma), then
#      the block attention again with the forward on mma.sync, so no speed is
#      reported for kernels that compute wrong;
#   2. training steps (150 s): the bf16 training parity cases of
#      tests/gpu/train_parity.sh, GPU against CPU (the fp32 ones wait for the
#      fp32 GEMMs on the GPU);
#   3. the benchmarks (250 s): tests/gpu/bench.sh, the attention
#      micro-benchmark first, then the GPT-2 and Llama-3 shapes' tokens/s,
#      TFLOP/s, MFU and memory, PyTorch on the same shapes, the op profiles,
#      as its budget allows (models start until 150 s into it; every step's
#      limit is cut to end by 245 s).
# Results under $OUT (default /tmp/gpu-out): summary.txt (a line per stage),
# bench.txt, machine.txt, and everything else in logs.tar.gz, so that four
# files bring everything back. run.sh remains the whole correctness pass: a
# second command.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" build/tmp
START=$(date +%s)
. tests/gpu/env.sh || exit 1
trap bundle_out EXIT
if [ ! -x "$MEGAC_BIN/train" ]; then
	say "no programs: no kit at $MEGAC_KIT/kit.tar.xz (run sh tests/gpu/pack.sh on the build machine, and copy the path it prints here) and no bin/train"
	exit 1
fi
# status RC LIMIT: how a stage ended
status() { if [ "$1" -eq 124 ]; then echo "stopped at its $2 s limit"; else echo "exit $1"; fi; }

machine_info >"$OUT/machine.txt" 2>&1
sed -n '2,3p' "$OUT/machine.txt"
grep 'not found\|WARNING' "$OUT/machine.txt"

# 0. the kit loads: every library found (a load failure is named here, once)
timeout 20 "$MEGAC_BIN/train" --help >/dev/null 2>"$OUT/load.txt"
rc=$?
if [ $rc -ne 0 ]; then
	say "kit: train does not start ($(status $rc 20)): $(head -c 300 "$OUT/load.txt")"
	grep 'not found' "$OUT/machine.txt" | head -n 10 | tee -a "$OUT/summary.txt"
	exit 1
fi
say "kit: the programs load ($(elapsed) s)"

# 1. the attention ops against the CPU
MEGAC_CUDA_SYNC=1 timeout 60 "$MEGAC_GPU/parity" --no-big --only attention >"$OUT/parity_attention.txt" \
	2>"$OUT/parity_attention_timings.txt"
say "parity --only attention: $(status $? 60), $(tail -n 1 "$OUT/parity_attention.txt") ($(elapsed) s)"
grep -A2 '^not ok' "$OUT/parity_attention.txt" | head -n 30
# the same with the forward on mma.sync instead of wgmma (attn_tc.cu)
MEGAC_TC_WGMMA=0 MEGAC_CUDA_SYNC=1 timeout 40 "$MEGAC_GPU/parity" --no-big --only attention_block \
	>"$OUT/parity_attention_mma.txt" 2>/dev/null
say "parity --only attention_block, MEGAC_TC_WGMMA=0: $(status $? 40), $(tail -n 1 "$OUT/parity_attention_mma.txt") ($(elapsed) s)"
grep -A2 '^not ok' "$OUT/parity_attention_mma.txt" | head -n 20

# 2. training steps on the GPU against the CPU, bf16
OPENBLAS_NUM_THREADS=8 OMP_NUM_THREADS=8 GPU_ONLY=bf16 timeout 150 \
	sh tests/gpu/train_parity.sh build/tmp/gpu-train >"$OUT/train_parity_bf16.txt" 2>&1
say "train_parity (bf16 cases): $(status $? 150), $(tail -n 1 "$OUT/train_parity_bf16.txt") ($(elapsed) s)"
grep -A3 '^not ok' "$OUT/train_parity_bf16.txt" | head -n 20
cp build/tmp/gpu-train/*.log "$OUT/" 2>/dev/null

# 3. the benchmarks
BENCH_BUDGET=150 BENCH_DEADLINE=245 timeout 250 sh tests/gpu/bench.sh >"$OUT/bench.log" 2>&1
say "bench: $(status $? 250) ($(elapsed) s)"
echo "== bench.txt"
cat "$OUT/bench.txt"
