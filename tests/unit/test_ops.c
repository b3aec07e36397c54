/*
 * test_ops.c - the CPU backend of the op table (lib/kernels/cpu_*.c).
 *
 *  - every backward against central finite differences of its forward: a
 *    scalar L = sum(out * R) with a random projection R, evaluated in double
 *    from the fp32 forward; the whole analytic gradient must agree to 1%
 *    relative (a wrong sign or a missing term is off by 30% and more);
 *  - forwards (and the backwards once more, through autograd) against
 *    PyTorch in float64 (/usr/bin/python3, torch 1.13), one script for all;
 *    RoPE tables, bf16/fp16 rounding and AdamW against torch's own fp32;
 *  - the random numbers: Philox known-answer vectors, the documented
 *    uniform/normal/dropout definitions, mask determinism and keep rate;
 *  - bit-identical results with 1 and 2 OpenMP threads;
 *  - timings of linear and attention (printed), with checks that the timed
 *    calls repeat the warm-up's results bit for bit and that the linear layer
 *    at the output layer's size is right on sampled entries.
 */
#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/dtype.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/rope_scaling.h"
#include "test.h"
#include "test_fd.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <sys/wait.h>
#include <time.h>

static const struct kops *ops;
static char *dir;

/* ---- helpers ---- */

/* splitmix64: the test's own input generator, independent of the code under test */
static uint64_t rng = 0x853c49e6748fea9bULL;
static uint64_t next_u64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* uniform in [-s, s) */
static float frand(float s)
{
	return s * (2.0f * (float)(next_u64() >> 40) * 0x1p-24f - 1.0f);
}

static float *randv(size_t n, float s)
{
	float *x = xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = frand(s);
	return x;
}

static float *copyv(const float *x, size_t n)
{
	float *y = xmalloc(n * sizeof(float));
	memcpy(y, x, n * sizeof(float));
	return y;
}

static float *zerov(size_t n)
{
	return xcalloc(n, sizeof(float));
}

static float *diffv(const float *a, const float *b, size_t n) /* a - b */
{
	float *d = xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		d[i] = a[i] - b[i];
	return d;
}

/* |a - b| <= atol + rtol |b| everywhere; reports the worst element */
static int close_enough(const char *what, const float *a, const float *b, size_t n, double rtol,
			double atol)
{
	size_t worst = 0;
	double wexcess = 0;
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]), lim = atol + rtol * fabs(b[i]);
		if (!(d <= lim)) {
			if (!bad || d - lim > wexcess || isnan(d))
				worst = i, wexcess = d - lim;
			bad++;
		}
	}
	if (bad)
		printf("#   %s: %d of %zu differ, e.g. [%zu] %.9g vs %.9g\n", what, bad, n, worst,
		       a[worst], b[worst]);
	return !bad;
}
#define CHECK_CLOSE(what, a, b, n, rtol, atol) CHECK(close_enough(what, a, b, n, rtol, atol))

static int same_bits(const char *what, const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float))) {
			printf("#   %s: [%zu] %.9g vs %.9g\n", what, i, a[i], b[i]);
			return 0;
		}
	return 1;
}
#define CHECK_SAME(what, a, b, n) CHECK(same_bits(what, a, b, n))

/* ---- finite differences (test_fd.h) ---- */

/* ---- random numbers ---- */

