/*
 * jsonl_fast.c - see jsonl_fast.h.
 *
 * A scanner, not a parser: one pass over the line checks the grammar of a
 * strict subset of what jansson accepts and keeps only the wanted keys'
 * strings. The subset, and why each limit keeps it inside what jansson
 * reads without error:
 *   - the line is valid UTF-8 (checked first, as strictly as jansson);
 *   - whitespace is jansson's four characters; nothing follows the object;
 *   - strings hold no raw control character; escapes are JSON's eight and
 *     \uXXXX, a high surrogate only with its low one (a lone surrogate is
 *     jansson's error); keys have no escape at all (jansson refuses a NUL
 *     in a key, and the wanted keys never need one);
 *   - numbers have no exponent and at most 300 characters (jansson reads
 *     integers as reals here; only a huge exponent could overflow them);
 *     true, false, null and numbers end at a delimiter;
 *   - containers nest at most 32 deep (jansson's limit is 2048);
 *   - each wanted key's value is a string; the last duplicate counts, as
 *     jansson's object keeps the last value set.
 */
#include "jsonl_fast.h"
#include "base/utf8.h"
#include "base/xalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32
#define MAX_NUMBER 300

struct jp {
	const char *p, *end;
};

static inline void skip_ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static bool hex4(const char *p, const char *end, unsigned *out)
{
	if (end - p < 4)
		return false;
	unsigned u = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return false;
		u = u << 4 | d;
	}
	*out = u;
	return true;
}

/* The escape at p (a backslash): its length in the line and the code
 * point (or byte) it stands for; 0 when not accepted. */
static size_t escape_at(const char *p, const char *end, unsigned *cp)
{
	if (end - p < 2)
		return 0;
	switch (p[1]) {
	case '"': *cp = '"'; return 2;
	case '\\': *cp = '\\'; return 2;
	case '/': *cp = '/'; return 2;
	case 'b': *cp = '\b'; return 2;
	case 'f': *cp = '\f'; return 2;
	case 'n': *cp = '\n'; return 2;
	case 'r': *cp = '\r'; return 2;
	case 't': *cp = '\t'; return 2;
	case 'u': break;
	default: return 0;
	}
	unsigned u, lo;
	if (!hex4(p + 2, end, &u))
		return 0;
	if (u >= 0xDC00 && u <= 0xDFFF)
		return 0;
	if (u < 0xD800 || u > 0xDBFF) {
		*cp = u;
		return 6;
	}
	if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
		return 0;
	*cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
	return 12;
}

/* The string at j->p (its opening quote): [*s, *s + *len) between the
 * quotes, *esc when it holds escapes. */
static bool scan_string(struct jp *j, const char **s, size_t *len, bool *esc)
{
	const char *p = j->p + 1, *end = j->end;
	*s = p;
	*esc = false;
	for (;;) {
		/* eight bytes at a time while none is a quote, a backslash or a
		 * control character (the classic has-zero-byte tests) */
		while (end - p >= 8) {
			uint64_t w;
			memcpy(&w, p, 8);
			const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
			uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
			if (((q - ones) & ~q & high) | ((b - ones) & ~b & high) | ((w - ones * 0x20) & ~w & high))
				break;
			p += 8;
		}
		while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
			p++;
		if (p >= end || (unsigned char)*p < 0x20)
			return false;
		if (*p == '"')
			break;
		unsigned cp;
		size_t l = escape_at(p, end, &cp);
		if (!l)
			return false;
		*esc = true;
		p += l;
	}
	*len = (size_t)(p - *s);
	j->p = p + 1;
	return true;
}

static void put(struct jsonl_fast_value *v, size_t *n, const char *s, size_t k)
{
	if (*n + k > v->cap)
		xgrow(&v->buf, &v->cap, *n + k, 1);
	memcpy(v->buf + *n, s, k);
	*n += k;
}

/* s[0..len) (already checked by scan_string) with its escapes decoded into v->buf */
static void decode(struct jsonl_fast_value *v, const char *s, size_t len)
{
	const char *p = s, *end = s + len;
	size_t n = 0;
	while (p < end) {
		const char *q = memchr(p, '\\', (size_t)(end - p));
		if (!q) {
			put(v, &n, p, (size_t)(end - p));
			break;
		}
		put(v, &n, p, (size_t)(q - p));
		unsigned cp = 0;
		size_t l = escape_at(q, end, &cp);
		char u[4];
		size_t k;
		if (cp < 0x80) {
			u[0] = (char)cp;
			k = 1;
		} else if (cp < 0x800) {
			u[0] = (char)(0xC0 | cp >> 6);
			u[1] = (char)(0x80 | (cp & 0x3F));
			k = 2;
		} else if (cp < 0x10000) {
			u[0] = (char)(0xE0 | cp >> 12);
			u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
			u[2] = (char)(0x80 | (cp & 0x3F));
			k = 3;
		} else {
			u[0] = (char)(0xF0 | cp >> 18);
			u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
			u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
			u[3] = (char)(0x80 | (cp & 0x3F));
			k = 4;
		}
		put(v, &n, u, k);
		p = q + l;
	}
	v->s = v->buf;
	v->len = n;
}

