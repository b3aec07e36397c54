/*
 * pyjson.c - CPython's json.dumps() text for a jansson value (see pyjson.h).
 *
 * Float repr: Python prints the shortest digit string that reads back as the
 * same double and, among those, the one nearest to it (David Gay's dtoa mode
 * 0). We get it from glibc's correctly rounded printf/strtod: for p = 1..17
 * take the nearest p-digit decimal ("%.*e"); if it reads back, done; if not,
 * its neighbour on the other side of x may still read back (only possible
 * next to a power of two, where the rounding interval is lopsided), and then
 * that one is the answer. Python's layout of the digits follows
 * (format_float_short in Python/pystrtod.c): exponent form when the decimal
 * point position is <= -4 or > 16, else positional with ".0" for integers.
 */
#include "base/pyjson.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"

/* Does D * 10^q read back as x? */
static int reads_back(uint64_t d, int q, double x)
{
	char buf[48];
	snprintf(buf, sizeof(buf), "%" PRIu64 "e%d", d, q);
	return strtod(buf, NULL) == x;
}

/* Shortest round-trip digits of x > 0 (finite): digits (no trailing zeros)
 * and decpt with x ~ 0.digits * 10^decpt. */
static void shortest_digits(double x, char digits[24], int *decpt)
{
	uint64_t d = 0;
	int q = 0;
	for (int p = 1; p <= 17; p++) {
		char buf[48];
		snprintf(buf, sizeof(buf), "%.*e", p - 1, x);
		/* buf is "D.DDDDe[+-]XX" (or "De[+-]XX" when p == 1) */
		uint64_t v = 0;
		char *s = buf;
		for (; *s && *s != 'e'; s++)
			if (*s >= '0' && *s <= '9')
				v = v * 10 + (uint64_t)(*s - '0');
		int e = atoi(s + 1);
		int vq = e - (p - 1);
		double back = strtod(buf, NULL);
		if (back == x) {
			d = v;
			q = vq;
			break;
		}
		uint64_t other = back > x ? v - 1 : v + 1;
		if (other && reads_back(other, vq, x)) {
			d = other;
			q = vq;
			break;
		}
		if (p == 17)
			BUG("no 17-digit decimal reads back as %a", x);
	}
	while (d && d % 10 == 0) {
		d /= 10;
		q++;
	}
	int n = snprintf(digits, 24, "%" PRIu64, d);
	*decpt = n + q;
}

void pyjson_float_repr(double x, char out[PYJSON_FLOAT_MAX])
{
	char *o = out;
	if (isnan(x)) {
		strcpy(out, "nan");
		return;
	}
	if (signbit(x))
		*o++ = '-';
	x = fabs(x);
	if (isinf(x)) {
		strcpy(o, "inf");
		return;
	}
	if (x == 0) {
		strcpy(o, "0.0");
		return;
	}
	char dg[24];
	int decpt;
	shortest_digits(x, dg, &decpt);
	int n = (int)strlen(dg);
	if (decpt <= -4 || decpt > 16) {
		*o++ = dg[0];
		if (n > 1) {
			*o++ = '.';
			memcpy(o, dg + 1, (size_t)n - 1);
			o += n - 1;
		}
		int e = decpt - 1; /* |e| <= 324: "%+.02d" by hand */
		*o++ = 'e';
		*o++ = e < 0 ? '-' : '+';
		e = abs(e);
		if (e >= 100)
			*o++ = (char)('0' + e / 100);
		*o++ = (char)('0' + e / 10 % 10);
		*o++ = (char)('0' + e % 10);
		*o = 0;
	} else if (decpt <= 0) {
		*o++ = '0';
		*o++ = '.';
		for (int i = 0; i < -decpt; i++)
			*o++ = '0';
		memcpy(o, dg, (size_t)n + 1);
	} else if (decpt >= n) {
		memcpy(o, dg, (size_t)n);
		o += n;
		for (int i = n; i < decpt; i++)
			*o++ = '0';
		strcpy(o, ".0");
	} else {
		memcpy(o, dg, (size_t)decpt);
		o += decpt;
		*o++ = '.';
		memcpy(o, dg + decpt, (size_t)(n - decpt) + 1);
	}
}

