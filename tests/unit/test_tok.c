/*
 * test_tok.c - lib/data/tok*: every check compares against ids produced by
 * independent implementations (tiktoken, Hugging Face tokenizers), stored
 * in tests/fixtures/tokenizers/ by make_refs.py: the 39 reference strings
 * under three routes, the first documents of the example corpora, and
 * tokenizer.json variants exercising normalizers, split behaviours, added
 * tokens and templates. Plus NullTokenizer, error messages, the hand-written
 * GPT-2 splitter against PCRE2, the two merge loops against each other, and
 * several threads sharing one tokenizer.
 */
#include "base/error.h"
#include "base/jsonio.h"
#include "base/sbuf.h"
#include "base/utf8.h"
#include "base/xalloc.h"
#include "data/tok.h"
#include "data/tok_bpe.h"
#include "data/tok_hf.h"
#include "test.h"
#include "tok_test.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#define FIX "tests/fixtures/tokenizers"
#define GPT2_VOCAB "examples/tokenizers/gpt2/gpt2-vocab.json"
#define GPT2_MERGES "examples/tokenizers/gpt2/gpt2-merges.txt"

static char *g_tmp;       /* scratch directory */
static char g_gpt2_dir[4300]; /* holds tokenizer.json (GPT-2), no config */
static char g_qwen_dir[4300]; /* tokenizer.json + tokenizer_config.json */

/* ---- helpers ---------------------------------------------------------- */

static int sh(const char *fmt, const char *a, const char *b)
{
	char cmd[9000];
	snprintf(cmd, sizeof(cmd), fmt, a, b);
	return system(cmd);
}

/* Run fn(arg) with stderr captured into *msg (caller frees). */
static void *capture(void *(*fn)(void *), void *arg, char **msg)
{
	struct test_capture c;
	test_capture_begin(&c, 2);
	void *r = fn(arg);
	*msg = test_capture_end(&c);
	return r;
}

static void *load_fn(void *cfg)
{
	return tok_load(cfg);
}

/* tok_load with stderr captured. */
static struct tokenizer *load_cfg(const struct tok_config *cfg, char **msg)
{
	char *m;
	struct tokenizer *t = capture(load_fn, (void *)cfg, &m);
	if (msg)
		*msg = m;
	else
		free(m);
	return t;
}

static struct tok_config cfg_of(const char *type)
{
	struct tok_config c = { 0 };
	c.type = type;
	c.vocab_size = -1;
	c.null_eod_id = -1;
	return c;
}

static struct tokenizer *load_gpt2(void)
{
	struct tok_config c = cfg_of("GPT2BPETokenizer");
	c.vocab_file = GPT2_VOCAB;
	c.merge_file = GPT2_MERGES;
	return load_cfg(&c, NULL);
}

static struct tokenizer *load_hf(const char *model, bool no_special, char **msg)
{
	struct tok_config c = cfg_of("HuggingFaceTokenizer");
	c.model = model;
	c.no_include_special = no_special;
	return load_cfg(&c, msg);
}

static void write_file(const char *path, const char *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, n, f) != n) {
		perror(path);
		abort();
	}
	fclose(f);
}

static char *tmp_path(const char *name)
{
	return xasprintf("%s/%s", g_tmp, name);
}

static json_t *read_jsonl(const char *path)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "cat '%s'", path);
	return tok_test_read_jsonl(cmd);
}

/* The "text" of every document of a corpus file. */
static json_t *corpus_texts(const char *name)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "gzip -dc examples/data/%s", name);
	json_t *lines = tok_test_read_jsonl(cmd), *texts = json_array();
	size_t i;
	json_t *v;
	json_array_foreach(lines, i, v) json_array_append(texts, json_object_get(v, "text"));
	json_decref(lines);
	return texts;
}

static int encode_str(struct tok_session *s, const json_t *str, struct tok_ids *out)
{
	out->n = 0;
	return tok_encode(s, json_string_value(str), json_string_length(str), out);
}

/* ---- the 39 reference strings, three routes --------------------------- */

static int g_ref_checked; /* (string, route) pairs whose ids matched */

static void check_refs(struct tokenizer *t, const char *key, bool roundtrip_exact)
{
	json_t *refs = read_jsonl(FIX "/reference-encodings.jsonl");
	json_t *dec = read_jsonl(FIX "/reference-decoded.jsonl");
	CHECK_INT(json_array_size(refs), 39);
	CHECK_INT(json_array_size(dec), 39);
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	size_t i;
	json_t *r;
	json_array_foreach(refs, i, r) {
		json_t *text = json_object_get(r, "text");
		CHECK_INT(encode_str(s, text, &ids), 0);
		char what[64];
		snprintf(what, sizeof(what), "%s line %zu", key, i + 1);
		if (tok_test_same_ids(&ids, json_object_get(r, key), what))
			g_ref_checked++;
		else
			CHECK(!"reference ids");
		struct sbuf sb = SBUF_INIT;
		CHECK_INT(tok_decode(t, ids.v, ids.n, &sb), 0);
		/* GPT-2 gives the text back; Qwen3 its NFC form, as HF decodes it */
		json_t *want = roundtrip_exact ? text : json_object_get(json_array_get(dec, i), "qwen3_decoded");
		CHECK_INT(sb.len, json_string_length(want));
		if (sb.len != json_string_length(want) || memcmp(sb.buf ? sb.buf : "", json_string_value(want), sb.len))
			printf("#   %s: decode differs\n", what);
		CHECK(sb.len == json_string_length(want) && !memcmp(sb.buf ? sb.buf : "", json_string_value(want), sb.len));
		sbuf_release(&sb);
	}
	tok_ids_free(&ids);
	tok_session_free(s);
	json_decref(refs);
	json_decref(dec);
}

static void test_gpt2_reference(void)
{
	struct tokenizer *t = load_gpt2();
	CHECK(t != NULL);
	if (!t)
		return;
	CHECK_INT(tok_vocab_size(t), 50257);
	CHECK_INT(tok_eod(t), 50256);
	CHECK_STR(tok_describe(t), "GPT2BPETokenizer (vocab 50257, eod 50256)");
	check_refs(t, "gpt2", true);

	/* "<|endoftext|>" inside the text is the single special id */
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	const char *txt = "a<|endoftext|>b <|endoftext|>";
	CHECK_INT(tok_encode(s, txt, strlen(txt), &ids), 0);
	int32_t want[] = { 64, 50256, 65, 220, 50256 };
	CHECK_INT(ids.n, 5);
	for (size_t i = 0; i < 5 && i < ids.n; i++)
		CHECK_INT(ids.v[i], want[i]);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);
}

static void test_hf_gpt2_reference(void)
{
	char *msg;
	struct tokenizer *t = load_hf(g_gpt2_dir, false, &msg);
	CHECK(t != NULL);
	/* no tokenizer_config.json next to it: <|endoftext|> is taken, and said */
	CHECK(msg && strstr(msg, "<|endoftext|>") && strstr(msg, "end of document"));
	free(msg);
	if (!t)
		return;
	CHECK_INT(tok_vocab_size(t), 50257);
	CHECK_INT(tok_eod(t), 50256);
	CHECK_INT(tok_pad(t), -1);
	check_refs(t, "gpt2_hf", true);
	tok_free(t);
}

