/*
 * grad_scaler.h - the loss scale of mixed-precision training
 * (Megatron's megatron/core/optimizer/grad_scaler.py).
 *
 * The loss is multiplied by the scale before backward and the gradients are
 * divided by it again before clipping, so small fp16 gradients do not
 * underflow. A dynamic scaler halves the scale after `hysteresis` overflowing
 * iterations and doubles it after `window` clean ones in a row. The scale is
 * kept in float32 because Megatron keeps it in a float32 tensor: the value
 * logged, checkpointed and multiplied in is that float.
 */
#ifndef MEGAC_OPTIM_GRAD_SCALER_H
#define MEGAC_OPTIM_GRAD_SCALER_H

#include <stdbool.h>
#include <stdint.h>

enum grad_scaler_mode {
	GRAD_SCALER_NONE,     /* no scaler: scale 1.0, no inf/NaN check (fp32, bf16) */
	GRAD_SCALER_CONSTANT, /* --loss-scale: fixed, but overflowing steps are skipped */
	GRAD_SCALER_DYNAMIC,  /* fp16 without --loss-scale */
};

struct grad_scaler {
	enum grad_scaler_mode mode;
	float scale;
	/* dynamic only */
	float min_scale;          /* --min-loss-scale (as float32, like Megatron) */
	double growth_interval;   /* --loss-scale-window: a float flag in Megatron */
	int hysteresis;           /* --hysteresis */
	int64_t growth_tracker;   /* clean iterations since the last overflow or growth */
	int hysteresis_tracker;   /* overflows still tolerated before backing off */
};

/* Megatron's fixed factors (get_megatron_optimizer). */
#define GRAD_SCALER_GROWTH 2.0f
#define GRAD_SCALER_BACKOFF 0.5f

void grad_scaler_init_none(struct grad_scaler *g);
/* error() and -1 unless scale > 0. */
int grad_scaler_init_constant(struct grad_scaler *g, double scale);
/* error() naming the flag and -1 unless initial > 0, 0 < min <= initial,
 * window > 0 and hysteresis > 0. */
int grad_scaler_init_dynamic(struct grad_scaler *g, double initial_scale, double min_scale,
			     double window, int hysteresis);

/* The precision and scaling flags; loss_scale 0 (or < 0) = not given. */
struct grad_scaler_flags {
	bool fp16, bf16, use_distributed_optimizer;
	double loss_scale;          /* --loss-scale */
	double initial_loss_scale;  /* --initial-loss-scale (2^32) */
	double min_loss_scale;      /* --min-loss-scale (1.0) */
	double loss_scale_window;   /* --loss-scale-window (1000) */
	int hysteresis;             /* --hysteresis (2) */
};

#define GRAD_SCALER_FLAGS_INIT                                                   \
	{ .loss_scale = 0, .initial_loss_scale = 4294967296.0, .min_loss_scale = 1.0, \
	  .loss_scale_window = 1000, .hysteresis = 2 }

/*
 * Megatron's choice of scaler: with fp16, bf16 or the distributed optimizer,
 * a given --loss-scale makes a constant scaler (bf16 included) and fp16
 * without one a dynamic scaler; everything else has none.
 */
int grad_scaler_init_flags(struct grad_scaler *g, const struct grad_scaler_flags *f);

/* After each iteration's inf/NaN check: found_inf for an overflowing one
 * (whose update the caller skips). Only the dynamic scaler changes. */
void grad_scaler_update(struct grad_scaler *g, bool found_inf);

/* The scale as the log line and the loss multiplication see it. */
double grad_scaler_scale(const struct grad_scaler *g);
/* 1/scale as Megatron's inv_scale: reciprocal in double, rounded to float. */
float grad_scaler_inv_scale(const struct grad_scaler *g);
/* Whether gradients are checked for inf/NaN and overflowing steps skipped. */
bool grad_scaler_checks_overflow(const struct grad_scaler *g);

#endif
