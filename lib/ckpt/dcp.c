/*
 * dcp.c - PyTorch Distributed Checkpoint folders, read (see dcp.h).
 *
 * The .metadata pickle becomes a tree of data-class objects (pickle.c's
 * allow-list); this file walks it once into struct dcp_item records:
 *
 *   Metadata.state_dict_metadata: {fqn: TensorStorageMetadata | BytesStorageMetadata}
 *     TensorStorageMetadata: properties (TensorProperties: a tuple whose
 *       first element is the dtype), size (the global shape), chunks (a list
 *       of ChunkStorageMetadata: offsets, sizes)
 *   Metadata.storage_data: {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset, length)}
 *     offset is the chunk's offsets for a tensor chunk, None for a bytes item
 *
 * Invariants after dcp_open:
 *   1. items are sorted by fqn, names unique;
 *   2. every tensor chunk and every bytes item has its storage (a file
 *      index, an offset and a length inside that file's size, checked when
 *      the file is mapped);
 *   3. every chunk lies inside its tensor, and the chunks of a tensor do not
 *      overlap and add up to its element count (so they cover it once).
 */
#include "ckpt/dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mapfile.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "base/xalloc.h"
#include "ckpt/torch_zip.h"

struct dcp_file {
	char *name; /* relative to the folder */
	const void *map;
	size_t len;
	bool mapped;
};

struct dcp {
	char *dir;
	struct dcp_item *items;
	int n;
	struct dcp_file *files;
	int nfiles;
};

/* ---- walking the metadata tree ---- */

static bool is_class(const struct pk_value *v, const char *cls)
{
	if (!v || v->kind != PK_OBJECT)
		return false;
	size_t n = strlen(v->obj.cls), m = strlen(cls);
	return n >= m && !strcmp(v->obj.cls + n - m, cls) && (n == m || v->obj.cls[n - m - 1] == '.');
}

/* attribute `name` of a data-class object (its state dict), or NULL */
static const struct pk_value *attr(const struct pk_value *obj, const char *name)
{
	if (!obj || obj->kind != PK_OBJECT || !obj->obj.state || obj->obj.state->kind != PK_DICT)
		return NULL;
	return pk_get(obj->obj.state, name);
}

static int ints(const struct pk_value *v, int64_t *out, int *n)
{
	if (!v || (v->kind != PK_TUPLE && v->kind != PK_LIST) || v->seq.n > PK_MAX_NDIM)
		return -1;
	for (size_t i = 0; i < v->seq.n; i++) {
		if (v->seq.v[i]->kind != PK_INT)
			return -1;
		out[i] = v->seq.v[i]->i;
	}
	*n = (int)v->seq.n;
	return 0;
}

static int dtype_of(const struct pk_value *props, enum pk_dtype *dt)
{
	const struct pk_value *st = props && props->kind == PK_OBJECT ? props->obj.state : NULL, *g = NULL;
	if (st && st->kind == PK_TUPLE && st->seq.n >= 1)
		g = st->seq.v[0];
	else if (st && st->kind == PK_DICT)
		g = pk_get(st, "dtype");
	if (!g || g->kind != PK_GLOBAL || strncmp(g->s.p, "torch.", 6))
		return -1;
	for (int i = 0; i < PK_NDTYPES; i++)
		if (!strcmp(g->s.p + 6, pk_dtype_name((enum pk_dtype)i))) {
			*dt = (enum pk_dtype)i;
			return 0;
		}
	return -1;
}

static int by_fqn(const void *a, const void *b)
{
	return strcmp(((const struct dcp_item *)a)->fqn, ((const struct dcp_item *)b)->fqn);
}

const struct dcp_item *dcp_find(const struct dcp *c, const char *fqn)
{
	struct dcp_item key = { .fqn = (char *)fqn };
	return bsearch(&key, c->items, (size_t)c->n, sizeof(*c->items), by_fqn);
}

int dcp_count(const struct dcp *c)
{
	return c->n;
}

const struct dcp_item *dcp_item(const struct dcp *c, int i)
{
	return &c->items[i];
}

