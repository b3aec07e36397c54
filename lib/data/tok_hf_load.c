/*
 * tok_hf_load.c - HuggingFaceTokenizer: read a tokenizer.json into the
 * pipeline of tok_hf.h, and find the end-of-document token the way
 * Megatron's HF wrapper does (eos_token, else sep_token). Anything the
 * pipeline does not implement is refused by name here, at load time, so a
 * run never produces ids that differ from Hugging Face's silently; so is a
 * member of the wrong type (naming the file and the field), and a template
 * special token whose id is not in the vocabulary. Strings from the files
 * are echoed through tok_bpe_quote(), so every message stays one line.
 */
#include "base/error.h"
#include "base/jsonio.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "tok.h"
#include "tok_bpe.h"
#include "tok_hf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * Typed member lookups. A member that is absent or null takes its default;
 * one of another type is an error naming the file and the field ("model",
 * "pre_tokenizer.pretokenizers[1]", ...), as Hugging Face refuses such a
 * file too instead of guessing.
 */
static int get_bool(const json_t *o, const char *key, bool dflt, bool *out, const char *path, const char *field)
{
	json_t *v = json_object_get(o, key);
	*out = dflt;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return error("%s: %s.%s must be true or false", path, field, key);
	*out = json_is_true(v);
	return 0;
}

/* A string member (NULL when absent or null); strings with a NUL inside
 * are refused, since they are used as C strings. */
static int get_str(const json_t *o, const char *key, const char **out, const char *path, const char *field)
{
	json_t *v = json_object_get(o, key);
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return error("%s: %s.%s must be a string", path, field, key);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return error("%s: %s.%s contains a NUL character", path, field, key);
	*out = json_string_value(v);
	return 0;
}

/* A node that must be an object; null (or absent) gives *out NULL. */
static int get_obj(const json_t *v, const json_t **out, const char *path, const char *field)
{
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return error("%s: %s must be an object", path, field);
	*out = v;
	return 0;
}

/* Its "type", which must be there. */
static int get_type(const json_t *o, const char **type, const char *path, const char *field)
{
	if (get_str(o, "type", type, path, field))
		return -1;
	if (!*type)
		return error("%s: %s has no \"type\"", path, field);
	return 0;
}

/* ---- model ------------------------------------------------------------ */

static int merge_parts(const json_t *m, const char **a, size_t *alen, const char **b, size_t *blen)
{
	if (json_is_string(m)) {
		const char *s = json_string_value(m);
		size_t n = json_string_length(m);
		const char *sp = memchr(s, ' ', n);
		if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
			return -1;
		*a = s;
		*alen = (size_t)(sp - s);
		*b = sp + 1;
		*blen = n - (size_t)(sp + 1 - s);
		return 0;
	}
	if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
	    json_is_string(json_array_get(m, 1))) {
		*a = json_string_value(json_array_get(m, 0));
		*alen = json_string_length(json_array_get(m, 0));
		*b = json_string_value(json_array_get(m, 1));
		*blen = json_string_length(json_array_get(m, 1));
		return 0;
	}
	return -1;
}

