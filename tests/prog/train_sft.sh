# train_sft.sh - supervised fine-tuning (--sft) in train: conversations read
# from JSONL at training time, tokenized by the SFT tokenizer's prompt format,
# packed with per-conversation attention and positions, the loss on the
# assistant's tokens only.
#
# - Packed equals unpacked: 24 conversations packed 3 to a line (4 lines a
#   global batch) train as the same conversations one to a line (12 a global
#   batch), with --calculate-per-token-loss: lm loss and grad norm rtol 1e-5
#   over 6 iterations, on one rank and packed under TP2 (with SP), PP2 and CP2
#   (whose samples pad every conversation to a multiple of 4 tokens), and on
#   one emulated GPU (the flash path; two under CP2 under make check-long)
#   (rtol 1e-4); and with learned absolute
#   positions, which see the restarted position ids themselves.
# - The loss counts only the assistant's tokens: every assistant says the same
#   words and every user types random letters, so the loss goes near 0 under
#   nemotron-h-aligned, while the tokenizer's own template (default, where every
#   token carries loss) stays above 0.4.
# - Megatron's SFT evaluation: the mean of the micro-batches' own token means
#   (checked against the per-iteration losses of a one-micro-batch run).
# - Refusals: no SFTTokenizer, mock data, a blend of files, a line without
#   "messages" (file:line), --reset-position-ids.
# The tokenizer is tests/fixtures/tokenizers/bytes-chat: GPT-2's 256 byte
# tokens, no merges, and the special tokens of the prompt formats.
. tests/prog_lib.sh
train_env_begin train_sft
E=${MEGAC_EMU:?run through make test (the emulated build)}
TOKF=tests/fixtures/tokenizers/bytes-chat
setup "conversations, packed and one per line" $PY tests/prog/py/sft_convs.py "$W" 8 3

MODEL="--num-layers 2 --hidden-size 48 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
MODEL="$MODEL --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 96"
MODEL="$MODEL --disable-bias-linear --untie-embeddings-and-output-weights --max-position-embeddings 192"
COMMON="$MODEL --tokenizer-type SFTTokenizer --tokenizer-model $TOKF --sft --hidden-dropout 0 --attention-dropout 0"
COMMON="$COMMON --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 1 --weight-decay 0.01"
COMMON="$COMMON --clip-grad 1.0 --seed 1234 --log-interval 1"
COMMON="$COMMON --calculate-per-token-loss --distributed-timeout-minutes 1"
PACKED="--split 100,0,0 --eval-iters 0 --data-path $W/packed.jsonl --seq-length 192 --micro-batch-size 2"
PACKED="$PACKED --global-batch-size 4"
UNPACKED="--split 100,0,0 --eval-iters 0 --data-path $W/unpacked.jsonl --seq-length 96 --micro-batch-size 4"
UNPACKED="$UNPACKED --global-batch-size 12"

setup "unpacked: one conversation a line, one rank, 6 iterations" sh -c "$BIN/train $COMMON $UNPACKED \
	--train-iters 6 --metrics-file $W/m_unpacked.jsonl >$W/unpacked.log 2>&1"
expect_ok "packed: three conversations a line, one rank, 6 iterations" sh -c "$BIN/train $COMMON $PACKED \
	--train-iters 6 --metrics-file $W/m_packed1.jsonl --save $W/ckpt --save-interval 6 >$W/packed1.log"
compare_same "packed on one rank equals the conversations one per sequence (lm loss, grad norm)" \
	"$W/m_unpacked.jsonl" "$W/m_packed1.jsonl" 6
expect_ok "packed: TP2 with SP, 6 iterations" sh -c "$MPI -np 2 $BIN/train $COMMON $PACKED --train-iters 6 \
	--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --sequence-parallel \
	--metrics-file $W/m_tp2.jsonl >$W/tp2.log"
compare_same "packed under TP2 with SP equals the conversations one per sequence" \
	"$W/m_unpacked.jsonl" "$W/m_tp2.jsonl" 6
expect_ok "packed: CP2, 6 iterations" sh -c "$MPI -np 2 $BIN/train $COMMON $PACKED --train-iters 6 \
	--context-parallel-size 2 --metrics-file $W/m_cp2.jsonl >$W/cp2.log"
