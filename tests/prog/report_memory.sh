# report_memory.sh - report_memory reproduces Megatron's theoretical memory
# report: for each of the 81 configurations of tests/fixtures/megatron_mem/
# (GPT-3 175B TP8·PP8, Llama-3 8B/70B, Mixtral 8x7B with EP, an MLA+MoE+MTP
# model, SP on/off, distributed optimizer on/off, virtual pipeline, several
# micro-batch sizes, 60 random ones, of which make test runs the first 20 and
# make check-long all), the --json MB figures match what
# Megatron's own theoretical_memory_usage.py returned, and the table holds the
# lines it printed verbatim. Then the vocabulary paths and the error cases;
# megac's own prediction against train's measured peaks (--device cpu on the
# CPU; --device cuda on the emulated device, with the CUDA backend's
# workspace, when the emulated build is there); --device cuda against cpu and
# against Megatron's activation formula for Llama-3 8B; --advise, dense and
# mixture of experts. Under make check-long also: the prediction against
# train for MoE with a capacity factor on PP2 and DeepSeek-V3's routing on
# EP2, the second suggestion of --advise in train, and the emulated device's
# other precisions and layouts.
. tests/prog_lib.sh
W=$(new_tmp report_memory)
OUT_LOG=$W/out.log
ERR=$W/err.log
R=$BIN/report_memory

# (the first 20 of the 60 random configurations; all 60 under make check-long)
RANDOM_CASES=20
long_only && RANDOM_CASES=
/usr/bin/python3 tests/prog/py/check_megatron_mem.py "$R" tests/fixtures/megatron_mem/megatron_mem.json $RANDOM_CASES

# Megatron's report for GPT 350M (the fixture's "gpt 350m" case, printed by
# Megatron's own code) from the vocabulary three ways: padded by hand,
# --vocab-size 50257 padded to 50304 as train pads it, and the GPT-2 tokenizer
M="--world-size 8 --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024
   --max-position-embeddings 1024 --micro-batch-size 4"
LINE="Theoretical memory footprints: weight and optimizer=6069.97 MB, activation=3852.48 MB, total=9922.46 MB"
for v in "--padded-vocab-size 50304" "--vocab-size 50257" "$GPT2"; do
	# shellcheck disable=SC2086
	if $R $M $v >"$OUT_LOG" 2>"$ERR" && grep -qxF "$LINE" "$OUT_LOG"; then
		ok "GPT 350M with $v: Megatron's line"
	else
		notok "GPT 350M with $v: Megatron's line"
		show "$OUT_LOG"
		show "$ERR"
	fi
done
# --json is one JSON object with the report under megatron_formula
# shellcheck disable=SC2086
$R $M --vocab-size 50257 --use-distributed-optimizer --json >"$OUT_LOG" 2>"$ERR"
if /usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["megatron_formula"]
assert round(m["weight_and_optimizer_MB"], 2) == 2529.16 and round(m["total_MB"], 2) == 6381.64, m
assert m["num_parameters_on_most_loaded_shard"] == 353601536 and m["bytes_per_parameter"] == 7.5, m
assert m["num_microbatches"] == 1 and m["inputs"]["dp"] == 8 and m["inputs"]["padded_vocab_size"] == 50304, m
' "$OUT_LOG"; then ok "--json: GPT 350M with the distributed optimizer"; else notok "--json: GPT 350M with the distributed optimizer"; show "$OUT_LOG"; fi

# errors: exit 128 naming the flags at fault
# shellcheck disable=SC2086
expect_fail "world not divisible by TP x PP" "--tensor-model-parallel-size 4" \
	$R $M --vocab-size 50257 --world-size 6 --tensor-model-parallel-size 4
# shellcheck disable=SC2086
expect_fail "layers not divisible by PP" "--pipeline-model-parallel-size 5" \
	$R $M --vocab-size 50257 --world-size 10 --pipeline-model-parallel-size 5
# shellcheck disable=SC2086
expect_fail "global batch not divisible" "--global-batch-size 12" \
	$R $M --vocab-size 50257 --global-batch-size 12
# shellcheck disable=SC2086
expect_fail "experts not divisible by EP" "--num-experts 6 is not divisible by --expert-model-parallel-size 4" \
	$R $M --vocab-size 50257 --num-experts 6 --expert-model-parallel-size 4
# shellcheck disable=SC2086
expect_fail "world not divisible by ETP x EP x PP" "--expert-model-parallel-size 8" \
	$R $M --vocab-size 50257 --world-size 4 --num-experts 8 --expert-model-parallel-size 8
