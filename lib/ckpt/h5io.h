/*
 * h5io.h - the HDF5 helpers under lib/ckpt/ckpt.c: error reporting, file
 * access properties, attributes, paths with groups, type descriptions, and
 * the CRC-32 that guards every stored tensor.
 *
 * Every HDF5 call that can fail goes through H5IO_OK or H5IO_SET. On
 * failure they print one error() line: what we were doing (the caller's
 * text, which names the file and the object), HDF5's innermost reason, and
 * the HDF5 function with the file and line of our code that called it,
 *
 *   prog: error: cannot create dataset 'x' in '/save/iter_0000005/model.h5':
 *   name already exists [H5Dcreate2 at lib/ckpt/ckpt.c:412]
 *
 * and evaluate to -1 (0 on success) so callers propagate it. HDF5's own
 * error-stack printing is switched off by h5io_init(), so nothing else of
 * HDF5's reaches stderr.
 *
 * HDF5 (the Debian hdf5-openmpi build in particular) is not thread-safe:
 * callers serialize all use of this module and of ckpt.h.
 */
#ifndef MEGAC_CKPT_H5IO_H
#define MEGAC_CKPT_H5IO_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "base/error.h"

/* Report a failed HDF5 call (see above); always returns -1. `call` is the
 * stringified call expression, of which the function name is shown. */
int h5io_fail(const char *src, int line, const char *call, const char *fmt, ...) MC_PRINTF(4, 5);

/* herr_t / htri_t / hid_t call: 0 when it succeeded (>= 0), else -1 after
 * the error message; the rest of the arguments are printf() text saying
 * what we were doing. */
#define H5IO_OK(call, ...) ((call) < 0 ? h5io_fail(__FILE__, __LINE__, #call, __VA_ARGS__) : 0)
/* The same, keeping the call's value in var (an hid_t, htri_t, ...). */
#define H5IO_SET(var, call, ...) \
	(((var) = (call)) < 0 ? h5io_fail(__FILE__, __LINE__, #call, __VA_ARGS__) : 0)

/* Switch off HDF5's automatic error printing. Cheap and idempotent; called
 * by every entry point of ckpt.c that is about to use HDF5. */
void h5io_init(void);

/* A file access property list for our files: POSIX (sec2) driver, closing
 * the file closes everything in it, no file locking (our files are private
 * while written and immutable afterwards, and locking fails on some
 * parallel file systems), and for writing the HDF5 1.8 format, whose
 * metadata is checksummed. -1 after error() on failure. */
hid_t h5io_fapl(const char *display, int writing);
/* File and dataset creation properties that keep no modification times,
 * so the same checkpoint written twice is the same bytes. */
hid_t h5io_fcpl(const char *display);
hid_t h5io_dcpl(const char *display);

/* Close an HDF5 identifier of any kind, ignoring invalid ones (for error
 * paths, where the first error has been reported already). */
void h5io_close_quiet(hid_t id);

/*
 * Paths. `display` is always the file's path as the user should see it,
 * used in messages only.
 */

/* 1 when every component of path ("a/b/c") exists under loc and the last
 * one is an object of kind `type` (H5I_DATASET, H5I_GROUP; H5I_BADID for
 * any kind), 0 when not, -1 after error(). */
int h5io_exists(hid_t loc, const char *path, H5I_type_t type, const char *display);
/* 1 when a link called path exists under loc (its parents being groups),
 * whatever it points to: the link itself is not followed. 0 when not, -1
 * after error(). */
int h5io_link_exists(hid_t loc, const char *path, const char *display);
/* 1 when path under loc is an external link: *file and *obj (malloc'd) are
 * the file name and object path it stores, unresolved; 0 when path is
 * missing or anything else (then *file and *obj are NULL); -1 after error(). */
int h5io_external_link(hid_t loc, const char *path, char **file, char **obj, const char *display);
/* Create the groups leading to path's last component ("a/b" for "a/b/c")
 * where missing. */
/* Every dataset and external link below group `loc` (recursing into real
 * groups), as paths relative to it ("exp_avg/decoder.layers.0...."), in name
 * order; *names and each string are malloc'd. -1 after error(). */
int h5io_list_tensors(hid_t loc, char ***names, size_t *n, const char *display);

/* The names of the attributes of the object at `loc` and the kind of each:
 * 'i' integer, 'f' float, 's' string, '?' anything else (arrays included
 * as their element's kind). *names, *kinds and each name are malloc'd. */
int h5io_list_attrs(hid_t loc, char ***names, char **kinds, size_t *n, const char *display);

int h5io_make_parents(hid_t loc, const char *path, const char *display);
/* A valid object path: non-empty components separated by single '/', none
 * of them "." or "..", no leading or trailing '/'. */
int h5io_valid_path(const char *path);

/*
 * Scalar attributes on the object `obj` under loc ("." = loc itself).
 * Strings are stored as fixed-length UTF-8 of their exact length (h5py
 * reads them as bytes) and may be of any length; see fixed_str_type() in
 * h5io.c for why not variable-length. Putting an attribute that exists is
 * an error.
 */
int h5io_put_i64(hid_t loc, const char *obj, const char *name, int64_t v, const char *display);
int h5io_put_u32(hid_t loc, const char *obj, const char *name, uint32_t v, const char *display);
int h5io_put_f64(hid_t loc, const char *obj, const char *name, double v, const char *display);
int h5io_put_str(hid_t loc, const char *obj, const char *name, const char *v, const char *display);

/* 1 when the attribute exists, 0 when not, -1 after error(). */
int h5io_has_attr(hid_t loc, const char *obj, const char *name, const char *display);
/* Read a scalar (or one-element) attribute: any integer type for i64/u32
 * (range checked), any float for f64, a fixed- or variable-length string
 * for str (*out malloc'd). A missing attribute or another type is an
 * error naming the file, the object and what was found. */
int h5io_get_i64(hid_t loc, const char *obj, const char *name, int64_t *v, const char *display);
int h5io_get_u32(hid_t loc, const char *obj, const char *name, uint32_t *v, const char *display);
/* A one-dimensional attribute of n uint32 values; the getter checks the
 * count (n) and the type. */
int h5io_put_u32_array(hid_t loc, const char *obj, const char *name, const uint32_t *v, size_t n,
		       const char *display);
int h5io_get_u32_array(hid_t loc, const char *obj, const char *name, uint32_t *v, size_t n,
		       const char *display);
int h5io_get_f64(hid_t loc, const char *obj, const char *name, double *v, const char *display);
int h5io_get_str(hid_t loc, const char *obj, const char *name, char **out, const char *display);

/* "float32", "uint16", "int64", "string", "compound", ... for a datatype,
 * into buf; returns buf. For messages saying what was found. */
const char *h5io_type_name(hid_t type, char *buf, size_t n);

/*
 * CRC-32 as zlib's crc32() and Python's zlib.crc32() compute it
 * (reflected polynomial 0xEDB88320), slice-by-8. The 8 KiB of tables live
 * in the caller's object rather than in a global.
 */
struct h5io_crc32 {
	uint32_t t[8][256];
};
void h5io_crc32_init(struct h5io_crc32 *c);
/* Continue crc (0 to start) over buf[0..n). */
uint32_t h5io_crc32(const struct h5io_crc32 *c, uint32_t crc, const void *buf, size_t n);

#endif
