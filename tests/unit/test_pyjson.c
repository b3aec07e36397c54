/*
 * test_pyjson.c - lib/base/pyjson: json.dumps() text and float repr() as
 * CPython 3.11 (/usr/bin/python3) writes them, and a cache-hash example
 * (a GPTDataset description and its md5, as Megatron's
 * megatron/core/datasets/megatron_dataset.py computes it).
 */
#include <math.h>

#include "base/error.h"
#include "base/md5.h"
#include "base/pyjson.h"
#include "base/sbuf.h"
#include "test.h"

static char *dir;

/* Run a Python script with numpy's interpreter (test.h: test_python). */
static char *py(const char *script)
{
	return test_python(dir, "import sys, os, json, struct\nD = sys.argv[1]\n", script);
}

static void check_same_text(const char *what, const char *ours, const char *ref)
{
	CHECK(ref != NULL);
	if (!ref || !strcmp(ours, ref))
		return;
	const char *a = ours, *b = ref;
	while (*a && *a == *b)
		a++, b++;
	while (a > ours && a[-1] != '\n')
		a--, b--;
	printf("#   %s differs from Python at\n#   ours:   %.200s\n#   python: %.200s\n", what, a, b);
	CHECK(!"same as Python");
}

static void write_text(const char *name, const char *text)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f))
		abort();
}

static const char example_text[] =
	"{\n"
	"    \"class\": \"GPTDataset\",\n"
	"    \"dataset_path\": \"/data/x_text_document\",\n"
	"    \"num_samples\": 6400,\n"
	"    \"index_split\": \"train\",\n"
	"    \"random_seed\": 1234,\n"
	"    \"sequence_length\": 1024,\n"
	"    \"split\": \"969,30,1\",\n"
	"    \"split_matrix\": [\n"
	"        [\n"
	"            0,\n"
	"            0.969\n"
	"        ],\n"
	"        [\n"
	"            0.969,\n"
	"            0.999\n"
	"        ],\n"
	"        [\n"
	"            0.999,\n"
	"            1.0\n"
	"        ]\n"
	"    ],\n"
	"    \"tokenizer\": {\n"
	"        \"class\": \"megatron.core.tokenizers.text.text_tokenizer.MegatronTokenizerText\",\n"
	"        \"tokenizer_path\": null,\n"
	"        \"vocab_size\": \"1000\",\n"
	"        \"pad_id\": \"-1\"\n"
	"    }\n"
	"}";

static void test_cache_hash_example(void)
{
	/* Megatron's split matrix for "969,30,1": cumulative float sums, the
	 * first bound the integer 0. */
	double w[3] = { 969, 30, 1 }, sum = 1000, acc = 0, b[4];
	b[0] = 0;
	for (int i = 0; i < 3; i++) {
		acc += w[i] / sum;
		b[i + 1] = acc;
	}
	json_t *o = json_object();
	json_object_set_new(o, "class", json_string("GPTDataset"));
	json_object_set_new(o, "dataset_path", json_string("/data/x_text_document"));
	json_object_set_new(o, "num_samples", json_integer(6400));
	json_object_set_new(o, "index_split", json_string("train"));
	json_object_set_new(o, "random_seed", json_integer(1234));
	json_object_set_new(o, "sequence_length", json_integer(1024));
	json_object_set_new(o, "split", json_string("969,30,1"));
	json_t *m = json_array();
	for (int i = 0; i < 3; i++) {
		json_t *pair = json_array();
		json_array_append_new(pair, i == 0 ? json_integer(0) : json_real(b[i]));
		json_array_append_new(pair, json_real(b[i + 1]));
		json_array_append_new(m, pair);
	}
	json_object_set_new(o, "split_matrix", m);
	json_t *t = json_object();
	json_object_set_new(t, "class", json_string("megatron.core.tokenizers.text.text_tokenizer.MegatronTokenizerText"));
	json_object_set_new(t, "tokenizer_path", json_null());
	json_object_set_new(t, "vocab_size", json_string("1000"));
	json_object_set_new(t, "pad_id", json_string("-1"));
	json_object_set_new(o, "tokenizer", t);

	struct sbuf s = SBUF_INIT;
	CHECK_INT(pyjson_dumps(o, 4, &s), 0);
	CHECK_STR(s.buf, example_text);
	char hex[33];
	md5_hex(s.buf, s.len, hex);
	CHECK_STR(hex, "4bccc326b39fb123e4ce9d06982781b7");
	sbuf_release(&s);
	json_decref(o);
}

