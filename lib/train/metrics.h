/*
 * metrics.h - a JSON-lines log of training metrics: one object per logged
 * iteration, {"iteration": N, "lm loss": x, ...}, appended to a file and
 * flushed at once, so scripts and plots can follow a run as it goes (and a
 * resumed run continues the same file).
 *
 * Numbers are written the way Python's json.dumps writes them: doubles in
 * repr() form (shortest text that reads back as the same double, "1.0" for
 * integral ones, NaN / Infinity / -Infinity for the non-finite), integers as
 * they are, ", " and ": " separators. json.loads gives back every value
 * exactly.
 */
#ifndef MEGAC_TRAIN_METRICS_H
#define MEGAC_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct metrics {
	FILE *fp;
	char *path;
	int failed;    /* a write failed: later calls refuse at once */
};

enum metrics_kind { METRICS_DOUBLE, METRICS_INT };

/* One "name": value member. */
struct metrics_field {
	const char *name;
	enum metrics_kind kind;
	double d;
	int64_t i;
};

#define METRICS_D(n, x) ((struct metrics_field){ .name = (n), .kind = METRICS_DOUBLE, .d = (x) })
#define METRICS_I(n, x) ((struct metrics_field){ .name = (n), .kind = METRICS_INT, .i = (x) })

/* Open path for appending, creating it and its directory if needed.
 * error() and -1 on failure. */
int metrics_open(struct metrics *m, const char *path);

/* Append {"iteration": iteration, fields[0], ..., fields[n-1]} and a newline,
 * then flush. Names are JSON-escaped; duplicates are the caller's business.
 * error() and -1 on failure. */
int metrics_write(struct metrics *m, int64_t iteration, const struct metrics_field *fields,
		  size_t n);

/* Close and free; safe on a closed or zeroed writer. */
int metrics_close(struct metrics *m);

#endif
