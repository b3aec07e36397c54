/*
 * step_model.c - see step_model.h. The volumes follow lib/dist's counting
 * rules: an all-reduce of n bytes over p ranks sends 2(p-1)/p n, an
 * all-gather or reduce-scatter (p-1)/p of the whole buffer, a send n;
 * megac's CPU backend moves fp32 words. tests/prog/py/comm_volume.py is the
 * independent statement of the same table that the tests hold --log-comm
 * and this file to.
 */
#include "memcalc/step_model.h"

#include "base/error.h"
#include "dist/layout.h"

#define WORD 4 /* bytes per element on the wire (fp32) */

static int64_t ring(int64_t p, int64_t n)
{
	return 2 * (p - 1) * n / p;
}

const char *step_group_name(int group, int cp)
{
	switch (group) {
	case SM_TP:
		return "tensor-model-parallel";
	case SM_PP:
		return "pipeline-model-parallel";
	case SM_EMB:
		return "embedding";
	case SM_CP:
		return "context-parallel";
	case SM_DP:
		return cp > 1 ? "data-parallel with context-parallel" : "data-parallel";
	case SM_EP:
		return "expert-model-parallel";
	case SM_EDP:
		return "expert-data-parallel";
	case SM_ETP:
		return "expert-tensor-parallel";
	}
	BUG("no step-model group %d", group);
}

/* Bytes and messages of world rank 0 in each group, per iteration. */
static void volumes(const struct gpt_config *c, const struct step_layout *l, struct step_estimate *e)
{
	int64_t t = l->tp, p = l->pp, v = l->vpp, cp = l->cp, d = l->dp;
	int64_t h = c->h, m = l->gbs / (l->mbs * d);
	int64_t N = l->mbs * c->S / cp;      /* tokens of a micro-batch on this rank */
	int64_t Nl = l->sp ? N / t : N;      /* rows of the residual stream here */
	int64_t hid = WORD * N * h;          /* a whole [N, h] activation */
	struct dist_split split = { .L = c->L, .pp = (int)p, .vpp = (int)v, .first = c->pp_first, .last = c->pp_last };
	int64_t Ll = 0;                      /* layers on rank 0, all its chunks */
	for (int ch = 0; ch < v; ch++) {
		int first, count;
		dist_stage_layers(&split, 0, ch, &first, &count);
		Ll += count;
	}
	int64_t pre = 1, post = p == 1;      /* the embedding is here; the head only without PP */
	int64_t norm = c->rmsnorm ? h : 2 * h; /* one norm's parameters (TP-replicated) */
	int64_t norms = Ll * 2 * norm + post * norm;

	if (t > 1) {
		/* messages: 2(t-1) ring steps per all-reduce, t-1 per all-gather or
		 * reduce-scatter; per micro-batch the layers' collectives and the
		 * loss's three all-reduces (max, target logit, sum), per iteration
		 * the grad-norm sum and with SP one all-reduce per norm tensor */
		int64_t per, ring_steps, sp_tensors = 0;
		if (l->sp) { /* all-gathers and reduce-scatters of the sequence-parallel rows */
			per = (10 * Ll + 2 * pre + 2 * post) * (t - 1) * hid / t;
			sp_tensors = Ll * (c->rmsnorm ? 2 : 4) + post * (c->rmsnorm ? 1 : 2);
			ring_steps = m * (10 * Ll + 2 * pre + 2 * post) * (t - 1) +
				     (m * 3 * post + 1 + sp_tensors) * 2 * (t - 1);
		} else {
			per = (4 * Ll + pre + post) * ring(t, hid);
			ring_steps = (m * (4 * Ll + pre + post + 3 * post) + 1) * 2 * (t - 1);
		}
		per += post * ring(t, 3 * WORD * N); /* the vocabulary-parallel cross-entropy */
		if (c->g < t) { /* fewer KV groups than ranks: the fused QKV output all-gathered
				 * forward and its gradient reduce-scattered backward, per layer */
			per += Ll * 2 * (t - 1) * WORD * N * (c->a + 2 * c->g) * c->k / t;
			ring_steps += m * Ll * 2 * (t - 1);
		}
		e->bytes[SM_TP] = m * per + ring(t, 2 * WORD) + (l->sp ? ring(t, WORD * norms) : 0);
		e->messages[SM_TP] = (double)ring_steps;
	}
	if (p > 1) {
		int64_t sends = 2 * v - 1; /* the first chunk of the first stage sends no gradient */
		e->bytes[SM_PP] = m * sends * WORD * Nl * h + ring(p, 4 * WORD) + ring(p, 2 * WORD);
		e->messages[SM_PP] = (double)(m * sends) + 4.0 * (double)(p - 1); /* + two all-reduces */
		if (!c->untied) { /* the tied embedding's gradient, first and last stage */
			e->bytes[SM_EMB] = ring(2, WORD * (int64_t)c->Vp / t * h);
			e->messages[SM_EMB] = 2;
		}
	}
	if (cp > 1) { /* ring attention: K/V forward, K/V and dK/dV backward */
		int64_t g = c->g >= t ? c->g / t : 1; /* with fewer groups than TP ranks, each holds one */
		e->bytes[SM_CP] = m * Ll * 6 * WORD * (cp - 1) * l->mbs * g * c->k * c->S / cp;
		e->messages[SM_CP] = (double)(m * Ll * 3 * (cp - 1)); /* K/V forward, K/V and dK/dV backward */
	}
	int64_t n = d * cp, P = l->rank0_params - l->rank0_expert_params;
	int64_t et = l->etp > 0 ? l->etp : t;
	if (c->E > 0 && (l->ep > 1 || et != t)) {
		/* per micro-batch and MoE layer of rank 0: the routing counts
		 * (an all-gather of E ints), then the rows of its sequence shard's
		 * tokens to their experts and back, forward and backward (four
		 * all-to-alls over EP, each sending the (ep-1)/ep of the shard's
		 * rows that go to other ranks when routing is balanced; then
		 * four exchanges over expert TP, the rows an EP rank received
		 * gathered from every expert-TP peer and the partial outputs
		 * summed back, with the all-gather of El counts) */
		int64_t ep = l->ep, moe = 0, El = c->E / ep;
		for (int ch = 0; ch < l->vpp; ch++) {
			int first, count;
			dist_stage_layers(&(struct dist_split){ .L = c->L, .pp = l->pp, .vpp = l->vpp,
								.first = c->pp_first, .last = c->pp_last },
					  0, ch, &first, &count);
			for (int j = first; j < first + count; j++)
				moe += c->moe_layer[j] != 0;
		}
		int64_t rows = (l->sp ? N / t : N) * c->router.k;
		e->bytes[SM_EP] = m * moe * (4 * (ep - 1) * rows / ep * WORD * h + (ep - 1) * c->E * 4);
		e->messages[SM_EP] = (double)(m * moe * 5 * (ep - 1));
		int64_t eg = et > 1 && (l->sp || et != t) ? et : 1; /* the expert-TP ranks that gather rows */
		e->bytes[SM_ETP] = m * moe * (4 * (eg - 1) * rows * WORD * h + (eg - 1) * El * 4);
		e->messages[SM_ETP] = (double)(m * moe * 5 * (eg - 1));
		/* the experts' gradients over expert data parallelism (no loss sums) */
		int64_t ne = (int64_t)t * l->cp * l->dp / (et * ep), Pe = l->rank0_expert_params;
		if (ne > 1) {
			if (l->dist_opt)
				e->bytes[SM_EDP] = 2 * ((ne - 1) * WORD * Pe / ne) + ring(ne, 2 * WORD);
			else
				e->bytes[SM_EDP] = ring(ne, WORD * Pe);
			e->messages[SM_EDP] = (l->dist_opt ? 4.0 : 2.0) * (double)(ne - 1);
		}
	}
	if (n > 1) {
		if (l->dist_opt) /* reduce-scatter of the gradients, all-gather of the parameters */
			e->bytes[SM_DP] = 2 * ((n - 1) * WORD * P / n) + ring(n, 4 * WORD) + ring(n, 2 * WORD);
		else
			e->bytes[SM_DP] = ring(n, WORD * P) + ring(n, 4 * WORD);
		/* two all-reduces; with the distributed optimizer a reduce-scatter,
		 * an all-gather and two all-reduces */
		e->messages[SM_DP] = (l->dist_opt ? 6.0 : 4.0) * (double)(n - 1);
	}
}

