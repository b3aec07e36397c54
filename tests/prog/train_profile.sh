# train_profile.sh - MEGAC_PROFILE_OPS=1 (lib/kernels/profile.c): a short
# training run prints where its iterations' time went, op by op, with the
# linear layers' TFLOP/s, and trains exactly as the run without it (the
# wrapper times the ops, it changes none of their numbers).
. tests/prog_lib.sh
W=$(new_tmp train_profile)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

T="$BIN/train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32"
T="$T --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 5"
T="$T --mock-data --log-interval 1 --eval-iters 0 --eval-interval 1000 --data-cache-path $W/cache $GPT2"
setup "5 iterations without the profile" sh -c "$T >$W/plain.log 2>&1"
expect_ok "5 iterations with MEGAC_PROFILE_OPS=1" sh -c "MEGAC_PROFILE_OPS=1 $T >$W/prof.log 2>&1"
losses() { sed -n 's/.* iteration *\([0-9]*\)\/.*lm loss: \([0-9.eE+-]*\).*/\1 \2/p' "$1"; }
losses "$W/plain.log" >"$W/plain.loss"
losses "$W/prof.log" >"$W/prof.loss"
if [ "$(wc -l <"$W/plain.loss")" -eq 5 ] && cmp -s "$W/plain.loss" "$W/prof.loss"; then
	ok "the profiled run's losses equal the plain run's, bit for bit"
else
	notok "the profiled run trains differently"
	paste "$W/plain.loss" "$W/prof.loss" | head -5 | sed 's/^/#   /'
fi
# the table: per iteration over the 4 iterations after the first; 2 layers
# and the output layer make 2 x 4 + 1 linear_forward calls per micro-batch,
# 2 micro-batches per iteration
row() { sed -n "s/^  $1  *\([0-9.]*\)  *\([0-9.]*\)  *\([0-9.]*\) .*/\1 \2 \3/p" "$W/prof.log"; }
lf=$(row linear_forward)
if grep -q "^op profile of rank 0 (cpu table.*over 4 iterations" "$W/prof.log" && [ "${lf%% *}" = 18 ] &&
	[ -n "$(row attention_forward)$(row attention_block_forward)" ] && [ -n "$(row layernorm_backward)" ] &&
	[ -n "$(row adamw_segs)" ] && grep -q "^  all ops " "$W/prof.log"; then
	ok "the op table: linear_forward called 18 times per iteration ($lf: calls, ms, %), attention, norms, the optimizer, the total"
else
	notok "the op profile table is missing or wrong (linear_forward row: '$lf')"
	grep -A 30 "^op profile" "$W/prof.log" | head -30 | sed 's/^/#   /'
fi
if ! grep -q "^op profile" "$W/plain.log"; then
	ok "without MEGAC_PROFILE_OPS there is no table"
else
	notok "a table without MEGAC_PROFILE_OPS"
fi
