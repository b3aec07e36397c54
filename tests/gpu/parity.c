/*
 * parity.c - the CUDA op table against the CPU one (lib/kernels/ops.h).
 *
 * Every op of struct kops, forward and backward, runs on both tables with the
 * same fresh random inputs (a seeded generator; sizes with ragged tails), and
 * every output is compared with
 *
 *     err = max_i |gpu_i - cpu_i| / max(max_i |cpu_i|, 1e-30)
 *
 * (equal infinities count as equal, a NaN against a NaN too; any other
 * non-finite mismatch is an error of inf) against a threshold per op.
 * Dropout masks must match bit for bit (the counter RNG is shared). Output is
 * TAP: "ok - op [config] (max rel err E)", "not ok - op ..." for a failure
 * and for an op the table leaves NULL, then a coverage line: every op of
 * the fp32, bf16 and fp16 tables was run here, or is the very function of
 * the fp32 table that was (the half tables share most ops); then "1..N" and
 * "N passed, M failed"; the exit status is 1 on failures. Timings of every
 * config on both tables go to stderr as a table.
 *
 *   build/gpu/parity            CPU vs CUDA (prints "1..0 # SKIP why" without a GPU; on the
 *                               emulated device, build/emu/gpu/parity, in make test)
 *   build/gpu/parity --self     CPU vs CPU: tests the harness; every error must be 0
 *   build/gpu/parity --perturb  CPU vs a CPU table with planted faults (linear_forward's
 *                               last element, dropout masks shifted, nonfinite missing the
 *                               last element, adamw's lr off by 1e-3, gelu_forward absent):
 *                               those must fail, the rest pass
 *   options: --seed N (default 1), --reps N (timing repetitions, default 3),
 *            --no-big (leave out the larger timing-only-sized configs)
 */
#include "kernels/cuda_ops.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/rope_scaling.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* thresholds (relative to the largest reference value of an output) */
#define TOL_EXACT 0.0
#define TOL_ADAM 1e-6
#define TOL_EW 1e-5   /* elementwise */
#define TOL_RED 1e-4  /* reductions, norms, softmax */
#define TOL_GEMM 1e-4 /* fp32 GEMMs: TF32 (~1e-3) must not be on */

static const struct kops *CPU, *GPU;
static int n_pass, n_fail, reps = 3, big = 1;
static uint64_t seed0 = 1, test_no;
static const char *only; /* --only TEXT: just the ops whose name contains TEXT */

/* ---- host random numbers: splitmix64 ---- */
static uint64_t rs;
static uint64_t rnext(void)
{
	uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}
static double runif(void) { return (double)(rnext() >> 11) * 0x1.0p-53; }
static int rint_below(int n) { return (int)(rnext() % (uint64_t)n); }

/* host arrays live until the current test is done */
static void *arena[256];
static int narena;
static void *hnew(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p || narena == (int)(sizeof arena / sizeof *arena)) {
		fprintf(stderr, "parity: out of host memory or arena slots\n");
		exit(2);
	}
	return arena[narena++] = p;
}
static void hfree_all(void)
{
	while (narena)
		free(arena[--narena]);
}
/* uniform in [-s, s] */
static float *rvec(size_t n, float s)
{
	float *x = hnew(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((2 * runif() - 1) * s);
	return x;
}
/* uniform in [lo, hi] */
static float *rpos(size_t n, float lo, float hi)
{
	float *x = hnew(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(lo + runif() * (hi - lo));
	return x;
}
/* token ids in [0, V), about a fraction neg of them -1 */
static int32_t *rtok(size_t n, int V, double neg)
{
	int32_t *t = hnew(n * sizeof *t);
	for (size_t i = 0; i < n; i++)
		t[i] = runif() < neg ? -1 : rint_below(V);
	return t;
}
/* a strictly increasing subset of [0, S) with n elements */
static int32_t *rsubset(int n, int S)
{
	int32_t *p = hnew((size_t)n * sizeof *p);
	int got = 0;
	for (int i = 0; i < S && got < n; i++) /* selection sampling */
		if ((double)(n - got) / (S - i) > runif())
			p[got++] = i;
	return p;
}

/* ---- one test: buffers, both tables, compare, time ---- */
struct cfg {
	int N, C, IC, OC, V, F, B, T, a, g, k, rot, Tq, Tk, S, acc, steps, kind, flags;
	int win; /* the attention ops' sliding window (set by their tests; -1: none) */
	size_t n;
	float p, eps, scale, s;
	uint64_t seed, off;
};
enum { F_BIAS = 1, F_ALIAS = 2, F_NULL1 = 4, F_NULL2 = 8, F_WPE = 16, F_DOC = 32, F_INTERLEAVED = 64 };

typedef void (*runfn)(const struct kops *k, void **d, const struct cfg *c, double *scal);

#define MAXB 24
struct buf {
	const char *name; /* an output to compare, or NULL for an input */
	size_t bytes;     /* 0: a NULL pointer */
	const void *host; /* initial contents (NULL: zeros) */
	double tol;
	int mask; /* the zero pattern must match exactly (dropout masks) */
	int raw;  /* bytes that must match exactly (FP8 codes and scales; any size) */
};
static struct buf tb[MAXB];
static int ntb;

static void tb_in(const void *host, size_t bytes) { tb[ntb++] = (struct buf){ NULL, bytes, host, 0, 0, 0 }; }
static void tb_out(const char *name, const void *init, size_t bytes, double tol)
{
	tb[ntb++] = (struct buf){ name, bytes, init, tol, 0, 0 };
}
static void tb_mask(const char *name, const void *init, size_t bytes, double tol)
{
	tb[ntb++] = (struct buf){ name, bytes, init, tol, 1, 0 };
}
static void tb_raw(const char *name, const void *init, size_t bytes)
{
	tb[ntb++] = (struct buf){ name, bytes, init, 0, 0, 1 };
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct timing {
	char op[32], label[128];
	double cpu_ms, gpu_ms;
};
static struct timing timings[512];
static int ntimings;

static double relerr(const float *x, const float *y, size_t n, long *mask_mis)
{
	double md = 0, mb = 0;
	for (size_t i = 0; i < n; i++) {
		float a = x[i], b = y[i];
		if (mask_mis && ((a == 0) != (b == 0)))
			(*mask_mis)++;
		if (isfinite(b) && fabs(b) > mb)
			mb = fabs(b);
		if (a == b || (isnan(a) && isnan(b)))
			continue;
		if (!isfinite(a) || !isfinite(b))
			md = INFINITY;
		else if (fabs((double)a - b) > md)
			md = fabs((double)a - b);
	}
	return md / (mb > 1e-30 ? mb : 1e-30);
}

/* which ops of which table were run (the coverage check at the end) */
#define MAX_TABLES 4
static const struct kops *tables[MAX_TABLES];
static bool tested[MAX_TABLES][64];

static void mark_tested(const struct kops *k, const char *op)
{
	char base[64];
	snprintf(base, sizeof base, "%s", op);
	base[strcspn(base, "/")] = 0; /* "linear_forward/bf16" is linear_forward */
	int t = 0;
	while (t < MAX_TABLES && tables[t] && tables[t] != k)
		t++;
	if (t == MAX_TABLES)
		return;
	tables[t] = k;
	for (int i = 0; i < kops_count() && i < 64; i++)
		if (!strcmp(kops_op_name(i), base))
			tested[t][i] = true;
}

static bool was_tested(const struct kops *k, int op)
{
	for (int t = 0; t < MAX_TABLES && tables[t]; t++)
		if (tables[t] == k)
			return tested[t][op];
	return false;
}

static const char *last_missing = "";

/* an op the backends may leave NULL (ops.h's optional ops) */
static bool op_is_optional(const char *op)
{
	for (int i = 0; i < kops_count(); i++)
		if (!strcmp(kops_op_name(i), op))
			return kops_op_optional(i);
	return false;
}

/* Runs fn on both tables over the buffers tb[0..ntb) and compares the outputs
 * (and the scalar result when scal_name is set). has: the CUDA table has the op. */
static void run_test(const char *op, bool has, const char *label, runfn fn, const struct cfg *c,
		     const char *scal_name, double scal_tol)
{
	if (only && !strstr(op, only)) {
		ntb = 0;
		hfree_all();
		return;
	}
	if (!has && op_is_optional(op)) { /* reported once as a skip (skip_if_absent) */
		ntb = 0;
		hfree_all();
		return;
	}
	if (!has) { /* a table without the op: a BUG at start-up in the programs, a failure here */
		if (strcmp(op, last_missing)) {
			printf("not ok - %s: the %s table has no such op (NULL)\n", op, GPU->name);
			n_fail++;
			last_missing = op;
		}
		ntb = 0;
		hfree_all();
		return;
	}
	mark_tested(GPU, op);
	const struct kops *side[2] = { CPU, GPU };
	void *d[2][MAXB];
	double scal[2] = { 0, 0 }, tm[2];
	for (int s = 0; s < 2; s++) {
		for (int i = 0; i < ntb; i++) {
			d[s][i] = tb[i].bytes ? side[s]->alloc(tb[i].bytes) : NULL;
			if (tb[i].bytes && tb[i].host)
				side[s]->to_device(d[s][i], tb[i].host, tb[i].bytes);
		}
		fn(side[s], d[s], c, &scal[s]);
	}
	double maxe = 0; /* the largest error measured */
	bool bad_any = false;
	char detail[768];
	int dl = 0;
	detail[0] = 0;
	for (int i = 0; i < ntb; i++) {
		if (!tb[i].name || !tb[i].bytes)
			continue;
		size_t n = tb[i].bytes / sizeof(float);
		float *h0 = malloc(tb[i].bytes), *h1 = malloc(tb[i].bytes);
		if (!h0 || !h1) {
			fprintf(stderr, "parity: out of host memory\n");
			exit(2);
		}
		CPU->to_host(h0, d[0][i], tb[i].bytes);
		GPU->to_host(h1, d[1][i], tb[i].bytes);
		if (tb[i].raw) { /* bit for bit: the count of differing bytes */
			size_t nd = 0, first = 0;
			for (size_t j = tb[i].bytes; j-- > 0;)
				if (((unsigned char *)h0)[j] != ((unsigned char *)h1)[j]) {
					nd++;
					first = j;
				}
			bad_any |= nd != 0;
			if (nd)
				maxe = INFINITY;
			if (dl < (int)sizeof detail - 100)
				dl += snprintf(detail + dl, sizeof detail - (size_t)dl, "%s%s %s", dl ? ", " : "",
					       tb[i].name, nd ? "FAIL" : "bit-exact");
			if (nd && dl < (int)sizeof detail - 100)
				dl += snprintf(detail + dl, sizeof detail - (size_t)dl,
					       " [%zu of %zu bytes differ, the first at %zu: cpu %02x, gpu %02x]", nd,
					       tb[i].bytes, first, ((unsigned char *)h0)[first], ((unsigned char *)h1)[first]);
			free(h0);
			free(h1);
			continue;
		}
		long mis = 0;
		double e = relerr(h1, h0, n, tb[i].mask ? &mis : NULL);
		bool bad = !(e <= tb[i].tol) || mis;
		bad_any |= bad;
		if (e > maxe || isnan(e))
			maxe = e;
		if (dl < (int)sizeof detail - 100)
			dl += snprintf(detail + dl, sizeof detail - (size_t)dl, "%s%s %.2g (tol %.0g)%s",
				       dl ? ", " : "", tb[i].name, e, tb[i].tol, bad ? " FAIL" : "");
		if (mis && dl < (int)sizeof detail - 100)
			dl += snprintf(detail + dl, sizeof detail - (size_t)dl, " [dropout mask differs in %ld of %zu]",
				       mis, n);
		free(h0);
		free(h1);
	}
	if (scal_name) {
		double e = scal[0] == scal[1] ? 0
					      : fabs(scal[1] - scal[0]) / (fabs(scal[0]) > 1e-30 ? fabs(scal[0]) : 1e-30);
		bool bad = !(e <= scal_tol);
		bad_any |= bad;
		if (e > maxe || isnan(e))
			maxe = e;
		if (dl < (int)sizeof detail - 100)
			dl += snprintf(detail + dl, sizeof detail - (size_t)dl,
				       "%s%s %.2g (cpu %.10g, gpu %.10g, tol %.0g)%s", dl ? ", " : "", scal_name, e,
				       scal[0], scal[1], scal_tol, bad ? " FAIL" : "");
	}
	printf("%s - %s [%s] (max rel err %.2g)\n#   %s\n", bad_any ? "not ok" : "ok", op, label, maxe, detail);
	bad_any ? n_fail++ : n_pass++;
	fflush(stdout);

	/* timing: the comparison run was the warm-up */
	for (int s = 0; s < 2; s++) {
		void *any = NULL;
		for (int i = 0; i < ntb && !any; i++)
			any = d[s][i];
		float sink;
		double t0 = now();
		for (int r = 0; r < reps; r++)
			fn(side[s], d[s], c, &scal[s]);
		if (any) /* a blocking copy: waits for the device's queue */
			side[s]->to_host(&sink, any, sizeof sink);
		tm[s] = (now() - t0) * 1e3 / reps;
	}
	if (ntimings < (int)(sizeof timings / sizeof *timings)) {
		struct timing *t = &timings[ntimings++];
		snprintf(t->op, sizeof t->op, "%s", op);
		snprintf(t->label, sizeof t->label, "%s", label);
		t->cpu_ms = tm[0];
		t->gpu_ms = tm[1];
	}
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < ntb; i++)
			if (d[s][i])
				side[s]->free(d[s][i]);
	ntb = 0;
	hfree_all();
}

/* a fresh, reproducible stream for every config */
static void fresh(void) { rs = seed0 * 0x2545F4914F6CDD1Dull + ++test_no * 0x9E3779B97F4A7C15ull; }

#define FL(n) ((size_t)(n) * sizeof(float))
#define IN32(n) ((size_t)(n) * sizeof(int32_t))
#define HAS(f) (GPU->f != NULL)
static char lab[128];
#define LABEL(...) (snprintf(lab, sizeof lab, __VA_ARGS__), lab)

/* ================= memory ================= */
static void r_zero(const struct kops *k, void **d, const struct cfg *c, double *s) { k->zero(d[0], c->n); }

static void test_memory(void)
{
	/* round trip: to_device then to_host must give the bytes back */
	fresh();
	size_t n = 100003;
	float *x = rvec(n, 3), *y = hnew(FL(n));
	float *dx = GPU->alloc(FL(n));
	GPU->to_device(dx, x, FL(n));
	GPU->to_host(y, dx, FL(n));
	float *z = hnew(FL(n));
	float *dz = GPU->alloc(FL(n)); /* alloc zero-fills */
	GPU->to_host(z, dz, FL(n));
	GPU->free(dx);
	GPU->free(dz);
	bool ok1 = !memcmp(x, y, FL(n)), ok2 = true;
	for (size_t i = 0; i < n; i++)
		ok2 &= z[i] == 0;
	printf("%s - memory round trip [n=%zu] (to_device/to_host %s, alloc zero-filled %s)\n",
	       ok1 && ok2 ? "ok" : "not ok", n, ok1 ? "exact" : "DIFFERS", ok2 ? "yes" : "NO");
	ok1 &&ok2 ? n_pass++ : n_fail++;
	mark_tested(GPU, "alloc");
	mark_tested(GPU, "free");
	mark_tested(GPU, "to_device");
	mark_tested(GPU, "to_host");

	/* copy: device to device, a range inside a buffer; page-locked host
	 * memory (host_alloc: zero-filled) as the host side of the copies */
	float *hp = GPU->host_alloc(FL(n)), *hq = GPU->host_alloc(FL(n));
	float *da = GPU->alloc(FL(n)), *db = GPU->alloc(FL(n));
	bool ok3 = true;
	for (size_t i = 0; i < n; i++)
		ok3 &= hp[i] == 0;
	memcpy(hp, x, FL(n));
	GPU->to_device(da, hp, FL(n));
	GPU->copy(db, da, FL(n));
	GPU->copy(db + 7, da + 1000, FL(n - 2000)); /* a part, to another offset */
	GPU->to_host(hq, db, FL(n));
	bool ok4 = !memcmp(hq, x, FL(7)) && !memcmp(hq + 7, x + 1000, FL(n - 2000)) &&
		   !memcmp(hq + 7 + (n - 2000), x + 7 + (n - 2000), FL(2000 - 7));
	GPU->free(da);
	GPU->free(db);
	GPU->host_free(hp);
	GPU->host_free(hq);
	printf("%s - copy and page-locked host memory [n=%zu] (host_alloc zero-filled %s, copy %s)\n",
	       ok3 && ok4 ? "ok" : "not ok", n, ok3 ? "yes" : "NO", ok4 ? "exact" : "DIFFERS");
	ok3 &&ok4 ? n_pass++ : n_fail++;
	mark_tested(GPU, "copy");
	mark_tested(GPU, "host_alloc");
	mark_tested(GPU, "host_free");

	/* copy_rows: columns [5, 5+w) of a [rows, 37] matrix into a [rows, w+3]
	 * one at column 2, against the CPU table's copy of the same block */
	{
		size_t rows = 301, sc = 37, w = 11, dc = w + 3;
		float *hm = hnew(FL(rows * sc)), *got = hnew(FL(rows * dc)), *want = hnew(FL(rows * dc));
		for (size_t i = 0; i < rows * sc; i++)
			hm[i] = x[i % n];
		for (size_t i = 0; i < rows * dc; i++)
			got[i] = want[i] = -1.0f;
		float *dm = GPU->alloc(FL(rows * sc)), *dd = GPU->alloc(FL(rows * dc));
		GPU->to_device(dm, hm, FL(rows * sc));
		GPU->to_device(dd, got, FL(rows * dc));
		GPU->copy_rows(dd + 2, FL(dc), dm + 5, FL(sc), FL(w), rows);
		GPU->to_host(got, dd, FL(rows * dc));
		CPU->copy_rows(want + 2, FL(dc), hm + 5, FL(sc), FL(w), rows);
		bool ok5 = !memcmp(got, want, FL(rows * dc)) && want[2] == hm[5] && want[dc + 2] == hm[sc + 5];
		GPU->free(dm);
		GPU->free(dd);
		printf("%s - copy_rows: a column block at two pitches [%zu x %zu of %zu] (%s)\n", ok5 ? "ok" : "not ok",
		       rows, w, sc, ok5 ? "exact" : "DIFFERS");
		ok5 ? n_pass++ : n_fail++;
		mark_tested(GPU, "copy_rows");
	}
	hfree_all();

	size_t ns[] = { 37, 100003 };
	for (int i = 0; i < 2; i++) {
		fresh();
		struct cfg c = { .n = ns[i] };
		tb_out("x", rvec(c.n, 1), FL(c.n), TOL_EXACT);
		run_test("zero", HAS(zero), LABEL("n=%zu", c.n), r_zero, &c, NULL, 0);
	}
}

/* ================= linear ================= */
static void r_linf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->linear_forward(d[0], d[1], d[2], d[3], c->N, c->IC, c->OC);
}
static void r_linb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->linear_backward(d[0], d[1], d[2], d[3], d[4], d[5], c->N, c->IC, c->OC);
}

