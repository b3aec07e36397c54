/*
 * test_jsonl_fast.c - lib/data/jsonl_fast.c against jansson, read the way
 * preprocess.c reads a line: whenever the scanner answers, jansson must
 * read the line without error into an object whose wanted keys hold the
 * same strings (byte for byte, NULs included); and the scanner must answer
 * for the plain lines preprocess_data mostly sees (else it would be no
 * faster). Hand-written edge cases, the multilingual test corpus, and
 * random mutations of valid lines.
 */
#include "data/jsonl_fast.h"
#include "test.h"

#include <jansson.h>

#define FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL)

static const char *const keys1[] = { "text" };
static const char *const keys2[] = { "text", "title" };

/* The scanner's answer for line, checked against jansson; 1 answered, 0 declined, -1 disagreement. */
static int agree(const char *line, size_t n, const char *const *keys, int nkeys)
{
	struct jsonl_fast_value v[2] = { { 0 }, { 0 } };
	bool fast = jsonl_fast_strings(line, n, keys, nkeys, v);
	int ret = fast ? 1 : 0;
	if (fast) {
		json_error_t je;
		json_t *root = json_loadb(line, n, FLAGS, &je);
		if (!root || !json_is_object(root)) {
			printf("#   answered, but jansson refuses [%.*s]: %s\n", (int)n, line, root ? "no object" : je.text);
			ret = -1;
		}
		for (int k = 0; k < nkeys && ret == 1; k++) {
			json_t *s = json_object_get(root, keys[k]);
			if (!json_is_string(s) || json_string_length(s) != v[k].len ||
			    memcmp(json_string_value(s), v[k].s, v[k].len)) {
				printf("#   key '%s' differs from jansson's in [%.*s]\n", keys[k], (int)n, line);
				ret = -1;
			}
		}
		json_decref(root);
	}
	free(v[0].buf);
	free(v[1].buf);
	return ret;
}

static int agree_s(const char *line)
{
	return agree(line, strlen(line), keys1, 1);
}

static void test_cases(void)
{
	static const char *const answered[] = {
		"{\"text\": \"hello\"}",
		" \t{\"text\":\"\"} \r\n",
		"{\"id\": 12, \"text\": \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"}",
		"{\"text\": \"\\u00e9\\u20ac\\ud83d\\ude00 \\u0000 nul\"}",
		"{\"meta\": {\"a\": [1, 2.5, -0, true, false, null, {}, []], \"b\": \"\\u00e9\"}, \"text\": \"x\"}",
		"{\"text\": \"first\", \"text\": \"last wins\"}",
		"{\"text\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
		"{\"n\": 123456789012345678901234567890, \"text\": \"big integer\"}",
	};
	for (size_t i = 0; i < sizeof(answered) / sizeof(*answered); i++) {
		int r = agree_s(answered[i]);
		if (r != 1)
			printf("#   expected an answer for [%s]\n", answered[i]);
		CHECK_INT(r, 1);
	}
	static const char *const declined[] = {
		"", "[]", "\"text\"", "{}", "{\"other\": \"x\"}", "{\"text\": 5}", "{\"text\": [\"a\", \"b\"]}",
		"{\"text\": null}", "{\"text\": \"unterminated}", "{\"text\": \"x\",}", "{\"text\": \"x\"} extra",
		"{\"text\": \"x\" \"y\": 1}", "{\"te\\u0078t\": \"escaped key\"}", "{\"text\": \"lone \\ud800\"}",
		"{\"text\": \"lone \\udc00\"}", "{\"text\": \"bad \\x\"}", "{\"text\": \"raw \x01 control\"}",
		"{\"text\": \"bad utf8 \xc3\"}", "{\"text\": \"overlong \xc0\xaf\"}", "{\"n\": 1e999, \"text\": \"x\"}",
		"{\"n\": 01, \"text\": \"x\"}", "{\"n\": 1., \"text\": \"x\"}", "{\"n\": tru, \"text\": \"x\"}",
		"{\"n\": truex, \"text\": \"x\"}", "\xef\xbb\xbf{\"text\": \"bom\"}", "{\"text\": \"x\"",
		"{'text': 'x'}", "{\"text\": \"x\"}}",
	};
	for (size_t i = 0; i < sizeof(declined) / sizeof(*declined); i++) {
		int r = agree_s(declined[i]);
		if (r != 0)
			printf("#   expected no answer for [%s]\n", declined[i]);
		CHECK_INT(r, 0);
	}
	/* two keys, and NUL bytes inside the value */
	const char two[] = "{\"title\": \"T\\u0000\", \"text\": \"body\"}";
	CHECK_INT(agree(two, sizeof(two) - 1, keys2, 2), 1);
	CHECK_INT(agree("{\"text\": \"body\"}", 16, keys2, 2), 0);
	/* nesting: shallow answered, deep declined */
	for (int depth = 10; depth <= 40; depth += 30) {
		char deep[400];
		size_t n = (size_t)sprintf(deep, "{\"text\": \"x\", \"d\": ");
		for (int i = 0; i < depth; i++)
			deep[n++] = '[';
		for (int i = 0; i < depth; i++)
			deep[n++] = ']';
		deep[n++] = '}';
		CHECK_INT(agree(deep, n, keys1, 1), depth < 32);
	}
}

