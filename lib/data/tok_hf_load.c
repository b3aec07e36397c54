/*
 * tok_hf_load.c - HuggingFaceTokenizer: read a tokenizer.json into the
 * pipeline of tok_hf.h, and find the end-of-document token the way
 * Megatron's HF wrapper does (eos_token, else sep_token). Anything the
 * pipeline does not implement is refused by name here, at load time, so a
 * run never produces ids that differ from Hugging Face's silently.
 */
#include "base/error.h"
#include "base/jsonio.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "tok.h"
#include "tok_bpe.h"
#include "tok_hf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool get_bool(const json_t *o, const char *key, bool dflt)
{
	json_t *v = json_object_get(o, key);
	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* null, absent or "" */
static bool empty_str(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return !v || json_is_null(v) || (json_is_string(v) && !json_string_length(v));
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

static struct tok_bpe *load_model(const json_t *root, const char *path)
{
	json_t *model = json_object_get(root, "model");
	if (!json_is_object(model)) {
		error("%s: no \"model\" object (is this a Hugging Face tokenizer.json?)", path);
		return NULL;
	}
	const char *type = jsonio_get_str(model, "type");
	if (type ? strcmp(type, "BPE") != 0 : !json_object_get(model, "merges")) {
		error("%s: model type '%s' is not supported (megac implements BPE models)", path, type ? type : "?");
		return NULL;
	}
	json_t *dropout = json_object_get(model, "dropout");
	if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0)) {
		error("%s: model.dropout is set; BPE dropout is random and not supported", path);
		return NULL;
	}
	if (!empty_str(model, "continuing_subword_prefix") || !empty_str(model, "end_of_word_suffix")) {
		error("%s: model.continuing_subword_prefix / end_of_word_suffix are not supported (only empty)", path);
		return NULL;
	}
	if (get_bool(model, "byte_fallback", false)) {
		error("%s: model.byte_fallback = true is not supported", path);
		return NULL;
	}
	json_t *merges = json_object_get(model, "merges");
	if (!json_is_array(merges)) {
		error("%s: model.merges is not an array", path);
		return NULL;
	}
	struct tok_bpe *m = tok_bpe_new();
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
			error("%s: model.merges[%zu] ('%.*s' '%.*s'): %s", path, i, (int)alen, a, (int)blen, b, why);
			goto fail;
		}
	}
	int32_t unk = -1;
	const char *unk_tok = jsonio_get_str(model, "unk_token");
	if (unk_tok) {
		unk = tok_bpe_token_id(m, unk_tok, strlen(unk_tok));
		if (unk < 0) {
			error("%s: model.unk_token '%s' is not in the vocabulary", path, unk_tok);
			goto fail;
		}
	}
	tok_bpe_set_options(m, get_bool(model, "ignore_merges", false), unk, get_bool(model, "fuse_unk", false));
	return m;
fail:
	tok_bpe_free(m);
	return NULL;
}

/* ---- normalizer, pre-tokenizer, post-processor ------------------------ */

static int load_normalizer(struct tok_hf *h, const json_t *n, const char *path)
{
	if (!n || json_is_null(n))
		return 0;
	const char *type = jsonio_get_str(n, "type");
	if (!type)
		return error("%s: normalizer without a \"type\"", path);
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
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(n, "normalizers");
		if (!json_is_array(list))
			return error("%s: normalizer Sequence without a \"normalizers\" list", path);
		for (size_t i = 0; i < json_array_size(list); i++)
			if (load_normalizer(h, json_array_get(list, i), path))
				return -1;
		return 0;
	}
	return error("%s: normalizer type '%s' is not supported (megac implements NFC, NFD, NFKC, NFKD, "
		     "Lowercase and Sequence)",
		     path, type);
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

