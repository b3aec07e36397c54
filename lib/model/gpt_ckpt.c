/*
 * gpt_ckpt.c - see gpt_ckpt.h. The JSON keys are Megatron's argument names,
 * as train_ckpt.c writes them.
 */
#include "model/gpt_ckpt.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"

static int get_int(json_t *o, const char *key, const char *where, int64_t lo, int *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > INT32_MAX)
		return error("%s: the model configuration needs \"%s\", an integer of at least %lld", where, key,
			     (long long)lo);
	*out = (int)json_integer_value(v);
	return 0;
}

static int get_num(json_t *o, const char *key, const char *where, double *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_number(v))
		return error("%s: the model configuration needs \"%s\", a number", where, key);
	*out = json_number_value(v);
	return 0;
}

static int get_bool(json_t *o, const char *key, const char *where, bool *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_boolean(v))
		return error("%s: the model configuration needs \"%s\", true or false", where, key);
	*out = json_is_true(v);
	return 0;
}

static int get_choice(json_t *o, const char *key, const char *where, const char *a, const char *b, bool *is_b)
{
	const char *s = json_string_value(json_object_get(o, key));
	if (!s || (strcmp(s, a) && strcmp(s, b)))
		return error("%s: the model configuration needs \"%s\", \"%s\" or \"%s\"", where, key, a, b);
	*is_b = !strcmp(s, b);
	return 0;
}

