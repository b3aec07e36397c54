# preprocess_spm.sh - preprocess_data with the SentencePiece tokenizer types:
# the .bin/.idx hold sentencepiece's ids (tests/fixtures/tokenizers/spm/,
# refs.jsonl.xz) plus Megatron's EOD rule (the model's </s> after every
# document with ids, none after an empty one, no BOS), with 1 and 3 workers,
# --no-tokenizer-sentencepiece-ignore-extra-whitespaces, and the errors for
# a missing or wrong --tokenizer-model.
. tests/prog_lib.sh
W=$(new_tmp prep_spm)
OUT_LOG=$W/out.log
ERR=$W/err.log
SPM=$FIX/tokenizers/spm

setup "models and the corpus from the fixtures" sh -c "cp $SPM/llama.model $W/ && xz -dc $SPM/unigram.model.xz >$W/unigram.model && xz -dc $SPM/refs.jsonl.xz >$W/refs.jsonl"
# one document per reference line of a model: its text, and the ids it must give
/usr/bin/python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
for model in ("llama", "unigram"):
    with open(f"{w}/refs.jsonl", encoding="utf-8") as f, open(f"{w}/{model}.jsonl", "w", encoding="utf-8") as out:
        for line in f:
            r = json.loads(line)
            if r["model"] == model:
                out.write(json.dumps({"text": r["text"], "ids": r["ids"],
                                      "keep": r.get("ids_keep_spaces", r["ids"])}) + "\n")
PY

# check PREFIX MODEL FIELD EOD: the dataset holds FIELD's ids, EOD after each non-empty document
check() {
	/usr/bin/python3 - "$W" "$@" <<'PY'
import json, sys, numpy as np
w, prefix, model, field, eod = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
want_lens, want = [], []
for line in open(f"{w}/{model}.jsonl", encoding="utf-8"):
    ids = json.loads(line)[field]
    if ids:
        seq = ids + ([eod] if eod >= 0 else [])
        want_lens.append(len(seq))
        want += seq
b = open(prefix + ".idx", "rb").read()
assert b[:9] == b"MMIDIDX\x00\x00", "not an index"
S = int.from_bytes(b[18:26], "little")
lens = np.frombuffer(b, np.int32, S, 34).tolist()
toks = np.fromfile(prefix + ".bin", np.uint16).tolist()
assert lens == want_lens, f"sequence lengths differ ({len(lens)} vs {len(want_lens)} sequences)"
assert toks == want, "token ids differ"
PY
}

P="$BIN/preprocess_data --log-interval 0"
expect_ok "Llama2Tokenizer, --append-eod" $P --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/llama.model" --input "$W/llama.jsonl" --output-prefix "$W/a" --append-eod
expect_ok "ids = sentencepiece's, EOD 2 after each non-empty document" check "$W/a_text_document" llama ids 2
expect_ok "3 workers, tiny work items" env MEGAC_CHUNK_BYTES=3000 $P --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/llama.model" --input "$W/llama.jsonl" --output-prefix "$W/b" --append-eod --workers 3
same_dataset "the same dataset with 3 workers" "$W/a_text_document" "$W/b_text_document"
expect_ok "SentencePieceTokenizer (unigram, nmt_nfkc), no EOD" $P --tokenizer-type SentencePieceTokenizer --tokenizer-model "$W/unigram.model" --input "$W/unigram.jsonl" --output-prefix "$W/c"
expect_ok "ids = sentencepiece's, no EOD" check "$W/c_text_document" unigram ids -1
expect_ok "GPTSentencePieceTokenizer, extra spaces kept" $P --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model "$W/unigram.model" --input "$W/unigram.jsonl" --output-prefix "$W/d" --append-eod --no-tokenizer-sentencepiece-ignore-extra-whitespaces
expect_ok "ids = Megatron's with ignore_extra_whitespaces off" check "$W/d_text_document" unigram keep 2

expect_fail "no --tokenizer-model" "Llama2Tokenizer needs --tokenizer-model" $P --tokenizer-type Llama2Tokenizer --input "$W/llama.jsonl" --output-prefix "$W/e"
printf '{"model": {}}' >"$W/tokenizer.json"
expect_fail "a tokenizer.json is not a .model" "looks like JSON" $P --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/tokenizer.json" --input "$W/llama.jsonl" --output-prefix "$W/e"
head -c 5000 "$W/llama.model" >"$W/cut.model"
expect_fail "a truncated .model" "cut.model: not a valid SentencePiece model: at byte" $P --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/cut.model" --input "$W/llama.jsonl" --output-prefix "$W/e"
expect_fail "--tokenizer-sentencepiece-legacy is refused" "tokenizer-sentencepiece-legacy" $P --tokenizer-type Llama2Tokenizer --tokenizer-model "$W/llama.model" --tokenizer-sentencepiece-legacy --input "$W/llama.jsonl" --output-prefix "$W/e"
[ ! -e "$W/e_text_document.bin" ] && ok "nothing written by the refused runs" || notok "nothing written by the refused runs"
