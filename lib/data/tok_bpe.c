/*
 * tok_bpe.c - byte-level BPE: the GPT-2 byte table, the vocabulary and merge
 * hashes, the merge loop, the hand-written GPT-2 pre-tokenizer and the
 * per-session word cache. See tok_bpe.h for how this fits the tokenizers.
 */
#include "tok_bpe.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- byte table ------------------------------------------------------- */

/* Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other
 * 68 bytes, in increasing order, take the code points 256, 257, ... */
uint32_t tok_bpe_byte_cp(uint8_t b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	if (b <= 32)
		return 256u + b;
	if (b <= 160)
		return 256u + 33 + (b - 127u);
	return 256u + 67; /* 173 */
}

int tok_bpe_cp_byte(uint32_t cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp >= 256 && cp <= 288)
		return (int)(cp - 256);
	if (cp >= 289 && cp <= 322)
		return (int)(cp - 289 + 127);
	if (cp == 323)
		return 173;
	return -1;
}

uint32_t tok_bpe_utf8_next(const char *str, size_t n, size_t *len)
{
	const unsigned char *s = (const unsigned char *)str;
	unsigned c = s[0];
	if (c < 0x80) {
		*len = 1;
		return c;
	}
	size_t need;
	uint32_t cp;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		cp = c & 0x07;
	} else {
		*len = 1;
		return 0xFFFD;
	}
	if (need >= n) {
		*len = 1;
		return 0xFFFD;
	}
	for (size_t k = 1; k <= need; k++) {
		if ((s[k] & 0xC0) != 0x80) {
			*len = 1;
			return 0xFFFD;
		}
		cp = (cp << 6) | (s[k] & 0x3F);
	}
	*len = need + 1;
	return cp;
}

size_t tok_bpe_utf8_put(uint32_t cp, char *out)
{
	unsigned char *o = (unsigned char *)out;
	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xC0 | (cp >> 6));
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | (cp >> 12));
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | (cp >> 18));
	o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

bool tok_bpe_unmap(const char *s, size_t n, struct sbuf *out)
{
	size_t start = out->len;
	for (size_t i = 0; i < n;) {
		size_t l;
		uint32_t cp = tok_bpe_utf8_next(s + i, n - i, &l);
		int b = tok_bpe_cp_byte(cp);
		if (b < 0) {
			out->len = start;
			if (out->buf)
				out->buf[start] = 0;
			return false;
		}
		sbuf_addch(out, b);
		i += l;
	}
	return true;
}

char *tok_bpe_quote(const char *s, size_t n, size_t max)
{
	struct sbuf sb = SBUF_INIT;
	sbuf_addch(&sb, '\'');
	size_t i = 0;
	while (i < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
		size_t l = r > 0 ? (size_t)r : 1;
		if (i + l > max) /* the whole character fits or none of it */
			break;
		if (r <= 0)
			sbuf_addf(&sb, "\\x%02x", (unsigned char)s[i]);
		else if (cp == '\n')
			sbuf_addstr(&sb, "\\n");
		else if (cp == '\r')
			sbuf_addstr(&sb, "\\r");
		else if (cp == '\t')
			sbuf_addstr(&sb, "\\t");
		else if (cp < 0x20 || cp == 0x7f)
			sbuf_addf(&sb, "\\x%02x", (unsigned)cp);
		else if (cp >= 0x80 && cp < 0xa0) /* C1 controls */
			sbuf_addf(&sb, "\\u%04x", (unsigned)cp);
		else
			sbuf_add(&sb, s + i, l);
		i += l;
	}
	sbuf_addstr(&sb, i < n ? "'..." : "'");
	return sbuf_detach(&sb, NULL);
}

/* ---- the GPT-2 pre-tokenizer ------------------------------------------ */

const char tok_bpe_gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum { CLS_OTHER, CLS_L, CLS_N, CLS_S };

static int cls_ascii(unsigned c)
{
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
		return CLS_L;
	if (c >= '0' && c <= '9')
		return CLS_N;
	if (c == ' ' || (c >= 9 && c <= 13))
		return CLS_S;
	return CLS_OTHER;
}

