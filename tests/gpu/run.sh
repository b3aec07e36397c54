#!/bin/sh
# run.sh - on the device machine (carry bin and build, see README.md): the
# CPU-vs-CUDA op table parity test first (build/gpu/parity, 'make gpu-tests'),
# then what our programs find there, the unit and training tests, and the CPU
# training benchmark on its cores. Results under $OUT.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/build/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_MCA_mpi_yield_when_idle=1
# parity.txt: TAP lines and "N passed, M failed"; parity_timings.txt: ms per op on both tables
if [ -x build/gpu/parity ]; then
	# MEGAC_CUDA_SYNC=1: a kernel that faults is named by the check after it
	MEGAC_CUDA_SYNC=1 timeout 300 build/gpu/parity >"$OUT/parity.txt" 2>"$OUT/parity_timings.txt"
	rc=$?
	echo "parity: exit $rc, $(tail -n 1 "$OUT/parity.txt")" | tee "$OUT/parity_summary.txt"
	grep -A1 '^not ok' "$OUT/parity.txt" | head -n 60
else
	echo "parity: build/gpu/parity missing (build it here with 'make gpu-tests')" | tee "$OUT/parity_summary.txt"
fi
{
	nvidia-smi -L 2>&1
	nproc
	grep -m1 'model name' /proc/cpuinfo
	for f in bin/*; do echo "== ldd $f"; ldd "$f" | grep -i 'not found'; done
} >"$OUT/machine.txt" 2>&1
for t in build/tests/test_*; do
	OPENBLAS_NUM_THREADS=1 timeout 300 "$t" >"$OUT/$(basename "$t").log" 2>&1
	echo "$(basename "$t"): exit $? $(grep -c '^ok' "$OUT/$(basename "$t").log") ok $(grep -c '^not ok' "$OUT/$(basename "$t").log") not ok"
done | tee "$OUT/unit.txt"
mkdir -p build/tmp
MEGAC_BIN=$PWD/bin MEGAC_BUILD=$PWD/build timeout 300 sh tests/prog/train_reference.sh >"$OUT/train_reference.log" 2>&1
grep -c '^ok' "$OUT/train_reference.log" | sed 's/^/train_reference ok: /' | tee -a "$OUT/unit.txt"
for th in 1 4 16; do
	SKIP_BUILD=1 THREADS=$th timeout 200 sh tests/bench/train_bench.sh >"$OUT/train_bench_$th.txt" 2>&1
done
cat "$OUT"/train_bench_*.txt
