/*
 * engine.c - see engine.h. The layer is gpt.c's forward (the same ops in
 * the same order: norm, fused QKV with RoPE, attention, projection,
 * residual, norm, MLP, residual), without dropout, on the rows of a step
 * instead of a [B, S] micro-batch. With tensor parallelism each rank runs
 * its heads and its part of the MLP on all rows, the row-parallel outputs
 * are summed over the group (their bias added once, on rank 0), the
 * vocabulary-parallel embedding is summed likewise and the head's logits
 * are gathered.
 */
#include "infer/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "infer/sample.h"
#include "model/gpt_ckpt.h"

static int tp_size(const struct infer_engine *e)
{
	return e->tp ? e->tp->size : 1;
}

static int tp_rank(const struct infer_engine *e)
{
	return e->tp ? e->tp->rank : 0;
}

int infer_init(struct infer_engine *e, struct ckpt_reader *r, int mf, int max_seq, int max_req, int max_tokens,
	       struct dist_group *tp)
{
	memset(e, 0, sizeof(*e));
	e->tp = tp && tp->size > 1 ? tp : NULL;
	if (gpt_config_from_ckpt(&e->c, r, mf) < 0)
		return -1;
	struct gpt_config *c = &e->c;
	if (c->E > 0)
		return error("'%s' is a mixture-of-experts model: serving one is not implemented yet",
			     ckpt_reader_dir(r));
	if (max_seq == 0) /* the model's own length */
		max_seq = c->P;
	if (max_tokens == 0)
		max_tokens = max_seq + max_req;
	if (max_seq < 1 || (max_seq > c->P && !c->rope))
		return error("--inference-max-seq-length %d: the model has %d learned positions", max_seq, c->P);
	if (max_req < 1 || max_tokens < max_req)
		return error("the inference engine needs at least one request slot and a token per slot in a step");
	int t = tp_size(e);
	if (c->a % t || c->g % t || c->f % t || c->Vp % t)
		return error("tensor-parallel size %d does not divide the model's %d heads, %d query groups, ffn size %d "
			     "and padded vocabulary %d",
			     t, c->a, c->g, c->f, c->Vp);
	c->hidden_dropout = c->attention_dropout = 0;
	e->max_seq = max_seq;
	e->max_req = max_req;
	e->max_tokens = max_tokens;
	e->k = kops_cpu();
	mem_pool_init(&e->pool, e->k);
	/* gpt_init sizes its own buffers for one sequence of one position: the
	 * engine keeps its activations itself */
	struct gpt_config small = *c;
	small.S = 1;
	if (gpt_init(&e->m, &small, e->k, &e->pool, 1, GPT_FP32, e->tp, false) < 0 || gpt_load_weights(&e->m, r, mf) < 0)
		return -1;
	const struct gpt_config *lc = &e->m.lc; /* this rank's heads, groups, ffn and vocabulary */
	size_t cache = (size_t)max_req * c->L * lc->g * (size_t)max_seq * c->k;
	e->kcache = xcalloc(cache, sizeof(float));
	e->vcache = xcalloc(cache, sizeof(float));
	if (c->rope) {
		e->rope_cos = xmalloc((size_t)max_seq * c->rot * sizeof(float));
		e->rope_sin = xmalloc((size_t)max_seq * c->rot * sizeof(float));
		kops_rope_table(e->rope_cos, e->rope_sin, max_seq, c->rot, c->rotary_base);
	}
	e->kpos = xmalloc((size_t)max_seq * sizeof(int32_t));
	for (int i = 0; i < max_seq; i++)
		e->kpos[i] = i;
	size_t T = (size_t)max_tokens, h = (size_t)c->h, ak = (size_t)lc->a * c->k, gk = (size_t)lc->g * c->k;
	size_t f1 = (size_t)lc->f * (c->swiglu ? 2 : 1);
	e->qpos = xmalloc(T * sizeof(int32_t));
	e->pos = xmalloc(T * sizeof(int32_t));
	e->ltok = xmalloc(T * sizeof(int32_t));
	e->hdr = xmalloc((3 * T + 3) * sizeof(int));
	e->btok = xmalloc(T * sizeof(int32_t));
	e->x = xmalloc(T * h * sizeof(float));
	e->ln = xmalloc(T * h * sizeof(float));
	e->y = xmalloc(T * h * sizeof(float));
	e->mean = xmalloc(T * sizeof(float));
	e->rstd = xmalloc(T * sizeof(float));
	e->qkv = xmalloc(T * (ak + 2 * gk) * sizeof(float));
	e->q = xmalloc(T * ak * sizeof(float));
	e->kn = xmalloc(T * gk * sizeof(float));
	e->vn = xmalloc(T * gk * sizeof(float));
	e->att = xmalloc(T * ak * sizeof(float));
	e->lse = xmalloc(T * (size_t)lc->a * sizeof(float));
	e->fc1 = xmalloc(T * f1 * sizeof(float));
	e->act = xmalloc(T * (size_t)lc->f * sizeof(float));
	size_t H = INFER_HEAD_ROWS;
	e->rows = xmalloc(H * (size_t)c->Vp * sizeof(float));
	e->lrows = e->tp ? xmalloc(H * (size_t)lc->Vp * sizeof(float)) : NULL;
	e->grows = e->tp ? xmalloc(H * (size_t)c->Vp * sizeof(float)) : NULL;
	e->hrow = xmalloc(T * sizeof(int));
	return 0;
}