/* The multilingual corpus as preprocess_data's tests write it (ASCII escapes). */
static void test_multilingual_corpus(void)
{
	FILE *f = popen("xz -dc tests/fixtures/tokenizers/multilingual/refs.jsonl.xz", "r");
	CHECK(f != NULL);
	if (!f)
		return;
	char *line = NULL;
	size_t cap = 0, lines = 0, answered = 0, bad = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) > 0) {
		json_t *row = json_loadb(line, (size_t)len, 0, NULL);
		json_t *doc = json_object();
		json_object_set(doc, "text", json_object_get(row, "text"));
		for (int ascii = 0; ascii < 2; ascii++) {
			char *s = json_dumps(doc, ascii ? JSON_ENSURE_ASCII : 0);
			int r = agree_s(s);
			answered += r == 1;
			bad += r < 0;
			lines++;
			free(s);
		}
		json_decref(doc);
		json_decref(row);
	}
	free(line);
	pclose(f);
	CHECK(lines > 600);
	CHECK_INT(bad, 0);
	CHECK_INT(answered, lines);
}

/* Valid lines, then each mutated at random (a byte replaced by a JSON
 * metacharacter, a byte dropped, the line cut short): never a disagreement. */
static void test_mutations(void)
{
	static const char *const base[] = {
		"{\"id\": 7, \"text\": \"The \\\"quick\\\" brown fox\\n\\u00e9\", \"meta\": {\"s\": [1.5, true, null]}}",
		"{\"text\": \"plain words and \xe2\x82\xac signs\", \"score\": -0.25}",
		"{\"a\": [], \"b\": {}, \"text\": \"\\ud83d\\ude00 \\t tab\", \"c\": false}",
	};
	static const char meta[] = "{}[]\",:\\ \t0e.-u\x01\x80tfn";
	uint64_t x = 88172645463325252ull;
	size_t answered = 0, declined = 0, bad = 0;
	char buf[256];
	for (int it = 0; it < 30000; it++) {
		const char *b = base[it % 3];
		size_t n = strlen(b);
		memcpy(buf, b, n);
		int muts = 1 + (int)(it % 3);
		for (int m = 0; m < muts && n > 1; m++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			size_t pos = (size_t)(x >> 8) % n;
			switch ((x >> 4) % 3) {
			case 0:
				buf[pos] = meta[(x >> 40) % (sizeof(meta) - 1)];
				break;
			case 1:
				memmove(buf + pos, buf + pos + 1, n - pos - 1);
				n--;
				break;
			default:
				n = pos + 1;
				break;
			}
		}
		int r = agree(buf, n, keys1, 1);
		answered += r == 1;
		declined += r == 0;
		bad += r < 0;
		if (bad > 5)
			break;
	}
	CHECK_INT(bad, 0);
	CHECK(answered > 1000); /* mutations outside the text's key often keep the line valid */
	CHECK(declined > 1000);
}

int main(void)
{
	RUN(test_cases);
	RUN(test_multilingual_corpus);
	RUN(test_mutations);
	return test_summary();
}
