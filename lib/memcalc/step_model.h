/*
 * step_model.h - the estimated time of one training iteration of a layout,
 * by which report_memory --advise ranks the layouts that fit
 * (docs/report-memory.md, "The step-time model"). Three terms:
 *
 *   compute  Megatron's FLOPs of the iteration (gpt_flops_per_iteration)
 *            plus what recompute repeats, for the busiest pipeline stage,
 *            shared by its tensor, context and data-parallel ranks, over an
 *            assumed rate;
 *   bubble   the pipeline's idle time, compute x (p - 1) / (v x m) for p
 *            stages, v virtual stages per rank and m micro-batches;
 *   comm     the bytes world rank 0 sends per iteration in each group,
 *            exactly as train --log-comm counts them (docs/parallel.md, "All
 *            groups at once"), over the bandwidth of that group's links
 *            (NVLink inside a node, the network across nodes), plus a latency
 *            per message; nothing is assumed to overlap with compute. The
 *            expert-parallel token exchange depends on the routing: it is
 *            taken as balanced (every expert gets the same rows).
 *
 * It is a model for ranking, not a promise: rates and bandwidths are
 * parameters, and the documented simplifications (no overlap, balanced
 * stages but for the output layer, rank 0's volumes) apply to every layout
 * alike.
 */
#ifndef MEGAC_MEMCALC_STEP_MODEL_H
#define MEGAC_MEMCALC_STEP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/gpt_config.h"

/* The groups in --log-comm order; the data-parallel group is named
 * "data-parallel with context-parallel" when context parallelism is on.
 * The expert groups carry bytes with mixture-of-experts layers only. */
enum { SM_TP, SM_PP, SM_EMB, SM_CP, SM_DP, SM_EP, SM_EDP, SM_ETP, SM_NGROUPS };

struct step_layout {
	int tp, pp, vpp, cp, dp; /* vpp 1: not interleaved */
	int ep;                  /* expert-model-parallel size (1: none) */
	int etp;                 /* expert-tensor-parallel size (0: tp) */
	int64_t mbs, gbs;
	bool sp, dist_opt;
	int64_t rank0_params;    /* parameters held by world rank 0 (its stage, its TP slices) */
	int64_t rank0_expert_params; /* of them, the experts' reduced over expert data parallelism
				      * (the experts apart only: expert parallelism or expert TP
				      * other than TP; else 0) */
};

struct step_rates {
	double tflops;           /* sustained dense TFLOP/s per GPU */
	double intra_GBs;        /* GB/s a GPU sends to a GPU of its node */
	double inter_GBs;        /* GB/s a GPU sends to another node */
	double latency_us;       /* per message (one step of a ring, one send) */
	int gpus_per_node;
};

struct step_estimate {
	int64_t bytes[SM_NGROUPS];  /* sent by world rank 0 per iteration */
	double messages[SM_NGROUPS];
	bool inter_node[SM_NGROUPS];
	double flops;               /* per iteration on one rank of the busiest stage */
	double compute_s, bubble_s, comm_s, total_s;
};

/* The group name as --log-comm prints it. */
const char *step_group_name(int group, int cp);

/* Fills e for model c (whose recompute field is the layout's) on layout l. */
void step_estimate(const struct gpt_config *c, const struct step_layout *l, const struct step_rates *r,
		   struct step_estimate *e);

#endif
