/*
 * gpt_config.h - the shape and numerics of a GPT/Llama model, derived from
 * Megatron's flags with Megatron's defaults and validation rules
 * (megatron/training/arguments.py, validate_args): ffn size defaults, kv channels,
 * query groups only with --group-query-attention, the GELU flavour rule,
 * RoPE dimensions, vocab padding.
 */
#ifndef MEGAC_MODEL_GPT_CONFIG_H
#define MEGAC_MODEL_GPT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/args.h"
#include "kernels/ops.h"
#include "kernels/rope_scaling.h"
#include "model/moe/router.h"

#define GPT_MAX_LAYERS 1024 /* of a mixture-of-experts layer pattern */

/* A layer of a hybrid stack (--hybrid-layer-pattern, docs/mamba.md): one
 * pattern character each. A GPT model's layers are all TRANSFORMER. */
enum gpt_layer_kind {
	GPT_LAYER_TRANSFORMER, /* norm, self-attention, residual, norm, MLP or MoE, residual */
	GPT_LAYER_MAMBA,       /* 'M': norm, Mamba-2 mixer, residual */
	GPT_LAYER_ATTENTION,   /* '*': norm, self-attention, residual */
	GPT_LAYER_MLP,         /* '-': norm, MLP, residual */
};

enum gpt_recompute {
	GPT_RECOMPUTE_NONE,
	GPT_RECOMPUTE_SELECTIVE, /* the modules of --recompute-modules (GPT_RC_*) */
	GPT_RECOMPUTE_FULL,      /* whole layers from their input */
};

/* --recompute-modules (Megatron's names; core_attn alone by default): what
 * every layer drops in forward and recomputes right before its backward
 * under selective recompute. */
enum gpt_rc_module {
	GPT_RC_CORE_ATTN = 1 << 0,      /* the attention probabilities [B, a, S, S] */
	GPT_RC_LAYERNORM = 1 << 1,      /* both norms' outputs and statistics */
	GPT_RC_MLP = 1 << 2,            /* a dense layer's fc1 output and activation */
	GPT_RC_MOE = 1 << 3,            /* a MoE layer's every activation (router, rows, experts, shared expert) */
	GPT_RC_MOE_ACT = 1 << 4,        /* the experts' activation */
	GPT_RC_SHARED_EXPERTS = 1 << 5, /* the shared expert's fc1 output and activation */
	GPT_RC_MLA_UP_PROJ = 1 << 6,    /* MLA's up-projections' norms and q, k, v after RoPE */
};

struct gpt_config {
	int L;           /* --num-layers */
	int pp_first;    /* --decoder-first-pipeline-num-layers: the first pipeline stage's layers (0: even split) */
	int pp_last;     /* --decoder-last-pipeline-num-layers: the last stage's (0: even split) */
	int h;           /* --hidden-size */
	int f;           /* --ffn-hidden-size (per half with SwiGLU) */
	int a;           /* --num-attention-heads */
	int g;           /* query groups (= a without --group-query-attention) */
	int k;           /* --kv-channels */
	int S;           /* --seq-length */
	int P;           /* --max-position-embeddings */
	int V;           /* tokenizer vocabulary */
	int Vp;          /* padded vocabulary: the embedding's rows */
	bool rope;       /* --position-embedding-type rope or yarn */
	bool nopos;      /* --position-embedding-type none (hybrid models only): no table, no RoPE */
	int rot;         /* rotated channels per head (0 without RoPE) */
	float rotary_base;
	bool rmsnorm;    /* --normalization RMSNorm */
	bool norm_1p;    /* --apply-layernorm-1p: norm weights stored zero-centred, applied as w + 1 */
	bool qkv_bias;   /* --add-qkv-bias: linear_qkv has a bias (also implied by linear biases) */
	bool qk_norm;    /* --qk-layernorm: q_layernorm, k_layernorm over each head's kv channels */
	bool rope_scaling;         /* --use-rope-scaling: Llama 3.x frequency scaling */
	float rope_scaling_factor; /* --rope-scaling-factor */
	bool rope_interleaved;     /* --rotary-interleaved: RoPE pairs channels (2i, 2i+1) */
	bool yarn;                 /* --position-embedding-type yarn (rope is set too) */
	struct rope_yarn yarn_cfg; /* its settings (with yarn, or MLA's: see mla_yarn) */
	float eps;       /* --norm-epsilon */
	/* multi-latent attention (--multi-latent-attention, docs/mla.md): each
	 * head's query and key have k = qk_head + qk_pos channels and its value
	 * v_head; g = a; the shared RoPE key part has rot = qk_pos channels.
	 * qk_norm then means the norms over the compressed query and key/value
	 * (fused into linear_q_up_proj and linear_kv_up_proj), not per head. */
	bool mla;
	int q_lora;      /* --q-lora-rank (0: none, linear_q_proj) */
	int kv_lora;     /* --kv-lora-rank */
	int qk_head;     /* --qk-head-dim */
	int qk_pos;      /* --qk-pos-emb-head-dim */
	int v_head;      /* --v-head-dim */
	bool mla_yarn;   /* --rope-type yarn (Megatron's default): yarn_cfg turns the MLA RoPE; its
			  * factor and mscale_all_dim also set the MLA softmax scale with rope */
	bool swiglu;
	bool bias;       /* not --disable-bias-linear */
	bool untied;     /* --untie-embeddings-and-output-weights */
	enum kops_gelu gelu;
	float init_std;
	float hidden_dropout, attention_dropout;
	enum gpt_recompute recompute;
	bool recompute_block;  /* --recompute-method block (else uniform) */
	int recompute_layers;  /* --recompute-num-layers */
	unsigned recompute_modules; /* GPT_RC_* (selective recompute) */

