# ckpt_convert.sh - ckpt_convert: GPT-2-style and Llama-style models
# trained a few iterations as TP2xPP2 on 4 ranks (and a Mixtral-style MoE
# model on one, exported as MixtralForCausalLM and back, the same checks; Qwen2MoeForCausalLMs
# both ways); layout A -> B -> A and
# megac -> Hugging Face -> megac are bitwise round trips; the exported folders
# load in transformers (pinned in tests/py-env.sh, an independent reference)
# and give megac's own logits (tests/tools/megac_logits) within 1e-4; folders
# that transformers wrote itself (random GPT2LMHeadModel and a sharded
# LlamaForCausalLM) import with transformers' logits, and train --finetune
# runs from them; a TP2xPP2 checkpoint converted to TP4 trains on with the
# losses of the original; bad input is refused with one message and leaves
# nothing behind.
. tests/prog_lib.sh
W=$(new_tmp ckpt_convert)
OUT_LOG=$W/out.log
ERR=$W/err.log
C=$BIN/ckpt_convert
LOGITS=$MEGAC_BUILD/tools/megac_logits
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe"
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi

hf_env "$W/pyenv.log"
REF="$HF tests/prog/py/hf_ref.py"
# hf_queue CHECK COMMAND...: a check that transformers makes (hf_ref.py
# commands, CHECK empty for a set-up step), put off until hf_run runs every
# queued command in one hf_ref.py batch (torch and transformers imported
# once, not once a check)
hf_queue() {
	printf '%s\n' "$1" >>"$W/hf.checks"
	shift
	printf '%s\n' "$@" >>"$W/hf.cmds"
}
# hf_run: the queued commands in one process; each queued check ok when all
# succeed, not ok (with the error) otherwise; false when it failed
hf_run() {
	set --
	while IFS= read -r _hr_l; do set -- "$@" "$_hr_l"; done <"$W/hf.cmds"
	if $REF batch "$@" >"$OUT_LOG" 2>"$ERR"; then _hr_r=ok; else _hr_r=notok; fi
	while IFS= read -r _hr_c; do [ -z "$_hr_c" ] || $_hr_r "$_hr_c"; done <"$W/hf.checks"
	rm -f "$W/hf.cmds" "$W/hf.checks"
	[ $_hr_r = ok ] && return 0
	show "$ERR"
	return 1
}

# The vocabulary is padded to 50304 in every layout (divisible-by x TP = 64).
ARGS="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --lr-decay-style cosine --lr-warmup-iters 2"
ARGS="$ARGS --train-iters 8 --mock-data --eval-interval 100 --eval-iters 0 --log-interval 1"
ARGS="$ARGS --data-cache-path $W/cache $GPT2 --distributed-timeout-minutes 1"
LL="--position-embedding-type rope --normalization RMSNorm --swiglu --num-attention-heads 8 --group-query-attention"
LL="$LL --num-query-groups 4 --untie-embeddings-and-output-weights --disable-bias-linear"
v64() { echo "--make-vocab-size-divisible-by $((64 / $1))"; }

