/*
 * test_moe_router.c - the MoE router on the host against the worked
 * examples of docs/moe-spec.md (computed there with Megatron's own routing
 * functions): weights for post-softmax, pre-softmax and sigmoid scoring,
 * the load-balancing and z losses, dropping under both policies, the row
 * order; DeepSeek-V3's options (group-limited routing, the expert bias, the
 * top-k scaling factor, the bias update, force-load-balancing's logits) on
 * examples where each changes the outcome, with the expected values
 * computed here from their formulas; and backward against central finite
 * differences of the whole objective (the weights' share plus the injected
 * losses); context parallelism: the CP ranks' shares of the losses and of
 * dz add up to the one-rank ones.
 */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/moe/router.h"

/* Example R: 4 tokens, 4 experts, top-2 */
static const float R_Z[16] = { 1, 2, 0, -1, .5f, 2.5f, 1.5f, 0, 3, 0, 2, 1, 2.5f, 0, .5f, 1 };

static bool near(double a, double b, double tol)
{
	return fabs(a - b) <= tol;
}

static void test_example_weights(void)
{
	struct moe_router_cfg c = { .E = 4, .k = 2, .lb = MOE_LB_AUX, .aux_coeff = 0.01 };
	struct moe_route r = { 0 };
	moe_route_forward(&r, &c, R_Z, 4, 4);
	int want_idx[8] = { 1, 0, 1, 2, 0, 2, 0, 3 };
	double post[8] = { .731059, .268941, .731059, .268941, .731059, .268941, .817574, .182426 };
	for (int i = 0; i < 8; i++) {
		CHECK_INT(r.idx[i], want_idx[i]);
		CHECK(near(r.probs[i], post[i], 1e-6));
	}
	CHECK(near(r.aux, 1.166809, 1e-6));
	CHECK(near(r.zsq, 8.690995, 1e-6));
	/* rows: expert-major, tokens ascending: [0,2,3 | 0,1 | 1,2 | 3] */
	int want_tok[8] = { 0, 2, 3, 0, 1, 1, 2, 3 };
	CHECK_INT(r.R, 8);
	for (int i = 0; i < 8; i++)
		CHECK_INT(r.row_tok[i], want_tok[i]);
	CHECK_INT(r.exp_off[1], 3);
	CHECK_INT(r.exp_off[2], 5);
	CHECK_INT(r.exp_off[3], 7);
	c.pre_softmax = true;
	moe_route_forward(&r, &c, R_Z, 4, 4);
	double pre[8] = { .643914, .236883, .630795, .232057, .643914, .236883, .694179, .154892 };
	for (int i = 0; i < 8; i++)
		CHECK(near(r.probs[i], pre[i], 1e-6));
	c.pre_softmax = false;
	c.sigmoid = true;
	moe_route_forward(&r, &c, R_Z, 4, 4);
	double sig[8] = { .546449, .453551, .530593, .469407, .519575, .480425, .558326, .441674 };
	for (int i = 0; i < 8; i++)
		CHECK(near(r.probs[i], sig[i], 1e-6));
	/* seq_aux_loss with sequences {t0, t2} and {t1, t3}: here a sample is
	 * consecutive tokens, so the tokens go in the order t0 t2 t1 t3 */
	float z2[16];
	int order[4] = { 0, 2, 1, 3 };
	for (int i = 0; i < 4; i++)
		memcpy(z2 + 4 * i, R_Z + 4 * order[i], 4 * sizeof(float));
	c.sigmoid = false;
	c.lb = MOE_LB_SEQ_AUX;
	moe_route_forward(&r, &c, z2, 4, 2);
	CHECK(near(r.aux, 1.190399, 1e-6));
	/* a zero coefficient: no loss (Megatron logs 0) */
	c.aux_coeff = 0;
	moe_route_forward(&r, &c, z2, 4, 2);
	CHECK(r.aux == 0);
	moe_route_free(&r);
}

