# infer.sh - the inference engine of text_gen_server (lib/infer):
# greedy generation with the key/value cache equals the
# continuation that transformers computes by full forward passes on the same
# weights (the checkpoint exported by ckpt_convert), token for token, with
# log-probs within 1e-4, for a GPT-2-style and a Llama-style model trained a
# few iterations (and one with YaRN and interleaved RoPE) and for a random
# GQA Llama written by transformers itself;
# the same requests give the same answers batched together (continuous
# batching, three cache slots) and one at a time (one slot); a seeded
# sampled request is reproducible whatever runs beside it.
. tests/prog_lib.sh
W=$(new_tmp infer)
OUT_LOG=$W/out.log
ERR=$W/err.log
GEN=$MEGAC_BUILD/tools/megac_generate
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
hf_env "$W/pyenv.log"
REF="$HF tests/prog/py/hf_ref.py"

ARGS="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --train-iters 4 --mock-data --eval-interval 100"
ARGS="$ARGS --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
LL="--position-embedding-type rope --normalization RMSNorm --swiglu --num-attention-heads 8 --group-query-attention"
LL="$LL --num-query-groups 4 --untie-embeddings-and-output-weights --disable-bias-linear"

# same NAME A.json B.json TOL: the same tokens, log-probs within TOL
same() {
	if /usr/bin/python3 -c '
import json, sys
a, b, tol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
assert len(a) == len(b), (len(a), len(b))
worst = 0.0
for i, (x, y) in enumerate(zip(a, b)):
    assert x["tokens"] == y["tokens"], "prompt %d: %s vs %s" % (i, x["tokens"], y["tokens"])
    assert len(x["logprobs"]) == len(y["logprobs"]), i
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

echo '[[464, 3290, 318], [1, 2, 3, 4, 5, 6, 7], [50256], [11, 12]]' >$W/prompts.json
# y: RoPE with YaRN and interleaved pairs, exported with each head's rows
# regrouped into rotate-half order: the cache's table is the training one
YI="$LL --position-embedding-type yarn --rotary-scaling-factor 4 --yarn-original-max-position-embeddings 64"
YI="$YI --mscale 0.8 --rotary-interleaved"
for m in g l y; do
	M=""
	[ $m = l ] && M=$LL
	[ $m = y ] && M=$YI
	setup "$m: train 4 iterations" sh -c "$BIN/train $ARGS $M --save $W/${m}c --save-interval 4 >$W/$m.log 2>&1"
	setup "$m: export to Hugging Face" $BIN/ckpt_convert --load $W/${m}c --save $W/${m}hf --to hf
	expect_ok "$m: megac generates (4 requests batched)" $GEN $W/${m}c $W/prompts.json 12 $W/${m}.json
	expect_ok "$m: one request at a time" $GEN $W/${m}c $W/prompts.json 12 $W/${m}_1.json 1 1 1 1
	same "$m: batched answers equal the answers alone" $W/${m}_1.json $W/${m}.json 1e-5
done

echo '[[5, 900, 31, 7, 7], [999], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]' >$W/p2.json
# long prompts batched together: the head runs on 64 rows at a time, so the
# prompts' log-probs come from chunks that cut across sequences
/usr/bin/python3 -c '
import json, random
r = random.Random(5)
print(json.dumps([[r.randrange(1000) for _ in range(n)] for n in (40, 45, 50)]))' >$W/p3.json
# transformers' side of every check below, in one process (hf_ref.py batch:
# torch and transformers imported once): the greedy continuations of the
# three exports; a random GQA Llama and a random MistralForCausalLM with
# sliding_window 8 (each key/value-cached step sees its own key and the 7
# before it, over prompts and continuations longer than that) written by
# transformers, and their continuations, the Llama's after the long prompts too
setup "transformers writes the random models and continues every model's prompts" $REF batch \
	"generate $W/ghf $W/prompts.json 12 $W/g_ref.json" "generate $W/lhf $W/prompts.json 12 $W/l_ref.json" \
	"generate $W/yhf $W/prompts.json 12 $W/y_ref.json" \
	"make llama $W/rl --layers 2 --hidden 64 --heads 8 --kv-heads 2 --ffn 96 --vocab 1000 --positions 64 --seed 3" \
	"generate $W/rl $W/p2.json 20 $W/rl_ref.json" \
	"make mistral $W/rmi --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 1000 --positions 64 \
--sliding-window 8 --seed 6" "generate $W/rmi $W/p2.json 20 $W/rmi_ref.json" \
	"generate $W/rl $W/p3.json 6 $W/rl3_ref.json"
for m in g l y; do
	same "$m: greedy generation equals transformers' token for token" $W/${m}_ref.json $W/${m}.json 1e-4
done

# the random GQA Llama from transformers
setup "import it" $BIN/ckpt_convert --from hf --load $W/rl --save $W/rlm
expect_ok "megac generates" $GEN $W/rlm $W/p2.json 20 $W/rl.json
same "GQA Llama: greedy generation equals transformers'" $W/rl_ref.json $W/rl.json 1e-4

# the sliding window of the random MistralForCausalLM
setup "import it" $BIN/ckpt_convert --from hf --load $W/rmi --save $W/rmim
expect_ok "megac generates with the window" $GEN $W/rmim $W/p2.json 20 $W/rmi.json
same "Mistral (sliding window): greedy generation equals transformers'" $W/rmi_ref.json $W/rmi.json 1e-4

# the long prompts
expect_ok "megac generates after long prompts" $GEN $W/rlm $W/p3.json 6 $W/rl3.json
same "long prompts: tokens and every prompt log-prob equal transformers'" $W/rl3_ref.json $W/rl3.json 1e-4

# sampling (top-k 40, temperature 0.8): a request's tokens depend on its seed
# only, not on the requests batched with it
expect_ok "sampled, batched" $GEN $W/rlm $W/p2.json 20 $W/s3.json 40 0.8 7
expect_ok "sampled, one at a time" $GEN $W/rlm $W/p2.json 20 $W/s1.json 40 0.8 7 1
same "a seeded sampled request is the same batched or alone" $W/s1.json $W/s3.json 1e-5
expect_ok "sampled, another seed" $GEN $W/rlm $W/p2.json 20 $W/s9.json 40 0.8 9
if ! /usr/bin/python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if a == b else 1)' $W/s3.json $W/s9.json; then
	ok "another seed samples other tokens"
else
	notok "another seed samples other tokens"
fi
rm -rf "$W"
