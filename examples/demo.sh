#!/bin/sh
# demo.sh - `make demo`: the main job end to end on the bundled corpus.
# Today that is preprocessing: the King James Bible and the BSD fortunes
# (examples/data/) become one GPT-2 token dataset, which is then read back
# and its first document decoded. Later issues extend this to training and
# generation.
set -eu
cd "$(dirname "$0")/.."
OUT=build/demo
rm -rf "$OUT"
mkdir -p "$OUT"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
WORKERS=$(nproc 2>/dev/null || echo 2)

echo "== preprocess_data: examples/data/kjv.jsonl.gz + fortunes.jsonl.gz -> $OUT/corpus_text_document"
bin/preprocess_data --input examples/data/kjv.jsonl.gz examples/data/fortunes.jsonl.gz \
	--output-prefix "$OUT/corpus" $GPT2 --append-eod --workers "$WORKERS" --log-interval 4000

echo
echo "== what was written"
ls -l "$OUT"
echo
bin/dataset_info --input "$OUT/corpus_text_document" $GPT2 --document 0 --max-tokens 60
echo
bin/dataset_info --input "$OUT/corpus_text_document" $GPT2 --document 1189 --max-tokens 60
