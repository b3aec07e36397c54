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
 *
 * Megatron's precision-aware optimizer (struct adam_options): the moments
 * and a 16-bit model's main weights may be stored in 16 bits (bf16, or fp16
 * with a scale per tensor, as Transformer Engine's FusedAdam), read and
 * written in the step's one pass (adamw_segs_lp): the arithmetic stays
 * fp32, the memory is 2 bytes per element per such state. The states go
 * in and out (checkpoints) as fp32 values (adam_get_state, adam_set_state).
 *
 * Optimizer offload (--optimizer-cpu-offload, Megatron's
 * HybridDeviceOptimizer): the state of the first tensors of [lo, hi), a
 * share of them by elements, lives in host memory and is stepped there by
 * the CPU backend: each step copies those gradients down and the updated
 * weights (16-bit, or the fp32 model's) up. Each part of the range is a
 * struct adam_place; the device's pool holds only the other part's state.
 */
#ifndef MEGAC_OPTIM_ADAM_H
#define MEGAC_OPTIM_ADAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "tensor/params.h"
#include "tensor/mem.h"

/* Adam's hyper-parameters and where and how it keeps its state. */
struct adam_options {
	float beta1, beta2, eps;
	/* the states' formats (Megatron's --main-params-dtype, --exp-avg-dtype,
	 * --exp-avg-sq-dtype; KOPS_F32 = 0 by default); main applies to a 16-bit
	 * model's main weights (an fp32 model's are its own weights) */
	enum kops_dtype main, exp_avg, exp_avg_sq;
	/* the share of [lo, hi), in whole tensors from the first until it is
	 * reached (Megatron's offload_fraction), whose state lives in host
	 * memory and is stepped there; 0: none */
	double offload;
};

/* The state of a run [lo, hi) of the optimizer's elements, where it lives. */
struct adam_place {
	const struct kops *k;       /* the backend that steps it: the optimizer's, or the CPU's (host) */
	bool host;                  /* offloaded: plain host memory, outside the pool */
	size_t lo, hi;              /* registry elements */
	/* [hi - lo] each, in its format; main is reg->data + lo for an fp32
	 * model on the device, else the place's own */
	void *main, *exp_avg, *exp_avg_sq;
	/* the step's segments, offsets relative to seg_base (0 on the device:
	 * registry offsets; lo on the host: offsets into grad), so element e of
	 * a segment is state element e - mv_base, mv_base = lo - seg_base; one
	 * per tensor piece with 16-bit states (their scales), else merged */
	size_t seg_base;
	struct kops_seg *step_segs;        /* all of [lo, hi) */
	struct kops_seg *emb_segs, *rest_segs; /* the embedding and output layer (PARAM_EMB_OR_OUT), the rest */
	int nstep_segs, nemb_segs, nrest_segs;
	float *emb_scale, *rest_scale;     /* fp16 states: 3 scales per segment of emb_segs, rest_segs (host) */
	struct kops_seg *main_segs[2];     /* the norms' tensors ([0] without the replicated ones), offsets - lo */
	int nmain_segs[2];
	float *grad;                       /* host: the step's gradients of [lo, hi), copied down */
	uint16_t *up16;                    /* host, 16-bit model: its updated weights of [lo, hi), to go up */
};

struct adam {
	const struct kops *k;
	struct mem_pool *mem;
	struct param_registry *reg;
	size_t lo, hi;               /* the registry elements this optimizer updates */
	struct adam_options opt;
	bool lp;                     /* a state in 16 bits: the step is adamw_segs_lp */
	/* [0]: [lo, cut) offloaded to the host; [1]: [cut, hi) on the device */
	struct adam_place place[2];
	/* the shard's gradients and 16-bit weights, element e being registry
	 * element lo + e: reg->grad + lo and the model's w16 + lo, or
	 * Megatron-FSDP's shards (adam_use_shards) */
	float *grad;                 /* [hi - lo] */
	uint16_t *w16;               /* [hi - lo] a 16-bit model's weights, NULL for fp32 */
	float *fsdp_main;            /* Megatron-FSDP level 3, fp32 model: the weights' shard (its main weights) */
	bool half_set;               /* adam_use_half or adam_keep_main was called */
	bool keep_main;              /* adam_keep_main: the model writes its weights from the main ones */
	enum kops_round half;        /* their format */
	int64_t step;                /* successful steps taken (torch's state['step']) */
	struct kops_seg *norm_segs[2]; /* the norms' tensors: [0] without the replicated ones, [1] all */
	int nnorm_segs[2];
};

/* The states, for adam_get_state and adam_set_state. */
enum adam_state { ADAM_EXP_AVG, ADAM_EXP_AVG_SQ, ADAM_MAIN };

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       const struct adam_options *opt, size_t lo, size_t hi);
void adam_free(struct adam *o);
/* Bytes of state the optimizer holds in the backend's memory (its pool), and
 * in host memory (offloaded): moments and owned main weights. */
size_t adam_device_bytes(const struct adam *o);
size_t adam_host_bytes(const struct adam *o);
/* A bf16/fp16 model: keep main weights for [lo, hi) (fp32, or opt.main),
 * and after each step write them rounded into w16 (the model's
 * [reg->total] weights). The main weights start as the model's (widened):
 * the caller sets the model first, or sets them with adam_set_state. */
void adam_use_half(struct adam *o, uint16_t *w16, enum kops_round kind);
/* A bf16 model that writes its weights from the main weights itself
 * (--fp8-param-gather: gpt_copy_main_to_model): fp32 main weights for [lo,
 * hi), all on the device, set with adam_set_state(ADAM_MAIN); a step
 * updates them and writes nothing else. adam_main_f32: them ([hi - lo]
 * floats, backend memory), NULL without adam_keep_main. */
void adam_keep_main(struct adam *o);
float *adam_main_f32(const struct adam *o);
/* Megatron-FSDP (train/fsdp.h): the gradients of [lo, hi) are the shard
 * grad[hi - lo]; with sharded weights a 16-bit model's are w16_shard[hi -
 * lo] (then adam_use_half after this, with w16 NULL) and an fp32 model's
 * (its main weights) main[hi - lo]. NULL: as set up. Right after adam_init. */
void adam_use_shards(struct adam *o, float *grad, float *main, uint16_t *w16_shard);
/* A state as fp32 values of the whole registry's host array: into
 * host[lo, hi) (widened, times the scales), or from it (rounded into its
 * format under fresh scales, as Transformer Engine loads one); a
 * checkpoint's save and load. ADAM_MAIN of an fp32 model is its weights:
 * set writes the offloaded part's copy only (the caller sets the model). */
void adam_get_state(const struct adam *o, enum adam_state which, float *host);
void adam_set_state(struct adam *o, enum adam_state which, const float *host);
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
