/*
 * megatron_ckpt.c - Megatron-LM's legacy `torch` checkpoint format out of
 * megac's HDF5 checkpoint (see megatron_ckpt.h).
 *
 * What Megatron's save_checkpoint writes with --ckpt-format torch, one file
 * per tensor- and pipeline-parallel rank:
 *
 *   <save>/latest_checkpointed_iteration.txt
 *   <save>/iter_0000500/mp_rank_00/model_optim_rng.pt          (PP 1)
 *   <save>/iter_0000500/mp_rank_01_002/model_optim_rng.pt      (TP rank 1, PP stage 2)
 *
 * each a torch.save of {"args": argparse.Namespace, "checkpoint_version":
 * 3.0, "iteration": N, "model": OrderedDict of the rank's tensors}. The
 * tensors are the rank's shards under Megatron Core's names with the
 * Transformer Engine layer spec (megac's own names), the layers numbered
 * from 0 within each stage, as Megatron numbers a stage's local layers. A
 * shard is cut from the global tensor by the rank's parameter registry
 * (params_global_pos_rank: TP's rows or columns, piece by piece, so
 * SwiGLU's [gate; up] halves per rank), the split train itself uses. On
 * the last stage of a pipeline with tied embeddings, the copy of the word
 * embeddings is Megatron's output_layer.weight. Every Transformer Engine
 * module carries an empty `_extra_state` (uint8, 0 elements: TE's state
 * without FP8), as TE's get_extra_state returns it, so that a strict load
 * finds every key.
 *
 * Mixture-of-experts layers, multi-token prediction depths, expert-parallel
 * files (mp_rank_..._EEE) and virtual stages (model0, model1, ...) are
 * named and placed by megatron_moe.c. With the source's optim.h5 (dense
 * models), each file holds "optimizer" and "opt_param_scheduler" as
 * Megatron's non-distributed optimizer saves them (rank_optim: Adam's state
 * by position, numbered through the param groups in named_parameters()
 * order); read back by legacy_optim_rank. Not written: the RNG state.
 *
 * Read (--from megatron): the legacy format of any TP x PP x EP, and torch_dist
 * folders (PyTorch Distributed Checkpoint, lib/ckpt/dcp.h), whose global
 * tensors are taken as the one rank file of a TP1 x PP1 legacy checkpoint
 * once the stacked layers are split (read_dist).
 */
#include "convert/megatron_ckpt.h"
#include "convert/megatron_distopt.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "base/xalloc.h"
#include "ckpt/dcp.h"
#include "ckpt/dtype.h"
#include "ckpt/pickle.h"
#include "ckpt/torch_zip.h"
#include "convert/convert_int.h"
#include "convert/megatron_fsdp.h"
#include "convert/megatron_moe.h"
#include "data/tok.h"
#include "dist/dist.h"
#include "memcalc/megac_mem.h"
#include "model/gpt.h"
#include "model/gpt_ckpt.h"
#include "tensor/mem.h"
#include "tensor/params.h"

/* The tensors of one rank's file: their bytes live until the file is written. */
struct rank_file {
	void **bufs;
	size_t n, cap;
};

static void *keep(struct rank_file *rf, size_t bytes)
{
	if (rf->n == rf->cap) {
		rf->cap = rf->cap ? 2 * rf->cap : 64;
		rf->bufs = xrealloc(rf->bufs, rf->cap * sizeof(*rf->bufs));
	}
	return rf->bufs[rf->n++] = xcalloc(bytes ? bytes : 1, 1);
}

static void rank_file_free(struct rank_file *rf)
{
	for (size_t i = 0; i < rf->n; i++)
		free(rf->bufs[i]);
	free(rf->bufs);
	memset(rf, 0, sizeof(*rf));
}

static enum pk_dtype pk_of(enum ckpt_dtype dt)
{
	return dt == CKPT_BF16 ? PK_DT_BF16 : dt == CKPT_F16 ? PK_DT_F16 : PK_DT_F32;
}

/* A JSON scalar as a pickle value; NULL for arrays and objects. */
static struct pk_value *pk_of_json(struct pk_doc *d, const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_INTEGER:
		return pk_int(d, json_integer_value(v));
	case JSON_REAL:
		return pk_float(d, json_real_value(v));
	case JSON_TRUE:
	case JSON_FALSE:
		return pk_bool(d, json_is_true(v));
	case JSON_STRING:
		return pk_str(d, json_string_value(v));
	case JSON_NULL:
		return pk_none(d);
	default:
		return NULL;
	}
}

/* Megatron's args: the model configuration megac records (its keys are
 * Megatron's argument names), the target layout and the dtype. */
static struct pk_value *args_namespace(struct pk_doc *d, const struct megatron_export *e, const json_t *config)
{
	struct pk_value *ns = pk_namespace(d), *st = ns->obj.state;
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)config, key, v) {
		struct pk_value *pv = pk_of_json(d, v);
		if (pv)
			pk_set_str(d, st, key, pv);
	}
	if (e->c->E > 0) { /* --moe-layer-freq as Megatron parses it: 1 (every layer), else the list */
		bool all = true;
		for (int l = 0; l < e->c->L; l++)
			all &= e->c->moe_layer[l] != 0;
		struct pk_value *freq = all ? pk_int(d, 1) : pk_list(d);
		for (int l = 0; !all && l < e->c->L; l++)
			pk_append(freq, pk_int(d, e->c->moe_layer[l]));
		pk_set_str(d, st, "moe_layer_freq", freq);
		pk_set_str(d, st, "moe_grouped_gemm", pk_bool(d, e->grouped));
	}
	pk_set_str(d, st, "padded_vocab_size", pk_int(d, e->c->Vp));
	pk_set_str(d, st, "tensor_model_parallel_size", pk_int(d, e->tp));
	pk_set_str(d, st, "pipeline_model_parallel_size", pk_int(d, e->pp));
	pk_set_str(d, st, "expert_model_parallel_size", pk_int(d, e->ep > 1 ? e->ep : 1));
	pk_set_str(d, st, "virtual_pipeline_model_parallel_size", e->vpp > 1 ? pk_int(d, e->vpp) : pk_none(d));
	/* Megatron's default, which only --no-position-embedding turns off (a Core
	 * model's position embedding follows position_embedding_type); a load
	 * compares it with the flags */
	if (!pk_get(st, "add_position_embedding"))
		pk_set_str(d, st, "add_position_embedding", pk_bool(d, true));
	pk_set_str(d, st, "iteration", pk_int(d, e->iteration < 0 ? 0 : e->iteration));
	/* the counters a continued run takes up (Megatron reads them from args) */
	static const char *const counters[] = { "consumed_train_samples", "consumed_valid_samples",
						"skipped_train_samples" };
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		int64_t n = 0;
		if (ckpt_has_attr(e->r, e->mf, NULL, counters[i]) == 1 &&
		    ckpt_get_attr_i64(e->r, e->mf, NULL, counters[i], &n) < 0)
			n = 0;
		pk_set_str(d, st, counters[i], pk_int(d, n));
	}
	pk_set_str(d, st, "bf16", pk_bool(d, e->dtype == CKPT_BF16));
	pk_set_str(d, st, "fp16", pk_bool(d, e->dtype == CKPT_F16));
	pk_set_str(d, st, "ckpt_format", pk_str(d, e->fsdp ? "fsdp_dtensor" : e->dist ? "torch_dist" : "torch"));
	pk_set_str(d, st, "params_dtype", pk_global(d, e->dtype == CKPT_BF16 ? "torch.bfloat16" :
						 e->dtype == CKPT_F16 ? "torch.float16" : "torch.float32"));
	return ns;
}

/* Read global tensor p (its vocabulary rows padded or cut to the target's)
 * as float32. */
static int read_global_from(const struct megatron_export *e, int f, const char *name, const struct param *p,
			    float *out);

static int read_global(const struct megatron_export *e, const struct param *p, float *out)
{
	return read_global_from(e, e->mf, p->name, p, out);
}

/* the same for tensor `name` of source file f (optim.h5's moments) */
static int read_global_from(const struct megatron_export *e, int f, const char *name, const struct param *p,
			    float *out)
{
	int64_t shape[2] = { p->shape[0], p->ndim == 2 ? p->shape[1] : 1 };
	bool vocab = (p->flags & PARAM_EMB_OR_OUT) && p->ndim == 2 && p->shape[0] == e->c->Vp;
	int64_t rows = vocab ? e->src_vp : shape[0];
	int64_t src[2] = { rows, shape[1] };
	size_t n = (size_t)(rows < shape[0] ? shape[0] : rows) * (size_t)shape[1];
	enum ckpt_dtype dt;
	int nd;
	int64_t have[CKPT_MAX_NDIM];
	if (ckpt_tensor_info(e->r, f, name, &dt, &nd, have) < 0)
		return -1;
	if (nd != p->ndim || have[0] != src[0] || (nd == 2 && have[1] != src[1]))
		return error("'%s': tensor '%s' has another shape than the model's", ckpt_reader_dir(e->r), name);
	void *raw = xmalloc(n * ckpt_dtype_size(dt));
	int rc = ckpt_get_tensor(e->r, f, name, dt, nd, have, raw);
	if (rc == 0) {
		ckpt_to_f32(dt, raw, (size_t)src[0] * (size_t)src[1], out);
		if (rows < shape[0]) /* new padding rows: zero */
			memset(out + (size_t)rows * shape[1], 0, (size_t)(shape[0] - rows) * shape[1] * sizeof(float));
	}
	free(raw);
	return rc;
}

/* Layer l's expert bias (l >= L: a depth's layer), fp32 [E], a router
 * buffer beside the parameters, into bias and its megac name into name:
 * 1, or 0 when the layer has none (dense, or no --moe-router-enable-expert-bias). */
static int read_expert_bias(const struct megatron_export *e, int l, char *name, size_t n, float *bias)
{
	const struct gpt_config *c = e->c;
	if (!c->router.expert_bias || !megatron_layer_is_moe(c, l))
		return 0;
	megatron_expert_bias_name(c, l, name, n);
	int64_t shape[1] = { c->E };
	return ckpt_get_tensor(e->r, e->mf, name, CKPT_F32, 1, shape, bias) < 0 ? -1 : 1;
}

/* Expert e of megac's name, or -1 for a tensor of no expert. */
static int expert_index(const char *name)
{
	const char *p = strstr(name, ".mlp.experts.local_experts.");
	return p ? atoi(p + strlen(".mlp.experts.local_experts.")) : -1;
}

/* One rank's state dicts (models[v] per model chunk v, its layers from
 * l0[v]): its shards of every tensor of model m, the experts [e0, e0 + El)
 * only, and the expert biases of its layers. */
