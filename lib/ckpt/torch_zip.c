/*
 * torch_zip.c - see torch_zip.h.
 *
 * Reading: the end-of-central-directory record (and its zip64 successor
 * when a field overflows) gives the central directory; each entry names a
 * member, its CRC-32, its sizes and the offset of its local header, whose
 * own name and extra lengths say where the data begins. Every offset and
 * length is checked against the mapping before use. Members are kept in
 * name order beside the directory order, for binary search.
 *
 * Writing: members are streamed in order through an afile; each local
 * header's extra field holds a zip64 record when the member needs one and a
 * padding record ("FB", as PyTorch's writer) that puts the data on a 64-byte
 * boundary. The central directory follows, with zip64 end records when the
 * offsets or counts need them. Times are the zip epoch, so the same tree
 * gives the same bytes.
 */
#include "ckpt/torch_zip.h"
#include "base/error.h"
#include "base/mapfile.h"
#include "base/tempfile.h"
#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define ALIGN 64
#define DOS_DATE 0x21 /* 1980-01-01 */

struct tz_member {
	char *name;
	uint64_t off, size; /* of the data */
	uint32_t crc;
	bool checked;
};

struct tz_reader {
	char *path;
	const unsigned char *map;
	size_t len;
	bool owned; /* map is our mapping of path (tz_open), not the caller's bytes (tz_open_mem) */
	struct tz_member *m;
	int n;
	int *sorted;
};

static uint64_t rd(const unsigned char *p, int n)
{
	uint64_t x = 0;
	for (int i = n - 1; i >= 0; i--)
		x = x << 8 | p[i];
	return x;
}

static const struct tz_reader *sort_z;

static int by_name(const void *a, const void *b)
{
	return strcmp(sort_z->m[*(const int *)a].name, sort_z->m[*(const int *)b].name);
}

/* The central directory: its offset, size and entry count. */
static int find_directory(struct tz_reader *z, uint64_t *cd_off, uint64_t *cd_size, uint64_t *count)
{
	if (z->len < 22)
		return error("'%s': %zu bytes, too short for a zip archive", z->path, z->len);
	size_t pos = z->len - 22, stop = z->len > 22 + 65535 ? z->len - 22 - 65535 : 0;
	for (;; pos--) {
		if (rd(z->map + pos, 4) == SIG_END && rd(z->map + pos + 20, 2) == z->len - pos - 22)
			break;
		if (pos == stop)
			return error("'%s' is not a zip archive (no end of central directory)", z->path);
	}
	const unsigned char *e = z->map + pos;
	if (rd(e + 4, 2) || rd(e + 6, 2))
		return error("'%s': zip archives split over several disks are not read", z->path);
	*count = rd(e + 10, 2);
	*cd_size = rd(e + 12, 4);
	*cd_off = rd(e + 16, 4);
	uint64_t end = pos;
	if (*count == 0xffff || *cd_size == 0xffffffff || *cd_off == 0xffffffff) {
		if (pos < 20 || rd(e - 20, 4) != SIG_LOC64)
			return error("'%s': zip64 end of central directory locator missing", z->path);
		uint64_t o = rd(e - 12, 8);
		if (o > z->len - 56 || o + 56 > pos - 20 || rd(z->map + o, 4) != SIG_END64)
			return error("'%s': damaged zip64 end of central directory", z->path);
		*count = rd(z->map + o + 32, 8);
		*cd_size = rd(z->map + o + 40, 8);
		*cd_off = rd(z->map + o + 48, 8);
		end = o;
	}
	if (*cd_off > end || *cd_size > end - *cd_off || *count > *cd_size / 46)
		return error("'%s': central directory outside the archive (damaged or truncated)", z->path);
	return 0;
}

