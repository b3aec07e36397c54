/*
 * grad_scaler.c - see grad_scaler.h. Arithmetic on the scale is float32
 * throughout (float × float stays float on every target we build for), as in
 * Megatron's CUDA tensors, so e.g. --min-loss-scale 1e-4 clamps to the same
 * float and a long clean run overflows to inf at the same point.
 */
#include "optim/grad_scaler.h"

#include <string.h>

#include "base/error.h"

void grad_scaler_init_none(struct grad_scaler *g)
{
	memset(g, 0, sizeof(*g));
	g->mode = GRAD_SCALER_NONE;
	g->scale = 1.0f;
}

int grad_scaler_init_constant(struct grad_scaler *g, double scale)
{
	if (!(scale > 0.0))
		return error("--loss-scale must be positive (got %g)", scale);
	memset(g, 0, sizeof(*g));
	g->mode = GRAD_SCALER_CONSTANT;
	g->scale = (float)scale;
	return 0;
}

int grad_scaler_init_dynamic(struct grad_scaler *g, double initial_scale, double min_scale,
			     double window, int hysteresis)
{
	if (!(initial_scale > 0.0))
		return error("--initial-loss-scale must be positive (got %g)", initial_scale);
	if (!(min_scale > 0.0))
		return error("--min-loss-scale must be positive (got %g)", min_scale);
	if (!(min_scale <= initial_scale))
		return error("--min-loss-scale (%g) must not exceed --initial-loss-scale (%g)",
			     min_scale, initial_scale);
	if (!(window > 0.0))
		return error("--loss-scale-window must be positive (got %g)", window);
	if (hysteresis <= 0)
		return error("--hysteresis must be positive (got %d)", hysteresis);
	memset(g, 0, sizeof(*g));
	g->mode = GRAD_SCALER_DYNAMIC;
	g->scale = (float)initial_scale;
	g->min_scale = (float)min_scale;
	g->growth_interval = window;
	g->hysteresis = hysteresis;
	g->growth_tracker = 0;
	g->hysteresis_tracker = hysteresis;
	return 0;
}

int grad_scaler_init_flags(struct grad_scaler *g, const struct grad_scaler_flags *f)
{
	if (f->fp16 || f->bf16 || f->use_distributed_optimizer) {
		if (f->loss_scale > 0.0)
			return grad_scaler_init_constant(g, f->loss_scale);
		if (f->fp16)
			return grad_scaler_init_dynamic(g, f->initial_loss_scale, f->min_loss_scale,
							f->loss_scale_window, f->hysteresis);
	}
	grad_scaler_init_none(g);
	return 0;
}

void grad_scaler_update(struct grad_scaler *g, bool found_inf)
{
	if (g->mode != GRAD_SCALER_DYNAMIC)
		return;
	if (found_inf) {
		g->growth_tracker = 0;
		g->hysteresis_tracker--;
		/* Once the hysteresis is used up every further overflow backs off
		 * again, until a full clean window resets the tracker. */
		if (g->hysteresis_tracker <= 0) {
			float s = g->scale * GRAD_SCALER_BACKOFF;
			g->scale = s > g->min_scale ? s : g->min_scale;
		}
	} else {
		g->growth_tracker++;
		/* Exact comparison with a possibly fractional window, as Megatron's
		 * int == float: a window of 2.5 never grows. */
		if ((double)g->growth_tracker == g->growth_interval) {
			g->growth_tracker = 0;
			g->hysteresis_tracker = g->hysteresis;
			g->scale = g->scale * GRAD_SCALER_GROWTH;
		}
	}
}

double grad_scaler_scale(const struct grad_scaler *g)
{
	return g->scale;
}

float grad_scaler_inv_scale(const struct grad_scaler *g)
{
	return (float)(1.0 / (double)g->scale);
}

bool grad_scaler_checks_overflow(const struct grad_scaler *g)
{
	return g->mode != GRAD_SCALER_NONE;
}
