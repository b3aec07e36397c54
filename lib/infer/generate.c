/*
 * generate.c - see generate.h. Each step takes the running requests' last
 * tokens first, then the rest of the prompts being prefilled, then admits
 * waiting requests into free cache slots, each prompt taking what is left
 * of the step's token budget: a prompt longer than that is prefilled in
 * chunks over several steps (chunked prefill), and a request samples its
 * first token after its prompt's last chunk.
 */
#include "infer/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

enum { WAITING, RUNNING, DONE };

struct infer_live {
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

void infer_sched_init(struct infer_sched *s, struct infer_engine *e)
{
	memset(s, 0, sizeof(*s));
	s->e = e;
	int V = e->c.V, R = e->max_req, T = e->max_tokens;
	s->slot_used = xcalloc((size_t)R, sizeof(bool));
	s->sl = xmalloc((size_t)T * sizeof(int)); /* a step has at most T sequences */
	s->ps = xmalloc((size_t)T * sizeof(int));
	s->nn = xmalloc((size_t)T * sizeof(int));
	s->who = xmalloc((size_t)T * sizeof(int));
	s->tok = xmalloc((size_t)T * sizeof(int32_t));
	s->logits = xmalloc((size_t)R * V * sizeof(float)); /* a step holds at most one sequence per slot */
	s->plp = xmalloc((size_t)T * sizeof(float));
	s->fs = xmalloc((size_t)2 * V * sizeof(float));
	s->is = xmalloc((size_t)V * sizeof(int));
}

void infer_sched_free(struct infer_sched *s)
{
	free(s->req), free(s->st), free(s->slot_used), free(s->sl), free(s->ps), free(s->nn), free(s->who);
	free(s->tok), free(s->logits), free(s->plp), free(s->fs), free(s->is);
	memset(s, 0, sizeof(*s));
}

const char *infer_request_check(const struct infer_engine *e, const struct infer_request *q, char *why,
				size_t whysize)
{
	if (q->nprompt < 1)
		return "the prompt is empty (no tokens)";
	if (q->max_new < 0)
		return "a negative number of tokens to generate";
	if (q->nprompt > e->max_seq || q->max_new > e->max_seq - q->nprompt) {
		snprintf(why, whysize,
			 "%d prompt tokens + %d to generate exceed the %d positions of a request "
			 "(--inference-max-seq-length)",
			 q->nprompt, q->max_new, e->max_seq);
		return why;
	}
	for (int t = 0; t < q->nprompt; t++)
		if (q->prompt[t] < 0 || q->prompt[t] >= e->c.V) {
			snprintf(why, whysize, "prompt token %d is outside the vocabulary (0 to %d)", q->prompt[t],
				 e->c.V - 1);
			return why;
		}
	return infer_sampling_reason(&q->sampling, e->c.V, why, whysize);
}

int infer_sched_add(struct infer_sched *s, struct infer_request *q)
{
	char why[256];
	const char *bad = infer_request_check(s->e, q, why, sizeof(why));
	if (bad)
		return error("%s", bad);
	q->out = xmalloc((size_t)(q->max_new ? q->max_new : 1) * sizeof(int32_t));
	q->nout = 0;
	q->hit_eod = q->finished = false;
	q->logprobs = q->want_logprobs ? xcalloc((size_t)(q->nprompt - 1 + q->max_new + 1), sizeof(float)) : NULL;
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->req = xrealloc(s->req, (size_t)s->cap * sizeof(*s->req));
		s->st = xrealloc(s->st, (size_t)s->cap * sizeof(*s->st));
	}
	s->req[s->n] = q;
	s->st[s->n] = (struct infer_live){ WAITING, -1, 0, 0, infer_rng_seed(q->sampling.seed) };
	s->n++;
	return 0;
}

/* After a request's logits row: its next token, or it ends. */
static void advance(struct infer_sched *s, struct infer_request *q, struct infer_live *l, const float *row)
{
	if (q->nout >= q->max_new) {
		l->state = DONE;
		return;
	}
	float lp;
	int tok = infer_sample(row, s->e->c.V, &q->sampling, &l->rng, &lp, s->fs, s->is);
	if (tok == q->eod || (q->has_stop_token && tok == q->stop_token)) {
		q->hit_eod = true;
		l->state = DONE;
		return;
	}
	q->out[q->nout] = tok;
	if (q->want_logprobs)
		q->logprobs[q->nprompt - 1 + q->nout] = lp;
	q->nout++;
	l->next = tok;
	if (q->nout >= q->max_new)
		l->state = DONE; /* the last token need not go through the model */
}

/* Request i brings n tokens to the step: the next n of its prompt while
 * it is prefilled, else its last token. */
