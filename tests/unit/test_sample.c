/*
 * test_sample.c - the sampler of lib/infer against the rules of Megatron's
 * megatron/core/inference/sampling/torch_sampling.py, on hand-made logits: greedy
 * (first maximum), top-k keeping ties with the k-th, top-p keeping the token
 * that crosses the threshold, temperature, the frequencies of plain
 * sampling against the softmax, seeds, the parameter checks, log-probs.
 */
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "infer/sample.h"
#include "test.h"

#define V 6
static float scratch[2 * V];
static int iscratch[V];

/* counts[i] of n draws */
static void draws(const float *logits, struct infer_sampling s, int n, int *counts)
{
	uint64_t rng = infer_rng_seed(s.seed);
	memset(counts, 0, V * sizeof(int));
	for (int i = 0; i < n; i++)
		counts[infer_sample(logits, V, &s, &rng, NULL, scratch, iscratch)]++;
}

static void test_greedy_and_logprob(void)
{
	float l[V] = { 0.5f, 2.0f, -1.0f, 2.0f, 0.0f, 1.0f };
	struct infer_sampling s = { 0.7f, 1, 0, 3 };
	uint64_t rng = infer_rng_seed(3);
	float lp;
	CHECK_INT(infer_sample(l, V, &s, &rng, &lp, scratch, iscratch), 1); /* the first maximum */
	double z = 0;
	for (int i = 0; i < V; i++)
		z += exp(l[i]);
	CHECK(fabs(lp - (2.0 - log(z))) < 1e-6); /* of the raw logits, temperature ignored */
}

static void test_top_k(void)
{
	float l[V] = { 3.0f, 1.0f, 2.0f, 2.0f, -5.0f, 0.0f };
	int c[V];
	draws(l, (struct infer_sampling){ 1.0f, 2, 0, 11 }, 3000, c);
	/* the 2nd largest is 2.0, held by two tokens: both survive */
	CHECK(c[0] > 0 && c[2] > 0 && c[3] > 0 && c[1] == 0 && c[4] == 0 && c[5] == 0);
}

static void test_top_p(void)
{
	/* probabilities 0.5, 0.3, 0.2 (and ~0 for the rest) */
	float l[V] = { logf(0.5f), logf(0.3f), logf(0.2f), -40, -40, -40 };
	int c[V];
	draws(l, (struct infer_sampling){ 1.0f, 0, 0.6f, 5 }, 3000, c);
	CHECK(c[0] > 0 && c[1] > 0 && c[2] == 0); /* 0.5 < 0.6, then 0.8 crosses: kept */
	draws(l, (struct infer_sampling){ 1.0f, 0, 0.4f, 5 }, 3000, c);
	CHECK(c[0] == 3000); /* the top-1 is never dropped */
	draws(l, (struct infer_sampling){ 1.0f, 0, 1.0f, 5 }, 3000, c);
	CHECK(c[0] > 0 && c[1] > 0 && c[2] > 0);
}

static void test_frequencies_and_seed(void)
{
	float l[V] = { 0.0f, 1.0f, 0.5f, -0.5f, 0.2f, 0.8f };
	int n = 60000, c[V], c2[V];
	for (int T = 1; T <= 2; T++) {
		draws(l, (struct infer_sampling){ (float)T, 0, 0, 17 }, n, c);
		double z = 0;
		for (int i = 0; i < V; i++)
			z += exp(l[i] / T);
		for (int i = 0; i < V; i++) {
			double p = exp(l[i] / T) / z, sd = sqrt(p * (1 - p) / n);
			CHECK(fabs((double)c[i] / n - p) < 5 * sd);
		}
	}
	draws(l, (struct infer_sampling){ 1.0f, 0, 0, 17 }, 500, c);
	draws(l, (struct infer_sampling){ 1.0f, 0, 0, 17 }, 500, c2);
	CHECK(!memcmp(c, c2, sizeof(c)));
}

static void test_checks(void)
{
	CHECK_INT(infer_sampling_check(&(struct infer_sampling){ 1.0f, 2, 0.5f, 0 }, V), -1);
	CHECK_INT(infer_sampling_check(&(struct infer_sampling){ 1.0f, 0, 1.5f, 0 }, V), -1);
	CHECK_INT(infer_sampling_check(&(struct infer_sampling){ 0.0f, 0, 0, 0 }, V), -1);
	CHECK_INT(infer_sampling_check(&(struct infer_sampling){ 1.0f, V, 0, 0 }, V), -1);
	CHECK_INT(infer_sampling_check(&(struct infer_sampling){ 0.5f, 3, 0, 0 }, V), 0);
}

int main(void)
{
	log_init("test_sample", 0, 1);
	RUN(test_greedy_and_logprob);
	RUN(test_top_k);
	RUN(test_top_p);
	RUN(test_frequencies_and_seed);
	RUN(test_checks);
	return test_summary();
}