static struct tok_bpe *load_model(const json_t *root, const char *path, bool text_mode)
{
	json_t *model = json_object_get(root, "model");
	if (!json_is_object(model)) {
		error("%s: no \"model\" object (is this a Hugging Face tokenizer.json?)", path);
		return NULL;
	}
	const char *type, *cont, *suffix, *unk_tok;
	bool byte_fallback, ignore_merges, fuse_unk;
	if (get_str(model, "type", &type, path, "model") ||
	    get_str(model, "continuing_subword_prefix", &cont, path, "model") ||
	    get_str(model, "end_of_word_suffix", &suffix, path, "model") ||
	    get_str(model, "unk_token", &unk_tok, path, "model") ||
	    get_bool(model, "byte_fallback", false, &byte_fallback, path, "model") ||
	    get_bool(model, "ignore_merges", false, &ignore_merges, path, "model") ||
	    get_bool(model, "fuse_unk", false, &fuse_unk, path, "model"))
		return NULL;
	if (type ? strcmp(type, "BPE") != 0 : !json_object_get(model, "merges")) {
		char *q = type ? tok_bpe_quote(type, strlen(type), 80) : xstrdup("?");
		error("%s: model type %s is not supported (megac implements BPE models)", path, q);
		free(q);
		return NULL;
	}
	json_t *dropout = json_object_get(model, "dropout");
	if (dropout && !json_is_null(dropout) && !json_is_number(dropout)) {
		error("%s: model.dropout must be a number or null", path);
		return NULL;
	}
	if (dropout && json_is_number(dropout) && json_number_value(dropout) != 0) {
		error("%s: model.dropout is set; BPE dropout is random and not supported", path);
		return NULL;
	}
	if ((cont && *cont) || (suffix && *suffix)) {
		error("%s: model.continuing_subword_prefix / end_of_word_suffix are not supported (only empty)", path);
		return NULL;
	}
	if (byte_fallback && !text_mode) {
		error("%s: model.byte_fallback = true with a ByteLevel pre_tokenizer is not supported (megac implements "
		      "byte_fallback for vocabularies of plain strings, as SentencePiece conversions are)",
		      path);
		return NULL;
	}
	json_t *merges = json_object_get(model, "merges");
	if (!json_is_array(merges)) {
		error("%s: model.merges is not an array", path);
		return NULL;
	}
	struct tok_bpe *m = tok_bpe_new();
	if (text_mode)
		tok_bpe_set_text_mode(m);
	char *where = xasprintf("%s: model.vocab", path);
	int r = tok_hf_vocab_from_json(m, json_object_get(model, "vocab"), where);
	free(where);
	if (r)
		goto fail;
	for (size_t i = 0; i < json_array_size(merges); i++) {
		const char *a, *b, *why;
		size_t alen, blen;
		if (merge_parts(json_array_get(merges, i), &a, &alen, &b, &blen)) {
			error("%s: model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]", path, i);
			goto fail;
		}
		if (tok_bpe_add_merge(m, a, alen, b, blen, (uint32_t)i, &why)) {
			char *qa = tok_bpe_quote(a, alen, 80), *qb = tok_bpe_quote(b, blen, 80);
			error("%s: model.merges[%zu] (%s %s): %s", path, i, qa, qb, why);
			free(qa);
			free(qb);
			goto fail;
		}
	}
	int32_t unk = -1;
	if (unk_tok) {
		unk = tok_bpe_token_id(m, unk_tok, strlen(unk_tok));
		if (unk < 0) {
			char *q = tok_bpe_quote(unk_tok, strlen(unk_tok), 80);
			error("%s: model.unk_token %s is not in the vocabulary", path, q);
			free(q);
			goto fail;
		}
	}
	tok_bpe_set_options(m, ignore_merges, unk, fuse_unk);
	if (byte_fallback)
		tok_bpe_set_byte_fallback(m);
	if (text_mode)
		tok_bpe_set_split(m, "\xe2\x96\x81", 3); /* U+2581 */
	return m;
fail:
	tok_bpe_free(m);
	return NULL;
}

/* ---- normalizer, pre-tokenizer, post-processor ------------------------ */

/* An unsupported type, named in the message. */
static int unsupported(const char *path, const char *what, const char *type, const char *implemented)
{
	char *q = tok_bpe_quote(type, strlen(type), 80);
	error("%s: %s type %s is not supported (megac implements %s)", path, what, q, implemented);
	free(q);
	return -1;
}

/*
 * A Sequence of normalizers, pre-tokenizers or post-processors: load each
 * member of node[key] with fn (which recurses for nested Sequences); ctx is
 * passed through.
 */
typedef int (*node_loader)(struct tok_hf *h, const json_t *node, const char *path, const char *field, void *ctx);

static int load_sequence(struct tok_hf *h, const json_t *node, const char *path, const char *field, const char *what,
			 const char *key, node_loader fn, void *ctx)
{
	json_t *list = json_object_get(node, key);
	if (!json_is_array(list))
		return error("%s: %s: %s Sequence without a \"%s\" list", path, field, what, key);
	for (size_t i = 0; i < json_array_size(list); i++) {
		char *sub = xasprintf("%s.%s[%zu]", field, key, i);
		int r = json_is_null(json_array_get(list, i)) ? error("%s: %s must be an object", path, sub)
							       : fn(h, json_array_get(list, i), path, sub, ctx);
		free(sub);
		if (r)
			return -1;
	}
	return 0;
}

static int load_normalizer(struct tok_hf *h, const json_t *node, const char *path, const char *field);
static int load_pretok(struct tok_hf *h, const json_t *node, const char *path, const char *field, bool *bytelevel);
struct tmpl_refs;
static int load_post(struct tok_hf *h, const json_t *node, const char *path, const char *field,
		     struct tmpl_refs *refs);

static int norm_item(struct tok_hf *h, const json_t *node, const char *path, const char *field, void *ctx)
{
	(void)ctx;
	return load_normalizer(h, node, path, field);
}

static int pretok_item(struct tok_hf *h, const json_t *node, const char *path, const char *field, void *ctx)
{
	return load_pretok(h, node, path, field, ctx);
}

static int post_item(struct tok_hf *h, const json_t *node, const char *path, const char *field, void *ctx)
{
	return load_post(h, node, path, field, ctx);
}

/* A Replace's "pattern": {"String": s}, non-empty; Regex patterns are
 * refused by name. *out points into the JSON. */
