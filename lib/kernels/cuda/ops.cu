/*
 * ops.cu - the CUDA backend of the op table (ops.h, cuda_ops.h): the same
 * semantics as the CPU twins in cpu_ops.c / cpu_nn.c / cpu_attn.c, on
 * device memory. Written in the style of llm.c: each kernel's forward beside
 * its backward, plain loops that read like the CPU code they mirror.
 *
 * Conventions:
 *   - Everything runs on the legacy default stream (0), so ops are ordered
 *     after one another and after to_device; to_host, sumsq and nonfinite
 *     synchronise (cudaMemcpy to the host).
 *   - No float atomics anywhere: every output element is written by one
 *     thread in a fixed order, and parameter-grad reductions over rows go
 *     through per-row-block partials reduced in block order, so results are
 *     bit-identical run to run (the order differs from the CPU's, which sums
 *     dbias and sumsq in one pass in double: equal to within float
 *     rounding).
 *   - Scratch for partial sums and flags is one growing device buffer
 *     (scratch_alloc), not a stream-ordered pool, which some virtualised
 *     GPUs lack.
 *   - Every CUDA and cuBLASLt call is checked; a failure prints what
 *     failed, where, and aborts (the table contract has no error returns).
 *   - Every op of the table is filled (kops_check() at start-up makes a
 *     missing one a BUG naming it, never a NULL call).
 *
 * Global state: the op table itself (static, filled once), the scratch
 * buffer and the MEGAC_CUDA_SYNC switch: a backend singleton, read-only
 * after initialisation, the same for every caller; the op table is driven
 * from one host thread anyway.
 *
 * The helpers every file of the backend shares are in common.cuh; the
 * attention ops are in attn.cu (fp32) and attn_tc.cu (tensor cores); the
 * linear layers (cuBLASLt: fp32 operands here, bf16/fp16 ones in
 * kops_cuda_half's tables) are in gemm.cu; the Mamba-2 mixer's ops in ssm.cu.
 */
#include "common.cuh"

#include <pthread.h>
#include <string.h>

extern "C" {
#include "../cuda_ops.h"
}

/* Counts for kops_cuda_stats: the training tests check that no cudaMalloc
 * happens after the first iteration (every buffer is taken at set-up). */
static struct kops_cuda_stats alloc_stats;

/* Scratch for an op's partial sums: one device buffer that only grows
 * (plain cudaMalloc: stream-ordered memory pools are missing on some
 * virtualised GPUs). An op holds it from scratch_alloc to scratch_free and
 * ops run one after another on one host thread, as the table's callers do.
 * A buffer outgrown is retired, not freed: cudaFree waits for the whole
 * device, NCCL transfers on their streams too, and one that waits for a
 * peer still busy before its matching call would never finish (lib/dist).
 * Growing by at least doubling keeps the retired ones below the live size;
 * the first iteration finds the largest op, and nothing grows after it. */
static void *scratch_buf;
static size_t scratch_cap;
static size_t scratch_total; /* every scratch buffer's bytes, the outgrown ones too */
#define RETIRED_MAX 64
static int nretired; /* outgrown buffers, left allocated until the process ends */

void *scratch_alloc(size_t bytes)
{
	if (bytes > scratch_cap) {
		size_t cap = bytes > 2 * scratch_cap ? bytes : 2 * scratch_cap;
		if (scratch_buf) {
			if (nretired == RETIRED_MAX)
				CUDA_BUG("scratch grew more than 64 times");
			nretired++;
		}
		scratch_buf = NULL;
		CUDA_CHECK(cudaMalloc(&scratch_buf, cap));
		scratch_cap = cap;
		scratch_total += cap;
		alloc_stats.mallocs++;
		alloc_stats.bytes += cap;
	}
	return bytes ? scratch_buf : NULL;
}

void scratch_free(void *p)
{
	(void)p; /* kept for the next op */
}

/* ---- memory ---- */


static void *cuda_alloc(size_t bytes)
{
	void *p = NULL;
	if (bytes == 0)
		return NULL;
	cudaError_t e = cudaMalloc(&p, bytes);
	if (e != cudaSuccess) {
		size_t free_b = 0, total_b = 0;
		int dev = -1;
		cudaGetLastError();
		cudaGetDevice(&dev);
		cudaMemGetInfo(&free_b, &total_b);
		fprintf(stderr,
			"megac: out of GPU memory on device %d: a buffer of %.1f MiB does not fit (%.1f MiB "
			"free of %.1f MiB; %.1f MiB taken by megac so far): %s\n"
			"megac: report_memory with the same flags shows what each rank needs; a smaller "
			"--micro-batch-size, --recompute-granularity or more model parallelism lowers it\n",
			dev, bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0,
			alloc_stats.bytes / 1048576.0, cudaGetErrorString(e));
		exit(128);
	}
	CUDA_CHECK(cudaMemset(p, 0, bytes));
	alloc_stats.mallocs++;
	alloc_stats.bytes += bytes;
	return p;
}

static void cuda_free(void *p)
{
	if (!p)
		return;
	CUDA_CHECK(cudaFree(p));
	alloc_stats.frees++;
}

static void cuda_to_host(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void cuda_to_device(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void cuda_zero(float *x, size_t n)
{
	if (n)
		CUDA_CHECK(cudaMemset(x, 0, n * sizeof(float)));
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

static void cuda_copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
	if (width && rows)
		CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice));
}

/* Page-locked host memory: cudaMemcpy from and to it runs at the link's
 * speed and without a bounce through a driver buffer. */
static void *cuda_host_alloc(size_t bytes)
{
	void *p = NULL;
	if (bytes == 0)
		return NULL;
	cudaError_t e = cudaMallocHost(&p, bytes);
	if (e != cudaSuccess) {
		fprintf(stderr, "megac: cudaMallocHost of %zu bytes failed: %s\n", bytes,
			cudaGetErrorString(e));
		abort();
	}
	memset(p, 0, bytes);
	return p;
}

static void cuda_host_free(void *p)
{
	if (p)
		CUDA_CHECK(cudaFreeHost(p));
}

/* dst[c] += sum over blocks (in order) of part[b*stride + c] (the norms' parameter grads) */
__global__ void reduce_blocks_f_kernel(float *dst, const float *part, int nblk, int C,
				       size_t stride)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double acc = 0.0; /* cpu_reduce_blocks: block partials summed in double */
	for (int b = 0; b < nblk; b++)
		acc += part[(size_t)b * stride + c];
	dst[c] += (float)acc;
}

/* ---- embedding: out[n] = wte[tokens[n]] (+ wpe[positions[n]]) ---- */

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens,
					 const int32_t *positions, const float *wte,
					 const float *wpe, int N, int C)
{
	GRID_STRIDE(i, (size_t)N * C) {
		size_t n = i / C, c = i % C;
		int tok = tokens[n];
		/* a token of another vocabulary shard (-1) is a zero row (plus position) */
		float te = tok >= 0 ? wte[(size_t)tok * C + c] : 0.0f;
		if (wpe && positions) {
			float pe = wpe[(size_t)positions[n] * C + c];
			out[i] = tok >= 0 ? te + pe : pe;
		} else {
			out[i] = te;
		}
	}
}

/* One thread per channel c walks the rows n = 0..N-1 in order and adds into
 * dwte[tokens[n]][c] (and dwpe[positions[n]][c]): a token may occur in many
 * rows, and owning columns instead of rows needs no atomics and gives the
 * CPU's summation order exactly. Parallelism is only C threads; good enough
 * for now (a sort-by-token scheme would be the faster deterministic one). */
