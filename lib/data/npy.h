/*
 * npy.h - numpy's .npy files (format 1.0), which Megatron uses for its dataset
 * index caches (docs/formats.md).
 *
 * The writer produces the bytes numpy 1.24's np.save writes for a C-order
 * array: magic "\x93NUMPY", version 1.0, u16 header length, the dict text
 * "{'descr': '<i4', 'fortran_order': False, 'shape': (N,), }", then
 * 21 - len(str(shape[0])) spaces of "growth room" (none for a 0-d array),
 * then spaces and a final '\n' so that data starts at a multiple of 64
 * (numpy pads 1..64 bytes: a header that would end exactly on the boundary
 * gets a whole extra 64).
 *
 * The reader maps the file and accepts versions 1.0, 2.0 and 3.0, any key
 * order and spacing numpy's literal_eval would, but only little-endian (or
 * single-byte) dtypes of the list below in C order, and a file size that is
 * exactly header + data. Anything else is refused with error() naming the
 * file. megac runs on little-endian hosts only, so data is used in place.
 */
#ifndef MEGAC_DATA_NPY_H
#define MEGAC_DATA_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/sbuf.h"
#include "base/tempfile.h"

enum npy_dtype {
	NPY_BOOL,   /* |b1 */
	NPY_I1,     /* |i1 */
	NPY_U1,     /* |u1 */
	NPY_I2,     /* <i2 */
	NPY_U2,     /* <u2 */
	NPY_I4,     /* <i4 */
	NPY_U4,     /* <u4 */
	NPY_I8,     /* <i8 */
	NPY_U8,     /* <u8 */
	NPY_F4,     /* <f4 */
	NPY_F8,     /* <f8 */
	NPY_NTYPES
};

#define NPY_MAX_DIMS 32  /* numpy's NPY_MAXDIMS */

/* The descr numpy writes ("<i4", "|b1") and the item size in bytes. */
const char *npy_descr(enum npy_dtype dt);
size_t npy_itemsize(enum npy_dtype dt);

/* Append to out the header np.save writes for a C-order array of this dtype
 * and shape (ndim 0..NPY_MAX_DIMS). The data follows it directly. */
void npy_header(struct sbuf *out, enum npy_dtype dt, int ndim, const uint64_t *shape);

/* Write header + data to an afile the caller opened (and will publish, so
 * several files can be finished before any is made visible). */
int npy_write_afile(struct afile *af, enum npy_dtype dt, int ndim, const uint64_t *shape, const void *data);
/* np.save(path, array): written atomically through an afile. */
int npy_save(const char *path, enum npy_dtype dt, int ndim, const uint64_t *shape, const void *data);

struct npy_array {
	enum npy_dtype dtype;
	int ndim;
	uint64_t shape[NPY_MAX_DIMS];
	uint64_t count;       /* number of elements: the product of shape */
	size_t itemsize;
	const void *data;     /* count * itemsize bytes, aligned for the dtype */
	/* private */
	void *map;
	size_t map_len;
	void *copy;           /* when the data offset was not aligned */
};

/* Load path (mmap). error() naming the file and -1 on anything unexpected;
 * *a is then empty and npy_close() on it is harmless. */
int npy_load(const char *path, struct npy_array *a);
void npy_close(struct npy_array *a);

/* Parse the header at the start of buf[0..len) (the whole file or at least
 * its header); `name` is used in messages. On success *data_off is where
 * the data starts; a->data is left NULL. Checks nothing about the data size. */
int npy_parse_header(const void *buf, size_t len, const char *name, struct npy_array *a, size_t *data_off);

#endif
