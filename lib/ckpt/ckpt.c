/*
 * ckpt.c - checkpoint transactions over an iteration directory and their
 * reader, see ckpt.h; the on-disk rules are in docs/checkpoint-format.md.
 */
#include "ckpt/ckpt.h"
#include "ckpt/h5io.h"

#include "base/error.h"
#include "base/tempfile.h"
#include "base/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Written on every file's root; readers refuse files with a larger one. */
#define CKPT_FORMAT_VERSION 1
#define FORMAT_ATTR "megac_format_version"
#define TRACKER "latest_checkpointed_iteration.txt"

/* ---- element types --------------------------------------------------------- */

static const char *const dtype_names[CKPT_NDTYPES] = {
	[CKPT_F32] = "float32",
	[CKPT_BF16] = "bfloat16",
	[CKPT_F16] = "float16",
	[CKPT_I64] = "int64",
};

static void check_dtype(enum ckpt_dtype dt)
{
	if ((unsigned)dt >= CKPT_NDTYPES)
		BUG("invalid checkpoint dtype %d", (int)dt);
}

const char *ckpt_dtype_name(enum ckpt_dtype dt)
{
	check_dtype(dt);
	return dtype_names[dt];
}

size_t ckpt_dtype_size(enum ckpt_dtype dt)
{
	check_dtype(dt);
	return dt == CKPT_F32 ? 4 : dt == CKPT_I64 ? 8 : 2;
}

/* The HDF5 type a dtype is stored as (and read into: little-endian hosts
 * only, so no conversion ever happens). Not a table: HDF5's type ids are
 * run-time values. */
static hid_t dtype_h5type(enum ckpt_dtype dt)
{
	switch (dt) {
	case CKPT_F32: return H5T_IEEE_F32LE;
	case CKPT_BF16:
	case CKPT_F16: return H5T_STD_U16LE;
	case CKPT_I64: return H5T_STD_I64LE;
	default: BUG("invalid checkpoint dtype %d", (int)dt);
	}
}

/* ---- paths and files -------------------------------------------------------- */

static int valid_iteration(int64_t it)
{
	return it >= 0 || it == CKPT_RELEASE;
}

/* "iter_0000500" or "release"; caller frees. */
static char *iter_name(int64_t it)
{
	if (!valid_iteration(it))
		BUG("invalid checkpoint iteration %lld", (long long)it);
	return it == CKPT_RELEASE ? xstrdup("release") : xasprintf("iter_%07lld", (long long)it);
}

char *ckpt_iter_path(const char *dir, int64_t iteration)
{
	char *name = iter_name(iteration);
	char *p = xasprintf("%s/%s", dir, name);
	free(name);
	return p;
}

/* A file name inside an iteration directory: no path, nothing hidden. */
static int valid_file_name(const char *name)
{
	return name && *name && *name != '.' && !strchr(name, '/');
}

/* HDF5 never fsyncs; after H5Fclose the data is in the page cache only. */
static int fsync_path(const char *path, const char *display)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_errno("cannot open '%s' to sync it", display);
	if (fsync(fd) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return error_errno("cannot sync '%s'", display);
	}
	close(fd);
	return 0;
}

/* rm -rf of a directory of ours (a transaction, or an old iteration being
 * replaced). Symbolic links are removed, never followed. */
static int remove_tree(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : error_errno("cannot remove '%s'", path);
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(path) < 0 && errno != ENOENT)
			return error_errno("cannot remove '%s'", path);
		return 0;
	}
	DIR *d = opendir(path);
	if (!d)
		return error_errno("cannot remove directory '%s'", path);
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *sub = xasprintf("%s/%s", path, e->d_name);
		r = remove_tree(sub);
		free(sub);
	}
	closedir(d);
	if (r == 0 && rmdir(path) < 0)
		r = error_errno("cannot remove directory '%s'", path);
	return r;
}

/* ---- who writes a transaction, and partial ones left behind ------------------ */

/*
 * A transaction directory holds WRITER_FILE while it is being filled: the
 * host, pid, start time (clock ticks after boot, /proc/PID/stat), PID
 * namespace and boot id of the process that began it. The commit deletes it
 * just before the directory is renamed into place. A directory that a killed
 * save left behind can then be told from a save still running: on the same
 * host, in the same PID namespace, a pid that is gone (or now another
 * process, started at another time), or another boot, means its writer is
 * dead and nobody will ever finish or commit it.
 */
#define WRITER_FILE ".writer"

struct writer_id {
	char host[256];
	long pid;
	unsigned long long start; /* 0: unknown */
	char pidns[64];           /* "pid:[4026531836]", "" unknown */
	char boot[64];            /* /proc/sys/kernel/random/boot_id, "" unknown */
};

/* The start time of process pid (field 22 of /proc/PID/stat), 0 when it
 * cannot be read. */
static unsigned long long proc_start(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
	unsigned long long v = 0;
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

static void read_line(const char *path, char *out, size_t n)
{
	out[0] = 0;
	FILE *fp = fopen(path, "r");
	if (!fp)
		return;
	if (!fgets(out, (int)n, fp))
		out[0] = 0;
	fclose(fp);
	out[strcspn(out, "\n")] = 0;
}

static void self_id(struct writer_id *w)
{
	memset(w, 0, sizeof(*w));
	if (gethostname(w->host, sizeof(w->host) - 1) < 0)
		snprintf(w->host, sizeof(w->host), "?");
	w->pid = (long)getpid();
	w->start = proc_start(w->pid);
	ssize_t k = readlink("/proc/self/ns/pid", w->pidns, sizeof(w->pidns) - 1);
	w->pidns[k > 0 ? k : 0] = 0;
	read_line("/proc/sys/kernel/random/boot_id", w->boot, sizeof(w->boot));
}

static int write_writer_file(const char *tmp_dir)
{
	struct writer_id w;
	self_id(&w);
	char *path = xasprintf("%s/%s", tmp_dir, WRITER_FILE);
	struct afile af;
	int r = afile_open(&af, path);
	free(path);
	if (r < 0)
		return -1;
	fprintf(af.fp, "host %s\npid %ld\nstart %llu\npidns %s\nboot %s\n", w.host, w.pid, w.start, w.pidns, w.boot);
	if (afile_commit(&af) < 0) {
		afile_abort(&af);
		return -1;
	}
	return 0;
}

/* 0 and *w from a transaction's WRITER_FILE, -1 when it has none (an older
 * megac's) or it cannot be read. */
static int read_writer_file(const char *tmp_dir, struct writer_id *w)
{
	memset(w, 0, sizeof(*w));
	char *path = xasprintf("%s/%s", tmp_dir, WRITER_FILE);
	FILE *fp = fopen(path, "r");
	free(path);
	if (!fp)
		return -1;
	char line[512];
	int have = 0;
	while (fgets(line, sizeof(line), fp)) {
		line[strcspn(line, "\n")] = 0;
		char *v = strchr(line, ' ');
		if (!v)
			continue;
		*v++ = 0;
		if (!strcmp(line, "host"))
			have |= 1, snprintf(w->host, sizeof(w->host), "%s", v);
		else if (!strcmp(line, "pid"))
			have |= 2, w->pid = strtol(v, NULL, 10);
		else if (!strcmp(line, "start"))
			w->start = strtoull(v, NULL, 10);
		else if (!strcmp(line, "pidns"))
			snprintf(w->pidns, sizeof(w->pidns), "%s", v);
		else if (!strcmp(line, "boot"))
			snprintf(w->boot, sizeof(w->boot), "%s", v);
	}
	fclose(fp);
	return have == 3 && w->pid > 0 ? 0 : -1;
}

/* 1 when the writer w is certainly dead (seen from this process), 0 when it
 * is alive or cannot be checked from here; why[] says which. */
static int writer_dead(const struct writer_id *w, char *why, size_t n)
{
	struct writer_id me;
	self_id(&me);
	if (strcmp(w->host, me.host)) {
		snprintf(why, n, "pid %ld on host %s, which cannot be checked from %s", w->pid, w->host, me.host);
		return 0;
	}
	if (*w->boot && *me.boot && strcmp(w->boot, me.boot)) {
		snprintf(why, n, "pid %ld on this host before it restarted", w->pid);
		return 1;
	}
	if (!*w->pidns || strcmp(w->pidns, me.pidns)) {
		snprintf(why, n, "pid %ld of another PID namespace (container) on this host, which cannot be checked "
			 "from here", w->pid);
		return 0;
	}
	if (kill((pid_t)w->pid, 0) < 0 && errno == ESRCH) {
		snprintf(why, n, "pid %ld on this host, no longer running", w->pid);
		return 1;
	}
	unsigned long long st = proc_start(w->pid);
	if (w->start && st && st != w->start) {
		snprintf(why, n, "pid %ld on this host, which is now another process's: the writer is gone", w->pid);
		return 1;
	}
	snprintf(why, n, "pid %ld on this host, still running", w->pid);
	return 0;
}

static int is_self(const struct writer_id *w)
{
	struct writer_id me;
	self_id(&me);
	return w->pid == me.pid && !strcmp(w->host, me.host) && !strcmp(w->pidns, me.pidns) &&
	       !strcmp(w->boot, me.boot);
}

/* Bytes of the regular files under path; *files counts them (the writer
 * record aside: it is not checkpoint data). */
static uint64_t tree_bytes(const char *path, int *files)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISDIR(st.st_mode)) {
		const char *base = strrchr(path, '/');
		if (base && !strcmp(base + 1, WRITER_FILE))
			return 0;
		(*files)++;
		return S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	}
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *sub = xasprintf("%s/%s", path, e->d_name);
		sum += tree_bytes(sub, files);
		free(sub);
	}
	closedir(d);
	return sum;
}