	/* mixture of experts (docs/moe-spec.md); E = 0: every layer dense */
	int E;                 /* --num-experts */
	int moe_f;             /* --moe-ffn-hidden-size (per half with SwiGLU) */
	int shared_f;          /* --moe-shared-expert-intermediate-size (0: none) */
	bool shared_gate;      /* --moe-shared-expert-gate (with a shared expert) */
	struct moe_router_cfg router;
	bool router_fp32;      /* --moe-router-dtype: router logits kept in fp32 under --bf16/--fp16 */
	uint8_t moe_layer[GPT_MAX_LAYERS]; /* 1: layer i (0-based) is a MoE layer */

	/* sliding-window attention (--window-size L,R, --window-attn-skip-freq) */
	bool swa;              /* --window-size given */
	int window;            /* L: a query sees the keys at most L positions back (-1: no limit) */
	int window_right;      /* R as given: moot under the causal mask */
	bool swa_skip;         /* a skip pattern: swa_layer says which layers keep the window */
	uint8_t swa_layer[GPT_MAX_LAYERS]; /* with swa_skip: 1 = layer i (0-based) windowed */
	/* multi-token prediction (--mtp-num-layers, docs/mtp.md): mtp depths
	 * after the decoder, each a layer of the last decoder layer's kind
	 * (model layer L + k for depth k), their losses weighted by
	 * mtp_scale / mtp in the loss; 0: none */
	int mtp;
	float mtp_scale;   /* --mtp-loss-scaling-factor */

	/* hybrid Mamba/attention stacks (--hybrid-layer-pattern, docs/mamba.md):
	 * layer_kind[l] is layer l's enum gpt_layer_kind; the Mamba-2 mixer has
	 * mamba_H heads of mamba_P channels (d_inner = mamba_H * mamba_P, 2h by
	 * default), mamba_G groups of B and C of mamba_N states each, a causal
	 * convolution of mamba_W taps and the scan's chunk length mamba_chunk */
	bool hybrid;
	bool is_hybrid;  /* --is-hybrid-model, or a pattern: Megatron's is_hybrid_model (gpt_output_init_std) */
	uint8_t layer_kind[GPT_MAX_LAYERS];
	int mamba_N, mamba_P, mamba_G, mamba_H, mamba_W, mamba_chunk;
};

/* Megatron's output_layer_init_method: the std of the linear layers that
 * write into the residual stream (linear_proj, linear_fc2, a mixer's
 * out_proj), init_std / sqrt(2 L), or / sqrt(L) in a hybrid model (one
 * residual block a layer, TransformerConfig.is_hybrid_model). */
float gpt_output_init_std(const struct gpt_config *c);
/* d_inner, the Mamba-2 mixer's inner width, and the width of its in_proj's
 * output [z, x, B, C, dt]: 2 d_inner + 2 G N + H; conv_dim = d_inner + 2 G N */
static inline int gpt_mamba_inner(const struct gpt_config *c)
{
	return c->mamba_H * c->mamba_P;
}

static inline int gpt_mamba_conv_dim(const struct gpt_config *c)
{
	return gpt_mamba_inner(c) + 2 * c->mamba_G * c->mamba_N;
}

static inline int gpt_mamba_proj_dim(const struct gpt_config *c)
{
	return gpt_mamba_inner(c) + gpt_mamba_conv_dim(c) + c->mamba_H;
}

/* The window of layer l (0-based) as the attention ops take it (ops.h):
 * L, or -1 for full attention. */
