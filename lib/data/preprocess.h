/*
 * preprocess.h - the engine of preprocess_data: JSONL corpus in, one indexed
 * dataset per JSON key out, exactly as Megatron's tools/preprocess_data.py
 * fills them (its default path, one partition).
 *
 * Three kinds of threads: one reader (lib/data/input) cuts the corpus into
 * numbered chunks of lines; N workers parse the JSON and tokenize a chunk
 * each; the caller's thread takes the results back in chunk order and
 * appends them to the datasets. The output therefore does not depend on the
 * number of workers, and at most 2N+2 chunks are in memory at once, whatever
 * the corpus size.
 */
#ifndef MEGAC_DATA_PREPROCESS_H
#define MEGAC_DATA_PREPROCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "data/idx.h"
#include "data/tok.h"

struct prep_config {
	char *const *files;            /* from input_expand() */
	int n_files;
	char *const *keys;             /* --json-keys */
	int n_keys;
	const struct tokenizer *tok;
	bool append_eod;
	int workers;
	int stride;                    /* --partitions emulation; 1 = input order */
	int64_t log_interval;          /* progress line every N documents; 0 = none */
	int64_t max_documents;         /* stop after this many; -1 = all */
	bool skip_bad_lines;
	uint64_t max_document_bytes;   /* longer lines are bad lines (never held in memory); 0 = no limit */
	size_t chunk_size;             /* bytes of JSONL per work item; 0 = default */
	struct idx_writer *writers;    /* n_keys open writers, or NULL to only count */
};

struct prep_stats {
	uint64_t documents;            /* documents written (per key) */
	uint64_t bytes;                /* JSONL bytes of those documents */
	uint64_t tokens;               /* over all keys */
	uint64_t bad_lines;            /* skipped with --skip-bad-lines */
	uint64_t blank_lines;          /* whitespace-only lines, never documents */
	int sources;                   /* files and archive members read */
	double seconds;
};

/* Run the pipeline. 0 on success; -1 after error() naming the file and line
 * of the first bad record or the read error (the writers are left for the
 * caller to abort). */
int prep_run(const struct prep_config *cfg, struct prep_stats *st);

#endif
