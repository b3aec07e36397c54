# train_fsdp.sh - Megatron-FSDP (--use-megatron-fsdp, docs/mixed-precision.md
# and lib/train/fsdp.h) on 4 CPU ranks: every sharding strategy gives the
# losses of plain data parallelism (rtol 1e-3); optim_grads_params (ZeRO-3)
# holds at most 18/4 + 1.5 bytes per parameter with its buffers, bf16;
# report_memory predicts each strategy's peak within 5%; resume is exact
# under ZeRO-3 (ZeRO-2 too under make check-long) and continues on other
# layouts and strategies; bf16 gradient reduction and main gradients stay
# close to plain data parallelism; the settings megac does not do are
# refused by name.
. tests/prog_lib.sh
train_env_begin train_fsdp

# a tiny Llama whose embeddings are a small share of its parameters
L="--num-layers 8 --hidden-size 128 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
L="$L --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights"
L="$L --disable-bias-linear --seq-length 32 --max-position-embeddings 32 --tokenizer-type NullTokenizer"
L="$L --vocab-size 255 --mock-data --data-cache-path $W/cache --eval-interval 1000 --eval-iters 0"
L="$L --log-interval 1 --seed 7 --lr 2e-3 --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 16"
B="$L --bf16 --train-iters 4"

setup "4 ranks, bf16, plain data parallelism" sh -c "$MPI -np 4 $BIN/train $B --metrics-file $W/dp.jsonl >$W/dp.log"
for s in no_shard optim optim_grads optim_grads_params; do
	expect_ok "4 ranks, bf16, --data-parallel-sharding-strategy $s" \
		sh -c "$MPI -np 4 $BIN/train $B --use-megatron-fsdp --data-parallel-sharding-strategy $s --metrics-file $W/$s.jsonl >$W/$s.log"
	if RTOL=1e-3 $PY tests/prog/py/compare_metrics.py same "$W/dp.jsonl" "$W/$s.jsonl" 4 >"$W/cmp.txt" 2>&1; then
		ok "$s gives the losses and grad norms of plain data parallelism: $(cat "$W/cmp.txt")"
	else
		notok "$s against plain data parallelism"
		show "$W/cmp.txt"
	fi
	expect_ok "report_memory for $s" \
		sh -c "$BIN/report_memory $B --use-megatron-fsdp --data-parallel-sharding-strategy $s --world-size 4 --device cpu --json >$W/$s.json"
	prediction_close "report_memory's prediction for $s is within 5%" "$W/$s.json" "$W/$s.log"
done
# bytes per parameter: the state, and the state with the sharding buffers
if $PY - "$W/optim.log" "$W/optim_grads.log" "$W/optim_grads_params.log" <<'EOF' >"$W/bpp.txt" 2>&1; then
import re, sys
def split(p):
    line = next(l for l in open(p) if "memory split" in l)
    state = float(re.search(r"before activations: ([0-9.]+)", line).group(1))
    m = re.search(r"Megatron-FSDP's buffers: [0-9.]+ \(([0-9.]+) bytes", line)
    return state, float(m.group(1)) if m else 0.0
z1, z2, z3 = (split(p) for p in sys.argv[1:])
assert abs(z1[0] - (6 + 12 / 4)) < 1e-3 and abs(z2[0] - (2 + 16 / 4)) < 1e-3 and abs(z3[0] - 18 / 4) < 1e-3, (z1, z2, z3)
assert z3[0] + z3[1] <= 18 / 4 + 1.5, z3
print(f"optim {z1[0]:.3f}, optim_grads {z2[0]:.3f} (+{z2[1]:.3f} of buffers), "
      f"optim_grads_params {z3[0]:.3f} (+{z3[1]:.3f})")
EOF
	ok "bytes per parameter before activations, bf16 on 4 ranks: $(cat "$W/bpp.txt") (ZeRO-3 bound 18/4 + 1.5)"
else
	notok "bytes per parameter under Megatron-FSDP"
	show "$W/bpp.txt"
fi

# fp32 weights sharded too (make check-long)
if long_only; then
	expect_ok "4 ranks, fp32, optim_grads_params" \
		sh -c "$MPI -np 4 $BIN/train $L --train-iters 4 --use-megatron-fsdp --metrics-file $W/f3.jsonl >$W/f3.log"
	expect_ok "4 ranks, fp32, plain data parallelism" \
		sh -c "$MPI -np 4 $BIN/train $L --train-iters 4 --metrics-file $W/f0.jsonl >$W/f0.log"
	if RTOL=1e-4 $PY tests/prog/py/compare_metrics.py same "$W/f0.jsonl" "$W/f3.jsonl" 4 >"$W/cmp.txt" 2>&1; then
		ok "fp32 ZeRO-3 gives plain data parallelism's numbers: $(cat "$W/cmp.txt")"
	else
		notok "fp32 ZeRO-3"
		show "$W/cmp.txt"
	fi
