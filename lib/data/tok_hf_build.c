/*
 * tok_hf_build.c - assembling a struct tok_hf (tok_hf.h): added tokens with
 * Hugging Face's id assignment, normalizers, pre-tokenizer stages (with the
 * Oniguruma -> PCRE2 pattern adaptation), the template, and the final step
 * that builds the added-token matchers and counts the vocabulary.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "tok_bpe.h"
#include "tok_hf.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- building --------------------------------------------------------- */

struct tok_hf *tok_hf_new(struct tok_bpe *bpe)
{
	struct tok_hf *h = xcalloc(1, sizeof(*h));
	h->bpe = bpe;
	h->raw.only_first = h->norm.only_first = -1;
	h->max_added_id = -1;
	return h;
}

void tok_hf_free(struct tok_hf *h)
{
	if (!h)
		return;
	tok_bpe_free(h->bpe);
	for (size_t i = 0; i < h->n_added; i++) {
		if (h->added[i].match != h->added[i].content)
			free(h->added[i].match);
		free(h->added[i].content);
	}
	free(h->added);
	free(h->added_ht);
	free(h->raw.order);
	free(h->norm.order);
	free(h->added_by_id);
	for (size_t i = 0; i < h->n_norms; i++) {
		free(h->norms[i].a);
		free(h->norms[i].b);
	}
	free(h->norms);
	for (size_t i = 0; i < h->n_decs; i++) {
		free(h->decs[i].a);
		free(h->decs[i].b);
	}
	free(h->decs);
	for (size_t i = 0; i < h->n_stages; i++)
		pcre2_code_free(h->stages[i].re);
	free(h->stages);
	free(h->tmpl);
	free(h);
}

/* The slot of content s[0..n) in the added-token hash: its entry, or the
 * empty slot where it would go. The table is never full (at most half). */
static size_t added_slot(const struct tok_hf *h, const char *s, size_t n)
{
	for (size_t i = tok_bpe_hash(s, n) & h->added_ht_mask;; i = (i + 1) & h->added_ht_mask) {
		uint32_t k = h->added_ht[i];
		if (!k)
			return i;
		const struct tok_hf_added *a = &h->added[k - 1];
		if (a->len == n && !memcmp(a->content, s, n))
			return i;
	}
}

static void added_ht_grow(struct tok_hf *h)
{
	size_t cap = h->added_ht ? (h->added_ht_mask + 1) * 2 : 64;
	free(h->added_ht);
	h->added_ht = xcalloc(cap, sizeof(*h->added_ht));
	h->added_ht_mask = cap - 1;
	for (size_t i = 0; i < h->n_added; i++)
		h->added_ht[added_slot(h, h->added[i].content, h->added[i].len)] = (uint32_t)i + 1;
}

const struct tok_hf_added *tok_hf_find_added(const struct tok_hf *h, const char *s, size_t n)
{
	if (!h->added_ht)
		return NULL;
	uint32_t k = h->added_ht[added_slot(h, s, n)];
	return k ? &h->added[k - 1] : NULL;
}

int32_t tok_hf_token_id(const struct tok_hf *h, const char *s, size_t n)
{
	const struct tok_hf_added *a = tok_hf_find_added(h, s, n);
	return a ? a->id : tok_bpe_token_id(h->bpe, s, n);
}

static struct tok_hf_added *new_added(struct tok_hf *h, const char *content, size_t len, int32_t id)
{
	if ((h->n_added + 1) * 2 > (h->added_ht ? h->added_ht_mask + 1 : 0))
		added_ht_grow(h);
	xgrow(&h->added, &h->cap_added, h->n_added + 1, sizeof(*h->added));
	h->added_ht[added_slot(h, content, len)] = (uint32_t)h->n_added + 1;
	struct tok_hf_added *a = &h->added[h->n_added++];
	memset(a, 0, sizeof(*a));
	a->content = xstrndup(content, len);
	a->len = len;
	a->match = a->content;
	a->mlen = len;
	a->id = id;
	if (id > h->max_added_id)
		h->max_added_id = id;
	return a;
}

