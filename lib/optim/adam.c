/*
 * adam.c - see adam.h. The optimizer's work over [lo, hi) is cut into
 * segments once, at set-up: the pieces of each parameter tensor inside the
 * shard, so each keeps its own weight-decay multiplier even when a
 * data-parallel shard boundary cuts through it. One whole-model op call
 * (adamw_segs, sumsq_segs) then covers them all: one kernel launch and one
 * host synchronisation on a GPU, instead of one per tensor. The arithmetic
 * lives in the op table.
 *
 * 16-bit states (the precision-aware optimizer) keep one segment per tensor
 * piece, each with its fp16 scales, and step through adamw_segs_lp, always
 * as two lists (the embedding and output layer, the rest) so that a
 * segment's scales sit at one place whatever the learning rates. Their
 * conversions to and from fp32 values (checkpoints, set-up) run on the
 * host with the CPU backend's narrow and widen, a place at a time.
 */
#include "optim/adam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

/* an fp16 state's scale maps its largest magnitude here (adamw_segs_lp's
 * 65504 / 2, Transformer Engine's headroom) */
#define ADAM_FP16_STATE_RANGE 32752.0f

/* The pieces inside [lo, hi) of the tensors that pass the filter, in
 * registry order, offsets minus shift. merge: join touching pieces with the
 * same decay flag (the update is elementwise, so that changes nothing; the
 * norms keep one piece per tensor, whose sums the CPU adds in the same order
 * as ever, and so do 16-bit states, whose scales are per tensor). */
enum seg_filter { SEGS_ALL, SEGS_EMB_OR_OUT, SEGS_REST };

struct seg_range {
	size_t lo, hi, shift;
};

static struct kops_seg *make_segs(const struct adam *o, struct seg_range r, int *n, bool norm, bool replicated,
				  bool merge, enum seg_filter filter)
{
	struct kops_seg *segs = xcalloc((size_t)o->reg->n + 1, sizeof(*segs));
	int ns = 0;
	for (int i = 0; i < o->reg->n; i++) {
		const struct param *p = &o->reg->p[i];
		if (norm && ((!replicated && p->tp_axis < 0) || (p->flags & PARAM_SHARED)))
			continue;
		bool emb = p->flags & PARAM_EMB_OR_OUT;
		if ((filter == SEGS_EMB_OR_OUT && !emb) || (filter == SEGS_REST && emb))
			continue;
		size_t a = p->offset > r.lo ? p->offset : r.lo;
		size_t b = p->offset + p->numel < r.hi ? p->offset + p->numel : r.hi;
		if (a >= b)
			continue;
		a -= r.shift;
		b -= r.shift;
		bool decay = !(p->flags & PARAM_NO_WD);
		if (merge && ns > 0 && segs[ns - 1].off + segs[ns - 1].n == a && segs[ns - 1].decay == decay) {
			segs[ns - 1].n += b - a;
			continue;
		}
		segs[ns].off = a;
		segs[ns].n = b - a;
		segs[ns].decay = decay;
		ns++;
	}
	*n = ns;
	return segs;
}

static size_t dtype_size(enum kops_dtype t)
{
	return t == KOPS_F32 ? sizeof(float) : sizeof(uint16_t);
}

static enum kops_round dtype_round(enum kops_dtype t)
{
	return t == KOPS_FP16 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16;
}

static enum kops_dtype state_type(const struct adam *o, enum adam_state which)
{
	return which == ADAM_EXP_AVG ? o->opt.exp_avg : which == ADAM_EXP_AVG_SQ ? o->opt.exp_avg_sq : o->opt.main;
}

/* a state's slot in the scales' triples and in struct kops_adamw_lp: p, m, v */
static int which_slot(enum adam_state which)
{
	return which == ADAM_MAIN ? 0 : which == ADAM_EXP_AVG ? 1 : 2;
}

static void *state_of(const struct adam_place *pl, enum adam_state which)
{
	return which == ADAM_EXP_AVG ? pl->exp_avg : which == ADAM_EXP_AVG_SQ ? pl->exp_avg_sq : pl->main;
}

