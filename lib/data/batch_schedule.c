/*
 * batch_schedule.c - see batch_schedule.h. The schedule has a handful of
 * entries, so the lookups are linear scans; the iteration counts step from
 * threshold to threshold, not iteration by iteration.
 */
#include "data/batch_schedule.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

/* Megatron's _parse_numeric_value: int(float(x) * multiplier). */
static int parse_number(const char *s, size_t len, const char *entry, int64_t *out)
{
	char buf[64];
	while (len && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	if (len == 0 || len >= sizeof(buf))
		return error("--step-batch-size-schedule: '%s' is not THRESHOLD:SIZE with numbers", entry);
	memcpy(buf, s, len);
	buf[len] = 0;
	double mult = 1;
	switch (toupper((unsigned char)buf[len - 1])) {
	case 'T': mult = 1e12; buf[--len] = 0; break;
	case 'B': mult = 1e9; buf[--len] = 0; break;
	case 'M': mult = 1e6; buf[--len] = 0; break;
	case 'K': mult = 1e3; buf[--len] = 0; break;
	}
	char *end;
	errno = 0;
	double v = strtod(buf, &end);
	if (!len || *end || errno || !isfinite(v) || v * mult >= 9.2e18 || v * mult <= -9.2e18)
		return error("--step-batch-size-schedule: '%s' is not THRESHOLD:SIZE with numbers", entry);
	*out = (int64_t)(v * mult);
	return 0;
}

int batch_schedule_parse(struct batch_schedule *s, const char *text, int64_t seq_length)
{
	memset(s, 0, sizeof(*s));
	if (seq_length < 1)
		return error("--step-batch-size-schedule needs --seq-length (its thresholds are tokens)");
	char *copy = xstrdup(text);
	for (char *p = copy; *p; p++)
		if (*p == ',')
			*p = ' ';
	int cap = 8;
	s->threshold = xmalloc((size_t)cap * sizeof(int64_t));
	s->size = xmalloc((size_t)cap * sizeof(int64_t));
	int rc = 0;
	for (char *save = NULL, *e = strtok_r(copy, " \t\n", &save); e; e = strtok_r(NULL, " \t\n", &save)) {
		char *colon = strchr(e, ':');
		int64_t thr, size;
		if (!colon) {
			rc = error("--step-batch-size-schedule: invalid entry '%s'; expected THRESHOLD:BATCH_SIZE", e);
			break;
		}
		if (parse_number(e, (size_t)(colon - e), e, &thr) < 0 ||
		    parse_number(colon + 1, strlen(colon + 1), e, &size) < 0) {
			rc = -1;
			break;
		}
		if (s->n == cap) {
			cap *= 2;
			s->threshold = xrealloc(s->threshold, (size_t)cap * sizeof(int64_t));
			s->size = xrealloc(s->size, (size_t)cap * sizeof(int64_t));
		}
		/* Python's floor division, as Megatron converts tokens to samples */
		int64_t q = thr / seq_length;
		if (thr % seq_length && thr < 0)
			q--;
		s->threshold[s->n] = q;
		s->size[s->n++] = size;
	}
	free(copy);
	if (rc == 0 && s->n == 0)
		rc = error("--step-batch-size-schedule: the schedule has no entries");
	/* sort by threshold, stably (Python's sort): insertion sort on a handful */
	for (int i = 1; rc == 0 && i < s->n; i++)
		for (int j = i; j > 0 && s->threshold[j - 1] > s->threshold[j]; j--) {
			int64_t t = s->threshold[j], z = s->size[j];
			s->threshold[j] = s->threshold[j - 1];
			s->size[j] = s->size[j - 1];
			s->threshold[j - 1] = t;
			s->size[j - 1] = z;
		}
	if (rc == 0 && s->threshold[0] != 0)
		rc = error("--step-batch-size-schedule: the first entry must have threshold 0 (got %lld samples)",
			   (long long)s->threshold[0]);
	for (int i = 1; rc == 0 && i < s->n; i++)
		if (s->threshold[i] <= s->threshold[i - 1])
			rc = error("--step-batch-size-schedule: thresholds must be strictly increasing in samples "
				   "(tokens / --seq-length %lld): %lld before %lld", (long long)seq_length,
				   (long long)s->threshold[i - 1], (long long)s->threshold[i]);
	for (int i = 0; rc == 0 && i < s->n; i++)
		if (s->size[i] <= 0)
			rc = error("--step-batch-size-schedule: batch sizes must be positive (got %lld)",
				   (long long)s->size[i]);
	if (rc < 0)
		batch_schedule_free(s);
	return rc;
}

void batch_schedule_free(struct batch_schedule *s)
{
	free(s->threshold);
	free(s->size);
	memset(s, 0, sizeof(*s));
}

int64_t batch_schedule_size(const struct batch_schedule *s, int64_t consumed)
{
	int64_t size = s->size[0];
	for (int i = 0; i < s->n && consumed >= s->threshold[i]; i++)
		size = s->size[i];
	return size;
}

int64_t batch_schedule_max(const struct batch_schedule *s)
{
	int64_t m = 0;
	for (int i = 0; i < s->n; i++)
		m = s->size[i] > m ? s->size[i] : m;
	return m;
}

int64_t batch_schedule_samples(const struct batch_schedule *s, int64_t iters)
{
	int64_t consumed = 0;
	for (int64_t it = 0; it < iters;) {
		int64_t size = batch_schedule_size(s, consumed);
		/* iterations at this size before the next threshold (or all that are left) */
		int64_t steps = iters - it;
		for (int i = 0; i < s->n; i++)
			if (s->threshold[i] > consumed) {
				int64_t need = (s->threshold[i] - consumed + size - 1) / size;
				steps = need < steps ? need : steps;
				break;
			}
		consumed += steps * size;
		it += steps;
	}
	return consumed;
}

int64_t batch_schedule_iters(const struct batch_schedule *s, int64_t samples)
{
	int64_t consumed = 0, iters = 0;
	while (consumed < samples) {
		int64_t size = batch_schedule_size(s, consumed);
		int64_t limit = samples;
		for (int i = 0; i < s->n; i++)
			if (s->threshold[i] > consumed) {
				limit = s->threshold[i] < samples ? s->threshold[i] : samples;
				break;
			}
		int64_t steps = (limit - consumed + size - 1) / size;
		consumed += steps * size;
		iters += steps;
	}
	return iters;
}