static int rank_model(struct pk_doc *d, struct pk_value **models, const int *l0, const int *nl, int nchunks,
		      struct rank_file *rf, const struct megatron_export *e, const struct gpt_model *m, int rank, int e0,
		      int El, bool last_stage_copy_is_output)
{
	float *global = NULL, *local = NULL;
	size_t cap = 0;
	int rc = 0;
	for (int i = 0; rc == 0 && i < m->reg.n; i++) {
		const struct param *p = &m->reg.p[i];
		int ex = expert_index(p->name);
		if (ex >= 0 && (ex < e0 || ex >= e0 + El))
			continue;
		size_t need = megatron_global_need(e, p);
		if (need > cap) {
			free(global);
			free(local);
			global = xmalloc(need * sizeof(float));
			local = xmalloc(need * sizeof(float));
			cap = need;
		}
		if ((rc = read_global(e, p, global)) < 0)
			break;
		int64_t gcols = p->ndim == 2 ? p->shape[1] : 1;
		for (size_t x = 0; x < p->numel; x++) {
			int64_t row, col;
			params_global_pos_rank(p, rank, x, &row, &col);
			local[x] = global[(size_t)row * (size_t)gcols + (size_t)col];
		}
		void *bytes = keep(rf, p->numel * ckpt_dtype_size(e->dtype));
		ckpt_from_f32(e->dtype, local, p->numel, bytes);
		int64_t size[2] = { p->local_shape[0], p->ndim == 2 ? p->local_shape[1] : 1 };
		struct pk_value *t = pk_tensor(d, pk_storage(d, pk_of(e->dtype), bytes, (int64_t)p->numel), 0, p->ndim,
					       size, NULL);
		/* (tied, PP > 1: the last stage's copy of the word embeddings is its output layer) */
		bool copy = (p->flags & PARAM_SHARED) && last_stage_copy_is_output;
		int v = megatron_chunk_of(p->name, nchunks, l0, nl, e->c->L);
		char *name = copy ? xstrdup("output_layer.weight") : megatron_legacy_name(p->name, l0[v], e0, e->grouped);
		if (!t) {
			rc = -1;
		} else {
			pk_set_str(d, models[v], name, t);
			megatron_legacy_extra_state(d, models[v], name);
		}
		free(name);
	}
	free(global);
	free(local);
	/* the expert biases of this rank's layers (fp32, whole on every rank) */
	for (int v = 0; rc == 0 && v < nchunks; v++) {
		bool last = v == nchunks - 1 && m->chunks[v].post;
		for (int l = l0[v]; rc == 0 && l < l0[v] + nl[v] + (last ? e->c->mtp : 0); l++) {
			int g = l < l0[v] + nl[v] ? l : e->c->L + (l - l0[v] - nl[v]);
			char name[PARAM_NAME_MAX];
			float *bias = keep(rf, (size_t)e->c->E * sizeof(float));
			int k = read_expert_bias(e, g, name, sizeof(name), bias);
			if (k <= 0) {
				rc = k;
				continue;
			}
			int64_t size[1] = { e->c->E };
			char *lname = megatron_legacy_name(name, l0[v], e0, e->grouped);
			struct pk_value *t = pk_tensor(d, pk_storage(d, PK_DT_F32, bias, e->c->E), 0, 1, size, NULL);
			if (t)
				pk_set_str(d, models[v], lname, t);
			else
				rc = -1;
			free(lname);
		}
	}
	return rc;
}

/* The model TP rank `rank` of stage `stage` holds (vpp model chunks), built
 * with report_memory's counting tables: its parameter registry (names,
 * local shapes, the split) without any memory. Every expert is registered
 * (no expert parallelism: each expert is split over TP as an EP rank splits
 * it). pool and tpg must live as long as m. */
static int plan_model(struct gpt_model *m, struct mem_pool *pool, struct dist_group *tpg, const struct gpt_config *c,
		      int tp, int rank, int pp, int stage, int vpp)
{
	*tpg = (struct dist_group){ .name = "tensor-model-parallel", .rank = rank, .size = tp };
	struct gpt_setup pipe = { .B = 1, .precision = GPT_FP32, .tp = tpg, .pp = pp, .stage = stage,
				  .vpp = vpp > 1 ? vpp : 1 };
	mem_pool_init(pool, megac_mem_plan_ops(false));
	return gpt_init_pipe(m, c, megac_mem_plan_ops(false), pool, &pipe);
}

size_t megatron_global_need(const struct megatron_export *e, const struct param *p)
{
	size_t gn = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
	size_t vocab = (size_t)e->src_vp * (size_t)e->c->h;
	return gn > vocab ? gn : vocab;
}

int megatron_stage_plan(struct megatron_stage *st, const struct gpt_config *c, int tp, int pp, int stage, int vpp)
{
	st->m = xcalloc((size_t)tp, sizeof(*st->m));
	st->pool = xcalloc((size_t)tp, sizeof(*st->pool));
	st->tpg = xcalloc((size_t)tp, sizeof(*st->tpg));
	st->made = 0;
	for (int t = 0; t < tp; t++) {
		if (plan_model(&st->m[t], &st->pool[t], &st->tpg[t], c, tp, t, pp, stage, vpp) < 0)
			return -1;
		st->made++;
	}
	return 0;
}

void megatron_stage_free(struct megatron_stage *st)
{
	for (int t = 0; t < st->made; t++)
		gpt_free(&st->m[t]);
	free(st->m);
	free(st->pool);
	free(st->tpg);
}

/* Megatron's folder of a legacy rank: mp_rank_TT, _PPP with pipeline
 * stages, _EEE with expert parallelism */
static char *rank_dir(const char *base, int t, int pp, int s, int ep, int er)
{
	char *dir = pp > 1 ? xasprintf("%s/mp_rank_%02d_%03d", base, t, s) : xasprintf("%s/mp_rank_%02d", base, t);
	if (ep > 1) {
		char *x = xasprintf("%s_%03d", dir, er);
		free(dir);
		dir = x;
	}
	return dir;
}

/* the rank file's optimizer and scheduler state (below) */
static int rank_optim(struct pk_doc *d, struct pk_value *root, struct rank_file *rf, const struct megatron_export *e,
		      const struct gpt_model *m, int rank);

static int write_rank(const struct megatron_export *e, const json_t *config, const char *tmp, int stage, int rank,
		      int erank)
{
	const struct gpt_config *c = e->c;
	struct dist_group tpg;
	struct mem_pool pool;
	struct gpt_model m;
	if (plan_model(&m, &pool, &tpg, c, e->tp, rank, e->pp, stage, e->vpp) < 0)
		return -1;
	int nchunks = m.nchunks, *l0 = xcalloc((size_t)nchunks, sizeof(int)), *nl = xcalloc((size_t)nchunks, sizeof(int));
	for (int v = 0; v < nchunks; v++) {
		l0[v] = m.chunks[v].l0;
		nl[v] = m.chunks[v].nl;
	}
	int ep = e->ep > 1 ? e->ep : 1, El = c->E > 0 ? c->E / ep : 0;
	struct pk_doc *d = pk_doc_new();
	struct pk_value *root = pk_dict(d), **models = xcalloc((size_t)nchunks, sizeof(*models));
	pk_set_str(d, root, "args", args_namespace(d, e, config));
	pk_set_str(d, root, "checkpoint_version", pk_float(d, 3.0));
	pk_set_str(d, root, "iteration", pk_int(d, e->iteration < 0 ? 0 : e->iteration));
	for (int v = 0; v < nchunks; v++) {
		models[v] = pk_odict(d);
		char *key = nchunks > 1 ? xasprintf("model%d", v) : xstrdup("model");
		pk_set_str(d, root, key, models[v]);
		free(key);
	}
	struct rank_file rf = { 0 };
	int rc = rank_model(d, models, l0, nl, nchunks, &rf, e, &m, rank, erank * El, El,
			    e->pp > 1 && stage == e->pp - 1 && !c->untied);
	if (rc == 0 && e->of >= 0)
		rc = rank_optim(d, root, &rf, e, &m, rank);
	char *dir = rank_dir(tmp, rank, e->pp, stage, ep, erank);
	if (rc == 0 && mkdir(dir, 0777) < 0)
		rc = error_errno("mkdir '%s'", dir);
	char *file = xasprintf("%s/model_optim_rng.pt", dir);
	if (rc == 0)
		rc = torch_save(file, root);
	if (rc == 0)
		rc = fsync_dir(dir);
	free(file);
	free(dir);
	free(models);
	free(l0);
	free(nl);
	pk_doc_free(d);
	rank_file_free(&rf);
	gpt_free(&m);
	return rc;
}

/* ---- megac -> Megatron's torch_dist format ---- */


/*
 * One DCP folder written as one rank: every tensor global (the target
 * layout only pads the vocabulary and goes into args), the layers of
 * decoder.layers.<i>.* stacked into decoder.layers.* of [num_layers, ...]
 * (unless dense and MoE layers differ) and saved one chunk per layer, the
 * experts on an axis of their own (megatron_moe.h), each linear module's
 * _extra_state (and core_attention's) a sharded object per chunk holding
 * [None], as Megatron saves the local spec's, and the common state (args,
 * iteration, ...) as the object common_state/shard_0_1, a one-element list.
 * Then metadata.json, Megatron's marker of the format.
 */
static int dist_extra_states(struct dcp_writer *w, const struct megatron_place *pl)
{
	int rc = 0;
	for (int att = 0; rc == 0 && att < 2; att++) {
		char *key = megatron_dist_extra_state(pl, att);
		if (!key)
			continue;
		struct pk_doc *d = pk_doc_new();
		struct pk_value *v = pk_list(d);
		pk_append(v, pk_none(d));
		rc = dcp_put_object(w, key, v);
		free(key);
		pk_doc_free(d);
	}
	return rc;
}

/* Megatron's scheduler state dict (opt_param_scheduler), in its order, and
 * how optim.h5 keeps each field: 'f' float64, 'i' int64, 's' text; 'w' the
 * warmup length, float64 in optim.h5 and an int in Megatron's dict. */
static const struct sched_field {
	const char *name;
	char kind;
} sched_fields[] = { { "max_lr", 'f' },	  { "lr_warmup_steps", 'w' }, { "num_steps", 'i' },
		     { "lr_decay_style", 's' }, { "lr_decay_steps", 'i' },  { "min_lr", 'f' },
		     { "start_wd", 'f' },	  { "end_wd", 'f' },	      { "wd_incr_style", 's' },
		     { "wd_incr_steps", 'i' } };

/* fp16's dynamic loss scaler, as Megatron's DynamicGradScaler.state_dict
 * holds it: {"scale": float32 tensor, "growth_tracker", "hysteresis_tracker"} */
static int dist_grad_scaler(struct pk_doc *d, struct pk_value *outer, const struct megatron_export *e)
{
	double scale;
	int64_t growth, hyst;
	if (ckpt_get_attr_f64(e->r, e->of, NULL, "loss_scale", &scale) < 0 ||
	    ckpt_get_attr_i64(e->r, e->of, NULL, "growth_tracker", &growth) < 0 ||
	    ckpt_get_attr_i64(e->r, e->of, NULL, "hysteresis_tracker", &hyst) < 0)
		return -1;
	float *keep = xmalloc(sizeof(float));
	*keep = (float)scale;
	pk_doc_attach(d, free, keep);
	struct pk_value *gs = pk_dict(d);
	pk_set_str(d, gs, "scale", pk_tensor(d, pk_storage(d, PK_DT_F32, keep, 1), 0, 0, NULL, NULL));
	pk_set_str(d, gs, "growth_tracker", pk_int(d, growth));
	pk_set_str(d, gs, "hysteresis_tracker", pk_int(d, hyst));
	pk_set_str(d, outer, "grad_scaler", gs);
	return 0;
}

