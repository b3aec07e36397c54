/*
 * test_ckpt_parts.c - lib/ckpt transactions with more than one writer, as
 * pipeline-parallel saves make them (ckpt_join, ckpt_part_finish,
 * ckpt_part_abort, ckpt_put_external_link): the tensors a part writes are
 * read by name from the owner's files through external links, with their
 * dtype, shape, attributes and crc32 checked, once the transaction is
 * renamed into place and after the whole save directory has moved; HDF5
 * itself (from C and through h5py) resolves the relative link file names
 * against the linking file's directory, whatever the working directory; a
 * failed, aborted or killed part never leaves a committed checkpoint or
 * files of its own; damaged, missing and hostile links are refused with
 * messages naming the files.
 */
#include "base/error.h"
#include "ckpt/ckpt.h"
#include "test.h"

#include <dirent.h>
#include <hdf5.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char *dir; /* scratch root of this run, absolute */
/* What a forked child dies holding, kept reachable for LeakSanitizer. */
static struct ckpt_writer *volatile dying_writer;

static char *join(const char *a, const char *b)
{
	char *p = malloc(strlen(a) + strlen(b) + 2);
	sprintf(p, "%s/%s", a, b);
	return p;
}

static char *path_in(const char *rel)
{
	return join(dir, rel);
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* Entries of d (other than . and ..) whose name starts with prefix. */
static int entries(const char *d, const char *prefix)
{
	DIR *dd = opendir(d);
	if (!dd)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dd)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !strncmp(e->d_name, prefix, strlen(prefix)))
			n++;
	closedir(dd);
	return n;
}



/* ---- a checkpoint of two "stages" ----------------------------------------- */

struct tcase {
	int part; /* 0: the owner's files, 1: the part's */
	const char *optim_group; /* NULL: model file; else the tensor is group/name in optim */
	const char *name;
	enum ckpt_dtype dt;
	int ndim;
	int64_t shape[2];
};

