/*
 * layer_pattern.c - see gpt_config.h (gpt_layer_pattern, gpt_moe_pattern):
 * which layers a per-layer flag (--moe-layer-freq, --window-attn-skip-freq)
 * selects, from an integer or one of Megatron's list expressions, read
 * without eval.
 */
#include "model/gpt_config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

/*
 * Megatron's layer patterns ("[1,0,1]", "([0]*3+[1]*58)", "[0]*1+[1]*3"),
 * which it reads with Python's eval after allowing only digits, ',', '[',
 * ']', '(', ')', '+' and '*'. Here the same expressions without eval: a
 * recursive-descent reader of integers, list literals, parentheses, '*'
 * (int times int, list times int or int times list: repetition) and '+'
 * (int plus int, list plus list: concatenation), with Python's precedence.
 * Spaces are skipped (Megatron's check refuses them). Anything else is an
 * error naming the flag and the 1-based character position.
 */
#define PAT_MAX (1 << 20) /* the longest list or largest integer an expression may build */

struct pat_val {
	bool list;
	int64_t n;      /* the integer, or the list's length */
	int64_t *v;     /* the list's entries (integers: nested lists are refused) */
};

struct pat_reader {
	const char *s, *p, *flag;
	int err;
};

static int pat_fail(struct pat_reader *r, const char *at, const char *what)
{
	if (!r->err)
		error("%s '%s': %s at position %d", r->flag, r->s, what, (int)(at - r->s) + 1);
	r->err = -1;
	return -1;
}

static void pat_skip(struct pat_reader *r)
{
	while (*r->p == ' ' || *r->p == '\t')
		r->p++;
}

static int pat_expr(struct pat_reader *r, struct pat_val *out);

/* The readers below leave nothing allocated in *out when they fail. */
#define PAT_CLEAN(name)                                                        \
	static int name##_in(struct pat_reader *r, struct pat_val *out);      \
	static int name(struct pat_reader *r, struct pat_val *out)             \
	{                                                                      \
		int rc = name##_in(r, out);                                    \
		if (rc < 0) {                                                  \
			free(out->v);                                          \
			out->v = NULL;                                         \
		}                                                              \
		return rc;                                                     \
	}
PAT_CLEAN(pat_atom)
PAT_CLEAN(pat_term)
PAT_CLEAN(pat_expr)

static int pat_push(struct pat_reader *r, struct pat_val *l, int64_t x, const char *at)
{
	if (l->n >= PAT_MAX)
		return pat_fail(r, at, "the list grows longer than any model");
	if ((l->n & (l->n - 1)) == 0 || l->n == 0)
		l->v = xrealloc(l->v, (size_t)(l->n ? 2 * l->n : 1) * sizeof(*l->v));
	l->v[l->n++] = x;
	return 0;
}

static int pat_atom_in(struct pat_reader *r, struct pat_val *out)
{
	memset(out, 0, sizeof(*out));
	pat_skip(r);
	const char *at = r->p;
	if (*r->p >= '0' && *r->p <= '9') {
		int64_t x = 0;
		for (; *r->p >= '0' && *r->p <= '9'; r->p++) {
			x = x * 10 + (*r->p - '0');
			if (x > PAT_MAX)
				return pat_fail(r, at, "an integer too large");
		}
		if (*at == '0' && r->p - at > 1 && x != 0) /* Python refuses 01 */
			return pat_fail(r, at, "an integer with a leading zero");
		out->n = x;
		return 0;
	}
	if (*r->p == '(') {
		r->p++;
		if (pat_expr(r, out) < 0)
			return -1;
		pat_skip(r);
		if (*r->p == ',')
			return pat_fail(r, r->p, "a tuple (only lists and integers are patterns)");
		if (*r->p != ')')
			return pat_fail(r, r->p, "expected ')'");
		r->p++;
		return 0;
	}
	if (*r->p == '[') {
		r->p++;
		out->list = true;
		for (;;) {
			pat_skip(r);
			if (*r->p == ']')
				break;
			const char *el = r->p;
			struct pat_val e;
			if (pat_expr(r, &e) < 0)
				return -1;
			if (e.list) {
				free(e.v);
				return pat_fail(r, el, "a list inside a list (entries are 0 or 1)");
			}
			if (pat_push(r, out, e.n, el) < 0)
				return -1;
			pat_skip(r);
			if (*r->p == ',') {
				r->p++;
				continue;
			}
			if (*r->p != ']')
				return pat_fail(r, r->p, "expected ',' or ']'");
			break;
		}
		r->p++;
		pat_skip(r);
		if (*r->p == '[')
			return pat_fail(r, r->p, "indexing (only lists, integers, '+' and '*')");
		return 0;
	}
	if (!*r->p)
		return pat_fail(r, r->p, "the text ends where an integer, '[' or '(' was expected");
	return pat_fail(r, r->p, "expected an integer, '[' or '('");
}

