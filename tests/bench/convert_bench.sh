#!/bin/sh
# convert_bench.sh - `make bench`: ckpt_convert on a checkpoint of about
# 1.5 GB (GPT-2 small, 124M parameters: model.h5 0.5 GB, optim.h5 1 GB),
# printing throughput (GB of tensors read and written per second) and peak
# resident memory, beside the peers measured in the same run: `cp -r` of the
# same checkpoint (the file system's copy speed, the ceiling for a rewrite)
# for the layout conversion, and for the Hugging Face export and import the
# same folder loaded and saved again by transformers (save_pretrained), when
# tests/py-env.sh's environment is there. Memory goal: peak RSS near
# one tensor, far below the checkpoint's size.
set -eu
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || make --no-print-directory all >/dev/null
W=build/bench-convert
rm -rf "$W"
mkdir -p "$W"
GPT2="--tokenizer-type GPT2BPETokenizer --vocab-file examples/tokenizers/gpt2/gpt2-vocab.json --merge-file examples/tokenizers/gpt2/gpt2-merges.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

bin/train --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 64 --max-position-embeddings 1024 \
	--micro-batch-size 1 --lr 1e-4 --mock-data --train-iters 0 --data-cache-path "$W/cache" $GPT2 \
	--save "$W/src" >"$W/train.log" 2>&1
SRC=$W/src/iter_0000000
bytes=$(du -cb "$SRC"/*.h5 | tail -1 | cut -f1)
model_bytes=$(du -b "$SRC/model.h5" | cut -f1)
largest=$((50304 * 768 * 4)) # the word embeddings, fp32
echo "checkpoint: $(awk -v b="$bytes" 'BEGIN { printf "%.2f GB", b / 1e9 }') (model.h5 $(awk -v b="$model_bytes" 'BEGIN { printf "%.2f GB", b / 1e9 }')), largest tensor $(awk -v b="$largest" 'BEGIN { printf "%.0f MB", b / 1e6 }')"

# run NAME BYTES CMD...: seconds and peak RSS of CMD; prints a line
run() {
	name=$1 moved=$2
	shift 2
	sync
	t0=$(date +%s.%N)
	/usr/bin/time -f "%M" -o "$W/time" "$@" >"$W/$name.log" 2>&1
	t1=$(date +%s.%N)
	rss=$(cat "$W/time")
	awk -v n="$name" -v t0="$t0" -v t1="$t1" -v b="$moved" -v r="$rss" -v big="$largest" 'BEGIN {
		s = t1 - t0
		printf "%-34s %6.2f s  %6.2f GB/s  peak RSS %5.0f MB (%.1f x the largest tensor)\n", n, s, b / s / 1e9,
			r / 1024, r * 1024 / big }'
	echo "$t1 $t0" | awk '{ print $1 - $2 }' >"$W/$name.secs"
}

run "cp -r (peer)" "$bytes" cp -r "$W/src" "$W/copy"
run "ckpt_convert to PP4" "$bytes" bin/ckpt_convert --load "$W/src" --save "$W/pp4" --target-pipeline-parallel-size 4
run "ckpt_convert to PP4, --verify" "$bytes" bin/ckpt_convert --load "$W/src" --save "$W/pp4v" \
	--target-pipeline-parallel-size 4 --verify
awk -v a="$(cat "$W/cp -r (peer).secs")" -v b="$(cat "$W/ckpt_convert to PP4.secs")" \
	'BEGIN { printf "layout conversion: %.2f x the time of cp -r\n", b / a }'
run "ckpt_convert --to hf (fp32)" "$model_bytes" bin/ckpt_convert --load "$W/src" --save "$W/hf" --to hf
run "ckpt_convert --to hf --dtype bf16" "$model_bytes" bin/ckpt_convert --load "$W/src" --save "$W/hf16" --to hf \
	--dtype bf16
run "ckpt_convert --from hf" "$model_bytes" bin/ckpt_convert --from hf --load "$W/hf" --save "$W/back"

if PY=$(sh tests/py-env.sh build 2>"$W/pyenv.log" | tail -n 1) && [ -x "$PY" ]; then
	cat >"$W/resave.py" <<'EOF'
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
m.save_pretrained(sys.argv[2], safe_serialization=True)
EOF
	run "transformers load + save (peer)" "$model_bytes" "$PY" "$W/resave.py" "$W/hf" "$W/hf-resaved"
	awk -v a="$(cat "$W/transformers load + save (peer).secs")" -v b="$(cat "$W/ckpt_convert --to hf (fp32).secs")" \
		'BEGIN { printf "Hugging Face export: %.2f x the time of transformers loading and saving the same model\n", b / a }'
else
	echo "transformers peer: skipped (tests/py-env.sh failed: $(tail -n 1 "$W/pyenv.log"))"
fi
rm -rf "$W"
