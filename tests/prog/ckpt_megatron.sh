# ckpt_megatron.sh - ckpt_convert --to megatron: megac checkpoints written
# as Megatron-LM's legacy torch format (iter_N/mp_rank_TT[_PPP]/
# model_optim_rng.pt), read back with PyTorch's torch.load (Debian's torch)
# and put together by Megatron's tensor-parallel rules written out
# independently in tests/prog/py/megatron_ckpt_check.py: a Llama-style model
# (GQA, SwiGLU, RMSNorm, untied) at TP2 x PP2 in fp32 and at TP1 in bf16, a
# GPT-style one (learned positions, LayerNorm, biases, tied embeddings) at
# TP2 x PP2, whose last stage holds the tied copy as output_layer.weight;
# every tensor equals megac's global one, the vocabulary re-padded for the
# target TP. Refused: torch_dist, an existing iteration, MoE, and
# --ckpt-format torch in train (which reads and writes HDF5).
. tests/prog_lib.sh
train_env_begin ckpt_megatron
CHECK=tests/prog/py/megatron_ckpt_check.py
COMMON="--seq-length 16 --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 2 --lr 1e-2"
COMMON="$COMMON --train-iters 2 --save-interval 2 --mock-data --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 $GPT2"
LLAMA="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
LLAMA="$LLAMA --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 48"
LLAMA="$LLAMA --disable-bias-linear --untie-embeddings-and-output-weights"
GPT="--num-layers 2 --hidden-size 32 --num-attention-heads 4"

setup "a Llama-style model, 2 iterations" $BIN/train $LLAMA $COMMON --save "$W/llama" --data-cache-path "$W/cache"
setup "a GPT-style model, 2 iterations" $BIN/train $GPT $COMMON --save "$W/gpt" --data-cache-path "$W/cache"

check() { # NAME MEGATRON_DIR MEGAC_DIR TP PP DTYPE
	if $PY $CHECK "$2" "$3" "$4" "$5" "$6" >"$W/check.log" 2>&1; then
		ok "$1 ($(tail -1 "$W/check.log"))"
	else
		notok "$1"
		show "$W/check.log"
	fi
}

expect_ok "llama: to Megatron's torch format at TP2 x PP2" $BIN/ckpt_convert --load "$W/llama" --save "$W/m-llama" \
	--to megatron --ckpt-format torch --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 $GPT2
check "llama TP2 x PP2: torch.load reads every rank, and the joined shards are megac's tensors" "$W/m-llama" \
	"$W/llama" 2 2 fp32
expect_ok "llama: to Megatron's torch format in bf16 at TP1" $BIN/ckpt_convert --load "$W/llama" \
	--save "$W/m-llama-bf16" --to megatron --dtype bf16 $GPT2
check "llama TP1 bf16: the tensors are megac's rounded to bf16" "$W/m-llama-bf16" "$W/llama" 1 1 bf16
expect_ok "gpt: to Megatron's torch format at TP2 x PP2" $BIN/ckpt_convert --load "$W/gpt" --save "$W/m-gpt" \
	--to megatron --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 $GPT2
check "gpt TP2 x PP2 (tied embeddings: the last stage's output_layer.weight is their copy)" "$W/m-gpt" "$W/gpt" 2 2 \
	fp32

expect_fail "torch_dist is refused by name" "torch_dist, torch_dcp and fsdp_dtensor are not in megac yet" \
	$BIN/ckpt_convert \
	--load "$W/gpt" --save "$W/m-dist" --to megatron --ckpt-format torch_dist $GPT2
expect_fail "an existing iteration is not overwritten" "does not overwrite a checkpoint" $BIN/ckpt_convert \
	--load "$W/gpt" --save "$W/m-gpt" --to megatron --target-tensor-parallel-size 2 \
	--target-pipeline-parallel-size 2 $GPT2
setup "a mixture-of-experts model" $BIN/train $GPT $COMMON --num-experts 2 --disable-bias-linear --train-iters 0 \
	--save "$W/moe" \
	--data-cache-path "$W/cache"
expect_fail "mixture-of-experts layers are refused" "mixture-of-experts layers are not written in Megatron's format" \
	$BIN/ckpt_convert --load "$W/moe" --save "$W/m-moe" --to megatron $GPT2
if [ ! -e "$W/m-moe" ] || [ -z "$(ls -A "$W/m-moe" | grep -v '^\.')" ]; then
	ok "a refused export leaves no checkpoint behind"
else
	notok "a refused export leaves no checkpoint behind"
	ls -la "$W/m-moe" | sed 's/^/#   /'
fi
expect_fail "train refuses --ckpt-format torch (ckpt_convert writes it)" "ckpt_convert --to megatron" $BIN/train \
	$GPT $COMMON --ckpt-format torch --data-cache-path "$W/cache"