__global__ void embedding_backward_kernel(float *dwte, float *dwpe, const float *dout,
					  const int32_t *tokens, const int32_t *positions, int N,
					  int C)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	bool pos = dwpe && positions;
	for (int n = 0; n < N; n++) {
		float d = dout[(size_t)n * C + c];
		int tok = tokens[n];
		if (dwte && tok >= 0)
			dwte[(size_t)tok * C + c] += d;
		if (pos)
			dwpe[(size_t)positions[n] * C + c] += d;
	}
}

static void cuda_embedding_forward(float *out, const int32_t *tokens, const int32_t *positions,
				   const float *wte, const float *wpe, int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	launch<embedding_forward_kernel>(grid_for((size_t)N * C), THREADS, 0, out, tokens, positions, wte,
								       wpe, N, C);
	KERNEL_CHECK();
}

static void cuda_embedding_backward(float *dwte, float *dwpe, const float *dout,
				    const int32_t *tokens, const int32_t *positions, int N, int C)
{
	if (N <= 0 || C <= 0 || (!dwte && !(dwpe && positions)))
		return;
	launch<embedding_backward_kernel>((C + THREADS - 1) / THREADS, THREADS, 0, dwte, dwpe, dout, tokens,
									     positions, N, C);
	KERNEL_CHECK();
}

/* ---- LayerNorm: out = (x - mean) * rstd * w + b ----
 * One warp per row; the mean and variance are summed in double, two passes
 * (cpu_layernorm_forward). */

#define ROWS_PER_BLOCK (THREADS / WARP)

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
					 const float *w, const float *b, int N, int C, float eps)
{
	int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
	if (n >= N)
		return;
	const float *x = inp + (size_t)n * C;
	float *o = out + (size_t)n * C;
	double sum = 0.0;
	for (int c = lane; c < C; c += WARP)
		sum += x[c];
	sum = warp_sumd(sum);
	float m = (float)(sum / C);
	double sq = 0.0;
	for (int c = lane; c < C; c += WARP) {
		float d = x[c] - m;
		sq += (double)d * d;
	}
	sq = warp_sumd(sq);
	float s = 1.0f / sqrtf((float)(sq / C) + eps);
	for (int c = lane; c < C; c += WARP)
		o[c] = b ? (x[c] - m) * s * w[c] + b[c] : (x[c] - m) * s * w[c];
	if (lane == 0) {
		mean[n] = m;
		rstd[n] = s;
	}
}

/*
 * With xhat = (x - mean) * rstd and y = xhat * w + b:
 *   dxhat = dout * w
 *   dinp  = rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat))
 * one warp per row, sums in float (as the CPU).
 */
__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
					       const float *w, const float *mean,
					       const float *rstd, int N, int C)
{
	int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
	if (n >= N)
		return;
	const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
	const float m = mean[n], s = rstd[n];
	float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
	for (int c = lane; c < C; c += WARP) {
		float xhat = (x[c] - m) * s, dxhat = dy[c] * w[c];
		sum_dxhat += dxhat;
		sum_dxhat_xhat += dxhat * xhat;
	}
	sum_dxhat = warp_sum(sum_dxhat);
	sum_dxhat_xhat = warp_sum(sum_dxhat_xhat);
	const float mean_dxhat = sum_dxhat / C, mean_dxhat_xhat = sum_dxhat_xhat / C;
	float *dx = dinp + (size_t)n * C;
	for (int c = lane; c < C; c += WARP) {
		float xhat = (x[c] - m) * s, dxhat = dy[c] * w[c];
		dx[c] = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
	}
}

/* Per block of ROWS rows, one thread per column, rows in order, in float
 * (cpu_layernorm_backward's partials): part[blk] = [dw partial | db partial]. */
__global__ void layernorm_backward_partial_kernel(float *part, const float *dout,
						  const float *inp, const float *mean,
						  const float *rstd, int N, int C, int nblk)
{
	int tiles = (C + THREADS - 1) / THREADS;
	int blk = blockIdx.x / tiles, c = (blockIdx.x % tiles) * THREADS + threadIdx.x;
	if (blk >= nblk || c >= C)
		return;
	int n0 = blk * ROWS, n1 = n0 + ROWS < N ? n0 + ROWS : N;
	float pw = 0.0f, pb = 0.0f;
	for (int n = n0; n < n1; n++) {
		float x = inp[(size_t)n * C + c], dy = dout[(size_t)n * C + c];
		pw += dy * ((x - mean[n]) * rstd[n]);
		pb += dy;
	}
	part[(size_t)blk * 2 * C + c] = pw;
	part[(size_t)blk * 2 * C + C + c] = pb;
}

static void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
				   const float *w, const float *b, int N, int C, float eps)
{
	if (N <= 0)
		return;
	launch<layernorm_forward_kernel>((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, THREADS, 0,
		out, mean, rstd, inp, w, b, N, C, eps);
	KERNEL_CHECK();
}

static void cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
				    const float *inp, const float *w, const float *mean,
				    const float *rstd, int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	if (dinp) {
		launch<layernorm_backward_dinp_kernel>((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, THREADS, 0,
			dinp, dout, inp, w, mean, rstd, N, C);
		KERNEL_CHECK();
	}
	if (!dw && !db)
		return;
	int nblk = (N + ROWS - 1) / ROWS, tiles = (C + THREADS - 1) / THREADS;
	float *part = (float *)scratch_alloc((size_t)nblk * 2 * C * sizeof(float));
	launch<layernorm_backward_partial_kernel>((unsigned)nblk * tiles, THREADS, 0, part, dout, inp, mean,
									       rstd, N, C, nblk);
	KERNEL_CHECK();
	if (dw) {
		launch<reduce_blocks_f_kernel>(tiles, THREADS, 0, dw, part, nblk, C, 2 * (size_t)C);
		KERNEL_CHECK();
	}
	if (db) {
		launch<reduce_blocks_f_kernel>(tiles, THREADS, 0, db, part + C, nblk, C, 2 * (size_t)C);
		KERNEL_CHECK();
	}
	scratch_free(part);
}

/* ---- RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ---- */

__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *w,
				       int N, int C, float eps)
{
	int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
	if (n >= N)
		return;
	const float *x = inp + (size_t)n * C;
	float *o = out + (size_t)n * C;
	double sq = 0.0;
	for (int c = lane; c < C; c += WARP)
		sq += (double)x[c] * x[c];
	sq = warp_sumd(sq);
	float s = 1.0f / sqrtf((float)(sq / C) + eps);
	for (int c = lane; c < C; c += WARP)
		o[c] = x[c] * s * w[c];
	if (lane == 0)
		rstd[n] = s;
}

/*
 * y_c = x_c r w_c with r = (mean(x^2) + eps)^-1/2:
 *   dinp_j = r (dout_j w_j - x_j r^2 mean_c(dout_c w_c x_c))
 */
__global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
					     const float *w, const float *rstd, int N, int C)
{
	int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
	if (n >= N)
		return;
	const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
	const float s = rstd[n];
	float sum = 0.0f;
	for (int c = lane; c < C; c += WARP)
		sum += dy[c] * w[c] * x[c];
	sum = warp_sum(sum);
	const float k = s * s * (sum / C);
	float *dx = dinp + (size_t)n * C;
	for (int c = lane; c < C; c += WARP)
		dx[c] = s * (dy[c] * w[c] - x[c] * k);
}

/* dw partials per ROWS-row block: part[blk][c] = sum_n dout * (x * r), in float */
__global__ void rmsnorm_backward_partial_kernel(float *part, const float *dout, const float *inp,
						const float *rstd, int N, int C, int nblk)
{
	int tiles = (C + THREADS - 1) / THREADS;
	int blk = blockIdx.x / tiles, c = (blockIdx.x % tiles) * THREADS + threadIdx.x;
	if (blk >= nblk || c >= C)
		return;
	int n0 = blk * ROWS, n1 = n0 + ROWS < N ? n0 + ROWS : N;
	float pw = 0.0f;
	for (int n = n0; n < n1; n++)
		pw += dout[(size_t)n * C + c] * (inp[(size_t)n * C + c] * rstd[n]);
	part[(size_t)blk * C + c] = pw;
}

