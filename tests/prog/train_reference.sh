# train_reference.sh - train against an independent PyTorch implementation
# of Megatron's math (tests/prog/py/torch_ref.py): from our iteration-0
# model.h5 and our .npy index caches, the reference assembles the same
# batches and must reproduce every iteration's lm loss and grad norm
# (rtol 1e-5), for a GPT-2-style and a Llama-style model, GPT-2 with
# --qk-layernorm (LayerNorm q/k norms with biases, no RoPE) and a
# Qwen-style Llama (--add-qkv-bias, RMSNorm --qk-layernorm before RoPE,
# --use-rope-scaling) and a Mistral-style Llama (a sliding window of 8 keys
# on 32 positions, full attention in every second layer); the Qwen and
# Mistral ones under TP2 (Qwen with SP, and without under make
# check-long) give the one-rank run's
# numbers. A Qwen2-MoE-shaped model (QKV bias, a shared expert with its
# sigmoid gate, softmax over all experts before the top-2, a dense layer
# between two MoE ones) matches the reference over 6 iterations (rtol 1e-4),
# and recompute, TP2 with SP and (under make check-long) EP2 give its
# one-rank numbers. A DeepSeek-V3-style
# one (sigmoid top-k with an expert bias, group-limited routing, a scaling
# factor, a shared expert, an expression for --moe-layer-freq) matches the
# reference over 6 iterations, TP2 with SP and EP2 give its numbers, and a
# resume carries its expert bias bit for bit. Two RoPE variants match the
# reference over 6 iterations on one rank, and the first under TP2 (the
# second too under make check-long): YaRN
# (--position-embedding-type yarn, its correction range inside the rotated
# channels, a concentration factor from --mscale/--mscale-all-dim) with
# interleaved pairs, and --rotary-interleaved on its own with Llama 3.x
# scaling, half the channels rotated and q/k norms. Also: model.h5 names and
# shapes as h5py sees them, and (under make check-long) the reference's own
# self-test. (The nine
# models' reference runs share one torch_ref.py process: torch_ref.py batch.)
. tests/prog_lib.sh
W=$(new_tmp train_ref)
OUT_LOG=$W/out.log
ERR=$W/err.log
# the python3 with torch and h5py, never a fixed path: the one on PATH on the
# GPU machine, Debian's /usr/bin/python3 on a Debian machine when PATH's first lacks torch
PY=$(sh tests/gpu/torch_python.sh torch h5py numpy) || PY=python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# the reference's own self-test (fused vs per-head forward, float64 finite
# differences, about 7 s of CPU) checks torch_ref.py itself, not megac: under
# make check-long (make test holds megac to the reference below, where a
# reference gone wrong shows as a mismatch too)
if long_only; then
	expect_ok "reference self-test (fused vs per-head forward, float64 finite differences)" \
		$PY tests/prog/py/torch_ref.py --self-test
fi
setup "preprocess the bundled corpus" $BIN/preprocess_data --input examples/data/kjv.jsonl.gz \
	--output-prefix "$W/kjv" $GPT2 --append-eod --workers 1 --log-interval 0

COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 $GPT2"
GPT2ARGS="--num-layers 2 --hidden-size 64 --num-attention-heads 4"
LLAMA="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention"
LLAMA="$LLAMA --num-query-groups 2 --position-embedding-type rope --rotary-base 10000"
LLAMA="$LLAMA --normalization RMSNorm --swiglu --ffn-hidden-size 96 --disable-bias-linear"
LLAMA="$LLAMA --untie-embeddings-and-output-weights --eod-mask-loss --reset-position-ids"
LLAMA="$LLAMA --reset-attention-mask"
QWEN="$LLAMA --add-qkv-bias --qk-layernorm --use-rope-scaling --rope-scaling-factor 8 --rotary-base 500000"
MISTRAL="$LLAMA --window-size 7,0 --window-attn-skip-freq 2"