/* The main weights of a place are its own (a 16-bit model's, or any on the
 * host), not the model's fp32 weights themselves. */
static bool owns_main(const struct adam *o, const struct adam_place *pl)
{
	return o->w16 || o->keep_main || pl->host;
}

/* The first tensors of [lo, hi), whole, until their elements reach the
 * share `f` (Megatron's HybridDeviceOptimizer: parameters in order while the
 * offloaded count is below offload_fraction x the total); returns the end. */
static size_t offload_cut(const struct adam *o, double f)
{
	if (f <= 0)
		return o->lo;
	int n;
	struct kops_seg *pieces = make_segs(o, (struct seg_range){ o->lo, o->hi, 0 }, &n, false, false, false, SEGS_ALL);
	double threshold = f * (double)(o->hi - o->lo);
	size_t cut = o->lo, done = 0;
	for (int i = 0; i < n && (double)done < threshold; i++) {
		done += pieces[i].n;
		cut = pieces[i].off + pieces[i].n;
	}
	free(pieces);
	return cut;
}

static void *place_alloc(struct adam *o, struct adam_place *pl, size_t bytes)
{
	if (!pl->host)
		return mem_alloc(o->mem, bytes);
	return o->k->counts_only ? NULL : xcalloc(bytes ? bytes : 1, 1);
}

static void place_free(struct adam *o, struct adam_place *pl, void *p, size_t bytes)
{
	if (pl->host)
		free(p);
	else
		mem_free(o->mem, p, bytes);
}

static void place_init(struct adam *o, struct adam_place *pl, size_t lo, size_t hi, bool host)
{
	pl->host = host;
	pl->k = host ? kops_cpu() : o->k;
	pl->lo = lo;
	pl->hi = hi;
	pl->seg_base = lo; /* offsets from the place's start: its state, gradients and weights alike */
	size_t n = hi - lo;
	if (host && n == 0) /* nothing offloaded: no host buffers, no segments */
		return;
	pl->exp_avg = place_alloc(o, pl, n * dtype_size(o->opt.exp_avg));
	pl->exp_avg_sq = place_alloc(o, pl, n * dtype_size(o->opt.exp_avg_sq));
	struct seg_range r = { lo, hi, pl->seg_base };
	pl->step_segs = make_segs(o, r, &pl->nstep_segs, false, false, !o->lp, SEGS_ALL);
	pl->emb_segs = make_segs(o, r, &pl->nemb_segs, false, false, !o->lp, SEGS_EMB_OR_OUT);
	pl->rest_segs = make_segs(o, r, &pl->nrest_segs, false, false, !o->lp, SEGS_REST);
	if (o->lp) { /* an fp16 state's scales start at 1, as Transformer Engine's */
		pl->emb_scale = xmalloc(((size_t)pl->nemb_segs * 3 + 1) * sizeof(float));
		pl->rest_scale = xmalloc(((size_t)pl->nrest_segs * 3 + 1) * sizeof(float));
		for (int i = 0; i < pl->nemb_segs * 3; i++)
			pl->emb_scale[i] = 1.0f;
		for (int i = 0; i < pl->nrest_segs * 3; i++)
			pl->rest_scale[i] = 1.0f;
	}
	for (int r2 = 0; r2 < 2; r2++)
		pl->main_segs[r2] = make_segs(o, (struct seg_range){ lo, hi, lo }, &pl->nmain_segs[r2], true, r2, false,
					      SEGS_ALL);
	if (host && !o->k->counts_only) /* page-locked: the copies run at full speed */
		pl->grad = o->k->host_alloc((n ? n : 1) * sizeof(float));
	if (o->reg->data) /* fp32 main weights: the model's own, or on the host a copy of them */
		pl->main = host ? place_alloc(o, pl, n * sizeof(float)) : o->reg->data + lo;
	if (host && pl->main && n)
		o->k->to_host(pl->main, o->reg->data + lo, n * sizeof(float));
}

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       const struct adam_options *opt, size_t lo, size_t hi)
{
	if (lo > hi || hi > reg->total)
		BUG("adam shard [%zu, %zu) outside %zu parameters", lo, hi, reg->total);
	memset(o, 0, sizeof(*o));
	o->k = k;
	o->mem = mem;
	o->reg = reg;
	o->lo = lo;
	o->hi = hi;
	o->opt = *opt;
	if (reg->data && opt->main != KOPS_F32)
		BUG("16-bit main weights for an fp32 model (its weights are its main weights)");
	o->lp = opt->main != KOPS_F32 || opt->exp_avg != KOPS_F32 || opt->exp_avg_sq != KOPS_F32;
	o->grad = reg->grad ? reg->grad + lo : NULL;
	size_t cut = offload_cut(o, opt->offload);
	place_init(o, &o->place[0], lo, cut, true);
	place_init(o, &o->place[1], cut, hi, false);
	for (int r = 0; r < 2; r++) /* offsets from lo, into grad */
		o->norm_segs[r] = make_segs(o, (struct seg_range){ lo, hi, lo }, &o->nnorm_segs[r], true, r, false,
					    SEGS_ALL);
}