int gpt_layer_window(const struct gpt_config *c, int l);

/* --window-size "L,R" (or "(L,R)") and --window-attn-skip-freq (an integer
 * N: layer i, 0-based, keeps full attention when (i + 1) mod N == 0; or a
 * list of L 0/1 entries, 1 = windowed) into c (c->L set). what names the
 * source in errors. error() and -1 on bad text. */
int gpt_window_from_text(struct gpt_config *c, const char *size, const char *skip, const char *what);

/* FP8 training (fp8_linear.c, docs/fp8.md): the transformer layers' linear
 * layers multiply FP8 codes under one of Transformer Engine's recipes. */
enum gpt_fp8_recipe { GPT_FP8_DELAYED, GPT_FP8_TENSORWISE, GPT_FP8_BLOCKWISE, GPT_FP8_MXFP8 };
struct gpt_fp8_config {
	bool on;
	bool hybrid;              /* E5M2 output gradients (--fp8-format hybrid), else E4M3 everywhere */
	enum gpt_fp8_recipe recipe;
	int margin, history;      /* delayed: --fp8-margin, --fp8-amax-history-len */
	bool amax_max;            /* delayed: --fp8-amax-compute-algo max (else most_recent) */
	bool tp_only_red;         /* delayed: --tp-only-amax-red */
	bool wgrad;               /* the weight gradients in FP8 (not --no-fp8-wgrad) */
	int bf16_start, bf16_end; /* --first-last-layers-bf16: layers [0, start) and [L - end, L) stay bf16 */
	bool param_gather;        /* --fp8-param-gather: the FP8 layers' weights kept as codes (gpt.h, the weight store) */
};

/* Fill c from the flags and the tokenizer's vocabulary size. error() naming
 * the flag and -1 on an invalid combination. */
int gpt_config_from_args(struct gpt_config *c, const struct args *a, int64_t vocab_size);
/* The FP8 flags (--fp8-format and its recipe's), checked against the model's
 * L layers and pp stages: f->on false without --fp8-format. error() and -1
 * on a bad combination. */
int gpt_fp8_config_from_args(struct gpt_fp8_config *f, const struct args *a, int L, int pp);

/* --moe-layer-freq: an integer Q (layer i is MoE when i mod Q == 0), or
 * Megatron's list expression of L entries 0 or 1: a list such as
 * [1,0,1,0], or lists joined by '+' and repeated by '*' with parentheses,
 * such as ([0]*3+[1]*58). error() naming the position and -1 on bad text. */
int gpt_moe_pattern(const char *spec, int64_t L, unsigned char *out);
/* The same for another flag of the same form (named in errors). */
int gpt_layer_pattern(const char *spec, int64_t L, unsigned char *out, const char *flag);

/* Megatron's padded vocabulary (make_vocab_size_divisible_by x TP);
 * error() and -1 when it does not fit a C int. */
int64_t gpt_padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp);

/* Parameters in the model (counting a tied embedding once), experts
 * included; *active (if not NULL): those one token runs through (the
 * router's top-k experts of each MoE layer). */
int64_t gpt_num_params(const struct gpt_config *c, int64_t *active);

/* Megatron's num_floating_point_operations for one iteration of
 * batch_size samples (megatron/training/training.py). */
double gpt_flops_per_iteration(const struct gpt_config *c, int64_t batch_size);

/* A parallel layout, as far as the model's shapes care. */
struct gpt_layout {
	int tp, pp, vpp, cp, ep; /* 1 = none */
	int etp;                 /* --expert-tensor-parallel-size (0: tp) */
	bool sp;                 /* --sequence-parallel */
	bool megatron_rules;     /* only what Megatron itself requires (report_memory's formula): ffn,
				  * vocabulary and experts' ffn are not checked against TP; megac's
				  * model needs the rest too */
};

/* Whether model c fits layout lay: the one place that decides it, for
 * train, report_memory, ckpt_convert and text_gen_server alike. Tensor
 * parallelism splits the heads, query groups (or TP is a multiple of
 * them: linear_qkv's rows still split evenly), ffn (dense, experts' and
 * shared expert's) and padded vocabulary; pipeline stages x virtual stages
 * split the layers; context parallelism cuts each sequence into 2 x cp
 * chunks, and sequence parallelism those again by TP; expert parallelism
 * splits the experts. error() naming every rule broken, prefixed by what
 * ("target layout" ...; NULL: none), and -1. */
int gpt_config_check_layout(const struct gpt_config *c, const struct gpt_layout *lay, const char *what);

#endif
