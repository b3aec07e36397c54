/*
 * fp8.cu - the FP8 ops of the CUDA backend (ops.h, docs/fp8.md):
 * fp8_amax, fp8_quantize, fp8_gemm, fp8_transpose, fp8_amax_blocks and
 * fp8_quantize_blocks, with the casts and scale rules of
 * lib/kernels/fp8.h, the very functions the CPU ops call, so codes and
 * dequantization scales agree with the CPU's bit for bit (this file is
 * built with -fmad=false: no product of a cast's input fused into an add).
 *
 * fp8_amax: max |x| in two kernels, per-block partials in the scratch
 * buffer, then one block over the partials, taken as fp8.h's rule 7 says:
 * the largest bit pattern of |x| (fp8_abs_bits, unsigned), where NaNs rank
 * above +Inf, so a NaN anywhere gives a NaN (the same NaN the CPU finds) and
 * the order of the comparisons does not matter.
 *
 * fp8_quantize:
 *   - GIVEN: one grid-stride pass, code = fp8_from_f32(x * scale); every
 *     entry of sinv gets 1/scale (one block: one entry);
 *   - AMAX, MX: one thread block per quantization block (br x bc values;
 *     a warp per 32 of them, at most 128 threads): the block's amax (as
 *     above), its scale and sinv (fp8_block_scale), sinv written by thread
 *     0, then the block's codes;
 *   - transpose: x is [cols, rows]; element (r, c) of t is read at
 *     x[c * rows + r] (the writes stay coalesced, the reads do not: a tiled
 *     transpose through shared memory is the faster version for later);
 *   - the whole tensor's amax (the delayed recipe's history), when asked,
 *     raises the caller's float: fp8_amax's kernels, keeping the larger of
 *     the new and the stored bit patterns.
 *
 * fp8_gemm: out[M, N] (+)= deq(a)[M, K] . deq(b)[N, K]^T (+ bias).
 *   - Both operands one block each (per-tensor scales: the delayed and the
 *     tensorwise recipes): cuBLASLt's FP8 matmul. cuBLASLt is column-major:
 *     row-major out[M, N] is out^T (N x M, ld N), and
 *         out^T (N x M) = b (stored [N, K], col-major K x N, ld K) ^T
 *                         . a (stored [M, K], col-major K x M, ld K)
 *     so A = b with TRANSA = T, B = a with TRANSB = N: the "TN" layout FP8
 *     requires on Ada and Hopper, m = N, n = M, k = K. A_SCALE_POINTER is
 *     b's sinv, B_SCALE_POINTER a's; D and C fp32, CUBLAS_COMPUTE_32F,
 *     scale type fp32, FAST_ACCUM 0 (the split accumulator: partial sums
 *     promoted to fp32 at intervals, Transformer Engine's choice for the
 *     gradients; we take it for the forward too). The bias is not the
 *     epilogue (with an fp32 D cuBLASLt wants it in bf16, which would round
 *     it): out is filled with the bias and the product added with beta = 1,
 *     as accumulate does. E5M2 x E5M2 is not a cuBLASLt FP8 combination (the
 *     recipes never need it), and the tensor-core requirements (16-byte
 *     aligned pointers, K a multiple of 16 bytes of codes, N a multiple of 4
 *     fp32 values) must hold; a shape that misses them, or one the heuristic
 *     has no algorithm for, takes the path below.
 *   - Otherwise (block scales, or the above not met): both operands are
 *     dequantized into fp32 in the scratch buffer, exactly as the CPU does
 *     it, and multiplied by the fp32 table's linear_forward (cuBLASLt in
 *     fp32, no TF32); accumulate adds the product, computed into scratch,
 *     afterwards. The faster path for later: cuBLASLt 12.9 and newer
 *     multiply block-scaled FP8 directly (CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE
 *     VEC128_32F / BLK128x128_32F on sm_90, the E8M0 VEC32 scales of MXFP8 on
 *     sm_100), and bf16 operands would do when every sinv is a power of two
 *     (the products are exact either way).
 *
 * fp8_transpose: bytes moved through shared memory in 32 x 32 tiles, a
 * thread block of 32 x 8 threads per tile (each thread four bytes), read
 * along src's rows and written along dst's, so both sides are coalesced;
 * the row of tiles is blockIdx.y, looped when there are more than a grid
 * dimension holds. The same launch moves the scale grid, a grid-stride loop
 * over every thread of the grid (it has at most as many entries as there
 * are codes).
 *
 * fp8_amax_blocks: a flat range of a block-scaled tensor (a distributed
 * optimizer's shard), warps striding over it; a run of lanes whose values
 * share a block reduces within the warp and one lane raises the block's
 * amax with integer atomics on its bit patterns (the order free max of rule
 * 7, so the CPU's bits). fp8_quantize_blocks: a grid-stride cast of the
 * range, each value's block scale found from the reduced amaxes, the scale
 * grid written by the same launch.
 *
 * Global state: the FP8 plan cache (descriptors and chosen algorithm per
 * shape, as gemm.cu's) and the count of GEMMs that took cuBLASLt's FP8 path
 * (kops_cuda_get_stats: the tests check the path was taken, since falling
 * back hides a mistake); gemm.cu's cuBLASLt handle and workspace are shared.
 * The ops run on one host thread at a time (cuda_ops.h): no lock.
 */