static void test_philox_known_answers(void)
{
	/* Random123's kat_vectors for philox4x32, 10 rounds */
	static const uint32_t kat[3][10] = {
		{ 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
		{ 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
		  0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
		{ 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
		  0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 },
	};
	for (int i = 0; i < 3; i++) {
		uint32_t out[4];
		cpu_philox4x32(out, kat[i], kat[i][4], kat[i][5]);
		for (int j = 0; j < 4; j++)
			CHECK_INT(out[j], kat[i][6 + j]);
	}
}

static void test_uniform_and_normal_definitions(void)
{
	const uint64_t seeds[] = { 0, 1234, 0xfedcba9876543210ULL };
	for (int s = 0; s < 3; s++) {
		uint64_t seed = seeds[s];
		for (uint64_t c = 0; c < 64; c++) {
			uint64_t cc = c * 0x100000001ULL + (c & 3); /* counters above 2^32 too */
			uint32_t w[4];
			const uint32_t ctr[4] = { (uint32_t)(cc >> 2), (uint32_t)(cc >> 34), 0, 0 };
			cpu_philox4x32(w, ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
			float u = kops_uniform(seed, cc);
			CHECK(u == (float)(w[cc & 3] >> 8) * 0x1p-24f);
			/* normal: Box-Muller on uniform draws 2c and 2c+1 */
			double u1 = 1.0 - kops_uniform(seed, 2 * c), u2 = kops_uniform(seed, 2 * c + 1);
			float z = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
			CHECK(kops_normal(seed, c) == z);
		}
	}
	/* moments */
	const int n = 200000;
	double su = 0, su2 = 0, sz = 0, sz2 = 0, sz4 = 0;
	float umin = 1, umax = 0;
	for (int i = 0; i < n; i++) {
		float u = kops_uniform(42, (uint64_t)i);
		umin = u < umin ? u : umin;
		umax = u > umax ? u : umax;
		su += u, su2 += (double)u * u;
		double z = kops_normal(42, (uint64_t)i);
		sz += z, sz2 += z * z, sz4 += z * z * z * z;
	}
	CHECK(umin >= 0.0f && umax < 1.0f);
	CHECK(fabs(su / n - 0.5) < 0.003);
	CHECK(fabs(su2 / n - 1.0 / 3) < 0.003);
	CHECK(fabs(sz / n) < 0.01);
	CHECK(fabs(sz2 / n - 1.0) < 0.015);
	CHECK(fabs(sz4 / n - 3.0) < 0.1);
	/* different seeds, different streams */
	int same = 0;
	for (int i = 0; i < 1000; i++)
		same += kops_uniform(1, (uint64_t)i) == kops_uniform(2, (uint64_t)i);
	CHECK(same < 5);
}

static void test_dropout_mask(void)
{
	const size_t n = 10007; /* spans several chunks, ends mid-block */
	const float p = 0.3f;
	const uint64_t seed = 77, off = 1000003; /* not a multiple of 4 */
	float *res = randv(n, 1), *x = randv(n, 1), *out = zerov(n), *out2 = zerov(n);
	ops->dropout_add_forward(out, res, x, n, p, seed, off);
	ops->dropout_add_forward(out2, res, x, n, p, seed, off);
	CHECK_SAME("same mask twice", out, out2, n);
	size_t kept = 0, bad = 0;
	for (size_t i = 0; i < n; i++) {
		int keep = kops_uniform(seed, off + i) >= p;
		kept += keep;
		float want = res[i] + x[i] * (keep ? 1.0f / (1.0f - p) : 0.0f);
		bad += out[i] != want;
	}
	CHECK_INT(bad, 0);
	double rate = (double)kept / n;
	CHECK(fabs(rate - 0.7) < 0.02);
	/* a different offset draws a different mask */
	ops->dropout_add_forward(out2, res, x, n, p, seed, off + n);
	size_t differ = 0;
	for (size_t i = 0; i < n; i++)
		differ += out[i] != out2[i];
	CHECK(differ > n / 5);
	/* aliasing: out = residual, out = x, dx = dout */
	float *a = copyv(res, n);
	ops->dropout_add_forward(a, a, x, n, p, seed, off);
	CHECK_SAME("out aliases residual", a, out, n);
	memcpy(a, x, n * sizeof(float));
	ops->dropout_add_forward(a, res, a, n, p, seed, off);
	CHECK_SAME("out aliases x", a, out, n);
	float *dx = zerov(n);
	ops->dropout_backward(dx, x, n, p, seed, off);
	memcpy(a, x, n * sizeof(float));
	ops->dropout_backward(a, a, n, p, seed, off);
	CHECK_SAME("dx aliases dout", a, dx, n);
	for (size_t i = 0; i < n; i++) /* same mask, same scale */
		bad += dx[i] != x[i] * (kops_uniform(seed, off + i) >= p ? 1.0f / (1.0f - p) : 0.0f);
	CHECK_INT(bad, 0);
	/* p = 0: a plain add, and backward the identity */
	ops->dropout_add_forward(out2, res, x, n, 0.0f, seed, off);
	for (size_t i = 0; i < n; i++)
		bad += out2[i] != res[i] + x[i];
	ops->dropout_backward(dx, x, n, 0.0f, seed, off);
	CHECK_SAME("p = 0 backward", dx, x, n);
	CHECK_INT(bad, 0);
	free(res), free(x), free(out), free(out2), free(a), free(dx);
}

struct drop_case {
	float *res, *x, *out;
	size_t n;
	float p;
};

static void drop_fwd(void *ctx)
{
	struct drop_case *c = ctx;
	ops->dropout_add_forward(c->out, c->res, c->x, c->n, c->p, 5, 3);
}

static void test_dropout_grad(void)
{
	struct drop_case c = { randv(301, 1), randv(301, 1), zerov(301), 301, 0.25f };
	float *R = randv(c.n, 1), *dx = zerov(c.n);
	struct fd f = { drop_fwd, &c, c.out, R, c.n };
	ops->dropout_backward(dx, R, c.n, c.p, 5, 3);
	CHECK_GRAD(&f, c.x, c.n, dx, 1e-2f);
	/* d/dresidual = R itself */
	CHECK_GRAD(&f, c.res, c.n, R, 1e-2f);
	free(c.res), free(c.x), free(c.out), free(R), free(dx);
}

/* cpu_expf, the helper the softmax, sigmoid and GELU loops use */
static void test_expf_helper(void)
{
	double worst = 0;
	for (int i = 0; i <= 2000000; i++) {
		float x = -87.0f + 175.0f * (float)i / 2000000.0f;
		double want = exp((double)x), got = cpu_expf(x);
		double ulp = ldexp(1.0, ilogb(want) - 23);
		double e = fabs(got - want) / ulp;
		worst = e > worst ? e : worst;
	}
	printf("#   cpu_expf: max error %.2f ulp on [-87, 88]\n", worst);
	CHECK(worst <= 2.0);
	CHECK(cpu_expf(0.0f) == 1.0f);
	CHECK(isinf(cpu_expf(89.0f)) && isinf(cpu_expf(INFINITY)));
	CHECK(cpu_expf(-INFINITY) == 0.0f && cpu_expf(-200.0f) == 0.0f);
	CHECK(isnan(cpu_expf(NAN)));
	/* subnormal results keep their scale (to the subnormal spacing 2^-149) */
	for (float x = -87.5f; x > -104.0f; x -= 0.37f)
		CHECK(fabs(cpu_expf(x) - exp((double)x)) <= 0x1p-149);
	CHECK(cpu_expf(88.7f) > 3e38f && !isinf(cpu_expf(88.7f)));
}

/* ---- linear ---- */

struct linear_case {
	float *out, *inp, *w, *b;
	int N, IC, OC;
};

static void linear_fwd(void *ctx)
{
	struct linear_case *c = ctx;
	ops->linear_forward(c->out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
}

static void test_linear_grad(void)
{
	struct linear_case c = { 0 };
	c.N = 5, c.IC = 7, c.OC = 6;
	c.inp = randv((size_t)c.N * c.IC, 1), c.w = randv((size_t)c.OC * c.IC, 1);
	c.b = randv((size_t)c.OC, 1), c.out = zerov((size_t)c.N * c.OC);
	float *R = randv((size_t)c.N * c.OC, 1);
	float *dinp = randv((size_t)c.N * c.IC, 9); /* overwritten */
	float *dw0 = randv((size_t)c.OC * c.IC, 1), *dw = copyv(dw0, (size_t)c.OC * c.IC);
	float *db0 = randv((size_t)c.OC, 1), *db = copyv(db0, (size_t)c.OC);
	linear_fwd(&c);
	for (int n = 0; n < c.N; n++) /* direct check of the forward */
		for (int o = 0; o < c.OC; o++) {
			double s = c.b[o];
			for (int i = 0; i < c.IC; i++)
				s += (double)c.inp[n * c.IC + i] * c.w[o * c.IC + i];
			CHECK(fabs(s - c.out[n * c.OC + o]) < 1e-5);
		}
	ops->linear_backward(dinp, dw, db, R, c.inp, c.w, c.N, c.IC, c.OC);
	float *gw = diffv(dw, dw0, (size_t)c.OC * c.IC), *gb = diffv(db, db0, (size_t)c.OC);
	struct fd f = { linear_fwd, &c, c.out, R, (size_t)c.N * c.OC };
	CHECK_GRAD(&f, c.inp, (size_t)c.N * c.IC, dinp, 1e-2f);
	CHECK_GRAD(&f, c.w, (size_t)c.OC * c.IC, gw, 1e-2f);
	CHECK_GRAD(&f, c.b, (size_t)c.OC, gb, 1e-2f);
	/* the harness is not vacuous: a negated gradient fails it */
	for (size_t i = 0; i < (size_t)c.OC * c.IC; i++)
		gw[i] = -gw[i];
	CHECK(fd_relerr(&f, c.w, (size_t)c.OC * c.IC, gw, 1e-2f) > 1.0);
	/* a second backward accumulates again into dweight and dbias; NULL skips */
	ops->linear_backward(NULL, dw, db, R, c.inp, c.w, c.N, c.IC, c.OC);
	for (size_t i = 0; i < (size_t)c.OC * c.IC; i++)
		CHECK(fabsf(dw[i] - (dw0[i] - 2 * gw[i])) < 1e-5f);
	for (int o = 0; o < c.OC; o++)
		CHECK(fabsf(db[o] - (db0[o] + 2 * gb[o])) < 1e-5f);
	ops->linear_backward(dinp, dw, NULL, R, c.inp, c.w, c.N, c.IC, c.OC);
	/* no bias */
	free(c.b);
	c.b = NULL;
	linear_fwd(&c);
	for (int o = 0; o < c.OC; o++) {
		double s = 0;
		for (int i = 0; i < c.IC; i++)
			s += (double)c.inp[i] * c.w[o * c.IC + i];
		CHECK(fabs(s - c.out[o]) < 1e-5);
	}
	free(c.inp), free(c.w), free(c.out), free(R), free(dinp), free(dw0), free(dw), free(db0),
		free(db), free(gw), free(gb);
}

/* ---- embedding ---- */

struct emb_case {
	float *out, *wte, *wpe;
	int32_t *tok, *pos;
	int N, C;
};

static void emb_fwd(void *ctx)
{
	struct emb_case *c = ctx;
	ops->embedding_forward(c->out, c->tok, c->pos, c->wte, c->wpe, c->N, c->C);
}

static void test_embedding_grad(void)
{
	int32_t tok[9] = { 3, 1, 3, 0, 6, 3, 1, 2, 5 }, pos[9] = { 0, 1, 2, 3, 0, 1, 2, 3, 4 };
	const int V = 7, P = 5, N = 9, C = 5;
	for (int with_pos = 0; with_pos < 2; with_pos++) {
		struct emb_case c = { zerov((size_t)N * C), randv((size_t)V * C, 1),
				      with_pos ? randv((size_t)P * C, 1) : NULL, tok,
				      with_pos ? pos : NULL, N, C };
		emb_fwd(&c);
		for (int n = 0; n < N; n++)
			for (int j = 0; j < C; j++)
				CHECK(c.out[n * C + j] ==
				      c.wte[tok[n] * C + j] + (with_pos ? c.wpe[pos[n] * C + j] : 0.0f));
		float *R = randv((size_t)N * C, 1);
		float *dwte0 = randv((size_t)V * C, 1), *dwte = copyv(dwte0, (size_t)V * C);
		float *dwpe0 = randv((size_t)P * C, 1), *dwpe = copyv(dwpe0, (size_t)P * C);
		ops->embedding_backward(dwte, with_pos ? dwpe : NULL, R, tok, c.pos, N, C);
		float *gte = diffv(dwte, dwte0, (size_t)V * C), *gpe = diffv(dwpe, dwpe0, (size_t)P * C);
		struct fd f = { emb_fwd, &c, c.out, R, (size_t)N * C };
		CHECK_GRAD(&f, c.wte, (size_t)V * C, gte, 1e-2f);
		if (with_pos)
			CHECK_GRAD(&f, c.wpe, (size_t)P * C, gpe, 1e-2f);
		else
			CHECK_SAME("dwpe untouched", dwpe, dwpe0, (size_t)P * C);
		free(c.out), free(c.wte), free(c.wpe), free(R), free(dwte0), free(dwte), free(dwpe0),
			free(dwpe), free(gte), free(gpe);
	}
}

/* ---- norms ---- */

struct norm_case {
	float *out, *mean, *rstd, *inp, *w, *b;
	int N, C;
	int rms;
};

static void norm_fwd(void *ctx)
{
	struct norm_case *c = ctx;
	if (c->rms)
		ops->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
	else
		ops->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 1e-5f);
}

static void norm_grad_case(int rms, int with_bias, int N, int C)
{
	struct norm_case c = { 0 };
	c.N = N, c.C = C, c.rms = rms;
	c.inp = randv((size_t)N * C, 2), c.out = zerov((size_t)N * C);
	c.mean = zerov((size_t)N), c.rstd = zerov((size_t)N);
	c.w = randv((size_t)C, 1.5f), c.b = with_bias ? randv((size_t)C, 1) : NULL;
	for (int n = 0; n < N; n++) /* an offset per row, for LayerNorm to remove */
		for (int j = 0; j < C; j++)
			c.inp[n * C + j] += (float)(n % 5) - 2.0f;
	float *R = randv((size_t)N * C, 1), *dinp = randv((size_t)N * C, 9);
	float *dw0 = randv((size_t)C, 1), *dw = copyv(dw0, (size_t)C);
	float *db0 = randv((size_t)C, 1), *db = copyv(db0, (size_t)C);
	norm_fwd(&c);
	if (rms)
		ops->rmsnorm_backward(dinp, dw, R, c.inp, c.w, c.rstd, N, C);
	else
		ops->layernorm_backward(dinp, dw, with_bias ? db : NULL, R, c.inp, c.w, c.mean, c.rstd, N, C);
	float *gw = diffv(dw, dw0, (size_t)C), *gb = diffv(db, db0, (size_t)C);
	struct fd f = { norm_fwd, &c, c.out, R, (size_t)N * C };
	CHECK_GRAD(&f, c.inp, (size_t)N * C, dinp, 1e-2f);
	CHECK_GRAD(&f, c.w, (size_t)C, gw, 1e-2f);
	if (with_bias)
		CHECK_GRAD(&f, c.b, (size_t)C, gb, 1e-2f);
	else
		CHECK_SAME("db untouched", db, db0, (size_t)C);
	/* dinp NULL: the parameter grads alone, the same values */
	float *dw2 = copyv(dw0, (size_t)C);
	if (rms)
		ops->rmsnorm_backward(NULL, dw2, R, c.inp, c.w, c.rstd, N, C);
	else
		ops->layernorm_backward(NULL, dw2, NULL, R, c.inp, c.w, c.mean, c.rstd, N, C);
	CHECK_SAME("dw without dinp", dw2, dw, (size_t)C);
	free(c.inp), free(c.out), free(c.mean), free(c.rstd), free(c.w), free(c.b), free(R),
		free(dinp), free(dw0), free(dw), free(db0), free(db), free(gw), free(gb), free(dw2);
}

static void test_layernorm_grad(void)
{
	norm_grad_case(0, 1, 4, 9);
	norm_grad_case(0, 0, 3, 6);
	norm_grad_case(0, 1, 37, 5); /* two row blocks for the parameter grads */
}

static void test_rmsnorm_grad(void)
{
	norm_grad_case(1, 0, 4, 9);
	norm_grad_case(1, 0, 37, 5);
}

/* ---- GELU, SwiGLU ---- */

struct act_case {
	float *out, *inp;
	size_t n;
	int N, F;
	enum kops_gelu kind;
	int swiglu;
};

static void act_fwd(void *ctx)
{
	struct act_case *c = ctx;
	if (c->swiglu)
		ops->swiglu_forward(c->out, c->inp, c->N, c->F);
	else
		ops->gelu_forward(c->out, c->inp, c->n, c->kind);
}

static void test_gelu_grad(void)
{
	for (int kind = KOPS_GELU_TANH; kind <= KOPS_GELU_ERF; kind++) {
		const size_t n = 64;
		struct act_case c = { zerov(n), randv(n, 4), n, 0, 0, (enum kops_gelu)kind, 0 };
		float *R = randv(n, 1), *dinp = zerov(n);
		ops->gelu_backward(dinp, R, c.inp, n, c.kind);
		struct fd f = { act_fwd, &c, c.out, R, n };
		CHECK_GRAD(&f, c.inp, n, dinp, 1e-2f);
		/* in place: out = inp, dinp = dout */
		act_fwd(&c);
		float *y = copyv(c.inp, n), *d = copyv(R, n);
		ops->gelu_forward(y, y, n, c.kind);
		ops->gelu_backward(d, d, c.inp, n, c.kind);
		CHECK_SAME("gelu in place", y, c.out, n);
		CHECK_SAME("gelu backward in place", d, dinp, n);
		free(c.out), free(c.inp), free(R), free(dinp), free(y), free(d);
	}
}

static void test_swiglu_grad(void)
{
	const int N = 3, F = 5;
	struct act_case c = { zerov((size_t)N * F), randv((size_t)N * 2 * F, 3), 0, N, F, 0, 1 };
	float *R = randv((size_t)N * F, 1), *dinp = randv((size_t)N * 2 * F, 9);
	act_fwd(&c);
	for (int n = 0; n < N; n++)
		for (int j = 0; j < F; j++) {
			double g = c.inp[n * 2 * F + j], u = c.inp[n * 2 * F + F + j];
			CHECK(fabs(g / (1 + exp(-g)) * u - c.out[n * F + j]) < 1e-5);
		}
	ops->swiglu_backward(dinp, R, c.inp, N, F);
	struct fd f = { act_fwd, &c, c.out, R, (size_t)N * F };
	CHECK_GRAD(&f, c.inp, (size_t)N * 2 * F, dinp, 1e-2f);
	free(c.out), free(c.inp), free(R), free(dinp);
}

/* ---- QKV split + RoPE ---- */

struct qkv_case {
	int B, T, a, g, k, rot;
	bool inter; /* --rotary-interleaved */
	float *qkv, *q, *kk, *v, *cos, *sin;
	float *out; /* [q | kk | v] concatenated, for the fd harness */
};

static void qkv_fwd(void *ctx)
{
	struct qkv_case *c = ctx;
	ops->qkv_split_forward(c->q, c->kk, c->v, c->qkv, c->cos, c->sin, c->B, c->T, c->a, c->g,
			       c->k, c->rot, c->inter);
}

static void qkv_case(int B, int T, int a, int g, int k, int rot, bool inter)
{
	struct qkv_case c = { B, T, a, g, k, rot, inter, 0, 0, 0, 0, 0, 0, 0 };
	const int m = a / g;
	const size_t nq = (size_t)B * a * T * k, nkv = (size_t)B * g * T * k;
	const size_t nqkv = (size_t)B * T * (a + 2 * g) * k, nout = nq + 2 * nkv;
	c.qkv = randv(nqkv, 1);
	c.out = zerov(nout), c.q = c.out, c.kk = c.out + nq, c.v = c.out + nq + nkv;
	if (rot) {
		c.cos = zerov((size_t)T * rot), c.sin = zerov((size_t)T * rot);
		struct rope_spec sp = { rot, 10000.0f, NULL, NULL, inter };
		rope_table(c.cos, c.sin, T, &sp);
	}
	qkv_fwd(&c);
	/* direct index computation: token (b,t), group G, piece j, channel i */
	int bad = 0;
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			for (int G = 0; G < g; G++)
				for (int j = 0; j < m + 2; j++)
					for (int i = 0; i < k; i++) {
						const float *x = c.qkv + ((size_t)(b * T + t) * (a + 2 * g) + G * (m + 2) + j) * k;
						double want = x[i];
						if (rot && j <= m && i < rot) {
							/* the partner channel, and whether i leads its pair */
							int h2 = rot / 2, o = inter ? i ^ 1 : i < h2 ? i + h2 : i - h2;
							bool lead = inter ? i % 2 == 0 : i < h2;
							const float *cs = c.cos + t * rot, *sn = c.sin + t * rot;
							want = lead ? (double)x[i] * cs[i] - (double)x[o] * sn[i]
								    : (double)x[i] * cs[i] + (double)x[o] * sn[i];
						}
						float got;
						if (j < m)
							got = c.q[(((size_t)b * a + G * m + j) * T + t) * k + i];
						else if (j == m)
							got = c.kk[(((size_t)b * g + G) * T + t) * k + i];
						else
							got = c.v[(((size_t)b * g + G) * T + t) * k + i];
						bad += !(fabs(got - want) < 1e-6);
					}
	CHECK_INT(bad, 0);
	/* backward is the exact adjoint: <dout, F x> == <F^T dout, x> */
	float *R = randv(nout, 1), *dqkv = randv(nqkv, 9);
	ops->qkv_split_backward(dqkv, R, R + nq, R + nq + nkv, c.cos, c.sin, B, T, a, g, k, rot, inter);
	double lhs = 0, rhs = 0, mag = 0;
	for (size_t i = 0; i < nout; i++)
		lhs += (double)R[i] * c.out[i], mag += fabs((double)R[i] * c.out[i]);
	for (size_t i = 0; i < nqkv; i++)
		rhs += (double)dqkv[i] * c.qkv[i];
	CHECK(fabs(lhs - rhs) < 1e-6 * mag);
	struct fd f = { qkv_fwd, &c, c.out, R, nout };
	CHECK_GRAD(&f, c.qkv, nqkv, dqkv, 1e-2f);
	free(c.qkv), free(c.out), free(c.cos), free(c.sin), free(R), free(dqkv);
}

static void test_qkv_split(void)
{
	qkv_case(2, 5, 4, 2, 6, 0, false);
	qkv_case(2, 5, 4, 2, 6, 4, false); /* partial rotary */
	qkv_case(2, 5, 4, 2, 6, 6, false);
	qkv_case(1, 3, 3, 3, 4, 4, false); /* no GQA */
	qkv_case(1, 3, 4, 1, 4, 2, false); /* one group */
	/* interleaved pairs, full and partial, on their own random draws (the
	 * later tests' inputs stay what they were) */
	uint64_t saved = rng;
	qkv_case(2, 5, 4, 2, 6, 6, true);
	qkv_case(2, 5, 4, 2, 8, 4, true);
	rng = saved;
}

/* ---- attention ---- */

struct attn_case {
	int B, T, a, g, k;
	float scale, p;
	uint64_t seed, off;
	const int32_t *doc;
	float *q, *kk, *v, *out, *probs;
	int window; /* sliding window (ops.h), -1: none */
};

static void attn_fwd(void *ctx)
{
	struct attn_case *c = ctx;
	ops->attention_forward(c->out, c->probs, c->q, c->kk, c->v, c->doc, c->B, c->T, c->a, c->g,
			       c->k, c->scale, c->window, c->p, c->seed, c->off);
}

/* Naive reference in double, straight from ops.h (dropout mask from kops_uniform). */
static void attn_reference(const struct attn_case *c, double *out)
{
	const int B = c->B, T = c->T, a = c->a, g = c->g, k = c->k, m = a / g;
	double *s = xmalloc((size_t)T * sizeof(double));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < a; h++)
			for (int tq = 0; tq < T; tq++) {
				const float *qr = c->q + (((size_t)b * a + h) * T + tq) * k;
				double mx = -INFINITY, sum = 0;
				for (int tk = 0; tk <= tq; tk++) {
					s[tk] = -INFINITY;
					if (c->doc && c->doc[b * T + tk] != c->doc[b * T + tq])
						continue;
					if (c->window >= 0 && tk < tq - c->window)
						continue;
					const float *kr = c->kk + (((size_t)b * g + h / m) * T + tk) * k;
					double d = 0;
					for (int i = 0; i < k; i++)
						d += (double)qr[i] * kr[i];
					s[tk] = d * c->scale;
					mx = s[tk] > mx ? s[tk] : mx;
				}
				for (int tk = 0; tk <= tq; tk++)
					sum += s[tk] = exp(s[tk] - mx);
				double *o = out + ((size_t)b * T + tq) * a * k + (size_t)h * k;
				for (int i = 0; i < k; i++)
					o[i] = 0;
				for (int tk = 0; tk <= tq; tk++) {
					double pr = s[tk] / sum;
					if (c->p > 0) {
						uint64_t ctr = c->off + (((uint64_t)h * c->B + b) * T + tq) * T + tk; /* head-major (ops.h) */
						pr = kops_uniform(c->seed, ctr) >= c->p ? pr * (1.0f / (1.0f - c->p)) : 0;
					}
					const float *vr = c->v + (((size_t)b * g + h / m) * T + tk) * k;
					for (int i = 0; i < k; i++)
						o[i] += pr * vr[i];
				}
			}
	free(s);
}

static void attn_case_w(int B, int T, int a, int g, int k, const int32_t *doc, float p, int window)
{
	struct attn_case c = { B, T, a, g, k, 1.0f / sqrtf((float)k), p, 99, 12345, doc, 0, 0, 0, 0, 0, window };
	const size_t nq = (size_t)B * a * T * k, nkv = (size_t)B * g * T * k;
	c.q = randv(nq, 1.5f), c.kk = randv(nkv, 1.5f), c.v = randv(nkv, 1);
	c.out = zerov(nq), c.probs = zerov((size_t)B * a * T * T);
	attn_fwd(&c);
	double *ref = xmalloc(nq * sizeof(double));
	attn_reference(&c, ref);
	int bad = 0;
	for (size_t i = 0; i < nq; i++)
		bad += !(fabs(c.out[i] - ref[i]) < 1e-5 * (1 + fabs(ref[i])));
	CHECK_INT(bad, 0);
	/* saved probs: rows sum to 1 over allowed keys, 0 elsewhere */
	for (int bh = 0; bh < B * a; bh++)
		for (int tq = 0; tq < T; tq++) {
			const float *pr = c.probs + ((size_t)bh * T + tq) * T;
			double sum = 0;
			for (int tk = 0; tk < T; tk++) {
				int allowed = tk <= tq && (!doc || doc[bh / a * T + tk] == doc[bh / a * T + tq]) &&
					      (window < 0 || tk >= tq - window);
				if (!allowed)
					bad += pr[tk] != 0.0f;
				sum += pr[tk];
			}
			bad += !(fabs(sum - 1) < 1e-5);
		}
	CHECK_INT(bad, 0);
	float *R = randv(nq, 1);
	float *dq = randv(nq, 9), *dk = randv(nkv, 9), *dv = randv(nkv, 9); /* overwritten */
	ops->attention_backward(dq, dk, dv, R, c.q, c.kk, c.v, c.probs, B, T, a, g, k, c.scale, p,
				c.seed, c.off);
	struct fd f = { attn_fwd, &c, c.out, R, nq };
	CHECK_GRAD(&f, c.q, nq, dq, 1e-2f);
	CHECK_GRAD(&f, c.kk, nkv, dk, 1e-2f);
	CHECK_GRAD(&f, c.v, nkv, dv, 1e-2f);
	/* NULL grads skip their work and leave the others unchanged */
	float *dk2 = zerov(nkv);
	ops->attention_backward(NULL, dk2, NULL, R, c.q, c.kk, c.v, c.probs, B, T, a, g, k, c.scale,
				p, c.seed, c.off);
	CHECK_SAME("dk alone", dk2, dk, nkv);
	free(c.q), free(c.kk), free(c.v), free(c.out), free(c.probs), free(ref), free(R), free(dq),
		free(dk), free(dv), free(dk2);
}

static void attn_case(int B, int T, int a, int g, int k, const int32_t *doc, float p)
{
	attn_case_w(B, T, a, g, k, doc, p, -1);
}

static void test_attention_grad(void)
{
	static const int32_t doc[10] = { 0, 0, 1, 1, 1, 7, 7, 7, 7, 2 };
	attn_case(2, 5, 4, 4, 6, NULL, 0.0f); /* causal, MHA */
	attn_case(2, 5, 4, 2, 6, NULL, 0.0f); /* GQA */
	attn_case(2, 5, 4, 1, 6, doc, 0.0f);  /* MQA, doc mask */
	attn_case(2, 5, 4, 2, 6, doc, 0.3f);  /* dropout */
	attn_case_w(2, 5, 4, 2, 6, NULL, 0.0f, 2); /* sliding window: 3 keys */
	attn_case_w(2, 5, 4, 2, 6, doc, 0.3f, 1);  /* window, doc mask, dropout */
	attn_case_w(2, 5, 4, 2, 6, NULL, 0.0f, 0); /* window 0: itself only */
}

/* more than one block of query rows (CPU_QB = 64), with doc mask and dropout */
static void test_attention_grad_long(void)
{
	int32_t doc[70];
	for (int t = 0; t < 70; t++)
		doc[t] = t < 20 ? 0 : t < 66 ? 1 : 2;
	attn_case(1, 70, 2, 1, 3, doc, 0.2f);
	attn_case_w(1, 140, 2, 1, 3, NULL, 0.2f, 70); /* a window across row blocks */
}

/* ---- cross-entropy ---- */

struct xent_case {
	float *losses, *lse, *logits;
	int32_t *targets;
	int N, V;
};

static void xent_fwd(void *ctx)
{
	struct xent_case *c = ctx;
	ops->xent_forward(c->losses, c->lse, c->logits, c->targets, c->N, c->V);
}

static void test_xent_grad(void)
{
	int32_t targets[4] = { 3, 0, 10, 3 };
	struct xent_case c = { zerov(4), zerov(4), randv(4 * 11, 3), targets, 4, 11 };
	xent_fwd(&c);
	for (int n = 0; n < c.N; n++) {
		double s = 0;
		for (int j = 0; j < c.V; j++)
			s += exp((double)c.logits[n * c.V + j]);
		CHECK(fabs(c.lse[n] - log(s)) < 1e-5);
		CHECK(fabs(c.losses[n] - (log(s) - c.logits[n * c.V + targets[n]])) < 1e-5);
	}
	float *dloss = randv(4, 1), *dlogits = randv(4 * 11, 9);
	ops->xent_backward(dlogits, c.logits, c.lse, targets, dloss, c.N, c.V);
	struct fd f = { xent_fwd, &c, c.losses, dloss, 4 };
	CHECK_GRAD(&f, c.logits, 4 * 11, dlogits, 1e-2f);
	/* in place, the usual case */
	float *inplace = copyv(c.logits, 4 * 11);
	ops->xent_backward(inplace, inplace, c.lse, targets, dloss, c.N, c.V);
	CHECK_SAME("dlogits aliasing logits", inplace, dlogits, 4 * 11);
	free(c.losses), free(c.lse), free(c.logits), free(dloss), free(dlogits), free(inplace);
}

/* ---- thread-count independence ---- */

struct run_outputs {
	float *buf[12];
	size_t n[12];
	double sumsq;
};

static void run_many(struct run_outputs *o, int threads)
{
	omp_set_num_threads(threads);
	uint64_t saved = rng;
	rng = 0x1234567ULL; /* the same inputs for each thread count */
	memset(o, 0, sizeof(*o));
	int i = 0;
	/* attention: 3 query blocks, GQA, doc mask, dropout */
	{
		const int B = 2, T = 130, a = 4, g = 2, k = 16;
		const size_t nq = (size_t)B * a * T * k, nkv = (size_t)B * g * T * k;
		int32_t doc[260];
		for (int t = 0; t < B * T; t++)
			doc[t] = (t % T) / 50;
		float *q = randv(nq, 1), *kk = randv(nkv, 1), *v = randv(nkv, 1), *dout = randv(nq, 1);
		float *out = zerov(nq), *probs = zerov((size_t)B * a * T * T);
		float *dq = zerov(nq), *dk = zerov(nkv), *dv = zerov(nkv);
		ops->attention_forward(out, probs, q, kk, v, doc, B, T, a, g, k, 0.25f, -1, 0.1f, 7, 11);
		ops->attention_backward(dq, dk, dv, dout, q, kk, v, probs, B, T, a, g, k, 0.25f, 0.1f, 7, 11);
		o->buf[i] = out, o->n[i++] = nq;
		o->buf[i] = dq, o->n[i++] = nq;
		o->buf[i] = dk, o->n[i++] = nkv;
		o->buf[i] = dv, o->n[i++] = nkv;
		free(q), free(kk), free(v), free(dout), free(probs);
	}
	/* linear backward (column sums of dbias) */
	{
		const int N = 300, IC = 64, OC = 200;
		float *inp = randv((size_t)N * IC, 1), *w = randv((size_t)OC * IC, 1);
		float *dout = randv((size_t)N * OC, 1), *dinp = zerov((size_t)N * IC);
		float *dw = zerov((size_t)OC * IC), *db = zerov((size_t)OC);
		ops->linear_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
		o->buf[i] = dinp, o->n[i++] = (size_t)N * IC;
		o->buf[i] = dw, o->n[i++] = (size_t)OC * IC;
		o->buf[i] = db, o->n[i++] = (size_t)OC;
		free(inp), free(w), free(dout);
	}
	/* norms and embedding: parameter grads summed over rows */
	{
		const int N = 512, C = 96, V = 50;
		float *x = randv((size_t)N * C, 2), *w = randv((size_t)C, 1), *b = randv((size_t)C, 1);
		float *dout = randv((size_t)N * C, 1), *out = zerov((size_t)N * C);
		float *mean = zerov((size_t)N), *rstd = zerov((size_t)N), *dx = zerov((size_t)N * C);
		float *dw = zerov((size_t)C), *db = zerov((size_t)C), *dwr = zerov((size_t)C);
		float *dwte = zerov((size_t)V * C);
		int32_t *tok = xmalloc((size_t)N * sizeof(int32_t));
		for (int n = 0; n < N; n++)
			tok[n] = (int32_t)(next_u64() % V);
		ops->layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
		ops->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
		ops->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
		ops->rmsnorm_backward(NULL, dwr, dout, x, w, rstd, N, C);
		ops->embedding_backward(dwte, NULL, dout, tok, NULL, N, C);
		o->buf[i] = dw, o->n[i++] = (size_t)C;
		o->buf[i] = db, o->n[i++] = (size_t)C;
		o->buf[i] = dwr, o->n[i++] = (size_t)C;
		o->buf[i] = dwte, o->n[i++] = (size_t)V * C;
		o->sumsq = ops->sumsq(dout, (size_t)N * C) + ops->sumsq(x, (size_t)N * C);
		free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(tok);
	}
	rng = saved;
}

static void test_thread_count_independence(void)
{
	int saved = omp_get_max_threads();
	struct run_outputs one, two;
	run_many(&one, 1);
	run_many(&two, 2);
	omp_set_num_threads(saved);
	for (int i = 0; i < 12 && one.buf[i]; i++) {
		char what[32];
		snprintf(what, sizeof(what), "output %d", i);
		CHECK_SAME(what, one.buf[i], two.buf[i], one.n[i]);
		free(one.buf[i]), free(two.buf[i]);
	}
	CHECK(one.sumsq == two.sumsq);
}

/* ---- vector helpers ---- */

static void test_vector_helpers(void)
{
	const size_t n = 200003;
	float *a = randv(n, 2), *b = randv(n, 2), *c = zerov(n);
	ops->add(c, a, b, n);
	int bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += c[i] != a[i] + b[i];
	ops->add(a, a, b, n); /* aliasing */
	CHECK_SAME("add in place", a, c, n);
	ops->scale(c, 0.5f, n);
	for (size_t i = 0; i < n; i++)
		bad += c[i] != a[i] * 0.5f;
	CHECK_INT(bad, 0);
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)b[i] * b[i];
	CHECK(fabs(ops->sumsq(b, n) - s) < 1e-9 * s);
	CHECK(ops->sumsq(b, 0) == 0.0);
	CHECK_INT(ops->nonfinite(b, n), 0);
	b[n - 1] = INFINITY;
	CHECK_INT(ops->nonfinite(b, n), 1);
	b[n - 1] = 0, b[7] = NAN;
	CHECK_INT(ops->nonfinite(b, n), 1);
	b[7] = -INFINITY;
	CHECK_INT(ops->nonfinite(b, n), 1);
	b[7] = FLT_MAX;
	CHECK_INT(ops->nonfinite(b, n), 0);
	float *m = ops->alloc(1000 * sizeof(float));
	for (int i = 0; i < 1000; i++)
		bad += m[i] != 0.0f;
	ops->to_device(m, a, 1000 * sizeof(float));
	ops->to_host(c, m, 1000 * sizeof(float));
	CHECK_SAME("copies", c, a, 1000);
	ops->zero(m, 1000);
	for (int i = 0; i < 1000; i++)
		bad += m[i] != 0.0f;
	CHECK_INT(bad, 0);
	ops->free(m);
	CHECK_STR(ops->name, "cpu");
	free(a), free(b), free(c);
}

/* ---- against PyTorch ---- */

static void wfile(const char *name, const void *p, size_t bytes)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f))
		die("cannot write %s", path);
}

