/*
 * test_npy.c - lib/data/npy: our .npy files are byte-identical to numpy
 * 1.24's np.save of the same arrays and numpy loads them; we load numpy's
 * files (versions 1.0 and 2.0, any key order); damaged files are refused
 * with a message naming the file. numpy runs as /usr/bin/python3.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "data/npy.h"
#include "test.h"

static char *dir;

static char *path_in(const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static int write_bytes(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	int bad = fwrite(b, 1, n, f) != n;
	return fclose(f) | bad ? -1 : 0;
}

/* Run a Python script with numpy's interpreter (test.h: test_python). */
static char *py(const char *script)
{
	return test_python(dir, "import sys, os\nimport numpy as np\nD = sys.argv[1]\n", script);
}

/* h holds a whole header whose dictionary text is dict: preamble, text,
 * spaces, '\n', total a multiple of 64. */
static void check_header(const struct sbuf *h, const char *dict, size_t total)
{
	size_t n = strlen(dict);
	CHECK_INT(h->len, total);
	if (h->len != total || total < 10 + n + 1)
		return;
	CHECK(!memcmp(h->buf, "\x93NUMPY\x01\x00", 8));
	CHECK_INT((unsigned char)h->buf[8] | (unsigned char)h->buf[9] << 8, total - 10);
	CHECK(!memcmp(h->buf + 10, dict, n));
	for (size_t i = 10 + n; i < total - 1; i++)
		CHECK(h->buf[i] == ' ');
	CHECK(h->buf[total - 1] == '\n');
}

static void test_header_text(void)
{
	struct sbuf h = SBUF_INIT;
	uint64_t shape[2] = { 5, 2 };
	npy_header(&h, NPY_I4, 1, shape);
	check_header(&h, "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", 128);
	sbuf_reset(&h);
	npy_header(&h, NPY_I8, 2, shape);
	check_header(&h, "{'descr': '<i8', 'fortran_order': False, 'shape': (5, 2), }", 128);
	sbuf_reset(&h);
	npy_header(&h, NPY_U4, 0, shape);
	check_header(&h, "{'descr': '<u4', 'fortran_order': False, 'shape': (), }", 128);
	sbuf_reset(&h);
	uint64_t big[1] = { UINT64_MAX };
	npy_header(&h, NPY_BOOL, 1, big);
	check_header(&h, "{'descr': '|b1', 'fortran_order': False, 'shape': (18446744073709551615,), }", 128);
	sbuf_release(&h);
}

struct ncase {
	enum npy_dtype dt;
	int ndim;
	uint64_t shape[16];
};

/* Element i of a case's array, the same formula as the Python side:
 * (i * 2654435761 - 50) cast to the dtype; i % 3 == 0 for bool;
 * i * 0.25 - 3.5 for floats. */
static void fill(enum npy_dtype dt, void *data, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		int64_t v = (int64_t)i * 2654435761LL - 50;
		double f = (double)i * 0.25 - 3.5;
		switch (dt) {
		case NPY_BOOL: ((uint8_t *)data)[i] = i % 3 == 0; break;
		case NPY_I1: ((int8_t *)data)[i] = (int8_t)v; break;
		case NPY_U1: ((uint8_t *)data)[i] = (uint8_t)v; break;
		case NPY_I2: ((int16_t *)data)[i] = (int16_t)v; break;
		case NPY_U2: ((uint16_t *)data)[i] = (uint16_t)v; break;
		case NPY_I4: ((int32_t *)data)[i] = (int32_t)v; break;
		case NPY_U4: ((uint32_t *)data)[i] = (uint32_t)v; break;
		case NPY_I8: ((int64_t *)data)[i] = v; break;
		case NPY_U8: ((uint64_t *)data)[i] = (uint64_t)v; break;
		case NPY_F4: ((float *)data)[i] = (float)f; break;
		case NPY_F8: ((double *)data)[i] = f; break;
		default: abort();
		}
	}
}

