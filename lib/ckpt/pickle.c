/*
 * pickle.c - see pickle.h.
 *
 * The reader is the unpickling machine in miniature: a value stack, a stack
 * of MARK positions, and the memo; each opcode pops and pushes nodes. It
 * never imports or calls: GLOBAL looks the name up in globals[] below, and
 * REDUCE / NEWOBJ / BUILD only act on globals of that table, each by its
 * own small constructor. Every read is checked against the end of the
 * input, every count against what the input can hold (the memo's indices,
 * the lengths of strings), so a damaged pickle ends in error(), never in a
 * read out of bounds or an allocation it could not justify.
 *
 * After STOP the tree is walked once to refuse cycles (a list appended to
 * itself) and nesting deeper than PK_MAX_DEPTH, so later walks may recurse.
 *
 * The writer emits protocol 2 as torch.save does (bytes through
 * _codecs.encode, tensors through _rebuild_tensor_v2 with a persistent id
 * per storage), without the memo: shared nodes are written again, which
 * loads as equal copies; storages are shared through their keys.
 */
#include "ckpt/pickle.h"
#include "base/error.h"
#include "base/utf8.h"
#include "base/xalloc.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- documents: every node, freed together ---- */

struct pk_cleanup {
	void (*fn)(void *);
	void *p;
};

struct pk_doc {
	struct pk_value **nodes;
	size_t n, cap;
	struct pk_cleanup *cleanups;
	size_t ncleanups, capcleanups;
};

struct pk_doc *pk_doc_new(void)
{
	return xcalloc(1, sizeof(struct pk_doc));
}

static void node_release(struct pk_value *v)
{
	switch (v->kind) {
	case PK_STR:
	case PK_BYTES:
	case PK_GLOBAL:
		free(v->s.p);
		break;
	case PK_LIST:
	case PK_TUPLE:
	case PK_SET:
	case PK_DICT:
		free(v->seq.v);
		free(v->seq.hash);
		break;
	default:
		break;
	}
}

void pk_doc_free(struct pk_doc *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++) {
		node_release(d->nodes[i]);
		free(d->nodes[i]);
	}
	for (size_t i = d->ncleanups; i-- > 0;)
		d->cleanups[i].fn(d->cleanups[i].p);
	free(d->nodes);
	free(d->cleanups);
	free(d);
}

void pk_doc_attach(struct pk_doc *d, void (*fn)(void *), void *p)
{
	xgrow(&d->cleanups, &d->capcleanups, d->ncleanups + 1, sizeof(*d->cleanups));
	d->cleanups[d->ncleanups++] = (struct pk_cleanup){ fn, p };
}

static struct pk_value *node(struct pk_doc *d, enum pk_kind k)
{
	struct pk_value *v = xcalloc(1, sizeof(*v));
	v->kind = k;
	xgrow(&d->nodes, &d->cap, d->n + 1, sizeof(*d->nodes));
	d->nodes[d->n++] = v;
	return v;
}

/* ---- names ---- */

static const char *const kind_names[PK_NKINDS] = {
	"None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "set", "global", "object",
	"storage", "tensor", "numpy array",
};

const char *pk_kind_name(enum pk_kind k)
{
	return (unsigned)k < PK_NKINDS ? kind_names[k] : "?";
}

static const struct {
	const char *name, *storage;
	size_t size;
} dtypes[PK_NDTYPES] = {
	[PK_DT_F32] = { "float32", "FloatStorage", 4 },   [PK_DT_F64] = { "float64", "DoubleStorage", 8 },
	[PK_DT_F16] = { "float16", "HalfStorage", 2 },    [PK_DT_BF16] = { "bfloat16", "BFloat16Storage", 2 },
	[PK_DT_I64] = { "int64", "LongStorage", 8 },      [PK_DT_I32] = { "int32", "IntStorage", 4 },
	[PK_DT_I16] = { "int16", "ShortStorage", 2 },     [PK_DT_I8] = { "int8", "CharStorage", 1 },
	[PK_DT_U8] = { "uint8", "ByteStorage", 1 },       [PK_DT_BOOL] = { "bool", "BoolStorage", 1 },
};

const char *pk_dtype_name(enum pk_dtype dt)
{
	if ((unsigned)dt >= PK_NDTYPES)
		BUG("bad dtype %d", (int)dt);
	return dtypes[dt].name;
}

size_t pk_dtype_size(enum pk_dtype dt)
{
	if ((unsigned)dt >= PK_NDTYPES)
		BUG("bad dtype %d", (int)dt);
	return dtypes[dt].size;
}

/* ---- the allow-list ---- */

enum gkind {
	G_ODICT = 1,
	G_REBUILD_TENSOR,
	G_REBUILD_PARAM,
	G_REBUILD_FROM_TYPE, /* torch._tensor._rebuild_from_type_v2: a tensor with Python attributes */
	G_TENSOR_TYPE,       /* torch.Tensor: only as _rebuild_from_type_v2's type */
	G_STORAGE,      /* a typed storage class; dtype in the table */
	G_UNTYPED,      /* torch.UntypedStorage: bytes */
	G_DTYPE,        /* torch.float32 and friends: values only */
	G_NAMESPACE,
	G_SET,
	G_FROZENSET,
	G_ENCODE,       /* _codecs.encode(str, "latin1") */
	G_BYTES,        /* builtins.bytes */
	G_BYTEARRAY,
	G_SIZE,         /* torch.Size */
	G_NP_RECONSTRUCT,
	G_NP_NDARRAY,
	G_NP_DTYPE,
	G_NP_SCALAR,
	G_ENUM,         /* an enum class: calling it with (value,) makes a member */
	G_DATACLASS,    /* a plain data class: NEWOBJ with () makes an object, BUILD its attributes */
	G_PATH,         /* a pathlib path: called with its parts (strings) */
};

