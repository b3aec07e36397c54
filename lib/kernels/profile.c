/*
 * profile.c - the op-by-op profile of profile.h: a wrapper per op of struct
 * kops that waits for the device, calls the wrapped op, waits again and adds
 * the time, with the op's flops or fewest bytes, to the op's row.
 */
#include "kernels/profile.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"

enum {
	P_ZERO, P_COPY, P_TO_HOST, P_TO_DEVICE,
	P_LINEAR_F, P_LINEAR_B, P_EMB_F, P_EMB_B, P_LN_F, P_LN_B, P_RMS_F, P_RMS_B,
	P_GELU_F, P_GELU_B, P_SWIGLU_F, P_SWIGLU_B, P_QKV_F, P_QKV_B, P_ATTN_F, P_ATTN_B,
	P_DROP_F, P_DROP_B, P_XENT_F, P_XENT_B, P_ADD, P_SCALE, P_SUMSQ, P_NONFINITE, P_ROUND, P_NARROW, P_WIDEN,
	P_ADAMW, P_MOE_F, P_MOE_B, P_SUMSQ_SEGS, P_ADAMW_SEGS, P_ADAMW_SEGS_LP, P_FP8_AMAX, P_FP8_QUANT, P_FP8_GEMM,
	P_FP8_TRANSPOSE, P_FP8_AMAX_BLOCKS, P_FP8_QUANT_BLOCKS, P_ABLK_F, P_ABLK_B, P_CONV_F, P_CONV_B, P_SCAN_F,
	P_SCAN_B, P_GNORM_F, P_GNORM_B, P_NOPS
};

static const char *const prof_names[P_NOPS] = {
	"zero", "copy", "to_host", "to_device",
	"linear_forward", "linear_backward", "embedding_forward", "embedding_backward",
	"layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward",
	"gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward",
	"qkv_split_forward", "qkv_split_backward", "attention_forward", "attention_backward",
	"dropout_add_forward", "dropout_backward", "xent_forward", "xent_backward",
	"add", "scale", "sumsq", "nonfinite", "round", "narrow", "widen",
	"adamw", "moe_combine_forward", "moe_combine_backward", "sumsq_segs", "adamw_segs", "adamw_segs_lp",
	"fp8_amax", "fp8_quantize", "fp8_gemm", "fp8_transpose", "fp8_amax_blocks", "fp8_quantize_blocks",
	"attention_block_forward", "attention_block_backward", "ssm_conv_forward", "ssm_conv_backward",
	"ssd_scan_forward", "ssd_scan_backward", "gated_rmsnorm_forward", "gated_rmsnorm_backward",
};

struct prof_row {
	long calls;
	double secs, flops, bytes;
};

/* The one profile (profile.h: the wrappers are plain function pointers). */
static struct {
	const struct kops *base;
	struct kops table;
	void *word; /* 4 bytes of the wrapped backend's memory: reading them back waits for the device */
	struct prof_row row[P_NOPS];
} P;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void wait_device(void)
{
	int x;
	P.base->to_host(&x, P.word, sizeof x);
}

static double prof_begin(void)
{
	wait_device();
	return now();
}

static void prof_end(int op, double t0, double flops, double bytes)
{
	wait_device();
	struct prof_row *r = &P.row[op];
	r->secs += now() - t0;
	r->calls++;
	r->flops += flops;
	r->bytes += bytes;
}

#define F4 4.0 /* bytes per fp32 value */

/* ---- the wrappers: call, time, count ---- */

static void w_zero(float *x, size_t n)
{
	double t = prof_begin();
	P.base->zero(x, n);
	prof_end(P_ZERO, t, 0, F4 * (double)n);
}

static void w_copy(void *dst, const void *src, size_t bytes)
{
	double t = prof_begin();
	P.base->copy(dst, src, bytes);
	prof_end(P_COPY, t, 0, 2.0 * (double)bytes);
}

static void w_copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
	double t = prof_begin();
	P.base->copy_rows(dst, dpitch, src, spitch, width, rows);
	prof_end(P_COPY, t, 0, 2.0 * (double)(width * rows));
}

