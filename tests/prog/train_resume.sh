# train_resume.sh - checkpoints and the training loop's promises: 2N
# iterations straight print the same loss lines as N, stop, resume, N more
# (dropout on); recomputation gives the same lines with less memory; a
# damaged checkpoint is refused naming the file; --finetune, --no-load-optim,
# --exit-interval, the tracker file, the metrics and TensorBoard files, the
# half-precision modes, and Megatron's flag rules.
. tests/prog_lib.sh
W=$(new_tmp train_resume)
OUT_LOG=$W/out.log
ERR=$W/err.log
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

setup "preprocess the bundled corpus" $BIN/preprocess_data --input examples/data/kjv.jsonl.gz \
	--output-prefix "$W/kjv" $GPT2 --append-eod --workers 1 --log-interval 0

ARGS="--num-layers 3 --hidden-size 48 --num-attention-heads 4 --seq-length 32"
ARGS="$ARGS --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3"
ARGS="$ARGS --lr-decay-style cosine --lr-warmup-iters 2 --train-iters 6 --data-path $W/kjv_text_document"
ARGS="$ARGS --split 90,10,0 --eval-interval 3 --eval-iters 2 --log-interval 3 --data-cache-path $W/cache"
ARGS="$ARGS $GPT2"
T="$BIN/train $ARGS"

# lines LOG: the iteration lines at log-interval boundaries (3, 6: a resumed
# run's first line covers only its own first iteration, as in Megatron) and
# the validation lines, without wall-clock fields
lines() {
	grep -E "^ \[.*iteration +[36]/|validation loss" "$1" |
		sed -e 's/^ \[[^]]*\]//' -e 's/ elapsed time per iteration (ms): [0-9.]* |//' \
			-e 's/ time to finish: [0-9:]* |//'
}

setup "6 iterations straight, saving every 3" sh -c "$T --save $W/a --save-interval 3 >$W/straight.log"
expect_ok "3 iterations, then --exit-interval 3 stops" sh -c "$T --save $W/b --save-interval 3 --exit-interval 3 >$W/half1.log"
if grep -q "^\[exiting program at iteration 3\] datetime: " "$W/half1.log" && [ "$(cat "$W/b/latest_checkpointed_iteration.txt")" = 3 ] &&
	[ -d "$W/b/iter_0000003" ] && ! ls -A "$W/b" | grep -q '^\.'; then
	ok "--exit-interval saved iteration 3, wrote the tracker, left no temporary directory"
else
	notok "--exit-interval state"
	ls -la "$W/b" | sed 's/^/#   /'
fi
expect_ok "resume from iteration 3 to 6" sh -c "$T --load $W/b --save $W/b --save-interval 3 >$W/half2.log"
lines "$W/straight.log" >"$W/s.txt"
{ lines "$W/half1.log"; lines "$W/half2.log"; } >"$W/r.txt"
if [ "$(grep -c iteration "$W/s.txt")" -ge 5 ] && cmp -s "$W/s.txt" "$W/r.txt"; then
	ok "resumed run prints the same loss, grad norm and lr lines as the straight run (dropout on)"
else
	notok "resume is not bit-exact"
	diff "$W/s.txt" "$W/r.txt" | head -6 | sed 's/^/#   /'
fi
if cmp -s "$W/a/iter_0000006/model.h5" "$W/b/iter_0000006/model.h5" ||
	$PY -c "
import h5py, sys, numpy as np
a = h5py.File('$W/a/iter_0000006/model.h5'); b = h5py.File('$W/b/iter_0000006/model.h5')
assert sorted(a) == sorted(b)
for n in a: assert np.array_equal(a[n][()], b[n][()]), n
" 2>"$W/py.err"; then
	ok "the final weights are bit-identical"
else
	notok "final weights differ"
	show "$W/py.err"
fi

