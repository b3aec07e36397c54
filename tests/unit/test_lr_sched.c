/*
 * test_lr_sched.c - lib/optim/lr_sched and lib/optim/grad_scaler.
 *
 * The schedule is compared, for every decay style, WSD anneal style and
 * weight-decay ramp, at thousands of steps, with a Python transcription of
 * the formulas of Megatron's OptimizerParamScheduler
 * (megatron/core/optimizer_param_scheduler.py) run by /usr/bin/python3
 * (relative tolerance 1e-12; in practice the values are identical, since
 * both sides make the same libm calls in the same order). The derivation of
 * W, D, A from the flags, the argument checks and the loss scaler's
 * sequences are checked against hand-derived values.
 */
#include <math.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "optim/grad_scaler.h"
#include "optim/lr_sched.h"
#include "test.h"

/* ---------------------------------------------------------------- cases */

struct sched_case {
	enum lr_sched_style style;
	enum lr_sched_wsd_style wsd;
	double max_lr, min_lr, init_lr, warmup;
	int64_t decay, wsd_decay;
	enum lr_sched_wd_style wd;
	double start_wd, end_wd;
	int64_t wd_steps;
	int64_t gbs; /* the stride lr_sched_step is exercised with */
};

#define C_ LR_SCHED_CONSTANT
#define L_ LR_SCHED_LINEAR
#define CO LR_SCHED_COSINE
#define IS LR_SCHED_INV_SQRT
#define WS LR_SCHED_WSD
#define XW LR_SCHED_WSD_EXPONENTIAL
#define WDC LR_SCHED_WD_CONSTANT
#define WDL LR_SCHED_WD_LINEAR
#define WDO LR_SCHED_WD_COSINE

static const struct sched_case cases[] = {
	/* style wsd  max     min     init    W      D     A    wd   start end  wdsteps gbs */
	{ L_, XW, 3e-4, 3e-5, 0.0, 0, 1000, -1, WDC, 0.1, 0.1, 1000, 8 },       /* no warmup */
	{ L_, XW, 3e-4, 3e-5, 0.0, 100, 1000, -1, WDL, 0.01, 0.1, 1000, 4 },  /* warmup */
	{ L_, XW, 6e-4, 6e-5, 1e-5, 64, 1024, -1, WDO, 0.0, 0.1, 1024, 16 }, /* init lr */
	{ CO, XW, 3e-4, 3e-5, 0.0, 100, 1000, -1, WDO, 0.01, 0.1, 1100, 4 },
	{ CO, XW, 1.5e-4, 0.0, 0.0, 0, 999, -1, WDL, 0.0, 0.05, 700, 3 },
	{ CO, XW, 1e-3, 1e-4, 2e-4, 37, 777, -1, WDC, 0.0, 0.0, 777, 7 },
	{ C_, XW, 2e-4, 0.0, 0.0, 0, 500, -1, WDC, 0.01, 0.01, 500, 5 },
	{ C_, XW, 2e-4, 1e-5, 0.0, 50, 500, -1, WDL, 0.0, 0.02, 500, 5 },
	{ IS, XW, 1e-3, 0.0, 0.0, 50, 1000, -1, WDC, 0.1, 0.1, 1000, 10 },
	{ IS, XW, 1e-3, 2e-4, 0.0, 0, 1000, -1, WDC, 0.1, 0.1, 1000, 10 },
	{ IS, XW, 1e-3, 1e-4, 1e-6, 1, 1000, -1, WDO, 0.02, 0.2, 900, 1 },
	{ WS, LR_SCHED_WSD_LINEAR, 3e-4, 3e-5, 0.0, 20, 1000, 300, WDC, 0.1, 0.1, 1000, 4 },
	{ WS, LR_SCHED_WSD_COSINE, 3e-4, 3e-5, 0.0, 20, 1000, 300, WDL, 0.0, 0.1, 1000, 4 },
	{ WS, LR_SCHED_WSD_EXPONENTIAL, 3e-4, 3e-5, 0.0, 20, 1000, 300, WDO, 0.0, 0.1, 1000, 4 },
	{ WS, LR_SCHED_WSD_MINUS_SQRT, 3e-4, 3e-5, 1e-6, 20, 1000, 300, WDC, 0.1, 0.1, 1000, 4 },
	{ WS, LR_SCHED_WSD_EXPONENTIAL, 3e-4, 0.0, 0.0, 0, 1000, 1000, WDC, 0.1, 0.1, 1000, 4 },
	{ WS, LR_SCHED_WSD_LINEAR, 3e-4, 1e-5, 0.0, 100, 1000, 0, WDC, 0.1, 0.1, 1000, 4 },
	/* fractional warmup (--lr-warmup-fraction 0.013 × D) at a realistic size */
	{ CO, XW, 3e-4, 3e-5, 0.0, 0.013 * 262144000.0, 262144000, -1, WDO, 0.01, 0.1,
	  262144000, 512 },
	{ WS, LR_SCHED_WSD_MINUS_SQRT, 2e-4, 2e-5, 0.0, 0.01 * 1234567.0, 1234567, 123456, WDL, 0.0,
	  0.1, 1234567, 1 },
	{ IS, XW, 1e-3, 0.0, 0.0, 0.37 * 1000.0, 1000, -1, WDC, 0.0, 0.0, 1000, 3 },
	{ L_, XW, 1e-3, 0.0, 0.0, 0.5, 10, -1, WDL, 0.0, 1.0, 10, 1 },
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

static struct lr_sched make(const struct sched_case *c)
{
	struct lr_sched s;
	int rc = lr_sched_init(&s, (struct lr_sched){
		.max_lr = c->max_lr, .min_lr = c->min_lr, .init_lr = c->init_lr,
		.warmup_steps = c->warmup, .decay_steps = c->decay, .wsd_decay_steps = c->wsd_decay,
		.style = c->style, .wsd_style = c->wsd, .start_wd = c->start_wd, .end_wd = c->end_wd,
		.wd_incr_steps = c->wd_steps, .wd_style = c->wd });
	if (rc)
		BUG("test case rejected");
	return s;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The steps a case is evaluated at: every step of small schedules, and for
 * large ones a sweep plus the neighbourhood of every boundary. */
static int64_t *case_steps(const struct sched_case *c, size_t *count)
{
	size_t cap = 4096, n = 0;
	int64_t *v = malloc(cap * sizeof(*v));
	int64_t end = c->decay + c->decay / 10 + 5;
	if (end <= 2000) {
		for (int64_t i = 0; i <= end; i++)
			v[n++] = i;
	} else {
		for (int i = 0; i <= 1000; i++)
			v[n++] = (int64_t)((double)end * i / 1000.0);
		const int64_t marks[] = { (int64_t)c->warmup, c->decay - c->wsd_decay, c->decay,
					  c->wd_steps };
		for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++)
			for (int64_t d = -3; d <= 3; d++)
				if (marks[m] + d >= 0)
					v[n++] = marks[m] + d;
	}
	qsort(v, n, sizeof(*v), cmp_i64);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!k || v[i] != v[k - 1])
			v[k++] = v[i];
	*count = k;
	return v;
}

