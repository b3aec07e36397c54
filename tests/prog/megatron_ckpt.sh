# megatron_ckpt.sh - checkpoints that Megatron Core itself wrote
# (tests/fixtures/megatron-ckpt: a GPT and a Llama-style model at TP1 and TP2,
# legacy torch and torch_dist, with Megatron's logits) unpack to the files and
# sha256s of their manifest; lib/ckpt's reader (through
# tests/tools/megac_torch_pickle) loads every legacy model_optim_rng.pt, and
# the tensors it reads give Megatron's logits in the fixtures' NumPy forward
# pass (check_fixtures.py dumps) and reassemble from the TP2 shards into the
# TP1 tensors exactly; ckpt_convert --from megatron imports every legacy and
# torch_dist checkpoint and megac's own forward pass on it gives Megatron's
# logits (|difference| < 1e-4); damaged or malicious torch_dist folders are
# refused naming the file. Megatron's own training run (train.tar.xz) imports
# with its optimizer state and megac continues it with Megatron's losses; the
# optimizer state survives megac -> torch_dist -> megac bit for bit. Runs
# with Megatron's distributed optimizer (distopt.tar.xz: dp_reshardable,
# fully_reshardable, TP2, bf16) import with its state (the two layouts
# alike, bit for bit) and continue with Megatron's losses; so do the runs
# saved in the legacy format (legacy_train.tar.xz), whose optimizer state
# also survives megac -> legacy torch -> megac bit for bit. Under
# make check-long with MEGATRON_LM set, Megatron itself loads megac's exports
# (logits) and continues megac's export of its run (losses).
# Megatron-FSDP's run of the same model (fsdp.tar.xz, its fsdp_dtensor
# format) imports to the very state of the torch_dist save, train continues
# it and saves and resumes that format (also under megac's own
# --use-megatron-fsdp on 2 ranks), and under check-long Megatron-FSDP
# continues megac's export. Its save of the MoE + MTP model (fsdp_moe.tar.xz)
# imports, continues with its losses, and round-trips bit for bit.
. tests/prog_lib.sh
W=$(new_tmp megatron_ckpt)
TOOL=$MEGAC_BUILD/tools/megac_torch_pickle
FIX=tests/fixtures/megatron-ckpt
PY=/usr/bin/python3
ERR=$W/err.log
OUT_LOG=$W/out.log

setup "the fixtures unpack" sh -c "tar -xJf $FIX/gpt.tar.xz -C $W && tar -xJf $FIX/llama.tar.xz -C $W &&
	tar -xJf $FIX/train.tar.xz -C $W && tar -xJf $FIX/fsdp.tar.xz -C $W && cp $FIX/manifest.json $W/"

n=0
bad=""
for f in $(cd "$W" && find . -name model_optim_rng.pt | LC_ALL=C sort); do
	if $TOOL dump "$W/$f" "$W/$f.json" 2>"$ERR"; then
		n=$((n + 1))
	else
		bad="$bad $f"
		show "$ERR"
	fi
done
if [ -z "$bad" ] && [ "$n" -eq 6 ]; then
	ok "megac reads the 6 legacy model_optim_rng.pt Megatron wrote"
else
	notok "megac cannot read:$bad (read $n of 6)"
fi

if $PY $FIX/check_fixtures.py dumps "$W" >"$W/check.log" 2>&1; then
	ok "their tensors as megac read them give Megatron's logits; TP2 shards equal TP1: $(tr '\n' ';' <"$W/check.log")"
else
	notok "the tensors megac read do not check out"
	show "$W/check.log" 12
fi

# ckpt_convert --from megatron imports each of them; megac's own forward pass
# on the imported checkpoint gives the logits Megatron recorded
LOGITS=$MEGAC_BUILD/tools/megac_logits
CMP="$PY tests/prog/py/megatron_compare.py"
# (legacy torch, then torch_dist: PyTorch Distributed Checkpoint, global
# tensors in chunks, the layers stacked)
for f in torch torch_dist; do
	for m in gpt llama; do
		for tp in 1 2; do
			d="$W/${m}_tp${tp}_megac"
			[ $f = torch ] || d="$W/${m}_tp${tp}_dist_megac"
			if $BIN/ckpt_convert --load "$W/${m}_tp${tp}_$f" --save "$d" --from megatron \
				--tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR" &&
				$LOGITS "$d" "$W/${m}_tokens.npy" "$d.npy" 2>"$ERR" &&
				$CMP logits "$d.npy" "$W/${m}_logits.npy" >"$W/cmp.log" 2>&1; then
				ok "$m TP$tp $f: imported with --from megatron, megac's logits are Megatron's ($(cat "$W/cmp.log"))"
			else
				notok "$m TP$tp $f: imported with --from megatron, megac's logits are Megatron's"
				show "$ERR"
				show "$W/cmp.log"
			fi
		done
	done
done
# and give the very tensors of the legacy import
if $PY -c '
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1] + "/iter_0000001/model.h5"), h5py.File(sys.argv[2] + "/iter_0000001/model.h5")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert len(names) >= 15, names
for n in names:
    assert np.array_equal(a[n][()], b[n][()]), n
print(len(names))' "$W/llama_tp2_dist_megac" "$W/llama_tp2_megac" >"$W/cmp.log" 2>&1; then
	ok "llama TP2: torch_dist and legacy imports hold the same $(cat "$W/cmp.log") tensors, bit for bit"
else
	notok "llama TP2: torch_dist and legacy imports differ"
	show "$W/cmp.log"
fi

# Megatron's training run (train.tar.xz): 4 Adam steps on one repeated
# sequence, iteration 2 saved with its optimizer state. megac imports it
# with Adam's moments, step and schedule, and continues with Megatron's
# losses; without the moments (--no-load-optim) the 4th step's loss differs.
# Then megac -> torch_dist -> megac keeps the optimizer state bit for bit.
TRAIN_FLAGS="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2
	--ffn-hidden-size 64 --seq-length 16 --max-position-embeddings 16 --position-embedding-type rope --rotary-base 10000
	--normalization RMSNorm --norm-epsilon 1e-5 --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
	--vocab-size 128 --tokenizer-type NullTokenizer --make-vocab-size-divisible-by 64 --micro-batch-size 1
	--global-batch-size 1 --attention-dropout 0 --hidden-dropout 0 --split 100,0,0 --eval-iters 0
	--data-path $W/seq_text_document --data-cache-path $W/cache --train-iters 4 --log-interval 1"
TRAIN_FLAGS="$TRAIN_FLAGS $($PY -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["flags"]))' \
	"$W/llama_train_losses.json")"
