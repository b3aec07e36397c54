/*
 * ckpt_args.c - see ckpt_args.h. The configuration is the JSON train writes
 * on model.h5 (gpt_ckpt.c), whose keys are Megatron's argument names; each
 * is set through the flag table's row of the same name, so a value goes
 * where the command line would have put it.
 */
#include "model/ckpt_args.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"

/* A config key and the flag it sets. force: the checkpoint's value wins
 * over a flag given (Megatron's force=True); invert: the flag is the
 * key's negation (add_bias_linear -> --disable-bias-linear). */
static const struct {
	const char *key, *flag;
	bool force, invert;
} keys[] = {
	{ "num_layers", "--num-layers", false, false },
	{ "hidden_size", "--hidden-size", false, false },
	{ "ffn_hidden_size", "--ffn-hidden-size", false, false },
	{ "seq_length", "--seq-length", false, false },
	{ "num_attention_heads", "--num-attention-heads", false, false },
	{ "kv_channels", "--kv-channels", false, false },
	{ "max_position_embeddings", "--max-position-embeddings", false, false },
	{ "num_query_groups", "--num-query-groups", true, false },
	{ "group_query_attention", "--group-query-attention", true, false },
	{ "position_embedding_type", "--position-embedding-type", true, false },
	{ "rotary_base", "--rotary-base", true, false },
	{ "rotary_percent", "--rotary-percent", true, false },
	{ "add_bias_linear", "--disable-bias-linear", true, true },
	{ "swiglu", "--swiglu", true, false },
	{ "untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights", true, false },
	{ "apply_layernorm_1p", "--apply-layernorm-1p", true, false },
	{ "add_qkv_bias", "--add-qkv-bias", true, false },
	{ "qk_layernorm", "--qk-layernorm", true, false },
	{ "use_rope_scaling", "--use-rope-scaling", true, false },
	{ "rope_scaling_factor", "--rope-scaling-factor", true, false },
	{ "rotary_interleaved", "--rotary-interleaved", true, false },
	{ "rotary_scaling_factor", "--rotary-scaling-factor", true, false },
	{ "yarn_original_max_position_embeddings", "--yarn-original-max-position-embeddings", true, false },
	{ "yarn_beta_fast", "--yarn-beta-fast", true, false },
	{ "yarn_beta_slow", "--yarn-beta-slow", true, false },
	{ "mscale", "--mscale", true, false },
	{ "mscale_all_dim", "--mscale-all-dim", true, false },
	{ "yarn_correction_range_round_to_int", "--yarn-correction-range-round-to-int", true, false },
	{ "normalization", "--normalization", true, false },
	{ "norm_epsilon", "--norm-epsilon", true, false },
	{ "attention_dropout", "--attention-dropout", true, false },
	{ "hidden_dropout", "--hidden-dropout", true, false },
	{ "num_experts", "--num-experts", true, false },
	{ "moe_layer_freq", "--moe-layer-freq", true, false },
	{ "moe_ffn_hidden_size", "--moe-ffn-hidden-size", true, false },
	{ "moe_router_topk", "--moe-router-topk", true, false },
	{ "moe_router_pre_softmax", "--moe-router-pre-softmax", true, false },
	{ "moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", true, false },
	{ "moe_shared_expert_gate", "--moe-shared-expert-gate", true, false },
	{ "moe_router_score_function", "--moe-router-score-function", true, false },
	{ "moe_expert_capacity_factor", "--moe-expert-capacity-factor", true, false },
	{ "moe_token_drop_policy", "--moe-token-drop-policy", true, false },
	{ "moe_router_num_groups", "--moe-router-num-groups", true, false },
	{ "moe_router_group_topk", "--moe-router-group-topk", true, false },
	{ "moe_router_topk_scaling_factor", "--moe-router-topk-scaling-factor", true, false },
	{ "moe_router_enable_expert_bias", "--moe-router-enable-expert-bias", true, false },
	{ "window_size", "--window-size", true, false },
	{ "multi_latent_attention", "--multi-latent-attention", true, false },
	{ "q_lora_rank", "--q-lora-rank", true, false },
	{ "kv_lora_rank", "--kv-lora-rank", true, false },
	{ "qk_head_dim", "--qk-head-dim", true, false },
	{ "qk_pos_emb_head_dim", "--qk-pos-emb-head-dim", true, false },
	{ "v_head_dim", "--v-head-dim", true, false },
	{ "rope_type", "--rope-type", true, false },
	{ "window_attn_skip_freq", "--window-attn-skip-freq", true, false },
	{ "hybrid_layer_pattern", "--hybrid-layer-pattern", true, false },
	{ "mamba_state_dim", "--mamba-state-dim", true, false },
	{ "mamba_head_dim", "--mamba-head-dim", true, false },
	{ "mamba_num_groups", "--mamba-num-groups", true, false },
	{ "mamba_num_heads", "--mamba-num-heads", true, false },
};

static const struct flag_def *row(const char *flag)
{
	for (size_t i = 0; i < args_table_len; i++)
		if (!strcmp(args_table[i].name, flag))
			return &args_table[i];
	BUG("--use-checkpoint-args: no row for %s", flag);
}

#define FIELD(a, d, type) ((type *)((char *)(a) + (d)->off))

