/*
 * error.c - die/error/warning/info/BUG, see error.h. Each message is
 * formatted into one buffer and written with a single write(2) so lines
 * from several threads or ranks never interleave mid-line.
 */
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char log_prefix[96] = "megac: ";
static char *capture_buf;   /* log_capture(): the first error goes here */
static size_t capture_size;
static int capture_errors;
static int log_level = 20; /* Python's logging levels: INFO */

void log_init(const char *prog, int rank, int world_size)
{
	const char *slash = strrchr(prog, '/');
	if (slash)
		prog = slash + 1;
	if (world_size > 1)
		snprintf(log_prefix, sizeof(log_prefix), "[rank %d] %s: ", rank, prog);
	else
		snprintf(log_prefix, sizeof(log_prefix), "%s: ", prog);
}

void log_set_level(int level)
{
	log_level = level;
}

const char *log_prog(void)
{
	return log_prefix;
}

void log_capture(char *buf, size_t size)
{
	capture_buf = size ? buf : NULL;
	capture_size = size;
	capture_errors = 0;
	if (capture_buf)
		capture_buf[0] = 0;
}

static void vreport(const char *kind, const char *fmt, va_list ap, int errnum)
{
	if (capture_buf) {
		if (!strcmp(kind, "error: ") && capture_errors++ == 0) {
			int k = vsnprintf(capture_buf, capture_size, fmt, ap);
			if (errnum && k >= 0 && (size_t)k < capture_size)
				snprintf(capture_buf + k, capture_size - (size_t)k, ": %s", strerror(errnum));
		}
		return;
	}
	char buf[4096];
	size_t n = (size_t)snprintf(buf, sizeof(buf), "%s%s", log_prefix, kind);
	if (n < sizeof(buf)) {
		int k = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
		if (k > 0)
			n += (size_t)k;
	}
	if (errnum && n < sizeof(buf))
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, ": %s", strerror(errnum));
	if (n >= sizeof(buf) - 1)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t w = write(2, buf, n);
	(void)w;
}

void die(const char *fmt, ...)
{
	capture_buf = NULL; /* fatal messages are always printed */
	va_list ap;
	va_start(ap, fmt);
	vreport("error: ", fmt, ap, 0);
	va_end(ap);
	exit(DIE_EXIT_CODE);
}

void die_errno(const char *fmt, ...)
{
	int e = errno;
	capture_buf = NULL;
	va_list ap;
	va_start(ap, fmt);
	vreport("error: ", fmt, ap, e);
	va_end(ap);
	exit(DIE_EXIT_CODE);
}

int error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("error: ", fmt, ap, 0);
	va_end(ap);
	return -1;
}

int error_errno(const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vreport("error: ", fmt, ap, e);
	va_end(ap);
	return -1;
}

void warning(const char *fmt, ...)
{
	if (log_level > 30 && !capture_buf) /* logging.WARNING */
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("warning: ", fmt, ap, 0);
	va_end(ap);
}

void info(const char *fmt, ...)
{
	if (log_level > 20 && !capture_buf) /* logging.INFO */
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport("", fmt, ap, 0);
	va_end(ap);
}

void bug_fl(const char *file, int line, const char *fmt, ...)
{
	char where[256];
	capture_buf = NULL;
	snprintf(where, sizeof(where), "BUG: %s:%d: ", file, line);
	va_list ap;
	va_start(ap, fmt);
	vreport(where, fmt, ap, 0);
	va_end(ap);
	abort();
}
