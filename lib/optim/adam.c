/*
 * adam.c - see adam.h. One adamw op call per parameter tensor, so each
 * tensor gets its own weight-decay multiplier; the arithmetic lives in the
 * op table.
 */
#include "optim/adam.h"

#include <math.h>
#include <string.h>

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       float beta1, float beta2, float eps)
{
	memset(o, 0, sizeof(*o));
	o->k = k;
	o->mem = mem;
	o->reg = reg;
	o->exp_avg = mem_alloc_f32(mem, reg->total);
	o->exp_avg_sq = mem_alloc_f32(mem, reg->total);
	o->beta1 = beta1;
	o->beta2 = beta2;
	o->eps = eps;
}

void adam_free(struct adam *o)
{
	if (!o->reg)
		return;
	mem_free(o->mem, o->exp_avg, o->reg->total * sizeof(float));
	mem_free(o->mem, o->exp_avg_sq, o->reg->total * sizeof(float));
	memset(o, 0, sizeof(*o));
}

double adam_grad_norm(const struct adam *o)
{
	double ss = 0;
	for (int i = 0; i < o->reg->n; i++)
		ss += o->k->sumsq(o->reg->grad + o->reg->p[i].offset, o->reg->p[i].numel);
	return sqrt(ss);
}

double adam_params_norm(const struct adam *o)
{
	double ss = 0;
	for (int i = 0; i < o->reg->n; i++)
		ss += o->k->sumsq(o->reg->data + o->reg->p[i].offset, o->reg->p[i].numel);
	return sqrt(ss);
}

void adam_clip(struct adam *o, double norm, double clip)
{
	if (clip <= 0)
		return;
	double coeff = clip / (norm + 1.0e-6);
	if (coeff < 1.0)
		o->k->scale(o->reg->grad, (float)coeff, o->reg->total);
}

void adam_step(struct adam *o, double lr, double wd)
{
	o->step++;
	for (int i = 0; i < o->reg->n; i++) {
		const struct param *p = &o->reg->p[i];
		double pwd = (p->flags & PARAM_NO_WD) ? 0.0 : wd;
		o->k->adamw(o->reg->data + p->offset, o->reg->grad + p->offset, o->exp_avg + p->offset,
			    o->exp_avg_sq + p->offset, p->numel, (float)lr, o->beta1, o->beta2, o->eps,
			    (float)pwd, (int)o->step);
	}
}