#include "common.cuh"

#include <string.h>

extern "C" {
#include "../cuda_ops.h"
#include "../fp8.h"
}

/* ---- amax ---- */

/* the block-wide max of unsigned bit patterns (|x| as fp8_abs_bits), in every thread */
static __device__ uint32_t block_max_bits(uint32_t v)
{
	__shared__ uint32_t sh[WARP];
	int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
	for (int o = WARP / 2; o > 0; o >>= 1) {
		uint32_t u = __shfl_xor_sync(0xffffffffu, v, o);
		v = u > v ? u : v;
	}
	__syncthreads(); /* sh may still be read by an earlier call */
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0u;
	for (int o = WARP / 2; o > 0; o >>= 1) {
		uint32_t u = __shfl_xor_sync(0xffffffffu, v, o);
		v = u > v ? u : v;
	}
	return v;
}

#define AMAX_BLOCKS 1024

/* part[block] = the largest |x| bits of the block's grid-stride share; as a float (bits kept);
 * raise: the largest of that and |part[block]| (fp8_quantize's amax, ops.h) */
static __global__ void amax_partial_kernel(float *part, const float *x, size_t n, bool raise)
{
	uint32_t m = 0;
	GRID_STRIDE(i, n) {
		uint32_t u = fp8_abs_bits(x[i]);
		m = u > m ? u : m;
	}
	m = block_max_bits(m);
	if (threadIdx.x == 0) {
		uint32_t o = raise ? fp8_abs_bits(part[blockIdx.x]) : 0u;
		part[blockIdx.x] = fp8_bits_f32(m > o ? m : o);
	}
}

static __global__ void amax_final_kernel(float *amax, const float *part, int nblk, bool raise)
{
	uint32_t m = 0;
	for (int i = threadIdx.x; i < nblk; i += blockDim.x) {
		uint32_t u = fp8_f32_bits(part[i]);
		m = u > m ? u : m;
	}
	m = block_max_bits(m);
	if (threadIdx.x == 0) {
		uint32_t o = raise ? fp8_abs_bits(*amax) : 0u;
		*amax = fp8_bits_f32(m > o ? m : o);
	}
}

/* *amax = max |x| (raise: the largest of that and |*amax|), with part
 * room for AMAX_BLOCKS partials (NULL: taken from the scratch) */
static void amax_with(float *amax, const float *x, size_t n, bool raise, float *part)
{
	unsigned nblk = grid_for(n);
	if (nblk > AMAX_BLOCKS)
		nblk = AMAX_BLOCKS;
	if (nblk == 1) {
		launch<amax_partial_kernel>(1, THREADS, 0, amax, x, n, raise);
		KERNEL_CHECK();
		return;
	}
	float *own = part ? NULL : (float *)scratch_alloc(nblk * sizeof(float));
	launch<amax_partial_kernel>(nblk, THREADS, 0, part ? part : own, x, n, false);
	KERNEL_CHECK();
	launch<amax_final_kernel>(1, THREADS, 0, amax, part ? part : own, (int)nblk, raise);
	KERNEL_CHECK();
	if (own)
		scratch_free(own);
}

