/*
 * test_ssm.c - the Mamba-2 mixer ops of the CPU backend (lib/kernels/cpu_ssm.c,
 * ops.h's "Mamba-2 (SSD) mixer" section):
 *
 *  - every backward against central finite differences of its forward, all
 *    inputs and parameters (a scalar L = sum(out * R) in double over the
 *    fp32 forward; the analytic gradient must agree to 1% relative, as in
 *    test_ops), the scan's with an initial state and a final-state gradient;
 *  - the scan against the plain recurrence computed here in double, and
 *    against SSD's chunked (matrix) form, also here in double, for several
 *    chunk lengths: the two forms are one function;
 *  - the op's results do not depend on the chunk length, nor on the number
 *    of threads (bit for bit);
 *  - a sequence run in two calls, the first's final state (and, for the
 *    convolution, its last W-1 inputs) handed to the second, gives the
 *    one-call result bit for bit (what a server does), also with the state
 *    updated in place;
 *  - the table's conventions: parameter grads accumulate, input grads are
 *    overwritten, NULL grads are skipped, and the ops are optional ones a
 *    backend may lack; the profiling wrapper times them and changes nothing.
 * PyTorch references of the same ops: tests/prog/ssm_ops.sh.
 */
#include "base/error.h"
#include "base/xalloc.h"
#include "kernels/ops.h"
#include "kernels/profile.h"
#include "test.h"
#include "test_fd.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>

static const struct kops *ops;

/* splitmix64, the test's own generator */
static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t next_u64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* uniform in [c - s, c + s) */
static float frand(float c, float s)
{
	return c + s * (2.0f * (float)(next_u64() >> 40) * 0x1p-24f - 1.0f);
}

static float *randv(size_t n, float c, float s)
{
	float *x = xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = frand(c, s);
	return x;
}

static float *zerov(size_t n)
{
	return xcalloc(n, sizeof(float));
}

static float *fillv(size_t n, float v)
{
	float *x = xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = v;
	return x;
}

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

/* max |a - ref| / max |ref| over n values, ref in double */
static double rel_maxerr(const float *a, const double *ref, size_t n)
{
	double e = 0.0, m = 0.0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - ref[i]);
		e = d > e || isnan(d) ? d : e;
		m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
	}
	return e / (m > 1e-30 ? m : 1e-30);
}

/* ---- finite differences (test_fd.h) ---- */

/* ---- the convolution ---- */

struct conv_case {
	int B, T, C, W;
	float *x, *hist, *w, *bias, *out;
};

static void conv_fwd(void *ctx)
{
	struct conv_case *c = ctx;
	ops->ssm_conv_forward(c->out, c->x, c->hist, c->w, c->bias, c->B, c->T, c->C, c->W);
}

static void conv_grad_case(int with_hist)
{
	struct conv_case c = { .B = 2, .T = 7, .C = 5, .W = 4 };
	const size_t n = (size_t)c.B * c.T * c.C;
	c.x = randv(n, 0, 1);
	c.hist = with_hist ? randv((size_t)c.B * (c.W - 1) * c.C, 0, 1) : NULL;
	c.w = randv((size_t)c.C * c.W, 0, 0.7f);
	c.bias = randv(c.C, 0, 0.5f);
	c.out = zerov(n);
	float *R = randv(n, 0, 1);
	float *dx = fillv(n, 1e30f), *dw = zerov((size_t)c.C * c.W), *db = zerov(c.C);
	conv_fwd(&c);
	ops->ssm_conv_backward(dx, dw, db, R, c.x, c.hist, c.w, c.bias, c.B, c.T, c.C, c.W);
	struct fd f = { conv_fwd, &c, c.out, R, n };
	CHECK_GRAD(&f, c.x, n, dx, 1e-2f);
	CHECK_GRAD(&f, c.w, (size_t)c.C * c.W, dw, 1e-2f);
	CHECK_GRAD(&f, c.bias, c.C, db, 1e-2f);
	/* grads of parameters accumulate, of inputs overwrite; NULL skips */
	float *dx2 = fillv(n, -7.0f), *dw2 = fillv((size_t)c.C * c.W, 0.25f), *db2 = fillv(c.C, -0.5f);
	ops->ssm_conv_backward(dx2, dw2, db2, R, c.x, c.hist, c.w, c.bias, c.B, c.T, c.C, c.W);
	CHECK_SAME("dx overwritten", dx2, dx, n);
	for (int i = 0; i < c.C * c.W; i++)
		dw[i] = 0.25f + dw[i];
	for (int i = 0; i < c.C; i++)
		db[i] = -0.5f + db[i];
	CHECK_SAME("dw accumulates", dw2, dw, (size_t)c.C * c.W);
	CHECK_SAME("dbias accumulates", db2, db, c.C);
	ops->ssm_conv_backward(NULL, dw2, NULL, R, c.x, c.hist, c.w, c.bias, c.B, c.T, c.C, c.W);
	ops->ssm_conv_backward(dx2, NULL, NULL, R, c.x, c.hist, c.w, c.bias, c.B, c.T, c.C, c.W);
	CHECK_SAME("dx alone", dx2, dx, n);
	/* the definition, by hand, at a few points */
	for (int b = 0; b < c.B; b++)
		for (int t = 0; t < c.T; t += 3)
			for (int ch = 0; ch < c.C; ch += 2) {
				double pre = c.bias[ch];
				for (int j = 0; j < c.W; j++) {
					int tt = t - (c.W - 1) + j;
					double xv = 0.0;
					if (tt >= 0)
						xv = c.x[((size_t)b * c.T + tt) * c.C + ch];
					else if (c.hist)
						xv = c.hist[((size_t)b * (c.W - 1) + c.W - 1 + tt) * c.C + ch];
					pre += (double)c.w[ch * c.W + j] * xv;
				}
				double want = pre / (1.0 + exp(-pre)), got = c.out[((size_t)b * c.T + t) * c.C + ch];
				CHECK(fabs(got - want) <= 1e-6 * (1.0 + fabs(want)));
			}
	free(c.x), free(c.hist), free(c.w), free(c.bias), free(c.out), free(R), free(dx), free(dw), free(db);
	free(dx2), free(dw2), free(db2);
}