void tok_hf_add_token_id(struct tok_hf *h, const char *content, size_t len, int32_t id)
{
	if (!len || id < 0 || tok_hf_find_added(h, content, len))
		BUG("added token of %zu bytes, id %d", len, (int)id);
	struct tok_hf_added *a = new_added(h, content, len, id);
	a->special = true;
}

int32_t tok_hf_add_token(struct tok_hf *h, const char *content, size_t len, bool special, bool normalized,
			 bool lstrip, bool rstrip, bool single_word)
{
	if (!len)
		return -1;
	struct tok_hf_added *a = (struct tok_hf_added *)tok_hf_find_added(h, content, len);
	if (!a) {
		int32_t id = tok_bpe_token_id(h->bpe, content, len);
		if (id < 0) {
			/* AddedVocabulary's next id: after the largest added id
			 * when that is past the model, else the model's size */
			int64_t model = (int64_t)tok_bpe_vocab_count(h->bpe), max = h->max_added_id;
			id = (int32_t)(max >= 0 && (max >= model || model == 0) ? max + 1 : model);
		}
		a = new_added(h, content, len, id);
	}
	a->special = special;
	a->normalized = normalized;
	a->lstrip = lstrip;
	a->rstrip = rstrip;
	a->single_word = single_word;
	return a->id;
}

void tok_hf_add_norm(struct tok_hf *h, enum tok_hf_norm n)
{
	struct tok_hf_normop op = { .kind = n };
	tok_hf_add_normop(h, &op);
}

static char *dup_or_null(const char *p, size_t n)
{
	return p ? xstrndup(p, n) : NULL;
}

void tok_hf_add_normop(struct tok_hf *h, const struct tok_hf_normop *op)
{
	h->norms = xrealloc(h->norms, (h->n_norms + 1) * sizeof(*h->norms));
	struct tok_hf_normop *o = &h->norms[h->n_norms++];
	*o = *op;
	o->a = dup_or_null(op->a, op->alen);
	o->b = dup_or_null(op->b, op->blen);
}

void tok_hf_add_dec(struct tok_hf *h, const struct tok_hf_dec *d)
{
	h->decs = xrealloc(h->decs, (h->n_decs + 1) * sizeof(*h->decs));
	struct tok_hf_dec *o = &h->decs[h->n_decs++];
	*o = *d;
	o->a = dup_or_null(d->a, d->alen);
	o->b = dup_or_null(d->b, d->blen);
}

void tok_hf_add_stage(struct tok_hf *h, enum tok_hf_stage_kind kind, enum tok_hf_behavior b)
{
	h->stages = xrealloc(h->stages, (h->n_stages + 1) * sizeof(*h->stages));
	struct tok_hf_stage *st = &h->stages[h->n_stages++];
	memset(st, 0, sizeof(*st));
	st->kind = kind;
	st->behavior = b;
}

/* tokenizers compiles patterns with Oniguruma, whose \s is Unicode
 * White_Space; PCRE2's \s (with UCP) lacks U+0085, so it is added back.
 * Oniguruma's \h is a hex digit (PCRE2: horizontal space). A \S inside a
 * class cannot be fixed this way and is left as PCRE2 reads it (differs on
 * U+0085 only); no known tokenizer uses one. */
