# text_gen_server.sh - text_gen_server over real HTTP on loopback (issue 7):
# a GPT-2-style model trained a few iterations is served; greedy answers equal
# lib/infer's own generation (itself checked against transformers in
# infer.sh); 32 concurrent clients get their answers alone; Megatron's
# validation as 4xx; limits; clients that go away; SIGTERM drains and exits 0
# (tests/prog/py/server_check.py).
. tests/prog_lib.sh
W=$(new_tmp text_gen_server)
OUT_LOG=$W/out.log
ERR=$W/err.log
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ -n "${MEGAC_SANITIZE:-}" ]; then export ASAN_OPTIONS=detect_leaks=0; fi
ARGS="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32"
ARGS="$ARGS --micro-batch-size 2 --global-batch-size 8 --lr 2e-3 --train-iters 4 --mock-data --eval-interval 100"
ARGS="$ARGS --eval-iters 0 --log-interval 1 --data-cache-path $W/cache $GPT2"
expect_ok "train 4 iterations" sh -c "$BIN/train $ARGS --save $W/ck --save-interval 4 >$W/train.log 2>&1"
# shellcheck disable=SC2086
/usr/bin/python3 tests/prog/py/server_check.py $BIN/text_gen_server --load $W/ck $GPT2 \
	--inference-max-seq-length 32 --inference-max-requests 8 --max-body-bytes 200000 \
	-- "$MEGAC_BUILD/tools/megac_generate" $W/ck
expect_fail "no tokenizer" "needs the tokenizer flags" $BIN/text_gen_server --load $W/ck
expect_fail "no checkpoint" "no latest_checkpointed_iteration.txt" $BIN/text_gen_server --load $W $GPT2
rm -rf "$W"
