/*
 * router.c - see router.h. Scores, weights and losses are computed
 * in double and stored as float (Megatron computes the routing in fp32).
 */
#include "model/moe/router.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

int moe_route_capacity_total(const struct moe_router_cfg *c, int N)
{
	int shards = c->shards > 1 ? c->shards : 1;
	return moe_route_capacity(c, N / shards) * shards;
}

int moe_route_capacity(const struct moe_router_cfg *c, int N)
{
	if (c->capacity <= 0)
		return N;
	double cap = ceil(((double)N * c->k / c->E) * c->capacity);
	return cap < N ? (int)cap : N;
}

void moe_route_free(struct moe_route *r)
{
	free(r->idx);
	free(r->probs);
	free(r->kept);
	free(r->row_tok);
	free(r->row_slot);
	free(r->exp_off);
	free(r->tok_rowptr);
	free(r->tok_rows);
	free(r->row_w);
	memset(r, 0, sizeof(*r));
}

static void route_alloc(struct moe_route *r, int N, int E, int k)
{
	if (r->cap_N >= N && r->E == E && r->k == k)
		return;
	moe_route_free(r);
	size_t nk = (size_t)N * k;
	r->idx = xmalloc(nk * sizeof(*r->idx));
	r->probs = xmalloc(nk * sizeof(*r->probs));
	r->kept = xmalloc(nk);
	r->row_tok = xmalloc(nk * sizeof(*r->row_tok));
	r->row_slot = xmalloc(nk * sizeof(*r->row_slot));
	r->exp_off = xmalloc(((size_t)E + 1) * sizeof(*r->exp_off));
	r->tok_rowptr = xmalloc(((size_t)N + 1) * sizeof(*r->tok_rowptr));
	r->tok_rows = xmalloc(nk * sizeof(*r->tok_rows));
	r->row_w = xmalloc(nk * sizeof(*r->row_w));
	r->cap_N = N;
	r->E = E;
	r->k = k;
}

/* The k largest of z[0..E) by value, ties to the lower index: the order of
 * every score function here (softmax and sigmoid are increasing in z). */
static void topk(const float *z, int E, int k, int32_t *idx)
{
	for (int s = 0; s < k; s++) {
		int best = -1;
		for (int e = 0; e < E; e++) {
			bool taken = false;
			for (int j = 0; j < s; j++)
				taken |= idx[j] == e;
			if (!taken && (best < 0 || z[e] > z[best]))
				best = e;
		}
		idx[s] = best;
	}
}

static double lse_of(const float *z, int E)
{
	double mx = z[0], sum = 0;
	for (int e = 1; e < E; e++)
		mx = z[e] > mx ? z[e] : mx;
	for (int e = 0; e < E; e++)
		sum += exp((double)z[e] - mx);
	return mx + log(sum);
}

