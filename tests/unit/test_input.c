/*
 * test_input.c - lib/data/input: every container format gives the same
 * lines as the plain file, line numbers survive chunking, the --partitions
 * stride reorders lines as Megatron's round-robin does, and broken
 * archives or paths are refused with the file named. Fixtures are built
 * here with the real gzip/zstd/xz/bzip2/tar tools and Python's zipfile.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "data/input.h"
#include "test.h"

#include <fcntl.h>

static char *dir;

static void sh(const char *fmt, const char *arg)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "cd '%s' && ", dir);
	snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), fmt, arg);
	if (system(cmd) != 0) {
		printf("#   setup command failed: %s\n", cmd);
		t_checks_failed++;
	}
}

/* Read all files through the reader; returns the concatenated lines. */
static char *read_all(char **files, int n, size_t chunk, int stride, int *ret, struct sbuf *firsts)
{
	struct input_reader *r = input_reader_new(files, n, chunk, stride);
	struct sbuf all = SBUF_INIT;
	struct input_chunk c;
	int k;
	while ((k = input_reader_next(r, &c)) == 1) {
		if (firsts)
			sbuf_addf(firsts, "%s@%llu/%llu+%llu ", input_reader_source(r, c.source),
				  (unsigned long long)c.first_line, (unsigned long long)c.n_lines,
				  (unsigned long long)c.line_step);
		sbuf_add(&all, c.data, c.len);
		free(c.data);
	}
	*ret = k;
	if (k < 0 && firsts)
		sbuf_addf(firsts, "ERROR %s", input_reader_error(r));
	input_reader_free(r);
	return sbuf_detach(&all, NULL);
}

static char *p(const char *name)
{
	static char buf[8][4300];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
	return buf[i];
}

static void make_corpus(void)
{
	FILE *f = fopen(p("a.jsonl"), "w");
	for (int i = 0; i < 500; i++)
		fprintf(f, "{\"text\": \"document a%d %s\"}\n", i, i % 7 ? "x" : "a longer line with more words");
	fclose(f);
	f = fopen(p("b.jsonl"), "w");
	for (int i = 0; i < 300; i++)
		fprintf(f, "{\"text\": \"document b%d\"}\n", i);
	fprintf(f, "{\"text\": \"no newline at the end\"}");
	fclose(f);
	sh("gzip -k a.jsonl && zstd -q -k a.jsonl && xz -k a.jsonl && bzip2 -k a.jsonl", "");
	sh("mkdir -p t/sub && cp a.jsonl t/sub/1.jsonl && gzip -c b.jsonl > t/sub/2.jsonl.gz && echo hi > t/README", "");
	sh("tar -C t --zstd -cf ab.tar.zst sub/1.jsonl sub/2.jsonl.gz README", "");
	sh("/usr/bin/python3 -c \"import zipfile; z = zipfile.ZipFile('ab.zip', 'w', zipfile.ZIP_DEFLATED); "
	   "z.write('a.jsonl', 'x/a.jsonl'); z.write('b.jsonl', 'x/b.jsonl'); z.close()\"", "");
	sh(": > empty.jsonl", "");
}

