/*
 * test_ckpt.c - lib/ckpt: checkpoint transactions round-trip tensors and
 * attributes exactly; h5py (run as /usr/bin/python3) finds every tensor under
 * its Megatron name with the right shape, values, dtype attribute and a crc32
 * that zlib agrees with; the tracker is written last and nothing of a failed,
 * aborted or killed save is visible; an iteration can be overwritten; damaged
 * or missing files, tensors and trackers are refused with messages naming
 * the file (and the tensor).
 */
#include "base/error.h"
#include "ckpt/ckpt.h"
#include "ckpt/h5io.h"
#include "test.h"

#include <dirent.h>
#include <stdarg.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char *dir; /* scratch root of this run */
/* What a forked child dies holding, kept reachable so that LeakSanitizer
 * does not count die()'s deliberate leaks. */
static struct ckpt_writer *volatile dying_writer;
static char *volatile dying_save;

static char *join(const char *a, const char *b)
{
	char *p = malloc(strlen(a) + strlen(b) + 2);
	sprintf(p, "%s/%s", a, b);
	return p;
}

/* A path under this run's scratch directory. */
static char *path_in(const char *rel)
{
	return join(dir, rel);
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Number of entries in d whose name starts with '.' (transactions and
 * moved-aside directories), other than . and .. */
static int hidden_entries(const char *d)
{
	DIR *dd = opendir(d);
	if (!dd)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dd)))
		if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(dd);
	return n;
}

/* Regular files anywhere under d (recursively). */
static int count_files(const char *d)
{
	DIR *dd = opendir(d);
	if (!dd)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dd))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *p = join(d, e->d_name);
		struct stat st;
		if (lstat(p, &st) == 0)
			n += S_ISDIR(st.st_mode) ? count_files(p) : 1;
		free(p);
	}
	closedir(dd);
	return n;
}

static char *tracker_text(const char *save)
{
	char *p = join(save, "latest_checkpointed_iteration.txt");
	char *t = test_read_file(p, NULL);
	free(p);
	return t;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fputs(text, f);
	fclose(f);
}



static void test_crc32(void)
{
	struct h5io_crc32 c;
	h5io_crc32_init(&c);
	CHECK_INT(h5io_crc32(&c, 0, "123456789", 9), 0xCBF43926u);
	CHECK_INT(h5io_crc32(&c, 0, "", 0), 0);
	/* slice-by-8 against the bitwise definition, every length and alignment */
	unsigned char buf[100];
	for (int i = 0; i < 100; i++)
		buf[i] = (unsigned char)(i * 37 + 11);
	for (int off = 0; off < 8; off++)
		for (int n = 0; off + n <= 100; n++) {
			uint32_t crc = 0xFFFFFFFFu;
			for (int i = off; i < off + n; i++) {
				crc ^= buf[i];
				for (int k = 0; k < 8; k++)
					crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
			}
			if (h5io_crc32(&c, 0, buf + off, (size_t)n) != ~crc) {
				printf("#   crc32 differs at offset %d length %d\n", off, n);
				CHECK(0);
				return;
			}
		}
	/* continuing over pieces = one pass */
	CHECK_INT(h5io_crc32(&c, h5io_crc32(&c, 0, buf, 37), buf + 37, 63), h5io_crc32(&c, 0, buf, 100));
}

/* ---- the round trip, and h5py's view of it ------------------------------------ */

struct tcase {
	const char *file, *name;
	enum ckpt_dtype dt;
	int ndim;
	int64_t shape[4];
};

