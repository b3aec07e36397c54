/*
 * npy.c - the .npy writer and reader (see npy.h; numpy/lib/format.py is the
 * reference: _write_array_header, _wrap_header, _read_array_header).
 */
#include "data/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/xalloc.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c writes and maps array data as it is in memory: little-endian hosts only"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
#define NPY_GROWTH_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS */

static const struct {
	const char *descr;
	size_t size;
} npy_types[NPY_NTYPES] = {
	[NPY_BOOL] = { "|b1", 1 }, [NPY_I1] = { "|i1", 1 }, [NPY_U1] = { "|u1", 1 },
	[NPY_I2] = { "<i2", 2 },   [NPY_U2] = { "<u2", 2 }, [NPY_I4] = { "<i4", 4 },
	[NPY_U4] = { "<u4", 4 },   [NPY_I8] = { "<i8", 8 }, [NPY_U8] = { "<u8", 8 },
	[NPY_F4] = { "<f4", 4 },   [NPY_F8] = { "<f8", 8 },
};

const char *npy_descr(enum npy_dtype dt)
{
	if ((unsigned)dt >= NPY_NTYPES)
		BUG("npy dtype %d", (int)dt);
	return npy_types[dt].descr;
}

size_t npy_itemsize(enum npy_dtype dt)
{
	if ((unsigned)dt >= NPY_NTYPES)
		BUG("npy dtype %d", (int)dt);
	return npy_types[dt].size;
}

/* ---------------------------------------------------------------- writer */

