/*
 * test_tok_tiktoken.c - TikTokenizer (lib/data/tok_tiktoken.c) against the
 * `tiktoken` package: tests/fixtures/tokenizers/tiktoken/ holds a small
 * vocabulary in Megatron's JSON format and the ids tiktoken gives, with
 * Megatron's special-token layout, for the reference strings, edge cases,
 * random strings and the first documents of the example corpora, under two
 * configurations (make_tiktoken_refs.py made both). Plus decoding, the
 * special-token rules and the errors for malformed vocabularies and flags.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "data/tok.h"
#include "test.h"
#include "tok_test.h"

#include <jansson.h>

#define FIX "tests/fixtures/tokenizers/tiktoken"

static char *g_tmp;
static char *g_vocab; /* the decompressed vocabulary */

static int sh(const char *cmd)
{
	return system(cmd);
}

static char *const v1_specials[] = { "<unk>", "<s>",	    "</s>",	  "<mask>", "<pad>",
				     "<cls>", "<sep>", "<|im_start|>", "<|im_end|>", "<a>" };

/* The two configurations of make_tiktoken_refs.py's CONFIGS. */
static struct tok_config cfg_of(const char *name)
{
	struct tok_config c = { 0 };
	c.type = "TikTokenizer";
	c.model = g_vocab;
	c.null_eod_id = -1;
	if (!strcmp(name, "v2")) {
		c.tiktoken_pattern = "v2";
		c.tiktoken_num_special_tokens = 1000;
		c.vocab_size = 5000;
	} else {
		c.tiktoken_pattern = "v1";
		c.tiktoken_num_special_tokens = 12;
		c.special_tokens = v1_specials;
		c.n_special_tokens = 10;
		c.vocab_size = 3512;
	}
	return c;
}

static json_t *read_refs(void)
{
	return tok_test_read_jsonl("xz -dc " FIX "/refs.jsonl.xz");
}

static void check_config(const char *name, int64_t vocab, int64_t eod, int64_t pad)
{
	struct tok_config c = cfg_of(name);
	char *msg;
	struct tokenizer *t = tok_test_load(&c, &msg);
	CHECK(t != NULL);
	if (!t) {
		printf("#   %s: %s", name, msg);
		free(msg);
		return;
	}
	free(msg);
	CHECK_INT(tok_vocab_size(t), vocab);
	CHECK_INT(tok_eod(t), eod);
	CHECK_INT(tok_pad(t), pad);
	json_t *refs = read_refs();
	CHECK(json_array_size(refs) > 700);
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	size_t i, matched = 0, decoded = 0;
	json_t *r;
	json_array_foreach(refs, i, r) {
		json_t *text = json_object_get(r, "text");
		char what[96];
		snprintf(what, sizeof(what), "%s: line %zu (%s)", name, i + 1, json_string_value(json_object_get(r, "src")));
		ids.n = 0;
		CHECK_INT(tok_encode(s, json_string_value(text), json_string_length(text), &ids), 0);
		if (tok_test_same_ids(&ids, json_object_get(r, name), what))
			matched++;
		struct sbuf sb = SBUF_INIT;
		CHECK_INT(tok_decode(t, ids.v, ids.n, &sb), 0);
		if (sb.len == json_string_length(text) && !memcmp(sb.buf ? sb.buf : "", json_string_value(text), sb.len))
			decoded++;
		else
			printf("#   %s: decode differs\n", what);
		sbuf_release(&sb);
	}
	CHECK_INT(matched, json_array_size(refs));
	CHECK_INT(decoded, json_array_size(refs));
	printf("#   %s: %zu texts, ids and decode equal to tiktoken\n", name, matched);
	/* an id past the vocabulary does not decode */
	int32_t bad = (int32_t)vocab;
	struct sbuf sb = SBUF_INIT;
	char *m;
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(tok_decode(t, &bad, 1, &sb), -1);
	m = test_capture_end(&cap);
	CHECK(m && strstr(m, "not in the vocabulary"));
	free(m);
	sbuf_release(&sb);
	tok_ids_free(&ids);
	tok_session_free(s);
	json_decref(refs);
	tok_free(t);
}