void adam_use_shards(struct adam *o, float *grad, float *main, uint16_t *w16_shard)
{
	if (o->w16)
		BUG("adam_use_shards after adam_use_half");
	o->grad = grad;
	o->w16 = w16_shard; /* adam_use_half keeps it */
	if (main) { /* an fp32 model's weights are its main weights: the device place's part of the shard */
		struct adam_place *pl = &o->place[1];
		pl->main = main + (pl->lo - o->lo);
		if (o->place[0].hi > o->place[0].lo && !o->k->counts_only)
			BUG("Megatron-FSDP's sharded fp32 weights with optimizer offload");
		o->fsdp_main = main;
	}
}

size_t adam_device_bytes(const struct adam *o)
{
	const struct adam_place *pl = &o->place[1];
	size_t n = pl->hi - pl->lo;
	return n * (dtype_size(o->opt.exp_avg) + dtype_size(o->opt.exp_avg_sq) +
		    (owns_main(o, pl) ? dtype_size(o->opt.main) : 0));
}

size_t adam_host_bytes(const struct adam *o)
{
	const struct adam_place *pl = &o->place[0];
	return (pl->hi - pl->lo) * (dtype_size(o->opt.exp_avg) + dtype_size(o->opt.exp_avg_sq) + dtype_size(o->opt.main));
}

/* The place's segment lists with their scales: [0] the embedding and
 * output layer's, [1] the rest's (together all of the place). */
struct seg_list {
	const struct kops_seg *segs;
	int n;
	float *scale;
};

static void place_lists(const struct adam_place *pl, struct seg_list l[2])
{
	l[0] = (struct seg_list){ pl->emb_segs, pl->nemb_segs, pl->emb_scale };
	l[1] = (struct seg_list){ pl->rest_segs, pl->nrest_segs, pl->rest_scale };
}

/* A place's state as fp32 values into host memory dst[hi - lo]. */
static void place_get(const struct adam *o, const struct adam_place *pl, enum adam_state which, float *dst)
{
	size_t n = pl->hi - pl->lo;
	enum kops_dtype t = state_type(o, which);
	const void *x = state_of(pl, which);
	if (n == 0 || o->k->counts_only)
		return;
	if (t == KOPS_F32) {
		if (pl->host)
			memcpy(dst, x, n * sizeof(float));
		else
			o->k->to_host(dst, x, n * sizeof(float));
		return;
	}
	uint16_t *words = pl->host ? NULL : xmalloc(n * sizeof(uint16_t));
	if (words)
		o->k->to_host(words, x, n * sizeof(uint16_t));
	kops_cpu()->widen(dst, words ? words : x, n, dtype_round(t));
	free(words);
	if (t != KOPS_FP16)
		return;
	struct seg_list l[2];
	place_lists(pl, l);
	size_t mv_base = pl->lo - pl->seg_base;
	for (int h = 0; h < 2; h++)
		for (int i = 0; i < l[h].n; i++) {
			float sc = l[h].scale[3 * i + which_slot(which)];
			float *d = dst + (l[h].segs[i].off - mv_base);
			for (size_t j = 0; j < l[h].segs[i].n; j++)
				d[j] *= sc;
		}
}
/* A place's state from fp32 values src[hi - lo] (host memory, left as it
 * was): an fp16 one under fresh scales, each segment's largest magnitude
 * over 32752 (Transformer Engine's set_scaled_state), then rounded. */