static int file_index(struct dcp *c, const char *name)
{
	for (int i = 0; i < c->nfiles; i++)
		if (!strcmp(c->files[i].name, name))
			return i;
	if (!*name || strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, "."))
		return -1;
	c->files = xrealloc(c->files, (size_t)(c->nfiles + 1) * sizeof(*c->files));
	c->files[c->nfiles] = (struct dcp_file){ .name = xstrdup(name) };
	return c->nfiles++;
}

/* Elements of a shape the reader has checked (each size in [0, DCP_MAX_NUMEL]
 * and the product too, read_item), or of one the caller made. */
static int64_t numel(const int64_t *size, int ndim)
{
	int64_t n = 1;
	for (int i = 0; i < ndim; i++)
		n *= size[i];
	return n;
}

/* The product of a shape from a file, or -1 when a size is negative or the
 * product passes DCP_MAX_NUMEL (no arithmetic on it can overflow then). */
static int64_t checked_numel(const int64_t *size, int ndim)
{
	int64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		if (size[i] < 0 || size[i] > DCP_MAX_NUMEL)
			return -1;
		if (size[i] == 0)
			n = 0;
		else if (n > DCP_MAX_NUMEL / size[i])
			return -1;
		else
			n *= size[i];
	}
	return n;
}

/* one state_dict_metadata entry */
static int read_item(struct dcp *c, const struct pk_value *key, const struct pk_value *v, struct dcp_item *it)
{
	if (key->kind != PK_STR)
		return error("'%s/.metadata': an item whose name is a %s", c->dir, pk_kind_name(key->kind));
	it->fqn = xstrdup(key->s.p);
	if (is_class(v, "BytesStorageMetadata")) {
		it->tensor = false;
		it->chunks = xcalloc(1, sizeof(*it->chunks));
		it->nchunks = 1;
		it->chunks[0].file = -1;
		return 0;
	}
	if (!is_class(v, "TensorStorageMetadata"))
		return error("'%s/.metadata': item '%s' is a %s, not a tensor or bytes item", c->dir, it->fqn,
			     v->kind == PK_OBJECT ? v->obj.cls : pk_kind_name(v->kind));
	it->tensor = true;
	if (dtype_of(attr(v, "properties"), &it->dtype) < 0)
		return error("'%s/.metadata': tensor '%s' has no dtype megac reads", c->dir, it->fqn);
	if (ints(attr(v, "size"), it->size, &it->ndim) < 0)
		return error("'%s/.metadata': tensor '%s' has no size", c->dir, it->fqn);
	for (int j = 0; j < it->ndim; j++) /* (a 0 elsewhere must not let a size pass the bound) */
		if (it->size[j] < 0 || it->size[j] > DCP_MAX_NUMEL)
			return error("'%s/.metadata': tensor '%s' has a size of %lld along axis %d", c->dir, it->fqn,
				     (long long)it->size[j], j);
	if (checked_numel(it->size, it->ndim) < 0)
		return error("'%s/.metadata': tensor '%s' has more than %lld elements", c->dir, it->fqn,
			     (long long)DCP_MAX_NUMEL);
	const struct pk_value *ch = attr(v, "chunks");
	if (!ch || ch->kind != PK_LIST)
		return error("'%s/.metadata': tensor '%s' has no chunk list", c->dir, it->fqn);
	it->nchunks = (int)ch->seq.n;
	it->chunks = xcalloc(ch->seq.n ? ch->seq.n : 1, sizeof(*it->chunks));
	int64_t total = 0;
	for (int k = 0; k < it->nchunks; k++) {
		struct dcp_chunk *q = &it->chunks[k];
		int no, ns;
		q->file = -1;
		if (ints(attr(ch->seq.v[k], "offsets"), q->offset, &no) < 0 ||
		    ints(attr(ch->seq.v[k], "sizes"), q->size, &ns) < 0 || no != it->ndim || ns != it->ndim)
			return error("'%s/.metadata': chunk %d of tensor '%s' is malformed", c->dir, k, it->fqn);
		/* no sum can overflow: every bound is checked against the tensor's (<= DCP_MAX_NUMEL) first */
		for (int j = 0; j < it->ndim; j++)
			if (q->offset[j] < 0 || q->size[j] < 0 || q->size[j] > it->size[j] ||
			    q->offset[j] > it->size[j] - q->size[j])
				return error("'%s/.metadata': chunk %d of tensor '%s' reaches outside it", c->dir, k,
					     it->fqn);
		for (int p = 0; p < k; p++) {
			bool apart = false;
			for (int j = 0; j < it->ndim && !apart; j++)
				apart = q->offset[j] >= it->chunks[p].offset[j] + it->chunks[p].size[j] ||
					it->chunks[p].offset[j] >= q->offset[j] + q->size[j];
			if (!apart && numel(q->size, it->ndim) && numel(it->chunks[p].size, it->ndim))
				return error("'%s/.metadata': chunks %d and %d of tensor '%s' overlap", c->dir, p, k,
					     it->fqn);
		}
		total += numel(q->size, it->ndim);
	}
	if (total != numel(it->size, it->ndim))
		return error("'%s/.metadata': the chunks of tensor '%s' hold %lld of its %lld elements", c->dir, it->fqn,
			     (long long)total, (long long)numel(it->size, it->ndim));
	return 0;
}

