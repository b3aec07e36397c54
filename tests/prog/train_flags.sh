#!/bin/sh
# train_flags.sh - Megatron's training flags that change the numbers in
# small ways, each checked by a property an implementation cannot fake:
# --decoupled-lr (the embedding and output layer on their own schedule),
# --no-position-embedding (rope only).
. tests/prog_lib.sh
W=$(new_tmp train_flags)
ERR=$W/err
OUT_LOG=$W/out
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1

T="$BIN/train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
	--max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --min-lr 1e-4 \
	--mock-data --tokenizer-type NullTokenizer --vocab-size 500 --untie-embeddings-and-output-weights \
	--eval-iters 0 --log-interval 1 --seed 7 --lr-warmup-iters 1 --lr-decay-style cosine"

# same_tensors A B NAMES...: prints "same" or "differ" for each tensor of two model.h5 files
cat >"$W/tensors.py" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for n in sorted(k for k in a if isinstance(a[k], h5py.Dataset)):
    print(n, "same" if np.array_equal(a[n][()], b[n][()]) else "differ")
PY

# ---- --decoupled-lr 0: the word embeddings and the output layer never move,
# everything else does; --decoupled-lr equal to --lr changes nothing at all
expect_ok "the initial model" $T --train-iters 0 --save "$W/init"
expect_ok "--decoupled-lr 0 --decoupled-min-lr 0" $T --train-iters 3 --decoupled-lr 0 --decoupled-min-lr 0 \
	--save "$W/dec0" --save-interval 3
$PY "$W/tensors.py" "$W/init/iter_0000000/model.h5" "$W/dec0/iter_0000003/model.h5" >"$W/dec0.txt"
if grep -q "^embedding.word_embeddings.weight same$" "$W/dec0.txt" && grep -q "^output_layer.weight same$" "$W/dec0.txt" &&
	[ "$(grep -c ' same$' "$W/dec0.txt")" -eq 2 ] && [ "$(grep -c ' differ$' "$W/dec0.txt")" -gt 10 ]; then
	ok "--decoupled-lr 0: the embedding and output layer stay, every other tensor trains"
else
	notok "--decoupled-lr 0: the embedding and output layer stay, every other tensor trains"
	show "$W/dec0.txt" 30
fi
expect_ok "no --decoupled-lr" sh -c "$T --train-iters 3 >$W/plain.log"
expect_ok "--decoupled-lr equal to --lr" sh -c "$T --train-iters 3 --decoupled-lr 1e-3 --decoupled-min-lr 1e-4 >$W/same.log"
if [ "$(grep -o 'lm loss: [^|]*' "$W/plain.log")" = "$(grep -o 'lm loss: [^|]*' "$W/same.log")" ] &&
	[ -n "$(grep -o 'lm loss: [^|]*' "$W/plain.log")" ]; then
	ok "--decoupled-lr equal to --lr: the same losses"
else
	notok "--decoupled-lr equal to --lr: the same losses"
fi
expect_ok "--decoupled-lr 1e-2" sh -c "$T --train-iters 3 --decoupled-lr 1e-2 >$W/big.log"
if [ "$(grep -o 'lm loss: [^|]*' "$W/plain.log" | tail -n 1)" != "$(grep -o 'lm loss: [^|]*' "$W/big.log" | tail -n 1)" ] &&
	[ "$(grep -o 'learning rate: [^|]*' "$W/plain.log")" = "$(grep -o 'learning rate: [^|]*' "$W/big.log")" ]; then
	ok "--decoupled-lr 1e-2: other losses, the log's learning rate still the default group's (as Megatron)"
else
	notok "--decoupled-lr 1e-2: other losses, the log's learning rate still the default group's"
fi

# ---- --no-position-embedding: Megatron's deprecated spelling, allowed with rope only
expect_ok "--no-position-embedding with rope" sh -c "$T --train-iters 2 --position-embedding-type rope >$W/r1.log"
expect_ok "--no-position-embedding with rope, given" sh -c "$T --train-iters 2 --position-embedding-type rope \
	--no-position-embedding >$W/r2.log"
if [ "$(grep -o 'lm loss: [^|]*' "$W/r1.log")" = "$(grep -o 'lm loss: [^|]*' "$W/r2.log")" ]; then
	ok "--no-position-embedding with rope changes nothing"
else
	notok "--no-position-embedding with rope changes nothing"
fi
expect_fail "--no-position-embedding without rope" "give --position-embedding-type rope instead" \
	$T --train-iters 2 --no-position-embedding
