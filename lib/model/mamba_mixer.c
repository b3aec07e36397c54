/*
 * mamba_mixer.c - the Mamba-2 mixer of a hybrid model's Mamba layer
 * (Megatron Core's MambaMixer with the TE spec: the layer's pre-norm fused
 * into in_proj), forward and backward side by side (docs/mamba.md):
 *
 *   zxBCdt = in_proj(norm(x))                  [N, 2 di + 2 G N + H]
 *   xBC    = ssm_conv(xBC; conv1d)             causal depthwise, + bias, SiLU
 *   y      = ssd_scan(x, dt; dt_bias, A_log, B, C, D)
 *   yn     = gated_rmsnorm(y, z; norm.weight, G groups, eps 1e-5)
 *   out    = out_proj(yn)
 *
 * The ops take contiguous channel-last tensors, so the pieces of in_proj's
 * output (z, xBC, dt) and of the convolution's (x, B, C) are copied out of
 * their rows (copy_rows) into scratch the layers share; the backward copies
 * them out again from what the layer kept (in_proj's output, the
 * convolution's output, the scan's output, the norm's output and rstd) and
 * puts the gradients back together the same way. Tensor parallelism as
 * Megatron splits the mixer: in_proj column-parallel (each rank's rows its
 * share of z, x, B, C and dt), out_proj row-parallel, the convolution,
 * scan and gated norm on the rank's heads and groups (H / TP, G / TP);
 * everything past the registration runs on the per-rank dims of m->lc.
 * Context parallelism is refused for now (gpt_config.c).
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdio.h>

/* a 1-D tensor of the mixer's own initialisation, split by TP piece by
 * piece (per head, or conv1d's [x; B; C]); none is weight-decayed
 * (Megatron's rule: 1-D tensors get no weight decay) */
static int reg_vec(struct gpt_model *m, const char *name, int npieces, const int64_t *pieces, enum param_init init,
		   float std)
{
	int64_t shape[1] = { 0 };
	for (int i = 0; i < npieces; i++)
		shape[0] += pieces[i];
	return params_add_pieces(&m->reg, name, 1, shape, 0, npieces, pieces, m->par.tp_size, m->par.tp_rank,
				 PARAM_NO_WD, init, std);
}

void mamba_register(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c;
	struct gpt_layer_params *p = &m->lp[l];
	const struct transformer_layer_spec *s = &p->spec;
	int64_t di = gpt_mamba_inner(c), C = gpt_mamba_conv_dim(c), W = c->mamba_W, H = c->mamba_H;
	int64_t GN = (int64_t)c->mamba_G * c->mamba_N;
	/* TP splits each piece: a rank's in_proj rows are [z_r; x_r; B_r; C_r;
	 * dt_r], its conv channels [x_r; B_r; C_r], its heads H / TP */
	int64_t proj[5] = { di, di, GN, GN, H }, *conv = proj + 1;
	char name[PARAM_NAME_MAX];
	/* conv1d: torch's Conv1d init (kaiming_uniform with a = sqrt 5, fan_in
	 * = W) for the weight and U(+-1/sqrt(fan_in)) for the bias */
	float conv_bound = 1.0f / sqrtf((float)W);
#define NAME(fmt) (snprintf(name, sizeof(name), "decoder.layers.%d.mixer." fmt, l), name)
	p->ln1_w = reg_norm(m, NAME("in_proj.layer_norm_weight"), s, false);
	p->ln1_b = s->norm == LAYER_RMSNORM ? -1 : reg_norm(m, NAME("in_proj.layer_norm_bias"), s, true);
	p->mb_in_w = reg_weight_pieces(m, NAME("in_proj.weight"), 5, proj, c->h, c->init_std, 0);
	/* Megatron's [C, 1, W], kept without its unit axis: the op's w[C, W] */
	int64_t cshape[2] = { C, W };
	p->mb_conv_w = params_add_pieces(&m->reg, NAME("conv1d.weight"), 2, cshape, 0, 3, conv, m->par.tp_size,
					 m->par.tp_rank, 0, PARAM_INIT_UNIFORM, conv_bound);
	p->mb_conv_b = reg_vec(m, NAME("conv1d.bias"), 3, conv, PARAM_INIT_UNIFORM, conv_bound);
	p->mb_dt_bias = reg_vec(m, NAME("dt_bias"), 1, &H, PARAM_INIT_DT_BIAS, 0);
	p->mb_A_log = reg_vec(m, NAME("A_log"), 1, &H, PARAM_INIT_A_LOG, 0);
	p->mb_D = reg_vec(m, NAME("D"), 1, &H, PARAM_INIT_ONE, 0);
	/* the gated norm's groups stay whole on a rank (G / TP of them) */
	p->mb_norm_w = reg_vec(m, NAME("norm.weight"), 1, &di, PARAM_INIT_ONE, 0);
	p->mb_out_w = reg_weight(m, NAME("out_proj.weight"), c->h, di, 1, gpt_output_init_std(c), 0);
#undef NAME
}

