/*
 * megatron_moe.c - the names and places of mixture-of-experts, multi-token
 * prediction and virtual-stage tensors in Megatron-LM's checkpoint formats
 * (see megatron_moe.h).
 *
 * What Megatron Core writes, from its modules' state dicts:
 *
 *   legacy torch (state_dict, per TP x PP x EP rank; mp_rank_TT[_PPP][_EEE])
 *     decoder.layers.<l - l0>.mlp.router.weight [E, h], .router.expert_bias [E] (fp32)
 *     SequentialMLP: ...mlp.experts.local_experts.<i>.linear_fc1.weight       (i: this EP rank's)
 *     TEGroupedMLP:  ...mlp.experts.linear_fc1.weight<i>, one ...linear_fc1._extra_state
 *     ...mlp.shared_experts.linear_fc1.weight, ...shared_experts.gate_weight [1, h]
 *     mtp.layers.<k>.{enorm,hnorm,eh_proj,final_layernorm}.*, mtp.layers.<k>.mtp_model_layer.*
 *     virtual stages: model0, model1, ... each a chunk's dict, its layers from 0
 *
 *   torch_dist (sharded_state_dict, global)
 *     decoder.layers.mlp.experts.experts.linear_fc1.weight [L, E, rows, cols]:
 *       both expert modules' key, the experts on an axis after the layers'
 *     decoder.layers.<l>.* instead when the layers differ (dense and MoE)
 *     mtp.layers.<k>.transformer_layer.* (never stacked), experts on [E, ...]
 *     _extra_state/shard_<l>.<e>_<L>.<E>: each expert linear's sharded object
 */
#include "convert/megatron_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "model/gpt.h"

static const char dec[] = "decoder.layers.", mtp_pre[] = "mtp.layers.", loc[] = ".mlp.experts.local_experts.";

bool megatron_layer_is_moe(const struct gpt_config *c, int l)
{
	return c->E > 0 && c->L > 0 && c->moe_layer[l < c->L ? l : c->L - 1];
}

void megatron_expert_bias_name(const struct gpt_config *c, int l, char *out, size_t n)
{
	gpt_expert_bias_name(out, n, l);
	gpt_mtp_layer_name(c, out, n);
}

/* decoder.layers.<l>.rest: l and rest (NULL: not a decoder layer's) */
static const char *decoder_layer(const char *name, long *l)
{
	if (strncmp(name, dec, sizeof(dec) - 1))
		return NULL;
	char *end;
	*l = strtol(name + sizeof(dec) - 1, &end, 10);
	return end != name + sizeof(dec) - 1 && *end == '.' ? end + 1 : NULL;
}

/* ...mlp.experts.local_experts.<e>.tail: e, the start of the match and tail */
static const char *expert_of(const char *name, long *e, const char **at)
{
	const char *p = strstr(name, loc);
	if (!p)
		return NULL;
	char *end;
	*e = strtol(p + sizeof(loc) - 1, &end, 10);
	if (end == p + sizeof(loc) - 1 || *end != '.')
		return NULL;
	*at = p;
	return end + 1;
}

/* name with its layer renumbered (l - l0) and a depth's layer module named
 * `layer` (transformer_layer or mtp_model_layer) */
static char *renumber(const char *name, int l0, const char *layer)
{
	long l;
	const char *rest = decoder_layer(name, &l);
	if (rest)
		return xasprintf("%s%ld.%s", dec, l - l0, rest);
	static const char tl[] = "transformer_layer.";
	int k, used = 0;
	if (sscanf(name, "mtp.layers.%d.%n", &k, &used) == 1 && used && !strncmp(name + used, tl, sizeof(tl) - 1))
		return xasprintf("%s%d.%s.%s", mtp_pre, k, layer, name + used + sizeof(tl) - 1);
	return xstrdup(name);
}

static char *legacy_name(const char *name, int l0, int e0, bool grouped, const char *layer)
{
	char *r = renumber(name, l0, layer), *out = r;
	long e;
	const char *at, *tail = expert_of(r, &e, &at);
	if (tail && grouped)
		out = xasprintf("%.*s.mlp.experts.%s%ld", (int)(at - r), r, tail, e - e0);
	else if (tail)
		out = xasprintf("%.*s%s%ld.%s", (int)(at - r), r, loc, e - e0, tail);
	if (out != r)
		free(r);
	return out;
}

