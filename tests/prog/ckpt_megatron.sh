# ckpt_megatron.sh - ckpt_convert --to megatron: megac checkpoints written
# as Megatron-LM's legacy torch format (iter_N/mp_rank_TT[_PPP]/
# model_optim_rng.pt), read back with PyTorch's torch.load (Debian's torch)
# and put together by Megatron's tensor-parallel rules written out
# independently in tests/prog/py/megatron_ckpt_check.py: a Llama-style model
# (GQA, SwiGLU, RMSNorm, untied) at TP2 x PP2 in fp32 and at TP1 in bf16, a
# GPT-style one (learned positions, LayerNorm, biases, tied embeddings) at
# TP2 x PP2, whose last stage holds the tied copy as output_layer.weight;
# every tensor equals megac's global one, the vocabulary re-padded for the
# target TP. --from megatron reads them back (and the local layer spec's
# norm names) to the same tensors, which fine-tune to the original's losses
# bit for bit (the bf16 files with Adam's state give back the fp32 master
# weights; without it, --no-optim, the weights rounded to bf16). torch_dist exports (fp32, bf16) are read by an independent
# Python reader of PyTorch's DCP folders (tests/prog/py/dcp_check.py) and by
# --from megatron to the same tensors. Refused: fsdp_dtensor, an existing
# iteration, MoE, a megac folder as --from megatron, and --ckpt-format torch in
# train.
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
	--to megatron --ckpt-format torch --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
	--make-vocab-size-divisible-by 64 $GPT2
check "llama TP2 x PP2: torch.load reads every rank, and the joined shards are megac's tensors" "$W/m-llama" \
	"$W/llama" 2 2 fp32
expect_ok "llama: to Megatron's torch format in bf16 at TP1" $BIN/ckpt_convert --load "$W/llama" \
	--save "$W/m-llama-bf16" --to megatron --dtype bf16 $GPT2
check "llama TP1 bf16: the tensors are megac's rounded to bf16" "$W/m-llama-bf16" "$W/llama" 1 1 bf16
expect_ok "gpt: to Megatron's torch format at TP2 x PP2" $BIN/ckpt_convert --load "$W/gpt" --save "$W/m-gpt" \
	--to megatron --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 $GPT2
check "gpt TP2 x PP2 (tied embeddings: the last stage's output_layer.weight is their copy)" "$W/m-gpt" "$W/gpt" 2 2 \
	fp32

# and back: --from megatron reads the rank files (the layout from their
# folders, the model from the args) into a megac checkpoint
same_h5() { # NAME A_DIR B_DIR ITER [bf16]: B's tensors are A's (rounded to bf16), padding rows zero
	if $PY - "$2" "$3" "$4" "${5:-fp32}" >"$W/same.log" 2>&1 <<'PYEND'; then
import sys
import h5py
import numpy as np
import torch
a_dir, b_dir, it, dt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
a = h5py.File("%s/iter_%07d/model.h5" % (a_dir, it), "r")
b = h5py.File("%s/iter_%07d/model.h5" % (b_dir, it), "r")
assert sorted(a.keys()) == sorted(b.keys()), sorted(set(a.keys()) ^ set(b.keys()))
exact = 0
for k in a.keys():
    x, y = a[k][()], b[k][()]
    if dt == "bf16":
        x = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    r = min(x.shape[0], y.shape[0])
    assert x.shape[1:] == y.shape[1:] and np.array_equal(x[:r], y[:r]), k
    assert not y[r:].any() and not x[r:].any(), k
    exact += x.shape == y.shape
print("%d tensors equal (%d of the same shape)" % (len(a.keys()), exact))
PYEND
		ok "$1 ($(tail -1 "$W/same.log"))"
	else
		notok "$1"
		show "$W/same.log"
	fi
}
expect_ok "llama: back from Megatron's TP2 x PP2 files" $BIN/ckpt_convert --load "$W/m-llama" --save "$W/b-llama" \
	--from megatron $GPT2
