/*
 * gpt_index.c - see gpt_index.h. Each function follows its Megatron
 * counterpart in megatron/core/datasets/gpt_dataset.py (_build_document_index,
 * _build_shuffle_index, GPTDataset._build_document_sample_shuffle_indices) and
 * helpers.cpp (build_sample_idx, build_blending_indices). Shuffles go through
 * np_random.h, which reproduces numpy's legacy RandomState draw for draw.
 */
#include "gpt_index.h"
#include "base/error.h"
#include "base/xalloc.h"
#include "data/np_random.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int gpt_split_parse(const char *split, double bounds[4], bool present[3])
{
	/* step 1: every run of [.0-9] is a number; pad to three */
	double w[3] = { 0, 0, 0 };
	int n = 0;
	for (const char *p = split; *p;) {
		if ((*p >= '0' && *p <= '9') || *p == '.') {
			const char *q = p;
			while ((*q >= '0' && *q <= '9') || *q == '.')
				q++;
			char buf[64];
			size_t len = (size_t)(q - p) < sizeof(buf) - 1 ? (size_t)(q - p) : sizeof(buf) - 1;
			memcpy(buf, p, len);
			buf[len] = 0;
			char *end;
			double v = strtod(buf, &end);
			if (*end || !isfinite(v))
				return error("--split '%s': '%s' is not a number", split, buf);
			if (n >= 3)
				return error("--split '%s': more than three proportions (train, valid, test)", split);
			w[n++] = v;
			p = q;
		} else {
			p++;
		}
	}
	double sum = w[0] + w[1] + w[2];
	if (n == 0 || sum <= 0)
		return error("--split '%s': expected proportions such as 969,30,1", split);
	/* steps 2-4: normalise, accumulate from the integer 0 */
	bounds[0] = 0;
	for (int i = 0; i < 3; i++)
		bounds[i + 1] = bounds[i] + w[i] / sum;
	for (int i = 0; i < 3; i++)
		present[i] = bounds[i + 1] > bounds[i];
	return 0;
}

/* Python's round(): half to even. */
static uint64_t round_half_even(double x)
{
	double r = nearbyint(x); /* the default rounding mode is to nearest, ties to even */
	return r < 0 ? 0 : (uint64_t)r;
}

void gpt_split_range(const double b[4], int i, uint64_t n, uint64_t *lo, uint64_t *hi)
{
	*lo = round_half_even(b[i] * (double)n);
	*hi = round_half_even(b[i + 1] * (double)n);
	if (*hi < *lo)
		*hi = *lo;
}

/* helpers.cpp's build_sample_idx: rows (position in doc_idx, offset) delimiting the samples. */
static void build_sample_idx(const int32_t *sizes, const int64_t *doc_idx, uint64_t n_doc, int64_t seq_length,
			     uint64_t n_samples, int64_t *out)
{
	const int64_t x = 1;
	uint64_t p = 0;
	int64_t off = 0;
	out[0] = 0;
	out[1] = 0;
	for (uint64_t k = 1; k <= n_samples; k++) {
		int64_t need = seq_length + x;
		while (need != 0) {
			int64_t avail = (int64_t)sizes[doc_idx[p]] - off;
			need -= avail;
			if (need <= 0) {
				off += avail + need - x;
				need = 0;
			} else if (p + 1 == n_doc) {
				off = (int64_t)sizes[doc_idx[p]] - x;
				break;
			} else {
				p++;
				off = 0;
			}
		}
		out[2 * k] = (int64_t)p;
		out[2 * k + 1] = off;
	}
}

