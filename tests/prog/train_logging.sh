#!/bin/sh
# train_logging.sh - Megatron's logging flags: the TensorBoard extras
# (--log-timers-to-tensorboard, --log-memory-to-tensorboard,
# --log-world-size-to-tensorboard, --no-log-loss-scale-to-tensorboard),
# --log-num-zeros-in-grad, and W&B (--wandb-*: TensorBoard events under the
# W&B folder and the `wandb sync` line). The event files are decoded by an
# independent reader (TFRecord framing and the Event protobuf, in Python).
. tests/prog_lib.sh
W=$(new_tmp train_logging)
ERR=$W/err
OUT_LOG=$W/out
PY=/usr/bin/python3
export OMPI_MCA_mpi_yield_when_idle=1 OPENBLAS_NUM_THREADS=1
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"

# a tiny model on Megatron's mock data; untied embeddings, so the input
# embedding's rows of tokens absent from a batch have zero gradients
T="$BIN/train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
	--max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr 1e-3 \
	--mock-data --tokenizer-type NullTokenizer --vocab-size 500 --untie-embeddings-and-output-weights \
	--eval-iters 0 --log-interval 2 --seed 7"

# events DIR: every scalar of the event files under DIR as "tag step value" lines
cat >"$W/events.py" <<'EOF'
import os, struct, sys

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v, i

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v = b[i:i + 8]; i += 8
        elif wt == 5:
            v = b[i:i + 4]; i += 4
        elif wt == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise ValueError("wire type %d" % wt)
        yield f, v

def scan(top):
    rows = []
    for root, _, files in os.walk(top):
        for name in sorted(files):
            data = open(os.path.join(root, name), "rb").read()
            i = 0
            while i < len(data):
                (n,) = struct.unpack_from("<Q", data, i)
                rec = data[i + 12:i + 12 + n]
                i += 12 + n + 4
                step = 0
                for f, v in fields(rec):
                    if f == 2:
                        step = v
                    if f == 5:  # summary
                        for g, val in fields(v):
                            tag, x = None, None
                            for h, w in fields(val):
                                if h == 1: tag = w.decode()
                                if h == 2: (x,) = struct.unpack("<f", w)
                            rows.append((tag, step, x))
    return rows

if len(sys.argv) > 2:  # --tags: "|tag|tag|...|", sorted
    print("|" + "|".join(sorted({t for t, _, _ in scan(sys.argv[1])})) + "|")
else:
    for t, step, x in scan(sys.argv[1]):
        print(t, step, repr(x))
EOF
tags() { $PY "$W/events.py" "$1" --tags; }

# ---- the TensorBoard extras
expect_ok "TensorBoard extras" $T --tensorboard-dir "$W/tb" --log-timers-to-tensorboard \
	--log-memory-to-tensorboard --log-world-size-to-tensorboard --log-throughput --timing-log-level 1
all=$(tags "$W/tb")
missing=""
for tag in iteration-time throughput forward-backward-time optimizer-time mem-reserved-bytes \
	mem-allocated-bytes mem-max-allocated-bytes mem-allocated-count world-size "world-size vs samples" \
	loss-scale "lm loss"; do
	case "$all" in *"|$tag|"*) ;; *) missing="$missing [$tag]" ;; esac
done
$PY "$W/events.py" "$W/tb" >"$W/tb.txt"
if [ -z "$missing" ] && grep -q "^world-size 4 1.0$" "$W/tb.txt" && grep -q "^mem-allocated-count 4 " "$W/tb.txt"; then
	ok "the extras' tags, with Megatron's names (world-size 1 at step 4)"
else
	notok "the extras' tags (missing:$missing)"
	show "$W/tb.txt" 40
fi
# iteration-time: not after the first iteration (its time holds the set-up), then every log interval
if [ "$(grep -c '^iteration-time ' "$W/tb.txt")" -eq 2 ] && grep -q "^iteration-time 4 " "$W/tb.txt" &&
	! grep -q "^iteration-time 1 " "$W/tb.txt"; then
	ok "iteration-time at each logged iteration but the first"
else
	notok "iteration-time at each logged iteration but the first"
	grep "^iteration-time" "$W/tb.txt" | show /dev/stdin
fi
expect_ok "--no-log-loss-scale-to-tensorboard" $T --tensorboard-dir "$W/tb2" --no-log-loss-scale-to-tensorboard
all=$(tags "$W/tb2")
case "$all" in
*"|loss-scale|"*) notok "no loss-scale tag"; echo "# $all" ;;
*"|lm loss|"*) ok "no loss-scale tag, the rest still written" ;;
*) notok "no loss-scale tag, the rest still written"; echo "# $all" ;;
esac

