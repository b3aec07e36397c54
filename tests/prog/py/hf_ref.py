"""Hugging Face transformers as an independent reference for ckpt_convert.

Runs under the venv that tests/py-env.sh makes (Debian's torch 1.13 and the
pinned transformers 4.49), or under tests/py-env-long.sh's (torch 2.5.1 and
transformers 4.53.3, which have Qwen3 and Qwen3-MoE). Only local folders:
the hub is switched off before transformers is imported, and nothing is
downloaded.

  make gpt2|llama|mixtral|qwen2|qwen3|mistral|qwen2_moe|qwen3_moe|deepseek_v3|mamba2 OUTDIR [--seed S] [--layers L --hidden H
       --heads A --kv-heads G --ffn F --vocab V --positions P]
       [--head-dim D] [--rope-scaling FACTOR] [--yarn FACTOR]
       [--experts E --topk K] [--tie|--untie] [--dtype float32|bfloat16]
       [--shard-size BYTES] [--std X] [--force]
      A small random model saved with save_pretrained (safetensors, sharded
      when the model is larger than --shard-size), with config.json and
      generation_config.json. Every parameter is random: matrices and
      embeddings N(0, std), biases N(0, std), LayerNorm/RMSNorm weights
      U(0.5, 1.5), so a mapping error cannot hide behind ones or zeros.
      mixtral is a MixtralForCausalLM: a Llama whose every MLP is --experts
      SwiGLU experts of size --ffn, --topk of them per token (softmax
      routing), rope_theta 1e6 and no sliding window, as Mixtral's own
      config; its --std defaults to 0.2 rather than 0.02, so that the
      router's scores (std ~ std * sqrt(hidden)) spread the tokens over the
      experts instead of routing them by near-ties. qwen2_moe is a
      Qwen2MoeForCausalLM: Qwen2's attention, --experts experts of
      --moe-ffn, --topk per token (softmax over all, renormalised with
      --norm-topk-prob), a shared expert of --shared-ffn with its sigmoid
      gate, the layers of --mlp-only dense (--ffn); --std 0.2 as mixtral.
      qwen2 is a Qwen2ForCausalLM (biases on q, k and v). qwen3 is a
      Qwen3ForCausalLM (q_norm and k_norm over each head before RoPE,
      head_dim --head-dim): transformers' own where it has Qwen3; 4.49
      predates it, so there it is transformers' own Llama modules with
      Qwen3's two RMSNorms added, under Qwen3's tensor names and config.json
      (QWEN3 below; loading a qwen3 folder uses the same stand-in then).
      qwen3_moe (transformers with Qwen3 only) is a Qwen3MoeForCausalLM:
      Qwen3's attention, --experts experts of --moe-ffn, --topk per token
      (softmax over all, renormalised with --norm-topk-prob), no shared
      expert, the layers of --mlp-only dense (--ffn); --std 0.2 as mixtral.
      deepseek_v3 (transformers with DeepSeek-V3 only) is a
      DeepseekV3ForCausalLM: multi-latent attention (--q-lora ... --v-head),
      --dense dense layers, then experts with a shared one, sigmoid routing
      with a random nonzero e_score_correction_bias, --groups groups of
      which --topk-group are kept, --routed-scale; --yarn-ds F gives it
      DeepSeek-V3's YaRN; --std 0.2 as mixtral.
      mamba2 is a Mamba2ForCausalLM (transformers' Mamba-2: every layer an
      RMSNorm and the Mamba-2 mixer, no positions): --heads mixer heads of
      --head-dim channels (default 2 hidden / heads; d_inner must be a
      whole multiple of --hidden), --groups groups of B and C (n_groups) of
      --state states, chunk_size --chunk (default 8, so that the chunked
      scan crosses chunks), untied unless --tie; dt_bias U(-3, 0), A_log
      U(-1, 1) and D N(0, 1) drawn after the rest (nonzero, and steps and
      decays of order one); --std 0.2 as mixtral.
      --rope-scaling (llama, qwen2, qwen3, qwen3_moe): rope_scaling
      {rope_type llama3, factor FACTOR,
      low_freq_factor 1, high_freq_factor 4,
      original_max_position_embeddings 8192}. --yarn (llama, qwen2, qwen3):
      rope_scaling {rope_type yarn, factor FACTOR, beta_fast 16, beta_slow 2,
      attention_factor 1.2, original_max_position_embeddings --positions}.
  logits HFDIR IDS.npy OUT.npy [--dtype float32|bfloat16]
      Loads HFDIR, forwards the integer token ids [B, T] (no attention mask,
      no padding) in eval mode and saves the logits [B, T, vocab] as float32.
      One thread, so the logits do not depend on the number of cores (they
      may on the processor, through the BLAS kernel it picks).
  generate HFDIR PROMPTS.json MAX_NEW OUT.json [--routing R.json] [--cache-check]
      Greedy continuation of each prompt ([[id, ...], ...]) by full forward
      passes, and the log-probs of each whole sequence from its second
      token: OUT.json is [{"tokens": [new ids], "logprobs": [...]}, ...].
      --cache-check also runs transformers' generate() (greedy, with its
      cache, no end-of-sequence token) and fails unless it gives the same
      tokens (a stateful model's cache path is other code: Mamba-2's
      single-step scan).
      --routing (MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM only) writes how the final sequences
      were routed: per layer, how many tokens each expert took and the
      smallest gap between the k-th and (k+1)-th routing probability
      (a gap near 0 is a near-tie that rounding could flip).
  check HFDIR [--tensors]
      Loads HFDIR and prints the class, the parameter count, a config summary
      and whether lm_head shares the input embedding; --tensors also lists
      the tensors stored in the folder's safetensors files.
  batch "COMMAND ARGS..." ...
      Runs each argument as one of the commands above (split as a shell
      would), in order, in this one process (torch and transformers are then
      imported once, not once a command); stops at the first that fails.

Loading fails (exit 1) when the folder's weights do not cover the model
exactly: a missing, unexpected or mis-shaped tensor is an error here, where
transformers would only warn and initialise the missing ones at random. So is
a tied model whose folder also stores an lm_head.weight that differs from the
embedding (transformers would silently load it over the shared tensor).
Stored copies of non-persistent buffers (GPT-2's attn.bias/masked_bias,
Llama's rotary_emb.inv_freq, as in older hub files) are ignored, as
transformers ignores them.
"""
import argparse
import json
import os
import sys

