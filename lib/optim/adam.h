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
 *
 * Main weights (Megatron's mixed precision): the update is made on fp32
 * main weights. For an fp32 model they are the model's own (reg->data);
 * for a bf16/fp16 model (adam_use_half) the optimizer keeps them for its
 * shard only, beside the moments, so with the distributed optimizer the
 * three fp32 states are all sharded (12 bytes per parameter over DP), and
 * after each step it writes them, rounded, into the model's 16-bit
 * weights of its shard (the caller gathers the other shards).
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
	/* the shard's buffers, element e being registry element lo + e */
	float *main;                 /* [hi - lo] fp32 main weights: reg->data + lo, owned (w16), or
				      * Megatron-FSDP's parameter shard (adam_use_shards) */
	float *grad;                 /* [hi - lo] gradients: reg->grad + lo, or FSDP's gradient shard */
	uint16_t *w16;               /* a 16-bit model's weights of the shard, NULL for fp32 */
	bool own_main;
	enum kops_round half;        /* their format */
	int64_t step;                /* successful steps taken (torch's state['step']) */
	float beta1, beta2, eps;
	struct kops_seg *step_segs;  /* [lo, hi) in runs of one weight-decay flag */
	/* the same split in two for adam_step_lrs: the embedding and output
	 * layer (PARAM_EMB_OR_OUT) and the rest */
	struct kops_seg *emb_segs, *rest_segs;
	int nemb_segs, nrest_segs;
	struct kops_seg *norm_segs[2]; /* the norms' tensors: [0] without the replicated ones, [1] all */
	struct kops_seg *main_segs[2]; /* the same, offsets relative to lo (for main) */
	int nstep_segs, nnorm_segs[2];
};

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       float beta1, float beta2, float eps, size_t lo, size_t hi);
void adam_free(struct adam *o);
/* A bf16/fp16 model: keep fp32 main weights for [lo, hi), and after each
 * step write them rounded into w16 (the model's [reg->total] weights).
 * The main weights start as the model's (widened): the caller sets the
 * model first, or sets them with adam_set_main. */
void adam_use_half(struct adam *o, uint16_t *w16, enum kops_round kind);
/* Megatron-FSDP: the gradients of [lo, hi) live in grad[hi - lo] (sharded
 * gradients), and with sharded parameters the fp32 model's weights of the
 * shard in main (NULL: as set up) and a 16-bit model's in w16_shard (NULL:
 * as set up). Before adam_use_half for a 16-bit model with sharded weights. */
void adam_use_shards(struct adam *o, float *grad, float *main, uint16_t *w16_shard);
/* The main weights from host fp32 values of the whole registry (host[lo, hi)
 * is taken), or into host[lo, hi); a checkpoint's load and save. */
void adam_set_main(struct adam *o, const float *host);
void adam_get_main(const struct adam *o, float *host);
/* Sum of squares of the gradients in [lo, hi) (each tensor once, tied ones
 * once); replicated = false leaves out the tensors tensor parallelism does not
 * split (all TP ranks but 0 pass false, so the TP sum counts them once). */
double adam_grad_sumsq(const struct adam *o, bool replicated);
/* The zero elements among the same gradients (Megatron's count_zeros, for
 * --log-num-zeros-in-grad); read through host memory in chunks. */
double adam_grad_zeros(const struct adam *o, bool replicated);
/* The same for the main weights (--log-params-norm). */
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