/* torch's result name.out, n floats; NULL (and a failed check) when missing */
static float *rfile(const char *name, size_t n)
{
	char path[4200];
	size_t len = 0;
	snprintf(path, sizeof(path), "%s/%s.out", dir, name);
	float *x = (float *)test_read_file(path, &len);
	if (!x || len != n * sizeof(float)) {
		printf("#   no torch result %s (%zu bytes)\n", name, len);
		t_checks_failed++;
		free(x);
		return NULL;
	}
	return x;
}

/* The inputs the torch script reads, and our outputs to compare. */
static struct torch_case {
	int ran;
	/* linear */
	int lN, lIC, lOC;
	float *l_inp, *l_w, *l_b, *l_dout, *l_out, *l_dinp, *l_dw, *l_db;
	/* norms */
	int nN, nC;
	float *n_x, *n_w, *n_b, *n_dout, *ln_out, *ln_dx, *ln_dw, *ln_db, *rms_out, *rms_dx, *rms_dw;
	/* gelu, swiglu */
	size_t gn;
	int sN, sF;
	float *g_x, *g_dout, *gt_out, *gt_dx, *ge_out, *ge_dx, *s_x, *s_dout, *s_out, *s_dx;
	/* attention */
	int aB, aT, aa, ag, ak;
	int32_t *a_doc;
	float a_scale;
	float *a_q, *a_k, *a_v, *a_dout, *a_out, *a_probs, *a_dq, *a_dk, *a_dv;
	/* xent */
	int xN, xV;
	int32_t *x_t;
	float *x_logits, *x_dloss, *x_loss, *x_lse, *x_dlogits;
	/* rope: tables, and the split of a qkv with rope */
	int rT, rot1, rot2, rot3;
	float *r_cos1, *r_sin1, *r_cos2, *r_sin2, *r_cos3, *r_sin3;
	int qB, qT, qa, qg, qk, qrot;
	float *q_qkv, *q_q, *q_k, *q_v;
	/* rounding */
	size_t rn;
	float *rd_x, *rd_bf16, *rd_fp16;
	/* adamw */
	size_t an;
	int asteps;
	float alr, ab1, ab2, aeps, awd;
	float *ad_p0, *ad_g, *ad_p, *ad_m, *ad_v;
} tc;

