# gpu_harness.sh - the GPU test programs' own checks, on a machine without a
# GPU (where they are built but their real runs wait for the GPU machine):
# the op parity harness compares the CPU table with a CPU table carrying
# planted faults (which it must catch) and, under make check-long, with
# itself (every case valid, every error 0); the NCCL test skips cleanly without a GPU. Skipped when the build
# has no CUDA (CUDA=0: the programs do not exist).
. tests/prog_lib.sh
W=$(new_tmp gpu_harness)
OUT_LOG=$W/out.log
ERR=$W/err.log
P=${MEGAC_BUILD:?}/gpu/parity
N=${MEGAC_BUILD:?}/gpu/nccl
if [ ! -x "$P" ]; then
	ok "gpu harness # SKIP no CUDA in this build"
	exit 0
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# (CPU against CPU under make check-long: emu_device.sh runs every case
# through this harness against the emulated device in make test, and the
# planted faults below show that it fails what it must)
if long_only; then
	"$P" --self --no-big >"$W/self.txt" 2>"$W/self.err"
	rc=$?
	passed=$(sed -n 's/^\([0-9]*\) passed, 0 failed$/\1/p' "$W/self.txt")
	if [ $rc -eq 0 ] && [ "${passed:-0}" -ge 150 ] && ! grep -q '^not ok' "$W/self.txt"; then
		ok "parity --self: all $passed op cases pass with CPU against CPU (every case valid)"
	else
		notok "parity --self (exit $rc)"
		grep '^not ok' "$W/self.txt" | head -n 10 | sed 's/^/#   /'
	fi
fi

# each planted fault (parity.c's perturbed table) must fail its op's cases
"$P" --perturb --no-big >"$W/perturb.txt" 2>/dev/null
rc=$?
missed=
for op in linear_forward dropout_add_forward adamw nonfinite; do
	grep -q "^not ok - $op " "$W/perturb.txt" || missed="$missed $op"
done
grep -q "^not ok - gelu_forward: the cpu-perturbed table has no such op" "$W/perturb.txt" ||
	missed="$missed gelu_forward(absent)"
grep -q "^not ok - coverage: .*never run: cpu-perturbed:gelu_forward(NULL)" "$W/perturb.txt" ||
	missed="$missed coverage(gelu_forward)"
if [ $rc -eq 1 ] && [ -z "$missed" ]; then
	ok "parity --perturb: every planted fault is caught ($(grep -c '^not ok' "$W/perturb.txt") failing cases)"
else
	notok "parity --perturb (exit $rc) missed:$missed"
fi

expect_ok "nccl test without a GPU" "$N"
if grep -q '^1\.\.0 # SKIP' "$OUT_LOG"; then
	ok "nccl test skips without a GPU"
else
	notok "nccl test output"
	show "$OUT_LOG"
fi