static void test_example_dropping(void)
{
	struct moe_router_cfg c = { .E = 4, .k = 2, .capacity = 1.0 };
	struct moe_route r = { 0 };
	moe_route_forward(&r, &c, R_Z, 4, 4);
	CHECK_INT(r.cap, 2);
	/* e0 gets t0 (.2689), t2 (.7311), t3 (.8176): "probs" drops t0's slot */
	CHECK(!r.kept[1] && r.probs[1] == 0);
	CHECK(r.kept[0] && r.kept[4] && r.kept[6]);
	CHECK_INT(r.R, 7);
	CHECK_INT(r.tok_rowptr[1] - r.tok_rowptr[0], 1); /* t0 keeps only e1 */
	c.drop_position = true;
	moe_route_forward(&r, &c, R_Z, 4, 4);
	CHECK(r.kept[1] && !r.kept[6]); /* "position": the earliest two, t0 and t2 */
	CHECK_INT(r.R, 7);
	/* "position" keeps the earliest in Megatron's [S, B] order: 2 samples of 2
	 * tokens, t1 = (b0, s1) and t2 = (b1, s0) both on e0 with room for one:
	 * t2 (position 0) stays, t1 (position 1) is dropped */
	struct moe_router_cfg c2 = { .E = 2, .k = 1, .sigmoid = true, .capacity = 0.5, .drop_position = true };
	float z2[8] = { -1, 1, 1, -1, 0.5f, -1, -1, 1 }; /* t0 -> e1, t1 -> e0, t2 -> e0, t3 -> e1 */
	moe_route_forward(&r, &c2, z2, 4, 2);
	CHECK_INT(r.cap, 1);
	CHECK(r.kept[2] && !r.kept[1]);
	CHECK(r.kept[0] && !r.kept[3]);
	/* numbers from docs/moe-spec.md: 4 tokens, top-2, 4 experts, cf 1.1 -> 3; 4096 x 2 / 8 x 1.25 -> 1280 */
	c.capacity = 1.1;
	moe_route_forward(&r, &c, R_Z, 4, 4);
	CHECK_INT(r.cap, 3);
	moe_route_free(&r);
}

/* The objective backward differentiates: sum over kept slots of w * prob,
 * plus scale * (aux_coeff * aux + z_coeff * zsq). */
static double objective(struct moe_route *r, const struct moe_router_cfg *c, const float *z, int N, int S,
			const float *w, double scale, const float *bias)
{
	moe_route_forward_biased(r, c, z, bias, N, S);
	double o = 0;
	for (int i = 0; i < N * c->k; i++)
		o += (double)w[i] * r->probs[i];
	return o + scale * (c->aux_coeff * r->aux + (c->z_coeff > 0 ? c->z_coeff * r->zsq : 0));
}

static void gradcheck_biased(struct moe_router_cfg c, const char *what, const float *bias)
{
	enum { N = 12, S = 4 };
	int E = c.E;
	float z[N * 8], w[N * 8], dz[N * 8];
	uint64_t s = 88172645463325252ull;
	for (int i = 0; i < N * E; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		z[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 4 - 2);
	}
	for (int i = 0; i < N * c.k; i++)
		w[i] = 0.3f + 0.1f * (float)(i % 7);
	struct moe_route r = { 0 };
	double scale = 0.7;
	moe_route_forward_biased(&r, &c, z, bias, N, S);
	moe_route_backward(&r, &c, z, w, S, scale, dz);
	double worst = 0, gmax = 0;
	for (int i = 0; i < N * E; i++) {
		float z0 = z[i], eps = 1e-3f;
		z[i] = z0 + eps;
		double lp = objective(&r, &c, z, N, S, w, scale, bias);
		z[i] = z0 - eps;
		double lm = objective(&r, &c, z, N, S, w, scale, bias);
		z[i] = z0;
		double fd = (lp - lm) / (2.0 * eps);
		worst = fmax(worst, fabs(fd - dz[i]));
		gmax = fmax(gmax, fabs(fd));
	}
	if (worst > 1e-3 * gmax)
		printf("#   %s: worst gradient error %.3g of %.3g\n", what, worst, gmax);
	CHECK(worst <= 1e-3 * gmax);
	CHECK(gmax > 0);
	moe_route_free(&r);
}

static void gradcheck(struct moe_router_cfg c, const char *what)
{
	gradcheck_biased(c, what, NULL);
}

