# sft_data.sh - lib/data/sft.c (Megatron's SFT tokenizer and packing) against
# tests/prog/py/sft_ref.py, a Python transcription of Megatron's
# SFTTokenizer.tokenize_conversation and SFTDataset.__getitem__ on
# transformers 4.49 (tests/py-env.sh). tests/tools/megac_sft and the
# reference build the samples of tests/fixtures/sft/*.jsonl (system-message
# splits, multi-turn, unicode, truncation at the sequence length, CP 1 and
# 2) from the same tokenizer folders, and they must be identical, with
# refusals on the same lines:
#   qwen3 + the Qwen2.5 template, and qwen3's own template      default
#   Llama-3 + the Llama-3.1 template (a BOS token)               default
#   gpt2 + <s> </s> [INST] [/INST], the Mistral v0.3 template    default
#   gpt2 + <unk> <SPECIAL_10/11/12/233>   identity, nemotron-h-aligned,
#                                         nemotron-nano-v2
. tests/prog_lib.sh
W=$(new_tmp sft_data)
OUT_LOG=$W/out.log
ERR=$W/err.log
TOOL=$MEGAC_BUILD/tools/megac_sft
REF=tests/prog/py/sft_ref.py
TOK=tests/fixtures/tokenizers
TPL=tests/fixtures/chat_templates
CONVS=tests/fixtures/sft/conversations.jsonl
EDGE=tests/fixtures/sft/edge.jsonl

hf_env "$W/pyenv.log"
[ "$HF" = false ] && exit 1

setup "qwen3 folders" "$HF" $REF folder $TOK/qwen3 "$W/qwen3"
setup "qwen3 + Qwen2.5 template" "$HF" $REF folder $TOK/qwen3 "$W/qwen25" --template $TPL/qwen2.5-7b-instruct.jinja
setup "Llama-3 + Llama-3.1 template" "$HF" $REF folder $TOK/llama3 "$W/llama31" \
	--template $TPL/llama3.1-8b-instruct.jinja
setup "a Mistral-style tokenizer" "$HF" $REF folder $TOK/gpt2 "$W/mistral" --add '<s>' --add '</s>' \
	--add '[INST]' --add '[/INST]' --config '{"bos_token": "<s>", "eos_token": "</s>"}' \
	--template $TPL/mistral-7b-instruct-v0.3.jinja
setup "a tokenizer with Nemotron's special tokens" "$HF" $REF folder $TOK/gpt2 "$W/nemo" --add '<unk>' \
	--add '<SPECIAL_10>' --add '<SPECIAL_11>' --add '<SPECIAL_12>' --add '<SPECIAL_233>' \
	--config '{"eos_token": "<|endoftext|>"}'
setup "gpt2 without <unk>" "$HF" $REF folder $TOK/gpt2 "$W/plain" --config '{"eos_token": "<|endoftext|>"}'

# NAME:FOLDER:FORMAT:SEQ_LENGTH:CP:CONVERSATIONS
JOBS="qwen25-default-64-cp1:qwen25:default:64:1:$CONVS
qwen3-default-256-cp2:qwen3:default:256:2:$CONVS
llama31-default-64-cp2:llama31:default:64:2:$CONVS
llama31-default-512-cp1:llama31:default:512:1:$CONVS
mistral-default-64-cp1:mistral:default:64:1:$CONVS
mistral-default-128-cp2:mistral:default:128:2:$CONVS
identity-64-cp1:nemo:identity:64:1:$CONVS
h-aligned-64-cp2:nemo:nemotron-h-aligned:64:2:$CONVS
h-aligned-200-cp1:nemo:nemotron-h-aligned:200:1:$CONVS
nano-v2-128-cp1:nemo:nemotron-nano-v2:128:1:$CONVS
nano-v2-64-cp2:nemo:nemotron-nano-v2:64:2:$CONVS
edge-h-aligned:nemo:nemotron-h-aligned:32:1:$EDGE
edge-nano-v2:nemo:nemotron-nano-v2:32:2:$EDGE
edge-default:qwen25:default:32:1:$EDGE"

# the reference: one python for every job (importing transformers is most of the time)
set --
for j in $JOBS; do
	set -- "$@" "$(echo "$j" | sed "s|^\([^:]*\):\([^:]*\):|\1:$W/\2:|")"
done
setup "the reference's samples" "$HF" $REF samples "$W" "$@"

for j in $JOBS; do
	IFS=: read -r n f fmt seq cp c <<EOT
$j
EOT
	if ! "$TOOL" "$W/$f" "$fmt" "$seq" "$cp" "$c" >"$W/$n.ours" 2>"$W/$n.err"; then
		notok "$n: megac_sft failed"
		show "$W/$n.err"
		continue
	fi
	if "$HF" $REF compare "$W/$n.ours" "$W/$n.ref" >"$W/$n.cmp" 2>&1; then
		ok "$n: $(tail -n 1 "$W/$n.cmp")"
	else
		notok "$n: differs from the reference"
		show "$W/$n.cmp" 6
	fi
done

# the three fixed templates are Megatron's text, as the reference has it
for fmt in identity nemotron-h-aligned nemotron-nano-v2; do
	"$TOOL" --template $fmt >"$W/$fmt.jinja"
done
expect_ok "the fixed templates are the reference's, character for character" "$HF" -c "
import sys; sys.path.insert(0, 'tests/prog/py'); import sft_ref
for f, t in (('identity', sft_ref.IDENTITY), ('nemotron-h-aligned', sft_ref.H_ALIGNED),
             ('nemotron-nano-v2', sft_ref.NANO_V2)):
    assert open('$W/' + f + '.jinja', encoding='utf-8').read() == t, f"

# refusals name the line, and the turn
refused() { # NAME FILE PATTERN
	if grep -q "$3" "$2"; then ok "$1"; else notok "$1"; show "$2" 4; fi
}
refused "an empty assistant turn is refused naming its line" "$W/edge-nano-v2.ours" \
	'"error":"[^"]*edge.jsonl:1: conversation 1 (messages 1-2): turn 2 is an empty assistant turn"'
refused "an assistant turn after a system turn is refused naming its line" "$W/edge-h-aligned.ours" \
	'"error":"[^"]*edge.jsonl:2: [^"]*turn 2 is an assistant turn that does not follow a user or tool turn'
expect_fail "an unknown prompt format is refused" "unknown SFT prompt format 'chatml'" \
	"$TOOL" "$W/nemo" chatml 64 1 "$CONVS"
expect_fail "a missing pad token is refused" "pads with <SPECIAL_233>, which the tokenizer does not have" \
	"$TOOL" "$W/plain" nemotron-h-aligned 64 1 "$CONVS"
expect_fail "default without a chat template is refused" "has none (no chat_template.jinja" \
	"$TOOL" "$W/plain" default 64 1 "$CONVS"
