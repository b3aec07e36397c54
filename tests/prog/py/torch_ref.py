"""torch_ref.py - an independent PyTorch reference of Megatron-LM's GPT pretraining math.

Written from a reading of Megatron-LM's own code (its training arguments and schedules,
checkpoint names and packed layouts, GPT dataset and indexed dataset; the file formats are
in docs/formats.md and docs/checkpoint-format.md) and docs/moe-spec.md, not from megac's C
code, so that `train` can be compared against it.
Run with Debian's /usr/bin/python3 (torch, numpy, h5py).

Modes
  torch_ref.py TRAIN-FLAGS... --ref-model M.h5 [--dump-grads DIR] [--ref-save OUT.h5]
      Trains on the train split exactly as Megatron (TP=PP=DP=1, fp32, no dropout) would and
      prints one JSON line per iteration on stdout:
        {"iteration": 1, "lm loss": 10.83, "grad norm": 1.93, "learning rate": 0.0001}
      (with --num-experts also the MoE metrics Megatron logs, after "lm loss": below)
      "lm loss" = sum(loss*mask)/sum(mask) over the global batch; "grad norm" = L2 norm of
      all gradients before clipping; "learning rate" = lr(iteration*gbs), the value
      Megatron's log line for that iteration shows (the LR of the next iteration).
      --dump-grads DIR writes the iteration-1 gradients (before clipping) as DIR/<name>.npy.
      --ref-save OUT.h5 writes the weights after the last iteration, same names as --ref-model.
  torch_ref.py MODEL-FLAGS... TOKENIZER-FLAGS... --write-init-model OUT.h5 [--seed N]
      Writes a random Megatron-style initial model (N(0,std); linear_proj/linear_fc2 with
      std/sqrt(2L); biases 0; norms 1/0) with the padded vocabulary of the tokenizer flags.
  torch_ref.py batch "TRAIN-FLAGS... --ref-model M.h5 --ref-out OUT.jsonl" ...
      Runs each argument (split as a shell would) as one training run of the first mode, in
      order, in this one process (torch is then imported once, not once a run); --ref-out
      names the file that run's JSON lines go to. Stops at the first run that fails.
  torch_ref.py --self-test
      Checks the reference against itself and worked examples on tiny synthetic inputs: the .idx
      reader and sample assembly (the worked examples of Megatron's own code), the LR schedule, AdamW against
      torch.optim.AdamW, a second unfused per-head formulation of the whole forward
      (fused QKV per query group, GQA, RoPE, masks, SwiGLU; MoE layers token by token), and
      gradients against central finite differences in float64; for MoE also moe-spec.md's
      example R (probs, aux/seq-aux/z losses, capacity dropping) and finite differences of one
      MoE layer's output and attached losses. Prints "ok - ..." lines; exits 1 on any failure.

Flags are Megatron's (argparse, no abbreviations); flags that do not change the math are
ignored and listed on stderr; flags that would change it but are not implemented here
are refused. --hidden-dropout 0 --attention-dropout 0 must be given (Megatron defaults 0.1).
Reference-only flags: --ref-model, --ref-out, --ref-save, --dump-grads, --write-init-model, --eod-id,
--pad-id, --ref-dtype float32|float64 (the whole computation in float64), --ref-causal-only,
--self-test. TORCH_REF_VERBOSE=1 prints the measured differences of every self-test check.

Semantics worth knowing:
- A line is printed for every iteration whatever --log-interval is (Megatron averages
  "lm loss" over the logging interval; compare with --log-interval 1).
- --reset-attention-mask applies the dataset's document mask in attention (Megatron's
  local transformer implementation). Megatron's default Transformer-Engine layers use
  attn_mask_type=causal and ignore that mask (https://github.com/NVIDIA/Megatron-LM/issues/2357);
  --ref-causal-only reproduces that behaviour.
- Any data-parallel size gives the same gradient as DP=1 with the same micro-batch size
  (the global batch's micro-batches are the same contiguous blocks of mbs samples).

Multi-latent attention (Megatron's MLASelfAttention with the TE spec, one rank):
--multi-latent-attention, --rope-type, --q-lora-rank, --kv-lora-rank, --qk-head-dim,
--qk-pos-emb-head-dim, --v-head-dim; --qk-layernorm gives the q and kv norms fused into the
up-projections (with --q-lora-rank only). --rope-type yarn (Megatron's MLA default) turns
the position part with YaRN (--rotary-scaling-factor, --mscale, --mscale-all-dim; original
context 4096, betas 32 and 1), and the softmax scale is m(mscale_all_dim)^2 / sqrt(q head).

Mixture of experts (moe-spec.md §1-§6, one rank, Megatron's flag names): --num-experts E,
--moe-layer-freq N or a list expression (Megatron's: checked against its characters, then
Python's eval), --moe-ffn-hidden-size,
--moe-router-topk, --moe-router-score-function softmax|sigmoid, --moe-router-pre-softmax,
--moe-router-load-balancing-type aux_loss|seq_aux_loss|none (one type, one coefficient),
--moe-aux-loss-coeff, --moe-z-loss-coeff, --moe-expert-capacity-factor,
--moe-token-drop-policy probs|position, --moe-pad-expert-input-to-capacity,
--moe-shared-expert-intermediate-size; --disable-bias-linear is required with experts.
DeepSeek-V3's routing: --moe-router-num-groups/--moe-router-group-topk (group-limited top-k),
--moe-router-topk-scaling-factor, --moe-router-enable-expert-bias with
--moe-router-bias-update-rate (the bias is read from the model file, added to the sigmoid
scores only to choose, and after every iteration moved by sign(mean - count) * rate from the
kept slots per expert of the iteration's training forwards).
- Capacity dropping per router: --tensor-model-parallel-size T (with SP each TP rank's
  sequence shard) and --context-parallel-size C (each CP rank's chunks r and 2C-1-r of the
  2C chunks of every sample, Megatron's load-balanced split) cut the tokens into T*C groups,
  each with its own capacity; nothing else in the reference depends on either.
- Tokens of a router call are megac's micro-batch flattened batch-major, t = b*S + s
  (Megatron: sequence-major); this decides which tokens the position policy keeps (the
  earliest; ties in either policy go to the earlier token) and the seq_aux_loss sequences
  (one per sample).
- The training objective of a micro-batch gains every MoE layer's coeff*aux and coeff*z-loss,
  scaled by 1/num_microbatches like the lm loss; "lm loss" stays the LM loss alone.
- Logged: "load_balancing_loss" when the type contains aux_loss (0.0 with coefficient 0),
  "seq_load_balancing_loss" for seq_aux_loss, "z_loss" when --moe-z-loss-coeff is given
  (NaN for coefficient 0, Megatron's 0/0): the mean over the iteration's MoE layers and
  micro-batches of aux/coeff resp. mean_t logsumexp(z_t)^2.
"""
import argparse
import glob
import json
import math
import os
import re
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

LEGACY_SPLIT = "969, 30, 1"


def die(msg):
    sys.stderr.write("torch_ref.py: " + msg + "\n")
    sys.exit(2)


# --------------------------------------------------------------------------- flags

def str2bool_flag(p, name, **kw):
    p.add_argument(name, action="store_true", **kw)


def build_parser():
    p = argparse.ArgumentParser(prog="torch_ref.py", allow_abbrev=False, add_help=True)
    a = p.add_argument
    # model
    a("--num-layers", type=int)
    a("--hidden-size", type=int)
    a("--ffn-hidden-size", type=int)
    a("--num-attention-heads", type=int)
    a("--kv-channels", type=int)
    str2bool_flag(p, "--group-query-attention")
    a("--num-query-groups", type=int, default=1)
    a("--seq-length", type=int)
    a("--max-position-embeddings", type=int)
    a("--position-embedding-type", default="learned_absolute", choices=["learned_absolute", "rope", "yarn"])
    a("--rotary-base", type=int, default=10000)
    a("--rotary-percent", type=float, default=1.0)
    str2bool_flag(p, "--use-rope-scaling")
    a("--rope-scaling-factor", type=float, default=8.0)
    str2bool_flag(p, "--rotary-interleaved")
    # YaRN: Megatron's training arguments (None -> YarnRotaryEmbedding's defaults)
    a("--rotary-scaling-factor", type=float, default=1.0)
    a("--yarn-original-max-position-embeddings", type=int, default=None)
    a("--yarn-beta-fast", type=float, default=None)
    a("--yarn-beta-slow", type=float, default=None)
    a("--mscale", type=float, default=1.0)
    a("--mscale-all-dim", type=float, default=0.0)
    p.add_argument("--yarn-correction-range-round-to-int", dest="yarn_round", action="store_true", default=None)
    p.add_argument("--no-yarn-correction-range-round-to-int", dest="yarn_round", action="store_false")
    str2bool_flag(p, "--qk-layernorm")
    # multi-token prediction (Megatron's MultiTokenPredictionBlock)
    a("--mtp-num-layers", type=int, default=None)
    a("--mtp-loss-scaling-factor", type=float, default=0.1)
    # multi-latent attention (Megatron's MLASelfAttention, TE spec)
    str2bool_flag(p, "--multi-latent-attention")
    a("--q-lora-rank", type=int)
    a("--kv-lora-rank", type=int, default=32)
    a("--qk-head-dim", type=int, default=128)
    a("--qk-pos-emb-head-dim", type=int, default=64)
    a("--v-head-dim", type=int, default=128)
    a("--rope-type", choices=["rope", "yarn"])
    a("--window-size", default=None)  # "L,R": Megatron's tuple_type
    a("--window-attn-skip-freq", default=None)
    a("--normalization", default="LayerNorm", choices=["LayerNorm", "RMSNorm"])
    a("--norm-epsilon", type=float, default=1e-5)
    str2bool_flag(p, "--swiglu")
    str2bool_flag(p, "--disable-bias-linear")
    str2bool_flag(p, "--add-qkv-bias")
    str2bool_flag(p, "--no-bias-gelu-fusion")
    str2bool_flag(p, "--untie-embeddings-and-output-weights")
    a("--init-method-std", type=float, default=0.02)
    a("--embedding-init-method-std", type=float, default=None)
    a("--hidden-dropout", type=float, default=0.1)
    a("--attention-dropout", type=float, default=0.1)
    a("--make-vocab-size-divisible-by", type=int, default=128)
    a("--tensor-model-parallel-size", type=int, default=1)
    a("--context-parallel-size", type=int, default=1)
    # mixture of experts (moe-spec.md §1; single rank: EP/ETP/dispatcher flags are ignored)
    a("--num-experts", type=int)
    a("--moe-layer-freq", default="1")
    a("--moe-ffn-hidden-size", type=int)
    a("--moe-router-topk", type=int, default=2)
    a("--moe-router-score-function", default="softmax", choices=["softmax", "sigmoid", "sqrtsoftplus"])
    str2bool_flag(p, "--moe-router-pre-softmax")
    a("--moe-router-load-balancing-type", nargs="+", default=["aux_loss"],
      choices=["aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none"])
    a("--moe-aux-loss-coeff", type=float, nargs="+", default=[0.0])
    a("--moe-z-loss-coeff", type=float)
    a("--moe-expert-capacity-factor", type=float)
    a("--moe-token-drop-policy", default="probs", choices=["probs", "position"])
    str2bool_flag(p, "--moe-pad-expert-input-to-capacity")
    a("--moe-shared-expert-intermediate-size", type=int)
    str2bool_flag(p, "--moe-shared-expert-gate")
    a("--moe-router-num-groups", type=int)
    a("--moe-router-group-topk", type=int)
    a("--moe-router-topk-scaling-factor", type=float)
    str2bool_flag(p, "--moe-router-enable-expert-bias")
    a("--moe-router-bias-update-rate", type=float, default=1e-3)
    # training
    a("--micro-batch-size", type=int)
    a("--global-batch-size", type=int)
    a("--train-iters", type=int)
    a("--exit-interval", type=int)
    a("--optimizer", default="adam")
    a("--lr", type=float)
    a("--min-lr", type=float, default=0.0)
    a("--lr-decay-style", default="linear", choices=["constant", "linear", "cosine", "inverse-square-root", "WSD"])
    a("--lr-wsd-decay-style", default="exponential", choices=["exponential", "linear", "cosine", "minus_sqrt"])
    a("--lr-wsd-decay-iters", type=int)
    a("--lr-warmup-iters", type=int, default=0)
    a("--lr-warmup-fraction", type=float)
    a("--lr-warmup-init", type=float, default=0.0)
    a("--lr-decay-iters", type=int)
    a("--weight-decay", type=float, default=0.01)
    a("--weight-decay-incr-style", default="constant")
    a("--adam-beta1", type=float, default=0.9)
    a("--adam-beta2", type=float, default=0.999)
    a("--adam-eps", type=float, default=1e-8)
    a("--clip-grad", type=float, default=1.0)
    str2bool_flag(p, "--eod-mask-loss")
    str2bool_flag(p, "--reset-position-ids")
    str2bool_flag(p, "--reset-attention-mask")
    str2bool_flag(p, "--no-create-attention-mask-in-dataloader")
    a("--seed", type=int, default=1234)
    # data
    a("--data-path", nargs="+")
    a("--data-cache-path")
    a("--split")
    # tokenizer (only for the EOD / pad ids and the vocabulary size)
    a("--tokenizer-type")
    a("--vocab-file")
    a("--merge-file")
    a("--tokenizer-model")
    a("--vocab-size", type=int)
    a("--null-tokenizer-eod-id", type=int)
    a("--null-tokenizer-pad-id", type=int, default=-1)
    # reference-only
    a("--ref-model")
    a("--ref-save")
    a("--ref-out")
    a("--dump-grads")
    a("--write-init-model")
    a("--eod-id", type=int)
    a("--pad-id", type=int)
    a("--ref-dtype", default="float32", choices=["float32", "float64"])
    str2bool_flag(p, "--ref-causal-only")
    str2bool_flag(p, "--self-test")
    return p


# flags that change the math and are not implemented here: refused rather than ignored
REFUSED = {
    "--fp16", "--bf16", "--apply-layernorm-1p",
    "--rotary-seq-len-interpolation-factor", "--squared-relu",
    "--quick-geglu", "--apply-residual-connection-post-layernorm", "--calculate-per-token-loss",
    "--decoupled-lr", "--decoupled-min-lr", "--train-samples", "--lr-decay-samples",
    "--lr-warmup-samples", "--lr-wsd-decay-samples", "--start-weight-decay", "--end-weight-decay",
    "--mock-data", "--train-data-path", "--valid-data-path", "--test-data-path",
    "--data-args-path", "--per-split-data-args-path", "--dataloader-inter-document-masking",
    "--step-batch-size-schedule", "--load",
    "--finetune", "--pretrained-checkpoint", "--padded-vocab-size", "--no-pad-vocab-size",
    "--init-method-xavier-uniform", "--sft", "--apply-query-key-layer-scaling",
    "--embedding-multiplier",
    "--moe-input-jitter-eps", "--moe-router-force-load-balancing",
    "--moe-router-dtype", "--moe-apply-probs-on-input",
}