void npy_header(struct sbuf *out, enum npy_dtype dt, int ndim, const uint64_t *shape)
{
	if (ndim < 0 || ndim > NPY_MAX_DIMS)
		BUG("npy_header: ndim %d", ndim);
	struct sbuf h = SBUF_INIT;
	/* "{'descr': ..., 'fortran_order': False, 'shape': (...), }" (sorted keys,
	 * each "'key': repr(value), "), then the growth room. */
	sbuf_addf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (", npy_descr(dt));
	for (int i = 0; i < ndim; i++)
		sbuf_addf(&h, "%s%" PRIu64, i ? ", " : "", shape[i]);
	sbuf_addstr(&h, ndim == 1 ? ",), }" : "), }");
	if (ndim > 0) {
		int digits = snprintf(NULL, 0, "%" PRIu64, shape[0]);
		for (int i = digits; i < NPY_GROWTH_DIGITS; i++)
			sbuf_addch(&h, ' ');
	}
	/* _wrap_header: hlen counts the final '\n'; padlen is 1..64 */
	size_t hlen = h.len + 1;
	size_t padlen = NPY_ALIGN - (NPY_MAGIC_LEN + 2 + 2 + hlen) % NPY_ALIGN;
	size_t total = hlen + padlen;
	if (total > 0xffff)
		BUG("npy header of %zu bytes", total);
	sbuf_add(out, NPY_MAGIC, NPY_MAGIC_LEN);
	sbuf_addch(out, 1);
	sbuf_addch(out, 0);
	sbuf_addch(out, (int)(total & 0xff));
	sbuf_addch(out, (int)(total >> 8));
	sbuf_add(out, h.buf, h.len);
	for (size_t i = 0; i < padlen; i++)
		sbuf_addch(out, ' ');
	sbuf_addch(out, '\n');
	sbuf_release(&h);
}

static int data_bytes(enum npy_dtype dt, int ndim, const uint64_t *shape, size_t *bytes)
{
	uint64_t n = npy_itemsize(dt);
	for (int i = 0; i < ndim; i++) {
		if (shape[i] && n > SIZE_MAX / shape[i])
			return -1;
		n *= shape[i];
	}
	*bytes = (size_t)n;
	return 0;
}

int npy_write_afile(struct afile *af, enum npy_dtype dt, int ndim, const uint64_t *shape, const void *data)
{
	size_t bytes;
	if (ndim < 0 || ndim > NPY_MAX_DIMS)
		return error("cannot write '%s': %d dimensions", af->path, ndim);
	if (data_bytes(dt, ndim, shape, &bytes))
		return error("cannot write '%s': array size overflows", af->path);
	struct sbuf h = SBUF_INIT;
	npy_header(&h, dt, ndim, shape);
	int bad = fwrite(h.buf, 1, h.len, af->fp) != h.len || (bytes && fwrite(data, 1, bytes, af->fp) != bytes);
	sbuf_release(&h);
	if (bad)
		return error_errno("cannot write '%s'", af->path);
	return 0;
}

int npy_save(const char *path, enum npy_dtype dt, int ndim, const uint64_t *shape, const void *data)
{
	struct afile af;
	if (afile_open(&af, path))
		return -1;
	if (npy_write_afile(&af, dt, ndim, shape, data) || afile_commit(&af)) {
		afile_abort(&af);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- reader */

struct hparse {
	const char *p, *end;
	const char *name;
};

static void skip_ws(struct hparse *h)
{
	while (h->p < h->end && *h->p && strchr(" \t\n\r\f\v", *h->p))
		h->p++;
}

static int accept(struct hparse *h, char c)
{
	skip_ws(h);
	if (h->p < h->end && *h->p == c) {
		h->p++;
		return 1;
	}
	return 0;
}

static int bad_header(struct hparse *h, const char *what)
{
	return error("'%s' is not a valid .npy file: %s in the header", h->name, what);
}

/* A Python string literal without escapes: 'x' or "x". */
static int parse_str(struct hparse *h, char *out, size_t cap)
{
	skip_ws(h);
	if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
		return bad_header(h, "expected a string");
	char q = *h->p++;
	size_t n = 0;
	while (h->p < h->end && *h->p != q) {
		if (*h->p == '\\' || *h->p == '\n' || n + 1 >= cap)
			return bad_header(h, "unexpected string");
		out[n++] = *h->p++;
	}
	if (h->p >= h->end)
		return bad_header(h, "unterminated string");
	h->p++;
	out[n] = 0;
	return 0;
}

static int is_ident(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int parse_word(struct hparse *h, const char *w)
{
	size_t n = strlen(w);
	skip_ws(h);
	if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n))
		return 0;
	if ((size_t)(h->end - h->p) > n && is_ident(h->p[n]))
		return 0;
	h->p += n;
	return 1;
}

/* The dtype of a descr, or -1. */
static int find_dtype(const char *descr)
{
	if (strlen(descr) != 3)
		return -1;
	for (int i = 0; i < NPY_NTYPES; i++) {
		const char *d = npy_types[i].descr;
		if (strcmp(descr + 1, d + 1))
			continue;
		if (descr[0] == d[0] || descr[0] == '=') /* '=' is native: little-endian here */
			return i;
		if (npy_types[i].size == 1 && strchr("<>", descr[0]))
			return i; /* single bytes have no byte order */
	}
	return -1;
}

static int parse_shape(struct hparse *h, struct npy_array *a)
{
	if (!accept(h, '('))
		return bad_header(h, "'shape' is not a tuple");
	int n = 0, comma = 0;
	for (;;) {
		if (accept(h, ')'))
			break;
		if (n && !comma)
			return bad_header(h, "malformed 'shape'");
		skip_ws(h);
		if (h->p >= h->end || *h->p < '0' || *h->p > '9')
			return bad_header(h, "'shape' holds something else than non-negative integers");
		uint64_t v = 0;
		while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
			if (v > (UINT64_MAX - 9) / 10)
				return bad_header(h, "a dimension out of range");
			v = v * 10 + (uint64_t)(*h->p++ - '0');
		}
		if (n == NPY_MAX_DIMS)
			return bad_header(h, "too many dimensions");
		a->shape[n++] = v;
		comma = accept(h, ',');
	}
	if (n == 1 && !comma)
		return bad_header(h, "'shape' is not a tuple");
	a->ndim = n;
	return 0;
}

int npy_parse_header(const void *buf, size_t len, const char *name, struct npy_array *a, size_t *data_off)
{
	const unsigned char *b = buf;
	memset(a, 0, sizeof(*a));
	size_t m = len < NPY_MAGIC_LEN ? len : NPY_MAGIC_LEN;
	if (memcmp(b, NPY_MAGIC, m))
		return error("'%s' is not a .npy file (bad magic)", name);
	if (len < NPY_MAGIC_LEN + 2)
		return error("'%s' is truncated: %zu bytes, no complete .npy preamble", name, len);
	unsigned major = b[6], minor = b[7];
	size_t hlen, pre;
	if (minor != 0 || major < 1 || major > 3)
		return error("'%s': unsupported .npy format version %u.%u", name, major, minor);
	if (major == 1) {
		pre = 10;
		if (len < pre)
			return error("'%s' is truncated: %zu bytes, no complete .npy preamble", name, len);
		hlen = (size_t)b[8] | (size_t)b[9] << 8;
	} else {
		pre = 12;
		if (len < pre)
			return error("'%s' is truncated: %zu bytes, no complete .npy preamble", name, len);
		hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
	}
	if (hlen > len - pre)
		return error("'%s' is truncated: the header says %zu bytes, the file has %zu after the preamble",
			     name, hlen, len - pre);
	struct hparse h = { (const char *)b + pre, (const char *)b + pre + hlen, name };
	int seen_descr = 0, seen_fo = 0, seen_shape = 0;
	char key[32], descr[32];
	if (!accept(&h, '{'))
		return bad_header(&h, "no dictionary");
	while (!accept(&h, '}')) {
		if (parse_str(&h, key, sizeof(key)))
			return -1;
		if (!accept(&h, ':'))
			return bad_header(&h, "expected ':'");
		if (!strcmp(key, "descr") && !seen_descr) {
			if (parse_str(&h, descr, sizeof(descr)))
				return -1;
			seen_descr = 1;
		} else if (!strcmp(key, "fortran_order") && !seen_fo) {
			if (parse_word(&h, "True"))
				return error("'%s': Fortran-order arrays are not supported", name);
			if (!parse_word(&h, "False"))
				return bad_header(&h, "'fortran_order' is not True or False");
			seen_fo = 1;
		} else if (!strcmp(key, "shape") && !seen_shape) {
			if (parse_shape(&h, a))
				return -1;
			seen_shape = 1;
		} else {
			return bad_header(&h, "an unexpected or repeated key");
		}
		if (!accept(&h, ',')) {
			if (!accept(&h, '}'))
				return bad_header(&h, "expected ',' or '}'");
			break;
		}
	}
	skip_ws(&h);
	if (h.p != h.end)
		return bad_header(&h, "text after the dictionary");
	if (!seen_descr || !seen_fo || !seen_shape)
		return bad_header(&h, "a missing key ('descr', 'fortran_order' and 'shape' are required)");
	int dt = find_dtype(descr);
	if (dt < 0)
		return error("'%s': unsupported dtype '%s' (megac reads |b1 |i1 |u1 <i2 <u2 <i4 <u4 <i8 <u8 <f4 <f8)",
			     name, descr);
	a->dtype = (enum npy_dtype)dt;
	a->itemsize = npy_types[dt].size;
	size_t bytes;
	if (data_bytes(a->dtype, a->ndim, a->shape, &bytes))
		return error("'%s': the array size overflows", name);
	a->count = bytes / a->itemsize;
	*data_off = pre + hlen;
	return 0;
}

int npy_load(const char *path, struct npy_array *a)
{
	memset(a, 0, sizeof(*a));
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return error_errno("cannot open '%s'", path);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = error_errno("cannot stat '%s'", path);
		close(fd);
		return e;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return error("'%s' is not a regular file", path);
	}
	size_t len = (size_t)st.st_size;
	if (len == 0) {
		close(fd);
		return error("'%s' is empty, not a .npy file", path);
	}
	void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return error_errno("cannot mmap '%s'", path);
	size_t off;
	if (npy_parse_header(map, len, path, a, &off)) {
		munmap(map, len);
		memset(a, 0, sizeof(*a));
		return -1;
	}
	size_t bytes = (size_t)a->count * a->itemsize;
	if (len - off != bytes) {
		munmap(map, len);
		int ndim = a->ndim;
		memset(a, 0, sizeof(*a));
		return error("'%s' is %s: %zu data bytes, the header (%d-D) says %zu", path,
			     len - off < bytes ? "truncated" : "longer than its header says", len - off, ndim, bytes);
	}
	a->map = map;
	a->map_len = len;
	const char *data = (const char *)map + off;
	if ((uintptr_t)data % a->itemsize) {
		a->copy = xmalloc(bytes ? bytes : 1);
		memcpy(a->copy, data, bytes);
		a->data = a->copy;
	} else {
		a->data = data;
	}
	return 0;
}

void npy_close(struct npy_array *a)
{
	if (a->map)
		munmap(a->map, a->map_len);
	free(a->copy);
	memset(a, 0, sizeof(*a));
}
