# preprocess_errors.sh - every kind of bad input stops preprocess_data with
# exit 128, a message naming the file and line (or file and problem), and
# nothing left in the output directory; --skip-bad-lines counts instead.
. tests/prog_lib.sh
W=$(new_tmp prep_errors)
OUT_LOG=$W/out.log
ERR=$W/err.log
O=$W/out
mkdir -p "$O"
P="$BIN/preprocess_data $GPT2 --append-eod --log-interval 0 --output-prefix $O/x"

good='{"text": "In the beginning God created the heaven and the earth."}'
mk() { # mk NAME BADLINE: 3 good lines, the bad one as line 4, 2 more good lines
	{ echo "$good"; echo "$good"; echo "$good"; printf '%s\n' "$2"; echo "$good"; echo "$good"; } >"$W/$1.jsonl"
}

mk badjson '{"text": "unterminated}'
expect_fail "invalid JSON names file and line" "badjson.jsonl:4: invalid JSON" $P --input "$W/badjson.jsonl" --workers 2
empty_dir "nothing left after invalid JSON" "$O"

mk nokey '{"body": "x", "id": 3}'
expect_fail "missing key" "nokey.jsonl:4: no key 'text' (the object has 'body', 'id')" $P --input "$W/nokey.jsonl"
empty_dir "nothing left after a missing key" "$O"

mk number '{"text": 42}'
expect_fail "non-string value" "number.jsonl:4: key 'text' is a number, expected a string or a list of strings" $P --input "$W/number.jsonl"
mk nulltext '{"text": null}'
expect_fail "null value" "nulltext.jsonl:4: key 'text' is null" $P --input "$W/nulltext.jsonl"
mk badlist '{"text": ["a sentence", 7]}'
expect_fail "non-string sentence" "badlist.jsonl:4: key 'text': sentence 1 is a number, expected a string" $P --input "$W/badlist.jsonl"
mk array '["text", "x"]'
expect_fail "a line that is not an object" "array.jsonl:4: expected a JSON object, found a list" $P --input "$W/array.jsonl"
empty_dir "nothing left after wrong types" "$O"

{ echo "$good"; printf '{"text": "caf\351 latin-1"}\n'; } >"$W/latin1.jsonl"
expect_fail "invalid UTF-8 names file and line" "latin1.jsonl:2: invalid UTF-8" $P --input "$W/latin1.jsonl"
empty_dir "nothing left after invalid UTF-8" "$O"

# the error is found in a late line of a gzip stream read by several workers
gzip -dc examples/data/kjv.jsonl.gz | sed '1000s/"text"/"txet"/' | gzip >"$W/late.jsonl.gz"
expect_fail "a late bad line, 4 workers" "late.jsonl.gz:1000: no key 'text'" $P --input "$W/late.jsonl.gz" --workers 4
empty_dir "nothing left after a late bad line" "$O"

head -c 400000 examples/data/kjv.jsonl.gz >"$W/cut.jsonl.gz"
expect_fail "truncated gzip" "cut.jsonl.gz: truncated gzip input" $P --input "$W/cut.jsonl.gz" --workers 2
empty_dir "nothing left after a truncated archive" "$O"
gzip -dc examples/data/kjv.jsonl.gz >"$W/k.jsonl"
tar -C "$W" --zstd -cf "$W/k.tar.zst" k.jsonl
head -c 300000 "$W/k.tar.zst" >"$W/cut.tar.zst"
expect_fail "truncated tar.zst names archive and member" "cut.tar.zst:k.jsonl: Truncated zstd input" $P --input "$W/cut.tar.zst"
empty_dir "nothing left after a truncated tar" "$O"

# corrupt compressed data is refused, naming the file (and member): checksums
# libarchive does not check (gzip CRC-32 and length, zip CRC-32), the other
# formats' checksums, and bytes after the end of a compressed stream
gzip -dc examples/data/kjv.jsonl.gz | head -n 50 >"$W/s.jsonl"
flip() { # flip FILE PYTHON: edit the bytes b of FILE in place
	/usr/bin/python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); $2; open(sys.argv[1], 'wb').write(b)" "$1"
}
gzip -c "$W/s.jsonl" >"$W/crc.jsonl.gz" && flip "$W/crc.jsonl.gz" "b[-8] ^= 1"
gzip -c "$W/s.jsonl" >"$W/len.jsonl.gz" && flip "$W/len.jsonl.gz" "b[-2] ^= 1"
/usr/bin/python3 -c "import gzip, sys; open(sys.argv[2], 'wb').write(gzip.compress(open(sys.argv[1], 'rb').read(), 0))" \
	"$W/s.jsonl" "$W/stored.jsonl.gz" && flip "$W/stored.jsonl.gz" "i = b.find(b'In the beginning'); b[i + 3] = 88"