static void amax_into(float *amax, const float *x, size_t n, bool raise)
{
	amax_with(amax, x, n, raise, NULL);
}

static void cuda_fp8_amax(float *amax, const float *x, size_t n)
{
	amax_into(amax, x, n, false);
}

/* ---- quantize ---- */

/* element (r, c) of the tensor: x[r, c], or x[c, r] of the transposed input */
static __device__ __forceinline__ float x_at(const float *x, int rows, int cols, int r, int c, int tr)
{
	return tr ? x[(size_t)c * rows + r] : x[(size_t)r * cols + c];
}

static __global__ void quant_given_kernel(uint8_t *q, float *sinv, const float *x, int rows, int cols, int nsinv,
					  float scale, float si, int fmt, int tr)
{
	GRID_STRIDE(i, (size_t)rows * cols) {
		int r = (int)(i / cols), c = (int)(i % cols);
		q[i] = fp8_from_f32(fp8_mul(x_at(x, rows, cols, r, c, tr), scale), (enum kops_fp8)fmt);
	}
	if (blockIdx.x == 0)
		for (int j = threadIdx.x; j < nsinv; j += blockDim.x)
			sinv[j] = si;
}

/* one thread block per quantization block */
static __global__ void quant_block_kernel(uint8_t *q, float *sinv, const float *x, int rows, int cols, int br,
					  int bc, int nbc, int fmt, int how, int pow2, int tr)
{
	const enum kops_fp8 f = (enum kops_fp8)fmt;
	const int bi = (int)(blockIdx.x / nbc), bj = (int)(blockIdx.x % nbc);
	const int r0 = bi * br, c0 = bj * bc;
	const int h = rows - r0 < br ? rows - r0 : br, w = cols - c0 < bc ? cols - c0 : bc;
	const int nel = h * w;
	uint32_t m = 0;
	for (int e = threadIdx.x; e < nel; e += blockDim.x) {
		uint32_t u = fp8_abs_bits(x_at(x, rows, cols, r0 + e / w, c0 + e % w, tr));
		m = u > m ? u : m;
	}
	m = block_max_bits(m);
	float scale, si;
	fp8_block_scale(fp8_bits_f32(m), f, (enum kops_fp8_scaling)how, pow2 != 0, &scale, &si);
	if (threadIdx.x == 0)
		sinv[blockIdx.x] = si;
	for (int e = threadIdx.x; e < nel; e += blockDim.x) {
		int r = r0 + e / w, c = c0 + e % w;
		q[(size_t)r * cols + c] = fp8_from_f32(fp8_mul(x_at(x, rows, cols, r, c, tr), scale), f);
	}
}

/* A tensor that is one block (the tensorwise recipe's scale found on the
 * device): its amax over the whole grid first (amax_into), then the scale
 * from it in one thread, then a grid-stride cast reading that scale, so no
 * single thread block walks the whole tensor. */
static __global__ void quant_scale_kernel(float *scale_out, float *sinv, const float *amax, int fmt, int how, int pow2)
{
	float scale, si;
	fp8_block_scale(*amax, (enum kops_fp8)fmt, (enum kops_fp8_scaling)how, pow2 != 0, &scale, &si);
	*scale_out = scale;
	*sinv = si;
}

static __global__ void quant_devscale_kernel(uint8_t *q, const float *x, int rows, int cols, const float *scale,
					     int fmt, int tr)
{
	const float sc = *scale;
	GRID_STRIDE(i, (size_t)rows * cols) {
		int r = (int)(i / cols), c = (int)(i % cols);
		q[i] = fp8_from_f32(fp8_mul(x_at(x, rows, cols, r, c, tr), sc), (enum kops_fp8)fmt);
	}
}

