/*
 * adam.c - see adam.h. The optimizer's work over [lo, hi) is cut into
 * segments once, at set-up: the pieces of each parameter tensor inside the
 * shard, so each keeps its own weight-decay multiplier even when a
 * data-parallel shard boundary cuts through it. One whole-model op call
 * (adamw_segs, sumsq_segs) then covers them all: one kernel launch and one
 * host synchronisation on a GPU, instead of one per tensor. The arithmetic
 * lives in the op table.
 */
#include "optim/adam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

/* The pieces inside [lo, hi) of the tensors that pass the filter, in
 * registry order. merge: join touching pieces with the same decay flag (the
 * update is elementwise, so that changes nothing; the norms keep one piece
 * per tensor, whose sums the CPU adds in the same order as ever). */
enum seg_filter { SEGS_ALL, SEGS_EMB_OR_OUT, SEGS_REST };

static struct kops_seg *make_segs(const struct adam *o, int *n, bool norm, bool replicated, bool merge,
				  enum seg_filter filter)
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
		size_t a = p->offset > o->lo ? p->offset : o->lo;
		size_t b = p->offset + p->numel < o->hi ? p->offset + p->numel : o->hi;
		if (a >= b)
			continue;
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

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       float beta1, float beta2, float eps, size_t lo, size_t hi)
{
	if (lo > hi || hi > reg->total)
		BUG("adam shard [%zu, %zu) outside %zu parameters", lo, hi, reg->total);
	memset(o, 0, sizeof(*o));
	o->k = k;
	o->mem = mem;
	o->reg = reg;
	o->lo = lo;
	o->hi = hi;
	o->exp_avg = mem_alloc_f32(mem, hi - lo);
	o->exp_avg_sq = mem_alloc_f32(mem, hi - lo);
	o->beta1 = beta1;
	o->beta2 = beta2;
	o->eps = eps;
	o->step_segs = make_segs(o, &o->nstep_segs, false, false, true, SEGS_ALL);
	o->emb_segs = make_segs(o, &o->nemb_segs, false, false, true, SEGS_EMB_OR_OUT);
	o->rest_segs = make_segs(o, &o->nrest_segs, false, false, true, SEGS_REST);
	for (int r = 0; r < 2; r++) {
		o->norm_segs[r] = make_segs(o, &o->nnorm_segs[r], true, r, false, SEGS_ALL);
		o->main_segs[r] = xcalloc((size_t)o->nnorm_segs[r] + 1, sizeof(struct kops_seg));
		for (int i = 0; i < o->nnorm_segs[r]; i++) {
			o->main_segs[r][i] = o->norm_segs[r][i];
			o->main_segs[r][i].off -= lo;
		}
	}
	o->main = reg->data ? reg->data + lo : NULL; /* fp32; adam_use_half otherwise */
	o->grad = reg->grad ? reg->grad + lo : NULL;
}

void adam_use_shards(struct adam *o, float *grad, float *main, uint16_t *w16_shard)
{
	o->grad = grad;
	if (main)
		o->main = main;
	if (w16_shard)
		o->w16 = w16_shard;
}

void adam_use_half(struct adam *o, uint16_t *w16, enum kops_round kind)
{
	if (o->own_main || !w16)
		BUG("adam_use_half twice, or without weights");
	if (!o->w16) /* the whole model's: this shard of it */
		o->w16 = w16 + o->lo;
	o->half = kind;
	o->own_main = true;
	o->main = mem_alloc_f32(o->mem, o->hi - o->lo);
	if (o->hi > o->lo && !o->k->counts_only)
		o->k->widen(o->main, o->w16, o->hi - o->lo, kind);
}

void adam_set_main(struct adam *o, const float *host)
{
	o->k->to_device(o->main, host + o->lo, (o->hi - o->lo) * sizeof(float));
}

void adam_get_main(const struct adam *o, float *host)
{
	o->k->to_host(host + o->lo, o->main, (o->hi - o->lo) * sizeof(float));
}

void adam_free(struct adam *o)
{
	if (!o->reg)
		return;
	mem_free(o->mem, o->exp_avg, (o->hi - o->lo) * sizeof(float));
	mem_free(o->mem, o->exp_avg_sq, (o->hi - o->lo) * sizeof(float));
	if (o->own_main)
		mem_free(o->mem, o->main, (o->hi - o->lo) * sizeof(float));
	free(o->main_segs[0]);
	free(o->main_segs[1]);
	free(o->step_segs);
	free(o->emb_segs);
	free(o->rest_segs);
	free(o->norm_segs[0]);
	free(o->norm_segs[1]);
	memset(o, 0, sizeof(*o));
}

/* The norms are sums of squares over [lo, hi), tensor by tensor
 * (main_segs); with replicated = false the tensors every TP rank holds whole
 * are left out (TP rank 0 counts them), so summing over the TP group counts
 * each once. */
double adam_grad_sumsq(const struct adam *o, bool replicated)
{
	return o->k->sumsq_segs(o->grad, o->main_segs[replicated], o->nnorm_segs[replicated]);
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
			o->k->to_host(host, o->grad + (segs[i].off - o->lo) + done, n * sizeof(float));
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
	return o->k->sumsq_segs(o->main, o->main_segs[replicated], o->nnorm_segs[replicated]);
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

void adam_step_lrs(struct adam *o, double lr, double emb_lr, double wd)
{
	o->step++;
	if ((float)emb_lr == (float)lr || o->nemb_segs == 0) {
		if (o->nstep_segs)
			o->k->adamw_segs(o->main, o->grad, o->exp_avg, o->exp_avg_sq, o->lo, o->step_segs,
					 o->nstep_segs, (float)lr, o->beta1, o->beta2, o->eps, (float)wd, (int)o->step);
	} else {
		if (o->nrest_segs)
			o->k->adamw_segs(o->main, o->grad, o->exp_avg, o->exp_avg_sq, o->lo, o->rest_segs,
					 o->nrest_segs, (float)lr, o->beta1, o->beta2, o->eps, (float)wd, (int)o->step);
		o->k->adamw_segs(o->main, o->grad, o->exp_avg, o->exp_avg_sq, o->lo, o->emb_segs,
				 o->nemb_segs, (float)emb_lr, o->beta1, o->beta2, o->eps, (float)wd, (int)o->step);
	}
	/* Megatron's _copy_main_params_to_model_params: this shard, rounded */
	if (o->own_main && o->hi > o->lo)
		o->k->narrow(o->w16, o->main, o->hi - o->lo, o->half);
}
