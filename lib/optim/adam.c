/*
 * adam.c - see adam.h. One adamw op call per (piece of a) parameter tensor
 * inside [lo, hi), so each tensor keeps its own weight-decay multiplier
 * even when a data-parallel shard boundary cuts through it; the arithmetic
 * lives in the op table.
 */
#include "optim/adam.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

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
}

void adam_free(struct adam *o)
{
	if (!o->reg)
		return;
	mem_free(o->mem, o->exp_avg, (o->hi - o->lo) * sizeof(float));
	mem_free(o->mem, o->exp_avg_sq, (o->hi - o->lo) * sizeof(float));
	memset(o, 0, sizeof(*o));
}

/* Sum of squares of buf over [lo, hi), tensor by tensor; with
 * replicated = false the tensors every TP rank holds whole are left out (TP
 * rank 0 counts them), so summing over the TP group counts each once. */
static double sumsq_range(const struct adam *o, const float *buf, bool replicated)
{
	double ss = 0;
	for (int i = 0; i < o->reg->n; i++) {
		const struct param *p = &o->reg->p[i];
		if ((!replicated && p->tp_axis < 0) || (p->flags & PARAM_SHARED))
			continue;
		size_t a = p->offset > o->lo ? p->offset : o->lo;
		size_t b = p->offset + p->numel < o->hi ? p->offset + p->numel : o->hi;
		if (a < b)
			ss += o->k->sumsq(buf + a, b - a);
	}
	return ss;
}

double adam_grad_sumsq(const struct adam *o, bool replicated)
{
	return sumsq_range(o, o->reg->grad, replicated);
}

double adam_params_sumsq(const struct adam *o, bool replicated)
{
	return sumsq_range(o, o->reg->data, replicated);
}

void adam_clip(struct adam *o, double norm, double clip)
{
	if (clip <= 0)
		return;
	double coeff = clip / (norm + 1.0e-6);
	if (coeff < 1.0)
		o->k->scale(o->reg->grad + o->lo, (float)coeff, o->hi - o->lo);
}

void adam_step(struct adam *o, double lr, double wd)
{
	o->step++;
	for (int i = 0; i < o->reg->n; i++) {
		const struct param *p = &o->reg->p[i];
		size_t a = p->offset > o->lo ? p->offset : o->lo;
		size_t b = p->offset + p->numel < o->hi ? p->offset + p->numel : o->hi;
		if (a >= b)
			continue;
		double pwd = (p->flags & PARAM_NO_WD) ? 0.0 : wd;
		o->k->adamw(o->reg->data + a, o->reg->grad + a, o->exp_avg + (a - o->lo), o->exp_avg_sq + (a - o->lo),
			    b - a, (float)lr, o->beta1, o->beta2, o->eps, (float)pwd, (int)o->step);
	}
}