/* The value as the command line would spell it, for messages. */
static void say(struct sbuf *sb, const json_t *v)
{
	if (json_is_string(v))
		sbuf_addstr(sb, json_string_value(v));
	else if (json_is_integer(v))
		sbuf_addf(sb, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		sbuf_addf(sb, "%g", json_real_value(v));
	else
		sbuf_addstr(sb, json_is_true(v) ? "on" : "off");
}

/* Set row d of a from v; 1 when it changed the field, 0 when equal, -1 on
 * a value of the wrong type. */
static int set_field(struct args *a, const struct flag_def *d, const json_t *v, bool invert, struct ckpt_args *own)
{
	switch (d->kind) {
	case FK_BOOL: {
		if (!json_is_boolean(v))
			return -1;
		bool b = json_is_true(v) != invert, *f = FIELD(a, d, bool);
		int changed = *f != b;
		*f = b;
		return changed;
	}
	case FK_INT: {
		if (!json_is_integer(v))
			return -1;
		int64_t *f = FIELD(a, d, int64_t);
		int changed = *f != (int64_t)json_integer_value(v);
		*f = json_integer_value(v);
		return changed;
	}
	case FK_FLOAT: {
		if (!json_is_number(v))
			return -1;
		double *f = FIELD(a, d, double);
		int changed = *f != json_number_value(v);
		*f = json_number_value(v);
		return changed;
	}
	case FK_STR: {
		if (!json_is_string(v))
			return -1;
		char **f = FIELD(a, d, char *);
		if (*f && !strcmp(*f, json_string_value(v)))
			return 0;
		if (own->nowned == (int)(sizeof(own->owned) / sizeof(own->owned[0])))
			BUG("--use-checkpoint-args: more strings than owned[] holds");
		*f = own->owned[own->nowned++] = xstrdup(json_string_value(v));
		return 1;
	}
	default:
		BUG("--use-checkpoint-args: %s has kind %d", d->name, d->kind);
	}
}

static int apply_config(struct args *a, json_t *cfg, const char *where, struct ckpt_args *own)
{
	struct sbuf took = SBUF_INIT, replaced = SBUF_INIT;
	int n = 0;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const json_t *v = json_object_get(cfg, keys[i].key);
		if (!v || json_is_null(v))
			continue; /* an older checkpoint's, or a setting it does not have (no MoE) */
		const struct flag_def *d = row(keys[i].flag);
		bool given = args_given(a, keys[i].flag);
		if (given && !keys[i].force)
			continue;
		int r = set_field(a, d, v, keys[i].invert, own);
		if (r < 0) {
			sbuf_release(&took);
			sbuf_release(&replaced);
			return error("%s: the recorded %s is not a %s", where, keys[i].key,
				     d->kind == FK_STR ? "string" : d->kind == FK_BOOL ? "boolean" : "number");
		}
		n++;
		if (given && r > 0)
			sbuf_addf(&replaced, "%s%s", replaced.len ? ", " : "", keys[i].flag);
		sbuf_addf(&took, "%s%s ", took.len ? ", " : "", keys[i].flag);
		say(&took, keys[i].invert ? (json_is_true(v) ? json_false() : json_true()) : v);
	}
	/* the GELU form: tanh with biases unless --no-bias-gelu-fusion (gpt_config.c) */
	const json_t *g = json_object_get(cfg, "bias_gelu_fusion");
	if (json_is_boolean(g) && !a->disable_bias_linear)
		a->bias_gelu_fusion = json_is_true(g);
	info("--use-checkpoint-args: %d model settings from %s: %s", n, where, took.buf ? took.buf : "none");
	if (replaced.len)
		warning("--use-checkpoint-args: the checkpoint's %s replace the command line's (as in Megatron)",
			replaced.buf);
	sbuf_release(&took);
	sbuf_release(&replaced);
	for (int i = 0; args_checkpoint_sizes[i]; i++)
		if (*FIELD(a, row(args_checkpoint_sizes[i]), int64_t) < 1)
			return error("%s records no %s: give %s", where, args_checkpoint_sizes[i] + 2,
				     args_checkpoint_sizes[i]);
	return 0;
}

int ckpt_args_apply(struct args *a, struct ckpt_args *own)
{
	memset(own, 0, sizeof(*own));
	if (!a->use_checkpoint_args)
		return 0;
	if (!a->load)
		return error("--use-checkpoint-args needs --load DIR (the checkpoint to take the model from)");
	int64_t iter = a->ckpt_step;
	struct ckpt_reader *r = iter < 0 ? ckpt_open_latest(a->load, &iter) : ckpt_open(a->load, iter);
	if (!r)
		return error("--use-checkpoint-args: no model to take from '%s'", a->load);
	char where[4200];
	snprintf(where, sizeof(where), "'%s'", ckpt_reader_dir(r));
	char *text = NULL;
	json_t *cfg = NULL;
	int rc = -1, mf = ckpt_file_open(r, "model.h5");
	if (mf < 0 || ckpt_get_attr_str(r, mf, NULL, "config", &text) < 0)
		goto out;
	json_error_t jerr;
	cfg = json_loads(text, 0, &jerr);
	if (!json_is_object(cfg)) {
		error("%s: its configuration is not a JSON object (%s)", where, jerr.text);
		goto out;
	}
	if (apply_config(a, cfg, where, own) < 0)
		goto out;
	rc = 0;
	/* Megatron's use_tokenizer_model_from_checkpoint_args: the recorded
	 * tokenizer when the command line gives none */
	if (!a->tokenizer_type && a->use_tokenizer_model_from_checkpoint_args) {
		int have = ckpt_tok_get(&own->tok, r, mf);
		if (have < 0)
			rc = -1;
		else if (have == 0)
			rc = ckpt_tok_use(a, &own->tok, where);
	}
out:
	json_decref(cfg);
	free(text);
	ckpt_close(r);
	return rc;
}

void ckpt_args_release(struct ckpt_args *own)
{
	for (int i = 0; i < own->nowned; i++)
		free(own->owned[i]);
	ckpt_tok_release_files();
	ckpt_tok_free(&own->tok);
	memset(own, 0, sizeof(*own));
}