static void cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
				 int C, float eps)
{
	if (N <= 0)
		return;
	launch<rmsnorm_forward_kernel>((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, THREADS, 0,
		out, rstd, inp, w, N, C, eps);
	KERNEL_CHECK();
}

static void cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
				  const float *w, const float *rstd, int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	if (dinp) {
		launch<rmsnorm_backward_dinp_kernel>((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, THREADS, 0,
			dinp, dout, inp, w, rstd, N, C);
		KERNEL_CHECK();
	}
	if (!dw)
		return;
	int nblk = (N + ROWS - 1) / ROWS, tiles = (C + THREADS - 1) / THREADS;
	float *part = (float *)scratch_alloc((size_t)nblk * C * sizeof(float));
	launch<rmsnorm_backward_partial_kernel>((unsigned)nblk * tiles, THREADS, 0, part, dout, inp, rstd, N,
									     C, nblk);
	KERNEL_CHECK();
	launch<reduce_blocks_f_kernel>(tiles, THREADS, 0, dw, part, nblk, C, (size_t)C);
	KERNEL_CHECK();
	scratch_free(part);
}

/* ---- GELU ---- */

#define GELU_S 0.79788456f /* sqrt(2/pi), Megatron's literal */
#define GELU_K 0.044715f

/* Phi(x) = 0.5 erfc(-x/sqrt2) by the same Chebyshev fit (Numerical Recipes'
 * erfcc, error < 1.2e-7) the CPU uses, so both backends compute the same
 * function, not merely two close ones. */
__device__ __forceinline__ float normal_cdf(float x)
{
	const float z = fabsf(x) * 0.70710678118654752f;
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
	const float erfc_z = t * megac_expf(q - z * z); /* erfc(|x|/sqrt2) */
	return 0.5f * (x > 0.0f ? 2.0f - erfc_z : erfc_z);
}

/* tanh form as x sigmoid(2u) = x / (1 + e^-2u) (cpu_gelu_forward) */
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n, int kind)
{
	GRID_STRIDE(i, n) {
		float x = inp[i];
		if (kind == KOPS_GELU_TANH) {
			float u = GELU_S * x * (1.0f + GELU_K * x * x);
			out[i] = x / (1.0f + megac_expf(-2.0f * u));
		} else {
			out[i] = x * normal_cdf(x);
		}
	}
}

/* tanh: Megatron's bias_gelu_back, t = tanh(u) = 2 sigmoid(2u) - 1,
 *   ff = 0.5x (1 - t^2)(0.79788456 + 0.1070322243 x^2) + 0.5 (1 + t)
 * erf: d/dx [x Phi(x)] = Phi(x) + x phi(x) */
__global__ void gelu_backward_kernel(float *dinp, const float *dout, const float *inp, size_t n,
				     int kind)
{
	GRID_STRIDE(i, n) {
		float x = inp[i];
		if (kind == KOPS_GELU_TANH) {
			float u = GELU_S * x * (1.0f + GELU_K * x * x);
			float t = 2.0f / (1.0f + megac_expf(-2.0f * u)) - 1.0f;
			float ff = 0.5f * x * ((1.0f - t * t) * (GELU_S + 0.1070322243f * x * x)) +
				   0.5f * (1.0f + t);
			dinp[i] = ff * dout[i];
		} else {
			float pdf = 0.3989422804014327f * megac_expf(-0.5f * x * x);
			dinp[i] = dout[i] * (normal_cdf(x) + x * pdf);
		}
	}
}

static void cuda_gelu_forward(float *out, const float *inp, size_t n, enum kops_gelu kind)
{
	if (kind != KOPS_GELU_TANH && kind != KOPS_GELU_ERF)
		CUDA_BUG("unknown gelu kind");
	if (n == 0)
		return;
	launch<gelu_forward_kernel>(grid_for(n), THREADS, 0, out, inp, n, (int)kind);
	KERNEL_CHECK();
}

static void cuda_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n,
			       enum kops_gelu kind)
{
	if (kind != KOPS_GELU_TANH && kind != KOPS_GELU_ERF)
		CUDA_BUG("unknown gelu kind");
	if (n == 0)
		return;
	launch<gelu_backward_kernel>(grid_for(n), THREADS, 0, dinp, dout, inp, n, (int)kind);
	KERNEL_CHECK();
}

/* ---- SwiGLU: inp[N, 2F] = [gate | up]; out = silu(gate) * up ---- */

__global__ void swiglu_forward_kernel(float *out, const float *inp, int N, int F)
{
	GRID_STRIDE(i, (size_t)N * F) {
		size_t n = i / F, j = i % F;
		const float *gate = inp + n * 2 * F, *up = gate + F;
		out[i] = gate[j] / (1.0f + megac_expf(-gate[j])) * up[j];
	}
}

/* dgate = dout * up * sig (1 + g (1 - sig)),  dup = dout * silu(g) */
__global__ void swiglu_backward_kernel(float *dinp, const float *dout, const float *inp, int N,
				       int F)
{
	GRID_STRIDE(i, (size_t)N * F) {
		size_t n = i / F, j = i % F;
		const float *gate = inp + n * 2 * F, *up = gate + F;
		float *dgate = dinp + n * 2 * F, *dup = dgate + F;
		float g = gate[j], sig = 1.0f / (1.0f + megac_expf(-g)), dy = dout[i];
		dgate[j] = dy * up[j] * (sig * (1.0f + g * (1.0f - sig)));
		dup[j] = dy * (g * sig);
	}
}

static void cuda_swiglu_forward(float *out, const float *inp, int N, int F)
{
	if (N <= 0 || F <= 0)
		return;
	launch<swiglu_forward_kernel>(grid_for((size_t)N * F), THREADS, 0, out, inp, N, F);
	KERNEL_CHECK();
}

static void cuda_swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F)
{
	if (N <= 0 || F <= 0)
		return;
	launch<swiglu_backward_kernel>(grid_for((size_t)N * F), THREADS, 0, dinp, dout, inp, N, F);
	KERNEL_CHECK();
}

/* ---- fused QKV split (+ RoPE) ----
 * One thread per channel of a piece: qkv row bt holds, for each group G,
 * pieces j = 0..m+1 ([m query heads | key | value], k channels each);
 * piece p = G*(m+2) + j. Channel i < rot of a query or key belongs to the
 * rotation pair (i0, i1), i0 < i1: (i, i+half) / (i-half, i) in rotate-half
 * with half = rot/2, (i, i+1) / (i-1, i) interleaved. Forward
 * (cpu_rope_forward):
 *   y[i0]       = x[i0] c[i0] - x[i1] s[i0]
 *   y[i1]       = x[i1] c[i1] + x[i0] s[i1]
 *   y[i]        = x[i]                                  (i >= rot, or values)
 * Backward is the transpose (cpu_rope_backward):
 *   dx[i0]      = dy[i0] c[i0] + dy[i1] s[i1]
 *   dx[i1]      = dy[i1] c[i1] - dy[i0] s[i0]
 */

/* where piece p of token (b, t) lives in q/kk/v, and its rotary width */
__device__ __forceinline__ size_t qkv_dest(int *which, int *r, int p, int b, int t, int T, int a,
					   int g, int k, int m, int rot)
{
	int G = p / (m + 2), j = p % (m + 2);
	*r = j <= m ? rot : 0; /* rotate queries and keys, not values */
	if (j < m) {
		*which = 0;
		return (((size_t)b * a + G * m + j) * T + t) * k;
	}
	*which = j == m ? 1 : 2;
	return (((size_t)b * g + G) * T + t) * k;
}

