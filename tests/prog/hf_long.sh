# hf_long.sh - ckpt_convert against the real transformers classes that
# tests/py-env.sh's transformers 4.49 predates, under the second reference
# environment (tests/py-env-long.sh: torch 2.5.1, transformers 4.53.3). make
# check-long only (MEGAC_LONG=1): the environment is a 3 GB download made
# once. Random Qwen3ForCausalLMs written by transformers' own Qwen3 class
# (GQA, head_dim 24 of hidden 64, q/k norms; untied with rope_scaling llama3,
# and tied) import with transformers' logits (1e-4) and export back to the
# same tensors and a config that 4.53.3 loads as Qwen3ForCausalLM, giving
# megac's logits again. The Llama-based stand-in that hf_ref.py builds for
# Qwen3 under 4.49 (what make test's ckpt_convert.sh checks against) gives
# the real class's logits on the same folder, both on a folder the real class
# wrote and on one the stand-in wrote. A random Qwen3MoeForCausalLM
# (norm_topk_prob true and false, a dense layer) imports with transformers'
# logits and exports back the same; a megac model trained with q/k norms and
# experts exports as one with megac's logits, and one with a shared expert
# (which Qwen3-MoE lacks) is refused, as is such a config.json. Random
# DeepseekV3ForCausalLMs (YaRN, groups, rope_interleave true and false)
# import with transformers' logits and export back; a megac model trained as
# DeepSeek-V3 exports as one with megac's logits.
# shellcheck disable=SC2086 # paths, flag lists and $HFL, $NEW, $OLD are words
. tests/prog_lib.sh
if ! long_only; then
	ok "hf_long # SKIP make check-long only (MEGAC_LONG=1): needs tests/py-env-long.sh's 3 GB environment"
	exit 0
fi
W=$(new_tmp hf_long)
OUT_LOG=$W/out.log
ERR=$W/err.log
C=$BIN/ckpt_convert
LOGITS=$MEGAC_BUILD/tools/megac_logits
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

# The second environment: without it nothing here can run, and under
# check-long that is a failure, with py-env-long.sh's reason.
if HFL=$(sh tests/py-env-long.sh "$MEGAC_BUILD" 2>"$W/pyenv-long.log" | tail -n 1) && [ -x "$HFL" ]; then
	ok "the second transformers reference environment ($($HFL -c 'import torch, transformers
print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))'))"
else
	notok "the second transformers reference environment (tests/py-env-long.sh) could not be made"
	show "$W/pyenv-long.log"
	exit 1
fi
hf_env "$W/pyenv.log" # the first one, for the stand-in
NEW="$HFL tests/prog/py/hf_ref.py"
OLD="$HF tests/prog/py/hf_ref.py"
/usr/bin/python3 -c '
import numpy as np
np.save("'"$W"'/ids.npy", np.random.RandomState(1).randint(0, 1000, size=(3, 40)).astype(np.int64))'

# Each python start imports torch 2.5.1 and transformers (seconds each): the
# reference's steps run in batches (hf_ref.py batch), one process a model.

# ref_class NAME LOG CLASS: the batch whose output is LOG loaded a folder as
# CLASS (hf_ref.py check's "class" line)
ref_class() {
	if grep -qx "class $3" "$2"; then
		ok "$1"
	else
		notok "$1 (wanted class $3)"
		show "$2"
	fi
}