# Before transformers is imported: no hub, no telemetry.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# One thread, torch's (OpenMP) and the BLAS's (Debian's torch calls libblas,
# i.e. OpenBLAS): sums then do not depend on the core count, which changes
# logits by ~1 ulp. The models here are tiny.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
)
from transformers.models.llama.modeling_llama import LlamaRMSNorm  # noqa: E402

# transformers 4.51 and later have Qwen3 and Qwen3-MoE (tests/py-env-long.sh's
# 4.53.3); tests/py-env.sh's 4.49 has neither, so qwen3 is the stand-in there.
HAS_QWEN3 = hasattr(transformers, "Qwen3ForCausalLM")

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
torch.set_num_threads(1)

PROG = "hf_ref"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Files save_pretrained writes; --force removes only these.
HF_FILES = ("config.json", "generation_config.json", "model.safetensors",
            "model.safetensors.index.json", "pytorch_model.bin",
            "pytorch_model.bin.index.json")


class Fail(Exception):
    pass


def fail(msg):
    raise Fail(msg)


# ---------------------------------------------------------------- make

def build_config(a):
    L, H, A = a.layers, a.hidden, a.heads
    G = a.kv_heads if a.kv_heads is not None else A
    for name, v in (("--layers", L), ("--hidden", H), ("--heads", A),
                    ("--kv-heads", G), ("--vocab", a.vocab),
                    ("--positions", a.positions)):
        if v <= 0:
            fail(f"{name} must be positive, got {v}")
    if H % A and a.kind != "mamba2":
        fail(f"--hidden {H} is not a multiple of --heads {A}")
    if a.kind == "gpt2":
        if G != A:
            fail(f"gpt2 has no grouped-query attention: --kv-heads {G} != --heads {A}")
        ffn = a.ffn if a.ffn is not None else 4 * H
        tie = True if a.tie is None else a.tie
        return GPT2Config(
            n_layer=L, n_embd=H, n_head=A, n_inner=ffn, vocab_size=a.vocab,
            n_positions=a.positions, activation_function="gelu_new",
            layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, summary_first_dropout=0.0,
            initializer_range=a.std, tie_word_embeddings=tie,
            scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
            reorder_and_upcast_attn=False,
            bos_token_id=a.vocab - 1, eos_token_id=a.vocab - 1)
    if A % G:
        fail(f"--heads {A} is not a multiple of --kv-heads {G}")
    ffn = a.ffn if a.ffn is not None else 3 * H
    tie = False if a.tie is None else a.tie
    scaling = None
    if a.rope_scaling is not None:
        scaling = {"rope_type": "llama3", "factor": a.rope_scaling, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if a.yarn is not None:  # every key transformers' YaRN reads, none left to its defaults
        scaling = {"rope_type": "yarn", "factor": a.yarn, "original_max_position_embeddings": a.positions,
                   "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.2}
    if a.kind == "qwen2":
        return Qwen2Config(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
            num_key_value_heads=G, intermediate_size=ffn, vocab_size=a.vocab,
            max_position_embeddings=a.positions, hidden_act="silu",
            rms_norm_eps=1e-6, rope_theta=1e6, rope_scaling=scaling,
            use_sliding_window=False, sliding_window=None, max_window_layers=L,
            attention_dropout=0.0, initializer_range=a.std, tie_word_embeddings=tie,
            bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)
    if a.kind == "qwen3":
        return qwen3_config({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "num_hidden_layers": L, "hidden_size": H, "num_attention_heads": A,
            "num_key_value_heads": G, "head_dim": a.head_dim or H // A,
            "intermediate_size": ffn, "vocab_size": a.vocab,
            "max_position_embeddings": a.positions, "hidden_act": "silu",
            "rms_norm_eps": 1e-6, "rope_theta": 1e6, "rope_scaling": scaling,
            "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": L, "attention_dropout": 0.0, "initializer_range": a.std,
            "tie_word_embeddings": tie, "bos_token_id": 1 % a.vocab, "eos_token_id": 2 % a.vocab,
            "torch_dtype": a.dtype, "use_cache": True})
    if a.kind == "qwen3_moe":  # Qwen3's attention, experts without a shared one; layers in --mlp-only dense
        if not HAS_QWEN3:
            fail("qwen3_moe: this transformers (%s) has no Qwen3MoeForCausalLM; "
                 "tests/py-env-long.sh's has" % transformers.__version__)
        if a.experts <= 0 or not 0 < a.topk <= a.experts:
            fail(f"--topk {a.topk} must lie in [1, --experts {a.experts}]")
        only = [int(x) for x in a.mlp_only.split(",")] if a.mlp_only else []
        return transformers.Qwen3MoeConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
            num_key_value_heads=G, head_dim=a.head_dim or H // A, intermediate_size=ffn,
            vocab_size=a.vocab, max_position_embeddings=a.positions, hidden_act="silu",
            rms_norm_eps=1e-6, rope_theta=1e6, rope_scaling=scaling, attention_bias=False,
            use_sliding_window=False, sliding_window=None, max_window_layers=L,
            attention_dropout=0.0, decoder_sparse_step=1, mlp_only_layers=only,
            moe_intermediate_size=a.moe_ffn or H, num_experts=a.experts,
            num_experts_per_tok=a.topk, norm_topk_prob=a.norm_topk_prob,
            output_router_logits=False, router_aux_loss_coef=0.001,
            initializer_range=a.std, tie_word_embeddings=tie,
            bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)
    if a.kind == "deepseek_v3":
        return deepseek_v3_config(a, L, H, A, ffn, tie)
    if a.kind == "mamba2":
        return mamba2_config(a, L, H, A, tie)
    if a.kind == "mistral":  # sliding_window W: a query sees itself and the W - 1 keys before it
        return MistralConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
            num_key_value_heads=G, head_dim=a.head_dim or H // A, intermediate_size=ffn,
            vocab_size=a.vocab, max_position_embeddings=a.positions, hidden_act="silu",
            rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=a.sliding_window,
            attention_dropout=0.0, initializer_range=a.std, tie_word_embeddings=tie,
            bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)
    if a.kind == "qwen2_moe":  # experts with a gated shared expert; layers in --mlp-only dense
        if a.experts <= 0 or not 0 < a.topk <= a.experts:
            fail(f"--topk {a.topk} must lie in [1, --experts {a.experts}]")
        only = [int(x) for x in a.mlp_only.split(",")] if a.mlp_only else []
        return Qwen2MoeConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
            num_key_value_heads=G, intermediate_size=ffn, vocab_size=a.vocab,
            max_position_embeddings=a.positions, hidden_act="silu",
            rms_norm_eps=1e-6, rope_theta=1e6, rope_scaling=scaling,
            use_sliding_window=False, sliding_window=None, max_window_layers=L,
            attention_dropout=0.0, decoder_sparse_step=1, mlp_only_layers=only,
            moe_intermediate_size=a.moe_ffn or H, shared_expert_intermediate_size=a.shared_ffn or 2 * H,
            num_experts=a.experts, num_experts_per_tok=a.topk, norm_topk_prob=a.norm_topk_prob,
            output_router_logits=False, router_aux_loss_coef=0.001,
            initializer_range=a.std, tie_word_embeddings=tie,
            bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)
    if a.kind == "mixtral":
        if a.experts <= 0 or not 0 < a.topk <= a.experts:
            fail(f"--topk {a.topk} must lie in [1, --experts {a.experts}]")
        return MixtralConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
            num_key_value_heads=G, intermediate_size=ffn, vocab_size=a.vocab,
            max_position_embeddings=a.positions, hidden_act="silu",
            rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None,
            attention_dropout=0.0, num_local_experts=a.experts,
            num_experts_per_tok=a.topk, output_router_logits=False,
            router_aux_loss_coef=0.01, router_jitter_noise=0.0,
            initializer_range=a.std, tie_word_embeddings=tie,
            bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)
    return LlamaConfig(
        num_hidden_layers=L, hidden_size=H, num_attention_heads=A,
        num_key_value_heads=G, intermediate_size=ffn, vocab_size=a.vocab,
        max_position_embeddings=a.positions, hidden_act="silu",
        rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=scaling,
        attention_bias=False, attention_dropout=0.0, mlp_bias=False,
        pretraining_tp=1, initializer_range=a.std, tie_word_embeddings=tie,
        bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)