void mamba_alloc_acts(struct gpt_model *m, struct gpt_layer_acts *A)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, BTl = (size_t)m->Nl, h = c->h, di = (size_t)gpt_mamba_inner(c);
	A->ln1 = gpt_take(m, BTl * h);
	A->ln1_mean = gpt_take(m, BTl);
	A->ln1_rstd = gpt_take(m, BTl);
	A->mb_zx = gpt_take(m, BT * (size_t)gpt_mamba_proj_dim(c));
	A->mb_xbc = gpt_take(m, BT * (size_t)gpt_mamba_conv_dim(c));
	A->mb_y = gpt_take(m, BT * di);
	A->mb_yn = gpt_take(m, BT * di);
	A->mb_rstd = gpt_take(m, BT * (size_t)c->mamba_G);
}

void mamba_alloc_scratch(struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_scratch *s = &m->s;
	size_t BT = (size_t)m->B * c->S, di = (size_t)gpt_mamba_inner(c), C = (size_t)gpt_mamba_conv_dim(c);
	size_t H = (size_t)c->mamba_H, GN = (size_t)c->mamba_G * c->mamba_N;
	s->mb_xin = gpt_take(m, BT * C);
	s->mb_z = gpt_take(m, BT * di);
	s->mb_x = gpt_take(m, BT * di);
	s->mb_dt = gpt_take(m, BT * H);
	s->mb_B = gpt_take(m, BT * GN);
	s->mb_C = gpt_take(m, BT * GN);
	s->mb_dy = gpt_take(m, BT * di);
	s->mb_dz = gpt_take(m, BT * di);
	s->mb_dx = gpt_take(m, BT * di);
	s->mb_ddt = gpt_take(m, BT * H);
	s->mb_dB = gpt_take(m, BT * GN);
	s->mb_dC = gpt_take(m, BT * GN);
	s->mb_dxbc = gpt_take(m, BT * C);
	s->mb_dxin = gpt_take(m, BT * C);
	s->mb_dzx = gpt_take(m, BT * (size_t)gpt_mamba_proj_dim(c));
}

/* columns [col, col + w) of the N rows of src (row width sw) into dst
 * (row width dw) at column dcol */
static void cols(struct gpt_model *m, float *dst, int dw, int dcol, const float *src, int sw, int col, int w, int N)
{
	m->k->copy_rows(dst + dcol, (size_t)dw * sizeof(float), src + col, (size_t)sw * sizeof(float),
			(size_t)w * sizeof(float), (size_t)N);
}

/* the scan's inputs x, B, C out of the convolution's output, and dt out
 * of in_proj's, into the scratch */
static void scan_inputs(struct gpt_model *m, const struct gpt_layer_acts *A, int N)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_scratch *s = &m->s;
	int di = gpt_mamba_inner(c), C = gpt_mamba_conv_dim(c), GN = c->mamba_G * c->mamba_N;
	cols(m, s->mb_x, di, 0, A->mb_xbc, C, 0, di, N);
	cols(m, s->mb_B, GN, 0, A->mb_xbc, C, di, GN, N);
	cols(m, s->mb_C, GN, 0, A->mb_xbc, C, di + GN, GN, N);
	cols(m, s->mb_dt, c->mamba_H, 0, A->mb_zx, gpt_mamba_proj_dim(c), di + C, c->mamba_H, N);
}

