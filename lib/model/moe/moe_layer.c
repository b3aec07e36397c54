/*
 * moe_layer.c - a mixture-of-experts layer's MLP (Megatron Core's MoELayer;
 * docs/moe-spec.md): its own pre-MLP norm, the router, the token
 * dispatcher, the experts and an optional shared expert. Forward and
 * backward side by side.
 *
 * The router's logits go to the host, where router.c picks each token's
 * experts and orders the rows; the plan comes back as index arrays. Rows
 * are gathered with the embedding op (out[r] = x[row_tok[r]]; its backward
 * adds them back), each expert runs its MLP on its rows (experts.c, after
 * token_dispatcher.c's all-to-all under expert parallelism), and the
 * weighted sum per token is moe_combine.
 *
 * With --moe-shared-expert-gate the shared expert's output is scaled by
 * sigmoid(x . w) per token (mlp.shared_experts.gate_weight [1, h], as
 * Megatron's SharedExpertMLP): the logit is a linear of one output column,
 * the sigmoid runs on the host (N values, beside the router's), and the
 * scaling is moe_combine with one row per token.
 *
 * With --moe-router-enable-expert-bias each layer's bias (host, fp32)
 * goes to the router with the logits, training forwards add the slots each
 * expert kept to the iteration's counts, and gpt_update_expert_bias turns
 * the counts of the global batch into the next bias once per iteration.
 *
 * Experts split over expert TP (--expert-tensor-parallel-size, by
 * default TP) as the dense MLP over TP; with expert parallelism this rank
 * registers only its own experts, under their global numbers, so
 * checkpoints do not depend on the split. With expert parallelism or an
 * expert TP other than TP the layers dispatch (token_dispatcher.c): every
 * TP rank routes all rows alike, but sends only its sequence shard's.
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void gpt_expert_param_name(char *out, size_t n, int l, int e, int fc)
{
	snprintf(out, n, "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc%d.weight", l, e, fc);
}

void gpt_expert_bias_name(char *out, size_t n, int l)
{
	snprintf(out, n, "decoder.layers.%d.mlp.router.expert_bias", l);
}

void gpt_update_expert_bias(struct gpt_model *m, struct dist_group *dp)
{
	struct gpt_moe_state *S = &m->moe;
	int E = m->c.E, L = gpt_num_layers_all(m);
	if (!S->expert_bias)
		return;
	/* every layer's counts in one sum (the layers a rank lacks count 0) */
	if (dp && dp->size > 1)
		dist_allreduce_sum_f64(dp, S->tok_count, (size_t)L * E);
	for (int l = 0; l < L; l++)
		if (gpt_layer_is_moe(m, l))
			moe_update_expert_bias(S->expert_bias + (size_t)l * E, S->tok_count + (size_t)l * E, E,
					       m->c.router.bias_rate);
	memset(S->tok_count, 0, (size_t)L * E * sizeof(*S->tok_count));
}

void moe_set_parallel(struct gpt_parallel *par, struct dist_group *etp)
{
	if (etp) {
		par->etp = etp->size > 1 ? etp : NULL;
		par->etp_size = etp->size;
		par->etp_rank = etp->rank;
	} else { /* serving: the TP ranks (the expert generator's fastest axis, as TP the dense one's) */
		par->etp = par->tp;
		par->etp_size = par->tp_size;
		par->etp_rank = par->tp_rank;
	}
	par->dispatch = par->ep || par->etp_size != par->tp_size;
}

/* An expert's weight: split over expert TP along tp_axis, which is n equal
 * pieces split one by one (2: SwiGLU's [gate; up]). */
static int reg_expert(struct gpt_model *m, const char *name, int64_t rows, int64_t cols, int tp_axis, int n,
		      float std)
{
	int64_t shape[2] = { rows, cols }, pieces[2] = { shape[tp_axis] / n, shape[tp_axis] / n };
	return params_add_pieces(&m->reg, name, 2, shape, tp_axis, n, pieces, m->par.etp_size, m->par.etp_rank,
				 PARAM_EXPERT, PARAM_INIT_NORMAL, std);
}

