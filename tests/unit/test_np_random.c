/*
 * test_np_random.c - lib/data/np_random: RandomState (MT19937 draws, bounded
 * integers, shuffles) and default_rng (SeedSequence, PCG64,
 * Generator.integers) against numpy itself (/usr/bin/python3, numpy 1.24),
 * which computes the references at test time, plus fixed check values:
 * MockGPTDataset's first sequence lengths, the first draws of seed 1234, and
 * the shuffles of the worked example T (Megatron's gpt_dataset.py run on it).
 */
#include "base/error.h"
#include "base/md5.h"
#include "base/sbuf.h"
#include "data/np_random.h"
#include "test.h"

static char *scratch;

/* Run a Python script with numpy's interpreter (test.h: test_python). */
static char *py(const char *script)
{
	return test_python(scratch, "import sys, hashlib\nimport numpy as np\n", script);
}

/* Compare our text with numpy's, showing the first differing line. */
static void check_same_text(const char *what, const char *ours, const char *numpy)
{
	CHECK(numpy != NULL);
	if (!numpy)
		return;
	if (strcmp(ours, numpy)) {
		const char *a = ours, *b = numpy;
		while (*a && *a == *b)
			a++, b++;
		while (a > ours && a[-1] != '\n')
			a--, b--;
		printf("#   %s differs from numpy at\n#   ours:  %.200s\n#   numpy: %.200s\n", what, a, b);
		CHECK(!"same as numpy");
	}
}

static const uint32_t seeds[] = { 0, 1, 1234, 42, 4294967295U };
#define NSEEDS (sizeof(seeds) / sizeof(seeds[0]))

static void test_mt_check_values(void)
{
	struct np_mt19937 mt;
	np_mt_seed(&mt, 1234);
	CHECK_INT(np_mt_next32(&mt), 822569775);
	CHECK_INT(np_mt_next32(&mt), 2137449171);
	CHECK_INT(np_mt_next32(&mt), 2671936806U);
}