for model in gpt2 llama gpt2qk qwen mistral; do
	case $model in
	gpt2) ARGS="$GPT2ARGS $COMMON" ;;
	llama) ARGS="$LLAMA $COMMON" ;;
	gpt2qk) ARGS="$GPT2ARGS --qk-layernorm $COMMON" ;;
	qwen) ARGS="$QWEN $COMMON" ;;
	mistral) ARGS="$MISTRAL $COMMON" ;;
	esac
	# shellcheck disable=SC2086 # ARGS is words
	reference_later $model 8 $ARGS
done

# RoPE variants: YaRN (interleaved) and interleaved Llama 3.x scaling, 6
# iterations each against the reference, then TP2 against one rank
YARN="$LLAMA --position-embedding-type yarn --rotary-scaling-factor 4 --yarn-original-max-position-embeddings 256"
YARN="$YARN --yarn-beta-fast 16 --mscale 1.0 --mscale-all-dim 0.5 --rotary-interleaved"
INTER="$LLAMA --rotary-interleaved --use-rope-scaling --rope-scaling-factor 8 --rotary-base 500000"
INTER="$INTER --rotary-percent 0.5 --qk-layernorm"
for model in yarn inter; do
	case $model in
	yarn) ARGS="$YARN $COMMON" ;;
	inter) ARGS="$INTER $COMMON" ;;
	esac
	# shellcheck disable=SC2086 # ARGS is words
	reference_later $model 6 $ARGS
done
# a resume with other RoPE settings is refused, naming each
expect_fail "yarn: resuming with another factor, mscale and layout is refused" \
	"--mscale: 1 in the checkpoint, 0.5 from the flags; --rotary-interleaved: on in the checkpoint, off from the flags; --rotary-scaling-factor: 4 in the checkpoint, 8 from the flags" \
	$BIN/train $(echo "$YARN" | sed 's/--rotary-interleaved//; s/--rotary-scaling-factor 4/--rotary-scaling-factor 8/; s/--mscale 1.0/--mscale 0.5/') \
	$COMMON --train-iters 7 --load $W/yarn/init --data-cache-path $W/yarn/cache

# tensor parallelism: the qkv bias splits with the weight's rows; the q/k
# norms' weights are replicated and their gradients summed over TP
MPI="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_mpi_yield_when_idle=1
# (TP2 without SP only under make check-long)
qsp="--sequence-parallel"
long_only && qsp="none --sequence-parallel"
for sp in $qsp; do
	[ "$sp" = none ] && sp=""
	expect_ok "qwen: TP2 $sp 8 iterations" sh -c "$MPI -np 2 $BIN/train $QWEN $COMMON --train-iters 8 \
		--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 $sp --data-cache-path $W/qwen/cache --metrics-file $W/qwen/tp2$sp.jsonl \
		>$W/qwen/tp2.log"
	compare_same "qwen: TP2 $sp equals one rank (lm loss, grad norm, lr)" "$W/qwen/ours.jsonl" "$W/qwen/tp2$sp.jsonl" 8
done

# (the interleaved RoPE under TP2 only under make check-long)
tpm=yarn
long_only && tpm="yarn inter"
for model in $tpm; do
	case $model in
	yarn) ARGS="$YARN $COMMON" ;;
	inter) ARGS="$INTER $COMMON" ;;
	esac
	expect_ok "$model: TP2 6 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS --train-iters 6 \
		--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --data-cache-path $W/$model/cache \
		--metrics-file $W/$model/tp2.jsonl >$W/$model/tp2.log"
	compare_same "$model: TP2 equals one rank (lm loss, grad norm, lr)" "$W/$model/ours.jsonl" "$W/$model/tp2.jsonl" 6
done

expect_ok "mistral: TP2 8 iterations" sh -c "$MPI -np 2 $BIN/train $MISTRAL $COMMON --train-iters 8 \
	--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --data-cache-path $W/mistral/cache \
	--metrics-file $W/mistral/tp2.jsonl >$W/mistral/tp2.log"