# the data: the recorded sequence's 16 tokens twice, so that every sample is that sequence
$PY -c '
import json, sys
t = json.load(open(sys.argv[1]))["tokens"][:16]
print(json.dumps({"text": " ".join(map(str, t + t))}))' "$W/llama_train_losses.json" >"$W/seq.jsonl"
setup "the training data" $BIN/preprocess_data --input "$W/seq.jsonl" --output-prefix "$W/seq" \
	--tokenizer-type NullTokenizer --vocab-size 128 --workers 1
# same_iter A B [MIN]: iteration 2 of A and B hold the same tensors, bit for
# bit, and A's root attributes, in model.h5 and optim.h5 (at least MIN
# tensors each); prints how many tensors
same_iter() {
	$PY -c '
import sys, h5py, numpy as np
n = 0
for f in ("model.h5", "optim.h5"):
    a, b = h5py.File(sys.argv[1] + "/iter_0000002/" + f), h5py.File(sys.argv[2] + "/iter_0000002/" + f)
    names = []
    a.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) else None)
    assert len(names) >= int(sys.argv[3]), names
    for k in names:
        assert np.array_equal(a[k][()], b[k][()]), (f, k)
    n += len(names)
    for k, v in a.attrs.items():
        assert k in b.attrs and np.all(b.attrs[k] == v), (f, k)
print(n)' "$1" "$2" "${3:-1}"
}
same_state() { # NAME A B: same_iter with at least 15 tensors a file, as a check
	if same_iter "$2" "$3" 15 >"$W/cmp.log" 2>&1; then
		ok "$1 ($(cat "$W/cmp.log") tensors)"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
continues() { # NAME CKPT METRICS [FLAGS...]: iterations 3 and 4 give Megatron's losses (rtol 1e-5;
	# LOSSES, FLAGS and RTOL: another run's losses file, train flags and tolerance)
	name=$1 ck=$2 mf=$3
	shift 3
	rm -f "$mf"
	# shellcheck disable=SC2086 # the flags are words
	if ${RUN:-} $BIN/train ${FLAGS:-$TRAIN_FLAGS} --load "$ck" --metrics-file "$mf" "$@" >"$OUT_LOG" 2>"$ERR" &&
		$CMP losses "${LOSSES:-$W/llama_train_losses.json}" "$mf" 3 "${RTOL:-1e-5}" >"$W/cmp.log" 2>&1; then
		ok "$name ($(cat "$W/cmp.log"))"
	else
		notok "$name"
		show "$ERR"
		show "$W/cmp.log"
	fi
}
expect_ok "Megatron's training checkpoint imports with its optimizer state" $BIN/ckpt_convert \
	--load "$W/llama_train_torch_dist" --save "$W/train_megac" --from megatron --tokenizer-type NullTokenizer \
	--vocab-size 128
continues "megac continues Megatron's run with Megatron's losses" "$W/train_megac" "$W/cont.jsonl"
rm -f "$W/noopt.jsonl"
# shellcheck disable=SC2086
if $BIN/train $TRAIN_FLAGS --load "$W/train_megac" --no-load-optim --metrics-file "$W/noopt.jsonl" >"$OUT_LOG" \
	2>"$ERR" && $CMP differ "$W/llama_train_losses.json" "$W/noopt.jsonl" 4 1e-3 >"$W/cmp.log" 2>&1; then
	ok "without the imported moments the 4th loss differs ($(cat "$W/cmp.log")): the test sees them"
else
	notok "without the imported moments the 4th loss differs"
	show "$ERR"
	show "$W/cmp.log"
fi
expect_ok "megac's checkpoint with optimizer state to torch_dist" $BIN/ckpt_convert --load "$W/train_megac" \
	--save "$W/train_dist" --to megatron --ckpt-format torch_dist --make-vocab-size-divisible-by 64
expect_ok "and back" $BIN/ckpt_convert --load "$W/train_dist" --save "$W/train_back" --from megatron \
	--tokenizer-type NullTokenizer --vocab-size 128
if same_iter "$W/train_megac" "$W/train_back" >"$W/cmp.log" 2>&1; then
	ok "megac -> torch_dist -> megac keeps weights, moments, step and schedule ($(cat "$W/cmp.log") tensors) bit for bit"
else
	notok "megac -> torch_dist -> megac keeps weights, moments, step and schedule"
	show "$W/cmp.log"
fi
continues "the round trip continues with Megatron's losses too" "$W/train_back" "$W/cont2.jsonl"
# train --load on Megatron's folder itself: imported through a staging folder, removed after
continues "train --load on Megatron's torch_dist folder continues it directly" "$W/llama_train_torch_dist" \
	"$W/cont3.jsonl" --save "$W/direct" --save-interval 100
if [ -e "$W/direct/.megac-import" ] || [ ! -d "$W/direct/iter_0000004" ]; then
	notok "the staging folder is removed and train saves its own checkpoint"
else
	ok "the staging folder is removed and train saves its own checkpoint"
fi
# train --ckpt-format torch_dist: iteration 3 saved in Megatron's format, resumed to 4
rm -f "$W/cont5.jsonl"
# shellcheck disable=SC2086
if $BIN/train $TRAIN_FLAGS --load "$W/llama_train_torch_dist" --train-iters 3 --ckpt-format torch_dist \
	--save "$W/tdsave" --save-interval 1 >"$OUT_LOG" 2>"$ERR" && [ -f "$W/tdsave/iter_0000003/.metadata" ] &&
	[ ! -e "$W/tdsave/.megac-hdf5" ] && [ "$(cat "$W/tdsave/latest_checkpointed_iteration.txt")" = 3 ]; then
	ok "train --ckpt-format torch_dist saves Megatron's folder (iteration 3, tracker last, no staging left)"
else
	notok "train --ckpt-format torch_dist saves Megatron's folder"
	show "$ERR"
fi
if $BIN/train $TRAIN_FLAGS --load "$W/tdsave" --metrics-file "$W/cont5.jsonl" --ckpt-format torch_dist \
	--save "$W/tdsave" --save-interval 1 >"$OUT_LOG" 2>"$ERR" &&
	$CMP losses "$W/llama_train_losses.json" "$W/cont5.jsonl" 4 1e-5 >"$W/cmp.log" 2>&1; then
	ok "resumed from its own torch_dist save, iteration 4 has Megatron's loss ($(cat "$W/cmp.log"))"
else
	notok "resumed from its own torch_dist save, iteration 4 has Megatron's loss"
	show "$ERR"
	show "$W/cmp.log"
fi
# two data-parallel ranks (every sample is the same sequence: the same losses)
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
RUN="mpirun --allow-run-as-root --oversubscribe -np 2" continues \
	"train --load on Megatron's folder with 2 data-parallel ranks" "$W/llama_train_torch_dist" "$W/cont4.jsonl" \
	--global-batch-size 2 --save "$W/direct2" --save-interval 100

# Megatron's distributed optimizer (distopt.tar.xz: the same run with
# --use-distributed-optimizer, its state saved in the optimizer's own flat
# buckets (dp_reshardable, Megatron's default) and by parameter
# (--dist-ckpt-optim-fully-reshardable); at TP2; and the GPT model, with
# LayerNorm, biases, tied embeddings and learned positions, in bf16). The
# buckets hold no names: megac rebuilds Megatron's layout of each rank's
# parameters, and the two layouts of one run must give the same state bit
# for bit; each import continues with Megatron's losses.
setup "the distributed optimizer's fixtures unpack" tar -xJf $FIX/distopt.tar.xz -C "$W"
for v in distopt distopt_full distopt_tp2; do
	expect_ok "llama, $v: imports with the distributed optimizer's state" $BIN/ckpt_convert \
		--load "$W/llama_train_${v}_torch_dist" --save "$W/imp_$v" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 128
done
if $PY - "$W/imp_distopt" "$W/imp_distopt_full" "$W/imp_distopt_tp2" >"$W/cmp.log" 2>&1 <<'EOF'
import sys, h5py, numpy as np
def load(d):
    out = {}
    for f in ("model.h5", "optim.h5"):
        h = h5py.File(d + "/iter_0000002/" + f, "r")
        h.visititems(lambda k, o: out.__setitem__(f + ":" + k, o[()]) if isinstance(o, h5py.Dataset) else None)
        out[f + ":attrs"] = {k: v for k, v in h.attrs.items()}
    return out
a, b, c = (load(d) for d in sys.argv[1:4])
assert sorted(a) == sorted(b) == sorted(c)
assert len([k for k in a if k.startswith("optim.h5:exp_avg_sq/")]) == 15
assert a["optim.h5:attrs"]["step"] == 2 and a["optim.h5:attrs"]["adam_beta2"] == 0.95
worst = 0.0
for k in a:
    if k.endswith(":attrs"):
        assert all(np.all(a[k][x] == b[k][x]) for x in a[k]), k
        continue
    assert np.array_equal(a[k], b[k]), k
    worst = max(worst, float(np.abs(a[k] - c[k]).max() / max(np.abs(a[k]).max(), 1e-30)))
assert worst < 1e-5, worst
print("%d tensors; TP2 within %.1e of TP1 (its own run)" % (len(a) - 2, worst))
EOF
then
	ok "dp_reshardable and fully_reshardable give the same weights, moments, step and schedule bit for bit ($(cat "$W/cmp.log"))"
else
	notok "the distributed optimizer's two layouts give the same state"
	show "$W/cmp.log"
fi
for v in distopt distopt_full distopt_tp2; do
	LOSSES="$W/llama_train_${v}_losses.json" continues "llama, $v: megac continues Megatron's run with its losses" \
		"$W/imp_$v" "$W/do_$v.jsonl"
done
GPT_FLAGS="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 128 --seq-length 16
	--max-position-embeddings 16 --position-embedding-type learned_absolute --normalization LayerNorm --no-bias-gelu-fusion
	--vocab-size 128 --tokenizer-type NullTokenizer --make-vocab-size-divisible-by 64 --micro-batch-size 1
	--global-batch-size 1 --attention-dropout 0 --hidden-dropout 0 --split 100,0,0 --eval-iters 0
	--data-path $W/seq_text_document --data-cache-path $W/cache --train-iters 4 --log-interval 1 --bf16
	$($PY -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["flags"]))' \
		"$W/gpt_train_bf16_distopt_losses.json")"
