/*
 * cpu_ops.c - the CPU backend of the op table (ops.h): host memory, the
 * linear layer (OpenBLAS sgemm), the vector helpers, half-precision rounding
 * and AdamW, plus the table itself. The layer ops live in cpu_nn.c, the
 * attention path in cpu_attn.c, the random numbers in cpu_rand.c, the FP8
 * ops in cpu_fp8.c.
 *
 * Threading: OpenMP over rows or elements. Every output element is computed
 * by one thread in a fixed order, and every reduction across threads
 * (parameter-grad column sums, sumsq) uses a partition that does not depend
 * on the thread count, so results are bit-identical for any OMP_NUM_THREADS.
 * Large sgemms are split over the same team by output blocks (cpu_sgemm),
 * never along the summed dimension, so they do not change results either.
 */
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory: plain host memory ---- */

static void *cpu_alloc(size_t bytes)
{
	return xcalloc(bytes, 1);
}

static void cpu_free(void *p)
{
	free(p);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
}

static void cpu_copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
	for (size_t r = 0; r < rows && width; r++)
		memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void cpu_zero(float *x, size_t n)
{
	if (n)
		memset(x, 0, n * sizeof(float));
}

/* ---- sgemm split over our OpenMP team ----
 *
 * Debian's OpenBLAS is the pthreads build: it keeps a thread pool of its own
 * beside OpenMP's, and with both spinning on 2 cores every handover costs
 * (measured: 327 ms/step against 194 ms with OMP_WAIT_POLICY=passive on the
 * small benchmark). So large products are split here instead, into blocks
 * of output columns (or rows) that each OpenMP thread computes with a serial
 * sgemm: one pool, no handovers. Every output element is still one dot
 * product over the whole K in OpenBLAS's order, so results do not depend on
 * the thread count.
 */
#include <omp.h>
#include <stdbool.h>

#define CPU_GEMM_PAR_MIN (1 << 21) /* M*N*K below this: one call */
#define CPU_GEMM_BLOCKS 8          /* blocks per product: enough to balance 2-8 threads */

void cpu_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A, int lda,
	       const float *B, int ldb, float beta, float *C, int ldc)
{
	bool split_n = N >= M;
	int len = split_n ? N : M;
	/* The blocks depend on the shape only, never on the thread count, so one
	 * thread computes exactly the same calls as many. */
	int chunk = (len + CPU_GEMM_BLOCKS - 1) / CPU_GEMM_BLOCKS;
	chunk = chunk < 32 ? 32 : (chunk + 31) / 32 * 32;
	if (omp_in_parallel() || (double)M * N * K < CPU_GEMM_PAR_MIN || len <= chunk) {
		cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
		return;
	}
	int saved = 0;
	if (openblas_get_parallel() == 1) { /* pthreads build: keep its pool out of the way */
		saved = openblas_get_num_threads();
		if (saved > 1)
			openblas_set_num_threads(1);
	}
	int nchunks = (len + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1)
	for (int c = 0; c < nchunks; c++) {
		int s0 = c * chunk, n = len - s0 < chunk ? len - s0 : chunk;
		if (split_n) {
			/* C[:, s0:s0+n] = op(A) . op(B)[:, s0:s0+n] */
			const float *b = tb == CblasNoTrans ? B + s0 : B + (size_t)s0 * ldb;
			cblas_sgemm(CblasRowMajor, ta, tb, M, n, K, alpha, A, lda, b, ldb, beta, C + s0, ldc);
		} else {
			/* C[s0:s0+n, :] = op(A)[s0:s0+n, :] . op(B) */
			const float *a = ta == CblasNoTrans ? A + (size_t)s0 * lda : A + s0;
			cblas_sgemm(CblasRowMajor, ta, tb, n, N, K, alpha, a, lda, B, ldb, beta,
				    C + (size_t)s0 * ldc, ldc);
		}
	}
	if (saved > 1)
		openblas_set_num_threads(saved);
}

/* ---- linear: out[N,OC] = inp[N,IC] . weight[OC,IC]^T + bias ---- */