# ---- --log-num-zeros-in-grad: printed after the grad norm, the same with TP2
# (every tensor counted once), at least the embedding rows no token of the
# batch used (500 padded to 512 rows of 32, at most 4 x 17 tokens used)
expect_ok "--log-num-zeros-in-grad" sh -c "$T --log-num-zeros-in-grad --tensorboard-dir $W/tbz >$W/z1.log"
expect_ok "--log-num-zeros-in-grad, TP2" sh -c "$MPI $T --log-num-zeros-in-grad --tensor-model-parallel-size 2 >$W/z2.log"
if $PY - "$W/z1.log" "$W/z2.log" "$W/tbz" "$W/events.py" <<'EOF' >"$W/py.err" 2>&1; then
import re, subprocess, sys
def zeros(p):
    return [int(x) for x in re.findall(r"grad norm: [0-9.]+ \| num zeros: ([0-9]+) \|", open(p).read())]
a, b = zeros(sys.argv[1]), zeros(sys.argv[2])
assert len(a) == 3 and a == b, (a, b)  # iterations 1, 2 and 4
assert min(a) >= (512 - 4 * 17) * 32, a
ev = subprocess.run([sys.executable, sys.argv[4], sys.argv[3]], capture_output=True, text=True).stdout
tb = [float(l.split()[-1]) for l in ev.splitlines() if l.rsplit(" ", 2)[0] == "num-zeros"]
assert len(tb) == 4 and int(tb[-1]) == a[-1], (tb, a)
print("zeros per logged iteration:", a)
EOF
	ok "num zeros: after the grad norm, equal under TP2, at least the unused embedding rows, in TensorBoard"
else
	notok "num zeros"
	show "$W/py.err"
fi

# ---- W&B: TensorBoard events under the W&B folder, and the sync line
expect_ok "--wandb-project" $T --wandb-project proj --wandb-exp-name run1 --wandb-save-dir "$W/wb" \
	--wandb-entity team --tensorboard-dir "$W/tb3"
if grep -q "wandb sync --sync-tensorboard -p proj -e team $W/wb/tensorboard/run1" "$ERR" &&
	[ "$(tags "$W/wb/tensorboard/run1")" = "$(tags "$W/tb3")" ] &&
	[ "$($PY "$W/events.py" "$W/wb" | grep -c '^lm loss [0-9]')" -eq 4 ]; then
	ok "W&B: the same scalars under WANDB_SAVE_DIR/tensorboard/EXP_NAME as in --tensorboard-dir, and the sync line"
else
	notok "W&B: scalars under the W&B folder and the sync line"
	show "$ERR"
fi
expect_ok "--wandb-project without --wandb-save-dir: SAVE/wandb" $T --wandb-project p --wandb-exp-name r \
	--save "$W/ck" --save-interval 100
if [ "$(tags "$W/ck/wandb/tensorboard/r")" != "||" ]; then ok "SAVE/wandb/tensorboard/EXP_NAME"; else
	notok "SAVE/wandb/tensorboard/EXP_NAME"; ls -R "$W/ck" | show /dev/stdin; fi
expect_fail "--wandb-project without a run name" "--wandb-project needs --wandb-exp-name" \
	$T --wandb-project p --save "$W/ck2" --save-interval 100
expect_fail "--wandb-project without a folder" "--wandb-project needs --wandb-save-dir DIR or --save DIR" \
	$T --wandb-project p --wandb-exp-name r
# ---- --logging-level: Python's levels for megac's messages; the log lines stay
expect_ok "--logging-level 40" sh -c "$T --rampup-batch-size 2 2 8 --logging-level 40 >$W/l40.out 2>$W/l40.err"
if [ ! -s "$W/l40.err" ] && [ "$(grep -c ' iteration ' "$W/l40.out")" -eq 3 ]; then
	ok "--logging-level 40: no progress messages or warnings, the iteration lines all there"
else
	notok "--logging-level 40: no progress messages or warnings, the iteration lines all there"
	show "$W/l40.err"
fi
expect_ok "--logging-level 30" sh -c "$T --rampup-batch-size 2 2 8 --logging-level 30 >$W/l30.out 2>$W/l30.err"
if grep -q "warning: --rampup-batch-size is deprecated and ignored" "$W/l30.err" && ! grep -q "model:" "$W/l30.err" &&
	grep -q "global batch size:     4 " "$W/l30.out"; then
	ok "--logging-level 30: warnings only; --rampup-batch-size ignored with Megatron's warning"
else
	notok "--logging-level 30: warnings only; --rampup-batch-size ignored with Megatron's warning"
	show "$W/l30.err"
fi
expect_fail "--rampup-batch-size takes three values" "takes three values" $T --rampup-batch-size 2 2
[ -n "${KEEP:-}" ] || rm -rf "$W"