static const struct global {
	const char *name;
	enum gkind kind;
	int dtype;
} globals[] = {
	{ "collections.OrderedDict", G_ODICT, 0 },
	{ "torch._utils._rebuild_tensor_v2", G_REBUILD_TENSOR, 0 },
	{ "torch._utils._rebuild_parameter", G_REBUILD_PARAM, 0 },
	{ "torch._tensor._rebuild_from_type_v2", G_REBUILD_FROM_TYPE, 0 },
	{ "torch.Tensor", G_TENSOR_TYPE, 0 },
	{ "torch.FloatStorage", G_STORAGE, PK_DT_F32 },
	{ "torch.DoubleStorage", G_STORAGE, PK_DT_F64 },
	{ "torch.HalfStorage", G_STORAGE, PK_DT_F16 },
	{ "torch.BFloat16Storage", G_STORAGE, PK_DT_BF16 },
	{ "torch.LongStorage", G_STORAGE, PK_DT_I64 },
	{ "torch.IntStorage", G_STORAGE, PK_DT_I32 },
	{ "torch.ShortStorage", G_STORAGE, PK_DT_I16 },
	{ "torch.CharStorage", G_STORAGE, PK_DT_I8 },
	{ "torch.ByteStorage", G_STORAGE, PK_DT_U8 },
	{ "torch.BoolStorage", G_STORAGE, PK_DT_BOOL },
	{ "torch.UntypedStorage", G_UNTYPED, PK_DT_U8 },
	{ "torch.storage.UntypedStorage", G_UNTYPED, PK_DT_U8 },
	{ "torch.float32", G_DTYPE, 0 },
	{ "torch.float64", G_DTYPE, 0 },
	{ "torch.float16", G_DTYPE, 0 },
	{ "torch.bfloat16", G_DTYPE, 0 },
	{ "torch.int64", G_DTYPE, 0 },
	{ "torch.int32", G_DTYPE, 0 },
	{ "torch.int16", G_DTYPE, 0 },
	{ "torch.int8", G_DTYPE, 0 },
	{ "torch.uint8", G_DTYPE, 0 },
	{ "torch.bool", G_DTYPE, 0 },
	{ "torch.float8_e4m3fn", G_DTYPE, 0 },
	{ "torch.float8_e5m2", G_DTYPE, 0 },
	{ "argparse.Namespace", G_NAMESPACE, 0 },
	{ "builtins.set", G_SET, 0 },
	{ "__builtin__.set", G_SET, 0 },
	{ "builtins.frozenset", G_FROZENSET, 0 },
	{ "__builtin__.frozenset", G_FROZENSET, 0 },
	{ "_codecs.encode", G_ENCODE, 0 },
	{ "builtins.bytes", G_BYTES, 0 },
	{ "__builtin__.bytes", G_BYTES, 0 },
	{ "builtins.bytearray", G_BYTEARRAY, 0 },
	{ "__builtin__.bytearray", G_BYTEARRAY, 0 },
	{ "torch.Size", G_SIZE, 0 },
	{ "numpy.core.multiarray._reconstruct", G_NP_RECONSTRUCT, 0 },
	{ "numpy._core.multiarray._reconstruct", G_NP_RECONSTRUCT, 0 },
	{ "numpy.ndarray", G_NP_NDARRAY, 0 },
	{ "numpy.dtype", G_NP_DTYPE, 0 },
	{ "numpy.core.multiarray.scalar", G_NP_SCALAR, 0 },
	{ "numpy._core.multiarray.scalar", G_NP_SCALAR, 0 },
	/* Megatron's enums that its arguments and state dicts hold */
	{ "megatron.core.enums.ModelType", G_ENUM, 0 },
	{ "megatron.core.enums.Fp8Recipe", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.AttnBackend", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.AttnMaskType", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.AttnType", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.LayerType", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.CudaGraphScope", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.CudaGraphModule", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.InferenceCudaGraphScope", G_ENUM, 0 },
	{ "megatron.core.transformer.enums.ModelType", G_ENUM, 0 },
	/* the standard library's: Megatron's args.exit_signal (signal.SIGTERM) */
	{ "signal.Signals", G_ENUM, 0 },
	/* PyTorch Distributed Checkpoint's .metadata (torch_dist checkpoints; dcp.h) */
	{ "torch.distributed.checkpoint.metadata.Metadata", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.metadata.TensorStorageMetadata", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.metadata.BytesStorageMetadata", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.metadata.TensorProperties", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.metadata.ChunkStorageMetadata", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.metadata.MetadataIndex", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.metadata.StorageMeta", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.filesystem._StorageInfo", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.planner.SavePlan", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.planner.WriteItem", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.planner.TensorWriteData", G_DATACLASS, 0 },
	{ "torch.distributed.checkpoint.planner.WriteItemType", G_ENUM, 0 },
	{ "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING", G_ENUM, 0 },
	{ "torch.serialization._get_layout", G_ENUM, 0 }, /* ("torch.strided",): a layout by name */
	/* DCP's StorageMeta.checkpoint_id: the folder PyTorch's save was given */
	{ "pathlib.PosixPath", G_PATH, 0 },
	{ "pathlib.PurePosixPath", G_PATH, 0 },
	{ "pathlib.WindowsPath", G_PATH, 0 },
	{ "pathlib.PureWindowsPath", G_PATH, 0 },
};

static const struct global *find_global(const char *name)
{
	for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
		if (globals[i].kind && !strcmp(globals[i].name, name))
			return &globals[i];
	return NULL;
}

static enum gkind gkind(const struct pk_value *v)
{
	return v->kind == PK_GLOBAL ? (enum gkind)(v->flags >> 8) : 0;
}

/* ---- building nodes ---- */

struct pk_value *pk_none(struct pk_doc *d)
{
	return node(d, PK_NONE);
}

struct pk_value *pk_bool(struct pk_doc *d, bool b)
{
	struct pk_value *v = node(d, PK_BOOL);
	v->b = b;
	return v;
}

struct pk_value *pk_int(struct pk_doc *d, int64_t i)
{
	struct pk_value *v = node(d, PK_INT);
	v->i = i;
	return v;
}

struct pk_value *pk_float(struct pk_doc *d, double f)
{
	struct pk_value *v = node(d, PK_FLOAT);
	v->f = f;
	return v;
}

static struct pk_value *strn(struct pk_doc *d, enum pk_kind k, const void *p, size_t n)
{
	struct pk_value *v = node(d, k);
	v->s.p = xmalloc(n + 1);
	if (n)
		memcpy(v->s.p, p, n);
	v->s.p[n] = 0;
	v->s.len = n;
	return v;
}

struct pk_value *pk_str(struct pk_doc *d, const char *s)
{
	return strn(d, PK_STR, s, strlen(s));
}

struct pk_value *pk_bytes(struct pk_doc *d, const void *p, size_t n)
{
	return strn(d, PK_BYTES, p, n);
}

struct pk_value *pk_list(struct pk_doc *d)
{
	return node(d, PK_LIST);
}

struct pk_value *pk_tuple(struct pk_doc *d)
{
	return node(d, PK_TUPLE);
}

struct pk_value *pk_dict(struct pk_doc *d)
{
	return node(d, PK_DICT);
}

struct pk_value *pk_odict(struct pk_doc *d)
{
	struct pk_value *v = node(d, PK_DICT);
	v->flags = PK_F_ORDERED;
	return v;
}

struct pk_value *pk_global(struct pk_doc *d, const char *name)
{
	struct pk_value *v = strn(d, PK_GLOBAL, name, strlen(name));
	const struct global *g = find_global(name);
	if (g)
		v->flags = (unsigned)g->kind << 8;
	return v;
}

static struct pk_value *object(struct pk_doc *d, const char *cls, struct pk_value *args)
{
	struct pk_value *v = node(d, PK_OBJECT);
	/* the class name lives in a str node of the document */
	v->obj.cls = strn(d, PK_STR, cls, strlen(cls))->s.p;
	v->obj.args = args;
	return v;
}

struct pk_value *pk_object(struct pk_doc *d, const char *cls, struct pk_value *args, struct pk_value *state)
{
	struct pk_value *v = object(d, cls, args);
	v->obj.state = state;
	return v;
}

struct pk_value *pk_namespace(struct pk_doc *d)
{
	struct pk_value *v = object(d, "argparse.Namespace", NULL);
	v->obj.state = pk_dict(d);
	return v;
}

struct pk_value *pk_storage(struct pk_doc *d, enum pk_dtype dt, const void *data, int64_t numel)
{
	if ((unsigned)dt >= PK_NDTYPES || numel < 0)
		BUG("bad storage");
	struct pk_value *v = node(d, PK_STORAGE);
	v->st.dtype = dt;
	v->st.data = data;
	v->st.numel = numel;
	v->st.location = "cpu";
	v->st.key = "";
	return v;
}

/* Does the view fit its storage? 0, or -1 after error(). */
static int check_view(const struct pk_tensor *t, int64_t numel)
{
	int64_t last = t->offset, n = 1;
	if (t->offset < 0)
		return error("tensor offset %" PRId64 " is negative", t->offset);
	for (int i = 0; i < t->ndim; i++) {
		if (t->size[i] < 0 || t->stride[i] < 0)
			return error("tensor size %" PRId64 " or stride %" PRId64 " is negative", t->size[i], t->stride[i]);
		if (t->size[i] == 0)
			n = 0;
	}
	if (n == 0)
		return t->offset <= numel ? 0 : error("tensor offset %" PRId64 " past its storage of %" PRId64 " elements",
						       t->offset, numel);
	for (int i = 0; i < t->ndim; i++) {
		if (t->stride[i] && (t->size[i] - 1) > (INT64_MAX - last) / t->stride[i])
			return error("tensor view overflows");
		last += (t->size[i] - 1) * t->stride[i];
	}
	if (last >= numel)
		return error("tensor view reaches element %" PRId64 " of a storage of %" PRId64, last, numel);
	return 0;
}

struct pk_value *pk_tensor(struct pk_doc *d, struct pk_value *st, int64_t offset, int ndim, const int64_t *size,
			   const int64_t *stride)
{
	if (st->kind != PK_STORAGE || ndim < 0 || ndim > PK_MAX_NDIM)
		BUG("bad tensor");
	struct pk_value *v = node(d, PK_TENSOR);
	v->t.storage = st;
	v->t.offset = offset;
	v->t.ndim = ndim;
	int64_t s = 1;
	for (int i = ndim - 1; i >= 0; i--) {
		v->t.size[i] = size[i];
		v->t.stride[i] = stride ? stride[i] : s;
		s *= size[i] > 0 ? size[i] : 1;
	}
	if (check_view(&v->t, st->st.numel) < 0)
		return NULL;
	return v;
}

/* ---- equality and hashing of dict keys (Python's rules for the hashable kinds) ---- */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	return x;
}

static uint64_t fnv(const char *p, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * UINT64_C(0x100000001b3);
	return h;
}

/* a number as an int64 when it is one (1 == 1.0 == True in Python) */
static bool as_int(const struct pk_value *v, int64_t *i)
{
	if (v->kind == PK_BOOL || v->kind == PK_INT) {
		*i = v->kind == PK_BOOL ? v->b : v->i;
		return true;
	}
	if (v->kind == PK_FLOAT && v->f == floor(v->f) && fabs(v->f) < 9.2e18) {
		*i = (int64_t)v->f;
		return true;
	}
	return false;
}

static uint64_t key_hash(const struct pk_value *v, int depth)
{
	int64_t i;
	if (as_int(v, &i))
		return mix((uint64_t)i);
	switch (v->kind) {
	case PK_NONE:
		return 0x9e3779b9;
	case PK_FLOAT: {
		uint64_t b;
		memcpy(&b, &v->f, 8);
		return mix(b);
	}
	case PK_STR:
	case PK_BYTES:
	case PK_GLOBAL:
		return fnv(v->s.p, v->s.len, UINT64_C(0xcbf29ce484222325) + v->kind);
	case PK_TUPLE: {
		uint64_t h = 0x7475706c;
		for (size_t k = 0; k < v->seq.n && depth < PK_MAX_DEPTH; k++)
			h = mix(h ^ key_hash(v->seq.v[k], depth + 1));
		return h;
	}
	default:
		return mix((uint64_t)(uintptr_t)v);
	}
}