#define QUANT_THREADS 128
#define QUANT_WHOLE_MIN 4096 /* one block of at least this many values: the three-step path */

static void check_tensor(const struct kops_fp8_tensor *t, const char *what)
{
	if (!t || t->rows < 0 || t->cols < 0 || t->br <= 0 || t->bc <= 0 || (t->fmt != KOPS_E4M3 && t->fmt != KOPS_E5M2))
		CUDA_BUG(what);
}

static void cuda_fp8_quantize(const struct kops_fp8_tensor *t, const float *x, const struct kops_fp8_quant *how,
			      float *amax)
{
	check_tensor(t, "fp8_quantize: a bad tensor (shape, blocks or format)");
	const size_t n = (size_t)t->rows * t->cols;
	const int nbr = (t->rows + t->br - 1) / t->br, nbc = (t->cols + t->bc - 1) / t->bc;
	if (amax) /* raised, not set (ops.h) */
		amax_into(amax, x, n, true);
	if (!n)
		return;
	const int tr = how->transpose ? 1 : 0;
	switch (how->how) {
	case KOPS_FP8_GIVEN: {
		if (!(how->scale > 0.0f) || !isfinite(how->scale))
			CUDA_BUG("fp8_quantize: a GIVEN scale must be positive and finite");
		const float si = fp8_div(1.0f, how->scale);
		launch<quant_given_kernel>(grid_for(n), THREADS, 0, t->q, t->sinv, x, t->rows, t->cols, nbr * nbc,
					   how->scale, si, (int)t->fmt, tr);
		break;
	}
	case KOPS_FP8_AMAX:
	case KOPS_FP8_MX:
	case KOPS_FP8_TENSOR: {
		if (nbr * nbc == 1 && n >= QUANT_WHOLE_MIN) {
			/* [0] the amax, [1] the scale, then the partials: one scratch holder */
			float *tmp = (float *)scratch_alloc((2 + AMAX_BLOCKS) * sizeof(float));
			amax_with(tmp, x, n, false, tmp + 2);
			launch<quant_scale_kernel>(1, 1, 0, tmp + 1, t->sinv, tmp, (int)t->fmt, (int)how->how,
						   how->pow2 ? 1 : 0);
			KERNEL_CHECK();
			launch<quant_devscale_kernel>(grid_for(n), THREADS, 0, t->q, x, t->rows, t->cols, tmp + 1,
						      (int)t->fmt, tr);
			KERNEL_CHECK();
			scratch_free(tmp);
			return;
		}
		/* a warp per 32 values of a block, up to QUANT_THREADS (MXFP8's 32-value blocks: one warp) */
		const size_t per = (size_t)t->br * t->bc, warps = (per + WARP - 1) / WARP;
		const unsigned thr = warps * WARP < QUANT_THREADS ? (unsigned)(warps * WARP) : QUANT_THREADS;
		launch<quant_block_kernel>(grid_blocks((size_t)nbr * nbc), thr, 0, t->q, t->sinv, x, t->rows, t->cols,
					   t->br, t->bc, nbc, (int)t->fmt, (int)how->how, how->pow2 ? 1 : 0, tr);
		break;
	}
	default:
		CUDA_BUG("fp8_quantize: unknown scaling mode");
	}
	KERNEL_CHECK();
}

/* ---- GEMM ---- */

/* deq(t) into fp32: out[r, c] = fp8_to_f32(q[r, c]) * sinv of its block (cpu order: one product) */
static __global__ void dequant_kernel(float *out, const uint8_t *q, const float *sinv, int rows, int cols, int br,
				      int bc, int fmt)
{
	const int nbc = (cols + bc - 1) / bc;
	GRID_STRIDE(i, (size_t)rows * cols) {
		int r = (int)(i / cols), c = (int)(i % cols);
		out[i] = fp8_mul(fp8_to_f32(q[i], (enum kops_fp8)fmt), sinv[(size_t)(r / br) * nbc + c / bc]);
	}
}

