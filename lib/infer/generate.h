/*
 * generate.h - generation for a set of requests with continuous batching:
 * every step's forward pass carries all the requests still running (their
 * prompts first, in chunks when a step has no room for a whole one, then
 * one token each), and a request that finishes (end of
 * document, its token budget, the cache's length) leaves the batch while
 * the others go on. The requests share nothing but the forward passes, so
 * each gets the answer it would get alone.
 */
#ifndef MEGAC_INFER_GENERATE_H
#define MEGAC_INFER_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infer/engine.h"
#include "infer/sample.h"

struct infer_request {
	const int32_t *prompt;
	int nprompt;            /* >= 1 */
	int max_new;            /* tokens to generate, >= 0 */
	struct infer_sampling sampling;
	int32_t eod;            /* stop token (not kept in the output); -1: none */
	bool has_stop_token;    /* a second one (PUT /api's stop_token) */
	int32_t stop_token;
	bool want_logprobs;
	/* results, allocated by infer_generate (free with infer_request_free) */
	int32_t *out;           /* the generated tokens */
	int nout;
	float *logprobs;        /* with want_logprobs: nprompt - 1 + nout entries */
	bool hit_eod;
	bool finished;
};

/* The requests in flight: new ones join between steps (a server's engine
 * thread adds what arrived, steps, and hands back what finished). */
struct infer_sched {
	struct infer_engine *e;
	struct infer_request **req; /* unfinished requests, in order of arrival */
	struct infer_live *st;
	int n, cap;
	bool *slot_used;
	int *sl, *ps, *nn, *who;
	int32_t *tok;
	float *logits, *plp, *fs; /* each sequence's last logits; the prompts' log-probs */
	int *is;
};

/* What the engine cannot take in request q (a reason, written to why), or
 * NULL: the server checks every request with it on the connection's
 * thread, so that the engine never refuses one. */
const char *infer_request_check(const struct infer_engine *e, const struct infer_request *q, char *why,
				size_t whysize);

void infer_sched_init(struct infer_sched *s, struct infer_engine *e);
void infer_sched_free(struct infer_sched *s);
/* Check a request against the engine (prompt, budget, sampling) and queue
 * it; its results are allocated here. error() and -1, nothing queued. */
int infer_sched_add(struct infer_sched *s, struct infer_request *r);
/* One forward step over the running requests and those that fit in; those
 * that end get finished = true and leave. Returns how many remain, or -1
 * after error(). */
int infer_sched_step(struct infer_sched *s);
/* Take request r out before it ends (its client is gone): its slot is free
 * for the next step, r->finished is set, what it generated stays. 0, or -1
 * when r is not in the scheduler (it has finished). */
int infer_sched_cancel(struct infer_sched *s, struct infer_request *r);

/* Run the requests to completion; at most e->max_req at once (more wait for
 * a slot). error() and -1 on a request the engine cannot take. */
int infer_generate(struct infer_engine *e, struct infer_request *reqs, int nreq);
void infer_request_free(struct infer_request *r);

#endif
