/*
 * megatron_fsdp.c - Megatron-FSDP's `fsdp_dtensor` checkpoint format out
 * of and into megac's (see megatron_fsdp.h, docs/megatron-checkpoints.md).
 *
 * Megatron saves it with torch.distributed.checkpoint.save of its whole
 * state dict, DTensors sharded over the data-parallel ranks, so the folder
 * is a PyTorch Distributed Checkpoint (lib/ckpt/dcp.h) of the state dict
 * flattened by DCP's rule: nested dicts joined with ".", anything not a
 * tensor or dict an object of its own. For a GPT model:
 *
 *   args, iteration, checkpoint_version, num_floating_point_operations_so_far
 *   model.<W>decoder.layers.<i>.self_attention.linear_qkv.weight    one per layer,
 *   model.<W>decoder.layers.<i>.mlp.linear_fc1.weight_w / _v        SwiGLU's gate and up halves apart
 *   model.<W>embedding.word_embeddings.weight, ...                  fp32: the main (master) weights
 *   optimizer.state.module.<W><name>.exp_avg / .exp_avg_sq / .step  Adam's, by parameter name
 *   optimizer.param_to_group_meta.module.<W><name>.<lr, betas, eps, weight_decay, ...>
 *   opt_param_scheduler.<max_lr, num_steps, ...>
 *
 * <W> is the model's wrapper prefix: "module." (Megatron-FSDP's module
 * around the model), plus one more for Float16Module in bf16 and fp16 runs;
 * the optimizer's names add the DDP wrapper's. Every tensor is global and
 * layout-independent (TP shards are joined into the DTensor's global
 * shape; fused QKV keeps Megatron's per-query-group order); the layers are
 * not stacked; TE's _extra_state is left out. There is no metadata.json:
 * that is how Megatron tells fsdp_dtensor from torch_dist.
 *
 * Writing: every tensor one chunk, from one rank. Reading: any chunks
 * (dcp.c assembles and checks them), the wrappers' prefixes stripped
 * however deep, into the shape of state the torch_dist reader gives
 * megatron_ckpt.c's import. Mixture-of-experts layers are the model's own
 * names too: SequentialMLP's experts local_experts.<e> by global number (or
 * TEGroupedMLP's linear_fc<n>.weight<e>), their and the shared expert's fc1
 * in halves, the router's expert_bias buffer; a multi-token-prediction
 * depth's layer mtp.layers.<k>.transformer_layer (mtp_model_layer in newer
 * Megatron, read as that). Refused by name: optimizer states that are not
 * Adam's by name, MLA's fused q/kv down projection.
 */
#include "convert/megatron_fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "ckpt/dcp.h"
#include "ckpt/dtype.h"
#include "memcalc/megac_mem.h"
#include "model/gpt.h"
#include "tensor/mem.h"
#include "tensor/params.h"

static bool has_prefix(const char *s, const char *pre)
{
	return !strncmp(s, pre, strlen(pre));
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && !strcmp(s + n - m, suf);
}

/* ---- megac -> fsdp_dtensor ---- */

/* SwiGLU's linear_fc1 (weight or bias): rows [gate; up], two pieces TP
 * splits one by one, which Megatron-FSDP saves apart */
static bool glu(const struct param *p)
{
	return p->tp_axis == 0 && p->npieces == 2 &&
	       (has_suffix(p->name, "linear_fc1.weight") || has_suffix(p->name, "linear_fc1.bias"));
}

/* Megatron's module name of megac's parameter `name` (its state dict's,
 * the wrappers aside): the same but for the experts with --moe-grouped-gemm,
 * TEGroupedMLP's ...mlp.experts.linear_fc<n>.weight<e> (global e) */
static char *model_name(const char *name, bool grouped)
{
	static const char loc[] = ".mlp.experts.local_experts.";
	const char *p = grouped ? strstr(name, loc) : NULL;
	int ex, used = 0;
	if (!p || sscanf(p + sizeof(loc) - 1, "%d.%n", &ex, &used) != 1 || !used)
		return xstrdup(name);
	return xasprintf("%.*s.mlp.experts.%s%d", (int)(p - name), name, p + sizeof(loc) - 1 + used, ex);
}