/* JSON documents, one per line, parsed by jansson (document order is
 * insertion order) and by Python's json.loads, then dumped by both. */
static const char *const docs[] = {
	"{}",
	"[]",
	"[[], {}, [[]], {\"a\": {}}]",
	"null",
	"true",
	"false",
	"0",
	"-0",
	"9223372036854775807",
	"-9223372036854775808",
	"0.0",
	"-0.0",
	"1.0",
	"1.5",
	"100.0",
	"0.1",
	"0.0001",
	"0.00001",
	"1e16",
	"9999999999999998.0",
	"123456789012345678.0",
	"5e-324",
	"1.7976931348623157e308",
	"2.2250738585072014e-308",
	"[1, 2.0, \"3\", null, true, false]",
	"\"\"",
	"\"plain ascii / slash\"",
	"\"quote \\\" backslash \\\\ newline \\n cr \\r tab \\t bs \\b ff \\f\"",
	"\"controls \\u0000 \\u0001 \\u001f \\u007f del\"",
	"\"latin \\u00e9 \\u00ff cjk \\u4e2d\\u6587 bmp-end \\uffff \\ufeff\"",
	"\"astral \\ud83d\\ude00 \\ud800\\udc00 \\udbff\\udfff\"",
	"{\"\\u00e9l\\u00e8ve\": \"caf\\u00e9\", \"k\\ny\": [\"\\u2028\"]}",
	"{\"z\": 1, \"a\": 2, \"m\": {\"q\": [1, [2, [3, {\"deep\": [[], {}]}]]], \"b\": []}, \"z\": 3}",
	"{\"class\": \"BlendedDataset\", \"datasets\": [{\"class\": \"GPTDataset\", \"num_samples\": null}],"
	" \"split\": \"99,1,0\", \"weights\": [0.3, 0.7], \"size\": 1000}",
	"[0.969, 0.999, 0.30000000000000004, 1e+22, 1e21, 1e-7, 123.456, -2.5e-8]",
};
#define NDOCS (sizeof(docs) / sizeof(docs[0]))