/* one storage_data entry: where a chunk or bytes item is */
static int read_storage(struct dcp *c, const struct pk_value *key, const struct pk_value *v)
{
	const struct pk_value *fqn = attr(key, "fqn"), *off = attr(key, "offset");
	const struct pk_value *rel = attr(v, "relative_path"), *at = attr(v, "offset"), *len = attr(v, "length");
	if (!is_class(key, "MetadataIndex") || !fqn || fqn->kind != PK_STR || !is_class(v, "_StorageInfo") || !rel ||
	    rel->kind != PK_STR || !at || at->kind != PK_INT || !len || len->kind != PK_INT || at->i < 0 || len->i < 0)
		return error("'%s/.metadata': a storage entry is malformed", c->dir);
	const struct pk_value *tr = attr(v, "transform_descriptors");
	if (tr && tr->kind != PK_NONE && !((tr->kind == PK_LIST || tr->kind == PK_TUPLE) && tr->seq.n == 0))
		return error("'%s/.metadata': item '%s' is stored transformed (compressed); megac reads plain items only",
			     c->dir, fqn->s.p);
	struct dcp_item *it = (struct dcp_item *)dcp_find(c, fqn->s.p);
	if (!it)
		return error("'%s/.metadata': storage for '%s', which is not an item", c->dir, fqn->s.p);
	struct dcp_chunk *q = NULL;
	if (!it->tensor) {
		q = &it->chunks[0];
	} else {
		int64_t o[PK_MAX_NDIM];
		int no;
		if (ints(off, o, &no) < 0 || no != it->ndim)
			return error("'%s/.metadata': storage for tensor '%s' without the chunk's offsets", c->dir,
				     it->fqn);
		for (int k = 0; k < it->nchunks && !q; k++)
			if (!memcmp(it->chunks[k].offset, o, (size_t)no * sizeof(*o)))
				q = &it->chunks[k];
		if (!q)
			return error("'%s/.metadata': storage for a chunk of '%s' that the tensor does not have", c->dir,
				     it->fqn);
	}
	if (q->file >= 0)
		return error("'%s/.metadata': a chunk of '%s' is stored twice", c->dir, it->fqn);
	q->file = file_index(c, rel->s.p);
	if (q->file < 0)
		return error("'%s/.metadata': item '%s' is stored in '%s', not a file of the folder", c->dir, it->fqn,
			     rel->s.p);
	q->at = (uint64_t)at->i;
	q->len = (uint64_t)len->i;
	return 0;
}