static void test_qwen3_reference(void)
{
	struct tokenizer *t = load_hf(g_qwen_dir, false, NULL);
	CHECK(t != NULL);
	if (!t)
		return;
	CHECK_INT(tok_vocab_size(t), 151669);
	CHECK_INT(tok_eod(t), 151645);
	CHECK_INT(tok_pad(t), 151643); /* tokenizer_config pad_token <|endoftext|> */
	CHECK(strstr(tok_describe(t), "HuggingFaceTokenizer (") && strstr(tok_describe(t), "vocab 151669, eod 151645)"));
	check_refs(t, "qwen3", false);
	tok_free(t);
	/* the file itself, not its folder, works too */
	char *file = xasprintf("%s/tokenizer.json", g_qwen_dir);
	t = load_hf(file, false, NULL);
	CHECK(t && tok_eod(t) == 151645);
	tok_free(t);
	free(file);
}

static void test_reference_count(void)
{
	/* nothing above passed vacuously: 39 strings x 3 routes matched */
	CHECK_INT(g_ref_checked, 39 * 3);
}

/* ---- corpus documents ------------------------------------------------- */

static void test_corpus_refs(void)
{
	json_t *refs = tok_test_read_jsonl("xz -dc " FIX "/corpus-refs.jsonl.xz");
	json_t *kjv = corpus_texts("kjv.jsonl.gz"), *fort = corpus_texts("fortunes.jsonl.gz");
	struct tokenizer *g = load_gpt2(), *q = load_hf(g_qwen_dir, false, NULL);
	CHECK(g && q);
	CHECK(json_array_size(refs) >= 1000);
	if (!g || !q)
		return;
	struct tok_session *gs = tok_session_new(g), *qs = tok_session_new(q);
	struct tok_ids ids = { 0 };
	size_t i, ok = 0;
	json_t *r;
	json_array_foreach(refs, i, r) {
		const char *src = jsonio_get_str(r, "src");
		size_t doc = (size_t)json_integer_value(json_object_get(r, "doc"));
		json_t *text = json_array_get(!strcmp(src, "kjv.jsonl.gz") ? kjv : fort, doc);
		CHECK(text != NULL);
		if (!text)
			continue;
		char what[128];
		snprintf(what, sizeof(what), "%s doc %zu gpt2", src, doc);
		CHECK_INT(encode_str(gs, text, &ids), 0);
		bool a = tok_test_same_ids(&ids, json_object_get(r, "gpt2"), what);
		snprintf(what, sizeof(what), "%s doc %zu qwen3", src, doc);
		CHECK_INT(encode_str(qs, text, &ids), 0);
		bool b = tok_test_same_ids(&ids, json_object_get(r, "qwen3"), what);
		CHECK(a && b);
		ok += a && b;
	}
	CHECK_INT(ok, json_array_size(refs));
	tok_ids_free(&ids);
	tok_session_free(gs);
	tok_session_free(qs);
	tok_free(g);
	tok_free(q);
	json_decref(refs);
	json_decref(kjv);
	json_decref(fort);
}

/* ---- tokenizer.json variants ------------------------------------------ */

static void test_hf_variants(void)
{
	json_error_t je;
	json_t *vars = json_load_file(FIX "/hf-variants.json", JSON_ALLOW_NUL, &je);
	char *base_path = xasprintf("%s/tokenizer.json", g_gpt2_dir);
	json_t *base = json_load_file(base_path, 0, &je);
	CHECK(vars && base);
	CHECK_INT(json_array_size(vars), 6);
	size_t vi, checked = 0;
	json_t *v;
	json_array_foreach(vars, vi, v) {
		const char *name = jsonio_get_str(v, "name");
		json_t *j = json_deep_copy(base);
		const char *key;
		json_t *val;
		json_object_foreach(json_object_get(v, "overlay"), key, val) {
			if (!strcmp(key, "model"))
				json_object_update(json_object_get(j, "model"), val);
			else
				json_object_set(j, key, val);
		}
		char *dir = xasprintf("%s/variant-%s", g_tmp, name);
		mkdir(dir, 0755);
		char *file = xasprintf("%s/tokenizer.json", dir);
		CHECK_INT(json_dump_file(j, file, JSON_COMPACT), 0);
		json_decref(j);
		char *msg;
		struct tokenizer *t = load_hf(dir, false, &msg);
		struct tokenizer *tn = load_hf(dir, true, NULL);
		if (!t)
			printf("#   variant %s: %s\n", name, msg);
		free(msg);
		CHECK(t && tn);
		if (t && tn) {
			CHECK_INT(tok_vocab_size(t), json_integer_value(json_object_get(v, "vocab_size")));
			struct tok_session *s = tok_session_new(t), *sn = tok_session_new(tn);
			struct tok_ids ids = { 0 };
			size_t ci;
			json_t *c;
			json_array_foreach(json_object_get(v, "cases"), ci, c) {
				char what[128];
				snprintf(what, sizeof(what), "variant %s case %zu", name, ci);
				CHECK_INT(encode_str(s, json_object_get(c, "text"), &ids), 0);
				bool a = tok_test_same_ids(&ids, json_object_get(c, "ids"), what);
				snprintf(what, sizeof(what), "variant %s case %zu (no special)", name, ci);
				CHECK_INT(encode_str(sn, json_object_get(c, "text"), &ids), 0);
				bool b = tok_test_same_ids(&ids, json_object_get(c, "ids_nospecial"), what);
				CHECK(a && b);
				checked += a && b;
			}
			tok_ids_free(&ids);
			tok_session_free(s);
			tok_session_free(sn);
		}
		tok_free(t);
		tok_free(tn);
		free(file);
		free(dir);
	}
	CHECK(checked >= 6 * 39);
	json_decref(vars);
	json_decref(base);
	free(base_path);
}

/* ---- internals against each other ------------------------------------- */

/* The hand-written GPT-2 splitter gives the pieces PCRE2 gives for the
 * pattern (with megac's Oniguruma adaptation). */
static size_t compare_splitters(pcre2_code *re, pcre2_match_data *md, const char *s, size_t n)
{
	size_t i = 0, bad = 0;
	while (i < n) {
		size_t j = tok_bpe_gpt2_split(s, n, i);
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, i, 0, md, NULL);
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (rc < 0 || ov[0] != i || ov[1] != j) {
			if (!bad)
				printf("#   splitters differ at byte %zu: hand %zu, pcre2 %d [%zu, %zu)\n", i, j, rc,
				       rc < 0 ? 0 : (size_t)ov[0], rc < 0 ? 0 : (size_t)ov[1]);
			bad++;
			if (rc < 0 || ov[1] <= i)
				break;
			j = ov[1];
		}
		i = j;
	}
	return bad;
}

