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
# refused naming the file.
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

# the torch_dist checkpoints (PyTorch Distributed Checkpoint: global tensors in
# chunks, the layers stacked) import as well, with the same logits
for m in gpt llama; do
	for tp in 1 2; do
		d="$W/${m}_tp${tp}_dist_megac"
		if $BIN/ckpt_convert --load "$W/${m}_tp${tp}_torch_dist" --save "$d" --from megatron \
			--tokenizer-type NullTokenizer --vocab-size 128 >"$OUT_LOG" 2>"$ERR" &&
			$LOGITS "$d" "$W/${m}_tokens.npy" "$d.npy" 2>"$ERR" &&
			$PY -c '
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, (a.shape, b.shape)
d = float(np.abs(a - b).max())
assert d < 1e-4, d
print("max |difference| %.2g" % d)' "$d.npy" "$W/${m}_logits.npy" >"$W/cmp.log" 2>&1; then
			ok "$m TP$tp torch_dist: imported with --from megatron, megac's logits are Megatron's ($(cat "$W/cmp.log"))"
		else
			notok "$m TP$tp torch_dist: imported with --from megatron, megac's logits are Megatron's"
			show "$ERR"
			show "$W/cmp.log"
		fi
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
						$PY -c '
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
d = float(np.abs(a - b).max())
assert a.shape == b.shape and d < 1e-4, (a.shape, b.shape, d)
print("max |difference| %.2g" % d)' "$out.tp$ltp.npy" "$W/${m}_logits.npy" >"$W/cmp.log" 2>&1; then
						ok "$m: Megatron loads megac's $f export at TP$ltp strictly, with its own logits ($(cat "$W/cmp.log"))"
					else
						notok "$m: Megatron loads megac's $f export at TP$ltp"
						show "$W/meg.log" 15
						show "$W/cmp.log"
					fi
				done
			done
		done
	else
		notok "no Megatron-LM environment from MEGATRON_LM=$MEGATRON_LM"
		show "$ERR"
	fi
elif long_only; then
	ok "# SKIP Megatron loading megac's exports: set MEGATRON_LM to a Megatron-LM repository or tree"
fi
