/*
 * cpu_fp8.c - the CPU backend's FP8 ops (ops.h: fp8_amax, fp8_quantize,
 * fp8_gemm, fp8_transpose, fp8_amax_blocks, fp8_quantize_blocks), the
 * reference the CUDA backend is held to. Every cast and
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
 * fp8_amax_blocks and fp8_quantize_blocks work on a flat range of a
 * block-scaled tensor (a distributed optimizer's shard): each block the
 * range touches is one thread's, walked row by row over the part of each
 * of its rows inside the range, so no two threads write one amax.
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

/* ---- a shard of a block-scaled tensor: elements [s, e) of its row-major R x C ---- */

struct fp8_shard {
	size_t s, e;          /* the flat range, e > s */
	size_t rs, re;        /* its first and last row */
	int C, br, bc, nbc;
	int bi0, nb;          /* the block rows it touches start at bi0: nb blocks to visit */
};

static bool fp8_shard_init(struct fp8_shard *sh, const struct kops_fp8_tensor *t, size_t n, size_t start,
			   const char *what)
{
	fp8_check_tensor(t, what);
	const size_t total = (size_t)t->rows * t->cols;

	if (start > total || n > total - start)
		BUG("%s: elements [%zu, %zu + %zu) of a %d x %d tensor", what, start, start, n, t->rows, t->cols);
	if (!n)
		return false;
	sh->s = start;
	sh->e = start + n;
	sh->C = t->cols;
	sh->br = t->br;
	sh->bc = t->bc;
	sh->nbc = (t->cols + t->bc - 1) / t->bc;
	sh->rs = sh->s / (size_t)sh->C;
	sh->re = (sh->e - 1) / (size_t)sh->C;
	sh->bi0 = (int)(sh->rs / (size_t)sh->br);
	sh->nb = ((int)(sh->re / (size_t)sh->br) - sh->bi0 + 1) * sh->nbc;
	return true;
}

/* visit b of the shard's blocks (0 <= b < nb): its grid index, and its rows [*r0, *r1) */
static size_t fp8_shard_block(const struct fp8_shard *sh, int b, size_t *r0, size_t *r1, int *j)
{
	const int i = sh->bi0 + b / sh->nbc;
	const size_t lo = (size_t)i * sh->br, hi = lo + (size_t)sh->br;

	*j = b % sh->nbc;
	*r0 = lo > sh->rs ? lo : sh->rs;
	*r1 = hi < sh->re + 1 ? hi : sh->re + 1;
	return (size_t)i * sh->nbc + (size_t)*j;
}

/* the columns [*c0, *c1) of row r in block column j that lie in the shard (empty: *c0 >= *c1) */
static void fp8_shard_cols(const struct fp8_shard *sh, size_t r, int j, int *c0, int *c1)
{
	const int lo = r == sh->rs ? (int)(sh->s % (size_t)sh->C) : 0;
	const int hi = r == sh->re ? (int)((sh->e - 1) % (size_t)sh->C) + 1 : sh->C;
	const int b0 = j * sh->bc, b1 = sh->C - b0 < sh->bc ? sh->C : b0 + sh->bc;

	*c0 = lo > b0 ? lo : b0;
	*c1 = hi < b1 ? hi : b1;
}

void cpu_fp8_amax_blocks(float *amax, const float *x, size_t n, size_t start, const struct kops_fp8_tensor *t)
{
	struct fp8_shard sh;

	if (!fp8_shard_init(&sh, t, n, start, "fp8_amax_blocks"))
		return;
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
	for (int b = 0; b < sh.nb; b++) {
		size_t r0, r1;
		int j, c0, c1;
		const size_t k = fp8_shard_block(&sh, b, &r0, &r1, &j);
		uint32_t m = 0;
		bool any = false;

		for (size_t r = r0; r < r1; r++) {
			fp8_shard_cols(&sh, r, j, &c0, &c1);
			if (c0 >= c1)
				continue;
			const float *v = x + (r * (size_t)sh.C + (size_t)c0 - start); /* element (r, c0) */
			for (int c = 0; c < c1 - c0; c++) {
				uint32_t a = fp8_abs_bits(v[c]);
				m = a > m ? a : m;
			}
			any = true;
		}
		if (any) { /* raised, as fp8_quantize's amax */
			uint32_t o = fp8_abs_bits(amax[k]);
			amax[k] = fp8_bits_f32(m > o ? m : o);
		}
	}
}

void cpu_fp8_quantize_blocks(const struct kops_fp8_tensor *t, const float *x, size_t n, size_t start,
			     const float *amax, bool pow2)
{
	struct fp8_shard sh;
	const bool any = fp8_shard_init(&sh, t, n, start, "fp8_quantize_blocks");
	const int nbt = ((t->rows + t->br - 1) / t->br) * ((t->cols + t->bc - 1) / t->bc);
	float scale;

	for (int b = 0; b < nbt; b++)
		fp8_block_scale(amax[b], t->fmt, KOPS_FP8_AMAX, pow2, &scale, &t->sinv[b]);
	if (!any)
		return;

#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
	for (int b = 0; b < sh.nb; b++) {
		size_t r0, r1;
		int j, c0, c1;
		const size_t k = fp8_shard_block(&sh, b, &r0, &r1, &j);
		float sc, si;

		fp8_block_scale(amax[k], t->fmt, KOPS_FP8_AMAX, pow2, &sc, &si);
		for (size_t r = r0; r < r1; r++) {
			fp8_shard_cols(&sh, r, j, &c0, &c1);
			if (c0 >= c1)
				continue;
			const size_t at = r * (size_t)sh.C + (size_t)c0; /* element (r, c0) */
			const float *v = x + (at - start);
			uint8_t *q = t->q + at;
			for (int c = 0; c < c1 - c0; c++)
				q[c] = fp8_from_f32(fp8_mul(v[c], sc), t->fmt);
		}
	}
}