# shellcheck disable=SC2086
expect_fail "EP without experts" "needs mixture-of-experts layers" \
	$R $M --vocab-size 50257 --expert-model-parallel-size 2
# shellcheck disable=SC2086
expect_fail "bad --moe-layer-freq" "--moe-layer-freq" \
	$R $M --vocab-size 50257 --num-experts 4 --moe-layer-freq "[1,0]"
# Megatron's report_theoretical_memory.py: the world size from WORLD_SIZE, else 1
expect_ok "no --world-size: 1" \
	$R --num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 4 --max-position-embeddings 4 \
	--micro-batch-size 1 --vocab-size 32
grep -q "world 1 = TP 1" "$OUT_LOG" && ok "no --world-size: a world of 1" || { notok "no --world-size: a world of 1"; show "$OUT_LOG"; }
WORLD_SIZE=4 $R --num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 4 --max-position-embeddings 4 \
	--micro-batch-size 1 --vocab-size 32 >"$OUT_LOG" 2>"$ERR"
grep -q "world 4 = TP 1" "$OUT_LOG" && ok "no --world-size: WORLD_SIZE" || { notok "no --world-size: WORLD_SIZE"; show "$OUT_LOG"; }
expect_fail "--advise needs --world-size" "--advise needs --world-size" \
	$R --num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 4 --max-position-embeddings 4 \
	--micro-batch-size 1 --vocab-size 32 --advise --gpu-memory 1GiB
# Megatron's formula takes full recompute without a method; megac's own prediction says what it needs
expect_ok "full recompute without a method" \
	$R --num-layers 2 --hidden-size 8 --num-attention-heads 2 --seq-length 4 --max-position-embeddings 4 \
	--micro-batch-size 1 --vocab-size 32 --recompute-granularity full
if grep -q "Total number of parameters" "$OUT_LOG" && grep -q "megac's own prediction needs --recompute-method" "$ERR"; then
	ok "full recompute without a method: Megatron's report, and what megac's needs"
else
	notok "full recompute without a method: Megatron's report, and what megac's needs"; show "$ERR"
fi
expect_fail "missing --num-layers" "missing required flag --num-layers" \
	$R --world-size 1 --hidden-size 8 --num-attention-heads 2 --seq-length 4 --max-position-embeddings 4 \
	--micro-batch-size 1 --vocab-size 32
# shellcheck disable=SC2086
expect_fail "no vocabulary" "needs the vocabulary size" $R $M
# train refuses the MTP variants megac lacks (report_memory's formula takes them)
expect_fail "train refuses --mtp-use-repeated-layer" "multi-token prediction variant is not in megac yet" \
	$BIN/train --mtp-use-repeated-layer
# report_memory takes train's flags (a whole train command line)
# shellcheck disable=SC2086
expect_ok "a train command line" $R $M --vocab-size 50257 --train-iters 10 --lr 3e-4 --data-path x \
	--save ckpt --log-interval 1 --bf16 --position-embedding-type rope

# megac's own prediction for --device cpu against train's measured peak on the
# CPU ("max allocated" of every rank's memory line), within 5% (it is train's
# own allocation plan, so in fact equal): GPT and Llama on one rank, Llama with
# full recompute, TP2 x PP2 with the distributed optimizer on 4 ranks, and TP2 x
# PP2 x DP2 interleaved, bf16, with the distributed optimizer on 8, and a MoE
# model on 4
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe"
# under AddressSanitizer OpenMPI's own allocations left at exit are not ours
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
T="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
T="$T --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --train-iters 2 --mock-data --eval-interval 100"
T="$T --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2 --make-vocab-size-divisible-by 64"
LL="--position-embedding-type rope --normalization RMSNorm --swiglu --num-attention-heads 8 --group-query-attention"
LL="$LL --num-query-groups 4 --untie-embeddings-and-output-weights --disable-bias-linear"
# measured NAME NP FLAGS...
measured() {
	_n=$1
	_np=$2
	shift 2
	if [ "$_np" = 1 ]; then _run="$BIN/train"; else _run="$MPI -np $_np $BIN/train"; fi
	# shellcheck disable=SC2086
	if $_run "$@" --device cpu >"$W/$_n.train" 2>"$W/$_n.err" &&
		$R "$@" --device cpu --world-size "$_np" --json >"$W/$_n.json" 2>>"$W/$_n.err" &&
		/usr/bin/python3 - "$W/$_n.train" "$W/$_n.json" >"$W/$_n.cmp" 2>&1 <<'PYEOF'; then
import json, re, sys
peaks = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[Rank (\d+)\] \(after \d+ iterations\) memory \(MB\) .*max allocated: ([0-9.]+)", line)
    if m:
        peaks[int(m.group(1))] = max(peaks.get(int(m.group(1)), 0.0), float(m.group(2)))
pred = json.load(open(sys.argv[2]))["megac"]["ranks"]
assert peaks, "no memory lines"
worst = 0.0
for rank, got in sorted(peaks.items()):
    # the stage of the rank: the last whose first rank is not after it
    want = [p for p in pred if p["rank"] <= rank][-1]["peak_MB"]
    rel = abs(got - want) / got
    worst = max(worst, rel)
    assert rel <= 0.05, (rank, got, want)
print("%d ranks, predicted %s MB, worst difference %.2f%%" % (
    len(peaks), "/".join("%.2f" % p["peak_MB"] for p in pred), 100 * worst))
PYEOF
		ok "$_n: megac's prediction equals train's measured peak ($(cat "$W/$_n.cmp"))"
	else
		notok "$_n: prediction vs measured peak"
		show "$W/$_n.cmp"
		show "$W/$_n.err"
	fi
}
measured "GPT, 1 rank" 1 $T
measured "Llama, 1 rank" 1 $T $LL
measured "Llama, full recompute" 1 $T $LL --recompute-granularity full --recompute-method uniform \
	--recompute-num-layers 1