ckpt_cmp() { # NAME MODE A B [PP]
	if /usr/bin/python3 tests/prog/py/ckpt_compare.py "$2" "$3" "$4" ${5:-} >"$W/cmp.log" 2>&1; then
		ok "$1: $(cat "$W/cmp.log")"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
/usr/bin/python3 -c '
import numpy as np
np.save("'"$W"'/ids.npy", np.random.RandomState(0).randint(0, 50257, size=(2, 32)).astype(np.int64))
np.save("'"$W"'/ids1k.npy", np.random.RandomState(1).randint(0, 1000, size=(3, 40)).astype(np.int64))'

for m in g l; do
	M=""
	[ $m = l ] && M=$LL
	setup "$m: TP2xPP2, 8 iterations, save at 4 and 8" sh -c "$MPI -np 4 $BIN/train $ARGS $M $(v64 2) \
		--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save $W/${m}c --save-interval 4 \
		--metrics-file $W/${m}s.jsonl >$W/${m}s.log 2>&1"

	# layout A -> B -> A, bitwise; the TP2xPP2 files -> one file -> PP4 interleaved -> PP2
	expect_ok "$m: to one file (iteration 4), verified" $C --load $W/${m}c --iteration 4 --save $W/${m}1 --verify
	ckpt_cmp "$m: one file holds the TP2xPP2 checkpoint's tensors" exact $W/${m}c/iter_0000004 $W/${m}1/iter_0000004
	expect_ok "$m: to PP2 with two virtual stages" $C --load $W/${m}1 --save $W/${m}v --target-pipeline-parallel-size 2 \
		--target-num-virtual-stages-per-pipeline-rank 2 --verify
	expect_ok "$m: back to PP2" $C --load $W/${m}v --save $W/${m}2 --target-pipeline-parallel-size 2
	ckpt_cmp "$m: TP2xPP2 -> 1 -> PP2 interleaved -> PP2 is the original, bit for bit" exact \
		$W/${m}c/iter_0000004 $W/${m}2/iter_0000004 2

	# megac -> HF -> megac: every tensor bitwise (the vocabulary padding rows,
	# which HF does not have, come back as zeros)
	expect_ok "$m: export to Hugging Face" $C --load $W/${m}c --save $W/${m}hf --to hf --verify $GPT2
	expect_ok "$m: import it again" $C --load $W/${m}hf --from hf --save $W/${m}back --verify $(v64 1)
	if /usr/bin/python3 tests/prog/py/hf_roundtrip.py "$W/${m}c/iter_0000008/model.h5" \
		"$W/${m}back/iter_0000000/model.h5" >"$W/rt.log" 2>&1; then
		ok "$m: megac -> HF -> megac round trip ($(cat "$W/rt.log"))"
	else
		notok "$m: megac -> HF -> megac round trip"
		show "$W/rt.log"
	fi
	# the export loads in transformers and gives megac's logits; so does the
	# bf16 export (transformers runs for both models with the random models
	# below: hf_queue)
	setup "$m: megac's logits" $LOGITS $W/${m}c $W/ids.npy $W/${m}_megac.npy
	expect_ok "$m: export as bf16, sharded" $C --load $W/${m}c --save $W/${m}hf16 --to hf --dtype bf16 \
		--max-shard-size 200KB --verify
	hf_queue "$m: transformers loads the export and gives its logits, and the bf16 export's" \
		"check $W/${m}hf" "logits $W/${m}hf $W/ids.npy $W/${m}_hf.npy" "logits $W/${m}hf16 $W/ids.npy $W/${m}_hf16.npy"

	# TP2xPP2 -> TP4: training on gives the original's losses (the Llama-style
	# model's under make check-long)
	[ $m = l ] && ! long_only && continue
	expect_ok "$m: TP2xPP2 iteration 4 to TP4" $C --load $W/${m}c --iteration 4 --save $W/${m}4 \
		--target-tensor-parallel-size 4 $(v64 4) --verify
	expect_ok "$m: train on as TP4" sh -c "$MPI -np 4 $BIN/train $ARGS $M $(v64 4) --tensor-model-parallel-size 4 \
		--load $W/${m}4 --metrics-file $W/${m}r4.jsonl >$W/${m}r4.log 2>&1"
	if /usr/bin/python3 tests/prog/py/compare_metrics.py tail $W/${m}s.jsonl $W/${m}r4.jsonl 5 8 >"$W/cmp.log" 2>&1; then
		ok "$m: the TP4 conversion trains on with the TP2xPP2 run's losses ($(cat "$W/cmp.log"))"
	else
		notok "$m: the TP4 conversion trains on with the TP2xPP2 run's losses"
		show "$W/cmp.log"
	fi
done

# --no-optim: the model alone, which train --finetune starts from
expect_ok "--no-optim" $C --load $W/gc --save $W/gno --no-optim --verify
if [ -f $W/gno/iter_0000008/model.h5 ] && [ ! -e $W/gno/iter_0000008/optim.h5 ]; then
	ok "--no-optim writes model.h5 only"
else
	notok "--no-optim writes model.h5 only"
fi
expect_ok "train --finetune from the --no-optim checkpoint" sh -c "$MPI -np 2 $BIN/train $ARGS $(v64 1) \
	--pipeline-model-parallel-size 2 --load $W/gno --finetune --train-iters 3 >$W/gno.log 2>&1"

# a target TP whose padding differs (train's default divisor 128 x TP 2 =
# 50432 rows instead of 50304): said on stderr, and train loads the result
# with its default flags and trains on
expect_ok "to TP2 with the default divisor" $C --load $W/gc --save $W/g2p --target-tensor-parallel-size 2
if grep -q "padded to 50432 rows instead of 50304" "$ERR"; then ok "the new padding is said"; else
	notok "the new padding is said"
	show "$ERR"
fi
expect_ok "train TP2 (default divisor) trains on from it" sh -c "$MPI -np 2 $BIN/train $ARGS \
	--tensor-model-parallel-size 2 --load $W/g2p >$W/g2p.log 2>&1"

# Megatron's tools/checkpoint/convert.py command line: its flags name the
# same conversion (core loader and saver: checkpoints train loads)
expect_ok "convert.py's command line" $C --model-type GPT --loader core --saver core --load-dir $W/gc \
	--save-dir $W/gpy --target-tensor-parallel-size 2 --target-expert-parallel-size 1 --max-queue-size 50 \
	--megatron-path /nowhere --no-checking --true-vocab-size 50257
if /usr/bin/python3 -c '
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = sorted(n for n in a if isinstance(a[n], h5py.Dataset))
assert names and names == sorted(n for n in b if isinstance(b[n], h5py.Dataset)), "tensor names differ"
for n in names:
    assert np.array_equal(a[n][()], b[n][()]), n
' $W/gpy/iter_0000008/model.h5 $W/g2p/iter_0000008/model.h5 >"$W/py.log" 2>&1; then
	ok "convert.py's command line writes what --load/--save/--target-tensor-parallel-size write"
else
	notok "convert.py's command line writes what --load/--save/--target-tensor-parallel-size write"
	show "$W/py.log"
fi
expect_ok "convert.py's hf saver" $C --model-type GPT --loader megatron --saver hf --load-dir $W/gc \
	--save-dir $W/gpyhf $GPT2
[ -f $W/gpyhf/config.json ] && ok "the hf saver writes a Hugging Face folder" ||
	notok "the hf saver writes a Hugging Face folder"
expect_fail "convert.py: --model-type BERT" "megac converts GPT-style models only" \
	$C --model-type BERT --load-dir $W/gc --save-dir $W/bad/bert
expect_fail "convert.py: --loader against --from" "--loader core and --from hf contradict each other" \
	$C --loader core --from hf --load-dir $W/gc --save-dir $W/bad/contra
expect_fail "convert.py: another --true-vocab-size" "--true-vocab-size 1000: the checkpoint's vocabulary has 50257" \
	$C --true-vocab-size 1000 --load-dir $W/gc --save-dir $W/bad/vocab

# folders written by transformers itself: a GPT-2 and a sharded Llama with
# GQA, and (below) Llama's kin and two Qwen2-MoE models; transformers writes
# them all and computes their logits in one process with the exports' checks
# queued above (hf_ref.py batch: torch and transformers imported once)
while IFS=: read -r _rm_dir _rm_kind _rm_args; do
	hf_queue "" "make $_rm_kind $W/$_rm_dir $_rm_args" "logits $W/$_rm_dir $W/ids1k.npy $W/${_rm_dir}_hf.npy"
done <<EOF
rg:gpt2:--layers 2 --hidden 64 --heads 4 --vocab 1000 --positions 64 --seed 1
rl:llama:--layers 2 --hidden 64 --heads 8 --kv-heads 2 --ffn 96 --vocab 1000 --positions 64 --untie --seed 2 --shard-size 100000
rq2:qwen2:--layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 1000 --positions 64 --tie --seed 3
rq3:qwen3:--layers 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --ffn 96 --vocab 1000 --positions 64 --rope-scaling 8 --seed 4
rl3:llama:--layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 1000 --positions 64 --rope-scaling 8 --seed 5
rly:llama:--layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 1000 --positions 512 --yarn 4 --seed 8
rmi:mistral:--layers 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 24 --ffn 96 --vocab 1000 --positions 64 --sliding-window 8 --seed 6
rmn:mistral:--layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 1000 --positions 64 --seed 7
rqm:qwen2_moe:--layers 3 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --moe-ffn 32 --shared-ffn 48 --experts 4 --topk 2 --mlp-only 1 --vocab 1000 --positions 64 --seed 8
rqn:qwen2_moe:--layers 2 --hidden 64 --heads 4 --ffn 96 --moe-ffn 32 --shared-ffn 48 --experts 4 --topk 2 --norm-topk-prob --tie --vocab 1000 --positions 64 --seed 9
EOF
if ! hf_run; then
	notok "set-up step failed: transformers writes 10 random models (GPT-2; Llama, sharded, with llama3 and YaRN rope_scaling; Qwen2, Qwen3; Mistral with and without a window; Qwen2-MoE) and their logits; the checks after it were not run"
	exit 1
fi
for m in g l; do
	logits_close "$m: transformers' logits on the export equal megac's (1e-4)" $W/${m}_megac.npy $W/${m}_hf.npy 1e-4
	logits_close "$m: the bf16 export's logits stay close (0.05)" $W/${m}_megac.npy $W/${m}_hf16.npy 0.05
done
for m in rg rl; do
	expect_ok "$m: import" $C --from hf --load $W/$m --save $W/${m}m --verify
	expect_ok "$m: megac's logits" $LOGITS $W/${m}m $W/ids1k.npy $W/${m}_megac.npy
	logits_close "$m: megac's logits on the import equal transformers' (1e-4)" $W/${m}_hf.npy $W/${m}_megac.npy 1e-4
done
# Llama's kin from transformers: a Qwen2ForCausalLM (q/k/v biases: --add-qkv-bias,
# tied), a Qwen3ForCausalLM (q_norm/k_norm: --qk-layernorm, head_dim 24 of
# hidden 64; hf_ref.py builds it from transformers' Llama modules, the pinned
# transformers predating Qwen3) and a Llama with rope_scaling llama3
# (--use-rope-scaling) import with transformers' logits and export back to
# the same tensors and config; so does a MistralForCausalLM with
# sliding_window 8 on sequences of 40 (megac's --window-size 7,0: HF's window
# counts the query's own key); one with sliding_window null imports as a
# Llama (and would export as LlamaForCausalLM)
expect_ok "rmn: import" $C --from hf --load $W/rmn --save $W/rmnm --verify
expect_ok "rmn: megac's logits" $LOGITS $W/rmnm $W/ids1k.npy $W/rmn_megac.npy
logits_close "rmn: megac's logits on the import equal transformers' (1e-4)" $W/rmn_hf.npy $W/rmn_megac.npy 1e-4
for m in rq2 rq3 rl3 rly rmi; do
	expect_ok "$m: import" $C --from hf --load $W/$m --save $W/${m}m --verify
	expect_ok "$m: megac's logits" $LOGITS $W/${m}m $W/ids1k.npy $W/${m}_megac.npy
	logits_close "$m: megac's logits on the import equal transformers' (1e-4)" $W/${m}_hf.npy $W/${m}_megac.npy 1e-4
	expect_ok "$m: export back to Hugging Face" $C --load $W/${m}m --save $W/${m}back --to hf --verify
	if $HF tests/prog/py/hf_same.py $W/$m $W/${m}back >"$W/same.log" 2>&1; then
		ok "$m: the export holds transformers' tensors and config ($(tail -n 1 "$W/same.log"))"
	else
		notok "$m: the export against transformers' folder"
		show "$W/same.log"
	fi
done
mkdir -p $W/bad/dyn && cp $W/rl3/model.safetensors $W/bad/dyn/
sed 's/"llama3"/"dynamic"/' $W/rl3/config.json >$W/bad/dyn/config.json
expect_fail "rope_scaling of another rope_type is refused by name" \
	'rope_scaling of rope_type "dynamic": megac has Llama 3.x'"'"'s ("llama3", --use-rope-scaling) and YaRN' \
	$C --from hf --load $W/bad/dyn --save $W/bad/dynout
# YaRN: the import recorded Megatron's settings; what transformers 4.49
# reads otherwise than later versions, or not at all, is refused by name
if /usr/bin/python3 -c '
import json, sys
c = json.loads(__import__("h5py").File(sys.argv[1], "r").attrs["config"])
want = {"position_embedding_type": "yarn", "rotary_scaling_factor": 4.0, "yarn_original_max_position_embeddings": 512,
        "yarn_beta_fast": 16.0, "yarn_beta_slow": 2.0, "mscale_all_dim": 0.0, "yarn_correction_range_round_to_int": True}
bad = {k: c.get(k) for k in want if c.get(k) != want[k]}
assert not bad, bad
assert abs(0.1 * c["mscale"] * __import__("math").log(4.0) + 1 - 1.2) < 1e-15, c["mscale"]
print("mscale %.17g" % c["mscale"])' $W/rlym/iter_0000000/model.h5 >"$W/yarncfg.log" 2>&1; then
	ok "rly: the import records Megatron's YaRN settings ($(cat "$W/yarncfg.log"))"
else
	notok "rly: the import records Megatron's YaRN settings"
	show "$W/yarncfg.log"
fi
for bad in omax mscale; do
	mkdir -p $W/bad/$bad && cp $W/rly/model.safetensors $W/bad/$bad/
	/usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
if sys.argv[3] == "omax":
    c["rope_scaling"]["original_max_position_embeddings"] = 128
else:
    c["rope_scaling"]["mscale"] = 1.0
json.dump(c, open(sys.argv[2] + "/config.json", "w"))' $W/rly $W/bad/$bad $bad
done
expect_fail "yarn: original_max_position_embeddings other than max_position_embeddings is refused" \
	"original_max_position_embeddings 128 differs from max_position_embeddings 512" \
	$C --from hf --load $W/bad/omax --save $W/bad/omaxout
expect_fail "yarn: a key transformers 4.49's YaRN does not read is refused by name" \
	'rope_scaling yarn: the key "mscale"' $C --from hf --load $W/bad/mscale --save $W/bad/mscaleout
# --rotary-interleaved: no Hugging Face flag; the export regroups each q/k
# head's rows (and q/k norm weights) into rotate-half order, and transformers'
# logits equal megac's: a Llama with YaRN (its export's config read back),
# and (under MEGAC_LONG=1) a Qwen3-style model with q/k norms, Llama 3.x scaling
IL="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
IL="$IL --normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights"
IL="$IL --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2"
IL="$IL --mock-data --eval-interval 100 --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2 $(v64 1)"
IL="$IL --rotary-interleaved --train-iters 3 --save-interval 3"
ILM=ily
long_only && ILM="ily ilq"
for m in $ILM; do
	case $m in
	ily) M="--position-embedding-type yarn --rotary-scaling-factor 8 --yarn-original-max-position-embeddings 512 \
		--mscale 0.9" ;;
	ilq) M="--position-embedding-type rope --qk-layernorm --use-rope-scaling --rope-scaling-factor 8 \
		--rotary-base 500000" ;;
	esac
	setup "$m: train an interleaved-RoPE model, 3 iterations" sh -c "$BIN/train $IL $M --save $W/${m}c >$W/${m}c.log 2>&1"
	expect_ok "$m: export to Hugging Face" $C --load $W/${m}c --save $W/${m}hf --to hf --verify $GPT2
	setup "$m: megac's logits" $LOGITS $W/${m}c $W/ids.npy $W/${m}_megac.npy
	# (transformers' logits with the MoE exports' below: hf_queue)
	hf_queue "$m: transformers' logits" "logits $W/${m}hf $W/ids.npy $W/${m}_hf.npy"
	expect_ok "$m: import the export (rotate-half)" $C --load $W/${m}hf --from hf --save $W/${m}back $(v64 1)
	expect_ok "$m: megac's logits of the re-import" $LOGITS $W/${m}back $W/ids.npy $W/${m}_back.npy
	logits_close "$m: the re-import gives the interleaved model's logits (1e-4)" $W/${m}_megac.npy \
		$W/${m}_back.npy 1e-4