int gpt_index_build(const int32_t *sizes, uint64_t lo, uint64_t hi, int64_t num_samples, int64_t seq_length,
		    uint32_t seed, bool drop_last, struct gpt_index *out)
{
	const int64_t x = 1;
	memset(out, 0, sizeof(*out));
	uint64_t docs = hi - lo;
	int64_t T = 0;
	for (uint64_t i = lo; i < hi; i++)
		T += sizes[i];
	if (T <= x)
		return error("the split's %llu sequences hold %lld tokens: not enough for one sample",
			     (unsigned long long)docs, (long long)T);
	out->tokens_per_epoch = (uint64_t)T;

	/* 5.1 epochs */
	int64_t E = 1;
	if (num_samples >= 0) {
		int64_t need = num_samples * seq_length + x; /* smallest E >= 1 with E*T >= need */
		E = (need + T - 1) / T;
		if (E < 1)
			E = 1;
	}
	/* 5.2 separate final epoch */
	bool separate = false;
	if (E > 1) {
		int64_t a = ((E - 1) * T - x) / seq_length;
		int64_t b = num_samples - a;
		int64_t c = (T - x) / seq_length;
		if (b < 0 || b > c + 1)
			BUG("final-epoch sample count %lld outside [0, %lld]", (long long)b, (long long)c + 1);
		separate = b < (int64_t)(0.80 * (double)c);
	}
	out->epochs = (int)E;
	out->separate_final_epoch = separate;

	/* 5.3/5.4 document index: the range repeated E times, shuffled (final epoch apart) */
	struct np_mt19937 rng;
	np_mt_seed(&rng, seed);
	out->n_doc = (uint64_t)E * docs;
	out->doc_idx = xmalloc(out->n_doc * sizeof(int64_t));
	for (uint64_t e = 0; e < (uint64_t)E; e++)
		for (uint64_t i = 0; i < docs; i++)
			out->doc_idx[e * docs + i] = (int64_t)(lo + i);
	if (!separate) {
		np_mt_shuffle_i64(&rng, out->doc_idx, out->n_doc);
	} else {
		np_mt_shuffle_i64(&rng, out->doc_idx, out->n_doc - docs);
		np_mt_shuffle_i64(&rng, out->doc_idx + out->n_doc - docs, docs);
	}

	/* 5.5 sample index */
	int64_t total = E * T - x;
	uint64_t M = drop_last ? (uint64_t)(total / seq_length)
			       : (uint64_t)ceilf((float)total / (float)seq_length); /* float32, as the C++ helper */
	out->n_samples = M;
	out->sample_idx = xmalloc((M + 1) * 2 * sizeof(int64_t));
	build_sample_idx(sizes, out->doc_idx, out->n_doc, seq_length, M, out->sample_idx);

	/* 5.6 shuffle index */
	out->shuffle_idx = xmalloc((M ? M : 1) * sizeof(int64_t));
	for (uint64_t i = 0; i < M; i++)
		out->shuffle_idx[i] = (int64_t)i;
	if (!separate) {
		np_mt_shuffle_i64(&rng, out->shuffle_idx, M);
	} else {
		uint64_t a = (uint64_t)(((E - 1) * T - x) / seq_length);
		np_mt_shuffle_i64(&rng, out->shuffle_idx, a);
		np_mt_shuffle_i64(&rng, out->shuffle_idx + a, M - a);
	}
	return 0;
}

void gpt_index_free(struct gpt_index *ix)
{
	free(ix->doc_idx);
	free(ix->sample_idx);
	free(ix->shuffle_idx);
	memset(ix, 0, sizeof(*ix));
}

bool gpt_index_sample_idx_is_int64(const struct gpt_index *ix, int32_t max_size)
{
	return ix->n_doc > INT32_MAX || max_size > INT32_MAX;
}

bool gpt_index_shuffle_idx_is_int64(const struct gpt_index *ix)
{
	return ix->n_samples >= ((uint64_t)1 << 32) - 2;
}

void gpt_blend_build(const double *weights, int n, uint64_t size, int16_t *dataset_index,
		     int64_t *dataset_sample_index)
{
	int64_t *count = xcalloc((size_t)n, sizeof(int64_t));
	for (uint64_t s = 0; s < size; s++) {
		double t = s > 1 ? (double)s : 1.0;
		int best = 0;
		double best_err = weights[0] * t - (double)count[0];
		for (int d = 1; d < n; d++) {
			double err = weights[d] * t - (double)count[d];
			if (err > best_err) {
				best_err = err;
				best = d;
			}
		}
		dataset_index[s] = (int16_t)best;
		dataset_sample_index[s] = count[best]++;
	}
	free(count);
}

void gpt_blend_build_exhaustive(const int64_t *lengths, int n, int16_t *dataset_index,
				int64_t *dataset_sample_index)
{
	int64_t total = 0;
	for (int d = 0; d < n; d++)
		total += lengths[d];
	double *w = xmalloc((size_t)n * sizeof(double));
	for (int d = 0; d < n; d++)
		w[d] = (double)lengths[d] / (double)total;
	int64_t *count = xcalloc((size_t)n, sizeof(int64_t));
	for (int64_t s = 0; s < total; s++) {
		double t = s > 1 ? (double)s : 1.0;
		int best = -1;
		double best_err = 0;
		for (int d = 0; d < n; d++) {
			if (count[d] >= lengths[d])
				continue;
			double err = w[d] * t - (double)count[d];
			if (best < 0 || err > best_err) {
				best_err = err;
				best = d;
			}
		}
		dataset_index[s] = (int16_t)best;
		dataset_sample_index[s] = count[best]++;
	}
	free(count);
	free(w);
}
