/*
 * jsonl_fast.h - the string values of a few keys of one JSONL line, without
 * building a JSON tree: preprocess_data's common case (an object whose
 * wanted keys hold strings), at a fraction of jansson's cost.
 *
 * It answers only for lines jansson (as preprocess.c calls it: any value,
 * NUL allowed, integers as reals) reads without error into an object that
 * holds each wanted key with a string value, and then it gives the same
 * strings. For anything else (an error of any kind, a missing key, a list
 * of sentences, an escape in a key, a number with an exponent, deep
 * nesting) it declines, and the caller runs jansson, which gives the
 * answer or the error message.
 */
#ifndef MEGAC_DATA_JSONL_FAST_H
#define MEGAC_DATA_JSONL_FAST_H

#include <stdbool.h>
#include <stddef.h>

struct jsonl_fast_value {
	const char *s; /* into the line, or into buf when it had escapes */
	size_t len;
	char *buf;     /* owned scratch for a decoded value, reused */
	size_t cap;
	size_t seen;   /* occurrences of the key (the last one counts, as jansson) */
};

/* Fill v[0..nkeys) with the string values of keys[0..nkeys) in line[0..n);
 * false: decline (use jansson). The line must not hold its newline. */
bool jsonl_fast_strings(const char *line, size_t n, const char *const *keys, int nkeys,
			struct jsonl_fast_value *v);

void jsonl_fast_values_free(struct jsonl_fast_value *v, int nkeys);

#endif
