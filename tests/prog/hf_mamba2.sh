# hf_mamba2.sh - Mamba2ForCausalLM in ckpt_convert, without transformers:
# tests/fixtures/mamba2 holds a tiny random Mamba2ForCausalLM that
# transformers 4.49 wrote (tests/fixtures/mamba2/make.sh: 3 layers, hidden
# 64, 8 heads of 16 channels, one group of 16 states, random nonzero dt_bias,
# A_log, D and norm weights, chunk_size 8, bf16), and transformers' logits,
# greedy continuations and log-probs on it (its CPU forward, torch_forward;
# generate() with its cache gave the same tokens). The import is a hybrid
# checkpoint of pattern MMM without positions whose logits are
# transformers' (megac_logits, 1e-4), as are the greedy tokens and log-probs
# (each final sequence through megac_logits: the argmax at every generated
# position and the log-softmax, 1e-4), and so do the engine's and a
# text_gen_server's over loopback (the Mamba layers' recurrent state as
# their cache), the emulated device's server the CPU's; the export holds the fixture's
# tensors bit for bit and its config (but chunk_size, megac's 128, and
# pad_token_id, null); train --finetune continues from the import; layout
# changes take the hybrid checkpoint; what megac cannot represent is refused
# by name, on import and on export.
# Under MEGAC_LONG, transformers itself loads the export (and a tied
# model's) and gives megac's logits.
# shellcheck disable=SC2086 # paths and flag lists are words
. tests/prog_lib.sh
W=$(new_tmp hf_mamba2)
OUT_LOG=$W/out.log
ERR=$W/err.log
C=$BIN/ckpt_convert
LOGITS=$MEGAC_BUILD/tools/megac_logits
FX=tests/fixtures/mamba2
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi

# the fixture's folder, unpacked
mkdir -p $W/hf && cp $FX/config.json $W/hf/ && gzip -dc $FX/model.safetensors.gz >$W/hf/model.safetensors
expect_ok "import the fixture (ckpt_convert --from hf)" $C --from hf --load $W/hf --save $W/m --verify
if /usr/bin/python3 -c '
import sys, json, h5py
c = json.loads(h5py.File(sys.argv[1] + "/iter_0000000/model.h5", "r").attrs["config"])
want = {"hybrid_layer_pattern": "MMM", "num_layers": 3, "hidden_size": 64, "mamba_num_heads": 8,
        "mamba_head_dim": 16, "mamba_num_groups": 1, "mamba_state_dim": 16, "position_embedding_type": "none",
        "normalization": "RMSNorm", "untie_embeddings_and_output_weights": True, "vocab_size": 256}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
assert abs(c["norm_epsilon"] - 1e-5) < 1e-12, c["norm_epsilon"]
print("pattern %s, %d heads of %d, no positions" % (c["hybrid_layer_pattern"], c["mamba_num_heads"],
                                                   c["mamba_head_dim"]))' $W/m >$W/cfg.log 2>&1; then
	ok "the import is a hybrid Mamba model of the fixture's shape ($(cat $W/cfg.log))"
else
	notok "the import is a hybrid Mamba model of the fixture's shape"
	show $W/cfg.log
fi
expect_ok "megac's logits on the import" $LOGITS $W/m $FX/ids.npy $W/megac.npy
logits_close "the import's logits equal transformers' (1e-4)" $FX/logits.npy $W/megac.npy 1e-4
expect_ok "train --finetune continues from the import with the Mamba flags" $BIN/train --load $W/m --finetune \
	--hybrid-layer-pattern MMM --hidden-size 64 --num-attention-heads 1 --mamba-num-heads 8 --mamba-head-dim 16 \
	--mamba-num-groups 1 --mamba-state-dim 16 --position-embedding-type none --normalization RMSNorm \
	--disable-bias-linear --untie-embeddings-and-output-weights --seq-length 32 --max-position-embeddings 4096 \
	--micro-batch-size 2 --global-batch-size 2 --lr 1e-4 --train-iters 1 --mock-data --tokenizer-type NullTokenizer \
	--vocab-size 256 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --save $W/ft --save-interval 1

# greedy tokens and log-probs: each final sequence through megac's forward;
# causal, so position t's logits are those greedy decoding saw there
/usr/bin/python3 -c '
import sys, json, numpy as np
for i, (p, g) in enumerate(zip(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))):
    np.save("%s/seq%d.npy" % (sys.argv[3], i), np.array([p + g["tokens"]], dtype=np.int64))
' $FX/prompts.json $FX/generate.json $W
for i in 0 1 2; do
	setup "megac's logits on final sequence $i" $LOGITS $W/m $W/seq$i.npy $W/seqlogits$i.npy