# recompute: identical lines, lower peak memory
expect_ok "full recompute (uniform, 1 layer)" sh -c "$T --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 >$W/full.log"
expect_ok "selective recompute" sh -c "$T --recompute-activations >$W/sel.log"
maxalloc() { grep -o "max allocated: [0-9.]*" "$1" | head -1 | cut -d' ' -f3; }
for v in full sel; do
	lines "$W/$v.log" >"$W/$v.txt"
	if cmp -s "$W/s.txt" "$W/$v.txt" && $PY -c "import sys; sys.exit(not float('$(maxalloc "$W/$v.log")') < float('$(maxalloc "$W/straight.log")'))"; then
		ok "$v recompute: same lines, max allocated $(maxalloc "$W/$v.log") MB < $(maxalloc "$W/straight.log") MB"
	else
		notok "$v recompute"
		diff "$W/s.txt" "$W/$v.txt" | head -4 | sed 's/^/#   /'
	fi
done

# --skip-train: only the final evaluation, from sample 0 of the validation split (Megatron)
expect_ok "--skip-train from the iteration-3 checkpoint" sh -c "$BIN/train $(echo "$ARGS" | sed 's/--lr 2e-3//') --load $W/b --ckpt-step 3 --skip-train >$W/skip.log"
v_straight=$(grep -o "validation loss at iteration 3 | lm loss value: [^|]*" "$W/straight.log" | sed 's/.*value: //')
v_skip=$(grep -o "validation loss at iteration 3 on validation set | lm loss value: [^|]*" "$W/skip.log" | sed 's/.*value: //')
if [ -n "$v_skip" ] && [ "$v_skip" = "$v_straight" ] && ! grep -q "iteration  " "$W/skip.log"; then
	ok "--skip-train evaluates the checkpoint on the same validation samples as the run did at iteration 3 ($v_skip)"
else
	notok "--skip-train: '$v_skip' vs '$v_straight'"
	tail -4 "$W/skip.log" | sed 's/^/#   /'
fi

# recompute where activations dominate (long sequences, small vocabulary)
M="$BIN/train --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 256"
M="$M --max-position-embeddings 256 --micro-batch-size 4 --lr 1e-3 --train-iters 2 --mock-data"
M="$M --tokenizer-type NullTokenizer --vocab-size 512 --eval-iters 0 --eval-interval 10 --log-interval 1"
M="$M --data-cache-path $W/mockcache"
expect_ok "activation-heavy model" sh -c "$M >$W/m0.log"
expect_ok "the same with full recompute" sh -c "$M --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 >$W/m1.log"
expect_ok "the same with selective recompute" sh -c "$M --recompute-activations >$W/m2.log"
# every iteration line, without wall-clock fields
lines_all() { grep -E "^ \[.*iteration" "$1" | sed -e 's/^ \[[^]]*\]//' -e 's/ elapsed time per iteration (ms): [0-9.]* |//'; }
lines_all "$W/m0.log" >"$W/m0.txt"
for v in 1 2; do
	lines_all "$W/m$v.log" >"$W/m$v.txt"
	if [ -s "$W/m0.txt" ] && cmp -s "$W/m0.txt" "$W/m$v.txt" &&
		$PY -c "import sys; sys.exit(not float('$(maxalloc "$W/m$v.log")') < 0.8 * float('$(maxalloc "$W/m0.log")'))"; then
		ok "recompute variant $v: identical lines, max allocated $(maxalloc "$W/m$v.log") MB vs $(maxalloc "$W/m0.log") MB"
	else
		notok "recompute variant $v on the activation-heavy model"
		diff "$W/m0.txt" "$W/m$v.txt" | head -4 | sed 's/^/#   /'
	fi
done

# exits that save first
expect_ok "--exit-duration-in-mins" sh -c "$T --exit-duration-in-mins 0.00001 --save $W/dur --save-interval 100 --train-iters 100 >$W/dur.log"
if grep -q "^\[exiting program after [0-9.e-]* minutes\] datetime: " "$W/dur.log" &&
	[ "$(cat "$W/dur/latest_checkpointed_iteration.txt")" = 1 ]; then
	ok "--exit-duration-in-mins saved iteration 1 and said why it stopped"
else
	notok "--exit-duration-in-mins"
	tail -3 "$W/dur.log" | sed 's/^/#   /'
