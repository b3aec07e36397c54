/*
 * batch.c - see batch.h.
 */
#include "train/batch.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

void batch_init(struct batch *b, int B, int S, bool doc_ids)
{
	memset(b, 0, sizeof(*b));
	b->B = B;
	b->S = S;
	size_t n = (size_t)B * S;
	b->tokens = xmalloc(n * sizeof(int32_t));
	b->labels = xmalloc(n * sizeof(int32_t));
	b->positions = xmalloc(n * sizeof(int32_t));
	b->loss_mask = xmalloc(n * sizeof(float));
	b->doc = doc_ids ? xmalloc(n * sizeof(int32_t)) : NULL;
	b->text = xmalloc(((size_t)S + 1) * sizeof(int64_t));
	b->tok64 = xmalloc((size_t)S * sizeof(int64_t));
	b->lab64 = xmalloc((size_t)S * sizeof(int64_t));
	b->pos64 = xmalloc((size_t)S * sizeof(int64_t));
	b->attn = doc_ids ? xmalloc((size_t)S * S) : NULL;
}

void batch_free(struct batch *b)
{
	free(b->tokens);
	free(b->labels);
	free(b->positions);
	free(b->loss_mask);
	free(b->doc);
	free(b->text);
	free(b->tok64);
	free(b->lab64);
	free(b->pos64);
	free(b->attn);
	memset(b, 0, sizeof(*b));
}

int batch_get(struct batch *b, const struct gpt_data *d, int split, uint64_t first, int64_t vocab)
{
	const struct gpt_split *sp = &d->splits[split];
	if (!sp->present || !sp->len)
		return error("the %s split has no samples", gpt_split_names[split]);
	int S = b->S;
	for (int i = 0; i < b->B; i++) {
		uint64_t k = first + (uint64_t)i;
		if (k >= sp->len) /* Megatron's sampler asserts too: never reuse samples silently */
			return error("the %s split has %llu samples and sample %llu is needed: the run asks for more "
				     "data than the split was built for (were --train-iters, --eval-interval, "
				     "--eval-iters or the batch size changed since the checkpoint?)",
				     gpt_split_names[split], (unsigned long long)sp->len, (unsigned long long)k);
		int dataset_id;
		uint64_t n = gpt_data_text(d, split, k, b->text, &dataset_id);
		gpt_sample_build(b->text, n, S, &d->cfg.sample, b->tok64, b->lab64, b->loss_mask + (size_t)i * S,
				 b->pos64, b->attn);
		int32_t *tok = b->tokens + (size_t)i * S, *lab = b->labels + (size_t)i * S;
		int32_t *pos = b->positions + (size_t)i * S;
		for (int t = 0; t < S; t++) {
			if (b->tok64[t] < 0 || b->tok64[t] >= vocab || b->lab64[t] < 0 || b->lab64[t] >= vocab)
				return error("%s sample %llu holds token id %lld, outside the model's vocabulary of "
					     "%lld (was the dataset made with another tokenizer?)",
					     gpt_split_names[split], (unsigned long long)k,
					     (long long)(b->tok64[t] < 0 || b->tok64[t] >= vocab ? b->tok64[t]
												  : b->lab64[t]),
					     (long long)vocab);
			tok[t] = (int32_t)b->tok64[t];
			lab[t] = (int32_t)b->lab64[t];
			pos[t] = (int32_t)b->pos64[t];
		}
		if (b->doc) {
			/* Megatron's mask blocks attention from after an EOD to it and everything
			 * before; a new document starts where row t may not see column t-1. */
			int32_t *doc = b->doc + (size_t)i * S;
			doc[0] = 0;
			for (int t = 1; t < S; t++)
				doc[t] = doc[t - 1] + (b->attn[(size_t)t * S + t - 1] ? 1 : 0);
		}
	}
	return 0;
}

int batch_get_sft(struct batch *b, const struct sft_data *d, struct tok_session *s, int split, uint64_t first,
		  int64_t vocab)
{
	const struct sft_split *sp = &d->splits[split];
	if (!sp->present || !sp->len)
		return error("the %s split has no samples", gpt_split_names[split]);
	if (!b->doc)
		BUG("an SFT batch without document ids");
	int S = b->S;
	for (int i = 0; i < b->B; i++) {
		uint64_t k = first + (uint64_t)i;
		if (k >= sp->len)
			return error("the %s split has %llu samples and sample %llu is needed: the run asks for more "
				     "data than the split was built for (were --train-iters, --eval-interval, "
				     "--eval-iters or the batch size changed since the checkpoint?)",
				     gpt_split_names[split], (unsigned long long)sp->len, (unsigned long long)k);
		struct sft_sample smp;
		if (sft_data_sample(d, s, split, k, &smp) < 0)
			return -1;
		int32_t *tok = b->tokens + (size_t)i * S, *lab = b->labels + (size_t)i * S;
		int32_t *pos = b->positions + (size_t)i * S, *doc = b->doc + (size_t)i * S;
		float *mask = b->loss_mask + (size_t)i * S;
		size_t c = 0;
		for (int t = 0; t < S; t++) {
			int64_t id = smp.tokens[t], label = smp.labels[t];
			/* a masked label (-100, or the pad) carries no loss: any id serves */
			if (smp.loss_mask[t] == 0 && (label < 0 || label >= vocab))
				label = 0;
			if (id < 0 || id >= vocab || label < 0 || label >= vocab) {
				uint64_t line;
				const char *file = sft_data_where(d, split, k, &line);
				error("%s:%" PRIu64 ": token id %lld is outside the model's vocabulary of %lld (is the "
				      "model's tokenizer the SFT tokenizer?)",
				      file, line, (long long)(id < 0 || id >= vocab ? id : label), (long long)vocab);
				sft_sample_free(&smp);
				return -1;
			}
			/* the conversation spans of cu_seqlens are the documents */
			while (c + 2 < smp.n_cu && t >= smp.cu_seqlens[c + 1])
				c++;
			tok[t] = (int32_t)id;
			lab[t] = (int32_t)label;
			pos[t] = (int32_t)smp.position_ids[t];
			mask[t] = smp.loss_mask[t];
			doc[t] = (int32_t)c;
		}
		sft_sample_free(&smp);
	}
	return 0;
}

void batch_slice(struct batch *local, const struct batch *full, int (*pos)(const void *ctx, int j),
		 const void *ctx)
{
	int T = local->S, S = full->S;
	if (local->B != full->B)
		BUG("batch slice of %dx%d into %dx%d", full->B, S, local->B, T);
	for (int b = 0; b < full->B; b++)
		for (int j = 0; j < T; j++) {
			size_t i = (size_t)b * T + j, g = (size_t)b * S + (size_t)pos(ctx, j);
			local->tokens[i] = full->tokens[g];
			local->labels[i] = full->labels[g];
			local->positions[i] = full->positions[g];
			local->loss_mask[i] = full->loss_mask[g];
			if (full->doc && local->doc)
				local->doc[i] = full->doc[g];
		}
}
