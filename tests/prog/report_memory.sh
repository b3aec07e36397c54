# report_memory.sh - report_memory reproduces Megatron's theoretical memory
# report: for each of the 81 configurations of tests/fixtures/megatron_mem/
# (GPT-3 175B TP8·PP8, Llama-3 8B/70B, Mixtral 8x7B with EP, an MLA+MoE+MTP
# model, SP on/off, distributed optimizer on/off, virtual pipeline, several
# micro-batch sizes, 60 random ones), the --json MB figures match what
# Megatron's own theoretical_memory_usage.py returned, and the table holds the
# lines it printed verbatim. Then the vocabulary paths and the error cases.
. tests/prog_lib.sh
W=$(new_tmp report_memory)
OUT_LOG=$W/out.log
ERR=$W/err.log
R=$BIN/report_memory

/usr/bin/python3 tests/prog/py/check_megatron_mem.py "$R" tests/fixtures/megatron_mem/megatron_mem.json

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
# train refuses the model flags only report_memory takes (MLA, MTP)
expect_fail "train refuses --multi-latent-attention" "multi-latent attention is not in megac's train yet" $BIN/train --multi-latent-attention
expect_fail "train refuses --mtp-num-layers" "multi-token prediction is not in megac's train yet" $BIN/train --mtp-num-layers 1
# report_memory takes train's flags (a whole train command line)
# shellcheck disable=SC2086
expect_ok "a train command line" $R $M --vocab-size 50257 --train-iters 10 --lr 3e-4 --data-path x \
	--save ckpt --log-interval 1 --bf16 --position-embedding-type rope

# megac's own prediction against train's measured peak ("max allocated" of every
# rank's memory line), within 5% (it is train's own allocation plan, so in fact
# equal): GPT and Llama on one rank, Llama with full recompute, TP2 x PP2 with the
# distributed optimizer on 4 ranks, and TP2 x PP2 x DP2 interleaved, bf16, with
# the distributed optimizer on 8, and a MoE model on 4
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
	if $_run "$@" >"$W/$_n.train" 2>"$W/$_n.err" &&
		$R "$@" --world-size "$_np" --json >"$W/$_n.json" 2>>"$W/$_n.err" &&
		/usr/bin/python3 - "$W/$_n.train" "$W/$_n.json" >"$W/$_n.cmp" 2>&1 <<'PYEOF'; then
import json, re, sys
peaks = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[Rank (\d+)\] \(after \d+ iterations\) memory \(MB\) .*max allocated: ([0-9.]+)", line)
    if m:
        peaks[int(m.group(1))] = max(peaks.get(int(m.group(1)), 0.0), float(m.group(2)))
pred = json.load(open(sys.argv[2]))["megac"]["ranks"]
lay = json.load(open(sys.argv[2]))["megatron_formula"]["inputs"]
per_stage = lay["tp"] * lay["cp"] * lay["dp"]
assert peaks, "no memory lines"
worst = 0.0
for rank, got in sorted(peaks.items()):
    want = pred[rank // per_stage]["peak_MB"]
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
measured "MoE with a capacity factor, PP2" 2 $T $LL $MOE --pipeline-model-parallel-size 2 --moe-expert-capacity-factor 1.5
# (a capacity factor bounds the rows each rank's experts get; dropless, the
# buffers start at the balanced share and grow with the imbalance)
measured "MoE with expert parallelism, EP2 x DP2, distributed optimizer" 4 $T $LL $MOE --expert-model-parallel-size 2 \
	--use-distributed-optimizer --moe-expert-capacity-factor 1.5
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
	# the two fastest run in train, and their measured peaks fit
	for _i in 0 1; do
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
advise "GPT, 4 ranks" 4 30 "h=32 L=4 S=32 V=50257 gbs=8 heads=4 groups=4 ffn=128" "" $T
advise "Llama, 8 ranks, 2 GPUs per node" 8 20 "h=32 L=4 S=32 V=50257 gbs=8 heads=8 groups=4 ffn=64 llama=1 swiglu=1" \
	"--gpus-per-node 2 --gpu-tflops 100 --intra-node-bandwidth 200 --inter-node-bandwidth 10 --link-latency-us 2" \
	$T $LL

# the table: the header with the counts, and train's flags for each layout
# shellcheck disable=SC2086
if $R $T --world-size 4 --advise --gpu-memory 30MiB --advise-top 3 >"$OUT_LOG" 2>"$ERR" &&
	grep -q "^report_memory --advise: 4 ranks, 30.00 MiB (0.03 GiB) per GPU; 195 of 306 layouts fit" "$OUT_LOG" &&
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
expect_fail "--advise with experts" "does not plan mixture-of-experts layouts" \
	$R $T --world-size 4 --advise --gpu-memory 80GiB --num-experts 4
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
