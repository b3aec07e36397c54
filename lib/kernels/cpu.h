/*
 * cpu.h - private to the CPU backend of the op table (cpu_*.c): the ops each
 * file defines, so cpu_ops.c can fill struct kops, and the small inline
 * helpers they share (a vectorisable expf, the dropout keep/scale draw).
 * Nothing outside lib/kernels includes this; everyone else sees ops.h.
 *
 * The build compiles with -O2 and no -march, where GCC vectorises (SSE2)
 * only loops that need no scalar epilogue; hot inner loops therefore carry
 * #pragma omp simd (honoured under -fopenmp), which vectorises them anyway.
 */
#ifndef MEGAC_KERNELS_CPU_H
#define MEGAC_KERNELS_CPU_H

#include "kernels/ops.h"

#include <cblas.h>
#include <stdint.h>
#include <string.h>

/* Below this many elements a loop is not worth waking the thread team. */
#define CPU_PAR_MIN 32768

/* Column reductions (parameter grads summed over rows) hand each thread
 * chunks of this many columns; each column is summed over all rows, in row
 * order, by one thread, so the result does not depend on the thread count. */
#define CPU_COLS 64

/* Query rows per attention task (cpu_attn.c, cpu_attn_block.c). */
#define CPU_QB 64

/* Around sgemms issued from inside our OpenMP team: a pthreads OpenBLAS
 * runs one thread of its own meanwhile (the reasoning is in cpu_attn.c).
 * begin returns what end restores. */
int cpu_blas_serial_begin(void);
void cpu_blas_serial_end(int saved);

/* ---- cpu_ops.c ---- */
/* cblas_sgemm (row-major), large products split over our OpenMP team by
 * output blocks: the result does not depend on the thread count */
void cpu_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A, int lda,
	       const float *B, int ldb, float beta, float *C, int ldc);

/* ---- cpu_nn.c ---- */
/* Parameter grads summed over rows: per-block partial sums part[b*stride +
 * c] (c < C) of nblk row blocks are added to dst[c] in block order, in
 * double: a fixed order, whatever the number of threads. */
void cpu_reduce_blocks(float *dst, const float *part, int nblk, int C, size_t stride);
void cpu_embedding_forward(float *out, const int32_t *tokens, const int32_t *positions,
			   const float *wte, const float *wpe, int N, int C);
void cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
			    const int32_t *positions, int N, int C);
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
			   const float *b, int N, int C, float eps);
void cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
			    const float *w, const float *mean, const float *rstd, int N, int C);
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
			 float eps);
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
			  const float *w, const float *rstd, int N, int C);
void cpu_gelu_forward(float *out, const float *inp, size_t n, enum kops_gelu kind);
void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n,
		       enum kops_gelu kind);
void cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void cpu_swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F);
void cpu_dropout_add_forward(float *out, const float *residual, const float *x, size_t n, float p,
			     uint64_t seed, uint64_t offset);
void cpu_dropout_backward(float *dx, const float *dout, size_t n, float p, uint64_t seed,
			  uint64_t offset);
void cpu_xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
		      int N, int V);
void cpu_xent_backward(float *dlogits, const float *logits, const float *lse,
		       const int32_t *targets, const float *dloss, int N, int V);

/* ---- cpu_attn.c ---- */
/* The first key position a query at position p sees under a sliding window
 * (ops.h: window < 0 is none): p - window, at least 0. */
static inline int cpu_window_first(int p, int window)
{
	return window < 0 || p - window < 0 ? 0 : p - window;
}
void cpu_qkv_split_forward(float *q, float *kk, float *v, const float *qkv, const float *cos,
			   const float *sin, int B, int T, int a, int g, int k, int rot, bool interleaved);
void cpu_qkv_split_backward(float *dqkv, const float *dq, const float *dk, const float *dv,
			    const float *cos, const float *sin, int B, int T, int a, int g, int k,
			    int rot, bool interleaved);
void cpu_attention_forward(float *out, float *probs, const float *q, const float *kk,
			   const float *v, const int32_t *doc, int B, int T, int a, int g, int k,
			   float scale, int window, float dropout_p, uint64_t seed, uint64_t offset);
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
			    const float *kk, const float *v, const float *probs, int B, int T,
			    int a, int g, int k, float scale, float dropout_p, uint64_t seed,
			    uint64_t offset);

/* ---- cpu_attn_block.c ---- */
void cpu_attention_block_forward(float *out, float *lse, const float *q, const float *kk, const float *v,
				 const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
				 int a, int g, int k, int S, float scale, int window, float dropout_p, uint64_t seed,
				 uint64_t offset, int accumulate);
void cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
				  const float *lse, const float *q, const float *kk, const float *v,
				  const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
				  int a, int g, int k, int S, float scale, int window, float dropout_p, uint64_t seed,
				  uint64_t offset);