void infer_free(struct infer_engine *e)
{
	gpt_free(&e->m);
	free(e->kcache), free(e->vcache), free(e->rope_cos), free(e->rope_sin), free(e->kpos), free(e->qpos);
	free(e->pos), free(e->ltok), free(e->hdr), free(e->btok), free(e->x), free(e->ln), free(e->y), free(e->mean);
	free(e->rstd), free(e->qkv), free(e->q), free(e->kn), free(e->vn), free(e->att), free(e->lse), free(e->fc1);
	free(e->act), free(e->rows), free(e->lrows), free(e->grows), free(e->hrow);
	memset(e, 0, sizeof(*e));
}

static void norm(struct infer_engine *e, float *out, const float *in, int w, int b, int N)
{
	struct gpt_model *m = &e->m;
	if (e->c.rmsnorm)
		e->k->rmsnorm_forward(out, e->rstd, in, gpt_norm_weight(m, w), N, e->c.h, e->c.eps);
	else
		e->k->layernorm_forward(out, e->mean, e->rstd, in, gpt_norm_weight(m, w), b >= 0 ? gpt_param(m, b) : NULL,
					N, e->c.h, e->c.eps);
}

static const float *opt_param(struct gpt_model *m, int idx)
{
	return idx >= 0 ? gpt_param(m, idx) : NULL;
}

/* The cache of layer l of a slot: keys (or values) [g][max_seq][k], this
 * rank's query groups. */
static float *cache_at(const struct infer_engine *e, float *base, int slot, int l)
{
	size_t per = (size_t)e->m.lc.g * e->max_seq * e->c.k;
	return base + ((size_t)slot * e->c.L + l) * per;
}

/* Attention of one sequence's n new tokens (rows r0..) against its cache. */
static void attend(struct infer_engine *e, int l, int slot, int pos, int n, int r0)
{
	const struct gpt_config *c = &e->c, *lc = &e->m.lc;
	const struct kops *k = e->k;
	size_t ak = (size_t)lc->a * c->k, gk = (size_t)lc->g * c->k;
	const float *qkv = e->qkv + (size_t)r0 * (ak + 2 * gk);
	const float *cs = c->rope ? e->rope_cos + (size_t)pos * c->rot : NULL;
	const float *sn = c->rope ? e->rope_sin + (size_t)pos * c->rot : NULL;
	k->qkv_split_forward(e->q, e->kn, e->vn, qkv, cs, sn, 1, n, lc->a, lc->g, c->k, c->rope ? c->rot : 0);
	float *K = cache_at(e, e->kcache, slot, l), *V = cache_at(e, e->vcache, slot, l);
	for (int j = 0; j < lc->g; j++) {
		size_t to = ((size_t)j * e->max_seq + pos) * c->k, from = (size_t)j * n * c->k;
		memcpy(K + to, e->kn + from, (size_t)n * c->k * sizeof(float));
		memcpy(V + to, e->vn + from, (size_t)n * c->k * sizeof(float));
	}
	for (int t = 0; t < n; t++)
		e->qpos[t] = pos + t;
	k->attention_block_forward(e->att + (size_t)r0 * ak, e->lse, e->q, K, V, e->qpos, e->kpos, 1, n, e->max_seq,
				   lc->a, lc->g, c->k, e->max_seq, 1.0f / sqrtf((float)c->k), 0, 0, 0, 0);
}