static void test_gpt2_splitter_vs_pcre2(void)
{
	char *pat = tok_hf_onig_to_pcre2(tok_bpe_gpt2_pattern);
	int err;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
	CHECK(re != NULL);
	free(pat);
	if (!re)
		return;
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	size_t bad = 0, bytes = 0;
	json_t *refs = read_jsonl(FIX "/reference-strings.jsonl");
	size_t i;
	json_t *r;
	json_array_foreach(refs, i, r) {
		json_t *t = json_object_get(r, "text");
		bad += compare_splitters(re, md, json_string_value(t), json_string_length(t));
		bytes += json_string_length(t);
	}
	json_decref(refs);
	const char *names[] = { "kjv.jsonl.gz", "fortunes.jsonl.gz" };
	for (int k = 0; k < 2; k++) {
		json_t *texts = corpus_texts(names[k]);
		json_array_foreach(texts, i, r) {
			bad += compare_splitters(re, md, json_string_value(r), json_string_length(r));
			bytes += json_string_length(r);
		}
		json_decref(texts);
	}
	/* random strings over a hard alphabet: contractions, spaces of all
	 * kinds (NEL, NBSP, ideographic), letters, digits, marks, symbols */
	static const char *const atoms[] = { "'", "s", "t", "re", "ve", "m", "ll", "d", "a", "Z", " ", "  ", "\t", "\n",
					     "\r\n", "\xc2\x85", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\xa8", "1", "\xd9\xa3",
					     "\xc2\xbd", "!", "?", ".", "\xcc\x81", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x8e\x89",
					     "\xe2\x80\x8b", "_", "\x1c", "\x00" };
	uint64_t rng = 12345;
	char buf[256];
	for (int it = 0; it < 20000; it++) {
		size_t n = 0;
		int k = 1 + (int)(it % 12);
		for (int a = 0; a < k; a++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			const char *at = atoms[(rng >> 33) % (sizeof(atoms) / sizeof(atoms[0]))];
			size_t l = at[0] ? strlen(at) : 1;
			memcpy(buf + n, at, l);
			n += l;
		}
		bad += compare_splitters(re, md, buf, n);
		bytes += n;
	}
	CHECK_INT(bad, 0);
	CHECK(bytes > 6500000); /* the corpus was there */
	pcre2_match_data_free(md);
	pcre2_code_free(re);
}

/* The array-scan merge loop (short words) and the heap one (long words)
 * merge identically; the references cover each on its own range. */
static void test_merge_loops_agree(void)
{
	int64_t eod;
	struct tok_hf *h = tok_gpt2_load(GPT2_VOCAB, GPT2_MERGES, NULL, 0, &eod);
	CHECK(h != NULL);
	if (!h)
		return;
	int32_t byte_id[256];
	for (int b = 0; b < 256; b++) {
		char u[4];
		size_t l = tok_bpe_utf8_put(tok_bpe_byte_cp((uint8_t)b), u);
		byte_id[b] = tok_bpe_token_id(h->bpe, u, l);
		CHECK(byte_id[b] >= 0);
	}
	struct tok_bpe_cache *c = tok_bpe_cache_new();
	json_t *texts = corpus_texts("fortunes.jsonl.gz");
	size_t i, words = 0, bad = 0;
	json_t *r;
	int32_t a[96], b[96];
	json_array_foreach(texts, i, r) {
		const char *s = json_string_value(r);
		size_t n = json_string_length(r);
		for (size_t p = 0; p < n;) {
			/* pieces of up to 96 bytes, cut at odd places on purpose */
			size_t len = 1 + (p * 7919 + i) % 96;
			if (len > n - p)
				len = n - p;
			for (size_t k = 0; k < len; k++)
				a[k] = b[k] = byte_id[(unsigned char)s[p + k]];
			size_t na = tok_bpe_merge_ids(h->bpe, c, a, len, false);
			size_t nb = tok_bpe_merge_ids(h->bpe, c, b, len, true);
			if (na != nb || memcmp(a, b, na * sizeof(*a)))
				bad++;
			words++;
			p += len;
		}
	}
	CHECK_INT(bad, 0);
	CHECK(words > 40000);
	printf("#   %zu pieces merged both ways\n", words);
	json_decref(texts);
	tok_bpe_cache_free(c);
	tok_hf_free(h);
}

/* ---- NullTokenizer ---------------------------------------------------- */

static void null_case(struct tok_session *s, const char *text, int rc, const int32_t *want, size_t nwant,
		      const char *msg_part)
{
	struct tok_ids ids = { 0 };
	int r = tok_encode(s, text, strlen(text), &ids);
	CHECK_INT(r, rc);
	if (r != rc)
		printf("#   text '%s': %s\n", text, tok_session_error(s));
	if (rc == 0) {
		CHECK_INT(ids.n, nwant);
		for (size_t i = 0; i < nwant && i < ids.n; i++)
			CHECK_INT(ids.v[i], want[i]);
	} else {
		CHECK_INT(ids.n, 0);
		CHECK(strstr(tok_session_error(s), msg_part) != NULL);
		if (!strstr(tok_session_error(s), msg_part))
			printf("#   message '%s' lacks '%s'\n", tok_session_error(s), msg_part);
	}
	tok_ids_free(&ids);
}

static void *null_decode_bad(void *arg)
{
	struct sbuf sb = SBUF_INIT;
	int32_t bad[] = { 1, 1000 };
	intptr_t r = tok_decode(arg, bad, 2, &sb);
	sbuf_release(&sb);
	return (void *)r;
}

static void test_null_tokenizer(void)
{
	struct tok_config c = cfg_of("NullTokenizer");
	char *msg;
	CHECK(load_cfg(&c, &msg) == NULL);
	CHECK(msg && strstr(msg, "--vocab-size"));
	free(msg);
	c.vocab_size = 0;
	CHECK(load_cfg(&c, &msg) == NULL);
	CHECK(msg && strstr(msg, "--vocab-size"));
	free(msg);

	c.vocab_size = 1000;
	struct tokenizer *t = load_cfg(&c, NULL);
	CHECK(t != NULL);
	if (!t)
		return;
	CHECK_INT(tok_vocab_size(t), 1000);
	CHECK_INT(tok_eod(t), 999);
	CHECK_STR(tok_describe(t), "NullTokenizer (vocab 1000, eod 999)");
	struct tok_session *s = tok_session_new(t);
	null_case(s, "1 2 3", 0, (int32_t[]){ 1, 2, 3 }, 3, NULL);
	null_case(s, "", 0, NULL, 0, NULL);
	null_case(s, "7", 0, (int32_t[]){ 7 }, 1, NULL);
	null_case(s, "+5 007 1_0 \t9\n", 0, (int32_t[]){ 5, 7, 10, 9 }, 4, NULL);
	null_case(s, "-0 999", 0, (int32_t[]){ 0, 999 }, 2, NULL);
	/* Python's int() takes any script's digits and Unicode spaces */
	null_case(s, "\xd9\xa3\xd9\xa2 \xe3\x80\x80" "4\xc2\xa0", 0, (int32_t[]){ 32, 4 }, 2, NULL);
	null_case(s, "1  2", -1, NULL, 0, "'' is not an integer");
	null_case(s, "1 2 ", -1, NULL, 0, "is not an integer");
	null_case(s, "1 x2 3", -1, NULL, 0, "'x2'");
	null_case(s, "1__0", -1, NULL, 0, "'1__0'");
	null_case(s, "_1", -1, NULL, 0, "'_1'");
	null_case(s, "1.5", -1, NULL, 0, "'1.5'");
	null_case(s, "1000", -1, NULL, 0, "'1000' is outside the vocabulary [0, 1000)");
	null_case(s, "-1", -1, NULL, 0, "'-1' is outside");
	null_case(s, "99999999999999999999999", -1, NULL, 0, "outside");
	struct sbuf sb = SBUF_INIT;
	int32_t ids[] = { 3, 0, 999 };
	CHECK_INT(tok_decode(t, ids, 3, &sb), 0);
	CHECK_STR(sb.buf, "3 0 999");
	sbuf_release(&sb);
	char *msg2;
	CHECK((intptr_t)capture(null_decode_bad, t, &msg2) == -1);
	CHECK(msg2 && strstr(msg2, "outside the NullTokenizer vocabulary [0, 1000)"));
	free(msg2);
	tok_session_free(s);
	tok_free(t);

	c.null_eod_id = 5;
	t = load_cfg(&c, NULL);
	CHECK(t && tok_eod(t) == 5);
	tok_free(t);
}