/* Put object v under fqn, and the path of nested keys it was flattened
 * from (DCP's planner_data). */
static int put_object(struct dcp_writer *w, struct pk_value *v, int n, const char *const *path)
{
	struct sbuf fqn = SBUF_INIT;
	for (int i = 0; i < n; i++)
		sbuf_addf(&fqn, "%s%s", i ? "." : "", path[i]);
	int r = dcp_put_object(w, fqn.buf, v);
	if (r == 0)
		r = dcp_put_path(w, fqn.buf, n, path);
	sbuf_release(&fqn);
	return r;
}

/* a whole float32 tensor (ndim 0..2) under the nested path */
static int put_tensor(struct dcp_writer *w, int ndim, const int64_t *size, const float *data, int n,
		      const char *const *path)
{
	struct sbuf fqn = SBUF_INIT;
	for (int i = 0; i < n; i++)
		sbuf_addf(&fqn, "%s%s", i ? "." : "", path[i]);
	int64_t off[2] = { 0, 0 };
	int r = dcp_put_chunk(w, fqn.buf, PK_DT_F32, ndim, size, off, size, data);
	if (r == 0)
		r = dcp_put_path(w, fqn.buf, n, path);
	sbuf_release(&fqn);
	return r;
}

/* Parameter p's tensor (read from file f as `src`) under the nested path
 * prefix..., name, suffix: SwiGLU's linear_fc1 as two tensors, name_w (the
 * gate's rows) and name_v (the up projection's), as Megatron-FSDP splits it
 * for saving. */
static int put_param(struct dcp_writer *w, const struct megatron_export *e, const struct param *p, int f,
		     const char *src, float *buf, int npre, const char *const *pre, const char *name,
		     const char *suffix)
{
	if (megatron_read_global(e, f, src, p, buf) < 0)
		return -1;
	const char *path[8];
	if (npre > 5)
		BUG("put_param: %d path parts", npre);
	memcpy(path, pre, (size_t)npre * sizeof(*pre));
	int n = npre + 1 + (suffix != NULL);
	if (suffix)
		path[npre + 1] = suffix;
	int64_t size[2] = { p->shape[0], p->ndim == 2 ? p->shape[1] : 1 };
	if (!glu(p)) {
		path[npre] = name;
		return put_tensor(w, p->ndim, size, buf, n, path);
	}
	if (size[0] % 2)
		BUG("put_param: '%s' has an odd number of rows", p->name);
	size[0] /= 2;
	size_t half = (size_t)size[0] * (size_t)(p->ndim == 2 ? size[1] : 1);
	int r = 0;
	for (int k = 0; r == 0 && k < 2; k++) {
		char *part = xasprintf("%s_%c", name, k ? 'v' : 'w');
		path[npre] = part;
		r = put_tensor(w, p->ndim, size, buf + k * half, n, path);
		free(part);
	}
	return r;
}

