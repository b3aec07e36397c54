/*
 * ckpt.h - checkpoint directories of HDF5 files, written as transactions.
 *
 * A checkpoint is Megatron's layout with HDF5 files inside
 * (docs/checkpoint-format.md):
 *
 *   <save>/latest_checkpointed_iteration.txt   "500" (or "release"), no newline
 *   <save>/iter_0000500/model.h5 ...           files named by the caller
 *
 * Writing: ckpt_begin() opens a transaction that fills a hidden temporary
 * directory <save>/.iter_0000500.tmp-<pid>-<n>; each file in it is written
 * under a temporary name registered with base/tempfile.h, so die(), SIGINT,
 * SIGTERM (Slurm's time limit) and friends delete the data on the way out.
 * ckpt_commit() fsyncs everything, moves the directory to iter_0000500 in one
 * rename (replacing an existing one atomically), and only then rewrites the
 * tracker file. A reader therefore never sees a partial iteration through the
 * tracker; what a crash can leave behind is a dot-directory, which readers
 * never look at. It records its writer (.writer: host, pid, ...), so that
 * ckpt_sweep (the next ckpt_begin in the same <save>, and train's load)
 * reports it with its size and removes it once its writer is certainly
 * dead.
 *
 * Each tensor is one HDF5 dataset, stored contiguously with its global shape
 * under its Megatron name, and carries two attributes: "dtype" (its element
 * type, see enum ckpt_dtype) and "crc32" (zlib's CRC-32 of its raw
 * little-endian bytes), which the reader verifies on every load.
 *
 * Errors: every function reports through error() (naming the directory, file
 * and object) and returns -1 or NULL; misuse of handles is a BUG(). Not
 * thread-safe (HDF5 is not): one thread at a time.
 */
#ifndef MEGAC_CKPT_CKPT_H
#define MEGAC_CKPT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The iteration of Megatron's "release" checkpoints (directory "release/",
 * tracker text "release"): ckpt_latest returns it, ckpt_begin and ckpt_open
 * accept it. Such a checkpoint loads like --finetune. */
#define CKPT_RELEASE INT64_C(-1)

#define CKPT_MAX_NDIM 8

/* Element types. The 16-bit float types are stored as uint16 datasets (HDF5
 * and numpy have no bfloat16); their "dtype" attribute says which. */
enum ckpt_dtype {
	CKPT_F32,  /* "float32",  HDF5 IEEE F32LE */
	CKPT_BF16, /* "bfloat16", HDF5 U16LE */
	CKPT_F16,  /* "float16",  HDF5 U16LE */
	CKPT_I64,  /* "int64",    HDF5 I64LE */
	CKPT_NDTYPES
};

const char *ckpt_dtype_name(enum ckpt_dtype dt);
size_t ckpt_dtype_size(enum ckpt_dtype dt);

/* "<dir>/iter_0000500" (or "<dir>/release"); caller frees. */
char *ckpt_iter_path(const char *dir, int64_t iteration);

/* ---- writing -------------------------------------------------------------- */

struct ckpt_writer;

/* Start writing iteration `iteration` (>= 0, or CKPT_RELEASE) under save_dir,
 * which is created if missing. NULL after error(). */
struct ckpt_writer *ckpt_begin(const char *save_dir, int64_t iteration);

/* Create the HDF5 file `name` (a plain file name such as "model.h5") in the
 * transaction. Returns its handle (>= 0) for the calls below, or -1. Every
 * file carries the root attribute megac_format_version. */
int ckpt_file_create(struct ckpt_writer *w, const char *name);
/* Close (and fsync) a file before the commit, to free its resources; optional. */
int ckpt_file_close(struct ckpt_writer *w, int file);

/* Store a tensor: `data` holds prod(shape) elements of dt, C order. `name`
 * is a Megatron name ("decoder.layers.0.mlp.linear_fc1.weight", dots are
 * plain characters) or a path with groups ("exp_avg/decoder.layers.0...."),
 * which are created as needed. ndim 0 is a scalar. Storing a name twice is
 * an error. */
int ckpt_put_tensor(struct ckpt_writer *w, int file, const char *name, enum ckpt_dtype dt, int ndim,
		    const int64_t *shape, const void *data);

/* Scalar attributes on the object `obj` of a file: NULL (or "") means the
 * file's root group, otherwise a tensor or group path. Strings are UTF-8 of
 * any length (a whole config as JSON is fine). "dtype" and "crc32" on
 * tensors are reserved. */
