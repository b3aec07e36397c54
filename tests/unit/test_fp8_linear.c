/*
 * test_fp8_linear.c - the FP8 linear layer of the model (fp8_linear.c)
 * against a reference written here from docs/fp8.md's table of operands:
 * for one layer's forward, dgrad and wgrad, each operand quantized in its
 * role's format (E4M3 inputs and weights, E5M2 output gradients under
 * hybrid) with blocks along its GEMM's K dimension, dequantized and
 * multiplied in double. The recipes whose scales need no history
 * (tensorwise, blockwise, mxfp8) on the CPU backend; swapping a role's
 * format or a block's orientation fails the wgrad check, which is fp32
 * against double (no bf16 rounding in between, 1e-4 where the wrong role is off by 10 and more). The casts themselves are
 * fp8.h's, checked on their own in test_fp8 and fp8_casts.sh.
 */
#include "test.h"

#include <float.h>
#include <math.h>

#include "base/xalloc.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "model/gpt_int.h"
#include "tensor/mem.h"

#define N 12  /* B * S */
#define IC 32 /* the hidden size: fc1's input */
#define OC 96 /* 2 x ffn: fc1's output under SwiGLU */

static float bf16(float x)
{
	float y;
	kops_cpu()->round(&y, &x, 1, KOPS_ROUND_BF16);
	return y;
}

static uint64_t rng = 88172645463325252ULL;
static float urand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* The reference quantization of a [R, C] matrix (row-major, K = C
 * contiguous) into dequantized doubles: blocks br x bc, the recipe's rule. */
static void deq_ref(double *out, const float *x, int R, int C, enum gpt_fp8_recipe rec, bool weight, enum kops_fp8 f)
{
	int br = R, bc = C; /* tensorwise: the whole tensor */
	if (rec == GPT_FP8_BLOCKWISE)
		br = weight ? 128 : 1, bc = 128;
	else if (rec == GPT_FP8_MXFP8)
		br = 1, bc = 32;
	for (int r0 = 0; r0 < R; r0 += br)
		for (int c0 = 0; c0 < C; c0 += bc) {
			int r1 = r0 + br < R ? r0 + br : R, c1 = c0 + bc < C ? c0 + bc : C;
			float amax = 0, scale, sinv;
			for (int r = r0; r < r1; r++)
				for (int c = c0; c < c1; c++)
					amax = fmaxf(amax, fabsf(x[(size_t)r * C + c]));
			if (rec == GPT_FP8_MXFP8) {
				uint8_t e = fp8_e8m0_from(amax * (1.0f / fp8_max(f)));
				scale = fp8_e8m0_rcp(e), sinv = fp8_e8m0_to_f32(e);
			} else {
				bool pow2 = rec == GPT_FP8_BLOCKWISE;
				scale = fp8_scale_from_amax(amax, fp8_max(f), pow2, pow2 ? FP8_BF16_MAX : FLT_MAX);
				sinv = 1.0f / scale;
			}
			for (int r = r0; r < r1; r++)
				for (int c = c0; c < c1; c++)
					out[(size_t)r * C + c] =
						(double)fp8_to_f32(fp8_from_f32(x[(size_t)r * C + c] * scale, f), f) * sinv;
		}
}

static void transpose(float *t, const float *x, int R, int C)
{
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			t[(size_t)c * R + r] = x[(size_t)r * C + c];
}

/* out[M, Nn] = a[M, K] . b[Nn, K]^T in double */
static void gemm_ref(double *out, const double *a, const double *b, int M, int Nn, int K)
{
	for (int i = 0; i < M; i++)
		for (int j = 0; j < Nn; j++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += a[(size_t)i * K + k] * b[(size_t)j * K + k];
			out[(size_t)i * Nn + j] = s;
		}
}

/* the largest |got - want| / (|want| + floor) */
static double worst(const float *got, const double *want, size_t n, bool round_bf16)
{
	double w = 0, big = 0;
	for (size_t i = 0; i < n; i++)
		big = fmax(big, fabs(want[i]));
	for (size_t i = 0; i < n; i++) {
		double ref = round_bf16 ? (double)bf16((float)want[i]) : want[i];
		w = fmax(w, fabs((double)got[i] - ref) / (fabs(ref) + 1e-3 * big));
	}
	return w;
}

