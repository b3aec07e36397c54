# lib.sh - helpers for the program-level tests (sourced, POSIX sh).
# Each check prints "ok - name" or "not ok - name" plus "#" lines saying why.
set -u
BIN=${MEGAC_BIN:?run through make test}
FIX=tests/fixtures
GPT2_VOCAB=examples/tokenizers/gpt2/gpt2-vocab.json
GPT2_MERGES=examples/tokenizers/gpt2/gpt2-merges.txt
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file $GPT2_VOCAB --merge-file $GPT2_MERGES"

ok() { echo "ok - $*"; }
notok() { echo "not ok - $*"; }

# new_tmp TAG: a fresh directory under the build tree
# (the parent is made first: an empty W would send a test's files to /)
new_tmp() { mkdir -p "${MEGAC_BUILD:?}/tmp" && mktemp -d "$MEGAC_BUILD/tmp/$1.XXXXXX"; }

# show FILE: the last lines of a log, indented as harness comments
show() { tail -n "${2:-8}" "$1" | sed 's/^/#   /'; }

# expect_ok NAME CMD...: the command succeeds (its stderr lands in $ERR)
expect_ok() {
	_n=$1
	shift
	if "$@" >"$OUT_LOG" 2>"$ERR"; then ok "$_n"; else notok "$_n (exit $?)"; show "$ERR"; fi
}

# setup NAME CMD...: a preparation step (building a dataset, a checkpoint, ...)
# that the checks after it need, not a check itself: silent when the command
# succeeds, so it does not add to the "ok" count; when it fails, a "not ok"
# line with its stderr, and the test script stops (exit 1), since every check
# after it would fail for the same reason. Its stdout and stderr land in
# $OUT_LOG and $ERR, as with expect_ok.
setup() {
	_n=$1
	shift
	"$@" >"$OUT_LOG" 2>"$ERR"
	_rc=$?
	[ "$_rc" -eq 0 ] && return 0
	notok "set-up step failed: $_n (exit $_rc); the checks after it were not run"
	show "$ERR"
	exit 1
}

# expect_fail NAME TEXT CMD...: exits 128 with TEXT in its stderr
expect_fail() {
	_n=$1
	_t=$2
	shift 2
	"$@" >"$OUT_LOG" 2>"$ERR"
	_rc=$?
	if [ "$_rc" -eq 128 ] && grep -qF -- "$_t" "$ERR"; then
		ok "$_n"
	else
		notok "$_n (exit $_rc, wanted 128 and '$_t')"
		show "$ERR"
	fi
}

# same_dataset NAME PREFIX_A PREFIX_B: byte-identical .bin and .idx
same_dataset() {
	if [ -f "$2.bin" ] && [ -f "$2.idx" ] && cmp -s "$2.bin" "$3.bin" && cmp -s "$2.idx" "$3.idx"; then
		ok "$1"
	else
		notok "$1"
		ls -l "$2".* "$3".* 2>&1 | sed 's/^/#   /'
	fi
}

# empty_dir NAME DIR: nothing was left behind in DIR
empty_dir() {
	if [ -z "$(ls -A "$2")" ]; then ok "$1"; else notok "$1: left behind: $(ls -A "$2" | tr '\n' ' ')"; fi
}

# free_port: a TCP port nobody listens on now (for a server under test)
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# hf_env LOG: the python of tests/py-env.sh's venv (transformers as a
# reference) in $HF, with an ok / not ok line; HF=false when it fails
hf_env() {
	if HF=$(sh tests/py-env.sh "$MEGAC_BUILD" 2>"$1" | tail -n 1) && [ -x "$HF" ]; then
		ok "the transformers reference environment"
	else
		notok "the transformers reference environment (tests/py-env.sh)"
		show "$1"
		HF=false
	fi
}