compare_same "mistral: TP2 equals one rank (lm loss, grad norm, lr)" "$W/mistral/ours.jsonl" "$W/mistral/tp2.jsonl" 8

# Qwen2-MoE: --moe-shared-expert-gate scales the shared expert's output by
# sigmoid(x . w) per token; routing is --moe-router-pre-softmax
QMOE="$LLAMA --add-qkv-bias --num-experts 4 --moe-router-topk 2 --moe-router-pre-softmax --moe-ffn-hidden-size 32"
QMOE="$QMOE --moe-shared-expert-intermediate-size 48 --moe-shared-expert-gate --moe-aux-loss-coeff 0.001"
QMOE="$QMOE --moe-layer-freq 2 --num-layers 3"
D=$W/qmoe
setup "qwen2-moe: --train-iters 0 --save writes the initial model" \
	$BIN/train $QMOE $COMMON --train-iters 0 --save "$D/init" --data-cache-path "$D/cache"
expect_ok "qwen2-moe: 6 iterations" $BIN/train $QMOE $COMMON --train-iters 6 --data-cache-path "$D/cache" \
	--metrics-file "$D/ours.jsonl"
RTOL=1e-4 # (read when the run is queued)
reference_queue qmoe 6 \
	"qwen2-moe: lm loss, grad norm, lr and load_balancing_loss match the reference (rtol 1e-4)" \
	"$QMOE $COMMON --data-cache-path $D/cache"
unset RTOL
if $PY - "$D/init/iter_0000000/model.h5" >"$W/h5q.log" 2>&1 <<'EOF'; then
import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert f["decoder.layers.0.mlp.shared_experts.gate_weight"].shape == (1, 64)
assert "decoder.layers.1.mlp.shared_experts.gate_weight" not in f  # the dense layer
assert f["decoder.layers.0.self_attention.linear_qkv.bias"].shape == (128,)
EOF
	ok "qwen2-moe: model.h5 holds mlp.shared_experts.gate_weight [1, h] in the MoE layer"
else
	notok "qwen2-moe: model.h5 gate_weight"
	show "$W/h5q.log"
fi
# selective recompute of the MoE layers (which share one set of buffers,
# the gate's too) and full recompute give the same numbers
for rc in "--recompute-granularity selective --recompute-modules moe shared_experts" \
	"--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"; do
	tag=$(echo "$rc" | tr -dc 'a-z0-9')
	expect_ok "qwen2-moe: $rc, 6 iterations" $BIN/train $QMOE $COMMON --train-iters 6 $rc \
		--data-cache-path "$D/cache" --metrics-file "$D/$tag.jsonl"
	compare_same "qwen2-moe: $rc gives the same numbers" "$D/ours.jsonl" "$D/$tag.jsonl" 6
done
# (EP2 only under make check-long: the DeepSeek-V3 routing below runs it)
for par in "--tensor-model-parallel-size 2 --sequence-parallel" "--expert-model-parallel-size 2"; do
	case "$par" in --expert*) long_only || continue ;; esac
	tag=$(echo "$par" | tr -dc 'a-z0-9')
	expect_ok "qwen2-moe: $par, 6 iterations" sh -c "$MPI -np 2 $BIN/train $QMOE $COMMON --train-iters 6 \
		$par --make-vocab-size-divisible-by 64 --data-cache-path $D/cache --metrics-file $D/$tag.jsonl \
		>$D/$tag.log"
	compare_same "qwen2-moe: $par equals one rank" "$D/ours.jsonl" "$D/$tag.jsonl" 6
done