static void cpu_linear_forward(float *out, const float *inp, const float *weight,
			       const float *bias, int N, int IC, int OC)
{
	if (N <= 0 || OC <= 0)
		return;
	/* Start from the bias and let sgemm add onto it (beta = 1): the same one
	 * pass over out that beta = 0 would spend zeroing it. */
	float beta = 0.0f;
	if (bias) {
#pragma omp parallel for if ((size_t)N * OC >= CPU_PAR_MIN)
		for (int n = 0; n < N; n++)
			memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
		beta = 1.0f;
	} else if (IC == 0) {
		memset(out, 0, (size_t)N * OC * sizeof(float));
	}
	if (IC > 0)
		cpu_sgemm(CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, weight, IC, beta, out, OC);
}

/* dbias[o] += sum_n dout[n,o]. Each thread owns a range of columns and sums
 * its rows in order n = 0..N-1 (in double), so the result does not depend on
 * the thread count; the inner loop runs along a row, contiguous. */
static void cpu_colsum_add(float *dst, const float *x, int N, int C)
{
	int nchunks = (C + CPU_COLS - 1) / CPU_COLS;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= CPU_PAR_MIN)
	for (int ch = 0; ch < nchunks; ch++) {
		int c0 = ch * CPU_COLS, nc = C - c0 < CPU_COLS ? C - c0 : CPU_COLS;
		double acc[CPU_COLS] = { 0 };
		for (int n = 0; n < N; n++) {
			const float *row = x + (size_t)n * C + c0;
#pragma omp simd
			for (int j = 0; j < nc; j++)
				acc[j] += row[j];
		}
		for (int j = 0; j < nc; j++)
			dst[c0 + j] += (float)acc[j];
	}
}