static void format_bytes(char *buf, size_t n, uint64_t b)
{
	if (b < 10000)
		snprintf(buf, n, "%llu bytes", (unsigned long long)b);
	else if (b < 1000000)
		snprintf(buf, n, "%.1f kB", b / 1e3);
	else if (b < 1000000000)
		snprintf(buf, n, "%.1f MB", b / 1e6);
	else
		snprintf(buf, n, "%.1f GB", b / 1e9);
}

/* A transaction directory's name: ".iter_0000500.tmp-..." or ".release.tmp-...". */
static int is_transaction(const char *name)
{
	return (!strncmp(name, ".iter_", 6) || !strncmp(name, ".release.", 9)) && strstr(name, ".tmp-");
}

/* Each partial transaction is reported once per process (a run that saves
 * every few minutes would otherwise repeat itself). */
static char **reported;
static size_t nreported, cap_reported;

static int report_once(const char *path)
{
	for (size_t i = 0; i < nreported; i++)
		if (!strcmp(reported[i], path))
			return 0;
	xgrow(&reported, &cap_reported, nreported + 1, sizeof(*reported));
	reported[nreported++] = xstrdup(path);
	return 1;
}

int ckpt_sweep(const char *dir, bool remove)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int gone = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!is_transaction(e->d_name))
			continue;
		char *p = xasprintf("%s/%s", dir, e->d_name);
		struct stat st;
		if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
			free(p);
			continue;
		}
		struct writer_id w;
		char why[1024], size[32];
		int files = 0;
		uint64_t bytes = tree_bytes(p, &files);
		format_bytes(size, sizeof(size), bytes);
		int known = read_writer_file(p, &w) == 0;
		if (known && is_self(&w)) { /* this process's own save in progress */
			free(p);
			continue;
		}
		int dead = known && writer_dead(&w, why, sizeof(why));
		if (!known && files == 0) {
			/* an older megac's transaction, killed before it wrote anything
			 * (rmdir removes only an empty directory) */
			if (remove && rmdir(p) == 0)
				gone++;
		} else if (dead && files == 0) {
			/* a writer that died before writing a file (or whose
			 * temporaries were cleaned up on its way out) */
			if (remove && remove_tree(p) == 0)
				gone++;
		} else if (dead && remove) {
			if (remove_tree(p) == 0) {
				warning("'%s' is a partial checkpoint (%s in %d file%s) left by a save that did not finish "
					"(%s): removed it", p, size, files, files == 1 ? "" : "s", why);
				gone++;
			} else {
				warning("'%s' is a partial checkpoint (%s) left by a save that did not finish (%s), "
					"and could not be removed (see above)", p, size, why);
			}
		} else if (report_once(p)) {
			if (dead)
				warning("'%s' is a partial checkpoint (%s in %d file%s) left by a save that did not finish "
					"(%s); nothing reads it, delete it to free the space", p, size, files,
					files == 1 ? "" : "s", why);
			else if (known)
				warning("'%s' is a checkpoint being saved, or a partial one (%s in %d file%s) of a save "
					"that did not finish (%s): left alone; delete it if no job saves there", p, size,
					files, files == 1 ? "" : "s", why);
			else
				warning("'%s' is a checkpoint being saved, or a partial one (%s in %d file%s) of a save "
					"that did not finish (its writer is not recorded): left alone; delete it if no "
					"job saves there", p, size, files, files == 1 ? "" : "s");
		}
		free(p);
	}
	closedir(d);
	return gone;
}

/* Create "<save>/.<base>.<tag>-<pid>-<n>" with the first free n, so that
 * the name is unique even where every job runs as the same pid (containers). */
static char *make_unique_dir(const char *save_dir, const char *base, const char *tag)
{
	for (int n = 0; n < 1000; n++) {
		char *p = xasprintf("%s/.%s.%s-%ld-%d", save_dir, base, tag, (long)getpid(), n);
		if (mkdir(p, 0777) == 0)
			return p;
		if (errno != EEXIST) {
			error_errno("cannot create directory '%s'", p);
			free(p);
			return NULL;
		}
		free(p);
	}
	error("cannot create a temporary directory in '%s': 1000 names taken", save_dir);
	return NULL;
}

/* ---- writer ---------------------------------------------------------------- */

struct ckpt_wfile {
	char *name;      /* "model.h5" */
	char *display;   /* "<save>/iter_0000500/model.h5", where it will be: for messages */
	struct afile af; /* the temporary name in the transaction, registered for cleanup */
	hid_t fid;       /* open file, -1 once closed */
	int published;   /* a part's file, renamed to its final name in the transaction */
};

struct ckpt_writer {
	char *save_dir;  /* NULL in a part (ckpt_join) */
	char *name;      /* "iter_0000500"; NULL in a part */
	char *final_dir; /* "<save>/iter_0000500" */
	char *tmp_dir;   /* "<save>/.iter_0000500.tmp-<pid>-<n>" */
	int64_t iteration;
	int part;   /* joined another process's transaction: finish, never commit */
	int failed; /* some call failed: the transaction must not be committed */
	struct ckpt_wfile *files;
	size_t nfiles, cap;
	struct h5io_crc32 crc;
};

struct ckpt_writer *ckpt_begin(const char *save_dir, int64_t iteration)
{
	if (!valid_iteration(iteration)) {
		error("cannot save a checkpoint of iteration %lld in '%s'", (long long)iteration, save_dir);
		return NULL;
	}
	if (mkdir_p(save_dir) < 0)
		return NULL;
	h5io_init();
	ckpt_sweep(save_dir, true);
	struct ckpt_writer *w = xcalloc(1, sizeof(*w));
	w->save_dir = xstrdup(save_dir);
	w->iteration = iteration;
	w->name = iter_name(iteration);
	w->final_dir = xasprintf("%s/%s", save_dir, w->name);
	w->tmp_dir = make_unique_dir(save_dir, w->name, "tmp");
	if (w->tmp_dir && write_writer_file(w->tmp_dir) < 0) {
		rmdir(w->tmp_dir);
		free(w->tmp_dir);
		w->tmp_dir = NULL;
	}
	if (!w->tmp_dir) {
		free(w->name);
		free(w->final_dir);
		free(w->save_dir);
		free(w);
		return NULL;
	}
	h5io_crc32_init(&w->crc);
	return w;
}

