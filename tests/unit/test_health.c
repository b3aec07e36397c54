/*
 * test_health.c - lib/train/health: the spiky-loss detector against
 * Megatron's is_unexpectedly_large (megatron/core/rerun_state_machine.py):
 * the first 100 finite values only set the maximum (never flagged, however
 * large), then a value is flagged when |value| >= 10 x that maximum, which
 * later values no longer change; NaN and Inf are neither flagged nor counted.
 */
#include <math.h>

#include "test.h"
#include "train/health.h"

static void test_spiky(void)
{
	struct health_spiky h = { 0 };
	bool sampled, any = false;
	for (int i = 0; i < 99; i++) {
		any |= health_spiky(&h, 2.0 + (i % 7) * 0.1, &sampled);
		any |= sampled;
	}
	CHECK(!any);
	CHECK(!health_spiky(&h, NAN, &sampled) && !sampled); /* not counted */
	CHECK(!health_spiky(&h, INFINITY, &sampled) && !sampled);
	CHECK(!health_spiky(&h, -3.0, &sampled)); /* the 100th: |-3| is the new maximum */
	CHECK(sampled);
	CHECK(h.max == 3.0);
	CHECK(!health_spiky(&h, 29.99, &sampled) && !sampled);
	CHECK(health_spiky(&h, 30.0, &sampled));  /* >= 10 x 3 */
	CHECK(health_spiky(&h, -31.0, &sampled)); /* |value| */
	CHECK(h.max == 3.0);                       /* flagged values do not move the yardstick */
	CHECK(!health_spiky(&h, 2.0, &sampled));
	CHECK(!health_spiky(&h, NAN, &sampled));

	/* a large value inside the sample is not flagged: it raises the bar */
	struct health_spiky g = { 0 };
	CHECK(!health_spiky(&g, 1000.0, &sampled));
	for (int i = 1; i < 100; i++)
		CHECK(!health_spiky(&g, 1.0, &sampled));
	CHECK(!health_spiky(&g, 9999.0, &sampled));
	CHECK(health_spiky(&g, 10000.0, &sampled));
}

int main(void)
{
	RUN(test_spiky);
	return test_summary();
}
