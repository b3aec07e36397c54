#!/bin/sh
# tok_bench.sh - `make bench`: the tokenizers alone (tok_encode, one thread,
# texts already decoded: build/bench/tok_speed) for the SentencePiece models,
# TikTokenizer and the SentencePiece-style tokenizer.json, each beside the
# library it copies measured in the same run on the same texts
# (tests/bench/peer_tok.py: sentencepiece, tiktoken, Hugging Face tokenizers
# with one thread), on the example corpora (KJV + fortunes, English) and on
# the multilingual test corpus (tests/fixtures/tokenizers/multilingual/).
# MB/s by the wall clock and by the thread's CPU time (the per-worker figure
# on a shared machine); "megac is" compares CPU-time figures. The reference
# columns need sentencepiece, tiktoken and tokenizers for Python: PEER_PY
# names the python that has them; else build/tokbench-venv is used, made
# with pip when MEGAC_BENCH_PIP=1; without them the columns say why.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all build/bench/tok_speed >/dev/null
W=build/bench-tok
rm -rf "$W"
mkdir -p "$W"
T=tests/fixtures/tokenizers
xz -dc $T/spm/unigram.model.xz >"$W/unigram.model"
xz -dc $T/tiktoken/vocab.json.xz >"$W/vocab.json"
xz -dc $T/multilingual/refs.jsonl.xz | /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    print(json.dumps({"text": json.loads(line)["text"]}))' >"$W/multilingual.jsonl"
/usr/bin/python3 - "$W" <<'PY'
import json, lzma, os, sys
w = sys.argv[1]
for v in json.load(lzma.open("tests/fixtures/tokenizers/spm-json/variants.json.xz", "rt", encoding="utf-8")):
    if v["name"] in ("llama2_legacy", "llama2_metaspace"):
        os.makedirs(f"{w}/{v['name']}")
        json.dump(v["tokenizer"], open(f"{w}/{v['name']}/tokenizer.json", "w"))
PY

PY=${PEER_PY:-}
if [ -z "$PY" ]; then
	if [ ! -x build/tokbench-venv/bin/python ] && [ "${MEGAC_BENCH_PIP:-0}" = 1 ]; then
		python3 -m venv build/tokbench-venv >/dev/null 2>&1 &&
			build/tokbench-venv/bin/pip install -q sentencepiece tiktoken tokenizers >/dev/null 2>&1 ||
			echo "(could not make build/tokbench-venv: the reference columns are skipped)"
	fi
	PY=python3
	[ -x build/tokbench-venv/bin/python ] && PY=build/tokbench-venv/bin/python
fi

echo "tokenizers alone, one thread (MB = 10^6 bytes of text; wall / CPU-time MB/s; machine: $(nproc) CPUs)"
printf '%-40s %-13s %17s %17s %9s\n' "tokenizer (reference)" "corpus" "megac" "reference" "megac is"
row() { # label corpus-name megac-args -- peer-args
	label=$1 cname=$2
	shift 2
	margs=""
	while [ "$1" != "--" ]; do margs="$margs $1"; shift; done
	shift
	corpus_arg=""
	[ "$cname" = multilingual ] && corpus_arg="$W/multilingual.jsonl"
	m=$(build/bench/tok_speed $margs ${corpus_arg:+--corpus "$corpus_arg"} | sed -n 's/^warm (best of 3): \([0-9.]*\) MB\/s (CPU time: \([0-9.]*\) MB\/s).* \([0-9]*\) tokens)$/\1 \2 \3/p')
	set -- "$@"
	p=$($PY tests/bench/peer_tok.py "$@" $corpus_arg 2>&1 | tail -n 1)
	set -- $m
	mw=$1 mc=$2 mt=$3
	case "$p" in
	MBPS*)
		set -- $p
		printf '%-40s %-13s %8s / %6s %8s / %6s %8s\n' "$label" "$cname" "$mw" "$mc" "$2" "$4" \
			"$(awk "BEGIN { printf \"%.1fx\", $mc / $4 }")"
		[ "$6" = "$mt" ] || echo "  note: the reference produced $6 tokens, megac $mt"
		;;
	*) printf '%-40s %-13s %8s / %6s   (reference %s)\n' "$label" "$cname" "$mw" "$mc" "$p" ;;
	esac
}
for c in english multilingual; do
	row "Llama2Tokenizer BPE (sentencepiece)" $c spm $T/spm/llama.model -- spm $T/spm/llama.model
	row "SentencePiece unigram (sentencepiece)" $c spm "$W/unigram.model" -- spm "$W/unigram.model"
	row "unigram, byte fallback (sentencepiece)" $c spm $T/spm/unibyte.model -- spm $T/spm/unibyte.model
	row "TikTokenizer v2 (tiktoken)" $c tiktoken "$W/vocab.json" 5000 1000 -- tiktoken-v2 "$W/vocab.json"
	row "HF llama2 legacy json (tokenizers)" $c hf "$W/llama2_legacy" -- hf "$W/llama2_legacy"
	row "HF llama2 Metaspace json (tokenizers)" $c hf "$W/llama2_metaspace" -- hf "$W/llama2_metaspace"
done
echo "target: >= 20 MB/s per worker (CPU time) on the English corpus"
