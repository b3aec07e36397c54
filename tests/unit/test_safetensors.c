/*
 * test_safetensors.c - lib/ckpt/safetensors: round trips of every dtype
 * (scalars, empty tensors, names and metadata in UTF-8), writing in pieces,
 * the header text Hugging Face's writer produces, sharded folders with
 * their index, and one refusal per kind of damaged file or folder, each
 * naming the file. tests/prog/py/st_check.py parses our files by hand
 * (struct, json, numpy) and writes files we read; it runs as
 * /usr/bin/python3 from the repository root, as tests/run.sh runs us.
 */
#include "base/error.h"
#include "ckpt/h5io.h"
#include "ckpt/safetensors.h"
#include "test.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define ST_CHECK "tests/prog/py/st_check.py"

static char *dir;
static struct h5io_crc32 crc_tab;

static char *path_in(const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static int have_python(void)
{
	if (access("/usr/bin/python3", X_OK) == 0)
		return 1;
	printf("# skip: /usr/bin/python3 is missing\n");
	return 0;
}

/* Run st_check.py with args; its stdout (and stderr) into a malloc'd
 * string, the exit status as the return value (-1 when it did not run). */
static int run_check(const char *args, char **out)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 " ST_CHECK " %s 2>&1", args);
	FILE *p = popen(cmd, "r");
	*out = NULL;
	if (!p)
		return -1;
	*out = test_read_stream(p);
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the cases ------------------------------------------------------------------ */

static const char *unicode_name = "sch\xc3\xb6n \"quoted\" \\ \xe2\x9c\x93";
static const char *unicode_note = "caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\" \\ \n tab\t";

static struct st_tensor_decl decls[] = {
	{ "model.embed_tokens.weight", CKPT_F32, 2, { 37, 16 } },
	{ "model.layers.0.mlp.up_proj.weight", CKPT_BF16, 2, { 24, 8 } },
	{ "model.layers.0.input_layernorm.weight", CKPT_F16, 1, { 7 } },
	{ "empty.middle", CKPT_F32, 2, { 0, 4 } },
	{ "counts", CKPT_I64, 3, { 2, 3, 4 } },
	{ "a.scalar", CKPT_F32, 0, { 0 } },
	{ NULL, CKPT_F16, 1, { 3 } }, /* unicode_name */
	{ "many.dims", CKPT_BF16, 8, { 2, 1, 2, 1, 2, 1, 3, 1 } },
	{ "empty.last", CKPT_I64, 1, { 0 } },
};
#define NDECL ((int)(sizeof(decls) / sizeof(decls[0])))

static const char *meta_keys[] = { "format", "note" };
static const char *meta_values[2] = { "pt", NULL };

static void init_cases(void)
{
	decls[6].name = unicode_name;
	meta_values[1] = unicode_note;
}

static int64_t decl_bytes(const struct st_tensor_decl *d)
{
	int64_t n = (int64_t)ckpt_dtype_size(d->dt);
	for (int i = 0; i < d->ndim; i++)
		n *= d->shape[i];
	return n;
}

/* Bytes of tensor k: float32 from make_f32; 16-bit and int64 patterns that
 * cover every bit (NaN and infinity patterns included: raw bits travel). */
static unsigned char *case_data(int k)
{
	const struct st_tensor_decl *d = &decls[k];
	int64_t nb = decl_bytes(d), n = nb / (int64_t)ckpt_dtype_size(d->dt);
	if (d->dt == CKPT_F32)
		return (unsigned char *)make_f32(n, k);
	unsigned char *b = malloc((size_t)(nb ? nb : 1));
	for (int64_t i = 0; i < n; i++) {
		if (d->dt == CKPT_I64) {
			int64_t v = (int64_t)((uint64_t)i * UINT64_C(0x9E3779B97F4A7C15)) ^ k;
			memcpy(b + i * 8, &v, 8);
		} else {
			uint16_t v = (uint16_t)(i * 40503u + (unsigned)k * 977u);
			memcpy(b + i * 2, &v, 2);
		}
	}
	return b;
}

/* Write every case with st_write (piece == 0) or in pieces of `piece` bytes. */
static int write_cases(const char *path, int piece)
{
	struct st_writer *w = st_create(path, NDECL, decls, 2, meta_keys, meta_values);
	if (!w)
		return -1;
	for (int k = 0; k < NDECL; k++) {
		unsigned char *b = case_data(k);
		size_t nb = (size_t)decl_bytes(&decls[k]);
		if (!piece) {
			if (st_write(w, b, nb) < 0) {
				free(b);
				st_abort(w);
				return -1;
			}
		} else {
			for (size_t off = 0; off < nb; off += (size_t)piece) {
				size_t m = nb - off < (size_t)piece ? nb - off : (size_t)piece;
				if (st_write_part(w, b + off, m) < 0) {
					free(b);
					st_abort(w);
					return -1;
				}
			}
		}
		free(b);
	}
	return st_finish(w);
}

/* f holds exactly the cases, in declaration order, with their data. */
static void check_cases(const struct st_file *f)
{
	CHECK_INT(st_count(f), NDECL);
	if (st_count(f) != NDECL)
		return;
	for (int k = 0; k < NDECL; k++) {
		const struct st_tensor_decl *d = &decls[k];
		CHECK_STR(st_name(f, k), d->name);
		CHECK_INT(st_find(f, d->name), k);
		enum ckpt_dtype dt = CKPT_NDTYPES;
		int ndim = -1;
		int64_t shape[CKPT_MAX_NDIM] = { 0 };
		st_info(f, k, &dt, &ndim, shape);
		CHECK_INT(dt, d->dt);
		CHECK_INT(ndim, d->ndim);
		for (int i = 0; i < d->ndim; i++)
			CHECK_INT(shape[i], d->shape[i]);
		size_t nb = 0;
		const void *p = st_data(f, k, &nb);
		CHECK_INT(nb, decl_bytes(d));
		unsigned char *b = case_data(k);
		CHECK(nb == (size_t)decl_bytes(d) && !memcmp(p, b, nb));
		free(b);
	}
	CHECK_INT(st_find(f, "model.embed_tokens"), -1);
	CHECK_INT(st_find(f, ""), -1);
	CHECK_INT(st_find(f, "zzz"), -1);
	CHECK_INT(st_find(f, "__metadata__"), -1);
	CHECK_STR(st_metadata(f, "format"), "pt");
	CHECK_STR(st_metadata(f, "note"), unicode_note);
	CHECK(st_metadata(f, "absent") == NULL);
}

static void test_round_trip(void)
{
	init_cases();
	char *p = path_in("cases.safetensors");
	CHECK_INT(write_cases(p, 0), 0);
	struct st_file *f = st_open(p);
	CHECK(f != NULL);
	if (f) {
		CHECK_STR(st_path(f), p);
		check_cases(f);
		st_close(f);
	}
	/* the layout: 8 + N + data, N a multiple of 8, metadata first */
	size_t len = 0;
	unsigned char *raw = (unsigned char *)test_read_file(p, &len);
	uint64_t n = 0;
	for (int i = 7; raw && i >= 0; i--)
		n = n << 8 | raw[i];
	int64_t data = 0;
	for (int k = 0; k < NDECL; k++)
		data += decl_bytes(&decls[k]);
	CHECK_INT(n % 8, 0);
	CHECK_INT(len, 8 + n + (uint64_t)data);
	CHECK(raw && !memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\",\"note\":", 38));
	free(raw);
	free(p);
}