done
if /usr/bin/python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
want = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512, "beta_fast": 32.0,
        "beta_slow": 1.0, "attention_factor": 1.18715}
assert c["rope_scaling"] == want, c["rope_scaling"]
assert c["max_position_embeddings"] == 512, c["max_position_embeddings"]
print("rope_scaling %s" % c["rope_scaling"])' $W/ilyhf/config.json >"$W/ilycfg.log" 2>&1; then
	ok "ily: config.json holds YaRN as transformers reads it ($(cat "$W/ilycfg.log"))"
else
	notok "ily: config.json holds YaRN as transformers reads it"
	show "$W/ilycfg.log"
fi
mkdir -p $W/bad
expect_fail "yarn: an unrounded correction range does not export" \
	"--no-yarn-correction-range-round-to-int: transformers' YaRN" \
	sh -c "$BIN/train $IL --position-embedding-type yarn --no-yarn-correction-range-round-to-int --save $W/bad/nr \
		>$W/bad/nr.log 2>&1 && $C --load $W/bad/nr --save $W/bad/nrhf --to hf $GPT2"
# OpenAI's own GPT-2 files have no "transformer." prefix (and attn.bias mask
# buffers): the same model stored that way imports to the same tensors
mkdir -p $W/rgp
cp $W/rg/config.json $W/rgp/
if /usr/bin/python3 tests/prog/py/st_rename.py $W/rg/model.safetensors $W/rgp/model.safetensors transformer. \
	h.0.attn.bias >"$W/rgp.log" 2>&1 && $C --from hf --load $W/rgp --save $W/rgpm >>"$W/rgp.log" 2>&1 &&
	/usr/bin/python3 -c '
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert sorted(a.keys()) == sorted(b.keys())
assert all(np.array_equal(a[k][()], b[k][()]) for k in a.keys())
print("%d tensors bitwise" % len(a.keys()))' $W/rgm/iter_0000000/model.h5 $W/rgpm/iter_0000000/model.h5 \
		>>"$W/rgp.log" 2>&1; then
	ok "GPT-2 tensors without the transformer. prefix import the same ($(tail -n 1 "$W/rgp.log"))"
