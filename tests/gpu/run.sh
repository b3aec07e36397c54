#!/bin/sh
# run.sh - everything the GPU machine checks, in one command under ten
# minutes (the GPU kit of tests/gpu/pack.sh copied beside the checkout, see
# README.md), most important first, each step with its own time limit and
# skipped when the time is short; results under $OUT, a line per step in
# $OUT/summary.txt, the rest in $OUT/logs.tar.gz (a few files to bring back):
#   1. parity: every op of the CUDA table against the CPU one (gpu/parity)
#   2. nccl: lib/dist's device-buffer collectives through NCCL (gpu/nccl)
#   3. train: tiny GPT and Llama runs on the GPU against the CPU, bf16,
#      resume, allocations, a 124M-shaped reading (tests/gpu/train_parity.sh)
#   4. the training reference test against PyTorch, now on the GPU, with the
#      python3 that has torch (MEGAC_PYTHON, from env.sh)
#   5. compute-sanitizer racecheck and memcheck of the attention kernels,
#      where the machine's runtime lets it run (Firecracker, not gVisor)
#   6. the unit tests on that machine
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
machine_info >"$OUT/machine.txt" 2>&1
grep 'not found\|WARNING' "$OUT/machine.txt"

# 1. op parity; MEGAC_CUDA_SYNC=1: a kernel that faults is named by the check after it
if [ -x "$MEGAC_GPU/parity" ]; then
	MEGAC_CUDA_SYNC=1 timeout 200 "$MEGAC_GPU/parity" >"$OUT/parity.txt" 2>"$OUT/parity_timings.txt"
	say "parity: exit $?, $(tail -n 1 "$OUT/parity.txt") ($(elapsed) s)"
	grep -A2 '^not ok' "$OUT/parity.txt" | head -n 60
else
	say "parity: no gpu/parity (pack the kit: sh tests/gpu/pack.sh)"
fi

# 2. NCCL, one-rank communicators (several ranks where the machine has GPUs and mpirun)
if [ -x "$MEGAC_GPU/nccl" ]; then
	timeout 60 "$MEGAC_GPU/nccl" >"$OUT/nccl.txt" 2>&1
	say "nccl: exit $?, $(tail -n 1 "$OUT/nccl.txt") ($(elapsed) s)"
	grep -A1 '^not ok' "$OUT/nccl.txt" | head -n 40
fi

# 3. training on the GPU against the CPU
OPENBLAS_NUM_THREADS=8 OMP_NUM_THREADS=8 timeout 200 sh tests/gpu/train_parity.sh build/tmp/gpu-train \
	>"$OUT/train_parity.txt" 2>&1
say "train_parity: exit $?, $(tail -n 1 "$OUT/train_parity.txt") ($(elapsed) s)"
grep -A3 '^not ok' "$OUT/train_parity.txt" | head -n 40
grep '^#.*ms/iteration\|GPT-2 124M' "$OUT/train_parity.txt"
cp build/tmp/gpu-train/*.log "$OUT/" 2>/dev/null

# 4. the PyTorch reference test, on the GPU now (train's --device auto)
if [ "$(elapsed)" -lt 420 ]; then
	MEGAC_BUILD=$PWD/build timeout 60 sh tests/prog/train_reference.sh >"$OUT/train_reference.log" 2>&1
	say "train_reference: exit $?, $(grep -c '^ok' "$OUT/train_reference.log") ok," \
		"$(grep -c '^not ok' "$OUT/train_reference.log") not ok ($(elapsed) s)"
fi

# 5. races and out-of-bounds accesses in the attention kernels (the wrapper
# execs the program in the same process, which the sanitizer follows)
if command -v compute-sanitizer >/dev/null && [ -x "$MEGAC_GPU/parity" ] && [ "$(elapsed)" -lt 450 ]; then
	for tool in racecheck memcheck; do
		timeout 50 compute-sanitizer --tool $tool --target-processes all --print-limit 20 \
			"$MEGAC_GPU/parity" --no-big --only attention >"$OUT/sanitizer_$tool.txt" 2>&1
		say "compute-sanitizer $tool: exit $?, $(grep -m1 'ERROR SUMMARY' "$OUT/sanitizer_$tool.txt") ($(elapsed) s)"
	done
fi

# 6. the unit tests on that machine (the kit's tests/)
if [ "$(elapsed)" -lt 470 ]; then
	for t in "$MEGAC_TESTS"/test_*; do
		[ -x "$t" ] || continue
		[ "$(elapsed)" -lt 560 ] || break
		MEGAC_BUILD=$PWD/build OPENBLAS_NUM_THREADS=1 timeout 10 "$t" >"$OUT/$(basename "$t").log" 2>&1
		echo "$(basename "$t"): exit $? $(grep -c '^ok' "$OUT/$(basename "$t").log") ok" \
			"$(grep -c '^not ok' "$OUT/$(basename "$t").log") not ok"
	done >"$OUT/unit.txt"
	say "unit: $(grep -c 'exit 0' "$OUT/unit.txt") of $(wc -l <"$OUT/unit.txt") programs exit 0 ($(elapsed) s)"
fi
cat "$OUT/summary.txt"