static void test_backward(void)
{
	struct moe_router_cfg c = { .E = 8, .k = 2, .lb = MOE_LB_AUX, .aux_coeff = 0.1, .z_coeff = 0.01 };
	gradcheck(c, "softmax, aux, z");
	c.pre_softmax = true;
	gradcheck(c, "pre-softmax");
	c.pre_softmax = false;
	c.sigmoid = true;
	gradcheck(c, "sigmoid");
	c.k = 1;
	gradcheck(c, "sigmoid top-1");
	c.sigmoid = false;
	c.k = 3;
	c.lb = MOE_LB_SEQ_AUX;
	gradcheck(c, "seq_aux_loss, top-3");
	c.capacity = 1.0; /* drops slots: their weights leave the objective */
	gradcheck(c, "capacity 1.0");
	/* DeepSeek-V3's: groups, a scaling factor, an expert bias (the aux
	 * loss's own top-k differs from the chosen experts) */
	static const float bias[8] = { 0.3f, -0.2f, 0.1f, 0, -0.1f, 0.2f, 0, 0.05f };
	struct moe_router_cfg d = { .E = 8, .k = 2, .sigmoid = true, .lb = MOE_LB_SEQ_AUX, .aux_coeff = 0.1,
				    .groups = 4, .group_topk = 2, .scale = 2.5, .expert_bias = true };
	gradcheck_biased(d, "sigmoid, 2 of 4 groups, bias, scale 2.5, seq_aux_loss", bias);
	d.sigmoid = false;
	d.expert_bias = false;
	d.lb = MOE_LB_AUX;
	gradcheck(d, "softmax, 2 of 4 groups, scale 2.5");
	d.pre_softmax = true;
	d.group_topk = 1;
	gradcheck(d, "pre-softmax, 1 of 4 groups, scale 2.5");
}

/* Capacity per sequence shard (TP with SP: Megatron's router sees each
 * rank's positions [g S/t, (g+1) S/t) of every sample on their own): routing
 * all tokens with shards = 2 keeps exactly what routing each shard's tokens
 * alone, as a separate call, keeps, under both policies. */
static void test_shard_capacity(void)
{
	enum { B = 3, S = 8, E = 4, K = 2, N = B * S, SH = 2, NS = N / SH };
	float z[N * E], zs[NS * E];
	uint32_t x = 12345;
	for (int i = 0; i < N * E; i++) {
		x = x * 1664525u + 1013904223u;
		z[i] = (float)((x >> 8) % 1000) / 250.0f - 2.0f;
	}
	for (int pos = 0; pos < 2; pos++) {
		struct moe_router_cfg c = { .E = E, .k = K, .lb = MOE_LB_NONE, .capacity = 1.0, .drop_position = pos,
					    .shards = SH };
		struct moe_route all = { 0 }, one = { 0 };
		moe_route_forward(&all, &c, z, N, S);
		c.shards = 1;
		int dropped = 0, same = 1;
		for (int g = 0; g < SH; g++) {
			for (int b = 0; b < B; b++) /* shard g's tokens, [B, S/2] */
				for (int j = 0; j < S / SH; j++)
					for (int e = 0; e < E; e++)
						zs[(b * (S / SH) + j) * E + e] = z[(b * S + g * (S / SH) + j) * E + e];
			moe_route_forward(&one, &c, zs, NS, S / SH);
			for (int b = 0; b < B; b++)
				for (int j = 0; j < S / SH; j++)
					for (int sl = 0; sl < K; sl++) {
						size_t ta = (size_t)(b * S + g * (S / SH) + j) * K + sl;
						size_t to = (size_t)(b * (S / SH) + j) * K + sl;
						same &= all.idx[ta] == one.idx[to] && all.kept[ta] == one.kept[to];
						dropped += !all.kept[ta];
					}
		}
		CHECK(same);
		CHECK(dropped > 0); /* the case drops something, so it tests the grouping */
		CHECK_INT(all.cap, (int)ceil(NS * K / (double)E));
		moe_route_free(&all);
		moe_route_free(&one);
	}
}

/* Context parallelism (cp = 2, no capacity): rank r routes chunks r and
 * 3 - r of every sample (Megatron's load-balanced split, [B, S/2] local
 * tokens); with each load-balancing group's counts summed over the two
 * ranks, their losses add up to the one-rank loss and their dz rows are
 * the one-rank rows (weights, aux or seq_aux and the z-loss). */
