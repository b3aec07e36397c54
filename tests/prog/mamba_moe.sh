# mamba_moe.sh - hybrid Mamba models with MoE layers (the pattern's E:
# a transformer layer with only its pre-MLP norm and the MoE layer, as
# Megatron's hybrid stack builds it) trained in fp32 against the
# independent PyTorch reference (tests/prog/py/mamba_ref.py, whose MoE is
# torch_ref.py's): --hybrid-layer-pattern M*E- with 4 experts, top-2, a
# shared expert and the load-balancing loss, every iteration's lm loss,
# grad norm and learning rate within rtol 1e-4. Also: the checkpoint's
# names (pre_mlp_layernorm, router, experts of layer 2 only) and its
# recorded pattern, a resume is bit for bit, and an E without
# --num-experts (or the reverse) is refused by name. Under make check-long
# also: expert parallelism (EP2), TP2 with SP and two pipeline stages give
# the one-rank numbers, and the emulated CUDA device the CPU's losses.
. tests/prog_lib.sh
train_test_begin mamba_moe
set -f # the patterns' * are layers, not globs

HYB="--hybrid-layer-pattern M*E- --hidden-size 64 --num-attention-heads 4"
HYB="$HYB --group-query-attention --num-query-groups 2"
HYB="$HYB --mamba-state-dim 16 --mamba-head-dim 16 --mamba-num-groups 2 --normalization RMSNorm"
HYB="$HYB --position-embedding-type none --disable-bias-linear --swiglu --ffn-hidden-size 96"
HYB="$HYB --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-shared-expert-intermediate-size 32"
HYB="$HYB --moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type aux_loss"
COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 $GPT2"
ARGS="$HYB $COMMON"

_ar_m=moe _ar_n=6
reference_ours $ARGS
D=$W/moe
setup "moe: the PyTorch reference from the same model.h5 and index caches" \
	sh -c "$PY tests/prog/py/mamba_ref.py $ARGS --train-iters 6 --data-cache-path $D/cache \
	--ref-model $D/init/iter_0000000/model.h5 --ref-out $D/ref.jsonl"
(
	export RTOL=1e-4
	compare_ref "M*E-: lm loss, grad norm and learning rate match the reference (rtol 1e-4)" \
		"$D/ours.jsonl" "$D/ref.jsonl" 6
)

if $PY - "$D/init/iter_0000000/model.h5" >"$W/names.log" 2>&1 <<'EOF'; then
import json, sys, h5py
f = h5py.File(sys.argv[1], "r")
layer = lambda l: sorted(k for k in f if k.startswith("decoder.layers.%d." % l))
l2 = layer(2)
assert "decoder.layers.2.pre_mlp_layernorm.weight" in l2, l2
assert f["decoder.layers.2.mlp.router.weight"].shape == (4, 64)
assert f["decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.weight"].shape == (96, 64)
assert f["decoder.layers.2.mlp.shared_experts.linear_fc2.weight"].shape == (64, 32)
assert not [k for k in l2 if "self_attention" in k or "linear_fc1.layer_norm" in k], l2
assert not [k for k in layer(3) if "router" in k or "experts" in k], layer(3)
cfg = json.loads(f.attrs["config"])
assert cfg["hybrid_layer_pattern"] == "M*E-", cfg["hybrid_layer_pattern"]
print("%d tensors, pattern %s" % (len(f), cfg["hybrid_layer_pattern"]))
EOF
	ok "model.h5: the E layer's pre-MLP norm, router and experts, the pattern recorded ($(cat "$W/names.log"))"
else
	notok "model.h5 of a hybrid MoE model"
	show "$W/names.log"
fi

if long_only; then # (the E layer is GPT's MoE layer, whose EP2 train_moe.sh checks in make test)
	expect_ok "M*E-: EP2 x DP2, 6 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS --train-iters 6 \
		--expert-model-parallel-size 2 --data-cache-path $D/cache --metrics-file $W/ep2.jsonl >$W/ep2.log"
	compare_same "M*E-: EP2 gives the one-rank lm loss, grad norm and learning rate" "$D/ours.jsonl" "$W/ep2.jsonl" 6
fi
if long_only; then # the mixer, the experts and the shared expert split over TP2 with SP; two pipeline stages
	for lay in tp2 pp2; do
		case $lay in
		tp2) F="--tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 64" ;;
		pp2) F="--pipeline-model-parallel-size 2" ;;
		esac
		expect_ok "M*E-: $lay, 6 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS $F --train-iters 6 \
			--data-cache-path $D/cache --metrics-file $W/$lay.jsonl >$W/$lay.log 2>&1"
		compare_same "M*E-: $lay gives the one-rank numbers" "$D/ours.jsonl" "$W/$lay.jsonl" 6
	done
fi

T="$BIN/train $ARGS --train-iters 6 --data-cache-path $D/cache --save-interval 3"
setup "M*E-: 6 iterations straight" sh -c "$T --save $W/a --metrics-file $W/a.jsonl >$W/a.log"
setup "M*E-: 3 iterations, then stop" sh -c "$T --save $W/b --exit-interval 3 >$W/b1.log"
expect_ok "M*E-: resume from iteration 3" sh -c "$T --load $W/b --save $W/b --metrics-file $W/b.jsonl >$W/b2.log"
if $PY tests/prog/py/compare_metrics.py tail "$W/a.jsonl" "$W/b.jsonl" 4 6 >"$W/cmp.log" 2>&1; then
	ok "M*E-: the resumed run's iterations 4-6 equal the straight run's ($(head -1 "$W/cmp.log"))"
else
	notok "M*E-: resume"
	show "$W/cmp.log"
fi

# (make check-long: the Mamba and MoE CUDA paths each train on the emulated
# device in make test, mamba_train.sh and train_emu.sh)
if long_only && [ -n "${MEGAC_EMU:-}" ] && [ -x "$MEGAC_EMU/bin/train" ]; then
	# shellcheck disable=SC2086 # ARGS is words
	if $MEGAC_EMU/bin/train $ARGS --train-iters 6 --data-cache-path "$D/cache" --metrics-file "$W/emu.jsonl" \
		>"$OUT_LOG" 2>"$ERR" && grep -q "op table cuda" "$ERR" "$OUT_LOG"; then
		(
			export RTOL=1e-5
			compare_same "M*E- on the emulated CUDA device: the CPU's losses" "$D/ours.jsonl" "$W/emu.jsonl" 6
		)
	else
		notok "M*E- on the emulated CUDA device"
		show "$ERR"
	fi
fi

NOTRAIN="--train-iters 1 --data-cache-path $D/cache"
expect_fail "an E layer without --num-experts is refused" "its MoE layers (E) need --num-experts" \
	$BIN/train $COMMON $NOTRAIN --hybrid-layer-pattern 'M*E-' --hidden-size 64 --num-attention-heads 4 \
	--mamba-state-dim 16 --mamba-head-dim 16 --mamba-num-groups 2 --position-embedding-type none
expect_fail "--num-experts with no E layer is refused" "no layer is a MoE layer (E)" \
	$BIN/train $ARGS $NOTRAIN --hybrid-layer-pattern 'M*M-'
