/*
 * metrics.c - see metrics.h. Each line is built whole in memory and written
 * with one fwrite, so a crash leaves at worst one truncated last line, never
 * two objects run together.
 */
#include "train/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/pyjson.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "base/xalloc.h"

int metrics_open(struct metrics *m, const char *path)
{
	memset(m, 0, sizeof(*m));
	char *dir = path_dirname(path);
	int rc = mkdir_p(dir);
	free(dir);
	if (rc)
		return -1;
	m->fp = fopen(path, "ae");
	if (!m->fp)
		return error_errno("cannot open '%s'", path);
	m->path = xstrdup(path);
	return 0;
}

/* A JSON string: quotes, backslashes and control characters escaped; other
 * bytes (UTF-8 included) as they are, which JSON allows. */
static void add_json_string(struct sbuf *sb, const char *s)
{
	pyjson_string(sb, s, strlen(s));
}

static void add_double(struct sbuf *sb, double x)
{
	/* JSON has no non-finite numbers; these are Python's spellings, which
	 * json.loads (and most readers) accept. */
	if (isnan(x)) {
		sbuf_addstr(sb, "NaN");
	} else if (isinf(x)) {
		sbuf_addstr(sb, x > 0 ? "Infinity" : "-Infinity");
	} else {
		char buf[PYJSON_FLOAT_MAX];
		pyjson_float_repr(x, buf);
		sbuf_addstr(sb, buf);
	}
}

int metrics_write(struct metrics *m, int64_t iteration, const struct metrics_field *fields,
		  size_t n)
{
	if (!m->fp)
		BUG("metrics: write to a closed writer");
	if (m->failed)
		return error("'%s': earlier writes failed", m->path);

	struct sbuf line = SBUF_INIT;
	sbuf_addf(&line, "{\"iteration\": %" PRId64, iteration);
	for (size_t i = 0; i < n; i++) {
		sbuf_addstr(&line, ", ");
		add_json_string(&line, fields[i].name);
		sbuf_addstr(&line, ": ");
		switch (fields[i].kind) {
		case METRICS_DOUBLE:
			add_double(&line, fields[i].d);
			break;
		case METRICS_INT:
			sbuf_addf(&line, "%" PRId64, fields[i].i);
			break;
		default:
			BUG("metrics field kind %d", (int)fields[i].kind);
		}
	}
	sbuf_addstr(&line, "}\n");
	int rc = 0;
	if (fwrite(line.buf, 1, line.len, m->fp) != line.len || fflush(m->fp)) {
		m->failed = 1;
		rc = error_errno("cannot write '%s'", m->path);
	}
	sbuf_release(&line);
	return rc;
}

int metrics_close(struct metrics *m)
{
	int rc = 0;
	if (m->fp && fclose(m->fp) && !m->failed)
		rc = error_errno("cannot write '%s'", m->path);
	free(m->path);
	memset(m, 0, sizeof(*m));
	return rc;
}