int megatron_fsdp_write(const struct megatron_export *e, const json_t *config, const char *dir)
{
	struct dist_group tpg;
	struct mem_pool pool;
	struct gpt_model m;
	if (megatron_plan_tp1(&m, &pool, &tpg, e->c) < 0)
		return -1;
	struct dcp_writer *w = dcp_create(dir);
	int rc = w ? 0 : -1;
	/* the wrappers' prefixes: Megatron-FSDP's module (and Float16Module's in
	 * 16-bit runs) around the model; the optimizer names parameters from the
	 * DDP wrapper around those */
	const char *wrap = e->dtype == CKPT_F32 ? "module." : "module.module.";
	struct pk_doc *d = pk_doc_new();
	struct pk_value *common = pk_dict(d);
	struct pk_value *groups = NULL;
	int64_t step = 0;
	if (rc == 0 && e->of >= 0) {
		/* Megatron's param groups and scheduler state, as torch_dist has them */
		if (megatron_optimizer_common(d, common, e) < 0 ||
		    ckpt_get_attr_i64(e->r, e->of, NULL, "step", &step) < 0) {
			rc = -1;
		} else {
			const struct pk_value *o = pk_get(common, "optimizer");
			/* with experts torch_dist's is two chained optimizers, {0: the
			 * dense parameters', 1: the experts'}; Megatron-FSDP keeps one,
			 * the experts in the dense parameters' groups */
			if (o->kind == PK_DICT && o->seq.n && o->seq.v[0]->kind == PK_INT)
				o = o->seq.v[1];
			if (e->dtype != CKPT_F32)
				o = pk_get(o, "optimizer");
			groups = pk_get(o, "param_groups");
		}
	}
	float *buf = NULL;
	size_t cap = 0;
	for (int i = 0; rc == 0 && i < m.reg.n; i++) {
		const struct param *p = &m.reg.p[i];
		if (p->flags & PARAM_SHARED)
			continue;
		size_t need = megatron_global_need(e, p);
		if (need > cap) {
			free(buf);
			buf = xmalloc(need * sizeof(float));
			cap = need;
		}
		char *mname = model_name(p->name, e->grouped);
		char *wname = xasprintf("%s%s", wrap, mname), *oname = xasprintf("module.%s", wname);
		free(mname);
		static const char *const model_pre[] = { "model" };
		rc = put_param(w, e, p, e->mf, p->name, buf, 1, model_pre, wname, NULL);
		static const char *const state_pre[] = { "optimizer", "state" };
		static const char *const moments[] = { "exp_avg", "exp_avg_sq" };
		for (int k = 0; rc == 0 && e->of >= 0 && k < 2; k++) {
			char *src = xasprintf("%s/%s", moments[k], p->name);
			rc = put_param(w, e, p, e->of, src, buf, 2, state_pre, oname, moments[k]);
			free(src);
		}
		/* torch's Adam keeps the step per parameter (a float32 scalar);
		 * Transformer Engine's FusedAdam in its group (below) */
		float fstep = (float)step;
		for (int k = 0; rc == 0 && e->of >= 0 && k < 1 + glu(p); k++) {
			char *part = glu(p) ? xasprintf("%s_%c", oname, k ? 'v' : 'w') : xstrdup(oname);
			const char *path[] = { "optimizer", "state", part, "step" };
			rc = put_tensor(w, 0, NULL, &fstep, 4, path);
			free(part);
		}
		/* the parameter's group: Megatron's param_groups[1] holds the
		 * parameters without weight decay (biases, norms) */
		const struct pk_value *g = groups ? groups->seq.v[p->flags & PARAM_NO_WD ? 1 : 0] : NULL;
		for (size_t k = 0; rc == 0 && g && k < g->seq.n; k++) {
			const char *path[] = { "optimizer", "param_to_group_meta", oname, g->seq.v[2 * k]->s.p };
			rc = put_object(w, g->seq.v[2 * k + 1], 4, path);
		}
		if (rc == 0 && g) {
			const char *path[] = { "optimizer", "param_to_group_meta", oname, "step" };
			rc = put_object(w, pk_int(d, step), 4, path);
		}
		free(wname);
		free(oname);
	}
	/* the routers' expert biases: fp32 buffers beside the parameters */
	float *bias = xmalloc(((size_t)e->c->E + 1) * sizeof(float));
	for (int l = 0; rc == 0 && l < e->c->L + e->c->mtp; l++) {
		char name[PARAM_NAME_MAX];
		int k = megatron_read_expert_bias(e, l, name, sizeof(name), bias);
		if (k <= 0) {
			rc = k;
			continue;
		}
		char *wname = xasprintf("%s%s", wrap, name);
		const char *path[] = { "model", wname };
		int64_t size[1] = { e->c->E };
		rc = put_tensor(w, 1, size, bias, 2, path);
		free(wname);
	}
	free(bias);
	free(buf);
	gpt_free(&m);
	/* the scheduler's state, field by field (a dict: DCP flattens it) */
	const struct pk_value *sched = pk_get(common, "opt_param_scheduler");
	for (size_t k = 0; rc == 0 && sched && k < sched->seq.n; k++) {
		const char *path[] = { "opt_param_scheduler", sched->seq.v[2 * k]->s.p };
		rc = put_object(w, sched->seq.v[2 * k + 1], 2, path);
	}
	struct pk_value *args = rc == 0 ? megatron_args(d, e, config) : NULL;
	if (args) { /* what a Megatron-FSDP run has (the format requires it) */
		pk_set_str(d, args->obj.state, "use_megatron_fsdp", pk_bool(d, true));
		pk_set_str(d, args->obj.state, "use_distributed_optimizer", pk_bool(d, true));
		pk_set_str(d, args->obj.state, "data_parallel_sharding_strategy", pk_str(d, "optim_grads_params"));
	}
	struct {
		const char *key;
		struct pk_value *v;
	} top[] = { { "args", args },
		    { "checkpoint_version", pk_float(d, 3.0) },
		    { "iteration", pk_int(d, e->iteration < 0 ? 0 : e->iteration) },
		    { "num_floating_point_operations_so_far", pk_int(d, 0) } };
	for (size_t k = 0; rc == 0 && k < sizeof(top) / sizeof(top[0]); k++)
		rc = put_object(w, top[k].v, 1, &top[k].key);
	pk_doc_free(d);
	if (rc == 0)
		return dcp_finish(w);
	dcp_abort(w);
	return -1;
}