int ckpt_put_attr_i64(struct ckpt_writer *w, int file, const char *obj, const char *name, int64_t v);
int ckpt_put_attr_f64(struct ckpt_writer *w, int file, const char *obj, const char *name, double v);
int ckpt_put_attr_str(struct ckpt_writer *w, int file, const char *obj, const char *name, const char *v);

/* Close every file, fsync them and the directory, install it as
 * <save>/iter_NNNNNNN (replacing an existing one: the old one is deleted
 * only once the new one is in place), fsync <save>, then rewrite the tracker.
 * Refuses (and aborts) when any earlier call on w failed, so a checkpoint
 * with a missing tensor is never committed. Frees w in every case. */
int ckpt_commit(struct ckpt_writer *w);
/* Drop the transaction: close and delete everything it wrote; frees w. */
void ckpt_abort(struct ckpt_writer *w);

/* ---- more writers of one transaction ---------------------------------------
 *
 * A transaction may be filled by several processes at once (one per
 * pipeline stage; they must share the file system). The process that called
 * ckpt_begin hands ckpt_tmp_dir() to the others, which ckpt_join it and
 * write files of their own there with ckpt_file_create, ckpt_put_tensor and
 * ckpt_put_attr_* as above (names must differ from every other writer's),
 * then ckpt_part_finish. Only once every part is finished does the
 * beginning process point at their tensors with ckpt_put_external_link and
 * ckpt_commit; if any part failed it calls ckpt_abort, which deletes the
 * whole directory, the parts' files included. A part's files get their
 * final names inside the hidden directory when finished, so nothing of them
 * is visible before the commit renames that directory.
 */

/* The transaction's hidden directory "<save>/.iter_0000500.tmp-<pid>-<n>"
 * (owned by w). */
const char *ckpt_tmp_dir(const struct ckpt_writer *w);

/* A writer for more files in the open transaction whose directory is
 * tmp_dir (what ckpt_tmp_dir gave the beginning process); display_dir is
 * where the files will be after the commit ("<save>/iter_0000500"), for
 * messages. NULL after error() when tmp_dir is not a directory here (the
 * save directory is not on a shared file system). */
struct ckpt_writer *ckpt_join(const char *tmp_dir, const char *display_dir);
/* Close and fsync every file of a joined writer, give each its final name
 * in the transaction directory and fsync the directory. Commits nothing.
 * Refuses (deleting its files) when any earlier call on w failed. Frees w. */
int ckpt_part_finish(struct ckpt_writer *w);
/* Delete every file a joined writer created (finished or not); frees w.
 * The transaction directory stays, for its owner to abort or commit. */
void ckpt_part_abort(struct ckpt_writer *w);

/* An HDF5 external link called `name` in `file` (groups on its path are
 * created as needed) to the object target_name in target_file, another file
 * of the same iteration directory. The file name is stored as given,
 * relative, and resolved against the directory of the linking file when
 * read, so the directory can be moved or renamed; h5py follows such links
 * (f[name]) and ckpt_get_tensor reads through them. The target is not
 * opened (it need not exist yet): link only to tensors a finished part
 * wrote. */
int ckpt_put_external_link(struct ckpt_writer *w, int file, const char *name, const char *target_file,
			   const char *target_name);

/* ---- reading -------------------------------------------------------------- */

/* Read <dir>/latest_checkpointed_iteration.txt: 0 and *iteration (which is
 * CKPT_RELEASE for "release"), 1 when there is no tracker (no checkpoint;
 * *iteration untouched), -1 after error() naming the file when it cannot be
 * read or holds anything else (surrounding whitespace is allowed). */
int ckpt_latest(const char *dir, int64_t *iteration);

/* The iterations <dir> holds as iter_NNNNNNN directories (committed ones:
 * transactions are hidden dot-directories), ascending, in *its (malloc'd,
 * caller frees; NULL when none). -1 after error() when dir cannot be read. */
int ckpt_iterations(const char *dir, int64_t **its, size_t *n);

/* Partial checkpoints in <dir>: the hidden transaction directories
 * (".iter_0000500.tmp-*") of saves that have not committed. Each records
 * its writer (host, pid, ...); one whose writer is certainly dead (this
 * host, same PID namespace, the process gone or the host restarted) is
 * removed when `remove` is set, with a warning giving its size; the others
 * (a save in progress, a writer on another host) are reported once per
 * process with their size and left alone. An empty one of an older megac
 * is removed silently. Returns how many were removed; never fails (what
 * cannot be read is skipped). ckpt_begin calls it with remove set. */
int ckpt_sweep(const char *dir, bool remove);

/* Delete every iteration directory of <dir> up to the one the tracker
 * names but the newest `keep` of them (keep >= 1), oldest first; the
 * tracker's iteration and any newer directories (an abandoned run's) are
 * never touched. Returns how many were deleted, or -1 after error() (what
 * could not be deleted stays). */
