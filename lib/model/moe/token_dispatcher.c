/*
 * token_dispatcher.c - moving a MoE layer's rows to their experts' ranks
 * and back (Megatron Core's MoEAlltoAllTokenDispatcher), and the room they
 * need, when the experts are apart (gpt_parallel.dispatch: expert
 * parallelism, or an expert TP size other than TP).
 *
 * Every TP rank routes all rows alike (router.c), but only the rows of its
 * own sequence shard (positions [r·T/t, (r+1)·T/t) of every sample, as
 * Megatron's router sees them) leave it: each row goes once to its
 * expert's expert-parallel rank (one all-to-all over EP), then the
 * expert-TP ranks of that expert, which hold slices of its MLP, gather what
 * each of them received (Megatron's all-gather over expert TP). The
 * experts run on the gathered rows; their partial outputs are summed back
 * over expert TP onto the rank that received each row (Megatron's
 * reduce-scatter) and return through the all-to-all. Backward moves the
 * rows' output gradients the same way, and the input gradients back.
 *
 * Layouts, w floats per row:
 *   sel       this rank's shard's rows, in routing order (expert-major)
 *   EP-in     what the EP all-to-all brings, peer-major: [p][e] blocks of
 *             cnt[p][e] rows (peer p's rows for local expert e)
 *   A         the same rows expert-major: [e][p] blocks (n_ep rows)
 *   ETP-in    every expert-TP peer's A, peer-major: [j][A of j]
 *   xloc      expert-major over the expert-TP peers: [e][j] blocks of
 *             ecnt[j][e] rows (= A with expert TP 1)
 * The reorders are copies of whole blocks. The expert-TP exchange is an
 * all-to-all whose blocks are the same rows for every peer (an
 * all-gather with sizes that differ by rank) in one direction, and each
 * peer's partial outputs of this rank's rows, summed, in the other (the
 * matching reduce-scatter).
 *
 * Without SP (text_gen_server with TP and EP, expert TP = TP) every TP
 * rank holds every row: each sends them all, its experts' slices give
 * partial outputs, and the layer's output is summed over TP as a dense
 * MLP's (no expert-TP exchange).
 */
#include "model/gpt_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* The TP ranks whose rows leave separately: each its sequence shard under
 * SP; without SP (serving) every TP rank sends every row and its experts'
 * slices give partial outputs, summed over TP with the rest of the layer. */
static int shards(const struct gpt_model *m)
{
	return m->par.sp ? m->par.tp_size : 1;
}

/* The expert-TP ranks whose rows are gathered: all of them when they hold
 * different rows (sequence shards, or other replicas' data), else 1 (the
 * TP ranks of a model without SP, which hold the same rows). */
static int gather_peers(const struct gpt_model *m)
{
	int etp = m->par.etp_size;
	return etp > 1 && (m->par.sp || etp != m->par.tp_size) ? etp : 1;
}

/* The most rows this rank's experts can get: a token's k slots name k
 * different experts, so at most min(k, El) of them are here, from each EP
 * peer's shard of B*T/t tokens, and at most that shard's capacity per
 * expert; times the expert-TP peers whose rows are gathered. */
size_t moe_rows_most(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, k = (size_t)c->router.k, El = (size_t)m->par.El;
	size_t sh = (size_t)shards(m), per = k < El ? k : El;
	size_t most = (size_t)m->par.ep_size * (BT / sh) * per;
	size_t cap_e = (size_t)moe_route_capacity_total(&c->router, (int)BT); /* over all shards */
	if ((size_t)(c->router.shards > 1 ? c->router.shards : 1) == sh)
		cap_e /= sh; /* each shard drops to its own capacity */
	size_t cap = (size_t)m->par.ep_size * El * cap_e;
	return (cap < most ? cap : most) * (m->par.dispatch ? (size_t)gather_peers(m) : 1);
}

size_t gpt_moe_rows_local(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t R = (size_t)m->B * c->S * (size_t)c->router.k, most = m->par.dispatch ? moe_rows_most(m) : R;
	return c->router.capacity > 0 || most < R ? most : R;
}

/* The rows the expert-TP exchange holds at once (xa, xb): this rank's A
 * once for every expert-TP peer (planned: moe_plan_exchange). */
static size_t transit_rows(const struct gpt_model *m, const struct gpt_moe_acts *M)
{
	size_t nep = 0;
	for (int i = 0; i < m->par.ep_size * m->par.El; i++)
		nep += (size_t)M->cnt[i];
	return (size_t)gather_peers(m) * nep;
}

/* Room for `rows` rows of this rank's experts in a layer's buffers, and
 * for those and the planned exchange's in the shared scratch: a larger set
 * when they are too small, 1.5 times what was there (geometric, so few
 * regrowths), at most moe_rows_most. The old buffers stay taken (gpt_free
 * gives them back): freeing device memory now could wait for transfers in
 * flight. */
