/*
 * input.c - see input.h. Each input file goes through a decoder (gzip with
 * zlib, the other compressions with libarchive's filters) and one libarchive
 * handle that recognises tar, zip or a plain stream; a tar or zip member is
 * read through the outer handle by a decoder of its own, so a member may
 * itself be compressed. Layers and checks: "reading" below.
 */
#include "input.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------ expanding */

static const char *const data_exts[] = { ".jsonl", ".json", ".ndjson", NULL };
static const char *const comp_exts[] = { "", ".gz", ".zst", ".zstd", ".xz", ".bz2", ".lz4", NULL };
static const char *const archive_exts[] = { ".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".txz",
					    ".tar.bz2", ".tbz2", ".tar.lz4", ".zip", NULL };

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

bool input_is_data_name(const char *name)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (base[0] == '.')
		return false; /* hidden files, macOS "._x" resource forks */
	char buf[64];
	for (int d = 0; data_exts[d]; d++)
		for (int c = 0; comp_exts[c]; c++) {
			snprintf(buf, sizeof(buf), "%s%s", data_exts[d], comp_exts[c]);
			if (ends_with(base, buf))
				return true;
		}
	return false;
}

static bool is_archive_name(const char *name)
{
	for (int i = 0; archive_exts[i]; i++)
		if (ends_with(name, archive_exts[i]))
			return true;
	return false;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void push(struct strlist *l, const char *s)
{
	l->v = xrealloc(l->v, (size_t)(l->n + 1) * sizeof(char *));
	l->v[l->n++] = xstrdup(s);
}

/* The directories being walked, outermost first, to notice symlink loops. */
struct walk_path {
	dev_t dev;
	ino_t ino;
	const struct walk_path *up;
};

static int walk_dir(const char *dir, struct strlist *out, const struct walk_path *up)
{
	struct stat self;
	if (stat(dir, &self) < 0)
		return error_errno("cannot stat '%s'", dir);
	for (const struct walk_path *w = up; w; w = w->up)
		if (w->dev == self.st_dev && w->ino == self.st_ino) {
			warning("skipping '%s': a symbolic link back to a directory being read", dir);
			return 0;
		}
	struct walk_path here = { self.st_dev, self.st_ino, up };
	DIR *d = opendir(dir);
	if (!d)
		return error_errno("cannot read directory '%s'", dir);
	struct strlist names = { NULL, 0 };
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			push(&names, e->d_name);
	closedir(d);
	if (names.n)
		qsort(names.v, (size_t)names.n, sizeof(char *), cmp_str);
	int r = 0;
	for (int i = 0; i < names.n && !r; i++) {
		char *p = xasprintf("%s/%s", dir, names.v[i]);
		struct stat st;
		if (stat(p, &st) < 0)
			r = error_errno("cannot stat '%s'", p);
		else if (S_ISDIR(st.st_mode) && names.v[i][0] != '.')
			r = walk_dir(p, out, &here);
		else if (S_ISREG(st.st_mode) && (input_is_data_name(p) || is_archive_name(p)))
			push(out, p);
		free(p);
	}
	for (int i = 0; i < names.n; i++)
		free(names.v[i]);
	free(names.v);
	return r;
}

static int add_path(const char *p, struct strlist *out)
{
	struct stat st;
	if (!strcmp(p, "-")) {
		push(out, "-");
		return 0;
	}
	if (stat(p, &st) < 0)
		return error_errno("--input '%s'", p);
	if (S_ISDIR(st.st_mode)) {
		int before = out->n;
		if (walk_dir(p, out, NULL) < 0)
			return -1;
		if (out->n == before)
			return error("--input directory '%s' holds no data files (*.jsonl, *.json, *.ndjson, "
				     "optionally compressed, or tar/zip archives)", p);
		return 0;
	}
	push(out, p);
	return 0;
}

int input_expand(const struct strlist *in, struct strlist *files)
{
	files->v = NULL;
	files->n = 0;
	int r = 0;
	for (int i = 0; i < in->n && !r; i++) {
		const char *p = in->v[i];
		struct stat st;
		if (strpbrk(p, "*?[") && stat(p, &st) < 0) {
			glob_t g;
			int gr = glob(p, 0, NULL, &g);
			if (gr == GLOB_NOMATCH) {
				r = error("--input pattern '%s' matches no file", p);
				continue;
			}
			if (gr) {
				r = error("--input pattern '%s' cannot be expanded", p);
				continue;
			}
			for (size_t k = 0; k < g.gl_pathc && !r; k++)
				r = add_path(g.gl_pathv[k], files);
			globfree(&g);
		} else {
			r = add_path(p, files);
		}
	}
	int stdin_uses = 0;
	for (int i = 0; i < files->n; i++)
		stdin_uses += !strcmp(files->v[i], "-");
	if (!r && stdin_uses > 1)
		r = error("--input '-' (standard input) given more than once");
	if (r)
		strlist_free(files);
	return r;
}

/* ------------------------------------------------------------ reading */

/*
 * The layers, for one input file:
 *
 *   fd ──> file decoder ──> outer (libarchive: tar, zip or raw) ──> lines
 *                                 └─ a tar/zip member ──> member decoder ──> lines
 *
 * A decoder turns a byte source into the uncompressed bytes and, at its end,
 * checks that the compressed stream was whole. gzip is decoded here with
 * zlib, which checks every member's CRC-32 and length (libarchive's gzip
 * filter checks neither); bzip2, xz, zstd and lz4 go through libarchive's
 * filters, which check their CRCs and checksums. Bytes after the end of a
 * compressed stream are an error. A regular file that is not compressed is
 * read by the outer archive directly, so that a zip can be read through its
 * central directory (seeking).
 */

/* A byte source: bytes in *buf (> 0), 0 at the end, -1 with err filled in. */
struct input_reader;
typedef la_ssize_t (*src_fn)(struct input_reader *r, const void **buf, char *err, size_t errlen);

#define GZ_OUT (1 << 17)

struct decoder {
	struct input_reader *r;
	src_fn src;
	char *head;               /* bytes read to recognise the format, handed on first */
	size_t head_len;
	bool head_given;
	uint64_t src_bytes;       /* bytes taken from src so far */
	bool src_eof;
	bool done;                /* the end was reached and checked */
	struct archive *la;       /* libarchive's filters (or none), NULL for gzip */
	z_stream z;               /* gzip */
	bool z_init;
	unsigned char *zout;
	bool z_in_member;         /* inside a gzip member (its trailer not yet checked) */
	uint64_t z_member;        /* 1-based number of that member */
	uint64_t z_member_start;  /* its offset in the compressed stream */
	char err[512];
};

struct input_reader {
	char *const *files;
	int n_files;
	size_t chunk_size;
	int stride, pass;
	uint64_t max_line;           /* longest line handed out (bytes before '\n'); 0 = no limit */

	int file;                    /* index of the open file, -1 none */
	const char *shown;           /* its name in messages */
	struct decoder *fdec;        /* the file's decoder; NULL when outer reads the file itself */
	struct archive *outer;       /* the file (tar, zip or one stream) */
	struct decoder *mdec;        /* current member of a tar/zip (NULL for a plain stream) */
	bool multi;                  /* the file is a tar/zip archive */
	int source;                  /* current source index */
	bool eof_entry;              /* current stream exhausted */

	struct sbuf pending;         /* bytes read but not yet cut into lines */
	size_t pending_off;
	size_t scanned;              /* bytes after pending_off known to hold no '\n' */
	bool discarding;             /* dropping the rest of a line longer than max_line */
	uint64_t line_in_source;     /* lines of the current source consumed so far */
	uint64_t corpus_line;        /* lines of the whole corpus consumed so far (this pass) */
	uint64_t first_pass_lines;   /* with a stride: every pass must see as many lines */

	int fd;                      /* the open input file, -1 none */
	bool fd_regular;             /* seekable: lets libarchive skip and seek */
	char *filebuf;
	atomic_int stopped;          /* input_reader_stop(): give up a blocked read */

	struct strlist sources;
	char errmsg[1024];
	uint64_t bytes;
};

#define READ_BLOCK (1 << 16)

struct input_reader *input_reader_new(char *const *files, int n, size_t chunk_size, int stride)
{
	struct input_reader *r = xcalloc(1, sizeof(*r));
	r->files = files;
	r->n_files = n;
	r->chunk_size = chunk_size ? chunk_size : (256 << 10);
	r->stride = stride > 0 ? stride : 1;
	r->file = -1;
	r->source = -1;
	r->fd = -1;
	r->filebuf = xmalloc(READ_BLOCK);
	return r;
}

void input_reader_set_max_line(struct input_reader *r, uint64_t max_bytes)
{
	r->max_line = max_bytes;
}

static int fail(struct input_reader *r, const char *fmt, const char *a, const char *b)
{
	snprintf(r->errmsg, sizeof(r->errmsg), fmt, a, b);
	return -1;
}

static const char *arch_err(struct archive *a)
{
	const char *s = archive_error_string(a);
	return s ? s : "unknown libarchive error";
}

/* ------------------------------------------------------------ decoders */

static int dec_fail(struct decoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int dec_fail(struct decoder *d, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->err, sizeof(d->err), fmt, ap);
	va_end(ap);
	return -1;
}

/* The next bytes of the compressed stream: what recognising it read, then the source. */
static la_ssize_t dec_src(struct decoder *d, const void **buf)
{
	if (!d->head_given) {
		d->head_given = true;
		if (d->head_len) {
			*buf = d->head;
			return (la_ssize_t)d->head_len;
		}
	}
	if (d->src_eof)
		return 0;
	la_ssize_t n = d->src(d->r, buf, d->err, sizeof(d->err));
	if (n == 0)
		d->src_eof = true;
	if (n > 0)
		d->src_bytes += (uint64_t)n;
	return n;
}

static la_ssize_t dec_la_read(struct archive *a, void *ud, const void **buf)
{
	struct decoder *d = ud;
	la_ssize_t n = dec_src(d, buf);
	if (n < 0)
		archive_set_error(a, EIO, "%s", d->err);
	return n;
}

static void dec_free(struct decoder *d)
{
	if (!d)
		return;
	if (d->la)
		archive_read_free(d->la);
	if (d->z_init)
		inflateEnd(&d->z);
	free(d->zout);
	free(d->head);
	free(d);
}

/* The stream ended: nothing may follow it. 0, or -1 with d->err. */
static int dec_end(struct decoder *d)
{
	d->done = true;
	if (archive_filter_count(d->la) < 2)
		return 0; /* not compressed: there is no end to check */
	uint64_t used = (uint64_t)archive_filter_bytes(d->la, -1);
	bool more = d->src_bytes > used;
	if (!more) {
		const void *b;
		la_ssize_t n = dec_src(d, &b);
		if (n < 0)
			return -1;
		more = n > 0;
	}
	if (more)
		return dec_fail(d, "unexpected data after the end of the %s stream (at byte %llu)",
				archive_filter_name(d->la, 0), (unsigned long long)used);
	return 0;
}

/* Recognise the stream. 0 (d->done if it holds nothing at all), -1 with d->err. */
static int dec_open(struct decoder *d)
{
	while (d->head_len < 2 && !d->src_eof) {
		const void *b;
		la_ssize_t n = d->src(d->r, &b, d->err, sizeof(d->err));
		if (n < 0)
			return -1;
		if (n == 0) {
			d->src_eof = true;
			break;
		}
		d->head = xrealloc(d->head, d->head_len + (size_t)n);
		memcpy(d->head + d->head_len, b, (size_t)n);
		d->head_len += (size_t)n;
		d->src_bytes += (uint64_t)n;
	}
	if (d->head_len >= 2 && (unsigned char)d->head[0] == 0x1f && (unsigned char)d->head[1] == 0x8b) {
		if (inflateInit2(&d->z, 16 + MAX_WBITS) != Z_OK)
			return dec_fail(d, "cannot start zlib: %s", d->z.msg ? d->z.msg : "out of memory");
		d->z_init = true;
		d->zout = xmalloc(GZ_OUT);
		d->z_in_member = true;
		d->z_member = 1;
		return 0;
	}
	d->la = archive_read_new();
	/* Named filters, not _all: the uuencode bidder of _all reads up to 128 KB
	 * ahead before deciding, which stalls a slow pipe, and the external-program
	 * filters (lrzip, lzop, ...) would run other programs. No gzip: see above. */
	archive_read_support_filter_bzip2(d->la);
	archive_read_support_filter_xz(d->la);
	archive_read_support_filter_lzma(d->la);
	archive_read_support_filter_zstd(d->la);
	archive_read_support_filter_lz4(d->la);
	archive_read_support_format_raw(d->la);
	archive_read_support_format_empty(d->la);
	struct archive_entry *e;
	if (archive_read_open(d->la, d, NULL, dec_la_read, NULL) != ARCHIVE_OK)
		return dec_fail(d, "%s", arch_err(d->la));
	int h = archive_read_next_header(d->la, &e);
	if (h == ARCHIVE_EOF)
		return dec_end(d);
	if (h != ARCHIVE_OK && h != ARCHIVE_WARN)
		return dec_fail(d, "%s", arch_err(d->la));
	return 0;
}

static struct decoder *dec_new(struct input_reader *r, src_fn src)
{
	struct decoder *d = xcalloc(1, sizeof(*d));
	d->r = r;
	d->src = src;
	return d;
}

/* Not compressed (bytes pass through unchanged)? */
static bool dec_plain(const struct decoder *d)
{
	return d->la && archive_filter_count(d->la) < 2;
}

static int gz_fail(struct decoder *d, int e)
{
	const char *m = d->z.msg ? d->z.msg : zError(e);
	char where[64] = "";
	if (d->z_member > 1)
		snprintf(where, sizeof(where), " in member %llu (at byte %llu)", (unsigned long long)d->z_member,
			 (unsigned long long)d->z_member_start);
	if (d->z_member > 1 && !strcmp(m, "incorrect header check")) /* no gzip magic: not a member */
		return dec_fail(d, "unexpected data after the end of the gzip stream (at byte %llu)",
				(unsigned long long)d->z_member_start);
	if (!strcmp(m, "incorrect data check"))
		return dec_fail(d, "corrupt gzip data: CRC-32 mismatch%s", where);
	if (!strcmp(m, "incorrect length check"))
		return dec_fail(d, "corrupt gzip data: length mismatch%s", where);
	return dec_fail(d, "corrupt gzip data%s: %s", where, m);
}

static int gz_read(struct decoder *d, const void **buf, size_t *size)
{
	for (;;) {
		if (!d->z.avail_in && !d->src_eof) {
			const void *b;
			la_ssize_t n = dec_src(d, &b);
			if (n < 0)
				return -1;
			d->z.next_in = (Bytef *)b;
			d->z.avail_in = (uInt)n;
		}
		if (!d->z.avail_in && d->src_eof) {
			if (d->z_in_member)
				return dec_fail(d, "truncated gzip input");
			d->done = true;
			return 0;
		}
		if (!d->z_in_member) { /* bytes after a whole member: the next member */
			d->z_member++;
			d->z_member_start = d->src_bytes - d->z.avail_in;
			inflateReset(&d->z);
			d->z_in_member = true;
		}
		d->z.next_out = d->zout;
		d->z.avail_out = GZ_OUT;
		int e = inflate(&d->z, Z_NO_FLUSH);
		size_t have = GZ_OUT - d->z.avail_out;
		if (e == Z_STREAM_END)
			d->z_in_member = false; /* its CRC-32 and length matched */
		else if (e != Z_OK && !(e == Z_BUF_ERROR && !d->z.avail_in))
			return gz_fail(d, e);
		if (have) {
			*buf = d->zout;
			*size = have;
			return 1;
		}
	}
}

/* The next uncompressed bytes: 1 (size > 0), 0 at the checked end, -1 with d->err. */
static int dec_read(struct decoder *d, const void **buf, size_t *size)
{
	*size = 0;
	if (d->done)
		return 0;
	if (!d->la)
		return gz_read(d, buf, size);
	for (;;) {
		la_int64_t off;
		int e = archive_read_data_block(d->la, buf, size, &off);
		if (e == ARCHIVE_EOF)
			return dec_end(d) < 0 ? -1 : 0;
		if (e != ARCHIVE_OK)
			return dec_fail(d, "%s", arch_err(d->la));
		if (*size)
			return 1;
	}
}

/* Read a decoder to its end, checking it. 0, or -1 with d->err. */
static int dec_drain(struct decoder *d)
{
	const void *b;
	size_t n;
	int k;
	while ((k = dec_read(d, &b, &n)) > 0)
		;
	return k;
}

/* ------------------------------------------------------------ sources */

static void close_member(struct input_reader *r)
{
	dec_free(r->mdec);
	r->mdec = NULL;
}

static void close_file(struct input_reader *r)
{
	close_member(r);
	if (r->outer) {
		archive_read_free(r->outer);
		r->outer = NULL;
	}
	dec_free(r->fdec);
	r->fdec = NULL;
	if (r->fd > 0)
		close(r->fd);
	r->fd = -1;
}

/*
 * The file is read here rather than by libarchive itself, so that a read
 * blocked on a stalled pipe can be abandoned: this waits in poll() with a
 * timeout and gives up once input_reader_stop() was called (after a bad
 * record, the writer stops the run without waiting for the producer of
 * standard input).
 */
static la_ssize_t fd_src(struct input_reader *r, const void **buf, char *err, size_t errlen)
{
	for (;;) {
		if (atomic_load(&r->stopped)) {
			snprintf(err, errlen, "reading stopped");
			return -1;
		}
		if (!r->fd_regular) {
			struct pollfd pfd = { r->fd, POLLIN, 0 };
			int k = poll(&pfd, 1, 200);
			if (k == 0 || (k < 0 && errno == EINTR))
				continue;
		}
		ssize_t n = read(r->fd, r->filebuf, READ_BLOCK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%s", strerror(errno));
			return -1;
		}
		*buf = r->filebuf;
		return n;
	}
}

/* The current tar/zip member's data, as stored (a member may itself be compressed). */
static la_ssize_t member_src(struct input_reader *r, const void **buf, char *err, size_t errlen)
{
	for (;;) {
		size_t size;
		la_int64_t off;
		int e = archive_read_data_block(r->outer, buf, &size, &off);
		if (e == ARCHIVE_EOF)
			return 0;
		if (e != ARCHIVE_OK) { /* ARCHIVE_WARN too: a zip entry's CRC or size does not match */
			snprintf(err, errlen, "%s", arch_err(r->outer));
			return -1;
		}
		if (size)
			return (la_ssize_t)size;
	}
}

/* libarchive callbacks of the outer archive when it reads the file itself */
static la_ssize_t file_read(struct archive *a, void *ud, const void **buf)
{
	char err[256];
	la_ssize_t n = fd_src(ud, buf, err, sizeof(err));
	if (n < 0)
		archive_set_error(a, EIO, "%s", err);
	return n;
}

static la_int64_t file_skip(struct archive *a, void *ud, la_int64_t n)
{
	struct input_reader *r = ud;
	(void)a;
	if (!r->fd_regular)
		return 0; /* libarchive then reads and discards */
	off_t cur = lseek(r->fd, 0, SEEK_CUR);
	off_t end = lseek(r->fd, 0, SEEK_END);
	if (cur < 0 || end < 0)
		return 0;
	off_t to = cur + n < end ? cur + n : end;
	lseek(r->fd, to, SEEK_SET);
	return to - cur;
}

static la_int64_t file_seek(struct archive *a, void *ud, la_int64_t off, int whence)
{
	struct input_reader *r = ud;
	off_t o = lseek(r->fd, off, whence);
	if (o < 0)
		archive_set_error(a, errno, "%s", strerror(errno));
	return o < 0 ? ARCHIVE_FATAL : o;
}

/* ... and when it reads the file's decoder */
static la_ssize_t fdec_read(struct archive *a, void *ud, const void **buf)
{
	struct input_reader *r = ud;
	size_t n;
	int k = dec_read(r->fdec, buf, &n);
	if (k < 0) {
		archive_set_error(a, EIO, "%s", r->fdec->err);
		return -1;
	}
	return k ? (la_ssize_t)n : 0;
}

/* Open path ("-" = standard input) as r->outer. 0, or -1 with errmsg. */
static int open_outer(struct input_reader *r, const char *path)
{
	r->fd = strcmp(path, "-") ? open(path, O_RDONLY) : 0;
	if (r->fd < 0) {
		snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s", r->shown, strerror(errno));
		return -1;
	}
	struct stat st;
	r->fd_regular = fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode);
	r->fdec = dec_new(r, fd_src);
	if (dec_open(r->fdec) < 0)
		return fail(r, "%s: %s", r->shown, r->fdec->err);
	bool direct = r->fd_regular && dec_plain(r->fdec) && lseek(r->fd, 0, SEEK_SET) == 0;
	if (direct) {
		dec_free(r->fdec);
		r->fdec = NULL;
	}
	r->outer = archive_read_new();
	archive_read_support_format_tar(r->outer);
	archive_read_support_format_zip(r->outer);
	archive_read_support_format_raw(r->outer);
	archive_read_support_format_empty(r->outer);
	archive_read_set_callback_data(r->outer, r);
	if (direct) {
		archive_read_set_read_callback(r->outer, file_read);
		archive_read_set_skip_callback(r->outer, file_skip);
		archive_read_set_seek_callback(r->outer, file_seek);
	} else {
		archive_read_set_read_callback(r->outer, fdec_read);
	}
	if (archive_read_open1(r->outer) != ARCHIVE_OK)
		return fail(r, "%s: %s", r->shown, arch_err(r->outer));
	return 0;
}