int gpt_config_from_json(struct gpt_config *c, const char *json, const char *where)
{
	memset(c, 0, sizeof(*c));
	json_error_t jerr;
	json_t *o = json_loads(json, 0, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		return error("%s: the model configuration is not a JSON object (%s)", where, jerr.text);
	}
	double base = 0, pct = 1, eps = 0, std = 0, hd = 0, ad = 0;
	bool learned = false, fusion = false;
	int rc = 0;
	rc |= get_int(o, "num_layers", where, 1, &c->L);
	/* a hybrid Mamba model (docs/mamba.md): its layers and the mixer's shape */
	const char *pat = json_string_value(json_object_get(o, "hybrid_layer_pattern"));
	if (rc == 0 && pat) {
		c->hybrid = c->is_hybrid = true;
		if ((int)strlen(pat) != c->L || c->L > GPT_MAX_LAYERS)
			rc = error("%s: hybrid_layer_pattern '%s' does not have num_layers %d layers", where, pat, c->L);
		for (int l = 0; rc == 0 && l < c->L; l++) {
			if (!strchr("M*-E", pat[l]))
				rc = error("%s: hybrid_layer_pattern '%s': '%c' is not a layer megac has", where, pat,
					   pat[l]);
			c->layer_kind[l] = pat[l] == 'M' ? GPT_LAYER_MAMBA : pat[l] == '*' ? GPT_LAYER_ATTENTION : GPT_LAYER_MLP;
			c->moe_layer[l] = pat[l] == 'E'; /* with num_experts below */
		}
		rc |= get_int(o, "mamba_state_dim", where, 1, &c->mamba_N);
		rc |= get_int(o, "mamba_head_dim", where, 1, &c->mamba_P);
		rc |= get_int(o, "mamba_num_groups", where, 1, &c->mamba_G);
		rc |= get_int(o, "mamba_num_heads", where, 1, &c->mamba_H);
		c->mamba_W = 4;
		c->mamba_chunk = 128;
	}
	c->is_hybrid |= json_is_true(json_object_get(o, "is_hybrid_model"));
	rc |= get_int(o, "hidden_size", where, 1, &c->h);
	rc |= get_int(o, "ffn_hidden_size", where, 1, &c->f);
	rc |= get_int(o, "num_attention_heads", where, 1, &c->a);
	rc |= get_int(o, "num_query_groups", where, 1, &c->g);
	rc |= get_int(o, "kv_channels", where, 1, &c->k);
	rc |= get_int(o, "seq_length", where, 1, &c->S);
	rc |= get_int(o, "max_position_embeddings", where, 1, &c->P);
	rc |= get_int(o, "vocab_size", where, 1, &c->V);
	rc |= get_int(o, "padded_vocab_size", where, 1, &c->Vp);
	const char *pet = json_string_value(json_object_get(o, "position_embedding_type"));
	if (pet && !strcmp(pet, "yarn"))
		c->yarn = true;
	else if (pet && !strcmp(pet, "none")) /* a hybrid model's */
		c->nopos = true;
	else
		rc |= get_choice(o, "position_embedding_type", where, "rope", "learned_absolute", &learned);
	rc |= get_choice(o, "normalization", where, "LayerNorm", "RMSNorm", &c->rmsnorm);
	rc |= get_num(o, "norm_epsilon", where, &eps);
	rc |= get_bool(o, "swiglu", where, &c->swiglu);
	rc |= get_bool(o, "add_bias_linear", where, &c->bias);
	rc |= get_bool(o, "bias_gelu_fusion", where, &fusion);
	rc |= get_bool(o, "untie_embeddings_and_output_weights", where, &c->untied);
	c->norm_1p = json_is_true(json_object_get(o, "apply_layernorm_1p")); /* written only when on */
	c->qkv_bias = c->bias || json_is_true(json_object_get(o, "add_qkv_bias"));
	c->qk_norm = json_is_true(json_object_get(o, "qk_layernorm"));
	rc |= get_num(o, "init_method_std", where, &std);
	rc |= get_num(o, "hidden_dropout", where, &hd);
	rc |= get_num(o, "attention_dropout", where, &ad);
	c->rope = !learned && !c->nopos;
	/* a MoE model: the checkpoint says so; its consumers refuse what they
	 * do not handle yet */
	json_t *ne = json_object_get(o, "num_experts");
	if (rc == 0 && json_is_integer(ne) && json_integer_value(ne) > 0) {
		c->E = (int)json_integer_value(ne);
		c->router.E = c->E;
		rc |= get_int(o, "moe_router_topk", where, 1, &c->router.k);
		rc |= get_int(o, "moe_ffn_hidden_size", where, 1, &c->moe_f);
		json_t *sf = json_object_get(o, "moe_shared_expert_intermediate_size");
		c->shared_f = json_is_integer(sf) ? (int)json_integer_value(sf) : 0;
		c->shared_gate = c->shared_f > 0 && json_is_true(json_object_get(o, "moe_shared_expert_gate"));
		const char *freq = json_string_value(json_object_get(o, "moe_layer_freq"));
		/* a hybrid model's MoE layers are its pattern's E layers */
		if (rc == 0 && !c->hybrid &&
		    (c->L > GPT_MAX_LAYERS || gpt_moe_pattern(freq ? freq : "1", c->L, c->moe_layer) < 0))
			rc = error("%s: the MoE layer pattern cannot be read", where);
		const char *sc = json_string_value(json_object_get(o, "moe_router_score_function"));
		c->router.sigmoid = sc && !strcmp(sc, "sigmoid");
		c->router.pre_softmax = json_is_true(json_object_get(o, "moe_router_pre_softmax"));
		/* the training-side router settings, where recorded */
		json_t *v;
		if (json_is_number(v = json_object_get(o, "moe_aux_loss_coeff")))
			c->router.aux_coeff = json_number_value(v);
		if (json_is_number(v = json_object_get(o, "moe_z_loss_coeff")))
			c->router.z_coeff = json_number_value(v);
		if (json_is_number(v = json_object_get(o, "moe_expert_capacity_factor")))
			c->router.capacity = json_number_value(v);
		const char *lb = json_string_value(json_object_get(o, "moe_router_load_balancing_type"));
		c->router.lb = !lb || !strcmp(lb, "aux_loss") ? MOE_LB_AUX :
			       !strcmp(lb, "seq_aux_loss") ? MOE_LB_SEQ_AUX : MOE_LB_NONE;
		const char *dp = json_string_value(json_object_get(o, "moe_token_drop_policy"));
		c->router.drop_position = dp && !strcmp(dp, "position");
		c->router_fp32 = json_is_string(json_object_get(o, "moe_router_dtype"));
		/* DeepSeek-V3's routing, written only when on */
		if (json_is_integer(v = json_object_get(o, "moe_router_group_topk")) && json_integer_value(v) > 0) {
			c->router.group_topk = (int)json_integer_value(v);
			rc |= get_int(o, "moe_router_num_groups", where, 1, &c->router.groups);
			if (rc == 0 && (c->router.groups > c->E || c->E % c->router.groups ||
					c->router.group_topk > c->router.groups || c->router.k < c->router.group_topk ||
					c->router.k > c->router.group_topk * (c->E / c->router.groups)))
				rc = error("%s: the group-limited routing (%d of %d groups) does not fit %d experts, top-%d",
					   where, c->router.group_topk, c->router.groups, c->E, c->router.k);
		}
		if (json_is_number(v = json_object_get(o, "moe_router_topk_scaling_factor")))
			c->router.scale = json_number_value(v);
		c->router.expert_bias = json_is_true(json_object_get(o, "moe_router_enable_expert_bias"));
		if (json_is_number(v = json_object_get(o, "moe_router_bias_update_rate")))
			c->router.bias_rate = json_number_value(v);
		c->router.force_balance = json_is_true(json_object_get(o, "moe_router_force_load_balancing"));
	}
	/* sliding-window attention: written only when on, as the command line spells it */
	const char *ws = json_string_value(json_object_get(o, "window_size"));
	const char *wf = json_string_value(json_object_get(o, "window_attn_skip_freq"));
	if (rc == 0 && gpt_window_from_text(c, ws, wf, "the recorded window_size") < 0)
		rc = error("%s: the sliding window cannot be read", where);
	if (rc == 0 && c->rope) {
		rc |= get_num(o, "rotary_base", where, &base);
		rc |= get_num(o, "rotary_percent", where, &pct);
		c->rope_scaling = json_is_true(json_object_get(o, "use_rope_scaling"));
		double f = 8;
		if (rc == 0 && c->rope_scaling)
			rc |= get_num(o, "rope_scaling_factor", where, &f);
		c->rope_scaling_factor = (float)f;
		c->rope_interleaved = json_is_true(json_object_get(o, "rotary_interleaved"));
	}
	if (rc == 0 && c->yarn) { /* every setting is written with yarn */
		struct rope_yarn *y = &c->yarn_cfg;
		double orig = 0;
		rc |= get_num(o, "rotary_scaling_factor", where, &y->factor);
		rc |= get_num(o, "yarn_original_max_position_embeddings", where, &orig);
		rc |= get_num(o, "yarn_beta_fast", where, &y->beta_fast);
		rc |= get_num(o, "yarn_beta_slow", where, &y->beta_slow);
		rc |= get_num(o, "mscale", where, &y->mscale);
		rc |= get_num(o, "mscale_all_dim", where, &y->mscale_all_dim);
		rc |= get_bool(o, "yarn_correction_range_round_to_int", where, &y->round_to_int);
		y->original_max_positions = orig >= 1 && orig <= INT32_MAX ? (int)orig : 0;
		if (rc == 0 && rope_yarn_check(y, "rotary_scaling_factor", "yarn_original_max_position_embeddings",
					       "yarn_beta_fast", "yarn_beta_slow") < 0)
			rc = error("%s: the YaRN settings above cannot be used", where);
	}
	bool mla = rc == 0 && json_is_true(json_object_get(o, "multi_latent_attention"));
	if (mla) {
		json_t *ql = json_object_get(o, "q_lora_rank");
		c->q_lora = json_is_integer(ql) ? (int)json_integer_value(ql) : 0;
		rc |= get_int(o, "kv_lora_rank", where, 1, &c->kv_lora);
		rc |= get_int(o, "qk_head_dim", where, 1, &c->qk_head);
		rc |= get_int(o, "qk_pos_emb_head_dim", where, 2, &c->qk_pos);
		rc |= get_int(o, "v_head_dim", where, 1, &c->v_head);
		if (!c->rope)
			rc |= get_num(o, "mla_rotary_base", where, &base);
		const char *rt = json_string_value(json_object_get(o, "rope_type"));
		if (rc == 0 && (!rt || (strcmp(rt, "rope") && strcmp(rt, "yarn"))))
			rc = error("%s: rope_type must be \"rope\" or \"yarn\" with multi_latent_attention", where);
		struct rope_yarn *y = &c->yarn_cfg;
		*y = rope_yarn_defaults();
		c->mla_yarn = rc == 0 && !strcmp(rt, "yarn");
		if (c->mla_yarn) { /* every setting is written with yarn */
			rc |= get_num(o, "rotary_scaling_factor", where, &y->factor);
			rc |= get_num(o, "mscale", where, &y->mscale);
			rc |= get_num(o, "mscale_all_dim", where, &y->mscale_all_dim);
			if (rc == 0 && rope_yarn_check(y, "rotary_scaling_factor", "original_max_position_embeddings",
						       "beta_fast", "beta_slow") < 0)
				rc = error("%s: the YaRN settings above cannot be used", where);
		} else if (rc == 0 && json_object_get(o, "rotary_scaling_factor")) { /* the softmax scale's */
			rc |= get_num(o, "rotary_scaling_factor", where, &y->factor);
			rc |= get_num(o, "mscale_all_dim", where, &y->mscale_all_dim);
		}
		double ms = rope_yarn_mscale(y->factor, y->mscale_all_dim);
		if (rc == 0 && (ms == 0 || !isfinite(ms)))
			rc = error("%s: rotary_scaling_factor and mscale_all_dim give a softmax scale of zero", where);
	}
	json_t *mtp = json_object_get(o, "mtp_num_layers"); /* multi-token prediction: its depths' tensors */
	if (json_is_integer(mtp) && json_integer_value(mtp) > 0 && json_integer_value(mtp) <= 64) {
		c->mtp = (int)json_integer_value(mtp);
		c->mtp_scale = (float)json_number_value(json_object_get(o, "mtp_loss_scaling_factor"));
	}
	json_decref(o);
	if (rc)
		return -1;
	if (mla) {
		if (c->q_lora < 0 || c->qk_pos % 2 || c->v_head > c->qk_head + c->qk_pos || c->g != c->a)
			return error("%s: the multi-latent attention settings are not ones megac trains", where);
		c->mla = true;
		c->k = c->qk_head + c->qk_pos;
	}
	if (c->a % c->g)
		return error("%s: num_query_groups %d does not divide num_attention_heads %d", where, c->g, c->a);
	if (c->Vp < c->V)
		return error("%s: padded_vocab_size %d is smaller than vocab_size %d", where, c->Vp, c->V);
	if (c->S > c->P)
		return error("%s: seq_length %d is more than max_position_embeddings %d", where, c->S, c->P);
	if (c->rope) {
		c->rot = (int)(c->k * pct);
		c->rotary_base = (float)base;
		if (c->rot < 2 || c->rot % 2 || pct > 1)
			return error("%s: rotary_percent %g of kv_channels %d is not an even number of channels", where,
				     pct, c->k);
	}
	if (c->mla) {
		c->rot = c->qk_pos;
		c->rotary_base = (float)base;
	}
	c->eps = (float)eps;
	c->gelu = fusion ? KOPS_GELU_TANH : KOPS_GELU_ERF;
	c->init_std = (float)std;
	c->hidden_dropout = (float)hd;
	c->attention_dropout = (float)ad;
	c->recompute = GPT_RECOMPUTE_NONE;
	return 0;
}

