/*
 * hf_map.c - see hf_map.h. The fused QKV keeps, per query group G of g, the
 * m = a/g query heads' rows, then the group's key rows, then its value rows
 * (k rows per head); Hugging Face keeps q, k and v apart, all heads in
 * order. GPT-2's Conv1D stores [in, out], the transpose of a linear layer.
 * DeepSeek-V3's multi-latent attention keeps Megatron's rows (per head
 * [nope; rope] queries and [nope; value] up-projected keys, the compressed
 * key/value then the shared RoPE key), so its tensors copy; only a folder
 * with rope_interleave false has its RoPE rows regrouped (hf_tensor.mla_rope).
 * Mamba2ForCausalLM's mixer tensors copy too (transformers' in_proj rows are
 * Megatron's [z; x; B; C; dt]); only conv1d.weight gains its unit axis.
 */
#include "convert/hf_map.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "kernels/rope_scaling.h"

const char *hf_arch_class(enum hf_arch arch)
{
	switch (arch) {
	case HF_GPT2:
		return "GPT2LMHeadModel";
	case HF_LLAMA:
		return "LlamaForCausalLM";
	case HF_MIXTRAL:
		return "MixtralForCausalLM";
	case HF_QWEN2:
		return "Qwen2ForCausalLM";
	case HF_QWEN3:
		return "Qwen3ForCausalLM";
	case HF_MISTRAL:
		return "MistralForCausalLM";
	case HF_QWEN2_MOE:
		return "Qwen2MoeForCausalLM";
	case HF_QWEN3_MOE:
		return "Qwen3MoeForCausalLM";
	case HF_DEEPSEEK_V3:
	case HF_DEEPSEEK_V3_HALVES:
		return "DeepseekV3ForCausalLM";
	case HF_MAMBA2:
		return "Mamba2ForCausalLM";
	}
	return "?";
}

/* DeepSeek-V3's routing options, which neither Mixtral nor Qwen2-MoE has */
static void deepseek_routing_why(const struct gpt_config *c, struct sbuf *why)
{
	if (c->router.group_topk > 0)
		sbuf_addf(why, ", group-limited routing (--moe-router-group-topk)");
	if (c->router.scale > 0 && c->router.scale != 1)
		sbuf_addf(why, ", a top-k scaling factor (--moe-router-topk-scaling-factor)");
	if (c->router.expert_bias)
		sbuf_addf(why, ", an expert bias (--moe-router-enable-expert-bias)");
}

/* Ends an export checker: 0 when `why` (", reason" items) is empty, else
 * error "HEAD; this one has REASONS[TAIL]"; releases `why` either way. */
static int refuse_export(struct sbuf *why, const char *head, const char *tail)
{
	int rc = 0;
	if (why->len)
		rc = error("%s; this one has %s%s", head, why->buf + 2, tail ? tail : "");
	sbuf_release(why);
	return rc;
}

/* A MoE model as MixtralForCausalLM (docs/moe-spec.md section 7): every
 * layer MoE, softmax routing after the top-k (HF renormalises the top-k of
 * a softmax over all experts, which is the same), no shared expert. */
static int mixtral_ok(const struct gpt_config *c)
{
	int dense = 0;
	for (int l = 0; l < c->L; l++)
		dense += !c->moe_layer[l];
	struct sbuf why = SBUF_INIT;
	if (dense)
		sbuf_addf(&why, ", %d dense layer%s (--moe-layer-freq)", dense, dense > 1 ? "s" : "");
	if (c->shared_f > 0)
		sbuf_addf(&why, ", a shared expert (--moe-shared-expert-intermediate-size %d)", c->shared_f);
	if (c->router.sigmoid)
		sbuf_addf(&why, ", sigmoid routing (--moe-router-score-function sigmoid)");
	if (c->router.pre_softmax)
		sbuf_addf(&why, ", the softmax before the top-k (--moe-router-pre-softmax)");
	deepseek_routing_why(c, &why);
	return refuse_export(&why, "a mixture-of-experts model exports as MixtralForCausalLM, which has MoE in "
			     "every layer, a softmax router renormalised over the top-k (megac's softmax after the "
			     "top-k) and no shared expert",
			     " (Qwen2MoeForCausalLM takes a shared expert with --moe-shared-expert-gate and "
			     "--add-qkv-bias)");
}

/* Qwen2-MoE: the model megac exports as Qwen2MoeForCausalLM, a MoE model
 * with a gated shared expert or a QKV bias. */
static bool is_qwen2_moe(const struct gpt_config *c)
{
	return c->E > 0 && (c->shared_gate || (c->qkv_bias && !c->bias));
}

/* What Qwen2MoeForCausalLM holds: Qwen2's attention (q, k, v biases, head
 * size hidden / heads), a gated shared expert in every MoE layer, softmax
 * routing over all experts (norm_topk_prob false: --moe-router-pre-softmax)
 * or renormalised over the top-k (true: megac's softmax after the top-k);
 * dense layers anywhere (mlp_only_layers). */
static int qwen2_moe_ok(const struct gpt_config *c)
{
	struct sbuf why = SBUF_INIT;
	if (!c->qkv_bias || c->bias)
		sbuf_addf(&why, ", %s", c->bias ? "linear biases" : "no QKV bias (--add-qkv-bias)");
	if (c->shared_f <= 0)
		sbuf_addf(&why, ", no shared expert (--moe-shared-expert-intermediate-size)");
	else if (!c->shared_gate)
		sbuf_addf(&why, ", a shared expert without its gate (--moe-shared-expert-gate)");
	if (c->router.sigmoid)
		sbuf_addf(&why, ", sigmoid routing (--moe-router-score-function sigmoid)");
	deepseek_routing_why(c, &why);
	if (c->qk_norm)
		sbuf_addf(&why, ", q/k norms (--qk-layernorm)");
	if (c->yarn)
		sbuf_addf(&why, ", YaRN (--position-embedding-type yarn)");
	if (c->swa && c->window >= 0)
		sbuf_addf(&why, ", a sliding window (--window-size)");
	if ((int64_t)c->k * c->a != c->h)
		sbuf_addf(&why, ", %d x %d channels for hidden size %d (--kv-channels)", c->k, c->a, c->h);
	return refuse_export(&why, "a mixture-of-experts model with a gated shared expert or a QKV bias exports as "
			     "Qwen2MoeForCausalLM, which has a QKV bias, a shared expert with its sigmoid gate, softmax "
			     "routing and heads of hidden size / heads channels", NULL);
}

/* What Qwen3MoeForCausalLM holds: Qwen3's attention (q/k norms, no
 * biases, head_dim free), experts without a shared one, softmax routing
 * over all experts (norm_topk_prob false: --moe-router-pre-softmax) or
 * renormalised over the top-k; dense layers anywhere (mlp_only_layers). */
static int qwen3_moe_ok(const struct gpt_config *c)
{
	struct sbuf why = SBUF_INIT;
	if (!c->rmsnorm || !c->swiglu || c->rot != c->k)
		sbuf_addf(&why, ", %s, %s and %d of %d channels rotated", c->rmsnorm ? "RMSNorm" : "LayerNorm",
			  c->swiglu ? "SwiGLU" : "GELU", c->rot, c->k);
	if (c->bias || c->qkv_bias)
		sbuf_addf(&why, ", %s", c->bias ? "linear biases" : "a QKV bias (--add-qkv-bias)");
	if (c->shared_f > 0)
		sbuf_addf(&why, ", a shared expert (--moe-shared-expert-intermediate-size %d)", c->shared_f);
	if (c->router.sigmoid)
		sbuf_addf(&why, ", sigmoid routing (--moe-router-score-function sigmoid)");
	if (c->yarn)
		sbuf_addf(&why, ", YaRN (--position-embedding-type yarn)");
	if (c->swa && c->window >= 0)
		sbuf_addf(&why, ", a sliding window (--window-size)");
	return refuse_export(&why, "a mixture-of-experts model with --qk-layernorm exports as Qwen3MoeForCausalLM, "
			     "which has RMSNorm, SwiGLU, RoPE on every channel, no linear biases, no shared expert and "
			     "softmax routing", NULL);
}

/* The first MoE layer of a model whose MoE layers are all those from it
 * on (DeepSeek-V3's first_k_dense_replace); -1 when they are not. */
static int first_moe_layer(const struct gpt_config *c)
{
	int K = 0;
	while (K < c->L && !(c->E > 0 && c->moe_layer[K]))
		K++;
	for (int l = K; l < c->L; l++)
		if (!c->moe_layer[l])
			return -1;
	return K;
}

/* What DeepseekV3ForCausalLM holds (transformers 4.53): multi-latent
 * attention with a compressed query and both latent norms, RMSNorm and
 * SwiGLU without biases, RoPE (plain, or YaRN whose correction range comes
 * from original_max_position_embeddings 4096, as Megatron's MLA has it);
 * dense layers first, then MoE layers of sigmoid-routed experts chosen
 * with the expert bias (e_score_correction_bias), renormalised over the
 * top-k when k > 1, scaled by routed_scaling_factor, groups scored by
 * their top-2 choosing scores, and an ungated shared expert of a multiple
 * of the experts' size. */
static int deepseek_v3_ok(const struct gpt_config *c)
{
	struct sbuf why = SBUF_INIT;
	if (!c->rmsnorm || !c->swiglu || c->bias || !c->rope)
		sbuf_addf(&why, ", %s, %s, %s and %s", c->rmsnorm ? "RMSNorm" : "LayerNorm",
			  c->swiglu ? "SwiGLU" : "GELU", c->bias ? "linear biases" : "no linear biases",
			  c->rope ? "no learned positions" : "learned positions");
	if (!c->q_lora)
		sbuf_addf(&why, ", no compressed query (--q-lora-rank)");
	if (!c->qk_norm)
		sbuf_addf(&why, ", no norms over the compressed query and key/value (--qk-layernorm)");
	if (c->eps != 1e-6f)
		sbuf_addf(&why, ", --norm-epsilon %g (transformers' q_a_layernorm and kv_a_layernorm always use 1e-6, "
			  "megac's latent norms --norm-epsilon)", (double)c->eps);
	const struct rope_yarn *y = &c->yarn_cfg;
	if (c->mla_yarn) {
		double P = y->factor * y->original_max_positions;
		if (P != floor(P) || P > INT32_MAX)
			sbuf_addf(&why, ", a YaRN factor %g that is no whole number of 1/%d (transformers takes it as "
				  "max_position_embeddings / original_max_position_embeddings)", y->factor,
				  y->original_max_positions);
		if (y->factor > 1 && y->mscale_all_dim == 0 && y->mscale != 1)
			sbuf_addf(&why, ", --mscale %g with --mscale-all-dim 0 (transformers' YaRN then takes mscale "
				  "as 1)", y->mscale);
	} else if (rope_yarn_mscale(y->factor, y->mscale_all_dim) != 1) {
		sbuf_addf(&why, ", --rope-type rope with a softmax scale changed by --rotary-scaling-factor and "
			  "--mscale-all-dim (transformers applies mscale_all_dim with YaRN only)");
	}
	if (c->E > 0) {
		int K = first_moe_layer(c);
		if (K < 0)
			sbuf_addf(&why, ", MoE layers that are not all those after the dense ones (--moe-layer-freq)");
		if (!c->router.sigmoid || c->router.pre_softmax)
			sbuf_addf(&why, ", softmax routing (--moe-router-score-function sigmoid)");
		if (!c->router.expert_bias)
			sbuf_addf(&why, ", no expert bias (--moe-router-enable-expert-bias)");
		if (c->router.group_topk > 0 && c->router.k / c->router.group_topk != 2)
			sbuf_addf(&why, ", groups scored by their top %d (top-%d over --moe-router-group-topk %d; "
				  "transformers scores a group by its top 2)", c->router.k / c->router.group_topk,
				  c->router.k, c->router.group_topk);
		if (c->shared_f <= 0 || c->shared_f % c->moe_f)
			sbuf_addf(&why, ", a shared expert of %d channels (--moe-shared-expert-intermediate-size; "
				  "DeepSeek-V3's is n_shared_experts x the experts' %d)", c->shared_f, c->moe_f);
		if (c->shared_gate)
			sbuf_addf(&why, ", a gated shared expert (--moe-shared-expert-gate)");
	}
	if (c->swa && c->window >= 0)
		sbuf_addf(&why, ", a sliding window (--window-size)");
	return refuse_export(&why, "a multi-latent attention model exports as DeepseekV3ForCausalLM, which has "
			     "RMSNorm, SwiGLU, no linear biases, RoPE, a compressed query, both latent norms with "
			     "epsilon 1e-6, YaRN from 4096 original positions, dense layers first, then sigmoid routing "
			     "with the expert bias, top-2 group scores and a shared expert", NULL);
}

/* What Mamba2ForCausalLM (transformers 4.49) holds: Mamba layers only,
 * each an RMSNorm and the mixer; the final RMSNorm; no positions (RoPE
 * passes, since no layer attends); transformers' layer_norm_epsilon for
 * the block norms and the mixer's gated norm alike, which Megatron fixes at
 * 1e-5; d_inner = expand x hidden size. The mixer's fixed settings (4
 * taps, a conv bias, no linear biases, dt limits (0, inf)) are megac's
 * only ones. More than one group exports with a warning: transformers
 * 4.49 then computes another function from the weights (docs/mamba.md). */
