# train_mtp.sh - multi-token prediction (--mtp-num-layers, Megatron's
# MultiTokenPredictionBlock) in train: a Llama-shaped dense model and a tiny
# DeepSeek-V3-shaped one (multi-latent attention with q LoRA and its norms,
# a dense first layer then MoE with a shared expert, sigmoid scores with
# expert bias, group-limited routing and a scaling factor), each with one
# depth, and a GPT-shaped one (LayerNorm, learned positions, tied
# embeddings) with two, match the independent PyTorch reference
# (tests/prog/py/torch_ref.py) over 6 iterations: lm loss, grad norm and
# the logged mtp_K losses (rtol 1e-5). TP2 with SP, PP2 (the depth and a
# copy of the untied word embeddings on the last stage), DP2 and EP2,
# Megatron-FSDP's ZeRO-3 over DP2 (also for the GPT shape's tied embeddings
# under check-long), and TP2 with SP with dropout, give the one-rank numbers, and so do context
# parallelism (CP2, and TP2 x CP2 with SP: ids, labels, positions and mask
# rolled on the whole sequence, the depth's layer through the ring) for the
# Llama and DeepSeek-V3 shapes; a resumed run gives
# the uninterrupted one's, and so does the checkpoint resharded to TP2;
# model.h5 holds Megatron's mtp.layers.* names and shapes; the log line and
# the metrics file have "mtp_1 loss"; report_memory's prediction is train's
# peak; the emulated CUDA device gives the CPU's numbers; what is not there
# yet is refused by name.
. tests/prog_lib.sh
train_test_begin train_mtp
PY=$(sh tests/gpu/torch_python.sh torch h5py numpy) || PY=/usr/bin/python3

COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 $GPT2"
LLAMA="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
LLAMA="$LLAMA --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 96"
LLAMA="$LLAMA --disable-bias-linear --untie-embeddings-and-output-weights --mtp-num-layers 1"
DSV3="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --position-embedding-type rope"
DSV3="$DSV3 --normalization RMSNorm --swiglu --ffn-hidden-size 96 --disable-bias-linear"
DSV3="$DSV3 --untie-embeddings-and-output-weights --multi-latent-attention --rope-type rope"
DSV3="$DSV3 --kv-lora-rank 24 --qk-head-dim 12 --qk-pos-emb-head-dim 8 --v-head-dim 16 --q-lora-rank 20 --qk-layernorm"
DSV3="$DSV3 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 48"
DSV3="$DSV3 --moe-layer-freq [0]+[1]*1 --moe-router-score-function sigmoid --moe-router-enable-expert-bias"
DSV3="$DSV3 --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5"
DSV3="$DSV3 --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.001 --mtp-num-layers 1"
DSV3="$DSV3 --mtp-loss-scaling-factor 0.3"
# GPT-shaped (LayerNorm with biases, GELU, learned positions, tied embeddings) with two depths
GPT="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --mtp-num-layers 2"

export RTOL=1e-5
# shellcheck disable=SC2086 # the flag sets are words
reference_later llama 6 $LLAMA $COMMON
# shellcheck disable=SC2086
reference_later dsv3 6 $DSV3 $COMMON
# shellcheck disable=SC2086
reference_later gpt 6 $GPT $COMMON
# the three references in one torch_ref.py process
reference_batch
unset RTOL
if grep -q "mtp_1 loss: [0-9]" "$W/llama/ours.log" && grep -q '"mtp_1 loss"' "$W/llama/ours.jsonl"; then
	ok "llama: the log line and the metrics file have the mtp_1 loss"
else
	notok "llama: no mtp_1 loss in the log line or the metrics file"
	show "$W/llama/ours.log"
fi

