# train_dist.sh - train on several MPI ranks: data parallelism over
# 2 and 8 ranks (4 too under make check-long) gives the lm loss and grad norm of the one-rank run at every
# iteration (rtol 1e-5, dropout on: masks are keyed by the global
# micro-batch), the same validation lines; a checkpoint of the distributed
# optimizer written by 4 ranks resumes on 2, and a TP2 x DP2 one on 1, with
# the uninterrupted run's lines (under make check-long also a DP2 checkpoint
# and the DP4 one on 1 rank); Megatron's layout checks.
. tests/prog_lib.sh
train_test_begin train_dist

ARGS="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 1 --global-batch-size 8 --lr 2e-3 --lr-decay-style cosine --lr-warmup-iters 2"
ARGS="$ARGS --train-iters 8 --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 2"
ARGS="$ARGS --log-interval 1 --data-cache-path $W/cache $GPT2"

# (also the one-rank reference of the TP runs below)
setup "1 rank" sh -c "$BIN/train $ARGS --metrics-file $W/r1.jsonl >$W/r1.log"
expect_ok "2 data-parallel ranks" sh -c "$MPI -np 2 $BIN/train $ARGS --metrics-file $W/r2.jsonl >$W/r2.log"
# DP4 only under make check-long: DP2 and DP8 bracket it
if long_only; then
	expect_ok "4 data-parallel ranks" sh -c "$MPI -np 4 $BIN/train $ARGS --metrics-file $W/r4.jsonl >$W/r4.log"
fi
expect_ok "8 data-parallel ranks, distributed optimizer" \
	sh -c "$MPI -np 8 $BIN/train $ARGS --use-distributed-optimizer --metrics-file $W/r8d.jsonl >$W/r8d.log"