const char *ckpt_tmp_dir(const struct ckpt_writer *w)
{
	if (!w || w->part)
		BUG("ckpt_tmp_dir needs the writer ckpt_begin returned");
	return w->tmp_dir;
}

struct ckpt_writer *ckpt_join(const char *tmp_dir, const char *display_dir)
{
	struct stat st;
	errno = 0;
	if (stat(tmp_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (errno == ENOENT)
			error("cannot write into the checkpoint being saved as '%s': its directory '%s' does not exist "
			      "here (every writer needs the save directory on a shared file system)",
			      display_dir, tmp_dir);
		else if (errno)
			error_errno("cannot write into the checkpoint directory '%s'", tmp_dir);
		else
			error("cannot write into the checkpoint directory '%s': not a directory", tmp_dir);
		return NULL;
	}
	h5io_init();
	struct ckpt_writer *w = xcalloc(1, sizeof(*w));
	w->part = 1;
	w->tmp_dir = xstrdup(tmp_dir);
	w->final_dir = xstrdup(display_dir);
	h5io_crc32_init(&w->crc);
	return w;
}

static struct ckpt_wfile *wfile(struct ckpt_writer *w, int file)
{
	if (!w)
		BUG("checkpoint writer is NULL");
	if (file < 0 || (size_t)file >= w->nfiles || w->files[file].fid < 0)
		BUG("invalid or closed checkpoint file handle %d", file);
	return &w->files[file];
}

/* The stored result of a writer call: a failure poisons the transaction. */
static int wresult(struct ckpt_writer *w, int r)
{
	if (r < 0)
		w->failed = 1;
	return r;
}

int ckpt_file_create(struct ckpt_writer *w, const char *name)
{
	if (!valid_file_name(name))
		return wresult(w, error("'%s': invalid checkpoint file name '%s'", w->final_dir, name ? name : ""));
	for (size_t i = 0; i < w->nfiles; i++)
		if (!strcmp(w->files[i].name, name))
			return wresult(w, error("'%s/%s' is created twice", w->final_dir, name));
	/* another writer of the transaction (a part) may have made it */
	char *final = xasprintf("%s/%s", w->tmp_dir, name);
	struct stat st;
	int taken = lstat(final, &st) == 0;
	free(final);
	if (taken)
		return wresult(w, error("'%s/%s' is created twice (by another writer)", w->final_dir, name));
	xgrow(&w->files, &w->cap, w->nfiles + 1, sizeof(*w->files));
	struct ckpt_wfile *f = &w->files[w->nfiles];
	memset(f, 0, sizeof(*f));
	f->fid = -1;
	f->name = xstrdup(name);
	f->display = xasprintf("%s/%s", w->final_dir, name);
	char *path = xasprintf("%s/%s", w->tmp_dir, name);
	/* The afile gives a registered temporary name; HDF5 then writes the
	 * file under that name itself. */
	int r = afile_open(&f->af, path);
	free(path);
	if (r == 0 && (r = afile_finish(&f->af)) == 0) {
		hid_t fapl = h5io_fapl(f->display, 1), fcpl = fapl < 0 ? -1 : h5io_fcpl(f->display);
		if (fcpl < 0 ||
		    H5IO_SET(f->fid, H5Fcreate(f->af.tmp, H5F_ACC_TRUNC, fcpl, fapl), "cannot create '%s'",
			     f->display) ||
		    h5io_put_i64(f->fid, ".", FORMAT_ATTR, CKPT_FORMAT_VERSION, f->display) < 0)
			r = -1;
		h5io_close_quiet(fapl);
		h5io_close_quiet(fcpl);
	}
	if (r < 0) {
		h5io_close_quiet(f->fid);
		afile_abort(&f->af);
		free(f->name);
		free(f->display);
		return wresult(w, -1);
	}
	return (int)w->nfiles++;
}

static int wfile_close(struct ckpt_wfile *f)
{
	hid_t fid = f->fid;
	f->fid = -1;
	if (H5IO_OK(H5Fclose(fid), "cannot close '%s'", f->display))
		return -1;
	return fsync_path(f->af.tmp, f->display);
}

int ckpt_file_close(struct ckpt_writer *w, int file)
{
	return wresult(w, wfile_close(wfile(w, file)));
}

/* Element count of a shape, or -1 after error() when it is negative or its
 * byte size overflows. */
static int64_t shape_count(const char *display, const char *name, int ndim, const int64_t *shape, size_t elem)
{
	if (ndim < 0 || ndim > CKPT_MAX_NDIM)
		return error("'%s': tensor '%s' has %d dimensions (at most %d)", display, name, ndim,
			     CKPT_MAX_NDIM);
	int64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0)
			return error("'%s': tensor '%s' has a negative dimension (%lld)", display, name,
				     (long long)shape[i]);
		if (shape[i] && n > (INT64_MAX / (int64_t)elem) / shape[i])
			return error("'%s': tensor '%s' is too large", display, name);
		n *= shape[i];
	}
	return n;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t len = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (len < n)
		snprintf(buf + len, n - len, "]");
}

/* Rows per checksum block: about CKPT_CRC_BLOCK bytes, at least one row. */
#define CKPT_CRC_BLOCK ((size_t)1 << 20)

static int64_t block_rows(size_t row_bytes)
{
	return row_bytes >= CKPT_CRC_BLOCK ? 1 : (int64_t)(CKPT_CRC_BLOCK / row_bytes);
}

/* A CRC per block of rows ("crc32_blocks", "crc32_block_rows" rows each), so
 * that a reader taking some rows (its tensor-parallel slice) verifies what
 * it read without reading the rest. */
static int put_block_crcs(struct ckpt_writer *w, struct ckpt_wfile *f, const char *name, size_t elem, int ndim,
			  const int64_t *shape, int64_t count, const void *data)
{
	if (ndim < 1 || count <= 0)
		return 0;
	size_t row = (size_t)(count / shape[0]) * elem;
	int64_t R = block_rows(row), nb = (shape[0] + R - 1) / R;
	uint32_t *crcs = xmalloc((size_t)nb * sizeof(uint32_t));
	for (int64_t b = 0; b < nb; b++) {
		int64_t rows = shape[0] - b * R < R ? shape[0] - b * R : R;
		crcs[b] = h5io_crc32(&w->crc, 0, (const char *)data + (size_t)(b * R) * row, (size_t)rows * row);
	}
	int r = h5io_put_i64(f->fid, name, "crc32_block_rows", R, f->display) < 0 ||
			h5io_put_u32_array(f->fid, name, "crc32_blocks", crcs, (size_t)nb, f->display) < 0 ?
		-1 : 0;
	free(crcs);
	return r;
}

static int put_tensor(struct ckpt_writer *w, struct ckpt_wfile *f, const char *name, enum ckpt_dtype dt, int ndim,
		      const int64_t *shape, const void *data)
{
	check_dtype(dt);
	if (!h5io_valid_path(name))
		return error("'%s': invalid tensor name '%s'", f->display, name ? name : "");
	size_t elem = ckpt_dtype_size(dt);
	int64_t count = shape_count(f->display, name, ndim, shape, elem);
	if (count < 0)
		return -1;
	int ex = h5io_exists(f->fid, name, H5I_BADID, f->display);
	if (ex != 0)
		return ex < 0 ? -1 : error("'%s': tensor '%s' is stored twice", f->display, name);
	if (h5io_make_parents(f->fid, name, f->display) < 0)
		return -1;

	hsize_t dims[CKPT_MAX_NDIM];
	for (int i = 0; i < ndim; i++)
		dims[i] = (hsize_t)shape[i];
	hid_t type = dtype_h5type(dt), space = -1, dcpl = -1, dset = -1;
	int r = -1;
	if (H5IO_SET(space, ndim ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR),
		     "cannot store tensor '%s' in '%s'", name, f->display) ||
	    (dcpl = h5io_dcpl(f->display)) < 0 ||
	    H5IO_SET(dset, H5Dcreate2(f->fid, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
		     "cannot create tensor '%s' in '%s'", name, f->display))
		goto out;
	/* An empty dataset gets no storage at all; HDF5 is not asked to write
	 * zero bytes from a possibly NULL pointer. */
	if (count > 0 && H5IO_OK(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
				 "cannot write tensor '%s' to '%s'", name, f->display))
		goto out;
	uint32_t crc = count > 0 ? h5io_crc32(&w->crc, 0, data, (size_t)count * elem) : 0;
	if (h5io_put_str(f->fid, name, "dtype", dtype_names[dt], f->display) < 0 ||
	    h5io_put_u32(f->fid, name, "crc32", crc, f->display) < 0 ||
	    put_block_crcs(w, f, name, elem, ndim, shape, count, data) < 0)
		goto out;
	r = 0;
out:
	if (dset >= 0 && H5IO_OK(H5Dclose(dset), "cannot write tensor '%s' to '%s'", name, f->display))
		r = -1;
	h5io_close_quiet(dcpl);
	h5io_close_quiet(space);
	return r;
}