def parse_args(argv):
    args, rest = build_parser().parse_known_args(argv)
    bad = [r.split("=")[0] for r in rest if r.split("=")[0] in REFUSED]
    if bad:
        die("not implemented by the reference (would change the math): " + " ".join(bad))
    ignored = [r for r in rest if r.startswith("--")]
    if ignored:
        sys.stderr.write("torch_ref.py: ignoring " + " ".join(ignored) + "\n")
    return args


class Cfg:
    """Resolved model configuration (Megatron's derived defaults applied)."""


def model_config(args, vocab_padded=None):
    c = Cfg()
    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_length"):
        if getattr(args, name) is None:
            die("--" + name.replace("_", "-") + " is required")
    c.L, c.h, c.a, c.S = args.num_layers, args.hidden_size, args.num_attention_heads, args.seq_length
    if args.kv_channels is None and c.h % c.a:
        die("--hidden-size must be divisible by --num-attention-heads (or give --kv-channels)")
    c.k = args.kv_channels if args.kv_channels is not None else c.h // c.a
    c.g = args.num_query_groups if args.group_query_attention else c.a
    if c.a % c.g:
        die("--num-attention-heads must be divisible by --num-query-groups")
    c.m = c.a // c.g
    c.swiglu = args.swiglu
    if args.ffn_hidden_size is not None:
        c.f = args.ffn_hidden_size
    elif c.swiglu:
        c.f = int((4 * c.h * 2 / 3) / 64) * 64
    else:
        c.f = 4 * c.h
    c.bias = not args.disable_bias_linear
    c.qkv_bias = c.bias or args.add_qkv_bias
    # bias-GELU fusion (tanh approximation) is on by default; validate_args turns it off
    # without biases, and --no-bias-gelu-fusion turns it off too: then exact erf GELU.
    c.gelu = "tanh" if (c.bias and not args.no_bias_gelu_fusion) else "erf"
    c.pos = args.position_embedding_type
    if args.max_position_embeddings is None:
        die("--max-position-embeddings is required")
    c.P = args.max_position_embeddings
    if c.pos == "learned_absolute" and c.P < c.S:
        die("--max-position-embeddings must be >= --seq-length")
    c.rotary_base = args.rotary_base
    c.rot = int(c.k * args.rotary_percent)
    c.yarn = None
    if c.pos == "yarn":  # YarnRotaryEmbedding: a RoPE over all kv channels, whatever the percent
        c.pos, c.rot = "rope", c.k
        c.yarn = dict(factor=args.rotary_scaling_factor,
                      original=args.yarn_original_max_position_embeddings or 4096,
                      beta_fast=32.0 if args.yarn_beta_fast is None else args.yarn_beta_fast,
                      beta_slow=1.0 if args.yarn_beta_slow is None else args.yarn_beta_slow,
                      mscale=args.mscale, mscale_all_dim=args.mscale_all_dim,
                      round=True if args.yarn_round is None else args.yarn_round)
    c.interleaved = args.rotary_interleaved
    if c.pos == "rope" and (c.rot % 2 or c.rot <= 0):
        die("the rotary dimension int(kv_channels*rotary_percent) must be even and positive")
    c.norm = args.normalization
    c.eps = args.norm_epsilon
    c.qk_norm = args.qk_layernorm
    # sliding window (Transformer Engine / flash-attn window_size=(L, R) under the
    # causal mask): query i sees keys j with i - L <= j <= i; L = -1 is no limit.
    # --window-attn-skip-freq N: layer n (1-based) keeps full attention when n % N == 0;
    # a list "[1,1,0,...]": 1 = windowed (Megatron's is_layer_window_attention).
    c.window = None
    c.swa_layers = None
    if args.window_size is not None:
        left = int(args.window_size.strip("()").split(",")[0])
        c.window = left if left >= 0 else None
        f = args.window_attn_skip_freq
        if f is not None:
            f = f.strip()
            if f.startswith("["):
                c.swa_layers = [bool(int(x)) for x in f.strip("[]").split(",")]
            else:
                c.swa_layers = [(n + 1) % int(f) != 0 for n in range(c.L)]
    c.rope_scaling = args.rope_scaling_factor if args.use_rope_scaling else None
    c.untie = args.untie_embeddings_and_output_weights
    c.V = vocab_padded
    c.mla = args.multi_latent_attention
    if c.mla:
        if c.yarn:
            die("--position-embedding-type yarn with --multi-latent-attention: Megatron's GPTModel fails on it")
        # MLATransformerConfig: rope_type defaults to yarn; its YaRN reads --rotary-scaling-factor,
        # --mscale and --mscale-all-dim and keeps the config's own original context (4096) and betas
        if args.rope_type in (None, "yarn"):
            c.yarn = dict(factor=args.rotary_scaling_factor, original=4096, beta_fast=32.0, beta_slow=1.0,
                          mscale=args.mscale, mscale_all_dim=args.mscale_all_dim, round=True)
        # MLASelfAttention's softmax scale m(mscale_all_dim)^2 / sqrt(q head dim), either rope type
        f = args.rotary_scaling_factor
        m_all = 1.0 if f <= 1 else 0.1 * args.mscale_all_dim * math.log(f) + 1.0
        c.mla_softmax_scale = m_all * m_all / math.sqrt(args.qk_head_dim + args.qk_pos_emb_head_dim)
        if args.group_query_attention:
            die("--multi-latent-attention excludes --group-query-attention")
        c.q_lora, c.kv_lora = args.q_lora_rank, args.kv_lora_rank
        c.qk_head, c.qk_pos, c.v_head = args.qk_head_dim, args.qk_pos_emb_head_dim, args.v_head_dim
        c.g, c.m = c.a, 1
        c.rot = c.qk_pos  # MLA's own RotaryEmbedding over the position part, all of it
        if c.qk_norm and c.q_lora is None:
            die("--qk-layernorm without --q-lora-rank (a norm fused into linear_q_proj) is not implemented here")
    moe_config(args, c)
    c.mtp = args.mtp_num_layers or 0
    c.mtp_scale = args.mtp_loss_scaling_factor
    return c


def moe_config(args, c):
    """The MoE settings (moe-spec.md §1) with Megatron's defaults and checks; c.E = 0 for a
    dense model. Only what this reference implements is accepted: one load-balancing type
    (aux_loss, seq_aux_loss or none), softmax/sigmoid scores, no linear biases."""
    c.E = args.num_experts or 0  # 0 is turned into "no experts"
    if c.E < 0:
        die("--num-experts must be positive")
    if not c.E:
        if args.moe_ffn_hidden_size is not None:
            die("--moe-ffn-hidden-size needs --num-experts")
        return
    f = args.moe_layer_freq
    if "[" in f:  # Megatron's moe_freq_type: only these characters, then Python's eval
        if re.search(r"[^,\d\[\]\(\)\+\*]", f):
            die("--moe-layer-freq: invalid pattern %r" % f)
        c.moe_pattern = eval(f)
        if not isinstance(c.moe_pattern, list) or len(c.moe_pattern) != c.L or \
                any(v not in (0, 1) for v in c.moe_pattern):
            die("--moe-layer-freq %r: not a list of --num-layers entries 0 or 1" % f)
    else:
        q = int(f)
        if q <= 0:
            die("--moe-layer-freq must be positive")
        c.moe_pattern = [1 if n % q == 0 else 0 for n in range(c.L)]
    c.fm = args.moe_ffn_hidden_size if args.moe_ffn_hidden_size is not None else c.f
    c.topk = args.moe_router_topk
    if not 1 <= c.topk <= c.E:
        die("--moe-router-topk must be in 1..--num-experts")
    c.score = args.moe_router_score_function
    if c.score == "sqrtsoftplus":
        die("--moe-router-score-function sqrtsoftplus is not implemented by the reference")
    c.pre_softmax = args.moe_router_pre_softmax
    if c.topk == 1 and c.score == "softmax" and not c.pre_softmax:
        # a softmax over one selected logit is 1 with zero gradient: Megatron refuses it
        die("--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax")
    types, coeffs = args.moe_router_load_balancing_type, args.moe_aux_loss_coeff
    if len(types) != 1 or len(coeffs) != 1:
        die("several load-balancing types or aux-loss coefficients are not implemented by the reference")
    c.lb_type, c.aux_coeff = types[0], coeffs[0]
    if c.lb_type not in ("aux_loss", "seq_aux_loss", "none"):
        die("--moe-router-load-balancing-type %s is not implemented by the reference" % c.lb_type)
    c.z_coeff = args.moe_z_loss_coeff
    cf = args.moe_expert_capacity_factor
    c.cf = cf if cf is not None and cf >= 0 else None  # a negative factor means dropless
    c.drop_policy = args.moe_token_drop_policy
    # Megatron's router runs on each tensor-parallel rank's sequence shard (SP is required
    # with TP and MoE), so a capacity applies to each shard's tokens on their own
    c.shards = args.tensor_model_parallel_size
    # context parallelism: each CP rank routes its own two chunks of every sequence
    c.cp = args.context_parallel_size
    c.pad = args.moe_pad_expert_input_to_capacity
    if c.pad and c.cf is None:
        die("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor")
    c.fs = args.moe_shared_expert_intermediate_size
    if c.fs is not None and c.fs <= 0:
        die("--moe-shared-expert-intermediate-size must be positive")
    # the shared expert's sigmoid gate (Megatron: none without a shared expert)
    c.sgate = bool(args.moe_shared_expert_gate) and c.fs is not None
    # DeepSeek-V3's routing (TransformerConfig's checks)
    c.group_topk = args.moe_router_group_topk or 0
    c.groups = args.moe_router_num_groups
    if c.group_topk:
        if not c.groups or c.E % c.groups or c.group_topk > c.groups:
            die("bad --moe-router-num-groups / --moe-router-group-topk")
    c.scale = args.moe_router_topk_scaling_factor
    c.ebias = None  # per MoE layer's "decoder.layers.N.mlp.": its expert bias, from the model file
    c.bias_rate = args.moe_router_bias_update_rate
    if args.moe_router_enable_expert_bias:
        if c.score != "sigmoid":
            die("--moe-router-enable-expert-bias needs sigmoid scores")
        c.ebias = {}
    c.counts = {}
    if c.bias:
        # Megatron allows biases with expert-TP 1; megac refuses them for now, and so do we
        die("MoE with linear biases is not implemented: pass --disable-bias-linear")


def is_moe(c, n):
    """Layer n (0-based, global) is a MoE layer."""
    return bool(c.E) and c.moe_pattern[n] == 1


# --------------------------------------------------------------------------- indexed dataset

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}


class IndexedDataset:
    """PREFIX.idx / PREFIX.bin read with numpy (docs/formats.md; Megatron's
    megatron/core/datasets/indexed_dataset.py)."""

    def __init__(self, prefix):
        idx = np.fromfile(prefix + ".idx", dtype=np.uint8)
        if idx[:9].tobytes() != b"MMIDIDX\x00\x00":
            die(prefix + ".idx: bad magic")
        version = int(idx[9:17].view("<u8")[0])
        if version != 1:
            die(prefix + ".idx: version %d" % version)
        self.dtype = np.dtype(DTYPES[int(idx[17])]).newbyteorder("<")
        n = int(idx[18:26].view("<u8")[0])
        d1 = int(idx[26:34].view("<u8")[0])
        o = 34
        self.lengths = idx[o:o + 4 * n].view("<i4")
        o += 4 * n
        self.pointers = idx[o:o + 8 * n].view("<i8")
        o += 8 * n
        self.doc_indices = idx[o:o + 8 * d1].view("<i8")
        if len(self.doc_indices) != d1 or self.doc_indices[-1] != n:
            die(prefix + ".idx: document indices do not end at the sequence count")
        self.bin = np.memmap(prefix + ".bin", dtype=self.dtype, mode="r")

    def get(self, i, offset=0, length=None):
        if length is None:
            length = int(self.lengths[i]) - offset
        start = int(self.pointers[i]) // self.dtype.itemsize + offset
        return np.asarray(self.bin[start:start + length])


# --------------------------------------------------------------------------- GPT samples

def find_train_cache(args, prefix, num_samples):
    """The train split's GPTDataset index caches (docs/formats.md): in --data-cache-path,
    else PREFIX/cache/GPTDataset_indices; among the <md5>-GPTDataset-train-description.txt
    files there, the one whose description names this dataset, index_split "train", our
    seed, seq length, raw --split string and train_iters*gbs samples."""
    cache = args.data_cache_path or os.path.join(prefix, "cache", "GPTDataset_indices")
    split = args.split if args.split is not None else LEGACY_SPLIT
    found, seen = [], []
    for desc in sorted(glob.glob(os.path.join(cache, "*-GPTDataset-train-description.txt"))):
        try:
            d = json.load(open(desc))
        except ValueError:
            continue
        seen.append("%s (%s, %s samples, seq %s, seed %s, split %r)" % (
            os.path.basename(desc), d.get("dataset_path"), d.get("num_samples"),
            d.get("sequence_length"), d.get("random_seed"), d.get("split")))
        path = d.get("dataset_path", "")
        same_path = path == prefix or os.path.realpath(path) == os.path.realpath(prefix)
        if (d.get("class") == "GPTDataset" and d.get("index_split") == "train" and same_path
                and d.get("num_samples") == num_samples and d.get("random_seed") == args.seed
                and d.get("sequence_length") == args.seq_length and d.get("split") == split):
            found.append(desc[:-len("description.txt")])
    if len(found) != 1:
        die("%s train index cache for %s (seq %d, seed %d, split %r, %d samples) in %s; seen: %s" % (
            "no" if not found else "more than one", prefix, args.seq_length, args.seed, split,
            num_samples, cache, "; ".join(seen) or "nothing"))
    base = found[0]
    out = {}
    for part in ("document_index", "sample_index", "shuffle_index"):
        f = base + part + ".npy"
        if not os.path.isfile(f):
            die("missing " + f)
        out[part] = np.load(f, mmap_mode="r")
    return out


def ltor_masks(tokens, eod, reset_position_ids, reset_attention_mask, eod_mask_loss):
    """Loss mask, position ids and attention mask (True = masked) from the input tokens
    (Megatron's _get_ltor_masks_and_position_ids in megatron/core/datasets/gpt_dataset.py)."""
    S = len(tokens)
    loss_mask = np.ones(S, dtype=np.float32)
    if eod_mask_loss:
        loss_mask[tokens == eod] = 0.0
    pos = np.arange(S, dtype=np.int64)
    doc = np.zeros(S, dtype=np.int64)  # document number of each position
    if reset_position_ids or reset_attention_mask:
        start = 0
        d = 0
        for i in range(S):
            doc[i] = d
            if reset_position_ids:
                pos[i] = i - start
            if tokens[i] == eod:
                start, d = i + 1, d + 1
    q = np.arange(S)[:, None]
    kk = np.arange(S)[None, :]
    masked = kk > q
    if reset_attention_mask:
        masked = masked | (doc[:, None] != doc[None, :])
    return loss_mask, pos, masked


