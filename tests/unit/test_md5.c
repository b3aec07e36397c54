/*
 * test_md5.c - lib/base/md5: the RFC 1321 test suite, incremental updates,
 * and Python's hashlib on pseudo-random data of many lengths.
 */
#include "base/error.h"
#include "base/md5.h"
#include "base/sbuf.h"
#include "test.h"

static void test_rfc1321_suite(void)
{
	static const char *const v[][2] = {
		{ "", "d41d8cd98f00b204e9800998ecf8427e" },
		{ "a", "0cc175b9c0f1b6a831c399e269772661" },
		{ "abc", "900150983cd24fb0d6963f7d28e17f72" },
		{ "message digest", "f96b697d7cb7938d525a2f31aaf161d0" },
		{ "abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b" },
		{ "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
		  "d174ab98d277d9f5a5611c2c9f419d9f" },
		{ "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
		  "57edf4a22be3c955ac49da2e2107b67a" },
	};
	char out[33];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		md5_hex(v[i][0], strlen(v[i][0]), out);
		CHECK_STR(out, v[i][1]);
	}
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_incremental_equals_oneshot(void)
{
	enum { N = 10000 };
	unsigned char *d = malloc(N);
	uint64_t s = 88172645463325252ULL;
	for (int i = 0; i < N; i++)
		d[i] = (unsigned char)xorshift(&s);
	for (int round = 0; round < 50; round++) {
		size_t n = (size_t)(xorshift(&s) % N);
		char a[33], b[33];
		md5_hex(d, n, a);
		struct md5_ctx c;
		unsigned char dg[16];
		md5_init(&c);
		for (size_t at = 0; at < n;) {
			size_t k = (size_t)(xorshift(&s) % 150);
			if (k > n - at)
				k = n - at;
			md5_update(&c, d + at, k);
			at += k;
		}
		md5_final(&c, dg);
		for (int i = 0; i < 16; i++)
			snprintf(b + 2 * i, 3, "%02x", dg[i]);
		CHECK_STR(b, a);
	}
	free(d);
}

static void test_matches_hashlib(void)
{
	enum { N = 1 << 20 };
	unsigned char *d = malloc(N);
	uint64_t s = 2463534242ULL;
	for (int i = 0; i < N; i++)
		d[i] = (unsigned char)(xorshift(&s) >> 24);
	char *dir = test_tmpdir("md5");
	char path[4200], cmd[9000];
	snprintf(path, sizeof(path), "%s/blob", dir);
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(d, 1, N, f) == N);
	if (f)
		fclose(f);
	struct sbuf ours = SBUF_INIT, ref = SBUF_INIT;
	static const size_t big[] = { 447, 448, 511, 512, 513, 1000, 4095, 4096, 65537, 999999, N };
	char hex[33];
	for (size_t n = 0; n <= 200; n++) {
		md5_hex(d, n, hex);
		sbuf_addf(&ours, "%s\n", hex);
	}
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		md5_hex(d, big[i], hex);
		sbuf_addf(&ours, "%s\n", hex);
	}
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 -c \"import hashlib, sys\n"
		 "b = open(sys.argv[1], 'rb').read()\n"
		 "for n in list(range(201)) + [447, 448, 511, 512, 513, 1000, 4095, 4096, 65537, 999999, %d]:\n"
		 "    print(hashlib.md5(b[:n]).hexdigest())\" '%s'",
		 N, path);
	FILE *p = popen(cmd, "r");
	char buf[4096];
	size_t n;
	while (p && (n = fread(buf, 1, sizeof(buf), p)) > 0)
		sbuf_add(&ref, buf, n);
	CHECK(p && pclose(p) == 0);
	CHECK(ours.buf && ref.buf && !strcmp(ours.buf, ref.buf));
	sbuf_release(&ours);
	sbuf_release(&ref);
	free(d);
	free(dir);
}

int main(void)
{
	log_init("test_md5", 0, 1);
	RUN(test_rfc1321_suite);
	RUN(test_incremental_equals_oneshot);
	RUN(test_matches_hashlib);
	return test_summary();
}