/* the largest relative difference per column of [R, C], each column
 * against its own largest value (bf16 outputs) */
static double worst_cols(const float *got, const double *want, int R, int C)
{
	double w = 0;
	for (int c = 0; c < C; c++) {
		double big = 0;
		for (int r = 0; r < R; r++)
			big = fmax(big, fabs(want[(size_t)r * C + c]));
		for (int r = 0; r < R; r++) {
			double ref = (double)bf16((float)want[(size_t)r * C + c]);
			w = fmax(w, fabs((double)got[(size_t)r * C + c] - ref) / (fabs(ref) + 1e-3 * big + 1e-300));
		}
	}
	return w;
}

/* One layer's fc1 (IC -> OC) through fp8_linear_fwd/bwd, against the
 * reference with the documented roles; *alt: the wgrad's difference from a
 * reference that quantizes dY in the other format (the check has power). */
static void run_recipe(enum gpt_fp8_recipe rec, bool hybrid, const char *what)
{
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.L = 1, c.h = IC, c.a = 2, c.g = 2, c.k = IC / 2, c.f = OC / 2, c.S = N / 2, c.P = N / 2;
	c.V = 13, c.Vp = 16, c.rope = true, c.rot = c.k, c.rotary_base = 10000, c.rmsnorm = true, c.eps = 1e-5f;
	c.swiglu = true, c.untied = true, c.gelu = KOPS_GELU_ERF, c.init_std = 0.3f;
	struct gpt_fp8_config f8 = { .on = true, .hybrid = hybrid, .recipe = rec, .history = 1, .wgrad = true };
	struct mem_pool mp;
	mem_pool_init(&mp, kops_cpu());
	struct gpt_model m;
	struct gpt_setup su = { .B = 2, .precision = GPT_BF16, .fp8 = &f8 };
	CHECK_INT(gpt_init_pipe(&m, &c, kops_cpu(), &mp, &su), 0);
	gpt_init_weights(&m, 7);
	int w = m.lp[0].fc1_w;
	CHECK(gpt_fp8_slot(&m, w) >= 0);
	CHECK(gpt_fp8_slot(&m, m.out_w) < 0 && gpt_fp8_slot(&m, m.wte) < 0); /* the head and embedding stay bf16 */

	float *x = xmalloc(N * IC * sizeof(float)), *dy = xmalloc(N * OC * sizeof(float));
	float *Wf = xmalloc(OC * IC * sizeof(float)), *y = xmalloc(N * OC * sizeof(float));
	float *dx = xmalloc(N * IC * sizeof(float)), *t1 = xmalloc(N * OC * sizeof(float));
	float *t2 = xmalloc(OC * IC * sizeof(float)), *t3 = xmalloc(N * IC * sizeof(float));
	for (int i = 0; i < N * IC; i++)
		x[i] = bf16(3.0f * urand());
	/* small, as output gradients are (E5M2's range), and with magnitudes
	 * that vary along both dimensions, so blocks of rows and of columns
	 * have other amaxes */
	for (int i = 0; i < N * OC; i++)
		dy[i] = bf16(ldexpf(1e-3f * urand(), (i / OC) % 6 - (i % OC) % 5));
	for (int i = 0; i < OC * IC; i++) /* odd columns 2^-18 of the even ones (see below) */
		Wf[i] = bf16(ldexpf(0.3f * urand(), (i % IC) % 2 ? -18 : 0));
	gpt_set_param(&m, w, Wf);
	const float *Wm = gpt_param(&m, w, GPT_VIEW_W);
	CHECK(!memcmp(Wm, Wf, OC * IC * sizeof(float)));
	float *dW = gpt_grad(&m, w);
	memset(dW, 0, OC * IC * sizeof(float));

	fp8_linear_fwd(&m, y, x, w, -1, N, IC, OC);
	fp8_linear_bwd(&m, dx, dy, x, w, -1, N, IC, OC);

	enum kops_fp8 e4 = KOPS_E4M3, g = hybrid ? KOPS_E5M2 : KOPS_E4M3, other = hybrid ? KOPS_E4M3 : KOPS_E5M2;
	double *A = xmalloc(N * OC * sizeof(double)), *B = xmalloc(OC * IC * sizeof(double));
	double *ref = xmalloc(OC * IC * sizeof(double)), *B2 = xmalloc(N * IC * sizeof(double));
	/* forward: X [N, IC] (input), W [OC, IC] (weight) */
	deq_ref(A, x, N, IC, rec, false, e4);
	deq_ref(B, Wf, OC, IC, rec, true, e4);
	gemm_ref(ref, A, B, N, OC, IC);
	double wf = worst(y, ref, N * OC, true);
	/* dgrad: dY [N, OC] (grad), W^T [IC, OC] (weight, blocks along OC) */
	deq_ref(A, dy, N, OC, rec, false, g);
	transpose(t2, Wf, OC, IC);
	deq_ref(B, t2, IC, OC, rec, true, e4);
	gemm_ref(ref, A, B, N, IC, OC);
	double wd = worst_cols(dx, ref, N, IC);
	/* wgrad: dY^T [OC, N] (grad), X^T [IC, N] (input), blocks along N */
	transpose(t1, dy, N, OC);
	deq_ref(A, t1, OC, N, rec, false, g);
	transpose(t3, x, N, IC);
	deq_ref(B2, t3, IC, N, rec, false, e4);
	gemm_ref(ref, A, B2, OC, IC, N);
	double ww = worst(dW, ref, OC * IC, false);
	/* the same with dY in the other format: the check tells them apart */
	deq_ref(A, t1, OC, N, rec, false, other);
	gemm_ref(ref, A, B2, OC, IC, N);
	double walt = worst(dW, ref, OC * IC, false);
	/* and, for block scales, W^T quantized from W's row-wise blocks
	 * (along IC) rather than column-wise (along OC): the odd columns of W
	 * are 2^-18 of the even ones, so along IC they fall into E4M3's
	 * subnormals and along OC they do not; dgrad's odd columns tell (MXFP8:
	 * the blockwise recipe's 128x128 weight blocks are the same both ways) */
	double wrow = 1;
	if (rec == GPT_FP8_MXFP8) {
		double *R = xmalloc(OC * IC * sizeof(double));
		deq_ref(R, Wf, OC, IC, rec, true, e4);
		for (int o = 0; o < OC; o++)
			for (int i = 0; i < IC; i++)
				B[(size_t)i * OC + o] = R[(size_t)o * IC + i];
		deq_ref(A, dy, N, OC, rec, false, g);
		gemm_ref(ref, A, B, N, IC, OC);
		wrow = worst_cols(dx, ref, N, IC);
		free(R);
	}
	printf("#   %s: forward %.2g, dgrad %.2g (bf16 outputs), wgrad %.2g; dY in the other format: %.2g, W^T "
	       "row-wise: %.2g\n", what, wf, wd, ww, walt, wrow);
	CHECK(wf <= 1.0 / 128); /* a bf16 rounding either side */
	CHECK(wd <= 1.0 / 128);
	CHECK(ww <= 1e-4); /* fp32 sums of 12 products against double, near-cancelling ones included */
	CHECK(walt > 1e-3);
	CHECK(wrow > 1.0 / 16);

	free(x), free(dy), free(Wf), free(y), free(dx), free(t1), free(t2), free(t3);
	free(A), free(B), free(ref), free(B2);
	gpt_free(&m);
}

static void test_tensorwise_hybrid(void)
{
	run_recipe(GPT_FP8_TENSORWISE, true, "tensorwise, hybrid");
}

static void test_tensorwise_e4m3(void)
{
	run_recipe(GPT_FP8_TENSORWISE, false, "tensorwise, e4m3");
}

static void test_blockwise(void)
{
	run_recipe(GPT_FP8_BLOCKWISE, true, "blockwise, hybrid");
}

static void test_mxfp8(void)
{
	run_recipe(GPT_FP8_MXFP8, false, "mxfp8, e4m3");
}

int main(void)
{
	RUN(test_tensorwise_hybrid);
	RUN(test_tensorwise_e4m3);
	RUN(test_blockwise);
	RUN(test_mxfp8);
	return test_summary();
}