static int mamba2_ok(const struct gpt_config *c)
{
	int att = 0, mlp = 0, moe = 0;
	char pat[GPT_MAX_LAYERS + 1];
	for (int l = 0; l < c->L; l++) {
		bool e = c->layer_kind[l] == GPT_LAYER_MLP && c->E > 0 && c->moe_layer[l];
		att += c->layer_kind[l] == GPT_LAYER_ATTENTION;
		mlp += c->layer_kind[l] == GPT_LAYER_MLP && !e;
		moe += e;
		pat[l] = c->layer_kind[l] == GPT_LAYER_MAMBA ? 'M' : c->layer_kind[l] == GPT_LAYER_ATTENTION ? '*' : e ? 'E' : '-';
	}
	pat[c->L] = 0;
	if (att || mlp || moe)
		return error("--hybrid-layer-pattern %s: %d attention (*), %d MLP (-) and %d MoE (E) layers beside the "
			     "Mamba layers; transformers 4.49 has no class for Megatron's hybrid stack (Mamba2ForCausalLM "
			     "holds Mamba layers only, pattern all M). Exporting it needs a class built from the pattern "
			     "layer by layer, as NVIDIA's Nemotron-H code (NemotronHForCausalLM, hybrid_override_pattern) "
			     "is, which megac does not map yet", pat, att, mlp, moe);
	struct sbuf why = SBUF_INIT;
	if (!c->rmsnorm)
		sbuf_addf(&why, ", LayerNorm (--normalization)");
	if (!c->rope && !c->nopos)
		sbuf_addf(&why, ", learned position embeddings (--position-embedding-type learned_absolute)");
	if (c->eps != 1e-5f)
		sbuf_addf(&why, ", --norm-epsilon %g (transformers' layer_norm_epsilon is the gated norm's too, which "
			  "Megatron's mixer fixes at 1e-5)", (double)c->eps);
	int64_t di = gpt_mamba_inner(c);
	if (di % c->h)
		sbuf_addf(&why, ", d_inner %lld (--mamba-num-heads %d x --mamba-head-dim %d) that is no whole multiple of "
			  "--hidden-size %d (transformers' expand)", (long long)di, c->mamba_H, c->mamba_P, c->h);
	int rc = refuse_export(&why, "a Mamba model exports as Mamba2ForCausalLM, which has RMSNorm with "
			       "layer_norm_epsilon 1e-5 (its gated norm's too), no position embeddings and d_inner = "
			       "expand x hidden size", NULL);
	if (rc == 0 && c->mamba_G > 1)
		warning("--mamba-num-groups %d: the export holds megac's weights, but transformers 4.49 computes another "
			"function from them: its gated norm normalises over all of d_inner (Megatron, mamba_ssm and megac "
			"per group), and its CPU forward without the cache gives head h the B and C of group h mod %d "
			"(they: group h / %d); with one group they agree (docs/mamba.md)",
			c->mamba_G, c->mamba_G, c->mamba_H / c->mamba_G);
	return rc;
}

int hf_arch_for(const struct gpt_config *c, enum hf_arch *arch)
{
	if (c->mtp) /* no Hugging Face class here has a place for the depths; dropping them would lose trained weights */
		return error("exporting a model with multi-token prediction (--mtp-num-layers %d) to Hugging Face is not "
			     "in megac yet", c->mtp);
	if (c->mla) {
		*arch = HF_DEEPSEEK_V3;
		if (c->norm_1p)
			return error("the model stores its norm weights zero-centred (--apply-layernorm-1p); exporting it "
				     "to Hugging Face (weights + 1) is not in megac yet");
		return deepseek_v3_ok(c);
	}
	if (c->norm_1p) /* Hugging Face's norms apply their weight as stored */
		return error("the model stores its norm weights zero-centred (--apply-layernorm-1p); exporting it to "
			     "Hugging Face (weights + 1) is not in megac yet");
	if (c->hybrid) {
		*arch = HF_MAMBA2;
		return mamba2_ok(c);
	}
	if (c->E > 0 && !c->rope)
		return error("a mixture-of-experts model exports as %s, which needs RoPE; this one has learned "
			     "positions", is_qwen2_moe(c) ? "Qwen2MoeForCausalLM" : "MixtralForCausalLM");
	if (c->qk_norm && !c->rope)
		return error("a model with --qk-layernorm exports as Qwen3ForCausalLM, which needs RoPE; this one has "
			     "learned positions");
	if (c->rope && is_qwen2_moe(c)) {
		*arch = HF_QWEN2_MOE;
		if (!c->rmsnorm || !c->swiglu || c->rot != c->k)
			return error("a model with RoPE exports as Qwen2MoeForCausalLM, which needs RMSNorm, SwiGLU and "
				     "RoPE on every channel; this one has %s, %s and %d of %d channels rotated",
				     c->rmsnorm ? "RMSNorm" : "LayerNorm", c->swiglu ? "SwiGLU" : "GELU", c->rot, c->k);
		return qwen2_moe_ok(c);
	}
	if (c->rope && c->E > 0 && c->qk_norm) {
		*arch = HF_QWEN3_MOE;
		return qwen3_moe_ok(c);
	}
	if (c->rope) {
		*arch = c->E > 0 ? HF_MIXTRAL : c->qk_norm ? HF_QWEN3 : c->qkv_bias && !c->bias ? HF_QWEN2 :
			c->swa && c->window >= 0 ? HF_MISTRAL : HF_LLAMA;
		if (c->swa && c->window >= 0 && c->swa_skip)
			return error("--window-attn-skip-freq: Hugging Face's Mistral and Mixtral have the sliding "
				     "window in every layer; exporting full-attention layers beside it is not in megac");
		if (c->swa && c->window >= 0 && *arch != HF_MISTRAL && *arch != HF_MIXTRAL)
			return error("a sliding window (--window-size) exports as MistralForCausalLM or "
				     "MixtralForCausalLM, which have neither q/k norms (--qk-layernorm) nor a QKV bias "
				     "(--add-qkv-bias)");
		if (*arch == HF_MISTRAL && c->rope_scaling)
			return error("--use-rope-scaling: megac exports Llama 3.x RoPE scaling with LlamaForCausalLM, "
				     "Qwen2ForCausalLM and Qwen3ForCausalLM, not MistralForCausalLM");
		if ((*arch == HF_MISTRAL || c->E > 0) && c->yarn)
			return error("--position-embedding-type yarn: megac exports YaRN with LlamaForCausalLM, "
				     "Qwen2ForCausalLM and Qwen3ForCausalLM, not %s", hf_arch_class(*arch));
		if (c->yarn && !c->yarn_cfg.round_to_int)
			return error("--no-yarn-correction-range-round-to-int: transformers' YaRN (rope_type \"yarn\") "
				     "always rounds the correction range to whole channel pairs");
		if (c->qk_norm && c->qkv_bias)
			return error("a model with --qk-layernorm exports as Qwen3ForCausalLM, whose attention_bias "
				     "puts a bias on o_proj too; this one has a bias on linear_qkv only");
		if (c->E > 0 && c->rope_scaling)
			return error("--use-rope-scaling: megac exports Llama 3.x RoPE scaling with LlamaForCausalLM, "
				     "Qwen2ForCausalLM and Qwen3ForCausalLM, not MixtralForCausalLM");
		if (!c->rmsnorm || !c->swiglu || c->bias || c->rot != c->k)
			return error("a model with RoPE exports as %s, which needs RMSNorm, SwiGLU, no "
				     "linear biases and RoPE on every channel; this one has %s, %s, %s and %d of %d "
				     "channels rotated", hf_arch_class(*arch),
				     c->rmsnorm ? "RMSNorm" : "LayerNorm", c->swiglu ? "SwiGLU" : "GELU",
				     c->bias ? "biases" : "no biases", c->rot, c->k);
		return c->E > 0 ? mixtral_ok(c) : 0;
	}
	if (c->swa && c->window >= 0)
		return error("a model with learned positions exports as GPT2LMHeadModel, which has no sliding window "
			     "(--window-size)");
	*arch = HF_GPT2;
	if (c->rmsnorm || c->swiglu || !c->bias || c->g != c->a || (int64_t)c->k * c->a != c->h)
		return error("a model with learned positions exports as GPT2LMHeadModel, which needs LayerNorm, GELU, "
			     "linear biases, one key/value head per query head and kv-channels x heads = hidden size; "
			     "this one has %s, %s, %s, %d query groups for %d heads, %d x %d channels for hidden "
			     "size %d",
			     c->rmsnorm ? "RMSNorm" : "LayerNorm", c->swiglu ? "SwiGLU" : "GELU",
			     c->bias ? "biases" : "no biases", c->g, c->a, c->k, c->a, c->h);
	return 0;
}

static void add(struct hf_tensor **v, int *n, int *cap, const char *name, const char *src, enum hf_xform x,
		int ndim, int64_t d0, int64_t d1, int64_t r0)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		*v = xrealloc(*v, (size_t)*cap * sizeof(**v));
	}
	struct hf_tensor *t = &(*v)[(*n)++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->src, sizeof(t->src), "%s", src);
	t->x = x;
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->r0 = r0;
}

size_t hf_numel(const struct hf_tensor *t)
{
	size_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= (size_t)t->shape[d];
	return n;
}

/* Mamba2ForCausalLM's tensors (transformers 4.49's names, in
 * named_parameters order): the embedding, per layer the block's RMSNorm
 * (megac's fused into in_proj) and the mixer's, the final norm. in_proj's
 * rows are [z; x, B, C; dt] on both sides; conv1d.weight is [C, 1, W]
 * there and [C, W] here. */
static void mamba2_tensors(const struct gpt_config *c, struct hf_tensor **v, int *n, int *cap)
{
	int64_t h = c->h, H = c->mamba_H, di = gpt_mamba_inner(c), C = gpt_mamba_conv_dim(c);
	char hf[HF_NAME_MAX], mg[HF_NAME_MAX];
#define ADD(x, nd, d0, d1) add(v, n, cap, hf, mg, x, nd, d0, d1, 0)
#define LAYER(h_, m_) (snprintf(hf, sizeof(hf), "backbone.layers.%d." h_, l), \
		       snprintf(mg, sizeof(mg), "decoder.layers.%d." m_, l))
	snprintf(hf, sizeof(hf), "backbone.embeddings.weight");
	snprintf(mg, sizeof(mg), "embedding.word_embeddings.weight");
	ADD(HF_VOCAB, 2, c->V, h);
	for (int l = 0; l < c->L; l++) {
		LAYER("norm.weight", "mixer.in_proj.layer_norm_weight");
		ADD(HF_COPY, 1, h, 0);
		LAYER("mixer.dt_bias", "mixer.dt_bias");
		ADD(HF_COPY, 1, H, 0);
		LAYER("mixer.A_log", "mixer.A_log");
		ADD(HF_COPY, 1, H, 0);
		LAYER("mixer.D", "mixer.D");
		ADD(HF_COPY, 1, H, 0);
		LAYER("mixer.conv1d.weight", "mixer.conv1d.weight");
		ADD(HF_UNSQUEEZE, 3, C, 1);
		(*v)[*n - 1].shape[2] = c->mamba_W;
		LAYER("mixer.conv1d.bias", "mixer.conv1d.bias");
		ADD(HF_COPY, 1, C, 0);
		LAYER("mixer.in_proj.weight", "mixer.in_proj.weight");
		ADD(HF_COPY, 2, gpt_mamba_proj_dim(c), h);
		LAYER("mixer.norm.weight", "mixer.norm.weight");
		ADD(HF_COPY, 1, di, 0);
		LAYER("mixer.out_proj.weight", "mixer.out_proj.weight");
		ADD(HF_COPY, 2, h, di);
	}
	snprintf(hf, sizeof(hf), "backbone.norm_f.weight");
	snprintf(mg, sizeof(mg), "decoder.final_norm.weight");
	ADD(HF_COPY, 1, h, 0);
#undef LAYER
#undef ADD
}

/* DeepseekV3ForCausalLM's tensors: MLA's projections and latent norms
 * (docs/mla.md's names: the same rows, the query's and kv_a_proj's RoPE
 * rows in Megatron's order when rope_interleave is true), dense layers,
 * then MoE layers with the router's weight and expert bias, the experts
 * and the shared expert. */