static const char torch_prelude[] =
	"import sys, os, math\n"
	"import numpy as np\n"
	"import torch\n"
	"import torch.nn.functional as F\n"
	"torch.set_num_threads(1)\n"
	"D = sys.argv[1]\n"
	"def rd(name, shape, dt=np.float32):\n"
	"    return torch.from_numpy(np.fromfile(os.path.join(D, name), dtype=dt).reshape(shape).copy())\n"
	"def rd64(name, shape):\n"
	"    return rd(name, shape).double().requires_grad_(True)\n"
	"def wr(name, t):\n"
	"    t.detach().float().numpy().tofile(os.path.join(D, name + '.out'))\n";

static const char torch_script[] =
	/* linear, in float64, with autograd for the backward */
	"N, IC, OC = SH['lin']\n"
	"x, w, b, dy = rd64('l_inp', (N, IC)), rd64('l_w', (OC, IC)), rd64('l_b', (OC,)), rd('l_dout', (N, OC)).double()\n"
	"y = F.linear(x, w, b); (y * dy).sum().backward()\n"
	"wr('l_out', y); wr('l_dinp', x.grad); wr('l_dw', w.grad); wr('l_db', b.grad)\n"
	/* norms */
	"N, C = SH['norm']\n"
	"x, w, b, dy = rd64('n_x', (N, C)), rd64('n_w', (C,)), rd64('n_b', (C,)), rd('n_dout', (N, C)).double()\n"
	"y = F.layer_norm(x, (C,), w, b, 1e-5); (y * dy).sum().backward()\n"
	"wr('ln_out', y); wr('ln_dx', x.grad); wr('ln_dw', w.grad); wr('ln_db', b.grad)\n"
	"x, w = rd64('n_x', (N, C)), rd64('n_w', (C,))\n"
	"y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w; (y * dy).sum().backward()\n"
	"wr('rms_out', y); wr('rms_dx', x.grad); wr('rms_dw', w.grad)\n"
	/* gelu: tanh (torch's backward is the derivative of the tanh form) and erf */
	"n = SH['gelu'][0]\n"
	"dy = rd('g_dout', (n,)).double()\n"
	"for kind, tag in (('tanh', 'gt'), ('none', 'ge')):\n"
	"    x = rd64('g_x', (n,)); y = F.gelu(x, approximate=kind); (y * dy).sum().backward()\n"
	"    wr(tag + '_out', y); wr(tag + '_dx', x.grad)\n"
	"N, Fh = SH['swiglu']\n"
	"x, dy = rd64('s_x', (N, 2 * Fh)), rd('s_dout', (N, Fh)).double()\n"
	"y = F.silu(x[:, :Fh]) * x[:, Fh:]; (y * dy).sum().backward()\n"
	"wr('s_out', y); wr('s_dx', x.grad)\n"
	/* attention by formula: GQA by repeating K/V, causal and document mask */
	"B, T, a, g, k = SH['attn']; scale = SC['attn']\n"
	"q, kk, v = rd64('a_q', (B, a, T, k)), rd64('a_k', (B, g, T, k)), rd64('a_v', (B, g, T, k))\n"
	"dy = rd('a_dout', (B, T, a * k)).double()\n"
	"doc = rd('a_doc', (B, T), np.int32)\n"
	"kr, vr = kk.repeat_interleave(a // g, dim=1), v.repeat_interleave(a // g, dim=1)\n"
	"s = (q @ kr.transpose(-1, -2)) * scale\n"
	"mask = torch.tril(torch.ones(T, T, dtype=torch.bool)) & (doc[:, None, :, None] == doc[:, None, None, :])\n"
	"p = torch.softmax(s.masked_fill(~mask, float('-inf')), dim=-1)\n"
	"o = (p @ vr).transpose(1, 2).reshape(B, T, a * k); (o * dy).sum().backward()\n"
	"wr('a_out', o); wr('a_probs', p); wr('a_dq', q.grad); wr('a_dk', kk.grad); wr('a_dv', v.grad)\n"
	/* cross-entropy */
	"N, V = SH['xent']\n"
	"x, t, dl = rd64('x_logits', (N, V)), rd('x_t', (N,), np.int32).long(), rd('x_dloss', (N,)).double()\n"
	"l = F.cross_entropy(x, t, reduction='none'); (l * dl).sum().backward()\n"
	"wr('x_loss', l); wr('x_lse', torch.logsumexp(x, -1)); wr('x_dlogits', x.grad)\n"
	/* RoPE tables in torch's fp32, exactly as Megatron builds them */
	"T = SH['rope'][0]\n"
	"def table(rot, base):\n"
	"    inv_freq = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))\n"
	"    freqs = torch.outer(torch.arange(T).float(), inv_freq)\n"
	"    emb = torch.cat((freqs, freqs), dim=-1)\n"
	"    return emb.cos(), emb.sin()\n"
	"for i, (rot, base) in enumerate(ROPE):\n"
	"    c, s = table(rot, base); wr('r_cos%d' % (i + 1), c); wr('r_sin%d' % (i + 1), s)\n"
	/* QKV split (Megatron's per-group layout) + rotate-half RoPE, fp32 */
	"B, T, a, g, k, rot = SH['qkv']\n"
	"m = a // g\n"
	"x = rd('q_qkv', (B, T, g, m + 2, k))\n"
	"q = x[:, :, :, :m].reshape(B, T, a, k).transpose(1, 2)\n"
	"kk = x[:, :, :, m].transpose(1, 2); v = x[:, :, :, m + 1].transpose(1, 2)\n"
	"c, s = table(rot, 10000)\n"
	"c, s = c[:T], s[:T]\n"
	"def rope(t):\n"
	"    r, rest = t[..., :rot], t[..., rot:]\n"
	"    x1, x2 = r[..., :rot // 2], r[..., rot // 2:]\n"
	"    return torch.cat((r * c + torch.cat((-x2, x1), dim=-1) * s, rest), dim=-1)\n"
	"wr('q_q', rope(q).contiguous()); wr('q_k', rope(kk).contiguous()); wr('q_v', v.contiguous())\n"
	/* rounding */
	"x = rd('rd_x', (SH['round'][0],))\n"
	"wr('rd_bf16', x.to(torch.bfloat16).float()); wr('rd_fp16', x.half().float())\n"
	/* AdamW, torch's own fp32 implementation (single-tensor) */
	"n, steps = SH['adamw']; lr, b1, b2, eps, wd = SC['adamw']\n"
	"p = torch.nn.Parameter(rd('ad_p0', (n,)))\n"
	"G = rd('ad_g', (steps, n))\n"
	"opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)\n"
	"for i in range(steps):\n"
	"    p.grad = G[i].clone(); opt.step()\n"
	"st = opt.state[p]\n"
	"wr('ad_p', p); wr('ad_m', st['exp_avg']); wr('ad_v', st['exp_avg_sq'])\n"
	/* and the torch 2.x order (exp_avg.lerp_) that ops.h's AdamW follows */
	"p = rd('ad_p0', (n,)); m = torch.zeros(n); v = torch.zeros(n)\n"
	"for i in range(steps):\n"
	"    step = float(i + 1); g1 = G[i]\n"
	"    p.mul_(1 - lr * wd); m.lerp_(g1, 1 - b1); v.mul_(b2).addcmul_(g1, g1, value=1 - b2)\n"
	"    bc1 = 1 - b1 ** step; bc2 = 1 - b2 ** step\n"
	"    denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)\n"
	"    p.addcdiv_(m, denom, value=-(lr / bc1))\n"
	"wr('ad2_p', p); wr('ad2_m', m); wr('ad2_v', v)\n"
	"print('done')\n";

