# train_fp8.sh - FP8 training (docs/fp8.md) on a tiny Llama: the delayed
# recipe's update against a transcription of Transformer Engine's; 20
# iterations under --fp8-format hybrid with the tensorwise and delayed
# recipes differ from bf16's losses from the first iteration and end within
# 3% of bf16's final loss; blockwise and mxfp8 likewise; evaluations leave
# the delayed recipe's training as it was; the emulated CUDA
# device gives the CPU's losses (rtol 2e-2; mxfp8, and tensorwise and
# blockwise with FP8 weights; all four recipes with the weights quantized in
# the layers under make check-long); a resumed delayed run is
# bit-exact (its amax histories are in the checkpoint), also after
# ckpt_convert to two pipeline stages; MoE under CP and MTP's FP8 layers; TP2 with sequence
# parallelism gives the one-rank losses as closely as bf16's TP2 does, DP2
# bit for bit.
. tests/prog_lib.sh
train_env_begin train_fp8

if $PY tests/prog/py/fp8_recipe.py "$MEGAC_BUILD/tools/megac_fp8recipe" >"$W/recipe.txt" 2>&1; then
	ok "the delayed recipe's histories and scales match Transformer Engine's update: $(cat "$W/recipe.txt")"
else
	notok "the delayed recipe's update against Transformer Engine's"
	show "$W/recipe.txt"
fi

L="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
L="$L --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights"
L="$L --disable-bias-linear --seq-length 32 --max-position-embeddings 32 --tokenizer-type NullTokenizer"
L="$L --vocab-size 255 --mock-data --data-cache-path $W/cache --eval-interval 1000 --eval-iters 0"
L="$L --log-interval 1 --seed 7 --lr 3e-3 --lr-warmup-iters 2 --micro-batch-size 2 --global-batch-size 4"
NB=$L
L="$L --bf16"
R="$L --train-iters 20"
HY="--fp8-format hybrid"
DL="$HY --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max"

# ---- 20 iterations: bf16 and the four recipes ----
expect_ok "bf16, 20 iterations" sh -c "$BIN/train $R --metrics-file $W/b16.jsonl >$W/b16.log"
expect_ok "hybrid tensorwise, 20 iterations" \
	sh -c "$BIN/train $R $HY --fp8-recipe tensorwise --metrics-file $W/tw.jsonl >$W/tw.log"
expect_ok "hybrid delayed (history 16, max), 20 iterations" \
	sh -c "$BIN/train $R $DL --metrics-file $W/dl.jsonl >$W/dl.log"
expect_ok "e4m3 blockwise, 20 iterations" \
	sh -c "$BIN/train $R --fp8-format e4m3 --fp8-recipe blockwise --metrics-file $W/bw.jsonl >$W/bw.log"
expect_ok "e4m3 mxfp8, 20 iterations" \
	sh -c "$BIN/train $R --fp8-format e4m3 --fp8-recipe mxfp8 --metrics-file $W/mx.jsonl >$W/mx.log"
for r in tw dl bw mx; do
	if $PY - "$W/b16.jsonl" "$W/$r.jsonl" <<'PYEND' >"$W/track.txt" 2>&1; then
import json, sys
def losses(p):
    return [r["lm loss of the iteration"] for r in map(json.loads, open(p)) if "lm loss of the iteration" in r]
ref, f8 = losses(sys.argv[1]), losses(sys.argv[2])
assert len(ref) == len(f8) == 20, (len(ref), len(f8))
assert ref[-1] < ref[0] - 0.5, f"bf16 did not learn: {ref[0]} -> {ref[-1]}"
assert f8[0] != ref[0], "the first iteration's loss is bf16's: FP8 had no effect"
d = abs(f8[-1] - ref[-1]) / ref[-1]
assert d <= 0.03, f"final loss {f8[-1]:.4f} against bf16's {ref[-1]:.4f}: {d:.4f}"
print(f"first {f8[0]:.5f} (bf16 {ref[0]:.5f}), final {f8[-1]:.4f} (bf16 {ref[-1]:.4f}, {100 * d:.2f}% apart)")
PYEND
		ok "$r: $(cat "$W/track.txt")"
	else
		notok "$r against bf16"
		show "$W/track.txt"
	fi
