/*
 * test_idx.c - the indexed dataset writer and reader against Megatron's
 * format (docs/formats.md): the worked example byte for byte (as Megatron's
 * own IndexedDatasetBuilder writes it), the
 * sentence-split arrays, merging, numpy reading our files, and every way a
 * dataset can be broken being refused with the file named.
 */
#include "base/error.h"
#include "data/idx.h"
#include "test.h"

#include <fcntl.h>

static char *path_in(const char *dir, const char *name)
{
	char *p = malloc(4300);
	snprintf(p, 4300, "%s/%s", dir, name);
	return p;
}

/* The worked example of docs/formats.md: two documents, GPT-2 ids, uint16. */
static void test_worked_example_bytes(void)
{
	static const unsigned char want_idx[82] = {
		0x4d, 0x4d, 0x49, 0x44, 0x49, 0x44, 0x58, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x08, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00,
	};
	static const unsigned char want_bin[12] = { 0x88, 0x3c, 0xe3, 0x03, 0x50, 0xc4,
						    0xd0, 0x01, 0xda, 0x0c, 0x50, 0xc4 };
	char *dir = test_tmpdir("idx_example");
	char *prefix = path_in(dir, "P");
	struct idx_writer w;
	CHECK_INT(idx_writer_open(&w, prefix, idx_optimal_dtype(50257), false), 0);
	int32_t d0[] = { 15496, 995, 50256 }, d1[] = { 464, 3290, 50256 }, l[] = { 3 };
	CHECK_INT(idx_writer_add_document(&w, d0, 3, l, 1), 0);
	CHECK_INT(idx_writer_add_document(&w, d1, 3, l, 1), 0);
	CHECK_INT(idx_writer_finish(&w), 0);
	CHECK_INT(idx_writer_publish(&w), 0);
	size_t n = 0;
	char *idx = path_in(dir, "P.idx"), *bin = path_in(dir, "P.bin");
	unsigned char *got = (unsigned char *)test_read_file(idx, &n);
	CHECK_INT(n, 82);
	CHECK(got && n == 82 && !memcmp(got, want_idx, 82));
	free(got);
	got = (unsigned char *)test_read_file(bin, &n);
	CHECK_INT(n, 12);
	CHECK(got && n == 12 && !memcmp(got, want_bin, 12));
	free(got);
	char cmd[4500];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 2", dir); /* no temporaries left */
	CHECK_INT(system(cmd), 0);
	free(idx);
	free(bin);
	free(prefix);
	free(dir);
}

/* Sentence-split variant: lengths [2,3,2], pointers [0,4,10], docs [0,2,2,3]. */
static void test_sentences_and_empty_document(void)
{
	char *dir = test_tmpdir("idx_sent");
	char *prefix = path_in(dir, "S");
	struct idx_writer w;
	CHECK_INT(idx_writer_open(&w, prefix, IDX_UINT16, false), 0);
	int32_t a[] = { 1, 2, 3, 4, 5 }, la[] = { 2, 3 }, c[] = { 7, 8 }, lc[] = { 2 };
	CHECK_INT(idx_writer_add_document(&w, a, 5, la, 2), 0);
	CHECK_INT(idx_writer_add_document(&w, NULL, 0, NULL, 0), 0);
	CHECK_INT(idx_writer_add_document(&w, c, 2, lc, 1), 0);
	CHECK_INT(idx_writer_finish(&w), 0);
	CHECK_INT(idx_writer_publish(&w), 0);
	struct idx_reader r;
	CHECK_INT(idx_reader_open(&r, prefix, false), 0);
	CHECK_INT(r.n_seqs, 3);
	CHECK_INT(r.n_doc_entries, 4);
	CHECK_INT(idx_length(&r, 0), 2);
	CHECK_INT(idx_length(&r, 1), 3);
	CHECK_INT(idx_length(&r, 2), 2);
	CHECK_INT(idx_pointer(&r, 1), 4);
	CHECK_INT(idx_pointer(&r, 2), 10);
	CHECK_INT(idx_doc(&r, 1), 2);
	CHECK_INT(idx_doc(&r, 2), 2);
	CHECK_INT(idx_doc(&r, 3), 3);
	size_t nt;
	const uint16_t *s2 = idx_reader_sequence(&r, 2, &nt);
	CHECK_INT(nt, 2);
	CHECK_INT(s2[0], 7);
	CHECK_INT(s2[1], 8);
	idx_reader_close(&r);
	free(prefix);
	free(dir);
}