/* The file was read to its end: check what follows in its compressed stream. 0 or -1. */
static int finish_file(struct input_reader *r)
{
	if (r->fdec && !dec_plain(r->fdec) && dec_drain(r->fdec) < 0)
		return fail(r, "%s: %s", r->shown, r->fdec->err);
	return 0;
}

void input_reader_stop(struct input_reader *r)
{
	atomic_store(&r->stopped, 1);
}

static void new_source(struct input_reader *r, const char *name)
{
	push(&r->sources, name);
	r->source = r->sources.n - 1;
	r->line_in_source = 0;
	r->eof_entry = false;
	sbuf_reset(&r->pending);
	r->pending_off = 0;
	r->scanned = 0;
	r->discarding = false;
}

/* Open archive member e as the current stream: 1 ready, 0 skipped, -1 error. */
static int open_member(struct input_reader *r, struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e);
	if (archive_entry_filetype(e) != AE_IFREG || !name || !input_is_data_name(name))
		return 0;
	char *src = xasprintf("%s:%s", r->shown, name);
	r->mdec = dec_new(r, member_src);
	if (dec_open(r->mdec) < 0) {
		fail(r, "%s: %s", src, r->mdec->err);
		free(src);
		return -1;
	}
	if (r->mdec->done) { /* an empty member */
		close_member(r);
		free(src);
		return 0;
	}
	new_source(r, src);
	free(src);
	return 1;
}