const float *mamba_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			   const float *ln1)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, di = gpt_mamba_inner(c), C = gpt_mamba_conv_dim(c), D = gpt_mamba_proj_dim(c);
	int H = c->mamba_H, G = c->mamba_G;
	linear_fwd(m, A->mb_zx, ln1, p->mb_in_w, -1, N, c->h, D);
	cols(m, s->mb_xin, C, 0, A->mb_zx, D, di, C, N);
	k->ssm_conv_forward(A->mb_xbc, s->mb_xin, NULL, gpt_param(m, p->mb_conv_w, GPT_VIEW_W),
			    gpt_param(m, p->mb_conv_b, GPT_VIEW_B), P->B, P->T, C, c->mamba_W);
	scan_inputs(m, A, N);
	k->ssd_scan_forward(A->mb_y, NULL, s->mb_x, s->mb_dt, gpt_param(m, p->mb_dt_bias, GPT_VIEW_B),
			    gpt_param(m, p->mb_A_log, GPT_VIEW_B), s->mb_B, s->mb_C, gpt_param(m, p->mb_D, GPT_VIEW_B),
			    NULL, P->B, P->T, H, c->mamba_P, G, c->mamba_N, c->mamba_chunk);
	cols(m, s->mb_z, di, 0, A->mb_zx, D, 0, di, N);
	k->gated_rmsnorm_forward(A->mb_yn, A->mb_rstd, A->mb_y, s->mb_z, gpt_param(m, p->mb_norm_w, GPT_VIEW_B), N, di,
				 G, 1e-5f);
	return row_parallel(m, P, A->mb_yn, p->mb_out_w, -1, di);
}

void mamba_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *ln1,
		    const float *dout)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, di = gpt_mamba_inner(c), C = gpt_mamba_conv_dim(c), D = gpt_mamba_proj_dim(c);
	int H = c->mamba_H, G = c->mamba_G, GN = G * c->mamba_N;

	linear_bwd(m, s->mb_dy, dout, A->mb_yn, p->mb_out_w, -1, N, di, c->h);
	cols(m, s->mb_z, di, 0, A->mb_zx, D, 0, di, N);
	k->gated_rmsnorm_backward(s->mb_dy, s->mb_dz, gpt_grad(m, p->mb_norm_w), s->mb_dy, A->mb_y, s->mb_z,
				  gpt_param(m, p->mb_norm_w, GPT_VIEW_B), A->mb_rstd, N, di, G);
	scan_inputs(m, A, N);
	k->ssd_scan_backward(s->mb_dx, s->mb_ddt, gpt_grad(m, p->mb_dt_bias), gpt_grad(m, p->mb_A_log), s->mb_dB,
			     s->mb_dC, gpt_grad(m, p->mb_D), NULL, s->mb_dy, NULL, s->mb_x, s->mb_dt,
			     gpt_param(m, p->mb_dt_bias, GPT_VIEW_B), gpt_param(m, p->mb_A_log, GPT_VIEW_B), s->mb_B,
			     s->mb_C, gpt_param(m, p->mb_D, GPT_VIEW_B), NULL, P->B, P->T, H, c->mamba_P, G, c->mamba_N,
			     c->mamba_chunk);
	cols(m, s->mb_dxbc, C, 0, s->mb_dx, di, 0, di, N);
	cols(m, s->mb_dxbc, C, di, s->mb_dB, GN, 0, GN, N);
	cols(m, s->mb_dxbc, C, di + GN, s->mb_dC, GN, 0, GN, N);
	cols(m, s->mb_xin, C, 0, A->mb_zx, D, di, C, N);
	k->ssm_conv_backward(s->mb_dxin, gpt_grad(m, p->mb_conv_w), gpt_grad(m, p->mb_conv_b), s->mb_dxbc, s->mb_xin,
			     NULL, gpt_param(m, p->mb_conv_w, GPT_VIEW_W), gpt_param(m, p->mb_conv_b, GPT_VIEW_B), P->B,
			     P->T, C, c->mamba_W);
	cols(m, s->mb_dzx, D, 0, s->mb_dz, di, 0, di, N);
	cols(m, s->mb_dzx, D, di, s->mb_dxin, C, 0, C, N);
	cols(m, s->mb_dzx, D, di + C, s->mb_ddt, H, 0, H, N);
	linear_bwd(m, s->dln, s->mb_dzx, ln1, p->mb_in_w, -1, N, c->h, D);
}

/*
 * Serving (docs/mamba.md, "Serving"): the layer's cache in each request
 * slot is its recurrent state, the last W-1 inputs of the convolution
 * ([W-1, C]) and the scan's state ([H, P, N]), this rank's channels and
 * heads. A step's rows are several sequences one after the other; each
 * sequence's new rows are one chunk of its stream: the convolution runs
 * with the slot's inputs in front of them and the scan from the slot's
 * state, and both are advanced to the chunk's end. A sequence at position
 * 0 starts from zeros (its slot restarted). The rest of the layer, in_proj,
 * the gated norm and out_proj, runs on all the step's rows at once, as
 * mamba_forward does.
 */