/* A row-parallel linear: this rank's partial product, summed over the
 * group, the replicated bias counted once. */
static void row_parallel(struct infer_engine *e, float *out, const float *in, int w, int b, int N, int IC)
{
	struct gpt_model *m = &e->m;
	e->k->linear_forward(out, in, gpt_param(m, w), tp_rank(e) == 0 ? opt_param(m, b) : NULL, N, IC, e->c.h);
	if (e->tp)
		dist_allreduce_sum_f32(e->tp, out, (size_t)N * e->c.h);
}

/* Logits of R rows of normalised states x into e->rows [R, Vp]: with
 * tensor parallelism each rank's vocabulary columns, gathered. */
static void head(struct infer_engine *e, const float *x, int R)
{
	const struct gpt_config *c = &e->c, *lc = &e->m.lc;
	struct gpt_model *m = &e->m;
	if (!e->tp) {
		e->k->linear_forward(e->rows, x, gpt_param(m, m->out_w), NULL, R, c->h, c->Vp);
		return;
	}
	int t = e->tp->size;
	size_t lv = (size_t)lc->Vp;
	e->k->linear_forward(e->lrows, x, gpt_param(m, m->out_w), NULL, R, c->h, lc->Vp);
	dist_allgather_equal_f32(e->tp, e->lrows, (size_t)R * lv, e->grows); /* [rank][R][Vp/t] */
	for (int q = 0; q < t; q++)
		for (int i = 0; i < R; i++)
			memcpy(e->rows + (size_t)i * c->Vp + (size_t)q * lv, e->grows + ((size_t)q * R + i) * lv,
			       lv * sizeof(float));
}

static int check_step(const struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
		      const int32_t *tokens, int *N)
{
	*N = 0;
	for (int s = 0; s < nseq; s++) {
		if (slot[s] < 0 || slot[s] >= e->max_req || n[s] < 1 || pos[s] < 0 || pos[s] + n[s] > e->max_seq)
			return error("sequence %d: %d tokens at position %d do not fit the %d positions of a request slot",
				     s, n[s], pos[s], e->max_seq);
		*N += n[s];
		if (*N > e->max_tokens)
			return error("more than the engine's %d tokens in one step", e->max_tokens);
	}
	for (int i = 0; i < *N; i++)
		if (tokens[i] < 0 || tokens[i] >= e->c.V)
			return error("token id %d is outside the vocabulary (0 to %d)", tokens[i], e->c.V - 1);
	return 0;
}

