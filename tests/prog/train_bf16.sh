# train_bf16.sh - Megatron's mixed precision (docs/mixed-precision.md):
# with --bf16/--fp16 the model keeps 16-bit weights, fp32 gradients, and the
# optimizer fp32 main weights and moments, all three sharded over data
# parallelism by the distributed optimizer. Measured on 4 CPU ranks: at most
# 6 + 12/4 + 0.5 bytes per parameter before activations, and report_memory's
# per-rank prediction within 5% of train's max allocated; bf16 losses within
# 2% of fp32 over 50 iterations; a resumed bf16 run is bit-exact on its
# layout and continues on others; checkpoints hold the fp32 main weights.
. tests/prog_lib.sh
train_env_begin train_bf16

# a tiny Llama whose embeddings are a small share of its parameters
L="--num-layers 4 --hidden-size 128 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
L="$L --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights"
L="$L --disable-bias-linear --seq-length 32 --max-position-embeddings 32 --tokenizer-type NullTokenizer"
L="$L --vocab-size 255 --mock-data --data-cache-path $W/cache --eval-interval 1000 --eval-iters 0"
L="$L --log-interval 1 --seed 7 --lr 2e-3 --lr-warmup-iters 2 --micro-batch-size 2"

# ---- memory: 4 ranks, bf16, distributed optimizer ----
expect_ok "4 ranks, --bf16 --use-distributed-optimizer" \
	sh -c "$MPI -np 4 $BIN/train $L --global-batch-size 16 --train-iters 3 --bf16 --use-distributed-optimizer >$W/m4.log"
expect_ok "report_memory for the same flags" \
	sh -c "$BIN/report_memory $L --global-batch-size 16 --train-iters 3 --bf16 --use-distributed-optimizer --world-size 4 --device cpu --json >$W/m4.json"
split=$(grep "memory split" "$W/m4.log" | head -1)
bpp=$(echo "$split" | sed -n 's/.*bytes per parameter before activations: \([0-9.]*\).*/\1/p')
if [ -n "$bpp" ] && echo "$split" | grep -q "parameters (bf16)" &&
	$PY -c "import sys; sys.exit(not $bpp <= 6 + 12 / 4 + 0.5)"; then
	ok "bf16 + distributed optimizer on 4 ranks: $bpp bytes per parameter before activations (bound 6 + 12/4 + 0.5)"
else
	notok "bf16 memory per parameter: '$split'"
fi
prediction_close "report_memory's prediction for rank 0 is within 5% of train's max allocated" "$W/m4.json" "$W/m4.log"

# ---- bf16 and fp16 against fp32 over 50 iterations ----
R="$L --global-batch-size 4 --train-iters 50 --hidden-size 64"
expect_ok "fp32, 50 iterations" sh -c "$BIN/train $R --metrics-file $W/f32.jsonl >$W/f32.log"
expect_ok "bf16, 50 iterations" sh -c "$BIN/train $R --bf16 --metrics-file $W/b16.jsonl >$W/b16.log"
expect_ok "fp16 with dynamic loss scaling, DP2 with the distributed optimizer, 50 iterations" \
	sh -c "$MPI -np 2 $BIN/train $R --fp16 --initial-loss-scale 4096 --use-distributed-optimizer --metrics-file $W/h16.jsonl >$W/h16.log"
if $PY - "$W/f32.jsonl" "$W/b16.jsonl" "$W/h16.jsonl" <<'EOF' >"$W/track.txt" 2>&1; then
import json, sys
def losses(p):
    return [r["lm loss of the iteration"] for r in map(json.loads, open(p)) if "lm loss of the iteration" in r]
ref, bf, hf = (losses(p) for p in sys.argv[1:])
assert len(ref) == len(bf) == len(hf) == 50, (len(ref), len(bf), len(hf))
assert ref[-1] < ref[0] - 0.5, "fp32 did not learn"
assert bf != ref, "bf16 rounding had no effect"
worst = max(max(abs(b - r) / r, abs(h - r) / r) for r, b, h in zip(ref, bf, hf))
assert worst <= 0.02, worst
print(f"worst relative difference {worst:.4f}; fp32 {ref[0]:.3f} -> {ref[-1]:.3f}, bf16 -> {bf[-1]:.3f}, fp16 -> {hf[-1]:.3f}")
EOF
	ok "bf16 and fp16 losses stay within 2% of fp32 over 50 iterations: $(cat "$W/track.txt")"
else
	notok "bf16/fp16 against fp32"
	show "$W/track.txt"
fi

# ---- resume: exact on the same layout, continuing on others ----
D="$L --global-batch-size 8 --train-iters 6 --bf16 --use-distributed-optimizer --hidden-dropout 0.1"
expect_ok "DP2 bf16, 6 iterations straight" sh -c "$MPI -np 2 $BIN/train $D --metrics-file $W/s.jsonl >$W/s.log"
expect_ok "DP2 bf16, 3 iterations and a checkpoint" \
	sh -c "$MPI -np 2 $BIN/train $D --save $W/ck --save-interval 3 --exit-interval 3 >$W/h1.log"
expect_ok "DP2 bf16 resumed to 6" sh -c "$MPI -np 2 $BIN/train $D --load $W/ck --metrics-file $W/r2.jsonl >$W/r2.log"
if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/s.jsonl" "$W/r2.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
	ok "a resumed bf16 run with the distributed optimizer is bit-exact (iterations 4-6)"
else
	notok "bf16 resume on the same layout"
	show "$W/cmp.txt"
fi
expect_ok "the DP2 checkpoint resumed on 1 rank" sh -c "$BIN/train $D --load $W/ck --metrics-file $W/r1.jsonl >$W/r1.log"
expect_ok "... and as TP2 x DP2 with sequence parallelism" \
	sh -c "$MPI -np 4 $BIN/train $D --tensor-model-parallel-size 2 --sequence-parallel --load $W/ck --metrics-file $W/r4.jsonl >$W/r4.log"
for f in r1 r4; do
	if RTOL=2e-3 $PY tests/prog/py/compare_metrics.py tail "$W/s.jsonl" "$W/$f.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
		ok "the bf16 checkpoint continues on another layout ($f): $(cat "$W/cmp.txt")"
	else
		notok "bf16 resume on another layout ($f)"
		show "$W/cmp.txt"
	fi
done
if $PY - "$W/ck" <<'EOF' >"$W/main.txt" 2>&1; then
import glob, h5py, numpy as np, sys
f = h5py.File(glob.glob(sys.argv[1] + "/iter_0000003/model.h5")[0], "r")
names = []
f.visit(lambda n: names.append(n) if isinstance(f[n], h5py.Dataset) else None)
w = np.concatenate([np.asarray(f[n], dtype=np.float32).ravel() for n in names])
low = (w.view(np.uint32) & 0xFFFF) != 0
assert w.dtype == np.float32 and low.mean() > 0.9, low.mean()
print(f"{len(names)} tensors, {low.mean():.3f} of the values use bits bf16 drops")
EOF
	ok "the checkpoint holds fp32 main weights, not the rounded model: $(cat "$W/main.txt")"
else
	notok "main weights in the checkpoint"
	show "$W/main.txt"
fi