# train --load on the folder itself (train's import); bf16 rounding between
# the two programs' kernels: rtol 1e-3, as for the bf16 run above
FLAGS=$GPT_FLAGS LOSSES="$W/gpt_train_bf16_distopt_losses.json" RTOL=1e-3 continues \
	"gpt bf16, dp_reshardable: train --load continues Megatron's run with its losses" \
	"$W/gpt_train_bf16_distopt_torch_dist" "$W/do_gpt.jsonl"
rm -f "$W/do_noopt.jsonl"
# shellcheck disable=SC2086
if $BIN/train $GPT_FLAGS --load "$W/gpt_train_bf16_distopt_torch_dist" --no-load-optim --metrics-file \
	"$W/do_noopt.jsonl" >"$OUT_LOG" 2>"$ERR" &&
	$CMP differ "$W/gpt_train_bf16_distopt_losses.json" "$W/do_noopt.jsonl" 4 3e-3 >"$W/cmp.log" 2>&1; then
	ok "gpt bf16: without the moments the 4th loss differs ($(cat "$W/cmp.log")): the test sees them"
else
	notok "gpt bf16: without the moments the 4th loss differs"
	show "$ERR"
	show "$W/cmp.log"
fi

# The same runs in the legacy torch format (legacy_train.tar.xz: llama fp32
# at TP1 and TP2, gpt bf16): each rank file holds the optimizer's
# state_dict, its parameters numbered through Megatron's param groups in
# named_parameters() order. Each imports with its state and continues with
# Megatron's losses; megac -> legacy torch (TP2 x PP2) -> megac keeps it bit
# for bit; two parameters' numbers swapped in the file are refused.
setup "the legacy-format training fixtures unpack" tar -xJf $FIX/legacy_train.tar.xz -C "$W"
for v in llama_train_legacy llama_train_tp2_legacy; do
	expect_ok "$v: imports with Adam's state" $BIN/ckpt_convert --load "$W/${v}_torch" --save "$W/imp_$v" \
		--from megatron --tokenizer-type NullTokenizer --vocab-size 128
	LOSSES="$W/${v}_losses.json" continues "$v: megac continues Megatron's run with its losses" "$W/imp_$v" \
		"$W/lg_$v.jsonl"
done
FLAGS=$GPT_FLAGS LOSSES="$W/gpt_train_bf16_legacy_losses.json" RTOL=1e-3 continues \
	"gpt bf16, legacy: train --load continues Megatron's run with its losses" \
	"$W/gpt_train_bf16_legacy_torch" "$W/lg_gpt.jsonl"
expect_ok "gpt bf16 legacy: imports" $BIN/ckpt_convert --load "$W/gpt_train_bf16_legacy_torch" --save "$W/imp_lg_gpt" \
	--from megatron --tokenizer-type NullTokenizer --vocab-size 128