# the layouts: TP2 with SP (the depth's layer split as the decoder's, eh_proj
# column-parallel), PP2 (the depth on the last stage with its copy of the
# untied word embeddings), DP2, EP2 (the depth's experts too)
RUNS="llama:--tensor-model-parallel-size_2_--sequence-parallel llama:--pipeline-model-parallel-size_2"
RUNS="$RUNS dsv3:--tensor-model-parallel-size_2_--sequence-parallel"
# Megatron-FSDP (ZeRO-3: weights, gradients and Adam sharded over DP2; the
# depth a unit of its own, gathered and reduce-scattered like a layer)
RUNS="$RUNS dsv3:--use-megatron-fsdp" # (its default strategy: optim_grads_params)
# (DP2, and EP2 that train_deepseek.sh also runs, under make check-long)
if long_only; then
	RUNS="$RUNS llama:--data-parallel-size_2 dsv3:--expert-model-parallel-size_2"
	RUNS="$RUNS dsv3:--pipeline-model-parallel-size_2 llama:--tensor-model-parallel-size_2"
	RUNS="$RUNS gpt:--tensor-model-parallel-size_2_--sequence-parallel"
	RUNS="$RUNS gpt:--use-megatron-fsdp"
fi
for run in $RUNS; do
	model=${run%%:*}
	par=$(echo "${run#*:}" | tr _ ' ' | sed 's/--data-parallel-size 2//')
	tag=$(echo "${run#*:}" | tr -dc 'a-z0-9')
	D=$W/$model
	case $model in llama) ARGS=$LLAMA ;; dsv3) ARGS=$DSV3 ;; gpt) ARGS=$GPT ;; esac
	expect_ok "$model: ${run#*:}, 6 iterations" sh -c "$MPI -np 2 $BIN/train $ARGS $COMMON --train-iters 6 \
		$par --make-vocab-size-divisible-by 64 --data-cache-path $D/cache --metrics-file $D/$tag.jsonl \
		>$D/$tag.log"
	compare_same "$model: ${run#*:} equals one rank" "$D/ours.jsonl" "$D/$tag.jsonl" 6
done

# context parallelism: each rank's depth inputs are the whole sequence's
# rolls at its two chunks' positions (Megatron's roll_tensor over the CP
# group), the depth's layer goes through the ring; CP2 and TP2 x CP2 with SP
# give the one-rank numbers (lm loss, grad norm, mtp_1 loss, rtol 1e-5).
# Under make check-long also Llama TP2 x CP2, and the GPT shape (learned
# positions rolled, two depths) on CP2 with --eod-mask-loss and
# --reset-position-ids (rolled masks and positions across the chunks)
# (DeepSeek-V3's CP2 alone, which train_deepseek.sh also runs, under make check-long)
CPRUNS="llama:2:--context-parallel-size_2"
CPRUNS="$CPRUNS dsv3:4:--context-parallel-size_2_--tensor-model-parallel-size_2_--sequence-parallel"
if long_only; then
	CPRUNS="$CPRUNS dsv3:2:--context-parallel-size_2"
	CPRUNS="$CPRUNS llama:4:--context-parallel-size_2_--tensor-model-parallel-size_2_--sequence-parallel"
	CPRUNS="$CPRUNS gpt:2:--context-parallel-size_2"
fi
for run in $CPRUNS; do
	model=${run%%:*}
	np=$(echo "$run" | cut -d: -f2)
	par=$(echo "$run" | cut -d: -f3 | tr _ ' ')
	tag=$(echo "$run" | cut -d: -f3 | tr -dc 'a-z0-9')
	D=$W/$model
	ref=$D/ours.jsonl
	case $model in llama) ARGS=$LLAMA ;; dsv3) ARGS=$DSV3 ;; gpt) ARGS="$GPT --eod-mask-loss --reset-position-ids" ;; esac
	if [ "$model" = gpt ]; then
		ref=$D/eod.jsonl
		# shellcheck disable=SC2086
		expect_ok "gpt with --eod-mask-loss --reset-position-ids: one rank, 6 iterations" sh -c "$BIN/train \
			$ARGS $COMMON --train-iters 6 --make-vocab-size-divisible-by 64 --data-cache-path $D/cache \
			--metrics-file $ref >$D/eod.log"
	fi
	expect_ok "$model: $par, 6 iterations" sh -c "$MPI -np $np $BIN/train $ARGS $COMMON --train-iters 6 \
		$par --make-vocab-size-divisible-by 64 --data-cache-path $D/cache --metrics-file $D/$tag.jsonl \
		>$D/$tag.log"
	compare_same "$model: $par equals one rank" "$ref" "$D/$tag.jsonl" 6
