# ring_attn.sh - context-parallel ring attention over MPI ranks: the unit
# test test_ring_attn run under mpirun with 2 and 4 ranks (cp = world), where
# every rank's out, dq, dk and dv must equal its rows of the one-rank
# attention (with and without dropout and a sliding window) and the cp group's byte counter the
# volume ring_attn.h documents.
. tests/prog_lib.sh
W=$(new_tmp ring_attn)
OUT_LOG=$W/out.log
ERR=$W/err.log
TEST=${MEGAC_TESTS:?run through make test}/test_ring_attn
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe"
# Under AddressSanitizer (make asan): OpenMPI's own allocations at exit are not ours.
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi

for np in 2 4; do
	expect_ok "cp $np: test_ring_attn under mpirun -np $np" $MPI -np $np "$TEST"
	cp "$OUT_LOG" "$W/cp$np.log"
	# 9 cases on each rank (three with a sliding window, three with document masks), plus rank 0's line
	want=$((9 * np + 1))
	good=$(grep -c '^ok ' "$W/cp$np.log")
	bad=$(grep -c '^not ok ' "$W/cp$np.log")
	if [ "$bad" -eq 0 ] && [ "$good" -eq "$want" ]; then
		ok "cp $np: every rank's out, dq, dk, dv equal its rows of the one-rank attention; bytes as documented"
	else
		notok "cp $np: $good of $want checks ok, $bad failed"
		grep '^not ok\|^#' "$W/cp$np.log" | head -n 40 | sed 's/^/#   /'
	fi
done