static int read_entry(struct tz_reader *z, const unsigned char *c, size_t room, size_t *used, struct tz_member *m)
{
	if (room < 46 || rd(c, 4) != SIG_CENTRAL)
		return error("'%s': damaged central directory", z->path);
	size_t nlen = rd(c + 28, 2), elen = rd(c + 30, 2), clen = rd(c + 32, 2);
	if (46 + nlen + elen + clen > room)
		return error("'%s': damaged central directory", z->path);
	*used = 46 + nlen + elen + clen;
	m->name = xstrndup((const char *)c + 46, nlen);
	if (strlen(m->name) != nlen)
		return error("'%s': a member name holds a NUL byte", z->path);
	if (rd(c + 8, 2) & 1)
		return error("'%s': member '%s' is encrypted", z->path, m->name);
	if (rd(c + 10, 2) != 0)
		return error("'%s': member '%s' is compressed (method %d); torch.save stores members", z->path,
			     m->name, (int)rd(c + 10, 2));
	m->crc = (uint32_t)rd(c + 16, 4);
	uint64_t csize = rd(c + 20, 4), usize = rd(c + 24, 4), off = rd(c + 42, 4);
	/* zip64: the fields that overflowed, in order */
	for (const unsigned char *x = c + 46 + nlen, *xe = x + elen; xe - x >= 4;) {
		size_t id = rd(x, 2), sz = rd(x + 2, 2);
		if (sz > (size_t)(xe - x - 4))
			return error("'%s': damaged extra field of '%s'", z->path, m->name);
		if (id == 1) {
			const unsigned char *f = x + 4, *fe = f + sz;
			if (usize == 0xffffffff && fe - f >= 8)
				usize = rd(f, 8), f += 8;
			if (csize == 0xffffffff && fe - f >= 8)
				csize = rd(f, 8), f += 8;
			if (off == 0xffffffff && fe - f >= 8)
				off = rd(f, 8), f += 8;
		}
		x += 4 + sz;
	}
	if (csize != usize)
		return error("'%s': member '%s' has %llu stored bytes for %llu", z->path, m->name,
			     (unsigned long long)csize, (unsigned long long)usize);
	if (off > z->len || z->len - off < 30 || rd(z->map + off, 4) != SIG_LOCAL)
		return error("'%s': member '%s' has no local header", z->path, m->name);
	uint64_t data = off + 30 + rd(z->map + off + 26, 2) + rd(z->map + off + 28, 2);
	if (data > z->len || usize > z->len - data)
		return error("'%s': member '%s' runs past the end of the file (truncated?)", z->path, m->name);
	m->off = data;
	m->size = usize;
	return 0;
}

static struct tz_reader *open_bytes(const char *path, const void *map, size_t len, bool owned)
{
	struct tz_reader *z = xcalloc(1, sizeof(*z));
	z->path = xstrdup(path);
	z->len = len;
	z->map = map;
	z->owned = owned;
	uint64_t cd_off = 0, cd_size = 0, count = 0;
	if (find_directory(z, &cd_off, &cd_size, &count) < 0) {
		tz_close(z);
		return NULL;
	}
	z->m = xcalloc(count ? count : 1, sizeof(*z->m));
	const unsigned char *c = z->map + cd_off;
	size_t room = cd_size;
	for (uint64_t i = 0; i < count; i++) {
		size_t used = 0;
		int r = read_entry(z, c, room, &used, &z->m[i]);
		z->n = (int)i + 1;
		if (r < 0) {
			tz_close(z);
			return NULL;
		}
		c += used;
		room -= used;
	}
	z->sorted = xmalloc((size_t)(z->n ? z->n : 1) * sizeof(int));
	for (int i = 0; i < z->n; i++)
		z->sorted[i] = i;
	sort_z = z;
	qsort(z->sorted, (size_t)z->n, sizeof(int), by_name);
	for (int i = 1; i < z->n; i++)
		if (!strcmp(z->m[z->sorted[i]].name, z->m[z->sorted[i - 1]].name)) {
			error("'%s': member '%s' is there twice", path, z->m[z->sorted[i]].name);
			tz_close(z);
			return NULL;
		}
	return z;
}

struct tz_reader *tz_open(const char *path)
{
	const void *map;
	size_t len;
	if (map_file(path, &map, &len) < 0)
		return NULL;
	return open_bytes(path, map, len, true);
}

struct tz_reader *tz_open_mem(const void *buf, size_t len, const char *name)
{
	return open_bytes(name, buf, len, false);
}

int tz_count(const struct tz_reader *z)
{
	return z->n;
}

const char *tz_name(const struct tz_reader *z, int i)
{
	if (i < 0 || i >= z->n)
		BUG("member %d of %d", i, z->n);
	return z->m[i].name;
}

const char *tz_path(const struct tz_reader *z)
{
	return z->path;
}

