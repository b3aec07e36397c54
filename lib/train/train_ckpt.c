/*
 * train_ckpt.c - what a training checkpoint holds and how a run resumes
 * from one (docs/checkpoint-format.md). Per iteration directory:
 *
 *   model.h5  every parameter under its Megatron Core name, global shape,
 *             fp32 master values; root attributes: iteration, consumed and
 *             skipped samples, FLOPs so far, the RNG seed, the config (JSON)
 *   optim.h5  exp_avg/<name>, exp_avg_sq/<name>; attributes: Adam's step,
 *             the scheduler fields Megatron keeps, the loss-scaler state
 *
 * Resume is bit-exact because these are all the state there is: dropout
 * masks and data order are pure functions of (seed, iteration, sample).
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "train/trainer.h"

/* The model-shaping flags under Megatron's argument names, so tools (and
 * ckpt_convert) can rebuild the model from the checkpoint alone. */
static char *config_json(const struct trainer *t)
{
	const struct gpt_config *c = &t->cfg;
	const struct args *a = t->a;
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
	json_object_set_new(o, "position_embedding_type", json_string(c->rope ? "rope" : "learned_absolute"));
	json_object_set_new(o, "rotary_base", json_integer((json_int_t)c->rotary_base));
	json_object_set_new(o, "rotary_percent", json_real(a->rotary_percent));
	json_object_set_new(o, "normalization", json_string(c->rmsnorm ? "RMSNorm" : "LayerNorm"));
	json_object_set_new(o, "norm_epsilon", json_real(c->eps));
	json_object_set_new(o, "swiglu", json_boolean(c->swiglu));
	json_object_set_new(o, "add_bias_linear", json_boolean(c->bias));
	json_object_set_new(o, "bias_gelu_fusion", json_boolean(c->gelu == KOPS_GELU_TANH));
	json_object_set_new(o, "untie_embeddings_and_output_weights", json_boolean(c->untied));
	json_object_set_new(o, "vocab_size", json_integer(c->V));
	json_object_set_new(o, "padded_vocab_size", json_integer(c->Vp));
	json_object_set_new(o, "init_method_std", json_real(c->init_std));
	json_object_set_new(o, "hidden_dropout", json_real(c->hidden_dropout));
	json_object_set_new(o, "attention_dropout", json_real(c->attention_dropout));
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
 * complete on tensor-parallel rank 0: the TP ranks' slices are gathered and
 * put where params_global_pos_rank says. Collective over the TP group. */
static void param_global(struct trainer *t, const struct param *p, const float *local, float *global,
			 float *scratch)
{
	struct dist_group *tp = &t->dist.tp;
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
 * Pipeline parallelism: each stage's registry holds only its own tensors, so
 * world rank 0 (stage 0) writes its stage's tensors and then receives the
 * others', stage by stage, from the leaders of the stages (tensor-, data- and
 * context-parallel rank 0: the other members of rank 0's pipeline group, at
 * group rank = stage). Per tensor a leader sends a header, then the global
 * tensor's floats; a header with end set closes its stage's stream. Blocking
 * transfers on the pipeline group, with tags of their own so that they
 * cannot match the schedule's activations.
 */
#define CKPT_TAG_HEAD 32512
#define CKPT_TAG_DATA 32513

struct tensor_head {
	char name[PARAM_NAME_MAX];
	int64_t end; /* 1: no more tensors from this stage */
	int64_t ndim;
	int64_t shape[PARAM_MAX_DIM];
};

/* One global tensor to `file` as group/<name>; nothing when w is NULL (a
 * failed save that still takes part in the transfers). */
static int put_global(struct ckpt_writer *w, int file, const char *group, const char *pname, int ndim,
		      const int64_t *shape, const float *global)
{
	char name[PARAM_NAME_MAX + 32];
	if (!w)
		return 0;
	snprintf(name, sizeof(name), "%s%s%s", group ? group : "", group ? "/" : "", pname);
	return ckpt_put_tensor(w, file, name, CKPT_F32, ndim, shape, global);
}

/* World rank 0: the tensors of stages 1 .. pp-1, in stage order, written
 * (or, once a write failed or with w NULL, received and dropped, so that
 * every sender finishes). *global grows to the largest tensor. */
static int receive_stages(struct trainer *t, struct ckpt_writer *w, int file, const char *group, float **global,
			  size_t *gcap)
{
	struct dist_group *pp = &t->dist.pp;
	int ret = 0;
	for (int s = 1; s < pp->size; s++)
		for (;;) {
			struct tensor_head h;
			dist_recv_bytes(pp, &h, sizeof(h), s, CKPT_TAG_HEAD);
			if (h.end)
				break;
			size_t n = 1;
			if (!memchr(h.name, 0, sizeof(h.name)) || h.ndim < 1 || h.ndim > PARAM_MAX_DIM)
				BUG("pipeline stage %d sent a bad checkpoint tensor header", s);
			for (int d = 0; d < h.ndim; d++) {
				if (h.shape[d] < 0 || (h.shape[d] && n > SIZE_MAX / sizeof(float) / (size_t)h.shape[d]))
					BUG("pipeline stage %d sent a bad shape for %s", s, h.name);
				n *= (size_t)h.shape[d];
			}
			xgrow(global, gcap, n, sizeof(float));
			dist_recv_bytes(pp, *global, n * sizeof(float), s, CKPT_TAG_DATA);
			if (!ret)
				ret = put_global(w, file, group, h.name, (int)h.ndim, h.shape, *global);
		}
	return ret;
}

/*
 * Every parameter of a registry-sized host array (this rank's slices) under
 * group/<name> at its global shape, one tensor at a time, so no rank ever
 * holds more than one global tensor beside its own slices. Called on the
 * ranks of each stage's data- and context-parallel-rank-0 replica, which
 * take part in the TP gathers; world rank 0 (writer) writes through w (NULL:
 * drop), the other stages' leaders send to it. The last stage's copy of tied
 * embeddings (PARAM_SHARED) is left out: the first stage's is written. A
 * write error stops the writing, not the collectives or the transfers.
 */
static int stream_tensors(struct trainer *t, bool writer, struct ckpt_writer *w, int file, const char *group,
			  const float *local)
{
	const struct param_registry *reg = &t->model.reg;
	struct dist_group *pp = &t->dist.pp;
	/* a member of world rank 0's pipeline group, other than rank 0 */
	bool sender = pp->size > 1 && pp->rank > 0 && t->dist.tp.rank == 0 && t->dist.dp.rank == 0 &&
		      t->dist.cp.rank == 0;
	size_t gcap = 0, scap = 0;
	float *global = NULL, *scratch = NULL;
	int ret = 0;
	for (int i = 0; i < reg->n; i++) {
		const struct param *p = &reg->p[i];
		if (p->flags & PARAM_SHARED)
			continue;
		xgrow(&global, &gcap, global_numel(p), sizeof(float));
		xgrow(&scratch, &scap, p->numel * (size_t)t->dist.tp.size, sizeof(float));
		param_global(t, p, local + p->offset, global, scratch);
		if (writer) {
			if (!ret)
				ret = put_global(w, file, group, p->name, p->ndim, p->shape, global);
		} else if (sender) {
			struct tensor_head h;
			memset(&h, 0, sizeof(h));
			snprintf(h.name, sizeof(h.name), "%s", p->name);
			h.ndim = p->ndim;
			for (int d = 0; d < p->ndim; d++)
				h.shape[d] = p->shape[d];
			dist_send_bytes(pp, &h, sizeof(h), 0, CKPT_TAG_HEAD);
			dist_send_bytes(pp, global, global_numel(p) * sizeof(float), 0, CKPT_TAG_DATA);
		}
	}
	free(scratch);
	if (sender) {
		struct tensor_head h;
		memset(&h, 0, sizeof(h));
		h.end = 1;
		dist_send_bytes(pp, &h, sizeof(h), 0, CKPT_TAG_HEAD);
	}
	if (writer)
		ret |= receive_stages(t, ret ? NULL : w, file, group, &global, &gcap);
	free(global);
	return ret;
}

/* Adam's state for the whole registry in host memory: this rank's, or with
 * the distributed optimizer every shard gathered over the group it is
 * sharded over (data-parallel, with context-parallel under CP; called on
 * every rank, since the gather is collective; only the copy of that group's
 * rank 0, data- and context-parallel rank 0, is complete). */
static float *optim_state_full(struct trainer *t, const float *state)
{
	size_t total = t->model.reg.total, lo = t->opt.lo, hi = t->opt.hi;
	float *full = xcalloc(total ? total : 1, sizeof(float));
	t->k->to_host(full + lo, state, (hi - lo) * sizeof(float));
	if (hi - lo != total)
		dist_gather_f32(t->gdp, full, total);
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
	r |= ckpt_put_attr_str(w, mf, NULL, "config", cfg);
	free(cfg);
	if (of >= 0) {
		const struct lr_sched *s = &t->sched;
		r |= ckpt_put_attr_i64(w, of, NULL, "step", t->opt.step);
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
	}
	return r ? -1 : 0;
}

/* Every tensor at its global shape (decision 5: the files do not depend on
 * the layout that wrote them): the distributed optimizer's shards gathered
 * over DP (x CP), TP slices gathered tensor by tensor within each pipeline stage,
 * the other stages' tensors sent to world rank 0, which writes while the
 * others wait. Only the data- and context-parallel-rank-0 replica of each
 * stage assembles tensors (the others hold the same values). */
int train_ckpt_save(struct trainer *t)
{
	const struct args *a = t->a;
	bool writer = t->dist.rank == 0, optim = !a->no_save_optim;
	bool assemble = t->dist.dp.rank == 0 && t->dist.cp.rank == 0;
	struct ckpt_writer *w = NULL;
	int mf = -1, of = -1, bad = 0;
	dist_watchdog_pause(&t->dist, true); /* the others wait while rank 0 writes */
	if (writer) {
		w = ckpt_begin(a->save, t->iteration);
		if (!w || (mf = ckpt_file_create(w, "model.h5")) < 0 ||
		    (optim && (of = ckpt_file_create(w, "optim.h5")) < 0))
			bad = -1;
	}
	struct ckpt_writer *ww = bad ? NULL : w;
	size_t total = t->model.reg.total;
	if (assemble) {
		float *local = xmalloc((total ? total : 1) * sizeof(float));
		t->k->to_host(local, t->model.reg.data, total * sizeof(float));
		bad |= stream_tensors(t, writer, ww, mf, NULL, local);
		free(local);
	}
	const float *states[2] = { t->opt.exp_avg, t->opt.exp_avg_sq };
	const char *groups[2] = { "exp_avg", "exp_avg_sq" };
	for (int s = 0; optim && s < 2; s++) {
		float *local = optim_state_full(t, states[s]); /* collective over t->gdp */
		if (assemble)
			bad |= stream_tensors(t, writer, bad ? NULL : ww, of, groups[s], local);
		free(local);
	}
	if (writer) {
		if (!bad && put_state_attrs(t, w, mf, of) < 0)
			bad = -1;
		if (!bad)
			bad = ckpt_commit(w); /* frees w, and refuses if any write failed */
		else if (w)
			ckpt_abort(w);
		if (bad)
			error("could not save the checkpoint of iteration %lld in %s", (long long)t->iteration, a->save);
		else
			info("saved checkpoint at iteration %7lld to %s", (long long)t->iteration, a->save);
	}
	/* the others learn whether it worked */
	double failed = bad != 0;
	dist_allreduce_max_f64(&t->dist.world_g, &failed, 1);
	dist_watchdog_pause(&t->dist, false);
	if (failed)
		return writer ? -1 : error("rank 0 could not save the checkpoint of iteration %lld",
					   (long long)t->iteration);
	return 0;
}

/* Every parameter under group/<name>, read at its global shape; this rank's
 * slice goes to local, a registry-sized host array. */
static int get_tensors(struct ckpt_reader *r, int file, struct trainer *t, const char *group, float *local)
{
	const struct param_registry *reg = &t->model.reg;
	char name[PARAM_NAME_MAX + 32];
	size_t cap = 0;
	float *global = NULL;
	int ret = 0;
	for (int i = 0; i < reg->n && !ret; i++) {
		const struct param *p = &reg->p[i];
		int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
		xgrow(&global, &cap, global_numel(p), sizeof(float));
		snprintf(name, sizeof(name), "%s%s%s", group ? group : "", group ? "/" : "", p->name);
		ret = ckpt_get_tensor(r, file, name, CKPT_F32, p->ndim, p->shape, global);
		for (size_t e = 0; !ret && e < p->numel; e++) {
			int64_t row, col;
			params_global_pos(p, e, &row, &col);
			local[p->offset + e] = global[row * cols + col];
		}
	}
	free(global);
	return ret;
}

/* The model's weights into the registry. */
static int get_model(struct ckpt_reader *r, int file, struct trainer *t)
{
	size_t total = t->model.reg.total;
	float *local = xmalloc((total ? total : 1) * sizeof(float));
	int ret = get_tensors(r, file, t, NULL, local);
	if (!ret)
		t->k->to_device(t->model.reg.data, local, total * sizeof(float));
	free(local);
	return ret;
}

/* Adam's state: the whole tensors read, this rank's [lo, hi) kept. */
static int get_optim_state(struct ckpt_reader *r, int file, struct trainer *t, const char *group, float *state)
{
	size_t total = t->model.reg.total;
	float *full = xcalloc(total ? total : 1, sizeof(float));
	int ret = get_tensors(r, file, t, group, full);
	if (!ret)
		t->k->to_device(state, full + t->opt.lo, (t->opt.hi - t->opt.lo) * sizeof(float));
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
	if (t->a->use_checkpoint_opt_param_scheduler) {
		*s = c;
		ret = 0;
		goto out;
	}
	const char *what = c.max_lr != s->max_lr ? "--lr" : c.min_lr != s->min_lr ? "--min-lr" :
			   c.warmup_steps != s->warmup_steps ? "the warmup length" :
			   c.decay_steps != s->decay_steps ? "the decay length" :
			   c.style != s->style ? "--lr-decay-style" :
			   c.start_wd != s->start_wd ? "the (start) weight decay" :
			   c.end_wd != s->end_wd ? "the (end) weight decay" :
			   c.wd_incr_steps != s->wd_incr_steps ? "the weight-decay ramp length" :
			   c.wd_style != s->wd_style ? "--weight-decay-incr-style" : NULL;
	if (what) {
		error("%s differs from the checkpoint's optimizer schedule; pass "
		      "--override-opt-param-scheduler to use the flags or "
		      "--use-checkpoint-opt-param-scheduler to keep the checkpoint's", what);
		goto out;
	}
	s->num_steps = num;
	ret = 0;
out:
	free(style);
	free(wd_style);
	return ret;
}

static int load_here(struct trainer *t);

/* Every rank loads; all learn whether all succeeded. */
int train_ckpt_load(struct trainer *t)
{
	int r = load_here(t);
	double failed = r < 0;
	dist_allreduce_max_f64(&t->dist.world_g, &failed, 1);
	if (failed && r >= 0)
		return error("another rank could not load the checkpoint from %s", t->a->load);
	return failed ? -1 : r;
}

static int load_here(struct trainer *t)
{
	const struct args *a = t->a;
	/* rank 0 reads the tracker and every rank loads what it found (as
	 * Megatron agrees on the iteration), so node-local directories or a
	 * tracker changing under a running job cannot split the ranks */
	int64_t it = 0;
	int found = 0;
	if (t->dist.rank == 0)
		found = ckpt_latest(a->load, &it);
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
	struct ckpt_reader *r = ckpt_open(a->load, it);
	if (!r)
		return -1;
	bool finetune = a->finetune || it == CKPT_RELEASE;
	int ret = -1;
	int mf = ckpt_file_open(r, "model.h5");
	if (mf < 0 || get_model(r, mf, t) < 0)
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
		if (!a->no_load_optim && !a->skip_train) {
			int of = ckpt_file_open(r, "optim.h5");
			int64_t step, growth, hyst;
			double scale;
			if (of < 0 || get_optim_state(r, of, t, "exp_avg", t->opt.exp_avg) < 0 ||
			    get_optim_state(r, of, t, "exp_avg_sq", t->opt.exp_avg_sq) < 0 ||
			    ckpt_get_attr_i64(r, of, NULL, "step", &step) < 0 || check_sched(t, r, of) < 0 ||
			    ckpt_get_attr_f64(r, of, NULL, "loss_scale", &scale) < 0 ||
			    ckpt_get_attr_i64(r, of, NULL, "growth_tracker", &growth) < 0 ||
			    ckpt_get_attr_i64(r, of, NULL, "hysteresis_tracker", &hyst) < 0)
				goto out;
			t->opt.step = step;
			if (t->scaler.mode == GRAD_SCALER_DYNAMIC) {
				t->scaler.scale = (float)scale;
				t->scaler.growth_tracker = growth;
				t->scaler.hysteresis_tracker = (int)hyst;
			}
		}
		/* --no-load-optim: like Megatron, the schedule starts over (num_steps 0) */
	}
	gpt_sync_work(&t->model);
	if (t->dist.rank == 0)
		info("loaded checkpoint from %s at iteration %lld%s", ckpt_reader_dir(r), (long long)t->iteration,
		     finetune ? " (weights only)" : "");
	ret = 0;
out:
	ckpt_close(r);
	return ret;
}