compare_same "packed under CP2 (conversations padded to a multiple of 4) equals them one per sequence" \
	"$W/m_unpacked.jsonl" "$W/m_cp2.jsonl" 6
expect_ok "packed: PP2, 6 iterations" sh -c "$MPI -np 2 $BIN/train $COMMON $PACKED --train-iters 6 \
	--pipeline-model-parallel-size 2 --metrics-file $W/m_pp2.jsonl >$W/pp2.log"
compare_same "packed under PP2 (every stage masks by conversation) equals them one per sequence" \
	"$W/m_unpacked.jsonl" "$W/m_pp2.jsonl" 6
expect_ok "packed: one emulated GPU (flash attention with document masks), 6 iterations" sh -c "$E/bin/train \
	$COMMON $PACKED --train-iters 6 --device cuda --metrics-file $W/m_emu1.jsonl >$W/emu1.log"
RTOL=1e-4 compare_same "packed on one emulated GPU equals the one-rank unpacked run (rtol 1e-4)" \
	"$W/m_unpacked.jsonl" "$W/m_emu1.jsonl" 6
# (CP2 on two emulated GPUs under make check-long: the CPU's CP2 above splits
# the packed positions the same way, the one emulated GPU runs the kernels
# with the conversations' masks, and train_cp_moe.sh runs the CUDA ring with
# document masks on CP2)
if long_only; then
	expect_ok "packed: CP2 on two emulated GPUs, 6 iterations" sh -c "$MPI -np 2 $E/bin/train $COMMON $PACKED \
		--train-iters 6 --context-parallel-size 2 --device cuda --metrics-file $W/m_emu.jsonl >$W/emu.log"
	RTOL=1e-4 compare_same "packed under CP2 on the CUDA kernels equals the one-rank unpacked run (rtol 1e-4)" \
		"$W/m_unpacked.jsonl" "$W/m_emu.jsonl" 6
fi
# learned absolute positions see the position ids themselves (RoPE sees
# only their differences, which the document masks keep within a conversation)
ABS=$(echo "$COMMON" | sed 's/--position-embedding-type rope/--position-embedding-type learned_absolute/')
setup "learned absolute positions, unpacked, 3 iterations" sh -c "$BIN/train $ABS $UNPACKED --train-iters 3 \
	--metrics-file $W/m_abs_unpacked.jsonl >$W/abs_unpacked.log 2>&1"
expect_ok "learned absolute positions, packed, 3 iterations" sh -c "$BIN/train $ABS $PACKED --train-iters 3 \
	--metrics-file $W/m_abs_packed.jsonl >$W/abs_packed.log"
compare_same "with learned absolute positions packed equals unpacked: positions restart at each conversation" \
	"$W/m_abs_unpacked.jsonl" "$W/m_abs_packed.jsonl" 3
if grep -q "SFTTokenizer" "$W/ckpt/iter_0000006/"*.json 2>/dev/null ||
	grep -rqs "SFTTokenizer" "$W/ckpt/iter_0000006/"; then
	ok "the checkpoint records the SFT tokenizer"
else
	notok "the checkpoint records the SFT tokenizer"
	ls -R "$W/ckpt" | head | sed 's/^/#   /'
fi

# the loss counts only the assistant's tokens
# (720 fresh conversations, each seen once in 60 iterations: with an answer
# over every token, the ~10 random letters of a ~60-token conversation keep
# the loss above ln(26) x 10/60 = 0.54)
mkdir -p "$W/big"
setup "720 conversations, packed three a line" $PY tests/prog/py/sft_convs.py "$W/big" 240 3
LEARN="--train-iters 60 --lr 1e-2 --min-lr 1e-3 --lr-warmup-iters 2"
LEARN="$LEARN $(echo "$PACKED" | sed "s|$W/packed|$W/big/packed|")"
final_loss() {
	$PY -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["lm loss of the iteration"])' "$1"
}
expect_ok "nemotron-h-aligned: 60 iterations" sh -c "$BIN/train $COMMON $LEARN --metrics-file $W/m_learn.jsonl \
	>$W/learn.log"
expect_ok "default (the tokenizer's template, every token counts): 60 iterations" sh -c "$BIN/train $COMMON $LEARN \
	--sft-tokenizer-prompt-format default --metrics-file $W/m_all.jsonl >$W/all.log"
