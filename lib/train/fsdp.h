/*
 * fsdp.h - Megatron-FSDP's sharded data parallelism (--use-megatron-fsdp
 * with --data-parallel-sharding-strategy), on megac's flat buffers: every
 * data-parallel rank keeps the dist_shard() [lo, hi) of them.
 *
 *   no_shard            (level 0) plain data parallelism: all-reduce, every rank
 *                       holds everything
 *   optim               (level 1) ZeRO-1, megac's distributed optimizer: the
 *                       optimizer state sharded, the gradients reduce-scattered
 *                       into the shard, the updated weights all-gathered
 *   optim_grads         (level 2) ZeRO-2: no whole gradient buffer either; the
 *                       model holds one unit's gradients at a time (the
 *                       embedding, a layer, the head) and after the unit's
 *                       backward, in every micro-batch, they are summed over
 *                       the group into the ranks' gradient shards
 *   optim_grads_params  (level 3) ZeRO-3: the weights sharded too; a kernel
 *                       gets a tensor all-gathered from the shards when it
 *                       needs it (forward, recompute and backward), nothing
 *                       is gathered after the step
 *
 * Per parameter, bf16 on DP ranks: level 1 holds 2 + 4 + 12/DP bytes,
 * level 2 2 + 16/DP, level 3 18/DP, plus the unit buffers and the fp32
 * views (one unit's gradients, one tensor's weights), which count as
 * workspace. Levels 2 and 3 sum each micro-batch's gradients over the group
 * before adding them up over micro-batches, Megatron-FSDP's order, so the
 * losses equal plain data parallelism's up to float rounding.
 *
 * --megatron-fsdp-grad-comm-dtype bf16 (or fp16) rounds each micro-batch's
 * unit gradients to it before the reduce-scatter and the sum after it, as
 * NCCL's symmetric kernels reduce 16-bit data (in fp32); --megatron-fsdp-
 * main-grads-dtype bf16 rounds the gradient shard after each micro-batch's
 * sum is added, as a 16-bit accumulation buffer would hold it. The buffers
 * and the traffic stay fp32 on this backend: the numerics are Megatron-
 * FSDP's, the memory and bytes are not halved. auto is fp32 for both
 * (Megatron's auto: the model's gradient type, bf16 in a bf16 run).
 *
 * Checkpoints stay megac's own, layout-independent: the optimizer's fp32
 * main weights and moments, gathered whole (train_ckpt.c).
 */
#ifndef MEGAC_TRAIN_FSDP_H
#define MEGAC_TRAIN_FSDP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/args.h"
#include "dist/dist.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "tensor/mem.h"

struct fsdp {
	int level;              /* 0..3 as above */
	struct dist_group *g;   /* where gradients are summed: data parallel (x context parallel) */
	struct gpt_model *m;
	struct mem_pool *mem;
	float *grad;            /* level >= 2: [hi - lo] the shard's gradients, summed over micro-batches */
	float *part;            /* level >= 2: one unit's part of a reduce-scatter, before it is added */
	size_t part_n;
	int comm_round, main_round; /* -1, or the enum kops_round of --megatron-fsdp-grad-comm-dtype and
				     * --megatron-fsdp-main-grads-dtype (levels 2 and 3) */
	bool check;             /* count non-finite gradients before they are summed */
	size_t nonfinite;       /* ... this iteration (Megatron's check_for_nan_in_grad) */
	struct gpt_shards hooks; /* what the model gets (gpt_setup.shards), level >= 2 */
};

/* The level the flags ask for (--use-megatron-fsdp, its strategy, and
 * --use-distributed-optimizer, which is level 1); error() and -1 for a
 * setting megac does not do, saying which. pp, ep: the layout's sizes. */
int fsdp_level(const struct args *a, int pp, int ep);

/* Before the model is set up: the hooks for gpt_setup.shards (NULL below
 * level 2), and the gradients' reduction and accumulation types from a
 * (fsdp_level has checked them). f must stay where it is while the model
 * lives. */
const struct gpt_shards *fsdp_prepare(struct fsdp *f, int level, struct dist_group *g, const struct args *a);
/* After: the gradient shard and the reduce-scatter part buffer. */
void fsdp_alloc(struct fsdp *f, struct gpt_model *m, struct mem_pool *mem);
void fsdp_free(struct fsdp *f);
/* Start of an iteration's backward passes: the gradient shard zero. */
void fsdp_begin(struct fsdp *f);

#endif
