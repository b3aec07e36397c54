/*
 * test_tok_spm_json.c - HuggingFaceTokenizer on tokenizer.json files of the
 * SentencePiece kind (Llama-2, Mistral, Gemma): a BPE vocabulary of plain
 * strings with byte_fallback and unk, the Metaspace pre-tokenizer, the
 * Prepend / Replace / Strip normalizers and the ByteFallback, Fuse, Strip,
 * Replace and Metaspace decoders. tests/fixtures/tokenizers/spm-json/
 * holds the files (made by make_spm_json_refs.py with transformers'
 * LlamaConverter from a small SentencePiece model, and variants of them) and
 * the ids and decoded text of Hugging Face `tokenizers`, with and without
 * the post-processor. Plus the refusals for the parts megac does not have.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "data/tok.h"
#include "test.h"
#include "tok_test.h"

#include <jansson.h>
#include <sys/stat.h>

#define FIX "tests/fixtures/tokenizers/spm-json"

static char *g_tmp;
static json_t *g_variants;

static struct tokenizer *load(const char *dir, bool no_special, char **msg)
{
	struct tok_config c = { 0 };
	c.type = "HuggingFaceTokenizer";
	c.model = dir;
	c.vocab_size = -1;
	c.null_eod_id = -1;
	c.no_include_special = no_special;
	return tok_test_load(&c, msg);
}

static char *write_dir(const char *name, const json_t *tokenizer)
{
	char *dir = xasprintf("%s/%s", g_tmp, name);
	mkdir(dir, 0755);
	char *file = xasprintf("%s/tokenizer.json", dir);
	if (json_dump_file(tokenizer, file, JSON_COMPACT))
		abort();
	free(file);
	return dir;
}

static void check_variant(const json_t *v)
{
	const char *name = json_string_value(json_object_get(v, "name"));
	char *dir = write_dir(name, json_object_get(v, "tokenizer"));
	char *msg;
	struct tokenizer *t = load(dir, false, &msg), *tn = load(dir, true, NULL);
	CHECK(t != NULL && tn != NULL);
	if (!t || !tn) {
		printf("#   %s: %s", name, msg);
		free(msg);
		tok_free(t);
		tok_free(tn);
		free(dir);
		return;
	}
	free(msg);
	CHECK_INT(tok_vocab_size(t), json_integer_value(json_object_get(v, "vocab_size")));
	struct tok_session *s = tok_session_new(t), *sn = tok_session_new(tn);
	struct tok_ids ids = { 0 };
	json_t *cases = json_object_get(v, "cases");
	size_t i, ok_ids = 0, ok_nosp = 0, ok_dec = 0;
	json_t *c;
	json_array_foreach(cases, i, c) {
		json_t *text = json_object_get(c, "text"), *dec = json_object_get(c, "decoded");
		char what[96];
		snprintf(what, sizeof(what), "%s case %zu", name, i);
		ids.n = 0;
		CHECK_INT(tok_encode(s, json_string_value(text), json_string_length(text), &ids), 0);
		ok_ids += tok_test_same_ids(&ids, json_object_get(c, "ids"), what);
		struct sbuf sb = SBUF_INIT;
		CHECK_INT(tok_decode(t, ids.v, ids.n, &sb), 0);
		if (sb.len == json_string_length(dec) && !memcmp(sb.buf ? sb.buf : "", json_string_value(dec), sb.len))
			ok_dec++;
		else
			printf("#   %s: decoded '%s', want '%s'\n", what, sb.buf ? sb.buf : "", json_string_value(dec));
		sbuf_release(&sb);
		ids.n = 0;
		CHECK_INT(tok_encode(sn, json_string_value(text), json_string_length(text), &ids), 0);
		ok_nosp += tok_test_same_ids(&ids, json_object_get(c, "ids_nospecial"), what);
	}
	size_t n = json_array_size(cases);
	CHECK(n > 400);
	CHECK_INT(ok_ids, n);
	CHECK_INT(ok_nosp, n);
	CHECK_INT(ok_dec, n);
	printf("#   %s: %zu texts, ids (with and without the template) and decode equal to tokenizers\n", name, n);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_session_free(sn);
	tok_free(t);
	tok_free(tn);
	free(dir);
}

static const json_t *variant(const char *name)
{
	size_t i;
	json_t *v;
	json_array_foreach(g_variants, i, v) if (!strcmp(json_string_value(json_object_get(v, "name")), name)) return v;
	printf("#   no variant %s in the fixture\n", name);
	return NULL;
}

#define VARIANT_TEST(name)                         \
	static void test_##name(void)              \
	{                                          \
		const json_t *v = variant(#name);  \
		CHECK(v != NULL);                  \
		if (v)                             \
			check_variant(v);          \
	}
VARIANT_TEST(llama2_legacy)
VARIANT_TEST(llama2_metaspace)
VARIANT_TEST(metaspace_always_split)
VARIANT_TEST(metaspace_first_in_sequence)
VARIANT_TEST(gemma_like)
VARIANT_TEST(nfkc_strip_nodecoder)
VARIANT_TEST(unk_fused)
VARIANT_TEST(unk_unfused)

/* Decoding id lists that no encoding gives: byte-fallback runs that are not
 * UTF-8 (one U+FFFD per byte), broken by special tokens, and the first
 * token's replacement characters. Wanted strings from tokenizers' decode. */