/* channel i's partner in its rotation pair; true when i is the pair's first */
__device__ __forceinline__ bool rope_partner(int i, int r, bool interleaved, int *other)
{
	int half = r / 2;
	bool first = interleaved ? (i % 2 == 0) : (i < half);
	*other = interleaved ? (first ? i + 1 : i - 1) : (first ? i + half : i - half);
	return first;
}

__global__ void qkv_split_forward_kernel(float *q, float *kk, float *v, const float *qkv,
					 const float *cos, const float *sin, int B, int T, int a,
					 int g, int k, int rot, bool interleaved)
{
	const int m = a / g, P = a + 2 * g;
	GRID_STRIDE(e, (size_t)B * T * P * k) {
		int i = (int)(e % k);
		int p = (int)((e / k) % P);
		size_t bt = e / ((size_t)k * P);
		int b = (int)(bt / T), t = (int)(bt % T);
		int which, r;
		size_t off = qkv_dest(&which, &r, p, b, t, T, a, g, k, m, rot);
		float *y = (which == 0 ? q : which == 1 ? kk : v) + off;
		const float *x = qkv + e - i; /* start of this piece */
		float val;
		if (i < r) {
			const float *c = cos + (size_t)t * rot, *s = sin + (size_t)t * rot;
			int o;
			if (rope_partner(i, r, interleaved, &o))
				val = x[i] * c[i] - x[o] * s[i];
			else
				val = x[i] * c[i] + x[o] * s[i];
		} else {
			val = x[i];
		}
		y[i] = val;
	}
}

__global__ void qkv_split_backward_kernel(float *dqkv, const float *dq, const float *dk,
					  const float *dv, const float *cos, const float *sin, int B,
					  int T, int a, int g, int k, int rot, bool interleaved)
{
	const int m = a / g, P = a + 2 * g;
	GRID_STRIDE(e, (size_t)B * T * P * k) {
		int i = (int)(e % k);
		int p = (int)((e / k) % P);
		size_t bt = e / ((size_t)k * P);
		int b = (int)(bt / T), t = (int)(bt % T);
		int which, r;
		size_t off = qkv_dest(&which, &r, p, b, t, T, a, g, k, m, rot);
		const float *dy = (which == 0 ? dq : which == 1 ? dk : dv) + off;
		float val;
		if (i < r) {
			const float *c = cos + (size_t)t * rot, *s = sin + (size_t)t * rot;
			int o;
			if (rope_partner(i, r, interleaved, &o))
				val = dy[i] * c[i] + dy[o] * s[o];
			else
				val = dy[i] * c[i] - dy[o] * s[o];
		} else {
			val = dy[i];
		}
		dqkv[e] = val;
	}
}

static void qkv_check(int a, int g, int k, int rot)
{
	if (a <= 0 || g <= 0 || a % g != 0)
		CUDA_BUG("attention: heads do not split into groups");
	if (rot < 0 || rot > k || rot % 2 != 0)
		CUDA_BUG("attention: rotary dim must be even and at most the head dim");
}

static void cuda_qkv_split_forward(float *q, float *kk, float *v, const float *qkv,
				   const float *cos, const float *sin, int B, int T, int a, int g,
				   int k, int rot, bool interleaved)
{
	qkv_check(a, g, k, rot);
	size_t n = (size_t)B * T * (a + 2 * g) * k;
	if (n == 0)
		return;
	launch<qkv_split_forward_kernel>(grid_for(n), THREADS, 0, q, kk, v, qkv, cos, sin, B, T, a, g, k,
							   rot, interleaved);
	KERNEL_CHECK();
}

static void cuda_qkv_split_backward(float *dqkv, const float *dq, const float *dk,
				    const float *dv, const float *cos, const float *sin, int B,
				    int T, int a, int g, int k, int rot, bool interleaved)
{
	qkv_check(a, g, k, rot);
	size_t n = (size_t)B * T * (a + 2 * g) * k;
	if (n == 0)
		return;
	launch<qkv_split_backward_kernel>(grid_for(n), THREADS, 0, dqkv, dq, dk, dv, cos, sin, B, T, a, g,
							    k, rot, interleaved);
	KERNEL_CHECK();
}

/* ---- residual dropout: out = residual + dropout(x) ----
 * Element i is kept when uniform(seed, offset + i) >= p and then scaled by
 * keep_scale = 1.0f / (1.0f - p) (fp32, computed on the host as the CPU
 * does). __fmul_rn keeps nvcc from fusing the scale into the add, so the
 * rounding is the CPU's (x * s rounded, then added). residual may be NULL. */
__global__ void dropout_apply_kernel(float *out, const float *residual, const float *x, size_t n,
				     float p, float keep_scale, uint64_t seed, uint64_t offset)
{
	GRID_STRIDE(i, n) {
		float s = philox_uniform(seed, offset + i) >= p ? keep_scale : 0.0f;
		float y = __fmul_rn(x[i], s);
		out[i] = residual ? residual[i] + y : y;
	}
}

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n)
{
	GRID_STRIDE(i, n)
		out[i] = a[i] + b[i];
}

static void cuda_add(float *out, const float *a, const float *b, size_t n)
{
	if (n == 0)
		return;
	launch<add_kernel>(grid_for(n), THREADS, 0, out, a, b, n);
	KERNEL_CHECK();
}

static void cuda_dropout_add_forward(float *out, const float *residual, const float *x, size_t n,
				     float p, uint64_t seed, uint64_t offset)
{
	if (n == 0)
		return;
	if (p == 0.0f) {
		cuda_add(out, residual, x, n);
		return;
	}
	launch<dropout_apply_kernel>(grid_for(n), THREADS, 0, out, residual, x, n, p, 1.0f / (1.0f - p),
						       seed, offset);
	KERNEL_CHECK();
}

static void cuda_dropout_backward(float *dx, const float *dout, size_t n, float p, uint64_t seed,
				  uint64_t offset)
{
	if (n == 0)
		return;
	if (p == 0.0f) {
		if (dx != dout)
			CUDA_CHECK(cudaMemcpy(dx, dout, n * sizeof(float), cudaMemcpyDeviceToDevice));
		return;
	}
	launch<dropout_apply_kernel>(grid_for(n), THREADS, 0, dx, NULL, dout, n, p, 1.0f / (1.0f - p), seed,
						       offset);
	KERNEL_CHECK();
}

/* ---- softmax cross-entropy ----
 * Forward: one block per row. Row max in float (NaN ignored by the max, as
 * the CPU's "x > m ? x : m"; a NaN logit still makes the sum NaN), the sum of
 * exp(x - max) in double, lse = max + (float)log(sum). A target outside
 * [-1, V) is a caller bug: the CPU aborts, here the kernel prints and traps
 * (the next CUDA call then aborts). */

#define XENT_THREADS 512

__global__ void xent_forward_kernel(float *losses, float *lse, const float *logits,
				    const int32_t *targets, int N, int V)
{
	int n = blockIdx.x;
	if (n >= N)
		return;
	const float *x = logits + (size_t)n * V;
	float mx = -INFINITY;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		mx = x[j] > mx ? x[j] : mx;
	mx = block_max(mx);
	double sum = 0.0;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		sum += (double)megac_expf(x[j] - mx);
	sum = block_sumd(sum);
	if (threadIdx.x == 0) {
		int t = targets[n];
		if (t < -1 || t >= V) {
			printf("megac: BUG: cross-entropy target %d outside [-1, %d)\n", t, V);
			__trap();
		}
		float l = mx + (float)log(sum);
		lse[n] = l;
		losses[n] = t >= 0 ? l - x[t] : l; /* -1: the target is in another shard */
	}
}

/* dlogits = (exp(x - lse) - onehot) * dloss. Each element is read and then
 * written by the same thread, so dlogits may alias logits. */
