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

int params_add_pieces(struct param_registry *r, const char *name, int ndim, const int64_t *shape,
		      int tp_axis, int npieces, const int64_t *pieces, int tp_size, int tp_rank,
		      unsigned flags, enum param_init init, float init_std)
{
	if (ndim < 1 || ndim > PARAM_MAX_DIM)
		BUG("parameter %s has %d dims", name, ndim);
	if (strlen(name) >= PARAM_NAME_MAX)
		BUG("parameter name too long: %s", name);
	if (params_find(r, name) >= 0)
		BUG("parameter %s registered twice", name);
	if (r->data)
		BUG("parameter %s registered after the buffers were allocated", name);
	if (tp_axis >= ndim || tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
		BUG("parameter %s: TP axis %d of %d dims, rank %d of %d", name, tp_axis, ndim, tp_rank, tp_size);
	if (npieces < 1 || npieces > PARAM_MAX_PIECES || (tp_axis < 0 && npieces != 1))
		BUG("parameter %s in %d pieces", name, npieces);
	size_t cap = (size_t)r->cap;
	xgrow(&r->p, &cap, (size_t)r->n + 1, sizeof(*r->p));
	r->cap = (int)cap;
	struct param *p = &r->p[r->n];
	memset(p, 0, sizeof(*p));
	strcpy(p->name, name);
	p->ndim = ndim;
	p->tp_axis = tp_axis;
	p->npieces = npieces;
	p->tp_size = tp_axis < 0 ? 1 : tp_size;
	p->tp_rank = tp_axis < 0 ? 0 : tp_rank;
	int64_t sum = 0;
	for (int i = 0; i < npieces; i++) {
		p->piece[i] = tp_axis < 0 ? shape[0] : pieces[i];
		if (tp_axis >= 0 && p->piece[i] % tp_size)
			BUG("%s: piece %d (%lld) along dim %d not divisible by TP %d", name, i,
			    (long long)p->piece[i], tp_axis, tp_size);
		sum += p->piece[i];
	}
	if (tp_axis >= 0 && sum != shape[tp_axis])
		BUG("%s: pieces sum to %lld, dim %d is %lld", name, (long long)sum, tp_axis,
		    (long long)shape[tp_axis]);
	p->numel = 1;
	for (int d = 0; d < ndim; d++) {
		p->shape[d] = shape[d];
		p->local_shape[d] = d == tp_axis ? shape[d] / tp_size : shape[d];
		p->numel *= (size_t)p->local_shape[d];
	}
	p->flags = flags;
	p->init = init;
	p->init_std = init_std;
	p->offset = r->total;
	r->total += p->numel;
	return r->n++;
}

int params_add(struct param_registry *r, const char *name, int ndim, const int64_t *shape,
	       int tp_axis, int tp_size, int tp_rank, unsigned flags, enum param_init init,
	       float init_std)
{
	int64_t whole = shape[tp_axis < 0 ? 0 : tp_axis];
	return params_add_pieces(r, name, ndim, shape, tp_axis, 1, &whole, tp_size, tp_rank, flags, init,
				 init_std);
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

void params_piece(const struct param *p, int rank, int i, int64_t *local, int64_t *global, int64_t *len)
{
	if (i < 0 || i >= p->npieces)
		BUG("%s: piece %d of %d", p->name, i, p->npieces);
	if (p->tp_axis < 0) {
		*local = *global = 0;
		*len = p->shape[0];
		return;
	}
	int64_t lo = 0, go = 0;
	for (int j = 0; j < i; j++) {
		lo += p->piece[j] / p->tp_size;
		go += p->piece[j];
	}
	*len = p->piece[i] / p->tp_size;
	*local = lo;
	*global = go + rank * *len;
}

void params_global_pos_rank(const struct param *p, int rank, size_t e, int64_t *row, int64_t *col)
{
	int64_t lcols = p->ndim == 2 ? p->local_shape[1] : 1;
	int64_t r = (int64_t)e / lcols, c = (int64_t)e % lcols;
	if (p->tp_axis >= 0) {
		int64_t *x = p->tp_axis == 0 ? &r : &c, local, global, len;
		for (int i = 0; i < p->npieces; i++) {
			params_piece(p, rank, i, &local, &global, &len);
			if (*x < local + len) {
				*x = global + (*x - local);
				break;
			}
		}
	}
	*row = r;
	*col = c;
}

void params_global_pos(const struct param *p, size_t e, int64_t *row, int64_t *col)
{
	params_global_pos_rank(p, p->tp_rank, e, row, col);
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