static void w_to_host(void *dst, const void *src, size_t bytes)
{
	double t = prof_begin();
	P.base->to_host(dst, src, bytes);
	prof_end(P_TO_HOST, t, 0, (double)bytes);
}

static void w_to_device(void *dst, const void *src, size_t bytes)
{
	double t = prof_begin();
	P.base->to_device(dst, src, bytes);
	prof_end(P_TO_DEVICE, t, 0, (double)bytes);
}

static void w_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int IC,
			     int OC)
{
	double t = prof_begin();
	P.base->linear_forward(out, inp, weight, bias, N, IC, OC);
	prof_end(P_LINEAR_F, t, 2.0 * N * IC * OC, 0);
}

static void w_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
			      const float *weight, int N, int IC, int OC)
{
	double t = prof_begin();
	P.base->linear_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
	prof_end(P_LINEAR_B, t, (dinp ? 4.0 : 2.0) * N * IC * OC, 0);
}

static void w_embedding_forward(float *out, const int32_t *tokens, const int32_t *positions, const float *wte,
				const float *wpe, int N, int C)
{
	double t = prof_begin();
	P.base->embedding_forward(out, tokens, positions, wte, wpe, N, C);
	prof_end(P_EMB_F, t, 0, F4 * N * C * (wpe ? 3 : 2));
}

/* the 16-bit-weight twins count into the rows of the fp32 ops */
static void w_linear_forward_w16(float *out, const float *inp, const uint16_t *weight, const float *bias, int N,
				 int IC, int OC, enum kops_round kind)
{
	double t = prof_begin();
	P.base->linear_forward_w16(out, inp, weight, bias, N, IC, OC, kind);
	prof_end(P_LINEAR_F, t, 2.0 * N * IC * OC, 0);
}

static void w_linear_backward_w16(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
				  const uint16_t *weight, int N, int IC, int OC, enum kops_round kind)
{
	double t = prof_begin();
	P.base->linear_backward_w16(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, kind);
	prof_end(P_LINEAR_B, t, (dinp ? 4.0 : 2.0) * N * IC * OC, 0);
}

static void w_embedding_forward_w16(float *out, const int32_t *tokens, const int32_t *positions,
				    const uint16_t *wte, const float *wpe, int N, int C, enum kops_round kind)
{
	double t = prof_begin();
	P.base->embedding_forward_w16(out, tokens, positions, wte, wpe, N, C, kind);
	prof_end(P_EMB_F, t, 0, F4 * N * C * (wpe ? 3 : 2) - 2.0 * N * C);
}

static void w_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
				 const int32_t *positions, int N, int C)
{
	double t = prof_begin();
	P.base->embedding_backward(dwte, dwpe, dout, tokens, positions, N, C);
	prof_end(P_EMB_B, t, 0, F4 * N * C * (dwpe ? 5 : 3));
}

static void w_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
				const float *b, int N, int C, float eps)
{
	double t = prof_begin();
	P.base->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
	prof_end(P_LN_F, t, 0, F4 * 2 * N * C);
}

static void w_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
				 const float *w, const float *mean, const float *rstd, int N, int C)
{
	double t = prof_begin();
	P.base->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
	prof_end(P_LN_B, t, 0, F4 * 3 * N * C);
}

static void w_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
	double t = prof_begin();
	P.base->rmsnorm_forward(out, rstd, inp, w, N, C, eps);
	prof_end(P_RMS_F, t, 0, F4 * 2 * N * C);
}

static void w_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
			       const float *rstd, int N, int C)
{
	double t = prof_begin();
	P.base->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
	prof_end(P_RMS_B, t, 0, F4 * 3 * N * C);
}

static void w_gelu_forward(float *out, const float *inp, size_t n, enum kops_gelu kind)
{
	double t = prof_begin();
	P.base->gelu_forward(out, inp, n, kind);
	prof_end(P_GELU_F, t, 0, F4 * 2 * (double)n);
}

static void w_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, enum kops_gelu kind)
{
	double t = prof_begin();
	P.base->gelu_backward(dinp, dout, inp, n, kind);
	prof_end(P_GELU_B, t, 0, F4 * 3 * (double)n);
}