def deepseek_v3_config(a, L, H, A, ffn, tie):
    """DeepseekV3ForCausalLM (transformers 4.51 and later): MLA with a
    compressed query (--q-lora), --dense dense layers first, then MoE layers
    of --experts experts (--moe-ffn) in --groups groups, the best
    --topk-group groups kept, --topk per token, sigmoid routing with
    e_score_correction_bias, renormalised, scaled by --routed-scale, one
    shared expert; --yarn-ds F: YaRN as DeepSeek-V3's config has it
    (max_position_embeddings F x 4096 then, mscale 0.8, mscale_all_dim 0.6)."""
    if not hasattr(transformers, "DeepseekV3Config"):
        fail("deepseek_v3: this transformers (%s) has no DeepseekV3ForCausalLM; "
             "tests/py-env-long.sh's has" % transformers.__version__)
    scaling, P = None, a.positions
    if a.yarn_ds is not None:
        scaling = {"rope_type": "yarn", "factor": a.yarn_ds, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 0.8, "mscale_all_dim": 0.6}
        P = int(a.yarn_ds * 4096)
    return transformers.DeepseekV3Config(
        num_hidden_layers=L, hidden_size=H, num_attention_heads=A, num_key_value_heads=A,
        intermediate_size=ffn, moe_intermediate_size=a.moe_ffn or H, vocab_size=a.vocab,
        q_lora_rank=a.q_lora, kv_lora_rank=a.kv_lora, qk_nope_head_dim=a.qk_nope,
        qk_rope_head_dim=a.qk_rope, v_head_dim=a.v_head, n_routed_experts=a.experts,
        n_shared_experts=1, num_experts_per_tok=a.topk, n_group=a.groups, topk_group=a.topk_group,
        first_k_dense_replace=a.dense, norm_topk_prob=a.topk > 1, routed_scaling_factor=a.routed_scale,
        max_position_embeddings=P, hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
        rope_scaling=scaling, rope_interleave=not a.no_rope_interleave, attention_bias=False,
        attention_dropout=0.0, initializer_range=a.std, tie_word_embeddings=tie,
        bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab)