else
	notok "GPT-2 tensors without the transformer. prefix"
	show "$W/rgp.log"
fi
FT="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64"
FT="$FT --micro-batch-size 1 --global-batch-size 2 --lr 1e-4 --train-iters 2 --mock-data --eval-iters 0 --eval-interval 100"
FT="$FT --tokenizer-type NullTokenizer --vocab-size 1000 --data-cache-path $W/cache --log-interval 1"
expect_ok "rg: train --finetune from the import" $BIN/train $FT --load $W/rgm --finetune
expect_ok "rl: train --finetune from the import, as PP2" $MPI -np 2 $BIN/train $FT --num-layers 2 \
	--num-attention-heads 8 --group-query-attention --num-query-groups 2 --ffn-hidden-size 96 --swiglu \
	--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights \
	--disable-bias-linear --norm-epsilon 1e-5 --pipeline-model-parallel-size 2 --load $W/rlm --finetune

# bad input: one message, exit 128, nothing written
nothing_at() { # NAME DIR
	if [ -e "$2" ] || ls -a "$(dirname "$2")" | grep -q "^\.$(basename "$2")\.tmp"; then
		notok "$1: something was left at $2"
	else
		ok "$1: nothing left behind"
	fi
}
# Mixtral: a MoE model (GQA, untied, 4 experts, top-2, every layer MoE)
# exports as MixtralForCausalLM with transformers' logits equal to megac's,
# and imports back bit for bit; what Mixtral cannot hold is refused
MX="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
MX="$MX --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear"
MX="$MX --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48"
MX="$MX --moe-aux-loss-coeff 0.01 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2"
MX="$MX --global-batch-size 4 --lr 2e-3 --mock-data --eval-interval 100 --eval-iters 0 --log-interval 1"
MX="$MX --data-cache-path $W/cache $GPT2 $(v64 1)"
setup "mx: train a Mixtral-style MoE model, 4 iterations" sh -c "$BIN/train $MX --train-iters 4 --save $W/mxc \
	--save-interval 4 >$W/mxc.log 2>&1"