static void test_v2_reference(void)
{
	check_config("v2", 5000, 2, 4);
}

static void test_v1_reference(void)
{
	check_config("v1", 3512, 2, 4);
}

/* Special tokens: fillers, decoding them, and the description. */
static void test_specials(void)
{
	struct tok_config c = cfg_of("v2");
	struct tokenizer *t = tok_test_load(&c, NULL);
	CHECK(t != NULL);
	if (!t)
		return;
	CHECK(strstr(tok_describe(t), "TikTokenizer") && strstr(tok_describe(t), "pattern v2"));
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	const char *text = "<SPECIAL_7><sep><SPECIAL_999>";
	CHECK_INT(tok_encode(s, text, strlen(text), &ids), 0);
	CHECK_INT(ids.n, 3);
	if (ids.n == 3) {
		CHECK_INT(ids.v[0], 7);
		CHECK_INT(ids.v[1], 6);
		CHECK_INT(ids.v[2], 999);
	}
	struct sbuf sb = SBUF_INIT;
	int32_t dec[] = { 1, 1000 + 'A', 2 }; /* <s> A </s> */
	CHECK_INT(tok_decode(t, dec, 3, &sb), 0);
	CHECK_STR(sb.buf, "<s>A</s>");
	sbuf_release(&sb);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);

	/* fewer special tokens: the ranks move down with them */
	c.tiktoken_num_special_tokens = 7;
	c.vocab_size = 4007;
	t = tok_test_load(&c, NULL);
	CHECK(t != NULL);
	if (t) {
		s = tok_session_new(t);
		ids.n = 0;
		CHECK_INT(tok_encode(s, "A", 1, &ids), 0);
		CHECK(ids.n == 1 && ids.v[0] == 7 + 'A');
		CHECK_INT(tok_vocab_size(t), 4007);
		tok_ids_free(&ids);
		tok_session_free(s);
		tok_free(t);
	}
}

static void expect_fail(struct tok_config *c, const char *a, const char *b)
{
	char *msg;
	struct tokenizer *t = tok_test_load(c, &msg);
	CHECK(t == NULL);
	bool ok = msg && strstr(msg, a) && (!b || strstr(msg, b));
	CHECK(ok);
	if (!ok)
		printf("#   wanted '%s'; message was: %s", a, msg && *msg ? msg : "(none)\n");
	free(msg);
	tok_free(t);
}

static char *write_vocab(const char *name, const char *data)
{
	char *p = xasprintf("%s/%s", g_tmp, name);
	FILE *f = fopen(p, "w");
	if (!f || fputs(data, f) < 0)
		abort();
	fclose(f);
	return p;
}

/* A vocabulary of the 256 bytes plus `extra` (JSON entries, each starting
 * with a comma). */
static char *bytes_vocab(const char *name, const char *extra, int skip_byte)
{
	struct sbuf sb = SBUF_INIT;
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	sbuf_addch(&sb, '[');
	for (int i = 0; i < 256; i++) {
		int b = i == skip_byte ? (i + 1) & 255 : i;
		sbuf_addf(&sb, "%s{\"rank\": %d, \"token_bytes\": \"%c%c==\", \"token_str\": \"x\"}", i ? "," : "", i,
			  b64[b >> 2], b64[(b & 3) << 4]);
	}
	sbuf_addstr(&sb, extra);
	sbuf_addstr(&sb, "]");
	char *p = write_vocab(name, sb.buf);
	sbuf_release(&sb);
	return p;
}