done
if /usr/bin/python3 -c '
import sys, json, numpy as np
worst = 0.0
for i, (p, g) in enumerate(zip(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))):
    ids = p + g["tokens"]
    x = np.load("%s/seqlogits%d.npy" % (sys.argv[3], i))[0].astype(np.float64)
    lp = x - x.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    got = [int(np.argmax(x[t])) for t in range(len(p) - 1, len(ids) - 1)]
    assert got == g["tokens"], (i, got, g["tokens"])
    mine = np.array([lp[j - 1, ids[j]] for j in range(1, len(ids))])
    worst = max(worst, float(np.abs(mine - np.array(g["logprobs"])).max()))
assert worst <= 1e-4, worst
print("3 prompts, log-probs within %.2g" % worst)' $FX/prompts.json $FX/generate.json $W >$W/gen.log 2>&1; then
	ok "megac's greedy tokens and log-probs are transformers' ($(cat $W/gen.log))"
else
	notok "megac's greedy tokens and log-probs are transformers'"
	show $W/gen.log
fi

# served: the engine (megac_generate: the Mamba layers' recurrent state as
# their cache, prefill then one token a step) and a real text_gen_server
# over loopback give transformers' greedy tokens and log-probs; the
# emulated CUDA device's server the CPU server's
N=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))[0]["tokens"]))' $FX/generate.json)
expect_ok "the engine (megac_generate) generates" $MEGAC_BUILD/tools/megac_generate $W/m $FX/prompts.json $N \
	$W/gen.json
gen_same "the engine's greedy tokens and log-probs are transformers' (1e-4)" $FX/generate.json $W/gen.json 1e-4
serve_traps
serve_ask srv1 "text_gen_server on the import" $FX/prompts.json $N $W/srv1.json $BIN/text_gen_server --load $W/m \
	--tokenizer-type NullTokenizer --vocab-size 256 --device cpu --inference-max-seq-length 64
gen_same "the server's greedy tokens and log-probs are transformers' (1e-4)" $FX/generate.json $W/srv1.json 1e-4
if [ -n "${MEGAC_EMU:-}" ] && [ -x "$MEGAC_EMU/bin/text_gen_server" ]; then
	serve_ask srv2 "the emulated device's server" $FX/prompts.json $N $W/srv2.json $MEGAC_EMU/bin/text_gen_server --load $W/m \
		--tokenizer-type NullTokenizer --vocab-size 256 --device cuda --inference-max-seq-length 64
	gen_same "the emulated device gives the CPU server's answers (1e-4)" $W/srv1.json $W/srv2.json 1e-4
fi

# export: the fixture's tensors (bf16, as transformers wrote them) and config
expect_ok "export back to Hugging Face in bf16" $C --load $W/m --save $W/back --to hf --dtype bf16 --verify
if /usr/bin/python3 tests/prog/py/hf_st_same.py $W/hf $W/back --skip chunk_size,pad_token_id >$W/st.log 2>&1; then
	ok "the export holds the fixture's tensors and config ($(tail -n 1 $W/st.log))"
else
	notok "the export against the fixture"
	show $W/st.log
fi
if /usr/bin/python3 -c '
import sys, json
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"] == ["Mamba2ForCausalLM"] and c["model_type"] == "mamba2", c
assert c["chunk_size"] == 128 and c["pad_token_id"] is None and "time_step_limit" not in c, c
print("chunk_size 128, pad_token_id null, time_step_limit the default")' $W/back >$W/cfg2.log 2>&1; then
	ok "the export's own config keys ($(cat $W/cfg2.log))"
else
	notok "the export's own config keys"
	show $W/cfg2.log
