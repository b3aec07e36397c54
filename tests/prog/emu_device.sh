# emu_device.sh - the emulated CUDA device (make emu, tests/emu/) checked on
# its own, then the whole op table on it: build/emu/gpu/check_standins runs
# the warp collectives, cuBLASLt and runtime checks against references and
# must report each failure a real machine would hang or crash on (a host
# pointer given to a kernel, copies and GEMMs past an allocation, a barrier
# not every thread reaches, __trap, the ring pattern on fresh NCCL channels,
# communicators destroyed in different orders, cudaSetDevice after MPI_Init,
# a kernel's first launch while an NCCL receive waits); then lib/dist's
# NCCL path (build/emu/gpu/nccl) on one rank and three, and
# build/emu/gpu/parity runs every op of the fp32, bf16 and fp16 tables
# against the CPU table, none missing, none untested.
. tests/prog_lib.sh
W=$(new_tmp emu_device)
OUT_LOG=$W/out.log
ERR=$W/err.log
E=${MEGAC_EMU:?run through make test (the emulated build)}
C=$E/gpu/check_standins
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe -x MEGAC_EMU_TIMEOUT=3 -x CUDA_MODULE_LOADING"
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi

# checks that print their own TAP lines
for m in warp cublaslt runtime; do
	"$C" $m >"$W/$m.txt" 2>"$W/$m.err"
	rc=$?
	cat "$W/$m.txt"
	[ $rc -eq 0 ] || notok "check_standins $m exited $rc"
done
for a in "nccl pre" "destroy same"; do
	$MPI -np 2 "$C" $a >"$W/mpi.txt" 2>"$W/mpi.err"
	rc=$?
	if [ $rc -eq 0 ] && [ "$(grep -c '^ok' "$W/mpi.txt")" -ge 2 ] && ! grep -q '^not ok' "$W/mpi.txt"; then
		ok "2 ranks, check_standins $a: $(grep '^ok' "$W/mpi.txt" | sort -u | sed 's/^ok - //' | tr '\n' ';')"
	else
		notok "2 ranks, check_standins $a (exit $rc)"
		show "$W/mpi.err"
	fi
done
CUDA_MODULE_LOADING=EAGER $MPI -np 2 "$C" lazy >"$W/mpi.txt" 2>"$W/mpi.err" &&
	ok "2 ranks: with CUDA_MODULE_LOADING=EAGER a kernel's first launch during an NCCL receive is fine" ||
	{ notok "lazy loading check with EAGER"; show "$W/mpi.err"; }

# must_die NAME TEXT CMD...: the emulator stops it with TEXT in its report
must_die() {
	_n=$1
	_t=$2
	shift 2
	"$@" >"$W/die.txt" 2>"$W/die.err"
	_rc=$?
	if [ $_rc -ne 0 ] && grep -qF -- "$_t" "$W/die.err"; then
		ok "$_n"
	else
		notok "$_n (exit $_rc, wanted a failure saying '$_t')"
		show "$W/die.err"
	fi
}
must_die "a host pointer given to a kernel is named" "argument 0 (" "$C" host-pointer
must_die "a copy 4 bytes past an allocation is named" "runs 4 bytes past the end of its device allocation" "$C" oob-copy
must_die "a GEMM reading past its B matrix is named" "matrix B, 256 bytes" "$C" oob-gemm
must_die "a barrier half the block never reaches is a deadlock" "32 at __syncthreads" "$C" divergent-barrier
must_die "__trap names the kernel and thread" "kernel trap_kernel, block (0,0,0): thread (3,0,0) trapped" "$C" trap
must_die "2 ranks: every rank receiving first on fresh channels deadlocks (NCCL connects at first use)" \
	"is the first on that channel, so NCCL connects it" $MPI -np 2 "$C" nccl
must_die "2 ranks: communicators destroyed in different orders deadlock" \
	"ranks that destroy their communicators in different orders" $MPI -np 2 "$C" destroy
must_die "2 ranks: cudaSetDevice(1) after MPI_Init is refused (CUDA-aware MPI)" "cudaSetDevice(1) after MPI_Init" \
	$MPI -np 2 "$C" late-device