/* json's py_encode_basestring_ascii: the quoted, escaped string. */
static int add_string(struct sbuf *out, const char *s, size_t n)
{
	size_t bad;
	if (!utf8_valid(s, n, &bad))
		return error("json string is not valid UTF-8 (byte %zu)", bad);
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	sbuf_addch(out, '"');
	while (p < end) {
		uint32_t c = *p++;
		if (c >= 0x80) {
			int more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
			c &= 0x3f >> more;
			while (more--)
				c = c << 6 | (*p++ & 0x3f);
		}
		switch (c) {
		case '"': sbuf_addstr(out, "\\\""); continue;
		case '\\': sbuf_addstr(out, "\\\\"); continue;
		case '\n': sbuf_addstr(out, "\\n"); continue;
		case '\r': sbuf_addstr(out, "\\r"); continue;
		case '\t': sbuf_addstr(out, "\\t"); continue;
		case '\b': sbuf_addstr(out, "\\b"); continue;
		case '\f': sbuf_addstr(out, "\\f"); continue;
		}
		if (c >= 0x20 && c <= 0x7e) {
			sbuf_addch(out, (int)c);
		} else if (c >= 0x10000) {
			c -= 0x10000;
			sbuf_addf(out, "\\u%04x\\u%04x", 0xd800 | (c >> 10), 0xdc00 | (c & 0x3ff));
		} else {
			sbuf_addf(out, "\\u%04x", c);
		}
	}
	sbuf_addch(out, '"');
	return 0;
}

void pyjson_string(struct sbuf *out, const char *s, size_t n)
{
	sbuf_addch(out, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		switch (ch) {
		case '"': sbuf_addstr(out, "\\\""); break;
		case '\\': sbuf_addstr(out, "\\\\"); break;
		case '\n': sbuf_addstr(out, "\\n"); break;
		case '\r': sbuf_addstr(out, "\\r"); break;
		case '\t': sbuf_addstr(out, "\\t"); break;
		case '\b': sbuf_addstr(out, "\\b"); break;
		case '\f': sbuf_addstr(out, "\\f"); break;
		default:
			if (ch < 0x20)
				sbuf_addf(out, "\\u%04x", ch);
			else
				sbuf_addch(out, ch);
		}
	}
	sbuf_addch(out, '"');
}

static void newline_indent(struct sbuf *out, int indent, int level)
{
	sbuf_addch(out, '\n');
	for (int i = 0; i < indent * level; i++)
		sbuf_addch(out, ' ');
}

static int dump(json_t *v, int indent, int level, struct sbuf *out)
{
	char num[PYJSON_FLOAT_MAX];
	switch (json_typeof(v)) {
	case JSON_NULL:
		sbuf_addstr(out, "null");
		return 0;
	case JSON_TRUE:
		sbuf_addstr(out, "true");
		return 0;
	case JSON_FALSE:
		sbuf_addstr(out, "false");
		return 0;
	case JSON_INTEGER:
		sbuf_addf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return 0;
	case JSON_REAL: {
		double x = json_real_value(v);
		if (isnan(x))
			sbuf_addstr(out, "NaN");
		else if (isinf(x))
			sbuf_addstr(out, x > 0 ? "Infinity" : "-Infinity");
		else {
			pyjson_float_repr(x, num);
			sbuf_addstr(out, num);
		}
		return 0;
	}
	case JSON_STRING:
		return add_string(out, json_string_value(v), json_string_length(v));
	case JSON_ARRAY: {
		size_t n = json_array_size(v);
		if (!n) {
			sbuf_addstr(out, "[]");
			return 0;
		}
		sbuf_addch(out, '[');
		for (size_t i = 0; i < n; i++) {
			if (i)
				sbuf_addch(out, ',');
			if (indent >= 0)
				newline_indent(out, indent, level + 1);
			else if (i)
				sbuf_addch(out, ' ');
			if (dump(json_array_get(v, i), indent, level + 1, out))
				return -1;
		}
		if (indent >= 0)
			newline_indent(out, indent, level);
		sbuf_addch(out, ']');
		return 0;
	}
	case JSON_OBJECT: {
		if (!json_object_size(v)) {
			sbuf_addstr(out, "{}");
			return 0;
		}
		sbuf_addch(out, '{');
		int first = 1;
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			if (!first)
				sbuf_addch(out, ',');
			if (indent >= 0)
				newline_indent(out, indent, level + 1);
			else if (!first)
				sbuf_addch(out, ' ');
			first = 0;
			if (add_string(out, json_object_iter_key(it), json_object_iter_key_len(it)))
				return -1;
			sbuf_addstr(out, ": ");
			if (dump(json_object_iter_value(it), indent, level + 1, out))
				return -1;
		}
		if (indent >= 0)
			newline_indent(out, indent, level);
		sbuf_addch(out, '}');
		return 0;
	}
	}
	return error("json value of unknown type %d", (int)json_typeof(v));
}

int pyjson_dumps(json_t *v, int indent, struct sbuf *out)
{
	return dump(v, indent, 0, out);
}