void moe_register(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c;
	struct gpt_layer_params *p = &m->lp[l];
	const struct transformer_layer_spec *s = &p->spec;
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = gpt_output_init_std(c);
	int64_t f1 = s->swiglu ? 2 * (int64_t)c->moe_f : c->moe_f;
	int64_t s1[2] = { c->shared_f, c->shared_f }; /* SwiGLU: [gate; up], TP splits each */
	int nf1 = s->swiglu ? 2 : 1;
#define NAME(...) (snprintf(name, sizeof(name), __VA_ARGS__), name)
	p->fc1_w = p->fc1_b = p->fc2_w = p->fc2_b = -1;
	p->ln2_w = reg_norm(m, NAME("decoder.layers.%d.pre_mlp_layernorm.weight", l), s, false);
	p->ln2_b = s->norm == LAYER_RMSNORM ? -1 : reg_norm(m, NAME("decoder.layers.%d.pre_mlp_layernorm.bias", l), s, true);
	p->router_w = reg_weight(m, NAME("decoder.layers.%d.mlp.router.weight", l), c->E, c->h, -1, std, 0);
	p->efc1_w = xcalloc((size_t)c->E, sizeof(int));
	p->efc2_w = xcalloc((size_t)c->E, sizeof(int));
	for (int e = 0; e < c->E; e++) {
		p->efc1_w[e] = p->efc2_w[e] = -1;
		if (e < m->par.e0 || e >= m->par.e0 + m->par.El)
			continue;
		gpt_expert_param_name(name, sizeof(name), l, e, 1);
		p->efc1_w[e] = reg_expert(m, name, f1, c->h, 0, nf1, std);
		gpt_expert_param_name(name, sizeof(name), l, e, 2);
		p->efc2_w[e] = reg_expert(m, name, c->h, c->moe_f, 1, 1, out_std);
	}
	p->sfc1_w = p->sfc2_w = -1;
	if (s->shared_expert) {
		p->sfc1_w = reg_weight_pieces(m, NAME("decoder.layers.%d.mlp.shared_experts.linear_fc1.weight", l), nf1,
					      s1, c->h, std, 0);
		p->sfc2_w = reg_weight(m, NAME("decoder.layers.%d.mlp.shared_experts.linear_fc2.weight", l), c->h,
				       c->shared_f, 1, out_std, 0);
	}
	/* replicated over TP like the router: every TP rank gates every row
	 * alike, so its gradient is whole on each rank */
	p->sgate_w = -1;
	if (s->shared_expert && c->shared_gate)
		p->sgate_w = reg_weight(m, NAME("decoder.layers.%d.mlp.shared_experts.gate_weight", l), 1, c->h, -1, std,
					0);
#undef NAME
}

/* Whether selective recompute drops module mod of each MoE layer on its
 * own (with moe the layers share one whole set instead). */
static bool rc_part(const struct gpt_model *m, unsigned mod)
{
	return gpt_rc(m, mod) && !gpt_rc(m, GPT_RC_MOE);
}

float *moe_take_act(struct gpt_model *m, size_t cap)
{
	struct gpt_moe_state *S = &m->moe;
	if (!rc_part(m, GPT_RC_MOE_ACT))
		return gpt_take(m, cap * (size_t)m->lc.moe_f);
	if (S->act_cap < cap) { /* a layer that needs more rows: the older ones serve the layers sized for them */
		S->act_rc = gpt_take(m, cap * (size_t)m->lc.moe_f);
		S->act_cap = cap;
	}
	return S->act_rc;
}

/* A MoE layer's activations (its routing plan's host memory comes later,
 * from the router) */
