/*
 * gemm.cu - the linear layers of the CUDA backend through cuBLASLt
 * (cublasLtMatmul), with the semantics of ops.h and of the CPU twins in
 * cpu_ops.c: out = inp . W^T (+ bias), dinp = dout . W (overwritten),
 * dweight += dout^T . inp, dbias += column sums of dout.
 *
 * Two flavours fill op tables (cuda_gemm_fill, called by ops.cu's table_init
 * and by kops_cuda_half below):
 *   - GEMM_F32: fp32 operands, CUBLAS_COMPUTE_32F (plain fp32 FMA, never
 *     TF32: the CPU reference is fp32 sgemm). kops_cuda() uses it.
 *   - GEMM_BF16 / GEMM_F16: the fp32 operands are converted to bf16/fp16 into
 *     scratch (round to nearest even; in the model's --bf16/--fp16 modes they
 *     already hold such values, so the conversion is exact), then multiplied
 *     on the tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F) into
 *     fp32 outputs. A product of two bf16 (8-bit significands) or two fp16
 *     (11-bit) values is exact in fp32, so the result is the fp32 GEMM of the
 *     same inputs up to the order of the sums. kops_cuda_half() is the table.
 *
 * Layouts. cuBLASLt is column-major; a row-major X[r][c] with leading
 * dimension c is, read column-major, X^T (c x r, same ld). So, with m x n the
 * column-major D and k the summed dimension:
 *   forward  out^T (OC x N)   = W (OC x IC) . inp^T (IC x N)
 *            A = W as stored (IC x OC col-major), opA = T; B = inp (IC x N), opB = N
 *            m = OC, n = N, k = IC; bias: CUBLASLT_EPILOGUE_BIAS (one value per row of D = per OC)
 *   dinp     dinp^T (IC x N)  = W^T (IC x OC) . dout^T (OC x N), beta = 0
 *            A = W (IC x OC), opA = N; B = dout (OC x N), opB = N; m = IC, n = N, k = OC
 *   dweight  dweight^T (IC x OC) += inp^T (IC x N) . dout (N x OC), beta = 1
 *            A = inp (IC x N), opA = N; B = dout (OC x N), opB = T; m = IC, n = OC, k = N
 * In the half flavour the converted copies keep the row-major shapes, with
 * rows padded to a multiple of 8 elements (16 bytes) so the fast tensor-core
 * kernels (which need 16-byte aligned rows) apply to any width.
 *
 * dbias is NOT a cuBLASLt epilogue: BGRADA/BGRADB overwrite instead of adding
 * (the table accumulates), exist only for some type/layout combinations and
 * do not document their summation order. The column sums below sum each
 * column over blocks of ROWS rows in double, then the blocks in order: no
 * atomics, bit-identical run to run, and within float rounding of the CPU.
 *
 * Determinism. For each shape the algorithm is cuBLASLt's first heuristic
 * answer, asked once and cached (plans below). The query holds only the
 * shape, types, pointer alignments (fixed by the buffer layout) and the
 * workspace size, and the heuristic answers a query the same way on the same
 * GPU model and cuBLAS version, so every run picks the same algorithms (a
 * different cuBLAS may pick others: bit-identical results hold within one
 * installation). Split-K is allowed
 * only with the workspace reduction schemes (partials in the workspace,
 * reduced in a separate step in a fixed order): INPLACE (partials added into
 * the output under counters) is masked off, and no scheme uses atomics.
 * cuBLAS documents bit-wise reproducible results on one stream with a
 * user-owned workspace on the same GPU model; everything here runs on the
 * legacy default stream with one workspace.
 *
 * Global state: the cuBLASLt handle and the 32 MiB workspace (created once,
 * under pthread_once, on first use), the plan cache, and the two half-input
 * op tables. Like the scratch buffer they are a backend singleton; the ops
 * run on one host thread at a time (cuda_ops.h), so the cache needs no lock.
 */