struct dcp *dcp_open(const char *dir)
{
	char *path = xasprintf("%s/.metadata", dir);
	const void *map;
	size_t len;
	if (map_file(path, &map, &len) < 0) {
		free(path);
		return NULL;
	}
	struct dcp *c = xcalloc(1, sizeof(*c));
	c->dir = xstrdup(dir);
	struct pk_doc *d = pk_doc_new();
	struct pk_load_opts o = { path, NULL, NULL };
	const struct pk_value *root = pk_loads(d, map, len, &o);
	const struct pk_value *sdm = attr(root, "state_dict_metadata"), *sd = attr(root, "storage_data");
	int rc = root ? 0 : -1;
	if (rc == 0 && (!is_class(root, "Metadata") || !sdm || sdm->kind != PK_DICT || !sd || sd->kind != PK_DICT))
		rc = error("'%s' is not PyTorch Distributed Checkpoint metadata (no state_dict_metadata and "
			   "storage_data)",
			   path);
	if (rc == 0) {
		c->items = xcalloc(sdm->seq.n ? sdm->seq.n : 1, sizeof(*c->items));
		for (size_t i = 0; rc == 0 && i < sdm->seq.n; i++) {
			rc = read_item(c, sdm->seq.v[2 * i], sdm->seq.v[2 * i + 1], &c->items[i]);
			c->n = (int)i + 1;
		}
	}
	if (rc == 0) {
		qsort(c->items, (size_t)c->n, sizeof(*c->items), by_fqn);
		for (int i = 1; rc == 0 && i < c->n; i++)
			if (!strcmp(c->items[i].fqn, c->items[i - 1].fqn))
				rc = error("'%s': item '%s' is there twice", path, c->items[i].fqn);
	}
	for (size_t i = 0; rc == 0 && i < sd->seq.n; i++)
		rc = read_storage(c, sd->seq.v[2 * i], sd->seq.v[2 * i + 1]);
	for (int i = 0; rc == 0 && i < c->n; i++)
		for (int k = 0; rc == 0 && k < c->items[i].nchunks; k++)
			if (c->items[i].chunks[k].file < 0)
				rc = error("'%s': %s '%s' has no storage entry", path,
					   c->items[i].tensor ? "a chunk of tensor" : "bytes item", c->items[i].fqn);
	pk_doc_free(d);
	map_file_release(map, len);
	free(path);
	if (rc < 0) {
		dcp_close(c);
		return NULL;
	}
	return c;
}

void dcp_close(struct dcp *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++) {
		free(c->items[i].fqn);
		free(c->items[i].chunks);
	}
	for (int i = 0; i < c->nfiles; i++) {
		if (c->files[i].mapped)
			map_file_release(c->files[i].map, c->files[i].len);
		free(c->files[i].name);
	}
	free(c->files);
	free(c->items);
	free(c->dir);
	free(c);
}

/* the archive of a chunk, loaded into d (copied first when copy: the
 * document then outlives the mapping, which dcp_close releases) */
static struct pk_value *load_chunk(struct dcp *c, struct pk_doc *d, const struct dcp_item *it,
				   const struct dcp_chunk *q, bool copy)
{
	struct dcp_file *f = &c->files[q->file];
	if (!f->mapped) {
		char *p = xasprintf("%s/%s", c->dir, f->name);
		int r = map_file(p, &f->map, &f->len);
		free(p);
		if (r < 0)
			return NULL;
		f->mapped = true;
	}
	if (q->at > f->len || q->len > f->len - q->at) {
		error("'%s/%s': item '%s' at bytes %llu..%llu, past the end of the file (%zu bytes): truncated?", c->dir,
		      f->name, it->fqn, (unsigned long long)q->at, (unsigned long long)(q->at + q->len), f->len);
		return NULL;
	}
	char *what = xasprintf("%s/%s@%llu (%s)", c->dir, f->name, (unsigned long long)q->at, it->fqn);
	const char *bytes = (const char *)f->map + q->at;
	if (copy) {
		char *dup = xmalloc(q->len + 1);
		memcpy(dup, bytes, q->len);
		pk_doc_attach(d, free, dup);
		bytes = dup;
	}
	struct pk_value *v = torch_load_mem(d, bytes, (size_t)q->len, what);
	free(what);
	return v;
}

struct pk_value *dcp_read_object(struct dcp *c, struct pk_doc *d, const struct dcp_item *it)
{
	if (it->tensor) {
		error("'%s': '%s' is a tensor, not a bytes item", c->dir, it->fqn);
		return NULL;
	}
	return load_chunk(c, d, it, &it->chunks[0], true);
}

