# megatron_gpt_index.sh - build_gpt_index writes the cache files Megatron's
# own dataset builder wrote (same names, same md5 of the description, same
# .npy bytes) and yields the same samples, for every case recorded in
# tests/fixtures/megatron-gpt/ (one dataset over one and many epochs with and
# without a separate final epoch, weighted, unweighted and exhaustive blends,
# per-split paths, mock data, EOD masking flags); a second run loads the
# caches and yields the same samples again.
. tests/prog_lib.sh
W=$(new_tmp gpt_index)
OUT_LOG=$W/out.log
ERR=$W/err.log
M=$FIX/megatron-gpt
CHECK="/usr/bin/python3 tests/prog/py/check_gpt_index.py"

# the datasets, made by our preprocess_data (byte-identical to Megatron's, see megatron_parity.sh)
mkdir -p "$W/data"
ln -s "$(pwd)/examples" "$W/examples"
$BIN/preprocess_data $GPT2 --append-eod --input examples/data/kjv.jsonl.gz --output-prefix "$W/data/kjv" 2>>"$ERR"
$BIN/preprocess_data $GPT2 --append-eod --input examples/data/fortunes.jsonl.gz --output-prefix "$W/data/fortunes" 2>>"$ERR"
$BIN/preprocess_data --tokenizer-type NullTokenizer --vocab-size 1000 --input $M/tiny.jsonl --output-prefix "$W/data/tiny" 2>>"$ERR"

# the fixture's cache files, decompressed, to compare against
$CHECK cases $M/manifest.json >"$W/cases"
while read -r name argv; do
	idx=$($CHECK indices $M/manifest.json "$name")
	cache=$(echo "$argv" | sed -n 's/.*--data-cache-path \([^ ]*\).*/\1/p')
	( cd "$W" && $BIN/build_gpt_index $argv --show-samples $idx >"$name.samples" 2>"$name.log" )
	rc=$?
	if [ $rc -ne 0 ]; then
		notok "$name: build_gpt_index exited $rc"
		show "$W/$name.log"
		continue
	fi
	$CHECK check $M/manifest.json "$name" "$W/${cache:-none}" "$W/$name.samples"
	if [ -n "$cache" ]; then
		( cd "$W" && $BIN/build_gpt_index $argv --show-samples $idx >"$name.samples2" 2>"$name.log2" )
		if cmp -s "$W/$name.samples" "$W/$name.samples2" && grep -q "loaded from cache" "$W/$name.log2" &&
			! grep -q "), built (" "$W/$name.log2"; then
			ok "$name: the second run loads every cache and yields the same samples"
		else
			notok "$name: second run"
			show "$W/$name.log2"
		fi
	fi
done <"$W/cases"

# the same blends read from files (--data-args-path, --per-split-data-args-path) find the same caches
args=$(grep '^blend_weighted ' "$W/cases" | cut -d' ' -f2- | sed 's| --data-path 0.3 data/kjv_text_document 0.7 data/fortunes_text_document||')
printf '0.3 data/kjv_text_document\n  0.7\tdata/fortunes_text_document\n' >"$W/blend.txt"
idx=$($CHECK indices $M/manifest.json blend_weighted)
( cd "$W" && $BIN/build_gpt_index $args --data-args-path blend.txt --show-samples $idx >blendfile.samples 2>"$ERR" )
if cmp -s "$W/blendfile.samples" "$W/blend_weighted.samples" && grep -q "loaded from cache" "$ERR" && ! grep -q "), built (" "$ERR"; then
	ok "--data-args-path: the blend from a file loads the same caches and yields the same samples"
else
	notok "--data-args-path"
	show "$ERR"
fi
args=$(grep '^per_split ' "$W/cases" | cut -d' ' -f2- | sed 's| --train-data-path .* --train-iters| --train-iters|')
echo '{"train": ["0.5", "data/kjv_text_document", "0.5 data/fortunes_text_document"], "valid": "data/fortunes_text_document", "test": ["data/kjv_text_document"]}' >"$W/splits.json"
idx=$($CHECK indices $M/manifest.json per_split)
( cd "$W" && $BIN/build_gpt_index $args --per-split-data-args-path splits.json --show-samples $idx >splitfile.samples 2>"$ERR" )
if cmp -s "$W/splitfile.samples" "$W/per_split.samples" && grep -q "loaded from cache" "$ERR" && ! grep -q "), built (" "$ERR"; then
	ok "--per-split-data-args-path: per-split blends from JSON load the same caches and yield the same samples"
else
	notok "--per-split-data-args-path"
	show "$ERR"
fi
echo '{"train": 5}' >"$W/bad.json"
expect_fail "--per-split-data-args-path with a bad entry names the file and key" '"train" must be a list' \
	sh -c "cd $W && $BIN/build_gpt_index $args --per-split-data-args-path bad.json"
expect_fail "--data-args-path and --data-path together" "mutually exclusive" \
	sh -c "cd $W && $BIN/build_gpt_index $args --data-args-path blend.txt --data-path data/kjv_text_document"

# without --data-cache-path the GPTDataset caches go next to the dataset, as Megatron puts them
args=$(grep '^k_s128 ' "$W/cases" | cut -d' ' -f2- | sed 's/ --data-cache-path [^ ]*//')
( cd "$W" && $BIN/build_gpt_index $args >/dev/null 2>"$ERR" )
n=$(ls "$W/data/kjv_text_document/cache/GPTDataset_indices" 2>/dev/null | wc -l)
names_here=$(ls "$W/data/kjv_text_document/cache/GPTDataset_indices" 2>/dev/null | sort | tr '\n' ' ')
names_fix=$(ls "$W/cache/k_s128" | sort | tr '\n' ' ')
[ "$n" -eq 12 ] && [ "$names_here" = "$names_fix" ] && ok "default cache location PREFIX/cache/GPTDataset_indices" \
	|| { notok "default cache location: $n files"; show "$ERR"; }

# a damaged cache file is refused by name, never used
f=$(ls "$W"/cache/k_s128/*-GPTDataset-train-sample_index.npy)
head -c 100 "$f" >"$f.cut" && mv "$f.cut" "$f"
argv=$(grep '^k_s128 ' "$W/cases" | cut -d' ' -f2-)
( cd "$W" && $BIN/build_gpt_index $argv >/dev/null 2>"$ERR" )
rc=$?
[ $rc -eq 128 ] && grep -q "$(basename "$f")" "$ERR" && ok "a truncated cache file is refused, named" \
	|| { notok "a truncated cache file: exit $rc"; show "$ERR"; }

# bad data flags are named
( cd "$W" && $BIN/build_gpt_index $GPT2 --seq-length 64 --data-path data/kjv_text_document --split 98,2,0 \
	--global-batch-size 8 --train-iters 10 >/dev/null 2>"$ERR" )
grep -q "eval-interval is needed" "$ERR" && ok "missing --eval-interval is named" || { notok "missing --eval-interval"; show "$ERR"; }
( cd "$W" && $BIN/build_gpt_index $GPT2 --seq-length 64 --data-path 0.5 data/kjv_text_document 0.5 data/nothing \
	--split 98,2,0 --global-batch-size 8 --train-iters 10 --eval-interval 5 >/dev/null 2>"$ERR" )
grep -q "data/nothing.idx" "$ERR" && ok "a missing dataset is named" || { notok "a missing dataset"; show "$ERR"; }
