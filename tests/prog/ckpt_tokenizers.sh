# ckpt_tokenizers.sh - the tokenizers that are not text files travel with a
# checkpoint too: a model trained with a SentencePiece Llama2Tokenizer
# records its .model (base64, crc32 checked) and one trained with a
# TikTokenizer its vocabulary and settings (pattern, special tokens), so
# text_gen_server and ckpt_convert need no tokenizer flags for them; the
# Hugging Face export of the SentencePiece model writes tokenizer.model, a
# tokenizer_config.json (LlamaTokenizer, BOS added) and a tokenizer.json
# converted from the model, which transformers' AutoTokenizer loads without
# the sentencepiece package, giving megac's ids after the BOS; config.json
# has the model's bos/eos ids. A record that lists a tokenizer without its
# files (an older checkpoint) asks for the flags.
. tests/prog_lib.sh
train_env_begin ckpt_tokenizers
C=$BIN/ckpt_convert
SPM_MODEL=$FIX/tokenizers/spm-json/llama_bpe.model
SPM="--tokenizer-type Llama2Tokenizer --tokenizer-model $SPM_MODEL"
xz -dc $FIX/tokenizers/tiktoken/vocab.json.xz >"$W/tiktoken.json"
TIK="--tokenizer-type TikTokenizer --tokenizer-model $W/tiktoken.json --vocab-size 3512 --tiktoken-pattern v1"
TIK="$TIK --tiktoken-num-special-tokens 12"
BASE="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
BASE="$BASE --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 4 --mock-data --eval-iters 0"
BASE="$BASE --eval-interval 1000 --log-interval 1 --seed 1234 --data-cache-path $W/cache --save-interval 4"
BASE="$BASE --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear"
BASE="$BASE --untie-embeddings-and-output-weights"
attr() { $PY -c 'import h5py, sys; v = h5py.File(sys.argv[1], "r").attrs[sys.argv[2]]; print(v.decode() if isinstance(v, bytes) else v)' "$1" "$2"; }

setup "train with Llama2Tokenizer" $BIN/train $BASE $SPM --save "$W/spm"
setup "train with TikTokenizer (v1, 12 special tokens)" $BIN/train $BASE $TIK --save "$W/tik"

# ---- the records
if $PY - "$W/spm/iter_0000004/model.h5" "$SPM_MODEL" "$W/tik/iter_0000004/model.h5" "$W/tiktoken.json" \
	>"$W/rec.log" 2>&1 <<'EOF'; then
import base64, binascii, h5py, json, sys
a = h5py.File(sys.argv[1], "r").attrs
rec = json.loads(a["tokenizer"])
raw = open(sys.argv[2], "rb").read()
f = rec["files"]["tokenizer.model"]
assert rec["tokenizer_type"] == "Llama2Tokenizer" and f["encoding"] == "base64", rec
s = a["tokenizer_file.tokenizer.model"]
assert base64.b64decode(s) == raw and f["bytes"] == len(raw) and f["crc32"] == binascii.crc32(raw), "the .model differs"
assert rec["tokenizer_sentencepiece_ignore_extra_whitespaces"] is True, rec
a = h5py.File(sys.argv[3], "r").attrs
rec = json.loads(a["tokenizer"])
assert rec["tokenizer_type"] == "TikTokenizer" and rec["tiktoken_pattern"] == "v1", rec
assert rec["tiktoken_num_special_tokens"] == 12 and rec["tiktoken_vocab_size"] == 3512 and rec["vocab_size"] == 3512, rec
s = a["tokenizer_file.tiktoken.json"]
assert (s if isinstance(s, bytes) else s.encode()) == open(sys.argv[4], "rb").read(), "tiktoken.json differs"
EOF
	ok "model.h5 records the SentencePiece .model (base64, byte for byte) and TikTokenizer's vocabulary and settings"
else
	notok "the tokenizer records"
	show "$W/rec.log"
fi