int dcp_read_tensor(struct dcp *c, const struct dcp_item *it, void *out)
{
	if (!it->tensor)
		return error("'%s': '%s' is a bytes item, not a tensor", c->dir, it->fqn);
	size_t es = pk_dtype_size(it->dtype);
	int rc = 0;
	for (int k = 0; rc == 0 && k < it->nchunks; k++) {
		const struct dcp_chunk *q = &it->chunks[k];
		struct pk_doc *d = pk_doc_new();
		const struct pk_value *t = load_chunk(c, d, it, q, false);
		if (!t) {
			rc = -1;
		} else if (t->kind != PK_TENSOR || t->t.storage->st.dtype != it->dtype || t->t.ndim != it->ndim ||
			   memcmp(t->t.size, q->size, (size_t)it->ndim * sizeof(int64_t))) {
			rc = error("'%s': chunk %d of '%s' is not a %s tensor of the chunk's size", c->dir, k, it->fqn,
				   pk_dtype_name(it->dtype));
		} else if (!pk_tensor_contiguous(t) || t->t.storage->st.numel - t->t.offset < numel(q->size, it->ndim)) {
			/* (as DCP saves chunks; a stride-0 view would claim elements it does not hold) */
			rc = error("'%s': chunk %d of '%s' is not a contiguous tensor over its own elements", c->dir, k,
				   it->fqn);
		} else {
			int64_t n = numel(q->size, it->ndim);
			char *buf = xmalloc((size_t)n * es + 1);
			pk_tensor_gather(t, buf);
			/* copy row by row (the last dimension) into the global tensor */
			int nd = it->ndim;
			int64_t row = nd ? q->size[nd - 1] : 1, rows = row ? n / row : 0;
			int64_t idx[PK_MAX_NDIM] = { 0 };
			for (int64_t r = 0; r < rows; r++) {
				int64_t at = 0;
				for (int j = 0; j < nd; j++)
					at = at * it->size[j] + q->offset[j] + (j < nd - 1 ? idx[j] : 0);
				memcpy((char *)out + (size_t)at * es, buf + (size_t)(r * row) * es, (size_t)row * es);
				for (int j = nd - 2; j >= 0; j--) { /* the next row's index */
					if (++idx[j] < q->size[j])
						break;
					idx[j] = 0;
				}
			}
			free(buf);
		}
		pk_doc_free(d);
	}
	return rc;
}

/* ---- writing ---- */

struct dcp_writer {
	char *dir;
	struct afile data; /* __0_0.distcp */
	uint64_t pos;
	struct dcp_item *items; /* in order of first use */
	int n, cap;
	bool failed;
};

struct dcp_writer *dcp_create(const char *dir)
{
	struct dcp_writer *w = xcalloc(1, sizeof(*w));
	w->dir = xstrdup(dir);
	char *p = xasprintf("%s/__0_0.distcp", dir);
	int r = afile_open(&w->data, p);
	free(p);
	if (r < 0) {
		free(w->dir);
		free(w);
		return NULL;
	}
	return w;
}

void dcp_abort(struct dcp_writer *w)
{
	if (!w)
		return;
	afile_abort(&w->data);
	for (int i = 0; i < w->n; i++) {
		free(w->items[i].fqn);
		free(w->items[i].chunks);
		for (int k = 0; k < w->items[i].npath; k++)
			free(w->items[i].path[k]);
		free(w->items[i].path);
	}
	free(w->items);
	free(w->dir);
	free(w);
}

static struct dcp_item *writer_item(struct dcp_writer *w, const char *fqn)
{
	for (int i = w->n - 1; i >= 0; i--) /* chunks of one tensor come together */
		if (!strcmp(w->items[i].fqn, fqn))
			return &w->items[i];
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 64;
		w->items = xrealloc(w->items, (size_t)w->cap * sizeof(*w->items));
	}
	struct dcp_item *it = &w->items[w->n++];
	memset(it, 0, sizeof(*it));
	it->fqn = xstrdup(fqn);
	return it;
}

/* v torch.save'd at the end of the data file; where in *q */
static int put_blob(struct dcp_writer *w, struct pk_value *v, const char *fqn, struct dcp_chunk *q)
{
	struct sbuf b = SBUF_INIT;
	int r = torch_save_mem(&b, v, fqn);
	if (r == 0 && b.len && fwrite(b.buf, 1, b.len, w->data.fp) != b.len)
		r = error_errno("cannot write '%s'", w->data.path);
	q->file = 0;
	q->at = w->pos;
	q->len = b.len;
	w->pos += b.len;
	sbuf_release(&b);
	if (r < 0)
		w->failed = true;
	return r;
}