static void r_linf16(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->linear_forward_w16(d[0], d[1], d[2], d[3], c->N, c->IC, c->OC, (enum kops_round)c->kind);
}
static void r_linb16(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->linear_backward_w16(d[0], d[1], d[2], d[3], d[4], d[5], c->N, c->IC, c->OC, (enum kops_round)c->kind);
}

static float *rhalf(size_t n, float s, enum kops_round kind);

/* x as 16-bit words of kind (narrow on the CPU: the words the model keeps) */
static uint16_t *rwords(const float *x, size_t n, enum kops_round kind)
{
	uint16_t *w = hnew(n * sizeof *w);
	kops_cpu()->narrow(w, x, n, kind);
	return w;
}

/* linear_*_w16: the same GEMMs with the weight as 16-bit words; tol as the
 * table's fp32-weight tests. Inputs in.x, in.w are the fp32 values; the
 * words are narrow(in.w), so the references differ only there. */
static void linear_w16_cases(const char *opf, const char *opb, const struct cfg *c0, const float *x, const float *w,
			     const float *bias, const float *dout, float sout, float sdinp, float sdw, double tol,
			     const char *name)
{
	struct cfg c = *c0;
	size_t nw = (size_t)c.OC * c.IC;
	bool has_bias = bias != NULL;
	/* the arena's arrays end with each run_test: keep copies for both */
	float *keep[4] = { NULL, NULL, NULL, NULL };
	const float *src[4] = { x, w, bias, dout };
	size_t len[4] = { (size_t)c.N * c.IC, nw, has_bias ? (size_t)c.OC : 0, (size_t)c.N * c.OC };
	for (int i = 0; i < 4; i++)
		if (src[i]) {
			keep[i] = malloc(len[i] * sizeof(float));
			if (!keep[i])
				exit(2);
			memcpy(keep[i], src[i], len[i] * sizeof(float));
		}
	x = keep[0], w = keep[1], bias = keep[2], dout = keep[3];
	fresh();
	tb_out("out", rvec((size_t)c.N * c.OC, sout), FL(c.N * c.OC), tol);
	tb_in(x, FL(c.N * c.IC));
	tb_in(rwords(w, nw, (enum kops_round)c.kind), nw * sizeof(uint16_t));
	tb_in(bias, has_bias ? FL(c.OC) : 0);
	run_test(opf, HAS(linear_forward_w16),
		 LABEL("%s N=%d IC=%d OC=%d%s, %s words", name, c.N, c.IC, c.OC, has_bias ? " bias" : "",
		       c.kind == KOPS_ROUND_BF16 ? "bf16" : "fp16"),
		 r_linf16, &c, NULL, 0);
	fresh();
	bool nodinp = c.flags & F_NULL1;
	tb_out("dinp", nodinp ? NULL : rvec((size_t)c.N * c.IC, sdinp), nodinp ? 0 : FL(c.N * c.IC), tol);
	tb_out("dweight", rvec(nw, sdw), FL(nw), tol);
	tb_out("dbias", has_bias ? rvec(c.OC, 1) : NULL, has_bias ? FL(c.OC) : 0, TOL_RED);
	tb_in(dout, FL(c.N * c.OC));
	tb_in(x, FL(c.N * c.IC));
	tb_in(rwords(w, nw, (enum kops_round)c.kind), nw * sizeof(uint16_t));
	run_test(opb, HAS(linear_backward_w16),
		 LABEL("%s N=%d IC=%d OC=%d%s, %s words", name, c.N, c.IC, c.OC, nodinp ? " dinp=NULL" : "",
		       c.kind == KOPS_ROUND_BF16 ? "bf16" : "fp16"),
		 r_linb16, &c, NULL, 0);
	for (int i = 0; i < 4; i++)
		free(keep[i]);
}

static void test_linear(void)
{
	int cf[][4] = { /* N, IC, OC, flags */
			{ 37, 96, 100, F_BIAS }, { 37, 100, 96, 0 }, { 5, 515, 37, F_BIAS },
			{ 37, 96, 515, F_BIAS | F_NULL1 | F_NULL2 }, { 512, 768, 2304, F_BIAS } };
	int ncf = big ? 5 : 4;
	for (int i = 0; i < ncf; i++) {
		struct cfg c = { .N = cf[i][0], .IC = cf[i][1], .OC = cf[i][2], .flags = cf[i][3] };
		bool bias = c.flags & F_BIAS;
		fresh();
		tb_out("out", rvec((size_t)c.N * c.OC, 5), FL(c.N * c.OC), TOL_GEMM);
		tb_in(rvec((size_t)c.N * c.IC, 1), FL(c.N * c.IC));
		tb_in(rvec((size_t)c.OC * c.IC, 0.1f), FL(c.OC * c.IC));
		tb_in(bias ? rvec(c.OC, 1) : NULL, bias ? FL(c.OC) : 0);
		run_test("linear_forward", HAS(linear_forward),
			 LABEL("N=%d IC=%d OC=%d%s", c.N, c.IC, c.OC, bias ? " bias" : ""), r_linf, &c, NULL, 0);

		fresh();
		bool nodinp = c.flags & F_NULL1, nodbias = (c.flags & F_NULL2) || !bias;
		tb_out("dinp", nodinp ? NULL : rvec((size_t)c.N * c.IC, 7), nodinp ? 0 : FL(c.N * c.IC), TOL_GEMM);
		tb_out("dweight", rvec((size_t)c.OC * c.IC, 1), FL(c.OC * c.IC), TOL_GEMM);
		tb_out("dbias", nodbias ? NULL : rvec(c.OC, 1), nodbias ? 0 : FL(c.OC), TOL_RED);
		tb_in(rvec((size_t)c.N * c.OC, 1), FL(c.N * c.OC));
		tb_in(rvec((size_t)c.N * c.IC, 1), FL(c.N * c.IC));
		tb_in(rvec((size_t)c.OC * c.IC, 0.1f), FL(c.OC * c.IC));
		run_test("linear_backward", HAS(linear_backward),
			 LABEL("N=%d IC=%d OC=%d%s%s", c.N, c.IC, c.OC, nodinp ? " dinp=NULL" : "",
			       nodbias ? " dbias=NULL" : ""),
			 r_linb, &c, NULL, 0);
		if (i < 3) { /* the fp32 table widens 16-bit words exactly: fp32 GEMMs on both sides */
			c.kind = i == 1 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16;
			float *w = rhalf((size_t)c.OC * c.IC, 0.1f, (enum kops_round)c.kind);
			linear_w16_cases("linear_forward_w16", "linear_backward_w16", &c, rvec((size_t)c.N * c.IC, 1), w,
					 bias ? rvec(c.OC, 1) : NULL, rvec((size_t)c.N * c.OC, 1), 5, 7, 1, TOL_GEMM,
					 GPU->name);
		}
	}
}

/* ================= linear on bf16/fp16 operands (kops_cuda_half) =================
 * The half tables convert linear_forward/backward's operands to bf16/fp16 and
 * multiply them on the tensor cores with fp32 accumulation into fp32 outputs.
 * The inputs here are rounded to that format first (the CPU table's round, as
 * the model does in --bf16/--fp16), so the conversion is exact and every
 * product is exact in fp32 (8+8 or 11+11 significant bits): the two sides
 * differ only in the order of the fp32 sums.
 *
 * TOL_GEMM_HALF, relative to the output's largest value like every test
 * here (the rows of these random inputs are all of one size, so that is the
 * row's magnitude too): the CPU's fp32 sums are off from exact by about
 * 1e-6 of it at K = 2304, and a model of tensor cores that align each group
 * of products to the largest exponent and truncate (Fasi et al., 2021, on
 * V100/A100) stays under 5e-6 on these shapes. Real faults (a layout, a
 * lost bias or accumulation, the other half format) are 1e-3 and up.
 *
 * For bf16, inp is scaled by 2^20 and the weight by 2^-30 (powers of two:
 * the rounding and the relative errors are unchanged): values that an fp16
 * conversion would overflow or flush to zero, so a bf16 table that used fp16
 * fails. dbias goes through the same column sums as the fp32 table.
 * In --self and --perturb the table under test stands in for the half ones. */
#define TOL_GEMM_HALF 1e-5

static float *rhalf(size_t n, float s, enum kops_round kind)
{
	float *x = rvec(n, s), *y = hnew(n * sizeof *y);
	kops_cpu()->round(y, x, n, kind);
	return y;
}

/* The half-input table of a kind, or the table under test standing in for
 * it (--self, --perturb); NULL after a SKIP line naming op when there is none. */
static const struct kops *half_table(enum kops_round rk, bool stand_in, const struct kops *saved, const char *op)
{
	const char *why = NULL;
	const struct kops *h = stand_in ? saved : kops_cuda_half(rk, &why);
	if (!h) {
		printf("not ok - %s: no half-input table (%s)\n", op, why ? why : "?");
		n_fail++;
	}
	return h;
}

static void test_linear_half(bool stand_in)
{
	static const char *const opf[2] = { "linear_forward/bf16", "linear_forward/fp16" };
	static const char *const opb[2] = { "linear_backward/bf16", "linear_backward/fp16" };
	static const char *const opf16[2] = { "linear_forward_w16/bf16", "linear_forward_w16/fp16" };
	static const char *const opb16[2] = { "linear_backward_w16/bf16", "linear_backward_w16/fp16" };
	int cf[][4] = { /* N, IC, OC, flags */
			{ 37, 96, 515, F_BIAS }, { 5, 515, 37, 0 }, { 37, 96, 515, F_BIAS | F_NULL1 | F_NULL2 },
			{ 5, 515, 37, F_BIAS | F_NULL1 }, { 512, 768, 2304, F_BIAS } };
	int ncf = big ? 5 : 4;
	const struct kops *saved = GPU;
	for (int kind = KOPS_ROUND_BF16; kind <= KOPS_ROUND_FP16; kind++) {
		enum kops_round rk = (enum kops_round)kind;
		const struct kops *h = half_table(rk, stand_in, saved, opf[kind]);
		if (!h)
			continue;
		GPU = h; /* run_test and HAS() use GPU */
		float sx = rk == KOPS_ROUND_BF16 ? 0x1p20f : 1.0f, sw = rk == KOPS_ROUND_BF16 ? 0x1p-30f : 1.0f;
		for (int i = 0; i < ncf; i++) {
			struct cfg c = { .N = cf[i][0], .IC = cf[i][1], .OC = cf[i][2], .flags = cf[i][3] };
			bool bias = c.flags & F_BIAS;
			fresh();
			tb_out("out", rvec((size_t)c.N * c.OC, 5 * sx * sw), FL(c.N * c.OC), TOL_GEMM_HALF);
			tb_in(rhalf((size_t)c.N * c.IC, sx, rk), FL(c.N * c.IC));
			tb_in(rhalf((size_t)c.OC * c.IC, 0.1f * sw, rk), FL(c.OC * c.IC));
			tb_in(bias ? rhalf(c.OC, sx * sw, rk) : NULL, bias ? FL(c.OC) : 0);
			run_test(opf[kind], HAS(linear_forward),
				 LABEL("%s N=%d IC=%d OC=%d%s", h->name, c.N, c.IC, c.OC, bias ? " bias" : ""), r_linf,
				 &c, NULL, 0);

			fresh();
			bool nodinp = c.flags & F_NULL1, nodbias = (c.flags & F_NULL2) || !bias;
			tb_out("dinp", nodinp ? NULL : rvec((size_t)c.N * c.IC, 7 * sw), nodinp ? 0 : FL(c.N * c.IC),
			       TOL_GEMM_HALF);
			tb_out("dweight", rvec((size_t)c.OC * c.IC, sx), FL(c.OC * c.IC), TOL_GEMM_HALF);
			tb_out("dbias", nodbias ? NULL : rvec(c.OC, 1), nodbias ? 0 : FL(c.OC), TOL_RED);
			tb_in(rhalf((size_t)c.N * c.OC, 1, rk), FL(c.N * c.OC));
			tb_in(rhalf((size_t)c.N * c.IC, sx, rk), FL(c.N * c.IC));
			tb_in(rhalf((size_t)c.OC * c.IC, 0.1f * sw, rk), FL(c.OC * c.IC));
			run_test(opb[kind], HAS(linear_backward),
				 LABEL("%s N=%d IC=%d OC=%d%s%s", h->name, c.N, c.IC, c.OC, nodinp ? " dinp=NULL" : "",
				       nodbias ? " dbias=NULL" : ""),
				 r_linb, &c, NULL, 0);
			/* the table's own words: multiplied as they are, no conversion */
			c.kind = kind;
			linear_w16_cases(opf16[kind], opb16[kind], &c, rhalf((size_t)c.N * c.IC, sx, rk),
					 rhalf((size_t)c.OC * c.IC, 0.1f * sw, rk), bias ? rhalf(c.OC, sx * sw, rk) : NULL,
					 rhalf((size_t)c.N * c.OC, 1, rk), 5 * sx * sw, 7 * sw, sx, TOL_GEMM_HALF, h->name);
		}
	}
	GPU = saved;
}

/* ================= embedding ================= */
static void r_embf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->embedding_forward(d[0], d[1], d[2], d[3], d[4], c->N, c->C);
}
static void r_embb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->embedding_backward(d[0], d[1], d[2], d[3], d[4], c->N, c->C);
}

static void r_embf16(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->embedding_forward_w16(d[0], d[1], d[2], d[3], d[4], c->N, c->C, (enum kops_round)c->kind);
}

static void test_embedding(void)
{
	int cf[][4] = { /* N, C, V, flags */
			{ 37, 96, 515, F_WPE }, { 37, 100, 515, 0 }, { 200, 100, 7, F_WPE },
			{ 37, 96, 515, F_WPE | F_NULL1 } };
	for (int i = 0; i < 4; i++) {
		struct cfg c = { .N = cf[i][0], .C = cf[i][1], .V = cf[i][2], .flags = cf[i][3] };
		bool wpe = c.flags & F_WPE;
		int P = 64; /* positions table rows */
		fresh();
		int32_t *tok = rtok(c.N, c.V, 0.15), *pos = hnew(IN32(c.N));
		for (int n = 0; n < c.N; n++)
			pos[n] = rint_below(P);
		if (!(c.flags & F_NULL1)) {
			tb_out("out", rvec((size_t)c.N * c.C, 9), FL(c.N * c.C), TOL_EW);
			tb_in(tok, IN32(c.N));
			tb_in(wpe ? pos : NULL, wpe ? IN32(c.N) : 0);
			tb_in(rvec((size_t)c.V * c.C, 1), FL(c.V * c.C));
			tb_in(wpe ? rvec((size_t)P * c.C, 1) : NULL, wpe ? FL(P * c.C) : 0);
			run_test("embedding_forward", HAS(embedding_forward),
				 LABEL("N=%d C=%d V=%d%s", c.N, c.C, c.V, wpe ? " wpe" : ""), r_embf, &c, NULL, 0);
			/* the table as 16-bit words, widened as read: exact, as embedding_forward on the widened table */
			fresh();
			tok = rtok(c.N, c.V, 0.15);
			pos = hnew(IN32(c.N));
			for (int n = 0; n < c.N; n++)
				pos[n] = rint_below(P);
			c.kind = i == 1 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16;
			tb_out("out", rvec((size_t)c.N * c.C, 9), FL(c.N * c.C), TOL_EXACT);
			tb_in(tok, IN32(c.N));
			tb_in(wpe ? pos : NULL, wpe ? IN32(c.N) : 0);
			tb_in(rwords(rvec((size_t)c.V * c.C, 1), (size_t)c.V * c.C, (enum kops_round)c.kind),
			      (size_t)c.V * c.C * sizeof(uint16_t));
			tb_in(wpe ? rvec((size_t)P * c.C, 1) : NULL, wpe ? FL(P * c.C) : 0);
			run_test("embedding_forward_w16", HAS(embedding_forward_w16),
				 LABEL("N=%d C=%d V=%d%s, %s words", c.N, c.C, c.V, wpe ? " wpe" : "",
				       c.kind == KOPS_ROUND_BF16 ? "bf16" : "fp16"),
				 r_embf16, &c, NULL, 0);
			fresh();
			tok = rtok(c.N, c.V, 0.15);
			pos = hnew(IN32(c.N));
			for (int n = 0; n < c.N; n++)
				pos[n] = rint_below(P);
		}
		bool nodwte = c.flags & F_NULL1;
		tb_out("dwte", nodwte ? NULL : rvec((size_t)c.V * c.C, 1), nodwte ? 0 : FL(c.V * c.C), TOL_EW);
		tb_out("dwpe", wpe ? rvec((size_t)P * c.C, 1) : NULL, wpe ? FL(P * c.C) : 0, TOL_EW);
		tb_in(rvec((size_t)c.N * c.C, 1), FL(c.N * c.C));
		tb_in(tok, IN32(c.N));
		tb_in(wpe ? pos : NULL, wpe ? IN32(c.N) : 0);
		run_test("embedding_backward", HAS(embedding_backward),
			 LABEL("N=%d C=%d V=%d%s%s", c.N, c.C, c.V, wpe ? " wpe" : "", nodwte ? " dwte=NULL" : ""),
			 r_embb, &c, NULL, 0);
	}
}