static const struct tcase cases[] = {
	{ "model.h5", "embedding.word_embeddings.weight", CKPT_F32, 2, { 37, 16 } },
	{ "model.h5", "decoder.layers.0.self_attention.linear_qkv.weight", CKPT_F32, 2, { 48, 16 } },
	{ "model.h5", "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight", CKPT_F32, 1, { 16 } },
	{ "model.h5", "decoder.layers.0.mlp.linear_fc1.weight", CKPT_BF16, 2, { 64, 16 } },
	{ "model.h5", "decoder.layers.0.mlp.linear_fc2.weight", CKPT_F16, 2, { 16, 32 } },
	{ "model.h5", "decoder.final_layernorm.weight", CKPT_F32, 1, { 16 } },
	{ "model.h5", "some.scalar", CKPT_F32, 0, { 0 } },
	{ "model.h5", "an.empty.tensor", CKPT_F32, 2, { 0, 4 } },
	{ "model.h5", "counts", CKPT_I64, 3, { 2, 3, 4 } },
	{ "optim.h5", "exp_avg/decoder.layers.0.self_attention.linear_qkv.weight", CKPT_F32, 2, { 48, 16 } },
	{ "optim.h5", "exp_avg_sq/decoder.layers.0.self_attention.linear_qkv.weight", CKPT_F32, 2, { 48, 16 } },
	{ "optim.h5", "exp_avg/embedding.word_embeddings.weight", CKPT_F32, 2, { 37, 16 } },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int64_t case_count(const struct tcase *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

/* Bytes of case k: float32 from make_f32; 16-bit and int64 patterns cover
 * every bit position. */
static void *case_data(size_t k)
{
	const struct tcase *t = &cases[k];
	int64_t n = case_count(t);
	if (t->dt == CKPT_F32)
		return make_f32(n, (int)k);
	size_t sz = ckpt_dtype_size(t->dt);
	unsigned char *b = malloc((size_t)(n ? n : 1) * sz);
	for (int64_t i = 0; i < n; i++) {
		if (t->dt == CKPT_I64) {
			int64_t v = (i * INT64_C(0x9E3779B97F4A7C15)) ^ (int64_t)k;
			memcpy(b + i * 8, &v, 8);
		} else {
			uint16_t v = (uint16_t)(i * 40503u + k);
			memcpy(b + i * 2, &v, 2);
		}
	}
	return b;
}

/* A long string: 1 MiB of JSON-ish text, beyond HDF5's 64 KiB object-header
 * limit for fixed-size attributes. */
static char *long_config(void)
{
	size_t n = 1 << 20;
	char *s = malloc(n + 1);
	size_t len = 0;
	len += (size_t)snprintf(s, n, "{\"num_layers\": 2, \"hidden_size\": 16, \"pad\": \"");
	for (; len < n - 3; len++)
		s[len] = (char)('a' + len % 26);
	strcpy(s + len, "\"}");
	return s;
}

static const char *unicode_note = "sch\xc3\xb6n \xe2\x9c\x93 \"quoted\" \\ back";

/* Write every case into save at iteration it, with the root attributes. */
static int save_cases(const char *save, int64_t it)
{
	struct ckpt_writer *w = ckpt_begin(save, it);
	if (!w)
		return -1;
	int fm = ckpt_file_create(w, "model.h5"), fo = ckpt_file_create(w, "optim.h5");
	int ok = fm >= 0 && fo >= 0;
	for (size_t k = 0; ok && k < NCASES; k++) {
		void *d = case_data(k);
		ok = ckpt_put_tensor(w, !strcmp(cases[k].file, "model.h5") ? fm : fo, cases[k].name, cases[k].dt,
				     cases[k].ndim, cases[k].shape, d) == 0;
		free(d);
	}
	char *cfg = long_config();
	ok = ok && ckpt_put_attr_i64(w, fm, NULL, "iteration", it) == 0 &&
	     ckpt_put_attr_f64(w, fm, NULL, "checkpoint_version", 3.0) == 0 &&
	     ckpt_put_attr_i64(w, fm, NULL, "consumed_train_samples", INT64_C(123456789012)) == 0 &&
	     ckpt_put_attr_f64(w, fm, NULL, "loss_scale", 65536.5) == 0 &&
	     ckpt_put_attr_str(w, fm, NULL, "config", cfg) == 0 &&
	     ckpt_put_attr_str(w, fm, NULL, "note", unicode_note) == 0 &&
	     ckpt_put_attr_str(w, fm, NULL, "empty", "") == 0 &&
	     ckpt_put_attr_i64(w, fm, "decoder.layers.0.mlp.linear_fc1.weight", "tp_axis", 0) == 0 &&
	     ckpt_put_attr_i64(w, fo, "exp_avg", "step", 7) == 0 && ckpt_file_close(w, fo) == 0;
	free(cfg);
	if (!ok) {
		ckpt_abort(w);
		return -1;
	}
	return ckpt_commit(w);
}

static void test_round_trip(void)
{
	char *save = path_in("rt");
	CHECK_INT(save_cases(save, 500), 0);
	char *t = tracker_text(save);
	CHECK_STR(t, "500");
	free(t);
	CHECK_INT(hidden_entries(save), 0);
	char *idir = join(save, "iter_0000500");
	CHECK_INT(count_files(idir), 2);
	free(idir);

	int64_t it = -7;
	CHECK_INT(ckpt_latest(save, &it), 0);
	CHECK_INT(it, 500);
	struct ckpt_reader *r = ckpt_open(save, it);
	CHECK(r != NULL);
	if (!r)
		goto out;
	int fm = ckpt_file_open(r, "model.h5"), fo = ckpt_file_open(r, "optim.h5");
	CHECK(fm >= 0 && fo >= 0);
	CHECK_INT(ckpt_file_open(r, "model.h5"), fm);
	for (size_t k = 0; k < NCASES; k++) {
		const struct tcase *c = &cases[k];
		int f = !strcmp(c->file, "model.h5") ? fm : fo;
		size_t bytes = (size_t)case_count(c) * ckpt_dtype_size(c->dt);
		void *want = case_data(k), *got = malloc(bytes ? bytes : 1);
		memset(got, 0xAB, bytes);
		CHECK_INT(ckpt_has_tensor(r, f, c->name), 1);
		enum ckpt_dtype dt;
		int ndim = -1;
		int64_t shape[CKPT_MAX_NDIM];
		CHECK_INT(ckpt_tensor_info(r, f, c->name, &dt, &ndim, shape), 0);
		CHECK_INT(dt, c->dt);
		CHECK_INT(ndim, c->ndim);
		CHECK(!memcmp(shape, c->shape, (size_t)c->ndim * sizeof(int64_t)));
		CHECK_INT(ckpt_get_tensor(r, f, c->name, c->dt, c->ndim, c->shape, got), 0);
		if (memcmp(want, got, bytes)) {
			printf("#   tensor %s differs after the round trip\n", c->name);
			CHECK(0);
		}
		free(want);
		free(got);
	}
	CHECK_INT(ckpt_has_tensor(r, fm, "decoder.layers.1.mlp.linear_fc1.weight"), 0);
	CHECK_INT(ckpt_has_tensor(r, fo, "exp_avg"), 0); /* a group, not a tensor */
	CHECK_INT(ckpt_has_tensor(r, fo, "exp_avg/nothing.here"), 0);
	CHECK_INT(ckpt_has_tensor(r, fo, "no_such_group/x"), 0);

	int64_t i64;
	double f64;
	char *s = NULL;
	CHECK_INT(ckpt_get_attr_i64(r, fm, NULL, "iteration", &i64), 0);
	CHECK_INT(i64, 500);
	CHECK_INT(ckpt_get_attr_i64(r, fm, NULL, "consumed_train_samples", &i64), 0);
	CHECK_INT(i64, INT64_C(123456789012));
	CHECK_INT(ckpt_get_attr_f64(r, fm, NULL, "checkpoint_version", &f64), 0);
	CHECK(f64 == 3.0);
	CHECK_INT(ckpt_get_attr_f64(r, fm, NULL, "loss_scale", &f64), 0);
	CHECK(f64 == 65536.5);
	CHECK_INT(ckpt_get_attr_str(r, fm, NULL, "config", &s), 0);
	char *cfg = long_config();
	CHECK(s && !strcmp(s, cfg));
	free(cfg);
	free(s);
	CHECK_INT(ckpt_get_attr_str(r, fm, "", "note", &s), 0);
	CHECK_STR(s, unicode_note);
	free(s);
	CHECK_INT(ckpt_get_attr_str(r, fm, NULL, "empty", &s), 0);
	CHECK_STR(s, "");
	free(s);
	CHECK_INT(ckpt_get_attr_i64(r, fm, "decoder.layers.0.mlp.linear_fc1.weight", "tp_axis", &i64), 0);
	CHECK_INT(i64, 0);
	CHECK_INT(ckpt_get_attr_i64(r, fo, "exp_avg", "step", &i64), 0);
	CHECK_INT(i64, 7);
	CHECK_INT(ckpt_has_attr(r, fm, NULL, "iteration"), 1);
	CHECK_INT(ckpt_has_attr(r, fm, NULL, "nothing"), 0);
	CHECK_INT(ckpt_get_attr_i64(r, fm, NULL, "megac_format_version", &i64), 0);
	CHECK_INT(i64, 1);
	ckpt_close(r);
out:
	free(save);
}

/* h5py reads what we wrote: names, shapes, exact values (compared with the
 * raw bytes the C side dumps), dtype attributes, crc32 = zlib.crc32 of the
 * bytes, root attributes as Python ints/floats/strs. */
static void test_h5py_reads(void)
{
	char *save = path_in("py");
	CHECK_INT(save_cases(save, 3), 0);
	char *man = join(save, "manifest.txt");
	FILE *mf = fopen(man, "w");
	for (size_t k = 0; k < NCASES; k++) {
		const struct tcase *c = &cases[k];
		char ref[64];
		snprintf(ref, sizeof(ref), "ref%zu.bin", k);
		char *rp = join(save, ref);
		FILE *rf = fopen(rp, "wb");
		void *d = case_data(k);
		size_t bytes = (size_t)case_count(c) * ckpt_dtype_size(c->dt);
		if (bytes)
			fwrite(d, 1, bytes, rf);
		fclose(rf);
		free(d);
		free(rp);
		fprintf(mf, "%s %s %s %s", c->file, c->name, ckpt_dtype_name(c->dt), ref);
		for (int i = 0; i < c->ndim; i++)
			fprintf(mf, " %lld", (long long)c->shape[i]);
		fprintf(mf, "\n");
	}
	fclose(mf);
	char *cfg_path = join(save, "config.ref");
	char *cfg = long_config();
	write_text(cfg_path, cfg);
	free(cfg);
	free(cfg_path);
	free(man);

	char *out = test_python(save,
		"import sys, os, zlib\nimport numpy as np, h5py\nD = sys.argv[1]\n",
		"it = os.path.join(D, 'iter_0000003')\n"
		"assert open(os.path.join(D, 'latest_checkpointed_iteration.txt')).read() == '3'\n"
		"store = {'float32': '<f4', 'bfloat16': '<u2', 'float16': '<u2', 'int64': '<i8'}\n"
		"seen = {}\n"
		"for line in open(os.path.join(D, 'manifest.txt')):\n"
		"    fn, name, dt, ref, *shape = line.split()\n"
		"    shape = tuple(int(x) for x in shape)\n"
		"    with h5py.File(os.path.join(it, fn), 'r') as f:\n"
		"        ds = f[name]\n"
		"        assert ds.shape == shape, (name, ds.shape, shape)\n"
		"        assert ds.dtype == np.dtype(store[dt]), (name, ds.dtype)\n"
		"        assert ds.attrs['dtype'].decode() == dt, (name, ds.attrs['dtype'])\n"
		"        a = ds[()]\n"
		"        want = np.fromfile(os.path.join(D, ref), dtype=store[dt]).reshape(shape)\n"
		"        assert a.tobytes() == want.tobytes(), name\n"
		"        assert int(ds.attrs['crc32']) == zlib.crc32(a.tobytes()), name\n"
		"        assert ds.id.get_offset() is not None or a.size == 0, name\n"
		"        seen.setdefault(fn, set()).add(name)\n"
		"for fn, names in seen.items():\n"
		"    found = set()\n"
		"    with h5py.File(os.path.join(it, fn), 'r') as f:\n"
		"        f.visititems(lambda n, o: found.add(n) if isinstance(o, h5py.Dataset) else None)\n"
		"    assert found == names, (fn, found ^ names)\n"
		"with h5py.File(os.path.join(it, 'model.h5'), 'r') as f:\n"
		"    A = f.attrs\n"
		"    assert A['iteration'] == 3 and A['iteration'].dtype == np.int64\n"
		"    assert A['checkpoint_version'] == 3.0\n"
		"    assert A['consumed_train_samples'] == 123456789012\n"
		"    assert A['megac_format_version'] == 1\n"
		"    assert A['config'].decode() == open(os.path.join(D, 'config.ref')).read()\n"
		"    assert A['note'].decode() == 'sch\\u00f6n \\u2713 \"quoted\" \\\\ back', repr(A['note'])\n"
		"    assert A['empty'] == b''\n"
		"    assert f['decoder.layers.0.mlp.linear_fc1.weight'].attrs['tp_axis'] == 0\n"
		"    w = f['decoder.layers.0.self_attention.linear_qkv.weight'][()]\n"
		"    assert w.dtype == np.float32 and np.isfinite(w).all()\n"
		"with h5py.File(os.path.join(it, 'optim.h5'), 'r') as f:\n"
		"    assert list(f.keys()) == ['exp_avg', 'exp_avg_sq'], list(f.keys())\n"
		"    assert f['exp_avg'].attrs['step'] == 7\n"
		"print('OK')\n");
	CHECK_STR(out, "OK\n");
	free(out);
	free(save);
}

/* Writing the same checkpoint twice gives the same bytes (no timestamps). */
static void test_reproducible(void)
{
	char *a = path_in("repro_a"), *b = path_in("repro_b");
	CHECK_INT(save_cases(a, 9), 0);
	CHECK_INT(save_cases(b, 9), 0);
	char *pa = join(a, "iter_0000009/model.h5"), *pb = join(b, "iter_0000009/model.h5");
	size_t na = 0, nb = 1;
	char *da = test_read_file(pa, &na), *db = test_read_file(pb, &nb);
	CHECK(da && db && na == nb && !memcmp(da, db, na));
	free(da);
	free(db);
	free(pa);
	free(pb);
	free(a);
	free(b);
}

static void test_release(void)
{
	char *save = path_in("rel");
	struct ckpt_writer *w = ckpt_begin(save, CKPT_RELEASE);
	CHECK(w != NULL);
	if (!w)
		return;
	int f = ckpt_file_create(w, "model.h5");
	int64_t shape[1] = { 3 };
	float v[3] = { 1, 2, 3 };
	CHECK_INT(ckpt_put_tensor(w, f, "x", CKPT_F32, 1, shape, v), 0);
	CHECK_INT(ckpt_commit(w), 0);
	char *t = tracker_text(save);
	CHECK_STR(t, "release");
	free(t);
	int64_t it = 0;
	CHECK_INT(ckpt_latest(save, &it), 0);
	CHECK(it == CKPT_RELEASE);
	struct ckpt_reader *r = ckpt_open(save, it);
	CHECK(r != NULL);
	if (r) {
		CHECK(strstr(ckpt_reader_dir(r), "/release") != NULL);
		float got[3];
		CHECK_INT(ckpt_get_tensor(r, ckpt_file_open(r, "model.h5"), "x", CKPT_F32, 1, shape, got), 0);
		CHECK(!memcmp(got, v, sizeof(v)));
		ckpt_close(r);
	}
	free(save);
}

/* ---- the tracker is the last thing written -------------------------------------- */

/* A one-tensor checkpoint whose values are all `val`. */
static int save_small(const char *save, int64_t it, float val, int extra_file)
{
	struct ckpt_writer *w = ckpt_begin(save, it);
	if (!w)
		return -1;
	float v[4] = { val, val, val, val };
	int64_t shape[1] = { 4 };
	int f = ckpt_file_create(w, "model.h5");
	if (f < 0 || ckpt_put_tensor(w, f, "w", CKPT_F32, 1, shape, v) < 0 ||
	    (extra_file && ckpt_file_create(w, "extra.h5") < 0)) {
		ckpt_abort(w);
		return -1;
	}
	return ckpt_commit(w);
}

static float load_small(const char *save, int64_t it)
{
	struct ckpt_reader *r = ckpt_open(save, it);
	float v[4] = { -1, -1, -1, -1 };
	int64_t shape[1] = { 4 };
	if (!r)
		return -1;
	if (ckpt_get_tensor(r, ckpt_file_open(r, "model.h5"), "w", CKPT_F32, 1, shape, v) < 0)
		v[0] = -1;
	ckpt_close(r);
	return v[0];
}

static void test_failed_save_changes_nothing(void)
{
	char *save = path_in("fail");
	CHECK_INT(save_small(save, 10, 1.0f, 0), 0);

	/* A failing call poisons the transaction: commit refuses and cleans up. */
	struct test_capture cap;
	struct ckpt_writer *w = ckpt_begin(save, 20);
	CHECK(w != NULL);
	int f = ckpt_file_create(w, "model.h5");
	float v[4] = { 2, 2, 2, 2 };
	int64_t shape[1] = { 4 };
	CHECK_INT(ckpt_put_tensor(w, f, "w", CKPT_F32, 1, shape, v), 0);
	test_capture_begin(&cap, 2);
	int r1 = ckpt_put_tensor(w, f, "w", CKPT_F32, 1, shape, v); /* stored twice */
	int r2 = ckpt_commit(w);
	char *msg = test_capture_end(&cap);
	CHECK_INT(r1, -1);
	CHECK_INT(r2, -1);
	CHECK(contains_all(msg, "iter_0000020/model.h5", "'w'", "twice", "not saving", NULL));
	free(msg);
	char *t = tracker_text(save);
	CHECK_STR(t, "10");
	free(t);
	char *d20 = join(save, "iter_0000020");
	CHECK(!exists(d20));
	CHECK_INT(hidden_entries(save), 0);

	/* An explicit abort. */
	w = ckpt_begin(save, 20);
	f = ckpt_file_create(w, "model.h5");
	CHECK_INT(ckpt_put_tensor(w, f, "w", CKPT_F32, 1, shape, v), 0);
	ckpt_abort(w);
	CHECK(!exists(d20));
	CHECK_INT(hidden_entries(save), 0);

	/* Killed by die() or by SIGTERM in the middle of writing: the data is
	 * deleted on the way out (at most the directory with its writer's
	 * record remains, which the next ckpt_begin removes: that writer is
	 * gone), the tracker and iter_0000010 are untouched. */
	for (int how = 0; how < 2; how++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			int devnull = open("/dev/null", O_WRONLY);
			dup2(devnull, 2);
			dying_save = save;
			struct ckpt_writer *cw = dying_writer = ckpt_begin(save, 20);
			int cf = ckpt_file_create(cw, "model.h5");
			float big[4096] = { 0 };
			int64_t bshape[1] = { 4096 };
			ckpt_put_tensor(cw, cf, "w", CKPT_F32, 1, bshape, big);
			if (how == 0)
				die("injected failure");
			raise(SIGTERM);
			_exit(3);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		if (how == 0)
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == DIE_EXIT_CODE);
		else
			CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
		t = tracker_text(save);
		CHECK_STR(t, "10");
		free(t);
		CHECK(!exists(d20));
		CHECK(count_files(save) == 2 || count_files(save) == 3); /* tracker + iter_0000010/model.h5 (+ .writer) */
		CHECK(hidden_entries(save) <= 1);
		w = ckpt_begin(save, 30);
		ckpt_abort(w);
		CHECK_INT(hidden_entries(save), 0);
	}
	CHECK(load_small(save, 10) == 1.0f);

	/* The tracker cannot be replaced (a directory is in its way): the new
	 * iteration is complete in place, the commit fails naming the tracker,
	 * and the tracker still names the old one. */
	char *tp = join(save, "latest_checkpointed_iteration.txt");
	char *aside = join(save, "tracker.saved");
	CHECK_INT(rename(tp, aside), 0);
	CHECK_INT(mkdir(tp, 0777), 0);
	test_capture_begin(&cap, 2);
	int r3 = save_small(save, 40, 4.0f, 0);
	msg = test_capture_end(&cap);
	CHECK_INT(r3, -1);
	CHECK(contains_all(msg, "latest_checkpointed_iteration.txt", NULL));
	free(msg);
	CHECK(load_small(save, 40) == 4.0f);
	CHECK_INT(rmdir(tp), 0);
	CHECK_INT(rename(aside, tp), 0);
	t = tracker_text(save);
	CHECK_STR(t, "10");
	free(t);
	CHECK_INT(hidden_entries(save), 0);
	free(tp);
	free(aside);
	free(d20);
	free(save);
}

static void test_overwrite(void)
{
	char *save = path_in("over");
	CHECK_INT(save_small(save, 7, 1.5f, 1), 0);
	CHECK(load_small(save, 7) == 1.5f);
	char *extra = join(save, "iter_0000007/extra.h5");
	CHECK(exists(extra));
	CHECK_INT(save_small(save, 8, 8.0f, 0), 0);
	CHECK_INT(save_small(save, 7, 2.5f, 0), 0);
	CHECK(load_small(save, 7) == 2.5f);
	CHECK(!exists(extra)); /* the whole old directory was replaced */
	CHECK(load_small(save, 8) == 8.0f);
	char *t = tracker_text(save);
	CHECK_STR(t, "7");
	free(t);
	CHECK_INT(hidden_entries(save), 0);
	free(extra);
	free(save);
}

/* ---- refusing damaged and missing things ---------------------------------------- */

static char *capture_err(struct test_capture *cap)
{
	return test_capture_end(cap);
}

static void test_tracker_contents(void)
{
	char *save = path_in("trk");
	mkdir(save, 0777);
	char *tp = join(save, "latest_checkpointed_iteration.txt");
	int64_t it = 99;
	CHECK_INT(ckpt_latest(save, &it), 1);
	CHECK_INT(it, 99);
	char *none = path_in("no/such/dir");
	CHECK_INT(ckpt_latest(none, &it), 1);
	free(none);

	static const struct {
		const char *text;
		int rc;
		int64_t it;
	} cases_[] = {
		{ "500", 0, 500 }, { "0", 0, 0 }, { " 42\n", 0, 42 }, { "release\n", 0, CKPT_RELEASE },
		{ "", -1, 0 }, { "abc", -1, 0 }, { "12x", -1, 0 }, { "-5", -1, 0 }, { "1 2", -1, 0 },
		{ "99999999999999999999", -1, 0 }, { "Release", -1, 0 },
	};
	for (size_t i = 0; i < sizeof(cases_) / sizeof(cases_[0]); i++) {
		write_text(tp, cases_[i].text);
		struct test_capture cap;
		test_capture_begin(&cap, 2);
		it = 12345;
		int rc = ckpt_latest(save, &it);
		char *msg = capture_err(&cap);
		if (rc != cases_[i].rc) {
			printf("#   tracker \"%s\": %d, expected %d\n", cases_[i].text, rc, cases_[i].rc);
			CHECK(0);
		}
		if (rc == 0)
			CHECK_INT(it, cases_[i].it);
		else
			CHECK(contains_all(msg, "latest_checkpointed_iteration.txt", "expected an iteration number",
					   NULL));
		free(msg);
	}
	/* binary garbage is shown escaped */
	write_text(tp, "\x01\x7f" "junk");
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_latest(save, &it), -1);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, "\\x01\\x7fjunk", NULL));
	free(msg);
	free(tp);
	free(save);
}

