/*
 * timers.c - see timers.h.
 */
#include "train/timers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/xalloc.h"

/* training_log's timers_to_log, level 1 then level 2 */
static const char *const timers_order[] = {
	"forward-backward", "layernorm-grads-all-reduce", "embedding-grads-all-reduce", "all-grads-sync",
	"params-all-gather", "optimizer", "batch-generator", "forward-compute", "backward-compute",
	"forward-recv", "forward-send", "backward-recv", "backward-send",
};
#define TIMERS_NORDER (sizeof(timers_order) / sizeof(timers_order[0]))

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int timers_init(struct timers *T, int level, const char *option)
{
	memset(T, 0, sizeof(*T));
	if (level < 0 || level > 2)
		return error("--timing-log-level %d: expected 0, 1 or 2", level);
	T->level = level;
	if (!option || !strcmp(option, "minmax"))
		T->option = TIMERS_MINMAX;
	else if (!strcmp(option, "max"))
		T->option = TIMERS_MAX_ONLY;
	else if (!strcmp(option, "all"))
		T->option = TIMERS_ALL;
	else
		return error("--timing-log-option '%s': expected max, minmax or all", option);
	return 0;
}

static struct timer *find(struct timers *T, const char *name)
{
	for (int i = 0; i < T->n; i++)
		if (!strcmp(T->t[i].name, name))
			return &T->t[i];
	return NULL;
}

void timers_start(struct timers *T, const char *name, int level)
{
	if (level > T->level)
		return;
	struct timer *t = find(T, name);
	if (!t) {
		if (T->n == TIMERS_MAX)
			BUG("more than %d timers", TIMERS_MAX);
		t = &T->t[T->n++];
		t->name = name;
		t->level = level;
		t->elapsed = 0;
	}
	if (t->started > 0)
		BUG("timer %s started twice", name);
	t->started = now_s();
}

void timers_stop(struct timers *T, const char *name)
{
	struct timer *t = find(T, name);
	if (!t || t->started <= 0)
		return;
	t->elapsed += now_s() - t->started;
	t->started = 0;
}

void timers_report(struct timers *T, struct dist *d, double normalizer, struct sbuf *sb)
{
	if (T->level == 0)
		return;
	/* every rank's ms per iteration for every name; 0 where it did not run */
	size_t n = TIMERS_NORDER, W = (size_t)d->world;
	float *mine = xcalloc(n, sizeof(float)), *all = xcalloc(n * W, sizeof(float));
	for (size_t i = 0; i < n; i++) {
		struct timer *t = find(T, timers_order[i]);
		if (t)
			mine[i] = (float)(t->elapsed * 1000.0 / normalizer);
	}
	dist_allgather_equal_f32(&d->world_g, mine, n, all);
	for (int i = 0; i < T->n; i++)
		T->t[i].elapsed = 0;
	T->nlast = 0;
	if (dist_is_last(d)) {
		bool any = false;
		for (size_t i = 0; i < n; i++) {
			float lo = 0, hi = 0;
			bool found = false;
			for (size_t r = 0; r < W; r++) {
				float v = all[r * n + i];
				if (v <= 0)
					continue; /* as Megatron: ranks without the timer are left out */
				lo = found && lo < v ? lo : v;
				hi = found && hi > v ? hi : v;
				found = true;
			}
			if (!found)
				continue;
			if (T->nlast < TIMERS_MAX) {
				T->last_name[T->nlast] = timers_order[i];
				T->last_max_s[T->nlast++] = hi / 1000.0;
			}
			if (!any)
				sbuf_addstr(sb, T->option == TIMERS_ALL ? "times across ranks (ms):" :
						T->option == TIMERS_MAX_ONLY ? "max time across ranks (ms):" :
									      "(min, max) time across ranks (ms):");
			any = true;
			char label[64];
			snprintf(label, sizeof(label), "%s ", timers_order[i]);
			size_t len = strlen(label);
			while (len < 48 && len + 1 < sizeof(label)) /* Python's ljust(48, '.') */
				label[len++] = '.';
			label[len] = 0;
			if (T->option == TIMERS_MAX_ONLY) {
				sbuf_addf(sb, "\n    %s: %.2f", label, hi);
			} else if (T->option == TIMERS_MINMAX) {
				sbuf_addf(sb, "\n    %s: (%.2f, %.2f)", label, lo, hi);
			} else {
				sbuf_addf(sb, "\n  %s:", timers_order[i]);
				for (size_t r = 0; r < W; r++)
					if (all[r * n + i] > 0)
						sbuf_addf(sb, "\n     rank %2zu: %.2f", r, all[r * n + i]);
			}
		}
	}
	free(mine);
	free(all);
}