static int load_pretok(struct tok_hf *h, const json_t *p, const char *path, bool *bytelevel)
{
	if (!p || json_is_null(p))
		return 0;
	const char *type = jsonio_get_str(p, "type");
	if (!type)
		return error("%s: pre_tokenizer without a \"type\"", path);
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(p, "pretokenizers");
		if (!json_is_array(list))
			return error("%s: pre_tokenizer Sequence without a \"pretokenizers\" list", path);
		for (size_t i = 0; i < json_array_size(list); i++)
			if (load_pretok(h, json_array_get(list, i), path, bytelevel))
				return -1;
		return 0;
	}
	if (*bytelevel) /* later steps would see the byte-mapped text */
		return error("%s: pre_tokenizer '%s' after ByteLevel is not supported (ByteLevel must come last)",
			     path, type);
	if (!strcmp(type, "ByteLevel")) {
		*bytelevel = true;
		if (get_bool(p, "add_prefix_space", true))
			tok_hf_add_stage(h, TOK_HF_STAGE_PREFIX, TOK_HF_ISOLATED);
		if (get_bool(p, "use_regex", true))
			tok_hf_add_stage(h, TOK_HF_STAGE_GPT2, TOK_HF_ISOLATED);
		return 0;
	}
	if (!strcmp(type, "Split")) {
		json_t *pat = json_object_get(p, "pattern");
		const char *re = jsonio_get_str(pat, "Regex"), *str = jsonio_get_str(pat, "String");
		enum tok_hf_behavior b;
		if (!re && !str)
			return error("%s: pre_tokenizer Split: pattern is not {\"Regex\": ...} or {\"String\": ...}",
				     path);
		if (behavior_of(jsonio_get_str(p, "behavior"), &b))
			return error("%s: pre_tokenizer Split: behavior '%s' is not one of Removed, Isolated, "
				     "MergedWithPrevious, MergedWithNext, Contiguous",
				     path, jsonio_get_str(p, "behavior") ? jsonio_get_str(p, "behavior") : "(none)");
		char *where = xasprintf("%s: pre_tokenizer Split", path);
		int r = tok_hf_add_split(h, re ? re : str, re != NULL, b, get_bool(p, "invert", false), where);
		free(where);
		return r;
	}
	if (!strcmp(type, "Digits")) {
		bool ind = get_bool(p, "individual_digits", false);
		tok_hf_add_stage(h, TOK_HF_STAGE_DIGITS, ind ? TOK_HF_ISOLATED : TOK_HF_CONTIGUOUS);
		return 0;
	}
	return error("%s: pre_tokenizer type '%s' is not supported (megac implements ByteLevel, Split, Digits "
		     "and Sequence)",
		     path, type);
}

/* One template piece: {"SpecialToken": {"id": ...}}, {"Sequence": {"id":
 * "A"}}, or the string forms "$A", "$A:0", "<s>", "<s>:1". Appends its ids
 * (-1 for the sequence) to out. */
static int template_piece(const json_t *piece, const json_t *specials, const char *path, struct tok_ids *out)
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
		if (strcmp(name, "A"))
			ret = error("%s: post_processor TemplateProcessing: the single template uses sequence '%s'",
				    path, name);
		else
			tok_ids_push(out, -1);
	} else {
		json_t *ids = json_object_get(json_object_get(specials, name), "ids");
		if (!json_is_array(ids))
			ret = error("%s: post_processor TemplateProcessing: special token '%s' has no \"ids\" in "
				    "special_tokens",
				    path, name);
		for (size_t i = 0; !ret && i < json_array_size(ids); i++) {
			json_t *v = json_array_get(ids, i);
			if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX)
				ret = error("%s: post_processor TemplateProcessing: bad id for '%s'", path, name);
			else
				tok_ids_push(out, (int32_t)json_integer_value(v));
		}
	}
	free(owned);
	return ret;
}

