/*
 * cpu_fp8.c - the CPU backend's FP8 ops (ops.h: fp8_amax, fp8_quantize,
 * fp8_gemm, fp8_transpose), the reference the CUDA backend is held to. Every cast and
 * every scale comes from lib/kernels/fp8.h, whose rules both backends
 * compile, so the codes and the dequantization scales agree bit for bit.
 *
 * Amaxes are taken on the bit patterns of |x| (fp8.h, rule 7): an integer
 * max is order free, so any split over threads gives the same bits, and a
 * NaN anywhere wins. fp8_quantize parallelises over rows for one scale
 * (GIVEN) and over blocks otherwise; every block is one thread's, its amax,
 * scale and codes computed in one place. fp8_gemm dequantizes both operands
 * into fp32 scratch (one rounded product fp8_to_f32(q) * sinv per value),
 * multiplies them with cpu_sgemm (thread-count independent, see
 * cpu_ops.c) into a fresh product and then adds the bias, or adds the
 * product onto out: the sum over k comes first, as cuBLASLt's epilogue has
 * it. fp8_transpose moves bytes in square tiles (a tile's rows and columns
 * both stay in cache) and the scales as a plain loop; nothing is rounded.
 */
#include "kernels/cpu.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

void cpu_fp8_amax(float *amax, const float *x, size_t n)
{
	uint32_t m = 0;

#pragma omp parallel for simd reduction(max : m) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		uint32_t a = fp8_abs_bits(x[i]);
		m = a > m ? a : m;
	}
	*amax = fp8_bits_f32(m);
}

static void fp8_check_tensor(const struct kops_fp8_tensor *t, const char *what)
{
	if (t->rows < 0 || t->cols < 0 || t->br < 1 || t->bc < 1 || (t->fmt != KOPS_E4M3 && t->fmt != KOPS_E5M2))
		BUG("%s: a %d x %d FP8 tensor in %d x %d blocks, format %d", what, t->rows, t->cols, t->br, t->bc,
		    (int)t->fmt);
}

/* block (i, j)'s amax bits; x is [R, C], or [C, R] when tr */
static uint32_t fp8_block_amax(const float *x, bool tr, int R, int C, int r0, int r1, int c0, int c1)
{
	uint32_t m = 0;

	if (!tr) {
		for (int r = r0; r < r1; r++) {
			const float *row = x + (size_t)r * C;
			for (int c = c0; c < c1; c++) {
				uint32_t a = fp8_abs_bits(row[c]);
				m = a > m ? a : m;
			}
		}
	} else {
		for (int c = c0; c < c1; c++) {
			const float *col = x + (size_t)c * R;
			for (int r = r0; r < r1; r++) {
				uint32_t a = fp8_abs_bits(col[r]);
				m = a > m ? a : m;
			}
		}
	}
	return m;
}

/* q[r, c] = fp8_from_f32(x(r, c) * scale) over rows [r0, r1) and columns [c0, c1) */
static void fp8_block_cast(uint8_t *q, const float *x, bool tr, int R, int C, int r0, int r1, int c0, int c1,
			   float scale, enum kops_fp8 fmt)
{
	if (!tr) {
		for (int r = r0; r < r1; r++) {
			const float *row = x + (size_t)r * C;
			uint8_t *qr = q + (size_t)r * C;
			for (int c = c0; c < c1; c++)
				qr[c] = fp8_from_f32(fp8_mul(row[c], scale), fmt);
		}
	} else {
		for (int c = c0; c < c1; c++) {
			const float *col = x + (size_t)c * R;
			for (int r = r0; r < r1; r++)
				q[(size_t)r * C + c] = fp8_from_f32(fp8_mul(col[r], scale), fmt);
		}
	}
}

void cpu_fp8_quantize(const struct kops_fp8_tensor *t, const float *x, const struct kops_fp8_quant *how,
		      float *amax)
{
	fp8_check_tensor(t, "fp8_quantize");
	const int R = t->rows, C = t->cols;
	const int nbr = (R + t->br - 1) / t->br, nbc = (C + t->bc - 1) / t->bc;
	const bool tr = how->transpose;
	const size_t n = (size_t)R * C;
	uint32_t m = 0;

	if (how->how == KOPS_FP8_GIVEN) {
		const float scale = how->scale, sinv = fp8_div(1.0f, scale);

		for (int b = 0; b < nbr * nbc; b++)
			t->sinv[b] = sinv;
#pragma omp parallel for reduction(max : m) if (n >= CPU_PAR_MIN)
		for (int r = 0; r < R; r++) {
			if (amax) {
				uint32_t a = fp8_block_amax(x, tr, R, C, r, r + 1, 0, C);
				m = a > m ? a : m;
			}
			fp8_block_cast(t->q, x, tr, R, C, r, r + 1, 0, C, scale, t->fmt);
		}
	} else if (how->how == KOPS_FP8_AMAX || how->how == KOPS_FP8_MX || how->how == KOPS_FP8_TENSOR) {
#pragma omp parallel for schedule(static) reduction(max : m) if (n >= CPU_PAR_MIN)
		for (int b = 0; b < nbr * nbc; b++) {
			const int i = b / nbc, j = b % nbc;
			const int r0 = i * t->br, r1 = R - r0 < t->br ? R : r0 + t->br;
			const int c0 = j * t->bc, c1 = C - c0 < t->bc ? C : c0 + t->bc;
			const uint32_t a = fp8_block_amax(x, tr, R, C, r0, r1, c0, c1);
			float scale, sinv;

			m = a > m ? a : m;
			fp8_block_scale(fp8_bits_f32(a), t->fmt, how->how, how->pow2, &scale, &sinv);
			t->sinv[b] = sinv;
			fp8_block_cast(t->q, x, tr, R, C, r0, r1, c0, c1, scale, t->fmt);
		}
	} else {
		BUG("fp8_quantize: scaling %d", (int)how->how);
	}
	if (amax) { /* raised, not set (ops.h) */
		uint32_t o = fp8_abs_bits(*amax);
		*amax = fp8_bits_f32(m > o ? m : o);
	}
}