/* Megatron's scheduler state dict (opt_param_scheduler) from optim.h5; NULL after error() */
static struct pk_value *sched_dict(struct pk_doc *d, const struct megatron_export *e)
{
	int64_t i64;
	double f64;
	char *str = NULL;
	struct pk_value *sched = pk_dict(d);
	for (size_t i = 0; i < sizeof(sched_fields) / sizeof(sched_fields[0]); i++) {
		const struct sched_field *f = &sched_fields[i];
		int r;
		if (f->kind == 's') {
			r = ckpt_get_attr_str(e->r, e->of, NULL, f->name, &str);
			if (r == 0)
				pk_set_str(d, sched, f->name, pk_str(d, str));
			free(str);
			str = NULL;
		} else if (f->kind == 'i') {
			r = ckpt_get_attr_i64(e->r, e->of, NULL, f->name, &i64);
			if (r == 0)
				pk_set_str(d, sched, f->name, pk_int(d, i64));
		} else {
			r = ckpt_get_attr_f64(e->r, e->of, NULL, f->name, &f64);
			if (r == 0)
				pk_set_str(d, sched, f->name, f->kind == 'w' ? pk_int(d, (int64_t)f64) : pk_float(d, f64));
		}
		if (r < 0)
			return NULL;
	}
	return sched;
}

/* One of Megatron's param groups (without "params"): g 0 the default
 * group, 1 the one without weight decay; expert: the experts' optimizer's */
static struct pk_value *param_group(struct pk_doc *d, const struct megatron_export *e, const struct pk_value *sched,
				    int g, bool expert)
{
	double max_lr = pk_get(sched, "max_lr")->f, min_lr = pk_get(sched, "min_lr")->f, wd = pk_get(sched, "start_wd")->f;
	struct pk_value *pg = pk_dict(d), *betas = pk_tuple(d);
	pk_set_str(d, pg, "is_expert_parallel", pk_bool(d, expert));
	pk_set_str(d, pg, "default_config", pk_bool(d, true));
	pk_set_str(d, pg, "wd_mult", pk_float(d, g ? 0.0 : 1.0));
	pk_set_str(d, pg, "lr_mult", pk_float(d, 1.0));
	pk_set_str(d, pg, "is_decoupled_lr", pk_bool(d, false));
	pk_set_str(d, pg, "max_lr", pk_float(d, max_lr));
	pk_set_str(d, pg, "min_lr", pk_float(d, min_lr));
	pk_set_str(d, pg, "lr", pk_float(d, max_lr));
	pk_append(betas, pk_float(d, e->beta1));
	pk_append(betas, pk_float(d, e->beta2));
	pk_set_str(d, pg, "betas", betas);
	pk_set_str(d, pg, "eps", pk_float(d, e->eps));
	pk_set_str(d, pg, "weight_decay", pk_float(d, g ? 0.0 : wd));
	pk_set_str(d, pg, "amsgrad", pk_bool(d, false));
	pk_set_str(d, pg, "maximize", pk_bool(d, false));
	pk_set_str(d, pg, "foreach", pk_none(d));
	pk_set_str(d, pg, "capturable", pk_bool(d, false));
	pk_set_str(d, pg, "differentiable", pk_bool(d, false));
	pk_set_str(d, pg, "fused", pk_none(d));
	pk_set_str(d, pg, "decoupled_weight_decay", pk_bool(d, true));
	return pg;
}

/* a float32 scalar tensor of its own storage */
static struct pk_value *f32_scalar(struct pk_doc *d, float x)
{
	float *keep = xmalloc(sizeof(float));
	*keep = x;
	pk_doc_attach(d, free, keep);
	return pk_tensor(d, pk_storage(d, PK_DT_F32, keep, 1), 0, 0, NULL, NULL);
}

/* The optimizer's part of the common state, as Megatron's non-distributed
 * Adam saves it with torch_dist: {"state": {"common_step"}, "param_groups":
 * [weight-decayed group, group without weight decay]} (the parameters
 * themselves are found by name; a 16-bit run's mixed-precision optimizer
 * nests it under "optimizer"), and the scheduler's state dict. */
static int dist_optimizer_common(struct pk_doc *d, struct pk_value *common, const struct megatron_export *e)
{
	int64_t step;
	if (ckpt_get_attr_i64(e->r, e->of, NULL, "step", &step) < 0)
		return -1;
	struct pk_value *sched = sched_dict(d, e);
	if (!sched)
		return -1;
	/* with experts Megatron chains two optimizers, the dense parameters'
	 * and the experts' (the weight-decayed group only: expert biases are
	 * refused), each with its state dict: {0: ..., 1: ...} */
	int nopt = e->c->E > 0 ? 2 : 1;
	struct pk_value *chained = nopt > 1 ? pk_dict(d) : NULL, *one = NULL;
	for (int o = 0; o < nopt; o++) {
		struct pk_value *groups = pk_list(d);
		for (int g = 0; g < (o ? 1 : 2); g++) /* Megatron's order: the default group first, then no weight decay */
			pk_append(groups, param_group(d, e, sched, g, o == 1));
		struct pk_value *st = pk_dict(d), *opt = pk_dict(d);
		if (step) /* (Megatron leaves a step of 0 out) */
			pk_set_str(d, st, "common_step", f32_scalar(d, (float)step));
		pk_set_str(d, opt, "state", st);
		pk_set_str(d, opt, "param_groups", groups);
		if (e->dtype != CKPT_F32) { /* the mixed-precision optimizer's nesting, with fp16's loss scaler beside */
			struct pk_value *outer = pk_dict(d);
			pk_set_str(d, outer, "optimizer", opt);
			if (e->dtype == CKPT_F16 && dist_grad_scaler(d, outer, e) < 0)
				return -1;
			opt = outer;
		}
		if (chained)
			pk_set(d, chained, pk_int(d, o), opt);
		else
			one = opt;
	}
	pk_set_str(d, common, "optimizer", chained ? chained : one);
	pk_set_str(d, common, "opt_param_scheduler", sched);
	return 0;
}

/* rank's shard of tensor `name` of source file f (parameter p's place), float32, kept in rf */
static struct pk_value *f32_shard(struct pk_doc *d, struct rank_file *rf, const struct megatron_export *e, int f,
				  const char *name, const struct param *p, int rank, float *global)
{
	if (read_global_from(e, f, name, p, global) < 0)
		return NULL;
	float *local = keep(rf, p->numel * sizeof(float));
	int64_t gcols = p->ndim == 2 ? p->shape[1] : 1;
	for (size_t x = 0; x < p->numel; x++) {
		int64_t row, col;
		params_global_pos_rank(p, rank, x, &row, &col);
		local[x] = global[(size_t)row * (size_t)gcols + (size_t)col];
	}
	int64_t size[2] = { p->local_shape[0], p->ndim == 2 ? p->local_shape[1] : 1 };
	return pk_tensor(d, pk_storage(d, PK_DT_F32, local, (int64_t)p->numel), 0, p->ndim, size, NULL);
}

/*
 * The rank file's optimizer, as Megatron's non-distributed optimizer's
 * state_dict() (what its legacy save_checkpoint stores), and its
 * opt_param_scheduler. torch's Adam numbers the rank's parameters through
 * the param groups: Megatron's default group (the weight-decayed ones) and
 * the one without weight decay (biases, norms: the 1-D parameters), each in
 * named_parameters() order, the Transformer Engine spec's whose names the
 * file holds; each numbered parameter's state {"step", "exp_avg",
 * "exp_avg_sq"} (fp32, its step a tensor of its own, as Adam steps it in
 * place). fp32: {"state", "param_groups"} (FP32Optimizer); 16-bit:
 * {"optimizer": that, "grad_scaler" (fp16), "fp32_from_fp16_params": the
 * fp32 master weights group by group} (Float16OptimizerWithFloat16Params).
 */
static int rank_optim(struct pk_doc *d, struct pk_value *root, struct rank_file *rf, const struct megatron_export *e,
		      const struct gpt_model *m, int rank)
{
	const struct param_registry *r = &m->reg;
	int64_t step;
	struct pk_value *sched = sched_dict(d, e);
	if (!sched || ckpt_get_attr_i64(e->r, e->of, NULL, "step", &step) < 0)
		return -1;
	int *order = xmalloc(((size_t)r->n + 1) * sizeof(int));
	int n = megatron_param_order(m, false, order, ckpt_reader_dir(e->r)), rc = n < 0 ? -1 : 0;
	size_t cap = (size_t)e->src_vp * (size_t)e->c->h;
	for (int i = 0; i < r->n; i++)
		if (r->p[i].shape[0] * (r->p[i].ndim == 2 ? r->p[i].shape[1] : 1) > (int64_t)cap)
			cap = (size_t)(r->p[i].shape[0] * (r->p[i].ndim == 2 ? r->p[i].shape[1] : 1));
	float *global = xmalloc((cap + 1) * sizeof(float));
	bool half = e->dtype != CKPT_F32;
	struct pk_value *state = pk_dict(d), *groups = pk_list(d), *masters = pk_list(d);
	int64_t idx = 0;
	for (int g = 0; rc == 0 && g < 2; g++) {
		struct pk_value *pg = param_group(d, e, sched, g, false), *ids = pk_list(d), *mg = pk_list(d);
		for (int j = 0; rc == 0 && j < n; j++) {
			const struct param *p = &r->p[order[j]];
			if ((p->ndim == 1) != (g == 1))
				continue;
			pk_append(ids, pk_int(d, idx));
			if (step > 0) { /* (torch's Adam has no state before its first step) */
				struct pk_value *ps = pk_dict(d);
				pk_set_str(d, ps, "step", f32_scalar(d, (float)step));
				static const char *const moments[] = { "exp_avg", "exp_avg_sq" };
				for (int k = 0; rc == 0 && k < 2; k++) {
					char *src = xasprintf("%s/%s", moments[k], p->name);
					struct pk_value *t = f32_shard(d, rf, e, e->of, src, p, rank, global);
					if (t)
						pk_set_str(d, ps, moments[k], t);
					else
						rc = -1;
					free(src);
				}
				pk_set(d, state, pk_int(d, idx), ps);
			}
			if (rc == 0 && half) { /* the fp32 master weight: model.h5's */
				struct pk_value *t = f32_shard(d, rf, e, e->mf, p->name, p, rank, global);
				if (t)
					pk_append(mg, t);
				else
					rc = -1;
			}
			idx++;
		}
		pk_set_str(d, pg, "params", ids);
		pk_append(groups, pg);
		pk_append(masters, mg);
	}
	free(global);
	free(order);
	if (rc < 0)
		return -1;
	struct pk_value *adam = pk_dict(d);
	pk_set_str(d, adam, "state", state);
	pk_set_str(d, adam, "param_groups", groups);
	if (half) {
		struct pk_value *outer = pk_dict(d);
		pk_set_str(d, outer, "optimizer", adam);
		if (e->dtype == CKPT_F16 && dist_grad_scaler(d, outer, e) < 0)
			return -1;
		pk_set_str(d, outer, "fp32_from_fp16_params", masters);
		adam = outer;
	}
	pk_set_str(d, root, "optimizer", adam);
	pk_set_str(d, root, "opt_param_scheduler", sched);
	pk_set_str(d, root, "num_floating_point_operations_so_far", pk_int(d, 0));
	return 0;
}

