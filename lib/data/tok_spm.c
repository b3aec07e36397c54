/*
 * tok_spm.c - SentencePiece models (see tok_spm.h), read and run without
 * the sentencepiece library.
 *
 * The file is a protobuf ModelProto; a small wire-format reader below
 * (varints, length-delimited fields, fixed32 floats) takes the fields that
 * change encoding and decoding and skips the rest, refusing a malformed
 * file with its byte offset:
 *
 *   ModelProto      1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec,
 *                   5 denormalizer_spec
 *   SentencePiece   1 piece, 2 score (float), 3 type (NORMAL=1 UNKNOWN=2
 *                   CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6)
 *   TrainerSpec     3 model_type (UNIGRAM=1 BPE=2 WORD=3 CHAR=4),
 *                   24 treat_whitespace_as_suffix, 35 byte_fallback,
 *                   44 unk_surface, 45..48 unk/bos/eos/pad piece names
 *   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix,
 *                   4 remove_extra_whitespaces, 5 escape_whitespaces
 *
 * The other trainer flags (split_digits, split_by_whitespace, ...) only
 * shape training: the pieces they produce are all encoding needs.
 *
 * Normalization follows sentencepiece's normalizer: at each position a
 * user-defined symbol is kept whole, else the longest rule of the
 * precompiled charsmap (a Darts-clone double-array trie over UTF-8 bytes
 * whose values index NUL-terminated replacement strings) replaces the
 * matched bytes, else one character passes unchanged. Spaces become U+2581,
 * leading, repeated and trailing spaces go when remove_extra_whitespaces,
 * and add_dummy_prefix puts one U+2581 in front.
 *
 * The models follow sentencepiece's bpe_model and unigram_model (the
 * optimized Viterbi), including their float arithmetic, so ties break the
 * same way:
 *   BPE      characters (user-defined symbols whole and frozen), then
 *            repeatedly the adjacent pair whose concatenation is the piece
 *            of highest score (leftmost on ties); UNUSED pieces are split
 *            back into the pieces they were merged from.
 *   unigram  best path over every piece that matches at each character,
 *            user-defined symbols scored length * max_score - 0.1, a
 *            character no piece starts with an <unk> of min_score - 10.
 * An <unk> result becomes one <0xNN> piece per byte when byte_fallback.
 *
 * Pieces live in two hash maps as sentencepiece keeps them: NORMAL,
 * USER_DEFINED and UNUSED pieces (the ones encoding may produce), and
 * CONTROL, UNKNOWN and BYTE pieces; a lookup tries the second first and
 * falls back to the <unk> id. The encodable pieces are also in a byte trie
 * (the unigram search and user-defined symbol matching walk it), and both
 * models run on parts of the text through a word cache (see speed_setup;
 * for unigram, unigram_word says why its cache cannot change an id).
 *
 * Refused by name: WORD and CHAR models, treat_whitespace_as_suffix, a
 * denormalizer charsmap.
 */
#include "tok_spm.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "tok.h"
#include "tok_bpe.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };
enum { MT_UNIGRAM = 1, MT_BPE = 2, MT_WORD = 3, MT_CHAR = 4 };

#define FNV_INIT 0xcbf29ce484222325ull
#define FNV_STEP(h, c) (((h) ^ (uint8_t)(c)) * 0x100000001b3ull)
#define SPACE_SYM "\xe2\x96\x81" /* U+2581, the escaped space */
#define SPACE_SYM_LEN 3
#define UNK_PENALTY 10.0f

struct spm_piece {
	const char *s; /* into m->strings; NUL-terminated */
	uint32_t len;
	float score;
	uint8_t type;
};

/* open addressing; slot: id + 1, 0 empty */
struct spm_map {
	int32_t *slot;
	uint64_t *hash;
	size_t mask;
};

/* A byte trie over the NORMAL, USER_DEFINED and UNUSED pieces: node 0 is
 * the root; edges (node, byte) -> node in an open-addressing table (the
 * root's 256 edges in an array), each edge carrying what the unigram search
 * needs of the piece spelled by the path to its node. */
enum { TK_NONE = 0, TK_NORMAL = 1, TK_USER = 2, TK_UNUSED = 3 };

struct spm_edge {
	uint64_t key; /* (node << 8 | byte) + 1; 0: empty */
	int32_t child;
	int32_t id; /* the piece at child, -1: none */
	float score;
	uint32_t kind; /* TK_* */
};

struct spm_trie {
	struct spm_edge *e;
	size_t emask;
	struct spm_edge root[256]; /* key 0: no edge */
	size_t nnodes;
};

struct spm_norm_spec {
	char *name;
	char *charsmap;
	size_t charsmap_len;
	bool add_dummy_prefix, remove_extra_ws, escape_ws;
	bool have_name;
};

struct tok_spm {
	char *path;
	int32_t n;
	struct spm_piece *p;
	char *strings;
	struct spm_map normal, reserved;
	uint32_t max_normal_len; /* longest NORMAL/USER_DEFINED/UNUSED piece, bytes */
	uint32_t max_user_len;   /* longest user-defined symbol; 0: none */
	int model_type;
	bool byte_fallback, ws_suffix;
	int32_t unk_id, bos, eos, pad;
	int32_t byte_id[256];  /* id of <0xNN>; unk_id when absent */
	int16_t *byte_val;     /* per id: the byte of a BYTE piece */
	float min_score, max_score;
	char *unk_surface;
	/* normalizer */
	bool add_dummy_prefix, remove_extra_ws, escape_ws;
	uint32_t *trie;
	size_t trie_units;
	const char *norm_strs; /* into charsmap */
	size_t norm_len;
	char *charsmap;
	char *norm_name;
	/* Megatron's ignore_extra_whitespaces=False on a model that drops them */
	bool keep_extra_spaces;
	/* speed: a byte trie of the encodable pieces, the bytes that can start
	 * a user-defined symbol or a charsmap rule, and whether the model may
	 * run on the parts of the text cut before each space symbol (see
	 * speed_setup) */
	struct spm_trie trie_p;
	bool user_first[256], rule_first[256];
	bool ascii_plain[128]; /* normalizes to itself when the next byte is ASCII */
	bool ws_split;	     /* cut before a space symbol after another character */
	bool uni_cache;      /* unigram: the word cache may be used (finite scores) */
	bool lonely[256];    /* BPE: an ASCII character no longer piece holds: cut around it */
};

/* ---- protobuf wire format ---------------------------------------------- */

struct pb {
	const uint8_t *d;
	size_t pos, end;
	const char *path;
	const char *msg; /* the message being read, for errors */
};

static int pb_fail(const struct pb *b, size_t at, const char *fmt, ...) MC_PRINTF(3, 4);
static int pb_fail(const struct pb *b, size_t at, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return error("%s: not a valid SentencePiece model: at byte %zu (in %s): %s", b->path, at, b->msg, why);
}