struct gpt_moe_acts *moe_alloc_acts(struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_moe_state *S = &m->moe;
	size_t BT = (size_t)m->B * c->S, h = c->h, R = BT * (size_t)c->router.k, Rl = gpt_moe_rows_local(m);
	size_t f1 = c->swiglu ? 2 * (size_t)c->moe_f : (size_t)c->moe_f;
	size_t s1 = c->swiglu ? 2 * (size_t)c->shared_f : (size_t)c->shared_f;
	struct gpt_moe_acts *M = xcalloc(1, sizeof(*M));
	if (S->nall == S->cap_all)
		xgrow(&S->all, &S->cap_all, S->nall + 1, sizeof(*S->all));
	S->all[S->nall++] = M;
	M->z_host = xmalloc(BT * (size_t)c->E * sizeof(float) + 1);
	M->z = gpt_take(m, BT * c->E);
	M->row_tok = gpt_take_bytes(m, R * sizeof(int32_t));
	M->tok_rowptr = gpt_take_bytes(m, (BT + 1) * sizeof(int32_t));
	M->tok_rows = gpt_take_bytes(m, R * sizeof(int32_t));
	M->row_w = gpt_take(m, R);
	M->xperm = gpt_take(m, R * h);
	M->xloc = m->par.dispatch ? gpt_take(m, Rl * h) : M->xperm;
	M->fc1 = gpt_take(m, Rl * f1);
	M->act = moe_take_act(m, Rl);
	M->rows_cap = Rl;
	M->y = gpt_take(m, R * h);
	M->cnt = xcalloc((size_t)m->par.ep_size * (size_t)m->par.El, sizeof(int32_t));
	M->loff = xcalloc((size_t)m->par.El + 1, sizeof(int32_t));
	if (m->par.dispatch) {
		M->ecnt = xcalloc((size_t)m->par.etp_size * (size_t)m->par.El, sizeof(int32_t));
		M->sel_off = xcalloc((size_t)c->E + 1, sizeof(int32_t));
		M->sel_host = xmalloc(R * sizeof(int32_t) + 1);
		M->sel_row = gpt_take_bytes(m, R * sizeof(int32_t));
		M->sel_tok = gpt_take_bytes(m, R * sizeof(int32_t));
	}
	if (c->shared_f > 0 && rc_part(m, GPT_RC_SHARED_EXPERTS)) {
		if (!S->sfc1_rc) {
			S->sfc1_rc = gpt_take(m, BT * s1);
			S->sact_rc = gpt_take(m, BT * (size_t)c->shared_f);
		}
		M->sfc1 = S->sfc1_rc;
		M->sact = S->sact_rc;
	} else if (c->shared_f > 0) {
		M->sfc1 = gpt_take(m, BT * s1);
		M->sact = gpt_take(m, BT * (size_t)c->shared_f);
	}
	if (c->shared_f > 0 && c->shared_gate) {
		M->sgate = gpt_take(m, BT);
		M->sgate_host = xmalloc(BT * sizeof(float) + 1);
	}
	return M;
}

/* The scratch every MoE layer shares; backward: the backward's too (a
 * serving model runs forward only). */
void moe_alloc_scratch(struct gpt_model *m, bool backward)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_moe_state *S = &m->moe;
	size_t BT = (size_t)m->B * c->S, h = c->h;
	size_t R = BT * (size_t)c->router.k, fm = (size_t)c->moe_f, fs = (size_t)c->shared_f;
	size_t f1m = c->swiglu ? 2 * fm : fm, f1s = c->swiglu ? 2 * fs : fs, Rl = gpt_moe_rows_local(m);
	if (fs > 0)
		S->out2 = gpt_take(m, BT * h);
	if (fs > 0 && c->shared_gate && !S->giota) {
		S->gout = gpt_take(m, BT * h);
		S->glogit = gpt_take(m, BT);
		S->giota = gpt_take_bytes(m, (BT + 1) * sizeof(int32_t));
		int32_t *iota = xmalloc((BT + 1) * sizeof(int32_t));
		for (size_t i = 0; i <= BT; i++)
			iota[i] = (int32_t)i;
		m->k->to_device(S->giota, iota, (BT + 1) * sizeof(int32_t));
		free(iota);
		S->gd_host = xmalloc(BT * sizeof(float) + 1);
	}
	if (m->par.dispatch) {
		size_t rows = Rl > R ? Rl : R;
		S->xa = gpt_take(m, rows * h);
		S->xb = gpt_take(m, rows * h);
		S->xc = gpt_take(m, Rl * h);
		S->cnt_all = xcalloc((size_t)m->par.ep_size * (size_t)c->E, sizeof(int32_t));
	}
	S->rows_cap = Rl;
	if (!backward)
		return;
	S->dy = gpt_take(m, R * h);
	S->dx = gpt_take(m, R * h);
	S->dact = gpt_take(m, Rl * fm > BT * fs ? Rl * fm : BT * fs);
	S->dfc1 = gpt_take(m, Rl * f1m > BT * f1s ? Rl * f1m : BT * f1s);
	S->dw = gpt_take(m, R);
	S->dz = gpt_take(m, BT * c->E);
	S->dw_host = xmalloc(R * sizeof(float) + 1);
	S->dprobs_host = xmalloc(R * sizeof(float) + 1);
	S->dz_host = xmalloc(BT * (size_t)c->E * sizeof(float) + 1);
}

