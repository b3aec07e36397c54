#!/bin/sh
# run.sh - runs every test and prints the totals: the C unit tests built into
# $MEGAC_TESTS and the program-level shell tests tests/prog/*.sh. Each test
# prints "ok - name" / "not ok - name" lines; a test program that exits
# non-zero without a "not ok" line (a crash, a timeout) counts as one failure.
# Logs go to $MEGAC_BUILD/test-logs/; a failed test's temporary folders stay
# in $MEGAC_BUILD/tmp/ for a look. Set TESTS="pattern" to run a subset.
set -u
cd "$(dirname "$0")/.."
: "${MEGAC_BIN:?}" "${MEGAC_TESTS:?}" "${MEGAC_BUILD:?}"
export MEGAC_BIN MEGAC_TESTS MEGAC_BUILD
export OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1
logs="$MEGAC_BUILD/test-logs"
# One run per build folder: a second would delete the first's logs and
# temporary folders (its clusters' state, its checkpoints) under it.
mkdir -p "$MEGAC_BUILD"
exec 9>"$MEGAC_BUILD/.test-run.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
	echo "not ok - another test run is using $MEGAC_BUILD; wait for it, or build elsewhere (make BUILD=... BIN=...)"
	exit 1
fi
rm -rf "$logs" "$MEGAC_BUILD/tmp"
mkdir -p "$logs" "$MEGAC_BUILD/tmp"

pass=0
fail=0
pattern="${TESTS:-}"
start=$(date +%s)

run_one() { # name command...
	name=$1
	shift
	case "$name" in *"$pattern"*) ;; *) return ;; esac
	log="$logs/$name.log"
	t0=$(date +%s)
	timeout 900 "$@" >"$log" 2>&1 9>&- # the lock stays with this script, not its tests
	rc=$?
	t1=$(date +%s)
	ok=$(grep -c '^ok ' "$log")
	bad=$(grep -c '^not ok ' "$log")
	if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
		bad=1
		echo "not ok - $name exited with status $rc" >>"$log"
	fi
	pass=$((pass + ok))
	fail=$((fail + bad))
	if [ "$bad" -eq 0 ]; then
		# A passing test's folders go at once: a whole run would
		# otherwise hold several GB of checkpoints until the end.
		rm -rf "$MEGAC_BUILD/tmp/$name".*
		printf 'PASS %-28s %3d ok  %3ds\n' "$name" "$ok" $((t1 - t0))
	else
		printf 'FAIL %-28s %3d ok, %d failed  (log: %s)\n' "$name" "$ok" "$bad" "$log"
		grep -B3 '^not ok ' "$log" | tail -n 40 | sed 's/^/    /'
	fi
}

for t in "$MEGAC_TESTS"/*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	case "$t" in *.d) continue ;; esac
	run_one "$(basename "$t")" "$t"
done
for t in tests/prog/*.sh; do
	[ -f "$t" ] || continue
	run_one "$(basename "$t" .sh)" sh "$t"
done

echo "tests took $(( $(date +%s) - start ))s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
