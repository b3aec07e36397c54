/*
 * gpt_config.c - see gpt_config.h.
 */
#include "model/gpt_config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "dist/layout.h"

int64_t gpt_padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp)
{
	int64_t multiple, padded;
	if (__builtin_mul_overflow(divisible_by, tp, &multiple))
		multiple = INT64_MAX;
	if (multiple <= 0)
		return vocab;
	padded = (vocab + multiple - 1) / multiple;
	if (vocab > INT32_MAX || __builtin_mul_overflow(padded, multiple, &padded) || padded > INT32_MAX)
		return error("the vocabulary of %lld tokens padded to a multiple of %lld (--make-vocab-size-divisible-"
			     "by %lld x tensor-parallel size %lld) does not fit in 32 bits", (long long)vocab,
			     (long long)multiple, (long long)divisible_by, (long long)tp);
	return padded;
}

int gpt_layer_window(const struct gpt_config *c, int l)
{
	if (!c->swa || (c->swa_skip && !c->swa_layer[l]))
		return -1;
	return c->window;
}

int gpt_window_from_text(struct gpt_config *c, const char *size, const char *skip, const char *what)
{
	c->swa = c->swa_skip = false;
	c->window = c->window_right = -1;
	if (!size)
		return 0; /* Megatron ignores --window-attn-skip-freq without a window */
	const char *p = size;
	while (*p == ' ' || *p == '(')
		p++;
	char *end;
	long l = strtol(p, &end, 10), r = 0;
	bool ok = end != p;
	if (ok && *end == ',') {
		p = end + 1;
		r = strtol(p, &end, 10);
		ok = end != p;
	} else {
		ok = false;
	}
	while (ok && (*end == ')' || *end == ' '))
		end++;
	if (!ok || *end || l < -1 || r < -1 || l > INT32_MAX / 2 || r > INT32_MAX / 2)
		return error("%s '%s': give the window as L,R (keys before and after a query; -1: no limit), "
			     "such as 4096,0", what, size);
	c->swa = true;
	c->window = (int)l;
	c->window_right = (int)r;
	if (!skip)
		return 0;
	if (c->L > GPT_MAX_LAYERS)
		return error("--window-attn-skip-freq with %d layers: megac takes at most %d", c->L, GPT_MAX_LAYERS);
	p = skip;
	while (*p == ' ')
		p++;
	if (!strchr(p, '[')) { /* as Megatron: no '[' is an integer */
		long long q = strtoll(p, &end, 10);
		if (end == p || *end || q < 1)
			return error("--window-attn-skip-freq '%s': give a positive integer or a list such as [1,1,1,0]",
				     skip);
		for (int i = 0; i < c->L; i++)
			c->swa_layer[i] = (i + 1) % q != 0;
	} else if (gpt_layer_pattern(skip, c->L, c->swa_layer, "--window-attn-skip-freq") < 0) {
		return error("--window-attn-skip-freq '%s': a list of --num-layers entries, 1 = window, 0 = full", skip);
	}
	c->swa_skip = true;
	return 0;
}

/* DeepSeek-V3's routing options and the flex dispatcher, with Megatron's
 * rules (TransformerConfig's __post_init__), and megac's where Megatron
 * would route into masked-out experts */
static int moe_deepseek_from_args(struct gpt_config *c, const struct args *a)
{
	struct moe_router_cfg *r = &c->router;
	if (a->moe_router_topk_scaling_factor < 0)
		return error("--moe-router-topk-scaling-factor must be positive (got %g; leave it out for none)",
			     a->moe_router_topk_scaling_factor);
	r->scale = a->moe_router_topk_scaling_factor;
	if (a->moe_router_group_topk > 0) { /* Megatron: a group top-k of 0 or none turns it off */
		int64_t G = a->moe_router_num_groups, gk = a->moe_router_group_topk;
		if (G <= 0)
			return error("--moe-router-group-topk needs --moe-router-num-groups (group-limited routing)");
		if (c->E % G)
			return error("--num-experts %d is not divisible by --moe-router-num-groups %lld", c->E, (long long)G);
		if (gk > G)
			return error("--moe-router-group-topk %lld must not exceed --moe-router-num-groups %lld",
				     (long long)gk, (long long)G);
		if (r->k < gk)
			return error("--moe-router-group-topk %lld exceeds --moe-router-topk %d: each group scores the sum "
				     "of its top topk/group-topk experts, which would be none", (long long)gk, r->k);
		if (r->k > gk * (c->E / G))
			return error("--moe-router-topk %d exceeds the %lld experts of --moe-router-group-topk %lld groups "
				     "of %lld", r->k, (long long)(gk * (c->E / G)), (long long)gk, (long long)(c->E / G));
		r->groups = (int)G;
		r->group_topk = (int)gk;
	}
	r->expert_bias = a->moe_router_enable_expert_bias;
	r->bias_rate = a->moe_router_bias_update_rate;
	if (r->expert_bias && !r->sigmoid)
		return error("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (Megatron's "
			     "expert bias applies to sigmoid scores only)");
	if (r->expert_bias && !isfinite(r->bias_rate))
		return error("--moe-router-bias-update-rate must be a finite number");
	r->force_balance = a->moe_router_force_load_balancing;
	bool flex = a->moe_token_dispatcher_type && !strcmp(a->moe_token_dispatcher_type, "flex");
	const char *be = a->moe_flex_dispatcher_backend ? a->moe_flex_dispatcher_backend : "deepep";
	if (a->moe_enable_deepep && !flex)
		return error("--moe-enable-deepep needs --moe-token-dispatcher-type flex (as in Megatron)");
	if (a->moe_enable_deepep && !strcmp(be, "hybridep"))
		return error("--moe-enable-deepep and --moe-flex-dispatcher-backend hybridep: give one backend");
	if (!strcmp(be, "ncclep") && !flex)
		return error("--moe-flex-dispatcher-backend ncclep needs --moe-token-dispatcher-type flex");
	if (flex && a->moe_pad_expert_input_to_capacity && (a->moe_enable_deepep || !strcmp(be, "deepep")))
		return error("--moe-pad-expert-input-to-capacity does not work with the flex dispatcher's deepep "
			     "backend (as in Megatron)");
	return 0;
}