expect_ok "mx: export to Hugging Face" $C --load $W/mxc --save $W/mxhf --to hf --verify $GPT2
if /usr/bin/python3 -c '
import sys, json
c = json.load(open(sys.argv[1]))
want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
        "num_experts_per_tok": 2, "intermediate_size": 48, "router_aux_loss_coef": 0.01,
        "output_router_logits": False, "sliding_window": None, "num_key_value_heads": 2}
bad = {k: c.get(k, "(missing)") for k, v in want.items() if c.get(k, "(missing)") != v}
assert not bad, bad
print("%d keys" % len(c))' $W/mxhf/config.json >"$W/mxcfg.log" 2>&1; then
	ok "mx: config.json is a MixtralForCausalLM's ($(cat "$W/mxcfg.log"))"
else
	notok "mx: config.json is a MixtralForCausalLM's"
	show "$W/mxcfg.log"
fi
setup "mx: megac's logits" $LOGITS $W/mxc $W/ids.npy $W/mx_megac.npy
# (transformers loads it with the Qwen2-MoE export below: hf_queue)
hf_queue "mx: transformers loads the export and gives its logits" "check $W/mxhf" \
	"logits $W/mxhf $W/ids.npy $W/mx_hf.npy"
expect_ok "mx: import it again" $C --load $W/mxhf --from hf --save $W/mxback --verify $(v64 1)
if /usr/bin/python3 tests/prog/py/hf_roundtrip.py "$W/mxc/iter_0000004/model.h5" "$W/mxback/iter_0000000/model.h5" \
	'{"num_experts": 4, "moe_router_topk": 2, "moe_ffn_hidden_size": 48, "moe_layer_freq": "[1,1]",
	  "moe_router_score_function": "softmax"}' >"$W/rt.log" 2>&1; then
	ok "mx: megac -> HF -> megac round trip ($(cat "$W/rt.log"))"
