# mamba_train.sh - hybrid Mamba models trained in fp32 on one rank against an
# independent PyTorch transcription of Megatron's hybrid model
# (tests/prog/py/mamba_ref.py: the chunked SSD scan, torch's conv1d) from our
# iteration-0 model.h5 and index caches, every iteration's lm loss, grad
# norm and learning rate within rtol 1e-4: --hybrid-layer-pattern M*M- (a
# Mamba layer, an attention-only layer, a Mamba layer, an MLP-only layer;
# no position embedding, RMSNorm, SwiGLU, GQA, 2 groups of the Mamba-2
# mixer) for 8 iterations, and *M-M (RoPE, LayerNorm, biases, GELU, tied
# embeddings, one group) for 6. Also, for the first: the names and shapes of
# model.h5 (Megatron's, conv1d.weight without its unit axis), two
# data-parallel ranks give the one-rank numbers (under make check-long also
# with the distributed optimizer, overlapped), and so do two tensor-parallel
# ranks (Megatron's split of the mixer) with sequence parallelism (under make
# check-long also without), and two pipeline stages, each also within the
# reference's rtol; a resume from a checkpoint is bit for bit on one rank
# (under make check-long also at TP2 with SP); the TP2 checkpoint resumes on
# one rank with the one-rank numbers; every
# weight after 8 iterations is the reference's (each tensor within 1e-4 of
# its largest value), and what is not there yet is refused by name.
. tests/prog_lib.sh
train_test_begin mamba_train
set -f # the patterns' * are layers, not globs

expect_ok "reference self-test (the chunked scan against the recurrence, float64)" \
	$PY tests/prog/py/mamba_ref.py --self-test

# Megatron's hybrid example's kind of model and flags: no position embedding,
# RMSNorm, no biases, SwiGLU, GQA in the attention layer, untied output layer,
# the hybrid stack's --spec, no --num-layers (the pattern gives it)
HYB="--hybrid-layer-pattern M*M- --hidden-size 64 --num-attention-heads 4"
HYB="$HYB --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec --use-mcore-models"
HYB="$HYB --group-query-attention --num-query-groups 2"
HYB="$HYB --mamba-state-dim 16 --mamba-head-dim 16 --mamba-num-groups 2 --normalization RMSNorm"
HYB="$HYB --position-embedding-type none --disable-bias-linear --swiglu --ffn-hidden-size 96"
HYB="$HYB --untie-embeddings-and-output-weights"
# and another: RoPE, LayerNorm (in_proj.layer_norm_bias), linear biases and
# GELU in the attention and MLP layers, tied embeddings, one group, 4 heads of 32
HYB2="--hybrid-layer-pattern *M-M --num-layers 4 --hidden-size 64 --num-attention-heads 2"
HYB2="$HYB2 --mamba-state-dim 8 --mamba-head-dim 32 --mamba-num-groups 1 --position-embedding-type rope"
COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 $GPT2"
ARGS="$HYB $COMMON"

# against the reference: 8 iterations (6 for the second model) from the saved initial model
for model in hybrid hybrid2; do
	case $model in
	hybrid) _ar_n=8 MARGS="$ARGS" SAVE="--ref-save $W/$model/ref8.h5" ;;
	hybrid2) _ar_n=6 MARGS="$HYB2 $COMMON" SAVE= ;;
	esac
	_ar_m=$model
	# shellcheck disable=SC2086 # MARGS is words
	reference_ours $MARGS
	setup "$model: the PyTorch reference from the same model.h5 and index caches" \
		sh -c "$PY tests/prog/py/mamba_ref.py $MARGS --train-iters $_ar_n --data-cache-path $D/cache \
		--ref-model $D/init/iter_0000000/model.h5 --ref-out $D/ref.jsonl $SAVE"
	(
		export RTOL=1e-4
		compare_ref "$model: lm loss, grad norm and learning rate match the reference (rtol 1e-4)" \
			"$D/ours.jsonl" "$D/ref.jsonl" $_ar_n
	)
done
D=$W/hybrid