int ckpt_put_tensor(struct ckpt_writer *w, int file, const char *name, enum ckpt_dtype dt, int ndim,
		    const int64_t *shape, const void *data)
{
	return wresult(w, put_tensor(w, wfile(w, file), name, dt, ndim, shape, data));
}

static int put_link(struct ckpt_wfile *f, const char *name, const char *target_file, const char *target_name)
{
	if (!h5io_valid_path(name))
		return error("'%s': invalid tensor name '%s'", f->display, name ? name : "");
	if (!valid_file_name(target_file) || !strcmp(target_file, f->name))
		return error("'%s': '%s' cannot link to a file named '%s'", f->display, name,
			     target_file ? target_file : "");
	if (!h5io_valid_path(target_name))
		return error("'%s': '%s' cannot link to an object named '%s'", f->display, name,
			     target_name ? target_name : "");
	/* not h5io_exists: that would follow a link of the same name */
	int ex = h5io_link_exists(f->fid, name, f->display);
	if (ex != 0)
		return ex < 0 ? -1 : error("'%s': tensor '%s' is stored twice", f->display, name);
	if (h5io_make_parents(f->fid, name, f->display) < 0)
		return -1;
	char *target = xasprintf("/%s", target_name);
	int r = H5IO_OK(H5Lcreate_external(target_file, target, f->fid, name, H5P_DEFAULT, H5P_DEFAULT),
			"cannot link '%s' in '%s' to '%s' in '%s'", name, f->display, target, target_file);
	free(target);
	return r;
}

int ckpt_put_external_link(struct ckpt_writer *w, int file, const char *name, const char *target_file,
			   const char *target_name)
{
	return wresult(w, put_link(wfile(w, file), name, target_file, target_name));
}

/* The HDF5 object name of obj ("." for the root) after checking it may take
 * the attribute, or NULL after error(). */
static const char *attr_target(struct ckpt_wfile *f, const char *obj, const char *name)
{
	if (!name || !*name) {
		error("'%s': empty attribute name", f->display);
		return NULL;
	}
	if (!obj || !*obj) {
		if (!strcmp(name, FORMAT_ATTR)) {
			error("'%s': attribute name '%s' is reserved", f->display, name);
			return NULL;
		}
		return ".";
	}
	if (!h5io_valid_path(obj)) {
		error("'%s': invalid object name '%s'", f->display, obj);
		return NULL;
	}
	int ex = h5io_exists(f->fid, obj, H5I_BADID, f->display);
	if (ex <= 0) {
		if (ex == 0)
			error("'%s': cannot set attribute '%s' of '%s': no such tensor or group", f->display, name,
			      obj);
		return NULL;
	}
	if (!strcmp(name, "dtype") || !strcmp(name, "crc32") || !strcmp(name, "crc32_block_rows") ||
	    !strcmp(name, "crc32_blocks")) {
		error("'%s': attribute name '%s' is reserved on tensors", f->display, name);
		return NULL;
	}
	return obj;
}

int ckpt_put_attr_i64(struct ckpt_writer *w, int file, const char *obj, const char *name, int64_t v)
{
	struct ckpt_wfile *f = wfile(w, file);
	const char *o = attr_target(f, obj, name);
	return wresult(w, o ? h5io_put_i64(f->fid, o, name, v, f->display) : -1);
}

int ckpt_put_attr_f64(struct ckpt_writer *w, int file, const char *obj, const char *name, double v)
{
	struct ckpt_wfile *f = wfile(w, file);
	const char *o = attr_target(f, obj, name);
	return wresult(w, o ? h5io_put_f64(f->fid, o, name, v, f->display) : -1);
}

int ckpt_put_attr_str(struct ckpt_writer *w, int file, const char *obj, const char *name, const char *v)
{
	struct ckpt_wfile *f = wfile(w, file);
	const char *o = attr_target(f, obj, name);
	if (o && !v)
		BUG("NULL string for attribute '%s' of '%s'", name, f->display);
	return wresult(w, o ? h5io_put_str(f->fid, o, name, v, f->display) : -1);
}

static void free_writer(struct ckpt_writer *w)
{
	for (size_t i = 0; i < w->nfiles; i++) {
		h5io_close_quiet(w->files[i].fid);
		afile_abort(&w->files[i].af); /* unlinks it unless published */
		free(w->files[i].name);
		free(w->files[i].display);
	}
	free(w->files);
	free(w->save_dir);
	free(w->name);
	free(w->final_dir);
	free(w->tmp_dir);
	free(w);
}

void ckpt_abort(struct ckpt_writer *w)
{
	if (!w)
		return;
	if (w->part)
		BUG("ckpt_abort on a part of a transaction (ckpt_part_abort)");
	for (size_t i = 0; i < w->nfiles; i++) {
		h5io_close_quiet(w->files[i].fid);
		w->files[i].fid = -1;
	}
	if (remove_tree(w->tmp_dir) < 0)
		warning("the incomplete checkpoint '%s' is left behind", w->tmp_dir);
	free_writer(w);
}

/*
 * Put the finished transaction directory in place of <save>/<name>. When
 * that exists, it is swapped with the transaction in one renameat2
 * (RENAME_EXCHANGE), so <save>/<name> is a complete checkpoint at every
 * moment; *old then names the directory holding the replaced one, for the
 * caller to delete. File systems without the exchange get two renames with
 * the old one moved aside first (a crash between them leaves it there,
 * complete, under a dot-name).
 */
