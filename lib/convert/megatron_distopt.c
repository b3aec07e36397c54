/*
 * megatron_distopt.c - Megatron's distributed optimizer's state in a
 * torch_dist checkpoint (--use-distributed-optimizer), read as the named
 * tensors the non-distributed optimizer saves, which megatron_ckpt.c's
 * import turns into optim.h5 (docs/megatron-checkpoints.md, "The
 * distributed optimizer's state").
 *
 * Megatron saves it in one of two layouts, named by the common state's
 * optimizer.param_state_sharding_type:
 *
 *   fully_reshardable  by parameter, as the non-distributed optimizer:
 *                      optimizer.state.{param,exp_avg,exp_avg_sq}.<name>,
 *                      stacked like the model; "param" is the fp32 main
 *                      weight (the other optimizer's fp32_param)
 *   dp_reshardable     (Megatron's default) the optimizer's own flat
 *                      buffers, one per model-parallel rank (TP x PP) and
 *                      bucket: optimizer.distributed.dp_group_idx_<r>.
 *                      gbuf_idx_0.dtype_(...).bucket_idx_<b>.{param,
 *                      exp_avg,exp_avg_sq}, 1-D, of the bucket's unpadded
 *                      length (per_bucket_numel_unpadded, saved beside)
 *
 * The flat buffers hold no names. Megatron lays a rank's parameters out
 * in them (DistributedOptimizer._compute_per_buffer_param_layout) in the
 * reverse of the model's named_parameters() order, each start rounded up
 * to a multiple of 64 elements, a bucket closing where its unpadded length
 * says. So the reader rebuilds that order for each rank from megac's own
 * registry of the rank (its local shapes and TP split) and Megatron's
 * module order (megatron_param_order below), and holds it to the file: every
 * parameter must begin and end on a boundary of the tensor's saved chunks
 * (parameters and the padding between them are saved as separate
 * chunks) and the buckets must be used up exactly. A model whose order
 * megac does not know (MoE, whose experts have buffers of their own,
 * multi-latent attention, virtual stages) is refused by name.
 *
 * The non-tensor state (param_groups with Adam's constants and its step,
 * a 16-bit run's grad_scaler) is the common state's optimizer
 * (fully_reshardable) or the sharded object
 * optimizer.distributed.dp_group_idx_0.optimizer; it is put back as the
 * non-distributed optimizer's {"optimizer": {"state": {"common_step"},
 * "param_groups"}, "grad_scaler"} so the import reads both alike.
 */
#include "convert/megatron_distopt.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/dcp.h"
#include "convert/convert_int.h"
#include "model/gpt.h"
#include "tensor/mem.h"
#include "tensor/params.h"

/* the attribute key of Megatron's args (an argparse.Namespace), or NULL */
static const struct pk_value *ns_get(const struct pk_value *ns, const char *key)
{
	return ns && ns->kind == PK_OBJECT && ns->obj.state && ns->obj.state->kind == PK_DICT ?
		       pk_get(ns->obj.state, key) :
		       NULL;
}

static int64_t ns_int_or(const struct pk_value *ns, const char *key, int64_t dflt)
{
	const struct pk_value *v = ns_get(ns, key);
	return v && v->kind == PK_INT ? v->i : dflt;
}

/* a one-element list (how a sharded object is saved) as its element */
static const struct pk_value *unwrap(const struct pk_value *v)
{
	return v && v->kind == PK_LIST && v->seq.n == 1 ? v->seq.v[0] : v;
}

/*
 * The non-distributed optimizer's common state from the distributed one's
 * state_dict() (opt: {"param_groups", ...} or {"optimizer": {...},
 * "grad_scaler"}): root["optimizer"] becomes {"optimizer": {"state":
 * {"common_step": step}, "param_groups"}, "grad_scaler"}. Megatron keeps
 * the step in every param group.
 */