# Megatron's names and shapes (d_inner 128, H 8, G N 32: in_proj 2*128 + 2*32 + 8 rows)
if $PY - "$D/init/iter_0000000/model.h5" >"$W/names.log" 2>&1 <<'EOF'; then
import sys, h5py
f = h5py.File(sys.argv[1], "r")
want = {
    "decoder.layers.0.mixer.in_proj.layer_norm_weight": (64,),
    "decoder.layers.0.mixer.in_proj.weight": (328, 64),
    "decoder.layers.0.mixer.conv1d.weight": (192, 4),
    "decoder.layers.0.mixer.conv1d.bias": (192,),
    "decoder.layers.0.mixer.dt_bias": (8,),
    "decoder.layers.0.mixer.A_log": (8,),
    "decoder.layers.0.mixer.D": (8,),
    "decoder.layers.0.mixer.norm.weight": (128,),
    "decoder.layers.0.mixer.out_proj.weight": (64, 128),
    "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight": (64,),
    "decoder.layers.1.self_attention.linear_qkv.weight": (128, 64),
    "decoder.layers.1.self_attention.linear_proj.weight": (64, 64),
    "decoder.layers.3.mlp.linear_fc1.layer_norm_weight": (64,),
    "decoder.layers.3.mlp.linear_fc2.weight": (64, 96),
    "decoder.final_norm.weight": (64,),
}
for n, s in want.items():
    assert n in f, "no " + n
    assert f[n].shape == s, (n, f[n].shape, s)
layer = lambda l: sorted(k for k in f if k.startswith("decoder.layers.%d." % l))
assert not [k for k in layer(1) if ".mlp." in k], layer(1)
assert not [k for k in layer(3) if "self_attention" in k], layer(3)
assert "decoder.final_layernorm.weight" not in f
assert "embedding.position_embeddings.weight" not in f
A = f["decoder.layers.0.mixer.A_log"][()]
import numpy as np
dt = np.log1p(np.exp(f["decoder.layers.0.mixer.dt_bias"][()]))
assert (np.exp(A) >= 1).all() and (np.exp(A) <= 16).all(), A
assert (dt >= 1e-3 * 0.999).all() and (dt <= 0.1 * 1.001).all(), dt
print("%d tensors" % len(f))
EOF
	ok "model.h5: Megatron's hybrid names and shapes, A and dt in their init ranges ($(cat "$W/names.log"))"
else
	notok "model.h5 names and shapes"
	show "$W/names.log"
fi

# two data-parallel ranks: the one-rank numbers
expect_ok "hybrid: DP2, 8 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS --train-iters 8 \
	--data-cache-path $D/cache --metrics-file $W/dp2.jsonl >$W/dp2.log"
compare_same "hybrid: DP2 gives the one-rank lm loss, grad norm and learning rate" "$D/ours.jsonl" "$W/dp2.jsonl" 8
if long_only; then # the distributed optimizer, its gradient reduce-scatter and parameter gather overlapped
	expect_ok "hybrid: DP2, distributed optimizer, overlapped, 8 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS \
		--train-iters 8 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
		--data-cache-path $D/cache --metrics-file $W/dopt.jsonl >$W/dopt.log"
	compare_same "hybrid: the distributed optimizer gives the one-rank numbers" "$D/ours.jsonl" "$W/dopt.jsonl" 8
fi

# tensor parallelism (each rank holds its share of in_proj's z, x, B, C and
# dt, of conv1d's x, B and C, its heads and groups; out_proj row-parallel),
# with sequence parallelism, and two pipeline stages (M* and M-): the
# one-rank numbers and the reference's. At TP2 the vocabulary is padded to
# one rank's 50304 (divisible by 64 x 2). The SP run saves at 4 and 8.
# (TP2 without SP, and the TP2 run's own resume, under make check-long)
SP2="--tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 64"
LAYS="sp2 pp2"
long_only && LAYS="tp2 $LAYS"
for lay in $LAYS; do
	case $lay in
	tp2) F="--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64" ;;
	sp2) F="$SP2 --save $W/sp2 --save-interval 4" ;;
	pp2) F="--pipeline-model-parallel-size 2" ;;
	esac
	expect_ok "hybrid: $lay, 8 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS $F --train-iters 8 \
		--data-cache-path $D/cache --metrics-file $W/$lay.jsonl >$W/$lay.log 2>&1"
	compare_same "hybrid: $lay gives the one-rank lm loss, grad norm and learning rate" "$D/ours.jsonl" \
		"$W/$lay.jsonl" 8
	(
		export RTOL=1e-4
		compare_ref "hybrid: $lay matches the reference (rtol 1e-4)" "$W/$lay.jsonl" "$D/ref.jsonl" 8
	)