void mamba_alloc_serving(struct gpt_model *m, struct gpt_layer_acts *A)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_scratch *s = &m->s;
	size_t T = (size_t)c->S, di = (size_t)gpt_mamba_inner(c), C = (size_t)gpt_mamba_conv_dim(c);
	size_t H = (size_t)c->mamba_H, GN = (size_t)c->mamba_G * c->mamba_N;
	A->mb_zx = gpt_take(m, T * (size_t)gpt_mamba_proj_dim(c));
	A->mb_xbc = gpt_take(m, T * C);
	A->mb_y = gpt_take(m, T * di);
	A->mb_yn = gpt_take(m, T * di);
	A->mb_rstd = gpt_take(m, T * (size_t)c->mamba_G);
	s->mb_xin = gpt_take(m, (T + (size_t)c->mamba_W - 1) * C); /* one sequence's inputs behind its W-1 before */
	s->mb_z = gpt_take(m, T * di);
	s->mb_x = gpt_take(m, T * di);
	s->mb_dt = gpt_take(m, T * H);
	s->mb_B = gpt_take(m, T * GN);
	s->mb_C = gpt_take(m, T * GN);
}

const float *mamba_cached_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
				  const float *ln1)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	const struct gpt_kv_step *st = P->kv;
	const struct gpt_kv_cache *kv = m->kv;
	struct gpt_scratch *s = &m->s;
	int N = P->N, di = gpt_mamba_inner(c), C = gpt_mamba_conv_dim(c), D = gpt_mamba_proj_dim(c);
	int H = c->mamba_H, G = c->mamba_G, GN = G * c->mamba_N, W = c->mamba_W;
	size_t hist = (size_t)(W - 1) * C, state = (size_t)H * c->mamba_P * c->mamba_N;
	const float *cw = gpt_param(m, p->mb_conv_w, GPT_VIEW_W), *cb = gpt_param(m, p->mb_conv_b, GPT_VIEW_B);
	linear_fwd(m, A->mb_zx, ln1, p->mb_in_w, -1, N, c->h, D);
	for (int q = 0, r0 = 0; q < st->nseq; r0 += st->n[q], q++) {
		size_t at = (size_t)st->slot[q] * kv->nmamba + kv->layer[l];
		float *conv = kv->conv + at * hist, *xe = s->mb_xin, *x = xe + hist;
		int n = st->n[q];
		if (st->pos[q] == 0)
			k->zero(xe, hist);
		else
			k->copy(xe, conv, hist * sizeof(float));
		cols(m, x, C, 0, A->mb_zx + (size_t)r0 * D, D, di, C, n);
		k->ssm_conv_forward(A->mb_xbc + (size_t)r0 * C, x, xe, cw, cb, 1, n, C, W);
		k->copy(conv, xe + (size_t)n * C, hist * sizeof(float)); /* the last W-1 of hist ++ x */
	}
	scan_inputs(m, A, N);
	for (int q = 0, r0 = 0; q < st->nseq; r0 += st->n[q], q++) {
		float *ssm = kv->ssm + ((size_t)st->slot[q] * kv->nmamba + kv->layer[l]) * state;
		k->ssd_scan_forward(A->mb_y + (size_t)r0 * di, ssm, s->mb_x + (size_t)r0 * di, s->mb_dt + (size_t)r0 * H,
				    gpt_param(m, p->mb_dt_bias, GPT_VIEW_B), gpt_param(m, p->mb_A_log, GPT_VIEW_B),
				    s->mb_B + (size_t)r0 * GN, s->mb_C + (size_t)r0 * GN, gpt_param(m, p->mb_D, GPT_VIEW_B),
				    st->pos[q] == 0 ? NULL : ssm, 1, st->n[q], H, c->mamba_P, G, c->mamba_N, c->mamba_chunk);
	}
	cols(m, s->mb_z, di, 0, A->mb_zx, D, 0, di, N);
	k->gated_rmsnorm_forward(A->mb_yn, A->mb_rstd, A->mb_y, s->mb_z, gpt_param(m, p->mb_norm_w, GPT_VIEW_B), N, di,
				 G, 1e-5f);
	return row_parallel(m, P, A->mb_yn, p->mb_out_w, -1, di);
}
