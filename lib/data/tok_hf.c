/*
 * tok_hf.c - running the Hugging Face pipeline of tok_hf.h (built by
 * tok_hf_build.c): per-thread sessions, encoding and decoding. The semantics
 * follow `tokenizers` (Rust) step by step:
 * AddedVocabulary::find_matches for added tokens, NormalizedString::split for
 * the split behaviours, Oniguruma's find_iter for empty regex matches.
 */
#include "tok_hf.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/utf8.h"
#include "base/xalloc.h"
#include "tok.h"
#include "tok_bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- sessions --------------------------------------------------------- */

struct span {
	size_t s, e;
	bool m; /* a match; after the behaviour: "remove" */
};

struct stage_state {
	pcre2_match_data *md;
	struct sbuf buf;
	struct span *sp, *sp2;
	size_t nsp, capsp, capsp2;
};

struct tok_hf_session {
	const struct tok_hf *h;
	struct tok_bpe_cache *cache;
	struct sbuf *nbuf; /* one per normalizer */
	struct stage_state *st;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jit;
	struct tok_ids tmp;
	char err[256];
};

struct tok_hf_session *tok_hf_session_new(const struct tok_hf *h)
{
	struct tok_hf_session *s = xcalloc(1, sizeof(*s));
	s->h = h;
	s->cache = tok_bpe_cache_new();
	s->nbuf = xcalloc(h->n_norms + 1, sizeof(*s->nbuf));
	s->st = xcalloc(h->n_stages + 1, sizeof(*s->st));
	bool any_re = false;
	for (size_t i = 0; i < h->n_stages; i++) {
		if (!h->stages[i].re)
			continue;
		any_re = true;
		s->st[i].md = pcre2_match_data_create_from_pattern(h->stages[i].re, NULL);
		if (!s->st[i].md)
			die("out of memory creating regex match data");
	}
	if (any_re) {
		s->mctx = pcre2_match_context_create(NULL);
		s->jit = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
		if (!s->mctx || !s->jit)
			die("out of memory creating regex match context");
		pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
	}
	return s;
}

void tok_hf_session_free(struct tok_hf_session *s)
{
	if (!s)
		return;
	tok_bpe_cache_free(s->cache);
	for (size_t i = 0; i < s->h->n_norms; i++)
		sbuf_release(&s->nbuf[i]);
	free(s->nbuf);
	for (size_t i = 0; i < s->h->n_stages; i++) {
		pcre2_match_data_free(s->st[i].md);
		sbuf_release(&s->st[i].buf);
		free(s->st[i].sp);
		free(s->st[i].sp2);
	}
	free(s->st);
	pcre2_match_context_free(s->mctx);
	pcre2_jit_stack_free(s->jit);
	tok_ids_free(&s->tmp);
	free(s);
}

/* ---- encoding --------------------------------------------------------- */

struct enc {
	const struct tok_hf *h;
	struct tok_hf_session *s;
	struct tok_ids *out;
};

/* at0: the piece starts at offset 0 of the original text (HF's
 * offsets_original().0 == 0, which Metaspace's prepend_scheme "first"
 * tests). */
static int enc_pretok(struct enc *e, size_t k, const char *t, size_t n, bool at0);

static inline void span_push(struct span **sp, size_t *n, size_t *cap, size_t s, size_t e, bool m)
{
	xgrow(sp, cap, *n + 1, sizeof(**sp));
	(*sp)[*n].s = s;
	(*sp)[*n].e = e;
	(*sp)[*n].m = m;
	(*n)++;
}