/usr/bin/python3 -c "import zipfile, sys; z = zipfile.ZipFile(sys.argv[2], 'w'); z.write(sys.argv[1], 's.jsonl'); z.close()" \
	"$W/s.jsonl" "$W/s.zip" && flip "$W/s.zip" "i = b.find(b'In the beginning'); b[i + 3] = 88"
/usr/bin/python3 -c "import zipfile, sys; z = zipfile.ZipFile(sys.argv[2], 'w', zipfile.ZIP_DEFLATED); z.writestr('s.jsonl', open(sys.argv[1], 'rb').read()); z.close()" \
	"$W/s.jsonl" "$W/d.zip" && flip "$W/d.zip" "import zlib; c = zlib.crc32(open('$W/s.jsonl', 'rb').read()).to_bytes(4, 'little'); b[:] = b.replace(c, bytes([c[0] ^ 1]) + c[1:])"
for z in gz bz2 xz zst; do
	case $z in gz) c=gzip ;; bz2) c=bzip2 ;; xz) c=xz ;; zst) c="zstd -q" ;; esac
	$c -c "$W/s.jsonl" >"$W/junk.jsonl.$z" && printf 'trailing junk' >>"$W/junk.jsonl.$z"
	$c -c "$W/s.jsonl" >"$W/sum.jsonl.$z"
done
flip "$W/sum.jsonl.bz2" "b[-3] ^= 1"
flip "$W/sum.jsonl.xz" "b[-13] ^= 1"
flip "$W/sum.jsonl.zst" "b[-1] ^= 1"
expect_fail "gzip CRC-32 mismatch" "crc.jsonl.gz: corrupt gzip data: CRC-32 mismatch" $P --input "$W/crc.jsonl.gz" --workers 2
expect_fail "gzip length mismatch" "len.jsonl.gz: corrupt gzip data: length mismatch" $P --input "$W/len.jsonl.gz"
expect_fail "a changed byte in a stored gzip" "stored.jsonl.gz: corrupt gzip data: CRC-32 mismatch" $P --input "$W/stored.jsonl.gz"
expect_fail "a changed byte in a stored zip entry" "s.zip:s.jsonl: ZIP bad CRC" $P --input "$W/s.zip"
expect_fail "a deflated zip entry with a wrong CRC" "d.zip:s.jsonl: ZIP bad CRC" $P --input "$W/d.zip"
expect_fail "bzip2 CRC mismatch" "sum.jsonl.bz2: " $P --input "$W/sum.jsonl.bz2"
expect_fail "xz check mismatch" "sum.jsonl.xz: " $P --input "$W/sum.jsonl.xz"
expect_fail "zstd checksum mismatch" "sum.jsonl.zst: Zstd decompression failed: Restored data doesn't match checksum" $P --input "$W/sum.jsonl.zst"
expect_fail "junk after a gzip stream" "junk.jsonl.gz: unexpected data after the end of the gzip stream" $P --input "$W/junk.jsonl.gz"
expect_fail "junk after a bzip2 stream" "junk.jsonl.bz2: unexpected data after the end of the bzip2 stream" $P --input "$W/junk.jsonl.bz2"
expect_fail "junk after an xz stream" "junk.jsonl.xz: " $P --input "$W/junk.jsonl.xz"
expect_fail "junk after a zstd stream" "junk.jsonl.zst: " $P --input "$W/junk.jsonl.zst"
expect_fail "a corrupt gzip on standard input" "<stdin>: corrupt gzip data: CRC-32 mismatch" $P --input - <"$W/crc.jsonl.gz"
tar -C "$W" -czf "$W/s.tar.gz" s.jsonl && flip "$W/s.tar.gz" "b[-8] ^= 1"
expect_fail "a tar.gz whose gzip CRC-32 is wrong" "s.tar.gz" $P --input "$W/s.tar.gz"
grep -q "CRC-32 mismatch" "$ERR" && ok "... the error says CRC-32" || { notok "... the error says CRC-32"; show "$ERR"; }
empty_dir "nothing left after corrupt compressed data" "$O"

