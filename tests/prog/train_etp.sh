# train_etp.sh - expert tensor parallelism (--expert-tensor-parallel-size)
# and the per-EP-rank all-to-all (docs/moe.md, "Expert parallelism").
# A Mixtral-style model (train_moe.sh holds its one-rank run to the PyTorch
# reference): each expert whole on every rank with TP2 + SP (ETP1) and EP2
# on 4 ranks under the distributed optimizer (on 2 ranks without EP too
# under make check-long), and TP2 x EP2 with
# the experts split over expert TP 2 give the one-rank lm loss, grad norm
# and MoE losses per iteration; so does a DeepSeek-style router (sigmoid,
# expert bias, groups, scaling) with ETP1 x TP2 x EP2. A checkpoint saved
# with ETP1 / TP2 / EP2 holds every expert whole and resumes on ETP2 (and
# under make check-long on one rank) with the straight run's losses; report_memory predicts the
# ETP1 run's peak; --log-comm's expert groups carry exactly the volumes of
# tests/prog/py/comm_volume.py (every token to every expert, so the
# routing is balanced): each TP rank's sequence shard once over EP, the
# expert-TP gathers, the experts' gradients over expert-DP. What is not in
# megac yet is refused by name.
. tests/prog_lib.sh
train_test_begin train_etp

COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 --disable-bias-linear $GPT2 --data-cache-path $W/cache"
COMMON="$COMMON --padded-vocab-size 50304"
MIXTRAL="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
MIXTRAL="$MIXTRAL --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 96"
MIXTRAL="$MIXTRAL --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2"
MIXTRAL="$MIXTRAL --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
MIXTRAL="$MIXTRAL --moe-shared-expert-intermediate-size 32"
DEEPSEEK="--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01"
DEEPSEEK="$DEEPSEEK --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5"
DEEPSEEK="$DEEPSEEK --moe-router-load-balancing-type seq_aux_loss"
TPSP="--tensor-model-parallel-size 2 --sequence-parallel"

# same_as NAME NP REF.jsonl ARGS...: a run of 8 iterations on NP ranks
# gives REF's metrics (compare_same)
same_as() {
	_sa_n=$1
	_sa_np=$2
	_sa_ref=$3
	shift 3
	if $MPI -np "$_sa_np" $BIN/train "$@" --train-iters 8 --metrics-file "$W/$_sa_n.jsonl" >"$W/$_sa_n.log" 2>&1; then
		compare_same "$_sa_n: the one-rank lm loss, grad norm and MoE losses" "$W/$_sa_n.jsonl" "$_sa_ref" 8
	else
		notok "$_sa_n (exit $?)"
		show "$W/$_sa_n.log" 4
	fi
}

ARGS="$MIXTRAL $COMMON"
setup "mixtral: the one-rank run" sh -c "$BIN/train $ARGS --train-iters 8 --metrics-file $W/one.jsonl >$W/one.log"
# (ETP1 x TP2 without EP under make check-long: the EP2 run next keeps
# every expert whole on both TP ranks of each EP rank)
if long_only; then
	same_as "ETP1 x TP2 (+SP): every expert whole on both TP ranks" 2 "$W/one.jsonl" $ARGS $TPSP \
		--expert-tensor-parallel-size 1
fi
same_as "ETP1 x TP2 (+SP) x EP2, distributed optimizer" 4 "$W/one.jsonl" $ARGS $TPSP \
	--expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce
same_as "ETP2 x TP2 (+SP) x EP2: the shards' rows gathered over expert TP" 4 "$W/one.jsonl" $ARGS $TPSP \
	--expert-tensor-parallel-size 2 --expert-model-parallel-size 2
if long_only; then
	setup "mixtral: the one-rank run with micro-batches of 1" sh -c "$BIN/train $ARGS --micro-batch-size 1 \
		--train-iters 8 --metrics-file $W/mb1.jsonl >$W/mb1.log"
	same_as "ETP2 x TP1 x DP2: each expert split over two data-parallel ranks" 2 "$W/mb1.jsonl" $ARGS \
		--micro-batch-size 1 --expert-tensor-parallel-size 2
	same_as "ETP1 x TP2 (+SP) x EP2, selective recompute of the MoE layers" 4 "$W/one.jsonl" $ARGS $TPSP \
		--expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --recompute-granularity selective \
		--recompute-modules moe
	same_as "ETP2 x TP2 (+SP) x EP2, the experts' activation recomputed" 4 "$W/one.jsonl" $ARGS $TPSP \
		--expert-model-parallel-size 2 --recompute-granularity selective --recompute-modules moe_act \
		shared_experts --moe-grouped-gemm
	# a capacity factor drops within each TP rank's sequence shard: the
	# dispatched shards keep what TP2 + SP x DP2 keeps
	setup "capacity 1.0: TP2 (+SP) x DP2" sh -c "$MPI -np 4 $BIN/train $ARGS $TPSP --moe-expert-capacity-factor 1.0 \
		--train-iters 8 --metrics-file $W/cap.jsonl >$W/cap.log 2>&1"
	same_as "capacity 1.0, ETP1 x TP2 (+SP) x EP2" 4 "$W/cap.jsonl" $ARGS $TPSP --moe-expert-capacity-factor 1.0 \
		--expert-tensor-parallel-size 1 --expert-model-parallel-size 2
fi

