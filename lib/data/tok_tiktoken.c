/*
 * tok_tiktoken.c - TikTokenizer: Megatron's tiktoken-based tokenizer
 * (megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py), built as
 * a tok_hf pipeline:
 *
 *   special tokens (ids 0 .. num_special-1) cut out of the raw text
 *   -> the v1 or v2 split pattern (Isolated)
 *   -> tiktoken's byte-pair merge on each piece; ids = rank + num_special
 *
 * The vocabulary file is a JSON list of {"rank": i, "token_bytes": base64,
 * "token_str": text}, entry i having rank i and the first 256 being the
 * single bytes 0..255. Only its first vocab_size - num_special entries are
 * used. The special tokens are the given list (by default <unk> <s> </s>
 * <mask> <pad> <cls> <sep>, which any list must contain) followed by fillers
 * <SPECIAL_i> up to num_special; they are recognised anywhere in the text
 * (tiktoken's allowed_special="all").
 *
 * tiktoken merges two adjacent parts whenever their concatenation is a
 * token, lowest rank first, leftmost on ties, and takes a piece that is a
 * token whole. That is the HF merge loop of tok_bpe.c with ignore_merges and
 * a merge table holding, for every token t and every split t = a + b into
 * two tokens, the pair (a, b) with t's rank: the pair of adjacent tokens
 * determines t, so the table is unambiguous.
 */
#include "base/error.h"
#include "base/jsonio.h"
#include "base/xalloc.h"
#include "tok_bpe.h"
#include "tok_hf.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Megatron's patterns, in tiktoken's (fancy-regex) syntax. */
static const char pattern_v1[] =
	"[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char pattern_v2[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
	"|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
	"|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *const default_specials[] = { "<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>" };
#define N_DEFAULT 7
#define DEFAULT_VOCAB 131072 /* 2^17 */

/* Strict base64 (RFC 4648, padded); -1 on anything else. */
static int b64_value(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

static int b64_decode(const char *s, size_t n, char *out, size_t *outlen)
{
	size_t k = 0;
	if (n % 4)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		int pad = 0;
		for (int j = 0; j < 4; j++) {
			if (s[i + j] == '=' && i + 4 == n && j >= 2) {
				v[j] = 0;
				pad++;
				continue;
			}
			if (pad)
				return -1;
			v[j] = b64_value((unsigned char)s[i + j]);
			if (v[j] < 0)
				return -1;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
		out[k++] = (char)(w >> 16);
		if (pad < 2)
			out[k++] = (char)(w >> 8);
		if (pad < 1)
			out[k++] = (char)w;
	}
	*outlen = k;
	return 0;
}

/* The special-token list Megatron builds: the given tokens (or the
 * default seven), then <SPECIAL_i> fillers up to num_special. */
static char **special_list(char *const *special, int n_special, int64_t num_special, int64_t vocab_size)
{
	const char *const *given = n_special ? (const char *const *)special : default_specials;
	int ng = n_special ? n_special : N_DEFAULT;
	for (int i = 0; i < ng; i++)
		if (!*given[i]) {
			error("TikTokenizer: a special token is empty");
			return NULL;
		}
	for (int i = 0; i < ng; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(given[i], given[j])) {
				error("TikTokenizer: special token '%s' is given twice", given[i]);
				return NULL;
			}
	for (int d = 0; d < N_DEFAULT; d++) {
		bool found = false;
		for (int i = 0; i < ng && !found; i++)
			found = !strcmp(given[i], default_specials[d]);
		if (!found) {
			error("TikTokenizer: --tokenizer-special-tokens must include <unk> <s> </s> <mask> <pad> <cls> "
			      "<sep> (missing %s)",
			      default_specials[d]);
			return NULL;
		}
	}
	if (!(ng <= num_special && num_special < vocab_size)) {
		error("TikTokenizer: needs special tokens (%d) <= --tiktoken-num-special-tokens (%" PRId64
		      ") < vocab size (%" PRId64 ")",
		      ng, num_special, vocab_size);
		return NULL;
	}
	char **list = xcalloc((size_t)num_special, sizeof(*list));
	for (int64_t i = 0; i < num_special; i++)
		list[i] = i < ng ? xstrdup(given[i]) : xasprintf("<SPECIAL_%" PRId64 ">", i);
	for (int i = 0; i < ng; i++) {
		const char *g = given[i];
		int64_t k;
		/* a given token named like a filler collides with it */
		if (!strncmp(g, "<SPECIAL_", 9) && (k = strtoll(g + 9, NULL, 10)) >= ng && k < num_special &&
		    !strcmp(g, list[k])) {
			error("TikTokenizer: special token '%s' is also the name of filler special token %" PRId64, g, k);
			goto fail;
		}
	}
	for (int i = 0; i < ng; i++)
		for (int j = 0; j < ng; j++)
			if (i != j && !strncmp(given[j], given[i], strlen(given[i])))
				warning("TikTokenizer: special token '%s' begins with special token '%s': where both "
					"match, tiktoken's choice depends on its hash order; megac takes the longer",
					given[j], given[i]);
	return list;
fail:
	for (int64_t i = 0; i < num_special; i++)
		free(list[i]);
	free(list);
	return NULL;
}

/* The ranks of the first `inner` entries into m (ids shifted by
 * num_special), then the derived merge table. */
static int load_ranks(struct tok_bpe *m, const char *path, int64_t inner, int64_t num_special)
{
	json_t *root = jsonio_load_file(path);
	if (!root)
		return -1;
	int ret = -1;
	char *buf = NULL;
	size_t cap = 0;
	if (!json_is_array(root)) {
		error("%s: a TikTokenizer vocabulary is a JSON list of {\"rank\", \"token_bytes\", \"token_str\"}", path);
		goto out;
	}
	if ((int64_t)json_array_size(root) < inner) {
		error("%s: the vocabulary has %zu entries; vocab size %" PRId64 " with %" PRId64
		      " special tokens needs %" PRId64 " (set --vocab-size)",
		      path, json_array_size(root), inner + num_special, num_special, inner);
		goto out;
	}
	for (int64_t i = 0; i < inner; i++) {
		json_t *e = json_array_get(root, (size_t)i);
		json_t *rank = json_object_get(e, "rank"), *tb = json_object_get(e, "token_bytes");
		if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_integer(rank) || !json_is_string(tb) ||
		    !json_is_string(json_object_get(e, "token_str"))) {
			error("%s: entry %" PRId64 " is not {\"rank\": integer, \"token_bytes\": string, \"token_str\": "
			      "string}",
			      path, i);
			goto out;
		}
		if (json_integer_value(rank) != i) {
			error("%s: entry %" PRId64 " has rank %lld (the entries must be in rank order from 0)", path, i,
			      (long long)json_integer_value(rank));
			goto out;
		}
		size_t n = json_string_length(tb), len;
		xgrow(&buf, &cap, n + 1, 1);
		if (b64_decode(json_string_value(tb), n, buf, &len) || !len) {
			error("%s: entry %" PRId64 ": token_bytes is not non-empty base64", path, i);
			goto out;
		}
		if (i < 256 && (len != 1 || (unsigned char)buf[0] != i)) {
			error("%s: entry %" PRId64 " must be the single byte 0x%02x (the first 256 ranks are the bytes)",
			      path, i, (unsigned)i);
			goto out;
		}
		if (tok_bpe_bytes_id(m, buf, len) >= 0) {
			char *q = tok_bpe_quote(buf, len, 80);
			error("%s: entry %" PRId64 ": token %s appears twice", path, i, q);
			free(q);
			goto out;
		}
		tok_bpe_add_bytes(m, buf, len, (int32_t)(i + num_special));
	}
	for (int64_t i = 256; i < inner; i++) {
		const char *p;
		size_t len;
		int32_t id = (int32_t)(i + num_special);
		if (!tok_bpe_id_bytes(m, id, &p, &len))
			BUG("tiktoken rank %" PRId64 " lost", i);
		for (size_t k = 1; k < len; k++) {
			int32_t a = tok_bpe_bytes_id(m, p, k);
			int32_t b = a >= 0 ? tok_bpe_bytes_id(m, p + k, len - k) : -1;
			if (b >= 0)
				tok_bpe_add_merge_ids(m, a, b, id, (uint32_t)id);
		}
	}
	ret = 0;
out:
	free(buf);
	json_decref(root);
	return ret;
}