/* \p{L}, \p{N}, and \s as Unicode White_Space (= Z categories, TAB..CR, NEL). */
static int cls_cp(uint32_t cp)
{
	if (cp < 0x80)
		return cls_ascii(cp);
	if (cp == 0x85)
		return CLS_S;
	switch (utf8proc_category((utf8proc_int32_t)cp)) {
	case UTF8PROC_CATEGORY_LU:
	case UTF8PROC_CATEGORY_LL:
	case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM:
	case UTF8PROC_CATEGORY_LO:
		return CLS_L;
	case UTF8PROC_CATEGORY_ND:
	case UTF8PROC_CATEGORY_NL:
	case UTF8PROC_CATEGORY_NO:
		return CLS_N;
	case UTF8PROC_CATEGORY_ZS:
	case UTF8PROC_CATEGORY_ZL:
	case UTF8PROC_CATEGORY_ZP:
		return CLS_S;
	default:
		return CLS_OTHER;
	}
}

bool tok_bpe_is_space(uint32_t cp)
{
	return cls_cp(cp) == CLS_S;
}

static inline int cls_at(const char *s, size_t n, size_t i, size_t *len)
{
	unsigned c = (unsigned char)s[i];
	if (c < 0x80) {
		*len = 1;
		return cls_ascii(c);
	}
	return cls_cp(tok_bpe_utf8_next(s + i, n - i, len));
}

/* End of the run of characters of class cls starting at i. */
static size_t run_of(const char *s, size_t n, size_t i, int cls)
{
	while (i < n) {
		unsigned c = (unsigned char)s[i];
		if (c < 0x80) {
			if (cls_ascii(c) != cls)
				break;
			i++;
			continue;
		}
		size_t l;
		if (cls_cp(tok_bpe_utf8_next(s + i, n - i, &l)) != cls)
			break;
		i += l;
	}
	return i;
}

size_t tok_bpe_gpt2_split(const char *s, size_t n, size_t i)
{
	unsigned c = (unsigned char)s[i];
	size_t l;
	if (c == '\'' && i + 1 < n) {
		unsigned c1 = (unsigned char)s[i + 1];
		if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
			return i + 2;
		if (i + 2 < n) {
			unsigned c2 = (unsigned char)s[i + 2];
			if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
				return i + 3;
		}
	}
	if (c == ' ' && i + 1 < n) {
		int k = cls_at(s, n, i + 1, &l);
		if (k != CLS_S)
			return run_of(s, n, i + 1 + l, k);
	}
	int k = cls_at(s, n, i, &l);
	if (k != CLS_S)
		return run_of(s, n, i + l, k);
	/* \s+(?!\S) then \s+: a whitespace run followed by a non-space keeps
	 * its last character for the next piece, unless it is that one
	 * character alone. */
	size_t last = i, j = i + l;
	while (j < n) {
		size_t l2;
		if (cls_at(s, n, j, &l2) != CLS_S)
			break;
		last = j;
		j += l2;
	}
	if (j == n || last == i)
		return j;
	return last;
}

/* ---- hashing ---------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h)
{
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ull;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ull;
	h ^= h >> 32;
	return h;
}

static inline uint64_t hash_bytes(const char *p, size_t n, uint64_t seed)
{
	uint64_t h = seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
		h ^= h >> 31;
		p += 8;
		n -= 8;
	}
	if (n) {
		/* the tail as memcpy into a zeroed word would give it (little
		 * endian), from two overlapping loads instead of a library call */
		uint64_t w;
		if (n >= 4) {
			uint32_t lo, hi;
			memcpy(&lo, p, 4);
			memcpy(&hi, p + n - 4, 4);
			w = (uint64_t)lo | (uint64_t)hi << (8 * (n - 4));
		} else if (n >= 2) {
			uint16_t lo, hi;
			memcpy(&lo, p, 2);
			memcpy(&hi, p + n - 2, 2);
			w = (uint64_t)lo | (uint64_t)hi << (8 * (n - 2));
		} else {
			w = (uint8_t)p[0];
		}
		h = (h ^ w) * 0x94d049bb133111ebull;
	}
	return mix64(h);
}

uint64_t tok_bpe_hash(const char *s, size_t n)
{
	return hash_bytes(s, n, 0x5bd1e995);
}