# DeepSeek-V3-style routing: sigmoid scores normalised over the top-2 and
# scaled by 2.5, 8 experts in 2 groups of which each token's come from the
# better one (group-topk 1), an expert bias moved by 0.01 per iteration from
# the global batch's counts (aux-loss-free balancing) beside a small
# seq_aux_loss, a shared expert, and --moe-layer-freq as a Python expression
# with a dense first layer
DFREQ='([0]*1+[1]*2)'
DSV3="$LLAMA --num-layers 3 --num-experts 8 --moe-router-topk 2 --moe-router-score-function sigmoid"
DSV3="$DSV3 --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01 --moe-router-num-groups 2"
DSV3="$DSV3 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5 --moe-ffn-hidden-size 32"
DSV3="$DSV3 --moe-shared-expert-intermediate-size 48 --moe-router-load-balancing-type seq_aux_loss"
DSV3="$DSV3 --moe-aux-loss-coeff 0.001"
D=$W/dsv3
setup "deepseek-v3 routing: --train-iters 0 --save writes the initial model" \
	$BIN/train $DSV3 --moe-layer-freq "$DFREQ" $COMMON --train-iters 0 --save "$D/init" --data-cache-path "$D/cache"
expect_ok "deepseek-v3 routing: 6 iterations" $BIN/train $DSV3 --moe-layer-freq "$DFREQ" $COMMON --train-iters 6 \
	--data-cache-path "$D/cache" --metrics-file "$D/ours.jsonl"
RTOL=1e-4
reference_queue dsv3 6 \
	"deepseek-v3 routing: lm loss, grad norm, lr and seq_load_balancing_loss match the reference (rtol 1e-4)" \
	"$DSV3 --moe-layer-freq '$DFREQ' $COMMON --data-cache-path $D/cache"
unset RTOL
# the nine models' references, queued above, in one torch_ref.py process
reference_batch
for par in "--tensor-model-parallel-size 2 --sequence-parallel" "--expert-model-parallel-size 2"; do
	tag=$(echo "$par" | tr -dc 'a-z0-9')
	expect_ok "deepseek-v3 routing: $par, 6 iterations" sh -c "$MPI -np 2 $BIN/train $DSV3 --moe-layer-freq '$DFREQ' \
		$COMMON --train-iters 6 $par --make-vocab-size-divisible-by 64 --data-cache-path $D/cache \
		--metrics-file $D/$tag.jsonl >$D/$tag.log"
	compare_same "deepseek-v3 routing: $par equals one rank (the bias's counts summed over the batch)" "$D/ours.jsonl" "$D/$tag.jsonl" 6
done
# the expert bias is router state in the checkpoint: 3 + resume 3 is the straight run bit for bit
expect_ok "deepseek-v3 routing: 3 iterations, save" $BIN/train $DSV3 --moe-layer-freq "$DFREQ" $COMMON \
	--train-iters 6 --save "$D/ck" --save-interval 3 --exit-interval 3 --data-cache-path "$D/cache"
expect_ok "deepseek-v3 routing: resume to 6" $BIN/train $DSV3 --moe-layer-freq "$DFREQ" $COMMON --train-iters 6 \
	--load "$D/ck" --data-cache-path "$D/cache" --metrics-file "$D/resumed.jsonl"
if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$D/ours.jsonl" "$D/resumed.jsonl" 4 6 >"$W/cmp.log" 2>&1 &&
	$PY - "$D/ck/iter_0000003/model.h5" >"$W/h5d.log" 2>&1 <<'EOF'; then
import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert "decoder.layers.0.mlp.router.expert_bias" not in f  # the dense first layer
for l in (1, 2):
    b = f["decoder.layers.%d.mlp.router.expert_bias" % l]
    assert b.shape == (8,) and b.dtype == "float32", (b.shape, b.dtype)
    steps = b[()] / 0.01  # three steps of -1, 0 or +1 times the rate
    assert abs(steps - steps.round()).max() < 1e-4 and abs(steps).max() <= 3 and abs(steps).max() > 0, steps
EOF
	ok "deepseek-v3 routing: the resumed run equals the straight one bit for bit; model.h5 holds each MoE layer's mlp.router.expert_bias [8] ($(cat "$W/cmp.log"))"
else
	notok "deepseek-v3 routing: resume with the expert bias"
	show "$W/cmp.log"
	show "$W/h5d.log"
fi