/* The Python side: Megatron's formulas written out afresh, not a port of
 * lr_sched.c; it reads the cases and our values and prints one line of
 * verdicts. */
static const char py_check[] =
	"import math, sys\n"
	"def lr_at(c, n):\n"
	"    W, D = c['W'], c['D']\n"
	"    mx, mn, init = c['max'], c['min'], c['init']\n"
	"    if W > 0 and n <= W:\n"
	"        return init + (mx - init) * float(n) / float(W)\n"
	"    if c['style'] == 'constant':\n"
	"        return mx\n"
	"    if n > D:\n"
	"        return mn\n"
	"    if c['style'] == 'inverse-square-root':\n"
	"        return max(mn, mx * max(W, 1) ** 0.5 / max(n, 1) ** 0.5)\n"
	"    rho = float(n - W) / float(D - W)\n"
	"    s = c['style']\n"
	"    if s == 'linear':\n"
	"        k = 1.0 - rho\n"
	"    elif s == 'cosine':\n"
	"        k = 0.5 * (math.cos(math.pi * rho) + 1.0)\n"
	"    elif s == 'WSD':\n"
	"        s0 = D - c['A']\n"
	"        if n <= s0:\n"
	"            k = 1.0\n"
	"        else:\n"
	"            r = float(n - s0) / float(c['A'])\n"
	"            k = {'linear': lambda: 1.0 - r,\n"
	"                 'cosine': lambda: 0.5 * (math.cos(math.pi * r) + 1.0),\n"
	"                 'exponential': lambda: 2.0 * math.pow(0.5, r) - 1.0,\n"
	"                 'minus_sqrt': lambda: 1.0 - math.sqrt(r)}[c['wsd']]()\n"
	"    else:\n"
	"        raise SystemExit('style ' + s)\n"
	"    return mn + k * (mx - mn)\n"
	"def wd_at(c, n):\n"
	"    a, b, T = c['start'], c['end'], c['wdsteps']\n"
	"    if c['wd'] == 'constant' or n > T:\n"
	"        return b\n"
	"    t = float(n) / float(T)\n"
	"    k = t if c['wd'] == 'linear' else 0.5 * (math.cos(math.pi * (1.0 - t)) + 1.0)\n"
	"    return a + k * (b - a)\n"
	"def num(x):\n"
	"    f = float(x)\n"
	"    return int(f) if f == int(f) and 'e' not in x and '.' not in x else f\n"
	"cases, rows = {}, []\n"
	"for line in open(sys.argv[1] + '/values.txt'):\n"
	"    t = line.split()\n"
	"    if t[0] == 'case':\n"
	"        keys = ['style', 'wsd', 'max', 'min', 'init', 'W', 'D', 'A', 'wd', 'start', 'end', 'wdsteps']\n"
	"        c = dict(zip(keys, t[2:]))\n"
	"        for k in ('max', 'min', 'init', 'start', 'end'):\n"
	"            c[k] = float(c[k])\n"
	"        for k in ('W', 'D', 'A', 'wdsteps'):\n"
	"            c[k] = num(c[k])\n"
	"        cases[int(t[1])] = c\n"
	"    else:\n"
	"        rows.append((int(t[0]), int(t[1]), float(t[2]), float(t[3])))\n"
	"bad = exact = 0\n"
	"for i, n, lr, wd in rows:\n"
	"    for ours, ref, what in ((lr, lr_at(cases[i], n), 'lr'), (wd, wd_at(cases[i], n), 'wd')):\n"
	"        if ours == ref:\n"
	"            exact += 1\n"
	"        elif abs(ours - ref) > 1e-12 * abs(ref):\n"
	"            bad += 1\n"
	"            if bad <= 10:\n"
	"                print('case', i, 'step', n, what, repr(ours), '!=', repr(ref))\n"
	"print('values', 2 * len(rows), 'exact', exact, 'bad', bad, 'cases', len(cases))\n";