static int write_dist(const struct megatron_export *e, const json_t *config, const char *tmp)
{
	struct dist_group tpg;
	struct mem_pool pool;
	struct gpt_model m;
	if (plan_model(&m, &pool, &tpg, e->c, 1, 0, 1, 0, 1) < 0)
		return -1;
	struct dcp_writer *w = dcp_create(tmp);
	int rc = w ? 0 : -1;
	float *global = NULL;
	size_t cap = 0;
	bool stacked = megatron_dist_stacked(e->c);
	for (int i = 0; rc == 0 && i < m.reg.n; i++) {
		const struct param *p = &m.reg.p[i];
		if (p->flags & PARAM_SHARED)
			continue;
		size_t gn = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
		size_t need = megatron_global_need(e, p);
		if (need > cap) {
			free(global);
			global = xmalloc(need * sizeof(float));
			cap = need;
		}
		if ((rc = read_global(e, p, global)) < 0)
			break;
		/* its place: stacked layers (decoder.layers.<name> of [L, ...]) and
		 * experts ([E, ...]) lead, this layer's and expert's chunk */
		struct megatron_place pl;
		megatron_dist_place(e->c, stacked, p->name, &pl);
		int64_t gsize[4] = { 0 }, off[4] = { 0 }, csize[4] = { 0 };
		for (int j = 0; j < pl.nlead; j++) {
			gsize[j] = pl.size[j];
			off[j] = pl.off[j];
			csize[j] = 1;
		}
		int nd = p->ndim + pl.nlead;
		const char *fqn = pl.key;
		for (int j = 0; j < p->ndim; j++)
			gsize[j + pl.nlead] = csize[j + pl.nlead] = p->shape[j];
		void *bytes = xmalloc(gn * ckpt_dtype_size(e->dtype) + 1);
		ckpt_from_f32(e->dtype, global, gn, bytes);
		rc = dcp_put_chunk(w, fqn, pk_of(e->dtype), nd, gsize, off, csize, bytes);
		free(bytes);
		if (rc == 0)
			rc = dist_extra_states(w, &pl);
		/* Adam's state, fp32 (and the fp32 master weights of 16-bit ones) */
		if (rc == 0 && e->of >= 0 && e->dtype != CKPT_F32) {
			char *key = xasprintf("optimizer.state.fp32_param.%s", fqn);
			rc = dcp_put_chunk(w, key, PK_DT_F32, nd, gsize, off, csize, global);
			free(key);
		}
		static const char *const moments[] = { "exp_avg", "exp_avg_sq" };
		for (int k = 0; rc == 0 && e->of >= 0 && k < 2; k++) {
			char *src = xasprintf("%s/%s", moments[k], p->name);
			char *key = xasprintf("optimizer.state.%s.%s", moments[k], fqn);
			rc = read_global_from(e, e->of, src, p, global);
			if (rc == 0)
				rc = dcp_put_chunk(w, key, PK_DT_F32, nd, gsize, off, csize, global);
			free(src);
			free(key);
		}
		free(pl.key);
	}
	/* the routers' expert biases: fp32 buffers, stacked as the layers */
	float *bias = xmalloc(((size_t)e->c->E + 1) * sizeof(float));
	for (int l = 0; rc == 0 && l < e->c->L + e->c->mtp; l++) {
		char name[PARAM_NAME_MAX];
		int k = read_expert_bias(e, l, name, sizeof(name), bias);
		if (k <= 0) {
			rc = k;
			continue;
		}
		struct megatron_place pl;
		megatron_dist_place(e->c, stacked, name, &pl);
		int64_t gsize[2] = { pl.size[0], e->c->E }, off[2] = { pl.off[0], 0 }, csize[2] = { 1, e->c->E };
		int nl = pl.nlead; /* 0 or 1 */
		rc = dcp_put_chunk(w, pl.key, PK_DT_F32, 1 + nl, nl ? gsize : gsize + 1, nl ? off : off + 1,
				   nl ? csize : csize + 1, bias);
		free(pl.key);
	}
	free(bias);
	free(global);
	gpt_free(&m);
	struct pk_doc *d = pk_doc_new();
	struct pk_value *common = pk_dict(d), *cm = pk_dict(d), *wrap = pk_list(d);
	pk_set_str(d, common, "args", args_namespace(d, e, config));
	pk_set_str(d, common, "checkpoint_version", pk_float(d, 3.0));
	pk_set_str(d, common, "iteration", pk_int(d, e->iteration < 0 ? 0 : e->iteration));
	pk_set_str(d, common, "num_floating_point_operations_so_far", pk_int(d, 0));
	pk_set_str(d, cm, "singleton_local_shards", pk_bool(d, false));
	pk_set_str(d, cm, "chained_optim_avoid_prefix", pk_bool(d, true));
	pk_set_str(d, common, "content_metadata", cm);
	if (rc == 0 && e->of >= 0)
		rc = dist_optimizer_common(d, common, e);
	pk_append(wrap, common);
	if (rc == 0)
		rc = dcp_put_object(w, "common_state/shard_0_1", wrap);
	pk_doc_free(d);
	if (rc == 0)
		rc = dcp_finish(w);
	else
		dcp_abort(w);
	char *mj = xasprintf("%s/metadata.json", tmp);
	if (rc == 0) {
		struct afile af;
		static const char text[] = "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1}";
		if (afile_open(&af, mj) < 0)
			rc = -1;
		else if (fwrite(text, 1, sizeof(text) - 1, af.fp) != sizeof(text) - 1)
			rc = error_errno("cannot write '%s'", mj), afile_abort(&af);
		else if (afile_commit(&af) < 0)
			rc = -1;
	}
	free(mj);
	return rc;
}

int megatron_torch_export(const struct args *a, const struct megatron_export *e)
{
	const struct gpt_config *c = e->c;
	int ep = e->ep > 1 ? e->ep : 1;
	if (ep > 1 && (c->E <= 0 || c->E % ep))
		return error("--target-expert-parallel-size %d: the model has %d experts, which it must divide", ep, c->E);
	if (c->E > 0 && c->bias)
		return error("--to megatron: mixture-of-experts layers with linear biases are not written in Megatron's "
			     "format yet");
	char *text;
	if (ckpt_get_attr_str(e->r, e->mf, NULL, "config", &text) < 0)
		return -1;
	json_t *config = json_loads(text, 0, NULL);
	free(text);
	if (!json_is_object(config)) {
		json_decref(config);
		return error("'%s/model.h5': the model configuration is not a JSON object", ckpt_reader_dir(e->r));
	}
	struct ckpt_writer *w = ckpt_begin(a->save, e->iteration);
	int rc = w ? 0 : -1;
	if (rc == 0 && e->dist)
		rc = e->fsdp ? megatron_fsdp_write(e, config, ckpt_tmp_dir(w)) : write_dist(e, config, ckpt_tmp_dir(w));
	for (int s = 0; !e->dist && rc == 0 && s < e->pp; s++)
		for (int t = 0; rc == 0 && t < e->tp; t++)
			for (int x = 0; rc == 0 && x < ep; x++)
				rc = write_rank(e, config, ckpt_tmp_dir(w), s, t, x);
	json_decref(config);
	if (rc < 0) {
		if (w)
			ckpt_abort(w);
		return -1;
	}
	return ckpt_commit(w);
}

/* ---- Megatron's legacy format -> megac ---- */

/* One rank file of the checkpoint being read. */
struct rank_in {
	struct pk_doc *d;
	struct pk_value *root;  /* the file's dict */
	struct pk_value *model; /* its "model" dict (the first chunk's: "model0" with virtual stages) */
	struct pk_value *models[GPT_MAX_LAYERS]; /* each chunk's dict */
	int nmodels;
	char *path;
};

enum megatron_format megatron_iteration_format(const char *dir)
{
	static const struct {
		const char *file;
		enum megatron_format f;
	} marks[] = { { "metadata.json", MEGATRON_TORCH_DIST },
		      { ".metadata", MEGATRON_FSDP_DTENSOR }, /* (Megatron's torch_dcp, or its fsdp_dtensor) */
		      { "mp_rank_00/model_optim_rng.pt", MEGATRON_TORCH },
		      { "mp_rank_00_000/model_optim_rng.pt", MEGATRON_TORCH },
		      { "mp_rank_00_000_000/model_optim_rng.pt", MEGATRON_TORCH } };
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
		char *p = xasprintf("%s/%s", dir, marks[i].file);
		bool there = access(p, F_OK) == 0;
		free(p);
		if (there)
			return marks[i].f;
	}
	return MEGATRON_NONE;
}

static int64_t ns_int(const struct pk_value *ns, const char *key);

/* The TP, PP and EP sizes of iteration directory dir, from its
 * mp_rank_TT[_PPP][_EEE] folders, which must form the whole grid. Two
 * numbers are TP and PP, or TP and EP: mp_rank_00_000's args say which. */
static int find_layout(const char *dir, int *tp, int *pp, int *ep)
{
	*tp = *pp = *ep = 1;
	DIR *dd = opendir(dir);
	if (!dd)
		return error_errno("cannot read '%s'", dir);
	int fields = 0, most[3] = { -1, -1, -1 }, bad = 0;
	struct dirent *de;
	while ((de = readdir(dd))) {
		int v[3], used = 0, n;
		if (strncmp(de->d_name, "mp_rank_", 8))
			continue;
		n = sscanf(de->d_name + 8, "%d%n_%d%n_%d%n", &v[0], &used, &v[1], &used, &v[2], &used);
		if (n < 1 || de->d_name[8 + used] || (fields && n != fields))
			bad = 1;
		fields = n > fields ? n : fields;
		for (int i = 0; i < n && i < 3; i++)
			most[i] = v[i] > most[i] ? v[i] : most[i];
	}
	closedir(dd);
	if (fields == 0)
		return error("'%s' holds no .metadata (torch_dist, fsdp_dtensor) and no mp_rank_00/model_optim_rng.pt or "
			     "mp_rank_00_000/model_optim_rng.pt (legacy torch): not a Megatron checkpoint megac reads",
			     dir);
	if (bad)
		return error("'%s': its mp_rank_* folders are not all mp_rank_TT, mp_rank_TT_PPP (or _EEE) or "
			     "mp_rank_TT_PPP_EEE alike",
			     dir);
	*tp = most[0] + 1;
	if (fields == 3) {
		*pp = most[1] + 1;
		*ep = most[2] + 1;
	} else if (fields == 2) { /* stages or expert-parallel ranks: the args say */
		char *f = xasprintf("%s/mp_rank_00_000/model_optim_rng.pt", dir);
		struct pk_doc *d = pk_doc_new();
		struct pk_value *root = torch_load(d, f);
		const struct pk_value *args = root && root->kind == PK_DICT ? pk_get(root, "args") : NULL;
		bool experts = ns_int(args, "expert_model_parallel_size") > 1 && ns_int(args, "pipeline_model_parallel_size") <= 1;
		pk_doc_free(d);
		free(f);
		if (!root)
			return -1;
		*(experts ? ep : pp) = most[1] + 1;
	}
	for (int t = 0; t < *tp; t++)
		for (int st = 0; st < *pp; st++)
			for (int x = 0; x < *ep; x++) {
				char *rd = rank_dir(dir, t, *pp, st, *ep, x), *q = xasprintf("%s/model_optim_rng.pt", rd);
				bool there = access(q, R_OK) == 0;
				if (!there)
					error("'%s' is missing: the checkpoint has %d x %d x %d (TP x PP x EP) ranks", q, *tp,
					      *pp, *ep);
				free(q);
				free(rd);
				if (!there)
					return -1;
			}
	return 0;
}