/* Hugging Face's writer (safetensors 0.4, serde_json): compact JSON,
 * metadata first, dtype / shape / data_offsets, spaces to a multiple of 8. */
static void test_header_text(void)
{
	static const char *const want[] = {
		"{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		"\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[8,10]}}",
		"{\"x\":{\"dtype\":\"I64\",\"shape\":[1,0],\"data_offsets\":[0,0]}}",
	};
	struct st_tensor_decl two[2] = { { "a", CKPT_F32, 1, { 2 } }, { "b", CKPT_BF16, 0, { 0 } } };
	struct st_tensor_decl one[1] = { { "x", CKPT_I64, 2, { 1, 0 } } };
	const char *k[] = { "format" }, *v[] = { "pt" };
	for (int c = 0; c < 2; c++) {
		char *p = path_in(c ? "hdr1.safetensors" : "hdr0.safetensors");
		struct st_writer *w = c ? st_create(p, 1, one, 0, NULL, NULL) : st_create(p, 2, two, 1, k, v);
		CHECK(w != NULL);
		if (!w)
			continue;
		if (!c) {
			float a[2] = { 1.5f, -2.0f };
			uint16_t b = 0x3f80;
			CHECK_INT(st_write(w, a, sizeof(a)), 0);
			CHECK_INT(st_write(w, &b, 2), 0);
		} else {
			CHECK_INT(st_write(w, NULL, 0), 0);
		}
		CHECK_INT(st_finish(w), 0);
		size_t len = 0;
		char *raw = test_read_file(p, &len);
		size_t hl = strlen(want[c]), padded = (hl + 7) / 8 * 8;
		CHECK_INT(len, 8 + padded + (c ? 0 : 10));
		CHECK_INT((unsigned char)raw[0] | (unsigned char)raw[1] << 8, padded);
		CHECK(!memcmp(raw + 2, "\0\0\0\0\0\0", 6));
		CHECK(len >= 8 + hl && !memcmp(raw + 8, want[c], hl));
		for (size_t i = 8 + hl; i < 8 + padded && i < len; i++)
			CHECK(raw[i] == ' ');
		free(raw);
		free(p);
	}
}