static void check_decode(struct tokenizer *t, const int32_t *ids, size_t n, const char *want)
{
	struct sbuf sb = SBUF_INIT;
	CHECK_INT(tok_decode(t, ids, n, &sb), 0);
	CHECK_STR(sb.buf ? sb.buf : "", want);
	sbuf_release(&sb);
}

static void test_decode_edges(void)
{
	static const struct {
		const char *variant;
		int32_t ids[5];
		size_t n;
		const char *want;
	} cases[] = {
		{ "llama2_legacy", { 229, 133, 68 }, 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "llama2_legacy", { 229, 133, 175, 300 }, 4, "\xe2\x82\xac u" },
		{ "llama2_legacy", { 300, 229, 1, 133, 2 }, 5, "u\xef\xbf\xbd<s>\xef\xbf\xbd</s>" },
		{ "llama2_legacy", { 272 }, 1, " " },
		{ "llama2_legacy", { 1113, 1113, 300 }, 3, "  u" },
		{ "metaspace_always_split", { 229, 133, 68 }, 3, "<0xE2><0x82><0x41>" },
		{ "metaspace_always_split", { 300, 229, 1, 133, 2 }, 5, "u<0xE2><s><0x82></s>" },
		{ "metaspace_always_split", { 272 }, 1, "" },
		{ "metaspace_always_split", { 1113, 1113, 300 }, 3, "  u" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const json_t *v = variant(cases[i].variant);
		if (!v)
			continue;
		char *dir = write_dir(cases[i].variant, json_object_get(v, "tokenizer"));
		struct tokenizer *t = load(dir, false, NULL);
		CHECK(t != NULL);
		if (t)
			check_decode(t, cases[i].ids, cases[i].n, cases[i].want);
		tok_free(t);
		free(dir);
	}
}

/* The pieces megac refuses, by name, with the file and field. */
static void expect_refused(const char *name, const char *key, const char *json, const char *want)
{
	json_t *tok = json_deep_copy(json_object_get(variant("llama2_legacy"), "tokenizer"));
	json_error_t je;
	json_t *node = json_loads(json, JSON_DECODE_ANY, &je);
	if (!node)
		abort();
	if (!strcmp(key, "byte_fallback_bytelevel")) {
		json_object_set_new(tok, "pre_tokenizer", node);
	} else {
		json_object_set_new(tok, key, node);
	}
	char *dir = write_dir(name, tok);
	char *msg;
	struct tokenizer *t = load(dir, false, &msg);
	CHECK(t == NULL);
	bool ok = msg && strstr(msg, want) && strstr(msg, "tokenizer.json");
	CHECK(ok);
	if (!ok)
		printf("#   %s: wanted '%s'; message was: %s", name, want, msg && *msg ? msg : "(none)\n");
	free(msg);
	tok_free(t);
	free(dir);
	json_decref(tok);
}

static void test_refusals(void)
{
	expect_refused("regex_replace", "normalizer",
		       "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \"x\"}",
		       "Replace normalizer with a Regex pattern is not supported");
	expect_refused("precompiled", "normalizer", "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}",
		       "normalizer type 'Precompiled' is not supported");
	expect_refused("bad_scheme", "pre_tokenizer",
		       "{\"type\": \"Metaspace\", \"replacement\": \"x\", \"prepend_scheme\": \"sometimes\"}",
		       "prepend_scheme 'sometimes'");
	expect_refused("long_replacement", "pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}",
		       "pre_tokenizer.replacement must be one character");
	expect_refused("bytelevel_decoder", "decoder", "{\"type\": \"ByteLevel\"}", "decoder type 'ByteLevel'");
	expect_refused("regex_dec", "decoder",
		       "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"x\"}, \"content\": \" \"}",
		       "Replace decoder with a Regex pattern");
	expect_refused("strip_dec", "decoder", "{\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}",
		       "decoder.start must be a non-negative integer");
	expect_refused("byte_fallback_bytelevel", "byte_fallback_bytelevel", "{\"type\": \"ByteLevel\"}",
		       "byte_fallback = true with a ByteLevel pre_tokenizer");
	expect_refused("empty_prepend", "normalizer", "{\"type\": \"Prepend\"}", "Prepend without");
}

int main(void)
{
	g_tmp = test_tmpdir("tokspm");
	FILE *f = popen("xz -dc " FIX "/variants.json.xz", "r");
	json_error_t je;
	g_variants = f ? json_loadf(f, JSON_ALLOW_NUL, &je) : NULL;
	if (f)
		pclose(f);
	if (!json_is_array(g_variants)) {
		printf("not ok - fixtures (xz -dc " FIX "/variants.json.xz failed)\n");
		return 1;
	}
	RUN(test_llama2_legacy);
	RUN(test_llama2_metaspace);
	RUN(test_metaspace_always_split);
	RUN(test_metaspace_first_in_sequence);
	RUN(test_gemma_like);
	RUN(test_nfkc_strip_nodecoder);
	RUN(test_unk_fused);
	RUN(test_unk_unfused);
	RUN(test_decode_edges);
	RUN(test_refusals);
	json_decref(g_variants);
	free(g_tmp);
	return test_summary();
}