# ---- --calculate-per-token-loss: the gradient is the global token mean, so
# with unequal masks (--eod-mask-loss) how the batch is cut into micro-batches
# and data-parallel ranks no longer matters, and it equals the default of one
# micro-batch holding the whole batch; the default depends on the cut
P="$BIN/train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 \
	--max-position-embeddings 32 --global-batch-size 4 --lr 1e-3 --mock-data --tokenizer-type NullTokenizer \
	--vocab-size 50 --null-tokenizer-eod-id 3 --eod-mask-loss --eval-iters 0 --log-interval 1 --train-iters 4 \
	--hidden-dropout 0 --attention-dropout 0"
for mb in 1 2 4; do
	expect_ok "per-token loss, micro-batch $mb" sh -c "$P --micro-batch-size $mb --calculate-per-token-loss >$W/pt$mb.log"
	expect_ok "default loss, micro-batch $mb" sh -c "$P --micro-batch-size $mb >$W/mean$mb.log"
done
expect_ok "per-token loss, DP2 x micro-batch 1" sh -c "OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root \
	--oversubscribe -np 2 $P --micro-batch-size 1 --calculate-per-token-loss >$W/ptdp.log"
if $PY - "$W" <<'PY' >"$W/py.err" 2>&1; then
import re, sys
def losses(n):
    return [float(x) for x in re.findall(r"lm loss: ([0-9.E+-]+)", open(sys.argv[1] + "/" + n + ".log").read())]
ref = losses("mean4")  # one micro-batch: the global token mean either way
assert len(ref) == 4
for n in ("pt1", "pt2", "pt4", "ptdp"):
    got = losses(n)
    assert len(got) == 4 and all(abs(a - b) <= 2e-6 * abs(b) for a, b in zip(got, ref)), (n, got, ref)
m1 = losses("mean1")
assert max(abs(a - b) / b for a, b in zip(m1, ref)) > 5e-6, ("the default should depend on the cut", m1, ref)
PY
	ok "--calculate-per-token-loss: the same losses whatever the micro-batches and DP ranks; the default differs"
else
	notok "--calculate-per-token-loss"
	show "$W/py.err"
fi
# ---- --step-batch-size-schedule: Megatron's step-wise global batch, checked
# against Megatron's calculator written out in Python (the iterations and the
# batch of each), against constant-batch runs on the same samples, and
# across a resume
B="$BIN/train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
	--max-position-embeddings 16 --micro-batch-size 1 --lr 1e-3 --mock-data --tokenizer-type NullTokenizer \
	--vocab-size 50 --eval-iters 0 --log-interval 1 --train-samples 40 --lr-decay-samples 40 \
	--hidden-dropout 0 --attention-dropout 0"
SCHED="0:2 64:4 0.128K:8"
expect_ok "a step schedule" sh -c "$B --step-batch-size-schedule '$SCHED' >$W/bs.log"
expect_ok "a one-step schedule" sh -c "$B --step-batch-size-schedule 0:4 >$W/bs4.log"
expect_ok "the constant batch of 4" sh -c "$B --global-batch-size 4 >$W/g4.log"
expect_ok "the constant batch of 2" sh -c "$B --global-batch-size 2 >$W/g2.log"
expect_ok "a step schedule, saved at iteration 3" sh -c "$B --step-batch-size-schedule '$SCHED' --exit-interval 3 \
	--save $W/bsck --save-interval 100 >$W/bs_a.log"
expect_ok "a step schedule, resumed" sh -c "$B --step-batch-size-schedule '$SCHED' --load $W/bsck >$W/bs_b.log"
if $PY - "$W" "$SCHED" <<'PY' >"$W/py.err" 2>&1; then
import re, sys
W, sched = sys.argv[1], sys.argv[2]
# Megatron's StepBatchsizeNumMicroBatchesCalculator and update_train_iters, seq_length 16
def num(v):
    v = v.strip().upper(); m = 1
    for suf, mul in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if v.endswith(suf): m = mul; v = v[:-1]; break
    return int(float(v) * m)