static inline uint64_t pair_key(int32_t a, int32_t b)
{
	return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

/* ---- the model -------------------------------------------------------- */

/* A vocabulary string is stored by its raw bytes when it is written in the
 * byte alphabet (every token BPE can produce), else by its UTF-8 text
 * (added-token-like entries such as "<|im start|>" with a real space). */
enum { KEY_TEXT = 0, KEY_BYTES = 1 };

struct vslot {
	uint64_t h;
	uint32_t off, len;
	int32_t id; /* -1: empty */
	uint32_t kind;
};

struct mslot {
	uint64_t key;
	uint32_t rank;
	int32_t new_id; /* -1: empty */
};

struct tok_bpe {
	struct sbuf arena; /* key bytes of every vocabulary string */
	struct vslot *v;
	size_t vmask, vused;
	struct mslot *mg;
	size_t mmask, mused;
	int32_t byte_id[256];
	/* id -> string, for decoding */
	uint32_t *id_off, *id_len; /* id_len UINT32_MAX: no such id */
	size_t id_cap;
	int32_t id_limit;
	bool ignore_merges, fuse_unk;
	int32_t unk_id;
	bool text_mode, byte_fallback;
	int32_t fb_id[256]; /* "<0xNN>" tokens, -1 when absent */
	/* text mode: long words are encoded in parts cut before split_sym
	 * (tok_bpe_set_split); split_len 0: never */
	char split_sym[8];
	size_t split_len;
};

struct tok_bpe *tok_bpe_new(void)
{
	struct tok_bpe *m = xcalloc(1, sizeof(*m));
	m->vmask = 1023;
	m->v = xmalloc((m->vmask + 1) * sizeof(*m->v));
	for (size_t i = 0; i <= m->vmask; i++)
		m->v[i].id = -1;
	m->mmask = 1023;
	m->mg = xmalloc((m->mmask + 1) * sizeof(*m->mg));
	for (size_t i = 0; i <= m->mmask; i++)
		m->mg[i].new_id = -1;
	for (int b = 0; b < 256; b++)
		m->byte_id[b] = -1;
	m->unk_id = -1;
	sbuf_grow(&m->arena, 1 << 16);
	return m;
}

void tok_bpe_free(struct tok_bpe *m)
{
	if (!m)
		return;
	sbuf_release(&m->arena);
	free(m->v);
	free(m->mg);
	free(m->id_off);
	free(m->id_len);
	free(m);
}

static struct vslot *vfind(const struct tok_bpe *m, const char *k, size_t n, uint32_t kind, uint64_t h)
{
	for (size_t i = h & m->vmask;; i = (i + 1) & m->vmask) {
		struct vslot *s = &m->v[i];
		if (s->id < 0)
			return s;
		if (s->h == h && s->len == n && s->kind == kind && !memcmp(m->arena.buf + s->off, k, n))
			return s;
	}
}

static void vgrow(struct tok_bpe *m)
{
	size_t nm = m->vmask * 2 + 1;
	struct vslot *nv = xmalloc((nm + 1) * sizeof(*nv));
	for (size_t i = 0; i <= nm; i++)
		nv[i].id = -1;
	for (size_t i = 0; i <= m->vmask; i++) {
		if (m->v[i].id < 0)
			continue;
		size_t j = m->v[i].h & nm;
		while (nv[j].id >= 0)
			j = (j + 1) & nm;
		nv[j] = m->v[i];
	}
	free(m->v);
	m->v = nv;
	m->vmask = nm;
}

static int32_t vlookup(const struct tok_bpe *m, const char *k, size_t n, uint32_t kind)
{
	return vfind(m, k, n, kind, hash_bytes(k, n, kind))->id;
}

static void add_key(struct tok_bpe *m, const char *key, size_t klen, uint32_t kind, int32_t id);

void tok_bpe_add_token(struct tok_bpe *m, const char *tok, size_t len, int32_t id)
{
	if (id < 0)
		BUG("negative token id %d", id);
	struct sbuf raw = SBUF_INIT;
	if (len && !m->text_mode && tok_bpe_unmap(tok, len, &raw))
		add_key(m, raw.buf, raw.len, KEY_BYTES, id);
	else
		add_key(m, tok, len, KEY_TEXT, id);
	sbuf_release(&raw);
}

void tok_bpe_add_bytes(struct tok_bpe *m, const char *raw, size_t n, int32_t id)
{
	if (id < 0 || !n)
		BUG("token id %d, %zu bytes", id, n);
	add_key(m, raw, n, KEY_BYTES, id);
}

int32_t tok_bpe_bytes_id(const struct tok_bpe *m, const char *raw, size_t n)
{
	return vlookup(m, raw, n, KEY_BYTES);
}

static void add_key(struct tok_bpe *m, const char *key, size_t klen, uint32_t kind, int32_t id)
{
	if ((m->vused + 1) * 2 > m->vmask + 1)
		vgrow(m);
	uint64_t h = hash_bytes(key, klen, kind);
	struct vslot *s = vfind(m, key, klen, kind, h);
	uint32_t off;
	if (s->id < 0) {
		off = (uint32_t)m->arena.len;
		sbuf_add(&m->arena, key, klen);
		s->h = h;
		s->off = off;
		s->len = (uint32_t)klen;
		s->kind = kind;
		m->vused++;
	} else {
		off = s->off;
	}
	s->id = id;
	if (kind == KEY_BYTES && klen == 1)
		m->byte_id[(unsigned char)key[0]] = id;
	if ((size_t)id >= m->id_cap) {
		size_t old = m->id_cap;
		size_t cap = old;
		xgrow(&m->id_off, &cap, (size_t)id + 1, sizeof(uint32_t));
		cap = old;
		xgrow(&m->id_len, &cap, (size_t)id + 1, sizeof(uint32_t));
		for (size_t i = old; i < cap; i++)
			m->id_len[i] = UINT32_MAX;
		m->id_cap = cap;
	}
	if (m->id_len[id] == UINT32_MAX) { /* first string for an id wins for decoding */
		m->id_off[id] = off;
		m->id_len[id] = (uint32_t)klen;
	}
	if (id >= m->id_limit)
		m->id_limit = id + 1;
}

int32_t tok_bpe_token_id(const struct tok_bpe *m, const char *tok, size_t len)
{
	struct sbuf raw = SBUF_INIT;
	int32_t id;
	if (m->text_mode)
		return vlookup(m, tok, len, KEY_TEXT);
	if (len && tok_bpe_unmap(tok, len, &raw))
		id = vlookup(m, raw.buf, raw.len, KEY_BYTES);
	else
		id = vlookup(m, tok, len, KEY_TEXT);
	sbuf_release(&raw);
	return id;
}

static const struct mslot *mfind(const struct tok_bpe *m, uint64_t key)
{
	for (size_t i = mix64(key) & m->mmask;; i = (i + 1) & m->mmask) {
		const struct mslot *s = &m->mg[i];
		if (s->new_id < 0 || s->key == key)
			return s;
	}
}

static void mgrow(struct tok_bpe *m)
{
	size_t nm = m->mmask * 2 + 1;
	struct mslot *nv = xmalloc((nm + 1) * sizeof(*nv));
	for (size_t i = 0; i <= nm; i++)
		nv[i].new_id = -1;
	for (size_t i = 0; i <= m->mmask; i++) {
		if (m->mg[i].new_id < 0)
			continue;
		size_t j = mix64(m->mg[i].key) & nm;
		while (nv[j].new_id >= 0)
			j = (j + 1) & nm;
		nv[j] = m->mg[i];
	}
	free(m->mg);
	m->mg = nv;
	m->mmask = nm;
}

int tok_bpe_add_merge(struct tok_bpe *m, const char *a, size_t alen, const char *b, size_t blen,
		      uint32_t rank, const char **why)
{
	int32_t ia = tok_bpe_token_id(m, a, alen);
	if (ia < 0) {
		*why = "its first part is not in the vocabulary";
		return -1;
	}
	int32_t ib = tok_bpe_token_id(m, b, blen);
	if (ib < 0) {
		*why = "its second part is not in the vocabulary";
		return -1;
	}
	char *ab = xmalloc(alen + blen + 1);
	memcpy(ab, a, alen);
	memcpy(ab + alen, b, blen);
	int32_t inew = tok_bpe_token_id(m, ab, alen + blen);
	free(ab);
	if (inew < 0) {
		*why = "the merged token is not in the vocabulary";
		return -1;
	}
	if ((m->mused + 1) * 2 > m->mmask + 1)
		mgrow(m);
	uint64_t key = pair_key(ia, ib);
	struct mslot *s = (struct mslot *)mfind(m, key);
	if (s->new_id < 0)
		m->mused++;
	s->key = key;
	s->rank = rank;
	s->new_id = inew;
	return 0;
}

void tok_bpe_add_merge_ids(struct tok_bpe *m, int32_t a, int32_t b, int32_t merged, uint32_t rank)
{
	if (a < 0 || b < 0 || merged < 0)
		BUG("merge of ids %d %d -> %d", a, b, merged);
	if ((m->mused + 1) * 2 > m->mmask + 1)
		mgrow(m);
	uint64_t key = pair_key(a, b);
	struct mslot *s = (struct mslot *)mfind(m, key);
	if (s->new_id < 0)
		m->mused++;
	s->key = key;
	s->rank = rank;
	s->new_id = merged;
}

void tok_bpe_set_text_mode(struct tok_bpe *m)
{
	if (m->vused)
		BUG("text mode set after tokens were added");
	m->text_mode = true;
}

bool tok_bpe_text_mode(const struct tok_bpe *m)
{
	return m->text_mode;
}

void tok_bpe_set_byte_fallback(struct tok_bpe *m)
{
	m->byte_fallback = true;
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", (unsigned)b); /* Rust's format!("<{:#04X}>") */
		m->fb_id[b] = vlookup(m, name, 6, KEY_TEXT);
	}
}

void tok_bpe_set_options(struct tok_bpe *m, bool ignore_merges, int32_t unk_id, bool fuse_unk)
{
	m->ignore_merges = ignore_merges;
	m->unk_id = unk_id;
	m->fuse_unk = fuse_unk;
}

/* sym occurs in t[0..n) only in a leading run */
static bool only_leading(const char *t, size_t n, const char *sym, size_t sl)
{
	size_t i = 0;
	while (i + sl <= n && !memcmp(t + i, sym, sl))
		i += sl;
	return i >= n || !memmem(t + i, n - i, sym, sl);
}

bool tok_bpe_set_split(struct tok_bpe *m, const char *sym, size_t len)
{
	m->split_len = 0;
	if (!m->text_mode || m->ignore_merges || !len || len > sizeof(m->split_sym) ||
	    vlookup(m, sym, len, KEY_TEXT) < 0)
		return false;
	struct sbuf cat = SBUF_INIT;
	for (size_t i = 0; i <= m->mmask; i++) {
		const struct mslot *s = &m->mg[i];
		if (s->new_id < 0)
			continue;
		int32_t a = (int32_t)(s->key >> 32), b = (int32_t)(uint32_t)s->key;
		const char *pa, *pb;
		size_t la, lb;
		bool fb = false;
		for (int k = 0; k < 256; k++)
			fb |= m->byte_fallback && m->fb_id[k] >= 0 && (a == m->fb_id[k] || b == m->fb_id[k]);
		if (fb || a == m->unk_id || b == m->unk_id || !tok_bpe_id_bytes(m, a, &pa, &la) ||
		    !tok_bpe_id_bytes(m, b, &pb, &lb)) {
			sbuf_release(&cat);
			return false;
		}
		/* a + b holds sym only in a leading run */
		sbuf_reset(&cat);
		sbuf_add(&cat, pa, la);
		sbuf_add(&cat, pb, lb);
		if (!only_leading(cat.buf, cat.len, sym, len)) {
			sbuf_release(&cat);
			return false;
		}
	}
	sbuf_release(&cat);
	memcpy(m->split_sym, sym, len);
	m->split_len = len;
	return true;
}

size_t tok_bpe_vocab_count(const struct tok_bpe *m)
{
	return m->vused;
}

bool tok_bpe_id_bytes(const struct tok_bpe *m, int32_t id, const char **p, size_t *n)
{
	if (id < 0 || id >= m->id_limit || m->id_len[id] == UINT32_MAX)
		return false;
	*p = m->arena.buf + m->id_off[id];
	*n = m->id_len[id];
	return true;
}

/* ---- the merge loop --------------------------------------------------- */

#define NO_RANK UINT32_MAX
/* Words up to this many symbols use the array scan (quadratic, but short
 * and cache friendly); longer ones the heap, so a megabyte without spaces
 * stays n log n. */
#define SCAN_MAX 96

static inline void pair_lookup(const struct tok_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *nid)
{
	const struct mslot *s = mfind(m, pair_key(a, b));
	if (s->new_id < 0) {
		*rank = NO_RANK;
		return;
	}
	*rank = s->rank;
	*nid = s->new_id;
}

static size_t merge_scan(const struct tok_bpe *m, int32_t *id, size_t n)
{
	uint32_t rank[SCAN_MAX];
	int32_t nid[SCAN_MAX];
	if (n < 2)
		return n;
	for (size_t i = 0; i + 1 < n; i++)
		pair_lookup(m, id[i], id[i + 1], &rank[i], &nid[i]);
	for (;;) {
		uint32_t best = NO_RANK;
		size_t bi = 0;
		for (size_t i = 0; i + 1 < n; i++)
			if (rank[i] < best) {
				best = rank[i];
				bi = i;
			}
		if (best == NO_RANK)
			break;
		id[bi] = nid[bi];
		if (n - bi > 2) {
			memmove(&id[bi + 1], &id[bi + 2], (n - bi - 2) * sizeof(*id));
			if (n - bi > 3) {
				memmove(&rank[bi + 1], &rank[bi + 2], (n - bi - 3) * sizeof(*rank));
				memmove(&nid[bi + 1], &nid[bi + 2], (n - bi - 3) * sizeof(*nid));
			}
		}
		n--;
		if (bi > 0)
			pair_lookup(m, id[bi - 1], id[bi], &rank[bi - 1], &nid[bi - 1]);
		if (bi + 1 < n)
			pair_lookup(m, id[bi], id[bi + 1], &rank[bi], &nid[bi]);
	}
	return n;
}

struct hent {
	uint64_t key; /* rank << 32 | position: the heap pops the smallest */
	int32_t new_id;
};

struct tok_bpe_cache {
	struct cslot *slots;
	size_t used;
	struct sbuf keys;
	int32_t *ids;
	size_t nids, capids;
	/* scratch for one word */
	int32_t *sym;
	size_t capsym;
	int32_t *prev, *next;
	size_t capprev, capnext;
	struct hent *heap;
	size_t caphe;
};

static void heap_push(struct tok_bpe_cache *c, size_t *n, uint64_t key, int32_t new_id)
{
	xgrow(&c->heap, &c->caphe, *n + 1, sizeof(*c->heap));
	struct hent *h = c->heap;
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h[p].key <= key)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i].key = key;
	h[i].new_id = new_id;
}