static int get_string_pattern(const json_t *o, char **out, const char *path, const char *field, const char *what)
{
	json_t *pat = json_object_get(o, "pattern");
	json_t *str = json_object_get(pat, "String");
	if (json_is_object(pat) && json_object_get(pat, "Regex") && !str)
		return error("%s: %s: %s with a Regex pattern is not supported (megac implements string patterns)",
			     path, field, what);
	if (!json_is_object(pat) || !json_is_string(str) || json_object_size(pat) != 1)
		return error("%s: %s.pattern must be {\"String\": string}", path, field);
	if (strlen(json_string_value(str)) != json_string_length(str))
		return error("%s: %s.pattern contains a NUL character", path, field);
	if (!json_string_length(str))
		return error("%s: %s.pattern is empty", path, field);
	*out = (char *)json_string_value(str);
	return 0;
}

static int load_normalizer(struct tok_hf *h, const json_t *node, const char *path, const char *field)
{
	const json_t *n;
	const char *type;
	if (get_obj(node, &n, path, field))
		return -1;
	if (!n)
		return 0;
	if (get_type(n, &type, path, field))
		return -1;
	static const struct {
		const char *name;
		enum tok_hf_norm kind;
	} simple[] = {
		{ "NFC", TOK_HF_NFC }, { "NFD", TOK_HF_NFD },		 { "NFKC", TOK_HF_NFKC },
		{ "NFKD", TOK_HF_NFKD }, { "Lowercase", TOK_HF_LOWERCASE },
	};
	for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++)
		if (!strcmp(type, simple[i].name)) {
			tok_hf_add_norm(h, simple[i].kind);
			return 0;
		}
	if (!strcmp(type, "Sequence"))
		return load_sequence(h, n, path, field, "normalizer", "normalizers", norm_item, NULL);
	struct tok_hf_normop op = { 0 };
	if (!strcmp(type, "Prepend")) {
		const char *pre;
		if (get_str(n, "prepend", &pre, path, field))
			return -1;
		if (!pre)
			return error("%s: %s: Prepend without a \"prepend\" string", path, field);
		op.kind = TOK_HF_PREPEND;
		op.a = (char *)pre;
		op.alen = strlen(pre);
		tok_hf_add_normop(h, &op);
		return 0;
	}
	if (!strcmp(type, "Replace")) {
		const char *content;
		if (get_string_pattern(n, &op.a, path, field, "Replace normalizer") ||
		    get_str(n, "content", &content, path, field))
			return -1;
		if (!content)
			return error("%s: %s: Replace without a \"content\" string", path, field);
		op.kind = TOK_HF_REPLACE;
		op.alen = strlen(op.a);
		op.b = (char *)content;
		op.blen = strlen(content);
		tok_hf_add_normop(h, &op);
		return 0;
	}
	if (!strcmp(type, "Strip")) {
		if (get_bool(n, "strip_left", true, &op.left, path, field) ||
		    get_bool(n, "strip_right", true, &op.right, path, field))
			return -1;
		op.kind = TOK_HF_STRIP;
		tok_hf_add_normop(h, &op);
		return 0;
	}
	return unsupported(path, "normalizer", type,
			   "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace (string patterns), Strip and Sequence");
}

static int behavior_of(const char *s, enum tok_hf_behavior *b)
{
	static const struct {
		const char *name;
		enum tok_hf_behavior b;
	} tab[] = {
		{ "Removed", TOK_HF_REMOVED },
		{ "Isolated", TOK_HF_ISOLATED },
		{ "MergedWithPrevious", TOK_HF_MERGED_WITH_PREVIOUS },
		{ "MergedWithNext", TOK_HF_MERGED_WITH_NEXT },
		{ "Contiguous", TOK_HF_CONTIGUOUS },
	};
	for (size_t i = 0; s && i < sizeof(tab) / sizeof(tab[0]); i++)
		if (!strcmp(s, tab[i].name)) {
			*b = tab[i].b;
			return 0;
		}
	return -1;
}

static int load_split(struct tok_hf *h, const json_t *p, const char *path, const char *field)
{
	json_t *pat = json_object_get(p, "pattern");
	json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
	json_t *which = re ? re : str;
	if (!json_is_object(pat) || !which || (re && str) || !json_is_string(which))
		return error("%s: %s.pattern must be {\"Regex\": string} or {\"String\": string}", path, field);
	if (strlen(json_string_value(which)) != json_string_length(which))
		return error("%s: %s.pattern contains a NUL character", path, field);
	const char *behavior;
	bool invert;
	enum tok_hf_behavior b;
	if (get_str(p, "behavior", &behavior, path, field) || get_bool(p, "invert", false, &invert, path, field))
		return -1;
	if (behavior_of(behavior, &b)) {
		char *q = behavior ? tok_bpe_quote(behavior, strlen(behavior), 80) : xstrdup("(none)");
		error("%s: %s: Split behavior %s is not one of Removed, Isolated, MergedWithPrevious, "
		      "MergedWithNext, Contiguous",
		      path, field, q);
		free(q);
		return -1;
	}
	char *where = xasprintf("%s: %s (Split)", path, field);
	int r = tok_hf_add_split(h, json_string_value(which), re != NULL, b, invert, where);
	free(where);
	return r;
}