static void w_swiglu_forward(float *out, const float *inp, int N, int F)
{
	double t = prof_begin();
	P.base->swiglu_forward(out, inp, N, F);
	prof_end(P_SWIGLU_F, t, 0, F4 * 3 * N * F);
}

static void w_swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F)
{
	double t = prof_begin();
	P.base->swiglu_backward(dinp, dout, inp, N, F);
	prof_end(P_SWIGLU_B, t, 0, F4 * 5 * N * F);
}

static void w_qkv_split_forward(float *q, float *kk, float *v, const float *qkv, const float *cos, const float *sin,
				int B, int T, int a, int g, int k, int rot, bool interleaved)
{
	double t = prof_begin();
	P.base->qkv_split_forward(q, kk, v, qkv, cos, sin, B, T, a, g, k, rot, interleaved);
	prof_end(P_QKV_F, t, 0, F4 * 2 * B * T * (double)(a + 2 * g) * k);
}

static void w_qkv_split_backward(float *dqkv, const float *dq, const float *dk, const float *dv, const float *cos,
				 const float *sin, int B, int T, int a, int g, int k, int rot, bool interleaved)
{
	double t = prof_begin();
	P.base->qkv_split_backward(dqkv, dq, dk, dv, cos, sin, B, T, a, g, k, rot, interleaved);
	prof_end(P_QKV_B, t, 0, F4 * 2 * B * T * (double)(a + 2 * g) * k);
}

/* Q K^T and P V over the causal half: the usual count (attn_bench's) */
static double attn_flops(int B, int a, int Tq, int Tk, int k)
{
	return 4.0 * B * a * (double)Tq * Tk * k * (Tq == Tk ? 0.5 : 1.0);
}

static void w_attention_forward(float *out, float *probs, const float *q, const float *kk, const float *v,
				const int32_t *doc, int B, int T, int a, int g, int k, float scale, int window,
				float dropout_p, uint64_t seed, uint64_t offset)
{
	double t = prof_begin();
	P.base->attention_forward(out, probs, q, kk, v, doc, B, T, a, g, k, scale, window, dropout_p, seed, offset);
	prof_end(P_ATTN_F, t, attn_flops(B, a, T, T, k), 0);
}

static void w_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
				 const float *kk, const float *v, const float *probs, int B, int T, int a, int g, int k,
				 float scale, float dropout_p, uint64_t seed, uint64_t offset)
{
	double t = prof_begin();
	P.base->attention_backward(dq, dk, dv, dout, q, kk, v, probs, B, T, a, g, k, scale, dropout_p, seed, offset);
	prof_end(P_ATTN_B, t, 2.5 * attn_flops(B, a, T, T, k), 0);
}

static void w_dropout_add_forward(float *out, const float *residual, const float *x, size_t n, float p,
				  uint64_t seed, uint64_t offset)
{
	double t = prof_begin();
	P.base->dropout_add_forward(out, residual, x, n, p, seed, offset);
	prof_end(P_DROP_F, t, 0, F4 * 3 * (double)n);
}

static void w_dropout_backward(float *dx, const float *dout, size_t n, float p, uint64_t seed, uint64_t offset)
{
	double t = prof_begin();
	P.base->dropout_backward(dx, dout, n, p, seed, offset);
	prof_end(P_DROP_B, t, 0, F4 * 2 * (double)n);
}

static void w_xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets, int N, int V)
{
	double t = prof_begin();
	P.base->xent_forward(losses, lse, logits, targets, N, V);
	prof_end(P_XENT_F, t, 0, F4 * (double)N * V);
}

static void w_xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
			    const float *dloss, int N, int V)
{
	double t = prof_begin();
	P.base->xent_backward(dlogits, logits, lse, targets, dloss, N, V);
	prof_end(P_XENT_B, t, 0, F4 * 2 * (double)N * V);
}

static void w_add(float *out, const float *a, const float *b, size_t n)
{
	double t = prof_begin();
	P.base->add(out, a, b, n);
	prof_end(P_ADD, t, 0, F4 * 3 * (double)n);
}