static bool key_equal(const struct pk_value *a, const struct pk_value *b, int depth)
{
	int64_t i, j;
	if (a == b)
		return true;
	if (as_int(a, &i) && as_int(b, &j))
		return i == j;
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case PK_NONE:
		return true;
	case PK_FLOAT:
		return a->f == b->f;
	case PK_STR:
	case PK_BYTES:
	case PK_GLOBAL:
		return a->s.len == b->s.len && !memcmp(a->s.p, b->s.p, a->s.len);
	case PK_TUPLE:
		if (a->seq.n != b->seq.n || depth >= PK_MAX_DEPTH)
			return false;
		for (size_t k = 0; k < a->seq.n; k++)
			if (!key_equal(a->seq.v[k], b->seq.v[k], depth + 1))
				return false;
		return true;
	default:
		return false;
	}
}

static void seq_push(struct pk_value *s, struct pk_value *v)
{
	xgrow(&s->seq.v, &s->seq.cap, s->seq.n + 1, sizeof(*s->seq.v));
	s->seq.v[s->seq.n++] = v;
}

void pk_append(struct pk_value *seq, struct pk_value *v)
{
	if (seq->kind != PK_LIST && seq->kind != PK_TUPLE && seq->kind != PK_SET)
		BUG("append to a %s", pk_kind_name(seq->kind));
	seq_push(seq, v);
}

/* The pair index of key in dict, or -1. Small dicts are searched; larger
 * ones keep an open-addressing index of pair numbers + 1. */
static void dict_index(struct pk_value *dict, size_t pair)
{
	size_t m = dict->seq.hcap - 1, h = (size_t)key_hash(dict->seq.v[2 * pair], 0) & m;
	while (dict->seq.hash[h])
		h = (h + 1) & m;
	dict->seq.hash[h] = pair + 1;
}

static long dict_find(const struct pk_value *dict, const struct pk_value *key)
{
	if (!dict->seq.hash) {
		for (size_t p = 0; p < dict->seq.n; p++)
			if (key_equal(dict->seq.v[2 * p], key, 0))
				return (long)p;
		return -1;
	}
	size_t m = dict->seq.hcap - 1, h = (size_t)key_hash(key, 0) & m;
	for (; dict->seq.hash[h]; h = (h + 1) & m)
		if (key_equal(dict->seq.v[2 * (dict->seq.hash[h] - 1)], key, 0))
			return (long)(dict->seq.hash[h] - 1);
	return -1;
}

void pk_set(struct pk_doc *d, struct pk_value *dict, struct pk_value *key, struct pk_value *v)
{
	(void)d;
	if (dict->kind != PK_DICT)
		BUG("set on a %s", pk_kind_name(dict->kind));
	long p = dict_find(dict, key);
	if (p >= 0) {
		dict->seq.v[2 * p + 1] = v;
		return;
	}
	xgrow(&dict->seq.v, &dict->seq.cap, 2 * dict->seq.n + 2, sizeof(*dict->seq.v));
	dict->seq.v[2 * dict->seq.n] = key;
	dict->seq.v[2 * dict->seq.n + 1] = v;
	dict->seq.n++;
	if (dict->seq.n >= 8 && 2 * dict->seq.n > dict->seq.hcap) {
		free(dict->seq.hash);
		dict->seq.hcap = 64;
		while (dict->seq.hcap < 4 * dict->seq.n)
			dict->seq.hcap *= 2;
		dict->seq.hash = xcalloc(dict->seq.hcap, sizeof(size_t));
		for (size_t i = 0; i < dict->seq.n; i++)
			dict_index(dict, i);
	} else if (dict->seq.hash) {
		dict_index(dict, dict->seq.n - 1);
	}
}

void pk_set_str(struct pk_doc *d, struct pk_value *dict, const char *key, struct pk_value *v)
{
	pk_set(d, dict, pk_str(d, key), v);
}

struct pk_value *pk_get(const struct pk_value *dict, const char *key)
{
	if (!dict || dict->kind != PK_DICT)
		return NULL;
	struct pk_value k = { .kind = PK_STR };
	k.s.p = (char *)key;
	k.s.len = strlen(key);
	long p = dict_find(dict, &k);
	return p < 0 ? NULL : dict->seq.v[2 * p + 1];
}

/* ---- tensors ---- */

int64_t pk_tensor_numel(const struct pk_value *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->t.ndim; i++)
		n *= t->t.size[i];
	return n;
}

bool pk_tensor_contiguous(const struct pk_value *t)
{
	int64_t s = 1;
	for (int i = t->t.ndim - 1; i >= 0; i--) {
		if (t->t.size[i] != 1 && t->t.stride[i] != s)
			return false;
		s *= t->t.size[i];
	}
	return true;
}

void pk_tensor_gather(const struct pk_value *t, void *dst)
{
	const struct pk_storage *st = &t->t.storage->st;
	size_t es = pk_dtype_size(st->dtype);
	int64_t n = pk_tensor_numel(t), idx[PK_MAX_NDIM] = { 0 };
	if (n == 0)
		return;
	if (pk_tensor_contiguous(t)) {
		memcpy(dst, (const char *)st->data + t->t.offset * es, (size_t)n * es);
		return;
	}
	for (int64_t k = 0; k < n; k++) {
		int64_t off = t->t.offset;
		for (int i = 0; i < t->t.ndim; i++)
			off += idx[i] * t->t.stride[i];
		memcpy((char *)dst + k * es, (const char *)st->data + off * es, es);
		for (int i = t->t.ndim - 1; i >= 0 && ++idx[i] == t->t.size[i]; i--)
			idx[i] = 0;
	}
}

/* ---- the unpickler ---- */

struct unpickler {
	struct pk_doc *d;
	const struct pk_load_opts *o;
	const unsigned char *p;
	size_t len, pos, op_pos;
	int op;
	struct pk_value **stack;
	size_t sp, scap;
	size_t *marks;
	size_t nmarks, mcap;
	struct pk_value **memo;
	size_t mlen, memo_count; /* slots, and entries set */
	struct pk_value **storages; /* resolved, one node per key */
	size_t nstorages, stcap;
};

static int bad(struct unpickler *u, const char *fmt, ...) MC_PRINTF(2, 3);

static int bad(struct unpickler *u, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *what = u->o && u->o->what ? u->o->what : "input";
	if (u->op >= 0x20 && u->op < 0x7f)
		return error("%s: pickle: %s (opcode '%c' at byte %zu)", what, msg, u->op, u->op_pos);
	return error("%s: pickle: %s (opcode 0x%02x at byte %zu)", what, msg, u->op, u->op_pos);
}

static int need(struct unpickler *u, size_t n)
{
	if (u->len - u->pos < n)
		return bad(u, "truncated: %zu bytes wanted, %zu left", n, u->len - u->pos);
	return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t x = 0;
	for (int i = n - 1; i >= 0; i--)
		x = x << 8 | p[i];
	return x;
}

static int push(struct unpickler *u, struct pk_value *v)
{
	if (!v)
		return -1;
	xgrow(&u->stack, &u->scap, u->sp + 1, sizeof(*u->stack));
	u->stack[u->sp++] = v;
	return 0;
}

static size_t mark_base(struct unpickler *u)
{
	return u->nmarks ? u->marks[u->nmarks - 1] : 0;
}

static struct pk_value *pop(struct unpickler *u)
{
	if (u->sp <= mark_base(u)) {
		bad(u, "stack underflow");
		return NULL;
	}
	return u->stack[--u->sp];
}

static struct pk_value *top(struct unpickler *u)
{
	if (u->sp <= mark_base(u)) {
		bad(u, "stack underflow");
		return NULL;
	}
	return u->stack[u->sp - 1];
}

/* Pop back to the last MARK: the items are u->stack[*base .. u->sp). */
static int pop_mark(struct unpickler *u, size_t *base)
{
	if (!u->nmarks)
		return bad(u, "no MARK on the stack");
	*base = u->marks[--u->nmarks];
	return 0;
}

static struct pk_value *text(struct unpickler *u, enum pk_kind k, size_t n)
{
	if (need(u, n) < 0)
		return NULL;
	const char *s = (const char *)u->p + u->pos;
	size_t badpos;
	if (k == PK_STR && !utf8_valid(s, n, &badpos)) {
		bad(u, "string of %zu bytes is not UTF-8 (byte %zu)", n, badpos);
		return NULL;
	}
	u->pos += n;
	return strn(u->d, k, s, n);
}

static int memo_put(struct unpickler *u, uint64_t idx)
{
	struct pk_value *v = top(u);
	if (!v)
		return -1;
	/* every memo entry takes a byte of input at least: larger indices are damage */
	if (idx > u->len)
		return bad(u, "memo index %" PRIu64 " beyond the input's size", idx);
	if (idx >= u->mlen) {
		size_t n = u->mlen ? u->mlen : 64;
		while (n <= idx)
			n *= 2;
		u->memo = xrealloc(u->memo, n * sizeof(*u->memo));
		memset(u->memo + u->mlen, 0, (n - u->mlen) * sizeof(*u->memo));
		u->mlen = n;
	}
	if (!u->memo[idx])
		u->memo_count++;
	u->memo[idx] = v;
	return 0;
}