fi
$T --exit-signal-handler --save "$W/sig" --save-interval 1000 --train-iters 100000 >"$W/sig.log" 2>&1 &
pid=$!
for i in 1 2 3 4 5 6 7 8 9 10; do grep -q "iteration        1/" "$W/sig.log" && break; sleep 1; done
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -eq 0 ] && grep -q "exiting program after receiving SIGTERM" "$W/sig.log" &&
	[ -f "$W/sig/latest_checkpointed_iteration.txt" ]; then
	ok "--exit-signal-handler: SIGTERM saves iteration $(cat "$W/sig/latest_checkpointed_iteration.txt") and exits 0"
else
	notok "--exit-signal-handler (exit $rc)"
	tail -3 "$W/sig.log" | sed 's/^/#   /'
fi

# damaged checkpoints are refused, naming the file (the copies keep only
# iteration 6: with an older one there, --load falls back to it,
# tests/prog/train_faults.sh)
cp -r "$W/b" "$W/c"
rm -rf "$W/c/iter_0000003"
$PY - "$W/c/iter_0000006/model.h5" <<'EOF'
import h5py, sys
name = "decoder.layers.1.mlp.linear_fc2.weight"
with h5py.File(sys.argv[1], "r") as f:
    off = f[name].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 10)
    b = f.read(1)
    f.seek(off + 10)
    f.write(bytes([b[0] ^ 0x40]))
EOF
expect_fail "a flipped byte in model.h5 is refused" "linear_fc2.weight" $T --load "$W/c"
cp -r "$W/b" "$W/d"
rm -rf "$W/d/iter_0000003"
truncate -s 5000 "$W/d/iter_0000006/optim.h5"
expect_fail "a truncated optim.h5 is refused" "optim.h5" $T --load "$W/d"
cp -r "$W/b" "$W/e"
rm -rf "$W/e/iter_0000003"
rm "$W/e/iter_0000006/optim.h5"
expect_fail "a missing optim.h5 is refused" "optim.h5" $T --load "$W/e"
expect_ok "--no-load-optim loads without it" sh -c "$T --load $W/e --no-load-optim --train-iters 7 >$W/nlo.log"
if grep -q "iteration        7/       7 .*learning rate: 1.000000E-03" "$W/nlo.log"; then
	ok "--no-load-optim restarts the LR schedule, as Megatron (warmup again)"
else
	notok "--no-load-optim schedule"
	grep "iteration" "$W/nlo.log" | head -2 | sed 's/^/#   /'
fi
echo garbage >"$W/e/latest_checkpointed_iteration.txt"
expect_fail "a garbage tracker is refused" "latest_checkpointed_iteration.txt" $T --load "$W/e"
expect_fail "--exit-on-missing-checkpoint" "no checkpoint" $T --load "$W/nothing" --exit-on-missing-checkpoint
expect_ok "a missing checkpoint otherwise starts from scratch" sh -c "$T --load $W/nothing --train-iters 3 >$W/scratch.log"
expect_ok "--finetune loads weights and starts at iteration 0" sh -c "$T --load $W/b --finetune --train-iters 3 >$W/ft.log"
if grep -q "iteration        1/       3" "$W/ft.log"; then ok "--finetune restarted the iteration count"; else notok "--finetune iteration"; fi
expect_fail "a changed --lr against the checkpoint's schedule" "--override-opt-param-scheduler" \
	$T --load "$W/b" --lr 1e-3 --train-iters 8
expect_fail "a changed --lr-decay-style against the checkpoint's" "--lr-decay-style" \
	$T --load "$W/b" --lr-decay-style linear
expect_ok "--override-opt-param-scheduler takes the flags" $T --load "$W/b" --lr 1e-3 --train-iters 7 --override-opt-param-scheduler

# metrics JSONL and TensorBoard
expect_ok "metrics and TensorBoard files" $T --metrics-file "$W/m/metrics.jsonl" --tensorboard-dir "$W/tb" --train-iters 3
if $PY - "$W/m/metrics.jsonl" "$W/tb" <<'EOF' 2>"$W/py.err"; then
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
it = [r for r in rows if "lm loss" in r]
assert [r["iteration"] for r in it] == [1, 3], it
assert any("validation lm loss" in r for r in rows)
ev = os.listdir(sys.argv[2])
assert len(ev) == 1 and ev[0].startswith("events.out.tfevents."), ev
data = open(os.path.join(sys.argv[2], ev[0]), "rb").read()
assert b"lm loss" in data and b"learning-rate" in data and b"grad-norm" in data
EOF
	ok "metrics.jsonl has one object per iteration and the validation loss; an event file has the scalars"