#include "common.cuh"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <pthread.h>
#include <string.h>

extern "C" {
#include "../cuda_ops.h"
size_t device_gemm_piece_bytes(void); /* device.h */
}

/* cuBLASLt returns cublasStatus_t like cuBLAS: CUBLAS_CHECK names it. */

/* ---- handle and workspace: created once, on first use ---- */

/* 32 MiB: NVIDIA's recommended cuBLAS workspace on Hopper (4 MiB before);
 * split-K partials and some kernels' scheduling state live here. */
#define LT_WORKSPACE ((size_t)32 << 20)

static cublasLtHandle_t lt_handle;
static void *lt_workspace;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

static void lt_init(void)
{
	CUBLAS_CHECK(cublasLtCreate(&lt_handle));
	CUDA_CHECK(cudaMalloc(&lt_workspace, LT_WORKSPACE));
}

size_t gemm_workspace_bytes(void)
{
	return lt_workspace ? LT_WORKSPACE : 0;
}

void cuda_lt_get(cublasLtHandle_t *h, void **ws, size_t *ws_bytes)
{
	pthread_once(&lt_once, lt_init);
	*h = lt_handle;
	*ws = lt_workspace;
	*ws_bytes = LT_WORKSPACE;
}

/* ---- plans: descriptors and the chosen algorithm, per shape ---- */

enum gemm_op { OP_FWD, OP_DINP, OP_DWEIGHT };

/* Everything the heuristic sees. Pointer alignments are part of it: the
 * heuristic's algorithm may assume them (cuBLASLt's default is 256 bytes). */
struct plan_key {
	int op, prec, N, IC, OC, bias;
	int ab;          /* the operands' type */
	int64_t ld[3];   /* leading dimensions of A, B and C/D: the model's 16-bit weights
			  * (ld IC) and converted ones (padded) differ */
	unsigned align[5]; /* A, B, C, D, bias: the largest power of two <= 256 dividing the address */
};

struct plan {
	struct plan_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, c; /* c describes C and D (both fp32, same shape) */
	cublasLtMatmulAlgo_t algo;
	bool ok; /* the heuristic found an algorithm (a miss is remembered too) */
};

/* A model has a handful of linear shapes, times three GEMMs, times the
 * precisions in use; past this many (unusual) the oldest plan is replaced. */
#define PLANS 64
static struct plan plans[PLANS];
static int nplans, plan_next;

static void plan_destroy(struct plan *p)
{
	CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
	CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
	CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
	CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

/* One GEMM as cuBLASLt sees it (column-major, see the top of the file). */
struct gemm_call {
	cublasOperation_t ta, tb;
	int m, n, k;
	int64_t lda, ldb, ldc;
	cudaDataType_t ab; /* type of A and B; C and D are fp32 */
	const void *A, *B;
	float *D; /* C = D */
	const float *bias;
	float beta;
};

static struct plan *plan_get(const struct plan_key *key, const struct gemm_call *g)
{
	for (int i = 0; i < nplans; i++)
		if (!memcmp(&plans[i].key, key, sizeof *key))
			return &plans[i];

	struct plan *p;
	if (nplans < PLANS) {
		p = &plans[nplans++];
	} else { /* replace the oldest; its descriptors are host objects, unused by queued work */
		p = &plans[plan_next];
		plan_next = (plan_next + 1) % PLANS;
		plan_destroy(p);
	}
	p->key = *key;

	CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	int32_t ta = g->ta, tb = g->tb;
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
	CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
	if (g->bias) {
		uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
		CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
							    sizeof epi));
		/* bias type: D's (fp32), the default. The heuristic reads the
		 * pointer for its alignment; each call sets its own. */
		CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
							    &g->bias, sizeof g->bias));
	}
	/* stored shapes: op(A) is m x k, op(B) is k x n */
	CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, g->ab, g->ta == CUBLAS_OP_N ? g->m : g->k,
						 g->ta == CUBLAS_OP_N ? g->k : g->m, g->lda));
	CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, g->ab, g->tb == CUBLAS_OP_N ? g->k : g->n,
						 g->tb == CUBLAS_OP_N ? g->n : g->k, g->ldb));
	CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, g->m, g->n, g->ldc));

	int s, got;
	p->ok = cuda_lt_algo(p->desc, p->a, p->b, p->c, key->align, &p->algo, &s, &got);
	if (!p->ok)
		fprintf(stderr,
			"megac: cuBLASLt has no algorithm for linear %s (%s) N=%d IC=%d OC=%d%s "
			"(status %d, %d results)%s\n",
			key->op == OP_FWD ? "forward" : key->op == OP_DINP ? "dinp" : "dweight",
			key->prec == GEMM_F32 ? "fp32" : key->prec == GEMM_BF16 ? "bf16" : "fp16", key->N,
			key->IC, key->OC, key->bias ? " with the bias epilogue" : "", (int)s, got,
			key->bias ? "; adding the bias separately" : "");
	return p;
}