done

# dropout (the depths' masks drawn by global row from seeds of their own):
# TP2 with SP (and under make check-long PP2) gives the one-rank numbers
DROP="--hidden-dropout 0.1 --attention-dropout 0.1"
D=$W/llama
# shellcheck disable=SC2086
expect_ok "llama with dropout: 6 iterations" sh -c "$BIN/train $LLAMA $COMMON $DROP --train-iters 6 \
	--data-cache-path $D/cache --metrics-file $D/drop.jsonl >$D/drop.log"
PARS="--tensor-model-parallel-size_2_--sequence-parallel"
if long_only; then PARS="$PARS --pipeline-model-parallel-size_2"; fi
for p in $PARS; do
	par=$(echo "$p" | tr _ ' ')
	tag=drop$(echo "$p" | tr -dc 'a-z0-9')
	# shellcheck disable=SC2086
	expect_ok "llama with dropout: $par, 6 iterations" sh -c "$MPI -np 2 $BIN/train $LLAMA $COMMON $DROP \
		--train-iters 6 $par --make-vocab-size-divisible-by 64 --data-cache-path $D/cache \
		--metrics-file $D/$tag.jsonl >$D/$tag.log"
	compare_same "llama with dropout: $par equals one rank" "$D/drop.jsonl" "$D/$tag.jsonl" 6
done

# a checkpoint at iteration 3, resumed to 6, gives the uninterrupted run's numbers;
# resuming with another number of depths is refused by name
for model in llama dsv3; do
	D=$W/$model
	case $model in llama) ARGS=$LLAMA ;; dsv3) ARGS=$DSV3 ;; esac
	# shellcheck disable=SC2086
	setup "$model: 3 iterations, saved" $BIN/train $ARGS $COMMON --train-iters 6 --exit-interval 3 \
		--data-cache-path "$D/cache" --save "$D/ck" --save-interval 3 --metrics-file "$D/first.jsonl"
	# shellcheck disable=SC2086
	expect_ok "$model: resumed from iteration 3 to 6" $BIN/train $ARGS $COMMON --train-iters 6 \
		--data-cache-path "$D/cache" --load "$D/ck" --metrics-file "$D/resumed.jsonl"
	if cat "$D/first.jsonl" "$D/resumed.jsonl" >"$D/both.jsonl" &&
		$PY tests/prog/py/compare_metrics.py same "$D/ours.jsonl" "$D/both.jsonl" 6 >"$W/cmp.log" 2>&1; then
		ok "$model: the resumed run equals the uninterrupted one: $(cat "$W/cmp.log")"
	else
		notok "$model: resumed against uninterrupted"
		show "$W/cmp.log"
	fi
done
# shellcheck disable=SC2086
expect_fail "llama: resuming with another --mtp-num-layers is refused by name" "--mtp-num-layers: 1 in the checkpoint" \
	$BIN/train $(echo "$LLAMA" | sed 's/--mtp-num-layers 1/--mtp-num-layers 2/') $COMMON --train-iters 6 \
	--data-cache-path "$W/llama/cache" --load "$W/llama/ck"
# the checkpoint resharded to TP2 by ckpt_convert (eh_proj split by rows) resumes to the same numbers
setup "llama: ckpt_convert to TP2" $BIN/ckpt_convert --load "$W/llama/ck" --save "$W/llama/tp2" \
	--target-tensor-parallel-size 2 --make-vocab-size-divisible-by 64
