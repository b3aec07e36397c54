/*
 * input.h - JSONL corpora as a stream of line chunks.
 *
 * preprocess_data reads many inputs as one corpus: plain or compressed files
 * (.gz .zst .xz .bz2 .lz4, detected from the bytes, not the name), tar or zip
 * archives whose members are such files, directories (every data file
 * below, sorted), globs, and standard input ("-"). Everything is read as a
 * stream: nothing is unpacked to disk and memory does not depend on the
 * corpus size (only on the longest line; see input_reader_set_max_line).
 * Compressed data is checked as it is read: gzip members' CRC-32 and length
 * (zlib), a zip entry's CRC-32 and size, the checksums xz, zstd, bzip2 and
 * lz4 carry; bytes after the end of a compressed stream are an error.
 *
 * The reader hands out chunks of whole lines (a few hundred KB) tagged with
 * where they came from, so the worker threads that parse and tokenize them can
 * name the file and line of a bad record. With a stride P > 1 the reader
 * makes P passes and keeps line i of the whole corpus in pass i mod P: this is
 * how Megatron's --partitions orders documents.
 */
#ifndef MEGAC_DATA_INPUT_H
#define MEGAC_DATA_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/args.h"

/* Resolve --input values into a list of paths: globs expanded (sorted),
 * directories walked recursively (sorted; only names ending in .jsonl,
 * .json or .ndjson, optionally followed by a compression suffix, or tar/zip
 * archives), "-" kept for standard input. A missing path, a glob matching
 * nothing or a directory without data files is an error(). */
int input_expand(const struct strlist *in, struct strlist *files);

/* Whether a file or archive member name looks like JSONL data (see above). */
bool input_is_data_name(const char *name);

struct input_chunk {
	char *data;          /* whole lines, '\n'-terminated except maybe the last */
	size_t len;
	int source;          /* index into the reader's source names */
	const char *source_name; /* "path" or "archive:member"; valid until the reader is freed.
				  * Workers use this, never input_reader_source(), which reads
				  * an array the reader thread may be growing. */
	uint64_t first_line; /* 1-based line number of the first line in its source */
	uint64_t line_step;  /* line numbers of consecutive lines differ by this (the stride) */
	uint64_t n_lines;
	bool too_long;       /* one line longer than the reader's limit: no data, n_lines 1 */
};

struct input_reader;

/* Read files[0..n) in order, in chunks of about chunk_size bytes, keeping
 * lines whose corpus-wide index is congruent to each pass 0..stride-1 in turn. */
struct input_reader *input_reader_new(char *const *files, int n, size_t chunk_size, int stride);
/* 1 and a chunk (caller frees chunk->data), 0 at the end, -1 on a read error
 * (input_reader_error() says which file and what; nothing is printed). */
int input_reader_next(struct input_reader *r, struct input_chunk *c);
/* Lines longer than max_bytes (not counting the '\n') are not kept in
 * memory: each comes as a chunk of its own with too_long set and no data,
 * and the reader skips the rest of it. 0 (the default) = no limit. */
void input_reader_set_max_line(struct input_reader *r, uint64_t max_bytes);
const char *input_reader_error(const struct input_reader *r);
/* From any thread: make a read blocked on a pipe give up (within 0.2 s);
 * input_reader_next() then fails with "reading stopped". */
void input_reader_stop(struct input_reader *r);
/* "path" or "archive:member" of a source; only from the reader's own thread. */
const char *input_reader_source(const struct input_reader *r, int source);
/* Uncompressed bytes of the lines handed out so far. */
uint64_t input_reader_bytes(const struct input_reader *r);
int input_reader_n_sources(const struct input_reader *r);
void input_reader_free(struct input_reader *r);

#endif