static __global__ void fp8_bias_fill_kernel(float *out, const float *bias, int M, int N)
{
	GRID_STRIDE(i, (size_t)M * N)
		out[i] = bias[i % N];
}

static __global__ void fp8_add_kernel(float *out, const float *x, size_t n)
{
	GRID_STRIDE(i, n)
		out[i] = __fadd_rn(out[i], x[i]);
}

struct fp8_key {
	int M, N, K, fa, fb;
	unsigned align[3]; /* a's codes, b's codes, out */
};

struct fp8_plan {
	struct fp8_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algo;
	bool ok;
};

#define FP8_PLANS 32
static struct fp8_plan fp8_plans[FP8_PLANS];
static int nfp8_plans, fp8_plan_next;
static unsigned long lt_gemms; /* kops_cuda_get_stats' fp8_lt_gemms */

unsigned long cuda_fp8_lt_gemms(void)
{
	return lt_gemms;
}

static cudaDataType_t fp8_type(enum kops_fp8 f)
{
	return f == KOPS_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

/* the descriptors of out^T (N x M) = b^T . a on cuBLASLt's FP8 path, and its algorithm */
static struct fp8_plan *fp8_plan_get(const struct fp8_key *key, const float *sinv_b, const float *sinv_a)
{
	for (int i = 0; i < nfp8_plans; i++)
		if (!memcmp(&fp8_plans[i].key, key, sizeof *key))
			return &fp8_plans[i];
	struct fp8_plan *p;
	if (nfp8_plans < FP8_PLANS) {
		p = &fp8_plans[nfp8_plans++];
	} else {
		p = &fp8_plans[fp8_plan_next];
		fp8_plan_next = (fp8_plan_next + 1) % FP8_PLANS;
		CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
		CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
		CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
		CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
	}
	p->key = *key;
	CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	int8_t fast = 0;
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
	/* the heuristic may look at them; each call sets its own */
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sinv_b,
						    sizeof sinv_b));
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sinv_a,
						    sizeof sinv_a));
	/* stored: A = b, K x N (ld K); B = a, K x M (ld K); C = D = out^T, N x M (ld N) */
	CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, fp8_type((enum kops_fp8)key->fb), key->K, key->N, key->K));
	CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, fp8_type((enum kops_fp8)key->fa), key->K, key->M, key->K));
	CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, key->N, key->M, key->N));

	const uint32_t al[4] = { key->align[1], key->align[0], key->align[2], key->align[2] };
	int s, got;
	p->ok = cuda_lt_algo(p->desc, p->a, p->b, p->c, al, &p->algo, &s, &got);
	if (!p->ok)
		fprintf(stderr,
			"megac: cuBLASLt has no FP8 algorithm for M=%d N=%d K=%d (%s x %s; status %d, %d results); "
			"dequantizing to fp32 instead\n",
			key->M, key->N, key->K, key->fa == KOPS_E4M3 ? "E4M3" : "E5M2",
			key->fb == KOPS_E4M3 ? "E4M3" : "E5M2", (int)s, got);
	return p;
}

/* cuBLASLt's FP8 GEMM of two per-tensor-scaled operands; 0, with nothing
 * queued, when the shape or the formats are not for it */
