/*
 * gpt_data.h - the train/valid/test datasets of GPT pretraining, built as
 * Megatron's BlendedMegatronDatasetBuilder builds them
 * (megatron/core/datasets/blended_megatron_dataset_builder.py, gpt_dataset.py,
 * blended_dataset.py): one GPTDataset per (prefix, split), BlendedDatasets over
 * several prefixes, per-split blends, or the mock dataset; each with the
 * description JSON, md5 and .npy cache files Megatron writes, so that
 * Megatron and megac share caches both ways.
 *
 * The caller (train, build_gpt_index) loads the tokenizer and fills a
 * gpt_data_config, usually through gpt_data_config_from_args().
 */
#ifndef MEGAC_DATA_GPT_DATA_H
#define MEGAC_DATA_GPT_DATA_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/args.h"
#include "data/gpt_index.h"
#include "data/gpt_sample.h"
#include "data/idx.h"
#include "data/tok.h"

enum { GPT_TRAIN, GPT_VALID, GPT_TEST, GPT_NSPLITS };
extern const char *const gpt_split_names[GPT_NSPLITS];

struct gpt_data_config {
	char *const *blend;             /* --data-path items ([weight] prefix ...) */
	int n_blend;
	char *const *split_blend[GPT_NSPLITS]; /* --train/valid/test-data-path */
	int n_split_blend[GPT_NSPLITS];
	const char *split;              /* --split as given; Megatron's legacy default when absent */
	int64_t num_samples[GPT_NSPLITS]; /* -1: None (one epoch / exhaustive) */
	int64_t seq_length;
	uint32_t seed;
	const char *cache_path;         /* --data-cache-path, or NULL */
	double surplus;                 /* --mid-level-dataset-surplus */
	bool mock;
	int64_t vocab_size;             /* unpadded, for mock tokens */
	struct gpt_sample_opts sample;  /* eod, pad and the mask flags */
	json_t *tokenizer_ident;        /* Megatron's tokenizer unique_identifiers (borrowed) */
	bool write_cache;               /* rank 0 writes; others only read */
	struct strlist owned[GPT_NSPLITS + 1]; /* lists read from --data-args-path / --per-split-data-args-path */
};

/*
 * Fill cfg from the shared flags and the loaded tokenizer (dp: the data-parallel
 * size, which sets the default global batch); computes the
 * per-split sample counts as Megatron's get_train_valid_test_num_samples.
 * The caller releases it with gpt_data_config_release().
 */
int gpt_data_config_from_args(const struct args *a, const struct tokenizer *tok, int dp, struct gpt_data_config *cfg);
/* What gpt_data_config_from_args allocated (safe on a zeroed config). */
void gpt_data_config_release(struct gpt_data_config *cfg);

struct gpt_low;     /* a prefix's indexed dataset (or the mock one) */

struct gpt_ds {     /* Megatron's GPTDataset (or MockGPTDataset) */
	struct gpt_low *low;
	int split;
	uint64_t lo, hi;
	int64_t num_samples;
	struct gpt_index ix;
	json_t *ident;
	char hash[33];
	bool from_cache;
};

struct gpt_blend {  /* Megatron's BlendedDataset */
	int n;
	struct gpt_ds **ds;
	int64_t size;   /* -1: exhaustive */
	uint64_t len;
	int16_t *dataset_index;
	int64_t *dataset_sample_index;
	json_t *ident;
	char hash[33];
	bool from_cache;
};

struct gpt_split {
	bool present;
	struct gpt_ds *single;
	struct gpt_blend *blend;
	uint64_t len;   /* samples */
};

struct gpt_data {
	struct gpt_data_config cfg;
	struct gpt_low **lows;
	int n_lows;
	struct gpt_ds **ds;
	int n_ds;
	struct gpt_blend **blends;
	int n_blends;
	struct gpt_split splits[GPT_NSPLITS];
};

/* The prefix of a GPTDataset, or "mock data". */
const char *gpt_ds_prefix(const struct gpt_ds *ds);

/* Build (or load from the caches) every split. error() and -1 on failure. */
int gpt_data_build(const struct gpt_data_config *cfg, struct gpt_data *d);
void gpt_data_free(struct gpt_data *d);

/* The S+1 token text of sample k of a split; returns its length and, for
 * blends, which member it came from (*dataset_id, else 0). */
uint64_t gpt_data_text(const struct gpt_data *d, int split, uint64_t k, int64_t *text, int *dataset_id);

#endif