static void test_cp_split(void)
{
	enum { B = 3, S = 8, E = 4, K = 2, N = B * S, CP = 2, T = S / CP, NL = N / CP, C = S / (2 * CP) };
	float z[N * E], zl[CP][NL * E], dprobs[N * K], dpl[CP][NL * K], dz[N * E], dzl[CP][NL * E];
	int glob[CP][NL]; /* local token -> one-rank token */
	uint32_t x = 777;
	for (int i = 0; i < N * E; i++) {
		x = x * 1664525u + 1013904223u;
		z[i] = (float)((x >> 8) % 1000) / 250.0f - 2.0f;
	}
	for (int i = 0; i < N * K; i++) {
		x = x * 1664525u + 1013904223u;
		dprobs[i] = (float)((x >> 8) % 1000) / 500.0f - 1.0f;
	}
	for (int r = 0; r < CP; r++)
		for (int b = 0; b < B; b++)
			for (int j = 0; j < T; j++) {
				int pos = j < C ? r * C + j : (2 * CP - 1 - r) * C + (j - C), t = b * T + j;
				glob[r][t] = b * S + pos;
				memcpy(zl[r] + t * E, z + glob[r][t] * E, E * sizeof(float));
				memcpy(dpl[r] + t * K, dprobs + glob[r][t] * K, K * sizeof(float));
			}
	for (int lb = MOE_LB_AUX; lb <= MOE_LB_SEQ_AUX; lb++) {
		struct moe_router_cfg c = { .E = E, .k = K, .sigmoid = lb == MOE_LB_SEQ_AUX, .lb = (enum moe_lb)lb,
					    .aux_coeff = 0.1, .z_coeff = 0.01 };
		struct moe_route all = { 0 }, part[CP] = { { 0 } };
		moe_route_forward(&all, &c, z, N, S);
		moe_route_backward(&all, &c, z, dprobs, S, 0.5, dz);
		c.cp = CP;
		for (int r = 0; r < CP; r++)
			moe_route_forward(&part[r], &c, zl[r], NL, T);
		CHECK_INT(part[0].lb_groups, all.lb_groups);
		for (int i = 0; i < part[0].lb_groups * E; i++) { /* the all-reduce over CP */
			double sum = part[0].lb_cnt[i] + part[1].lb_cnt[i];
			part[0].lb_cnt[i] = part[1].lb_cnt[i] = sum;
		}
		double aux = 0, worst = 0;
		for (int r = 0; r < CP; r++) {
			moe_route_lb(&part[r], &c, zl[r]);
			aux += part[r].aux;
			moe_route_backward(&part[r], &c, zl[r], dpl[r], T, 0.5, dzl[r]);
			for (int t = 0; t < NL; t++)
				for (int e = 0; e < E; e++)
					worst = fmax(worst, fabs((double)dzl[r][t * E + e] - dz[glob[r][t] * E + e]));
		}
		CHECK(all.aux > 0.1 && near(aux, all.aux, 1e-12 * all.aux));
		CHECK(worst < 1e-7);
		moe_route_free(&all);
		for (int r = 0; r < CP; r++)
			moe_route_free(&part[r]);
	}
}

/* DeepSeek-V3's routing on worked examples, each chosen so that the option
 * changes the choice: z = [3, -1, 2, 1.5], experts in 2 groups {0,1} {2,3} */