char *tok_hf_onig_to_pcre2(const char *p)
{
	struct sbuf sb = SBUF_INIT;
	int depth = 0; /* inside [...] (nested classes count) */
	for (size_t i = 0; p[i]; i++) {
		char c = p[i];
		if (c == '\\' && p[i + 1]) {
			char d = p[++i];
			if (d == 's')
				sbuf_addstr(&sb, depth ? "\\s\\x{85}" : "[\\s\\x{85}]");
			else if (d == 'S' && !depth)
				sbuf_addstr(&sb, "[^\\s\\x{85}]");
			else if (d == 'h')
				sbuf_addstr(&sb, depth ? "0-9a-fA-F" : "[0-9a-fA-F]");
			else if (d == 'H' && !depth)
				sbuf_addstr(&sb, "[^0-9a-fA-F]");
			else {
				sbuf_addch(&sb, '\\');
				sbuf_addch(&sb, d);
			}
			continue;
		}
		if (c == '[') {
			if (depth && p[i + 1] == ':') { /* POSIX [:alpha:] */
				const char *e = strstr(p + i, ":]");
				if (e) {
					sbuf_add(&sb, p + i, (size_t)(e + 2 - (p + i)));
					i = (size_t)(e + 1 - p);
					continue;
				}
			}
			depth++;
			sbuf_addch(&sb, c);
			/* a ']' right after '[' or '[^' is a literal */
			if (p[i + 1] == '^') {
				sbuf_addch(&sb, '^');
				i++;
			}
			if (p[i + 1] == ']') {
				sbuf_addch(&sb, ']');
				i++;
			}
			continue;
		}
		if (c == ']' && depth)
			depth--;
		sbuf_addch(&sb, c);
	}
	if (!sb.buf)
		sbuf_addstr(&sb, "");
	return sbuf_detach(&sb, NULL);
}

int tok_hf_add_split(struct tok_hf *h, const char *pattern, bool is_regex, enum tok_hf_behavior b, bool invert,
		     const char *where)
{
	if (is_regex && b == TOK_HF_ISOLATED && !invert && !strcmp(pattern, tok_bpe_gpt2_pattern)) {
		tok_hf_add_stage(h, TOK_HF_STAGE_GPT2, b);
		return 0;
	}
	char *pat = is_regex ? tok_hf_onig_to_pcre2(pattern) : xstrdup(pattern);
	int err;
	PCRE2_SIZE off;
	/* \C would match single bytes of a character: the pieces would not be
	 * UTF-8, which later stages (matching without PCRE2's UTF-8 check) and
	 * the splitter rely on. PCRE2_LITERAL takes no such option (and has no
	 * \C to refuse). */
	uint32_t opts = PCRE2_UTF | (is_regex ? PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C : PCRE2_LITERAL);
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &off, NULL);
	free(pat);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof(msg));
		char *q = tok_bpe_quote(pattern, strlen(pattern), 200);
		int r = error("%s: cannot compile pattern %s (offset %zu): %s%s", where, q, (size_t)off, (char *)msg,
			      err == PCRE2_ERROR_BACKSLASH_C_CALLER_DISABLED
				      ? " (\\C matches single bytes, which would cut UTF-8 characters)"
				      : "");
		free(q);
		return r;
	}
	bool jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0; /* without JIT it still works, slower */
	tok_hf_add_stage(h, TOK_HF_STAGE_REGEX, b);
	h->stages[h->n_stages - 1].invert = invert;
	h->stages[h->n_stages - 1].re = re;
	h->stages[h->n_stages - 1].jit = jit;
	return 0;
}

void tok_hf_add_template_id(struct tok_hf *h, int32_t id)
{
	h->tmpl = xrealloc(h->tmpl, (h->n_tmpl + 1) * sizeof(*h->tmpl));
	h->tmpl[h->n_tmpl++] = id;
	h->has_tmpl = true;
}

/* ---- normalizers ------------------------------------------------------ */

static bool all_ascii(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] >= 0x80)
			return false;
	return true;
}

