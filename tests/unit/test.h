/*
 * test.h - the unit-test harness: each test file is one program whose
 * main() calls RUN() on its test functions and returns test_summary().
 * Output is one "ok - name" / "not ok - name" line per test, which
 * tests/run.sh counts. Checks report file:line and the values involved.
 * It compiles as C++ too (tests/emu/).
 */
#ifndef MEGAC_TEST_H
#define MEGAC_TEST_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static int t_checks_failed;
static int t_tests_failed;
static int t_tests_run;

#define CHECK(c)                                                                  \
	do {                                                                      \
		if (!(c)) {                                                       \
			printf("#   %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			t_checks_failed++;                                        \
		}                                                                 \
	} while (0)

#define CHECK_INT(a, b)                                                            \
	do {                                                                       \
		long long t_a = (long long)(a), t_b = (long long)(b);              \
		if (t_a != t_b) {                                                  \
			printf("#   %s:%d: %s == %lld, expected %s == %lld\n", __FILE__, \
			       __LINE__, #a, t_a, #b, t_b);                        \
			t_checks_failed++;                                         \
		}                                                                  \
	} while (0)

#define CHECK_STR(a, b)                                                             \
	do {                                                                        \
		const char *t_a = (a), *t_b = (b);                                  \
		if (!t_a || !t_b || strcmp(t_a, t_b)) {                             \
			printf("#   %s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, \
			       __LINE__, #a, t_a ? t_a : "(null)", t_b ? t_b : "(null)"); \
			t_checks_failed++;                                          \
		}                                                                   \
	} while (0)

#define RUN(fn) t_run(#fn, fn)

static inline void t_run(const char *name, void (*fn)(void))
{
	int before = t_checks_failed;
	fflush(stdout);
	fn();
	t_tests_run++;
	if (t_checks_failed == before) {
		printf("ok - %s\n", name);
	} else {
		printf("not ok - %s\n", name);
		t_tests_failed++;
	}
	fflush(stdout);
}

static inline int test_summary(void)
{
	return t_tests_failed ? 1 : 0;
}

/* A fresh scratch directory under $MEGAC_BUILD/tmp (or /tmp); caller frees. */
static inline char *test_tmpdir(const char *tag)
{
	const char *base = getenv("MEGAC_BUILD");
	char *path = (char *)malloc(4096);
	snprintf(path, 4096, "%s/tmp", base ? base : "/tmp");
	{
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
		if (system(cmd) != 0)
			abort();
	}
	snprintf(path + strlen(path), 4096 - strlen(path), "/%s.XXXXXX", tag);
	if (!mkdtemp(path)) {
		perror("mkdtemp");
		abort();
	}
	return path;
}

/* Capture what the code under test writes to a file descriptor (2 for
 * stderr, 1 for stdout): test_capture_begin(), run it, test_capture_end()
 * returns the text (caller frees) and restores the descriptor. */
struct test_capture {
	int fd, saved, file;
	char path[4200];
};

static inline char *test_read_file(const char *path, size_t *len);

static inline void test_capture_begin(struct test_capture *c, int fd)
{
	static int serial;
	const char *base = getenv("MEGAC_BUILD");
	snprintf(c->path, sizeof(c->path), "%s/tmp/capture.%d.%d", base ? base : "/tmp", (int)getpid(), serial++);
	fflush(fd == 1 ? stdout : stderr);
	c->fd = fd;
	c->saved = dup(fd);
	c->file = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (c->file < 0) {
		perror(c->path);
		abort();
	}
	dup2(c->file, fd);
}

static inline char *test_capture_end(struct test_capture *c)
{
	fflush(c->fd == 1 ? stdout : stderr);
	dup2(c->saved, c->fd);
	close(c->saved);
	close(c->file);
	char *text = test_read_file(c->path, NULL);
	unlink(c->path);
	return text;
}

/* Everything a stream gives until its end, NUL-terminated and malloc'd. */
static inline char *test_read_stream(FILE *p)
{
	size_t cap = 4096, len = 0, n;
	char *out = (char *)malloc(cap);
	while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (cap - len < 2048)
			out = (char *)realloc(out, cap *= 2);
	}
	out[len] = 0;
	return out;
}

/*
 * Run a Python script with $MEGAC_PYTHON when set (the GPU kit's env.sh sets
 * it to the GPU machine's python with numpy and torch), else
 * /usr/bin/python3 (Debian's, which has numpy; the python3 on PATH may
 * not): `prelude` and `script` are written to
 * dir/script.py, which runs with argv[1] = dir. Returns its stdout (caller
 * frees; "" when silent) or NULL, with the output shown, when it failed.
 */
static inline char *test_python(const char *dir, const char *prelude, const char *script)
{
	char path[4200], cmd[9000];
	snprintf(path, sizeof(path), "%s/script.py", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(prelude, f);
	fputs(script, f);
	fclose(f);
	const char *py = getenv("MEGAC_PYTHON");
	snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s'", py && *py ? py : "/usr/bin/python3", path, dir);
	FILE *p = popen(cmd, "r");
	if (!p)
		return NULL;
	char *out = test_read_stream(p);
	if (pclose(p) != 0) {
		printf("#   python failed:\n%s\n", out);
		free(out);
		return NULL;
	}
	return out;
}

/* Read a whole file; returns malloc'd bytes (NUL-terminated) and its length. */
static inline char *test_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = (char *)malloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

/* The message must contain every needle (NULL-terminated list); says which
 * one it lacks. */
static inline int contains_all(const char *msg, ...)
{
	va_list ap;
	va_start(ap, msg);
	int ok = msg != NULL;
	for (const char *n; ok && (n = va_arg(ap, const char *));)
		if (!strstr(msg, n)) {
			printf("#   message lacks \"%s\": %s", n, msg);
			ok = 0;
		}
	va_end(ap);
	return ok;
}

/* Deterministic test data: n float32 values with varied bit patterns
 * (xorshift from seed); caller frees. */
static inline float *make_f32(int64_t n, int seed)
{
	float *v = (float *)malloc((size_t)(n ? n : 1) * sizeof(float));
	uint32_t x = 2463534242u + (uint32_t)seed;
	for (int64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		v[i] = ((float)(x % 2000001) - 1000000.0f) / 3.0e4f;
	}
	return v;
}

#ifdef MEGAC_BASE_ARGS_H
/* Run args_parse with stderr captured; returns its result, *msg the output
 * (for the flag tests, which include base/args.h before this header). */
static inline int parse_capture(struct args *a, const struct prog_info *p, char **argv, char **msg)
{
	int argc = 0;
	while (argv[argc])
		argc++;
	struct test_capture c;
	test_capture_begin(&c, 2);
	int r = args_parse(a, p, argc, argv);
	*msg = test_capture_end(&c);
	return r;
}
#endif

#endif