static void test_conv_grad(void)
{
	conv_grad_case(0);
	conv_grad_case(1);
}

/* The sequence in two calls, the second with the first's last W-1 inputs
 * as history, is the one-call result bit for bit. */
static void test_conv_split(void)
{
	const int B = 2, T = 13, T1 = 5, C = 6, W = 4;
	float *x = randv((size_t)B * T * C, 0, 1), *w = randv((size_t)C * W, 0, 0.7f), *bias = randv(C, 0, 0.5f);
	float *whole = zerov((size_t)B * T * C), *x1 = zerov((size_t)B * T1 * C), *x2 = zerov((size_t)B * (T - T1) * C);
	float *o1 = zerov((size_t)B * T1 * C), *o2 = zerov((size_t)B * (T - T1) * C);
	float *hist = zerov((size_t)B * (W - 1) * C);
	ops->ssm_conv_forward(whole, x, NULL, w, bias, B, T, C, W);
	for (int b = 0; b < B; b++) {
		memcpy(x1 + (size_t)b * T1 * C, x + (size_t)b * T * C, (size_t)T1 * C * sizeof(float));
		memcpy(x2 + (size_t)b * (T - T1) * C, x + ((size_t)b * T + T1) * C,
		       (size_t)(T - T1) * C * sizeof(float));
		memcpy(hist + (size_t)b * (W - 1) * C, x + ((size_t)b * T + T1 - (W - 1)) * C,
		       (size_t)(W - 1) * C * sizeof(float));
	}
	ops->ssm_conv_forward(o1, x1, NULL, w, bias, B, T1, C, W);
	ops->ssm_conv_forward(o2, x2, hist, w, bias, B, T - T1, C, W);
	for (int b = 0; b < B; b++) {
		CHECK_SAME("first part", o1 + (size_t)b * T1 * C, whole + (size_t)b * T * C, (size_t)T1 * C);
		CHECK_SAME("second part", o2 + (size_t)b * (T - T1) * C, whole + ((size_t)b * T + T1) * C,
			   (size_t)(T - T1) * C);
	}
	free(x), free(w), free(bias), free(whole), free(x1), free(x2), free(o1), free(o2), free(hist);
}

/* ---- the scan ---- */

struct scan_case {
	int B, T, H, P, G, N, chunk;
	float *x, *dt, *dtb, *Alog, *Bm, *Cm, *D, *s0;
	float *out; /* y[B,T,H,P] then the final state [B,H,P,N] */
};

static size_t nx(const struct scan_case *c)
{
	return (size_t)c->B * c->T * c->H * c->P;
}
static size_t nbc(const struct scan_case *c)
{
	return (size_t)c->B * c->T * c->G * c->N;
}
static size_t ns(const struct scan_case *c)
{
	return (size_t)c->B * c->H * c->P * c->N;
}

static void scan_fwd(void *ctx)
{
	struct scan_case *c = ctx;
	ops->ssd_scan_forward(c->out, c->out + nx(c), c->x, c->dt, c->dtb, c->Alog, c->Bm, c->Cm, c->D, c->s0, c->B,
			      c->T, c->H, c->P, c->G, c->N, c->chunk);
}

static void scan_init(struct scan_case *c, int B, int T, int H, int P, int G, int N, int chunk)
{
	*c = (struct scan_case){ .B = B, .T = T, .H = H, .P = P, .G = G, .N = N, .chunk = chunk };
	c->x = randv(nx(c), 0, 1);
	c->dt = randv((size_t)B * T * H, -1.0f, 1.0f); /* softplus(dt + bias) about 0.1 .. 1.3 */
	c->dtb = randv(H, 0, 0.5f);
	c->Alog = randv(H, 0, 1.0f);
	c->Bm = randv(nbc(c), 0, 1);
	c->Cm = randv(nbc(c), 0, 1);
	c->D = randv(H, 0, 1);
	c->s0 = randv(ns(c), 0, 1);
	c->out = zerov(nx(c) + ns(c));
}