/* ================= layernorm, rmsnorm ================= */
static void r_lnf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->layernorm_forward(d[0], d[1], d[2], d[3], d[4], d[5], c->N, c->C, c->eps);
}
static void r_lnb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->layernorm_backward(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], c->N, c->C);
}
static void r_rmsf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->rmsnorm_forward(d[0], d[1], d[2], d[3], c->N, c->C, c->eps);
}
static void r_rmsb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->rmsnorm_backward(d[0], d[1], d[2], d[3], d[4], d[5], c->N, c->C);
}

static void test_norms(void)
{
	int cf[][3] = { { 37, 96, F_BIAS }, { 37, 100, 0 }, { 3, 2050, F_BIAS }, { 4096, 1024, F_BIAS } };
	int ncf = big ? 4 : 3;
	for (int i = 0; i < ncf; i++) {
		struct cfg c = { .N = cf[i][0], .C = cf[i][1], .flags = cf[i][2], .eps = 1e-5f };
		size_t NC = (size_t)c.N * c.C;
		bool b = c.flags & F_BIAS;
		/* inputs with an offset, so the mean matters */
		fresh();
		float *x = rvec(NC, 2);
		for (size_t j = 0; j < NC; j++)
			x[j] += 0.5f;
		float *w = rpos(c.C, 0.5f, 1.5f), *bb = b ? rvec(c.C, 0.5f) : NULL;
		tb_out("out", rvec(NC, 3), FL(NC), TOL_RED);
		tb_out("mean", rvec(c.N, 3), FL(c.N), TOL_RED);
		tb_out("rstd", rvec(c.N, 3), FL(c.N), TOL_RED);
		tb_in(x, FL(NC));
		tb_in(w, FL(c.C));
		tb_in(bb, b ? FL(c.C) : 0);
		run_test("layernorm_forward", HAS(layernorm_forward),
			 LABEL("N=%d C=%d%s", c.N, c.C, b ? " bias" : ""), r_lnf, &c, NULL, 0);

		fresh();
		x = rvec(NC, 2);
		w = rpos(c.C, 0.5f, 1.5f);
		float *mean = hnew(FL(c.N)), *rstd = hnew(FL(c.N)), *o = hnew(FL(NC));
		kops_cpu()->layernorm_forward(o, mean, rstd, x, w, NULL, c.N, c.C, c.eps);
		tb_out("dinp", rvec(NC, 5), FL(NC), TOL_RED);
		tb_out("dw", rvec(c.C, 1), FL(c.C), TOL_RED);
		tb_out("db", b ? rvec(c.C, 1) : NULL, b ? FL(c.C) : 0, TOL_RED);
		tb_in(rvec(NC, 1), FL(NC));
		tb_in(x, FL(NC));
		tb_in(w, FL(c.C));
		tb_in(mean, FL(c.N));
		tb_in(rstd, FL(c.N));
		run_test("layernorm_backward", HAS(layernorm_backward),
			 LABEL("N=%d C=%d%s", c.N, c.C, b ? " bias" : " db=NULL"), r_lnb, &c, NULL, 0);

		fresh();
		c.eps = 1e-6f;
		x = rvec(NC, 2);
		w = rpos(c.C, 0.5f, 1.5f);
		tb_out("out", rvec(NC, 3), FL(NC), TOL_RED);
		tb_out("rstd", rvec(c.N, 3), FL(c.N), TOL_RED);
		tb_in(x, FL(NC));
		tb_in(w, FL(c.C));
		run_test("rmsnorm_forward", HAS(rmsnorm_forward), LABEL("N=%d C=%d", c.N, c.C), r_rmsf, &c, NULL, 0);

		fresh();
		x = rvec(NC, 2);
		w = rpos(c.C, 0.5f, 1.5f);
		rstd = hnew(FL(c.N));
		o = hnew(FL(NC));
		kops_cpu()->rmsnorm_forward(o, rstd, x, w, c.N, c.C, c.eps);
		tb_out("dinp", rvec(NC, 5), FL(NC), TOL_RED);
		tb_out("dw", rvec(c.C, 1), FL(c.C), TOL_RED);
		tb_in(rvec(NC, 1), FL(NC));
		tb_in(x, FL(NC));
		tb_in(w, FL(c.C));
		tb_in(rstd, FL(c.N));
		run_test("rmsnorm_backward", HAS(rmsnorm_backward), LABEL("N=%d C=%d", c.N, c.C), r_rmsb, &c, NULL, 0);
	}
}

/* ================= gelu, swiglu ================= */
static void r_gf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->gelu_forward(d[0], (c->flags & F_ALIAS) ? d[0] : d[1], c->n, (enum kops_gelu)c->kind);
}
static void r_gb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->gelu_backward(d[0], (c->flags & F_ALIAS) ? d[0] : d[1], d[2], c->n, (enum kops_gelu)c->kind);
}
static void r_sf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->swiglu_forward(d[0], d[1], c->N, c->F);
}
static void r_sb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->swiglu_backward(d[0], d[1], d[2], c->N, c->F);
}

static void test_gelu_swiglu(void)
{
	size_t ns[] = { 37 * 100 + 3, 1 << 22 };
	const char *kn[] = { "tanh", "erf" };
	for (int kind = 0; kind < 2; kind++)
		for (int i = 0; i < (big ? 2 : 1); i++)
			for (int alias = 0; alias < 2; alias++) {
				if (alias && i)
					continue;
				struct cfg c = { .n = ns[i], .kind = kind, .flags = alias ? F_ALIAS : 0 };
				fresh();
				float *x = rvec(c.n, 6);
				if (alias) {
					tb_out("out", x, FL(c.n), TOL_EW);
					tb_in(NULL, 0);
				} else {
					tb_out("out", rvec(c.n, 1), FL(c.n), TOL_EW);
					tb_in(x, FL(c.n));
				}
				run_test("gelu_forward", HAS(gelu_forward),
					 LABEL("%s n=%zu%s", kn[kind], c.n, alias ? " out=inp" : ""), r_gf, &c, NULL, 0);
				fresh();
				float *dout = rvec(c.n, 1);
				if (alias) {
					tb_out("dinp", dout, FL(c.n), TOL_EW);
					tb_in(NULL, 0);
				} else {
					tb_out("dinp", rvec(c.n, 1), FL(c.n), TOL_EW);
					tb_in(dout, FL(c.n));
				}
				tb_in(rvec(c.n, 6), FL(c.n));
				run_test("gelu_backward", HAS(gelu_backward),
					 LABEL("%s n=%zu%s", kn[kind], c.n, alias ? " dinp=dout" : ""), r_gb, &c, NULL, 0);
			}
	int cf[][2] = { { 37, 100 }, { 37, 96 }, { 1, 515 }, { 2048, 2816 } };
	for (int i = 0; i < (big ? 4 : 3); i++) {
		struct cfg c = { .N = cf[i][0], .F = cf[i][1] };
		size_t NF = (size_t)c.N * c.F;
		fresh();
		tb_out("out", rvec(NF, 1), FL(NF), TOL_EW);
		tb_in(rvec(2 * NF, 6), FL(2 * NF));
		run_test("swiglu_forward", HAS(swiglu_forward), LABEL("N=%d F=%d", c.N, c.F), r_sf, &c, NULL, 0);
		fresh();
		tb_out("dinp", rvec(2 * NF, 1), FL(2 * NF), TOL_EW);
		tb_in(rvec(NF, 1), FL(NF));
		tb_in(rvec(2 * NF, 6), FL(2 * NF));
		run_test("swiglu_backward", HAS(swiglu_backward), LABEL("N=%d F=%d", c.N, c.F), r_sb, &c, NULL, 0);
	}
}

/* ================= dropout ================= */
static void r_daf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->dropout_add_forward(d[0], (c->flags & F_ALIAS) ? d[0] : d[1], d[2], c->n, c->p, c->seed, c->off);
}
static void r_db(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->dropout_backward(d[0], (c->flags & F_ALIAS) ? d[0] : d[1], c->n, c->p, c->seed, c->off);
}

static void test_dropout(void)
{
	/* residual 0 makes the mask visible in the output's zeros */
	struct {
		size_t n;
		float p;
		uint64_t off;
		int flags, zero_res;
	} cf[] = { { 37 * 96 + 5, 0.0f, 0, 0, 0 },
		   { 37 * 96 + 5, 0.1f, 3, 0, 1 },
		   { 37 * 96 + 5, 0.1f, 12345, 0, 0 },
		   { 1001, 0.5f, (1ull << 32) - 7, F_ALIAS, 1 }, /* the counter crosses 2^32 */
		   { 1001, 0.1f, 5ull << 40, F_ALIAS, 0 },
		   { 1u << 22, 0.1f, 77, 0, 0 } };
	int ncf = big ? 6 : 5;
	for (int i = 0; i < ncf; i++) {
		struct cfg c = { .n = cf[i].n, .p = cf[i].p, .off = cf[i].off, .flags = cf[i].flags,
				 .seed = 0x1234567890abcdefull + (uint64_t)i };
		bool alias = c.flags & F_ALIAS;
		fresh();
		float *res = cf[i].zero_res ? hnew(FL(c.n)) : rvec(c.n, 1), *x = rpos(c.n, 0.5f, 2.0f);
		if (alias) {
			tb_mask("out", res, FL(c.n), TOL_EW);
			tb_in(NULL, 0);
		} else {
			tb_mask("out", rvec(c.n, 1), FL(c.n), TOL_EW);
			tb_in(res, FL(c.n));
		}
		tb_in(x, FL(c.n));
		run_test("dropout_add_forward", HAS(dropout_add_forward),
			 LABEL("n=%zu p=%g offset=%llu%s%s", c.n, c.p, (unsigned long long)c.off,
			       cf[i].zero_res ? " residual=0" : "", alias ? " out=residual" : ""),
			 r_daf, &c, NULL, 0);
		fresh();
		float *dout = rpos(c.n, 0.5f, 2.0f);
		if (alias) {
			tb_mask("dx", dout, FL(c.n), TOL_EW);
			tb_in(NULL, 0);
		} else {
			tb_mask("dx", rvec(c.n, 1), FL(c.n), TOL_EW);
			tb_in(dout, FL(c.n));
		}
		run_test("dropout_backward", HAS(dropout_backward),
			 LABEL("n=%zu p=%g offset=%llu%s", c.n, c.p, (unsigned long long)c.off, alias ? " dx=dout" : ""),
			 r_db, &c, NULL, 0);
	}
}

/* ================= vector helpers ================= */
static void r_add(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->add(d[0], (c->flags & F_ALIAS) ? d[0] : d[1], d[2], c->n);
}
static void r_scale(const struct kops *k, void **d, const struct cfg *c, double *s) { k->scale(d[0], c->s, c->n); }
static void r_sumsq(const struct kops *k, void **d, const struct cfg *c, double *s) { *s = k->sumsq(d[0], c->n); }
static void r_nonf(const struct kops *k, void **d, const struct cfg *c, double *s) { *s = k->nonfinite(d[0], c->n); }
static void r_round(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->round(d[0], d[1], c->n, (enum kops_round)c->kind);
}
/* narrow into 16 bits and widen back: every bit of the 16 shows in the floats */
static void r_narrow(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->narrow(d[2], d[1], c->n, (enum kops_round)c->kind);
	k->widen(d[0], d[2], c->n, (enum kops_round)c->kind);
}
static void r_widen(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->widen(d[0], d[1], c->n, (enum kops_round)c->kind);
}

static void test_vector(void)
{
	size_t ns[] = { 37, 37 * 100 + 3, 1000003 };
	for (int i = 0; i < 3; i++) {
		struct cfg c = { .n = ns[i], .flags = i == 1 ? F_ALIAS : 0, .s = 0.37f };
		fresh();
		float *a = rvec(c.n, 2);
		if (c.flags & F_ALIAS) {
			tb_out("out", a, FL(c.n), TOL_EW);
			tb_in(NULL, 0);
		} else {
			tb_out("out", rvec(c.n, 1), FL(c.n), TOL_EW);
			tb_in(a, FL(c.n));
		}
		tb_in(rvec(c.n, 2), FL(c.n));
		run_test("add", HAS(add), LABEL("n=%zu%s", c.n, (c.flags & F_ALIAS) ? " out=a" : ""), r_add, &c, NULL, 0);
		fresh();
		tb_out("x", rvec(c.n, 2), FL(c.n), TOL_EW);
		run_test("scale", HAS(scale), LABEL("n=%zu s=%g", c.n, c.s), r_scale, &c, NULL, 0);
		fresh();
		tb_in(rvec(c.n, 2), FL(c.n));
		run_test("sumsq", HAS(sumsq), LABEL("n=%zu", c.n), r_sumsq, &c, "sumsq", TOL_RED);
	}
	/* nonfinite: all finite, +inf in the tail, NaN in the middle, -inf first */
	struct {
		size_t n, at;
		float v;
		const char *what;
	} nf[] = { { 100003, 0, 0, "all finite" },   { 100003, 100002, INFINITY, "inf at n-1" },
		   { 100003, 50001, NAN, "NaN at n/2" }, { 37, 0, -INFINITY, "-inf at 0" },
		   { 37, 36, INFINITY, "inf at n-1" },   { 1, 0, 3.0e38f, "finite max" } };
	for (int i = 0; i < 6; i++) {
		struct cfg c = { .n = nf[i].n };
		fresh();
		float *x = rvec(c.n, 3.0e38f);
		if (nf[i].v != 0)
			x[nf[i].at] = nf[i].v;
		tb_in(x, FL(c.n));
		run_test("nonfinite", HAS(nonfinite), LABEL("n=%zu %s", c.n, nf[i].what), r_nonf, &c, "result", TOL_EXACT);
	}
	/* round: many magnitudes, ties, fp16 overflow and subnormals, infinities */
	const char *rn[] = { "bf16", "fp16" };
	for (int kind = 0; kind < 2; kind++) {
		struct cfg c = { .n = 37 * 100 + 3, .kind = kind };
		fresh();
		float *x = malloc(FL(c.n)); /* outlives the round test: the narrow one reads it too */
		if (!x) {
			fprintf(stderr, "parity: out of host memory\n");
			exit(2);
		}
		for (size_t j = 0; j < c.n; j++) {
			double m = 2 * runif() - 1;
			int e = rint_below(60) - 40; /* 2^-40 .. 2^19 */
			x[j] = (float)ldexp(m, e);
		}
		float sp[] = { 1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-23f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f,
			       1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, 70000.0f, -65520.0f, 6e-8f,
			       3e-8f, 1e-7f, 5.96e-8f, 2.98e-8f, 1e-40f, -0.0f, 0.0f, INFINITY, -INFINITY,
			       3.4e38f, -3.39e38f, 0x1.fffffep127f };
		for (size_t j = 0; j < sizeof sp / sizeof *sp; j++)
			x[j * 7] = sp[j];
		tb_out("out", rvec(c.n, 1), FL(c.n), TOL_EXACT);
		tb_in(x, FL(c.n));
		run_test("round", HAS(round), LABEL("%s n=%zu", rn[kind], c.n), r_round, &c, NULL, 0);
		/* the same values through 16-bit storage */
		tb_out("out", rvec(c.n, 1), FL(c.n), TOL_EXACT);
		tb_in(x, FL(c.n));
		tb_in(NULL, c.n * sizeof(uint16_t));
		run_test("narrow", HAS(narrow) && HAS(widen), LABEL("%s n=%zu", rn[kind], c.n), r_narrow, &c, NULL, 0);
		free(x);
		/* widen on every one of the 65536 patterns */
		struct cfg w = { .n = 65536, .kind = kind };
		uint16_t *pat = hnew(w.n * sizeof(uint16_t));
		for (size_t j = 0; j < w.n; j++)
			pat[j] = (uint16_t)j;
		tb_out("out", rvec(w.n, 1), FL(w.n), TOL_EXACT);
		tb_in(pat, w.n * sizeof(uint16_t));
		run_test("widen", HAS(widen), LABEL("%s all 65536", rn[kind]), r_widen, &w, NULL, 0);
	}
}

/* ================= mixture of experts: combine ================= */
/* N tokens with up to k rows each (some dropped, some tokens with none), the
 * rows in expert-major order as the router makes them. */
static void r_combine_f(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->moe_combine_forward(d[0], d[1], d[2], d[3], d[4], c->N, c->C);
}
static void r_combine_b(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->moe_combine_backward(d[0], d[1], d[2], d[3], d[4], d[5], c->V, c->C);
}