fi
expect_ok "the export imports again" $C --from hf --load $W/back --save $W/m2 --verify
SAME_H5='
import sys, glob, h5py, numpy as np
a, b = (h5py.File(sorted(glob.glob(f + "/iter_*/model.h5"))[-1], "r") for f in sys.argv[1:3])
def datasets(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(out)
names = datasets(a)
assert names == datasets(b), set(names) ^ set(datasets(b))
for n in names:
    x, y = a[n][()], b[n][()]
    k = min(x.shape[0], y.shape[0])  # a re-padded vocabulary: its real rows, then zeros
    assert x.shape[1:] == y.shape[1:] and np.array_equal(x[:k], y[:k]) and not y[k:].any(), n
print("%d tensors bitwise" % len(names))'
if /usr/bin/python3 -c "$SAME_H5" $W/m $W/m2 >$W/cmp.log 2>&1; then
	ok "the second import is the first one ($(cat $W/cmp.log))"
else
	notok "the second import is the first one"
	show $W/cmp.log
fi

# megac -> megac: the hybrid checkpoint takes the layout-independent changes
expect_ok "a re-padded copy of the hybrid checkpoint (--make-vocab-size-divisible-by 384)" $C --load $W/m \
	--save $W/m384 --make-vocab-size-divisible-by 384 --verify
if /usr/bin/python3 -c "$SAME_H5" $W/m $W/m384 >$W/cmp.log 2>&1; then
	ok "the re-padded copy holds the same tensors, zero padding rows ($(cat $W/cmp.log))"
else
	notok "the re-padded copy holds the same tensors"
	show $W/cmp.log
fi
expect_ok "megac's logits on the re-padded copy" $LOGITS $W/m384 $FX/ids.npy $W/megac384.npy
logits_close "the re-padded copy gives transformers' logits (1e-4)" $FX/logits.npy $W/megac384.npy 1e-4
expect_ok "the fine-tuned hybrid checkpoint with Adam's state, re-padded and verified" $C --load $W/ft --save $W/ft384 \
	--make-vocab-size-divisible-by 384 --verify
if /usr/bin/python3 -c "$SAME_H5" $W/ft $W/ft384 >$W/cmp.log 2>&1 && [ -e $W/ft384/iter_0000001/optim.h5 ]; then
	ok "its weights are the source's, and the optimizer state is there ($(cat $W/cmp.log))"
else
	notok "the fine-tuned hybrid checkpoint's copy"
	show $W/cmp.log
fi
expect_fail "a hybrid checkpoint for TP2 with one Mamba group is refused by name" \
	"--mamba-num-groups 1 is not divisible by --tensor-model-parallel-size 2" \
	$C --load $W/m --save $W/mtp --target-tensor-parallel-size 2
expect_fail "--to megatron of a hybrid checkpoint is refused by name" "--to megatron does not write it yet" \
	$C --load $W/m --save $W/meg --to megatron

# what megac cannot represent, refused by the key
bad() { # NAME EXPECTED SED
	rm -rf $W/bad && mkdir -p $W/bad && ln -s $W/hf/model.safetensors $W/bad/ &&
		sed "$3" $W/hf/config.json >$W/bad/config.json
	expect_fail "$1" "$2" $C --from hf --load $W/bad --save $W/badm
}
bad "use_bias true is refused by name" "use_bias true" 's/"use_bias": false/"use_bias": true/'
bad "use_conv_bias false is refused by name" "use_conv_bias false" 's/"use_conv_bias": true/"use_conv_bias": false/'
bad "conv_kernel other than 4 is refused by name" "conv_kernel 3" 's/"conv_kernel": 4/"conv_kernel": 3/'
bad "a time_step_limit is refused by name" "time_step_limit other than [0.0, Infinity]" 's/Infinity/10.0/'
bad "rms_norm false is refused by name" "rms_norm false" 's/"rms_norm": true/"rms_norm": false/'
bad "layer_norm_epsilon other than the gated norm's 1e-5 is refused" "layer_norm_epsilon 1e-06" \
	's/"layer_norm_epsilon": 1e-05/"layer_norm_epsilon": 1e-06/'
bad "hidden_act other than silu is refused" "hidden_act \"gelu\"" 's/"hidden_act": "silu"/"hidden_act": "gelu"/'
bad "heads x head_dim other than expand x hidden is refused" "num_heads 8 x head_dim 16 differs from int(expand 3" \
	's/"expand": 2/"expand": 3/'
bad "heads not a multiple of n_groups are refused" "num_heads 8 is not a multiple of n_groups 3" \
	's/"n_groups": 1/"n_groups": 3/'
# a gated MLP beside the mixer (d_mlp): in_proj with 2 x 4 more rows, first
rm -rf $W/dmlp && mkdir -p $W/dmlp && cp $W/hf/config.json $W/dmlp/ && /usr/bin/python3 -c '
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head, body = json.loads(data[8:8 + n]), data[8 + n:]
meta = head.pop("__metadata__", None)
out, parts = {}, []
for k, v in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b, e = v["data_offsets"]
    t = body[b:e]
    if k.endswith("mixer.in_proj.weight"):
        t = bytes(8 * v["shape"][1] * 2) + t
        v = dict(v, shape=[v["shape"][0] + 8, v["shape"][1]])
    off = sum(len(p) for p in parts)
    out[k] = dict(v, data_offsets=[off, off + len(t)])
    parts.append(t)
if meta is not None:
    out["__metadata__"] = meta
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(parts))' \
	$W/hf/model.safetensors $W/dmlp/model.safetensors
