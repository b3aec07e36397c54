/*
 * safetensors.h - Hugging Face safetensors files: a validating mmap reader, a
 * streaming writer, and model folders (one file, or shards with an index).
 *
 * The format: 8 bytes little-endian uint64 N; N bytes of a UTF-8 JSON object
 * (padded with trailing spaces) that maps each tensor name to
 *   {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
 * and may hold "__metadata__": {"key": "string", ...}; then the data buffer.
 * Offsets count from the start of the data buffer (byte 8 + N); tensors are
 * C order, little-endian, and cover the buffer exactly.
 *
 * megac reads and writes the dtypes of enum ckpt_dtype: "F32", "BF16",
 * "F16", "I64". Files with other safetensors dtypes are refused by name.
 *
 * Errors: every function reports through error() (naming the file and the
 * tensor) and returns -1 or NULL; misuse of a handle is a BUG().
 */
#ifndef MEGAC_CKPT_SAFETENSORS_H
#define MEGAC_CKPT_SAFETENSORS_H

#include "ckpt/ckpt.h"

#include <stddef.h>
#include <stdint.h>

/* The largest header accepted, as the reference implementation's. */
#define ST_MAX_HEADER 100000000

/* ---- reading ---------------------------------------------------------------- */

struct st_file;

/* Map path and validate its header: length inside the file and below
 * ST_MAX_HEADER, a JSON object without duplicate keys, every tensor with a
 * dtype megac reads, at most CKPT_MAX_NDIM non-negative dimensions, and
 * offsets whose size matches the shape; the tensors cover the data buffer
 * without overlap or hole. Other keys of an entry are ignored, as the
 * reference implementation ignores them. NULL after error(). */
struct st_file *st_open(const char *path);
int st_count(const struct st_file *f);
/* Tensor i's name; tensors are numbered in order of data offset (ties, which
 * only empty tensors make, in header order). */
const char *st_name(const struct st_file *f, int i);
/* Index of the tensor called name, or -1 (no message). */
int st_find(const struct st_file *f, const char *name);
/* dtype, number of dimensions and shape (CKPT_MAX_NDIM entries room) of
 * tensor i; any of the pointers may be NULL. */
void st_info(const struct st_file *f, int i, enum ckpt_dtype *dt, int *ndim, int64_t *shape);
/* Tensor i's bytes, a pointer into the read-only mapping, valid until
 * st_close; *bytes (if bytes is not NULL) gets its length. Not necessarily
 * aligned to the element size: that takes a header padded to 8 bytes (as
 * Hugging Face's and our writers pad it) and offsets that keep it (Hugging
 * Face's writer orders tensors by alignment; st_create keeps the caller's
 * order), so copy out with memcpy or check the address. */
const void *st_data(const struct st_file *f, int i, size_t *bytes);
/* Tensor i's data is no longer needed: its pages leave this process's
 * resident set (they are read again from the file if touched), so a reader
 * going through a large file tensor by tensor stays small. */
void st_release(const struct st_file *f, int i);
/* A "__metadata__" value, or NULL when the key is absent. */
const char *st_metadata(const struct st_file *f, const char *key);
const char *st_path(const struct st_file *f);
void st_close(struct st_file *f);

/* ---- writing ---------------------------------------------------------------- */

struct st_tensor_decl {
	const char *name;
	enum ckpt_dtype dt;
	int ndim;
	int64_t shape[CKPT_MAX_NDIM];
};

struct st_writer;

/* Create path (written in place: callers wanting all-or-nothing output give
 * a temporary name and rename it) and write the header: "__metadata__"
 * first when nmeta > 0, then the n tensors in declaration order with
 * contiguous offsets in that order, padded with spaces to a multiple of 8
 * bytes. The data then follows through st_write / st_write_part, in
 * declaration order. NULL after error() (duplicate names, a bad shape). */
struct st_writer *st_create(const char *path, int n, const struct st_tensor_decl *decl, int nmeta,
			    const char *const *meta_keys, const char *const *meta_values);
/* The next declared tensor, whole (an empty tensor too: bytes 0); bytes must
 * be its size. Refused in the middle of a tensor begun with st_write_part. */
int st_write(struct st_writer *w, const void *data, size_t bytes);
/* Append bytes to the data stream: the current tensor is complete when its
 * size is reached, and writing goes on with the next one; empty tensors are
 * passed over. A piece may not run past the end of the current tensor. */
int st_write_part(struct st_writer *w, const void *data, size_t bytes);
/* Every tensor written (trailing empty ones need no call)? Then flush,
 * fsync and close. Frees w in every case; -1 after error(), the file then
 * left for the caller to delete. Refuses when an earlier call on w failed. */
int st_finish(struct st_writer *w);
/* Close and unlink the file; frees w. */
void st_abort(struct st_writer *w);

/* ---- Hugging Face model folders ------------------------------------------------ */

#define ST_SINGLE_FILE "model.safetensors"
#define ST_INDEX_FILE "model.safetensors.index.json"

struct st_folder;

/* Open dir/model.safetensors or, when there is none, the shards named by
 * dir/model.safetensors.index.json ({"metadata": {"total_size": N},
 * "weight_map": {tensor: shard file}}): every shard is opened; each
 * weight_map entry must be in its shard, and every tensor of a shard in the
 * weight_map under that shard (so none is in two). NULL after error(). */
struct st_folder *st_folder_open(const char *dir);
int st_folder_count(const struct st_folder *d);
/* The i-th tensor name of all shards, sorted by strcmp. */
const char *st_folder_name(const struct st_folder *d, int i);
/* The file (owned by d) and index in it of tensor name: 0, or -1 silently
 * when there is no such tensor. */
int st_folder_find(const struct st_folder *d, const char *name, struct st_file **f, int *idx);
void st_folder_close(struct st_folder *d);

/* Write dir/model.safetensors.index.json for n tensors, names[i] stored in
 * the shard files[i] (a plain file name), as transformers writes it (keys
 * sorted, indent 2, ASCII, final newline), under a temporary name, fsync'd
 * and renamed. -1 after error(). */
int st_write_index(const char *dir, int n, const char *const *names, const char *const *files,
		   uint64_t total_size);

#endif
