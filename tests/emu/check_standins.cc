/*
 * check_standins.cc - the emulated device checked on its own (built by make
 * emu into build/emu/gpu/check_standins; run by tests/prog/emu_device.sh):
 * that its stand-ins compute what CUDA, cuBLASLt and NCCL document, and
 * that it reports the failures a real machine would hang or crash on.
 *
 *   check_standins warp         shuffles (idx, up, down, xor, widths), votes, atomics, shared memory
 *   check_standins cublaslt     matmuls against a reference: transposes, bias, beta, bf16/fp16
 *                               inputs, TF32 rounding, batches; shape/alignment/ld errors refused;
 *                               FP8 with scales and AMAX_D, and the FP8 products cuBLASLt refuses
 *   check_standins runtime      copies, kinds, streams and events (a non-blocking stream's wait,
 *                               the legacy stream's implicit synchronisation), launch errors
 *   check_standins nccl [pre]   (2 ranks) collectives, and the context-parallel ring pattern on
 *                               fresh two-rank channels: every rank receives, then sends; with
 *                               "pre" each channel is first connected as lib/dist/nccl.c does
 *   check_standins destroy [same]  (2 ranks) two communicators destroyed in opposite orders (or
 *                               the same order)
 *   check_standins late-device  (2 ranks) cudaSetDevice(rank) after MPI_Init
 *   check_standins lazy         (2 ranks) a kernel's first launch while an NCCL receive waits
 *   failures meant to be fatal: host-pointer, oob-copy, oob-gemm, divergent-barrier, trap
 *
 * Output: TAP lines ("ok - ...", "not ok - ..."); the fatal modes end in
 * the emulator's message and a non-zero exit, which the shell test checks.
 */
#include "common.cuh"

#include <mpi.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vector>

extern "C" {
#include "ckpt/dtype.h"
}

static int failures;

static void check(bool c, const char *what)
{
	printf("%s - %s\n", c ? "ok" : "not ok", what);
	failures += !c;
	fflush(stdout);
}

#define CK(x) CUDA_CHECK(x)

/* ---- warp collectives ---- */

/* out[t * 16 + j]: thread t's results */
__global__ void warp_kernel(int *out)
{
	const int t = threadIdx.x, l = t % 32;
	int *o = out + t * 16;
	o[0] = __shfl_sync(0xffffffffu, 100 + l, 5);          /* lane 5's value */
	o[1] = __shfl_sync(0xffffffffu, 100 + l, l + 1, 8);   /* within groups of 8 */
	o[2] = __shfl_up_sync(0xffffffffu, 100 + l, 3);       /* lanes < 3 keep theirs */
	o[3] = __shfl_down_sync(0xffffffffu, 100 + l, 2, 16); /* within 16 */
	o[4] = __shfl_xor_sync(0xffffffffu, 100 + l, 1);
	o[5] = (int)__ballot_sync(0xffffffffu, l % 3 == 0);
	o[6] = __any_sync(0xffffffffu, l == 31);
	o[7] = __all_sync(0xffffffffu, l < 31);
	double d = __shfl_xor_sync(0xffffffffu, 0.5 + l, 16); /* 8-byte values */
	o[8] = (int)(d * 2);
	__shared__ int sh[64];
	sh[t] = t;
	__syncthreads();
	o[9] = sh[63 - t]; /* another warp's value: right only with the barrier */
	static int counter;
	if (t == 0)
		counter = 0;
	__syncthreads();
	atomicAdd(&counter, t);
	__syncthreads();
	o[10] = counter;
	if (l < 16) /* a half-warp collective */
		o[11] = __shfl_xor_sync(0x0000ffffu, l, 4);
	else
		o[11] = -1;
	if (l < 16) /* two different collectives in the two halves at once */
		o[12] = __shfl_down_sync(0x0000ffffu, l, 1, 16);
	else
		o[12] = __shfl_xor_sync(0xffff0000u, l, 2);
	/* xor across segments of 16: an earlier segment is readable, a later one not */
	o[13] = __shfl_xor_sync(0xffffffffu, l, 16, 16);
}

