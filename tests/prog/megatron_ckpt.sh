# megatron_ckpt.sh - checkpoints that Megatron Core itself wrote
# (tests/fixtures/megatron-ckpt: a GPT and a Llama-style model at TP1 and TP2,
# legacy torch and torch_dist, with Megatron's logits) unpack to the files and
# sha256s of their manifest; lib/ckpt's reader (through
# tests/tools/megac_torch_pickle) loads every legacy model_optim_rng.pt, and
# the tensors it reads give Megatron's logits in the fixtures' NumPy forward
# pass (check_fixtures.py dumps) and reassemble from the TP2 shards into the
# TP1 tensors exactly; ckpt_convert --from megatron imports every legacy
# checkpoint and megac's own forward pass on it gives Megatron's logits
# (|difference| < 1e-4).
. tests/prog_lib.sh
W=$(new_tmp megatron_ckpt)
TOOL=$MEGAC_BUILD/tools/megac_torch_pickle
FIX=tests/fixtures/megatron-ckpt
PY=/usr/bin/python3
ERR=$W/err.log
OUT_LOG=$W/out.log

setup "the fixtures unpack" sh -c "tar -xJf $FIX/gpt.tar.xz -C $W && tar -xJf $FIX/llama.tar.xz -C $W &&
	cp $FIX/manifest.json $W/"

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
for m in gpt llama; do
	for tp in 1 2; do
		d="$W/${m}_tp${tp}_megac"
		if $BIN/ckpt_convert --load "$W/${m}_tp${tp}_torch" --save "$d" --from megatron --tokenizer-type NullTokenizer \
			--vocab-size 128 >"$OUT_LOG" 2>"$ERR" && $LOGITS "$d" "$W/${m}_tokens.npy" "$d.npy" 2>"$ERR" &&
			$PY -c '
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, (a.shape, b.shape)
d = float(np.abs(a - b).max())
assert d < 1e-4, d
print("max |difference| %.2g of logits up to %.2g" % (d, float(np.abs(b).max())))' "$d.npy" "$W/${m}_logits.npy" \
			>"$W/cmp.log" 2>&1; then
			ok "$m TP$tp: imported with --from megatron, megac's logits are Megatron's ($(cat "$W/cmp.log"))"
		else
			notok "$m TP$tp: imported with --from megatron, megac's logits are Megatron's"
			show "$ERR"
			show "$W/cmp.log"
		fi
	done
done