measured "TP2 x PP2, distributed optimizer" 4 $T --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
	--use-distributed-optimizer
measured "Llama TP2 x PP2 x DP2 interleaved, bf16, distributed optimizer" 8 $T $LL --tensor-model-parallel-size 2 \
	--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --bf16 --use-distributed-optimizer
measured "Llama CP2 x DP2, SP off" 4 $T $LL --context-parallel-size 2
MOE="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-shared-expert-intermediate-size 16"
measured "Mixtral-style MoE, TP2 x SP x PP2" 4 $T $LL $MOE --tensor-model-parallel-size 2 --sequence-parallel \
	--pipeline-model-parallel-size 2
# (PP2 with a capacity factor under make check-long: the Mixtral-style run
# above takes MoE through two stages, EP2 x DP2 below a capacity factor)
if long_only; then
	measured "MoE with a capacity factor, PP2" 2 $T $LL $MOE --pipeline-model-parallel-size 2 \
		--moe-expert-capacity-factor 1.5
fi
# (a capacity factor bounds the rows each rank's experts get; dropless, the
# buffers start at the balanced share and grow with the imbalance)
measured "MoE with expert parallelism, EP2 x DP2, distributed optimizer" 4 $T $LL $MOE --expert-model-parallel-size 2 \
	--use-distributed-optimizer --moe-expert-capacity-factor 1.5
# DeepSeek-V3's routing flags (an expression for the layer pattern, group-limited
# sigmoid routing, the expert bias, the flex dispatcher) change no memory term
# (under make check-long: the same terms as EP2 x DP2 above)
if long_only; then
	measured "DeepSeek-V3 routing, EP2" 2 $T $LL $MOE --moe-layer-freq '([0]*1+[1]*3)' \
		--moe-router-score-function sigmoid --moe-router-num-groups 2 --moe-router-group-topk 1 \
		--moe-router-topk-scaling-factor 2.5 --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3 \
		--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-router-dtype fp32 \
		--expert-model-parallel-size 2 --moe-expert-capacity-factor 1.5
fi
# hybrid Mamba models (Megatron's formula does not model them and says so;
# megac's prediction does): M*M- on one rank, and on two data-parallel ranks
# with the distributed optimizer (under make check-long also TP2 x PP2)
set -f # the pattern's * is a layer, not a glob
HY="--hybrid-layer-pattern M*M- --num-layers 4 --mamba-state-dim 16 --mamba-head-dim 16 --mamba-num-groups 2"
HY="$HY --position-embedding-type none --normalization RMSNorm --swiglu --disable-bias-linear"
measured "hybrid M*M-, 1 rank" 1 $T $HY
measured "hybrid M*M-, DP2, distributed optimizer" 2 $T $HY --use-distributed-optimizer
if long_only; then # the mixer's heads and groups split over TP, the pattern over the stages
	measured "hybrid M*M-, TP2 x PP2 with SP" 4 $T $HY --tensor-model-parallel-size 2 --sequence-parallel \
		--pipeline-model-parallel-size 2
fi
if $R $T $HY --world-size 1 >"$OUT_LOG" 2>"$ERR" &&
	grep -qxF "Theoretical memory footprints not yet supported for hybrid Mamba-Transformer models." "$OUT_LOG" &&
	grep -q "megac's own prediction for --device cuda" "$OUT_LOG"; then
	ok "a hybrid model: Megatron's own line for its formula, then megac's prediction"
