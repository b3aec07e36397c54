# preprocess_tiktoken.sh - preprocess_data with TikTokenizer: the .bin/.idx
# hold, document by document, the ids tiktoken gives (the fixture references
# of tests/fixtures/tokenizers/tiktoken/, made by make_tiktoken_refs.py), with
# Megatron's end-of-document id </s> = 2 appended (empty texts add nothing).
. tests/prog_lib.sh
W=$(new_tmp prep_tiktoken)
OUT_LOG=$W/out.log
ERR=$W/err.log
FIX=tests/fixtures/tokenizers/tiktoken
xz -dc $FIX/vocab.json.xz >"$W/vocab.json"
# every reference text as a document (the texts with NUL bytes too)
/usr/bin/python3 - "$W/corpus.jsonl" $FIX/refs.jsonl.xz <<'PY'
import json, lzma, sys
with open(sys.argv[1], "w") as f:
    for line in lzma.open(sys.argv[2], "rt", encoding="utf-8"):
        f.write(json.dumps({"text": json.loads(line)["text"]}) + "\n")
PY
P="$BIN/preprocess_data --tokenizer-type TikTokenizer --tokenizer-model $W/vocab.json --log-interval 0"

check() { # prefix config
	/usr/bin/python3 - "$W/$1_text_document" $FIX/refs.jsonl.xz "$2" <<'PY'
import json, lzma, sys
import numpy as np
p, refs, cfg = sys.argv[1:]
b = open(p + ".idx", "rb").read()
S = int.from_bytes(b[18:26], "little")
lens = np.frombuffer(b, np.int32, S, 34).tolist()
dt = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[b[17]]
toks = np.fromfile(p + ".bin", dt).tolist()
want = []
for line in lzma.open(refs, "rt", encoding="utf-8"):
    ids = json.loads(line)[cfg]
    if ids:  # an empty text is a document without sequences (Megatron's rule)
        want.append(ids + [2])
assert lens == [len(w) for w in want], "document lengths differ"
assert toks == [t for w in want for t in w], "ids differ"
PY
}
expect_ok "TikTokenizer v2, 1000 special tokens, --append-eod" $P --input "$W/corpus.jsonl" --output-prefix "$W/v2" \
	--vocab-size 5000 --append-eod
expect_ok "v2: the .bin holds tiktoken's ids" check v2 v2
expect_ok "TikTokenizer v1, 12 special tokens, 2 workers" env MEGAC_CHUNK_BYTES=4000 $P --input "$W/corpus.jsonl" \
	--output-prefix "$W/v1" --vocab-size 3512 --tiktoken-pattern v1 --tiktoken-num-special-tokens 12 --workers 2 \
	--tokenizer-special-tokens '<unk>' '<s>' '</s>' '<mask>' '<pad>' '<cls>' '<sep>' '<|im_start|>' '<|im_end|>' '<a>' \
	--append-eod
expect_ok "v1: the .bin holds tiktoken's ids" check v1 v1
expect_fail "the default vocabulary size needs a full vocabulary" "needs 130072" $P --input "$W/corpus.jsonl" \
	--output-prefix "$W/bad"