/* Megatron's MoE flags and its validation rules (docs/moe-spec.md section 1) */
static int moe_from_args(struct gpt_config *c, const struct args *a)
{
	if (a->num_experts <= 0) { /* -1: not given; Megatron turns 0 into none */
		if (a->moe_ffn_hidden_size > 0 || a->moe_shared_expert_intermediate_size > 0)
			return error("--moe-ffn-hidden-size and --moe-shared-expert-intermediate-size need --num-experts");
		return 0;
	}
	if (a->num_experts > 4096)
		return error("--num-experts %lld: megac takes at most 4096", (long long)a->num_experts);
	if (c->L > GPT_MAX_LAYERS)
		return error("mixture of experts with %d layers: megac takes at most %d", c->L, GPT_MAX_LAYERS);
	c->E = (int)a->num_experts;
	if (a->moe_router_topk < 1 || a->moe_router_topk > c->E || a->moe_router_topk > 64)
		return error("--moe-router-topk %lld must be in [1, min(--num-experts %d, 64)]",
			     (long long)a->moe_router_topk, c->E);
	/* a hybrid model's MoE layers are its pattern's E layers (hybrid_from_args) */
	if (!c->hybrid && gpt_moe_pattern(a->moe_layer_freq ? a->moe_layer_freq : "1", c->L, c->moe_layer) < 0)
		return -1;
	c->moe_f = a->moe_ffn_hidden_size > 0 ? (int)a->moe_ffn_hidden_size : c->f;
	if (a->moe_shared_expert_intermediate_size == 0)
		return error("--moe-shared-expert-intermediate-size must be positive (leave it out for no shared expert)");
	c->shared_f = a->moe_shared_expert_intermediate_size > 0 ? (int)a->moe_shared_expert_intermediate_size : 0;
	c->shared_gate = a->moe_shared_expert_gate && c->shared_f > 0; /* Megatron: no shared expert, no gate */
	if (c->bias)
		return error("mixture of experts with linear biases is not implemented yet (give --disable-bias-linear)");
	struct moe_router_cfg *r = &c->router;
	r->E = c->E;
	r->k = (int)a->moe_router_topk;
	r->sigmoid = a->moe_router_score_function && !strcmp(a->moe_router_score_function, "sigmoid");
	r->pre_softmax = a->moe_router_pre_softmax;
	const char *lb = a->moe_router_load_balancing_type ? a->moe_router_load_balancing_type : "aux_loss";
	r->lb = !strcmp(lb, "none") ? MOE_LB_NONE : !strcmp(lb, "seq_aux_loss") ? MOE_LB_SEQ_AUX : MOE_LB_AUX;
	if (strcmp(lb, "none") && strcmp(lb, "aux_loss") && strcmp(lb, "seq_aux_loss"))
		return error("--moe-router-load-balancing-type %s is not implemented yet (megac has aux_loss, "
			     "seq_aux_loss and none)", lb);
	r->aux_coeff = a->moe_aux_loss_coeff;
	if (r->aux_coeff < 0)
		return error("--moe-aux-loss-coeff must not be negative (got %g)", r->aux_coeff);
	r->z_coeff = a->moe_z_loss_coeff > 0 ? a->moe_z_loss_coeff : 0;
	if (a->moe_expert_capacity_factor == 0)
		return error("--moe-expert-capacity-factor must be positive (a negative value, or none, drops nothing)");
	r->capacity = a->moe_expert_capacity_factor > 0 ? a->moe_expert_capacity_factor : 0;
	if (a->tensor_model_parallel_size > 1 && !a->sequence_parallel)
		return error("mixture of experts with tensor parallelism needs --sequence-parallel (Megatron refuses "
			     "to train it without)");
	c->router_fp32 = a->moe_router_dtype != NULL; /* fp32 or fp64: the logits are not rounded to half */
	r->drop_position = a->moe_token_drop_policy && !strcmp(a->moe_token_drop_policy, "position");
	if (a->moe_pad_expert_input_to_capacity && r->capacity <= 0)
		return error("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
	if (r->k == 1 && !r->sigmoid && !r->pre_softmax)
		return error("--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax (a softmax over "
			     "one value has no gradient), as in Megatron");
	return moe_deepseek_from_args(c, a);
}

/* --recompute-modules and Megatron's rules for it (TransformerConfig's
 * __post_init__); without selective recompute Megatron ignores the list */
static int recompute_modules_from_args(struct gpt_config *c, const struct args *a)
{
	static const struct { const char *name; unsigned bit; } mods[] = {
		{ "core_attn", GPT_RC_CORE_ATTN }, { "layernorm", GPT_RC_LAYERNORM },
		{ "mlp", GPT_RC_MLP },             { "moe", GPT_RC_MOE },
		{ "moe_act", GPT_RC_MOE_ACT },     { "shared_experts", GPT_RC_SHARED_EXPERTS },
		{ "mla_up_proj", GPT_RC_MLA_UP_PROJ },
	};
	const struct strlist *l = &a->recompute_modules;
	if (c->recompute != GPT_RECOMPUTE_SELECTIVE)
		return 0;
	c->recompute_modules = l->n ? 0 : GPT_RC_CORE_ATTN;
	for (int i = 0; i < l->n; i++) {
		size_t j = 0;
		while (j < sizeof(mods) / sizeof(mods[0]) && strcmp(mods[j].name, l->v[i]))
			j++;
		if (j == sizeof(mods) / sizeof(mods[0]))
			return error("--recompute-modules %s is not in megac (it recomputes core_attn, layernorm, "
				     "mla_up_proj, mlp, moe, moe_act and shared_experts)", l->v[i]);
		c->recompute_modules |= mods[j].bit;
	}
	if ((c->recompute_modules & GPT_RC_MOE_ACT) && !args_given(a, "--moe-grouped-gemm"))
		return error("--recompute-modules moe_act needs --moe-grouped-gemm (Megatron recomputes the experts' "
			     "activation only in its grouped MLP)");
	if ((c->recompute_modules & GPT_RC_MLA_UP_PROJ) && !a->multi_latent_attention)
		return error("--recompute-modules mla_up_proj needs --multi-latent-attention (as in Megatron)");
	if ((c->recompute_modules & GPT_RC_SHARED_EXPERTS) && c->shared_f > 0 &&
	    args_given(a, "--moe-shared-expert-overlap"))
		return error("--recompute-modules shared_experts does not work with --moe-shared-expert-overlap (as in "
			     "Megatron)");
	return 0;
}

/* --multi-latent-attention (Megatron's MLASelfAttention with the TE spec):
 * the shapes, and what megac does not have with it yet */
static int mla_from_args(struct gpt_config *c, const struct args *a)
{
	if (!a->multi_latent_attention) {
		if (a->rope_type && strcmp(a->rope_type, "rope"))
			return error("--rope-type %s: megac's attention without --multi-latent-attention takes rope only "
				     "(as Megatron's)", a->rope_type);
		return 0;
	}
	if (a->group_query_attention)
		return error("--group-query-attention with --multi-latent-attention: Megatron refuses them together");
	/* MLATransformerConfig's rope_type: yarn unless --rope-type says rope */
	bool yarn = !a->rope_type || !strcmp(a->rope_type, "yarn");
	if (!yarn && strcmp(a->rope_type, "rope"))
		return error("--rope-type %s: expected rope or yarn", a->rope_type);
	/* MLA's YaRN takes original_max_position_embeddings 4096, beta_fast 32
	 * and beta_slow 1 from MLATransformerConfig: Megatron's --yarn-* flags
	 * feed only the YaRN of --position-embedding-type yarn */
	static const char *const gpt_yarn_flags[] = { "--yarn-original-max-position-embeddings", "--yarn-beta-fast",
						      "--yarn-beta-slow", "--yarn-correction-range-round-to-int",
						      "--no-yarn-correction-range-round-to-int" };
	for (size_t i = 0; i < sizeof(gpt_yarn_flags) / sizeof(gpt_yarn_flags[0]); i++)
		if (args_given(a, gpt_yarn_flags[i]))
			return error("%s with --multi-latent-attention: Megatron's multi-latent attention ignores it (its "
				     "YaRN always uses original max positions 4096, beta_fast 32, beta_slow 1 and a "
				     "rounded correction range); leave it out", gpt_yarn_flags[i]);
	if (a->q_lora_rank == 0 || a->q_lora_rank < -1 || a->kv_lora_rank < 1 || a->qk_head_dim < 1 ||
	    a->qk_pos_emb_head_dim < 2 || a->qk_pos_emb_head_dim % 2 || a->v_head_dim < 1 ||
	    a->q_lora_rank > INT32_MAX / 2 || a->kv_lora_rank > INT32_MAX / 2 || a->qk_head_dim > 65536 ||
	    a->qk_pos_emb_head_dim > 65536 || a->v_head_dim > 65536)
		return error("multi-latent attention: --q-lora-rank (positive, or left out), --kv-lora-rank, "
			     "--qk-head-dim and --v-head-dim must be positive and --qk-pos-emb-head-dim even and at "
			     "least 2 (got %lld, %lld, %lld, %lld, %lld)", (long long)a->q_lora_rank,
			     (long long)a->kv_lora_rank, (long long)a->qk_head_dim, (long long)a->qk_pos_emb_head_dim,
			     (long long)a->v_head_dim);
	if (a->v_head_dim > a->qk_head_dim + a->qk_pos_emb_head_dim)
		return error("multi-latent attention with --v-head-dim %lld larger than --qk-head-dim + "
			     "--qk-pos-emb-head-dim (%lld) is not in megac yet", (long long)a->v_head_dim,
			     (long long)(a->qk_head_dim + a->qk_pos_emb_head_dim));
	if (a->rotary_percent != 1.0)
		return error("--rotary-percent %g with --multi-latent-attention is not in megac yet (its RoPE turns "
			     "all --qk-pos-emb-head-dim channels)", a->rotary_percent);
	if (a->rotary_interleaved)
		return error("--rotary-interleaved with --multi-latent-attention is not in megac yet");
	if (c->yarn) /* Megatron's GPTModel then reads YaRN settings its MLA config does not have, and fails */
		return error("--position-embedding-type yarn with --multi-latent-attention: multi-latent attention "
			     "has its own RoPE, and --rope-type yarn (its default) gives it YaRN; give "
			     "--position-embedding-type rope or none");
	if (a->use_rope_scaling)
		return error("--use-rope-scaling with --multi-latent-attention: Megatron's multi-latent attention "
			     "does not scale its RoPE frequencies that way");
	if (a->apply_layernorm_1p)
		return error("--apply-layernorm-1p with --multi-latent-attention is not in megac yet");
	if (a->qk_layernorm && a->q_lora_rank == -1)
		return error("--qk-layernorm with --multi-latent-attention and no --q-lora-rank (a norm fused into "
			     "linear_q_proj) is not in megac yet");
	c->mla = true;
	c->q_lora = a->q_lora_rank == -1 ? 0 : (int)a->q_lora_rank;
	c->kv_lora = (int)a->kv_lora_rank;
	c->qk_head = (int)a->qk_head_dim;
	c->qk_pos = (int)a->qk_pos_emb_head_dim;
	c->v_head = (int)a->v_head_dim;
	c->k = c->qk_head + c->qk_pos;
	c->g = c->a;
	c->rot = c->qk_pos;
	c->rotary_base = (float)a->rotary_base;
	/* MLASelfAttention's YaRN settings; the factor and mscale_all_dim set
	 * its softmax scale with either rope type */
	c->mla_yarn = yarn;
	c->yarn_cfg = rope_yarn_defaults();
	c->yarn_cfg.factor = a->rotary_scaling_factor;
	c->yarn_cfg.mscale = a->mscale;
	c->yarn_cfg.mscale_all_dim = a->mscale_all_dim;
	if (yarn && rope_yarn_check(&c->yarn_cfg, "--rotary-scaling-factor", "original_max_position_embeddings",
				    "beta_fast", "beta_slow") < 0)
		return -1;
	double ms = rope_yarn_mscale(c->yarn_cfg.factor, c->yarn_cfg.mscale_all_dim);
	if (ms == 0 || !isfinite(ms))
		return error("--mscale-all-dim %g with --rotary-scaling-factor %g: the softmax scale of multi-latent "
			     "attention, (0.1 mscale_all_dim ln factor + 1)^2 / sqrt(q head dim), must not be zero",
			     a->mscale_all_dim, a->rotary_scaling_factor);
	return 0;
}

int gpt_fp8_config_from_args(struct gpt_fp8_config *f, const struct args *a, int L, int pp)
{
	memset(f, 0, sizeof(*f));
	if (!a->fp8_format && a->fp8_param_gather)
		return error("--fp8-param-gather needs --fp8-format (as in Megatron: FP8 weights for FP8 layers)");
	if (!a->fp8_format)
		return 0;
	f->on = true;
	f->hybrid = !strcmp(a->fp8_format, "hybrid");
	const char *r = a->fp8_recipe ? a->fp8_recipe : "delayed";
	f->recipe = !strcmp(r, "tensorwise") ? GPT_FP8_TENSORWISE
		    : !strcmp(r, "blockwise") ? GPT_FP8_BLOCKWISE
		    : !strcmp(r, "mxfp8")     ? GPT_FP8_MXFP8
					      : GPT_FP8_DELAYED;
	f->margin = (int)a->fp8_margin;
	f->history = (int)a->fp8_amax_history_len;
	f->amax_max = a->fp8_amax_compute_algo && !strcmp(a->fp8_amax_compute_algo, "max");
	f->tp_only_red = a->tp_only_amax_red;
	f->wgrad = a->fp8_wgrad;
	if (!a->bf16)
		return error("--fp8-format needs --bf16 (megac's FP8 GEMMs give bf16 outputs to a bf16 model)");
	if (a->fp8_amax_history_len < 1 || a->fp8_amax_history_len > 1 << 20)
		return error("--fp8-amax-history-len %lld: expected 1 to %d", (long long)a->fp8_amax_history_len, 1 << 20);
	if (a->fp8_margin < -64 || a->fp8_margin > 64)
		return error("--fp8-margin %lld: expected -64 to 64", (long long)a->fp8_margin);
	if (a->first_last_layers_bf16) {
		if (f->recipe == GPT_FP8_DELAYED) /* Megatron's check */
			return error("--first-last-layers-bf16 does not work with --fp8-recipe delayed (as in "
				     "Megatron); use tensorwise, blockwise or mxfp8");
		int most = L / (pp > 0 ? pp : 1);
		if (a->num_layers_at_start_in_bf16 < 0 || a->num_layers_at_start_in_bf16 > most ||
		    a->num_layers_at_end_in_bf16 < 0 || a->num_layers_at_end_in_bf16 > most)
			return error("--num-layers-at-start-in-bf16 %lld and --num-layers-at-end-in-bf16 %lld: each must "
				     "be 0 to the layers per pipeline stage (%d)",
				     (long long)a->num_layers_at_start_in_bf16, (long long)a->num_layers_at_end_in_bf16,
				     most);
		f->bf16_start = (int)a->num_layers_at_start_in_bf16;
		f->bf16_end = (int)a->num_layers_at_end_in_bf16;
	}
	f->param_gather = a->fp8_param_gather;
	if (!f->param_gather)
		return 0;
	if (!a->use_distributed_optimizer && !a->use_megatron_fsdp)
		return error("--fp8-param-gather needs --use-distributed-optimizer (as in Megatron: the FP8 weights "
			     "are cast from the optimizer's main weights, shard by shard, and all-gathered)");
	if (a->use_megatron_fsdp)
		return error("--fp8-param-gather with --use-megatron-fsdp: not in megac yet; use "
			     "--use-distributed-optimizer");
	if (f->recipe == GPT_FP8_MXFP8)
		return error("--fp8-param-gather with --fp8-recipe mxfp8: not in megac yet (an MXFP8 weight needs "
			     "its row-wise and column-wise codes, each from the fp32 values); use the delayed, "
			     "tensorwise or blockwise recipe, or drop the flag");
	if (f->tp_only_red)
		return error("--fp8-param-gather with --tp-only-amax-red: the data-parallel replicas would cast "
			     "their shards of one weight with different scales; drop one of the two");
	if (a->optimizer_cpu_offload)
		return error("--fp8-param-gather with --optimizer-cpu-offload: not in megac yet (the FP8 weights "
			     "are cast from main weights on the device)");
	if (a->main_params_dtype && strcmp(a->main_params_dtype, "fp32"))
		return error("--fp8-param-gather with --main-params-dtype %s: not in megac yet (the FP8 weights "
			     "are cast from fp32 main weights)", a->main_params_dtype);
	return 0;
}

/* --hybrid-layer-pattern (or its deprecated spelling): the layers of a
 * hybrid stack, one character each (Megatron's hybrid_layer_allocation
 * symbols), which also give the number of layers; and the Mamba-2 mixer's
 * shape (MambaMixer: d_inner = expand 2 x hidden size unless
 * --mamba-num-heads gives the heads). */
static int hybrid_from_args(struct gpt_config *c, const struct args *a)
{
	const char *pat = a->hybrid_layer_pattern;
	if (a->hybrid_override_pattern) {
		if (pat)
			return error("--hybrid-override-pattern and --hybrid-layer-pattern: give one (the first is the "
				     "second's deprecated spelling)");
		pat = a->hybrid_override_pattern;
	}
	c->is_hybrid = a->is_hybrid_model || pat;
	if (a->spec.n) { /* pretrain_hybrid.py's --spec: the one stack megac builds */
		const struct strlist *s = &a->spec;
		bool hyb = s->n == 2 && ((!strcmp(s->v[0], "megatron.core.models.hybrid.hybrid_layer_specs") &&
					   !strcmp(s->v[1], "hybrid_stack_spec")) ||
					  (!strcmp(s->v[0], "megatron.core.models.mamba.mamba_layer_specs") &&
					   !strcmp(s->v[1], "mamba_stack_spec")));
		if (!hyb || !pat)
			return error("--spec: model specs are not in megac (give the model as flags); it takes only the "
				     "hybrid stack's spec, with --hybrid-layer-pattern");
	}
	if (!pat)
		return 0;
	const char *flag = a->hybrid_layer_pattern ? "--hybrid-layer-pattern" : "--hybrid-override-pattern";
	int n = 0, moe = 0;
	for (const char *p = pat; *p; p++, n++) {
		const char *what = NULL;
		switch (*p) {
		case 'M': case '*': case '-': case 'E':
			break;
		case 'G': what = "gated delta net layers (G)"; break;
		case 'D': what = "DeepSeek sparse attention layers (D)"; break;
		case '+': what = "multi-latent attention layers (+)"; break;
		case '|': what = "pipeline stage separators (|)"; break;
		case '/': what = "multi-token prediction patterns (/)"; break;
		default:
			return error("%s '%s': '%c' at position %d is not a layer symbol (M Mamba, * attention, - MLP, "
				     "E MoE)", flag, pat, *p, n + 1);
		}
		if (what)
			return error("%s '%s': %s are not in megac's hybrid models yet (docs/mamba.md)", flag, pat, what);
		if (n >= GPT_MAX_LAYERS)
			return error("%s: more than %d layers", flag, GPT_MAX_LAYERS);
		/* E: an MLP-only layer whose MLP is the MoE layer (moe_from_args) */
		c->layer_kind[n] = *p == 'M' ? GPT_LAYER_MAMBA : *p == '*' ? GPT_LAYER_ATTENTION : GPT_LAYER_MLP;
		c->moe_layer[n] = *p == 'E';
		moe += *p == 'E';
	}
	if (n == 0)
		return error("%s is empty", flag);
	if (a->num_layers != -1 && n != c->L) /* Megatron: the pattern sets the number of layers */
		warning("%s has %d layers; it overrides --num-layers %d", flag, n, c->L);
	c->L = n;
	c->hybrid = true;
	if (moe && a->num_experts <= 0)
		return error("%s '%s': its MoE layers (E) need --num-experts", flag, pat);
	if (!moe && a->num_experts > 0)
		return error("--num-experts with %s '%s': no layer is a MoE layer (E)", flag, pat);
	if (moe && a->moe_layer_freq && strcmp(a->moe_layer_freq, "1"))
		warning("--moe-layer-freq with %s: the pattern's E layers are the MoE layers; it is ignored", flag);
	if (a->mtp_num_layers > 0)
		return error("--mtp-num-layers with %s: multi-token prediction is not in megac's hybrid models yet",
			     flag);
	if (a->multi_latent_attention)
		return error("--multi-latent-attention with %s: not in megac's hybrid models yet", flag);
	if (a->mamba_state_dim < 1 || a->mamba_head_dim < 1 || a->mamba_num_groups < 1)
		return error("--mamba-state-dim, --mamba-head-dim and --mamba-num-groups must be positive");
	int64_t H;
	if (a->mamba_num_heads > 0) {
		H = a->mamba_num_heads;
	} else {
		if ((2 * (int64_t)c->h) % a->mamba_head_dim)
			return error("the Mamba mixer's d_inner (2 x --hidden-size %d) is not divisible by --mamba-head-dim "
				     "%lld", c->h, (long long)a->mamba_head_dim);
		H = 2 * (int64_t)c->h / a->mamba_head_dim;
	}
	if (H % a->mamba_num_groups)
		return error("the Mamba mixer's %lld heads are not divisible by --mamba-num-groups %lld", (long long)H,
			     (long long)a->mamba_num_groups);
	if (H * a->mamba_head_dim + 2 * a->mamba_num_groups * a->mamba_state_dim > (1 << 24))
		return error("the Mamba mixer's widths (--mamba-num-heads x --mamba-head-dim, --mamba-num-groups x "
			     "--mamba-state-dim) are too large");
	c->mamba_H = (int)H;
	c->mamba_P = (int)a->mamba_head_dim;
	c->mamba_G = (int)a->mamba_num_groups;
	c->mamba_N = (int)a->mamba_state_dim;
	c->mamba_W = 4;       /* MambaMixer's d_conv */
	c->mamba_chunk = 128; /* and chunk_size */
	return 0;
}

int gpt_config_from_args(struct gpt_config *c, const struct args *a, int64_t vocab_size)
{
	memset(c, 0, sizeof(*c));
	bool pattern = a->hybrid_layer_pattern || a->hybrid_override_pattern; /* it gives the layers */
	if (a->num_layers < 1 && !(pattern && a->num_layers == -1))
		return error("--num-layers must be at least 1 (got %lld)", (long long)a->num_layers);
	if (a->hidden_size < 1)
		return error("--hidden-size must be at least 1 (got %lld)", (long long)a->hidden_size);
	if (a->num_attention_heads < 1)
		return error("--num-attention-heads must be at least 1 (got %lld)",
			     (long long)a->num_attention_heads);
	c->L = (int)a->num_layers;
	c->h = (int)a->hidden_size;
	if (hybrid_from_args(c, a) < 0)
		return -1;
	/* Megatron's uneven pipeline: given counts must be positive, and the
	 * interleaved schedule is then given by its number of chunks */
	if ((a->decoder_first_pipeline_num_layers != -1 && a->decoder_first_pipeline_num_layers < 1) ||
	    (a->decoder_last_pipeline_num_layers != -1 && a->decoder_last_pipeline_num_layers < 1))
		return error("--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers must be at "
			     "least 1");
	if ((a->decoder_first_pipeline_num_layers > 0 || a->decoder_last_pipeline_num_layers > 0) &&
	    a->num_layers_per_virtual_pipeline_stage > 0)
		return error("with --decoder-first-pipeline-num-layers or --decoder-last-pipeline-num-layers, give the "
			     "interleaved schedule as --num-virtual-stages-per-pipeline-rank, not "
			     "--num-layers-per-virtual-pipeline-stage (Megatron's rule)");
	if (a->decoder_first_pipeline_num_layers > c->L || a->decoder_last_pipeline_num_layers > c->L)
		return error("--decoder-first-pipeline-num-layers %lld and --decoder-last-pipeline-num-layers %lld: a "
			     "stage cannot hold more than the --num-layers %d", (long long)a->decoder_first_pipeline_num_layers,
			     (long long)a->decoder_last_pipeline_num_layers, c->L);
	c->pp_first = a->decoder_first_pipeline_num_layers > 0 ? (int)a->decoder_first_pipeline_num_layers : 0;
	c->pp_last = a->decoder_last_pipeline_num_layers > 0 ? (int)a->decoder_last_pipeline_num_layers : 0;
	c->h = (int)a->hidden_size;
	c->a = (int)a->num_attention_heads;
	if (a->kv_channels > 0) {
		c->k = (int)a->kv_channels;
	} else {
		if (c->h % c->a)
			return error("--hidden-size %d is not divisible by --num-attention-heads %d "
				     "(give --kv-channels to choose the head size)", c->h, c->a);
		c->k = c->h / c->a;
	}
	c->swiglu = a->swiglu;
	if (a->ffn_hidden_size > 0)
		c->f = (int)a->ffn_hidden_size;
	else if (c->swiglu)
		c->f = (int)((int64_t)(4.0 * c->h * 2 / 3) / 64 * 64); /* Megatron's int((4h*2/3)/64)*64 */
	else
		c->f = 4 * c->h;
	if (c->f < 1)
		return error("--ffn-hidden-size works out to %d; give a larger --hidden-size or "
			     "--ffn-hidden-size", c->f);
	c->g = c->a;
	if (a->group_query_attention) {
		if (a->num_query_groups < 1 || c->a % a->num_query_groups)
			return error("--num-query-groups %lld must divide --num-attention-heads %d",
				     (long long)a->num_query_groups, c->a);
		c->g = (int)a->num_query_groups;
	}
	if (a->seq_length < 1)
		return error("--seq-length must be at least 1");
	c->S = (int)a->seq_length;
	c->yarn = !strcmp(a->position_embedding_type, "yarn");
	c->rope = c->yarn || !strcmp(a->position_embedding_type, "rope");
	c->nopos = !strcmp(a->position_embedding_type, "none");
	if (c->nopos && !c->hybrid)
		return error("--position-embedding-type none: megac has it for hybrid Mamba models "
			     "(--hybrid-layer-pattern) only so far");
	if (!a->add_position_embedding && !c->rope && !c->nopos) /* Megatron refuses it the same way */
		return error("--no-position-embedding is deprecated and allowed only with --position-embedding-type "
			     "rope; give --position-embedding-type rope instead");
	if (a->max_position_embeddings < c->S) /* Megatron asserts this for every position type */
		return error("--max-position-embeddings %lld is smaller than --seq-length %d",
			     (long long)a->max_position_embeddings, c->S);
	c->P = (int)a->max_position_embeddings;
	if (c->rope) {
		if (a->rotary_percent <= 0 || a->rotary_percent > 1)
			return error("--rotary-percent must be in (0, 1] (got %g)", a->rotary_percent);
		/* Megatron's YarnRotaryEmbedding rotates all --kv-channels whatever the
		 * percent: a smaller one would be silently ignored */
		if (c->yarn && a->rotary_percent != 1)
			return error("--rotary-percent %g with --position-embedding-type yarn: Megatron's YaRN rotates "
				     "every one of the --kv-channels and ignores --rotary-percent; give 1.0",
				     a->rotary_percent);
		c->rot = (int)(c->k * a->rotary_percent);
		if (c->rot < 2 || c->rot % 2)
			return error("--rotary-percent %g of --kv-channels %d gives %d rotated channels; "
				     "it must be even and at least 2", a->rotary_percent, c->k, c->rot);
		c->rotary_base = (float)a->rotary_base;
		c->rope_interleaved = a->rotary_interleaved;
		c->rope_scaling = a->use_rope_scaling;
		c->rope_scaling_factor = (float)a->rope_scaling_factor;
		if (c->rope_scaling && !(a->rope_scaling_factor >= 1))
			return error("--rope-scaling-factor must be at least 1 (got %g)", a->rope_scaling_factor);
		if (c->yarn && c->rope_scaling) /* Megatron's YaRN would ignore it */
			return error("--use-rope-scaling is Llama 3.x's scaling of --position-embedding-type rope; "
				     "with yarn, YaRN's own flags (--rotary-scaling-factor, ...) scale the frequencies");
		if (c->yarn) {
			struct rope_yarn *y = &c->yarn_cfg;
			y->factor = a->rotary_scaling_factor;
			y->original_max_positions = (int)a->yarn_original_max_position_embeddings;
			y->beta_fast = a->yarn_beta_fast;
			y->beta_slow = a->yarn_beta_slow;
			y->mscale = a->mscale;
			y->mscale_all_dim = a->mscale_all_dim;
			y->round_to_int = a->yarn_correction_range_round_to_int;
			if (rope_yarn_check(y, "--rotary-scaling-factor", "--yarn-original-max-position-embeddings",
					    "--yarn-beta-fast", "--yarn-beta-slow") < 0)
				return -1;
		}
	} else if (a->use_rope_scaling) {
		return error("--use-rope-scaling needs --position-embedding-type rope");
	} else if (a->rotary_interleaved) {
		return error("--rotary-interleaved needs --position-embedding-type rope or yarn");
	}
	c->rmsnorm = !strcmp(a->normalization, "RMSNorm");
	c->norm_1p = a->apply_layernorm_1p;
	c->eps = (float)a->norm_epsilon;
	c->bias = !a->disable_bias_linear;
	c->qkv_bias = c->bias || a->add_qkv_bias; /* Megatron keeps add_qkv_bias in sync with linear biases */
	c->qk_norm = a->qk_layernorm;
	if (c->qk_norm && c->norm_1p)
		return error("--qk-layernorm with --apply-layernorm-1p (zero-centred q/k norm weights) is not "
			     "implemented yet");
	c->untied = a->untie_embeddings_and_output_weights;
	/* Megatron: the fused bias-GELU (tanh form) unless biases are off or the fusion is disabled. */
	c->gelu = (c->bias && a->bias_gelu_fusion) ? KOPS_GELU_TANH : KOPS_GELU_ERF;
	c->init_std = (float)a->init_method_std;
	if (a->hidden_dropout < 0 || a->hidden_dropout >= 1)
		return error("--hidden-dropout must be in [0, 1) (got %g)", a->hidden_dropout);
	if (a->attention_dropout < 0 || a->attention_dropout >= 1)
		return error("--attention-dropout must be in [0, 1) (got %g)", a->attention_dropout);
	c->hidden_dropout = (float)a->hidden_dropout;
	c->attention_dropout = (float)a->attention_dropout;

	const char *gran = a->recompute_granularity;
	if (a->recompute_activations)
		gran = "selective";
	if (!gran) {
		if (a->recompute_method)
			return error("--recompute-method needs --recompute-granularity full");
		c->recompute = GPT_RECOMPUTE_NONE;
	} else if (!strcmp(gran, "selective")) {
		if (a->recompute_num_layers > 0)
			return error("--recompute-num-layers is for --recompute-granularity full, not selective");
		if (a->recompute_method) /* Megatron asserts it */
			return error("--recompute-method is for --recompute-granularity full, not selective");
		c->recompute = GPT_RECOMPUTE_SELECTIVE;
	} else {
		c->recompute = GPT_RECOMPUTE_FULL;
		if (!a->recompute_method || a->recompute_num_layers <= 0)
			return error("--recompute-granularity full needs --recompute-method uniform|block and "
				     "--recompute-num-layers N");
		c->recompute_block = !strcmp(a->recompute_method, "block");
		c->recompute_layers = (int)a->recompute_num_layers;
		if (c->recompute_layers > c->L)
			return error("--recompute-num-layers %d is more than --num-layers %d",
				     c->recompute_layers, c->L);
	}

	if (moe_from_args(c, a) < 0 || recompute_modules_from_args(c, a) < 0 || mla_from_args(c, a) < 0 ||
	    gpt_window_from_text(c, a->window_size, a->window_attn_skip_freq, "--window-size") < 0)
		return -1;

	if (a->mtp_num_layers != -1) {
		if (a->mtp_num_layers < 1 || a->mtp_num_layers > 64)
			return error("--mtp-num-layers %lld: give a number of depths from 1 to 64",
				     (long long)a->mtp_num_layers);
		c->mtp = (int)a->mtp_num_layers;
		c->mtp_scale = (float)a->mtp_loss_scaling_factor;
	}

	c->V = (int)vocab_size;
	if (a->padded_vocab_size > 0) {
		if (a->padded_vocab_size < vocab_size)
			return error("--padded-vocab-size %lld is smaller than the tokenizer's %lld tokens",
				     (long long)a->padded_vocab_size, (long long)vocab_size);
		c->Vp = (int)a->padded_vocab_size;
	} else if (a->pad_vocab_size) {
		int64_t vp = gpt_padded_vocab(vocab_size, a->make_vocab_size_divisible_by,
					      a->tensor_model_parallel_size);
		if (vp < 0)
			return -1;
		c->Vp = (int)vp;
	} else {
		c->Vp = (int)vocab_size;
	}
	return 0;
}

int64_t gpt_num_params(const struct gpt_config *c, int64_t *active)
{
	int64_t h = c->h, qkv = (int64_t)(c->a + 2 * c->g) * c->k, ak = (int64_t)c->a * c->k;
	int64_t f1 = c->swiglu ? 2 * (int64_t)c->f : c->f;
	int64_t norm = c->rmsnorm ? h : 2 * h;
	int64_t attn = norm + qkv * h + ak * h + (c->qkv_bias ? qkv : 0) + (c->bias ? h : 0);
	if (c->qk_norm && !c->mla) /* q_layernorm and k_layernorm: kv channels each (and a bias with LayerNorm) */
		attn += 2 * (c->rmsnorm ? 1 : 2) * (int64_t)c->k;
	if (c->mla) { /* docs/mla.md: input norm, the down- and up-projections (their norms), linear_proj */
		int64_t nw = c->rmsnorm ? 1 : 2, a = c->a, qk = c->k, ql = c->q_lora, kvl = c->kv_lora;
		attn = norm + (ql ? ql * h + a * qk * ql + (c->qk_norm ? nw * ql : 0) : a * qk * h) +
		       (kvl + c->qk_pos) * h + a * (int64_t)(c->qk_head + c->v_head) * kvl +
		       (c->qk_norm ? nw * kvl : 0) + h * a * c->v_head + (c->bias ? h : 0);
	}
	int64_t dense_mlp = norm + f1 * h + (int64_t)c->f * h + (c->bias ? f1 + h : 0);
	/* a MoE layer: its router, every expert and the shared expert (no biases);
	 * a token runs through k experts of them */
	int64_t ef1 = c->swiglu ? 2 * (int64_t)c->moe_f : c->moe_f;
	int64_t sf1 = c->swiglu ? 2 * (int64_t)c->shared_f : c->shared_f;
	int64_t expert = ef1 * h + (int64_t)c->moe_f * h, shared = sf1 * h + (int64_t)c->shared_f * h;
	int64_t n = (int64_t)c->Vp * h + norm, act = n;
	/* a Mamba layer: in_proj with its norm, conv1d, dt_bias, A_log, D, norm, out_proj */
	int64_t di = gpt_mamba_inner(c), cd = gpt_mamba_conv_dim(c), H = c->mamba_H;
	int64_t mamba = norm + gpt_mamba_proj_dim(c) * h + cd * (c->mamba_W + 1) + 3 * H + di + h * di;
	for (int l = 0; l < c->L; l++) {
		bool moe = c->E > 0 && c->moe_layer[l];
		if (c->hybrid && c->layer_kind[l] != GPT_LAYER_TRANSFORMER) {
			int64_t x = c->layer_kind[l] == GPT_LAYER_MAMBA ? mamba :
				    c->layer_kind[l] == GPT_LAYER_ATTENTION ? attn : moe ? 0 : dense_mlp;
			n += x + (moe ? norm + (int64_t)c->E * h + c->E * expert + shared : 0);
			act += x + (moe ? norm + (int64_t)c->E * h + c->router.k * expert + shared : 0);
			continue;
		}
		n += attn + (moe ? norm + (int64_t)c->E * h + c->E * expert + shared : dense_mlp);
		act += attn + (moe ? norm + (int64_t)c->E * h + c->router.k * expert + shared : dense_mlp);
	}
	/* the multi-token-prediction depths: enorm, hnorm, eh_proj, a layer of
	 * the last layer's kind, final_layernorm */
	for (int d = 0; d < c->mtp; d++) {
		bool moe = c->E > 0 && c->moe_layer[c->L - 1];
		int64_t own = 3 * norm + 2 * h * h + attn;
		n += own + (moe ? norm + (int64_t)c->E * h + c->E * expert + shared : dense_mlp);
		act += own + (moe ? norm + (int64_t)c->E * h + c->router.k * expert + shared : dense_mlp);
	}
	if (!c->rope && !c->nopos) {
		n += (int64_t)c->P * h;
		act += (int64_t)c->P * h;
	}
	if (c->untied) {
		n += (int64_t)c->Vp * h;
		act += (int64_t)c->Vp * h;
	}
	if (active)
		*active = act;
	return n;
}

double gpt_flops_per_iteration(const struct gpt_config *c, int64_t batch_size)
{
	/* Megatron's formula, dense layers only: 6 flops per weight element per token
	 * (forward + 2 backward GEMMs, multiply-add), plus the quadratic attention term. */
	/* the multi-token-prediction depths count as layers of the last layer's kind */
	double h = c->h, s = c->S, L = c->L + c->mtp, f = c->f, V = c->Vp, D = c->mtp;
	double F = c->swiglu ? 3 : 2;
	double Q = (double)c->k * c->a, KV = (double)c->k * c->g;
	double tokens = (double)batch_size * s, sq = (double)batch_size * s * s;
	if (c->hybrid) { /* Megatron's hybrid_flops: each layer kind's forward, times 3 */
		double n[4] = { 0 }, n_moe = 0;
		for (int l = 0; l < c->L; l++) {
			bool moe = c->E > 0 && c->moe_layer[l];
			n_moe += moe;
			n[c->layer_kind[l]] += !moe;
		}
		double din = 2 * h, p = Q / h, N = c->mamba_N; /* Megatron counts d_inner as 2h */
		double mamba = 2 * tokens * h * (2 * din + 2 * (double)c->mamba_G * N + c->mamba_H) +
			       7 * tokens * din * N + 2 * tokens * din * h;
		double attn_l = 4 * tokens * h * p * (h + h * (double)c->g / c->a) + 2 * sq * h * p;
		double mlp_l = 4 * (f / h) * (c->swiglu ? 1.5 : 1.0) * tokens * h * h;
		/* an E layer: its top-k experts and the shared one (Megatron's moe_layer_flops) */
		double moe_l = 4 * tokens * h * (double)c->moe_f * c->router.k * (c->swiglu ? 1.5 : 1.0) +
			       4 * tokens * h * (double)c->shared_f * (c->swiglu ? 1.5 : 1.0);
		return 3 * (n[GPT_LAYER_MAMBA] * mamba + n[GPT_LAYER_ATTENTION] * attn_l + n[GPT_LAYER_MLP] * mlp_l +
			    n_moe * moe_l + 2 * tokens * h * V);
	}
	double mlp = 6 * h * (f * F * L);
	if (c->E > 0) { /* Megatron: a MoE layer counts its top-k experts and the shared one, not the router */
		double Lm = 0;
		for (int l = 0; l < c->L; l++)
			Lm += c->moe_layer[l];
		Lm += c->moe_layer[c->L - 1] * D;
		mlp = 6 * h * F * (f * (L - Lm) + ((double)c->moe_f * c->router.k + c->shared_f) * Lm);
	}
	double attn = 6 * (h * (Q + KV + KV) + Q * h) * L;
	double logits = 6 * h * V * (1 + D) + 6 * D * (3 * h + 2 * h * h); /* and the depths' norms and eh_proj */
	double core = 6 * Q;
	if (c->mla) { /* Megatron's multi-latent attention terms (the norms count one flop per rank) */
		double a = c->a, qk = c->k, ql = c->q_lora, kvl = c->kv_lora;
		double q = ql > 0 ? ql * (h + a * qk + 1) : h * a * qk;
		attn = 6 * (q + kvl * (h + a * (c->qk_head + c->v_head) + 1) + h * c->qk_pos + a * c->v_head * h) * L;
		core = 6 * (a * qk / 2 + a * c->v_head / 2.0);
	}
	return tokens * (mlp + attn + logits) + sq * core * L;
}

float gpt_output_init_std(const struct gpt_config *c)
{
	return c->init_std / sqrtf((c->is_hybrid ? 1.0f : 2.0f) * (float)c->L);
}

int gpt_config_check_layout(const struct gpt_config *c, const struct gpt_layout *lay, const char *what)
{
	struct sbuf why = SBUF_INIT;
	int t = lay->tp, pp = lay->pp, vpp = lay->vpp, cp = lay->cp, ep = lay->ep;
	bool ours = !lay->megatron_rules; /* megac's model's own needs, beyond Megatron's */
	if (t < 1 || pp < 1 || vpp < 1 || cp < 1 || ep < 1)
		BUG("layout TP %d PP %d VPP %d CP %d EP %d", t, pp, vpp, cp, ep);
	if (c->a % t)
		sbuf_addf(&why, "; --num-attention-heads %d is not divisible by --tensor-model-parallel-size %d", c->a, t);
	if (c->g % t && t % c->g)
		sbuf_addf(&why, "; %d query groups are neither a multiple nor a divisor of --tensor-model-parallel-size "
			  "%d", c->g, t);
	else if (c->g < t && (2 * (int64_t)c->g * c->k) % t)
		sbuf_addf(&why, "; linear_qkv's %lld output rows ((heads + 2 x %d query groups) x %d channels) are not "
			  "divisible by --tensor-model-parallel-size %d", (long long)(c->a + 2 * c->g) * c->k, c->g, c->k, t);
	if (ours && c->f % t)
		sbuf_addf(&why, "; --ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d", c->f, t);
	if (ours && c->Vp % t)
		sbuf_addf(&why, "; the padded vocabulary %d is not divisible by --tensor-model-parallel-size %d", c->Vp, t);
	int et = lay->etp > 0 ? lay->etp : t;
	if (ours && c->E > 0 && c->moe_f % et)
		sbuf_addf(&why, "; the experts' ffn size %d (--moe-ffn-hidden-size) is not divisible by the expert "
			  "tensor-parallel size %d", c->moe_f, et);
	if (ours && c->E > 0 && c->shared_f % t)
		sbuf_addf(&why, "; the shared expert's ffn size %d (--moe-shared-expert-intermediate-size) is not "
			  "divisible by --tensor-model-parallel-size %d", c->shared_f, t);
	struct dist_split split = { .L = c->L, .pp = pp, .vpp = vpp, .first = c->pp_first, .last = c->pp_last };
	const char *bad_split = dist_split_check(&split);
	if (bad_split && (c->pp_first || c->pp_last)) {
		sbuf_addf(&why, "; --num-layers %d over --pipeline-model-parallel-size %d (%d virtual stages per rank) with",
			  c->L, pp, vpp);
		if (c->pp_first)
			sbuf_addf(&why, " --decoder-first-pipeline-num-layers %d", c->pp_first);
		if (c->pp_last)
			sbuf_addf(&why, "%s --decoder-last-pipeline-num-layers %d", c->pp_first ? " and" : "", c->pp_last);
		sbuf_addf(&why, ": %s", bad_split);
	}
	else if (bad_split && vpp > 1)
		sbuf_addf(&why, "; --num-layers %d is not divisible by --pipeline-model-parallel-size %d x %d virtual "
			  "stages per rank", c->L, pp, vpp);
	else if (bad_split)
		sbuf_addf(&why, "; --num-layers %d is not divisible by --pipeline-model-parallel-size %d (each pipeline "
			  "stage holds the same number of layers unless --decoder-first-pipeline-num-layers or "
			  "--decoder-last-pipeline-num-layers says otherwise)", c->L, pp);
	if (cp > 1 && c->S % (2 * (int64_t)cp))
		sbuf_addf(&why, "; --seq-length %d is not a multiple of 2 * --context-parallel-size %d = %lld (two "
			  "chunks per rank)", c->S, cp, 2 * (long long)cp);
	else if (lay->sp && t > 1 && (c->S / cp) % t)
		sbuf_addf(&why, "; --sequence-parallel needs --seq-length %d%s divisible by --tensor-model-parallel-size "
			  "%d", c->S, cp > 1 ? " / --context-parallel-size" : "", t);
	if (c->E > 0 && c->E % ep)
		sbuf_addf(&why, "; --num-experts %d is not divisible by --expert-model-parallel-size %d (each "
			  "expert-parallel rank holds the same number of experts)", c->E, ep);
	if (ep > 1 && c->E <= 0)
		sbuf_addf(&why, "; --expert-model-parallel-size %d needs mixture-of-experts layers (--num-experts)", ep);
	/* MambaMixer's asserts: each TP rank holds whole heads and whole groups */
	if (c->hybrid && c->mamba_H % t)
		sbuf_addf(&why, "; the Mamba mixer's %d heads (--mamba-num-heads, or 2 x --hidden-size / "
			  "--mamba-head-dim) are not divisible by --tensor-model-parallel-size %d", c->mamba_H, t);
	if (c->hybrid && c->mamba_G % t)
		sbuf_addf(&why, "; --mamba-num-groups %d is not divisible by --tensor-model-parallel-size %d", c->mamba_G,
			  t);
	/* Megatron splits a pattern without '|' over the stages as a GPT's
	 * layers (hybrid_layer_allocation's select_pipeline_segment), and only
	 * a pattern with '|' over virtual stages */
	if (c->hybrid && vpp > 1)
		sbuf_addf(&why, "; a hybrid Mamba model (--hybrid-layer-pattern) over virtual pipeline stages needs the "
			  "pattern's '|' stage separators, which megac does not take yet");
	if (ours && c->hybrid && cp > 1) /* docs/mamba.md */
		sbuf_addf(&why, "; a hybrid Mamba model (--hybrid-layer-pattern) runs without --context-parallel-size in "
			  "megac so far");
	int rc = 0;
	if (why.len)
		rc = what ? error("%s: %s", what, why.buf + 2) : error("%s", why.buf + 2);
	sbuf_release(&why);
	return rc;
}