/* The model configuration from Megatron's args (a Namespace), as the JSON
 * megac records: the scalar attributes under their own names, with
 * Megatron's defaults where its args hold None. vocab: the true
 * vocabulary, or -1 for the padded one. */
static char *config_of_args(const struct pk_value *ns, int64_t vocab, double *rotary_percent, const char *where)
{
	if (!ns || ns->kind != PK_OBJECT || !ns->obj.state || ns->obj.state->kind != PK_DICT) {
		error("%s: 'args' is not an argparse.Namespace", where);
		return NULL;
	}
	const struct pk_seq *a = &ns->obj.state->seq;
	json_t *o = json_object();
	for (size_t i = 0; i < a->n; i++) {
		const struct pk_value *k = a->v[2 * i], *v = a->v[2 * i + 1];
		if (k->kind != PK_STR)
			continue;
		json_t *j = v->kind == PK_INT	? json_integer(v->i) :
			    v->kind == PK_FLOAT ? json_real(v->f) :
			    v->kind == PK_BOOL	? json_boolean(v->b) :
			    v->kind == PK_STR	? json_string(v->s.p) :
			    v->kind == PK_NONE	? json_null() :
						  NULL;
		if (!strcmp(k->s.p, "moe_layer_freq") && (v->kind == PK_INT || v->kind == PK_LIST)) {
			/* Megatron's parsed --moe-layer-freq: Q, or the list of 0 and 1 per layer */
			struct sbuf sb = SBUF_INIT;
			if (v->kind == PK_INT)
				sbuf_addf(&sb, "%lld", (long long)v->i);
			for (size_t x = 0; v->kind == PK_LIST && x < v->seq.n; x++)
				sbuf_addf(&sb, "%s%lld%s", x ? "," : "[",
					  v->seq.v[x]->kind == PK_INT ? (long long)v->seq.v[x]->i : -1LL,
					  x + 1 == v->seq.n ? "]" : "");
			j = json_string(sb.len ? sb.buf : "[]");
			sbuf_release(&sb);
		}
		if (j)
			json_object_set_new(o, k->s.p, j);
	}
	json_t *h = json_object_get(o, "hidden_size"), *na = json_object_get(o, "num_attention_heads");
	if (json_is_integer(h) && json_is_integer(na) && json_integer_value(na) > 0) {
		if (!json_is_integer(json_object_get(o, "num_query_groups")) ||
		    !json_is_true(json_object_get(o, "group_query_attention")))
			json_object_set(o, "num_query_groups", na);
		if (!json_is_integer(json_object_get(o, "kv_channels")))
			json_object_set_new(o, "kv_channels",
					    json_integer(json_integer_value(h) / json_integer_value(na)));
		if (!json_is_integer(json_object_get(o, "ffn_hidden_size")))
			json_object_set_new(o, "ffn_hidden_size", json_integer(4 * json_integer_value(h)));
	}
	/* a hybrid Mamba model: its args name the pattern (Megatron's two
	 * spellings), which megac's reader of these formats does not map yet */
	static const char *const hyb[] = { "hybrid_layer_pattern", "hybrid_override_pattern" };
	for (int i = 0; i < 2; i++) {
		const char *pat = json_string_value(json_object_get(o, hyb[i]));
		if (pat && *pat) {
			error("%s: a hybrid Mamba model (%s '%s'): reading Megatron's torch and torch_dist checkpoints of "
			      "the hybrid stack is not in megac yet (docs/mamba.md)", where, hyb[i], pat);
			json_decref(o);
			return NULL;
		}
	}
	if (vocab > 0)
		json_object_set_new(o, "vocab_size", json_integer(vocab));
	else if (!json_is_integer(json_object_get(o, "vocab_size")))
		json_object_set(o, "vocab_size", json_object_get(o, "padded_vocab_size"));
	json_t *rp = json_object_get(o, "rotary_percent");
	*rotary_percent = json_is_number(rp) ? json_number_value(rp) : 1.0;
	if (!json_is_number(rp))
		json_object_set_new(o, "rotary_percent", json_real(1.0));
	static const struct {
		const char *k;
		double v;
	} defaults[] = { { "rotary_base", 10000 }, { "init_method_std", 0.02 }, { "hidden_dropout", 0.1 },
			 { "attention_dropout", 0.1 }, { "norm_epsilon", 1e-5 } };
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		if (!json_is_number(json_object_get(o, defaults[i].k)))
			json_object_set_new(o, defaults[i].k, json_real(defaults[i].v));
	if (!json_is_boolean(json_object_get(o, "bias_gelu_fusion")))
		json_object_set_new(o, "bias_gelu_fusion", json_false());
	char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(o);
	return text;
}

/* Float elements of a tensor node, in C order, as float32. */
static int tensor_f32(const struct pk_value *t, const struct param *p, float *out, const char *where, const char *name)
{
	if (!t || t->kind != PK_TENSOR)
		return error("%s: no tensor '%s'", where, name);
	int nd = p->ndim;
	int64_t want[2] = { p->local_shape[0], nd == 2 ? p->local_shape[1] : 1 };
	if (t->t.ndim != nd || t->t.size[0] != want[0] || (nd == 2 && t->t.size[1] != want[1]))
		return error("%s: tensor '%s' has another shape than the model's for this rank", where, name);
	enum pk_dtype dt = t->t.storage->st.dtype;
	size_t n = (size_t)pk_tensor_numel(t);
	void *raw = xmalloc(n * pk_dtype_size(dt) + 1);
	pk_tensor_gather(t, raw);
	int rc = 0;
	if (dt == PK_DT_F32)
		memcpy(out, raw, n * sizeof(float));
	else if (dt == PK_DT_BF16)
		ckpt_to_f32(CKPT_BF16, raw, n, out);
	else if (dt == PK_DT_F16)
		ckpt_to_f32(CKPT_F16, raw, n, out);
	else
		rc = error("%s: tensor '%s' is %s, not a float tensor", where, name, pk_dtype_name(dt));
	free(raw);
	return rc;
}

/* ---- Megatron's torch_dist format (PyTorch Distributed Checkpoint) ---- */


/*
 * A torch_dist iteration folder as the one rank file of a TP1 x PP1 legacy
 * checkpoint: root the common state (Megatron's "common_state" bytes item:
 * args, iteration, ...), model a dict of every global tensor. Megatron
 * stacks the layers of decoder.layers.* on a leading axis of num_layers;
 * they are unstacked into decoder.layers.<i>.* views of one buffer. The
 * tensors are global, so no TP or PP layout is needed to join them.
 */
static int read_dist(const char *dir, struct rank_in *ri, bool want_optim)
{
	ri->path = xasprintf("%s/.metadata", dir);
	ri->d = pk_doc_new();
	struct dcp *c = dcp_open(dir);
	if (!c)
		return -1;
	int rc = 0;
	const struct dcp_item *cs = NULL;
	for (int i = 0; i < dcp_count(c) && !cs; i++)
		if (!strncmp(dcp_item(c, i)->fqn, "common_state/", 13) && !dcp_item(c, i)->tensor)
			cs = dcp_item(c, i);
	if (!cs)
		rc = error("'%s': no common_state item: not a torch_dist checkpoint of Megatron", ri->path);
	else if (!(ri->root = dcp_read_object(c, ri->d, cs)))
		rc = -1;
	/* a sharded object is saved as a one-element list */
	if (rc == 0 && ri->root->kind == PK_LIST && ri->root->seq.n == 1)
		ri->root = ri->root->seq.v[0];
	if (rc == 0 && ri->root->kind != PK_DICT)
		rc = error("'%s': common_state is a %s, not a dict", ri->path, pk_kind_name(ri->root->kind));
	ri->model = pk_odict(ri->d);
	/* the stacked axis is the number of layers Megatron's args say */
	int64_t layers = rc == 0 ? ns_int(pk_get(ri->root, "args"), "num_layers") : 0;
	if (rc == 0 && layers <= 0)
		rc = error("'%s': the common state's args have no num_layers", ri->path);
	for (int i = 0; rc == 0 && i < dcp_count(c); i++) {
		const struct dcp_item *it = dcp_item(c, i);
		if (!it->tensor || !strncmp(it->fqn, "optimizer.distributed.", 22))
			continue; /* sharded objects: TE's _extra_state, the common state; the distributed optimizer's */
		if (!want_optim && !strncmp(it->fqn, "optimizer.", 10))
			continue; /* (not read for nothing: --no-optim) */
		int64_t n = 1;
		for (int j = 0; j < it->ndim; j++)
			n *= it->size[j];
		void *buf = xmalloc((size_t)n * pk_dtype_size(it->dtype) + 1);
		pk_doc_attach(ri->d, free, buf);
		if (dcp_read_tensor(c, it, buf) < 0) {
			rc = -1;
			break;
		}
		struct pk_value *st = pk_storage(ri->d, it->dtype, buf, n);
		/* decoder.layers.X, also inside optimizer.state.<kind>.decoder.layers.X */
		const char *dl = strstr(it->fqn, "decoder.layers."), *rest = dl ? dl + 15 : NULL;
		if (dl && dl != it->fqn && strncmp(it->fqn, "optimizer.state.", 16))
			rest = NULL;
		if (!rest || (*rest >= '0' && *rest <= '9')) { /* a tensor of its own */
			struct pk_value *t = pk_tensor(ri->d, st, 0, it->ndim, it->size, NULL);
			if (!t) {
				rc = -1;
				break;
			}
			pk_set_str(ri->d, ri->model, it->fqn, t);
			continue;
		}
		if (it->ndim < 2 || it->size[0] != layers) {
			rc = error("'%s': stacked layer tensor '%s' has %d dimensions, the first of %lld (the args' "
				   "num_layers: %lld)",
				   ri->path, it->fqn, it->ndim, it->ndim ? (long long)it->size[0] : 0LL, (long long)layers);
			break;
		}
		for (int64_t l = 0; rc == 0 && l < it->size[0]; l++) {
			char *name = xasprintf("%.*sdecoder.layers.%lld.%s", (int)(dl - it->fqn), it->fqn, (long long)l,
					       rest);
			struct pk_value *t = pk_tensor(ri->d, st, l * (n / it->size[0]), it->ndim - 1, it->size + 1, NULL);
			if (t)
				pk_set_str(ri->d, ri->model, name, t);
			else
				rc = -1;
			free(name);
		}
	}
	dcp_close(c);
	/* the experts' tensors [E, ...] as each expert's */
	if (rc == 0)
		rc = megatron_dist_split_experts(ri->d, ri->model, ri->path);
	ri->models[0] = ri->model;
	ri->nmodels = 1;
	return rc;
}

