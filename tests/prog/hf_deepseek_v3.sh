# hf_deepseek_v3.sh - DeepseekV3ForCausalLM in ckpt_convert and
# text_gen_server, without transformers: tests/fixtures/deepseek_v3 holds a
# tiny random DeepseekV3ForCausalLM that transformers 4.53.3 wrote
# (tests/fixtures/deepseek_v3/make.sh: multi-latent attention with a
# compressed query, a dense first layer then two MoE layers with a shared
# expert, 4 experts in 2 groups of which 1 is kept, top-2, routed_scaling_factor
# 2.5, a random nonzero e_score_correction_bias, DeepSeek-V3's YaRN with
# factor 4, mscale 0.8 and mscale_all_dim 0.6), and transformers' logits,
# greedy continuations and log-probs on it. The import gives transformers'
# logits (megac_logits, 1e-4); the engine (megac_generate) and a one-rank
# text_gen_server give its greedy tokens and log-probs (1e-4), TP2 and EP2
# servers the one-rank server's (1e-5), the emulated CUDA device's server
# the CPU's (1e-4); the export holds the fixture's tensors bit
# for bit and its config; what megac cannot represent is refused by name.
# tests/prog/hf_long.sh does the same against transformers itself.
# shellcheck disable=SC2086 # paths and flag lists are words
. tests/prog_lib.sh
W=$(new_tmp hf_deepseek_v3)
OUT_LOG=$W/out.log
ERR=$W/err.log
C=$BIN/ckpt_convert
FX=tests/fixtures/deepseek_v3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
MPI="mpirun --allow-run-as-root --oversubscribe"
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
TOK="--tokenizer-type NullTokenizer --vocab-size 256"

# the fixture's folder, unpacked
mkdir -p $W/ds && cp $FX/config.json $W/ds/ && gzip -dc $FX/model.safetensors.gz >$W/ds/model.safetensors
expect_ok "import the fixture (ckpt_convert --from hf)" $C --from hf --load $W/ds --save $W/dsm --verify
expect_ok "megac's logits on the import" $MEGAC_BUILD/tools/megac_logits $W/dsm $FX/ids.npy $W/megac.npy
logits_close "the import's logits equal transformers' (1e-4)" $FX/logits.npy $W/megac.npy 1e-4

N=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))[0]["tokens"]))' $FX/generate.json)
expect_ok "the engine (megac_generate) generates" $MEGAC_BUILD/tools/megac_generate $W/dsm $FX/prompts.json $N \
	$W/gen.json
gen_same "the engine's greedy tokens and log-probs are transformers' (1e-4)" $FX/generate.json $W/gen.json 1e-4
expect_ok "the engine with one cache slot for three prompts" $MEGAC_BUILD/tools/megac_generate $W/dsm \
	$FX/prompts.json $N $W/gen1.json 1 1.0 0 1
gen_same "one slot at a time gives the same answers (1e-5)" $W/gen.json $W/gen1.json 1e-5

# the server: one rank, then TP2
serve_traps
serve_ask srv1 "the one-rank server" $FX/prompts.json $N $W/srv1.json $BIN/text_gen_server --load $W/dsm $TOK --device cpu \
	--inference-max-seq-length 64
gen_same "the server's greedy tokens and log-probs are transformers' (1e-4)" $FX/generate.json $W/srv1.json 1e-4
serve_ask srv2 "the TP2 server" $FX/prompts.json $N $W/srv2.json $MPI -np 2 $BIN/text_gen_server --load $W/dsm $TOK --device cpu \
	--inference-max-seq-length 64 --tensor-model-parallel-size 2
gen_same "TP2 gives the one-rank server's answers (1e-5)" $W/srv1.json $W/srv2.json 1e-5
serve_ask srv3 "the EP2 server" $FX/prompts.json $N $W/srv3.json $MPI -np 2 $BIN/text_gen_server --load $W/dsm $TOK --device cpu \
	--inference-max-seq-length 64 --expert-model-parallel-size 2
gen_same "EP2 gives the one-rank server's answers (1e-5)" $W/srv1.json $W/srv3.json 1e-5
# the emulated CUDA device (make emu): the CPU server's answers, from its kernels
if [ -z "${MEGAC_EMU:-}" ]; then
	echo "ok - the emulated device's server # SKIP MEGAC_EMU is not set (make emu)"
