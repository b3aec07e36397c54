/*
 * timers.h - Megatron's training timers (megatron/core/timers.py) as
 * --timing-log-level and --timing-log-option print them: named wall-clock
 * accumulators, each with a level; a timer above the chosen level is never
 * started. With the iteration line the last rank prints, over all ranks,
 * the max, the (min, max) or every rank's time per iteration in ms, as
 * Megatron does ("(min, max) time across ranks (ms):").
 */
#ifndef MEGAC_TRAIN_TIMERS_H
#define MEGAC_TRAIN_TIMERS_H

#include <stdbool.h>

#include "base/sbuf.h"
#include "dist/dist.h"

#define TIMERS_MAX 24

enum timers_option { TIMERS_MAX_ONLY, TIMERS_MINMAX, TIMERS_ALL };

struct timers {
	int level;                 /* --timing-log-level */
	enum timers_option option; /* --timing-log-option */
	int n;
	struct timer {
		const char *name;
		int level;
		double elapsed;        /* seconds since the last report */
		double started;        /* start time while running, else 0 */
	} t[TIMERS_MAX];
	/* the last report's max over ranks, seconds per iteration, on the
	 * world's last rank (--log-timers-to-tensorboard writes them) */
	int nlast;
	const char *last_name[TIMERS_MAX];
	double last_max_s[TIMERS_MAX];
};

/* error() and -1 on an unknown option or level. */
int timers_init(struct timers *T, int level, const char *option);
/* Start / stop the timer `name` of `level` (static string); no-op above the
 * chosen level. */
void timers_start(struct timers *T, const char *name, int level);
void timers_stop(struct timers *T, const char *name);
/* Every timer up to the chosen level in Megatron's training_log order, each
 * divided by `normalizer` (iterations since the last report), appended to sb
 * on the world's last rank; then reset. A collective over the world. */
void timers_report(struct timers *T, struct dist *d, double normalizer, struct sbuf *sb);

#endif
