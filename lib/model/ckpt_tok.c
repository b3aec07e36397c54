/*
 * ckpt_tok.c - see ckpt_tok.h. The record is one JSON root attribute of
 * model.h5 ("tokenizer") plus one string attribute per file
 * ("tokenizer_file.vocab.json"), each file's crc32 in the JSON; a binary
 * file (a SentencePiece tokenizer.model) is stored base64-encoded, the JSON
 * saying so ("encoding": "base64").
 */
#include "model/ckpt_tok.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "base/xalloc.h"
#include "ckpt/h5io.h"

#define FILE_ATTR "tokenizer_file."
#define MAX_FILE_BYTES ((size_t)64 << 20)

static uint32_t crc_of(const void *data, size_t len)
{
	struct h5io_crc32 c;
	h5io_crc32_init(&c);
	return h5io_crc32(&c, 0, data, len);
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *d, size_t n)
{
	char *o = xmalloc((n + 2) / 3 * 4 + 1), *q = o;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
		*q++ = b64chars[v >> 18 & 63];
		*q++ = b64chars[v >> 12 & 63];
		*q++ = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
		*q++ = i + 2 < n ? b64chars[v & 63] : '=';
	}
	*q = 0;
	return o;
}

/* The bytes of base64 text s (NUL-terminated in *out), -1 when it is not base64. */
static int b64_decode(const char *s, char **out, size_t *len)
{
	size_t n = strlen(s);
	if (n % 4)
		return -1;
	unsigned char *o = xmalloc(n / 4 * 3 + 1);
	size_t k = 0;
	for (size_t i = 0; i < n; i += 4) {
		uint32_t v = 0;
		int pad = 0;
		for (int j = 0; j < 4; j++) {
			const char *c = s[i + j] ? strchr(b64chars, s[i + j]) : NULL;
			if (s[i + j] == '=' && i + 4 == n && j >= 2 && (j == 3 || s[i + 3] == '=')) {
				pad++;
				v <<= 6;
				continue;
			}
			if (!c || pad) {
				free(o);
				return -1;
			}
			v = v << 6 | (uint32_t)(c - b64chars);
		}
		o[k++] = (unsigned char)(v >> 16);
		if (pad < 2)
			o[k++] = (unsigned char)(v >> 8);
		if (pad < 1)
			o[k++] = (unsigned char)v;
	}
	o[k] = 0;
	*out = (char *)o;
	*len = k;
	return 0;
}

static bool is_spm_type(const char *type)
{
	return !strcmp(type, "SentencePieceTokenizer") || !strcmp(type, "GPTSentencePieceTokenizer") ||
	       !strcmp(type, "Llama2Tokenizer");
}

void ckpt_tok_free(struct ckpt_tok *rec)
{
	free(rec->type);
	free(rec->tiktoken_pattern);
	for (int i = 0; i < rec->nspecial; i++)
		free(rec->special[i]);
	free(rec->special);
	for (int i = 0; i < rec->nfiles; i++) {
		free(rec->files[i].name);
		free(rec->files[i].data);
	}
	for (int i = 0; i < CKPT_TOK_MAX_FILES; i++)
		free(rec->paths[i]);
	free(rec->dir);
	memset(rec, 0, sizeof(*rec));
}

static void rec_init(struct ckpt_tok *rec, const char *type)
{
	memset(rec, 0, sizeof(*rec));
	rec->type = xstrdup(type);
	rec->eod = -1;
	rec->null_vocab_size = -1;
	rec->null_eod_id = -1;
	rec->sp_ignore_extra_ws = true;
	rec->tiktoken_num_special = 1000;
}

/* Add the file at path as `name`; missing_ok: a file the tokenizer reads
 * only when it is there (tokenizer_config.json); binary: kept base64-encoded. */