char *megatron_legacy_name(const char *name, int l0, int e0, bool grouped)
{
	return legacy_name(name, l0, e0, grouped, "mtp_model_layer");
}

/* the tensor under name, or under the local spec's name of a fused norm */
static const struct pk_value *find_norm(const struct pk_value *model, const char *name)
{
	const struct pk_value *t = pk_get(model, name);
	if (t)
		return t;
	/* (a MoE layer's pre-MLP norm is pre_mlp_layernorm in megac and in
	 * Megatron's state dicts, and the fused name in its torch_dist) */
	static const char *const te[][2] = {
		{ "self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight" },
		{ "self_attention.linear_qkv.layer_norm_bias", "input_layernorm.bias" },
		{ "mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight" },
		{ "mlp.linear_fc1.layer_norm_bias", "pre_mlp_layernorm.bias" },
		{ "pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight" },
		{ "pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias" },
	};
	size_t n = strlen(name);
	for (size_t i = 0; i < sizeof(te) / sizeof(te[0]); i++) {
		size_t m = strlen(te[i][0]);
		if (n < m || strcmp(name + n - m, te[i][0]))
			continue;
		char *alt = xasprintf("%.*s%s", (int)(n - m), name, te[i][1]);
		t = pk_get(model, alt);
		free(alt);
		return t;
	}
	return NULL;
}

const struct pk_value *megatron_legacy_find(const struct pk_value *model, const char *name, int l0, int e0)
{
	static const char *const layer[] = { "mtp_model_layer", "transformer_layer" };
	const struct pk_value *t = NULL;
	for (int g = 0; !t && g < 2; g++)
		for (int k = 0; !t && k < 2; k++) {
			char *n = legacy_name(name, l0, e0, g, layer[k]);
			t = find_norm(model, n);
			free(n);
		}
	return t;
}

/* the linear layers whose modules carry _extra_state (Transformer Engine's,
 * and the local spec's linear layers) */
static const char *const extra_mods[] = { ".linear_qkv.weight", ".linear_proj.weight", ".linear_fc1.weight",
					  ".linear_fc2.weight", ".eh_proj.weight" };

/* the length of name's module prefix with its '.' (name ends in
 * <module>.weight[suffix]), or 0 when it carries no _extra_state */
static size_t extra_module(const char *name, const char *suffix, bool *qkv)
{
	size_t n = strlen(name), s = strlen(suffix);
	if (n < s || strcmp(name + n - s, suffix))
		return 0;
	n -= s;
	for (size_t i = 0; i < sizeof(extra_mods) / sizeof(extra_mods[0]); i++) {
		size_t m = strlen(extra_mods[i]);
		if (n >= m && !strncmp(name + n - m, extra_mods[i], m)) {
			*qkv = i == 0;
			return n - strlen("weight");
		}
	}
	return 0;
}

static struct pk_value *empty_u8(struct pk_doc *d)
{
	static const uint8_t none[1];
	int64_t size[1] = { 0 };
	return pk_tensor(d, pk_storage(d, PK_DT_U8, none, 0), 0, 1, size, NULL);
}

void megatron_legacy_extra_state(struct pk_doc *d, struct pk_value *model, const char *lname)
{
	bool qkv = false;
	size_t m = extra_module(lname, "", &qkv);
	if (!m) /* a grouped expert linear: one extra state, beside weight0 */
		m = extra_module(lname, "0", &qkv);
	if (!m)
		return;
	char *key = xasprintf("%.*s_extra_state", (int)m, lname);
	pk_set_str(d, model, key, empty_u8(d));
	free(key);
	if (qkv) {
		key = xasprintf("%.*score_attention._extra_state", (int)(m - strlen("linear_qkv.")), lname);
		pk_set_str(d, model, key, empty_u8(d));
		free(key);
	}
}