static void cpu_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
				const float *inp, const float *weight, int N, int IC, int OC)
{
	if (N <= 0 || OC <= 0 || IC <= 0) {
		if (dinp && N > 0 && IC > 0)
			memset(dinp, 0, (size_t)N * IC * sizeof(float));
		if (dbias && N > 0 && OC > 0)
			cpu_colsum_add(dbias, dout, N, OC);
		return;
	}
	/* dinp[N,IC] = dout[N,OC] . weight[OC,IC] */
	if (dinp)
		cpu_sgemm(CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
	/* dweight[OC,IC] += dout^T . inp (beta = 1 accumulates) */
	if (dweight)
		cpu_sgemm(CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
	if (dbias)
		cpu_colsum_add(dbias, dout, N, OC);
}

static void cpu_widen(float *out, const uint16_t *x, size_t n, enum kops_round kind);

/* ---- linear and embedding on 16-bit weights ----
 * The reference versions: the weight widened into a buffer of its own, then
 * the fp32 op, so the results are the fp32 op's on widen(weight) bit for bit.
 * The model on this backend does not call the linear ones (w16_direct is
 * off: it widens each tensor into a view it owns and counts); they are here
 * for the op table's contract and the CUDA twins' parity tests. */
static float *cpu_widened(const uint16_t *w, size_t n, enum kops_round kind)
{
	float *f = xmalloc(n ? n * sizeof(float) : 1);
	cpu_widen(f, w, n, kind);
	return f;
}

static void cpu_linear_forward_w16(float *out, const float *inp, const uint16_t *weight, const float *bias,
				   int N, int IC, int OC, enum kops_round kind)
{
	float *w = cpu_widened(weight, N > 0 && OC > 0 && IC > 0 ? (size_t)OC * IC : 0, kind);
	cpu_linear_forward(out, inp, w, bias, N, IC, OC);
	free(w);
}

static void cpu_linear_backward_w16(float *dinp, float *dweight, float *dbias, const float *dout,
				    const float *inp, const uint16_t *weight, int N, int IC, int OC,
				    enum kops_round kind)
{
	float *w = cpu_widened(weight, dinp && N > 0 && OC > 0 && IC > 0 ? (size_t)OC * IC : 0, kind);
	cpu_linear_backward(dinp, dweight, dbias, dout, inp, w, N, IC, OC);
	free(w);
}

/* the rows are widened as they are read: no copy of the table */
static void cpu_embedding_forward_w16(float *out, const int32_t *tokens, const int32_t *positions,
				      const uint16_t *wte, const float *wpe, int N, int C, enum kops_round kind)
{
	if (kind != KOPS_ROUND_BF16 && kind != KOPS_ROUND_FP16)
		BUG("unknown rounding kind %d", (int)kind);
#pragma omp parallel for if ((size_t)N * C >= CPU_PAR_MIN)
	for (int n = 0; n < N; n++) {
		float *o = out + (size_t)n * C;
		if (tokens[n] >= 0)
			cpu_widen(o, wte + (size_t)tokens[n] * C, (size_t)C, kind);
		else
			memset(o, 0, (size_t)C * sizeof(float));
		if (wpe && positions) {
			const float *pe = wpe + (size_t)positions[n] * C;
			if (tokens[n] >= 0) {
#pragma omp simd
				for (int c = 0; c < C; c++)
					o[c] = o[c] + pe[c];
			} else {
				memcpy(o, pe, (size_t)C * sizeof(float));
			}
		}
	}
}

/* ---- vector helpers ---- */

static void cpu_add(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

static void cpu_scale(float *x, float s, size_t n)
{
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

/* Sum of squares in double. Fixed chunks, each summed by one thread, then
 * the chunk sums added in chunk order: the same result for any thread count. */
#define CPU_SUM_CHUNK 65536
static double cpu_sumsq(const float *x, size_t n)
{
	size_t nch = (n + CPU_SUM_CHUNK - 1) / CPU_SUM_CHUNK;
	if (nch == 0)
		return 0.0;
	double one, *part = nch == 1 ? &one : xmalloc(nch * sizeof(double));
#pragma omp parallel for schedule(static) if (nch > 1)
	for (size_t ch = 0; ch < nch; ch++) {
		size_t i0 = ch * CPU_SUM_CHUNK, i1 = i0 + CPU_SUM_CHUNK < n ? i0 + CPU_SUM_CHUNK : n;
		double acc = 0.0;
#pragma omp simd reduction(+ : acc)
		for (size_t i = i0; i < i1; i++)
			acc += (double)x[i] * x[i];
		part[ch] = acc;
	}
	double total = 0.0;
	for (size_t ch = 0; ch < nch; ch++)
		total += part[ch];
	if (part != &one)
		free(part);
	return total;
}

/* Any inf or NaN: all exponent bits set. */
static int cpu_nonfinite(const float *x, size_t n)
{
	int bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		bad |= (cpu_float_to_bits(x[i]) & 0x7f800000u) == 0x7f800000u;
	return bad;
}

/* ---- rounding to half precision and back ---- */

/* bfloat16 keeps the top 16 bits of a float: add half of the dropped part
 * (minus one unless the kept part is odd: ties to even) and truncate. Inf
 * stays inf, the largest floats round up to inf; a NaN is quieted (so its
 * payload cannot truncate to inf), sign kept. */
static inline float cpu_round_bf16(float x)
{
	uint32_t u = cpu_float_to_bits(x);
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
	return cpu_bits_to_float((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/* IEEE half: 5 exponent bits (normal from 2^-14, largest 65504), 10
 * mantissa bits. Every case is computed and the right one picked on the
 * integer bits, so the loop has no branch and vectorises. */
static inline float cpu_round_fp16(float x)
{
	uint32_t u = cpu_float_to_bits(x);
	uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
	/* |x| >= 2^-14, a normal half: keep 10 of the 23 mantissa bits, ties to even */
	uint32_t normal = sign | ((a + 0x0fffu + ((a >> 13) & 1u)) & ~0x1fffu);
	/* Below 2^-14 halves are subnormal, multiples of 2^-24. That is the ulp
	 * of floats in [0.5, 1), so adding 0.5 rounds |x| to it (to nearest
	 * even, the default rounding mode) and subtracting 0.5 again is exact. */
	uint32_t subnormal = sign | cpu_float_to_bits((cpu_bits_to_float(a) + 0.5f) - 0.5f);
	float r = cpu_selectf(a >= 0x38800000u, cpu_bits_to_float(normal), cpu_bits_to_float(subnormal));
	/* |x| >= 65520 = 65504 + half an ulp: the tie goes to the even 2^16, i.e. inf */
	r = cpu_selectf(a >= 0x477ff000u, cpu_bits_to_float(sign | 0x7f800000u), r);
	/* NaN stays NaN (quieted) */
	return cpu_selectf(a > 0x7f800000u, cpu_bits_to_float(u | 0x00400000u), r);
}

static void cpu_round(float *out, const float *x, size_t n, enum kops_round kind)
{
	if (kind == KOPS_ROUND_BF16) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = cpu_round_bf16(x[i]);
	} else if (kind == KOPS_ROUND_FP16) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = cpu_round_fp16(x[i]);
	} else {
		BUG("unknown rounding kind %d", (int)kind);
	}
}

/* 16 bits of storage: bf16 is the top half of the rounded float; an fp16
 * value (exactly representable after cpu_round_fp16) is re-biased: normals
 * move the exponent from 127 to 15 (minus 112 << 23) and drop 13 mantissa
 * bits that are zero, subnormals are multiples of 2^-24, inf and NaN keep
 * the top 10 mantissa bits (the quiet bit among them). */
static inline uint16_t cpu_fp16_bits(float r)
{
	uint32_t u = cpu_float_to_bits(r), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	uint32_t normal = (a - 0x38000000u) >> 13;
	uint32_t subnormal = (uint32_t)(cpu_bits_to_float(a) * 16777216.0f);
	uint32_t special = 0x7c00u | ((a >> 13) & 0x3ffu);
	uint32_t h = a >= 0x7f800000u ? special : a >= 0x38800000u ? normal : subnormal;
	return (uint16_t)(sign | h);
}

static inline float cpu_fp16_value(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	uint32_t normal = sign | ((e + 112u) << 23) | (mant << 13);
	uint32_t special = sign | 0x7f800000u | (mant << 13);
	float sub = (float)mant * (1.0f / 16777216.0f);
	float r = cpu_bits_to_float(e == 31 ? special : normal);
	return cpu_selectf(e == 0, cpu_bits_to_float(sign | cpu_float_to_bits(sub)), r);
}

static void cpu_narrow(uint16_t *out, const float *x, size_t n, enum kops_round kind)
{
	if (kind == KOPS_ROUND_BF16) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = (uint16_t)(cpu_float_to_bits(cpu_round_bf16(x[i])) >> 16);
	} else if (kind == KOPS_ROUND_FP16) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = cpu_fp16_bits(cpu_round_fp16(x[i]));
	} else {
		BUG("unknown rounding kind %d", (int)kind);
	}
}

static void cpu_widen(float *out, const uint16_t *x, size_t n, enum kops_round kind)
{
	if (kind == KOPS_ROUND_BF16) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = cpu_bits_to_float((uint32_t)x[i] << 16);
	} else if (kind == KOPS_ROUND_FP16) {
#pragma omp parallel for simd if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			out[i] = cpu_fp16_value(x[i]);
	} else {
		BUG("unknown rounding kind %d", (int)kind);
	}
}

/* ---- AdamW ----
 * torch.optim.AdamW (foreach=False, torch 2.x) step by step, in the same
 * order and precision:
 *   param.mul_(1 - lr*wd)
 *   exp_avg.lerp_(grad, 1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-lr/bias_correction1)
 * The per-step scalars are Python floats (double) that torch rounds to fp32
 * when it applies them to fp32 tensors, so they are computed in double here
 * and rounded once. torch's CPU kernels (AVX2 build) and nvcc contract
 * "a + b*c" into one fused multiply-add, so lerp and addcmul round once:
 * fmaf below gives the same bits (checked against torch in test_ops).
 * torch 1.13 still updated exp_avg as mul_(beta1).add_(grad, alpha=1-beta1),
 * which differs from lerp by an ulp now and then. */
/* the step's scalars, rounded once from double (decay: a decaying tensor's) */
struct cpu_adamw_c {
	float decay, w1, w1c, w2, b2, eps, neg_step_size, bc2_sqrt;
};

static struct cpu_adamw_c cpu_adamw_consts(float lr, float b1, float b2, float eps, float wd, int step)
{
	if (step < 1)
		BUG("adamw step %d < 1", step);
	struct cpu_adamw_c c;
	c.decay = (float)(1.0 - (double)lr * (double)wd);
	c.w1 = (float)(1.0 - (double)b1); /* lerp weight */
	c.w1c = 1.0f - c.w1;              /* torch's lerp: opmath 1 - weight */
	c.w2 = (float)(1.0 - (double)b2);
	c.b2 = b2;
	c.eps = eps;
	const double bc1 = 1.0 - pow((double)b1, (double)step);
	const double bc2 = 1.0 - pow((double)b2, (double)step);
	c.neg_step_size = (float)-((double)lr / bc1);
	c.bc2_sqrt = (float)sqrt(bc2);
	return c;
}

/* One element: *p, *m, *v updated with gradient g (decay: c->decay, or 1
 * for a tensor without weight decay, what wd = 0 gives). */
static inline void cpu_adamw_one(float *p, float *m, float *v, float g, float decay, const struct cpu_adamw_c *c)
{
	float gi = g, mi = *m, vi = *v;
	float pi = *p * decay;
	/* torch's lerp(self, end, w): self + w (end - self) for |w| < 0.5,
	 * else end - (end - self)(1 - w) */
	mi = c->w1 < 0.5f ? fmaf(c->w1, gi - mi, mi) : fmaf(-(gi - mi), c->w1c, gi);
	vi = fmaf(c->w2 * gi, gi, vi * c->b2);
	float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
	pi = pi + (c->neg_step_size * mi) / denom;
	*p = pi, *m = mi, *v = vi;
}

static void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
		      float b2, float eps, float wd, int step)
{
	const struct cpu_adamw_c c = cpu_adamw_consts(lr, b1, b2, eps, wd, step);
#pragma omp parallel for if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		cpu_adamw_one(p + i, m + i, v + i, g[i], c.decay, &c);
}

/* ---- mixture of experts: the weighted sum of the experts' rows ---- */

static void cpu_moe_combine_forward(float *out, const float *y, const float *w, const int32_t *rowptr,
				    const int32_t *rows, int N, int C)
{
#pragma omp parallel for schedule(static)
	for (int t = 0; t < N; t++) {
		float *o = out + (size_t)t * C;
		for (int c = 0; c < C; c++)
			o[c] = 0.0f;
		for (int j = rowptr[t]; j < rowptr[t + 1]; j++) {
			const float *yr = y + (size_t)rows[j] * C, wr = w[rows[j]];
			for (int c = 0; c < C; c++)
				o[c] += wr * yr[c];
		}
	}
}

static void cpu_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
				     const int32_t *tok, int R, int C)
{
#pragma omp parallel for schedule(static)
	for (int r = 0; r < R; r++) {
		const float *d = dout + (size_t)tok[r] * C, *yr = y + (size_t)r * C;
		double acc = 0.0;
		for (int c = 0; c < C; c++)
			acc += (double)d[c] * yr[c];
		if (dw)
			dw[r] = (float)acc;
		if (dy)
			for (int c = 0; c < C; c++)
				dy[(size_t)r * C + c] = w[r] * d[c];
	}
}

