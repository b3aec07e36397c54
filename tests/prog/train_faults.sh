# train_faults.sh - a training run that survives what clusters do to it
# (docs/fault-tolerance.md): preemption by signal on every rank of a 4-rank job, a disk
# that fills up during a save, a truncated model.h5, an incomplete newest
# iteration, a writer killed in the middle of a save, --async-save,
# --keep-last-n-checkpoints, the NaN check, the spiky-loss check and the
# hang detector. Every resume is compared with an uninterrupted run
# (rtol 1e-5 on lm loss, grad norm and learning rate; in practice equal),
# and no test ever loads a partial checkpoint.
. tests/prog_lib.sh
train_test_begin train_faults

ARGS="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 2"
ARGS="$ARGS --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 1000 --eval-iters 1"
ARGS="$ARGS --log-interval 1 --seed 1234 $GPT2 --data-cache-path $W/cache --padded-vocab-size 50304"
T="$BIN/train $ARGS"
same() { $PY tests/prog/py/compare_metrics.py same "$@" >"$W/cmp.log" 2>&1; }
tail_same() { $PY tests/prog/py/compare_metrics.py tail "$@" >"$W/cmp.log" 2>&1; }
hidden() { ls -A "$1" | grep '^\.' ; }

# the uninterrupted runs every resume is compared with; the one-rank one
# saves every 2 iterations too, the checkpoint folder of the checks below
setup "straight run, 1 rank, 8 iterations, save every 2" sh -c "$T --train-iters 8 --save $W/ck --save-interval 2 \
	--metrics-file $W/straight.jsonl >$W/straight.log"

# ---- preemption: SIGTERM to every rank of a TP2 x DP2 job
SIG="--tensor-model-parallel-size 2 --train-iters 200 --exit-signal-handler --save $W/sig --save-interval 1000"
$MPI -np 4 $BIN/train $ARGS $SIG --metrics-file "$W/sig.jsonl" >"$W/sig.log" 2>&1 &
mpid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "iteration        3/" "$W/sig.log"; do sleep 0.2; i=$((i + 1)); done
pids=""
for p in $(pgrep -x train); do
	if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--save $W/sig "; then pids="$pids $p"; fi
done
n=$(echo $pids | wc -w)
kill -TERM $pids
wait $mpid
rc=$?
K=$(cat "$W/sig/latest_checkpointed_iteration.txt" 2>/dev/null)
if [ "$n" = 4 ] && [ $rc -eq 0 ] && grep -q "^\[exiting program after receiving SIGTERM.\] datetime: " "$W/sig.log" &&
	[ -n "$K" ] && [ -d "$W/sig/iter_$(printf %07d "$K")" ] && [ -z "$(hidden "$W/sig")" ]; then
	ok "SIGTERM to all 4 ranks: saved iteration $K, Megatron's exit line, exit 0"
else
	notok "SIGTERM to all 4 ranks ($n signalled, exit $rc, tracker '$K')"
	show "$W/sig.log"
fi
# ---- one rank of two signalled (as docs/fault-tolerance.md advises instead of
# signalling mpirun): every rank learns of it at the end of the iteration
ONE="--train-iters 200 --exit-signal-handler --save $W/one --save-interval 1000"
$MPI -np 2 $BIN/train $ARGS $ONE >"$W/one.log" 2>&1 &
mpid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "iteration        3/" "$W/one.log"; do sleep 0.2; i=$((i + 1)); done
victim=""
for p in $(pgrep -x train); do
	if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--save $W/one "; then victim=$p; break; fi
done
[ -n "$victim" ] && kill -TERM "$victim"
wait $mpid
rc=$?
K1=$(cat "$W/one/latest_checkpointed_iteration.txt" 2>/dev/null)
if [ -n "$victim" ] && [ $rc -eq 0 ] && [ -n "$K1" ] && [ -d "$W/one/iter_$(printf %07d "$K1")" ] &&
	grep -q "^\[exiting program after receiving SIGTERM.\] datetime: " "$W/one.log"; then
	ok "SIGTERM to one rank of two: both save iteration $K1 and exit 0"