static void test_formats_same_lines(void)
{
	int ret;
	char *fa[] = { p("a.jsonl") };
	char *want_a = read_all(fa, 1, 1000, 1, &ret, NULL);
	CHECK_INT(ret, 0);
	size_t n;
	char *raw = test_read_file(p("a.jsonl"), &n);
	CHECK(raw && !strcmp(want_a, raw)); /* the reader reproduces the file */
	free(raw);
	const char *variants[] = { "a.jsonl.gz", "a.jsonl.zst", "a.jsonl.xz", "a.jsonl.bz2" };
	for (int v = 0; v < 4; v++) {
		char *f1[] = { p(variants[v]) };
		char *got = read_all(f1, 1, 777, 1, &ret, NULL);
		CHECK_INT(ret, 0);
		if (strcmp(got, want_a))
			printf("#   %s differs\n", variants[v]);
		CHECK(!strcmp(got, want_a));
		free(got);
	}
	/* a tar.zst holding a plain and a gzip'd member (and a README that is skipped) */
	char *fab[] = { p("a.jsonl"), p("b.jsonl") };
	char *want_ab = read_all(fab, 2, 4096, 1, &ret, NULL);
	char *ft[] = { p("ab.tar.zst") };
	struct sbuf srcs = SBUF_INIT;
	char *got = read_all(ft, 1, 4096, 1, &ret, &srcs);
	CHECK_INT(ret, 0);
	CHECK(!strcmp(got, want_ab));
	CHECK(strstr(srcs.buf, "ab.tar.zst:sub/2.jsonl.gz@1/"));
	CHECK(!strstr(srcs.buf, "README"));
	free(got);
	char *fz[] = { p("ab.zip") };
	got = read_all(fz, 1, 4096, 1, &ret, NULL);
	CHECK_INT(ret, 0);
	CHECK(!strcmp(got, want_ab));
	free(got);
	/* an empty file contributes nothing */
	char *fe[] = { p("a.jsonl"), p("empty.jsonl"), p("b.jsonl") };
	got = read_all(fe, 3, 4096, 1, &ret, NULL);
	CHECK(!strcmp(got, want_ab));
	free(got);
	sbuf_release(&srcs);
	free(want_a);
	free(want_ab);
}

/* Chunk line numbers: each chunk's first line is where it starts in its source. */
static void test_line_numbers(void)
{
	char *f[] = { p("a.jsonl"), p("b.jsonl") };
	struct input_reader *r = input_reader_new(f, 2, 300, 1);
	struct input_chunk c;
	uint64_t expect_a = 1, expect_b = 1;
	int chunks = 0, bad = 0;
	while (input_reader_next(r, &c) == 1) {
		const char *src = input_reader_source(r, c.source);
		uint64_t *e = strstr(src, "a.jsonl") ? &expect_a : &expect_b;
		if (c.first_line != *e)
			bad++;
		/* the first line's text names its own line number - 1 */
		char want[64];
		snprintf(want, sizeof(want), "document %c%llu", *e == expect_a && e == &expect_a ? 'a' : 'b',
			 (unsigned long long)(c.first_line - 1));
		if (c.first_line <= (e == &expect_a ? 500u : 300u) && !strstr(c.data, want))
			bad++;
		*e += c.n_lines;
		chunks++;
		free(c.data);
	}
	input_reader_free(r);
	CHECK_INT(bad, 0);
	CHECK(chunks > 10);
	CHECK_INT(expect_a, 501);
	CHECK_INT(expect_b, 302);
}

/* Stride 3 over two files: corpus line i goes to pass i mod 3, passes in order. */
static void test_stride_round_robin(void)
{
	int ret;
	char *f[] = { p("a.jsonl"), p("b.jsonl") };
	char *got = read_all(f, 2, 1000, 3, &ret, NULL);
	CHECK_INT(ret, 0);
	char *all = read_all(f, 2, 1000, 1, &ret, NULL);
	/* split `all` into lines and rebuild the expected order */
	struct sbuf want = SBUF_INIT;
	for (int pass = 0; pass < 3; pass++) {
		int i = 0;
		for (char *s = all; *s; i++) {
			char *e = strchr(s, '\n');
			if (i % 3 == pass)
				sbuf_add(&want, s, (size_t)(e - s) + 1);
			s = e + 1;
		}
	}
	CHECK(!strcmp(got, want.buf));
	sbuf_release(&want);
	free(got);
	free(all);
}