int megatron_chunk_of(const char *name, int nchunks, const int *l0, const int *nl, int L)
{
	long l;
	if (!strncmp(name, "embedding.", 10))
		return 0;
	if (decoder_layer(name, &l) && l < L)
		for (int v = 0; v < nchunks; v++)
			if (l >= l0[v] && l < l0[v] + nl[v])
				return v;
	return nchunks - 1; /* the final norm, the output layer, the depths */
}

bool megatron_dist_stacked(const struct gpt_config *c)
{
	for (int l = 1; c->E > 0 && l < c->L; l++)
		if (c->moe_layer[l] != c->moe_layer[0])
			return false;
	/* Megatron's default --moe-layer-freq 1 (every layer MoE) keeps them stacked */
	return c->E == 0 || c->moe_layer[0];
}

void megatron_dist_place(const struct gpt_config *c, bool stacked, const char *name, struct megatron_place *pl)
{
	memset(pl, 0, sizeof(*pl));
	long l, e;
	const char *rest = decoder_layer(name, &l);
	char *base = xstrdup(name);
	if (rest && stacked) {
		free(base);
		base = xasprintf("%s%s", dec, rest);
		pl->off[0] = l;
		pl->size[0] = c->L;
		pl->nlead = 1;
	}
	/* torch_dist names a MoE layer's pre-MLP norm as the dense layer's fused one */
	static const char pm[] = ".pre_mlp_layernorm.";
	char *q = strstr(base, pm);
	if (q) {
		char *x = xasprintf("%.*s.mlp.linear_fc1.layer_norm_%s", (int)(q - base), base, q + sizeof(pm) - 1);
		free(base);
		base = x;
	}
	const char *at, *tail = expert_of(base, &e, &at);
	if (tail) {
		pl->key = xasprintf("%.*s.mlp.experts.experts.%s", (int)(at - base), base, tail);
		pl->off[pl->nlead] = e;
		pl->size[pl->nlead] = c->E;
		pl->nlead++;
		free(base);
	} else {
		pl->key = base;
	}
}

char *megatron_dist_extra_state(const struct megatron_place *pl, bool attention)
{
	bool qkv = false;
	size_t m = extra_module(pl->key, "", &qkv);
	if (!m || (attention && !qkv))
		return NULL;
	char off[64] = "0", size[64] = "1";
	for (int i = 0; i < pl->nlead; i++) {
		size_t o = i ? strlen(off) : 0, s = i ? strlen(size) : 0;
		snprintf(off + o, sizeof(off) - o, "%s%lld", i ? "." : "", (long long)pl->off[i]);
		snprintf(size + s, sizeof(size) - s, "%s%lld", i ? "." : "", (long long)pl->size[i]);
	}
	if (attention)
		return xasprintf("%.*score_attention._extra_state/shard_%s_%s", (int)(m - strlen("linear_qkv.")), pl->key,
				 off, size);
	return xasprintf("%.*s_extra_state/shard_%s_%s", (int)m, pl->key, off, size);
}

int megatron_dist_split_experts(struct pk_doc *d, struct pk_value *model, const char *where)
{
	static const char ee[] = ".mlp.experts.experts.";
	size_t n = model->seq.n; /* (the views are appended after these) */
	for (size_t i = 0; i < n; i++) {
		const struct pk_value *k = model->seq.v[2 * i], *t = model->seq.v[2 * i + 1];
		const char *p = k->kind == PK_STR ? strstr(k->s.p, ee) : NULL;
		if (!p || t->kind != PK_TENSOR)
			continue;
		if (t->t.ndim < 2)
			return error("'%s': expert tensor '%s' has %d dimensions: no experts' axis", where, k->s.p,
				     t->t.ndim);
		int64_t per = pk_tensor_numel(t) / (t->t.size[0] ? t->t.size[0] : 1);
		for (int64_t e = 0; e < t->t.size[0]; e++) {
			char *name = xasprintf("%.*s%s%lld.%s", (int)(p - k->s.p), k->s.p, loc, (long long)e,
					       p + sizeof(ee) - 1);
			struct pk_value *v = pk_tensor(d, t->t.storage, t->t.offset + e * per, t->t.ndim - 1,
						       t->t.size + 1, NULL);
			if (!v) {
				free(name);
				return -1;
			}
			pk_set_str(d, model, name, v);
			free(name);
		}
	}
	return 0;
}
