/*
 * safetensors.c - Hugging Face safetensors files and model folders, see
 * safetensors.h. Validation follows the reference (Rust) implementation's
 * rules, with messages that name the file, the tensor and what was expected.
 */
#include "ckpt/safetensors.h"

#include "base/error.h"
#include "base/mapfile.h"
#include "base/tempfile.h"
#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_KEY "__metadata__"

/* ---- element types ------------------------------------------------------------ */

static const char *const st_dtype_names[CKPT_NDTYPES] = {
	[CKPT_F32] = "F32",
	[CKPT_BF16] = "BF16",
	[CKPT_F16] = "F16",
	[CKPT_I64] = "I64",
};

/* The other dtypes of the format, refused by name rather than as unknown. */
static const char *const st_other_dtypes[] = {
	"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "U64", "F64", "C64",
	"F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", NULL,
};

#define ST_READS "megac reads F32, BF16, F16, I64"

/* The dtype called s, or -1. */
static int st_dtype_parse(const char *s)
{
	for (int i = 0; i < CKPT_NDTYPES; i++)
		if (!strcmp(s, st_dtype_names[i]))
			return i;
	return -1;
}

static int st_dtype_other(const char *s)
{
	for (int i = 0; st_other_dtypes[i]; i++)
		if (!strcmp(s, st_other_dtypes[i]))
			return 1;
	return 0;
}

/* "[2, 3]" into buf. */
static const char *st_shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
	size_t len = 0;
	buf[0] = 0;
	len += (size_t)snprintf(buf, size, "[");
	for (int d = 0; d < ndim && len < size; d++)
		len += (size_t)snprintf(buf + len, size - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
	if (len < size)
		snprintf(buf + len, size - len, "]");
	return buf;
}

/* Bytes of a tensor, or -1 when they do not fit in 63 bits. */
static int64_t st_nbytes(enum ckpt_dtype dt, int ndim, const int64_t *shape)
{
	int64_t n = (int64_t)ckpt_dtype_size(dt);
	for (int d = 0; d < ndim; d++)
		if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n))
			return -1;
	return n;
}

static uint64_t st_le64(const unsigned char *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

/* ---- reader ------------------------------------------------------------------- */

struct st_tensor {
	const char *name; /* key in the header (owned by the JSON) */
	enum ckpt_dtype dt;
	int ndim;
	int64_t shape[CKPT_MAX_NDIM];
	uint64_t begin, end; /* in the data buffer */
	int order;           /* position in the header */
};

struct st_file {
	char *path;
	void *map;
	size_t map_len;
	const unsigned char *data; /* the data buffer, byte 8 + N */
	uint64_t data_len;
	json_t *root;       /* the header, kept for the names and metadata */
	const json_t *meta; /* "__metadata__" or NULL */
	int n;
	struct st_tensor *t; /* in order of data offset */
	int *by_name;        /* indices into t, sorted by name */
};

/* An integer >= 0 of the header, or -1 when v is none. */
static int64_t st_json_count(const json_t *v)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	return (int64_t)json_integer_value(v);
}