done

# ---- report_memory counts the FP8 operands' codes and scales ----
expect_ok "report_memory for the mxfp8 run" \
	sh -c "$BIN/report_memory $R --fp8-format e4m3 --fp8-recipe mxfp8 --device cpu --json >$W/mx.json 2>/dev/null"
prediction_close "report_memory's prediction for an FP8 run is within 5% of train's max allocated" "$W/mx.json" "$W/mx.log"

expect_ok "report_memory for the delayed run" \
	sh -c "$BIN/report_memory $R $DL --fp8-amax-history-len 1024 --device cpu --json >$W/dl.json 2>/dev/null"
if $PY - "$W/dl.json" "$W/mx.json" <<'PYEND' >"$W/rm.txt" 2>&1; then
import json, sys
dl, mx = (json.load(open(p))["megac"]["ranks"][0]["breakdown"] for p in sys.argv[1:])
# 2 layers x 4 linear layers, 3 metas each: 1024 history entries and a scale, fp32
want = 2 * 4 * 3 * (1024 + 1) * 4 / 1024
assert abs(dl["fp8_host_KB"] - want) < 1e-9, (dl["fp8_host_KB"], want)
# at least the widest operand: 64 rows (micro-batch 2 x 32) x fc1's 2 x 171 outputs, one byte each
assert mx["fp8_operands_MB"] * 2**20 >= 64 * 342, mx["fp8_operands_MB"]
print(f"{dl['fp8_host_KB']:.1f} KB of amax histories, {mx['fp8_operands_MB'] * 1024:.1f} KB of operands")
PYEND
	ok "report_memory counts the FP8 operands and the delayed recipe's histories: $(cat "$W/rm.txt")"
else
	notok "report_memory's FP8 lines"
	show "$W/rm.txt"
fi

# ---- resume: the delayed recipe's histories are in the checkpoint ----
# with evaluations, which quantize with the current scales and record no amax
DLE="$DL --eval-interval 5 --eval-iters 1"
expect_ok "delayed with evaluations every 5 iterations, 20 iterations" \
	sh -c "$BIN/train $R $DLE --metrics-file $W/dle.jsonl >$W/dle.log"
if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/dl.jsonl" "$W/dle.jsonl" 1 20 >"$W/cmp.txt" 2>&1 &&
	grep -q '"validation lm loss"' "$W/dle.jsonl"; then
	ok "evaluations leave the delayed recipe's training bit for bit as it was"
else
	notok "evaluations and the delayed recipe"
	show "$W/cmp.txt"
fi
expect_ok "delayed, 10 iterations and a checkpoint" \
	sh -c "$BIN/train $R $DLE --save $W/ck --save-interval 10 --exit-interval 10 >$W/h1.log"
expect_ok "... resumed to 20" sh -c "$BIN/train $R $DLE --load $W/ck --metrics-file $W/dlr.jsonl >$W/h2.log"
if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/dle.jsonl" "$W/dlr.jsonl" 11 20 >"$W/cmp.txt" 2>&1; then
	ok "a resumed delayed-scaling run is bit-exact (iterations 11-20, evaluations before the save)"
else
	notok "delayed resume"
	show "$W/cmp.txt"
fi
expect_ok "the delayed checkpoint converted to PP2" $BIN/ckpt_convert --load "$W/ck" --save "$W/ck2" --target-pipeline-parallel-size 2
expect_ok "... resumed on two pipeline stages" \
	sh -c "$MPI -np 2 $BIN/train $R $DLE --load $W/ck2 --pipeline-model-parallel-size 2 --exit-interval 12 --metrics-file $W/dlp.jsonl >$W/h3.log"