__global__ void xent_backward_kernel(float *dlogits, const float *logits, const float *lse,
				     const int32_t *targets, const float *dloss, int N, int V)
{
	int n = blockIdx.x;
	if (n >= N)
		return;
	const float *x = logits + (size_t)n * V;
	float *dx = dlogits + (size_t)n * V;
	const float l = lse[n], dl = dloss[n];
	const int t = targets[n];
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float pj = megac_expf(x[j] - l);
		dx[j] = (j == t ? pj - 1.0f : pj) * dl;
	}
}

static void cuda_xent_forward(float *losses, float *lse, const float *logits,
			      const int32_t *targets, int N, int V)
{
	if (N <= 0)
		return;
	launch<xent_forward_kernel>(N, XENT_THREADS, 0, losses, lse, logits, targets, N, V);
	KERNEL_CHECK();
}

static void cuda_xent_backward(float *dlogits, const float *logits, const float *lse,
			       const int32_t *targets, const float *dloss, int N, int V)
{
	if (N <= 0 || V <= 0)
		return;
	launch<xent_backward_kernel>(N, XENT_THREADS, 0, dlogits, logits, lse, targets, dloss, N, V);
	KERNEL_CHECK();
}

/* ---- vector helpers ---- */

__global__ void scale_kernel(float *x, float s, size_t n)
{
	GRID_STRIDE(i, n)
		x[i] *= s;
}

static void cuda_scale(float *x, float s, size_t n)
{
	if (n == 0)
		return;
	launch<scale_kernel>(grid_for(n), THREADS, 0, x, s, n);
	KERNEL_CHECK();
}

/* Sum of squares in double: one block per chunk of SUM_CHUNK elements (the
 * CPU's chunking), then the chunk sums added in chunk order on the host. */
#define SUM_CHUNK 65536

__global__ void sumsq_kernel(double *part, const float *x, size_t n)
{
	size_t i0 = (size_t)blockIdx.x * SUM_CHUNK;
	size_t i1 = i0 + SUM_CHUNK < n ? i0 + SUM_CHUNK : n;
	double acc = 0.0;
	for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
		acc += (double)x[i] * x[i];
	acc = block_sumd(acc);
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}

static double cuda_sumsq(const float *x, size_t n)
{
	size_t nch = (n + SUM_CHUNK - 1) / SUM_CHUNK;
	if (nch == 0)
		return 0.0;
	if (nch > 0x7fffffffu)
		CUDA_BUG("sumsq: too many elements");
	double *part = (double *)scratch_alloc(nch * sizeof(double));
	launch<sumsq_kernel>((unsigned)nch, THREADS, 0, part, x, n);
	KERNEL_CHECK();
	double *host = (double *)malloc(nch * sizeof(double));
	if (!host)
		CUDA_BUG("sumsq: out of host memory");
	CUDA_CHECK(cudaMemcpy(host, part, nch * sizeof(double), cudaMemcpyDeviceToHost));
	scratch_free(part);
	double total = 0.0;
	for (size_t ch = 0; ch < nch; ch++)
		total += host[ch];
	free(host);
	return total;
}

/* Any inf or NaN (all exponent bits set). Threads that find one store 1 into
 * the flag: the same value from every writer, so no atomics are needed. */
__global__ void nonfinite_kernel(int *flag, const float *x, size_t n)
{
	GRID_STRIDE(i, n) {
		if ((__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u)
			*flag = 1;
	}
}

static int cuda_nonfinite(const float *x, size_t n)
{
	if (n == 0)
		return 0;
	int *flag = (int *)scratch_alloc(sizeof(int)), host = 0;
	CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), 0));
	launch<nonfinite_kernel>(grid_for(n), THREADS, 0, flag, x, n);
	KERNEL_CHECK();
	CUDA_CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
	scratch_free(flag);
	return host != 0;
}

/* ---- rounding to half precision and back: round_bf16/round_fp16 (common.cuh) ---- */

__global__ void round_kernel(float *out, const float *x, size_t n, int kind)
{
	GRID_STRIDE(i, n)
		out[i] = kind == KOPS_ROUND_BF16 ? round_bf16(x[i]) : round_fp16(x[i]);
}

static void cuda_round(float *out, const float *x, size_t n, enum kops_round kind)
{
	if (kind != KOPS_ROUND_BF16 && kind != KOPS_ROUND_FP16)
		CUDA_BUG("unknown rounding kind");
	if (n == 0)
		return;
	launch<round_kernel>(grid_for(n), THREADS, 0, out, x, n, (int)kind);
	KERNEL_CHECK();
}

/* ---- 16-bit storage: the CPU's cpu_narrow/cpu_widen, bit for bit ---- */

static __device__ __forceinline__ uint16_t fp16_bits(float r)
{
	uint32_t u = __float_as_uint(r), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	uint32_t h = a >= 0x7f800000u ? 0x7c00u | ((a >> 13) & 0x3ffu) :
		     a >= 0x38800000u ? (a - 0x38000000u) >> 13 :
					(uint32_t)__fmul_rn(__uint_as_float(a), 16777216.0f);
	return (uint16_t)(sign | h);
}

static __device__ __forceinline__ float fp16_value(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (e == 0)
		return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)mant, 1.0f / 16777216.0f)));
	if (e == 31)
		return __uint_as_float(sign | 0x7f800000u | (mant << 13));
	return __uint_as_float(sign | ((e + 112u) << 23) | (mant << 13));
}

__global__ void narrow_kernel(uint16_t *out, const float *x, size_t n, int kind)
{
	GRID_STRIDE(i, n)
		out[i] = kind == KOPS_ROUND_BF16 ? (uint16_t)(__float_as_uint(round_bf16(x[i])) >> 16) :
						   fp16_bits(round_fp16(x[i]));
}

__global__ void widen_kernel(float *out, const uint16_t *x, size_t n, int kind)
{
	GRID_STRIDE(i, n)
		out[i] = kind == KOPS_ROUND_BF16 ? __uint_as_float((uint32_t)x[i] << 16) : fp16_value(x[i]);
}

static void cuda_narrow(uint16_t *out, const float *x, size_t n, enum kops_round kind)
{
	if (kind != KOPS_ROUND_BF16 && kind != KOPS_ROUND_FP16)
		CUDA_BUG("unknown rounding kind");
	if (n == 0)
		return;
	launch<narrow_kernel>(grid_for(n), THREADS, 0, out, x, n, (int)kind);
	KERNEL_CHECK();
}

void cuda_widen16(float *out, const uint16_t *x, size_t n, enum kops_round kind)
{
	if (kind != KOPS_ROUND_BF16 && kind != KOPS_ROUND_FP16)
		CUDA_BUG("unknown rounding kind");
	if (n == 0)
		return;
	launch<widen_kernel>(grid_for(n), THREADS, 0, out, x, n, (int)kind);
	KERNEL_CHECK();
}

/* embedding_forward on 16-bit words: each value widened as it is read */
__global__ void embedding_forward_w16_kernel(float *out, const int32_t *tokens, const int32_t *positions,
					     const uint16_t *wte, const float *wpe, int N, int C, int kind)
{
	GRID_STRIDE(i, (size_t)N * C) {
		size_t n = i / C, c = i % C;
		int tok = tokens[n];
		float te = 0.0f;
		if (tok >= 0) {
			uint16_t h = wte[(size_t)tok * C + c];
			te = kind == KOPS_ROUND_BF16 ? __uint_as_float((uint32_t)h << 16) : fp16_value(h);
		}
		if (wpe && positions) {
			float pe = wpe[(size_t)positions[n] * C + c];
			out[i] = tok >= 0 ? te + pe : pe;
		} else {
			out[i] = te;
		}
	}
}