static int pb_varint(struct pb *b, uint64_t *v)
{
	size_t at = b->pos;
	uint64_t r = 0;
	for (int i = 0; i < 10; i++) {
		if (b->pos >= b->end)
			return pb_fail(b, at, "the file ends inside a varint");
		uint8_t c = b->d[b->pos++];
		r |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return pb_fail(b, at, "a varint longer than 10 bytes");
}

static const char *const wire_names[8] = { "varint", "fixed64", "length-delimited", "group start",
					   "group end", "fixed32", "invalid (6)", "invalid (7)" };

static int pb_key(struct pb *b, uint32_t *field, int *wt)
{
	size_t at = b->pos;
	uint64_t k;
	if (pb_varint(b, &k))
		return -1;
	*wt = (int)(k & 7);
	if (k >> 3 == 0 || k >> 3 > 0x1fffffff)
		return pb_fail(b, at, "field number %llu (expected a field key: 1 to 2^29-1)", (unsigned long long)(k >> 3));
	*field = (uint32_t)(k >> 3);
	if (*wt != 0 && *wt != 1 && *wt != 2 && *wt != 5)
		return pb_fail(b, at, "field %u has wire type %s, which SentencePiece models never use "
				      "(is this a SentencePiece .model file?)",
			       *field, wire_names[*wt]);
	return 0;
}

/* A length-delimited field: sub covers its bytes. */
static int pb_bytes(struct pb *b, struct pb *sub, const char *msg)
{
	size_t at = b->pos;
	uint64_t len;
	if (pb_varint(b, &len))
		return -1;
	if (len > b->end - b->pos)
		return pb_fail(b, at, "a field of %llu bytes, but only %zu remain (truncated file?)",
			       (unsigned long long)len, b->end - b->pos);
	*sub = *b;
	sub->end = b->pos + (size_t)len;
	sub->msg = msg ? msg : b->msg;
	b->pos += (size_t)len;
	return 0;
}

static int pb_skip(struct pb *b, int wt)
{
	uint64_t v;
	size_t need = wt == 1 ? 8 : 4;
	struct pb sub;
	switch (wt) {
	case 0:
		return pb_varint(b, &v);
	case 2:
		return pb_bytes(b, &sub, NULL);
	default:
		if (b->end - b->pos < need)
			return pb_fail(b, b->pos, "the file ends inside a %zu-byte field", need);
		b->pos += need;
		return 0;
	}
}

/* The key just read has wire type wt; the field wants `want`. */
static int pb_want(struct pb *b, size_t at, uint32_t field, const char *name, int wt, int want)
{
	if (wt == want)
		return 0;
	return pb_fail(b, at, "field %u (%s) has wire type %s, expected %s", field, name, wire_names[wt],
		       wire_names[want]);
}

static int pb_string(struct pb *b, char **out, size_t *len)
{
	struct pb sub;
	if (pb_bytes(b, &sub, NULL))
		return -1;
	free(*out);
	*out = xmalloc(sub.end - sub.pos + 1);
	memcpy(*out, b->d + sub.pos, sub.end - sub.pos);
	(*out)[sub.end - sub.pos] = 0;
	if (len)
		*len = sub.end - sub.pos;
	return 0;
}

static int pb_float(struct pb *b, float *f)
{
	if (b->end - b->pos < 4)
		return pb_fail(b, b->pos, "the file ends inside a float");
	uint32_t u = (uint32_t)b->d[b->pos] | (uint32_t)b->d[b->pos + 1] << 8 | (uint32_t)b->d[b->pos + 2] << 16 |
		     (uint32_t)b->d[b->pos + 3] << 24;
	memcpy(f, &u, 4);
	b->pos += 4;
	return 0;
}

/* ---- reading the model ------------------------------------------------- */

struct raw_piece {
	char *s;
	size_t len;
	float score;
	int type;
};

struct trainer_spec {
	int model_type;
	bool byte_fallback, ws_suffix;
	char *unk_piece, *bos_piece, *eos_piece, *pad_piece, *unk_surface;
};

static int read_piece(struct pb *b, struct raw_piece *rp, int32_t index)
{
	rp->type = PT_NORMAL;
	rp->score = 0;
	bool have = false;
	while (b->pos < b->end) {
		size_t at = b->pos;
		uint32_t f;
		int wt;
		uint64_t v;
		if (pb_key(b, &f, &wt))
			return -1;
		if (f == 1) {
			if (pb_want(b, at, f, "piece", wt, 2) || pb_string(b, &rp->s, &rp->len))
				return -1;
			have = true;
		} else if (f == 2) {
			if (pb_want(b, at, f, "score", wt, 5) || pb_float(b, &rp->score))
				return -1;
		} else if (f == 3) {
			if (pb_want(b, at, f, "type", wt, 0) || pb_varint(b, &v))
				return -1;
			if (v < PT_NORMAL || v > PT_BYTE)
				return pb_fail(b, at, "piece %d has type %llu (expected 1 to 6: NORMAL, UNKNOWN, "
						      "CONTROL, USER_DEFINED, UNUSED, BYTE)",
					       (int)index, (unsigned long long)v);
			rp->type = (int)v;
		} else if (pb_skip(b, wt)) {
			return -1;
		}
	}
	if (!have || rp->len == 0)
		return pb_fail(b, b->pos, "piece %d is empty (every piece needs a non-empty string)", (int)index);
	return 0;
}

static int read_trainer(struct pb *b, struct trainer_spec *ts)
{
	while (b->pos < b->end) {
		size_t at = b->pos;
		uint32_t f;
		int wt;
		uint64_t v;
		if (pb_key(b, &f, &wt))
			return -1;
		char **str = f == 44 ? &ts->unk_surface : f == 45 ? &ts->unk_piece : f == 46 ? &ts->bos_piece :
			     f == 47 ? &ts->eos_piece : f == 48 ? &ts->pad_piece : NULL;
		if (str) {
			if (pb_want(b, at, f, "trainer_spec piece name", wt, 2) || pb_string(b, str, NULL))
				return -1;
		} else if (f == 3 || f == 24 || f == 35) {
			const char *name = f == 3 ? "model_type" : f == 24 ? "treat_whitespace_as_suffix" : "byte_fallback";
			if (pb_want(b, at, f, name, wt, 0) || pb_varint(b, &v))
				return -1;
			if (f == 3) {
				if (v < MT_UNIGRAM || v > MT_CHAR)
					return pb_fail(b, at, "model_type %llu (expected 1 to 4: UNIGRAM, BPE, WORD, CHAR)",
						       (unsigned long long)v);
				ts->model_type = (int)v;
			} else if (f == 24) {
				ts->ws_suffix = v != 0;
			} else {
				ts->byte_fallback = v != 0;
			}
		} else if (pb_skip(b, wt)) {
			return -1;
		}
	}
	return 0;
}

static int read_normalizer(struct pb *b, struct spm_norm_spec *ns)
{
	while (b->pos < b->end) {
		size_t at = b->pos;
		uint32_t f;
		int wt;
		uint64_t v;
		if (pb_key(b, &f, &wt))
			return -1;
		if (f == 1) {
			if (pb_want(b, at, f, "name", wt, 2) || pb_string(b, &ns->name, NULL))
				return -1;
			ns->have_name = true;
		} else if (f == 2) {
			if (pb_want(b, at, f, "precompiled_charsmap", wt, 2) ||
			    pb_string(b, &ns->charsmap, &ns->charsmap_len))
				return -1;
		} else if (f >= 3 && f <= 5) {
			const char *name = f == 3 ? "add_dummy_prefix" : f == 4 ? "remove_extra_whitespaces" : "escape_whitespaces";
			if (pb_want(b, at, f, name, wt, 0) || pb_varint(b, &v))
				return -1;
			bool *dst = f == 3 ? &ns->add_dummy_prefix : f == 4 ? &ns->remove_extra_ws : &ns->escape_ws;
			*dst = v != 0;
		} else if (pb_skip(b, wt)) {
			return -1;
		}
	}
	return 0;
}

static void norm_defaults(struct spm_norm_spec *ns)
{
	memset(ns, 0, sizeof(*ns));
	ns->add_dummy_prefix = ns->remove_extra_ws = ns->escape_ws = true;
}

/* ---- piece maps --------------------------------------------------------- */

static uint64_t fnv(const char *s, size_t n)
{
	uint64_t h = FNV_INIT;
	for (size_t i = 0; i < n; i++)
		h = FNV_STEP(h, s[i]);
	return h;
}

static void map_init(struct spm_map *mp, size_t count)
{
	size_t cap = 16;
	while (cap < count * 2 + 2)
		cap <<= 1;
	mp->slot = xcalloc(cap, sizeof(*mp->slot));
	mp->hash = xcalloc(cap, sizeof(*mp->hash));
	mp->mask = cap - 1;
}

static void map_free(struct spm_map *mp)
{
	free(mp->slot);
	free(mp->hash);
}

/* id of s[0..n) (hash h), or -1 */
static int32_t map_get(const struct tok_spm *m, const struct spm_map *mp, const char *s, size_t n, uint64_t h)
{
	for (size_t i = (size_t)h & mp->mask;; i = (i + 1) & mp->mask) {
		int32_t id = mp->slot[i] - 1;
		if (id < 0)
			return -1;
		if (mp->hash[i] == h && m->p[id].len == n && !memcmp(m->p[id].s, s, n))
			return id;
	}
}

/* Insert id; the id already holding that string when there is one. */
static int32_t map_put(struct tok_spm *m, struct spm_map *mp, int32_t id)
{
	uint64_t h = fnv(m->p[id].s, m->p[id].len);
	int32_t old = map_get(m, mp, m->p[id].s, m->p[id].len, h);
	if (old >= 0)
		return old;
	size_t i = (size_t)h & mp->mask;
	while (mp->slot[i])
		i = (i + 1) & mp->mask;
	mp->slot[i] = id + 1;
	mp->hash[i] = h;
	return -1;
}

static inline size_t edge_hash(uint64_t k)
{
	k *= 0x9E3779B97F4A7C15ull;
	return (size_t)(k ^ (k >> 29));
}

static inline const struct spm_edge *trie_edge(const struct spm_trie *t, int32_t node, uint8_t c)
{
	if (node == 0)
		return t->root[c].key ? &t->root[c] : NULL;
	uint64_t k = ((uint64_t)node << 8 | c) + 1;
	for (size_t i = edge_hash(k) & t->emask;; i = (i + 1) & t->emask) {
		if (t->e[i].key == k)
			return &t->e[i];
		if (!t->e[i].key)
			return NULL;
	}
}

static struct spm_edge *trie_add(struct spm_trie *t, int32_t node, uint8_t c)
{
	struct spm_edge *e = (struct spm_edge *)trie_edge(t, node, c);
	if (e)
		return e;
	uint64_t k = ((uint64_t)node << 8 | c) + 1;
	if (node == 0) {
		e = &t->root[c];
	} else {
		size_t i = edge_hash(k) & t->emask;
		while (t->e[i].key)
			i = (i + 1) & t->emask;
		e = &t->e[i];
	}
	*e = (struct spm_edge){ k, (int32_t)t->nnodes++, -1, 0.0f, TK_NONE };
	return e;
}

static void trie_build(struct tok_spm *m)
{
	struct spm_trie *t = &m->trie_p;
	size_t total = 1;
	for (int32_t i = 0; i < m->n; i++)
		total += m->p[i].len;
	size_t cap = 16;
	while (cap < total * 2)
		cap <<= 1;
	t->e = xcalloc(cap, sizeof(*t->e));
	t->emask = cap - 1;
	t->nnodes = 1;
	for (int32_t id = 0; id < m->n; id++) {
		const struct spm_piece *p = &m->p[id];
		if (p->type != PT_NORMAL && p->type != PT_USER && p->type != PT_UNUSED)
			continue;
		int32_t node = 0;
		struct spm_edge *e = NULL;
		for (uint32_t j = 0; j < p->len; j++) {
			e = trie_add(t, node, (uint8_t)p->s[j]);
			node = e->child;
		}
		if (e->id < 0) {
			e->id = id;
			e->score = p->score;
			e->kind = p->type == PT_NORMAL ? TK_NORMAL : p->type == PT_USER ? TK_USER : TK_UNUSED;
		}
	}
	for (int32_t id = 0; id < m->n; id++)
		if (m->p[id].type == PT_USER)
			m->user_first[(uint8_t)m->p[id].s[0]] = true;
}

static void trie_free(struct spm_trie *t)
{
	free(t->e);
}

/* sentencepiece's PieceToId */
static int32_t piece_to_id(const struct tok_spm *m, const char *s, size_t n)
{
	uint64_t h = fnv(s, n);
	int32_t id = map_get(m, &m->reserved, s, n, h);
	if (id < 0)
		id = map_get(m, &m->normal, s, n, h);
	return id < 0 ? m->unk_id : id;
}

static int32_t control_id(const struct tok_spm *m, const char *name)
{
	int32_t id = piece_to_id(m, name, strlen(name));
	return id >= 0 && m->p[id].type == PT_CONTROL ? id : -1;
}

/* "<0xNN>" -> NN, else -1 */
static int piece_byte(const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	const char *hi = memchr(hex, s[3], 16), *lo = memchr(hex, s[4], 16);
	if (!hi || !lo)
		return -1;
	return (int)((hi - hex) * 16 + (lo - hex));
}

static char *quote(const char *s, size_t n)
{
	struct sbuf sb = SBUF_INIT;
	sbuf_addch(&sb, '"');
	for (size_t i = 0; i < n && i < 60; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f)
			sbuf_addf(&sb, "\\x%02x", c);
		else
			sbuf_addch(&sb, c);
	}
	sbuf_addstr(&sb, n > 60 ? "\"..." : "\"");
	return sbuf_detach(&sb, NULL);
}