if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/dle.jsonl" "$W/dlp.jsonl" 11 12 >"$W/cmp.txt" 2>&1; then
	ok "the FP8 state survives ckpt_convert: the PP2 resume continues the one-rank run bit for bit"
else
	notok "delayed resume after ckpt_convert"
	show "$W/cmp.txt"
fi
if $PY - "$W/ck" <<'PYEND' >"$W/h5.txt" 2>&1; then
import h5py, glob, sys
f = h5py.File(glob.glob(sys.argv[1] + "/iter_0000010/model*.h5")[0], "r")
h = f["decoder.layers.1.mlp.linear_fc2._extra_state.fp8_amax_history"][()]
s = f["decoder.layers.1.mlp.linear_fc2._extra_state.fp8_scale"][()]
assert h.shape == (3, 16) and s.shape == (3,), (h.shape, s.shape)
# after 10 updates: 9 filled entries before the newest, column 0 empty
assert (h[:, 0] == 0).all() and (h[:, -10:] > 0).all() and (h[:, 1:6] == 0).all(), h
fmax = [448.0, 448.0, 57344.0]
for r in range(3):
    want = fmax[r] / h[r, -10:].max()
    assert abs(s[r] - want) <= 1e-6 * want, (r, s[r], want)
print(f"fc2's scales {list(map(float, s))} are the format's max over the history's max")
PYEND
	ok "the checkpoint holds each FP8 layer's amax history and scales: $(cat "$W/h5.txt")"
else
	notok "the FP8 state in the checkpoint"
	show "$W/h5.txt"
fi

# ---- layouts: TP2 with SP and DP2 against one rank ----
# DP2 quantizes exactly as one rank with two micro-batches: tensorwise
# scales come from each micro-batch's own amax, and the delayed histories
# take the max over micro-batches and ranks. The delayed runs use
# --calculate-per-token-loss, where the output gradients have the same
# magnitude on every layout (with the mean loss they differ by the number of
# micro-batches per rank, and the first iteration's scale of 1 does not
# scale with them). Under TP a bf16 model already differs from one rank
# (the row-parallel partial sums are rounded to bf16 before their sum, as
# in Megatron), about 4e-4 in the grad norm here; FP8 codes turn such
# differences into steps of 1/16 now and then: the TP2 runs' losses stay
# within 1e-3 of one rank's (about 1e-4 measured).
S="$L --train-iters 6"
expect_ok "bf16, 1 rank, 6 iterations" sh -c "$BIN/train $S --metrics-file $W/ob.jsonl >$W/ob.log"
# (bf16's own TP2 run, the scale of its difference from one rank quoted
# beside the FP8 ones, under make check-long: train_bf16.sh runs bf16 with
# TP2 and SP)
if long_only; then
	expect_ok "bf16, TP2 with SP" sh -c "$MPI -np 2 $BIN/train $S --tensor-model-parallel-size 2 --sequence-parallel --metrics-file $W/tb.jsonl >$W/tb.log"
	RTOL=1 $PY tests/prog/py/compare_metrics.py same "$W/ob.jsonl" "$W/tb.jsonl" 6 >"$W/bcmp.txt" 2>&1
else
	echo "under make check-long" >"$W/bcmp.txt"