static struct hent heap_pop(struct tok_bpe_cache *c, size_t *n)
{
	struct hent *h = c->heap;
	struct hent top = h[0];
	struct hent last = h[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1;
		if (l >= *n)
			break;
		if (l + 1 < *n && h[l + 1].key < h[l].key)
			l++;
		if (last.key <= h[l].key)
			break;
		h[i] = h[l];
		i = l;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* Hugging Face's Word::merge_all without dropout: pop the lowest (rank,
 * position); skip entries whose pair has changed since they were queued. */
static size_t merge_heap(const struct tok_bpe *m, struct tok_bpe_cache *c, int32_t *id, size_t n)
{
	if (n < 2)
		return n;
	xgrow(&c->prev, &c->capprev, n, sizeof(int32_t));
	xgrow(&c->next, &c->capnext, n, sizeof(int32_t));
	int32_t *prev = c->prev, *next = c->next;
	size_t hn = 0;
	for (size_t i = 0; i < n; i++) {
		prev[i] = (int32_t)i - 1;
		next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++) {
		uint32_t r;
		int32_t nid;
		pair_lookup(m, id[i], id[i + 1], &r, &nid);
		if (r != NO_RANK)
			heap_push(c, &hn, ((uint64_t)r << 32) | i, nid);
	}
	while (hn) {
		struct hent top = heap_pop(c, &hn);
		size_t p = (size_t)(top.key & 0xffffffffu);
		if (id[p] < 0 || next[p] < 0)
			continue;
		int32_t nx = next[p];
		uint32_t r;
		int32_t nid;
		pair_lookup(m, id[p], id[nx], &r, &nid);
		if (r == NO_RANK || nid != top.new_id)
			continue;
		id[p] = top.new_id;
		id[nx] = -1;
		next[p] = next[nx];
		if (next[nx] >= 0)
			prev[next[nx]] = (int32_t)p;
		if (prev[p] >= 0) {
			pair_lookup(m, id[prev[p]], id[p], &r, &nid);
			if (r != NO_RANK)
				heap_push(c, &hn, ((uint64_t)r << 32) | (uint32_t)prev[p], nid);
		}
		if (next[p] >= 0) {
			pair_lookup(m, id[p], id[next[p]], &r, &nid);
			if (r != NO_RANK)
				heap_push(c, &hn, ((uint64_t)r << 32) | p, nid);
		}
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (id[i] >= 0)
			id[k++] = id[i];
	return k;
}

size_t tok_bpe_merge_ids(const struct tok_bpe *m, struct tok_bpe_cache *c, int32_t *ids, size_t n, bool heap)
{
	if (!heap && n <= SCAN_MAX)
		return merge_scan(m, ids, n);
	return merge_heap(m, c, ids, n);
}

/* ---- the word cache --------------------------------------------------- */

/* memcmp(a, b, n) == 0 for the short keys of the cache and the split
 * symbol, without a library call: eight bytes at a time, then the rest */
static inline bool short_eq(const char *a, const char *b, size_t n)
{
	for (; n >= 8; a += 8, b += 8, n -= 8) {
		uint64_t x, y;
		memcpy(&x, a, 8);
		memcpy(&y, b, 8);
		if (x != y)
			return false;
	}
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

#define CACHE_SLOTS (1u << 17) /* at most half of them used */
#define CACHE_MAX_KEY TOK_BPE_CACHE_MAX_KEY

struct cslot {
	uint64_t h; /* 0: empty */
	uint32_t koff, ioff;
	uint16_t klen, nids;
};

struct tok_bpe_cache *tok_bpe_cache_new(void)
{
	struct tok_bpe_cache *c = xcalloc(1, sizeof(*c));
	c->slots = xcalloc(CACHE_SLOTS, sizeof(*c->slots));
	return c;
}

void tok_bpe_cache_free(struct tok_bpe_cache *c)
{
	if (!c)
		return;
	free(c->slots);
	sbuf_release(&c->keys);
	free(c->ids);
	free(c->sym);
	free(c->prev);
	free(c->next);
	free(c->heap);
	free(c);
}

/* Symbols of a word before merging: one per byte (the byte-level alphabet
 * has a token for each), bytes without a token become unk or vanish. */
static size_t word_symbols(const struct tok_bpe *m, struct tok_bpe_cache *c, const char *w, size_t n)
{
	xgrow(&c->sym, &c->capsym, n + 1, sizeof(int32_t));
	size_t k = 0;
	bool pending_unk = false;
	for (size_t i = 0; i < n; i++) {
		int32_t id = m->byte_id[(unsigned char)w[i]];
		if (id >= 0) {
			if (pending_unk)
				c->sym[k++] = m->unk_id;
			pending_unk = false;
			c->sym[k++] = id;
		} else if (m->unk_id >= 0) {
			if (pending_unk && !m->fuse_unk)
				c->sym[k++] = m->unk_id;
			pending_unk = true;
		}
	}
	if (pending_unk)
		c->sym[k++] = m->unk_id;
	return k;
}

/* Hugging Face's BPE::merge_word start for a vocabulary of strings: one
 * symbol per character; a character missing from the vocabulary becomes its
 * byte-fallback tokens, else (pending) unk, fused with the next unk when
 * fuse_unk. A pending unk is only flushed by a character found in the
 * vocabulary or by the end of the word, so byte-fallback tokens may come
 * before it, as in HF. */
static size_t word_symbols_text(const struct tok_bpe *m, struct tok_bpe_cache *c, const char *w, size_t n)
{
	xgrow(&c->sym, &c->capsym, 4 * n + 1, sizeof(int32_t));
	size_t k = 0;
	bool pending_unk = false;
	for (size_t i = 0; i < n;) {
		size_t l;
		tok_bpe_utf8_next(w + i, n - i, &l);
		int32_t id = vlookup(m, w + i, l, KEY_TEXT);
		if (id >= 0) {
			if (pending_unk)
				c->sym[k++] = m->unk_id;
			pending_unk = false;
			c->sym[k++] = id;
			i += l;
			continue;
		}
		if (m->byte_fallback) {
			bool all = true;
			for (size_t j = 0; j < l; j++)
				all &= m->fb_id[(unsigned char)w[i + j]] >= 0;
			if (all) {
				for (size_t j = 0; j < l; j++)
					c->sym[k++] = m->fb_id[(unsigned char)w[i + j]];
				i += l;
				continue;
			}
		}
		if (m->unk_id >= 0) {
			if (pending_unk && !m->fuse_unk)
				c->sym[k++] = m->unk_id;
			pending_unk = true;
		}
		i += l;
	}
	if (pending_unk)
		c->sym[k++] = m->unk_id;
	return k;
}

/* The slot of w[0..n) (hash h): the matching one, or the empty one where it would go. */
static struct cslot *cache_slot(struct tok_bpe_cache *c, const char *w, size_t n, uint64_t h)
{
	for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
		struct cslot *s = &c->slots[i];
		if (!s->h || (s->h == h && s->klen == n && short_eq(c->keys.buf + s->koff, w, n)))
			return s;
	}
}

static void cache_put(struct tok_bpe_cache *c, struct cslot *slot, const char *w, size_t n, uint64_t h,
		      const int32_t *ids, size_t k)
{
	if (k > UINT16_MAX)
		return;
	if ((c->used + 1) * 2 > CACHE_SLOTS) {
		memset(c->slots, 0, CACHE_SLOTS * sizeof(*c->slots));
		c->used = 0;
		sbuf_reset(&c->keys);
		c->nids = 0;
		slot = cache_slot(c, w, n, h);
	}
	slot->h = h;
	slot->koff = (uint32_t)c->keys.len;
	slot->klen = (uint16_t)n;
	sbuf_add(&c->keys, w, n);
	xgrow(&c->ids, &c->capids, c->nids + k, sizeof(int32_t));
	memcpy(c->ids + c->nids, ids, k * sizeof(int32_t));
	slot->ioff = (uint32_t)c->nids;
	slot->nids = (uint16_t)k;
	c->nids += k;
	c->used++;
}

bool tok_bpe_cache_get(struct tok_bpe_cache *c, const char *w, size_t n, struct tok_ids *out)
{
	if (n > CACHE_MAX_KEY)
		return false;
	struct cslot *s = cache_slot(c, w, n, hash_bytes(w, n, 7) | 1);
	if (!s->h)
		return false;
	xgrow(&out->v, &out->cap, out->n + s->nids, sizeof(int32_t));
	memcpy(out->v + out->n, c->ids + s->ioff, s->nids * sizeof(int32_t));
	out->n += s->nids;
	return true;
}

const int32_t *tok_bpe_cache_find(struct tok_bpe_cache *c, const char *w, size_t n, size_t *k)
{
	if (n > CACHE_MAX_KEY)
		return NULL;
	struct cslot *s = cache_slot(c, w, n, hash_bytes(w, n, 7) | 1);
	if (!s->h)
		return NULL;
	*k = s->nids;
	return c->ids + s->ioff;
}

void tok_bpe_cache_put(struct tok_bpe_cache *c, const char *w, size_t n, const int32_t *ids, size_t k)
{
	if (n > CACHE_MAX_KEY)
		return;
	uint64_t h = hash_bytes(w, n, 7) | 1;
	struct cslot *s = cache_slot(c, w, n, h);
	if (!s->h)
		cache_put(c, s, w, n, h, ids, k);
}

/* Split points of a text-mode word for tok_bpe_encode_word: before each
 * split_sym that follows another character, when no merge can make a token
 * that holds split_sym after its first character (see tok_bpe_set_split). */
static size_t next_split(const struct tok_bpe *m, const char *w, size_t n, size_t i)
{
	const char *sym = m->split_sym;
	size_t sl = m->split_len;
	/* skip the leading run of split_sym, then find the next one */
	while (i + sl <= n && short_eq(w + i, sym, sl))
		i += sl;
	while (i < n) {
		const char *q = memchr(w + i, sym[0], n - i);
		if (!q)
			return n;
		i = (size_t)(q - w);
		if (i + sl <= n && short_eq(q, sym, sl))
			return i;
		i++;
	}
	return n;
}

static void encode_one(const struct tok_bpe *m, struct tok_bpe_cache *c, const char *w, size_t n,
		       struct tok_ids *out)
{
	if (n == 1 && m->byte_id[(unsigned char)w[0]] >= 0) {
		tok_ids_push(out, m->byte_id[(unsigned char)w[0]]);
		return;
	}
	uint64_t h = 0;
	struct cslot *slot = NULL;
	if (n <= CACHE_MAX_KEY) {
		h = hash_bytes(w, n, 7) | 1;
		slot = cache_slot(c, w, n, h);
		if (slot->h) {
			if (out->n + slot->nids > out->cap)
				xgrow(&out->v, &out->cap, out->n + slot->nids, sizeof(int32_t));
			const int32_t *src = c->ids + slot->ioff;
			for (size_t i = 0; i < slot->nids; i++)
				out->v[out->n + i] = src[i];
			out->n += slot->nids;
			return;
		}
	}
	size_t k;
	int32_t whole = m->ignore_merges ? vlookup(m, w, n, m->text_mode ? KEY_TEXT : KEY_BYTES) : -1;
	if (whole >= 0) {
		xgrow(&c->sym, &c->capsym, 1, sizeof(int32_t));
		c->sym[0] = whole;
		k = 1;
	} else {
		k = m->text_mode ? word_symbols_text(m, c, w, n) : word_symbols(m, c, w, n);
		k = tok_bpe_merge_ids(m, c, c->sym, k, false);
	}
	xgrow(&out->v, &out->cap, out->n + k, sizeof(int32_t));
	memcpy(out->v + out->n, c->sym, k * sizeof(int32_t));
	out->n += k;
	if (slot)
		cache_put(c, slot, w, n, h, c->sym, k);
}

void tok_bpe_encode_word(const struct tok_bpe *m, struct tok_bpe_cache *c, const char *w, size_t n,
			 struct tok_ids *out)
{
	if (!n)
		return;
	if (!m->split_len || n <= CACHE_MAX_KEY) {
		encode_one(m, c, w, n, out);
		return;
	}
	for (size_t i = 0; i < n;) {
		size_t j = next_split(m, w, n, i);
		encode_one(m, c, w + i, j - i, out);
		i = j;
	}
}