static void test_broken_archives(void)
{
	sh("head -c $(($(stat -c%%s a.jsonl.gz) / 2)) a.jsonl.gz > cut.jsonl.gz && "
	   "head -c $(($(stat -c%%s ab.tar.zst) / 2)) ab.tar.zst > cut.tar.zst", "");
	const char *cases[][2] = { { "cut.jsonl.gz", "cut.jsonl.gz" }, { "cut.tar.zst", "cut.tar.zst" } };
	for (int i = 0; i < 2; i++) {
		int ret;
		struct sbuf msg = SBUF_INIT;
		char *f[] = { p(cases[i][0]) };
		char *got = read_all(f, 1, 1000, 1, &ret, &msg);
		CHECK_INT(ret, -1);
		CHECK(strstr(msg.buf, cases[i][1]) != NULL);
		CHECK(strstr(msg.buf, "runcat") || strstr(msg.buf, "Truncated") || strstr(msg.buf, "premature") ||
		      strstr(msg.buf, "end of"));
		if (ret != -1 || !strstr(msg.buf, cases[i][1]))
			printf("#   %s: %s\n", cases[i][0], msg.buf);
		free(got);
		sbuf_release(&msg);
	}
}

/* Python that damages a file in place: sys.argv[1] is the file */
#define PY_FLIP "/usr/bin/python3 -c \"import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); %s; " \
		"open(p, 'wb').write(b)\" "

/*
 * Corrupt compressed data is an error naming the file (and member), never
 * silently read: gzip's CRC-32 and length (which libarchive does not check),
 * a zip entry's CRC-32, the checksums of bzip2, xz and zstd, a gzip member
 * inside a tar, and bytes after the end of any compressed stream. Whole
 * multi-member gzip files still read as the plain file.
 */