static void deepseek_v3_tensors(const struct gpt_config *c, struct hf_tensor **v, int *n, int *cap)
{
	int64_t h = c->h, qk = (int64_t)c->a * c->k, kvu = (int64_t)c->a * (c->qk_head + c->v_head);
	int64_t F = c->moe_f, Fs = c->shared_f, f = c->f;
	char hf[HF_NAME_MAX], mg[HF_NAME_MAX];
#define ADD(x, nd, d0, d1, r0) add(v, n, cap, hf, mg, x, nd, d0, d1, r0)
#define NAMES(h_, m_, ...) (snprintf(hf, sizeof(hf), h_, __VA_ARGS__), snprintf(mg, sizeof(mg), m_, __VA_ARGS__))
#define LAYER(h_, m_) NAMES("model.layers.%d." h_, "decoder.layers.%d." m_, l)
	NAMES("model.embed_tokens.weight%s", "embedding.word_embeddings.weight%s", "");
	ADD(HF_VOCAB, 2, c->V, h, 0);
	for (int l = 0; l < c->L; l++) {
		LAYER("input_layernorm.weight", "input_layernorm.weight");
		ADD(HF_COPY, 1, h, 0, 0);
		LAYER("self_attn.q_a_proj.weight", "self_attention.linear_q_down_proj.weight");
		ADD(HF_COPY, 2, c->q_lora, h, 0);
		LAYER("self_attn.q_a_layernorm.weight", "self_attention.linear_q_up_proj.layer_norm_weight");
		ADD(HF_COPY, 1, c->q_lora, 0, 0);
		LAYER("self_attn.q_b_proj.weight", "self_attention.linear_q_up_proj.weight");
		ADD(HF_COPY, 2, qk, c->q_lora, 0);
		LAYER("self_attn.kv_a_proj_with_mqa.weight", "self_attention.linear_kv_down_proj.weight");
		ADD(HF_COPY, 2, c->kv_lora + c->qk_pos, h, 0);
		LAYER("self_attn.kv_a_layernorm.weight", "self_attention.linear_kv_up_proj.layer_norm_weight");
		ADD(HF_COPY, 1, c->kv_lora, 0, 0);
		LAYER("self_attn.kv_b_proj.weight", "self_attention.linear_kv_up_proj.weight");
		ADD(HF_COPY, 2, kvu, c->kv_lora, 0);
		LAYER("self_attn.o_proj.weight", "self_attention.linear_proj.weight");
		ADD(HF_COPY, 2, h, (int64_t)c->a * c->v_head, 0);
		if (!(c->E > 0 && c->moe_layer[l])) {
			LAYER("post_attention_layernorm.weight", "mlp.linear_fc1.layer_norm_weight");
			ADD(HF_COPY, 1, h, 0, 0);
			LAYER("mlp.gate_proj.weight", "mlp.linear_fc1.weight");
			ADD(HF_ROWS, 2, f, h, 0);
			LAYER("mlp.up_proj.weight", "mlp.linear_fc1.weight");
			ADD(HF_ROWS, 2, f, h, f);
			LAYER("mlp.down_proj.weight", "mlp.linear_fc2.weight");
			ADD(HF_COPY, 2, h, f, 0);
			continue;
		}
		LAYER("post_attention_layernorm.weight", "pre_mlp_layernorm.weight");
		ADD(HF_COPY, 1, h, 0, 0);
		LAYER("mlp.gate.weight", "mlp.router.weight");
		ADD(HF_COPY, 2, c->E, h, 0);
		LAYER("mlp.gate.e_score_correction_bias", "mlp.router.expert_bias");
		ADD(HF_COPY, 1, c->E, 0, 0);
		for (int e = 0; e < c->E; e++) { /* gate_proj and up_proj: one megac tensor */
			snprintf(mg, sizeof(mg), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight", l, e);
			snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
			ADD(HF_ROWS, 2, F, h, 0);
			snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
			ADD(HF_ROWS, 2, F, h, F);
			snprintf(mg, sizeof(mg), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.weight", l, e);
			snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
			ADD(HF_COPY, 2, h, F, 0);
		}
		LAYER("mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.linear_fc1.weight");
		ADD(HF_ROWS, 2, Fs, h, 0);
		LAYER("mlp.shared_experts.up_proj.weight", "mlp.shared_experts.linear_fc1.weight");
		ADD(HF_ROWS, 2, Fs, h, Fs);
		LAYER("mlp.shared_experts.down_proj.weight", "mlp.shared_experts.linear_fc2.weight");
		ADD(HF_COPY, 2, h, Fs, 0);
	}
	NAMES("model.norm.weight%s", "decoder.final_layernorm.weight%s", "");
	ADD(HF_COPY, 1, h, 0, 0);
#undef LAYER
#undef NAMES
#undef ADD
}

void hf_tensors(const struct gpt_config *c, enum hf_arch arch, struct hf_tensor **out, int *n)
{
	struct hf_tensor *v = NULL;
	int cap = 0;
	*n = 0;
	int64_t h = c->h, V = c->V, f = c->f, qk = (int64_t)c->a * c->k, gk = (int64_t)c->g * c->k;
	char hf[HF_NAME_MAX], mg[HF_NAME_MAX];
#define ADD(x, nd, d0, d1, r0) add(&v, n, &cap, hf, mg, x, nd, d0, d1, r0)
#define NAMES(h_, m_, ...) (snprintf(hf, sizeof(hf), h_, __VA_ARGS__), snprintf(mg, sizeof(mg), m_, __VA_ARGS__))
	if (arch == HF_GPT2) {
		NAMES("transformer.wte.weight%s", "embedding.word_embeddings.weight%s", "");
		ADD(HF_VOCAB, 2, V, h, 0);
		NAMES("transformer.wpe.weight%s", "embedding.position_embeddings.weight%s", "");
		ADD(HF_COPY, 2, c->P, h, 0);
		for (int l = 0; l < c->L; l++) {
			NAMES("transformer.h.%d.ln_1.weight", "decoder.layers.%d.self_attention.linear_qkv.layer_norm_weight", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("transformer.h.%d.ln_1.bias", "decoder.layers.%d.self_attention.linear_qkv.layer_norm_bias", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("transformer.h.%d.attn.c_attn.weight", "decoder.layers.%d.self_attention.linear_qkv.weight", l);
			ADD(HF_C_ATTN, 2, h, 3 * h, 0);
			NAMES("transformer.h.%d.attn.c_attn.bias", "decoder.layers.%d.self_attention.linear_qkv.bias", l);
			ADD(HF_C_ATTN, 1, 3 * h, 0, 0);
			NAMES("transformer.h.%d.attn.c_proj.weight", "decoder.layers.%d.self_attention.linear_proj.weight", l);
			ADD(HF_TRANSPOSE, 2, qk, h, 0);
			NAMES("transformer.h.%d.attn.c_proj.bias", "decoder.layers.%d.self_attention.linear_proj.bias", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("transformer.h.%d.ln_2.weight", "decoder.layers.%d.mlp.linear_fc1.layer_norm_weight", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("transformer.h.%d.ln_2.bias", "decoder.layers.%d.mlp.linear_fc1.layer_norm_bias", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("transformer.h.%d.mlp.c_fc.weight", "decoder.layers.%d.mlp.linear_fc1.weight", l);
			ADD(HF_TRANSPOSE, 2, h, f, 0);
			NAMES("transformer.h.%d.mlp.c_fc.bias", "decoder.layers.%d.mlp.linear_fc1.bias", l);
			ADD(HF_COPY, 1, f, 0, 0);
			NAMES("transformer.h.%d.mlp.c_proj.weight", "decoder.layers.%d.mlp.linear_fc2.weight", l);
			ADD(HF_TRANSPOSE, 2, f, h, 0);
			NAMES("transformer.h.%d.mlp.c_proj.bias", "decoder.layers.%d.mlp.linear_fc2.bias", l);
			ADD(HF_COPY, 1, h, 0, 0);
		}
		NAMES("transformer.ln_f.weight%s", "decoder.final_layernorm.weight%s", "");
		ADD(HF_COPY, 1, h, 0, 0);
		NAMES("transformer.ln_f.bias%s", "decoder.final_layernorm.bias%s", "");
		ADD(HF_COPY, 1, h, 0, 0);
	} else if (arch == HF_DEEPSEEK_V3 || arch == HF_DEEPSEEK_V3_HALVES) {
		deepseek_v3_tensors(c, &v, n, &cap);
	} else if (arch == HF_MAMBA2) {
		mamba2_tensors(c, &v, n, &cap);
	} else {
		NAMES("model.embed_tokens.weight%s", "embedding.word_embeddings.weight%s", "");
		ADD(HF_VOCAB, 2, V, h, 0);
		for (int l = 0; l < c->L; l++) {
			NAMES("model.layers.%d.input_layernorm.weight",
			      "decoder.layers.%d.self_attention.linear_qkv.layer_norm_weight", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("model.layers.%d.self_attn.q_proj.weight", "decoder.layers.%d.self_attention.linear_qkv.weight", l);
			ADD(HF_QKV_Q, 2, qk, h, 0);
			NAMES("model.layers.%d.self_attn.k_proj.weight", "decoder.layers.%d.self_attention.linear_qkv.weight", l);
			ADD(HF_QKV_K, 2, gk, h, 0);
			NAMES("model.layers.%d.self_attn.v_proj.weight", "decoder.layers.%d.self_attention.linear_qkv.weight", l);
			ADD(HF_QKV_V, 2, gk, h, 0);
			if (arch == HF_QWEN2 || arch == HF_QWEN2_MOE) { /* the fused bias unfused as the weight's rows */
				NAMES("model.layers.%d.self_attn.q_proj.bias", "decoder.layers.%d.self_attention.linear_qkv.bias", l);
				ADD(HF_QKV_Q, 1, qk, 0, 0);
				NAMES("model.layers.%d.self_attn.k_proj.bias", "decoder.layers.%d.self_attention.linear_qkv.bias", l);
				ADD(HF_QKV_K, 1, gk, 0, 0);
				NAMES("model.layers.%d.self_attn.v_proj.bias", "decoder.layers.%d.self_attention.linear_qkv.bias", l);
				ADD(HF_QKV_V, 1, gk, 0, 0);
			}
			if (arch == HF_QWEN3 || arch == HF_QWEN3_MOE) {
				NAMES("model.layers.%d.self_attn.q_norm.weight", "decoder.layers.%d.self_attention.q_layernorm.weight", l);
				ADD(HF_COPY, 1, c->k, 0, 0);
				NAMES("model.layers.%d.self_attn.k_norm.weight", "decoder.layers.%d.self_attention.k_layernorm.weight", l);
				ADD(HF_COPY, 1, c->k, 0, 0);
			}
			NAMES("model.layers.%d.self_attn.o_proj.weight", "decoder.layers.%d.self_attention.linear_proj.weight",
			      l);
			ADD(HF_COPY, 2, h, qk, 0);
			if (arch == HF_MIXTRAL) {
				int64_t F = c->moe_f;
				NAMES("model.layers.%d.post_attention_layernorm.weight",
				      "decoder.layers.%d.pre_mlp_layernorm.weight", l);
				ADD(HF_COPY, 1, h, 0, 0);
				NAMES("model.layers.%d.block_sparse_moe.gate.weight", "decoder.layers.%d.mlp.router.weight", l);
				ADD(HF_COPY, 2, c->E, h, 0);
				for (int e = 0; e < c->E; e++) { /* w1 and w3 next to each other: one megac tensor */
					snprintf(mg, sizeof(mg), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight",
						 l, e);
					snprintf(hf, sizeof(hf), "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", l, e);
					ADD(HF_ROWS, 2, F, h, 0);
					snprintf(hf, sizeof(hf), "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", l, e);
					ADD(HF_ROWS, 2, F, h, F);
					snprintf(mg, sizeof(mg), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.weight",
						 l, e);
					snprintf(hf, sizeof(hf), "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", l, e);
					ADD(HF_COPY, 2, h, F, 0);
				}
				continue;
			}
			if ((arch == HF_QWEN2_MOE || arch == HF_QWEN3_MOE) && c->moe_layer[l]) {
				int64_t F = c->moe_f, Fs = c->shared_f;
				NAMES("model.layers.%d.post_attention_layernorm.weight",
				      "decoder.layers.%d.pre_mlp_layernorm.weight", l);
				ADD(HF_COPY, 1, h, 0, 0);
				NAMES("model.layers.%d.mlp.gate.weight", "decoder.layers.%d.mlp.router.weight", l);
				ADD(HF_COPY, 2, c->E, h, 0);
				for (int e = 0; e < c->E; e++) { /* gate_proj and up_proj: one megac tensor */
					snprintf(mg, sizeof(mg), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight",
						 l, e);
					snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
					ADD(HF_ROWS, 2, F, h, 0);
					snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
					ADD(HF_ROWS, 2, F, h, F);
					snprintf(mg, sizeof(mg), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.weight",
						 l, e);
					snprintf(hf, sizeof(hf), "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
					ADD(HF_COPY, 2, h, F, 0);
				}
				if (arch == HF_QWEN3_MOE)
					continue;
				NAMES("model.layers.%d.mlp.shared_expert.gate_proj.weight",
				      "decoder.layers.%d.mlp.shared_experts.linear_fc1.weight", l);
				ADD(HF_ROWS, 2, Fs, h, 0);
				NAMES("model.layers.%d.mlp.shared_expert.up_proj.weight",
				      "decoder.layers.%d.mlp.shared_experts.linear_fc1.weight", l);
				ADD(HF_ROWS, 2, Fs, h, Fs);
				NAMES("model.layers.%d.mlp.shared_expert.down_proj.weight",
				      "decoder.layers.%d.mlp.shared_experts.linear_fc2.weight", l);
				ADD(HF_COPY, 2, h, Fs, 0);
				NAMES("model.layers.%d.mlp.shared_expert_gate.weight",
				      "decoder.layers.%d.mlp.shared_experts.gate_weight", l);
				ADD(HF_COPY, 2, 1, h, 0);
				continue;
			}
			NAMES("model.layers.%d.post_attention_layernorm.weight",
			      "decoder.layers.%d.mlp.linear_fc1.layer_norm_weight", l);
			ADD(HF_COPY, 1, h, 0, 0);
			NAMES("model.layers.%d.mlp.gate_proj.weight", "decoder.layers.%d.mlp.linear_fc1.weight", l);
			ADD(HF_ROWS, 2, f, h, 0);
			NAMES("model.layers.%d.mlp.up_proj.weight", "decoder.layers.%d.mlp.linear_fc1.weight", l);
			ADD(HF_ROWS, 2, f, h, f);
			NAMES("model.layers.%d.mlp.down_proj.weight", "decoder.layers.%d.mlp.linear_fc2.weight", l);
			ADD(HF_COPY, 2, h, f, 0);
		}
		NAMES("model.norm.weight%s", "decoder.final_layernorm.weight%s", "");
		ADD(HF_COPY, 1, h, 0, 0);
	}
	if (c->untied) {
		NAMES("lm_head.weight%s", "output_layer.weight%s", "");
		ADD(HF_VOCAB, 2, V, h, 0);
	}
#undef ADD
#undef NAMES
	/* DeepSeek-V3 stored for rotation by halves: the query's RoPE rows of
	 * every head, and the shared RoPE key's rows of kv_a_proj_with_mqa */
	for (int i = 0; arch == HF_DEEPSEEK_V3_HALVES && i < *n; i++) {
		struct hf_tensor *t = &v[i];
		bool q = strstr(t->name, ".self_attn.q_b_proj.") != NULL, kv = strstr(t->name, ".kv_a_proj_with_mqa.") != NULL;
		if (q || kv) {
			t->mla_block = q ? c->k : c->kv_lora + c->qk_pos;
			t->mla_off = q ? c->qk_head : c->kv_lora;
			t->mla_rope = c->qk_pos;
		}
	}
	/* interleaved RoPE: the query and key rows, their biases and their
	 * per-head norms' weights travel regrouped into rotate-half order */
	for (int i = 0; c->rope && c->rope_interleaved && i < *n; i++) {
		struct hf_tensor *t = &v[i];
		t->rope_pairs = t->x == HF_QKV_Q || t->x == HF_QKV_K || strstr(t->src, ".q_layernorm.") ||
				strstr(t->src, ".k_layernorm.");
	}
	*out = v;
}

void hf_src_shape(const struct gpt_config *c, const struct hf_tensor *t, int *ndim, int64_t *shape)
{
	int64_t rows_qkv = (int64_t)(c->a + 2 * c->g) * c->k;
	*ndim = t->ndim;
	shape[0] = t->shape[0];
	shape[1] = t->shape[1];
	switch (t->x) {
	case HF_COPY:
		break;
	case HF_VOCAB:
		shape[0] = c->Vp;
		break;
	case HF_ROWS: /* [gate; up] of the dense MLP or an expert */
		shape[0] = 2 * t->shape[0];
		break;
	case HF_TRANSPOSE:
		shape[0] = t->shape[1];
		shape[1] = t->shape[0];
		break;
	case HF_QKV_Q:
	case HF_QKV_K:
	case HF_QKV_V:
		shape[0] = rows_qkv;
		break;
	case HF_C_ATTN:
		shape[0] = rows_qkv;
		if (t->ndim == 2)
			shape[1] = c->h;
		break;
	case HF_UNSQUEEZE: /* [C, 1, W] -> [C, W] */
		*ndim = 2;
		shape[1] = t->shape[2];
		break;
	}
}

/* The fused QKV's rows of part (0 q, 1 k, 2 v) of query group G: the
 * first row and the count. */
static void qkv_rows(const struct gpt_config *c, int part, int G, int64_t *row0, int64_t *nrows)
{
	int64_t m = c->a / c->g, k = c->k, block = (m + 2) * k;
	*row0 = G * block + (part == 0 ? 0 : part == 1 ? m * k : (m + 1) * k);
	*nrows = part == 0 ? m * k : k;
}

/* Copy rows between the fused QKV (fused) and part `part` of every group
 * laid out one group after the other (parts): export when to_parts. */
static void qkv_move(const struct gpt_config *c, int part, int64_t cols, const float *from, float *to, int to_parts)
{
	int64_t out_row = 0;
	for (int G = 0; G < c->g; G++) {
		int64_t r0, nr;
		qkv_rows(c, part, G, &r0, &nr);
		size_t bytes = (size_t)(nr * cols) * sizeof(float);
		if (to_parts)
			memcpy(to + out_row * cols, from + r0 * cols, bytes);
		else
			memcpy(to + r0 * cols, from + out_row * cols, bytes);
		out_row += nr;
	}
}

static void transpose(const float *in, int64_t rows, int64_t cols, float *out)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j < cols; j++)
			out[j * rows + r] = in[r * cols + j];
}

/* Regroup the rows of every head (k rows of cols each; rows a multiple
 * of k): to Hugging Face, row j of a head takes megac's row 2j (j < k/2)
 * or 2(j - k/2) + 1, so that megac's pair (2i, 2i+1) becomes HF's (i, i +
 * k/2); back from it, the inverse. The attention scores q.k are the same:
 * both sides move the same way. */
static void regroup_pairs(float *x, int64_t rows, int64_t cols, int k, bool to_hf)
{
	size_t head = (size_t)k * cols;
	float *tmp = xmalloc(head * sizeof(float));
	for (int64_t r0 = 0; r0 + k <= rows; r0 += k) {
		float *h = x + r0 * cols;
		memcpy(tmp, h, head * sizeof(float));
		for (int j = 0; j < k; j++) {
			int from = j < k / 2 ? 2 * j : 2 * (j - k / 2) + 1; /* megac's row of HF's row j */
			if (to_hf)
				memcpy(h + (size_t)j * cols, tmp + (size_t)from * cols, (size_t)cols * sizeof(float));
			else
				memcpy(h + (size_t)from * cols, tmp + (size_t)j * cols, (size_t)cols * sizeof(float));
		}
	}
	free(tmp);
}

static void export_plain(const struct gpt_config *c, const struct hf_tensor *t, const float *src, float *out);

/* The RoPE rows of every block of a DeepSeek-V3 tensor regrouped as
 * regroup_pairs does (hf_tensor.mla_rope). */
static void regroup_mla(float *x, const struct hf_tensor *t, bool to_hf)
{
	int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
	for (int64_t r0 = 0; r0 + t->mla_block <= t->shape[0]; r0 += t->mla_block)
		regroup_pairs(x + (r0 + t->mla_off) * cols, t->mla_rope, cols, t->mla_rope, to_hf);
}

void hf_export(const struct gpt_config *c, const struct hf_tensor *t, const float *src, float *out)
{
	export_plain(c, t, src, out);
	if (t->rope_pairs)
		regroup_pairs(out, t->shape[0], t->ndim == 2 ? t->shape[1] : 1, c->k, true);
	if (t->mla_rope)
		regroup_mla(out, t, true);
}

static void export_plain(const struct gpt_config *c, const struct hf_tensor *t, const float *src, float *out)
{
	int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
	size_t n = hf_numel(t);
	switch (t->x) {
	case HF_COPY:
	case HF_UNSQUEEZE:
	case HF_VOCAB: /* the first V rows */
		memcpy(out, src, n * sizeof(float));
		return;
	case HF_ROWS:
		memcpy(out, src + t->r0 * cols, n * sizeof(float));
		return;
	case HF_TRANSPOSE:
		transpose(src, t->shape[1], t->shape[0], out);
		return;
	case HF_QKV_Q:
	case HF_QKV_K:
	case HF_QKV_V:
		qkv_move(c, t->x - HF_QKV_Q, cols, src, out, 1);
		return;
	case HF_C_ATTN: {
		/* [Q; K; V] of all heads, then transposed for the weight */
		int64_t w = t->ndim == 2 ? c->h : 1, third = (int64_t)c->a * c->k * w;
		float *qkv = t->ndim == 2 ? xmalloc(n * sizeof(float)) : out;
		for (int part = 0; part < 3; part++)
			qkv_move(c, part, w, src, qkv + part * third, 1);
		if (t->ndim == 2) {
			transpose(qkv, 3 * (int64_t)c->a * c->k, c->h, out);
			free(qkv);
		}
		return;
	}
	}
}

static void import_plain(const struct gpt_config *c, const struct hf_tensor *t, const float *in, float *dst);

void hf_import(const struct gpt_config *c, const struct hf_tensor *t, const float *in, float *dst)
{
	if (!t->rope_pairs && !t->mla_rope) {
		import_plain(c, t, in, dst);
		return;
	}
	int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
	size_t n = (size_t)(t->shape[0] * cols);
	float *tmp = xmalloc(n * sizeof(float));
	memcpy(tmp, in, n * sizeof(float));
	if (t->mla_rope)
		regroup_mla(tmp, t, false);
	else
		regroup_pairs(tmp, t->shape[0], cols, c->k, false);
	import_plain(c, t, tmp, dst);
	free(tmp);
}

static void import_plain(const struct gpt_config *c, const struct hf_tensor *t, const float *in, float *dst)
{
	int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
	size_t n = hf_numel(t);
	switch (t->x) {
	case HF_COPY:
	case HF_UNSQUEEZE:
	case HF_VOCAB:
		memcpy(dst, in, n * sizeof(float));
		return;
	case HF_ROWS:
		memcpy(dst + t->r0 * cols, in, n * sizeof(float));
		return;
	case HF_TRANSPOSE:
		transpose(in, t->shape[0], t->shape[1], dst);
		return;
	case HF_QKV_Q:
	case HF_QKV_K:
	case HF_QKV_V:
		qkv_move(c, t->x - HF_QKV_Q, cols, in, dst, 0);
		return;
	case HF_C_ATTN: {
		int64_t w = t->ndim == 2 ? c->h : 1, third = (int64_t)c->a * c->k * w;
		float *qkv = (float *)in, *tmp = NULL;
		if (t->ndim == 2) {
			tmp = xmalloc(n * sizeof(float));
			transpose(in, c->h, 3 * (int64_t)c->a * c->k, tmp);
			qkv = tmp;
		}
		for (int part = 0; part < 3; part++)
			qkv_move(c, part, w, qkv + part * third, dst, 0);
		free(tmp);
		return;
	}
	}
}

/* A float32 setting as the decimal a user wrote (1e-05, not 9.99999974e-06). */
static json_t *f32(float x)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%.7g", (double)x);
	return json_real(strtod(buf, NULL));
}

static const char *torch_dtype(enum ckpt_dtype dt)
{
	return dt == CKPT_BF16 ? "bfloat16" : dt == CKPT_F16 ? "float16" : "float32";
}

/* Unknown ids are written as null: left out, transformers would put its
 * class defaults there (50256 for GPT-2, 1 and 2 for Llama). */
static void set_ids(json_t *o, int64_t bos, int64_t eos)
{
	json_object_set_new(o, "bos_token_id", bos >= 0 ? json_integer(bos) : json_null());
	json_object_set_new(o, "eos_token_id", eos >= 0 ? json_integer(eos) : json_null());
}

static char *dump(json_t *o)
{
	char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(o);
	if (!s)
		die("out of memory writing JSON");
	return s;
}

/* YaRN as transformers 4.49's _compute_yarn_parameters reads it: the
 * correction range comes from max_position_embeddings (Megatron's
 * --yarn-original-max-position-embeddings, so o's value is replaced; the
 * key original_max_position_embeddings is written too, for later
 * versions, which read it), the rounding is always on, and the
 * concentration factor is attention_factor, written only where it is not
 * transformers' default 0.1 ln(factor) + 1 (which Megatron's --mscale 1
 * and --mscale-all-dim 0 give), as the float both multiply cos and sin by. */
static json_t *yarn_json(const struct gpt_config *c, json_t *o)
{
	const struct rope_yarn *y = &c->yarn_cfg;
	json_t *rs = json_object();
	json_object_set_new(o, "max_position_embeddings", json_integer(y->original_max_positions));
	json_object_set_new(rs, "rope_type", json_string("yarn"));
	json_object_set_new(rs, "factor", json_real(y->factor));
	json_object_set_new(rs, "original_max_position_embeddings", json_integer(y->original_max_positions));
	json_object_set_new(rs, "beta_fast", json_real(y->beta_fast));
	json_object_set_new(rs, "beta_slow", json_real(y->beta_slow));
	double m = rope_yarn_concentration(y);
	if (m != 0.1 * log(y->factor) + 1.0) /* cos and sin take it as a float: its shortest decimal */
		json_object_set_new(rs, "attention_factor", f32((float)m));
	return rs;
}

/* DeepseekV3Config's keys (transformers 4.53). With YaRN, transformers
 * takes the factor as max_position_embeddings over
 * original_max_position_embeddings (4096, as Megatron's MLA), so the first
 * is written as factor x 4096 rather than megac's --max-position-embeddings
 * (which an MLA model, with RoPE only, does not use otherwise). Without
 * MoE layers: first_k_dense_replace is the layer count and the experts'
 * keys are placeholders no layer reads. */
static void deepseek_v3_json(const struct gpt_config *c, json_t *o)
{
	bool moe = c->E > 0;
	int K = moe ? first_moe_layer(c) : c->L;
	const struct rope_yarn *y = &c->yarn_cfg;
	json_object_set_new(o, "model_type", json_string("deepseek_v3"));
	json_object_set_new(o, "vocab_size", json_integer(c->V));
	json_object_set_new(o, "hidden_size", json_integer(c->h));
	json_object_set_new(o, "intermediate_size", json_integer(c->f));
	json_object_set_new(o, "moe_intermediate_size", json_integer(moe ? c->moe_f : c->f));
	json_object_set_new(o, "num_hidden_layers", json_integer(c->L));
	json_object_set_new(o, "num_attention_heads", json_integer(c->a));
	json_object_set_new(o, "num_key_value_heads", json_integer(c->a));
	json_object_set_new(o, "n_shared_experts", json_integer(moe ? c->shared_f / c->moe_f : 1));
	json_object_set_new(o, "n_routed_experts", json_integer(moe ? c->E : 1));
	json_object_set_new(o, "routed_scaling_factor", json_real(moe && c->router.scale > 0 ? c->router.scale : 1.0));
	json_object_set_new(o, "kv_lora_rank", json_integer(c->kv_lora));
	json_object_set_new(o, "q_lora_rank", json_integer(c->q_lora));
	json_object_set_new(o, "qk_rope_head_dim", json_integer(c->qk_pos));
	json_object_set_new(o, "v_head_dim", json_integer(c->v_head));
	json_object_set_new(o, "qk_nope_head_dim", json_integer(c->qk_head));
	json_object_set_new(o, "head_dim", json_integer(c->qk_pos)); /* what DeepseekV3Config sets: the RoPE's */
	bool groups = moe && c->router.group_topk > 0;
	json_object_set_new(o, "n_group", json_integer(groups ? c->router.groups : 1));
	json_object_set_new(o, "topk_group", json_integer(groups ? c->router.group_topk : 1));
	json_object_set_new(o, "num_experts_per_tok", json_integer(moe ? c->router.k : 1));
	json_object_set_new(o, "first_k_dense_replace", json_integer(K));
	json_object_set_new(o, "norm_topk_prob", json_boolean(moe && c->router.k > 1));
	json_object_set_new(o, "hidden_act", json_string("silu"));
	json_object_set_new(o, "max_position_embeddings",
			    json_integer(c->mla_yarn ? (int64_t)(y->factor * y->original_max_positions) : c->P));
	json_object_set_new(o, "rms_norm_eps", f32(c->eps));
	json_object_set_new(o, "rope_theta", f32(c->rotary_base));
	json_t *rs = json_null();
	if (c->mla_yarn) {
		rs = json_object();
		json_object_set_new(rs, "rope_type", json_string("yarn"));
		json_object_set_new(rs, "factor", json_real(y->factor));
		json_object_set_new(rs, "original_max_position_embeddings", json_integer(y->original_max_positions));
		json_object_set_new(rs, "beta_fast", json_real(y->beta_fast));
		json_object_set_new(rs, "beta_slow", json_real(y->beta_slow));
		json_object_set_new(rs, "mscale", json_real(y->mscale));
		json_object_set_new(rs, "mscale_all_dim", json_real(y->mscale_all_dim));
	}
	json_object_set_new(o, "rope_scaling", rs);
	json_object_set_new(o, "rope_interleave", json_true());
	json_object_set_new(o, "attention_bias", json_false());
	json_object_set_new(o, "attention_dropout", f32(c->attention_dropout));
	json_object_set_new(o, "num_nextn_predict_layers", json_integer(0));
}

/* Mamba2Config's keys (transformers 4.49) for megac's mixer: 4 taps, a
 * conv bias, no linear biases, SiLU, RMSNorm; chunk_size megac's (a
 * rounding matter only). time_step_limit is left out, so that it is
 * Mamba2Config's default (0, inf): JSON has no infinity. pad_token_id is
 * null rather than the class's default 1, a real token. */
static void mamba2_json(const struct gpt_config *c, json_t *o)
{
	json_object_set_new(o, "model_type", json_string("mamba2"));
	json_object_set_new(o, "vocab_size", json_integer(c->V));
	json_object_set_new(o, "hidden_size", json_integer(c->h));
	json_object_set_new(o, "num_hidden_layers", json_integer(c->L));
	json_object_set_new(o, "expand", json_integer(gpt_mamba_inner(c) / c->h));
	json_object_set_new(o, "num_heads", json_integer(c->mamba_H));
	json_object_set_new(o, "head_dim", json_integer(c->mamba_P));
	json_object_set_new(o, "n_groups", json_integer(c->mamba_G));
	json_object_set_new(o, "state_size", json_integer(c->mamba_N));
	json_object_set_new(o, "conv_kernel", json_integer(c->mamba_W));
	json_object_set_new(o, "chunk_size", json_integer(c->mamba_chunk));
	json_object_set_new(o, "layer_norm_epsilon", f32(c->eps));
	json_object_set_new(o, "hidden_act", json_string("silu"));
	json_object_set_new(o, "rms_norm", json_true());
	json_object_set_new(o, "use_bias", json_false());
	json_object_set_new(o, "use_conv_bias", json_true());
	json_object_set_new(o, "residual_in_fp32", json_true());
	json_object_set_new(o, "pad_token_id", json_null());
}

char *hf_config_json(const struct gpt_config *c, enum hf_arch arch, enum ckpt_dtype dt, int64_t bos, int64_t eos)
{
	json_t *o = json_object();
	json_t *archs = json_array();
	json_array_append_new(archs, json_string(hf_arch_class(arch)));
	json_object_set_new(o, "architectures", archs);
	if (arch == HF_DEEPSEEK_V3 || arch == HF_DEEPSEEK_V3_HALVES) {
		deepseek_v3_json(c, o);
	} else if (arch == HF_MAMBA2) {
		mamba2_json(c, o);
	} else if (arch == HF_GPT2) {
		json_object_set_new(o, "model_type", json_string("gpt2"));
		json_object_set_new(o, "vocab_size", json_integer(c->V));
		json_object_set_new(o, "n_positions", json_integer(c->P));
		json_object_set_new(o, "n_embd", json_integer(c->h));
		json_object_set_new(o, "n_layer", json_integer(c->L));
		json_object_set_new(o, "n_head", json_integer(c->a));
		json_object_set_new(o, "n_inner", json_integer(c->f));
		json_object_set_new(o, "activation_function",
				    json_string(c->gelu == KOPS_GELU_TANH ? "gelu_new" : "gelu"));
		json_object_set_new(o, "layer_norm_epsilon", f32(c->eps));
		json_object_set_new(o, "resid_pdrop", f32(c->hidden_dropout));
		json_object_set_new(o, "embd_pdrop", f32(c->hidden_dropout));
		json_object_set_new(o, "attn_pdrop", f32(c->attention_dropout));
	} else {
		bool moe = arch == HF_MIXTRAL, qwen_moe = arch == HF_QWEN2_MOE || arch == HF_QWEN3_MOE;
		bool qwen = arch == HF_QWEN2 || arch == HF_QWEN3 || qwen_moe;
		json_object_set_new(o, "model_type", json_string(moe ? "mixtral" : arch == HF_QWEN2 ? "qwen2" :
									   arch == HF_QWEN3 ? "qwen3" :
									   arch == HF_QWEN2_MOE ? "qwen2_moe" :
									   arch == HF_QWEN3_MOE ? "qwen3_moe" :
									   arch == HF_MISTRAL ? "mistral" : "llama"));
		json_object_set_new(o, "vocab_size", json_integer(c->V));
		json_object_set_new(o, "hidden_size", json_integer(c->h));
		json_object_set_new(o, "intermediate_size", json_integer(moe ? c->moe_f : c->f));
		json_object_set_new(o, "num_hidden_layers", json_integer(c->L));
		json_object_set_new(o, "num_attention_heads", json_integer(c->a));
		json_object_set_new(o, "num_key_value_heads", json_integer(c->g));
		if (arch != HF_QWEN2_MOE) /* Qwen2-MoE's head size is hidden / heads */
			json_object_set_new(o, "head_dim", json_integer(c->k));
		json_object_set_new(o, "hidden_act", json_string("silu"));
		json_object_set_new(o, "max_position_embeddings", json_integer(c->P));
		json_object_set_new(o, "rms_norm_eps", f32(c->eps));
		json_object_set_new(o, "rope_theta", f32(c->rotary_base));
		if (moe || arch == HF_MISTRAL) /* HF's window holds the query's own key: megac's L + 1 */
			json_object_set_new(o, "sliding_window", c->swa && c->window >= 0 ? json_integer(c->window + 1)
											  : json_null());
		if (moe) {
			json_object_set_new(o, "num_local_experts", json_integer(c->E));
			json_object_set_new(o, "num_experts_per_tok", json_integer(c->router.k));
			json_object_set_new(o, "router_aux_loss_coef", f32((float)c->router.aux_coeff));
			json_object_set_new(o, "router_jitter_noise", json_real(0.0));
			json_object_set_new(o, "output_router_logits", json_false());
		} else if (arch != HF_MISTRAL) {
			if (qwen_moe) { /* the dense layers listed, the rest MoE */
				json_t *dense = json_array();
				for (int l = 0; l < c->L; l++)
					if (!c->moe_layer[l])
						json_array_append_new(dense, json_integer(l));
				json_object_set_new(o, "decoder_sparse_step", json_integer(1));
				json_object_set_new(o, "mlp_only_layers", dense);
				json_object_set_new(o, "num_experts", json_integer(c->E));
				json_object_set_new(o, "num_experts_per_tok", json_integer(c->router.k));
				json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_f));
				if (arch == HF_QWEN2_MOE)
					json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_f));
				json_object_set_new(o, "norm_topk_prob", json_boolean(!c->router.pre_softmax));
				json_object_set_new(o, "router_aux_loss_coef", f32((float)c->router.aux_coeff));
				json_object_set_new(o, "output_router_logits", json_false());
			}
			json_t *rs = json_null();
			if (c->yarn)
				rs = yarn_json(c, o);
			if (c->rope_scaling) { /* Megatron's fixed constants beside the factor */
				struct rope_scaling sc = rope_scaling_llama3(c->rope_scaling_factor);
				rs = json_object();
				json_object_set_new(rs, "factor", f32(sc.factor));
				json_object_set_new(rs, "low_freq_factor", f32(sc.low_freq_factor));
				json_object_set_new(rs, "high_freq_factor", f32(sc.high_freq_factor));
				json_object_set_new(rs, "original_max_position_embeddings",
						    json_integer(sc.original_max_positions));
				json_object_set_new(rs, "rope_type", json_string("llama3"));
			}
			json_object_set_new(o, "rope_scaling", rs);
			if (arch != HF_QWEN2 && arch != HF_QWEN2_MOE)
				json_object_set_new(o, "attention_bias", json_false());
			if (qwen) { /* full attention in every layer */
				json_object_set_new(o, "use_sliding_window", json_false());
				json_object_set_new(o, "sliding_window", json_null());
				json_object_set_new(o, "max_window_layers", json_integer(c->L));
			} else {
				json_object_set_new(o, "mlp_bias", json_false());
			}
		}
		json_object_set_new(o, "attention_dropout", f32(c->attention_dropout));
	}
	json_object_set_new(o, "initializer_range", f32(c->init_std));
	json_object_set_new(o, "tie_word_embeddings", json_boolean(!c->untied));
	set_ids(o, bos, eos);
	json_object_set_new(o, "torch_dtype", json_string(torch_dtype(dt)));
	json_object_set_new(o, "use_cache", json_true());
	return dump(o);
}

char *hf_generation_config_json(int64_t bos, int64_t eos)
{
	json_t *o = json_object();
	json_object_set_new(o, "_from_model_config", json_true());
	set_ids(o, bos, eos);
	return dump(o);
}

/* ---- reading config.json ---- */

struct cfg_reader {
	json_t *o;
	const char *path;
	int failed;
};

static int64_t cfg_int(struct cfg_reader *r, const char *key, int64_t def, int64_t lo)
{
	json_t *v = json_object_get(r->o, key);
	if (!v || json_is_null(v)) {
		if (def == INT64_MIN) {
			r->failed = error("'%s': \"%s\" is missing (an integer)", r->path, key);
			return lo;
		}
		return def;
	}
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > INT32_MAX) {
		r->failed = error("'%s': \"%s\" must be an integer of at least %lld", r->path, key, (long long)lo);
		return lo;
	}
	return json_integer_value(v);
}

static double cfg_num(struct cfg_reader *r, const char *key, double def)
{
	json_t *v = json_object_get(r->o, key);
	if (!v || json_is_null(v))
		return def;
	if (!json_is_number(v)) {
		r->failed = error("'%s': \"%s\" must be a number", r->path, key);
		return def;
	}
	return json_number_value(v);
}

static bool cfg_bool(struct cfg_reader *r, const char *key, bool def)
{
	json_t *v = json_object_get(r->o, key);
	if (!v || json_is_null(v))
		return def;
	if (!json_is_boolean(v)) {
		r->failed = error("'%s': \"%s\" must be true or false", r->path, key);
		return def;
	}
	return json_is_true(v);
}

static const char *cfg_str(struct cfg_reader *r, const char *key, const char *def)
{
	json_t *v = json_object_get(r->o, key);
	if (!v || json_is_null(v))
		return def;
	if (!json_is_string(v)) {
		r->failed = error("'%s': \"%s\" must be a string", r->path, key);
		return def;
	}
	return json_string_value(v);
}

#define REQUIRED INT64_MIN

static void read_gpt2(struct cfg_reader *r, struct gpt_config *c)
{
	c->h = (int)cfg_int(r, "n_embd", REQUIRED, 1);
	c->L = (int)cfg_int(r, "n_layer", REQUIRED, 1);
	c->a = (int)cfg_int(r, "n_head", REQUIRED, 1);
	c->g = c->a;
	c->P = (int)cfg_int(r, "n_positions", REQUIRED, 1);
	c->f = (int)cfg_int(r, "n_inner", 4 * (int64_t)c->h, 1);
	const char *act = cfg_str(r, "activation_function", "gelu_new");
	if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_fast"))
		c->gelu = KOPS_GELU_TANH;
	else if (!strcmp(act, "gelu"))
		c->gelu = KOPS_GELU_ERF;
	else
		r->failed = error("'%s': activation_function \"%s\": megac has GELU, exact (\"gelu\") or with tanh "
				  "(\"gelu_new\")", r->path, act);
	if (!cfg_bool(r, "scale_attn_weights", true) || cfg_bool(r, "scale_attn_by_inverse_layer_idx", false))
		r->failed = error("'%s': scale_attn_weights false or scale_attn_by_inverse_layer_idx: megac scales "
				  "attention by 1/sqrt(head size) only", r->path);
	c->eps = (float)cfg_num(r, "layer_norm_epsilon", 1e-5);
	c->hidden_dropout = (float)cfg_num(r, "resid_pdrop", 0.1);
	c->attention_dropout = (float)cfg_num(r, "attn_pdrop", 0.1);
	c->bias = true;
	c->untied = !cfg_bool(r, "tie_word_embeddings", true);
	if (c->h % c->a)
		r->failed = error("'%s': n_embd %d is not divisible by n_head %d", r->path, c->h, c->a);
	c->k = c->h / c->a;
}

/* The first key of object s not among known[0..n), or NULL. */
static const char *unknown_key(json_t *s, const char *const *known, size_t n)
{
	const char *key;
	json_t *v;
	json_object_foreach(s, key, v) {
		size_t i = 0;
		while (i < n && strcmp(known[i], key))
			i++;
		if (i == n)
			return key;
	}
	return NULL;
}

/* rope_scaling of rope_type "yarn", as transformers 4.49's
 * _compute_yarn_parameters uses it: factor (required), attention_factor
 * (default 0.1 ln(factor) + 1), beta_fast and beta_slow (default, also for
 * 0, 32 and 1), the correction range from max_position_embeddings (c->P,
 * read already) and always rounded. Megatron's concentration factor is
 * (0.1 mscale ln(factor) + 1) / (0.1 mscale_all_dim ln(factor) + 1):
 * attention_factor A is --mscale (A - 1) / (0.1 ln(factor)) with
 * --mscale-all-dim 0. Keys 4.49 would not read, or read differently from
 * later versions, are refused by name. */
static void read_yarn(struct cfg_reader *r, json_t *s, struct gpt_config *c)
{
	static const char *const known[] = { "rope_type", "type", "factor", "attention_factor", "beta_fast",
					     "beta_slow", "original_max_position_embeddings" };
	const char *key = unknown_key(s, known, sizeof(known) / sizeof(known[0]));
	if (key) {
		r->failed = error("'%s': rope_scaling yarn: the key \"%s\" is not among those transformers "
				  "4.49's YaRN reads (factor, attention_factor, beta_fast, beta_slow); megac "
				  "would not know what it means", r->path, key);
		return;
	}
	struct cfg_reader sr = { s, r->path, 0 };
	double factor = cfg_num(&sr, "factor", -1), attn = cfg_num(&sr, "attention_factor", -1);
	double fast = cfg_num(&sr, "beta_fast", 0), slow = cfg_num(&sr, "beta_slow", 0);
	int64_t orig = cfg_int(&sr, "original_max_position_embeddings", c->P, 1);
	if (sr.failed) {
		r->failed = -1;
		return;
	}
	if (!(factor >= 1)) {
		r->failed = error("'%s': rope_scaling yarn needs factor, a number of at least 1 (got %g)", r->path,
				  factor);
		return;
	}
	if (orig != c->P) {
		r->failed = error("'%s': rope_scaling yarn: original_max_position_embeddings %lld differs from "
				  "max_position_embeddings %d; transformers 4.49 takes YaRN's correction range from "
				  "max_position_embeddings and later versions from original_max_position_embeddings, "
				  "so the model's numbers are ambiguous", r->path, (long long)orig, c->P);
		return;
	}
	struct rope_yarn *y = &c->yarn_cfg;
	*y = rope_yarn_defaults();
	y->factor = factor;
	y->original_max_positions = c->P;
	y->beta_fast = fast != 0 ? fast : 32; /* transformers: `or 32` */
	y->beta_slow = slow != 0 ? slow : 1;
	bool has_attn = json_is_number(json_object_get(s, "attention_factor"));
	if (has_attn && !(attn > 0)) {
		r->failed = error("'%s': rope_scaling yarn: attention_factor must be positive (got %g)", r->path, attn);
		return;
	}
	if (has_attn && attn != 0.1 * log(factor) + 1.0) {
		if (factor == 1 && attn != 1) {
			r->failed = error("'%s': rope_scaling yarn: attention_factor %g with factor 1: Megatron's YaRN "
					  "scales cos and sin by 1 when the factor is 1", r->path, attn);
			return;
		}
		if (factor > 1) { /* the nearest mscale whose factor is attn again, so an export writes attn back */
			double m = (attn - 1) / (0.1 * log(factor)), best = m;
			for (int step = 0; step < 8 && 0.1 * best * log(factor) + 1.0 != attn; step++) {
				double up = nextafter(m, INFINITY), down = nextafter(m, -INFINITY);
				for (int i = 0; i < step; i++)
					up = nextafter(up, INFINITY), down = nextafter(down, -INFINITY);
				best = 0.1 * up * log(factor) + 1.0 == attn ? up : 0.1 * down * log(factor) + 1.0 == attn ? down : m;
			}
			y->mscale = best;
		}
	}
	if (rope_yarn_check(y, "rope_scaling factor", "max_position_embeddings", "rope_scaling beta_fast",
			    "rope_scaling beta_slow") < 0) {
		r->failed = error("'%s': rope_scaling yarn cannot be used", r->path);
		return;
	}
	c->yarn = true;
}

/* rope_scaling: none, or Llama 3.x's (rope_type "llama3") with Megatron's
 * fixed constants (--use-rope-scaling, --rope-scaling-factor) */
static void read_rope_scaling(struct cfg_reader *r, struct gpt_config *c)
{
	json_t *s = json_object_get(r->o, "rope_scaling");
	if (!s || json_is_null(s))
		return;
	const char *type = json_is_object(s) ? json_string_value(json_object_get(s, "rope_type")) : NULL;
	if (!type && json_is_object(s))
		type = json_string_value(json_object_get(s, "type")); /* the older key */
	if (type && !strcmp(type, "yarn")) {
		read_yarn(r, s, c);
		return;
	}
	if (!type || strcmp(type, "llama3")) {
		r->failed = error("'%s': rope_scaling of rope_type \"%s\": megac has Llama 3.x's (\"llama3\", "
				  "--use-rope-scaling) and YaRN (\"yarn\", --position-embedding-type yarn) only", r->path,
				  type ? type : "(none)");
		return;
	}
	struct cfg_reader sr = { s, r->path, 0 };
	struct rope_scaling want = rope_scaling_llama3(8);
	double factor = cfg_num(&sr, "factor", -1), low = cfg_num(&sr, "low_freq_factor", -1);
	double high = cfg_num(&sr, "high_freq_factor", -1);
	int64_t orig = cfg_int(&sr, "original_max_position_embeddings", -1, -1);
	if (sr.failed || factor < 1 || low != want.low_freq_factor || high != want.high_freq_factor ||
	    orig != want.original_max_positions) {
		r->failed = error("'%s': rope_scaling llama3 needs factor >= 1, low_freq_factor %g, high_freq_factor %g "
				  "and original_max_position_embeddings %d (Megatron's fixed constants); this one has "
				  "%g, %g, %g and %lld", r->path, (double)want.low_freq_factor,
				  (double)want.high_freq_factor, want.original_max_positions, factor, low, high,
				  (long long)orig);
		return;
	}
	c->rope_scaling = true;
	c->rope_scaling_factor = (float)factor;
}

/* Qwen2/Qwen3: a window shorter than the context, in the layers from
 * max_window_layers on, is a layer pattern megac does not map */
static void read_window(struct cfg_reader *r, struct gpt_config *c)
{
	int64_t window = cfg_int(r, "sliding_window", 0, 0);
	if (cfg_bool(r, "use_sliding_window", false) && window > 0 && window < c->P)
		r->failed = error("'%s': use_sliding_window with sliding_window %lld shorter than "
				  "max_position_embeddings %d: Qwen's per-layer windows (max_window_layers) are not "
				  "mapped to megac's --window-size yet", r->path, (long long)window, c->P);
}

/* Mistral and Mixtral: sliding_window W (null: none) lets a query see
 * itself and the W - 1 keys before it (transformers' mask), which is
 * Megatron's --window-size W-1,0 */
static void read_mistral_window(struct cfg_reader *r, struct gpt_config *c)
{
	int64_t window = cfg_int(r, "sliding_window", 0, 1);
	c->swa = window > 0;
	c->window = window > 0 ? (int)(window - 1) : -1;
	c->window_right = c->swa ? 0 : -1;
	c->swa_skip = false;
}

static void read_llama(struct cfg_reader *r, struct gpt_config *c)
{
	c->h = (int)cfg_int(r, "hidden_size", REQUIRED, 1);
	c->f = (int)cfg_int(r, "intermediate_size", REQUIRED, 1);
	c->L = (int)cfg_int(r, "num_hidden_layers", REQUIRED, 1);
	c->a = (int)cfg_int(r, "num_attention_heads", REQUIRED, 1);
	c->g = (int)cfg_int(r, "num_key_value_heads", c->a, 1);
	c->P = (int)cfg_int(r, "max_position_embeddings", REQUIRED, 1);
	c->k = (int)cfg_int(r, "head_dim", c->a > 0 && c->h % c->a == 0 ? c->h / c->a : REQUIRED, 2);
	const char *act = cfg_str(r, "hidden_act", "silu");
	if (strcmp(act, "silu"))
		r->failed = error("'%s': hidden_act \"%s\": megac's SwiGLU uses silu", r->path, act);
	if (cfg_bool(r, "attention_bias", false) || cfg_bool(r, "mlp_bias", false))
		r->failed = error("'%s': attention_bias/mlp_bias: megac's Llama-style models have no linear biases",
				  r->path);
	read_rope_scaling(r, c);
	c->eps = (float)cfg_num(r, "rms_norm_eps", 1e-6);
	double theta = cfg_num(r, "rope_theta", 10000);
	if (theta != floor(theta) || theta < 1)
		r->failed = error("'%s': rope_theta %g: megac's --rotary-base is a whole number", r->path, theta);
	c->rotary_base = (float)theta;
	c->attention_dropout = (float)cfg_num(r, "attention_dropout", 0);
	c->hidden_dropout = 0;
	c->rope = c->rmsnorm = c->swiglu = true;
	c->rot = c->k;
	c->untied = !cfg_bool(r, "tie_word_embeddings", false);
	if (c->g < 1 || c->a % c->g)
		r->failed = error("'%s': num_key_value_heads %d does not divide num_attention_heads %d", r->path, c->g,
				  c->a);
}

/* Mixtral: Llama's keys and the experts; every layer MoE, softmax routing
 * after the top-k, intermediate_size the experts' size (and the dense
 * --ffn-hidden-size, which Megatron's loader sets from it too). */
static void read_mixtral(struct cfg_reader *r, struct gpt_config *c)
{
	read_llama(r, c);
	c->E = (int)cfg_int(r, "num_local_experts", REQUIRED, 1);
	c->router.E = c->E;
	c->router.k = (int)cfg_int(r, "num_experts_per_tok", 2, 1);
	if (c->router.k > c->E)
		r->failed = error("'%s': num_experts_per_tok %d is more than num_local_experts %d", r->path, c->router.k,
				  c->E);
	c->moe_f = c->f;
	c->shared_f = 0;
	if (c->L > GPT_MAX_LAYERS)
		r->failed = error("'%s': num_hidden_layers %d: megac's MoE models have at most %d layers", r->path, c->L,
				  GPT_MAX_LAYERS);
	else
		memset(c->moe_layer, 1, (size_t)c->L);
	c->router.aux_coeff = cfg_num(r, "router_aux_loss_coef", 0.001); /* MixtralConfig's default */
	c->router.lb = c->router.aux_coeff > 0 ? MOE_LB_AUX : MOE_LB_NONE;
	read_mistral_window(r, c);
}

/* Qwen2-MoE's and Qwen3-MoE's experts: num_experts of
 * moe_intermediate_size, num_experts_per_tok (default topk) per token,
 * norm_topk_prob false is --moe-router-pre-softmax; dense layers
 * (intermediate_size) where decoder_sparse_step and mlp_only_layers put
 * them. */
static void read_qwen_experts(struct cfg_reader *r, struct gpt_config *c, int topk)
{
	c->E = (int)cfg_int(r, "num_experts", REQUIRED, 1);
	c->router.E = c->E;
	c->router.k = (int)cfg_int(r, "num_experts_per_tok", topk, 1);
	if (c->router.k > c->E)
		r->failed = error("'%s': num_experts_per_tok %d is more than num_experts %d", r->path, c->router.k, c->E);
	c->moe_f = (int)cfg_int(r, "moe_intermediate_size", REQUIRED, 1);
	c->router.pre_softmax = !cfg_bool(r, "norm_topk_prob", false);
	int64_t step = cfg_int(r, "decoder_sparse_step", 1, 1);
	if (c->L > GPT_MAX_LAYERS) {
		r->failed = error("'%s': num_hidden_layers %d: megac's MoE models have at most %d layers", r->path, c->L,
				  GPT_MAX_LAYERS);
		return;
	}
	for (int l = 0; l < c->L; l++)
		c->moe_layer[l] = (l + 1) % step == 0;
	json_t *only = json_object_get(r->o, "mlp_only_layers");
	if (only && !json_is_null(only)) {
		size_t i;
		json_t *v;
		if (!json_is_array(only))
			r->failed = error("'%s': \"mlp_only_layers\" must be a list of layer numbers", r->path);
		json_array_foreach(only, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->L) {
				r->failed = error("'%s': \"mlp_only_layers\" must be a list of layer numbers below "
						  "num_hidden_layers %d", r->path, c->L);
				break;
			}
			c->moe_layer[json_integer_value(v)] = 0;
		}
	}
	c->router.aux_coeff = cfg_num(r, "router_aux_loss_coef", 0.001); /* Qwen2/3MoeConfig's default */
	c->router.lb = c->router.aux_coeff > 0 ? MOE_LB_AUX : MOE_LB_NONE;
}