static void cuda_embedding_forward_w16(float *out, const int32_t *tokens, const int32_t *positions,
				       const uint16_t *wte, const float *wpe, int N, int C, enum kops_round kind)
{
	if (kind != KOPS_ROUND_BF16 && kind != KOPS_ROUND_FP16)
		CUDA_BUG("unknown rounding kind");
	if (N <= 0 || C <= 0)
		return;
	launch<embedding_forward_w16_kernel>(grid_for((size_t)N * C), THREADS, 0, out, tokens, positions, wte,
					     wpe, N, C, (int)kind);
	KERNEL_CHECK();
}

/* ---- AdamW: cpu_adamw step for step (torch.optim.AdamW, foreach=False) ----
 * The per-step scalars are computed on the host in double and rounded once;
 * lerp and addcmul are explicit fmaf, as on the CPU; sqrtf and '/' are IEEE
 * (nvcc's default -prec-sqrt/-prec-div), and p * decay is __fmul_rn so nvcc
 * cannot fuse it into the final add (the CPU, ISO C, never contracts). */
/* The per-step scalars of cpu_adamw, computed on the host in double and
 * rounded once (decay for a weight-decaying tensor; 1 for the others). */
struct adamw_scalars {
	float decay, w1, w1c, w2, b2, eps, neg_step_size, bc2_sqrt;
};

static struct adamw_scalars adamw_scalars_for(float lr, float b1, float b2, float eps, float wd, int step)
{
	struct adamw_scalars a;
	a.decay = (float)(1.0 - (double)lr * (double)wd);
	a.w1 = (float)(1.0 - (double)b1);
	a.w1c = 1.0f - a.w1;
	a.w2 = (float)(1.0 - (double)b2);
	a.b2 = b2;
	a.eps = eps;
	const double bc1 = 1.0 - pow((double)b1, (double)step);
	const double bc2 = 1.0 - pow((double)b2, (double)step);
	a.neg_step_size = (float)-((double)lr / bc1);
	a.bc2_sqrt = (float)sqrt(bc2);
	return a;
}

/* One element, step for step cpu_adamw */
static __device__ __forceinline__ void adamw_update(float *p, float g, float *m, float *v, float decay,
						    const struct adamw_scalars *a)
{
	float gi = g, mi = *m, vi = *v;
	float pi = __fmul_rn(*p, decay); /* rounded here: not fused into the update below */
	mi = a->w1 < 0.5f ? fmaf(a->w1, gi - mi, mi) : fmaf(-(gi - mi), a->w1c, gi);
	vi = fmaf(a->w2 * gi, gi, vi * a->b2);
	float denom = sqrtf(vi) / a->bc2_sqrt + a->eps;
	pi = pi + (a->neg_step_size * mi) / denom;
	*p = pi, *m = mi, *v = vi;
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, struct adamw_scalars a)
{
	GRID_STRIDE(i, n)
		adamw_update(p + i, g[i], m + i, v + i, a.decay, &a);
}

static void cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
		       float b2, float eps, float wd, int step)
{
	if (step < 1)
		CUDA_BUG("adamw step < 1");
	if (n == 0)
		return;
	launch<adamw_kernel>(grid_for(n), THREADS, 0, p, g, m, v, n, adamw_scalars_for(lr, b1, b2, eps, wd, step));
	KERNEL_CHECK();
}

/* ---- mixture of experts: the weighted sum of the experts' rows ----
 * cpu_moe_combine_*: out[t] sums its rows in the given order (a thread per
 * element, so the same order and the same float rounding); dw[r] is a
 * row's dot product in double, a warp per row. */
__global__ void moe_combine_forward_kernel(float *out, const float *y, const float *w, const int32_t *rowptr,
					   const int32_t *rows, int N, int C)
{
	GRID_STRIDE(i, (size_t)N * C) {
		int t = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
		float o = 0.0f;
		for (int j = rowptr[t]; j < rowptr[t + 1]; j++)
			o = o + w[rows[j]] * y[(size_t)rows[j] * C + c]; /* -fmad=false: rounded as the CPU */
		out[i] = o;
	}
}

__global__ void moe_combine_dy_kernel(float *dy, const float *dout, const float *w, const int32_t *tok, int R,
				      int C)
{
	GRID_STRIDE(i, (size_t)R * C) {
		int r = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
		dy[i] = w[r] * dout[(size_t)tok[r] * C + c];
	}
}

__global__ void moe_combine_dw_kernel(float *dw, const float *dout, const float *y, const int32_t *tok, int R, int C)
{
	int r = blockIdx.x * (THREADS / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
	if (r >= R)
		return;
	const float *d = dout + (size_t)tok[r] * C, *yr = y + (size_t)r * C;
	double acc = 0.0;
	for (int c = lane; c < C; c += WARP)
		acc += (double)d[c] * yr[c];
	acc = warp_sumd(acc);
	if (lane == 0)
		dw[r] = (float)acc;
}

static void cuda_moe_combine_forward(float *out, const float *y, const float *w, const int32_t *rowptr,
				     const int32_t *rows, int N, int C)
{
	if (N <= 0 || C <= 0)
		return;
	launch<moe_combine_forward_kernel>(grid_for((size_t)N * C), THREADS, 0, out, y, w, rowptr, rows, N, C);
	KERNEL_CHECK();
}

static void cuda_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y, const float *w,
				      const int32_t *tok, int R, int C)
{
	if (R <= 0 || C <= 0)
		return;
	if (dy) {
		launch<moe_combine_dy_kernel>(grid_for((size_t)R * C), THREADS, 0, dy, dout, w, tok, R, C);
		KERNEL_CHECK();
	}
	if (dw) {
		launch<moe_combine_dw_kernel>((unsigned)((R + THREADS / WARP - 1) / (THREADS / WARP)), THREADS, 0, dw, dout, y,
													tok, R, C);
		KERNEL_CHECK();
	}
}

/* ---- whole-model ops: every segment in one launch ----
 * The host cuts each segment into pieces of SUM_CHUNK elements (the CPU's
 * chunking for the sums) and sends the piece table with the launch; block b
 * takes piece b. The table and the sums' partials share the scratch buffer. */
struct seg_piece {
	size_t off;     /* first element in the parameter buffers */
	unsigned n;     /* elements, at most SUM_CHUNK */
	unsigned decay; /* AdamW: 1 when weight decay applies */
};

/* The pieces of segs into scratch (after `front` bytes kept for the
 * caller); *np pieces, *seg_of[i] the segment of piece i (host, malloc'd)
 * when seg_of is not NULL. Returns the device table. */
static struct seg_piece *seg_pieces(const struct kops_seg *segs, int nsegs, size_t front, size_t *np,
				    int **seg_of, void **scratch)
{
	size_t n = 0;
	for (int i = 0; i < nsegs; i++)
		n += (segs[i].n + SUM_CHUNK - 1) / SUM_CHUNK;
	*np = n;
	if (n == 0)
		return NULL;
	if (n > 0x7fffffffu)
		CUDA_BUG("whole-model op: too many pieces");
	struct seg_piece *host = (struct seg_piece *)malloc(n * sizeof(*host));
	int *of = seg_of ? (int *)malloc(n * sizeof(int)) : NULL;
	if (!host || (seg_of && !of))
		CUDA_BUG("whole-model op: out of host memory");
	size_t k = 0;
	for (int i = 0; i < nsegs; i++)
		for (size_t a = 0; a < segs[i].n; a += SUM_CHUNK, k++) {
			host[k].off = segs[i].off + a;
			host[k].n = (unsigned)(segs[i].n - a < SUM_CHUNK ? segs[i].n - a : SUM_CHUNK);
			host[k].decay = segs[i].decay;
			if (of)
				of[k] = i;
		}
	front = (front + 15) / 16 * 16;
	char *buf = (char *)scratch_alloc(front + n * sizeof(*host));
	struct seg_piece *dev = (struct seg_piece *)(buf + front);
	CUDA_CHECK(cudaMemcpy(dev, host, n * sizeof(*host), cudaMemcpyHostToDevice));
	free(host);
	if (seg_of)
		*seg_of = of;
	*scratch = buf;
	return dev;
}