/* Parse one header entry into t. */
static int st_parse_tensor(const char *path, const char *name, const json_t *v, struct st_tensor *t)
{
	if (!json_is_object(v))
		return error("'%s': tensor '%s': expected an object with \"dtype\", \"shape\" and \"data_offsets\"",
			     path, name);
	t->name = name;
	const json_t *jdt = json_object_get(v, "dtype");
	if (!json_is_string(jdt))
		return error("'%s': tensor '%s': \"dtype\" is missing or not a string", path, name);
	const char *sdt = json_string_value(jdt);
	int dt = st_dtype_parse(sdt);
	if (dt < 0) {
		if (st_dtype_other(sdt))
			return error("'%s': dtype %s of tensor '%s': " ST_READS, path, sdt, name);
		return error("'%s': tensor '%s' has the unknown dtype \"%s\" (safetensors' are F32, BF16, F16, "
			     "I64, F64, I32, ...; " ST_READS ")",
			     path, name, sdt);
	}
	t->dt = (enum ckpt_dtype)dt;

	const json_t *js = json_object_get(v, "shape");
	if (!json_is_array(js))
		return error("'%s': tensor '%s': \"shape\" is missing or not an array", path, name);
	if (json_array_size(js) > CKPT_MAX_NDIM)
		return error("'%s': tensor '%s' has %zu dimensions; megac handles at most %d", path, name,
			     json_array_size(js), CKPT_MAX_NDIM);
	t->ndim = (int)json_array_size(js);
	for (int d = 0; d < t->ndim; d++) {
		t->shape[d] = st_json_count(json_array_get(js, (size_t)d));
		if (t->shape[d] < 0)
			return error("'%s': tensor '%s': dimension %d of \"shape\" is not a non-negative integer",
				     path, name, d);
	}

	const json_t *jo = json_object_get(v, "data_offsets");
	int64_t b = json_array_size(jo) == 2 ? st_json_count(json_array_get(jo, 0)) : -1;
	int64_t e = json_array_size(jo) == 2 ? st_json_count(json_array_get(jo, 1)) : -1;
	if (!json_is_array(jo) || b < 0 || e < 0)
		return error("'%s': tensor '%s': \"data_offsets\" must be [begin, end], two non-negative integers",
			     path, name);
	if (e < b)
		return error("'%s': tensor '%s': data_offsets [%lld, %lld] end before they begin", path, name,
			     (long long)b, (long long)e);
	t->begin = (uint64_t)b;
	t->end = (uint64_t)e;

	char sh[256];
	int64_t nb = st_nbytes(t->dt, t->ndim, t->shape);
	if (nb < 0)
		return error("'%s': tensor '%s': shape %s is too large", path, name,
			     st_shape_str(sh, sizeof(sh), t->ndim, t->shape));
	if ((uint64_t)nb != t->end - t->begin)
		return error("'%s': tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %lld",
			     path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
			     (unsigned long long)(t->end - t->begin), sdt,
			     st_shape_str(sh, sizeof(sh), t->ndim, t->shape), (long long)nb);
	return 0;
}

static int st_cmp_offset(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return (x->order > y->order) - (x->order < y->order);
}

static int st_cmp_name(const void *a, const void *b)
{
	return strcmp((*(const struct st_tensor *const *)a)->name, (*(const struct st_tensor *const *)b)->name);
}

/* The tensors, sorted by offset, cover the data buffer exactly. */
static int st_check_cover(const struct st_file *f)
{
	uint64_t pos = 0;
	const struct st_tensor *prev = NULL; /* the tensor that ends at pos */
	for (int i = 0; i < f->n; i++) {
		const struct st_tensor *t = &f->t[i];
		if (t->end > f->data_len)
			return error("'%s': tensor '%s': data_offsets [%llu, %llu] run past the end of the data "
				     "buffer (%llu bytes)",
				     f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
				     (unsigned long long)f->data_len);
		if (t->begin < pos)
			return error("'%s': tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap in the data buffer",
				     f->path, prev->name, (unsigned long long)prev->begin,
				     (unsigned long long)prev->end, t->name, (unsigned long long)t->begin,
				     (unsigned long long)t->end);
		if (t->begin > pos)
			return error("'%s': bytes %llu to %llu of the data buffer belong to no tensor (a hole before "
				     "tensor '%s')",
				     f->path, (unsigned long long)pos, (unsigned long long)t->begin, t->name);
		if (t->end > t->begin || !prev) {
			pos = t->end;
			prev = t;
		}
	}
	if (pos != f->data_len)
		return error("'%s': the data buffer has %llu bytes but the tensors end at byte %llu: %llu bytes at "
			     "the end belong to no tensor",
			     f->path, (unsigned long long)f->data_len, (unsigned long long)pos,
			     (unsigned long long)(f->data_len - pos));
	return 0;
}