/* ---- load ---------------------------------------------------------------- */

void tok_spm_free(struct tok_spm *m)
{
	if (!m)
		return;
	free(m->path);
	free(m->p);
	free(m->strings);
	map_free(&m->normal);
	map_free(&m->reserved);
	free(m->byte_val);
	free(m->unk_surface);
	free(m->trie);
	free(m->charsmap);
	free(m->norm_name);
	trie_free(&m->trie_p);
	free(m);
}

static int setup_charsmap(struct tok_spm *m)
{
	if (!m->charsmap)
		return 0;
	size_t n = m->trie_units; /* the blob's length, stashed by the caller */
	m->trie_units = 0;
	if (n == 0)
		return 0;
	const uint8_t *b = (const uint8_t *)m->charsmap;
	if (n < 4)
		return error("%s: normalizer_spec.precompiled_charsmap is %zu bytes, shorter than its 4-byte header",
			     m->path, n);
	uint32_t trie_bytes = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	if (trie_bytes > n - 4 || trie_bytes % 4 || trie_bytes == 0)
		return error("%s: normalizer_spec.precompiled_charsmap is broken: its header gives a trie of %u bytes, "
			     "expected a non-zero multiple of 4 within the %zu bytes that follow",
			     m->path, trie_bytes, n - 4);
	m->trie_units = trie_bytes / 4;
	m->trie = xmalloc(trie_bytes);
	for (size_t i = 0; i < m->trie_units; i++) {
		const uint8_t *u = b + 4 + 4 * i;
		m->trie[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
	}
	m->norm_strs = m->charsmap + 4 + trie_bytes;
	m->norm_len = n - 4 - trie_bytes;
	return 0;
}

#define DA_OFFSET0(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
#define DA_LABEL0(u) ((u) & 0x800000ffu)

/*
 * Parts of the text. BPE: a symbol of the merge loop is always a piece
 * (or one character). When every encodable piece holds the space symbol
 * only in a leading run, no symbol can cover a character and a following
 * space symbol, so the merges on each part cut before such a space symbol
 * are the merges on the whole text (each part's merges keep their order:
 * best score, leftmost first), user-defined symbols included. Those parts
 * (words, mostly) then hit a word cache. Likewise an ASCII character that
 * no longer piece holds is a symbol of its own: the text is cut before and
 * after it. Unigram: with the same condition (ws_split) no piece, and no
 * <unk> (one character), crosses such a cut, so the search runs word by
 * word (unigram_word), words through a cache when every score is finite.
 */
static void speed_setup(struct tok_spm *m)
{
	trie_build(m);
	const char *sp = m->escape_ws ? SPACE_SYM : " ";
	size_t sl = m->escape_ws ? SPACE_SYM_LEN : 1;
	m->ws_split = true;
	m->uni_cache = m->model_type == MT_UNIGRAM && isfinite(m->min_score - UNK_PENALTY) &&
		       isfinite(m->max_score * (float)m->max_normal_len);
	for (int c = 0; c < 0x80; c++)
		m->lonely[c] = m->model_type == MT_BPE;
	for (int32_t id = 0; id < m->n; id++) {
		const struct spm_piece *p = &m->p[id];
		if (p->type != PT_NORMAL && p->type != PT_USER && p->type != PT_UNUSED)
			continue;
		if (p->len > 1)
			for (uint32_t k = 0; k < p->len; k++)
				m->lonely[(uint8_t)p->s[k]] = false;
		size_t i = 0;
		while (i + sl <= p->len && !memcmp(p->s + i, sp, sl))
			i += sl;
		if (i < p->len && memmem(p->s + i, p->len - i, sp, sl))
			m->ws_split = false;
		if (!isfinite(p->score))
			m->uni_cache = false;
	}
	/* the bytes the charsmap trie has a transition for at its root */
	if (m->trie_units) {
		uint32_t pos0 = DA_OFFSET0(m->trie[0]);
		for (int c = 0; c < 256; c++) {
			uint32_t pos = pos0 ^ (uint32_t)c;
			m->rule_first[c] = pos < m->trie_units && DA_LABEL0(m->trie[pos]) == (uint32_t)c;
		}
	}
	/* An ASCII byte normalizes to itself, followed by an ASCII byte, when
	 * no user-defined symbol starts with it and no charsmap rule matches
	 * it alone or continues it with an ASCII byte (NFKC's rules that start
	 * with an ASCII letter go on with a combining mark, a non-ASCII byte). */
	for (int c = 0; c < 0x80; c++) {
		m->ascii_plain[c] = !m->user_first[c];
		if (!m->ascii_plain[c] || !m->rule_first[c])
			continue;
		uint32_t pos = DA_OFFSET0(m->trie[0]) ^ (uint32_t)c;
		uint32_t u = m->trie[pos];
		if ((u >> 8) & 1) { /* a rule for the byte alone */
			m->ascii_plain[c] = false;
			continue;
		}
		pos ^= DA_OFFSET0(u);
		for (uint32_t d = 0; d < 0x80; d++)
			if ((pos ^ d) < m->trie_units && DA_LABEL0(m->trie[pos ^ d]) == d)
				m->ascii_plain[c] = false;
	}
}

static struct tok_spm *parse(const char *path, const uint8_t *d, size_t len)
{
	struct tok_spm *m = xcalloc(1, sizeof(*m));
	m->path = xstrdup(path);
	struct trainer_spec ts = { .model_type = MT_UNIGRAM };
	struct spm_norm_spec ns, dns;
	norm_defaults(&ns);
	norm_defaults(&dns);
	struct raw_piece *rp = NULL;
	size_t nrp = 0, cap = 0;
	struct pb b = { .d = d, .pos = 0, .end = len, .path = path, .msg = "ModelProto" };
	int rc = 0;
	if (len > 0 && d[0] == '{') {
		rc = error("%s: this looks like JSON (a tokenizer.json?), not a SentencePiece .model file; use "
			   "--tokenizer-type HuggingFaceTokenizer for a tokenizer.json",
			   path);
		goto out;
	}
	while (rc == 0 && b.pos < b.end) {
		size_t at = b.pos;
		uint32_t f;
		int wt;
		struct pb sub;
		if ((rc = pb_key(&b, &f, &wt)))
			break;
		if (f == 1) {
			if ((rc = pb_want(&b, at, f, "pieces", wt, 2)) || (rc = pb_bytes(&b, &sub, "a piece")))
				break;
			if (nrp == cap)
				xgrow(&rp, &cap, nrp + 1, sizeof(*rp));
			memset(&rp[nrp], 0, sizeof(*rp));
			rc = read_piece(&sub, &rp[nrp], (int32_t)nrp);
			nrp++;
		} else if (f == 2) {
			if (!(rc = pb_want(&b, at, f, "trainer_spec", wt, 2)) && !(rc = pb_bytes(&b, &sub, "trainer_spec")))
				rc = read_trainer(&sub, &ts);
		} else if (f == 3 || f == 5) {
			if (!(rc = pb_want(&b, at, f, f == 3 ? "normalizer_spec" : "denormalizer_spec", wt, 2)) &&
			    !(rc = pb_bytes(&b, &sub, f == 3 ? "normalizer_spec" : "denormalizer_spec")))
				rc = read_normalizer(&sub, f == 3 ? &ns : &dns);
		} else {
			rc = pb_skip(&b, wt);
		}
	}
	if (rc)
		goto out;
	if (nrp == 0) {
		rc = error("%s: not a SentencePiece model: it has no pieces%s", path,
			   len == 0 ? " (the file is empty)" : "");
		goto out;
	}
	if (nrp > INT32_MAX / 2) {
		rc = error("%s: %zu pieces is more than megac takes", path, nrp);
		goto out;
	}
	if (ts.model_type == MT_WORD || ts.model_type == MT_CHAR) {
		rc = error("%s: a SentencePiece %s model; megac encodes BPE and unigram models only", path,
			   ts.model_type == MT_WORD ? "WORD" : "CHAR");
		goto out;
	}
	if (ts.ws_suffix) {
		rc = error("%s: trainer_spec.treat_whitespace_as_suffix is set; megac does not implement SentencePiece "
			   "models that put the space after a word",
			   path);
		goto out;
	}
	if (dns.charsmap_len > 0) {
		rc = error("%s: the model has a denormalizer (denormalizer_spec.precompiled_charsmap); megac does not "
			   "implement SentencePiece denormalization",
			   path);
		goto out;
	}

	/* pieces */
	m->n = (int32_t)nrp;
	m->p = xcalloc(nrp, sizeof(*m->p));
	size_t total = 0;
	for (size_t i = 0; i < nrp; i++)
		total += rp[i].len + 1;
	m->strings = xmalloc(total);
	size_t off = 0, nnormal = 0;
	for (size_t i = 0; i < nrp; i++) {
		memcpy(m->strings + off, rp[i].s, rp[i].len + 1);
		m->p[i].s = m->strings + off;
		m->p[i].len = (uint32_t)rp[i].len;
		m->p[i].score = rp[i].score;
		m->p[i].type = (uint8_t)rp[i].type;
		off += rp[i].len + 1;
		nnormal += rp[i].type == PT_NORMAL || rp[i].type == PT_USER || rp[i].type == PT_UNUSED;
	}
	map_init(&m->normal, nnormal);
	map_init(&m->reserved, nrp - nnormal);
	m->byte_val = xmalloc(nrp * sizeof(*m->byte_val));
	m->unk_id = -1;
	m->min_score = FLT_MAX;
	m->max_score = FLT_MIN; /* as sentencepiece: the smallest positive float */
	for (int32_t i = 0; i < m->n; i++) {
		struct spm_piece *p = &m->p[i];
		bool normal = p->type == PT_NORMAL || p->type == PT_USER || p->type == PT_UNUSED;
		int32_t old = map_put(m, normal ? &m->normal : &m->reserved, i);
		m->byte_val[i] = -1;
		if (old >= 0) {
			char *q = quote(p->s, p->len);
			rc = error("%s: piece %d (%s) is already defined as piece %d", path, (int)i, q, (int)old);
			free(q);
			goto out;
		}
		if (normal && p->len > m->max_normal_len)
			m->max_normal_len = p->len;
		if (p->type == PT_USER && p->len > m->max_user_len)
			m->max_user_len = p->len;
		if (p->type == PT_NORMAL) {
			m->min_score = p->score < m->min_score ? p->score : m->min_score;
			m->max_score = p->score > m->max_score ? p->score : m->max_score;
		}
		if (p->type == PT_UNKNOWN) {
			if (m->unk_id >= 0) {
				rc = error("%s: pieces %d and %d are both the unknown piece (type UNKNOWN); a model has one",
					   path, (int)m->unk_id, (int)i);
				goto out;
			}
			m->unk_id = i;
		}
		if (p->type == PT_BYTE) {
			int v = piece_byte(p->s, p->len);
			char *q = quote(p->s, p->len);
			if (!ts.byte_fallback)
				rc = error("%s: piece %d (%s) is a byte piece, but trainer_spec.byte_fallback is off",
					   path, (int)i, q);
			else if (v < 0)
				rc = error("%s: piece %d (%s) has type BYTE but is not of the form <0xNN>", path, (int)i, q);
			free(q);
			if (rc)
				goto out;
			m->byte_val[i] = (int16_t)v;
		}
	}
	if (m->unk_id < 0) {
		rc = error("%s: the model has no unknown piece (type UNKNOWN); sentencepiece needs one", path);
		goto out;
	}
	for (int i = 0; i < 256; i++) {
		char hx[8];
		snprintf(hx, sizeof(hx), "<0x%02X>", i);
		m->byte_id[i] = piece_to_id(m, hx, 6);
	}
	m->model_type = ts.model_type;
	m->byte_fallback = ts.byte_fallback;
	m->bos = control_id(m, ts.bos_piece ? ts.bos_piece : "<s>");
	m->eos = control_id(m, ts.eos_piece ? ts.eos_piece : "</s>");
	m->pad = control_id(m, ts.pad_piece ? ts.pad_piece : "<pad>");
	m->unk_surface = ts.unk_surface ? ts.unk_surface : xstrdup(" \xe2\x81\x87 ");
	ts.unk_surface = NULL;

	/* normalizer */
	m->add_dummy_prefix = ns.add_dummy_prefix;
	m->remove_extra_ws = ns.remove_extra_ws;
	m->escape_ws = ns.escape_ws;
	m->norm_name = ns.name ? ns.name : xstrdup("");
	ns.name = NULL;
	m->charsmap = ns.charsmap;
	m->trie_units = ns.charsmap_len;
	ns.charsmap = NULL;
	rc = setup_charsmap(m);
	if (rc == 0)
		speed_setup(m);
out:
	for (size_t i = 0; i < nrp; i++)
		free(rp[i].s);
	free(rp);
	free(ts.unk_piece);
	free(ts.bos_piece);
	free(ts.eos_piece);
	free(ts.pad_piece);
	free(ts.unk_surface);
	free(ns.name);
	free(ns.charsmap);
	free(dns.name);
	free(dns.charsmap);
	if (rc) {
		tok_spm_free(m);
		return NULL;
	}
	return m;
}

/* ---- normalizer ------------------------------------------------------- */

struct spm_buf {
	char *v;
	size_t n, cap;
};

static void buf_add(struct spm_buf *b, const char *s, size_t n)
{
	if (b->n + n > b->cap)
		xgrow(&b->v, &b->cap, b->n + n, 1);
	memcpy(b->v + b->n, s, n);
	b->n += n;
}

/* sentencepiece's OneCharLen: the length a UTF-8 lead byte announces */
static size_t one_char_len(const char *s, size_t n)
{
	static const uint8_t len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
	size_t l = len[(uint8_t)s[0] >> 4];
	return l < n ? l : n;
}

/* The longest user-defined symbol at s[0..n), 0 when none. */
static size_t user_match(const struct tok_spm *m, const char *s, size_t n)
{
	if (!m->user_first[(uint8_t)s[0]])
		return 0;
	size_t best = 0, max = m->max_user_len < n ? m->max_user_len : n;
	int32_t node = 0;
	for (size_t l = 1; l <= max; l++) {
		const struct spm_edge *e = trie_edge(&m->trie_p, node, (uint8_t)s[l - 1]);
		if (!e)
			break;
		node = e->child;
		if (e->kind == TK_USER)
			best = l;
	}
	return best;
}

/* Darts-clone's unit fields */
#define DA_HAS_LEAF(u) (((u) >> 8) & 1)
#define DA_VALUE(u) ((u) & 0x7fffffffu)
#define DA_LABEL(u) ((u) & 0x800000ffu)
#define DA_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))

/* The charsmap rule for s[0..n): the bytes it matches (0: none) and the
 * replacement (NUL-terminated in the blob). As sentencepiece, the longest of
 * the first 32 prefixes the trie holds. */
static size_t charsmap_match(const struct tok_spm *m, const char *s, size_t n, const char **rep)
{
	const uint32_t *a = m->trie;
	size_t na = m->trie_units, pos, best = 0, found = 0;
	if (!na)
		return 0;
	pos = DA_OFFSET(a[0]);
	for (size_t i = 0; i < n; i++) {
		uint8_t c = (uint8_t)s[i];
		pos ^= c;
		if (pos >= na)
			break;
		uint32_t u = a[pos];
		if (DA_LABEL(u) != c)
			break;
		pos ^= DA_OFFSET(u);
		if (DA_HAS_LEAF(u)) {
			if (pos >= na)
				break;
			uint32_t v = DA_VALUE(a[pos]);
			if (found < 32 && v < m->norm_len) {
				best = i + 1;
				*rep = m->norm_strs + v;
			}
			found++;
		}
	}
	return best;
}

struct norm_piece {
	const char *s;
	size_t len;      /* of s */
	size_t consumed; /* input bytes */
};

static void normalize_prefix(const struct tok_spm *m, const char *in, size_t n, struct norm_piece *p)
{
	uint8_t c0 = (uint8_t)in[0];
	if (!m->user_first[c0] && !m->rule_first[c0]) { /* no symbol, no rule starts here */
		p->s = in;
		p->len = p->consumed = one_char_len(in, n);
		return;
	}
	size_t l = m->max_user_len ? user_match(m, in, n) : 0;
	if (l) {
		p->s = in;
		p->len = p->consumed = l;
		return;
	}
	const char *rep = NULL;
	l = charsmap_match(m, in, n, &rep);
	if (l) {
		p->s = rep;
		p->len = strnlen(rep, m->norm_len - (size_t)(rep - m->norm_strs));
		p->consumed = l;
		return;
	}
	/* the caller's text is valid UTF-8: one character */
	p->s = in;
	p->len = p->consumed = one_char_len(in, n);
}

static void normalize(const struct tok_spm *m, const char *in, size_t n, struct spm_buf *o)
{
	struct norm_piece p;
	size_t i = 0;
	o->n = 0;
	if (m->remove_extra_ws) {
		while (i < n) {
			normalize_prefix(m, in + i, n - i, &p);
			if (p.len != 1 || p.s[0] != ' ')
				break;
			i += p.consumed;
		}
	}
	if (i == n)
		return;
	if (m->add_dummy_prefix)
		buf_add(o, m->escape_ws ? SPACE_SYM : " ", m->escape_ws ? SPACE_SYM_LEN : 1);
	bool prev_space = m->remove_extra_ws;
	while (i < n) {
		uint8_t c = (uint8_t)in[i];
		if (c < 0x80 && c != ' ' && m->ascii_plain[c]) {
			/* a run of plain ASCII characters but its last, when a
			 * non-ASCII byte follows that */
			size_t j = i + 1;
			while (j < n && (uint8_t)in[j] < 0x80 && in[j] != ' ' && m->ascii_plain[(uint8_t)in[j]])
				j++;
			if (j < n && (uint8_t)in[j] >= 0x80)
				j--;
			if (j > i) {
				buf_add(o, in + i, j - i);
				prev_space = false;
				i = j;
				continue;
			}
		}
		if (c < 0x80 && m->ascii_plain[c] && (i + 1 == n || (uint8_t)in[i + 1] < 0x80)) {
			/* a plain ASCII character: itself (the common case); a
			 * space as the general path below treats a " " */
			if (o->n + SPACE_SYM_LEN > o->cap)
				xgrow(&o->v, &o->cap, o->n + SPACE_SYM_LEN, 1);
			if (c != ' ') {
				o->v[o->n++] = (char)c;
				prev_space = false;
			} else {
				if (!prev_space) {
					if (m->escape_ws) {
						memcpy(o->v + o->n, SPACE_SYM, SPACE_SYM_LEN);
						o->n += SPACE_SYM_LEN;
					} else {
						o->v[o->n++] = ' ';
					}
				}
				prev_space = m->remove_extra_ws;
			}
			i++;
			continue;
		}
		normalize_prefix(m, in + i, n - i, &p);
		const char *s = p.s;
		size_t len = p.len;
		while (prev_space && len && s[0] == ' ') {
			s++;
			len--;
		}
		if (len) {
			for (size_t k = 0; k < len; k++) {
				if (m->escape_ws && s[k] == ' ')
					buf_add(o, SPACE_SYM, SPACE_SYM_LEN);
				else
					buf_add(o, s + k, 1);
			}
			prev_space = s[len - 1] == ' ';
		}
		i += p.consumed;
		if (!m->remove_extra_ws)
			prev_space = false;
	}
	if (m->remove_extra_ws) {
		const char *sp = m->escape_ws ? SPACE_SYM : " ";
		size_t sl = m->escape_ws ? SPACE_SYM_LEN : 1;
		while (o->n >= sl && !memcmp(o->v + o->n - sl, sp, sl))
			o->n -= sl;
	}
}

/* ---- sessions --------------------------------------------------------- */

struct bpe_sym {
	int32_t prev, next;
	uint32_t start, len;
	bool freeze;
};

struct bpe_pair {
	float score;
	int32_t left, right;
	uint32_t size;
};

struct rev_merge {
	int32_t id;
	uint32_t ls, ll, rs, rl;
};

struct uni_node {
	float score;
	int32_t start, id;
};

/* the word cache's margin pass (see unigram_word) */
struct uni_dnode {
	double best, second;
	int32_t start, id;
	float score;
};

struct tok_spm_session {
	const struct tok_spm *m;
	struct spm_buf norm, text;
	struct bpe_sym *sym;
	size_t nsym, capsym;
	struct bpe_pair *heap;
	size_t nheap, capheap;
	struct rev_merge *rev;
	size_t nrev, caprev;
	struct uni_node *node;
	size_t capnode;
	struct tok_ids res; /* (start, len, id) triples of the model's result */
	struct tok_bpe_cache *cache; /* ids of the parts of texts seen (BPE, unigram) */
	struct tok_ids seg;
	struct uni_dnode *dnode;
	size_t capdnode;
	struct tok_ids rec; /* unigram: a word's cache record */
};

struct tok_spm_session *tok_spm_session_new(const struct tok_spm *m)
{
	struct tok_spm_session *s = xcalloc(1, sizeof(*s));
	s->m = m;
	if (m->model_type == MT_BPE || (m->uni_cache && m->ws_split))
		s->cache = tok_bpe_cache_new();
	return s;
}

void tok_spm_session_free(struct tok_spm_session *s)
{
	if (!s)
		return;
	free(s->norm.v);
	free(s->text.v);
	free(s->sym);
	free(s->heap);
	free(s->rev);
	free(s->node);
	free(s->dnode);
	tok_ids_free(&s->rec);
	tok_ids_free(&s->res);
	tok_ids_free(&s->seg);
	tok_bpe_cache_free(s->cache);
	free(s);
}

static void result(struct tok_spm_session *s, uint32_t start, uint32_t len, int32_t id)
{
	tok_ids_push(&s->res, (int32_t)start);
	tok_ids_push(&s->res, (int32_t)len);
	tok_ids_push(&s->res, id);
}

/* ---- BPE ------------------------------------------------------------------ */

/* a comes out of the queue before b */
static bool pair_before(const struct bpe_pair *a, const struct bpe_pair *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct tok_spm_session *s, struct bpe_pair p)
{
	if (s->nheap == s->capheap)
		xgrow(&s->heap, &s->capheap, s->nheap + 1, sizeof(*s->heap));
	size_t i = s->nheap++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!pair_before(&p, &s->heap[up]))
			break;
		s->heap[i] = s->heap[up];
		i = up;
	}
	s->heap[i] = p;
}

