/*
 * lr_sched.h - the learning-rate and weight-decay schedule of Megatron's
 * OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py).
 *
 * Every "step" is a sample: training advances the schedule by the global
 * batch size per successful iteration. lr(n) and wd(n) are pure functions of
 * the step n; they repeat Megatron's floating-point operations in Megatron's
 * order (same libm calls, no reassociation), so a run compares with a
 * Megatron run to the last bit or nearly so.
 *
 * Use: lr_sched_derive_steps() turns the command-line numbers into W, D, A
 * and the weight-decay steps; lr_sched_init() checks and installs a filled-in
 * schedule; lr_sched_step() advances it after each successful iteration.
 */
#ifndef MEGAC_OPTIM_LR_SCHED_H
#define MEGAC_OPTIM_LR_SCHED_H

#include <math.h>
#include <stdint.h>

enum lr_sched_style {      /* --lr-decay-style */
	LR_SCHED_CONSTANT,     /* "constant" */
	LR_SCHED_LINEAR,       /* "linear" (Megatron's default) */
	LR_SCHED_COSINE,       /* "cosine" */
	LR_SCHED_INV_SQRT,     /* "inverse-square-root" */
	LR_SCHED_WSD,          /* "WSD": warmup, stable, then anneal over A steps */
};

enum lr_sched_wsd_style {  /* --lr-wsd-decay-style: the anneal of WSD */
	LR_SCHED_WSD_LINEAR,      /* "linear" */
	LR_SCHED_WSD_COSINE,      /* "cosine" */
	LR_SCHED_WSD_EXPONENTIAL, /* "exponential" (Megatron's default) */
	LR_SCHED_WSD_MINUS_SQRT,  /* "minus_sqrt" */
};

enum lr_sched_wd_style {   /* --weight-decay-incr-style */
	LR_SCHED_WD_CONSTANT,  /* "constant" (default): start_wd == end_wd */
	LR_SCHED_WD_LINEAR,    /* "linear" */
	LR_SCHED_WD_COSINE,    /* "cosine" */
};

struct lr_sched {
	double max_lr;            /* --lr */
	double min_lr;            /* --min-lr */
	double init_lr;           /* --lr-warmup-init */
	/* W. A double, not an integer: with --lr-warmup-fraction Megatron keeps
	 * fraction × D as a Python float, fractional part and all, and every
	 * later comparison and division uses it as such. */
	double warmup_steps;
	int64_t decay_steps;      /* D > 0 */
	int64_t wsd_decay_steps;  /* A; < 0: not given (only WSD needs it) */
	enum lr_sched_style style;
	enum lr_sched_wsd_style wsd_style;
	double start_wd, end_wd;
	int64_t wd_incr_steps;    /* samples over which wd ramps (train_iters × gbs) */
	enum lr_sched_wd_style wd_style;
	int64_t num_steps;        /* samples consumed so far (lr_sched_step) */
};

/*
 * Check a schedule and install it: *s = params with num_steps = 0 (the
 * num_steps of params is ignored). error() naming the flag and -1 when
 * Megatron would refuse it: D ≤ 0, W ≥ D, W < 0, min_lr < 0, min_lr > lr,
 * lr-warmup-init > lr, WSD without A (or A < 0), start_wd < 0,
 * end_wd < start_wd, constant weight decay with start ≠ end, a ramping weight
 * decay over ≤ 0 steps. s is untouched on error.
 */
int lr_sched_init(struct lr_sched *s, struct lr_sched params);

/* The learning rate at step n (Megatron's get_lr after num_steps = n). */
double lr_sched_lr(const struct lr_sched *s, int64_t n);
/* The same for a parameter group with its own max/min (--decoupled-lr and
 * --decoupled-min-lr); the warmup still starts from s->init_lr. */
double lr_sched_lr_group(const struct lr_sched *s, int64_t n, double max_lr, double min_lr);
/* The weight decay at step n, before the group's multiplier (0 for biases
 * and norms, 1 otherwise). */
double lr_sched_wd(const struct lr_sched *s, int64_t n);
double lr_sched_wd_group(const struct lr_sched *s, int64_t n, double start_wd, double end_wd);

/* Advance by increment samples (global batch size per successful
 * iteration; skipped iterations do not step). */
void lr_sched_step(struct lr_sched *s, int64_t increment);
/* lr / wd at the current s->num_steps. */
double lr_sched_current_lr(const struct lr_sched *s);
double lr_sched_current_wd(const struct lr_sched *s);

/* The style strings Megatron's flags accept (exact, case-sensitive: "WSD").
 * error() naming the flag and the accepted values, and -1, otherwise. */
int lr_sched_parse_style(const char *str, enum lr_sched_style *out);
int lr_sched_parse_wsd_style(const char *str, enum lr_sched_wsd_style *out);
int lr_sched_parse_wd_style(const char *str, enum lr_sched_wd_style *out);
/* The inverse: the flag's string for a value (what Megatron logs and keeps
 * in the checkpoint's scheduler state). */
const char *lr_sched_style_name(enum lr_sched_style style);
const char *lr_sched_wsd_style_name(enum lr_sched_wsd_style style);
const char *lr_sched_wd_style_name(enum lr_sched_wd_style style);

/*
 * The schedule flags as plain numbers. An integer < 0 or a NaN fraction
 * means "not given"; start from LR_SCHED_FLAGS_INIT, which has every field
 * so, and set what the command line has. (--lr-warmup-iters and
 * --lr-warmup-samples default to 0 in Megatron; not given is the same.)
 */
struct lr_sched_flags {
	int64_t train_iters, train_samples;
	int64_t global_batch_size;
	int64_t lr_decay_iters, lr_decay_samples;
	int64_t lr_warmup_iters, lr_warmup_samples;
	double lr_warmup_fraction;
	int64_t lr_wsd_decay_iters, lr_wsd_decay_samples;
};

#define LR_SCHED_FLAGS_INIT                                                   \
	{ .train_iters = -1, .train_samples = -1, .global_batch_size = -1,    \
	  .lr_decay_iters = -1, .lr_decay_samples = -1, .lr_warmup_iters = -1, \
	  .lr_warmup_samples = -1, .lr_warmup_fraction = NAN,                 \
	  .lr_wsd_decay_iters = -1, .lr_wsd_decay_samples = -1 }

/* W, D, A and the weight-decay ramp, in samples. */
struct lr_sched_steps {
	double warmup_steps;      /* W (fractional with --lr-warmup-fraction) */
	int64_t decay_steps;      /* D */
	int64_t wsd_decay_steps;  /* A, -1 when not given */
	int64_t wd_incr_steps;    /* train_iters × gbs, or train_samples */
};

/*
 * Megatron's derivation (get_optimizer_param_scheduler in
 * megatron/training/training.py): iteration-based training when
 * train_iters > 0 (then every count is iterations × global_batch_size),
 * sample-based when train_samples > 0. error() and -1 on what Megatron's
 * argument checks reject: neither or both of train-iters / train-samples,
 * a sample-based flag (--lr-decay-samples, a nonzero --lr-warmup-samples)
 * with iteration-based training or the reverse, --lr-warmup-fraction with a
 * nonzero --lr-warmup-iters/-samples, no positive global batch size, or a
 * count that overflows. The values themselves are checked by lr_sched_init.
 */
int lr_sched_derive_steps(const struct lr_sched_flags *f, struct lr_sched_steps *out);

#endif