else
	notok "metrics / TensorBoard"
	show "$W/py.err"
fi

# half precision: the real loss-scaling logic
expect_ok "--bf16" sh -c "$T --bf16 >$W/bf16.log"
expect_ok "--fp16 with dynamic loss scaling" sh -c "$T --fp16 --initial-loss-scale 65536 --loss-scale-window 2 >$W/fp16.log"
if $PY - "$W/straight.log" "$W/bf16.log" "$W/fp16.log" <<'EOF' 2>"$W/py.err"; then
import re, sys
def losses(p):
    return [float(x) for x in re.findall(r"lm loss: ([0-9.E+-]+)", open(p).read())]
def scales(p):
    return [float(x) for x in re.findall(r"loss scale: ([0-9.]+)", open(p).read())]
ref, bf, fp = losses(sys.argv[1]), losses(sys.argv[2]), losses(sys.argv[3])
assert len(bf) == 3, bf
assert max(abs(a - b) / a for a, b in zip(ref, bf)) < 0.02, (ref, bf)
assert bf != ref[:6], "bf16 rounding had no effect"
assert scales(sys.argv[2]) == [1.0] * 3
s = scales(sys.argv[3])
assert s[0] == 65536.0 and max(s) >= 65536.0 * 2, s   # window 2: the scale grows
assert all(abs(a - b) / a < 0.02 for a, b in zip(ref, fp)), (ref, fp)
EOF
	ok "bf16 and fp16 losses track fp32 within 2%; bf16 logs loss scale 1.0; fp16's dynamic scale grows"
else
	notok "half precision"
	show "$W/py.err"
fi

# Megatron's flag rules
expect_fail "--fp16 with --bf16" "mutually exclusive" $T --fp16 --bf16
expect_fail "tensor parallelism is not here yet" "--tensor-model-parallel-size 2" $T --tensor-model-parallel-size 2
expect_fail "--global-batch-size not a multiple" "not divisible" $T --global-batch-size 5
expect_fail "no --lr" "--lr is required" $BIN/train $(echo "$ARGS" | sed 's/--lr 2e-3//')
expect_fail "an unsupported Megatron flag" "not implemented" $T --squared-relu
expect_fail "--rotary-interleaved without RoPE" "--rotary-interleaved needs --position-embedding-type rope or yarn" \
	$T --rotary-interleaved
expect_fail "YaRN with --rotary-percent below 1" "Megatron's YaRN rotates every one of the --kv-channels" \
	$T --position-embedding-type yarn --rotary-percent 0.5
expect_fail "YaRN with Llama 3.x scaling" "--use-rope-scaling is Llama 3.x's scaling" \
	$T --position-embedding-type yarn --use-rope-scaling
expect_fail "YaRN with a beta of 0" "--yarn-beta-fast must be a positive number" \
	$T --position-embedding-type yarn --yarn-beta-fast 0
expect_fail "--save without --save-interval" "--save-interval" $T --save "$W/x"
expect_fail "full recompute without --recompute-num-layers" "--recompute-num-layers" \
	$T --recompute-granularity full --recompute-method block
expect_fail "a dataset with ids beyond the tokenizer's vocabulary" "outside the model's vocabulary" \
	$BIN/train $(echo "$ARGS" | sed "s|$GPT2||") --tokenizer-type NullTokenizer --vocab-size 1000

# a disk that fills up during a save (here a file-size limit, with SIGXFSZ
# ignored so writes fail with EFBIG as on a full disk): exit 128 with the
# system's reason, and nothing published (no iteration directory, no tracker)
expect_fail "a save that runs out of space fails cleanly" "File too large" \
	sh -c "trap '' XFSZ; ulimit -f 2000; exec $T --train-iters 0 --save $W/full"
if [ -z "$(ls -A "$W/full" 2>/dev/null)" ]; then
	ok "the failed save left nothing behind"
else
	notok "the failed save left: $(ls -A "$W/full")"
fi