static void test_documents_match_python(void)
{
	static const int indents[] = { 4, 0, 2, -1 };
	struct sbuf all = SBUF_INIT, ours = SBUF_INIT;
	for (size_t i = 0; i < NDOCS; i++) {
		sbuf_addstr(&all, docs[i]);
		sbuf_addch(&all, '\n');
		json_error_t e;
		json_t *v = json_loads(docs[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
		if (!v)
			printf("#   jansson cannot parse doc %zu: %s\n", i, e.text);
		CHECK(v != NULL);
		for (size_t k = 0; k < sizeof(indents) / sizeof(indents[0]); k++) {
			if (v)
				CHECK_INT(pyjson_dumps(v, indents[k], &ours), 0);
			sbuf_addstr(&ours, "\n=====\n");
		}
		json_decref(v);
	}
	write_text("docs.jsonl", all.buf);
	char *ref = py("for line in open(os.path.join(D, 'docs.jsonl')):\n"
		       "    v = json.loads(line)\n"
		       "    for ind in (4, 0, 2, None):\n"
		       "        sys.stdout.write(json.dumps(v, indent=ind) + '\\n=====\\n')\n");
	check_same_text("json.dumps", ours.buf, ref);
	free(ref);
	sbuf_release(&all);
	sbuf_release(&ours);
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Object members come out in insertion order, whatever the hash order. */
static void test_insertion_order(void)
{
	json_t *o = json_object();
	struct sbuf keys = SBUF_INIT, ours = SBUF_INIT;
	uint64_t s = 12345;
	for (int i = 0; i < 300; i++) {
		char k[32];
		snprintf(k, sizeof(k), "k%" PRIu64, xorshift(&s) % 100000);
		json_object_set_new(o, k, json_integer(i));
		sbuf_addf(&keys, "%s %d\n", k, i);
	}
	json_object_del(o, "nonexistent");
	CHECK_INT(pyjson_dumps(o, 4, &ours), 0);
	write_text("keys.txt", keys.buf);
	char *ref = py("d = {}\n"
		       "for line in open(os.path.join(D, 'keys.txt')):\n"
		       "    k, v = line.split()\n"
		       "    d[k] = int(v)\n"
		       "sys.stdout.write(json.dumps(d, indent=4))\n");
	check_same_text("insertion order", ours.buf, ref);
	free(ref);
	sbuf_release(&keys);
	sbuf_release(&ours);
	json_decref(o);
}

static void test_float_repr_fixed(void)
{
	static const struct {
		double x;
		const char *s;
	} v[] = {
		{ 1.0, "1.0" },
		{ 0.0, "0.0" },
		{ -0.0, "-0.0" },
		{ 1e-05, "1e-05" },
		{ 1e16, "1e+16" },
		{ 0.0001, "0.0001" },
		{ 1.2345678901234568e+17, "1.2345678901234568e+17" },
		{ 9999999999999998.0, "9999999999999998.0" },
		{ 0.969, "0.969" },
		{ 0.1 + 0.2, "0.30000000000000004" },
		{ 5e-324, "5e-324" },
		{ 1.7976931348623157e308, "1.7976931348623157e+308" },
		{ 1e100, "1e+100" },
		{ -2.5e-8, "-2.5e-08" },
		{ 123.456, "123.456" },
		{ 1e22, "1e+22" },
		{ 100.0, "100.0" },
		{ INFINITY, "inf" },
		{ -INFINITY, "-inf" },
		{ NAN, "nan" },
	};
	char out[PYJSON_FLOAT_MAX];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		pyjson_float_repr(v[i].x, out);
		CHECK_STR(out, v[i].s);
	}
}

/* repr() of many doubles: random bit patterns, random decimal strings, every
 * power of two (where the shortest form can lie on the far side of the
 * lopsided rounding interval) and their neighbours, and subnormals. */
static void test_float_repr_matches_python(void)
{
	struct sbuf hex = SBUF_INIT, ours = SBUF_INIT;
	uint64_t s = 0x9e3779b97f4a7c15ULL;
	char out[PYJSON_FLOAT_MAX];
	size_t count = 0;
#define ADD(bits)                                                     \
	do {                                                          \
		uint64_t b_ = (bits);                                 \
		double x_;                                            \
		memcpy(&x_, &b_, 8);                                  \
		sbuf_addf(&hex, "%016" PRIx64 "\n", b_);              \
		pyjson_float_repr(x_, out);                           \
		sbuf_addf(&ours, "%s\n", out);                        \
		count++;                                              \
	} while (0)
	for (int i = 0; i < 20000; i++)
		ADD(xorshift(&s));
	for (uint64_t e = 0; e < 2047; e++) {
		ADD(e << 52);
		ADD(e << 52 | 1);
		ADD((e << 52 | 0xfffffffffffffULL));
		ADD((e << 52) - (e ? 1 : 0));
	}
	for (int i = 0; i < 5000; i++) {
		/* a random decimal: up to 17 digits, exponent -330..310 */
		char dec[64];
		uint64_t digits = xorshift(&s) % 100000000000000000ULL;
		digits >>= xorshift(&s) % 50;
		int exp = (int)(xorshift(&s) % 641) - 330;
		snprintf(dec, sizeof(dec), "%" PRIu64 "e%d", digits, exp);
		double x = strtod(dec, NULL);
		uint64_t b;
		memcpy(&b, &x, 8);
		ADD(b);
	}
	for (int i = 0; i < 3000; i++)
		ADD(xorshift(&s) % 0x0010000000000000ULL); /* subnormals */
	write_text("doubles.txt", hex.buf);
	char *ref = py("for line in open(os.path.join(D, 'doubles.txt')):\n"
		       "    x = struct.unpack('<d', struct.pack('<Q', int(line, 16)))[0]\n"
		       "    print(repr(x))\n");
	check_same_text("float repr", ours.buf, ref);
	CHECK(count > 30000);
	free(ref);
	sbuf_release(&hex);
	sbuf_release(&ours);
}

static void test_invalid_utf8_refused(void)
{
	json_t *a = json_array();
	json_array_append_new(a, json_stringn_nocheck("ok\xff", 3));
	struct sbuf s = SBUF_INIT;
	struct test_capture c;
	test_capture_begin(&c, 2);
	int r = pyjson_dumps(a, 4, &s);
	char *msg = test_capture_end(&c);
	CHECK_INT(r, -1);
	CHECK(msg && strstr(msg, "not valid UTF-8"));
	free(msg);
	sbuf_release(&s);
	json_decref(a);
}

int main(void)
{
	log_init("test_pyjson", 0, 1);
	dir = test_tmpdir("pyjson");
	RUN(test_cache_hash_example);
	RUN(test_documents_match_python);
	RUN(test_insertion_order);
	RUN(test_float_repr_fixed);
	RUN(test_float_repr_matches_python);
	RUN(test_invalid_utf8_refused);
	free(dir);
	return test_summary();
}