static const struct ncase cases[] = {
	{ NPY_I4, 1, { 0 } },         { NPY_I4, 1, { 1 } },      { NPY_I4, 1, { 5 } },
	{ NPY_I4, 1, { 1000 } },      { NPY_I8, 1, { 12345 } },  { NPY_U4, 1, { 7 } },
	{ NPY_I2, 1, { 3 } },         { NPY_U2, 1, { 4 } },      { NPY_U8, 1, { 3 } },
	{ NPY_I4, 2, { 4, 2 } },      { NPY_I8, 2, { 0, 2 } },   { NPY_I8, 2, { 10001, 2 } },
	{ NPY_BOOL, 1, { 9 } },       { NPY_F4, 1, { 6 } },      { NPY_F8, 2, { 2, 3 } },
	{ NPY_I4, 0, { 0 } },         { NPY_I1, 1, { 300 } },    { NPY_U1, 3, { 2, 3, 4 } },
	{ NPY_I2, 1, { 1234567890 / 10000 } },
	/* header that ends exactly on a 64-byte boundary: numpy pads 64 more */
	{ NPY_I1, 14, { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 100 } },
	/* and one that ends one byte short of it: a single padding space */
	{ NPY_I2, 13, { 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 10000 } },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static uint64_t case_count(const struct ncase *c)
{
	uint64_t n = 1;
	for (int d = 0; d < c->ndim; d++)
		n *= c->shape[d];
	return n;
}

static void test_files_match_np_save(void)
{
	struct sbuf list = SBUF_INIT;
	for (size_t k = 0; k < NCASES; k++) {
		const struct ncase *c = &cases[k];
		uint64_t n = case_count(c);
		void *data = malloc(n * npy_itemsize(c->dt) + 1);
		fill(c->dt, data, n);
		char name[64];
		snprintf(name, sizeof(name), "ours_%zu.npy", k);
		char *p = path_in(name);
		CHECK_INT(npy_save(p, c->dt, c->ndim, c->shape, data), 0);
		free(p);
		free(data);
		sbuf_addf(&list, "('%s', (", npy_descr(c->dt));
		for (int d = 0; d < c->ndim; d++)
			sbuf_addf(&list, "%" PRIu64 ",", c->shape[d]);
		sbuf_addstr(&list, ")),\n");
	}
	struct sbuf script = SBUF_INIT;
	sbuf_addf(&script, "cases = [\n%s]\n", list.buf);
	sbuf_addstr(&script,
		    "for k, (descr, shape) in enumerate(cases):\n"
		    "    n = int(np.prod(shape))\n"
		    "    i = np.arange(n, dtype=np.int64)\n"
		    "    if descr == '|b1': a = (i % 3 == 0)\n"
		    "    elif descr[1] == 'f': a = (i * 0.25 - 3.5).astype(descr)\n"
		    "    else: a = (i * 2654435761 - 50).astype(descr)\n"
		    "    a = a.reshape(shape)\n"
		    "    ours = os.path.join(D, 'ours_%d.npy' % k); theirs = os.path.join(D, 'np_%d.npy' % k)\n"
		    "    np.save(theirs, a)\n"
		    "    A = open(ours, 'rb').read(); B = open(theirs, 'rb').read()\n"
		    "    if A != B:\n"
		    "        print('case %d %s %s: bytes differ: ours %r numpy %r' % (k, descr, shape, A[:200], B[:200]))\n"
		    "    b = np.load(ours)\n"
		    "    if b.dtype != a.dtype or b.shape != a.shape or not np.array_equal(a, b):\n"
		    "        print('case %d: numpy loads ours as %s %s' % (k, b.dtype, b.shape))\n"
		    "    c = np.load(ours, mmap_mode='r')\n"
		    "    if not np.array_equal(a, c): print('case %d: mmap load differs' % k)\n"
		    "print('done')\n");
	char *out = py(script.buf);
	CHECK(out != NULL);
	if (out && strcmp(out, "done\n"))
		printf("#   %s", out);
	CHECK(out && !strcmp(out, "done\n"));
	free(out);
	sbuf_release(&script);
	sbuf_release(&list);

	/* and we read numpy's files back */
	for (size_t k = 0; k < NCASES; k++) {
		const struct ncase *c = &cases[k];
		uint64_t n = case_count(c);
		size_t bytes = n * npy_itemsize(c->dt);
		void *data = malloc(bytes + 1);
		fill(c->dt, data, n);
		char name[64];
		snprintf(name, sizeof(name), "np_%zu.npy", k);
		char *p = path_in(name);
		struct npy_array a;
		CHECK_INT(npy_load(p, &a), 0);
		CHECK_INT(a.dtype, c->dt);
		CHECK_INT(a.ndim, c->ndim);
		CHECK(!memcmp(a.shape, c->shape, (size_t)c->ndim * sizeof(uint64_t)));
		CHECK_INT(a.count, n);
		CHECK_INT(a.itemsize, npy_itemsize(c->dt));
		CHECK(a.data && !memcmp(a.data, data, bytes));
		CHECK((uintptr_t)a.data % a.itemsize == 0);
		npy_close(&a);
		free(p);
		free(data);
	}
}

/* A version 1.0 file from a header text: the preamble, the text, spaces to
 * `pad` total header bytes (0: just a '\n'), then the data. */
static void make_npy(const char *path, int major, const char *text, size_t pad, const void *data, size_t n)
{
	struct sbuf b = SBUF_INIT;
	size_t pre = major == 1 ? 10 : 12;
	size_t hlen = strlen(text) + 1;
	if (pad > pre + hlen)
		hlen = pad - pre;
	sbuf_add(&b, "\x93NUMPY", 6);
	sbuf_addch(&b, major);
	sbuf_addch(&b, 0);
	sbuf_addch(&b, (int)(hlen & 0xff));
	sbuf_addch(&b, (int)(hlen >> 8));
	if (major != 1) {
		sbuf_addch(&b, 0);
		sbuf_addch(&b, 0);
	}
	sbuf_addstr(&b, text);
	while (b.len < pre + hlen - 1)
		sbuf_addch(&b, ' ');
	sbuf_addch(&b, '\n');
	sbuf_add(&b, data, n);
	if (write_bytes(path, b.buf, b.len))
		abort();
	sbuf_release(&b);
}

static void test_reader_accepts_variants(void)
{
	int32_t v[3] = { 7, -8, 9 };
	char *p = path_in("variant.npy");
	struct npy_array a;

	/* other key order, double quotes, odd spacing, data at offset 61
	 * (not 4-aligned: the reader copies) */
	make_npy(p, 1, "{ \"shape\" :(3 , ) ,\"fortran_order\":False,'descr':'<i4'}", 61, v, sizeof(v));
	CHECK_INT(npy_load(p, &a), 0);
	CHECK_INT(a.dtype, NPY_I4);
	CHECK_INT(a.ndim, 1);
	CHECK_INT(a.shape[0], 3);
	CHECK(a.data && !memcmp(a.data, v, sizeof(v)));
	CHECK((uintptr_t)a.data % 4 == 0);
	npy_close(&a);

	/* version 2.0, '|u1' spelled '<u1', 0-d */
	make_npy(p, 2, "{'descr': '<u1', 'fortran_order': False, 'shape': ()}", 0, "\x2a", 1);
	CHECK_INT(npy_load(p, &a), 0);
	CHECK_INT(a.dtype, NPY_U1);
	CHECK_INT(a.ndim, 0);
	CHECK_INT(a.count, 1);
	CHECK(a.data && *(const uint8_t *)a.data == 42);
	npy_close(&a);
	npy_close(&a); /* harmless twice */

	/* numpy's own version 2.0 and 3.0 files */
	char *out = py("a = np.arange(6, dtype=np.int64).reshape(3, 2) * -3\n"
		       "for v in ((2, 0), (3, 0)):\n"
		       "    with open(os.path.join(D, 'v%d.npy' % v[0]), 'wb') as f:\n"
		       "        np.lib.format.write_array(f, a, version=v)\n");
	CHECK(out != NULL);
	free(out);
	for (int ver = 2; ver <= 3; ver++) {
		char name[32];
		snprintf(name, sizeof(name), "v%d.npy", ver);
		char *q = path_in(name);
		CHECK_INT(npy_load(q, &a), 0);
		CHECK_INT(a.dtype, NPY_I8);
		CHECK_INT(a.ndim, 2);
		CHECK_INT(a.shape[0], 3);
		CHECK_INT(a.shape[1], 2);
		CHECK(a.data && ((const int64_t *)a.data)[5] == -15);
		npy_close(&a);
		free(q);
	}
	free(p);
}

static void refused(const char *name, const char *expect)
{
	char *p = path_in(name);
	struct npy_array a;
	a.data = (void *)1;
	struct test_capture c;
	test_capture_begin(&c, 2);
	int r = npy_load(p, &a);
	char *msg = test_capture_end(&c);
	if (r != -1 || !msg || !strstr(msg, expect) || !strstr(msg, p))
		printf("#   case %s: ret %d, message: %s", name, r, msg ? msg : "(none)\n");
	CHECK_INT(r, -1);
	CHECK(msg && strstr(msg, expect));
	CHECK(msg && strstr(msg, p));   /* names the file */
	CHECK(a.data == NULL && a.map == NULL);
	free(msg);
	free(p);
}

static void test_refuses_damaged_files(void)
{
	int32_t v[4] = { 1, 2, 3, 4 };
	uint64_t shape[1] = { 4 };
	char *good = path_in("good.npy");
	CHECK_INT(npy_save(good, NPY_I4, 1, shape, v), 0);
	size_t len = 0;
	char *b = test_read_file(good, &len);
	CHECK_INT(len, 128 + 16);
	char *p;
#define DAMAGED(name, bytes, n)                       \
	do {                                          \
		p = path_in(name);                    \
		CHECK_INT(write_bytes(p, bytes, n), 0); \
		free(p);                              \
	} while (0)
	DAMAGED("empty.npy", "", 0);
	DAMAGED("short.npy", b, 7);
	DAMAGED("shortheader.npy", b, 60);
	DAMAGED("shortdata.npy", b, len - 1);
	DAMAGED("text.npy", "hello world, this is not numpy", 30);
	{
		char *c = malloc(len + 1);
		memcpy(c, b, len);
		c[len] = 0;
		DAMAGED("long.npy", c, len + 1);
		c[6] = 4;
		DAMAGED("version.npy", c, len);
		c[6] = 1;
		c[5] = 'Z';
		DAMAGED("magic.npy", c, len);
		free(c);
	}
	struct {
		const char *name, *header;
	} bad[] = {
		{ "fortran.npy", "{'descr': '<i4', 'fortran_order': True, 'shape': (4,), }" },
		{ "bigendian.npy", "{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }" },
		{ "complex.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }" },
		{ "nokey.npy", "{'descr': '<i4', 'fortran_order': False, }" },
		{ "notuple.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4), }" },
		{ "negative.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (-4,), }" },
		{ "extrakey.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), 'x': 1}" },
		{ "twice.npy", "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (4,)}" },
		{ "after.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), } x" },
		{ "notdict.npy", "['descr', '<i4']" },
		{ "shapesize.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }" },
		{ "fortranint.npy", "{'descr': '<i4', 'fortran_order': 0, 'shape': (4,), }" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = path_in(bad[i].name);
		make_npy(p, 1, bad[i].header, 128, v, sizeof(v));
		free(p);
	}
	refused("missing.npy", "cannot open");
	refused("empty.npy", "is empty");
	refused("short.npy", "truncated");
	refused("shortheader.npy", "truncated");
	refused("shortdata.npy", "truncated: 15 data bytes, the header (1-D) says 16");
	refused("long.npy", "longer than its header says");
	refused("text.npy", "bad magic");
	refused("magic.npy", "bad magic");
	refused("version.npy", "unsupported .npy format version 4.0");
	refused("fortran.npy", "Fortran-order");
	refused("bigendian.npy", "unsupported dtype '>i4'");
	refused("complex.npy", "unsupported dtype '<c8'");
	refused("nokey.npy", "missing key");
	refused("notuple.npy", "'shape' is not a tuple");
	refused("negative.npy", "non-negative integers");
	refused("extrakey.npy", "unexpected or repeated key");
	refused("twice.npy", "unexpected or repeated key");
	refused("after.npy", "text after the dictionary");
	refused("notdict.npy", "no dictionary");
	refused("shapesize.npy", "the header (2-D) says 24");
	refused("fortranint.npy", "'fortran_order' is not True or False");
	free(b);
	free(good);
}

static void test_save_error_names_file(void)
{
	char *p = path_in("no/such/dir/x.npy");
	uint64_t shape[1] = { 1 };
	int32_t v = 1;
	struct test_capture c;
	test_capture_begin(&c, 2);
	int r = npy_save(p, NPY_I4, 1, shape, &v);
	char *msg = test_capture_end(&c);
	CHECK_INT(r, -1);
	CHECK(msg && strstr(msg, "no/such/dir"));
	free(msg);
	free(p);
}

int main(void)
{
	log_init("test_npy", 0, 1);
	dir = test_tmpdir("npy");
	RUN(test_header_text);
	RUN(test_files_match_np_save);
	RUN(test_reader_accepts_variants);
	RUN(test_refuses_damaged_files);
	RUN(test_save_error_names_file);
	free(dir);
	return test_summary();
}
