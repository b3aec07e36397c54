/*
 * gpt_index.h - Megatron's GPT dataset index arithmetic, exactly
 * (Megatron's megatron/core/datasets/blended_megatron_dataset_config.py for
 * the split, gpt_dataset.py and helpers.cpp for the indices, docs/formats.md
 * for the cache files): which sequences a split owns,
 * how many epochs a sample count needs and whether the last one is shuffled
 * apart, the document / sample / shuffle indices, and the blending indices
 * that interleave several datasets. Pure functions over arrays: no files,
 * no tokenizer. gpt_data.c builds datasets and caches on top of them.
 */
#ifndef MEGAC_DATA_GPT_INDEX_H
#define MEGAC_DATA_GPT_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --split "969,30,1" -> normalised cumulative bounds b[0..3] (b[0] is the
 * integer 0 in Megatron) and which of train/valid/test have a share.
 * error() and -1 on a malformed or all-zero split. */
int gpt_split_parse(const char *split, double bounds[4], bool present[3]);
/* Sequence range [lo, hi) of split i for a dataset of n sequences
 * (Python's round-half-to-even of bound * n). */
void gpt_split_range(const double bounds[4], int i, uint64_t n, uint64_t *lo, uint64_t *hi);

struct gpt_index {
	int epochs;
	bool separate_final_epoch;
	uint64_t n_doc;        /* length of doc_idx: epochs x documents */
	int64_t *doc_idx;      /* sequence numbers, shuffled */
	uint64_t n_samples;    /* M */
	int64_t *sample_idx;   /* (M + 1) rows of (position in doc_idx, token offset) */
	int64_t *shuffle_idx;  /* M entries */
	uint64_t tokens_per_epoch;
};

/*
 * Build the index of one GPTDataset: sequences [lo, hi) of a dataset whose
 * sequence lengths are sizes[], num_samples requested (-1: one epoch, as
 * Megatron's None), seq_length S, one extra token per sample, numpy
 * RandomState(seed). drop_last: drop the last partial sample (Megatron
 * always does for train and test, and for valid by default).
 * error() and -1 when the range holds no tokens.
 */
int gpt_index_build(const int32_t *sizes, uint64_t lo, uint64_t hi, int64_t num_samples, int64_t seq_length,
		    uint32_t seed, bool drop_last, struct gpt_index *out);
void gpt_index_free(struct gpt_index *ix);

/* Megatron's dtype choices for the cached arrays. */
bool gpt_index_sample_idx_is_int64(const struct gpt_index *ix, int32_t max_size);
bool gpt_index_shuffle_idx_is_int64(const struct gpt_index *ix);

/*
 * Blending (helpers.cpp's build_blending_indices): for s in [0, size) pick the dataset whose
 * weight * max(s,1) - count is largest (lowest index on ties). weights must
 * be normalised. dataset_index[s], dataset_sample_index[s] are written.
 */
void gpt_blend_build(const double *weights, int n, uint64_t size, int16_t *dataset_index,
		     int64_t *dataset_sample_index);
/* Exhaustive variant: every sample of every dataset exactly once, lengths[]
 * samples each; the output has sum(lengths) entries. */
void gpt_blend_build_exhaustive(const int64_t *lengths, int n, int16_t *dataset_index,
				int64_t *dataset_sample_index);

#endif
