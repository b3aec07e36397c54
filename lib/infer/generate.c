/*
 * generate.c - see generate.h. Each step admits waiting requests into free
 * cache slots while their prompts fit the step's token budget, then runs one
 * forward over the newcomers' prompts and the running requests' last tokens.
 */
#include "infer/generate.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

enum { WAITING, RUNNING, DONE };

struct live {
	int state, slot, pos; /* pos: positions in the cache */
	int32_t next;         /* the token this request brings to the next step */
	uint64_t rng;
};

void infer_request_free(struct infer_request *r)
{
	free(r->out);
	free(r->logprobs);
	r->out = NULL;
	r->logprobs = NULL;
}

/* After a request's logits row: its next token, or it finishes. */
static void advance(struct infer_engine *e, struct infer_request *q, struct live *s, const float *row, float *fs,
		    int *is)
{
	int V = e->c.V;
	if (q->nout >= q->max_new) {
		s->state = DONE;
		return;
	}
	float lp;
	int tok = infer_sample(row, V, &q->sampling, &s->rng, &lp, fs, is);
	if (tok == q->eod) {
		q->hit_eod = true;
		s->state = DONE;
		return;
	}
	q->out[q->nout] = tok;
	if (q->want_logprobs)
		q->logprobs[q->nprompt - 1 + q->nout] = lp;
	q->nout++;
	s->next = tok;
	if (q->nout >= q->max_new)
		s->state = DONE; /* the last token need not go through the model */
}

int infer_generate(struct infer_engine *e, struct infer_request *reqs, int nreq)
{
	int V = e->c.V;
	for (int i = 0; i < nreq; i++) {
		struct infer_request *q = &reqs[i];
		if (q->nprompt < 1 || q->max_new < 0)
			return error("request %d: an empty prompt, or a negative number of tokens to generate", i);
		if (q->nprompt > e->max_tokens || q->nprompt + q->max_new > e->max_seq)
			return error("request %d: %d prompt tokens + %d to generate exceed the %d positions of a request "
				     "(--inference-max-seq-length)",
				     i, q->nprompt, q->max_new, e->max_seq);
		if (infer_sampling_check(&q->sampling, V) < 0)
			return -1;
		q->out = xmalloc((size_t)(q->max_new ? q->max_new : 1) * sizeof(int32_t));
		q->nout = 0;
		q->hit_eod = false;
		q->logprobs = q->want_logprobs ? xcalloc((size_t)(q->nprompt - 1 + q->max_new + 1), sizeof(float)) : NULL;
	}
	struct live *st = xcalloc((size_t)nreq, sizeof(*st));
	bool *slot_used = xcalloc((size_t)e->max_req, sizeof(bool));
	int *sl = xmalloc((size_t)nreq * sizeof(int)), *ps = xmalloc((size_t)nreq * sizeof(int));
	int *nn = xmalloc((size_t)nreq * sizeof(int)), *who = xmalloc((size_t)nreq * sizeof(int));
	int32_t *tok = xmalloc((size_t)e->max_tokens * sizeof(int32_t));
	float *logits = xmalloc((size_t)e->max_tokens * V * sizeof(float));
	float *fs = xmalloc((size_t)2 * V * sizeof(float));
	int *is = xmalloc((size_t)V * sizeof(int));
	for (int i = 0; i < nreq; i++)
		st[i].rng = infer_rng_seed(reqs[i].sampling.seed);
	int rc = 0, done = 0;
	while (rc == 0 && done < nreq) {
		int nseq = 0, N = 0;
		bool all_logits = false;
		/* the running requests, one token each */
		for (int i = 0; i < nreq; i++)
			if (st[i].state == RUNNING && N < e->max_tokens) {
				who[nseq] = i, sl[nseq] = st[i].slot, ps[nseq] = st[i].pos, nn[nseq] = 1;
				tok[N++] = st[i].next;
				nseq++;
			}
		/* newcomers while a slot is free and their prompt fits the step */
		for (int i = 0; i < nreq; i++) {
			if (st[i].state != WAITING || N + reqs[i].nprompt > e->max_tokens)
				continue;
			int s = 0;
			while (s < e->max_req && slot_used[s])
				s++;
			if (s == e->max_req)
				break;
			slot_used[s] = true;
			st[i] = (struct live){ RUNNING, s, 0, 0, st[i].rng };
			who[nseq] = i, sl[nseq] = s, ps[nseq] = 0, nn[nseq] = reqs[i].nprompt;
			memcpy(tok + N, reqs[i].prompt, (size_t)reqs[i].nprompt * sizeof(int32_t));
			N += reqs[i].nprompt;
			all_logits |= reqs[i].want_logprobs && reqs[i].nprompt > 1;
			nseq++;
		}
		if (nseq == 0) {
			rc = error("no request fits a step of %d tokens", e->max_tokens);
			break;
		}
		rc = infer_step(e, nseq, sl, ps, nn, tok, all_logits, logits);
		for (int j = 0, r0 = 0; rc == 0 && j < nseq; r0 += nn[j], j++) {
			int i = who[j];
			struct infer_request *q = &reqs[i];
			const float *row = logits + (size_t)(all_logits ? r0 + nn[j] - 1 : j) * V;
			if (all_logits && q->want_logprobs && ps[j] == 0) /* the prompt's own log-probs */
				for (int t = 1; t < nn[j]; t++)
					q->logprobs[t - 1] = infer_logprob(logits + (size_t)(r0 + t - 1) * V, V, tok[r0 + t]);
			st[i].pos += nn[j];
			advance(e, q, &st[i], row, fs, is);
			if (st[i].state == RUNNING && st[i].pos >= e->max_seq)
				st[i].state = DONE;
			if (st[i].state == DONE) {
				slot_used[st[i].slot] = false;
				done++;
			}
		}
	}
	free(st), free(slot_used), free(sl), free(ps), free(nn), free(who), free(tok), free(logits), free(fs), free(is);
	return rc;
}