/* Every occurrence of a in p[0..n), left to right, replaced by b. */
static int replace_all(const char *p, size_t n, const char *a, size_t alen, const char *b, size_t blen,
		       struct sbuf *dst)
{
	if (!alen)
		return 0;
	const char *q = alen <= n ? memmem(p, n, a, alen) : NULL;
	if (!q)
		return 0;
	sbuf_reset(dst);
	/* room for the worst case (a at every alen bytes), then plain copies */
	sbuf_grow(dst, n + (blen > alen ? n / alen * (blen - alen) : 0));
	char *o = dst->buf;
	size_t i = 0;
	while (q) {
		size_t k = (size_t)(q - (p + i));
		memcpy(o, p + i, k);
		memcpy(o + k, b, blen);
		o += k + blen;
		i = (size_t)(q - p) + alen;
		q = i + alen > n ? NULL : alen == 1 ? memchr(p + i, a[0], n - i) : memmem(p + i, n - i, a, alen);
	}
	memcpy(o, p + i, n - i);
	o += n - i;
	dst->len = (size_t)(o - dst->buf);
	dst->buf[dst->len] = 0;
	if (!dst->buf)
		sbuf_addstr(dst, "");
	return 1;
}

int tok_hf_normalize(const struct tok_hf_normop *op, const char *p, size_t n, struct sbuf *dst)
{
	enum tok_hf_norm k = op->kind;
	if (k == TOK_HF_PREPEND) {
		if (!n)
			return 0;
		sbuf_reset(dst);
		sbuf_add(dst, op->a, op->alen);
		sbuf_add(dst, p, n);
		return 1;
	}
	if (k == TOK_HF_REPLACE)
		return replace_all(p, n, op->a, op->alen, op->b, op->blen, dst);
	if (k == TOK_HF_STRIP) {
		size_t s0 = 0, e = n, l;
		while (op->left && s0 < n && tok_bpe_is_space(tok_bpe_utf8_next(p + s0, n - s0, &l)))
			s0 += l;
		while (op->right && e > s0) {
			size_t j = e - 1;
			while (j > s0 && ((unsigned char)p[j] & 0xC0) == 0x80)
				j--;
			if (!tok_bpe_is_space(tok_bpe_utf8_next(p + j, e - j, &l)))
				break;
			e = j;
		}
		if (s0 == 0 && e == n)
			return 0;
		sbuf_reset(dst);
		sbuf_add(dst, p + s0, e - s0);
		if (!dst->buf)
			sbuf_addstr(dst, "");
		return 1;
	}
	if (k == TOK_HF_LOWERCASE) {
		size_t i = 0;
		while (i < n && !((unsigned char)p[i] >= 0x80 || (p[i] >= 'A' && p[i] <= 'Z')))
			i++;
		if (i == n)
			return 0;
		sbuf_reset(dst);
		sbuf_add(dst, p, i);
		while (i < n) {
			unsigned c = (unsigned char)p[i];
			if (c < 0x80) {
				sbuf_addch(dst, c >= 'A' && c <= 'Z' ? (int)(c + 32) : (int)c);
				i++;
				continue;
			}
			size_t l;
			uint32_t cp = tok_bpe_utf8_next(p + i, n - i, &l);
			char u[8];
			size_t ul;
			/* Rust's char::to_lowercase: the simple mapping, except
			 * U+0130 whose full mapping is two characters */
			if (cp == 0x130) {
				ul = tok_bpe_utf8_put('i', u);
				ul += tok_bpe_utf8_put(0x307, u + ul);
			} else {
				ul = tok_bpe_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u);
			}
			sbuf_add(dst, u, ul);
			i += l;
		}
		return 1;
	}
	if (all_ascii(p, n)) /* ASCII is stable under every normalization form */
		return 0;
	int opts = UTF8PROC_STABLE;
	switch (k) {
	case TOK_HF_NFC:
		opts |= UTF8PROC_COMPOSE;
		break;
	case TOK_HF_NFD:
		opts |= UTF8PROC_DECOMPOSE;
		break;
	case TOK_HF_NFKC:
		opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
		break;
	case TOK_HF_NFKD:
		opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
		break;
	default:
		BUG("normalizer %d", (int)k);
	}
	utf8proc_uint8_t *res = NULL;
	utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &res, (utf8proc_option_t)opts);
	if (r < 0)
		return -1;
	sbuf_reset(dst);
	sbuf_add(dst, res, (size_t)r);
	free(res);
	return 1;
}