int cuda_lt_algo(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
		 cublasLtMatrixLayout_t c, const uint32_t al[4], cublasLtMatmulAlgo_t *algo, int *status, int *got)
{
	pthread_once(&lt_once, lt_init);
	cublasLtMatmulPreference_t pref;
	CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	uint64_t ws = LT_WORKSPACE;
	CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
							  sizeof ws));
	/* split-K only with a separate, fixed-order reduction of workspace partials */
	uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
	CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
							  &red, sizeof red));
	const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
	};
	for (int i = 0; i < 4; i++) {
		uint32_t v = al[i];
		CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &v, sizeof v));
	}
	cublasLtMatmulHeuristicResult_t res;
	memset(&res, 0, sizeof res);
	*got = 0;
	cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle, desc, a, b, c, c, pref, 1, &res, got);
	CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
	*status = (int)st;
	if (st != CUBLAS_STATUS_SUCCESS || *got < 1 || res.state != CUBLAS_STATUS_SUCCESS)
		return 0;
	*algo = res.algo;
	return 1;
}

/* D = op(A) op(B) (+ bias) + beta C, through the shape's cached plan.
 * Returns 0, having queued nothing, when cuBLASLt has no algorithm for it. */
static int lt_matmul_try(int op, int prec, int N, int IC, int OC, const struct gemm_call *g)
{
	pthread_once(&lt_once, lt_init);
	struct plan_key key;
	memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
	key.op = op;
	key.prec = prec;
	key.N = N;
	key.IC = IC;
	key.OC = OC;
	key.bias = g->bias != NULL;
	key.ab = (int)g->ab;
	key.ld[0] = g->lda;
	key.ld[1] = g->ldb;
	key.ld[2] = g->ldc;
	key.align[0] = cuda_align_of(g->A);
	key.align[1] = cuda_align_of(g->B);
	key.align[2] = key.align[3] = cuda_align_of(g->D);
	key.align[4] = g->bias ? cuda_align_of(g->bias) : 0;
	struct plan *p = plan_get(&key, g);
	if (!p->ok)
		return 0;
	if (g->bias)
		CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
							    sizeof g->bias));
	const float one = 1.0f;
	CUBLAS_CHECK(cublasLtMatmul(lt_handle, p->desc, &one, g->A, p->a, g->B, p->b, &g->beta, g->D, p->c, g->D,
				    p->c, &p->algo, lt_workspace, LT_WORKSPACE, 0));
	KERNEL_CHECK(); /* MEGAC_CUDA_SYNC=1 names a faulting GEMM here */
	return 1;
}

static void lt_matmul(int op, int prec, int N, int IC, int OC, const struct gemm_call *g)
{
	if (!lt_matmul_try(op, prec, N, IC, OC, g))
		CUDA_BUG("cuBLASLt has no algorithm for this linear layer (above)");
}

