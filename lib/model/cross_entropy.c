/*
 * cross_entropy.c - the loss over a vocabulary split over tensor-parallel
 * ranks (Megatron Core's tensor_parallel/cross_entropy.py,
 * vocab_parallel_cross_entropy). Each rank has the log-sum-exp of its
 * logits and, where the target is in its shard, lse - target logit. The
 * global lse is mx + log sum exp(lse_r - mx) with mx the max over ranks,
 * the target logit the sum of the owners' values; the global lse goes back
 * to the device for backward's softmax. Row sums of a few floats per token:
 * done on the host.
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdlib.h>

#include "base/xalloc.h"

static void xent_combine(struct gpt_model *m, float *dev_lse, float *losses, int N)
{
	struct dist_group *tp = m->par.tp;
	float *lse = xmalloc((size_t)N * 3 * sizeof(float)), *mx = lse + N, *xt = lse + 2 * N;
	m->k->to_host(lse, dev_lse, (size_t)N * sizeof(float));
	for (int i = 0; i < N; i++) {
		mx[i] = lse[i];
		xt[i] = lse[i] - losses[i]; /* the target logit here, 0 where the target is elsewhere */
	}
	dist_allreduce_max_f32(tp, mx, (size_t)N);
	dist_allreduce_sum_f32(tp, xt, (size_t)N);
	for (int i = 0; i < N; i++)
		lse[i] = expf(lse[i] - mx[i]);
	dist_allreduce_sum_f32(tp, lse, (size_t)N);
	for (int i = 0; i < N; i++) {
		lse[i] = mx[i] + logf(lse[i]);
		losses[i] = lse[i] - xt[i];
	}
	m->k->to_device(dev_lse, lse, (size_t)N * sizeof(float));
	free(lse);
}

/* The slot's logits [N, Vp/t] against its targets: per-token losses to the host. */
void vocab_parallel_xent_forward(struct gpt_model *m, const struct gpt_pass *P, float *losses_host)
{
	struct gpt_slot *sl = P->sl;
	m->k->xent_forward(sl->losses, sl->lse, sl->logits, sl->targets, P->N, m->lc.Vp);
	m->k->to_host(losses_host, sl->losses, (size_t)P->N * 4);
	if (m->par.tp)
		xent_combine(m, sl->lse, losses_host, P->N);
}

/* dL/dlogits, in place of the logits, from dL/dloss per token (host). */
void vocab_parallel_xent_backward(struct gpt_model *m, const struct gpt_pass *P, const float *dloss_host)
{
	struct gpt_slot *sl = P->sl;
	m->k->to_device(m->s.dloss, dloss_host, (size_t)P->N * 4);
	m->k->xent_backward(sl->logits, sl->logits, sl->lse, sl->targets, m->s.dloss, P->N, m->lc.Vp);
}