else
	notok "SIGTERM to one rank of two (exit $rc, tracker '$K1')"
	show "$W/one.log"
fi

E=$((K + 3))
if [ -n "$K" ] && $MPI -np 4 $BIN/train $ARGS $SIG --load "$W/sig" --exit-interval $E --metrics-file "$W/sig2.jsonl" \
	>"$W/sig2.log" 2>&1 &&
	$MPI -np 4 $BIN/train $ARGS --tensor-model-parallel-size 2 --train-iters 200 --exit-interval $E \
		--metrics-file "$W/sig-straight.jsonl" >"$W/sig-straight.log" 2>&1 &&
	tail_same "$W/sig-straight.jsonl" "$W/sig2.jsonl" $((K + 1)) $E; then
	ok "the preempted run resumed gives the uninterrupted run's iterations $((K + 1))-$E ($(cat "$W/cmp.log"))"
else
	notok "resume after SIGTERM"
	show "$W/sig2.log" 4
	show "$W/cmp.log" 4
fi
$T --train-iters 100000 --exit-signal-handler --exit-signal SIGUSR1 --save "$W/usr1" --save-interval 1000 \
	>"$W/usr1.log" 2>&1 &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "iteration        2/" "$W/usr1.log"; do sleep 0.1; i=$((i + 1)); done
kill -USR1 $pid
wait $pid
rc=$?
if [ $rc -eq 0 ] && grep -q "exiting program after receiving SIGUSR1" "$W/usr1.log" &&
	[ -f "$W/usr1/latest_checkpointed_iteration.txt" ]; then
	ok "--exit-signal SIGUSR1: saved iteration $(cat "$W/usr1/latest_checkpointed_iteration.txt") and exited 0"
else
	notok "--exit-signal SIGUSR1 (exit $rc)"
	show "$W/usr1.log" 3
fi

# ---- a disk that fills up during a save: a 30 MB tmpfs holds one checkpoint
# (19 MB) but not two; where mounting is not allowed, a file-size limit
# (ulimit -f) makes every optim.h5 write fail instead
D=$W/disk
mkdir -p "$D"
if mount -t tmpfs -o size=30m tmpfs "$D" 2>/dev/null; then
	how="a 30 MB tmpfs"
	$MPI -np 2 $BIN/train $ARGS --train-iters 6 --save "$D/ck" --save-interval 2 >"$W/full.log" 2>&1
	rc=$?
	want=2
else
	how="ulimit -f 16384 (8 MB files)"
	sh -c "ulimit -f 16384; trap '' XFSZ; exec $T --train-iters 6 --save $D/ck --save-interval 2" >"$W/full.log" 2>&1
	rc=$?
	want=""
fi
got=$(cat "$D/ck/latest_checkpointed_iteration.txt" 2>/dev/null)
if [ $rc -eq 128 ] && grep -q "the checkpoint was not saved (see above); training goes on" "$W/full.log" &&
	grep -q "iteration        6/       6" "$W/full.log" && grep -q "could not save the checkpoint of iteration 6" "$W/full.log" &&
	[ "$got" = "$want" ] && [ ! -d "$D/ck/iter_0000004" ] && { [ ! -d "$D/ck" ] || [ -z "$(hidden "$D/ck")" ]; }; then
	ok "disk full ($how): the failed save is logged, training goes on, the latest stays '$want', nothing partial left; the final save's failure exits 128"
else
	notok "disk full during a save ($how, exit $rc, tracker '$got')"
	show "$W/full.log" 6
	ls -la "$D/ck" 2>&1 | sed 's/^/#   /'
fi
rm -rf "$D/ck"
if [ "$how" = "a 30 MB tmpfs" ]; then
	$T --train-iters 6 --save "$D/ck" --save-interval 2 --exit-on-failed-save >"$W/full2.log" 2>&1
	rc=$?
	if [ $rc -eq 128 ] && ! grep -q "iteration        5/" "$W/full2.log" &&
		[ "$(cat "$D/ck/latest_checkpointed_iteration.txt")" = 2 ]; then
		ok "--exit-on-failed-save stops at the first failed save (iteration 4), exit 128"
	else
		notok "--exit-on-failed-save (exit $rc)"
		show "$W/full2.log" 4
	fi
	umount "$D"
