/* timer.c - see timer.h. */
#include "timer.h"

#include <time.h>

double timer_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_start(struct progress *p)
{
	p->start = p->last = timer_now();
}

double progress_elapsed(const struct progress *p)
{
	double e = timer_now() - p->start;
	return e > 1e-9 ? e : 1e-9;
}