/* ---- fp32 -> bf16/fp16 conversion into scratch ----
 * dst[r][c] = src[r][c] rounded to nearest even, rows of cols values read
 * with stride cols, written with stride pitch (>= cols; the padding is never
 * read). When pitch == cols (every width that is a multiple of 8, the
 * model's widths) the operand is one flat run: one grid-stride loop over
 * it, every thread busy whatever the shape (a row per block left most
 * threads idle on narrow operands such as an LM head's [V, h] weight).
 * Other widths go row by row, rows over blockIdx.y (grid-strided: rows may
 * pass 65535), columns over x. */

static __device__ __forceinline__ void to_half(__nv_bfloat16 *d, float x) { *d = __float2bfloat16_rn(x); }
static __device__ __forceinline__ void to_half(__half *d, float x) { *d = __float2half_rn(x); }

template <typename T> static __global__ void to_half_flat_kernel(T *dst, const float *src, size_t n)
{
	GRID_STRIDE(i, n)
		to_half(&dst[i], src[i]);
}

template <typename T>
static __global__ void to_half_rows_kernel(T *dst, const float *src, int rows, int cols, int64_t sstride, int pitch)
{
	for (int r = blockIdx.y; r < rows; r += gridDim.y) {
		const float *s = src + (size_t)r * sstride;
		T *d = dst + (size_t)r * pitch;
		for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
			to_half(&d[c], s[c]);
	}
}

template <typename T>
static void to_half_launch(T *dst, const float *src, int rows, int cols, int64_t sstride, int pitch)
{
	if (pitch == cols && sstride == cols) {
		const size_t n = (size_t)rows * cols;
		launch<to_half_flat_kernel<T>>(grid_for(n), THREADS, 0, dst, src, n);
	} else {
		const dim3 grid((unsigned)((cols + THREADS - 1) / THREADS), rows < 65535 ? (unsigned)rows : 65535u);
		launch<to_half_rows_kernel<T>>(grid, THREADS, 0, dst, src, rows, cols, sstride, pitch);
	}
}

/* row pitch of a converted operand: a multiple of 8 halves (16 bytes) */
static int half_pitch(int cols) { return (cols + 7) & ~7; }

/* bytes of a converted [rows, cols] operand, rounded up to 256 so the next
 * one carved after it stays 256-byte aligned */
static size_t half_bytes(int rows, int cols)
{
	size_t b = (size_t)rows * half_pitch(cols) * 2;
	return (b + 255) & ~(size_t)255;
}

/* src: rows of cols values, one every sstride floats */
static void convert(void *dst, const float *src, int rows, int cols, int64_t sstride, int prec)
{
	const int pitch = half_pitch(cols);
	if (prec == GEMM_BF16)
		to_half_launch((__nv_bfloat16 *)dst, src, rows, cols, sstride, pitch);
	else
		to_half_launch((__half *)dst, src, rows, cols, sstride, pitch);
	KERNEL_CHECK();
}

/* ---- helpers kept from the cuBLAS version ---- */

/* out[n, :] = bias: the forward of a zero-width input (IC == 0) */
static __global__ void bias_fill_kernel(float *out, const float *bias, int N, int OC)
{
	GRID_STRIDE(i, (size_t)N * OC)
		out[i] = bias[i % OC];
}

/* dbias partials: part[blk][c] = sum over rows of block blk (in order) of dout[n][c], in double */
static __global__ void colsum_partial_kernel(double *part, const float *x, int N, int C, int nblk)
{
	int tiles = (C + THREADS - 1) / THREADS;
	int blk = blockIdx.x / tiles, c = (blockIdx.x % tiles) * THREADS + threadIdx.x;
	if (blk >= nblk || c >= C)
		return;
	int n0 = blk * ROWS, n1 = n0 + ROWS < N ? n0 + ROWS : N;
	double acc = 0.0;
	for (int n = n0; n < n1; n++)
		acc += x[(size_t)n * C + c];
	part[(size_t)blk * C + c] = acc;
}

