/*
 * layer_spec.h - how one transformer layer is built (Megatron Core's
 * ModuleSpec for a TransformerLayer: which attention, which norm, a dense
 * MLP or a mixture of experts, which linear layers carry biases). The
 * layer code (transformer_layer.c, attention.c, mlp.c, moe/) reads the
 * spec, not the model-wide flags, to decide what to register and compute,
 * so a layer variant is a new spec field and the code that honours it.
 *
 * gpt_layer_spec() derives layer l's spec from the model's config; every
 * layer of a GPT/Llama/Mixtral model differs only in mlp (the MoE layer
 * pattern of --moe-layer-freq) and window (--window-attn-skip-freq).
 */
#ifndef MEGAC_MODEL_LAYER_SPEC_H
#define MEGAC_MODEL_LAYER_SPEC_H

#include <stdbool.h>

#include "kernels/ops.h"
#include "model/gpt_config.h"

enum layer_norm_kind {
	LAYER_NORM,   /* LayerNorm: weight and bias */
	LAYER_RMSNORM /* RMSNorm: weight only */
};

enum layer_mlp_kind {
	LAYER_MLP_DENSE, /* linear_fc1, activation, linear_fc2 */
	LAYER_MLP_MOE    /* router, experts (and a shared expert) */
};

struct transformer_layer_spec {
	/* what the layer is: a transformer layer, or one of a hybrid stack's
	 * kinds (a Mamba layer reads only norm and norm_1p below) */
	enum gpt_layer_kind kind;
	/* the norms before attention and before the MLP */
	enum layer_norm_kind norm;
	bool norm_1p;           /* weights stored zero-centred, applied as w + 1 (--apply-layernorm-1p) */
	/* self-attention: fused linear_qkv, core attention, linear_proj */
	bool qkv_bias;          /* linear_qkv has a bias */
	bool proj_bias;         /* linear_proj has a bias */
	bool qk_norm;           /* q_layernorm, k_layernorm: each head normalized over its channels before RoPE */
	bool mla;               /* multi-latent attention (attention.c, docs/mla.md) instead of linear_qkv */
	bool mla_norm;          /* its norms over the compressed query and key/value (--qk-layernorm) */
	int rot;                /* channels of each q/k head that RoPE rotates (0: no RoPE) */
	bool rot_interleaved;   /* RoPE pairs channels (2i, 2i+1), not (i, i + rot/2) (--rotary-interleaved) */
	int window;             /* sliding window: keys at most this far back (-1: full causal attention) */
	/* MLP */
	enum layer_mlp_kind mlp;
	bool swiglu;            /* fc1 is [gate; up], the activation SiLU(gate) * up */
	enum kops_gelu gelu;    /* the GELU otherwise */
	bool fc_bias;           /* linear_fc1 and linear_fc2 have biases (dense MLP) */
	bool shared_expert;     /* a MoE layer's shared expert */
};

void gpt_layer_spec(const struct gpt_config *c, int l, struct transformer_layer_spec *s);

#endif