/* ---- Megatron's optimizer state -> megac ---- */

/* What optim.h5 records beside the moments: Adam's step, Megatron's
 * scheduler state (its opt_param_scheduler dict, the same names) and the
 * loss scaler's. */
struct optim_in {
	int64_t step;
	const struct pk_value *sched; /* opt_param_scheduler */
	double loss_scale;
	int64_t growth, hysteresis;
	bool betas_known; /* Adam's constants, from the first param group */
	double beta1, beta2, eps;
};

static int scalar_of(const struct pk_value *v, double *out)
{
	if (!v)
		return -1;
	if (v->kind == PK_INT || v->kind == PK_BOOL) {
		*out = v->kind == PK_INT ? (double)v->i : v->b;
		return 0;
	}
	if (v->kind == PK_FLOAT) {
		*out = v->f;
		return 0;
	}
	if (v->kind != PK_TENSOR || pk_tensor_numel(v) != 1)
		return -1;
	enum pk_dtype dt = v->t.storage->st.dtype;
	union {
		float f;
		double d;
		int64_t i;
		int32_t i32;
		unsigned char b[8];
	} u;
	pk_tensor_gather(v, u.b);
	switch (dt) {
	case PK_DT_F32: *out = u.f; return 0;
	case PK_DT_F64: *out = u.d; return 0;
	case PK_DT_I64: *out = (double)u.i; return 0;
	case PK_DT_I32: *out = u.i32; return 0;
	default: return -1;
	}
}

static int read_optim_common(const struct pk_value *root, const char *where, struct optim_in *oi)
{
	/* fp32 runs (FP32Optimizer): {"state", "param_groups"}; 16-bit ones
	 * (Float16OptimizerWithFloat16Params): {"optimizer": {"state",
	 * "param_groups"}, "grad_scaler" (fp16)} */
	const struct pk_value *top = pk_get(root, "optimizer"), *o, *st = NULL;
	/* a MoE run's chained optimizers, {0: the dense parameters', 1: the
	 * experts'}: the same step, schedule and constants; the first's */
	for (size_t i = 0; top && top->kind == PK_DICT && i < top->seq.n; i++)
		if (top->seq.v[2 * i]->kind == PK_INT && top->seq.v[2 * i]->i == 0) {
			top = top->seq.v[2 * i + 1];
			break;
		}
	o = top;
	const struct pk_value *inner = top && top->kind == PK_DICT ? pk_get(top, "optimizer") : NULL;
	if (inner && inner->kind == PK_DICT)
		o = inner;
	st = o && o->kind == PK_DICT ? pk_get(o, "state") : NULL;
	double step;
	if (st && st->kind == PK_DICT && !pk_get(st, "common_step"))
		step = 0; /* (Megatron leaves a step of 0 out) */
	else if (!st || scalar_of(pk_get(st, "common_step"), &step) < 0)
		return error("%s: the optimizer's moments are there but not its step (optimizer.state.common_step of the "
			     "common state)",
			     where);
	oi->step = (int64_t)step;
	oi->sched = pk_get(root, "opt_param_scheduler");
	if (!oi->sched || oi->sched->kind != PK_DICT)
		return error("%s: the optimizer's state is there but not the scheduler's (opt_param_scheduler)", where);
	oi->loss_scale = 1.0;
	const struct pk_value *pgs = pk_get(o, "param_groups"), *pg0 = pgs && pgs->kind == PK_LIST && pgs->seq.n ?
											pgs->seq.v[0] :
											NULL;
	const struct pk_value *betas = pg0 && pg0->kind == PK_DICT ? pk_get(pg0, "betas") : NULL;
	if (betas && (betas->kind == PK_TUPLE || betas->kind == PK_LIST) && betas->seq.n == 2 &&
	    scalar_of(betas->seq.v[0], &oi->beta1) == 0 && scalar_of(betas->seq.v[1], &oi->beta2) == 0 &&
	    scalar_of(pk_get(pg0, "eps"), &oi->eps) == 0)
		oi->betas_known = true;
	const struct pk_value *gs = top && top->kind == PK_DICT ? pk_get(top, "grad_scaler") : NULL;
	double x;
	if (gs && gs->kind == PK_DICT) {
		if (scalar_of(pk_get(gs, "scale"), &oi->loss_scale) < 0)
			return error("%s: the grad scaler's state has no scale", where);
		oi->growth = scalar_of(pk_get(gs, "growth_tracker"), &x) == 0 ? (int64_t)x : 0;
		oi->hysteresis = scalar_of(pk_get(gs, "hysteresis_tracker"), &x) == 0 ? (int64_t)x : 0;
	}
	return 0;
}

static int put_optim_attrs(struct ckpt_writer *w, int of, int64_t iter, const struct optim_in *oi)
{
	int r = ckpt_put_attr_i64(w, of, NULL, "iteration", iter);
	r |= ckpt_put_attr_i64(w, of, NULL, "step", oi->step);
	for (size_t i = 0; i < sizeof(sched_fields) / sizeof(sched_fields[0]); i++) {
		const struct sched_field *f = &sched_fields[i];
		const struct pk_value *v = pk_get(oi->sched, f->name);
		double x;
		if (f->kind == 's') {
			if (!v || v->kind != PK_STR)
				return error("opt_param_scheduler has no text '%s'", f->name);
			r |= ckpt_put_attr_str(w, of, NULL, f->name, v->s.p);
		} else if (scalar_of(v, &x) < 0) {
			return error("opt_param_scheduler has no number '%s'", f->name);
		} else if (f->kind == 'i') {
			r |= ckpt_put_attr_i64(w, of, NULL, f->name, (int64_t)x);
		} else {
			r |= ckpt_put_attr_f64(w, of, NULL, f->name, x);
		}
	}
	r |= ckpt_put_attr_f64(w, of, NULL, "loss_scale", oi->loss_scale);
	r |= ckpt_put_attr_i64(w, of, NULL, "growth_tracker", oi->growth);
	r |= ckpt_put_attr_i64(w, of, NULL, "hysteresis_tracker", oi->hysteresis);
	if (oi->betas_known) {
		r |= ckpt_put_attr_f64(w, of, NULL, "adam_beta1", oi->beta1);
		r |= ckpt_put_attr_f64(w, of, NULL, "adam_beta2", oi->beta2);
		r |= ckpt_put_attr_f64(w, of, NULL, "adam_eps", oi->eps);
	}
	return r ? -1 : 0;
}

/* an integer attribute of Megatron's args, 0 when absent */
static int64_t ns_int(const struct pk_value *ns, const char *key)
{
	const struct pk_value *v = ns && ns->kind == PK_OBJECT && ns->obj.state && ns->obj.state->kind == PK_DICT
					   ? pk_get(ns->obj.state, key)
					   : NULL;
	return v && v->kind == PK_INT ? v->i : 0;
}

/* The rank files of the checkpoint being read: in[(s * tp + t) * ep + x]
 * for stage s, TP rank t, EP rank x (each with El experts); the model
 * chunks of the stage being joined start at l0[v] (nl[v] layers). */
struct layout_in {
	struct rank_in *in;
	int tp, pp, ep, El, L;
	int nchunks, l0[GPT_MAX_LAYERS], nl[GPT_MAX_LAYERS];
};

/* ---- Adam's state in the legacy format (indexed by position) ---- */

/* the value under integer key k of dict v, or NULL */
static const struct pk_value *pk_get_index(const struct pk_value *v, int64_t k)
{
	for (size_t i = 0; v && v->kind == PK_DICT && i < v->seq.n; i++)
		if (v->seq.v[2 * i]->kind == PK_INT && v->seq.v[2 * i]->i == k)
			return v->seq.v[2 * i + 1];
	return NULL;
}

/* A legacy rank file's Adam state_dict ({"state": {i: {"step", "exp_avg",
 * "exp_avg_sq"}}, "param_groups"}): the file's optimizer itself (fp32 runs,
 * FP32Optimizer) or its "optimizer" (16-bit runs,
 * Float16OptimizerWithFloat16Params, whose fp32 master weights are
 * *masters: fp32_from_fp16_params, a list per param group). NULL when the
 * file holds no optimizer state (--no-save-optim); -1 in *bad after error(). */
static struct pk_value *legacy_adam(const struct rank_in *ri, const struct pk_value **masters, int *bad)
{
	struct pk_value *top = pk_get(ri->root, "optimizer");
	*masters = NULL;
	*bad = 0;
	if (!top || top->kind == PK_NONE)
		return NULL;
	if (top->kind == PK_LIST) { /* ChainedOptimizer: the dense parameters' and the experts' */
		*bad = error("%s: the optimizer's state is a list of %zu optimizers' (Megatron's chained optimizer of a "
			     "mixture-of-experts run): reading it from the legacy format is not in megac yet; --no-optim "
			     "(train: --no-load-optim) takes the weights only",
			     ri->path, top->seq.n);
		return NULL;
	}
	struct pk_value *inner = top->kind == PK_DICT ? pk_get(top, "optimizer") : NULL;
	struct pk_value *o = inner && inner->kind == PK_DICT ? inner : top;
	if (inner)
		*masters = pk_get(top, "fp32_from_fp16_params");
	const struct pk_value *st = o->kind == PK_DICT ? pk_get(o, "state") : NULL,
			      *pgs = o->kind == PK_DICT ? pk_get(o, "param_groups") : NULL;
	if (!st || st->kind != PK_DICT || !pgs || pgs->kind != PK_LIST || (inner && (!*masters ||
									       (*masters)->kind != PK_LIST))) {
		*bad = error("%s: its optimizer is not the state_dict of Megatron's Adam (a dict of \"state\" and "
			     "\"param_groups\"%s)",
			     ri->path, inner ? ", with fp32_from_fp16_params beside it" : "");
		return NULL;
	}
	return o;
}

/* Adam's step from the state of each parameter (torch keeps one per
 * parameter; Megatron steps them together), as the common_step the torch_dist
 * path reads; the state without any step: 0 (saved before the first). */
static int legacy_common_step(struct pk_doc *d, struct pk_value *adam, const char *where)
{
	struct pk_value *st = pk_get(adam, "state");
	double step = -1;
	for (size_t i = 0; i < st->seq.n; i++) {
		const struct pk_value *v = st->seq.v[2 * i + 1];
		double x;
		if (st->seq.v[2 * i]->kind != PK_INT || v->kind != PK_DICT || scalar_of(pk_get(v, "step"), &x) < 0)
			return error("%s: the optimizer's state of parameter %zu has no step", where, i);
		if (step >= 0 && x != step)
			return error("%s: the optimizer's parameters are at different steps (%g, %g)", where, step, x);
		step = x;
	}
	if (step > 0)
		pk_set_str(d, st, "common_step", pk_int(d, (int64_t)step));
	return 0;
}

