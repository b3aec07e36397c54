/*
 * megac_mem.h - megac's own memory prediction for report_memory:
 * not a formula but train's allocation plan itself. For each pipeline stage
 * the real set-up code (gpt_init_pipe with that stage's layers, schedule and
 * activation slots, adam_init with the rank's optimizer shard, the
 * distributed optimizer's scratch) runs against an op table that only
 * counts bytes, so the prediction is what train's memory pool will hold,
 * byte for byte, and "max allocated" in train's memory line. Every tensor
 * buffer train takes comes from that set-up (docs/report-memory.md).
 */
#ifndef MEGAC_MEMCALC_MEGAC_MEM_H
#define MEGAC_MEMCALC_MEGAC_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "base/args.h"

struct megac_stage_mem {
	int pp_stage;
	int first_rank;         /* world rank of the stage's tensor/context/data-parallel rank 0 */
	size_t params;          /* the model's parameters of this rank (its TP slices of its stage):
				 * fp32, or 16-bit with --bf16/--fp16 */
	size_t grads;           /* fp32 gradients (Megatron's main grads) */
	size_t half_weights;    /* 0: no second copy of the weights is kept any more */
	size_t optimizer;       /* Adam's two moments of this rank's shard, and with --bf16/--fp16
				 * the shard's main weights, in their formats (16-bit with the
				 * precision-aware optimizer), less what --optimizer-cpu-offload
				 * keeps on the host */
	size_t optimizer_scratch; /* the distributed optimizer's reduce-scatter target */
	size_t activations;     /* activation slots, recompute scratch, workspaces, ring buffers */
	size_t peak;            /* all of it: train's "max allocated" */
};

/* One entry per pipeline stage (tensor-parallel rank 0; the other TP ranks
 * hold the same sizes, data-parallel rank 0's shard is the largest). vocab:
 * the unpadded vocabulary. *out is malloc'd. -1 after error() when train
 * would refuse the flags. */
int megac_mem_predict(const struct args *a, int64_t vocab, struct megac_stage_mem **out, int *n);

#endif