static int load_pretok(struct tok_hf *h, const json_t *node, const char *path, const char *field, bool *bytelevel)
{
	const json_t *p;
	const char *type;
	if (get_obj(node, &p, path, field))
		return -1;
	if (!p)
		return 0;
	if (get_type(p, &type, path, field))
		return -1;
	if (!strcmp(type, "Sequence"))
		return load_sequence(h, p, path, field, "pre_tokenizer", "pretokenizers", pretok_item, bytelevel);
	if (*bytelevel) { /* later steps would see the byte-mapped text */
		char *q = tok_bpe_quote(type, strlen(type), 80);
		error("%s: pre_tokenizer %s after ByteLevel is not supported (ByteLevel must come last)", path, q);
		free(q);
		return -1;
	}
	if (!strcmp(type, "ByteLevel")) {
		bool prefix, use_regex, trim;
		if (get_bool(p, "add_prefix_space", true, &prefix, path, field) ||
		    get_bool(p, "use_regex", true, &use_regex, path, field) ||
		    get_bool(p, "trim_offsets", true, &trim, path, field))
			return -1;
		*bytelevel = true;
		if (prefix)
			tok_hf_add_stage(h, TOK_HF_STAGE_PREFIX, TOK_HF_ISOLATED);
		if (use_regex)
			tok_hf_add_stage(h, TOK_HF_STAGE_GPT2, TOK_HF_ISOLATED);
		return 0;
	}
	if (!strcmp(type, "Split"))
		return load_split(h, p, path, field);
	if (!strcmp(type, "Metaspace")) {
		const char *rep, *scheme;
		bool split, prefix;
		json_t *ap = json_object_get(p, "add_prefix_space");
		if (get_str(p, "replacement", &rep, path, field) || get_str(p, "prepend_scheme", &scheme, path, field) ||
		    get_bool(p, "split", true, &split, path, field) ||
		    get_bool(p, "add_prefix_space", true, &prefix, path, field))
			return -1;
		if (!rep)
			rep = "\xe2\x96\x81"; /* U+2581 */
		size_t l;
		if (!*rep || strlen(rep) > 4 || (tok_bpe_utf8_next(rep, strlen(rep), &l), l != strlen(rep)))
			return error("%s: %s.replacement must be one character", path, field);
		enum tok_hf_prepend pre = TOK_HF_PREPEND_ALWAYS;
		if (scheme) {
			if (!strcmp(scheme, "first"))
				pre = TOK_HF_PREPEND_FIRST;
			else if (!strcmp(scheme, "never"))
				pre = TOK_HF_PREPEND_NEVER;
			else if (strcmp(scheme, "always")) {
				char *q = tok_bpe_quote(scheme, strlen(scheme), 80);
				error("%s: %s.prepend_scheme %s is not one of first, always, never", path, field, q);
				free(q);
				return -1;
			}
		} else if (ap && !prefix) {
			pre = TOK_HF_PREPEND_NEVER;
		}
		tok_hf_add_stage(h, TOK_HF_STAGE_METASPACE, TOK_HF_MERGED_WITH_NEXT);
		struct tok_hf_stage *st = &h->stages[h->n_stages - 1];
		memcpy(st->rep, rep, strlen(rep));
		st->replen = strlen(rep);
		st->prepend = pre;
		st->split = split;
		return 0;
	}
	if (!strcmp(type, "Digits")) {
		bool ind;
		if (get_bool(p, "individual_digits", false, &ind, path, field))
			return -1;
		tok_hf_add_stage(h, TOK_HF_STAGE_DIGITS, ind ? TOK_HF_ISOLATED : TOK_HF_CONTIGUOUS);
		return 0;
	}
	return unsupported(path, "pre_tokenizer", type, "ByteLevel, Split, Digits, Metaspace and Sequence");
}

/* Whether the pre-tokenizer has a ByteLevel step: then the vocabulary is
 * written in the byte alphabet; otherwise it is plain text (text mode). */
static bool has_bytelevel(const json_t *p)
{
	const char *type = json_is_object(p) ? jsonio_get_str(p, "type") : NULL;
	if (!type)
		return false;
	if (!strcmp(type, "ByteLevel"))
		return true;
	if (!strcmp(type, "Sequence")) {
		json_t *l = json_object_get(p, "pretokenizers");
		for (size_t i = 0; json_is_array(l) && i < json_array_size(l); i++)
			if (has_bytelevel(json_array_get(l, i)))
				return true;
	}
	return false;
}

/* One character (UTF-8) member, for Strip and Metaspace decoders. */
static int get_char(const json_t *o, const char *key, const char *dflt, const char **out, const char *path,
		    const char *field)
{
	if (get_str(o, key, out, path, field))
		return -1;
	if (!*out)
		*out = dflt;
	size_t n = strlen(*out), l;
	if (!n || n > 4 || (tok_bpe_utf8_next(*out, n, &l), l != n))
		return error("%s: %s.%s must be one character", path, field, key);
	return 0;
}