/* NormalizedString::split: turn (span, is_match) into (span, remove). */
static void apply_behavior(struct stage_state *ss, enum tok_hf_behavior b)
{
	struct span *sp = ss->sp;
	size_t n = ss->nsp, k = 0;
	bool prev = false;
	switch (b) {
	case TOK_HF_ISOLATED:
		for (size_t i = 0; i < n; i++)
			sp[i].m = false;
		return;
	case TOK_HF_REMOVED:
		return;
	case TOK_HF_CONTIGUOUS:
		for (size_t i = 0; i < n; i++) {
			bool m = sp[i].m;
			if (m == prev && k)
				sp[k - 1].e = sp[i].e;
			else
				sp[k++] = (struct span){ sp[i].s, sp[i].e, false };
			prev = m;
		}
		ss->nsp = k;
		return;
	case TOK_HF_MERGED_WITH_PREVIOUS:
		for (size_t i = 0; i < n; i++) {
			bool m = sp[i].m;
			if (m && !prev && k)
				sp[k - 1].e = sp[i].e;
			else
				sp[k++] = (struct span){ sp[i].s, sp[i].e, false };
			prev = m;
		}
		ss->nsp = k;
		return;
	case TOK_HF_MERGED_WITH_NEXT:
		xgrow(&ss->sp2, &ss->capsp2, n + 1, sizeof(*ss->sp2));
		for (size_t i = n; i-- > 0;) {
			bool m = sp[i].m;
			if (m && !prev && k)
				ss->sp2[k - 1].s = sp[i].s;
			else
				ss->sp2[k++] = (struct span){ sp[i].s, sp[i].e, false };
			prev = m;
		}
		for (size_t i = 0; i < k; i++)
			sp[i] = ss->sp2[k - 1 - i];
		ss->nsp = k;
		return;
	}
}

/* i is at the end of t or at the first byte of a character */
static inline bool on_boundary(const char *t, size_t n, size_t i)
{
	return i == n || (i < n && ((unsigned char)t[i] & 0xC0) != 0x80);
}

/* Pattern::find_matches for a regex, with Oniguruma's find_iter: an empty
 * match right where the previous match ended is skipped by one character. */
static int regex_spans(struct enc *e, const struct tok_hf_stage *st, struct stage_state *ss, const char *t, size_t n)
{
	ss->nsp = 0;
	if (!n) {
		span_push(&ss->sp, &ss->nsp, &ss->capsp, 0, 0, false);
		return 0;
	}
	size_t prev = 0, last_end = 0, lme = SIZE_MAX;
	while (last_end <= n) {
		/* JIT-compiled: PCRE2's fast path, without pcre2_match's checks
		 * (valid UTF-8 and a pattern fit for JIT, both known here) */
		int rc = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)t, n, last_end, 0, ss->md, e->s->mctx)
				 : pcre2_match(st->re, (PCRE2_SPTR)t, n, last_end, PCRE2_NO_UTF_CHECK, ss->md, e->s->mctx);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			PCRE2_UCHAR msg[200];
			pcre2_get_error_message(rc, msg, sizeof(msg));
			snprintf(e->s->err, sizeof(e->s->err), "pre-tokenizer regex failed: %s", (char *)msg);
			return -1;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ss->md);
		size_t ms = ov[0], me = ov[1];
		if (ms == me && me == lme) {
			if (last_end >= n)
				break;
			size_t l;
			tok_bpe_utf8_next(t + last_end, n - last_end, &l);
			last_end += l;
			continue;
		}
		if (ms < prev || me < ms) { /* \K tricks: keep the tiling intact */
			snprintf(e->s->err, sizeof(e->s->err), "pre-tokenizer regex returned a match before its start");
			return -1;
		}
		/* the pieces go to stages that trust them to be UTF-8 (\C is
		 * refused at load; this keeps a regex engine surprise from
		 * becoming a read past the text) */
		if (me > n || !on_boundary(t, n, ms) || !on_boundary(t, n, me)) {
			snprintf(e->s->err, sizeof(e->s->err),
				 "pre-tokenizer regex returned a match outside the text or inside a character");
			return -1;
		}
		last_end = lme = me;
		if (prev != ms)
			span_push(&ss->sp, &ss->nsp, &ss->capsp, prev, ms, false);
		span_push(&ss->sp, &ss->nsp, &ss->capsp, ms, me, true);
		prev = me;
	}
	if (prev != n)
		span_push(&ss->sp, &ss->nsp, &ss->capsp, prev, n, false);
	return 0;
}