/* Qwen2-MoE: Qwen2's keys (head size hidden / heads: Qwen2MoeAttention
 * has no head_dim), the experts and a gated shared expert. */
static void read_qwen2_moe(struct cfg_reader *r, struct gpt_config *c)
{
	read_llama(r, c);
	read_window(r, c);
	c->qkv_bias = true;
	if (c->a > 0 && c->h % c->a)
		r->failed = error("'%s': hidden_size %d is not divisible by num_attention_heads %d", r->path, c->h, c->a);
	else if (c->a > 0)
		c->k = c->rot = c->h / c->a;
	c->shared_f = (int)cfg_int(r, "shared_expert_intermediate_size", REQUIRED, 0);
	if (c->shared_f == 0)
		r->failed = error("'%s': shared_expert_intermediate_size 0: a Qwen2-MoE model without its shared "
				  "expert is not mapped yet", r->path);
	c->shared_gate = true;
	read_qwen_experts(r, c, 4); /* Qwen2MoeConfig's default top-k */
}

/* Qwen3-MoE: Qwen3's keys (q/k norms over head_dim), the experts of
 * Qwen2-MoE without a shared expert. */
static void read_qwen3_moe(struct cfg_reader *r, struct gpt_config *c)
{
	read_llama(r, c);
	read_window(r, c);
	c->qk_norm = true;
	if (json_object_get(r->o, "shared_expert_intermediate_size"))
		r->failed = error("'%s': shared_expert_intermediate_size: Qwen3MoeForCausalLM has no shared expert",
				  r->path);
	read_qwen_experts(r, c, 8); /* Qwen3MoeConfig's default top-k */
}
/* DeepSeek-V3's rope_scaling: none, or YaRN as transformers 4.53 computes
 * it for DeepseekV3ForCausalLM (the factor of the frequencies and of the
 * concentration max_position_embeddings / original_max_position_embeddings,
 * the concentration m(mscale) / m(mscale_all_dim) when both are given, else
 * m(1); the softmax scale m(mscale_all_dim)^2 from the key factor), which
 * is Megatron's MLA YaRN when original_max_position_embeddings is 4096,
 * beta_fast 32 and beta_slow 1 (MLATransformerConfig's fixed values). */