static void test_deepseek_routing(void)
{
	static const float z[4] = { 3, -1, 2, 1.5f };
	struct moe_router_cfg c = { .E = 4, .k = 2, .lb = MOE_LB_NONE };
	struct moe_route r = { 0 };
	/* plain top-2: {0, 2} */
	moe_route_forward(&r, &c, z, 1, 1);
	CHECK_INT(r.idx[0], 0);
	CHECK_INT(r.idx[1], 2);
	/* groups by the sum of their top-2 logits: {0,1} 2, {2,3} 3.5: experts 2, 3,
	 * weighted softmax([2, 1.5]) */
	c.groups = 2;
	c.group_topk = 1;
	moe_route_forward(&r, &c, z, 1, 1);
	CHECK_INT(r.idx[0], 2);
	CHECK_INT(r.idx[1], 3);
	CHECK(near(r.probs[0], 1 / (1 + exp(-0.5)), 1e-6));
	CHECK(near(r.probs[1], 1 / (1 + exp(0.5)), 1e-6));
	/* the aux loss counts the plain top-k */
	CHECK_INT(r.aux_idx[0], 0);
	CHECK_INT(r.aux_idx[1], 2);
	/* pre-softmax groups sum probabilities: e^3 + e^-1 > e^2 + e^1.5, experts 0, 1 */
	c.pre_softmax = true;
	moe_route_forward(&r, &c, z, 1, 1);
	double Z = exp(3) + exp(-1) + exp(2) + exp(1.5);
	CHECK_INT(r.idx[0], 0);
	CHECK_INT(r.idx[1], 1);
	CHECK(near(r.probs[0], exp(3) / Z, 1e-6));
	CHECK(near(r.probs[1], exp(-1) / Z, 1e-6));
	/* both groups: the plain top-2 again */
	c.group_topk = 2;
	moe_route_forward(&r, &c, z, 1, 1);
	CHECK_INT(r.idx[0], 0);
	CHECK_INT(r.idx[1], 2);
	/* sigmoid with an expert bias: it chooses, the unbiased scores weigh;
	 * then the scaling factor */
	static const float zs[4] = { 0, 0.1f, 0.2f, 0.3f };
	static const float bias[4] = { 0.5f, 0, 0, 0 };
	struct moe_router_cfg s = { .E = 4, .k = 2, .sigmoid = true, .lb = MOE_LB_AUX, .aux_coeff = 0.01,
				    .expert_bias = true };
	moe_route_forward_biased(&r, &s, zs, bias, 1, 1);
	double s0 = 0.5, s3 = 1 / (1 + exp(-0.3f));
	CHECK_INT(r.idx[0], 0);
	CHECK_INT(r.idx[1], 3);
	CHECK(near(r.probs[0], s0 / (s0 + s3), 1e-6));
	CHECK(near(r.probs[1], s3 / (s0 + s3), 1e-6));
	CHECK_INT(r.aux_idx[0], 3);
	CHECK_INT(r.aux_idx[1], 2);
	s.scale = 2.5;
	moe_route_forward_biased(&r, &s, zs, bias, 1, 1);
	CHECK(near(r.probs[0], 2.5 * s0 / (s0 + s3), 1e-6));
	CHECK(near(r.probs[1], 2.5 * s3 / (s0 + s3), 1e-6));
	/* no bias: the plain sigmoid top-2 {3, 2} */
	moe_route_forward_biased(&r, &s, zs, NULL, 1, 1);
	CHECK_INT(r.idx[0], 3);
	CHECK_INT(r.idx[1], 2);
	moe_route_free(&r);

	/* the update: sign(mean - count) * rate, mean 2 */
	float b[4] = { 0.25f, 0, 0, -0.125f };
	double cnt[4] = { 4, 2, 2, 0 };
	moe_update_expert_bias(b, cnt, 4, 1e-3);
	CHECK(b[0] == 0.25f - 1e-3f);
	CHECK(b[1] == 0 && b[2] == 0);
	CHECK(b[3] == -0.125f + 1e-3f);

	/* the random logits of force-load-balancing: a pure function of the key, about N(0, 1) */
	enum { M = 4096 };
	float *x = malloc(M * sizeof(float)), *y = malloc(M * sizeof(float));
	moe_random_logits(x, M / 8, 8, 42);
	moe_random_logits(y, M / 8, 8, 42);
	double m = 0, v = 0;
	for (int i = 0; i < M; i++)
		m += x[i] / M;
	for (int i = 0; i < M; i++)
		v += (x[i] - m) * (x[i] - m) / M;
	CHECK(memcmp(x, y, M * sizeof(float)) == 0);
	CHECK(fabs(m) < 0.1 && fabs(v - 1) < 0.1);
	moe_random_logits(y, M / 8, 8, 43);
	CHECK(memcmp(x, y, M * sizeof(float)) != 0);
	free(x);
	free(y);
}

int main(void)
{
	RUN(test_example_weights);
	RUN(test_example_dropping);
	RUN(test_backward);
	RUN(test_shard_capacity);
	RUN(test_cp_split);
	RUN(test_deepseek_routing);
	return test_summary();
}