class GPTSamples:
    def __init__(self, ds, index, S, eod, pad, reset_position_ids, reset_attention_mask, eod_mask_loss):
        self.ds, self.S, self.eod, self.pad = ds, S, eod, pad
        self.doc = index["document_index"]
        self.sample = index["sample_index"]
        self.shuffle = index["shuffle_index"]
        self.flags = (reset_position_ids, reset_attention_mask, eod_mask_loss)

    def __len__(self):
        return len(self.shuffle)

    def text(self, k):
        j = int(self.shuffle[k])
        p0, o0 = (int(v) for v in self.sample[j])
        p1, o1 = (int(v) for v in self.sample[j + 1])
        if p0 == p1:
            parts = [self.ds.get(int(self.doc[p0]), o0, o1 - o0 + 1)]
        else:
            parts = [self.ds.get(int(self.doc[p0]), o0)]
            parts += [self.ds.get(int(self.doc[p])) for p in range(p0 + 1, p1)]
            parts.append(self.ds.get(int(self.doc[p1]), 0, o1 + 1))
        text = np.concatenate(parts).astype(np.int64)
        if len(text) < self.S + 1:
            if self.pad is None:
                die("sample %d is short and the tokenizer has no pad id" % k)
            text = np.concatenate([text, np.full(self.S + 1 - len(text), self.pad, np.int64)])
        return text

    def __getitem__(self, k):
        text = self.text(k)
        tokens, labels = text[:-1].copy(), text[1:].copy()
        loss_mask, pos, masked = ltor_masks(tokens, self.eod, *self.flags)
        if self.pad is not None:
            loss_mask[labels == self.pad] = 0.0
            tokens[tokens == self.pad] = 0
            labels[labels == self.pad] = 0
        return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask,
                "position_ids": pos, "attention_mask": masked}


def collate(samples):
    return {key: torch.from_numpy(np.stack([s[key] for s in samples])) for key in samples[0]}


# --------------------------------------------------------------------------- tokenizer ids

def tokenizer_ids(args):
    """(vocab_size, eod, pad) from the tokenizer flags; any may be None when unknown.
    pad None = no pad masking (GPT-2: the tokenizer has no pad)."""
    t = args.tokenizer_type
    vocab = eod = None
    pad = None
    if t == "GPT2BPETokenizer" and args.vocab_file:
        enc = json.load(open(args.vocab_file, encoding="utf-8"))
        vocab, eod = len(enc), enc.get("<|endoftext|>")
    elif t == "NullTokenizer" and args.vocab_size is not None:
        vocab = args.vocab_size
        eod = args.null_tokenizer_eod_id if args.null_tokenizer_eod_id is not None else vocab - 1
        pad = args.null_tokenizer_pad_id
        if pad == eod:
            pad = -1  # a pad colliding with a special id is replaced by -1 (never in data)
    elif t == "HuggingFaceTokenizer" and args.tokenizer_model:
        d = args.tokenizer_model
        tj = os.path.join(d, "tokenizer.json") if os.path.isdir(d) else d
        cj = os.path.join(os.path.dirname(tj), "tokenizer_config.json")
        tok = json.load(open(tj, encoding="utf-8"))
        ids = dict(tok.get("model", {}).get("vocab", {}) or {})
        for at in tok.get("added_tokens", []):
            ids[at["content"]] = at["id"]
        vocab = len(set(ids.values()))
        conf = json.load(open(cj, encoding="utf-8")) if os.path.isfile(cj) else {}

        def tid(key):
            v = conf.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            return ids.get(v) if v is not None else None
        eod = tid("eos_token")
        if eod is None:
            eod = tid("sep_token")
        pad = tid("pad_token")
        # MegatronTokenizerText has no special_tokens_dict, so the dataset's collision
        # check compares the pad id with eos and eod only
        if pad is not None and pad in (tid("eos_token"), eod):
            pad = -1
    if args.eod_id is not None:
        eod = args.eod_id
    if args.pad_id is not None:
        pad = args.pad_id
    return vocab, eod, pad


# --------------------------------------------------------------------------- model

def attention_param_shapes(c, pre, ln_bias):
    out = [(pre + "self_attention.linear_qkv.layer_norm_weight", (c.h,))]
    if ln_bias:
        out.append((pre + "self_attention.linear_qkv.layer_norm_bias", (c.h,)))
    out.append((pre + "self_attention.linear_qkv.weight", ((c.a + 2 * c.g) * c.k, c.h)))
    if c.qkv_bias:
        out.append((pre + "self_attention.linear_qkv.bias", ((c.a + 2 * c.g) * c.k,)))
    out.append((pre + "self_attention.linear_proj.weight", (c.h, c.a * c.k)))
    if c.bias:
        out.append((pre + "self_attention.linear_proj.bias", (c.h,)))
    if getattr(c, "qk_norm", False):
        for which in ("q_layernorm", "k_layernorm"):
            out.append((pre + "self_attention.%s.weight" % which, (c.k,)))
            if ln_bias:
                out.append((pre + "self_attention.%s.bias" % which, (c.k,)))
    return out


def mla_param_shapes(c, pre, ln_bias):
    """MLASelfAttention with the TE spec (get_gpt_layer_with_transformer_engine_spec,
    multi_latent_attention=True): a separate input_layernorm; the down-projections are
    plain (duplicated) linears without bias; with --qk-layernorm the q and kv norms are
    fused into the up-projections (TELayerNormColumnParallelLinear: layer_norm_weight),
    without it they are identities."""
    a = pre + "self_attention."
    qd = c.qk_head + c.qk_pos
    out = [(pre + "input_layernorm.weight", (c.h,))]
    if ln_bias:
        out.append((pre + "input_layernorm.bias", (c.h,)))
    if c.q_lora is None:
        out.append((a + "linear_q_proj.weight", (c.a * qd, c.h)))
    else:
        out.append((a + "linear_q_down_proj.weight", (c.q_lora, c.h)))
        if c.qk_norm:
            out.append((a + "linear_q_up_proj.layer_norm_weight", (c.q_lora,)))
            if ln_bias:
                out.append((a + "linear_q_up_proj.layer_norm_bias", (c.q_lora,)))
        out.append((a + "linear_q_up_proj.weight", (c.a * qd, c.q_lora)))
    out.append((a + "linear_kv_down_proj.weight", (c.kv_lora + c.qk_pos, c.h)))
    if c.qk_norm:
        out.append((a + "linear_kv_up_proj.layer_norm_weight", (c.kv_lora,)))
        if ln_bias:
            out.append((a + "linear_kv_up_proj.layer_norm_bias", (c.kv_lora,)))
    out.append((a + "linear_kv_up_proj.weight", (c.a * (c.qk_head + c.v_head), c.kv_lora)))
    out.append((a + "linear_proj.weight", (c.h, c.a * c.v_head)))
    if c.bias:
        out.append((a + "linear_proj.bias", (c.h,)))
    return out


def param_shapes(c):
    """Megatron Core TE-spec names and global shapes, in registration order."""
    out = [("embedding.word_embeddings.weight", (c.V, c.h))]
    if c.pos == "learned_absolute":
        out.append(("embedding.position_embeddings.weight", (c.P, c.h)))
    ln_bias = c.norm == "LayerNorm"
    for n in range(c.L):
        out.extend(layer_param_shapes(c, "decoder.layers.%d." % n, is_moe(c, n)))
    out.append(("decoder.final_layernorm.weight", (c.h,)))
    if ln_bias:
        out.append(("decoder.final_layernorm.bias", (c.h,)))
    for k in range(getattr(c, "mtp", 0)):
        # MultiTokenPredictionLayer: enorm, hnorm, eh_proj, the transformer layer (the last
        # decoder layer's kind), final_layernorm
        pre = "mtp.layers.%d." % k
        for nm in ("enorm", "hnorm"):
            out.append((pre + nm + ".weight", (c.h,)))
            if ln_bias:
                out.append((pre + nm + ".bias", (c.h,)))
        out.append((pre + "eh_proj.weight", (c.h, 2 * c.h)))
        out.extend(layer_param_shapes(c, pre + "transformer_layer.", is_moe(c, c.L - 1)))
        out.append((pre + "final_layernorm.weight", (c.h,)))
        if ln_bias:
            out.append((pre + "final_layernorm.bias", (c.h,)))
    if c.untie:
        out.append(("output_layer.weight", (c.V, c.h)))
    return out


def layer_param_shapes(c, pre, moe):
    """One transformer layer's names (prefix pre) and shapes."""
    out = []
    ln_bias = c.norm == "LayerNorm"
    if getattr(c, "mla", False):
        out.extend(mla_param_shapes(c, pre, ln_bias))
    else:
        out.extend(attention_param_shapes(c, pre, ln_bias))
    if moe:
        # MoE layers keep an unfused pre-MLP norm; router, experts, shared experts
        # (MoELayer's registration order); no biases
        out.append((pre + "pre_mlp_layernorm.weight", (c.h,)))
        if ln_bias:
            out.append((pre + "pre_mlp_layernorm.bias", (c.h,)))
        out.append((pre + "mlp.router.weight", (c.E, c.h)))
        for j in range(c.E):
            e = pre + "mlp.experts.local_experts.%d." % j
            out.append((e + "linear_fc1.weight", (2 * c.fm if c.swiglu else c.fm, c.h)))
            out.append((e + "linear_fc2.weight", (c.h, c.fm)))
        if c.fs is not None:
            out.append((pre + "mlp.shared_experts.linear_fc1.weight", (2 * c.fs if c.swiglu else c.fs, c.h)))
            out.append((pre + "mlp.shared_experts.linear_fc2.weight", (c.h, c.fs)))
            if c.sgate:
                out.append((pre + "mlp.shared_experts.gate_weight", (1, c.h)))
        return out
    out.append((pre + "mlp.linear_fc1.layer_norm_weight", (c.h,)))
    if ln_bias:
        out.append((pre + "mlp.linear_fc1.layer_norm_bias", (c.h,)))
    f1 = 2 * c.f if c.swiglu else c.f
    out.append((pre + "mlp.linear_fc1.weight", (f1, c.h)))
    if c.bias:
        out.append((pre + "mlp.linear_fc1.bias", (f1,)))
    out.append((pre + "mlp.linear_fc2.weight", (c.h, c.f)))
    if c.bias:
        out.append((pre + "mlp.linear_fc2.bias", (c.h,)))
    return out