/* ---- errors ----------------------------------------------------------- */

static void expect_fail(struct tok_config *c, const char *a, const char *b)
{
	char *msg;
	struct tokenizer *t = load_cfg(c, &msg);
	CHECK(t == NULL);
	CHECK(msg && strstr(msg, a));
	if (b)
		CHECK(msg && strstr(msg, b));
	if (!msg || !strstr(msg, a) || (b && !strstr(msg, b)))
		printf("#   message was: %s", msg && *msg ? msg : "(none)\n");
	free(msg);
	tok_free(t);
}

static void test_errors(void)
{
	struct tok_config c = cfg_of("GPT2BPETokenizer");
	expect_fail(&c, "--vocab-file", NULL);
	c.vocab_file = GPT2_VOCAB;
	expect_fail(&c, "--merge-file", NULL);

	c.vocab_file = "no/such/vocab.json";
	c.merge_file = GPT2_MERGES;
	expect_fail(&c, "no/such/vocab.json", NULL);

	char *bad = tmp_path("bad-vocab.json");
	write_file(bad, "{\"a\": 0,\n \"b\": }\n", 17);
	c.vocab_file = bad;
	expect_fail(&c, bad, ":2:");
	write_file(bad, "{\"a\": \"zero\"}", 13);
	expect_fail(&c, bad, "'a'");
	free(bad);

	c.vocab_file = GPT2_VOCAB;
	c.merge_file = "no/such/merges.txt";
	expect_fail(&c, "no/such/merges.txt", NULL);

	/* a merges file cut in the middle of its line 4 */
	char *m = tmp_path("merges-cut.txt");
	const char cut[] = "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 a\nh e\nin";
	write_file(m, cut, sizeof(cut) - 1);
	c.merge_file = m;
	expect_fail(&c, m, ":5:");
	const char notin[] = "#version: 0.2\n\xc4\xa0 t\nqqqq zzzz\n";
	write_file(m, notin, sizeof(notin) - 1);
	expect_fail(&c, ":3:", "not in the vocabulary");
	free(m);

	struct tok_config h = cfg_of("HuggingFaceTokenizer");
	expect_fail(&h, "--tokenizer-model", NULL);
	h.model = "no/such/dir";
	expect_fail(&h, "no/such/dir", NULL);
	h.model = FIX "/bad-normalizer";
	expect_fail(&h, FIX "/bad-normalizer/tokenizer.json", "normalizer type 'Precompiled' is not supported");

	/* small hand-made files, one unsupported thing each */
	static const char *const cases[][2] = {
		{ "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model type 'Unigram'" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"byte_fallback\": true}, "
		  "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		  "byte_fallback = true with a ByteLevel" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		  "\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
		  "pre_tokenizer type 'Whitespace'" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": null, "
		  "\"decoder\": {\"type\": \"WordPiece\"}}",
		  "decoder type 'WordPiece'" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		  "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"post_processor\": {\"type\": \"BertProcessing\"}}",
		  "post_processor type 'BertProcessing'" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
		  "model.merges[0]" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": "
		  "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
		  "cannot compile pattern" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []", "invalid JSON" },
	};
	char *dir = tmp_path("handmade");
	mkdir(dir, 0755);
	char *file = xasprintf("%s/tokenizer.json", dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_file(file, cases[i][0], strlen(cases[i][0]));
		h.model = dir;
		expect_fail(&h, file, cases[i][1]);
	}
	free(file);
	free(dir);

	struct tok_config o = cfg_of("BertWordPieceCase");
	expect_fail(&o, "tokenizer type BertWordPieceCase is not implemented in megac yet (implemented: "
			"GPT2BPETokenizer, HuggingFaceTokenizer, SFTTokenizer, TikTokenizer, NullTokenizer, SentencePieceTokenizer",
		    NULL);
	o.type = "FooTokenizer";
	expect_fail(&o, "unknown tokenizer type 'FooTokenizer'", NULL);
}

static void *decode_fn(void *arg)
{
	struct tokenizer *t = arg;
	struct sbuf sb = SBUF_INIT;
	int32_t ids[] = { 15496, 99999999 };
	intptr_t r = tok_decode(t, ids, 2, &sb);
	sbuf_release(&sb);
	return (void *)r;
}

static void test_encode_decode_edges(void)
{
	struct tokenizer *t = load_gpt2();
	CHECK(t != NULL);
	if (!t)
		return;
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	/* invalid UTF-8 is refused without printing */
	CHECK_INT(tok_encode(s, "ok \xff\xfe", 5, &ids), -1);
	CHECK(strstr(tok_session_error(s), "invalid UTF-8 at byte 3") != NULL);
	CHECK_INT(ids.n, 0);
	/* ids are appended */
	tok_ids_push(&ids, 7);
	CHECK_INT(tok_encode(s, "Hello", 5, &ids), 0);
	CHECK_INT(ids.n, 2);
	CHECK_INT(ids.v[1], 15496);
	/* a single token that is not valid UTF-8 alone decodes to raw bytes */
	struct sbuf sb = SBUF_INIT;
	int32_t half[] = { 447 }; /* "\xe2\x80" */
	CHECK_INT(tok_decode(t, half, 1, &sb), 0);
	CHECK_INT(sb.len, 2);
	CHECK(sb.len == 2 && (unsigned char)sb.buf[0] == 0xe2 && (unsigned char)sb.buf[1] == 0x80);
	sbuf_release(&sb);
	char *msg;
	CHECK((intptr_t)capture(decode_fn, t, &msg) == -1);
	CHECK(msg && strstr(msg, "99999999"));
	free(msg);
	/* a long word without spaces goes through the heap merge loop */
	struct sbuf big = SBUF_INIT;
	for (int i = 0; i < 20000; i++)
		sbuf_addstr(&big, i % 3 ? "ab" : "xyz");
	ids.n = 0;
	CHECK_INT(tok_encode(s, big.buf, big.len, &ids), 0);
	sbuf_reset(&sb);
	CHECK_INT(tok_decode(t, ids.v, ids.n, &sb), 0);
	CHECK(sb.len == big.len && !memcmp(sb.buf, big.buf, big.len));
	sbuf_release(&sb);
	sbuf_release(&big);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);
}