static int memo_get(struct unpickler *u, uint64_t idx)
{
	if (idx >= u->mlen || !u->memo[idx])
		return bad(u, "memo entry %" PRIu64 " was never stored", idx);
	return push(u, u->memo[idx]);
}

/* A decimal line (protocol 0's PUT and GET). */
static int line_index(struct unpickler *u, uint64_t *idx)
{
	const unsigned char *nl = memchr(u->p + u->pos, '\n', u->len - u->pos);
	if (!nl)
		return bad(u, "truncated: no end of line");
	uint64_t x = 0;
	size_t n = (size_t)(nl - (u->p + u->pos));
	if (!n || n > 18)
		return bad(u, "bad memo index");
	for (size_t i = 0; i < n; i++) {
		unsigned c = u->p[u->pos + i];
		if (c < '0' || c > '9')
			return bad(u, "bad memo index");
		x = x * 10 + (c - '0');
	}
	u->pos += n + 1;
	*idx = x;
	return 0;
}

/* LONG1 / LONG4: n bytes of little-endian two's complement. */
static struct pk_value *long_int(struct unpickler *u, size_t n)
{
	if (need(u, n) < 0)
		return NULL;
	const unsigned char *b = u->p + u->pos;
	u->pos += n;
	if (n == 0)
		return pk_int(u->d, 0);
	int neg = b[n - 1] >> 7;
	uint64_t x = ~UINT64_C(0) * (uint64_t)neg;
	size_t low = n < 8 ? n : 8;
	for (size_t i = 0; i < low; i++) {
		x &= ~(UINT64_C(0xff) << (8 * i));
		x |= (uint64_t)b[i] << (8 * i);
	}
	bool fits = true;
	for (size_t i = 8; i < n; i++)
		fits = fits && b[i] == (neg ? 0xff : 0);
	if (n > 8 && (int)(x >> 63) != neg)
		fits = false;
	if (!fits) {
		bad(u, "integer of %zu bytes does not fit in 64 bits", n);
		return NULL;
	}
	return pk_int(u->d, (int64_t)x);
}

static struct pk_value *make_tuple(struct unpickler *u, size_t base)
{
	struct pk_value *t = pk_tuple(u->d);
	for (size_t i = base; i < u->sp; i++)
		seq_push(t, u->stack[i]);
	u->sp = base;
	return t;
}

static bool is_dict(const struct pk_value *v)
{
	return v->kind == PK_DICT;
}

/* ---- the constructors of the allow-list ---- */

static int int_arg(struct unpickler *u, const struct pk_value *v, const char *what, int64_t *out)
{
	if (v->kind != PK_INT)
		return bad(u, "%s is a %s, not an int", what, pk_kind_name(v->kind));
	*out = v->i;
	return 0;
}

static int dims(struct unpickler *u, const struct pk_value *v, const char *what, int64_t *out, int *n)
{
	if (v->kind != PK_TUPLE && v->kind != PK_LIST)
		return bad(u, "tensor %s is a %s, not a tuple", what, pk_kind_name(v->kind));
	if (v->seq.n > PK_MAX_NDIM)
		return bad(u, "tensor of %zu dimensions (at most %d)", v->seq.n, PK_MAX_NDIM);
	for (size_t i = 0; i < v->seq.n; i++)
		if (int_arg(u, v->seq.v[i], what, &out[i]) < 0)
			return -1;
	*n = (int)v->seq.n;
	return 0;
}

static struct pk_value *rebuild_tensor(struct unpickler *u, const struct pk_value *a)
{
	int ns, nt;
	if (a->seq.n != 6 && a->seq.n != 7) {
		bad(u, "_rebuild_tensor_v2 with %zu arguments (6 or 7 expected)", a->seq.n);
		return NULL;
	}
	struct pk_value **v = a->seq.v;
	if (v[0]->kind != PK_STORAGE) {
		bad(u, "_rebuild_tensor_v2 on a %s, not a storage", pk_kind_name(v[0]->kind));
		return NULL;
	}
	struct pk_value *t = node(u->d, PK_TENSOR);
	t->t.storage = v[0];
	if (int_arg(u, v[1], "tensor offset", &t->t.offset) < 0 || dims(u, v[2], "size", t->t.size, &ns) < 0 ||
	    dims(u, v[3], "stride", t->t.stride, &nt) < 0)
		return NULL;
	if (ns != nt) {
		bad(u, "tensor with %d sizes but %d strides", ns, nt);
		return NULL;
	}
	t->t.ndim = ns;
	if (v[4]->kind != PK_BOOL) {
		bad(u, "requires_grad is a %s, not a bool", pk_kind_name(v[4]->kind));
		return NULL;
	}
	t->t.requires_grad = v[4]->b;
	if (!is_dict(v[5]) || v[5]->seq.n) {
		bad(u, "tensor with backward hooks");
		return NULL;
	}
	if (check_view(&t->t, v[0]->st.numel) < 0) {
		bad(u, "tensor of storage '%s' does not fit it", v[0]->st.key);
		return NULL;
	}
	return t;
}

/* numpy's dtype string of a numpy.dtype object, and its item size */
static int np_descr(struct unpickler *u, const struct pk_value *dt, char *descr, size_t *itemsize)
{
	if (dt->kind != PK_OBJECT || strcmp(dt->obj.cls, "numpy.dtype") || !dt->obj.args || dt->obj.args->seq.n < 1 ||
	    dt->obj.args->seq.v[0]->kind != PK_STR)
		return bad(u, "numpy array or scalar without a numpy.dtype");
	const char *code = dt->obj.args->seq.v[0]->s.p;
	char order = '|';
	const struct pk_value *st = dt->obj.state;
	if (st && st->kind == PK_TUPLE && st->seq.n >= 2 && st->seq.v[1]->kind == PK_STR && st->seq.v[1]->s.len == 1)
		order = st->seq.v[1]->s.p[0];
	size_t n = strlen(code);
	if (n < 2 || n > 3 || !strchr("biuf", code[0]) || code[1] < '1' || code[1] > '9' || (n == 3 && !isdigit(code[2])))
		return bad(u, "numpy dtype '%s' (only bool, int, uint and float are read)", code);
	*itemsize = (size_t)atoi(code + 1);
	if (*itemsize > 8 || (order != '<' && order != '|' && order != '='))
		return bad(u, "numpy dtype '%c%s' (little-endian numbers only)", order, code);
	snprintf(descr, 8, "%c%s", *itemsize == 1 ? '|' : '<', code);
	return 0;
}

/* numpy.core.multiarray.scalar(dtype, bytes): a plain number */
static struct pk_value *np_scalar(struct unpickler *u, const struct pk_value *a)
{
	char descr[8];
	size_t size;
	if (a->seq.n != 2 || np_descr(u, a->seq.v[0], descr, &size) < 0)
		return a->seq.n != 2 ? (bad(u, "numpy scalar with %zu arguments", a->seq.n), NULL) : NULL;
	const struct pk_value *b = a->seq.v[1];
	if (b->kind != PK_BYTES || b->s.len != size) {
		bad(u, "numpy scalar of %s without its %zu bytes", descr, size);
		return NULL;
	}
	uint64_t x = le((const unsigned char *)b->s.p, (int)size);
	switch (descr[1]) {
	case 'b':
		return pk_bool(u->d, x != 0);
	case 'i':
		if (size < 8 && (x >> (8 * size - 1)) & 1)
			x |= ~UINT64_C(0) << (8 * size);
		return pk_int(u->d, (int64_t)x);
	case 'u':
		if (x > INT64_MAX)
			break;
		return pk_int(u->d, (int64_t)x);
	case 'f':
		if (size == 8) {
			double f;
			memcpy(&f, &x, 8);
			return pk_float(u->d, f);
		}
		if (size == 4) {
			float f;
			uint32_t y = (uint32_t)x;
			memcpy(&f, &y, 4);
			return pk_float(u->d, f);
		}
		break;
	}
	bad(u, "numpy scalar %s not read", descr);
	return NULL;
}

