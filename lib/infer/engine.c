/*
 * engine.c - see engine.h. The model is gpt.c's, set up for serving: the
 * same embedding, transformer layers (dense or mixture of experts) and
 * output layer that train runs, on the rows of a step instead of a [B, S]
 * micro-batch, attention against each sequence's cache slot. With tensor
 * parallelism each rank runs its heads and its part of the MLP (and of
 * every expert) on all rows, as in training; with expert parallelism every
 * rank runs the step's rows too, and each MoE layer's all-to-all takes them
 * to their experts' ranks and back. Rank 0 describes each step to all the
 * others first.
 */
#include "infer/engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "infer/sample.h"
#include "model/gpt_ckpt.h"

int infer_init(struct infer_engine *e, struct ckpt_reader *r, int mf, int max_seq, int max_req, int max_tokens,
	       const struct kops *k, const struct infer_groups *g)
{
	memset(e, 0, sizeof(*e));
	e->tp = g && g->tp && g->tp->size > 1 ? g->tp : NULL;
	struct dist_group *ep = g && g->ep && g->ep->size > 1 ? g->ep : NULL;
	e->all = g && g->all && g->all->size > 1 ? g->all : NULL;
	if (gpt_config_from_ckpt(&e->c, r, mf) < 0)
		return -1;
	struct gpt_config *c = &e->c;
	for (int l = 0; c->hybrid && l < c->L; l++)
		e->recurrent |= c->layer_kind[l] == GPT_LAYER_MAMBA;
	if (max_seq == 0) /* the model's own length */
		max_seq = c->P;
	if (max_tokens == 0)
		max_tokens = max_seq + max_req;
	if (max_seq < 1 || (max_seq > c->P && !c->rope && !c->nopos))
		return error("--inference-max-seq-length %d: the model has %d learned positions", max_seq, c->P);
	if (max_req < 1 || max_tokens < max_req)
		return error("the inference engine needs at least one request slot and a token per slot in a step");
	c->hidden_dropout = c->attention_dropout = 0;
	c->recompute = GPT_RECOMPUTE_NONE;
	/* a capacity factor would drop tokens by how requests happen to be
	 * batched into a step: serving routes dropless, every token to its
	 * top-k experts */
	c->router.capacity = 0;
	c->S = max_tokens; /* a step's rows */
	e->max_seq = max_seq;
	e->max_req = max_req;
	e->max_tokens = max_tokens;
	e->k = k ? k : kops_cpu();
	mem_pool_init(&e->pool, e->k);
	struct gpt_serving sv = { max_req, max_seq, max_tokens, INFER_HEAD_ROWS };
	struct gpt_setup setup = { .B = 1, .precision = GPT_FP32, .tp = e->tp, .ep = ep, .serve = &sv };
	if (gpt_init_pipe(&e->m, c, e->k, &e->pool, &setup) < 0 ||
	    gpt_load_weights(&e->m, r, mf) < 0)
		return -1;
	size_t T = (size_t)max_tokens;
	e->hdr = xmalloc((3 * T + 3) * sizeof(int));
	e->btok = xmalloc(T * sizeof(int32_t));
	e->hrow = xmalloc(T * sizeof(int));
	e->held = xcalloc((size_t)max_req, sizeof(int));
	e->seen = xcalloc((size_t)max_req, sizeof(bool));
	return 0;
}

void infer_free(struct infer_engine *e)
{
	gpt_free(&e->m);
	free(e->hdr), free(e->btok), free(e->hrow), free(e->held), free(e->seen);
	memset(e, 0, sizeof(*e));
}

/* A step's sequences: each in a slot of its own, its tokens within the
 * slot's positions and the step's; with recurrent layers, each at position
 * 0 (the slot starts again) or where the slot's state is (held). */
static int check_step(const struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
		      const int32_t *tokens, int *N)
{
	*N = 0;
	memset(e->seen, 0, (size_t)e->max_req * sizeof(bool));
	for (int s = 0; s < nseq; s++) {
		if (slot[s] < 0 || slot[s] >= e->max_req || n[s] < 1 || pos[s] < 0 || pos[s] + n[s] > e->max_seq)
			return error("sequence %d: %d tokens at position %d do not fit the %d positions of a request slot",
				     s, n[s], pos[s], e->max_seq);
		if (e->seen[slot[s]])
			return error("sequence %d: slot %d has another sequence in the same step", s, slot[s]);
		e->seen[slot[s]] = true;
		if (e->recurrent && pos[s] != 0 && pos[s] != e->held[slot[s]])
			return error("sequence %d: position %d of slot %d, whose Mamba layers' state stands after %d "
				     "positions: a recurrent state can go on or start again at position 0, not go back or "
				     "skip ahead", s, pos[s], slot[s], e->held[slot[s]]);
		*N += n[s];
		if (*N > e->max_tokens)
			return error("more than the engine's %d tokens in one step", e->max_tokens);
	}
	for (int i = 0; i < *N; i++)
		if (tokens[i] < 0 || tokens[i] >= e->c.V)
			return error("token id %d is outside the vocabulary (0 to %d)", tokens[i], e->c.V - 1);
	return 0;
}

