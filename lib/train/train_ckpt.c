/*
 * train_ckpt.c - what a training checkpoint holds and how a run resumes
 * from one (docs/checkpoint-format.md). Per iteration directory:
 *
 *   model.h5  every parameter under its Megatron Core name, global shape,
 *             fp32 master values; root attributes: iteration, consumed and
 *             skipped samples, FLOPs so far, the RNG seed, the config (JSON)
 *   optim.h5  exp_avg/<name>, exp_avg_sq/<name>; attributes: Adam's step,
 *             the scheduler fields Megatron keeps, the loss-scaler state
 *   model.stage-SSS.h5, optim.stage-SSS.h5
 *             with pipeline parallelism, stage SSS >= 1's tensors, written
 *             by that stage and reached from model.h5 / optim.h5 through
 *             external links under their names
 *
 * Resume is bit-exact because these are all the state there is: dropout
 * masks and data order are pure functions of (seed, iteration, sample).
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "model/ckpt_tok.h"
#include "model/gpt_ckpt.h"
#include "train/trainer.h"

/* The model-shaping flags under Megatron's argument names, so tools (and
 * ckpt_convert) can rebuild the model from the checkpoint alone. */
static char *config_json(const struct trainer *t)
{
	const struct args *a = t->a;
	char *model = gpt_config_to_json(&t->cfg, a->rotary_percent);
	json_t *o = json_loads(model, 0, NULL);
	free(model);
	if (!o)
		BUG("gpt_config_to_json wrote JSON jansson cannot read");
	json_object_set_new(o, "fp16", json_boolean(a->fp16));
	json_object_set_new(o, "bf16", json_boolean(a->bf16));
	json_object_set_new(o, "micro_batch_size", json_integer(t->mbs));
	json_object_set_new(o, "global_batch_size", json_integer(t->gbs));
	json_object_set_new(o, "train_iters", json_integer(t->train_iters));
	json_object_set_new(o, "seed", json_integer(a->seed));
	json_object_set_new(o, "tokenizer_type", json_string(a->tokenizer_type ? a->tokenizer_type : ""));
	char *s = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(1));
	json_decref(o);
	return s;
}