/* The host memory of the MoE layers (gpt_free gives back the rest). */
void moe_free(struct gpt_model *m)
{
	struct gpt_moe_state *S = &m->moe;
	for (size_t i = 0; i < S->nall; i++) {
		moe_route_free(&S->all[i]->route);
		free(S->all[i]->z_host);
		free(S->all[i]->cnt);
		free(S->all[i]->loff);
		free(S->all[i]->ecnt);
		free(S->all[i]->sel_off);
		free(S->all[i]->sel_host);
		free(S->all[i]->sgate_host);
		free(S->all[i]);
	}
	free(S->all);
	free(S->dw_host);
	free(S->dprobs_host);
	free(S->dz_host);
	free(S->gd_host);
	free(S->cnt_all);
	free(S->expert_bias);
	free(S->tok_count);
}

/* Context parallelism: each CP rank routes its own tokens (the capacity
 * too applies to them alone); the load-balancing loss counts the slots of
 * the whole sequences, summed over the CP group as Megatron sums its
 * tokens_per_expert over TP x CP (TP ranks here route the same gathered
 * rows, so the CP sum is all). */
static void moe_route_cp(struct gpt_model *m, struct moe_route *r, const float *z)
{
	if (!m->par.cp || r->lb_groups <= 0)
		return;
	dist_allreduce_sum_f64(m->par.cp, r->lb_cnt, (size_t)r->lb_groups * m->lc.E);
	moe_route_lb(r, &m->lc.router, z);
}

/* The router, the rows to their experts and the experts' MLPs: every
 * activation of M but the shared expert's. */
static void route_and_experts(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_moe_acts *M,
			      const float *x)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_state *S = &m->moe;
	int N = P->N, h = c->h, E = c->E;

	/* x: every row, on every TP rank: they all route alike */
	if (c->router_fp32) /* --moe-router-dtype: not rounded to the half type */
		linear_fwd_raw(m, M->z, x, p->router_w, -1, N, h, E);
	else
		linear_fwd(m, M->z, x, p->router_w, -1, N, h, E);
	k->to_host(M->z_host, M->z, (size_t)N * E * sizeof(float));
	if (c->router.force_balance) /* Megatron's RandomSTE: random logits, the gradient passes to the real ones */
		moe_random_logits(M->z_host, N, E, P->sl->drop_seed ^ (0x5eedull << 32) ^ ((uint64_t)l << 20) ^
							   (uint64_t)m->par.ep_rank ^ ((uint64_t)m->par.cp_rank << 8));
	struct moe_route *r = &M->route;
	const float *bias = S->expert_bias ? S->expert_bias + (size_t)l * E : NULL;
	moe_route_forward_biased(r, &c->router, M->z_host, bias, N, P->T);
	moe_route_cp(m, r, M->z_host);
	if (P->stats) {
		/* under CP each rank has its share of the loss; the report averages
		 * over every rank of a stage, CP ones too (Megatron sums over TP x CP) */
		S->aux_sum += r->aux * m->par.cp_size;
		S->zsq_sum += r->zsq;
		S->calls++;
		/* the expert bias's counts: the slots kept, of training forwards only */
		for (int e = 0; S->tok_count && e < E; e++)
			S->tok_count[(size_t)l * E + e] += r->exp_off[e + 1] - r->exp_off[e];
	}
	int R = r->R;
	k->to_device(M->row_tok, r->row_tok, (size_t)R * sizeof(int32_t));
	k->to_device(M->tok_rowptr, r->tok_rowptr, ((size_t)N + 1) * sizeof(int32_t));
	k->to_device(M->tok_rows, r->tok_rows, (size_t)R * sizeof(int32_t));
	k->to_device(M->row_w, r->row_w, (size_t)R * sizeof(float));
	if (m->par.dispatch) {
		/* this rank's shard's rows (xperm [nsel, h]) to their experts, and
		 * their outputs (xperm again) back to their places in y */
		moe_plan_exchange(m, M, r, P->T);
		moe_reserve(m, M, (size_t)M->loff[m->par.El]);
		if (M->nsel > 0)
			k->embedding_forward(M->xperm, M->sel_tok, NULL, x, NULL, M->nsel, h);
		moe_exchange(m, M, M->xloc, M->xperm, true);
		moe_experts_forward(m, l, M->loff, M->xloc, M->fc1, M->act, S->xc);
		moe_exchange(m, M, M->xperm, S->xc, false);
		k->zero(M->y, (size_t)R * h);
		if (M->nsel > 0)
			k->embedding_backward(M->y, NULL, M->xperm, M->sel_row, NULL, M->nsel, h);
	} else {
		if (R > 0)
			k->embedding_forward(M->xperm, M->row_tok, NULL, x, NULL, R, h);
		moe_experts_forward(m, l, r->exp_off, M->xperm, M->fc1, M->act, M->y);
	}
}