static int get_count(const json_t *o, const char *key, int64_t *out, const char *path, const char *field)
{
	json_t *v = json_object_get(o, key);
	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return error("%s: %s.%s must be a non-negative integer", path, field, key);
	*out = json_integer_value(v);
	return 0;
}

static int load_decoder(struct tok_hf *h, const json_t *node, const char *path, const char *field);

static int dec_item(struct tok_hf *h, const json_t *node, const char *path, const char *field, void *ctx)
{
	(void)ctx;
	return load_decoder(h, node, path, field);
}

/* The decoder of a text-mode vocabulary (byte-level ones decode bytes). */
static int load_decoder(struct tok_hf *h, const json_t *node, const char *path, const char *field)
{
	const json_t *d;
	const char *type;
	if (get_obj(node, &d, path, field))
		return -1;
	if (!d)
		return 0;
	if (get_type(d, &type, path, field))
		return -1;
	h->has_decoder = true;
	struct tok_hf_dec dec = { 0 };
	if (!strcmp(type, "Sequence"))
		return load_sequence(h, d, path, field, "decoder", "decoders", dec_item, NULL);
	if (!strcmp(type, "ByteFallback")) {
		dec.kind = TOK_HF_DEC_BYTE_FALLBACK;
	} else if (!strcmp(type, "Fuse")) {
		dec.kind = TOK_HF_DEC_FUSE;
	} else if (!strcmp(type, "Replace")) {
		const char *content;
		if (get_string_pattern(d, &dec.a, path, field, "Replace decoder") ||
		    get_str(d, "content", &content, path, field))
			return -1;
		if (!content)
			return error("%s: %s: Replace without a \"content\" string", path, field);
		dec.kind = TOK_HF_DEC_REPLACE;
		dec.alen = strlen(dec.a);
		dec.b = (char *)content;
		dec.blen = strlen(content);
	} else if (!strcmp(type, "Strip")) {
		const char *c;
		if (get_char(d, "content", " ", &c, path, field) || get_count(d, "start", &dec.start, path, field) ||
		    get_count(d, "stop", &dec.stop, path, field))
			return -1;
		dec.kind = TOK_HF_DEC_STRIP;
		dec.a = (char *)c;
		dec.alen = strlen(c);
	} else if (!strcmp(type, "Metaspace")) {
		const char *rep, *scheme;
		bool prefix;
		if (get_char(d, "replacement", "\xe2\x96\x81", &rep, path, field) ||
		    get_str(d, "prepend_scheme", &scheme, path, field) ||
		    get_bool(d, "add_prefix_space", true, &prefix, path, field))
			return -1;
		if (scheme && strcmp(scheme, "first") && strcmp(scheme, "always") && strcmp(scheme, "never")) {
			char *q = tok_bpe_quote(scheme, strlen(scheme), 80);
			error("%s: %s.prepend_scheme %s is not one of first, always, never", path, field, q);
			free(q);
			return -1;
		}
		dec.kind = TOK_HF_DEC_METASPACE;
		dec.a = (char *)rep;
		dec.alen = strlen(rep);
		dec.never = scheme ? !strcmp(scheme, "never") : !prefix;
	} else {
		return unsupported(path, "decoder", type,
				   "for vocabularies of plain strings ByteFallback, Fuse, Replace (string patterns), "
				   "Strip, Metaspace and Sequence");
	}
	tok_hf_add_dec(h, &dec);
	return 0;
}

/* The special tokens a template uses, checked against the vocabulary once
 * it is complete (added tokens and configs come later). */
struct tmpl_refs {
	int32_t *id;
	char **name;
	size_t n, cap_id, cap_name;
};

static void tmpl_refs_push(struct tmpl_refs *r, int32_t id, const char *name)
{
	xgrow(&r->id, &r->cap_id, r->n + 1, sizeof(*r->id));
	xgrow(&r->name, &r->cap_name, r->n + 1, sizeof(*r->name));
	r->id[r->n] = id;
	r->name[r->n++] = xstrdup(name);
}

static void tmpl_refs_free(struct tmpl_refs *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->name[i]);
	free(r->id);
	free(r->name);
}

static int check_template_ids(const struct tok_hf *h, const struct tmpl_refs *r, const char *path)
{
	for (size_t i = 0; i < r->n; i++) {
		int32_t id = r->id[i];
		const char *why = id >= h->vocab_size ? "which is past the vocabulary"
			: !tok_hf_id_known(h, id)    ? "which is not in the vocabulary"
						     : NULL;
		if (!why)
			continue;
		char *q = tok_bpe_quote(r->name[i], strlen(r->name[i]), 80);
		error("%s: post_processor TemplateProcessing: special token %s has id %d, %s (%" PRId64
		      " tokens)",
		      path, q, (int)id, why, h->vocab_size);
		free(q);
		return -1;
	}
	return 0;
}

/* One template piece: {"SpecialToken": {"id": ...}}, {"Sequence": {"id":
 * "A"}}, or the string forms "$A", "$A:0", "<s>", "<s>:1". Appends its ids
 * (-1 for the sequence) to out. */