int dcp_put_chunk(struct dcp_writer *w, const char *fqn, enum pk_dtype dt, int ndim, const int64_t *gsize,
		  const int64_t *offset, const int64_t *csize, const void *data)
{
	if (w->failed)
		return -1;
	if (ndim < 0 || ndim > PK_MAX_NDIM)
		BUG("dcp_put_chunk: %d dimensions", ndim);
	struct dcp_item *it = writer_item(w, fqn);
	if (!it->nchunks) {
		it->tensor = true;
		it->dtype = dt;
		it->ndim = ndim;
		memcpy(it->size, gsize, (size_t)ndim * sizeof(*gsize));
	} else if (!it->tensor || it->dtype != dt || it->ndim != ndim ||
		   memcmp(it->size, gsize, (size_t)ndim * sizeof(*gsize))) {
		BUG("dcp_put_chunk: '%s' given as another tensor before", fqn);
	}
	it->chunks = xrealloc(it->chunks, (size_t)(it->nchunks + 1) * sizeof(*it->chunks));
	struct dcp_chunk *q = &it->chunks[it->nchunks++];
	memcpy(q->offset, offset, (size_t)ndim * sizeof(*offset));
	memcpy(q->size, csize, (size_t)ndim * sizeof(*csize));
	struct pk_doc *d = pk_doc_new();
	struct pk_value *t = pk_tensor(d, pk_storage(d, dt, data, numel(csize, ndim)), 0, ndim, csize, NULL);
	int r = t ? put_blob(w, t, fqn, q) : -1;
	pk_doc_free(d);
	return r;
}

int dcp_put_object(struct dcp_writer *w, const char *fqn, struct pk_value *v)
{
	if (w->failed)
		return -1;
	struct dcp_item *it = writer_item(w, fqn);
	if (it->nchunks)
		BUG("dcp_put_object: '%s' given twice", fqn);
	it->chunks = xcalloc(1, sizeof(*it->chunks));
	it->nchunks = 1;
	return put_blob(w, v, fqn, &it->chunks[0]);
}

int dcp_put_path(struct dcp_writer *w, const char *fqn, int n, const char *const *path)
{
	if (w->failed)
		return -1;
	struct dcp_item *it = writer_item(w, fqn);
	if (!it->nchunks || it->npath || n < 1)
		BUG("dcp_put_path: '%s' not given before, or given a path twice", fqn);
	it->path = xcalloc((size_t)n, sizeof(*it->path));
	for (int k = 0; k < n; k++)
		it->path[k] = xstrdup(path[k]);
	it->npath = n;
	return 0;
}

static struct pk_value *size_of(struct pk_doc *d, const int64_t *x, int n)
{
	struct pk_value *t = pk_tuple(d), *args = pk_tuple(d);
	for (int i = 0; i < n; i++)
		pk_append(t, pk_int(d, x[i]));
	pk_append(args, t);
	return pk_object(d, "torch.Size", args, NULL);
}

#define DCP_META "torch.distributed.checkpoint.metadata."

/* TensorProperties' state: (dtype, layout, requires_grad, memory_format, pin_memory) */
static struct pk_value *properties(struct pk_doc *d, enum pk_dtype dt)
{
	char *g = xasprintf("torch.%s", pk_dtype_name(dt));
	struct pk_value *st = pk_tuple(d), *a = pk_tuple(d), *b = pk_tuple(d);
	pk_append(st, pk_global(d, g));
	free(g);
	pk_append(a, pk_str(d, "torch.strided"));
	pk_append(st, pk_object(d, "torch.serialization._get_layout", a, NULL));
	pk_append(st, pk_bool(d, false));
	pk_append(b, pk_int(d, 0)); /* TORCH_CONTIGUOUS_FORMAT */
	pk_append(st, pk_object(d, DCP_META "_MEM_FORMAT_ENCODING", b, NULL));
	pk_append(st, pk_bool(d, false));
	return pk_object(d, DCP_META "TensorProperties", NULL, st);
}

static struct pk_value *dataclass(struct pk_doc *d, const char *cls, struct pk_value **state)
{
	*state = pk_dict(d);
	return pk_object(d, cls, NULL, *state);
}

