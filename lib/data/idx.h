/*
 * idx.h - Megatron's indexed dataset: the PREFIX.bin / PREFIX.idx pair
 * (Megatron's megatron/core/datasets/indexed_dataset.py; layout in docs/formats.md).
 *
 * The writer streams tokens into PREFIX.bin and spills the per-sequence
 * lengths and the document boundaries to unnamed scratch files, so its memory
 * does not grow with the corpus; idx_writer_finish() writes PREFIX.idx from
 * them. Both files live under temporary names until idx_writer_publish(),
 * which makes the pair visible (.bin first, .idx last, after removing any old
 * .idx so an old index never describes a new .bin).
 *
 * The reader mmaps both files and checks the header and every array against
 * the file sizes before handing out a single token, so a truncated or
 * corrupt dataset is refused with a message naming the file and the field.
 */
#ifndef MEGAC_DATA_IDX_H
#define MEGAC_DATA_IDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/tempfile.h"

/* Megatron's DType codes (note 6 = float64 before 7 = float32). */
enum idx_dtype {
	IDX_UINT8 = 1,
	IDX_INT8 = 2,
	IDX_INT16 = 3,
	IDX_INT32 = 4,
	IDX_INT64 = 5,
	IDX_FLOAT64 = 6,
	IDX_FLOAT32 = 7,
	IDX_UINT16 = 8,
};

#define IDX_HEADER_SIZE 34

/* Item size of a dtype code, 0 for an unknown code. */
size_t idx_dtype_size(int code);
const char *idx_dtype_name(int code);
/* Megatron's DType.optimal_dtype: uint16 below 65500, else int32. */
int idx_optimal_dtype(int64_t vocab_size);
/* PREFIX + ".bin" / ".idx"; caller frees. */
char *idx_bin_path(const char *prefix);
char *idx_idx_path(const char *prefix);

struct idx_writer {
	char *prefix;
	int dtype;
	size_t itemsize;
	bool multimodal;
	struct afile bin, idx;
	FILE *lengths;   /* int32 per sequence (scratch) */
	FILE *docs;      /* int64 per document end (scratch) */
	FILE *modes;     /* int8 per sequence (scratch, multimodal only) */
	uint64_t n_seqs, n_docs, n_tokens;
	void *conv;      /* token conversion buffer */
	size_t conv_cap;
	bool finished;
};

/* Open PREFIX.bin/.idx for writing (temporary names). error() and -1 on failure. */
int idx_writer_open(struct idx_writer *w, const char *prefix, int dtype, bool multimodal);
/* Append one document of n tokens split into n_seqs sequences of the given
 * lengths (their sum must be n). n_seqs == 0 adds an empty document. Token
 * ids outside the dtype's range are an error (Megatron would wrap them). */
int idx_writer_add_document(struct idx_writer *w, const int32_t *tokens, size_t n,
			    const int32_t *seq_lengths, size_t n_seqs);
/* Append a whole existing dataset (Megatron's add_index: .bin copied byte
 * for byte, boundaries rebased). Its dtype must equal the writer's. */
int idx_writer_add_dataset(struct idx_writer *w, const char *prefix);
/* Write the index and sync both files; still invisible. */
int idx_writer_finish(struct idx_writer *w);
/* Make the finished pair visible under its final names. */
int idx_writer_publish(struct idx_writer *w);
/* Remove everything written; safe at any stage. */
void idx_writer_abort(struct idx_writer *w);

struct idx_reader {
	char *prefix;
	int dtype;
	size_t itemsize;
	uint64_t n_seqs;       /* S */
	uint64_t n_doc_entries;/* D1 = documents + 1 */
	/* The arrays start at byte 34 of the .idx: not aligned for their types,
	 * so they are read through the accessors below (memcpy, which compiles
	 * to a plain load), never as C arrays. */
	const unsigned char *lengths_raw;  /* int32[S] */
	const unsigned char *pointers_raw; /* int64[S] */
	const unsigned char *doc_idx_raw;  /* int64[D1] */
	const int8_t *modes;   /* NULL unless opened multimodal */
	const unsigned char *bin;
	size_t bin_size, idx_size;
	void *idx_map, *bin_map;
};

/* Open and validate PREFIX.idx/.bin. error() naming the file and -1 on failure. */
int idx_reader_open(struct idx_reader *r, const char *prefix, bool multimodal);
void idx_reader_close(struct idx_reader *r);
static inline int32_t idx_length(const struct idx_reader *r, uint64_t i)
{
	int32_t v;
	memcpy(&v, r->lengths_raw + 4 * i, 4);
	return v;
}

static inline int64_t idx_pointer(const struct idx_reader *r, uint64_t i)
{
	int64_t v;
	memcpy(&v, r->pointers_raw + 8 * i, 8);
	return v;
}

/* Entry d of document_indices: document d owns sequences [doc(d), doc(d+1)). */
static inline int64_t idx_doc(const struct idx_reader *r, uint64_t d)
{
	int64_t v;
	memcpy(&v, r->doc_idx_raw + 8 * d, 8);
	return v;
}

/* Tokens of sequence i (raw bytes in the dataset's dtype) and their count. */
const void *idx_reader_sequence(const struct idx_reader *r, uint64_t i, size_t *n_tokens);

#endif
