/*
 * batch.h - one micro-batch of GPT training input, assembled from the
 * dataset exactly as Megatron's data loader feeds the model: samples
 * first..first+B-1 of a split in order (the pretraining sampler with one
 * data-parallel rank), each turned into tokens, labels, loss mask and
 * position ids by gpt_sample_build, plus per-token document ids standing in
 * for the [S, S] attention mask of --reset-attention-mask.
 */
#ifndef MEGAC_TRAIN_BATCH_H
#define MEGAC_TRAIN_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "data/gpt_data.h"
#include "data/sft_data.h"

struct batch {
	int B, S;
	int32_t *tokens, *labels, *positions, *doc; /* [B*S]; doc NULL without reset-attention-mask */
	float *loss_mask;                          /* [B*S] */
	/* scratch */
	int64_t *text, *tok64, *lab64, *pos64;
	uint8_t *attn;
};

void batch_init(struct batch *b, int B, int S, bool doc_ids);
void batch_free(struct batch *b);
/* Fill b with samples first..first+B-1 of split. error() and -1 when they
 * are beyond the split's length, or when a token id is not below vocab (a
 * dataset made with another tokenizer). */
int batch_get(struct batch *b, const struct gpt_data *d, int split, uint64_t first, int64_t vocab);

/* The same from the SFT datasets (--sft): the samples' positions, and
 * document ids numbering the conversations of cu_seqlens (b made with
 * document ids). Labels without loss are stored as 0. */
int batch_get_sft(struct batch *b, const struct sft_data *d, struct tok_session *s, int split, uint64_t first,
		  int64_t vocab);

/* Context parallelism: this rank's positions of every sample of full into
 * local (made by batch_init with T = S/cp positions): local position j is
 * full position pos(j), gpt_global_pos's map. Document ids are sliced
 * only into a local batch made with them (the model takes the whole
 * sequence's ids, full's, for ring attention). */
void batch_slice(struct batch *local, const struct batch *full, int (*pos)(const void *ctx, int j),
		 const void *ctx);

#endif