# --max-document-bytes: a longer line is an error naming file, line and flag,
# or with --skip-bad-lines one more counted bad line
/usr/bin/python3 -c "import sys; sys.stdout.write('{\"text\": \"%s\"}\n' % ('In the beginning. ' * 200000))" >"$W/long1"
{ head -n 3 "$W/s.jsonl"; cat "$W/long1"; tail -n +4 "$W/s.jsonl"; } >"$W/long.jsonl"
expect_fail "a line over --max-document-bytes" "long.jsonl:4: the line is longer than --max-document-bytes 1000000" \
	$P --input "$W/long.jsonl" --max-document-bytes 1000000 --workers 2
empty_dir "nothing left after a line that is too long" "$O"
expect_fail "--max-document-bytes below 0" "--max-document-bytes must be 0" $P --input "$W/long.jsonl" --max-document-bytes -1
mkdir -p "$W/ref"
setup "the 50 lines without the long one" $P --input "$W/s.jsonl" --output-prefix "$W/ref/s"
expect_ok "--max-document-bytes with --skip-bad-lines" $P --input "$W/long.jsonl" --max-document-bytes 1000000 --skip-bad-lines
grep -q "warning: skipping .*long.jsonl:4: the line is longer than --max-document-bytes 1000000" "$ERR" \
	&& grep -q "skipped 1 bad line(s)" "$ERR" && ok "the long line is skipped and counted" || { notok "the long line is skipped and counted"; show "$ERR"; }