/* The shared expert's linear_fc1 and activation. */
static void shared_fc1(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_moe_acts *M, const float *x)
{
	const struct gpt_layer_params *p = &m->lp[l];
	int fs = m->lc.shared_f, s1 = p->spec.swiglu ? 2 * fs : fs;
	linear_fwd(m, M->sfc1, x, p->sfc1_w, -1, P->N, m->lc.h, s1);
	act_fwd(m, &p->spec, M->sact, M->sfc1, P->N, fs);
}

/* The shared expert's gate, sigmoid(x . w) per row, into M->sgate (and
 * its host copy, which backward reads). */
static void shared_gate_fwd(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_moe_acts *M,
			    const float *x)
{
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_state *S = &m->moe;
	int N = P->N;
	linear_fwd(m, S->glogit, x, p->sgate_w, -1, N, m->lc.h, 1);
	m->k->to_host(M->sgate_host, S->glogit, (size_t)N * sizeof(float));
	for (int i = 0; i < N; i++)
		M->sgate_host[i] = (float)(1.0 / (1.0 + exp(-(double)M->sgate_host[i])));
	m->k->to_device(M->sgate, M->sgate_host, (size_t)N * sizeof(float));
	round_half(m, M->sgate, (size_t)N);
	m->k->to_host(M->sgate_host, M->sgate, (size_t)N * sizeof(float));
}

const float *moe_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			 const float *x)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_state *S = &m->moe;
	struct gpt_moe_acts *M = A->moe;
	int N = P->N, h = c->h;
	float *out = m->s.tmp;

	route_and_experts(m, P, l, M, x);
	k->moe_combine_forward(out, M->y, M->row_w, M->tok_rowptr, M->tok_rows, N, h);
	if (p->sfc1_w >= 0) {
		shared_fc1(m, P, l, M, x);
		linear_fwd(m, S->out2, M->sact, p->sfc2_w, -1, N, c->shared_f, h);
		if (p->sgate_w >= 0) { /* each TP rank scales its share alike: the sum over TP is the gated output */
			shared_gate_fwd(m, P, l, M, x);
			k->moe_combine_forward(S->gout, S->out2, M->sgate, S->giota, S->giota, N, h);
			round_half(m, S->gout, (size_t)N * h);
			k->add(out, out, S->gout, (size_t)N * h);
		} else {
			k->add(out, out, S->out2, (size_t)N * h);
		}
	}
	round_half(m, out, (size_t)N * h);
	/* each TP rank holds a slice of every expert's MLP, as of the dense
	 * one: the output is summed over TP, or reduce-scattered with SP */
	return column_input_grad(m, P, out);
}

void moe_recompute(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *x)
{
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_acts *M = A->moe;
	if (gpt_rc(m, GPT_RC_MOE)) /* the whole layer but its output, which backward does not read */
		route_and_experts(m, P, l, M, x);
	else if (gpt_rc(m, GPT_RC_MOE_ACT)) /* the experts' rows as the forward left them */
		act_fwd(m, &p->spec, M->act, M->fc1, m->par.dispatch ? M->loff[m->par.El] : M->route.exp_off[m->par.El],
			m->lc.moe_f);
	if (p->sfc1_w >= 0 && (gpt_rc(m, GPT_RC_MOE) || gpt_rc(m, GPT_RC_SHARED_EXPERTS)))
		shared_fc1(m, P, l, M, x);
	if (p->sgate_w >= 0 && gpt_rc(m, GPT_RC_MOE)) /* the layers share M: this layer's gate again */
		shared_gate_fwd(m, P, l, M, x);
}

/* dout: dL/d(the MoE output), every row; leaves this rank's share of
 * dL/d(its input x, the norm's output) in m->s.dln */
