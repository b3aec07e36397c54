/*
 * lr_sched.c - see lr_sched.h. The formulas, and the order of every
 * floating-point operation, follow Megatron's
 * OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py) so
 * results agree with it bit for bit on the same libm. This file relies on
 * the build's -std=c11, under which gcc does not contract a*b+c into an FMA
 * (-ffp-contract=off); Python never fuses either.
 */
#include "optim/lr_sched.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

/* Python's math.pi, the double nearest to pi. */
#define LR_SCHED_PI 3.141592653589793

static const char *const style_names[] = {
	[LR_SCHED_CONSTANT] = "constant",
	[LR_SCHED_LINEAR] = "linear",
	[LR_SCHED_COSINE] = "cosine",
	[LR_SCHED_INV_SQRT] = "inverse-square-root",
	[LR_SCHED_WSD] = "WSD",
};
static const char *const wsd_style_names[] = {
	[LR_SCHED_WSD_LINEAR] = "linear",
	[LR_SCHED_WSD_COSINE] = "cosine",
	[LR_SCHED_WSD_EXPONENTIAL] = "exponential",
	[LR_SCHED_WSD_MINUS_SQRT] = "minus_sqrt",
};
static const char *const wd_style_names[] = {
	[LR_SCHED_WD_CONSTANT] = "constant",
	[LR_SCHED_WD_LINEAR] = "linear",
	[LR_SCHED_WD_COSINE] = "cosine",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

int lr_sched_init(struct lr_sched *s, struct lr_sched p)
{
	/* The comparisons are written so that a NaN fails them, as Megatron's
	 * asserts do. */
	if (!(p.min_lr >= 0.0))
		return error("--min-lr must be >= 0 (got %g)", p.min_lr);
	if (!(p.max_lr >= p.min_lr))
		return error("--min-lr (%g) must not exceed --lr (%g)", p.min_lr, p.max_lr);
	if (!(p.init_lr <= p.max_lr))
		return error("--lr-warmup-init (%g) must not exceed --lr (%g)", p.init_lr, p.max_lr);
	if (p.decay_steps <= 0)
		return error("the learning-rate decay steps must be > 0 (got %" PRId64
			     "; from --lr-decay-iters/--lr-decay-samples or --train-iters/--train-samples)",
			     p.decay_steps);
	if (!(p.warmup_steps >= 0.0))
		return error("the learning-rate warmup steps must be >= 0 (got %g; from "
			     "--lr-warmup-iters/--lr-warmup-samples/--lr-warmup-fraction)",
			     p.warmup_steps);
	if (!(p.warmup_steps < (double)p.decay_steps))
		return error("the learning-rate warmup steps (%.17g, from --lr-warmup-iters/"
			     "--lr-warmup-samples/--lr-warmup-fraction) must be less than the decay "
			     "steps (%" PRId64 ", from --lr-decay-iters/--lr-decay-samples or --train-iters/"
			     "--train-samples)",
			     p.warmup_steps, p.decay_steps);
	if ((unsigned)p.style >= NELEM(style_names))
		BUG("lr_sched style %d", (int)p.style);
	if ((unsigned)p.wsd_style >= NELEM(wsd_style_names))
		BUG("lr_sched wsd style %d", (int)p.wsd_style);
	if ((unsigned)p.wd_style >= NELEM(wd_style_names))
		BUG("lr_sched wd style %d", (int)p.wd_style);
	if (p.style == LR_SCHED_WSD && p.wsd_decay_steps < 0)
		return error("--lr-decay-style WSD needs --lr-wsd-decay-iters (iteration-based "
			     "training) or --lr-wsd-decay-samples (sample-based)");
	if (!(p.start_wd >= 0.0))
		return error("--start-weight-decay must be >= 0 (got %g)", p.start_wd);
	if (!(p.end_wd >= p.start_wd))
		return error("--end-weight-decay (%g) must not be less than --start-weight-decay (%g)",
			     p.end_wd, p.start_wd);
	if (p.wd_style == LR_SCHED_WD_CONSTANT && p.start_wd != p.end_wd)
		return error("--weight-decay-incr-style constant takes one --weight-decay, "
			     "not --start-weight-decay %g and --end-weight-decay %g",
			     p.start_wd, p.end_wd);
	/* Megatron would divide by zero at its first step(0). */
	if (p.wd_style != LR_SCHED_WD_CONSTANT && p.wd_incr_steps <= 0)
		return error("--weight-decay-incr-style %s needs a positive number of training "
			     "samples to ramp over (got %" PRId64 ")",
			     wd_style_names[p.wd_style], p.wd_incr_steps);
	*s = p;
	s->num_steps = 0;
	return 0;
}

double lr_sched_lr_group(const struct lr_sched *s, int64_t n, double max_lr, double min_lr)
{
	const double w = s->warmup_steps;

	/* Linear warmup from init_lr; Megatron multiplies before dividing. */
	if (w > 0 && (double)n <= w)
		return s->init_lr + (max_lr - s->init_lr) * (double)n / w;

	if (s->style == LR_SCHED_CONSTANT)
		return max_lr;

	if (n > s->decay_steps)
		return min_lr;

	if (s->style == LR_SCHED_INV_SQRT) {
		/* x ** 0.5 in Python is libm pow(), which need not equal sqrt(). */
		double ws = w > 1.0 ? w : 1.0;
		double ns = n > 1 ? (double)n : 1.0;
		double lr = max_lr * pow(ws, 0.5) / pow(ns, 0.5);
		return lr > min_lr ? lr : min_lr;
	}

	/* n - W and D - W are exact in double for every realistic count (< 2^53),
	 * so this equals Megatron's integer subtraction followed by float(). */
	double ratio = ((double)n - w) / ((double)s->decay_steps - w);
	double delta = max_lr - min_lr;
	double coeff;

	switch (s->style) {
	case LR_SCHED_LINEAR:
		coeff = 1.0 - ratio;
		break;
	case LR_SCHED_COSINE:
		coeff = 0.5 * (cos(LR_SCHED_PI * ratio) + 1.0);
		break;
	case LR_SCHED_WSD: {
		int64_t anneal_start = s->decay_steps - s->wsd_decay_steps;
		if (n <= anneal_start) {
			coeff = 1.0; /* the stable phase; also keeps A = 0 from dividing */
			break;
		}
		double r = (double)(n - anneal_start) / (double)s->wsd_decay_steps;
		switch (s->wsd_style) {
		case LR_SCHED_WSD_LINEAR:
			coeff = 1.0 - r;
			break;
		case LR_SCHED_WSD_COSINE:
			coeff = 0.5 * (cos(LR_SCHED_PI * r) + 1.0);
			break;
		case LR_SCHED_WSD_EXPONENTIAL:
			coeff = 2.0 * pow(0.5, r) - 1.0;
			break;
		case LR_SCHED_WSD_MINUS_SQRT:
			coeff = 1.0 - sqrt(r);
			break;
		default:
			BUG("lr_sched wsd style %d", (int)s->wsd_style);
		}
		break;
	}
	default:
		BUG("lr_sched style %d", (int)s->style);
	}
	return min_lr + coeff * delta;
}

double lr_sched_lr(const struct lr_sched *s, int64_t n)
{
	return lr_sched_lr_group(s, n, s->max_lr, s->min_lr);
}

double lr_sched_wd_group(const struct lr_sched *s, int64_t n, double start_wd, double end_wd)
{
	if (n > s->wd_incr_steps || s->wd_style == LR_SCHED_WD_CONSTANT)
		return end_wd;

	double ratio = (double)n / (double)s->wd_incr_steps;
	double coeff;
	switch (s->wd_style) {
	case LR_SCHED_WD_LINEAR:
		coeff = ratio;
		break;
	case LR_SCHED_WD_COSINE:
		/* Rises from start to end: the cosine half-wave run backwards. */
		coeff = 0.5 * (cos(LR_SCHED_PI * (1.0 - ratio)) + 1.0);
		break;
	default:
		BUG("lr_sched wd style %d", (int)s->wd_style);
	}
	return start_wd + coeff * (end_wd - start_wd);
}

double lr_sched_wd(const struct lr_sched *s, int64_t n)
{
	return lr_sched_wd_group(s, n, s->start_wd, s->end_wd);
}

void lr_sched_step(struct lr_sched *s, int64_t increment)
{
	s->num_steps += increment;
}

double lr_sched_current_lr(const struct lr_sched *s)
{
	return lr_sched_lr(s, s->num_steps);
}

double lr_sched_current_wd(const struct lr_sched *s)
{
	return lr_sched_wd(s, s->num_steps);
}

/* ---------------------------------------------------------------- names */

static int parse_name(const char *str, const char *const *names, size_t n, const char *flag,
		      int *out)
{
	for (size_t i = 0; i < n; i++) {
		if (str && !strcmp(str, names[i])) {
			*out = (int)i;
			return 0;
		}
	}
	char choices[256];
	size_t at = 0;
	choices[0] = 0;
	for (size_t i = 0; i < n && at < sizeof(choices); i++)
		at += (size_t)snprintf(choices + at, sizeof(choices) - at, "%s'%s'", i ? ", " : "",
				       names[i]);
	return error("%s: invalid choice '%s' (choose from %s)", flag, str ? str : "", choices);
}

int lr_sched_parse_style(const char *str, enum lr_sched_style *out)
{
	int v;
	if (parse_name(str, style_names, NELEM(style_names), "--lr-decay-style", &v))
		return -1;
	*out = (enum lr_sched_style)v;
	return 0;
}

int lr_sched_parse_wsd_style(const char *str, enum lr_sched_wsd_style *out)
{
	int v;
	if (parse_name(str, wsd_style_names, NELEM(wsd_style_names), "--lr-wsd-decay-style", &v))
		return -1;
	*out = (enum lr_sched_wsd_style)v;
	return 0;
}

int lr_sched_parse_wd_style(const char *str, enum lr_sched_wd_style *out)
{
	int v;
	if (parse_name(str, wd_style_names, NELEM(wd_style_names), "--weight-decay-incr-style", &v))
		return -1;
	*out = (enum lr_sched_wd_style)v;
	return 0;
}

const char *lr_sched_style_name(enum lr_sched_style style)
{
	if ((unsigned)style >= NELEM(style_names))
		BUG("lr_sched style %d", (int)style);
	return style_names[style];
}

const char *lr_sched_wsd_style_name(enum lr_sched_wsd_style style)
{
	if ((unsigned)style >= NELEM(wsd_style_names))
		BUG("lr_sched wsd style %d", (int)style);
	return wsd_style_names[style];
}

const char *lr_sched_wd_style_name(enum lr_sched_wd_style style)
{
	if ((unsigned)style >= NELEM(wd_style_names))
		BUG("lr_sched wd style %d", (int)style);
	return wd_style_names[style];
}

/* ---------------------------------------------------------------- flags */

/* a × b for non-negative counts; error() naming what on overflow. */
static int mul_steps(int64_t a, int64_t b, const char *what, int64_t *out)
{
	if (__builtin_mul_overflow(a, b, out))
		return error("%s x --global-batch-size overflows (%" PRId64 " x %" PRId64 ")", what, a,
			     b);
	return 0;
}

int lr_sched_derive_steps(const struct lr_sched_flags *f, struct lr_sched_steps *out)
{
	const int fraction_given = !isnan(f->lr_warmup_fraction);
	/* Megatron's defaults for the warmup counts are 0, so "not given" is 0. */
	const int64_t warmup_iters = f->lr_warmup_iters > 0 ? f->lr_warmup_iters : 0;
	const int64_t warmup_samples = f->lr_warmup_samples > 0 ? f->lr_warmup_samples : 0;
	struct lr_sched_steps r;

	if (f->train_iters > 0) {
		if (f->train_samples >= 0)
			return error("--train-iters and --train-samples are exclusive "
				     "(expected iteration-based training)");
		if (f->lr_decay_samples >= 0)
			return error("--lr-decay-samples needs sample-based training "
				     "(with --train-iters use --lr-decay-iters)");
		if (warmup_samples != 0)
			return error("--lr-warmup-samples needs sample-based training "
				     "(with --train-iters use --lr-warmup-iters)");
		if (fraction_given && warmup_iters != 0)
			return error("can only specify one of --lr-warmup-fraction and --lr-warmup-iters");
		if (f->global_batch_size <= 0)
			return error("--global-batch-size must be positive (got %" PRId64 ")",
				     f->global_batch_size);
		const int64_t gbs = f->global_batch_size;
		int64_t decay_iters = f->lr_decay_iters >= 0 ? f->lr_decay_iters : f->train_iters;
		if (mul_steps(decay_iters, gbs, f->lr_decay_iters >= 0 ? "--lr-decay-iters" : "--train-iters",
			      &r.decay_steps) ||
		    mul_steps(f->train_iters, gbs, "--train-iters", &r.wd_incr_steps))
			return -1;
		r.wsd_decay_steps = -1;
		if (f->lr_wsd_decay_iters >= 0 &&
		    mul_steps(f->lr_wsd_decay_iters, gbs, "--lr-wsd-decay-iters", &r.wsd_decay_steps))
			return -1;
		if (fraction_given) {
			r.warmup_steps = f->lr_warmup_fraction * (double)r.decay_steps;
		} else {
			int64_t w;
			if (mul_steps(warmup_iters, gbs, "--lr-warmup-iters", &w))
				return -1;
			r.warmup_steps = (double)w;
		}
	} else if (f->train_samples > 0) {
		if (f->train_iters >= 0)
			return error("--train-iters and --train-samples are exclusive "
				     "(expected sample-based training)");
		if (f->lr_decay_iters >= 0)
			return error("--lr-decay-iters needs iteration-based training "
				     "(with --train-samples use --lr-decay-samples)");
		if (warmup_iters != 0)
			return error("--lr-warmup-iters needs iteration-based training "
				     "(with --train-samples use --lr-warmup-samples)");
		if (fraction_given && warmup_samples != 0)
			return error("can only specify one of --lr-warmup-fraction and "
				     "--lr-warmup-samples");
		r.decay_steps = f->lr_decay_samples >= 0 ? f->lr_decay_samples : f->train_samples;
		r.wd_incr_steps = f->train_samples;
		r.wsd_decay_steps = f->lr_wsd_decay_samples >= 0 ? f->lr_wsd_decay_samples : -1;
		r.warmup_steps = fraction_given ? f->lr_warmup_fraction * (double)r.decay_steps
						: (double)warmup_samples;
	} else {
		return error("either --train-iters or --train-samples must be given (and positive)");
	}
	*out = r;
	return 0;
}