static struct bpe_pair heap_pop(struct tok_spm_session *s)
{
	struct bpe_pair top = s->heap[0], last = s->heap[--s->nheap];
	size_t i = 0, n = s->nheap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && pair_before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!pair_before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n)
		s->heap[i] = last;
	return top;
}

static void bpe_maybe_pair(struct tok_spm_session *s, const char *ns, int32_t left, int32_t right)
{
	const struct tok_spm *m = s->m;
	if (left < 0 || right < 0 || s->sym[left].freeze || s->sym[right].freeze)
		return;
	const struct bpe_sym *l = &s->sym[left], *r = &s->sym[right];
	size_t len = l->len + r->len;
	const char *str = ns + l->start;
	int32_t id = map_get(m, &m->normal, str, len, fnv(str, len));
	if (id < 0)
		return;
	heap_push(s, (struct bpe_pair){ m->p[id].score, left, right, (uint32_t)len });
	if (m->p[id].type == PT_UNUSED) {
		if (s->nrev == s->caprev)
			xgrow(&s->rev, &s->caprev, s->nrev + 1, sizeof(*s->rev));
		s->rev[s->nrev++] = (struct rev_merge){ id, l->start, l->len, r->start, r->len };
	}
}

static void bpe_resegment(struct tok_spm_session *s, const char *ns, uint32_t start, uint32_t len)
{
	const struct tok_spm *m = s->m;
	int32_t id = piece_to_id(m, ns + start, len);
	if (m->p[id].type == PT_UNUSED) {
		for (size_t i = s->nrev; i-- > 0;) /* the latest entry for the piece */
			if (s->rev[i].id == id) {
				struct rev_merge r = s->rev[i];
				bpe_resegment(s, ns, r.ls, r.ll);
				bpe_resegment(s, ns, r.rs, r.rl);
				return;
			}
	}
	result(s, start, len, id);
}