/* numpy arrays: _reconstruct makes an empty one, BUILD gives its state */
static int np_build(struct unpickler *u, struct pk_value *arr, const struct pk_value *st)
{
	if (st->kind != PK_TUPLE || st->seq.n != 5)
		return bad(u, "numpy array state is not a 5-tuple");
	struct pk_value **v = st->seq.v;
	int n;
	if (dims(u, v[1], "shape", arr->nd.shape, &n) < 0 || np_descr(u, v[2], arr->nd.descr, &arr->nd.itemsize) < 0)
		return -1;
	arr->nd.ndim = n;
	arr->nd.fortran = v[3]->kind == PK_BOOL && v[3]->b;
	uint64_t count = 1;
	for (int i = 0; i < n; i++) {
		if (arr->nd.shape[i] < 0)
			return bad(u, "numpy array of negative shape");
		if (arr->nd.shape[i] && count > UINT64_MAX / (uint64_t)arr->nd.shape[i])
			return bad(u, "numpy array too large");
		count *= (uint64_t)arr->nd.shape[i];
	}
	if (v[4]->kind != PK_BYTES || count > v[4]->s.len / arr->nd.itemsize ||
	    v[4]->s.len != count * arr->nd.itemsize)
		return bad(u, "numpy array of %" PRIu64 " x %zu bytes without as many bytes of data", count,
			   arr->nd.itemsize);
	arr->nd.nbytes = v[4]->s.len;
	arr->nd.data = v[4]->s.p; /* the bytes node lives as long as the document */
	return 0;
}

/* latin-1 text back to its bytes (protocol 2's bytes) */
static struct pk_value *latin1(struct unpickler *u, const struct pk_value *s, const struct pk_value *enc)
{
	if (s->kind != PK_STR || enc->kind != PK_STR) {
		bad(u, "_codecs.encode of a %s", pk_kind_name(s->kind));
		return NULL;
	}
	if (!strcmp(enc->s.p, "utf-8") || !strcmp(enc->s.p, "utf8"))
		return pk_bytes(u->d, s->s.p, s->s.len);
	if (strcmp(enc->s.p, "latin1") && strcmp(enc->s.p, "latin-1")) {
		bad(u, "_codecs.encode to '%s' (latin1 expected)", enc->s.p);
		return NULL;
	}
	struct pk_value *b = pk_bytes(u->d, "", 0);
	b->s.p = xrealloc(b->s.p, s->s.len + 1);
	size_t n = 0;
	const unsigned char *p = (const unsigned char *)s->s.p;
	for (size_t i = 0; i < s->s.len; i++) {
		if (p[i] < 0x80) {
			b->s.p[n++] = (char)p[i];
		} else if ((p[i] == 0xc2 || p[i] == 0xc3) && i + 1 < s->s.len) {
			b->s.p[n++] = (char)(((p[i] & 3) << 6) | (p[i + 1] & 0x3f));
			i++;
		} else {
			bad(u, "_codecs.encode: a character beyond latin-1");
			return NULL;
		}
	}
	b->s.p[n] = 0;
	b->s.len = n;
	return b;
}

static struct pk_value *set_of(struct unpickler *u, const struct pk_value *a, unsigned flags)
{
	struct pk_value *s = node(u->d, PK_SET);
	s->flags = flags;
	if (a->seq.n == 0)
		return s;
	const struct pk_value *items = a->seq.v[0];
	if (a->seq.n != 1 || (items->kind != PK_LIST && items->kind != PK_TUPLE && items->kind != PK_SET)) {
		bad(u, "set made from something else than a list");
		return NULL;
	}
	for (size_t i = 0; i < items->seq.n; i++)
		seq_push(s, items->seq.v[i]);
	return s;
}

/* REDUCE, NEWOBJ and NEWOBJ_EX: call an allowed global with the tuple a */
static struct pk_value *call(struct unpickler *u, struct pk_value *f, struct pk_value *a)
{
	if (f->kind != PK_GLOBAL) {
		bad(u, "calling a %s", pk_kind_name(f->kind));
		return NULL;
	}
	if (a->kind != PK_TUPLE) {
		bad(u, "calling '%s' with a %s for arguments", f->s.p, pk_kind_name(a->kind));
		return NULL;
	}
	struct pk_value **v = a->seq.v, *r;
	size_t n = a->seq.n;
	switch (gkind(f)) {
	case G_ODICT:
		r = pk_odict(u->d);
		if (n == 1 && (v[0]->kind == PK_LIST || v[0]->kind == PK_TUPLE)) {
			for (size_t i = 0; i < v[0]->seq.n; i++) {
				struct pk_value *kv = v[0]->seq.v[i];
				if ((kv->kind != PK_LIST && kv->kind != PK_TUPLE) || kv->seq.n != 2) {
					bad(u, "OrderedDict made from something else than pairs");
					return NULL;
				}
				pk_set(u->d, r, kv->seq.v[0], kv->seq.v[1]);
			}
		} else if (n) {
			break;
		}
		return r;
	case G_REBUILD_TENSOR:
		return rebuild_tensor(u, a);
	case G_REBUILD_PARAM:
		if (n != 3 || v[0]->kind != PK_TENSOR || v[1]->kind != PK_BOOL) {
			bad(u, "_rebuild_parameter without (tensor, requires_grad, hooks)");
			return NULL;
		}
		r = node(u->d, PK_TENSOR);
		r->t = v[0]->t;
		r->t.requires_grad = v[1]->b;
		r->flags = PK_F_PARAMETER;
		return r;
	case G_REBUILD_FROM_TYPE:
		/* (func, torch.Tensor, args, state): a plain tensor that carries
		 * Python attributes (state: Megatron's tensor_model_parallel,
		 * partition_dim, ... on a mixed-precision optimizer's fp32 master
		 * weights), rebuilt by func(*args); the attributes are dropped */
		if (n != 4 || v[0]->kind != PK_GLOBAL || gkind(v[0]) != G_REBUILD_TENSOR || v[1]->kind != PK_GLOBAL ||
		    gkind(v[1]) != G_TENSOR_TYPE || v[2]->kind != PK_TUPLE) {
			bad(u, "_rebuild_from_type_v2 other than (_rebuild_tensor_v2, torch.Tensor, args, state)");
			return NULL;
		}
		return call(u, v[0], v[2]);
	case G_NAMESPACE:
		if (n)
			break;
		return object(u->d, f->s.p, NULL);
	case G_SET:
	case G_FROZENSET:
		return set_of(u, a, gkind(f) == G_FROZENSET ? PK_F_FROZEN : 0);
	case G_ENCODE:
		if (n != 2)
			break;
		return latin1(u, v[0], v[1]);
	case G_BYTES:
	case G_BYTEARRAY:
		if (n == 0)
			r = pk_bytes(u->d, "", 0);
		else if (n == 1 && v[0]->kind == PK_BYTES)
			r = pk_bytes(u->d, v[0]->s.p, v[0]->s.len);
		else if (n == 2)
			r = latin1(u, v[0], v[1]);
		else
			break;
		if (r && gkind(f) == G_BYTEARRAY)
			r->flags = PK_F_BYTEARRAY;
		return r;
	case G_SIZE:
		if (n != 1 || v[0]->kind != PK_TUPLE)
			break;
		r = pk_tuple(u->d);
		for (size_t i = 0; i < v[0]->seq.n; i++)
			seq_push(r, v[0]->seq.v[i]);
		return r;
	case G_NP_RECONSTRUCT:
		if (n != 3 || gkind(v[0]) != G_NP_NDARRAY)
			break;
		r = node(u->d, PK_NDARRAY);
		r->nd.ndim = -1; /* until BUILD */
		return r;
	case G_NP_DTYPE:
		if (n < 1 || v[0]->kind != PK_STR)
			break;
		return object(u->d, f->s.p, a);
	case G_NP_SCALAR:
		return np_scalar(u, a);
	case G_ENUM:
		if (n != 1)
			break;
		return object(u->d, f->s.p, a);
	case G_DATACLASS:
		if (n)
			break;
		return object(u->d, f->s.p, NULL);
	case G_PATH:
		for (size_t i = 0; i < n; i++)
			if (v[i]->kind != PK_STR) {
				bad(u, "'%s' called with a %s among its parts", f->s.p, pk_kind_name(v[i]->kind));
				return NULL;
			}
		return object(u->d, f->s.p, a);
	default:
		bad(u, "'%s' cannot be called", f->s.p);
		return NULL;
	}
	bad(u, "'%s' called with %zu unexpected arguments", f->s.p, n);
	return NULL;
}

static int build(struct unpickler *u)
{
	struct pk_value *st = pop(u), *obj = st ? top(u) : NULL;
	if (!obj)
		return -1;
	if (obj->kind == PK_NDARRAY && obj->nd.ndim < 0)
		return np_build(u, obj, st);
	if (obj->kind == PK_OBJECT) {
		if (obj->obj.state && is_dict(obj->obj.state) && is_dict(st)) {
			for (size_t i = 0; i < st->seq.n; i++)
				pk_set(u->d, obj->obj.state, st->seq.v[2 * i], st->seq.v[2 * i + 1]);
		} else {
			obj->obj.state = st;
		}
		return 0;
	}
	/* an empty state changes nothing, as in Python */
	if (st->kind == PK_NONE || (is_dict(st) && !st->seq.n))
		return 0;
	/* an OrderedDict's instance attributes: a module state dict's _metadata
	 * (the modules' versions), which no reader here needs: dropped */
	if (obj->kind == PK_DICT && (obj->flags & PK_F_ORDERED) && is_dict(st))
		return 0;
	return bad(u, "BUILD on a %s", pk_kind_name(obj->kind));
}