/* Merging two datasets equals writing their documents into one. */
static void test_merge_equals_direct(void)
{
	char *dir = test_tmpdir("idx_merge");
	char *pa = path_in(dir, "a"), *pb = path_in(dir, "b"), *pm = path_in(dir, "m"), *pd = path_in(dir, "d");
	int32_t x[] = { 70000, 1, 2 }, lx[] = { 1, 2 }, y[] = { 5 }, ly[] = { 1 };
	struct idx_writer w;
	CHECK_INT(idx_writer_open(&w, pa, IDX_INT32, false), 0);
	idx_writer_add_document(&w, x, 3, lx, 2);
	idx_writer_add_document(&w, NULL, 0, NULL, 0);
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	CHECK_INT(idx_writer_open(&w, pb, IDX_INT32, false), 0);
	idx_writer_add_document(&w, y, 1, ly, 1);
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	CHECK_INT(idx_writer_open(&w, pm, IDX_INT32, false), 0);
	CHECK_INT(idx_writer_add_dataset(&w, pa), 0);
	CHECK_INT(idx_writer_add_dataset(&w, pb), 0);
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	CHECK_INT(idx_writer_open(&w, pd, IDX_INT32, false), 0);
	idx_writer_add_document(&w, x, 3, lx, 2);
	idx_writer_add_document(&w, NULL, 0, NULL, 0);
	idx_writer_add_document(&w, y, 1, ly, 1);
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	char cmd[9000];
	snprintf(cmd, sizeof(cmd), "cmp -s '%s.idx' '%s.idx' && cmp -s '%s.bin' '%s.bin'", pm, pd, pm, pd);
	CHECK_INT(system(cmd), 0);

	/* a dtype mismatch is refused */
	char *pu = path_in(dir, "u");
	CHECK_INT(idx_writer_open(&w, pu, IDX_UINT16, false), 0);
	idx_writer_add_document(&w, y, 1, ly, 1);
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	CHECK_INT(idx_writer_open(&w, pm, IDX_INT32, false), 0);
	int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
	dup2(devnull, 2);
	CHECK_INT(idx_writer_add_dataset(&w, pu), -1);
	/* ids beyond uint16 are refused, never wrapped */
	struct idx_writer w16;
	CHECK_INT(idx_writer_open(&w16, pu, IDX_UINT16, false), 0);
	CHECK_INT(idx_writer_add_document(&w16, x, 3, lx, 2), -1);
	idx_writer_abort(&w16);
	dup2(saved, 2);
	close(saved);
	close(devnull);
	idx_writer_abort(&w);
	free(pa);
	free(pb);
	free(pm);
	free(pd);
	free(pu);
	free(dir);
}