static void scan_free(struct scan_case *c)
{
	free(c->x), free(c->dt), free(c->dtb), free(c->Alog), free(c->Bm), free(c->Cm), free(c->D), free(c->s0);
	free(c->out);
}

/* The scan's grads, in one block so a whole set can be compared at once. */
struct scan_grads {
	float *dx, *ddt, *ddtb, *dAlog, *dBm, *dCm, *dD, *ds0;
};

static void grads_alloc(struct scan_grads *g, const struct scan_case *c, float fill)
{
	g->dx = fillv(nx(c), fill);
	g->ddt = fillv((size_t)c->B * c->T * c->H, fill);
	g->ddtb = zerov(c->H);
	g->dAlog = zerov(c->H);
	g->dBm = fillv(nbc(c), fill);
	g->dCm = fillv(nbc(c), fill);
	g->dD = zerov(c->H);
	g->ds0 = fillv(ns(c), fill);
}

static void grads_free(struct scan_grads *g)
{
	free(g->dx), free(g->ddt), free(g->ddtb), free(g->dAlog), free(g->dBm), free(g->dCm), free(g->dD), free(g->ds0);
}

static void scan_bwd(const struct scan_case *c, struct scan_grads *g, const float *R, int chunk)
{
	ops->ssd_scan_backward(g->dx, g->ddt, g->ddtb, g->dAlog, g->dBm, g->dCm, g->dD, g->ds0, R, R + nx(c), c->x,
			       c->dt, c->dtb, c->Alog, c->Bm, c->Cm, c->D, c->s0, c->B, c->T, c->H, c->P, c->G, c->N,
			       chunk);
}

static int grads_same(const struct scan_case *c, const struct scan_grads *a, const struct scan_grads *b)
{
	return same_bits("dx", a->dx, b->dx, nx(c)) && same_bits("ddt", a->ddt, b->ddt, (size_t)c->B * c->T * c->H) &&
	       same_bits("ddt_bias", a->ddtb, b->ddtb, c->H) && same_bits("dA_log", a->dAlog, b->dAlog, c->H) &&
	       same_bits("dBm", a->dBm, b->dBm, nbc(c)) && same_bits("dCm", a->dCm, b->dCm, nbc(c)) &&
	       same_bits("dD", a->dD, b->dD, c->H) && same_bits("dstate_in", a->ds0, b->ds0, ns(c));
}

static void test_scan_grad(void)
{
	struct scan_case c;
	scan_init(&c, 2, 11, 4, 3, 2, 5, 4);
	float *R = randv(nx(&c) + ns(&c), 0, 1);
	struct scan_grads g;
	grads_alloc(&g, &c, 1e30f);
	scan_fwd(&c);
	scan_bwd(&c, &g, R, c.chunk);
	struct fd f = { scan_fwd, &c, c.out, R, nx(&c) + ns(&c) };
	CHECK_GRAD(&f, c.x, nx(&c), g.dx, 1e-2f);
	CHECK_GRAD(&f, c.dt, (size_t)c.B * c.T * c.H, g.ddt, 1e-2f);
	CHECK_GRAD(&f, c.dtb, c.H, g.ddtb, 1e-2f);
	CHECK_GRAD(&f, c.Alog, c.H, g.dAlog, 1e-2f);
	CHECK_GRAD(&f, c.Bm, nbc(&c), g.dBm, 1e-2f);
	CHECK_GRAD(&f, c.Cm, nbc(&c), g.dCm, 1e-2f);
	CHECK_GRAD(&f, c.D, c.H, g.dD, 1e-2f);
	CHECK_GRAD(&f, c.s0, ns(&c), g.ds0, 1e-2f);

	/* parameter grads accumulate; input grads overwrite; NULLs skip */
	struct scan_grads g2;
	grads_alloc(&g2, &c, -3.0f);
	for (int h = 0; h < c.H; h++)
		g2.ddtb[h] = 0.5f, g2.dAlog[h] = -0.25f, g2.dD[h] = 2.0f;
	scan_bwd(&c, &g2, R, c.chunk);
	for (int h = 0; h < c.H; h++) {
		g.ddtb[h] = 0.5f + g.ddtb[h];
		g.dAlog[h] = -0.25f + g.dAlog[h];
		g.dD[h] = 2.0f + g.dD[h];
	}
	CHECK(grads_same(&c, &g2, &g));
	float *dBm = fillv(nbc(&c), 9.0f);
	ops->ssd_scan_backward(NULL, NULL, NULL, NULL, dBm, NULL, NULL, NULL, R, R + nx(&c), c.x, c.dt, c.dtb, c.Alog,
			       c.Bm, c.Cm, c.D, c.s0, c.B, c.T, c.H, c.P, c.G, c.N, c.chunk);
	CHECK_SAME("dBm alone", dBm, g.dBm, nbc(&c));

	/* no D, no initial state, no final-state grad: the remaining grads still right */
	free(c.D), free(c.s0);
	c.D = NULL, c.s0 = NULL;
	memset(R + nx(&c), 0, ns(&c) * sizeof(float));
	struct scan_grads g3;
	grads_alloc(&g3, &c, 1e30f);
	scan_fwd(&c);
	ops->ssd_scan_backward(g3.dx, g3.ddt, g3.ddtb, g3.dAlog, g3.dBm, g3.dCm, NULL, g3.ds0, R, NULL, c.x, c.dt,
			       c.dtb, c.Alog, c.Bm, c.Cm, NULL, NULL, c.B, c.T, c.H, c.P, c.G, c.N, c.chunk);
	CHECK_GRAD(&f, c.x, nx(&c), g3.dx, 1e-2f);
	CHECK_GRAD(&f, c.dt, (size_t)c.B * c.T * c.H, g3.ddt, 1e-2f);
	CHECK_GRAD(&f, c.Alog, c.H, g3.dAlog, 1e-2f);
	CHECK_GRAD(&f, c.Cm, nbc(&c), g3.dCm, 1e-2f);
	/* dstate_in without state_in: the gradient at the zero state, checked
	 * against a zero initial state passed explicitly */
	c.s0 = zerov(ns(&c));
	struct scan_grads g4;
	grads_alloc(&g4, &c, 0.0f);
	scan_bwd(&c, &g4, R, c.chunk);
	CHECK_SAME("dstate_in at zeros", g3.ds0, g4.ds0, ns(&c));
	CHECK_GRAD(&f, c.s0, ns(&c), g4.ds0, 1e-2f);
	grads_free(&g), grads_free(&g2), grads_free(&g3), grads_free(&g4);
	free(R), free(dBm);
	scan_free(&c);
}