static void torch_setup(void)
{
	/* linear */
	tc.lN = 33, tc.lIC = 47, tc.lOC = 29;
	size_t li = (size_t)tc.lN * tc.lIC, lw = (size_t)tc.lOC * tc.lIC, lo = (size_t)tc.lN * tc.lOC;
	tc.l_inp = randv(li, 1), tc.l_w = randv(lw, 1), tc.l_b = randv((size_t)tc.lOC, 1);
	tc.l_dout = randv(lo, 1), tc.l_out = zerov(lo), tc.l_dinp = zerov(li);
	tc.l_dw = zerov(lw), tc.l_db = zerov((size_t)tc.lOC);
	ops->linear_forward(tc.l_out, tc.l_inp, tc.l_w, tc.l_b, tc.lN, tc.lIC, tc.lOC);
	ops->linear_backward(tc.l_dinp, tc.l_dw, tc.l_db, tc.l_dout, tc.l_inp, tc.l_w, tc.lN, tc.lIC, tc.lOC);
	wfile("l_inp", tc.l_inp, li * 4), wfile("l_w", tc.l_w, lw * 4);
	wfile("l_b", tc.l_b, (size_t)tc.lOC * 4), wfile("l_dout", tc.l_dout, lo * 4);
	/* norms */
	tc.nN = 40, tc.nC = 50;
	size_t nn = (size_t)tc.nN * tc.nC;
	tc.n_x = randv(nn, 3), tc.n_w = randv((size_t)tc.nC, 2), tc.n_b = randv((size_t)tc.nC, 1);
	for (size_t i = 0; i < nn; i++)
		tc.n_x[i] += 1.5f;
	tc.n_dout = randv(nn, 1);
	tc.ln_out = zerov(nn), tc.ln_dx = zerov(nn), tc.ln_dw = zerov((size_t)tc.nC), tc.ln_db = zerov((size_t)tc.nC);
	tc.rms_out = zerov(nn), tc.rms_dx = zerov(nn), tc.rms_dw = zerov((size_t)tc.nC);
	float *mean = zerov((size_t)tc.nN), *rstd = zerov((size_t)tc.nN);
	ops->layernorm_forward(tc.ln_out, mean, rstd, tc.n_x, tc.n_w, tc.n_b, tc.nN, tc.nC, 1e-5f);
	ops->layernorm_backward(tc.ln_dx, tc.ln_dw, tc.ln_db, tc.n_dout, tc.n_x, tc.n_w, mean, rstd, tc.nN, tc.nC);
	ops->rmsnorm_forward(tc.rms_out, rstd, tc.n_x, tc.n_w, tc.nN, tc.nC, 1e-5f);
	ops->rmsnorm_backward(tc.rms_dx, tc.rms_dw, tc.n_dout, tc.n_x, tc.n_w, rstd, tc.nN, tc.nC);
	free(mean), free(rstd);
	wfile("n_x", tc.n_x, nn * 4), wfile("n_w", tc.n_w, (size_t)tc.nC * 4);
	wfile("n_b", tc.n_b, (size_t)tc.nC * 4), wfile("n_dout", tc.n_dout, nn * 4);
	/* gelu: a range that covers both tails, and exact zero */
	tc.gn = 2001;
	tc.g_x = zerov(tc.gn), tc.g_dout = randv(tc.gn, 1);
	for (size_t i = 0; i < tc.gn; i++)
		tc.g_x[i] = -12.0f + 24.0f * (float)i / (float)(tc.gn - 1);
	tc.gt_out = zerov(tc.gn), tc.gt_dx = zerov(tc.gn), tc.ge_out = zerov(tc.gn), tc.ge_dx = zerov(tc.gn);
	ops->gelu_forward(tc.gt_out, tc.g_x, tc.gn, KOPS_GELU_TANH);
	ops->gelu_backward(tc.gt_dx, tc.g_dout, tc.g_x, tc.gn, KOPS_GELU_TANH);
	ops->gelu_forward(tc.ge_out, tc.g_x, tc.gn, KOPS_GELU_ERF);
	ops->gelu_backward(tc.ge_dx, tc.g_dout, tc.g_x, tc.gn, KOPS_GELU_ERF);
	wfile("g_x", tc.g_x, tc.gn * 4), wfile("g_dout", tc.g_dout, tc.gn * 4);
	tc.sN = 7, tc.sF = 33;
	size_t sn = (size_t)tc.sN * tc.sF;
	tc.s_x = randv(2 * sn, 6), tc.s_dout = randv(sn, 1), tc.s_out = zerov(sn), tc.s_dx = zerov(2 * sn);
	ops->swiglu_forward(tc.s_out, tc.s_x, tc.sN, tc.sF);
	ops->swiglu_backward(tc.s_dx, tc.s_dout, tc.s_x, tc.sN, tc.sF);
	wfile("s_x", tc.s_x, 2 * sn * 4), wfile("s_dout", tc.s_dout, sn * 4);
	/* attention: two query blocks, GQA, documents */
	tc.aB = 2, tc.aT = 70, tc.aa = 4, tc.ag = 2, tc.ak = 8, tc.a_scale = 0.35355339f;
	size_t aq = (size_t)tc.aB * tc.aa * tc.aT * tc.ak, akv = (size_t)tc.aB * tc.ag * tc.aT * tc.ak;
	size_t ap = (size_t)tc.aB * tc.aa * tc.aT * tc.aT;
	tc.a_doc = xmalloc((size_t)tc.aB * tc.aT * sizeof(int32_t));
	for (int t = 0; t < tc.aB * tc.aT; t++)
		tc.a_doc[t] = t < tc.aT ? 0 : (t - tc.aT) / 13; /* batch 0 one document, batch 1 several */
	tc.a_q = randv(aq, 2), tc.a_k = randv(akv, 2), tc.a_v = randv(akv, 1), tc.a_dout = randv(aq, 1);
	tc.a_out = zerov(aq), tc.a_probs = zerov(ap), tc.a_dq = zerov(aq), tc.a_dk = zerov(akv), tc.a_dv = zerov(akv);
	ops->attention_forward(tc.a_out, tc.a_probs, tc.a_q, tc.a_k, tc.a_v, tc.a_doc, tc.aB, tc.aT,
			       tc.aa, tc.ag, tc.ak, tc.a_scale, -1, 0.0f, 0, 0);
	ops->attention_backward(tc.a_dq, tc.a_dk, tc.a_dv, tc.a_dout, tc.a_q, tc.a_k, tc.a_v, tc.a_probs,
				tc.aB, tc.aT, tc.aa, tc.ag, tc.ak, tc.a_scale, 0.0f, 0, 0);
	wfile("a_q", tc.a_q, aq * 4), wfile("a_k", tc.a_k, akv * 4), wfile("a_v", tc.a_v, akv * 4);
	wfile("a_dout", tc.a_dout, aq * 4), wfile("a_doc", tc.a_doc, (size_t)tc.aB * tc.aT * 4);
	/* xent */
	tc.xN = 6, tc.xV = 1000;
	size_t xn = (size_t)tc.xN * tc.xV;
	tc.x_logits = randv(xn, 5), tc.x_dloss = randv((size_t)tc.xN, 1);
	tc.x_t = xmalloc((size_t)tc.xN * sizeof(int32_t));
	for (int n = 0; n < tc.xN; n++)
		tc.x_t[n] = (int32_t)(next_u64() % (uint64_t)tc.xV);
	tc.x_t[0] = 0, tc.x_t[1] = tc.xV - 1;
	tc.x_loss = zerov((size_t)tc.xN), tc.x_lse = zerov((size_t)tc.xN), tc.x_dlogits = zerov(xn);
	ops->xent_forward(tc.x_loss, tc.x_lse, tc.x_logits, tc.x_t, tc.xN, tc.xV);
	ops->xent_backward(tc.x_dlogits, tc.x_logits, tc.x_lse, tc.x_t, tc.x_dloss, tc.xN, tc.xV);
	wfile("x_logits", tc.x_logits, xn * 4), wfile("x_dloss", tc.x_dloss, (size_t)tc.xN * 4);
	wfile("x_t", tc.x_t, (size_t)tc.xN * 4);
	/* rope tables: long enough for large angles */
	tc.rT = 4096, tc.rot1 = 8, tc.rot2 = 128, tc.rot3 = 6;
	tc.r_cos1 = zerov((size_t)tc.rT * tc.rot1), tc.r_sin1 = zerov((size_t)tc.rT * tc.rot1);
	tc.r_cos2 = zerov((size_t)tc.rT * tc.rot2), tc.r_sin2 = zerov((size_t)tc.rT * tc.rot2);
	tc.r_cos3 = zerov((size_t)tc.rT * tc.rot3), tc.r_sin3 = zerov((size_t)tc.rT * tc.rot3);
	kops_rope_table(tc.r_cos1, tc.r_sin1, tc.rT, tc.rot1, 10000.0f);
	kops_rope_table(tc.r_cos2, tc.r_sin2, tc.rT, tc.rot2, 10000.0f);
	kops_rope_table(tc.r_cos3, tc.r_sin3, tc.rT, tc.rot3, 500000.0f);
	/* qkv split with rope (partial rotary: rot < k) */
	tc.qB = 2, tc.qT = 9, tc.qa = 6, tc.qg = 2, tc.qk = 8, tc.qrot = 6;
	size_t qq = (size_t)tc.qB * tc.qa * tc.qT * tc.qk, qkv_ = (size_t)tc.qB * tc.qg * tc.qT * tc.qk;
	size_t qn = (size_t)tc.qB * tc.qT * (tc.qa + 2 * tc.qg) * tc.qk;
	tc.q_qkv = randv(qn, 2), tc.q_q = zerov(qq), tc.q_k = zerov(qkv_), tc.q_v = zerov(qkv_);
	{
		float *c = zerov((size_t)tc.qT * tc.qrot), *s = zerov((size_t)tc.qT * tc.qrot);
		kops_rope_table(c, s, tc.qT, tc.qrot, 10000.0f);
		ops->qkv_split_forward(tc.q_q, tc.q_k, tc.q_v, tc.q_qkv, c, s, tc.qB, tc.qT, tc.qa, tc.qg,
				       tc.qk, tc.qrot, false);
		free(c), free(s);
	}
	wfile("q_qkv", tc.q_qkv, qn * 4);
	/* rounding: edge values, then random bit patterns, then values near the fp16 range */
	static const float edges[] = {
		0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN,
		1e-45f, -1e-45f, 65504.0f, 65519.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e5f,
		0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.000002p-25f, 0x1p-26f, 0x3p-25f, 0x5p-25f,
		0x1.ffcp-15f, 0x1.ffep-15f, 0x1.fffp-15f, 1.0009765625f, 1.00048828125f,
		1.00146484375f, 1.001953125f, 1.00390625f, 1.005859375f, 3.0f, 0x1.ff8p+15f,
		0x1.0101p0f, 0x1.0081p0f, 0x1.0080p0f, 0x1.0180p0f, 0x1.7f8p127f, 0x1.ffp127f,
	};
	size_t ne = sizeof(edges) / sizeof(edges[0]);
	tc.rn = 300000;
	tc.rd_x = xmalloc(tc.rn * sizeof(float));
	memcpy(tc.rd_x, edges, sizeof(edges));
	for (size_t i = ne; i < tc.rn; i++) {
		uint32_t u = (uint32_t)next_u64();
		switch (i % 4) {
		case 0: /* any bit pattern: every exponent, NaN payloads */
			break;
		case 1: /* the fp16 range, subnormals included */
			u = (u & 0x80000000u) | (0x33000000u + u % (0x47800000u - 0x33000000u));
			break;
		case 2: /* exact ties for fp16 (13 dropped bits = 0x1000) and bf16 (16 dropped bits = 0x8000) */
			u = (u & 0x80000000u) | (0x33000000u + u % (0x47800000u - 0x33000000u));
			u = (i & 8) ? (u & ~0x1fffu) | 0x1000u : (u & ~0xffffu) | 0x8000u;
			break;
		default: /* ordinary magnitudes */
			u = (u & 0x80000000u) | (0x30000000u + u % 0x20000000u);
		}
		tc.rd_x[i] = cpu_bits_to_float(u);
	}
	tc.rd_bf16 = zerov(tc.rn), tc.rd_fp16 = zerov(tc.rn);
	ops->round(tc.rd_bf16, tc.rd_x, tc.rn, KOPS_ROUND_BF16);
	ops->round(tc.rd_fp16, tc.rd_x, tc.rn, KOPS_ROUND_FP16);
	wfile("rd_x", tc.rd_x, tc.rn * 4);
	/* adamw: 6 steps with fresh gradients */
	tc.an = 4099, tc.asteps = 6;
	tc.alr = 3e-3f, tc.ab1 = 0.9f, tc.ab2 = 0.95f, tc.aeps = 1e-8f, tc.awd = 0.1f;
	tc.ad_p0 = randv(tc.an, 1), tc.ad_g = randv(tc.an * tc.asteps, 1);
	for (size_t i = 0; i < tc.an; i++) /* some tiny gradients, where eps matters */
		if (i % 7 == 0)
			for (int s = 0; s < tc.asteps; s++)
				tc.ad_g[s * tc.an + i] *= 1e-7f;
	tc.ad_p = copyv(tc.ad_p0, tc.an), tc.ad_m = zerov(tc.an), tc.ad_v = zerov(tc.an);
	for (int s = 0; s < tc.asteps; s++)
		ops->adamw(tc.ad_p, tc.ad_g + s * tc.an, tc.ad_m, tc.ad_v, tc.an, tc.alr, tc.ab1, tc.ab2,
			   tc.aeps, tc.awd, s + 1);
	wfile("ad_p0", tc.ad_p0, tc.an * 4), wfile("ad_g", tc.ad_g, tc.an * tc.asteps * 4);

	/* the shapes and scalars, as Python literals (fp32 scalars as their exact doubles) */
	char prelude[8192];
	snprintf(prelude, sizeof(prelude),
		 "%s"
		 "SH = {'lin': (%d, %d, %d), 'norm': (%d, %d), 'gelu': (%zu,), 'swiglu': (%d, %d),\n"
		 "      'attn': (%d, %d, %d, %d, %d), 'xent': (%d, %d), 'rope': (%d,),\n"
		 "      'qkv': (%d, %d, %d, %d, %d, %d), 'round': (%zu,), 'adamw': (%zu, %d)}\n"
		 "SC = {'attn': %.17g, 'adamw': (%.17g, %.17g, %.17g, %.17g, %.17g)}\n"
		 "ROPE = [(%d, 10000), (%d, 10000), (%d, 500000)]\n",
		 torch_prelude, tc.lN, tc.lIC, tc.lOC, tc.nN, tc.nC, tc.gn, tc.sN, tc.sF, tc.aB,
		 tc.aT, tc.aa, tc.ag, tc.ak, tc.xN, tc.xV, tc.rT, tc.qB, tc.qT, tc.qa, tc.qg, tc.qk,
		 tc.qrot, tc.rn, tc.an, tc.asteps, (double)tc.a_scale, (double)tc.alr, (double)tc.ab1,
		 (double)tc.ab2, (double)tc.aeps, (double)tc.awd, tc.rot1, tc.rot2, tc.rot3);
	char *res = test_python(dir, prelude, torch_script);
	tc.ran = res && strstr(res, "done");
	free(res);
}