static int install_dir(struct ckpt_writer *w, char **old)
{
	*old = NULL;
	if (rename(w->tmp_dir, w->final_dir) == 0)
		return 0;
	if (errno != ENOTEMPTY && errno != EEXIST)
		return error_errno("cannot rename '%s' to '%s'", w->tmp_dir, w->final_dir);
#ifdef RENAME_EXCHANGE
	if (renameat2(AT_FDCWD, w->tmp_dir, AT_FDCWD, w->final_dir, RENAME_EXCHANGE) == 0) {
		*old = xstrdup(w->tmp_dir);
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
		return error_errno("cannot replace '%s' with '%s'", w->final_dir, w->tmp_dir);
#endif
	char *aside = make_unique_dir(w->save_dir, w->name, "old");
	if (!aside)
		return -1;
	/* rename(2) replaces the empty directory just made, atomically. */
	if (rename(w->final_dir, aside) < 0) {
		error_errno("cannot move '%s' aside to '%s'", w->final_dir, aside);
		rmdir(aside);
		free(aside);
		return -1;
	}
	if (rename(w->tmp_dir, w->final_dir) < 0) {
		error_errno("cannot rename '%s' to '%s'", w->tmp_dir, w->final_dir);
		if (rename(aside, w->final_dir) < 0)
			warning("the previous '%s' is now '%s'", w->final_dir, aside);
		free(aside);
		return -1;
	}
	*old = aside;
	return 0;
}

static int write_tracker(const char *save_dir, int64_t iteration)
{
	char *path = xasprintf("%s/%s", save_dir, TRACKER);
	struct afile af;
	int r = afile_open(&af, path);
	free(path);
	if (r < 0)
		return -1;
	/* Megatron's text: the number (or "release") and no newline. */
	if (iteration == CKPT_RELEASE)
		fputs("release", af.fp);
	else
		fprintf(af.fp, "%lld", (long long)iteration);
	if (afile_commit(&af) < 0) {
		afile_abort(&af);
		return -1;
	}
	return 0;
}

int ckpt_commit(struct ckpt_writer *w)
{
	if (!w)
		BUG("checkpoint writer is NULL");
	if (w->part)
		BUG("ckpt_commit on a part of a transaction (ckpt_part_finish)");
	if (w->failed) {
		error("not saving the checkpoint '%s': writing it failed (see above)", w->final_dir);
		goto abort;
	}
	for (size_t i = 0; i < w->nfiles; i++)
		if (w->files[i].fid >= 0 && wfile_close(&w->files[i]) < 0)
			goto abort;
	/* Each file gets its final name inside the transaction (afile_publish
	 * fsyncs the directory after each rename). */
	for (size_t i = 0; i < w->nfiles; i++)
		if (afile_publish(&w->files[i].af) < 0)
			goto abort;
	/* the writer's record goes: the directory is complete */
	char *wf = xasprintf("%s/%s", w->tmp_dir, WRITER_FILE);
	if (unlink(wf) < 0 && errno != ENOENT)
		warning("could not delete '%s': %s", wf, strerror(errno));
	free(wf);
	if (fsync_dir(w->tmp_dir) < 0)
		goto abort;

	char *old;
	if (install_dir(w, &old) < 0)
		goto abort;
	/* From here on the new checkpoint is in place; a failure below leaves
	 * it valid but possibly not yet named by the tracker. */
	int r = fsync_dir(w->save_dir);
	if (old && remove_tree(old) < 0)
		warning("could not delete the replaced checkpoint, now '%s'", old);
	free(old);
	if (r == 0)
		r = write_tracker(w->save_dir, w->iteration);
	if (r < 0)
		error("checkpoint '%s' is written but '%s/%s' was not updated", w->final_dir, w->save_dir, TRACKER);
	free_writer(w);
	return r;

abort:
	ckpt_abort(w);
	return -1;
}

void ckpt_part_abort(struct ckpt_writer *w)
{
	if (!w)
		return;
	if (!w->part)
		BUG("ckpt_part_abort on the transaction's own writer (ckpt_abort)");
	for (size_t i = 0; i < w->nfiles; i++) {
		struct ckpt_wfile *f = &w->files[i];
		h5io_close_quiet(f->fid);
		f->fid = -1;
		if (f->published) {
			char *p = xasprintf("%s/%s", w->tmp_dir, f->name);
			if (unlink(p) < 0 && errno != ENOENT)
				warning("could not delete '%s': %s", p, strerror(errno));
			free(p);
		}
	}
	free_writer(w); /* unlinks the files still under temporary names */
}

int ckpt_part_finish(struct ckpt_writer *w)
{
	if (!w)
		BUG("checkpoint writer is NULL");
	if (!w->part)
		BUG("ckpt_part_finish on the transaction's own writer (ckpt_commit)");
	if (w->failed) {
		error("not keeping the files written for '%s': writing them failed (see above)", w->final_dir);
		goto abort;
	}
	for (size_t i = 0; i < w->nfiles; i++)
		if (w->files[i].fid >= 0 && wfile_close(&w->files[i]) < 0)
			goto abort;
	/* the final names, inside the still hidden directory (afile_publish
	 * fsyncs the directory after each rename) */
	for (size_t i = 0; i < w->nfiles; i++) {
		int r = afile_publish(&w->files[i].af);
		w->files[i].published = !w->files[i].af.tmp; /* renamed, even if the fsync failed */
		if (r < 0)
			goto abort;
	}
	free_writer(w);
	return 0;
abort:
	ckpt_part_abort(w);
	return -1;
}

/* ---- tracker ---------------------------------------------------------------- */

int ckpt_latest(const char *dir, int64_t *iteration)
{
	char *path = xasprintf("%s/%s", dir, TRACKER);
	int r = -1;
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		if (errno == ENOENT || errno == ENOTDIR)
			r = 1; /* Megatron: no tracker, no checkpoint (start from scratch) */
		else
			error_errno("cannot open '%s'", path);
		free(path);
		return r;
	}
	char buf[64];
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	int bad_read = ferror(fp);
	int too_long = n == sizeof(buf) - 1 && fgetc(fp) != EOF;
	fclose(fp);
	if (bad_read) {
		error_errno("cannot read '%s'", path);
		goto out;
	}
	buf[n] = 0;
	/* what is there, printable and short, before the trim below changes it */
	char shown[80] = "";
	size_t k = 0;
	for (char *p = buf; p < buf + n && k + 5 < sizeof(shown); p++)
		k += (size_t)snprintf(shown + k, sizeof(shown) - k, (*p >= 0x20 && *p < 0x7f) ? "%c" : "\\x%02x",
				      (unsigned char)*p);
	char *s = buf, *e = buf + n;
	while (s < e && strchr(" \t\r\n", *s))
		s++;
	while (e > s && strchr(" \t\r\n", e[-1]))
		*--e = 0;
	if (!too_long && (size_t)(e - s) == strlen(s)) { /* no NUL bytes inside */
		if (!strcmp(s, "release")) {
			*iteration = CKPT_RELEASE;
			r = 0;
		} else if (s < e && strspn(s, "0123456789") == (size_t)(e - s) && e - s <= 18) {
			*iteration = strtoll(s, NULL, 10);
			r = 0;
		}
	}
	if (r < 0 && n == 0)
		error("'%s' is empty: expected an iteration number or 'release' (write the iteration to load "
		      "into it, or remove it to load the newest iteration directory)", path);
	else if (r < 0)
		error("'%s': expected an iteration number or 'release', found \"%s\"%s", path, shown,
		      too_long || k + 5 >= sizeof(shown) ? "..." : "");
out:
	free(path);
	return r;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

int ckpt_iterations(const char *dir, int64_t **its, size_t *n)
{
	*its = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return error_errno("cannot list checkpoint directory '%s'", dir);
	size_t cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		/* "iter_" and 7 digits, or more without a leading zero (iter_name) */
		const char *s = e->d_name;
		size_t nd = strlen(s + 5);
		if (strncmp(s, "iter_", 5) || nd < 7 || nd > 18 || strspn(s + 5, "0123456789") != nd ||
		    (nd > 7 && s[5] == '0'))
			continue;
		xgrow(its, &cap, *n + 1, sizeof(**its));
		(*its)[(*n)++] = strtoll(s + 5, NULL, 10);
	}
	closedir(d);
	if (*n)
		qsort(*its, *n, sizeof(**its), cmp_i64);
	return 0;
}

int ckpt_prune(const char *dir, int keep)
{
	if (keep < 1)
		BUG("ckpt_prune keeping %d iterations", keep);
	int64_t latest = CKPT_RELEASE - 1, *its;
	size_t n;
	if (ckpt_latest(dir, &latest) < 0 || ckpt_iterations(dir, &its, &n) < 0)
		return -1;
	/* iterations past the tracker's (an abandoned run's, after a resume from
	 * an older one) are neither counted nor touched */
	size_t m = 0;
	while (m < n && (latest < 0 || its[m] <= latest))
		m++;
	int gone = 0, ret = 0;
	for (size_t i = 0; m > (size_t)keep && i < m - (size_t)keep; i++) {
		if (its[i] == latest)
			continue;
		char *p = ckpt_iter_path(dir, its[i]);
		if (remove_tree(p) < 0)
			ret = -1;
		else
			gone++;
		free(p);
	}
	free(its);
	if (gone && fsync_path(dir, dir) < 0)
		ret = -1;
	return ret < 0 ? -1 : gone;
}

/* ---- reader ------------------------------------------------------------------ */

struct ckpt_rfile {
	char *name;
	char *path; /* "<dir>/iter_0000500/model.h5" */
	hid_t fid;
	bool has_iteration; /* its root attribute "iteration" */
	int64_t iteration;
};

struct ckpt_reader {
	char *dir; /* "<dir>/iter_0000500" */
	int64_t iteration; /* or CKPT_RELEASE */
	struct ckpt_rfile *files;
	size_t nfiles, cap;
	struct h5io_crc32 crc;
};