static void test_special_tokens_flag(void)
{
	struct tok_config c = cfg_of("HuggingFaceTokenizer");
	char *special[] = { "<|newtok|>", "<|im_end|>", "Hello", "<|newtok2|>" };
	c.model = g_qwen_dir;
	c.special_tokens = special;
	c.n_special_tokens = 4;
	struct tokenizer *t = load_cfg(&c, NULL);
	CHECK(t != NULL);
	if (!t)
		return;
	/* two new ids; "<|im_end|>" and the vocabulary word "Hello" keep theirs */
	CHECK_INT(tok_vocab_size(t), 151671);
	CHECK_INT(tok_eod(t), 151645);
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	const char *txt = "a<|newtok|>b<|newtok2|>Hello";
	CHECK_INT(tok_encode(s, txt, strlen(txt), &ids), 0);
	int32_t want[] = { 64, 151669, 65, 151670, 9707 };
	CHECK_INT(ids.n, 5);
	for (size_t i = 0; i < 5 && i < ids.n; i++)
		CHECK_INT(ids.v[i], want[i]);
	/* "Hello" is now an added token: cut out of words too */
	ids.n = 0;
	CHECK_INT(tok_encode(s, "xHelloy", 7, &ids), 0);
	CHECK_INT(ids.n, 3);
	CHECK(ids.n == 3 && ids.v[1] == 9707);
	struct sbuf sb = SBUF_INIT;
	CHECK_INT(tok_decode(t, want, 5, &sb), 0);
	CHECK_STR(sb.buf, txt);
	sbuf_release(&sb);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);

	/* GPT2BPETokenizer takes them too (it is HF's GPT-2 tokenizer) */
	struct tok_config g = cfg_of("GPT2BPETokenizer");
	char *gs[] = { "<|sep|>" };
	g.vocab_file = GPT2_VOCAB;
	g.merge_file = GPT2_MERGES;
	g.special_tokens = gs;
	g.n_special_tokens = 1;
	t = load_cfg(&g, NULL);
	CHECK(t && tok_vocab_size(t) == 50258 && tok_eod(t) == 50256);
	if (!t)
		return;
	s = tok_session_new(t);
	CHECK_INT(tok_encode(s, "a<|sep|>b", 9, &ids), 0);
	CHECK(ids.n == 3 && ids.v[0] == 64 && ids.v[1] == 50257 && ids.v[2] == 65);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);
}

/* ---- threads ---------------------------------------------------------- */

struct thr {
	struct tokenizer *t;
	json_t *texts;
	uint64_t *hash; /* per document */
	int fails;
};

static uint64_t hash_ids(const struct tok_ids *ids)
{
	uint64_t h = 1469598103934665603ull ^ ids->n;
	for (size_t i = 0; i < ids->n; i++)
		h = (h ^ (uint32_t)ids->v[i]) * 1099511628211ull;
	return h;
}

static void *thr_main(void *arg)
{
	struct thr *w = arg;
	struct tok_session *s = tok_session_new(w->t);
	struct tok_ids ids = { 0 };
	size_t i;
	json_t *v;
	json_array_foreach(w->texts, i, v) {
		if (encode_str(s, v, &ids))
			w->fails++;
		w->hash[i] = hash_ids(&ids);
	}
	tok_ids_free(&ids);
	tok_session_free(s);
	return NULL;
}

static void threads_agree(struct tokenizer *t, json_t *texts)
{
	size_t n = json_array_size(texts);
	struct thr one = { t, texts, calloc(n, sizeof(uint64_t)), 0 };
	thr_main(&one);
	struct thr w[4];
	pthread_t th[4];
	for (int k = 0; k < 4; k++) {
		w[k] = (struct thr){ t, texts, calloc(n, sizeof(uint64_t)), 0 };
		CHECK_INT(pthread_create(&th[k], NULL, thr_main, &w[k]), 0);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(th[k], NULL);
		CHECK_INT(w[k].fails, 0);
		CHECK(!memcmp(w[k].hash, one.hash, n * sizeof(uint64_t)));
		free(w[k].hash);
	}
	CHECK_INT(one.fails, 0);
	free(one.hash);
}

static void test_threads(void)
{
	struct tokenizer *g = load_gpt2(), *q = load_hf(g_qwen_dir, false, NULL);
	CHECK(g && q);
	if (!g || !q)
		return;
	json_t *kjv = corpus_texts("kjv.jsonl.gz"), *fort = corpus_texts("fortunes.jsonl.gz");
	CHECK(json_array_size(kjv) > 1000 && json_array_size(fort) > 10000);
	threads_agree(g, kjv);
	threads_agree(g, fort);
	threads_agree(q, fort);
	json_decref(kjv);
	json_decref(fort);
	tok_free(g);
	tok_free(q);
}

/* ---- hardening: crafted files and flags ------------------------------- */

/* A folder under the scratch directory holding tokenizer.json (and
 * tokenizer_config.json when config is not NULL); caller frees. */
static char *tok_dir(const char *name, const char *json, const char *config)
{
	char *dir = tmp_path(name);
	mkdir(dir, 0755);
	char *f = xasprintf("%s/tokenizer.json", dir);
	write_file(f, json, strlen(json));
	free(f);
	f = xasprintf("%s/tokenizer_config.json", dir);
	if (config)
		write_file(f, config, strlen(config));
	else
		unlink(f);
	free(f);
	return dir;
}

/* The GPT-2 tokenizer.json with its pre_tokenizer replaced; caller frees. */
static char *gpt2_with_pretok(const char *name, const char *pretok_json)
{
	json_error_t je;
	char *base_path = xasprintf("%s/tokenizer.json", g_gpt2_dir);
	json_t *root = json_load_file(base_path, 0, &je);
	free(base_path);
	json_t *pre = json_loads(pretok_json, 0, &je);
	if (!root || !pre) {
		printf("#   bad test JSON: %s\n", je.text);
		abort();
	}
	json_object_set_new(root, "pre_tokenizer", pre);
	char *dir = tmp_path(name);
	mkdir(dir, 0755);
	char *f = xasprintf("%s/tokenizer.json", dir);
	CHECK_INT(json_dump_file(root, f, JSON_COMPACT), 0);
	free(f);
	json_decref(root);
	return dir;
}

/* Encode and decode s; true when the ids give the text back. */
static bool roundtrips(struct tokenizer *t, const char *s)
{
	struct tok_session *ss = tok_session_new(t);
	struct tok_ids ids = { 0 };
	struct sbuf sb = SBUF_INIT;
	bool ok = tok_encode(ss, s, strlen(s), &ids) == 0 && tok_decode(t, ids.v, ids.n, &sb) == 0 &&
		  sb.len == strlen(s) && !memcmp(sb.buf, s, sb.len);
	sbuf_release(&sb);
	tok_ids_free(&ids);
	tok_session_free(ss);
	return ok;
}

/* \C matches one byte even in UTF mode: a Split on it cut characters in
 * half, and later stages (which skip PCRE2's UTF-8 check) read past the
 * piece. Such a file is refused; \X alone still works. */