# import_export M CLASS: the folder $W/M, which transformers wrote as CLASS,
# imports with transformers' logits, and exports back to the same tensors and
# config, which loads as the same class with megac's logits
import_export() {
	_m=$1
	_cls=$2
	setup "$_m: transformers loads the folder, and its logits" $NEW batch "check $W/$_m" \
		"logits $W/$_m $W/ids.npy $W/${_m}_hf.npy"
	ref_class "$_m: transformers 4.53.3 wrote a $_cls" $OUT_LOG $_cls
	expect_ok "$_m: import" $C --from hf --load $W/$_m --save $W/${_m}m --verify
	expect_ok "$_m: megac's logits" $LOGITS $W/${_m}m $W/ids.npy $W/${_m}_megac.npy
	logits_close "$_m: megac's logits on the import equal transformers' $_cls's (1e-4)" \
		$W/${_m}_hf.npy $W/${_m}_megac.npy 1e-4
	expect_ok "$_m: export back to Hugging Face" $C --load $W/${_m}m --save $W/${_m}back --to hf --verify
	if $HFL tests/prog/py/hf_same.py $W/$_m $W/${_m}back >"$W/same.log" 2>&1; then
		ok "$_m: the export holds transformers' tensors and config ($(tail -n 1 "$W/same.log"))"
	else
		notok "$_m: the export against transformers' folder"
		show "$W/same.log"
	fi
	setup "$_m: transformers loads the export, and its logits" $NEW batch "check $W/${_m}back" \
		"logits $W/${_m}back $W/ids.npy $W/${_m}_back.npy"
	ref_class "$_m: transformers 4.53.3 loads the export as $_cls" $OUT_LOG $_cls
	logits_close "$_m: transformers' logits on the export equal megac's (1e-4)" \
		$W/${_m}_megac.npy $W/${_m}_back.npy 1e-4
}

# Random models written by transformers' own Qwen3ForCausalLM (GQA, head_dim
# 24 of hidden 64: untied with rope_scaling; tied, in 2 shards) and
# Qwen3MoeForCausalLM (renormalised top-k, Qwen3-30B-A3B's, with a dense
# layer; softmax over all experts, tied)
Q3="--hidden 64 --head-dim 24 --ffn 96 --vocab 1000 --positions 64"
setup "transformers writes random Qwen3ForCausalLMs and Qwen3MoeForCausalLMs" $NEW batch \
	"make qwen3 $W/q3u $Q3 --layers 2 --heads 4 --kv-heads 2 --untie --rope-scaling 8 --seed 11" \
	"make qwen3 $W/q3t $Q3 --layers 3 --heads 8 --kv-heads 2 --tie --seed 12 --shard-size 300000" \
	"make qwen3_moe $W/qm1 $Q3 --layers 3 --heads 4 --kv-heads 2 --moe-ffn 32 --experts 8 --topk 2 \
		--norm-topk-prob --mlp-only 1 --seed 13" \
	"make qwen3_moe $W/qm2 --hidden 64 --ffn 96 --vocab 1000 --positions 64 --layers 2 --heads 4 \
		--moe-ffn 48 --experts 4 --topk 2 --tie --seed 14"
for m in q3u q3t; do
	import_export $m Qwen3ForCausalLM
done

# The stand-in of make test (4.49: Llama's modules and two RMSNorms) against
# the real class, on the same weights: on the folders the real class wrote,
# and on one the stand-in wrote
setup "the stand-in (transformers 4.49) writes a random Qwen3ForCausalLM, and its logits" $OLD batch \
	"make qwen3 $W/q3s $Q3 --layers 2 --heads 4 --kv-heads 2 --rope-scaling 8 --seed 4" \
	"logits $W/q3u $W/ids.npy $W/q3u_standin.npy" "logits $W/q3t $W/ids.npy $W/q3t_standin.npy" \
	"logits $W/q3s $W/ids.npy $W/q3s_standin.npy"
setup "transformers 4.53.3 loads the stand-in's folder, and its logits" $NEW batch "check $W/q3s" \
	"logits $W/q3s $W/ids.npy $W/q3s_hf.npy"
ref_class "q3s: transformers 4.53.3 loads the stand-in's folder as Qwen3ForCausalLM" $OUT_LOG Qwen3ForCausalLM
for m in q3u q3t q3s; do
	logits_close "$m: the 4.49 stand-in's logits equal the real Qwen3ForCausalLM's (1e-5)" \
		$W/${m}_hf.npy $W/${m}_standin.npy 1e-5
done

for m in qm1 qm2; do
	import_export $m Qwen3MoeForCausalLM