/* ---- whole-model ops: the per-tensor ops, segment after segment ---- */

static double cpu_sumsq_segs(const float *x, const struct kops_seg *segs, int nsegs)
{
	double total = 0.0;
	for (int i = 0; i < nsegs; i++)
		total += cpu_sumsq(x + segs[i].off, segs[i].n);
	return total;
}

static void cpu_adamw_segs(float *p, const float *g, float *m, float *v, size_t mv_base,
			   const struct kops_seg *segs, int nsegs, float lr, float b1, float b2, float eps, float wd,
			   int step)
{
	for (int i = 0; i < nsegs; i++) {
		size_t o = segs[i].off;
		cpu_adamw(p + (o - mv_base), g + o, m + (o - mv_base), v + (o - mv_base), segs[i].n, lr, b1, b2, eps,
			  segs[i].decay ? wd : 0.0f, step);
	}
}

/* ---- AdamW on states in their storage formats (the precision-aware optimizer) ---- */

/* an fp16 state's scale maps its largest magnitude to 65504 / 2
 * (Transformer Engine's headroom for the next step's growth) */
#define CPU_FP16_STATE_RANGE 32752.0f

static inline float cpu_lp_load(const void *x, size_t i, enum kops_dtype t, float scale)
{
	if (t == KOPS_F32)
		return ((const float *)x)[i];
	uint16_t h = ((const uint16_t *)x)[i];
	return t == KOPS_BF16 ? cpu_bits_to_float((uint32_t)h << 16) : cpu_fp16_value(h) * scale;
}

