/*
 * pp_sched.c - see pp_sched.h.
 */
#include "train/pp_sched.h"

#include <stdlib.h>

#include "base/error.h"
#include "base/xalloc.h"

/* Megatron's get_schedule_table: micro-batches in groups of `group`, each
 * group run through chunk 0, then chunk 1, ...; the last group takes the
 * remainder. Entry k is (micro, chunk) of the k-th forward. */
static void schedule_table(int m, int vpp, int group, int *micro, int *chunk)
{
	int k = 0;
	for (int lo = 0; lo < m; lo += group) {
		int hi = lo + group >= m ? m : lo + group;
		for (int v = 0; v < vpp; v++)
			for (int i = lo; i < hi; i++) {
				micro[k] = i;
				chunk[k] = v;
				k++;
			}
		if (hi == m)
			break;
	}
}

int pp_sched_init(struct pp_sched *s, int pp, int rank, int vpp, int m, int group, bool forward_only)
{
	*s = (struct pp_sched){ .pp = pp, .rank = rank, .vpp = vpp, .m = m };
	if (pp < 1 || rank < 0 || rank >= pp || vpp < 1 || m < 1)
		BUG("pipeline schedule of rank %d/%d, %d chunks, %d micro-batches", rank, pp, vpp, m);
	s->group = group < 0 ? pp : group;
	if (vpp > 1) {
		if (s->group > m || s->group < pp)
			return error("--microbatch-group-size-per-virtual-pipeline-stage %d must lie between the pipeline "
				     "size %d and the %d micro-batches per iteration", s->group, pp, m);
		int last = m % s->group;
		if (last > 0 && last < pp)
			return error("the interleaved schedule needs the %d micro-batches per iteration to be a multiple "
				     "of %d micro-batches per virtual stage, or to leave at least the pipeline size %d "
				     "over (Megatron refuses the dependency bubbles otherwise); change "
				     "--global-batch-size", m, s->group, pp);
	}
	int total = m * vpp;
	int *micro = xmalloc((size_t)total * sizeof(int)), *chunk = xmalloc((size_t)total * sizeof(int));
	if (vpp > 1) {
		schedule_table(m, vpp, s->group, micro, chunk);
	} else {
		for (int k = 0; k < m; k++) {
			micro[k] = k;
			chunk[k] = 0;
		}
	}
	/* get_pp_rank_microbatches */
	int warmup;
	if (forward_only)
		warmup = total;
	else if (vpp == 1)
		warmup = pp - rank - 1;
	else
		warmup = (pp - rank - 1) * 2 + (vpp - 1) * s->group;
	if (warmup > total)
		warmup = total;
	s->warmup = warmup;
	s->nops = forward_only ? total : 2 * total;
	s->ops = xmalloc((size_t)s->nops * sizeof(*s->ops));
	int n = 0;
	/* forward k runs (chunk[k], micro[k]); backward k the mirrored chunk */
#define FWD(k) (s->ops[n++] = (struct pp_op){ PP_FORWARD, chunk[k], micro[k] })
#define BWD(k) (s->ops[n++] = (struct pp_op){ PP_BACKWARD, vpp - 1 - chunk[k], micro[k] })
	for (int k = 0; k < warmup; k++)
		FWD(k);
	if (!forward_only) {
		for (int k = 0; k < total - warmup; k++) {
			FWD(k + warmup);
			BWD(k);
		}
		for (int k = total - warmup; k < total; k++)
			BWD(k);
	}
#undef FWD
#undef BWD
	free(micro);
	free(chunk);
	/* what each chunk holds at once: forwards not yet matched by their backward */
	s->inflight = xcalloc((size_t)vpp, sizeof(int));
	int *now = xcalloc((size_t)vpp, sizeof(int));
	for (int i = 0; i < s->nops; i++) {
		const struct pp_op *o = &s->ops[i];
		if (o->kind == PP_FORWARD) {
			if (++now[o->chunk] > s->inflight[o->chunk])
				s->inflight[o->chunk] = now[o->chunk];
			if (forward_only)
				now[o->chunk] = 0; /* nothing kept for a backward */
		} else {
			now[o->chunk]--;
		}
	}
	free(now);
	s->last_bwd = xmalloc((size_t)vpp * sizeof(int));
	for (int v = 0; v < vpp; v++)
		s->last_bwd[v] = -1;
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == PP_BACKWARD)
			s->last_bwd[s->ops[i].chunk] = i;
	return 0;
}

void pp_sched_free(struct pp_sched *s)
{
	free(s->ops);
	free(s->inflight);
	free(s->last_bwd);
	s->ops = NULL;
	s->inflight = NULL;
	s->last_bwd = NULL;
}

bool pp_sched_prev(const struct pp_sched *s, int chunk, int *rank, int *prev_chunk)
{
	if (s->rank > 0) {
		*rank = s->rank - 1;
		*prev_chunk = chunk;
		return true;
	}
	*rank = s->pp - 1;
	*prev_chunk = chunk - 1;
	return chunk > 0;
}

bool pp_sched_next(const struct pp_sched *s, int chunk, int *rank, int *next_chunk)
{
	if (s->rank < s->pp - 1) {
		*rank = s->rank + 1;
		*next_chunk = chunk;
		return true;
	}
	*rank = 0;
	*next_chunk = chunk + 1;
	return chunk < s->vpp - 1;
}