else
	notok "mx: megac -> HF -> megac round trip"
	show "$W/rt.log"
fi
setup "mx: train a MoE model with a shared expert, 1 iteration" sh -c "$BIN/train $MX --train-iters 1 \
	--moe-shared-expert-intermediate-size 32 --save $W/mxsh --save-interval 1 >$W/mxsh.log 2>&1"
expect_fail "mx: a shared expert is not Mixtral" "this one has a shared expert" \
	$C --load $W/mxsh --save $W/mxshhf --to hf
nothing_at "mx: a shared expert" $W/mxshhf
setup "mx: train a MoE model with sigmoid routing, 1 iteration" sh -c "$BIN/train $MX --train-iters 1 \
	--moe-router-score-function sigmoid --save $W/mxsg --save-interval 1 >$W/mxsg.log 2>&1"
expect_fail "mx: sigmoid routing is not Mixtral" "this one has sigmoid routing" \
	$C --load $W/mxsg --save $W/mxsghf --to hf

# Qwen2-MoE: random Qwen2MoeForCausalLMs from transformers (QKV biases, 4
# experts top-2, a shared expert with its sigmoid gate; one with a dense
# layer in mlp_only_layers and norm_topk_prob false, one tied with
# norm_topk_prob true) import with transformers' logits, export back to the
# same tensors and config; a megac-trained one (--moe-layer-freq 2) exports
# and transformers loads it with megac's logits
for m in rqm rqn; do
	expect_ok "$m: import" $C --from hf --load $W/$m --save $W/${m}m --verify
	expect_ok "$m: megac's logits" $LOGITS $W/${m}m $W/ids1k.npy $W/${m}_megac.npy
	logits_close "$m: megac's logits on the import equal transformers' (1e-4)" $W/${m}_hf.npy $W/${m}_megac.npy 1e-4
	expect_ok "$m: export back to Hugging Face" $C --load $W/${m}m --save $W/${m}back --to hf --verify
	if $HF tests/prog/py/hf_same.py $W/$m $W/${m}back >"$W/same.log" 2>&1 && /usr/bin/python3 -c '