static inline void cpu_lp_store(void *x, size_t i, enum kops_dtype t, float val, float rscale)
{
	if (t == KOPS_F32)
		((float *)x)[i] = val;
	else if (t == KOPS_BF16)
		((uint16_t *)x)[i] = (uint16_t)(cpu_float_to_bits(cpu_round_bf16(val)) >> 16);
	else
		((uint16_t *)x)[i] = cpu_fp16_bits(cpu_round_fp16(val * rscale));
}

/* one element of segment `seg` read, updated, and (store) written back */
struct cpu_lp_elem {
	const struct kops_adamw_lp *s;
	const struct cpu_adamw_c *c;
	const float *in;  /* the segment's scales [3] */
	float out[3];     /* 1 / the new scales */
	float decay;
};

static inline void cpu_lp_update(const struct cpu_lp_elem *e, size_t k, float g, float r[3])
{
	const struct kops_adamw_lp *s = e->s;
	r[0] = cpu_lp_load(s->p, k, s->p_type, e->in[0]);
	r[1] = cpu_lp_load(s->m, k, s->m_type, e->in[1]);
	r[2] = cpu_lp_load(s->v, k, s->v_type, e->in[2]);
	cpu_adamw_one(&r[0], &r[1], &r[2], g, e->decay, e->c);
}