static int fp8_gemm_lt(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b, const float *bias,
		       bool accumulate)
{
	const int M = a->rows, N = b->rows, K = a->cols;
	if (a->fmt == KOPS_E5M2 && b->fmt == KOPS_E5M2)
		return 0;
	if (K % 16 || N % 4 || cuda_align_of(a->q) < 16 || cuda_align_of(b->q) < 16 || cuda_align_of(out) < 16)
		return 0;
	struct fp8_key key;
	memset(&key, 0, sizeof key); /* padding too: compared with memcmp */
	key.M = M;
	key.N = N;
	key.K = K;
	key.fa = (int)a->fmt;
	key.fb = (int)b->fmt;
	key.align[0] = cuda_align_of(a->q);
	key.align[1] = cuda_align_of(b->q);
	key.align[2] = cuda_align_of(out);
	struct fp8_plan *p = fp8_plan_get(&key, b->sinv, a->sinv);
	if (!p->ok)
		return 0;
	float beta = accumulate ? 1.0f : 0.0f;
	if (bias) {
		launch<fp8_bias_fill_kernel>(grid_for((size_t)M * N), THREADS, 0, out, bias, M, N);
		KERNEL_CHECK();
		beta = 1.0f;
	}
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b->sinv,
						    sizeof b->sinv));
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a->sinv,
						    sizeof a->sinv));
	cublasLtHandle_t h;
	void *ws;
	size_t wsb;
	cuda_lt_get(&h, &ws, &wsb);
	const float one = 1.0f;
	CUBLAS_CHECK(cublasLtMatmul(h, p->desc, &one, b->q, p->a, a->q, p->b, &beta, out, p->c, out, p->c, &p->algo,
				    ws, wsb, 0));
	KERNEL_CHECK();
	lt_gemms++;
	return 1;
}

static void cuda_fp8_gemm(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b,
			  const float *bias, bool accumulate)
{
	check_tensor(a, "fp8_gemm: a bad operand a (shape, blocks or format)");
	check_tensor(b, "fp8_gemm: a bad operand b (shape, blocks or format)");
	if (a->cols != b->cols)
		CUDA_BUG("fp8_gemm: a and b differ in K (their columns)");
	if (accumulate && bias)
		CUDA_BUG("fp8_gemm: accumulate takes no bias");
	const int M = a->rows, N = b->rows, K = a->cols;
	if (M == 0 || N == 0)
		return;
	if (K == 0) { /* an empty sum */
		if (accumulate)
			return;
		if (bias) {
			launch<fp8_bias_fill_kernel>(grid_for((size_t)M * N), THREADS, 0, out, bias, M, N);
			KERNEL_CHECK();
		} else {
			CUDA_CHECK(cudaMemset(out, 0, (size_t)M * N * sizeof(float)));
		}
		return;
	}
	const bool one_a = a->br >= a->rows && a->bc >= a->cols, one_b = b->br >= b->rows && b->bc >= b->cols;
	if (one_a && one_b && fp8_gemm_lt(out, a, b, bias, accumulate))
		return;

	/* dequantized operands (and the product, to be added) in scratch, 256-byte aligned each; the fp32
	 * table's linear_forward takes no scratch of its own (gemm.cu: fp32 operands are used in place) */
	const size_t ba = ((size_t)M * K * sizeof(float) + 255) & ~(size_t)255;
	const size_t bb = ((size_t)N * K * sizeof(float) + 255) & ~(size_t)255;
	const size_t bt = accumulate ? (size_t)M * N * sizeof(float) : 0;
	char *buf = (char *)scratch_alloc(ba + bb + bt);
	float *da = (float *)buf, *db = (float *)(buf + ba), *tmp = accumulate ? (float *)(buf + ba + bb) : out;
	launch<dequant_kernel>(grid_for((size_t)M * K), THREADS, 0, da, a->q, a->sinv, M, K, a->br, a->bc, (int)a->fmt);
	KERNEL_CHECK();
	launch<dequant_kernel>(grid_for((size_t)N * K), THREADS, 0, db, b->q, b->sinv, N, K, b->br, b->bc, (int)b->fmt);
	KERNEL_CHECK();
	const struct kops *f32 = kops_cuda(NULL);
	f32->linear_forward(tmp, da, db, bias, M, K, N);
	if (accumulate) {
		launch<fp8_add_kernel>(grid_for((size_t)M * N), THREADS, 0, out, tmp, (size_t)M * N);
		KERNEL_CHECK();
	}
	scratch_free(buf);
}

/* ---- transpose ---- */

#define TP_TILE 32
#define TP_ROWS 8 /* threadIdx.y's range: each thread moves TP_TILE / TP_ROWS bytes */