/* Parse and validate the header of the mapped file f. */
static int st_parse(struct st_file *f)
{
	const unsigned char *m = f->map;
	uint64_t size = f->map_len;
	uint64_t hlen = st_le64(m);
	if (hlen > ST_MAX_HEADER)
		return error("'%s': header length %llu is over the safetensors limit of %d bytes (not a "
			     "safetensors file?)",
			     f->path, (unsigned long long)hlen, ST_MAX_HEADER);
	if (hlen > size - 8)
		return error("'%s': header length %llu runs past the end of the file (%llu bytes; truncated, or "
			     "not a safetensors file?)",
			     f->path, (unsigned long long)hlen, (unsigned long long)size);
	if (hlen == 0 || m[8] != '{')
		return error("'%s': the header does not begin with '{' (not a safetensors file?)", f->path);
	f->data = m + 8 + hlen;
	f->data_len = size - 8 - hlen;

	json_error_t je;
	f->root = json_loadb((const char *)m + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
	if (!f->root)
		return error("'%s': invalid JSON in the header at line %d, column %d: %s", f->path, je.line,
			     je.column, je.text);
	if (!json_is_object(f->root))
		return error("'%s': the header is not a JSON object", f->path);

	size_t cap = json_object_size(f->root);
	f->t = xcalloc(cap ? cap : 1, sizeof(*f->t));
	const char *key;
	json_t *v;
	json_object_foreach(f->root, key, v) {
		if (!strcmp(key, META_KEY)) {
			if (!json_is_object(v))
				return error("'%s': \"" META_KEY "\" is not a JSON object", f->path);
			const char *mk;
			json_t *mv;
			json_object_foreach(v, mk, mv) {
				if (!json_is_string(mv))
					return error("'%s': " META_KEY " value of '%s' is not a string", f->path, mk);
			}
			f->meta = v;
			continue;
		}
		struct st_tensor *t = &f->t[f->n];
		t->order = f->n;
		if (st_parse_tensor(f->path, key, v, t) < 0)
			return -1;
		f->n++;
	}

	qsort(f->t, (size_t)f->n, sizeof(*f->t), st_cmp_offset);
	if (st_check_cover(f) < 0)
		return -1;
	const struct st_tensor **p = xmalloc((size_t)(f->n ? f->n : 1) * sizeof(*p));
	for (int i = 0; i < f->n; i++)
		p[i] = &f->t[i];
	qsort(p, (size_t)f->n, sizeof(*p), st_cmp_name);
	f->by_name = xmalloc((size_t)(f->n ? f->n : 1) * sizeof(int));
	for (int i = 0; i < f->n; i++)
		f->by_name[i] = (int)(p[i] - f->t);
	free(p);
	return 0;
}

struct st_file *st_open(const char *path)
{
	const void *map;
	size_t len;
	if (map_file(path, &map, &len) < 0)
		return NULL;
	if (len < 8) {
		error("'%s': %zu bytes, too short for a safetensors file (8 bytes of header length, then the header)",
		      path, len);
		map_file_release(map, len);
		return NULL;
	}
	struct st_file *f = xcalloc(1, sizeof(*f));
	f->path = xstrdup(path);
	f->map = (void *)map;
	f->map_len = len;
	if (st_parse(f) < 0) {
		st_close(f);
		return NULL;
	}
	return f;
}

int st_count(const struct st_file *f)
{
	return f->n;
}

static const struct st_tensor *st_tensor(const struct st_file *f, int i)
{
	if (i < 0 || i >= f->n)
		BUG("tensor index %d out of range [0, %d) in '%s'", i, f->n, f->path);
	return &f->t[i];
}

const char *st_name(const struct st_file *f, int i)
{
	return st_tensor(f, i)->name;
}

int st_find(const struct st_file *f, const char *name)
{
	int lo = 0, hi = f->n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(f->t[f->by_name[mid]].name, name);
		if (c == 0)
			return f->by_name[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

void st_info(const struct st_file *f, int i, enum ckpt_dtype *dt, int *ndim, int64_t *shape)
{
	const struct st_tensor *t = st_tensor(f, i);
	if (dt)
		*dt = t->dt;
	if (ndim)
		*ndim = t->ndim;
	if (shape)
		memcpy(shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
}

const void *st_data(const struct st_file *f, int i, size_t *bytes)
{
	const struct st_tensor *t = st_tensor(f, i);
	if (bytes)
		*bytes = (size_t)(t->end - t->begin);
	return f->data + t->begin;
}

void st_release(const struct st_file *f, int i)
{
	/* whole pages inside the tensor only: its neighbours may still be in use */
	const struct st_tensor *t = st_tensor(f, i);
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)(f->data + t->begin) + page - 1) / page * page;
	uintptr_t hi = (uintptr_t)(f->data + t->end) / page * page;
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: failure changes nothing */
}

const char *st_metadata(const struct st_file *f, const char *key)
{
	return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

const char *st_path(const struct st_file *f)
{
	return f->path;
}

void st_close(struct st_file *f)
{
	if (!f)
		return;
	if (f->map)
		map_file_release(f->map, f->map_len);
	json_decref(f->root);
	free(f->t);
	free(f->by_name);
	free(f->path);
	free(f);
}

/* ---- writer ------------------------------------------------------------------- */

struct st_writer {
	char *path;
	FILE *fp;
	int n;
	char **names;
	uint64_t *size;
	int cur;       /* the tensor being written */
	uint64_t done; /* bytes of it written */
	int failed;
};

/* The header object, or NULL after error(). */
static json_t *st_header(const char *path, int n, const struct st_tensor_decl *decl, int nmeta,
			 const char *const *meta_keys, const char *const *meta_values, uint64_t *size)
{
	json_t *root = json_object();
	if (nmeta > 0) {
		json_t *meta = json_object();
		json_object_set_new(root, META_KEY, meta);
		for (int i = 0; i < nmeta; i++) {
			if (!meta_keys[i] || !meta_values[i])
				BUG("metadata entry %d of '%s' is NULL", i, path);
			if (json_object_get(meta, meta_keys[i])) {
				error("'%s': metadata key '%s' given twice", path, meta_keys[i]);
				goto fail;
			}
			json_t *s = json_string(meta_values[i]);
			if (!s || json_object_set_new(meta, meta_keys[i], s) < 0) {
				error("'%s': metadata '%s' is not valid UTF-8", path, meta_keys[i]);
				goto fail;
			}
		}
	}
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		const struct st_tensor_decl *d = &decl[i];
		if (!d->name)
			BUG("tensor %d of '%s' has no name", i, path);
		if (!strcmp(d->name, META_KEY) || json_object_get(root, d->name)) {
			error("'%s': tensor '%s' %s", path, d->name,
			      strcmp(d->name, META_KEY) ? "is declared twice" : "has the name reserved for metadata");
			goto fail;
		}
		ckpt_dtype_size(d->dt); /* BUG() on an invalid dtype */
		if (d->ndim < 0 || d->ndim > CKPT_MAX_NDIM) {
			error("'%s': tensor '%s' has %d dimensions; safetensors files of megac hold 0 to %d", path,
			      d->name, d->ndim, CKPT_MAX_NDIM);
			goto fail;
		}
		char sh[256];
		st_shape_str(sh, sizeof(sh), d->ndim, d->shape);
		for (int k = 0; k < d->ndim; k++)
			if (d->shape[k] < 0) {
				error("'%s': tensor '%s': shape %s has a negative dimension", path, d->name, sh);
				goto fail;
			}
		int64_t nb = st_nbytes(d->dt, d->ndim, d->shape);
		if (nb < 0 || off + (uint64_t)nb > (uint64_t)INT64_MAX) {
			error("'%s': tensor '%s': shape %s is too large", path, d->name, sh);
			goto fail;
		}
		json_t *t = json_object();
		json_t *shape = json_array();
		for (int k = 0; k < d->ndim; k++)
			json_array_append_new(shape, json_integer(d->shape[k]));
		json_object_set_new(t, "dtype", json_string(st_dtype_names[d->dt]));
		json_object_set_new(t, "shape", shape);
		json_t *offs = json_array();
		json_array_append_new(offs, json_integer((json_int_t)off));
		json_array_append_new(offs, json_integer((json_int_t)(off + (uint64_t)nb)));
		json_object_set_new(t, "data_offsets", offs);
		if (json_object_set_new(root, d->name, t) < 0) {
			error("'%s': tensor name '%s' is not valid UTF-8", path, d->name);
			goto fail;
		}
		size[i] = (uint64_t)nb;
		off += (uint64_t)nb;
	}
	return root;
fail:
	json_decref(root);
	return NULL;
}

struct st_writer *st_create(const char *path, int n, const struct st_tensor_decl *decl, int nmeta,
			    const char *const *meta_keys, const char *const *meta_values)
{
	if (n < 0 || nmeta < 0)
		BUG("st_create of '%s' with %d tensors and %d metadata entries", path, n, nmeta);
	uint64_t *size = xcalloc((size_t)(n ? n : 1), sizeof(uint64_t));
	json_t *root = st_header(path, n, decl, nmeta, meta_keys, meta_values, size);
	if (!root) {
		free(size);
		return NULL;
	}
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		BUG("cannot serialise the header of '%s'", path);
	size_t len = strlen(text), padded = (len + 7) / 8 * 8;
	if (padded > ST_MAX_HEADER) {
		error("'%s': the header would take %zu bytes, over the safetensors limit of %d", path, padded,
		      ST_MAX_HEADER);
		free(text);
		free(size);
		return NULL;
	}

	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	FILE *fp = fd < 0 ? NULL : fdopen(fd, "wb");
	if (!fp) {
		error_errno("cannot create '%s'", path);
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
		free(text);
		free(size);
		return NULL;
	}
	setvbuf(fp, NULL, _IOFBF, 1 << 20);
	unsigned char le[8];
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	int bad = fwrite(le, 1, 8, fp) != 8 || fwrite(text, 1, len, fp) != len;
	for (size_t i = len; i < padded && !bad; i++)
		bad = putc(' ', fp) == EOF;
	free(text);
	if (bad) {
		error_errno("cannot write '%s'", path);
		fclose(fp);
		unlink(path);
		free(size);
		return NULL;
	}

	struct st_writer *w = xcalloc(1, sizeof(*w));
	w->path = xstrdup(path);
	w->fp = fp;
	w->n = n;
	w->size = size;
	w->names = xcalloc((size_t)(n ? n : 1), sizeof(char *));
	for (int i = 0; i < n; i++)
		w->names[i] = xstrdup(decl[i].name);
	return w;
}

static int st_fail(struct st_writer *w)
{
	w->failed = 1;
	return -1;
}

static int st_put(struct st_writer *w, const void *data, size_t bytes)
{
	if (bytes && !data)
		BUG("NULL data of %zu bytes for '%s'", bytes, w->path);
	if (bytes && fwrite(data, 1, bytes, w->fp) != bytes) {
		error_errno("cannot write '%s'", w->path);
		return st_fail(w);
	}
	return 0;
}

/* Refuse writes on a writer that failed, or past the last tensor. */
static int st_check_writable(struct st_writer *w, size_t bytes)
{
	if (w->failed)
		return error("'%s': not written further after an earlier error", w->path);
	if (w->cur >= w->n) {
		error("'%s': all %d tensors are written; %zu more bytes given", w->path, w->n, bytes);
		return st_fail(w);
	}
	return 0;
}

int st_write(struct st_writer *w, const void *data, size_t bytes)
{
	if (st_check_writable(w, bytes) < 0)
		return -1;
	if (w->done) {
		error("'%s': tensor '%s' was begun in parts (%llu of %llu bytes): st_write cannot follow", w->path,
		      w->names[w->cur], (unsigned long long)w->done, (unsigned long long)w->size[w->cur]);
		return st_fail(w);
	}
	if (bytes != w->size[w->cur]) {
		error("'%s': tensor '%s' is %llu bytes, %zu given", w->path, w->names[w->cur],
		      (unsigned long long)w->size[w->cur], bytes);
		return st_fail(w);
	}
	if (st_put(w, data, bytes) < 0)
		return -1;
	w->cur++;
	return 0;
}

/* Move past empty tensors when no bytes of the current one are written. */
static void st_skip_empty(struct st_writer *w)
{
	while (!w->done && w->cur < w->n && w->size[w->cur] == 0)
		w->cur++;
}

int st_write_part(struct st_writer *w, const void *data, size_t bytes)
{
	if (w->failed)
		return error("'%s': not written further after an earlier error", w->path);
	if (bytes == 0)
		return 0;
	st_skip_empty(w);
	if (st_check_writable(w, bytes) < 0)
		return -1;
	uint64_t left = w->size[w->cur] - w->done;
	if (bytes > left) {
		error("'%s': a piece of %zu bytes runs past the end of tensor '%s' (%llu of its %llu bytes were "
		      "written)",
		      w->path, bytes, w->names[w->cur], (unsigned long long)w->done,
		      (unsigned long long)w->size[w->cur]);
		return st_fail(w);
	}
	if (st_put(w, data, bytes) < 0)
		return -1;
	w->done += bytes;
	if (w->done == w->size[w->cur]) {
		w->cur++;
		w->done = 0;
	}
	return 0;
}

static void st_free_writer(struct st_writer *w)
{
	for (int i = 0; i < w->n; i++)
		free(w->names[i]);
	free(w->names);
	free(w->size);
	free(w->path);
	free(w);
}

int st_finish(struct st_writer *w)
{
	int r = 0;
	st_skip_empty(w);
	if (w->failed)
		r = error("'%s': not finished after an earlier error; the file is incomplete", w->path);
	else if (w->cur < w->n)
		r = error("'%s': tensor '%s' (%d of %d) has %llu of its %llu bytes; the file is incomplete",
			  w->path, w->names[w->cur], w->cur + 1, w->n, (unsigned long long)w->done,
			  (unsigned long long)w->size[w->cur]);
	if (r == 0 && (fflush(w->fp) != 0 || ferror(w->fp)))
		r = error_errno("cannot write '%s'", w->path);
	if (r == 0 && fsync(fileno(w->fp)) < 0)
		r = error_errno("cannot sync '%s'", w->path);
	if (fclose(w->fp) != 0 && r == 0)
		r = error_errno("cannot close '%s'", w->path);
	st_free_writer(w);
	return r;
}

void st_abort(struct st_writer *w)
{
	if (!w)
		return;
	fclose(w->fp);
	unlink(w->path);
	st_free_writer(w);
}

/* ---- model folders -------------------------------------------------------------- */

struct st_entry {
	const char *name; /* owned by its file */
	int file;
	int idx;
};

struct st_folder {
	char *dir;
	int nfiles;
	struct st_file **files;
	int n;
	struct st_entry *e; /* sorted by name */
};

static int st_cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct st_entry *)a)->name, ((const struct st_entry *)b)->name);
}

