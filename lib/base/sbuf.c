/* sbuf.c - see sbuf.h. */
#include "sbuf.h"
#include "error.h"
#include "xalloc.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sbuf_grow(struct sbuf *sb, size_t extra)
{
	bool fresh = !sb->buf;
	xgrow(&sb->buf, &sb->cap, sb->len + extra + 1, 1);
	if (fresh)
		sb->buf[0] = 0; /* an empty buffer is "" too (sbuf_detach of one) */
}

void sbuf_add(struct sbuf *sb, const void *data, size_t n)
{
	sbuf_grow(sb, n);
	if (n)
		memcpy(sb->buf + sb->len, data, n);
	sb->len += n;
	sb->buf[sb->len] = 0;
}

void sbuf_addstr(struct sbuf *sb, const char *s)
{
	sbuf_add(sb, s, strlen(s));
}

void sbuf_addch(struct sbuf *sb, int c)
{
	sbuf_grow(sb, 1);
	sb->buf[sb->len++] = (char)c;
	sb->buf[sb->len] = 0;
}

void sbuf_addf(struct sbuf *sb, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0)
		return;
	sbuf_grow(sb, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t)n;
}

void sbuf_reset(struct sbuf *sb)
{
	sb->len = 0;
	if (sb->buf)
		sb->buf[0] = 0;
}

void sbuf_release(struct sbuf *sb)
{
	free(sb->buf);
	sb->buf = NULL;
	sb->len = sb->cap = 0;
}

char *sbuf_detach(struct sbuf *sb, size_t *len)
{
	if (!sb->buf)
		sbuf_grow(sb, 0);
	char *p = sb->buf;
	if (len)
		*len = sb->len;
	sb->buf = NULL;
	sb->len = sb->cap = 0;
	return p;
}

int sbuf_read_file(struct sbuf *sb, const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return error_errno("cannot open '%s'", path);
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		sbuf_add(sb, chunk, n);
	int bad = ferror(f);
	fclose(f);
	if (bad)
		return error("cannot read '%s'", path);
	return 0;
}