/* Move to the next stream (file or archive member): 1 ready, 0 no more, -1 error. */
static int next_stream(struct input_reader *r)
{
	for (;;) {
		struct archive_entry *e;
		if (r->outer && r->multi) {
			close_member(r);
			int h = archive_read_next_header(r->outer, &e);
			if (h == ARCHIVE_EOF) {
				if (finish_file(r) < 0)
					return -1;
				close_file(r);
				continue;
			}
			if (h != ARCHIVE_OK && h != ARCHIVE_WARN)
				return fail(r, "%s: %s", r->shown, arch_err(r->outer));
			int k = open_member(r, e);
			if (k)
				return k;
			continue;
		}
		if (r->outer) { /* a plain stream that ended */
			if (finish_file(r) < 0)
				return -1;
			close_file(r);
			continue;
		}
		if (r->file + 1 >= r->n_files) {
			if (r->pass == 0)
				r->first_pass_lines = r->corpus_line;
			else if (r->corpus_line != r->first_pass_lines) {
				snprintf(r->errmsg, sizeof(r->errmsg),
					 "the input changed between passes: pass 1 read %llu lines, pass %d read %llu "
					 "(--partitions reads every input once per partition)",
					 (unsigned long long)r->first_pass_lines, r->pass + 1,
					 (unsigned long long)r->corpus_line);
				return -1;
			}
			if (r->pass + 1 >= r->stride)
				return 0;
			r->pass++;
			r->file = -1;
			r->corpus_line = 0;
		}
		r->file++;
		const char *path = r->files[r->file];
		bool is_stdin = !strcmp(path, "-");
		r->shown = is_stdin ? "standard input" : path;
		if (open_outer(r, path) < 0)
			return -1;
		int h = archive_read_next_header(r->outer, &e);
		if (h == ARCHIVE_EOF) { /* an empty file */
			if (finish_file(r) < 0)
				return -1;
			close_file(r);
			continue;
		}
		if (h != ARCHIVE_OK && h != ARCHIVE_WARN)
			return fail(r, "%s: %s", r->shown, arch_err(r->outer));
		int fmt = archive_format(r->outer) & ARCHIVE_FORMAT_BASE_MASK;
		r->multi = fmt == ARCHIVE_FORMAT_TAR || fmt == ARCHIVE_FORMAT_ZIP;
		if (r->multi) {
			int k = open_member(r, e);
			if (k)
				return k;
			continue;
		}
		new_source(r, is_stdin ? "<stdin>" : path);
		return 1;
	}
}

