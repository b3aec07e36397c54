# train_optim_precision.sh - Megatron's precision-aware optimizer, bf16
# gradient reduction and optimizer offload (docs/mixed-precision.md):
#  - 16-bit moments (bf16, or fp16 scaled per tensor) and fp16 main weights
#    track the fp32-state run within 1% over 20 iterations, and the memory
#    split shows the bytes per parameter they save (DP2: 12 -> 10 -> 9);
#    report_memory predicts the same optimizer bytes;
#  - a resumed run with bf16 moments is bit-exact (the checkpoint holds
#    their fp32 values), one with fp16 states continues within 16-bit
#    rounding, and the checkpoint loads into an fp32-state run;
#  - --grad-reduce-in-bf16 and --main-grads-dtype bf16 round the gradients
#    (the same losses, close to fp32 reduction's);
#  - Megatron's checks on these flags, with their messages;
#  - --optimizer-cpu-offload: a no-op on the CPU backend (said once); on the
#    emulated GPU the losses are bit-identical with and without it (half
#    offloaded bf16 on one rank, a wholly offloaded fp32 model on DP2, and
#    under make check-long a wholly offloaded bf16 one on DP2), a resumed one
#    too, and max allocated drops by the optimizer's bytes, as report_memory
#    predicts.
. tests/prog_lib.sh
train_env_begin train_optim_precision

L="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
L="$L --position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights"
L="$L --disable-bias-linear --seq-length 32 --max-position-embeddings 32 --tokenizer-type NullTokenizer"
L="$L --vocab-size 255 --mock-data --data-cache-path $W/cache --eval-interval 1000 --eval-iters 0"
L="$L --log-interval 1 --seed 7 --lr 2e-3 --lr-warmup-iters 2 --micro-batch-size 2"
D="$L --bf16 --use-distributed-optimizer"
PA="--use-precision-aware-optimizer"
BF="$PA --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
HF="$PA --exp-avg-dtype fp16 --exp-avg-sq-dtype fp16 --main-params-dtype fp16"

# bpp LOG: the bytes per parameter before activations of rank 0's memory split
bpp() { grep -m1 "memory split" "$1" | sed -n 's/.*bytes per parameter before activations: \([0-9.]*\).*/\1/p'; }

# ---- 16-bit states: losses and memory, DP2, 20 iterations ----
T="$D --global-batch-size 8 --train-iters 20"
expect_ok "DP2 bf16, fp32 optimizer states" sh -c "$MPI -np 2 $BIN/train $T --metrics-file $W/f32.jsonl >$W/f32.log"
expect_ok "DP2 bf16, bf16 moments (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)" \
	sh -c "$MPI -np 2 $BIN/train $T $BF --metrics-file $W/bf.jsonl >$W/bf.log"
expect_ok "DP2 bf16, fp16 moments and main weights" \
	sh -c "$MPI -np 2 $BIN/train $T $HF --metrics-file $W/hf.jsonl >$W/hf.log"
if $PY - "$W/f32.jsonl" "$W/bf.jsonl" "$W/hf.jsonl" <<'EOF' >"$W/track.txt" 2>&1; then
import json, sys
def losses(p):
    return [r["lm loss of the iteration"] for r in map(json.loads, open(p)) if "lm loss of the iteration" in r]
ref, bf, hf = (losses(p) for p in sys.argv[1:])
assert len(ref) == len(bf) == len(hf) == 20, (len(ref), len(bf), len(hf))
assert ref[-1] < ref[0] - 0.5, "the fp32-state run did not learn"
assert bf != ref and hf != ref, "16-bit states changed nothing"
worst = max(max(abs(b - r) / r, abs(h - r) / r) for r, b, h in zip(ref, bf, hf))
assert worst <= 1e-2, worst
print(f"worst relative difference {worst:.1e}; {ref[0]:.3f} -> fp32 states {ref[-1]:.4f}, bf16 {bf[-1]:.4f}, fp16 {hf[-1]:.4f}")
EOF
	ok "16-bit optimizer states track the fp32 ones within 1%: $(cat "$W/track.txt")"
else
	notok "16-bit optimizer states against fp32"
	show "$W/track.txt"
fi
# 2 bytes of bf16 weights and 4 of fp32 gradients on every rank; over DP2 the
# optimizer's 4 + 4 + 4 (fp32), 4 + 2 + 2 (bf16 moments), 2 + 2 + 2 (fp16)
b32=$(bpp "$W/f32.log") b16=$(bpp "$W/bf.log") h16=$(bpp "$W/hf.log")
if $PY -c "import sys; a, b, c = map(float, sys.argv[1:]); sys.exit(not (abs(a - 12) < 0.01 and abs(b - 10) < 0.01 and abs(c - 9) < 0.01))" \
	"${b32:-0}" "${b16:-0}" "${h16:-0}"; then
	ok "bytes per parameter before activations on DP2: fp32 states $b32, bf16 moments $b16, fp16 states $h16 (6 + 12/2, 6 + 8/2, 6 + 6/2)"
