/*
 * timer.h - monotonic wall-clock seconds and a rate-limited progress line.
 */
#ifndef MEGAC_BASE_TIMER_H
#define MEGAC_BASE_TIMER_H

#include <stdint.h>

double timer_now(void); /* seconds, CLOCK_MONOTONIC */

/* Human-readable rates: "12.3 MB/s" style formatting lives with the callers;
 * this only keeps the clock so every program measures the same way. */
struct progress {
	double start;
	double last;
};

void progress_start(struct progress *p);
double progress_elapsed(const struct progress *p);

#endif
