# preprocess_null.sh - NullTokenizer corpora (random documents, empty texts,
# sentence lists, several keys) checked against an independent Python
# reading of Megatron's rules, with 1 and 3 workers and tiny work items.
. tests/prog_lib.sh
W=$(new_tmp prep_null)
OUT_LOG=$W/out.log
ERR=$W/err.log

/usr/bin/python3 - "$W/corpus.jsonl" <<'PY'
import json, random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    for i in range(3000):
        def text():
            n = random.choice([0, 0, 1, 2, 5, 40, 300])
            return " ".join(str(random.randrange(1000)) for _ in range(n))
        doc = {"text": text(), "meta": {"i": i}}
        if i % 7 == 0:
            doc["text"] = [text() for _ in range(random.randrange(4))]
        doc["title"] = text() if i % 5 else [text(), ""]
        f.write(json.dumps(doc) + "\n")
        if i % 500 == 0:
            f.write("\n")
PY
N="$BIN/preprocess_data --tokenizer-type NullTokenizer --vocab-size 1000 --log-interval 0"
CHECK="/usr/bin/python3 tests/prog/py/check_null_dataset.py $W/corpus.jsonl"

expect_ok "NullTokenizer, 2 keys, --append-eod" $N --input "$W/corpus.jsonl" --output-prefix "$W/a" --json-keys text title --append-eod
expect_ok "matches the Python reading, with EOD" $CHECK "$W/a" 1 1000 text title
expect_ok "NullTokenizer, 3 workers, tiny chunks, no EOD" env MEGAC_CHUNK_BYTES=2000 $N --input "$W/corpus.jsonl" --output-prefix "$W/b" --workers 3
expect_ok "matches the Python reading, without EOD" $CHECK "$W/b" 0 1000 text

expect_ok "NullTokenizer with a vocabulary above 65500" $N --input "$W/corpus.jsonl" --output-prefix "$W/c" --vocab-size 70000 --append-eod
expect_ok "int32 dataset matches (EOD 69999)" $CHECK "$W/c" 1 70000 text

expect_ok "merge_datasets of two shards" sh -c "mkdir -p $W/m && cp $W/a_text_document.bin $W/m/1.bin && cp $W/a_text_document.idx $W/m/1.idx && cp $W/b_text_document.bin $W/m/2.bin && cp $W/b_text_document.idx $W/m/2.idx && $BIN/merge_datasets --input $W/m --output-prefix $W/merged"
cat "$W/corpus.jsonl" "$W/corpus.jsonl" >"$W/twice.jsonl"
# shard 1 has EOD, shard 2 does not: build the reference the same way
setup "reference for the merge" sh -c "$N --input $W/corpus.jsonl --output-prefix $W/r1 --append-eod && $N --input $W/corpus.jsonl --output-prefix $W/r2"
/usr/bin/python3 - "$W" <<'PY' && ok "merged dataset = shard 1 then shard 2 (numpy)" || notok "merged dataset = shard 1 then shard 2 (numpy)"
import sys, numpy as np
w = sys.argv[1]
def read(p):
    b = open(p + ".idx", "rb").read()
    S, D1 = int.from_bytes(b[18:26], "little"), int.from_bytes(b[26:34], "little")
    return (np.frombuffer(b, np.int32, S, 34).tolist(), np.frombuffer(b, np.int64, D1, 34 + 12 * S).tolist(),
            np.fromfile(p + ".bin", np.uint16).tolist())
l1, d1, t1 = read(w + "/r1_text_document")
l2, d2, t2 = read(w + "/r2_text_document")
lm, dm, tm = read(w + "/merged")
assert lm == l1 + l2 and tm == t1 + t2
assert dm == d1 + [x + len(l1) for x in d2[1:]]
PY
printf 'x\n' >"$W/m/stray.txt"
expect_fail "merge_datasets refuses a stray file" "stray.txt' has no partner" $BIN/merge_datasets --input "$W/m" --output-prefix "$W/bad"
[ ! -e "$W/bad.bin" ] && [ ! -e "$W/bad.idx" ] && ok "nothing written by the refused merge" || notok "nothing written by the refused merge"
