# chat_server.sh - text_gen_server's /v1/chat/completions prompt is the
# tokenizer's chat template, over real HTTP on loopback: tiny untrained
# models with the Qwen3 and the Llama-3 tokenizer folders
# (tests/fixtures/tokenizers) are served, and for several conversations the
# prompt's ids the server reports ("return_token_ids") must equal
# transformers' apply_chat_template(..., add_generation_prompt=True) ids
# (tests/prog/py/chat_server_check.py, on tests/py-env.sh): Qwen3's own
# template (tokenizer_config.json), Qwen2.5's as chat_template.jinja (which
# wins over the config's), the Llama-3 base template (BOS written by the
# template; the BOS the tokenizer's post-processor adds must not be added
# too), and Gemma-2's
# given as --chat-template, which refuses system turns and turns that do not
# alternate (400 with its message); and Qwen3's again from the tokenizer a
# checkpoint records, served without tokenizer flags. The start-up log names
# the prompt used; a template megac cannot parse stops the server. An
# SFTTokenizer serves its prompt format (nemotron-h-aligned) the same way.
. tests/prog_lib.sh
W=$(new_tmp chat_server)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
TPL=tests/fixtures/chat_templates

hf_env "$W/pyenv.log"
[ "$HF" = false ] && exit 1

for t in qwen3 llama3; do
	mkdir -p "$W/$t"
	xz -dc tests/fixtures/tokenizers/$t/tokenizer.json.xz >"$W/$t/tokenizer.json"
	cp tests/fixtures/tokenizers/$t/tokenizer_config.json "$W/$t/"
done
# Llama-3's post-processor as Meta later published it: BOS before every
# text, which apply_chat_template does not add (the template writes it)
setup "a Llama-3 tokenizer whose post-processor adds BOS" /usr/bin/python3 -c '
import json, sys
p = sys.argv[1]
t = json.load(open(p, encoding="utf-8"))
bos = {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}
tp = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}},
      {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {"<|begin_of_text|>": bos}}
t["post_processor"] = {"type": "Sequence", "processors": [t["post_processor"], tp]}
json.dump(t, open(p, "w", encoding="utf-8"), ensure_ascii=False)' "$W/llama3/tokenizer.json"
mkdir -p "$W/qwen25"
cp "$W/qwen3/tokenizer.json" "$W/qwen3/tokenizer_config.json" "$W/qwen25/"
cp $TPL/qwen2.5-7b-instruct.jinja "$W/qwen25/chat_template.jinja"

ARGS="--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --max-position-embeddings 512"
ARGS="$ARGS --micro-batch-size 1 --global-batch-size 1 --lr 1e-3 --train-iters 0 --mock-data --eval-iters 0"
for t in qwen3 llama3; do
	# shellcheck disable=SC2086
	setup "an untrained model with the $t tokenizer" "$BIN/train" $ARGS --data-cache-path "$W/cache" \
		--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/$t" --save "$W/ck-$t"
done

# SFTTokenizer serves its prompt format's template: Megatron's nemotron-h-aligned
# text (the reference renders the same text through transformers)
# shellcheck disable=SC2086
setup "an untrained model with the SFT tokenizer" "$BIN/train" $ARGS --data-cache-path "$W/cache" \
	--tokenizer-type SFTTokenizer --tokenizer-model tests/fixtures/tokenizers/bytes-chat --save "$W/ck-sft"
setup "Megatron's nemotron-h-aligned template" sh -c "$MEGAC_BUILD/tools/megac_sft --template nemotron-h-aligned \
	>$W/h-aligned.jinja"
SFT_PORT=$(free_port)
"$BIN/text_gen_server" --load "$W/ck-sft" --tokenizer-type SFTTokenizer --tokenizer-model \
	tests/fixtures/tokenizers/bytes-chat --sft-tokenizer-prompt-format nemotron-h-aligned --port "$SFT_PORT" \
	>"$W/sft.log" 2>&1 &
SFT_PID=$!

# NAME:CHECKPOINT:FOLDER:TEMPLATE (a file given as --chat-template, - for none)
SERVERS="qwen3:qwen3:qwen3:-
qwen25:qwen3:qwen25:-
llama3:llama3:llama3:-
gemma2:llama3:llama3:$TPL/gemma-2-it.jinja"
PIDS=""
set --
for s in $SERVERS; do
	IFS=: read -r name ck folder tpl <<EOT
