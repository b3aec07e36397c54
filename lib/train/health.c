/*
 * health.c - see health.h.
 */
#include "train/health.h"

#include <math.h>

bool health_spiky(struct health_spiky *h, double value, bool *sampled)
{
	double v = fabs(value);
	*sampled = false;
	if (!isfinite(v))
		return false;
	if (h->n < HEALTH_SPIKY_SAMPLES) {
		h->max = fmax(h->max, v);
		*sampled = ++h->n == HEALTH_SPIKY_SAMPLES;
		return false;
	}
	return v >= HEALTH_SPIKY_FACTOR * h->max;
}