static int st_cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name of an index: a file in the folder itself. */
static int st_plain_name(const char *s)
{
	return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int st_file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* Every tensor of every file, sorted; duplicates across files refused. */
static int st_folder_entries(struct st_folder *d, const char *index)
{
	int total = 0;
	for (int k = 0; k < d->nfiles; k++)
		total += st_count(d->files[k]);
	d->e = xcalloc((size_t)(total ? total : 1), sizeof(*d->e));
	for (int k = 0; k < d->nfiles; k++)
		for (int i = 0; i < st_count(d->files[k]); i++)
			d->e[d->n++] = (struct st_entry){ st_name(d->files[k], i), k, i };
	qsort(d->e, (size_t)d->n, sizeof(*d->e), st_cmp_entry);
	for (int i = 1; i < d->n; i++)
		if (!strcmp(d->e[i - 1].name, d->e[i].name))
			return error("'%s': tensor '%s' is in two shards, '%s' and '%s'", index, d->e[i].name,
				     st_path(d->files[d->e[i - 1].file]), st_path(d->files[d->e[i].file]));
	return 0;
}

/* Open the shards named by the index file of d->dir. */
static int st_folder_index(struct st_folder *d, const char *index)
{
	json_error_t je;
	json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		if (je.line <= 0)
			return error("cannot read JSON file '%s': %s", index, je.text);
		return error("%s:%d:%d: invalid JSON: %s", index, je.line, je.column, je.text);
	}
	int r = -1;
	const char **shards = NULL;
	const json_t *map = json_object_get(root, "weight_map");
	if (!json_is_object(map)) {
		error("'%s': expected a JSON object with a \"weight_map\" object", index);
		goto out;
	}
	size_t nmap = json_object_size(map), ns = 0;
	shards = xcalloc(nmap ? nmap : 1, sizeof(*shards));
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)map, key, v) {
		if (!json_is_string(v) || !st_plain_name(json_string_value(v))) {
			error("'%s': weight_map entry of '%s' is not the file name of a shard in the folder", index,
			      key);
			goto out;
		}
		shards[ns++] = json_string_value(v);
	}
	qsort(shards, ns, sizeof(*shards), st_cmp_str);
	d->files = xcalloc(ns ? ns : 1, sizeof(*d->files));
	for (size_t i = 0; i < ns; i++) {
		if (i && !strcmp(shards[i], shards[i - 1]))
			continue;
		char *p = xasprintf("%s/%s", d->dir, shards[i]);
		d->files[d->nfiles] = st_open(p);
		free(p);
		if (!d->files[d->nfiles]) {
			error("'%s': cannot read the shard '%s' of its weight_map", index, shards[i]);
			goto out;
		}
		d->nfiles++;
	}
	/* each weight_map entry in its shard */
	json_object_foreach((json_t *)map, key, v) {
		const char *shard = json_string_value(v);
		int k = 0;
		while (strcmp(shard, strrchr(st_path(d->files[k]), '/') + 1))
			k++;
		if (st_find(d->files[k], key) < 0) {
			error("'%s': tensor '%s' of the weight_map is not in its shard '%s'", index, key,
			      st_path(d->files[k]));
			goto out;
		}
	}
	/* each shard tensor in the weight_map, under its shard */
	for (int k = 0; k < d->nfiles; k++) {
		const char *shard = strrchr(st_path(d->files[k]), '/') + 1;
		for (int i = 0; i < st_count(d->files[k]); i++) {
			const char *name = st_name(d->files[k], i);
			const char *mapped = json_string_value(json_object_get(map, name));
			if (!mapped) {
				error("'%s': tensor '%s' of shard '%s' is missing from the weight_map", index, name,
				      st_path(d->files[k]));
				goto out;
			}
			if (strcmp(mapped, shard)) {
				error("'%s': tensor '%s' is in shard '%s' and in shard '%s/%s' (named by the "
				      "weight_map)",
				      index, name, st_path(d->files[k]), d->dir, mapped);
				goto out;
			}
		}
	}
	r = st_folder_entries(d, index);
