/*
 * common.cuh - what the files of the CUDA backend share: the checking
 * macros that name the file and line of a failed CUDA/cuBLAS call, launch
 * geometry, the one scratch buffer (ops.cu), warp and block reductions, the
 * counter-based Philox draw of cpu_rand.c and the bf16/fp16 rounding of
 * cpu_ops.c. Every device function here is static inline: each .cu file is
 * compiled on its own (no relocatable device code).
 *
 * nvcc is run without -Ilib, so ops.h is included by relative path; it is
 * plain C, hence the extern "C" around it.
 *
 * The same source runs on the emulated device (make emu, tests/emu): there
 * a host C++ compiler builds it with -DMEGAC_EMU against stand-ins for
 * cuda_runtime.h, cublasLt.h and nccl.h, and the kernels run in the
 * thread-block emulator. Only two things are spelled for both: every launch
 * goes through launch<kernel>() below, and the dynamic shared memory of a
 * kernel is DYN_SMEM(type) (extern __shared__ on the device).
 */
#ifndef MEGAC_KERNELS_CUDA_COMMON_CUH
#define MEGAC_KERNELS_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "../ops.h"
}

/* ---- error checking ---- */

static inline void cuda_check(cudaError_t e, const char *expr, const char *file, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "megac: CUDA error \"%s\" at %s:%d in %s\n", cudaGetErrorString(e), file,
			line, expr);
		abort();
	}
}
#define CUDA_CHECK(x) cuda_check((x), #x, __FILE__, __LINE__)
/* After every kernel launch: catches bad launch configurations at once.
 * Errors inside a kernel surface at the next synchronising call, which may
 * be another op's; MEGAC_CUDA_SYNC=1 in the environment synchronises after
 * every launch so the failing kernel is the one named (read once). */
static inline int sync_each_launch(void)
{
	static int mode = -1; /* a debugging switch, set once, read-only after */
	if (mode < 0) {
		const char *v = getenv("MEGAC_CUDA_SYNC");
		mode = v && *v && *v != '0';
	}
	return mode;
}

static inline void kernel_check(const char *file, int line)
{
	cuda_check(cudaGetLastError(), "kernel launch", file, line);
	if (sync_each_launch())
		/* the compute stream only: NCCL's streams may be waiting for a peer */
		cuda_check(cudaStreamSynchronize(cudaStreamLegacy), "kernel (MEGAC_CUDA_SYNC)", file, line);
}
#define KERNEL_CHECK() kernel_check(__FILE__, __LINE__)

static inline void cublas_check(cublasStatus_t s, const char *expr, const char *file, int line)
{
	if (s != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "megac: cuBLASLt error %d (%s) at %s:%d in %s\n", (int)s,
			cublasLtGetStatusString(s), file, line, expr);
		abort();
	}
}
#define CUBLAS_CHECK(x) cublas_check((x), #x, __FILE__, __LINE__)

/* a caller broke an op's contract (the CPU backend's BUG) */
static inline void cuda_bug(const char *msg, const char *file, int line)
{
	fprintf(stderr, "megac: BUG at %s:%d: %s\n", file, line, msg);
	abort();
}
#define CUDA_BUG(msg) cuda_bug((msg), __FILE__, __LINE__)

/* ---- launches ---- */

/* launch<K>(grid, block, smem, args...) is K<<<grid, block, smem>>>(args...)
 * on the legacy default stream: every kernel of the backend is launched
 * through here, so that the emulated build (which has no <<<>>>) can queue
 * it on its device instead, checking the configuration and that every
 * pointer argument is device memory. The arguments convert to the kernel's
 * parameter types as in a direct launch (launcher<K> takes them). */
template <auto K> struct launcher;
template <class... P, void (*K)(P...)> struct launcher<K> {
	void operator()(dim3 grid, dim3 block, size_t smem, P... args) const
	{
#ifdef MEGAC_EMU
		emu_launch_kernel<K>(grid, block, smem, cudaStreamLegacy, args...);
#else
		K<<<grid, block, smem>>>(args...);
#endif
	}
};
template <auto K> static constexpr launcher<K> launch{};

#ifdef MEGAC_EMU
#define DYN_SMEM(type) ((type *)emu_smem())
#else
extern __shared__ float4 megac_dyn_smem[];
#define DYN_SMEM(type) ((type *)megac_dyn_smem)
#endif

/* ---- launch geometry ---- */

#define THREADS 256
#define WARP 32
/* Parameter grads of the norms and the linear bias are summed over rows in
 * blocks of this many rows, then over blocks in order. */
