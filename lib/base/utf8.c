/*
 * utf8.c - see utf8.h. ASCII runs are skipped eight bytes at a time; the
 * multi-byte cases follow the table of well-formed sequences in Unicode
 * chapter 3 (D92).
 */
#include "utf8.h"

#include <stdint.h>
#include <string.h>

bool utf8_valid(const char *str, size_t n, size_t *bad)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < n) {
		if (i + 8 <= n) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t need;
		unsigned lo = 0x80, hi = 0xBF;
		if (c >= 0xC2 && c <= 0xDF)
			need = 1;
		else if (c >= 0xE0 && c <= 0xEF) {
			need = 2;
			if (c == 0xE0)
				lo = 0xA0;
			else if (c == 0xED)
				hi = 0x9F; /* no surrogates */
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3;
			if (c == 0xF0)
				lo = 0x90;
			else if (c == 0xF4)
				hi = 0x8F;
		} else
			goto fail;
		if (i + need >= n)
			goto fail;
		if (s[i + 1] < lo || s[i + 1] > hi)
			goto fail;
		for (size_t k = 2; k <= need; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				goto fail;
		i += need + 1;
	}
	return true;
fail:
	if (bad)
		*bad = i;
	return false;
}
