#!/bin/sh
# tok_prep_bench.sh - `make bench`: preprocess_data end to end, --workers 1,
# with Megatron's flags for each SentencePiece, TikToken and
# SentencePiece-style tokenizer.json tokenizer, with and without
# --append-eod, on two corpora:
#   english       the bundled KJV + fortunes (examples/data), as plain JSONL;
#   multilingual  the multilingual test corpus
#                 (tests/fixtures/tokenizers/multilingual/) repeated 40 times.
# The whole program is timed (load, reading, JSON, tokenizing, writing the
# .bin/.idx), best of 5 runs: MB/s of input text (10^6 bytes of the UTF-8
# "text" fields) by the wall clock and by the process's CPU time (user +
# sys, all threads: the per-worker figure on a shared machine).
#
# Beside each row, the library megac copies, measured in the same run on the
# same texts by tests/bench/peer_tok.py (one thread, texts already decoded:
# the library alone, without the JSON and the writing that megac's figure
# includes); "megac is" compares CPU-time figures. PEER_PY and
# build/tokbench-venv as in tok_bench.sh.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-tokprep
rm -rf "$W"
mkdir -p "$W"
T=tests/fixtures/tokenizers
xz -dc $T/spm/unigram.model.xz >"$W/unigram.model"
xz -dc $T/spm/user.model.xz >"$W/user.model"
xz -dc $T/tiktoken/vocab.json.xz >"$W/vocab.json"
gzip -dc examples/data/kjv.jsonl.gz examples/data/fortunes.jsonl.gz >"$W/english.jsonl"
/usr/bin/python3 - "$W" <<'PY'
import json, lzma, os, sys
w = sys.argv[1]
rows = [json.loads(l)["text"] for l in lzma.open("tests/fixtures/tokenizers/multilingual/refs.jsonl.xz", "rt", encoding="utf-8")]
with open(f"{w}/multilingual.jsonl", "w", encoding="utf-8") as f:
    for _ in range(40):
        for t in rows:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
for v in json.load(lzma.open("tests/fixtures/tokenizers/spm-json/variants.json.xz", "rt", encoding="utf-8")):
    if v["name"] in ("llama2_legacy", "llama2_metaspace"):
        os.makedirs(f"{w}/{v['name']}")
        json.dump(v["tokenizer"], open(f"{w}/{v['name']}/tokenizer.json", "w"))
        json.dump({"eos_token": "</s>"}, open(f"{w}/{v['name']}/tokenizer_config.json", "w"))
for c in ("english", "multilingual"):
    n = sum(len(json.loads(l)["text"].encode("utf-8")) for l in open(f"{w}/{c}.jsonl", encoding="utf-8"))
    open(f"{w}/{c}.bytes", "w").write(str(n))
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

# megac CORPUS ARGS...: "wall-MB/s cpu-MB/s tokens", the best of 5 runs each
# (os.wait4's rusage: microseconds, where /usr/bin/time has 10 ms)
megac() {
	c=$1
	shift
	/usr/bin/python3 - "$(cat "$W/$c.bytes")" "$W/log" bin/preprocess_data --input "$W/$c.jsonl" \
		--output-prefix "$W/out" --workers 1 --log-interval 0 "$@" <<'PY'
import os, re, sys, time
nbytes, log, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
best_wall = best_cpu = 0.0
for rep in range(5):
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execv(argv[0], argv)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status:
        sys.exit("preprocess_data failed: " + open(log).read())
    best_wall = max(best_wall, nbytes / wall / 1e6)
    best_cpu = max(best_cpu, nbytes / (ru.ru_utime + ru.ru_stime) / 1e6)
m = re.search(r"documents, \d+ sequences, (\d+) tokens", open(log).read())
print("%.1f %.1f %s" % (best_wall, best_cpu, m.group(1) if m else "?"))
PY
}

echo "preprocess_data end to end, --workers 1 (MB = 10^6 bytes of text; wall / CPU-time MB/s, CPU = user + sys;"
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)); reference = the library alone, one thread"
for c in english multilingual; do
	echo "$c: $(wc -l <"$W/$c.jsonl") documents, $(awk "BEGIN { printf \"%.2f\", $(cat "$W/$c.bytes") / 1e6 }") MB of text"
done
printf '%-58s %-13s %15s %15s %15s %9s\n' "tokenizer (reference)" "corpus" "megac" "--append-eod" "reference" "megac is"
MIN=""
row() { # label corpus peer-kind peer-model -- preprocess_data tokenizer flags
	label=$1 c=$2 pk=$3 pm=$4
	shift 5
	set -- $(megac "$c" "$@") "$@"
	aw=$1 ac=$2 at=$3
	shift 3
	set -- $(megac "$c" --append-eod "$@")
	ew=$1 ec=$2
	MIN=$(awk -v a="$ac" -v b="$ec" -v m="$MIN" 'BEGIN { v = a < b ? a : b; printf "%s", (m == "" || v < m) ? v : m }')
	p=$($PY tests/bench/peer_tok.py "$pk" "$pm" "$W/$c.jsonl" 2>&1 | tail -n 1)
	case "$p" in
	MBPS*)
		set -- $p
		printf '%-58s %-13s %6s / %6s %6s / %6s %6s / %6s %8s\n' "$label" "$c" "$aw" "$ac" "$ew" "$ec" "$2" "$4" \
			"$(awk "BEGIN { printf \"%.1fx\", $ac / $4 }")"
		[ "$6" = "$at" ] || echo "  note: the reference produced $6 tokens, megac $at"
		;;
	*) printf '%-58s %-13s %6s / %6s %6s / %6s   (reference %s)\n' "$label" "$c" "$aw" "$ac" "$ew" "$ec" "$p" ;;
	esac
}
for c in english multilingual; do
	row "SentencePieceTokenizer unigram nmt_nfkc (sentencepiece)" $c spm "$W/unigram.model" -- \
		--tokenizer-type SentencePieceTokenizer --tokenizer-model "$W/unigram.model"
	row "Llama2Tokenizer BPE (sentencepiece)" $c spm $T/spm/llama.model -- \
		--tokenizer-type Llama2Tokenizer --tokenizer-model $T/spm/llama.model
	row "Llama2Tokenizer unigram byte fallback (sentencepiece)" $c spm $T/spm/unibyte.model -- \
		--tokenizer-type Llama2Tokenizer --tokenizer-model $T/spm/unibyte.model
	row "GPTSentencePieceTokenizer BPE user symbols (sentencepiece)" $c spm "$W/user.model" -- \
		--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model "$W/user.model"
	row "TikTokenizer v2 (tiktoken)" $c tiktoken-v2 "$W/vocab.json" -- \
		--tokenizer-type TikTokenizer --tokenizer-model "$W/vocab.json" --vocab-size 5000
	row "HuggingFaceTokenizer llama2 legacy (tokenizers)" $c hf "$W/llama2_legacy" -- \
		--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/llama2_legacy"
	row "HuggingFaceTokenizer llama2 Metaspace (tokenizers)" $c hf "$W/llama2_metaspace" -- \
		--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/llama2_metaspace"
done
awk -v m="$MIN" 'BEGIN { printf "slowest row, CPU time: %s MB/s per worker; target >= 20: %s\n", m, (m >= 20) ? "met" : "NOT met" }'
