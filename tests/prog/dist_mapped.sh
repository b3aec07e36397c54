# dist_mapped.sh - dist_iallgather_range_mapped over MPI ranks: the unit
# test test_dist_mapped under mpirun with 2 and 3 ranks, where every rank's
# buffer of mixed 1- and 2-byte elements (16-byte padding between tensors,
# shards not on the tensors' edges) must hold the owners' bytes of each
# gathered range and nothing else changed, with the byte counter as
# documented; under MEGAC_LONG=1 also a range of more than DIST_PIECE
# elements, which goes in pieces.
. tests/prog_lib.sh
W=$(new_tmp dist_mapped)
OUT_LOG=$W/out.log
ERR=$W/err.log
TEST=${MEGAC_TESTS:?run through make test}/test_dist_mapped
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe"
# Under AddressSanitizer (make asan): OpenMPI's own allocations at exit are not ours.
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi

want=2
if long_only; then want=3; fi
for np in 2 3; do
	expect_ok "$np ranks: test_dist_mapped under mpirun -np $np" $MPI -np $np "$TEST"
	cp "$OUT_LOG" "$W/np$np.log"
	good=$(grep -c '^ok ' "$W/np$np.log")
	bad=$(grep -c '^not ok ' "$W/np$np.log")
	if [ "$bad" -eq 0 ] && [ "$good" -eq "$want" ]; then
		ok "$np ranks: every gathered byte from its owner, nothing else touched, bytes counted as documented"
	else
		notok "$np ranks: $good of $want checks ok, $bad failed"
		grep '^not ok\|^#' "$W/np$np.log" | head -n 40 | sed 's/^/#   /'
	fi
done