else
	notok "a hybrid model: Megatron's line and megac's prediction"
	show "$OUT_LOG"
	show "$ERR"
fi
set +f

# --device cuda on the emulated device (make emu: the CUDA backend's own
# kernels and allocator, no GPU needed): train's "max allocated" (its pool,
# the scratch buffers, the outgrown ones too, and cuBLASLt's workspace) is
# the prediction's max_allocated_MB, its peak_MB, and the backend's own
# count of device allocations (its "GPU memory: ... device allocations
# (X MiB)" line at the end, which leaves out cuBLASLt's 32 MiB) agrees. No pipeline parallelism here: train's pipeline send copies
# (lib/train/pipeline.c) are outside the pool and outside the prediction.
# emu_measured NAME NP FLAGS...
emu_measured() {
	_n=$1
	_np=$2
	shift 2
	if [ "$_np" = 1 ]; then _run="$E/bin/train"; else _run="$MPI -np $_np $E/bin/train"; fi
	# shellcheck disable=SC2086
	if $_run "$@" --device cuda >"$W/emu.train" 2>&1 &&
		$R "$@" --device cuda --world-size "$_np" --json >"$W/emu.json" 2>"$W/emu.err" &&
		/usr/bin/python3 - "$W/emu.train" "$W/emu.json" >"$W/emu.cmp" 2>&1 <<'PYEOF'; then
import json, re, sys
log = open(sys.argv[1]).read()
r = json.load(open(sys.argv[2]))["megac"]["ranks"]
assert len(r) == 1, "one pipeline stage"
r = r[0]
ws = r["breakdown"]["backend_workspace_MB"]
peaks = [float(x) for x in re.findall(r"max allocated: ([0-9.]+)", log)]
gpu = [float(x) for x in re.findall(r"GPU memory: \d+ device allocations \(([0-9.]+) MiB\)", log)]
assert peaks and gpu, "no memory lines"
for p in peaks:
    assert abs(p - r["max_allocated_MB"]) <= 0.006, ("max allocated", p, r["max_allocated_MB"])
scratch = ws - 32
for g in gpu:  # X to 0.1 MiB, the peak to 0.01
    assert abs(g + 32 - max(peaks)) <= 0.06, ("device allocations", g, max(peaks))
assert r["peak_MB"] == r["max_allocated_MB"], r
print("max allocated %.2f MB, of which backend scratch %.2f MB" % (max(peaks), scratch))
PYEOF
		ok "--device cuda, $_n: the emulated device's memory ($(cat "$W/emu.cmp"))"
	else
		notok "--device cuda, $_n: the emulated device's memory"
		show "$W/emu.cmp"
		show "$W/emu.err"
		show "$W/emu.train"
	fi
}
E=${MEGAC_EMU:-}
if [ -n "$E" ] && [ -x "$E/bin/train" ]; then
	EM="--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 128 --max-position-embeddings 128"
	EM="$EM --micro-batch-size 2 --global-batch-size 2 --lr 2e-3 --train-iters 1 --mock-data --eval-interval 100"
	EM="$EM --eval-iters 0 --log-interval 1 --tokenizer-type NullTokenizer --vocab-size 2000"
	ELL="--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear"
	ELL="$ELL --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 1"
	emu_measured "Llama bf16, tensor-core attention" 1 $EM $ELL --bf16
	emu_measured "MoE bf16 EP2, distributed optimizer" 2 $EM $ELL --bf16 --num-experts 4 --moe-router-topk 2 \
		--moe-ffn-hidden-size 96 --moe-shared-expert-intermediate-size 64 --expert-model-parallel-size 2 \
		--moe-expert-capacity-factor 1.5 --use-distributed-optimizer --global-batch-size 4
	# the Mamba-2 mixer's scratch (conv, scan and gated norm backward), fp32
	emu_measured "hybrid M*M- fp32" 1 $EM --hybrid-layer-pattern 'M*M-' --num-layers 4 --mamba-state-dim 16 \
		--mamba-head-dim 32 --mamba-num-groups 2 --position-embedding-type none --normalization RMSNorm --swiglu
	if long_only; then # the other precisions and layouts under make check-long
		emu_measured "GPT bf16 (biases, LayerNorm, head dim 16)" 1 $EM --num-attention-heads 8 --bf16
		emu_measured "Llama fp32" 1 $EM $ELL
		emu_measured "Llama fp16, selective recompute" 1 $EM $ELL --fp16 --initial-loss-scale 4096 \
			--recompute-granularity selective
		emu_measured "Llama bf16 TP2 x SP" 2 $EM $ELL --bf16 --tensor-model-parallel-size 2 --sequence-parallel \
			--num-attention-heads 4 --num-query-groups 2
		emu_measured "Llama bf16 CP2" 2 $EM $ELL --bf16 --context-parallel-size 2
	fi