void moe_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *x,
		  const float *dout)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_state *S = &m->moe;
	struct gpt_moe_acts *M = A->moe;
	const struct moe_route *r = &M->route;
	float *dln = m->s.dln;
	int N = P->N, h = c->h, E = c->E, R = r->R;

	if (p->sfc1_w >= 0) {
		int fs = c->shared_f, s1 = p->spec.swiglu ? 2 * fs : fs;
		const float *dsh = dout;
		if (p->sgate_w >= 0) {
			/* out = g * y with y the shared expert's output (this rank's
			 * share under TP, recomputed): dy = g * dout, dg = dout . y
			 * summed over TP, dlogit = dg * g * (1 - g) */
			linear_fwd(m, S->out2, M->sact, p->sfc2_w, -1, N, fs, h);
			k->moe_combine_backward(S->gout, S->glogit, dout, S->out2, M->sgate, S->giota, N, h);
			round_half(m, S->gout, (size_t)N * h);
			dsh = S->gout;
			k->to_host(S->gd_host, S->glogit, (size_t)N * sizeof(float));
			if (m->par.tp)
				dist_allreduce_sum_f32(m->par.tp, S->gd_host, (size_t)N);
			for (int i = 0; i < N; i++) {
				double g = M->sgate_host[i];
				S->gd_host[i] = (float)((double)S->gd_host[i] * g * (1.0 - g));
			}
			k->to_device(S->glogit, S->gd_host, (size_t)N * sizeof(float));
			round_half(m, S->glogit, (size_t)N);
		}
		linear_bwd(m, S->dact, dsh, M->sact, p->sfc2_w, -1, N, fs, h);
		act_bwd(m, &p->spec, S->dfc1, S->dact, M->sfc1, N, fs);
		linear_bwd(m, dln, S->dfc1, x, p->sfc1_w, -1, N, h, s1);
		if (p->sgate_w >= 0) { /* the gate's input share counts once in the sum over TP, as the router's */
			linear_bwd(m, m->par.tp_rank == 0 ? S->dx : NULL, S->glogit, x, p->sgate_w, -1, N, h, 1);
			if (m->par.tp_rank == 0)
				k->add(dln, dln, S->dx, (size_t)N * h);
		}
	} else {
		k->zero(dln, (size_t)N * h);
	}
	k->moe_combine_backward(S->dy, S->dw, dout, M->y, M->row_w, M->row_tok, R, h);
	if (m->par.dispatch) { /* the shard's rows' gradients to their experts' ranks and back */
		if (M->nsel > 0)
			k->embedding_forward(S->dx, M->sel_row, NULL, S->dy, NULL, M->nsel, h);
		moe_exchange(m, M, S->xc, S->dx, true);
		/* dx over dy: the experts read all of dy before they write dx */
		moe_experts_backward(m, l, M->loff, S->xc, M->xloc, M->fc1, M->act, S->xc);
		moe_exchange(m, M, S->dx, S->xc, false);
		if (M->nsel > 0) /* the gather's backward adds each row back to its token */
			k->embedding_backward(dln, NULL, S->dx, M->sel_tok, NULL, M->nsel, h);
	} else {
		moe_experts_backward(m, l, r->exp_off, S->dy, M->xperm, M->fc1, M->act, S->dx);
		if (R > 0) /* the gather's backward adds each row back to its token */
			k->embedding_backward(dln, NULL, S->dx, M->row_tok, NULL, R, h);
	}
	/* the router: each kept slot's weight gradient, plus the attached losses */
	k->to_host(S->dw_host, S->dw, (size_t)R * sizeof(float));
	/* y, hence each row's dot product, is this rank's share of the expert's
	 * output (or, dispatching, the whole output of this rank's shard's rows
	 * and zero for the others) */
	if (m->par.tp)
		dist_allreduce_sum_f32(m->par.tp, S->dw_host, (size_t)R);
	memset(S->dprobs_host, 0, (size_t)N * c->router.k * sizeof(float));
	for (int i = 0; i < R; i++)
		S->dprobs_host[(size_t)r->row_tok[i] * c->router.k + r->row_slot[i]] = S->dw_host[i];
	moe_route_backward(r, &c->router, M->z_host, S->dprobs_host, P->T, S->aux_scale, S->dz_host);
	k->to_device(S->dz, S->dz_host, (size_t)N * E * sizeof(float));
	/* every TP rank computed the whole router gradient; the input's share
	 * counts once in the sum over TP that follows */
	linear_bwd(m, m->par.tp_rank == 0 ? S->dx : NULL, S->dz, x, p->router_w, -1, N, h, E);
	if (m->par.tp_rank == 0)
		k->add(dln, dln, S->dx, (size_t)N * h);
	round_half(m, dln, (size_t)N * h);
}