static int global(struct unpickler *u, const char *mod, size_t nm, const char *name, size_t nn)
{
	char full[256];
	if (nm + nn + 2 > sizeof(full))
		return bad(u, "global name of %zu bytes", nm + nn + 1);
	memcpy(full, mod, nm);
	full[nm] = '.';
	memcpy(full + nm + 1, name, nn);
	full[nm + nn + 1] = 0;
	for (size_t i = 0; i < nm + nn + 1; i++)
		if ((unsigned char)full[i] < 0x20 || (unsigned char)full[i] >= 0x7f)
			return bad(u, "refusing a global with a control or non-ASCII byte in its name");
	if (!find_global(full))
		return bad(u, "refusing global '%s' (not on the allow-list of docs/torch-pickle.md)", full);
	return push(u, pk_global(u->d, full));
}

static int text_global(struct unpickler *u)
{
	const char *s = (const char *)u->p + u->pos;
	const char *nl1 = memchr(s, '\n', u->len - u->pos);
	const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', u->len - u->pos - (size_t)(nl1 + 1 - s)) : NULL;
	if (!nl2)
		return bad(u, "truncated: GLOBAL without its two lines");
	u->pos += (size_t)(nl2 + 1 - s);
	return global(u, s, (size_t)(nl1 - s), nl1 + 1, (size_t)(nl2 - nl1 - 1));
}

static int persistent(struct unpickler *u)
{
	struct pk_value *pid = pop(u);
	if (!pid)
		return -1;
	if (!u->o || !u->o->storage)
		return bad(u, "a persistent id, but no storage files");
	struct pk_value **v = pid->seq.v;
	if (pid->kind != PK_TUPLE || pid->seq.n != 5 || v[0]->kind != PK_STR || strcmp(v[0]->s.p, "storage") ||
	    (gkind(v[1]) != G_STORAGE && gkind(v[1]) != G_UNTYPED) || v[2]->kind != PK_STR || v[3]->kind != PK_STR ||
	    v[4]->kind != PK_INT || v[4]->i < 0)
		return bad(u, "persistent id is not ('storage', <storage class>, key, location, numel)");
	const struct global *g = find_global(v[1]->s.p);
	enum pk_dtype dt = (enum pk_dtype)g->dtype;
	for (size_t i = 0; i < u->nstorages; i++) {
		struct pk_value *s = u->storages[i];
		if (strcmp(s->st.key, v[2]->s.p))
			continue;
		if (s->st.dtype != dt || s->st.numel != v[4]->i)
			return bad(u, "storage '%s' used as %s x %" PRId64 " and as %s x %" PRId64, s->st.key,
				   pk_dtype_name(s->st.dtype), s->st.numel, pk_dtype_name(dt), v[4]->i);
		return push(u, s);
	}
	const void *data;
	size_t nbytes;
	if (u->o->storage(u->o->ctx, v[2]->s.p, &data, &nbytes) < 0)
		return bad(u, "storage '%s' not found", v[2]->s.p);
	if ((uint64_t)v[4]->i > nbytes / pk_dtype_size(dt) || nbytes != (size_t)v[4]->i * pk_dtype_size(dt))
		return bad(u, "storage '%s' of %" PRId64 " %s elements has %zu bytes", v[2]->s.p, v[4]->i,
			   pk_dtype_name(dt), nbytes);
	struct pk_value *s = pk_storage(u->d, dt, data, v[4]->i);
	s->st.key = v[2]->s.p;
	s->st.location = v[3]->s.p;
	xgrow(&u->storages, &u->stcap, u->nstorages + 1, sizeof(*u->storages));
	u->storages[u->nstorages++] = s;
	return push(u, s);
}

/* cycles and depth: 0 white, 1 on the path, 2 done */
static int walk(struct unpickler *u, struct pk_value *v, int depth)
{
	if (v->mark == 2)
		return 0;
	if (v->mark == 1)
		return bad(u, "a %s that contains itself", pk_kind_name(v->kind));
	if (depth > PK_MAX_DEPTH)
		return bad(u, "nested deeper than %d", PK_MAX_DEPTH);
	v->mark = 1;
	struct pk_value *kids[3] = { 0 };
	size_t n = 0;
	struct pk_value **many = NULL;
	switch (v->kind) {
	case PK_LIST:
	case PK_TUPLE:
	case PK_SET:
		many = v->seq.v;
		n = v->seq.n;
		break;
	case PK_DICT:
		many = v->seq.v;
		n = 2 * v->seq.n;
		break;
	case PK_OBJECT:
		kids[0] = v->obj.args;
		kids[1] = v->obj.state;
		break;
	case PK_TENSOR:
		kids[0] = v->t.storage;
		break;
	default:
		break;
	}
	for (size_t i = 0; i < n; i++)
		if (walk(u, many[i], depth + 1) < 0)
			return -1;
	for (int i = 0; i < 3; i++)
		if (kids[i] && walk(u, kids[i], depth + 1) < 0)
			return -1;
	v->mark = 2;
	return 0;
}