static void test_regex_backslash_c(void)
{
	static const char text[] = "h\xc3\xa9llo \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80";
	char *dir = gpt2_with_pretok("split-C", "{\"type\": \"Sequence\", \"pretokenizers\": ["
						"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\C\"}, "
						"\"behavior\": \"Isolated\", \"invert\": false},"
						"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\X\"}, "
						"\"behavior\": \"Isolated\", \"invert\": false},"
						"{\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}");
	char *msg, *file = xasprintf("%s/tokenizer.json", dir);
	struct tokenizer *t = load_hf(dir, false, &msg);
	CHECK(t == NULL);
	CHECK(msg && strstr(msg, file) && strstr(msg, "'\\C'"));
	if (!msg || !strstr(msg, "'\\C'"))
		printf("#   message was: %s", msg ? msg : "(none)\n");
	if (t) /* before the fix: ASan reports a heap-buffer-overflow here */
		CHECK(roundtrips(t, text));
	tok_free(t);
	free(msg);
	free(file);
	free(dir);

	/* inside a class, after other text, and a literal "\C" string is fine */
	dir = gpt2_with_pretok("split-C2", "{\"type\": \"Sequence\", \"pretokenizers\": ["
					   "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a|(?:\\\\C\\\\C)\"}, "
					   "\"behavior\": \"Isolated\", \"invert\": false},"
					   "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}");
	t = load_hf(dir, false, &msg);
	CHECK(t == NULL);
	CHECK(msg && strstr(msg, "a|(?:\\C\\C)"));
	tok_free(t);
	free(msg);
	free(dir);
	dir = gpt2_with_pretok("split-C3", "{\"type\": \"Sequence\", \"pretokenizers\": ["
					   "{\"type\": \"Split\", \"pattern\": {\"String\": \"\\\\C\"}, "
					   "\"behavior\": \"Isolated\", \"invert\": false},"
					   "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}");
	t = load_hf(dir, false, NULL);
	CHECK(t != NULL);
	if (t) {
		CHECK(roundtrips(t, text));
		CHECK(roundtrips(t, "a\\Cb\\C"));
	}
	tok_free(t);
	free(dir);

	/* \X (grapheme clusters), then ByteLevel: every piece stays whole */
	dir = gpt2_with_pretok("split-X", "{\"type\": \"Sequence\", \"pretokenizers\": ["
					  "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\X\"}, "
					  "\"behavior\": \"Isolated\", \"invert\": false},"
					  "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?<=\\\\p{L})\"}, "
					  "\"behavior\": \"Isolated\", \"invert\": false},"
					  "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}");
	t = load_hf(dir, false, NULL);
	CHECK(t != NULL);
	if (t) {
		CHECK(roundtrips(t, text));
		CHECK(roundtrips(t, "e\xcc\x81\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb x"));
	}
	tok_free(t);
	free(dir);

	/* and should a pattern still match inside a character (built here by
	 * hand, past the loader), encoding stops with a reason, reading nothing
	 * outside the text */
	int64_t eod;
	struct tok_hf *hf = tok_gpt2_load(GPT2_VOCAB, GPT2_MERGES, NULL, 0, &eod);
	CHECK(hf != NULL);
	if (hf) {
		static const char *const pats[] = { "\\C", "\\X" };
		hf->n_stages = 0;
		for (int k = 0; k < 2; k++) {
			int err;
			PCRE2_SIZE off;
			tok_hf_add_stage(hf, TOK_HF_STAGE_REGEX, TOK_HF_ISOLATED);
			hf->stages[k].re = pcre2_compile((PCRE2_SPTR)pats[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
							 &err, &off, NULL);
			CHECK(hf->stages[k].re != NULL);
		}
		tok_hf_add_stage(hf, TOK_HF_STAGE_GPT2, TOK_HF_ISOLATED);
		struct tok_hf_session *hs = tok_hf_session_new(hf);
		struct tok_ids ids = { 0 };
		const char *why = NULL;
		CHECK_INT(tok_hf_encode(hs, text, strlen(text), false, &ids, &why), -1);
		CHECK(why && strstr(why, "inside a character"));
		tok_ids_free(&ids);
		tok_hf_session_free(hs);
		tok_hf_free(hf);
	}

	/* --tokenizer-special-tokens that are not UTF-8 would match inside a
	 * character: refused */
	struct tok_config c = cfg_of("GPT2BPETokenizer");
	char *bad[] = { "\x80" };
	c.vocab_file = GPT2_VOCAB;
	c.merge_file = GPT2_MERGES;
	c.special_tokens = bad;
	c.n_special_tokens = 1;
	t = load_cfg(&c, &msg);
	CHECK(t == NULL);
	CHECK(msg && strstr(msg, "--tokenizer-special-tokens") && strstr(msg, "\\x80"));
	tok_free(t);
	free(msg);
	c = cfg_of("HuggingFaceTokenizer");
	c.model = g_gpt2_dir;
	c.special_tokens = bad;
	c.n_special_tokens = 1;
	t = load_cfg(&c, &msg);
	CHECK(t == NULL);
	CHECK(msg && strstr(msg, "--tokenizer-special-tokens") && strstr(msg, "\\x80"));
	tok_free(t);
	free(msg);
}

static void test_null_eod_id(void)
{
	struct tok_config c = cfg_of("NullTokenizer");
	c.vocab_size = 70000;
	c.null_eod_id = 4294967297LL; /* was id 1 */
	expect_fail(&c, "--null-tokenizer-eod-id", "4294967297");
	c.null_eod_id = 2147483648LL; /* was -2147483648 */
	expect_fail(&c, "--null-tokenizer-eod-id", "2147483648");
	c.null_eod_id = -2; /* was the default */
	expect_fail(&c, "--null-tokenizer-eod-id", "-2");
	c.null_eod_id = INT64_MIN;
	expect_fail(&c, "--null-tokenizer-eod-id", "-9223372036854775808");

	c.null_eod_id = -1;
	struct tokenizer *t = load_cfg(&c, NULL);
	CHECK(t && tok_eod(t) == 69999);
	tok_free(t);
	c.null_eod_id = INT32_MAX;
	t = load_cfg(&c, NULL);
	CHECK(t && tok_eod(t) == INT32_MAX);
	tok_free(t);
	c.null_eod_id = 0;
	t = load_cfg(&c, NULL);
	CHECK(t && tok_eod(t) == 0);
	tok_free(t);

	c.null_eod_id = -1;
	c.vocab_size = -5;
	expect_fail(&c, "--vocab-size", "-5");
	c.vocab_size = 2147483648LL;
	expect_fail(&c, "--vocab-size", "2147483648");
	c.vocab_size = INT32_MAX;
	t = load_cfg(&c, NULL);
	CHECK(t && tok_vocab_size(t) == INT32_MAX && tok_eod(t) == INT32_MAX - 1);
	tok_free(t);
	c.vocab_size = 1;
	t = load_cfg(&c, NULL);
	CHECK(t && tok_eod(t) == 0);
	tok_free(t);
}

#define MINI_MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"
#define MINI_PRE "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}"

static void test_json_field_types(void)
{
	struct tok_config h = cfg_of("HuggingFaceTokenizer");
	static const char *const cases[][2] = {
		{ "{\"model\": {\"type\": 5, \"vocab\": {\"a\": 0}, \"merges\": []}, " MINI_PRE "}", "model.type" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": 0}, " MINI_PRE
		  "}",
		  "model.unk_token" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"ignore_merges\": \"yes\"}, "
		  MINI_PRE "}",
		  "model.ignore_merges" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"fuse_unk\": 1}, " MINI_PRE
		  "}",
		  "model.fuse_unk" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"byte_fallback\": \"true\"}, "
		  MINI_PRE "}",
		  "model.byte_fallback" },
		{ "{" MINI_MODEL ", \"normalizer\": {\"type\": 3}, " MINI_PRE "}", "normalizer.type" },
		{ "{" MINI_MODEL ", \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, 7]}, "
		  MINI_PRE "}",
		  "normalizer.normalizers[1]" },
		{ "{" MINI_MODEL ", \"pre_tokenizer\": {\"type\": true}}", "pre_tokenizer.type" },
		{ "{" MINI_MODEL ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": \"false\"}}",
		  "pre_tokenizer.add_prefix_space" },
		{ "{" MINI_MODEL ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": 0}}",
		  "pre_tokenizer.use_regex" },
		{ "{" MINI_MODEL ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
		  "\"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\", \"invert\": \"no\"}, "
		  "{\"type\": \"ByteLevel\"}]}}",
		  "pre_tokenizer.pretokenizers[0].invert" },
		{ "{" MINI_MODEL ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
		  "\"Split\", \"pattern\": {\"Regex\": 5}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}}",
		  "pre_tokenizer.pretokenizers[0].pattern" },
		{ "{" MINI_MODEL ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
		  "\"Digits\", \"individual_digits\": 1}, {\"type\": \"ByteLevel\"}]}}",
		  "pre_tokenizer.pretokenizers[0].individual_digits" },
		{ "{" MINI_MODEL ", " MINI_PRE ", \"post_processor\": {\"type\": [\"ByteLevel\"]}}",
		  "post_processor.type" },
		{ "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [{\"id\": \"3\", \"content\": \"<s>\"}]}",
		  "added_tokens[0].id" },
		{ "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [{\"id\": 3, \"content\": 5}]}",
		  "added_tokens[0].content" },
		{ "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"special\": "
		  "\"true\"}]}",
		  "added_tokens[0].special" },
		{ "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"normalized\": "
		  "null, \"lstrip\": 1}]}",
		  "added_tokens[0].lstrip" },
		{ "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [5]}", "added_tokens[0]" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *dir = tok_dir("types", cases[i][0], NULL);
		char *file = xasprintf("%s/tokenizer.json", dir);
		h.model = dir;
		expect_fail(&h, file, cases[i][1]);
		free(file);
		free(dir);
	}

	/* tokenizer_config.json */
	static const char *const cfgs[][2] = {
		{ "[]", "tokenizer_config.json: not a JSON object" },
		{ "{\"eos_token\": 5}", "tokenizer_config.json: eos_token must be a string or an object with \"content\"" },
		{ "{\"eos_token\": {\"content\": 5}}",
		  "tokenizer_config.json: eos_token must be a string or an object with \"content\"" },
		{ "{\"bos_token\": [\"<s>\"]}", "tokenizer_config.json: bos_token must be" },
		{ "{\"additional_special_tokens\": \"<x>\"}",
		  "tokenizer_config.json: additional_special_tokens must be an array" },
		{ "{\"additional_special_tokens\": [\"<x>\", 5]}",
		  "tokenizer_config.json: additional_special_tokens[1] must be a string or an object" },
		{ "{\"eos_token\": {\"content\": \"<e>\", \"lstrip\": \"yes\"}}",
		  "tokenizer_config.json: eos_token.lstrip" },
	};
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
		char *dir = tok_dir("types-cfg", "{" MINI_MODEL ", " MINI_PRE "}", cfgs[i][0]);
		h.model = dir;
		expect_fail(&h, dir, cfgs[i][1]);
		free(dir);
	}
	/* the well-typed forms load */
	char *dir = tok_dir("types-ok",
			    "{" MINI_MODEL ", \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
			    "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
			    "\"added_tokens\": [{\"id\": 3, \"content\": \"<e>\", \"special\": true, \"normalized\": "
			    "false, \"lstrip\": false, \"rstrip\": false, \"single_word\": false}]}",
			    "{\"eos_token\": {\"content\": \"<e>\", \"lstrip\": false, \"__type\": \"AddedToken\"}, "
			    "\"bos_token\": null, \"pad_token\": \"<e>\", \"additional_special_tokens\": [\"<x>\"]}");
	h.model = dir;
	char *msg;
	struct tokenizer *t = load_cfg(&h, &msg);
	CHECK(t && tok_eod(t) == 3 && tok_vocab_size(t) == 5);
	if (!t)
		printf("#   message was: %s", msg ? msg : "(none)\n");
	free(msg);
	tok_free(t);
	free(dir);
}

static void test_template_ids(void)
{
	struct tok_config h = cfg_of("HuggingFaceTokenizer");
	static const char *const cases[][2] = {
		/* id past the vocabulary */
		{ "{" MINI_MODEL ", " MINI_PRE ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
		  "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
		  "\"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [70000], "
		  "\"tokens\": [\"<s>\"]}}}}",
		  "special token '<s>' has id 70000, which is past the vocabulary (3 tokens)" },
		/* id inside the range but not a token (the vocabulary skips 1) */
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2}, \"merges\": []}, " MINI_PRE
		  ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": \"$A <e>\", "
		  "\"special_tokens\": {\"<e>\": {\"id\": \"<e>\", \"ids\": [1], \"tokens\": [\"<e>\"]}}}}",
		  "special token '<e>' has id 1, which is not in the vocabulary" },
		/* inside a Sequence of processors, just past the end */
		{ "{" MINI_MODEL ", " MINI_PRE ", \"post_processor\": {\"type\": \"Sequence\", \"processors\": "
		  "[{\"type\": \"ByteLevel\"}, {\"type\": \"TemplateProcessing\", \"single\": \"<s> $A\", "
		  "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [3], \"tokens\": [\"<s>\"]}}}]}}",
		  "special token '<s>' has id 3, which is past the vocabulary" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *dir = tok_dir("tmpl", cases[i][0], NULL);
		char *file = xasprintf("%s/tokenizer.json", dir);
		h.model = dir;
		expect_fail(&h, file, cases[i][1]);
		free(file);
		free(dir);
	}
	/* an added token's id is fine */
	char *dir = tok_dir("tmpl-ok",
			    "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", "
			    "\"special\": true}], \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
			    "\"<s> $A\", \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [3], \"tokens\": "
			    "[\"<s>\"]}}}}",
			    NULL);
	h.model = dir;
	struct tokenizer *t = load_cfg(&h, NULL);
	CHECK(t != NULL);
	if (t) {
		struct tok_session *s = tok_session_new(t);
		struct tok_ids ids = { 0 };
		CHECK_INT(tok_encode(s, "ab", 2, &ids), 0);
		CHECK(ids.n == 2 && ids.v[0] == 3 && ids.v[1] == 2);
		tok_ids_free(&ids);
		tok_session_free(s);
	}
	tok_free(t);
	free(dir);
}