static void test_moe_combine(void)
{
	int Ns[] = { 37, 300 }, Cs[] = { 96, 515 };
	for (int i = 0; i < 2; i++) {
		int N = Ns[i], C = Cs[i], kk = 2, E = 5;
		int32_t *tok = hnew((size_t)N * kk * sizeof(int32_t)), *rows = hnew((size_t)N * kk * sizeof(int32_t));
		int32_t *rowptr = hnew(((size_t)N + 1) * sizeof(int32_t));
		int *slot_row = hnew((size_t)N * kk * sizeof(int)), *slot_e = hnew((size_t)N * kk * sizeof(int));
		for (int t = 0; t < N; t++) {
			int e0 = rint_below(E), e1 = (e0 + 1 + rint_below(E - 1)) % E;
			slot_e[t * kk] = rint_below(6) ? e0 : -1; /* dropped slots */
			slot_e[t * kk + 1] = rint_below(6) ? e1 : -1;
		}
		int R = 0;
		for (int e = 0; e < E; e++)
			for (int t = 0; t < N; t++)
				for (int j = 0; j < kk; j++)
					if (slot_e[t * kk + j] == e) {
						tok[R] = t;
						slot_row[t * kk + j] = R++;
					}
		int n = 0;
		for (int t = 0; t < N; t++) {
			rowptr[t] = n;
			for (int j = 0; j < kk; j++)
				if (slot_e[t * kk + j] >= 0)
					rows[n++] = slot_row[t * kk + j];
		}
		rowptr[N] = n;
		struct cfg c = { .N = N, .C = C, .V = R }; /* V: the row count */
		/* the forward's case, then the backward's: run_test frees the host
		 * buffers of its case (hnew's arena), so the backward's are copies
		 * in plain malloc'd memory */
		fresh();
		float *y = rvec((size_t)R * C, 1), *w = rvec((size_t)R, 1);
		tb_out("out", rvec((size_t)N * C, 1), FL((size_t)N * C), TOL_EW);
		tb_in(y, FL((size_t)R * C));
		tb_in(w, FL(R));
		tb_in(rowptr, ((size_t)N + 1) * sizeof(int32_t));
		tb_in(rows, (size_t)R * sizeof(int32_t));
		size_t nb = FL((size_t)R * C) + FL(R) + (size_t)R * sizeof(int32_t) + FL((size_t)R * C) + FL(R) +
			    FL((size_t)N * C);
		char *keep = malloc(nb + 1);
		if (!keep) {
			fprintf(stderr, "parity: out of host memory\n");
			exit(2);
		}
		float *y2 = (float *)keep, *w2 = y2 + (size_t)R * C, *dy0 = w2 + R + R, *dw0 = dy0 + (size_t)R * C;
		float *dout = dw0 + R;
		int32_t *tok2 = (int32_t *)(w2 + R);
		memcpy(y2, y, FL((size_t)R * C));
		memcpy(w2, w, FL(R));
		memcpy(tok2, tok, (size_t)R * sizeof(int32_t));
		float *r1 = rvec((size_t)R * C, 1), *r2 = rvec((size_t)R, 1), *r3 = rvec((size_t)N * C, 1);
		memcpy(dy0, r1, FL((size_t)R * C));
		memcpy(dw0, r2, FL(R));
		memcpy(dout, r3, FL((size_t)N * C));
		run_test("moe_combine_forward", HAS(moe_combine_forward), LABEL("N=%d C=%d R=%d", N, C, R), r_combine_f,
			 &c, NULL, 0);
		tb_out("dy", dy0, FL((size_t)R * C), TOL_EW);
		tb_out("dw", dw0, FL(R), TOL_RED);
		tb_in(dout, FL((size_t)N * C));
		tb_in(y2, FL((size_t)R * C));
		tb_in(w2, FL(R));
		tb_in(tok2, (size_t)R * sizeof(int32_t));
		run_test("moe_combine_backward", HAS(moe_combine_backward), LABEL("N=%d C=%d R=%d", N, C, R),
			 r_combine_b, &c, NULL, 0);
		free(keep);
	}
}

/* ================= whole-model ops (the optimizer's segments) ================= */
/* Segments like a registry's: tensors of assorted sizes (some larger than a
 * sum chunk of 65536), decay on the 2-D ones, one gap (another shard), a
 * shard starting at mv_base. */
static struct kops_seg segs_tab[8];
static int nsegs_tab;
static size_t segs_base;

static void r_sumsq_segs(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	*s = k->sumsq_segs(d[0], segs_tab, nsegs_tab);
}
static void r_adamw_segs(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	for (int t = 1; t <= c->steps; t++)
		k->adamw_segs(d[0], (const float *)d[3] + (size_t)(t - 1) * c->n, d[1], d[2], segs_base, segs_tab,
			      nsegs_tab, 1e-3f, 0.9f, 0.95f, 1e-8f, c->s, t);
}

/* adamw_segs_lp: the segments above with the states in a mix of formats
 * (c->kind indexes lp_mixes), the model's bf16 weights written or not; the
 * 16-bit states and weights are compared through widen, the fp16 scales
 * (reset to 1 at each call) as an output too. Buffers: 0-2 p, m, v in
 * their formats, 3 the gradients, 4 the 16-bit weights, 5-7 p, m, v as
 * fp32, 8 the weights as fp32, 9 the scales. */
static const struct {
	enum kops_dtype p, m, v;
	bool w16;
	const char *name;
} lp_mixes[] = {
	{ KOPS_F32, KOPS_F32, KOPS_F32, false, "fp32 states" },
	{ KOPS_F32, KOPS_BF16, KOPS_BF16, true, "bf16 moments, bf16 weights out" },
	{ KOPS_FP16, KOPS_FP16, KOPS_FP16, true, "fp16 scaled states, bf16 weights out" },
	{ KOPS_F32, KOPS_FP16, KOPS_BF16, false, "fp16 m, bf16 v" },
};

static void lp_as_f32(const struct kops *k, float *out, const void *x, enum kops_dtype t, size_t n)
{
	if (t == KOPS_F32)
		k->copy(out, x, n * sizeof(float));
	else
		k->widen(out, x, n, t == KOPS_FP16 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16);
}

static void r_adamw_segs_lp(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	float scale[3 * 8];
	for (int i = 0; i < 3 * nsegs_tab; i++)
		scale[i] = 1.0f;
	int mix = c->kind;
	struct kops_adamw_lp st = { d[0], d[1], d[2], lp_mixes[mix].p, lp_mixes[mix].m, lp_mixes[mix].v, scale,
				    lp_mixes[mix].w16 ? d[4] : NULL, KOPS_ROUND_BF16 };
	for (int t = 1; t <= c->steps; t++)
		k->adamw_segs_lp(&st, (const float *)d[3] + (size_t)(t - 1) * c->n, segs_base, segs_tab, nsegs_tab,
				 1e-3f, 0.9f, 0.95f, 1e-8f, c->s, t);
	size_t n = c->n - segs_base;
	lp_as_f32(k, d[5], d[0], st.p_type, n);
	lp_as_f32(k, d[6], d[1], st.m_type, n);
	lp_as_f32(k, d[7], d[2], st.v_type, n);
	k->widen(d[8], d[4], c->n, KOPS_ROUND_BF16);
	k->to_device(d[9], scale, FL(3 * nsegs_tab));
}

static void test_segs_lp(const struct cfg *c0)
{
	for (int mix = 0; mix < (int)(sizeof(lp_mixes) / sizeof(lp_mixes[0])); mix++) {
		struct cfg c = *c0;
		c.kind = mix;
		size_t n = c.n - segs_base, sz = lp_mixes[mix].p == KOPS_F32 ? 4 : 2;
		fresh();
		float *p0 = rvec(n, 1);
		void *p = p0;
		if (sz == 2) { /* the initial main weights in their format */
			p = hnew(n * sizeof(uint16_t));
			kops_cpu()->narrow(p, p0, n, KOPS_ROUND_FP16);
		}
		tb_in(p, n * sz);
		tb_in(NULL, n * (lp_mixes[mix].m == KOPS_F32 ? 4 : 2));
		tb_in(NULL, n * (lp_mixes[mix].v == KOPS_F32 ? 4 : 2));
		tb_in(rvec(c.n * (size_t)c.steps, 0.01f), FL(c.n * (size_t)c.steps));
		tb_in(NULL, c.n * sizeof(uint16_t));
		tb_out("p", NULL, FL(n), TOL_ADAM);
		tb_out("m", NULL, FL(n), TOL_ADAM);
		tb_out("v", NULL, FL(n), TOL_ADAM);
		tb_out("w16", NULL, FL(c.n), TOL_ADAM);
		tb_out("scales", NULL, FL(3 * nsegs_tab), TOL_ADAM);
		run_test("adamw_segs_lp", HAS(adamw_segs_lp),
			 LABEL("%s, %d segments n=%zu steps=%d", lp_mixes[mix].name, nsegs_tab, c.n, c.steps),
			 r_adamw_segs_lp, &c, NULL, 0);
	}
}

static void test_segs(void)
{
	size_t lens[] = { 768, 3, 200000, 65536, 1, 65537, 4096 };
	segs_base = 5;
	size_t at = segs_base;
	nsegs_tab = 0;
	for (int i = 0; i < 7; i++) {
		if (i == 4)
			at += 11; /* a gap: elements no segment covers stay as they were */
		segs_tab[nsegs_tab++] = (struct kops_seg){ at, lens[i], lens[i] >= 768 };
		at += lens[i];
	}
	struct cfg c = { .n = at, .steps = 3, .s = 0.1f };
	fresh();
	tb_out("p", rvec(c.n - segs_base, 1), FL(c.n - segs_base), TOL_ADAM);
	tb_out("m", NULL, FL(c.n - segs_base), TOL_ADAM);
	tb_out("v", NULL, FL(c.n - segs_base), TOL_ADAM);
	tb_in(rvec(c.n * (size_t)c.steps, 0.01f), FL(c.n * (size_t)c.steps));
	run_test("adamw_segs", HAS(adamw_segs), LABEL("%d segments n=%zu steps=%d wd=%g", nsegs_tab, c.n, c.steps, c.s),
		 r_adamw_segs, &c, NULL, 0);
	fresh();
	tb_in(rvec(c.n, 2), FL(c.n));
	run_test("sumsq_segs", HAS(sumsq_segs), LABEL("%d segments n=%zu", nsegs_tab, c.n), r_sumsq_segs, &c, "sumsq",
		 TOL_RED);
	test_segs_lp(&c);
}

/* ================= adamw ================= */
static void r_adamw(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	for (int t = 1; t <= c->steps; t++)
		k->adamw(d[0], (const float *)d[3] + (size_t)(t - 1) * c->n, d[1], d[2], c->n, 1e-3f, 0.9f,
			 0.95f, 1e-8f, c->s, t);
}

static void test_adamw(void)
{
	size_t ns[] = { 37, 37 * 100 + 3, 1u << 22 };
	float wds[] = { 0.1f, 0.0f, 0.1f };
	for (int i = 0; i < (big ? 3 : 2); i++) {
		struct cfg c = { .n = ns[i], .steps = i == 2 ? 2 : 5, .s = wds[i] };
		fresh();
		tb_out("p", rvec(c.n, 1), FL(c.n), TOL_ADAM);
		tb_out("m", NULL, FL(c.n), TOL_ADAM);
		tb_out("v", NULL, FL(c.n), TOL_ADAM);
		tb_in(rvec(c.n * (size_t)c.steps, 0.01f), FL(c.n * (size_t)c.steps));
		run_test("adamw", HAS(adamw), LABEL("n=%zu steps=%d wd=%g", c.n, c.steps, c.s), r_adamw, &c, NULL, 0);
	}
}

/* ================= cross-entropy ================= */
static void r_xf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->xent_forward(d[0], d[1], d[2], d[3], c->N, c->V);
}
static void r_xb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->xent_backward(d[0], (c->flags & F_ALIAS) ? d[0] : d[1], d[2], d[3], d[4], c->N, c->V);
}

static void test_xent(void)
{
	int cf[][3] = { { 37, 515, 0 }, { 37, 100, F_ALIAS }, { 3, 50257, 0 }, { 1024, 32000, 0 } };
	for (int i = 0; i < (big ? 4 : 3); i++) {
		struct cfg c = { .N = cf[i][0], .V = cf[i][1], .flags = cf[i][2] };
		size_t NV = (size_t)c.N * c.V;
		fresh();
		float *logits = rvec(NV, 8);
		int32_t *tgt = rtok(c.N, c.V, 0.2);
		tb_out("losses", rvec(c.N, 1), FL(c.N), TOL_RED);
		tb_out("lse", rvec(c.N, 1), FL(c.N), TOL_RED);
		tb_in(logits, FL(NV));
		tb_in(tgt, IN32(c.N));
		run_test("xent_forward", HAS(xent_forward), LABEL("N=%d V=%d", c.N, c.V), r_xf, &c, NULL, 0);

		fresh();
		logits = rvec(NV, 8);
		tgt = rtok(c.N, c.V, 0.2);
		float *loss = hnew(FL(c.N)), *lse = hnew(FL(c.N));
		kops_cpu()->xent_forward(loss, lse, logits, tgt, c.N, c.V);
		for (int n = 0; n < c.N; n += 5) /* a "global" lse a bit above the shard's */
			lse[n] += 0.25f;
		bool alias = c.flags & F_ALIAS;
		tb_out("dlogits", alias ? logits : rvec(NV, 1), FL(NV), TOL_RED);
		tb_in(alias ? NULL : logits, alias ? 0 : FL(NV));
		tb_in(lse, FL(c.N));
		tb_in(tgt, IN32(c.N));
		tb_in(rpos(c.N, 0.01f, 1.0f), FL(c.N));
		run_test("xent_backward", HAS(xent_backward),
			 LABEL("N=%d V=%d%s", c.N, c.V, alias ? " dlogits=logits" : ""), r_xb, &c, NULL, 0);
	}
}

/* ================= qkv split + RoPE ================= */
static void r_qf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->qkv_split_forward(d[0], d[1], d[2], d[3], d[4], d[5], c->B, c->T, c->a, c->g, c->k, c->rot,
			     (c->flags & F_INTERLEAVED) != 0);
}
static void r_qb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->qkv_split_backward(d[0], d[1], d[2], d[3], d[4], d[5], c->B, c->T, c->a, c->g, c->k, c->rot,
			      (c->flags & F_INTERLEAVED) != 0);
}

/* the table of case c: plain rotate-half, or (interleaved cases) YaRN's in
 * the interleaved layout, so that the scaled values reach the kernels */
static void qkv_table(const struct cfg *c, float *cs, float *sn)
{
	struct rope_yarn y = rope_yarn_defaults();
	y.factor = 4;
	y.original_max_positions = 16;
	struct rope_spec sp = { c->rot, 10000.0f, NULL, (c->flags & F_INTERLEAVED) ? &y : NULL,
				(c->flags & F_INTERLEAVED) != 0 };
	rope_table(cs, sn, c->T, &sp);
}

static void test_qkv(void)
{
	int cf[][7] = { /* B, T, a, g, k, rot, interleaved */
			{ 2, 37, 4, 2, 32, 32, 0 }, { 2, 37, 4, 2, 32, 16, 0 }, { 1, 13, 4, 4, 24, 0, 0 },
			{ 3, 5, 6, 1, 16, 8, 0 },   { 2, 37, 2, 2, 64, 64, 0 }, { 2, 37, 4, 2, 32, 32, 1 },
			{ 3, 5, 6, 1, 16, 8, 1 },   { 4, 512, 16, 4, 128, 128, 0 } };
	int n = (int)(sizeof(cf) / sizeof(cf[0]));
	for (int i = 0; i < (big ? n : n - 1); i++) {
		struct cfg c = { .B = cf[i][0], .T = cf[i][1], .a = cf[i][2], .g = cf[i][3], .k = cf[i][4], .rot = cf[i][5],
				 .flags = cf[i][6] ? F_INTERLEAVED : 0 };
		size_t BT = (size_t)c.B * c.T, nq = BT * c.a * c.k, nkv = BT * c.g * c.k, nqkv = nq + 2 * nkv;
		size_t nr = (size_t)c.T * c.rot;
		float *cs = nr ? hnew(FL(nr)) : NULL, *sn = nr ? hnew(FL(nr)) : NULL;
		if (nr)
			qkv_table(&c, cs, sn);
		fresh();
		tb_out("q", rvec(nq, 1), FL(nq), TOL_EW);
		tb_out("k", rvec(nkv, 1), FL(nkv), TOL_EW);
		tb_out("v", rvec(nkv, 1), FL(nkv), TOL_EW);
		tb_in(rvec(nqkv, 2), FL(nqkv));
		tb_in(cs, FL(nr));
		tb_in(sn, FL(nr));
		const char *il = (c.flags & F_INTERLEAVED) ? " interleaved yarn" : "";
		const char *l = LABEL("B=%d T=%d a=%d g=%d k=%d rot=%d%s", c.B, c.T, c.a, c.g, c.k, c.rot, il);
		run_test("qkv_split_forward", HAS(qkv_split_forward), l, r_qf, &c, NULL, 0);

		if (nr) { /* run_test freed the tables */
			cs = hnew(FL(nr));
			sn = hnew(FL(nr));
			qkv_table(&c, cs, sn);
		}
		fresh();
		tb_out("dqkv", rvec(nqkv, 9), FL(nqkv), TOL_EW);
		tb_in(rvec(nq, 1), FL(nq));
		tb_in(rvec(nkv, 1), FL(nkv));
		tb_in(rvec(nkv, 1), FL(nkv));
		tb_in(cs, FL(nr));
		tb_in(sn, FL(nr));
		l = LABEL("B=%d T=%d a=%d g=%d k=%d rot=%d%s", c.B, c.T, c.a, c.g, c.k, c.rot, il);
		run_test("qkv_split_backward", HAS(qkv_split_backward), l, r_qb, &c, NULL, 0);
	}
}

/* ================= attention ================= */
static void r_af(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->attention_forward(d[0], d[1], d[2], d[3], d[4], d[5], c->B, c->T, c->a, c->g, c->k, c->scale, c->win, c->p,
			     c->seed, c->off);
}
static void r_ab(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->attention_backward(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], c->B, c->T, c->a, c->g, c->k,
			      c->scale, c->p, c->seed, c->off);
}

/* document ids of [B, T]: a new document starts at each position with probability 0.15 */
static int32_t *rdoc(int B, int T)
{
	int32_t *dc = hnew(IN32((size_t)B * T));
	for (int b = 0; b < B; b++)
		for (int t = 0, id = 0; t < T; t++) {
			if (t && runif() < 0.15)
				id++;
			dc[b * T + t] = id;
		}
	return dc;
}