static int normalise_common(struct pk_doc *d, struct pk_value *root, const struct pk_value *opt, const char *where)
{
	opt = unwrap(opt);
	const struct pk_value *inner = opt && opt->kind == PK_DICT ? pk_get(opt, "optimizer") : NULL;
	const struct pk_value *o = inner && inner->kind == PK_DICT ? inner : opt;
	const struct pk_value *pgs = o && o->kind == PK_DICT ? pk_get(o, "param_groups") : NULL;
	if (!pgs || pgs->kind != PK_LIST || !pgs->seq.n || pgs->seq.v[0]->kind != PK_DICT)
		return error("%s: the distributed optimizer's state has no param_groups", where);
	const struct pk_value *step = pk_get(pgs->seq.v[0], "step");
	int64_t n;
	if (step && step->kind == PK_FLOAT)
		n = (int64_t)step->f;
	else if (step && step->kind == PK_INT)
		n = step->i;
	else if (!step)
		n = 0; /* (no step before the first) */
	else
		return error("%s: the distributed optimizer's param_groups[0].step is a %s, not a number", where,
			     pk_kind_name(step->kind));
	struct pk_value *state = pk_dict(d), *io = pk_dict(d), *top = pk_dict(d);
	pk_set_str(d, state, "common_step", pk_int(d, n));
	pk_set_str(d, io, "state", state);
	pk_set_str(d, io, "param_groups", (struct pk_value *)pgs);
	pk_set_str(d, top, "optimizer", io);
	const struct pk_value *gs = opt && opt->kind == PK_DICT ? pk_get(opt, "grad_scaler") : NULL;
	if (gs && gs->kind == PK_DICT)
		pk_set_str(d, top, "grad_scaler", (struct pk_value *)gs);
	pk_set_str(d, root, "optimizer", top);
	return 0;
}

/* fully_reshardable: "param" is the fp32 main weight, fp32_param to the import */
static int read_fully(struct pk_doc *d, struct pk_value *root, struct pk_value *model, const char *where)
{
	static const char pre[] = "optimizer.state.param.";
	size_t n = model->seq.n;
	for (size_t i = 0; i < n; i++) {
		const struct pk_value *k = model->seq.v[2 * i];
		if (k->kind != PK_STR || strncmp(k->s.p, pre, sizeof(pre) - 1))
			continue;
		char *alias = xasprintf("optimizer.state.fp32_param.%s", k->s.p + sizeof(pre) - 1);
		pk_set_str(d, model, alias, model->seq.v[2 * i + 1]);
		free(alias);
	}
	return normalise_common(d, root, pk_get(root, "optimizer"), where);
}

/*
 * Megatron's named_parameters() order of one layer, under the names megac
 * registers (the Transformer Engine spec's). Megatron's TransformerLayer
 * builds input_layernorm, self_attention, pre_mlp_layernorm and mlp in that
 * order; Attention builds core_attention and linear_proj before
 * SelfAttention adds linear_qkv, q_layernorm and k_layernorm; Transformer
 * Engine's fused LayerNormLinear holds its norm's weight and bias before
 * its own weight and bias. The local spec has the norms as modules of
 * their own (input_layernorm first, pre_mlp_layernorm before the MLP),
 * saved under the fused names.
 */
static const char *const layer_te[] = {
	"self_attention.linear_proj.weight",       "self_attention.linear_proj.bias",
	"self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
	"self_attention.linear_qkv.weight",        "self_attention.linear_qkv.bias",
	"self_attention.q_layernorm.weight",       "self_attention.q_layernorm.bias",
	"self_attention.k_layernorm.weight",       "self_attention.k_layernorm.bias",
	"mlp.linear_fc1.layer_norm_weight",        "mlp.linear_fc1.layer_norm_bias",
	"mlp.linear_fc1.weight",                   "mlp.linear_fc1.bias",
	"mlp.linear_fc2.weight",                   "mlp.linear_fc2.bias",
};
static const char *const layer_local[] = {
	"self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.layer_norm_bias",
	"self_attention.linear_proj.weight",       "self_attention.linear_proj.bias",
	"self_attention.linear_qkv.weight",        "self_attention.linear_qkv.bias",
	"self_attention.q_layernorm.weight",       "self_attention.q_layernorm.bias",
	"self_attention.k_layernorm.weight",       "self_attention.k_layernorm.bias",
	"mlp.linear_fc1.layer_norm_weight",        "mlp.linear_fc1.layer_norm_bias",
	"mlp.linear_fc1.weight",                   "mlp.linear_fc1.bias",
	"mlp.linear_fc2.weight",                   "mlp.linear_fc2.bias",
};

/* add registry entry `name` to order if the rank has it */
static void take(const struct param_registry *r, const char *name, int *order, int *n, unsigned char *seen)
{
	int i = params_find(r, name);
	if (i >= 0 && !seen[i]) {
		seen[i] = 1;
		order[(*n)++] = i;
	}
}