int dcp_finish(struct dcp_writer *w)
{
	int rc = w->failed ? -1 : 0;
	struct pk_doc *d = pk_doc_new();
	struct pk_value *mst, *meta = dataclass(d, DCP_META "Metadata", &mst);
	struct pk_value *sdm = pk_dict(d), *sd = pk_dict(d), *planner = pk_none(d);
	char *rel = xstrdup("__0_0.distcp");
	for (int i = 0; i < w->n; i++) {
		if (!w->items[i].npath)
			continue;
		if (planner->kind == PK_NONE)
			planner = pk_dict(d);
		struct pk_value *t = pk_tuple(d);
		for (int k = 0; k < w->items[i].npath; k++)
			pk_append(t, pk_str(d, w->items[i].path[k]));
		pk_set_str(d, planner, w->items[i].fqn, t);
	}
	for (int i = 0; rc == 0 && i < w->n; i++) {
		const struct dcp_item *it = &w->items[i];
		struct pk_value *st, *v;
		if (it->tensor) {
			int64_t total = 0;
			struct pk_value *chunks = pk_list(d);
			for (int k = 0; k < it->nchunks; k++) {
				struct pk_value *cst, *ch = dataclass(d, DCP_META "ChunkStorageMetadata", &cst);
				pk_set_str(d, cst, "offsets", size_of(d, it->chunks[k].offset, it->ndim));
				pk_set_str(d, cst, "sizes", size_of(d, it->chunks[k].size, it->ndim));
				pk_append(chunks, ch);
				total += numel(it->chunks[k].size, it->ndim);
			}
			if (total != numel(it->size, it->ndim))
				BUG("dcp_finish: the chunks of '%s' hold %lld of its %lld elements", it->fqn,
				    (long long)total, (long long)numel(it->size, it->ndim));
			v = dataclass(d, DCP_META "TensorStorageMetadata", &st);
			pk_set_str(d, st, "properties", properties(d, it->dtype));
			pk_set_str(d, st, "size", size_of(d, it->size, it->ndim));
			pk_set_str(d, st, "chunks", chunks);
		} else {
			v = dataclass(d, DCP_META "BytesStorageMetadata", &st);
		}
		pk_set_str(d, sdm, it->fqn, v);
		for (int k = 0; k < it->nchunks; k++) {
			struct pk_value *kst, *key = dataclass(d, DCP_META "MetadataIndex", &kst);
			pk_set_str(d, kst, "fqn", pk_str(d, it->fqn));
			pk_set_str(d, kst, "offset", it->tensor ? size_of(d, it->chunks[k].offset, it->ndim) : pk_none(d));
			pk_set_str(d, kst, "index", pk_none(d));
			struct pk_value *sst,
				*where = dataclass(d, "torch.distributed.checkpoint.filesystem._StorageInfo", &sst);
			pk_set_str(d, sst, "relative_path", pk_str(d, rel));
			pk_set_str(d, sst, "offset", pk_int(d, (int64_t)it->chunks[k].at));
			pk_set_str(d, sst, "length", pk_int(d, (int64_t)it->chunks[k].len));
			pk_set(d, sd, key, where);
		}
	}
	free(rel);
	pk_set_str(d, mst, "state_dict_metadata", sdm);
	pk_set_str(d, mst, "planner_data", planner);
	pk_set_str(d, mst, "storage_data", sd);
	pk_set_str(d, mst, "version", pk_str(d, "1.0.0"));
	/* the data file first, then the metadata that points into it */
	if (rc == 0 && afile_commit(&w->data) < 0)
		rc = -1;
	if (rc == 0) {
		struct sbuf b = SBUF_INIT;
		struct pk_value **st = NULL;
		size_t nst = 0;
		rc = pk_dumps(meta, &b, &st, &nst);
		free(st);
		char *p = xasprintf("%s/.metadata", w->dir);
		struct afile af;
		if (rc == 0 && afile_open(&af, p) == 0) {
			if (fwrite(b.buf, 1, b.len, af.fp) != b.len) {
				rc = error_errno("cannot write '%s'", p);
				afile_abort(&af);
			} else if (afile_commit(&af) < 0) {
				rc = -1;
			}
		} else {
			rc = -1;
		}
		free(p);
		sbuf_release(&b);
	}
	pk_doc_free(d);
	if (rc < 0) { /* nothing left: the data file too */
		char *p = xasprintf("%s/__0_0.distcp", w->dir);
		if (!w->data.tmp)
			unlink(p);
		free(p);
	}
	dcp_abort(w); /* frees; the committed data file stays */
	return rc;
}