same_h5 "llama: megac -> Megatron TP2 x PP2 -> megac gives the same tensors" "$W/llama" "$W/b-llama" 2
expect_ok "gpt: back from Megatron's TP2 x PP2 files (tied: the first stage's embeddings)" $BIN/ckpt_convert \
	--load "$W/m-gpt" --save "$W/b-gpt" --from megatron $GPT2
same_h5 "gpt: megac -> Megatron TP2 x PP2 -> megac gives the same tensors (vocabulary re-padded for TP2)" \
	"$W/gpt" "$W/b-gpt" 2
expect_ok "llama: back from the bf16 files" $BIN/ckpt_convert --load "$W/m-llama-bf16" --save "$W/b-llama-bf16" \
	--from megatron $GPT2
same_h5 "llama: the bf16 round trip keeps the fp32 weights (the optimizer's fp32 master copy)" "$W/llama" \
	"$W/b-llama-bf16" 2
expect_ok "llama: back from the bf16 files, the weights alone (--no-optim)" $BIN/ckpt_convert --load "$W/m-llama-bf16" \
	--save "$W/b2-llama-bf16" --from megatron --no-optim $GPT2
same_h5 "llama: without the optimizer the bf16 round trip gives megac's tensors rounded to bf16" "$W/llama" \
	"$W/b2-llama-bf16" 2 bf16
# torch_dist (PyTorch Distributed Checkpoint): global tensors, the layers
# stacked; read back by an independent Python reader (tests/prog/py/dcp_check.py:
# pickle with only DCP's classes, torch.load of each chunk) and by --from megatron
dcp_check() { # NAME DIR MEGAC_DIR ITER LAYERS [DTYPE]
	if DCP_DTYPE=${6:-float32} $PY tests/prog/py/dcp_check.py "$2/iter_$(printf %07d "$4")" "$3" "$4" "$5" \
		>"$W/dcp.log" 2>&1; then
		ok "$1 ($(tail -1 "$W/dcp.log"))"
	else
		notok "$1"
		show "$W/dcp.log"
	fi
}
expect_ok "llama: to Megatron's torch_dist format" $BIN/ckpt_convert --load "$W/llama" --save "$W/d-llama" \
	--to megatron --ckpt-format torch_dist --target-tensor-parallel-size 2 $GPT2
dcp_check "llama torch_dist: an independent reader assembles megac's tensors" "$W/d-llama" "$W/llama" 2 4
expect_ok "gpt: to torch_dist in bf16" $BIN/ckpt_convert --load "$W/gpt" --save "$W/d-gpt" --to megatron \
	--ckpt-format torch_dist --dtype bf16 $GPT2
dcp_check "gpt torch_dist bf16: megac's tensors rounded to bf16" "$W/d-gpt" "$W/gpt" 2 2 bfloat16
expect_ok "llama: back from torch_dist" $BIN/ckpt_convert --load "$W/d-llama" --save "$W/e-llama" --from megatron $GPT2
same_h5 "llama: megac -> torch_dist -> megac gives the same tensors" "$W/llama" "$W/e-llama" 2
expect_ok "gpt: back from bf16 torch_dist" $BIN/ckpt_convert --load "$W/d-gpt" --save "$W/e-gpt" --from megatron $GPT2
same_h5 "gpt: the bf16 torch_dist round trip keeps the fp32 weights (the optimizer's fp32 master copy)" "$W/gpt" \
	"$W/e-gpt" 2
# Megatron's local layer spec names the fused norms input_layernorm and pre_mlp_layernorm
setup "the TP2 x PP2 files renamed to the local spec" $PY -c '
import glob, os, shutil, sys, torch
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
for f in glob.glob(os.path.join(dst, "iter_*", "mp_rank_*", "model_optim_rng.pt")):
    sd = torch.load(f)
    m = type(sd["model"])()
    for k, v in sd["model"].items():
        if k.endswith("._extra_state"):
            continue
        k = k.replace("self_attention.linear_qkv.layer_norm_", "input_layernorm.")
        k = k.replace("mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm.")
        m[k] = v
    sd["model"] = m
    torch.save(sd, f)' "$W/m-llama" "$W/m-llama-local"