else
	ok "--device cuda on the emulated device # SKIP no emulated build (MEGAC_EMU, make emu)"
fi

# Llama-3 8B as Megatron's examples train it (TP1 x DP8 on 8 GPUs, sequence
# 8192, micro-batch 1, bf16, distributed optimizer, no recompute). --device
# cuda (the default) takes the flash path: each layer keeps its rows'
# log-sum-exp [B, a, T] where the CPU keeps the probabilities [B, a, T, T],
# so the two plans differ by exactly those buffers and the flash positions,
# plus the CUDA backend's workspace; parameters, gradients and optimizer
# state are the same. Then the cuda plan's activations against Megatron's
# activation formula (its flash-attention path), within 1.25x (the layers
# keep their saved activations in 2 bytes), and the weight, gradient and
# optimizer bytes per parameter within 5% of Megatron's 7.5 (2 + 4 + 12/8).
L3="--world-size 8 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 32"
L3="$L3 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention"
L3="$L3 --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1"
L3="$L3 --global-batch-size 128 --bf16 --use-distributed-optimizer --swiglu --normalization RMSNorm"
L3="$L3 --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights"
L3="$L3 --vocab-size 128256"
# shellcheck disable=SC2086
if $R $L3 --json >"$W/l3.json" 2>"$ERR" && $R $L3 --device cuda --json >"$W/l3cuda.json" 2>>"$ERR" &&
	$R $L3 --device cpu --json >"$W/l3cpu.json" 2>>"$ERR" &&
	/usr/bin/python3 - "$W/l3.json" "$W/l3cuda.json" "$W/l3cpu.json" >"$W/l3.cmp" 2>&1 <<'PYEOF'; then
import json, os, sys
dflt, cuda, cpu = (json.load(open(f)) for f in sys.argv[1:4])
assert dflt == cuda and cuda["device"] == "cuda" and cpu["device"] == "cpu", (dflt["device"], cpu["device"])
mf = cuda["megatron_formula"]
assert mf == cpu["megatron_formula"], "Megatron's formula does not depend on --device"
g, c = cuda["megac"]["ranks"][0], cpu["megac"]["ranks"][0]
gb, cb = g["breakdown"], c["breakdown"]
for key in ("parameters_MB", "gradients_MB", "optimizer_states_MB"):
    assert gb[key] == cb[key], key
assert cb["backend_workspace_MB"] == 0 and c["max_allocated_MB"] == c["peak_MB"], c
ws = gb["backend_workspace_MB"]
assert ws > 32, ws
MB = 2.0**20
L, B, a, S = 32, 1, 32, 8192
pool_cuda = gb["activations_and_workspaces_MB"] - ws
diff = cb["activations_and_workspaces_MB"] - pool_cuda
# the probabilities (fp32 words today; 16-bit ones to come), less the fp32
# log-sum-exp rows and the int32 positions of the flash path; plus the fp32
# view the CPU widens each weight matrix into (as large as the largest, the
# [128256, 4096] embeddings), where the CUDA half table takes the 16-bit
# words as they are and keeps a staging buffer of 2^20 floats
view = (128256 * 4096 - 2**20) * 4
assert any(abs(diff - (L * B * a * S * S * w - L * B * a * S * 4 - S * 4 + view) / MB) < 1e-6 for w in (4, 2)), diff
act = gb["activations_and_workspaces_MB"]
assert act < cb["activations_and_workspaces_MB"] / 3, (act, cb["activations_and_workspaces_MB"])
ratio = act / mf["activation_MB"]
# Megatron's formula counts activations only (not PyTorch's or cuBLAS's
# workspaces): the activations alone within 1.25x, and with the CUDA
# backend's workspace too (cuBLASLt's and the scratch buffer: the 16-bit
# weights go to the GEMMs as they are and larger activations are converted
# in pieces, so the workspace stays about 1 GB)
ratio_acts = (act - ws) / mf["activation_MB"]
assert ws < 1200, "backend workspace %.0f MB" % ws
fixed = sum(gb[k] for k in ("parameters_MB", "gradients_MB", "optimizer_states_MB"))
per_param = fixed * MB / mf["num_parameters_on_most_loaded_shard"]
print("activations and workspaces: cuda %.0f MB (backend workspace %.0f), cpu %.0f MB; Megatron's formula %.0f "
      "MB: cuda/Megatron %.3fx, %.3fx without the backend workspace; weights+grads+optimizer %.2f "
      "bytes/parameter (Megatron %.2f)"
      % (act, ws, cb["activations_and_workspaces_MB"], mf["activation_MB"], ratio, ratio_acts, per_param,
         mf["bytes_per_parameter"]))