/* The recurrence, in double, as ops.h states it: y[B,T,H,P], s[B,H,P,N]. */
static void scan_recurrence(double *y, double *s, const struct scan_case *c)
{
	const int B = c->B, T = c->T, H = c->H, P = c->P, G = c->G, N = c->N;
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			const int g = h / (H / G);
			const double A = -exp((double)c->Alog[h]);
			double *st = s + ((size_t)b * H + h) * P * N;
			for (int i = 0; i < P * N; i++)
				st[i] = c->s0 ? c->s0[((size_t)b * H + h) * P * N + i] : 0.0;
			for (int t = 0; t < T; t++) {
				const double v = (double)c->dt[((size_t)b * T + t) * H + h] + c->dtb[h];
				const double d = v > 20.0 ? v : log1p(exp(v)), a = exp(d * A);
				const float *xt = c->x + (((size_t)b * T + t) * H + h) * P;
				const float *Bt = c->Bm + (((size_t)b * T + t) * G + g) * N;
				const float *Ct = c->Cm + (((size_t)b * T + t) * G + g) * N;
				double *yt = y + (((size_t)b * T + t) * H + h) * P;
				for (int p = 0; p < P; p++) {
					double acc = 0.0;
					for (int n = 0; n < N; n++) {
						double *e = st + (size_t)p * N + n;
						*e = a * *e + d * xt[p] * Bt[n];
						acc += *e * Ct[n];
					}
					yt[p] = acc + (c->D ? c->D[h] : 0.0) * xt[p];
				}
			}
		}
}

/* SSD's chunked form, in double: within a chunk of length L starting at t0,
 * with cum_i = sum_{k<=i} d_k A (i, k from the chunk start),
 *   y_i = sum_{j<=i} exp(cum_i - cum_j) d_j (C_i . B_j) x_j + exp(cum_i) C_i s0 + D x_i
 *   s_end = exp(cum_{L-1}) s0 + sum_j exp(cum_{L-1} - cum_j) d_j x_j B_j^T
 * (the quadratic "attention-like" part inside a chunk, the state between). */
