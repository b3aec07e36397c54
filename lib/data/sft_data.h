/*
 * sft_data.h - the train/valid/test datasets of supervised fine-tuning
 * (--sft), as Megatron builds SFTDataset through its dataset builder: one
 * JSONL file of {"messages": [...]} lines, split by --split into line
 * ranges (or one file per split), each split served in line order,
 * wrapping around until its sample count is reached. Sample k of a split
 * is its line lo + k mod (hi - lo), packed by sft_sample_build.
 *
 * Every rank reads the files itself (the samples are a pure function of
 * the file, the tokenizer and the sample number), so nothing is broadcast.
 */
#ifndef MEGAC_DATA_SFT_DATA_H
#define MEGAC_DATA_SFT_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "data/gpt_data.h"
#include "data/sft.h"

struct sft_file; /* a JSONL file read whole, with its lines indexed */

struct sft_data {
	const struct sft_tokenizer *st; /* borrowed */
	int64_t seq_length;
	int cp;
	struct sft_file *files[GPT_NSPLITS]; /* a file may serve several splits: freed once */
	struct sft_split {
		bool present;
		const struct sft_file *f;
		uint64_t lo, hi; /* the split's lines [lo, hi) of f */
		uint64_t len;    /* samples: the split's sample count, or one pass over its lines */
	} splits[GPT_NSPLITS];
};

/*
 * Build the splits from the data flags gathered in cfg (gpt_data_config_from_args:
 * the paths, --split and the per-split sample counts) for tokenizer st and
 * context-parallel size cp. error() and -1 for mock data, a blend of
 * several files, an unreadable file, or a line that is not a JSON object
 * with a "messages" list (naming file:line).
 */
int sft_data_build(const struct gpt_data_config *cfg, const struct sft_tokenizer *st, int cp, struct sft_data *d);
void sft_data_free(struct sft_data *d);

/*
 * Sample k (< splits[split].len) of a split, tokenized through session s
 * (a session of sft_tok(d->st)). 0, or -1 after error() naming the file and
 * line. out is overwritten; free it with sft_sample_free.
 */
int sft_data_sample(const struct sft_data *d, struct tok_session *s, int split, uint64_t k, struct sft_sample *out);

/* The file and 1-based line number of sample k of a split, for messages. */
const char *sft_data_where(const struct sft_data *d, int split, uint64_t k, uint64_t *line);

#endif