/* dst[c] += sum over blocks (in order) of part[b*C + c] */
static __global__ void reduce_blocks_d_kernel(float *dst, const double *part, int nblk, int C)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double acc = 0.0;
	for (int b = 0; b < nblk; b++)
		acc += part[(size_t)b * C + c];
	dst[c] += (float)acc;
}

/* dst[c] += column sums of x[N, C]; deterministic, no atomics. Takes the
 * scratch buffer: call it after the GEMMs are done with their converted
 * operands (a larger scratch_alloc frees the old buffer). */
static void colsum_add(float *dst, const float *x, int N, int C)
{
	int nblk = (N + ROWS - 1) / ROWS, tiles = (C + THREADS - 1) / THREADS;
	double *part = (double *)scratch_alloc((size_t)nblk * C * sizeof(double));
	launch<colsum_partial_kernel>((unsigned)nblk * tiles, THREADS, 0, part, x, N, C, nblk);
	KERNEL_CHECK();
	launch<reduce_blocks_d_kernel>(tiles, THREADS, 0, dst, part, nblk, C);
	KERNEL_CHECK();
	scratch_free(part);
}

/* ---- linear: out[N,OC] = inp[N,IC] . weight[OC,IC]^T + bias ----
 *
 * The weight comes as fp32 (linear_forward/backward) or as 16-bit words of
 * a kind (the *_w16 ops). A half table multiplies words of its own kind as
 * they are, with leading dimension IC (cuBLASLt is told their alignment;
 * no copy, no scratch); every other weight is converted (fp32), or widened
 * and converted (the other 16-bit kind, or 16-bit words for the fp32 table),
 * into the scratch buffer.
 *
 * Pieces. The activations (inp, dout) are converted into scratch; one
 * larger than device_gemm_piece_bytes() is converted and multiplied in
 * pieces, so the scratch holds one piece:
 *   - forward: rows of inp and out. Each output row is the same GEMM's as
 *     without pieces;
 *   - backward: columns of dout, that is rows of W and of dweight. Every
 *     row of dweight still comes from one GEMM over all N rows (beta 1);
 *     dinp adds the pieces' products in order (beta 0, then 1): the same
 *     sums in another order, fixed by the shape, so still the same every run.
 * inp is converted whole for dweight (an activation's size, in 2 bytes).
 * An LM head's backward at sequence 8192 and 128k vocabulary is the case:
 * its dout in bf16 is 2 GiB, where a piece is 256 MiB. */

struct wsrc {
	const float *f;    /* fp32, or NULL */
	const uint16_t *h; /* else 16-bit words of kind */
	enum kops_round kind;
};

static int piece_init;
static size_t piece_bytes;

static size_t piece_limit(void)
{
	if (!piece_init) { /* once, on the one host thread that runs the ops */
		piece_bytes = device_gemm_piece_bytes();
		piece_init = 1;
	}
	return piece_bytes;
}

static bool same_kind(const struct wsrc *w, int prec)
{
	return w->h && (prec == GEMM_BF16 ? w->kind == KOPS_ROUND_BF16 : prec == GEMM_F16 && w->kind == KOPS_ROUND_FP16);
}

/* scratch bytes for the weight: none for words the table multiplies as they
 * are; a 256-aligned fp32 copy for widened words; the converted operand */
static size_t weight_bytes(const struct wsrc *w, int prec, int OC, int IC)
{
	size_t b = 0;
	if (same_kind(w, prec))
		return 0;
	if (w->h) /* widened first */
		b += ((size_t)OC * IC * sizeof(float) + 255) & ~(size_t)255;
	if (prec != GEMM_F32)
		b += half_bytes(OC, IC);
	return b;
}