fi
for r in tw dl; do
	case $r in tw) F="$HY --fp8-recipe tensorwise" ;; dl) F="$DL --calculate-per-token-loss" ;; esac
	expect_ok "$r, 1 rank, 6 iterations" sh -c "$BIN/train $S $F --metrics-file $W/o$r.jsonl >$W/o$r.log"
	expect_ok "$r, TP2 with SP" sh -c "$MPI -np 2 $BIN/train $S $F --tensor-model-parallel-size 2 --sequence-parallel --metrics-file $W/t$r.jsonl >$W/t$r.log"
	expect_ok "$r, DP2" sh -c "$MPI -np 2 $BIN/train $S $F --metrics-file $W/d$r.jsonl >$W/d$r.log"
	if RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/o$r.jsonl" "$W/d$r.jsonl" 6 >"$W/cmp.txt" 2>&1; then
		ok "$r: DP2 gives the one-rank losses and grad norms bit for bit"
	else
		notok "$r: DP2 against one rank"
		show "$W/cmp.txt"
	fi
	if LOSS_ONLY=1 RTOL=1e-3 $PY tests/prog/py/compare_metrics.py same "$W/o$r.jsonl" "$W/t$r.jsonl" 6 >"$W/cmp.txt" 2>&1; then
		ok "$r: TP2+SP gives the one-rank losses within 1e-3: $(cat "$W/cmp.txt") (bf16's TP2, grad norms too: $(cat "$W/bcmp.txt"))"
	else
		notok "$r: TP2+SP against one rank"
		show "$W/cmp.txt"
	fi
done

# ---- FP8 weights (--fp8-param-gather): codes cast from the fp32 main weights ----
# The cast rounds the main weights to bf16 first (as Transformer Engine
# does), so the codes are those the layers quantize from bf16 weights:
# every loss and grad norm is the bf16-weights run's, bit for bit. DP2
# casts each shard with the whole weight's scale: the one-rank losses bit
# for bit (the distributed optimizer sums the grad norm's squares shard by
# shard: its last bit may differ). Blockwise: each 128x128 block's scale
# from the ranks' partial amaxes.
PG="--use-distributed-optimizer --fp8-param-gather"
BW="--fp8-format e4m3 --fp8-recipe blockwise"
expect_ok "bw, 1 rank, 6 iterations" sh -c "$BIN/train $S $BW --metrics-file $W/obw.jsonl >$W/obw.log"
for r in tw dl bw; do
	case $r in tw) F="$HY --fp8-recipe tensorwise" ;; dl) F="$DL --calculate-per-token-loss" ;; bw) F=$BW ;; esac
	expect_ok "$r with FP8 weights, 1 rank" sh -c "$BIN/train $S $F $PG --metrics-file $W/p$r.jsonl >$W/p$r.log"
	if RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/o$r.jsonl" "$W/p$r.jsonl" 6 >"$W/cmp.txt" 2>&1; then
		ok "$r: FP8 weights give the bf16 weights' losses and grad norms bit for bit"
	else
		notok "$r: FP8 weights against bf16 weights"
		show "$W/cmp.txt"
	fi
	expect_ok "$r with FP8 weights, DP2" sh -c "$MPI -np 2 $BIN/train $S $F $PG --metrics-file $W/pd$r.jsonl >$W/pd$r.log"
	if LOSS_ONLY=1 RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/p$r.jsonl" "$W/pd$r.jsonl" 6 >"$W/cmp.txt" 2>&1 &&
		$PY tests/prog/py/compare_metrics.py same "$W/p$r.jsonl" "$W/pd$r.jsonl" 6 >>"$W/cmp.txt" 2>&1; then
		ok "$r: FP8 weights, DP2 gives the one-rank losses bit for bit (grad norms: $(tail -n 1 "$W/cmp.txt"))"
	else
		notok "$r: FP8 weights, DP2 against one rank"
		show "$W/cmp.txt"
	fi
	# blockwise under TP: each rank's weight has 128x128 blocks of its own (as without FP8 weights)
	[ $r = bw ] && continue
	expect_ok "$r with FP8 weights, TP2 with SP and DP2" \
		sh -c "$MPI -np 4 $BIN/train $S $F $PG --tensor-model-parallel-size 2 --sequence-parallel --metrics-file $W/pt$r.jsonl >$W/pt$r.log"
	if LOSS_ONLY=1 RTOL=1e-3 $PY tests/prog/py/compare_metrics.py same "$W/p$r.jsonl" "$W/pt$r.jsonl" 6 >"$W/cmp.txt" 2>&1; then
		ok "$r: FP8 weights, TP2+SP with DP2 gives the one-rank losses within 1e-3: $(cat "$W/cmp.txt")"
	else
		notok "$r: FP8 weights, TP2+SP against one rank"
		show "$W/cmp.txt"
	fi
