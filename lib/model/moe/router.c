/*
 * router.c - see router.h. Scores, weights and losses are computed
 * in double and stored as float (Megatron computes the routing in fp32).
 *
 * Choosing the experts (Megatron's topk_routing_with_score_function): by
 * the logits (softmax after the top-k; the same order as the scores), by
 * the softmax over all experts (pre-softmax), or by the sigmoid scores plus
 * the expert bias. With groups, the experts form `groups` equal runs; a
 * group scores the sum of its top k/group_topk choosing scores, the
 * group_topk best groups are kept, and the top-k come from those.
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
	free(r->lb_cnt);
	free(r->aux_idx);
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
	r->aux_idx = xmalloc(nk * sizeof(*r->aux_idx));
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

/* The k largest of s[0..E) where allow[e] (NULL: all), ties to the lower
 * index. */
static void topk_d(const double *s, const uint8_t *allow, int E, int k, int32_t *idx)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int e = 0; e < E; e++) {
			bool taken = allow && !allow[e];
			for (int i = 0; i < j && !taken; i++)
				taken = idx[i] == e;
			if (!taken && (best < 0 || s[e] > s[best]))
				best = e;
		}
		idx[j] = best;
	}
}

static double sigmoid(double x);

/* One token's choice with a bias or groups: the choosing scores (see the
 * top), then the group limit. w: scratch of 2E + 2 doubles + E bytes. */
static void choose(const struct moe_router_cfg *c, const float *z, const float *bias, int32_t *idx, double *w)
{
	int E = c->E, k = c->k;
	double *s = w, *gs = w + E;
	uint8_t *allow = (uint8_t *)(gs + E + 2);
	if (c->sigmoid) {
		for (int e = 0; e < E; e++) /* fp32 scores plus the fp32 bias, as Megatron adds them */
			s[e] = (double)((float)sigmoid(z[e]) + (bias ? bias[e] : 0.0f));
	} else if (c->pre_softmax) {
		double mx = z[0], sum = 0;
		for (int e = 1; e < E; e++)
			mx = z[e] > mx ? z[e] : mx;
		for (int e = 0; e < E; e++)
			sum += s[e] = exp((double)z[e] - mx);
		for (int e = 0; e < E; e++)
			s[e] /= sum;
	} else {
		for (int e = 0; e < E; e++)
			s[e] = z[e];
	}
	if (c->group_topk <= 0) {
		topk_d(s, NULL, E, k, idx);
		return;
	}
	int G = c->groups, per = E / G, kk = k / c->group_topk;
	for (int g = 0; g < G; g++) {
		topk_d(s + (size_t)g * per, NULL, per, kk, idx); /* idx as scratch: it is written last */
		gs[g] = 0;
		for (int j = 0; j < kk; j++)
			gs[g] += s[(size_t)g * per + idx[j]];
	}
	topk_d(gs, NULL, G, c->group_topk, idx);
	memset(allow, 0, (size_t)E);
	for (int j = 0; j < c->group_topk; j++)
		memset(allow + (size_t)idx[j] * per, 1, (size_t)per);
	topk_d(s, allow, E, k, idx);
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
	double mx = z[idx[0]];
	for (int s = 1; s < k; s++) /* the largest chosen logit (with groups not always the first) */
		mx = z[idx[s]] > mx ? z[idx[s]] : mx;
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
		double sum = 0;
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
 * micro-batch, or one sample for seq_aux_loss): P[e] = the sum of their
 * scores for e. */
static void group_scores(const struct moe_router_cfg *c, const float *z, int t0, int t1, double *P, double *q)
{
	for (int e = 0; e < c->E; e++)
		P[e] = 0;
	for (int t = t0; t < t1; t++) {
		aux_scores(c, z + (size_t)t * c->E, q);
		for (int e = 0; e < c->E; e++)
			P[e] += q[e];
	}
}

static bool lb_on(const struct moe_router_cfg *c)
{
	return c->lb != MOE_LB_NONE && c->aux_coeff != 0;
}

/* The groups' slot counts (this rank's tokens) into r->lb_cnt. */
static void lb_counts(struct moe_route *r, const struct moe_router_cfg *c, int N, int seq_len)
{
	r->lb_groups = 0;
	if (!lb_on(c) || N <= 0)
		return;
	int G = c->lb == MOE_LB_SEQ_AUX && seq_len > 0 ? seq_len : N, E = c->E, k = c->k;
	r->lb_groups = N / G;
	size_t n = (size_t)r->lb_groups * E;
	if ((size_t)r->lb_cap < n) {
		free(r->lb_cnt);
		r->lb_cnt = xmalloc(n * sizeof(*r->lb_cnt));
		r->lb_cap = (int)n;
	}
	memset(r->lb_cnt, 0, n * sizeof(*r->lb_cnt));
	for (int t = 0; t < N; t++)
		for (int s = 0; s < k; s++)
			r->lb_cnt[(size_t)(t / G) * E + r->aux_idx[(size_t)t * k + s]] += 1;
}

void moe_route_lb(struct moe_route *r, const struct moe_router_cfg *c, const float *z)
{
	int N = r->N, E = c->E, k = c->k, cp = c->cp > 1 ? c->cp : 1;
	r->aux = 0;
	if (r->lb_groups <= 0)
		return;
	int G = N / r->lb_groups;
	double Gg = (double)G * cp, *P = xmalloc(2 * (size_t)E * sizeof(double)), *q = P + E;
	for (int g = 0; g < r->lb_groups; g++) {
		group_scores(c, z, g * G, (g + 1) * G, P, q);
		double s = 0;
		for (int e = 0; e < E; e++)
			s += P[e] * r->lb_cnt[(size_t)g * E + e];
		r->aux += s * E / ((double)k * Gg * Gg);
	}
	r->aux /= r->lb_groups;
	free(P);
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
	moe_route_forward_biased(r, c, z, NULL, N, seq_len);
}