void moe_reserve(struct gpt_model *m, struct gpt_moe_acts *M, size_t rows)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_moe_state *S = &m->moe;
	size_t h = (size_t)c->h, fm = (size_t)c->moe_f, f1 = c->swiglu ? 2 * fm : fm;
	size_t t = transit_rows(m, M), srows = rows > t ? rows : t;
	if (rows <= M->rows_cap && srows <= S->rows_cap)
		return;
	size_t most = moe_rows_most(m);
	if (srows > most)
		BUG("%zu rows for this rank's experts, more than the %zu that can come", srows, most);
	if (rows > M->rows_cap) {
		size_t cap = M->rows_cap + M->rows_cap / 2 > rows ? M->rows_cap + M->rows_cap / 2 : rows;
		cap = cap < most ? cap : most;
		M->xloc = gpt_take(m, cap * h);
		M->fc1 = gpt_take(m, cap * f1);
		M->act = moe_take_act(m, cap);
		M->rows_cap = cap;
	}
	if (srows > S->rows_cap) {
		size_t BT = (size_t)m->B * c->S, fs = (size_t)c->shared_f, f1s = c->swiglu ? 2 * fs : fs;
		size_t R = BT * (size_t)c->router.k;
		size_t cap = S->rows_cap + S->rows_cap / 2 > srows ? S->rows_cap + S->rows_cap / 2 : srows;
		cap = cap < most ? cap : most;
		if (S->dact) { /* training */
			S->dact = gpt_take(m, cap * fm > BT * fs ? cap * fm : BT * fs);
			S->dfc1 = gpt_take(m, cap * f1 > BT * f1s ? cap * f1 : BT * f1s);
		}
		S->xa = gpt_take(m, (cap > R ? cap : R) * h);
		S->xb = gpt_take(m, (cap > R ? cap : R) * h);
		S->xc = gpt_take(m, cap * h);
		S->rows_cap = cap;
	}
}

/* Whether token `tok` is in this TP rank's sequence shard (T: positions per
 * sample on this rank). */
static bool in_shard(const struct gpt_model *m, int tok, int T)
{
	int t = shards(m);
	return t == 1 || (tok % T) / (T / t) == m->par.tp_rank;
}

/* The rows this rank sends (its shard's, in routing order), the rows per
 * (EP peer, local expert) of the exchange from every peer's rows per expert
 * (host), the rows per (expert-TP peer, local expert) gathered, and the
 * experts' offsets in xloc. Host; the selection goes to the device. */
void moe_plan_exchange(struct gpt_model *m, struct gpt_moe_acts *M, const struct moe_route *r, int T)
{
	int E = m->lc.E, El = m->par.El, ep = m->par.ep_size, etp = gather_peers(m);
	if (shards(m) > 1 && T % shards(m))
		BUG("%d positions per sample in %d sequence shards", T, shards(m));
	int n = 0;
	M->sel_off[0] = 0;
	for (int e = 0; e < E; e++) {
		for (int i = r->exp_off[e]; i < r->exp_off[e + 1]; i++)
			if (in_shard(m, r->row_tok[i], T))
				M->sel_host[n++] = i;
		M->sel_off[e + 1] = n;
	}
	M->nsel = n;
	if (n > 0) {
		int32_t *tok = xmalloc((size_t)n * sizeof(int32_t));
		for (int i = 0; i < n; i++)
			tok[i] = r->row_tok[M->sel_host[i]];
		m->k->to_device(M->sel_row, M->sel_host, (size_t)n * sizeof(int32_t));
		m->k->to_device(M->sel_tok, tok, (size_t)n * sizeof(int32_t));
		free(tok);
	}
	int32_t *mine = xmalloc((size_t)(E > El ? E : El) * sizeof(int32_t));
	for (int e = 0; e < E; e++)
		mine[e] = M->sel_off[e + 1] - M->sel_off[e];
	if (m->par.ep)
		dist_allgather_i32(m->par.ep, mine, (size_t)E, m->moe.cnt_all);
	else
		memcpy(m->moe.cnt_all, mine, (size_t)E * sizeof(int32_t));
	for (int p = 0; p < ep; p++)
		for (int e = 0; e < El; e++)
			M->cnt[p * El + e] = m->moe.cnt_all[(size_t)p * E + m->par.e0 + e];
	/* A's rows per local expert, gathered over expert TP */
	for (int e = 0; e < El; e++) {
		mine[e] = 0;
		for (int p = 0; p < ep; p++)
			mine[e] += M->cnt[p * El + e];
	}
	if (etp > 1)
		dist_allgather_i32(m->par.etp, mine, (size_t)El, M->ecnt);
	else
		memcpy(M->ecnt, mine, (size_t)El * sizeof(int32_t));
	free(mine);
	M->loff[0] = 0;
	for (int e = 0; e < El; e++) {
		M->loff[e + 1] = M->loff[e];
		for (int j = 0; j < etp; j++)
			M->loff[e + 1] += M->ecnt[j * El + e];
	}
}