done
expect_ok "delayed with FP8 weights, DP2: 3 iterations and a checkpoint" \
	sh -c "$MPI -np 2 $BIN/train $S $DL --calculate-per-token-loss $PG --save $W/pgck --save-interval 3 --exit-interval 3 >$W/pg1.log"
expect_ok "... resumed to 6" \
	sh -c "$MPI -np 2 $BIN/train $S $DL --calculate-per-token-loss $PG --load $W/pgck --metrics-file $W/pgr.jsonl >$W/pg2.log"
if LOSS_ONLY=1 RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/pdl.jsonl" "$W/pgr.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
	ok "FP8 weights: a resumed delayed DP2 run gives the same losses bit for bit (the codes are cast again from the main weights)"
else
	notok "FP8 weights: delayed resume"
	show "$W/cmp.txt"
fi
# report_memory: the FP8 layers' weights take one byte a value
expect_ok "report_memory with and without FP8 weights" \
	sh -c "$BIN/report_memory $S $HY --use-distributed-optimizer --device cpu --json >$W/rw16.json 2>/dev/null &&
		$BIN/report_memory $S $HY $PG --device cpu --json >$W/rw8.json 2>/dev/null"
if $PY - "$W/rw16.json" "$W/rw8.json" <<'PYEND' >"$W/rw.txt" 2>&1; then
import json, sys
a, b = (json.load(open(p))["megac"]["ranks"][0]["breakdown"] for p in sys.argv[1:])
saved = (a["parameters_MB"] - b["parameters_MB"]) * 2**20
# 2 layers: qkv (64 + 2 x 2 x 16) x 64, proj 64 x 64, fc1 (2 x 128) x 64, fc2 64 x 128 values (ffn
# int(4h 2/3 / 64) 64 = 128), a byte each saved
fp8 = 2 * (128 * 64 + 64 * 64 + 256 * 64 + 64 * 128)
assert abs(saved - fp8) <= 16 * 20, (saved, fp8)
print(f"{a['parameters_MB'] * 1024:.1f} KB of bf16 weights, {b['parameters_MB'] * 1024:.1f} KB with {fp8} FP8 values")
PYEND
	ok "report_memory counts FP8 weights as one byte a value: $(cat "$W/rw.txt")"
else
	notok "report_memory's FP8 weights"
	show "$W/rw.txt"
fi
prediction_close "report_memory's prediction with FP8 weights is within 5% of train's max allocated" "$W/rw8.json" "$W/ptw.log"

# ---- --first-last-layers-bf16: with both layers kept in bf16 nothing is FP8 ----
expect_ok "tensorwise with --first-last-layers-bf16 (layers 0 and 1 in bf16)" \
	sh -c "$BIN/train $S $HY --fp8-recipe tensorwise --first-last-layers-bf16 --metrics-file $W/fl.jsonl >$W/fl.log"
expect_ok "... and with only the first layer in bf16" \
	sh -c "$BIN/train $S $HY --fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-end-in-bf16 0 --metrics-file $W/f1.jsonl >$W/f1.log"
if RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/ob.jsonl" "$W/fl.jsonl" 6 >"$W/cmp.txt" 2>&1 &&
	! RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/ob.jsonl" "$W/f1.jsonl" 6 >/dev/null 2>&1 &&
	! RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/otw.jsonl" "$W/f1.jsonl" 6 >/dev/null 2>&1; then
	ok "--first-last-layers-bf16 keeps its layers in bf16: both kept is bf16's run, one kept is neither bf16's nor all-FP8's"
else
	notok "--first-last-layers-bf16"
	show "$W/cmp.txt"
fi

