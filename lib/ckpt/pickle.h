/*
 * pickle.h - a reader and a writer of Python pickles for plain data and
 * PyTorch tensors, without Python and without running anything.
 *
 * What torch.save writes (protocol 2) and what Python's pickle writes with
 * protocols 2 to 5 for dicts, lists, tuples, strings, bytes, numbers, sets
 * and a few known classes is read into a tree of struct pk_value nodes. A
 * pickle names the classes and functions it needs as "globals" (GLOBAL,
 * STACK_GLOBAL); Python imports and calls them, which is how a pickle runs
 * arbitrary code. Here a global is only looked up in a fixed allow-list
 * (docs/torch-pickle.md) that says what node it makes: collections.OrderedDict
 * a dict marked ordered, torch._utils._rebuild_tensor_v2 a tensor over a
 * storage, argparse.Namespace an object holding its attribute dict, numpy's
 * _reconstruct an array, Megatron's enum classes a named value. Anything
 * else is refused by name ("pickle: refusing global 'os.system'").
 *
 * Storages are not in the pickle: torch.save writes a persistent id
 * ('storage', <Storage class>, key, location, numel) and the bytes in a
 * separate file; a callback of the caller (torch_zip.h: the zip member
 * <archive>/data/<key>) gives them. Tensors of one storage share one node.
 *
 * Memory: every node belongs to a struct pk_doc and is freed with it, so a
 * tree may share nodes (the pickle's memo makes shared references) and
 * callers never free nodes one by one. A loaded tree has no cycles (they are
 * refused) and is at most PK_MAX_DEPTH deep, so it can be walked recursively.
 *
 * Errors: pk_loads and pk_dumps report through error(), naming the input
 * (opts->what), the byte offset and the opcode, and return NULL or -1;
 * truncated or malformed input is never more than an error.
 */
#ifndef MEGAC_CKPT_PICKLE_H
#define MEGAC_CKPT_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/sbuf.h"

#define PK_MAX_NDIM 16
/* Deepest nesting of containers (and of the unpickler's MARK stack). */
#define PK_MAX_DEPTH 256

enum pk_kind {
	PK_NONE,
	PK_BOOL,
	PK_INT,
	PK_FLOAT,
	PK_STR,     /* UTF-8 text */
	PK_BYTES,   /* bytes, or bytearray (PK_F_BYTEARRAY) */
	PK_LIST,
	PK_TUPLE,   /* tuples and torch.Size */
	PK_DICT,    /* dict, or collections.OrderedDict (PK_F_ORDERED) */
	PK_SET,     /* set, or frozenset (PK_F_FROZEN) */
	PK_GLOBAL,  /* an allowed global used as a value: torch.float32, an enum class, a Storage class */
	PK_OBJECT,  /* an instance of an allowed class: argparse.Namespace, enum members, numpy.dtype */
	PK_STORAGE, /* a torch storage: bytes from the caller's callback */
	PK_TENSOR,  /* a torch tensor: a strided view of a storage */
	PK_NDARRAY, /* a numpy array (C or Fortran order), its bytes owned by the document */
	PK_NKINDS
};

/* flags of struct pk_value */
#define PK_F_ORDERED   0x1 /* PK_DICT: a collections.OrderedDict */
#define PK_F_FROZEN    0x2 /* PK_SET: a frozenset */
#define PK_F_BYTEARRAY 0x4 /* PK_BYTES: a bytearray */
#define PK_F_PARAMETER 0x8 /* PK_TENSOR: a torch.nn.Parameter */

/* Element types of storages and tensors, with torch's names. */
enum pk_dtype {
	PK_DT_F32,
	PK_DT_F64,
	PK_DT_F16,
	PK_DT_BF16,
	PK_DT_I64,
	PK_DT_I32,
	PK_DT_I16,
	PK_DT_I8,
	PK_DT_U8,
	PK_DT_BOOL,
	PK_NDTYPES
};

struct pk_value;

struct pk_seq {
	struct pk_value **v; /* PK_DICT: v[2i] key, v[2i + 1] value of pair i */
	size_t n;            /* items (pairs for PK_DICT) */
	size_t cap;
	size_t *hash;        /* PK_DICT's index (internal) */
	size_t hcap;
};

struct pk_object {
	const char *cls;        /* "argparse.Namespace", "megatron.core.enums.ModelType", "numpy.dtype" */
	struct pk_value *args;  /* a tuple: the arguments it was made with, or NULL */
	struct pk_value *state; /* what BUILD gave it (a Namespace's attribute dict), or NULL */
};

struct pk_storage {
	const char *key;      /* the persistent id's key: zip member data/<key> */
	const char *location; /* "cpu", "cuda:0", ... */
	enum pk_dtype dtype;
	int64_t numel;        /* elements of dtype */
	const void *data;     /* numel elements, little-endian; not owned (the mapped file, or the caller's) */
};

struct pk_tensor {
	struct pk_value *storage; /* a PK_STORAGE node */
	int64_t offset;           /* in elements */
	int ndim;
	int64_t size[PK_MAX_NDIM];
	int64_t stride[PK_MAX_NDIM]; /* in elements */
	bool requires_grad;
};