static void check_warp(void)
{
	int *d = NULL;
	CK(cudaMalloc((void **)&d, 64 * 16 * sizeof(int)));
	launch<warp_kernel>(1, 64, 0, d);
	CK(cudaGetLastError());
	std::vector<int> h(64 * 16);
	CK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
	bool ok[14] = { true, true, true, true, true, true, true, true, true, true, true, true, true, true };
	for (int t = 0; t < 64; t++) {
		const int l = t % 32, *o = &h[(size_t)t * 16];
		ok[0] &= o[0] == 105;
		ok[1] &= o[1] == 100 + (l & ~7) + ((l + 1) & 7);
		ok[2] &= o[2] == 100 + (l >= 3 ? l - 3 : l);
		ok[3] &= o[3] == 100 + ((l % 16) + 2 < 16 ? l + 2 : l);
		ok[4] &= o[4] == 100 + (l ^ 1);
		ok[5] &= (unsigned)o[5] == 0x49249249u;
		ok[6] &= o[6] == 1;
		ok[7] &= o[7] == 0;
		ok[8] &= o[8] == 2 * (l ^ 16) + 1;
		ok[9] &= o[9] == 63 - t;
		ok[10] &= o[10] == 63 * 64 / 2;
		ok[11] &= o[11] == (l < 16 ? (l ^ 4) : -1);
		ok[12] &= o[12] == (l < 16 ? (l < 15 ? l + 1 : l) : (l ^ 2));
		ok[13] &= o[13] == (l < 16 ? l : l - 16);
	}
	const char *names[14] = { "__shfl_sync from one lane", "__shfl_sync in groups of 8", "__shfl_up_sync",
				  "__shfl_down_sync in halves", "__shfl_xor_sync", "__ballot_sync", "__any_sync",
				  "__all_sync", "__shfl_xor_sync of doubles", "shared memory across warps after a barrier",
				  "atomicAdd from every thread", "a half-warp shuffle (mask 0xffff)",
				  "different shuffles in the two halves of a warp at once",
				  "__shfl_xor_sync across segments (width 16: earlier readable, later not)" };
	for (int i = 0; i < 14; i++) {
		char b[160];
		snprintf(b, sizeof b, "warp: %s", names[i]);
		check(ok[i], b);
	}
	CK(cudaFree(d));
}

/* ---- cuBLASLt ---- */

struct mat {
	int rows, cols;
	int64_t ld;
	cudaDataType_t type;
	std::vector<float> v; /* column-major, ld = rows (values exact in the type) */
};

static float round_to(float x, cudaDataType_t t)
{
	return t == CUDA_R_16BF ? ckpt_bf16_to_f32(ckpt_f32_to_bf16(x)) : t == CUDA_R_16F ? ckpt_f16_to_f32(ckpt_f32_to_f16(x)) : x;
}

static mat random_mat(int rows, int cols, int64_t ld, cudaDataType_t t, unsigned seed)
{
	mat m{ rows, cols, ld, t, std::vector<float>((size_t)rows * cols) };
	for (size_t i = 0; i < m.v.size(); i++) {
		seed = seed * 1103515245u + 12345u;
		m.v[i] = round_to((float)((seed >> 8) % 2001) / 1000.0f - 1.0f, t);
	}
	return m;
}

/* device copy of m with its leading dimension, in its type */
static void *upload(const mat &m)
{
	const size_t es = m.type == CUDA_R_32F ? 4 : 2, n = (size_t)m.ld * m.cols;
	std::vector<unsigned char> b(n * es, 0);
	for (int j = 0; j < m.cols; j++)
		for (int i = 0; i < m.rows; i++) {
			const float x = m.v[(size_t)j * m.rows + i];
			const size_t at = ((size_t)j * m.ld + i) * es;
			if (es == 4)
				memcpy(&b[at], &x, 4);
			else {
				uint16_t h = m.type == CUDA_R_16BF ? ckpt_f32_to_bf16(x) : ckpt_f32_to_f16(x);
				memcpy(&b[at], &h, 2);
			}
		}
	void *d = NULL;
	CK(cudaMalloc(&d, b.size()));
	CK(cudaMemcpy(d, b.data(), b.size(), cudaMemcpyHostToDevice));
	return d;
}

struct lt {
	cublasLtHandle_t h;
	cublasLtMatmulDesc_t d;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulPreference_t p;
};

static cublasStatus_t lt_setup(lt *x, cublasComputeType_t ct, int ta, int tb, const mat &A, const mat &B, int m, int n,
			       cudaDataType_t dt, const void *bias)
{
	cublasStatus_t s = cublasLtMatmulDescCreate(&x->d, ct, CUDA_R_32F);
	int32_t t1 = ta, t2 = tb;
	cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_TRANSA, &t1, sizeof t1);
	cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_TRANSB, &t2, sizeof t2);
	if (bias) {
		uint32_t e = CUBLASLT_EPILOGUE_BIAS;
		cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
		cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
	}
	cublasLtMatrixLayoutCreate(&x->a, A.type, (uint64_t)A.rows, (uint64_t)A.cols, A.ld);
	cublasLtMatrixLayoutCreate(&x->b, B.type, (uint64_t)B.rows, (uint64_t)B.cols, B.ld);
	cublasLtMatrixLayoutCreate(&x->c, dt, (uint64_t)m, (uint64_t)n, m);
	cublasLtMatmulPreferenceCreate(&x->p);
	return s;
}

static float at_op(const mat &M, int trans, int i, int j)
{
	return trans ? M.v[(size_t)i * M.rows + j] : M.v[(size_t)j * M.rows + i];
}