static void test_mt_draws_match_numpy(void)
{
	/* 1300 draws per seed: past two regenerations of the 624-word state. */
	struct sbuf ours = SBUF_INIT;
	for (size_t s = 0; s < NSEEDS; s++) {
		struct np_mt19937 mt;
		np_mt_seed(&mt, seeds[s]);
		for (int i = 0; i < 1300; i++)
			sbuf_addf(&ours, "%u%c", np_mt_next32(&mt), i % 10 == 9 ? '\n' : ' ');
	}
	char *ref = py("for s in (0, 1, 1234, 42, 2**32 - 1):\n"
		       "    v = np.random.RandomState(s).randint(0, 2**32, size=1300, dtype=np.uint32)\n"
		       "    for i in range(0, 1300, 10):\n"
		       "        print(' '.join(str(x) for x in v[i:i + 10]))\n");
	check_same_text("MT19937 draws", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
}

/* random_interval against the legacy randint, which for dtype=uint64 goes
 * through the same masked rejection (32-bit draws below 2^32, numpy's
 * high-word-first 64-bit draws above). */
static void test_mt_interval_matches_randint(void)
{
	static const uint64_t maxes[] = { 0, 1, 2, 3, 5, 100, 1000, 65535, 2147483648ULL, 4294967294ULL,
					  4294967295ULL, 4294967296ULL, 4294967297ULL, 1099511640321ULL,
					  9007199254740993ULL, 9223372036854775807ULL, 12345678901234567890ULL,
					  18446744073709551615ULL };
	struct sbuf ours = SBUF_INIT;
	for (size_t s = 0; s < NSEEDS; s++) {
		struct np_mt19937 mt;
		np_mt_seed(&mt, seeds[s]);
		for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
			for (int i = 0; i < 40; i++)
				sbuf_addf(&ours, "%" PRIu64 " ", np_mt_interval(&mt, maxes[m]));
			sbuf_addch(&ours, '\n');
		}
	}
	char *ref = py("maxes = [0, 1, 2, 3, 5, 100, 1000, 65535, 2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**32 + 1,\n"
		       "         2**40 + 12345, 2**53 + 1, 2**63 - 1, 12345678901234567890, 2**64 - 1]\n"
		       "for s in (0, 1, 1234, 42, 2**32 - 1):\n"
		       "    rs = np.random.RandomState(s)\n"
		       "    for m in maxes:\n"
		       "        v = rs.randint(0, m + 1, size=40, dtype=np.uint64)\n"
		       "        print(''.join('%d ' % x for x in v))\n");
	check_same_text("random_interval", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
}

static void test_mt_next64_high_word_first(void)
{
	struct np_mt19937 a, b;
	np_mt_seed(&a, 1234);
	np_mt_seed(&b, 1234);
	uint64_t hi = np_mt_next32(&b), lo = np_mt_next32(&b);
	CHECK(np_mt_next64(&a) == (hi << 32 | lo));
}

static const size_t sizes[] = { 0, 1, 2, 3, 10, 1000, 100003 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void test_shuffle_matches_numpy(void)
{
	struct sbuf ours = SBUF_INIT;
	int32_t *a = malloc(100003 * sizeof(*a));
	uint32_t *u = malloc(100003 * sizeof(*u));
	int64_t *l = malloc(100003 * sizeof(*l));
	char hex[33];
	for (size_t s = 0; s < NSEEDS; s++) {
		for (size_t k = 0; k < NSIZES; k++) {
			size_t n = sizes[k];
			struct np_mt19937 mt;
			for (size_t i = 0; i < n; i++) {
				a[i] = (int32_t)i;
				u[i] = (uint32_t)i;
				l[i] = (int64_t)i;
			}
			np_mt_seed(&mt, seeds[s]);
			np_mt_shuffle_i32(&mt, a, n);
			md5_hex(a, n * sizeof(*a), hex);
			sbuf_addf(&ours, "%u %zu i32 %s", seeds[s], n, hex);
			np_mt_seed(&mt, seeds[s]);
			np_mt_shuffle_u32(&mt, u, n);
			md5_hex(u, n * sizeof(*u), hex);
			sbuf_addf(&ours, " u32 %s", hex);
			np_mt_seed(&mt, seeds[s]);
			np_mt_shuffle_i64(&mt, l, n);
			md5_hex(l, n * sizeof(*l), hex);
			sbuf_addf(&ours, " i64 %s\n", hex);
			if (n == 10) {
				sbuf_addstr(&ours, "[");
				for (size_t i = 0; i < n; i++)
					sbuf_addf(&ours, "%s%d", i ? ", " : "", a[i]);
				sbuf_addstr(&ours, "]\n");
			}
		}
	}
	char *ref = py("for s in (0, 1, 1234, 42, 2**32 - 1):\n"
		       "    for n in (0, 1, 2, 3, 10, 1000, 100003):\n"
		       "        line = '%d %d' % (s, n)\n"
		       "        for dt, name in ((np.int32, 'i32'), (np.uint32, 'u32'), (np.int64, 'i64')):\n"
		       "            x = np.arange(n, dtype=dt)\n"
		       "            np.random.RandomState(s).shuffle(x)\n"
		       "            line += ' %s %s' % (name, hashlib.md5(x.tobytes()).hexdigest())\n"
		       "            if n == 10 and dt == np.int32:\n"
		       "                lst = x.tolist()\n"
		       "        print(line)\n"
		       "        if n == 10:\n"
		       "            print(lst)\n");
	check_same_text("shuffle", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
	free(a);
	free(u);
	free(l);
}

/* Any item size, e.g. the rows of a 2-D array, which numpy shuffles along
 * the first axis with the same draws (rows of 12 and of 160 bytes here). */
static void test_shuffle_rows_and_int16(void)
{
	struct sbuf ours = SBUF_INIT;
	enum { N = 5001 };
	static int32_t rows[N][3];
	static int64_t wide[N][20];
	static int16_t h[N];
	char hex[33];
	for (int i = 0; i < N; i++) {
		for (int c = 0; c < 3; c++)
			rows[i][c] = 3 * i + c;
		for (int c = 0; c < 20; c++)
			wide[i][c] = 20 * i + c;
		h[i] = (int16_t)(i - 2500);
	}
	struct np_mt19937 mt;
	np_mt_seed(&mt, 7);
	np_mt_shuffle(&mt, rows, N, sizeof(rows[0]));
	np_mt_shuffle(&mt, h, N, sizeof(h[0]));
	np_mt_shuffle(&mt, wide, N, sizeof(wide[0]));
	md5_hex(rows, sizeof(rows), hex);
	sbuf_addf(&ours, "%s ", hex);
	md5_hex(h, sizeof(h), hex);
	sbuf_addf(&ours, "%s ", hex);
	md5_hex(wide, sizeof(wide), hex);
	sbuf_addf(&ours, "%s\n", hex);
	char *ref = py("rs = np.random.RandomState(7)\n"
		       "x = np.arange(5001 * 3, dtype=np.int32).reshape(5001, 3)\n"
		       "h = np.arange(-2500, 2501, dtype=np.int16)\n"
		       "w = np.arange(5001 * 20, dtype=np.int64).reshape(5001, 20)\n"
		       "rs.shuffle(x)\n"
		       "rs.shuffle(h)\n"
		       "rs.shuffle(w)\n"
		       "print(*(hashlib.md5(a.tobytes()).hexdigest() for a in (x, h, w)))\n");
	check_same_text("row shuffle", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
}

/* Two shuffles from one RandomState continue one stream (Megatron: the
 * document index, then the shuffle index). */
static void test_successive_shuffles(void)
{
	struct sbuf ours = SBUF_INIT;
	char hex[33];
	static int32_t d[30011];
	static uint32_t s[12345];
	for (size_t k = 0; k < NSEEDS; k++) {
		struct np_mt19937 mt;
		np_mt_seed(&mt, seeds[k]);
		for (int i = 0; i < 30011; i++)
			d[i] = i % 1001;
		for (int i = 0; i < 12345; i++)
			s[i] = (uint32_t)i;
		np_mt_shuffle_i32(&mt, d, 30011);
		np_mt_shuffle_u32(&mt, s, 12345);
		md5_hex(d, sizeof(d), hex);
		sbuf_addf(&ours, "%s ", hex);
		md5_hex(s, sizeof(s), hex);
		sbuf_addf(&ours, "%s %u\n", hex, np_mt_next32(&mt));
	}
	char *ref = py("for seed in (0, 1, 1234, 42, 2**32 - 1):\n"
		       "    rs = np.random.RandomState(seed)\n"
		       "    d = (np.arange(30011) % 1001).astype(np.int32)\n"
		       "    s = np.arange(12345, dtype=np.uint32)\n"
		       "    rs.shuffle(d)\n"
		       "    rs.shuffle(s)\n"
		       "    print(hashlib.md5(d.tobytes()).hexdigest(), hashlib.md5(s.tobytes()).hexdigest(),\n"
		       "          rs.randint(0, 2**32, dtype=np.uint64))\n");
	check_same_text("successive shuffles", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
}

/* the worked example T, seed 1234: N = 3 and N = 10 (separate last epoch). */
static void test_worked_example(void)
{
	struct np_mt19937 mt;
	int32_t doc[12] = { 0, 1, 2, 3 };
	uint32_t shuf[14];
	np_mt_seed(&mt, 1234);
	np_mt_shuffle_i32(&mt, doc, 4);
	for (int i = 0; i < 4; i++)
		shuf[i] = (uint32_t)i;
	np_mt_shuffle_u32(&mt, shuf, 4);
	static const int32_t doc3[4] = { 0, 1, 2, 3 };
	static const uint32_t shuf3[4] = { 1, 2, 3, 0 };
	CHECK(!memcmp(doc, doc3, sizeof(doc3)));
	CHECK(!memcmp(shuf, shuf3, sizeof(shuf3)));

	np_mt_seed(&mt, 1234);
	for (int i = 0; i < 12; i++)
		doc[i] = i % 4;
	np_mt_shuffle_i32(&mt, doc, 8);      /* the first E-1 = 2 epochs */
	np_mt_shuffle_i32(&mt, doc + 8, 4);  /* the last epoch alone */
	for (int i = 0; i < 14; i++)
		shuf[i] = (uint32_t)i;
	np_mt_shuffle_u32(&mt, shuf, 9);     /* [0, a) with a = 9 */
	np_mt_shuffle_u32(&mt, shuf + 9, 5); /* [a, M) */
	static const int32_t doc10[12] = { 2, 1, 2, 0, 0, 1, 3, 3, 0, 2, 1, 3 };
	static const uint32_t shuf10[14] = { 7, 3, 5, 1, 4, 8, 0, 2, 6, 13, 10, 12, 9, 11 };
	CHECK(!memcmp(doc, doc10, sizeof(doc10)));
	CHECK(!memcmp(shuf, shuf10, sizeof(shuf10)));
}

static void test_seedseq_matches_numpy(void)
{
	static const uint64_t ss_seeds[] = { 0, 1, 1234, 4294967295ULL, 4294967296ULL, 1311768467463790320ULL,
					     18446744073709551615ULL };
	struct sbuf ours = SBUF_INIT;
	for (size_t k = 0; k < sizeof(ss_seeds) / sizeof(ss_seeds[0]); k++) {
		struct np_seedseq ss;
		uint32_t w[9];
		np_seedseq_init_int(&ss, ss_seeds[k]);
		np_seedseq_generate_state(&ss, w, 9);
		for (int i = 0; i < 9; i++)
			sbuf_addf(&ours, "%u ", w[i]);
		struct np_pcg64 g;
		np_pcg64_seed(&g, ss_seeds[k]);
		for (int i = 0; i < 3; i++)
			sbuf_addf(&ours, "%" PRIu64 " ", np_pcg64_next64(&g));
		sbuf_addch(&ours, '\n');
	}
	/* Longer entropy than the pool: words beyond 4 are mixed in afterwards. */
	uint32_t ent[6] = { 1, 2, 3, 4, 5, 4000000000U }, w[4];
	struct np_seedseq ss;
	np_seedseq_init(&ss, ent, 6);
	np_seedseq_generate_state(&ss, w, 4);
	sbuf_addf(&ours, "%u %u %u %u\n", w[0], w[1], w[2], w[3]);
	char *ref = py("for s in (0, 1, 1234, 2**32 - 1, 2**32, 0x123456789abcdef0, 2**64 - 1):\n"
		       "    st = np.random.SeedSequence(s).generate_state(9)\n"
		       "    bg = np.random.PCG64(s)\n"
		       "    print(''.join('%d ' % x for x in st) + ''.join('%d ' % bg.random_raw() for _ in range(3)))\n"
		       "print(' '.join(str(x) for x in np.random.SeedSequence([1, 2, 3, 4, 5, 4000000000]).generate_state(4)))\n");
	check_same_text("SeedSequence / PCG64", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
}

static void test_mock_lengths(void)
{
	enum { N = 100000 };
	int32_t *v = malloc(N * sizeof(*v));
	static const int32_t first[10] = { 3484, 2609, 2094, 1105, 1261, 168, 309, 68, 718, 3331 };
	CHECK_INT(np_mock_lengths(v, N, 0, 1, 4096), 0);
	long long total = 0;
	int lo = 4096, hi = 0;
	for (int i = 0; i < N; i++) {
		total += v[i];
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	CHECK(!memcmp(v, first, sizeof(first)));
	CHECK_INT(total, 204637097);
	CHECK_INT(lo, 1);
	CHECK_INT(hi, 4095);
	free(v);
}

/* All 100000 values of integers(low, high, size=100000, dtype=int32) for
 * several seeds and ranges (md5 of the array), then a run of odd-sized calls
 * on one generator: the buffered high half of a 64-bit output carries over
 * from one call to the next, as in numpy. */
static void test_integers_i32_match_numpy(void)
{
	static const int32_t ranges[][2] = { { 1, 4096 }, { 0, 2 }, { 5, 6 }, { -1000, 1000 }, { 0, 2147483647 },
					     { -2147483647 - 1, 2147483647 }, { -7, 1000000007 }, { 100, 103 } };
	static const uint64_t gseeds[] = { 0, 1234, 1, 4294967296ULL };
	enum { N = 100000 };
	int32_t *v = malloc(N * sizeof(*v));
	char hex[33];
	struct sbuf ours = SBUF_INIT;
	for (size_t s = 0; s < sizeof(gseeds) / sizeof(gseeds[0]); s++) {
		for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
			struct np_pcg64 g;
			np_pcg64_seed(&g, gseeds[s]);
			CHECK_INT(np_gen_integers_i32(&g, ranges[r][0], ranges[r][1], v, N), 0);
			md5_hex(v, N * sizeof(*v), hex);
			sbuf_addf(&ours, "%s\n", hex);
		}
		struct np_pcg64 g;
		np_pcg64_seed(&g, gseeds[s]);
		for (int k = 1; k <= 12; k++) {
			int32_t lo = ranges[k % 8][0], hi = ranges[k % 8][1];
			CHECK_INT(np_gen_integers_i32(&g, lo, hi, v, (size_t)k), 0);
			for (int i = 0; i < k; i++)
				sbuf_addf(&ours, "%d ", v[i]);
		}
		sbuf_addch(&ours, '\n');
	}
	char *ref = py("ranges = [(1, 4096), (0, 2), (5, 6), (-1000, 1000), (0, 2**31 - 1), (-2**31, 2**31 - 1),\n"
		       "          (-7, 1000000007), (100, 103)]\n"
		       "for seed in (0, 1234, 1, 2**32):\n"
		       "    for lo, hi in ranges:\n"
		       "        v = np.random.default_rng(seed=seed).integers(low=lo, high=hi, size=100000, dtype=np.int32)\n"
		       "        print(hashlib.md5(v.tobytes()).hexdigest())\n"
		       "    g = np.random.default_rng(seed)\n"
		       "    line = ''\n"
		       "    for k in range(1, 13):\n"
		       "        lo, hi = ranges[k % 8]\n"
		       "        line += ''.join('%d ' % x for x in g.integers(lo, hi, size=k, dtype=np.int32))\n"
		       "    print(line)\n");
	check_same_text("Generator.integers int32", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
	free(v);
}

static void test_integers_i64_match_numpy(void)
{
	static const int64_t ranges[][2] = { { 0, 10 },
					     { 0, 4294967296LL },
					     { 0, 4294967295LL },
					     { -1099511627776LL, 1099511627776LL },
					     { 0, 9223372036854775807LL },
					     { -9223372036854775807LL - 1, 9223372036854775807LL },
					     { 3, 4 },
					     { -5, 123456789012345LL } };
	enum { N = 2000 };
	int64_t v[N];
	char hex[33];
	struct sbuf ours = SBUF_INIT;
	for (uint64_t seed = 0; seed < 3; seed++) {
		struct np_pcg64 g;
		np_pcg64_seed(&g, seed);
		for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
			CHECK_INT(np_gen_integers_i64(&g, ranges[r][0], ranges[r][1], v, N - r), 0);
			md5_hex(v, (N - r) * sizeof(*v), hex);
			sbuf_addf(&ours, "%s\n", hex);
		}
	}
	char *ref = py("ranges = [(0, 10), (0, 2**32), (0, 2**32 - 1), (-2**40, 2**40), (0, 2**63 - 1),\n"
		       "          (-2**63, 2**63 - 1), (3, 4), (-5, 123456789012345)]\n"
		       "for seed in range(3):\n"
		       "    g = np.random.default_rng(seed)\n"
		       "    for r, (lo, hi) in enumerate(ranges):\n"
		       "        v = g.integers(lo, hi, size=2000 - r, dtype=np.int64)\n"
		       "        print(hashlib.md5(v.tobytes()).hexdigest())\n");
	check_same_text("Generator.integers int64", ours.buf, ref);
	free(ref);
	sbuf_release(&ours);
}

static void test_integers_empty_range_refused(void)
{
	struct np_pcg64 g;
	int32_t v[1] = { 77 };
	int64_t w[1] = { 77 };
	np_pcg64_seed(&g, 0);
	struct test_capture c;
	test_capture_begin(&c, 2);
	int r1 = np_gen_integers_i32(&g, 5, 5, v, 1);
	int r2 = np_gen_integers_i64(&g, 6, -6, w, 1);
	char *msg = test_capture_end(&c);
	CHECK_INT(r1, -1);
	CHECK_INT(r2, -1);
	CHECK_INT(v[0], 77);
	CHECK(msg && strstr(msg, "low 5 >= high 5"));
	free(msg);
}

int main(void)
{
	log_init("test_np_random", 0, 1);
	scratch = test_tmpdir("np_random");
	RUN(test_mt_check_values);
	RUN(test_mt_draws_match_numpy);
	RUN(test_mt_interval_matches_randint);
	RUN(test_mt_next64_high_word_first);
	RUN(test_shuffle_matches_numpy);
	RUN(test_shuffle_rows_and_int16);
	RUN(test_successive_shuffles);
	RUN(test_worked_example);
	RUN(test_seedseq_matches_numpy);
	RUN(test_mock_lengths);
	RUN(test_integers_i32_match_numpy);
	RUN(test_integers_i64_match_numpy);
	RUN(test_integers_empty_range_refused);
	free(scratch);
	return test_summary();
}