/*
 * The legacy rank file ri of TP rank t (model m) with its Adam state put
 * under the names the torch_dist path reads: optimizer.state.exp_avg.<name>,
 * optimizer.state.exp_avg_sq.<name> and (16-bit runs) optimizer.state.
 * fp32_param.<name>, <name> megac's, in the model dict of the parameter's
 * chunk. Megatron numbers a rank's parameters through its param groups, in
 * order: its get_param_groups puts the rank's named_parameters() (all model
 * chunks, in order) into the default group and, without weight decay
 * (wd_mult 0), the biases and the other 1-D parameters, the default group
 * first. A group's "params" lists its parameters' numbers; a 16-bit run's
 * fp32_from_fp16_params holds their master weights group by group.
 */
static int legacy_optim_rank(struct rank_in *ri, const struct gpt_model *m, bool local, const struct layout_in *li)
{
	const struct pk_value *masters;
	int bad;
	struct pk_value *adam = legacy_adam(ri, &masters, &bad);
	if (!adam)
		return bad ? -1 : error("%s: it holds no optimizer state, the first rank's file does", ri->path);
	const struct param_registry *r = &m->reg;
	int *order = xmalloc(((size_t)r->n + 1) * sizeof(int));
	int n = megatron_param_order(m, local, order, ri->path), rc = n < 0 ? -1 : 0;
	const struct pk_value *st = pk_get(adam, "state"), *pgs = pk_get(adam, "param_groups");
	if (rc == 0 && pgs->seq.n != 2)
		rc = error("%s: the optimizer has %zu param groups; Megatron's default two (with and without weight "
			   "decay) are read",
			   ri->path, pgs->seq.n);
	if (rc == 0 && masters && masters->seq.n != pgs->seq.n)
		rc = error("%s: fp32_from_fp16_params has %zu groups, the optimizer %zu", ri->path, masters->seq.n,
			   pgs->seq.n);
	for (size_t g = 0; rc == 0 && g < pgs->seq.n; g++) {
		const struct pk_value *pg = pgs->seq.v[g], *ids = pg->kind == PK_DICT ? pk_get(pg, "params") : NULL;
		double wd_mult;
		if (!ids || ids->kind != PK_LIST || scalar_of(pk_get(pg, "wd_mult"), &wd_mult) < 0) {
			rc = error("%s: param group %zu has no \"params\" list or no wd_mult", ri->path, g);
			break;
		}
		bool one_d = wd_mult == 0; /* the group without weight decay: biases, norms */
		const struct pk_value *mg = masters ? masters->seq.v[g] : NULL;
		size_t k = 0;
		for (int j = 0; rc == 0 && j < n; j++) {
			const struct param *p = &r->p[order[j]];
			if ((p->ndim == 1) != one_d)
				continue;
			if (k >= ids->seq.n) {
				rc = error("%s: param group %zu lists %zu parameters, fewer than the rank's model has (its "
					   "%zu-th: '%s')",
					   ri->path, g, ids->seq.n, k + 1, p->name);
				break;
			}
			const struct pk_value *id = ids->seq.v[k], *ps = id->kind == PK_INT ? pk_get_index(st, id->i) : NULL;
			const struct pk_value *ea = ps && ps->kind == PK_DICT ? pk_get(ps, "exp_avg") : NULL,
					      *eq = ps && ps->kind == PK_DICT ? pk_get(ps, "exp_avg_sq") : NULL;
			const struct pk_value *mw = mg && mg->kind == PK_LIST && k < mg->seq.n ? mg->seq.v[k] : NULL;
			if (!ea || !eq || (masters && !mw)) {
				rc = error("%s: no Adam state%s for parameter %lld of param group %zu ('%s')", ri->path,
					   masters && !mw ? " or master weight" : "", id->kind == PK_INT ? (long long)id->i : -1LL,
					   g, p->name);
				break;
			}
			int v = megatron_chunk_of(p->name, li->nchunks, li->l0, li->nl, li->L);
			const struct pk_value *vals[3] = { ea, eq, mw };
			static const char *const keys[3] = { "exp_avg", "exp_avg_sq", "fp32_param" };
			for (int x = 0; x < (masters ? 3 : 2); x++) {
				char *key = xasprintf("optimizer.state.%s.%s", keys[x], p->name);
				pk_set_str(ri->d, ri->models[v], key, (struct pk_value *)vals[x]);
				free(key);
			}
			k++;
		}
		if (rc == 0 && k != ids->seq.n)
			rc = error("%s: param group %zu lists %zu parameters, the rank's model has %zu of its kind", ri->path,
				   g, ids->seq.n, k);
	}
	free(order);
	return rc;
}

/* megac's tensor prefix + name (a tensor of parameter p0's place) in TP rank
 * t's file of stage s, and that file */
static const struct pk_value *lookup(const struct layout_in *li, int s, int t, const char *name, const char *prefix,
				     const struct rank_in **file)
{
	int ex = expert_index(name), x = ex >= 0 && li->ep > 1 ? ex / li->El : 0;
	int v = megatron_chunk_of(name, li->nchunks, li->l0, li->nl, li->L);
	const struct rank_in *ri = &li->in[((size_t)s * li->tp + t) * li->ep + x];
	*file = ri;
	if (v >= ri->nmodels)
		return NULL;
	char *key = xasprintf("%s%s", prefix, name);
	const struct pk_value *tv = megatron_legacy_find(ri->models[v], key, li->l0[v], x * li->El);
	free(key);
	return tv;
}

/* global tensor prefix + (parameter i's name) of stage s, joined from the
 * TP ranks' shards by their registries */
static int join_tensor(const struct layout_in *li, int s, struct gpt_model *m, int i, const char *prefix,
		       float *global, float *local)
{
	const struct param *p0 = &m[0].reg.p[i];
	int64_t gcols = p0->ndim == 2 ? p0->shape[1] : 1;
	for (int t = 0; t < li->tp; t++) {
		const struct param *p = &m[t].reg.p[i];
		const struct rank_in *ri;
		const struct pk_value *tv = lookup(li, s, t, p0->name, prefix, &ri);
		char *shown = xasprintf("%s%s", prefix, p0->name);
		int rc = tensor_f32(tv, p, local, ri->path, shown);
		free(shown);
		if (rc < 0)
			return -1;
		for (size_t x = 0; x < p->numel; x++) {
			int64_t row, col;
			params_global_pos_rank(p, t, x, &row, &col);
			global[(size_t)row * (size_t)gcols + (size_t)col] = local[x];
		}
	}
	return 0;
}

/* The expert biases of stage s's layers (and its depths') into model.h5
 * (Megatron's router buffer, whole on every rank: TP rank 0's) */
static int join_expert_biases(const struct layout_in *li, int s, const struct gpt_config *c, bool post,
			      struct ckpt_writer *w, int mf)
{
	if (c->E <= 0 || !c->router.expert_bias)
		return 0;
	float *bias = xmalloc((size_t)c->E * sizeof(float));
	int rc = 0;
	for (int v = 0; rc == 0 && v < li->nchunks; v++) {
		bool last = post && v == li->nchunks - 1;
		for (int l = li->l0[v]; rc == 0 && l < li->l0[v] + li->nl[v] + (last ? c->mtp : 0); l++) {
			int g = l < li->l0[v] + li->nl[v] ? l : c->L + (l - li->l0[v] - li->nl[v]);
			if (!megatron_layer_is_moe(c, g))
				continue;
			char name[PARAM_NAME_MAX];
			megatron_expert_bias_name(c, g, name, sizeof(name));
			const struct rank_in *ri;
			const struct pk_value *tv = lookup(li, s, 0, name, "", &ri);
			if (!tv || tv->kind != PK_TENSOR || tv->t.ndim != 1 || tv->t.size[0] != c->E ||
			    tv->t.storage->st.dtype != PK_DT_F32) {
				rc = error("%s: no fp32 tensor '%s' of %d elements (the router's expert bias: the args say "
					   "moe_router_enable_expert_bias)",
					   ri->path, name, c->E);
				break;
			}
			pk_tensor_gather(tv, bias);
			int64_t shape[1] = { c->E };
			rc = ckpt_put_tensor(w, mf, name, CKPT_F32, 1, shape, bias);
		}
	}
	free(bias);
	return rc;
}

int megatron_torch_import(const struct args *a)
{
	return megatron_import(a, true);
}