__global__ void sumsq_segs_kernel(double *part, const float *x, const struct seg_piece *tab)
{
	const struct seg_piece pc = tab[blockIdx.x];
	double acc = 0.0;
	for (unsigned i = threadIdx.x; i < pc.n; i += blockDim.x)
		acc += (double)x[pc.off + i] * x[pc.off + i];
	acc = block_sumd(acc);
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}

/* The pieces' sums come back in order and are added per segment, then
 * segment by segment: cpu_sumsq_segs's association. */
static double cuda_sumsq_segs(const float *x, const struct kops_seg *segs, int nsegs)
{
	size_t total_pieces = 0;
	for (int i = 0; i < nsegs; i++)
		total_pieces += (segs[i].n + SUM_CHUNK - 1) / SUM_CHUNK;
	size_t np;
	int *seg_of = NULL;
	void *buf = NULL;
	struct seg_piece *tab = seg_pieces(segs, nsegs, total_pieces * sizeof(double), &np, &seg_of, &buf);
	if (np == 0)
		return 0.0;
	double *part = (double *)buf;
	launch<sumsq_segs_kernel>((unsigned)np, THREADS, 0, part, x, tab);
	KERNEL_CHECK();
	double *host = (double *)malloc(np * sizeof(double));
	if (!host)
		CUDA_BUG("sumsq_segs: out of host memory");
	CUDA_CHECK(cudaMemcpy(host, part, np * sizeof(double), cudaMemcpyDeviceToHost));
	scratch_free(buf);
	double total = 0.0, seg = 0.0;
	for (size_t i = 0; i < np; i++) {
		seg += host[i];
		if (i + 1 == np || seg_of[i + 1] != seg_of[i]) {
			total += seg;
			seg = 0.0;
		}
	}
	free(host);
	free(seg_of);
	return total;
}

/* adamw_update per piece: the weight decay of decaying pieces, 1 for the others */
__global__ void adamw_segs_kernel(float *p, const float *g, float *m, float *v, size_t mv_base,
				  const struct seg_piece *tab, struct adamw_scalars a)
{
	const struct seg_piece pc = tab[blockIdx.x];
	const float decay = pc.decay ? a.decay : 1.0f;
	for (unsigned j = threadIdx.x; j < pc.n; j += blockDim.x) {
		size_t i = pc.off + j, s = i - mv_base;
		adamw_update(p + s, g[i], m + s, v + s, decay, &a);
	}
}

static void cuda_adamw_segs(float *p, const float *g, float *m, float *v, size_t mv_base,
			    const struct kops_seg *segs, int nsegs, float lr, float b1, float b2, float eps,
			    float wd, int step)
{
	if (step < 1)
		CUDA_BUG("adamw step < 1");
	size_t np;
	void *buf = NULL;
	struct seg_piece *tab = seg_pieces(segs, nsegs, 0, &np, NULL, &buf);
	if (np == 0)
		return;
	/* a segment without decay multiplies by 1.0f, what (float)(1.0 - lr * 0.0)
	 * gives cpu_adamw with wd = 0 */
	launch<adamw_segs_kernel>((unsigned)np, THREADS, 0, p, g, m, v, mv_base, tab,
						    adamw_scalars_for(lr, b1, b2, eps, wd, step));
	KERNEL_CHECK();
	scratch_free(buf);
}

/* ---- AdamW on states in their storage formats: cpu_adamw_segs_lp, bit for bit ----
 * The host cuts the segments into pieces as adamw_segs does; each piece
 * carries its segment's scales (in: the stored ones; out: 1 / the new
 * ones). With an fp16 state, a first launch writes each piece's largest
 * updated magnitudes, the host takes each segment's maximum and its new
 * scales (one synchronisation per step, as the norm's), and a second
 * launch stores; otherwise one launch does it all. */
#define FP16_STATE_RANGE 32752.0f /* cpu_ops.c's CPU_FP16_STATE_RANGE */

struct lp_piece {
	size_t off;     /* first element, in the gradients' indexing */
	unsigned n;     /* at most SUM_CHUNK */
	unsigned decay; /* 1 when weight decay applies */
	float in[3];    /* the segment's stored scales (p, m, v) */
	float out[3];   /* 1 / its new scales (fp16 states) */
};

static __device__ __forceinline__ float lp_load(const void *x, size_t i, int t, float scale)
{
	if (t == KOPS_F32)
		return ((const float *)x)[i];
	uint16_t h = ((const uint16_t *)x)[i];
	return t == KOPS_BF16 ? __uint_as_float((uint32_t)h << 16) : __fmul_rn(fp16_value(h), scale);
}

static __device__ __forceinline__ void lp_store(void *x, size_t i, int t, float val, float rscale)
{
	if (t == KOPS_F32)
		((float *)x)[i] = val;
	else if (t == KOPS_BF16)
		((uint16_t *)x)[i] = (uint16_t)(__float_as_uint(round_bf16(val)) >> 16);
	else
		((uint16_t *)x)[i] = fp16_bits(round_fp16(__fmul_rn(val, rscale)));
}

/* the state's pointers and formats, by value in the launch */
struct lp_state {
	void *p, *m, *v;
	uint16_t *w16;
	int pt, mt, vt, w16_kind;
};

static __device__ __forceinline__ void lp_update(const struct lp_state &s, const struct lp_piece &pc, size_t k,
						 float g, float decay, const struct adamw_scalars *a, float r[3])
{
	r[0] = lp_load(s.p, k, s.pt, pc.in[0]);
	r[1] = lp_load(s.m, k, s.mt, pc.in[1]);
	r[2] = lp_load(s.v, k, s.vt, pc.in[2]);
	adamw_update(&r[0], g, &r[1], &r[2], decay, a);
}

/* pass 1: amax[3 * piece + state] of the updated values */
__global__ void adamw_lp_amax_kernel(float *amax, struct lp_state s, const float *g, size_t mv_base,
				     const struct lp_piece *tab, struct adamw_scalars a)
{
	const struct lp_piece pc = tab[blockIdx.x];
	const float decay = pc.decay ? a.decay : 1.0f;
	float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f;
	for (unsigned j = threadIdx.x; j < pc.n; j += blockDim.x) {
		float r[3];
		size_t i = pc.off + j;
		lp_update(s, pc, i - mv_base, g[i], decay, &a, r);
		m0 = fmaxf(m0, fabsf(r[0]));
		m1 = fmaxf(m1, fabsf(r[1]));
		m2 = fmaxf(m2, fabsf(r[2]));
	}
	m0 = block_max(m0);
	m1 = block_max(m1);
	m2 = block_max(m2);
	if (threadIdx.x == 0) {
		amax[3 * blockIdx.x] = m0;
		amax[3 * blockIdx.x + 1] = m1;
		amax[3 * blockIdx.x + 2] = m2;
	}
}

__global__ void adamw_lp_kernel(struct lp_state s, const float *g, size_t mv_base, const struct lp_piece *tab,
				struct adamw_scalars a)
{
	const struct lp_piece pc = tab[blockIdx.x];
	const float decay = pc.decay ? a.decay : 1.0f;
	for (unsigned j = threadIdx.x; j < pc.n; j += blockDim.x) {
		float r[3];
		size_t i = pc.off + j, k = i - mv_base;
		lp_update(s, pc, k, g[i], decay, &a, r);
		if (s.w16)
			s.w16[i] = s.w16_kind == KOPS_ROUND_BF16 ? (uint16_t)(__float_as_uint(round_bf16(r[0])) >> 16) :
								   fp16_bits(round_fp16(r[0]));
		lp_store(s.p, k, s.pt, r[0], pc.out[0]);
		lp_store(s.m, k, s.mt, r[1], pc.out[1]);
		lp_store(s.v, k, s.vt, r[2], pc.out[2]);
	}
}