/* Flip one byte inside the stored data of `name` (found through HDF5's
 * H5Dget_offset, changed with plain file I/O). */
static int flip_byte(const char *file, const char *name, long within)
{
	hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (f < 0)
		return -1;
	hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
	haddr_t off = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
	if (d >= 0)
		H5Dclose(d);
	H5Fclose(f);
	if (off == HADDR_UNDEF)
		return -1;
	FILE *fp = fopen(file, "r+b");
	if (!fp)
		return -1;
	fseek(fp, (long)off + within, SEEK_SET);
	int c = fgetc(fp);
	fseek(fp, (long)off + within, SEEK_SET);
	fputc(c ^ 0x10, fp);
	fclose(fp);
	return 0;
}

static void truncate_file(const char *path, long size)
{
	CHECK_INT(truncate(path, size), 0);
}

static void test_errors(void)
{
	char *save = path_in("err");
	CHECK_INT(save_cases(save, 4), 0);
	struct test_capture cap;
	char *msg;
	const char *qkv = "decoder.layers.0.self_attention.linear_qkv.weight";
	int64_t shape[2] = { 48, 16 }, bad_shape[2] = { 48, 17 };
	float *buf = malloc(48 * 17 * sizeof(float));

	/* a missing iteration directory */
	test_capture_begin(&cap, 2);
	struct ckpt_reader *r = ckpt_open(save, 5);
	msg = capture_err(&cap);
	CHECK(r == NULL);
	CHECK(contains_all(msg, "iter_0000005", "no such checkpoint directory", NULL));
	free(msg);

	r = ckpt_open(save, 4);
	CHECK(r != NULL);
	if (!r)
		goto out;
	int fm = ckpt_file_open(r, "model.h5");
	CHECK(fm >= 0);

	/* a missing file */
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_file_open(r, "optimizer.h5"), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000004/optimizer.h5", "no such file", NULL));
	free(msg);

	/* a missing tensor */
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_tensor(r, fm, "decoder.layers.7.self_attention.linear_qkv.weight", CKPT_F32, 2, shape, buf),
		  -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000004/model.h5", "decoder.layers.7.self_attention.linear_qkv.weight",
			   "no tensor", NULL));
	free(msg);

	/* a different shape, then a different rank */
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_tensor(r, fm, qkv, CKPT_F32, 2, bad_shape, buf), -1);
	CHECK_INT(ckpt_get_tensor(r, fm, qkv, CKPT_F32, 1, bad_shape, buf), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000004/model.h5", qkv, "has shape [48, 16], expected [48, 17]",
			   "has shape [48, 16], expected [48]", NULL));
	free(msg);

	/* a different dtype */
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_tensor(r, fm, qkv, CKPT_BF16, 2, shape, buf), -1);
	int64_t fc1[2] = { 64, 16 };
	CHECK_INT(ckpt_get_tensor(r, fm, "decoder.layers.0.mlp.linear_fc1.weight", CKPT_F16, 2, fc1, buf), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "model.h5", "is float32, expected bfloat16", "is bfloat16, expected float16", NULL));
	free(msg);

	/* attributes: missing, wrong type */
	int64_t i64;
	double f64;
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_attr_i64(r, fm, NULL, "no_such_attr", &i64), -1);
	CHECK_INT(ckpt_get_attr_i64(r, fm, NULL, "config", &i64), -1);
	CHECK_INT(ckpt_get_attr_f64(r, fm, NULL, "iteration", &f64), -1);
	CHECK_INT(ckpt_get_attr_i64(r, fm, "no.such.tensor", "x", &i64), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "model.h5': no attribute 'no_such_attr'", "attribute 'config' of '/' is a string, expected an integer",
			   "'iteration' of '/' is int64, expected a floating-point number", "no tensor or group 'no.such.tensor'",
			   NULL));
	free(msg);
	ckpt_close(r);

	/* a flipped byte inside a tensor's data */
	char *model = join(save, "iter_0000004/model.h5");
	CHECK_INT(flip_byte(model, qkv, 5), 0);
	r = ckpt_open(save, 4);
	fm = ckpt_file_open(r, "model.h5");
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_tensor(r, fm, qkv, CKPT_F32, 2, shape, buf), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000004/model.h5", qkv, "corrupt", "crc32", NULL));
	free(msg);
	/* the other tensors still read */
	CHECK_INT(ckpt_get_tensor(r, fm, "decoder.final_layernorm.weight", CKPT_F32, 1, (int64_t[]){ 16 }, buf), 0);
	ckpt_close(r);

	/* a truncated file, an empty file, a text file */
	struct stat st;
	CHECK_INT(stat(model, &st), 0);
	const char *what[] = { "truncated", "empty", "text" };
	for (int k = 0; k < 3; k++) {
		if (k == 0)
			truncate_file(model, (long)st.st_size / 2);
		else if (k == 1)
			truncate_file(model, 0);
		else
			write_text(model, "this is not HDF5\n");
		r = ckpt_open(save, 4);
		test_capture_begin(&cap, 2);
		int h = ckpt_file_open(r, "model.h5");
		msg = capture_err(&cap);
		if (h != -1)
			printf("#   the %s file opened\n", what[k]);
		CHECK_INT(h, -1);
		CHECK(contains_all(msg, "iter_0000004/model.h5': not a readable HDF5 file (truncated or corrupt?)",
				   "[H5Fopen at lib/ckpt/ckpt.c:", NULL));
		free(msg);
		ckpt_close(r);
	}
	free(model);

	/* a file from a newer format version (h5py changes the attribute) */
	char *optim = join(save, "iter_0000004/optim.h5");
	char *out = test_python(save, "import sys\nimport numpy as np, h5py\n",
				"import os\n"
				"with h5py.File(os.path.join(sys.argv[1], 'iter_0000004', 'optim.h5'), 'r+') as f:\n"
				"    f.attrs['megac_format_version'] = np.int64(2)\n");
	CHECK(out != NULL);
	free(out);
	r = ckpt_open(save, 4);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_file_open(r, "optim.h5"), -1);
	msg = capture_err(&cap);
	CHECK(contains_all(msg, "iter_0000004/optim.h5' is in checkpoint format version 2", NULL));
	free(msg);
	ckpt_close(r);
	free(optim);