def mamba2_config(a, L, H, A, tie):
    """Mamba2ForCausalLM: --heads heads of --head-dim (default 2 H / A),
    d_inner = heads x head_dim = expand x H, --groups groups of --state
    states, conv_kernel 4, chunk_size --chunk; the rest Mamba2Config's
    defaults (a conv bias, no linear biases, silu, RMSNorm with eps 1e-5,
    time_step_limit (0, inf))."""
    P = a.head_dim or 2 * H // A
    if (A * P) % H:
        fail(f"mamba2: --heads {A} x --head-dim {P} is not a whole multiple of --hidden {H} (expand)")
    if A % a.groups:
        fail(f"mamba2: --heads {A} is not a multiple of --groups {a.groups}")
    return transformers.Mamba2Config(
        num_hidden_layers=L, hidden_size=H, num_heads=A, head_dim=P, expand=A * P // H,
        n_groups=a.groups, state_size=a.state, conv_kernel=4, chunk_size=a.chunk,
        vocab_size=a.vocab, layer_norm_epsilon=1e-5, hidden_act="silu", use_bias=False,
        use_conv_bias=True, rms_norm=True, residual_in_fp32=True, initializer_range=a.std,
        tie_word_embeddings=tie, bos_token_id=1 % a.vocab, eos_token_id=2 % a.vocab,
        pad_token_id=0)


# ---- QWEN3: Qwen3ForCausalLM from transformers' Llama modules. Qwen3's
# attention is Llama's with an RMSNorm (eps rms_norm_eps, head_dim weights)
# on each query and key head between the projection's reshape into heads and
# RoPE; q_proj's output [.., heads * head_dim] viewed as heads is exactly
# what a hook on q_proj can normalize, so the norms run there, registered on
# the attention module as q_norm and k_norm (Qwen3's tensor names).

def qwen3_config(d):
    """transformers' own Qwen3Config where it has one, else the stand-in's."""
    if not HAS_QWEN3:
        return qwen3_llama_config(d)
    return transformers.Qwen3Config(**{k: v for k, v in d.items() if k not in (
        "architectures", "model_type", "torch_dtype")})


def qwen3_llama_config(d):
    cfg = LlamaConfig(**{k: v for k, v in d.items() if k not in (
        "architectures", "model_type", "use_sliding_window", "sliding_window",
        "max_window_layers", "torch_dtype")})
    cfg.qwen3_json = d
    return cfg


def qwen3_model(cfg):
    model = LlamaForCausalLM(cfg)
    hd = cfg.head_dim
    for layer in model.model.layers:
        att = layer.self_attn
        for proj, name in ((att.q_proj, "q_norm"), (att.k_proj, "k_norm")):
            norm = LlamaRMSNorm(hd, eps=cfg.rms_norm_eps)
            setattr(att, name, norm)

            def hook(mod, inp, out, norm=norm):
                return norm(out.view(*out.shape[:-1], -1, hd)).view(out.shape)
            proj.register_forward_hook(hook)
    return model


def qwen3_load(hfdir, d, dtype):
    from safetensors.torch import load_file
    model = qwen3_model(qwen3_llama_config(d))
    sd = {}
    for f in sorted(os.listdir(hfdir)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(hfdir, f)))
    if model.config.tie_word_embeddings and "lm_head.weight" not in sd and "model.embed_tokens.weight" in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    want = model.state_dict()
    bad = sorted(set(want) ^ set(sd)) + sorted(k for k in sd if k in want and sd[k].shape != want[k].shape)
    if bad:
        fail(f"{hfdir}: weights do not match Qwen3ForCausalLM: {bad}")
    model.load_state_dict(sd, strict=True)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    return model.to(dtype).eval()