/* D = alpha op(A) op(B) + beta C (+ bias), against a double reference */
static void gemm_case(const char *name, cublasComputeType_t ct, int ta, int tb, int m, int n, int k, cudaDataType_t in,
		      cudaDataType_t out, float beta, bool use_bias, double tol)
{
	const mat A = random_mat(ta ? k : m, ta ? m : k, (ta ? k : m) + 3, in, 11);
	const mat B = random_mat(tb ? n : k, tb ? k : n, (tb ? n : k) + 1, in, 12);
	mat C = random_mat(m, n, m, out, 13);
	const mat bias = random_mat(m, 1, m, out, 14);
	void *dA = upload(A), *dB = upload(B), *dC = upload(C), *dbias = use_bias ? upload(bias) : NULL;
	lt x;
	cublasLtCreate(&x.h);
	lt_setup(&x, ct, ta, tb, A, B, m, n, out, dbias);
	cublasLtMatmulHeuristicResult_t r;
	int got = 0;
	cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(x.h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &r, &got);
	const float alpha = 1.5f;
	if (s == CUBLAS_STATUS_SUCCESS && got == 1)
		s = cublasLtMatmul(x.h, x.d, &alpha, dA, x.a, dB, x.b, &beta, dC, x.c, dC, x.c, &r.algo, NULL, 0, 0);
	const size_t es = out == CUDA_R_32F ? 4 : 2;
	std::vector<unsigned char> raw((size_t)m * n * es);
	CK(cudaMemcpy(raw.data(), dC, raw.size(), cudaMemcpyDeviceToHost));
	double worst = 0, big = 1e-30;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double ref = 0;
			for (int q = 0; q < k; q++) {
				float a = at_op(A, ta, i, q), b = at_op(B, tb, q, j);
				if (ct == CUBLAS_COMPUTE_32F_FAST_TF32) { /* 10 mantissa bits, nearest, ties away */
					uint32_t u;
					memcpy(&u, &a, 4);
					u = (u + 0x1000u) & 0xffffe000u;
					memcpy(&a, &u, 4);
					memcpy(&u, &b, 4);
					u = (u + 0x1000u) & 0xffffe000u;
					memcpy(&b, &u, 4);
				}
				ref += (double)a * b;
			}
			ref = alpha * ref + beta * C.v[(size_t)j * m + i] + (use_bias ? bias.v[(size_t)i] : 0.0);
			float got_v;
			const size_t at = ((size_t)j * m + i) * es;
			if (es == 4)
				memcpy(&got_v, &raw[at], 4);
			else {
				uint16_t hv;
				memcpy(&hv, &raw[at], 2);
				got_v = out == CUDA_R_16BF ? ckpt_bf16_to_f32(hv) : ckpt_f16_to_f32(hv);
			}
			worst = fmax(worst, fabs(got_v - ref));
			big = fmax(big, fabs(ref));
		}
	char b[200];
	snprintf(b, sizeof b, "cublasLt: %s (max error %.2g of max %.2g, tol %.0g)", name, worst / big, big, tol);
	check(s == CUBLAS_STATUS_SUCCESS && worst / big <= tol, b);
	cudaFree(dA);
	cudaFree(dB);
	cudaFree(dC);
	if (dbias)
		cudaFree(dbias);
}