# DeepSeek-V3's routing: the expert bias's counts still cover the global batch
setup "deepseek-style: the one-rank run" sh -c "$BIN/train $ARGS $DEEPSEEK --train-iters 8 \
	--metrics-file $W/ds.jsonl >$W/ds.log"
same_as "deepseek-style router, ETP1 x TP2 (+SP) x EP2" 4 "$W/ds.jsonl" $ARGS $DEEPSEEK $TPSP \
	--expert-tensor-parallel-size 1 --expert-model-parallel-size 2

# a checkpoint saved with ETP1 / TP2 / EP2 (the experts' Adam state sharded
# over expert-DP) holds every expert whole and resumes on one rank and on
# ETP2 x TP2 x EP2
if $MPI -np 4 $BIN/train $ARGS $TPSP --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 \
	--use-distributed-optimizer --train-iters 8 --save "$W/ck" --save-interval 4 --exit-interval 4 \
	>"$W/ck-save.log" 2>&1 && $PY - "$W/ck/iter_0000004" >"$W/ck-h5.log" 2>&1 <<'EOF'; then
import h5py, sys
for f in ("model.h5", "optim.h5"):
    h = h5py.File(sys.argv[1] + "/" + f, "r")
    for g in (("",) if f == "model.h5" else ("exp_avg/", "exp_avg_sq/")):
        for l in range(2):
            for e in range(4):
                for fc, shape in ((1, (96, 64)), (2, (64, 48))):
                    n = "%sdecoder.layers.%d.mlp.experts.local_experts.%d.linear_fc%d.weight" % (g, l, e, fc)
                    assert n in h and h[n].shape == shape, n
EOF
	ok "an ETP1 x TP2 x EP2 checkpoint holds all 4 experts of each layer whole (weights and Adam state)"
else
	notok "ETP1 checkpoint"
	show "$W/ck-save.log" 4
	show "$W/ck-h5.log" 4
fi
# (on one rank under make check-long: train_moe.sh's EP2 checkpoint trains on
# as EP1)
for to in "one rank:1:" "ETP2 x TP2 x EP2:4:$TPSP --expert-model-parallel-size 2"; do
	case $to in "one rank:"*) long_only || continue ;; esac
	name=${to%%:*}
	rest=${to#*:}
	np=${rest%%:*}
	flags=${rest#*:}
	if $MPI -np "$np" $BIN/train $ARGS $flags --train-iters 8 --load "$W/ck" --metrics-file "$W/to$np.jsonl" \
		>"$W/to$np.log" 2>&1 &&
		$PY tests/prog/py/compare_metrics.py tail "$W/one.jsonl" "$W/to$np.jsonl" 5 8 >"$W/cmp.log" 2>&1; then
		ok "the ETP1 checkpoint resumes on $name with the straight run's losses ($(cat "$W/cmp.log"))"
	else
		notok "the ETP1 checkpoint resumed on $name"
		show "$W/to$np.log" 4
		show "$W/cmp.log" 4
	fi
done

# report_memory: the experts whole on each rank, their optimizer part over expert-DP
expect_ok "report_memory for ETP1 x TP2 x EP2" sh -c "$BIN/report_memory $ARGS $TPSP --expert-tensor-parallel-size 1 \
	--expert-model-parallel-size 2 --use-distributed-optimizer --train-iters 8 --world-size 4 --device cpu \
	--json >$W/rm.json"
prediction_close "report_memory predicts the ETP1 x TP2 x EP2 run's peak" "$W/rm.json" "$W/ck-save.log"

# --log-comm: every token to every expert (top-4 of 4), so each EP peer gets
# a known share; the volumes of the expert groups are comm_volume.py's
for lay in "etp1:1" "etp2:2"; do
	name=${lay%%:*}
	etp=${lay#*:}
	if $MPI -np 4 $BIN/train $ARGS --moe-router-topk 4 $TPSP --expert-model-parallel-size 2 \
		--expert-tensor-parallel-size "$etp" --train-iters 5 --eval-interval 1000 --log-comm >"$W/comm-$name.log" \
		2>&1 && $PY tests/prog/py/comm_volume.py "$W/comm-$name.log" h=64 L=2 S=32 V=50304 mbs=2 gbs=4 tp=2 dp=2 \
		sp=1 E=4 topk=4 moeffn=48 ep=2 etp="$etp" swiglu=1 >"$W/vol.log" 2>&1; then
		ok "--log-comm, ETP$etp x TP2 x EP2: each shard's rows once over EP ($(cat "$W/vol.log"))"
	else
		notok "--log-comm volumes, ETP$etp x TP2 x EP2"
		show "$W/comm-$name.log" 4
		show "$W/vol.log" 4
	fi
done

# not yet, or not possible: refused by name
expect_fail "an expert TP size that does not divide the world is refused" \
	"not divisible by --expert-tensor-parallel-size 3" \
	$MPI -np 4 $BIN/train $ARGS --train-iters 1 --expert-tensor-parallel-size 3
expect_fail "--moe-router-force-load-balancing with ETP other than TP is refused" \
	"--moe-router-force-load-balancing with --expert-tensor-parallel-size 1" \
	$MPI -np 2 $BIN/train $ARGS $TPSP --train-iters 1 --expert-tensor-parallel-size 1 \
	--moe-router-force-load-balancing
expect_fail "Megatron-FSDP with ETP other than TP is refused" "with --expert-tensor-parallel-size 1 other than" \
	$MPI -np 2 $BIN/train $ARGS $TPSP --train-iters 1 --expert-tensor-parallel-size 1 --use-megatron-fsdp