/* The step itself, on every rank of the group alike. */
static void run_step(struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
		     const int32_t *tokens, int N, bool want_lp, float *last, float *prompt_lp)
{
	const struct gpt_config *c = &e->c, *lc = &e->m.lc;
	const struct kops *k = e->k;
	struct gpt_model *m = &e->m;
	for (int s = 0, r = 0; s < nseq; s++)
		for (int t = 0; t < n[s]; t++)
			e->pos[r++] = pos[s] + t;
	size_t h = (size_t)c->h, ak = (size_t)lc->a * c->k, gk = (size_t)lc->g * c->k;
	/* the embedding: this rank's vocabulary shard, summed over the group */
	for (int i = 0; i < N; i++) {
		int32_t t = tokens[i] - m->vstart;
		e->ltok[i] = t >= 0 && t < lc->Vp ? t : -1;
	}
	k->embedding_forward(e->x, e->ltok, c->rope ? NULL : e->pos, gpt_param(m, m->wte),
			     c->rope || tp_rank(e) ? NULL : gpt_param(m, m->wpe), N, c->h);
	if (e->tp)
		dist_allreduce_sum_f32(e->tp, e->x, (size_t)N * h);
	for (int l = 0; l < c->L; l++) {
		const struct gpt_layer_params *p = &m->lp[l];
		norm(e, e->ln, e->x, p->ln1_w, p->ln1_b, N);
		k->linear_forward(e->qkv, e->ln, gpt_param(m, p->qkv_w), opt_param(m, p->qkv_b), N, c->h,
				  (int)(ak + 2 * gk));
		for (int s = 0, r0 = 0; s < nseq; r0 += n[s], s++)
			attend(e, l, slot[s], pos[s], n[s], r0);
		row_parallel(e, e->y, e->att, p->proj_w, p->proj_b, N, (int)ak);
		k->add(e->x, e->x, e->y, (size_t)N * h);
		norm(e, e->ln, e->x, p->ln2_w, p->ln2_b, N);
		k->linear_forward(e->fc1, e->ln, gpt_param(m, p->fc1_w), opt_param(m, p->fc1_b), N, c->h,
				  lc->f * (c->swiglu ? 2 : 1));
		if (c->swiglu)
			k->swiglu_forward(e->act, e->fc1, N, lc->f);
		else
			k->gelu_forward(e->act, e->fc1, (size_t)N * lc->f, c->gelu);
		row_parallel(e, e->y, e->act, p->fc2_w, p->fc2_b, N, lc->f);
		k->add(e->x, e->x, e->y, (size_t)N * h);
	}
	/* the head, INFER_HEAD_ROWS rows at a time: every row with prompt
	 * log-probs wanted, else each sequence's last; hrow[i] is the step row
	 * of head row i */
	int R = 0;
	for (int s = 0, r0 = 0; s < nseq; r0 += n[s], s++)
		for (int t = want_lp ? 0 : n[s] - 1; t < n[s]; t++)
			e->hrow[R++] = r0 + t;
	norm(e, e->ln, e->x, m->lnf_w, m->lnf_b, N);
	for (int c0 = 0, seq = 0, seq_end = n[0]; c0 < R; c0 += INFER_HEAD_ROWS) {
		int cr = R - c0 < INFER_HEAD_ROWS ? R - c0 : INFER_HEAD_ROWS;
		for (int i = 0; i < cr; i++) /* the chunk's rows together (x is free now) */
			memcpy(e->x + (size_t)i * h, e->ln + (size_t)e->hrow[c0 + i] * h, h * sizeof(float));
		head(e, e->x, cr);
		for (int i = 0; i < cr; i++) {
			int row = e->hrow[c0 + i];
			while (row >= seq_end) /* the sequence this row belongs to */
				seq_end += n[++seq];
			const float *lg = e->rows + (size_t)i * c->Vp;
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
	if (e->tp) { /* the followers run the same step */
		e->hdr[0] = nseq, e->hdr[1] = all_logits, e->hdr[2] = N;
		dist_bcast(e->tp, e->hdr, 3 * sizeof(int), 0);
		memcpy(e->hdr, slot, (size_t)nseq * sizeof(int));
		memcpy(e->hdr + nseq, pos, (size_t)nseq * sizeof(int));
		memcpy(e->hdr + 2 * nseq, n, (size_t)nseq * sizeof(int));
		dist_bcast(e->tp, e->hdr, (size_t)3 * nseq * sizeof(int), 0);
		dist_bcast(e->tp, (void *)tokens, (size_t)N * sizeof(int32_t), 0);
	}
	run_step(e, nseq, slot, pos, n, tokens, N, all_logits, last, prompt_lp);
	return 0;
}

int infer_follow(struct infer_engine *e)
{
	for (;;) {
		dist_bcast(e->tp, e->hdr, 3 * sizeof(int), 0);
		int nseq = e->hdr[0], all_logits = e->hdr[1], N = e->hdr[2];
		if (nseq < 0)
			return 0;
		if (nseq > e->max_tokens || N > e->max_tokens)
			return error("rank 0 sent a step of %d sequences and %d tokens", nseq, N);
		dist_bcast(e->tp, e->hdr, (size_t)3 * nseq * sizeof(int), 0);
		dist_bcast(e->tp, e->btok, (size_t)N * sizeof(int32_t), 0);
		int *slot = xmalloc((size_t)(nseq ? nseq : 1) * 3 * sizeof(int));
		memcpy(slot, e->hdr, (size_t)3 * nseq * sizeof(int));
		run_step(e, nseq, slot, slot + nseq, slot + 2 * nseq, e->btok, N, all_logits, NULL, NULL);
		free(slot);
	}
}

void infer_stop_followers(struct infer_engine *e)
{
	if (!e->tp)
		return;
	e->hdr[0] = -1, e->hdr[1] = e->hdr[2] = 0;
	dist_bcast(e->tp, e->hdr, 3 * sizeof(int), 0);
}
