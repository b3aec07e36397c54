/*
 * dcp.h - reading a PyTorch Distributed Checkpoint (DCP) folder, the
 * container of Megatron's `torch_dist` checkpoints, without Python.
 *
 * A DCP folder holds:
 *
 *   .metadata        a pickle (protocol 4) of torch.distributed.checkpoint's
 *                    Metadata: for every item of the saved state dict (its
 *                    fully qualified name, "fqn") either a tensor's global
 *                    dtype and size and the chunks it was saved in (each an
 *                    offset and a size inside the global tensor), or a
 *                    "bytes" item (any picklable object); and where each
 *                    chunk or bytes item is stored: a file, an offset and a
 *                    length.
 *   __R_K.distcp     the data files (rank R's K-th file). Every chunk and
 *                    bytes item is a complete torch.save archive (zip) at its
 *                    offset: a tensor of the chunk's size, or the object.
 *
 * dcp_open reads .metadata through the pickle reader (its allow-list has
 * DCP's data classes; nothing is executed) and indexes the items by name.
 * dcp_read_tensor assembles a whole global tensor from its chunks, checking
 * that they cover it exactly once; dcp_read_object loads a bytes item into a
 * pickle document. Data files are mapped on first use and kept until
 * dcp_close. Compressed or otherwise transformed items (newer PyTorch's
 * storage extensions) are refused by name.
 *
 * Errors: error() naming the folder and the item, then NULL or -1.
 */
#ifndef MEGAC_CKPT_DCP_H
#define MEGAC_CKPT_DCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/pickle.h"

struct dcp;

/* The most elements (and the largest size along an axis) a tensor of a DCP
 * folder may have: 2^48, so byte counts never overflow. */
#define DCP_MAX_NUMEL ((int64_t)1 << 48)

struct dcp_chunk {
	int64_t offset[PK_MAX_NDIM]; /* where it sits in the global tensor */
	int64_t size[PK_MAX_NDIM];
	int file;		     /* index into the folder's data files */
	uint64_t at, len;	     /* the torch.save archive's bytes in that file */
};

struct dcp_item {
	char *fqn;
	bool tensor;	     /* a tensor, or a bytes item (one "chunk": its storage) */
	enum pk_dtype dtype; /* tensors */
	int ndim;
	int64_t size[PK_MAX_NDIM];
	struct dcp_chunk *chunks;
	int nchunks;
	char **path; /* writing: the nested keys fqn was flattened from (dcp_put_path), npath of them */
	int npath;
};

/* Read dir/.metadata. NULL after error(). */
struct dcp *dcp_open(const char *dir);
void dcp_close(struct dcp *c);
int dcp_count(const struct dcp *c);
const struct dcp_item *dcp_item(const struct dcp *c, int i); /* in name order */
const struct dcp_item *dcp_find(const struct dcp *c, const char *fqn);
/* The elements of a global tensor (item->tensor), in C order, of its own
 * dtype, into out (numel * element size bytes). 0, or -1 after error(). */
int dcp_read_tensor(struct dcp *c, const struct dcp_item *it, void *out);
/* A bytes item's object, loaded into d (torch.load of its archive, from a
 * copy that d keeps: its tensors outlive dcp_close). NULL after error(). */
struct pk_value *dcp_read_object(struct dcp *c, struct pk_doc *d, const struct dcp_item *it);

/* ---- writing ---- */

/*
 * A DCP folder as one rank writes it: every item into dir/__0_0.distcp (a
 * temporary name until dcp_finish), then dir/.metadata. dir must exist; the
 * caller publishes it (a checkpoint's hidden iteration folder). Tensors are
 * given chunk by chunk (offset and size inside the global tensor), objects
 * whole; nothing is kept in memory but the metadata.
 */
struct dcp_writer;

struct dcp_writer *dcp_create(const char *dir);
/* A chunk of global tensor fqn ([ndim] gsize, dtype dt: the same for every
 * chunk of it), at offset, of size csize, elements in C order. */
int dcp_put_chunk(struct dcp_writer *w, const char *fqn, enum pk_dtype dt, int ndim, const int64_t *gsize,
		  const int64_t *offset, const int64_t *csize, const void *data);
/* A bytes item: v (a value of the caller's document) torch.save'd. */
int dcp_put_object(struct dcp_writer *w, const char *fqn, struct pk_value *v);
/* The nested keys item fqn (given before) was flattened from, n of them
 * (("optimizer", "state", "module.x.weight", "exp_avg") for
 * optimizer.state.module.x.weight.exp_avg): DCP's planner_data, by which
 * PyTorch's loaders put a flattened state dict back together. Without any,
 * planner_data is None, as Megatron's torch_dist strategy leaves it. */
int dcp_put_path(struct dcp_writer *w, const char *fqn, int n, const char *const *path);
/* Write .metadata (checking that every tensor's chunks cover it once) and
 * commit both files; frees w. 0, or -1 after error() with nothing left. */
int dcp_finish(struct dcp_writer *w);
void dcp_abort(struct dcp_writer *w);

#endif