static void take(struct infer_sched *s, int i, int n, int *nseq, int *N, bool *all_logits)
{
	struct infer_request *q = s->req[i];
	struct infer_live *l = &s->st[i];
	int j = (*nseq)++;
	s->who[j] = i, s->sl[j] = l->slot, s->ps[j] = l->pos, s->nn[j] = n;
	if (l->pos < q->nprompt) {
		memcpy(s->tok + *N, q->prompt + l->pos, (size_t)n * sizeof(int32_t));
		*all_logits |= q->want_logprobs && n > 1;
	} else {
		s->tok[*N] = l->next;
	}
	*N += n;
}

int infer_sched_step(struct infer_sched *s)
{
	struct infer_engine *e = s->e;
	int V = e->c.V, nseq = 0, N = 0, T = e->max_tokens;
	bool all_logits = false;
	/* the running requests that generate, one token each */
	for (int i = 0; i < s->n && N < T; i++)
		if (s->st[i].state == RUNNING && s->st[i].pos >= s->req[i]->nprompt)
			take(s, i, 1, &nseq, &N, &all_logits);
	/* the prompts being prefilled go on, as far as the step has room */
	for (int i = 0; i < s->n && N < T; i++) {
		int left = s->req[i]->nprompt - s->st[i].pos;
		if (s->st[i].state == RUNNING && left > 0)
			take(s, i, left < T - N ? left : T - N, &nseq, &N, &all_logits);
	}
	/* newcomers, in order of arrival, while a slot is free and the step has room */
	for (int i = 0; i < s->n && N < T; i++) {
		if (s->st[i].state != WAITING)
			continue;
		int slot = 0;
		while (slot < e->max_req && s->slot_used[slot])
			slot++;
		if (slot == e->max_req)
			break;
		s->slot_used[slot] = true;
		s->st[i].state = RUNNING;
		s->st[i].slot = slot;
		s->st[i].pos = 0;
		int np = s->req[i]->nprompt;
		take(s, i, np < T - N ? np : T - N, &nseq, &N, &all_logits);
	}
	if (nseq == 0) /* a slot is free when none runs */
		return s->n ? error("no request of %d could start", s->n) : 0;
	if (infer_step(e, nseq, s->sl, s->ps, s->nn, s->tok, s->logits, all_logits ? s->plp : NULL) < 0)
		return -1;
	for (int j = 0, r0 = 0; j < nseq; r0 += s->nn[j], j++) {
		int i = s->who[j], p0 = s->ps[j], n = s->nn[j];
		struct infer_request *q = s->req[i];
		const float *row = s->logits + (size_t)j * V;
		s->st[i].pos += n;
		if (p0 >= q->nprompt) { /* generating */
			advance(s, q, &s->st[i], row);
			continue;
		}
		/* a chunk of the prompt: its rows but the last give the log-probs
		 * of the prompt's tokens after them, the last the next chunk's
		 * first token's, or the first token to generate */
		if (q->want_logprobs && n > 1)
			for (int t = 0; t < n - 1; t++)
				q->logprobs[p0 + t] = s->plp[r0 + t];
		if (s->st[i].pos == q->nprompt)
			advance(s, q, &s->st[i], row);
		else if (q->want_logprobs)
			q->logprobs[s->st[i].pos - 1] = infer_logprob(row, V, q->prompt[s->st[i].pos]);
	}
	/* the finished leave, the others keep their order */
	int k = 0;
	for (int i = 0; i < s->n; i++) {
		if (s->st[i].state == DONE) {
			s->slot_used[s->st[i].slot] = false;
			s->req[i]->finished = true;
			continue;
		}
		s->req[k] = s->req[i];
		s->st[k++] = s->st[i];
	}
	s->n = k;
	return k;
}

int infer_sched_cancel(struct infer_sched *s, struct infer_request *r)
{
	int i = 0;
	while (i < s->n && s->req[i] != r)
		i++;
	if (i == s->n)
		return -1;
	if (s->st[i].state == RUNNING)
		s->slot_used[s->st[i].slot] = false;
	r->finished = true;
	memmove(s->req + i, s->req + i + 1, (size_t)(s->n - i - 1) * sizeof(*s->req));
	memmove(s->st + i, s->st + i + 1, (size_t)(s->n - i - 1) * sizeof(*s->st));
	s->n--;
	return 0;
}

int infer_generate(struct infer_engine *e, struct infer_request *reqs, int nreq)
{
	struct infer_sched s;
	infer_sched_init(&s, e);
	int rc = 0;
	for (int i = 0; rc == 0 && i < nreq; i++)
		if (infer_sched_add(&s, &reqs[i]) < 0)
			rc = error("request %d cannot be served", i);
	while (rc == 0 && s.n > 0)
		if (infer_sched_step(&s) < 0)
			rc = -1;
	infer_sched_free(&s);
	return rc;
}