static void cuda_adamw_segs_lp(const struct kops_adamw_lp *st, const float *g, size_t mv_base,
			       const struct kops_seg *segs, int nsegs, float lr, float b1, float b2, float eps, float wd,
			       int step)
{
	if (step < 1)
		CUDA_BUG("adamw step < 1");
	const int type[3] = { (int)st->p_type, (int)st->m_type, (int)st->v_type };
	bool scaled = type[0] == KOPS_FP16 || type[1] == KOPS_FP16 || type[2] == KOPS_FP16;
	if (scaled && !st->scale)
		CUDA_BUG("adamw_segs_lp: fp16 states without scales");
	size_t np = 0;
	for (int i = 0; i < nsegs; i++)
		np += (segs[i].n + SUM_CHUNK - 1) / SUM_CHUNK;
	if (np == 0)
		return;
	if (np > 0x7fffffffu)
		CUDA_BUG("adamw_segs_lp: too many pieces");
	struct lp_piece *host = (struct lp_piece *)malloc(np * sizeof(*host));
	int *seg_of = (int *)malloc(np * sizeof(int));
	float *amax = (float *)malloc(np * 3 * sizeof(float));
	if (!host || !seg_of || !amax)
		CUDA_BUG("adamw_segs_lp: out of host memory");
	size_t k = 0;
	for (int i = 0; i < nsegs; i++)
		for (size_t a = 0; a < segs[i].n; a += SUM_CHUNK, k++) {
			host[k].off = segs[i].off + a;
			host[k].n = (unsigned)(segs[i].n - a < SUM_CHUNK ? segs[i].n - a : SUM_CHUNK);
			host[k].decay = segs[i].decay;
			for (int t = 0; t < 3; t++) {
				host[k].in[t] = st->scale ? st->scale[3 * i + t] : 1.0f;
				host[k].out[t] = 1.0f;
			}
			seg_of[k] = i;
		}
	size_t amax_bytes = (np * 3 * sizeof(float) + 15) / 16 * 16;
	char *buf = (char *)scratch_alloc(amax_bytes + np * sizeof(*host));
	struct lp_piece *tab = (struct lp_piece *)(buf + amax_bytes);
	CUDA_CHECK(cudaMemcpy(tab, host, np * sizeof(*host), cudaMemcpyHostToDevice));
	struct lp_state s = { st->p, st->m, st->v, st->w16, type[0], type[1], type[2], (int)st->w16_kind };
	struct adamw_scalars sc = adamw_scalars_for(lr, b1, b2, eps, wd, step);
	if (scaled) {
		launch<adamw_lp_amax_kernel>((unsigned)np, THREADS, 0, (float *)buf, s, g, mv_base, tab, sc);
		KERNEL_CHECK();
		CUDA_CHECK(cudaMemcpy(amax, buf, np * 3 * sizeof(float), cudaMemcpyDeviceToHost));
		/* each segment's maximum over its pieces, its new scales (the CPU's
		 * arithmetic, in fp32 on the host), 1 / them into every piece */
		for (size_t a = 0; a < np;) {
			int i = seg_of[a];
			size_t b = a;
			float m[3] = { 0.0f, 0.0f, 0.0f };
			for (; b < np && seg_of[b] == i; b++)
				for (int t = 0; t < 3; t++)
					m[t] = fmaxf(m[t], amax[3 * b + t]);
			for (int t = 0; t < 3; t++) {
				if (type[t] != KOPS_FP16)
					continue;
				float ns = m[t] / FP16_STATE_RANGE, r = ns > 0.0f ? 1.0f / ns : 0.0f;
				st->scale[3 * i + t] = ns;
				for (size_t q = a; q < b; q++)
					host[q].out[t] = r;
			}
			a = b;
		}
		CUDA_CHECK(cudaMemcpy(tab, host, np * sizeof(*host), cudaMemcpyHostToDevice));
	}
	launch<adamw_lp_kernel>((unsigned)np, THREADS, 0, s, g, mv_base, tab, sc);
	KERNEL_CHECK();
	scratch_free(buf);
	free(host);
	free(seg_of);
	free(amax);
}

/* ---- the table ---- */

static struct kops cuda_table; /* filled once by table_init, read-only after */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
	struct kops *t = &cuda_table;
	t->name = "cuda";
	t->counts_only = false;
	t->alloc = cuda_alloc;
	t->free = cuda_free;
	t->to_host = cuda_to_host;
	t->to_device = cuda_to_device;
	t->zero = cuda_zero;
	t->copy = cuda_copy;
	t->copy_rows = cuda_copy_rows;
	t->host_alloc = cuda_host_alloc;
	t->host_free = cuda_host_free;
	t->embedding_forward = cuda_embedding_forward;
	t->embedding_backward = cuda_embedding_backward;
	t->embedding_forward_w16 = cuda_embedding_forward_w16;
	t->layernorm_forward = cuda_layernorm_forward;
	t->layernorm_backward = cuda_layernorm_backward;
	t->rmsnorm_forward = cuda_rmsnorm_forward;
	t->rmsnorm_backward = cuda_rmsnorm_backward;
	t->gelu_forward = cuda_gelu_forward;
	t->gelu_backward = cuda_gelu_backward;
	t->swiglu_forward = cuda_swiglu_forward;
	t->swiglu_backward = cuda_swiglu_backward;
	t->qkv_split_forward = cuda_qkv_split_forward;
	t->qkv_split_backward = cuda_qkv_split_backward;
	t->dropout_add_forward = cuda_dropout_add_forward;
	t->dropout_backward = cuda_dropout_backward;
	t->xent_forward = cuda_xent_forward;
	t->xent_backward = cuda_xent_backward;
	t->add = cuda_add;
	t->scale = cuda_scale;
	t->sumsq = cuda_sumsq;
	t->nonfinite = cuda_nonfinite;
	t->round = cuda_round;
	t->narrow = cuda_narrow;
	t->widen = cuda_widen16;
	t->adamw = cuda_adamw;
	t->moe_combine_forward = cuda_moe_combine_forward;
	t->moe_combine_backward = cuda_moe_combine_backward;
	t->sumsq_segs = cuda_sumsq_segs;
	t->adamw_segs = cuda_adamw_segs;
	t->adamw_segs_lp = cuda_adamw_segs_lp;
	cuda_gemm_fill(t, GEMM_F32);
	cuda_attn_fill(t);
	cuda_fp8_fill(t);
	cuda_ssm_fill(t);
	/* the block ops are flash-style on the GPU: no T x T probs in memory */
	t->flash = true;
	kops_check(t);
}

extern "C" void kops_cuda_get_stats(struct kops_cuda_stats *st)
{
	*st = alloc_stats;
	st->scratch_bytes = scratch_cap;
	st->held = scratch_total + gemm_workspace_bytes();
	st->fp8_lt_gemms = cuda_fp8_lt_gemms();
}

extern "C" void cuda_prepare_runtime(void); /* probe.cu */

extern "C" const struct kops *kops_cuda(const char **why)
{
	cuda_prepare_runtime();
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky error for later callers */
		if (why)
			*why = cudaGetErrorString(e);
		return NULL;
	}
	if (n <= 0) {
		if (why)
			*why = "no CUDA device is visible";
		return NULL;
	}
	/* The build carries sm_80 and sm_90 code only: make sure this GPU can
	 * run it (e.g. not an older card, nor a newer one without a matching image). */
	cudaFuncAttributes attr;
	e = cudaFuncGetAttributes(&attr, add_kernel);
	if (e != cudaSuccess) {
		cudaGetLastError();
		if (why)
			*why = cudaGetErrorString(e);
		return NULL;
	}
	pthread_once(&table_once, table_init);
	return &cuda_table;
}