static void bpe_encode(struct tok_spm_session *s, const char *ns, size_t n)
{
	const struct tok_spm *m = s->m;
	s->nsym = s->nheap = s->nrev = 0;
	for (size_t i = 0; i < n;) {
		size_t l = m->max_user_len ? user_match(m, ns + i, n - i) : 0;
		bool freeze = l > 0;
		if (!l)
			l = one_char_len(ns + i, n - i);
		if (s->nsym == s->capsym)
			xgrow(&s->sym, &s->capsym, s->nsym + 1, sizeof(*s->sym));
		int32_t k = (int32_t)s->nsym++;
		i += l;
		s->sym[k] = (struct bpe_sym){ k - 1, i < n ? k + 1 : -1, (uint32_t)(i - l), (uint32_t)l, freeze };
	}
	for (size_t i = 1; i < s->nsym; i++)
		bpe_maybe_pair(s, ns, (int32_t)i - 1, (int32_t)i);
	while (s->nheap) {
		struct bpe_pair top = heap_pop(s);
		struct bpe_sym *l = &s->sym[top.left], *r = &s->sym[top.right];
		if (!l->len || !r->len || l->len + r->len != top.size)
			continue;
		l->len += r->len;
		l->next = r->next;
		if (r->next >= 0)
			s->sym[r->next].prev = top.left;
		r->len = 0;
		bpe_maybe_pair(s, ns, l->prev, top.left);
		bpe_maybe_pair(s, ns, top.left, l->next);
	}
	for (int32_t i = s->nsym ? 0 : -1; i >= 0; i = s->sym[i].next)
		bpe_resegment(s, ns, s->sym[i].start, s->sym[i].len);
}

/* ---- unigram ---------------------------------------------------------- */

/* as sentencepiece: a user-defined symbol's score is a double (length *
 * max_score - 0.1), so the candidate is a double, compared with the float
 * kept at the node */
static inline float piece_score(const struct tok_spm *m, const struct spm_edge *e, size_t len)
{
	return e->kind == TK_USER ? (float)((float)len * m->max_score - 0.1) : e->score;
}

/* sentencepiece's Viterbi over ns[0..n), its path's score starting at base
 * (0 for a whole text; see unigram_word): the triples in s->res, the best
 * path's score returned. */
