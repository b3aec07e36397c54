/*
 * tok_test.h - helpers the tokenizer tests share (test_tok*.c): loading a
 * tokenizer with its messages captured, reading reference JSONL files, and
 * comparing ids with a reference list. Header-only (static inline), so a
 * test that uses a part of it compiles without warnings.
 */
#ifndef MEGAC_TESTS_TOK_TEST_H
#define MEGAC_TESTS_TOK_TEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "data/tok.h"
#include "test.h"

/* tok_load with stderr captured into *msg (freed when msg is NULL). */
static inline struct tokenizer *tok_test_load(const struct tok_config *cfg, char **msg)
{
	struct test_capture c;
	test_capture_begin(&c, 2);
	struct tokenizer *t = tok_load(cfg);
	char *m = test_capture_end(&c);
	if (msg)
		*msg = m;
	else
		free(m);
	return t;
}

/* The lines of the JSONL a shell command prints (e.g. "xz -dc FILE"), as a
 * JSON array; NUL bytes are allowed inside strings, a bad line is reported
 * and skipped. */
static inline json_t *tok_test_read_jsonl(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	if (!f)
		return NULL;
	json_t *all = json_array();
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, f)) > 0) {
		json_error_t je;
		json_t *j = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
		if (j)
			json_array_append_new(all, j);
		else
			printf("#   bad JSON line from '%s': %s\n", cmd, je.text);
	}
	free(line);
	pclose(f);
	return all;
}

/* ids against a JSON array of integers; prints the first difference. */
static inline bool tok_test_same_ids(const struct tok_ids *ids, const json_t *want, const char *what)
{
	size_t n = json_array_size(want), i = 0;
	while (i < n && i < ids->n && ids->v[i] == json_integer_value(json_array_get(want, i)))
		i++;
	if (i == n && i == ids->n)
		return true;
	printf("#   %s: ids differ at %zu (got %zu ids, want %zu): got %d, want %lld\n", what, i, ids->n, n,
	       i < ids->n ? ids->v[i] : -1, i < n ? (long long)json_integer_value(json_array_get(want, i)) : -1LL);
	return false;
}

#endif