static void test_attention(void)
{
	/* Beyond the small cases, the CUDA kernels' tiles (64 queries x 32 keys, 32 x 32
	 * for head dims above 128): T not a multiple of them, GQA with a/g = 4, head dims
	 * padded up to the kernels' widths (40 -> 64, 200 -> 256), many documents, and
	 * grads left NULL (nul: 1 dq, 2 dk, 4 dv). big: timing-sized, left out by --no-big. */
	struct {
		int B, T, a, g, k, flags;
		float p;
		int nul, big;
	} cf[] = { { 2, 37, 4, 2, 32, 0, 0.0f, 0, 0 },      { 2, 37, 4, 2, 32, 0, 0.1f, 0, 0 },
		   { 2, 37, 4, 2, 24, F_DOC, 0.0f, 0, 0 },  { 1, 13, 4, 1, 16, F_DOC, 0.1f, 0, 0 },
		   { 3, 37, 2, 2, 64, 0, 0.0f, 0, 0 },      { 2, 200, 8, 2, 64, F_DOC, 0.1f, 0, 0 },
		   { 1, 333, 4, 1, 128, 0, 0.0f, 0, 0 },    { 2, 333, 8, 2, 128, F_DOC, 0.1f, 0, 0 },
		   { 1, 77, 3, 3, 40, 0, 0.1f, 1, 0 },      { 2, 70, 4, 1, 200, F_DOC, 0.0f, 2, 0 },
		   { 1, 150, 2, 2, 256, 0, 0.1f, 4, 0 },    { 2, 256, 12, 4, 64, 0, 0.1f, 0, 1 },
		   { 2, 1024, 16, 4, 128, 0, 0.0f, 0, 1 } };
	/* then the small cases again under a sliding window of about a third of T
	 * (the probs outside it are zeros that attention_backward reads) */
	for (int wi = 0; wi < 2 * (int)(sizeof cf / sizeof *cf); wi++) {
		const int i = wi % (int)(sizeof cf / sizeof *cf), windowed = wi >= (int)(sizeof cf / sizeof *cf);
		if (cf[i].big && (!big || windowed))
			continue;
		struct cfg c = { .B = cf[i].B, .T = cf[i].T, .a = cf[i].a, .g = cf[i].g, .k = cf[i].k,
				 .flags = cf[i].flags, .p = cf[i].p, .scale = 1.0f / sqrtf((float)cf[i].k),
				 .seed = 42 + (uint64_t)i, .off = 1000 + 3 * (uint64_t)i,
				 .win = windowed ? cf[i].T / 3 : -1 };
		size_t nq = (size_t)c.B * c.a * c.T * c.k, nkv = (size_t)c.B * c.g * c.T * c.k;
		size_t np = (size_t)c.B * c.a * c.T * c.T;
		bool doc = c.flags & F_DOC;
		fresh();
		float *q = rvec(nq, 2), *kk = rvec(nkv, 2), *v = rvec(nkv, 1);
		int32_t *dc = doc ? rdoc(c.B, c.T) : NULL;
		tb_out("out", rvec(nq, 1), FL(nq), TOL_RED);
		tb_out("probs", rvec(np, 1), FL(np), TOL_RED);
		tb_in(q, FL(nq));
		tb_in(kk, FL(nkv));
		tb_in(v, FL(nkv));
		tb_in(dc, doc ? IN32((size_t)c.B * c.T) : 0);
		const char *l = LABEL("B=%d T=%d a=%d g=%d k=%d p=%g%s window=%d", c.B, c.T, c.a, c.g, c.k, c.p,
				      doc ? " doc" : "", c.win);
		run_test("attention_forward", HAS(attention_forward), l, r_af, &c, NULL, 0);

		/* the probs of the CPU forward (with the documents: zeros across them) */
		fresh();
		q = rvec(nq, 2);
		kk = rvec(nkv, 2);
		v = rvec(nkv, 1);
		dc = doc ? rdoc(c.B, c.T) : NULL;
		float *probs = hnew(FL(np)), *o = hnew(FL(nq));
		kops_cpu()->attention_forward(o, probs, q, kk, v, dc, c.B, c.T, c.a, c.g, c.k, c.scale, c.win, c.p,
					      c.seed, c.off);
		int nul = cf[i].nul;
		tb_out("dq", nul & 1 ? NULL : rvec(nq, 9), nul & 1 ? 0 : FL(nq), TOL_RED);
		tb_out("dk", nul & 2 ? NULL : rvec(nkv, 9), nul & 2 ? 0 : FL(nkv), TOL_RED);
		tb_out("dv", nul & 4 ? NULL : rvec(nkv, 9), nul & 4 ? 0 : FL(nkv), TOL_RED);
		tb_in(rvec(nq, 1), FL(nq));
		tb_in(q, FL(nq));
		tb_in(kk, FL(nkv));
		tb_in(v, FL(nkv));
		tb_in(probs, FL(np));
		l = LABEL("B=%d T=%d a=%d g=%d k=%d p=%g%s%s%s%s window=%d", c.B, c.T, c.a, c.g, c.k, c.p,
			  doc ? " doc" : "", nul & 1 ? " dq=NULL" : "", nul & 2 ? " dk=NULL" : "", nul & 4 ? " dv=NULL" : "",
			  c.win);
		run_test("attention_backward", HAS(attention_backward), l, r_ab, &c, NULL, 0);
	}
}

/* ================= attention_block (context parallelism) ================= */
static void r_abf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->attention_block_forward(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], c->B, c->Tq, c->Tk, c->a, c->g,
				   c->k, c->S, c->scale, c->win, c->p, c->seed, c->off, c->acc);
}
static void r_abb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->attention_block_backward(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], c->B,
				    c->Tq, c->Tk, c->a, c->g, c->k, c->S, c->scale, c->win, c->p, c->seed, c->off);
}

/* the block ops' q, kk, v, qpos, kpos, doc inputs, in their argument order (doc
 * [B, S] or NULL) */
static void tb_in_block(const float *q, const float *kk, const float *v, const int32_t *qpos, const int32_t *kpos,
			const int32_t *doc, const struct cfg *c)
{
	tb_in(q, FL((size_t)c->B * c->a * c->Tq * c->k));
	tb_in(kk, FL((size_t)c->B * c->g * c->Tk * c->k));
	tb_in(v, FL((size_t)c->B * c->g * c->Tk * c->k));
	tb_in(qpos, IN32(c->Tq));
	tb_in(kpos, IN32(c->Tk));
	tb_in(doc, doc ? IN32((size_t)c->B * c->S) : 0);
}

/* the keys of [0, S) not in kpos */
static int32_t *complement(const int32_t *kpos, int Tk, int S, int *n)
{
	int32_t *o = hnew(IN32(S));
	int m = 0, j = 0;
	for (int i = 0; i < S; i++) {
		if (j < Tk && kpos[j] == i)
			j++;
		else
			o[m++] = i;
	}
	*n = m;
	return o;
}

/* The positions in chunks ca and cb of [0, S) cut into nch chunks of S/nch
 * (the last one takes the rest), the layout of Megatron's load-balanced
 * context parallelism (rank r of cp holds chunks r and 2cp-1-r of 2cp).
 * Returns their count; out may be NULL. */
static int chunk_pos(int32_t *out, int S, int nch, int ca, int cb)
{
	int n = 0, len = S / nch;
	for (int i = 0; i < S; i++) {
		int ch = i / len < nch ? i / len : nch - 1;
		if (ch == ca || ch == cb) {
			if (out)
				out[n] = i;
			n++;
		}
	}
	return n;
}

/* ================= block attention on the tensor cores (half tables) =================
 * The bf16/fp16 tables' attention_block_forward and _backward (attn_tc.cuh,
 * head dims 64 and 128, with and without dropout) on inputs rounded to the format, against
 * the CPU's fp32 ops: P (and dS) are rounded to the format before their
 * products, so out and the grads agree to about 2^-9 (bf16) or 2^-12 (fp16)
 * of their largest value; lse comes from fp32 scores and agrees as the fp32
 * kernel's does. Self-attention as training
 * calls it (ragged tiles, GQA), and a context-parallel block merged into
 * the state of another (accumulate). Also a case the half table hands to
 * the fp32 kernel (head dim 80). Then sliding windows at head dims 64 and
 * 128: smaller than, equal to and crossing the 64- and 128-query blocks, on
 * self-attention (the flash path's positions, the causal diagonal in every
 * block) and on ring attention's blocks (rank 1 of CP 2: chunks 1 and 2 of
 * 4 against themselves, the diagonal block, or against chunks 0 and 3, no
 * diagonal: only the window's edge). Document masks (packed sequences) on
 * self-attention and on ring attention's blocks, with and without a window,
 * at the tensor cores' tolerance too. */
#define TOL_ATTN_BF16 1e-2
#define TOL_ATTN_F16 2e-3

static void test_attention_block_half(bool stand_in)
{
	static const char *const op[2] = { "attention_block_forward/bf16", "attention_block_forward/fp16" };
	static const char *const opb[2] = { "attention_block_backward/bf16", "attention_block_backward/fp16" };
	int cf[][10] = { /* B, a, g, k, T, CP block (0: self-attention, 1: against chunks 0, 3, 2: the
			  * diagonal block), accumulate, dropout %, window (-1: none), document
			  * masks */
			{ 2, 4, 2, 64, 300, 0, 0, 0, -1, 0 },
			{ 1, 2, 1, 128, 257, 0, 0, 0, -1, 0 },
			{ 1, 4, 4, 64, 512, 1, 1, 0, -1, 0 },
			{ 1, 2, 2, 80, 100, 0, 0, 0, -1, 0 },
			{ 2, 4, 2, 128, 200, 0, 0, 10, -1, 0 },
			{ 2, 4, 2, 64, 300, 0, 0, 0, 40, 0 },
			{ 1, 4, 2, 64, 300, 0, 0, 0, 64, 0 },
			{ 1, 4, 2, 64, 300, 0, 0, 10, 100, 0 },
			{ 1, 2, 1, 128, 257, 0, 0, 0, 128, 0 },
			{ 1, 2, 2, 128, 200, 0, 0, 0, 31, 0 },
			{ 1, 4, 2, 64, 512, 1, 1, 0, 100, 0 },
			{ 1, 4, 2, 64, 512, 2, 1, 0, 64, 0 },
			{ 1, 2, 1, 128, 512, 1, 0, 10, 150, 0 },
			{ 1, 2, 1, 128, 512, 2, 0, 0, 200, 0 },
			{ 1, 2, 2, 80, 100, 0, 0, 0, 30, 0 },
			{ 2, 4, 2, 64, 300, 0, 0, 10, -1, 1 },
			{ 1, 2, 1, 128, 512, 1, 1, 0, 150, 1 },
			{ 1, 4, 2, 128, 512, 2, 0, 0, -1, 1 },
			{ 4, 12, 12, 64, 1024, 0, 0, 0, -1, 0 } };
	int ncf = big ? 19 : 18;
	uint64_t rs_case = 0;
	const struct kops *saved = GPU;
	for (int kind = KOPS_ROUND_BF16; kind <= KOPS_ROUND_FP16; kind++) {
		enum kops_round rk = (enum kops_round)kind;
		const struct kops *h = half_table(rk, stand_in, saved, op[kind]);
		if (!h)
			continue;
		GPU = h;
		double tol = rk == KOPS_ROUND_BF16 ? TOL_ATTN_BF16 : TOL_ATTN_F16;
		for (int i = 0; i < ncf * 2; i++) {
			/* pass 0 the forward, pass 1 the backward, on the same inputs
			 * (run_test frees them: the generator restarts from the same state) */
			const int pass = i % 2;
			struct cfg c = { .B = cf[i / 2][0], .a = cf[i / 2][1], .g = cf[i / 2][2], .k = cf[i / 2][3],
					 .S = cf[i / 2][4], .acc = cf[i / 2][6], .p = 0.01f * (float)cf[i / 2][7],
					 .win = cf[i / 2][8], .seed = 99, .off = 12345 };
			if (pass == 0)
				fresh();
			else
				rs = rs_case;
			rs_case = rs;
			c.scale = 1.0f / sqrtf((float)c.k);
			int32_t *qpos, *kpos, *kpos2 = NULL;
			int Tk2 = 0;
			if (cf[i / 2][5]) { /* rank 1 of CP 2: chunks 1 and 2 of 4, against chunks 0 and 3 (or 1 and 2) */
				const int ka = cf[i / 2][5] == 2 ? 1 : 0, kb = cf[i / 2][5] == 2 ? 2 : 3;
				c.Tq = chunk_pos(NULL, c.S, 4, 1, 2);
				qpos = hnew(IN32(c.Tq));
				chunk_pos(qpos, c.S, 4, 1, 2);
				c.Tk = chunk_pos(NULL, c.S, 4, ka, kb);
				kpos = hnew(IN32(c.Tk));
				chunk_pos(kpos, c.S, 4, ka, kb);
				kpos2 = complement(kpos, c.Tk, c.S, &Tk2);
			} else {
				c.Tq = c.Tk = c.S;
				qpos = kpos = rsubset(c.S, c.S);
			}
			size_t nq = (size_t)c.B * c.a * c.Tq * c.k, nkv = (size_t)c.B * c.g * c.Tk * c.k,
			       nl = (size_t)c.B * c.a * c.Tq;
			const int32_t *dc = cf[i / 2][9] ? rdoc(c.B, c.S) : NULL;
			/* the fp32 kernels (head dim 80) agree as the fp32 table does */
			const bool f32 = c.k == 80;
			float *q = rhalf(nq, 2, rk), *kk = rhalf(nkv, 2, rk), *v = rhalf(nkv, 1, rk);
			float *out = rvec(nq, 1), *lse = rvec(nl, 1);
			if (c.acc) { /* the running state: the other keys merged first */
				size_t n2 = (size_t)c.B * c.g * Tk2 * c.k;
				kops_cpu()->attention_block_forward(out, lse, q, rhalf(n2, 2, rk), rhalf(n2, 1, rk), qpos,
								    kpos2, dc, c.B, c.Tq, Tk2, c.a, c.g, c.k, c.S,
								    c.scale,
								    c.win, c.p, c.seed, c.off, 0);
			}
			if (pass == 0) {
				tb_out("out", out, FL(nq), f32 ? TOL_RED : tol);
				tb_out("lse", lse, FL(nl), TOL_RED);
				tb_in_block(q, kk, v, qpos, kpos, dc, &c);
				run_test(op[kind], HAS(attention_block_forward),
					 LABEL("%s B=%d a=%d g=%d k=%d S=%d Tq=%d Tk=%d p=%g window=%d%s%s%s%s",
					       h->name, c.B, c.a, c.g, c.k, c.S, c.Tq, c.Tk, c.p, c.win,
					       cf[i / 2][5] == 2 ? " diagonal block" : "", c.acc ? " accumulate=1" : "",
					       dc ? " doc" : "", f32 ? " (fp32 kernel)" : ""),
					 r_abf, &c, NULL, 0);
				continue;
			}
			/* the backward on the CPU's finished forward of this block alone
			 * (out in the format, as the model holds it); grads from zero */
			float *fo = hnew(FL(nq)), *fl = hnew(FL(nl)), *fo16 = hnew(FL(nq));
			kops_cpu()->attention_block_forward(fo, fl, q, kk, v, qpos, kpos, dc, c.B, c.Tq, c.Tk, c.a, c.g,
							    c.k, c.S, c.scale, c.win, c.p, c.seed, c.off, 0);
			kops_cpu()->round(fo16, fo, nq, rk);
			tb_out("dq", NULL, FL(nq), f32 ? TOL_RED : tol);
			tb_out("dk", NULL, FL(nkv), f32 ? TOL_RED : tol);
			tb_out("dv", NULL, FL(nkv), f32 ? TOL_RED : tol);
			tb_in(rhalf(nq, 1, rk), FL(nq));
			tb_in(fo16, FL(nq));
			tb_in(fl, FL(nl));
			tb_in_block(q, kk, v, qpos, kpos, dc, &c);
			run_test(opb[kind], HAS(attention_block_backward),
				 LABEL("%s B=%d a=%d g=%d k=%d S=%d Tq=%d Tk=%d p=%g window=%d%s%s%s", h->name, c.B,
				       c.a,
				       c.g, c.k, c.S, c.Tq, c.Tk, c.p, c.win, cf[i / 2][5] == 2 ? " diagonal block" : "",
				       dc ? " doc" : "", f32 ? " (fp32 kernel)" : ""),
				 r_abb, &c, NULL, 0);
		}
	}
	GPU = saved;
}