static int template_piece(const json_t *piece, const json_t *specials, const char *path, struct tok_ids *out,
			  struct tmpl_refs *refs)
{
	const char *name = NULL;
	bool seq = false;
	char *owned = NULL;
	if (json_is_string(piece)) {
		owned = xstrdup(json_string_value(piece));
		char *colon = strrchr(owned, ':');
		if (colon && colon != owned)
			*colon = 0;
		if (owned[0] == '$') {
			seq = true;
			name = owned[1] ? owned + 1 : "A";
		} else {
			name = owned;
		}
	} else if (json_is_object(json_object_get(piece, "Sequence"))) {
		seq = true;
		name = jsonio_get_str(json_object_get(piece, "Sequence"), "id");
	} else if (json_is_object(json_object_get(piece, "SpecialToken"))) {
		name = jsonio_get_str(json_object_get(piece, "SpecialToken"), "id");
	}
	int ret = 0;
	if (!name) {
		ret = error("%s: post_processor TemplateProcessing: a template piece is neither a SpecialToken nor "
			    "a Sequence",
			    path);
	} else if (seq) {
		if (strcmp(name, "A")) {
			char *q = tok_bpe_quote(name, strlen(name), 80);
			ret = error("%s: post_processor TemplateProcessing: the single template uses sequence %s",
				    path, q);
			free(q);
		} else {
			tok_ids_push(out, -1);
		}
	} else {
		json_t *ids = json_object_get(json_object_get(specials, name), "ids");
		char *q = tok_bpe_quote(name, strlen(name), 80);
		if (!json_is_array(ids))
			ret = error("%s: post_processor TemplateProcessing: special token %s has no \"ids\" in "
				    "special_tokens",
				    path, q);
		for (size_t i = 0; !ret && i < json_array_size(ids); i++) {
			json_t *v = json_array_get(ids, i);
			if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX) {
				ret = error("%s: post_processor TemplateProcessing: bad id for %s", path, q);
			} else {
				tok_ids_push(out, (int32_t)json_integer_value(v));
				tmpl_refs_push(refs, (int32_t)json_integer_value(v), name);
			}
		}
		free(q);
	}
	free(owned);
	return ret;
}

static int load_post(struct tok_hf *h, const json_t *node, const char *path, const char *field,
		     struct tmpl_refs *refs)
{
	const json_t *p;
	const char *type;
	if (get_obj(node, &p, path, field))
		return -1;
	if (!p)
		return 0;
	if (get_type(p, &type, path, field))
		return -1;
	if (!strcmp(type, "ByteLevel")) { /* only trims offsets */
		bool b;
		return get_bool(p, "add_prefix_space", true, &b, path, field) ||
				       get_bool(p, "trim_offsets", true, &b, path, field) ||
				       get_bool(p, "use_regex", true, &b, path, field)
			       ? -1
			       : 0;
	}
	if (!strcmp(type, "Sequence"))
		return load_sequence(h, p, path, field, "post_processor", "processors", post_item, refs);
	if (strcmp(type, "TemplateProcessing"))
		return unsupported(path, "post_processor", type, "ByteLevel, TemplateProcessing and Sequence");
	json_t *specials = json_object_get(p, "special_tokens");
	if (specials && !json_is_null(specials) && !json_is_object(specials))
		return error("%s: %s.special_tokens must be an object", path, field);
	json_t *single = json_object_get(p, "single");
	if (json_is_string(single)) { /* "$A" or "<s> $A </s>" */
		json_t *arr = json_array();
		char *s = xstrdup(json_string_value(single)), *save = NULL;
		for (char *w = strtok_r(s, " ", &save); w; w = strtok_r(NULL, " ", &save))
			json_array_append_new(arr, json_string(w));
		free(s);
		single = arr;
	} else {
		json_incref(single);
	}
	if (!json_is_array(single)) {
		json_decref(single);
		return error("%s: post_processor TemplateProcessing without a \"single\" template", path);
	}
	struct tok_ids t = { 0 };
	int ret = 0;
	for (size_t i = 0; !ret && i < json_array_size(single); i++)
		ret = template_piece(json_array_get(single, i), specials, path, &t, refs);
	json_decref(single);
	if (!ret) {
		/* applied after an earlier template: its output is our $A */
		struct tok_ids prev = { 0 };
		if (h->has_tmpl)
			for (size_t i = 0; i < h->n_tmpl; i++)
				tok_ids_push(&prev, h->tmpl[i]);
		else
			tok_ids_push(&prev, -1);
		free(h->tmpl);
		h->tmpl = NULL;
		h->n_tmpl = 0;
		for (size_t i = 0; i < t.n; i++) {
			if (t.v[i] >= 0)
				tok_hf_add_template_id(h, t.v[i]);
			else
				for (size_t j = 0; j < prev.n; j++)
					tok_hf_add_template_id(h, prev.v[j]);
		}
		h->has_tmpl = true;
		tok_ids_free(&prev);
	}
	tok_ids_free(&t);
	return ret;
}

