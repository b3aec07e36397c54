/*
 * cpu_nn.c - CPU backend (ops.h) of the per-token layer ops: embedding,
 * LayerNorm, RMSNorm, GELU, SwiGLU, residual dropout and softmax
 * cross-entropy, each forward beside its backward. Rows are independent, so
 * the loops run OpenMP over rows; gradients of parameters (summed over rows)
 * are reduced in an order that does not depend on the thread count (see
 * cpu_reduce_blocks), so results are bit-identical for any OMP_NUM_THREADS.
 */
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parameter grads of the norms are summed over rows in blocks of this many
 * rows (one thread per block, rows in order), then the block sums are added
 * in block order: a fixed tree, whatever the number of threads. */
#define CPU_ROWS 32

/* dst[c] += sum over blocks b of part[b*stride + c], b in order, in double
 * (cpu.h). */
void cpu_reduce_blocks(float *dst, const float *part, int nblk, int C, size_t stride)
{
#pragma omp parallel for if ((size_t)nblk * C >= CPU_PAR_MIN)
	for (int c0 = 0; c0 < C; c0 += CPU_COLS) {
		int nc = C - c0 < CPU_COLS ? C - c0 : CPU_COLS;
		double acc[CPU_COLS] = { 0 };
		for (int b = 0; b < nblk; b++) {
			const float *p = part + (size_t)b * stride + c0;
#pragma omp simd
			for (int j = 0; j < nc; j++)
				acc[j] += p[j];
		}
		for (int j = 0; j < nc; j++)
			dst[c0 + j] += (float)acc[j];
	}
}

/* ---- embedding: out[n] = wte[tokens[n]] (+ wpe[positions[n]]) ---- */

void cpu_embedding_forward(float *out, const int32_t *tokens, const int32_t *positions,
			   const float *wte, const float *wpe, int N, int C)
{
#pragma omp parallel for if ((size_t)N * C >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		float *o = out + (size_t)n * C;
		if (tokens[n] < 0) { /* a token of another vocabulary shard: zero (plus position) */
			if (wpe && positions)
				memcpy(o, wpe + (size_t)positions[n] * C, (size_t)C * sizeof(float));
			else
				memset(o, 0, (size_t)C * sizeof(float));
			continue;
		}
		const float *te = wte + (size_t)tokens[n] * C;
		if (wpe && positions) {
			const float *pe = wpe + (size_t)positions[n] * C;
#pragma omp simd
			for (int c = 0; c < C; c++)
				o[c] = te[c] + pe[c];
		} else {
			memcpy(o, te, (size_t)C * sizeof(float));
		}
	}
}

/* A token (or position) may occur in many rows, so threads own column
 * ranges instead of rows: each grad element is summed in row order by one
 * thread, with no atomics and no dependence on the thread count. */
void cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
			    const int32_t *positions, int N, int C)
{
	int pos = dwpe && positions;
#pragma omp parallel for if ((size_t)N * C >= CPU_PAR_MIN)
	for (int c0 = 0; c0 < C; c0 += CPU_COLS) {
		int nc = C - c0 < CPU_COLS ? C - c0 : CPU_COLS;
		for (int n = 0; n < N; n++) {
			const float *d = dout + (size_t)n * C + c0;
			if (dwte && tokens[n] >= 0) {
				float *te = dwte + (size_t)tokens[n] * C + c0;
#pragma omp simd
				for (int j = 0; j < nc; j++)
					te[j] += d[j];
			}
			if (pos) {
				float *pe = dwpe + (size_t)positions[n] * C + c0;
#pragma omp simd
				for (int j = 0; j < nc; j++)
					pe[j] += d[j];
			}
		}
	}
}

/* ---- LayerNorm: out = (x - mean) * rstd * w + b ---- */

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
			   const float *b, int N, int C, float eps)
{
#pragma omp parallel for if ((size_t)N * C >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		float *o = out + (size_t)n * C;
		double sum = 0.0;
#pragma omp simd reduction(+ : sum)
		for (int c = 0; c < C; c++)
			sum += x[c];
		float m = (float)(sum / C);
		double sq = 0.0; /* two passes: no cancellation in the variance */
#pragma omp simd reduction(+ : sq)
		for (int c = 0; c < C; c++) {
			float d = x[c] - m;
			sq += (double)d * d;
		}
		float s = 1.0f / sqrtf((float)(sq / C) + eps);
		if (b) {
#pragma omp simd
			for (int c = 0; c < C; c++)
				o[c] = (x[c] - m) * s * w[c] + b[c];
		} else {
#pragma omp simd
			for (int c = 0; c < C; c++)
				o[c] = (x[c] - m) * s * w[c];
		}
		mean[n] = m;
		rstd[n] = s;
	}
}