# compare_ref NAME OURS.jsonl REF.jsonl ITERS: our metrics file against the
# PyTorch reference's lines (tests/prog/py/compare_metrics.py ref); the
# caller's $W holds the comparison's output
compare_ref() {
	if /usr/bin/python3 tests/prog/py/compare_metrics.py ref "$2" "$3" "$4" >"$W/cmp.log" 2>&1; then
		ok "$1: $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}

# compare_same NAME A.jsonl B.jsonl ITERS: two of our runs' metrics files
# agree (tests/prog/py/compare_metrics.py same: lm loss, grad norm, lr and
# the evaluations; $PY runs it); the caller's $W holds the output
compare_same() {
	if $PY tests/prog/py/compare_metrics.py same "$2" "$3" "$4" >"$W/cmp.log" 2>&1; then
		ok "$1: $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}

# reference_ours ARGS... (with _ar_m, _ar_n set): the initial model
# (--train-iters 0 --save) and our run of ITERS iterations in $W/MODEL (D),
# for against_reference and reference_later
reference_ours() {
	D=$W/$_ar_m
	setup "$_ar_m: --train-iters 0 --save writes the initial model" \
		$BIN/train "$@" --train-iters 0 --save "$D/init" --data-cache-path "$D/cache"
	expect_ok "$_ar_m: $_ar_n iterations" sh -c "$BIN/train $* --train-iters $_ar_n --data-cache-path $D/cache \
		--metrics-file $D/ours.jsonl >$D/ours.log"
}

# against_reference MODEL ITERS ARGS...: train with ARGS in $W/MODEL (D is
# set to it; the run's output in $D/ours.log, its metrics in
# $D/ours.jsonl) from a saved initial model for ITERS iterations, and hold the
# metrics to tests/prog/py/torch_ref.py's ($PY) from the same model.h5 and
# index caches (compare_ref; RTOL as the caller exports it)
against_reference() {
	_ar_m=$1
	_ar_n=$2
	shift 2
	reference_ours "$@"
	setup "$_ar_m: the PyTorch reference from the same model.h5 and index caches" \
		sh -c "$PY tests/prog/py/torch_ref.py $* --train-iters $_ar_n --data-cache-path $D/cache \
		--ref-model $D/init/iter_0000000/model.h5 >$D/ref.jsonl"
	compare_ref "$_ar_m: lm loss, grad norm and learning rate match the reference (rtol 1e-5)" \
		"$D/ours.jsonl" "$D/ref.jsonl" "$_ar_n"
}

# reference_later MODEL ITERS ARGS...: against_reference with the PyTorch
# reference put off: the initial model and our run in $W/MODEL (D), and
# the reference's run queued for reference_batch, which runs every queued
# one in one torch_ref.py process (torch imported once, not once a model)
# and then compares each (rtol as RTOL is when this is called)
reference_later() {
	_ar_m=$1
	_ar_n=$2
	shift 2
	reference_ours "$@"
	reference_queue "$_ar_m" "$_ar_n" "$_ar_m: lm loss, grad norm and learning rate match the reference (rtol ${RTOL:-1e-5})" \
		"$* --data-cache-path $D/cache"
}

# reference_queue MODEL ITERS CHECK "FLAGS": queue torch_ref.py's training
# run of ITERS iterations with FLAGS (shell words: the run's flags, its
# --data-cache-path too) from $W/MODEL/init's model.h5 into
# $W/MODEL/ref.jsonl; reference_batch holds $W/MODEL/ours.jsonl to it
# (compare_ref, as check CHECK, with the RTOL of now)
reference_queue() {
	printf '%s --train-iters %s --ref-model %s --ref-out %s\n' "$4" "$2" "$W/$1/init/iter_0000000/model.h5" \
		"$W/$1/ref.jsonl" >>"$W/ref.queue"
	printf '%s|%s|%s|%s\n' "$1" "$2" "${RTOL:-}" "$3" >>"$W/ref.checks"
}

# reference_batch: the queued reference runs in one torch_ref.py process
# ($PY; a set-up step), then each compared with ours
reference_batch() {
	set --
	while IFS= read -r _rb_l; do set -- "$@" "$_rb_l"; done <"$W/ref.queue"
	setup "the PyTorch reference of $(cut -d'|' -f1 "$W/ref.checks" | tr '\n' ' ')from the same model.h5 and index caches" \
		$PY tests/prog/py/torch_ref.py batch "$@"
	while IFS='|' read -r _rb_m _rb_n _rb_rt _rb_c; do
		(
			if [ -n "$_rb_rt" ]; then export RTOL="$_rb_rt"; else unset RTOL; fi
			compare_ref "$_rb_c" "$W/$_rb_m/ours.jsonl" "$W/$_rb_m/ref.jsonl" "$_rb_n"
		)
	done <"$W/ref.checks"
	rm -f "$W/ref.queue" "$W/ref.checks"
}

# train_env_begin NAME: the set-up the multi-rank training tests share: W
# (a fresh temporary folder), OUT_LOG and ERR for expect_ok/expect_fail, PY,
# one BLAS/OpenMP thread per rank, MPI (an oversubscribing mpirun; Open MPI
# yields when idle), AddressSanitizer's leak check off under make asan (Open
# MPI's own allocations left at exit are not ours). train_test_begin NAME:
# that, and the bundled corpus preprocessed into $W/kjv_text_document (a
# set-up step: no check of its own).
train_env_begin() {
	W=$(new_tmp "$1")
	OUT_LOG=$W/out.log
	ERR=$W/err.log
	PY=/usr/bin/python3
	export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
	MPI="mpirun --allow-run-as-root --oversubscribe"
	if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
}
train_test_begin() {
	train_env_begin "$1"
	setup "preprocess the bundled corpus" $BIN/preprocess_data --input examples/data/kjv.jsonl.gz \
		--output-prefix "$W/kjv" $GPT2 --append-eod --workers 1 --log-interval 0
}

# long_only: true under make check-long (MEGAC_LONG=1), which runs the
# extended variants of some checks (more layouts, thread orders and
# precisions of what make test checks once) beside everything make test runs
long_only() { [ -n "${MEGAC_LONG:-}" ]; }

# prediction_close NAME REPORT.json TRAIN.log: report_memory's peak for rank 0
# (--json) within 5% of the first "max allocated" train printed
prediction_close() {
	_measured=$(grep -o "max allocated: [0-9.]*" "$3" | head -1 | cut -d' ' -f3)
	if /usr/bin/python3 - "$2" "$_measured" <<'EOF' >"$W/pred.txt" 2>&1; then
import json, sys
r = json.load(open(sys.argv[1]))["megac"]["ranks"][0]
pred, meas = r["peak_MB"], float(sys.argv[2])
assert abs(pred - meas) <= 0.05 * meas, (pred, meas)
print(f"predicted {pred:.2f} MB, measured {meas:.2f} MB")
EOF
		ok "$1: $(cat "$W/pred.txt")"
	else
		notok "$1"
		show "$W/pred.txt"
	fi
}

# logits_close NAME A.npy B.npy TOL: two logits arrays agree within TOL (and are
# not all near zero, which would tell nothing)
logits_close() {
	if /usr/bin/python3 -c '
import sys, numpy as np
a, b, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
assert a.shape == b.shape, (a.shape, b.shape)
d = float(np.abs(a.astype(np.float64) - b).max())
assert d <= tol, "max |difference| %.3g > %g" % (d, tol)
assert float(np.abs(a).max()) > 0.05, "logits too small to tell anything"
print("%s, max |difference| %.2g" % (list(a.shape), d))' "$2" "$3" "$4" >"$W/close.log" 2>&1; then
		ok "$1 ($(cat "$W/close.log"))"
	else
		notok "$1"
		show "$W/close.log"
	fi
}

# gen_same NAME REF.json GOT.json TOL: two files of greedy continuations
# (prompts' tokens and every log-prob; tests/prog/py/serve_ref.py same): the
# same tokens, log-probs within TOL; the caller's $W holds the output
gen_same() {
	if /usr/bin/python3 tests/prog/py/serve_ref.py same "$2" "$3" "$4" >"$W/same.log" 2>&1; then
		ok "$1 ($(cat "$W/same.log"))"
	else
		notok "$1"
		show "$W/same.log"
	fi
}

# serve_ask TAG NAME PROMPTS.json N OUT CMD...: start the server CMD --port 0
# (its output in $W/TAG.log), ask it for the greedy continuations of N
# tokens of PROMPTS (serve_ref.py ask) into OUT, stop it. $SRV is its pid
# meanwhile: serve_traps makes an interrupted test stop it.
serve_ask() {
	_tag=$1 _nm=$2 _pr=$3 _n=$4 _out=$5
	shift 5
	"$@" --port 0 >"$W/$_tag.log" 2>&1 &
	SRV=$!
	if /usr/bin/python3 tests/prog/py/serve_ref.py ask "$W/$_tag.log" $SRV "$_pr" "$_n" "$_out" --up 60 --timeout 120 \
		>"$W/ask.log" 2>&1; then
		ok "$_nm answers ($(cat "$W/ask.log"))"
	else
		notok "$_nm answers"
		show "$W/ask.log" 14
	fi
	kill -TERM $SRV 2>/dev/null
	wait $SRV 2>/dev/null
	SRV=""
}
serve_traps() {
	SRV=""
	trap '[ -z "$SRV" ] || kill -TERM $SRV 2>/dev/null' EXIT
	trap 'exit 1' INT TERM HUP
}