/* ---- cpu_fp8.c ---- */
void cpu_fp8_amax(float *amax, const float *x, size_t n);
void cpu_fp8_quantize(const struct kops_fp8_tensor *t, const float *x, const struct kops_fp8_quant *how,
		      float *amax);
void cpu_fp8_gemm(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b, const float *bias,
		  bool accumulate);
void cpu_fp8_transpose(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src);
void cpu_fp8_amax_blocks(float *amax, const float *x, size_t n, size_t start, const struct kops_fp8_tensor *t);
void cpu_fp8_quantize_blocks(const struct kops_fp8_tensor *t, const float *x, size_t n, size_t start,
			     const float *amax, bool pow2);

/* ---- cpu_ssm.c ---- */
void cpu_ssm_conv_forward(float *out, const float *x, const float *hist, const float *w, const float *bias, int B,
			  int T, int C, int W);
void cpu_ssm_conv_backward(float *dx, float *dw, float *dbias, const float *dout, const float *x, const float *hist,
			   const float *w, const float *bias, int B, int T, int C, int W);
void cpu_ssd_scan_forward(float *y, float *state_out, const float *x, const float *dt, const float *dt_bias,
			  const float *A_log, const float *Bm, const float *Cm, const float *D, const float *state_in,
			  int B, int T, int H, int P, int G, int N, int chunk);
void cpu_ssd_scan_backward(float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm, float *dD,
			   float *dstate_in, const float *dy, const float *dstate_out, const float *x, const float *dt,
			   const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, const float *D,
			   const float *state_in, int B, int T, int H, int P, int G, int N, int chunk);
void cpu_gated_rmsnorm_forward(float *out, float *rstd, const float *y, const float *z, const float *w, int N, int C,
			       int ngroups, float eps);
void cpu_gated_rmsnorm_backward(float *dy, float *dz, float *dw, const float *dout, const float *y, const float *z,
				const float *w, const float *rstd, int N, int C, int ngroups);

/* ---- cpu_rand.c ---- */

/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11; the generator of cuRAND and of torch's CUDA dropout): the four
 * 32-bit words for the 128-bit counter ctr under the key (k0, k1). */
void cpu_philox4x32(uint32_t out[4], const uint32_t ctr[4], uint32_t k0, uint32_t k1);

/* The dropout multipliers for counters c0 .. c0+n-1:
 * s[i] = kops_uniform(seed, c0+i) >= p ? 1/(1-p) : 0. */
void cpu_dropout_scales(float *s, size_t n, float p, uint64_t seed, uint64_t c0);

/* ---- shared inline helpers ---- */

static inline float cpu_bits_to_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t cpu_float_to_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

/*
 * c ? a : b on floats, without a branch. A float ?: looks harmless, but with
 * GCC's default -ftrapping-math the arithmetic after it gets copied into both
 * arms, the loop keeps a branch, and it is no longer vectorised; a select on
 * the bits stays straight-line code.
 */
static inline float cpu_selectf(int c, float a, float b)
{
	uint32_t m = 0u - (uint32_t)(c != 0);
	return cpu_bits_to_float((cpu_float_to_bits(a) & m) | (cpu_float_to_bits(b) & ~m));
}

/*
 * expf for the softmax, sigmoid and tanh-GELU loops. glibc's expf is only
 * scalar (its vector variants need -ffast-math), and the softmax over a 50k
 * vocabulary spends most of its time there; this one is straight-line code,
 * so loops marked #pragma omp simd vectorise even at -O2. Cephes' expf:
 * exp(x) = 2^n e^r with n = round(x/ln2) and r = x - n ln2 in
 * [-ln2/2, ln2/2] (ln2 split in two for an exact product), e^r by a
 * degree-7 polynomial; error < 1 ulp (test_ops measures it). 2^n is built
 * from exponent bits in two halves, so n may run from -150 to 128: small
 * results come out as correctly scaled subnormals (or 0), x > 88.73 gives
 * inf, x = -inf gives 0, and NaN stays NaN (NaN fails both clamps and flows
 * through r).
 */
static inline float cpu_expf(float x)
{
	float xc = cpu_selectf(x > 88.8f, 88.8f, x);
	xc = cpu_selectf(xc < -104.0f, -104.0f, xc);
	/* round to nearest: adding 1.5*2^23 pushes the fraction bits out */
	float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * (r * r) + r + 1.0f;
	int ni = (int)cpu_selectf(n > -200.0f, n, 0.0f); /* NaN: keep the conversion defined */
	int n1 = ni / 2, n2 = ni - n1; /* both in [-75, 64]: normal powers of two */
	float s1 = cpu_bits_to_float((uint32_t)(n1 + 127) << 23);
	float s2 = cpu_bits_to_float((uint32_t)(n2 + 127) << 23);
	return p * s1 * s2;
}

#endif