int ckpt_newest(const char *dir, int64_t *iteration)
{
	int64_t *its;
	size_t n;
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || ckpt_iterations(dir, &its, &n) < 0 || !n)
		return 1;
	*iteration = its[n - 1];
	free(its);
	return 0;
}

struct ckpt_reader *ckpt_open_latest(const char *dir, int64_t *iteration)
{
	ckpt_sweep(dir, false);
	int k = ckpt_latest(dir, iteration);
	if (k > 0 && ckpt_newest(dir, iteration) == 0) {
		warning("'%s' has no %s, but iteration directories: reading the newest, iteration %lld", dir, TRACKER,
			(long long)*iteration);
		k = 0;
	} else if (k > 0) {
		struct stat st;
		const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
		if (stat(dir, &st) < 0)
			error_errno("cannot read the checkpoint folder '%s'", dir);
		else
			error("'%s' has no %s and no iteration directories (no checkpoint there%s)", dir, TRACKER,
			      !strncmp(base, "iter_", 5) || !strcmp(base, "release") ?
				      "; it looks like one iteration's directory: give the folder that holds it" : "");
	}
	return k == 0 ? ckpt_open(dir, *iteration) : NULL;
}

struct ckpt_reader *ckpt_open(const char *dir, int64_t iteration)
{
	if (!valid_iteration(iteration)) {
		error("cannot load a checkpoint of iteration %lld from '%s'", (long long)iteration, dir);
		return NULL;
	}
	char *path = ckpt_iter_path(dir, iteration);
	struct stat st;
	errno = 0;
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (errno == ENOENT)
			error("'%s': no such checkpoint directory", path);
		else if (errno)
			error_errno("cannot open checkpoint directory '%s'", path);
		else
			error("'%s' is not a directory", path);
		free(path);
		return NULL;
	}
	h5io_init();
	struct ckpt_reader *r = xcalloc(1, sizeof(*r));
	r->dir = path;
	r->iteration = iteration;
	h5io_crc32_init(&r->crc);
	return r;
}

const char *ckpt_reader_dir(const struct ckpt_reader *r)
{
	return r->dir;
}

int ckpt_check_iteration(struct ckpt_reader *r)
{
	if (r->iteration == CKPT_RELEASE)
		return 0;
	for (size_t i = 0; i < r->nfiles; i++)
		if (r->files[i].has_iteration && r->files[i].iteration != r->iteration)
			return error("'%s' records iteration %lld but lies in the directory of iteration %lld ('%s'): it "
				     "was copied in from another checkpoint", r->files[i].path,
				     (long long)r->files[i].iteration, (long long)r->iteration, r->dir);
	return 0;
}

static struct ckpt_rfile *rfile(struct ckpt_reader *r, int file)
{
	if (!r)
		BUG("checkpoint reader is NULL");
	if (file < 0 || (size_t)file >= r->nfiles)
		BUG("invalid checkpoint file handle %d", file);
	return &r->files[file];
}

int ckpt_file_open(struct ckpt_reader *r, const char *name)
{
	if (!valid_file_name(name))
		return error("'%s': invalid checkpoint file name '%s'", r->dir, name ? name : "");
	for (size_t i = 0; i < r->nfiles; i++)
		if (!strcmp(r->files[i].name, name))
			return (int)i;
	char *path = xasprintf("%s/%s", r->dir, name);
	struct stat st;
	errno = 0;
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (errno == ENOENT)
			error("'%s': no such file in the checkpoint", path);
		else if (errno)
			error_errno("cannot open '%s'", path);
		else
			error("'%s' is not a regular file", path);
		free(path);
		return -1;
	}
	hid_t fapl = h5io_fapl(path, 0), fid = -1;
	int64_t version = 0;
	int has;
	if (fapl < 0 ||
	    H5IO_SET(fid, H5Fopen(path, H5F_ACC_RDONLY, fapl), "'%s': not a readable HDF5 file (truncated or corrupt?)",
		     path) ||
	    (has = h5io_has_attr(fid, ".", FORMAT_ATTR, path)) < 0 ||
	    (has && h5io_get_i64(fid, ".", FORMAT_ATTR, &version, path) < 0))
		goto fail;
	if (version > CKPT_FORMAT_VERSION) {
		error("'%s' is in checkpoint format version %lld; this megac reads versions up to %d", path,
		      (long long)version, CKPT_FORMAT_VERSION);
		goto fail;
	}
	/* The iteration the file records, when it does (every file train
	 * writes): files of one checkpoint agree on it, so a file copied in
	 * from another iteration is caught before anything is read from it. */
	int64_t it = 0;
	if ((has = h5io_has_attr(fid, ".", "iteration", path)) < 0 ||
	    (has && h5io_get_i64(fid, ".", "iteration", &it, path) < 0))
		goto fail;
	for (size_t i = 0; has && i < r->nfiles; i++)
		if (r->files[i].has_iteration && r->files[i].iteration != it) {
			error("'%s' records iteration %lld but '%s' records iteration %lld: the files of one checkpoint "
			      "come from different saves (one was copied in from another checkpoint)", r->files[i].path,
			      (long long)r->files[i].iteration, path, (long long)it);
			goto fail;
		}
	h5io_close_quiet(fapl);
	xgrow(&r->files, &r->cap, r->nfiles + 1, sizeof(*r->files));
	r->files[r->nfiles] = (struct ckpt_rfile){ xstrdup(name), path, fid, has != 0, it };
	return (int)r->nfiles++;
fail:
	h5io_close_quiet(fid);
	h5io_close_quiet(fapl);
	free(path);
	return -1;
}

/*
 * Where an object named in a file lives: there, or, when the name is an
 * external link (ckpt_put_external_link: another pipeline stage's tensor),
 * in the file the link names. That file is opened by ckpt_file_open from
 * this checkpoint's directory, so it is found wherever the directory has
 * been moved, its format version is checked, and it stays open for the
 * next tensor. (HDF5's own traversal, which h5py uses, finds the same file,
 * but tries $HDF5_EXT_PREFIX and the link-access prefix first.) The link's
 * file must be a plain file name of the directory, and its target must not
 * be a link again.
 */
struct where {
	int file;        /* the file holding the object */
	const char *obj; /* its name there: the name asked for, or owned */
	char *owned;
};

static int locate(struct ckpt_reader *r, int file, const char *name, struct where *w)
{
	w->file = file;
	w->obj = name;
	w->owned = NULL;
	char *tf, *to;
	struct ckpt_rfile *f = rfile(r, file);
	int k = h5io_external_link(f->fid, name, &tf, &to, f->path);
	if (k <= 0)
		return k;
	char *from = xstrdup(f->path); /* f moves when ckpt_file_open grows r->files */
	const char *t = to;
	while (*t == '/')
		t++;
	int h = -1, ret = -1;
	if (!valid_file_name(tf) || !h5io_valid_path(t)) {
		error("'%s': '%s' is a link to '%s' in '%s', which is not an object of a file in the checkpoint "
		      "directory", from, name, to, tf);
	} else if ((h = ckpt_file_open(r, tf)) < 0) {
		error("'%s': '%s' is stored in '%s' (an external link), which cannot be read", from, name, tf);
	} else {
		char *tf2, *to2;
		struct ckpt_rfile *g = rfile(r, h);
		int again = h5io_external_link(g->fid, t, &tf2, &to2, g->path);
		if (again > 0) {
			error("'%s': '%s' links to '%s' in '%s', which is a link again", from, name, t, tf);
			free(tf2);
			free(to2);
		} else if (again == 0) {
			w->file = h;
			w->owned = xstrdup(t);
			w->obj = w->owned;
			ret = 0;
		}
	}
	free(from);
	free(tf);
	free(to);
	return ret;
}

/* 1 when the object w locates is a dataset, 0 when there is none, -1. A
 * link to nothing is an error. */