CUDA_MODULE_LOADING=LAZY must_die "2 ranks: lazy loading of a kernel while an NCCL receive waits is refused" \
	"is launched for the first time" $MPI -np 2 "$C" lazy

# lib/dist's NCCL path (tests/gpu/nccl.c) on one rank and on three
for np in 1 3; do
	if [ $np -eq 1 ]; then
		"$E/gpu/nccl" --no-big >"$W/nccl.txt" 2>&1
	else
		$MPI -np $np "$E/gpu/nccl" >"$W/nccl.txt" 2>&1
	fi
	rc=$?
	if [ $rc -eq 0 ] && grep -q '^[0-9]* passed, 0 failed$' "$W/nccl.txt" && ! grep -q 'SKIP' "$W/nccl.txt"; then
		ok "lib/dist on NCCL, $np rank(s), emulated: $(tail -n 1 "$W/nccl.txt")"
	else
		notok "lib/dist on NCCL, $np rank(s), emulated (exit $rc)"
		grep '^not ok\|emu:' "$W/nccl.txt" | head -n 5 | sed 's/^/#   /'
	fi
done

# every op of every table on the emulated device, in the default thread
# schedule and in the other extreme (warps and lanes last to first,
# cp.async and wgmma landing at their wait: emu.h)
orders=0
long_only && orders="0 3" # the second schedule under make check-long
for order in $orders; do
	MEGAC_EMU_ORDER=$order "$E/gpu/parity" --no-big --reps 1 >"$W/parity.txt" 2>"$W/parity.err"
	rc=$?
	passed=$(sed -n 's/^\([0-9]*\) passed, 0 failed$/\1/p' "$W/parity.txt")
	if [ $rc -eq 0 ] && [ "${passed:-0}" -ge 150 ] &&
		grep -q '^ok - coverage: every op of the cuda, bf16 and fp16' "$W/parity.txt"; then
		ok "parity on the emulated device, thread order $order: $passed cases pass; $(grep '^ok - coverage' "$W/parity.txt" | sed 's/^ok - //')"
	else
		notok "parity on the emulated device, thread order $order (exit $rc)"
		grep -A1 '^not ok' "$W/parity.txt" | head -n 20 | sed 's/^/#   /'
		show "$W/parity.err"
	fi
done

# fp8_gemm of per-tensor-scaled, aligned operands must have run on the
# cuBLASLt stand-in's FP8 matmul (which refuses what cuBLASLt refuses: a
# layout but "TN", E5M2 x E5M2), not on the fallback that would hide it
lt=$(grep -c '^#   fp8_gemm path: cuBLASLt FP8 (cuBLASLt FP8 wanted)$' "$W/parity.txt")
if [ "$lt" -eq 4 ] && ! grep -q '^#   fp8_gemm path: dequantized (cuBLASLt FP8 wanted)' "$W/parity.txt"; then
	ok "fp8_gemm on the emulated device: the 4 per-tensor cases ran on cuBLASLt's FP8 matmul"
else
	notok "fp8_gemm on the emulated device: $lt of 4 per-tensor cases on cuBLASLt's FP8 matmul"
	grep 'FP8 algorithm\|emu: cuBLASLt' "$W/parity.err" | head -n 5 | sed 's/^/#   /'
fi

# the half tables' GEMMs in pieces (lib/kernels/cuda/gemm.cu): a 4 KiB
# limit splits these shapes' converted activations into 2 to 11 pieces
# (rows of the input forward, columns of dout backward)
MEGAC_CUDA_GEMM_PIECE=4096 "$E/gpu/parity" --no-big --reps 1 --only linear >"$W/piece.txt" 2>"$W/piece.err"
rc=$?
passed=$(sed -n 's/^\([0-9]*\) passed, 0 failed$/\1/p' "$W/piece.txt")
if [ $rc -eq 0 ] && [ "${passed:-0}" -ge 40 ]; then
	ok "linear layers in pieces of 4 KiB on the emulated device: $passed cases pass"
else
	notok "linear layers in pieces of 4 KiB on the emulated device (exit $rc)"
	grep -A1 '^not ok' "$W/piece.txt" | head -n 20 | sed 's/^/#   /'
	show "$W/piece.err"
fi