$s
EOT
	port=$(free_port)
	if [ "$tpl" = - ]; then
		"$BIN/text_gen_server" --load "$W/ck-$ck" --tokenizer-type HuggingFaceTokenizer --tokenizer-model \
			"$W/$folder" --port "$port" >"$W/$name.log" 2>&1 &
	else
		"$BIN/text_gen_server" --load "$W/ck-$ck" --tokenizer-type HuggingFaceTokenizer --tokenizer-model \
			"$W/$folder" --port "$port" --chat-template "$(cat "$tpl")" >"$W/$name.log" 2>&1 &
	fi
	PIDS="$PIDS $!"
	set -- "$@" "$name:$port:$W/$folder:$tpl"
done
# no tokenizer flags: the checkpoint's recorded tokenizer_config.json brings its template
port=$(free_port)
"$BIN/text_gen_server" --load "$W/ck-qwen3" --port "$port" >"$W/recorded.log" 2>&1 &
PIDS="$PIDS $!"
set -- "$@" "recorded:$port:$W/qwen3:-" "sft:$SFT_PORT:tests/fixtures/tokenizers/bytes-chat:$W/h-aligned.jinja"
PIDS="$PIDS $SFT_PID"
mkdir -p "$W/plain"
cp "$W/llama3/tokenizer.json" "$W/plain/"
sed 's/"chat_template"/"no_chat_template"/' "$W/llama3/tokenizer_config.json" >"$W/plain/tokenizer_config.json"
PLAIN_PORT=$(free_port)
"$BIN/text_gen_server" --load "$W/ck-llama3" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/plain" \
	--port "$PLAIN_PORT" >"$W/plain.log" 2>&1 &
P=$!
"$HF" tests/prog/py/chat_server_check.py "$@" || notok "chat_server_check.py exited $?"
for p in $PIDS; do
	kill -TERM "$p"
	wait "$p"
done

# the start-up line names the chat prompt
said() {
	if grep -qF -- "$3" "$W/$2.log"; then ok "$1"; else notok "$1"; show "$W/$2.log"; fi
}
said "the log names the tokenizer_config.json template" qwen3 \
	"chat prompts: the tokenizer's chat template, from $W/qwen3/tokenizer_config.json (chat_template)"
said "the log names chat_template.jinja" qwen25 \
	"chat prompts: the tokenizer's chat template, from $W/qwen25/chat_template.jinja"
said "the log names --chat-template" gemma2 "chat prompts: the template of --chat-template"
said "the log names SFTTokenizer's prompt format" sft "chat prompts: SFTTokenizer's nemotron-h-aligned prompt format"

# a folder without a template (started with the others): the built-in prompt, said so
if /usr/bin/python3 - "$PLAIN_PORT" >"$W/plain.out" 2>&1 <<'EOF'; then
import json, sys, urllib.request
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
base = "http://127.0.0.1:%s" % sys.argv[1]
assert wait_health(base)
body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "echo": True, "temperature": 0,
        "return_token_ids": True}
req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                             headers={"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=60).read())
text, ids = r["choices"][0]["message"]["content"], r["prompt_token_ids"]
# the prompt encoded as before: the post-processor's BOS (128000) first
assert text.startswith("<|begin_of_text|>user: Hi\nassistant:") and ids[0] == 128000, (text, ids)
print("echo %r, BOS first" % text[:20])
EOF
	ok "no chat template: the built-in \"role: content\" prompt ($(cat "$W/plain.out"))"
else
	notok "no chat template: the built-in \"role: content\" prompt"
	show "$W/plain.out"
fi
kill -TERM $P
wait $P
said "the log says the built-in prompt is used" plain \
	"chat prompts: \"role: content\" lines and \"assistant:\" ($W/plain has no chat template)"

expect_fail "a template megac cannot parse stops the server" "--chat-template:1:31: filter 'bogus' is not supported" \
	"$BIN/text_gen_server" --load "$W/ck-qwen3" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/qwen3" \
	--port 0 --chat-template "{% for m in messages %}{{ m | bogus }}{% endfor %}"
# shellcheck disable=SC2086
expect_fail "--chat-template is text_gen_server's only" "only text_gen_server takes a chat template" \
	"$BIN/train" $ARGS --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/qwen3" --chat-template x
rm -rf "$W"