static int add_file_as(struct ckpt_tok *rec, const char *name, const char *path, bool missing_ok, bool binary)
{
	struct stat st;
	if (!path || (stat(path, &st) < 0 && missing_ok))
		return 0;
	if (rec->nfiles == CKPT_TOK_MAX_FILES)
		BUG("more than %d tokenizer files", CKPT_TOK_MAX_FILES);
	struct sbuf sb = SBUF_INIT;
	if (sbuf_read_file(&sb, path) < 0)
		return -1;
	if (sb.len > MAX_FILE_BYTES || (!binary && memchr(sb.buf ? sb.buf : "", 0, sb.len))) {
		warning("the tokenizer file '%s' is not kept in the checkpoint (%s): give the tokenizer flags "
			"when serving or converting it", path, sb.len > MAX_FILE_BYTES ? "over 64 MB" : "not a text file");
		sbuf_release(&sb);
		return 0;
	}
	struct ckpt_tok_file *f = &rec->files[rec->nfiles++];
	f->name = xstrdup(name);
	f->len = sb.len;
	f->data = sbuf_detach(&sb, NULL);
	if (!f->data)
		f->data = xstrdup("");
	f->crc32 = crc_of(f->data, f->len);
	f->binary = binary;
	return 0;
}

static int add_file(struct ckpt_tok *rec, const char *name, const char *path, bool missing_ok)
{
	return add_file_as(rec, name, path, missing_ok, false);
}

/* Types whose --tokenizer-model is a Hugging Face tokenizer folder (or file). */
static bool is_hf_type(const char *type)
{
	return !strcmp(type, "HuggingFaceTokenizer") || !strcmp(type, "SFTTokenizer");
}

static const char *const hf_files[] = { "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
					 "chat_template.jinja" };

/* The files of a HuggingFaceTokenizer's --tokenizer-model: a folder, or
 * its tokenizer.json (the optional files then come from its folder, as
 * tok_hf_load reads them). */
static int add_hf_files(struct ckpt_tok *rec, const char *model)
{
	struct stat st;
	if (stat(model, &st) < 0)
		return error_errno("--tokenizer-model '%s'", model);
	char *dir = S_ISDIR(st.st_mode) ? xstrdup(model) : path_dirname(model);
	int rc = 0;
	for (int i = 0; rc == 0 && i < (int)(sizeof(hf_files) / sizeof(hf_files[0])); i++) {
		char *p = i == 0 && !S_ISDIR(st.st_mode) ? xstrdup(model) : xasprintf("%s/%s", dir, hf_files[i]);
		rc = add_file(rec, hf_files[i], p, i > 0);
		free(p);
	}
	free(dir);
	return rc;
}

/* The multiple the flags pad the vocabulary to (gpt_config_from_args), 0
 * when --padded-vocab-size gives the padded size itself. */
static int64_t padding_of(const struct args *a)
{
	if (a->padded_vocab_size > 0)
		return 0;
	if (a->pad_vocab_size && a->make_vocab_size_divisible_by > 0)
		return a->make_vocab_size_divisible_by * a->tensor_model_parallel_size;
	return 1;
}

int ckpt_tok_from_args(struct ckpt_tok *rec, const struct args *a, const struct tokenizer *tok)
{
	rec_init(rec, a->tokenizer_type ? a->tokenizer_type : "");
	rec->vocab_size = tok_vocab_size(tok);
	rec->eod = tok_eod(tok);
	rec->padding_multiple = padding_of(a);
	rec->no_include_special = a->tokenizer_hf_no_include_special_tokens;
	if (a->tokenizer_special_tokens.n > 0) {
		rec->nspecial = a->tokenizer_special_tokens.n;
		rec->special = xcalloc((size_t)rec->nspecial, sizeof(char *));
		for (int i = 0; i < rec->nspecial; i++)
			rec->special[i] = xstrdup(a->tokenizer_special_tokens.v[i]);
	}
	int rc = 0;
	if (!strcmp(rec->type, "GPT2BPETokenizer")) {
		rc = add_file(rec, "vocab.json", a->vocab_file, false);
		if (rc == 0)
			rc = add_file(rec, "merges.txt", a->merge_file, false);
	} else if (is_hf_type(rec->type)) {
		rc = add_hf_files(rec, a->tokenizer_model);
	} else if (!strcmp(rec->type, "NullTokenizer")) {
		rec->null_vocab_size = a->vocab_size;
		rec->null_eod_id = a->null_tokenizer_eod_id;
	} else if (is_spm_type(rec->type)) {
		rec->sp_ignore_extra_ws = a->tokenizer_sentencepiece_ignore_extra_whitespaces;
		rc = add_file_as(rec, "tokenizer.model", a->tokenizer_model, false, true);
	} else if (!strcmp(rec->type, "TikTokenizer")) {
		rec->null_vocab_size = a->vocab_size;
		rec->tiktoken_pattern = a->tiktoken_pattern ? xstrdup(a->tiktoken_pattern) : NULL;
		rec->tiktoken_num_special = a->tiktoken_num_special_tokens;
		rc = add_file(rec, "tiktoken.json", a->tokenizer_model, false);
	}
	if (rc < 0)
		ckpt_tok_free(rec);
	return rc;
}