static void check_cublaslt(void)
{
	gemm_case("fp32 T,N with the bias epilogue", CUBLAS_COMPUTE_32F, 1, 0, 37, 29, 64, CUDA_R_32F, CUDA_R_32F, 0.0f,
		  true, 1e-6);
	gemm_case("fp32 N,T accumulating (beta 1)", CUBLAS_COMPUTE_32F, 0, 1, 40, 17, 33, CUDA_R_32F, CUDA_R_32F, 1.0f,
		  false, 1e-6);
	gemm_case("bf16 inputs, fp32 output, N,N", CUBLAS_COMPUTE_32F, 0, 0, 24, 31, 48, CUDA_R_16BF, CUDA_R_32F, 0.0f,
		  false, 1e-6);
	gemm_case("fp16 inputs, fp16 output, T,T", CUBLAS_COMPUTE_32F, 1, 1, 16, 8, 40, CUDA_R_16F, CUDA_R_16F, 0.5f, true,
		  1e-3);
	gemm_case("TF32 compute rounds fp32 inputs to 10 bits", CUBLAS_COMPUTE_32F_FAST_TF32, 0, 0, 20, 20, 70,
		  CUDA_R_32F, CUDA_R_32F, 0.0f, false, 1e-6);

	/* a batch of 3 products through strided layouts */
	{
		const int m = 5, n = 3, k = 4, nb = 3;
		const int64_t sa = m * k + 2, sb = k * n + 1, sd = m * n + 3;
		std::vector<float> a((size_t)sa * nb), b((size_t)sb * nb), d((size_t)sd * nb, -7.0f);
		for (size_t i = 0; i < a.size(); i++)
			a[i] = (float)((int)(i * 7 % 11) - 5);
		for (size_t i = 0; i < b.size(); i++)
			b[i] = (float)((int)(i * 5 % 9) - 4);
		float *dA = NULL, *dB = NULL, *dD = NULL;
		CK(cudaMalloc((void **)&dA, a.size() * 4));
		CK(cudaMalloc((void **)&dB, b.size() * 4));
		CK(cudaMalloc((void **)&dD, d.size() * 4));
		CK(cudaMemcpy(dA, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dB, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dD, d.data(), d.size() * 4, cudaMemcpyHostToDevice));
		cublasLtHandle_t h;
		cublasLtMatmulDesc_t desc;
		cublasLtMatrixLayout_t la, lb, ld;
		cublasLtCreate(&h);
		cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
		cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
		cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
		cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
		const int32_t count = nb;
		const int64_t strides[3] = { sa, sb, sd };
		cublasLtMatrixLayout_t ls[3] = { la, lb, ld };
		for (int i = 0; i < 3; i++) {
			cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
			cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
							 sizeof strides[i]);
		}
		const float one = 1.0f, zero = 0.0f;
		cublasStatus_t st = cublasLtMatmul(h, desc, &one, dA, la, dB, lb, &zero, dD, ld, dD, ld, NULL, NULL, 0, 0);
		CK(cudaMemcpy(d.data(), dD, d.size() * 4, cudaMemcpyDeviceToHost));
		bool ok = st == CUBLAS_STATUS_SUCCESS;
		for (int bi = 0; bi < nb; bi++) {
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					float ref = 0;
					for (int q = 0; q < k; q++)
						ref += a[(size_t)bi * sa + (size_t)q * m + i] * b[(size_t)bi * sb + (size_t)j * k + q];
					ok &= d[(size_t)bi * sd + (size_t)j * m + i] == ref;
				}
			for (int64_t g = m * n; g < sd; g++) /* the gaps between batches untouched */
				ok &= d[(size_t)bi * sd + (size_t)g] == -7.0f;
		}
		check(ok, "cublasLt: a batch of 3 products through strided layouts (integers: exact), the gaps untouched");
		cudaFree(dA);
		cudaFree(dB);
		cudaFree(dD);
	}

	/* refusals: a shape that does not multiply, an ld below the rows, a
	 * pointer less aligned than the algorithm was chosen for */
	const mat A = random_mat(8, 16, 8, CUDA_R_32F, 1), B = random_mat(16, 4, 16, CUDA_R_32F, 2);
	lt x;
	cublasLtCreate(&x.h);
	lt_setup(&x, CUBLAS_COMPUTE_32F, 0, 0, A, B, 8, 5, CUDA_R_32F, NULL); /* D 8 x 5, B has 4 columns */
	cublasLtMatmulHeuristicResult_t r;
	int got = 0;
	check(cublasLtMatmulAlgoGetHeuristic(x.h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &r, &got) == CUBLAS_STATUS_INVALID_VALUE,
	      "cublasLt: a product whose shapes do not multiply is refused");
	cublasLtMatrixLayout_t bad;
	cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 8, 16, 4);
	cublasLtMatrixLayoutDestroy(x.c);
	cublasLtMatrixLayoutCreate(&x.c, CUDA_R_32F, 8, 4, 8);
	check(cublasLtMatmulAlgoGetHeuristic(x.h, x.d, bad, x.b, x.c, x.c, x.p, 1, &r, &got) == CUBLAS_STATUS_INVALID_VALUE,
	      "cublasLt: a leading dimension below the rows is refused");
	int32_t wrong = 3;
	check(cublasLtMatmulDescSetAttribute(x.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &wrong, 2) == CUBLAS_STATUS_INVALID_VALUE,
	      "cublasLt: an attribute set with the wrong size is refused");
	check(cublasLtMatmulAlgoGetHeuristic(x.h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &r, &got) == CUBLAS_STATUS_SUCCESS,
	      "cublasLt: the heuristic answers a valid product");
	char *dA = (char *)upload(A), *dB = (char *)upload(B), *dD = NULL;
	CK(cudaMalloc((void **)&dD, 8 * 4 * 4 + 64));
	const float one = 1.0f, zero = 0.0f;
	check(cublasLtMatmul(x.h, x.d, &one, dA, x.a, dB, x.b, &zero, dD + 16, x.c, dD + 16, x.c, &r.algo, NULL, 0, 0) ==
		      CUBLAS_STATUS_INVALID_VALUE,
	      "cublasLt: C and D 16-byte aligned with an algorithm chosen for 256 bytes is refused");
	check(cublasLtMatmul(x.h, x.d, &one, dA, x.a, dB, x.b, &zero, dD, x.c, dD, x.c, &r.algo, NULL, 0, 0) ==
		      CUBLAS_STATUS_SUCCESS,
	      "cublasLt: the same product, aligned, runs");
}

/* ---- cuBLASLt FP8 ---- */

/* an FP8 code's value, written out per format (E4M3: bias 7, 3 mantissa bits; E5M2: bias 15, 2) */
static double fp8_ref(uint8_t q, bool e4m3)
{
	const int mb = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
	const int e = (q & 0x7f) >> mb, m = q & ((1 << mb) - 1);
	const double mag = e ? ldexp(1.0 + m / (double)(1 << mb), e - bias) : ldexp(m / (double)(1 << mb), 1 - bias);
	return q & 0x80 ? -mag : mag;
}

