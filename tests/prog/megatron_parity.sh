# megatron_parity.sh - preprocess_data and merge_datasets write byte-for-byte
# what Megatron's own tools/preprocess_data.py and tools/merge_datasets.py
# wrote for the same inputs (tests/fixtures/megatron/: sizes and sha256 of
# every output from Megatron commit d98e8a64, full files for the small
# cases; README.md there says how they were made).
. tests/prog_lib.sh
W=$(new_tmp megatron)
OUT_LOG=$W/out.log
ERR=$W/err.log
M=$FIX/megatron
P="$BIN/preprocess_data --log-interval 0 --workers 2"

# sizes and sha256 Megatron recorded, one "name size sha256" line per output
/usr/bin/python3 -c '
import json
for c in json.load(open("'$M'/manifest.json"))["cases"]:
    for name, o in c["outputs"].items():
        print(c["case"], name, o["size"], o["sha256"])
' >"$W/expected"

# same_as_megatron CASE OUR_FILE MEGATRON_NAME
same_as_megatron() {
	line=$(grep "^$1 $3 " "$W/expected")
	set -- "$1" "$2" "$3" $line
	want_size=$6
	want_sha=$7
	got_size=$(stat -c %s "$2" 2>/dev/null || echo missing)
	got_sha=$(sha256sum "$2" 2>/dev/null | cut -d' ' -f1)
	if [ "$got_size" = "$want_size" ] && [ "$got_sha" = "$want_sha" ]; then
		ok "case $1: $3 is byte-identical to Megatron's ($want_size bytes)"
	else
		notok "case $1: $3 differs from Megatron's (size $got_size vs $want_size)"
		if [ -f "$M/$3" ]; then cmp "$2" "$M/$3" 2>&1 | sed 's/^/#   /'; fi
	fi
}

mkdir -p "$W/qwen3"
xz -dc $FIX/tokenizers/qwen3/tokenizer.json.xz >"$W/qwen3/tokenizer.json"
cp $FIX/tokenizers/qwen3/tokenizer_config.json "$W/qwen3/"
QWEN="--tokenizer-type HuggingFaceTokenizer --tokenizer-model $W/qwen3"

expect_ok "A: kjv, GPT-2, --append-eod" $P --input examples/data/kjv.jsonl.gz --output-prefix "$W/A" $GPT2 --append-eod
same_as_megatron A "$W/A_text_document.bin" A_text_document.bin
same_as_megatron A "$W/A_text_document.idx" A_text_document.idx

expect_ok "B: fortunes, two keys" $P --input examples/data/fortunes.jsonl.gz --output-prefix "$W/B" $GPT2 --append-eod --json-keys text source
for f in B_text_document.bin B_text_document.idx B_source_document.bin B_source_document.idx; do
	same_as_megatron B "$W/$f" "$f"
done

expect_ok "C: kjv, Qwen3 tokenizer.json (int32)" $P --input examples/data/kjv.jsonl.gz --output-prefix "$W/C" $QWEN --append-eod
same_as_megatron C "$W/C_text_document.bin" C_text_document.bin
same_as_megatron C "$W/C_text_document.idx" C_text_document.idx

expect_ok "D: reference strings, GPT-2" $P --input $FIX/tokenizers/reference-strings.jsonl --output-prefix "$W/D" $GPT2
same_as_megatron D "$W/D_text_document.bin" D_text_document.bin
same_as_megatron D "$W/D_text_document.idx" D_text_document.idx
expect_ok "D2: reference strings, Qwen3" $P --input $FIX/tokenizers/reference-strings.jsonl --output-prefix "$W/D2" $QWEN --append-eod
same_as_megatron D2 "$W/D2_text_document.bin" D2_text_document.bin
same_as_megatron D2 "$W/D2_text_document.idx" D2_text_document.idx

expect_ok "E: NullTokenizer" $P --input $M/null_input.jsonl --output-prefix "$W/E" --tokenizer-type NullTokenizer --vocab-size 1000 --append-eod
same_as_megatron E "$W/E_text_document.bin" E_text_document.bin
same_as_megatron E "$W/E_text_document.idx" E_text_document.idx

expect_ok "F: sentence lists" $P --input $M/sentences_input.jsonl --output-prefix "$W/F" $GPT2 --append-eod
same_as_megatron F "$W/F_text_document.bin" F_text_document.bin
same_as_megatron F "$W/F_text_document.idx" F_text_document.idx

mkdir -p "$W/G" "$W/G2"
for e in bin idx; do
	cp "$W/A_text_document.$e" "$W/G/a_kjv.$e"
	cp "$W/D_text_document.$e" "$W/G/b_refs.$e"
	cp "$W/F_text_document.$e" "$W/G2/10_F.$e"
	cp "$W/E_text_document.$e" "$W/G2/B_E.$e"
	cp "$W/D_text_document.$e" "$W/G2/a_D.$e"
done
expect_ok "G: merge_datasets" $BIN/merge_datasets --input "$W/G" --output-prefix "$W/G"
same_as_megatron G "$W/G.bin" G.bin
same_as_megatron G "$W/G.idx" G.idx
expect_ok "G2: merge_datasets, sorted names" $BIN/merge_datasets --input "$W/G2" --output-prefix "$W/G2"
same_as_megatron G2 "$W/G2.bin" G2.bin
same_as_megatron G2 "$W/G2.idx" G2.idx

expect_ok "H: --partitions 2 (round robin)" $P --input examples/data/kjv.jsonl.gz --output-prefix "$W/H" $GPT2 --append-eod --partitions 2
same_as_megatron H "$W/H_text_document.bin" H_text_document.bin
same_as_megatron H "$W/H_text_document.idx" H_text_document.idx
expect_ok "H2: --partitions 2 --keep-sequential-samples" $P --input examples/data/kjv.jsonl.gz --output-prefix "$W/H2" $GPT2 --append-eod --partitions 2 --keep-sequential-samples
same_as_megatron H2 "$W/H2_text_document.bin" H2_text_document.bin
same_as_megatron H2 "$W/H2_text_document.idx" H2_text_document.idx

# where Megatron failed, megac refuses cleanly
mkdir -p "$W/G3"
for e in bin idx; do cp "$W/D_text_document.$e" "$W/G3/a_D.$e"; cp "$W/D2_text_document.$e" "$W/G3/b_D2.$e"; done
expect_fail "G3: mixed dtypes refused" "its token dtype is int32, the output's is uint16" $BIN/merge_datasets --input "$W/G3" --output-prefix "$W/G3out"
[ ! -e "$W/G3out.bin" ] && ok "G3: no partial .bin left (Megatron leaves one)" || notok "G3: partial .bin left"

# I: a folder with only GPT-2's tokenizer.json has no eos_token; Megatron hangs
# there. megac says which token it uses for EOD and gives case B's bytes.
mkdir -p "$W/gpt2hf"
xz -dc $FIX/tokenizers/gpt2/tokenizer.json.xz >"$W/gpt2hf/tokenizer.json"
expect_ok "I: HF tokenizer.json alone, --append-eod" $P --input examples/data/fortunes.jsonl.gz --output-prefix "$W/I" \
	--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/gpt2hf" --append-eod
grep -q "endoftext" "$ERR" && ok "I: the EOD fallback is announced" || { notok "I: the EOD fallback is announced"; show "$ERR"; }
same_dataset "I: same bytes as GPT2BPETokenizer (case B)" "$W/I_text_document" "$W/B_text_document"