static int load_added(struct tok_hf *h, const json_t *list, const char *path)
{
	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return error("%s: added_tokens is not an array", path);
	for (size_t i = 0; i < json_array_size(list); i++) {
		json_t *t = json_array_get(list, i);
		char field[48];
		snprintf(field, sizeof(field), "added_tokens[%zu]", i);
		if (!json_is_object(t))
			return error("%s: %s must be an object", path, field);
		json_t *c = json_object_get(t, "content");
		if (!json_is_string(c))
			return error("%s: %s.content must be a string", path, field);
		json_t *jid = json_object_get(t, "id");
		if (!json_is_integer(jid) || json_integer_value(jid) < 0)
			return error("%s: %s.id must be a non-negative integer", path, field);
		bool special, normalized, lstrip, rstrip, single_word;
		if (get_bool(t, "special", false, &special, path, field) ||
		    get_bool(t, "normalized", !special, &normalized, path, field) ||
		    get_bool(t, "lstrip", false, &lstrip, path, field) || get_bool(t, "rstrip", false, &rstrip, path, field) ||
		    get_bool(t, "single_word", false, &single_word, path, field))
			return -1;
		int32_t id = tok_hf_add_token(h, json_string_value(c), json_string_length(c), special, normalized, lstrip,
					      rstrip, single_word);
		if (id >= 0 && json_integer_value(jid) != id) {
			char *q = tok_bpe_quote(json_string_value(c), json_string_length(c), 80);
			warning("%s: added token %s was expected to have id %lld but gets %d (as in Hugging Face)", path,
				q, (long long)json_integer_value(jid), (int)id);
			free(q);
		}
	}
	return 0;
}

/* ---- special tokens from tokenizer_config.json ------------------------ */

struct cfg_files {
	json_t *config; /* tokenizer_config.json, or NULL */
	json_t *map;    /* special_tokens_map.json, or NULL */
};

static const char *const cfg_keys[] = { "bos_token", "eos_token", "unk_token",	"sep_token",
					"pad_token", "cls_token", "mask_token", "additional_special_tokens" };

/* A special token in the configs: a string or {"content": ...}, with the
 * AddedToken flags; field names it in messages. */
static int check_cfg_token(const json_t *v, const char *path, const char *field)
{
	const json_t *c = json_is_object(v) ? json_object_get(v, "content") : v;
	if (!json_is_string(c))
		return error("%s: %s must be a string or an object with \"content\"", path, field);
	if (strlen(json_string_value(c)) != json_string_length(c))
		return error("%s: %s contains a NUL character", path, field);
	static const char *const flags[] = { "normalized", "lstrip", "rstrip", "single_word", "special" };
	bool b;
	for (size_t i = 0; json_is_object(v) && i < sizeof(flags) / sizeof(flags[0]); i++)
		if (get_bool(v, flags[i], false, &b, path, field))
			return -1;
	return 0;
}

/* The members megac reads, type-checked. */
static int check_cfg(const json_t *j, const char *path)
{
	if (!json_is_object(j))
		return error("%s: not a JSON object", path);
	for (size_t k = 0; k < sizeof(cfg_keys) / sizeof(cfg_keys[0]); k++) {
		const json_t *v = json_object_get(j, cfg_keys[k]);
		if (!v || json_is_null(v))
			continue;
		if (strcmp(cfg_keys[k], "additional_special_tokens")) {
			if (check_cfg_token(v, path, cfg_keys[k]))
				return -1;
			continue;
		}
		if (!json_is_array(v))
			return error("%s: %s must be an array", path, cfg_keys[k]);
		for (size_t i = 0; i < json_array_size(v); i++) {
			char field[64];
			snprintf(field, sizeof(field), "%s[%zu]", cfg_keys[k], i);
			if (check_cfg_token(json_array_get(v, i), path, field))
				return -1;
		}
	}
	return 0;
}

static int load_optional_json(const char *dir, const char *name, json_t **out)
{
	char *p = xasprintf("%s/%s", dir, name);
	struct stat st;
	*out = NULL;
	int r = 0;
	if (stat(p, &st) == 0) {
		/* only strings and flags are read; integers such as Llama-3's
		 * model_max_length (about 1e30) must not fail the parse */
		*out = jsonio_load_file_flags(p, JSON_DECODE_INT_AS_REAL);
		if (!*out || check_cfg(*out, p))
			r = -1;
	}
	free(p);
	return r;
}

/* A checked special token: a string or {"content": ...}. */
static const char *cfg_token(const json_t *v)
{
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_object(v))
		return jsonio_get_str(v, "content");
	return NULL;
}

static bool cfg_flag(const json_t *v, const char *key)
{
	return json_is_true(json_object_get(v, key));
}

static const json_t *cfg_get(const struct cfg_files *c, const char *key)
{
	json_t *v = c->config ? json_object_get(c->config, key) : NULL;
	if ((!v || json_is_null(v)) && c->map)
		v = json_object_get(c->map, key);
	return v && !json_is_null(v) ? v : NULL;
}

