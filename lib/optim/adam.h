/*
 * adam.h - Megatron's "adam" optimizer (AdamW: Adam with decoupled weight
 * decay) over a parameter registry, with Megatron's parameter groups (no
 * weight decay for biases and 1-D tensors, from the registry's flags), the
 * global gradient L2 norm and clipping (spec/training-args.md section 3).
 * The state tensors (exp_avg, exp_avg_sq) share the registry's layout, so
 * checkpoints store them per parameter name.
 */
#ifndef MEGAC_OPTIM_ADAM_H
#define MEGAC_OPTIM_ADAM_H

#include <stdint.h>

#include "kernels/ops.h"
#include "model/params.h"
#include "tensor/mem.h"

struct adam {
	const struct kops *k;
	struct mem_pool *mem;
	struct param_registry *reg;
	float *exp_avg, *exp_avg_sq; /* [reg->total] */
	int64_t step;                /* successful steps taken (torch's state['step']) */
	float beta1, beta2, eps;
};

void adam_init(struct adam *o, struct param_registry *reg, const struct kops *k, struct mem_pool *mem,
	       float beta1, float beta2, float eps);
void adam_free(struct adam *o);
/* L2 norm of all gradients (each tensor once, tied ones included once). */
double adam_grad_norm(const struct adam *o);
/* Megatron's clip: if clip > 0 and clip/(norm+1e-6) < 1, scale every grad by it. */
void adam_clip(struct adam *o, double norm, double clip);
/* One step with learning rate lr and weight decay wd (times each group's multiplier). */
void adam_step(struct adam *o, double lr, double wd);
/* L2 norm of the parameters (--log-params-norm). */
double adam_params_norm(const struct adam *o);

#endif