/* Reorder blocks of w floats per row between peer-major ([p][e] blocks of
 * cnt[p*El + e] rows) and expert-major ([e][p] blocks) order. */
static void reorder(struct gpt_model *m, const int32_t *cnt, int npeer, int El, float *dst, const float *src,
		    size_t w, bool to_expert_major)
{
	size_t *eoff = xcalloc((size_t)El + 1, sizeof(size_t));
	for (int e = 0; e < El; e++) {
		eoff[e + 1] = eoff[e];
		for (int p = 0; p < npeer; p++)
			eoff[e + 1] += (size_t)cnt[p * El + e];
	}
	size_t pm = 0; /* the block's first row, peer-major */
	for (int p = 0; p < npeer; p++)
		for (int e = 0; e < El; e++) {
			size_t n = (size_t)cnt[p * El + e], em = eoff[e];
			for (int q = 0; q < p; q++)
				em += (size_t)cnt[q * El + e];
			if (n) {
				float *d = dst + (to_expert_major ? em : pm) * w;
				const float *s = src + (to_expert_major ? pm : em) * w;
				m->k->copy(d, s, n * w * sizeof(float));
			}
			pm += n;
		}
	free(eoff);
}

/* An all-to-all over g, or a copy in a group of one (g NULL). */
static void alltoall(struct gpt_model *m, struct dist_group *g, const float *in, const size_t *scount, float *out,
		     const size_t *rcount)
{
	if (g) {
		dist_alltoallv_f32(g, in, scount, out, rcount);
		return;
	}
	if (scount[0] != rcount[0])
		BUG("a group of one sends %zu floats to itself and receives %zu", scount[0], rcount[0]);
	if (scount[0])
		m->k->copy(out, in, scount[0] * sizeof(float));
}

/* The rows of this rank's shard (in: [nsel, h] in routing order) to their
 * experts, landing in xloc's order in out ([loff[El], h]); or back (in:
 * [loff[El], h] partial outputs in xloc's order, out: [nsel, h] summed over
 * expert TP). in and out are neither xa nor xb. */
void moe_exchange(struct gpt_model *m, const struct gpt_moe_acts *M, float *out, const float *in, bool to_experts)
{
	struct gpt_moe_state *S = &m->moe;
	int ep = m->par.ep_size, etp = gather_peers(m), El = m->par.El;
	size_t h = (size_t)m->lc.h;
	int npeer = ep > etp ? ep : etp;
	size_t *own = xmalloc(4 * (size_t)npeer * sizeof(size_t)), *recv = own + npeer, *es = recv + npeer,
	       *er = es + npeer;
	size_t nep = 0; /* A's rows */
	for (int p = 0; p < ep; p++) {
		own[p] = (size_t)(M->sel_off[(p + 1) * El] - M->sel_off[p * El]) * h;
		recv[p] = 0;
		for (int e = 0; e < El; e++)
			recv[p] += (size_t)M->cnt[p * El + e] * h;
		nep += recv[p] / h;
	}
	for (int j = 0; j < etp; j++) {
		es[j] = 0;
		for (int e = 0; e < El; e++)
			es[j] += (size_t)M->ecnt[j * El + e] * h; /* peer j's A */
		er[j] = nep * h;                                /* this rank's A, from every peer */
	}
	struct dist_group *epg = m->par.ep, *etg = etp > 1 ? m->par.etp : NULL;
	if (to_experts) {
		alltoall(m, epg, in, own, S->xa, recv);
		if (etp == 1) {
			reorder(m, M->cnt, ep, El, out, S->xa, h, true);
		} else {
			reorder(m, M->cnt, ep, El, S->xb, S->xa, h, true);
			for (int j = 0; j < etp; j++) /* the same rows for every expert-TP peer */
				if (nep)
					m->k->copy(S->xa + (size_t)j * nep * h, S->xb, nep * h * sizeof(float));
			alltoall(m, etg, S->xa, er, S->xb, es);
			reorder(m, M->ecnt, etp, El, out, S->xb, h, true);
		}
	} else {
		const float *a = in; /* A: this rank's rows, whole */
		if (etp > 1) {
			reorder(m, M->ecnt, etp, El, S->xa, in, h, false);
			alltoall(m, etg, S->xa, es, S->xb, er);
			for (int j = 1; j < etp; j++) /* each peer's share of this rank's rows */
				if (nep)
					m->k->add(S->xb, S->xb, S->xb + (size_t)j * nep * h, nep * h);
			round_half(m, S->xb, nep * h); /* a sum in the half type, as the reduce-scatter's */
			a = S->xb;
		}
		reorder(m, M->cnt, ep, El, S->xa, a, h, false);
		alltoall(m, epg, S->xa, recv, out, own);
	}
	free(own);
}
