/*
 * router.h - the router of a mixture-of-experts layer (Megatron's
 * TopKRouter, docs/moe-spec.md sections 2-5), on the host: from the router
 * logits z[N, E] of N tokens, each token's top-k experts and their weights,
 * the token dropping of a capacity factor, the order of the rows the experts
 * see, and the auxiliary losses; backward turns the gradient of the weights,
 * plus the auxiliary losses' own, into the gradient of z.
 *
 * Why the host: E and k are small (8-64 experts, 1-8 slots), the choice is a
 * sort-like step per token, and the model copies z over and the plan back
 * (N·E and N·k values per layer), so both backends route identically.
 *
 * Rows: the experts run on rows in expert-major order, tokens ascending
 * within an expert (Megatron's permute). Row r belongs to token row_tok[r]
 * and slot row_slot[r] (its rank in the token's top-k); expert e owns rows
 * [exp_off[e], exp_off[e+1]). A token's rows, for the weighted sum back, are
 * tok_rows[tok_rowptr[t] .. tok_rowptr[t+1]), in slot order.
 *
 * Tokens are numbered as the model holds them, [B, S] batch-major; Megatron
 * holds them sequence-major [S, B]. The difference shows in two places,
 * both done Megatron's way: "position" dropping keeps the earliest tokens in
 * its order (the earliest positions, sample after sample within one), and
 * seq_aux_loss groups each sample's tokens. Ties in a top-k go to the lower
 * expert index, ties in dropping to the earlier token in Megatron's order
 * (torch.topk leaves them unspecified).
 */
#ifndef MEGAC_MODEL_MOE_ROUTER_H
#define MEGAC_MODEL_MOE_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

enum moe_lb { MOE_LB_NONE, MOE_LB_AUX, MOE_LB_SEQ_AUX };

struct moe_router_cfg {
	int E, k;
	bool sigmoid;      /* --moe-router-score-function sigmoid (else softmax) */
	bool pre_softmax;  /* --moe-router-pre-softmax */
	enum moe_lb lb;    /* --moe-router-load-balancing-type */
	double aux_coeff;  /* --moe-aux-loss-coeff (0: no aux loss) */
	double z_coeff;    /* --moe-z-loss-coeff (<= 0: none) */
	double capacity;   /* --moe-expert-capacity-factor (<= 0: dropless) */
	bool drop_position; /* --moe-token-drop-policy position (else probs) */
	int shards;        /* the capacity applies to each of this many equal sequence shards
			    * (tensor parallelism with SP: Megatron routes each rank's
			    * shard on its own); 0 or 1: to all tokens at once */
	int groups, group_topk; /* --moe-router-num-groups, --moe-router-group-topk: choose the
				 * group_topk best of `groups` equal groups of experts first
				 * (0: no group limit) */
	double scale;      /* --moe-router-topk-scaling-factor (0: none) */
	bool expert_bias;  /* --moe-router-enable-expert-bias (sigmoid): a per-expert bias added
			    * to the scores for choosing the experts only */
	double bias_rate;  /* --moe-router-bias-update-rate */
	bool force_balance; /* --moe-router-force-load-balancing: random N(0,1) logits */
	int cp;            /* context parallelism: the N tokens are this rank's share of sequences
			    * that cp ranks hold (moe_route_lb); 0 or 1: none */
};

struct moe_route {
	int N, E, k, R;          /* tokens, experts, slots, rows kept */
	int cap;                 /* tokens an expert takes (N when dropless) */
	int32_t *idx;            /* [N*k] expert of each slot, best first */
	int32_t *aux_idx;        /* [N*k] the plain top-k of the scores the load-balancing loss
				  * counts (Megatron's: no bias, no groups); idx when the same */
	float *probs;            /* [N*k] its weight (0 when dropped) */
	uint8_t *kept;           /* [N*k] */
	int32_t *row_tok, *row_slot; /* [R] */
	int32_t *exp_off;        /* [E+1] */
	int32_t *tok_rowptr;     /* [N+1] */
	int32_t *tok_rows;       /* [R] */
	float *row_w;            /* [R] the weight of each row */
	double aux;              /* the load-balancing loss / coeff (0 without one), Megatron's logged value
				  * (under context parallelism this rank's share: moe_route_lb) */
	double zsq;              /* mean over tokens of logsumexp(z)^2 (Megatron's logged z_loss) */
	double *lb_cnt;          /* [lb_groups][E] the load-balancing loss's slot counts per group
				  * (the micro-batch, or each sample with seq_aux_loss) */
	int lb_groups;           /* 0: no load-balancing loss */
	int cap_N;               /* allocation size in tokens */
	int lb_cap;              /* allocation size of lb_cnt in values */
};

void moe_route_free(struct moe_route *r);

/* The tokens an expert takes of N tokens: ceil(N·k/E · capacity), or N
 * (dropless, or a capacity that keeps them all). */
int moe_route_capacity(const struct moe_router_cfg *c, int N);
/* The most an expert takes of N tokens in all of c->shards shards. */
int moe_route_capacity_total(const struct moe_router_cfg *c, int N);

/* Route N tokens (z: host [N, E]); seq_len: tokens per sample (the groups
 * of seq_aux_loss; N is a multiple of it). Reuses r's memory when it is
 * large enough. With c->cp > 1 the load-balancing loss is left out (aux 0):
 * the caller sums lb_cnt over the context-parallel group and then calls
 * moe_route_lb. */
void moe_route_forward(struct moe_route *r, const struct moe_router_cfg *c, const float *z, int N, int seq_len);
/* The same with c->expert_bias: bias[E] (fp32, as Megatron keeps it) is
 * added to the sigmoid scores to choose the experts; the weights are the
 * unbiased scores of the chosen ones. bias NULL: none. */
void moe_route_forward_biased(struct moe_route *r, const struct moe_router_cfg *c, const float *z,
			      const float *bias, int N, int seq_len);

/*
 * The load-balancing loss r->aux from the counts in r->lb_cnt (this rank's,
 * or under context parallelism their sums over the cp ranks, as Megatron
 * reduces tokens_per_expert over TP x CP): sum_e P_e c_e E / (k G^2) per
 * group of G tokens (G = cp x this rank's share), with P_e this rank's
 * tokens' scores only, so that the cp ranks' values (and the gradients
 * moe_route_backward derives the same way) add up to the one-rank loss.
 */
void moe_route_lb(struct moe_route *r, const struct moe_router_cfg *c, const float *z);

/* Aux-loss-free load balancing (Megatron's get_updated_expert_bias), once
 * per iteration: cnt[E] the slots each expert kept over the global batch;
 * bias[e] += rate if e got fewer than the mean, -= rate if more, in fp32. */
void moe_update_expert_bias(float *bias, const double *cnt, int E, double rate);

/* Force-load-balancing's logits: N(0, 1) values keyed by (seed, token,
 * expert), the same on a recompute. */
void moe_random_logits(float *z, int N, int E, uint64_t seed);

/* dz[N, E] (overwritten) from dprobs[N*k] (the gradient of each slot's
 * weight; dropped slots' are ignored) plus `scale` times the gradient of the
 * attached losses (aux_coeff · aux and z_coeff · mean lse², as Megatron
 * injects them; under context parallelism this rank's share of the whole
 * sequences' losses: the mean over all cp·N tokens, lb_cnt as summed). */
void moe_route_backward(const struct moe_route *r, const struct moe_router_cfg *c, const float *z,
			const float *dprobs, int seq_len, double scale, float *dz);

#endif