int ckpt_tok_from_dir(struct ckpt_tok *rec, const char *dir, int64_t padding_multiple)
{
	char *tj = xasprintf("%s/tokenizer.json", dir), *vj = xasprintf("%s/vocab.json", dir),
	     *mt = xasprintf("%s/merges.txt", dir);
	struct tok_config tc;
	memset(&tc, 0, sizeof(tc));
	tc.vocab_size = tc.null_eod_id = -1;
	int rc = 1;
	if (access(tj, R_OK) == 0) {
		tc.type = "HuggingFaceTokenizer";
		tc.model = dir;
		rc = 0;
	} else if (access(vj, R_OK) == 0 && access(mt, R_OK) == 0) {
		tc.type = "GPT2BPETokenizer";
		tc.vocab_file = vj;
		tc.merge_file = mt;
		rc = 0;
	}
	if (rc == 0) {
		struct tokenizer *tok = tok_load(&tc);
		rec_init(rec, tc.type);
		if (!tok) {
			rc = error("'%s': the tokenizer files there do not load", dir);
		} else {
			rec->vocab_size = tok_vocab_size(tok);
			rec->eod = tok_eod(tok);
			tok_free(tok);
			rec->padding_multiple = padding_multiple;
			if (tc.model)
				rc = add_hf_files(rec, dir);
			else if ((rc = add_file(rec, "vocab.json", vj, false)) == 0)
				rc = add_file(rec, "merges.txt", mt, false);
		}
		if (rc < 0)
			ckpt_tok_free(rec);
	}
	free(tj);
	free(vj);
	free(mt);
	return rc;
}

int ckpt_tok_put(struct ckpt_writer *w, int file, const struct ckpt_tok *rec)
{
	json_t *o = json_object(), *files = json_object(), *sp = json_array();
	json_object_set_new(o, "tokenizer_type", json_string(rec->type));
	json_object_set_new(o, "vocab_size", json_integer(rec->vocab_size));
	json_object_set_new(o, "eod_id", json_integer(rec->eod));
	json_object_set_new(o, "padding_multiple", json_integer(rec->padding_multiple));
	if (!strcmp(rec->type, "NullTokenizer")) {
		json_object_set_new(o, "null_tokenizer_vocab_size", json_integer(rec->null_vocab_size));
		json_object_set_new(o, "null_tokenizer_eod_id", json_integer(rec->null_eod_id));
	} else if (is_spm_type(rec->type)) {
		json_object_set_new(o, "tokenizer_sentencepiece_ignore_extra_whitespaces",
				    json_boolean(rec->sp_ignore_extra_ws));
	} else if (!strcmp(rec->type, "TikTokenizer")) {
		json_object_set_new(o, "tiktoken_pattern",
				    rec->tiktoken_pattern ? json_string(rec->tiktoken_pattern) : json_null());
		json_object_set_new(o, "tiktoken_num_special_tokens", json_integer(rec->tiktoken_num_special));
		json_object_set_new(o, "tiktoken_vocab_size", json_integer(rec->null_vocab_size));
	}
	json_object_set_new(o, "tokenizer_hf_no_include_special_tokens", json_boolean(rec->no_include_special));
	for (int i = 0; i < rec->nspecial; i++)
		json_array_append_new(sp, json_string(rec->special[i]));
	json_object_set_new(o, "tokenizer_special_tokens", sp);
	for (int i = 0; i < rec->nfiles; i++) {
		json_t *f = json_object();
		json_object_set_new(f, "bytes", json_integer((json_int_t)rec->files[i].len));
		json_object_set_new(f, "crc32", json_integer(rec->files[i].crc32));
		if (rec->files[i].binary)
			json_object_set_new(f, "encoding", json_string("base64"));
		json_object_set_new(files, rec->files[i].name, f);
	}
	json_object_set_new(o, "files", files);
	char *s = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(1));
	json_decref(o);
	int rc = ckpt_put_attr_str(w, file, NULL, "tokenizer", s);
	free(s);
	for (int i = 0; rc == 0 && i < rec->nfiles; i++) {
		char *name = xasprintf(FILE_ATTR "%s", rec->files[i].name);
		char *enc = rec->files[i].binary ? b64_encode((const unsigned char *)rec->files[i].data,
							       rec->files[i].len) : NULL;
		rc = ckpt_put_attr_str(w, file, NULL, name, enc ? enc : rec->files[i].data);
		free(enc);
		free(name);
	}
	return rc;
}

