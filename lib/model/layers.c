/*
 * layers.c - the building blocks every module of the model uses (Megatron
 * Core's tensor_parallel/layers.py and the fused norms): registering a
 * parameter with its properties, linear layers, norms, activations, and the
 * rounding that keeps bf16/fp16 runs honest.
 *
 * Parameter properties are declared where a parameter is registered, never
 * inferred from its name: a norm's weight and bias are replicated and, under
 * sequence parallelism, see only this rank's sequence shard, so they carry
 * PARAM_SP and their gradients are summed over TP (gpt_sp_sync_grads);
 * biases and norms carry PARAM_NO_WD (Megatron's rule: biases and 1-D
 * tensors get no weight decay).
 */
#include "model/gpt_int.h"

int reg_weight(struct gpt_model *m, const char *name, int64_t rows, int64_t cols, int tp_axis, float std,
	       unsigned flags)
{
	int64_t shape[2] = { rows, cols };
	return params_add(&m->reg, name, 2, shape, tp_axis, m->par.tp_size, m->par.tp_rank, flags, PARAM_INIT_NORMAL,
			  std);
}

int reg_bias(struct gpt_model *m, const char *name, int64_t n, int tp_axis, unsigned flags)
{
	int64_t shape[1] = { n };
	return params_add(&m->reg, name, 1, shape, tp_axis, m->par.tp_size, m->par.tp_rank, flags | PARAM_NO_WD,
			  PARAM_INIT_ZERO, 0);
}

int reg_weight_pieces(struct gpt_model *m, const char *name, int n, const int64_t *rows, int64_t cols, float std,
		      unsigned flags)
{
	int64_t shape[2] = { 0, cols };
	for (int i = 0; i < n; i++)
		shape[0] += rows[i];
	return params_add_pieces(&m->reg, name, 2, shape, 0, n, rows, m->par.tp_size, m->par.tp_rank, flags,
				 PARAM_INIT_NORMAL, std);
}

int reg_bias_pieces(struct gpt_model *m, const char *name, int n, const int64_t *len, unsigned flags)
{
	int64_t shape[1] = { 0 };
	for (int i = 0; i < n; i++)
		shape[0] += len[i];
	return params_add_pieces(&m->reg, name, 1, shape, 0, n, len, m->par.tp_size, m->par.tp_rank,
				 flags | PARAM_NO_WD, PARAM_INIT_ZERO, 0);
}

int reg_norm(struct gpt_model *m, const char *name, const struct transformer_layer_spec *s, bool bias)
{
	int64_t shape[1] = { m->c.h };
	/* weights start at 1, or at 0 when stored zero-centred (--apply-layernorm-1p) */
	enum param_init init = bias || s->norm_1p ? PARAM_INIT_ZERO : PARAM_INIT_ONE;
	unsigned flags = PARAM_NO_WD | (m->par.sp ? PARAM_SP : 0);
	return params_add(&m->reg, name, 1, shape, -1, m->par.tp_size, m->par.tp_rank, flags, init, 0);
}

const float *gpt_param(struct gpt_model *m, int idx, enum gpt_view v)
{
	if (idx < 0)
		return NULL;
	const struct param *p = &m->reg.p[idx];
	if (!m->w16 && m->shards.level < 3)
		return m->reg.data + p->offset;
	if (p->numel > m->view_n[v] || (m->direct16 && v == GPT_VIEW_W))
		BUG("'%s' (%zu values) in view %d of %zu%s", p->name, p->numel, (int)v, m->view_n[v],
		    m->direct16 ? " (the weight matrices go to the *_w16 ops)" : "");
	if (m->shards.level == 3) { /* Megatron-FSDP: the tensor from every rank's shard */
		if (!m->w16) {
			m->shards.gather(m->shards.ctx, idx, m->view[v]);
			return m->view[v];
		}
		m->shards.gather(m->shards.ctx, idx, m->gather16);
		m->k->widen(m->view[v], m->gather16, p->numel, gpt_half_kind(m));
		return m->view[v];
	}
	/* the CPU backend converts at the kernel's edge; the cost is one pass
	 * over the weight, against the N passes of its GEMM */
	m->k->widen(m->view[v], gpt_words(m, idx), p->numel, gpt_half_kind(m));
	return m->view[v];
}

uint16_t *gpt_words(struct gpt_model *m, int idx)
{
	if (!m->soff)
		return m->w16 + m->reg.p[idx].offset;
	if (gpt_fp8_stored(m, idx))
		BUG("'%s' is kept as FP8 codes, not 16-bit words", m->reg.p[idx].name);
	return (uint16_t *)((uint8_t *)m->w16 + m->soff[idx]);
}

