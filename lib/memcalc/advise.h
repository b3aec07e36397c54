/*
 * advise.h - report_memory --advise: every layout of --world-size ranks
 * (tensor, pipeline, virtual pipeline, context and data-parallel sizes,
 * with mixture-of-experts layers the expert-parallel sizes that divide the
 * experts, micro-batch size, sequence parallelism, recompute, distributed
 * optimizer) for the model and global batch of the command line goes
 * through train's own checks and megac's memory prediction (megac_mem.c,
 * for the backend of --device); those whose largest stage fits in
 * --gpu-memory are ranked by the step-time model (step_model.h). A layout
 * train would refuse is never listed.
 */
#ifndef MEGAC_MEMCALC_ADVISE_H
#define MEGAC_MEMCALC_ADVISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/args.h"
#include "base/sbuf.h"
#include "memcalc/step_model.h"
#include "model/gpt_config.h"

struct advise_opts {
	double gpu_bytes;
	struct step_rates rates;
	int64_t top; /* layouts to print; 0: all that fit */
};

struct advise_layout {
	int tp, pp, vpp, cp, dp;
	int ep;         /* expert-model-parallel size; 0: not a mixture-of-experts model */
	int64_t mbs;
	int64_t mb_group; /* --microbatch-group-size-per-virtual-pipeline-stage, the command line's */
	bool sp, dist_opt;
	enum gpt_recompute recompute;
	double peak;    /* bytes, the largest stage's predicted peak */
	int peak_stage;
	struct step_estimate est;
	int64_t order;  /* the step time in millionths of the fastest one's: the sort key */
	int64_t seq;    /* place in the enumeration: the last tie-break */
};

struct advise_result {
	struct advise_layout *fit; /* fastest first */
	size_t nfit;
	size_t considered, refused, too_big;
	struct advise_layout smallest; /* the smallest peak of those too big */
	char refusal[512];             /* one of the refusals, as train words it */
};

/* The --advise flags; error() and -1 when one is missing or out of range. */
int advise_opts_from_args(struct advise_opts *o, const struct args *a);

/* Try every layout; vocab is the unpadded vocabulary. -1 after error() when
 * the command line itself cannot be planned (MLA, MTP: train has no
 * prediction for them yet; no --global-batch-size). */
int advise_run(const struct args *a, int64_t vocab, const struct advise_opts *o, struct advise_result *r);
void advise_result_free(struct advise_result *r);

/* The command line's flags with the layout's in place of its own. */
void advise_layout_args(const struct args *base, const struct advise_layout *l, struct args *out);

/* The layout as train's flags: "--tensor-model-parallel-size 2 ...". */
void advise_layout_flags(const struct advise_layout *l, struct sbuf *out);

/* The whole --advise output (table or --json) on stdout; -1 after error()
 * when nothing fits. */
int advise_command(const struct args *a, int64_t vocab);

#endif
