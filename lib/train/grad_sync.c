/*
 * grad_sync.c - see grad_sync.h.
 */
#include "train/grad_sync.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

void grad_sync_init(struct grad_sync *s, const struct kops *k, struct param_registry *reg, struct dist_group *g,
		    size_t lo, size_t hi, bool sharded, size_t bucket_elems, bool overlap, unsigned late_flags)
{
	grad_sync_init_part(s, k, reg, g, 0, reg->total, lo, hi, sharded, bucket_elems, overlap, late_flags);
}

void grad_sync_init_part(struct grad_sync *s, const struct kops *k, struct param_registry *reg, struct dist_group *g,
			 size_t base, size_t end, size_t lo, size_t hi, bool sharded, size_t bucket_elems, bool overlap,
			 unsigned late_flags)
{
	memset(s, 0, sizeof(*s));
	if (base > lo || lo > hi || hi > end || end > reg->total)
		BUG("gradient reduction of [%zu, %zu) with shard [%zu, %zu) in %zu elements", base, end, lo, hi, reg->total);
	s->base = base;
	s->end = end;
	s->k = k;
	s->g = g;
	s->reg = reg;
	s->lo = lo;
	s->hi = hi;
	s->sharded = sharded;
	s->overlap = overlap;
	s->bucket_of = xcalloc((size_t)reg->n + 1, sizeof(int));
	if (!overlap)
		bucket_elems = (size_t)-1; /* Megatron: no overlap, one bucket */
	size_t cap = 0;
	/* From the last parameter back: backward finishes them roughly in that
	 * order. A bucket is a run of adjacent parameters, all late or none. */
	for (int i = reg->n - 1; i >= 0; i--) {
		const struct param *p = &reg->p[i];
		if (p->offset < base || p->offset >= end) {
			s->bucket_of[i] = -1;
			continue;
		}
		bool late = overlap && (p->flags & late_flags);
		struct grad_bucket *cur = s->nb ? &s->b[s->nb - 1] : NULL;
		bool fits = cur && cur->late == late && cur->lo == p->offset + p->numel &&
			    cur->hi - p->offset <= bucket_elems;
		if (!fits) {
			xgrow(&s->b, &cap, (size_t)s->nb + 1, sizeof(*s->b));
			cur = &s->b[s->nb++];
			memset(cur, 0, sizeof(*cur));
			cur->hi = p->offset + p->numel;
			cur->late = late;
		}
		cur->lo = p->offset;
		s->bucket_of[i] = s->nb - 1;
	}
}

void grad_sync_free(struct grad_sync *s)
{
	free(s->b);
	free(s->bucket_of);
	memset(s, 0, sizeof(*s));
}

void grad_sync_begin(struct grad_sync *s)
{
	s->nonfinite = 0;
	for (int i = 0; i < s->nb; i++) {
		s->b[i].pending = 0;
		s->b[i].started = false;
	}
	for (int i = 0; s->nb && i < s->reg->n; i++) /* none set up (zeroed): nothing to do */
		if (s->bucket_of[i] >= 0)
			s->b[s->bucket_of[i]].pending++;
}

static void start(struct grad_sync *s, struct grad_bucket *b)
{
	b->started = true;
	float *grad = s->reg->grad;
	/* this rank's own gradients, before the sum hides where a NaN came from */
	if (s->check)
		s->nonfinite += s->k->nonfinite(grad + b->lo, b->hi - b->lo);
	if (s->bf16) /* what a bf16 gradient buffer would hand the reduction */
		s->k->round(grad + b->lo, grad + b->lo, b->hi - b->lo, KOPS_ROUND_BF16);
	if (s->g->size <= 1)
		return;
	if (s->sharded) /* the shards are the region's; each lands in place, in this rank's shard */
		dist_ireduce_scatter_range_f32(s->g, grad + s->base, s->end - s->base, b->lo - s->base, b->hi - s->base,
					       NULL, &b->req);
	else
		dist_iallreduce_sum_f32(s->g, grad + b->lo, b->hi - b->lo, &b->req);
}

void grad_sync_param_ready(struct grad_sync *s, int idx)
{
	if (!s->overlap || idx < 0 || s->bucket_of[idx] < 0)
		return;
	struct grad_bucket *b = &s->b[s->bucket_of[idx]];
	if (--b->pending == 0 && !b->late)
		start(s, b);
	/* give the collectives in flight a chance to progress */
	for (int i = 0; i < s->nb; i++)
		if (s->b[i].started)
			dist_test(&s->b[i].req);
}

/* A bucket's reduction is done: with bf16 its sum (this rank's part of
 * it, sharded) is rounded as a bf16 result buffer holds it. */
static void done(struct grad_sync *s, struct grad_bucket *b)
{
	dist_wait(&b->req);
	if (!s->bf16 || s->g->size <= 1)
		return;
	size_t a = b->lo, e = b->hi;
	if (s->sharded) {
		a = a > s->lo ? a : s->lo;
		e = e < s->hi ? e : s->hi;
	}
	if (a < e)
		s->k->round(s->reg->grad + a, s->reg->grad + a, e - a, KOPS_ROUND_BF16);
}

void grad_sync_finish(struct grad_sync *s)
{
	for (int i = 0; i < s->nb; i++)
		if (!s->b[i].late && !s->b[i].started)
			start(s, &s->b[i]);
	for (int i = 0; i < s->nb; i++)
		if (!s->b[i].late)
			done(s, &s->b[i]);
}

void grad_sync_late(struct grad_sync *s)
{
	for (int i = 0; i < s->nb; i++)
		if (s->b[i].late) {
			start(s, &s->b[i]);
			done(s, &s->b[i]);
		}
}
