/*
 * sbuf.h - a growable byte buffer (git's strbuf, smaller). Always kept
 * NUL-terminated so ->buf can be handed to C string functions, but it may hold
 * NUL bytes inside: ->len is the truth.
 */
#ifndef MEGAC_BASE_SBUF_H
#define MEGAC_BASE_SBUF_H

#include <stddef.h>

struct sbuf {
	char *buf;
	size_t len;
	size_t cap;
};

#define SBUF_INIT { NULL, 0, 0 }

void sbuf_grow(struct sbuf *sb, size_t extra);
void sbuf_add(struct sbuf *sb, const void *data, size_t n);
void sbuf_addstr(struct sbuf *sb, const char *s);
void sbuf_addch(struct sbuf *sb, int c);
void sbuf_addf(struct sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_reset(struct sbuf *sb);
void sbuf_release(struct sbuf *sb);
/* Detach the buffer: caller owns the returned string; sb is empty again. */
char *sbuf_detach(struct sbuf *sb, size_t *len);
/* Append a whole file; error() naming it and -1 when it cannot be read. */
int sbuf_read_file(struct sbuf *sb, const char *path);

#endif