def randomise(model, std, gen):
    """Every parameter random, in named_parameters() order (tied ones once)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = name.endswith("weight") and p.dim() == 1
            if norm:  # LayerNorm / RMSNorm gains
                t = torch.rand(p.shape, generator=gen) + 0.5
            else:  # matrices, embeddings, biases
                t = torch.randn(p.shape, generator=gen) * std
            p.copy_(t.to(p.dtype))


def cmd_make(a):
    out = a.outdir
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"{out} exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out):
        if not a.force:
            fail(f"{out} is not empty (use --force to replace a model there)")
        for f in os.listdir(out):
            if f in HF_FILES or (f.startswith("model-") and f.endswith(".safetensors")):
                os.remove(os.path.join(out, f))
    if a.std is None:
        a.std = 0.2 if a.kind in ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "mamba2") else 0.02
    cfg = build_config(a)
    standin = a.kind == "qwen3" and not HAS_QWEN3
    torch.manual_seed(a.seed)
    model = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM,
             "qwen3": qwen3_model if standin else getattr(transformers, "Qwen3ForCausalLM", None),
             "qwen3_moe": getattr(transformers, "Qwen3MoeForCausalLM", None),
             "mixtral": MixtralForCausalLM, "qwen2_moe": Qwen2MoeForCausalLM,
             "mistral": MistralForCausalLM, "mamba2": transformers.Mamba2ForCausalLM,
             "deepseek_v3": getattr(transformers, "DeepseekV3ForCausalLM", None)}[a.kind](cfg)
    gen = torch.Generator().manual_seed(a.seed)
    randomise(model, a.std, gen)
    # Mamba-2's per-head parameters: steps softplus(dt + dt_bias) and decays
    # exp(-exp(A_log) step) of order one, and a skip D of either sign
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mixer.dt_bias"):
                p.copy_(torch.rand(p.shape, generator=gen) * 3 - 3)
            elif name.endswith("mixer.A_log"):
                p.copy_(torch.rand(p.shape, generator=gen) * 2 - 1)
            elif name.endswith("mixer.D"):
                p.copy_(torch.randn(p.shape, generator=gen))
    # DeepSeek-V3's expert bias (a buffer): nonzero, so that it matters, and
    # not negative: transformers masks the groups it drops with choosing
    # scores of 0, Megatron with -inf, which differ once a kept expert's
    # sigmoid plus bias is below 0
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.rand(b.shape, generator=gen) * 0.2)
    model.eval()
    model.to(DTYPES[a.dtype])
    os.makedirs(out, exist_ok=True)
    shard = a.shard_size if a.shard_size is not None else "5GB"
    if a.kind == "mamba2" and cfg.tie_word_embeddings:
        # 4.49's Mamba2ForCausalLM ties lm_head on load but does not declare
        # it, so safetensors refuses the shared tensor on save: declared here,
        # it is left out of the file (as a tied model's head is)
        model._tied_weights_keys = ["lm_head.weight"]
    model.save_pretrained(out, safe_serialization=True, max_shard_size=shard)
    if standin:  # Qwen3's config.json, not the Llama stand-in's
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg.qwen3_json, f, indent=2)
    files = sorted(os.listdir(out))
    n = sum(p.numel() for p in model.parameters())
    print(f"{type(model).__name__} params={n} dtype={a.dtype} "
          f"tie={cfg.tie_word_embeddings} files={' '.join(files)}")


# ---------------------------------------------------------------- load

def load(hfdir, dtype=torch.float32):
    if not os.path.isdir(hfdir):
        fail(f"{hfdir}: not a directory")
    if not os.path.isfile(os.path.join(hfdir, "config.json")):
        fail(f"{hfdir}: no config.json")
    with open(os.path.join(hfdir, "config.json")) as f:
        d = json.load(f)
    if d.get("model_type") == "qwen3" and not hasattr(transformers, "Qwen3ForCausalLM"):
        return qwen3_load(hfdir, d, dtype)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            hfdir, torch_dtype=dtype, local_files_only=True,
            output_loading_info=True)
    except Exception as e:  # transformers' own message says what
        fail(f"{hfdir}: from_pretrained failed: {type(e).__name__}: {e}")
    bad = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            bad.append(f"{key}: {list(info[key])}")
    if bad:
        fail(f"{hfdir}: weights do not match {type(model).__name__}: " + "; ".join(bad))
    if tied(model):
        check_tied_copy(hfdir, model)
    model.eval()
    return model


def tied(model):
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    return out is not None and out.weight is inp.weight


def read_stored(hfdir, names):
    """{name: tensor} for those of names stored in the folder's safetensors."""
    from safetensors import safe_open
    got = {}
    for f in sorted(os.listdir(hfdir)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(hfdir, f), framework="pt") as h:
            for k in h.keys():
                if k in names:
                    got[k] = h.get_tensor(k)
    return got