fi

# ---- a checkpoint folder with iterations 2, 4, 6 and 8: the straight run's ($W/ck)
# a truncated model.h5, the only iteration there: refused, naming it
mkdir -p "$W/t"
cp -r "$W/ck/iter_0000008" "$W/t/" && cp "$W/ck/latest_checkpointed_iteration.txt" "$W/t/"
truncate -s 4096 "$W/t/iter_0000008/model.h5"
expect_fail "a truncated model.h5 is refused, naming it" "iter_0000008/model.h5" $T --train-iters 8 --load "$W/t"
# an incomplete newest iteration: a warning, and the last complete one loads
cp -r "$W/ck" "$W/inc"
rm "$W/inc/iter_0000008/optim.h5"
if $T --train-iters 8 --load "$W/inc" --metrics-file "$W/inc.jsonl" >"$W/inc.log" 2>&1 &&
	grep -q "iteration 8 is damaged (see above); falling back to iteration 6" "$W/inc.log" &&
	grep -q "optim.h5" "$W/inc.log" && tail_same "$W/straight.jsonl" "$W/inc.jsonl" 7 8; then
	ok "an incomplete newest iteration (no optim.h5): warned, fell back to iteration 6, trained on as the straight run ($(cat "$W/cmp.log"))"
else
	notok "fallback from an incomplete newest iteration"
	show "$W/inc.log" 4
fi
cp -r "$W/ck" "$W/inc2"
truncate -s 4096 "$W/inc2/iter_0000008/model.h5"
truncate -s 4096 "$W/inc2/iter_0000006/optim.h5"
if $T --train-iters 8 --load "$W/inc2" --metrics-file "$W/inc2.jsonl" >"$W/inc2.log" 2>&1 &&
	grep -q "falling back to iteration 4" "$W/inc2.log" && tail_same "$W/straight.jsonl" "$W/inc2.jsonl" 5 8; then
	ok "two damaged iterations in a row: fell back to iteration 4 ($(cat "$W/cmp.log"))"
else
	notok "fallback over two damaged iterations"
	show "$W/inc2.log" 4
fi
expect_fail "--ckpt-step never falls back" "iter_0000008/model.h5" $T --train-iters 8 --load "$W/inc2" --ckpt-step 8
# a checkpoint that disagrees with the flags is refused, never passed over for an older one
expect_fail "another padded vocabulary is refused, not a reason to fall back" "a padded vocabulary" \
	$BIN/train $(echo "$ARGS" | sed 's/--padded-vocab-size 50304/--padded-vocab-size 50432/') --train-iters 8 --load "$W/ck"
if grep -q "falling back" "$ERR"; then notok "... but it fell back"; else ok "... with no fallback"; fi
setup "a save without optimizer state" sh -c "$T --train-iters 4 --save $W/noopt --save-interval 2 --exit-interval 2 --no-save-optim >$W/noopt.log"
expect_fail "loading it without --no-load-optim says what to do" "give --no-load-optim" \
	$T --train-iters 4 --load "$W/noopt"
# --keep-last-n-checkpoints after a resume from an older iteration: the
# newer iterations of the abandoned run are left alone, the run's own kept
cp -r "$W/ck" "$W/kp"
if $T --train-iters 8 --load "$W/kp" --ckpt-step 2 --save "$W/kp" --save-interval 1 --keep-last-n-checkpoints 2 \
	--exit-interval 4 >"$W/kp.log" 2>&1 &&
	[ "$(ls "$W/kp" | tr '\n' ' ')" = "iter_0000003 iter_0000004 iter_0000006 iter_0000008 latest_checkpointed_iteration.txt " ]; then
	ok "--keep-last-n-checkpoints 2 after resuming from iteration 2: keeps 3 and 4, leaves the abandoned 6 and 8"