static int where_dataset(struct ckpt_reader *r, int file, const char *name, const struct where *w)
{
	struct ckpt_rfile *f = rfile(r, w->file);
	int ex = h5io_exists(f->fid, w->obj, H5I_DATASET, f->path);
	if (ex == 0 && w->file != file) {
		error("'%s': '%s' links to '%s' in '%s', which has no such tensor", rfile(r, file)->path, name,
		      w->obj, f->path);
		return -1;
	}
	return ex;
}

int ckpt_has_tensor(struct ckpt_reader *r, int file, const char *name)
{
	struct ckpt_rfile *f = rfile(r, file);
	if (!h5io_valid_path(name))
		return error("'%s': invalid tensor name '%s'", f->path, name ? name : "");
	struct where w;
	if (locate(r, file, name, &w) < 0)
		return -1;
	int ex = where_dataset(r, file, name, &w);
	free(w.owned);
	return ex;
}

int ckpt_list_tensors(struct ckpt_reader *r, int file, char ***names, size_t *n)
{
	struct ckpt_rfile *f = rfile(r, file);
	return h5io_list_tensors(f->fid, names, n, f->path);
}

int ckpt_list_attrs(struct ckpt_reader *r, int file, char ***names, char **kinds, size_t *n)
{
	struct ckpt_rfile *f = rfile(r, file);
	return h5io_list_attrs(f->fid, names, kinds, n, f->path);
}

void ckpt_free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Open tensor `name` of file (following an external link: *w says where
 * it is, free w->owned after use) and find its dtype and shape. *dt is
 * CKPT_NDTYPES for a type we do not read, described in found[]. Returns the
 * dataset or -1 after error() (a missing tensor included). */
static hid_t open_tensor(struct ckpt_reader *r, int file, const char *name, struct where *w, int *dt, int *ndim,
			 int64_t *shape, char *found, size_t nfound)
{
	w->owned = NULL;
	if (!h5io_valid_path(name))
		return error("'%s': invalid tensor name '%s'", rfile(r, file)->path, name ? name : "");
	if (locate(r, file, name, w) < 0)
		return -1;
	int ex = where_dataset(r, file, name, w);
	if (ex <= 0) {
		if (ex == 0)
			error("'%s': no tensor '%s'", rfile(r, file)->path, name);
		return -1;
	}
	/* from here on f and name are where the data and its attributes are */
	struct ckpt_rfile *f = rfile(r, w->file);
	name = w->obj;
	hid_t d = -1, type = -1, space = -1;
	int n;
	char *attr = NULL;
	if (H5IO_SET(d, H5Dopen2(f->fid, name, H5P_DEFAULT), "cannot open tensor '%s' in '%s'", name, f->path) ||
	    H5IO_SET(type, H5Dget_type(d), "cannot read tensor '%s' in '%s'", name, f->path) ||
	    H5IO_SET(space, H5Dget_space(d), "cannot read tensor '%s' in '%s'", name, f->path) ||
	    H5IO_SET(n, H5Sget_simple_extent_ndims(space), "cannot read tensor '%s' in '%s'", name, f->path))
		goto fail;
	if (n > CKPT_MAX_NDIM) {
		error("'%s': tensor '%s' has %d dimensions (at most %d)", f->path, name, n, CKPT_MAX_NDIM);
		goto fail;
	}
	hsize_t dims[CKPT_MAX_NDIM];
	if (H5IO_OK(H5Sget_simple_extent_dims(space, dims, NULL), "cannot read tensor '%s' in '%s'", name, f->path))
		goto fail;
	*ndim = n;
	for (int i = 0; i < n; i++)
		shape[i] = (int64_t)dims[i];

	/* Which dtype the storage type can be. */
	H5T_class_t cls = H5Tget_class(type);
	size_t size = H5Tget_size(type);
	int le = H5Tget_order(type) == H5T_ORDER_LE;
	int sgn = cls == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_2;
	int is_f32 = cls == H5T_FLOAT && size == 4 && le;
	int is_u16 = cls == H5T_INTEGER && size == 2 && le && !sgn;
	int is_i64 = cls == H5T_INTEGER && size == 8 && le && sgn;
	char tname[64];
	h5io_type_name(type, tname, sizeof(tname));

	int has = h5io_has_attr(f->fid, name, "dtype", f->path);
	if (has < 0 || (has && h5io_get_str(f->fid, name, "dtype", &attr, f->path) < 0))
		goto fail;
	*dt = CKPT_NDTYPES;
	if (attr) {
		for (int i = 0; i < CKPT_NDTYPES; i++)
			if (!strcmp(attr, dtype_names[i]))
				*dt = i;
		if (*dt == CKPT_NDTYPES) {
			snprintf(found, nfound, "'%s' (dtype attribute)", attr);
		} else if (!(*dt == CKPT_F32 ? is_f32 : *dt == CKPT_I64 ? is_i64 : is_u16)) {
			error("'%s': tensor '%s' says dtype '%s' but is stored as %s", f->path, name, attr, tname);
			goto fail;
		} else {
			snprintf(found, nfound, "%s", attr);
		}
	} else {
		/* Written by another tool: the storage type alone decides, and
		 * 16-bit floats cannot be told apart without the attribute. */
		*dt = is_f32 ? CKPT_F32 : is_i64 ? CKPT_I64 : CKPT_NDTYPES;
		snprintf(found, nfound, "%s%s", tname, is_u16 ? " without a dtype attribute" : "");
	}
	free(attr);
	H5Tclose(type);
	H5Sclose(space);
	return d;
fail:
	free(attr);
	h5io_close_quiet(type);
	h5io_close_quiet(space);
	h5io_close_quiet(d);
	return -1;
}

int ckpt_tensor_info(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype *dt, int *ndim,
		     int64_t *shape)
{
	char found[96];
	int t;
	struct where w;
	hid_t d = open_tensor(r, file, name, &w, &t, ndim, shape, found, sizeof(found));
	int ret = d < 0 ? -1 : 0;
	if (d >= 0) {
		H5Dclose(d);
		if (t == CKPT_NDTYPES)
			ret = error("'%s': tensor '%s' is %s, not a checkpoint dtype", rfile(r, w.file)->path, w.obj,
				    found);
		else
			*dt = (enum ckpt_dtype)t;
	}
	free(w.owned);
	return ret;
}

/* Open the dataset behind name (following a stage file's link) and check it
 * holds dt at the given shape; *f is the file holding the data, which the
 * messages name. The dataset, or -1 after error(); the caller frees
 * w->owned either way. */
static hid_t open_expected(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype dt, int ndim,
			   const int64_t *shape, struct where *w, struct ckpt_rfile **f)
{
	char found[96];
	int got_dt, got_ndim;
	int64_t got[CKPT_MAX_NDIM];
	hid_t d = open_tensor(r, file, name, w, &got_dt, &got_ndim, got, found, sizeof(found));
	if (d < 0)
		return -1;
	*f = rfile(r, w->file);
	name = w->obj;
	if (got_dt != (int)dt) {
		error("'%s': tensor '%s' is %s, expected %s", (*f)->path, name, found, dtype_names[dt]);
	} else if (got_ndim != ndim || memcmp(got, shape, (size_t)ndim * sizeof(*shape))) {
		char want_s[160], got_s[160];
		format_shape(want_s, sizeof(want_s), ndim, shape);
		format_shape(got_s, sizeof(got_s), got_ndim, got);
		error("'%s': tensor '%s' has shape %s, expected %s", (*f)->path, name, got_s, want_s);
	} else {
		return d;
	}
	H5Dclose(d);
	return -1;
}