static void scan_chunked(double *y, double *s, const struct scan_case *c, int L)
{
	const int B = c->B, T = c->T, H = c->H, P = c->P, G = c->G, N = c->N;
	double *cum = xmalloc((size_t)L * sizeof(double)), *dd = xmalloc((size_t)L * sizeof(double));
	double *ns_ = xmalloc((size_t)P * N * sizeof(double));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			const int g = h / (H / G);
			const double A = -exp((double)c->Alog[h]);
			double *st = s + ((size_t)b * H + h) * P * N;
			for (int i = 0; i < P * N; i++)
				st[i] = c->s0 ? c->s0[((size_t)b * H + h) * P * N + i] : 0.0;
#define XT(t) (c->x + (((size_t)b * T + (t)) * H + h) * P)
#define BT(t) (c->Bm + (((size_t)b * T + (t)) * G + g) * N)
#define CT(t) (c->Cm + (((size_t)b * T + (t)) * G + g) * N)
			for (int t0 = 0; t0 < T; t0 += L) {
				const int len = t0 + L <= T ? L : T - t0;
				double run = 0.0;
				for (int i = 0; i < len; i++) {
					const double v = (double)c->dt[((size_t)b * T + t0 + i) * H + h] + c->dtb[h];
					dd[i] = v > 20.0 ? v : log1p(exp(v));
					run += dd[i] * A;
					cum[i] = run;
				}
				for (int i = 0; i < len; i++) {
					double *yt = y + (((size_t)b * T + t0 + i) * H + h) * P;
					for (int p = 0; p < P; p++) {
						double acc = 0.0;
						for (int n = 0; n < N; n++)
							acc += CT(t0 + i)[n] * st[(size_t)p * N + n];
						yt[p] = exp(cum[i]) * acc + (c->D ? c->D[h] : 0.0) * XT(t0 + i)[p];
					}
					for (int j = 0; j <= i; j++) {
						double cb = 0.0;
						for (int n = 0; n < N; n++)
							cb += (double)CT(t0 + i)[n] * BT(t0 + j)[n];
						const double wgt = exp(cum[i] - cum[j]) * dd[j] * cb;
						for (int p = 0; p < P; p++)
							yt[p] += wgt * XT(t0 + j)[p];
					}
				}
				for (int p = 0; p < P; p++)
					for (int n = 0; n < N; n++) {
						double acc = exp(cum[len - 1]) * st[(size_t)p * N + n];
						for (int j = 0; j < len; j++)
							acc += exp(cum[len - 1] - cum[j]) * dd[j] * XT(t0 + j)[p] *
							       BT(t0 + j)[n];
						ns_[(size_t)p * N + n] = acc;
					}
				memcpy(st, ns_, (size_t)P * N * sizeof(double));
			}
#undef XT
#undef BT
#undef CT
		}
	free(cum), free(dd), free(ns_);
}

static void test_scan_reference(void)
{
	struct scan_case c;
	scan_init(&c, 2, 37, 6, 4, 3, 8, 16);
	const size_t ny = nx(&c), nst = ns(&c);
	double *y = xmalloc(ny * sizeof(double)), *s = xmalloc(nst * sizeof(double));
	double *yc = xmalloc(ny * sizeof(double)), *sc = xmalloc(nst * sizeof(double));
	scan_fwd(&c);
	scan_recurrence(y, s, &c);
	double ey = rel_maxerr(c.out, y, ny), es = rel_maxerr(c.out + ny, s, nst);
	printf("#   scan against the recurrence in double: y %.2g, final state %.2g (max error / max)\n", ey, es);
	CHECK(ey < 1e-5 && es < 1e-5);
	/* the chunked SSD form is the same function, whatever the chunk */
	static const int Ls[] = { 1, 5, 16, 64 };
	for (size_t k = 0; k < sizeof Ls / sizeof Ls[0]; k++) {
		scan_chunked(yc, sc, &c, Ls[k]);
		double dy = 0.0, ds = 0.0;
		for (size_t i = 0; i < ny; i++)
			dy = fmax(dy, fabs(yc[i] - y[i]));
		for (size_t i = 0; i < nst; i++)
			ds = fmax(ds, fabs(sc[i] - s[i]));
		if (!(dy < 1e-10 && ds < 1e-10))
			printf("#   chunk %d: chunked form differs from the recurrence by %.3g (y), %.3g (state)\n",
			       Ls[k], dy, ds);
		CHECK(dy < 1e-10 && ds < 1e-10);
	}
	/* no initial state: zeros */
	free(c.s0);
	c.s0 = NULL;
	scan_fwd(&c);
	scan_recurrence(y, s, &c);
	CHECK(rel_maxerr(c.out, y, ny) < 1e-5 && rel_maxerr(c.out + ny, s, nst) < 1e-5);
	free(y), free(s), free(yc), free(sc);
	scan_free(&c);
}

/* The chunk length changes nothing on the CPU, forward or backward. */
static void test_scan_chunk_independence(void)
{
	struct scan_case c;
	scan_init(&c, 2, 29, 4, 3, 2, 6, 8);
	float *R = randv(nx(&c) + ns(&c), 0, 1);
	float *ref = zerov(nx(&c) + ns(&c));
	struct scan_grads g0;
	grads_alloc(&g0, &c, 0.0f);
	scan_fwd(&c);
	memcpy(ref, c.out, (nx(&c) + ns(&c)) * sizeof(float));
	scan_bwd(&c, &g0, R, 8);
	static const int chunks[] = { 1, 3, 28, 29, 128 };
	for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
		c.chunk = chunks[k];
		scan_fwd(&c);
		CHECK_SAME("forward", c.out, ref, nx(&c) + ns(&c));
		struct scan_grads g;
		grads_alloc(&g, &c, 0.0f);
		scan_bwd(&c, &g, R, chunks[k]);
		if (!grads_same(&c, &g, &g0)) {
			printf("#   chunk %d\n", chunks[k]);
			CHECK(0);
		}
		grads_free(&g);
	}
	grads_free(&g0);
	free(R), free(ref);
	scan_free(&c);
}