/* dq (C x R) = sq (R x C)^T; dsinv (nbc x nbr) = ssinv (nbr x nbc)^T */
static __global__ void fp8_transpose_kernel(uint8_t *dq, float *dsinv, const uint8_t *sq, const float *ssinv, int R,
					    int C, int nbr, int nbc)
{
	__shared__ uint8_t tile[TP_TILE][TP_TILE + 1];
	const int tx = threadIdx.x, ty = threadIdx.y, c0 = blockIdx.x * TP_TILE;
	const int ntr = (R + TP_TILE - 1) / TP_TILE;

	for (int tr = blockIdx.y; tr < ntr; tr += gridDim.y) {
		const int r0 = tr * TP_TILE;
		for (int i = ty; i < TP_TILE; i += TP_ROWS)
			if (r0 + i < R && c0 + tx < C)
				tile[i][tx] = sq[(size_t)(r0 + i) * C + c0 + tx];
		__syncthreads();
		for (int i = ty; i < TP_TILE; i += TP_ROWS)
			if (c0 + i < C && r0 + tx < R)
				dq[(size_t)(c0 + i) * R + r0 + tx] = tile[tx][i];
		__syncthreads(); /* the tile is refilled by the next row of tiles */
	}
	const size_t nthr = (size_t)gridDim.x * gridDim.y * TP_TILE * TP_ROWS;
	const size_t me = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * TP_TILE * TP_ROWS + (size_t)ty * TP_TILE + tx;
	for (size_t k = me; k < (size_t)nbr * nbc; k += nthr) {
		const size_t i = k / nbc, j = k % nbc;
		dsinv[j * nbr + i] = ssinv[k];
	}
}

static void cuda_fp8_transpose(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src)
{
	check_tensor(dst, "fp8_transpose: a bad dst (shape, blocks or format)");
	check_tensor(src, "fp8_transpose: a bad src (shape, blocks or format)");
	if (dst->rows != src->cols || dst->cols != src->rows || dst->br != src->bc || dst->bc != src->br ||
	    dst->fmt != src->fmt)
		CUDA_BUG("fp8_transpose: dst is not src's transpose (shape, blocks or format)");
	const int R = src->rows, C = src->cols;
	if (!R || !C) /* no codes, and no blocks either */
		return;
	const int nbr = (R + src->br - 1) / src->br, nbc = (C + src->bc - 1) / src->bc;
	const int ntr = (R + TP_TILE - 1) / TP_TILE, ntc = (C + TP_TILE - 1) / TP_TILE;
	const dim3 grid(grid_blocks((size_t)ntc), ntr < 65535 ? (unsigned)ntr : 65535u);
	launch<fp8_transpose_kernel>(grid, dim3(TP_TILE, TP_ROWS), 0, dst->q, dst->sinv, src->q, src->sinv, R, C, nbr,
				     nbc);
	KERNEL_CHECK();
}

/* ---- a shard of a block-scaled tensor (the distributed optimizer's FP8 weights) ---- */

/* start + n past the tensor's end */
static void check_shard(const struct kops_fp8_tensor *t, size_t n, size_t start, const char *what)
{
	check_tensor(t, what);
	const size_t total = (size_t)t->rows * t->cols;
	if (start > total || n > total - start)
		CUDA_BUG(what);
}

/* the grid index of element start + i's block */
static __device__ __forceinline__ unsigned shard_block(size_t start, size_t i, int cols, int br, int bc, int nbc)
{
	const size_t g = start + i, r = g / (size_t)cols;
	const int c = (int)(g - r * (size_t)cols);
	return (unsigned)(r / (size_t)br) * (unsigned)nbc + (unsigned)(c / bc);
}

/* Warps stride over the range whole (every lane takes part in the shuffles,
 * lanes past the end with no block), each lane its element's block and |x|
 * bits; the lanes of one run of equal blocks reduce by a segmented max scan
 * and the run's last lane raises the block's amax: the sign bit cleared
 * first (fp8_quantize's rule: the largest of |stored| and the new bits; the
 * sign, once cleared, is never set again, so any order of the runs' two
 * atomics gives that), then an integer atomicMax. */
