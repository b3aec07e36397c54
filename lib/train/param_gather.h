/*
 * param_gather.h - the distributed optimizer's parameter all-gather
 * (Megatron's --overlap-param-gather): after the step each rank holds the
 * updated values of its shard only; every bucket of parameters is
 * gathered back to all ranks. With overlap the gathers are started right
 * after the step and each is waited for only when the next forward first
 * needs a parameter in it, so they run behind the forward of the layers
 * before; without, everything is gathered at once after the step.
 * What is gathered is what the layers use: the fp32 weights, or a
 * bf16/fp16 model's 16-bit ones (gpt.h), half the bytes, or with
 * --fp8-param-gather its store, where the FP8 layers' weights take one
 * byte a value (each rank's part of a bucket is a run of bytes there).
 */
#ifndef MEGAC_TRAIN_PARAM_GATHER_H
#define MEGAC_TRAIN_PARAM_GATHER_H

#include <stdbool.h>
#include <stddef.h>

#include "dist/dist.h"
#include "model/gpt.h"

struct param_gather {
	struct dist_group *g;
	struct gpt_model *m;
	bool overlap;
	size_t base, end;   /* the region gathered */
	int nb;
	struct pg_bucket {
		size_t lo, hi;
		bool pending;   /* gathered values not yet in place */
		struct dist_req req;
	} *b;
	int *bucket_of;     /* [reg.n], -1 outside the region */
	struct dist_bytemap map; /* --fp8-param-gather: the region's elements in the model's store */
};

/* Buckets of about bucket_elems elements of whole parameters, in registry
 * (forward) order, of the parameters in [base, end) of the flat buffers,
 * whose shards are that region's (the distributed optimizer's parts:
 * grad_sync.h). */
void param_gather_init(struct param_gather *s, struct gpt_model *m, struct dist_group *g, size_t base, size_t end,
		       size_t bucket_elems, bool overlap);
void param_gather_free(struct param_gather *s);
/* A zeroed param_gather (never initialised) has nothing to gather: every
 * call below returns at once (Megatron-FSDP's level 3 gathers per tensor). */
/* After the optimizer step: gather (and refresh the working copy) at once,
 * or with overlap start every bucket's gather. */
void param_gather_start(struct param_gather *s);
/* Parameter idx is about to be used: its bucket must be in place. */
void param_gather_need(struct param_gather *s, int idx);
/* Everything in place (before evaluation, checkpoints, norms, the backward). */
void param_gather_finish(struct param_gather *s);

#endif