static float unigram_encode(struct tok_spm_session *s, const char *ns, size_t n, float base)
{
	const struct tok_spm *m = s->m;
	if (n + 1 > s->capnode)
		xgrow(&s->node, &s->capnode, n + 1, sizeof(*s->node));
	struct uni_node *best = s->node;
	for (size_t i = 0; i <= n; i++)
		best[i] = (struct uni_node){ 0.0f, -1, -1 };
	best[0].score = base;
	const float unk_score = m->min_score - UNK_PENALTY;
	for (size_t start = 0; start < n;) {
		const float here = best[start].score;
		size_t mblen = one_char_len(ns + start, n - start);
		bool single = false;
		int32_t node = 0;
		for (size_t len = 1; start + len <= n; len++) {
			const struct spm_edge *e = trie_edge(&m->trie_p, node, (uint8_t)ns[start + len - 1]);
			if (!e)
				break;
			node = e->child;
			if (e->kind == TK_NONE || e->kind == TK_UNUSED)
				continue;
			int32_t id = e->id;
			float cand = piece_score(m, e, len) + here;
			struct uni_node *t = &best[start + len];
			if (t->start == -1 || cand > t->score) {
				t->score = cand;
				t->start = (int32_t)start;
				t->id = id;
			}
			if (len == mblen)
				single = true;
		}
		if (!single) {
			struct uni_node *t = &best[start + mblen];
			float cand = unk_score + here;
			if (t->start == -1 || cand > t->score) {
				t->score = cand;
				t->start = (int32_t)start;
				t->id = m->unk_id;
			}
		}
		start += mblen;
	}
	size_t first = s->res.n;
	float total = best[n].score;
	for (size_t end = n; end > 0;) {
		struct uni_node *t = &best[end];
		result(s, (uint32_t)t->start, (uint32_t)(end - (size_t)t->start), t->id);
		end = (size_t)t->start;
	}
	/* reverse the triples */
	int32_t *v = s->res.v + first;
	size_t k = (s->res.n - first) / 3;
	for (size_t i = 0; i < k / 2; i++)
		for (int j = 0; j < 3; j++) {
			int32_t tmp = v[3 * i + j];
			v[3 * i + j] = v[3 * (k - 1 - i) + j];
			v[3 * (k - 1 - i) + j] = tmp;
		}
	return total;
}

/* ---- encode ----------------------------------------------------------- */

/* The model's result (s->res, offsets into ns) as ids: an <unk> piece
 * becomes its bytes' <0xNN> pieces when byte_fallback. */
static void result_ids(struct tok_spm_session *s, const char *ns, struct tok_ids *out)
{
	const struct tok_spm *m = s->m;
	for (size_t i = 0; i < s->res.n; i += 3) {
		int32_t id = s->res.v[i + 2];
		if (id == m->unk_id && m->byte_fallback) {
			const uint8_t *b = (const uint8_t *)ns + s->res.v[i];
			for (int32_t k = 0; k < s->res.v[i + 1]; k++)
				tok_ids_push(out, m->byte_id[b[k]]);
		} else {
			tok_ids_push(out, id);
		}
	}
}

/* BPE ids of one part of the normalized text, through the word cache */
static void bpe_part(struct tok_spm_session *s, const char *ns, size_t n, struct tok_ids *out)
{
	if (tok_bpe_cache_get(s->cache, ns, n, out))
		return;
	size_t start = out->n;
	s->res.n = 0;
	bpe_encode(s, ns, n);
	result_ids(s, ns, out);
	tok_bpe_cache_put(s->cache, ns, n, out->v + start, out->n - start);
}

/*
 * The unigram word cache. The Viterbi search over a whole text cannot be
 * cut into words by itself: its path scores are float sums that carry the
 * score of the text before each word, and the rounding of a sum depends on
 * its size, so a near tie inside a word may go either way with the text
 * before it. What is cached is therefore each word's segmentation together
 * with the largest |base| (the float score the search reaches at the word's
 * start) for which the float search provably picks that segmentation.
 *
 * With ws_split no piece crosses a cut before a space symbol, so every path
 * passes through each cut: the search over the text is the search over
 * each word in turn, started at the score reached at the word's start
 * (unigram_encode's base), and the score at the word's end is the float
 * sum, in path order, of the base and the scores of the word's pieces.
 *
 * The bound: the margin pass below runs the search in double from 0, at
 * each position the best and the second-best candidate (real arithmetic:
 * the decisions do not depend on the base). Each float addition of the
 * search errs by at most u|x| (u = 2^-24), |x| <= |base| + W (to a factor
 * 1 + 64u), W the largest |score reached| + |piece score| of a candidate;
 * a path of at most c pieces (c: the word's characters) reaches a position
 * with an error of at most c u (|base| + W), and a candidate at most
 * (c + 1) u (|base| + W) from its real value. When every position's margin
 * (best - second) exceeds twice that, the float search picks the real
 * winner everywhere, by induction over the positions. The record keeps
 * |base| < margin / (2.5 (c + 1) u) - W, a quarter more than needed (the
 * double pass's own error is some 2^-29 of the float one). A word whose
 * margin is too small for the base at hand (a near or exact tie) runs the
 * float search there, as before.
 */
#define UNI_U (1.0 / 16777216.0)

/* The margin pass over w[0..n): the largest |base| for which the float
 * search picks this pass's path (-1 when no base is safe); that path's
 * piece scores (in order) in s->rec after `at`, its triples in s->res. */
static float unigram_margin(struct tok_spm_session *s, const char *w, size_t n, size_t at)
{
	const struct tok_spm *m = s->m;
	if (n + 1 > s->capdnode)
		xgrow(&s->dnode, &s->capdnode, n + 1, sizeof(*s->dnode));
	struct uni_dnode *d = s->dnode;
	for (size_t i = 0; i <= n; i++)
		d[i] = (struct uni_dnode){ 0.0, -HUGE_VAL, -1, -1, 0.0f };
	const float unk_score = m->min_score - UNK_PENALTY;
	double wmax = 0.0;
#define UNI_CAND(t_, sc_, id_)                                                         \
	do {                                                                           \
		struct uni_dnode *t = (t_);                                            \
		double c = (double)(sc_) + here;                                       \
		double mag = fabs(here) + fabs((double)(sc_));                         \
		wmax = mag > wmax ? mag : wmax;                                        \
		if (t->start == -1 || c > t->best) {                                   \
			t->second = t->start == -1 ? -HUGE_VAL : t->best;              \
			t->best = c;                                                   \
			t->start = (int32_t)start;                                     \
			t->id = (id_);                                                 \
			t->score = (sc_);                                              \
		} else if (c > t->second) {                                            \
			t->second = c;                                                 \
		}                                                                      \
	} while (0)
	size_t chars = 0;
	for (size_t start = 0; start < n; chars++) {
		const double here = d[start].best;
		size_t mblen = one_char_len(w + start, n - start);
		bool single = false;
		int32_t node = 0;
		for (size_t len = 1; start + len <= n; len++) {
			const struct spm_edge *e = trie_edge(&m->trie_p, node, (uint8_t)w[start + len - 1]);
			if (!e)
				break;
			node = e->child;
			if (e->kind == TK_NONE || e->kind == TK_UNUSED)
				continue;
			UNI_CAND(&d[start + len], piece_score(m, e, len), e->id);
			if (len == mblen)
				single = true;
		}
		if (!single)
			UNI_CAND(&d[start + mblen], unk_score, m->unk_id);
		start += mblen;
	}
#undef UNI_CAND
	double margin = HUGE_VAL;
	for (size_t i = 1; i <= n; i++)
		if (d[i].start >= 0 && d[i].best - d[i].second < margin)
			margin = d[i].best - d[i].second;
	/* the path's scores, first piece first */
	size_t k = 0;
	for (size_t end = n; end > 0; end = (size_t)d[end].start)
		k++;
	xgrow(&s->rec.v, &s->rec.cap, at + k, sizeof(int32_t));
	xgrow(&s->res.v, &s->res.cap, 3 * k, sizeof(int32_t));
	s->rec.n = at + k;
	s->res.n = 3 * k;
	for (size_t end = n; end > 0; end = (size_t)d[end].start) {
		k--;
		memcpy(&s->rec.v[at + k], &d[end].score, sizeof(float));
		s->res.v[3 * k] = d[end].start;
		s->res.v[3 * k + 1] = (int32_t)end - d[end].start;
		s->res.v[3 * k + 2] = d[end].id;
	}
	double bmax = margin / (2.5 * (double)(chars + 1) * UNI_U) - wmax;
	if (!(bmax > 0.0))
		return -1.0f;
	return bmax >= FLT_MAX ? FLT_MAX : (float)(bmax * 0.999);
}

/* One word of a unigram text: its ids appended to ids, the score at its
 * end returned (base: the score at its start). A record in the cache is
 * { bound (float), k, k piece scores (floats), the ids }. A new word takes
 * the margin pass first: when the base is within its bound, that pass's
 * path is the float search's, and the float search need not run. */
static float unigram_word(struct tok_spm_session *s, const char *w, size_t n, float base, struct tok_ids *ids)
{
	if (n <= TOK_BPE_CACHE_MAX_KEY) {
		size_t len;
		const int32_t *r = tok_bpe_cache_find(s->cache, w, n, &len);
		if (!r) {
			struct tok_ids *rec = &s->rec;
			rec->n = 0;
			tok_ids_push(rec, 0);
			tok_ids_push(rec, 0);
			float bound = unigram_margin(s, w, n, 2);
			if (bound > 0.0f) { /* remembered, for the bases within the bound */
				size_t k = rec->n - 2, first = ids->n;
				result_ids(s, w, ids);
				memcpy(&rec->v[0], &bound, sizeof(float));
				rec->v[1] = (int32_t)k;
				xgrow(&rec->v, &rec->cap, rec->n + (ids->n - first), sizeof(int32_t));
				memcpy(rec->v + rec->n, ids->v + first, (ids->n - first) * sizeof(int32_t));
				rec->n += ids->n - first;
				tok_bpe_cache_put(s->cache, w, n, rec->v, rec->n);
				if (fabsf(base) < bound) {
					float sum = base;
					for (size_t i = 0; i < k; i++) {
						float sc;
						memcpy(&sc, &rec->v[2 + i], sizeof(float));
						sum = sc + sum;
					}
					return sum;
				}
				ids->n = first;
			}
		} else {
			float bound;
			memcpy(&bound, &r[0], sizeof(float));
			if (fabsf(base) < bound) {
				size_t k = (size_t)r[1], nid = len - 2 - k;
				float sum = base;
				for (size_t i = 0; i < k; i++) {
					float sc;
					memcpy(&sc, &r[2 + i], sizeof(float));
					sum = sc + sum;
				}
				if (ids->n + nid > ids->cap)
					xgrow(&ids->v, &ids->cap, ids->n + nid, sizeof(int32_t));
				for (size_t i = 0; i < nid; i++)
					ids->v[ids->n + i] = r[2 + k + i];
				ids->n += nid;
				return sum;
			}
		}
	}
	/* too long to remember, or a tie too close for this base: the search */
	s->res.n = 0;
	float end = unigram_encode(s, w, n, base);
	result_ids(s, w, ids);
	return end;
}