/*
 * With xhat = (x - mean) * rstd and y = xhat * w + b (llm.c's derivation):
 *   dxhat = dout * w
 *   dinp  = rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat))
 *   dw   += sum_n dout * xhat,   db += sum_n dout
 */
void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
			    const float *w, const float *mean, const float *rstd, int N, int C)
{
	int nblk = (N + CPU_ROWS - 1) / CPU_ROWS;
	int want_w = dw != NULL, want_b = db != NULL;
	/* per row block: [dw partial | db partial] */
	float *part = (want_w || want_b) ? xmalloc((size_t)nblk * 2 * C * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
	for (int blk = 0; blk < nblk; blk++) {
		float *pw = part ? part + (size_t)blk * 2 * C : NULL, *pb = pw ? pw + C : NULL;
		if (part)
			memset(pw, 0, 2 * (size_t)C * sizeof(float));
		int n1 = (blk + 1) * CPU_ROWS < N ? (blk + 1) * CPU_ROWS : N;
		for (int n = blk * CPU_ROWS; n < n1; n++) {
			const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
			const float m = mean[n], s = rstd[n];
			if (part) {
#pragma omp simd
				for (int c = 0; c < C; c++) {
					pw[c] += dy[c] * ((x[c] - m) * s);
					pb[c] += dy[c];
				}
			}
			if (!dinp)
				continue;
			float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
			for (int c = 0; c < C; c++) {
				float xhat = (x[c] - m) * s, dxhat = dy[c] * w[c];
				sum_dxhat += dxhat;
				sum_dxhat_xhat += dxhat * xhat;
			}
			const float mean_dxhat = sum_dxhat / C, mean_dxhat_xhat = sum_dxhat_xhat / C;
			float *dx = dinp + (size_t)n * C;
#pragma omp simd
			for (int c = 0; c < C; c++) {
				float xhat = (x[c] - m) * s, dxhat = dy[c] * w[c];
				dx[c] = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
			}
		}
	}
	if (want_w)
		cpu_reduce_blocks(dw, part, nblk, C, 2 * (size_t)C);
	if (want_b)
		cpu_reduce_blocks(db, part + C, nblk, C, 2 * (size_t)C);
	free(part);
}

/* ---- RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ---- */

void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
			 float eps)
{
#pragma omp parallel for if ((size_t)N * C >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		float *o = out + (size_t)n * C;
		double sq = 0.0;
#pragma omp simd reduction(+ : sq)
		for (int c = 0; c < C; c++)
			sq += (double)x[c] * x[c];
		float s = 1.0f / sqrtf((float)(sq / C) + eps);
#pragma omp simd
		for (int c = 0; c < C; c++)
			o[c] = x[c] * s * w[c];
		rstd[n] = s;
	}
}