expect_ok "llama: back from local-spec names" $BIN/ckpt_convert --load "$W/m-llama-local" --save "$W/b-llama-local" \
	--from megatron $GPT2
same_h5 "llama: local-spec files give the same tensors" "$W/llama" "$W/b-llama-local" 2
# a hybrid Mamba model's args (Megatron's pattern flag): not read yet, and said
setup "the TP2 x PP2 files' args given a hybrid pattern" $PY -c '
import glob, os, shutil, sys, torch
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
for f in glob.glob(os.path.join(dst, "iter_*", "mp_rank_*", "model_optim_rng.pt")):
    sd = torch.load(f)
    sd["args"].hybrid_override_pattern = "M*M*"
    torch.save(sd, f)' "$W/m-llama" "$W/m-llama-hybrid"
expect_fail "a hybrid Mamba model's Megatron checkpoint is refused by name" \
	"a hybrid Mamba model (hybrid_override_pattern 'M*M*')" $BIN/ckpt_convert --load "$W/m-llama-hybrid" \
	--save "$W/b-llama-hybrid" --from megatron $GPT2
# the imported weights train as the original's (a fresh optimizer either way)
FT="--train-iters 4 --save-interval 100 --log-interval 1 --finetune --metrics-file"
setup "llama: 4 iterations from the original (--finetune)" $BIN/train $LLAMA $COMMON --data-cache-path "$W/cache" \
	--load "$W/llama" $FT "$W/ft-orig.jsonl"
expect_ok "llama: 4 iterations from the round trip (--finetune)" $BIN/train $LLAMA $COMMON \
	--data-cache-path "$W/cache" --load "$W/b-llama" $FT "$W/ft-back.jsonl"
RTOL=0 compare_same "llama: fine-tuning the round trip gives the original's losses bit for bit" "$W/ft-orig.jsonl" \
	"$W/ft-back.jsonl" 4
expect_fail "--from megatron on a megac checkpoint says what it found" "not a Megatron checkpoint megac reads" \
	$BIN/ckpt_convert --load "$W/llama" --save "$W/b-wrong" --from megatron $GPT2
expect_fail "fsdp_dtensor is refused by name" "torch_dcp and fsdp_dtensor are not in megac yet" \
	$BIN/ckpt_convert \
	--load "$W/gpt" --save "$W/m-dist" --to megatron --ckpt-format fsdp_dtensor $GPT2
expect_fail "an existing iteration is not overwritten" "does not overwrite a checkpoint" $BIN/ckpt_convert \
	--load "$W/gpt" --save "$W/m-gpt" --to megatron --target-tensor-parallel-size 2 \
	--target-pipeline-parallel-size 2 $GPT2
setup "a mixture-of-experts model" $BIN/train $GPT $COMMON --num-experts 2 --disable-bias-linear --train-iters 0 \
	--save "$W/moe" \
	--data-cache-path "$W/cache"
# (MoE layers are written now, tests/prog/megatron_ckpt.sh; an expert-parallel
# size that does not divide the experts is refused)
expect_fail "an expert-parallel size that does not divide the experts is refused" "which it must divide" \
	$BIN/ckpt_convert --load "$W/moe" --save "$W/m-moe" --to megatron --target-expert-parallel-size 3 $GPT2
if [ ! -e "$W/m-moe" ] || [ -z "$(ls -A "$W/m-moe" | grep -v '^\.')" ]; then
	ok "a refused export leaves no checkpoint behind"
else
	notok "a refused export leaves no checkpoint behind"
	ls -la "$W/m-moe" | sed 's/^/#   /'
fi
expect_fail "train refuses --ckpt-format torch (ckpt_convert writes it)" \
	"ckpt_convert --to megatron --ckpt-format torch writes the legacy format" $BIN/train \
	$GPT $COMMON --ckpt-format torch --data-cache-path "$W/cache"
