# train_pipe.sh - pipeline and context parallelism on 8 ranks: the
# layouts TP2xPP2xDP2, PP2 with two virtual stages xDP4 and CP2xTP2xDP2 (and
# under make check-long TP4+SP xDP2 and DP8 with the distributed optimizer,
# whose checks train_dist.sh makes on 4 and 8 ranks), for a Llama-style model
# (a GPT-2-style one too under make check-long) with dropout on, give the lm
# loss and grad norm of the one-rank run at
# every iteration (rtol 1e-5); --log-comm's bytes per group equal the analytic
# volumes of tests/prog/py/comm_volume.py (docs/parallel.md); a TP2xPP2xDP2
# checkpoint resumes on 1 rank (after it moved; in place too under make
# check-long) and as TP4xDP2 with the uninterrupted losses, and
# checkpoints are the same files whatever layout wrote them. Uneven stages
# (--decoder-first/last-pipeline-num-layers) on PP2 and PP3 give the one-rank
# losses too. --reset-attention-mask with --eod-mask-loss on CP2 gives the
# one-rank losses.
. tests/prog_lib.sh
train_test_begin train_pipe

# The vocabulary is padded to a multiple of 64 in every layout (Megatron pads to
# divisible-by x TP), so that all runs train the same model.
ARGS="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 1 --global-batch-size 8 --lr 2e-3 --lr-decay-style cosine --lr-warmup-iters 2"
ARGS="$ARGS --train-iters 8 --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 2"
ARGS="$ARGS --log-interval 1 --data-cache-path $W/cache $GPT2 --hidden-dropout 0.1 --attention-dropout 0.1"
ARGS="$ARGS --distributed-timeout-minutes 1"
LL="--position-embedding-type rope --normalization RMSNorm --swiglu --num-attention-heads 8 --group-query-attention"
LL="$LL --num-query-groups 4"
LL="$LL --untie-embeddings-and-output-weights --disable-bias-linear"
V64="--make-vocab-size-divisible-by"
v64() { echo "$V64 $((64 / $1))"; } # v64 TP