int tz_find(const struct tz_reader *z, const char *name)
{
	int lo = 0, hi = z->n - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, c = strcmp(z->m[z->sorted[mid]].name, name);
		if (!c)
			return z->sorted[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

const void *tz_data(struct tz_reader *z, int i, size_t *len)
{
	tz_name(z, i); /* checks i */
	struct tz_member *m = &z->m[i];
	const unsigned char *p = z->map + m->off;
	if (!m->checked) {
		uLong crc = crc32(0L, Z_NULL, 0);
		for (uint64_t done = 0; done < m->size;) {
			uInt piece = m->size - done > (1u << 30) ? 1u << 30 : (uInt)(m->size - done);
			crc = crc32(crc, p + done, piece);
			done += piece;
		}
		if ((uint32_t)crc != m->crc) {
			error("'%s': member '%s' fails its CRC-32 check (damaged)", z->path, m->name);
			return NULL;
		}
		m->checked = true;
	}
	*len = m->size;
	return p;
}

void tz_close(struct tz_reader *z)
{
	if (!z)
		return;
	if (z->map && z->owned)
		map_file_release(z->map, z->len);
	for (int i = 0; i < z->n; i++)
		free(z->m[i].name);
	free(z->m);
	free(z->sorted);
	free(z->path);
	free(z);
}

/* ---- writing ---- */

struct tz_writer {
	struct afile af;
	struct sbuf *mem; /* tz_create_mem: the archive is appended here, not to af */
	char *prefix;
	struct tz_member *m;
	size_t n, cap;
	uint64_t pos;
	bool failed;
};

static void put(struct sbuf *b, uint64_t x, int n)
{
	for (int i = 0; i < n; i++)
		sbuf_addch(b, (int)((x >> (8 * i)) & 0xff));
}

static int emit(struct tz_writer *w, const void *p, size_t n)
{
	if (w->mem) {
		sbuf_add(w->mem, p, n);
		w->pos += n;
		return 0;
	}
	if (n && fwrite(p, 1, n, w->af.fp) != n) {
		w->failed = true;
		return error_errno("cannot write '%s'", w->af.path);
	}
	w->pos += n;
	return 0;
}

struct tz_writer *tz_create(const char *path, const char *prefix)
{
	struct tz_writer *w = xcalloc(1, sizeof(*w));
	if (afile_open(&w->af, path) < 0) {
		free(w);
		return NULL;
	}
	w->prefix = xstrdup(prefix);
	return w;
}

struct tz_writer *tz_create_mem(struct sbuf *out, const char *prefix)
{
	struct tz_writer *w = xcalloc(1, sizeof(*w));
	w->mem = out;
	w->prefix = xstrdup(prefix);
	return w;
}

int tz_add(struct tz_writer *w, const char *name, const void *data, size_t n)
{
	if (w->failed)
		return -1;
	char *full = xasprintf("%s/%s", w->prefix, name);
	size_t nlen = strlen(full);
	if (nlen > 0xffff) {
		free(full);
		return error("zip member name of %zu bytes", nlen);
	}
	bool big = n >= 0xffffffffu;
	size_t z64 = big ? 20 : 0;
	size_t pad = (ALIGN - (w->pos + 30 + nlen + z64 + 4) % ALIGN) % ALIGN;
	uLong crc = crc32(0L, Z_NULL, 0);
	for (size_t done = 0; done < n;) {
		uInt piece = n - done > (1u << 30) ? 1u << 30 : (uInt)(n - done);
		crc = crc32(crc, (const Bytef *)data + done, piece);
		done += piece;
	}
	struct sbuf h = SBUF_INIT;
	put(&h, SIG_LOCAL, 4);
	put(&h, big ? 45 : 20, 2);
	put(&h, 0, 2);
	put(&h, 0, 2);
	put(&h, 0, 2);
	put(&h, DOS_DATE, 2);
	put(&h, crc, 4);
	put(&h, big ? 0xffffffffu : n, 4);
	put(&h, big ? 0xffffffffu : n, 4);
	put(&h, nlen, 2);
	put(&h, z64 + 4 + pad, 2);
	sbuf_add(&h, full, nlen);
	if (big) {
		put(&h, 1, 2);
		put(&h, 16, 2);
		put(&h, n, 8);
		put(&h, n, 8);
	}
	put(&h, 0x4246, 2); /* "FB": padding */
	put(&h, pad, 2);
	for (size_t i = 0; i < pad; i++)
		sbuf_addch(&h, 'Z');
	xgrow(&w->m, &w->cap, w->n + 1, sizeof(*w->m));
	struct tz_member *m = &w->m[w->n++];
	m->name = full;
	m->off = w->pos; /* of the local header, while writing */
	m->size = n;
	m->crc = (uint32_t)crc;
	int r = emit(w, h.buf, h.len);
	sbuf_release(&h);
	if (r == 0)
		r = emit(w, data, n);
	return r;
}

int tz_finish(struct tz_writer *w)
{
	struct sbuf c = SBUF_INIT;
	uint64_t cd_off = w->pos;
	for (size_t i = 0; i < w->n; i++) {
		struct tz_member *m = &w->m[i];
		bool bsize = m->size >= 0xffffffffu, boff = m->off >= 0xffffffffu;
		size_t elen = bsize || boff ? 4 + 16 * bsize + 8 * boff : 0;
		put(&c, SIG_CENTRAL, 4);
		put(&c, elen ? 45 : 20, 2);
		put(&c, elen ? 45 : 20, 2);
		put(&c, 0, 2);
		put(&c, 0, 2);
		put(&c, 0, 2);
		put(&c, DOS_DATE, 2);
		put(&c, m->crc, 4);
		put(&c, bsize ? 0xffffffffu : m->size, 4);
		put(&c, bsize ? 0xffffffffu : m->size, 4);
		put(&c, strlen(m->name), 2);
		put(&c, elen, 2);
		put(&c, 0, 2);
		put(&c, 0, 2);
		put(&c, 0, 2);
		put(&c, 0, 4);
		put(&c, boff ? 0xffffffffu : m->off, 4);
		sbuf_addstr(&c, m->name);
		if (elen) {
			put(&c, 1, 2);
			put(&c, elen - 4, 2);
			if (bsize) {
				put(&c, m->size, 8);
				put(&c, m->size, 8);
			}
			if (boff)
				put(&c, m->off, 8);
		}
	}
	uint64_t cd_size = c.len, end64 = cd_off + cd_size;
	bool z64 = w->n >= 0xffff || cd_off >= 0xffffffffu || cd_size >= 0xffffffffu;
	if (z64) {
		put(&c, SIG_END64, 4);
		put(&c, 44, 8);
		put(&c, 45, 2);
		put(&c, 45, 2);
		put(&c, 0, 4);
		put(&c, 0, 4);
		put(&c, w->n, 8);
		put(&c, w->n, 8);
		put(&c, cd_size, 8);
		put(&c, cd_off, 8);
		put(&c, SIG_LOC64, 4);
		put(&c, 0, 4);
		put(&c, end64, 8);
		put(&c, 1, 4);
	}
	put(&c, SIG_END, 4);
	put(&c, 0, 4);
	put(&c, z64 ? 0xffff : w->n, 2);
	put(&c, z64 ? 0xffff : w->n, 2);
	put(&c, z64 ? 0xffffffffu : cd_size, 4);
	put(&c, z64 ? 0xffffffffu : cd_off, 4);
	put(&c, 0, 2);
	int r = w->failed ? -1 : emit(w, c.buf, c.len);
	sbuf_release(&c);
	if (r == 0 && !w->mem && afile_commit(&w->af) < 0)
		r = -1;
	if (r < 0 && !w->mem)
		afile_abort(&w->af);
	for (size_t i = 0; i < w->n; i++)
		free(w->m[i].name);
	free(w->m);
	free(w->prefix);
	free(w);
	return r;
}

void tz_abort(struct tz_writer *w)
{
	if (!w)
		return;
	if (!w->mem)
		afile_abort(&w->af);
	for (size_t i = 0; i < w->n; i++)
		free(w->m[i].name);
	free(w->m);
	free(w->prefix);
	free(w);
}

/* ---- torch.save files ---- */

struct loader {
	struct tz_reader *z;
	const char *prefix;
	size_t plen;
};

static int storage_bytes(void *ctx, const char *key, const void **data, size_t *nbytes)
{
	struct loader *l = ctx;
	char *name = xasprintf("%.*s/data/%s", (int)l->plen, l->prefix, key);
	int i = tz_find(l->z, name);
	if (i < 0) {
		error("'%s': no member '%s' for storage '%s'", tz_path(l->z), name, key);
		free(name);
		return -1;
	}
	free(name);
	*data = tz_data(l->z, i, nbytes);
	return *data ? 0 : -1;
}

static void close_zip(void *p)
{
	tz_close(p);
}

static struct pk_value *load_zip(struct pk_doc *d, struct tz_reader *z)
{
	if (!z)
		return NULL;
	const char *path = z->path;
	int pkl = -1;
	for (int i = 0; i < z->n; i++) {
		const char *s = strchr(z->m[i].name, '/');
		if (s && !strcmp(s, "/data.pkl")) {
			if (pkl >= 0) {
				error("'%s': two data.pkl members ('%s', '%s')", path, z->m[pkl].name, z->m[i].name);
				tz_close(z);
				return NULL;
			}
			pkl = i;
		}
	}
	if (pkl < 0) {
		error("'%s' is a zip archive but no torch.save file (no <name>/data.pkl member)", path);
		tz_close(z);
		return NULL;
	}
	pk_doc_attach(d, close_zip, z);
	struct loader l = { z, z->m[pkl].name, strlen(z->m[pkl].name) - strlen("/data.pkl") };
	char *bo = xasprintf("%.*s/byteorder", (int)l.plen, l.prefix);
	int b = tz_find(z, bo);
	free(bo);
	if (b >= 0) {
		size_t n;
		const char *s = tz_data(z, b, &n);
		if (!s)
			return NULL;
		if (n != 6 || memcmp(s, "little", 6)) {
			error("'%s': byte order '%.*s' (only little-endian files are read)", path, (int)(n < 16 ? n : 16),
			      s);
			return NULL;
		}
	}
	size_t n;
	const void *p = tz_data(z, pkl, &n);
	if (!p)
		return NULL;
	char *what = xasprintf("%s:%s", path, z->m[pkl].name);
	struct pk_load_opts o = { what, storage_bytes, &l };
	struct pk_value *v = pk_loads(d, p, n, &o);
	free(what);
	return v;
}

struct pk_value *torch_load(struct pk_doc *d, const char *path)
{
	return load_zip(d, tz_open(path));
}

struct pk_value *torch_load_mem(struct pk_doc *d, const void *buf, size_t len, const char *name)
{
	return load_zip(d, tz_open_mem(buf, len, name));
}

/* torch 1.x's archive name: the file's base name without its extension */
static char *archive_name(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	const char *dot = strrchr(base, '.');
	size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", base[i]))
			n = 0;
	return n ? xstrndup(base, n) : xstrdup("archive");
}

/* torch.save's members of v into w (finished or aborted here) */
static int save_into(struct tz_writer *w, struct pk_value *v, const char *what)
{
	struct sbuf pkl = SBUF_INIT;
	struct pk_value **st = NULL;
	size_t nst = 0;
	int r = pk_dumps(v, &pkl, &st, &nst) < 0 ? error("cannot save '%s'", what) : 0;
	if (r == 0)
		r = tz_add(w, "data.pkl", pkl.buf, pkl.len);
	if (r == 0)
		r = tz_add(w, "byteorder", "little", 6);
	for (size_t i = 0; i < nst && r == 0; i++) {
		char key[40];
		snprintf(key, sizeof(key), "data/%zu", i);
		size_t bytes = (size_t)st[i]->st.numel * pk_dtype_size(st[i]->st.dtype);
		r = tz_add(w, key, bytes ? st[i]->st.data : "", bytes);
	}
	if (r == 0)
		r = tz_add(w, "version", "3\n", 2);
	free(st);
	sbuf_release(&pkl);
	if (r < 0) {
		tz_abort(w);
		return -1;
	}
	return tz_finish(w);
}

int torch_save(const char *path, struct pk_value *v)
{
	char *prefix = archive_name(path);
	struct tz_writer *w = tz_create(path, prefix);
	free(prefix);
	return w ? save_into(w, v, path) : -1;
}

int torch_save_mem(struct sbuf *out, struct pk_value *v, const char *what)
{
	return save_into(tz_create_mem(out, "archive"), v, what);
}