#define ROWS 32

/* The largest power of two, up to 256, that divides the address (what
 * cuBLASLt's alignment preferences and plans key on). */
static inline unsigned cuda_align_of(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	unsigned al = 256;
	while (al > 1 && (a & (al - 1)))
		al >>= 1;
	return al;
}

/* Blocks for a grid-stride loop over n elements: enough to fill the GPU,
 * never more than the elements need. */
static inline unsigned grid_for(size_t n)
{
	size_t b = (n + THREADS - 1) / THREADS;
	if (b > 65536 * 4)
		b = 65536 * 4;
	return b ? (unsigned)b : 1u;
}

/* A grid of this many blocks, or CUDA_BUG when over the one-dimensional limit. */
static inline unsigned grid_blocks(size_t blocks)
{
	if (blocks > 0x7fffffffu)
		CUDA_BUG("grid too large");
	return (unsigned)blocks;
}

/* Blocks of a grid over n (sample, head) pairs x tiles of rows; one dimension. */
static inline unsigned grid_1d(size_t n, int rows, int tile)
{
	return grid_blocks(n * (size_t)((rows + tile - 1) / tile));
}

/* The shared memory opt-in beyond 48 KB, once per kernel instantiation (its
 * own static flag; the ops run on one host thread). */
template <typename F> static void smem_opt_in(F *kernel, size_t bytes, bool *done)
{
	if (*done)
		return;
	CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
	*done = true;
}

/* Dropout's survivors are scaled by 1/(1-p) in fp32 (cpu_dropout_scales). */
static inline float keep_scale_of(float p)
{
	return p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
}

#define GRID_STRIDE(i, n)                                                                  \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
	     i += (size_t)gridDim.x * blockDim.x)

/* Scratch for an op's partial sums (ops.cu): one device buffer that only
 * grows, held by one op at a time from scratch_alloc to scratch_free (ops run
 * one after another on one host thread, as the table's callers do). */
void *scratch_alloc(size_t bytes);
void scratch_free(void *p);
/* widen (ops.h) on this backend (ops.cu), for gemm.cu's 16-bit weights of
 * another format than its table's */
void cuda_widen16(float *out, const uint16_t *x, size_t n, enum kops_round kind);
/* cuBLASLt's workspace, once created (gemm.cu), in bytes */
size_t gemm_workspace_bytes(void);
/* gemm.cu's cuBLASLt handle and workspace, created on first use (fp8.cu's GEMMs share them) */
void cuda_lt_get(cublasLtHandle_t *h, void **ws, size_t *ws_bytes);
/* cuBLASLt's first algorithm for desc with layouts a, b and c (C and D)
 * within the workspace, split-K only with a fixed-order reduction, for
 * buffers aligned to al[4] bytes (A, B, C, D) (gemm.cu). 1 and *algo when
 * there is one; else 0, with the heuristic's status and result count for
 * the caller's message. */
int cuda_lt_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
		 cublasLtMatrixLayout_t c, const uint32_t al[4], cublasLtMatmulAlgo_t *algo, int *status, int *got);

