/*
 * health.h - the training-health checks that are plain arithmetic, apart
 * from the loop that runs them: Megatron's spiky-loss detector
 * (--check-for-spiky-loss, its rerun state machine's is_unexpectedly_large
 * with threshold 10 over a sample of 100 values). The NaN check and the
 * hang detector live where their data is (trainer.c, dist.c).
 */
#ifndef MEGAC_TRAIN_HEALTH_H
#define MEGAC_TRAIN_HEALTH_H

#include <stdbool.h>

#define HEALTH_SPIKY_FACTOR 10.0 /* Megatron's SPIKY_LOSS_FACTOR */
#define HEALTH_SPIKY_SAMPLES 100 /* its num_samples */

struct health_spiky {
	int n;      /* values seen, up to HEALTH_SPIKY_SAMPLES */
	double max; /* the largest |value| of them */
};

/* One value (a micro-batch's loss): the first HEALTH_SPIKY_SAMPLES finite
 * ones set the yardstick, the largest |value|; after them, true when |value|
 * is at least HEALTH_SPIKY_FACTOR times it. NaN and Inf are never spiky
 * (the NaN check's business) and do not count. *sampled: set when this
 * value completed the sample (the caller may say so). */
bool health_spiky(struct health_spiky *h, double value, bool *sampled);

#endif