else
	notok "--keep-last-n-checkpoints after a resume: $(ls "$W/kp" | tr '\n' ' ')"
fi

# ---- a writer killed in the middle of a save (SIGKILL after its first tensor)
MEGAC_FAULT_KILL_SAVE=4 $T --train-iters 8 --save "$W/kill" --save-interval 2 >"$W/kill.log" 2>&1
rc=$?
if [ $rc -eq 137 ] && [ "$(cat "$W/kill/latest_checkpointed_iteration.txt")" = 2 ] && [ ! -d "$W/kill/iter_0000004" ] &&
	[ -n "$(hidden "$W/kill")" ]; then
	ok "a writer killed in the save of iteration 4: the tracker still says 2, its files stay hidden"
else
	notok "killed writer (exit $rc)"
	ls -la "$W/kill" | sed 's/^/#   /'
fi
if $T --train-iters 8 --load "$W/kill" --save "$W/kill" --save-interval 2 --metrics-file "$W/kill2.jsonl" >"$W/kill2.log" 2>&1 &&
	grep -q "loaded checkpoint from $W/kill/iter_0000002 at iteration 2" "$W/kill2.log" &&
	tail_same "$W/straight.jsonl" "$W/kill2.jsonl" 3 8 && [ "$(cat "$W/kill/latest_checkpointed_iteration.txt")" = 8 ]; then
	ok "after the killed save, --load takes iteration 2 and training goes on as the straight run ($(cat "$W/cmp.log"))"
else
	notok "resume after a killed writer"
	show "$W/kill2.log" 4
fi

# ---- --async-save: the same checkpoints, resumed exactly (two pipeline stages, each with its writer thread)
A="--pipeline-model-parallel-size 2 --train-iters 8"
if $MPI -np 2 $BIN/train $ARGS $A --save "$W/async" --save-interval 2 --async-save --metrics-file "$W/async.jsonl" \
	>"$W/async.log" 2>&1 && [ "$(grep -c "(written in the background)" "$W/async.log")" = 3 ] &&
	[ "$(cat "$W/async/latest_checkpointed_iteration.txt")" = 8 ] && [ -z "$(hidden "$W/async")" ] &&
	same "$W/async.jsonl" "$W/straight.jsonl" 8; then
	ok "--async-save with PP2: iterations 2, 4, 6 written in the background, 8 at the end; losses unchanged ($(cat "$W/cmp.log"))"
else
	notok "--async-save"
	show "$W/async.log" 4
fi
if $MPI -np 2 $BIN/train $ARGS $A --load "$W/async" --ckpt-step 4 --metrics-file "$W/async2.jsonl" >"$W/async2.log" 2>&1 &&
	tail_same "$W/straight.jsonl" "$W/async2.jsonl" 5 8; then
	ok "the async checkpoint of iteration 4 resumes exactly ($(cat "$W/cmp.log"))"
else
	notok "resume from an async checkpoint"
	show "$W/async2.log" 4
fi