static void test_write_parts(void)
{
	init_cases();
	char *whole = path_in("cases.safetensors");
	size_t wl = 0, pl = 0;
	char *wb = test_read_file(whole, &wl);
	CHECK(wb != NULL);
	static const int pieces[] = { 1, 7, 64, 100000 };
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		char *p = path_in("parts.safetensors");
		CHECK_INT(write_cases(p, pieces[i]), 0);
		char *pb = test_read_file(p, &pl);
		CHECK(wb && pb && wl == pl && !memcmp(wb, pb, wl));
		free(pb);
		struct st_file *f = st_open(p);
		CHECK(f != NULL);
		if (f) {
			check_cases(f);
			st_close(f);
		}
		free(p);
	}
	free(wb);
	free(whole);
}

/* Misuse of a writer: refused with a message naming the file and the
 * tensor; a failed writer refuses to finish; st_abort removes the file. */
static void test_writer_refusals(void)
{
	init_cases();
	struct test_capture cap;
	char *p = path_in("refused.safetensors");
	unsigned char buf[4096] = { 0 };

	/* wrong size for st_write */
	struct st_writer *w = st_create(p, NDECL, decls, 0, NULL, NULL);
	CHECK(w != NULL);
	test_capture_begin(&cap, 2);
	int r1 = st_write(w, buf, 100);
	int r2 = st_finish(w);
	char *msg = test_capture_end(&cap);
	CHECK_INT(r1, -1);
	CHECK_INT(r2, -1);
	CHECK(contains_all(msg, p, "'model.embed_tokens.weight'", "2368 bytes, 100 given", "earlier error", NULL));
	free(msg);
	CHECK(exists(p)); /* left for the caller */

	/* a piece past the end of a tensor; st_write in the middle of one */
	w = st_create(p, NDECL, decls, 0, NULL, NULL);
	test_capture_begin(&cap, 2);
	r1 = st_write_part(w, buf, 2000);
	r2 = st_write_part(w, buf, 400);
	msg = test_capture_end(&cap);
	CHECK_INT(r1, 0);
	CHECK_INT(r2, -1);
	CHECK(contains_all(msg, p, "400 bytes runs past the end of tensor 'model.embed_tokens.weight'",
			   "2000 of its 2368", NULL));
	free(msg);
	st_abort(w);
	CHECK(!exists(p));
	w = st_create(p, NDECL, decls, 0, NULL, NULL);
	test_capture_begin(&cap, 2);
	r1 = st_write_part(w, buf, 8);
	r2 = st_write(w, buf, 2368);
	msg = test_capture_end(&cap);
	CHECK_INT(r1, 0);
	CHECK_INT(r2, -1);
	CHECK(contains_all(msg, p, "'model.embed_tokens.weight'", "in parts", NULL));
	free(msg);
	st_abort(w);

	/* finishing early names the first incomplete tensor */
	w = st_create(p, NDECL, decls, 0, NULL, NULL);
	unsigned char *b0 = case_data(0);
	CHECK_INT(st_write(w, b0, 2368), 0);
	free(b0);
	test_capture_begin(&cap, 2);
	r1 = st_finish(w);
	msg = test_capture_end(&cap);
	CHECK_INT(r1, -1);
	CHECK(contains_all(msg, p, "'model.layers.0.mlp.up_proj.weight' (2 of 9)", "0 of its 384", "incomplete",
			   NULL));
	free(msg);
	unlink(p);

	/* writing past the last tensor */
	struct st_tensor_decl small[1] = { { "s", CKPT_F16, 1, { 2 } } };
	w = st_create(p, 1, small, 0, NULL, NULL);
	CHECK_INT(st_write(w, buf, 4), 0);
	test_capture_begin(&cap, 2);
	r1 = st_write(w, buf, 4);
	msg = test_capture_end(&cap);
	CHECK_INT(r1, -1);
	CHECK(contains_all(msg, p, "all 1 tensors are written", NULL));
	free(msg);
	st_abort(w);

	/* bad declarations create no file */
	struct st_tensor_decl dup[2] = { { "x", CKPT_F32, 1, { 2 } }, { "x", CKPT_F32, 0, { 0 } } };
	struct st_tensor_decl res[1] = { { "__metadata__", CKPT_F32, 0, { 0 } } };
	struct st_tensor_decl neg[1] = { { "n", CKPT_F32, 2, { 3, -1 } } };
	struct st_tensor_decl dims[1] = { { "d", CKPT_F32, 9, { 1 } } };
	struct st_tensor_decl huge[1] = { { "h", CKPT_I64, 3, { INT64_C(1) << 30, INT64_C(1) << 30, 64 } } };
	const char *mk[] = { "k", "k" }, *mv[] = { "1", "2" };
	struct {
		struct st_tensor_decl *d;
		int n, nmeta;
		const char *needle;
	} bad[] = {
		{ dup, 2, 0, "tensor 'x' is declared twice" },
		{ res, 1, 0, "reserved for metadata" },
		{ neg, 1, 0, "tensor 'n': shape [3, -1] has a negative dimension" },
		{ dims, 1, 0, "tensor 'd' has 9 dimensions" },
		{ huge, 1, 0, "tensor 'h': shape [1073741824, 1073741824, 64] is too large" },
		{ small, 1, 2, "metadata key 'k' given twice" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		test_capture_begin(&cap, 2);
		w = st_create(p, bad[i].n, bad[i].d, bad[i].nmeta, mk, mv);
		msg = test_capture_end(&cap);
		CHECK(w == NULL);
		CHECK(contains_all(msg, p, bad[i].needle, NULL));
		CHECK(!exists(p));
		free(msg);
	}
	free(p);
}

/* ---- Python's view ----------------------------------------------------------------- */

static void test_python_reads_ours(void)
{
	if (!have_python())
		return;
	init_cases();
	char *p = path_in("cases.safetensors");
	size_t len = 0;
	unsigned char *raw = (unsigned char *)test_read_file(p, &len);
	CHECK(raw != NULL);
	if (!raw)
		return;
	char want[16384];
	size_t w = 0;
	w += (size_t)snprintf(want + w, sizeof(want) - w, "header_len\t%u\nkeys\t__metadata__",
			      raw[0] | raw[1] << 8 | raw[2] << 16);
	for (int k = 0; k < NDECL; k++)
		w += (size_t)snprintf(want + w, sizeof(want) - w, "\t%s", decls[k].name);
	w += (size_t)snprintf(want + w, sizeof(want) - w, "\nmeta\tformat\tpt\nmeta\tnote\t%s\n", unicode_note);
	for (int k = 0; k < NDECL; k++) {
		const struct st_tensor_decl *d = &decls[k];
		static const char *const names[] = { "F32", "BF16", "F16", "I64" };
		unsigned char *b = case_data(k);
		uint32_t crc = h5io_crc32(&crc_tab, 0, b, (size_t)decl_bytes(d));
		free(b);
		w += (size_t)snprintf(want + w, sizeof(want) - w, "tensor\t%s\t%s\t[", d->name, names[d->dt]);
		for (int i = 0; i < d->ndim; i++)
			w += (size_t)snprintf(want + w, sizeof(want) - w, "%s%lld", i ? "," : "",
					      (long long)d->shape[i]);
		w += (size_t)snprintf(want + w, sizeof(want) - w, "]\t%u\n", crc);
	}
	char args[4300], *out;
	snprintf(args, sizeof(args), "read '%s'", p);
	CHECK_INT(run_check(args, &out), 0);
	CHECK_STR(out, want);
	free(out);
	free(raw);
	free(p);
}

static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
	if (e == 31) {
		bits = sign | 0x7f800000u | m << 13;
	} else if (e) {
		bits = sign | (e + 112) << 23 | m << 13;
	} else if (!m) {
		bits = sign;
	} else { /* subnormal: m * 2^-24 */
		float f = (float)m / 16777216.0f;
		return sign ? -f : f;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

/* st_check.py's element i, as documented there. */
static float py_f32(int64_t i)
{
	return (float)((double)((i * 7919) % 2001 - 1000) / 8.0);
}

static int check_py_tensor(const struct st_file *f, int k, const char *name, enum ckpt_dtype dt, int ndim,
			   const int64_t *shape)
{
	int ok = 1;
	CHECK_STR(st_name(f, k), name);
	ok &= st_find(f, name) == k;
	enum ckpt_dtype got;
	int gnd;
	int64_t gs[CKPT_MAX_NDIM];
	st_info(f, k, &got, &gnd, gs);
	ok &= got == dt && gnd == ndim;
	int64_t n = 1;
	for (int i = 0; i < ndim && ok; i++) {
		ok &= gs[i] == shape[i];
		n *= shape[i];
	}
	size_t nb;
	const unsigned char *p = st_data(f, k, &nb);
	ok &= nb == (size_t)n * ckpt_dtype_size(dt);
	for (int64_t i = 0; i < n && ok; i++) {
		float v = py_f32(i);
		uint32_t vb;
		memcpy(&vb, &v, 4);
		if (dt == CKPT_F32) {
			float x;
			memcpy(&x, p + i * 4, 4);
			ok &= x == v;
		} else if (dt == CKPT_BF16) {
			uint16_t x;
			memcpy(&x, p + i * 2, 2);
			ok &= x == (uint16_t)(vb >> 16);
		} else if (dt == CKPT_F16) {
			uint16_t x;
			memcpy(&x, p + i * 2, 2);
			ok &= half_to_float(x) == v;
		} else {
			int64_t x;
			memcpy(&x, p + i * 8, 8);
			ok &= x == (int64_t)((uint64_t)i * UINT64_C(0x9E3779B97F4A7C15));
		}
		if (!ok)
			printf("#   tensor %s element %lld differs\n", name, (long long)i);
	}
	if (!ok)
		printf("#   tensor %s (index %d) is not what st_check.py wrote\n", name, k);
	return ok;
}

static void test_we_read_python(void)
{
	if (!have_python())
		return;
	for (int pad = 1; pad <= 8; pad += 7) {
		char *p = path_in(pad == 1 ? "py1.safetensors" : "py8.safetensors");
		char args[4400], *out;
		snprintf(args, sizeof(args),
			 "write '%s' --pad %d --meta format=pt --meta 'who=st_check.py' w.f32:F32:3x5 w.bf16:BF16:33 "
			 "e0:F16:0 w.f16:F16:2x2x7 ids:I64:9 s:F32: e1:I64:0x3 last:BF16:1",
			 p, pad);
		int rc = run_check(args, &out);
		CHECK_INT(rc, 0);
		if (rc)
			printf("#   %s\n", out);
		free(out);
		struct st_file *f = st_open(p);
		CHECK(f != NULL);
		if (!f) {
			free(p);
			continue;
		}
		/* data order; header order is the reverse, metadata last */
		int64_t s35[] = { 3, 5 }, s33[] = { 33 }, s0[] = { 0 }, s227[] = { 2, 2, 7 }, s9[] = { 9 },
			s03[] = { 0, 3 }, s1[] = { 1 };
		CHECK_INT(st_count(f), 8);
		if (st_count(f) == 8) {
			CHECK(check_py_tensor(f, 0, "w.f32", CKPT_F32, 2, s35));
			CHECK(check_py_tensor(f, 1, "w.bf16", CKPT_BF16, 1, s33));
			/* e0 and w.f16 begin at the same offset: the empty one first */
			CHECK(check_py_tensor(f, 2, "e0", CKPT_F16, 1, s0));
			CHECK(check_py_tensor(f, 3, "w.f16", CKPT_F16, 3, s227));
			CHECK(check_py_tensor(f, 4, "ids", CKPT_I64, 1, s9));
			CHECK(check_py_tensor(f, 5, "s", CKPT_F32, 0, NULL));
			CHECK(check_py_tensor(f, 6, "e1", CKPT_I64, 2, s03));
			CHECK(check_py_tensor(f, 7, "last", CKPT_BF16, 1, s1));
		}
		CHECK_STR(st_metadata(f, "format"), "pt");
		CHECK_STR(st_metadata(f, "who"), "st_check.py");
		st_close(f);
		free(p);
	}
	/* the Python side refuses what it should: a sanity check of the checker */
	char *p = path_in("py8.safetensors"), args[4400], *out;
	FILE *fp = fopen(p, "r+b");
	fseek(fp, 0, SEEK_END);
	CHECK_INT(ftruncate(fileno(fp), ftell(fp) - 1), 0);
	fclose(fp);
	snprintf(args, sizeof(args), "read '%s'", p);
	CHECK_INT(run_check(args, &out), 1);
	free(out);
	free(p);
}

/* ---- folders --------------------------------------------------------------------- */

static char *mkdir_in(const char *name)
{
	char *d = path_in(name);
	mkdir(d, 0777);
	return d;
}

/* A shard of `n` F32 tensors named names[i], of i + 1 elements each. */
static int write_shard(const char *d, const char *file, int n, const char *const *names)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s", d, file);
	struct st_tensor_decl t[8];
	for (int i = 0; i < n; i++)
		t[i] = (struct st_tensor_decl){ names[i], CKPT_F32, 1, { i + 1 } };
	const char *k[] = { "format" }, *v[] = { "pt" };
	struct st_writer *w = st_create(path, n, t, 1, k, v);
	if (!w)
		return -1;
	for (int i = 0; i < n; i++) {
		float x[8];
		for (int j = 0; j <= i; j++)
			x[j] = (float)(strlen(names[i]) * 100 + (size_t)j);
		if (st_write(w, x, (size_t)(i + 1) * 4) < 0) {
			st_abort(w);
			return -1;
		}
	}
	return st_finish(w);
}

static const char *const shard_a[] = { "lm_head.weight", "model.norm.weight", "b" };
static const char *const shard_b[] = { "model.embed_tokens.weight", "a", "\xc3\xa9t\xc3\xa9" };

static void test_folder(void)
{
	char *d = mkdir_in("sharded");
	CHECK_INT(write_shard(d, "model-00001-of-00002.safetensors", 3, shard_a), 0);
	CHECK_INT(write_shard(d, "model-00002-of-00002.safetensors", 3, shard_b), 0);
	const char *names[6], *files[6];
	for (int i = 0; i < 3; i++) {
		names[2 * i] = shard_b[i];
		files[2 * i] = "model-00002-of-00002.safetensors";
		names[2 * i + 1] = shard_a[i];
		files[2 * i + 1] = "model-00001-of-00002.safetensors";
	}
	CHECK_INT(st_write_index(d, 6, names, files, 48), 0);
	struct st_folder *sf = st_folder_open(d);
	CHECK(sf != NULL);
	if (sf) {
		static const char *const sorted[] = { "a", "b", "lm_head.weight", "model.embed_tokens.weight",
						      "model.norm.weight", "\xc3\xa9t\xc3\xa9" };
		CHECK_INT(st_folder_count(sf), 6);
		for (int i = 0; i < 6 && i < st_folder_count(sf); i++)
			CHECK_STR(st_folder_name(sf, i), sorted[i]);
		for (int s = 0; s < 2; s++)
			for (int i = 0; i < 3; i++) {
				const char *name = s ? shard_b[i] : shard_a[i];
				struct st_file *f = NULL;
				int idx = -1;
				CHECK_INT(st_folder_find(sf, name, &f, &idx), 0);
				if (!f)
					continue;
				CHECK(strstr(st_path(f), s ? "model-00002-of-00002" : "model-00001-of-00002"));
				CHECK_INT(idx, i);
				size_t nb;
				const float *x = st_data(f, idx, &nb);
				CHECK_INT(nb, (i + 1) * 4);
				CHECK(x[i] == (float)(strlen(name) * 100 + (size_t)i));
			}
		struct st_file *f = NULL;
		CHECK_INT(st_folder_find(sf, "model.norm", &f, NULL), -1);
		CHECK_INT(st_folder_find(sf, "zz", NULL, NULL), -1);
		st_folder_close(sf);
	}
	/* transformers' own text of the index */
	char *idx = malloc(strlen(d) + 64);
	sprintf(idx, "%s/%s", d, ST_INDEX_FILE);
	size_t len;
	char *text = test_read_file(idx, &len);
	CHECK(text && strstr(text, "\"total_size\": 48") && strstr(text, "\"\\u00e9t\\u00e9\": \"model-00002"));
	free(text);
	if (have_python()) {
		char args[4400], *out;
		snprintf(args, sizeof(args), "index '%s'", idx);
		CHECK_INT(run_check(args, &out), 0);
		CHECK_STR(out, "same\n");
		free(out);
	}
	/* no temporary left behind */
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 3", d);
	CHECK_INT(system(cmd), 0);
	free(idx);
	free(d);

	/* a single model.safetensors */
	d = mkdir_in("single");
	CHECK_INT(write_shard(d, ST_SINGLE_FILE, 3, shard_b), 0);
	sf = st_folder_open(d);
	CHECK(sf != NULL);
	if (sf) {
		CHECK_INT(st_folder_count(sf), 3);
		CHECK_STR(st_folder_name(sf, 0), "a");
		CHECK_STR(st_folder_name(sf, 2), "\xc3\xa9t\xc3\xa9");
		struct st_file *f = NULL;
		int i = -1;
		CHECK_INT(st_folder_find(sf, "model.embed_tokens.weight", &f, &i), 0);
		CHECK_INT(i, 0);
		st_folder_close(sf);
	}
	free(d);
}

/* ---- damaged files ------------------------------------------------------------------ */

/* Write le64(hlen) + header + `data` zero bytes; hlen -1 means the header's length. */
static char *raw_file(const char *name, long long hlen, const char *header, size_t data)
{
	char *p = path_in(name);
	FILE *f = fopen(p, "wb");
	uint64_t n = hlen < 0 ? strlen(header) : (uint64_t)hlen;
	for (int i = 0; i < 8; i++)
		putc((int)(n >> (8 * i) & 255), f);
	fputs(header, f);
	for (size_t i = 0; i < data; i++)
		putc(0, f);
	fclose(f);
	return p;
}

/* st_open(p) fails with a message holding p and needle. */
static int refused(const char *p, const char *needle)
{
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	struct st_file *f = st_open(p);
	char *msg = test_capture_end(&cap);
	int ok = f == NULL;
	if (f) {
		printf("#   '%s' was accepted\n", p);
		st_close(f);
	}
	ok = ok && contains_all(msg, p, needle, NULL);
	free(msg);
	return ok;
}

#define T(name, dt, shape, b, e) \
	"\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_bad_files(void)
{
	char *p;
	/* a valid pair first, so the checks below are about the damage */
	p = raw_file("ok.st", -1, "{" T("a", "F32", "[2]", 0, 8) "," T("b", "I64", "[]", 8, 16) "}  ", 16);
	struct st_file *f = st_open(p);
	CHECK(f != NULL && st_count(f) == 2);
	st_close(f);
	free(p);
	p = raw_file("empty-ok.st", -1, "{}", 0);
	f = st_open(p);
	CHECK(f != NULL && st_count(f) == 0);
	st_close(f);
	free(p);

	struct {
		const char *name;
		long long hlen;
		const char *header;
		size_t data;
		const char *needle;
	} bad[] = {
		{ "truncated.st", -1, "{" T("a", "F32", "[2]", 0, 8) "," T("b", "I64", "[]", 8, 16) "}", 12,
		  "tensor 'b': data_offsets [8, 16] run past the end of the data buffer (12 bytes)" },
		{ "past-end.st", 400, "{" T("a", "F32", "[2]", 0, 8) "}", 8, "header length 400 runs past the end" },
		{ "too-long.st", 100000001, "{}", 0, "header length 100000001 is over the safetensors limit" },
		{ "not-json.st", -1, "{\"a\": nope}", 0, "invalid JSON in the header" },
		{ "not-object.st", -1, "[1, 2]", 0, "does not begin with '{'" },
		{ "garbage.st", -1, "{} trailing", 0, "invalid JSON" },
		{ "utf8.st", -1, "{" T("\xff", "F32", "[2]", 0, 8) "}", 8, "invalid JSON" },
		{ "duplicate.st", -1, "{" T("a", "F32", "[2]", 0, 8) "," T("a", "F32", "[2]", 8, 16) "}", 16,
		  "duplicate" },
		{ "overlap.st", -1, "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12,
		  "tensors 'a' [0, 8] and 'b' [4, 12] overlap" },
		{ "empty-inside.st", -1, "{" T("a", "F32", "[2]", 0, 8) "," T("z", "F32", "[0]", 4, 4) "}", 8,
		  "tensors 'a' [0, 8] and 'z' [4, 4] overlap" },
		{ "hole.st", -1, "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 12, 20) "}", 20,
		  "bytes 8 to 12 of the data buffer belong to no tensor (a hole before tensor 'b')" },
		{ "hole-first.st", -1, "{" T("a", "F32", "[2]", 4, 12) "}", 12, "bytes 0 to 4" },
		{ "tail.st", -1, "{" T("a", "F32", "[2]", 0, 8) "}", 9,
		  "the data buffer has 9 bytes but the tensors end at byte 8" },
		{ "count.st", -1, "{" T("a", "BF16", "[2,3]", 0, 8) "}", 8,
		  "tensor 'a': data_offsets [0, 8] hold 8 bytes, but BF16 [2, 3] needs 12" },
		{ "reversed.st", -1, "{" T("a", "F32", "[0]", 8, 0) "}", 8, "end before they begin" },
		{ "unknown.st", -1, "{" T("a", "Q7", "[2]", 0, 8) "}", 8, "tensor 'a' has the unknown dtype \"Q7\"" },
		{ "f64.st", -1, "{" T("x", "F64", "[1]", 0, 8) "}", 8,
		  "dtype F64 of tensor 'x': megac reads F32, BF16, F16, I64" },
		{ "i32.st", -1, "{" T("x", "I32", "[2]", 0, 8) "}", 8, "dtype I32 of tensor 'x'" },
		{ "neg.st", -1, "{" T("a", "F32", "[-2]", 0, 8) "}", 8,
		  "dimension 0 of \"shape\" is not a non-negative integer" },
		{ "float-dim.st", -1, "{" T("a", "F32", "[2.0]", 0, 8) "}", 8, "dimension 0" },
		{ "ndim.st", -1, "{" T("a", "F32", "[1,1,1,1,1,1,1,1,2]", 0, 8) "}", 8, "9 dimensions" },
		{ "no-dtype.st", -1, "{\"a\":{\"shape\":[],\"data_offsets\":[0,0]}}", 0,
		  "tensor 'a': \"dtype\" is missing" },
		{ "offsets.st", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0]}}", 4,
		  "data_offsets" },
		{ "entry.st", -1, "{\"a\":3}", 0, "tensor 'a': expected an object" },
		{ "meta.st", -1, "{\"__metadata__\":{\"n\":1}," T("a", "F32", "[2]", 0, 8) "}", 8,
		  "value of 'n' is not a string" },
		{ "overflow.st", -1, "{" T("a", "I64", "[4294967296,4294967296]", 0, 8) "}", 8, "is too large" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = raw_file(bad[i].name, bad[i].hlen, bad[i].header, bad[i].data);
		if (!refused(p, bad[i].needle)) {
			printf("#   %s\n", bad[i].name);
			CHECK(0);
		}
		free(p);
	}
	/* shorter than the length field; not a file; missing */
	p = path_in("tiny.st");
	FILE *fp = fopen(p, "wb");
	fputs("abcde", fp);
	fclose(fp);
	CHECK(refused(p, "5 bytes, too short"));
	free(p);
	CHECK(refused(dir, "not a regular file"));
	p = path_in("absent.st");
	CHECK(refused(p, "cannot open"));
	free(p);
	/* a file cut short: the last tensor runs past the data */
	init_cases();
	p = path_in("cases.safetensors");
	char *q = path_in("cut.safetensors");
	size_t len = 0;
	char *raw = test_read_file(p, &len);
	CHECK(raw && len > 3);
	fp = fopen(q, "wb");
	if (raw && len > 3)
		fwrite(raw, 1, len - 3, fp);
	fclose(fp);
	CHECK(refused(q, "tensor 'many.dims'"));
	free(raw);
	free(q);
	free(p);
}

