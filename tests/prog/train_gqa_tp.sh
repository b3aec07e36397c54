# train_gqa_tp.sh - fewer query groups than tensor-parallel ranks (2 key/value
# groups at TP4): linear_qkv splits by rows as at any TP, each rank gathers
# the fused output, keeps its query heads and its group's key and value, and
# the key/value gradients of the ranks that share a group are summed (the
# reduce-scatter of the gather's backward), as Megatron does. A Llama-style
# model and a Qwen-style one (qkv bias, q/k norms) trained 6 iterations on
# TP4 (and TP4 with SP) give the one-rank run's lm loss, grad norm and lr
# (rtol 1e-4), and the Llama one the PyTorch transcription's
# (tests/prog/py/torch_ref.py); a checkpoint saved at TP4 resumes at TP1
# and TP2 with the straight run's losses; ckpt_convert to TP4 and back
# gives the same tensors; --log-comm counts the gather and the scatter as
# analysed; report_memory counts linear_qkv's rows per rank;
# layouts Megatron refuses are refused.
. tests/prog_lib.sh
train_test_begin train_gqa_tp
PY=$(sh tests/gpu/torch_python.sh torch h5py numpy) || PY=python3
export RTOL=1e-4

# the vocabulary is padded to 50304 at TP1, 2 and 4 (divisible-by x TP = 128)
COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 3 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 $GPT2 --distributed-timeout-minutes 1"
LLAMA="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention"
LLAMA="$LLAMA --num-query-groups 2 --position-embedding-type rope --rotary-base 10000"
LLAMA="$LLAMA --normalization RMSNorm --swiglu --ffn-hidden-size 96 --disable-bias-linear"
LLAMA="$LLAMA --untie-embeddings-and-output-weights"
QWEN="$LLAMA --add-qkv-bias --qk-layernorm"
v128() { echo "--make-vocab-size-divisible-by $((128 / $1))"; }

for model in llama qwen; do
	case $model in
	llama) ARGS="$LLAMA $COMMON" ;;
	qwen) ARGS="$QWEN $COMMON" ;;
	esac
	D=$W/$model
	setup "$model: --train-iters 0 --save writes the initial model" \
		$BIN/train $ARGS $(v128 1) --train-iters 0 --save "$D/init" --data-cache-path "$D/cache"
	expect_ok "$model: TP1 6 iterations" $BIN/train $ARGS $(v128 1) --train-iters 6 --data-cache-path "$D/cache" \
		--metrics-file "$D/tp1.jsonl"
	if [ $model = llama ]; then
		setup "$model: the PyTorch reference from the same model.h5 and index caches" \
			sh -c "$PY tests/prog/py/torch_ref.py $ARGS $(v128 1) --train-iters 6 --data-cache-path $D/cache \
			--ref-model $D/init/iter_0000000/model.h5 >$D/ref.jsonl"
		compare_ref "$model: TP1 matches the PyTorch reference" "$D/tp1.jsonl" "$D/ref.jsonl" 6
	fi
	for sp in "" "--sequence-parallel"; do
		expect_ok "$model: TP4 (2 query groups) $sp 6 iterations" sh -c "$MPI -np 4 $BIN/train $ARGS $(v128 4) \
			--tensor-model-parallel-size 4 $sp --train-iters 6 --data-cache-path $D/cache \
			--metrics-file $D/tp4$sp.jsonl >$D/tp4.log 2>&1"
		compare_same "$model: TP4 $sp equals one rank" "$D/tp1.jsonl" "$D/tp4$sp.jsonl" 6
		[ $model = llama ] && compare_ref "$model: TP4 $sp matches the PyTorch reference" "$D/tp4$sp.jsonl" \
			"$D/ref.jsonl" 6
	done
done

# --log-comm: the fused QKV output's all-gather and its gradient's
# reduce-scatter are in the TP group's bytes as docs/parallel.md's table has
# them (tests/prog/py/comm_volume.py), with and without SP
for sp in 0 1; do
	_f=""
	[ $sp = 1 ] && _f=--sequence-parallel
	if $MPI -np 4 $BIN/train $LLAMA $COMMON $(v128 4) --tensor-model-parallel-size 4 $_f --train-iters 4 \
		--eval-interval 100 --log-comm --data-cache-path $W/llama/cache >"$W/comm$sp.log" 2>&1 &&
		$PY tests/prog/py/comm_volume.py "$W/comm$sp.log" h=64 L=2 S=32 V=50304 mbs=2 gbs=4 tp=4 sp=$sp llama=1 \
			heads=4 groups=2 ffn=96 >"$W/vol.log" 2>&1; then
		ok "llama: TP4 $_f --log-comm bytes as analysed ($(cat "$W/vol.log"))"
	else
		notok "llama: TP4 $_f --log-comm bytes"
		show "$W/vol.log"
		tail -5 "$W/comm$sp.log"
	fi
done

# saved at TP4 (iteration 3), resumed at TP1 and TP2: iterations 4..6 of the straight run
D=$W/qwen
ARGS="$QWEN $COMMON --data-cache-path $D/cache"
expect_ok "qwen: TP4 3 iterations, saved" sh -c "$MPI -np 4 $BIN/train $ARGS $(v128 4) --tensor-model-parallel-size 4 \
	--train-iters 6 --exit-interval 3 --save $D/ck4 --save-interval 3 >$D/save4.log 2>&1"
