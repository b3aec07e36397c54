#!/bin/sh
# megatron_scripts.sh - Megatron-LM's own example command lines, run by train.
#
# The flags of five of Megatron's example scripts (examples/gpt3/
# train_gpt3_175b_distributed.sh, examples/llama/train_llama3_8b_h100_fp8.sh,
# examples/mixtral/train_mixtral_8x7b_distributed.sh, examples/mamba/train.sh,
# examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh), with only what a laptop-sized run needs
# changed: model sizes, parallel sizes, paths, iteration counts, mock data.
# Each runs twice:
#   1. as is: train never says "unknown flag" and never crashes; it trains,
#      or exits 128 in one message naming exactly the Megatron features it
#      does not have yet (the list below; shorten it as they land);
#      Llama-3's and Mixtral's lines also run on 2 ranks, saving Megatron's torch_dist,
#      DeepSeek-V3's saving fsdp_dtensor;
#   2. without those flags: it trains, and its start-up line names the
#      flags accepted without effect.
# All but the Mamba one also run on 2 ranks:
# GPT-3 as 2 pipeline stages, Llama-3 and Mixtral saving Megatron's
# torch_dist (Mixtral with EP2), DeepSeek-V3 under Megatron-FSDP (ZeRO-3)
# saving fsdp_dtensor.
. tests/prog_lib.sh
W=$(new_tmp megatron_scripts)
ERR=$W/err
OUT_LOG=$W/out

# run_script NAME "REFUSED..." ARGS...: the two runs above. REFUSED lists the
# flags (or "flag value" pairs, joined by '=') the first run must refuse.
run_script() {
	name=$1
	refused=$2
	shift 2
	rm -rf "$W/$name"
	mkdir -p "$W/$name"
	(cd "$W/$name" && "$BIN/train" "$@") >"$OUT_LOG" 2>"$ERR"
	rc=$?
	if grep -q "unknown flag\|invalid choice\|unexpected argument" "$ERR"; then
		notok "$name: every Megatron flag known"
		show "$ERR" 20
	else
		ok "$name: every Megatron flag known"
	fi
	if [ -z "$refused" ]; then
		if [ $rc -eq 0 ]; then ok "$name: trains as is"; else notok "$name: trains as is (exit $rc)"; show "$ERR"; fi
	else
		missing=""
		for f in $refused; do
			f=$(echo "$f" | tr '=' ' ')
			grep -qF -- "$f" "$ERR" || missing="$missing $f"
		done
		# EXPECT: Megatron's own refusal of the command line, instead of megac's
		if [ $rc -eq 128 ] && [ -z "$missing" ] && [ "$(grep -c 'error:' "$ERR")" -eq 1 ] &&
			grep -q -- "${EXPECT:-that megac does not support\|not in megac}" "$ERR"; then
			ok "$name: refused in one message, naming each missing feature"
		else
			notok "$name: refused in one message, naming each missing feature (exit $rc; not named:$missing)"
			show "$ERR" 20
		fi
		[ "${SECOND:-1}" -eq 0 ] && return
		# the second run: the same command line less the refused flags and their values
		# one word per line: values with spaces stay whole, and nothing is globbed
		old_ifs=$IFS
		IFS='
'
		set -f
		set -- $(drop_flags "${DROP:-$refused}" "$@")
		set +f
		IFS=$old_ifs
		rm -rf "$W/$name"
		mkdir -p "$W/$name"
		(cd "$W/$name" && "$BIN/train" "$@") >"$OUT_LOG" 2>"$ERR"
		rc=$?
		if [ $rc -eq 0 ] && grep -q "iteration *4/" "$OUT_LOG" "$ERR"; then
			ok "$name: trains without the refused flags"
		else
			notok "$name: trains without the refused flags (exit $rc)"
			show "$ERR" 12
		fi
	fi
	if [ -n "${NOEFFECT:-}" ]; then
		line=$(grep "accepted, no effect in megac: " "$ERR" | head -n 1)
		missing=""
		for f in $NOEFFECT; do
			case "$line " in *" $f "*) ;; *) missing="$missing $f" ;; esac
		done
		if [ -n "$line" ] && [ -z "$missing" ]; then
			ok "$name: names the flags it accepts without effect"
		else
			notok "$name: names the flags it accepts without effect (missing:$missing)"
			show "$ERR"
		fi
	fi
}

