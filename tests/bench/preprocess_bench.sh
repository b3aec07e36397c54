#!/bin/sh
# preprocess_bench.sh - `make bench`: preprocess_data throughput on the
# bundled corpus (KJV + fortunes, four copies: 29 MB of JSONL) with GPT-2 BPE, beside
# peers measured in the same run on the same bytes:
#   - Hugging Face tokenizers (what Megatron's GPT2BPETokenizer calls), one thread,
#   - tiktoken, one thread,
# (each only when installed for python3: pip install tokenizers tiktoken),
# and Megatron's own preprocess_data.py figure on this kind of machine
# (about 2.1 MB/s per worker; quoted, not measured here). Then the scaling
# over --workers, and peak RSS on ten copies of the corpus.
set -eu
cd "$(dirname "$0")/../.."
make --no-print-directory all >/dev/null
W=build/bench-run
rm -rf "$W"
mkdir -p "$W"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
# four copies, so that runs last long enough for /usr/bin/time's 10 ms resolution
for i in 1 2 3 4; do gzip -dc examples/data/kjv.jsonl.gz examples/data/fortunes.jsonl.gz; done >"$W/corpus.jsonl"
mkdir -p "$W/gpt2"
xz -dc tests/fixtures/tokenizers/gpt2/tokenizer.json.xz >"$W/gpt2/tokenizer.json"
cp examples/tokenizers/gpt2/* "$W/gpt2/"
BYTES=$(stat -c %s "$W/corpus.jsonl")
MB=$(echo "$BYTES" | awk '{ printf "%.2f", $1 / 1048576 }')
echo "corpus: $MB MB of JSONL, $(wc -l <"$W/corpus.jsonl") documents; machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# megac, best of 3 runs (wall clock of the whole program, startup included)
run_megac() { # workers -> prints "seconds maxrss_kb"
	best=""
	for rep in 1 2 3; do
		/usr/bin/time -f "%e %M" -o "$W/time" bin/preprocess_data $GPT2 --input "$W/corpus.jsonl" \
			--output-prefix "$W/out" --workers "$1" --log-interval 0 2>"$W/log" >/dev/null
		t=$(cut -d' ' -f1 "$W/time")
		if [ -z "$best" ] || awk "BEGIN { exit !($t < $best) }"; then best=$t; rss=$(cut -d' ' -f2 "$W/time"); fi
	done
	echo "$best $rss"
}
set -- $(run_megac 1)
T1=$1
MEGAC_MBPS=$(awk "BEGIN { printf \"%.2f\", $BYTES / 1048576 / $T1 }")
TOKENS=$(sed -n 's/.*documents, [0-9]* sequences, \([0-9]*\) tokens.*/\1/p' "$W/log")
MEGAC_TOKPS=$(awk "BEGIN { printf \"%.0f\", $TOKENS / $T1 }")
echo
printf '%-44s %10s %14s %10s\n' "one worker thread, GPT-2 BPE" "MB/s" "tokens/s" "megac is"
printf '%-44s %10s %14s %10s\n' "megac preprocess_data --workers 1" "$MEGAC_MBPS" "$MEGAC_TOKPS" "-"
for peer in tokenizers tiktoken; do
	res=$(python3 tests/bench/peer_tokenize.py "$peer" "$W/corpus.jsonl" "$W/gpt2" 2>&1 | tail -n 1)
	case "$res" in
	MBPS*)
		set -- $res
		ratio=$(awk "BEGIN { printf \"%.1fx\", $MEGAC_MBPS / $2 }")
		printf '%-44s %10s %14s %10s\n' "$peer (python3, json.loads + encode)" "$2" "$4" "$ratio"
		[ "$6" = "$TOKENS" ] || echo "  note: $peer produced $6 tokens, megac $TOKENS"
		;;
	*) printf '%-44s %s\n' "$peer" "not measured: $res" ;;
	esac
done
printf '%-44s %10s %14s %10s\n' "Megatron preprocess_data.py (quoted)" "2.1" "-" \
	"$(awk "BEGIN { printf \"%.1fx\", $MEGAC_MBPS / 2.1 }")"
awk "BEGIN { exit !($MEGAC_MBPS >= 20) }" && echo "target >= 20 MB/s per worker: met" || echo "target >= 20 MB/s per worker: NOT met"

echo
printf '%-10s %10s %10s\n' "workers" "MB/s" "speedup"
for w in $(printf "1\n2\n4\n%s\n" "$(nproc)" | sort -nu); do
	set -- $(run_megac "$w")
	printf '%-10s %10s %10s\n' "$w" "$(awk "BEGIN { printf \"%.2f\", $BYTES / 1048576 / $1 }")" \
		"$(awk "BEGIN { printf \"%.2fx\", $T1 / $1 }")"
done
echo "(speedup is bounded by the CPUs of this machine: $(nproc))"

echo
( i=0; while [ $i -lt 10 ]; do cat "$W/corpus.jsonl"; i=$((i + 1)); done ) |
	/usr/bin/time -f "%e %M" -o "$W/time" bin/preprocess_data $GPT2 --input - --output-prefix "$W/ten" \
		--workers "$(nproc)" --log-interval 0 2>"$W/log" >/dev/null
set -- $(cat "$W/time")
echo "ten copies of the benchmark corpus ($(awk "BEGIN { printf \"%.0f\", $BYTES * 10 / 1048576 }") MB) via stdin: $1 s, peak RSS $(($2 / 1024)) MB (target < 300 MB)"

echo
echo "tokenizer alone (tok_encode, one thread, texts already decoded):"
mkdir -p "$W/qwen3"
xz -dc tests/fixtures/tokenizers/qwen3/tokenizer.json.xz >"$W/qwen3/tokenizer.json"
cp tests/fixtures/tokenizers/qwen3/tokenizer_config.json "$W/qwen3/"
build/bench/tok_speed gpt2 | sed 's/^/  GPT-2: /'
build/bench/tok_speed hf "$W/qwen3" | sed 's/^/  Qwen3: /'

echo
echo "GPT index building (build_gpt_index), a synthetic corpus of 1,000,000 documents:"
tokens=$(/usr/bin/python3 tests/bench/make_big_index.py "$W/big_text_document" 1000000)
/usr/bin/time -f "%e %M" -o "$W/time" bin/build_gpt_index --tokenizer-type NullTokenizer --vocab-size 50000 \
	--seq-length 2048 --data-path "$W/big_text_document" --split 969,30,1 --train-samples 2000000 \
	--global-batch-size 512 --eval-interval 1000 --eval-iters 10 --data-cache-path "$W/big_cache" 2>"$W/log"
set -- $(cat "$W/time")
echo "  $tokens tokens; 2,000,000 training samples of 2048 tokens (5 epochs): $1 s, peak RSS $(($2 / 1024)) MB"
grep -o "train:.*\|GPTDataset.*samples, [0-9]* epoch" "$W/log" | head -2 | sed 's/^/  /'
