/*
 * gpt_sample.h - turning an index entry into a training sample, as
 * Megatron's GPTDataset.__getitem__ does (megatron/core/datasets/gpt_dataset.py,
 * with _get_ltor_masks_and_position_ids):
 * the S+1 tokens a sample spans across documents, then tokens/labels,
 * loss mask, position ids and the causal attention mask, with
 * --eod-mask-loss, --reset-position-ids and --reset-attention-mask.
 *
 * Sequences come from a "low-level" dataset: an indexed dataset on disk, or
 * Megatron's mock dataset (--mock-data), whose sequences are synthesised.
 */
#ifndef MEGAC_DATA_GPT_SAMPLE_H
#define MEGAC_DATA_GPT_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "data/gpt_index.h"
#include "data/idx.h"

struct gpt_lowlevel {
	uint64_t n_seqs;
	int32_t *sizes;                 /* aligned copy of the sequence lengths */
	int32_t max_size;
	const struct idx_reader *reader; /* NULL: mock sequences */
	int64_t mock_vocab, mock_eod;
};

/* The sequences of an open indexed dataset. */
void gpt_lowlevel_from_reader(struct gpt_lowlevel *l, const struct idx_reader *r);
/* Megatron's mock dataset: n sequences with the given lengths (which
 * Megatron draws from numpy's default_rng(0)); sequence i of length L is
 * (1 .. L-1) mod vocab, then eod. */
void gpt_lowlevel_mock(struct gpt_lowlevel *l, const int32_t *lengths, uint64_t n, int64_t vocab, int64_t eod);
void gpt_lowlevel_free(struct gpt_lowlevel *l);
/* Tokens [off, off+n) of sequence seq, as int64. */
void gpt_lowlevel_read(const struct gpt_lowlevel *l, uint64_t seq, uint64_t off, uint64_t n, int64_t *out);

/*
 * The text of sample k of a GPTDataset (through its shuffle index): up to
 * S+1 tokens into text[]; returns how many (S+1 unless it is the kept last
 * partial sample).
 */
uint64_t gpt_sample_text(const struct gpt_lowlevel *l, const struct gpt_index *ix, int64_t seq_length,
			 uint64_t k, int64_t *text);

struct gpt_sample_opts {
	int64_t eod;
	int64_t pad;               /* -1: none */
	bool eod_mask_loss;
	bool reset_position_ids;
	bool reset_attention_mask;
};

/*
 * From text (n tokens, n <= S+1; shorter texts are padded): tokens[S],
 * labels[S], loss_mask[S], position_ids[S], and, when attn is not NULL, the
 * S x S attention mask (1 = masked, Megatron's True). Pads are replaced by
 * 0 in tokens and labels after masking, as Megatron does.
 */
void gpt_sample_build(const int64_t *text, uint64_t n, int64_t seq_length, const struct gpt_sample_opts *o,
		      int64_t *tokens, int64_t *labels, float *loss_mask, int64_t *position_ids, uint8_t *attn);

#endif