/* Every case at every chosen step, against the Python transcription. */
static void test_matches_formulas(void)
{
	char *dir = test_tmpdir("lr_sched");
	char path[4200];
	snprintf(path, sizeof(path), "%s/values.txt", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	size_t total = 0;
	for (size_t i = 0; i < NCASES; i++) {
		const struct sched_case *c = &cases[i];
		struct lr_sched s = make(c);
		/* W as an integer when it is one, so Python sees Megatron's int */
		char w[64];
		if (c->warmup == floor(c->warmup))
			snprintf(w, sizeof(w), "%" PRId64, (int64_t)c->warmup);
		else
			snprintf(w, sizeof(w), "%.17g", c->warmup);
		fprintf(f, "case %zu %s %s %.17g %.17g %.17g %s %" PRId64 " %" PRId64 " %s %.17g %.17g %" PRId64 "\n",
			i, lr_sched_style_name(c->style), lr_sched_wsd_style_name(c->wsd), c->max_lr,
			c->min_lr, c->init_lr, w, c->decay, c->wsd_decay, lr_sched_wd_style_name(c->wd),
			c->start_wd, c->end_wd, c->wd_steps);
		size_t n;
		int64_t *steps = case_steps(c, &n);
		for (size_t k = 0; k < n; k++)
			fprintf(f, "%zu %" PRId64 " %.17g %.17g\n", i, steps[k], lr_sched_lr(&s, steps[k]),
				lr_sched_wd(&s, steps[k]));
		total += n;
		free(steps);
	}
	fclose(f);
	char *out = test_python(dir, "", py_check);
	CHECK(out != NULL);
	if (out) {
		char expect[128];
		snprintf(expect, sizeof(expect), "values %zu exact ", 2 * total);
		CHECK(strstr(out, expect) != NULL);
		CHECK(strstr(out, " bad 0 cases ") != NULL);
		if (!strstr(out, " bad 0 cases "))
			printf("#   %s", out);
		free(out);
	}
	free(dir);
}

/* A few values worked out by hand, so the test does not rest on the Python
 * transcription alone. */
static void test_hand_values(void)
{
	/* linear, W = 100, D = 1000, 3e-4 → 3e-5 */
	struct lr_sched s = make(&cases[1]);
	CHECK(lr_sched_lr(&s, 0) == 0.0);
	CHECK(fabs(lr_sched_lr(&s, 50) - 1.5e-4) < 1e-18);
	CHECK(lr_sched_lr(&s, 100) == 3e-4);
	CHECK(fabs(lr_sched_lr(&s, 550) - (3e-5 + 0.5 * 2.7e-4)) < 1e-18);
	CHECK(lr_sched_lr(&s, 1000) == 3e-5);
	CHECK(lr_sched_lr(&s, 5000) == 3e-5);
	CHECK(fabs(lr_sched_wd(&s, 500) - 0.055) < 1e-15);
	CHECK(lr_sched_wd(&s, 2000) == 0.1);

	/* cosine midpoint: exactly halfway between max and min */
	s = make(&cases[3]);
	CHECK(fabs(lr_sched_lr(&s, 550) - 1.65e-4) < 1e-18);
	CHECK(fabs(lr_sched_wd(&s, 550) - 0.055) < 1e-15); /* cosine wd midpoint */

	/* inverse square root: max·√W/√n, floored at min */
	s = make(&cases[8]);
	CHECK(lr_sched_lr(&s, 50) == 1e-3);
	CHECK(fabs(lr_sched_lr(&s, 200) - 5e-4) < 1e-18);
	CHECK(lr_sched_lr(&s, 1001) == 0.0); /* past D: min */
	s = make(&cases[9]);
	CHECK(lr_sched_lr(&s, 0) == 1e-3); /* max(n, 1): no division by zero */
	CHECK(fabs(lr_sched_lr(&s, 16) - 2.5e-4) < 1e-18);
	CHECK(lr_sched_lr(&s, 100) == 2e-4); /* 1e-4 < min */

	/* WSD, W = 20, D = 1000, A = 300: stable until 700 */
	s = make(&cases[13]); /* exponential */
	CHECK(fabs(lr_sched_lr(&s, 700) - 3e-4) < 1e-18);
	CHECK(fabs(lr_sched_lr(&s, 1000) - 3e-5) < 1e-18);
	CHECK(fabs(lr_sched_lr(&s, 850) - (3e-5 + (2 * sqrt(0.5) - 1) * 2.7e-4)) < 1e-18);
	s = make(&cases[12]); /* cosine */
	CHECK(fabs(lr_sched_lr(&s, 850) - 1.65e-4) < 1e-18);
	s = make(&cases[14]); /* minus_sqrt */
	CHECK(fabs(lr_sched_lr(&s, 775) - (3e-5 + 0.5 * 2.7e-4)) < 1e-18);
	s = make(&cases[16]); /* A = 0: never anneals, drops to min past D */
	CHECK(fabs(lr_sched_lr(&s, 1000) - 3e-4) < 1e-18);
	CHECK(lr_sched_lr(&s, 1001) == 1e-5);

	/* constant: max after warmup, even past D */
	s = make(&cases[7]);
	CHECK(fabs(lr_sched_lr(&s, 25) - 1e-4) < 1e-18);
	CHECK(lr_sched_lr(&s, 10000) == 2e-4);

	/* fractional warmup W = 0.5: step 0 is warmup, step 1 already decays */
	s = make(&cases[20]);
	CHECK(lr_sched_lr(&s, 0) == 0.0);
	CHECK(lr_sched_lr(&s, 1) == 1e-3 * (1.0 - 0.5 / 9.5));

	/* per-group max/min (decoupled lr) */
	s = make(&cases[1]);
	CHECK(lr_sched_lr_group(&s, 100, 1e-3, 1e-4) == 1e-3);
	CHECK(lr_sched_lr_group(&s, 1000, 1e-3, 1e-4) == 1e-4);
	CHECK(lr_sched_wd_group(&s, 1000, 0.0, 0.2) == 0.2);
}

/* lr_sched_step: the current lr after k steps of gbs is lr(k·gbs). */
static void test_step(void)
{
	for (size_t i = 0; i < NCASES; i++) {
		if (cases[i].decay > 100000)
			continue;
		struct lr_sched s = make(&cases[i]);
		CHECK_INT(s.num_steps, 0);
		for (int k = 0; k < 400; k++) {
			CHECK(lr_sched_current_lr(&s) == lr_sched_lr(&s, k * cases[i].gbs));
			CHECK(lr_sched_current_wd(&s) == lr_sched_wd(&s, k * cases[i].gbs));
			lr_sched_step(&s, cases[i].gbs);
		}
		CHECK_INT(s.num_steps, 400 * cases[i].gbs);
	}
}

/* ---------------------------------------------------------------- checks */

/* lr_sched_init on p: the return code, and the message must name `flag`. */
static void expect_reject(struct lr_sched p, const char *flag)
{
	struct test_capture cap;
	struct lr_sched s;
	memset(&s, 0x5a, sizeof(s));
	test_capture_begin(&cap, 2);
	int rc = lr_sched_init(&s, p);
	char *msg = test_capture_end(&cap);
	CHECK_INT(rc, -1);
	CHECK(msg && strstr(msg, flag));
	if (!msg || !strstr(msg, flag))
		printf("#   message: %s (wanted %s)\n", msg ? msg : "(none)", flag);
	CHECK(((unsigned char *)&s)[0] == 0x5a); /* untouched */
	free(msg);
}

static void test_init_checks(void)
{
	const struct lr_sched ok = { .max_lr = 1e-3, .min_lr = 1e-4, .init_lr = 0.0,
				     .warmup_steps = 10, .decay_steps = 100, .wsd_decay_steps = -1,
				     .style = LR_SCHED_COSINE, .start_wd = 0.1, .end_wd = 0.1,
				     .wd_incr_steps = 100, .wd_style = LR_SCHED_WD_CONSTANT,
				     .num_steps = 77 };
	struct lr_sched s, p;
	CHECK_INT(lr_sched_init(&s, ok), 0);
	CHECK_INT(s.num_steps, 0);
	CHECK(s.max_lr == 1e-3 && s.decay_steps == 100);

	p = ok, p.decay_steps = 0;
	expect_reject(p, "--lr-decay-iters");
	p = ok, p.warmup_steps = 100;
	expect_reject(p, "--lr-warmup-iters");
	p = ok, p.warmup_steps = -1;
	expect_reject(p, "--lr-warmup-fraction");
	p = ok, p.min_lr = 2e-3;
	expect_reject(p, "--min-lr");
	p = ok, p.min_lr = -1e-5;
	expect_reject(p, "--min-lr");
	p = ok, p.init_lr = 2e-3;
	expect_reject(p, "--lr-warmup-init");
	p = ok, p.max_lr = NAN;
	expect_reject(p, "--lr");
	p = ok, p.style = LR_SCHED_WSD;
	expect_reject(p, "--lr-wsd-decay-iters");
	p = ok, p.start_wd = 0.0;
	expect_reject(p, "--weight-decay-incr-style constant");
	p = ok, p.wd_style = LR_SCHED_WD_LINEAR, p.start_wd = 0.2;
	expect_reject(p, "--end-weight-decay");
	p = ok, p.wd_style = LR_SCHED_WD_LINEAR, p.start_wd = -0.1;
	expect_reject(p, "--start-weight-decay");
	p = ok, p.wd_style = LR_SCHED_WD_COSINE, p.start_wd = 0.0, p.wd_incr_steps = 0;
	expect_reject(p, "--weight-decay-incr-style cosine");

	/* the edges that are allowed */
	p = ok, p.warmup_steps = 99.5, p.min_lr = p.max_lr = p.init_lr = 0.0;
	CHECK_INT(lr_sched_init(&s, p), 0);
	p = ok, p.style = LR_SCHED_WSD, p.wsd_decay_steps = 0;
	CHECK_INT(lr_sched_init(&s, p), 0);
}

static void test_parse(void)
{
	static const char *const styles[] = { "constant", "linear", "cosine",
					      "inverse-square-root", "WSD" };
	static const char *const wsd[] = { "linear", "cosine", "exponential", "minus_sqrt" };
	static const char *const wd[] = { "constant", "linear", "cosine" };
	for (int i = 0; i < 5; i++) {
		enum lr_sched_style v;
		CHECK_INT(lr_sched_parse_style(styles[i], &v), 0);
		CHECK_STR(lr_sched_style_name(v), styles[i]);
	}
	for (int i = 0; i < 4; i++) {
		enum lr_sched_wsd_style v;
		CHECK_INT(lr_sched_parse_wsd_style(wsd[i], &v), 0);
		CHECK_STR(lr_sched_wsd_style_name(v), wsd[i]);
	}
	for (int i = 0; i < 3; i++) {
		enum lr_sched_wd_style v;
		CHECK_INT(lr_sched_parse_wd_style(wd[i], &v), 0);
		CHECK_STR(lr_sched_wd_style_name(v), wd[i]);
	}
	struct test_capture cap;
	enum lr_sched_style v;
	enum lr_sched_wsd_style w;
	enum lr_sched_wd_style d;
	test_capture_begin(&cap, 2);
	CHECK_INT(lr_sched_parse_style("wsd", &v), -1); /* case matters, as in argparse */
	CHECK_INT(lr_sched_parse_wsd_style("minus-sqrt", &w), -1);
	CHECK_INT(lr_sched_parse_wd_style("exponential", &d), -1);
	char *msg = test_capture_end(&cap);
	CHECK(msg && strstr(msg, "--lr-decay-style") && strstr(msg, "'inverse-square-root'"));
	CHECK(msg && strstr(msg, "--lr-wsd-decay-style") && strstr(msg, "'minus_sqrt'"));
	CHECK(msg && strstr(msg, "--weight-decay-incr-style"));
	free(msg);
}

/* ---------------------------------------------------------------- flags */

static int derive(struct lr_sched_flags f, struct lr_sched_steps *out, char **msg)
{
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	int rc = lr_sched_derive_steps(&f, out);
	char *m = test_capture_end(&cap);
	if (msg)
		*msg = m;
	else
		free(m);
	return rc;
}

static void expect_derive_error(struct lr_sched_flags f, const char *needle)
{
	struct lr_sched_steps st;
	char *msg;
	CHECK_INT(derive(f, &st, &msg), -1);
	CHECK(msg && strstr(msg, needle));
	if (!msg || !strstr(msg, needle))
		printf("#   message: %s (wanted %s)\n", msg ? msg : "(none)", needle);
	free(msg);
}

static void test_derive(void)
{
	const struct lr_sched_flags none = LR_SCHED_FLAGS_INIT;
	struct lr_sched_flags f;
	struct lr_sched_steps st;

	/* iteration-based: everything × gbs; decay defaults to train_iters */
	f = none, f.train_iters = 1000, f.global_batch_size = 32, f.lr_warmup_iters = 10;
	CHECK_INT(derive(f, &st, NULL), 0);
	CHECK_INT(st.decay_steps, 32000);
	CHECK(st.warmup_steps == 320.0);
	CHECK_INT(st.wsd_decay_steps, -1);
	CHECK_INT(st.wd_incr_steps, 32000);

	f.lr_decay_iters = 800, f.lr_wsd_decay_iters = 200;
	CHECK_INT(derive(f, &st, NULL), 0);
	CHECK_INT(st.decay_steps, 25600);
	CHECK_INT(st.wsd_decay_steps, 6400);
	CHECK_INT(st.wd_incr_steps, 32000); /* the wd ramp stays over train_iters */

	/* the fraction multiplies D, in floating point: 0.013 × 25600 */
	f.lr_warmup_iters = -1, f.lr_warmup_fraction = 0.013;
	CHECK_INT(derive(f, &st, NULL), 0);
	CHECK(st.warmup_steps == 0.013 * 25600.0);
	CHECK(st.warmup_steps != floor(st.warmup_steps));
	f.lr_warmup_iters = 0; /* explicit 0 is Megatron's default, so allowed */
	CHECK_INT(derive(f, &st, NULL), 0);

	/* no warmup flag: W = 0 */
	f = none, f.train_iters = 10, f.global_batch_size = 4;
	CHECK_INT(derive(f, &st, NULL), 0);
	CHECK(st.warmup_steps == 0.0);

	/* sample-based: counts are samples */
	f = none, f.train_samples = 100000, f.global_batch_size = 32, f.lr_warmup_samples = 1000;
	CHECK_INT(derive(f, &st, NULL), 0);
	CHECK_INT(st.decay_steps, 100000);
	CHECK(st.warmup_steps == 1000.0);
	CHECK_INT(st.wd_incr_steps, 100000);
	CHECK_INT(st.wsd_decay_steps, -1);
	f.lr_decay_samples = 90000, f.lr_wsd_decay_samples = 5000;
	f.lr_warmup_samples = -1, f.lr_warmup_fraction = 0.1;
	CHECK_INT(derive(f, &st, NULL), 0);
	CHECK_INT(st.decay_steps, 90000);
	CHECK_INT(st.wsd_decay_steps, 5000);
	CHECK(st.warmup_steps == 0.1 * 90000.0);
	f.global_batch_size = -1; /* not needed with samples */
	CHECK_INT(derive(f, &st, NULL), 0);

	/* Megatron's refusals */
	f = none;
	expect_derive_error(f, "--train-iters or --train-samples");
	f = none, f.train_iters = 10, f.train_samples = 100, f.global_batch_size = 4;
	expect_derive_error(f, "exclusive");
	f = none, f.train_iters = 10, f.global_batch_size = 4, f.lr_decay_samples = 100;
	expect_derive_error(f, "--lr-decay-samples");
	f = none, f.train_iters = 10, f.global_batch_size = 4, f.lr_warmup_samples = 5;
	expect_derive_error(f, "--lr-warmup-samples");
	f = none, f.train_iters = 10, f.global_batch_size = 4, f.lr_warmup_iters = 2;
	f.lr_warmup_fraction = 0.1;
	expect_derive_error(f, "--lr-warmup-fraction and --lr-warmup-iters");
	f = none, f.train_iters = 10;
	expect_derive_error(f, "--global-batch-size");
	f = none, f.train_samples = 100, f.lr_decay_iters = 5;
	expect_derive_error(f, "--lr-decay-iters");
	f = none, f.train_samples = 100, f.lr_warmup_iters = 5;
	expect_derive_error(f, "--lr-warmup-iters");
	f = none, f.train_samples = 100, f.lr_warmup_samples = 5, f.lr_warmup_fraction = 0.1;
	expect_derive_error(f, "--lr-warmup-fraction and --lr-warmup-samples");
	f = none, f.train_samples = 100, f.train_iters = 0;
	expect_derive_error(f, "exclusive");
	f = none, f.train_iters = INT64_MAX / 2, f.global_batch_size = 4;
	expect_derive_error(f, "overflows");

	/* a derived schedule goes through lr_sched_init's checks */
	f = none, f.train_iters = 100, f.global_batch_size = 8, f.lr_warmup_iters = 100;
	CHECK_INT(derive(f, &st, NULL), 0);
	struct test_capture cap;
	struct lr_sched s;
	test_capture_begin(&cap, 2);
	int rc = lr_sched_init(&s, (struct lr_sched){ .max_lr = 1e-3, .warmup_steps = st.warmup_steps,
						      .decay_steps = st.decay_steps,
						      .wsd_decay_steps = st.wsd_decay_steps,
						      .wd_incr_steps = st.wd_incr_steps });
	free(test_capture_end(&cap));
	CHECK_INT(rc, -1); /* W = D */
}

/* ---------------------------------------------------------------- scaler */

static void test_scaler_none_constant(void)
{
	struct grad_scaler g;
	grad_scaler_init_none(&g);
	CHECK(grad_scaler_scale(&g) == 1.0);
	CHECK(!grad_scaler_checks_overflow(&g));
	grad_scaler_update(&g, true);
	CHECK(grad_scaler_scale(&g) == 1.0);

	CHECK_INT(grad_scaler_init_constant(&g, 4096), 0);
	CHECK(grad_scaler_checks_overflow(&g));
	for (int i = 0; i < 5; i++)
		grad_scaler_update(&g, i & 1);
	CHECK(grad_scaler_scale(&g) == 4096.0);
	CHECK(grad_scaler_inv_scale(&g) == 1.0f / 4096.0f);

	/* Megatron's choice from the flags */
	struct grad_scaler_flags f = GRAD_SCALER_FLAGS_INIT;
	CHECK_INT(grad_scaler_init_flags(&g, &f), 0);
	CHECK(g.mode == GRAD_SCALER_NONE); /* fp32 */
	f.bf16 = true;
	CHECK_INT(grad_scaler_init_flags(&g, &f), 0);
	CHECK(g.mode == GRAD_SCALER_NONE);
	f.loss_scale = 128; /* bf16 with --loss-scale: constant, as in Megatron */
	CHECK_INT(grad_scaler_init_flags(&g, &f), 0);
	CHECK(g.mode == GRAD_SCALER_CONSTANT && g.scale == 128.0f);
	f.bf16 = false, f.fp16 = true;
	CHECK_INT(grad_scaler_init_flags(&g, &f), 0);
	CHECK(g.mode == GRAD_SCALER_CONSTANT);
	f.loss_scale = 0;
	CHECK_INT(grad_scaler_init_flags(&g, &f), 0);
	CHECK(g.mode == GRAD_SCALER_DYNAMIC && g.scale == 4294967296.0f && g.min_scale == 1.0f);
	CHECK(g.growth_interval == 1000.0 && g.hysteresis == 2 && g.hysteresis_tracker == 2);
	f.fp16 = false, f.use_distributed_optimizer = true, f.loss_scale = 8;
	CHECK_INT(grad_scaler_init_flags(&g, &f), 0);
	CHECK(g.mode == GRAD_SCALER_CONSTANT);
}

/*
 * Dynamic, initial 1024, min 128, window 3, hysteresis 2. Worked by hand
 * from Megatron's DynamicGradScaler (megatron/core/optimizer/grad_scaler.py):
 * an overflow zeroes the growth count and uses up one unit of
 * hysteresis; once none is left every overflow halves the scale (not below
 * min); three clean iterations in a row double it and restore the
 * hysteresis.
 */
static void test_scaler_dynamic(void)
{
	static const struct {
		int inf;
		double scale;
		int growth, hyst;
	} seq[] = {
		{ 0, 1024, 1, 2 },  { 0, 1024, 2, 2 },  { 0, 2048, 0, 2 }, /* window → ×2 */
		{ 1, 2048, 0, 1 },                                          /* tolerated */
		{ 0, 2048, 1, 1 },  { 1, 1024, 0, 0 },                       /* hysteresis out */
		{ 1, 512, 0, -1 },  { 1, 256, 0, -2 }, { 1, 128, 0, -3 },    /* every one halves */
		{ 1, 128, 0, -4 },                                          /* min */
		{ 0, 128, 1, -4 },  { 0, 128, 2, -4 }, { 1, 128, 0, -5 },    /* reset before window */
		{ 0, 128, 1, -5 },  { 0, 128, 2, -5 }, { 0, 256, 0, 2 },     /* window: restored */
		{ 1, 256, 0, 1 },   { 1, 128, 0, 0 },                        /* two more to back off */
		{ 0, 128, 1, 0 },   { 0, 128, 2, 0 },  { 0, 256, 0, 2 },
		{ 0, 256, 1, 2 },   { 0, 256, 2, 2 },  { 0, 512, 0, 2 },
	};
	struct grad_scaler g;
	CHECK_INT(grad_scaler_init_dynamic(&g, 1024, 128, 3, 2), 0);
	CHECK(grad_scaler_checks_overflow(&g));
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		grad_scaler_update(&g, seq[i].inf);
		if (grad_scaler_scale(&g) != seq[i].scale || g.growth_tracker != seq[i].growth ||
		    g.hysteresis_tracker != seq[i].hyst) {
			printf("#   after update %zu: scale %g growth %" PRId64 " hyst %d, expected %g %d %d\n",
			       i, grad_scaler_scale(&g), g.growth_tracker, g.hysteresis_tracker,
			       seq[i].scale, seq[i].growth, seq[i].hyst);
			t_checks_failed++;
			break;
		}
	}

	/* hysteresis 1 halves on the first overflow; a non-power-of-two min is
	 * the float32 nearest to it */
	CHECK_INT(grad_scaler_init_dynamic(&g, 1.0, 0.3, 1000, 1), 0);
	grad_scaler_update(&g, true);
	CHECK(grad_scaler_scale(&g) == 0.5);
	grad_scaler_update(&g, true);
	CHECK(grad_scaler_scale(&g) == (double)0.3f);

	/* a window Megatron compares as a float: 2.5 never grows */
	CHECK_INT(grad_scaler_init_dynamic(&g, 8, 1, 2.5, 2), 0);
	for (int i = 0; i < 10; i++)
		grad_scaler_update(&g, false);
	CHECK(grad_scaler_scale(&g) == 8.0);
	CHECK_INT(g.growth_tracker, 10);

	/* float32 scale: 2^127 doubles to inf, as Megatron's tensor does */
	CHECK_INT(grad_scaler_init_dynamic(&g, ldexp(1.0, 127), 1, 1, 2), 0);
	grad_scaler_update(&g, false);
	CHECK(isinf(grad_scaler_scale(&g)));

	/* refusals */
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(grad_scaler_init_dynamic(&g, 0, 1, 1000, 2), -1);
	CHECK_INT(grad_scaler_init_dynamic(&g, 1, 2, 1000, 2), -1);
	CHECK_INT(grad_scaler_init_dynamic(&g, 1024, 0, 1000, 2), -1);
	CHECK_INT(grad_scaler_init_dynamic(&g, 1024, 1, 0, 2), -1);
	CHECK_INT(grad_scaler_init_dynamic(&g, 1024, 1, 1000, 0), -1);
	CHECK_INT(grad_scaler_init_constant(&g, -1), -1);
	char *msg = test_capture_end(&cap);
	CHECK(msg && strstr(msg, "--initial-loss-scale") && strstr(msg, "--min-loss-scale") &&
	      strstr(msg, "--loss-scale-window") && strstr(msg, "--hysteresis") &&
	      strstr(msg, "--loss-scale must"));
	free(msg);
}

int main(void)
{
	log_init("test_lr_sched", 0, 1);
	RUN(test_matches_formulas);
	RUN(test_hand_values);
	RUN(test_step);
	RUN(test_init_checks);
	RUN(test_parse);
	RUN(test_derive);
	RUN(test_scaler_none_constant);
	RUN(test_scaler_dynamic);
	return test_summary();
}