# the served model routes with the checkpoint's bias: megac's forward from
# the iteration-3 checkpoint (tests/tools/megac_logits, the loader
# text_gen_server uses) against the reference's forward with the same bias
if $PY - "$D/ids.npy" <<'EOF' >"$W/ids.log" 2>&1 &&
import numpy as np, sys
np.save(sys.argv[1], (np.arange(1, 33, dtype=np.int64) * 1543 % 50000).reshape(1, 32))
EOF
	$MEGAC_BUILD/tools/megac_logits "$D/ck" "$D/ids.npy" "$D/logits.npy" >"$W/lg.log" 2>&1 &&
	$PY - "$D/ck/iter_0000003/model.h5" "$D/ids.npy" "$D/logits.npy" $DSV3 --moe-layer-freq "$DFREQ" $COMMON \
		>"$W/lg.log" 2>&1 <<'EOF'; then
import sys
import numpy as np
import torch
sys.path.insert(0, "tests/prog/py")
import torch_ref as R
model, ids, ours = sys.argv[1:4]
c = R.model_config(R.parse_args(sys.argv[4:] + ["--train-iters", "1"]), 50304)
P, _ = R.load_model(model, c, torch.float32)
assert sorted(c.ebias) == ["decoder.layers.1.mlp.", "decoder.layers.2.mlp."]
tok = torch.from_numpy(np.load(ids))
S = tok.shape[1]
batch = {"tokens": tok, "position_ids": torch.arange(S)[None],
         "attention_mask": torch.triu(torch.ones(S, S, dtype=torch.bool), 1)[None]}
ours = np.load(ours)
with torch.no_grad():
    ref = R.gpt_forward(P, c, batch, logits_only=True)[..., :ours.shape[-1]].numpy()
    for k in c.ebias:  # a loader that dropped the bias would give these
        c.ebias[k] = torch.zeros_like(c.ebias[k])
    nob = R.gpt_forward(P, c, batch, logits_only=True)[..., :ours.shape[-1]].numpy()
d, dn = np.abs(ours - ref).max(), np.abs(ours - nob).max()
print("max |logit difference| %.2g (%.2g without the bias)" % (d, dn))
assert d < 1e-4 < dn, (d, dn)
EOF
	ok "deepseek-v3 routing: the checkpoint's forward (the serving loader) routes with its bias: $(tail -n 1 "$W/lg.log")"
else
	notok "deepseek-v3 routing: the checkpoint's forward against the reference"
	show "$W/ids.log"
	show "$W/lg.log"
fi

# model.h5 as h5py sees it: Megatron Core names, global shapes, nothing else
if $PY - "$W/llama/init/iter_0000000/model.h5" >"$W/h5.log" 2>&1 <<'EOF'; then
import h5py, sys
f = h5py.File(sys.argv[1], "r")
h, a, g, k, ff, V = 64, 4, 2, 16, 96, 50304
want = {"embedding.word_embeddings.weight": (V, h), "decoder.final_layernorm.weight": (h,),
        "output_layer.weight": (V, h)}
for l in range(2):
    p = "decoder.layers.%d." % l
    want[p + "self_attention.linear_qkv.layer_norm_weight"] = (h,)
    want[p + "self_attention.linear_qkv.weight"] = ((a + 2 * g) * k, h)
    want[p + "self_attention.linear_proj.weight"] = (h, a * k)
    want[p + "mlp.linear_fc1.layer_norm_weight"] = (h,)
    want[p + "mlp.linear_fc1.weight"] = (2 * ff, h)
    want[p + "mlp.linear_fc2.weight"] = (h, ff)
have = {n: f[n].shape for n in f.keys()}
assert have == want, sorted(set(have.items()) ^ set(want.items()))
assert f.attrs["iteration"] == 0
for n in want:
    assert f[n].dtype == "float32"
EOF
	ok "model.h5: h5py finds every tensor under its Megatron Core name with its global shape"
else
	notok "model.h5 names and shapes"
	show "$W/h5.log"
fi