/* ---- finishing -------------------------------------------------------- */

static int cmp_u32_by_id(const void *a, const void *b, void *ctx)
{
	const struct tok_hf *h = ctx;
	int32_t x = h->added[*(const uint32_t *)a].id, y = h->added[*(const uint32_t *)b].id;
	return x < y ? -1 : x > y;
}

static int cmp_u32_by_match(const void *a, const void *b, void *ctx)
{
	const struct tok_hf *h = ctx;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	const struct tok_hf_added *x = &h->added[i], *y = &h->added[j];
	unsigned fx = (unsigned char)x->match[0], fy = (unsigned char)y->match[0];
	if (fx != fy)
		return fx < fy ? -1 : 1;
	if (x->mlen != y->mlen)
		return x->mlen > y->mlen ? -1 : 1;
	return i < j ? -1 : i > j;
}

static void build_matcher(struct tok_hf *h, struct tok_hf_matcher *mt, bool normalized)
{
	free(mt->order);
	mt->order = xmalloc((h->n_added + 1) * sizeof(*mt->order));
	mt->n = 0;
	for (size_t i = 0; i < h->n_added; i++)
		if (h->added[i].normalized == normalized && h->added[i].mlen)
			mt->order[mt->n++] = (uint32_t)i;
	qsort_r(mt->order, mt->n, sizeof(*mt->order), cmp_u32_by_match, h);
	memset(mt->start, 0, sizeof(mt->start));
	for (size_t i = 0; i < mt->n; i++)
		mt->start[(unsigned char)h->added[mt->order[i]].match[0] + 1]++;
	for (int c = 0; c < 256; c++)
		mt->start[c + 1] += mt->start[c];
	mt->only_first = -1;
	if (mt->n) {
		int f = (unsigned char)h->added[mt->order[0]].match[0];
		if (mt->start[f + 1] - mt->start[f] == mt->n)
			mt->only_first = f;
	}
}

int tok_hf_finish(struct tok_hf *h)
{
	struct sbuf a = SBUF_INIT, b = SBUF_INIT;
	int64_t extra = 0;
	for (size_t i = 0; i < h->n_added; i++) {
		struct tok_hf_added *t = &h->added[i];
		if (t->match != t->content)
			free(t->match);
		t->match = t->content;
		t->mlen = t->len;
		if (tok_bpe_token_id(h->bpe, t->content, t->len) < 0)
			extra++;
		if (!t->normalized || !h->n_norms)
			continue;
		/* a normalized token is searched for in its normalized form */
		const char *p = t->content;
		size_t n = t->len;
		for (size_t k = 0; k < h->n_norms; k++) {
			struct sbuf *dst = (p == a.buf) ? &b : &a;
			int r = tok_hf_normalize(&h->norms[k], p, n, dst);
			if (r < 0) {
				sbuf_release(&a);
				sbuf_release(&b);
				char *q = tok_bpe_quote(t->content, t->len, 80);
				error("cannot normalize added token %s", q);
				free(q);
				return -1;
			}
			if (r) {
				p = dst->buf;
				n = dst->len;
			}
		}
		if (n != t->len || memcmp(p, t->content, n)) {
			t->match = xstrndup(p, n);
			t->mlen = n;
		}
	}
	sbuf_release(&a);
	sbuf_release(&b);
	build_matcher(h, &h->raw, false);
	build_matcher(h, &h->norm, true);
	free(h->added_by_id);
	h->added_by_id = xmalloc((h->n_added + 1) * sizeof(*h->added_by_id));
	for (size_t i = 0; i < h->n_added; i++)
		h->added_by_id[i] = (uint32_t)i;
	qsort_r(h->added_by_id, h->n_added, sizeof(*h->added_by_id), cmp_u32_by_id, h);
	h->vocab_size = (int64_t)tok_bpe_vocab_count(h->bpe) + extra;
	return 0;
}

