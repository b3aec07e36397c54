/*
 * sample.c - see sample.h. The generator is splitmix64 (one 64-bit state
 * per request); a draw is a double in [0, 1) from its top 53 bits.
 */
#include "infer/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"

uint64_t infer_rng_seed(uint64_t seed)
{
	return seed ^ 0x9e3779b97f4a7c15ull;
}

static double uniform(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1p-53;
}

const char *infer_sampling_reason(const struct infer_sampling *s, int vocab, char *why, size_t whysize)
{
	if (!isnormal(s->temperature) || s->temperature < 0)
		return "temperature must be a positive number (and not so small that it rounds to 0)";
	if (s->top_k < 0 || s->top_k >= vocab) {
		snprintf(why, whysize, "top_k must be between 0 and %d (the vocabulary size minus one)", vocab - 1);
		return why;
	}
	if (!(s->top_p >= 0 && s->top_p <= 1))
		return "top_p must be between 0 and 1";
	if (s->top_k > 0 && s->top_p > 0)
		return "cannot set both top-k and top-p samplings.";
	return NULL;
}

int infer_sampling_check(const struct infer_sampling *s, int vocab)
{
	char why[128];
	const char *bad = infer_sampling_reason(s, vocab, why, sizeof(why));
	return bad ? error("%s", bad) : 0;
}

float infer_logprob(const float *logits, int V, int token)
{
	float mx = logits[0];
	for (int i = 1; i < V; i++)
		mx = logits[i] > mx ? logits[i] : mx;
	double sum = 0;
	for (int i = 0; i < V; i++)
		sum += exp((double)logits[i] - mx);
	return (float)((double)logits[token] - mx - log(sum));
}

static int by_logit_desc(const void *a, const void *b, void *keys)
{
	const float *z = keys;
	float x = z[*(const int *)a], y = z[*(const int *)b];
	if (x != y)
		return x > y ? -1 : 1;
	return *(const int *)a - *(const int *)b;
}

int infer_sample(const float *logits, int V, const struct infer_sampling *s, uint64_t *rng, float *logprob,
		 float *scratch, int *iscratch)
{
	int tok = 0;
	if (s->top_k == 1) {
		for (int i = 1; i < V; i++)
			if (logits[i] > logits[tok])
				tok = i;
	} else {
		/* (l - max) / T: at most 0, so a small temperature gives -inf for
		 * the others rather than +inf overflows */
		float *z = scratch, lmax = logits[0];
		for (int i = 1; i < V; i++)
			lmax = logits[i] > lmax ? logits[i] : lmax;
		for (int i = 0; i < V; i++)
			z[i] = (logits[i] - lmax) / s->temperature;
		if (s->top_k > 1 || s->top_p > 0) {
			for (int i = 0; i < V; i++)
				iscratch[i] = i;
			qsort_r(iscratch, (size_t)V, sizeof(int), by_logit_desc, z);
			if (s->top_k > 1) {
				float kth = z[iscratch[s->top_k - 1]];
				for (int i = 0; i < V; i++)
					if (z[i] < kth)
						z[i] = -INFINITY;
			} else {
				double mx = z[iscratch[0]], sum = 0, c = 0;
				for (int i = 0; i < V; i++)
					sum += exp((double)z[i] - mx);
				/* keep the sorted prefix up to and including the token whose
				 * cumulative mass first exceeds top_p */
				int keep = V;
				for (int r = 0; r < V; r++) {
					c += exp((double)z[iscratch[r]] - mx) / sum;
					if (c > s->top_p) {
						keep = r + 1;
						break;
					}
				}
				for (int r = keep; r < V; r++)
					z[iscratch[r]] = -INFINITY;
			}
		}
		double mx = -INFINITY, sum = 0;
		for (int i = 0; i < V; i++)
			mx = z[i] > mx ? z[i] : mx;
		for (int i = 0; i < V; i++)
			sum += z[i] == -INFINITY ? 0 : exp((double)z[i] - mx);
		double u = uniform(rng) * sum, acc = 0;
		tok = -1;
		for (int i = 0; i < V; i++) {
			if (z[i] == -INFINITY)
				continue;
			acc += exp((double)z[i] - mx);
			tok = i;
			if (acc > u)
				break;
		}
		if (tok < 0) /* cannot happen with finite logits: the maximum survives every cut */
			for (int i = tok = 0; i < V; i++)
				tok = logits[i] > logits[tok] ? i : tok;
	}
	if (logprob)
		*logprob = infer_logprob(logits, V, tok);
	return tok;
}