def check_tied_copy(hfdir, model):
    """A tied model whose folder also stores lm_head.weight: transformers loads
    it into the shared tensor without a word, replacing the embedding. Refuse
    a stored copy that differs from the stored embedding."""
    emb = model.get_input_embeddings().weight
    emb_name = next(n for n, p in model.named_parameters() if p is emb)
    prefix = model.base_model_prefix + "."
    names = {emb_name, "lm_head.weight"}
    if emb_name.startswith(prefix):
        names.add(emb_name[len(prefix):])
    got = read_stored(hfdir, names)
    head = got.pop("lm_head.weight", None)
    if head is None:
        return
    for k, e in got.items():
        if not torch.equal(head, e):
            fail(f"{hfdir}: tie_word_embeddings is true but the stored lm_head.weight "
                 f"differs from {k} (transformers would load lm_head over the embedding)")


def cmd_logits(a):
    try:
        ids = np.load(a.ids, allow_pickle=False)
    except Exception as e:
        fail(f"{a.ids}: cannot read as .npy: {e}")
    if ids.ndim != 2 or ids.size == 0:
        fail(f"{a.ids}: token ids must be a non-empty [B, T] array, got shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        fail(f"{a.ids}: token ids must be integers, got {ids.dtype}")
    model = load(a.hfdir, DTYPES[a.dtype])
    V, P = model.config.vocab_size, getattr(model.config, "max_position_embeddings", None)
    if ids.min() < 0 or ids.max() >= V:
        fail(f"{a.ids}: token ids must lie in [0, {V}), got [{ids.min()}, {ids.max()}]")
    if P is not None and ids.shape[1] > P:  # Mamba-2 has no positions
        fail(f"{a.ids}: {ids.shape[1]} tokens exceed max_position_embeddings {P}")
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids.astype(np.int64)),
                       use_cache=False).logits
    out = logits.float().numpy()
    np.save(a.out, out)
    print(f"{type(model).__name__} logits {list(out.shape)} -> {a.out}")


def cmd_generate(a):
    """Greedy continuation of each prompt by full forward passes (no cache,
    no generate(): the plainest reference), and the log-probs of the whole
    sequence from its second token."""
    prompts = json.load(open(a.prompts))
    model = load(a.hfdir)
    if a.routing and not any(hasattr(model.config, x) for x in ("num_local_experts", "num_experts",
                                                                  "n_routed_experts")):
        fail(f"{a.hfdir}: --routing: {type(model).__name__} has no experts")
    out, seqs = [], []
    with torch.no_grad():
        for p in prompts:
            ids = list(p)
            for _ in range(a.max_new):
                logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
                ids.append(int(torch.argmax(logits)))
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
            lp = torch.log_softmax(logits, dim=-1)
            logprobs = [float(lp[j - 1, ids[j]]) for j in range(1, len(ids))]
            out.append({"tokens": ids[len(p):], "logprobs": logprobs})
            if a.routing:
                seqs.append(ids)
    if a.cache_check:
        cache_check(model, prompts, out, a.max_new)
    json.dump(out, open(a.out, "w"))
    if a.routing:
        json.dump(routing(model, seqs), open(a.routing, "w"))
    print(f"{type(model).__name__} greedy: {len(out)} prompts, {a.max_new} tokens each -> {a.out}")


def cache_check(model, prompts, out, max_new):
    """generate() with its cache, greedy, without an end-of-sequence token
    (the full recomputation goes on past it), gives the tokens of the full
    recomputation (out)."""
    import importlib
    import transformers.generation.utils as gu
    try:  # Debian's torch 1.13 under Python 3.11 cannot import its FSDP, which generate() asks about
        importlib.import_module("torch.distributed.fsdp")
    except Exception:
        gu.is_fsdp_managed_module = lambda module: False
    with torch.no_grad():
        for p, o in zip(prompts, out):
            gc = transformers.GenerationConfig(max_new_tokens=max_new, do_sample=False, use_cache=True,
                                               eos_token_id=None, bos_token_id=None, pad_token_id=0)
            ids = model.generate(torch.tensor([list(p)]), generation_config=gc)
            got = ids[0, len(p):].tolist()
            if got != o["tokens"]:
                fail(f"generate() with the cache gives {got} for the prompt {list(p)}, the full forward "
                     f"passes {o['tokens']}")
    print(f"{type(model).__name__} generate() with the cache gives the same greedy tokens")