static inline bool is_space_sym(const struct tok_spm *m, const char *s)
{
	return m->escape_ws ? s[0] == SPACE_SYM[0] && s[1] == SPACE_SYM[1] && s[2] == SPACE_SYM[2] : s[0] == ' ';
}

/* a cut before the space symbol at ns[j] (see speed_setup) */
static inline bool ws_cut(const struct tok_spm *m, const char *ns, size_t n, size_t j)
{
	size_t sl = m->escape_ws ? SPACE_SYM_LEN : 1;
	return j + sl <= n && is_space_sym(m, ns + j) && !(j >= sl && is_space_sym(m, ns + j - sl));
}

/* sentencepiece's Encode: normalize, segment, bytes for unknowns */
static void encode_plain(struct tok_spm_session *s, const char *text, size_t len, struct tok_ids *out)
{
	const struct tok_spm *m = s->m;
	normalize(m, text, len, &s->norm);
	if (!s->norm.n)
		return;
	const char *ns = s->norm.v;
	size_t n = s->norm.n;
	struct tok_ids *ids = &s->seg;
	ids->n = 0;
	if (m->model_type == MT_BPE) {
		const uint8_t *u = (const uint8_t *)ns;
		for (size_t i = 0; i < n;) {
			size_t j = i + 1;
			for (; j < n; j++) {
				if (m->lonely[u[j]] || m->lonely[u[j - 1]])
					break;
				if (m->ws_split && ws_cut(m, ns, n, j))
					break;
			}
			bpe_part(s, ns + i, j - i, ids);
			i = j;
		}
	} else if (s->cache) {
		float base = 0.0f;
		const char sp0 = m->escape_ws ? SPACE_SYM[0] : ' ';
		for (size_t i = 0; i < n;) {
			size_t j = i + 1;
			for (const char *p; j < n; j = (size_t)(p - ns) + 1) {
				p = memchr(ns + j, sp0, n - j);
				if (!p) {
					j = n;
					break;
				}
				if (ws_cut(m, ns, n, (size_t)(p - ns))) {
					j = (size_t)(p - ns);
					break;
				}
			}
			base = unigram_word(s, ns + i, j - i, base, ids);
			i = j;
		}
	} else {
		s->res.n = 0;
		unigram_encode(s, ns, n, 0.0f);
		result_ids(s, ns, ids);
	}
	/* without byte_fallback, a run of unknown pieces is one <unk> */
	bool prev_unk = false;
	xgrow(&out->v, &out->cap, out->n + ids->n, sizeof(*out->v));
	for (size_t i = 0; i < ids->n; i++) {
		int32_t id = ids->v[i];
		bool unk = id == m->unk_id;
		if (unk && prev_unk && !m->byte_fallback)
			continue;
		prev_unk = unk;
		out->v[out->n++] = id;
	}
}

/* Python's str.isspace for the character ending at s[n-1]: its length, 0
 * when it is not whitespace. */
static size_t trailing_space(const char *str, size_t n)
{
	const uint8_t *s = (const uint8_t *)str;
	if (n >= 1 && ((s[n - 1] >= 0x09 && s[n - 1] <= 0x0d) || (s[n - 1] >= 0x1c && s[n - 1] <= 0x20)))
		return 1;
	if (n >= 2 && s[n - 2] == 0xc2 && (s[n - 1] == 0x85 || s[n - 1] == 0xa0))
		return 2;
	if (n >= 3) {
		unsigned cp = (unsigned)(s[n - 3] & 0x0f) << 12 | (unsigned)(s[n - 2] & 0x3f) << 6 | (s[n - 1] & 0x3f);
		if ((s[n - 3] & 0xf0) == 0xe0 && (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
						   cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000))
			return 3;
	}
	return 0;
}

#define MARK "\xe2\x98\xaf" /* U+262F, Megatron's extra-space marker */
#define MARK_LEN 3

/*
 * Megatron's SentencePieceTokenizer with ignore_extra_whitespaces off, on a
 * model that drops extra whitespace: " <mark> " replaces a leading space and
 * a space at the end (or before a final newline) and goes between two
 * spaces (Python's re.sub of (?<= )(?= )|^ | $), trailing whitespace is
 * stripped, then each part between marks is encoded with the mark appended
 * and its last id dropped.
 */
static void encode_keep_spaces(struct tok_spm_session *s, const char *t, size_t n, struct tok_ids *out)
{
	struct spm_buf *o = &s->text;
	o->n = 0;
	bool must_advance = false; /* the last match was empty, here */
	for (size_t p = 0; p <= n;) {
		bool at_end = p < n && t[p] == ' ' && (p + 1 == n || (p + 2 == n && t[p + 1] == '\n'));
		if (!must_advance && p > 0 && p < n && t[p - 1] == ' ' && t[p] == ' ') {
			buf_add(o, " " MARK " ", MARK_LEN + 2);
			must_advance = true;
			continue;
		}
		must_advance = false;
		if ((p == 0 && n > 0 && t[0] == ' ') || at_end) {
			buf_add(o, " " MARK " ", MARK_LEN + 2);
			p++;
			continue;
		}
		if (p < n)
			buf_add(o, t + p, 1);
		p++;
	}
	size_t l;
	while ((l = trailing_space(o->v, o->n)))
		o->n -= l;
	/* encode_plain reuses s->norm, not s->text: parts can point into it */
	struct tok_ids part = { 0 };
	struct spm_buf piece = { 0 };
	for (size_t i = 0; i < o->n;) {
		const char *e = NULL;
		for (size_t k = i; k + MARK_LEN <= o->n; k++)
			if (!memcmp(o->v + k, MARK, MARK_LEN)) {
				e = o->v + k;
				break;
			}
		size_t plen = e ? (size_t)(e - (o->v + i)) : o->n - i;
		if (plen) {
			piece.n = 0;
			buf_add(&piece, o->v + i, plen);
			buf_add(&piece, MARK, MARK_LEN);
			part.n = 0;
			encode_plain(s, piece.v, piece.n, &part);
			for (size_t k = 0; k + 1 < part.n; k++)
				tok_ids_push(out, part.v[k]);
		}
		i += plen + (e ? MARK_LEN : 0);
	}
	tok_ids_free(&part);
	free(piece.v);
}

void tok_spm_encode(struct tok_spm_session *s, const char *text, size_t len, struct tok_ids *out)
{
	if (s->m->keep_extra_spaces)
		encode_keep_spaces(s, text, len, out);
	else
		encode_plain(s, text, len, out);
}

/* ---- decode ----------------------------------------------------------- */

/* sentencepiece's IsValidDecodeUTF8: the length of the character at s, or
 * 0 for a byte that does not start one (a U+FFFD in the output) */