assert 1 / 1.25 <= ratio_acts <= 1.25, "activations: cuda/Megatron %.3fx is not within 1.25x" % ratio_acts
assert 1 / 1.25 <= ratio <= 1.25, "activations and workspace: cuda/Megatron %.3fx is not within 1.25x" % ratio
assert abs(per_param / mf["bytes_per_parameter"] - 1) <= 0.05, (per_param, mf["bytes_per_parameter"])
PYEOF
	ok "Llama-3 8B, TP1 x DP8, seq 8192: --device cuda against cpu and Megatron ($(cat "$W/l3.cmp"))"
else
	notok "Llama-3 8B, TP1 x DP8, seq 8192: --device cuda against cpu and Megatron"
	show "$W/l3.cmp"
	show "$ERR"
fi
# the table says which backend it counts, and the workspace
# shellcheck disable=SC2086
if $R $L3 >"$OUT_LOG" 2>"$ERR" && grep -q "^megac's own prediction for --device cuda" "$OUT_LOG" &&
	grep -q "activations include the CUDA backend's workspace" "$OUT_LOG" &&
	$R $L3 --device cpu >"$OUT_LOG" 2>"$ERR" && grep -q "^megac's own prediction for --device cpu" "$OUT_LOG"; then
	ok "--device in the table"
else
	notok "--device in the table"
	show "$OUT_LOG"
fi
# shellcheck disable=SC2086
expect_fail "--device, a bad value" "--device: invalid choice 'tpu'" $R $L3 --device tpu
# --advise: every layout it lists fits the budget by megac's prediction, the
# list is exactly the fitting part of the whole list (same run, a budget that
# fits all), ordered by the step-time model, whose terms (bytes per group as
# train --log-comm counts them, Megatron's FLOPs) check_advise.py restates;
# each listed layout's peak is what report_memory predicts for its flags; and
# the first suggestions run in train within the budget
# advise NAME NP BUDGET_MiB PYKEYS RATE_FLAGS FLAGS...
advise() {
	_n=$1
	_np=$2
	_mib=$3
	_keys=$4
	_rates=$5
	shift 5
	# shellcheck disable=SC2086
	if $R "$@" $_rates --world-size "$_np" --advise --gpu-memory 1TiB --advise-top 0 --json >"$W/all.json" \
		2>"$W/adv.err" &&
		$R "$@" $_rates --world-size "$_np" --advise --gpu-memory "${_mib}MiB" --advise-top 0 --json >"$W/adv.json" \
			2>>"$W/adv.err" &&
		/usr/bin/python3 tests/prog/py/check_advise.py "$W/adv.json" $((_mib * 1048576)) "$W/all.json" $_keys \
			>"$W/adv.cmp" 2>&1; then
		ok "$_n: --advise lists only what fits, ranked by the model ($(cat "$W/adv.cmp"))"
	else
		notok "$_n: --advise"
		show "$W/adv.cmp"
		show "$W/adv.err"
		return
	fi
	# the listed peaks are report_memory's own prediction for those flags (the
	# first three and the last)
	/usr/bin/python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))["advise"]["layouts"]
for x in l[:3] + l[-1:]:
    print("%.6f %s" % (x["peak_MB"], x["flags"]))' "$W/adv.json" >"$W/adv.some"
	_bad=0
	while read -r _peak _flags; do
		# shellcheck disable=SC2086
		_got=$($R "$@" $_flags --world-size "$_np" --json 2>>"$W/adv.err" | /usr/bin/python3 -c '
import json, sys
print("%.6f" % max(r["peak_MB"] for r in json.load(sys.stdin)["megac"]["ranks"]))')
		if [ "$_got" != "$_peak" ]; then
			echo "# $_flags: --advise says $_peak MB, report_memory $_got MB"
			_bad=1
		fi
	done <"$W/adv.some"
	if [ $_bad = 0 ]; then ok "$_n: listed peaks equal report_memory's for those flags"; else notok "$_n: listed peaks"; fi
	# the two fastest run in train, and their measured peaks fit (only the
	# fastest in make test, the second under make check-long)
	_try="0 1"
	long_only || _try=0
	for _i in $_try; do
		_flags=$(/usr/bin/python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["advise"]["layouts"][int(sys.argv[2])]["flags"])' "$W/adv.json" $_i)
		# shellcheck disable=SC2086
		if $MPI -np "$_np" $BIN/train "$@" $_flags >"$W/adv.train" 2>"$W/adv.err" &&
			_max=$(sed -n 's/.*max allocated: \([0-9.]*\).*/\1/p' "$W/adv.train" | sort -g | tail -n 1) &&
			[ -n "$_max" ] && awk -v m="$_max" -v b="$_mib" 'BEGIN { exit !(m <= b) }'; then
			ok "$_n: suggestion $((_i + 1)) runs in train, measured peak $_max MB <= $_mib MiB ($_flags)"
		else
			notok "$_n: suggestion $((_i + 1)) in train ($_flags)"
			show "$W/adv.err"
		fi
	done
}
# (--device cpu: the suggestions run in train on the CPU)
advise "GPT, 4 ranks" 4 30 "h=32 L=4 S=32 V=50257 gbs=8 heads=4 groups=4 ffn=128" "" $T --device cpu
advise "Llama, 8 ranks, 2 GPUs per node" 8 20 "h=32 L=4 S=32 V=50257 gbs=8 heads=8 groups=4 ffn=64 llama=1 swiglu=1" \
	"--gpus-per-node 2 --gpu-tflops 100 --intra-node-bandwidth 200 --inter-node-bandwidth 10 --link-latency-us 2" \
	$T $LL --device cpu