int gpt_config_from_ckpt(struct gpt_config *c, struct ckpt_reader *r, int file)
{
	char *json;
	if (ckpt_get_attr_str(r, file, NULL, "config", &json) < 0)
		return error("'%s': no model configuration (the \"config\" attribute train writes on model.h5)",
			     ckpt_reader_dir(r));
	char where[4200];
	snprintf(where, sizeof(where), "'%s/model.h5'", ckpt_reader_dir(r));
	int rc = gpt_config_from_json(c, json, where);
	free(json);
	return rc;
}

char *gpt_config_to_json(const struct gpt_config *c, double rotary_percent)
{
	json_t *o = json_object();
	json_object_set_new(o, "num_layers", json_integer(c->L));
	json_object_set_new(o, "hidden_size", json_integer(c->h));
	json_object_set_new(o, "ffn_hidden_size", json_integer(c->f));
	json_object_set_new(o, "num_attention_heads", json_integer(c->a));
	json_object_set_new(o, "num_query_groups", json_integer(c->g));
	json_object_set_new(o, "group_query_attention", json_boolean(c->g != c->a));
	json_object_set_new(o, "kv_channels", json_integer(c->k));
	json_object_set_new(o, "seq_length", json_integer(c->S));
	json_object_set_new(o, "max_position_embeddings", json_integer(c->P));
	json_object_set_new(o, "position_embedding_type",
			    json_string(c->yarn ? "yarn" : c->rope ? "rope" : c->nopos ? "none" : "learned_absolute"));
	/* Megatron's rotary_base is an integer; a fractional one is kept whole */
	json_object_set_new(o, "rotary_base", c->rotary_base == (float)(json_int_t)c->rotary_base ?
						      json_integer((json_int_t)c->rotary_base) :
						      json_real(c->rotary_base));
	json_object_set_new(o, "rotary_percent", json_real(rotary_percent));
	json_object_set_new(o, "normalization", json_string(c->rmsnorm ? "RMSNorm" : "LayerNorm"));
	json_object_set_new(o, "norm_epsilon", json_real(c->eps));
	json_object_set_new(o, "swiglu", json_boolean(c->swiglu));
	json_object_set_new(o, "add_bias_linear", json_boolean(c->bias));
	json_object_set_new(o, "bias_gelu_fusion", json_boolean(c->gelu == KOPS_GELU_TANH));
	json_object_set_new(o, "untie_embeddings_and_output_weights", json_boolean(c->untied));
	if (c->norm_1p) /* written only when on: older readers then refuse nothing they could misread */
		json_object_set_new(o, "apply_layernorm_1p", json_true());
	if (c->qkv_bias && !c->bias) /* likewise the options below */
		json_object_set_new(o, "add_qkv_bias", json_true());
	if (c->qk_norm)
		json_object_set_new(o, "qk_layernorm", json_true());
	if (c->mla) { /* written only when on; kv_channels above is then the q/k head size */
		json_object_set_new(o, "multi_latent_attention", json_true());
		if (c->q_lora)
			json_object_set_new(o, "q_lora_rank", json_integer(c->q_lora));
		json_object_set_new(o, "kv_lora_rank", json_integer(c->kv_lora));
		json_object_set_new(o, "qk_head_dim", json_integer(c->qk_head));
		json_object_set_new(o, "qk_pos_emb_head_dim", json_integer(c->qk_pos));
		json_object_set_new(o, "v_head_dim", json_integer(c->v_head));
		json_object_set_new(o, "rope_type", json_string(c->mla_yarn ? "yarn" : "rope"));
		if (!c->rope) /* the MLA RoPE's base, which the rope branch above leaves out */
			json_object_set_new(o, "mla_rotary_base", json_real(c->rotary_base));
		/* MLA's YaRN settings by Megatron's argument names (the others are
		 * MLATransformerConfig's constants); with rope only those that
		 * change the softmax scale, when they do */
		const struct rope_yarn *y = &c->yarn_cfg;
		if (c->mla_yarn || rope_yarn_mscale(y->factor, y->mscale_all_dim) != 1) {
			json_object_set_new(o, "rotary_scaling_factor", json_real(y->factor));
			json_object_set_new(o, "mscale_all_dim", json_real(y->mscale_all_dim));
		}
		if (c->mla_yarn)
			json_object_set_new(o, "mscale", json_real(y->mscale));
	}
	if (c->rope && c->rope_scaling) {
		json_object_set_new(o, "use_rope_scaling", json_true());
		json_object_set_new(o, "rope_scaling_factor", json_real(c->rope_scaling_factor));
	}
	if (c->rope && c->rope_interleaved)
		json_object_set_new(o, "rotary_interleaved", json_true());
	if (c->yarn) { /* Megatron's argument names */
		const struct rope_yarn *y = &c->yarn_cfg;
		json_object_set_new(o, "rotary_scaling_factor", json_real(y->factor));
		json_object_set_new(o, "yarn_original_max_position_embeddings", json_integer(y->original_max_positions));
		json_object_set_new(o, "yarn_beta_fast", json_real(y->beta_fast));
		json_object_set_new(o, "yarn_beta_slow", json_real(y->beta_slow));
		json_object_set_new(o, "mscale", json_real(y->mscale));
		json_object_set_new(o, "mscale_all_dim", json_real(y->mscale_all_dim));
		json_object_set_new(o, "yarn_correction_range_round_to_int", json_boolean(y->round_to_int));
	}
	if (c->swa) {
		struct sbuf w = SBUF_INIT;
		sbuf_addf(&w, "%d,%d", c->window, c->window_right);
		json_object_set_new(o, "window_size", json_string(w.buf));
		sbuf_release(&w);
		if (c->swa_skip) {
			sbuf_addf(&w, "[");
			for (int l = 0; l < c->L; l++)
				sbuf_addf(&w, "%s%d", l ? "," : "", c->swa_layer[l]);
			sbuf_addf(&w, "]");
			json_object_set_new(o, "window_attn_skip_freq", json_string(w.buf));
			sbuf_release(&w);
		}
	}
	json_object_set_new(o, "vocab_size", json_integer(c->V));
	json_object_set_new(o, "padded_vocab_size", json_integer(c->Vp));
	json_object_set_new(o, "init_method_std", json_real(c->init_std));
	json_object_set_new(o, "hidden_dropout", json_real(c->hidden_dropout));
	json_object_set_new(o, "attention_dropout", json_real(c->attention_dropout));
	if (c->is_hybrid)
		json_object_set_new(o, "is_hybrid_model", json_true());
	if (c->hybrid) { /* docs/mamba.md: the layers and the Mamba-2 mixer's shape */
		char pat[GPT_MAX_LAYERS + 1];
		for (int l = 0; l < c->L; l++)
			pat[l] = c->layer_kind[l] == GPT_LAYER_MAMBA ? 'M' : c->layer_kind[l] == GPT_LAYER_ATTENTION ? '*' :
				 c->E > 0 && c->moe_layer[l]                  ? 'E' :
										  '-';
		pat[c->L] = 0;
		json_object_set_new(o, "hybrid_layer_pattern", json_string(pat));
		json_object_set_new(o, "mamba_state_dim", json_integer(c->mamba_N));
		json_object_set_new(o, "mamba_head_dim", json_integer(c->mamba_P));
		json_object_set_new(o, "mamba_num_groups", json_integer(c->mamba_G));
		json_object_set_new(o, "mamba_num_heads", json_integer(c->mamba_H));
	}
	if (c->mtp > 0) { /* training only: readers of the model leave the depths' tensors alone */
		json_object_set_new(o, "mtp_num_layers", json_integer(c->mtp));
		json_object_set_new(o, "mtp_loss_scaling_factor", json_real(c->mtp_scale));
	}
	if (c->E > 0) { /* what a reader needs to rebuild the model; the training-only router settings too */
		struct sbuf pat = SBUF_INIT;
		sbuf_addf(&pat, "[");
		for (int l = 0; l < c->L; l++)
			sbuf_addf(&pat, "%s%d", l ? "," : "", c->moe_layer[l]);
		sbuf_addf(&pat, "]");
		json_object_set_new(o, "num_experts", json_integer(c->E));
		json_object_set_new(o, "moe_router_topk", json_integer(c->router.k));
		json_object_set_new(o, "moe_ffn_hidden_size", json_integer(c->moe_f));
		if (c->shared_f > 0)
			json_object_set_new(o, "moe_shared_expert_intermediate_size", json_integer(c->shared_f));
		if (c->shared_gate)
			json_object_set_new(o, "moe_shared_expert_gate", json_true());
		json_object_set_new(o, "moe_layer_freq", json_string(pat.buf));
		json_object_set_new(o, "moe_router_score_function", json_string(c->router.sigmoid ? "sigmoid" : "softmax"));
		json_object_set_new(o, "moe_router_pre_softmax", json_boolean(c->router.pre_softmax));
		json_object_set_new(o, "moe_aux_loss_coeff", json_real(c->router.aux_coeff));
		if (c->router.z_coeff > 0)
			json_object_set_new(o, "moe_z_loss_coeff", json_real(c->router.z_coeff));
		if (c->router.capacity > 0)
			json_object_set_new(o, "moe_expert_capacity_factor", json_real(c->router.capacity));
		/* recorded since train compares them on --load (older checkpoints lack them) */
		json_object_set_new(o, "moe_router_load_balancing_type",
				    json_string(c->router.lb == MOE_LB_NONE ? "none" :
						c->router.lb == MOE_LB_SEQ_AUX ? "seq_aux_loss" : "aux_loss"));
		json_object_set_new(o, "moe_token_drop_policy", json_string(c->router.drop_position ? "position" : "probs"));
		json_object_set_new(o, "moe_router_dtype", c->router_fp32 ? json_string("fp32") : json_null());
		if (c->router.group_topk > 0) {
			json_object_set_new(o, "moe_router_num_groups", json_integer(c->router.groups));
			json_object_set_new(o, "moe_router_group_topk", json_integer(c->router.group_topk));
		}
		if (c->router.scale > 0)
			json_object_set_new(o, "moe_router_topk_scaling_factor", json_real(c->router.scale));
		if (c->router.expert_bias) {
			json_object_set_new(o, "moe_router_enable_expert_bias", json_true());
			json_object_set_new(o, "moe_router_bias_update_rate", json_real(c->router.bias_rate));
		}
		if (c->router.force_balance)
			json_object_set_new(o, "moe_router_force_load_balancing", json_true());
		sbuf_release(&pat);
	}
	char *s = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(1));
	json_decref(o);
	return s;
}

