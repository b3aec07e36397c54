# train_deepseek.sh - a tiny DeepSeek-V3-shaped model end to end: multi-latent
# attention with q and kv LoRA and their norms, a dense first layer then MoE
# layers with a shared expert, sigmoid scores with an expert bias,
# group-limited top-k with a scaling factor, one multi-token-prediction
# layer. It matches the independent PyTorch reference (tests/prog/py/
# torch_ref.py) over 6 iterations (rtol 1e-5: lm loss, grad norm, the MoE
# and MTP losses), and EP2 x DP2, TP2 x EP2 with
# SP, expert TP 1 under TP2 with SP, PP2 and CP2 each give the one-rank
# losses (rtol 1e-5); report_memory's prediction for it is within 5% of
# train's measured peak.
. tests/prog_lib.sh
train_test_begin train_deepseek
PY=$(sh tests/gpu/torch_python.sh torch h5py numpy) || PY=/usr/bin/python3

COMMON="--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4"
COMMON="$COMMON --hidden-dropout 0 --attention-dropout 0 --lr 2e-3 --lr-decay-style cosine"
COMMON="$COMMON --lr-warmup-iters 2 --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0"
COMMON="$COMMON --data-path $W/kjv_text_document --split 98,2,0 --eval-interval 4 --eval-iters 1"
COMMON="$COMMON --seed 1234 --log-interval 1 --make-vocab-size-divisible-by 64 $GPT2"
# 3 layers: dense, then two MoE layers; 8 experts in 4 groups, top-4 from
# the best 2 groups, sigmoid + expert bias, weights scaled by 2.5; MLA with
# q LoRA 20, kv LoRA 24, 12 + 8 query/key channels and 16 value channels per
# head, YaRN (Megatron's default --rope-type); one MTP layer
DSV3="--num-layers 3 --hidden-size 64 --num-attention-heads 4 --position-embedding-type rope"
DSV3="$DSV3 --normalization RMSNorm --swiglu --ffn-hidden-size 96 --disable-bias-linear"
DSV3="$DSV3 --untie-embeddings-and-output-weights --multi-latent-attention --q-lora-rank 20 --qk-layernorm"
DSV3="$DSV3 --kv-lora-rank 24 --qk-head-dim 12 --qk-pos-emb-head-dim 8 --v-head-dim 16"
DSV3="$DSV3 --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0"
DSV3="$DSV3 --num-experts 8 --moe-layer-freq [0]+[1]*2 --moe-ffn-hidden-size 32"
DSV3="$DSV3 --moe-shared-expert-intermediate-size 32 --moe-router-topk 4 --moe-router-score-function sigmoid"
DSV3="$DSV3 --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01"
DSV3="$DSV3 --moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5"
DSV3="$DSV3 --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.001"
DSV3="$DSV3 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --init-method-std 0.05"

# (the acceptance asks for rtol 1e-4; the run holds to 1e-5, the default)
# shellcheck disable=SC2086 # flag lists are words
against_reference dsv3 6 $DSV3 $COMMON

# the layouts of the acceptance list, each against the one-rank run
# (EP2 x DP2: 4 data-parallel ranks, each with micro-batches of 1 to fill
# the global batch of 4; sequences are routed alike in any grouping)
for run in "ep2dp2:4:--expert-model-parallel-size_2_--micro-batch-size_1" \
	"tp2ep2sp:4:--tensor-model-parallel-size_2_--expert-model-parallel-size_2_--sequence-parallel" \
	"etp1tp2sp:2:--tensor-model-parallel-size_2_--expert-tensor-parallel-size_1_--sequence-parallel" \
	"pp2:2:--pipeline-model-parallel-size_2_--decoder-first-pipeline-num-layers_1" \
	"cp2:2:--context-parallel-size_2"; do
	tag=${run%%:*}
	rest=${run#*:}
	np=${rest%%:*}
	par=$(echo "${rest#*:}" | tr _ ' ')
	expect_ok "dsv3: $par ($np ranks), 6 iterations" sh -c "$MPI -np $np $BIN/train $DSV3 $COMMON --train-iters 6 \
		$par --data-cache-path $D/cache --metrics-file $D/$tag.jsonl >$D/$tag.log 2>&1"
	compare_same "dsv3: $par equals one rank" "$D/ours.jsonl" "$D/$tag.jsonl" 6
done

# report_memory's prediction of the one-rank run's peak (train's max allocated)
expect_ok "report_memory takes the DeepSeek-V3 command line" sh -c "$BIN/report_memory $DSV3 $COMMON --train-iters 6 \
	--device cpu --json >$W/rm.json"
prediction_close "report_memory's own prediction is within 5% of train's max allocated" "$W/rm.json" "$D/ours.log"