/* Would reading the input now wait for its producer? (never for files) */
static bool would_block(const struct input_reader *r)
{
	if (r->fd_regular || r->fd < 0)
		return false;
	struct pollfd pfd = { r->fd, POLLIN, 0 };
	return poll(&pfd, 1, 0) == 0;
}

/* Read more of the current stream into pending: >0 bytes, 0 end, -1 error. */
static int read_more(struct input_reader *r)
{
	if (r->pending_off) { /* keep only the unfinished line */
		size_t rest = r->pending.len - r->pending_off;
		memmove(r->pending.buf, r->pending.buf + r->pending_off, rest);
		r->pending.len = rest;
		r->pending_off = 0;
	}
	/* block-wise: archive_read_data() would insist on filling its buffer,
	 * waiting on a slow pipe for data the chunk does not need yet */
	const void *block;
	size_t size = 0;
	if (r->mdec) {
		int k = dec_read(r->mdec, &block, &size);
		if (k < 0) {
			snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s (after line %llu)", r->sources.v[r->source],
				 r->mdec->err, (unsigned long long)r->line_in_source);
			return -1;
		}
		if (k == 0)
			return 0;
	} else {
		la_int64_t offset;
		int e = archive_read_data_block(r->outer, &block, &size, &offset);
		if (e == ARCHIVE_EOF)
			return 0;
		if (e != ARCHIVE_OK) {
			snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s (after line %llu)", r->sources.v[r->source],
				 arch_err(r->outer), (unsigned long long)r->line_in_source);
			return -1;
		}
	}
	sbuf_add(&r->pending, block, size);
	return 1;
}