# --advise with mixture-of-experts layers: the expert-parallel sizes tried
# divide the experts, the table has an EP column and the flags the EP flag,
# each listed layout's peak (the first three, the fastest with EP 2, the last)
# is report_memory's for its flags, and the fastest with EP 2 runs in train
# within the budget, its expert groups' bytes per iteration (train
# --log-comm) as the step-time model has them: the expert data-parallel
# gradients exactly, the token exchange within 10% (the model takes balanced
# routing, train routes these tokens as it must)
# shellcheck disable=SC2086
if $R $T $LL $MOE --device cpu --world-size 4 --advise --gpu-memory 40MiB --advise-top 0 --json >"$W/moe.json" \
	2>"$ERR" && $R $T $LL $MOE --device cpu --world-size 4 --advise --gpu-memory 40MiB --advise-top 5 >"$OUT_LOG" \
	2>>"$ERR" && /usr/bin/python3 - "$W/moe.json" "$OUT_LOG" >"$W/moe.some" 2>"$W/moe.cmp" <<'PYEOF'; then
import json, sys
adv = json.load(open(sys.argv[1]))["advise"]
lays = adv["layouts"]
assert adv["device"] == "cpu" and lays, adv
assert all(4 % l["ep"] == 0 and "--expert-model-parallel-size %d" % l["ep"] in l["flags"] for l in lays), lays
assert {l["ep"] for l in lays} >= {1, 2}, {l["ep"] for l in lays}
assert all(l["peak_MB"] <= 40 for l in lays)
table = open(sys.argv[2]).read().splitlines()
head = [x for x in table if x.lstrip().startswith("#")]
assert head and " EP " in head[0], head
ep2 = [l for l in lays if l["ep"] == 2][0]
for l in lays[:3] + [ep2] + lays[-1:]:
    print("%.6f %s" % (l["peak_MB"], l["flags"]))
json.dump(ep2, open(sys.argv[1] + ".ep2", "w"))
PYEOF
	_bad=0
	while read -r _peak _flags; do
		# shellcheck disable=SC2086
		_got=$($R $T $LL $MOE $_flags --device cpu --world-size 4 --json 2>>"$ERR" | /usr/bin/python3 -c '
import json, sys
print("%.6f" % max(r["peak_MB"] for r in json.load(sys.stdin)["megac"]["ranks"]))')
		if [ "$_got" != "$_peak" ]; then
			echo "# $_flags: --advise says $_peak MB, report_memory $_got MB"
			_bad=1
		fi
	done <"$W/moe.some"
	if [ $_bad = 0 ]; then ok "--advise, MoE: EP sizes that divide the experts, peaks equal report_memory's"; else
		notok "--advise, MoE: listed peaks"; fi
	_flags=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["flags"])' "$W/moe.json.ep2")
	# shellcheck disable=SC2086
	if $MPI -np 4 $BIN/train $T $LL $MOE $_flags --device cpu --train-iters 4 --log-comm >"$W/moe.train" \
		2>"$W/moe.err" && /usr/bin/python3 - "$W/moe.train" "$W/moe.json.ep2" >"$W/moe.cmp" 2>&1 <<'PYEOF'; then