/* A sequence in two calls, the first's final state the second's initial
 * one, is the one-call sequence bit for bit. */
static void test_scan_state_split(void)
{
	struct scan_case c, c1, c2;
	const int T1 = 6;
	scan_init(&c, 2, 15, 4, 3, 2, 5, 4);
	scan_fwd(&c);
	scan_init(&c1, 2, T1, 4, 3, 2, 5, 4);
	scan_init(&c2, 2, c.T - T1, 4, 3, 2, 5, 4);
	memcpy(c1.dtb, c.dtb, c.H * sizeof(float)), memcpy(c2.dtb, c.dtb, c.H * sizeof(float));
	memcpy(c1.Alog, c.Alog, c.H * sizeof(float)), memcpy(c2.Alog, c.Alog, c.H * sizeof(float));
	memcpy(c1.D, c.D, c.H * sizeof(float)), memcpy(c2.D, c.D, c.H * sizeof(float));
	memcpy(c1.s0, c.s0, ns(&c) * sizeof(float));
	/* split every per-step input [B, T, k] at T1 */
	struct {
		float *all, *a, *b;
		size_t k;
	} parts[] = {
		{ c.x, c1.x, c2.x, (size_t)c.H * c.P }, { c.dt, c1.dt, c2.dt, (size_t)c.H },
		{ c.Bm, c1.Bm, c2.Bm, (size_t)c.G * c.N }, { c.Cm, c1.Cm, c2.Cm, (size_t)c.G * c.N },
	};
	for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
		for (int b = 0; b < c.B; b++) {
			memcpy(parts[i].a + (size_t)b * T1 * parts[i].k, parts[i].all + (size_t)b * c.T * parts[i].k,
			       T1 * parts[i].k * sizeof(float));
			memcpy(parts[i].b + (size_t)b * (c.T - T1) * parts[i].k,
			       parts[i].all + ((size_t)b * c.T + T1) * parts[i].k,
			       (c.T - T1) * parts[i].k * sizeof(float));
		}
	scan_fwd(&c1);
	memcpy(c2.s0, c1.out + nx(&c1), ns(&c) * sizeof(float));
	scan_fwd(&c2);
	const size_t hp = (size_t)c.H * c.P;
	for (int b = 0; b < c.B; b++) {
		CHECK_SAME("first part", c1.out + (size_t)b * T1 * hp, c.out + (size_t)b * c.T * hp, T1 * hp);
		CHECK_SAME("second part", c2.out + (size_t)b * (c.T - T1) * hp, c.out + ((size_t)b * c.T + T1) * hp,
			   (c.T - T1) * hp);
	}
	CHECK_SAME("final state", c2.out + nx(&c2), c.out + nx(&c), ns(&c));
	/* state_out aliasing state_in: the state advances in place */
	memcpy(c2.s0, c1.out + nx(&c1), ns(&c) * sizeof(float));
	ops->ssd_scan_forward(c2.out, c2.s0, c2.x, c2.dt, c2.dtb, c2.Alog, c2.Bm, c2.Cm, c2.D, c2.s0, c2.B, c2.T, c2.H,
			      c2.P, c2.G, c2.N, c2.chunk);
	CHECK_SAME("state in place", c2.s0, c.out + nx(&c), ns(&c));
	scan_free(&c), scan_free(&c1), scan_free(&c2);
}

/* ---- the gated RMSNorm ---- */

struct gn_case {
	int N, C, ng;
	float *y, *z, *w, *out, *rstd;
};

static void gn_fwd(void *ctx)
{
	struct gn_case *c = ctx;
	ops->gated_rmsnorm_forward(c->out, c->rstd, c->y, c->z, c->w, c->N, c->C, c->ng, 1e-5f);
}