out:
	free(buf);
	free(save);
}

/* Tensors written by another tool (h5py) without our attributes: float32
 * and int64 are recognized by their storage type; reading needs a crc32;
 * uint16 without a dtype attribute is ambiguous. */
static void test_foreign_file(void)
{
	char *save = path_in("foreign");
	char *it = join(save, "iter_0000001");
	mkdir(save, 0777);
	mkdir(it, 0777);
	char *out = test_python(save, "import sys, os, zlib\nimport numpy as np, h5py\n",
				"p = os.path.join(sys.argv[1], 'iter_0000001', 'model.h5')\n"
				"with h5py.File(p, 'w', libver='latest') as f:\n"
				"    a = np.arange(6, dtype=np.float32).reshape(2, 3)\n"
				"    f['a'] = a\n"
				"    f['a'].attrs['crc32'] = np.uint32(zlib.crc32(a.tobytes()))\n"
				"    f['nocrc'] = a\n"
				"    f['u'] = np.arange(4, dtype=np.uint16)\n"
				"    f['d'] = np.arange(4, dtype=np.float64)\n"
				"    f.attrs['fixed'] = np.bytes_('fixed text')\n"
				"    f.attrs['i32'] = np.int32(-5)\n"
				"    f.attrs['u64'] = np.uint64(2**63)\n"
				"    f.attrs['f32'] = np.float32(0.5)\n");
	CHECK(out != NULL);
	free(out);
	struct ckpt_reader *r = ckpt_open(save, 1);
	int f = ckpt_file_open(r, "model.h5");
	CHECK(f >= 0);
	float v[6];
	int64_t shape[2] = { 2, 3 };
	CHECK_INT(ckpt_get_tensor(r, f, "a", CKPT_F32, 2, shape, v), 0);
	CHECK(v[5] == 5.0f);
	char *s = NULL;
	CHECK_INT(ckpt_get_attr_str(r, f, NULL, "fixed", &s), 0);
	CHECK_STR(s, "fixed text");
	free(s);
	int64_t i64 = 0;
	double f64 = 0;
	CHECK_INT(ckpt_get_attr_i64(r, f, NULL, "i32", &i64), 0);
	CHECK_INT(i64, -5);
	CHECK_INT(ckpt_get_attr_f64(r, f, NULL, "f32", &f64), 0);
	CHECK(f64 == 0.5);
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_tensor(r, f, "nocrc", CKPT_F32, 2, shape, v), -1);
	CHECK_INT(ckpt_get_tensor(r, f, "u", CKPT_BF16, 1, (int64_t[]){ 4 }, v), -1);
	CHECK_INT(ckpt_get_tensor(r, f, "d", CKPT_F32, 1, (int64_t[]){ 4 }, v), -1);
	CHECK_INT(ckpt_get_attr_i64(r, f, NULL, "u64", &i64), -1);
	char *msg = test_capture_end(&cap);
	CHECK(contains_all(msg, "tensor 'nocrc' has no crc32 attribute",
			   "tensor 'u' is uint16 without a dtype attribute, expected bfloat16",
			   "tensor 'd' is float64, expected float32", "'u64' of '/' is 9223372036854775808, out of range",
			   NULL));
	free(msg);
	ckpt_close(r);
	free(it);
	free(save);
}