import json, re, sys
log = open(sys.argv[1]).read()
lay = json.load(open(sys.argv[2]))
peak = max(float(x) for x in re.findall(r"max allocated: ([0-9.]+)", log))
assert peak <= 40, peak
lines = [l for l in log.splitlines() if l.startswith("[Rank 0]") and "communication per iteration" in l]
assert len(lines) >= 3, "only %d --log-comm lines" % len(lines)
for l in lines[1:3]:
    got = {k: int(v) for k, v in re.findall(r"\| ([a-z -]+): (\d+)", l)}
    assert got["expert-data-parallel"] == lay["comm_bytes"].get("expert-data-parallel", 0), (got, lay["comm_bytes"])
    want = lay["comm_bytes"]["expert-model-parallel"]
    assert abs(got["expert-model-parallel"] - want) <= 0.1 * want, (got, lay["comm_bytes"])
print("measured peak %.2f MB, expert-model-parallel %d bytes (model %d)" % (
    peak, got["expert-model-parallel"], lay["comm_bytes"]["expert-model-parallel"]))
PYEOF
		ok "--advise, MoE: the fastest EP 2 layout runs in train ($(cat "$W/moe.cmp"); $_flags)"
	else
		notok "--advise, MoE: the fastest EP 2 layout in train ($_flags)"
		show "$W/moe.cmp"
		show "$W/moe.err"
	fi
else
	notok "--advise, MoE"
	show "$W/moe.cmp"
	show "$ERR"
fi
# --advise plans for --device cuda by default: every listed peak is
# report_memory's cuda prediction for its flags (the first)
# shellcheck disable=SC2086
if $R $T --world-size 4 --advise --gpu-memory 80MiB --advise-top 1 --json >"$W/cuda.json" 2>"$ERR" &&
	_line=$(/usr/bin/python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["advise"]
assert a["device"] == "cuda", a["device"]
print("%.6f %s" % (a["layouts"][0]["peak_MB"], a["layouts"][0]["flags"]))' "$W/cuda.json") &&
	_got=$($R $T ${_line#* } --world-size 4 --json 2>>"$ERR" | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["device"] == "cuda"
print("%.6f" % max(r["peak_MB"] for r in d["megac"]["ranks"]))') && [ "$_got" = "${_line%% *}" ]; then
	ok "--advise plans for --device cuda by default (first: ${_line%% *} MB)"
else
	notok "--advise plans for --device cuda by default"
	show "$ERR"
fi

# the table: the header with the counts, and train's flags for each layout
# shellcheck disable=SC2086
if $R $T --device cpu --world-size 4 --advise --gpu-memory 30MiB --advise-top 3 >"$OUT_LOG" 2>"$ERR" &&
	grep -q "^report_memory --advise: 4 ranks, 30.00 MiB (0.03 GiB) per GPU; 204 of 306 layouts fit" "$OUT_LOG" &&
	[ "$(grep -c -- '--tensor-model-parallel-size' "$OUT_LOG")" = 3 ]; then
	ok "--advise table"
else
	notok "--advise table"
	show "$OUT_LOG" 20
	show "$ERR"
fi
# shellcheck disable=SC2086
expect_fail "--advise without --gpu-memory" "--advise needs --gpu-memory" $R $T --world-size 4 --advise
# shellcheck disable=SC2086
expect_fail "--advise, a bad size" "--gpu-memory '80XB'" $R $T --world-size 4 --advise --gpu-memory 80XB
# shellcheck disable=SC2086
expect_fail "--advise, no global batch" "--advise needs --global-batch-size" \
	$R $T --global-batch-size -1 --world-size 4 --advise --gpu-memory 80GiB
# shellcheck disable=SC2086
expect_fail "--advise with multi-latent attention" "does not plan multi-latent attention" \
	$R $T --world-size 4 --advise --gpu-memory 80GiB --multi-latent-attention
# shellcheck disable=SC2086
expect_fail "--advise, nothing fits" "no layout of 4 ranks fits in 5.00 MiB per GPU: the smallest predicted peak is" \
	$R $T --world-size 4 --advise --gpu-memory 5MiB
# shellcheck disable=SC2086
expect_fail "--advise, a flag train refuses whatever the layout" "--fp16 and --bf16 are mutually exclusive" \
	$R $T --world-size 4 --advise --gpu-memory 80GiB --fp16 --bf16
# shellcheck disable=SC2086
expect_fail "--advise, a world too large" "--world-size: 4294967296 is out of range" \
	$R $T --world-size 4294967296 --advise --gpu-memory 80GiB
# shellcheck disable=SC2086
expect_fail "--advise, bad bandwidth" "--inter-node-bandwidth 0 must be a positive number" \
	$R $T --world-size 4 --advise --gpu-memory 80GiB --inter-node-bandwidth 0
rm -rf "$W"