/* numpy, following docs/formats.md's layout independently, reads what we wrote. */
static void test_numpy_reads_ours(void)
{
	char *dir = test_tmpdir("idx_numpy");
	char *prefix = path_in(dir, "N");
	struct idx_writer w;
	CHECK_INT(idx_writer_open(&w, prefix, IDX_UINT16, false), 0);
	int32_t t[64], l[3];
	for (int d = 0; d < 20; d++) {
		int n = 0;
		for (int s = 0; s < 3; s++) {
			l[s] = (d * 7 + s) % 5;
			for (int k = 0; k < l[s]; k++, n++)
				t[n] = (d * 1000 + s * 10 + k) % 50257;
		}
		int ns = 0;
		int32_t lens[3];
		for (int s = 0; s < 3; s++)
			if (l[s])
				lens[ns++] = l[s];
		CHECK_INT(idx_writer_add_document(&w, t, (size_t)n, lens, (size_t)ns), 0);
	}
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	char cmd[9000];
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 - '%s' <<'EOF'\n"
		 "import sys, numpy as np\n"
		 "p = sys.argv[1]\n"
		 "b = open(p + '.idx', 'rb').read()\n"
		 "assert b[:9] == b'MMIDIDX\\x00\\x00'\n"
		 "ver = int.from_bytes(b[9:17], 'little'); code = b[17]\n"
		 "S = int.from_bytes(b[18:26], 'little'); D1 = int.from_bytes(b[26:34], 'little')\n"
		 "assert ver == 1 and code == 8, (ver, code)\n"
		 "lens = np.frombuffer(b, np.int32, S, 34)\n"
		 "ptr = np.frombuffer(b, np.int64, S, 34 + 4 * S)\n"
		 "doc = np.frombuffer(b, np.int64, D1, 34 + 12 * S)\n"
		 "assert len(b) == 34 + 12 * S + 8 * D1\n"
		 "tok = np.fromfile(p + '.bin', np.uint16)\n"
		 "assert D1 == 21 and doc[0] == 0 and doc[-1] == S\n"
		 "exp = []\n"
		 "for d in range(20):\n"
		 "    for s in range(3):\n"
		 "        l = (d * 7 + s) %% 5\n"
		 "        if l: exp.append([(d * 1000 + s * 10 + k) %% 50257 for k in range(l)])\n"
		 "assert S == len(exp), (S, len(exp))\n"
		 "for i, e in enumerate(exp):\n"
		 "    got = tok[ptr[i] // 2: ptr[i] // 2 + lens[i]].tolist()\n"
		 "    assert got == e, (i, got, e)\n"
		 "EOF",
		 prefix);
	CHECK_INT(system(cmd), 0);
	free(prefix);
	free(dir);
}

/* Write a valid small dataset, then damage it in one way per case. */
static void check_refused(const char *dir, const char *what, const char *shell_damage, const char *expect)
{
	char *prefix = path_in(dir, "D");
	struct idx_writer w;
	int32_t t[] = { 1, 2, 3, 4 }, l[] = { 4 };
	CHECK_INT(idx_writer_open(&w, prefix, IDX_UINT16, false), 0);
	idx_writer_add_document(&w, t, 4, l, 1);
	idx_writer_add_document(&w, t, 4, l, 1);
	CHECK_INT(idx_writer_finish(&w) | idx_writer_publish(&w), 0);
	char cmd[9000];
	snprintf(cmd, sizeof(cmd), "cd '%s' && %s", dir, shell_damage);
	CHECK_INT(system(cmd), 0);
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	struct idx_reader r;
	int ret = idx_reader_open(&r, prefix, false);
	char *msg = test_capture_end(&cap);
	if (ret != -1 || !msg || !strstr(msg, expect))
		printf("#   case '%s': ret %d, message: %s", what, ret, msg ? msg : "(none)\n");
	CHECK_INT(ret, -1);
	CHECK(msg && strstr(msg, expect));
	free(msg);
	free(prefix);
}

static void test_refuses_broken_datasets(void)
{
	char *dir = test_tmpdir("idx_broken");
	check_refused(dir, "truncated idx", "truncate -s 50 D.idx", "D.idx' is truncated");
	check_refused(dir, "truncated header", "truncate -s 20 D.idx", "D.idx' is truncated");
	check_refused(dir, "truncated bin", "truncate -s 10 D.bin", "D.bin' has 10 bytes");
	check_refused(dir, "bad magic", "printf 'X' | dd of=D.idx bs=1 seek=0 conv=notrunc 2>/dev/null",
		      "bad magic");
	check_refused(dir, "bad version", "printf '\\002' | dd of=D.idx bs=1 seek=9 conv=notrunc 2>/dev/null",
		      "index version 2");
	check_refused(dir, "bad dtype", "printf '\\011' | dd of=D.idx bs=1 seek=17 conv=notrunc 2>/dev/null",
		      "unknown token dtype code 9");
	check_refused(dir, "missing bin", "rm D.bin", "the .bin is missing");
	check_refused(dir, "extra bytes", "printf 'xyz' >> D.idx", "D.idx' has");
	free(dir);
}

int main(void)
{
	log_init("test_idx", 0, 1);
	RUN(test_worked_example_bytes);
	RUN(test_sentences_and_empty_document);
	RUN(test_merge_equals_direct);
	RUN(test_numpy_reads_ours);
	RUN(test_refuses_broken_datasets);
	return test_summary();
}