/* st_folder_open(d) fails with a message holding needle and the index path. */
static int folder_refused(const char *d, const char *needle, const char *in)
{
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	struct st_folder *sf = st_folder_open(d);
	char *msg = test_capture_end(&cap);
	int ok = sf == NULL;
	if (sf) {
		printf("#   folder '%s' was accepted\n", d);
		st_folder_close(sf);
	}
	ok = ok && contains_all(msg, in, needle, NULL);
	free(msg);
	return ok;
}

static void write_index_text(const char *d, const char *text)
{
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s", d, ST_INDEX_FILE);
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

static void test_bad_folders(void)
{
	char *d = mkdir_in("badfolder");
	char idx[4400];
	snprintf(idx, sizeof(idx), "%s/%s", d, ST_INDEX_FILE);
	CHECK(folder_refused(d, "no model.safetensors nor model.safetensors.index.json", d));
	CHECK_INT(write_shard(d, "s1.safetensors", 2, shard_a), 0);
	CHECK_INT(write_shard(d, "s2.safetensors", 2, shard_b), 0);
	static const char *const good = "{\"weight_map\": {\"lm_head.weight\": \"s1.safetensors\", "
					"\"model.norm.weight\": \"s1.safetensors\", \"model.embed_tokens.weight\": "
					"\"s2.safetensors\", \"a\": \"s2.safetensors\"}}";
	write_index_text(d, good);
	struct st_folder *sf = st_folder_open(d);
	CHECK(sf != NULL && st_folder_count(sf) == 4);
	st_folder_close(sf);

	struct {
		const char *text, *needle;
	} bad[] = {
		{ "{\"weight_map\": {\"lm_head.weight\": \"s1.safetensors\", \"model.norm.weight\": \"s1.safetensors\", "
		  "\"model.embed_tokens.weight\": \"s3.safetensors\", \"a\": \"s2.safetensors\"}}",
		  "cannot read the shard 's3.safetensors'" },
		{ "{\"weight_map\": {\"lm_head.weight\": \"s1.safetensors\", \"model.norm.weight\": \"s1.safetensors\", "
		  "\"model.embed_tokens.weight\": \"s2.safetensors\", \"a\": \"s2.safetensors\", \"ghost\": "
		  "\"s1.safetensors\"}}",
		  "tensor 'ghost' of the weight_map is not in its shard" },
		{ "{\"weight_map\": {\"lm_head.weight\": \"s1.safetensors\", \"model.norm.weight\": \"s1.safetensors\", "
		  "\"model.embed_tokens.weight\": \"s2.safetensors\"}}",
		  "tensor 'a' of shard" },
		{ "{\"weight_map\": {\"lm_head.weight\": \"s1.safetensors\", \"model.norm.weight\": \"s2.safetensors\", "
		  "\"model.embed_tokens.weight\": \"s2.safetensors\", \"a\": \"s2.safetensors\"}}",
		  "'model.norm.weight' of the weight_map is not in its shard" },
		{ "{\"metadata\": {}}", "\"weight_map\" object" },
		{ "{\"weight_map\": {\"a\": \"../s2.safetensors\"}}", "weight_map entry of 'a' is not the file name" },
		{ "{\"weight_map\": {\"a\": 3}}", "weight_map entry of 'a'" },
		{ "{\"weight_map\": {\"a\": \"s2.safetensors\", \"a\": \"s2.safetensors\"}}", "duplicate" },
		{ "{\"weight_map\": ", "invalid JSON" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_index_text(d, bad[i].text);
		if (!folder_refused(d, bad[i].needle, idx)) {
			printf("#   case %zu\n", i);
			CHECK(0);
		}
	}
	/* the same tensor in two shards, each listed under one */
	static const char *const shard_c[] = { "c", "model.embed_tokens.weight" };
	CHECK_INT(write_shard(d, "s3.safetensors", 2, shard_c), 0);
	write_index_text(d, "{\"weight_map\": {\"lm_head.weight\": \"s1.safetensors\", \"model.norm.weight\": "
			    "\"s1.safetensors\", \"model.embed_tokens.weight\": \"s2.safetensors\", \"a\": "
			    "\"s2.safetensors\", \"c\": \"s3.safetensors\"}}");
	CHECK(folder_refused(d, "'model.embed_tokens.weight' is in shard", idx));
	/* a damaged shard is named */
	write_index_text(d, good);
	char s2[4400];
	snprintf(s2, sizeof(s2), "%s/s2.safetensors", d);
	CHECK_INT(truncate(s2, 20), 0);
	CHECK(folder_refused(d, "s2.safetensors", idx));

	/* st_write_index refusals */
	struct test_capture cap;
	const char *n2[] = { "a", "a" }, *f2[] = { "x.safetensors", "y.safetensors" }, *fs[] = { "sub/x", "y" };
	test_capture_begin(&cap, 2);
	int r1 = st_write_index(d, 2, n2, f2, 0);
	int r2 = st_write_index(d, 1, n2, fs, 0);
	char *msg = test_capture_end(&cap);
	CHECK_INT(r1, -1);
	CHECK_INT(r2, -1);
	CHECK(contains_all(msg, idx, "tensor 'a' is given twice", "shard 'sub/x' of tensor 'a' is not a plain", NULL));
	free(msg);
	free(d);
}

int main(void)
{
	log_init("test_safetensors", 0, 1);
	h5io_crc32_init(&crc_tab);
	dir = test_tmpdir("safetensors");
	RUN(test_round_trip);
	RUN(test_header_text);
	RUN(test_write_parts);
	RUN(test_writer_refusals);
	RUN(test_python_reads_ours);
	RUN(test_we_read_python);
	RUN(test_folder);
	RUN(test_bad_files);
	RUN(test_bad_folders);
	return test_summary();
}