static bool at_delimiter(const struct jp *j)
{
	if (j->p >= j->end)
		return true;
	char c = *j->p;
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '}' || c == ']';
}

static bool skip_number(struct jp *j)
{
	const char *p = j->p, *end = j->end, *start = p;
	if (p < end && *p == '-')
		p++;
	if (p >= end || *p < '0' || *p > '9')
		return false;
	if (*p == '0')
		p++;
	else
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	if (p < end && *p == '.') {
		p++;
		if (p >= end || *p < '0' || *p > '9')
			return false;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p - start > MAX_NUMBER)
		return false;
	j->p = p;
	return at_delimiter(j); /* an exponent, or anything else, declines */
}

static bool skip_literal(struct jp *j, const char *word, size_t n)
{
	if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n))
		return false;
	j->p += n;
	return at_delimiter(j);
}

static bool skip_value(struct jp *j, int depth)
{
	if (j->p >= j->end)
		return false;
	const char *s;
	size_t len;
	bool esc;
	switch (*j->p) {
	case '"':
		return scan_string(j, &s, &len, &esc);
	case 't':
		return skip_literal(j, "true", 4);
	case 'f':
		return skip_literal(j, "false", 5);
	case 'n':
		return skip_literal(j, "null", 4);
	case '{':
	case '[':
		break;
	default:
		return skip_number(j);
	}
	bool obj = *j->p == '{';
	char close = obj ? '}' : ']';
	if (depth >= MAX_DEPTH)
		return false;
	j->p++;
	skip_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return true;
	}
	for (;;) {
		if (obj) {
			if (j->p >= j->end || *j->p != '"' || !scan_string(j, &s, &len, &esc) || esc)
				return false;
			skip_ws(j);
			if (j->p >= j->end || *j->p != ':')
				return false;
			j->p++;
			skip_ws(j);
		}
		if (!skip_value(j, depth + 1))
			return false;
		skip_ws(j);
		if (j->p >= j->end)
			return false;
		if (*j->p == close) {
			j->p++;
			return true;
		}
		if (*j->p != ',')
			return false;
		j->p++;
		skip_ws(j);
	}
}

bool jsonl_fast_strings(const char *line, size_t n, const char *const *keys, int nkeys,
			struct jsonl_fast_value *v)
{
	if (!utf8_valid(line, n, NULL))
		return false;
	for (int k = 0; k < nkeys; k++)
		v[k].seen = 0;
	struct jp j = { line, line + n };
	skip_ws(&j);
	if (j.p >= j.end || *j.p != '{')
		return false;
	j.p++;
	skip_ws(&j);
	if (j.p < j.end && *j.p == '}')
		return false; /* no keys: jansson's path names the missing one */
	for (;;) {
		const char *key, *s;
		size_t klen, len;
		bool esc;
		if (j.p >= j.end || *j.p != '"' || !scan_string(&j, &key, &klen, &esc) || esc)
			return false;
		skip_ws(&j);
		if (j.p >= j.end || *j.p != ':')
			return false;
		j.p++;
		skip_ws(&j);
		bool wanted = false;
		for (int k = 0; k < nkeys; k++)
			if (strlen(keys[k]) == klen && !memcmp(keys[k], key, klen))
				wanted = true;
		if (wanted) {
			if (j.p >= j.end || *j.p != '"' || !scan_string(&j, &s, &len, &esc))
				return false;
			for (int k = 0; k < nkeys; k++) {
				if (strlen(keys[k]) != klen || memcmp(keys[k], key, klen))
					continue;
				v[k].seen++;
				if (esc) {
					decode(&v[k], s, len);
				} else {
					v[k].s = s;
					v[k].len = len;
				}
			}
		} else if (!skip_value(&j, 1)) {
			return false;
		}
		skip_ws(&j);
		if (j.p >= j.end)
			return false;
		if (*j.p == '}')
			break;
		if (*j.p != ',')
			return false;
		j.p++;
		skip_ws(&j);
	}
	j.p++;
	skip_ws(&j);
	if (j.p != j.end)
		return false;
	for (int k = 0; k < nkeys; k++)
		if (!v[k].seen)
			return false;
	return true;
}

void jsonl_fast_values_free(struct jsonl_fast_value *v, int nkeys)
{
	if (!v)
		return;
	for (int k = 0; k < nkeys; k++)
		free(v[k].buf);
	free(v);
}