done
QE="$W/bad/qm1-shared"
mkdir -p "$QE" && cp $W/qm1/*.safetensors "$QE"/ &&
	sed 's/"num_experts": 8,/"num_experts": 8, "shared_expert_intermediate_size": 32,/' $W/qm1/config.json >"$QE/config.json"
expect_fail "a Qwen3MoeForCausalLM config with a shared expert is refused by name" \
	"shared_expert_intermediate_size: Qwen3MoeForCausalLM has no shared expert" $C --from hf --load "$QE" --save $W/bad/out1

# megac -> Qwen3-MoE: a model trained with q/k norms, head_dim 24 of hidden
# 64 and experts (top-2 renormalised, layer 1 dense) exports as
# Qwen3MoeForCausalLM with megac's logits; with a shared expert it is refused
TM="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
TM="$TM --kv-channels 24 --qk-layernorm --position-embedding-type rope --normalization RMSNorm --swiglu"
TM="$TM --disable-bias-linear --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2"
TM="$TM --moe-ffn-hidden-size 32 --moe-layer-freq 2 --ffn-hidden-size 96 --moe-aux-loss-coeff 0.001"
TM="$TM --seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3"
TM="$TM --mock-data --eval-interval 100 --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
setup "tm: train a Qwen3-MoE-style model, 2 iterations" sh -c "$BIN/train $TM --train-iters 2 --save $W/tmc \
	--save-interval 2 >$W/tmc.log 2>&1"
expect_ok "tm: export to Hugging Face" $C --load $W/tmc --save $W/tmhf --to hf --verify $GPT2
setup "tm: megac's logits" $LOGITS $W/tmc $W/ids.npy $W/tm_megac.npy
setup "tm: transformers loads the export, and its logits" $NEW batch "check $W/tmhf" \
	"logits $W/tmhf $W/ids.npy $W/tm_hf.npy"
ref_class "tm: transformers 4.53.3 loads the export as Qwen3MoeForCausalLM" $OUT_LOG Qwen3MoeForCausalLM
logits_close "tm: transformers' logits on the export equal megac's (1e-4)" $W/tm_megac.npy $W/tm_hf.npy 1e-4
setup "tm: train with a shared expert, 1 iteration" sh -c "$BIN/train $TM --moe-shared-expert-intermediate-size 48 \
	--train-iters 1 --save $W/tms --save-interval 1 >$W/tms.log 2>&1"
expect_fail "tm: a shared expert is not Qwen3-MoE" \
	"Qwen3MoeForCausalLM, which has RMSNorm, SwiGLU, RoPE on every channel, no linear biases, no shared expert and softmax routing; this one has a shared expert (--moe-shared-expert-intermediate-size 48)" \
	$C --load $W/tms --save $W/tmshf --to hf

# DeepSeek-V3 (multi-latent attention, sigmoid-routed experts with the
# expert bias, groups, a shared expert): random DeepseekV3ForCausalLMs that
# transformers writes, with DeepSeek-V3's YaRN and rope_interleave true
# (Megatron's MLA RoPE order: nothing regrouped), and without YaRN but with
# rope_interleave false (the RoPE rows regrouped on import), import with
# transformers' logits; the first exports back to the same tensors, the
# second to a folder (rope_interleave true) with megac's logits in
# transformers. tests/prog/hf_deepseek_v3.sh checks serving on a fixture.
DS="--hidden 64 --heads 4 --ffn 96 --vocab 1000 --moe-ffn 32 --routed-scale 2.5"
setup "transformers writes random DeepseekV3ForCausalLMs" $NEW batch \
	"make deepseek_v3 $W/dv1 $DS --layers 3 --experts 8 --topk 4 --groups 4 --topk-group 2 --dense 1 \
		--yarn-ds 4 --seed 31" \
	"make deepseek_v3 $W/dv2 $DS --layers 2 --experts 4 --topk 2 --dense 1 --no-rope-interleave --seed 32"
import_export dv1 DeepseekV3ForCausalLM
setup "dv2: transformers loads the folder (rope_interleave false), and its logits" $NEW batch "check $W/dv2" \
	"logits $W/dv2 $W/ids.npy $W/dv2_hf.npy"
expect_ok "dv2: import" $C --from hf --load $W/dv2 --save $W/dv2m --verify
expect_ok "dv2: megac's logits" $LOGITS $W/dv2m $W/ids.npy $W/dv2_megac.npy
logits_close "dv2: megac's logits on the import equal transformers' (rope_interleave false, 1e-4)" \
	$W/dv2_hf.npy $W/dv2_megac.npy 1e-4
expect_ok "dv2: export (rope_interleave true)" $C --load $W/dv2m --save $W/dv2back --to hf --verify
setup "dv2: transformers loads the export, and its logits" $NEW batch "check $W/dv2back" \
	"logits $W/dv2back $W/ids.npy $W/dv2_back.npy"
ref_class "dv2: transformers 4.53.3 loads the export as DeepseekV3ForCausalLM" $OUT_LOG DeepseekV3ForCausalLM
logits_close "dv2: transformers' logits on the export equal megac's (1e-4)" $W/dv2_megac.npy $W/dv2_back.npy 1e-4

# megac -> DeepSeek-V3: an MLA model trained 2 iterations with a dense first
# layer, then MoE layers routed as DeepSeek-V3 (sigmoid, expert bias, 1 of 2
# groups, top-2, scaling 2.5, a shared expert), YaRN and --norm-epsilon 1e-6
# (transformers' latent norms always have it) exports as
# DeepseekV3ForCausalLM with megac's logits; one with softmax routing and
# epsilon 1e-5 is refused, naming both
TD="--num-layers 3 --hidden-size 64 --num-attention-heads 4 --multi-latent-attention --q-lora-rank 24"
TD="$TD --kv-lora-rank 16 --qk-head-dim 12 --qk-pos-emb-head-dim 8 --v-head-dim 16 --qk-layernorm"
TD="$TD --rotary-scaling-factor 4 --mscale 0.8 --mscale-all-dim 0.6"
TD="$TD --position-embedding-type rope --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --disable-bias-linear"
TD="$TD --untie-embeddings-and-output-weights --ffn-hidden-size 96 --num-experts 4 --moe-router-topk 2"
TD="$TD --moe-ffn-hidden-size 32 --moe-layer-freq [0,1,1] --moe-shared-expert-intermediate-size 32"
TD="$TD --seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3"
TD="$TD --mock-data --eval-interval 100 --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
DSR="--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-num-groups 2"
DSR="$DSR --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5"
setup "td: train a DeepSeek-V3-style model, 2 iterations" sh -c "$BIN/train $TD $DSR --train-iters 2 --save $W/tdc \
	--save-interval 2 >$W/tdc.log 2>&1"
expect_ok "td: export to Hugging Face" $C --load $W/tdc --save $W/tdhf --to hf --verify $GPT2
setup "td: megac's logits" $LOGITS $W/tdc $W/ids.npy $W/td_megac.npy
setup "td: transformers loads the export, and its logits" $NEW batch "check $W/tdhf" \
	"logits $W/tdhf $W/ids.npy $W/td_hf.npy"
ref_class "td: transformers 4.53.3 loads the export as DeepseekV3ForCausalLM" $OUT_LOG DeepseekV3ForCausalLM
logits_close "td: transformers' logits on the export equal megac's (1e-4)" $W/td_megac.npy $W/td_hf.npy 1e-4
setup "td: train with softmax routing and --norm-epsilon 1e-5, 1 iteration" sh -c "$BIN/train $TD \
	--norm-epsilon 1e-5 --train-iters 1 --save $W/tds \
	--save-interval 1 >$W/tds.log 2>&1"
expect_fail "td: softmax routing and another norm epsilon are not DeepSeek-V3's" \
	"--norm-epsilon 1e-05 (transformers' q_a_layernorm and kv_a_layernorm always use 1e-6, megac's latent norms --norm-epsilon), softmax routing (--moe-router-score-function sigmoid)" \
	$C --load $W/tds --save $W/tdshf --to hf
[ -n "${KEEP:-}" ] || rm -rf "$W"