/* The weight as the GEMM's A operand, in buf (weight_bytes of it) when it
 * needs converting; its leading dimension in *ld. */
static const void *weight_operand(const struct wsrc *w, int prec, int OC, int IC, void *buf, int64_t *ld)
{
	if (same_kind(w, prec)) {
		*ld = IC;
		return w->h;
	}
	const float *f = w->f;
	char *p = (char *)buf;
	if (w->h) {
		cuda_widen16((float *)p, w->h, (size_t)OC * IC, w->kind);
		f = (const float *)p;
		p += ((size_t)OC * IC * sizeof(float) + 255) & ~(size_t)255;
	}
	if (prec == GEMM_F32) {
		*ld = IC;
		return f;
	}
	convert(p, f, OC, IC, IC, prec);
	*ld = half_pitch(IC);
	return p;
}

static cudaDataType_t ab_type(int prec)
{
	return prec == GEMM_F32 ? CUDA_R_32F : prec == GEMM_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* one forward GEMM, with the bias in the epilogue or, where cuBLASLt has no
 * algorithm for that, filled in first with beta = 1 as the CPU does */
static void forward_gemm(int prec, int N, int IC, int OC, struct gemm_call *g)
{
	if (lt_matmul_try(OP_FWD, prec, N, IC, OC, g))
		return;
	if (!g->bias)
		CUDA_BUG("cuBLASLt has no algorithm for this linear layer (above)");
	launch<bias_fill_kernel>(grid_for((size_t)N * OC), THREADS, 0, g->D, g->bias, N, OC);
	KERNEL_CHECK();
	g->bias = NULL;
	g->beta = 1.0f;
	lt_matmul(OP_FWD, prec, N, IC, OC, g);
}

static void linear_forward(int prec, float *out, const float *inp, struct wsrc w, const float *bias, int N, int IC,
			   int OC)
{
	if (N <= 0 || OC <= 0)
		return;
	if (IC <= 0) { /* an empty sum: the bias, or zeros */
		if (bias) {
			launch<bias_fill_kernel>(grid_for((size_t)N * OC), THREADS, 0, out, bias, N, OC);
			KERNEL_CHECK();
		} else {
			CUDA_CHECK(cudaMemset(out, 0, (size_t)N * OC * sizeof(float)));
		}
		return;
	}
	/* rows per piece of the converted input */
	int rows = N;
	if (prec != GEMM_F32 && half_bytes(N, IC) > piece_limit()) {
		size_t r = piece_limit() / ((size_t)half_pitch(IC) * 2);
		rows = r < 1 ? 1 : (int)r;
	}
	size_t bw = weight_bytes(&w, prec, OC, IC), bx = prec != GEMM_F32 ? half_bytes(rows, IC) : 0;
	void *buf = bw + bx ? scratch_alloc(bw + bx) : NULL;
	int64_t lda;
	const void *A = weight_operand(&w, prec, OC, IC, buf, &lda);
	void *xh = (char *)buf + bw;
	for (int n0 = 0; n0 < N; n0 += rows) {
		int n = N - n0 < rows ? N - n0 : rows;
		struct gemm_call g = { CUBLAS_OP_T, CUBLAS_OP_N, OC, n, IC, lda, IC, OC, ab_type(prec),
				       A, inp + (size_t)n0 * IC, out + (size_t)n0 * OC, bias, 0.0f };
		if (prec != GEMM_F32) {
			convert(xh, inp + (size_t)n0 * IC, n, IC, IC, prec);
			g.B = xh;
			g.ldb = half_pitch(IC);
		}
		forward_gemm(prec, n, IC, OC, &g);
	}
	if (buf)
		scratch_free(buf);
}

static void linear_backward(int prec, float *dinp, float *dweight, float *dbias, const float *dout,
			    const float *inp, struct wsrc w, int N, int IC, int OC)
{
	if (N <= 0 || OC <= 0 || IC <= 0) {
		if (dinp && N > 0 && IC > 0)
			CUDA_CHECK(cudaMemset(dinp, 0, (size_t)N * IC * sizeof(float)));
		if (dbias && N > 0 && OC > 0)
			colsum_add(dbias, dout, N, OC);
		return;
	}
	if (dinp || dweight) {
		/* columns of dout per piece: a multiple of 8 (16-byte rows) */
		int cols = OC;
		if (prec != GEMM_F32 && half_bytes(N, OC) > piece_limit()) {
			size_t c = (piece_limit() / ((size_t)N * 2)) & ~(size_t)7;
			cols = c < 8 ? 8 : (int)c;
		}
		/* one scratch allocation: the weight (dinp), inp (dweight), a piece of dout */
		size_t bw = dinp ? weight_bytes(&w, prec, OC, IC) : 0;
		size_t bx = dweight && prec != GEMM_F32 ? half_bytes(N, IC) : 0;
		size_t bd = prec != GEMM_F32 ? half_bytes(N, cols) : 0;
		void *buf = bw + bx + bd ? scratch_alloc(bw + bx + bd) : NULL;
		int64_t lda = IC;
		const void *W = dinp ? weight_operand(&w, prec, OC, IC, buf, &lda) : NULL;
		const void *X = inp;
		void *dh = (char *)buf + bw + bx;
		if (bx) {
			convert((char *)buf + bw, inp, N, IC, IC, prec);
			X = (char *)buf + bw;
		}
		const size_t esz = prec == GEMM_F32 ? 4 : 2;
		const int64_t ldx = prec == GEMM_F32 ? IC : half_pitch(IC);
		for (int o0 = 0; o0 < OC; o0 += cols) {
			int oc = OC - o0 < cols ? OC - o0 : cols;
			const void *D = dout + o0;
			int64_t ldd = OC;
			if (prec != GEMM_F32) {
				convert(dh, dout + o0, N, oc, OC, prec);
				D = dh;
				ldd = half_pitch(oc);
			}
			/* dinp^T (IC x N) (+)= W[o0:o0+oc]^T . dout[:, o0:o0+oc]^T */
			if (dinp) {
				struct gemm_call gi = { CUBLAS_OP_N, CUBLAS_OP_N, IC, N, oc, lda, ldd, IC, ab_type(prec),
							(const char *)W + (size_t)o0 * lda * esz, D, dinp, NULL,
							o0 ? 1.0f : 0.0f };
				lt_matmul(OP_DINP, prec, N, IC, oc, &gi);
			}
			/* dweight[o0:o0+oc]^T (IC x oc) += inp^T . dout[:, o0:o0+oc] */
			if (dweight) {
				struct gemm_call gw = { CUBLAS_OP_N, CUBLAS_OP_T, IC, oc, N, ldx, ldd, IC, ab_type(prec),
							X, D, dweight + (size_t)o0 * IC, NULL, 1.0f };
				lt_matmul(OP_DWEIGHT, prec, N, IC, oc, &gw);
			}
		}
		if (buf)
			scratch_free(buf); /* before colsum_add, which takes the scratch itself */
	}
	if (dbias)
		colsum_add(dbias, dout, N, OC);
}

/* The table holds plain function pointers: one set per precision. */
#define LINEAR_OPS(suffix, prec)                                                                   \
	static void linear_forward_##suffix(float *out, const float *inp, const float *weight,     \
					    const float *bias, int N, int IC, int OC)              \
	{                                                                                          \
		struct wsrc w = { weight, NULL, KOPS_ROUND_BF16 };                                 \
		linear_forward(prec, out, inp, w, bias, N, IC, OC);                                \
	}                                                                                          \
	static void linear_backward_##suffix(float *dinp, float *dweight, float *dbias,            \
					     const float *dout, const float *inp,                  \
					     const float *weight, int N, int IC, int OC)           \
	{                                                                                          \
		struct wsrc w = { weight, NULL, KOPS_ROUND_BF16 };                                 \
		linear_backward(prec, dinp, dweight, dbias, dout, inp, w, N, IC, OC);              \
	}                                                                                          \
	static void linear_forward_w16_##suffix(float *out, const float *inp, const uint16_t *weight, \
						const float *bias, int N, int IC, int OC,          \
						enum kops_round kind)                              \
	{                                                                                          \
		struct wsrc w = { NULL, weight, kind };                                            \
		linear_forward(prec, out, inp, w, bias, N, IC, OC);                                \
	}                                                                                          \
	static void linear_backward_w16_##suffix(float *dinp, float *dweight, float *dbias,        \
						 const float *dout, const float *inp,              \
						 const uint16_t *weight, int N, int IC, int OC,    \
						 enum kops_round kind)                             \
	{                                                                                          \
		struct wsrc w = { NULL, weight, kind };                                            \
		linear_backward(prec, dinp, dweight, dbias, dout, inp, w, N, IC, OC);              \
	}