# the run's last save must not fail quietly, at --exit-interval and with --async-save too
for mode in "sync:" "async:--async-save"; do
	m=${mode%%:*}
	mkdir -p "$W/xi-$m"
	touch "$W/xi-$m/iter_0000004" # a file where the iteration directory must go: the rename fails
	$T --train-iters 8 --save "$W/xi-$m" --save-interval 4 --exit-interval 4 ${mode#*:} >"$W/xi-$m.log" 2>&1
	rc=$?
	if [ $rc -eq 128 ] && grep -q "could not save the checkpoint of iteration 4" "$W/xi-$m.log" &&
		! grep -q "exiting program at iteration 4" "$W/xi-$m.log"; then
		ok "a failed save at --exit-interval ($m) ends the run with exit 128"
	else
		notok "a failed save at --exit-interval ($m, exit $rc)"
		show "$W/xi-$m.log" 4
	fi
done

# ---- --keep-last-n-checkpoints
expect_ok "--keep-last-n-checkpoints 2" sh -c "$T --train-iters 5 --save $W/keep --save-interval 1 --keep-last-n-checkpoints 2 >$W/keep.log"
if [ "$(ls "$W/keep" | tr '\n' ' ')" = "iter_0000004 iter_0000005 latest_checkpointed_iteration.txt " ]; then
	ok "--keep-last-n-checkpoints 2 keeps iterations 4 and 5"
else
	notok "--keep-last-n-checkpoints: $(ls "$W/keep" | tr '\n' ' ')"
fi

# ---- the NaN check: every rank stops, naming where it appeared
$MPI -np 2 $BIN/train $ARGS --train-iters 20 --lr 1e5 --min-lr 1e5 >"$W/nan.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -Eq "error: iteration [0-9]+: found (NaN|Inf) in the local forward loss on rank [01]" "$W/nan.log" &&
	grep -Eq "error: iteration [0-9]+: stopping: rank 0 found" "$W/nan.log" && ! grep -q "iteration       20/" "$W/nan.log"; then
	ok "a diverging run stops at the iteration its loss became non-finite, naming the rank ($(grep -Eo "iteration [0-9]+: found [A-Za-z]+ in the local [a-z ]+ on rank [0-9]" "$W/nan.log" | head -1))"
else
	notok "the NaN check (exit $rc)"
	show "$W/nan.log" 4
fi
for m in sync async; do
	flag=""
	[ $m = async ] && flag=--async-save
	$T --train-iters 20 --lr 1e5 --min-lr 1e5 --save "$W/nan-$m" --save-interval 1 $flag >"$W/nan-$m.log" 2>&1
done
a=$(cat "$W/nan-sync/latest_checkpointed_iteration.txt" 2>/dev/null)
b=$(cat "$W/nan-async/latest_checkpointed_iteration.txt" 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ -z "$(hidden "$W/nan-async")" ]; then
	ok "a NaN stop commits the async save in flight: the last good iteration ($b) is the latest, as with synchronous saves"
else
	notok "NaN stop with --async-save: latest '$b', synchronous '$a'"
	show "$W/nan-async.log" 3
fi
expect_ok "--no-check-for-nan-in-loss-and-grad trains on" sh -c "$T --train-iters 12 --lr 1e5 --min-lr 1e5 \
	--no-check-for-nan-in-loss-and-grad >$W/nonan.log"
if grep -q "iteration       12/      12" "$W/nonan.log"; then ok "... to the last iteration"; else notok "--no-check-for-nan-in-loss-and-grad"; fi

# ---- --check-for-spiky-loss on a healthy run: the sample is taken, nothing is flagged
expect_ok "--check-for-spiky-loss" sh -c "$T --train-iters 30 --check-for-spiky-loss >$W/spiky.log 2>&1"
if grep -q "the largest of the first 100 micro-batch losses is" "$W/spiky.log" && ! grep -q "spiky loss" "$W/spiky.log"; then
	ok "--check-for-spiky-loss: 120 micro-batches, the first 100 sampled, none flagged"
else
	notok "--check-for-spiky-loss"
	show "$W/spiky.log" 3
fi

# ---- the hang detector: rank 1 stops in iteration 3; every rank says where it is
MEGAC_FAULT_HANG=3:1 timeout 120 $MPI -np 4 $BIN/train $ARGS --train-iters 20 --hang-timeout-minutes 0.1 \
	>"$W/hang.log" 2>&1
rc=$?
nr=$(grep -c "error: no progress for [0-9]* s (--hang-timeout-minutes 0.1): this rank is in" "$W/hang.log")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$nr" = 4 ] &&
	grep -q "\[rank 1\] train: error: no progress .* this rank is in the forward pass of micro-batch 0;" "$W/hang.log" &&
	grep -q "\[rank 0\] train: error: no progress .* waiting [0-9]* s in all-reduce on the data-parallel group" "$W/hang.log"; then
	ok "--hang-timeout-minutes: all 4 ranks said where they were (rank 1 in its forward pass, the others in the all-reduce), the job ended"
else
	notok "the hang detector (exit $rc, $nr ranks reported)"
	show "$W/hang.log" 6
fi