/* A message is one line of valid UTF-8. */
static bool one_line(const char *m)
{
	size_t n = strlen(m);
	if (n && m[n - 1] == '\n')
		n--;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)m[i] < 0x20 || m[i] == 0x7f)
			return false;
	return utf8_valid(m, n, NULL);
}

static void test_messages_one_line(void)
{
	struct tok_config c = cfg_of("NullTokenizer");
	c.vocab_size = 1000;
	struct tokenizer *t = load_cfg(&c, NULL);
	CHECK(t != NULL);
	if (!t)
		return;
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	CHECK_INT(tok_encode(s, "1 x\ny\r\x01\x7f", 8, &ids), -1);
	CHECK(one_line(tok_session_error(s)));
	CHECK(strstr(tok_session_error(s), "'x\\ny\\r\\x01\\x7f' is not an integer") != NULL);
	printf("#   %s\n", tok_session_error(s));
	/* 39 ASCII bytes then a 2-byte character: the excerpt stops before it */
	char long_piece[64];
	memset(long_piece, 'z', 39);
	memcpy(long_piece + 39, "\xc3\xa9zzzz", 7);
	CHECK_INT(tok_encode(s, long_piece, 46, &ids), -1);
	CHECK(one_line(tok_session_error(s)));
	CHECK(strstr(tok_session_error(s), "zzz'... is not") != NULL);
	printf("#   %s\n", tok_session_error(s));
	/* a 3-byte character across the cut, and a tab */
	memset(long_piece, '\t', 38);
	memcpy(long_piece + 38, "q\xe4\xb8\xadzz", 6);
	CHECK_INT(tok_encode(s, long_piece, 44, &ids), -1);
	CHECK(one_line(tok_session_error(s)));
	CHECK(strstr(tok_session_error(s), "\\tq'...") != NULL);
	/* too large: the same excerpt */
	CHECK_INT(tok_encode(s, "12345678901234567890123456789012345678901234567890", 50, &ids), -1);
	CHECK(strstr(tok_session_error(s), "'1234567890123456789012345678901234567890'... is outside") != NULL);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);

	/* merges files: control characters and invalid bytes as escapes */
	struct tok_config g = cfg_of("GPT2BPETokenizer");
	g.vocab_file = GPT2_VOCAB;
	char *m = tmp_path("merges-ctl.txt");
	g.merge_file = m;
	static const char *const bad[][2] = {
		{ "#version: 0.2\n\xc4\xa0 t\na\tb c d\n", "'a\\tb c d'" },
		{ "#version: 0.2\n\xc4\xa0 t\n\xff\xfe x\n", "'\\xff\\xfe x'" },
		{ "#version: 0.2\n\xc4\xa0 t\na\x1b[31m b\n", "'a\\x1b[31m b'" },
		{ "#version: 0.2\n\xc4\xa0 t\nab\rc d e\n", "'ab\\rc d e'" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(m, bad[i][0], strlen(bad[i][0]));
		char *msg;
		t = load_cfg(&g, &msg);
		CHECK(t == NULL);
		CHECK(msg && one_line(msg) && strstr(msg, bad[i][1]) && strstr(msg, ":3:"));
		printf("#   %s", msg ? msg : "(none)\n");
		free(msg);
		tok_free(t);
	}
	/* a long line: cut at a character boundary */
	struct sbuf sb = SBUF_INIT;
	sbuf_addstr(&sb, "#version: 0.2\n");
	for (int i = 0; i < 79; i++)
		sbuf_addch(&sb, 'a');
	sbuf_addstr(&sb, "\xc4\xa0 b c\n");
	write_file(m, sb.buf, sb.len);
	sbuf_release(&sb);
	char *msg;
	t = load_cfg(&g, &msg);
	CHECK(t == NULL);
	CHECK(msg && one_line(msg) && strstr(msg, "aaa'..."));
	free(msg);
	tok_free(t);
	free(m);

	/* tokenizer.json strings echoed in messages */
	struct tok_config h = cfg_of("HuggingFaceTokenizer");
	char *dir = tok_dir("ctl", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
				   "\"unk_token\": \"x\\ny\"}, " MINI_PRE "}",
			    NULL);
	h.model = dir;
	t = load_cfg(&h, &msg);
	CHECK(t == NULL);
	CHECK(msg && one_line(msg) && strstr(msg, "'x\\ny'"));
	free(msg);
	tok_free(t);
	free(dir);
}