# ---- the emulated CUDA device against the CPU ----
if [ -n "${MEGAC_EMU:-}" ]; then
	# tensorwise takes cuBLASLt's FP8 GEMM, mxfp8 the dequantizing one; the
	# delayed and blockwise recipes (the same two GEMMs) under make check-long
	# (pg, pb: tensorwise and blockwise with FP8 weights: their casts from
	# the main weights, the transposed codes for the dgrad). Tensorwise with
	# the weights quantized in the layers (tw) also under make check-long
	# only: pg runs its GEMM and its amax and quantize kernels on the
	# activations and gradients, and the cast besides.
	EMU_RECIPES="mx pg pb"
	long_only && EMU_RECIPES="tw dl bw mx pg pb"
	for r in $EMU_RECIPES; do
		case $r in tw) F="$HY --fp8-recipe tensorwise" ;; dl) F=$DL ;; bw) F="--fp8-format e4m3 --fp8-recipe blockwise" ;;
		mx) F="--fp8-format e4m3 --fp8-recipe mxfp8" ;; pg) F="$HY --fp8-recipe tensorwise $PG" ;;
		pb) F="$BW $PG" ;; esac
		expect_ok "$r on the emulated CUDA device" \
			sh -c "$MEGAC_EMU/bin/train $S $F --device cuda --metrics-file $W/e$r.jsonl >$W/e$r.log 2>&1"
		expect_ok "$r on the CPU" sh -c "$BIN/train $S $F --device cpu --metrics-file $W/c$r.jsonl >$W/c$r.log 2>&1"
		if RTOL=2e-2 $PY tests/prog/py/compare_metrics.py same "$W/c$r.jsonl" "$W/e$r.jsonl" 6 >"$W/cmp.txt" 2>&1 &&
			grep -q "compute on CUDA device" "$W/e$r.log"; then
			ok "$r: the emulated CUDA device gives the CPU's losses: $(cat "$W/cmp.txt")"
		else
			notok "$r: emulated CUDA against the CPU"
			show "$W/cmp.txt"
		fi
	done
	# report_memory --device cuda against the emulated device's allocations:
	# the FP8 ops' scratch (the whole-tensor amax, dequantized block-scaled
	# operands) as the CUDA backend takes it
	EM="--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 128 --max-position-embeddings 128"
	EM="$EM --micro-batch-size 2 --global-batch-size 2 --lr 2e-3 --train-iters 1 --mock-data --eval-interval 100"
	EM="$EM --eval-iters 0 --log-interval 1 --tokenizer-type NullTokenizer --vocab-size 2000 --bf16"
	EM="$EM --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear"
	EM="$EM --untie-embeddings-and-output-weights --data-cache-path $W/emcache"
	for r in tw mx; do
		case $r in tw) F="$HY --fp8-recipe tensorwise" ;; mx) F="--fp8-format e4m3 --fp8-recipe mxfp8" ;; esac
		if $MEGAC_EMU/bin/train $EM $F --device cuda >"$W/em$r.log" 2>&1 &&
			$BIN/report_memory $EM $F --device cuda --json >"$W/em$r.json" 2>/dev/null &&
			$PY - "$W/em$r.log" "$W/em$r.json" >"$W/emc.txt" 2>&1 <<'PYEND'; then
import json, re, sys
log = open(sys.argv[1]).read()
r = json.load(open(sys.argv[2]))["megac"]["ranks"][0]
peaks = [float(x) for x in re.findall(r"max allocated: ([0-9.]+)", log)]
assert peaks, "no memory line"
assert abs(max(peaks) - r["max_allocated_MB"]) <= 0.006, ("max allocated", max(peaks), r["max_allocated_MB"])
print("max allocated %.2f MB, of which backend scratch %.2f MB" % (max(peaks), r["breakdown"]["backend_workspace_MB"] - 32))
PYEND
			ok "$r: report_memory --device cuda predicts the emulated device's memory ($(cat "$W/emc.txt"))"
		else
			notok "$r: report_memory --device cuda against the emulated device"
			show "$W/emc.txt"
		fi
	done
fi