static void w_scale(float *x, float s, size_t n)
{
	double t = prof_begin();
	P.base->scale(x, s, n);
	prof_end(P_SCALE, t, 0, F4 * 2 * (double)n);
}

static double w_sumsq(const float *x, size_t n)
{
	double t = prof_begin();
	double r = P.base->sumsq(x, n);
	prof_end(P_SUMSQ, t, 0, F4 * (double)n);
	return r;
}

static int w_nonfinite(const float *x, size_t n)
{
	double t = prof_begin();
	int r = P.base->nonfinite(x, n);
	prof_end(P_NONFINITE, t, 0, F4 * (double)n);
	return r;
}

static void w_round(float *out, const float *x, size_t n, enum kops_round kind)
{
	double t = prof_begin();
	P.base->round(out, x, n, kind);
	prof_end(P_ROUND, t, 0, F4 * 2 * (double)n);
}

static void w_narrow(uint16_t *out, const float *x, size_t n, enum kops_round kind)
{
	double t = prof_begin();
	P.base->narrow(out, x, n, kind);
	prof_end(P_NARROW, t, 0, 6.0 * (double)n);
}

static void w_widen(float *out, const uint16_t *x, size_t n, enum kops_round kind)
{
	double t = prof_begin();
	P.base->widen(out, x, n, kind);
	prof_end(P_WIDEN, t, 0, 6.0 * (double)n);
}

static void w_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
		    float wd, int step)
{
	double t = prof_begin();
	P.base->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, step);
	prof_end(P_ADAMW, t, 0, F4 * 7 * (double)n);
}

static void w_moe_combine_forward(float *out, const float *y, const float *w, const int32_t *rowptr,
				  const int32_t *rows, int N, int C)
{
	double t = prof_begin();
	P.base->moe_combine_forward(out, y, w, rowptr, rows, N, C);
	prof_end(P_MOE_F, t, 0, 0);
}

static void w_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
				   const int32_t *tok, int R, int C)
{
	double t = prof_begin();
	P.base->moe_combine_backward(dy, dw, dout, y, w, tok, R, C);
	prof_end(P_MOE_B, t, 0, 0);
}

static double seg_elems(const struct kops_seg *segs, int nsegs)
{
	double n = 0;
	for (int i = 0; i < nsegs; i++)
		n += (double)segs[i].n;
	return n;
}

static double w_sumsq_segs(const float *x, const struct kops_seg *segs, int nsegs)
{
	double t = prof_begin();
	double r = P.base->sumsq_segs(x, segs, nsegs);
	prof_end(P_SUMSQ_SEGS, t, 0, F4 * seg_elems(segs, nsegs));
	return r;
}

static void w_adamw_segs(float *p, const float *g, float *m, float *v, size_t mv_base, const struct kops_seg *segs,
			 int nsegs, float lr, float b1, float b2, float eps, float wd, int step)
{
	double t = prof_begin();
	P.base->adamw_segs(p, g, m, v, mv_base, segs, nsegs, lr, b1, b2, eps, wd, step);
	prof_end(P_ADAMW_SEGS, t, 0, F4 * 7 * seg_elems(segs, nsegs));
}

/* the bytes of one element of a state in its format */
static double lp_bytes(enum kops_dtype t)
{
	return t == KOPS_F32 ? 4.0 : 2.0;
}

static void w_adamw_segs_lp(const struct kops_adamw_lp *s, const float *g, size_t mv_base, const struct kops_seg *segs,
			    int nsegs, float lr, float b1, float b2, float eps, float wd, int step)
{
	double t = prof_begin();
	P.base->adamw_segs_lp(s, g, mv_base, segs, nsegs, lr, b1, b2, eps, wd, step);
	/* the gradient read, each state read and written, the model's weight written */
	double per = F4 + 2 * (lp_bytes(s->p_type) + lp_bytes(s->m_type) + lp_bytes(s->v_type)) + (s->w16 ? 2.0 : 0.0);
	prof_end(P_ADAMW_SEGS_LP, t, 0, per * seg_elems(segs, nsegs));
}

