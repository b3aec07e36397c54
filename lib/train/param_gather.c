/*
 * param_gather.c - see param_gather.h.
 */
#include "train/param_gather.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* element e of the region, in bytes from the region's start in the store */
static size_t store_at(const void *ctx, size_t e)
{
	const struct param_gather *s = ctx;
	return gpt_store_at(s->m, s->base + e) - gpt_store_at(s->m, s->base);
}

void param_gather_init(struct param_gather *s, struct gpt_model *m, struct dist_group *g, size_t base, size_t end,
		       size_t bucket_elems, bool overlap)
{
	memset(s, 0, sizeof(*s));
	s->g = g;
	s->base = base;
	s->end = end;
	s->m = m;
	s->overlap = overlap;
	s->map = (struct dist_bytemap){ .at = store_at, .ctx = s };
	const struct param_registry *reg = &m->reg;
	s->bucket_of = xcalloc((size_t)reg->n + 1, sizeof(int));
	size_t cap = 0;
	if (!overlap)
		bucket_elems = (size_t)-1;
	for (int i = 0; i < reg->n; i++) {
		const struct param *p = &reg->p[i];
		if (p->offset < base || p->offset >= end) {
			s->bucket_of[i] = -1;
			continue;
		}
		struct pg_bucket *cur = s->nb ? &s->b[s->nb - 1] : NULL;
		if (!cur || cur->hi != p->offset || p->offset + p->numel - cur->lo > bucket_elems) {
			xgrow(&s->b, &cap, (size_t)s->nb + 1, sizeof(*s->b));
			cur = &s->b[s->nb++];
			memset(cur, 0, sizeof(*cur));
			cur->lo = p->offset;
		}
		cur->hi = p->offset + p->numel;
		s->bucket_of[i] = s->nb - 1;
	}
}

void param_gather_free(struct param_gather *s)
{
	free(s->b);
	free(s->bucket_of);
	memset(s, 0, sizeof(*s));
}

static void land(struct param_gather *s, struct pg_bucket *b)
{
	dist_wait(&b->req);
	b->pending = false;
}

void param_gather_start(struct param_gather *s)
{
	for (int i = 0; i < s->nb; i++) {
		struct pg_bucket *b = &s->b[i];
		size_t total = s->end - s->base, a = b->lo - s->base, z = b->hi - s->base;
		if (s->m->soff) /* FP8 codes and 16-bit words */
			dist_iallgather_range_mapped(s->g, (uint8_t *)s->m->w16 + gpt_store_at(s->m, s->base), total, a,
						     z, &s->map, &b->req);
		else if (s->m->w16) /* the 16-bit weights the optimizer wrote: half the bytes of fp32 */
			dist_iallgather_range_u16(s->g, s->m->w16 + s->base, total, a, z, &b->req);
		else
			dist_iallgather_range_f32(s->g, s->m->reg.data + s->base, total, a, z, &b->req);
		b->pending = true;
		if (!s->overlap)
			land(s, b);
	}
}

void param_gather_need(struct param_gather *s, int idx)
{
	if (idx < 0 || !s->nb || s->bucket_of[idx] < 0) /* none set up (zeroed): nothing to do */
		return;
	struct pg_bucket *b = &s->b[s->bucket_of[idx]];
	if (b->pending)
		land(s, b);
}

void param_gather_finish(struct param_gather *s)
{
	for (int i = 0; i < s->nb; i++)
		if (s->b[i].pending)
			land(s, &s->b[i]);
}