/* ---- fsdp_dtensor -> megac ---- */

/* name without the wrappers' leading "module." prefixes */
static const char *unwrapped(const char *name)
{
	while (has_prefix(name, "module."))
		name += 7;
	return name;
}

/* A SwiGLU linear_fc1 half (a name ending in linear_fc1.weight_w, ..._v,
 * linear_fc1.bias_w or ..._v)? */
static bool glu_half(const char *name)
{
	static const char *const halves[] = { "linear_fc1.weight_w", "linear_fc1.weight_v", "linear_fc1.bias_w",
					      "linear_fc1.bias_v" };
	for (size_t i = 0; i < sizeof(halves) / sizeof(halves[0]); i++)
		if (has_suffix(name, halves[i]))
			return true;
	return false;
}

/* a one-element tensor or a number, as a double */
static int number_of(const struct pk_value *v, double *out)
{
	if (v && (v->kind == PK_INT || v->kind == PK_FLOAT)) {
		*out = v->kind == PK_INT ? (double)v->i : v->f;
		return 0;
	}
	if (!v || v->kind != PK_TENSOR || pk_tensor_numel(v) != 1)
		return -1;
	union {
		float f;
		double d;
		int64_t i;
		unsigned char b[8];
	} u;
	pk_tensor_gather(v, u.b);
	switch (v->t.storage->st.dtype) {
	case PK_DT_F32: *out = u.f; return 0;
	case PK_DT_F64: *out = u.d; return 0;
	case PK_DT_I64: *out = (double)u.i; return 0;
	default: return -1;
	}
}

/* What the items say of Adam, gathered while reading them. */
struct adam_in {
	bool moments;        /* exp_avg tensors were read */
	bool have_step;
	double step;         /* each parameter's (they agree) */
	const char *step_of; /* the first item it came from */
	struct pk_value *betas, *eps; /* from a parameter's group */
};

static int take_step(struct adam_in *ad, double step, const char *where, const char *fqn)
{
	if (!ad->have_step) {
		ad->have_step = true;
		ad->step = step;
		ad->step_of = fqn;
		return 0;
	}
	if (step != ad->step)
		return error("%s: Adam's step %g of '%s' is not the %g of '%s'", where, step, fqn, ad->step,
			     ad->step_of);
	return 0;
}