static void test_corrupt_streams(void)
{
	sh("cp a.jsonl.gz crc.jsonl.gz && " PY_FLIP "crc.jsonl.gz", "b[-8] ^= 1");
	sh("cp a.jsonl.gz isize.jsonl.gz && " PY_FLIP "isize.jsonl.gz", "b[-3] ^= 1");
	/* stored (level 0): a changed byte decodes fine, only the CRC can tell */
	sh("/usr/bin/python3 -c \"import gzip; open('stored.jsonl.gz', 'wb').write(gzip.compress(open('a.jsonl', "
	   "'rb').read(), compresslevel=0))\" && " PY_FLIP "stored.jsonl.gz", "i = b.find(b'document a77'); b[i] = 68");
	sh("head -n 250 a.jsonl | gzip > multi.jsonl.gz && tail -n +251 a.jsonl | gzip >> multi.jsonl.gz && "
	   "cp multi.jsonl.gz multi2.jsonl.gz && " PY_FLIP "multi2.jsonl.gz", "b[-8] ^= 1");
	sh("for z in gz bz2 xz zst; do cp a.jsonl.$z junk.jsonl.$z && printf 'garbage after the end' >> junk.jsonl.$z; "
	   "done", "");
	sh("cp a.jsonl.bz2 crc.jsonl.bz2 && " PY_FLIP "crc.jsonl.bz2", "b[-3] ^= 1");
	sh("cp a.jsonl.xz crc.jsonl.xz && " PY_FLIP "crc.jsonl.xz", "b[-13] ^= 1");
	sh("cp a.jsonl.zst crc.jsonl.zst && " PY_FLIP "crc.jsonl.zst", "b[-1] ^= 1");
	sh("/usr/bin/python3 -c \"import zipfile; z = zipfile.ZipFile('st.zip', 'w'); z.write('a.jsonl', 'a.jsonl'); "
	   "z.close()\" && " PY_FLIP "st.zip", "i = b.find(b'document a77'); b[i] = 68");
	sh("mkdir -p tz && cp crc.jsonl.gz tz/ && tar -C tz -cf gzmember.tar crc.jsonl.gz && "
	   "tar -C t -czf ab.tar.gz sub/1.jsonl sub/2.jsonl.gz && cp ab.tar.gz abcrc.tar.gz && cp ab.tar.gz abjunk.tar.gz"
	   " && printf 'junk' >> abjunk.tar.gz && " PY_FLIP "abcrc.tar.gz", "b[-8] ^= 1");
	const char *cases[][2] = {
		{ "crc.jsonl.gz", "crc.jsonl.gz: corrupt gzip data: CRC-32 mismatch" },
		{ "isize.jsonl.gz", "isize.jsonl.gz: corrupt gzip data: length mismatch" },
		{ "stored.jsonl.gz", "stored.jsonl.gz: corrupt gzip data: CRC-32 mismatch" },
		{ "multi2.jsonl.gz", "multi2.jsonl.gz: corrupt gzip data: CRC-32 mismatch in member 2" },
		{ "junk.jsonl.gz", "junk.jsonl.gz: unexpected data after the end of the gzip stream" },
		{ "junk.jsonl.bz2", "junk.jsonl.bz2: unexpected data after the end of the bzip2 stream" },
		{ "junk.jsonl.xz", "junk.jsonl.xz: " },
		{ "junk.jsonl.zst", "junk.jsonl.zst: " },
		{ "crc.jsonl.bz2", "crc.jsonl.bz2: " },
		{ "crc.jsonl.xz", "crc.jsonl.xz: " },
		{ "crc.jsonl.zst", "crc.jsonl.zst: Zstd decompression failed: Restored data doesn't match checksum" },
		{ "st.zip", "st.zip:a.jsonl: ZIP bad CRC" },
		{ "gzmember.tar", "gzmember.tar:crc.jsonl.gz: corrupt gzip data: CRC-32 mismatch" },
		{ "abcrc.tar.gz", "abcrc.tar.gz" },
		{ "abjunk.tar.gz", "abjunk.tar.gz: unexpected data after the end of the gzip stream" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int ret;
		struct sbuf msg = SBUF_INIT;
		char *f[] = { p(cases[i][0]) };
		char *got = read_all(f, 1, 1000, 1, &ret, &msg);
		bool good = ret == -1 && strstr(msg.buf, cases[i][1]);
		if (!good)
			printf("#   %s: read %d, '%s'; wanted an error with '%s'\n", cases[i][0], ret, msg.buf,
			       cases[i][1]);
		CHECK(good);
		free(got);
		sbuf_release(&msg);
	}
	/* the damage to abcrc.tar.gz is in the gzip trailer: what failed is the CRC */
	int ret;
	struct sbuf msg = SBUF_INIT;
	char *fc[] = { p("abcrc.tar.gz") };
	free(read_all(fc, 1, 1000, 1, &ret, &msg));
	CHECK(strstr(msg.buf, "CRC-32 mismatch"));
	sbuf_release(&msg);
	/* whole files still read: multi-member gzip, a tar.gz */
	char *fa[] = { p("a.jsonl") };
	char *want_a = read_all(fa, 1, 1000, 1, &ret, NULL);
	char *fm[] = { p("multi.jsonl.gz") };
	char *got = read_all(fm, 1, 1000, 1, &ret, NULL);
	CHECK_INT(ret, 0);
	CHECK(!strcmp(got, want_a));
	free(got);
	char *ft[] = { p("ab.tar.gz") };
	got = read_all(ft, 1, 1000, 1, &ret, NULL);
	CHECK_INT(ret, 0);
	free(got);
	free(want_a);
}

/*
 * input_reader_set_max_line: a longer line comes as a chunk of its own,
 * too_long and without data, with its line number; the lines around it are
 * read as usual, whether it ends in '\n', ends the file, or is longer than
 * a read block (the reader stops keeping it after max bytes).
 */
static void test_max_line(void)
{
	FILE *f = fopen(p("long.jsonl"), "w");
	fprintf(f, "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": \"");
	for (int i = 0; i < 300000; i++)
		fputc('x', f);
	fprintf(f, "\"}\n{\"text\": \"four\"}\n{\"text\": \"%0100d\"}\n{\"text\": \"six\"}\n{\"text\": \"", 5);
	for (int i = 0; i < 200; i++)
		fputc('y', f);
	fprintf(f, "\"}");
	fclose(f);
	char *files[] = { p("long.jsonl") };
	struct input_reader *r = input_reader_new(files, 1, 1 << 20, 1);
	input_reader_set_max_line(r, 100); /* line 5 is 114 bytes, line 7 214 without a newline */
	struct input_chunk c;
	struct sbuf got = SBUF_INIT;
	int k;
	while ((k = input_reader_next(r, &c)) == 1) {
		if (c.too_long)
			sbuf_addf(&got, "[long %llu/%llu]", (unsigned long long)c.first_line,
				  (unsigned long long)c.n_lines);
		else
			sbuf_addf(&got, "[%llu+%llu]%s", (unsigned long long)c.first_line,
				  (unsigned long long)c.n_lines, c.data);
		free(c.data);
	}
	CHECK_INT(k, 0);
	CHECK_STR(got.buf, "[1+2]{\"text\": \"one\"}\n{\"text\": \"two\"}\n[long 3/1][4+1]{\"text\": \"four\"}\n"
			   "[long 5/1][6+1]{\"text\": \"six\"}\n[long 7/1]");
	input_reader_free(r);
	sbuf_reset(&got);
	/* no limit: every line, however long */
	r = input_reader_new(files, 1, 1 << 20, 1);
	int lines = 0;
	while (input_reader_next(r, &c) == 1) {
		lines += (int)c.n_lines;
		CHECK(!c.too_long);
		free(c.data);
	}
	CHECK_INT(lines, 7);
	input_reader_free(r);
	sbuf_release(&got);
}

static void test_expand(void)
{
	sh("mkdir -p d/z d/a && cp a.jsonl d/z/2.jsonl && cp a.jsonl.gz d/a/1.json.gz && cp a.jsonl d/notes.txt "
	   "&& cp a.jsonl d/.hidden.jsonl && mkdir -p emptydir", "");
	struct strlist in = { NULL, 0 }, out;
	char *v1[] = { p("d") };
	in.v = v1;
	in.n = 1;
	CHECK_INT(input_expand(&in, &out), 0);
	CHECK_INT(out.n, 2);
	if (out.n == 2) {
		CHECK(strstr(out.v[0], "d/a/1.json.gz") != NULL); /* sorted walk */
		CHECK(strstr(out.v[1], "d/z/2.jsonl") != NULL);
	}
	strlist_free(&out);
	char pattern[4400];
	snprintf(pattern, sizeof(pattern), "%s/a.jsonl.*z*", dir);
	char *v2[] = { pattern, "-" };
	in.v = v2;
	in.n = 2;
	CHECK_INT(input_expand(&in, &out), 0);
	CHECK_INT(out.n, 5); /* .bz2 .gz .xz .zst, sorted, then stdin */
	if (out.n == 5) {
		CHECK(strstr(out.v[0], "a.jsonl.bz2") != NULL);
		CHECK(strstr(out.v[3], "a.jsonl.zst") != NULL);
		CHECK_STR(out.v[4], "-");
	}
	strlist_free(&out);
	char *v3[] = { p("missing.jsonl") };
	in.v = v3;
	in.n = 1;
	fflush(stderr);
	int saved = dup(2), devnull = open("/dev/null", 1);
	dup2(devnull, 2);
	CHECK_INT(input_expand(&in, &out), -1);
	char *v4[] = { p("emptydir") };
	in.v = v4;
	CHECK_INT(input_expand(&in, &out), -1);
	snprintf(pattern, sizeof(pattern), "%s/nothing*.jsonl", dir);
	char *v5[] = { pattern };
	in.v = v5;
	CHECK_INT(input_expand(&in, &out), -1);
	dup2(saved, 2);
	close(saved);
	close(devnull);
	CHECK(input_is_data_name("x/shard-0001.jsonl.zst"));
	CHECK(!input_is_data_name("x/._shard.jsonl"));
	CHECK(!input_is_data_name("x/README.md"));
}

int main(void)
{
	log_init("test_input", 0, 1);
	dir = test_tmpdir("input");
	make_corpus();
	RUN(test_formats_same_lines);
	RUN(test_line_numbers);
	RUN(test_stride_round_robin);
	RUN(test_broken_archives);
	RUN(test_corrupt_streams);
	RUN(test_max_line);
	RUN(test_expand);
	return test_summary();
}