# ---- MoE and MTP ----
# a routed expert without rows on one context or expert-parallel rank:
# tensorwise reduces the experts' amaxes over their expert-TP group only,
# so the ranks never wait on each other
for X in "--context-parallel-size 2" "--expert-model-parallel-size 2"; do
	expect_ok "tensorwise, MoE (16 experts, top-1) with $X: 3 iterations" \
		sh -c "$MPI -np 2 $BIN/train $L --train-iters 3 --num-experts 16 --moe-router-topk 1 --moe-router-pre-softmax $X $HY --fp8-recipe tensorwise >$W/mcp.log 2>&1"
done
# the delayed recipe keeps one history per global expert on every rank, so
# EP2 quantizes as one rank (the expert GEMMs sum their rows in another
# order: not bit for bit)
MD="$L --train-iters 6 --num-experts 4 --moe-router-topk 2 $DL --calculate-per-token-loss"
expect_ok "delayed, MoE, 1 rank" sh -c "$BIN/train $MD --metrics-file $W/me1.jsonl >$W/me1.log 2>&1"
expect_ok "delayed, MoE, EP2" sh -c "$MPI -np 2 $BIN/train $MD --expert-model-parallel-size 2 --metrics-file $W/me2.jsonl >$W/me2.log 2>&1"
if RTOL=1e-5 $PY tests/prog/py/compare_metrics.py same "$W/me1.jsonl" "$W/me2.jsonl" 6 >"$W/cmp.txt" 2>&1; then
	ok "delayed: MoE under EP2 gives the one-rank losses (rtol 1e-5): $(cat "$W/cmp.txt")"
else
	notok "delayed MoE EP2 against one rank"
	show "$W/cmp.txt"
fi
# FP8 weights: the experts' part of the store is gathered over its own
# group, and its tensors sit apart at the end of the buffers; tensorwise
# amaxes of routed experts go over expert TP only (here none: ETP1 under
# TP2, where the TP peers hold other experts), of the rest over TP
MT="$L --train-iters 3 --num-experts 4 --moe-router-topk 2 --sequence-parallel $HY --fp8-recipe tensorwise"
MT="$MT --use-distributed-optimizer"
for X in "--tensor-model-parallel-size 2" "--tensor-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1"; do
	case $X in *expert-model*) np=4 ;; *) np=2 ;; esac
	expect_ok "tensorwise, MoE, $X, bf16 weights" \
		sh -c "$MPI -np $np $BIN/train $MT $X --metrics-file $W/mtw.jsonl >$W/mtw.log 2>&1"
	expect_ok "tensorwise, MoE, $X, FP8 weights" \
		sh -c "$MPI -np $np $BIN/train $MT $X --fp8-param-gather --metrics-file $W/mtp.jsonl >$W/mtp.log 2>&1"
	if RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/mtw.jsonl" "$W/mtp.jsonl" 3 >"$W/cmp.txt" 2>&1; then
		ok "tensorwise, MoE, $X: FP8 weights give the bf16 weights' run bit for bit"
	else
		notok "tensorwise, MoE, $X: FP8 weights against bf16 weights"
		show "$W/cmp.txt"
	fi
	rm -f "$W/mtw.jsonl" "$W/mtp.jsonl"
done
expect_ok "delayed, MoE with FP8 weights, 1 rank" \
	sh -c "$BIN/train $MD $PG --metrics-file $W/mp1.jsonl >$W/mp1.log 2>&1"
expect_ok "delayed, MoE with FP8 weights, EP2" \
	sh -c "$MPI -np 2 $BIN/train $MD $PG --expert-model-parallel-size 2 --metrics-file $W/mp2.jsonl >$W/mp2.log 2>&1"
if RTOL=1e-5 $PY tests/prog/py/compare_metrics.py same "$W/mp1.jsonl" "$W/mp2.jsonl" 6 >"$W/cmp.txt" 2>&1; then
	ok "delayed: MoE with FP8 weights under EP2 gives the one-rank losses (rtol 1e-5): $(cat "$W/cmp.txt")"
