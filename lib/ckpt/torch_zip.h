/*
 * torch_zip.h - the zip container of torch.save (PyTorch >= 1.6), read
 * through a read-only mapping and written atomically, and torch_load() /
 * torch_save() over it and the pickle layer (pickle.h).
 *
 * torch.save writes a zip archive whose members all sit under one folder,
 * the archive name (the file's base name without extension for torch 1.x,
 * "archive" for newer writers):
 *
 *   <name>/data.pkl       the pickled object (protocol 2)
 *   <name>/data/<key>     one storage's raw little-endian bytes per key
 *   <name>/version        "3\n"
 *   <name>/byteorder      "little" (torch >= 2.1; absent means little)
 *   other members (.data/serialization_id, .format_version) are ignored
 *
 * Members are STORED (not compressed) and their data starts on a 64-byte
 * boundary (the local header's extra field pads it), so a storage can be
 * used in place from the mapping. The reader takes any STORED zip, with or
 * without zip64 records; compressed members, encryption and archives split
 * over several disks are refused. CRC-32s are checked when a member is
 * read through tz_data.
 *
 * Errors: error() naming the file and member, then NULL or -1.
 */
#ifndef MEGAC_CKPT_TORCH_ZIP_H
#define MEGAC_CKPT_TORCH_ZIP_H

#include <stddef.h>

#include "ckpt/pickle.h"

struct tz_reader;

/* Map path and read its central directory. NULL after error(). */
struct tz_reader *tz_open(const char *path);
/* The same over len bytes at buf, which the caller keeps valid and unchanged
 * until tz_close (a torch.save blob inside a bigger file); name is the
 * blob's name in messages ("x.distcp@1234"). */
struct tz_reader *tz_open_mem(const void *buf, size_t len, const char *name);
int tz_count(const struct tz_reader *z);
const char *tz_name(const struct tz_reader *z, int i);
/* The index of member name (the full path inside the zip), or -1 silently. */
int tz_find(const struct tz_reader *z, const char *name);
/* Member i's bytes in the mapping, *len its size, after checking its CRC-32
 * (once). NULL after error(). */
const void *tz_data(struct tz_reader *z, int i, size_t *len);
const char *tz_path(const struct tz_reader *z);
void tz_close(struct tz_reader *z);

struct tz_writer;

/* Create path under a temporary name (base/tempfile.h); members go under
 * the folder prefix ("archive"). NULL after error(). */
struct tz_writer *tz_create(const char *path, const char *prefix);
/* Append member prefix/name with n bytes of data, its data 64-byte aligned. */
/* A writer appending the archive to out (offsets relative to where it
 * starts: the archive is a blob to place inside a bigger file). */
struct tz_writer *tz_create_mem(struct sbuf *out, const char *prefix);
int tz_add(struct tz_writer *w, const char *name, const void *data, size_t n);
/* Write the central directory, fsync, rename into place; frees w. */
int tz_finish(struct tz_writer *w);
/* Remove the temporary file; frees w. */
void tz_abort(struct tz_writer *w);

/* Load a torch.save file into d: the value tree, its tensors' storages
 * pointing into the file's mapping, which d keeps until pk_doc_free. Only
 * little-endian files are read. NULL after error(). */
struct pk_value *torch_load(struct pk_doc *d, const char *path);
/* The same from a torch.save blob in memory (tz_open_mem's rules: buf
 * outlives d's last use). */
struct pk_value *torch_load_mem(struct pk_doc *d, const void *buf, size_t len, const char *name);
/* Write v as torch.save would (protocol 2; archive name from the file's
 * base name; data.pkl, byteorder, data/<key>, version), atomically. */
int torch_save(const char *path, struct pk_value *v);
/* The same archive (named "archive", as newer torch names it) appended to
 * out; what names it in messages. */
int torch_save_mem(struct sbuf *out, struct pk_value *v, const char *what);

#endif