expect_fail "an in_proj with a gated MLP's rows (d_mlp) is refused by name" "a gated MLP of d_mlp = 4" \
	$C --from hf --load $W/dmlp --save $W/dmlpm
# n_groups > 1 is taken, with the warning that transformers 4.49 computes
# another function then (the fixture's tensors do not fit it: refused after)
rm -rf $W/g2 && mkdir -p $W/g2 && ln -s $W/hf/model.safetensors $W/g2/ &&
	sed 's/"n_groups": 1/"n_groups": 2/' $W/hf/config.json >$W/g2/config.json
expect_fail "n_groups 2 is warned about (and the one-group tensors refused)" \
	"transformers 4.49 normalises over all of d_inner" $C --from hf --load $W/g2 --save $W/g2m
[ -e $W/badm ] || [ -e $W/dmlpm ] || [ -e $W/g2m ] && notok "a refused import left a folder behind"

# the export refuses what Mamba2ForCausalLM cannot hold (the imported
# checkpoint's recorded configuration edited: the refusal comes first)
edit() { # NAME EXPECTED PYTHON-STATEMENT
	rm -rf $W/e && cp -r $W/m $W/e && /usr/bin/python3 -c '
import sys, json, h5py
f = h5py.File(sys.argv[1] + "/iter_0000000/model.h5", "a")
c = json.loads(f.attrs["config"])
exec(sys.argv[2])
f.attrs["config"] = json.dumps(c)' $W/e "$3"
	expect_fail "$1" "$2" $C --load $W/e --save $W/eb --to hf
}
edit "an attention layer in the pattern is refused by name" "--hybrid-layer-pattern M*M: 1 attention (*), 0" \
	'c["hybrid_layer_pattern"] = "M*M"'
edit "an MLP layer in the pattern is refused by name" "MM-: 0 attention (*), 1 MLP (-)" \
	'c["hybrid_layer_pattern"] = "MM-"'
edit "a MoE layer in the pattern is refused by name" "ME-: 0 attention (*), 1 MLP (-) and 1 MoE (E) layers" \
	'c.update(hybrid_layer_pattern="ME-", num_experts=2, moe_router_topk=1, moe_ffn_hidden_size=64)'
edit "--norm-epsilon other than 1e-5 is refused by name" "--norm-epsilon 1e-06" 'c["norm_epsilon"] = 1e-6'
edit "LayerNorm is refused by name" "LayerNorm (--normalization)" 'c["normalization"] = "LayerNorm"'
edit "learned positions are refused by name" "learned position embeddings" \
	'c["position_embedding_type"] = "learned_absolute"'
edit "d_inner not a whole multiple of the hidden size is refused" "no whole multiple of --hidden-size 64" \
	'c["mamba_num_heads"] = 6'

# transformers itself: it loads the export and gives megac's logits; a tied
# model the same way
if long_only; then
	hf_env "$W/pyenv.log"
	expect_ok "export in fp32" $C --load $W/m --save $W/back32 --to hf
	expect_ok "transformers' logits on the export" $HF tests/prog/py/hf_ref.py logits $W/back32 $FX/ids.npy \
		$W/hf32.npy
	logits_close "transformers loads the export and gives megac's logits (1e-4)" $W/megac.npy $W/hf32.npy 1e-4
	expect_ok "a tied Mamba2ForCausalLM and its logits (transformers)" $HF tests/prog/py/hf_ref.py batch \
		"make mamba2 $W/tied --layers 2 --heads 4 --tie --seed 9" "logits $W/tied $FX/ids.npy $W/tied.npy"
	expect_ok "import the tied model" $C --from hf --load $W/tied --save $W/tm --verify
	expect_ok "megac's logits on the tied import" $LOGITS $W/tm $FX/ids.npy $W/tm.npy
	logits_close "the tied import's logits equal transformers' (1e-4)" $W/tied.npy $W/tm.npy 1e-4
	expect_ok "export the tied model" $C --load $W/tm --save $W/tback --to hf --verify
	if /usr/bin/python3 tests/prog/py/hf_st_same.py $W/tied $W/tback --skip chunk_size,pad_token_id \
		>$W/st.log 2>&1; then
		ok "the tied export holds the tied model's tensors ($(tail -n 1 $W/st.log))"
	else
		notok "the tied export against the tied model"
		show $W/st.log
	fi
	expect_ok "transformers' logits on the tied export" $HF tests/prog/py/hf_ref.py logits $W/tback $FX/ids.npy \
		$W/tback.npy
	logits_close "transformers loads the tied export and gives megac's logits (1e-4)" $W/tm.npy $W/tback.npy 1e-4
fi
[ -n "${KEEP:-}" ] || rm -rf "$W"