static __global__ void amax_blocks_kernel(uint32_t *amax, const float *x, size_t n, size_t start, int cols, int br,
					  int bc, int nbc)
{
	const unsigned full = 0xffffffffu, none = 0xffffffffu;
	const int lane = threadIdx.x % WARP;
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t base = (size_t)blockIdx.x * blockDim.x + threadIdx.x - lane; base < n; base += stride) {
		const size_t i = base + lane;
		uint32_t v = 0;
		unsigned b = none;
		if (i < n) {
			b = shard_block(start, i, cols, br, bc, nbc);
			v = fp8_abs_bits(x[i]);
		}
		const unsigned prev = __shfl_up_sync(full, b, 1), next = __shfl_down_sync(full, b, 1);
		int head = lane == 0 || prev != b ? lane : 0; /* then: the first lane of this lane's run */
		for (int o = 1; o < WARP; o <<= 1) {
			int h = __shfl_up_sync(full, head, o);
			if (lane >= o && h > head)
				head = h;
		}
		for (int o = 1; o < WARP; o <<= 1) {
			uint32_t u = __shfl_up_sync(full, v, o);
			if (lane - o >= head && u > v)
				v = u;
		}
		if (i < n && (lane == WARP - 1 || next != b)) {
			atomicAnd(&amax[b], 0x7fffffffu);
			atomicMax(&amax[b], v);
		}
	}
}

static void cuda_fp8_amax_blocks(float *amax, const float *x, size_t n, size_t start, const struct kops_fp8_tensor *t)
{
	check_shard(t, n, start, "fp8_amax_blocks: a bad tensor, or a range past its end");
	if (!n)
		return;
	const int nbc = (t->cols + t->bc - 1) / t->bc;
	launch<amax_blocks_kernel>(grid_for(n), THREADS, 0, (uint32_t *)amax, x, n, start, t->cols, t->br, t->bc, nbc);
	KERNEL_CHECK();
}

/* codes of the range, each with its block's scale from the reduced amax (one
 * division per value: no scratch for a table of scales), and every block's
 * sinv from a grid-stride loop over all the grid's threads */
static __global__ void quant_blocks_kernel(uint8_t *q, float *sinv, const float *x, const float *amax, size_t n,
					   size_t start, int cols, int br, int bc, int nbc, int nb, int fmt, int pow2)
{
	const enum kops_fp8 f = (enum kops_fp8)fmt;
	float scale, si;
	GRID_STRIDE(i, n) {
		fp8_block_scale(amax[shard_block(start, i, cols, br, bc, nbc)], f, KOPS_FP8_AMAX, pow2 != 0, &scale,
				&si);
		q[start + i] = fp8_from_f32(fp8_mul(x[i], scale), f);
	}
	GRID_STRIDE(k, (size_t)nb) {
		fp8_block_scale(amax[k], f, KOPS_FP8_AMAX, pow2 != 0, &scale, &si);
		sinv[k] = si;
	}
}

static void cuda_fp8_quantize_blocks(const struct kops_fp8_tensor *t, const float *x, size_t n, size_t start,
				     const float *amax, bool pow2)
{
	check_shard(t, n, start, "fp8_quantize_blocks: a bad tensor, or a range past its end");
	const int nbr = (t->rows + t->br - 1) / t->br, nbc = (t->cols + t->bc - 1) / t->bc;
	const size_t nb = (size_t)nbr * nbc;
	if (!n && !nb)
		return;
	launch<quant_blocks_kernel>(grid_for(n > nb ? n : nb), THREADS, 0, t->q, t->sinv, x, amax, n, start, t->cols,
				    t->br, t->bc, nbc, (int)nb, (int)t->fmt, pow2 ? 1 : 0);
	KERNEL_CHECK();
}

void cuda_fp8_fill(struct kops *t)
{
	t->fp8_amax = cuda_fp8_amax;
	t->fp8_quantize = cuda_fp8_quantize;
	t->fp8_gemm = cuda_fp8_gemm;
	t->fp8_transpose = cuda_fp8_transpose;
	t->fp8_amax_blocks = cuda_fp8_amax_blocks;
	t->fp8_quantize_blocks = cuda_fp8_quantize_blocks;
}
