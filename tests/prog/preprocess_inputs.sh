# preprocess_inputs.sh - preprocess_data gives the same dataset whatever the
# number of workers and however the same documents arrive: plain, gzip,
# tar.zst of split files, several files, a directory, a glob, stdin.
. tests/prog_lib.sh
W=$(new_tmp prep_inputs)
OUT_LOG=$W/out.log
ERR=$W/err.log
P="$BIN/preprocess_data $GPT2 --append-eod --log-interval 0"

gzip -dc examples/data/kjv.jsonl.gz >"$W/kjv.jsonl"
setup "kjv, 1 worker" $P --input "$W/kjv.jsonl" --output-prefix "$W/w1" --workers 1
expect_ok "kjv, 4 workers" $P --input "$W/kjv.jsonl" --output-prefix "$W/w4" --workers 4
same_dataset "--workers 1 and --workers 4 give identical files" "$W/w1_text_document" "$W/w4_text_document"
expect_ok "kjv, 3 workers, tiny chunks" env MEGAC_CHUNK_BYTES=3000 $P --input "$W/kjv.jsonl" --output-prefix "$W/w3" --workers 3
same_dataset "many small work items give identical files" "$W/w1_text_document" "$W/w3_text_document"

expect_ok "kjv.jsonl.gz" $P --input examples/data/kjv.jsonl.gz --output-prefix "$W/gz" --workers 2
same_dataset ".jsonl.gz equals .jsonl" "$W/w1_text_document" "$W/gz_text_document"

mkdir -p "$W/parts/a" "$W/parts/b"
split -l 400 -d -a 2 --additional-suffix=.jsonl "$W/kjv.jsonl" "$W/parts/a/kjv-"
mv "$W/parts/a/kjv-02.jsonl" "$W/parts/b/"
zstd -q --rm "$W/parts/a/kjv-01.jsonl"
echo "not data" >"$W/parts/README.txt"
expect_ok "a directory of shards" $P --input "$W/parts" --output-prefix "$W/dir" --workers 2
same_dataset "directory (sorted, mixed compression) equals the single file" "$W/w1_text_document" "$W/dir_text_document"

expect_ok "several --input values" $P --input "$W/parts/a/kjv-00.jsonl" "$W/parts/a/kjv-01.jsonl.zst" "$W/parts/b/kjv-02.jsonl" --output-prefix "$W/multi"
same_dataset "several inputs in order equal the single file" "$W/w1_text_document" "$W/multi_text_document"

expect_ok "a glob" $P --input "$W/parts/*/kjv-0*" --output-prefix "$W/glob"
same_dataset "glob equals the single file" "$W/w1_text_document" "$W/glob_text_document"

tar -C "$W/parts" --zstd -cf "$W/kjv.tar.zst" a/kjv-00.jsonl a/kjv-01.jsonl.zst b/kjv-02.jsonl README.txt
expect_ok "a .tar.zst of shards" $P --input "$W/kjv.tar.zst" --output-prefix "$W/tar" --workers 2
same_dataset ".tar.zst of split files equals the single file" "$W/w1_text_document" "$W/tar_text_document"

gzip -dc examples/data/kjv.jsonl.gz | $P --input - --output-prefix "$W/stdin" --workers 2 >"$OUT_LOG" 2>"$ERR" \
	&& ok "standard input" || { notok "standard input"; show "$ERR"; }
same_dataset "stdin equals the file" "$W/w1_text_document" "$W/stdin_text_document"

# --partitions with --keep-sequential-samples keeps input order
expect_ok "--partitions 3 --keep-sequential-samples" $P --input "$W/kjv.jsonl" --output-prefix "$W/seq" --partitions 3 --keep-sequential-samples
same_dataset "sequential partitions keep input order" "$W/w1_text_document" "$W/seq_text_document"

# \r\n line endings and blank lines change nothing
sed 's/$/\r/' "$W/kjv.jsonl" | awk 'NR % 100 == 0 { print "" } { print }' >"$W/crlf.jsonl"
expect_ok "CRLF and blank lines" $P --input "$W/crlf.jsonl" --output-prefix "$W/crlf"
same_dataset "CRLF line endings and blank lines are ignored" "$W/w1_text_document" "$W/crlf_text_document"
grep -q "ignored 11 blank line" "$ERR" && ok "blank lines are counted" || { notok "blank lines are counted"; show "$ERR"; }

# progress lines every --log-interval documents, with rates
expect_ok "progress lines" $BIN/preprocess_data $GPT2 --input "$W/kjv.jsonl" --output-prefix "$W/prog" --log-interval 500
n=$(grep -c "^preprocess_data: Processed [0-9]* documents (.* docs/s, .* MB/s, .* tokens/s)\.$" "$ERR")
[ "$n" -eq 2 ] && ok "a progress line per 500 documents" || { notok "progress lines: $n, wanted 2"; show "$ERR"; }

# a compressed stream on stdin is recognised from its bytes
$P --input - --output-prefix "$W/gzstdin" <examples/data/kjv.jsonl.gz >"$OUT_LOG" 2>"$ERR" \
	&& ok "gzip'd standard input" || { notok "gzip'd standard input"; show "$ERR"; }
same_dataset "gzip'd stdin equals the file" "$W/w1_text_document" "$W/gzstdin_text_document"

# --find-optimal-num-workers times each count and writes nothing
mkdir -p "$W/opt"
expect_ok "--find-optimal-num-workers" $P --input "$W/kjv.jsonl" --output-prefix "$W/opt/x" \
	--find-optimal-num-workers --workers-to-check 1 2 --max-documents 300
grep -q "The most optimal num of workers is [12] with avg. preprocessed docs/s" "$OUT_LOG" \
	&& ok "a ranking is printed" || { notok "a ranking is printed"; show "$OUT_LOG"; }
empty_dir "benchmark mode writes no dataset" "$W/opt"

# hundreds of small files read by many workers in tiny work items (the
# reader registers new file names while workers name theirs)
mkdir -p "$W/many"
i=0
while [ $i -lt 300 ]; do
	printf '{"text": "file %d line one"}\n{"text": "file %d, line two"}\n' $i $i >"$W/many/f$(printf %03d $i).jsonl"
	i=$((i + 1))
done
cat "$W"/many/*.jsonl >"$W/many.all"
expect_ok "300 small files, 8 workers" env MEGAC_CHUNK_BYTES=10 $P --input "$W/many" --output-prefix "$W/many8" --workers 8
setup "the same lines as one file" $P --input "$W/many.all" --output-prefix "$W/many1"
same_dataset "300 files equal their concatenation" "$W/many1_text_document" "$W/many8_text_document"

# a symlink loop inside an input directory is skipped, not followed forever
mkdir -p "$W/loop/sub"
cp "$W/kjv.jsonl" "$W/loop/sub/a.jsonl"
ln -s .. "$W/loop/sub/up"
expect_ok "a directory with a symlink loop" $P --input "$W/loop" --output-prefix "$W/loop_out"
same_dataset "the loop is read once" "$W/w1_text_document" "$W/loop_out_text_document"