/*
 * y_c = x_c r w_c with r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / C:
 *   dinp_j = r (dout_j w_j - x_j r^2 mean_c(dout_c w_c x_c))
 *   dw    += sum_n dout * x * r
 */
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
			  const float *w, const float *rstd, int N, int C)
{
	int nblk = (N + CPU_ROWS - 1) / CPU_ROWS;
	float *part = dw ? xmalloc((size_t)nblk * C * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
	for (int blk = 0; blk < nblk; blk++) {
		float *pw = part ? part + (size_t)blk * C : NULL;
		if (pw)
			memset(pw, 0, (size_t)C * sizeof(float));
		int n1 = (blk + 1) * CPU_ROWS < N ? (blk + 1) * CPU_ROWS : N;
		for (int n = blk * CPU_ROWS; n < n1; n++) {
			const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
			const float s = rstd[n];
			if (pw) {
#pragma omp simd
				for (int c = 0; c < C; c++)
					pw[c] += dy[c] * (x[c] * s);
			}
			if (!dinp)
				continue;
			float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
			for (int c = 0; c < C; c++)
				sum += dy[c] * w[c] * x[c];
			const float k = s * s * (sum / C);
			float *dx = dinp + (size_t)n * C;
#pragma omp simd
			for (int c = 0; c < C; c++)
				dx[c] = s * (dy[c] * w[c] - x[c] * k);
		}
	}
	if (dw)
		cpu_reduce_blocks(dw, part, nblk, C, (size_t)C);
	free(part);
}

/* ---- GELU ---- */

#define GELU_S 0.79788456f /* sqrt(2/pi), Megatron's literal (the same fp32 value) */
#define GELU_K 0.044715f

/*
 * The standard normal CDF Phi(x) = 0.5 (1 + erf(x/sqrt2)) = 0.5 erfc(-x/sqrt2)
 * for the exact GELU. glibc's erff is scalar (about 12 ns a call here, six
 * times the rest of the GELU); this is Numerical Recipes' erfcc, a Chebyshev
 * fit with fractional error below 1.2e-7 everywhere, on top of cpu_expf, so
 * the loops vectorise. The erfc form also keeps Phi's relative accuracy for
 * very negative x, where 1 + erf(x/sqrt2) cancels.
 */
static inline float cpu_normal_cdf(float x)
{
	const float z = fabsf(x) * (float)M_SQRT1_2;
	const float t = 1.0f / (1.0f + 0.5f * z);
	float q = 0.17087277f;
	q = q * t - 0.82215223f;
	q = q * t + 1.48851587f;
	q = q * t - 1.13520398f;
	q = q * t + 0.27886807f;
	q = q * t - 0.18628806f;
	q = q * t + 0.09678418f;
	q = q * t + 0.37409196f;
	q = q * t + 1.00002368f;
	q = q * t - 1.26551223f;
	const float erfc_z = t * cpu_expf(q - z * z); /* erfc(|x|/sqrt2) */
	/* erfc(-x/sqrt2) is erfc_z for x <= 0 and 2 - erfc_z for x > 0 */
	return 0.5f * cpu_selectf(x > 0.0f, 2.0f - erfc_z, erfc_z);
}

void cpu_gelu_forward(float *out, const float *inp, size_t n, enum kops_gelu kind)
{
	if (kind == KOPS_GELU_TANH) {
		/* 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + e^-2u): the same
		 * function without tanhf (scalar-only in glibc) and without the
		 * cancellation of 1 + tanh(u) for very negative u. */
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++) {
			float x = inp[i];
			float u = GELU_S * x * (1.0f + GELU_K * x * x);
			out[i] = x / (1.0f + cpu_expf(-2.0f * u));
		}
	} else if (kind == KOPS_GELU_ERF) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = inp[i] * cpu_normal_cdf(inp[i]);
	} else {
		BUG("unknown gelu kind %d", (int)kind);
	}
}

void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n,
		       enum kops_gelu kind)
{
	if (kind == KOPS_GELU_TANH) {
		/* Megatron's bias_gelu_back: the derivative of the tanh form,
		 *   ff = 0.5x (1 - t^2)(0.79788456 + 0.1070322243 x^2) + 0.5(1 + t)
		 * with t = tanh(u) = 2 sigmoid(2u) - 1, and 0.1070322243 = 3 * 0.044715 * 0.79788456. */
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++) {
			float x = inp[i];
			float u = GELU_S * x * (1.0f + GELU_K * x * x);
			float t = 2.0f / (1.0f + cpu_expf(-2.0f * u)) - 1.0f;
			float ff = 0.5f * x * ((1.0f - t * t) * (GELU_S + 0.1070322243f * x * x)) +
				   0.5f * (1.0f + t);
			dinp[i] = ff * dout[i];
		}
	} else if (kind == KOPS_GELU_ERF) {
		/* d/dx [x Phi(x)] = Phi(x) + x phi(x) */
		const float inv_sqrt_2pi = 0.3989422804014327f;
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++) {
			float x = inp[i];
			float pdf = inv_sqrt_2pi * cpu_expf(-0.5f * x * x);
			dinp[i] = dout[i] * (cpu_normal_cdf(x) + x * pdf);
		}
	} else {
		BUG("unknown gelu kind %d", (int)kind);
	}
}

/* ---- SwiGLU: out = silu(gate) * up, silu(x) = x sigmoid(x) ---- */

void cpu_swiglu_forward(float *out, const float *inp, int N, int F)
{
#pragma omp parallel for if ((size_t)N * F >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
		float *o = out + (size_t)n * F;
#pragma omp simd
		for (int j = 0; j < F; j++)
			o[j] = gate[j] / (1.0f + cpu_expf(-gate[j])) * up[j];
	}
}