import sys, json
a, b = (json.load(open(p + "/config.json")) for p in sys.argv[1:])
keys = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
        "norm_topk_prob", "intermediate_size", "router_aux_loss_coef")
bad = {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}
la = [l for l in range(a["num_hidden_layers"]) if l in a["mlp_only_layers"] or (l + 1) % a["decoder_sparse_step"]]
lb = [l for l in range(b["num_hidden_layers"]) if l in b["mlp_only_layers"] or (l + 1) % b["decoder_sparse_step"]]
assert not bad and la == lb, (bad, la, lb)' $W/$m $W/${m}back >>"$W/same.log" 2>&1; then
		ok "$m: the export holds transformers' tensors and config, the MoE keys too ($(tail -n 1 "$W/same.log"))"
	else
		notok "$m: the export against transformers' folder"
		show "$W/same.log"
	fi
done
QM="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2"
QM="$QM --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear --add-qkv-bias"
QM="$QM --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32"
QM="$QM --moe-router-pre-softmax --moe-shared-expert-intermediate-size 48 --moe-shared-expert-gate"
QM="$QM --moe-layer-freq 2 --ffn-hidden-size 96 --moe-aux-loss-coeff 0.001 --seq-length 32"
QM="$QM --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3 --mock-data"
QM="$QM --eval-interval 100 --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2 $(v64 1)"
setup "qm: train a Qwen2-MoE-style model, 2 iterations" sh -c "$BIN/train $QM --train-iters 2 --save $W/qmc \
	--save-interval 2 >$W/qmc.log 2>&1"
