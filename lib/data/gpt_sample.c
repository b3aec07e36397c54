/*
 * gpt_sample.c - see gpt_sample.h.
 */
#include "gpt_sample.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

void gpt_lowlevel_from_reader(struct gpt_lowlevel *l, const struct idx_reader *r)
{
	memset(l, 0, sizeof(*l));
	l->reader = r;
	l->n_seqs = r->n_seqs;
	l->sizes = xmalloc((r->n_seqs ? r->n_seqs : 1) * sizeof(int32_t));
	for (uint64_t i = 0; i < r->n_seqs; i++) {
		l->sizes[i] = idx_length(r, i);
		if (l->sizes[i] > l->max_size)
			l->max_size = l->sizes[i];
	}
}

void gpt_lowlevel_mock(struct gpt_lowlevel *l, const int32_t *lengths, uint64_t n, int64_t vocab, int64_t eod)
{
	memset(l, 0, sizeof(*l));
	l->n_seqs = n;
	l->sizes = xmalloc((n ? n : 1) * sizeof(int32_t));
	memcpy(l->sizes, lengths, n * sizeof(int32_t));
	for (uint64_t i = 0; i < n; i++)
		if (lengths[i] > l->max_size)
			l->max_size = lengths[i];
	l->mock_vocab = vocab;
	l->mock_eod = eod;
}

void gpt_lowlevel_free(struct gpt_lowlevel *l)
{
	free(l->sizes);
	memset(l, 0, sizeof(*l));
}

void gpt_lowlevel_read(const struct gpt_lowlevel *l, uint64_t seq, uint64_t off, uint64_t n, int64_t *out)
{
	if (seq >= l->n_seqs || off + n > (uint64_t)l->sizes[seq])
		BUG("reading tokens [%llu, %llu) of sequence %llu (%d tokens)", (unsigned long long)off,
		    (unsigned long long)(off + n), (unsigned long long)seq, seq < l->n_seqs ? l->sizes[seq] : -1);
	if (!l->reader) {
		uint64_t len = (uint64_t)l->sizes[seq];
		for (uint64_t i = 0; i < n; i++) {
			uint64_t t = off + i;
			out[i] = t + 1 == len ? l->mock_eod : (int64_t)((t + 1) % (uint64_t)l->mock_vocab);
		}
		return;
	}
	size_t have;
	const unsigned char *p = idx_reader_sequence(l->reader, seq, &have);
	switch (l->reader->dtype) {
	case IDX_UINT16:
		for (uint64_t i = 0; i < n; i++)
			out[i] = ((const uint16_t *)p)[off + i];
		break;
	case IDX_INT32:
		for (uint64_t i = 0; i < n; i++)
			out[i] = ((const int32_t *)p)[off + i];
		break;
	case IDX_UINT8:
		for (uint64_t i = 0; i < n; i++)
			out[i] = p[off + i];
		break;
	case IDX_INT8:
		for (uint64_t i = 0; i < n; i++)
			out[i] = ((const int8_t *)p)[off + i];
		break;
	case IDX_INT16:
		for (uint64_t i = 0; i < n; i++)
			out[i] = ((const int16_t *)p)[off + i];
		break;
	case IDX_INT64:
		for (uint64_t i = 0; i < n; i++)
			out[i] = ((const int64_t *)p)[off + i];
		break;
	default:
		BUG("token dtype %s reached the sample reader", idx_dtype_name(l->reader->dtype));
	}
}

uint64_t gpt_sample_text(const struct gpt_lowlevel *l, const struct gpt_index *ix, int64_t seq_length,
			 uint64_t k, int64_t *text)
{
	const int64_t x = 1;
	if (k >= ix->n_samples)
		BUG("sample %llu of %llu", (unsigned long long)k, (unsigned long long)ix->n_samples);
	uint64_t j = (uint64_t)ix->shuffle_idx[k];
	int64_t p0 = ix->sample_idx[2 * j], o0 = ix->sample_idx[2 * j + 1];
	int64_t p1 = ix->sample_idx[2 * j + 2], o1 = ix->sample_idx[2 * j + 3];
	uint64_t n = 0;
	if (p0 == p1) {
		uint64_t cnt = (uint64_t)(o1 + x - o0);
		gpt_lowlevel_read(l, (uint64_t)ix->doc_idx[p0], (uint64_t)o0, cnt, text);
		n = cnt;
	} else {
		uint64_t d0 = (uint64_t)ix->doc_idx[p0];
		uint64_t cnt = (uint64_t)l->sizes[d0] - (uint64_t)o0;
		gpt_lowlevel_read(l, d0, (uint64_t)o0, cnt, text);
		n = cnt;
		for (int64_t p = p0 + 1; p < p1; p++) {
			uint64_t d = (uint64_t)ix->doc_idx[p];
			gpt_lowlevel_read(l, d, 0, (uint64_t)l->sizes[d], text + n);
			n += (uint64_t)l->sizes[d];
		}
		uint64_t d1 = (uint64_t)ix->doc_idx[p1];
		uint64_t last = (uint64_t)(o1 + x);
		if (last > (uint64_t)l->sizes[d1])
			last = (uint64_t)l->sizes[d1];
		gpt_lowlevel_read(l, d1, 0, last, text + n);
		n += last;
	}
	if (n > (uint64_t)seq_length + 1)
		BUG("sample %llu spans %llu tokens, more than S+1 = %lld", (unsigned long long)k,
		    (unsigned long long)n, (long long)seq_length + 1);
	return n;
}

void gpt_sample_build(const int64_t *text, uint64_t n, int64_t seq_length, const struct gpt_sample_opts *o,
		      int64_t *tokens, int64_t *labels, float *loss_mask, int64_t *position_ids, uint8_t *attn)
{
	const uint64_t S = (uint64_t)seq_length;
	const int64_t pad = o->pad;
	for (uint64_t i = 0; i < S; i++) {
		tokens[i] = i < n ? text[i] : pad;
		labels[i] = i + 1 < n ? text[i + 1] : pad;
		loss_mask[i] = 1.0f;
		position_ids[i] = (int64_t)i;
	}
	if (attn) /* causal: [q][k] masked when k > q */
		for (uint64_t q = 0; q < S; q++)
			for (uint64_t k = 0; k < S; k++)
				attn[q * S + k] = k > q;
	if (o->eod_mask_loss)
		for (uint64_t i = 0; i < S; i++)
			if (tokens[i] == o->eod)
				loss_mask[i] = 0.0f;
	if (o->reset_position_ids || o->reset_attention_mask) {
		uint64_t prev = 0; /* first position of the current document */
		for (uint64_t i = 0; i < S; i++) {
			if (tokens[i] != o->eod)
				continue;
			if (o->reset_attention_mask && attn)
				for (uint64_t q = i + 1; q < S; q++)
					for (uint64_t k = 0; k <= i; k++)
						attn[q * S + k] = 1;
			if (o->reset_position_ids) {
				for (uint64_t q = i + 1; q < S; q++)
					position_ids[q] -= (int64_t)(i + 1 - prev);
				prev = i + 1;
			}
		}
	}
	for (uint64_t i = 0; i < S; i++) {
		if (labels[i] == pad)
			loss_mask[i] = 0.0f;
		if (tokens[i] == pad)
			tokens[i] = 0;
		if (labels[i] == pad)
			labels[i] = 0;
	}
}