static void gn_grad_case(int gated, int ng)
{
	struct gn_case c = { .N = 5, .C = 12, .ng = ng };
	const size_t n = (size_t)c.N * c.C;
	c.y = randv(n, 0, 1);
	c.z = gated ? randv(n, 0, 2) : NULL;
	c.w = randv(c.C, 1, 0.3f);
	c.out = zerov(n);
	c.rstd = zerov((size_t)c.N * ng);
	float *R = randv(n, 0, 1), *dy = fillv(n, 1e30f), *dz = fillv(n, 1e30f), *dw = zerov(c.C);
	gn_fwd(&c);
	ops->gated_rmsnorm_backward(dy, dz, dw, R, c.y, c.z, c.w, c.rstd, c.N, c.C, ng);
	struct fd f = { gn_fwd, &c, c.out, R, n };
	CHECK_GRAD(&f, c.y, n, dy, 1e-2f);
	if (gated)
		CHECK_GRAD(&f, c.z, n, dz, 1e-2f);
	CHECK_GRAD(&f, c.w, c.C, dw, 1e-2f);
	/* the definition by hand, group by group */
	for (int r = 0; r < c.N; r++)
		for (int k = 0; k < ng; k++) {
			const int cg = c.C / ng;
			double sq = 0.0, gv[64];
			for (int j = 0; j < cg; j++) {
				size_t i = (size_t)r * c.C + k * cg + j;
				double zz = gated ? c.z[i] : 0.0;
				gv[j] = gated ? c.y[i] * zz / (1.0 + exp(-zz)) : c.y[i];
				sq += gv[j] * gv[j];
			}
			double rs = 1.0 / sqrt(sq / cg + 1e-5);
			for (int j = 0; j < cg; j++) {
				double want = gv[j] * rs * c.w[k * cg + j];
				CHECK(fabs(c.out[(size_t)r * c.C + k * cg + j] - want) <= 1e-5 * (1.0 + fabs(want)));
			}
		}
	/* dy may alias dout; dw accumulates; out may alias y */
	float *d2 = xmalloc(n * sizeof(float)), *dw2 = fillv(c.C, 1.5f);
	memcpy(d2, R, n * sizeof(float));
	ops->gated_rmsnorm_backward(d2, NULL, dw2, d2, c.y, c.z, c.w, c.rstd, c.N, c.C, ng);
	CHECK_SAME("dy in place", d2, dy, n);
	for (int i = 0; i < c.C; i++)
		dw[i] = 1.5f + dw[i];
	CHECK_SAME("dw accumulates", dw2, dw, c.C);
	memcpy(d2, c.y, n * sizeof(float));
	ops->gated_rmsnorm_forward(d2, c.rstd, d2, c.z, c.w, c.N, c.C, ng, 1e-5f);
	CHECK_SAME("out in place", d2, c.out, n);
	free(c.y), free(c.z), free(c.w), free(c.out), free(c.rstd), free(R), free(dy), free(dz), free(dw);
	free(d2), free(dw2);
}

static void test_gated_rmsnorm_grad(void)
{
	gn_grad_case(1, 1);
	gn_grad_case(1, 3);
	gn_grad_case(0, 4);
}

/* ---- threads, and the table ---- */

static void test_thread_count_independence(void)
{
	int saved = omp_get_max_threads();
	/* big enough that every op runs its parallel loops */
	struct scan_case c;
	scan_init(&c, 2, 64, 4, 8, 2, 16, 16);
	float *R = randv(nx(&c) + ns(&c), 0, 1);
	const int B = 2, T = 64, C = 72, W = 4, NR = 128, CN = 256;
	float *x = randv((size_t)B * T * C, 0, 1), *w = randv((size_t)C * W, 0, 0.5f), *bias = randv(C, 0, 0.5f);
	float *y = randv((size_t)NR * CN, 0, 1), *z = randv((size_t)NR * CN, 0, 1), *nw = randv(CN, 1, 0.2f);
	float *o[2], *so[2], *co[2], *cdx[2], *cdw[2], *no[2], *nr[2], *ndy[2], *ndz[2], *ndw[2];
	struct scan_grads g[2];
	for (int k = 0; k < 2; k++) {
		omp_set_num_threads(k + 1);
		scan_fwd(&c);
		o[k] = xmalloc((nx(&c) + ns(&c)) * sizeof(float));
		memcpy(o[k], c.out, (nx(&c) + ns(&c)) * sizeof(float));
		grads_alloc(&g[k], &c, 0.0f);
		scan_bwd(&c, &g[k], R, 16);
		so[k] = NULL;
		co[k] = zerov((size_t)B * T * C), cdx[k] = zerov((size_t)B * T * C);
		cdw[k] = zerov((size_t)C * (W + 1));
		ops->ssm_conv_forward(co[k], x, NULL, w, bias, B, T, C, W);
		ops->ssm_conv_backward(cdx[k], cdw[k], cdw[k] + (size_t)C * W, co[k], x, NULL, w, bias, B, T, C, W);
		no[k] = zerov((size_t)NR * CN), nr[k] = zerov((size_t)NR * 4), ndy[k] = zerov((size_t)NR * CN);
		ndz[k] = zerov((size_t)NR * CN), ndw[k] = zerov(CN);
		ops->gated_rmsnorm_forward(no[k], nr[k], y, z, nw, NR, CN, 4, 1e-5f);
		ops->gated_rmsnorm_backward(ndy[k], ndz[k], ndw[k], z, y, z, nw, nr[k], NR, CN, 4);
	}
	omp_set_num_threads(saved);
	CHECK_SAME("scan forward", o[0], o[1], nx(&c) + ns(&c));
	CHECK(grads_same(&c, &g[0], &g[1]));
	CHECK_SAME("conv forward", co[0], co[1], (size_t)B * T * C);
	CHECK_SAME("conv dx", cdx[0], cdx[1], (size_t)B * T * C);
	CHECK_SAME("conv dw, dbias", cdw[0], cdw[1], (size_t)C * (W + 1));
	CHECK_SAME("norm forward", no[0], no[1], (size_t)NR * CN);
	CHECK_SAME("norm dy", ndy[0], ndy[1], (size_t)NR * CN);
	CHECK_SAME("norm dz", ndz[0], ndz[1], (size_t)NR * CN);
	CHECK_SAME("norm dw", ndw[0], ndw[1], CN);
	for (int k = 0; k < 2; k++) {
		free(o[k]), free(so[k]), free(co[k]), free(cdx[k]), free(cdw[k]), free(no[k]), free(nr[k]);
		free(ndy[k]), free(ndz[k]), free(ndw[k]);
		grads_free(&g[k]);
	}
	free(R), free(x), free(w), free(bias), free(y), free(z), free(nw);
	scan_free(&c);
}