static void place_set(struct adam *o, struct adam_place *pl, enum adam_state which, const float *src)
{
	size_t n = pl->hi - pl->lo;
	enum kops_dtype t = state_type(o, which);
	void *x = state_of(pl, which);
	if (n == 0 || o->k->counts_only)
		return;
	if (t == KOPS_F32) {
		if (pl->host)
			memcpy(x, src, n * sizeof(float));
		else
			o->k->to_device(x, src, n * sizeof(float));
		return;
	}
	float *scaled = NULL;
	if (t == KOPS_FP16) {
		scaled = xmalloc(n * sizeof(float));
		struct seg_list l[2];
		place_lists(pl, l);
		size_t mv_base = pl->lo - pl->seg_base;
		for (int h = 0; h < 2; h++)
			for (int i = 0; i < l[h].n; i++) {
				size_t e = l[h].segs[i].off - mv_base, len = l[h].segs[i].n;
				float amax = 0.0f;
				for (size_t j = 0; j < len; j++)
					amax = fmaxf(amax, fabsf(src[e + j]));
				float sc = amax / ADAM_FP16_STATE_RANGE, rs = sc > 0.0f ? 1.0f / sc : 0.0f;
				l[h].scale[3 * i + which_slot(which)] = sc;
				for (size_t j = 0; j < len; j++)
					scaled[e + j] = src[e + j] * rs;
			}
	}
	uint16_t *words = pl->host ? x : xmalloc(n * sizeof(uint16_t));
	kops_cpu()->narrow(words, scaled ? scaled : src, n, dtype_round(t));
	if (!pl->host)
		o->k->to_device(x, words, n * sizeof(uint16_t));
	if (words != x)
		free(words);
	free(scaled);
}

void adam_use_half(struct adam *o, uint16_t *w16, enum kops_round kind)
{
	if (o->half_set || (!w16 && !o->w16) || o->reg->data || o->fsdp_main)
		BUG("adam_use_half twice, without weights, or for an fp32 model");
	if (!o->w16) /* the model's whole weights: this shard of them */
		o->w16 = w16 + o->lo;
	o->half_set = true;
	o->half = kind;
	for (int i = 0; i < 2; i++) {
		struct adam_place *pl = &o->place[i];
		size_t n = pl->hi - pl->lo;
		if (pl->host && n == 0)
			continue; /* nothing offloaded */
		pl->main = place_alloc(o, pl, n * dtype_size(o->opt.main));
		if (n == 0 || o->k->counts_only)
			continue;
		if (pl->host)
			pl->up16 = o->k->host_alloc(n * sizeof(uint16_t));
		if (!pl->host && o->opt.main == KOPS_F32) { /* widened in place, on the device */
			o->k->widen(pl->main, o->w16 + (pl->lo - o->lo), n, kind);
			continue;
		}
		/* through the host: the fp32 values of the model's weights, then the place's format */
		uint16_t *words = xmalloc(n * sizeof(uint16_t));
		float *vals = xmalloc(n * sizeof(float));
		o->k->to_host(words, o->w16 + (pl->lo - o->lo), n * sizeof(uint16_t));
		kops_cpu()->widen(vals, words, n, kind);
		place_set(o, pl, ADAM_MAIN, vals);
		free(vals);
		free(words);
	}
}