class TanhGeluFn(torch.autograd.Function):
    """Megatron's fused bias-GELU: tanh approximation forward, and its own backward
    formula (constant 0.1070322243), megatron/core/fusions/fused_bias_gelu.py."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
        return ff * g


def norm(x, w, b, c):
    if c.norm == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.eps) * w
    return F.layer_norm(x, (x.shape[-1],), w, b, c.eps)


def rope_cos_sin(c, S, dtype):
    """cos/sin [S, rot] of the RoPE; frequencies in fp32 as Megatron computes
    them: inv_freq = 1/(base**(arange(0,d,2)/d)), positions 0..S-1, cat(freqs, freqs)
    (rotate-half) or each frequency twice in place (--rotary-interleaved). YaRN's
    frequencies and its cos/sin factor (yarn_inv_freq) where --position-embedding-type yarn."""
    d = c.rot
    mscale = 1.0
    if getattr(c, "yarn", None):
        inv_freq, mscale = yarn_inv_freq(d, c.rotary_base, c.yarn)
    else:
        inv_freq = 1.0 / (c.rotary_base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    if getattr(c, "rope_scaling", None):
        inv_freq = llama3_scaling(inv_freq, c.rope_scaling)
    freqs = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)
    if getattr(c, "interleaved", False):
        emb = freqs.repeat_interleave(2, dim=-1)  # [f0, f0, f1, f1, ...]
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
    return (torch.cos(emb) * mscale).to(dtype), (torch.sin(emb) * mscale).to(dtype)


def yarn_inv_freq(d, base, y):
    """YaRN (Peng et al.; Megatron's YarnRotaryEmbedding over d channels): pair i's
    frequency is base^(-2i/d) (extrapolation) below the correction range, that divided by
    the factor (interpolation) above it, and a linear blend across it. The range's ends are
    the pair indices at which the wavelength fits beta_fast and beta_slow turns into the
    original context: i(r) = d ln(orig / (2 pi r)) / (2 ln base), rounded outwards unless
    told not to, clipped to [0, d-1]. cos and sin are scaled by
    m(mscale) / m(mscale_all_dim), m(x) = 0.1 x ln(factor) + 1 (1 when factor <= 1)."""
    f, orig = y["factor"], y["original"]

    def pair_at(turns):
        return d * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = pair_at(y["beta_fast"]), pair_at(y["beta_slow"])
    if y["round"]:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    i = torch.arange(d // 2, dtype=torch.float32)
    blend = torch.clamp((i - lo) / (hi - lo), 0, 1)  # 0: extrapolate, 1: interpolate
    powers = base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    extrapolated, interpolated = 1.0 / powers, 1.0 / (f * powers)
    keep = 1.0 - blend
    inv_freq = interpolated * (1 - keep) + extrapolated * keep

    def m(x):
        return 1.0 if f <= 1 else 0.1 * x * math.log(f) + 1.0

    return inv_freq, m(y["mscale"]) / m(y["mscale_all_dim"])


def llama3_scaling(inv_freq, factor, low=1.0, high=4.0, old=8192):
    """Llama 3.x frequency scaling (--use-rope-scaling; Meta's reference formula, which
    Megatron and transformers' rope_type llama3 share): long wavelengths divided by factor,
    short ones kept, a linear mix in between. fp32 throughout."""
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    mixed = (1 - smooth) * out / factor + smooth * out
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, mixed, out)


def apply_rope(t, cos, sin, d, interleaved=False):
    """t [b, s, heads, k]; rotate the first d channels of every head: pairs (i, i + d/2),
    or (2i, 2i+1) when interleaved."""
    rot, rest = t[..., :d], t[..., d:]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    else:
        x1, x2 = rot[..., : d // 2], rot[..., d // 2:]
        rotated = torch.cat((-x2, x1), dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((rot * cos + rotated * sin, rest), dim=-1)


def attention(x, P, pre, c, rope, mask):
    """Fused-QKV self-attention. x [b, s, h] (already normed); mask [b, s, s] True = masked."""
    b, s, _ = x.shape
    qkv = F.linear(x, P[pre + "linear_qkv.weight"], P.get(pre + "linear_qkv.bias"))
    qkv = qkv.view(b, s, c.g, (c.m + 2) * c.k)           # rows grouped per query group
    q = qkv[..., : c.m * c.k].reshape(b, s, c.a, c.k)     # head G*m + j
    kt = qkv[..., c.m * c.k:(c.m + 1) * c.k]              # [b, s, g, k]
    v = qkv[..., (c.m + 1) * c.k:]
    if getattr(c, "qk_norm", False):  # per head over its channels, before RoPE
        q = norm(q, P[pre + "q_layernorm.weight"], P.get(pre + "q_layernorm.bias"), c)
        kt = norm(kt, P[pre + "k_layernorm.weight"], P.get(pre + "k_layernorm.bias"), c)
    if rope is not None:
        q = apply_rope(q, rope[0], rope[1], c.rot, getattr(c, "interleaved", False))
        kt = apply_rope(kt, rope[0], rope[1], c.rot, getattr(c, "interleaved", False))
    kt = kt.repeat_interleave(c.m, dim=2)                 # query head i uses group i // m
    v = v.repeat_interleave(c.m, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kt) * (1.0 / math.sqrt(c.k))
    scores = scores.masked_fill(mask[:, None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, c.a * c.k)
    return F.linear(ctx, P[pre + "linear_proj.weight"], P.get(pre + "linear_proj.bias"))


def mla_rope(t, cos, sin, d):
    """Megatron's RoPE for MLA (apply_rotary_pos_emb with mla_rotary_interleaved): the
    channels are first reordered even ones then odd ones, then rotated by halves."""
    t = torch.cat((t[..., 0::2], t[..., 1::2]), dim=-1)
    return apply_rope(t, cos, sin, d)


def mla_attention(x, P, pre, c, rope, mask):
    """MLASelfAttention.get_query_key_value_tensors + core attention + linear_proj, one
    rank; rope holds YaRN's cos/sin factor with rope_type yarn. x [b, s, h] is
    input_layernorm's output."""
    b, s, _ = x.shape
    qd = c.qk_head + c.qk_pos
    if c.q_lora is None:
        q = F.linear(x, P[pre + "linear_q_proj.weight"])
    else:
        qc = F.linear(x, P[pre + "linear_q_down_proj.weight"])
        if c.qk_norm:
            qc = norm(qc, P[pre + "linear_q_up_proj.layer_norm_weight"], P.get(pre + "linear_q_up_proj.layer_norm_bias"), c)
        q = F.linear(qc, P[pre + "linear_q_up_proj.weight"])
    q = q.view(b, s, c.a, qd)
    kv_combined = F.linear(x, P[pre + "linear_kv_down_proj.weight"])
    kv_c, k_pos = torch.split(kv_combined, [c.kv_lora, c.qk_pos], dim=-1)
    if c.qk_norm:
        kv_c = norm(kv_c, P[pre + "linear_kv_up_proj.layer_norm_weight"], P.get(pre + "linear_kv_up_proj.layer_norm_bias"), c)
    kv = F.linear(kv_c, P[pre + "linear_kv_up_proj.weight"]).view(b, s, c.a, c.qk_head + c.v_head)
    q_nope, q_pos = torch.split(q, [c.qk_head, c.qk_pos], dim=-1)
    k_nope, v = torch.split(kv, [c.qk_head, c.v_head], dim=-1)
    q_pos = mla_rope(q_pos, rope[0], rope[1], c.qk_pos)
    k_pos = mla_rope(k_pos[:, :, None, :], rope[0], rope[1], c.qk_pos)   # one head, shared
    query = torch.cat((q_nope, q_pos), dim=-1)
    key = torch.cat((k_nope, k_pos.expand(-1, -1, c.a, -1)), dim=-1)
    scores = torch.einsum("bqhd,bkhd->bhqk", query, key) * c.mla_softmax_scale
    scores = scores.masked_fill(mask[:, None, :, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, c.a * c.v_head)
    return F.linear(ctx, P[pre + "linear_proj.weight"], P.get(pre + "linear_proj.bias"))


def ffn_act(y, c):
    """The MLP activation on fc1's output: SwiGLU (first half gate, second half up) or GELU."""
    if c.swiglu:
        gate, up = torch.chunk(y, 2, dim=-1)
        return F.silu(gate) * up
    if c.gelu == "tanh":
        return TanhGeluFn.apply(y)
    return F.gelu(y)


def mlp(x, P, pre, c):
    y = ffn_act(F.linear(x, P[pre + "linear_fc1.weight"], P.get(pre + "linear_fc1.bias")), c)
    return F.linear(y, P[pre + "linear_fc2.weight"], P.get(pre + "linear_fc2.bias"))


# ---- mixture of experts (moe-spec.md §2-§5, one rank: no TP/EP, so dispatch is a gather)
#
# Tokens are numbered in megac's batch-major order t = b*S + s (Megatron flattens [s, b]
# sequence-major); the order matters only for the position drop policy and for which
# tokens form a sequence in seq_aux_loss.

MOE_LOG_NAMES = ("load_balancing_loss", "seq_load_balancing_loss", "z_loss")


def choose(s, c):
    """The k experts of each token by the choosing scores s [T, E]: the plain top-k, or with
    group-limited routing the top-k of the group_topk groups (equal runs of E/groups experts)
    whose top-(k/group_topk) scores sum highest."""
    k = c.topk
    if c.group_topk:
        T = s.shape[0]
        per = c.E // c.groups
        gsum = s.detach().view(T, c.groups, per).topk(k // c.group_topk, dim=-1)[0].sum(-1)
        best = gsum.topk(c.group_topk, dim=-1)[1]
        allowed = torch.zeros(T, c.groups, dtype=torch.bool).scatter(1, best, True)
        allowed = allowed.repeat_interleave(per, dim=1)
        s = s.detach().masked_fill(~allowed, float("-inf"))
    return torch.topk(s.detach(), k, dim=-1)[1]


def moe_scores(z, c, ebias=None):
    """(probs [T, E], routing map [T, E] bool) from the router logits z [T, E]: the k chosen
    columns hold the token's weights, the others 0 (moe-spec.md §2). ebias [E]: the expert
    bias, added to the sigmoid scores to choose only."""
    k = c.topk
    if c.score == "softmax" and not c.pre_softmax:
        idx = choose(z, c)
        w = torch.softmax(z.gather(1, idx), dim=-1)     # over the k chosen logits: sums to 1
    elif c.score == "softmax":
        sc = torch.softmax(z, dim=-1)
        idx = choose(sc, c)
        w = sc.gather(1, idx)                           # not renormalised
    else:
        sg = torch.sigmoid(z)
        idx = choose(sg if ebias is None else sg + ebias.to(sg.dtype), c)
        w = sg.gather(1, idx)
        if k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
    if c.scale:
        w = w * c.scale
    probs = torch.zeros_like(z).scatter(1, idx, w)
    rmap = torch.zeros(z.shape, dtype=torch.bool).scatter(1, idx, True)
    return probs, rmap


def moe_capacity(T, c):
    """Tokens each expert may take in one router call: ceil((T*k/E) * cf), no minimum."""
    return int(math.ceil((T * c.topk / c.E) * c.cf))


def moe_keep(probs, rmap, c, B=1):
    """Per-expert keep mask [T, E] with `capacity` rows per column, or None when capacity > T
    (nothing dropped). Policy probs keeps the largest probs of the column (unrouted tokens
    have 0); position keeps the earliest routed tokens. Megatron takes a torch.topk of the
    column, whose order among equal values is unspecified (moe-spec.md §4); here equal keys
    go to the earlier token, which is what the position policy intends. "Earlier" is
    Megatron's order: its tokens are [S, B] (position-major), ours [B, S], so token
    t = b*S + s comes at s*B + b."""
    T = probs.shape[0]
    cp = getattr(c, "cp", 1)
    G = c.shards * cp  # tensor parallelism (with SP): each rank's router sees its sequence shard alone
    cap = moe_capacity(T // G, c)
    if cap > T // G:
        return None
    key = (probs if c.drop_policy == "probs" else rmap).detach().to(torch.float64).numpy()
    keep = np.zeros(key.shape, dtype=bool)
    S = T // B
    tok = (np.arange(T) % S) * B + np.arange(T) // S
    pos = np.arange(T) % S
    # context parallelism (Megatron's load-balanced split): CP rank r holds chunks r and
    # 2cp-1-r of the 2cp chunks of each sequence, in that order; its SP shards cut that.
    # Within a rank the earlier local position is the earlier global one, so tok still orders.
    ch = pos // (S // (2 * cp))
    r = np.where(ch < cp, ch, 2 * cp - 1 - ch)
    local = np.where(ch < cp, pos - r * (S // (2 * cp)), pos - (2 * cp - 2 - r) * (S // (2 * cp)))
    shard = r * c.shards + local // (S // G)  # local positions [g S/G, (g+1) S/G) of every sample
    for e in range(c.E):
        for g in range(G):
            rows = np.nonzero(shard == g)[0]
            order = rows[np.lexsort((tok[rows], -key[rows, e]))]
            keep[order[:cap], e] = True
    return torch.from_numpy(keep)


def switch_aux(scores, amap, c):
    """Megatron's switch load-balancing loss without its coefficient over the N rows given:
    E/(k N^2) * sum_e P_e c_e, P_e the summed scores, c_e the tokens whose aux map picks e
    (1 for perfectly balanced routing). c_e carries no gradient."""
    N = scores.shape[0]
    counts = amap.sum(0).to(scores.dtype)
    return torch.sum(scores.sum(0) * counts) * (c.E / (c.topk * N * N))


def moe_router(z, c, B, ebias=None):
    """The router after its logits z [T, E], T = B*S tokens of B samples: (probs, map) after
    token dropping, the auxiliary objective (the z-loss and the load-balancing loss with their
    coefficients; the caller scales it by 1/num_microbatches, as Megatron's MoEAuxLossAutoScaler
    does with loss scale 1 and cp = 1) and the values Megatron logs for this layer
    (aux/coeff, z_loss/coeff = mean lse^2)."""
    T, E = z.shape
    log = {}
    extra = z.new_zeros(())
    if c.z_coeff is not None:
        zl = torch.logsumexp(z, dim=-1).pow(2).mean()
        extra = extra + c.z_coeff * zl
        log["z_loss"] = float(zl) if c.z_coeff != 0 else float("nan")  # Megatron logs 0/0
    probs, rmap = moe_scores(z, c, ebias)
    if c.cf is not None:
        keep = moe_keep(probs, rmap, c, B)
        # (capacity > T with padding: Megatron's dispatcher fails; here nothing is dropped)
        if keep is not None:
            # padding routes the kept-but-unrouted rows through the experts with weight 0,
            # which changes no number; dropped weights are not renormalised
            rmap = keep if c.pad else rmap & keep
            probs = probs * keep
    # the logged names are force-initialised to 0 by a substring test on the type, so a zero
    # coefficient (loss not computed) logs 0 and seq_aux_loss also logs load_balancing_loss
    if "aux_loss" in c.lb_type:
        log["load_balancing_loss"] = 0.0
    if c.lb_type == "seq_aux_loss":
        log["seq_load_balancing_loss"] = 0.0
    if c.lb_type != "none" and c.aux_coeff != 0:
        # separate scores for the aux loss: softmax over all E, or sigma / sum sigma; their own
        # plain top-k map, before any dropping
        if c.score == "softmax":
            sc = torch.softmax(z, dim=-1)
        else:
            sg = torch.sigmoid(z)
            sc = sg / sg.sum(-1, keepdim=True)
        amap = torch.zeros(z.shape, dtype=torch.bool).scatter(1, torch.topk(sc, c.topk, dim=-1)[1], True)
        if c.lb_type == "aux_loss":
            a, name = switch_aux(sc, amap, c), "load_balancing_loss"
        else:  # per sample over its S tokens, then the mean over samples
            S = T // B
            a = sum(switch_aux(sc[b * S:(b + 1) * S], amap[b * S:(b + 1) * S], c) for b in range(B)) / B
            name = "seq_load_balancing_loss"
        extra = extra + c.aux_coeff * a
        log[name] = float(a)
    return probs, rmap, extra, log


def moe_layer(x, P, pre, c, moe_log=None):
    """The MoE MLP on the pre-MLP norm output x [B, S, h] (pre = "decoder.layers.N.mlp.").
    Appends (attached objective, logged values) to moe_log."""
    B, S, h = x.shape
    xt = x.reshape(B * S, h)  # t = b*S + s
    z = F.linear(xt, P[pre + "router.weight"])
    ebias = c.ebias[pre] if c.ebias is not None else None
    probs, rmap, extra, log = moe_router(z, c, B, ebias)
    if ebias is not None and torch.is_grad_enabled():  # training forwards count the kept slots
        c.counts[pre] = c.counts.get(pre, 0) + rmap.sum(0).to(torch.float32)
    out = torch.zeros_like(xt)
    for j in range(c.E):  # expert by expert, each adding its rows in token order (Megatron's combine)
        rows = torch.nonzero(rmap[:, j]).squeeze(1)
        if rows.numel() == 0:
            continue
        e = pre + "experts.local_experts.%d." % j
        a = ffn_act(F.linear(xt[rows], P[e + "linear_fc1.weight"]), c)
        a = a * probs[rows, j].unsqueeze(1)  # Megatron weights the activation, before fc2
        out = out.index_add(0, rows, F.linear(a, P[e + "linear_fc2.weight"]))
    if c.fs is not None:
        sh = mlp(xt, P, pre + "shared_experts.", c)
        if c.sgate:  # sigmoid(x . w) per token scales the shared expert's output
            sh = sh * torch.sigmoid(F.linear(xt, P[pre + "shared_experts.gate_weight"]))
        out = out + sh
    if moe_log is not None:
        moe_log.append((extra, log))
    return out.view(B, S, h)


def moe_report(logs):
    """Megatron's per-iteration MoE metrics on one rank: each name's per-layer values summed
    over the micro-batches, times 1/num_microbatches, summed over the layers and divided by
    the number of MoE layers, i.e. the mean over the iteration's MoE layer calls."""
    out = {}
    for name in MOE_LOG_NAMES:
        vals = [lg[name] for _, lg in logs if name in lg]
        if vals:
            out[name] = sum(vals) / len(vals)
    return out


def gpt_forward(P, c, batch, attention_fn=attention, mlp_fn=mlp, moe_log=None, logits_only=False, mtp_losses=None):
    """Per-token cross-entropy [b, s] over the full padded vocabulary (logits_only: the
    logits [b, s, V] instead). MoE layers append their attached auxiliary objective and
    logged values to moe_log."""
    tokens = batch["tokens"]
    x = F.embedding(tokens, P["embedding.word_embeddings.weight"])
    if c.pos == "learned_absolute":
        x = x + F.embedding(batch["position_ids"], P["embedding.position_embeddings.weight"])
    mla = getattr(c, "mla", False)
    rope = rope_cos_sin(c, tokens.shape[1], x.dtype) if c.pos == "rope" or mla else None
    mask = batch["attention_mask"]
    if getattr(c, "causal_only", False):
        S = tokens.shape[1]
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1).expand(tokens.shape[0], S, S)
    wmask = None
    if getattr(c, "window", None) is not None:
        S = tokens.shape[1]
        i = torch.arange(S)
        wmask = mask | (i[None, :] < i[:, None] - c.window)[None, :, :]  # keys more than L back
    def layer(x, pre, n, moe):
        a = pre + "self_attention."
        windowed = wmask is not None and (c.swa_layers is None or c.swa_layers[n])
        if mla:
            hn = norm(x, P[pre + "input_layernorm.weight"], P.get(pre + "input_layernorm.bias"), c)
            x = x + mla_attention(hn, P, a, c, rope, wmask if windowed else mask)
        else:
            hn = norm(x, P[a + "linear_qkv.layer_norm_weight"], P.get(a + "linear_qkv.layer_norm_bias"), c)
            x = x + attention_fn(hn, P, a, c, rope, wmask if windowed else mask)
        m = pre + "mlp."
        if moe:
            hn = norm(x, P[pre + "pre_mlp_layernorm.weight"], P.get(pre + "pre_mlp_layernorm.bias"), c)
            return x + moe_layer(hn, P, m, c, moe_log)
        hn = norm(x, P[m + "linear_fc1.layer_norm_weight"], P.get(m + "linear_fc1.layer_norm_bias"), c)
        return x + mlp_fn(hn, P, m, c)

    for n in range(c.L):
        x = layer(x, "decoder.layers.%d." % n, n, is_moe(c, n))
    x = norm(x, P["decoder.final_layernorm.weight"], P.get("decoder.final_layernorm.bias"), c)
    w_out = P["output_layer.weight"] if c.untie else P["embedding.word_embeddings.weight"]
    logits = F.linear(x, w_out)
    if logits_only:
        return logits
    V = logits.shape[-1]
    if mtp_losses is not None and getattr(c, "mtp", 0):
        # multi-token prediction: depth k sees the ids (and positions) rolled k+1 places left,
        # zero-filled at the end, and predicts the labels rolled alike
        ids, pos, labels, hid = tokens, batch.get("position_ids"), batch["labels"], x
        for k in range(c.mtp):
            pre = "mtp.layers.%d." % k
            ids, pos, labels = roll_left(ids), roll_left(pos) if pos is not None else None, roll_left(labels)
            e = F.embedding(ids, P["embedding.word_embeddings.weight"])
            if c.pos == "learned_absolute":
                e = e + F.embedding(pos, P["embedding.position_embeddings.weight"])
            e = norm(e, P[pre + "enorm.weight"], P.get(pre + "enorm.bias"), c)
            hh = norm(hid, P[pre + "hnorm.weight"], P.get(pre + "hnorm.bias"), c)
            y = F.linear(torch.cat([e, hh], -1), P[pre + "eh_proj.weight"])
            y = layer(y, pre + "transformer_layer.", c.L - 1, is_moe(c, c.L - 1))
            hid = norm(y, P[pre + "final_layernorm.weight"], P.get(pre + "final_layernorm.bias"), c)
            lg = F.linear(hid, w_out)
            mtp_losses.append(F.cross_entropy(lg.reshape(-1, V), labels.reshape(-1),
                                              reduction="none").view(tokens.shape))
    return F.cross_entropy(logits.reshape(-1, V), batch["labels"].reshape(-1), reduction="none").view(tokens.shape)


def roll_left(t):
    """Megatron's roll_tensor(shifts=-1, dims=-1) without context parallelism: each row
    moved one place left, the last place 0."""
    out = torch.zeros_like(t)
    out[..., :-1] = t[..., 1:]
    return out


def step_objective(P, c, micro_batches, forward=gpt_forward, backward=True, moe_log=None, mtp_log=None):
    """Megatron's train step objective: each micro-batch contributes
    (sum(loss*mask) / max(1, sum(mask)) + the MoE layers' attached aux/z losses) / M: the
    auxiliary losses get the gradient scale 1/M (loss scale 1, cp 1) and stay out of the lm
    loss. Backward per micro-batch, grads accumulate. Returns (objective, sum(loss*mask) over
    the batch, sum(mask)); moe_log, a list, receives every MoE layer call's logged values."""
    M = len(micro_batches)
    obj, lsum, ntok = 0.0, 0.0, 0.0
    for mb in micro_batches:
        calls = []
        mtp = []
        losses = forward(P, c, mb, moe_log=calls, mtp_losses=mtp) if getattr(c, "mtp", 0) else \
            forward(P, c, mb, moe_log=calls)
        mask = mb["loss_mask"].to(losses.dtype)
        s = torch.sum(losses.reshape(-1) * mask.reshape(-1))
        nt = float(mask.sum().item())
        o = s / max(1.0, nt) / M
        mk = mask
        for k, lk in enumerate(mtp):
            # MTPLossAutoScaler: (scale / D) x the masked mean over the rolled mask, with the
            # main loss's backward scale 1/M; logged: the masked mean, summed over micro-batches / M
            mk = roll_left(mk)
            nk = float(mk.sum().item())
            sk = torch.sum(lk.reshape(-1) * mk.reshape(-1))
            o = o + c.mtp_scale / c.mtp * sk / max(1.0, nk) / M
            if mtp_log is not None and nk > 0:
                mtp_log[k] = mtp_log.get(k, 0.0) + float(sk.item()) / nk / M
        for extra, _ in calls:
            o = o + extra / M
        if moe_log is not None:
            moe_log.extend(calls)
        if backward:
            o.backward()
        obj += float(o.item())
        lsum += float(s.item())
        ntok += nt
    return obj, lsum, ntok


# --------------------------------------------------------------------------- optimizer

class LRSchedule:
    """Megatron's OptimizerParamScheduler learning rate (megatron/core/optimizer_param_scheduler.py);
    steps = samples."""

    def __init__(self, args, gbs):
        self.max, self.min, self.init = args.lr, args.min_lr, args.lr_warmup_init
        self.style, self.wsd_style = args.lr_decay_style, args.lr_wsd_decay_style
        self.D = (args.lr_decay_iters if args.lr_decay_iters is not None else args.train_iters) * gbs
        if args.lr_warmup_fraction is not None:
            self.W = args.lr_warmup_fraction * self.D
        else:
            self.W = args.lr_warmup_iters * gbs
        self.A = (args.lr_wsd_decay_iters or 0) * gbs
        if self.D <= 0:
            die("LR decay steps must be > 0")
        if self.W >= self.D:
            die("LR warmup steps must be < decay steps")
        if self.min > self.max or self.init > self.max:
            die("--min-lr and --lr-warmup-init must be <= --lr")
        if self.style == "WSD" and self.A <= 0:
            die("WSD needs --lr-wsd-decay-iters")

    def __call__(self, n):
        if self.W > 0 and n <= self.W:
            return self.init + ((self.max - self.init) * float(n) / float(self.W))
        if self.style == "constant":
            return self.max
        if n > self.D:
            return self.min
        if self.style == "inverse-square-root":
            return max(self.min, self.max * max(self.W, 1) ** 0.5 / (max(n, 1) ** 0.5))
        ratio = float(n - self.W) / float(self.D - self.W)
        if self.style == "linear":
            coeff = 1.0 - ratio
        elif self.style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:  # WSD
            s0 = self.D - self.A
            if n <= s0:
                coeff = 1.0
            else:
                r = float(n - s0) / float(self.A)
                coeff = {"linear": lambda: 1.0 - r, "cosine": lambda: 0.5 * (math.cos(math.pi * r) + 1.0),
                         "exponential": lambda: 2.0 * math.pow(0.5, r) - 1.0,
                         "minus_sqrt": lambda: 1.0 - math.sqrt(r)}[self.wsd_style]()
        return self.min + coeff * (self.max - self.min)


def no_weight_decay(name, shape):
    return name.endswith(".bias") or len(shape) == 1


class AdamW:
    """torch.optim.AdamW's single-tensor update, written out; per-parameter weight decay
    multiplier 0 for biases and 1-D tensors (Megatron's default param groups)."""

    def __init__(self, P, names, b1, b2, eps):
        self.P, self.names, self.b1, self.b2, self.eps = P, names, b1, b2, eps
        self.m = {n: torch.zeros_like(P[n]) for n in names}
        self.v = {n: torch.zeros_like(P[n]) for n in names}
        self.t = 0

    @torch.no_grad()
    def step(self, lr, wd):
        self.t += 1
        bc1 = 1 - self.b1 ** self.t
        bc2 = 1 - self.b2 ** self.t
        for n in self.names:
            p, g, m, v = self.P[n], self.P[n].grad, self.m[n], self.v[n]
            decay = 0.0 if no_weight_decay(n, p.shape) else wd
            p.mul_(1 - lr * decay)
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-(lr / bc1))


def grad_norm(P, names):
    return math.sqrt(sum(float(P[n].grad.double().pow(2).sum()) for n in names))


# --------------------------------------------------------------------------- model files

def load_model(path, c, dtype):
    import h5py
    shapes = param_shapes(c)
    want = dict(shapes)
    P = {}
    buffers = ["decoder.layers.%d.mlp.router.expert_bias" % n for n in range(c.L)
               if c.E and c.ebias is not None and is_moe(c, n)]
    buffers += ["mtp.layers.%d.transformer_layer.mlp.router.expert_bias" % k for k in range(c.mtp)
                if c.E and c.ebias is not None and is_moe(c, c.L - 1)]
    with h5py.File(path, "r") as f:
        have = set(k for k in f.keys() if not k.endswith("_extra_state"))
        for n in buffers:  # the expert bias: router state, not a parameter
            if n not in have:
                die("%s has no %s" % (path, n))
            c.ebias[n[:-len("router.expert_bias")]] = torch.from_numpy(np.asarray(f[n]).astype(np.float32))
            have.discard(n)
        missing = [n for n in want if n not in have]
        extra = sorted(have - set(want))
        if missing or extra:
            die("%s does not match the model flags: missing %s; unexpected %s" % (
                path, missing or "none", extra or "none"))
        for n, shape in shapes:
            a = np.asarray(f[n])
            if tuple(a.shape) != tuple(shape):
                die("%s: %s has shape %s, the flags give %s" % (path, n, a.shape, shape))
            P[n] = torch.from_numpy(a.astype(np.float32)).to(dtype).requires_grad_(True)
    return P, [n for n, _ in shapes]


def save_model(path, P, names):
    import h5py
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        for n in names:
            f.create_dataset(n, data=P[n].detach().to(torch.float32).numpy())
    os.replace(tmp, path)


def init_model(c, std, emb_std, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    P = {}
    names = []
    for n, shape in param_shapes(c):
        names.append(n)
        if n.endswith("layer_norm_weight") or n.endswith("layernorm.weight"):  # incl. pre_mlp_layernorm
            t = torch.ones(shape, dtype=dtype)
        elif n.endswith("bias"):
            t = torch.zeros(shape, dtype=dtype)
        else:
            s = std
            if n.startswith("embedding."):
                s = emb_std
            elif n.endswith("linear_proj.weight") or n.endswith("linear_fc2.weight"):
                s = std / math.sqrt(2.0 * c.L)
            t = (torch.randn(shape, generator=g, dtype=torch.float64) * s).to(dtype)
        P[n] = t.requires_grad_(True)
    return P, names


def padded_vocab(vocab, args):
    mult = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    return int(math.ceil(vocab / mult)) * mult


# --------------------------------------------------------------------------- training

def train(args):
    if args.hidden_dropout != 0 or args.attention_dropout != 0:
        die("the reference has no dropout: pass --hidden-dropout 0 --attention-dropout 0")
    if args.optimizer != "adam":
        die("only --optimizer adam is implemented")
    if args.weight_decay_incr_style != "constant":
        die("only --weight-decay-incr-style constant is implemented")
    if args.reset_attention_mask and args.no_create_attention_mask_in_dataloader:
        die("--reset-attention-mask requires the attention mask to be created")
    for name in ("micro_batch_size", "train_iters", "lr", "data_path", "ref_model"):
        if getattr(args, name) is None:
            die("--" + name.replace("_", "-") + " is required")
    if len(args.data_path) != 1:
        die("--data-path: one dataset prefix without weight only")
    dtype = torch.float64 if args.ref_dtype == "float64" else torch.float32
    mbs = args.micro_batch_size
    gbs = args.global_batch_size or mbs
    if gbs % mbs:
        die("--global-batch-size must be divisible by --micro-batch-size")
    M = gbs // mbs

    import h5py
    with h5py.File(args.ref_model, "r") as f:
        if "embedding.word_embeddings.weight" not in f:
            die(args.ref_model + ": no embedding.word_embeddings.weight")
        V = f["embedding.word_embeddings.weight"].shape[0]
    c = model_config(args, V)
    c.causal_only = args.ref_causal_only
    P, names = load_model(args.ref_model, c, dtype)

    _, eod, pad = tokenizer_ids(args)
    if eod is None and (args.eod_mask_loss or args.reset_position_ids or args.reset_attention_mask):
        die("the EOD id is unknown: give tokenizer flags or --eod-id")
    prefix = args.data_path[0]
    ds = IndexedDataset(prefix)
    index = find_train_cache(args, prefix, args.train_iters * gbs)
    samples = GPTSamples(ds, index, args.seq_length, eod, pad, args.reset_position_ids,
                         args.reset_attention_mask, args.eod_mask_loss)
    if len(samples) < args.train_iters * gbs:
        die("the train split has %d samples, %d needed" % (len(samples), args.train_iters * gbs))

    out = open(args.ref_out, "w") if args.ref_out else sys.stdout
    sched = LRSchedule(args, gbs)
    opt = AdamW(P, names, args.adam_beta1, args.adam_beta2, args.adam_eps)
    n = 0
    for it in range(args.train_iters):
        lr = sched(n)
        for name in names:
            P[name].grad = None
        mbs_list = []
        for mi in range(M):
            first = it * gbs + mi * mbs
            b = collate([samples[k] for k in range(first, first + mbs)])
            b["tokens"], b["labels"] = b["tokens"].long(), b["labels"].long()
            mbs_list.append(b)
        moe_log = []
        mtp_log = {}
        _, lsum, ntok = step_objective(P, c, mbs_list, moe_log=moe_log, mtp_log=mtp_log)
        lm_loss = lsum / ntok if ntok > 0 else float("nan")
        if c.E and c.ebias is not None:  # aux-loss-free balancing, once per iteration, in fp32
            for pre, cnt in c.counts.items():
                mean = cnt.sum() / c.E
                c.ebias[pre] = c.ebias[pre] + torch.sign(mean - cnt) * torch.tensor(c.bias_rate, dtype=torch.float32)
            c.counts = {}
        gn = grad_norm(P, names)
        if args.dump_grads and it == 0:
            os.makedirs(args.dump_grads, exist_ok=True)
            for name in names:
                np.save(os.path.join(args.dump_grads, name + ".npy"), P[name].grad.to(torch.float32).numpy())
        if args.clip_grad > 0:
            coeff = args.clip_grad / (gn + 1.0e-6)
            if coeff < 1.0:
                with torch.no_grad():
                    for name in names:
                        P[name].grad.mul_(coeff)
        opt.step(lr, args.weight_decay)
        n += gbs
        line = {"iteration": it + 1, "lm loss": lm_loss}
        line.update(moe_report(moe_log))  # Megatron prints these right after the lm loss
        for k in range(c.mtp):
            line["mtp_%d loss" % (k + 1)] = mtp_log.get(k, 0.0)
        line.update({"grad norm": gn, "learning rate": sched(n)})
        print(json.dumps(line), file=out, flush=True)
        if args.exit_interval and (it + 1) % args.exit_interval == 0:
            break
    if out is not sys.stdout:
        out.close()
    if args.ref_save:
        save_model(args.ref_save, P, names)


def write_init_model(args):
    vocab, _, _ = tokenizer_ids(args)
    if vocab is None:
        die("--write-init-model needs tokenizer flags that give the vocabulary size")
    c = model_config(args, padded_vocab(vocab, args))
    std = args.init_method_std
    emb_std = args.embedding_init_method_std if args.embedding_init_method_std is not None else std
    P, names = init_model(c, std, emb_std, args.seed)
    save_model(args.write_init_model, P, names)
    sys.stderr.write("torch_ref.py: wrote %s (padded vocab %d, %d tensors, %d parameters)\n" % (
        args.write_init_model, c.V, len(names), sum(P[n].numel() for n in names)))


# --------------------------------------------------------------------------- self-test

FAILS = []


def check(good, what, detail=""):
    """A TAP-style line; the detail (what was measured) on failure or with TORCH_REF_VERBOSE."""
    print(("ok - " if good else "not ok - ") + what)
    if not good:
        FAILS.append(what)
    if detail != "" and (not good or os.environ.get("TORCH_REF_VERBOSE")):
        print("#   " + str(detail).replace("\n", "\n#   "))


def write_idx(prefix, docs, dtype_code=8):
    """A text .bin/.idx pair, one sequence per document (docs/formats.md)."""
    dt = np.dtype(DTYPES[dtype_code])
    lengths = np.array([len(d) for d in docs], dtype="<i4")
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1].astype(np.int64) * dt.itemsize)]).astype("<i8")
    doc_idx = np.arange(len(docs) + 1, dtype="<i8")
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=dt).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + np.array([1], "<u8").tobytes() + bytes([dtype_code]))
        f.write(np.array([len(docs), len(docs) + 1], "<u8").tobytes())
        f.write(lengths.tobytes() + pointers.tobytes() + doc_idx.tobytes())