/* compare one of our outputs with torch's */
static void vs_torch(const char *name, const float *ours, size_t n, double rtol, double atol)
{
	float *ref = rfile(name, n);
	if (ref)
		CHECK_CLOSE(name, ours, ref, n, rtol, atol);
	free(ref);
}

static void test_torch_ran(void)
{
	CHECK(tc.ran);
}

static void test_torch_linear(void)
{
	size_t li = (size_t)tc.lN * tc.lIC, lw = (size_t)tc.lOC * tc.lIC, lo = (size_t)tc.lN * tc.lOC;
	vs_torch("l_out", tc.l_out, lo, 1e-5, 1e-5);
	vs_torch("l_dinp", tc.l_dinp, li, 1e-5, 1e-5);
	vs_torch("l_dw", tc.l_dw, lw, 1e-5, 1e-5);
	vs_torch("l_db", tc.l_db, (size_t)tc.lOC, 1e-5, 1e-5);
}

static void test_torch_norms(void)
{
	size_t nn = (size_t)tc.nN * tc.nC, C = (size_t)tc.nC;
	vs_torch("ln_out", tc.ln_out, nn, 1e-5, 1e-5);
	vs_torch("ln_dx", tc.ln_dx, nn, 1e-5, 1e-5);
	vs_torch("ln_dw", tc.ln_dw, C, 1e-5, 1e-5);
	vs_torch("ln_db", tc.ln_db, C, 1e-5, 1e-5);
	vs_torch("rms_out", tc.rms_out, nn, 1e-5, 1e-5);
	vs_torch("rms_dx", tc.rms_dx, nn, 1e-5, 1e-5);
	vs_torch("rms_dw", tc.rms_dw, C, 1e-5, 1e-5);
}

static void test_torch_activations(void)
{
	vs_torch("gt_out", tc.gt_out, tc.gn, 1e-5, 1e-6);
	vs_torch("gt_dx", tc.gt_dx, tc.gn, 1e-5, 1e-6);
	vs_torch("ge_out", tc.ge_out, tc.gn, 1e-5, 1e-6);
	vs_torch("ge_dx", tc.ge_dx, tc.gn, 1e-5, 1e-6);
	size_t sn = (size_t)tc.sN * tc.sF;
	vs_torch("s_out", tc.s_out, sn, 1e-5, 1e-6);
	vs_torch("s_dx", tc.s_dx, 2 * sn, 1e-5, 1e-6);
}

static void test_torch_attention(void)
{
	size_t aq = (size_t)tc.aB * tc.aa * tc.aT * tc.ak, akv = (size_t)tc.aB * tc.ag * tc.aT * tc.ak;
	size_t ap = (size_t)tc.aB * tc.aa * tc.aT * tc.aT;
	vs_torch("a_out", tc.a_out, aq, 1e-5, 1e-6);
	vs_torch("a_probs", tc.a_probs, ap, 1e-5, 1e-7);
	vs_torch("a_dq", tc.a_dq, aq, 1e-5, 1e-5);
	vs_torch("a_dk", tc.a_dk, akv, 1e-5, 1e-5);
	vs_torch("a_dv", tc.a_dv, akv, 1e-5, 1e-5);
}

static void test_torch_xent(void)
{
	vs_torch("x_loss", tc.x_loss, (size_t)tc.xN, 1e-5, 1e-6);
	vs_torch("x_lse", tc.x_lse, (size_t)tc.xN, 1e-5, 1e-6);
	vs_torch("x_dlogits", tc.x_dlogits, (size_t)tc.xN * tc.xV, 1e-5, 1e-7);
}

/* The RoPE tables are torch's fp32 computation to within an ulp. */
static void check_table_ulps(const char *name, const float *ours, size_t n)
{
	float *ref = rfile(name, n);
	if (!ref)
		return;
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		/* in ulps of the larger magnitude, at least FLT_EPSILON/2 (values near 0) */
		double mag = fmax(fabs(ours[i]), fabs(ref[i]));
		double ulp = mag > 0.5 ? ldexp(1.0, ilogb(mag) - 23) : 0x1p-25;
		double e = fabs((double)ours[i] - ref[i]) / ulp;
		worst = e > worst ? e : worst;
	}
	printf("#   %s: max %.2f ulp from torch\n", name, worst);
	CHECK(worst <= 1.0);
	free(ref);
}

static void test_torch_rope(void)
{
	check_table_ulps("r_cos1", tc.r_cos1, (size_t)tc.rT * tc.rot1);
	check_table_ulps("r_sin1", tc.r_sin1, (size_t)tc.rT * tc.rot1);
	check_table_ulps("r_cos2", tc.r_cos2, (size_t)tc.rT * tc.rot2);
	check_table_ulps("r_sin2", tc.r_sin2, (size_t)tc.rT * tc.rot2);
	check_table_ulps("r_cos3", tc.r_cos3, (size_t)tc.rT * tc.rot3);
	check_table_ulps("r_sin3", tc.r_sin3, (size_t)tc.rT * tc.rot3);
	size_t qq = (size_t)tc.qB * tc.qa * tc.qT * tc.qk, qkv_ = (size_t)tc.qB * tc.qg * tc.qT * tc.qk;
	vs_torch("q_q", tc.q_q, qq, 1e-6, 1e-6);
	vs_torch("q_k", tc.q_k, qkv_, 1e-6, 1e-6);
	vs_torch("q_v", tc.q_v, qkv_, 0, 0);
}

static void test_torch_round(void)
{
	for (int kind = 0; kind < 2; kind++) {
		const char *name = kind ? "rd_fp16" : "rd_bf16";
		const float *ours = kind ? tc.rd_fp16 : tc.rd_bf16;
		float *ref = rfile(name, tc.rn);
		if (!ref)
			continue;
		size_t bad = 0, nan = 0;
		for (size_t i = 0; i < tc.rn; i++) {
			int ok = isnan(ref[i]) ? isnan(ours[i]) : !memcmp(&ours[i], &ref[i], 4);
			nan += isnan(ref[i]) != 0;
			if (!ok && bad++ < 5)
				printf("#   %s(%a) = %a, torch %a\n", name, tc.rd_x[i], ours[i], ref[i]);
		}
		CHECK_INT(bad, 0);
		CHECK(nan > 100); /* the random bit patterns did include NaNs */
		free(ref);
	}
}