static size_t global_numel(const struct param *p)
{
	return (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
}

/* One parameter's global tensor from this rank's slice (local: its elements),
 * complete on rank 0 of tp, the group that splits it (the tensor-parallel
 * one, or for the experts the expert-tensor-parallel one): the slices are
 * gathered and put where params_global_pos_rank says. Collective over tp. */
static void param_global(struct dist_group *tp, const struct param *p, const float *local, float *global,
			 float *scratch)
{
	if (p->tp_axis < 0 || tp->size == 1) {
		memcpy(global, local, p->numel * sizeof(float));
		return;
	}
	dist_gather_equal_f32(tp, local, p->numel, scratch);
	int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
	for (int r = 0; tp->rank == 0 && r < tp->size; r++)
		for (size_t e = 0; e < p->numel; e++) {
			int64_t row, col;
			params_global_pos_rank(p, r, e, &row, &col);
			global[(size_t)(row * cols + col)] = scratch[(size_t)r * p->numel + e];
		}
}

/*
 * Pipeline parallelism: each stage's registry holds only its own tensors, and
 * each stage's leader (tensor-, data- and context-parallel rank 0: the
 * members of world rank 0's pipeline group, group rank = stage) writes them
 * itself, in parallel with the others, into files of its own in the one
 * transaction world rank 0 began: stage 0 into model.h5 and optim.h5, stage
 * s into model.stage-SSS.h5 and optim.stage-SSS.h5. Once every leader has
 * finished (closed, fsynced) its files, the others send rank 0 the names of
 * the tensors they wrote, and rank 0 links each of them into model.h5 /
 * optim.h5 under its own name, so those two stay the only entry points
 * (docs/checkpoint-format.md). Only the directory name, the names and
 * success flags travel; blocking transfers on the pipeline group, with tags
 * of their own so that they cannot match the schedule's activations.
 */
#define CKPT_TAG_NAMES_LEN 32512
#define CKPT_TAG_NAMES 32513
#define CKPT_TAG_EXPERT 32514

/* A stage's file: "model.h5" for stage 0, "model.stage-001.h5" for stage 1. */
static char *stage_file(const char *base, int stage)
{
	return stage ? xasprintf("%s.stage-%03d.h5", base, stage) : xasprintf("%s.h5", base);
}

/*
 * One save in progress (trainer.h: pending_save). A synchronous save writes
 * each global tensor as soon as it is assembled; --async-save keeps a copy
 * of each instead, and a thread of the stage's leader writes them while
 * training goes on. Only that thread touches HDF5 until it is joined (HDF5
 * is not thread-safe; the training loop never calls it), and it makes no
 * MPI call: the gathers before it and the commit protocol after it run on
 * the main thread (train_ckpt_save_poll).
 */
struct saved_tensor {
	char name[PARAM_NAME_MAX + 32];
	int file, ndim;
	int64_t shape[PARAM_MAX_DIM];
	float *data;
};

struct train_save {
	bool leader, async;
	int stage, mf, of;
	int bad;                  /* this rank's own failure */
	int64_t iteration;
	struct ckpt_writer *w;    /* the leader's, NULL elsewhere or after a failure to begin */
	struct saved_tensor *ts;  /* async: the tensors to write */
	size_t nts, cap_ts;
	pthread_t thread;
	bool have_thread;
	atomic_bool done;
	bool fault_kill;          /* MEGAC_FAULT_KILL_SAVE=ITERATION (the fault tests): the writer */
};                                /* dies (SIGKILL) after its first tensor of that save */

/* The fault tests' killed writer: no clean-up of any kind can run. */
static void fault_point(const struct train_save *j)
{
	if (j->fault_kill)
		raise(SIGKILL);
}

/* One global tensor to `file` as group/<name>, written or kept for the
 * writing thread; nothing on a rank that does not write, or after a
 * failure (the rank still takes part in the gathers). */
static int put_global(struct train_save *j, int file, const char *group, const char *pname, int ndim,
		      const int64_t *shape, const float *global)
{
	char name[PARAM_NAME_MAX + 32];
	if (!j->w || j->bad)
		return 0;
	snprintf(name, sizeof(name), "%s%s%s", group ? group : "", group ? "/" : "", pname);
	if (!j->async) {
		int r = ckpt_put_tensor(j->w, file, name, CKPT_F32, ndim, shape, global);
		fault_point(j);
		return r;
	}
	size_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= (size_t)shape[d];
	xgrow(&j->ts, &j->cap_ts, j->nts + 1, sizeof(*j->ts));
	struct saved_tensor *st = &j->ts[j->nts++];
	memcpy(st->name, name, sizeof(name));
	st->file = file;
	st->ndim = ndim;
	memcpy(st->shape, shape, (size_t)ndim * sizeof(int64_t));
	st->data = xmalloc((n ? n : 1) * sizeof(float));
	memcpy(st->data, global, n * sizeof(float));
	return 0;
}

/*
 * Every parameter of a registry-sized host array (this rank's slices) under
 * group/<name> at its global shape, one tensor at a time, so no rank ever
 * holds more than one global tensor beside its own slices. Called on the
 * ranks of each stage's data- and context-parallel-rank-0 replica, which
 * take part in the TP gathers; the stage's leader writes through w (NULL:
 * drop). The last stage's copy of tied embeddings (PARAM_SHARED) is left
 * out: the first stage's is written. A write error stops the writing, not
 * the gathers.
 */
/* The name of expert e_local of expert-parallel rank `peer` in MoE layer
 * l, as fc 1 or 2. */
static void expert_name(const struct trainer *t, int l, int peer, int e_local, int fc, char *out, size_t n)
{
	gpt_expert_param_name(out, n, l, peer * t->model.par.El + e_local, fc);
	gpt_mtp_layer_name(&t->model.c, out, n); /* a multi-token-prediction depth's layer */
}

/*
 * Expert parallelism: the stage's experts live on the expert-parallel ranks
 * of the writer's replica (its expert-data-parallel rank 0), each its own.
 * Every such rank assembles its experts tensor by tensor (gathered over
 * expert TP as above), in one order all of them know, (layer, local expert, fc1/fc2), and
 * sends each to the writer's EP rank 0, which writes them under their
 * global names after its own. Called on the ranks with expert-data-parallel
 * rank 0; the dense tensors are stream_tensors' alone.
 */
static int stream_experts(struct trainer *t, struct train_save *w, int file, const char *group, const float *local)
{
	struct gpt_model *m = &t->model;
	struct dist_group *ep = &t->dist.ep;
	size_t gcap = 0, scap = 0;
	float *global = NULL, *scratch = NULL;
	int ret = 0;
	for (int l = 0; l < gpt_num_layers_all(m); l++) {
		if (!gpt_layer_is_moe(m, l))
			continue;
		for (int el = 0; el < m->par.El; el++)
			for (int fc = 1; fc <= 2; fc++) {
				int idx = fc == 1 ? m->lp[l].efc1_w[m->par.e0 + el] : m->lp[l].efc2_w[m->par.e0 + el];
				const struct param *p = &m->reg.p[idx];
				size_t n = global_numel(p);
				xgrow(&global, &gcap, n, sizeof(float));
				xgrow(&scratch, &scap, p->numel * (size_t)t->dist.etp.size, sizeof(float));
				param_global(&t->dist.etp, p, local + p->offset, global, scratch);
				if (t->dist.etp.rank != 0)
					continue;
				if (ep->rank != 0) {
					dist_send_bytes(ep, global, n * sizeof(float), 0, CKPT_TAG_EXPERT);
					continue;
				}
				for (int peer = 0; peer < ep->size; peer++) {
					char name[PARAM_NAME_MAX];
					if (peer > 0)
						dist_recv_bytes(ep, global, n * sizeof(float), peer, CKPT_TAG_EXPERT);
					expert_name(t, l, peer, el, fc, name, sizeof(name));
					if (!ret)
						ret = put_global(w, file, group, name, p->ndim, p->shape, global);
				}
			}
	}
	free(scratch);
	free(global);
	return ret;
}

static int stream_tensors(struct trainer *t, struct train_save *w, int file, const char *group, const float *local)
{
	const struct param_registry *reg = &t->model.reg;
	size_t gcap = 0, scap = 0;
	float *global = NULL, *scratch = NULL;
	int ret = 0;
	for (int i = 0; i < reg->n; i++) {
		const struct param *p = &reg->p[i];
		if ((p->flags & PARAM_SHARED) || (dist_experts_apart(&t->dist.layout) && (p->flags & PARAM_EXPERT)))
			continue; /* the experts apart: stream_experts */
		xgrow(&global, &gcap, global_numel(p), sizeof(float));
		xgrow(&scratch, &scap, p->numel * (size_t)t->dist.tp.size, sizeof(float));
		param_global(&t->dist.tp, p, local + p->offset, global, scratch);
		if (!ret)
			ret = put_global(w, file, group, p->name, p->ndim, p->shape, global);
	}
	free(scratch);
	free(global);
	return ret;
}

/* Each MoE layer's expert bias of this stage (the same on every rank: no
 * gather), beside the parameters in the model file. */
static int put_expert_bias(struct trainer *t, struct train_save *w, int file)
{
	struct gpt_model *m = &t->model;
	int64_t shape[1] = { m->c.E };
	int ret = 0;
	for (int l = 0; m->moe.expert_bias && l < gpt_num_layers_all(m) && !ret; l++) {
		char name[PARAM_NAME_MAX];
		if (!gpt_layer_is_moe(m, l))
			continue;
		gpt_expert_bias_name(name, sizeof(name), l);
		gpt_mtp_layer_name(&m->c, name, sizeof(name));
		ret = put_global(w, file, NULL, name, 1, shape, m->moe.expert_bias + (size_t)l * m->c.E);
	}
	return ret;
}

/* The delayed FP8 recipe's amax histories and scales of this stage's FP8
 * layers (the same on every rank of the amax group: no gather), beside the
 * parameters in the model file. */
static int put_fp8_state(struct trainer *t, struct train_save *w, int file)
{
	struct gpt_model *m = &t->model;
	int ret = 0;
	for (int i = 0; i < gpt_fp8_nstate(m) && !ret; i++) {
		for (int sc = 0; sc < 2 && !ret; sc++) {
			char name[PARAM_NAME_MAX + 40];
			int64_t shape[2];
			const float *v = gpt_fp8_state(m, i, sc, shape);
			gpt_fp8_state_name(m, i, sc, name, sizeof(name));
			ret = put_global(w, file, NULL, name, sc ? 1 : 2, shape, v);
		}
	}
	return ret;
}

/* A stage leader's writer: world rank 0 begins the transaction and tells
 * the other leaders its directory, which they join. *bad: this rank's own
 * failure (a leader told that rank 0 could not begin writes nothing, and is
 * not at fault). The stage's files are created in it: *mf, *of. */
static struct ckpt_writer *open_stage(struct trainer *t, int *mf, int *of, int *bad)
{
	const struct args *a = t->a;
	struct dist_group *pp = &t->dist.pp;
	int stage = pp->rank;
	struct ckpt_writer *w = NULL;
	char *dir = NULL;
	uint64_t len = 0;
	if (stage == 0) {
		w = ckpt_begin(a->save, t->iteration);
		if (!w)
			*bad = -1;
		else
			dir = xstrdup(ckpt_tmp_dir(w));
		len = dir ? strlen(dir) + 1 : 0;
	}
	dist_bcast(pp, &len, sizeof(len), 0);
	if (len) {
		if (stage > 0)
			dir = xmalloc(len);
		dist_bcast(pp, dir, len, 0);
		if (dir[len - 1])
			BUG("a bad checkpoint directory name from pipeline stage 0");
	}
	if (stage > 0 && dir) {
		char *display = ckpt_iter_path(a->save, t->iteration);
		w = ckpt_join(dir, display);
		free(display);
		if (!w)
			*bad = -1;
	}
	free(dir);
	if (!w)
		return NULL;
	char *mname = stage_file("model", stage), *oname = stage_file("optim", stage);
	if ((*mf = ckpt_file_create(w, mname)) < 0 || (!a->no_save_optim && (*of = ckpt_file_create(w, oname)) < 0))
		*bad = -1;
	/* for whoever opens a stage's file alone */
	for (int k = 0; stage > 0 && !*bad && k < 2; k++) {
		int f = k ? *of : *mf;
		if (f >= 0 && (ckpt_put_attr_i64(w, f, NULL, "iteration", t->iteration) < 0 ||
			       ckpt_put_attr_i64(w, f, NULL, "pipeline_stage", stage) < 0))
			*bad = -1;
	}
	free(mname);
	free(oname);
	return w;
}

/* The names of the tensors this stage wrote, one per line. */
static char *stage_names(const struct trainer *t)
{
	const struct param_registry *reg = &t->model.reg;
	size_t len = 0;
	for (int i = 0; i < reg->n; i++)
		len += strlen(reg->p[i].name) + 1;
	const struct gpt_model *m = &t->model;
	for (int l = 0; t->dist.ep.size > 1 && l < gpt_num_layers_all(m); l++) /* the other EP ranks' experts */
		if (gpt_layer_is_moe(m, l))
			len += 2 * (size_t)(m->c.E - m->par.El) * PARAM_NAME_MAX;
	for (int l = 0; m->moe.expert_bias && l < gpt_num_layers_all(m); l++)
		len += gpt_layer_is_moe(m, l) ? PARAM_NAME_MAX + 1 : 0;
	len += (size_t)gpt_fp8_nstate(m) * 2 * (PARAM_NAME_MAX + 42);
	char *s = xmalloc(len + 1), *e = s;
	for (int i = 0; i < reg->n; i++)
		if (!(reg->p[i].flags & PARAM_SHARED))
			e += sprintf(e, "%s\n", reg->p[i].name);
	for (int l = 0; m->moe.expert_bias && l < gpt_num_layers_all(m); l++) { /* '!': in the model file only */
		char name[PARAM_NAME_MAX];
		if (!gpt_layer_is_moe(m, l))
			continue;
		gpt_expert_bias_name(name, sizeof(name), l);
		gpt_mtp_layer_name(&m->c, name, sizeof(name));
		e += sprintf(e, "!%s\n", name);
	}
	for (int i = 0; i < gpt_fp8_nstate(m); i++) /* '!': in the model file only */
		for (int sc = 0; sc < 2; sc++) {
			char name[PARAM_NAME_MAX + 40];
			gpt_fp8_state_name(m, i, sc, name, sizeof(name));
			e += sprintf(e, "!%s\n", name);
		}
	for (int l = 0; t->dist.ep.size > 1 && l < gpt_num_layers_all(m); l++)
		for (int peer = 1; gpt_layer_is_moe(m, l) && peer < t->dist.ep.size; peer++)
			for (int el = 0; el < m->par.El; el++)
				for (int fc = 1; fc <= 2; fc++) {
					char name[PARAM_NAME_MAX];
					expert_name(t, l, peer, el, fc, name, sizeof(name));
					e += sprintf(e, "%s\n", name);
				}
	*e = 0;
	return s;
}

/* World rank 0, once every stage's files are complete: each other stage's
 * name list (all received first, so that no sender waits on a failure
 * here), then for every name an external link in model.h5 and, with
 * optimizer state, one in each group of optim.h5. */
static int link_stages(struct trainer *t, struct ckpt_writer *w, int mf, int of)
{
	struct dist_group *pp = &t->dist.pp;
	char **names = xcalloc((size_t)pp->size, sizeof(*names));
	for (int s = 1; s < pp->size; s++) {
		uint64_t len;
		dist_recv_bytes(pp, &len, sizeof(len), s, CKPT_TAG_NAMES_LEN);
		names[s] = xmalloc(len ? len : 1);
		names[s][0] = 0;
		dist_recv_bytes(pp, names[s], len, s, CKPT_TAG_NAMES);
		if (len && names[s][len - 1])
			BUG("pipeline stage %d sent a bad list of checkpoint tensors", s);
	}
	int ret = 0;
	for (int s = 1; s < pp->size; s++) {
		char *mname = stage_file("model", s), *oname = stage_file("optim", s);
		for (char *n = names[s], *e; !ret && *n; n = e + 1) {
			e = strchr(n, '\n');
			if (!e)
				BUG("pipeline stage %d sent a bad list of checkpoint tensors", s);
			*e = 0;
			bool model_only = *n == '!'; /* a buffer (the expert bias): no optimizer state */
			n += model_only;
			ret = ckpt_put_external_link(w, mf, n, mname, n);
			for (int g = 0; !ret && !model_only && of >= 0 && g < 2; g++) {
				char gn[PARAM_NAME_MAX + 32];
				snprintf(gn, sizeof(gn), "%s/%s", g ? "exp_avg_sq" : "exp_avg", n);
				ret = ckpt_put_external_link(w, of, gn, oname, gn);
			}
		}
		free(mname);
		free(oname);
		free(names[s]);
	}
	free(names);
	return ret;
}

/* Adam's state `which` (0: exp_avg, 1: exp_avg_sq, 2: the fp32 main weights
 * of a bf16/fp16 model) for the whole registry
 * in host memory (plain: with the distributed optimizer only the root's
 * copy fills, and page-locking all of it on every rank would pin the whole
 * state per rank): this rank's, or with the distributed optimizer each
 * part's shards gathered over the group it is sharded over (data-parallel,
 * with context-parallel under CP, or expert-data-parallel for the experts;
 * called on every rank, since the gathers are collective; only the copy of
 * the group's rank 0 is complete: the data- and context-parallel rank 0's,
 * and for the experts each expert-parallel rank's of the writer's replica). */
static float *optim_state_full(struct trainer *t, int which)
{
	size_t total = t->model.reg.total;
	float *full = xcalloc(total ? total : 1, sizeof(float)); /* plain memory: a shard's pages only, off the root */
	for (int i = 0; i < t->nparts; i++) {
		const struct train_part *p = &t->part[i];
		/* fp32 values, whatever the states' formats and places */
		adam_get_state(&p->opt, which == 2 ? ADAM_MAIN : which ? ADAM_EXP_AVG_SQ : ADAM_EXP_AVG, full);
		if (p->sharded)
			dist_gather_f32(p->g, full + p->base, p->end - p->base);
	}
	return full;
}

static int put_state_attrs(struct trainer *t, struct ckpt_writer *w, int mf, int of)
{
	const struct args *a = t->a;
	char *cfg = config_json(t);
	int r = ckpt_put_attr_i64(w, mf, NULL, "iteration", t->iteration);
	r |= ckpt_put_attr_f64(w, mf, NULL, "checkpoint_version", 3.0);
	r |= ckpt_put_attr_i64(w, mf, NULL, "consumed_train_samples", t->consumed_train);
	r |= ckpt_put_attr_i64(w, mf, NULL, "consumed_valid_samples", t->consumed_valid);
	r |= ckpt_put_attr_i64(w, mf, NULL, "skipped_train_samples", t->skipped_train);
	r |= ckpt_put_attr_f64(w, mf, NULL, "num_floating_point_operations_so_far", t->flops_so_far);
	if (!a->no_save_rng)
		r |= ckpt_put_attr_i64(w, mf, NULL, "rng_seed", (int64_t)t->seed);
	/* so that a load can tell "saved without it" from "lost" */
	r |= ckpt_put_attr_i64(w, mf, NULL, "optimizer_state_saved", of >= 0);
	r |= ckpt_put_attr_str(w, mf, NULL, "config", cfg);
	free(cfg);
	/* the tokenizer and a copy of its files, for whoever reads the
	 * checkpoint without the flags (ckpt_tok.h) */
	struct ckpt_tok tok;
	if (ckpt_tok_from_args(&tok, a, t->tok) == 0) {
		r |= ckpt_tok_put(w, mf, &tok);
		ckpt_tok_free(&tok);
	} else { /* a tokenizer file gone since the start: the model is still worth saving */
		warning("the checkpoint of iteration %lld records no tokenizer (see above)", (long long)t->iteration);
	}
	if (of >= 0) {
		const struct lr_sched *s = &t->sched;
		/* as every file of the checkpoint: a load compares them */
		r |= ckpt_put_attr_i64(w, of, NULL, "iteration", t->iteration);
		r |= ckpt_put_attr_i64(w, of, NULL, "step", t->part[0].opt.step);
		r |= ckpt_put_attr_f64(w, of, NULL, "max_lr", s->max_lr);
		r |= ckpt_put_attr_f64(w, of, NULL, "min_lr", s->min_lr);
		r |= ckpt_put_attr_f64(w, of, NULL, "lr_warmup_steps", s->warmup_steps);
		r |= ckpt_put_attr_i64(w, of, NULL, "num_steps", s->num_steps);
		r |= ckpt_put_attr_str(w, of, NULL, "lr_decay_style", lr_sched_style_name(s->style));
		r |= ckpt_put_attr_i64(w, of, NULL, "lr_decay_steps", s->decay_steps);
		r |= ckpt_put_attr_f64(w, of, NULL, "start_wd", s->start_wd);
		r |= ckpt_put_attr_f64(w, of, NULL, "end_wd", s->end_wd);
		r |= ckpt_put_attr_str(w, of, NULL, "wd_incr_style", lr_sched_wd_style_name(s->wd_style));
		r |= ckpt_put_attr_i64(w, of, NULL, "wd_incr_steps", s->wd_incr_steps);
		r |= ckpt_put_attr_f64(w, of, NULL, "loss_scale", (double)t->scaler.scale);
		r |= ckpt_put_attr_i64(w, of, NULL, "growth_tracker", t->scaler.growth_tracker);
		r |= ckpt_put_attr_i64(w, of, NULL, "hysteresis_tracker", t->scaler.hysteresis_tracker);
		/* Adam's constants: what Megatron's param_groups carry (ckpt_convert --to megatron) */
		r |= ckpt_put_attr_f64(w, of, NULL, "adam_beta1", t->a->adam_beta1);
		r |= ckpt_put_attr_f64(w, of, NULL, "adam_beta2", t->a->adam_beta2);
		r |= ckpt_put_attr_f64(w, of, NULL, "adam_eps", t->a->adam_eps);
	}
	return r ? -1 : 0;
}

/*
 * Every tensor at its global shape (docs/design.md, "Checkpoints that any
 * layout can load": the files do not depend on
 * the layout that wrote them): the distributed optimizer's shards gathered
 * over DP (x CP), TP slices gathered tensor by tensor within each pipeline
 * stage, each stage's leader writing its stage's tensors. Only the data- and
 * context-parallel-rank-0 replica of each stage assembles tensors (the others
 * hold the same values). The commit:
 *
 *   1. rank 0 begins the transaction; the leaders join it and write;
 *   2. each leader of a stage s > 0 closes, fsyncs and names its files
 *      (ckpt_part_finish), or deletes them after a failure;
 *   3. the leaders learn which stages failed (all-reduce over the pipeline
 *      group); only if none did, the others send rank 0 their tensor names,
 *      and rank 0 links them, writes the attributes and commits (tracker
 *      last); otherwise rank 0 deletes the whole directory;
 *   4. every rank learns the outcome (all-reduce over the world).
 *
 * A rank that dies on the way never leaves a committed partial checkpoint:
 * nothing is renamed into place before step 3 has heard from every stage.
 */
/* The writing thread of an async save: the kept tensors, then (a stage
 * other than 0) its files finished. */
static void *save_thread(void *arg)
{
	struct train_save *j = arg;
	for (size_t i = 0; i < j->nts; i++) {
		struct saved_tensor *st = &j->ts[i];
		if (!j->bad && ckpt_put_tensor(j->w, st->file, st->name, CKPT_F32, st->ndim, st->shape, st->data) < 0)
			j->bad = -1;
		fault_point(j);
		free(st->data);
		st->data = NULL;
	}
	if (j->stage > 0) {
		if (j->bad)
			ckpt_part_abort(j->w);
		else
			j->bad = ckpt_part_finish(j->w);
		j->w = NULL;
	}
	atomic_store(&j->done, true);
	return NULL;
}

static void save_free(struct train_save *j)
{
	for (size_t i = 0; i < j->nts; i++)
		free(j->ts[i].data);
	free(j->ts);
	free(j);
}

/* Steps 2-4 of the commit (train_ckpt_save), on the main thread of every
 * rank, once the leaders' writes are done. */
static int save_finish(struct trainer *t, struct train_save *j)
{
	const struct args *a = t->a;
	struct dist_group *pp = &t->dist.pp;
	int stage = j->stage;
	dist_watchdog_pause(&t->dist, true);
	if (j->have_thread)
		pthread_join(j->thread, NULL);
	int bad = j->bad; /* the thread's, now that it has ended */
	/* 0: saved; 1 + s: pipeline stage s failed (the lowest one) */
	double code = 0;
	if (j->leader) {
		if (stage > 0 && j->w) { /* synchronous */
			if (bad)
				ckpt_part_abort(j->w);
			else
				bad = ckpt_part_finish(j->w);
			j->w = NULL;
		}
		double *failed = xcalloc((size_t)pp->size, sizeof(double));
		failed[stage] = bad != 0;
		dist_allreduce_max_f64(pp, failed, (size_t)pp->size);
		int first = -1;
		for (int s = pp->size - 1; s >= 0; s--)
			if (failed[s])
				first = s;
		free(failed);
		if (first < 0 && stage > 0) {
			char *names = stage_names(t);
			uint64_t len = strlen(names) + 1;
			dist_send_bytes(pp, &len, sizeof(len), 0, CKPT_TAG_NAMES_LEN);
			dist_send_bytes(pp, names, len, 0, CKPT_TAG_NAMES);
			free(names);
		}
		if (stage == 0) {
			if (first < 0) {
				if (link_stages(t, j->w, j->mf, j->of) < 0)
					bad = -1;
				if (bad)
					ckpt_abort(j->w);
				else
					bad = ckpt_commit(j->w); /* frees w, and refuses if any write failed */
				j->w = NULL;
				if (!bad && t->torch_dist_save && train_torch_dist_export(t, j->iteration) < 0)
					bad = -1;
				if (bad)
					first = 0;
			} else if (j->w) {
				ckpt_abort(j->w); /* the other stages' files included */
				j->w = NULL;
			}
			if (!bad && first < 0) {
				info("saved checkpoint at iteration %7lld to %s%s%s%s%s", (long long)j->iteration,
				     t->torch_dist_save ? t->torch_dist_save : a->save,
				     t->torch_dist_save ? " in Megatron's " : "",
				     t->torch_dist_save ? t->user_args->ckpt_format : "", t->torch_dist_save ? " format" : "",
				     j->have_thread ? " (written in the background)" : "");
				/* --keep-last-n-checkpoints: only now, with the new one the latest */
				if (a->keep_last_n_checkpoints > 0 && !t->torch_dist_save && /* (the export prunes those) */
				    ckpt_prune(a->save, (int)a->keep_last_n_checkpoints) < 0)
					warning("could not delete all old checkpoints in %s (see above); training goes on",
						a->save);
			}
		}
		code = first < 0 ? 0 : first + 1;
	}
	dist_allreduce_max_f64(&t->dist.world_g, &code, 1);
	dist_watchdog_pause(&t->dist, false);
	int64_t it = j->iteration;
	save_free(j);
	if (!code)
		return 0;
	/* Every rank says which stage failed: mpirun ends the others once the
	 * first rank exits, so any one of these lines may be the only one. */
	int s = (int)code - 1;
	if (pp->size == 1)
		return bad ? error("could not save the checkpoint of iteration %lld in %s", (long long)it, a->save) :
			     error("could not save the checkpoint of iteration %lld in %s: rank 0 could not write it",
				   (long long)it, a->save);
	return error("could not save the checkpoint of iteration %lld in %s: the writer of pipeline stage %d "
		     "failed%s, so nothing was saved", (long long)it, a->save, s,
		     !bad ? "" : stage == s ? " (this rank, see above)" : " (and this rank's, see above)");
}

int train_ckpt_save_poll(struct trainer *t, bool wait)
{
	struct train_save *j = t->pending_save;
	if (!j)
		return 0;
	if (!wait) { /* done everywhere? (every rank must agree, the commit is collective) */
		double busy = j->have_thread && !atomic_load(&j->done);
		dist_allreduce_max_f64(&t->dist.world_g, &busy, 1);
		if (busy > 0)
			return 0;
	}
	t->pending_save = NULL;
	return save_finish(t, j);
}

int train_ckpt_save(struct trainer *t, bool async)
{
	const struct args *a = t->a;
	bool optim = !a->no_save_optim;
	if (t->pending_save)
		BUG("a save while another is pending (train_ckpt_save_poll first)");
	struct train_save *j = xcalloc(1, sizeof(*j));
	bool assemble = t->dist.dp.rank == 0 && t->dist.cp.rank == 0;
	j->leader = assemble && t->dist.tp.rank == 0; /* a member of world rank 0's pipeline group */
	j->async = async;
	j->stage = t->dist.pp.rank;
	j->iteration = t->iteration;
	j->mf = j->of = -1;
	const char *kill_at = getenv("MEGAC_FAULT_KILL_SAVE");
	j->fault_kill = kill_at && atoll(kill_at) == t->iteration;
	/* the experts apart: the experts of the writer's replica are spread
	 * over its expert-TP and EP groups (the ranks with expert-data-parallel
	 * rank 0) */
	bool experts = dist_experts_apart(&t->dist.layout) && t->dist.edp.rank == 0;
	if (experts && j->leader && (t->dist.ep.rank != 0 || t->dist.etp.rank != 0))
		BUG("the writer is expert-parallel rank %d and expert-tensor-parallel rank %d, not 0 and 0",
		    t->dist.ep.rank, t->dist.etp.rank);
	dist_watchdog_pause(&t->dist, true); /* the others wait while the leaders write */
	if (j->leader) {
		j->w = open_stage(t, &j->mf, &j->of, &j->bad);
		/* the state as of now, whenever the files are finished */
		if (j->w && !j->bad && j->stage == 0 && put_state_attrs(t, j->w, j->mf, j->of) < 0)
			j->bad = -1;
	}
	size_t total = t->model.reg.total;
	if (t->model.w16 || t->fsdp.level == 3) { /* the fp32 main weights, from the optimizer's shards (collective) */
		float *local = optim_state_full(t, 2);
		if (assemble)
			j->bad |= stream_tensors(t, j, j->mf, NULL, local);
		if (experts)
			j->bad |= stream_experts(t, j, j->mf, NULL, local);
		free(local);
		if (assemble)
			j->bad |= put_expert_bias(t, j, j->mf) | put_fp8_state(t, j, j->mf);
	} else if (assemble || experts) {
		float *local = t->k->host_alloc((total ? total : 1) * sizeof(float));
		t->k->to_host(local, t->model.reg.data, total * sizeof(float));
		if (assemble)
			j->bad |= stream_tensors(t, j, j->mf, NULL, local);
		if (experts)
			j->bad |= stream_experts(t, j, j->mf, NULL, local);
		t->k->host_free(local);
		if (assemble)
			j->bad |= put_expert_bias(t, j, j->mf) | put_fp8_state(t, j, j->mf);
	}
	const char *groups[2] = { "exp_avg", "exp_avg_sq" };
	for (int s = 0; optim && s < 2; s++) {
		float *local = optim_state_full(t, s); /* collective over the parts' groups */
		if (assemble)
			j->bad |= stream_tensors(t, j, j->of, groups[s], local);
		if (experts)
			j->bad |= stream_experts(t, j, j->of, groups[s], local);
		free(local);
	}
	dist_watchdog_pause(&t->dist, false);
	if (async && j->leader && j->w) {
		if (pthread_create(&j->thread, NULL, save_thread, j) == 0) {
			j->have_thread = true;
		} else {
			warning("could not start the --async-save writer thread; writing now");
			save_thread(j);
		}
	}
	t->pending_save = j;
	return async ? 0 : train_ckpt_save_poll(t, true);
}

void train_ckpt_save_drop(struct trainer *t)
{
	struct train_save *j = t->pending_save;
	if (!j)
		return;
	t->pending_save = NULL;
	if (j->have_thread)
		pthread_join(j->thread, NULL);
	if (j->w && j->stage == 0)
		ckpt_abort(j->w);
	else if (j->w)
		ckpt_part_abort(j->w);
	save_free(j);
}

/* Every parameter under group/<name>; this rank's slice goes to local, a
 * registry-sized host array. */
static int get_tensors(struct ckpt_reader *r, int file, struct trainer *t, const char *group, float *local)
{
	const struct param_registry *reg = &t->model.reg;
	char name[PARAM_NAME_MAX + 32];
	int ret = 0;
	for (int i = 0; i < reg->n && !ret; i++) {
		const struct param *p = &reg->p[i];
		snprintf(name, sizeof(name), "%s%s%s", group ? group : "", group ? "/" : "", p->name);
		ret = gpt_read_param(r, file, name, p, local + p->offset);
	}
	return ret;
}

/* Megatron's padded vocabulary is the tokenizer's padded to a multiple of
 * --make-vocab-size-divisible-by x TP, so another TP pads differently: the
 * divisor that reproduces the checkpoint's padding at this TP (a power of
 * two below the flags' one first), or 0 when none does. */
static int64_t divisor_for(int64_t V, int64_t Vp, int64_t tp, int64_t from)
{
	if (from < 1)
		from = 128;
	for (int pass = 0; pass < 2; pass++)
		for (int64_t d = from; d >= 1; d--) {
			if (pass == 0 && (d & (d - 1)))
				continue;
			int64_t m = d * tp;
			if ((V + m - 1) / m * m == Vp)
				return d;
		}
	return 0;
}

/* The vocabulary part of check_config: appended to why. */
static void check_vocab(struct sbuf *why, const struct gpt_config *s, const struct gpt_config *c, const struct args *a)
{
	if (s->V != c->V) {
		sbuf_addf(why, "%sthe tokenizer's vocabulary: %d tokens in the checkpoint, %d from the flags (another "
			  "tokenizer?)", why->len ? "; " : "", s->V, c->V);
		return;
	}
	if (s->Vp == c->Vp)
		return;
	int64_t tp = a->tensor_model_parallel_size;
	sbuf_addf(why, "%sa padded vocabulary (the embedding's rows): %d in the checkpoint, %d from the flags (",
		  why->len ? "; " : "", s->Vp, c->Vp);
	if (a->padded_vocab_size > 0)
		sbuf_addf(why, "--padded-vocab-size %lld", (long long)a->padded_vocab_size);
	else
		sbuf_addf(why, "the tokenizer's %d tokens padded to a multiple of --make-vocab-size-divisible-by %lld x "
			  "TP %lld", c->V, (long long)a->make_vocab_size_divisible_by, (long long)tp);
	sbuf_addstr(why, "): ");
	int64_t d = divisor_for(c->V, s->Vp, tp, a->padded_vocab_size > 0 ? 128 : a->make_vocab_size_divisible_by);
	if (d > 0 && a->padded_vocab_size <= 0)
		sbuf_addf(why, "--make-vocab-size-divisible-by %lld pads it as the checkpoint does at TP %lld", (long long)d,
			  (long long)tp);
	else if (d > 0)
		sbuf_addf(why, "leave out --padded-vocab-size and give --make-vocab-size-divisible-by %lld to pad as the "
			  "checkpoint does at TP %lld", (long long)d, (long long)tp);
	else if (s->Vp % tp == 0)
		sbuf_addf(why, "--padded-vocab-size %d keeps the checkpoint's rows", s->Vp);
	else
		sbuf_addf(why, "ckpt_convert --target-tensor-parallel-size %lld re-pads the checkpoint for TP %lld", (long long)tp,
			  (long long)tp);
}

/* The checkpoint's model must be the one the flags describe: every field
 * of the configuration it records that changes what the model computes,
 * all differences in one message (a tensor the model does not have would
 * otherwise be skipped without a word, as Megatron's strict load refuses,
 * and a RoPE base or norm epsilon would silently change the losses). What
 * only changes training (dropout, precision) is said, not refused. */
static int check_config(struct ckpt_reader *r, int file, const struct trainer *t)
{
	struct gpt_config s;
	if (gpt_config_from_ckpt(&s, r, file) < 0)
		return -1;
	char *stored, *flags = config_json(t), where[4200];
	snprintf(where, sizeof(where), "'%s/model.h5'", ckpt_reader_dir(r));
	if (ckpt_get_attr_str(r, file, NULL, "config", &stored) < 0) {
		free(flags);
		return -1;
	}
	struct sbuf math = SBUF_INIT, other = SBUF_INIT;
	int n = gpt_config_diff(stored, flags, where, &math, &other);
	if (n >= 0) {
		size_t before = math.len;
		check_vocab(&math, &s, &t->cfg, t->a);
		n += math.len != before;
	}
	int rc = 0;
	if (n > 0)
		rc = error("'%s' holds another model than the flags describe (%d difference%s): %s", ckpt_reader_dir(r), n,
			   n == 1 ? "" : "s", math.buf);
	else if (n < 0)
		rc = -1;
	else if (other.len && t->dist.rank == 0)
		warning("'%s' was trained with other settings than these flags give (allowed; training goes on with the "
			"flags'): %s", ckpt_reader_dir(r), other.buf);
	sbuf_release(&math);
	sbuf_release(&other);
	free(stored);
	free(flags);
	return rc;
}

/* The model's weights into the registry: a bf16/fp16 model's rounded, and
 * the optimizer's fp32 main weights of its shard exactly as stored. */
static int get_model(struct ckpt_reader *r, int file, struct trainer *t)
{
	size_t total = t->model.reg.total;
	float *local = t->k->host_alloc((total ? total : 1) * sizeof(float));
	int ret = get_tensors(r, file, t, NULL, local);
	if (!ret)
		gpt_set_weights(&t->model, local);
	if (!ret)
		ret = gpt_load_expert_bias(&t->model, r, file);
	if (!ret && t->model.fp8)
		ret = gpt_fp8_load_state(&t->model, r, file);
	/* a 16-bit model's, or the offloaded part's copy of an fp32 model's */
	for (int i = 0; !ret && i < t->nparts; i++)
		adam_set_state(&t->part[i].opt, ADAM_MAIN, local);
	t->k->host_free(local);
	return ret;
}

/* Adam's state `which` (0: exp_avg, 1: exp_avg_sq): the whole tensors
 * read, each part's [lo, hi) kept. */
static int get_optim_state(struct ckpt_reader *r, int file, struct trainer *t, int which)
{
	size_t total = t->model.reg.total;
	float *full = xcalloc(total ? total : 1, sizeof(float));
	int ret = get_tensors(r, file, t, which ? "exp_avg_sq" : "exp_avg", full);
	for (int i = 0; !ret && i < t->nparts; i++) /* into each state's format (16-bit: rounded) */
		adam_set_state(&t->part[i].opt, which ? ADAM_EXP_AVG_SQ : ADAM_EXP_AVG, full);
	free(full);
	return ret;
}

/* Megatron's OptimizerParamScheduler.load_state_dict: every field must equal
 * the flags unless --override-opt-param-scheduler (take the flags) or
 * --use-checkpoint-opt-param-scheduler (take the checkpoint) says which wins. */
static int check_sched(struct trainer *t, struct ckpt_reader *r, int of)
{
	struct lr_sched *s = &t->sched, c = *s;
	char *style = NULL, *wd_style = NULL;
	int64_t num;
	int ret = -1;
	if (ckpt_get_attr_f64(r, of, NULL, "max_lr", &c.max_lr) < 0 ||
	    ckpt_get_attr_f64(r, of, NULL, "min_lr", &c.min_lr) < 0 ||
	    ckpt_get_attr_f64(r, of, NULL, "lr_warmup_steps", &c.warmup_steps) < 0 ||
	    ckpt_get_attr_i64(r, of, NULL, "lr_decay_steps", &c.decay_steps) < 0 ||
	    ckpt_get_attr_str(r, of, NULL, "lr_decay_style", &style) < 0 ||
	    ckpt_get_attr_f64(r, of, NULL, "start_wd", &c.start_wd) < 0 ||
	    ckpt_get_attr_f64(r, of, NULL, "end_wd", &c.end_wd) < 0 ||
	    ckpt_get_attr_i64(r, of, NULL, "wd_incr_steps", &c.wd_incr_steps) < 0 ||
	    ckpt_get_attr_str(r, of, NULL, "wd_incr_style", &wd_style) < 0 ||
	    ckpt_get_attr_i64(r, of, NULL, "num_steps", &num) < 0)
		goto out;
	if (lr_sched_parse_style(style, &c.style) < 0 || lr_sched_parse_wd_style(wd_style, &c.wd_style) < 0)
		goto out;
	if (t->a->override_opt_param_scheduler) {
		/* Megatron then also realigns the step with the samples consumed */
		s->num_steps = num != t->consumed_train ? t->consumed_train : num;
		ret = 0;
		goto out;
	}
	c.num_steps = num;
	if (t->a->use_checkpoint_opt_param_scheduler || t->train_iters == 0) {
		*s = c; /* (not training: the checkpoint's schedule, for a save to keep) */
		ret = 0;
		goto out;
	}
	/* Every field that changes the schedule from here on, with both values.
	 * With a constant weight decay its ramp length changes nothing, nor do
	 * the decay length and the minimum with a constant learning rate
	 * (lr_sched_lr/_wd never read them then): those are taken from the
	 * flags without a word (Megatron asserts them equal all the same). */
	bool wd_const = c.wd_style == LR_SCHED_WD_CONSTANT && s->wd_style == LR_SCHED_WD_CONSTANT;
	bool lr_const = c.style == LR_SCHED_CONSTANT && s->style == LR_SCHED_CONSTANT;
	struct sbuf why = SBUF_INIT;
	if (c.max_lr != s->max_lr)
		sbuf_addf(&why, "; --lr: %.9g in the checkpoint, %.9g from the flags", c.max_lr, s->max_lr);
	if (c.min_lr != s->min_lr && !lr_const)
		sbuf_addf(&why, "; --min-lr: %.9g in the checkpoint, %.9g from the flags", c.min_lr, s->min_lr);
	if (c.warmup_steps != s->warmup_steps)
		sbuf_addf(&why, "; the warmup length: %.17g samples in the checkpoint, %.17g from the flags "
			  "(--lr-warmup-iters x --global-batch-size, --lr-warmup-samples or --lr-warmup-fraction)",
			  c.warmup_steps, s->warmup_steps);
	if (c.decay_steps != s->decay_steps && !lr_const)
		sbuf_addf(&why, "; the decay length: %lld samples in the checkpoint, %lld from the flags (--lr-decay-iters, "
			  "else --train-iters, x --global-batch-size %lld; or --lr-decay-samples, else --train-samples)",
			  (long long)c.decay_steps, (long long)s->decay_steps, (long long)t->gbs);
	if (c.style != s->style)
		sbuf_addf(&why, "; --lr-decay-style: %s in the checkpoint, %s from the flags", lr_sched_style_name(c.style),
			  lr_sched_style_name(s->style));
	if (c.start_wd != s->start_wd)
		sbuf_addf(&why, "; the %sweight decay (%s): %.9g in the checkpoint, %.9g from the flags",
			  wd_const ? "" : "start ", wd_const ? "--weight-decay" : "--start-weight-decay", c.start_wd,
			  s->start_wd);
	if (c.end_wd != s->end_wd && !wd_const)
		sbuf_addf(&why, "; the end weight decay (--end-weight-decay): %.9g in the checkpoint, %.9g from the flags",
			  c.end_wd, s->end_wd);
	if (c.wd_incr_steps != s->wd_incr_steps && !wd_const)
		sbuf_addf(&why, "; the weight-decay ramp length: %lld samples in the checkpoint, %lld from the flags "
			  "(--train-iters x --global-batch-size %lld, or --train-samples)", (long long)c.wd_incr_steps,
			  (long long)s->wd_incr_steps, (long long)t->gbs);
	if (c.wd_style != s->wd_style)
		sbuf_addf(&why, "; --weight-decay-incr-style: %s in the checkpoint, %s from the flags",
			  lr_sched_wd_style_name(c.wd_style), lr_sched_wd_style_name(s->wd_style));
	if (why.len) {
		error("'%s': the optimizer schedule of the flags differs from the checkpoint's: %s; pass "
		      "--override-opt-param-scheduler to train on with the flags' schedule, or "
		      "--use-checkpoint-opt-param-scheduler to keep the checkpoint's", ckpt_reader_dir(r), why.buf + 2);
		sbuf_release(&why);
		goto out;
	}
	s->num_steps = num;
	ret = 0;
out:
	free(style);
	free(wd_style);
	return ret;
}

/* load_here's outcomes besides 0: the flags and the checkpoint disagree
 * (every iteration would), or this iteration's files are damaged:
 * missing, truncated, a checksum that does not match. */
#define LOAD_FATAL (-1)
#define LOAD_DAMAGED (-2)

static int load_here(struct trainer *t, int64_t it);

/* Rank 0 reads the tracker and every rank loads what it found (as Megatron
 * agrees on the iteration), so node-local directories or a tracker changing
 * under a running job cannot split the ranks. All learn whether all
 * succeeded. When the tracker's iteration turns out damaged on any rank
 * (the errors above name the file), every rank falls back to the newest
 * older iteration in the folder, with a warning, until one loads; an
 * iteration asked for with --ckpt-step is never replaced. */
int train_ckpt_load(struct trainer *t)
{
	const struct args *a = t->a;
	int64_t it = 0;
	int found = 0;
	if (t->dist.rank == 0) {
		/* partial checkpoints of killed saves: said, and removed when
		 * their writer is certainly dead */
		ckpt_sweep(a->load, true);
		found = ckpt_latest(a->load, &it);
		/* a lost tracker: training from scratch would save over the
		 * iterations there, so the newest of them loads (only complete
		 * iterations are ever renamed into place) */
		if (found == 1 && ckpt_newest(a->load, &it) == 0) {
			warning("--load %s: no latest_checkpointed_iteration.txt, but iteration directories: resuming from "
				"the newest, iteration %lld (a lost tracker; starting from scratch would overwrite them)",
				a->load, (long long)it);
			found = 0;
		}
	}
	int64_t pick[2] = { found, it };
	dist_bcast(&t->dist.world_g, pick, sizeof(pick), 0);
	found = (int)pick[0];
	it = pick[1];
	if (found < 0)
		return t->dist.rank == 0 ? -1 : error("rank 0 could not read the checkpoint tracker in %s", a->load);
	if (a->ckpt_step >= 0) {
		it = a->ckpt_step;
		found = 0;
	}
	if (found == 1) {
		if (a->exit_on_missing_checkpoint)
			return error("--load %s: no checkpoint there (no latest_checkpointed_iteration.txt)", a->load);
		if (t->dist.rank == 0)
			warning("--load %s: no checkpoint found, training from scratch", a->load);
		return 1;
	}
	/* what a load sets besides the tensors (which a later attempt overwrites
	 * whole): each attempt starts from it */
	struct {
		int64_t iteration, consumed_train, consumed_valid, skipped_train, step;
		double flops;
		uint64_t seed;
		struct lr_sched sched;
		struct grad_scaler scaler;
	} before = { t->iteration, t->consumed_train, t->consumed_valid, t->skipped_train, t->part[0].opt.step,
		     t->flops_so_far, t->seed, t->sched, t->scaler };
	for (;;) {
		t->iteration = before.iteration;
		t->consumed_train = before.consumed_train;
		t->consumed_valid = before.consumed_valid;
		t->skipped_train = before.skipped_train;
		t->flops_so_far = before.flops;
		t->seed = before.seed;
		t->sched = before.sched;
		t->scaler = before.scaler;
		for (int i = 0; i < t->nparts; i++)
			t->part[i].opt.step = before.step;
		int r = load_here(t, it);
		/* 2: some rank could not use the flags with it, 1: damaged somewhere */
		double worst = r == LOAD_FATAL ? 2 : r == LOAD_DAMAGED ? 1 : 0;
		dist_allreduce_max_f64(&t->dist.world_g, &worst, 1);
		if (worst == 0)
			return 0;
		if (worst == 2 || a->ckpt_step >= 0 || it == CKPT_RELEASE)
			return r < 0 ? -1 : error("another rank could not load the checkpoint from %s", a->load);
		/* the next older iteration, chosen by rank 0 for all */
		int64_t older = -1;
		if (t->dist.rank == 0) {
			int64_t *its;
			size_t n;
			if (ckpt_iterations(a->load, &its, &n) == 0)
				for (size_t i = 0; i < n; i++)
					if (its[i] < it)
						older = its[i];
			free(its);
		}
		dist_bcast(&t->dist.world_g, &older, sizeof(older), 0);
		if (older < 0)
			return error("--load %s: iteration %lld is damaged%s and there is no older iteration to fall "
				     "back to", a->load, (long long)it, r < 0 ? " (see above)" : " on another rank");
		if (t->dist.rank == 0)
			warning("--load %s: iteration %lld is damaged (see above); falling back to iteration %lld, the "
				"newest older one", a->load, (long long)it, (long long)older);
		it = older;
	}
}

/* Load iteration `it` of --load: 0, LOAD_FATAL or LOAD_DAMAGED after error(). */
static int load_here(struct trainer *t, int64_t it)
{
	const struct args *a = t->a;
	struct ckpt_reader *r = ckpt_open(a->load, it);
	if (!r)
		return LOAD_DAMAGED;
	bool finetune = a->finetune || it == CKPT_RELEASE;
	int ret = LOAD_DAMAGED;
	int mf = ckpt_file_open(r, "model.h5");
	if (mf < 0)
		goto out;
	/* the optimizer's file is opened now too, so that files of different
	 * iterations are found before anything is read */
	int64_t has_optim = 1;
	bool want_optim = !finetune && !a->no_load_optim && !a->skip_train;
	if (want_optim && ckpt_has_attr(r, mf, NULL, "optimizer_state_saved") == 1 &&
	    ckpt_get_attr_i64(r, mf, NULL, "optimizer_state_saved", &has_optim) == 0 && !has_optim) {
		error("'%s' holds no optimizer state (saved with --no-save-optim, or converted without it): give "
		      "--no-load-optim to start the optimizer afresh, or --finetune", ckpt_reader_dir(r));
		ret = LOAD_FATAL;
		goto out;
	}
	int of = want_optim ? ckpt_file_open(r, "optim.h5") : -1;
	if ((want_optim && of < 0) || ckpt_check_iteration(r) < 0)
		goto out;
	if (check_config(r, mf, t) < 0) {
		ret = LOAD_FATAL;
		goto out;
	}
	if (get_model(r, mf, t) < 0)
		goto out;
	if (!finetune) {
		if (ckpt_get_attr_i64(r, mf, NULL, "iteration", &t->iteration) < 0 ||
		    ckpt_get_attr_i64(r, mf, NULL, "consumed_train_samples", &t->consumed_train) < 0 ||
		    ckpt_get_attr_i64(r, mf, NULL, "consumed_valid_samples", &t->consumed_valid) < 0 ||
		    ckpt_get_attr_i64(r, mf, NULL, "skipped_train_samples", &t->skipped_train) < 0 ||
		    ckpt_get_attr_f64(r, mf, NULL, "num_floating_point_operations_so_far", &t->flops_so_far) < 0)
			goto out;
		if (!a->no_load_rng) {
			int64_t seed;
			if (ckpt_has_attr(r, mf, NULL, "rng_seed") == 1) {
				if (ckpt_get_attr_i64(r, mf, NULL, "rng_seed", &seed) < 0)
					goto out;
				t->seed = (uint64_t)seed;
			}
		}
		if (want_optim) {
			int64_t step, growth, hyst;
			double scale;
			if (get_optim_state(r, of, t, 0) < 0 || get_optim_state(r, of, t, 1) < 0 ||
			    ckpt_get_attr_i64(r, of, NULL, "step", &step) < 0)
				goto out;
			/* A checkpoint of iteration 0 has taken no step: its schedule (empty
			 * when --train-iters 0 saved it) is no state to continue, the flags'
			 * is the whole schedule. */
			if (t->iteration != 0 && check_sched(t, r, of) < 0) {
				ret = LOAD_FATAL;
				goto out;
			}
			if (ckpt_get_attr_f64(r, of, NULL, "loss_scale", &scale) < 0 ||
			    ckpt_get_attr_i64(r, of, NULL, "growth_tracker", &growth) < 0 ||
			    ckpt_get_attr_i64(r, of, NULL, "hysteresis_tracker", &hyst) < 0)
				goto out;
			for (int i = 0; i < t->nparts; i++)
				t->part[i].opt.step = step;
			if (t->scaler.mode == GRAD_SCALER_DYNAMIC) {
				t->scaler.scale = (float)scale;
				t->scaler.growth_tracker = growth;
				t->scaler.hysteresis_tracker = (int)hyst;
			}
		}
		/* --no-load-optim: like Megatron, the schedule starts over (num_steps 0) */
	}
	if (t->dist.rank == 0)
		info("loaded checkpoint from %s at iteration %lld%s", ckpt_reader_dir(r), (long long)t->iteration,
		     finetune ? " (weights only)" : "");
	ret = 0;
out:
	ckpt_close(r);
	return ret;
}