/* finite codes, the extremes among them (largest finite, smallest subnormal) */
static std::vector<uint8_t> fp8_codes(size_t n, bool e4m3, unsigned seed)
{
	std::vector<uint8_t> c(n);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		uint8_t q = (uint8_t)(seed >> 16);
		if (e4m3 ? (q & 0x7f) == 0x7f : (q & 0x7c) == 0x7c) /* NaN (or E5M2's infinities) */
			q &= 0xbf;
		c[i] = q;
	}
	c[0] = e4m3 ? 0x7e : 0x7b; /* 448, 57344 */
	c[1] = 0x81;             /* -2^-9, -2^-16 */
	return c;
}

struct fp8_lt {
	cublasLtHandle_t h;
	cublasLtMatmulDesc_t d;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulPreference_t p;
};

static void fp8_lt_setup(fp8_lt *x, int ta, int tb, cudaDataType_t at, cudaDataType_t bt, int m, int n, int k)
{
	cublasLtCreate(&x->h);
	cublasLtMatmulDescCreate(&x->d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	int32_t t1 = ta, t2 = tb;
	int8_t fast = 0;
	cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_TRANSA, &t1, sizeof t1);
	cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_TRANSB, &t2, sizeof t2);
	cublasLtMatmulDescSetAttribute(x->d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
	cublasLtMatrixLayoutCreate(&x->a, at, ta ? k : m, ta ? m : k, ta ? k : m);
	cublasLtMatrixLayoutCreate(&x->b, bt, tb ? n : k, tb ? k : n, tb ? n : k);
	cublasLtMatrixLayoutCreate(&x->c, CUDA_R_32F, m, n, m);
	cublasLtMatmulPreferenceCreate(&x->p);
}