struct pk_ndarray {
	char descr[8];  /* numpy's dtype string: "<u4", "<f8", "|b1" */
	size_t itemsize;
	bool fortran;
	int ndim;
	int64_t shape[PK_MAX_NDIM];
	const void *data; /* the elements (owned by the document) */
	size_t nbytes;
};

struct pk_value {
	enum pk_kind kind;
	unsigned flags;
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			char *p; /* NUL-terminated (bytes may hold NULs too) */
			size_t len;
		} s;      /* PK_STR, PK_BYTES; PK_GLOBAL's "module.name" */
		struct pk_seq seq; /* PK_LIST, PK_TUPLE, PK_SET, PK_DICT */
		struct pk_object obj;
		struct pk_storage st;
		struct pk_tensor t;
		struct pk_ndarray nd;
	};
	long mark; /* internal (walks) */
};

struct pk_doc;

struct pk_doc *pk_doc_new(void);
/* Frees every node of d and runs the clean-ups attached to it. NULL is fine. */
void pk_doc_free(struct pk_doc *d);
/* fn(p) runs when d is freed (torch_load attaches the mapped file). */
void pk_doc_attach(struct pk_doc *d, void (*fn)(void *), void *p);

/* ---- reading ---------------------------------------------------------------- */

/* Gives the bytes of storage `key` (*data valid as long as the document):
 * 0, or -1 after error(). */
typedef int (*pk_storage_fn)(void *ctx, const char *key, const void **data, size_t *nbytes);

struct pk_load_opts {
	const char *what;      /* the input's name in messages ("x.pt:archive/data.pkl") */
	pk_storage_fn storage; /* NULL: persistent ids are refused */
	void *ctx;
};

/* Unpickle buf[0..len) into nodes of d. NULL after error(). */
struct pk_value *pk_loads(struct pk_doc *d, const void *buf, size_t len, const struct pk_load_opts *opts);

const char *pk_kind_name(enum pk_kind k);
const char *pk_dtype_name(enum pk_dtype dt); /* "float32", "bfloat16", ... as torch names them */
size_t pk_dtype_size(enum pk_dtype dt);

/* The value of dict entry key (a str key), or NULL. */
struct pk_value *pk_get(const struct pk_value *dict, const char *key);
int64_t pk_tensor_numel(const struct pk_value *t);
bool pk_tensor_contiguous(const struct pk_value *t);
/* Copy a tensor's elements in C order into dst (numel * element size bytes). */
void pk_tensor_gather(const struct pk_value *t, void *dst);

/* ---- building and writing ----------------------------------------------------- */

struct pk_value *pk_none(struct pk_doc *d);
struct pk_value *pk_bool(struct pk_doc *d, bool b);
struct pk_value *pk_int(struct pk_doc *d, int64_t i);
struct pk_value *pk_float(struct pk_doc *d, double f);
struct pk_value *pk_str(struct pk_doc *d, const char *s); /* UTF-8 */
struct pk_value *pk_bytes(struct pk_doc *d, const void *p, size_t n);
struct pk_value *pk_list(struct pk_doc *d);
struct pk_value *pk_tuple(struct pk_doc *d);
struct pk_value *pk_dict(struct pk_doc *d);
struct pk_value *pk_odict(struct pk_doc *d); /* a collections.OrderedDict */
/* A global by its dotted name ("torch.bfloat16"); written as it is named. */
struct pk_value *pk_global(struct pk_doc *d, const char *name);
/* An argparse.Namespace; its attributes go into ns->obj.state, a dict. */
struct pk_value *pk_namespace(struct pk_doc *d);
/* An instance of class cls (a dotted name): written as cls called with the
 * tuple args (NULL: made with no arguments, NEWOBJ), then given state (NULL:
 * none) by BUILD. Reading it back needs cls on the allow-list. */
struct pk_value *pk_object(struct pk_doc *d, const char *cls, struct pk_value *args, struct pk_value *state);
/* A storage of numel elements over data (not copied: it must outlive the
 * document's last pk_dumps / torch_save). */
struct pk_value *pk_storage(struct pk_doc *d, enum pk_dtype dt, const void *data, int64_t numel);
/* A tensor viewing storage st; stride NULL means C order. NULL after error()
 * when the view reaches outside the storage. */
struct pk_value *pk_tensor(struct pk_doc *d, struct pk_value *st, int64_t offset, int ndim, const int64_t *size,
			   const int64_t *stride);

/* Append v to a list, tuple or set. */
void pk_append(struct pk_value *seq, struct pk_value *v);
/* dict[key] = v (replacing an equal key's value, as Python does). */
void pk_set(struct pk_doc *d, struct pk_value *dict, struct pk_value *key, struct pk_value *v);
void pk_set_str(struct pk_doc *d, struct pk_value *dict, const char *key, struct pk_value *v);

/* Pickle v with protocol 2 as torch.save does, appending to out. Storages
 * become persistent ids with keys "0", "1", ... in order of first use; their
 * nodes are stored in *storages (caller frees the array), *nstorages set.
 * Writes dicts, OrderedDicts, lists, tuples, sets, str, bytes, int, float,
 * bool, None, tensors, globals, argparse.Namespace and objects made by
 * calling an allowed class (enum members); other nodes (numpy arrays) are
 * refused. -1 after error(). */
int pk_dumps(struct pk_value *v, struct sbuf *out, struct pk_value ***storages, size_t *nstorages);

#endif
