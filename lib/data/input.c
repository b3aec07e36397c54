/*
 * input.c - see input.h. One libarchive handle per input file; for tar and
 * zip archives a second handle per member reads the member through the
 * outer one (callbacks below), so a member may itself be compressed.
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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

struct input_reader {
	char *const *files;
	int n_files;
	size_t chunk_size;
	int stride, pass;

	int file;                    /* index of the open file, -1 none */
	struct archive *outer;       /* the file */
	struct archive *inner;       /* current member of a tar/zip (NULL for a plain stream) */
	bool multi;                  /* the file is a tar/zip archive */
	int source;                  /* current source index */
	bool eof_entry;              /* current stream exhausted */

	struct sbuf pending;         /* bytes read but not yet cut into lines */
	size_t pending_off;
	size_t scanned;              /* bytes after pending_off known to hold no '\n' */
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

static struct archive *new_stream_reader(void)
{
	struct archive *a = archive_read_new();
	/* Named filters, not _all: the uuencode bidder of _all reads up to 128 KB
	 * ahead before deciding, which stalls a slow pipe, and the external-program
	 * filters (lrzip, lzop, ...) would run other programs. */
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_bzip2(a);
	archive_read_support_filter_xz(a);
	archive_read_support_filter_lzma(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_filter_lz4(a);
	archive_read_support_format_raw(a);
	archive_read_support_format_empty(a);
	return a;
}

static void close_inner(struct input_reader *r)
{
	if (r->inner) {
		archive_read_free(r->inner);
		r->inner = NULL;
	}
}

static void close_file(struct input_reader *r)
{
	close_inner(r);
	if (r->outer) {
		archive_read_free(r->outer);
		r->outer = NULL;
	}
	if (r->fd > 0)
		close(r->fd);
	r->fd = -1;
}

/*
 * libarchive reads the file through these callbacks rather than opening it
 * itself, so that a read blocked on a stalled pipe can be abandoned: the
 * callback waits in poll() with a timeout and gives up once
 * input_reader_stop() was called (after a bad record, the writer stops the
 * run without waiting for the producer of standard input).
 */
static la_ssize_t file_read(struct archive *a, void *ud, const void **buf)
{
	struct input_reader *r = ud;
	for (;;) {
		if (atomic_load(&r->stopped)) {
			archive_set_error(a, ECANCELED, "reading stopped");
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
			archive_set_error(a, errno, "%s", strerror(errno));
			return -1;
		}
		*buf = r->filebuf;
		return n;
	}
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

/* Open path ("-" = standard input) as r->outer. 0, or -1 with errmsg. */
static int open_outer(struct input_reader *r, const char *path, const char *shown)
{
	r->fd = strcmp(path, "-") ? open(path, O_RDONLY) : 0;
	if (r->fd < 0) {
		snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s", shown, strerror(errno));
		return -1;
	}
	struct stat st;
	r->fd_regular = fstat(r->fd, &st) == 0 && S_ISREG(st.st_mode);
	r->outer = new_stream_reader();
	archive_read_support_format_tar(r->outer);
	archive_read_support_format_zip(r->outer);
	archive_read_set_callback_data(r->outer, r);
	archive_read_set_read_callback(r->outer, file_read);
	archive_read_set_skip_callback(r->outer, file_skip);
	if (r->fd_regular)
		archive_read_set_seek_callback(r->outer, file_seek);
	if (archive_read_open1(r->outer) != ARCHIVE_OK)
		return fail(r, "%s: %s", shown, arch_err(r->outer));
	return 0;
}

void input_reader_stop(struct input_reader *r)
{
	atomic_store(&r->stopped, 1);
}

/* libarchive read callback of a member reader: the outer archive's data. */
static la_ssize_t member_read(struct archive *a, void *ud, const void **buf)
{
	struct input_reader *r = ud;
	const void *block;
	size_t size;
	la_int64_t off;
	int e = archive_read_data_block(r->outer, &block, &size, &off);
	if (e == ARCHIVE_EOF)
		return 0;
	if (e != ARCHIVE_OK && e != ARCHIVE_WARN) {
		archive_set_error(a, EIO, "%s", arch_err(r->outer));
		return -1;
	}
	*buf = block;
	return (la_ssize_t)size;
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
}

/* Open archive member e as the current stream: 1 ready, 0 skipped, -1 error. */
static int open_member(struct input_reader *r, struct archive_entry *e)
{
	const char *name = archive_entry_pathname(e);
	if (archive_entry_filetype(e) != AE_IFREG || !name || !input_is_data_name(name))
		return 0;
	char *src = xasprintf("%s:%s", r->files[r->file], name);
	r->inner = new_stream_reader();
	struct archive_entry *ie;
	if (archive_read_open(r->inner, r, NULL, member_read, NULL) != ARCHIVE_OK) {
		fail(r, "%s: %s", src, arch_err(r->inner));
		free(src);
		return -1;
	}
	int h = archive_read_next_header(r->inner, &ie);
	if (h == ARCHIVE_EOF) { /* an empty member */
		close_inner(r);
		free(src);
		return 0;
	}
	if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
		fail(r, "%s: %s", src, arch_err(r->inner));
		free(src);
		return -1;
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
			close_inner(r);
			int h = archive_read_next_header(r->outer, &e);
			if (h == ARCHIVE_EOF) {
				close_file(r);
				continue;
			}
			if (h != ARCHIVE_OK && h != ARCHIVE_WARN)
				return fail(r, "%s: %s", r->files[r->file], arch_err(r->outer));
			int k = open_member(r, e);
			if (k)
				return k;
			continue;
		}
		if (r->outer) { /* a plain stream that ended */
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
		const char *shown = is_stdin ? "standard input" : path;
		if (open_outer(r, path, shown) < 0)
			return -1;
		int h = archive_read_next_header(r->outer, &e);
		if (h == ARCHIVE_EOF) { /* an empty file */
			close_file(r);
			continue;
		}
		if (h != ARCHIVE_OK && h != ARCHIVE_WARN)
			return fail(r, "%s: %s", shown, arch_err(r->outer));
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
	struct archive *a = r->inner ? r->inner : r->outer;
	/* block-wise: archive_read_data() would insist on filling its buffer,
	 * waiting on a slow pipe for data the chunk does not need yet */
	const void *block;
	size_t size = 0;
	la_int64_t offset;
	int e = archive_read_data_block(a, &block, &size, &offset);
	if (e == ARCHIVE_EOF)
		return 0;
	if (e != ARCHIVE_OK && e != ARCHIVE_WARN) {
		snprintf(r->errmsg, sizeof(r->errmsg), "%s: %s (after line %llu)", r->sources.v[r->source],
			 arch_err(a), (unsigned long long)r->line_in_source);
		return -1;
	}
	sbuf_add(&r->pending, block, size);
	return 1;
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
		/* search only bytes not searched before: a long line arrives in many reads */
		char *nl = avail > r->scanned ? memchr(start + r->scanned, '\n', avail - r->scanned) : NULL;
		size_t linelen;
		if (nl) {
			linelen = (size_t)(nl - start) + 1;
		} else if (!r->eof_entry) {
			r->scanned = avail;
			if (out.len && would_block(r))
				break; /* hand out what a slow pipe gave so far rather than wait */
			int k = read_more(r);
			if (k < 0) {
				sbuf_release(&out);
				return -1;
			}
			if (k == 0)
				r->eof_entry = true;
			continue;
		} else {
			linelen = avail; /* the last line, without '\n' */
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