/* Join the SwiGLU halves of halves (name_w / name_v) into model. */
static int join_halves(struct pk_doc *d, struct pk_value *model, const struct pk_value *halves, const char *where)
{
	for (size_t i = 0; i < halves->seq.n; i++) {
		const char *key = halves->seq.v[2 * i]->s.p;
		size_t n = strlen(key);
		if (key[n - 1] != 'w')
			continue;
		char *vkey = xstrdup(key);
		vkey[n - 1] = 'v';
		const struct pk_value *tw = halves->seq.v[2 * i + 1], *tv = pk_get(halves, vkey);
		free(vkey);
		char *whole = xasprintf("%.*s", (int)n - 2, key);
		int rc = 0;
		if (!tv)
			rc = error("%s: '%s' has no other half ('%.*sv')", where, key, (int)n - 1, key);
		else if (tv->t.storage->st.dtype != tw->t.storage->st.dtype || tv->t.ndim != tw->t.ndim ||
			 (tw->t.ndim == 2 && tv->t.size[1] != tw->t.size[1]) || tv->t.size[0] != tw->t.size[0])
			rc = error("%s: the halves of '%s' (_w and _v) differ in dtype or shape", where, whole);
		if (rc == 0) {
			enum pk_dtype dt = tw->t.storage->st.dtype;
			int64_t nw = pk_tensor_numel(tw);
			int64_t size[2] = { 2 * tw->t.size[0], tw->t.ndim == 2 ? tw->t.size[1] : 1 };
			size_t es = pk_dtype_size(dt);
			char *buf = xmalloc((size_t)(2 * nw) * es + 1);
			pk_doc_attach(d, free, buf);
			pk_tensor_gather(tw, buf);
			pk_tensor_gather(tv, buf + (size_t)nw * es);
			struct pk_value *t = pk_tensor(d, pk_storage(d, dt, buf, 2 * nw), 0, tw->t.ndim, size, NULL);
			if (!t)
				rc = -1;
			else
				pk_set_str(d, model, whole, t);
		}
		free(whole);
		if (rc < 0)
			return -1;
	}
	for (size_t i = 0; i < halves->seq.n; i++) { /* a _v without its _w */
		const char *key = halves->seq.v[2 * i]->s.p;
		size_t n = strlen(key);
		char *whole = xasprintf("%.*s", (int)n - 2, key);
		bool joined = pk_get(model, whole) != NULL;
		free(whole);
		if (!joined)
			return error("%s: '%s' has no other half ('%.*sw')", where, key, (int)n - 1, key);
	}
	return 0;
}

/* A tensor item's elements into a tensor node of d. */
static struct pk_value *read_tensor(struct dcp *c, struct pk_doc *d, const struct dcp_item *it)
{
	int64_t n = 1;
	for (int j = 0; j < it->ndim; j++)
		n *= it->size[j];
	void *buf = xmalloc((size_t)n * pk_dtype_size(it->dtype) + 1);
	pk_doc_attach(d, free, buf);
	if (dcp_read_tensor(c, it, buf) < 0)
		return NULL;
	return pk_tensor(d, pk_storage(d, it->dtype, buf, n), 0, it->ndim, it->size, NULL);
}

/* megac's name of Megatron's parameter name (and what follows it): a
 * depth's layer mtp_model_layer (Megatron's newer module name) as
 * transformer_layer, TEGroupedMLP's experts ...mlp.experts.linear_fc<n>.weight<e>
 * as SequentialMLP's ...mlp.experts.local_experts.<e>.linear_fc<n>.weight */
static char *megac_name(const char *name)
{
	static const char ml[] = ".mtp_model_layer.", gr[] = ".mlp.experts.linear_fc";
	char *s = xstrdup(name), *p;
	int k, used = 0;
	if (sscanf(s, "mtp.layers.%d%n", &k, &used) == 1 && used && !strncmp(s + used, ml, sizeof(ml) - 1)) {
		char *t = xasprintf("%.*s.transformer_layer.%s", used, s, s + used + sizeof(ml) - 1);
		free(s);
		s = t;
	}
	int fc, ex;
	used = 0;
	if ((p = strstr(s, gr)) && sscanf(p + sizeof(gr) - 1, "%d.weight%d%n", &fc, &ex, &used) == 2 && used) {
		char *t = xasprintf("%.*s.mlp.experts.local_experts.%d.linear_fc%d.weight%s", (int)(p - s), s, ex, fc,
				    p + sizeof(gr) - 1 + used);
		free(s);
		s = t;
	}
	return s;
}

static int read_named(struct dcp *c, struct pk_doc *d, const struct dcp_item *it, const char *where,
		      const char *fqn, const char *name, bool state, bool meta, struct pk_value *model,
		      struct pk_value *halves, struct adam_in *ad);