/* The step itself, on every rank of the group alike: the model's forward
 * over the step's rows, then the output layer INFER_HEAD_ROWS rows at a
 * time: every row with prompt log-probs wanted, else each sequence's last;
 * hrow[i] is the step row of head row i. */
static void run_step(struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
		     const int32_t *tokens, int N, bool want_lp, float *last, float *prompt_lp)
{
	const struct gpt_config *c = &e->c;
	struct gpt_kv_step step = { nseq, N, slot, pos, n };
	const float *x = gpt_serve_forward(&e->m, &step, tokens);
	for (int s = 0; s < nseq; s++) /* where each slot's recurrent state stands now */
		e->held[slot[s]] = pos[s] + n[s];
	size_t h = (size_t)c->h;
	int R = 0;
	for (int s = 0, r0 = 0; s < nseq; r0 += n[s], s++)
		for (int t = want_lp ? 0 : n[s] - 1; t < n[s]; t++)
			e->hrow[R++] = r0 + t;
	float *hx = e->m.kv->head_x;
	int H = e->m.kv->head_rows;
	for (int c0 = 0, seq = 0, seq_end = n[0]; c0 < R; c0 += H) {
		int cr = R - c0 < H ? R - c0 : H;
		for (int i = 0; i < cr; i++) /* the chunk's rows together */
			e->k->copy(hx + (size_t)i * h, x + (size_t)e->hrow[c0 + i] * h, h * sizeof(float));
		const float *rows = gpt_serve_logits(&e->m, hx, cr);
		for (int i = 0; i < cr; i++) {
			int row = e->hrow[c0 + i];
			while (row >= seq_end) /* the sequence this row belongs to */
				seq_end += n[++seq];
			const float *lg = rows + (size_t)i * c->Vp;
			if (row == seq_end - 1) {
				if (last)
					memcpy(last + (size_t)seq * c->V, lg, (size_t)c->V * sizeof(float));
			} else if (prompt_lp) {
				prompt_lp[row] = infer_logprob(lg, c->V, tokens[row + 1]);
			}
		}
	}
}

/* hdr: [nseq, want_lp, N, slot[nseq], pos[nseq], n[nseq]]; nseq -1 stops */
int infer_step(struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
	       const int32_t *tokens, float *last, float *prompt_lp)
{
	bool all_logits = prompt_lp != NULL;
	int N;
	if (check_step(e, nseq, slot, pos, n, tokens, &N) < 0)
		return -1;
	if (e->all) { /* the followers run the same step */
		e->hdr[0] = nseq, e->hdr[1] = all_logits, e->hdr[2] = N;
		dist_bcast(e->all, e->hdr, 3 * sizeof(int), 0);
		memcpy(e->hdr, slot, (size_t)nseq * sizeof(int));
		memcpy(e->hdr + nseq, pos, (size_t)nseq * sizeof(int));
		memcpy(e->hdr + 2 * nseq, n, (size_t)nseq * sizeof(int));
		dist_bcast(e->all, e->hdr, (size_t)3 * nseq * sizeof(int), 0);
		dist_bcast(e->all, (void *)tokens, (size_t)N * sizeof(int32_t), 0);
	}
	run_step(e, nseq, slot, pos, n, tokens, N, all_logits, last, prompt_lp);
	return 0;
}

int infer_follow(struct infer_engine *e)
{
	for (;;) {
		dist_bcast(e->all, e->hdr, 3 * sizeof(int), 0);
		int nseq = e->hdr[0], all_logits = e->hdr[1], N = e->hdr[2];
		if (nseq < 0)
			return 0;
		if (nseq > e->max_tokens || N > e->max_tokens)
			return error("rank 0 sent a step of %d sequences and %d tokens", nseq, N);
		dist_bcast(e->all, e->hdr, (size_t)3 * nseq * sizeof(int), 0);
		dist_bcast(e->all, e->btok, (size_t)N * sizeof(int32_t), 0);
		int *slot = xmalloc((size_t)(nseq ? nseq : 1) * 3 * sizeof(int));
		memcpy(slot, e->hdr, (size_t)3 * nseq * sizeof(int));
		run_step(e, nseq, slot, slot + nseq, slot + 2 * nseq, e->btok, N, all_logits, NULL, NULL);
		free(slot);
	}
}

void infer_stop_followers(struct infer_engine *e)
{
	if (!e->all)
		return;
	e->hdr[0] = -1, e->hdr[1] = e->hdr[2] = 0;
	dist_bcast(e->all, e->hdr, 3 * sizeof(int), 0);
}