static void test_attention_block(void)
{
	/* Positions: nch = 0 draws random subsets of Tq and Tk positions; otherwise the
	 * queries are chunks qa, qb and the keys chunks ka, kb of nch (nch = 1: all of
	 * [0, S) for both, the whole causal sequence). The chunked blocks have query
	 * tiles whose keys are all in their future, rows that see no key of the block
	 * (accumulate=0: out 0, lse -inf) and rows whose running state has seen no key
	 * yet (the diagonal block, accumulate=1). nul: grads left NULL (1 dq, 2 dk, 4 dv);
	 * big: timing-sized, left out by --no-big. */
	struct {
		int B, a, g, k, S, Tq, Tk, acc;
		float p;
		int nch, qa, qb, ka, kb, nul, big;
	} cf[] = { { 2, 4, 2, 32, 37, 20, 15, 0, 0.0f, 0, 0, 0, 0, 0, 0, 0 },
		   { 2, 4, 2, 32, 37, 20, 15, 1, 0.0f, 0, 0, 0, 0, 0, 0, 0 },
		   { 2, 4, 2, 32, 37, 20, 15, 0, 0.1f, 0, 0, 0, 0, 0, 0, 0 },
		   { 2, 4, 2, 32, 37, 20, 15, 1, 0.1f, 0, 0, 0, 0, 0, 0, 0 },
		   { 1, 4, 1, 24, 37, 37, 37, 0, 0.0f, 0, 0, 0, 0, 0, 0, 0 },
		   { 2, 2, 2, 16, 13, 5, 9, 1, 0.1f, 0, 0, 0, 0, 0, 0, 0 },
		   { 2, 8, 2, 64, 400, 200, 200, 1, 0.1f, 0, 0, 0, 0, 0, 0, 0 },
		   { 2, 8, 2, 64, 400, 200, 200, 0, 0.0f, 0, 0, 0, 0, 0, 1, 0 },
		   { 1, 4, 1, 40, 100, 60, 70, 1, 0.0f, 0, 0, 0, 0, 0, 2, 0 },
		   { 2, 4, 1, 128, 600, 0, 0, 1, 0.1f, 8, 1, 6, 3, 4, 0, 0 },
		   { 1, 6, 2, 64, 600, 0, 0, 0, 0.1f, 8, 0, 7, 2, 5, 0, 0 },
		   { 2, 4, 4, 32, 512, 0, 0, 1, 0.0f, 8, 0, 7, 0, 7, 0, 0 },
		   { 2, 8, 2, 128, 333, 0, 0, 0, 0.1f, 1, 0, 0, 0, 0, 0, 0 },
		   { 1, 2, 1, 256, 150, 0, 0, 0, 0.1f, 1, 0, 0, 0, 0, 4, 0 },
		   { 2, 12, 4, 64, 512, 256, 256, 1, 0.1f, 0, 0, 0, 0, 0, 0, 1 },
		   { 2, 16, 4, 128, 1024, 0, 0, 0, 0.0f, 1, 0, 0, 0, 0, 0, 1 } };
	/* then the small cases again under a sliding window of about a fifth of S,
	 * then again with document masks (every other one also windowed) */
	const int ncf = (int)(sizeof cf / sizeof *cf);
	for (int wi = 0; wi < 3 * ncf; wi++) {
		const int i = wi % ncf, docs = wi >= 2 * ncf, windowed = (wi >= ncf && !docs) || (docs && i % 2);
		if (cf[i].big && (!big || windowed || docs))
			continue;
		struct cfg c = { .B = cf[i].B, .a = cf[i].a, .g = cf[i].g, .k = cf[i].k, .S = cf[i].S, .Tq = cf[i].Tq,
				 .Tk = cf[i].Tk, .acc = cf[i].acc, .p = cf[i].p, .scale = 1.0f / sqrtf((float)cf[i].k),
				 .seed = 7 + (uint64_t)i, .off = 11 * (uint64_t)i, .win = windowed ? cf[i].S / 5 : -1 };
		const int nch = cf[i].nch, nul = cf[i].nul;
		char where[64] = "";
		if (nch) {
			c.Tq = chunk_pos(NULL, c.S, nch, cf[i].qa, cf[i].qb);
			c.Tk = chunk_pos(NULL, c.S, nch, cf[i].ka, cf[i].kb);
			if (nch == 1)
				snprintf(where, sizeof where, " all positions");
			else
				snprintf(where, sizeof where, " q chunks %d,%d k chunks %d,%d of %d", cf[i].qa, cf[i].qb,
					 cf[i].ka, cf[i].kb, nch);
		}
		size_t nq = (size_t)c.B * c.a * c.Tq * c.k, nkv = (size_t)c.B * c.g * c.Tk * c.k;
		size_t nl = (size_t)c.B * c.a * c.Tq;
		for (int pass = 0; pass < 2; pass++) { /* forward, backward */
			fresh();
			int32_t *qpos, *kpos;
			if (nch) {
				qpos = hnew(IN32(c.Tq));
				kpos = hnew(IN32(c.Tk));
				chunk_pos(qpos, c.S, nch, cf[i].qa, cf[i].qb);
				chunk_pos(kpos, c.S, nch, cf[i].ka, cf[i].kb);
			} else {
				qpos = rsubset(c.Tq, c.S);
				kpos = rsubset(c.Tk, c.S);
			}
			const int32_t *dc = docs ? rdoc(c.B, c.S) : NULL;
			int Tk2;
			int32_t *kpos2 = complement(kpos, c.Tk, c.S, &Tk2);
			size_t nkv2 = (size_t)c.B * c.g * Tk2 * c.k;
			float *q = rvec(nq, 2), *kk = rvec(nkv, 2), *v = rvec(nkv, 1);
			float *kk2 = rvec(nkv2 ? nkv2 : 1, 2), *v2 = rvec(nkv2 ? nkv2 : 1, 1);
			const struct kops *h = kops_cpu();
			float *out = hnew(FL(nq)), *lse = hnew(FL(nl));
			if (pass == 0 && c.acc) /* the running state: the other keys merged first */
				h->attention_block_forward(out, lse, q, kk2, v2, qpos, kpos2, dc, c.B, c.Tq, Tk2, c.a,
							   c.g, c.k, c.S, c.scale, c.win, c.p, c.seed, c.off, 0);
			if (pass == 1) { /* the finished forward: this block alone, or both */
				if (c.acc)
					h->attention_block_forward(out, lse, q, kk2, v2, qpos, kpos2, dc, c.B, c.Tq,
								   Tk2,
								   c.a, c.g, c.k, c.S, c.scale, c.win, c.p, c.seed, c.off, 0);
				h->attention_block_forward(out, lse, q, kk, v, qpos, kpos, dc, c.B, c.Tq, c.Tk, c.a,
							   c.g, c.k, c.S, c.scale, c.win, c.p, c.seed, c.off, c.acc);
			}
			const char *l = LABEL("B=%d a=%d g=%d k=%d S=%d Tq=%d Tk=%d p=%g window=%d%s%s %s%s%s%s", c.B,
					      c.a, c.g, c.k, c.S, c.Tq, c.Tk, c.p, c.win, docs ? " doc" : "", where,
					      pass == 0 ? (c.acc ? "accumulate=1" : "accumulate=0")
							: (c.acc ? "share of all keys" : "this block alone"),
					      pass && nul & 1 ? " dq=NULL" : "", pass && nul & 2 ? " dk=NULL" : "",
					      pass && nul & 4 ? " dv=NULL" : "");
			if (pass == 0) {
				tb_out("out", c.acc ? out : rvec(nq, 1), FL(nq), TOL_RED);
				tb_out("lse", c.acc ? lse : rvec(nl, 1), FL(nl), TOL_RED);
				tb_in_block(q, kk, v, qpos, kpos, dc, &c);
				run_test("attention_block_forward", HAS(attention_block_forward), l, r_abf, &c, NULL, 0);
			} else {
				tb_out("dq", nul & 1 ? NULL : rvec(nq, 1), nul & 1 ? 0 : FL(nq), TOL_RED);
				tb_out("dk", nul & 2 ? NULL : rvec(nkv, 1), nul & 2 ? 0 : FL(nkv), TOL_RED);
				tb_out("dv", nul & 4 ? NULL : rvec(nkv, 1), nul & 4 ? 0 : FL(nkv), TOL_RED);
				tb_in(rvec(nq, 1), FL(nq));
				tb_in(out, FL(nq));
				tb_in(lse, FL(nl));
				tb_in_block(q, kk, v, qpos, kpos, dc, &c);
				run_test("attention_block_backward", HAS(attention_block_backward), l, r_abb, &c, NULL, 0);
			}
		}
	}
}

/* ================= Mamba-2 mixer ops (optional) =================
 * cfg fields: B T; ssm_conv: C channels, k = W taps; ssd_scan: a = H heads,
 * IC = P channels per head, g = G groups, S = N state size, steps = chunk;
 * gated_rmsnorm: N rows, C channels, g groups. A backend without these
 * optional ops (kops_op_optional) skips them; coverage() does the same. */
#define TOL_SCAN 2e-4 /* a chunked scan reorders long sums */
static void skip_if_absent(const char *op, bool has)
{
	if (has || (only && !strstr(op, only)))
		return;
	printf("ok - %s # SKIP optional op, not in the %s table\n", op, GPU->name);
	n_pass++;
}
static void r_convf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->ssm_conv_forward(d[0], d[1], d[2], d[3], d[4], c->B, c->T, c->C, c->k);
}
static void r_convb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->ssm_conv_backward(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], c->B, c->T, c->C, c->k);
}
static void r_scanf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->ssd_scan_forward(d[0], (c->flags & F_ALIAS) ? d[9] : d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8],
			    d[9], c->B, c->T, c->a, c->IC, c->g, c->S, c->steps);
}
static void r_scanb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->ssd_scan_backward(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13],
			     d[14], d[15], d[16], d[17], c->B, c->T, c->a, c->IC, c->g, c->S, c->steps);
}
static void r_gnf(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->gated_rmsnorm_forward((c->flags & F_ALIAS) ? d[2] : d[0], d[1], d[2], d[3], d[4], c->N, c->C, c->g,
				 c->eps);
}
static void r_gnb(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	k->gated_rmsnorm_backward((c->flags & F_ALIAS) ? d[3] : d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], c->N,
				  c->C, c->g);
}

static void test_ssm_conv(void)
{
	/* B T C W, flags: F_NULL1 no hist, F_NULL2 no bias */
	int cf[][5] = { { 2, 37, 24, 4, 0 }, { 1, 5, 7, 4, F_NULL1 }, { 3, 19, 40, 2, F_NULL2 },
			{ 1, 3, 16, 9, F_NULL1 | F_NULL2 }, { 4, 1024, 640, 4, 0 } };
	int ncf = big ? 5 : 4;
	skip_if_absent("ssm_conv_forward", HAS(ssm_conv_forward));
	skip_if_absent("ssm_conv_backward", HAS(ssm_conv_backward));
	for (int i = 0; i < ncf; i++) {
		struct cfg c = { .B = cf[i][0], .T = cf[i][1], .C = cf[i][2], .k = cf[i][3], .flags = cf[i][4] };
		size_t BTC = (size_t)c.B * c.T * c.C, CW = (size_t)c.C * c.k, BHC = (size_t)c.B * (c.k - 1) * c.C;
		bool hist = !(c.flags & F_NULL1), bias = !(c.flags & F_NULL2);
		fresh();
		tb_out("out", rvec(BTC, 3), FL(BTC), TOL_RED);
		tb_in(rvec(BTC, 2), FL(BTC));
		tb_in(hist ? rvec(BHC, 2) : NULL, hist ? FL(BHC) : 0);
		tb_in(rvec(CW, 0.6f), FL(CW));
		tb_in(bias ? rvec(c.C, 0.5f) : NULL, bias ? FL(c.C) : 0);
		run_test("ssm_conv_forward", HAS(ssm_conv_forward),
			 LABEL("B=%d T=%d C=%d W=%d%s%s", c.B, c.T, c.C, c.k, hist ? "" : " hist=NULL",
			       bias ? "" : " bias=NULL"),
			 r_convf, &c, NULL, 0);
		/* the first config also without dx, then without dw and dbias */
		for (int nul = 0; nul < (i == 0 ? 3 : 1); nul++) {
			bool nx = nul == 1, nw = nul == 2, db = bias && !nw;
			fresh();
			tb_out("dx", nx ? NULL : rvec(BTC, 3), nx ? 0 : FL(BTC), TOL_RED);
			tb_out("dw", nw ? NULL : rvec(CW, 1), nw ? 0 : FL(CW), TOL_RED);
			tb_out("dbias", db ? rvec(c.C, 1) : NULL, db ? FL(c.C) : 0, TOL_RED);
			tb_in(rvec(BTC, 1), FL(BTC));
			tb_in(rvec(BTC, 2), FL(BTC));
			tb_in(hist ? rvec(BHC, 2) : NULL, hist ? FL(BHC) : 0);
			tb_in(rvec(CW, 0.6f), FL(CW));
			tb_in(bias ? rvec(c.C, 0.5f) : NULL, bias ? FL(c.C) : 0);
			run_test("ssm_conv_backward", HAS(ssm_conv_backward),
				 LABEL("B=%d T=%d C=%d W=%d%s%s", c.B, c.T, c.C, c.k, hist ? "" : " hist=NULL",
				       nx ? " dx=NULL" : nw ? " dw=dbias=NULL" : ""),
				 r_convb, &c, NULL, 0);
		}
	}
}

static void test_ssd_scan(void)
{
	/* B T H P G N chunk, flags: F_NULL1 no state_in, F_NULL2 no D, F_ALIAS
	 * state_out aliases state_in */
	int cf[][8] = { { 2, 37, 4, 8, 2, 16, 16, 0 },	   { 1, 130, 2, 16, 1, 32, 128, F_NULL1 },
			{ 1, 9, 3, 4, 3, 8, 4, F_NULL2 },   { 2, 21, 2, 8, 1, 16, 8, F_ALIAS },
			/* states too large for a GPU block's default shared memory */
			{ 1, 6, 2, 96, 1, 128, 4, 0 },	   { 1, 5, 1, 2, 1, 3100, 2, F_NULL2 },
			{ 2, 1024, 8, 64, 1, 128, 128, 0 } };
	int ncf = big ? 7 : 6;
	skip_if_absent("ssd_scan_forward", HAS(ssd_scan_forward));
	skip_if_absent("ssd_scan_backward", HAS(ssd_scan_backward));
	for (int i = 0; i < ncf; i++) {
		struct cfg c = { .B = cf[i][0], .T = cf[i][1], .a = cf[i][2], .IC = cf[i][3], .g = cf[i][4],
				 .S = cf[i][5], .steps = cf[i][6], .flags = cf[i][7] };
		size_t BTH = (size_t)c.B * c.T * c.a, X = BTH * c.IC, BG = (size_t)c.B * c.T * c.g * c.S,
		       ST = (size_t)c.B * c.a * c.IC * c.S;
		bool sin = !(c.flags & F_NULL1), hasD = !(c.flags & F_NULL2), alias = c.flags & F_ALIAS;
		const char *tail = alias ? " state_out=state_in" : sin ? "" : " state_in=NULL";
		fresh();
		/* the inputs of both runs: raw dt near 0, softplus(dt + dt_bias)
		 * about 0.01..0.3, A = -exp(A_log) in -1..-15 */
		float *x = rvec(X, 1), *dt = rvec(BTH, 1), *dtb = rpos(c.a, -4, -1), *alog = rpos(c.a, 0, 2.7f);
		float *bm = rvec(BG, 1), *cm = rvec(BG, 1), *D = hasD ? rvec(c.a, 1) : NULL;
		float *st = sin ? rvec(ST, 1) : NULL;
		tb_out("y", rvec(X, 3), FL(X), TOL_SCAN);
		tb_out("state_out", alias ? NULL : rvec(ST, 3), alias ? 0 : FL(ST), TOL_SCAN);
		tb_in(x, FL(X));
		tb_in(dt, FL(BTH));
		tb_in(dtb, FL(c.a));
		tb_in(alog, FL(c.a));
		tb_in(bm, FL(BG));
		tb_in(cm, FL(BG));
		tb_in(D, hasD ? FL(c.a) : 0);
		if (alias)
			tb_out("state", st, FL(ST), TOL_SCAN);
		else
			tb_in(st, sin ? FL(ST) : 0);
		run_test("ssd_scan_forward", HAS(ssd_scan_forward),
			 LABEL("B=%d T=%d H=%d P=%d G=%d N=%d chunk=%d%s%s", c.B, c.T, c.a, c.IC, c.g, c.S, c.steps,
			       hasD ? "" : " D=NULL", tail),
			 r_scanf, &c, NULL, 0);
		if (alias) /* the backward takes no aliases */
			continue;
		/* the first config also runs with half the grads NULL, then the other half */
		for (int nul = 0; nul < (i == 0 ? 3 : 1); nul++) {
			bool n1 = nul == 1, n2 = nul == 2;
			fresh();
			x = rvec(X, 1), dt = rvec(BTH, 1), dtb = rpos(c.a, -4, -1), alog = rpos(c.a, 0, 2.7f);
			bm = rvec(BG, 1), cm = rvec(BG, 1), D = hasD ? rvec(c.a, 1) : NULL;
			st = sin ? rvec(ST, 1) : NULL;
			tb_out("dx", n1 ? NULL : rvec(X, 3), n1 ? 0 : FL(X), TOL_SCAN);
			tb_out("ddt", n2 ? NULL : rvec(BTH, 3), n2 ? 0 : FL(BTH), TOL_SCAN);
			tb_out("ddt_bias", n1 ? NULL : rvec(c.a, 1), n1 ? 0 : FL(c.a), TOL_SCAN);
			tb_out("dA_log", n2 ? NULL : rvec(c.a, 1), n2 ? 0 : FL(c.a), TOL_SCAN);
			tb_out("dBm", n1 ? NULL : rvec(BG, 3), n1 ? 0 : FL(BG), TOL_SCAN);
			tb_out("dCm", n2 ? NULL : rvec(BG, 3), n2 ? 0 : FL(BG), TOL_SCAN);
			tb_out("dD", hasD && !n2 ? rvec(c.a, 1) : NULL, hasD && !n2 ? FL(c.a) : 0, TOL_SCAN);
			tb_out("dstate_in", n1 ? NULL : rvec(ST, 3), n1 ? 0 : FL(ST), TOL_SCAN);
			tb_in(rvec(X, 1), FL(X));
			tb_in(i == 1 ? NULL : rvec(ST, 1), i == 1 ? 0 : FL(ST)); /* dstate_out (NULL once) */
			tb_in(x, FL(X));
			tb_in(dt, FL(BTH));
			tb_in(dtb, FL(c.a));
			tb_in(alog, FL(c.a));
			tb_in(bm, FL(BG));
			tb_in(cm, FL(BG));
			tb_in(D, hasD ? FL(c.a) : 0);
			tb_in(st, sin ? FL(ST) : 0);
			run_test("ssd_scan_backward", HAS(ssd_scan_backward),
				 LABEL("B=%d T=%d H=%d P=%d G=%d N=%d chunk=%d%s%s%s%s", c.B, c.T, c.a, c.IC, c.g, c.S,
				       c.steps, hasD ? "" : " D=NULL", tail, i == 1 ? " dstate_out=NULL" : "",
				       n1 ? " dx=ddt_bias=dBm=dstate_in=NULL" : n2 ? " ddt=dA_log=dCm=dD=NULL" : ""),
				 r_scanb, &c, NULL, 0);
		}
	}
}

