/*
 * xalloc.h - allocation that cannot return NULL: out of memory is fatal
 * (die), so callers never carry an OOM path they could not test anyway.
 */
#ifndef MEGAC_BASE_XALLOC_H
#define MEGAC_BASE_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Grow *p (of *cap elements of elem bytes) so it holds at least need elements. */
void xgrow(void *pp, size_t *cap, size_t need, size_t elem);

#endif
