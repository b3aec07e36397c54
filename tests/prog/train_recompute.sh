# train_recompute.sh - selective recompute module by module
# (--recompute-granularity selective --recompute-modules ...): a small dense
# GPT and a small model of two dense and two MoE layers (top-2 of 4 experts,
# a shared expert, aux and z losses), 3 iterations with dropout on, give
# with each module and with combinations exactly the losses, MoE losses and
# grad norms of the run without recompute, holding fewer bytes ("max
# allocated"); report_memory counts the saving; on two ranks (TP2 with SP in
# bf16, EP2) the same against the layout's own run; and Megatron's rules
# for the list.
. tests/prog_lib.sh
train_env_begin train_recompute

COMMON="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
COMMON="$COMMON --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 3 --mock-data"
COMMON="$COMMON --tokenizer-type NullTokenizer --vocab-size 256 --eval-iters 0 --eval-interval 100"
COMMON="$COMMON --log-interval 1 --data-cache-path $W/cache"
DENSE="$COMMON"
MOE="$COMMON --disable-bias-linear --swiglu --normalization RMSNorm --position-embedding-type rope"
MOE="$MOE --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32"
MOE="$MOE --moe-layer-freq [0,1,0,1] --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --moe-grouped-gemm"

# run NAME LAUNCH... : train's metrics into $W/NAME.jsonl
run() {
	_n=$1
	shift
	rm -f "$W/$_n.jsonl"
	"$@" --metrics-file "$W/$_n.jsonl" >"$W/$_n.log" 2>&1 || { echo "# $_n: exit $?" >>"$W/$_n.log"; }
}

# same_less NAME BASE VARIANT: every field of every iteration but the time
# equal, and a lower max allocated
same_less() {
	if $PY - "$W/$2.jsonl" "$W/$3.jsonl" >"$W/cmp.log" 2>&1 <<'EOF'; then
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 3 and len(b) == 3, "%d and %d iterations" % (len(a), len(b))
for x, y in zip(a, b):
    for k in x:
        if k in ("elapsed time per iteration (ms)", "max allocated bytes"):
            continue
        assert x[k] == y[k], "iteration %d, %s: %r without recompute, %r with" % (x["iteration"], k, x[k], y[k])
m0, m1 = a[-1]["max allocated bytes"], b[-1]["max allocated bytes"]
assert m1 < m0, "max allocated %d bytes, without recompute %d" % (m1, m0)
print("max allocated %d bytes less (%d)" % (m0 - m1, m1))
EOF
		ok "$1: the same losses and grad norms, $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
		show "$W/$3.log" 4
	fi
}

SEL="--recompute-granularity selective --recompute-modules"
run dense0 $BIN/train $DENSE
for m in core_attn layernorm mlp "core_attn layernorm mlp"; do
	n=dense_$(echo "$m" | tr ' ' _)
	run "$n" $BIN/train $DENSE $SEL $m
	same_less "GPT, --recompute-modules $m" dense0 "$n"
done
run dense_default $BIN/train $DENSE --recompute-activations
if cmp -s "$W/dense_core_attn.jsonl" "$W/dense_default.jsonl" ||
	[ "$(grep -o '"max allocated bytes": [0-9]*' "$W/dense_core_attn.jsonl")" = \
	  "$(grep -o '"max allocated bytes": [0-9]*' "$W/dense_default.jsonl")" ]; then
	ok "selective recompute without a list recomputes core_attn (Megatron's default)"
else
	notok "selective recompute without a list"
	show "$W/dense_default.log" 4
fi

run moe0 $BIN/train $MOE
for m in moe moe_act shared_experts layernorm mlp core_attn "moe layernorm mlp" \
	"moe_act shared_experts layernorm mlp core_attn"; do
	n=moe_$(echo "$m" | tr ' ' _)
	run "$n" $BIN/train $MOE $SEL $m
	same_less "MoE, --recompute-modules $m" moe0 "$n"
done

# report_memory runs train's set-up on a counting table: the same saving
rm_peak() {
	$BIN/report_memory "$@" --json 2>>"$ERR" | $PY -c 'import json, sys; print(json.load(sys.stdin)["megac"]["ranks"][0]["peak_MB"])'
}
p0=$(rm_peak $MOE)
p1=$(rm_peak $MOE $SEL moe layernorm mlp moe_act shared_experts)
if [ -n "$p0" ] && [ -n "$p1" ] && $PY -c "import sys; sys.exit(not float('$p1') < float('$p0'))"; then
	ok "report_memory counts the saving: $p1 MB for rank 0 with recompute, $p0 MB without"
else
	notok "report_memory with --recompute-modules: '$p1' MB vs '$p0' MB"
	show "$ERR"
fi

# two ranks: tensor parallelism with SP in bf16, and expert parallelism
for lay in tp "ep"; do
	case $lay in
	tp) L="--tensor-model-parallel-size 2 --sequence-parallel --bf16" ;;
	*) L="--expert-model-parallel-size 2" ;;
	esac
	run "${lay}0" $MPI -np 2 $BIN/train $MOE $L
	run "${lay}1" $MPI -np 2 $BIN/train $MOE $L $SEL moe_act shared_experts layernorm mlp core_attn
	same_less "MoE on 2 ranks ($L), --recompute-modules moe_act shared_experts layernorm mlp core_attn" "${lay}0" "${lay}1"
done
run ep2 $MPI -np 2 $BIN/train $MOE --expert-model-parallel-size 2 $SEL moe layernorm
same_less "MoE on 2 ranks (--expert-model-parallel-size 2), --recompute-modules moe layernorm" ep0 ep2

# Megatron's rules
expect_fail "mla_up_proj needs multi-latent attention (Megatron)" "--recompute-modules mla_up_proj needs --multi-latent-attention" \
	$BIN/train $DENSE $SEL mlp mla_up_proj
expect_fail "an unknown module is an invalid choice" "--recompute-modules: invalid choice 'attn'" \
	$BIN/train $DENSE $SEL attn
expect_fail "moe_act needs --moe-grouped-gemm (Megatron)" "--recompute-modules moe_act needs --moe-grouped-gemm" \
	$BIN/train $(echo "$MOE" | sed 's/ --moe-grouped-gemm//') $SEL moe_act
expect_fail "shared_experts is refused with --moe-shared-expert-overlap (Megatron)" \
	"--recompute-modules shared_experts does not work with --moe-shared-expert-overlap" \
	$BIN/train $MOE --moe-shared-expert-overlap $SEL shared_experts
expect_fail "selective recompute takes no --recompute-method (Megatron)" \
	"--recompute-method is for --recompute-granularity full" \
	$BIN/train $DENSE $SEL mlp --recompute-method uniform