static void w_fp8_amax(float *amax, const float *x, size_t n)
{
	double t = prof_begin();
	P.base->fp8_amax(amax, x, n);
	prof_end(P_FP8_AMAX, t, 0, F4 * (double)n);
}

static void w_fp8_quantize(const struct kops_fp8_tensor *q, const float *x, const struct kops_fp8_quant *how,
			   float *amax)
{
	double t = prof_begin();
	P.base->fp8_quantize(q, x, how, amax);
	/* each value read in fp32 and written as one byte */
	prof_end(P_FP8_QUANT, t, 0, (F4 + 1.0) * q->rows * q->cols);
}

static void w_fp8_gemm(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b,
		       const float *bias, bool accumulate)
{
	double t = prof_begin();
	P.base->fp8_gemm(out, a, b, bias, accumulate);
	prof_end(P_FP8_GEMM, t, 2.0 * a->rows * b->rows * a->cols, 0);
}

static void w_fp8_transpose(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src)
{
	double t = prof_begin();
	P.base->fp8_transpose(dst, src);
	/* each code read and written, each scale read and written */
	const double nb = (double)((src->rows + src->br - 1) / src->br) * ((src->cols + src->bc - 1) / src->bc);
	prof_end(P_FP8_TRANSPOSE, t, 0, 2.0 * src->rows * src->cols + 2 * F4 * nb);
}

/* the number of blocks of t's scale grid */
static double fp8_nblocks(const struct kops_fp8_tensor *t)
{
	return (double)((t->rows + t->br - 1) / t->br) * ((t->cols + t->bc - 1) / t->bc);
}

static void w_fp8_amax_blocks(float *amax, const float *x, size_t n, size_t start, const struct kops_fp8_tensor *q)
{
	double t = prof_begin();
	P.base->fp8_amax_blocks(amax, x, n, start, q);
	/* each value read; each block amax read and written at most once */
	prof_end(P_FP8_AMAX_BLOCKS, t, 0, F4 * (double)n);
}

static void w_fp8_quantize_blocks(const struct kops_fp8_tensor *q, const float *x, size_t n, size_t start,
				  const float *amax, bool pow2)
{
	double t = prof_begin();
	P.base->fp8_quantize_blocks(q, x, n, start, amax, pow2);
	/* each value read in fp32 and written as one byte; each block's amax read and sinv written */
	prof_end(P_FP8_QUANT_BLOCKS, t, 0, (F4 + 1.0) * (double)n + 2 * F4 * fp8_nblocks(q));
}

static void w_attention_block_forward(float *out, float *lse, const float *q, const float *kk, const float *v,
				      const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,
				      int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,
				      uint64_t seed, uint64_t offset, int accumulate)
{
	double t = prof_begin();
	P.base->attention_block_forward(out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S, scale, window,
					dropout_p, seed, offset, accumulate);
	prof_end(P_ABLK_F, t, attn_flops(B, a, Tq, Tk, k), 0);
}

static void w_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
				       const float *lse, const float *q, const float *kk, const float *v,
				       const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,
				       int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,
				       uint64_t seed, uint64_t offset)
{
	double t = prof_begin();
	P.base->attention_block_backward(dq, dk, dv, dout, out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S,
					 scale, window, dropout_p, seed, offset);
	prof_end(P_ABLK_B, t, 2.5 * attn_flops(B, a, Tq, Tk, k), 0);
}

/* The Mamba-2 ops. The convolution: 2 flops per tap and value; the scan:
 * 5 flops per state element and step forward (the update, and y's dot
 * product), 16 backward (the forward twice more, then the adjoint sweep);
 * the norm by its bytes. */
static void w_ssm_conv_forward(float *out, const float *x, const float *hist, const float *w, const float *bias,
			       int B, int T, int C, int W)
{
	double t = prof_begin();
	P.base->ssm_conv_forward(out, x, hist, w, bias, B, T, C, W);
	prof_end(P_CONV_F, t, 2.0 * B * T * C * W, 0);
}

static void w_ssm_conv_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x,
				const float *hist, const float *w, const float *bias, int B, int T, int C, int W)
{
	double t = prof_begin();
	P.base->ssm_conv_backward(dx, dw, dbias, dout, x, hist, w, bias, B, T, C, W);
	prof_end(P_CONV_B, t, 6.0 * B * T * C * W, 0);
}