LINEAR_OPS(f32, GEMM_F32)
LINEAR_OPS(bf16, GEMM_BF16)
LINEAR_OPS(f16, GEMM_F16)

#define FILL(t, suffix)                                                                            \
	do {                                                                                       \
		(t)->linear_forward = linear_forward_##suffix;                                     \
		(t)->linear_backward = linear_backward_##suffix;                                   \
		(t)->linear_forward_w16 = linear_forward_w16_##suffix;                             \
		(t)->linear_backward_w16 = linear_backward_w16_##suffix;                           \
	} while (0)

void cuda_gemm_fill(struct kops *t, enum gemm_precision prec)
{
	switch (prec) {
	case GEMM_F32:
		FILL(t, f32);
		break;
	case GEMM_BF16:
		FILL(t, bf16);
		break;
	case GEMM_F16:
		FILL(t, f16);
		break;
	default:
		CUDA_BUG("unknown GEMM precision");
	}
}

/* ---- the half-input tables: kops_cuda() with bf16/fp16 linear layers ---- */

static struct kops half_table[2]; /* [KOPS_ROUND_BF16], [KOPS_ROUND_FP16]; filled once, read-only after */
static pthread_once_t half_once = PTHREAD_ONCE_INIT;
static const struct kops *half_base; /* kops_cuda(), set before half_once runs */