else
	notok "bytes per parameter: fp32 states '$b32', bf16 moments '$b16', fp16 states '$h16' (wanted 12, 10, 9)"
fi
expect_ok "report_memory for the fp16-state flags" \
	sh -c "$BIN/report_memory $T $HF --world-size 2 --json >$W/hf.json"
opt=$(grep -m1 "memory split" "$W/hf.log" | sed -n 's/.*optimizer state: \([0-9.]*\).*/\1/p')
if $PY - "$W/hf.json" "${opt:-nan}" <<'EOF' >"$W/pred.txt" 2>&1; then
import json, sys
r = json.load(open(sys.argv[1]))["megac"]["ranks"][0]["breakdown"]
pred, meas = r["optimizer_states_MB"], float(sys.argv[2])
assert abs(pred - meas) < 0.006, (pred, meas)
print(f"predicted {pred:.3f} MB, train's split {meas:.2f} MB")
EOF
	ok "report_memory predicts the 16-bit optimizer state: $(cat "$W/pred.txt")"
else
	notok "report_memory's optimizer state with 16-bit states"
	show "$W/pred.txt"
fi

# ---- resume ----
R="$D --global-batch-size 8 --train-iters 6 --hidden-dropout 0.1"
for kind in bf hf; do
	[ $kind = bf ] && P=$BF || P=$HF
	expect_ok "DP2 $kind states, 6 iterations straight" sh -c "$MPI -np 2 $BIN/train $R $P --metrics-file $W/s$kind.jsonl >$W/s$kind.log"
	expect_ok "DP2 $kind states, 3 iterations and a checkpoint" \
		sh -c "$MPI -np 2 $BIN/train $R $P --save $W/ck$kind --save-interval 3 --exit-interval 3 >$W/c$kind.log"
	expect_ok "DP2 $kind states resumed to 6" \
		sh -c "$MPI -np 2 $BIN/train $R $P --load $W/ck$kind --metrics-file $W/r$kind.jsonl >$W/r$kind.log"
done
if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/sbf.jsonl" "$W/rbf.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
	ok "a resumed run with bf16 moments is bit-exact (iterations 4-6)"
else
	notok "resume with bf16 moments"
	show "$W/cmp.txt"
fi
# fp16 main weights: the model's bf16 weights come back rounded from the
# stored 16-bit main weights, not from the step's fp32 values
if RTOL=2e-3 $PY tests/prog/py/compare_metrics.py tail "$W/shf.jsonl" "$W/rhf.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
	ok "a resumed run with fp16 states continues within 16-bit rounding: $(cat "$W/cmp.txt")"
else
	notok "resume with fp16 states"
	show "$W/cmp.txt"
fi
if $PY - "$W/ckbf" <<'EOF' >"$W/ck.txt" 2>&1; then
import glob, h5py, numpy as np, sys
f = h5py.File(glob.glob(sys.argv[1] + "/iter_0000003/optim.h5")[0], "r")
vals = []
for g in ("exp_avg", "exp_avg_sq"):
    f[g].visit(lambda n: vals.append(np.asarray(f[g][n])) if isinstance(f[g][n], h5py.Dataset) else None)
v = np.concatenate([x.ravel() for x in vals])
assert v.dtype == np.float32 and (v != 0).mean() > 0.5, (v.dtype, (v != 0).mean())
assert ((v.view(np.uint32) & 0xFFFF) == 0).all(), "a moment is not a bf16 value"
print(f"{len(vals)} tensors, float32 holding bf16 values")
EOF
	ok "the checkpoint stores the bf16 moments as fp32: $(cat "$W/ck.txt")"
else
	notok "the moments in the checkpoint"
	show "$W/ck.txt"
fi
expect_ok "the bf16-moment checkpoint resumed with fp32 states" \
	sh -c "$MPI -np 2 $BIN/train $R --load $W/ckbf --metrics-file $W/rf.jsonl >$W/rf.log"
if RTOL=1e-2 $PY tests/prog/py/compare_metrics.py tail "$W/sbf.jsonl" "$W/rf.jsonl" 4 6 >"$W/cmp.txt" 2>&1; then
	ok "... and continues: $(cat "$W/cmp.txt")"
else
	notok "the bf16-moment checkpoint with fp32 states"
	show "$W/cmp.txt"
fi