static void test_errors(void)
{
	struct tok_config c = cfg_of("v2");
	c.model = NULL;
	expect_fail(&c, "--tokenizer-model", NULL);
	c.model = "vocab.txt";
	expect_fail(&c, ".json", NULL);
	c.model = "no/such/vocab.json";
	expect_fail(&c, "no/such/vocab.json", NULL);

	c = cfg_of("v2");
	c.tiktoken_pattern = "v3";
	expect_fail(&c, "v1 or v2", NULL);

	/* the default vocabulary size needs 130072 entries */
	c = cfg_of("v2");
	c.vocab_size = -1;
	expect_fail(&c, "4000 entries", "--vocab-size");

	/* the special-token rules */
	char *const missing[] = { "<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>" };
	c = cfg_of("v2");
	c.special_tokens = missing;
	c.n_special_tokens = 6;
	expect_fail(&c, "<sep>", "must include");
	char *const twice[] = { "<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "<s>" };
	c.special_tokens = twice;
	c.n_special_tokens = 8;
	expect_fail(&c, "'<s>'", "twice");
	char *const filler[] = { "<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "<SPECIAL_9>" };
	c.special_tokens = filler;
	expect_fail(&c, "<SPECIAL_9>", "filler");
	char *const empty[] = { "<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "" };
	c.special_tokens = empty;
	expect_fail(&c, "empty", NULL);
	c = cfg_of("v2");
	c.tiktoken_num_special_tokens = 6;
	expect_fail(&c, "--tiktoken-num-special-tokens (6)", NULL);
	c.tiktoken_num_special_tokens = 5000;
	expect_fail(&c, "< vocab size (5000)", NULL);

	/* malformed vocabularies */
	c = cfg_of("v2");
	c.tiktoken_num_special_tokens = 7;
	c.vocab_size = 7 + 257;
	c.model = write_vocab("obj.json", "{\"rank\": 0}");
	expect_fail(&c, "obj.json", "JSON list");
	free((char *)c.model);
	c.model = write_vocab("broken.json", "[{\"rank\": 0,");
	expect_fail(&c, "broken.json", NULL);
	free((char *)c.model);
	c.model = bytes_vocab("short.json", "", -1);
	expect_fail(&c, "256 entries", "needs 257");
	free((char *)c.model);
	c.model = bytes_vocab("rank.json", ",{\"rank\": 300, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}", -1);
	expect_fail(&c, "entry 256 has rank 300", NULL);
	free((char *)c.model);
	c.model = bytes_vocab("b64.json", ",{\"rank\": 256, \"token_bytes\": \"YW*=\", \"token_str\": \"ab\"}", -1);
	expect_fail(&c, "entry 256", "base64");
	free((char *)c.model);
	c.model = bytes_vocab("keys.json", ",{\"rank\": 256, \"token_bytes\": \"YWI=\"}", -1);
	expect_fail(&c, "entry 256 is not", NULL);
	free((char *)c.model);
	c.model = bytes_vocab("dup.json", ",{\"rank\": 256, \"token_bytes\": \"YQ==\", \"token_str\": \"a\"}", -1);
	expect_fail(&c, "entry 256", "twice");
	free((char *)c.model);
	c.model = bytes_vocab("order.json", ",{\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}", 65);
	expect_fail(&c, "entry 65 must be the single byte 0x41", NULL);
	free((char *)c.model);

	/* a good one of that shape loads, and entries past the cut are not read */
	c.model = bytes_vocab("good.json",
			      ",{\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"}"
			      ",{\"rank\": 999, \"junk\": 1}",
			      -1);
	struct tokenizer *t = tok_test_load(&c, NULL);
	CHECK(t != NULL);
	if (t) {
		struct tok_session *s = tok_session_new(t);
		struct tok_ids ids = { 0 };
		CHECK_INT(tok_encode(s, "abc", 3, &ids), 0);
		CHECK(ids.n == 2 && ids.v[0] == 7 + 256 && ids.v[1] == 7 + 'c');
		tok_ids_free(&ids);
		tok_session_free(s);
		tok_free(t);
	}
	free((char *)c.model);
}

int main(void)
{
	g_tmp = test_tmpdir("toktik");
	g_vocab = xasprintf("%s/tiktoken.vocab.json", g_tmp);
	char *cmd = xasprintf("xz -dc " FIX "/vocab.json.xz > '%s'", g_vocab);
	if (sh(cmd)) {
		printf("not ok - fixtures (xz -dc failed)\n");
		return 1;
	}
	free(cmd);
	RUN(test_v2_reference);
	RUN(test_v1_reference);
	RUN(test_specials);
	RUN(test_errors);
	free(g_vocab);
	free(g_tmp);
	return test_summary();
}
