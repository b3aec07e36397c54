/*
 * tok_null.c - NullTokenizer: the text already is the ids, written as
 * integers separated by single spaces. Megatron parses it with
 * `[int(x) for x in text.split(' ')]`, so each piece follows Python's int():
 * surrounding whitespace (Python's str.isspace set), an optional sign,
 * decimal digits of any script, single underscores between digits. An
 * empty text is an empty document (Megatron would raise).
 */
#include "base/sbuf.h"
#include "tok.h"
#include "tok_bpe.h"
#include "tok_hf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Python's Py_UNICODE_ISSPACE. */
static bool py_space(uint32_t cp)
{
	return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
	       cp == 0x3000;
}

/* Value of a decimal digit (category Nd) or -1. Unicode keeps every Nd run
 * as whole blocks of ten starting at zero. */
static int digit_value(uint32_t cp)
{
	if (cp < 0x80)
		return cp >= '0' && cp <= '9' ? (int)(cp - '0') : -1;
	if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_ND)
		return -1;
	uint32_t z = cp;
	while (z > 0 && utf8proc_category((utf8proc_int32_t)(z - 1)) == UTF8PROC_CATEGORY_ND)
		z--;
	return (int)((cp - z) % 10);
}

/* Parse one piece; 0 and *v, or -1 (not an integer) / -2 (too large). */
static int parse_piece(const char *p, size_t n, int64_t *v)
{
	size_t i = 0, l;
	uint32_t cp = 0;
	/* leading whitespace */
	while (i < n && py_space(cp = tok_bpe_utf8_next(p + i, n - i, &l)))
		i += l;
	bool neg = false;
	if (i < n && (p[i] == '+' || p[i] == '-')) {
		neg = p[i] == '-';
		i++;
	}
	int64_t acc = 0;
	bool big = false, any = false, under = false;
	while (i < n) {
		cp = tok_bpe_utf8_next(p + i, n - i, &l);
		if (cp == '_') {
			if (!any || under)
				return -1;
			under = true;
			i += l;
			continue;
		}
		int d = digit_value(cp);
		if (d < 0)
			break;
		if (acc > (INT64_MAX - d) / 10)
			big = true;
		else
			acc = acc * 10 + d;
		any = true;
		under = false;
		i += l;
	}
	if (!any || under)
		return -1;
	while (i < n && py_space(cp = tok_bpe_utf8_next(p + i, n - i, &l)))
		i += l;
	if (i != n)
		return -1;
	if (big)
		return -2;
	*v = neg ? -acc : acc;
	return 0;
}

int tok_null_encode(int64_t vocab_size, const char *text, size_t len, struct tok_ids *out, char *err, size_t errlen)
{
	if (!len)
		return 0;
	size_t start = out->n;
	for (size_t i = 0;;) {
		const char *sp = memchr(text + i, ' ', len - i);
		size_t e = sp ? (size_t)(sp - text) : len;
		int64_t v;
		int r = parse_piece(text + i, e - i, &v);
		if (r == 0 && (v < 0 || v >= vocab_size))
			r = -2;
		if (r) { /* the piece, escaped and cut on a character boundary */
			char *q = tok_bpe_quote(text + i, e - i, 40);
			if (r == -1)
				snprintf(err, errlen, "NullTokenizer: %s is not an integer (the text must be ids "
					 "separated by single spaces)", q);
			else
				snprintf(err, errlen, "NullTokenizer: id %s is outside the vocabulary [0, %" PRId64 ")",
					 q, vocab_size);
			free(q);
			out->n = start;
			return -1;
		}
		tok_ids_push(out, (int32_t)v);
		if (!sp)
			break;
		i = e + 1;
	}
	return 0;
}

int tok_null_decode(int64_t vocab_size, const int32_t *ids, size_t n, struct sbuf *out)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= vocab_size)
			return -1;
	for (size_t i = 0; i < n; i++)
		sbuf_addf(out, i ? " %d" : "%d", (int)ids[i]);
	return 0;
}