# ---- gradients reduced in bf16 ----
G="$D --global-batch-size 8 --train-iters 10"
expect_ok "DP2 --grad-reduce-in-bf16" sh -c "$MPI -np 2 $BIN/train $G --grad-reduce-in-bf16 --metrics-file $W/g1.jsonl >$W/g1.log 2>&1"
expect_ok "DP2 --main-grads-dtype bf16" sh -c "$MPI -np 2 $BIN/train $G $PA --main-grads-dtype bf16 --metrics-file $W/g2.jsonl >$W/g2.log"
expect_ok "DP2 fp32 reduction" sh -c "$MPI -np 2 $BIN/train $G --metrics-file $W/g0.jsonl >$W/g0.log"
if $PY - "$W/g0.jsonl" "$W/g1.jsonl" "$W/g2.jsonl" <<'EOF' >"$W/g.txt" 2>&1 && grep -q "gradients reduced in bf16" "$W/g1.log"; then
import json, sys
def m(p):
    return [(r["lm loss of the iteration"], r["grad norm"]) for r in map(json.loads, open(p)) if "grad norm" in r]
f, a, b = (m(p) for p in sys.argv[1:])
assert a == b, "--grad-reduce-in-bf16 and --main-grads-dtype bf16 differ"
assert a != f, "the rounding changed nothing"
worst = max(abs(x[0] - y[0]) / y[0] for x, y in zip(a, f))
assert worst <= 1e-2, worst
print(f"losses within {worst:.1e} of fp32 reduction")
EOF
	ok "bf16 gradient reduction rounds the gradients (both flags alike): $(cat "$W/g.txt")"
else
	notok "bf16 gradient reduction"
	show "$W/g.txt"
fi
expect_ok "--grad-reduce-in-bf16 without --bf16 says it has no effect" \
	sh -c "$BIN/train $L --global-batch-size 2 --train-iters 1 --grad-reduce-in-bf16 2>&1 | grep -q 'no effect without --bf16'"

# ---- Megatron's checks ----
F="$L --global-batch-size 2 --train-iters 1"
expect_fail "a 16-bit state needs --use-precision-aware-optimizer" \
	"--exp-avg-dtype bf16 needs --use-precision-aware-optimizer" $BIN/train $F --exp-avg-dtype bf16
expect_fail "--main-grads-dtype bf16 needs it too" \
	"--main-grads-dtype bf16 needs --use-precision-aware-optimizer" $BIN/train $F --bf16 --main-grads-dtype bf16
expect_fail "the precision-aware optimizer needs the distributed optimizer" \
	"--use-precision-aware-optimizer is only supported with the distributed optimizer" $BIN/train $F --bf16 $PA
expect_fail "fp16 main weights need a 16-bit model" \
	"--main-params-dtype fp16 needs a 16-bit model" $BIN/train $F --use-distributed-optimizer $PA --main-params-dtype fp16
expect_fail "FP8 moments are refused" "FP8 optimizer states are not in megac" \
	$BIN/train $F --bf16 --use-distributed-optimizer $PA --exp-avg-sq-dtype fp8
expect_fail "--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32" \
	"--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set" \
	$BIN/train $F --bf16 --use-distributed-optimizer $PA --main-grads-dtype bf16 --accumulate-allreduce-grads-in-fp32
expect_fail "offload needs the precision-aware optimizer" \
	"--optimizer-cpu-offload must be used with --use-precision-aware-optimizer" \
	$BIN/train $F --bf16 --use-distributed-optimizer --optimizer-cpu-offload
expect_fail "an offload fraction outside [0, 1]" "--optimizer-offload-fraction must be between 0 and 1" \
	$BIN/train $F --bf16 --use-distributed-optimizer $PA --optimizer-cpu-offload --optimizer-offload-fraction 1.5
# (report_memory says so and gives Megatron's formula only)
expect_ok "report_memory runs the same checks" sh -c "$BIN/report_memory $L --global-batch-size 4 --train-iters 1 \
	--bf16 $PA --world-size 2 2>&1 | grep -q 'use-precision-aware-optimizer is only supported'"

# ---- optimizer offload ----
O="$D --global-batch-size 4 --train-iters 4 $PA"
expect_ok "on the CPU backend, --optimizer-cpu-offload" \
	sh -c "$BIN/train $O --optimizer-cpu-offload --metrics-file $W/o1.jsonl >$W/o1.log 2>&1"
expect_ok "... and without" sh -c "$BIN/train $O --metrics-file $W/o0.jsonl >$W/o0.log 2>&1"
if [ "$(grep -c 'nothing to offload on the CPU backend' "$W/o1.log")" = 1 ] &&
	RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/o0.jsonl" "$W/o1.jsonl" 4 >"$W/cmp.txt" 2>&1 &&
	[ "$(bpp "$W/o1.log")" = "$(bpp "$W/o0.log")" ]; then
	ok "offload is a no-op on the CPU backend, said once in the log"
else
	notok "offload on the CPU backend"
	show "$W/cmp.txt"