# shellcheck disable=SC2086
expect_ok "llama: the TP2 checkpoint resumed on 2 ranks" sh -c "$MPI -np 2 $BIN/train $LLAMA $COMMON --train-iters 6 \
	--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --data-cache-path $W/llama/cache \
	--load $W/llama/tp2 --metrics-file $W/llama/tp2.jsonl >$W/llama/tp2.log"
if $PY tests/prog/py/compare_metrics.py tail "$W/llama/ours.jsonl" "$W/llama/tp2.jsonl" 4 6 >"$W/cmp.log" 2>&1; then
	ok "llama: the resharded checkpoint continues the uninterrupted run: $(cat "$W/cmp.log")"
else
	notok "llama: the resharded checkpoint against the uninterrupted run"
	show "$W/cmp.log"
fi
expect_fail "llama: exporting an MTP checkpoint to Hugging Face is refused by name" "multi-token prediction" \
	$BIN/ckpt_convert --load "$W/llama/ck" --save "$W/hf" --to hf $GPT2

# model.h5: Megatron Core's MTP names and global shapes
if $PY - "$W/llama/init/iter_0000000/model.h5" "$W/dsv3/ck/iter_0000003/model.h5" >"$W/h5.log" 2>&1 <<'EOF'; then
import h5py, sys
h = 64
for path, moe in zip(sys.argv[1:], (False, True)):
    f = h5py.File(path, "r")
    p = "mtp.layers.0."
    want = {p + "enorm.weight": (h,), p + "hnorm.weight": (h,), p + "eh_proj.weight": (h, 2 * h),
            p + "final_layernorm.weight": (h,)}
    t = p + "transformer_layer."
    if moe:
        want[t + "self_attention.linear_q_down_proj.weight"] = (20, h)
        want[t + "pre_mlp_layernorm.weight"] = (h,)
        want[t + "mlp.router.weight"] = (4, h)
        want[t + "mlp.router.expert_bias"] = (4,)
        want[t + "mlp.experts.local_experts.3.linear_fc1.weight"] = (64, h)
        want[t + "mlp.shared_experts.linear_fc2.weight"] = (h, 48)
    else:
        want[t + "self_attention.linear_qkv.layer_norm_weight"] = (h,)
        want[t + "self_attention.linear_qkv.weight"] = ((4 + 2 * 2) * 16, h)
        want[t + "mlp.linear_fc1.weight"] = (192, h)
        want[t + "mlp.linear_fc2.weight"] = (h, 96)
    for n, s in want.items():
        assert n in f, (path, n)
        assert tuple(f[n].shape) == s, (path, n, f[n].shape, s)
    assert not any(k.startswith("decoder.layers.2") for k in f), path
    print(len([k for k in f if k.startswith("mtp.")]), end=" ")
EOF
	ok "model.h5 holds mtp.layers.0.* with Megatron's names and shapes ($(cat "$W/h5.log")tensors)"
else
	notok "model.h5 MTP names"
	show "$W/h5.log"
fi

# report_memory's prediction (train's own allocation plan, the depths
# included) against what train allocated: one rank (the DeepSeek-V3 shape),
# its CP2 run, and the last stage of PP2, which holds the depth
# shellcheck disable=SC2086
setup "dsv3: report_memory --device cpu" sh -c "$BIN/report_memory $DSV3 $COMMON --train-iters 6 --world-size 1 \
	--device cpu --json >$W/dsv3.rm.json"