static int step(struct unpickler *u, struct pk_value **result)
{
	struct pk_value *a, *b, *c;
	size_t base = 0;
	u->op_pos = u->pos;
	u->op = u->p[u->pos++];
	switch (u->op) {
	case 0x80: /* PROTO */
		if (need(u, 1) < 0)
			return -1;
		if (u->p[u->pos] > 5)
			return bad(u, "protocol %d (at most 5)", u->p[u->pos]);
		u->pos++;
		return 0;
	case 0x95: /* FRAME: a length; the frame's opcodes follow in line */
		if (need(u, 8) < 0)
			return -1;
		if (le(u->p + u->pos, 8) > u->len - u->pos - 8)
			return bad(u, "truncated: frame longer than the input");
		u->pos += 8;
		return 0;
	case '.': /* STOP */
		if (u->sp != 1 || u->nmarks)
			return bad(u, "STOP with %zu values and %zu marks on the stack (1 and 0 expected)", u->sp,
				   u->nmarks);
		*result = u->stack[0];
		return 1;
	case '(': /* MARK */
		if (u->nmarks >= PK_MAX_DEPTH)
			return bad(u, "nested deeper than %d", PK_MAX_DEPTH);
		xgrow(&u->marks, &u->mcap, u->nmarks + 1, sizeof(*u->marks));
		u->marks[u->nmarks++] = u->sp;
		return 0;
	case '0': /* POP */
		if (u->sp == mark_base(u) && u->nmarks) {
			u->nmarks--; /* popping a MARK itself, as Python allows */
			return 0;
		}
		return pop(u) ? 0 : -1;
	case '1': /* POP_MARK */
		if (pop_mark(u, &base) < 0)
			return -1;
		u->sp = base;
		return 0;
	case '2': /* DUP */
		return (a = top(u)) ? push(u, a) : -1;
	case 'N':
		return push(u, pk_none(u->d));
	case 0x88:
		return push(u, pk_bool(u->d, true));
	case 0x89:
		return push(u, pk_bool(u->d, false));
	case 'J': /* BININT */
		if (need(u, 4) < 0)
			return -1;
		u->pos += 4;
		return push(u, pk_int(u->d, (int32_t)(uint32_t)le(u->p + u->pos - 4, 4)));
	case 'K': /* BININT1 */
		if (need(u, 1) < 0)
			return -1;
		return push(u, pk_int(u->d, u->p[u->pos++]));
	case 'M': /* BININT2 */
		if (need(u, 2) < 0)
			return -1;
		u->pos += 2;
		return push(u, pk_int(u->d, (int64_t)le(u->p + u->pos - 2, 2)));
	case 0x8a: /* LONG1 */
		if (need(u, 1) < 0)
			return -1;
		return push(u, long_int(u, u->p[u->pos++]));
	case 0x8b: { /* LONG4 */
		if (need(u, 4) < 0)
			return -1;
		int32_t n = (int32_t)(uint32_t)le(u->p + u->pos, 4);
		u->pos += 4;
		if (n < 0)
			return bad(u, "negative length");
		return push(u, long_int(u, (size_t)n));
	}
	case 'G': { /* BINFLOAT, big-endian */
		if (need(u, 8) < 0)
			return -1;
		uint64_t x = 0;
		for (int i = 0; i < 8; i++)
			x = x << 8 | u->p[u->pos + i];
		u->pos += 8;
		double f;
		memcpy(&f, &x, 8);
		return push(u, pk_float(u->d, f));
	}
	case 0x8c: /* SHORT_BINUNICODE */
	case 'C':  /* SHORT_BINBYTES */
		if (need(u, 1) < 0)
			return -1;
		u->pos++;
		return push(u, text(u, u->op == 'C' ? PK_BYTES : PK_STR, u->p[u->pos - 1]));
	case 'X': /* BINUNICODE */
	case 'B': /* BINBYTES */
		if (need(u, 4) < 0)
			return -1;
		u->pos += 4;
		return push(u, text(u, u->op == 'B' ? PK_BYTES : PK_STR, le(u->p + u->pos - 4, 4)));
	case 0x8d: /* BINUNICODE8 */
	case 0x8e: /* BINBYTES8 */
	case 0x96: { /* BYTEARRAY8 */
		if (need(u, 8) < 0)
			return -1;
		uint64_t n = le(u->p + u->pos, 8);
		u->pos += 8;
		if (n > u->len)
			return bad(u, "truncated: %" PRIu64 " bytes wanted", n);
		if (!(a = text(u, u->op == 0x8d ? PK_STR : PK_BYTES, (size_t)n)))
			return -1;
		if (u->op == 0x96)
			a->flags = PK_F_BYTEARRAY;
		return push(u, a);
	}
	case ']': /* EMPTY_LIST */
		return push(u, pk_list(u->d));
	case ')': /* EMPTY_TUPLE */
		return push(u, pk_tuple(u->d));
	case '}': /* EMPTY_DICT */
		return push(u, pk_dict(u->d));
	case 0x8f: /* EMPTY_SET */
		return push(u, node(u->d, PK_SET));
	case 'l': /* LIST */
	case 't': /* TUPLE */
	case 0x91: /* FROZENSET */
		if (pop_mark(u, &base) < 0)
			return -1;
		a = make_tuple(u, base);
		a->kind = u->op == 'l' ? PK_LIST : u->op == 't' ? PK_TUPLE : PK_SET;
		if (u->op == 0x91)
			a->flags = PK_F_FROZEN;
		return push(u, a);
	case 0x85: /* TUPLE1 */
	case 0x86: /* TUPLE2 */
	case 0x87: { /* TUPLE3 */
		size_t n = (size_t)(u->op - 0x84);
		if (u->sp < mark_base(u) + n)
			return bad(u, "stack underflow");
		return push(u, make_tuple(u, u->sp - n));
	}
	case 'd': /* DICT */
		if (pop_mark(u, &base) < 0)
			return -1;
		if ((u->sp - base) % 2)
			return bad(u, "odd number of items for a dict");
		a = pk_dict(u->d);
		for (size_t i = base; i < u->sp; i += 2)
			pk_set(u->d, a, u->stack[i], u->stack[i + 1]);
		u->sp = base;
		return push(u, a);
	case 'a': /* APPEND */
		if (!(b = pop(u)) || !(a = top(u)))
			return -1;
		if (a->kind != PK_LIST)
			return bad(u, "APPEND to a %s", pk_kind_name(a->kind));
		seq_push(a, b);
		return 0;
	case 'e': /* APPENDS */
	case 0x90: /* ADDITEMS */
		if (pop_mark(u, &base) < 0)
			return -1;
		if (base == mark_base(u) || base == 0)
			return bad(u, "stack underflow");
		a = u->stack[base - 1];
		if (a->kind != (u->op == 'e' ? PK_LIST : PK_SET) || (a->flags & PK_F_FROZEN))
			return bad(u, "%s to a %s", u->op == 'e' ? "APPENDS" : "ADDITEMS", pk_kind_name(a->kind));
		for (size_t i = base; i < u->sp; i++)
			seq_push(a, u->stack[i]);
		u->sp = base;
		return 0;
	case 's': /* SETITEM */
		if (!(c = pop(u)) || !(b = pop(u)) || !(a = top(u)))
			return -1;
		if (a->kind != PK_DICT)
			return bad(u, "SETITEM on a %s", pk_kind_name(a->kind));
		pk_set(u->d, a, b, c);
		return 0;
	case 'u': /* SETITEMS */
		if (pop_mark(u, &base) < 0)
			return -1;
		if (base == mark_base(u) || base == 0)
			return bad(u, "stack underflow");
		a = u->stack[base - 1];
		if (a->kind != PK_DICT)
			return bad(u, "SETITEMS on a %s", pk_kind_name(a->kind));
		if ((u->sp - base) % 2)
			return bad(u, "odd number of items for a dict");
		for (size_t i = base; i < u->sp; i += 2)
			pk_set(u->d, a, u->stack[i], u->stack[i + 1]);
		u->sp = base;
		return 0;
	case 'q': /* BINPUT */
		if (need(u, 1) < 0)
			return -1;
		return memo_put(u, u->p[u->pos++]);
	case 'r': /* LONG_BINPUT */
		if (need(u, 4) < 0)
			return -1;
		u->pos += 4;
		return memo_put(u, le(u->p + u->pos - 4, 4));
	case 0x94: /* MEMOIZE */
		return memo_put(u, u->memo_count);
	case 'h': /* BINGET */
		if (need(u, 1) < 0)
			return -1;
		return memo_get(u, u->p[u->pos++]);
	case 'j': /* LONG_BINGET */
		if (need(u, 4) < 0)
			return -1;
		u->pos += 4;
		return memo_get(u, le(u->p + u->pos - 4, 4));
	case 'p': /* PUT */
	case 'g': { /* GET */
		uint64_t idx = 0;
		if (line_index(u, &idx) < 0)
			return -1;
		return u->op == 'p' ? memo_put(u, idx) : memo_get(u, idx);
	}
	case 'c': /* GLOBAL */
		return text_global(u);
	case 0x93: /* STACK_GLOBAL */
		if (!(b = pop(u)) || !(a = pop(u)))
			return -1;
		if (a->kind != PK_STR || b->kind != PK_STR)
			return bad(u, "STACK_GLOBAL of a %s and a %s", pk_kind_name(a->kind), pk_kind_name(b->kind));
		return global(u, a->s.p, a->s.len, b->s.p, b->s.len);
	case 'R': /* REDUCE */
	case 0x81: /* NEWOBJ */
		if (!(b = pop(u)) || !(a = pop(u)))
			return -1;
		return push(u, call(u, a, b));
	case 0x92: /* NEWOBJ_EX */
		if (!(c = pop(u)) || !(b = pop(u)) || !(a = pop(u)))
			return -1;
		if (!is_dict(c) || c->seq.n)
			return bad(u, "NEWOBJ_EX with keyword arguments");
		return push(u, call(u, a, b));
	case 'b': /* BUILD */
		return build(u);
	case 'Q': /* BINPERSID */
		return persistent(u);
	case 0x97:
	case 0x98:
		return bad(u, "out-of-band buffers are not read");
	case 'I': case 'L': case 'F': case 'S': case 'V': case 'T': case 'U': case 'P': case 'i': case 'o':
	case 0x82: case 0x83: case 0x84:
		return bad(u, "opcode of pickle protocol 0/1 or an extension code: not read");
	default:
		return bad(u, "unknown opcode");
	}
}

struct pk_value *pk_loads(struct pk_doc *d, const void *buf, size_t len, const struct pk_load_opts *opts)
{
	struct unpickler u = { .d = d, .o = opts, .p = buf, .len = len };
	struct pk_value *result = NULL;
	int r = 0;
	while (r == 0) {
		if (u.pos >= u.len) {
			u.op = -1;
			u.op_pos = u.pos;
			r = bad(&u, "truncated: no STOP");
			break;
		}
		r = step(&u, &result);
	}
	if (r > 0 && u.pos != u.len)
		r = bad(&u, "%zu bytes after STOP", u.len - u.pos);
	if (r > 0) {
		u.op = '.';
		r = walk(&u, result, 0);
		for (size_t i = 0; i < d->n; i++)
			d->nodes[i]->mark = 0;
	}
	free(u.stack);
	free(u.marks);
	free(u.memo);
	free(u.storages);
	return r < 0 ? NULL : result;
}

/* ---- the pickler (protocol 2) ---- */

struct pickler {
	struct sbuf *out;
	struct pk_value **storages;
	size_t n, cap;
};

static void op(struct pickler *w, int c)
{
	sbuf_addch(w->out, c);
}

static void put_le(struct pickler *w, uint64_t x, int n)
{
	for (int i = 0; i < n; i++)
		sbuf_addch(w->out, (int)((x >> (8 * i)) & 0xff));
}

static void w_global(struct pickler *w, const char *name)
{
	const char *dot = strrchr(name, '.');
	if (!dot)
		BUG("global '%s' without a module", name);
	op(w, 'c');
	sbuf_add(w->out, name, (size_t)(dot - name));
	sbuf_addch(w->out, '\n');
	sbuf_addstr(w->out, dot + 1);
	sbuf_addch(w->out, '\n');
}

static void w_int(struct pickler *w, int64_t i)
{
	if (i >= 0 && i < 256) {
		op(w, 'K');
		put_le(w, (uint64_t)i, 1);
	} else if (i >= 0 && i < 65536) {
		op(w, 'M');
		put_le(w, (uint64_t)i, 2);
	} else if (i >= INT32_MIN && i <= INT32_MAX) {
		op(w, 'J');
		put_le(w, (uint64_t)i, 4);
	} else {
		/* the fewest bytes of two's complement that keep the sign */
		int n = 8;
		while (n > 1) {
			int64_t lo = (int64_t)((uint64_t)i << (64 - 8 * (n - 1))) >> (64 - 8 * (n - 1));
			if (lo != i)
				break;
			n--;
		}
		op(w, 0x8a);
		put_le(w, (uint64_t)n, 1);
		put_le(w, (uint64_t)i, n);
	}
}