static void test_gated_rmsnorm(void)
{
	/* N C groups, flags: F_NULL1 no gate, F_ALIAS out = y (forward), dy = dout (backward) */
	int cf[][4] = { { 37, 96, 1, 0 }, { 5, 64, 8, 0 }, { 3, 100, 4, F_NULL1 }, { 7, 48, 2, F_ALIAS },
			{ 4096, 2048, 8, 0 } };
	int ncf = big ? 5 : 4;
	skip_if_absent("gated_rmsnorm_forward", HAS(gated_rmsnorm_forward));
	skip_if_absent("gated_rmsnorm_backward", HAS(gated_rmsnorm_backward));
	for (int i = 0; i < ncf; i++) {
		struct cfg c = { .N = cf[i][0], .C = cf[i][1], .g = cf[i][2], .flags = cf[i][3], .eps = 1e-5f };
		size_t NC = (size_t)c.N * c.C, NG = (size_t)c.N * c.g;
		bool gate = !(c.flags & F_NULL1), alias = c.flags & F_ALIAS;
		fresh();
		float *y = rvec(NC, 2), *z = gate ? rvec(NC, 3) : NULL, *w = rpos(c.C, 0.5f, 1.5f);
		tb_out("out", alias ? NULL : rvec(NC, 3), alias ? 0 : FL(NC), TOL_RED);
		tb_out("rstd", rvec(NG, 3), FL(NG), TOL_RED);
		if (alias)
			tb_out("out (in y)", y, FL(NC), TOL_RED);
		else
			tb_in(y, FL(NC));
		tb_in(z, gate ? FL(NC) : 0);
		tb_in(w, FL(c.C));
		run_test("gated_rmsnorm_forward", HAS(gated_rmsnorm_forward),
			 LABEL("N=%d C=%d groups=%d%s%s", c.N, c.C, c.g, gate ? "" : " z=NULL", alias ? " out=y" : ""),
			 r_gnf, &c, NULL, 0);
		fresh();
		y = rvec(NC, 2), z = gate ? rvec(NC, 3) : NULL, w = rpos(c.C, 0.5f, 1.5f);
		float *rstd = hnew(FL(NG)), *o = hnew(FL(NC));
		kops_cpu()->gated_rmsnorm_forward(o, rstd, y, z, w, c.N, c.C, c.g, c.eps);
		tb_out("dy", alias ? NULL : rvec(NC, 3), alias ? 0 : FL(NC), TOL_RED);
		tb_out("dz", gate ? rvec(NC, 3) : NULL, gate ? FL(NC) : 0, TOL_RED);
		tb_out("dw", rvec(c.C, 1), FL(c.C), TOL_RED);
		if (alias)
			tb_out("dy (in dout)", rvec(NC, 1), FL(NC), TOL_RED);
		else
			tb_in(rvec(NC, 1), FL(NC));
		tb_in(y, FL(NC));
		tb_in(z, gate ? FL(NC) : 0);
		tb_in(w, FL(c.C));
		tb_in(rstd, FL(NG));
		run_test("gated_rmsnorm_backward", HAS(gated_rmsnorm_backward),
			 LABEL("N=%d C=%d groups=%d%s%s", c.N, c.C, c.g, gate ? "" : " z=NULL",
			       alias ? " dy=dout" : ""),
			 r_gnb, &c, NULL, 0);
	}
}

/* ================= FP8: amax, quantize, GEMM on codes =================
 * Codes and dequantization scales come from lib/kernels/fp8.h on both
 * sides, so they must agree bit for bit (compared as bytes); the GEMM's
 * fp32 output differs only in the order of the sums (and, on cuBLASLt's
 * per-tensor path, in the scales applied to the sum rather than to each
 * value): TOL_FP8_GEMM. A table without the FP8 ops that is the CPU's (this
 * tree's CPU table before its FP8 ops land, and --self / --perturb) runs
 * the host reference below instead, the contract of ops.h written out. */
#include "kernels/fp8.h"

#define TOL_FP8_GEMM 1e-5

static bool host_table(const struct kops *k) { return !strncmp(k->name, "cpu", 3); }

static void ref_fp8_amax(float *amax, const float *x, size_t n)
{
	uint32_t m = 0;
	for (size_t i = 0; i < n; i++)
		m = fp8_abs_bits(x[i]) > m ? fp8_abs_bits(x[i]) : m;
	*amax = fp8_bits_f32(m);
}

static void ref_fp8_quantize(const struct kops_fp8_tensor *t, const float *x, const struct kops_fp8_quant *how,
			     float *amax)
{
	const int nbr = (t->rows + t->br - 1) / t->br, nbc = (t->cols + t->bc - 1) / t->bc;
	if (amax) { /* raised, not set (ops.h) */
		float now;
		ref_fp8_amax(&now, x, (size_t)t->rows * t->cols);
		if (fp8_abs_bits(now) > fp8_abs_bits(*amax))
			*amax = now;
		else
			*amax = fp8_bits_f32(fp8_abs_bits(*amax));
	}
	for (int bi = 0; bi < nbr; bi++)
		for (int bj = 0; bj < nbc; bj++) {
			int r1 = (bi + 1) * t->br < t->rows ? (bi + 1) * t->br : t->rows;
			int c1 = (bj + 1) * t->bc < t->cols ? (bj + 1) * t->bc : t->cols;
#define XAT(r, c) (how->transpose ? x[(size_t)(c) * t->rows + (r)] : x[(size_t)(r) * t->cols + (c)])
			uint32_t m = 0;
			for (int r = bi * t->br; r < r1; r++)
				for (int c = bj * t->bc; c < c1; c++)
					m = fp8_abs_bits(XAT(r, c)) > m ? fp8_abs_bits(XAT(r, c)) : m;
			float scale, si;
			if (how->how == KOPS_FP8_GIVEN) {
				scale = how->scale;
				si = 1.0f / scale;
			} else {
				fp8_block_scale(fp8_bits_f32(m), t->fmt, how->how, how->pow2, &scale, &si);
			}
			t->sinv[bi * nbc + bj] = si;
			for (int r = bi * t->br; r < r1; r++)
				for (int c = bj * t->bc; c < c1; c++)
					t->q[(size_t)r * t->cols + c] = fp8_from_f32(XAT(r, c) * scale, t->fmt);
#undef XAT
		}
}

static float ref_deq(const struct kops_fp8_tensor *t, int r, int c)
{
	const int nbc = (t->cols + t->bc - 1) / t->bc;
	return fp8_to_f32(t->q[(size_t)r * t->cols + c], t->fmt) * t->sinv[(r / t->br) * nbc + c / t->bc];
}

static void ref_fp8_gemm(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b,
			 const float *bias, bool accumulate)
{
	for (int m = 0; m < a->rows; m++)
		for (int n = 0; n < b->rows; n++) {
			float s = 0.0f;
			for (int k = 0; k < a->cols; k++)
				s += ref_deq(a, m, k) * ref_deq(b, n, k);
			float *o = &out[(size_t)m * b->rows + n];
			*o = accumulate ? *o + s : bias ? s + bias[n] : s;
		}
}

static void ref_fp8_transpose(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src)
{
	const int R = src->rows, C = src->cols, nbr = (R + src->br - 1) / src->br, nbc = (C + src->bc - 1) / src->bc;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			dst->q[(size_t)c * R + r] = src->q[(size_t)r * C + c];
	for (int i = 0; i < nbr; i++)
		for (int j = 0; j < nbc; j++)
			dst->sinv[j * nbr + i] = src->sinv[i * nbc + j];
}

static size_t nblocks(const struct kops_fp8_tensor *t)
{
	return (size_t)((t->rows + t->br - 1) / t->br) * ((t->cols + t->bc - 1) / t->bc);
}

/* the block of element g of t, in its grid */
static size_t ref_block_of(const struct kops_fp8_tensor *t, size_t g)
{
	const size_t r = g / (size_t)t->cols, c = g % (size_t)t->cols;
	return r / (size_t)t->br * (size_t)((t->cols + t->bc - 1) / t->bc) + c / (size_t)t->bc;
}

static void ref_fp8_amax_blocks(float *amax, const float *x, size_t n, size_t start, const struct kops_fp8_tensor *t)
{
	const size_t nb = nblocks(t);
	uint32_t *m = calloc(nb + 1, sizeof *m);
	bool *hit = calloc(nb + 1, 1);
	for (size_t i = 0; i < n; i++) {
		const size_t b = ref_block_of(t, start + i);
		m[b] = fp8_abs_bits(x[i]) > m[b] ? fp8_abs_bits(x[i]) : m[b];
		hit[b] = true;
	}
	for (size_t b = 0; b < nb; b++)
		if (hit[b])
			amax[b] = fp8_bits_f32(m[b] > fp8_abs_bits(amax[b]) ? m[b] : fp8_abs_bits(amax[b]));
	free(m);
	free(hit);
}

static void ref_fp8_quantize_blocks(const struct kops_fp8_tensor *t, const float *x, size_t n, size_t start,
				    const float *amax, bool pow2)
{
	float scale, si;
	for (size_t b = 0; b < nblocks(t); b++)
		fp8_block_scale(amax[b], t->fmt, KOPS_FP8_AMAX, pow2, &scale, &t->sinv[b]);
	for (size_t i = 0; i < n; i++) {
		fp8_block_scale(amax[ref_block_of(t, start + i)], t->fmt, KOPS_FP8_AMAX, pow2, &scale, &si);
		t->q[start + i] = fp8_from_f32(x[i] * scale, t->fmt);
	}
}

#define HAS_FP8(f) (HAS(f) || host_table(GPU))

/* the case the run functions read (set before each run_test) */
static struct {
	struct kops_fp8_tensor t, b; /* t: quantize's tensor, or the GEMM's a; b: the GEMM's b (q, sinv unset) */
	struct kops_fp8_quant how;
	size_t n;
	bool amax, accumulate;
	size_t cut[8]; /* the shards: ranges [cut[p], cut[p + 1]) for p < parts */
	int parts, part; /* part: the one range cast (-1: all of them) */
} f8;

/* buffers: 0 amax out, 1 x */
static void r_fp8_amax(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	if (!k->fp8_amax && host_table(k))
		ref_fp8_amax(d[0], d[1], f8.n);
	else
		k->fp8_amax(d[0], d[1], f8.n);
}

/* buffers: 0 q, 1 sinv, 2 amax (or NULL), 3 x */
static void r_fp8_quantize(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	struct kops_fp8_tensor t = f8.t;
	t.q = d[0];
	t.sinv = d[1];
	if (!k->fp8_quantize && host_table(k))
		ref_fp8_quantize(&t, d[3], &f8.how, d[2]);
	else
		k->fp8_quantize(&t, d[3], &f8.how, d[2]);
}

/* buffers: 0 out, 1 a.q, 2 a.sinv, 3 b.q, 4 b.sinv, 5 bias (or NULL) */
static void r_fp8_gemm(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	struct kops_fp8_tensor a = f8.t, b = f8.b;
	a.q = d[1];
	a.sinv = d[2];
	b.q = d[3];
	b.sinv = d[4];
	if (!k->fp8_gemm && host_table(k))
		ref_fp8_gemm(d[0], &a, &b, d[5], f8.accumulate);
	else
		k->fp8_gemm(d[0], &a, &b, d[5], f8.accumulate);
}

/* buffers: 0 dst.sinv, 1 dst.q, 2 src.sinv, 3 src.q (the scales first: the harness's timing reads 4
 * bytes of the first buffer); f8.t is src (dst is its transpose) */
static void r_fp8_transpose(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	struct kops_fp8_tensor src = f8.t, dst = { .rows = src.cols, .cols = src.rows, .br = src.bc, .bc = src.br,
						   .fmt = src.fmt };
	dst.sinv = d[0];
	dst.q = d[1];
	src.sinv = d[2];
	src.q = d[3];
	if (!k->fp8_transpose && host_table(k))
		ref_fp8_transpose(&dst, &src);
	else
		k->fp8_transpose(&dst, &src);
}

/* buffers: 0 amax grid (raised), 1 x; every range of f8.cut raised in turn (or f8.part's alone) */
static void r_fp8_amax_blocks(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	const float *x = d[1];
	for (int p = 0; p < f8.parts; p++) {
		if (f8.part >= 0 && p != f8.part)
			continue;
		const size_t s0 = f8.cut[p], len = f8.cut[p + 1] - s0;
		if (!k->fp8_amax_blocks && host_table(k))
			ref_fp8_amax_blocks(d[0], x + s0, len, s0, &f8.t);
		else
			k->fp8_amax_blocks(d[0], x + s0, len, s0, &f8.t);
	}
}

/* buffers: 0 sinv, 1 q, 2 the reduced amax grid, 3 x; every range of f8.cut cast (or f8.part's alone) */
static void r_fp8_quantize_blocks(const struct kops *k, void **d, const struct cfg *c, double *s)
{
	struct kops_fp8_tensor t = f8.t;
	const float *x = d[3];
	t.sinv = d[0];
	t.q = d[1];
	for (int p = 0; p < f8.parts; p++) {
		if (f8.part >= 0 && p != f8.part)
			continue;
		const size_t s0 = f8.cut[p], len = f8.cut[p + 1] - s0;
		if (!k->fp8_quantize_blocks && host_table(k))
			ref_fp8_quantize_blocks(&t, x + s0, len, s0, d[2], f8.how.pow2);
		else
			k->fp8_quantize_blocks(&t, x + s0, len, s0, d[2], f8.how.pow2);
	}
}

/* values over many binades (subnormal codes, saturation), a row of zeros, sign mixed */
static float *fp8_values(int rows, int cols, float s)
{
	float *x = hnew((size_t)rows * cols * sizeof *x);
	for (int r = 0; r < rows; r++)
		for (int c = 0; c < cols; c++)
			x[(size_t)r * cols + c] =
				r == 3 ? 0.0f : (float)((2 * runif() - 1) * s * ldexp(1.0, rint_below(21) - 14));
	return x;
}

static const char *fmt_name(enum kops_fp8 f) { return f == KOPS_E4M3 ? "E4M3" : "E5M2"; }
static const char *how_name(enum kops_fp8_scaling h)
{
	return h == KOPS_FP8_GIVEN ? "GIVEN" : h == KOPS_FP8_AMAX ? "AMAX" : h == KOPS_FP8_TENSOR ? "TENSOR" : "MX";
}

/* a quantized operand made on the host (the reference), per-tensor scale from its amax for GIVEN */
static void fp8_operand(struct kops_fp8_tensor *t, int rows, int cols, int br, int bc, enum kops_fp8 fmt,
			enum kops_fp8_scaling h, float s)
{
	float *x = rvec((size_t)rows * cols, s);
	*t = (struct kops_fp8_tensor){ .rows = rows, .cols = cols, .br = br, .bc = bc, .fmt = fmt };
	t->q = hnew((size_t)rows * cols);
	t->sinv = hnew(nblocks(t) * sizeof(float));
	struct kops_fp8_quant how = { .how = h, .scale = 1.0f };
	if (h == KOPS_FP8_GIVEN) {
		float m;
		ref_fp8_amax(&m, x, (size_t)rows * cols);
		how.scale = fp8_max(fmt) / m;
	}
	ref_fp8_quantize(t, x, &how, NULL);
}