static bool plain_name(const char *n)
{
	return *n && *n != '.' && !strchr(n, '/');
}

int ckpt_tok_get(struct ckpt_tok *rec, struct ckpt_reader *r, int file)
{
	memset(rec, 0, sizeof(*rec));
	int has = ckpt_has_attr(r, file, NULL, "tokenizer");
	if (has <= 0)
		return has < 0 ? -1 : 1;
	char *s, where[4200];
	snprintf(where, sizeof(where), "'%s/model.h5'", ckpt_reader_dir(r));
	if (ckpt_get_attr_str(r, file, NULL, "tokenizer", &s) < 0)
		return -1;
	json_error_t jerr;
	json_t *o = json_loads(s, 0, &jerr);
	free(s);
	const char *type = json_string_value(json_object_get(o, "tokenizer_type"));
	json_t *files = json_object_get(o, "files");
	if (!type || !json_is_integer(json_object_get(o, "vocab_size")) || (files && !json_is_object(files))) {
		json_decref(o);
		return error("%s: the tokenizer record (attribute \"tokenizer\") is damaged: expected a JSON object with "
			     "\"tokenizer_type\" and \"vocab_size\"", where);
	}
	rec_init(rec, type);
	rec->vocab_size = json_integer_value(json_object_get(o, "vocab_size"));
	json_t *v;
	if (json_is_integer(v = json_object_get(o, "eod_id")))
		rec->eod = json_integer_value(v);
	if (json_is_integer(v = json_object_get(o, "padding_multiple")))
		rec->padding_multiple = json_integer_value(v);
	if (json_is_integer(v = json_object_get(o, "null_tokenizer_vocab_size")))
		rec->null_vocab_size = json_integer_value(v);
	if (json_is_integer(v = json_object_get(o, "null_tokenizer_eod_id")))
		rec->null_eod_id = json_integer_value(v);
	if (json_is_boolean(v = json_object_get(o, "tokenizer_sentencepiece_ignore_extra_whitespaces")))
		rec->sp_ignore_extra_ws = json_is_true(v);
	if (json_is_string(v = json_object_get(o, "tiktoken_pattern")))
		rec->tiktoken_pattern = xstrdup(json_string_value(v));
	if (json_is_integer(v = json_object_get(o, "tiktoken_num_special_tokens")))
		rec->tiktoken_num_special = json_integer_value(v);
	if (json_is_integer(v = json_object_get(o, "tiktoken_vocab_size")))
		rec->null_vocab_size = json_integer_value(v);
	rec->no_include_special = json_is_true(json_object_get(o, "tokenizer_hf_no_include_special_tokens"));
	json_t *sp = json_object_get(o, "tokenizer_special_tokens");
	if (json_array_size(sp) > 0) {
		rec->special = xcalloc(json_array_size(sp), sizeof(char *));
		for (size_t i = 0; i < json_array_size(sp); i++)
			if (json_is_string(json_array_get(sp, i)))
				rec->special[rec->nspecial++] = xstrdup(json_string_value(json_array_get(sp, i)));
	}
	int rc = 0;
	const char *name;
	json_object_foreach(files, name, v) {
		json_t *crc = json_object_get(v, "crc32");
		const char *encoding = json_string_value(json_object_get(v, "encoding"));
		bool binary = encoding && !strcmp(encoding, "base64");
		if (!plain_name(name) || !json_is_integer(crc) || rec->nfiles == CKPT_TOK_MAX_FILES ||
		    (encoding && !binary)) {
			rc = error("%s: the tokenizer record lists a file '%s' megac does not know how to keep", where, name);
			break;
		}
		char *attr = xasprintf(FILE_ATTR "%s", name), *data;
		rc = ckpt_get_attr_str(r, file, NULL, attr, &data);
		free(attr);
		if (rc < 0)
			break;
		struct ckpt_tok_file *f = &rec->files[rec->nfiles++];
		f->name = xstrdup(name);
		f->binary = binary;
		f->data = data;
		f->len = strlen(data);
		if (binary) {
			char *raw;
			if (b64_decode(data, &raw, &f->len) < 0) {
				rc = error("%s: the tokenizer file '%s' stored there is corrupt: it is not base64", where,
					   name);
				break;
			}
			free(data);
			f->data = raw;
		}
		f->crc32 = crc_of(f->data, f->len);
		if (f->crc32 != (uint32_t)json_integer_value(crc)) {
			rc = error("%s: the tokenizer file '%s' stored there is corrupt: its crc32 is %08x, the record says "
				   "%08x", where, name, f->crc32, (unsigned)json_integer_value(crc));
			break;
		}
	}
	json_decref(o);
	if (rc < 0)
		ckpt_tok_free(rec);
	return rc;
}