def selftest_data(tmp):
    # docs/formats.md's 82-byte worked example (checked against Megatron's own writer)
    hexdump = ("4d4d4944494458000001000000000000000802000000000000000300000000000000030000000300"
               "0000000000000000000006000000000000000000000000000000010000000000000002000000"
               "00000000")
    p = os.path.join(tmp, "ex")
    open(p + ".idx", "wb").write(bytes.fromhex(hexdump))
    open(p + ".bin", "wb").write(bytes.fromhex("883ce30350c4d001da0c50c4"))
    ds = IndexedDataset(p)
    good = (list(ds.lengths) == [3, 3] and list(ds.pointers) == [0, 6] and list(ds.doc_indices) == [0, 1, 2]
            and ds.dtype == np.dtype("<u2") and list(ds.get(1)) == [464, 3290, 50256]
            and list(ds.get(0, 1, 1)) == [995])
    check(good, "the .idx reader reads the worked example")

    # samples from the doc/sample/shuffle indices Megatron's own code builds for the worked
    # example T (tests/fixtures/megatron-gpt/README.md)
    docs = [[100, 101, 102, 103, 0], [200, 201, 0], [300, 301, 302, 303, 304, 305, 0], [400, 401, 402, 0]]
    p = os.path.join(tmp, "g")
    write_idx(p, docs)
    ds = IndexedDataset(p)
    idx3 = {"document_index": np.array([0, 1, 2, 3], np.int32),
            "sample_index": np.array([[0, 0], [0, 4], [2, 0], [2, 4], [3, 1]], np.int32),
            "shuffle_index": np.array([1, 2, 3, 0], np.uint32)}
    s = GPTSamples(ds, idx3, 4, 0, None, False, False, False)
    got = [list(s.text(k)) for k in range(4)]
    want = [[0, 200, 201, 0, 300], [300, 301, 302, 303, 304], [304, 305, 0, 400, 401], [100, 101, 102, 103, 0]]
    check(got == want, "samples of the worked example, N=3", got)
    idx6 = {"document_index": np.array([0, 1, 2, 3, 1, 2, 3, 0], np.int32),
            "sample_index": np.array([[0, 0], [0, 4], [2, 0], [2, 4], [3, 1], [4, 1], [5, 2], [5, 6], [6, 3], [7, 3]], np.int32),
            "shuffle_index": np.array([0, 2, 3, 1, 4, 8, 7, 6, 5], np.uint32)}
    s = GPTSamples(ds, idx6, 4, 0, None, False, False, False)
    got = [list(s.text(k)) for k in (0, 4, 8)]
    want = [[100, 101, 102, 103, 0], [401, 402, 0, 200, 201], [201, 0, 300, 301, 302]]
    check(got == want, "samples of the worked example, N=6", got)
    s = GPTSamples(ds, idx3, 4, 0, None, True, True, True)
    x = s[0]
    good = (list(x["tokens"]) == [0, 200, 201, 0] and list(x["labels"]) == [200, 201, 0, 300]
            and list(x["loss_mask"]) == [0, 1, 1, 0] and list(x["position_ids"]) == [0, 0, 1, 2])
    am = x["attention_mask"]  # docs by position: 0 | 1 1 1 (EOD at 0 and 3)
    want_am = np.array([[0, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1], [1, 0, 0, 0]], bool)
    check(good and (am == want_am).all(), "EOD loss mask, position reset and document attention mask",
          (x, am.astype(int)))
    # a pad id that occurs in the data: masked in the loss, replaced by 0
    s = GPTSamples(ds, idx3, 4, 0, 201, False, False, False)
    x = s[0]
    check(list(x["loss_mask"]) == [1, 0, 1, 1] and list(x["tokens"]) == [0, 200, 0, 0]
          and list(x["labels"]) == [200, 0, 0, 300], "pad id masking and replacement", x)