done
# TP2 with SP resumed from its iteration 4: its iterations 5-8 and final
# weights bit for bit; and the same checkpoint on one rank: the one-rank run's
if long_only; then
	expect_ok "hybrid: TP2 with SP, resumed from iteration 4" sh -c "$MPI -np 2 $BIN/train $ARGS $SP2 \
		--train-iters 8 --data-cache-path $D/cache --load $W/sp2 --ckpt-step 4 --save $W/sp2r --save-interval 4 \
		--metrics-file $W/sp2r.jsonl >$W/sp2r.log 2>&1"
	if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/sp2.jsonl" "$W/sp2r.jsonl" 5 8 >"$W/cmp.log" 2>&1 &&
		$PY -c "
import h5py, numpy as np
a = h5py.File('$W/sp2/iter_0000008/model.h5', 'r'); b = h5py.File('$W/sp2r/iter_0000008/model.h5', 'r')
assert sorted(a) == sorted(b)
for n in a: assert np.array_equal(a[n][()], b[n][()]), n
" >>"$W/cmp.log" 2>&1; then
		ok "hybrid: TP2 with SP resumed: iterations 5-8 and final weights equal the straight run's"
	else
		notok "hybrid: TP2 with SP resumed"
		show "$W/cmp.log"
	fi
fi
expect_ok "hybrid: one rank resumes the TP2 checkpoint" sh -c "$BIN/train $ARGS --train-iters 8 \
	--data-cache-path $D/cache --load $W/sp2 --ckpt-step 4 --metrics-file $W/sp2one.jsonl >$W/sp2one.log 2>&1"
if $PY tests/prog/py/compare_metrics.py tail "$D/ours.jsonl" "$W/sp2one.jsonl" 5 8 >"$W/cmp.log" 2>&1; then
	ok "hybrid: one rank from the TP2 checkpoint gives the one-rank iterations 5-8 ($(cat "$W/cmp.log"))"
else
	notok "hybrid: one rank from the TP2 checkpoint"
	show "$W/cmp.log"
fi

# a resume from iteration 4 ends where 8 iterations straight end, whose
# weights are the reference's after its 8 iterations
T="$BIN/train $ARGS --train-iters 8 --data-cache-path $D/cache --save-interval 4"
setup "hybrid: 8 iterations straight" sh -c "$T --save $W/a --metrics-file $W/a.jsonl >$W/a.log"
setup "hybrid: 4 iterations, then stop" sh -c "$T --save $W/b --exit-interval 4 >$W/b1.log"
expect_ok "hybrid: resume from iteration 4" sh -c "$T --load $W/b --save $W/b --metrics-file $W/b.jsonl >$W/b2.log"
if $PY tests/prog/py/compare_metrics.py tail "$W/a.jsonl" "$W/b.jsonl" 5 8 >"$W/cmp.log" 2>&1 &&
	$PY -c "
import h5py, numpy as np
a = h5py.File('$W/a/iter_0000008/model.h5', 'r'); b = h5py.File('$W/b/iter_0000008/model.h5', 'r')
assert sorted(a) == sorted(b)
for n in a: assert np.array_equal(a[n][()], b[n][()]), n
" >>"$W/cmp.log" 2>&1; then
	ok "hybrid: the resumed run's iterations 5-8 and final weights equal the straight run's ($(head -1 "$W/cmp.log"))"
else
	notok "hybrid: resume"
	show "$W/cmp.log"
fi
if $PY - "$W/a/iter_0000008/model.h5" "$W/hybrid/ref8.h5" >"$W/w.log" 2>&1 <<'EOF'; then
import sys, h5py, numpy as np
a, r = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
worst, name = 0.0, None
for n in r:
    x, y = a[n][()].astype(np.float64), r[n][()].astype(np.float64)
    assert x.shape == y.shape, (n, x.shape, y.shape)
    d = float(np.abs(x - y).max() / max(1e-3, np.abs(y).max()))
    if d > worst:
        worst, name = d, n
