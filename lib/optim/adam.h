/*
 * adam.h - Megatron's "adam" optimizer (AdamW: Adam with decoupled weight
 * decay) over a parameter registry, with Megatron's parameter groups (no
 * weight decay for biases and 1-D tensors, from the registry's flags), the
 * gradient L2 norm and clipping (megatron/core/optimizer/__init__.py,
 * optimizer.py and clip_grads.py).
 *
 * The optimizer owns the elements [lo, hi) of the registry's flat buffers:
 * all of them normally, one data-parallel shard with the distributed
 * optimizer (--use-distributed-optimizer, ZeRO-1: each rank keeps Adam's
 * state for its shard only and updates only it). Its state tensors hold
 * hi - lo elements, element e belonging to registry element lo + e.
 * Norms are this shard's sums of squares; the caller adds the shards up.
 */
#ifndef MEGAC_OPTIM_ADAM_H
#define MEGAC_OPTIM_ADAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "tensor/params.h"
#include "tensor/mem.h"

struct adam {
	const struct kops *k;
	struct mem_pool *mem;
	struct param_registry *reg;
	size_t lo, hi;               /* the registry elements this optimizer updates */
	float *exp_avg, *exp_avg_sq; /* [hi - lo] */
	int64_t step;                /* successful steps taken (torch's state['step']) */
	float beta1, beta2, eps;
	struct kops_seg *step_segs;  /* [lo, hi) in runs of one weight-decay flag */
	/* the same split in two for adam_step_lrs: the embedding and output
	 * layer (PARAM_EMB_OR_OUT) and the rest */
	struct kops_seg *emb_segs, *rest_segs;
	int nemb_segs, nrest_segs;
	struct kops_seg *norm_segs[2]; /* the norms' tensors: [0] without the replicated ones, [1] all */
	int nstep_segs, nnorm_segs[2];
};

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       float beta1, float beta2, float eps, size_t lo, size_t hi);
void adam_free(struct adam *o);
/* Sum of squares of the gradients in [lo, hi) (each tensor once, tied ones
 * once); replicated = false leaves out the tensors tensor parallelism does not
 * split (all TP ranks but 0 pass false, so the TP sum counts them once). */
double adam_grad_sumsq(const struct adam *o, bool replicated);
/* The zero elements among the same gradients (Megatron's count_zeros, for
 * --log-num-zeros-in-grad); read through host memory in chunks. */
double adam_grad_zeros(const struct adam *o, bool replicated);
/* The same for the parameters (--log-params-norm). */
double adam_params_sumsq(const struct adam *o, bool replicated);
/* Megatron's clip of the grads in [lo, hi): if clip > 0 and clip/(norm+1e-6) < 1,
 * scale them by it. norm is the global norm. */
void adam_clip(struct adam *o, double norm, double clip);
/* One step over [lo, hi) with learning rate lr and weight decay wd (times
 * each tensor's multiplier). */
void adam_step(struct adam *o, double lr, double wd);
/* The same with Megatron's --decoupled-lr: emb_lr for the embedding and
 * output layer, lr for the rest (one update when they are equal). */
void adam_step_lrs(struct adam *o, double lr, double emb_lr, double wd);

#endif