/* Loading many added tokens stays fast (the lookups are hashed). */
static void test_many_added_tokens(void)
{
	enum { N = 50000 };
	struct sbuf sb = SBUF_INIT;
	sbuf_addstr(&sb, "{" MINI_MODEL ", " MINI_PRE ", \"added_tokens\": [");
	for (int i = 0; i < N; i++)
		sbuf_addf(&sb, "%s{\"id\": %d, \"content\": \"<|tok_%d|>\", \"special\": true}", i ? ", " : "", 3 + i, i);
	sbuf_addstr(&sb, "]}");
	char *dir = tok_dir("many-added", sb.buf, "{\"eos_token\": \"<|tok_49999|>\"}");
	sbuf_release(&sb);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	struct tokenizer *t = load_hf(dir, false, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double sec = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	printf("#   %d added tokens loaded in %.3f s\n", N, sec);
	CHECK(t && tok_vocab_size(t) == 3 + N && tok_eod(t) == 3 + N - 1);
	/* quadratic lookups took 2.6 s (-O2); hashed 0.09 s, 0.35 s with ASan */
	CHECK(sec < (getenv("MEGAC_SANITIZE") ? 2.5 : 1.0));
	if (t) {
		struct tok_session *s = tok_session_new(t);
		struct tok_ids ids = { 0 };
		CHECK_INT(tok_encode(s, "ab<|tok_7|>a<|tok_12345|>", 25, &ids), 0);
		CHECK(ids.n == 4 && ids.v[0] == 2 && ids.v[1] == 10 && ids.v[2] == 0 && ids.v[3] == 12348);
		tok_ids_free(&ids);
		tok_session_free(s);
	}
	tok_free(t);
	free(dir);
}

int main(void)
{
	g_tmp = test_tmpdir("tok");
	snprintf(g_gpt2_dir, sizeof(g_gpt2_dir), "%s/gpt2", g_tmp);
	snprintf(g_qwen_dir, sizeof(g_qwen_dir), "%s/qwen3", g_tmp);
	if (sh("mkdir -p '%s' '%s'", g_gpt2_dir, g_qwen_dir) ||
	    sh("xz -dc " FIX "/gpt2/tokenizer.json.xz > '%s/tokenizer.json'%s", g_gpt2_dir, "") ||
	    sh("xz -dc " FIX "/qwen3/tokenizer.json.xz > '%s/tokenizer.json'%s", g_qwen_dir, "") ||
	    sh("cp " FIX "/qwen3/tokenizer_config.json '%s/'%s", g_qwen_dir, "")) {
		printf("not ok - fixtures (xz -dc failed)\n");
		return 1;
	}
	RUN(test_gpt2_reference);
	RUN(test_hf_gpt2_reference);
	RUN(test_qwen3_reference);
	RUN(test_reference_count);
	RUN(test_corpus_refs);
	RUN(test_hf_variants);
	RUN(test_gpt2_splitter_vs_pcre2);
	RUN(test_merge_loops_agree);
	RUN(test_null_tokenizer);
	RUN(test_errors);
	RUN(test_encode_decode_edges);
	RUN(test_special_tokens_flag);
	RUN(test_threads);
	RUN(test_null_eod_id);
	RUN(test_json_field_types);
	RUN(test_template_ids);
	RUN(test_messages_one_line);
	RUN(test_many_added_tokens);
	RUN(test_regex_backslash_c);
	free(g_tmp);
	return test_summary();
}