int ckpt_get_tensor(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype dt, int ndim,
		    const int64_t *shape, void *out)
{
	check_dtype(dt);
	size_t elem = ckpt_dtype_size(dt);
	int64_t count = shape_count(rfile(r, file)->path, name, ndim, shape, elem);
	if (count < 0)
		return -1;
	struct where w;
	struct ckpt_rfile *f;
	hid_t d = open_expected(r, file, name, dt, ndim, shape, &w, &f);
	if (d < 0) {
		free(w.owned);
		return -1;
	}
	/* messages name the file holding the data (a stage's, for a link) */
	name = w.obj;
	int r_ = -1;
	uint32_t stored;
	if (!h5io_has_attr(f->fid, name, "crc32", f->path)) {
		error("'%s': tensor '%s' has no crc32 attribute, so it cannot be verified", f->path, name);
		goto out;
	}
	if (h5io_get_u32(f->fid, name, "crc32", &stored, f->path) < 0)
		goto out;
	if (count > 0 && H5IO_OK(H5Dread(d, dtype_h5type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
				 "cannot read tensor '%s' from '%s'", name, f->path))
		goto out;
	uint32_t crc = count > 0 ? h5io_crc32(&r->crc, 0, out, (size_t)count * elem) : 0;
	if (crc != stored) {
		error("'%s': tensor '%s' is corrupt: its data has crc32 %08x, the stored checksum is %08x", f->path,
		      name, crc, stored);
		goto out;
	}
	r_ = 0;
out:
	H5Dclose(d);
	free(w.owned);
	return r_;
}

int ckpt_get_tensor_rows(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype dt, int ndim,
			 const int64_t *shape, int64_t row0, int64_t nrows, void *out)
{
	check_dtype(dt);
	if (ndim < 1 || row0 < 0 || nrows < 0 || row0 + nrows > shape[0])
		BUG("rows [%lld, %lld) of a %d-dimensional tensor of %lld rows", (long long)row0,
		    (long long)(row0 + nrows), ndim, ndim ? (long long)shape[0] : 0LL);
	size_t elem = ckpt_dtype_size(dt);
	int64_t count = shape_count(rfile(r, file)->path, name, ndim, shape, elem);
	if (count < 0)
		return -1;
	if (nrows == 0)
		return 0;
	size_t row = (size_t)(count / shape[0]) * elem;
	struct where w;
	struct ckpt_rfile *f;
	const char *asked = name;
	hid_t d = open_expected(r, file, name, dt, ndim, shape, &w, &f);
	if (d < 0) {
		free(w.owned);
		return -1;
	}
	name = w.obj;
	int ret = -1;
	char *buf = NULL;
	uint32_t *crcs = NULL;
	hid_t fspace = -1, mspace = -1;
	int has = h5io_has_attr(f->fid, name, "crc32_blocks", f->path);
	if (has < 0)
		goto out;
	if (!has) { /* an older file: the whole tensor, against its crc32 */
		buf = xmalloc((size_t)count * elem);
		H5Dclose(d);
		d = -1;
		if (ckpt_get_tensor(r, file, asked, dt, ndim, shape, buf) < 0)
			goto out;
		memcpy(out, buf + (size_t)row0 * row, (size_t)nrows * row);
		ret = 0;
		goto out;
	}
	/* the blocks holding the rows, read and verified whole */
	int64_t R, nb = 0;
	if (h5io_get_i64(f->fid, name, "crc32_block_rows", &R, f->path) < 0)
		goto out;
	if (R != block_rows(row)) {
		error("'%s': tensor '%s' has checksum blocks of %lld rows, expected %lld", f->path, name, (long long)R,
		      (long long)block_rows(row));
		goto out;
	}
	nb = (shape[0] + R - 1) / R;
	crcs = xmalloc((size_t)nb * sizeof(uint32_t));
	if (h5io_get_u32_array(f->fid, name, "crc32_blocks", crcs, (size_t)nb, f->path) < 0)
		goto out;
	int64_t b0 = row0 / R, b1 = (row0 + nrows + R - 1) / R;
	int64_t first = b0 * R, last = b1 * R < shape[0] ? b1 * R : shape[0];
	buf = xmalloc((size_t)(last - first) * row);
	hsize_t start[CKPT_MAX_NDIM] = { 0 }, cnt[CKPT_MAX_NDIM];
	for (int i = 0; i < ndim; i++)
		cnt[i] = (hsize_t)shape[i];
	start[0] = (hsize_t)first;
	cnt[0] = (hsize_t)(last - first);
	if (H5IO_SET(fspace, H5Dget_space(d), "cannot read tensor '%s' from '%s'", name, f->path) ||
	    H5IO_OK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, cnt, NULL),
		    "cannot read tensor '%s' from '%s'", name, f->path) ||
	    H5IO_SET(mspace, H5Screate_simple(ndim, cnt, NULL), "cannot read tensor '%s' from '%s'", name, f->path) ||
	    H5IO_OK(H5Dread(d, dtype_h5type(dt), mspace, fspace, H5P_DEFAULT, buf), "cannot read tensor '%s' from '%s'",
		    name, f->path))
		goto out;
	for (int64_t b = b0; b < b1; b++) {
		int64_t rows = shape[0] - b * R < R ? shape[0] - b * R : R;
		uint32_t crc = h5io_crc32(&r->crc, 0, buf + (size_t)((b - b0) * R) * row, (size_t)rows * row);
		if (crc != crcs[b]) {
			error("'%s': tensor '%s' is corrupt: rows %lld-%lld have crc32 %08x, the stored checksum is %08x",
			      f->path, name, (long long)(b * R), (long long)(b * R + rows - 1), crc, crcs[b]);
			goto out;
		}
	}
	memcpy(out, buf + (size_t)(row0 - first) * row, (size_t)nrows * row);
	ret = 0;
out:
	if (mspace >= 0)
		H5Sclose(mspace);
	if (fspace >= 0)
		H5Sclose(fspace);
	if (d >= 0)
		H5Dclose(d);
	free(buf);
	free(crcs);
	free(w.owned);
	return ret;
}

/* Where the attributes of obj are: the root (obj NULL or "") or the object,
 * following an external link; *f is the file holding it. -1 after error()
 * when it does not exist. */
static int attr_source(struct ckpt_reader *r, int file, const char *obj, struct where *w, struct ckpt_rfile **f)
{
	w->file = file;
	w->obj = ".";
	w->owned = NULL;
	*f = rfile(r, file);
	if (!obj || !*obj)
		return 0;
	const char *path = (*f)->path;
	int ex = 0;
	if (h5io_valid_path(obj) && (ex = locate(r, file, obj, w)) == 0) {
		*f = rfile(r, w->file);
		ex = h5io_exists((*f)->fid, w->obj, H5I_BADID, (*f)->path);
	}
	if (ex <= 0) {
		if (ex == 0)
			error("'%s': no tensor or group '%s'", path, obj);
		free(w->owned);
		w->owned = NULL;
		return -1;
	}
	return 0;
}

int ckpt_has_attr(struct ckpt_reader *r, int file, const char *obj, const char *name)
{
	struct where w;
	struct ckpt_rfile *f;
	if (attr_source(r, file, obj, &w, &f) < 0)
		return -1;
	int ret = h5io_has_attr(f->fid, w.obj, name, f->path);
	free(w.owned);
	return ret;
}

int ckpt_get_attr_i64(struct ckpt_reader *r, int file, const char *obj, const char *name, int64_t *v)
{
	struct where w;
	struct ckpt_rfile *f;
	if (attr_source(r, file, obj, &w, &f) < 0)
		return -1;
	int ret = h5io_get_i64(f->fid, w.obj, name, v, f->path);
	free(w.owned);
	return ret;
}

int ckpt_get_attr_f64(struct ckpt_reader *r, int file, const char *obj, const char *name, double *v)
{
	struct where w;
	struct ckpt_rfile *f;
	if (attr_source(r, file, obj, &w, &f) < 0)
		return -1;
	int ret = h5io_get_f64(f->fid, w.obj, name, v, f->path);
	free(w.owned);
	return ret;
}

int ckpt_get_attr_str(struct ckpt_reader *r, int file, const char *obj, const char *name, char **v)
{
	struct where w;
	struct ckpt_rfile *f;
	if (attr_source(r, file, obj, &w, &f) < 0)
		return -1;
	int ret = h5io_get_str(f->fid, w.obj, name, v, f->path);
	free(w.owned);
	return ret;
}

void ckpt_close(struct ckpt_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nfiles; i++) {
		h5io_close_quiet(r->files[i].fid);
		free(r->files[i].name);
		free(r->files[i].path);
	}
	free(r->files);
	free(r->dir);
	free(r);
}