/* transformers adds the special tokens named in the configs when the
 * tokenizer does not know them yet. */
static void add_config_specials(struct tok_hf *h, const struct cfg_files *c)
{
	for (size_t k = 0; k < sizeof(cfg_keys) / sizeof(cfg_keys[0]); k++) {
		const json_t *v = cfg_get(c, cfg_keys[k]);
		size_t n = json_is_array(v) ? json_array_size(v) : 1;
		for (size_t i = 0; v && i < n; i++) {
			const json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
			const char *s = cfg_token(e);
			if (!s || !*s || tok_hf_token_id(h, s, strlen(s)) >= 0)
				continue;
			tok_hf_add_token(h, s, strlen(s), true, cfg_flag(e, "normalized"), cfg_flag(e, "lstrip"),
					 cfg_flag(e, "rstrip"), cfg_flag(e, "single_word"));
		}
	}
}

static int64_t find_eod(const struct tok_hf *h, const struct cfg_files *c, const char *path)
{
	const char *eos = cfg_token(cfg_get(c, "eos_token"));
	if (!eos)
		eos = cfg_token(cfg_get(c, "sep_token"));
	if (eos)
		return tok_hf_token_id(h, eos, strlen(eos));
	const struct tok_hf_added *a = tok_hf_find_added(h, "<|endoftext|>", 13);
	if (a && a->special) {
		info("%s: no eos_token in tokenizer_config.json or special_tokens_map.json; using the special "
		     "token <|endoftext|> (id %d) as end of document",
		     path, (int)a->id);
		return a->id;
	}
	return -1;
}

/* ---- entry ------------------------------------------------------------ */

struct tok_hf *tok_hf_load(const char *model, char *const *special, int n_special, int64_t *eod, int64_t *pad,
			   char **path_out)
{
	if (!model || !*model) {
		error("HuggingFaceTokenizer needs --tokenizer-model (a tokenizer.json or the folder holding it)");
		return NULL;
	}
	struct stat st;
	if (stat(model, &st)) {
		error_errno("--tokenizer-model '%s' (megac reads local tokenizer folders; it does not download "
			    "from the Hugging Face hub)",
			    model);
		return NULL;
	}
	char *path, *dir;
	if (S_ISDIR(st.st_mode)) {
		path = xasprintf("%s/tokenizer.json", model);
		dir = xstrdup(model);
	} else {
		path = xstrdup(model);
		const char *slash = strrchr(model, '/');
		dir = slash ? xstrndup(model, (size_t)(slash - model + (slash == model))) : xstrdup(".");
	}
	struct tok_hf *h = NULL;
	struct cfg_files cfg = { NULL, NULL };
	struct tmpl_refs refs = { 0 };
	json_t *root = jsonio_load_file(path);
	if (!root)
		goto fail;
	if (!json_is_object(root)) {
		error("%s: not a JSON object", path);
		goto fail;
	}
	bool text_mode = !has_bytelevel(json_object_get(root, "pre_tokenizer"));
	struct tok_bpe *m = load_model(root, path, text_mode);
	if (!m)
		goto fail;
	h = tok_hf_new(m);
	bool bytelevel = false;
	if (load_normalizer(h, json_object_get(root, "normalizer"), path, "normalizer") ||
	    load_pretok(h, json_object_get(root, "pre_tokenizer"), path, "pre_tokenizer", &bytelevel) ||
	    load_post(h, json_object_get(root, "post_processor"), path, "post_processor", &refs) ||
	    load_added(h, json_object_get(root, "added_tokens"), path) ||
	    (text_mode && load_decoder(h, json_object_get(root, "decoder"), path, "decoder")))
		goto fail;
	if (load_optional_json(dir, "tokenizer_config.json", &cfg.config) ||
	    load_optional_json(dir, "special_tokens_map.json", &cfg.map))
		goto fail;
	add_config_specials(h, &cfg);
	for (int i = 0; i < n_special; i++)
		tok_hf_add_token(h, special[i], strlen(special[i]), true, false, false, false, false);
	*eod = find_eod(h, &cfg, path);
	/* Megatron's HF wrapper: pad_id is the id of pad_token, None without one. */
	const char *pad_tok = cfg_token(cfg_get(&cfg, "pad_token"));
	*pad = pad_tok ? tok_hf_token_id(h, pad_tok, strlen(pad_tok)) : -1;
	if (tok_hf_finish(h) || check_template_ids(h, &refs, path))
		goto fail;
	tmpl_refs_free(&refs);
	json_decref(root);
	json_decref(cfg.config);
	json_decref(cfg.map);
	free(dir);
	*path_out = path;
	return h;
fail:
	tmpl_refs_free(&refs);
	tok_hf_free(h);
	json_decref(root);
	json_decref(cfg.config);
	json_decref(cfg.map);
	free(dir);
	free(path);
	return NULL;
}