same_dataset "the other lines are written" "$O/x_text_document" "$W/ref/s_text_document"
expect_ok "no limit by default" $P --input "$W/long.jsonl"
grep -q "x_text_document.bin/.idx: 51 documents" "$ERR" && ok "... the long line is a document" || { notok "... the long line is a document"; show "$ERR"; }
rm -f "$O"/*

expect_fail "missing input" "--input '$W/nope.jsonl': No such file or directory" $P --input "$W/nope.jsonl"
expect_fail "missing vocab file" "$W/missing-vocab.json" $BIN/preprocess_data --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$W/missing-vocab.json" --merge-file "$GPT2_MERGES" --input "$W/k.jsonl" --output-prefix "$O/x"
printf '{"a": 1, "b": ' >"$W/broken-vocab.json"
expect_fail "malformed vocab file" "broken-vocab.json" $BIN/preprocess_data --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$W/broken-vocab.json" --merge-file "$GPT2_MERGES" --input "$W/k.jsonl" --output-prefix "$O/x"
mkdir -p "$W/badhf"
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Whitespace"}}' >"$W/badhf/tokenizer.json"
expect_fail "unsupported tokenizer.json part named" "Whitespace" $BIN/preprocess_data --tokenizer-type HuggingFaceTokenizer \
	--tokenizer-model "$W/badhf" --input "$W/k.jsonl" --output-prefix "$O/x"
printf '{"model": {"type": "BPE", "vocab": ' >"$W/badhf/tokenizer.json"
expect_fail "truncated tokenizer.json named" "badhf/tokenizer.json" $BIN/preprocess_data --tokenizer-type HuggingFaceTokenizer \
	--tokenizer-model "$W/badhf" --input "$W/k.jsonl" --output-prefix "$O/x"
expect_fail "unimplemented tokenizer type" "BertWordPieceLowerCase" $BIN/preprocess_data --tokenizer-type BertWordPieceLowerCase \
	--vocab-file x.txt --input "$W/k.jsonl" --output-prefix "$O/x"
expect_fail "missing --merge-file" "--merge-file" $BIN/preprocess_data --tokenizer-type GPT2BPETokenizer \
	--vocab-file "$GPT2_VOCAB" --input "$W/k.jsonl" --output-prefix "$O/x"
empty_dir "nothing left after tokenizer errors" "$O"

expect_fail "missing output directory" "output directory '$W/nodir' (of '$W/nodir/x_text_document.bin') does not exist" \
	$BIN/preprocess_data $GPT2 --input "$W/k.jsonl" --output-prefix "$W/nodir/x"
expect_fail "unknown flag suggests" "did you mean '--append-eod'" $P --input "$W/k.jsonl" --append-eos
expect_fail "unsupported Megatron flag" "--split-sentences is a Megatron flag that megac does not support" $P --input "$W/k.jsonl" --split-sentences
expect_fail "--partitions cannot re-read stdin" "standard input can be read only once" $P --input - --partitions 2 </dev/null

printf '%s\n' '{"text": "1 2 3"}' '{"text": "4 x 6"}' >"$W/null.jsonl"
expect_fail "NullTokenizer: not an integer" "null.jsonl:2: key 'text': " $BIN/preprocess_data --tokenizer-type NullTokenizer \
	--vocab-size 100 --input "$W/null.jsonl" --output-prefix "$O/x"
empty_dir "nothing left after a NullTokenizer error" "$O"

# --skip-bad-lines: the bad lines are reported and counted, the good ones written
{ cat "$W/badjson.jsonl" "$W/nokey.jsonl" "$W/latin1.jsonl"; } >"$W/mixed.jsonl"
expect_ok "--skip-bad-lines" $P --input "$W/mixed.jsonl" --skip-bad-lines
grep -q "skipped 3 bad line(s)" "$ERR" && ok "three bad lines counted" || { notok "three bad lines counted"; show "$ERR"; }
grep -q "warning: skipping .*mixed.jsonl:10: no key 'text'" "$ERR" && ok "bad lines named" || { notok "bad lines named"; show "$ERR"; }
grep -q "x_text_document.bin/.idx: 11 documents" "$ERR" && ok "good lines written" || { notok "good lines written"; show "$ERR"; }
rm -f "$O"/*

# SIGTERM in the middle of a run removes the temporary files
( while gzip -dc examples/data/kjv.jsonl.gz; do :; done ) 2>/dev/null | $P --input - >/dev/null 2>"$ERR" &
pid=$!
n=0
while [ -z "$(ls -A "$O")" ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
[ -n "$(ls -A "$O")" ] && ok "temporary files exist while writing" || notok "temporary files exist while writing"
sleep 0.3
pkill -TERM -f "preprocess_data .*--output-prefix $O/x"
wait $pid
rc=$?
[ "$rc" -eq 143 ] && ok "SIGTERM ends the run (exit 143)" || notok "SIGTERM: exit $rc, wanted 143"
empty_dir "SIGTERM leaves nothing behind" "$O"

# inputs read more than once must be re-readable
mkfifo "$W/fifo"
( cat "$W/k.jsonl" >"$W/fifo" ) 2>/dev/null &
expect_fail "--partitions refuses a pipe" "is not a regular file (a pipe or device can be read only once)" $P --input "$W/fifo" --partitions 2
kill $! 2>/dev/null
( exec 3<>"$W/fifo" ) 2>/dev/null
expect_fail "--find-optimal-num-workers refuses stdin" "standard input can be read only once" $P --input - --find-optimal-num-workers </dev/null
empty_dir "nothing left by refused multi-pass runs" "$O"

# an EOD id the token dtype cannot hold is refused before anything is read
expect_fail "EOD id too large for uint16" "does not fit the uint16 tokens" $BIN/preprocess_data --tokenizer-type NullTokenizer \
	--vocab-size 100 --null-tokenizer-eod-id 70000 --append-eod --input "$W/null.jsonl" --output-prefix "$O/x"

# more output keys than the temporary-file table holds: a clean error, nothing left
keys=$(i=0; while [ $i -lt 600 ]; do printf 'k%d ' $i; i=$((i + 1)); done)
expect_fail "600 --json-keys" "output files open at once" $P --input "$W/k.jsonl" --json-keys $keys
empty_dir "nothing left after too many keys" "$O"

# a bad first line ends the run at once even if stdin then stalls
mkfifo "$W/slow"
( printf '{"txt": 1}\n'; head -n 30 "$W/k.jsonl"; sleep 8 ) >"$W/slow" &
producer=$!
start=$(date +%s)
$P --input - <"$W/slow" >"$OUT_LOG" 2>"$ERR"
rc=$?
took=$(($(date +%s) - start))
kill $producer 2>/dev/null
[ "$rc" -eq 128 ] && [ "$took" -lt 5 ] && ok "a stalled stdin does not delay the error (${took}s)" \
	|| { notok "a stalled stdin delayed the error: exit $rc after ${took}s"; show "$ERR"; }
empty_dir "nothing left after the stalled-stdin error" "$O"