/* Misuse that is the caller's data, not a bug: refused with a message. */
static void test_writer_refusals(void)
{
	char *save = path_in("refuse");
	struct test_capture cap;
	struct ckpt_writer *w = ckpt_begin(save, 1);
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_file_create(w, "../evil.h5"), -1);
	CHECK_INT(ckpt_file_create(w, ".hidden.h5"), -1);
	int f = ckpt_file_create(w, "model.h5");
	CHECK_INT(ckpt_file_create(w, "model.h5"), -1);
	int64_t shape[1] = { 2 }, neg[1] = { -2 };
	float v[2] = { 1, 2 };
	CHECK_INT(ckpt_put_tensor(w, f, "/abs", CKPT_F32, 1, shape, v), -1);
	CHECK_INT(ckpt_put_tensor(w, f, "a//b", CKPT_F32, 1, shape, v), -1);
	CHECK_INT(ckpt_put_tensor(w, f, "neg", CKPT_F32, 1, neg, v), -1);
	CHECK_INT(ckpt_put_tensor(w, f, "g/t", CKPT_F32, 1, shape, v), 0);
	CHECK_INT(ckpt_put_tensor(w, f, "g/t/u", CKPT_F32, 1, shape, v), -1);
	CHECK_INT(ckpt_put_attr_i64(w, f, "g/t", "crc32", 1), -1);
	CHECK_INT(ckpt_put_attr_i64(w, f, NULL, "megac_format_version", 1), -1);
	CHECK_INT(ckpt_put_attr_i64(w, f, "missing", "x", 1), -1);
	CHECK_INT(ckpt_put_attr_i64(w, f, NULL, "x", 1), 0);
	CHECK_INT(ckpt_put_attr_i64(w, f, NULL, "x", 2), -1);
	char *msg = test_capture_end(&cap);
	CHECK(contains_all(msg, "invalid checkpoint file name '../evil.h5'", "model.h5' is created twice",
			   "invalid tensor name '/abs'", "invalid tensor name 'a//b'", "negative dimension",
			   "'g/t' exists and is not a group", "'crc32' is reserved", "no such tensor or group",
			   "attribute 'x' of '/' is already set", NULL));
	free(msg);
	ckpt_abort(w);
	CHECK_INT(hidden_entries(save), 0);
	free(save);
}