static void w_ssd_scan_forward(float *y, float *state_out, const float *x, const float *dt, const float *dt_bias,
			       const float *A_log, const float *Bm, const float *Cm, const float *D,
			       const float *state_in, int B, int T, int H, int P_, int G, int N, int chunk)
{
	double t = prof_begin();
	P.base->ssd_scan_forward(y, state_out, x, dt, dt_bias, A_log, Bm, Cm, D, state_in, B, T, H, P_, G, N, chunk);
	prof_end(P_SCAN_F, t, 5.0 * B * T * H * P_ * N, 0);
}

static void w_ssd_scan_backward(float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
				float *dD, float *dstate_in, const float *dy, const float *dstate_out, const float *x,
				const float *dt, const float *dt_bias, const float *A_log, const float *Bm,
				const float *Cm, const float *D, const float *state_in, int B, int T, int H, int P_,
				int G, int N, int chunk)
{
	double t = prof_begin();
	P.base->ssd_scan_backward(dx, ddt, ddt_bias, dA_log, dBm, dCm, dD, dstate_in, dy, dstate_out, x, dt, dt_bias,
				  A_log, Bm, Cm, D, state_in, B, T, H, P_, G, N, chunk);
	prof_end(P_SCAN_B, t, 16.0 * B * T * H * P_ * N, 0);
}

static void w_gated_rmsnorm_forward(float *out, float *rstd, const float *y, const float *z, const float *w, int N,
				    int C, int ngroups, float eps)
{
	double t = prof_begin();
	P.base->gated_rmsnorm_forward(out, rstd, y, z, w, N, C, ngroups, eps);
	prof_end(P_GNORM_F, t, 0, F4 * (z ? 3 : 2) * N * C);
}

static void w_gated_rmsnorm_backward(float *dy, float *dz, float *dw, const float *dout, const float *y,
				     const float *z, const float *w, const float *rstd, int N, int C, int ngroups)
{
	double t = prof_begin();
	P.base->gated_rmsnorm_backward(dy, dz, dw, dout, y, z, w, rstd, N, C, ngroups);
	prof_end(P_GNORM_B, t, 0, F4 * (z ? 5 : 3) * N * C);
}

/* ---- the table ---- */

/* the wrapper of each op (the base has them all: kops_check; the optional
 * ones are wrapped where the base has them, and stay NULL where not) */
#define WRAP(op, fn) P.table.op = fn
#define WRAP_OPT(op, fn) P.table.op = P.base->op ? fn : NULL