static void test_fp8(void)
{
	/* amax: short, a few blocks, past the capped grid; a NaN; n = 0 */
	struct {
		size_t n, nan_at;
	} am[] = { { 37, 0 }, { 100003, 0 }, { 1000003, 0 }, { 100003, 77777 }, { 0, 0 } };
	for (int i = 0; i < 5; i++) {
		struct cfg c = { 0 };
		fresh();
		f8.n = am[i].n;
		float *x = rvec(am[i].n ? am[i].n : 1, 3);
		if (am[i].nan_at)
			x[am[i].nan_at] = NAN;
		tb_raw("amax", rvec(1, 1), FL(1));
		tb_in(x, FL(am[i].n ? am[i].n : 1));
		run_test("fp8_amax", HAS_FP8(fp8_amax), LABEL("n=%zu%s", am[i].n, am[i].nan_at ? " NaN" : ""),
			 r_fp8_amax, &c, NULL, 0);
	}

	/* quantize: rows, cols, br, bc (0: the whole dimension), format, mode, pow2, transpose, amax,
	 * special (a NaN and an Inf in the input) */
	struct {
		int rows, cols, br, bc, fmt, how, pow2, tr, amax, special;
	} qc[] = {
		{ 37, 300, 0, 0, KOPS_E4M3, KOPS_FP8_GIVEN, 0, 0, 1, 0 },  { 37, 300, 0, 0, KOPS_E5M2, KOPS_FP8_GIVEN, 0, 1, 1, 0 },
		{ 37, 300, 1, 128, KOPS_E4M3, KOPS_FP8_AMAX, 0, 0, 0, 0 }, { 37, 300, 1, 128, KOPS_E5M2, KOPS_FP8_AMAX, 1, 1, 1, 0 },
		{ 300, 200, 128, 128, KOPS_E4M3, KOPS_FP8_AMAX, 1, 0, 0, 0 },
		{ 200, 300, 128, 128, KOPS_E4M3, KOPS_FP8_AMAX, 0, 1, 0, 0 },
		{ 37, 300, 1, 32, KOPS_E4M3, KOPS_FP8_MX, 0, 0, 1, 0 },    { 70, 45, 32, 1, KOPS_E5M2, KOPS_FP8_MX, 0, 1, 0, 0 },
		{ 37, 300, 0, 0, KOPS_E4M3, KOPS_FP8_GIVEN, 0, 0, 1, 1 },
		{ 37, 300, 1, 128, KOPS_E4M3, KOPS_FP8_AMAX, 0, 1, 1, 1 },
		{ 37, 300, 1, 32, KOPS_E5M2, KOPS_FP8_MX, 0, 0, 0, 1 },
		/* one block of the whole tensor (the tensorwise recipe's scale on the device) */
		{ 37, 300, 0, 0, KOPS_E4M3, KOPS_FP8_TENSOR, 0, 0, 1, 0 }, { 37, 300, 0, 0, KOPS_E5M2, KOPS_FP8_TENSOR, 0, 1, 0, 1 },
		{ 37, 300, 0, 0, KOPS_E4M3, KOPS_FP8_AMAX, 0, 0, 1, 0 },
	};
	for (int i = 0; i < (int)(sizeof qc / sizeof *qc); i++) {
		struct cfg c = { 0 };
		fresh();
		f8.t = (struct kops_fp8_tensor){ .rows = qc[i].rows, .cols = qc[i].cols,
						 .br = qc[i].br ? qc[i].br : qc[i].rows,
						 .bc = qc[i].bc ? qc[i].bc : qc[i].cols, .fmt = (enum kops_fp8)qc[i].fmt };
		f8.how = (struct kops_fp8_quant){ .how = (enum kops_fp8_scaling)qc[i].how, .scale = 37.5f,
						  .pow2 = qc[i].pow2, .transpose = qc[i].tr };
		const size_t n = (size_t)qc[i].rows * qc[i].cols;
		float *x = qc[i].tr ? fp8_values(qc[i].cols, qc[i].rows, 4) : fp8_values(qc[i].rows, qc[i].cols, 4);
		if (qc[i].special) {
			x[5] = NAN;
			x[400] = -INFINITY;
		}
		tb_raw("q", NULL, n);
		tb_raw("sinv", NULL, FL(nblocks(&f8.t)));
		tb_raw("amax", qc[i].amax ? rvec(1, 1) : NULL, qc[i].amax ? FL(1) : 0);
		tb_in(x, FL(n));
		run_test("fp8_quantize", HAS_FP8(fp8_quantize),
			 LABEL("%dx%d blocks %dx%d %s %s%s%s%s%s", qc[i].rows, qc[i].cols, f8.t.br, f8.t.bc,
			       fmt_name(f8.t.fmt), how_name(f8.how.how), qc[i].pow2 ? " pow2" : "",
			       qc[i].tr ? " transpose" : "", qc[i].amax ? " amax" : "", qc[i].special ? " NaN, -Inf" : ""),
			 r_fp8_quantize, &c, NULL, 0);
	}

	/* transpose: rows, cols, blocks (0: the whole dimension); random bytes as codes (NaN codes too),
	 * random scales; around the 32 x 32 tiles, and (big) more rows of tiles than a grid's y holds */
	struct {
		int rows, cols, br, bc, big;
	} tc[] = {
		{ 1, 1, 0, 0, 0 },     { 37, 300, 0, 0, 0 },         { 300, 200, 128, 128, 0 }, { 200, 300, 1, 128, 0 },
		{ 33, 64, 1, 32, 0 },  { 70, 45, 32, 1, 0 },         { 64, 96, 7, 5, 0 },       { 0, 5, 0, 0, 0 },
		{ 1000, 1537, 128, 128, 0 }, { 4096, 4096, 1, 128, 1 }, { 2100001, 3, 128, 1, 1 },
	};
	for (int i = 0; i < (int)(sizeof tc / sizeof *tc); i++) {
		if (tc[i].big && !big)
			continue;
		struct cfg c = { 0 };
		fresh();
		const int R = tc[i].rows, C = tc[i].cols;
		f8.t = (struct kops_fp8_tensor){ .rows = R, .cols = C, .br = tc[i].br ? tc[i].br : (R ? R : 1),
						 .bc = tc[i].bc ? tc[i].bc : C, .fmt = i % 2 ? KOPS_E5M2 : KOPS_E4M3 };
		const size_t n = (size_t)R * C, nb = nblocks(&f8.t);
		uint8_t *q = hnew(n);
		for (size_t j = 0; j < n; j++)
			q[j] = (uint8_t)rnext();
		tb_raw("sinv", NULL, FL(nb));
		tb_raw("q", NULL, n);
		tb_in(nb ? rpos(nb, 0.01f, 100.0f) : NULL, FL(nb));
		tb_in(n ? q : NULL, n);
		run_test("fp8_transpose", HAS_FP8(fp8_transpose),
			 LABEL("%dx%d blocks %dx%d %s", R, C, f8.t.br, f8.t.bc, fmt_name(f8.t.fmt)), r_fp8_transpose,
			 &c, NULL, 0);
	}

	/* shards of a block-scaled tensor (the distributed optimizer's FP8 weights): rows, cols, blocks,
	 * format, pow2, ranges (uneven, cut inside rows and blocks), part (-1: all; else that range alone,
	 * the codes of the others left as they were), special (a NaN and a -Inf among the values, the grid
	 * raised from random values of both signs), big */
	struct {
		int rows, cols, br, bc, fmt, pow2, parts, part, special, big;
	} sc[] = {
		{ 300, 200, 128, 128, KOPS_E4M3, 1, 1, -1, 0, 0 }, { 300, 200, 128, 128, KOPS_E4M3, 1, 3, -1, 0, 0 },
		{ 200, 333, 1, 128, KOPS_E5M2, 1, 5, -1, 0, 0 },   { 37, 300, 32, 1, KOPS_E4M3, 1, 2, -1, 0, 0 },
		{ 130, 70, 128, 128, KOPS_E4M3, 0, 5, -1, 0, 0 },  { 200, 333, 128, 128, KOPS_E4M3, 1, 3, -1, 1, 0 },
		{ 300, 200, 1, 128, KOPS_E4M3, 1, 5, 2, 1, 0 },    { 1, 500, 128, 128, KOPS_E5M2, 1, 3, -1, 0, 0 },
		/* rows shorter than a warp: one block's values in several runs of a warp's lanes */
		{ 70, 10, 32, 1, KOPS_E5M2, 1, 3, -1, 1, 0 },      { 64, 24, 7, 5, KOPS_E4M3, 0, 2, -1, 0, 0 },
		{ 2048, 3000, 128, 128, KOPS_E4M3, 1, 5, -1, 0, 1 },
	};
	for (int i = 0; i < (int)(sizeof sc / sizeof *sc); i++) {
		if (sc[i].big && !big)
			continue;
		const int R = sc[i].rows, C = sc[i].cols;
		const size_t n = (size_t)R * C;
		fresh();
		f8.t = (struct kops_fp8_tensor){ .rows = R, .cols = C, .br = sc[i].br, .bc = sc[i].bc,
						 .fmt = (enum kops_fp8)sc[i].fmt };
		f8.how = (struct kops_fp8_quant){ .how = KOPS_FP8_AMAX, .pow2 = sc[i].pow2 };
		f8.parts = sc[i].parts;
		f8.part = sc[i].part;
		f8.cut[0] = 0;
		for (int p = 1; p < f8.parts; p++) { /* about even, give or take a third */
			size_t even = n / (size_t)f8.parts;
			f8.cut[p] = even * (size_t)p - even / 3 + (size_t)rint_below((int)(2 * (even / 3) + 1));
		}
		f8.cut[f8.parts] = n;
		const size_t nb = nblocks(&f8.t);
		float *x = fp8_values(R, C, 4);
		float *grid = hnew(FL(nb)), *red = hnew(FL(nb));
		if (sc[i].special) {
			x[(size_t)(R / 2) * C + 7] = NAN;
			x[n - 3] = -INFINITY;
			for (size_t b = 0; b < nb; b++)
				grid[b] = (float)((2 * runif() - 1) * 0.5);
		}
		memcpy(red, grid, FL(nb));
		for (int p = 0; p < f8.parts; p++) /* the reduced grid the casts take, on the host */
			if (f8.part < 0 || p == f8.part)
				ref_fp8_amax_blocks(red, x + f8.cut[p], f8.cut[p + 1] - f8.cut[p], f8.cut[p], &f8.t);
		char cuts[96] = "";
		int cl = 0;
		for (int p = 1; p < f8.parts && cl < (int)sizeof cuts - 24; p++)
			cl += snprintf(cuts + cl, sizeof cuts - (size_t)cl, "%s%zu", p > 1 ? "," : "", f8.cut[p]);
		char what[256];
		snprintf(what, sizeof what, "%dx%d blocks %dx%d %s%s, %d ranges%s%s%s", R, C, sc[i].br, sc[i].bc,
			 fmt_name(f8.t.fmt), sc[i].pow2 ? " pow2" : "", f8.parts, f8.parts > 1 ? " cut at " : "",
			 cuts, sc[i].special ? ", NaN, -Inf" : "");
		/* x and the reduced grid outlive the first test's arena */
		float *xs = malloc(FL(n)), *reds = malloc(FL(nb) + 1);
		if (!xs || !reds) {
			fprintf(stderr, "parity: out of host memory\n");
			exit(2);
		}
		memcpy(xs, x, FL(n));
		memcpy(reds, red, FL(nb));
		struct cfg c = { 0 };
		tb_raw("amax", grid, FL(nb));
		tb_in(x, FL(n));
		char part[32] = "";
		if (f8.part >= 0)
			snprintf(part, sizeof part, ", range %d", f8.part);
		run_test("fp8_amax_blocks", HAS_FP8(fp8_amax_blocks), LABEL("%.100s%.20s", what, part),
			 r_fp8_amax_blocks, &c, NULL, 0);
		uint8_t *q0 = hnew(n);
		memset(q0, 0xa5, n);
		tb_raw("sinv", NULL, FL(nb));
		tb_raw("q", q0, n);
		tb_in(reds, FL(nb));
		tb_in(xs, FL(n));
		run_test("fp8_quantize_blocks", HAS_FP8(fp8_quantize_blocks), LABEL("%.100s%.20s", what, part),
			 r_fp8_quantize_blocks, &c, NULL, 0);
		free(xs);
		free(reds);
	}

	/* GEMM: M, N, K, a's and b's format, blocks (0: per tensor), bias, accumulate */
	struct {
		int M, N, K, fa, fb, abr, abc, bbr, bbc, bias, acc;
		const char *what;
	} gc[] = {
		{ 37, 96, 128, KOPS_E4M3, KOPS_E4M3, 0, 0, 0, 0, 0, 0, "cuBLASLt fprop" },
		{ 37, 96, 128, KOPS_E4M3, KOPS_E4M3, 0, 0, 0, 0, 1, 0, "cuBLASLt fprop, bias" },
		{ 40, 64, 96, KOPS_E5M2, KOPS_E4M3, 0, 0, 0, 0, 0, 0, "cuBLASLt hybrid dgrad" },
		{ 64, 48, 80, KOPS_E4M3, KOPS_E5M2, 0, 0, 0, 0, 0, 1, "cuBLASLt hybrid wgrad, accumulate" },
		{ 37, 96, 128, KOPS_E5M2, KOPS_E5M2, 0, 0, 0, 0, 0, 0, "E5M2 x E5M2: dequantized" },
		{ 37, 90, 100, KOPS_E4M3, KOPS_E4M3, 0, 0, 0, 0, 1, 0, "unaligned: dequantized" },
		{ 37, 96, 300, KOPS_E4M3, KOPS_E4M3, 1, 128, 128, 128, 1, 0, "1x128 x 128x128 blocks, bias" },
		{ 37, 96, 300, KOPS_E5M2, KOPS_E4M3, 1, 128, 1, 128, 0, 1, "1x128 blocks, accumulate" },
		{ 33, 64, 96, KOPS_E4M3, KOPS_E4M3, 1, 32, 1, 32, 0, 0, "MX 1x32 blocks" },
	};
	for (int i = 0; i < (int)(sizeof gc / sizeof *gc); i++) {
		struct cfg c = { 0 };
		fresh();
		struct kops_fp8_tensor a, b;
		enum kops_fp8_scaling ha = gc[i].abr ? (gc[i].abc == 32 ? KOPS_FP8_MX : KOPS_FP8_AMAX) : KOPS_FP8_GIVEN;
		enum kops_fp8_scaling hb = gc[i].bbr ? (gc[i].bbc == 32 ? KOPS_FP8_MX : KOPS_FP8_AMAX) : KOPS_FP8_GIVEN;
		fp8_operand(&a, gc[i].M, gc[i].K, gc[i].abr ? gc[i].abr : gc[i].M, gc[i].abc ? gc[i].abc : gc[i].K,
			    (enum kops_fp8)gc[i].fa, ha, 2);
		fp8_operand(&b, gc[i].N, gc[i].K, gc[i].bbr ? gc[i].bbr : gc[i].N, gc[i].bbc ? gc[i].bbc : gc[i].K,
			    (enum kops_fp8)gc[i].fb, hb, 0.1f);
		f8.t = a;
		f8.b = b;
		f8.accumulate = gc[i].acc;
		tb_out("out", rvec((size_t)gc[i].M * gc[i].N, 3), FL((size_t)gc[i].M * gc[i].N), TOL_FP8_GEMM);
		tb_in(a.q, (size_t)a.rows * a.cols);
		tb_in(a.sinv, FL(nblocks(&a)));
		tb_in(b.q, (size_t)b.rows * b.cols);
		tb_in(b.sinv, FL(nblocks(&b)));
		tb_in(gc[i].bias ? rvec(gc[i].N, 1) : NULL, gc[i].bias ? FL(gc[i].N) : 0);
		struct kops_cuda_stats st0, st1;
		kops_cuda_get_stats(&st0);
		run_test("fp8_gemm", HAS_FP8(fp8_gemm),
			 LABEL("M=%d N=%d K=%d %s x %s, %s", gc[i].M, gc[i].N, gc[i].K, fmt_name(a.fmt), fmt_name(b.fmt),
			       gc[i].what),
			 r_fp8_gemm, &c, NULL, 0);
		kops_cuda_get_stats(&st1);
		/* which path the CUDA table took (make test's emulated run wants cuBLASLt's for the 4
		 * cases so named: a fallback would hide a layout cuBLASLt refuses) */
		if (!host_table(GPU) && (!only || strstr("fp8_gemm", only)))
			printf("#   fp8_gemm path: %s%s\n", st1.fp8_lt_gemms > st0.fp8_lt_gemms ? "cuBLASLt FP8" : "dequantized",
			       strstr(gc[i].what, "cuBLASLt") ? " (cuBLASLt FP8 wanted)" : "");
	}
}

/* --perturb: the CPU table with planted faults, to see the harness catch them */
static struct kops bad_table;
static void bad_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
			       int IC, int OC)
{
	kops_cpu()->linear_forward(out, inp, weight, bias, N, IC, OC);
	out[(size_t)N * OC - 1] += 1e-3f; /* the last element: a missed tail */
}
static void bad_dropout_add_forward(float *out, const float *residual, const float *x, size_t n, float p,
				    uint64_t seed, uint64_t offset)
{
	kops_cpu()->dropout_add_forward(out, residual, x, n, p, seed, offset + 1); /* masks shifted by one */
}
static int bad_nonfinite(const float *x, size_t n) { return kops_cpu()->nonfinite(x, n > 1 ? n - 1 : n); }
static void bad_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
		      float eps, float wd, int step)
{
	kops_cpu()->adamw(p, g, m, v, n, lr * 1.001f, b1, b2, eps, wd, step);
}
static const struct kops *perturbed(void)
{
	bad_table = *kops_cpu();
	bad_table.name = "cpu-perturbed";
	bad_table.linear_forward = bad_linear_forward;
	bad_table.dropout_add_forward = bad_dropout_add_forward;
	bad_table.nonfinite = bad_nonfinite;
	bad_table.adamw = bad_adamw;
	bad_table.gelu_forward = NULL; /* "not on the GPU yet" */
	return &bad_table;
}

/* Every op of the fp32 table and of the two half tables ran here, or is the
 * very function of the fp32 table that ran (the half tables take most ops
 * from it). In --self and --perturb the table under test is all three. */
static void coverage(bool stand_in)
{
	if (only) /* --only runs a part by design */
		return;
	const struct kops *t[3] = { GPU, NULL, NULL };
	for (int kind = KOPS_ROUND_BF16; kind <= KOPS_ROUND_FP16 && !stand_in; kind++)
		t[1 + kind - KOPS_ROUND_BF16] = kops_cuda_half((enum kops_round)kind, NULL);
	int own = 0, shared = 0;
	char missed[1024] = "";
	size_t ml = 0;
	for (int j = 0; j < 3; j++) {
		if (!t[j] || (j > 0 && stand_in))
			continue;
		for (int i = 0; i < kops_count(); i++) {
			kops_fn fn = kops_op(t[j], i);
			if (!fn && kops_op_optional(i)) /* not on this backend yet (ops.h) */
				continue;
			if (fn && was_tested(t[j], i))
				own++;
			else if (fn && j > 0 && fn == kops_op(GPU, i) && was_tested(GPU, i))
				shared++;
			else if (ml < sizeof missed - 80)
				ml += (size_t)snprintf(missed + ml, sizeof missed - ml, " %s:%s%s", t[j]->name, kops_op_name(i),
						       fn ? "" : "(NULL)");
		}
	}
	printf("%s - coverage: every op of the %s%s%s tables ran (%d op-table pairs run, %d the fp32 table's own "
	       "function that ran)%s%s\n",
	       ml ? "not ok" : "ok", GPU->name, t[1] ? ", " : "", t[1] ? "bf16 and fp16" : "", own, shared,
	       ml ? "; never run:" : "", missed);
	ml ? n_fail++ : n_pass++;
}

static void print_timings(void)
{
	fprintf(stderr, "\n# timings, ms per call (mean of %d after a warm-up; wall clock, %s vs %s)\n", reps,
		CPU->name, GPU->name);
	fprintf(stderr, "%-26s %-58s %10s %10s %8s\n", "op", "config", "cpu ms", "gpu ms", "speedup");
	for (int i = 0; i < ntimings; i++) {
		struct timing *t = &timings[i];
		fprintf(stderr, "%-26s %-58s %10.3f %10.3f %8.1f\n", t->op, t->label, t->cpu_ms, t->gpu_ms,
			t->gpu_ms > 0 ? t->cpu_ms / t->gpu_ms : 0.0);
	}
}

int main(int argc, char **argv)
{
	bool self = false, perturb = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--self"))
			self = true;
		else if (!strcmp(argv[i], "--perturb"))
			perturb = true;
		else if (!strcmp(argv[i], "--no-big"))
			big = 0;
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed0 = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--self | --perturb] [--no-big] [--seed N] [--reps N] [--only TEXT]\n",
				argv[0]);
			return 2;
		}
	}
	CPU = kops_cpu();
	if (perturb)
		GPU = perturbed();
	else if (self)
		GPU = kops_cpu();
	else {
		const char *why = NULL;
		GPU = kops_cuda(&why);
		if (!GPU) {
			printf("1..0 # SKIP %s\n", why ? why : "no CUDA op table");
			return 0;
		}
		if (!GPU->alloc || !GPU->free || !GPU->to_device || !GPU->to_host) {
			printf("1..0 # SKIP the CUDA table has no memory ops yet\n");
			return 0;
		}
	}
	printf("# parity: %s vs %s, seed %llu\n", GPU->name, CPU->name, (unsigned long long)seed0);
	test_memory();
	test_linear();
	test_linear_half(self || perturb);
	test_embedding();
	test_norms();
	test_gelu_swiglu();
	test_dropout();
	test_vector();
	test_adamw();
	test_segs();
	test_moe_combine();
	test_xent();
	test_qkv();
	test_attention();
	test_attention_block();
	test_attention_block_half(self || perturb);
	test_fp8();
	test_ssm_conv();
	test_ssd_scan();
	test_gated_rmsnorm();
	coverage(self || perturb);
	print_timings();
	printf("1..%d\n", n_pass + n_fail);
	printf("%d passed, %d failed\n", n_pass, n_fail);
	return n_fail ? 1 : 0;
}