out:
	free(shards);
	json_decref(root);
	return r;
}

struct st_folder *st_folder_open(const char *dir)
{
	struct st_folder *d = xcalloc(1, sizeof(*d));
	d->dir = xstrdup(dir);
	char *single = xasprintf("%s/" ST_SINGLE_FILE, dir);
	char *index = xasprintf("%s/" ST_INDEX_FILE, dir);
	int r;
	if (st_file_exists(single)) {
		/* transformers' order: the single file first */
		d->files = xcalloc(1, sizeof(*d->files));
		d->files[0] = st_open(single);
		d->nfiles = d->files[0] ? 1 : 0;
		r = d->files[0] ? st_folder_entries(d, single) : -1;
	} else if (st_file_exists(index)) {
		r = st_folder_index(d, index);
	} else {
		r = error("'%s': no " ST_SINGLE_FILE " nor " ST_INDEX_FILE " in it (not a Hugging Face model "
			  "folder?)",
			  dir);
	}
	free(single);
	free(index);
	if (r < 0) {
		st_folder_close(d);
		return NULL;
	}
	return d;
}

int st_folder_count(const struct st_folder *d)
{
	return d->n;
}

const char *st_folder_name(const struct st_folder *d, int i)
{
	if (i < 0 || i >= d->n)
		BUG("tensor index %d out of range [0, %d) in folder '%s'", i, d->n, d->dir);
	return d->e[i].name;
}