struct tok_hf *tok_tiktoken_load(const char *model, const char *pattern, int64_t num_special, char *const *special,
				 int n_special, int64_t vocab_size, int64_t *eod, int64_t *pad)
{
	if (!model || !*model) {
		error("TikTokenizer needs --tokenizer-model (a tiktoken vocabulary .json)");
		return NULL;
	}
	size_t ml = strlen(model);
	if (ml < 5 || strcmp(model + ml - 5, ".json")) {
		error("TikTokenizer: --tokenizer-model '%s' must be a .json vocabulary file", model);
		return NULL;
	}
	const char *pat;
	if (!pattern || !strcmp(pattern, "v2"))
		pat = pattern_v2;
	else if (!strcmp(pattern, "v1"))
		pat = pattern_v1;
	else {
		error("TikTokenizer: --tiktoken-pattern must be v1 or v2, not '%s'", pattern);
		return NULL;
	}
	if (vocab_size < 0)
		vocab_size = DEFAULT_VOCAB;
	if (vocab_size > INT32_MAX) {
		error("TikTokenizer: vocab size %" PRId64 " is out of range", vocab_size);
		return NULL;
	}
	if (num_special < 0) {
		error("TikTokenizer: --tiktoken-num-special-tokens %" PRId64 " is negative", num_special);
		return NULL;
	}
	char **list = special_list(special, n_special, num_special, vocab_size);
	if (!list)
		return NULL;
	struct tok_bpe *m = tok_bpe_new();
	struct tok_hf *h = NULL;
	if (load_ranks(m, model, vocab_size - num_special, num_special)) {
		tok_bpe_free(m);
		goto fail;
	}
	tok_bpe_set_options(m, true, -1, false);
	h = tok_hf_new(m);
	for (int64_t i = 0; i < num_special; i++)
		tok_hf_add_token_id(h, list[i], strlen(list[i]), (int32_t)i);
	char *where = xasprintf("TikTokenizer pattern %s", pattern ? pattern : "v2");
	int r = tok_hf_add_split(h, pat, true, TOK_HF_ISOLATED, false, where);
	free(where);
	if (r || tok_hf_finish(h))
		goto fail;
	h->vocab_size = vocab_size;
	*eod = *pad = -1;
	for (int64_t i = 0; i < num_special; i++) {
		if (!strcmp(list[i], "</s>"))
			*eod = i;
		if (!strcmp(list[i], "<pad>"))
			*pad = i;
	}
	for (int64_t i = 0; i < num_special; i++)
		free(list[i]);
	free(list);
	return h;
fail:
	tok_hf_free(h);
	for (int64_t i = 0; i < num_special; i++)
		free(list[i]);
	free(list);
	return NULL;
}
