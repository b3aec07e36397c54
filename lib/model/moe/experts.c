/*
 * experts.c - a MoE layer's experts (Megatron Core's SequentialMLP): each
 * local expert runs its MLP (linear_fc1, activation, linear_fc2; split over
 * TP as the dense MLP) on the rows routed to it, which lie together:
 * expert e0 + e owns rows [off[e], off[e+1]). Forward and backward side by
 * side.
 */
#include "model/gpt_int.h"

void moe_experts_forward(struct gpt_model *m, int l, const int32_t *off, const float *xin, float *fc1, float *act,
			 float *y)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	int El = m->par.El, e0 = m->par.e0;
	int h = c->h, fm = c->moe_f, f1 = p->spec.swiglu ? 2 * fm : fm, R = off[El];
	for (int e = 0; e < El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_fwd(m, fc1 + (size_t)r0 * f1, xin + (size_t)r0 * h, p->efc1_w[e0 + e], -1, n, h, f1);
	}
	act_fwd(m, &p->spec, act, fc1, R, fm);
	for (int e = 0; e < El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_fwd(m, y + (size_t)r0 * h, act + (size_t)r0 * fm, p->efc2_w[e0 + e], -1, n, fm, h);
	}
}

/* dy: [rows, h] the gradient of the experts' outputs; leaves the rows'
 * input gradient in dx and adds the weight gradients. */
void moe_experts_backward(struct gpt_model *m, int l, const int32_t *off, const float *dy, const float *xin,
			  const float *fc1, const float *act, float *dx)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	int El = m->par.El, e0 = m->par.e0;
	int h = c->h, fm = c->moe_f, f1 = p->spec.swiglu ? 2 * fm : fm, R = off[El];
	float *dact = m->moe.dact, *dfc1 = m->moe.dfc1;
	for (int e = 0; e < El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_bwd(m, dact + (size_t)r0 * fm, dy + (size_t)r0 * h, act + (size_t)r0 * fm, p->efc2_w[e0 + e],
				   -1, n, fm, h);
	}
	act_bwd(m, &p->spec, dfc1, dact, fc1, R, fm);
	for (int e = 0; e < El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_bwd(m, dx + (size_t)r0 * h, dfc1 + (size_t)r0 * f1, xin + (size_t)r0 * h, p->efc1_w[e0 + e],
				   -1, n, h, f1);
	}
}