l_asst=$(final_loss "$W/m_learn.jsonl" 2>/dev/null || echo nan)
l_all=$(final_loss "$W/m_all.jsonl" 2>/dev/null || echo nan)
if $PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (a < 0.05 and b > 0.4))" \
	"$l_asst" "$l_all"; then
	ok "the assistant's fixed answer is learnt (final loss $l_asst) while a loss over every token stays at $l_all"
else
	notok "the assistant-only loss should go below 0.05 and the every-token loss stay above 0.4 ($l_asst, $l_all)"
fi

# Megatron's SFT evaluation: the mean of each micro-batch's own token mean.
# At lr 1e-20 the model never changes (each step is below an ulp), and with one sample a micro-batch and the
# same file for train and valid, evaluation j (after iteration 2j) sees the
# samples of iterations 2j-1 and 2j, whose logged losses are those samples'
# token means. The file alternates lines of three conversations and of one,
# so a mean pooled over the tokens would differ. The evaluation at the end of
# training reads samples 8 and 9: the first two lines again (the split wraps).
$PY -c 'import sys; d = sys.argv[1]; p, u = [open(d + f).readlines() for f in ("/packed.jsonl", "/unpacked.jsonl")]
open(d + "/mixed.jsonl", "w").writelines(l for i in range(4) for l in (p[i], u[i]))' "$W"
EVAL="--train-data-path $W/mixed.jsonl --valid-data-path $W/mixed.jsonl --seq-length 192 --micro-batch-size 1"
EVAL="$EVAL --global-batch-size 1 --lr 1e-20 --min-lr 1e-20 --lr-warmup-iters 0 --train-iters 8"
EVAL="$EVAL --eval-interval 2 --eval-iters 2"
expect_ok "evaluation: 8 iterations at lr 1e-20, two micro-batches evaluated every 2" sh -c "$BIN/train $COMMON $EVAL \
	--metrics-file $W/m_eval.jsonl >$W/eval.log"
if $PY - "$W/m_eval.jsonl" <<'EVALPY' >"$W/eval.txt" 2>&1; then
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r["lm loss of the iteration"] for r in rows if "lm loss of the iteration" in r]
val = [r["validation lm loss"] for r in rows if "validation lm loss" in r]
# four evaluations, then the one at the end of training, whose samples 8
# and 9 wrap around to the file's first two lines
assert len(train) == 8 and len(val) == 5, (train, val)
worst = 0
for j, v in enumerate(val):
    want = (train[2 * j % 8] + train[(2 * j + 1) % 8]) / 2
    worst = max(worst, abs(v - want) / abs(want))
assert worst <= 1e-6, (val, train)
spread = max(abs(train[2 * j] - train[2 * j + 1]) for j in range(4))
assert spread > 1e-4, "the samples' means are too close to tell the formulas apart: %g" % spread
print("worst relative difference %.1e" % worst)
EVALPY
	ok "the validation loss is the mean of the micro-batches' token means ($(cat "$W/eval.txt"))"
else
	notok "the validation loss is the mean of the micro-batches' token means"
	show "$W/eval.txt"
fi

# refusals
expect_fail "--sft needs the SFT tokenizer" "--tokenizer-type SFTTokenizer" $BIN/train \
	$(echo "$COMMON" | sed 's/--tokenizer-type SFTTokenizer/--tokenizer-type HuggingFaceTokenizer/') $PACKED \
	--train-iters 1
expect_fail "--sft without data" "there is no mock SFT data" $BIN/train $COMMON --seq-length 64 \
	--micro-batch-size 1 --train-iters 1 --eval-iters 0
expect_fail "a blend of SFT files" "blending several SFT files" $BIN/train $COMMON --seq-length 64 \
	--micro-batch-size 1 --train-iters 1 --eval-iters 0 --data-path 0.5 "$W/packed.jsonl" 0.5 "$W/unpacked.jsonl"
printf '{"messages": []}\n\n{"text": "no messages"}\n' >"$W/bad.jsonl"
expect_fail "a line without messages names its file and line" "bad.jsonl:3: an SFT line is an object" $BIN/train \
	$COMMON --seq-length 64 --micro-batch-size 1 --train-iters 1 --eval-iters 0 --data-path "$W/bad.jsonl"
expect_fail "--reset-position-ids is refused (SFT builds its own)" "drop --reset-position-ids" $BIN/train $COMMON \
	$PACKED --train-iters 1 --reset-position-ids
