# preprocess_multilingual.sh - preprocess_data on a multilingual corpus
# (tests/fixtures/tokenizers/multilingual/: a dozen scripts, emoji with ZWJ
# and skin tones, C and Python source, URLs, numbers, whitespace runs, CRLF,
# NBSP, zero-width characters, combining marks), with every SentencePiece
# model, both TikTokenizer settings, the SentencePiece-style tokenizer.json
# variants and the GPT-2 and Qwen3 tokenizer.json: the .bin/.idx hold, on
# every document, the ids of the reference library (sentencepiece, tiktoken,
# Hugging Face tokenizers; make_multilingual.py), with and without
# --append-eod (EOD after each document with ids, none after an empty one).
. tests/prog_lib.sh
W=$(new_tmp prep_multi)
OUT_LOG=$W/out.log
ERR=$W/err.log
T=$FIX/tokenizers

# the models, and per config a JSONL of the texts plus the ids they must give
setup "models, vocabularies and the corpus from the fixtures" /usr/bin/python3 - "$W" "$T" <<'PY'
import json, lzma, os, shutil, sys
w, t = sys.argv[1:]
for name in ("llama", "unibyte"):
    shutil.copy(f"{t}/spm/{name}.model", w)
for name in ("unigram", "user"):
    open(f"{w}/{name}.model", "wb").write(lzma.open(f"{t}/spm/{name}.model.xz").read())
open(f"{w}/vocab.json", "wb").write(lzma.open(f"{t}/tiktoken/vocab.json.xz").read())
for v in json.load(lzma.open(f"{t}/spm-json/variants.json.xz", "rt", encoding="utf-8")):
    os.makedirs(f"{w}/hf-{v['name']}")
    json.dump(v["tokenizer"], open(f"{w}/hf-{v['name']}/tokenizer.json", "w"))
    json.dump({"eos_token": "</s>"}, open(f"{w}/hf-{v['name']}/tokenizer_config.json", "w"))
for name in ("gpt2", "qwen3"):
    os.makedirs(f"{w}/hf-{name}")
    open(f"{w}/hf-{name}/tokenizer.json", "wb").write(lzma.open(f"{t}/{name}/tokenizer.json.xz").read())
shutil.copy(f"{t}/qwen3/tokenizer_config.json", f"{w}/hf-qwen3/")
rows = [json.loads(l) for l in lzma.open(f"{t}/multilingual/refs.jsonl.xz", "rt", encoding="utf-8")]
with open(f"{w}/corpus.jsonl", "w", encoding="utf-8") as f:
    for r in rows:
        f.write(json.dumps({"text": r["text"]}) + "\n")
configs = [k for k in rows[0] if k != "text"]
for c in configs:
    with open(f"{w}/want-{c.replace(':', '-')}.json", "w") as f:
        ids = []
        for r in rows:
            v = r[c]
            while isinstance(v, str):  # "=<config>": the same ids as that config
                v = r[v[1:]]
            ids.append(v)
        json.dump(ids, f)
print(" ".join(configs))
PY

# check PREFIX CONFIG EOD: the dataset holds CONFIG's ids, EOD after each document with ids (EOD -1: none)
check() {
	/usr/bin/python3 - "$W/$1_text_document" "$W/want-$2.json" "$3" <<'PY'
import json, sys
import numpy as np
p, want_file, eod = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = open(p + ".idx", "rb").read()
S = int.from_bytes(b[18:26], "little")
lens = np.frombuffer(b, np.int32, S, 34).tolist()
dt = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[b[17]]
toks = np.fromfile(p + ".bin", dt).tolist()
want = [ids + ([eod] if eod >= 0 else []) for ids in json.load(open(want_file)) if ids]
assert len(lens) == len(want), f"{len(lens)} sequences, want {len(want)}"
pos = 0
for d, (n, w) in enumerate(zip(lens, want)):
    got = toks[pos:pos + n]
    pos += n
    if got != w:
        k = next((i for i, (a, c) in enumerate(zip(got, w)) if a != c), min(len(got), len(w)))
        sys.exit(f"document {d} (with ids): ids differ at {k}: got {got[k:k + 5]}, want {w[k:k + 5]} "
                 f"({len(got)} vs {len(w)} ids)")
assert pos == len(toks), "extra tokens in the .bin"
PY
}

P="$BIN/preprocess_data --input $W/corpus.jsonl --log-interval 0"
# run NAME EOD ARGS...: the config's ids, with and without --append-eod
run() {
	_c=$1
	_e=$2
	shift 2
	expect_ok "$_c: preprocess_data" $P --output-prefix "$W/$_c-plain" "$@"
	expect_ok "$_c: every document's ids = the reference's" check "$_c-plain" "$_c" -1
	expect_ok "$_c: preprocess_data --append-eod, 2 workers" env MEGAC_CHUNK_BYTES=4000 $P --output-prefix "$W/$_c-eod" \
		--append-eod --workers 2 "$@"
	expect_ok "$_c: the same ids, EOD $_e after each document" check "$_c-eod" "$_c" "$_e"
}
run spm-llama 2 --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/llama.model"
run spm-unigram 2 --tokenizer-type SentencePieceTokenizer --tokenizer-model "$W/unigram.model"
run spm-user 1 --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model "$W/user.model"
run spm-unibyte 2 --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/unibyte.model"
run tiktoken-v2 2 --tokenizer-type TikTokenizer --tokenizer-model "$W/vocab.json" --vocab-size 5000
run tiktoken-v1 2 --tokenizer-type TikTokenizer --tokenizer-model "$W/vocab.json" --vocab-size 3512 \
	--tiktoken-pattern v1 --tiktoken-num-special-tokens 12 \
	--tokenizer-special-tokens '<unk>' '<s>' '</s>' '<mask>' '<pad>' '<cls>' '<sep>' '<|im_start|>' '<|im_end|>' '<a>'
for v in llama2_legacy llama2_metaspace metaspace_always_split metaspace_first_in_sequence gemma_like \
	nfkc_strip_nodecoder unk_fused unk_unfused; do
	run "hf-$v" 2 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/hf-$v"
done
run hf-gpt2 50256 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/hf-gpt2"
run hf-qwen3 151645 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/hf-qwen3"