const struct kops *kops_profile_wrap(const struct kops *base)
{
	if (P.base)
		return &P.table;
	kops_check(base);
	P.base = base;
	P.table = *base; /* the memory management passes through */
	P.word = base->alloc(16);
	WRAP(zero, w_zero);
	WRAP(copy, w_copy);
	WRAP(copy_rows, w_copy_rows);
	WRAP(to_host, w_to_host);
	WRAP(to_device, w_to_device);
	WRAP(linear_forward, w_linear_forward);
	WRAP(linear_backward, w_linear_backward);
	WRAP(embedding_forward, w_embedding_forward);
	WRAP(embedding_backward, w_embedding_backward);
	WRAP(linear_forward_w16, w_linear_forward_w16);
	WRAP(linear_backward_w16, w_linear_backward_w16);
	WRAP(embedding_forward_w16, w_embedding_forward_w16);
	WRAP(layernorm_forward, w_layernorm_forward);
	WRAP(layernorm_backward, w_layernorm_backward);
	WRAP(rmsnorm_forward, w_rmsnorm_forward);
	WRAP(rmsnorm_backward, w_rmsnorm_backward);
	WRAP(gelu_forward, w_gelu_forward);
	WRAP(gelu_backward, w_gelu_backward);
	WRAP(swiglu_forward, w_swiglu_forward);
	WRAP(swiglu_backward, w_swiglu_backward);
	WRAP(qkv_split_forward, w_qkv_split_forward);
	WRAP(qkv_split_backward, w_qkv_split_backward);
	WRAP(attention_forward, w_attention_forward);
	WRAP(attention_backward, w_attention_backward);
	WRAP(dropout_add_forward, w_dropout_add_forward);
	WRAP(dropout_backward, w_dropout_backward);
	WRAP(xent_forward, w_xent_forward);
	WRAP(xent_backward, w_xent_backward);
	WRAP(add, w_add);
	WRAP(scale, w_scale);
	WRAP(sumsq, w_sumsq);
	WRAP(nonfinite, w_nonfinite);
	WRAP(round, w_round);
	WRAP(narrow, w_narrow);
	WRAP(widen, w_widen);
	WRAP(adamw, w_adamw);
	WRAP(moe_combine_forward, w_moe_combine_forward);
	WRAP(moe_combine_backward, w_moe_combine_backward);
	WRAP(sumsq_segs, w_sumsq_segs);
	WRAP(adamw_segs, w_adamw_segs);
	WRAP(adamw_segs_lp, w_adamw_segs_lp);
	WRAP(fp8_amax, w_fp8_amax);
	WRAP(fp8_quantize, w_fp8_quantize);
	WRAP(fp8_gemm, w_fp8_gemm);
	WRAP(fp8_transpose, w_fp8_transpose);
	WRAP(fp8_amax_blocks, w_fp8_amax_blocks);
	WRAP(fp8_quantize_blocks, w_fp8_quantize_blocks);
	WRAP(attention_block_forward, w_attention_block_forward);
	WRAP(attention_block_backward, w_attention_block_backward);
	WRAP_OPT(ssm_conv_forward, w_ssm_conv_forward);
	WRAP_OPT(ssm_conv_backward, w_ssm_conv_backward);
	WRAP_OPT(ssd_scan_forward, w_ssd_scan_forward);
	WRAP_OPT(ssd_scan_backward, w_ssd_scan_backward);
	WRAP_OPT(gated_rmsnorm_forward, w_gated_rmsnorm_forward);
	WRAP_OPT(gated_rmsnorm_backward, w_gated_rmsnorm_backward);
	return &P.table;
}

int kops_profile_active(void)
{
	return P.base != NULL;
}

void kops_profile_reset(void)
{
	memset(P.row, 0, sizeof(P.row));
}

void kops_profile_report(FILE *f, int64_t iterations, int rank)
{
	if (!P.base)
		return;
	double total = 0;
	for (int i = 0; i < P_NOPS; i++)
		total += P.row[i].secs;
	const double it = iterations > 0 ? (double)iterations : 1.0;
	fprintf(f, "op profile of rank %d (%s table, MEGAC_PROFILE_OPS; each op timed alone, the device waited "
		   "for before and after), per iteration over %lld iterations:\n",
		rank, P.base->name, (long long)iterations);
	fprintf(f, "  %-26s %8s %10s %6s %9s %8s\n", "op", "calls", "ms", "%", "TFLOP/s", "GB/s");
	/* largest first: a selection over the few rows */
	bool shown[P_NOPS] = { false };
	for (;;) {
		int best = -1;
		for (int i = 0; i < P_NOPS; i++)
			if (!shown[i] && P.row[i].calls && (best < 0 || P.row[i].secs > P.row[best].secs))
				best = i;
		if (best < 0)
			break;
		shown[best] = true;
		const struct prof_row *r = &P.row[best];
		char tf[16] = "-", gb[16] = "-";
		if (r->flops > 0 && r->secs > 0)
			snprintf(tf, sizeof tf, "%.1f", r->flops / r->secs / 1e12);
		if (r->bytes > 0 && r->secs > 0)
			snprintf(gb, sizeof gb, "%.0f", r->bytes / r->secs / 1e9);
		fprintf(f, "  %-26s %8.4g %10.3f %6.1f %9s %8s\n", prof_names[best], (double)r->calls / it,
			1e3 * r->secs / it, total > 0 ? 100 * r->secs / total : 0.0, tf, gb);
	}
	fprintf(f, "  %-26s %8s %10.3f %6.1f\n", "all ops", "", 1e3 * total / it, 100.0);
}