static void read_deepseek_rope(struct cfg_reader *r, struct gpt_config *c)
{
	struct rope_yarn *y = &c->yarn_cfg;
	*y = rope_yarn_defaults();
	json_t *s = json_object_get(r->o, "rope_scaling");
	if (!s || json_is_null(s))
		return;
	const char *type = json_is_object(s) ? json_string_value(json_object_get(s, "rope_type")) : NULL;
	if (!type && json_is_object(s))
		type = json_string_value(json_object_get(s, "type"));
	if (!type || strcmp(type, "yarn")) {
		r->failed = error("'%s': rope_scaling of rope_type \"%s\": megac's multi-latent attention has YaRN "
				  "(\"yarn\") or plain RoPE (rope_scaling null)", r->path, type ? type : "(none)");
		return;
	}
	static const char *const known[] = { "rope_type", "type", "factor", "beta_fast", "beta_slow", "mscale",
					     "mscale_all_dim", "original_max_position_embeddings" };
	const char *key = unknown_key(s, known, sizeof(known) / sizeof(known[0]));
	if (key) {
		r->failed = error("'%s': rope_scaling yarn: the key \"%s\" is not mapped to megac's multi-latent "
				  "attention YaRN (factor, mscale, mscale_all_dim, original_max_position_embeddings "
				  "4096, beta_fast 32, beta_slow 1)", r->path, key);
		return;
	}
	struct cfg_reader sr = { s, r->path, 0 };
	double factor = cfg_num(&sr, "factor", -1), fast = cfg_num(&sr, "beta_fast", 0);
	double slow = cfg_num(&sr, "beta_slow", 0), ms = cfg_num(&sr, "mscale", 0), msa = cfg_num(&sr, "mscale_all_dim", 0);
	int64_t orig = cfg_int(&sr, "original_max_position_embeddings", REQUIRED, 1);
	if (sr.failed) {
		r->failed = -1;
		return;
	}
	fast = fast != 0 ? fast : 32; /* transformers: `or 32` */
	slow = slow != 0 ? slow : 1;
	if (orig != 4096 || fast != 32 || slow != 1) {
		r->failed = error("'%s': rope_scaling yarn with original_max_position_embeddings %lld, beta_fast %g and "
				  "beta_slow %g: Megatron's multi-latent attention (and megac's) fixes them at 4096, 32 "
				  "and 1", r->path, (long long)orig, fast, slow);
		return;
	}
	if (!(factor >= 1) || c->P != factor * (double)orig) {
		r->failed = error("'%s': rope_scaling yarn factor %g with max_position_embeddings %d: transformers "
				  "takes the factor of the frequencies as max_position_embeddings / "
				  "original_max_position_embeddings (%g) and that of the softmax scale from factor; megac "
				  "needs them equal, and at least 1", r->path, factor, c->P, c->P / (double)orig);
		return;
	}
	if (ms != 0 && msa == 0)
		ms = 1; /* transformers then uses m(1) as the concentration, whatever mscale is */
	if (ms == 0 && msa != 0 && factor > 1) {
		r->failed = error("'%s': rope_scaling yarn with mscale_all_dim %g and no mscale: transformers' "
				  "concentration is then 0.1 ln(factor) + 1, which megac's m(mscale) / m(mscale_all_dim) "
				  "cannot give", r->path, msa);
		return;
	}
	y->factor = factor;
	y->mscale = ms != 0 ? ms : 1;
	y->mscale_all_dim = msa;
	if (rope_yarn_check(y, "rope_scaling factor", "original_max_position_embeddings", "rope_scaling beta_fast",
			    "rope_scaling beta_slow") < 0) {
		r->failed = error("'%s': rope_scaling yarn cannot be used", r->path);
		return;
	}
	c->mla_yarn = true;
}

