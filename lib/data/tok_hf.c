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

static int enc_pretok(struct enc *e, size_t k, const char *t, size_t n);

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
		int rc = pcre2_match(st->re, (PCRE2_SPTR)t, n, last_end, PCRE2_NO_UTF_CHECK, ss->md, e->s->mctx);
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

static int enc_pretok(struct enc *e, size_t k, const char *t, size_t n)
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
			if (enc_pretok(e, k + 1, t + i, j - i))
				return -1;
			i = j;
		}
		return 0;
	case TOK_HF_STAGE_PREFIX:
		if (t[0] == ' ')
			return enc_pretok(e, k + 1, t, n);
		sbuf_reset(&ss->buf);
		sbuf_addch(&ss->buf, ' ');
		sbuf_add(&ss->buf, t, n);
		return enc_pretok(e, k + 1, ss->buf.buf, ss->buf.len);
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
		if (!ss->sp[i].m && enc_pretok(e, k + 1, t + ss->sp[i].s, ss->sp[i].e - ss->sp[i].s))
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

static int enc_normalized(struct enc *e, const char *t, size_t n);

static int enc_gap(struct enc *e, int level, const char *t, size_t n)
{
	if (!n)
		return 0;
	return level == 0 ? enc_normalized(e, t, n) : enc_pretok(e, 0, t, n);
}

/* AddedVocabulary::find_matches + split_with_indices. */
static int enc_added(struct enc *e, const struct tok_hf_matcher *mt, int level, const char *t, size_t n)
{
	const struct tok_hf *h = e->h;
	if (!mt->n)
		return enc_gap(e, level, t, n);
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
		if (start_offset < start && enc_gap(e, level, t + start_offset, start - start_offset))
			return -1;
		tok_ids_push(e->out, a->id);
		start_offset = stop;
	}
	if (start_offset < n)
		return enc_gap(e, level, t + start_offset, n - start_offset);
	return 0;
}

static int enc_normalized(struct enc *e, const char *t, size_t n)
{
	const struct tok_hf *h = e->h;
	for (size_t k = 0; k < h->n_norms; k++) {
		int r = tok_hf_normalize(h->norms[k], t, n, &e->s->nbuf[k]);
		if (r < 0) {
			snprintf(e->s->err, sizeof(e->s->err), "normalizer failed on the text");
			return -1;
		}
		if (r) {
			t = e->s->nbuf[k].buf;
			n = e->s->nbuf[k].len;
		}
	}
	return enc_added(e, &h->norm, 1, t, n);
}

int tok_hf_encode(struct tok_hf_session *s, const char *text, size_t len, bool with_template, struct tok_ids *out,
		  const char **err)
{
	const struct tok_hf *h = s->h;
	struct enc e = { h, s, out };
	s->err[0] = 0;
	*err = s->err;
	if (!with_template || !h->has_tmpl)
		return enc_added(&e, &h->raw, 0, text, len);
	size_t na = 0, apos = 0;
	for (size_t i = 0; i < h->n_tmpl; i++)
		if (h->tmpl[i] < 0) {
			na++;
			apos = i;
		}
	if (na == 1) {
		for (size_t i = 0; i < apos; i++)
			tok_ids_push(out, h->tmpl[i]);
		if (enc_added(&e, &h->raw, 0, text, len))
			return -1;
		for (size_t i = apos + 1; i < h->n_tmpl; i++)
			tok_ids_push(out, h->tmpl[i]);
		return 0;
	}
	s->tmp.n = 0;
	e.out = &s->tmp;
	if (enc_added(&e, &h->raw, 0, text, len))
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

int tok_hf_decode(const struct tok_hf *h, const int32_t *ids, size_t n, struct sbuf *out)
{
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