fi
E=${MEGAC_EMU:-}
if [ -z "$E" ] || [ ! -x "$E/bin/train" ]; then
	ok "# SKIP offload on the emulated GPU: no emulated build (make emu; MEGAC_EMU)"
	exit 0
fi
# maxalloc JSONL: the max allocated bytes of the last metrics line
maxalloc() { $PY -c "import json, sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['max allocated bytes'])" "$1"; }
# the cases: NAME|RANKS|FLAGS (with half offloaded, the ranks' shards cut
# differently: one rank, whose max allocated the metrics file has)
# (the bf16 model wholly offloaded on DP2 under make check-long: the half
# offloaded bf16 one copies its host part back to the bf16 weights, the fp32
# one offloads all of its state on DP2)
n=0
for c in "bf16, all offloaded|2|--bf16" "bf16, half offloaded|1|--bf16 --optimizer-offload-fraction 0.5" \
	"fp32 model with fp16 moments, all offloaded|2|--exp-avg-dtype fp16 --exp-avg-sq-dtype fp16"; do
	name=${c%%|*} rest=${c#*|} np=${rest%%|*} extra=${rest#*|}
	n=$((n + 1))
	[ $n = 1 ] && ! long_only && continue
	E2="$L --use-distributed-optimizer $PA --global-batch-size 4 --train-iters 4 --device cuda $extra"
	expect_ok "emulated GPU, $np rank(s), $name: without offload" \
		sh -c "$MPI -np $np $E/bin/train $E2 --metrics-file $W/e${n}a.jsonl >$W/e${n}a.log 2>&1"
	expect_ok "emulated GPU, $np rank(s), $name: with --optimizer-cpu-offload" \
		sh -c "$MPI -np $np $E/bin/train $E2 --optimizer-cpu-offload --metrics-file $W/e${n}b.jsonl >$W/e${n}b.log 2>&1"
	if RTOL=0 $PY tests/prog/py/compare_metrics.py same "$W/e${n}a.jsonl" "$W/e${n}b.jsonl" 4 >"$W/cmp.txt" 2>&1; then
		ok "offloaded, the losses are bit-identical ($name)"
	else
		notok "offload changed the losses ($name)"
		show "$W/cmp.txt"
	fi
	if [ $n = 2 ]; then # the host's share goes into checkpoints and comes back
		expect_ok "emulated GPU, $name: 2 iterations and a checkpoint" sh -c "$MPI -np $np $E/bin/train $E2 \
			--optimizer-cpu-offload --save $W/cke --save-interval 2 --exit-interval 2 >$W/cke.log 2>&1"
		expect_ok "emulated GPU, $name: resumed to 4" sh -c "$MPI -np $np $E/bin/train $E2 --optimizer-cpu-offload \
			--load $W/cke --metrics-file $W/e${n}r.jsonl >$W/e${n}r.log 2>&1"
		if RTOL=0 $PY tests/prog/py/compare_metrics.py tail "$W/e${n}b.jsonl" "$W/e${n}r.jsonl" 3 4 >"$W/cmp.txt" 2>&1; then
			ok "an offloaded run resumes bit-exactly ($name)"
		else
			notok "resume with offload ($name)"
			show "$W/cmp.txt"
		fi
	fi
	# the drop in max allocated is the optimizer state the device no longer
	# holds, which report_memory predicts from the same flags
	expect_ok "report_memory without and with offload ($name)" sh -c \
		"$BIN/report_memory $E2 --world-size $np --json >$W/p${n}a.json && $BIN/report_memory $E2 --optimizer-cpu-offload --world-size $np --json >$W/p${n}b.json"
	ma=$(maxalloc "$W/e${n}a.jsonl") mb=$(maxalloc "$W/e${n}b.jsonl")
	if $PY - "$ma" "$mb" "$W/p${n}a.json" "$W/p${n}b.json" <<'EOF' >"$W/off.txt" 2>&1; then
import json, sys
ma, mb = int(sys.argv[1]), int(sys.argv[2])
pa, pb = (json.load(open(p))["megac"]["ranks"][0] for p in sys.argv[3:5])
drop = (pa["peak_MB"] - pb["peak_MB"]) * 2**20
opt = (pa["breakdown"]["optimizer_states_MB"] - pb["breakdown"]["optimizer_states_MB"]) * 2**20
assert mb < ma, (ma, mb)
assert abs((ma - mb) - drop) < 1 and abs(drop - opt) < 1, (ma - mb, drop, opt)
print(f"max allocated {ma} -> {mb} bytes, {ma - mb} less, as predicted")
EOF
		ok "offloaded, the device holds less ($name): $(cat "$W/off.txt")"
	else
		notok "offload's memory ($name)"
		show "$W/off.txt"
	fi
done