/* The Mamba-2 ops are optional in the table: the CPU has them all, and a
 * table without them is still complete for kops_check. */
static void test_table(void)
{
	int found = 0;
	for (int i = 0; i < kops_count(); i++) {
		const char *n = kops_op_name(i);
		int ssm = !strncmp(n, "ssm_", 4) || !strncmp(n, "ssd_", 4) || !strncmp(n, "gated_rmsnorm", 13);
		CHECK(ssm == kops_op_optional(i));
		if (ssm) {
			found++;
			CHECK(kops_op(ops, i) != NULL);
		}
	}
	CHECK_INT(found, 6);
	struct kops t = *ops;
	t.ssm_conv_forward = NULL, t.ssm_conv_backward = NULL, t.ssd_scan_forward = NULL, t.ssd_scan_backward = NULL;
	t.gated_rmsnorm_forward = NULL, t.gated_rmsnorm_backward = NULL;
	CHECK(kops_missing(&t) == NULL);
	kops_check(&t);
}

/* The profiling wrapper runs the same functions (the same bits) and lists
 * the ops in its report. */
static void test_profile_wrapper(void)
{
	const struct kops *pw = kops_profile_wrap(ops);
	struct scan_case c;
	scan_init(&c, 1, 9, 2, 3, 1, 4, 4);
	float *R = randv(nx(&c) + ns(&c), 0, 1), *ref = zerov(nx(&c) + ns(&c));
	scan_fwd(&c);
	memcpy(ref, c.out, (nx(&c) + ns(&c)) * sizeof(float));
	struct scan_grads g0, g1;
	grads_alloc(&g0, &c, 0.0f), grads_alloc(&g1, &c, 0.0f);
	scan_bwd(&c, &g0, R, 4);
	const struct kops *saved = ops;
	ops = pw;
	scan_fwd(&c);
	scan_bwd(&c, &g1, R, 4);
	float x[12], w[8], o[12], rs[6];
	for (int i = 0; i < 12; i++)
		x[i] = frand(0, 1);
	for (int i = 0; i < 8; i++)
		w[i] = frand(1, 0.2f);
	ops->ssm_conv_forward(o, x, NULL, w, NULL, 1, 3, 2, 4);
	ops->ssm_conv_backward(o, NULL, NULL, x, x, NULL, w, NULL, 1, 3, 2, 4);
	ops->gated_rmsnorm_forward(o, rs, x, x, w, 3, 4, 2, 1e-5f);
	float dw[4] = { 0 };
	ops->gated_rmsnorm_backward(o, NULL, dw, x, x, x, w, rs, 3, 4, 2);
	ops = saved;
	CHECK_SAME("through the wrapper", c.out, ref, nx(&c) + ns(&c));
	CHECK(grads_same(&c, &g0, &g1));
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	kops_profile_report(f, 1, 0);
	fclose(f);
	static const char *const names[] = { "ssm_conv_forward", "ssm_conv_backward", "ssd_scan_forward",
					     "ssd_scan_backward", "gated_rmsnorm_forward", "gated_rmsnorm_backward" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strstr(text, names[i])) {
			printf("#   %s is not in the profile report\n", names[i]);
			CHECK(0);
		}
	free(text), free(R), free(ref);
	grads_free(&g0), grads_free(&g1);
	scan_free(&c);
}

int main(void)
{
	log_init("test_ssm", 0, 1);
	ops = kops_cpu();
	RUN(test_table);
	RUN(test_conv_grad);
	RUN(test_conv_split);
	RUN(test_scan_grad);
	RUN(test_scan_reference);
	RUN(test_scan_chunk_independence);
	RUN(test_scan_state_split);
	RUN(test_gated_rmsnorm_grad);
	RUN(test_thread_count_independence);
	RUN(test_profile_wrapper);
	return test_summary();
}