static int w_str(struct pickler *w, const char *p, size_t n)
{
	if (n > UINT32_MAX)
		return error("pickle: a string of %zu bytes does not fit protocol 2", n);
	op(w, 'X');
	put_le(w, n, 4);
	sbuf_add(w->out, p, n);
	return 0;
}

/* bytes as protocol 2 writes them: _codecs.encode(<latin-1 text>, "latin1") */
static int w_bytes(struct pickler *w, const char *p, size_t n, bool bytearray)
{
	struct sbuf t = SBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x80) {
			sbuf_addch(&t, c);
		} else {
			sbuf_addch(&t, 0xc0 | c >> 6);
			sbuf_addch(&t, 0x80 | (c & 0x3f));
		}
	}
	if (bytearray)
		w_global(w, "builtins.bytearray");
	w_global(w, "_codecs.encode");
	int r = w_str(w, t.buf ? t.buf : "", t.len);
	sbuf_release(&t);
	w_str(w, "latin1", 6);
	op(w, 0x86);
	op(w, 'R');
	if (bytearray) {
		op(w, 0x85);
		op(w, 'R');
	}
	return r;
}

static void w_odict_new(struct pickler *w)
{
	w_global(w, "collections.OrderedDict");
	op(w, ')');
	op(w, 'R');
}

static int w_value(struct pickler *w, struct pk_value *v, int depth);

static int w_items(struct pickler *w, struct pk_value **v, size_t n, int depth)
{
	for (size_t i = 0; i < n; i++)
		if (w_value(w, v[i], depth + 1) < 0)
			return -1;
	return 0;
}

static int w_tuple(struct pickler *w, struct pk_value **v, size_t n, int depth)
{
	if (n == 0) {
		op(w, ')');
		return 0;
	}
	if (n > 3)
		op(w, '(');
	if (w_items(w, v, n, depth) < 0)
		return -1;
	op(w, n > 3 ? 't' : 0x84 + (int)n);
	return 0;
}

static void w_dims(struct pickler *w, const int64_t *d, int n)
{
	if (n == 0) {
		op(w, ')');
		return;
	}
	if (n > 3)
		op(w, '(');
	for (int i = 0; i < n; i++)
		w_int(w, d[i]);
	op(w, n > 3 ? 't' : 0x84 + n);
}

static int w_storage(struct pickler *w, struct pk_value *s)
{
	if (!s->mark) {
		xgrow(&w->storages, &w->cap, w->n + 1, sizeof(*w->storages));
		w->storages[w->n++] = s;
		s->mark = (long)w->n;
	}
	char key[32], cls[64];
	snprintf(key, sizeof(key), "%ld", s->mark - 1);
	snprintf(cls, sizeof(cls), "torch.%s", dtypes[s->st.dtype].storage);
	op(w, '(');
	w_str(w, "storage", 7);
	w_global(w, cls);
	w_str(w, key, strlen(key));
	w_str(w, s->st.location, strlen(s->st.location));
	w_int(w, s->st.numel);
	op(w, 't');
	op(w, 'Q');
	return 0;
}

static int w_tensor(struct pickler *w, struct pk_value *v)
{
	bool param = v->flags & PK_F_PARAMETER;
	if (param) {
		w_global(w, "torch._utils._rebuild_parameter");
		op(w, '(');
	}
	w_global(w, "torch._utils._rebuild_tensor_v2");
	op(w, '(');
	w_storage(w, v->t.storage);
	w_int(w, v->t.offset);
	w_dims(w, v->t.size, v->t.ndim);
	w_dims(w, v->t.stride, v->t.ndim);
	op(w, !param && v->t.requires_grad ? 0x88 : 0x89);
	w_odict_new(w);
	op(w, 't');
	op(w, 'R');
	if (param) {
		op(w, v->t.requires_grad ? 0x88 : 0x89);
		w_odict_new(w);
		op(w, 't');
		op(w, 'R');
	}
	return 0;
}

/* numpy arrays as numpy pickles them: _reconstruct(ndarray, (0,), b'b'),
 * then BUILD with (1, shape, dtype, fortran, data) */
static int w_ndarray(struct pickler *w, struct pk_value *v)
{
	w_global(w, "numpy.core.multiarray._reconstruct");
	w_global(w, "numpy.ndarray");
	w_int(w, 0);
	op(w, 0x85);
	w_bytes(w, "b", 1, false);
	op(w, 0x87);
	op(w, 'R');
	op(w, '(');
	w_int(w, 1);
	w_dims(w, v->nd.shape, v->nd.ndim);
	w_global(w, "numpy.dtype");
	w_str(w, v->nd.descr + 1, strlen(v->nd.descr + 1));
	op(w, 0x89);
	op(w, 0x88);
	op(w, 0x87);
	op(w, 'R');
	op(w, '(');
	w_int(w, 3);
	w_str(w, v->nd.descr, 1);
	op(w, 'N');
	op(w, 'N');
	op(w, 'N');
	w_int(w, -1);
	w_int(w, -1);
	w_int(w, 0);
	op(w, 't');
	op(w, 'b');
	op(w, v->nd.fortran ? 0x88 : 0x89);
	w_bytes(w, v->nd.data, v->nd.nbytes, false);
	op(w, 't');
	op(w, 'b');
	return 0;
}

static int w_value(struct pickler *w, struct pk_value *v, int depth)
{
	if (depth > PK_MAX_DEPTH)
		return error("pickle: value nested deeper than %d (or containing itself)", PK_MAX_DEPTH);
	switch (v->kind) {
	case PK_NONE:
		op(w, 'N');
		return 0;
	case PK_BOOL:
		op(w, v->b ? 0x88 : 0x89);
		return 0;
	case PK_INT:
		w_int(w, v->i);
		return 0;
	case PK_FLOAT: {
		uint64_t x;
		memcpy(&x, &v->f, 8);
		op(w, 'G');
		for (int i = 7; i >= 0; i--)
			sbuf_addch(w->out, (int)((x >> (8 * i)) & 0xff));
		return 0;
	}
	case PK_STR:
		return w_str(w, v->s.p, v->s.len);
	case PK_BYTES:
		return w_bytes(w, v->s.p, v->s.len, v->flags & PK_F_BYTEARRAY);
	case PK_GLOBAL:
		w_global(w, v->s.p);
		return 0;
	case PK_LIST:
	case PK_DICT: {
		bool dict = v->kind == PK_DICT;
		size_t n = dict ? 2 * v->seq.n : v->seq.n, batch = dict ? 2000 : 1000;
		if (dict && (v->flags & PK_F_ORDERED))
			w_odict_new(w);
		else
			op(w, dict ? '}' : ']');
		for (size_t i = 0; i < n; i += batch) {
			size_t m = n - i < batch ? n - i : batch;
			op(w, '(');
			if (w_items(w, v->seq.v + i, m, depth) < 0)
				return -1;
			op(w, dict ? 'u' : 'e');
		}
		return 0;
	}
	case PK_TUPLE:
		return w_tuple(w, v->seq.v, v->seq.n, depth);
	case PK_SET:
		w_global(w, v->flags & PK_F_FROZEN ? "builtins.frozenset" : "builtins.set");
		op(w, ']');
		if (v->seq.n) {
			op(w, '(');
			if (w_items(w, v->seq.v, v->seq.n, depth) < 0)
				return -1;
			op(w, 'e');
		}
		op(w, 0x85);
		op(w, 'R');
		return 0;
	case PK_OBJECT:
		w_global(w, v->obj.cls);
		if (!v->obj.args) {
			op(w, ')');
			op(w, 0x81);
		} else if (v->obj.args->kind != PK_TUPLE) {
			return error("pickle: object '%s' whose arguments are a %s", v->obj.cls,
				     pk_kind_name(v->obj.args->kind));
		} else {
			if (w_value(w, v->obj.args, depth + 1) < 0)
				return -1;
			op(w, 'R');
		}
		if (v->obj.state) {
			if (w_value(w, v->obj.state, depth + 1) < 0)
				return -1;
			op(w, 'b');
		}
		return 0;
	case PK_STORAGE:
		return w_storage(w, v);
	case PK_TENSOR:
		return w_tensor(w, v);
	case PK_NDARRAY:
		if (v->nd.ndim < 0)
			return error("pickle: a numpy array without its data");
		return w_ndarray(w, v);
	default:
		return error("pickle: cannot write a %s", pk_kind_name(v->kind));
	}
}

int pk_dumps(struct pk_value *v, struct sbuf *out, struct pk_value ***storages, size_t *nstorages)
{
	struct pickler w = { .out = out };
	op(&w, 0x80);
	op(&w, 2);
	int r = w_value(&w, v, 0);
	op(&w, '.');
	for (size_t i = 0; i < w.n; i++)
		w.storages[i]->mark = 0;
	if (r < 0) {
		free(w.storages);
		return -1;
	}
	*storages = w.storages;
	*nstorages = w.n;
	return 0;
}