/* ---- reductions within a warp / a block ---- */

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int o = WARP / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ double warp_sumd(double v)
{
	for (int o = WARP / 2; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* max that ignores NaN the way the CPU's "x > m ? x : m" does */
static __device__ __forceinline__ float warp_max(float v)
{
	for (int o = WARP / 2; o > 0; o >>= 1) {
		float u = __shfl_xor_sync(0xffffffffu, v, o);
		v = u > v ? u : v;
	}
	return v;
}

/* Block-wide sums/max, the result in every thread. blockDim.x must be a
 * multiple of 32 and at most 1024. */
static __device__ double block_sumd(double v)
{
	__shared__ double sh[WARP];
	int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
	v = warp_sumd(v);
	__syncthreads(); /* sh may still be read by an earlier call */
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0;
	return warp_sumd(v);
}

static __device__ float block_max(float v)
{
	__shared__ float sh[WARP];
	int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : -INFINITY;
	return warp_max(v);
}

/* ---- counter-based random numbers (cpu_rand.c, ported exactly): philox.cuh ----
 * uniform(s, c) = (w[c mod 4] >> 8) * 2^-24 of Philox block (s, c / 4). Each
 * thread computes the whole block for its counter (4x redundant work, but
 * simple and obviously the same draw). */
#include "philox.cuh"

static __device__ __forceinline__ float philox_uniform(uint64_t seed, uint64_t counter)
{
	return philox_u01(philox_word(philox4(seed, counter >> 2), (unsigned)(counter & 3)));
}

/* ---- rounding to half precision and back (cpu_round_bf16/fp16, bit for bit) ---- */

/* bf16: add half of the dropped 16 bits (minus one unless the kept part is
 * odd: ties to even) and truncate; a NaN is quieted, sign kept. */
static __device__ __forceinline__ float round_bf16(float x)
{
	uint32_t u = __float_as_uint(x);
	uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	uint32_t quiet_nan = (u | 0x00400000u) & 0xffff0000u;
	return __uint_as_float((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/* IEEE half: normals keep 10 mantissa bits (ties to even); below 2^-14 the
 * halves are multiples of 2^-24, the ulp of [0.5, 1), so (|x| + 0.5) - 0.5
 * rounds to them (__fadd_rn: never contracted or reassociated); |x| >= 65520
 * goes to inf; NaN stays NaN (quieted). */
static __device__ __forceinline__ float round_fp16(float x)
{
	uint32_t u = __float_as_uint(x);
	uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return __uint_as_float(u | 0x00400000u);
	if (a >= 0x477ff000u)
		return __uint_as_float(sign | 0x7f800000u);
	if (a >= 0x38800000u)
		return __uint_as_float(sign | ((a + 0x0fffu + ((a >> 13) & 1u)) & ~0x1fffu));
	float sub = __fadd_rn(__fadd_rn(__uint_as_float(a), 0.5f), -0.5f);
	return __uint_as_float(sign | __float_as_uint(sub));
}

/* ---- expf of the CPU backend (cpu.h's cpu_expf, Cephes' polynomial), step
 * for step: CUDA's expf differs from it by up to 2 ulp, so the softmax,
 * sigmoid and GELU kernels use this one and round as the CPU does. The
 * __f*_rn intrinsics are never contracted into FMAs, whatever -fmad says
 * (the CPU build, ISO C, never contracts). ---- */
static __device__ __forceinline__ float megac_expf(float x)
{
	float xc = x > 88.8f ? 88.8f : x; /* NaN fails both tests and stays NaN */
	xc = xc < -104.0f ? -104.0f : xc;
	float n = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f), 12582912.0f);
	float r = __fsub_rn(xc, __fmul_rn(n, 0.693359375f));
	r = __fsub_rn(r, __fmul_rn(n, -2.12194440e-4f));
	float p = 1.9875691500e-4f;
	p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
	p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
	p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
	p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
	p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
	p = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
	int ni = (int)(n > -200.0f ? n : 0.0f);
	int n1 = ni / 2, n2 = ni - n1; /* both in [-75, 64]: normal powers of two */
	float s1 = __uint_as_float((uint32_t)(n1 + 127) << 23);
	float s2 = __uint_as_float((uint32_t)(n2 + 127) << 23);
	return __fmul_rn(__fmul_rn(p, s1), s2);
}

/* The other files of the backend put their ops into the table (called once
 * by ops.cu's table_init, after its own ops are in). */
void cuda_attn_fill(struct kops *t); /* attn.cu: the four attention ops */
/* attn.cu's fp32 attention_block_forward/backward, which the half tables fall back to */
void cuda_attention_block_forward_f32(float *out, float *lse, const float *q, const float *kk, const float *v,
				      const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,
				      int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,
				      uint64_t seed, uint64_t offset, int accumulate);
void cuda_attention_block_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *out,
				       const float *lse, const float *q, const float *kk, const float *v,
				       const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,
				       int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,
				       uint64_t seed, uint64_t offset);

/* gemm.cu: linear_forward/backward through cuBLASLt, on fp32 operands
 * (kops_cuda) or on operands converted to bf16/fp16 with fp32 accumulation
 * and outputs (kops_cuda_half). */
enum gemm_precision { GEMM_F32, GEMM_BF16, GEMM_F16 };
void cuda_gemm_fill(struct kops *t, enum gemm_precision prec);
/* attn_tc.cu: the tensor-core attention_block_forward of the bf16/fp16 tables */
void cuda_attn_tc_fill(struct kops *t, enum gemm_precision prec);
/* fp8.cu: fp8_amax, fp8_quantize, fp8_gemm and fp8_transpose (every table shares them) */
void cuda_fp8_fill(struct kops *t);
unsigned long cuda_fp8_lt_gemms(void); /* fp8_gemm calls that ran on cuBLASLt's FP8 path */
/* ssm.cu: the Mamba-2 mixer's six optional ops (fp32; the half tables share them) */
void cuda_ssm_fill(struct kops *t);

#endif