/* One item of the checkpoint: into root, model, halves, sched or ad. */
static int read_item(struct dcp *c, struct pk_doc *d, const struct dcp_item *it, const char *where, bool want_optim,
		     struct pk_value *root, struct pk_value *model, struct pk_value *halves, struct pk_value *sched,
		     struct adam_in *ad)
{
	static const char *const top[] = { "args", "iteration", "checkpoint_version",
					   "num_floating_point_operations_so_far" };
	const char *fqn = it->fqn;
	for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
		if (!strcmp(fqn, top[i]) && !it->tensor) {
			struct pk_value *v = dcp_read_object(c, d, it);
			if (!v)
				return -1;
			pk_set_str(d, root, fqn, v);
			return 0;
		}
	if (has_prefix(fqn, "rng_state") || has_prefix(fqn, "rerun_state_machine"))
		return 0; /* (megac's own RNG; Megatron's rerun machine state) */
	if (has_prefix(fqn, "opt_param_scheduler.") && !it->tensor) {
		if (!want_optim)
			return 0;
		struct pk_value *v = dcp_read_object(c, d, it);
		if (!v)
			return -1;
		pk_set_str(d, sched, fqn + strlen("opt_param_scheduler."), v);
		return 0;
	}
	bool state = has_prefix(fqn, "optimizer.state."), meta = has_prefix(fqn, "optimizer.param_to_group_meta.");
	const char *name = NULL;
	if (has_prefix(fqn, "model."))
		name = unwrapped(fqn + strlen("model."));
	else if (state)
		name = unwrapped(fqn + strlen("optimizer.state."));
	else if (meta)
		name = unwrapped(fqn + strlen("optimizer.param_to_group_meta."));
	if (!name) {
		if (it->tensor)
			return error("%s: tensor '%s' is not one megac reads (not model.*, optimizer.state.*)", where,
				     fqn);
		return 0; /* other objects: nothing megac keeps */
	}
	if (strstr(name, ".linear_qkv_down_proj."))
		return error("%s: '%s': multi-latent attention with --mla-down-proj-fusion (the q and kv down projections "
			     "in one tensor) is not read by megac yet",
			     where, fqn);
	if ((state || meta) && !want_optim)
		return 0;
	char *canon = megac_name(name);
	int rc = read_named(c, d, it, where, fqn, canon, state, meta, model, halves, ad);
	free(canon);
	return rc;
}

/* The tensor or group field `name` (megac's name, then the field for
 * optimizer items) of item it: into model, halves or ad. */
static int read_named(struct dcp *c, struct pk_doc *d, const struct dcp_item *it, const char *where,
		      const char *fqn, const char *name, bool state, bool meta, struct pk_value *model,
		      struct pk_value *halves, struct adam_in *ad)
{
	if (meta) { /* <name>.<field>: Adam's constants, and TE's FusedAdam's step */
		const char *field = strrchr(name, '.');
		bool betas = field && !strcmp(field, ".betas"), eps = field && !strcmp(field, ".eps"),
		     step = field && !strcmp(field, ".step");
		if ((!betas || ad->betas) && (!eps || ad->eps) && !step)
			return 0;
		struct pk_value *v = dcp_read_object(c, d, it);
		double x;
		if (!v)
			return -1;
		if (betas)
			ad->betas = v;
		else if (eps)
			ad->eps = v;
		else if (number_of(v, &x) < 0)
			return error("%s: '%s' is not a number", where, fqn);
		else
			return take_step(ad, x, where, fqn);
		return 0;
	}
	if (has_suffix(name, "._extra_state"))
		return 0; /* (Megatron leaves TE's out; nothing megac keeps) */
	if (!it->tensor)
		return error("%s: '%s' is not a tensor", where, fqn);
	char *key = NULL;
	if (state) { /* <name>.<field>: the parameter's Adam state */
		const char *dot = strrchr(name, '.');
		const char *field = dot ? dot + 1 : "";
		if (!strcmp(field, "step")) {
			struct pk_value *t = read_tensor(c, d, it);
			double x;
			if (!t)
				return -1;
			if (number_of(t, &x) < 0)
				return error("%s: '%s' is not a one-element tensor", where, fqn);
			return take_step(ad, x, where, fqn);
		}
		if (strcmp(field, "exp_avg") && strcmp(field, "exp_avg_sq"))
			return error("%s: optimizer state '%s' is not Adam's by parameter name (exp_avg, exp_avg_sq, "
				     "step): not read; --no-optim reads the weights",
				     where, fqn);
		if (dot == name || (name[0] >= '0' && name[0] <= '9'))
			return error("%s: optimizer state '%s' is indexed by position (a torch_dcp checkpoint?), not "
				     "by parameter name: not read; --no-optim reads the weights",
				     where, fqn);
		key = xasprintf("optimizer.state.%s.%.*s", field, (int)(dot - name), name);
		ad->moments |= !strcmp(field, "exp_avg");
	} else {
		key = xstrdup(name);
	}
	struct pk_value *t = read_tensor(c, d, it);
	if (t)
		pk_set_str(d, glu_half(key) ? halves : model, key, t);
	free(key);
	return t ? 0 : -1;
}