int ckpt_prune(const char *dir, int keep);

struct ckpt_reader;

/* The newest iteration <dir> holds as an iter_NNNNNNN directory: 0 and
 * *iteration, or 1 when there is none (or no such folder). For a folder
 * whose tracker is lost: only complete iterations are ever renamed into
 * place, so that is the newest complete one. */
int ckpt_newest(const char *dir, int64_t *iteration);

/* Open the iteration <dir>'s tracker names (ckpt_latest, then ckpt_open),
 * storing it in *iteration; without a tracker, the newest iteration
 * directory (ckpt_newest), with a warning. NULL after error(), which says
 * when there is no checkpoint at all. Partial checkpoints in <dir> are
 * reported (ckpt_sweep, not removed). For the tools that read "the"
 * checkpoint of a folder. */
struct ckpt_reader *ckpt_open_latest(const char *dir, int64_t *iteration);

/* Open <dir>/iter_NNNNNNN (or release/); NULL after error() when it is not
 * a directory. Files are opened by ckpt_file_open. */
struct ckpt_reader *ckpt_open(const char *dir, int64_t iteration);
/* Open the file `name` of the checkpoint; returns its handle (the same one
 * when opened twice), or -1 after error() when it is missing, truncated or
 * not HDF5, or written by a newer format version, or when it records (root
 * attribute "iteration") another iteration than a file opened before
 * (naming both files and iterations). */
int ckpt_file_open(struct ckpt_reader *r, const char *name);
/* -1 after error() when a file opened so far records another iteration
 * than the directory's (not for release/): a file copied in from another
 * checkpoint. Call it once the files to be read are open. */
int ckpt_check_iteration(struct ckpt_reader *r);

/* Tensors may be external links to datasets in other files of the
 * checkpoint (ckpt_put_external_link): every call below follows them, reading
 * the data and attributes (dtype, crc32) of the target dataset, whose file
 * is opened like ckpt_file_open's, from this checkpoint's directory. */

/* 1 when the file has a tensor (dataset) called name, 0 when not, -1. */
int ckpt_has_tensor(struct ckpt_reader *r, int file, const char *name);
/* The names of every tensor of the file (datasets and links to them,
 * "exp_avg/..." with their groups), in name order; *names and its strings
 * are malloc'd (free with ckpt_free_names). */
int ckpt_list_tensors(struct ckpt_reader *r, int file, char ***names, size_t *n);
void ckpt_free_names(char **names, size_t n);
/* The root attributes of the file and their kinds ('i', 'f', 's', '?'). */
int ckpt_list_attrs(struct ckpt_reader *r, int file, char ***names, char **kinds, size_t *n);

/* A stored tensor's dtype and shape (shape has room for CKPT_MAX_NDIM). */
int ckpt_tensor_info(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype *dt, int *ndim,
		     int64_t *shape);
/* Read a tensor into out (prod(shape) elements of dt) and verify its CRC.
 * Errors name the directory, file and tensor: missing, different dtype or
 * shape (expected vs found), or a checksum mismatch. */
int ckpt_get_tensor(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype dt, int ndim,
		    const int64_t *shape, void *out);

/* Rows [row0, row0 + nrows) of a tensor of the given dtype and (whole) shape
 * into out (nrows rows of C-order data), reading only the checksum blocks
 * that hold them (a tensor-parallel rank's slice) and verifying each block's
 * CRC; a tensor written without block checksums is read whole and checked
 * against its crc32. */
int ckpt_get_tensor_rows(struct ckpt_reader *r, int file, const char *name, enum ckpt_dtype dt, int ndim,
			 const int64_t *shape, int64_t row0, int64_t nrows, void *out);
/* Attributes as written by ckpt_put_attr_* (obj NULL = root). Integers of
 * any HDF5 integer type and floats of any float type are accepted;
 * *v is a malloc'd copy for strings. */
int ckpt_has_attr(struct ckpt_reader *r, int file, const char *obj, const char *name);
int ckpt_get_attr_i64(struct ckpt_reader *r, int file, const char *obj, const char *name, int64_t *v);
int ckpt_get_attr_f64(struct ckpt_reader *r, int file, const char *obj, const char *name, double *v);
int ckpt_get_attr_str(struct ckpt_reader *r, int file, const char *obj, const char *name, char **v);

/* The checkpoint directory being read ("<dir>/iter_0000500"). */
const char *ckpt_reader_dir(const struct ckpt_reader *r);
void ckpt_close(struct ckpt_reader *r);

#endif