# ---- serving without tokenizer flags: the same answers as with them
serve() { # NAME DIR [FLAGS...] -> $W/NAME.txt
	_name=$1
	_dir=$2
	shift 2
	_port=$(free_port)
	mkdir -p "$W/stmp"
	TMPDIR=$W/stmp $BIN/text_gen_server --load "$_dir" --port "$_port" --inference-max-seq-length 32 "$@" \
		>"$W/$_name.srv" 2>&1 &
	_pid=$!
	$PY - "$_port" >"$W/$_name.txt" 2>>"$W/$_name.srv" <<'EOF'
import json, sys, urllib.request
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
base = "http://127.0.0.1:%s" % sys.argv[1]
wait_health(base)
req = urllib.request.Request(base + "/api", data=json.dumps({"prompts": ["In the beginning God"], "tokens_to_generate": 6,
                             "top_k": 1}).encode(), method="PUT", headers={"Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req, timeout=60).read())["text"][0])
EOF
	_rc=$?
	kill -TERM $_pid 2>/dev/null
	wait $_pid
	return $_rc
}
for k in spm tik; do
	F=$SPM
	[ $k = tik ] && F=$TIK
	mkdir -p "$W/moved"
	cp -r "$W/$k" "$W/moved/$k"
	if serve ${k}flags "$W/$k" $F && serve ${k}rec "$W/moved/$k" &&
		grep -q "no tokenizer flags: using the tokenizer .* records" "$W/${k}rec.srv" &&
		[ -n "$(tr -d ' \n' <"$W/${k}flags.txt")" ] && cmp -s "$W/${k}flags.txt" "$W/${k}rec.txt"; then
		ok "$k: served without tokenizer flags, it answers as with them: '$(cat "$W/${k}rec.txt")'"
	else
		notok "$k: serving with the recorded tokenizer"
		show "$W/${k}rec.srv" 3
	fi
done
[ -z "$(ls -A "$W/stmp")" ] && ok "... the servers removed their temporary tokenizer files" ||
	notok "a server left its tokenizer folder behind: $(ls -A "$W/stmp")"

# ---- ckpt_convert without tokenizer flags
expect_ok "tik: a layout conversion carries the record" $C --load "$W/tik" --save "$W/tik1"
attr "$W/tik1/iter_0000004/model.h5" tokenizer | grep -q '"tiktoken_num_special_tokens": 12' &&
	ok "... with TikTokenizer's settings" || notok "the converted checkpoint's record"
expect_ok "tik: the Hugging Face export takes the recorded vocabulary" $C --load "$W/tik" --save "$W/tikhf" --to hf
[ -s "$W/tikhf/tiktoken.json" ] && grep -q '"eos_token_id": 2' "$W/tikhf/config.json" &&
	ok "... tiktoken.json in the folder, config.json's eos_token_id 2" || notok "the TikTokenizer export"

expect_ok "spm: the Hugging Face export without tokenizer flags" $C --load "$W/moved/spm" --save "$W/hf" --to hf
# megac's ids of the test strings
cat >"$W/texts.jsonl" <<'EOF'
{"text": "In the beginning God created the heaven and the earth."}
{"text": "Hello world, this is a test."}
{"text": "  two  spaces, a tab\there and digits 12345 ☯ Ünïcödé"}
{"text": "I'm sure you'd've done it; they're here."}
EOF
setup "megac's Llama2Tokenizer ids of the test strings" $BIN/preprocess_data --input "$W/texts.jsonl" \
	--output-prefix "$W/ids" $SPM --workers 1 --log-interval 0
hf_env "$W/pyenv.log"
if "$HF" - "$W/hf" "$W/ids_text_document" "$W/texts.jsonl" >"$W/hf.log" 2>&1 <<'EOF'; then
import json, os, sys
import numpy as np
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
d, p, texts = sys.argv[1:]
cfg = json.load(open(d + "/config.json"))
assert cfg["bos_token_id"] == 1 and cfg["eos_token_id"] == 2, (cfg["bos_token_id"], cfg["eos_token_id"])
tc = json.load(open(d + "/tokenizer_config.json"))
assert tc["tokenizer_class"] == "LlamaTokenizer" and tc["add_bos_token"] is True, tc
assert (tc["bos_token"], tc["eos_token"], tc["unk_token"]) == ("<s>", "</s>", "<unk>"), tc
assert os.path.exists(d + "/tokenizer.model")
b = open(p + ".idx", "rb").read()
S = int.from_bytes(b[18:26], "little")
lens = np.frombuffer(b, np.int32, S, 34).tolist()
dt = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[b[17]]
toks = np.fromfile(p + ".bin", dt).tolist()
t = AutoTokenizer.from_pretrained(d)
at = 0
for line, n in zip(open(texts), lens):
    text = json.loads(line)["text"]
    mine = toks[at:at + n]
    at += n
    assert t(text)["input_ids"] == [1] + mine, (text, t(text)["input_ids"], mine)
assert t.eos_token_id == 2 and t.bos_token_id == 1
AutoConfig.from_pretrained(d)
AutoModelForCausalLM.from_pretrained(d)
print(type(t).__name__)
EOF
	ok "AutoTokenizer loads the export ($(tail -n 1 "$W/hf.log"), no sentencepiece) with megac's ids after <s>; config.json: bos 1, eos 2; the model loads"
else
	notok "the SentencePiece export in transformers"
	show "$W/hf.log"
fi
# the converted tokenizer.json is transformers' own conversion of the model
if $PY - "$W/hf/tokenizer.json" $FIX/tokenizers/spm-json/variants.json.xz >"$W/tj.log" 2>&1 <<'EOF'; then
import json, lzma, sys
mine = json.load(open(sys.argv[1]))
ref = [v for v in json.load(lzma.open(sys.argv[2], "rt", encoding="utf-8")) if v["name"] == "llama2_legacy"][0]["tokenizer"]
for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"):
    assert mine[k] == ref[k], k
assert mine["model"]["vocab"] == ref["model"]["vocab"], "vocab"
m = [tuple(x) for x in mine["model"]["merges"]]
r = [tuple(x) for x in ref["model"]["merges"]]
assert m == r, ("merges", len(m), len(r), next((i, a, b) for i, (a, b) in enumerate(zip(m, r)) if a != b))
EOF
	ok "... its tokenizer.json is what transformers' LlamaConverter makes of the model (vocab, merges, layout)"
else
	notok "the converted tokenizer.json"
	show "$W/tj.log"
fi

# ---- a record without the files (written before megac kept a .model)
cp -r "$W/spm" "$W/old"
$PY - "$W/old/iter_0000004/model.h5" <<'EOF'
import h5py, json, sys
with h5py.File(sys.argv[1], "r+") as f:
    rec = json.loads(f.attrs["tokenizer"])
    rec["files"] = {}
    f.attrs["tokenizer"] = json.dumps(rec)
    del f.attrs["tokenizer_file.tokenizer.model"]
EOF
expect_fail "an older record of a Llama2Tokenizer without its file asks for the flags" \
	"records a Llama2Tokenizer without its files (they were not kept): give the tokenizer flags" \
	timeout 60 $BIN/text_gen_server --load "$W/old" --port 0
expect_ok "... and with them it exports" $C --load "$W/old" --save "$W/oldhf" --to hf $SPM
[ -s "$W/oldhf/tokenizer.model" ] && [ -s "$W/oldhf/tokenizer.json" ] && grep -q '"eos_token_id": 2' "$W/oldhf/config.json" &&
	ok "... with tokenizer.model, tokenizer.json and eos_token_id 2" || notok "the export with tokenizer flags"
# a damaged copy of the .model is refused, naming it
cp -r "$W/spm" "$W/bad"
$PY - "$W/bad/iter_0000004/model.h5" <<'EOF'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    s = f.attrs["tokenizer_file.tokenizer.model"]
    s = s.decode() if isinstance(s, bytes) else s
    f.attrs["tokenizer_file.tokenizer.model"] = ("B" if s[0] != "B" else "C") + s[1:]
EOF
expect_fail "a damaged .model copy is refused" "the tokenizer file 'tokenizer.model' stored there is corrupt" \
	timeout 60 $BIN/text_gen_server --load "$W/bad" --port 0