void step_estimate(const struct gpt_config *c, const struct step_layout *l, const struct step_rates *r,
		   struct step_estimate *e)
{
	*e = (struct step_estimate){ 0 };
	volumes(c, l, e);

	/* ranks are ordered tensor, context, data, pipeline (fastest first): a
	 * group stays in one node when the ranks it spans do */
	int64_t span[SM_NGROUPS] = { l->tp, (int64_t)l->tp * l->cp * l->dp * l->pp, 0, (int64_t)l->tp * l->cp,
				     (int64_t)l->tp * l->cp * l->dp };
	span[SM_EMB] = span[SM_PP];
	/* the expert generator orders expert tensor, expert, expert data and
	 * pipeline ranks */
	int64_t et = l->etp > 0 ? l->etp : l->tp;
	span[SM_EP] = et * l->ep;
	span[SM_ETP] = et;
	span[SM_EDP] = span[SM_DP];
	double comm = 0;
	for (int g = 0; g < SM_NGROUPS; g++) {
		e->inter_node[g] = span[g] > r->gpus_per_node;
		double bw = (e->inter_node[g] ? r->inter_GBs : r->intra_GBs) * 1e9;
		comm += (double)e->bytes[g] / bw + e->messages[g] * r->latency_us * 1e-6;
	}

	/* compute: the transformer layers split over the stages, the output
	 * layer on the last one; recompute repeats a forward (full: whole
	 * layers, selective: the core attention), a third of forward+backward */
	double tokens = (double)l->gbs * c->S;
	double total = gpt_flops_per_iteration(c, l->gbs);
	double logits = 6.0 * tokens * c->h * c->Vp;
	double core = 6.0 * (double)l->gbs * c->S * c->S * ((double)c->k * c->a) * c->L;
	double layers = total - logits;
	if (c->recompute == GPT_RECOMPUTE_FULL)
		layers += layers / 3;
	else if (c->recompute == GPT_RECOMPUTE_SELECTIVE)
		layers += core / 3;
	e->flops = (layers / l->pp + logits) / ((double)l->tp * l->cp * l->dp);
	int64_t m = l->gbs / (l->mbs * l->dp);
	e->compute_s = e->flops / (r->tflops * 1e12);
	e->bubble_s = e->compute_s * (double)(l->pp - 1) / ((double)l->vpp * (double)m);
	e->comm_s = comm;
	e->total_s = e->compute_s + e->bubble_s + e->comm_s;
}