for v in llama_train_legacy lg_gpt; do
	src=$W/imp_$v
	[ $v = lg_gpt ] && dt="--dtype bf16" || dt=""
	# shellcheck disable=SC2086
	if $BIN/ckpt_convert --load "$src" --save "$W/lgx_$v" --to megatron --ckpt-format torch \
		--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 --make-vocab-size-divisible-by 64 $dt \
		>"$OUT_LOG" 2>"$ERR" && $PY -c '
import sys, torch
s = torch.load(sys.argv[1], map_location="cpu")
assert s["optimizer"] and s["opt_param_scheduler"]["num_steps"] == 2' \
		"$W/lgx_$v/iter_0000002/mp_rank_01_001/model_optim_rng.pt" 2>>"$ERR" &&
		$BIN/ckpt_convert --load "$W/lgx_$v" --save "$W/lgb_$v" --from megatron --tokenizer-type NullTokenizer \
			--vocab-size 128 >"$OUT_LOG" 2>>"$ERR" &&
		same_iter "$src" "$W/lgb_$v" >"$W/cmp.log" 2>&1; then
		ok "$v: megac -> legacy torch TP2 x PP2 (torch.load opens it) -> megac keeps weights, moments, step and schedule ($(cat "$W/cmp.log") tensors) bit for bit"
	else
		notok "$v: megac -> legacy torch -> megac keeps the optimizer state"
		show "$ERR"
		show "$W/cmp.log"
	fi
done
# two parameters' numbers swapped in a param group of megac's export (torch
# 1.13 rewrites it): their moments no longer fit the model's shapes there,
# and the import says so
mkdir -p "$W/lg_swap/iter_0000002"
cp -r "$W/lgx_llama_train_legacy/iter_0000002/"* "$W/lg_swap/iter_0000002/"
cp "$W/lgx_llama_train_legacy/latest_checkpointed_iteration.txt" "$W/lg_swap/"
if $PY -c '
import sys, torch
s = torch.load(sys.argv[1], map_location="cpu")
ids = s["optimizer"]["param_groups"][0]["params"]
ids[1], ids[2] = ids[2], ids[1]
torch.save(s, sys.argv[1])' "$W/lg_swap/iter_0000002/mp_rank_00_000/model_optim_rng.pt" &&
	! $BIN/ckpt_convert --load "$W/lg_swap" --save "$W/lg_swap_imp" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 128 >"$OUT_LOG" 2>"$ERR" && grep -q "exp_avg" "$ERR" && [ ! -e "$W/lg_swap_imp" ]; then
	ok "two parameters' numbers swapped in a legacy file are refused ($(head -c 160 "$ERR"))"
else
	notok "two parameters' numbers swapped in a legacy file are refused"
	show "$ERR"
fi

# Megatron's MoE + MTP model (moe.tar.xz: 4 experts top-2 with sigmoid
# scores and the expert bias, a gated shared expert, one MTP depth; local
# spec, SequentialMLP) at EP1 and EP2, legacy and torch_dist: megac imports
# each with Megatron's logits and MTP depth logits (megac_logits' training
# forward pass); then megac -> Megatron -> megac is exact for legacy TP2 x
# PP2 x EP2, TEGroupedMLP's names and torch_dist
setup "the MoE fixture unpacks to its manifest's files" sh -c "tar -xJf $FIX/moe.tar.xz -C $W &&
	cp $FIX/manifest-moe.json $W/ && $PY -c '