void moe_route_forward_biased(struct moe_route *r, const struct moe_router_cfg *c, const float *z,
			      const float *bias, int N, int seq_len)
{
	int E = c->E, k = c->k;
	if (k < 1 || k > E || N < 0 || (seq_len > 0 && N % seq_len))
		BUG("moe route: %d tokens, %d experts, top-%d, sequences of %d", N, E, k, seq_len);
	if (c->group_topk > 0 && (c->groups < 1 || E % c->groups || c->group_topk > c->groups ||
				  k < c->group_topk || k > c->group_topk * (E / c->groups)))
		BUG("moe route: top-%d of %d experts in the best %d of %d groups", k, E, c->group_topk, c->groups);
	route_alloc(r, N > 0 ? N : 1, E, k);
	r->N = N;
	bool plain = c->group_topk <= 0 && !(bias && c->sigmoid); /* Megatron applies the bias to sigmoid only */
	double *p = xmalloc(((size_t)k + 2 * (size_t)E + 2) * sizeof(double)), *w = p + k;
	double zsq = 0;
	for (int t = 0; t < N; t++) {
		const float *zt = z + (size_t)t * E;
		int32_t *it = r->idx + (size_t)t * k;
		topk(zt, E, k, r->aux_idx + (size_t)t * k);
		if (plain)
			memcpy(it, r->aux_idx + (size_t)t * k, (size_t)k * sizeof(*it));
		else
			choose(c, zt, c->sigmoid ? bias : NULL, it, w);
		slot_probs(c, zt, it, p);
		for (int s = 0; s < k; s++) {
			if (c->scale > 0) /* --moe-router-topk-scaling-factor, after any normalisation */
				p[s] = (double)((float)p[s] * (float)c->scale);
			r->probs[(size_t)t * k + s] = (float)p[s];
			r->kept[(size_t)t * k + s] = 1;
		}
		double l = lse_of(zt, E);
		zsq += l * l;
	}
	r->zsq = N ? zsq / N : 0;

	/* the load-balancing loss over the micro-batch or per sample (under
	 * context parallelism once the caller has summed the counts) */
	r->aux = 0;
	lb_counts(r, c, N, seq_len);
	if (c->cp <= 1)
		moe_route_lb(r, c, z);

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
	double *p = xmalloc(((size_t)2 * k + 2 * (size_t)E) * sizeof(double)), *dp = p + k, *g = dp + k;
	double *q = g + E, cp = c->cp > 1 ? c->cp : 1;
	memset(dz, 0, (size_t)N * E * sizeof(float));
	double *acc = xcalloc((size_t)E, sizeof(double));
	for (int t = 0; t < N; t++) {
		const float *zt = z + (size_t)t * E;
		const int32_t *it = r->idx + (size_t)t * k;
		for (int e = 0; e < E; e++)
			acc[e] = 0;
		slot_probs(c, zt, it, p);
		for (int s = 0; s < k; s++) /* the weights are the scores times the scaling factor */
			dp[s] = r->kept[(size_t)t * k + s] ? dprobs[(size_t)t * k + s] * (c->scale > 0 ? c->scale : 1.0) : 0.0;
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
		/* z-loss: coeff · mean_t lse_t² over the cp·N tokens, injected with `scale` */
		if (c->z_coeff > 0) {
			double l = lse_of(zt, E);
			for (int e = 0; e < E; e++)
				acc[e] += scale * c->z_coeff * 2.0 * l * exp((double)zt[e] - l) / (N * cp);
		}
		for (int e = 0; e < E; e++)
			dz[(size_t)t * E + e] = (float)acc[e];
	}
	/* the load-balancing loss: d/dscore[t][e] = coeff E c_e / (k G^2) (/ groups),
	 * G the group's tokens on all cp ranks, c_e as lb_cnt holds them */
	if (r->lb_groups > 0) {
		int G = N / r->lb_groups;
		double groups = (double)r->lb_groups, Gg = (double)G * cp;
		for (int t0 = 0; t0 < N; t0 += G) {
			const double *cnt = r->lb_cnt + (size_t)(t0 / G) * E;
			for (int e = 0; e < E; e++)
				g[e] = scale * c->aux_coeff * E * cnt[e] / ((double)k * Gg * Gg * groups);
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

void moe_update_expert_bias(float *bias, const double *cnt, int E, double rate)
{
	/* fp32 as Megatron: the counts are whole numbers, the mean their fp32 sum over E */
	float sum = 0;
	for (int e = 0; e < E; e++)
		sum += (float)cnt[e];
	float mean = sum / (float)E, step = (float)rate;
	for (int e = 0; e < E; e++) {
		float off = mean - (float)cnt[e];
		float sgn = off > 0 ? 1.0f : off < 0 ? -1.0f : 0.0f;
		bias[e] = bias[e] + sgn * step;
	}
}

/* splitmix64: a counter-based generator, so a value depends only on its key */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void moe_random_logits(float *z, int N, int E, uint64_t seed)
{
	for (size_t i = 0; i < (size_t)N * E; i++) {
		uint64_t a = mix64(seed ^ mix64(2 * i)), b = mix64(seed ^ mix64(2 * i + 1));
		double u1 = ((double)(a >> 11) + 1.0) / 9007199254740993.0, u2 = (double)(b >> 11) / 9007199254740992.0;
		z[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
	}
}