/* read_more, and the end of the entry noted when it has ended: -1 on error. */
static int refill(struct input_reader *r)
{
	int k = read_more(r);
	if (k == 0)
		r->eof_entry = true;
	return k < 0 ? -1 : 0;
}

int input_reader_next(struct input_reader *r, struct input_chunk *c)
{
	struct sbuf out = SBUF_INIT;
	memset(c, 0, sizeof(*c));
	c->line_step = (uint64_t)r->stride;
	for (;;) {
		if (r->source < 0 || (r->eof_entry && r->pending_off == r->pending.len)) {
			if (out.len)
				break; /* a chunk never spans two sources */
			int k = next_stream(r);
			if (k <= 0) {
				sbuf_release(&out);
				return k;
			}
		}
		char *start = r->pending.buf + r->pending_off;
		size_t avail = r->pending.len - r->pending_off;
		if (r->discarding) { /* the rest of a line that is too long */
			char *nl = memchr(start, '\n', avail);
			r->pending_off += nl ? (size_t)(nl - start) + 1 : avail;
			r->scanned = 0;
			if (nl || r->eof_entry) {
				r->discarding = false;
				continue;
			}
			if (out.len && would_block(r))
				break;
			if (refill(r) < 0) {
				sbuf_release(&out);
				return -1;
			}
			continue;
		}
		/* search only bytes not searched before: a long line arrives in many reads */
		char *nl = avail > r->scanned ? memchr(start + r->scanned, '\n', avail - r->scanned) : NULL;
		size_t linelen;
		bool too_long;
		if (nl) {
			linelen = (size_t)(nl - start) + 1;
			too_long = r->max_line && linelen - 1 > r->max_line;
		} else if (!r->eof_entry) {
			r->scanned = avail;
			too_long = r->max_line && avail > r->max_line;
			if (!too_long) {
				if (out.len && would_block(r))
					break; /* hand out what a slow pipe gave so far rather than wait */
				if (refill(r) < 0) {
					sbuf_release(&out);
					return -1;
				}
				continue;
			}
			linelen = avail;
		} else {
			linelen = avail; /* the last line, without '\n' */
			too_long = r->max_line && linelen > r->max_line;
		}
		if (too_long) {
			/* a chunk of its own, with no data: the worker reports (or
			 * counts) it in input order; the lines before it go first */
			if (out.len)
				break;
			uint64_t idx = r->corpus_line++;
			r->line_in_source++;
			r->pending_off += linelen;
			r->scanned = 0;
			r->discarding = !nl && !r->eof_entry;
			if (idx % (uint64_t)r->stride == (uint64_t)r->pass) {
				c->first_line = r->line_in_source;
				c->source = r->source;
				c->source_name = r->sources.v[r->source];
				c->n_lines = 1;
				c->too_long = true;
				break;
			}
			continue;
		}
		uint64_t idx = r->corpus_line++;
		r->line_in_source++;
		if (idx % (uint64_t)r->stride == (uint64_t)r->pass) {
			if (!out.len) {
				c->first_line = r->line_in_source;
				c->source = r->source;
				c->source_name = r->sources.v[r->source];
			}
			sbuf_add(&out, start, linelen);
			if (!nl)
				sbuf_addch(&out, '\n');
			c->n_lines++;
			r->bytes += linelen;
		}
		r->pending_off += linelen;
		r->scanned = 0;
		if (out.len >= r->chunk_size)
			break;
	}
	c->data = sbuf_detach(&out, &c->len);
	return 1;
}

const char *input_reader_error(const struct input_reader *r)
{
	return r->errmsg;
}

const char *input_reader_source(const struct input_reader *r, int source)
{
	return source >= 0 && source < r->sources.n ? r->sources.v[source] : "?";
}

uint64_t input_reader_bytes(const struct input_reader *r)
{
	return r->bytes;
}

int input_reader_n_sources(const struct input_reader *r)
{
	return r->sources.n;
}

void input_reader_free(struct input_reader *r)
{
	if (!r)
		return;
	close_file(r);
	sbuf_release(&r->pending);
	for (int i = 0; i < r->sources.n; i++)
		free(r->sources.v[i]);
	free(r->sources.v);
	free(r->filebuf);
	free(r);
}