/* DeepseekV3ForCausalLM (transformers 4.53's DeepseekV3Config): see
 * deepseek_v3_ok for what it is in megac's terms. What megac cannot
 * represent is refused by its key. */
static void read_deepseek_v3(struct cfg_reader *r, struct gpt_config *c, enum hf_arch *arch)
{
	c->h = (int)cfg_int(r, "hidden_size", REQUIRED, 1);
	c->f = (int)cfg_int(r, "intermediate_size", REQUIRED, 1);
	c->L = (int)cfg_int(r, "num_hidden_layers", REQUIRED, 1);
	c->a = (int)cfg_int(r, "num_attention_heads", REQUIRED, 1);
	c->P = (int)cfg_int(r, "max_position_embeddings", REQUIRED, 1);
	if (cfg_int(r, "num_key_value_heads", c->a, 1) != c->a)
		r->failed = error("'%s': num_key_value_heads differs from num_attention_heads %d: DeepSeek-V3's "
				  "attention has a key and value per head", r->path, c->a);
	json_t *ql = json_object_get(r->o, "q_lora_rank");
	if (ql && json_is_null(ql))
		r->failed = error("'%s': q_lora_rank null (q_proj, DeepSeek-V2-Lite's shape) with kv_a_layernorm: "
				  "megac's --qk-layernorm puts norms over both a compressed query and the compressed "
				  "key/value; importing q_proj with the key/value norm alone is not in megac yet", r->path);
	c->q_lora = (int)cfg_int(r, "q_lora_rank", 1536, 1);
	c->kv_lora = (int)cfg_int(r, "kv_lora_rank", 512, 1);
	c->qk_head = (int)cfg_int(r, "qk_nope_head_dim", 128, 1);
	c->qk_pos = (int)cfg_int(r, "qk_rope_head_dim", 64, 2);
	c->v_head = (int)cfg_int(r, "v_head_dim", 128, 1);
	if (c->qk_pos % 2)
		r->failed = error("'%s': qk_rope_head_dim %d must be even", r->path, c->qk_pos);
	if (c->v_head > c->qk_head + c->qk_pos)
		r->failed = error("'%s': v_head_dim %d larger than qk_nope_head_dim + qk_rope_head_dim (%d) is not in "
				  "megac yet", r->path, c->v_head, c->qk_head + c->qk_pos);
	c->mla = c->qk_norm = c->rope = c->rmsnorm = c->swiglu = true;
	c->k = c->qk_head + c->qk_pos;
	c->g = c->a;
	c->rot = c->qk_pos;
	const char *act = cfg_str(r, "hidden_act", "silu");
	if (strcmp(act, "silu"))
		r->failed = error("'%s': hidden_act \"%s\": megac's SwiGLU uses silu", r->path, act);
	if (cfg_bool(r, "attention_bias", false))
		r->failed = error("'%s': attention_bias: megac's multi-latent attention has no biases", r->path);
	c->eps = (float)cfg_num(r, "rms_norm_eps", 1e-6);
	if (c->eps != 1e-6f)
		r->failed = error("'%s': rms_norm_eps %g: transformers' DeepSeek-V3 uses it for the hidden-size norms "
				  "and 1e-6 for q_a_layernorm and kv_a_layernorm, megac --norm-epsilon for all of them; "
				  "megac maps rms_norm_eps 1e-6 only", r->path, (double)c->eps);
	double theta = cfg_num(r, "rope_theta", 10000);
	if (theta != floor(theta) || theta < 1)
		r->failed = error("'%s': rope_theta %g: megac's --rotary-base is a whole number", r->path, theta);
	c->rotary_base = (float)theta;
	read_deepseek_rope(r, c);
	*arch = cfg_bool(r, "rope_interleave", true) ? HF_DEEPSEEK_V3 : HF_DEEPSEEK_V3_HALVES;
	c->attention_dropout = (float)cfg_num(r, "attention_dropout", 0);
	c->hidden_dropout = 0;
	c->untied = !cfg_bool(r, "tie_word_embeddings", false);
	/* keys of DeepSeek's own modeling code that transformers' class does not read */
	const char *tm = cfg_str(r, "topk_method", "noaux_tc"), *sf = cfg_str(r, "scoring_func", "sigmoid");
	if (strcmp(tm, "noaux_tc") || strcmp(sf, "sigmoid"))
		r->failed = error("'%s': topk_method \"%s\", scoring_func \"%s\": megac maps DeepSeek-V3's routing "
				  "(\"noaux_tc\", \"sigmoid\") only", r->path, tm, sf);
	if (cfg_int(r, "moe_layer_freq", 1, 1) != 1)
		r->failed = error("'%s': moe_layer_freq other than 1: transformers' DeepSeek-V3 makes every layer from "
				  "first_k_dense_replace on a MoE layer", r->path);
	/* the experts: every layer from first_k_dense_replace on */
	int64_t K = cfg_int(r, "first_k_dense_replace", 3, 0);
	if (c->L > GPT_MAX_LAYERS) {
		r->failed = error("'%s': num_hidden_layers %d: megac's models have at most %d layers here", r->path, c->L,
				  GPT_MAX_LAYERS);
		return;
	}
	if (K >= c->L)
		return; /* all dense: the experts' keys are not read */
	c->E = (int)cfg_int(r, "n_routed_experts", REQUIRED, 1);
	c->router.E = c->E;
	c->router.k = (int)cfg_int(r, "num_experts_per_tok", REQUIRED, 1);
	c->moe_f = (int)cfg_int(r, "moe_intermediate_size", REQUIRED, 1);
	int64_t ns = cfg_int(r, "n_shared_experts", REQUIRED, 0);
	if (ns < 1)
		r->failed = error("'%s': n_shared_experts %lld: megac maps DeepSeek-V3's MoE layers with their shared "
				  "expert (at least one)", r->path, (long long)ns);
	c->shared_f = (int)(ns * c->moe_f);
	if ((int64_t)c->shared_f != ns * c->moe_f)
		r->failed = error("'%s': n_shared_experts %lld x moe_intermediate_size %d is too large", r->path,
				  (long long)ns, c->moe_f);
	for (int l = 0; l < c->L; l++)
		c->moe_layer[l] = l >= K;
	c->router.sigmoid = c->router.expert_bias = true;
	if (c->router.k > c->E)
		r->failed = error("'%s': num_experts_per_tok %d is more than n_routed_experts %d", r->path, c->router.k,
				  c->E);
	if (cfg_bool(r, "norm_topk_prob", true) != (c->router.k > 1))
		r->failed = error("'%s': norm_topk_prob %s with num_experts_per_tok %d: Megatron's sigmoid router "
				  "renormalises the top-k exactly when k > 1", r->path,
				  c->router.k > 1 ? "false" : "true", c->router.k);
	double rsf = cfg_num(r, "routed_scaling_factor", 2.5);
	if (!(rsf > 0))
		r->failed = error("'%s': routed_scaling_factor %g must be positive", r->path, rsf);
	c->router.scale = rsf != 1 ? rsf : 0;
	int64_t G = cfg_int(r, "n_group", 8, 1), TG = cfg_int(r, "topk_group", 4, 1);
	if (c->E % G || TG > G || c->E / G < 2)
		r->failed = error("'%s': n_group %lld and topk_group %lld do not fit n_routed_experts %d (groups of at "
				  "least 2 experts, topk_group at most n_group)", r->path, (long long)G, (long long)TG,
				  c->E);
	else if (TG < G) { /* with every group kept the limit changes nothing */
		if (c->router.k / TG != 2 || c->router.k > TG * (c->E / G))
			r->failed = error("'%s': num_experts_per_tok %d with topk_group %lld: transformers scores a group "
					  "by its top 2 experts, Megatron by its top num_experts_per_tok / topk_group; "
					  "megac maps them when that is 2", r->path, c->router.k, (long long)TG);
		c->router.groups = (int)G;
		c->router.group_topk = (int)TG;
	}
	c->router.aux_coeff = 0; /* DeepSeek-V3 trains without an aux loss (the bias balances) */
	c->router.lb = MOE_LB_NONE;
}