int megatron_param_order(const struct gpt_model *m, bool local, int *order, const char *where)
{
	const struct param_registry *r = &m->reg;
	unsigned char *seen = xcalloc((size_t)r->n + 1, 1);
	int n = 0;
	char name[PARAM_NAME_MAX + 64];
	int wte = params_find(r, "embedding.word_embeddings.weight");
	if (wte >= 0 && !(r->p[wte].flags & PARAM_SHARED))
		take(r, "embedding.word_embeddings.weight", order, &n, seen);
	take(r, "embedding.position_embeddings.weight", order, &n, seen);
	const char *const *lay = local ? layer_local : layer_te;
	size_t nlay = local ? sizeof(layer_local) / sizeof(*layer_local) : sizeof(layer_te) / sizeof(*layer_te);
	for (int v = 0; v < m->nchunks; v++)
		for (int l = m->chunks[v].l0; l < m->chunks[v].l0 + m->chunks[v].nl; l++)
			for (size_t j = 0; j < nlay; j++) {
				snprintf(name, sizeof(name), "decoder.layers.%d.%s", l, lay[j]);
				take(r, name, order, &n, seen);
			}
	take(r, "decoder.final_layernorm.weight", order, &n, seen);
	take(r, "decoder.final_layernorm.bias", order, &n, seen);
	take(r, "output_layer.weight", order, &n, seen);
	/* (tied embeddings, PP > 1: the last stage's copy of the word
	 * embeddings, megac's registry's under their name, is its output_layer) */
	take(r, "embedding.word_embeddings.weight", order, &n, seen);
	int rc = 0;
	for (int i = 0; i < r->n && rc == 0; i++)
		if (!seen[i])
			rc = error("%s: '%s': megac does not know its place in Megatron's named_parameters() order "
				   "(where the optimizer's state of this parameter is)",
				   where, r->p[i].name);
	free(seen);
	return rc < 0 ? -1 : n;
}

/* the bucket tensors of model-parallel rank idx: [bucket][param, exp_avg, exp_avg_sq] */
struct bucket {
	const struct dcp_item *it[3];
	float *v[3];
	int64_t n; /* unpadded elements */
};

static const char *const kinds[3] = { "param", "exp_avg", "exp_avg_sq" };
static const char *const state_names[3] = { "fp32_param", "exp_avg", "exp_avg_sq" };

/* the buckets of rank idx, from the items' names, each read whole */
static int find_buckets(struct dcp *c, int idx, struct bucket **out, int *nb, const char *where)
{
	char pre[64];
	snprintf(pre, sizeof(pre), "optimizer.distributed.dp_group_idx_%d.", idx);
	size_t lp = strlen(pre);
	int n = 0;
	struct bucket *b = NULL;
	int rc = 0;
	for (int i = 0; i < dcp_count(c) && rc == 0; i++) {
		const struct dcp_item *it = dcp_item(c, i);
		if (!it->tensor || strncmp(it->fqn, pre, lp))
			continue;
		const char *rest = it->fqn + lp;
		if (strncmp(rest, "gbuf_idx_", 9)) {
			rc = error("%s: '%s': not a bucket of the distributed optimizer megac knows", where, it->fqn);
			break;
		}
		if (strncmp(rest, "gbuf_idx_0.", 11)) {
			rc = error("%s: '%s': a second buffer (expert parameters, or a second dtype): not read yet",
				   where, it->fqn);
			break;
		}
		const char *bi = strstr(rest, ".bucket_idx_");
		char *end;
		long k = bi ? strtol(bi + 12, &end, 10) : -1;
		int kind = -1;
		for (int j = 0; bi && j < 3; j++)
			if (*end == '.' && !strcmp(end + 1, kinds[j]))
				kind = j;
		if (k < 0 || k > 1 << 20 || kind < 0 || it->ndim != 1) {
			rc = error("%s: '%s': not a bucket of the distributed optimizer megac knows", where, it->fqn);
			break;
		}
		if (it->dtype != PK_DT_F32) {
			rc = error("%s: '%s' is %s, not the float32 of the optimizer's state", where, it->fqn,
				   pk_dtype_name(it->dtype));
			break;
		}
		if (k >= n) {
			b = xrealloc(b, (size_t)(k + 1) * sizeof(*b));
			memset(b + n, 0, (size_t)(k + 1 - n) * sizeof(*b));
			n = (int)k + 1;
		}
		b[k].it[kind] = it;
	}
	for (int k = 0; k < n && rc == 0; k++)
		for (int j = 0; j < 3 && rc == 0; j++) {
			if (!b[k].it[j]) {
				rc = error("%s: rank %d of the distributed optimizer has no bucket %d %s", where, idx, k,
					   kinds[j]);
				break;
			}
			b[k].n = b[k].it[j]->size[0];
			if (b[k].it[j]->size[0] != b[k].it[0]->size[0])
				rc = error("%s: '%s' and '%s' differ in length", where, b[k].it[j]->fqn, b[k].it[0]->fqn);
			b[k].v[j] = xmalloc((size_t)b[k].n * sizeof(float) + 1);
			if (rc == 0)
				rc = dcp_read_tensor(c, b[k].it[j], b[k].v[j]);
		}
	if (rc == 0 && n == 0)
		rc = error("%s: the distributed optimizer saved no bucket for model-parallel rank %d", where, idx);
	*out = b;
	*nb = n;
	return rc;
}