/* deq(t) into d[rows, cols] */
static void fp8_dequantize(float *d, const struct kops_fp8_tensor *t)
{
	const int C = t->cols, nbc = (C + t->bc - 1) / t->bc;

#pragma omp parallel for if ((size_t)t->rows * C >= CPU_PAR_MIN)
	for (int r = 0; r < t->rows; r++) {
		const float *s = t->sinv + (size_t)(r / t->br) * nbc;
		const uint8_t *q = t->q + (size_t)r * C;
		float *dr = d + (size_t)r * C;
		for (int c = 0; c < C; c++)
			dr[c] = fp8_mul(fp8_to_f32(q[c], t->fmt), s[c / t->bc]);
	}
}

void cpu_fp8_gemm(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b, const float *bias,
		  bool accumulate)
{
	fp8_check_tensor(a, "fp8_gemm");
	fp8_check_tensor(b, "fp8_gemm");
	const int M = a->rows, N = b->rows, K = a->cols;

	if (b->cols != K)
		BUG("fp8_gemm: a is %d x %d, b %d x %d (both [., K])", a->rows, a->cols, b->rows, b->cols);
	if (accumulate && bias)
		BUG("fp8_gemm: a bias with accumulate");
	if (M == 0 || N == 0)
		return;
	const size_t mn = (size_t)M * N;
	float *prod = accumulate ? xmalloc(mn * sizeof(float)) : out;

	if (K == 0) {
		memset(prod, 0, mn * sizeof(float));
	} else {
		float *da = xmalloc((size_t)M * K * sizeof(float)), *db = xmalloc((size_t)N * K * sizeof(float));

		fp8_dequantize(da, a);
		fp8_dequantize(db, b);
		cpu_sgemm(CblasNoTrans, CblasTrans, M, N, K, 1.0f, da, K, db, K, 0.0f, prod, N);
		free(da);
		free(db);
	}
	if (accumulate) {
#pragma omp parallel for simd if (mn >= CPU_PAR_MIN)
		for (size_t i = 0; i < mn; i++)
			out[i] += prod[i];
		free(prod);
	} else if (bias) {
#pragma omp parallel for if (mn >= CPU_PAR_MIN)
		for (int r = 0; r < M; r++) {
			float *o = out + (size_t)r * N;
			for (int c = 0; c < N; c++)
				o[c] += bias[c];
		}
	}
}

/* the shape checks of fp8_transpose (ops.h): dst is src's transpose */
static void fp8_check_transpose(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src)
{
	fp8_check_tensor(dst, "fp8_transpose");
	fp8_check_tensor(src, "fp8_transpose");
	if (dst->rows != src->cols || dst->cols != src->rows || dst->br != src->bc || dst->bc != src->br ||
	    dst->fmt != src->fmt)
		BUG("fp8_transpose: dst %d x %d in %d x %d blocks (format %d) is not the transpose of src %d x %d in "
		    "%d x %d blocks (format %d)", dst->rows, dst->cols, dst->br, dst->bc, (int)dst->fmt, src->rows,
		    src->cols, src->br, src->bc, (int)src->fmt);
}

#define FP8_TILE 64 /* bytes: a 64 x 64 tile of each side is 8 KB */

void cpu_fp8_transpose(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src)
{
	fp8_check_transpose(dst, src);
	const int R = src->rows, C = src->cols;
	const int nbr = (R + src->br - 1) / src->br, nbc = (C + src->bc - 1) / src->bc;
	const int tr = (R + FP8_TILE - 1) / FP8_TILE, tc = (C + FP8_TILE - 1) / FP8_TILE;

	for (int i = 0; i < nbr; i++)
		for (int j = 0; j < nbc; j++)
			dst->sinv[(size_t)j * nbr + i] = src->sinv[(size_t)i * nbc + j];
#pragma omp parallel for schedule(static) if ((size_t)R * C >= CPU_PAR_MIN)
	for (int t = 0; t < tr * tc; t++) {
		const int r0 = t / tc * FP8_TILE, c0 = t % tc * FP8_TILE;
		const int r1 = R - r0 < FP8_TILE ? R : r0 + FP8_TILE, c1 = C - c0 < FP8_TILE ? C : c0 + FP8_TILE;
		for (int c = c0; c < c1; c++) {
			uint8_t *d = dst->q + (size_t)c * R;
			for (int r = r0; r < r1; r++)
				d[r] = src->q[(size_t)r * C + c];
		}
	}
}