# compare NAME A.jsonl B.jsonl
compare() {
	if $PY tests/prog/py/compare_metrics.py same "$2" "$3" 8 >"$W/cmp.log" 2>&1; then
		ok "$1: $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
# resumed NAME STRAIGHT.jsonl RESUMED.jsonl: iterations 5-8 of a run resumed from
# iteration 4 equal the uninterrupted run's (rtol 1e-5)
resumed() {
	if $PY tests/prog/py/compare_metrics.py tail "$2" "$3" 5 8 >"$W/cmp.log" 2>&1; then
		ok "$1"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
compare "DP2 equals one rank (lm loss, grad norm, lr)" "$W/r1.jsonl" "$W/r2.jsonl"
if long_only; then compare "DP4 equals one rank (lm loss, grad norm, lr)" "$W/r1.jsonl" "$W/r4.jsonl"; fi
compare "DP8 with the distributed optimizer equals one rank" "$W/r1.jsonl" "$W/r8d.jsonl"
maxalloc() { grep -o "max allocated: [0-9.]*" "$1" | head -1 | cut -d' ' -f3; }
m1=$(maxalloc "$W/r1.log")
m8=$(maxalloc "$W/r8d.log")
if [ -n "$m8" ] && $PY -c "import sys; sys.exit(not $m8 < $m1 - 0.7 * 2 * 4 * 1.6e6 / 2**20)"; then
	ok "the distributed optimizer holds 1/8 of Adam's state: max allocated $m8 MB per rank, $m1 MB on one rank"
else
	notok "distributed optimizer memory: $m8 MB vs $m1 MB"
fi
valid() { grep "validation loss" "$1" | sed 's/PPL: [^|]*|//'; }
if [ "$(valid "$W/r1.log" | wc -l)" -eq 3 ] && [ "$(valid "$W/r1.log")" = "$(valid "$W/r8d.log")" ]; then
	ok "DP8 prints the one-rank run's validation losses"
else
	notok "DP8 validation lines"
	valid "$W/r8d.log" | sed 's/^/#   /'
fi
if [ "$(grep -c "iteration .*/ *8 |" "$W/r8d.log")" -eq 8 ] && [ "$(grep -c "^\[Rank 0\]" "$W/r8d.log")" -ge 1 ] &&
	! grep -q "^\[Rank [1-7]\]" "$W/r8d.log"; then
	ok "one iteration line per iteration (from the last rank), memory from data-parallel rank 0"
else
	notok "log lines under DP8"
	head -5 "$W/r8d.log" | sed 's/^/#   /'
fi

# --log-comm: bytes per iteration per group equal the analytic volumes (docs/parallel.md)
expect_ok "DP2 with --log-comm" sh -c "$MPI -np 2 $BIN/train $ARGS --log-comm --log-interval 4 --eval-interval 1000 >$W/c2.log"
expect_ok "DP4 distributed optimizer with --log-comm" \
	sh -c "$MPI -np 4 $BIN/train $ARGS --log-comm --log-interval 4 --eval-interval 1000 --use-distributed-optimizer >$W/c4.log"
if $PY - "$W/c2.log" "$W/c4.log" >"$W/cmp.log" 2>&1 <<'EOF'; then
import re, sys
h, L, V, S = 32, 2, 50304, 32
P = V * h + S * h + L * (12 * h * h + 13 * h) + 2 * h    # GPT-2 style: LayerNorm, biases, tied
def lines(path):
    out = []
    for l in open(path):
        if "communication per iteration" in l:
            out.append({k: int(v) for k, v in re.findall(r"\| ([a-z -]+): (\d+)", l)})
    return out
def ring(p, n):          # all-reduce, per rank
    return 2 * (p - 1) * n // p
c2, c4 = lines(sys.argv[1]), lines(sys.argv[2])
assert len(c2) >= 2 and len(c4) >= 2, (c2, c4)
want2 = ring(2, 4 * P) + ring(2, 16)                       # grads + the two loss sums
want4 = 2 * (3 * 4 * P // 4) + ring(4, 16) + ring(4, 8)    # reduce-scatter + all-gather, sums, norm
for c in c2[1:]:
    assert c["data-parallel"] == want2 and c["tensor-model-parallel"] == 0, (c, want2)
for c in c4[1:]:
    assert c["data-parallel"] == want4, (c, want4)
print("DP2 %d bytes (all-reduce), DP4 distributed optimizer %d bytes per iteration, %d parameters" % (want2, want4, P))
EOF
	ok "--log-comm volumes equal the analytic ones: $(cat "$W/cmp.log")"
else
	notok "--log-comm volumes"
	show "$W/cmp.log"
fi

# a checkpoint written by 2 ranks resumes on 1 (and the other way round)
# (under make check-long: the TP2 x DP2 checkpoint below resumes on one rank,
# as do train_pipe.sh's and train_moe.sh's multi-rank checkpoints)
if long_only; then
	expect_ok "DP2: 4 iterations, save, exit" sh -c "$MPI -np 2 $BIN/train $ARGS --save $W/ck --save-interval 4 --exit-interval 4 >$W/a.log"
	expect_ok "resume on 1 rank" sh -c "$BIN/train $ARGS --load $W/ck --metrics-file $W/res.jsonl >$W/b.log"
	resumed "a DP2 checkpoint resumed on 1 rank continues the uninterrupted run (rtol 1e-5)" "$W/r1.jsonl" "$W/res.jsonl"
fi

# the distributed optimizer's sharded Adam state is saved whole: DP4 -> DP2 with it, and -> 1 rank
# (the one-rank resume under make check-long: the DP2 one reads the same whole state)
expect_ok "DP4, distributed optimizer: 4 iterations, save" \
	sh -c "$MPI -np 4 $BIN/train $ARGS --use-distributed-optimizer --save $W/dck --save-interval 4 --exit-interval 4 >$W/c.log"
expect_ok "resume on DP2 with the distributed optimizer" \
	sh -c "$MPI -np 2 $BIN/train $ARGS --use-distributed-optimizer --load $W/dck --metrics-file $W/dres2.jsonl >$W/d.log"
dres=dres2
if long_only; then
	expect_ok "resume on 1 rank" sh -c "$BIN/train $ARGS --load $W/dck --metrics-file $W/dres1.jsonl >$W/e.log"
	dres="dres2 dres1"
fi
for f in $dres; do
	resumed "distributed-optimizer checkpoint resumed ($f) continues the uninterrupted run" "$W/r1.jsonl" "$W/$f.jsonl"
done

# Megatron's layout rules, before anything runs
expect_fail "global batch not divisible by micro batch x DP" "data-parallel size 4" \
	$MPI -np 4 $BIN/train $ARGS --global-batch-size 6
expect_fail "heads not divisible by TP" "--num-attention-heads" \
	$MPI -np 2 $BIN/train $ARGS --num-attention-heads 3 --hidden-size 33 --tensor-model-parallel-size 2
expect_fail "layers not divisible by PP x virtual stages" "2 virtual stages per rank" \
	$MPI -np 2 $BIN/train $ARGS --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
expect_fail "interleaved schedule: micro-batches not a multiple of the group" "multiple of 2 micro-batches" \
	$MPI -np 2 $BIN/train $ARGS --num-layers 4 --pipeline-model-parallel-size 2 \
	--num-virtual-stages-per-pipeline-rank 2 --global-batch-size 3
expect_fail "sequence parallelism needs the sequence divisible by TP" "--seq-length 30 divisible" \
	$MPI -np 4 $BIN/train $ARGS --tensor-model-parallel-size 4 --sequence-parallel --seq-length 30 --max-position-embeddings 32

# tensor parallelism: the same padded vocabulary (Megatron pads by divisible-by x TP);
# dropout on: attention-dropout masks are numbered by global head, so any TP size
# draws the one-rank masks
T1="$ARGS --make-vocab-size-divisible-by 128"
T2="$ARGS --make-vocab-size-divisible-by 64 --tensor-model-parallel-size 2"
T4="$ARGS --make-vocab-size-divisible-by 32 --tensor-model-parallel-size 4"
LL="--group-query-attention --num-query-groups 2 --position-embedding-type rope --normalization RMSNorm"
LL="$LL --swiglu --ffn-hidden-size 48 --disable-bias-linear --untie-embeddings-and-output-weights"
# the TP reference on 1 rank is the run r1 above ($T1 spells out ARGS's default divisor)
cp "$W/r1.jsonl" "$W/t1.jsonl"
expect_ok "TP2" sh -c "$MPI -np 2 $BIN/train $T2 --metrics-file $W/t2.jsonl >$W/t2.log"
# TP4 alone and TP2 x DP2 without SP only under make check-long: TP4 + SP and
# the Llama-style TP2 x DP2 + SP with the distributed optimizer cover them
if long_only; then
	expect_ok "TP4" sh -c "$MPI -np 4 $BIN/train $T4 --metrics-file $W/t4.jsonl >$W/t4.log"
	expect_ok "TP2 x DP2, distributed optimizer" \
		sh -c "$MPI -np 4 $BIN/train $T2 --use-distributed-optimizer --metrics-file $W/t22.jsonl >$W/t22.log"
fi
setup "Llama-style, 1 rank" sh -c "$BIN/train $T1 $LL --metrics-file $W/l1.jsonl >$W/l1.log"
expect_ok "Llama-style (GQA, SwiGLU, RoPE, untied), TP2" sh -c "$MPI -np 2 $BIN/train $T2 $LL --metrics-file $W/l2.jsonl >$W/l2.log"
expect_ok "TP2 with sequence parallelism" sh -c "$MPI -np 2 $BIN/train $T2 --sequence-parallel --metrics-file $W/s2.jsonl >$W/s2.log"
expect_ok "TP4 with sequence parallelism, full recompute" \
	sh -c "$MPI -np 4 $BIN/train $T4 --sequence-parallel --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --metrics-file $W/s4.jsonl >$W/s4.log"
expect_ok "Llama-style TP2 x DP2 with SP and the distributed optimizer" \
	sh -c "$MPI -np 4 $BIN/train $T2 $LL --sequence-parallel --use-distributed-optimizer --metrics-file $W/ls22.jsonl >$W/ls22.log"
compare "TP2 equals one rank" "$W/t1.jsonl" "$W/t2.jsonl"
if long_only; then
	compare "TP4 equals one rank" "$W/t1.jsonl" "$W/t4.jsonl"
	compare "TP2 x DP2 with the distributed optimizer equals one rank" "$W/t1.jsonl" "$W/t22.jsonl"
fi
compare "Llama-style TP2 equals one rank" "$W/l1.jsonl" "$W/l2.jsonl"
compare "TP2 + SP equals one rank" "$W/t1.jsonl" "$W/s2.jsonl"
compare "TP4 + SP with full recompute equals one rank" "$W/t1.jsonl" "$W/s4.jsonl"
compare "Llama-style TP2 x DP2 + SP, distributed optimizer, equals one rank" "$W/l1.jsonl" "$W/ls22.jsonl"

# --log-params-norm with TensorBoard on TP2 x DP2 (distributed optimizer): every rank
# takes part in the norm's collectives although only the last one writes events
setup "1 rank, --log-params-norm" sh -c "$BIN/train $T1 --log-params-norm >$W/pn1.log"
expect_ok "TP2 x DP2, distributed optimizer, --log-params-norm, TensorBoard" \
	sh -c "$MPI -np 4 $BIN/train $T2 --use-distributed-optimizer --log-params-norm --tensorboard-dir $W/tb >$W/pn4.log"
pn() { grep -o "params norm: [0-9.]*" "$1" | tr '\n' ' '; }
if [ -n "$(pn "$W/pn1.log")" ] && [ "$(pn "$W/pn1.log")" = "$(pn "$W/pn4.log")" ] && [ -n "$(ls "$W/tb")" ]; then
	ok "params norm under TP2 x DP2 equals one rank's ($(pn "$W/pn4.log" | cut -d' ' -f1-3))"
else
	notok "params norm: '$(pn "$W/pn1.log")' vs '$(pn "$W/pn4.log")'"
	tail -3 "$W/pn4.log" | sed 's/^/#   /'
fi

# --log-comm under tensor parallelism: Megatron's conjugate all-reduces, counted
expect_ok "TP2 x DP2 with --log-comm" \
	sh -c "$MPI -np 4 $BIN/train $T2 --log-comm --log-interval 4 --eval-interval 1000 >$W/ct.log"
if $PY - "$W/ct.log" >"$W/cmp.log" 2>&1 <<'EOF'; then
import re, sys
h, L, S, mbs, gbs, t, dp, V = 32, 2, 32, 1, 8, 2, 2, 50304
N, M = mbs * S, gbs // (mbs * dp)
def ring(p, n):
    return 2 * (p - 1) * n // p
# per micro-batch: forward embedding + 2 per layer (proj, fc2), backward output layer + 2 per
# layer (fc1, qkv input grads), each N x h floats; the vocabulary-parallel loss, 3 x N floats
tp = M * ring(t, (4 * L + 2) * 4 * N * h + 3 * 4 * N) + ring(t, 8)      # + the grad-norm sum
# data parallel: this rank's slice of the parameters
P = V // t * h + S * h + L * (2 * h + 3 * h * h // t + 3 * h // t + h * h // t + h + 2 * h
                              + 4 * h * h // t + 4 * h // t + 4 * h * h // t + h) + 2 * h
dpb = ring(dp, 4 * P) + ring(dp, 16)
for l in open(sys.argv[1]):
    if "communication per iteration" in l and "tensor-model-parallel: 0 " not in l:
        c = {k: int(v) for k, v in re.findall(r"\| ([a-z -]+): (\d+)", l)}
last = c
assert last["tensor-model-parallel"] == tp and last["data-parallel"] == dpb, (last, tp, dpb)
print("tensor-parallel %d, data-parallel %d bytes per iteration" % (tp, dpb))
EOF
	ok "--log-comm TP2 x DP2 volumes equal the analytic ones: $(cat "$W/cmp.log")"
else
	notok "--log-comm TP2 x DP2 volumes"
	show "$W/cmp.log"
fi

expect_ok "TP2 + SP with --log-comm" \
	sh -c "$MPI -np 2 $BIN/train $T2 --sequence-parallel --log-comm --log-interval 4 --eval-interval 1000 >$W/csp.log"
if $PY - "$W/csp.log" >"$W/cmp.log" 2>&1 <<'EOF'; then
import re, sys
h, L, S, mbs, gbs, t = 32, 2, 32, 1, 8, 2
N, M = mbs * S, gbs // mbs
def ring(p, n):
    return 2 * (p - 1) * n // p
shard = 4 * N * h // t
# per micro-batch: (10L + 4) all-gathers / reduce-scatters of a [N, h] tensor (each sends
# (t-1) shards: the 8L + 4 that replace TP's all-reduces, and 2L gathers of the norm
# outputs again in backward), the vocabulary-parallel loss; per iteration: the grad-norm
# sum and the LayerNorm gradients (weight and bias, 2 per layer + the final one)
want = M * ((10 * L + 4) * (t - 1) * shard + ring(t, 3 * 4 * N)) + ring(t, 8) + ring(t, 4 * (L * 2 * 2 * h + 2 * h))
got = [int(x) for x in re.findall(r"tensor-model-parallel: (\d+)", open(sys.argv[1]).read())]
assert got[-1] == want, (got, want)
print("%d bytes per iteration" % want)
EOF
	ok "--log-comm TP2 + SP volume equals the analytic one: $(cat "$W/cmp.log")"
else
	notok "--log-comm TP2 + SP volume"
	show "$W/cmp.log"
fi

# initial weights are drawn per global element: the Llama-style model saved at TP2
# (fused QKV per query group, SwiGLU [gate; up]) is bit-identical to the one-rank model
setup "Llama-style init, 1 rank" $BIN/train $T1 $LL --train-iters 0 --save "$W/i1"
expect_ok "Llama-style init, TP2" $MPI -np 2 $BIN/train $T2 $LL --train-iters 0 --save "$W/i2"
if $PY -c "
import h5py, numpy as np
a = h5py.File('$W/i1/iter_0000000/model.h5'); b = h5py.File('$W/i2/iter_0000000/model.h5')
assert sorted(a) == sorted(b) and len(a) > 10
for n in a:
    assert a[n].shape == b[n].shape and np.array_equal(a[n][()], b[n][()]), n
" 2>"$W/py.err"; then
	ok "a TP2 checkpoint equals the one-rank checkpoint tensor for tensor (GQA QKV, SwiGLU fc1 reassembled)"
else
	notok "TP2 vs one-rank initial checkpoint"
	show "$W/py.err"
fi

# a TP2 x DP2 checkpoint (global tensors) resumes on one rank and as TP4 x DP2
expect_ok "TP2 x DP2: 4 iterations, save" \
	sh -c "$MPI -np 4 $BIN/train $T2 --save $W/tck --save-interval 4 --exit-interval 4 >$W/tck.log"
if $PY -c "
import h5py, sys
f = h5py.File('$W/tck/iter_0000004/model.h5')
assert f['embedding.word_embeddings.weight'].shape == (50304, 32)
assert f['decoder.layers.0.self_attention.linear_qkv.weight'].shape == (96, 32)
assert f['decoder.layers.0.self_attention.linear_proj.weight'].shape == (32, 32)
assert f['decoder.layers.1.mlp.linear_fc1.weight'].shape == (128, 32)
" 2>"$W/py.err"; then
	ok "a TP2 checkpoint holds global shapes"
else
	notok "TP2 checkpoint shapes"
	show "$W/py.err"
fi
expect_ok "resume on 1 rank" sh -c "$BIN/train $T1 --load $W/tck --metrics-file $W/tr1.jsonl >$W/tr1.log"
# resuming as TP4 x DP2 (8 ranks) only under make check-long
resumes=tr1
if long_only; then
	expect_ok "resume as TP4 x DP2" \
		sh -c "$MPI -np 8 $BIN/train $T4 --load $W/tck --metrics-file $W/tr4.jsonl >$W/tr4.log"
	resumes="tr1 tr4"
fi
for f in $resumes; do
	resumed "the TP2 x DP2 checkpoint resumed ($f) continues the uninterrupted run (rtol 1e-5)" "$W/t1.jsonl" "$W/$f.jsonl"
done

# killed NAME NP FLAGS...: a rank killed mid-run ends the job, with the launcher
# naming it, well within a minute (mid-run: once iteration 10 is logged; the
# job would run on for a million)
LONG="$(echo "$ARGS" | sed 's/--train-iters 8/--train-iters 1000000/') --eval-interval 1000000 --log-interval 10"
killed() {
	_n=$1
	_np=$2
	shift 2
	$MPI -np "$_np" $BIN/train $LONG "$@" >"$W/kill.log" 2>&1 &
	job=$!
	for i in $(seq 1 120); do grep -q "iteration *10/" "$W/kill.log" 2>/dev/null && break; sleep 0.25; done
	victim=$(pgrep -f "^$BIN/train --num-layers" | sed -n "$_np"p)
	kill -9 "$victim"
	t0=$(date +%s)
	wait $job
	rc=$?
	dt=$(($(date +%s) - t0))
	if [ $rc -ne 0 ] && [ $dt -lt 60 ] && grep -q "process rank [0-9]* .*exited on signal 9" "$W/kill.log"; then
		ok "$_n: a killed rank ends the job in ${dt}s: $(grep -o 'process rank [0-9]*' "$W/kill.log" | head -1) named"
	else
		notok "$_n: killed rank: exit $rc after ${dt}s"
		tail -4 "$W/kill.log" | sed 's/^/#   /'
	fi
}
# stalled NAME NP FLAGS...: a rank that stops (not dead) ends the job after
# --distributed-timeout-minutes, the waiting rank naming its call and group
stalled() {
	_n=$1
	_np=$2
	shift 2
	$MPI -np "$_np" $BIN/train $LONG --distributed-timeout-minutes 0.05 "$@" >"$W/stall.log" 2>&1 &
	job=$!
	for i in $(seq 1 120); do grep -q "iteration *10/" "$W/stall.log" 2>/dev/null && break; sleep 0.25; done
	victim=$(pgrep -f "^$BIN/train --num-layers" | sed -n 2p)
	kill -STOP "$victim"
	t0=$(date +%s)
	wait $job
	rc=$?
	dt=$(($(date +%s) - t0))
	kill -KILL "$victim" 2>/dev/null
	pat="^\[rank [01]\] train: error: [a-z -]* on the [a-z -]* group has waited [0-9]* s (--distributed-timeout-minutes 0.05)"
	if [ $rc -ne 0 ] && [ $dt -lt 60 ] && grep -q "$pat" "$W/stall.log"; then
		ok "$_n: a stalled rank: the others end the job after the timeout (${dt}s): $(grep -o '^\[rank [01]\] train: error: [a-z -]* on the [a-z -]* group' "$W/stall.log" | head -1)"
	else
		notok "$_n: stalled rank: exit $rc after ${dt}s"
		tail -4 "$W/stall.log" | sed 's/^/#   /'
	fi
}
killed "DP4" 4
stalled "DP2" 2
# under pipeline parallelism the waits are receives of activations and gradients
if long_only; then killed "PP2 x DP2" 4 --pipeline-model-parallel-size 2; fi
if long_only; then stalled "PP2" 2 --pipeline-model-parallel-size 2; fi

# srun --mpi=none would start independent copies that overwrite each other's files
expect_fail "several Slurm tasks without MPI are refused" "without MPI" \
	env SLURM_STEP_NUM_TASKS=4 $BIN/train $ARGS