static void free_buckets(struct bucket *b, int n)
{
	for (int k = 0; k < n; k++)
		for (int j = 0; j < 3; j++)
			free(b[k].v[j]);
	free(b);
}

/* x is where one of the item's chunks starts (or, end: ends) */
static bool chunk_edge(const struct dcp_item *it, int64_t x, bool end)
{
	for (int i = 0; i < it->nchunks; i++)
		if ((end ? it->chunks[i].offset[0] + it->chunks[i].size[0] : it->chunks[i].offset[0]) == x)
			return true;
	return false;
}

/* The global state tensors, one per registry entry of stage 0's rank 0
 * (every rank of a stage has the same entries), kind by kind. */
struct globals {
	float **v[3]; /* [kind][param] */
};

/* One model-parallel rank (tp t of stage s): its buckets walked in the
 * layout Megatron computes, each parameter's slice put in the global
 * tensors where the registry's TP split says. */
static int read_rank(struct dcp *c, const struct gpt_model *m, int t, int idx, bool local, struct globals *g,
		     const char *where)
{
	const struct param_registry *r = &m->reg;
	int *order = xmalloc((size_t)r->n * sizeof(int) + 1);
	int n = megatron_param_order(m, local, order, where);
	struct bucket *b = NULL;
	int nb = 0, rc = n < 0 ? -1 : find_buckets(c, idx, &b, &nb, where);
	int k = 0;
	int64_t at = 0;
	for (int i = n - 1; rc == 0 && i >= 0; i--) { /* reverse order: backprop's */
		const struct param *p = &r->p[order[i]];
		at = (at + 63) / 64 * 64;
		if (k < nb && at == b[k].n && at > 0) { /* a bucket closed on a new bucket's parameter */
			k++;
			at = 0;
		}
		if (k >= nb || at + (int64_t)p->numel > b[k].n) {
			rc = error("%s: model-parallel rank %d: '%s' (%zu values) does not fit in its distributed optimizer "
				   "bucket %d (%lld values) where Megatron's layout puts it; the checkpoint's model is "
				   "not the one megac built from its args",
				   where, idx, p->name, p->numel, k, k < nb ? (long long)b[k].n : 0LL);
			break;
		}
		if (!chunk_edge(b[k].it[0], at, false) || !chunk_edge(b[k].it[0], at + (int64_t)p->numel, true)) {
			rc = error("%s: model-parallel rank %d: '%s' at [%lld, %lld) of '%s' does not begin and end "
				   "where the saved chunks do: Megatron's buffer layout is not the one megac expects",
				   where, idx, p->name, (long long)at, (long long)(at + (int64_t)p->numel), b[k].it[0]->fqn);
			break;
		}
		int64_t gcols = p->ndim == 2 ? p->shape[1] : 1;
		for (int j = 0; j < 3 && !(p->flags & PARAM_SHARED); j++) {
			float *dst = g->v[j][order[i]];
			const float *src = b[k].v[j] + at;
			for (size_t x = 0; x < p->numel; x++) {
				int64_t row, col;
				params_global_pos_rank(p, t, x, &row, &col);
				dst[(size_t)row * (size_t)gcols + (size_t)col] = src[x];
			}
		}
		at += (int64_t)p->numel;
		if (at == b[k].n) {
			k++;
			at = 0;
		}
	}
	if (rc == 0 && (k != nb || at != 0))
		rc = error("%s: model-parallel rank %d: the distributed optimizer's buckets hold more than the "
			   "rank's parameters (%d of %d buckets used)",
			   where, idx, k, nb);
	free_buckets(b, nb);
	free(order);
	return rc;
}