expect_ok "qm: export to Hugging Face" $C --load $W/qmc --save $W/qmhf --to hf --verify $GPT2
setup "qm: megac's logits" $LOGITS $W/qmc $W/ids.npy $W/qm_megac.npy
hf_queue "qm: transformers loads the export and gives its logits" "check $W/qmhf" \
	"logits $W/qmhf $W/ids.npy $W/qm_hf.npy"
# transformers on the interleaved-RoPE, Mixtral and Qwen2-MoE exports, in one process
hf_run
for m in $ILM mx qm; do
	logits_close "$m: transformers' logits on the export equal megac's (1e-4)" $W/${m}_megac.npy $W/${m}_hf.npy 1e-4
done
setup "qm: train without the gate, 1 iteration" sh -c "$BIN/train $(echo "$QM" | sed 's/ --moe-shared-expert-gate//') \
	--train-iters 1 --save $W/qmng --save-interval 1 >$W/qmng.log 2>&1"
expect_fail "qm: a shared expert without its gate is not Qwen2-MoE" \
	"this one has a shared expert without its gate (--moe-shared-expert-gate)" $C --load $W/qmng --save $W/qmnghf --to hf
nothing_at "qm: no gate" $W/qmnghf

mkdir -p $W/bad
cp -r $W/rg $W/bad/arch
sed -i 's/GPT2LMHeadModel/BertForMaskedLM/' $W/bad/arch/config.json
expect_fail "unknown architecture" \
	"ckpt_convert reads GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM and Mamba2ForCausalLM" \
	$C --from hf --load $W/bad/arch --save $W/bad/out1
nothing_at "unknown architecture" $W/bad/out1
cp -r $W/rg $W/bad/shape
sed -i 's/"n_layer": 2/"n_layer": 3/; s/"n_inner": null/"n_inner": 128/' $W/bad/shape/config.json
expect_fail "a layer missing, a shape wrong" "missing: transformer.h.2.ln_1.weight" \
	$C --from hf --load $W/bad/shape --save $W/bad/out2
nothing_at "a missing layer" $W/bad/out2
expect_fail "heads not divisible by the target TP" "--num-attention-heads 4 is not divisible by --tensor-model-parallel-size 8" \
	$C --load $W/gc --save $W/bad/out3 --target-tensor-parallel-size 8
nothing_at "heads not divisible" $W/bad/out3
expect_fail "Hugging Face output into an existing folder" "exists" $C --load $W/gc --save $W/rg --to hf
expect_fail "no checkpoint" "no latest_checkpointed_iteration.txt" $C --load $W/bad --save $W/bad/out4
expect_fail "megac output in bf16" "megac checkpoints hold the fp32 master weights" \
	$C --load $W/gc --save $W/bad/out5 --dtype bf16
nothing_at "megac output in bf16" $W/bad/out5
expect_fail "over an existing iteration" "exists: ckpt_convert does not overwrite a checkpoint" \
	$C --load $W/gc --iteration 4 --save $W/g1
expect_fail "into the source" "is the --load directory" $C --load $W/gc --save $W/gc/
# a damaged tensor half way: the conversion stops and leaves nothing
cp -r $W/g1 $W/bad/damaged
/usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    d = f["decoder.layers.2.mlp.linear_fc1.weight"]
    d[0, 0] = d[0, 0] + 1.0' $W/bad/damaged/iter_0000004/model.h5
expect_fail "a damaged tensor" "decoder.layers.2.mlp.linear_fc1.weight" \
	$C --load $W/bad/damaged --save $W/bad/new/out6 --target-pipeline-parallel-size 2
nothing_at "a damaged tensor" $W/bad/new
expect_fail "a damaged tensor, to Hugging Face" "decoder.layers.2.mlp.linear_fc1.weight" \
	$C --load $W/bad/damaged --save $W/bad/new2/hf --to hf
nothing_at "a damaged tensor, to Hugging Face" $W/bad/new2
expect_ok "--save with a trailing slash" $C --load $W/g1 --save $W/slash/ --to hf
if [ -f $W/slash/config.json ]; then ok "the trailing slash names the folder"; else notok "the trailing slash"; fi
[ -n "${KEEP:-}" ] || rm -rf "$W"