else
	serve_ask srv4 "the emulated device's server" $FX/prompts.json $N $W/srv4.json env MEGAC_EMU_STATS=1 $MEGAC_EMU/bin/text_gen_server \
		--load $W/dsm $TOK --device cuda --inference-max-seq-length 64
	gen_same "the emulated device gives the CPU server's answers (1e-4)" $W/srv1.json $W/srv4.json 1e-4
	_k=$(grep -c '^emu: launched' $W/srv4.log)
	if [ "$_k" -gt 0 ]; then
		ok "the emulated device's server ran its kernels ($_k distinct)"
	else
		notok "the emulated device's server ran its kernels (none launched)"
	fi
fi

# export: the fixture's tensors (bf16, as transformers wrote them) and config
expect_ok "export back to Hugging Face in bf16" $C --load $W/dsm --save $W/back --to hf --dtype bf16 --verify
if /usr/bin/python3 tests/prog/py/hf_st_same.py $W/ds $W/back >"$W/st.log" 2>&1; then
	ok "the export holds the fixture's tensors and config ($(tail -n 1 "$W/st.log"))"
else
	notok "the export against the fixture"
	show "$W/st.log"
fi
expect_ok "the export imports again" $C --from hf --load $W/back --save $W/dsm2 --verify
if /usr/bin/python3 -c '
import sys, h5py, numpy as np
a, b = (h5py.File(f + "/iter_0000000/model.h5", "r") for f in sys.argv[1:3])
def datasets(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(out)
names = datasets(a)
assert names == datasets(b), set(names) ^ set(datasets(b))
for n in names:
    assert np.array_equal(a[n][()], b[n][()]), n
print("%d tensors bitwise" % len(names))' $W/dsm $W/dsm2 >"$W/cmp.log" 2>&1; then
	ok "the second import is the first one ($(cat "$W/cmp.log"))"
else
	notok "the second import is the first one"
	show "$W/cmp.log"
fi

# what megac cannot represent, refused by the key
bad() { # NAME EXPECTED SED
	rm -rf $W/bad && mkdir -p $W/bad && ln -s $W/ds/model.safetensors $W/bad/ &&
		sed "$3" $W/ds/config.json >$W/bad/config.json
	expect_fail "$1" "$2" $C --from hf --load $W/bad --save $W/badm
}
bad "q_lora_rank null is refused by name" "q_lora_rank null" 's/"q_lora_rank": [0-9]*/"q_lora_rank": null/'
bad "a YaRN beta_fast other than Megatron's MLA's is refused" "beta_fast 16" 's/"beta_fast": 32/"beta_fast": 16/'
bad "a YaRN factor other than max_position_embeddings / 4096 is refused" "factor 8 with max_position_embeddings" \
	's/"factor": 4[.0]*/"factor": 8/'
bad "topk_method other than noaux_tc is refused" "topk_method \"greedy\"" \
	's/"architectures"/"topk_method": "greedy", "architectures"/'
bad "norm_topk_prob false with top-2 is refused" "norm_topk_prob false" \
	's/"norm_topk_prob": true/"norm_topk_prob": false/'
bad "a group choice megac scores otherwise is refused" "scores a group by its top 2" \
	's/"num_experts_per_tok": 2/"num_experts_per_tok": 1, "norm_topk_prob": false/; s/"norm_topk_prob": true,//'
bad "num_key_value_heads other than the heads is refused" "num_key_value_heads" \
	's/"num_key_value_heads": [0-9]*/"num_key_value_heads": 2/'
bad "rms_norm_eps other than 1e-6 (that of transformers' latent norms) is refused" "rms_norm_eps 1e-05" \
	's/"rms_norm_eps": 1e-06/"rms_norm_eps": 1e-05/'
# a multi-token prediction layer (model.layers.3.*, after the 3 layers) added to the file
rm -rf $W/mtp && mkdir -p $W/mtp && cp $W/ds/config.json $W/mtp/ && /usr/bin/python3 -c '
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head, body = json.loads(data[8:8 + n]), data[8 + n:]
head["model.layers.3.enorm.weight"] = {"dtype": "BF16", "shape": [64], "data_offsets": [len(body), len(body) + 128]}
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + body + bytes(128))' \
	$W/ds/model.safetensors $W/mtp/model.safetensors
expect_fail "multi-token prediction weights are refused by name" \
	"holds model.layers.3.enorm.weight: DeepSeek-V3's multi-token prediction layers (num_nextn_predict_layers)" \
	$C --from hf --load $W/mtp --save $W/mtpm
[ -n "${KEEP:-}" ] || rm -rf "$W"