static size_t valid_char(const uint8_t *s, size_t n)
{
	uint32_t c = s[0], cp;
	if (c < 0x80)
		return 1;
	if (n >= 2 && (c & 0xe0) == 0xc0 && (s[1] & 0xc0) == 0x80) {
		cp = (c & 0x1f) << 6 | (s[1] & 0x3f);
		if (cp >= 0x80)
			return 2;
	} else if (n >= 3 && (c & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
		cp = (c & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		if (cp >= 0x800 && (cp < 0xd800 || cp >= 0xe000))
			return 3;
	} else if (n >= 4 && (c & 0xf8) == 0xf0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
		   (s[3] & 0xc0) == 0x80) {
		cp = (c & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
		if (cp >= 0x10000 && cp <= 0x10ffff)
			return 4;
	}
	return 0;
}

static void flush_bytes(struct sbuf *out, struct spm_buf *b)
{
	const uint8_t *s = (const uint8_t *)b->v;
	for (size_t i = 0; i < b->n;) {
		size_t l = valid_char(s + i, b->n - i);
		if (l) {
			sbuf_add(out, s + i, l);
			i += l;
		} else {
			sbuf_add(out, "\xef\xbf\xbd", 3);
			i++;
		}
	}
	b->n = 0;
}

int tok_spm_decode(const struct tok_spm *m, const int32_t *ids, size_t n, struct sbuf *out)
{
	size_t start = out->len;
	struct spm_buf bytes = { 0 };
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		if (id < 0 || id >= m->n) {
			free(bytes.v);
			return error("cannot decode token id %d: not in the SentencePiece vocabulary [0, %d)", (int)id,
				     (int)m->n);
		}
		const struct spm_piece *p = &m->p[id];
		if (p->type == PT_BYTE) {
			char c = (char)m->byte_val[id];
			buf_add(&bytes, &c, 1);
			continue;
		}
		flush_bytes(out, &bytes);
		if (p->type == PT_CONTROL)
			continue;
		if (p->type == PT_UNKNOWN) {
			sbuf_addstr(out, m->unk_surface);
			continue;
		}
		const char *s = p->s;
		size_t len = p->len;
		if (out->len == start && (m->add_dummy_prefix || m->remove_extra_ws) && len >= SPACE_SYM_LEN &&
		    !memcmp(s, SPACE_SYM, SPACE_SYM_LEN)) {
			s += SPACE_SYM_LEN;
			len -= SPACE_SYM_LEN;
		}
		for (size_t k = 0; k < len;) {
			if (k + SPACE_SYM_LEN <= len && !memcmp(s + k, SPACE_SYM, SPACE_SYM_LEN)) {
				sbuf_addch(out, ' ');
				k += SPACE_SYM_LEN;
			} else {
				sbuf_addch(out, s[k++]);
			}
		}
	}
	flush_bytes(out, &bytes);
	free(bytes.v);
	return 0;
}

/* ---- front ------------------------------------------------------------ */

struct tok_spm *tok_spm_load(const char *path, bool keep_extra_spaces)
{
	if (!path || !*path) {
		error("SentencePiece tokenizers need --tokenizer-model (the .model file)");
		return NULL;
	}
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		error("--tokenizer-model '%s' is a folder; SentencePiece tokenizers want the .model file itself "
		      "(such as %s/tokenizer.model)",
		      path, path);
		return NULL;
	}
	struct sbuf sb = SBUF_INIT;
	if (sbuf_read_file(&sb, path) < 0) {
		sbuf_release(&sb);
		return NULL;
	}
	struct tok_spm *m = parse(path, (const uint8_t *)(sb.buf ? sb.buf : ""), sb.len);
	sbuf_release(&sb);
	if (!m)
		return NULL;
	if (keep_extra_spaces) {
		/* Megatron's test: does the model encode "x  y" as "x y"? */
		struct tok_spm_session *s = tok_spm_session_new(m);
		struct tok_ids a = { 0 }, b = { 0 };
		encode_plain(s, "x  y", 4, &a);
		encode_plain(s, "x y", 3, &b);
		m->keep_extra_spaces = a.n == b.n && (a.n == 0 || !memcmp(a.v, b.v, a.n * sizeof(*a.v)));
		tok_ids_free(&a);
		tok_ids_free(&b);
		tok_spm_session_free(s);
	}
	return m;
}

int64_t tok_spm_piece_count(const struct tok_spm *m)
{
	return m->n;
}

int64_t tok_spm_bos(const struct tok_spm *m)
{
	return m->bos;
}

int64_t tok_spm_eos(const struct tok_spm *m)
{
	return m->eos;
}

int64_t tok_spm_pad(const struct tok_spm *m)
{
	return m->pad;
}

const char *tok_spm_model_type(const struct tok_spm *m)
{
	return m->model_type == MT_BPE ? "BPE" : "unigram";
}

/* ---- Hugging Face's view of the model (a checkpoint's export) ---------- */

const char *tok_spm_piece(const struct tok_spm *m, int64_t id)
{
	return id >= 0 && id < m->n ? m->p[id].s : NULL;
}

int64_t tok_spm_unk(const struct tok_spm *m)
{
	return m->unk_id;
}

/* The id of exactly the piece s[0..n), -1 when there is none. */
static int32_t exact_id(const struct tok_spm *m, const char *s, size_t n)
{
	int32_t id = piece_to_id(m, s, n);
	return id >= 0 && m->p[id].len == n && !memcmp(m->p[id].s, s, n) ? id : -1;
}

struct hf_merge {
	int32_t target, l, r;
	float score;
};

/* transformers' generate_merges order: by the merged piece's score (highest
 * first), then its id, then the left and right pieces' ids */
static int merge_cmp(const void *pa, const void *pb)
{
	const struct hf_merge *a = pa, *b = pb;
	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	if (a->target != b->target)
		return a->target < b->target ? -1 : 1;
	if (a->l != b->l)
		return a->l < b->l ? -1 : 1;
	return a->r < b->r ? -1 : a->r > b->r;
}

static json_t *add_str(json_t *arr, const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);
	if (v)
		json_array_append_new(arr, v);
	return v;
}

char *tok_spm_hf_json(const struct tok_spm *m, const char **why_not)
{
	*why_not = m->model_type != MT_BPE ? "it is a unigram model (only BPE models are converted)" :
		   m->trie		   ? "its normalizer has character rules (a precompiled charsmap)" :
		   !m->add_dummy_prefix || m->remove_extra_ws || !m->escape_ws ?
					     "its normalizer is not Llama's (dummy prefix, whitespace kept and escaped)" :
		   m->max_user_len	   ? "it has user-defined symbols" :
		   m->unk_id < 0	   ? "it has no <unk> piece" :
					     NULL;
	if (*why_not)
		return NULL;
	json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
	size_t nm = 0, cap = 0;
	struct hf_merge *mv = NULL;
	for (int32_t i = 0; i < m->n && !*why_not; i++) {
		const struct spm_piece *p = &m->p[i];
		json_t *s = json_stringn(p->s, p->len);
		if (!s || json_object_get(vocab, p->s)) {
			json_decref(s);
			*why_not = "a piece is not UTF-8, or is there twice";
			break;
		}
		json_object_set_new(vocab, p->s, json_integer(i));
		json_decref(s);
		if (p->type == PT_CONTROL) {
			json_t *a = json_object();
			json_object_set_new(a, "id", json_integer(i));
			json_object_set_new(a, "content", json_string(p->s));
			json_object_set_new(a, "single_word", json_false());
			json_object_set_new(a, "lstrip", json_false());
			json_object_set_new(a, "rstrip", json_false());
			json_object_set_new(a, "normalized", json_false());
			json_object_set_new(a, "special", json_true());
			json_array_append_new(added, a);
		}
		if (p->type != PT_NORMAL)
			continue;
		for (uint32_t k = 1; k < p->len; k++) {
			if (((uint8_t)p->s[k] & 0xc0) == 0x80)
				continue; /* inside a character */
			int32_t l = exact_id(m, p->s, k), r = exact_id(m, p->s + k, p->len - k);
			if (l < 0 || r < 0)
				continue;
			if (nm == cap)
				mv = xrealloc(mv, (cap = cap ? 2 * cap : 1024) * sizeof(*mv));
			mv[nm++] = (struct hf_merge){ i, l, r, p->score };
		}
	}
	qsort(mv, nm, sizeof(*mv), merge_cmp);
	for (size_t i = 0; i < nm && !*why_not; i++) {
		json_t *pair = json_array();
		if (!add_str(pair, m->p[mv[i].l].s, m->p[mv[i].l].len) || !add_str(pair, m->p[mv[i].r].s, m->p[mv[i].r].len))
			*why_not = "a piece is not UTF-8";
		json_array_append_new(merges, pair);
	}
	free(mv);
	char *out = NULL;
	if (!*why_not) {
		json_t *o = json_object(), *model = json_object();
		json_object_set_new(o, "version", json_string("1.0"));
		json_object_set_new(o, "truncation", json_null());
		json_object_set_new(o, "padding", json_null());
		json_object_set_new(o, "added_tokens", added);
		added = NULL;
		json_t *norm = json_pack("{s:s,s:[{s:s,s:s},{s:s,s:{s:s},s:s}]}", "type", "Sequence", "normalizers", "type",
					 "Prepend", "prepend", SPACE_SYM, "type", "Replace", "pattern", "String", " ",
					 "content", SPACE_SYM);
		json_object_set_new(o, "normalizer", norm);
		json_object_set_new(o, "pre_tokenizer", json_null());
		if (m->bos >= 0) {
			const char *b = m->p[m->bos].s;
			json_t *pp = json_pack(
				"{s:s,s:[{s:{s:s,s:i}},{s:{s:s,s:i}}],s:[{s:{s:s,s:i}},{s:{s:s,s:i}},{s:{s:s,s:i}},"
				"{s:{s:s,s:i}}],s:{s:{s:s,s:[i],s:[s]}}}",
				"type", "TemplateProcessing", "single", "SpecialToken", "id", b, "type_id", 0, "Sequence", "id",
				"A", "type_id", 0, "pair", "SpecialToken", "id", b, "type_id", 0, "Sequence", "id", "A",
				"type_id", 0, "SpecialToken", "id", b, "type_id", 1, "Sequence", "id", "B", "type_id", 1,
				"special_tokens", b, "id", b, "ids", (int)m->bos, "tokens", b);
			json_object_set_new(o, "post_processor", pp);
		} else {
			json_object_set_new(o, "post_processor", json_null());
		}
		json_t *dec = json_pack("{s:s,s:[{s:s,s:{s:s},s:s},{s:s},{s:s},{s:s,s:s,s:i,s:i}]}", "type", "Sequence",
					"decoders", "type", "Replace", "pattern", "String", SPACE_SYM, "content", " ",
					"type", "ByteFallback", "type", "Fuse", "type", "Strip", "content", " ", "start", 1,
					"stop", 0);
		json_object_set_new(o, "decoder", dec);
		json_object_set_new(model, "type", json_string("BPE"));
		json_object_set_new(model, "dropout", json_null());
		json_object_set_new(model, "unk_token", json_string(m->p[m->unk_id].s));
		json_object_set_new(model, "continuing_subword_prefix", json_null());
		json_object_set_new(model, "end_of_word_suffix", json_null());
		json_object_set_new(model, "fuse_unk", json_true());
		json_object_set_new(model, "byte_fallback", json_boolean(m->byte_fallback));
		json_object_set_new(model, "ignore_merges", json_false());
		json_object_set_new(model, "vocab", vocab);
		json_object_set_new(model, "merges", merges);
		vocab = merges = NULL;
		json_object_set_new(o, "model", model);
		out = json_dumps(o, JSON_PRESERVE_ORDER | JSON_INDENT(1));
		json_decref(o);
	}
	json_decref(vocab);
	json_decref(merges);
	json_decref(added);
	return out;
}