def deepseek_routing(model, seqs):
    """routing() for DeepSeek-V3: the router logits caught at each MoE
    layer's gate; the margins are those of the choosing scores (sigmoid plus
    the expert bias): between the kept groups' and the others' group scores,
    and between the k-th and (k+1)-th expert among the kept groups. An expert
    transformers chose outside the kept groups (it masks the others' scores
    with 0, not -inf, so a negative choosing score loses to them) counts as a
    margin of 0: megac, as Megatron, never chooses one."""
    c = model.config
    E, k, G, TG = c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group
    gates = [m for n, m in model.named_modules() if n.endswith("mlp.gate")]
    caught = []

    def catch(mod, inp, out):
        h = inp[0].reshape(-1, c.hidden_size).float()
        caught.append((mod, torch.nn.functional.linear(h, mod.weight.float()), out[0]))
    hooks = [g.register_forward_hook(catch) for g in gates]
    layers = [{"tokens_per_expert": [0] * E, "min_margin": float("inf")} for _ in gates]
    with torch.no_grad():
        for ids in seqs:
            caught.clear()
            model(input_ids=torch.tensor([ids]), use_cache=False)
            for l, (mod, logits, chosen) in enumerate(caught):
                s = logits.float().sigmoid() + mod.e_score_correction_bias
                gs = s.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
                m = float("inf")
                if TG < G:
                    gt = gs.topk(TG + 1, dim=-1)[0]
                    m = float((gt[:, TG - 1] - gt[:, TG]).min())
                keep = torch.zeros_like(gs).scatter_(1, gs.topk(TG, dim=-1)[1], 1)
                masked = s.masked_fill(~keep.repeat_interleave(E // G, 1).bool(), float("-inf"))
                top = masked.topk(min(k + 1, TG * (E // G)), dim=-1)
                for e in top.indices[:, :k].reshape(-1).tolist():
                    layers[l]["tokens_per_expert"][e] += 1
                if k < TG * (E // G):
                    m = min(m, float((top.values[:, k - 1] - top.values[:, k]).min()))
                if not torch.equal(chosen.sort(dim=-1)[0], top.indices[:, :k].sort(dim=-1)[0]):
                    m = 0.0
                layers[l]["min_margin"] = min(layers[l]["min_margin"], m)
    for h in hooks:
        h.remove()
    return {"experts": E, "topk": k, "layers": layers}


def routing(model, seqs):
    """How the sequences were routed, layer by layer: the tokens each expert
    took, and the smallest margin between the k-th and (k+1)-th routing
    probability over every token (inf when k = the number of experts)."""
    if hasattr(model.config, "n_routed_experts"):
        return deepseek_routing(model, seqs)
    E = getattr(model.config, "num_local_experts", None) or model.config.num_experts
    k = model.config.num_experts_per_tok
    layers = None  # one entry per MoE layer (Qwen2-MoE's dense layers have no router)
    with torch.no_grad():
        for ids in seqs:
            r = model(input_ids=torch.tensor([ids]), use_cache=False,
                      output_router_logits=True).router_logits
            if layers is None:
                layers = [{"tokens_per_expert": [0] * E, "min_margin": float("inf")} for _ in r]
            for l, logits in enumerate(r):
                probs = torch.softmax(logits.float(), dim=-1)
                top = torch.topk(probs, min(k + 1, E), dim=-1)
                for e in top.indices[:, :k].reshape(-1).tolist():
                    layers[l]["tokens_per_expert"][e] += 1
                if k < E:
                    m = float((top.values[:, k - 1] - top.values[:, k]).min())
                    layers[l]["min_margin"] = min(layers[l]["min_margin"], m)
    return {"experts": E, "topk": k, "layers": layers}


def stored_tensors(hfdir):
    from safetensors import safe_open
    files = sorted(f for f in os.listdir(hfdir) if f.endswith(".safetensors"))
    rows = []
    for f in files:
        with safe_open(os.path.join(hfdir, f), framework="pt") as h:
            for k in h.keys():
                s = h.get_slice(k)
                rows.append((k, list(s.get_shape()), s.get_dtype(), f))
    return rows


def cmd_check(a):
    model = load(a.hfdir)
    c = model.config
    with open(os.path.join(a.hfdir, "config.json")) as f:
        stored_dtype = json.load(f).get("torch_dtype")  # load() set float32
    n = sum(p.numel() for p in model.parameters())
    keys = [("model_type", "model_type"), ("layers", "num_hidden_layers"),
            ("hidden", "hidden_size"), ("heads", "num_attention_heads"),
            ("kv_heads", "num_key_value_heads"), ("ffn", "intermediate_size"),
            ("ffn", "n_inner"), ("vocab", "vocab_size"),
            ("positions", "max_position_embeddings"),
            ("act", "hidden_act"), ("act", "activation_function"),
            ("norm_eps", "rms_norm_eps"), ("norm_eps", "layer_norm_epsilon"),
            ("rope_theta", "rope_theta"),
            ("tie_word_embeddings", "tie_word_embeddings")]
    summary = {}
    for short, attr in keys:
        if short not in summary and hasattr(c, attr) and getattr(c, attr) is not None:
            v = getattr(c, attr)
            summary[short] = v
    summary["torch_dtype"] = stored_dtype
    print(f"class {type(model).__name__}")
    print(f"params {n}")
    print("config " + json.dumps(summary))
    print(f"lm_head_tied {'yes' if tied(model) else 'no'}")
    if a.tensors:
        for k, shape, dt, f in stored_tensors(a.hfdir):
            print(f"tensor {k} {shape} {dt} {f}")


# ---------------------------------------------------------------- main

def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["batch"]:
        import shlex
        if len(argv) < 2:
            print(f"{PROG}: error: batch: give one or more commands", file=sys.stderr)
            return 2
        for i, line in enumerate(argv[1:], 1):
            words = shlex.split(line)
            if words[:1] == ["batch"]:
                print(f"{PROG}: error: batch: command {i} is a batch itself", file=sys.stderr)
                return 2
            try:
                rc = main(words)
            except SystemExit as e:  # argparse's usage errors
                rc = e.code if isinstance(e.code, int) else 2
            if rc:
                print(f"{PROG}: error: batch: command {i} ({line}) failed", file=sys.stderr)
                return rc
        return 0
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("make", help="save a small random GPT-2, Llama or Mixtral")
    m.add_argument("kind", choices=("gpt2", "llama", "mixtral", "qwen2", "qwen3", "mistral", "qwen2_moe",
                                    "qwen3_moe", "deepseek_v3", "mamba2"))
    d = m.add_argument_group("deepseek_v3 (DeepseekV3ForCausalLM; --experts, --topk, --moe-ffn as above)")
    d.add_argument("--q-lora", type=int, default=24)
    d.add_argument("--kv-lora", type=int, default=16)
    d.add_argument("--qk-nope", type=int, default=12)
    d.add_argument("--qk-rope", type=int, default=8)
    d.add_argument("--v-head", type=int, default=16)
    d.add_argument("--groups", type=int, default=1, help="n_group (mamba2: n_groups)")
    d.add_argument("--topk-group", type=int, default=1)
    d.add_argument("--dense", type=int, default=1, help="first_k_dense_replace")
    d.add_argument("--routed-scale", type=float, default=1.0, help="routed_scaling_factor")
    d.add_argument("--yarn-ds", type=float, default=None, help="DeepSeek-V3's YaRN with this factor")
    d.add_argument("--no-rope-interleave", action="store_true", help="rope_interleave false")
    m.add_argument("--head-dim", type=int, default=None,
                   help="qwen3, qwen3_moe, mistral and mamba2 only (default hidden/heads; mamba2 2 hidden/heads)")
    mb = m.add_argument_group("mamba2 (Mamba2ForCausalLM; --heads, --head-dim, --groups as above)")
    mb.add_argument("--state", type=int, default=16, help="state_size")
    mb.add_argument("--chunk", type=int, default=8, help="chunk_size")
    m.add_argument("--sliding-window", type=int, default=None,
                   help="mistral only: sliding_window (default null: none)")
    m.add_argument("--rope-scaling", type=float, default=None,
                   help="llama, qwen2, qwen3, qwen3_moe: Llama 3.x rope_scaling with this factor")
    m.add_argument("--yarn", type=float, default=None,
                   help="llama, qwen2, qwen3: YaRN rope_scaling with this factor (beta_fast 16, beta_slow 2, "
                        "attention_factor 1.2, original_max_position_embeddings --positions)")
    m.add_argument("outdir")
    m.add_argument("--seed", type=int, default=1234)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=64)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--kv-heads", type=int, default=None,
                   help="llama and mixtral only (default --heads)")
    m.add_argument("--ffn", type=int, default=None,
                   help="default 4*hidden (gpt2), 3*hidden (llama; mixtral: each expert's)")
    m.add_argument("--experts", type=int, default=4, help="mixtral only")
    m.add_argument("--topk", type=int, default=2, help="mixtral only: experts per token")
    m.add_argument("--moe-ffn", type=int, default=None,
                   help="qwen2_moe, qwen3_moe: each expert's size (default hidden)")
    m.add_argument("--shared-ffn", type=int, default=None, help="qwen2_moe: the shared expert's (default 2*hidden)")
    m.add_argument("--mlp-only", default="",
                   help="qwen2_moe, qwen3_moe: dense layers, comma-separated (mlp_only_layers)")
    m.add_argument("--norm-topk-prob", action="store_true",
                   help="qwen2_moe, qwen3_moe: renormalise the top-k weights")
    m.add_argument("--vocab", type=int, default=256)
    m.add_argument("--positions", type=int, default=64)
    t = m.add_mutually_exclusive_group()
    t.add_argument("--tie", dest="tie", action="store_true", default=None,
                   help="lm_head = word embeddings (gpt2's default)")
    t.add_argument("--untie", dest="tie", action="store_false",
                   help="separate lm_head (llama's default)")
    m.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    m.add_argument("--shard-size", type=int, default=None,
                   help="max_shard_size in bytes (default 5GB: one file)")
    m.add_argument("--std", type=float, default=None,
                   help="default 0.02 (gpt2, llama), 0.2 (mixtral)")
    m.add_argument("--force", action="store_true",
                   help="replace the model files already in OUTDIR")

    lg = sub.add_parser("logits", help="forward token ids, save float32 logits")
    lg.add_argument("hfdir")
    lg.add_argument("ids")
    lg.add_argument("out")
    lg.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                    help="dtype the model computes in (logits are saved as float32)")

    g = sub.add_parser("generate", help="greedy continuations and log-probs, as JSON")
    g.add_argument("hfdir")
    g.add_argument("prompts", help="JSON: [[id, ...], ...]")
    g.add_argument("max_new", type=int)
    g.add_argument("out")
    g.add_argument("--routing", default=None,
                   help="MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM: write the routing of "
                   "the final sequences here (JSON)")
    g.add_argument("--cache-check", action="store_true",
                   help="also generate() with the cache, and fail unless its tokens are the same")

    c = sub.add_parser("check", help="load a folder and summarise it")
    c.add_argument("hfdir")
    c.add_argument("--tensors", action="store_true",
                   help="list the stored tensors too")

    a = p.parse_args(argv)
    try:
        {"make": cmd_make, "logits": cmd_logits, "check": cmd_check, "generate": cmd_generate}[a.cmd](a)
    except Fail as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
