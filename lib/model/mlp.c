/*
 * mlp.c - the dense MLP (Megatron Core's MLP with the TE spec): the
 * pre-MLP norm fused into linear_fc1 (column-parallel; with SwiGLU its rows
 * are [gate; up] and TP splits each half), the activation, linear_fc2
 * (row-parallel). Forward and backward side by side.
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdio.h>

void mlp_register(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c;
	struct gpt_layer_params *p = &m->lp[l];
	const struct transformer_layer_spec *s = &p->spec;
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = gpt_output_init_std(c);
	/* SwiGLU: rows [gate; up], each rank holds [gate_r; up_r] */
	int64_t f1[2] = { c->f, c->f };
	int nf1 = s->swiglu ? 2 : 1;
#define NAME(fmt) (snprintf(name, sizeof(name), "decoder.layers.%d.mlp." fmt, l), name)
	p->ln2_w = reg_norm(m, NAME("linear_fc1.layer_norm_weight"), s, false);
	p->ln2_b = s->norm == LAYER_RMSNORM ? -1 : reg_norm(m, NAME("linear_fc1.layer_norm_bias"), s, true);
	p->fc1_w = reg_weight_pieces(m, NAME("linear_fc1.weight"), nf1, f1, c->h, std, 0);
	p->fc1_b = s->fc_bias ? reg_bias_pieces(m, NAME("linear_fc1.bias"), nf1, f1, 0) : -1;
	p->fc2_w = reg_weight(m, NAME("linear_fc2.weight"), c->h, c->f, 1, out_std, 0);
	p->fc2_b = s->fc_bias ? reg_bias(m, NAME("linear_fc2.bias"), c->h, -1, 0) : -1;
#undef NAME
}

/* ln2: the norm's output, all rows; returns the MLP's output where the
 * residual stream lives (this rank's rows, summed over TP) */
void mlp_fc1_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
		     const float *ln2)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	int f1 = p->spec.swiglu ? 2 * c->f : c->f;
	linear_fwd(m, A->fc1, ln2, p->fc1_w, p->fc1_b, P->N, c->h, f1);
	act_fwd(m, &p->spec, A->act, A->fc1, P->N, c->f);
}

const float *mlp_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			 const float *ln2)
{
	const struct gpt_layer_params *p = &m->lp[l];
	mlp_fc1_forward(m, P, l, A, ln2);
	return row_parallel(m, P, A->act, p->fc2_w, p->fc2_b, m->lc.f);
}

/* dout: dL/d(fc2's output), all rows; leaves this rank's share of
 * dL/d(ln2) in m->s.dln */
void mlp_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *ln2,
		  const float *dout)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, f1 = p->spec.swiglu ? 2 * c->f : c->f;
	linear_bwd(m, s->dact, dout, A->act, p->fc2_w, p->fc2_b, N, c->f, c->h);
	act_bwd(m, &p->spec, s->dfc1, s->dact, A->fc1, N, c->f);
	linear_bwd(m, s->dln, s->dfc1, ln2, p->fc1_w, p->fc1_b, N, c->h, f1);
}