/* Row reads: a tensor of 3 checksum blocks (a row of 2 floats: 131072 rows
 * a block); rows inside one block and across a block boundary equal the
 * written data; a flipped byte in the last block fails only the reads that
 * touch that block, naming its rows. */
static void test_rows(void)
{
	char *save = path_in("rows");
	int64_t shape[2] = { 300000, 2 };
	size_t n = 600000;
	float *data = malloc(n * sizeof(float)), *buf = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		data[i] = (float)i * 0.5f;
	struct ckpt_writer *w = ckpt_begin(save, 1);
	int f = w ? ckpt_file_create(w, "model.h5") : -1;
	CHECK(f >= 0);
	CHECK_INT(ckpt_put_tensor(w, f, "big", CKPT_F32, 2, shape, data), 0);
	CHECK_INT(ckpt_commit(w), 0);
	struct ckpt_reader *r = ckpt_open(save, 1);
	int fm = r ? ckpt_file_open(r, "model.h5") : -1;
	CHECK(fm >= 0);
	CHECK_INT(ckpt_get_tensor_rows(r, fm, "big", CKPT_F32, 2, shape, 100, 200, buf), 0);
	CHECK(!memcmp(buf, data + 200, 400 * sizeof(float)));
	CHECK_INT(ckpt_get_tensor_rows(r, fm, "big", CKPT_F32, 2, shape, 131000, 300, buf), 0);
	CHECK(!memcmp(buf, data + 262000, 600 * sizeof(float)));
	CHECK_INT(ckpt_get_tensor_rows(r, fm, "big", CKPT_F32, 2, shape, 0, 300000, buf), 0);
	CHECK(!memcmp(buf, data, n * sizeof(float)));
	ckpt_close(r);
	char *model = join(save, "iter_0000001/model.h5");
	CHECK_INT(flip_byte(model, "big", 270000 * 8 + 3), 0); /* row 270000: the third block */
	r = ckpt_open(save, 1);
	fm = r ? ckpt_file_open(r, "model.h5") : -1;
	CHECK_INT(ckpt_get_tensor_rows(r, fm, "big", CKPT_F32, 2, shape, 1000, 5000, buf), 0);
	CHECK(!memcmp(buf, data + 2000, 10000 * sizeof(float)));
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(ckpt_get_tensor_rows(r, fm, "big", CKPT_F32, 2, shape, 262140, 10, buf), -1);
	char *msg = capture_err(&cap);
	CHECK(contains_all(msg, "model.h5", "'big' is corrupt", "rows 262144-299999", NULL));
	free(msg);
	ckpt_close(r);
	free(model);
	free(data);
	free(buf);
	free(save);
}

int main(void)
{
	log_init("test_ckpt", 0, 1);
	dir = test_tmpdir("ckpt");
	RUN(test_crc32);
	RUN(test_round_trip);
	RUN(test_h5py_reads);
	RUN(test_reproducible);
	RUN(test_release);
	RUN(test_failed_save_changes_nothing);
	RUN(test_overwrite);
	RUN(test_tracker_contents);
	RUN(test_errors);
	RUN(test_rows);
	RUN(test_foreign_file);
	RUN(test_writer_refusals);
	return test_summary();
}