assert worst <= 1e-4, (name, worst)
print("%d tensors, worst %.1e (%s)" % (len(r), worst, name))
EOF
	ok "hybrid: every weight after 8 iterations is the reference's ($(cat "$W/w.log"))"
else
	notok "hybrid: weights after 8 iterations"
	show "$W/w.log"
fi

# the emulated CUDA device (the CUDA kernels of the Mamba-2 ops, lib/kernels/cuda/ssm.cu)
# trains the first model with the CPU's losses
if [ -n "${MEGAC_EMU:-}" ] && [ -x "$MEGAC_EMU/bin/train" ]; then
	rm -f "$W/emu.jsonl" "$W/cpu.jsonl"
	# shellcheck disable=SC2086 # ARGS is words
	if $MEGAC_EMU/bin/train $ARGS --train-iters 4 --data-cache-path "$W/hybrid/cache" --metrics-file "$W/emu.jsonl" \
		>"$OUT_LOG" 2>"$ERR" && grep -q "op table cuda" "$ERR" "$OUT_LOG" &&
		$BIN/train $ARGS --train-iters 4 --data-cache-path "$W/hybrid/cache" --metrics-file "$W/cpu.jsonl" \
			>"$OUT_LOG" 2>"$ERR"; then
		(
			export RTOL=1e-5
			compare_same "hybrid on the emulated CUDA device: the CPU's losses" "$W/cpu.jsonl" "$W/emu.jsonl" 4
		)
	else
		notok "hybrid on the emulated CUDA device"
		show "$ERR"
	fi
	if long_only; then # TP2 with SP on two emulated devices (NCCL's collectives): the CPU's one-rank losses
		rm -f "$W/emutp.jsonl"
		# shellcheck disable=SC2086 # ARGS and SP2 are words
		if $MPI -np 2 $MEGAC_EMU/bin/train $ARGS $SP2 --train-iters 4 --data-cache-path "$W/hybrid/cache" \
			--metrics-file "$W/emutp.jsonl" >"$OUT_LOG" 2>"$ERR" && grep -q "op table cuda" "$ERR" "$OUT_LOG"; then
			(
				export RTOL=1e-5
				compare_same "hybrid at TP2 with SP on two emulated CUDA devices: the CPU's one-rank losses" \
					"$W/cpu.jsonl" "$W/emutp.jsonl" 4
			)
		else
			notok "hybrid at TP2 with SP on two emulated CUDA devices"
			show "$ERR"
		fi
	fi
fi

# refused by name
NOTRAIN="--train-iters 1 --data-cache-path $D/cache"
expect_fail "pipeline separators in the pattern are refused" "pipeline stage separators" \
	$BIN/train $ARGS $NOTRAIN --hybrid-layer-pattern 'M*|M-'
expect_fail "--bf16 with a hybrid model is refused" "--bf16 and --fp16 with a hybrid Mamba model" \
	$BIN/train $ARGS $NOTRAIN --bf16
expect_fail "--recompute-granularity with a hybrid model is refused" "--recompute-granularity with a hybrid" \
	$BIN/train $ARGS $NOTRAIN --recompute-activations
expect_fail "Mamba groups not divisible by TP are refused" \
	"--mamba-num-groups 1 is not divisible by --tensor-model-parallel-size 2" \
	$MPI -np 2 $BIN/train $ARGS $NOTRAIN --tensor-model-parallel-size 2 --mamba-num-groups 1
expect_fail "context parallelism with a hybrid model is refused" "without --context-parallel-size" \
	$MPI -np 2 $BIN/train $ARGS $NOTRAIN --context-parallel-size 2
expect_fail "heads not divisible by the groups are refused" "--mamba-num-groups 3" \
	$BIN/train $ARGS $NOTRAIN --mamba-num-groups 3
expect_fail "another --spec is refused" "--spec: model specs are not in megac" \
	$BIN/train $ARGS $NOTRAIN --spec megatron.core.models.gpt.gpt_layer_specs get_gpt_layer_local_spec
expect_fail "--position-embedding-type none without a pattern is refused" "for hybrid Mamba models" \
	$BIN/train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --position-embedding-type none $COMMON $NOTRAIN