/* Rust's char::is_numeric: Nd, Nl, No. */
static bool is_numeric(uint32_t cp)
{
	if (cp < 0x80)
		return cp >= '0' && cp <= '9';
	utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
	return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

static void digit_spans(struct stage_state *ss, const char *t, size_t n)
{
	ss->nsp = 0;
	if (!n) {
		span_push(&ss->sp, &ss->nsp, &ss->capsp, 0, 0, false);
		return;
	}
	size_t last = 0;
	for (size_t i = 0; i < n;) {
		size_t l;
		uint32_t cp = tok_bpe_utf8_next(t + i, n - i, &l);
		if (is_numeric(cp)) {
			if (last < i)
				span_push(&ss->sp, &ss->nsp, &ss->capsp, last, i, false);
			span_push(&ss->sp, &ss->nsp, &ss->capsp, i, i + l, true);
			last = i + l;
		}
		i += l;
	}
	if (n > last)
		span_push(&ss->sp, &ss->nsp, &ss->capsp, last, n, false);
}

/* Metaspace: ' ' -> the replacement, the replacement prepended (always,
 * or for the piece at the start of the text), then the pieces split before
 * each replacement (MergedWithNext) when split is set. */
static int metaspace(struct enc *e, size_t k, const struct tok_hf_stage *st, struct stage_state *ss, const char *t,
		     size_t n, bool at0)
{
	struct sbuf *b = &ss->buf;
	sbuf_reset(b);
	bool starts = n >= st->replen && !memcmp(t, st->rep, st->replen);
	if (!starts && t[0] != ' ' &&
	    (st->prepend == TOK_HF_PREPEND_ALWAYS || (st->prepend == TOK_HF_PREPEND_FIRST && at0)))
		sbuf_add(b, st->rep, st->replen);
	/* room for every byte a space, then plain copies */
	sbuf_grow(b, n * (st->replen > 1 ? st->replen : 1));
	char *o = b->buf + b->len;
	for (size_t i = 0; i < n;) {
		const char *q = memchr(t + i, ' ', n - i);
		size_t j = q ? (size_t)(q - t) : n;
		memcpy(o, t + i, j - i);
		o += j - i;
		if (q) {
			memcpy(o, st->rep, st->replen);
			o += st->replen;
		}
		i = j + (q != NULL);
	}
	b->len = (size_t)(o - b->buf);
	b->buf[b->len] = 0;
	/* the stage's buffer is reused by deeper calls of this stage only
	 * after these pieces are done: copy nothing, but keep the pointer */
	const char *u = b->buf;
	size_t un = b->len;
	if (!st->split)
		return enc_pretok(e, k + 1, u, un, at0);
	ss->nsp = 0;
	size_t last = 0;
	for (size_t i = 0; i + st->replen <= un;) {
		const char *q = memchr(u + i, st->rep[0], un - i);
		if (!q || (size_t)(q - u) + st->replen > un)
			break;
		i = (size_t)(q - u);
		if (!memcmp(u + i, st->rep, st->replen)) {
			if (last < i)
				span_push(&ss->sp, &ss->nsp, &ss->capsp, last, i, false);
			span_push(&ss->sp, &ss->nsp, &ss->capsp, i, i + st->replen, true);
			i += st->replen;
			last = i;
		} else {
			i++;
		}
	}
	if (last < un)
		span_push(&ss->sp, &ss->nsp, &ss->capsp, last, un, false);
	apply_behavior(ss, TOK_HF_MERGED_WITH_NEXT);
	for (size_t i = 0; i < ss->nsp; i++)
		if (enc_pretok(e, k + 1, u + ss->sp[i].s, ss->sp[i].e - ss->sp[i].s, at0 && ss->sp[i].s == 0))
			return -1;
	return 0;
}

static int enc_pretok(struct enc *e, size_t k, const char *t, size_t n, bool at0)
{
	if (!n) /* PreTokenizedString::split drops empty pieces */
		return 0;
	const struct tok_hf *h = e->h;
	if (k == h->n_stages) {
		tok_bpe_encode_word(h->bpe, e->s->cache, t, n, e->out);
		return 0;
	}
	const struct tok_hf_stage *st = &h->stages[k];
	struct stage_state *ss = &e->s->st[k];
	switch (st->kind) {
	case TOK_HF_STAGE_GPT2:
		for (size_t i = 0; i < n;) {
			size_t j = tok_bpe_gpt2_split(t, n, i);
			if (enc_pretok(e, k + 1, t + i, j - i, at0 && i == 0))
				return -1;
			i = j;
		}
		return 0;
	case TOK_HF_STAGE_PREFIX:
		if (t[0] == ' ')
			return enc_pretok(e, k + 1, t, n, at0);
		sbuf_reset(&ss->buf);
		sbuf_addch(&ss->buf, ' ');
		sbuf_add(&ss->buf, t, n);
		return enc_pretok(e, k + 1, ss->buf.buf, ss->buf.len, at0);
	case TOK_HF_STAGE_METASPACE:
		return metaspace(e, k, st, ss, t, n, at0);
	case TOK_HF_STAGE_REGEX:
		if (regex_spans(e, st, ss, t, n))
			return -1;
		if (st->invert)
			for (size_t i = 0; i < ss->nsp; i++)
				ss->sp[i].m = !ss->sp[i].m;
		break;
	case TOK_HF_STAGE_DIGITS:
		digit_spans(ss, t, n);
		break;
	}
	apply_behavior(ss, st->behavior);
	/* deeper stages never touch this stage's spans */
	for (size_t i = 0; i < ss->nsp; i++)
		if (!ss->sp[i].m &&
		    enc_pretok(e, k + 1, t + ss->sp[i].s, ss->sp[i].e - ss->sp[i].s, at0 && ss->sp[i].s == 0))
			return -1;
	return 0;
}

/* Rust regex \w: Alphabetic, marks, Nd, Pc, Join_Control. Alphabetic is
 * approximated by letters, Nl and the symbol blocks of circled / squared
 * Latin letters (the Other_Alphabetic characters that are not marks). */
static bool is_word_cp(uint32_t cp)
{
	if (cp < 0x80)
		return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') || cp == '_';
	if (cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
	    (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
		return true;
	switch (utf8proc_category((utf8proc_int32_t)cp)) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
	case UTF8PROC_CATEGORY_NL:
	case UTF8PROC_CATEGORY_MN:
	case UTF8PROC_CATEGORY_MC:
	case UTF8PROC_CATEGORY_ME:
	case UTF8PROC_CATEGORY_ND:
	case UTF8PROC_CATEGORY_PC:
		return true;
	default:
		return false;
	}
}

/* Code point of the character that ends at t[i) (i > 0); *at its start. */
static uint32_t cp_before(const char *t, size_t i, size_t *at)
{
	size_t j = i - 1;
	while (j > 0 && ((unsigned char)t[j] & 0xC0) == 0x80 && i - j < 4)
		j--;
	size_t l;
	uint32_t cp = tok_bpe_utf8_next(t + j, i - j, &l);
	*at = j;
	return cp;
}

static bool try_at(const struct tok_hf *h, const struct tok_hf_matcher *mt, const char *t, size_t n, size_t i,
		   const struct tok_hf_added **tok)
{
	unsigned c = (unsigned char)t[i];
	for (uint32_t j = mt->start[c]; j < mt->start[c + 1]; j++) {
		const struct tok_hf_added *a = &h->added[mt->order[j]];
		if (a->mlen <= n - i && !memcmp(t + i, a->match, a->mlen)) {
			*tok = a;
			return true;
		}
	}
	return false;
}

/* Leftmost-longest added token at or after pos. */
static bool find_added(const struct tok_hf *h, const struct tok_hf_matcher *mt, const char *t, size_t n, size_t pos,
		       size_t *at, const struct tok_hf_added **tok)
{
	if (mt->only_first >= 0) {
		while (pos < n) {
			const char *q = memchr(t + pos, mt->only_first, n - pos);
			if (!q)
				return false;
			size_t i = (size_t)(q - t);
			if (try_at(h, mt, t, n, i, tok)) {
				*at = i;
				return true;
			}
			pos = i + 1;
		}
		return false;
	}
	for (size_t i = pos; i < n; i++) {
		unsigned c = (unsigned char)t[i];
		if (mt->start[c] != mt->start[c + 1] && try_at(h, mt, t, n, i, tok)) {
			*at = i;
			return true;
		}
	}
	return false;
}

static int enc_normalized(struct enc *e, const char *t, size_t n, bool at0);

static int enc_gap(struct enc *e, int level, const char *t, size_t n, bool at0)
{
	if (!n)
		return 0;
	return level == 0 ? enc_normalized(e, t, n, at0) : enc_pretok(e, 0, t, n, at0);
}

/* AddedVocabulary::find_matches + split_with_indices. */
static int enc_added(struct enc *e, const struct tok_hf_matcher *mt, int level, const char *t, size_t n,
		     bool at0)
{
	const struct tok_hf *h = e->h;
	if (!mt->n)
		return enc_gap(e, level, t, n, at0);
	size_t start_offset = 0, pos = 0, at;
	const struct tok_hf_added *a;
	while (pos < n && find_added(h, mt, t, n, pos, &at, &a)) {
		size_t start = at, stop = at + a->mlen;
		pos = stop;
		if (a->single_word) {
			size_t q;
			bool start_space = start == 0 || !is_word_cp(cp_before(t, start, &q));
			bool stop_space = true;
			if (stop < n) {
				size_t l;
				stop_space = !is_word_cp(tok_bpe_utf8_next(t + stop, n - stop, &l));
			}
			if (!start_space || !stop_space)
				continue;
		}
		if (a->lstrip) {
			size_t ns = start, q;
			while (ns > 0 && tok_bpe_is_space(cp_before(t, ns, &q)))
				ns = q;
			start = ns > start_offset ? ns : start_offset;
		}
		if (a->rstrip) {
			while (stop < n) {
				size_t l;
				if (!tok_bpe_is_space(tok_bpe_utf8_next(t + stop, n - stop, &l)))
					break;
				stop += l;
			}
		}
		if (start_offset < start &&
		    enc_gap(e, level, t + start_offset, start - start_offset, at0 && start_offset == 0))
			return -1;
		tok_ids_push(e->out, a->id);
		start_offset = stop;
	}
	if (start_offset < n)
		return enc_gap(e, level, t + start_offset, n - start_offset, at0 && start_offset == 0);
	return 0;
}

static int enc_normalized(struct enc *e, const char *t, size_t n, bool at0)
{
	const struct tok_hf *h = e->h;
	for (size_t k = 0; k < h->n_norms; k++) {
		const struct tok_hf_normop *op = &h->norms[k];
		size_t l;
		/* stripped leading space: the text now starts past offset 0 */
		if (op->kind == TOK_HF_STRIP && op->left && n && tok_bpe_is_space(tok_bpe_utf8_next(t, n, &l)))
			at0 = false;
		int r = tok_hf_normalize(op, t, n, &e->s->nbuf[k]);
		if (r < 0) {
			snprintf(e->s->err, sizeof(e->s->err), "normalizer failed on the text");
			return -1;
		}
		if (r) {
			t = e->s->nbuf[k].buf;
			n = e->s->nbuf[k].len;
		}
	}
	return enc_added(e, &h->norm, 1, t, n, at0);
}

int tok_hf_encode(struct tok_hf_session *s, const char *text, size_t len, bool with_template, struct tok_ids *out,
		  const char **err)
{
	const struct tok_hf *h = s->h;
	struct enc e = { h, s, out };
	s->err[0] = 0;
	*err = s->err;
	if (!with_template || !h->has_tmpl)
		return enc_added(&e, &h->raw, 0, text, len, true);
	size_t na = 0, apos = 0;
	for (size_t i = 0; i < h->n_tmpl; i++)
		if (h->tmpl[i] < 0) {
			na++;
			apos = i;
		}
	if (na == 1) {
		for (size_t i = 0; i < apos; i++)
			tok_ids_push(out, h->tmpl[i]);
		if (enc_added(&e, &h->raw, 0, text, len, true))
			return -1;
		for (size_t i = apos + 1; i < h->n_tmpl; i++)
			tok_ids_push(out, h->tmpl[i]);
		return 0;
	}
	s->tmp.n = 0;
	e.out = &s->tmp;
	if (enc_added(&e, &h->raw, 0, text, len, true))
		return -1;
	for (size_t i = 0; i < h->n_tmpl; i++) {
		if (h->tmpl[i] >= 0) {
			tok_ids_push(out, h->tmpl[i]);
			continue;
		}
		for (size_t j = 0; j < s->tmp.n; j++)
			tok_ids_push(out, s->tmp.v[j]);
	}
	return 0;
}

/* ---- decoding --------------------------------------------------------- */

static const struct tok_hf_added *added_by_id(const struct tok_hf *h, int32_t id)
{
	size_t lo = 0, hi = h->n_added;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct tok_hf_added *m = &h->added[h->added_by_id[mid]];
		if (m->id == id)
			return m;
		if (m->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

bool tok_hf_id_known(const struct tok_hf *h, int32_t id)
{
	const char *p;
	size_t len;
	return added_by_id(h, id) || tok_bpe_id_bytes(h->bpe, id, &p, &len);
}

/* Every occurrence of a (non-empty) in p[0..n) replaced by b, into o; 0
 * (o untouched) when there is none. */
static int replace_str(const char *p, size_t n, const char *a, size_t alen, const char *b, size_t blen,
		       struct sbuf *o)
{
	const char *q = alen && alen <= n ? memmem(p, n, a, alen) : NULL;
	if (!q)
		return 0;
	size_t i = 0;
	while (q) {
		sbuf_add(o, p + i, (size_t)(q - (p + i)));
		sbuf_add(o, b, blen);
		i = (size_t)(q - p) + alen;
		q = i + alen <= n ? memmem(p + i, n - i, a, alen) : NULL;
	}
	sbuf_add(o, p + i, n - i);
	return 1;
}

/* ---- text-mode decoding: Hugging Face's decoder chain ------------------ */

struct toks {
	struct sbuf *v;
	size_t n, cap;
};

static struct sbuf *toks_push(struct toks *t)
{
	xgrow(&t->v, &t->cap, t->n + 1, sizeof(*t->v));
	struct sbuf *b = &t->v[t->n++];
	*b = (struct sbuf)SBUF_INIT;
	sbuf_addstr(b, "");
	return b;
}

static void toks_free(struct toks *t)
{
	for (size_t i = 0; i < t->n; i++)
		sbuf_release(&t->v[i]);
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

/* "<0xNN>" (Rust's u8::from_str_radix on the two characters) */
static int fallback_byte(const struct sbuf *b)
{
	const char *p = b->buf;
	if (b->len != 6 || memcmp(p, "<0x", 3) || p[5] != '>')
		return -1;
	int v = 0;
	for (int i = 3; i < 5; i++) {
		int c = (unsigned char)p[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (c | 0x20) - 'a' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static void flush_bytes(struct toks *out, struct sbuf *bytes)
{
	if (!bytes->len)
		return;
	size_t bad;
	if (utf8_valid(bytes->buf, bytes->len, &bad)) {
		sbuf_add(toks_push(out), bytes->buf, bytes->len);
	} else {
		for (size_t i = 0; i < bytes->len; i++)
			sbuf_addstr(toks_push(out), "\xef\xbf\xbd");
	}
	sbuf_reset(bytes);
}

/* Number of characters c (UTF-8 c[0..cl)) that can be cut: up to max from
 * the start (from_end false) or the end of s. */
static size_t strip_len(const struct sbuf *s, const char *c, size_t cl, int64_t max, bool from_end)
{
	size_t cut = 0;
	for (int64_t k = 0; k < max && cut + cl <= s->len; k++) {
		const char *at = from_end ? s->buf + s->len - cut - cl : s->buf + cut;
		if (memcmp(at, c, cl))
			break;
		cut += cl;
	}
	return cut;
}

static void apply_dec(const struct tok_hf_dec *d, struct toks *in, struct toks *out)
{
	struct sbuf bytes = SBUF_INIT;
	for (size_t i = 0; i < in->n; i++) {
		struct sbuf *t = &in->v[i];
		switch (d->kind) {
		case TOK_HF_DEC_REPLACE: {
			struct sbuf *o = toks_push(out);
			if (!replace_str(t->buf, t->len, d->a, d->alen, d->b, d->blen, o))
				sbuf_add(o, t->buf, t->len);
			break;
		}
		case TOK_HF_DEC_BYTE_FALLBACK: {
			int b = fallback_byte(t);
			if (b >= 0) {
				sbuf_addch(&bytes, b);
				break;
			}
			flush_bytes(out, &bytes);
			sbuf_add(toks_push(out), t->buf, t->len);
			break;
		}
		case TOK_HF_DEC_FUSE:
			if (out->n == 0)
				toks_push(out);
			sbuf_add(&out->v[0], t->buf, t->len);
			break;
		case TOK_HF_DEC_STRIP: {
			size_t a = strip_len(t, d->a, d->alen, d->start, false);
			struct sbuf rest = { t->buf + a, t->len - a, 0 };
			size_t b = strip_len(&rest, d->a, d->alen, d->stop, true);
			sbuf_add(toks_push(out), t->buf + a, t->len - a - b);
			break;
		}
		case TOK_HF_DEC_METASPACE: {
			struct sbuf *o = toks_push(out);
			if (i == 0 && !d->never) {
				/* every replacement of the first token is dropped */
				if (!replace_str(t->buf, t->len, d->a, d->alen, "", 0, o))
					sbuf_add(o, t->buf, t->len);
			} else if (!replace_str(t->buf, t->len, d->a, d->alen, " ", 1, o)) {
				sbuf_add(o, t->buf, t->len);
			}
			break;
		}
		}
	}
	if (d->kind == TOK_HF_DEC_BYTE_FALLBACK)
		flush_bytes(out, &bytes);
	if (d->kind == TOK_HF_DEC_FUSE && out->n == 0)
		toks_push(out);
	sbuf_release(&bytes);
}

static int decode_text(const struct tok_hf *h, const int32_t *ids, size_t n, struct sbuf *out)
{
	struct toks a = { 0 }, b = { 0 };
	for (size_t i = 0; i < n; i++) {
		const struct tok_hf_added *ad = added_by_id(h, ids[i]);
		const char *p;
		size_t len;
		if (ad) {
			p = ad->content;
			len = ad->len;
		} else if (!tok_bpe_id_bytes(h->bpe, ids[i], &p, &len)) {
			toks_free(&a);
			return error("cannot decode token id %d: not in the vocabulary", (int)ids[i]);
		}
		sbuf_add(toks_push(&a), p, len);
	}
	for (size_t k = 0; h->has_decoder && k < h->n_decs; k++) {
		apply_dec(&h->decs[k], &a, &b);
		toks_free(&a);
		a = b;
		b = (struct toks){ 0 };
	}
	for (size_t i = 0; i < a.n; i++) {
		if (i && !h->has_decoder) /* no decoder: HF joins the tokens with spaces */
			sbuf_addch(out, ' ');
		sbuf_add(out, a.v[i].buf, a.v[i].len);
	}
	toks_free(&a);
	return 0;
}

int tok_hf_decode(const struct tok_hf *h, const int32_t *ids, size_t n, struct sbuf *out)
{
	if (tok_bpe_text_mode(h->bpe))
		return decode_text(h, ids, n, out);
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		const struct tok_hf_added *a = added_by_id(h, id);
		if (a) {
			sbuf_add(out, a->content, a->len);
			continue;
		}
		const char *p;
		size_t len;
		if (!tok_bpe_id_bytes(h->bpe, id, &p, &len))
			return error("cannot decode token id %d: not in the vocabulary", (int)id);
		sbuf_add(out, p, len);
	}
	return 0;
}