fi

# resume: exact on the same strategy and layout, continuing on others
# (ZeRO-2's own save and resume under make check-long: ZeRO-3 saves the same
# optimizer shards and its sharded weights besides, and its checkpoint loads
# into ZeRO-2 below)
R="$L --bf16 --train-iters 6 --hidden-dropout 0.1 --use-megatron-fsdp"
zero=optim_grads_params
long_only && zero="optim_grads optim_grads_params"
for s in $zero; do
	expect_ok "$s: 6 iterations straight" \
		sh -c "$MPI -np 4 $BIN/train $R --data-parallel-sharding-strategy $s --metrics-file $W/s-$s.jsonl >$W/s-$s.log"
	expect_ok "$s: 3 iterations and a checkpoint" \
		sh -c "$MPI -np 4 $BIN/train $R --data-parallel-sharding-strategy $s --save $W/ck-$s --save-interval 3 --exit-interval 3 >$W/h-$s.log"
	expect_ok "$s: resumed to 6" \
		sh -c "$MPI -np 4 $BIN/train $R --data-parallel-sharding-strategy $s --load $W/ck-$s --metrics-file $W/r-$s.jsonl >$W/r-$s.log"
	if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/s-$s.jsonl" "$W/r-$s.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
		ok "$s resumes bit-exactly (iterations 4-6)"
	else
		notok "$s resume"
		show "$W/cmp.txt"
	fi
done
expect_ok "the ZeRO-3 checkpoint resumed as DP2 optim_grads" \
	sh -c "$MPI -np 2 $BIN/train $R --data-parallel-sharding-strategy optim_grads --load $W/ck-optim_grads_params --metrics-file $W/x2.jsonl >$W/x2.log"
expect_ok "... and on 1 rank without Megatron-FSDP" \
	sh -c "$BIN/train $(echo "$R" | sed 's/--use-megatron-fsdp//') --load $W/ck-optim_grads_params --metrics-file $W/x1.jsonl >$W/x1.log"
for f in x2 x1; do
	if RTOL=2e-3 $PY tests/prog/py/compare_metrics.py tail "$W/s-optim_grads_params.jsonl" "$W/$f.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
		ok "a ZeRO-3 checkpoint continues on another layout and strategy ($f): $(cat "$W/cmp.txt")"
	else
		notok "ZeRO-3 checkpoint on another layout ($f)"
		show "$W/cmp.txt"
	fi
done

# what megac refuses, by name
expect_fail "--data-parallel-sharding-strategy without --use-megatron-fsdp" "needs --use-megatron-fsdp" \
	$BIN/train $B --data-parallel-sharding-strategy optim
expect_fail "ZeRO-3 with pipeline parallelism" "one pipeline stage" \
	$MPI -np 2 $BIN/train $B --use-megatron-fsdp --pipeline-model-parallel-size 2
expect_fail "16-bit gradient reduction without sharded gradients" "under optim_grads and optim_grads_params only" \
	$BIN/train $B --use-megatron-fsdp --data-parallel-sharding-strategy optim --megatron-fsdp-grad-comm-dtype bf16

# bf16 gradient reduction and main gradients (DeepSeek-V3's example sets
# both): the 16-bit roundings change the numbers (not bit for bit the fp32
# reduction's) but stay within bf16's reach of plain data parallelism
expect_ok "4 ranks, bf16, ZeRO-3 with bf16 gradient reduction and main gradients" \
	sh -c "$MPI -np 4 $BIN/train $B --use-megatron-fsdp --megatron-fsdp-grad-comm-dtype bf16 \
	--megatron-fsdp-main-grads-dtype bf16 --metrics-file $W/g16.jsonl >$W/g16.log"
if RTOL=2e-2 $PY tests/prog/py/compare_metrics.py same "$W/dp.jsonl" "$W/g16.jsonl" 4 >"$W/cmp.txt" 2>&1 &&
	! RTOL=1e-7 $PY tests/prog/py/compare_metrics.py same "$W/optim_grads_params.jsonl" "$W/g16.jsonl" 4 \
		>"$W/cmp2.txt" 2>&1; then
	ok "bf16 reduction: within 2e-2 of plain data parallelism ($(cat "$W/cmp.txt")), not the fp32 reduction's numbers"
else
	notok "bf16 reduction against plain data parallelism and the fp32 reduction"
	show "$W/cmp.txt"
	show "$W/cmp2.txt"
fi