static void half_init(void)
{
	half_table[KOPS_ROUND_BF16] = *half_base;
	half_table[KOPS_ROUND_BF16].name = "cuda-bf16";
	half_table[KOPS_ROUND_BF16].w16_direct = true;
	cuda_gemm_fill(&half_table[KOPS_ROUND_BF16], GEMM_BF16);
	cuda_attn_tc_fill(&half_table[KOPS_ROUND_BF16], GEMM_BF16);
	half_table[KOPS_ROUND_FP16] = *half_base;
	half_table[KOPS_ROUND_FP16].name = "cuda-fp16";
	half_table[KOPS_ROUND_FP16].w16_direct = true;
	cuda_gemm_fill(&half_table[KOPS_ROUND_FP16], GEMM_F16);
	cuda_attn_tc_fill(&half_table[KOPS_ROUND_FP16], GEMM_F16);
	kops_check(&half_table[KOPS_ROUND_BF16]);
	kops_check(&half_table[KOPS_ROUND_FP16]);
}

extern "C" const struct kops *kops_cuda_half(enum kops_round kind, const char **why)
{
	if (kind != KOPS_ROUND_BF16 && kind != KOPS_ROUND_FP16) {
		if (why)
			*why = "unknown half-precision kind";
		return NULL;
	}
	const struct kops *base = kops_cuda(why);
	if (!base)
		return NULL;
	half_base = base; /* the same pointer on every call */
	pthread_once(&half_once, half_init);
	return &half_table[kind];
}