def selftest_schedule():
    a = build_parser().parse_args(["--lr", "1e-3", "--min-lr", "1e-4", "--train-iters", "10",
                                   "--lr-warmup-iters", "2", "--lr-decay-style", "cosine"])
    s = LRSchedule(a, 4)
    vals = [s(n) for n in (0, 4, 8, 24, 40, 41)]
    want = [0.0, 5e-4, 1e-3, 1e-4 + 0.5 * (math.cos(math.pi * 0.5) + 1) * 9e-4, 1e-4, 1e-4]
    check(all(abs(x - y) < 1e-15 for x, y in zip(vals, want)), "cosine schedule with warmup", vals)
    a = build_parser().parse_args(["--lr", "1e-3", "--train-iters", "10", "--lr-decay-iters", "5"])
    s = LRSchedule(a, 2)
    vals = [s(n) for n in (0, 2, 10, 12)]
    check(all(abs(x - y) < 1e-15 for x, y in zip(vals, [1e-3, 8e-4, 0.0, 0.0])), "linear decay to min", vals)
    a = build_parser().parse_args(["--lr", "1e-3", "--train-iters", "10", "--lr-decay-style", "WSD",
                                   "--lr-wsd-decay-iters", "4", "--lr-wsd-decay-style", "linear"])
    s = LRSchedule(a, 1)
    vals = [s(n) for n in (6, 7, 10)]
    check(all(abs(x - y) < 1e-15 for x, y in zip(vals, [1e-3, 7.5e-4, 0.0])), "WSD linear anneal", vals)