/* Mamba2ForCausalLM (transformers 4.49's Mamba2Config; docs/mamba.md):
 * a hybrid model of num_hidden_layers Mamba layers without positions.
 * What megac's mixer (Megatron's) cannot represent is refused by its key:
 * linear biases, no conv bias, another kernel width, a dt clamp, another
 * activation, LayerNorm, an epsilon other than the gated norm's 1e-5, a
 * head layout transformers itself would not run. The init-only keys
 * (time_step_min/max/floor, time_step_rank, rescale_prenorm_residual) and
 * chunk_size (a matter of rounding) change nothing; residual_in_fp32 does
 * not either, megac's residual being fp32. */
static void read_mamba2(struct cfg_reader *r, struct gpt_config *c)
{
	c->h = (int)cfg_int(r, "hidden_size", REQUIRED, 1);
	c->L = (int)cfg_int(r, "num_hidden_layers", REQUIRED, 1);
	c->mamba_N = (int)cfg_int(r, "state_size", 128, 1);
	c->mamba_H = (int)cfg_int(r, "num_heads", 128, 1);
	c->mamba_P = (int)cfg_int(r, "head_dim", 64, 1);
	c->mamba_G = (int)cfg_int(r, "n_groups", 8, 1);
	double expand = cfg_num(r, "expand", 2);
	int64_t W = cfg_int(r, "conv_kernel", 4, 1);
	cfg_int(r, "chunk_size", 256, 1);
	c->eps = (float)cfg_num(r, "layer_norm_epsilon", 1e-5);
	c->untied = !cfg_bool(r, "tie_word_embeddings", false); /* Mamba2Config's default */
	const char *act = cfg_str(r, "hidden_act", "silu");
	cfg_bool(r, "residual_in_fp32", true);
	if (r->failed)
		return;
	if (c->L > GPT_MAX_LAYERS)
		r->failed = error("'%s': num_hidden_layers %d: megac's hybrid models have at most %d layers", r->path, c->L,
				  GPT_MAX_LAYERS);
	if (cfg_bool(r, "use_bias", false))
		r->failed = error("'%s': use_bias true: Megatron's Mamba mixer (and megac's) has no in_proj/out_proj bias",
				  r->path);
	if (!cfg_bool(r, "use_conv_bias", true))
		r->failed = error("'%s': use_conv_bias false: Megatron's Mamba mixer (and megac's) always has a "
				  "conv1d bias", r->path);
	if (W != 4)
		r->failed = error("'%s': conv_kernel %lld: megac's Mamba mixer convolves over 4 steps (Megatron's "
				  "d_conv)", r->path, (long long)W);
	if (strcmp(act, "silu") && strcmp(act, "swish"))
		r->failed = error("'%s': hidden_act \"%s\": Megatron's Mamba mixer (and megac's) uses silu after the "
				  "convolution", r->path, act);
	if (!cfg_bool(r, "rms_norm", true))
		r->failed = error("'%s': rms_norm false: transformers 4.49 still uses RMSNorm there and mamba_ssm a "
				  "LayerNorm and no gated norm; megac maps rms_norm true only", r->path);
	if (c->eps != 1e-5f)
		r->failed = error("'%s': layer_norm_epsilon %g: transformers uses it for the mixer's gated norm too, "
				  "which Megatron (and megac) fixes at 1e-5; megac maps 1e-5 only", r->path, (double)c->eps);
	json_t *lim = json_object_get(r->o, "time_step_limit");
	if (lim && !json_is_null(lim)) {
		json_t *hi = json_array_get(lim, 1);
		bool none = json_is_array(lim) && json_array_size(lim) == 2 && json_is_number(json_array_get(lim, 0)) &&
			    json_number_value(json_array_get(lim, 0)) == 0 && json_is_string(hi) &&
			    !strcmp(json_string_value(hi), "Infinity");
		if (!none)
			r->failed = error("'%s': time_step_limit other than [0.0, Infinity]: Megatron's Mamba mixer (and "
					  "megac's) does not clamp dt", r->path);
	}
	int64_t di = (int64_t)(expand * c->h); /* transformers' int(expand * hidden_size) */
	if (!(expand > 0) || (int64_t)c->mamba_H * c->mamba_P != di)
		r->failed = error("'%s': num_heads %d x head_dim %d differs from int(expand %g x hidden_size %d) = %lld, "
				  "transformers' d_inner (its mixer would not run)", r->path, c->mamba_H, c->mamba_P,
				  expand, c->h, (long long)di);
	if (c->mamba_H % c->mamba_G)
		r->failed = error("'%s': num_heads %d is not a multiple of n_groups %d", r->path, c->mamba_H, c->mamba_G);
	if (di + 2 * (int64_t)c->mamba_G * c->mamba_N > (1 << 24))
		r->failed = error("'%s': the Mamba mixer's widths (num_heads x head_dim, n_groups x state_size) are too "
				  "large", r->path);
	if (r->failed)
		return;
	c->hybrid = c->is_hybrid = true;
	memset(c->layer_kind, GPT_LAYER_MAMBA, (size_t)c->L);
	c->mamba_W = 4;
	c->mamba_chunk = 128;
	c->nopos = c->rmsnorm = true;
	/* the attention and MLP shapes, which Mamba layers do not use (and the
	 * GELU train takes for them without biases) */
	c->a = c->g = 1;
	c->k = c->h;
	c->f = 4 * c->h;
	c->gelu = KOPS_GELU_ERF;
	c->P = HF_MAMBA2_POSITIONS;
	c->hidden_dropout = c->attention_dropout = 0;
	if (c->mamba_G > 1)
		warning("'%s': n_groups %d: megac computes Megatron's (and mamba_ssm's) mixer, which normalises the gated "
			"output per group and gives head h the B and C of group h / %d; transformers 4.49 normalises over "
			"all of d_inner, and its CPU forward without the cache takes group h mod %d, so its logits differ "
			"from megac's for this model (with one group they agree; docs/mamba.md)",
			r->path, c->mamba_G, c->mamba_H / c->mamba_G, c->mamba_G);
}