static const struct ckpt_tok_file *find_file(const struct ckpt_tok *rec, const char *name)
{
	for (int i = 0; i < rec->nfiles; i++)
		if (!strcmp(rec->files[i].name, name))
			return &rec->files[i];
	return NULL;
}

int ckpt_tok_extract(struct ckpt_tok *rec, const char *dir, const char *where, struct tok_config *tc)
{
	memset(tc, 0, sizeof(*tc));
	tc->type = rec->type;
	tc->vocab_size = rec->null_vocab_size;
	tc->null_eod_id = rec->null_eod_id;
	tc->no_include_special = rec->no_include_special;
	tc->special_tokens = rec->special;
	tc->n_special_tokens = rec->nspecial;
	tc->sp_keep_extra_spaces = !rec->sp_ignore_extra_ws;
	tc->tiktoken_pattern = rec->tiktoken_pattern;
	tc->tiktoken_num_special_tokens = rec->tiktoken_num_special;
	/* checkpoints written before megac kept a .model (or TikTokenizer's
	 * vocabulary) record none: their flags must be given */
	const char *need = !strcmp(rec->type, "GPT2BPETokenizer")     ? "vocab.json" :
			   is_hf_type(rec->type) ? "tokenizer.json" :
			   is_spm_type(rec->type)		   ? "tokenizer.model" :
			   !strcmp(rec->type, "TikTokenizer")	   ? "tiktoken.json" :
								     NULL;
	if (need && (!find_file(rec, need) || (!strcmp(need, "vocab.json") && !find_file(rec, "merges.txt"))))
		return error("%s records a %s without its files (they were not kept): give the tokenizer flags",
			     where, rec->type);
	for (int i = 0; i < rec->nfiles; i++) {
		char *p = xasprintf("%s/%s", dir, rec->files[i].name);
		struct afile af;
		int rc = afile_open(&af, p);
		if (rc == 0) {
			fwrite(rec->files[i].data, 1, rec->files[i].len, af.fp);
			rc = afile_commit(&af);
			if (rc < 0)
				afile_abort(&af);
		}
		if (rc < 0) {
			free(p);
			return -1;
		}
		free(rec->paths[i]);
		rec->paths[i] = p;
		if (!strcmp(rec->files[i].name, "vocab.json"))
			tc->vocab_file = p;
		else if (!strcmp(rec->files[i].name, "merges.txt"))
			tc->merge_file = p;
		else if (!strcmp(rec->files[i].name, "tokenizer.model") || !strcmp(rec->files[i].name, "tiktoken.json"))
			tc->model = p;
	}
	free(rec->dir);
	rec->dir = xstrdup(dir);
	if (is_hf_type(rec->type))
		tc->model = rec->dir;
	return 0;
}

static int64_t pad_to(int64_t v, int64_t m)
{
	return m > 1 ? (v + m - 1) / m * m : v;
}