# drop_flags "REFUSED" ARGS...: ARGS without the refused flags and their
# values (a value is every word up to the next --flag); "flag=value" drops
# only that flag given with that value
drop_flags() {
	refused=" $1 "
	shift
	skip=0
	prev=""
	for w in "$@"; do
		case $w in
		--*)
			skip=0
			prev=$w
			case $refused in *" $w "*) skip=1; continue ;; esac
			# a "flag=value" entry: decide at the value
			case $refused in *" $w="*) skip=2; continue ;; esac
			;;
		*)
			[ $skip -eq 1 ] && continue
			if [ $skip -eq 2 ]; then
				skip=0
				case $refused in *" $prev=$w "*) continue ;; esac
				printf '%s\n' "$prev"
			fi
			;;
		esac
		printf '%s\n' "$w"
	done
}

# the mock dataset of every run: Megatron's synthetic data, small
MOCK="--mock-data --split 99,1,0"

# ---- GPT-3 175B (examples/gpt3): 96 layers of 12288 -> 2 of 64; TP8 x PP16 -> 1 rank.
# Megatron's script gives no --tokenizer-type (Megatron then fails at
# tokenizer start-up too): megac's runs add GPT2BPETokenizer. It gives both
# --global-batch-size and --step-batch-size-schedule, which Megatron's own
# argument check refuses; so does megac, and the second run drops the first.
NOEFFECT="--attention-backend"
EXPECT="cannot specify both --step-batch-size-schedule and --global-batch-size" DROP="--global-batch-size"
REPO=$PWD
gpt3() { # CMD...: CMD followed by the example's flags (G3_GBS: its --global-batch-size, unless set
	# empty), then $G3_EXTRA
	# shellcheck disable=SC2086 # G3_GBS and G3_EXTRA are words
	"$@" \
	--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
	--attention-backend auto \
	--micro-batch-size 1 ${G3_GBS---global-batch-size 4} \
	--step-batch-size-schedule "0:2 64:4" \
	--train-iters 4 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 \
	--clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001 \
	--lr-decay-iters 4 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
	$MOCK --tokenizer-type GPT2BPETokenizer --vocab-file "$REPO/$GPT2_VOCAB" --merge-file "$REPO/$GPT2_MERGES" \
	--log-interval 1 --save-interval 10000 --eval-interval 1000 --save ck --load ck --eval-iters 1 \
	--tensorboard-dir tb ${G3_EXTRA:-}
}
gpt3 run_script gpt3 "--step-batch-size-schedule --global-batch-size"
EXPECT="" DROP=""
# on 2 ranks as 2 pipeline stages (the example's TP8 x PP16 shrunk), 2 iterations, without the
# --global-batch-size that Megatron refuses beside the schedule
rm -rf "$W/g3mp"
mkdir -p "$W/g3mp"
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if (cd "$W/g3mp" && G3_GBS="" G3_EXTRA="--pipeline-model-parallel-size 2 --train-iters 2" gpt3 \
	mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN/train") >"$OUT_LOG" 2>"$ERR" &&
	grep -q "iteration *2/ *2" "$OUT_LOG" "$ERR"; then
	ok "gpt3: 2 iterations on 2 ranks (PP2)"
else
	notok "gpt3: 2 iterations on 2 ranks (PP2)"
	show "$ERR" 12
fi

# ---- Llama-3 8B FP8 (examples/llama), its mock-data branch: 32 layers of 4096 -> 2 of 64.
NOEFFECT="--use-mcore-models --attention-backend --cross-entropy-loss-fusion --manual-gc --empty-unused-memory-level"
llama3() { # CMD...: CMD followed by the example's flags, then $L3_EXTRA (later flags win, as in argparse)
	# shellcheck disable=SC2086 # L3_EXTRA is words
	"$@" \
	--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4 \
	--group-query-attention --num-query-groups 2 --kv-channels 16 --seq-length 32 --max-position-embeddings 32 \
	--position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 \
	--hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused \
	--apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear \
	--micro-batch-size 1 --global-batch-size 2 --train-samples 8 --lr-decay-samples 6 --lr-warmup-samples 2 \
	--lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 --lr-decay-style cosine \
	--clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16 \
	--cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc --empty-unused-memory-level 1 \
	--exit-duration-in-mins 235 \
	--fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather \
	--tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel --use-distributed-optimizer \
	--overlap-grad-reduce --overlap-param-gather \
	--mock-data --tokenizer-type NullTokenizer --vocab-size 1000 --data-cache-path cache --tiktoken-pattern v2 \
	--split '99,1,0' --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 \
	--log-interval 1 --eval-iters 1 --eval-interval 100 --save-interval 1000 --log-throughput \
	--profile --profile-step-start 4 --profile-step-end 6 --ckpt-format torch_dist \
	--distributed-timeout-minutes 60 --save ck --load ck --tensorboard-dir tb ${L3_EXTRA:-}
}
llama3 run_script llama3_fp8 ""
# the same line on 2 ranks (data-parallel, the distributed optimizer sharding
# over them), saving every 2 iterations: the checkpoints are Megatron's
# torch_dist, which ckpt_convert reads back with Adam's state at step 4
rm -rf "$W/l3mp"
mkdir -p "$W/l3mp"
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if (cd "$W/l3mp" && L3_EXTRA="--save-interval 2" llama3 mpirun --allow-run-as-root --oversubscribe -np 2 \
	"$BIN/train") >"$OUT_LOG" 2>"$ERR" && grep -q "iteration *4/" "$OUT_LOG" "$ERR" &&
	[ -f "$W/l3mp/ck/iter_0000002/.metadata" ] && [ -f "$W/l3mp/ck/iter_0000004/.metadata" ] &&
	[ ! -e "$W/l3mp/ck/.megac-hdf5" ] &&
	"$BIN/ckpt_convert" --load "$W/l3mp/ck" --save "$W/l3mp/back" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 1000 >"$W/l3mp/conv.log" 2>&1 && grep -q "Adam's state at step 4" "$W/l3mp/conv.log"; then
	ok "llama3_fp8: 4 iterations on 2 ranks, torch_dist checkpoints at 2 and 4 (read back with Adam's state)"
else
	notok "llama3_fp8: 4 iterations on 2 ranks with torch_dist checkpoints"
	show "$ERR" 12
	show "$W/l3mp/conv.log"
fi

# ---- Mixtral 8x7B (examples/mixtral): 32 layers of 4096, 8 experts -> 2 of 64, 4 experts;
# PP4 x EP8 -> 1 rank; its Llama-2 SentencePiece tokenizer (no .model here) -> mock data with NullTokenizer.
NOEFFECT="--use-mcore-models --no-masked-softmax-fusion --moe-grouped-gemm"
mixtral() { # CMD...: CMD followed by the example's flags, then $MX_EXTRA (later flags win, as in argparse)
	# shellcheck disable=SC2086 # MX_EXTRA is words
	"$@" \
	--use-mcore-models --disable-bias-linear --seq-length 32 --max-position-embeddings 256 --num-layers 2 \
	--hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4 --init-method-std 0.01 \
	--attention-dropout 0.0 --hidden-dropout 0.0 --normalization RMSNorm --position-embedding-type rope \
	--swiglu --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 \
	--no-masked-softmax-fusion --no-position-embedding --rotary-base 1000000 \
	--num-experts 4 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2 \
	--moe-grouped-gemm --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce \
	--tokenizer-type Llama2Tokenizer --mock-data --split 99990,8,2 \
	--micro-batch-size 1 --global-batch-size 2 --lr 1e-4 --train-iters 4 --lr-decay-iters 3 \
	--lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 0.1 --lr-warmup-iters 1 --clip-grad 1.0 --bf16 \
	--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 1 \
	--use-distributed-optimizer --sequence-parallel \
	--log-interval 1 --save-interval 10000 --eval-interval 1000 --eval-iters 1 --save ck --load ck \
	--tensorboard-dir ck/tensorboard --no-load-optim --no-load-rng \
	--wandb-project Mixtral --wandb-exp-name Mixtral_8x7B \
	--tokenizer-type NullTokenizer --vocab-size 1000 ${MX_EXTRA:-}
}
# (the last --tokenizer-type wins, as in argparse: the second run keeps a tokenizer megac has)
mixtral run_script mixtral ""
# the same line on 2 ranks, its experts split over them (EP2), saving Megatron's
# default format, torch_dist, at iteration 2: ckpt_convert reads it back with
# every expert and Adam's state at step 2
rm -rf "$W/mxmp"
mkdir -p "$W/mxmp"
if (cd "$W/mxmp" && MX_EXTRA="--expert-model-parallel-size 2 --ckpt-format torch_dist --train-iters 2 \
	--save-interval 2" mixtral mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN/train") >"$OUT_LOG" 2>"$ERR" &&
	grep -q "iteration *2/" "$OUT_LOG" "$ERR" && [ -f "$W/mxmp/ck/iter_0000002/.metadata" ] &&
	[ ! -e "$W/mxmp/ck/.megac-hdf5" ] &&
	"$BIN/ckpt_convert" --load "$W/mxmp/ck" --save "$W/mxmp/back" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 1000 >"$W/mxmp/conv.log" 2>&1 && grep -q "Adam's state at step 2" "$W/mxmp/conv.log" &&
	/usr/bin/python3 -c '
import sys, h5py
f = h5py.File(sys.argv[1] + "/iter_0000002/model.h5")
o = h5py.File(sys.argv[1] + "/iter_0000002/optim.h5")
for l in range(2):
    for e in range(4):
        k = "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight" % (l, e)
        assert k in f and "exp_avg/" + k in o, k' "$W/mxmp/back" 2>"$W/mxmp/py.log"; then
	ok "mixtral: 2 iterations on 2 ranks (EP2), a torch_dist checkpoint read back with the 4 experts of each layer and Adam's state"
else
	notok "mixtral: 2 iterations on 2 ranks (EP2) saving torch_dist"
	show "$ERR" 12
	show "$W/mxmp/conv.log"
	show "$W/mxmp/py.log"
fi

# ---- A hybrid Mamba model (examples/mamba/train.sh): its pattern shortened to 7 layers, hidden
# 64, TP8 with SP -> 1 rank (SP is then off, as in Megatron); its SentencePiece tokenizer -> mock
# data with NullTokenizer. Hybrid models train in fp32 in megac so far (docs/mamba.md).
NOEFFECT="--use-mcore-models --distributed-backend"
run_script mamba "--bf16" \
	--tensor-model-parallel-size 1 --sequence-parallel --pipeline-model-parallel-size 1 \
	--use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce \
	--untie-embeddings-and-output-weights --init-method-std 0.02 --position-embedding-type none \
	--hybrid-layer-pattern 'M-M*-M-' --hidden-size 64 --num-attention-heads 4 --group-query-attention \
	--num-query-groups 2 --mamba-head-dim 16 --mamba-num-groups 2 --mamba-state-dim 16 \
	--seq-length 32 --max-position-embeddings 32 \
	--train-samples 8 --lr-warmup-samples 2 --lr-decay-samples 6 --save ck --load ck --data-cache-path cache \
	$MOCK --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model tokenizer.model \
	--distributed-backend nccl --micro-batch-size 1 --global-batch-size 2 --lr 2.5e-4 --min-lr 2.5e-5 \
	--lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 \
	--disable-bias-linear --normalization RMSNorm --adam-beta1 0.9 --adam-beta2 0.95 --log-interval 1 \
	--save-interval 2000 --eval-interval 2000 --eval-iters 1 --bf16 --use-mcore-models \
	--spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec \
	--no-create-attention-mask-in-dataloader --tensorboard-dir tb \
	--tokenizer-type NullTokenizer --vocab-size 1000

# ---- DeepSeek-V3 with Megatron-FSDP (examples/megatron_fsdp): 61 layers of 7168, 256
# experts -> 2 of 64, 8 experts; EP8 -> 1 rank; its Hugging Face tokenizer -> mock data.
# Its MLA with YaRN, routing, expert bias, flex dispatcher, MTP with Megatron-FSDP
# and the bf16 gradient reduction are in, and so is its checkpoint format
# fsdp_dtensor with the MoE layers and the MTP depth (--auto-detect-ckpt-format
# has no effect: --load always detects): it trains as is.
# (its --logging-level 40 keeps train's start-up lines, the flags without effect among them, quiet)
NOEFFECT=""
deepseek_v3() { # CMD...: CMD followed by the example's flags, then $DS_EXTRA (later flags win, as in argparse)
	# shellcheck disable=SC2086 # DS_EXTRA is words
	"$@" \
	--distributed-timeout-minutes 60 --tensor-model-parallel-size 1 --expert-model-parallel-size 1 \
	--expert-tensor-parallel-size 1 --context-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce \
	--overlap-param-gather --use-mcore-models --sequence-parallel --use-flash-attn --disable-bias-linear \
	--micro-batch-size 1 --global-batch-size 2 --train-samples 8 --exit-duration-in-mins 220 \
	--no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval 10 --recompute-granularity selective \
	--recompute-modules mlp moe mla_up_proj layernorm --transformer-impl transformer_engine --seq-length 32 \
	--data-cache-path cache --tokenizer-type NullTokenizer --vocab-size 1000 --mock-data --split 99,1,0 \
	--no-mmap-bin-files --no-create-attention-mask-in-dataloader --num-workers 6 --num-layers 4 \
	--hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 4 --kv-channels 16 \
	--max-position-embeddings 32 --position-embedding-type rope --rotary-base 10000 \
	--make-vocab-size-divisible-by 3232 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu \
	--untie-embeddings-and-output-weights --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 \
	--clip-grad 1.0 --weight-decay 0.1 --qk-layernorm --lr-decay-samples 6 --lr-warmup-samples 2 \
	--lr-warmup-init 3.9e-7 --lr 3.9e-6 --min-lr 3.9e-7 --lr-decay-style cosine --adam-beta1 0.9 \
	--adam-beta2 0.95 --num-experts 8 --moe-layer-freq '[0]*1+[1]*3' --moe-ffn-hidden-size 32 \
	--moe-shared-expert-intermediate-size 32 --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 2 \
	--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-router-pre-softmax \
	--moe-grouped-gemm --moe-aux-loss-coeff 1e-4 --moe-router-group-topk 2 --moe-router-num-groups 4 \
	--moe-router-topk-scaling-factor 2.5 --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
	--moe-router-bias-update-rate 1e-3 --moe-router-dtype fp32 --moe-permute-fusion \
	--moe-router-force-load-balancing --q-lora-rank 32 --kv-lora-rank 16 --qk-head-dim 16 \
	--qk-pos-emb-head-dim 8 --v-head-dim 16 --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 \
	--mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --eval-iters 1 --eval-interval 100 \
	--auto-detect-ckpt-format --load ck --save ck --save-interval 100 --dist-ckpt-strictness log_all \
	--init-method-std 0.02 --log-timers-to-tensorboard --log-memory-to-tensorboard --log-num-zeros-in-grad \
	--log-params-norm --log-validation-ppl-to-tensorboard --log-throughput --log-interval 1 --logging-level 40 \
	--tensorboard-dir tb --bf16 --enable-experimental \
	--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --no-gradient-accumulation-fusion \
	--use-distributed-optimizer --calculate-per-token-loss --init-model-with-meta-device \
	--ckpt-format fsdp_dtensor --fsdp-double-buffer --use-nccl-ub --megatron-fsdp-grad-comm-dtype bf16 \
	--megatron-fsdp-main-grads-dtype bf16 ${DS_EXTRA:-}
}
deepseek_v3 run_script deepseek_v3 ""
# the same line on 2 ranks (Megatron-FSDP's ZeRO-3 over them), 2 iterations
# saving at 2: its fsdp_dtensor checkpoint reads back with ckpt_convert with
# every expert of the MoE layers and the MTP depth, and Adam's state at step 2
rm -rf "$W/dsmp"
mkdir -p "$W/dsmp"
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if (cd "$W/dsmp" && DS_EXTRA="--train-samples 4 --save-interval 2" deepseek_v3 \
	mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN/train") >"$OUT_LOG" 2>"$ERR" &&
	grep -q "iteration *2/" "$OUT_LOG" "$ERR" && [ -f "$W/dsmp/ck/iter_0000002/.metadata" ] &&
	[ ! -e "$W/dsmp/ck/iter_0000002/metadata.json" ] && [ ! -e "$W/dsmp/ck/.megac-hdf5" ] &&
	"$BIN/ckpt_convert" --load "$W/dsmp/ck" --save "$W/dsmp/back" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 1000 >"$W/dsmp/conv.log" 2>&1 && grep -q "Adam's state at step 2" "$W/dsmp/conv.log" &&
	/usr/bin/python3 -c '
import sys, h5py
f = h5py.File(sys.argv[1] + "/iter_0000002/model.h5")
o = h5py.File(sys.argv[1] + "/iter_0000002/optim.h5")
for p in ["decoder.layers.%d." % l for l in (1, 2, 3)] + ["mtp.layers.0.transformer_layer."]:
    assert p + "mlp.router.expert_bias" in f, p
    for e in range(8):
        k = p + "mlp.experts.local_experts.%d.linear_fc1.weight" % e
        assert k in f and "exp_avg/" + k in o, k
    assert "exp_avg/" + p + "mlp.shared_experts.linear_fc1.weight" in o, p
assert "exp_avg/mtp.layers.0.eh_proj.weight" in o' "$W/dsmp/back" 2>"$W/dsmp/py.log"; then
	ok "deepseek_v3: 2 iterations on 2 ranks (Megatron-FSDP), an fsdp_dtensor checkpoint read back with the 8 experts of each MoE layer and the MTP depth, and Adam's state"
else
	notok "deepseek_v3: 2 iterations on 2 ranks (Megatron-FSDP) saving fsdp_dtensor"
	show "$ERR" 12
	show "$W/dsmp/conv.log"
	show "$W/dsmp/py.log"
fi