/* The text of a JSON file with Python's non-standard literals (Infinity,
 * -Infinity, NaN outside strings) quoted, so that jansson reads them as
 * strings. NULL with jerr->line -1 when the file cannot be read (said). */
static json_t *load_py_json(const char *path, json_error_t *jerr)
{
	struct sbuf in = SBUF_INIT, out = SBUF_INIT;
	if (sbuf_read_file(&in, path) < 0) {
		sbuf_release(&in);
		jerr->line = -1;
		return NULL;
	}
	static const char *const lits[] = { "-Infinity", "Infinity", "NaN" };
	bool str = false, esc = false;
	for (size_t i = 0; i < in.len; i++) {
		char ch = in.buf[i];
		size_t k = 0;
		if (!str)
			for (k = 0; k < 3; k++)
				if (!strncmp(in.buf + i, lits[k], strlen(lits[k])))
					break;
		if (!str && k < 3) {
			sbuf_addf(&out, "\"%s\"", lits[k]);
			i += strlen(lits[k]) - 1;
			continue;
		}
		sbuf_addch(&out, ch);
		if (str && esc)
			esc = false;
		else if (str && ch == '\\')
			esc = true;
		else if (ch == '"')
			str = !str;
	}
	sbuf_release(&in);
	json_t *o = json_loadb(out.buf ? out.buf : "", out.len, 0, jerr);
	sbuf_release(&out);
	return o;
}

int hf_config_read(const char *path, int64_t divisible_by, int64_t tp, struct gpt_config *c, enum hf_arch *arch)
{
	memset(c, 0, sizeof(*c));
	json_error_t jerr;
	json_t *o = load_py_json(path, &jerr);
	if (!o && jerr.line == -1)
		return -1;
	if (!json_is_object(o)) {
		json_decref(o);
		return error("'%s': not a JSON object (%s, line %d)", path, jerr.text, jerr.line);
	}
	struct cfg_reader r = { o, path, 0 };
	json_t *archs = json_object_get(o, "architectures");
	const char *name = json_is_array(archs) && json_array_size(archs) == 1
				   ? json_string_value(json_array_get(archs, 0))
				   : NULL;
	if (name && !strcmp(name, "GPT2LMHeadModel")) {
		*arch = HF_GPT2;
		read_gpt2(&r, c);
	} else if (name && !strcmp(name, "LlamaForCausalLM")) {
		*arch = HF_LLAMA;
		read_llama(&r, c);
	} else if (name && !strcmp(name, "MistralForCausalLM")) {
		*arch = HF_MISTRAL; /* Llama's keys and tensors, and the window */
		read_llama(&r, c);
		read_mistral_window(&r, c);
	} else if (name && !strcmp(name, "MixtralForCausalLM")) {
		*arch = HF_MIXTRAL;
		read_mixtral(&r, c);
	} else if (name && !strcmp(name, "Qwen2ForCausalLM")) {
		*arch = HF_QWEN2; /* Llama's keys; q, k and v always carry biases */
		read_llama(&r, c);
		read_window(&r, c);
		c->qkv_bias = true;
	} else if (name && !strcmp(name, "Qwen2MoeForCausalLM")) {
		*arch = HF_QWEN2_MOE;
		read_qwen2_moe(&r, c);
	} else if (name && !strcmp(name, "Qwen3MoeForCausalLM")) {
		*arch = HF_QWEN3_MOE;
		read_qwen3_moe(&r, c);
	} else if (name && !strcmp(name, "DeepseekV3ForCausalLM")) {
		read_deepseek_v3(&r, c, arch);
	} else if (name && !strcmp(name, "Mamba2ForCausalLM")) {
		*arch = HF_MAMBA2;
		read_mamba2(&r, c);
	} else if (name && !strcmp(name, "Qwen3ForCausalLM")) {
		*arch = HF_QWEN3; /* Llama's keys, q_norm and k_norm over head_dim */
		read_llama(&r, c);
		read_window(&r, c);
		c->qk_norm = true;
	} else {
		error("'%s': architectures %s: ckpt_convert reads GPT2LMHeadModel, LlamaForCausalLM, "
		      "MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, "
		      "Qwen3MoeForCausalLM, DeepseekV3ForCausalLM and Mamba2ForCausalLM",
		      path,
		      name ? name : "(missing, or more than one)");
		json_decref(o); /* name lives in o */
		return -1;
	}
	c->V = (int)cfg_int(&r, "vocab_size", REQUIRED, 1);
	c->init_std = (float)cfg_num(&r, "initializer_range", 0.02);
	json_decref(o);
	if (r.failed)
		return -1;
	c->S = c->P;
	int64_t vp = gpt_padded_vocab(c->V, divisible_by, tp);
	if (vp < 0)
		return -1;
	c->Vp = (int)vp;
	c->recompute = GPT_RECOMPUTE_NONE;
	return 0;
}