/* ---- a checkpoint's configuration against the flags' ---- */

enum diff_kind {
	DIFF_MATH, /* the model computes something else: refused */
	DIFF_WARN, /* training differs (dropout, precision, a loss coefficient): said */
	DIFF_SKIP, /* not the model's math (batch sizes, seeds, ...), or compared by the caller */
};

/* How a key of the config JSON is compared. absent: the value a key left
 * out means (written only when set), or NULL when a missing key is an older
 * checkpoint's and is not compared. */
struct diff_key {
	const char *key, *flag;
	enum diff_kind kind;
	const char *absent;
	const char *if_true, *if_false; /* a boolean's values as said (NULL: "on" and "off") */
};

static const struct diff_key diff_keys[] = {
	{ "num_layers", "--num-layers", DIFF_MATH, NULL, NULL, NULL },
	{ "hidden_size", "--hidden-size", DIFF_MATH, NULL, NULL, NULL },
	{ "ffn_hidden_size", "--ffn-hidden-size", DIFF_MATH, NULL, NULL, NULL },
	{ "num_attention_heads", "--num-attention-heads", DIFF_MATH, NULL, NULL, NULL },
	{ "num_query_groups", "--num-query-groups", DIFF_MATH, NULL, NULL, NULL },
	{ "kv_channels", "--kv-channels", DIFF_MATH, NULL, NULL, NULL },
	{ "position_embedding_type", "--position-embedding-type", DIFF_MATH, NULL, NULL, NULL },
	{ "max_position_embeddings", "--max-position-embeddings (learned positions)", DIFF_MATH, NULL, NULL, NULL },
	{ "rotary_base", "--rotary-base", DIFF_MATH, NULL, NULL, NULL },
	{ "rotary_percent", "--rotary-percent", DIFF_MATH, NULL, NULL, NULL },
	{ "normalization", "--normalization", DIFF_MATH, NULL, NULL, NULL },
	{ "norm_epsilon", "--norm-epsilon", DIFF_MATH, NULL, NULL, NULL },
	{ "swiglu", "--swiglu", DIFF_MATH, NULL, NULL, NULL },
	{ "add_bias_linear", "--disable-bias-linear", DIFF_MATH, NULL, "off", "on" },
	{ "bias_gelu_fusion", "the GELU (tanh: fused bias-GELU with biases; erf: --no-bias-gelu-fusion or no biases)",
	  DIFF_MATH, NULL, "tanh", "erf" },
	{ "untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights", DIFF_MATH, NULL, NULL, NULL },
	{ "apply_layernorm_1p", "--apply-layernorm-1p", DIFF_MATH, "false", NULL, NULL },
	{ "add_qkv_bias", "--add-qkv-bias", DIFF_MATH, "false", NULL, NULL },
	{ "qk_layernorm", "--qk-layernorm", DIFF_MATH, "false", NULL, NULL },
	{ "use_rope_scaling", "--use-rope-scaling", DIFF_MATH, "false", NULL, NULL },
	{ "multi_latent_attention", "--multi-latent-attention", DIFF_MATH, "false", NULL, NULL },
	{ "q_lora_rank", "--q-lora-rank", DIFF_MATH, "null", NULL, NULL },
	{ "kv_lora_rank", "--kv-lora-rank", DIFF_MATH, "null", NULL, NULL },
	{ "qk_head_dim", "--qk-head-dim", DIFF_MATH, "null", NULL, NULL },
	{ "qk_pos_emb_head_dim", "--qk-pos-emb-head-dim", DIFF_MATH, "null", NULL, NULL },
	{ "v_head_dim", "--v-head-dim", DIFF_MATH, "null", NULL, NULL },
	{ "rope_type", "--rope-type", DIFF_MATH, "null", NULL, NULL },
	{ "mla_rotary_base", "--rotary-base", DIFF_MATH, "null", NULL, NULL },
	{ "rope_scaling_factor", "--rope-scaling-factor", DIFF_MATH, "null", NULL, NULL },
	{ "rotary_interleaved", "--rotary-interleaved", DIFF_MATH, "false", NULL, NULL },
	{ "rotary_scaling_factor", "--rotary-scaling-factor", DIFF_MATH, "null", NULL, NULL },
	{ "yarn_original_max_position_embeddings", "--yarn-original-max-position-embeddings", DIFF_MATH, "null", NULL,
	  NULL },
	{ "yarn_beta_fast", "--yarn-beta-fast", DIFF_MATH, "null", NULL, NULL },
	{ "yarn_beta_slow", "--yarn-beta-slow", DIFF_MATH, "null", NULL, NULL },
	{ "mscale", "--mscale", DIFF_MATH, "null", NULL, NULL },
	{ "mscale_all_dim", "--mscale-all-dim", DIFF_MATH, "null", NULL, NULL },
	{ "yarn_correction_range_round_to_int", "--yarn-correction-range-round-to-int", DIFF_MATH, "null", NULL,
	  NULL },
	{ "tokenizer_type", "--tokenizer-type", DIFF_MATH, NULL, NULL, NULL },
	{ "window_size", "--window-size", DIFF_MATH, "null", NULL, NULL },
	{ "window_attn_skip_freq", "--window-attn-skip-freq", DIFF_MATH, "null", NULL, NULL },
	{ "is_hybrid_model", "--is-hybrid-model", DIFF_MATH, "false", NULL, NULL },
	{ "hybrid_layer_pattern", "--hybrid-layer-pattern", DIFF_MATH, "null", NULL, NULL },
	{ "mamba_state_dim", "--mamba-state-dim", DIFF_MATH, "null", NULL, NULL },
	{ "mamba_head_dim", "--mamba-head-dim", DIFF_MATH, "null", NULL, NULL },
	{ "mamba_num_groups", "--mamba-num-groups", DIFF_MATH, "null", NULL, NULL },
	{ "mamba_num_heads", "--mamba-num-heads", DIFF_MATH, "null", NULL, NULL },
	{ "num_experts", "--num-experts", DIFF_MATH, "null", NULL, NULL },
	{ "moe_router_topk", "--moe-router-topk", DIFF_MATH, NULL, NULL, NULL },
	{ "moe_ffn_hidden_size", "--moe-ffn-hidden-size", DIFF_MATH, NULL, NULL, NULL },
	{ "moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", DIFF_MATH, "null", NULL, NULL },
	{ "moe_shared_expert_gate", "--moe-shared-expert-gate", DIFF_MATH, "false", NULL, NULL },
	{ "moe_layer_freq", "--moe-layer-freq", DIFF_MATH, NULL, NULL, NULL },
	{ "moe_router_score_function", "--moe-router-score-function", DIFF_MATH, NULL, NULL, NULL },
	{ "moe_router_pre_softmax", "--moe-router-pre-softmax", DIFF_MATH, NULL, NULL, NULL },
	{ "moe_expert_capacity_factor", "--moe-expert-capacity-factor", DIFF_MATH, "null", NULL, NULL },
	{ "moe_token_drop_policy", "--moe-token-drop-policy", DIFF_MATH, NULL, NULL, NULL },
	{ "moe_router_load_balancing_type", "--moe-router-load-balancing-type", DIFF_WARN, NULL, NULL, NULL },
	{ "moe_aux_loss_coeff", "--moe-aux-loss-coeff", DIFF_WARN, NULL, NULL, NULL },
	{ "moe_z_loss_coeff", "--moe-z-loss-coeff", DIFF_WARN, "null", NULL, NULL },
	{ "moe_router_dtype", "--moe-router-dtype", DIFF_WARN, NULL, NULL, NULL },
	{ "moe_router_num_groups", "--moe-router-num-groups", DIFF_MATH, "null", NULL, NULL },
	{ "moe_router_group_topk", "--moe-router-group-topk", DIFF_MATH, "null", NULL, NULL },
	{ "moe_router_topk_scaling_factor", "--moe-router-topk-scaling-factor", DIFF_MATH, "null", NULL, NULL },
	{ "moe_router_enable_expert_bias", "--moe-router-enable-expert-bias", DIFF_MATH, "false", NULL, NULL },
	{ "moe_router_bias_update_rate", "--moe-router-bias-update-rate", DIFF_WARN, "null", NULL, NULL },
	{ "moe_router_force_load_balancing", "--moe-router-force-load-balancing", DIFF_WARN, "false", NULL, NULL },
	{ "mtp_num_layers", "--mtp-num-layers", DIFF_MATH, "null", NULL, NULL },
	{ "mtp_loss_scaling_factor", "--mtp-loss-scaling-factor", DIFF_WARN, "null", NULL, NULL },
	{ "hidden_dropout", "--hidden-dropout", DIFF_WARN, NULL, NULL, NULL },
	{ "attention_dropout", "--attention-dropout", DIFF_WARN, NULL, NULL, NULL },
	{ "fp16", "--fp16", DIFF_WARN, "false", NULL, NULL },
	{ "bf16", "--bf16", DIFF_WARN, "false", NULL, NULL },
	{ "vocab_size", NULL, DIFF_SKIP, NULL, NULL, NULL },        /* the caller's, with its advice */
	{ "padded_vocab_size", NULL, DIFF_SKIP, NULL, NULL, NULL }, /* likewise */
	{ "group_query_attention", NULL, DIFF_SKIP, NULL, NULL, NULL }, /* num_query_groups says it */
	{ "seq_length", NULL, DIFF_SKIP, NULL, NULL, NULL },
	{ "init_method_std", NULL, DIFF_SKIP, NULL, NULL, NULL },
	{ "micro_batch_size", NULL, DIFF_SKIP, NULL, NULL, NULL },
	{ "global_batch_size", NULL, DIFF_SKIP, NULL, NULL, NULL },
	{ "train_iters", NULL, DIFF_SKIP, NULL, NULL, NULL },
	{ "seed", NULL, DIFF_SKIP, NULL, NULL, NULL },
};