int megatron_fsdp_read(const char *dir, struct pk_doc *d, struct pk_value **rootp, struct pk_value **modelp,
		       bool want_optim)
{
	char *where = xasprintf("%s/.metadata", dir);
	struct dcp *c = dcp_open(dir);
	if (!c) {
		free(where);
		return -1;
	}
	struct pk_value *root = pk_dict(d), *model = pk_odict(d), *halves = pk_dict(d), *sched = pk_dict(d);
	struct adam_in ad = { 0 };
	int rc = 0;
	for (int i = 0; rc == 0 && i < dcp_count(c); i++)
		rc = read_item(c, d, dcp_item(c, i), where, want_optim, root, model, halves, sched, &ad);
	if (rc == 0 && !pk_get(root, "args"))
		rc = error("%s: no 'args' item: not an fsdp_dtensor checkpoint of Megatron%s", where,
			   dcp_count(c) && has_prefix(dcp_item(c, 0)->fqn, "common_state") ?
				   " (its common_state items say torch_dist, but metadata.json is missing)" :
				   "");
	dcp_close(c);
	if (rc == 0)
		rc = join_halves(d, model, halves, where);
	if (rc == 0 && ad.moments) { /* the common state torch_dist's reader would give */
		if (!ad.have_step)
			rc = error("%s: Adam's moments are there but not its step (optimizer.state.<name>.step)",
				   where);
		if (rc == 0 && !sched->seq.n)
			rc = error("%s: Adam's moments are there but not the scheduler's state (opt_param_scheduler.*)",
				   where);
		struct pk_value *opt = pk_dict(d), *st = pk_dict(d), *groups = pk_list(d), *g = pk_dict(d);
		if (ad.have_step && ad.step > 0) {
			float *s = xmalloc(sizeof(float));
			*s = (float)ad.step;
			pk_doc_attach(d, free, s);
			struct pk_value *t = pk_tensor(d, pk_storage(d, PK_DT_F32, s, 1), 0, 0, NULL, NULL);
			pk_set_str(d, st, "common_step", t);
		}
		if (ad.betas && ad.eps) {
			pk_set_str(d, g, "betas", ad.betas);
			pk_set_str(d, g, "eps", ad.eps);
		}
		pk_append(groups, g);
		pk_set_str(d, opt, "state", st);
		pk_set_str(d, opt, "param_groups", groups);
		/* fp16's loss scaler is not in the format: a continued Megatron run
		 * starts its scaler afresh, from the args */
		const struct pk_value *args = pk_get(root, "args"), *fp16 = NULL, *scale = NULL, *hyst = NULL;
		if (args && args->kind == PK_OBJECT && args->obj.state && args->obj.state->kind == PK_DICT) {
			fp16 = pk_get(args->obj.state, "fp16");
			scale = pk_get(args->obj.state, "initial_loss_scale");
			hyst = pk_get(args->obj.state, "hysteresis");
		}
		if (fp16 && fp16->kind == PK_BOOL && fp16->b) {
			struct pk_value *outer = pk_dict(d), *gs = pk_dict(d);
			double x;
			pk_set_str(d, gs, "scale", pk_float(d, number_of(scale, &x) == 0 ? x : 4294967296.0));
			pk_set_str(d, gs, "growth_tracker", pk_int(d, 0));
			pk_set_str(d, gs, "hysteresis_tracker", pk_int(d, number_of(hyst, &x) == 0 ? (int64_t)x : 2));
			pk_set_str(d, outer, "optimizer", opt);
			pk_set_str(d, outer, "grad_scaler", gs);
			opt = outer;
		}
		pk_set_str(d, root, "optimizer", opt);
		pk_set_str(d, root, "opt_param_scheduler", sched);
	}
	free(where);
	*rootp = root;
	*modelp = model;
	return rc;
}