/* 16-bit storage: narrow gives torch's rounding as 16 bits (bf16: the top
 * half of torch's float; fp16: what the checkpoint writer's own conversion
 * makes of it), and widen gives torch's value back. */
static void test_torch_narrow(void)
{
	uint16_t *bits = xmalloc(tc.rn * sizeof(uint16_t));
	float *back = zerov(tc.rn);
	for (int kind = 0; kind < 2; kind++) {
		float *ref = rfile(kind ? "rd_fp16" : "rd_bf16", tc.rn);
		if (!ref)
			continue;
		ops->narrow(bits, tc.rd_x, tc.rn, kind ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16);
		ops->widen(back, bits, tc.rn, kind ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16);
		size_t bad = 0;
		for (size_t i = 0; i < tc.rn; i++) {
			uint16_t want = kind ? ckpt_f32_to_f16(ref[i]) : (uint16_t)(cpu_float_to_bits(ref[i]) >> 16);
			int ok = isnan(ref[i]) ? isnan(back[i]) : bits[i] == want && !memcmp(&back[i], &ref[i], 4);
			if (!ok && bad++ < 5)
				printf("#   %s narrow(%a) = 0x%04x -> %a, torch %a (0x%04x)\n", kind ? "fp16" : "bf16",
				       tc.rd_x[i], bits[i], back[i], ref[i], want);
		}
		CHECK_INT(bad, 0);
		free(ref);
	}
	free(bits);
	free(back);
}

/* AdamW: bit-exact with the torch 2.x order (computed by torch 1.13's own
 * kernels); torch 1.13's optimizer updates exp_avg by mul_/add_ instead of
 * lerp_, an ulp away at times, and p follows within a few ulps. */
static void test_torch_adamw(void)
{
	vs_torch("ad2_p", tc.ad_p, tc.an, 0, 0);
	vs_torch("ad2_m", tc.ad_m, tc.an, 0, 0);
	vs_torch("ad2_v", tc.ad_v, tc.an, 0, 0);
	vs_torch("ad_p", tc.ad_p, tc.an, 3e-7, 1e-9);
	vs_torch("ad_m", tc.ad_m, tc.an, 1e-6, 5e-8); /* a few ulps of the 0.1 g terms */
	vs_torch("ad_v", tc.ad_v, tc.an, 0, 0);
}

static void torch_free(void)
{
	float **all[] = {
		&tc.l_inp, &tc.l_w, &tc.l_b, &tc.l_dout, &tc.l_out, &tc.l_dinp, &tc.l_dw, &tc.l_db,
		&tc.n_x, &tc.n_w, &tc.n_b, &tc.n_dout, &tc.ln_out, &tc.ln_dx, &tc.ln_dw, &tc.ln_db,
		&tc.rms_out, &tc.rms_dx, &tc.rms_dw, &tc.g_x, &tc.g_dout, &tc.gt_out, &tc.gt_dx,
		&tc.ge_out, &tc.ge_dx, &tc.s_x, &tc.s_dout, &tc.s_out, &tc.s_dx, &tc.a_q, &tc.a_k,
		&tc.a_v, &tc.a_dout, &tc.a_out, &tc.a_probs, &tc.a_dq, &tc.a_dk, &tc.a_dv,
		&tc.x_logits, &tc.x_dloss, &tc.x_loss, &tc.x_lse, &tc.x_dlogits, &tc.r_cos1,
		&tc.r_sin1, &tc.r_cos2, &tc.r_sin2, &tc.r_cos3, &tc.r_sin3, &tc.q_qkv, &tc.q_q,
		&tc.q_k, &tc.q_v, &tc.rd_x, &tc.rd_bf16, &tc.rd_fp16, &tc.ad_p0, &tc.ad_g, &tc.ad_p,
		&tc.ad_m, &tc.ad_v,
	};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(*all[i]), *all[i] = NULL;
	free(tc.a_doc), free(tc.x_t);
}

/* ---- timings (information only) ---- */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* |got - sum| within tol of the sum of |terms| (fp32 accumulation of n terms) */
static bool dot_close(float got, double sum, double abs_sum)
{
	return isfinite(got) && fabs((double)got - sum) <= 1e-4 * abs_sum + 1e-6;
}

static bool all_finite(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return false;
	return true;
}

/*
 * Timings of linear and attention at training shapes, printed; what is
 * checked there: the clock moved forward, a repeated call (timed) gives the
 * warm-up call's results bit for bit, and the linear layer at the size of
 * GPT-2's output layer (256 x 256 x 50304, not covered by the smaller
 * shapes above) computes what its definition says, on 100 sampled entries
 * of out, dinp and dweight against double-precision dot products.
 */
static void test_timings(void)
{
	{
		const int N = 256, IC = 256, OC = 50304;
		float *inp = randv((size_t)N * IC, 1), *w = randv((size_t)OC * IC, 0.05f);
		float *out = zerov((size_t)N * OC), *dinp = zerov((size_t)N * IC), *dw = zerov((size_t)OC * IC);
		ops->linear_forward(out, inp, w, NULL, N, IC, OC); /* warm up */
		float *warm = xmalloc((size_t)N * OC * sizeof(float));
		memcpy(warm, out, (size_t)N * OC * sizeof(float));
		double t0 = now();
		ops->linear_forward(out, inp, w, NULL, N, IC, OC);
		double t1 = now();
		ops->linear_backward(dinp, dw, NULL, out, inp, w, N, IC, OC);
		double t2 = now();
		double gf = 2.0 * N * IC * OC * 1e-9;
		printf("#   linear N=%d IC=%d OC=%d: forward %.1f ms (%.1f GFLOP/s), backward %.1f ms (%.1f GFLOP/s)\n",
		       N, IC, OC, 1e3 * (t1 - t0), gf / (t1 - t0), 1e3 * (t2 - t1), 2 * gf / (t2 - t1));
		CHECK(t1 > t0 && t2 > t1);
		CHECK(!memcmp(warm, out, (size_t)N * OC * sizeof(float)));
		int bad_out = 0, bad_dinp = 0, bad_dw = 0;
		for (int r = 0; r < 100; r++) {
			int n = (int)(next_u64() % (uint64_t)N), o = (int)(next_u64() % (uint64_t)OC);
			int i = (int)(next_u64() % (uint64_t)IC);
			double sum = 0, abs_sum = 0;
			for (int c = 0; c < IC; c++) { /* out[n,o] = inp[n,:] . w[o,:] */
				double t = (double)inp[(size_t)n * IC + c] * w[(size_t)o * IC + c];
				sum += t, abs_sum += fabs(t);
			}
			bad_out += !dot_close(out[(size_t)n * OC + o], sum, abs_sum);
			sum = abs_sum = 0;
			for (int c = 0; c < OC; c++) { /* dinp[n,i] = dout[n,:] . w[:,i] */
				double t = (double)out[(size_t)n * OC + c] * w[(size_t)c * IC + i];
				sum += t, abs_sum += fabs(t);
			}
			bad_dinp += !dot_close(dinp[(size_t)n * IC + i], sum, abs_sum);
			sum = abs_sum = 0;
			for (int m = 0; m < N; m++) { /* dw[o,i] = dout[:,o] . inp[:,i] */
				double t = (double)out[(size_t)m * OC + o] * inp[(size_t)m * IC + i];
				sum += t, abs_sum += fabs(t);
			}
			bad_dw += !dot_close(dw[(size_t)o * IC + i], sum, abs_sum);
		}
		CHECK_INT(bad_out, 0);
		CHECK_INT(bad_dinp, 0);
		CHECK_INT(bad_dw, 0);
		free(inp), free(w), free(out), free(dinp), free(dw), free(warm);
	}
	{
		const int B = 4, T = 64, a = 4, g = 4, k = 64;
		const size_t nq = (size_t)B * a * T * k, np = (size_t)B * a * T * T;
		float *q = randv(nq, 1), *kk = randv(nq, 1), *v = randv(nq, 1), *out = zerov(nq);
		float *probs = zerov(np), *dq = zerov(nq), *dk = zerov(nq), *dv = zerov(nq);
		/* warm up, and the results every timed repetition must give again */
		ops->attention_forward(out, probs, q, kk, v, NULL, B, T, a, g, k, 0.125f, -1, 0.0f, 0, 0);
		ops->attention_backward(dq, dk, dv, out, q, kk, v, probs, B, T, a, g, k, 0.125f, 0.0f, 0, 0);
		float *ref = xmalloc(4 * nq * sizeof(float));
		memcpy(ref, out, nq * sizeof(float));
		memcpy(ref + nq, dq, nq * sizeof(float));
		memcpy(ref + 2 * nq, dk, nq * sizeof(float));
		memcpy(ref + 3 * nq, dv, nq * sizeof(float));
		CHECK(all_finite(ref, 4 * nq));
		double t0 = now();
		for (int r = 0; r < 10; r++)
			ops->attention_forward(out, probs, q, kk, v, NULL, B, T, a, g, k, 0.125f, -1, 0.0f, 0, 0);
		double t1 = now();
		CHECK(!memcmp(ref, out, nq * sizeof(float)));
		for (int r = 0; r < 10; r++)
			ops->attention_backward(dq, dk, dv, out, q, kk, v, probs, B, T, a, g, k, 0.125f, 0.0f, 0, 0);
		double t2 = now();
		CHECK(!memcmp(ref + nq, dq, nq * sizeof(float)) && !memcmp(ref + 2 * nq, dk, nq * sizeof(float)) &&
		      !memcmp(ref + 3 * nq, dv, nq * sizeof(float)));
		for (int r = 0; r < 10; r++)
			ops->attention_forward(out, probs, q, kk, v, NULL, B, T, a, g, k, 0.125f, -1, 0.1f, 1, 0);
		double t3 = now();
		CHECK(t1 > t0 && t2 > t1 && t3 > t2);
		/* dropout (p 0.1) changed the output, and left it finite */
		CHECK(memcmp(ref, out, nq * sizeof(float)) && all_finite(out, nq));
		/* the full T x T products, as a naive implementation does them */
		double gf = 4.0 * B * a * T * T * k * 1e-9;
		printf("#   attention B=%d T=%d a=%d k=%d: forward %.3f ms (%.1f naive GFLOP/s), backward %.3f ms (%.1f), forward with dropout %.3f ms\n",
		       B, T, a, k, 1e2 * (t1 - t0), gf / ((t1 - t0) / 10), 1e2 * (t2 - t1),
		       2 * gf / ((t2 - t1) / 10), 1e2 * (t3 - t2));
		free(q), free(kk), free(v), free(out), free(probs), free(dq), free(dk), free(dv), free(ref);
	}
}

/* kops_check's list is the whole struct kops: every op once, in order, up
 * to the struct's end; a table without one op is named by kops_missing
 * and is a BUG (exit through abort, the op and the table named), unless the
 * op is an optional one (the Mamba-2 ops), which the CPU still has. */
/* adamw_segs_lp against its definition composed of other ops: each state
 * widened (an fp16 one times its scale), adamw in fp32, the model's weights
 * narrow(p), the new fp16 scale the largest magnitude / 32752, each state
 * narrowed back (fp16: times 1 / the scale). Two segments (one without
 * weight decay) of a shard at mv_base, 4 steps; bit for bit. With three fp32
 * states it is adamw_segs. */

/* One step of one segment: x[3] are p, m, v as stored (16-bit ones as their
 * widened words, still scaled), sc[3] their scales; w16 gets the weights. */