static void cpu_adamw_segs_lp(const struct kops_adamw_lp *s, const float *g, size_t mv_base,
			      const struct kops_seg *segs, int nsegs, float lr, float b1, float b2, float eps,
			      float wd, int step)
{
	const struct cpu_adamw_c c = cpu_adamw_consts(lr, b1, b2, eps, wd, step);
	const enum kops_dtype type[3] = { s->p_type, s->m_type, s->v_type };
	bool scaled = type[0] == KOPS_FP16 || type[1] == KOPS_FP16 || type[2] == KOPS_FP16;
	if (scaled && !s->scale)
		BUG("adamw_segs_lp: fp16 states without scales");
	const float ones[3] = { 1.0f, 1.0f, 1.0f };
	for (int i = 0; i < nsegs; i++) {
		size_t off = segs[i].off, n = segs[i].n, base = off - mv_base;
		struct cpu_lp_elem e = { s, &c, s->scale ? s->scale + 3 * i : ones, { 1.0f, 1.0f, 1.0f },
					 segs[i].decay ? c.decay : 1.0f };
		float news[3] = { 1.0f, 1.0f, 1.0f };
		if (scaled) { /* pass 1: the updated values' largest magnitudes */
			float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
#pragma omp parallel for reduction(max : a0, a1, a2) if (n >= CPU_PAR_MIN)
			for (size_t j = 0; j < n; j++) {
				float r[3];
				cpu_lp_update(&e, base + j, g[off + j], r);
				a0 = fmaxf(a0, fabsf(r[0]));
				a1 = fmaxf(a1, fabsf(r[1]));
				a2 = fmaxf(a2, fabsf(r[2]));
			}
			const float amax[3] = { a0, a1, a2 };
			for (int t = 0; t < 3; t++)
				if (type[t] == KOPS_FP16) {
					news[t] = amax[t] / CPU_FP16_STATE_RANGE;
					e.out[t] = news[t] > 0.0f ? 1.0f / news[t] : 0.0f;
				}
		}
#pragma omp parallel for if (n >= CPU_PAR_MIN)
		for (size_t j = 0; j < n; j++) {
			float r[3];
			size_t k = base + j;
			cpu_lp_update(&e, k, g[off + j], r);
			if (s->w16)
				s->w16[off + j] = s->w16_kind == KOPS_ROUND_BF16 ?
					(uint16_t)(cpu_float_to_bits(cpu_round_bf16(r[0])) >> 16) :
					cpu_fp16_bits(cpu_round_fp16(r[0]));
			cpu_lp_store(s->p, k, type[0], r[0], e.out[0]);
			cpu_lp_store(s->m, k, type[1], r[1], e.out[1]);
			cpu_lp_store(s->v, k, type[2], r[2], e.out[2]);
		}
		for (int t = 0; scaled && t < 3; t++)
			if (type[t] == KOPS_FP16)
				s->scale[3 * i + t] = news[t];
	}
}