/* dp_reshardable: every model-parallel rank's buckets into global tensors */
static int read_dp_reshardable(const char *dir, const struct gpt_config *cfg, const struct pk_value *args,
			       struct pk_doc *d, struct pk_value *root, struct pk_value *model, const char *where)
{
	int64_t tp = ns_int_or(args, "tensor_model_parallel_size", 1), pp = ns_int_or(args, "pipeline_model_parallel_size", 1);
	int64_t vpp = ns_int_or(args, "virtual_pipeline_model_parallel_size", 1);
	const struct pk_value *impl = ns_get(args, "transformer_impl");
	bool local = impl && impl->kind == PK_STR && !strcmp(impl->s.p, "local");
	if (tp < 1 || pp < 1 || tp * pp > 4096)
		return error("%s: the args' tensor and pipeline parallel sizes (%lld, %lld) are not a layout", where,
			     (long long)tp, (long long)pp);
	if (vpp > 1)
		return error("%s: the distributed optimizer's buffers of virtual pipeline stages are not read yet", where);
	if (cfg->E > 0 || cfg->mtp || cfg->mla || cfg->hybrid)
		return error("%s: the distributed optimizer's buffers of a model with %s are not read yet", where,
			     cfg->E > 0 ? "mixture-of-experts layers" : cfg->mtp ? "multi-token prediction" :
				     cfg->mla ? "multi-latent attention" : "Mamba layers");
	struct dcp *c = dcp_open(dir);
	if (!c)
		return -1;
	int rc = 0;
	const struct dcp_item *oi = dcp_find(c, "optimizer.distributed.dp_group_idx_0.optimizer/shard_0_1");
	const struct pk_value *opt = oi ? dcp_read_object(c, d, oi) : NULL;
	if (!oi)
		rc = error("%s: no optimizer.distributed.dp_group_idx_0.optimizer: not the distributed optimizer's "
			   "dp_reshardable state",
			   where);
	else if (!opt)
		rc = -1;
	if (rc == 0)
		rc = normalise_common(d, root, opt, where);
	for (int s = 0; rc == 0 && s < pp; s++) {
		struct megatron_stage stage;
		if (megatron_stage_plan(&stage, cfg, (int)tp, (int)pp, s, 1) < 0)
			rc = -1;
		struct gpt_model *m = stage.m;
		/* the stage's global tensors, in the pickle document as the import's names */
		const struct param_registry *r0 = &m[0].reg;
		struct globals g;
		for (int j = 0; j < 3; j++)
			g.v[j] = xcalloc((size_t)r0->n + 1, sizeof(float *));
		for (int i = 0; rc == 0 && i < r0->n; i++) {
			const struct param *p = &r0->p[i];
			if (p->flags & PARAM_SHARED)
				continue;
			int64_t gn = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
			for (int j = 0; j < 3; j++) {
				g.v[j][i] = xcalloc((size_t)gn + 1, sizeof(float));
				pk_doc_attach(d, free, g.v[j][i]);
				struct pk_value *st = pk_storage(d, PK_DT_F32, g.v[j][i], gn);
				struct pk_value *tv = pk_tensor(d, st, 0, p->ndim, p->shape, NULL);
				char *key = xasprintf("optimizer.state.%s.%s", state_names[j], p->name);
				if (!tv)
					rc = -1;
				else
					pk_set_str(d, model, key, tv);
				free(key);
			}
		}
		/* Megatron's model-parallel rank: TP fastest, then PP */
		for (int t = 0; rc == 0 && t < tp; t++)
			rc = read_rank(c, &m[t], t, (int)(s * tp + t), local, &g, where);
		for (int j = 0; j < 3; j++)
			free(g.v[j]);
		megatron_stage_free(&stage);
	}
	dcp_close(c);
	return rc;
}

int megatron_distopt_read(const char *dir, const struct gpt_config *c, struct pk_doc *d, struct pk_value *root,
			  struct pk_value *model, const char *where)
{
	const struct pk_value *o = pk_get(root, "optimizer");
	const struct pk_value *t = o && o->kind == PK_DICT ? pk_get(o, "param_state_sharding_type") : NULL;
	if (!t || t->kind != PK_STR)
		return error("%s: the common state's optimizer has no param_state_sharding_type: not the state of "
			     "Megatron's distributed optimizer",
			     where);
	if (!strcmp(t->s.p, "fully_reshardable"))
		return read_fully(d, root, model, where);
	if (!strcmp(t->s.p, "dp_reshardable"))
		return read_dp_reshardable(dir, c, pk_get(root, "args"), d, root, model, where);
	return error("%s: Megatron's distributed optimizer saved its state as '%s', which megac does not read (it "
		     "reads dp_reshardable, Megatron's default, and fully_reshardable); --no-optim (ckpt_convert) or "
		     "--no-load-optim (train) takes the weights only",
		     where, t->s.p);
}

bool megatron_distopt_state(const struct pk_value *root)
{
	const struct pk_value *o = pk_get(root, "optimizer");
	return o && o->kind == PK_DICT && pk_get(o, "param_state_sharding_type");
}