static const struct diff_key *diff_key(const char *key)
{
	for (size_t i = 0; i < sizeof(diff_keys) / sizeof(diff_keys[0]); i++)
		if (!strcmp(diff_keys[i].key, key))
			return &diff_keys[i];
	return NULL;
}

/* Two JSON values the same? Numbers compare as numbers (an older
 * checkpoint's integer rotary_base equals 10000.0) to float precision:
 * both sides went through the model's float fields. */
static bool same_value(json_t *x, json_t *y)
{
	if (json_is_number(x) && json_is_number(y)) {
		double a = json_number_value(x), b = json_number_value(y);
		return a == b || fabs(a - b) <= 1e-6 * fmax(fabs(a), fabs(b));
	}
	return json_equal(x, y);
}

static void show_value(struct sbuf *sb, json_t *v, const struct diff_key *k)
{
	if (!v || json_is_null(v))
		sbuf_addstr(sb, "none");
	else if (json_is_boolean(v))
		sbuf_addstr(sb, json_is_true(v) ? (k->if_true ? k->if_true : "on") : (k->if_false ? k->if_false : "off"));
	else if (json_is_integer(v))
		sbuf_addf(sb, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		sbuf_addf(sb, "%.7g", json_real_value(v)); /* float fields: what they hold */
	else if (json_is_string(v))
		sbuf_addf(sb, "%s", *json_string_value(v) ? json_string_value(v) : "(none)");
	else
		sbuf_addstr(sb, "(a JSON value)");
}

int gpt_config_diff(const char *ckpt_json, const char *flags_json, const char *where, struct sbuf *math,
		    struct sbuf *other)
{
	json_error_t jerr;
	json_t *c = json_loads(ckpt_json, 0, &jerr), *f = json_loads(flags_json, 0, NULL);
	if (!json_is_object(c) || !json_is_object(f)) {
		json_decref(c);
		json_decref(f);
		return error("%s: the model configuration is not a JSON object (%s)", where, jerr.text);
	}
	const char *cp = json_string_value(json_object_get(c, "position_embedding_type"));
	const char *fp = json_string_value(json_object_get(f, "position_embedding_type"));
	bool rope = cp && fp && (!strcmp(cp, "rope") || !strcmp(cp, "yarn")) &&
		    (!strcmp(fp, "rope") || !strcmp(fp, "yarn"));
	bool learned = cp && fp && !strcmp(cp, "learned_absolute") && !strcmp(fp, "learned_absolute");
	json_t *ce = json_object_get(c, "num_experts"), *fe = json_object_get(f, "num_experts");
	bool moe = json_integer_value(ce) > 0 && json_integer_value(fe) > 0;
	/* the GELU form: only where a GELU runs (not with SwiGLU), and not again
	 * when the biases that decide it differ */
	bool no_gelu = !same_value(json_object_get(c, "add_bias_linear"), json_object_get(f, "add_bias_linear")) ||
		       json_is_true(json_object_get(c, "swiglu")) || json_is_true(json_object_get(f, "swiglu"));
	int n = 0;
	/* every key either side has, in the checkpoint's order and then the flags' */
	for (int side = 0; side < 2; side++) {
		const char *key;
		json_t *v;
		json_object_foreach(side ? f : c, key, v) {
			if (side && json_object_get(c, key))
				continue; /* compared already */
			const struct diff_key *k = diff_key(key);
			struct diff_key unknown = { key, key, DIFF_MATH, NULL, NULL, NULL };
			if (!k)
				k = &unknown;
			if (k->kind == DIFF_SKIP || (!strncmp(key, "moe_", 4) && !moe) ||
			    (!strncmp(key, "rotary_", 7) && !rope) ||
			    (!strcmp(key, "max_position_embeddings") && !learned) ||
			    (!strcmp(key, "bias_gelu_fusion") && no_gelu))
				continue;
			json_t *absent = k->absent ? json_loads(k->absent, JSON_DECODE_ANY, NULL) : NULL;
			json_t *x = json_object_get(c, key), *y = json_object_get(f, key);
			if ((!x || !y) && !absent)
				continue; /* an older checkpoint's configuration, without the key */
			if (!strcmp(key, "tokenizer_type") && x && y &&
			    (!json_string_length(x) || !json_string_length(y)))
				continue; /* not recorded */
			x = x ? x : absent;
			y = y ? y : absent;
			if (!same_value(x, y)) {
				struct sbuf *sb = k->kind == DIFF_MATH ? math : other;
				sbuf_addf(sb, "%s%s: ", sb->len ? "; " : "", k->flag);
				show_value(sb, x, k);
				sbuf_addstr(sb, " in the checkpoint, ");
				show_value(sb, y, k);
				sbuf_addstr(sb, " from the flags");
				n += k->kind == DIFF_MATH;
			}
			json_decref(absent);
		}
	}
	json_decref(c);
	json_decref(f);
	return n;
}

/* (gpt_read_param) Reading only the rows this rank needs: a row-parallel
 * slice is a run of rows per piece (params_piece: one, two for SwiGLU's
 * [gate; up], five for the Mamba mixer's in_proj), a column-parallel one
 * takes each piece's columns of every row, read a block of rows at a time,
 * so no rank holds a whole global tensor. */
int gpt_read_param(struct ckpt_reader *r, int file, const char *name, const struct param *p, float *dst)
{
	int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
	int64_t lcols = p->ndim == 2 ? p->local_shape[1] : 1;
	int64_t local, global, len;
	if (p->tp_axis != 1) {
		/* replicated, or row-parallel: local rows are runs of global rows */
		for (int i = 0; i < p->npieces; i++) {
			params_piece(p, p->tp_rank, i, &local, &global, &len);
			if (ckpt_get_tensor_rows(r, file, name, CKPT_F32, p->ndim, p->shape, global, len,
						 dst + (size_t)(local * lcols)) < 0)
				return -1;
		}
		return 0;
	}
	/* column-parallel: every row, this rank's columns of each piece */
	int64_t step = (int64_t)((size_t)1 << 22) / cols; /* about 16 MB of rows at a time */
	if (step < 1)
		step = 1;
	float *buf = xmalloc((size_t)(step < rows ? step : rows) * (size_t)cols * sizeof(float));
	int ret = 0;
	for (int64_t lo = 0; lo < rows && !ret; lo += step) {
		int64_t n = rows - lo < step ? rows - lo : step;
		ret = ckpt_get_tensor_rows(r, file, name, CKPT_F32, p->ndim, p->shape, lo, n, buf);
		for (int64_t i = 0; !ret && i < n; i++)
			for (int k = 0; k < p->npieces; k++) {
				params_piece(p, p->tp_rank, k, &local, &global, &len);
				memcpy(dst + (size_t)((lo + i) * lcols + local), buf + (size_t)(i * cols + global),
				       (size_t)len * sizeof(float));
			}
	}
	free(buf);
	return ret;
}

int gpt_load_expert_bias(struct gpt_model *m, struct ckpt_reader *r, int file)
{
	if (!m->moe.expert_bias)
		return 0;
	int64_t shape[1] = { m->c.E };
	for (int l = 0; l < gpt_num_layers_all(m); l++) {
		if (!gpt_layer_is_moe(m, l))
			continue;
		char name[PARAM_NAME_MAX];
		gpt_expert_bias_name(name, sizeof(name), l);
		gpt_mtp_layer_name(&m->c, name, sizeof(name));
		int has = ckpt_has_tensor(r, file, name);
		if (has < 0)
			return -1;
		if (!has)
			return error("%s has no %s: it was saved without --moe-router-enable-expert-bias", ckpt_reader_dir(r),
				     name);
		if (ckpt_get_tensor(r, file, name, CKPT_F32, 1, shape, m->moe.expert_bias + (size_t)l * m->c.E) < 0)
			return -1;
	}
	return 0;
}

int gpt_load_weights(struct gpt_model *m, struct ckpt_reader *r, int file)
{
	size_t most = 0;
	for (int i = 0; i < m->reg.n; i++)
		most = m->reg.p[i].numel > most ? m->reg.p[i].numel : most;
	float *host = m->k->host_alloc((most ? most : 1) * sizeof(float));
	int ret = 0;
	for (int i = 0; i < m->reg.n && !ret; i++) {
		const struct param *p = &m->reg.p[i];
		ret = gpt_read_param(r, file, p->name, p, host);
		if (!ret)
			gpt_set_param(m, i, host);
	}
	m->k->host_free(host);
	if (!ret)
		ret = gpt_load_expert_bias(m, r, file);
	return ret < 0 ? -1 : 0;
}