/* ---- the table ---- */

static const struct kops cpu_ops = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.to_host = cpu_copy,
	.to_device = cpu_copy,
	.zero = cpu_zero,
	.copy = cpu_copy,
	.copy_rows = cpu_copy_rows,
	.host_alloc = cpu_alloc,
	.host_free = cpu_free,
	.linear_forward = cpu_linear_forward,
	.linear_backward = cpu_linear_backward,
	.linear_forward_w16 = cpu_linear_forward_w16,
	.linear_backward_w16 = cpu_linear_backward_w16,
	.embedding_forward = cpu_embedding_forward,
	.embedding_backward = cpu_embedding_backward,
	.embedding_forward_w16 = cpu_embedding_forward_w16,
	.layernorm_forward = cpu_layernorm_forward,
	.layernorm_backward = cpu_layernorm_backward,
	.rmsnorm_forward = cpu_rmsnorm_forward,
	.rmsnorm_backward = cpu_rmsnorm_backward,
	.gelu_forward = cpu_gelu_forward,
	.gelu_backward = cpu_gelu_backward,
	.swiglu_forward = cpu_swiglu_forward,
	.swiglu_backward = cpu_swiglu_backward,
	.qkv_split_forward = cpu_qkv_split_forward,
	.qkv_split_backward = cpu_qkv_split_backward,
	.attention_forward = cpu_attention_forward,
	.attention_backward = cpu_attention_backward,
	.dropout_add_forward = cpu_dropout_add_forward,
	.dropout_backward = cpu_dropout_backward,
	.xent_forward = cpu_xent_forward,
	.xent_backward = cpu_xent_backward,
	.add = cpu_add,
	.scale = cpu_scale,
	.sumsq = cpu_sumsq,
	.nonfinite = cpu_nonfinite,
	.round = cpu_round,
	.narrow = cpu_narrow,
	.widen = cpu_widen,
	.adamw = cpu_adamw,
	.moe_combine_forward = cpu_moe_combine_forward,
	.moe_combine_backward = cpu_moe_combine_backward,
	.sumsq_segs = cpu_sumsq_segs,
	.adamw_segs = cpu_adamw_segs,
	.adamw_segs_lp = cpu_adamw_segs_lp,
	.fp8_amax = cpu_fp8_amax,
	.fp8_quantize = cpu_fp8_quantize,
	.fp8_gemm = cpu_fp8_gemm,
	.fp8_transpose = cpu_fp8_transpose,
	.fp8_amax_blocks = cpu_fp8_amax_blocks,
	.fp8_quantize_blocks = cpu_fp8_quantize_blocks,
	.attention_block_forward = cpu_attention_block_forward,
	.attention_block_backward = cpu_attention_block_backward,
	.ssm_conv_forward = cpu_ssm_conv_forward,
	.ssm_conv_backward = cpu_ssm_conv_backward,
	.ssd_scan_forward = cpu_ssd_scan_forward,
	.ssd_scan_backward = cpu_ssd_scan_backward,
	.gated_rmsnorm_forward = cpu_gated_rmsnorm_forward,
	.gated_rmsnorm_backward = cpu_gated_rmsnorm_backward,
};

const struct kops *kops_cpu(void)
{
	static bool checked; /* once; the table is constant */
	if (!checked) {
		kops_check(&cpu_ops);
		checked = true;
	}
	return &cpu_ops;
}