static int pat_term_in(struct pat_reader *r, struct pat_val *out)
{
	if (pat_atom(r, out) < 0)
		return -1;
	for (;;) {
		pat_skip(r);
		if (*r->p != '*')
			return 0;
		const char *at = r->p++;
		if (*r->p == '*')
			return pat_fail(r, at, "'**' (only lists, integers, '+' and '*')");
		struct pat_val b;
		if (pat_atom(r, &b) < 0)
			return -1;
		if (out->list && b.list) {
			free(b.v);
			return pat_fail(r, at, "a list times a list");
		}
		if (!out->list && !b.list) {
			if (out->n * b.n > PAT_MAX)
				return pat_fail(r, at, "an integer too large");
			out->n *= b.n;
			continue;
		}
		struct pat_val *l = out->list ? out : &b;
		int64_t times = out->list ? b.n : out->n;
		if (l->n * times > PAT_MAX) {
			free(b.v);
			return pat_fail(r, at, "the list grows longer than any model");
		}
		struct pat_val res = { true, 0, NULL };
		res.v = xmalloc((size_t)(l->n * times + 1) * sizeof(*res.v));
		for (int64_t t = 0; t < times; t++)
			for (int64_t i = 0; i < l->n; i++)
				res.v[res.n++] = l->v[i];
		free(out->v);
		free(b.v);
		*out = res;
	}
}

static int pat_expr_in(struct pat_reader *r, struct pat_val *out)
{
	if (pat_term(r, out) < 0)
		return -1;
	for (;;) {
		pat_skip(r);
		if (*r->p != '+')
			return 0;
		const char *at = r->p++;
		struct pat_val b;
		if (pat_term(r, &b) < 0)
			return -1;
		if (out->list != b.list) {
			free(b.v);
			return pat_fail(r, at, "a list plus an integer");
		}
		if (!out->list) {
			out->n += b.n;
			if (out->n > PAT_MAX)
				return pat_fail(r, at, "an integer too large");
			continue;
		}
		if (out->n + b.n > PAT_MAX) {
			free(b.v);
			return pat_fail(r, at, "the list grows longer than any model");
		}
		out->v = xrealloc(out->v, (size_t)(out->n + b.n + 1) * sizeof(*out->v));
		memcpy(out->v + out->n, b.v, (size_t)b.n * sizeof(*b.v));
		out->n += b.n;
		free(b.v);
	}
}

int gpt_layer_pattern(const char *spec, int64_t L, unsigned char *out, const char *flag)
{
	const char *p = spec;
	while (*p == ' ')
		p++;
	if (!strchr(spec, '[')) { /* Megatron: no '[' is an integer */
		char *end;
		long long q = strtoll(p, &end, 10);
		while (end != p && *end == ' ')
			end++;
		if (end == p || *end || q < 1)
			return error("%s '%s': give a positive integer, a list such as [1,0,1,0] or an expression "
				     "such as ([0]*1+[1]*3)", flag, spec);
		for (int64_t i = 0; i < L; i++)
			out[i] = i % q == 0;
		return 0;
	}
	struct pat_reader r = { spec, spec, flag, 0 };
	struct pat_val v = { 0 };
	int rc = pat_expr(&r, &v);
	pat_skip(&r);
	if (rc == 0 && *r.p)
		rc = pat_fail(&r, r.p, *r.p == ',' ? "a tuple (only lists and integers are patterns)" :
				       *r.p == '[' ? "indexing (only lists, integers, '+' and '*')" :
				       "unexpected text (only digits, ',', '[', ']', '(', ')', '+' and '*')");
	if (rc == 0 && !v.list)
		rc = error("%s '%s' gives the integer %lld, not a list (write a plain integer without brackets)", flag,
			   spec, (long long)v.n);
	if (rc == 0 && v.n != L)
		rc = error("%s '%s' gives %lld entries; --num-layers is %lld", flag, spec, (long long)v.n,
			   (long long)L);
	for (int64_t i = 0; rc == 0 && i < v.n; i++) {
		if (v.v[i] != 0 && v.v[i] != 1)
			rc = error("%s '%s': entry %lld is %lld; entries are 0 or 1", flag, spec, (long long)i,
				   (long long)v.v[i]);
		else
			out[i] = (unsigned char)v.v[i];
	}
	free(v.v);
	return rc < 0 ? -1 : 0;
}

int gpt_moe_pattern(const char *spec, int64_t L, unsigned char *out)
{
	return gpt_layer_pattern(spec, L, out, "--moe-layer-freq");
}
