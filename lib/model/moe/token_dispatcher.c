/*
 * token_dispatcher.c - moving a MoE layer's rows to their experts' ranks
 * and back (Megatron Core's MoEAlltoAllTokenDispatcher), and the room they
 * need.
 *
 * Every rank routes its own tokens, sends each expert-parallel peer the
 * rows routed to the peer's experts, runs its own experts on the rows it
 * receives, and sends the outputs back; the combine and the router's
 * backward then see exactly the rows of one rank. Rows arrive peer-major
 * (each peer's rows in its expert-major order) and the experts want them
 * expert-major: the two reorders are copies of whole (peer, expert) blocks.
 */
#include "model/gpt_int.h"

#include <stdlib.h>

#include "base/xalloc.h"

/* The most rows this rank's experts can get: a token's k slots name k
 * different experts, so at most min(k, El) of them are here, from each
 * peer's B*T tokens, and at most each peer's capacity per expert. */
size_t moe_rows_most(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, k = (size_t)c->router.k, El = (size_t)m->par.El;
	size_t per = k < El ? k : El;
	size_t most = (size_t)m->par.ep_size * BT * per;
	size_t cap = (size_t)m->par.ep_size * El * (size_t)moe_route_capacity_total(&c->router, (int)BT);
	return cap < most ? cap : most;
}

size_t gpt_moe_rows_local(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t R = (size_t)m->B * c->S * (size_t)c->router.k, most = m->par.ep ? moe_rows_most(m) : R;
	return c->router.capacity > 0 || most < R ? most : R;
}

/* Room for `rows` rows of this rank's experts in a layer's buffers and the
 * shared scratch: a larger set when they are too small, 1.5 times what was
 * there (geometric, so few regrowths), at most moe_rows_most. The old
 * buffers stay taken (gpt_free gives them back): freeing device memory now
 * could wait for transfers in flight. */
void moe_reserve(struct gpt_model *m, struct gpt_moe_acts *M, size_t rows)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_moe_state *S = &m->moe;
	size_t h = (size_t)c->h, fm = (size_t)c->moe_f, f1 = c->swiglu ? 2 * fm : fm;
	if (rows <= M->rows_cap && rows <= S->rows_cap)
		return;
	size_t most = moe_rows_most(m);
	if (rows > most)
		BUG("%zu rows for this rank's experts, more than the %zu that can come", rows, most);
	if (rows > M->rows_cap) {
		size_t cap = M->rows_cap + M->rows_cap / 2 > rows ? M->rows_cap + M->rows_cap / 2 : rows;
		cap = cap < most ? cap : most;
		M->xloc = gpt_take(m, cap * h);
		M->fc1 = gpt_take(m, cap * f1);
		M->act = moe_take_act(m, cap);
		M->rows_cap = cap;
	}
	if (rows > S->rows_cap) {
		size_t BT = (size_t)m->B * c->S, fs = (size_t)c->shared_f, f1s = c->swiglu ? 2 * fs : fs;
		size_t R = BT * (size_t)c->router.k;
		size_t cap = S->rows_cap + S->rows_cap / 2 > rows ? S->rows_cap + S->rows_cap / 2 : rows;
		cap = cap < most ? cap : most;
		S->dact = gpt_take(m, cap * fm > BT * fs ? cap * fm : BT * fs);
		S->dfc1 = gpt_take(m, cap * f1 > BT * f1s ? cap * f1 : BT * f1s);
		S->xa = gpt_take(m, (cap > R ? cap : R) * h);
		S->xb = gpt_take(m, (cap > R ? cap : R) * h);
		S->rows_cap = cap;
	}
}

/* The rows per (peer, local expert) of this layer's exchange, from every
 * peer's rows per expert (host), and the experts' offsets in xloc. */
void moe_plan_exchange(struct gpt_model *m, struct gpt_moe_acts *M, const struct moe_route *r)
{
	int E = m->lc.E, El = m->par.El, ep = m->par.ep_size;
	int32_t *off = M->loff;
	int32_t *mine = xmalloc((size_t)E * sizeof(int32_t));
	for (int e = 0; e < E; e++)
		mine[e] = r->exp_off[e + 1] - r->exp_off[e];
	dist_allgather_i32(m->par.ep, mine, (size_t)E, m->moe.cnt_all);
	free(mine);
	for (int p = 0; p < ep; p++)
		for (int e = 0; e < El; e++)
			M->cnt[p * El + e] = m->moe.cnt_all[(size_t)p * E + m->par.e0 + e];
	off[0] = 0;
	for (int e = 0; e < El; e++) {
		off[e + 1] = off[e];
		for (int p = 0; p < ep; p++)
			off[e + 1] += M->cnt[p * El + e];
	}
}

/* Reorder blocks of w floats per row between the peer-major order of the
 * exchange and the expert-major order of xloc. */
static void moe_reorder(struct gpt_model *m, const struct gpt_moe_acts *M, float *dst, const float *src, size_t w,
			bool to_expert_major)
{
	int El = m->par.El, ep = m->par.ep_size;
	size_t pm = 0; /* the block's first row, peer-major */
	for (int p = 0; p < ep; p++)
		for (int e = 0; e < El; e++) {
			size_t n = (size_t)M->cnt[p * El + e], em = (size_t)M->loff[e];
			for (int q = 0; q < p; q++)
				em += (size_t)M->cnt[q * El + e];
			if (n) {
				float *d = dst + (to_expert_major ? em : pm) * w;
				const float *s = src + (to_expert_major ? pm : em) * w;
				m->k->copy(d, s, n * w * sizeof(float));
			}
			pm += n;
		}
}

/* The floats per peer that this rank's rows send (own experts' order) and
 * the ones it receives, w per row. */
static void moe_counts(const struct gpt_model *m, const struct gpt_moe_acts *M, size_t w, size_t *own, size_t *recv)
{
	const struct moe_route *r = &M->route;
	int El = m->par.El;
	for (int p = 0; p < m->par.ep_size; p++) {
		own[p] = (size_t)(r->exp_off[(p + 1) * El] - r->exp_off[p * El]) * w;
		recv[p] = 0;
		for (int e = 0; e < El; e++)
			recv[p] += (size_t)M->cnt[p * El + e] * w;
	}
}

/* Rows in this rank's routing order (in: [R, h]) to the experts' ranks,
 * landing expert-major in out ([Rl, h]); or back (in: [Rl, h] expert-major,
 * out: [R, h]). */
void moe_exchange(struct gpt_model *m, const struct gpt_moe_acts *M, float *out, const float *in, bool to_experts)
{
	int ep = m->par.ep_size;
	size_t h = (size_t)m->lc.h, *own = xmalloc(2 * (size_t)ep * sizeof(size_t)), *recv = own + ep;
	moe_counts(m, M, h, own, recv);
	if (to_experts) {
		dist_alltoallv_f32(m->par.ep, in, own, m->moe.xa, recv);
		moe_reorder(m, M, out, m->moe.xa, h, true);
	} else {
		moe_reorder(m, M, m->moe.xa, in, h, false);
		dist_alltoallv_f32(m->par.ep, m->moe.xa, recv, out, own);
	}
	free(own);
}