import hashlib, json, os, sys
m = json.load(open(os.path.join(sys.argv[1], \"manifest-moe.json\")))[\"files_sha256_before_compression\"]
for rel, want in m.items():
    assert hashlib.sha256(open(os.path.join(sys.argv[1], rel), \"rb\").read()).hexdigest() == want[\"sha256\"], rel
assert len(m) >= 14, len(m)' $W"
for src in moe_tp1_torch moe_tp1_torch_dist moe_ep2_torch moe_ep2_torch_dist; do
	d="$W/${src}_megac"
	if $BIN/ckpt_convert --load "$W/$src" --save "$d" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 128 >"$OUT_LOG" 2>"$ERR" &&
		$LOGITS "$d" "$W/moe_tokens.npy" "$d.npy" "$d.mtp.npy" 2>"$ERR" &&
		$CMP logits "$d.npy" "$W/moe_logits.npy" >"$W/cmp.log" 2>&1 &&
		$CMP logits "$d.mtp.npy" "$W/moe_mtp_logits.npy" >"$W/cmp2.log" 2>&1; then
		ok "$src: imported, megac's logits are Megatron's ($(cat "$W/cmp.log")), the MTP depth's too ($(cat "$W/cmp2.log"))"
	else
		notok "$src: imported with Megatron's logits and MTP logits"
		show "$ERR"
		show "$W/cmp.log"
		show "$W/cmp2.log"
	fi
done
same_ckpt() { # NAME A B [FILES]: every tensor of A's model.h5 and optim.h5 (or FILES) is B's, bit for bit
	if $PY -c '
import glob, os, sys, h5py, numpy as np
a, b = (sorted(glob.glob(d + "/iter_*"))[-1] for d in sys.argv[1:3])
n = 0
for f in sys.argv[3].split():
    if not os.path.exists(a + "/" + f):
        continue
    A, B = h5py.File(a + "/" + f), h5py.File(b + "/" + f)
    names = []
    A.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) else None)
    for k in names:
        assert k in B and np.array_equal(A[k][()], B[k][()]), (f, k)
    n += len(names)
print(n)' "$2" "$3" "${4:-model.h5 optim.h5}" >"$W/cmp.log" 2>&1; then
		ok "$1 ($(cat "$W/cmp.log") tensors, bit for bit)"
	else
		notok "$1"
		show "$W/cmp.log"
	fi
}
M1="$W/moe_tp1_torch_megac"
for lay in "torch 2 2 2" "torch 1 1 2 --moe-grouped-gemm" "torch_dist 1 1 1"; do
	# shellcheck disable=SC2086 # the layout's words
	set -- $lay
	g=${5:-}
	out="$W/moe_to_$1_$2_$3_$4$g"
	if $BIN/ckpt_convert --load "$M1" --save "$out" --to megatron --ckpt-format $1 --target-tensor-parallel-size $2 \
		--target-pipeline-parallel-size $3 --target-expert-parallel-size $4 $g --make-vocab-size-divisible-by 64 \
		>"$OUT_LOG" 2>"$ERR" && $BIN/ckpt_convert --load "$out" --save "$out.back" --from megatron \
		--tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR"; then
		same_ckpt "MoE + MTP: megac -> Megatron $1 (TP $2 x PP $3 x EP $4 $g) -> megac" "$M1" "$out.back"
	else
		notok "MoE + MTP: megac -> Megatron $1 (TP $2 x PP $3 x EP $4 $g) -> megac"
		show "$ERR"
	fi
done

# a megac MoE + MTP run of 4 layers, dense and MoE alternating (torch_dist
# keeps such layers unstacked), Adam's state for the experts: legacy with
# virtual pipeline stages (model0, model1) and torch_dist with the chained
# optimizers' state come back bit for bit
V=$W/moe4
setup "a 4-layer MoE + MTP run" sh -c "mkdir -p $V && cd $V && $BIN/train --num-layers 4 --hidden-size 32 \
	--num-attention-heads 4 --ffn-hidden-size 64 --seq-length 16 --max-position-embeddings 16 \
	--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear \
	--untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 16 \
	--moe-layer-freq '[0,1,0,1]' --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
	--moe-shared-expert-intermediate-size 32 --mtp-num-layers 1 --mock-data --tokenizer-type NullTokenizer \
	--vocab-size 128 --micro-batch-size 1 --global-batch-size 1 --train-iters 2 --lr 1e-3 --save ck \
	--save-interval 2 --eval-iters 0 --split 100,0,0 >t.log 2>&1"
for lay in "torch 2 2 2" "torch_dist 1 1 1"; do
	# shellcheck disable=SC2086 # the layout's words
	set -- $lay
	out="$V/to_$1"
	if $BIN/ckpt_convert --load "$V/ck" --save "$out" --to megatron --ckpt-format $1 --target-tensor-parallel-size $2 \
		--target-pipeline-parallel-size $3 --target-num-virtual-stages-per-pipeline-rank $4 \
		--make-vocab-size-divisible-by 64 >"$OUT_LOG" 2>"$ERR" && $BIN/ckpt_convert --load "$out" \
		--save "$out.back" --from megatron --tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR"; then
		files="model.h5 optim.h5"
		[ $1 = torch ] && files=model.h5
		same_ckpt "dense/MoE layers + MTP: megac -> Megatron $1 (TP $2 x PP $3 x VPP $4) -> megac ($files)" \
			"$V/ck" "$out.back" "$files"
	else
		notok "dense/MoE layers + MTP: megac -> Megatron $1 (TP $2 x PP $3 x VPP $4) -> megac"
		show "$ERR"
	fi
done

# Megatron-FSDP's own run (fsdp.tar.xz): the same model, flags and sequence
# with --use-megatron-fsdp, iteration 2 saved in its fsdp_dtensor format
# (every tensor whole and by name, SwiGLU's fc1 in halves, Adam's state by
# parameter name). Its losses are the plain run's, and its import is the
# torch_dist import's state exactly.
expect_ok "Megatron-FSDP's fsdp_dtensor checkpoint imports with its optimizer state" $BIN/ckpt_convert \
	--load "$W/llama_fsdp_fsdp_dtensor" --save "$W/fsdp_megac" --from megatron --tokenizer-type NullTokenizer \
	--vocab-size 128
same_state "Megatron-FSDP's fsdp_dtensor and Megatron's torch_dist saves of the run import to the same state, bit for bit" \
	"$W/train_megac" "$W/fsdp_megac"
expect_ok "megac -> fsdp_dtensor" $BIN/ckpt_convert --load "$W/fsdp_megac" --save "$W/fsdp_exp" --to megatron \
	--ckpt-format fsdp_dtensor --make-vocab-size-divisible-by 64
expect_ok "and back" $BIN/ckpt_convert --load "$W/fsdp_exp" --save "$W/fsdp_back" --from megatron \
	--tokenizer-type NullTokenizer --vocab-size 128
same_state "megac -> fsdp_dtensor -> megac keeps weights, moments, step and schedule bit for bit" "$W/fsdp_megac" \
	"$W/fsdp_back"
# and without the optimizer's state: the weights alone, both ways
expect_ok "megac -> fsdp_dtensor without Adam's state (--no-optim) -> megac" sh -c "$BIN/ckpt_convert \
	--load $W/fsdp_megac --save $W/fsdp_noopt --to megatron --ckpt-format fsdp_dtensor --no-optim \
	--make-vocab-size-divisible-by 64 && $BIN/ckpt_convert --load $W/fsdp_noopt --save $W/fsdp_noopt_back \
	--from megatron --tokenizer-type NullTokenizer --vocab-size 128 && [ ! -e $W/fsdp_noopt_back/iter_0000002/optim.h5 ]"
same_ckpt "and its weights are the original's" "$W/fsdp_megac" "$W/fsdp_noopt_back" model.h5
# train --load on Megatron-FSDP's folder, saving fsdp_dtensor at iteration 3; resumed from it to 4
rm -f "$W/fsdp3.jsonl" "$W/fsdp4.jsonl"
# shellcheck disable=SC2086
if $BIN/train $TRAIN_FLAGS --load "$W/llama_fsdp_fsdp_dtensor" --train-iters 3 --ckpt-format fsdp_dtensor \
	--save "$W/fsdpsave" --save-interval 1 --metrics-file "$W/fsdp3.jsonl" >"$OUT_LOG" 2>"$ERR" &&
	[ -f "$W/fsdpsave/iter_0000003/.metadata" ] && [ ! -e "$W/fsdpsave/iter_0000003/metadata.json" ] &&
	[ ! -e "$W/fsdpsave/.megac-hdf5" ] && [ "$(cat "$W/fsdpsave/latest_checkpointed_iteration.txt")" = 3 ] &&
	$CMP losses "$W/llama_fsdp_losses.json" "$W/fsdp3.jsonl" 3 1e-5 >"$W/cmp.log" 2>&1; then
	ok "train --load on Megatron-FSDP's folder continues it and saves fsdp_dtensor ($(cat "$W/cmp.log"))"
else
	notok "train --load on Megatron-FSDP's folder continues it and saves fsdp_dtensor"
	show "$ERR"
	show "$W/cmp.log"
fi
# shellcheck disable=SC2086
if $BIN/train $TRAIN_FLAGS --load "$W/fsdpsave" --ckpt-format fsdp_dtensor --save "$W/fsdpsave" --save-interval 1 \
	--metrics-file "$W/fsdp4.jsonl" >"$OUT_LOG" 2>"$ERR" &&
	$CMP losses "$W/llama_fsdp_losses.json" "$W/fsdp4.jsonl" 4 1e-5 >"$W/cmp.log" 2>&1; then
	ok "resumed from its own fsdp_dtensor save, iteration 4 has Megatron's loss ($(cat "$W/cmp.log"))"
else
	notok "resumed from its own fsdp_dtensor save, iteration 4 has Megatron's loss"
	show "$ERR"
	show "$W/cmp.log"
fi
# Megatron-FSDP's run of the MoE + MTP model (fsdp_moe.tar.xz; SequentialMLP,
# the expert bias, a gated shared expert, one depth): it imports with Adam's
# state, megac continues it with Megatron's losses (saving fsdp_dtensor), and
# megac -> fsdp_dtensor -> megac is bit for bit, TEGroupedMLP's names too
setup "Megatron-FSDP's MoE + MTP fixture unpacks" tar -xJf $FIX/fsdp_moe.tar.xz -C $W
if $BIN/ckpt_convert --load "$W/moe_fsdp_fsdp_dtensor" --save "$W/fsdpmoe_megac" --from megatron \
	--tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR" && grep -q "Adam's state at step 2" "$ERR" &&
	$PY -c '
import sys, h5py
f = h5py.File(sys.argv[1] + "/iter_0000002/model.h5")
o = h5py.File(sys.argv[1] + "/iter_0000002/optim.h5")
for p in ["decoder.layers.%d." % l for l in range(2)] + ["mtp.layers.0.transformer_layer."]:
    assert p + "mlp.router.expert_bias" in f, p
    for e in range(4):
        for k in ("linear_fc1", "linear_fc2"):
            n = p + "mlp.experts.local_experts.%d.%s.weight" % (e, k)
            assert n in f and "exp_avg/" + n in o and "exp_avg_sq/" + n in o, n
    n = p + "mlp.shared_experts.linear_fc1.weight"
    assert f[n].shape == (64, 32) and "exp_avg/" + n in o, n
assert "exp_avg/mtp.layers.0.eh_proj.weight" in o' "$W/fsdpmoe_megac" 2>"$W/py.log"; then
	ok "Megatron-FSDP's MoE + MTP save imports: 4 experts a layer and the depth's, expert biases, Adam's state at step 2"
else
	notok "Megatron-FSDP's MoE + MTP save imports with its experts and Adam's state"
	show "$ERR"
	show "$W/py.log"
fi
MOE_FLAGS="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 16 --moe-shared-expert-intermediate-size 32
	--moe-shared-expert-gate --moe-router-score-function sigmoid --moe-router-enable-expert-bias
	--moe-router-load-balancing-type none --moe-aux-loss-coeff 0 --moe-token-dispatcher-type alltoall
	--mtp-num-layers 1"
FLAGS="$TRAIN_FLAGS $MOE_FLAGS" LOSSES="$W/moe_fsdp_losses.json" continues \
	"megac continues Megatron-FSDP's MoE + MTP run with its losses, saving fsdp_dtensor" \
	"$W/moe_fsdp_fsdp_dtensor" "$W/fsdpmoe.jsonl" --ckpt-format fsdp_dtensor --save "$W/fsdpmoe_save" \
	--save-interval 4
for g in "" --moe-grouped-gemm; do
	out="$W/fsdpmoe_exp$g"
	# (the expert names written: SequentialMLP's, or TEGroupedMLP's by expert number)
	want="mtp.layers.0.transformer_layer.mlp.experts.local_experts.3.linear_fc1.weight_w"
	[ -n "$g" ] && want="mtp.layers.0.transformer_layer.mlp.experts.linear_fc1.weight3_w"
	if $BIN/ckpt_convert --load "$W/fsdpmoe_megac" --save "$out" --to megatron --ckpt-format fsdp_dtensor $g \
		--make-vocab-size-divisible-by 64 >"$OUT_LOG" 2>"$ERR" && $BIN/ckpt_convert --load "$out" \
		--save "$out.back" --from megatron --tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR" &&
		grep -q "$want" "$out/iter_0000002/.metadata"; then
		same_state "MoE + MTP: megac -> fsdp_dtensor ${g:-(SequentialMLP)} -> megac with Adam's state, bit for bit" \
			"$W/fsdpmoe_megac" "$out.back"
	else
		notok "MoE + MTP: megac -> fsdp_dtensor $g -> megac (with $want)"
		show "$ERR"
	fi
done
# bad fsdp_dtensor input: refused by name, nothing written (megac's export forged)
setup "the forged fsdp_dtensor metadata, one file a defect" sh -c "mkdir -p $W/fforged && $PY \
	tests/prog/py/dcp_forge.py $W/fsdp_exp/iter_0000002 nohalf expert byindex --out $W/fforged >/dev/null"
bad_fsdp() { # HOW EXPECTED
	rm -rf "$W/bad" "$W/bad_out"
	cp -r "$W/fsdp_exp" "$W/bad"
	if cp "$W/fforged/$1.metadata" "$W/bad/iter_0000002/.metadata" &&
		! $BIN/ckpt_convert --load "$W/bad" --save "$W/bad_out" --from megatron --tokenizer-type NullTokenizer \
			--vocab-size 128 >"$OUT_LOG" 2>"$ERR" && grep -q -- "$2" "$ERR" && [ ! -e "$W/bad_out" ]; then
		ok "fsdp_dtensor forged ($1): refused ($(head -c 200 "$ERR" | tr '\n' ' '))"
	else
		notok "fsdp_dtensor forged ($1): refused with '$2', nothing written"
		show "$ERR"
	fi
}
bad_fsdp nohalf "linear_fc1.weight_w' has no other half"
bad_fsdp expert "no tensor 'decoder.layers.0.mlp.linear_fc2.weight'"
bad_fsdp byindex "indexed by position"
# megac's Megatron-FSDP on two data-parallel ranks, with Megatron's flags for it
LOSSES="$W/llama_fsdp_losses.json" RUN="mpirun --allow-run-as-root --oversubscribe -np 2" continues \
	"--use-megatron-fsdp on 2 ranks continues Megatron-FSDP's folder, saving fsdp_dtensor" \
	"$W/llama_fsdp_fsdp_dtensor" "$W/fsdp5.jsonl" --global-batch-size 2 --use-megatron-fsdp \
	--use-distributed-optimizer --data-parallel-sharding-strategy optim_grads_params --auto-detect-ckpt-format \
	--ckpt-format fsdp_dtensor --save "$W/fsdpsave2" --save-interval 4
if [ -f "$W/fsdpsave2/iter_0000004/.metadata" ] && [ ! -e "$W/fsdpsave2/.megac-hdf5" ]; then
	ok "and its iteration 4 is in fsdp_dtensor"
else
	notok "and its iteration 4 is in fsdp_dtensor"
fi

# bad torch_dist input: a clear error naming the file, nothing written
bad_dist() { # name, expected message part, command that damages a copy in $W/bad
	rm -rf "$W/bad" "$W/bad_out"
	cp -r "$W/gpt_tp2_torch_dist" "$W/bad"
	(cd "$W/bad/iter_0000001" && eval "$3")
	if $BIN/ckpt_convert --load "$W/bad" --save "$W/bad_out" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 128 >"$OUT_LOG" 2>"$ERR"; then
		notok "$1: accepted"
	elif grep -q -- "$2" "$ERR" && [ ! -e "$W/bad_out" ]; then
		ok "$1: refused ($(head -c 200 "$ERR" | tr '\n' ' '))"
	else
		notok "$1: not the expected error ($2), or output left behind"
		show "$ERR"
	fi
}
bad_dist "a truncated .distcp" "past the end of the file" 'head -c 20000 __1_0.distcp >t && mv t __1_0.distcp'
bad_dist "a missing .distcp" "__1_0.distcp" 'rm __1_0.distcp'
# (the word embeddings' chunk: 9769 bytes at 41109, its 8192 data bytes in the middle)
bad_dist "a flipped byte inside a chunk" "CRC" \
	'$PY -c "
f = open(\"__0_0.distcp\", \"r+b\"); f.seek(46000); b = f.read(1); f.seek(46000); f.write(bytes([b[0] ^ 1]))"'
bad_dist "a malicious .metadata" "refusing global '[a-z]*.system'" \
	'$PY -c "
import pickle, os
class E:
    def __reduce__(self): return (os.system, (\"touch pwned\",))
pickle.dump(E(), open(\".metadata\", \"wb\"))"'
if [ -e "$W/bad/iter_0000001/pwned" ]; then notok "the malicious pickle ran"; fi
# metadata forged with one defect each (tests/prog/py/dcp_forge.py); "none"
# re-writes it unchanged, which must still import (the forger's own check)
setup "the forged metadata, one file a defect" sh -c "mkdir -p $W/forged && $PY tests/prog/py/dcp_forge.py \
	$W/gpt_tp2_torch_dist/iter_0000001 overlap gap outside nostorage unknown none --out $W/forged >/dev/null"
forge() { # HOW EXPECTED
	bad_dist "forged metadata: $1" "$2" "cp $W/forged/$1.metadata .metadata"
}
forge overlap "chunks 0 and 1 of tensor 'embedding.word_embeddings.weight' overlap"
forge gap "hold 2048 of its 4096 elements"
forge outside "reaches outside it"
forge nostorage "has no storage entry"
forge unknown "refusing global 'evilpayload.Gadget'"
rm -rf "$W/bad" "$W/bad_out"
cp -r "$W/gpt_tp2_torch_dist" "$W/bad"
if cp "$W/forged/none.metadata" "$W/bad/iter_0000001/.metadata" &&
	$BIN/ckpt_convert --load "$W/bad" --save "$W/bad_out" --from megatron --tokenizer-type NullTokenizer \
		--vocab-size 128 >"$OUT_LOG" 2>"$ERR"; then
	ok "forged metadata without a defect imports (the forgeries above differ in that defect only)"
else
	notok "forged metadata without a defect imports"
	show "$ERR"
fi

# make check-long with MEGATRON_LM (a Megatron-LM git repository or tree):
# Megatron itself loads what megac writes. megatron_env.sh makes a venv with
# PyPI's torch (about 3 GB, kept in $MEGATRON_ENV, default build/megatron-env);
# make_fixtures.py load builds each model at TP1 and TP2 with Megatron's own
# code, loads megac's torch_dist export (dist_checkpointing.load) and legacy
# TP2 export strictly, and its logits must be the ones Megatron recorded.
if long_only && [ -n "${MEGATRON_LM:-}" ]; then
	MENV=${MEGATRON_ENV:-$MEGAC_BUILD/megatron-env}
	if ENV=$(sh $FIX/megatron_env.sh "$MENV" "$MEGATRON_LM" 2>"$ERR"); then
		eval "$ENV"
		ok "a Megatron-LM $COMMIT environment (megatron-core $MCORE)"
		for m in gpt llama; do
			for f in torch_dist torch; do
				tp=2
				[ $f = torch ] || tp=1
				out="$W/${m}_to_${f}"
				if ! $BIN/ckpt_convert --load "$W/${m}_tp1_megac" --save "$out" --to megatron --ckpt-format $f \
					--target-tensor-parallel-size $tp --make-vocab-size-divisible-by 64 >"$OUT_LOG" 2>"$ERR"; then
					notok "$m: export to $f"
					show "$ERR"
					continue
				fi
				for ltp in 1 2; do
					[ $f = torch ] && [ $ltp = 1 ] && continue
					run="$PY"
					[ $ltp = 2 ] && run="$PY -m torch.distributed.run --nproc-per-node 2 --master-port 2955$ltp"
					if OMP_NUM_THREADS=1 $run $FIX/make_fixtures.py load --megatron "$MTREE" --model $m --tp $ltp \
						--src "$out" --logits "$out.tp$ltp.npy" >"$W/meg.log" 2>&1 &&
						$CMP logits "$out.tp$ltp.npy" "$W/${m}_logits.npy" >"$W/cmp.log" 2>&1; then
						ok "$m: Megatron loads megac's $f export at TP$ltp strictly, with its own logits ($(cat "$W/cmp.log"))"
					else
						notok "$m: Megatron loads megac's $f export at TP$ltp"
						show "$W/meg.log" 15
						show "$W/cmp.log"
					fi
				done
			done
		done
		# the MoE + MTP model: Megatron loads megac's export of its import
		# strictly, with its own logits and the MTP depth's as megac's
		for f in torch_dist torch; do
			out="$W/moe_to_meg_$f"
			if $BIN/ckpt_convert --load "$M1" --save "$out" --to megatron --ckpt-format $f \
				--make-vocab-size-divisible-by 64 >"$OUT_LOG" 2>"$ERR" &&
				OMP_NUM_THREADS=1 $PY $FIX/make_fixtures.py load --megatron "$MTREE" --model moe --tp 1 \
					--src "$out" --logits "$out.npy" --mtp-logits "$out.mtp.npy" >"$W/meg.log" 2>&1 &&
				$CMP logits "$out.npy" "$W/moe_logits.npy" >"$W/cmp.log" 2>&1 &&
				$CMP logits "$out.mtp.npy" "$W/moe_mtp_logits.npy" >"$W/cmp2.log" 2>&1; then
				ok "moe: Megatron loads megac's MoE + MTP $f export strictly, with its own logits ($(cat "$W/cmp.log")) and MTP logits ($(cat "$W/cmp2.log"))"
			else
				notok "moe: Megatron loads megac's MoE + MTP $f export"
				show "$ERR"
				show "$W/meg.log" 15
				show "$W/cmp.log"
				show "$W/cmp2.log"
			fi
		done
	else
		notok "no Megatron-LM environment from MEGATRON_LM=$MEGATRON_LM"
		show "$ERR"
	fi
	if [ -n "${MTREE:-}" ]; then
		# Megatron continues megac's export of its own run: weights, moments, step, schedule
		if OMP_NUM_THREADS=1 $PY $FIX/make_fixtures.py train --megatron "$MTREE" --out "$W" --model llama \
			--load "$W/train_dist" --losses "$W/meg_cont.json" >"$W/meg.log" 2>&1 &&
			$CMP losses "$W/llama_train_losses.json" "$W/meg_cont.json" 3 1e-5 >"$W/cmp.log" 2>&1; then
			ok "Megatron continues megac's torch_dist export with its optimizer state, with its own losses ($(cat "$W/cmp.log"))"
		else
			notok "Megatron continues megac's torch_dist export with its optimizer state"
			show "$W/meg.log" 15
			show "$W/cmp.log"
		fi
	fi
	if [ -n "${MTREE:-}" ]; then
		# Megatron-FSDP (one rank, fsdp_env.sh's einops) continues megac's
		# fsdp_dtensor export of its run: weights, moments, step, schedule
		if LIB=$(mkdir -p "$MENV/fsdp-pylib" && sh $FIX/fsdp_env.sh "$MENV/fsdp-pylib" "$PY" 2>"$ERR") &&
			PYTHONPATH="$LIB" OMP_NUM_THREADS=1 $PY $FIX/make_fsdp_fixture.py train --megatron "$MTREE" --out "$W" \
				--load "$W/fsdp_exp" --losses "$W/meg_fsdp.json" >"$W/meg.log" 2>&1 &&
			$CMP losses "$W/llama_fsdp_losses.json" "$W/meg_fsdp.json" 3 0 >"$W/cmp.log" 2>&1; then
			ok "Megatron-FSDP continues megac's fsdp_dtensor export with its own losses exactly ($(cat "$W/cmp.log"))"
		else
			notok "Megatron-FSDP continues megac's fsdp_dtensor export"
			show "$ERR"
			show "$W/meg.log" 15
			show "$W/cmp.log"
		fi
	fi
	if [ -n "${MTREE:-}" ]; then
		# bf16: Megatron's mixed-precision optimizer (bf16 weights, fp32 main
		# weights in optimizer.state.fp32_param, its state nested one level
		# deeper). megac continues it within bf16's rounding (rtol 1e-3, where
		# losing the moments costs 0.6%), and Megatron continues megac's
		# bf16 export of it with its own losses exactly.
		mkdir -p "$W/bf"
		if OMP_NUM_THREADS=1 $PY $FIX/make_fixtures.py train --megatron "$MTREE" --out "$W/bf" --model llama --bf16 \
			>"$W/meg.log" 2>&1 &&
			$BIN/ckpt_convert --load "$W/bf/llama_train_bf16_torch_dist" --save "$W/bf/megac" --from megatron \
				--tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR" &&
			$BIN/train $TRAIN_FLAGS --bf16 --load "$W/bf/megac" --metrics-file "$W/bf/m.jsonl" >"$OUT_LOG" 2>"$ERR" &&
			$CMP losses "$W/bf/llama_train_bf16_losses.json" "$W/bf/m.jsonl" 3 1e-3 >"$W/cmp.log" 2>&1; then
			ok "bf16: megac continues Megatron's mixed-precision run ($(cat "$W/cmp.log"))"
		else
			notok "bf16: megac continues Megatron's mixed-precision run"
			show "$W/meg.log" 10
			show "$ERR"
			show "$W/cmp.log"
		fi
		if $BIN/ckpt_convert --load "$W/bf/megac" --save "$W/bf/back" --to megatron --ckpt-format torch_dist \
			--dtype bf16 --make-vocab-size-divisible-by 64 >"$OUT_LOG" 2>"$ERR" &&
			OMP_NUM_THREADS=1 $PY $FIX/make_fixtures.py train --megatron "$MTREE" --out "$W/bf" --model llama \
				--bf16 --load "$W/bf/back" --losses "$W/bf/meg_cont.json" >"$W/meg.log" 2>&1 &&
			$CMP losses "$W/bf/llama_train_bf16_losses.json" "$W/bf/meg_cont.json" 3 0 >"$W/cmp.log" 2>&1; then
			ok "bf16: Megatron continues megac's bf16 torch_dist export with its own losses exactly ($(cat "$W/cmp.log"))"
		else
			notok "bf16: Megatron continues megac's bf16 torch_dist export"
			show "$W/meg.log" 15
			show "$ERR"
			show "$W/cmp.log"
		fi
	fi
	if [ -n "${MTREE:-}" ]; then
		# Megatron's distributed optimizer, run now by this Megatron (the
		# fixture's run again, TP1 and TP2): train --load continues it with
		# Megatron's losses from its dp_reshardable buckets
		mkdir -p "$W/do"
		if OMP_NUM_THREADS=1 $PY $FIX/make_fixtures.py train --megatron "$MTREE" --out "$W/do" --model llama \
			--dist-opt >"$W/meg.log" 2>&1 && OMP_NUM_THREADS=1 $PY -m torch.distributed.run --nproc-per-node 2 \
			--master-port 29543 $FIX/make_fixtures.py train --megatron "$MTREE" --out "$W/do" --model llama \
			--dist-opt --tp 2 >>"$W/meg.log" 2>&1; then
			for v in distopt distopt_tp2; do
				LOSSES="$W/do/llama_train_${v}_losses.json" continues \
					"this Megatron's $v run: train --load continues it with its losses" \
					"$W/do/llama_train_${v}_torch_dist" "$W/do/m_$v.jsonl" --save "$W/do/s_$v" --save-interval 100
			done
		else
			notok "Megatron trains with its distributed optimizer on the CPU"
			show "$W/meg.log" 10
		fi
	fi
elif long_only; then
	ok "# SKIP Megatron loading megac's exports: set MEGATRON_LM to a Megatron-LM repository or tree"
fi
