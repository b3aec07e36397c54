/*
 * sample.h - choosing the next token from a row of logits, as Megatron's
 * text generation server does (megatron/core/inference/sampling/torch_sampling.py):
 * greedy argmax when top_k is 1; otherwise the logits divided by the
 * temperature, cut to the top_k largest (ties with the k-th kept) or to the
 * smallest prefix of the sorted distribution whose mass reaches top_p (the
 * token crossing it kept), and one draw from the softmax. The draw uses a
 * per-request generator seeded from the request's seed, so a request gives
 * the same tokens whatever else is batched with it.
 */
#ifndef MEGAC_INFER_SAMPLE_H
#define MEGAC_INFER_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

struct infer_sampling {
	float temperature; /* > 0 */
	int top_k;         /* 0: off; 1: greedy */
	float top_p;       /* 0: off; (0, 1] */
	uint64_t seed;
};

/* The sampling parameters as Megatron checks them (and a temperature that
 * is a normal float): error() naming the field and -1; or the reason
 * without a message (NULL when good). */
int infer_sampling_check(const struct infer_sampling *s, int vocab);
const char *infer_sampling_reason(const struct infer_sampling *s, int vocab, char *why, size_t whysize);

/* The next token; *logprob gets log softmax(logits)[token] of the raw
 * (unscaled, unfiltered) logits. rng: the request's state (seed it with
 * infer_rng_seed). scratch: room for 2 * V floats and V ints. */
int infer_sample(const float *logits, int V, const struct infer_sampling *s, uint64_t *rng, float *logprob,
		 float *scratch, int *iscratch);

/* log softmax(logits)[token]. */
float infer_logprob(const float *logits, int V, int token);

uint64_t infer_rng_seed(uint64_t seed);

#endif