/* dgate = dout * up * sig (1 + g (1 - sig)),  dup = dout * silu(g) */
void cpu_swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F)
{
#pragma omp parallel for if ((size_t)N * F >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
		const float *dy = dout + (size_t)n * F;
		float *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
#pragma omp simd
		for (int j = 0; j < F; j++) {
			float g = gate[j], sig = 1.0f / (1.0f + cpu_expf(-g));
			dgate[j] = dy[j] * up[j] * (sig * (1.0f + g * (1.0f - sig)));
			dup[j] = dy[j] * (g * sig);
		}
	}
}

/* ---- residual dropout: out = residual + dropout(x) ---- */

/* Elements go in fixed chunks (their masks drawn per chunk), so the work
 * split, like the mask, does not depend on the thread count. */
#define CPU_DROP_CHUNK 4096

/* out = (residual +) x * mask/(1-p), chunk by chunk; residual may be NULL.
 * The one loop behind both dropout ops, so forward and backward cannot
 * draw different masks. */
static void cpu_dropout_apply(float *out, const float *residual, const float *x, size_t n, float p,
			      uint64_t seed, uint64_t offset)
{
	size_t nch = (n + CPU_DROP_CHUNK - 1) / CPU_DROP_CHUNK;
#pragma omp parallel for if (n >= CPU_PAR_MIN)
	for (size_t ch = 0; ch < nch; ch++) {
		size_t i0 = ch * CPU_DROP_CHUNK, len = n - i0 < CPU_DROP_CHUNK ? n - i0 : CPU_DROP_CHUNK;
		float s[CPU_DROP_CHUNK];
		cpu_dropout_scales(s, len, p, seed, offset + i0);
		if (residual) {
#pragma omp simd
			for (size_t j = 0; j < len; j++)
				out[i0 + j] = residual[i0 + j] + x[i0 + j] * s[j];
		} else {
#pragma omp simd
			for (size_t j = 0; j < len; j++)
				out[i0 + j] = x[i0 + j] * s[j];
		}
	}
}

void cpu_dropout_add_forward(float *out, const float *residual, const float *x, size_t n, float p,
			     uint64_t seed, uint64_t offset)
{
	if (p == 0.0f) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = residual[i] + x[i];
		return;
	}
	cpu_dropout_apply(out, residual, x, n, p, seed, offset);
}

void cpu_dropout_backward(float *dx, const float *dout, size_t n, float p, uint64_t seed,
			  uint64_t offset)
{
	if (p == 0.0f) {
		if (dx != dout)
			memcpy(dx, dout, n * sizeof(float));
		return;
	}
	cpu_dropout_apply(dx, NULL, dout, n, p, seed, offset);
}

/* ---- softmax cross-entropy ---- */

void cpu_xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
		      int N, int V)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * V;
		int t = targets[n];
		if (t < -1 || t >= V)
			BUG("cross-entropy target %d outside [-1, %d)", t, V);
		/* subtract the row max so no exp overflows; a NaN logit makes the sum NaN */
		float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
		for (int j = 0; j < V; j++)
			mx = x[j] > mx ? x[j] : mx;
		double sum = 0.0;
#pragma omp simd reduction(+ : sum)
		for (int j = 0; j < V; j++)
			sum += cpu_expf(x[j] - mx);
		float l = mx + (float)log(sum);
		lse[n] = l;
		losses[n] = t >= 0 ? l - x[t] : l; /* -1: the target is in another vocabulary shard */
	}
}

/* dlogits = (softmax - onehot) * dloss, with softmax = exp(x - lse). Each
 * element is read before it is written, so dlogits may alias logits; the
 * target's probability is taken first, and its entry redone after the loop
 * (keeping the one-hot test out of the vectorised loop). */
void cpu_xent_backward(float *dlogits, const float *logits, const float *lse,
		       const int32_t *targets, const float *dloss, int N, int V)
{
#pragma omp parallel for schedule(static)
	for (int n = 0; n < N; n++) {
		const float *x = logits + (size_t)n * V;
		float *dx = dlogits + (size_t)n * V;
		const float l = lse[n], dl = dloss[n];
		const int t = targets[n];
		const float pt = t >= 0 ? cpu_expf(x[t] - l) : 0.0f;
#pragma omp simd
		for (int j = 0; j < V; j++)
			dx[j] = cpu_expf(x[j] - l) * dl;
		if (t >= 0)
			dx[t] = (pt - 1.0f) * dl;
	}
}