entries = sorted((num(t) // 16, num(b)) for t, b in (e.split(":") for e in sched.replace(",", " ").split()))
def size(consumed):
    bs = entries[0][1]
    for thr, b in entries:
        if consumed >= thr: bs = b
        else: break
    return bs
want, consumed = [], 0
while consumed < 40:
    want.append(size(consumed)); consumed += want[-1]
def field(n, key):
    return [float(x) for x in re.findall(key + r": +([0-9.E+-]+) \|", open(W + "/" + n + ".log").read())]
got = [int(x) for x in field("bs", "global batch size")]
assert got == want, (got, want)
loss = lambda n: field(n, "lm loss")
# one step: the constant batch of 4, the same numbers
assert loss("bs4") == loss("g4") and len(loss("g4")) == 10, (loss("bs4"), loss("g4"))
# the first iterations (batch 2 up to 4 samples) are the constant batch of 2's
assert loss("bs")[:2] == loss("g2")[:2], (loss("bs"), loss("g2"))
assert loss("bs")[2] != loss("g2")[2]
# the resumed run continues the uninterrupted one exactly
assert loss("bs_a") + loss("bs_b") == loss("bs"), (loss("bs_a"), loss("bs_b"), loss("bs"))
print("batches", got)
PY
	ok "--step-batch-size-schedule: Megatron's batches, the constant batch's numbers, exact resume ($(tail -n 1 "$W/py.err"))"
else
	notok "--step-batch-size-schedule"
	show "$W/py.err"
fi
expect_fail "a step schedule with --global-batch-size" "cannot specify both --step-batch-size-schedule and --global-batch-size" \
	$B --step-batch-size-schedule 0:2 --global-batch-size 2
expect_fail "a step schedule not starting at 0" "the first entry must have threshold 0" \
	$B --step-batch-size-schedule "16:2 64:4"
expect_fail "a batch the data-parallel size does not divide" "is not divisible by --micro-batch-size 2" \
	$B --step-batch-size-schedule "0:2 64:3" --micro-batch-size 2
# ---- --apply-layernorm-1p: norm weights stored as w - 1. The checkpoint
# records it, a resume without the flag is refused, and the same checkpoint
# with 1 added to its norms and the record dropped is the same model to the
# training forward (megac_logits) and to the server's engine (megac_generate)
L1="$T --train-iters 3 --apply-layernorm-1p --normalization RMSNorm --position-embedding-type rope --swiglu"
expect_ok "--apply-layernorm-1p trains" sh -c "$L1 --save $W/ln1p --save-interval 3 >$W/ln1p.log"
expect_fail "a 1p checkpoint resumed without the flag" "--apply-layernorm-1p: on in the checkpoint, off from the flags" \
	$T --train-iters 4 --normalization RMSNorm --position-embedding-type rope --swiglu --load "$W/ln1p"
cp -r "$W/ln1p" "$W/plain"
if $PY - "$W/plain/iter_0000003/model.h5" <<'PY' >"$W/py.err" 2>&1; then
import json, sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    cfg = json.loads(f.attrs["config"])
    assert cfg.pop("apply_layernorm_1p") is True
    f.attrs["config"] = json.dumps(cfg)
    norms = [n for n in f if "norm" in n and n.endswith("weight")]
    assert len(norms) == 5, norms  # 2 layers x 2 + the final norm
    for n in norms:
        w = f[n][()]
        assert np.abs(w).max() < 0.05, (n, np.abs(w).max())  # zero-centred, trained 3 steps
        d = f[n]
        d[...] = w + np.float32(1)
        # the checksums of docs/checkpoint-format.md
        import zlib
        d.attrs["crc32"] = np.uint32(zlib.crc32(d[()].tobytes()))
        R = int(d.attrs["crc32_block_rows"])
        d.attrs["crc32_blocks"] = np.array([zlib.crc32(d[i * R:(i + 1) * R].tobytes())
                                            for i in range(len(d.attrs["crc32_blocks"]))], dtype=np.uint32)
PY
	ok "the 1p checkpoint records the flag; its norm weights are near 0"
else
	notok "the 1p checkpoint records the flag; its norm weights are near 0"
	show "$W/py.err"
fi
$PY -c "import numpy as np; np.save('$W/ids.npy', (np.arange(24, dtype=np.int32).reshape(2, 12) * 7) % 500)"
echo '[[5, 17, 42, 7], [100, 3]]' >"$W/prompts.json"
if $MEGAC_BUILD/tools/megac_logits "$W/ln1p" "$W/ids.npy" "$W/l1p.npy" 2>"$W/l.err" &&
	$MEGAC_BUILD/tools/megac_logits "$W/plain" "$W/ids.npy" "$W/lplain.npy" 2>>"$W/l.err" &&
	$MEGAC_BUILD/tools/megac_generate "$W/ln1p" "$W/prompts.json" 6 "$W/g1p.json" 2>>"$W/l.err" &&
	$MEGAC_BUILD/tools/megac_generate "$W/plain" "$W/prompts.json" 6 "$W/gplain.json" 2>>"$W/l.err" &&
	$PY -c "
import json, sys, numpy as np
a, b = np.load('$W/l1p.npy'), np.load('$W/lplain.npy')
assert a.shape == b.shape and np.abs(a - b).max() < 1e-5, np.abs(a - b).max()
g, h = json.load(open('$W/g1p.json')), json.load(open('$W/gplain.json'))
assert [x['tokens'] for x in g] == [x['tokens'] for x in h]
assert max(abs(p - q) for x, y in zip(g, h) for p, q in zip(x['logprobs'], y['logprobs'])) < 1e-5
" 2>>"$W/l.err"; then
	ok "the 1p model and its plain twin: the same logits (training forward) and generations (server engine)"
else
	notok "the 1p model and its plain twin"
	show "$W/l.err"
fi
expect_fail "a 1p model to Hugging Face" "exporting it to Hugging Face (weights + 1) is not in megac yet" \
	$BIN/ckpt_convert --load "$W/ln1p" --save "$W/hf1p" --to hf
# ---- --use-checkpoint-args: the model (and tokenizer) from the checkpoint.
# A resume that names no model or tokenizer flag continues a run exactly;
# the server and report_memory take the model from it too.
UM="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --group-query-attention --num-query-groups 2 \
	--seq-length 16 --max-position-embeddings 16 --position-embedding-type rope --rotary-base 500000 \
	--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --disable-bias-linear --untie-embeddings-and-output-weights \
	--apply-layernorm-1p --tokenizer-type NullTokenizer --vocab-size 500"
UR="--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --mock-data --eval-iters 0 --log-interval 1 --seed 7 \
	--train-iters 5"
expect_ok "a Llama-shaped run of 5" sh -c "$BIN/train $UM $UR >$W/u5.log"
expect_ok "the same, stopped at 3" sh -c "$BIN/train $UM $UR --exit-interval 3 --save $W/uck --save-interval 100 >$W/u3.log"
expect_ok "resumed with --use-checkpoint-args and no model or tokenizer flags" sh -c \
	"$BIN/train $UR --use-checkpoint-args --load $W/uck >$W/u45.log 2>$W/u45.err"
if [ "$(grep -o 'lm loss: [^|]*' "$W/u5.log" | tail -n 2)" = "$(grep -o 'lm loss: [^|]*' "$W/u45.log")" ] &&
	[ -n "$(grep -o 'lm loss: [^|]*' "$W/u45.log")" ] && grep -q "using the tokenizer .* records (NullTokenizer" "$W/u45.err" &&
	grep -q -- "--use-checkpoint-args: [0-9]* model settings from .*--apply-layernorm-1p on" "$W/u45.err"; then
	ok "--use-checkpoint-args: iterations 4 and 5 as the uninterrupted run's, the model and tokenizer said"
else
	notok "--use-checkpoint-args resume"
	show "$W/u45.err"
fi
expect_ok "a forced setting given otherwise is replaced" sh -c \
	"$BIN/train $UR --use-checkpoint-args --load $W/uck --normalization LayerNorm >$W/u4.log 2>$W/u4.err"
if grep -q "the checkpoint's --normalization replace the command line's" "$W/u4.err"; then
	ok "--use-checkpoint-args: a different --normalization is replaced, with a warning"
else
	notok "--use-checkpoint-args: a different --normalization is replaced, with a warning"
	show "$W/u4.err"
fi
expect_fail "--use-checkpoint-args without --load" "--use-checkpoint-args needs --load DIR" \
	$BIN/train $UR --use-checkpoint-args
expect_ok "report_memory --use-checkpoint-args" sh -c "$BIN/report_memory --use-checkpoint-args --load $W/uck \
	--micro-batch-size 2 >$W/rm.log 2>$W/rm.err"
if grep -q "num_layers 2\|2 layers\|Number of parameters" "$W/rm.log"; then ok "report_memory takes the model from it"; else
	notok "report_memory takes the model from it"; show "$W/rm.err"; fi
$BIN/text_gen_server --use-checkpoint-args --load "$W/uck" --port 0 >"$W/srv.out" 2>"$W/srv.err" &
spid=$!
i=0
while [ $i -lt 100 ] && ! grep -q "(port [0-9]*)" "$W/srv.err"; do sleep 0.1; i=$((i + 1)); done
port=$(grep -o "(port [0-9]*)" "$W/srv.err" | head -n 1 | tr -dc 0-9)
if [ -n "$port" ] && $PY - "$port" <<'PY' >"$W/srv.py" 2>&1; then
import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s/api" % sys.argv[1], method="PUT",
                             data=json.dumps({"prompts": ["5 17 42"], "tokens_to_generate": 3, "top_k": 1}).encode(),
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=60) as r:
    out = json.load(r)
assert len(out["text"]) == 1 and out["text"][0].startswith("5 17 42"), out
PY
	ok "text_gen_server --use-checkpoint-args serves it with no model or tokenizer flags"
else
	notok "text_gen_server --use-checkpoint-args"
	show "$W/srv.err"
	show "$W/srv.py"
fi
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
[ -n "${KEEP:-}" ] || rm -rf "$W"