void adam_keep_main(struct adam *o)
{
	if (o->half_set || o->w16 || o->reg->data || o->fsdp_main || o->opt.main != KOPS_F32)
		BUG("adam_keep_main twice, on a model's own weights or with %d-byte main weights",
		    (int)dtype_size(o->opt.main));
	if (o->place[0].hi > o->place[0].lo)
		BUG("adam_keep_main with offloaded elements [%zu, %zu)", o->place[0].lo, o->place[0].hi);
	o->half_set = true;
	o->keep_main = true;
	struct adam_place *pl = &o->place[1];
	pl->main = place_alloc(o, pl, (pl->hi - pl->lo) * sizeof(float));
}

float *adam_main_f32(const struct adam *o)
{
	return o->keep_main ? o->place[1].main : NULL;
}

void adam_get_state(const struct adam *o, enum adam_state which, float *host)
{
	for (int i = 0; i < 2; i++)
		place_get(o, &o->place[i], which, host + o->place[i].lo);
}

void adam_set_state(struct adam *o, enum adam_state which, const float *host)
{
	for (int i = 0; i < 2; i++) {
		struct adam_place *pl = &o->place[i];
		if (which == ADAM_MAIN && !owns_main(o, pl))
			continue; /* the model's own weights: the caller's */
		place_set(o, pl, which, host + pl->lo);
	}
}

void adam_free(struct adam *o)
{
	if (!o->reg)
		return;
	for (int i = 0; i < 2; i++) {
		struct adam_place *pl = &o->place[i];
		size_t n = pl->hi - pl->lo;
		place_free(o, pl, pl->exp_avg, n * dtype_size(o->opt.exp_avg));
		place_free(o, pl, pl->exp_avg_sq, n * dtype_size(o->opt.exp_avg_sq));
		if (owns_main(o, pl))
			place_free(o, pl, pl->main, n * dtype_size(o->opt.main));
		if (pl->grad)
			o->k->host_free(pl->grad);
		if (pl->up16)
			o->k->host_free(pl->up16);
		free(pl->step_segs);
		free(pl->emb_segs);
		free(pl->rest_segs);
		free(pl->emb_scale);
		free(pl->rest_scale);
		free(pl->main_segs[0]);
		free(pl->main_segs[1]);
	}
	free(o->norm_segs[0]);
	free(o->norm_segs[1]);
	memset(o, 0, sizeof(*o));
}

/* Sum of squares of buf over [lo, hi), tensor by tensor; with
 * replicated = false the tensors every TP rank holds whole are left out (TP
 * rank 0 counts them), so summing over the TP group counts each once. */
static double sumsq_range(const struct adam *o, const float *buf, bool replicated)
{
	return o->k->sumsq_segs(buf, o->norm_segs[replicated], o->nnorm_segs[replicated]);
}

double adam_grad_sumsq(const struct adam *o, bool replicated)
{
	return sumsq_range(o, o->grad, replicated);
}

double adam_grad_zeros(const struct adam *o, bool replicated)
{
	enum { CHUNK = 1 << 18 };
	float *host = o->k->host_alloc(CHUNK * sizeof(float));
	double zeros = 0;
	const struct kops_seg *segs = o->norm_segs[replicated];
	for (int i = 0; i < o->nnorm_segs[replicated]; i++) {
		for (size_t done = 0; done < segs[i].n;) {
			size_t n = segs[i].n - done < CHUNK ? segs[i].n - done : CHUNK;
			o->k->to_host(host, o->grad + segs[i].off + done, n * sizeof(float));
			for (size_t j = 0; j < n; j++)
				zeros += host[j] == 0.0f;
			done += n;
		}
	}
	o->k->host_free(host);
	return zeros;
}

double adam_params_sumsq(const struct adam *o, bool replicated)
{
	double ss = 0;
	for (int i = 0; i < 2; i++) {
		const struct adam_place *pl = &o->place[i];
		const struct kops_seg *segs = pl->main_segs[replicated];
		int n = pl->nmain_segs[replicated];
		if (pl->hi == pl->lo || n == 0)
			continue;
		if (o->opt.main == KOPS_F32 || !o->w16) {
			ss += pl->k->sumsq_segs(pl->main, segs, n);
			continue;
		}
		/* 16-bit main weights: their fp32 values, on the host */
		float *vals = xmalloc((pl->hi - pl->lo) * sizeof(float));
		place_get(o, pl, ADAM_MAIN, vals);
		ss += kops_cpu()->sumsq_segs(vals, segs, n);
		free(vals);
	}
	return ss;
}

