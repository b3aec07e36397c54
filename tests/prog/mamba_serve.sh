# mamba_serve.sh - serving hybrid Mamba models (docs/mamba.md, "Serving"):
# each Mamba layer's cache is its recurrent state per request slot. A tiny
# M*M- model (Megatron's hybrid example's kind: no position embedding,
# RMSNorm, SwiGLU, GQA) trained 3 iterations: lib/infer's greedy
# continuation and the log-probs of prompt and generated tokens equal an
# independent PyTorch reference that recomputes the whole sequence for every
# token (tests/prog/py/mamba_ref.py generate, float64; same tokens,
# log-probs within 1e-4, measured 5.5e-7); prompts prefilled in chunks of 3 tokens over
# several steps, one slot at a time, equal them all in one step; a real
# text_gen_server over loopback, with prompts of different lengths started
# in one step and others joining the batch, gives the reference's answers,
# and so does one that prefills in chunks (--inference-dynamic-batching-max-tokens)
# and one on the emulated CUDA device, and one on two tensor-parallel ranks
# gives the one-rank server's; a pure Mamba model (pattern MM,
# tied embeddings, as a Hugging Face Mamba2ForCausalLM; initialised, not
# trained) against the reference too.
. tests/prog_lib.sh
train_env_begin mamba_serve
set -f # the patterns' * are layers, not globs
GEN=$MEGAC_BUILD/tools/megac_generate
N=10 # tokens to generate

HYB="--hybrid-layer-pattern M*M- --hidden-size 64 --num-attention-heads 4 --group-query-attention"
HYB="$HYB --num-query-groups 2 --mamba-state-dim 16 --mamba-head-dim 16 --mamba-num-groups 2"
HYB="$HYB --normalization RMSNorm --position-embedding-type none --disable-bias-linear --swiglu"
HYB="$HYB --ffn-hidden-size 96 --untie-embeddings-and-output-weights --seq-length 32 --max-position-embeddings 32"
# a pure Mamba model: tied embeddings, one group
PURE="--hybrid-layer-pattern MM --hidden-size 32 --num-attention-heads 2 --mamba-state-dim 8"
PURE="$PURE --mamba-head-dim 16 --mamba-num-groups 1 --normalization RMSNorm --position-embedding-type none"
PURE="$PURE --disable-bias-linear --seq-length 32 --max-position-embeddings 32"
TRAIN="--micro-batch-size 2 --global-batch-size 4 --hidden-dropout 0 --attention-dropout 0 --lr 2e-3"
TRAIN="$TRAIN --mock-data --eval-interval 100 --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
setup "train the M*M- model 3 iterations" \
	sh -c "$BIN/train $HYB $TRAIN --train-iters 3 --save $W/ck --save-interval 3 >$W/train.log 2>&1"
setup "initialise the MM model (--train-iters 0)" \
	sh -c "$BIN/train $PURE $TRAIN --train-iters 0 --save $W/pk >$W/ptrain.log 2>&1"

# same NAME A.json B.json TOL: the same generated tokens, log-probs within TOL
same() {
	if $PY -c '
import json, sys
a, b, tol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
assert len(a) == len(b), (len(a), len(b))
worst = 0.0
for i, (x, y) in enumerate(zip(a, b)):
    assert x["tokens"] == y["tokens"], "prompt %d: %s vs %s" % (i, x["tokens"], y["tokens"])
    assert len(x["logprobs"]) == len(y["logprobs"]), (i, len(x["logprobs"]), len(y["logprobs"]))
    worst = max([worst] + [abs(p - q) for p, q in zip(x["logprobs"], y["logprobs"])])
assert worst <= tol, "log-probs differ by %.3g" % worst
print("%d prompts, %d tokens each, log-probs within %.2g" % (len(a), len(a[0]["tokens"]), worst))' "$2" "$3" "$4" \
		>"$W/same.log" 2>&1; then
		ok "$1 ($(cat "$W/same.log"))"
	else
		notok "$1"
		show "$W/same.log"
	fi
}

# the servers: the CPU's (8 slots, every prompt in one step), one that takes
# at most 8 tokens a step (the long prompts prefill over several steps), and
# the emulated device's; they load side by side. --inference-max-seq-length
# past the model's 32 positions: a model without position embedding has no
# limit of its own
SRV="--load $W/ck $GPT2 --inference-max-seq-length 64 --inference-max-requests 8"
P1=$(free_port)
# shellcheck disable=SC2086
$BIN/text_gen_server $SRV --port "$P1" >"$W/s1.log" 2>&1 &
S1=$!
P2=$(free_port)
# shellcheck disable=SC2086
$BIN/text_gen_server $SRV --inference-dynamic-batching-max-tokens 8 --port "$P2" >"$W/s2.log" 2>&1 &
S2=$!
EMU=""
if [ -n "${MEGAC_EMU:-}" ] && [ -x "$MEGAC_EMU/bin/text_gen_server" ]; then
	EMU=1
	P3=$(free_port)
	# shellcheck disable=SC2086
	$MEGAC_EMU/bin/text_gen_server $SRV --device cuda --port "$P3" >"$W/s3.log" 2>&1 &
	S3=$!
fi
P4=$(free_port)
# shellcheck disable=SC2086
$MPI -np 2 $BIN/text_gen_server $SRV --tensor-model-parallel-size 2 --port "$P4" >"$W/s4.log" 2>&1 &
S4=$!
set -- "In the beginning" "And God said, Let there be light: and there was light. And God saw the light, that it was good" \
	"Hello" "And the earth was without form, and void; and darkness was upon the face of the deep." "The"