# name flags...: a run's metrics in $W/name.jsonl, its log in $W/name.log
run() {
	_n=$1
	shift
	expect_ok "$_n" sh -c "$* --metrics-file $W/$_n.jsonl >$W/$_n.log"
}
compare() {
	if $PY tests/prog/py/compare_metrics.py same "$2" "$3" 8 >"$W/cmp.log" 2>&1; then
		ok "$1: $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
# volume NAME LOG key=value...: --log-comm lines against the analytic volumes
volume() {
	_n=$1
	_l=$2
	shift 2
	if $PY tests/prog/py/comm_volume.py "$_l" h=32 L=4 S=32 V=50304 mbs=1 gbs=8 "$@" >"$W/vol.log" 2>&1; then
		ok "$_n: bytes per iteration as analysed ($(cat "$W/vol.log"))"
	else
		notok "$_n: --log-comm volumes"
		show "$W/vol.log"
	fi
}

# the one-rank runs every layout is held to; they also save at iterations 4
# and 8 for the checkpoint checks below (their straight runs)
run g1 $BIN/train $ARGS $(v64 1) --save $W/gc1 --save-interval 4
run l1 $BIN/train $ARGS $LL $(v64 1) --save $W/lc1 --save-interval 4
# the GPT model's layouts under make check-long (the Llama one, with GQA,
# SwiGLU and RoPE, always)
models=l
long_only && models="g l"
for m in $models; do
	M=""
	LLAMA=0
	if [ $m = l ]; then M=$LL; LLAMA=1; fi
	# the Llama-style model: 8 heads of 4 channels in 4 groups, SwiGLU of 64 (Megatron's 2/3 x 4h rounded down to 64)
	ML="llama=$LLAMA heads=$([ $m = l ] && echo 8 || echo 4) groups=4 ffn=$([ $m = l ] && echo 64 || echo 128)"
	run ${m}_tp2pp2dp2 $MPI -np 8 $BIN/train $ARGS $M $(v64 2) --log-comm \
		--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
	run ${m}_pp2v2dp4 $MPI -np 8 $BIN/train $ARGS $M $(v64 1) --log-comm \
		--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
	run ${m}_cp2tp2dp2 $MPI -np 8 $BIN/train $ARGS $M $(v64 2) --log-comm \
		--context-parallel-size 2 --tensor-model-parallel-size 2
	lays="tp2pp2dp2 pp2v2dp4 cp2tp2dp2"
	# TP4+SP xDP2 and DP8 with the distributed optimizer under make check-long:
	# train_dist.sh runs TP4 + SP and Llama TP2 x DP2 + SP (each against one
	# rank) and TP2 + SP's --log-comm volume, and DP8 with the distributed
	# optimizer against one rank and DP4's --log-comm volume with it
	if long_only; then
		run ${m}_tp4spdp2 $MPI -np 8 $BIN/train $ARGS $M $(v64 4) --log-comm \
			--tensor-model-parallel-size 4 --sequence-parallel
		run ${m}_dp8 $MPI -np 8 $BIN/train $ARGS $M $(v64 1) --log-comm --use-distributed-optimizer
		lays="$lays tp4spdp2 dp8"
	fi
	for lay in $lays; do
		compare "$m $lay equals one rank (lm loss, grad norm, lr)" "$W/${m}1.jsonl" "$W/${m}_$lay.jsonl"
	done
	volume "$m TP2xPP2xDP2" "$W/${m}_tp2pp2dp2.log" $ML tp=2 pp=2 dp=2
	volume "$m PP2 (2 virtual stages) xDP4" "$W/${m}_pp2v2dp4.log" $ML pp=2 vpp=2 dp=4
	volume "$m CP2xTP2xDP2" "$W/${m}_cp2tp2dp2.log" $ML cp=2 tp=2 dp=2
	if long_only; then
		volume "$m TP4+SP xDP2" "$W/${m}_tp4spdp2.log" $ML tp=4 sp=1 dp=2
		volume "$m DP8, distributed optimizer" "$W/${m}_dp8.log" $ML dp=8 distopt=1
	fi
done

# more schedules: PP4 with full recompute (one layer per stage), PP2 interleaved
# with a larger micro-batch group, CP4
run pp4rc $MPI -np 4 $BIN/train $ARGS $(v64 1) --pipeline-model-parallel-size 4 --recompute-granularity full \
	--recompute-method uniform --recompute-num-layers 1
compare "PP4 with full recompute equals one rank" "$W/g1.jsonl" "$W/pp4rc.jsonl"
run pp2g4 $MPI -np 2 $BIN/train $ARGS $(v64 1) --pipeline-model-parallel-size 2 \
	--num-virtual-stages-per-pipeline-rank 2 --microbatch-group-size-per-virtual-pipeline-stage 4
compare "PP2 interleaved, micro-batch groups of 4, equals one rank" "$W/g1.jsonl" "$W/pp2g4.jsonl"
if long_only; then # (CP2 x TP2 x DP2 above runs always)
	run cp4 $MPI -np 4 $BIN/train $ARGS $LL $(v64 1) --context-parallel-size 4
	compare "Llama CP4 equals one rank" "$W/l1.jsonl" "$W/cp4.jsonl"
fi
# uneven stages (Megatron's --decoder-first/last-pipeline-num-layers): 1 + 3
# layers on PP2, 1 + 2 + 1 on PP3; the PP2 checkpoint's stage file holds
# layers 1-3, and the split that does not divide is refused naming the flags
run pp2f1 $MPI -np 2 $BIN/train $ARGS $(v64 1) --pipeline-model-parallel-size 2 \
	--decoder-first-pipeline-num-layers 1 --save $W/uneven --save-interval 8
compare "PP2 with one layer on the first stage (1 + 3) equals one rank" "$W/g1.jsonl" "$W/pp2f1.jsonl"
run pp3fl $MPI -np 3 $BIN/train $ARGS $LL $(v64 1) --pipeline-model-parallel-size 3 \
	--decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1
compare "Llama PP3 with one layer on the first and last stages (1 + 2 + 1) equals one rank" \
	"$W/l1.jsonl" "$W/pp3fl.jsonl"
if $PY - "$W/uneven/iter_0000008" >"$W/cmp.log" 2>&1 <<'PYEOF'; then
import h5py, re, sys
def layers(path):
    f = h5py.File(path, "r")
    names = [n for n in f if f.get(n, getlink=True).__class__.__name__ == "HardLink"]
    return sorted({int(m.group(1)) for n in names for m in [re.match(r"decoder\.layers\.(\d+)\.", n)] if m})
a, b = layers(sys.argv[1] + "/model.h5"), layers(sys.argv[1] + "/model.stage-001.h5")
assert (a, b) == ([0], [1, 2, 3]), (a, b)
print("stage 0 writes layer 0, stage 1 layers 1-3")
PYEOF
	ok "PP2 uneven checkpoint: $(cat "$W/cmp.log")"
else
	notok "PP2 uneven checkpoint's stage files"
	show "$W/cmp.log"
fi
expect_fail "uneven stages that do not divide over the model chunks are refused" \
	"--decoder-first-pipeline-num-layers 1" $MPI -np 2 $BIN/train $ARGS $(v64 1) --pipeline-model-parallel-size 2 \
	--num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 1
# gradients reduced in buckets of 5000 parameters while backward runs
# (--overlap-grad-reduce): all-reduce, and reduce-scatter for the distributed
# optimizer, with the late buckets of SP norms and tied embeddings
O="--overlap-grad-reduce --ddp-bucket-size 5000"
run ov1 $MPI -np 8 $BIN/train $ARGS $(v64 2) $O --use-distributed-optimizer --overlap-param-gather \
	--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel
compare "overlapped buckets and parameter gathers, TP2xPP2xDP2 + SP, distributed optimizer, equal one rank" \
	"$W/g1.jsonl" "$W/ov1.jsonl"
# in bf16 (whose layouts differ from one rank by rounding) overlapping changes nothing at all
run bf $MPI -np 8 $BIN/train $ARGS $(v64 1) --bf16 --use-distributed-optimizer --pipeline-model-parallel-size 2 \
	--num-virtual-stages-per-pipeline-rank 2
run bfo $MPI -np 8 $BIN/train $ARGS $(v64 1) --bf16 --use-distributed-optimizer --pipeline-model-parallel-size 2 \
	--num-virtual-stages-per-pipeline-rank 2 $O --overlap-param-gather
if $PY - "$W/bf.jsonl" "$W/bfo.jsonl" >"$W/cmp.log" 2>&1 <<'PYEOF'; then
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = ("lm loss of the iteration", "grad norm", "validation lm loss")
va = [[r.get(k) for k in keys] for r in a]
assert len(va) >= 8 and va == [[r.get(k) for k in keys] for r in b], "differ"
print("%d lines equal" % len(va))
PYEOF
	ok "bf16 PP2 interleaved xDP4: overlapped reduce and gather give bit-identical losses ($(cat "$W/cmp.log"))"
else
	notok "bf16 overlap vs not"
	show "$W/cmp.log"
fi
# two more overlapped layouts under make check-long (the bf16 pair above
# already runs the interleaved PP2 x DP4 overlap)
if long_only; then
	run ov2 $MPI -np 8 $BIN/train $ARGS $LL $(v64 2) $O --context-parallel-size 2 --tensor-model-parallel-size 2
	compare "overlapped buckets, Llama CP2xTP2xDP2, equal one rank" "$W/l1.jsonl" "$W/ov2.jsonl"
	run ov3 $MPI -np 8 $BIN/train $ARGS $(v64 1) $O --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
	compare "overlapped buckets, PP2 interleaved xDP4, equal one rank" "$W/g1.jsonl" "$W/ov3.jsonl"
fi

if [ "$(grep -c "iteration .*/ *8 |" "$W/l_tp2pp2dp2.log")" -eq 8 ] &&
	[ "$(grep -c "validation loss at iteration" "$W/l_tp2pp2dp2.log")" -eq 3 ]; then
	ok "TP2xPP2xDP2: one iteration line per iteration and the validation lines, from the last rank"
else
	notok "TP2xPP2xDP2 log lines"
	show "$W/l_tp2pp2dp2.log"
fi

# Packed sequences under context parallelism: --reset-attention-mask (documents
# end inside the 32-token sequences of this corpus, so the masks change the
# losses) with --eod-mask-loss on CP2, ring attention masking documents on
# global positions, gives the one-rank losses (dropout on)
DOCM="--reset-attention-mask --eod-mask-loss"
run l1doc $BIN/train $ARGS $LL $(v64 1) $DOCM
run l1eod $BIN/train $ARGS $LL $(v64 1) --eod-mask-loss
run l_cp2doc $MPI -np 2 $BIN/train $ARGS $LL $(v64 1) $DOCM --context-parallel-size 2
compare "Llama CP2 with --reset-attention-mask --eod-mask-loss equals one rank" "$W/l1doc.jsonl" "$W/l_cp2doc.jsonl"
if $PY tests/prog/py/compare_metrics.py same "$W/l1eod.jsonl" "$W/l1doc.jsonl" 8 >"$W/cmp.log" 2>&1; then
	notok "the document masks change nothing: no document ends inside a sequence, the check tells nothing"
else
	ok "the document masks change the one-rank losses of --eod-mask-loss alone (documents end inside sequences)"
fi

# Megatron's pipeline rules, before anything runs
expect_fail "context parallelism needs the sequence in 2 x CP chunks" "not a multiple of 2 * --context-parallel-size 4" \
	$MPI -np 4 $BIN/train $ARGS --context-parallel-size 4 --seq-length 28 --max-position-embeddings 32
expect_fail "interleaving needs pipeline parallelism" "needs --pipeline-model-parallel-size > 1" \
	$BIN/train $ARGS --num-virtual-stages-per-pipeline-rank 2

# Checkpoints do not depend on the layout that wrote them (pipeline stages send
# their tensors to rank 0): the initial model saved as TP2xPP2xDP2 is the
# one-rank file bit for bit; a TP2xPP2xDP2 checkpoint of iteration 4 resumes on
# one rank and as TP4xDP2 with the straight run's iterations 5-8; a one-rank
# checkpoint loaded as PP2 (interleaved, distributed optimizer) and saved again
# is unchanged.
ckpt_cmp() { # NAME MODE A B
	if $PY tests/prog/py/ckpt_compare.py "$2" "$3" "$4" >"$W/cmp.log" 2>&1; then
		ok "$1: $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
resumed() {
	if $PY tests/prog/py/compare_metrics.py tail "$2" "$3" 5 8 >"$W/cmp.log" 2>&1; then
		ok "$1"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
for m in g l; do
	M=""
	[ $m = l ] && M=$LL
	setup "$m: initial model, 1 rank" sh -c "$BIN/train $ARGS $M $(v64 1) --train-iters 0 --save $W/${m}i1 >$W/${m}i1.log"
	expect_ok "$m: initial model, TP2xPP2xDP2" sh -c "$MPI -np 8 $BIN/train $ARGS $M $(v64 2) --train-iters 0 \
		--save $W/${m}i8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 >$W/${m}i8.log"
	ckpt_cmp "$m: the TP2xPP2xDP2 initial checkpoint is the one-rank one" exact $W/${m}i1/iter_0000000 \
		$W/${m}i8/iter_0000000
	# (one rank, saved at 4 and 8: the run ${m}1 above, $W/${m}c1 and $W/${m}1.jsonl)
	expect_ok "$m: TP2xPP2xDP2, 4 iterations, save" sh -c "$MPI -np 8 $BIN/train $ARGS $M $(v64 2) --save $W/${m}c8 \
		--save-interval 4 --exit-interval 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 >$W/${m}c8.log"
	ckpt_cmp "$m: TP2xPP2xDP2 iteration 4 matches one rank's" close $W/${m}c1/iter_0000004 $W/${m}c8/iter_0000004
	# (the one-rank resume in place under make check-long: the GPT model's
	# checkpoint resumes on one rank after it moved, below, through the same
	# stage files and links)
	if long_only; then
		expect_ok "$m: resume on 1 rank" sh -c "$BIN/train $ARGS $M $(v64 1) --load $W/${m}c8 \
			--metrics-file $W/${m}r1.jsonl >$W/${m}r1.log"
		resumed "$m: the TP2xPP2xDP2 checkpoint resumed on 1 rank continues the straight run (rtol 1e-5)" \
			$W/${m}1.jsonl $W/${m}r1.jsonl
	fi
	# the Llama-style model's other two reloads only under make check-long
	[ $m = l ] && ! long_only && continue
	expect_ok "$m: resume as TP4xDP2" sh -c "$MPI -np 8 $BIN/train $ARGS $M $(v64 4) --load $W/${m}c8 \
		--tensor-model-parallel-size 4 --metrics-file $W/${m}r4.jsonl >$W/${m}r4.log"
	resumed "$m: the TP2xPP2xDP2 checkpoint resumed as TP4xDP2 continues the straight run (rtol 1e-5)" \
		$W/${m}1.jsonl $W/${m}r4.jsonl
	expect_ok "$m: load the one-rank iteration 8 as PP2 interleaved, distributed optimizer, save" sh -c "$MPI -np 8 \
		$BIN/train $ARGS $M $(v64 1) --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
		--use-distributed-optimizer --eval-iters 0 --load $W/${m}c1 --save $W/${m}rt --save-interval 3 \
		--use-checkpoint-opt-param-scheduler >$W/${m}rt.log"
	ckpt_cmp "$m: saved again by PP2 interleaved, it is unchanged" exact $W/${m}c1/iter_0000008 $W/${m}rt/iter_0000008
done

# a save whose writes fail on rank 0 only (its disk fills up) ends every rank
# of a TP2xPP2xDP2 job with the error, quickly, and publishes nothing
start=$(date +%s)
expect_fail "TP2xPP2xDP2: rank 0's save fails, every rank stops" "could not save the checkpoint" \
	$MPI -np 8 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then trap "" XFSZ; ulimit -f 2000; fi; exec "$0" "$@"' \
	$BIN/train $ARGS $(v64 2) --train-iters 0 --save $W/full --tensor-model-parallel-size 2 \
	--pipeline-model-parallel-size 2
took=$(($(date +%s) - start))
if [ -z "$(ls -A "$W/full" 2>/dev/null)" ] && [ $took -lt 30 ] && ! grep -q "signal 11" "$ERR"; then
	ok "the failed PP save left nothing behind and took ${took}s"
else
	notok "failed PP save: ${took}s, left $(ls -A "$W/full" 2>/dev/null)"
	show "$ERR"
fi

# Each pipeline stage's leader writes its own stage's files in parallel
# (docs/checkpoint-format.md): a PP2 checkpoint holds model.h5 and optim.h5
# (stage 0) plus model.stage-001.h5 and optim.stage-001.h5, and reaches every
# stage-1 tensor from model.h5 / optim.h5 through a relative external link
# under its own name; h5py opening model.h5 alone reads every tensor, with the
# one-rank checkpoint's names and shapes; one rank writes only the two files.
# The links still resolve (for h5py and for train) after the save directory
# moves.
for m in g l; do
	ckpt_cmp "$m: TP2xPP2xDP2 initial checkpoint: stage files, links from model.h5/optim.h5, the one-rank tensors" \
		exact $W/${m}i1/iter_0000000 $W/${m}i8/iter_0000000 2
done
if [ "$(ls $W/gi1/iter_0000000 | tr '\n' ' ')" = "model.h5 optim.h5 " ]; then
	ok "one rank writes model.h5 and optim.h5 only"
else
	notok "one rank's files: $(ls $W/gi1/iter_0000000 | tr '\n' ' ')"
fi
mv $W/gc8 $W/gc8moved
ckpt_cmp "g: the TP2xPP2xDP2 checkpoint moved elsewhere still reads through its links (h5py)" close \
	$W/gc1/iter_0000004 $W/gc8moved/iter_0000004 2
expect_ok "g: resume on 1 rank from the moved TP2xPP2xDP2 checkpoint" sh -c "$BIN/train $ARGS $(v64 1) \
	--load $W/gc8moved --metrics-file $W/gr1m.jsonl >$W/gr1m.log"
resumed "g: the moved TP2xPP2xDP2 checkpoint resumed on 1 rank continues the straight run (rtol 1e-5)" \
	$W/g1.jsonl $W/gr1m.jsonl
expect_ok "PP2 with --no-save-optim" sh -c "$MPI -np 2 $BIN/train $ARGS $(v64 1) --train-iters 0 --no-save-optim \
	--save $W/nopt --pipeline-model-parallel-size 2 >$W/nopt.log"
if [ "$(ls $W/nopt/iter_0000000 | tr '\n' ' ')" = "model.h5 model.stage-001.h5 " ]; then
	ok "PP2 with --no-save-optim writes model.h5 and model.stage-001.h5"
else
	notok "PP2 --no-save-optim files: $(ls $W/nopt/iter_0000000 | tr '\n' ' ')"
fi

# a save whose writes fail on the leader of pipeline stage 1 only (world rank
# 4 of TP2xPP2xDP2; its file size limit is below the untied output layer's
# 6.4 MB) ends every rank with an error naming the failure, quickly, and
# commits nothing: no iteration, no tracker, no stage files left. (mpirun
# kills the ranks still running once the first one exits with an error, so
# not every rank's message always reaches the log.)
start=$(date +%s)
expect_fail "TP2xPP2xDP2: stage 1's save fails, every rank stops" "the writer of pipeline stage 1 failed" \
	$MPI -np 8 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 4 ]; then trap "" XFSZ; ulimit -f 2000; fi; exec "$0" "$@"' \
	$BIN/train $ARGS $LL $(v64 2) --train-iters 0 --save $W/full1 --tensor-model-parallel-size 2 \
	--pipeline-model-parallel-size 2
took=$(($(date +%s) - start))
nerr=$(grep -c "could not save the checkpoint of iteration 0" "$ERR")
if [ -z "$(ls -A "$W/full1" 2>/dev/null)" ] && [ $took -lt 30 ] && ! grep -q "signal 11" "$ERR" &&
	grep -q "^\[rank 4\] .*stage-001.h5.*File too large" "$ERR"; then
	ok "the save failing on stage 1 left nothing behind and took ${took}s; $nerr of 8 ranks' errors logged"
else
	notok "failed stage-1 save: ${took}s, $nerr ranks reported, left $(ls -A "$W/full1" 2>/dev/null)"
	show "$ERR" 20
fi