void adam_clip(struct adam *o, double norm, double clip)
{
	if (clip <= 0)
		return;
	double coeff = clip / (norm + 1.0e-6);
	if (coeff < 1.0)
		o->k->scale(o->grad, (float)coeff, o->hi - o->lo);
}

void adam_step(struct adam *o, double lr, double wd)
{
	adam_step_lrs(o, lr, lr, wd);
}

/* One list of segments of a place: adamw_segs on fp32 states, or
 * adamw_segs_lp on states in their formats (writing the 16-bit weights w16,
 * indexed like g, in the same pass). */
struct step_args {
	const float *g;
	uint16_t *w16;
	size_t mv_base;
	float wd;
};

static void step_list(struct adam *o, struct adam_place *pl, const struct step_args *a, const struct seg_list *l,
		      float lr)
{
	if (l->n == 0)
		return;
	if (!o->lp) {
		pl->k->adamw_segs(pl->main, a->g, pl->exp_avg, pl->exp_avg_sq, a->mv_base, l->segs, l->n, lr,
				  o->opt.beta1, o->opt.beta2, o->opt.eps, a->wd, (int)o->step);
		return;
	}
	struct kops_adamw_lp st = { pl->main, pl->exp_avg, pl->exp_avg_sq, o->opt.main, o->opt.exp_avg,
				    o->opt.exp_avg_sq, l->scale, a->w16, o->half };
	pl->k->adamw_segs_lp(&st, a->g, a->mv_base, l->segs, l->n, lr, o->opt.beta1, o->opt.beta2,
			     o->opt.eps, a->wd, (int)o->step);
}

/* The step of one place. On the host: its gradients come down first, and
 * its updated weights (the 16-bit model's, or an fp32 model's) go up after. */
static void step_place(struct adam *o, struct adam_place *pl, float lr, float emb_lr, float wd)
{
	size_t n = pl->hi - pl->lo;
	if (n == 0)
		return;
	size_t at = pl->lo - o->lo; /* the place in the shard's buffers */
	struct step_args a = { o->grad + at, o->w16 ? o->w16 + at : NULL, pl->lo - pl->seg_base, wd };
	if (pl->host) {
		o->k->to_host(pl->grad, o->grad + at, n * sizeof(float));
		a.g = pl->grad;
		a.w16 = pl->up16;
	}
	struct seg_list l[2];
	place_lists(pl, l);
	if (o->lp) { /* the scales are per list: always both (the update is elementwise) */
		step_list(o, pl, &a, &l[0], emb_lr);
		step_list(o, pl, &a, &l[1], lr);
	} else if (emb_lr == lr || pl->nemb_segs == 0) {
		struct seg_list all = { pl->step_segs, pl->nstep_segs, NULL };
		step_list(o, pl, &a, &all, lr);
	} else {
		step_list(o, pl, &a, &l[1], lr);
		step_list(o, pl, &a, &l[0], emb_lr);
	}
	/* Megatron's _copy_main_params_to_model_params: this shard, rounded
	 * (adamw_segs_lp wrote them already) */
	if (o->w16 && !o->lp)
		pl->k->narrow(pl->host ? pl->up16 : o->w16 + at, pl->main, n, o->half);
	if (pl->host && o->w16)
		o->k->to_device(o->w16 + at, pl->up16, n * sizeof(uint16_t));
	else if (pl->host)
		o->k->to_device(o->reg->data + pl->lo, pl->main, n * sizeof(float));
}

void adam_step_lrs(struct adam *o, double lr, double emb_lr, double wd)
{
	o->step++;
	for (int i = 0; i < 2; i++)
		step_place(o, &o->place[i], (float)lr, (float)emb_lr, (float)wd);
}