expect_ok "the server answers prompts of 1 to 24 tokens at once (3 in one request, 2 alone)" \
	$PY tests/prog/py/serve_batch.py "$P1" $N "$W/s1.json" "$@"
expect_ok "the server that prefills in chunks of at most 8 tokens a step answers them" \
	$PY tests/prog/py/serve_batch.py "$P2" $N "$W/s2.json" "$@"
if [ -n "$EMU" ]; then
	expect_ok "the server on the emulated CUDA device answers them" \
		$PY tests/prog/py/serve_batch.py "$P3" $N "$W/s3.json" "$@"
	expect_ok "the emulated device's server computes with the CUDA op table" grep -q "op table cuda" "$W/s3.log"
fi
expect_ok "the server at TP2 (each rank the mixer's heads and groups of its share) answers them" \
	$PY tests/prog/py/serve_batch.py "$P4" $N "$W/s4.json" "$@"
for s in $S1 $S2 ${S3:-} $S4; do
	kill -TERM "$s"
	wait "$s"
done
setup "the served prompts' ids" $PY -c '
import json, sys
json.dump([r["prompt"] for r in json.load(open(sys.argv[1]))], open(sys.argv[2], "w"))' "$W/s1.json" "$W/p.json"

# lib/infer directly: all prompts in one step, then chunks of 3 tokens (one
# slot: each request alone, its prompt over several steps)
expect_ok "lib/infer generates (5 requests batched)" $GEN $W/ck $W/p.json $N $W/eng.json
expect_ok "lib/infer generates, prompts prefilled 3 tokens a step, one slot" \
	$GEN $W/ck $W/p.json $N $W/engc.json 1 1 1 1 3
echo '[[464, 3290, 318], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], [50256], [11, 12]]' >$W/pp.json
expect_ok "lib/infer generates from the pure Mamba model" $GEN $W/pk $W/pp.json $N $W/peng.json

# the reference: every token from a full forward pass over the sequence so far
REF="$PY tests/prog/py/mamba_ref.py generate --ref-dtype float64 --max-new $N --vocab 50257"
# shellcheck disable=SC2086
setup "the PyTorch reference continues both models' prompts" \
	$REF $HYB --ref-model $W/ck/iter_0000003/model.h5 --prompts $W/p.json --gen-out $W/ref.json \
	--and --ref-dtype float64 --max-new $N --vocab 50257 $PURE --ref-model $W/pk/iter_0000000/model.h5 \
	--prompts $W/pp.json --gen-out $W/pref.json

same "lib/infer: the reference's tokens and log-probs" $W/eng.json $W/ref.json 1e-4
same "lib/infer, prefilled in chunks: the one-step answers" $W/engc.json $W/eng.json 1e-5
same "text_gen_server: the reference's tokens and log-probs" $W/s1.json $W/ref.json 1e-4
same "text_gen_server prefilling in chunks: the one-step server's answers" $W/s2.json $W/s1.json 1e-5
[ -n "$EMU" ] && same "text_gen_server on the emulated CUDA device: the CPU server's answers" \
	$W/s3.json $W/s1.json 1e-5
same "text_gen_server at TP2: the one-rank server's answers" $W/s4.json $W/s1.json 1e-5
same "the pure Mamba model: the reference's tokens and log-probs" $W/peng.json $W/pref.json 1e-4

# infer_step directly (2 slots): a recurrent state goes on or starts again
# at position 0; going back, skipping ahead and two sequences in one slot
# are refused and change nothing: slot 1, continued after the refused step,
# and slot 0, started again, then hold the same sequence and give the same
# logits ([argmax, max, log-sum-exp] of the last row)
cat >"$W/steps.json" <<'EOF'
[[[0, 0, [464, 3290, 318, 11]]], [[0, 4, [12]], [1, 0, [5, 6, 7]]], [[0, 2, [13]]], [[0, 6, [13]]],
 [[1, 3, [8]], [1, 4, [9]]], [[0, 0, [5, 6, 7, 8]]], [[1, 3, [8]]]]
EOF
setup "the engine runs the steps" $GEN $W/ck --steps "$W/steps.json" "$W/steps_out.json"
cp "$ERR" "$W/steps.err"
for want in "position 2 of slot 0, whose Mamba layers' state stands after 5 positions" \
	"position 6 of slot 0, whose Mamba layers' state stands after 5 positions" \
	"slot 1 has another sequence in the same step"; do
	expect_ok "refused: $want" grep -qF "$want" "$W/steps.err"
done
if $PY - "$W/steps_out.json" >"$W/steps.log" 2>&1 <<'EOF'; then
import json, sys
r = json.load(open(sys.argv[1]))
assert [x is None for x in r] == [False, False, True, True, True, False, False], r
a, b = r[5][0], r[6][0]
assert a[0] == b[0] and abs(a[1] - b[1]) < 1e-5 and abs(a[2] - b[2]) < 1e-5, (a, b)
assert r[0][0] != a, "a different sequence gives different logits"
print("the same argmax, max and log-sum-exp within %.1g" % max(abs(a[1] - b[1]), abs(a[2] - b[2])))
EOF
	ok "a slot started again equals one that went on past the refused steps ($(cat "$W/steps.log"))"
else
	notok "a slot started again equals one that went on past the refused steps"
	show "$W/steps.log"
fi

rm -rf "$W"