for tp in 1 2; do
	expect_ok "qwen: resume the TP4 checkpoint at TP$tp" sh -c "$MPI -np $tp $BIN/train $ARGS $(v128 $tp) \
		--tensor-model-parallel-size $tp --train-iters 6 --load $D/ck4 --metrics-file $D/res$tp.jsonl \
		>$D/res$tp.log 2>&1"
	if $PY tests/prog/py/compare_metrics.py tail "$D/tp1.jsonl" "$D/res$tp.jsonl" 4 6 >"$W/cmp.log" 2>&1; then
		ok "qwen: TP4 checkpoint resumed at TP$tp gives the straight run's iterations 4-6 ($(cat "$W/cmp.log"))"
	else
		notok "qwen: TP4 checkpoint resumed at TP$tp"
		show "$W/cmp.log"
	fi
done

# ckpt_convert: TP4 (two ranks per key/value group) and back; the tensors are layout-free
C=$BIN/ckpt_convert
expect_ok "ckpt_convert: to TP4" $C --load $D/ck4 --save $D/cv4 --target-tensor-parallel-size 4 $(v128 4)
expect_ok "ckpt_convert: back to TP1" $C --load $D/cv4 --save $D/cv1 --target-tensor-parallel-size 1 $(v128 1)
if $PY tests/prog/py/ckpt_compare.py exact $D/ck4/iter_0000003 $D/cv1/iter_0000003 >"$W/cmp.log" 2>&1; then
	ok "ckpt_convert: TP4 and back gives the same tensors: $(cat "$W/cmp.log")"
else
	notok "ckpt_convert: TP4 and back gives the same tensors"
	show "$W/cmp.log"
fi

# report_memory: linear_qkv's (4 + 2 x 2) x 16 rows split over 4 ranks, not replicated
M="$BIN/report_memory $QWEN $COMMON --train-iters 6 --json"
expect_ok "report_memory: TP4 with 2 query groups" sh -c "$M $(v128 4) --tensor-model-parallel-size 4 --world-size 4 >$W/mem4.json"
expect_ok "report_memory: TP1" sh -c "$M $(v128 1) >$W/mem1.json"
if $PY - "$W/mem1.json" "$W/mem4.json" >"$W/mem.log" 2>&1 <<'EOF'; then
import json, sys
one, four = (round(json.load(open(p))["megac"]["ranks"][0]["breakdown"]["parameters_MB"] * 2**20 / 4)
             for p in sys.argv[1:3])
h, a, g, k, ff, V, L = 64, 4, 2, 16, 96, 50304, 2
# per layer: qkv weight and bias, proj, fc1, fc2 split; norms and q/k norms whole
split = (a + 2 * g) * k * (h + 1) + h * a * k + 2 * ff * h + h * ff
whole = 2 * h + 2 * k
full = 2 * V * h + h + L * (split + whole)
four_want = 2 * V * h // 4 + h + L * (split // 4 + whole)
assert one == full, (one, full)
assert four == four_want, (four, four_want)
print(f"{one} parameters at TP1, {four} per rank at TP4")
EOF
	ok "report_memory: $(cat "$W/mem.log")"
else
	notok "report_memory counts the per-rank parameters"
	show "$W/mem.log"
fi

# what Megatron refuses: groups neither a multiple nor a divisor of TP, and
# linear_qkv's rows not divisible by TP
expect_fail "3 query groups at TP2" "3 query groups are neither a multiple nor a divisor of --tensor-model-parallel-size 2" \
	$BIN/report_memory $COMMON --num-layers 2 --hidden-size 96 --num-attention-heads 6 --group-query-attention \
	--num-query-groups 3 --tensor-model-parallel-size 2 --world-size 2
expect_fail "linear_qkv's rows not divisible by TP" "linear_qkv's 18 output rows" \
	$BIN/report_memory $COMMON --num-layers 2 --hidden-size 12 --num-attention-heads 4 --group-query-attention \
	--num-query-groups 1 --tensor-model-parallel-size 4 --world-size 4 --make-vocab-size-divisible-by 32

# serving: the TP4 checkpoint served on TP4 (each rank's key/value cache holds
# its one group) gives the one-rank server's greedy answers and log-probs
P1=$(free_port)
P4=$(free_port)
$BIN/text_gen_server --load $D/ck4 $GPT2 --inference-max-seq-length 32 --port "$P1" >"$W/srv1.log" 2>&1 &
S1=$!
$MPI -np 4 $BIN/text_gen_server --load $D/ck4 $GPT2 --inference-max-seq-length 32 --port "$P4" \
	--tensor-model-parallel-size 4 >"$W/srv4.log" 2>&1 &
S4=$!
if /usr/bin/python3 - "$P1" "$P4" >"$W/srv.out" 2>&1 <<'EOF2'; then
import json, sys, urllib.request
sys.path.insert(0, "tests/prog/py")
from tap import wait_health
def call(port, body):
    base = "http://127.0.0.1:%s" % port
    wait_health(base)
    req = urllib.request.Request(base + "/api", data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())
body = {"prompts": ["In the beginning God", "And the earth was without form"],
        "tokens_to_generate": 8, "top_k": 1, "logprobs": True}
a, b = call(sys.argv[1], body), call(sys.argv[2], body)
assert a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
worst = max(abs(x - y) for p, q in zip(a["logprobs"], b["logprobs"]) for x, y in zip(p, q))
assert worst < 1e-5, worst
print("2 prompts, 8 tokens: the same, log-probs within %.2g" % worst)
EOF2
	ok "serving at TP4 gives the one-rank answers ($(cat "$W/srv.out"))"
else
	notok "serving at TP4 gives the one-rank answers"
	show "$W/srv.out"
	show "$W/srv4.log"
fi
kill -TERM $S1 $S4 2>/dev/null
wait $S1 $S4 2>/dev/null || true # the servers' status after the signal is not a check