const uint16_t *gpt_param16(struct gpt_model *m, int idx)
{
	if (!m->direct16)
		BUG("gpt_param16 on a model without direct16");
	if (m->shards.level == 3) {
		m->shards.gather(m->shards.ctx, idx, m->gather16);
		return m->gather16;
	}
	return gpt_words(m, idx);
}

float *gpt_grad(struct gpt_model *m, int idx)
{
	if (idx >= 0 && m->shards.level >= 2)
		return gpt_unit_grad(m, idx);
	return idx < 0 || !m->reg.grad ? NULL : m->reg.grad + m->reg.p[idx].offset;
}

/* Half precision: what a bf16/fp16 GEMM hands the next op is rounded. */
void round_half(struct gpt_model *m, float *x, size_t n)
{
	if (m->precision != GPT_FP32)
		m->k->round(x, x, n, m->precision == GPT_BF16 ? KOPS_ROUND_BF16 : KOPS_ROUND_FP16);
}

/* The linear layer without the rounding of its output (the router in
 * fp32, the server's logits). A 16-bit model on a table with w16_direct
 * hands the weight's words as they are; otherwise the weight is widened
 * into the W view. The bias is taken first: at FSDP level 3 both go
 * through the one gather buffer. */
void linear_fwd_raw(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC)
{
	const float *bias = gpt_param(m, b, GPT_VIEW_B);
	if (m->direct16)
		m->k->linear_forward_w16(out, inp, gpt_param16(m, w), bias, N, IC, OC, gpt_half_kind(m));
	else
		m->k->linear_forward(out, inp, gpt_param(m, w, GPT_VIEW_W), bias, N, IC, OC);
}

void linear_fwd(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC)
{
	if (gpt_fp8_slot(m, w) >= 0) {
		fp8_linear_fwd(m, out, inp, w, b, N, IC, OC);
		return;
	}
	linear_fwd_raw(m, out, inp, w, b, N, IC, OC);
	round_half(m, out, (size_t)N * OC);
}

void linear_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b, int N, int IC,
		int OC)
{
	if (gpt_fp8_slot(m, w) >= 0) {
		fp8_linear_bwd(m, dinp, dout, inp, w, b, N, IC, OC);
		return;
	}
	if (m->direct16)
		m->k->linear_backward_w16(dinp, gpt_grad(m, w), gpt_grad(m, b), dout, inp, gpt_param16(m, w), N, IC,
					  OC, gpt_half_kind(m));
	else
		m->k->linear_backward(dinp, gpt_grad(m, w), gpt_grad(m, b), dout, inp, gpt_param(m, w, GPT_VIEW_W),
				      N, IC, OC);
	if (dinp)
		round_half(m, dinp, (size_t)N * IC);
}

const float *gpt_norm_weight(struct gpt_model *m, int w)
{
	if (!m->c.norm_1p)
		return gpt_param(m, w, GPT_VIEW_B);
	m->k->add(m->s.norm_gamma, gpt_param(m, w, GPT_VIEW_B), m->s.norm_ones, (size_t)m->c.h);
	return m->s.norm_gamma;
}

void norm_fwd(struct gpt_model *m, float *out, float *mean, float *rstd, const float *inp, int w, int b, int N)
{
	if (m->c.rmsnorm)
		m->k->rmsnorm_forward(out, rstd, inp, gpt_norm_weight(m, w), N, m->c.h, m->c.eps);
	else
		m->k->layernorm_forward(out, mean, rstd, inp, gpt_norm_weight(m, w), gpt_param(m, b, GPT_VIEW_X), N,
					m->c.h, m->c.eps);
	round_half(m, out, (size_t)N * m->c.h);
}

void norm_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
	      const float *mean, const float *rstd, int N)
{
	if (m->c.rmsnorm)
		m->k->rmsnorm_backward(dinp, gpt_grad(m, w), dout, inp, gpt_norm_weight(m, w), rstd, N, m->c.h);
	else
		m->k->layernorm_backward(dinp, gpt_grad(m, w), gpt_grad(m, b), dout, inp, gpt_norm_weight(m, w), mean,
					 rstd, N, m->c.h);
	round_half(m, dinp, (size_t)N * m->c.h);
}

void act_fwd(struct gpt_model *m, const struct transformer_layer_spec *s, float *act, const float *fc1, int N, int f)
{
	if (s->swiglu)
		m->k->swiglu_forward(act, fc1, N, f);
	else
		m->k->gelu_forward(act, fc1, (size_t)N * f, s->gelu);
	round_half(m, act, (size_t)N * f);
}

void act_bwd(struct gpt_model *m, const struct transformer_layer_spec *s, float *dfc1, const float *dact,
	     const float *fc1, int N, int f)
{
	if (s->swiglu)
		m->k->swiglu_backward(dfc1, dact, fc1, N, f);
	else
		m->k->gelu_backward(dfc1, dact, fc1, (size_t)N * f, s->gelu);
}