def selftest_adamw():
    torch.manual_seed(0)
    w = torch.randn(5, 3)
    b = torch.randn(5)
    P = {"x.weight": w.clone().requires_grad_(True), "x.bias": b.clone().requires_grad_(True)}
    ref_w, ref_b = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    opt = AdamW(P, ["x.weight", "x.bias"], 0.9, 0.95, 1e-8)
    topt = torch.optim.AdamW([{"params": [ref_w], "weight_decay": 0.1},
                              {"params": [ref_b], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    for step in range(3):
        gw, gb = torch.randn(5, 3), torch.randn(5)
        P["x.weight"].grad, P["x.bias"].grad = gw.clone(), gb.clone()
        ref_w.grad, ref_b.grad = gw.clone(), gb.clone()
        lr = 1e-2 * (step + 1)
        for grp in topt.param_groups:
            grp["lr"] = lr
        opt.step(lr, 0.1)
        topt.step()
    d = max(float((P["x.weight"] - ref_w).abs().max()), float((P["x.bias"] - ref_b).abs().max()))
    check(d == 0.0, "AdamW equals torch.optim.AdamW (bias exempt from decay)", d)


# ---- a second, unfused formulation of the forward (per head, per query position)

def alt_norm(x, w, b, c):
    if c.norm == "RMSNorm":
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + c.eps) * w
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + c.eps) * w + b


def alt_attention(x, P, pre, c, rope_unused, mask):
    b, s, _ = x.shape
    W = P[pre + "linear_qkv.weight"]
    bias = P.get(pre + "linear_qkv.bias")
    blk = (c.m + 2) * c.k

    def rows(r0):
        w = W[r0:r0 + c.k]
        return x @ w.t() + (bias[r0:r0 + c.k] if bias is not None else 0)

    def rotate(t):  # t [b, s, k]: pairs (i, i + d/2) turned by pos * base^(-2i/d), float64 angles
        if c.pos != "rope":
            return t
        d = c.rot
        out = t.clone()
        for pos in range(s):
            for i in range(d // 2):
                th = pos * c.rotary_base ** (-2.0 * i / d)
                z = torch.complex(t[:, pos, i].double(), t[:, pos, i + d // 2].double()) * complex(math.cos(th), math.sin(th))
                out[:, pos, i] = z.real.to(t.dtype)
                out[:, pos, i + d // 2] = z.imag.to(t.dtype)
        return out

    heads = []
    for i in range(c.a):
        G, j = i // c.m, i % c.m
        q = rotate(rows(G * blk + j * c.k))
        kk = rotate(rows(G * blk + c.m * c.k))
        v = rows(G * blk + (c.m + 1) * c.k)
        out = torch.zeros_like(q)
        for bi in range(b):
            for t in range(s):
                allowed = [u for u in range(s) if not mask[bi, t, u]]
                sc = torch.stack([torch.dot(q[bi, t], kk[bi, u]) for u in allowed]) / math.sqrt(c.k)
                pr = torch.exp(sc - sc.max())
                pr = pr / pr.sum()
                out[bi, t] = sum(pr[n] * v[bi, u] for n, u in enumerate(allowed))
        heads.append(out)
    ctx = torch.cat(heads, dim=-1)
    y = ctx @ P[pre + "linear_proj.weight"].t()
    if pre + "linear_proj.bias" in P:
        y = y + P[pre + "linear_proj.bias"]
    return y


def alt_mlp(x, P, pre, c, f=None):
    f = c.f if f is None else f  # the width: ffn, expert or shared-expert size
    W = P[pre + "linear_fc1.weight"]
    bias = P.get(pre + "linear_fc1.bias")
    if c.swiglu:
        gate = x @ W[:f].t() + (bias[:f] if bias is not None else 0)
        up = x @ W[f:].t() + (bias[f:] if bias is not None else 0)
        y = gate / (1 + torch.exp(-gate)) * up
    else:
        y = x @ W.t() + (bias if bias is not None else 0)
        if c.gelu == "tanh":
            y = 0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
        else:
            y = 0.5 * y * (1 + torch.erf(y / math.sqrt(2)))
    y = y @ P[pre + "linear_fc2.weight"].t()
    if pre + "linear_fc2.bias" in P:
        y = y + P[pre + "linear_fc2.bias"]
    return y


def alt_moe(x, P, pre, c, moe_log):
    """The MoE layer token by token with Python lists: routing by sorting each token's
    scores, capacity by walking each expert's candidate tokens, each expert's output weighted
    after fc2 (as Hugging Face does; the same without biases), the aux losses by counting.
    Appends (attached objective, logged values) like moe_layer."""
    B, S, h = x.shape
    T, E, k = B * S, c.E, c.topk
    xs = x.reshape(T, h)
    W = P[pre + "router.weight"]
    zs = [torch.mv(W, xs[t]) for t in range(T)]

    def ranked(v):  # expert ids by decreasing value
        vals = [float(a) for a in v]
        return sorted(range(E), key=lambda e: -vals[e])

    def softmax(v):
        ex = torch.exp(v - v.max())
        return ex / ex.sum()

    chosen = []  # per token: {expert: weight}
    for zt in zs:
        top = ranked(zt)[:k]
        if c.score == "softmax" and c.pre_softmax:
            w = [softmax(zt)[e] for e in top]
        elif c.score == "softmax":
            w = list(softmax(torch.stack([zt[e] for e in top])))
        else:
            sg = 1 / (1 + torch.exp(-zt))
            w = [sg[e] for e in top]
            if k > 1:
                tot = sum(w)
                w = [v / tot for v in w]
        chosen.append(dict(zip(top, w)))
    if c.cf is not None:
        cap = math.ceil((T * k / E) * c.cf)
        for e in range(E):
            # earliest first in Megatron's position-major order: token b*S + s at s*B + b
            cand = sorted((t for t in range(T) if e in chosen[t]), key=lambda t: (t % S) * B + t // S)
            if c.drop_policy == "probs":
                cand.sort(key=lambda t: -float(chosen[t][e]))  # stable: ties keep the earlier
            for t in cand[cap:]:
                del chosen[t][e]
    ys = []
    for t in range(T):
        y = torch.zeros(h, dtype=x.dtype)
        for e in sorted(chosen[t]):
            y = y + chosen[t][e] * alt_mlp(xs[t], P, pre + "experts.local_experts.%d." % e, c, c.fm)
        if c.fs is not None:
            ys_ = alt_mlp(xs[t], P, pre + "shared_experts.", c, c.fs)
            if c.sgate:
                g = torch.dot(xs[t], P[pre + "shared_experts.gate_weight"][0])
                ys_ = ys_ / (1 + torch.exp(-g))
            y = y + ys_
        ys.append(y)

    extra, log = torch.zeros((), dtype=x.dtype), {}
    if c.z_coeff is not None:
        zl = sum((zt.max() + torch.log(torch.exp(zt - zt.max()).sum())) ** 2 for zt in zs) / T
        extra = extra + c.z_coeff * zl
        log["z_loss"] = float(zl) if c.z_coeff != 0 else float("nan")
    if "aux_loss" in c.lb_type:
        log["load_balancing_loss"] = 0.0
    if c.lb_type == "seq_aux_loss":
        log["seq_load_balancing_loss"] = 0.0
    if c.lb_type != "none" and c.aux_coeff != 0:
        if c.score == "softmax":
            sc = [softmax(zt) for zt in zs]
        else:
            sc = [(1 / (1 + torch.exp(-zt))) / (1 / (1 + torch.exp(-zt))).sum() for zt in zs]
        picks = [set(ranked(v)[:k]) for v in sc]

        def balance(ts):
            ts = list(ts)
            return sum(sum(sc[t][e] for t in ts) * sum(1 for t in ts if e in picks[t])
                       for e in range(E)) * E / (k * len(ts) ** 2)
        if c.lb_type == "aux_loss":
            a, name = balance(range(T)), "load_balancing_loss"
        else:
            a, name = sum(balance(range(b * S, (b + 1) * S)) for b in range(B)) / B, "seq_load_balancing_loss"
        extra = extra + c.aux_coeff * a
        log[name] = float(a)
    moe_log.append((extra, log))
    return torch.stack(ys).view(B, S, h)


def alt_forward(P, c, batch, moe_log=None):
    tokens = batch["tokens"]
    x = P["embedding.word_embeddings.weight"][tokens]
    if c.pos == "learned_absolute":
        x = x + P["embedding.position_embeddings.weight"][batch["position_ids"]]
    mask = batch["attention_mask"]
    for n in range(c.L):
        a = "decoder.layers.%d.self_attention." % n
        x = x + alt_attention(alt_norm(x, P[a + "linear_qkv.layer_norm_weight"],
                                       P.get(a + "linear_qkv.layer_norm_bias"), c), P, a, c, None, mask)
        m = "decoder.layers.%d.mlp." % n
        if is_moe(c, n):
            nw = "decoder.layers.%d.pre_mlp_layernorm." % n
            x = x + alt_moe(alt_norm(x, P[nw + "weight"], P.get(nw + "bias"), c), P, m, c,
                            moe_log if moe_log is not None else [])
            continue
        x = x + alt_mlp(alt_norm(x, P[m + "linear_fc1.layer_norm_weight"],
                                 P.get(m + "linear_fc1.layer_norm_bias"), c), P, m, c)
    x = alt_norm(x, P["decoder.final_layernorm.weight"], P.get("decoder.final_layernorm.bias"), c)
    w = P["output_layer.weight"] if c.untie else P["embedding.word_embeddings.weight"]
    logits = x @ w.t()
    lse = torch.log(torch.exp(logits - logits.max(-1, keepdim=True).values).sum(-1)) + logits.max(-1).values
    return lse - logits.gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)


SELFTEST_CONFIGS = [
    ("GPT-2 style: learned positions, LayerNorm, tanh GELU with biases, tied",
     "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --seq-length 8 --max-position-embeddings 10"),
    ("Llama style: RoPE, RMSNorm, SwiGLU, GQA 4/2, no biases, untied, EOD masks",
     "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
     "--seq-length 8 --max-position-embeddings 8 --position-embedding-type rope --normalization RMSNorm "
     "--swiglu --ffn-hidden-size 24 --disable-bias-linear --untie-embeddings-and-output-weights "
     "--eod-mask-loss --reset-position-ids --reset-attention-mask"),
    ("erf GELU without biases, RoPE on half the head, kv-channels 8, MQA, QKV bias, masks",
     "--num-layers 1 --hidden-size 12 --num-attention-heads 3 --kv-channels 8 --group-query-attention "
     "--num-query-groups 1 --seq-length 8 --max-position-embeddings 8 --position-embedding-type rope "
     "--rotary-percent 0.5 --rotary-base 100 --disable-bias-linear --add-qkv-bias --ffn-hidden-size 20 "
     "--eod-mask-loss --reset-position-ids --reset-attention-mask"),
    ("Mixtral-style MoE: 3 layers, MoE at 0 and 2 (freq 2), softmax top-2 of 4, aux_loss + z-loss, "
     "capacity 1.0 by probs, gated shared expert, SwiGLU, RoPE, RMSNorm",
     "--num-layers 3 --hidden-size 16 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
     "--seq-length 8 --max-position-embeddings 8 --position-embedding-type rope --normalization RMSNorm "
     "--swiglu --ffn-hidden-size 24 --disable-bias-linear --untie-embeddings-and-output-weights "
     "--num-experts 4 --moe-layer-freq 2 --moe-ffn-hidden-size 12 --moe-aux-loss-coeff 0.1 "
     "--moe-z-loss-coeff 0.01 --moe-expert-capacity-factor 1.0 --moe-shared-expert-intermediate-size 8 "
     "--moe-shared-expert-gate"),
    ("GPT-style MoE: LayerNorm pre-MLP norm with bias, erf-GELU experts, sigmoid top-1 of 3, "
     "seq_aux_loss, capacity 1.25 by position with padding, learned positions, tied",
     "--num-layers 2 --hidden-size 12 --num-attention-heads 3 --seq-length 8 --max-position-embeddings 8 "
     "--disable-bias-linear --ffn-hidden-size 20 --num-experts 3 --moe-router-topk 1 "
     "--moe-router-score-function sigmoid --moe-router-load-balancing-type seq_aux_loss "
     "--moe-aux-loss-coeff 0.1 --moe-expert-capacity-factor 1.25 --moe-token-drop-policy position "
     "--moe-pad-expert-input-to-capacity --eod-mask-loss"),
]


def synthetic_batches(c, args, gen, eod, n_micro, mbs):
    out = []
    for _ in range(n_micro):
        rows = []
        for _ in range(mbs):
            text = torch.randint(0, c.V - 3, (c.S + 1,), generator=gen).numpy()  # never the padding rows
            text[torch.randint(0, c.S + 1, (2,), generator=gen).numpy()] = eod
            tokens, labels = text[:-1].astype(np.int64), text[1:].astype(np.int64)
            lm, pos, am = ltor_masks(tokens, eod, args.reset_position_ids, args.reset_attention_mask, args.eod_mask_loss)
            rows.append({"tokens": tokens, "labels": labels, "loss_mask": lm, "position_ids": pos, "attention_mask": am})
        out.append(collate(rows))
    return out


def selftest_model():
    for ci, (what, flags) in enumerate(SELFTEST_CONFIGS):
        args = build_parser().parse_args(flags.split())
        c = model_config(args, 40)
        gen = torch.Generator().manual_seed(100 + ci)
        P64, names = init_model(c, 0.3, 0.5, 7 + ci, torch.float64)
        with torch.no_grad():  # make norms and biases non-trivial
            for n in names:
                if P64[n].dim() == 1:
                    P64[n].add_(torch.randn(P64[n].shape, generator=gen, dtype=torch.float64) * 0.2)
        batches = synthetic_batches(c, args, gen, 5, 2, 2)

        # (c) the fused formulation against the per-head loop, float64 and float32; MoE
        # layers also against the token-by-token loop, attached losses and logged values too
        with torch.no_grad():
            la, lb, l32 = [], [], []
            a = torch.cat([gpt_forward(P64, c, b, moe_log=la).reshape(-1) for b in batches])
            b = torch.cat([alt_forward(P64, c, b, moe_log=lb).reshape(-1) for b in batches])
            d64 = float((a - b).abs().max())
            P32 = {n: t.detach().float() for n, t in P64.items()}
            a32 = torch.cat([gpt_forward(P32, c, b, moe_log=l32).reshape(-1) for b in batches]).double()
            d32 = float((a32 - b).abs().max())
            moe64, moe32 = moe_log_diff(la, lb), moe_log_diff(l32, lb)
        check(d64 < 1e-6 and d32 < 1e-4 and moe64 < 1e-6 and moe32 < 1e-4,
              "forward = per-head unfused forward: " + what,
              "max |diff| float64 %.3g, float32 %.3g; MoE attached losses and logged values %.3g, %.3g (%d calls)"
              % (d64, d32, moe64, moe32, len(la)))

        # (d) gradients of the train-step objective against central finite differences
        for n in names:
            P64[n].grad = None
        step_objective(P64, c, batches)
        grads = {n: P64[n].grad.clone() for n in names}
        worst, where = 0.0, ""
        eps = 1e-6
        with torch.no_grad():
            for n in names:
                flat = P64[n].view(-1)
                picks = torch.randint(0, flat.numel(), (4,), generator=gen).tolist()
                if n == "embedding.word_embeddings.weight":  # also a padding row: output grad only
                    picks.append(flat.numel() - 1)
                for i in picks:
                    old = float(flat[i])
                    flat[i] = old + eps
                    fp = step_objective(P64, c, batches, backward=False)[0]
                    flat[i] = old - eps
                    fm = step_objective(P64, c, batches, backward=False)[0]
                    flat[i] = old
                    num = (fp - fm) / (2 * eps)
                    ana = float(grads[n].view(-1)[i])
                    err = abs(num - ana) / max(1e-3, abs(num), abs(ana))
                    if err > worst:
                        worst, where = err, "%s[%d]: analytic %.9g, numeric %.9g" % (n, i, ana, num)
        check(worst < 1e-5, "gradients = finite differences (float64): " + what,
              "worst relative error %.3g at %s" % (worst, where))
        if ci == 0:
            # the objective is the mean of micro-batch token means; the log is the token mean
            obj, lsum, ntok = step_objective(P64, c, batches, backward=False)
            with torch.no_grad():
                means = []
                for bt in batches:
                    l = gpt_forward(P64, c, bt)
                    means.append(float((l * bt["loss_mask"]).sum() / bt["loss_mask"].sum()))
            check(abs(obj - sum(means) / len(means)) < 1e-12, "objective = mean of micro-batch token means",
                  (obj, means))
        if c.E:
            # the MoE losses enter the objective with scale 1/M, never the lm loss
            log = []
            obj, lsum, ntok = step_objective(P64, c, batches, backward=False, moe_log=log)
            with torch.no_grad():
                means, extras = [], []
                for bt in batches:
                    calls = []
                    l = gpt_forward(P64, c, bt, moe_log=calls)
                    means.append(float((l * bt["loss_mask"]).sum() / bt["loss_mask"].sum()))
                    extras.append(sum(float(e) for e, _ in calls))
            want = (sum(means) + sum(extras)) / len(batches)
            n_moe = sum(1 for n in range(c.L) if is_moe(c, n))
            check(abs(obj - want) < 1e-12 and len(log) == n_moe * len(batches) and min(extras) > 1e-4,
                  "objective = mean over micro-batches of (token mean + attached MoE losses): " + what,
                  (obj, means, extras, len(log)))
    x = torch.randn(50, dtype=torch.float64, requires_grad=True)
    check(torch.autograd.gradcheck(TanhGeluFn.apply, (x,), raise_exception=False), "fused tanh-GELU backward passes gradcheck")


def moe_log_diff(la, lb):
    """Largest difference between two MoE layer-call logs: attached objectives and logged
    values (NaN equals NaN); infinite when the calls or names differ."""
    if len(la) != len(lb):
        return float("inf")
    worst = 0.0
    for (ea, ga), (eb, gb) in zip(la, lb):
        if set(ga) != set(gb):
            return float("inf")
        worst = max(worst, abs(float(ea) - float(eb)))
        for n in ga:
            if not (math.isnan(ga[n]) and math.isnan(gb[n])):
                worst = max(worst, abs(ga[n] - gb[n]))
    return worst


def moe_test_config(flags, h=8, f=6, L=1):
    base = ("--num-layers %d --hidden-size %d --num-attention-heads 1 --seq-length 4 "
            "--max-position-embeddings 4 --disable-bias-linear --ffn-hidden-size %d " % (L, h, f))
    return model_config(build_parser().parse_args((base + flags).split()), 16)


# moe-spec.md example R: logits of tokens t0..t3 over 4 experts. The spec numbers tokens
# sequence-major (t = s*b_size + b), so with b = 2, s = 2 its sequence 0 is t0, t2 and
# sequence 1 is t1, t3. megac's tokens are batch-major (t = b*S + s): feeding the rows in the
# order t0, t2, t1, t3 as B = 2 samples of S = 2 makes sample 0 = (t0, t2) and sample 1 =
# (t1, t3), moe-spec.md's grouping, for seq_aux_loss; the other numbers are per token or
# order-free, and the position-policy example keeps the same earliest tokens (t0 < t2 < t3).
R_LOGITS = [[1, 2, 0, -1], [.5, 2.5, 1.5, 0], [3, 0, 2, 1], [2.5, 0, .5, 1]]
R_ORDER = [0, 2, 1, 3]  # megac row u holds moe-spec.md's token R_ORDER[u]


def selftest_moe_example():
    z = torch.tensor([R_LOGITS[t] for t in R_ORDER], dtype=torch.float64)

    def routed(flags):
        c = moe_test_config("--num-experts 4 " + flags)
        probs, rmap, extra, log = moe_router(z, c, 2)
        got = {t: {e: round(float(probs[u, e]), 9) for e in range(4) if rmap[u, e]} for u, t in enumerate(R_ORDER)}
        return got, extra, log, c, probs, rmap

    def close(got, want, tol=1e-6):  # moe-spec.md prints 6 decimals
        return all(set(got[t]) == set(want[t]) and all(abs(got[t][e] - want[t][e]) <= tol for e in want[t])
                   for t in want)

    post = {0: {1: .731059, 0: .268941}, 1: {1: .731059, 2: .268941},
            2: {0: .731059, 2: .268941}, 3: {0: .817574, 3: .182426}}
    pre = {0: {1: .643914, 0: .236883}, 1: {1: .630795, 2: .232057},
           2: {0: .643914, 2: .236883}, 3: {0: .694179, 3: .154892}}
    sig = {0: {1: .546449, 0: .453551}, 1: {1: .530593, 2: .469407},
           2: {0: .519575, 2: .480425}, 3: {0: .558326, 3: .441674}}
    for flags, want, what in (("", post, "post-softmax"), ("--moe-router-pre-softmax", pre, "pre-softmax"),
                              ("--moe-router-score-function sigmoid", sig, "sigmoid")):
        got = routed(flags)[0]
        check(close(got, want), "MoE example R: %s top-2 experts and probs" % what, got)

    # aux losses: the same softmax-over-E scores for post- and pre-softmax routing
    vals = []
    for flags in ("", "--moe-router-pre-softmax"):
        _, extra, log, _, _, _ = routed("--moe-aux-loss-coeff 0.01 " + flags)
        vals.append(log)
        good = set(log) == {"load_balancing_loss"} and abs(log["load_balancing_loss"] - 1.166809) < 1e-6
        good = good and abs(float(extra) - 0.01 * log["load_balancing_loss"]) < 1e-15
    check(good, "MoE example R: aux_loss/coeff = 1.166809 (post- and pre-softmax), objective coeff*aux", vals)
    _, extra, log, c, _, _ = routed("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.01")
    sc = torch.softmax(z, -1)
    amap = torch.zeros(z.shape, dtype=torch.bool).scatter(1, torch.topk(sc, 2, -1)[1], True)
    per_seq = [float(switch_aux(sc[0:2], amap[0:2], c)), float(switch_aux(sc[2:4], amap[2:4], c))]
    good = (abs(log["seq_load_balancing_loss"] - 1.190399) < 1e-6 and log["load_balancing_loss"] == 0.0
            and abs(per_seq[0] - 1.380797) < 1e-6 and abs(per_seq[1] - 1.0) < 1e-6
            and abs(float(extra) - 0.01 * log["seq_load_balancing_loss"]) < 1e-15)
    check(good, "MoE example R: seq_aux_loss/coeff = (1.380797 + 1.0)/2 = 1.190399 over samples (t0, t2), "
          "(t1, t3); load_balancing_loss logged as 0", (log, per_seq))
    _, extra, log, _, _, _ = routed("--moe-z-loss-coeff 0.001")
    lse2 = [float(v) for v in torch.logsumexp(z, -1).pow(2)]
    want = {0: 5.954525, 1: 11.834905, 2: 8.766179, 3: 8.208370}  # rows u in megac order
    good = (abs(log["z_loss"] - 8.690995) < 1e-6 and all(abs(lse2[u] - want[u]) < 1e-6 for u in want)
            and abs(float(extra) - 0.001 * log["z_loss"]) < 1e-15 and log["load_balancing_loss"] == 0.0)
    check(good, "MoE example R: z-loss mean lse^2 = 8.690995; coefficient 0 logs load_balancing_loss 0", (log, lse2))
    log = routed("--moe-z-loss-coeff 0 --moe-router-load-balancing-type none")[2]
    check(set(log) == {"z_loss"} and math.isnan(log["z_loss"]), "MoE: z-loss coefficient 0 logs NaN (0/0), "
          "type none logs no balancing loss", log)

    # capacity 2 with cf = 1: e0 is over capacity with t0 (.268941), t2 (.731059), t3 (.817574)
    drop_probs = {0: {1: .731059}, 1: post[1], 2: post[2], 3: post[3]}
    drop_pos = {0: post[0], 1: post[1], 2: post[2], 3: {3: .182426}}
    got, _, _, c, probs, rmap = routed("--moe-expert-capacity-factor 1")
    good = moe_capacity(4, c) == 2 and close(got, drop_probs)
    got2, _, _, _, _, _ = routed("--moe-expert-capacity-factor 1 --moe-token-drop-policy position")
    check(good and close(got2, drop_pos), "MoE example R, cf 1: capacity 2; probs drops t0->e0, "
          "position drops t3->e0 (the earliest two kept); not renormalised", (got, got2))
    _, _, _, _, pprobs, pmap = routed("--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity")
    check(pmap.sum(0).tolist() == [2, 2, 2, 2] and torch.equal(pprobs, probs) and bool((rmap <= pmap).all()),
          "MoE example R, cf 1 with padding: 2 rows per expert, the same probs (padding rows weigh 0)",
          (pmap.int().tolist(), pprobs.tolist()))
    cs = [moe_capacity(5, moe_test_config("--num-experts 4 --moe-expert-capacity-factor 1.1")),
          moe_capacity(4096, moe_test_config("--num-experts 8 --moe-expert-capacity-factor 1.25"))]
    check(cs == [3, 1280], "MoE capacity: T*k 10, E 4, cf 1.1 -> 3; T 4096, k 2, E 8, cf 1.25 -> 1280", cs)

    # the whole layer on one-hot inputs whose router logits are example R: t0's output is
    # .731059 * FFN_1(x_t0) when dropping by probs; padding changes nothing
    outs = []
    for flags in ("--moe-expert-capacity-factor 1", "--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity"):
        c = moe_test_config("--swiglu --num-experts 4 --moe-ffn-hidden-size 3 " + flags, h=4)
        P, _ = init_model(c, 0.5, 0.5, 5, torch.float64)
        with torch.no_grad():
            P["decoder.layers.0.mlp.router.weight"].copy_(torch.tensor(R_LOGITS, dtype=torch.float64).t())
            x = torch.eye(4, dtype=torch.float64)[R_ORDER].view(2, 2, 4)
            outs.append(moe_layer(x, P, "decoder.layers.0.mlp.", c).reshape(4, 4))
            ffn = [mlp(x.reshape(4, 4), P, "decoder.layers.0.mlp.experts.local_experts.%d." % e, c) for e in range(4)]
    w0 = torch.softmax(torch.tensor([2.0, 1.0], dtype=torch.float64), 0)
    w3 = torch.softmax(torch.tensor([2.5, 1.0], dtype=torch.float64), 0)
    d = max(float((outs[0][0] - w0[0] * ffn[1][0]).abs().max()),
            float((outs[0][3] - (w3[0] * ffn[0][3] + w3[1] * ffn[3][3])).abs().max()),
            float((outs[1] - outs[0]).abs().max()))
    check(d < 1e-15 and abs(float(w0[0]) - .731059) < 1e-6,
          "MoE example R layer, cf 1: t0 -> .731059 FFN_1(x_t0), t3 -> .817574 FFN_0 + .182426 FFN_3; "
          "padding changes nothing", d)
    # reporting: 2 MoE layers, 2 micro-batches, values 1.2, 1.0 (layer 0) and 1.1, 1.3 (layer 1)
    rep = moe_report([(0, {"load_balancing_loss": 1.2}), (0, {"load_balancing_loss": 1.1}),
                      (0, {"load_balancing_loss": 1.0}), (0, {"load_balancing_loss": 1.3})])
    check(abs(rep["load_balancing_loss"] - 1.15) < 1e-15 and list(rep) == ["load_balancing_loss"],
          "MoE reporting example: per layer 1.1, 1.2 -> 1.15", rep)


MOE_LAYER_CONFIGS = [
    ("softmax top-2 of 4, aux_loss + z-loss, capacity 1.0 by probs, shared expert, SwiGLU",
     "--swiglu --num-experts 4 --moe-ffn-hidden-size 5 --moe-aux-loss-coeff 0.1 --moe-z-loss-coeff 0.01 "
     "--moe-expert-capacity-factor 1.0 --moe-shared-expert-intermediate-size 6", True),
    ("pre-softmax top-2 of 4, seq_aux_loss + z-loss, capacity 0.75 by position, padded, GELU",
     "--num-experts 4 --moe-ffn-hidden-size 7 --moe-router-pre-softmax --moe-router-load-balancing-type "
     "seq_aux_loss --moe-aux-loss-coeff 0.1 --moe-z-loss-coeff 0.01 --moe-expert-capacity-factor 0.75 "
     "--moe-token-drop-policy position --moe-pad-expert-input-to-capacity", True),
    ("sigmoid top-3 of 5, aux_loss + z-loss, dropless, SwiGLU",
     "--swiglu --num-experts 5 --moe-router-topk 3 --moe-router-score-function sigmoid --moe-ffn-hidden-size 4 "
     "--moe-aux-loss-coeff 0.1 --moe-z-loss-coeff 0.01", False),
    ("sigmoid top-1 of 3, seq_aux_loss, capacity 0.8 by probs, shared expert, GELU",
     "--num-experts 3 --moe-router-topk 1 --moe-router-score-function sigmoid --moe-router-load-balancing-type "
     "seq_aux_loss --moe-aux-loss-coeff 0.1 --moe-expert-capacity-factor 0.8 "
     "--moe-shared-expert-intermediate-size 5", True),
]


def selftest_moe_layer():
    """One MoE layer in float64 on B = 2 samples of S = 6 tokens: against the token-by-token
    loop, then the gradient of sum(y * R) + attached aux/z losses, and of the attached losses
    alone, against central finite differences w.r.t. x, the router and expert weights."""
    pre = "decoder.layers.0.mlp."
    for ci, (what, flags, drops) in enumerate(MOE_LAYER_CONFIGS):
        c = moe_test_config(flags)
        gen = torch.Generator().manual_seed(300 + ci)
        P, names = init_model(c, 0.5, 0.5, 40 + ci, torch.float64)
        mine = [n for n in names if n.startswith(pre)]
        x = torch.randn(2, 6, c.h, generator=gen, dtype=torch.float64).requires_grad_(True)
        R = torch.randn(2, 6, c.h, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            la, lb = [], []
            ya = moe_layer(x, P, pre, c, la)
            yb = alt_moe(x, P, pre, c, lb)
            z = F.linear(x.reshape(12, c.h), P[pre + "router.weight"])
            probs, rmap = moe_scores(z, c)
            keep = moe_keep(probs, rmap, c, 2) if c.cf is not None else None
            dropped = 0 if keep is None else int((rmap & ~keep).sum())
        d = max(float((ya - yb).abs().max()), moe_log_diff(la, lb))
        check(d < 1e-12 and (dropped > 0) == drops, "MoE layer = token-by-token loop: " + what,
              "max |diff| %.3g, %d token-expert pairs dropped" % (d, dropped))

        leaves = [("x", x)] + [(n, P[n]) for n in mine]

        def objective(aux_only):
            log = []
            y = moe_layer(x, P, pre, c, log)
            return log[0][0] if aux_only else (y * R).sum() + log[0][0]

        for aux_only in (False, True):
            grads = torch.autograd.grad(objective(aux_only), [t for _, t in leaves], allow_unused=True)
            worst, where, eps = 0.0, "", 1e-6
            with torch.no_grad():
                for (n, t), g in zip(leaves, grads):
                    g = torch.zeros_like(t) if g is None else g
                    flat = t.view(-1)
                    if n == "x" or n.endswith("router.weight"):
                        picks = range(flat.numel())
                    else:
                        picks = torch.randint(0, flat.numel(), (6,), generator=gen).tolist()
                    for i in picks:
                        old = float(flat[i])
                        flat[i] = old + eps
                        fp = float(objective(aux_only))
                        flat[i] = old - eps
                        fm = float(objective(aux_only))
                        flat[i] = old
                        num = (fp - fm) / (2 * eps)
                        ana = float(g.view(-1)[i])
                        err = abs(num - ana) / max(1e-3, abs(num), abs(ana))
                        if err > worst:
                            worst, where = err, "%s[%d]: analytic %.9g, numeric %.9g" % (n, i, ana, num)
            gr = float(grads[mine.index(pre + "router.weight") + 1].norm())
            check(worst < 1e-5 and gr > 1e-3, "MoE layer gradients = finite differences (float64, %s): %s"
                  % ("attached aux/z losses alone" if aux_only else "output and attached losses", what),
                  "worst relative error %.3g at %s; |router grad| %.3g" % (worst, where, gr))


def selftest_moe_model_files():
    """Names, shapes and initial values of a MoE model (--write-init-model and --ref-model)."""
    c = moe_test_config("--num-experts 2 --moe-layer-freq 2 --swiglu --moe-ffn-hidden-size 5 "
                        "--moe-shared-expert-intermediate-size 3", h=4, f=7, L=3)
    want = []
    for n in range(3):
        p = "decoder.layers.%d." % n
        want += [(p + "self_attention.linear_qkv.layer_norm_weight", (4,)),
                 (p + "self_attention.linear_qkv.layer_norm_bias", (4,)),
                 (p + "self_attention.linear_qkv.weight", (12, 4)), (p + "self_attention.linear_proj.weight", (4, 4))]
        if n % 2 == 0:
            want += [(p + "pre_mlp_layernorm.weight", (4,)), (p + "pre_mlp_layernorm.bias", (4,)),
                     (p + "mlp.router.weight", (2, 4))]
            for j in range(2):
                e = p + "mlp.experts.local_experts.%d." % j
                want += [(e + "linear_fc1.weight", (10, 4)), (e + "linear_fc2.weight", (4, 5))]
            want += [(p + "mlp.shared_experts.linear_fc1.weight", (6, 4)),
                     (p + "mlp.shared_experts.linear_fc2.weight", (4, 3))]
        else:
            want += [(p + "mlp.linear_fc1.layer_norm_weight", (4,)), (p + "mlp.linear_fc1.layer_norm_bias", (4,)),
                     (p + "mlp.linear_fc1.weight", (14, 4)), (p + "mlp.linear_fc2.weight", (4, 7))]
    got = [(n, s) for n, s in param_shapes(c) if n.startswith("decoder.layers.")]
    check(got == want, "MoE model names and shapes (layers 0 and 2 MoE with freq 2; pre_mlp_layernorm)",
          sorted(set(got) ^ set(want)))
    c = moe_test_config("--num-experts 2 --moe-ffn-hidden-size 4096 --moe-shared-expert-intermediate-size 4096",
                        h=64, L=2)
    P, names = init_model(c, 0.02, 0.02, 3)
    p = "decoder.layers.1."
    stds = [float(P[p + n].std()) for n in ("mlp.router.weight", "mlp.experts.local_experts.1.linear_fc1.weight",
                                            "mlp.experts.local_experts.1.linear_fc2.weight",
                                            "mlp.shared_experts.linear_fc2.weight")]
    want = [0.02, 0.02, 0.01, 0.01]  # std/sqrt(2L) for fc2, L = 2
    good = (all(abs(a / b - 1) < (0.2 if i == 0 else 0.03) for i, (a, b) in enumerate(zip(stds, want)))
            and bool((P[p + "pre_mlp_layernorm.weight"] == 1).all()) and bool((P[p + "pre_mlp_layernorm.bias"] == 0).all())
            and not no_weight_decay(p + "mlp.router.weight", P[p + "mlp.router.weight"].shape)
            and not no_weight_decay(p + "mlp.experts.local_experts.1.linear_fc1.weight", (8192, 64)))
    check(good, "MoE init: router and fc1 N(0, std), fc2 N(0, std/sqrt(2L)), pre-MLP norm 1/0; "
          "router and expert weights get weight decay", stds)


def self_test():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    with tempfile.TemporaryDirectory() as tmp:
        selftest_data(tmp)
    selftest_schedule()
    selftest_adamw()
    selftest_model()
    selftest_moe_example()
    selftest_moe_layer()
    selftest_moe_model_files()
    print("# %d failed" % len(FAILS))
    return 1 if FAILS else 0


def batch(commands):
    """Each command a training run (shell words), in order, in this process."""
    import shlex
    if not commands:
        die("batch: give one or more training runs")
    for i, line in enumerate(commands, 1):
        words = shlex.split(line)
        if words[:1] == ["batch"] or "--self-test" in words or "--write-init-model" in words:
            die("batch: run %d is not a training run" % i)
        if "--ref-out" not in words:
            die("batch: run %d has no --ref-out" % i)
        try:
            rc = main(words)
        except SystemExit as e:  # die() and argparse's usage errors
            rc = e.code if isinstance(e.code, int) else 2
        if rc:
            sys.stderr.write("torch_ref.py: batch: run %d (%s) failed\n" % (i, line))
            return rc
    return 0


def main(argv):
    if argv[:1] == ["batch"]:
        return batch(argv[1:])
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if args.self_test:
        return self_test()
    if args.write_init_model:
        write_init_model(args)
        return 0
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