int ckpt_tok_check(const struct ckpt_tok *rec, const char *ckpt_type, const struct gpt_config *c,
		   const struct args *a, const struct tokenizer *tok, const char *where)
{
	const char *type = rec ? rec->type : ckpt_type;
	const char *given = a->tokenizer_type ? a->tokenizer_type : "";
	int64_t v = tok_vocab_size(tok), want = rec ? rec->vocab_size : c->V;
	struct sbuf why = SBUF_INIT;
	if (type && *type && strcmp(type, given))
		sbuf_addf(&why, "; it was trained with a %s, the flags give a %s", type, given);
	/* the tokenizer's vocabulary padded as the checkpoint pads it */
	int64_t m = rec ? rec->padding_multiple : 0, padded = m ? pad_to(v, m) : v;
	if (v != want || v != c->V || (m && padded != c->Vp)) {
		sbuf_addf(&why, "; the tokenizer has %lld tokens", (long long)v);
		if (m > 1)
			sbuf_addf(&why, " (padded as the checkpoint pads, to a multiple of %lld: %lld)", (long long)m,
				  (long long)padded);
		sbuf_addf(&why, ", the model's vocabulary %d (padded to %d)", c->V, c->Vp);
	}
	int rc = 0;
	if (why.len) {
		rc = error("%s does not fit this tokenizer: %s", where, why.buf + 2);
	} else if (rec && rec->nfiles) {
		/* the same kind and size: are they the same files? */
		struct ckpt_tok mine;
		if (ckpt_tok_from_args(&mine, a, tok) == 0) {
			struct sbuf diff = SBUF_INIT;
			for (int i = 0; i < rec->nfiles; i++) {
				const struct ckpt_tok_file *f = find_file(&mine, rec->files[i].name);
				if (f && f->crc32 != rec->files[i].crc32)
					sbuf_addf(&diff, "%s%s", diff.len ? ", " : "", f->name);
			}
			if (diff.len)
				warning("%s: the tokenizer files given (%s) differ from the ones the checkpoint records, "
					"although their type and size agree", where, diff.buf);
			sbuf_release(&diff);
			ckpt_tok_free(&mine);
		}
	}
	sbuf_release(&why);
	return rc;
}

/* ---- the recorded tokenizer in use (ckpt_tok_use) ---- */

/* The temporary folder of the recorded tokenizer's files, removed at exit
 * (die() included) or by ckpt_tok_release_files. */
static char *use_dir;
static char *use_paths[CKPT_TOK_MAX_FILES];

void ckpt_tok_release_files(void)
{
	for (int i = 0; i < CKPT_TOK_MAX_FILES; i++)
		if (use_paths[i]) {
			unlink(use_paths[i]);
			free(use_paths[i]);
			use_paths[i] = NULL;
		}
	if (use_dir) {
		rmdir(use_dir);
		free(use_dir);
		use_dir = NULL;
	}
}

int ckpt_tok_use(struct args *a, struct ckpt_tok *rec, const char *where)
{
	if (use_dir)
		BUG("ckpt_tok_use called twice");
	const char *base = getenv("TMPDIR");
	/* mkdtemp's template: it replaces the six X with a unique suffix */
	use_dir = xasprintf("%s/megac-tokenizer.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(use_dir)) {
		int rc = error_errno("cannot create a folder for the checkpoint's tokenizer files ('%s')", use_dir);
		free(use_dir);
		use_dir = NULL;
		return rc;
	}
	atexit(ckpt_tok_release_files);
	struct tok_config tc;
	int rc = ckpt_tok_extract(rec, use_dir, where, &tc);
	for (int i = 0; i < CKPT_TOK_MAX_FILES; i++)
		if (rec->paths[i])
			use_paths[i] = xstrdup(rec->paths[i]);
	if (rc < 0)
		return -1;
	a->tokenizer_type = rec->type;
	a->vocab_file = (char *)tc.vocab_file;
	a->merge_file = (char *)tc.merge_file;
	a->tokenizer_model = (char *)tc.model;
	a->vocab_size = tc.vocab_size;
	a->null_tokenizer_eod_id = tc.null_eod_id;
	a->tokenizer_hf_no_include_special_tokens = tc.no_include_special;
	a->tokenizer_sentencepiece_ignore_extra_whitespaces = !tc.sp_keep_extra_spaces;
	a->tiktoken_pattern = rec->tiktoken_pattern;
	a->tiktoken_num_special_tokens = rec->tiktoken_num_special;
	a->tokenizer_special_tokens.v = rec->special;
	a->tokenizer_special_tokens.n = rec->nspecial;
	info("no tokenizer flags: using the tokenizer %s records (%s, %lld tokens%s%s)", where, rec->type,
	     (long long)rec->vocab_size, rec->nfiles ? ", " : "",
	     rec->nfiles == 2 && !strcmp(rec->type, "GPT2BPETokenizer") ? "vocab.json and merges.txt" :
	     rec->nfiles ? rec->files[0].name : "");
	return 0;
}