static void check_cublaslt_fp8(void)
{
	/* D (16 x 8) = alpha sA sB A^T B + beta C, A E4M3 stored k x m, B E5M2 stored k x n ("TN") */
	const int m = 16, n = 8, k = 32;
	const std::vector<uint8_t> a = fp8_codes((size_t)k * m, true, 21), b = fp8_codes((size_t)k * n, false, 22);
	std::vector<float> c((size_t)m * n), d((size_t)m * n);
	for (size_t i = 0; i < c.size(); i++)
		c[i] = (float)((int)(i * 7 % 13) - 6);
	const float sc[2] = { 0.25f, 3.0f }, alpha = 1.5f, beta = 0.5f;
	uint8_t *dA = NULL, *dB = NULL;
	float *dC = NULL, *dS = NULL, *dAmax = NULL;
	CK(cudaMalloc((void **)&dA, a.size()));
	CK(cudaMalloc((void **)&dB, b.size()));
	CK(cudaMalloc((void **)&dC, c.size() * 4));
	CK(cudaMalloc((void **)&dS, 2 * 4));
	CK(cudaMalloc((void **)&dAmax, 4));
	CK(cudaMemcpy(dA, a.data(), a.size(), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dB, b.data(), b.size(), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dC, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dS, sc, 2 * 4, cudaMemcpyHostToDevice));
	fp8_lt x;
	fp8_lt_setup(&x, CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, m, n, k);
	const float *sa = dS, *sb = dS + 1;
	cublasLtMatmulDescSetAttribute(x.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
	cublasLtMatmulDescSetAttribute(x.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
	cublasLtMatmulDescSetAttribute(x.d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &dAmax, sizeof dAmax);
	cublasLtMatmulHeuristicResult_t r;
	int got = 0;
	cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(x.h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &r, &got);
	if (s == CUBLAS_STATUS_SUCCESS && got == 1)
		s = cublasLtMatmul(x.h, x.d, &alpha, dA, x.a, dB, x.b, &beta, dC, x.c, dC, x.c, &r.algo, NULL, 0, 0);
	float amax = -1;
	CK(cudaMemcpy(d.data(), dC, d.size() * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(&amax, dAmax, 4, cudaMemcpyDeviceToHost));
	double worst = 0, big = 1e-30;
	float dmax = 0;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double ref = 0;
			for (int q = 0; q < k; q++)
				ref += fp8_ref(a[(size_t)i * k + q], true) * fp8_ref(b[(size_t)j * k + q], false);
			ref = alpha * (double)sc[0] * sc[1] * ref + beta * c[(size_t)j * m + i];
			worst = fmax(worst, fabs(d[(size_t)j * m + i] - ref));
			big = fmax(big, fabs(ref));
			dmax = fmaxf(dmax, fabsf(d[(size_t)j * m + i]));
		}
	char buf[200];
	snprintf(buf, sizeof buf, "cublasLt: FP8 E4M3 x E5M2 \"TN\" with A/B scales and beta (max error %.2g of max %.2g)",
		 worst / big, big);
	check(s == CUBLAS_STATUS_SUCCESS && worst / big <= 1e-6, buf);
	check(amax == dmax, "cublasLt: FP8 AMAX_D_POINTER receives max |D|");

	/* refusals: what real cuBLASLt has no FP8 kernel for */
	fp8_lt y;
	fp8_lt_setup(&y, CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, m, n, k);
	check(cublasLtMatmulAlgoGetHeuristic(y.h, y.d, y.a, y.b, y.c, y.c, y.p, 1, &r, &got) == CUBLAS_STATUS_NOT_SUPPORTED,
	      "cublasLt: FP8 E5M2 x E5M2 is refused");
	fp8_lt z;
	fp8_lt_setup(&z, CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, m, n, k);
	check(cublasLtMatmulAlgoGetHeuristic(z.h, z.d, z.a, z.b, z.c, z.c, z.p, 1, &r, &got) == CUBLAS_STATUS_NOT_SUPPORTED,
	      "cublasLt: FP8 in the \"NN\" layout is refused (TN only)");
	fp8_lt w;
	fp8_lt_setup(&w, CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, m, n, 24);
	check(cublasLtMatmulAlgoGetHeuristic(w.h, w.d, w.a, w.b, w.c, w.c, w.p, 1, &r, &got) == CUBLAS_STATUS_NOT_SUPPORTED,
	      "cublasLt: FP8 with k = 24 (not a multiple of 16 bytes) is refused");
	fp8_lt v;
	fp8_lt_setup(&v, CUBLAS_OP_T, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, m, n, k);
	cublasLtMatmulDescSetAttribute(v.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
	check(cublasLtMatmulAlgoGetHeuristic(v.h, v.d, v.a, v.b, v.c, v.c, v.p, 1, &r, &got) == CUBLAS_STATUS_INVALID_VALUE,
	      "cublasLt: an A scale pointer with fp32 inputs is refused");
	cudaFree(dA);
	cudaFree(dB);
	cudaFree(dC);
	cudaFree(dS);
	cudaFree(dAmax);
}

/* ---- runtime ---- */

__global__ void fill_kernel(float *x, float v, size_t n)
{
	GRID_STRIDE(i, n)
		x[i] = v;
}

__global__ void smem_kernel(float *x)
{
	float *s = DYN_SMEM(float);
	s[threadIdx.x] = (float)threadIdx.x;
	__syncthreads();
	x[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

static void check_runtime(void)
{
	float *d = NULL, h[64];
	CK(cudaMalloc((void **)&d, sizeof h));
	CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
	check(isnan(h[0]) && isnan(h[63]), "runtime: fresh device memory reads as NaN until written");
	check(cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice) == cudaErrorInvalidValue && cudaGetLastError() ==
		      cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess,
	      "runtime: a copy whose kind contradicts its pointers fails, and the error is cleared once read");
	launch<fill_kernel>(1, 2048, 0, d, 1.0f, (size_t)64);
	check(cudaGetLastError() == cudaErrorInvalidConfiguration, "runtime: a block of 2048 threads is refused");
	launch<smem_kernel>(1, 64, 64 * 1024, d);
	check(cudaGetLastError() == cudaErrorInvalidValue,
	      "runtime: 64 KB of dynamic shared memory without the attribute is refused");
	CK(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
	launch<smem_kernel>(1, 64, 64 * 1024, d);
	CK(cudaGetLastError());
	CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
	check(h[0] == 63 && h[63] == 0, "runtime: with the attribute it runs, reading dynamic shared memory");

	/* cudaMemcpy2D: columns 2..4 of an 8x8 row-major block into a 8x3 one */
	for (int i = 0; i < 64; i++)
		h[i] = (float)i;
	CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
	float *cols = NULL, got[24];
	CK(cudaMalloc((void **)&cols, sizeof got));
	CK(cudaMemcpy2D(cols, 3 * sizeof(float), d + 2, 8 * sizeof(float), 3 * sizeof(float), 8,
			cudaMemcpyDeviceToDevice));
	CK(cudaMemcpy(got, cols, sizeof got, cudaMemcpyDeviceToHost));
	bool same = true;
	for (int r = 0; r < 8; r++)
		for (int c = 0; c < 3; c++)
			same = same && got[r * 3 + c] == (float)(r * 8 + 2 + c);
	check(same, "runtime: cudaMemcpy2D copies a column block row by row at both pitches");
	check(cudaMemcpy2D(cols, 2 * sizeof(float), d, 8 * sizeof(float), 3 * sizeof(float), 2,
			   cudaMemcpyDeviceToDevice) == cudaErrorInvalidPitchValue &&
		      cudaGetLastError() == cudaErrorInvalidPitchValue,
	      "runtime: cudaMemcpy2D with a width above a pitch is refused");
	CK(cudaFree(cols));

	/* a non-blocking stream that waits for an event of the legacy stream sees its work */
	cudaStream_t s;
	cudaEvent_t e;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
	float *d2 = NULL;
	CK(cudaMalloc((void **)&d2, sizeof h));
	launch<fill_kernel>(1, 64, 0, d, 7.0f, (size_t)64);
	CK(cudaEventRecord(e, cudaStreamLegacy));
	CK(cudaStreamWaitEvent(s, e, 0));
	CK(cudaMemcpyAsync(d2, d, sizeof h, cudaMemcpyDeviceToDevice, s));
	CK(cudaStreamSynchronize(s));
	CK(cudaMemcpy(h, d2, sizeof h, cudaMemcpyDeviceToHost));
	check(h[0] == 7 && h[63] == 7, "runtime: a stream waiting for an event runs after it");
	check(cudaEventQuery(e) == cudaSuccess, "runtime: an event the stream has passed is complete");
	float *pinned = NULL;
	CK(cudaMallocHost((void **)&pinned, sizeof h));
	struct cudaPointerAttributes pa;
	CK(cudaPointerGetAttributes(&pa, pinned));
	const bool host_ok = pa.type == cudaMemoryTypeHost;
	CK(cudaPointerGetAttributes(&pa, d));
	const bool dev_ok = pa.type == cudaMemoryTypeDevice;
	CK(cudaPointerGetAttributes(&pa, h));
	check(host_ok && dev_ok && pa.type == cudaMemoryTypeUnregistered,
	      "runtime: pointer attributes tell device, page-locked and plain host memory apart");
	CK(cudaFreeHost(pinned));
	CK(cudaStreamDestroy(s));
	CK(cudaEventDestroy(e));
	CK(cudaFree(d));
	CK(cudaFree(d2));
}

/* ---- the fatal cases: the emulator's report, then a non-zero exit ---- */

__global__ void barrier_kernel(float *x)
{
	if (threadIdx.x < 32)
		__syncthreads(); /* not reached by the other warps */
	x[threadIdx.x] = 1.0f;
}

__global__ void trap_kernel(float *x)
{
	if (threadIdx.x == 3)
		__trap();
	x[threadIdx.x] = 1.0f;
}

static int fatal_case(const char *mode)
{
	float *d = NULL;
	CK(cudaMalloc((void **)&d, 64 * sizeof(float)));
	if (!strcmp(mode, "host-pointer")) {
		static float host[64];
		launch<fill_kernel>(1, 64, 0, host, 1.0f, (size_t)64);
	} else if (!strcmp(mode, "oob-copy")) {
		float h[65];
		CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
	} else if (!strcmp(mode, "oob-gemm")) {
		const mat A = random_mat(8, 16, 8, CUDA_R_32F, 1), B = random_mat(16, 4, 16, CUDA_R_32F, 2);
		lt x;
		cublasLtCreate(&x.h);
		lt_setup(&x, CUBLAS_COMPUTE_32F, 0, 0, A, B, 8, 4, CUDA_R_32F, NULL);
		cublasLtMatmulHeuristicResult_t r;
		int got = 0;
		cublasLtMatmulAlgoGetHeuristic(x.h, x.d, x.a, x.b, x.c, x.c, x.p, 1, &r, &got);
		void *dA = upload(A), *dB = NULL;
		CK(cudaMalloc(&dB, 16 * 3 * sizeof(float))); /* B needs 16 x 4 */
		const float one = 1.0f, zero = 0.0f;
		cublasLtMatmul(x.h, x.d, &one, dA, x.a, dB, x.b, &zero, d, x.c, d, x.c, &r.algo, NULL, 0, 0);
	} else if (!strcmp(mode, "divergent-barrier")) {
		launch<barrier_kernel>(1, 64, 0, d);
	} else if (!strcmp(mode, "trap")) {
		launch<trap_kernel>(1, 64, 0, d);
	} else {
		fprintf(stderr, "check_standins: unknown mode %s\n", mode);
		return 2;
	}
	CK(cudaDeviceSynchronize());
	printf("not ok - %s: the emulator let it pass\n", mode);
	return 1;
}

/* ---- NCCL, two ranks ---- */

static int rank_, nranks_;

static void mpi_up(int *argc, char ***argv)
{
	int provided;
	MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
}

static int env_rank(void)
{
	const char *v = getenv("OMPI_COMM_WORLD_RANK");
	return v ? atoi(v) : 0;
}

/* a communicator of the two ranks, the id made by rank `creator` */
static ncclComm_t two_rank_comm(int creator, int my_rank_in_comm)
{
	ncclUniqueId id;
	if (rank_ == creator)
		ncclGetUniqueId(&id);
	MPI_Bcast(&id, sizeof id, MPI_BYTE, creator, MPI_COMM_WORLD);
	ncclComm_t c;
	if (ncclCommInitRank(&c, 2, id, my_rank_in_comm) != ncclSuccess)
		exit(3);
	return c;
}

static int nccl_case(bool pre)
{
	/* collectives on a communicator of both ranks */
	ncclComm_t all = two_rank_comm(0, rank_);
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	float *d = NULL, h[8];
	CK(cudaMalloc((void **)&d, 16 * sizeof(float)));
	for (int i = 0; i < 8; i++)
		h[i] = (float)(rank_ + 1) * (float)(i + 1);
	CK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
	ncclAllReduce(d, d, 8, ncclFloat32, ncclSum, all, s);
	ncclAllGather(d, d + 8, 4, ncclFloat32, all, s); /* out of place */
	CK(cudaStreamSynchronize(s));
	float r[16];
	CK(cudaMemcpy(r, d, sizeof r, cudaMemcpyDeviceToHost));
	bool ok = true;
	for (int i = 0; i < 8; i++)
		ok &= r[i] == 3.0f * (float)(i + 1) && r[8 + i] == 3.0f * (float)(i % 4 + 1);
	check(ok, "nccl: all-reduce and all-gather over MPI");

	/* the ring: channel 0 -> 1 made first (rank 0 its rank 0), then 1 -> 0 */
	ncclComm_t out, in;
	if (rank_ == 0) {
		out = two_rank_comm(0, 0);
		in = two_rank_comm(1, 1);
	} else {
		in = two_rank_comm(0, 1);
		out = two_rank_comm(1, 0);
	}
	float *buf = NULL;
	CK(cudaMalloc((void **)&buf, 8 * sizeof(float)));
	if (pre) { /* lib/dist/nccl.c's connect_channel, in creation order */
		for (int c = 0; c < 2; c++) {
			const bool sender = (c == 0) == (rank_ == 0);
			if (sender)
				ncclSend(buf, 1, ncclUint8, 1, c == 0 ? (rank_ == 0 ? out : in) : (rank_ == 0 ? in : out), s);
			else
				ncclRecv(buf, 1, ncclUint8, 0, c == 0 ? (rank_ == 0 ? out : in) : (rank_ == 0 ? in : out), s);
			CK(cudaStreamSynchronize(s));
		}
	}
	cudaStream_t s2;
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	ncclRecv(buf, 4, ncclFloat32, 0, in, s);    /* from rank - 1 ... */
	ncclSend(d, 4, ncclFloat32, 1, out, s2);     /* ... then to rank + 1 */
	CK(cudaStreamSynchronize(s));
	CK(cudaStreamSynchronize(s2));
	CK(cudaMemcpy(r, buf, 4 * sizeof(float), cudaMemcpyDeviceToHost));
	check(r[0] == 3.0f && r[3] == 12.0f, "nccl: the ring step (receive from rank - 1, send to rank + 1) completes");
	ncclCommDestroy(all);
	if (rank_ == 0) {
		ncclCommDestroy(out);
		ncclCommDestroy(in);
	} else {
		ncclCommDestroy(in);
		ncclCommDestroy(out);
	}
	return 0;
}

static int destroy_case(bool same)
{
	ncclComm_t a = two_rank_comm(0, rank_), b = two_rank_comm(1, rank_);
	if (same || rank_ == 0) {
		ncclCommDestroy(a);
		ncclCommDestroy(b);
	} else {
		ncclCommDestroy(b);
		ncclCommDestroy(a);
	}
	check(true, "nccl: two communicators destroyed");
	return 0;
}

static int lazy_case(void)
{
	ncclComm_t c = two_rank_comm(0, rank_);
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	float *d = NULL;
	CK(cudaMalloc((void **)&d, 64 * sizeof(float)));
	/* the connection first (it blocks until both ranks post) */
	if (rank_ == 0)
		ncclRecv(d, 1, ncclFloat32, 1, c, s);
	else
		ncclSend(d, 1, ncclFloat32, 0, c, s);
	CK(cudaStreamSynchronize(s));
	/* rank 0's receive waits until rank 1 sends, after the barrier */
	if (rank_ == 0) {
		ncclRecv(d, 4, ncclFloat32, 1, c, s);
		launch<fill_kernel>(1, 64, 0, d + 8, 2.0f, (size_t)8); /* this kernel's first launch */
		MPI_Barrier(MPI_COMM_WORLD);
	} else {
		launch<fill_kernel>(1, 64, 0, d, 2.0f, (size_t)8);
		MPI_Barrier(MPI_COMM_WORLD);
		ncclSend(d, 4, ncclFloat32, 0, c, s);
	}
	CK(cudaStreamSynchronize(s));
	check(true, "nccl: a first launch while a receive waits");
	ncclCommDestroy(c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *arg = argc > 2 ? argv[2] : "";
	int rc = 0;
	if (!strcmp(mode, "warp") || !strcmp(mode, "cublaslt") || !strcmp(mode, "runtime")) {
		CK(cudaSetDevice(0));
		if (!strcmp(mode, "warp"))
			check_warp();
		else if (!strcmp(mode, "cublaslt")) {
			check_cublaslt();
			check_cublaslt_fp8();
		}
		else
			check_runtime();
		rc = failures != 0;
	} else if (!strcmp(mode, "nccl") || !strcmp(mode, "destroy") || !strcmp(mode, "lazy") ||
		   !strcmp(mode, "late-device")) {
		if (strcmp(mode, "late-device"))
			CK(cudaSetDevice(env_rank())); /* before MPI_Init, as train does */
		mpi_up(&argc, &argv);
		if (!strcmp(mode, "late-device")) {
			CK(cudaSetDevice(rank_));
			check(true, "cudaSetDevice after MPI_Init");
		} else if (!strcmp(mode, "nccl"))
			rc = nccl_case(!strcmp(arg, "pre"));
		else if (!strcmp(mode, "destroy"))
			rc = destroy_case(!strcmp(arg, "same"));
		else
			rc = lazy_case();
		MPI_Finalize();
		rc |= failures != 0;
	} else {
		CK(cudaSetDevice(0));
		rc = fatal_case(mode);
	}
	return rc;
}