static void lp_reference(float *x[3], const float *g, size_t n, const enum kops_dtype t[3], float sc[3], float wd,
			 int step, uint16_t *w16)
{
	for (int k = 0; k < 3; k++)
		if (t[k] == KOPS_FP16)
			for (size_t i = 0; i < n; i++)
				x[k][i] *= sc[k];
	ops->adamw(x[0], g, x[1], x[2], n, 1e-2f, 0.9f, 0.95f, 1e-8f, wd, step);
	ops->narrow(w16, x[0], n, KOPS_ROUND_BF16);
	uint16_t *h = xmalloc(n * sizeof(uint16_t));
	for (int k = 0; k < 3; k++) {
		if (t[k] == KOPS_F32)
			continue;
		if (t[k] == KOPS_FP16) {
			float a = 0.0f;
			for (size_t i = 0; i < n; i++)
				a = fmaxf(a, fabsf(x[k][i]));
			sc[k] = a / 32752.0f;
			float r = sc[k] > 0.0f ? 1.0f / sc[k] : 0.0f;
			for (size_t i = 0; i < n; i++)
				x[k][i] *= r;
		}
		enum kops_round kind = t[k] == KOPS_FP16 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16;
		ops->narrow(h, x[k], n, kind);
		ops->widen(x[k], h, n, kind);
	}
	free(h);
}

static void test_adamw_segs_lp(void)
{
	static const enum kops_dtype mixes[][3] = {
		{ KOPS_F32, KOPS_F32, KOPS_F32 }, { KOPS_F32, KOPS_BF16, KOPS_BF16 },
		{ KOPS_FP16, KOPS_FP16, KOPS_FP16 }, { KOPS_FP16, KOPS_BF16, KOPS_FP16 },
	};
	const size_t base = 3, n0 = 70000, n1 = 129, total = base + n0 + n1; /* the first runs in parallel */
	const size_t n = total - base;
	const struct kops_seg segs[2] = { { base, n0, true }, { base + n0, n1, false } };
	for (size_t mix = 0; mix < sizeof(mixes) / sizeof(mixes[0]); mix++) {
		const enum kops_dtype *t = mixes[mix];
		float *g = randv(total * 4, 0.01f), *p0 = randv(total, 1.0f);
		/* the op's state in its formats; the reference's as fp32 words */
		void *st[3];
		float *ref[3], scale[6] = { 1, 1, 1, 1, 1, 1 }, rsc[2][3] = { { 1, 1, 1 }, { 1, 1, 1 } };
		for (int k = 0; k < 3; k++) {
			st[k] = xcalloc(n, t[k] == KOPS_F32 ? sizeof(float) : sizeof(uint16_t));
			ref[k] = xcalloc(n, sizeof(float));
		}
		if (t[0] == KOPS_F32) {
			memcpy(st[0], p0 + base, n * sizeof(float));
			memcpy(ref[0], p0 + base, n * sizeof(float));
		} else {
			ops->narrow(st[0], p0 + base, n, KOPS_ROUND_FP16);
			ops->widen(ref[0], st[0], n, KOPS_ROUND_FP16);
		}
		uint16_t *w16 = xcalloc(total, sizeof(uint16_t)), *rw16 = xcalloc(n, sizeof(uint16_t));
		struct kops_adamw_lp lp = { st[0], st[1], st[2], t[0], t[1], t[2], scale, w16, KOPS_ROUND_BF16 };
		for (int step = 1; step <= 4; step++) {
			const float *gs = g + (size_t)(step - 1) * total;
			ops->adamw_segs_lp(&lp, gs, base, segs, 2, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
			for (int sg = 0; sg < 2; sg++) {
				size_t o = segs[sg].off - base;
				float *x[3] = { ref[0] + o, ref[1] + o, ref[2] + o };
				lp_reference(x, gs + segs[sg].off, segs[sg].n, t, rsc[sg], segs[sg].decay ? 0.1f : 0.0f, step,
					     rw16 + o);
			}
		}
		size_t bad = 0;
		for (int k = 0; k < 3; k++) {
			float *got = xmalloc(n * sizeof(float));
			if (t[k] == KOPS_F32)
				memcpy(got, st[k], n * sizeof(float));
			else
				ops->widen(got, st[k], n, t[k] == KOPS_FP16 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16);
			bad += memcmp(got, ref[k], n * sizeof(float)) != 0;
			free(got);
		}
		for (int sg = 0; sg < 2; sg++)
			for (int k = 0; k < 3; k++)
				bad += memcmp(&scale[3 * sg + k], &rsc[sg][k], sizeof(float)) != 0;
		bad += memcmp(w16 + base, rw16, n * sizeof(uint16_t)) != 0;
		if (bad)
			printf("#   mix %zu: %zu mismatches\n", mix, bad);
		CHECK_INT(bad, 0);
		if (t[2] == KOPS_FP16) /* the scale did its job: the small second moments are not flushed */
			CHECK(scale[2] > 0.0f && scale[2] < 1e-6f);
		if (mix == 0) { /* fp32 states: adamw_segs itself */
			float *q = xmalloc(n * sizeof(float)), *qm = xcalloc(n, sizeof(float)), *qv = xcalloc(n, sizeof(float));
			memcpy(q, p0 + base, n * sizeof(float));
			for (int step = 1; step <= 4; step++)
				ops->adamw_segs(q, g + (size_t)(step - 1) * total, qm, qv, base, segs, 2, 1e-2f, 0.9f, 0.95f,
						1e-8f, 0.1f, step);
			CHECK(!memcmp(q, st[0], n * sizeof(float)) && !memcmp(qm, st[1], n * sizeof(float)) &&
			      !memcmp(qv, st[2], n * sizeof(float)));
			free(q);
			free(qm);
			free(qv);
		}
		for (int k = 0; k < 3; k++) {
			free(st[k]);
			free(ref[k]);
		}
		free(w16);
		free(rw16);
		free(g);
		free(p0);
	}
}

/* The 16-bit-weight ops give the fp32 ops' results on the widened weights,
 * bit for bit (ops.h), for both formats, with and without bias and dinp,
 * and the embedding with a row of another shard (-1) and positions. */
static void test_w16_ops(void)
{
	const int N = 7, IC = 13, OC = 11, V = 9;
	for (int kind = KOPS_ROUND_BF16; kind <= KOPS_ROUND_FP16; kind++) {
		enum kops_round rk = (enum kops_round)kind;
		float *w = randv((size_t)OC * IC, 0.5f), *x = randv((size_t)N * IC, 1), *b = randv(OC, 1);
		float *dout = randv((size_t)N * OC, 1), *wf = zerov((size_t)OC * IC);
		uint16_t *wh = xmalloc((size_t)OC * IC * sizeof(uint16_t));
		ops->narrow(wh, w, (size_t)OC * IC, rk);
		ops->widen(wf, wh, (size_t)OC * IC, rk);
		float *o1 = zerov((size_t)N * OC), *o2 = zerov((size_t)N * OC);
		for (int with_bias = 0; with_bias < 2; with_bias++) {
			ops->linear_forward(o1, x, wf, with_bias ? b : NULL, N, IC, OC);
			ops->linear_forward_w16(o2, x, wh, with_bias ? b : NULL, N, IC, OC, rk);
			CHECK(!memcmp(o1, o2, (size_t)N * OC * sizeof(float)));
		}
		for (int with_dinp = 0; with_dinp < 2; with_dinp++) {
			float *di1 = zerov((size_t)N * IC), *di2 = zerov((size_t)N * IC);
			float *dw1 = randv((size_t)OC * IC, 1), *dw2 = xmalloc((size_t)OC * IC * sizeof(float));
			float *db1 = randv(OC, 1), *db2 = xmalloc(OC * sizeof(float));
			memcpy(dw2, dw1, (size_t)OC * IC * sizeof(float));
			memcpy(db2, db1, OC * sizeof(float));
			ops->linear_backward(with_dinp ? di1 : NULL, dw1, db1, dout, x, wf, N, IC, OC);
			ops->linear_backward_w16(with_dinp ? di2 : NULL, dw2, db2, dout, x, wh, N, IC, OC, rk);
			CHECK(!memcmp(di1, di2, (size_t)N * IC * sizeof(float)));
			CHECK(!memcmp(dw1, dw2, (size_t)OC * IC * sizeof(float)));
			CHECK(!memcmp(db1, db2, OC * sizeof(float)));
			free(di1), free(di2), free(dw1), free(dw2), free(db1), free(db2);
		}
		/* the embedding: [V, IC] words, positions from a [N, IC] table */
		int32_t tok[7] = { 3, -1, 0, 8, 3, 5, 1 }, pos[7] = { 0, 1, 2, 3, 4, 5, 6 };
		float *e1 = zerov((size_t)N * IC), *e2 = zerov((size_t)N * IC);
		for (int with_pos = 0; with_pos < 2; with_pos++) {
			ops->embedding_forward(e1, tok, with_pos ? pos : NULL, wf, with_pos ? x : NULL, N, IC);
			ops->embedding_forward_w16(e2, tok, with_pos ? pos : NULL, wh, with_pos ? x : NULL, N, IC, rk);
			CHECK(!memcmp(e1, e2, (size_t)N * IC * sizeof(float)));
		}
		CHECK(V * IC <= OC * IC); /* the table's rows lie inside w */
		free(w), free(x), free(b), free(dout), free(wf), free(wh), free(o1), free(o2), free(e1), free(e2);
	}
}

static void test_op_table_check(void)
{
	const int n = kops_count();
	CHECK(n >= 40);
	CHECK_INT(offsetof(struct kops, alloc) + (size_t)n * sizeof(kops_fn), sizeof(struct kops));
	CHECK(kops_missing(kops_cpu()) == NULL);
	for (int i = 0; i < n; i++) {
		struct kops t = *kops_cpu();
		kops_fn none = NULL;
		/* op i's slot: the list's i-th pointer of the struct */
		memcpy((char *)&t + offsetof(struct kops, alloc) + (size_t)i * sizeof(kops_fn), &none, sizeof none);
		CHECK(kops_op(&t, i) == NULL);
		if (kops_op_optional(i)) /* a backend may lack it: not missing */
			CHECK(kops_missing(&t) == NULL);
		else
			CHECK_STR(kops_missing(&t), kops_op_name(i));
		CHECK(kops_op(kops_cpu(), i) != NULL);
	}
	struct kops bad = *kops_cpu();
	bad.name = "broken";
	bad.swiglu_backward = NULL;
	char *tmp = test_tmpdir("ops_check"), path[4200];
	snprintf(path, sizeof path, "%s/err.txt", tmp);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		kops_check(&bad);
		_exit(0); /* not reached when the check works */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0));
	FILE *f = fopen(path, "r");
	char msg[1024] = "";
	if (f) {
		size_t got = fread(msg, 1, sizeof msg - 1, f);
		msg[got] = 0;
		fclose(f);
	}
	CHECK(strstr(msg, "BUG") && strstr(msg, "the broken op table has no swiglu_backward"));
	free(tmp);
}

int main(void)
{
	log_init("test_ops", 0, 1);
	ops = kops_cpu();
	dir = test_tmpdir("ops");
	RUN(test_op_table_check);
	RUN(test_w16_ops);
	RUN(test_adamw_segs_lp);
	RUN(test_philox_known_answers);
	RUN(test_uniform_and_normal_definitions);
	RUN(test_dropout_mask);
	RUN(test_dropout_grad);
	RUN(test_expf_helper);
	RUN(test_linear_grad);
	RUN(test_embedding_grad);
	RUN(test_layernorm_grad);
	RUN(test_rmsnorm_grad);
	RUN(test_gelu_grad);
	RUN(test_swiglu_grad);
	RUN(test_qkv_split);
	RUN(test_attention_grad);
	RUN(test_attention_grad_long);
	RUN(test_xent_grad);
	RUN(test_vector_helpers);
	RUN(test_thread_count_independence);
	torch_setup();
	RUN(test_torch_ran);
	RUN(test_torch_linear);
	RUN(test_torch_norms);
	RUN(test_torch_activations);
	RUN(test_torch_attention);
	RUN(test_torch_xent);
	RUN(test_torch_rope);
	RUN(test_torch_round);
	RUN(test_torch_narrow);
	RUN(test_torch_adamw);
	torch_free();
	RUN(test_timings);
	free(dir);
	return test_summary();
}
