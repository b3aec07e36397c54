# preprocess_memory.sh - memory does not grow with the corpus: ten copies
# of the bundled corpus (about 77 MB of JSONL) streamed through
# preprocess_data stay under 300 MB of peak RSS, with 1 and 4 workers.
. tests/prog_lib.sh
W=$(new_tmp prep_mem)
OUT_LOG=$W/out.log
ERR=$W/err.log
if [ -n "${MEGAC_SANITIZE:-}" ]; then
	ok "peak RSS not measured under AddressSanitizer (it adds its own shadow memory) # SKIP"
	exit 0
fi
for workers in 1 4; do
	( i=0; while [ $i -lt 10 ]; do gzip -dc examples/data/kjv.jsonl.gz examples/data/fortunes.jsonl.gz; i=$((i + 1)); done ) |
		/usr/bin/time -f "maxrss_kb %M" $BIN/preprocess_data $GPT2 --append-eod --log-interval 0 \
			--input - --output-prefix "$W/ten$workers" --workers $workers >"$OUT_LOG" 2>"$ERR"
	rss=$(sed -n 's/^maxrss_kb //p' "$ERR")
	docs=$(sed -n 's/.*: \([0-9]*\) documents,.*/\1/p' "$ERR")
	if [ -n "$rss" ] && [ "$rss" -lt 307200 ] && [ "$docs" = 164060 ]; then
		ok "10x corpus, $workers worker(s): peak RSS $((rss / 1024)) MB < 300 MB"
	else
		notok "10x corpus, $workers worker(s): peak RSS ${rss:-?} kB, documents ${docs:-?} (wanted < 300 MB, 164060)"
		show "$ERR"
	fi
done
