# torch_pickle.sh - lib/ckpt/pickle.h and torch_zip.h against PyTorch
# (Debian's torch in /usr/bin/python3, through tests/tools/megac_torch_pickle
# and tests/prog/py/torch_pickle.py): torch.save files of a state dict like
# Megatron's model_optim_rng.pt (OrderedDicts of fp32/bf16/fp16/int64
# tensors, a transposed view, tensors sharing a storage, an
# argparse.Namespace, Python's and numpy's RNG states, optimizer state, odd
# floats, big ints, sets) read to the same values, with views of one storage
# sharing it; our writer's files load in torch.load (weights_only too) to the
# same values, members stored and 64-byte aligned; pickles calling os.system
# are refused naming the global; truncated and damaged pickles and zip
# records end in an error, never a crash.
. tests/prog_lib.sh
W=$(new_tmp torch_pickle)
TOOL=$MEGAC_BUILD/tools/megac_torch_pickle
PY=/usr/bin/python3
REF=tests/prog/py/torch_pickle.py
ERR=$W/err.log
OUT_LOG=$W/out.log

setup "torch.save writes the test files" $PY $REF make "$W"

# our reader's dumps and our writer's files first, then one Python checks them all
CHECKS=""
for n in full plain proto4; do
	if $TOOL dump "$W/$n.pt" "$W/$n.json" 2>"$ERR"; then
		CHECKS="$CHECKS dump:$n"
	else
		notok "read $n.pt"
		show "$ERR"
	fi
done
for n in full plain proto4 weights; do
	if $TOOL resave "$W/$n.pt" "$W/$n.out.pt" 2>"$ERR"; then
		CHECKS="$CHECKS load:$n:0"
		[ $n = weights ] && CHECKS="$CHECKS load:$n:1"
	else
		notok "write $n.out.pt"
		show "$ERR"
	fi
done
# shellcheck disable=SC2086
$PY $REF check "$W" $CHECKS || notok "the Python checks stopped (exit $?)"

expect_fail "a pickle of os.system (Python's, through posix.system) is refused naming it" \
	"refusing global 'posix.system'" $TOOL load "$W/evil.pt"
expect_fail "a hand-written GLOBAL 'os system' + REDUCE is refused naming it" \
	"refusing global 'os.system'" $TOOL load "$W/evil2.pt"

for n in plain proto4; do
	if $TOOL fuzz "$W/$n.pt" "$W" >"$W/fuzz.log" 2>&1; then
		ok "$n.pt truncated at every byte, every byte flipped, zip records damaged: no crash ($(tail -n 1 "$W/fuzz.log"))"
	else
		notok "fuzzing $n.pt"
		show "$W/fuzz.log"
	fi
done