int megatron_import(const struct args *a, bool tell)
{
	if (!a->load)
		return error("--load DIR: the Megatron checkpoint to read");
	int64_t iter;
	int k = ckpt_latest(a->load, &iter);
	if (k < 0)
		return -1;
	if (k > 0)
		return error("'%s' has no latest_checkpointed_iteration.txt: not a Megatron checkpoint folder", a->load);
	if (a->iteration >= 0)
		iter = a->iteration;
	char *dir = ckpt_iter_path(a->load, iter);
	int tp = 1, pp = 1, ep = 1;
	enum megatron_format fmt = megatron_iteration_format(dir);
	bool fsdp = fmt == MEGATRON_FSDP_DTENSOR, dist = fmt == MEGATRON_TORCH_DIST || fsdp;
	if (!dist && find_layout(dir, &tp, &pp, &ep) < 0) {
		free(dir);
		return -1;
	}
	size_t nfiles = (size_t)tp * pp * ep;
	struct rank_in *in = xcalloc(nfiles, sizeof(*in));
	int rc = 0;
	if (dist && !fsdp)
		rc = read_dist(dir, &in[0], !a->no_optim);
	if (fsdp) { /* Megatron-FSDP's: the same shape of state (megatron_fsdp.c) */
		in[0].path = xasprintf("%s/.metadata", dir);
		in[0].d = pk_doc_new();
		rc = megatron_fsdp_read(dir, in[0].d, &in[0].root, &in[0].model, !a->no_optim);
		in[0].models[0] = in[0].model;
		in[0].nmodels = 1;
	}
	for (size_t f = 0; !dist && rc == 0 && f < nfiles; f++) {
		int x = (int)(f % (size_t)ep), t = (int)(f / (size_t)ep % (size_t)tp), s = (int)(f / ((size_t)ep * tp));
		struct rank_in *ri = &in[f];
		char *rd = rank_dir(dir, t, pp, s, ep, x);
		ri->path = xasprintf("%s/model_optim_rng.pt", rd);
		free(rd);
		ri->d = pk_doc_new();
		struct pk_value *root = ri->root = torch_load(ri->d, ri->path);
		/* "model", or one per model chunk: "model0", "model1", ... (virtual pipeline stages) */
		ri->model = root ? pk_get(root, "model") : NULL;
		if (ri->model)
			ri->models[ri->nmodels++] = ri->model;
		for (int v = 0; root && !ri->model && v < GPT_MAX_LAYERS; v++) {
			char key[32];
			snprintf(key, sizeof(key), "model%d", v);
			struct pk_value *mv = pk_get(root, key);
			if (!mv)
				break;
			ri->models[ri->nmodels++] = mv;
		}
		if (!root)
			rc = -1;
		else if (!ri->nmodels)
			rc = error("'%s' holds no \"model\" (or \"model0\", ...) state dict", ri->path);
		for (int v = 0; rc == 0 && v < ri->nmodels; v++)
			if (ri->models[v]->kind != PK_DICT)
				rc = error("'%s': its model state dict %d is a %s, not a dict", ri->path, v,
					   pk_kind_name(ri->models[v]->kind));
		if (rc == 0 && f && ri->nmodels != in[0].nmodels)
			rc = error("'%s' holds %d model chunks, '%s' %d", ri->path, ri->nmodels, in[0].path, in[0].nmodels);
		if (rc == 0)
			ri->model = ri->models[0];
	}
	int vpp = in[0].nmodels > 1 ? in[0].nmodels : 1;
	/* the model, from rank 0's args and the tokenizer flags */
	int64_t vocab = -1;
	if (rc == 0 && a->tokenizer_type) {
		struct tok_config tc = tok_config_from_args(a);
		struct tokenizer *tok = tok_load(&tc);
		if (!tok)
			rc = -1;
		else
			vocab = tok_vocab_size(tok);
		if (tok)
			tok_free(tok);
	}
	double rotary_percent = 1.0;
	char *config = NULL;
	struct gpt_config c;
	if (rc == 0) {
		config = config_of_args(pk_get(in[0].root, "args"), vocab, &rotary_percent, in[0].path);
		if (!config || gpt_config_from_json(&c, config, in[0].path) < 0)
			rc = -1;
	}
	if (rc == 0 && ep > 1 && (c.E <= 0 || c.E % ep))
		rc = error("%s: %d expert-parallel files for %d experts", in[0].path, ep, c.E);
	/* Megatron's distributed optimizer: its state as the named tensors below */
	if (rc == 0 && dist && !a->no_optim && megatron_distopt_state(in[0].root))
		rc = megatron_distopt_read(dir, &c, in[0].d, in[0].root, in[0].model, in[0].path);
	/* Adam's state: torch_dist keeps the moments by name
	 * (optimizer.state.exp_avg.<name>, the fp32 master weights of a 16-bit
	 * run as optimizer.state.fp32_param.<name>), the step and the schedule in
	 * the common state */
	bool optim = false;
	/* the legacy format's: each rank file's optimizer.state_dict(), by position */
	if (rc == 0 && !dist && !a->no_optim) {
		char *dopt = xasprintf("%.*s/distrib_optim.pt", (int)(strrchr(in[0].path, '/') - in[0].path), in[0].path);
		const struct pk_value *masters;
		int bad = 0;
		struct pk_value *adam = NULL;
		if (access(dopt, F_OK) == 0)
			rc = error("'%s': the distributed optimizer's state in the legacy format is not read by megac yet; "
				   "--no-optim (train: --no-load-optim) takes the weights only",
				   dopt);
		else if (!(adam = legacy_adam(&in[0], &masters, &bad)) && bad)
			rc = -1;
		else if (adam && (c.E > 0 || c.mtp))
			rc = error("%s: Adam's state of a %s model in the legacy format is not read by megac yet; "
				   "--no-optim (train: --no-load-optim) takes the weights only",
				   in[0].path, c.E > 0 ? "mixture-of-experts" : "multi-token prediction");
		else if (adam)
			rc = legacy_common_step(in[0].d, adam, in[0].path);
		optim = rc == 0 && adam;
		free(dopt);
	}
	/* the layer spec whose module order numbers the parameters */
	const struct pk_value *ans = rc == 0 ? pk_get(in[0].root, "args") : NULL;
	const struct pk_value *impl = ans && ans->kind == PK_OBJECT && ans->obj.state && ans->obj.state->kind == PK_DICT ?
					      pk_get(ans->obj.state, "transformer_impl") :
					      NULL;
	bool local_spec = impl && impl->kind == PK_STR && !strcmp(impl->s.p, "local");
	for (size_t i = 0; rc == 0 && dist && !a->no_optim && i < in[0].model->seq.n && !optim; i++) {
		const struct pk_value *key = in[0].model->seq.v[2 * i];
		optim = key->kind == PK_STR && !strncmp(key->s.p, "optimizer.state.exp_avg.", 24);
	}
	struct optim_in oi = { 0 };
	if (optim && read_optim_common(in[0].root, in[0].path, &oi) < 0)
		rc = -1;
	char *created = NULL;
	if (rc == 0)
		rc = convert_megac_dest(a, iter, &created);
	struct ckpt_writer *w = rc == 0 ? ckpt_begin(a->save, iter) : NULL;
	int mf = w ? ckpt_file_create(w, "model.h5") : -1;
	int of = w && optim ? ckpt_file_create(w, "optim.h5") : -1;
	if (rc == 0 && (mf < 0 || (optim && of < 0)))
		rc = -1;
	char *megac_config = rc == 0 ? gpt_config_to_json(&c, rotary_percent) : NULL;
	struct pk_value *args_ns = pk_get(in[0].root, "args");
	/* where the data stopped: a resumed run (not --finetune) goes on from there, with or without Adam */
	struct megac_counters cnt = { .consumed_train = ns_int(args_ns, "consumed_train_samples"),
				      .consumed_valid = ns_int(args_ns, "consumed_valid_samples"),
				      .skipped_train = ns_int(args_ns, "skipped_train_samples") };
	if (rc == 0)
		rc = convert_put_model_attrs_counters(w, mf, iter, megac_config, &cnt);
	if (rc == 0) /* without it: the weights only (train --finetune, or --no-load-optim) */
		rc = ckpt_put_attr_i64(w, mf, NULL, "optimizer_state_saved", optim);
	if (rc == 0 && optim)
		rc = put_optim_attrs(w, of, iter, &oi);
	free(megac_config);
	/* every stage's tensors, joined over TP by the ranks' registries */
	int written = 0;
	struct layout_in *li = xcalloc(1, sizeof(*li));
	*li = (struct layout_in){ .in = in, .tp = tp, .pp = pp, .ep = ep, .El = rc == 0 && c.E > 0 ? c.E / ep : 0,
				  .L = rc == 0 ? c.L : 0 };
	for (int s = 0; rc == 0 && s < pp; s++) {
		struct megatron_stage st;
		if (megatron_stage_plan(&st, &c, tp, pp, s, vpp) < 0)
			rc = -1;
		struct gpt_model *m = st.m;
		li->nchunks = rc == 0 ? m[0].nchunks : 0;
		for (int v = 0; v < li->nchunks; v++) {
			li->l0[v] = m[0].chunks[v].l0;
			li->nl[v] = m[0].chunks[v].nl;
		}
		if (rc == 0 && li->nchunks != in[0].nmodels)
			rc = error("%s: %d model chunks, but the args' layout has %d per stage", in[0].path, in[0].nmodels,
				   li->nchunks);
		for (int t = 0; rc == 0 && optim && !dist && t < tp; t++)
			rc = legacy_optim_rank(&in[(size_t)s * tp + t], &m[t], local_spec, li);
		float *global = NULL, *local = NULL;
		size_t cap = 0;
		for (int i = 0; rc == 0 && i < m[0].reg.n; i++) {
			const struct param *p0 = &m[0].reg.p[i];
			if (p0->flags & PARAM_SHARED) /* the last stage's copy: the first stage's tensor */
				continue;
			size_t gn = (size_t)p0->shape[0] * (p0->ndim == 2 ? (size_t)p0->shape[1] : 1);
			if (gn > cap) {
				free(global);
				free(local);
				global = xmalloc(gn * sizeof(float));
				local = xmalloc(gn * sizeof(float));
				cap = gn;
			}
			/* the weights: a 16-bit run's fp32 master copy when the optimizer has it */
			static const char master[] = "optimizer.state.fp32_param.";
			const struct rank_in *ri;
			bool has_master = optim && lookup(li, s, 0, p0->name, master, &ri);
			rc = join_tensor(li, s, m, i, has_master ? master : "", global, local);
			if (rc == 0)
				rc = ckpt_put_tensor(w, mf, p0->name, CKPT_F32, p0->ndim, p0->shape, global);
			static const char *const moments[] = { "exp_avg", "exp_avg_sq" };
			for (int mo = 0; rc == 0 && optim && mo < 2; mo++) {
				char *key = xasprintf("optimizer.state.%s.", moments[mo]);
				char *dst = xasprintf("%s/%s", moments[mo], p0->name);
				rc = join_tensor(li, s, m, i, key, global, local);
				if (rc == 0)
					rc = ckpt_put_tensor(w, of, dst, CKPT_F32, p0->ndim, p0->shape, global);
				free(key);
				free(dst);
			}
			written++;
		}
		if (rc == 0)
			rc = join_expert_biases(li, s, &c, s == pp - 1, w, mf);
		free(global);
		free(local);
		megatron_stage_free(&st);
	}
	free(li);
	if (rc == 0)
		rc = ckpt_commit(w);
	else if (w)
		ckpt_abort(w);
	if (rc < 0)
		convert_remove_tree(created);
	free(created);
	if (rc == 0 && tell) {
		char *from = fsdp ? xstrdup("fsdp_dtensor") : dist ? xstrdup("torch_dist") :
			     ep > 1 ? xasprintf("TP %d x PP %d x EP %d torch", tp, pp, ep) :
				      xasprintf("TP %d x PP %d torch", tp, pp);
		if (optim)
			info("wrote iteration %lld of '%s' (%d tensors, Adam's state at step %lld) from Megatron's %s "
			     "checkpoint '%s'; continue with train --load %s",
			     (long long)iter, a->save, written, (long long)oi.step, from, a->load, a->save);
		else
			info("wrote iteration %lld of '%s' (%d tensors) from Megatron's %s checkpoint '%s'; continue with "
			     "train --load %s --finetune (or --no-load-optim: %s)",
			     (long long)iter, a->save, written, from, a->load, a->save,
			     a->no_optim ? "--no-optim" : "the checkpoint holds no optimizer state");
		free(from);
	}
	free(config);
	for (size_t i = 0; i < nfiles; i++) {
		pk_doc_free(in[i].d);
		free(in[i].path);
	}
	free(in);
	free(dir);
	return rc;
}

/* ---- for Megatron-FSDP's format (megatron_fsdp.c, megatron_fsdp.h) ---- */

int megatron_plan_tp1(struct gpt_model *m, struct mem_pool *pool, struct dist_group *tpg, const struct gpt_config *c)
{
	return plan_model(m, pool, tpg, c, 1, 0, 1, 0, 1);
}

int megatron_read_global(const struct megatron_export *e, int f, const char *name, const struct param *p, float *out)
{
	return read_global_from(e, f, name, p, out);
}

int megatron_read_expert_bias(const struct megatron_export *e, int l, char *name, size_t n, float *bias)
{
	return read_expert_bias(e, l, name, n, bias);
}

struct pk_value *megatron_args(struct pk_doc *d, const struct megatron_export *e, const json_t *config)
{
	return args_namespace(d, e, config);
}

int megatron_optimizer_common(struct pk_doc *d, struct pk_value *common, const struct megatron_export *e)
{
	return dist_optimizer_common(d, common, e);
}