prediction_close "dsv3: report_memory's prediction within 5% of train's peak" "$W/dsv3.rm.json" "$W/dsv3/ours.log"
if long_only; then # (the CP2 run is check-long's)
	# shellcheck disable=SC2086
	setup "dsv3 CP2: report_memory --device cpu" sh -c "$BIN/report_memory $DSV3 $COMMON --train-iters 6 \
		--world-size 2 --context-parallel-size 2 --make-vocab-size-divisible-by 64 --device cpu --json >$W/cp.rm.json"
	prediction_close "dsv3 CP2: report_memory's prediction within 5% of train's peak" "$W/cp.rm.json" \
		"$W/dsv3/contextparallelsize2.log"
fi
# shellcheck disable=SC2086
setup "llama PP2: report_memory --device cpu" sh -c "$BIN/report_memory $LLAMA $COMMON --train-iters 6 \
	--world-size 2 --pipeline-model-parallel-size 2 --make-vocab-size-divisible-by 64 --device cpu --json \
	>$W/pp.rm.json"
_meas=$(grep -o "Rank 1\] (after 1 iterations) memory (MB) | allocated: [0-9.]* | max allocated: [0-9.]*" \
	"$W/llama/pipelinemodelparallelsize2.log" | sed 's/.*max allocated: //')
if $PY - "$W/pp.rm.json" "$_meas" >"$W/pred.txt" 2>&1 <<'EOF'; then
import json, sys
r = json.load(open(sys.argv[1]))["megac"]["ranks"]
pred, meas = [x for x in r if x["pp_stage"] == 1][0]["peak_MB"], float(sys.argv[2])
assert abs(pred - meas) <= 0.05 * meas, (pred, meas)
print(f"predicted {pred:.2f} MB, measured {meas:.2f} MB")
EOF
	ok "llama PP2: report_memory's last stage (with the depth) within 5% of train's: $(cat "$W/pred.txt")"
else
	notok "llama PP2: report_memory's last stage"
	show "$W/pred.txt"
fi

# the emulated CUDA device's kernels (and NCCL stand-in) give the CPU's
# numbers for the first 3 iterations: Llama on one rank; under make
# check-long the DeepSeek-V3 shape, and Llama with TP2 and SP and with CP2
EMU_RUNS="llama:1:"
if long_only; then
	EMU_RUNS="$EMU_RUNS dsv3:1: llama:2:--tensor-model-parallel-size_2_--sequence-parallel"
	EMU_RUNS="$EMU_RUNS llama:2:--context-parallel-size_2"
fi
for run in $EMU_RUNS; do
	[ -n "${MEGAC_EMU:-}" ] || break
	model=${run%%:*}
	np=$(echo "$run" | cut -d: -f2)
	par=$(echo "$run" | cut -d: -f3 | tr _ ' ')
	tag=$(echo "$run" | cut -d: -f3 | tr -dc 'a-z0-9')
	D=$W/$model
	case $model in llama) ARGS=$LLAMA ;; dsv3) ARGS=$DSV3 ;; esac
	expect_ok "$model: the emulated CUDA device on $np rank(s)${par:+ with $par}, 3 iterations" sh -c "$MPI -np $np \
		$MEGAC_EMU/bin/train $ARGS $COMMON $par --make-vocab-size-divisible-by 64 --train-iters 6 --exit-interval 3 \
		--device cuda --data-cache-path $D/cache --metrics-file $D/emu$np$tag.jsonl >$D/emu$np$tag.log"
	if RTOL=1e-4 $PY tests/prog/py/compare_metrics.py tail "$D/ours.jsonl" "$D/emu$np$tag.jsonl" 1 3 >"$W/cmp.log" 2>&1
	then
		ok "$model: the emulated device${par:+ with $par} equals the CPU (rtol 1e-4): $(cat "$W/cmp.log")"
	else
		notok "$model: the emulated device${par:+ with $par} against the CPU"
		show "$W/cmp.log"
	fi
done

# not there yet: refused by name
# shellcheck disable=SC2086
expect_fail "--mtp-use-repeated-layer is refused by name" "--mtp-use-repeated-layer" \
	$BIN/train $LLAMA $COMMON --train-iters 1 --mtp-use-repeated-layer