static double sigmoid(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

/* The weights of one token's k slots (before any dropping). */
static void slot_probs(const struct moe_router_cfg *c, const float *z, const int32_t *idx, double *p)
{
	int k = c->k;
	if (c->sigmoid) {
		double sum = 0;
		for (int s = 0; s < k; s++)
			sum += p[s] = sigmoid(z[idx[s]]);
		if (k > 1)
			for (int s = 0; s < k; s++)
				p[s] /= sum + 1e-20;
	} else if (c->pre_softmax) {
		double l = lse_of(z, c->E);
		for (int s = 0; s < k; s++)
			p[s] = exp((double)z[idx[s]] - l);
	} else {
		double mx = z[idx[0]], sum = 0; /* idx[0] holds the largest */
		for (int s = 0; s < k; s++)
			sum += p[s] = exp((double)z[idx[s]] - mx);
		for (int s = 0; s < k; s++)
			p[s] /= sum;
	}
}

/* The auxiliary loss's scores of one token: softmax over all E, or for
 * sigmoid routing sigma / sum sigma. */
static void aux_scores(const struct moe_router_cfg *c, const float *z, double *q)
{
	int E = c->E;
	double sum = 0;
	if (c->sigmoid) {
		for (int e = 0; e < E; e++)
			sum += q[e] = sigmoid(z[e]);
	} else {
		double mx = z[0];
		for (int e = 1; e < E; e++)
			mx = z[e] > mx ? z[e] : mx;
		for (int e = 0; e < E; e++)
			sum += q[e] = exp((double)z[e] - mx);
	}
	for (int e = 0; e < E; e++)
		q[e] /= sum;
}

/* Tokens [t0, t1) form one group of the load-balancing loss (the whole
 * micro-batch, or one sample for seq_aux_loss): c[e] = their slots on e,
 * P[e] = the sum of their scores for e. */
static void group_stats(const struct moe_router_cfg *c, const struct moe_route *r, const float *z, int t0, int t1,
			double *cnt, double *P, double *q)
{
	for (int e = 0; e < c->E; e++)
		cnt[e] = P[e] = 0;
	for (int t = t0; t < t1; t++) {
		for (int s = 0; s < c->k; s++)
			cnt[r->idx[(size_t)t * c->k + s]] += 1;
		aux_scores(c, z + (size_t)t * c->E, q);
		for (int e = 0; e < c->E; e++)
			P[e] += q[e];
	}
}

struct cand {
	int t, s;
	int order; /* the token's place in Megatron's sequence-major order (position, then sample) */
	float p;
};

static int by_prob(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->order - y->order; /* ties: the earlier token */
}

static int by_order(const void *a, const void *b)
{
	return ((const struct cand *)a)->order - ((const struct cand *)b)->order;
}

void moe_route_forward(struct moe_route *r, const struct moe_router_cfg *c, const float *z, int N, int seq_len)
{
	int E = c->E, k = c->k;
	if (k < 1 || k > E || N < 0 || (seq_len > 0 && N % seq_len))
		BUG("moe route: %d tokens, %d experts, top-%d, sequences of %d", N, E, k, seq_len);
	route_alloc(r, N > 0 ? N : 1, E, k);
	r->N = N;
	double *p = xmalloc(((size_t)k + 3 * (size_t)E) * sizeof(double)), *cnt = p + k, *P = cnt + E, *q = P + E;
	double zsq = 0;
	for (int t = 0; t < N; t++) {
		const float *zt = z + (size_t)t * E;
		int32_t *it = r->idx + (size_t)t * k;
		topk(zt, E, k, it);
		slot_probs(c, zt, it, p);
		for (int s = 0; s < k; s++) {
			r->probs[(size_t)t * k + s] = (float)p[s];
			r->kept[(size_t)t * k + s] = 1;
		}
		double l = lse_of(zt, E);
		zsq += l * l;
	}
	r->zsq = N ? zsq / N : 0;

	/* the load-balancing loss over the micro-batch or per sample */
	r->aux = 0;
	if (c->lb != MOE_LB_NONE && c->aux_coeff != 0 && N > 0) {
		int G = c->lb == MOE_LB_SEQ_AUX ? seq_len : N;
		for (int t0 = 0; t0 < N; t0 += G) {
			group_stats(c, r, z, t0, t0 + G, cnt, P, q);
			double s = 0;
			for (int e = 0; e < E; e++)
				s += P[e] * cnt[e];
			r->aux += s * E / ((double)k * G * G);
		}
		r->aux /= N / G;
	}

	/* capacity: ceil((N k / E) cf) tokens per expert, the rest dropped; the
	 * earliest are the earliest positions (Megatron's tokens are [s, b]).
	 * With sequence shards, each shard's tokens (positions
	 * [g S/shards, (g+1) S/shards) of every sample) on their own, with the
	 * capacity of N/shards tokens, as each TP rank's router does. */
	int S = seq_len > 0 ? seq_len : (N > 0 ? N : 1);
	int shards = c->shards > 1 ? c->shards : 1;
	if (S % shards || N % S)
		BUG("routing %d tokens of sequences of %d in %d shards", N, S, shards);
	r->cap = moe_route_capacity(c, N / shards);
	if (r->cap < N / shards) {
		struct cand *cd = xmalloc(((size_t)N + 1) * sizeof(*cd));
		for (int eg = 0; eg < E * shards; eg++) {
			int e = eg / shards, g = eg % shards; /* each expert, in each shard */
			int n = 0;
			for (int t = 0; t < N; t++)
				for (int s = 0; s < k; s++)
					if (r->idx[(size_t)t * k + s] == e && (t % S) / (S / shards) == g)
						cd[n++] = (struct cand){ t, s, (t % S) * (N / S) + t / S,
									 r->probs[(size_t)t * k + s] };
			if (n <= r->cap)
				continue;
			qsort(cd, (size_t)n, sizeof(*cd), c->drop_position ? by_order : by_prob);
			for (int i = r->cap; i < n; i++) {
				size_t o = (size_t)cd[i].t * k + cd[i].s;
				r->kept[o] = 0;
				r->probs[o] = 0;
			}
		}
		free(cd);
	}

	/* rows: expert-major, tokens ascending */
	int32_t *slot_row = xmalloc(((size_t)N * k + 1) * sizeof(int32_t));
	int R = 0;
	for (int e = 0; e < E; e++) {
		r->exp_off[e] = R;
		for (int t = 0; t < N; t++)
			for (int s = 0; s < k; s++) {
				size_t o = (size_t)t * k + s;
				if (r->idx[o] == e && r->kept[o]) {
					r->row_tok[R] = t;
					r->row_slot[R] = s;
					r->row_w[R] = r->probs[o];
					slot_row[o] = R++;
				}
			}
	}
	r->exp_off[E] = R;
	r->R = R;
	int n = 0;
	for (int t = 0; t < N; t++) {
		r->tok_rowptr[t] = n;
		for (int s = 0; s < k; s++)
			if (r->kept[(size_t)t * k + s])
				r->tok_rows[n++] = slot_row[(size_t)t * k + s];
	}
	r->tok_rowptr[N] = n;
	free(slot_row);
	free(p);
}

void moe_route_backward(const struct moe_route *r, const struct moe_router_cfg *c, const float *z,
			const float *dprobs, int seq_len, double scale, float *dz)
{
	int N = r->N, E = c->E, k = c->k;
	double *p = xmalloc(((size_t)2 * k + 4 * (size_t)E) * sizeof(double)), *dp = p + k, *g = dp + k;
	double *cnt = g + E, *P = cnt + E, *q = P + E;
	memset(dz, 0, (size_t)N * E * sizeof(float));
	double *acc = xcalloc((size_t)E, sizeof(double));
	for (int t = 0; t < N; t++) {
		const float *zt = z + (size_t)t * E;
		const int32_t *it = r->idx + (size_t)t * k;
		for (int e = 0; e < E; e++)
			acc[e] = 0;
		slot_probs(c, zt, it, p);
		for (int s = 0; s < k; s++)
			dp[s] = r->kept[(size_t)t * k + s] ? dprobs[(size_t)t * k + s] : 0.0;
		if (c->sigmoid) {
			double sum = 0, dot = 0, sg[64];
			for (int s = 0; s < k; s++)
				sum += sg[s] = sigmoid(zt[it[s]]);
			sum += 1e-20;
			for (int s = 0; s < k; s++)
				dot += dp[s] * sg[s];
			for (int s = 0; s < k; s++) {
				double ds = k > 1 ? dp[s] / sum - dot / (sum * sum) : dp[s];
				acc[it[s]] += ds * sg[s] * (1 - sg[s]);
			}
		} else if (c->pre_softmax) {
			/* probs are softmax(z) at the chosen columns */
			double dot = 0;
			for (int e = 0; e < E; e++)
				g[e] = 0;
			for (int s = 0; s < k; s++)
				g[it[s]] = dp[s];
			double l = lse_of(zt, E);
			for (int e = 0; e < E; e++)
				dot += exp((double)zt[e] - l) * g[e];
			for (int e = 0; e < E; e++)
				acc[e] += exp((double)zt[e] - l) * (g[e] - dot);
		} else {
			double dot = 0;
			for (int s = 0; s < k; s++)
				dot += p[s] * dp[s];
			for (int s = 0; s < k; s++)
				acc[it[s]] += p[s] * (dp[s] - dot);
		}
		/* z-loss: coeff · mean_t lse_t², injected with `scale` */
		if (c->z_coeff > 0) {
			double l = lse_of(zt, E);
			for (int e = 0; e < E; e++)
				acc[e] += scale * c->z_coeff * 2.0 * l * exp((double)zt[e] - l) / N;
		}
		for (int e = 0; e < E; e++)
			dz[(size_t)t * E + e] = (float)acc[e];
	}
	/* the load-balancing loss: d/dscore[t][e] = coeff E c_e / (k G^2) (/ groups) */
	if (c->lb != MOE_LB_NONE && c->aux_coeff != 0 && N > 0) {
		int G = c->lb == MOE_LB_SEQ_AUX ? seq_len : N;
		double groups = (double)(N / G);
		for (int t0 = 0; t0 < N; t0 += G) {
			group_stats(c, r, z, t0, t0 + G, cnt, P, q);
			for (int e = 0; e < E; e++)
				g[e] = scale * c->aux_coeff * E * cnt[e] / ((double)k * G * G * groups);
			for (int t = t0; t < t0 + G; t++) {
				const float *zt = z + (size_t)t * E;
				double dot = 0;
				if (c->sigmoid) {
					double sum = 0;
					for (int e = 0; e < E; e++)
						sum += q[e] = sigmoid(zt[e]);
					for (int e = 0; e < E; e++)
						dot += g[e] * q[e];
					for (int e = 0; e < E; e++) {
						double dsig = g[e] / sum - dot / (sum * sum);
						dz[(size_t)t * E + e] += (float)(dsig * q[e] * (1 - q[e]));
					}
				} else {
					aux_scores(c, zt, q);
					for (int e = 0; e < E; e++)
						dot += g[e] * q[e];
					for (int e = 0; e < E; e++)
						dz[(size_t)t * E + e] += (float)(q[e] * (g[e] - dot));
				}
			}
		}
	}
	free(acc);
	free(p);
}