int st_folder_find(const struct st_folder *d, const char *name, struct st_file **f, int *idx)
{
	struct st_entry key = { name, 0, 0 };
	const struct st_entry *e = d->n ? bsearch(&key, d->e, (size_t)d->n, sizeof(*d->e), st_cmp_entry) : NULL;
	if (!e)
		return -1;
	if (f)
		*f = d->files[e->file];
	if (idx)
		*idx = e->idx;
	return 0;
}

void st_folder_close(struct st_folder *d)
{
	if (!d)
		return;
	for (int k = 0; k < d->nfiles; k++)
		st_close(d->files[k]);
	free(d->files);
	free(d->e);
	free(d->dir);
	free(d);
}

/* Python's json writes \u00e9 where jansson writes \u00E9. */
static void st_lower_escapes(char *s)
{
	for (; *s; s++) {
		if (*s != '\\')
			continue;
		if (s[1] == 'u')
			for (int i = 2; i < 6 && s[i]; i++)
				if (s[i] >= 'A' && s[i] <= 'F')
					s[i] = (char)(s[i] - 'A' + 'a');
		if (s[1])
			s++;
	}
}

int st_write_index(const char *dir, int n, const char *const *names, const char *const *files,
		   uint64_t total_size)
{
	char *path = xasprintf("%s/" ST_INDEX_FILE, dir);
	json_t *root = json_object(), *meta = json_object(), *map = json_object();
	json_object_set_new(root, "metadata", meta);
	json_object_set_new(root, "weight_map", map);
	char *text = NULL;
	int r = -1;
	if (total_size > (uint64_t)INT64_MAX) {
		error("'%s': total_size %llu is too large", path, (unsigned long long)total_size);
		goto out;
	}
	json_object_set_new(meta, "total_size", json_integer((json_int_t)total_size));
	for (int i = 0; i < n; i++) {
		if (!names[i] || !files[i])
			BUG("entry %d of '%s' is NULL", i, path);
		if (!st_plain_name(files[i])) {
			error("'%s': shard '%s' of tensor '%s' is not a plain file name", path, files[i], names[i]);
			goto out;
		}
		if (json_object_get(map, names[i])) {
			error("'%s': tensor '%s' is given twice", path, names[i]);
			goto out;
		}
		json_t *s = json_string(files[i]);
		if (!s || json_object_set_new(map, names[i], s) < 0) {
			error("'%s': tensor '%s' or its shard name is not valid UTF-8", path, names[i]);
			goto out;
		}
	}
	text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	if (!text)
		BUG("cannot serialise '%s'", path);
	st_lower_escapes(text);
	struct afile af;
	if (afile_open(&af, path) < 0)
		goto out;
	if (fputs(text, af.fp) == EOF || putc('\n', af.fp) == EOF) {
		error_errno("cannot write '%s'", path);
		afile_abort(&af);
		goto out;
	}
	if (afile_commit(&af) < 0) {
		afile_abort(&af);
		goto out;
	}
	r = 0;
out:
	free(text);
	json_decref(root);
	free(path);
	return r;
}