static int load_post(struct tok_hf *h, const json_t *p, const char *path)
{
	if (!p || json_is_null(p))
		return 0;
	const char *type = jsonio_get_str(p, "type");
	if (!type)
		return error("%s: post_processor without a \"type\"", path);
	if (!strcmp(type, "ByteLevel")) /* only trims offsets */
		return 0;
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(p, "processors");
		if (!json_is_array(list))
			return error("%s: post_processor Sequence without a \"processors\" list", path);
		for (size_t i = 0; i < json_array_size(list); i++)
			if (load_post(h, json_array_get(list, i), path))
				return -1;
		return 0;
	}
	if (strcmp(type, "TemplateProcessing"))
		return error("%s: post_processor type '%s' is not supported (megac implements ByteLevel, "
			     "TemplateProcessing and Sequence)",
			     path, type);
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
		ret = template_piece(json_array_get(single, i), json_object_get(p, "special_tokens"), path, &t);
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
		json_t *c = json_object_get(t, "content");
		if (!json_is_string(c))
			return error("%s: added_tokens[%zu] has no \"content\" string", path, i);
		bool special = get_bool(t, "special", false);
		int32_t id = tok_hf_add_token(h, json_string_value(c), json_string_length(c), special,
					      get_bool(t, "normalized", !special), get_bool(t, "lstrip", false),
					      get_bool(t, "rstrip", false), get_bool(t, "single_word", false));
		json_t *jid = json_object_get(t, "id");
		if (id >= 0 && json_is_integer(jid) && json_integer_value(jid) != id)
			warning("%s: added token '%s' was expected to have id %lld but gets %d (as in Hugging Face)",
				path, json_string_value(c), (long long)json_integer_value(jid), (int)id);
	}
	return 0;
}

/* ---- special tokens from tokenizer_config.json ------------------------ */

struct cfg_files {
	json_t *config; /* tokenizer_config.json, or NULL */
	json_t *map;    /* special_tokens_map.json, or NULL */
};

static int load_optional_json(const char *dir, const char *name, json_t **out)
{
	char *p = xasprintf("%s/%s", dir, name);
	struct stat st;
	*out = NULL;
	int r = 0;
	if (stat(p, &st) == 0) {
		*out = jsonio_load_file(p);
		if (!*out)
			r = -1;
	}
	free(p);
	return r;
}

/* A special token in the configs: a string or {"content": ...}. */
static const char *cfg_token(const json_t *v)
{
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_object(v))
		return jsonio_get_str(v, "content");
	return NULL;
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
	static const char *const keys[] = { "bos_token", "eos_token", "unk_token",  "sep_token",
					    "pad_token", "cls_token", "mask_token", "additional_special_tokens" };
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		const json_t *v = cfg_get(c, keys[k]);
		size_t n = json_is_array(v) ? json_array_size(v) : 1;
		for (size_t i = 0; v && i < n; i++) {
			const json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
			const char *s = cfg_token(e);
			if (!s || !*s || tok_hf_token_id(h, s, strlen(s)) >= 0)
				continue;
			tok_hf_add_token(h, s, strlen(s), true, get_bool(e, "normalized", false),
					 get_bool(e, "lstrip", false), get_bool(e, "rstrip", false),
					 get_bool(e, "single_word", false));
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

struct tok_hf *tok_hf_load(const char *model, char *const *special, int n_special, int64_t *eod, char **path_out)
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
	json_t *root = jsonio_load_file(path);
	if (!root)
		goto fail;
	if (!json_is_object(root)) {
		error("%s: not a JSON object", path);
		goto fail;
	}
	struct tok_bpe *m = load_model(root, path);
	if (!m)
		goto fail;
	h = tok_hf_new(m);
	bool bytelevel = false;
	if (load_normalizer(h, json_object_get(root, "normalizer"), path) ||
	    load_pretok(h, json_object_get(root, "pre_tokenizer"), path, &bytelevel) ||
	    load_post(h, json_object_get(root, "post_processor"), path) ||
	    load_added(h, json_object_get(root, "added_tokens"), path))
		goto fail;
	if (!bytelevel) {
		error("%s: the pre_tokenizer has no ByteLevel step; megac implements byte-level BPE tokenizers only",
		      path);
		goto fail;
	}
	if (load_optional_json(dir, "tokenizer_config.json", &cfg.config) ||
	    load_optional_json(dir, "special_tokens_map.json", &cfg.map))
		goto fail;
	add_config_specials(h, &cfg);
	for (int i = 0; i < n_special; i++)
		tok_hf_add_token(h, special[i], strlen(special[i]), true, false, false, false, false);
	*eod = find_eod(h, &cfg, path);
	if (tok_hf_finish(h))
		goto fail;
	json_decref(root);
	json_decref(cfg.config);
	json_decref(cfg.map);
	free(dir);
	*path_out = path;
	return h;
fail:
	tok_hf_free(h);
	json_decref(root);
	json_decref(cfg.config);
	json_decref(cfg.map);
	free(dir);
	free(path);
	return NULL;
}