else
	notok "delayed MoE with FP8 weights, EP2 against one rank"
	show "$W/cmp.txt"
fi
expect_ok "delayed with one MTP depth, 3 iterations and a checkpoint" \
	sh -c "$BIN/train $L --train-iters 3 --mtp-num-layers 1 $DL --save $W/mtck --save-interval 3 >$W/mtp.log 2>&1"
if $PY - "$W/mtck" <<'PYEND' >"$W/mtp.txt" 2>&1; then
import h5py, glob, sys
f = h5py.File(glob.glob(sys.argv[1] + "/iter_0000003/model*.h5")[0], "r")
want = ["mtp.layers.0.eh_proj", "mtp.layers.0.transformer_layer.mlp.linear_fc1",
        "mtp.layers.0.transformer_layer.self_attention.linear_qkv"]
for w in want:
    assert w + "._extra_state.fp8_scale" in f, w
print(", ".join(want))
PYEND
	ok "MTP's eh_proj and layer are FP8 layers (Megatron's global FP8 context): $(cat "$W/mtp.txt")"
else
	notok "MTP in FP8"
	show "$W/mtp.txt"
fi

# ---- Megatron's Llama-3 8B FP8 example (examples/llama/train_llama3_8b_h100_fp8.sh), shrunk, on two
# ranks: 32 layers of 4096 -> 2 of 64, 8 GPUs -> DP2; its whole line, --ckpt-format torch_dist
# included (megatron_scripts.sh also saves with it)
LL="--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 4"
LL="$LL --group-query-attention --num-query-groups 2 --kv-channels 16 --seq-length 32 --max-position-embeddings 32"
LL="$LL --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0"
LL="$LL --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused"
LL="$LL --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear"
LL="$LL --micro-batch-size 1 --global-batch-size 4 --train-samples 8 --lr-decay-samples 6 --lr-warmup-samples 2"
LL="$LL --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5 --lr-decay-style cosine"
LL="$LL --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16"
LL="$LL --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc --empty-unused-memory-level 1"
LL="$LL --exit-duration-in-mins 235 --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
LL="$LL --fp8-param-gather"
LL="$LL --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel --use-distributed-optimizer"
LL="$LL --overlap-grad-reduce --overlap-param-gather --mock-data --tokenizer-type NullTokenizer --vocab-size 1000"
LL="$LL --data-cache-path $W/llcache --tiktoken-pattern v2 --split 99,1,0 --no-create-attention-mask-in-dataloader"
LL="$LL --no-mmap-bin-files --num-workers 1 --log-interval 1 --eval-iters 1 --eval-interval 100 --save-interval 1000"
LL="$LL --distributed-timeout-minutes 60 --save $W/llck --load $W/llck --tensorboard-dir $W/lltb --ckpt-format torch_dist"
expect_ok "Megatron's Llama-3 8B FP8 example, shrunk, 2 iterations on 2 ranks" \
	sh -c "$MPI -np 2 $BIN/train $LL >$W/ll.log 2>&1 && grep -q 'iteration *2/ *2' $W/ll.log"

# ---- refusals ----
expect_fail "--fp8-format without --bf16" "needs --bf16" $BIN/train $NB --train-iters 1 $HY
expect_fail "--fp8-param-gather without the distributed optimizer" "needs --use-distributed-optimizer" \
	$BIN/train $R $HY --fp8-param-gather
expect_fail "--fp8-param-gather with the mxfp8 recipe" "--fp8-recipe mxfp8" \
	$BIN/train $R --fp8-format e4m3 --fp8-recipe mxfp8 $PG
expect_fail "--fp8-param-gather without --fp8-format" "needs --fp8-format" $BIN/train $R $PG
expect_fail "--first-last-layers-bf16 with the delayed recipe" "--first-last-layers-bf16" $BIN/train $R $DL --first-last-layers-bf16