static const struct tcase cases[] = {
	{ 0, NULL, "embedding.word_embeddings.weight", CKPT_F32, 2, { 37, 16 } },
	{ 0, "exp_avg", "embedding.word_embeddings.weight", CKPT_F32, 2, { 37, 16 } },
	{ 0, "exp_avg_sq", "embedding.word_embeddings.weight", CKPT_F32, 2, { 37, 16 } },
	{ 1, NULL, "decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, { 64, 16 } },
	{ 1, NULL, "decoder.layers.1.mlp.linear_fc2.weight", CKPT_BF16, 2, { 16, 32 } },
	{ 1, NULL, "decoder.final_layernorm.weight", CKPT_F32, 1, { 16 } },
	{ 1, NULL, "some.scalar", CKPT_F32, 0, { 0 } },
	{ 1, NULL, "an.empty.tensor", CKPT_F32, 2, { 0, 4 } },
	{ 1, "exp_avg", "decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, { 64, 16 } },
	{ 1, "exp_avg_sq", "decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, { 64, 16 } },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static void case_name(const struct tcase *c, char *buf, size_t n)
{
	snprintf(buf, n, "%s%s%s", c->optim_group ? c->optim_group : "", c->optim_group ? "/" : "", c->name);
}

static int64_t case_count(const struct tcase *c)
{
	int64_t n = 1;
	for (int i = 0; i < c->ndim; i++)
		n *= c->shape[i];
	return n;
}

/* Bytes of case k (seed varies the values between checkpoints). */
static void *case_data(size_t k, int seed)
{
	const struct tcase *c = &cases[k];
	int64_t n = case_count(c);
	if (c->dt == CKPT_F32)
		return make_f32(n, (int)k + 100 * seed);
	uint16_t *b = malloc((size_t)(n ? n : 1) * 2);
	for (int64_t i = 0; i < n; i++)
		b[i] = (uint16_t)(i * 40503u + k + (unsigned)seed);
	return b;
}

/* Write every case: the owner's into model.h5 / optim.h5, the part's into
 * model.stage-001.h5 / optim.stage-001.h5 through ckpt_join, finished before
 * the owner links them; attribute tp_axis on the part's fc1. */
static int save_parts(const char *save, int64_t it, int seed)
{
	struct ckpt_writer *w = ckpt_begin(save, it);
	if (!w)
		return -1;
	char *display = ckpt_iter_path(save, it);
	struct ckpt_writer *p = ckpt_join(ckpt_tmp_dir(w), display);
	free(display);
	int f[2][2] = { { ckpt_file_create(w, "model.h5"), ckpt_file_create(w, "optim.h5") },
			{ ckpt_file_create(p, "model.stage-001.h5"), ckpt_file_create(p, "optim.stage-001.h5") } };
	struct ckpt_writer *wr[2] = { w, p };
	int ok = f[0][0] >= 0 && f[0][1] >= 0 && f[1][0] >= 0 && f[1][1] >= 0;
	for (size_t k = 0; ok && k < NCASES; k++) {
		const struct tcase *c = &cases[k];
		char name[160];
		case_name(c, name, sizeof(name));
		void *d = case_data(k, seed);
		ok = ckpt_put_tensor(wr[c->part], f[c->part][c->optim_group != NULL], name, c->dt, c->ndim, c->shape,
				     d) == 0;
		free(d);
	}
	ok = ok && ckpt_put_attr_i64(p, f[1][0], "decoder.layers.1.mlp.linear_fc1.weight", "tp_axis", 0) == 0;
	if (!ok) {
		ckpt_part_abort(p);
		ckpt_abort(w);
		return -1;
	}
	if (ckpt_part_finish(p) < 0) {
		ckpt_abort(w);
		return -1;
	}
	for (size_t k = 0; ok && k < NCASES; k++) {
		const struct tcase *c = &cases[k];
		char name[160];
		case_name(c, name, sizeof(name));
		if (c->part)
			ok = ckpt_put_external_link(w, f[0][c->optim_group != NULL], name,
						    c->optim_group ? "optim.stage-001.h5" : "model.stage-001.h5",
						    name) == 0;
	}
	ok = ok && ckpt_put_attr_i64(w, f[0][0], NULL, "iteration", it) == 0;
	if (!ok) {
		ckpt_abort(w);
		return -1;
	}
	return ckpt_commit(w);
}

/* Every case read back by name from model.h5 / optim.h5 of save's iteration
 * it, equal to seed's data; 0 when all agree. */
static int check_parts(const char *save, int64_t it, int seed)
{
	struct ckpt_reader *r = ckpt_open(save, it);
	if (!r)
		return -1;
	int fm = ckpt_file_open(r, "model.h5"), fo = ckpt_file_open(r, "optim.h5");
	int bad = fm < 0 || fo < 0;
	for (size_t k = 0; !bad && k < NCASES; k++) {
		const struct tcase *c = &cases[k];
		char name[160];
		case_name(c, name, sizeof(name));
		int file = c->optim_group ? fo : fm;
		enum ckpt_dtype dt;
		int ndim;
		int64_t shape[CKPT_MAX_NDIM];
		size_t bytes = (size_t)case_count(c) * ckpt_dtype_size(c->dt);
		void *want = case_data(k, seed), *got = malloc(bytes ? bytes : 1);
		if (ckpt_has_tensor(r, file, name) != 1 || ckpt_tensor_info(r, file, name, &dt, &ndim, shape) < 0 ||
		    dt != c->dt || ndim != c->ndim || memcmp(shape, c->shape, (size_t)ndim * sizeof(int64_t)) ||
		    ckpt_get_tensor(r, file, name, c->dt, c->ndim, c->shape, got) < 0 || memcmp(got, want, bytes)) {
			printf("#   %s does not read back\n", name);
			bad = 1;
		}
		free(want);
		free(got);
	}
	int64_t v = -1;
	if (!bad && (ckpt_get_attr_i64(r, fm, "decoder.layers.1.mlp.linear_fc1.weight", "tp_axis", &v) < 0 || v != 0 ||
		     ckpt_get_attr_i64(r, fm, NULL, "iteration", &v) < 0 || v != it ||
		     ckpt_has_tensor(r, fm, "decoder.layers.9.missing") != 0))
		bad = 1;
	ckpt_close(r);
	return bad ? -1 : 0;
}

/* ---- tests ----------------------------------------------------------------- */

/* A two-writer checkpoint reads back through the links; its directory holds
 * exactly the four files; a part's files have their final names in the
 * hidden directory once finished, and nothing is visible before the commit. */
static void test_parts_round_trip(void)
{
	char *save = path_in("rt");
	CHECK_INT(save_parts(save, 5, 0), 0);
	CHECK_INT(check_parts(save, 5, 0), 0);
	char *it = ckpt_iter_path(save, 5);
	CHECK_INT(entries(it, ""), 4);
	CHECK_INT(entries(it, "model.stage-001.h5"), 1);
	CHECK_INT(entries(it, "optim.stage-001.h5"), 1);
	CHECK_INT(entries(save, "."), 0);

	/* the steps in between: finished part, owner not committed yet */
	struct ckpt_writer *w = ckpt_begin(save, 6);
	struct ckpt_writer *p = ckpt_join(ckpt_tmp_dir(w), "shown");
	int f = ckpt_file_create(p, "model.stage-001.h5");
	float v[3] = { 1, 2, 3 };
	int64_t shape[1] = { 3 };
	CHECK_INT(ckpt_put_tensor(p, f, "x", CKPT_F32, 1, shape, v), 0);
	char *tmp = strdup(ckpt_tmp_dir(w));
	CHECK_INT(entries(tmp, "model.stage-001.h5.tmp"), 1);
	CHECK_INT(ckpt_part_finish(p), 0);
	CHECK_INT(entries(tmp, "model.stage-001.h5"), 1);
	CHECK_INT(entries(tmp, "model.stage-001.h5.tmp"), 0);
	char *it6 = ckpt_iter_path(save, 6);
	CHECK(!exists(it6));
	int m = ckpt_file_create(w, "model.h5");
	CHECK_INT(ckpt_put_external_link(w, m, "x", "model.stage-001.h5", "x"), 0);
	CHECK_INT(ckpt_commit(w), 0);
	struct ckpt_reader *r = ckpt_open(save, 6);
	float got[3] = { 0 };
	int rf = ckpt_file_open(r, "model.h5");
	CHECK_INT(ckpt_get_tensor(r, rf, "x", CKPT_F32, 1, shape, got), 0);
	CHECK(!memcmp(got, v, sizeof(v)));
	ckpt_close(r);
	free(it6);
	free(tmp);
	free(it);
	free(save);
}

/* The links are relative: the whole save directory moved elsewhere still
 * reads, through our reader, through HDF5's own traversal from C with the
 * working directory somewhere else (holding a decoy file of the same name,
 * which HDF5 would only try after the linking file's directory), and
 * through h5py, which sees every tensor at its name and global shape.
 * $HDF5_EXT_PREFIX, which HDF5 tries first, does not mislead our reader. */
static void test_links_move(void)
{
	char *save = path_in("mv"), *moved = path_in("moved elsewhere");
	CHECK_INT(save_parts(save, 7, 1), 0);
	CHECK_INT(rename(save, moved), 0);
	CHECK_INT(check_parts(moved, 7, 1), 0);

	/* a decoy stage file, with other data under the same names */
	char *decoy = path_in("decoy");
	CHECK_INT(save_parts(decoy, 1, 2), 0);
	char *decoy_it = ckpt_iter_path(decoy, 1);

	/* HDF5 from C, in the decoy's directory */
	char cwd[PATH_MAX];
	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	CHECK_INT(chdir(decoy_it), 0);
	char *it = ckpt_iter_path(moved, 7);
	char *model = join(it, "model.h5");
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	hid_t fid = H5Fopen(model, H5F_ACC_RDONLY, H5P_DEFAULT);
	CHECK(fid >= 0);
	hid_t d = H5Dopen2(fid, "decoder.layers.1.mlp.linear_fc1.weight", H5P_DEFAULT);
	CHECK(d >= 0);
	float *got = malloc(64 * 16 * sizeof(float)), *want = case_data(3, 1);
	CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
	CHECK(!memcmp(got, want, 64 * 16 * sizeof(float)));
	char fname[PATH_MAX] = "";
	H5Fget_name(d, fname, sizeof(fname));
	CHECK(strstr(fname, "moved elsewhere/iter_0000007/model.stage-001.h5") != NULL);
	if (!strstr(fname, "moved elsewhere"))
		printf("#   HDF5 opened %s\n", fname);
	H5Dclose(d);
	H5Fclose(fid);
	free(got);
	free(want);
	CHECK_INT(chdir(cwd), 0);

	/* our reader ignores $HDF5_EXT_PREFIX, which HDF5 would try first */
	setenv("HDF5_EXT_PREFIX", decoy_it, 1);
	CHECK_INT(check_parts(moved, 7, 1), 0);
	unsetenv("HDF5_EXT_PREFIX");

	/* h5py, from / */
	/* test_python passes its directory; the iteration directory is in a
	 * file there */
	char *argfile = join(moved, "it.txt");
	FILE *af = fopen(argfile, "w");
	fputs(it, af);
	fclose(af);
	const char *script =
		 "it = open(os.path.join(sys.argv[1], 'it.txt')).read()\n"
		 "os.chdir('/')\n"
		 "def walk(g, pre, out):\n"
		 "    for k in g.keys():\n"
		 "        o = g.get(k)\n"
		 "        assert o is not None, pre + k\n"
		 "        if isinstance(o, h5py.Group): walk(o, pre + k + '/', out)\n"
		 "        else: out[pre + k] = (o, g.get(k, getlink=True))\n"
		 "    return out\n"
		 "m = walk(h5py.File(os.path.join(it, 'model.h5'), 'r'), '', {})\n"
		 "o = walk(h5py.File(os.path.join(it, 'optim.h5'), 'r'), '', {})\n"
		 "shapes = {n: d.shape for n, (d, l) in m.items()}\n"
		 "assert shapes == {'embedding.word_embeddings.weight': (37, 16),\n"
		 "    'decoder.layers.1.mlp.linear_fc1.weight': (64, 16), 'decoder.layers.1.mlp.linear_fc2.weight': (16, 32),\n"
		 "    'decoder.final_layernorm.weight': (16,), 'some.scalar': (), 'an.empty.tensor': (0, 4)}, shapes\n"
		 "assert sorted(o) == sorted(g + '/' + n for g in ('exp_avg', 'exp_avg_sq') for n in\n"
		 "    ('embedding.word_embeddings.weight', 'decoder.layers.1.mlp.linear_fc1.weight')), sorted(o)\n"
		 "for n, (d, l) in list(m.items()) + list(o.items()):\n"
		 "    assert int(d.attrs['crc32']) == zlib.crc32(d[()].tobytes()), n\n"
		 "    if n.endswith('embedding.word_embeddings.weight'):\n"
		 "        assert isinstance(l, h5py.HardLink), n\n"
		 "    else:\n"
		 "        assert isinstance(l, h5py.ExternalLink) and l.path == '/' + n, (n, l)\n"
		 "        assert l.filename == ('optim' if '/' in n else 'model') + '.stage-001.h5', (n, l.filename)\n"
		 "        assert d.file.filename.endswith('moved elsewhere/iter_0000007/' + l.filename), d.file.filename\n"
		 "assert m['decoder.layers.1.mlp.linear_fc2.weight'][0].attrs['dtype'] == b'bfloat16'\n"
		 "assert m['decoder.layers.1.mlp.linear_fc1.weight'][0].attrs['tp_axis'] == 0\n"
		 "print('OK')\n";
	char *out = test_python(moved, "import sys, os, zlib\nimport h5py\n", script);
	CHECK_STR(out, "OK\n");
	free(out);
	free(argfile);
	free(model);
	free(it);
	free(decoy_it);
	free(decoy);
	free(moved);
	free(save);
}

/* A part that fails, aborts or dies leaves no file of its own, and the
 * owner's abort removes the whole directory, finished parts' files included:
 * no iteration, no tracker. */
static void test_parts_fail(void)
{
	char *save = path_in("fail");
	char *tracker = join(save, "latest_checkpointed_iteration.txt");
	char *it = ckpt_iter_path(save, 3);
	float v[4096] = { 0 };
	int64_t shape[1] = { 4 }, big[1] = { 4096 };
	struct test_capture cap;

	/* a failed write poisons the part: finish refuses and deletes */
	struct ckpt_writer *w = ckpt_begin(save, 3);
	char *tmp = strdup(ckpt_tmp_dir(w));
	struct ckpt_writer *p = ckpt_join(tmp, it);
	int f = ckpt_file_create(p, "model.stage-001.h5");
	CHECK_INT(ckpt_put_tensor(p, f, "w", CKPT_F32, 1, shape, v), 0);
	test_capture_begin(&cap, 2);
	int r1 = ckpt_put_tensor(p, f, "w", CKPT_F32, 1, shape, v);
	int r2 = ckpt_part_finish(p);
	char *msg = test_capture_end(&cap);
	CHECK_INT(r1, -1);
	CHECK_INT(r2, -1);
	CHECK(contains_all(msg, "iter_0000003/model.stage-001.h5", "twice", "not keeping", NULL));
	free(msg);
	CHECK_INT(entries(tmp, ""), 1); /* the owner's writer record only */
	CHECK_INT(entries(tmp, ".writer"), 1);
	/* a finished part, then the owner aborts */
	p = ckpt_join(tmp, it);
	f = ckpt_file_create(p, "optim.stage-001.h5");
	CHECK_INT(ckpt_put_tensor(p, f, "exp_avg/w", CKPT_F32, 1, shape, v), 0);
	CHECK_INT(ckpt_part_finish(p), 0);
	/* a part aborted before finishing */
	p = ckpt_join(tmp, it);
	f = ckpt_file_create(p, "model.stage-002.h5");
	CHECK_INT(ckpt_put_tensor(p, f, "w", CKPT_F32, 1, shape, v), 0);
	ckpt_part_abort(p);
	CHECK_INT(entries(tmp, "model.stage-002"), 0);
	/* a part whose process dies writing (die(), SIGTERM) */
	for (int how = 0; how < 2; how++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			int devnull = open("/dev/null", O_WRONLY);
			dup2(devnull, 2);
			struct ckpt_writer *cw = dying_writer = ckpt_join(tmp, it);
			int cf = ckpt_file_create(cw, "model.stage-003.h5");
			ckpt_put_tensor(cw, cf, "w", CKPT_F32, 1, big, v);
			if (how == 0)
				die("injected failure");
			raise(SIGTERM);
			_exit(3);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		CHECK(how == 0 ? WIFEXITED(st) && WEXITSTATUS(st) == DIE_EXIT_CODE :
				 WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
		CHECK_INT(entries(tmp, "model.stage-003"), 0);
	}
	int m = ckpt_file_create(w, "model.h5");
	CHECK_INT(ckpt_put_tensor(w, m, "v", CKPT_F32, 1, shape, v), 0);
	CHECK_INT(entries(tmp, "optim.stage-001.h5"), 1);
	ckpt_abort(w);
	CHECK(!exists(tmp));
	CHECK(!exists(it));
	CHECK(!exists(tracker));
	CHECK_INT(entries(save, ""), 0);

	/* joining where the directory is not (no shared file system) */
	test_capture_begin(&cap, 2);
	p = ckpt_join(tmp, it);
	msg = test_capture_end(&cap);
	CHECK(p == NULL);
	CHECK(contains_all(msg, tmp, "does not exist here", "shared file system", NULL));
	free(msg);

	/* refusals: a name another writer made, links that leave the directory
	 * or point at their own file, a link name taken */
	w = ckpt_begin(save, 3);
	free(tmp);
	tmp = strdup(ckpt_tmp_dir(w));
	p = ckpt_join(tmp, it);
	CHECK(ckpt_file_create(p, "model.stage-001.h5") >= 0);
	CHECK_INT(ckpt_part_finish(p), 0);
	p = ckpt_join(tmp, it);
	m = ckpt_file_create(w, "model.h5");
	test_capture_begin(&cap, 2);
	int r3 = ckpt_file_create(p, "model.stage-001.h5");
	int r4 = ckpt_put_external_link(w, m, "a", "../other.h5", "a");
	int r5 = ckpt_put_external_link(w, m, "b", "sub/model.h5", "b");
	int r6 = ckpt_put_external_link(w, m, "c", "model.h5", "c");
	int r7 = ckpt_put_external_link(w, m, "d", "model.stage-001.h5", "/d");
	int r8 = ckpt_put_external_link(w, m, "g/e", "model.stage-001.h5", "e");
	int r9 = ckpt_put_external_link(w, m, "g/e", "model.stage-001.h5", "e");
	msg = test_capture_end(&cap);
	CHECK_INT(r3, -1);
	CHECK_INT(r4, -1);
	CHECK_INT(r5, -1);
	CHECK_INT(r6, -1);
	CHECK_INT(r7, -1);
	CHECK_INT(r8, 0);
	CHECK_INT(r9, -1);
	CHECK(contains_all(msg, "created twice (by another writer)", "cannot link to a file named '../other.h5'",
			   "cannot link to a file named 'sub/model.h5'", "cannot link to a file named 'model.h5'",
			   "cannot link to an object named '/d'", "'g/e' is stored twice", NULL));
	free(msg);
	ckpt_part_abort(p);
	/* the failed calls poison the owner: the commit refuses */
	test_capture_begin(&cap, 2);
	int r10 = ckpt_commit(w);
	msg = test_capture_end(&cap);
	CHECK_INT(r10, -1);
	CHECK(contains_all(msg, "not saving", NULL));
	free(msg);
	CHECK(!exists(it));
	CHECK(!exists(tracker));
	CHECK_INT(entries(save, ""), 0);
	free(tmp);
	free(it);
	free(tracker);
	free(save);
}

/* Damage behind a link is reported naming the file that holds the data:
 * a checksum mismatch in a stage's file, a missing stage file, a link to
 * nothing, to a file outside the directory, or to another link. */
static void test_link_errors(void)
{
	char *save = path_in("err");
	CHECK_INT(save_parts(save, 2, 3), 0);
	char *it = ckpt_iter_path(save, 2);
	char *stage = join(it, "model.stage-001.h5"), *ostage = join(it, "optim.stage-001.h5");
	struct test_capture cap;
	int64_t shape[2] = { 64, 16 };
	float *buf = malloc(64 * 16 * sizeof(float));

	/* hostile and broken links, added with h5py */
	char *out = test_python(it, "import sys, os\nimport h5py\n",
				"with h5py.File(os.path.join(sys.argv[1], 'model.h5'), 'r+') as f:\n"
				"    f['outside'] = h5py.ExternalLink('../elsewhere.h5', '/x')\n"
				"    f['nothing'] = h5py.ExternalLink('model.stage-001.h5', '/nothing')\n"
				"    f['chain'] = h5py.ExternalLink('model.stage-001.h5', '/chain')\n"
				"with h5py.File(os.path.join(sys.argv[1], 'model.stage-001.h5'), 'r+') as f:\n"
				"    f['chain'] = h5py.ExternalLink('model.h5', '/embedding.word_embeddings.weight')\n"
				"print('OK')\n");
	CHECK_STR(out, "OK\n");
	free(out);
	char *script = join(it, "script.py");
	unlink(script);
	free(script);
	struct ckpt_reader *r = ckpt_open(save, 2);
	int fm = ckpt_file_open(r, "model.h5");
	test_capture_begin(&cap, 2);
	int a = ckpt_has_tensor(r, fm, "outside");
	int b = ckpt_has_tensor(r, fm, "nothing");
	int c = ckpt_has_tensor(r, fm, "chain");
	char *msg = test_capture_end(&cap);
	CHECK_INT(a, -1);
	CHECK_INT(b, -1);
	CHECK_INT(c, -1);
	CHECK(contains_all(msg, "'outside' is a link to '/x' in '../elsewhere.h5', which is not an object of a file in the checkpoint directory",
			   "'nothing' links to 'nothing' in", "model.stage-001.h5', which has no such tensor",
			   "'chain' links to 'chain' in 'model.stage-001.h5', which is a link again", NULL));
	free(msg);
	/* the good ones still read */
	CHECK_INT(ckpt_get_tensor(r, fm, "decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, shape, buf), 0);
	ckpt_close(r);

	/* a flipped byte in the stage's data */
	hid_t fid = H5Fopen(stage, H5F_ACC_RDONLY, H5P_DEFAULT);
	hid_t d = H5Dopen2(fid, "decoder.layers.1.mlp.linear_fc1.weight", H5P_DEFAULT);
	haddr_t off = H5Dget_offset(d);
	H5Dclose(d);
	H5Fclose(fid);
	CHECK(off != HADDR_UNDEF);
	FILE *fp = fopen(stage, "r+b");
	fseek(fp, (long)off + 100, SEEK_SET);
	int ch = fgetc(fp);
	fseek(fp, (long)off + 100, SEEK_SET);
	fputc(ch ^ 0x40, fp);
	fclose(fp);
	r = ckpt_open(save, 2);
	fm = ckpt_file_open(r, "model.h5");
	test_capture_begin(&cap, 2);
	a = ckpt_get_tensor(r, fm, "decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, shape, buf);
	msg = test_capture_end(&cap);
	CHECK_INT(a, -1);
	CHECK(contains_all(msg, "iter_0000002/model.stage-001.h5': tensor 'decoder.layers.1.mlp.linear_fc1.weight' is corrupt",
			   NULL));
	free(msg);
	/* a wrong shape expected: named in the stage's file */
	int64_t wrong[2] = { 16, 64 };
	test_capture_begin(&cap, 2);
	a = ckpt_get_tensor(r, fm, "decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, wrong, buf);
	msg = test_capture_end(&cap);
	CHECK_INT(a, -1);
	CHECK(contains_all(msg, "model.stage-001.h5': tensor 'decoder.layers.1.mlp.linear_fc1.weight' has shape [64, 16], expected [16, 64]",
			   NULL));
	free(msg);
	ckpt_close(r);

	/* the optimizer's stage file is gone */
	CHECK_INT(unlink(ostage), 0);
	r = ckpt_open(save, 2);
	int fo = ckpt_file_open(r, "optim.h5");
	test_capture_begin(&cap, 2);
	a = ckpt_get_tensor(r, fo, "exp_avg/decoder.layers.1.mlp.linear_fc1.weight", CKPT_F32, 2, shape, buf);
	int64_t eshape[2] = { 37, 16 };
	b = ckpt_get_tensor(r, fo, "exp_avg/embedding.word_embeddings.weight", CKPT_F32, 2, eshape, buf);
	msg = test_capture_end(&cap);
	CHECK_INT(a, -1);
	CHECK_INT(b, 0);
	CHECK(contains_all(msg, "iter_0000002/optim.stage-001.h5': no such file in the checkpoint",
			   "optim.h5': 'exp_avg/decoder.layers.1.mlp.linear_fc1.weight' is stored in 'optim.stage-001.h5'",
			   NULL));
	free(msg);
	ckpt_close(r);
	free(buf);
	free(stage);
	free(ostage);
	free(it);
	free(save);
}

int main(void)
{
	log_init("test_ckpt_parts", 0, 1);
	char *rel = test_tmpdir("ckpt_parts");
	dir = realpath(rel, NULL); /* the tests change directory */
	free(rel);
	RUN(test_parts_round_trip);
	RUN(test_links_move);
	RUN(test_parts_fail);
	RUN(test_link_errors);
	free(dir);
	return test_summary();
}
