/*
 * params.c - see params.h. Registration only assigns names, shapes and
 * offsets; the model allocates the flat buffers once every tensor is known,
 * so one allocation holds every parameter (and one every gradient).
 */
#include "tensor/params.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

int params_add(struct param_registry *r, const char *name, int ndim, const int64_t *shape,
	       int tp_axis, int tp_size, int tp_rank, unsigned flags, enum param_init init,
	       float init_std)
{
	if (ndim < 1 || ndim > PARAM_MAX_DIM)
		BUG("parameter %s has %d dims", name, ndim);
	if (strlen(name) >= PARAM_NAME_MAX)
		BUG("parameter name too long: %s", name);
	if (params_find(r, name) >= 0)
		BUG("parameter %s registered twice", name);
	if (r->data)
		BUG("parameter %s registered after the buffers were allocated", name);
	size_t cap = (size_t)r->cap;
	xgrow(&r->p, &cap, (size_t)r->n + 1, sizeof(*r->p));
	r->cap = (int)cap;
	struct param *p = &r->p[r->n];
	memset(p, 0, sizeof(*p));
	strcpy(p->name, name);
	p->ndim = ndim;
	p->tp_axis = tp_axis;
	p->numel = 1;
	for (int d = 0; d < ndim; d++) {
		p->shape[d] = shape[d];
		p->local_shape[d] = shape[d];
		if (d == tp_axis) {
			if (shape[d] % tp_size)
				BUG("%s: dim %d (%lld) not divisible by TP %d", name, d,
				    (long long)shape[d], tp_size);
			p->local_shape[d] = shape[d] / tp_size;
			p->local_start = p->local_shape[d] * tp_rank;
		}
		p->numel *= (size_t)p->local_shape[d];
	}
	p->flags = flags;
	p->init = init;
	p->init_std = init_std;
	p->offset = r->total;
	r->total += p->numel;
	return r->n++;
}

size_t params_move_last(struct param_registry *r, unsigned flags)
{
	size_t off = 0, first = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			first = off;
		for (int i = 0; i < r->n; i++)
			if (((r->p[i].flags & flags) != 0) == (pass == 1)) {
				r->p[i].offset = off;
				off += r->p[i].numel;
			}
	}
	if (off != r->total)
		BUG("params_move_last: %zu elements placed of %zu", off, r->total);
	return first;
}

void params_global_pos_rank(const struct param *p, int rank, size_t e, int64_t *row, int64_t *col)
{
	int64_t lcols = p->ndim == 2 ? p->local_shape[1] : 1;
	int64_t r = (int64_t)e / lcols, c = (int64_t)e % lcols;
	if (p->tp_axis == 0 && (p->flags & PARAM_GLU)) {
		/* local [gate_r; up_r] -> global [gate_0 .. gate_t-1; up_0 .. up_t-1] */
		int64_t half = p->local_shape[0] / 2, ghalf = p->shape[0] / 2;
		r = r < half ? rank * half + r : ghalf + rank * half + (r - half);
	} else if (p->tp_axis == 0) {
		r += p->local_shape[0] * rank;
	} else if (p->tp_axis == 1) {
		c += p->local_shape[1] * rank;
	}
	*row = r;
	*col = c;
}

void params_global_pos(const struct param *p, size_t e, int64_t *row, int64_t *col)
{
	int rank = 0;
	if (p->tp_axis >= 0 && p->local_shape[p->tp_axis])
		rank = (int)(p->local_start / p->local_shape[p->tp_axis]);
	params_global_pos_rank(p, rank, e, row, col);
}

int params_find(const struct param_registry *r, const char *name)
{
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->p[i].name, name))
			return i;
	return -1;
}

void params_free(struct param_registry *r)
{
	free(r->p);
	memset(r, 0, sizeof(*r));
}
