/*
 * megac_mem.h - megac's own memory prediction for report_memory:
 * not a formula but train's allocation plan itself. For each pipeline stage
 * the real set-up code (gpt_init_pipe with that stage's layers, schedule and
 * activation slots, adam_init with the rank's optimizer shard and, for a
 * bf16/fp16 model, its fp32 main weights) runs against an op table that only
 * counts bytes, so the prediction is what train's memory pool will hold,
 * byte for byte, and "max allocated" in train's memory line. Every tensor
 * buffer train takes comes from that set-up (docs/report-memory.md).
 *
 * The counting table stands for the backend train would pick with
 * --device (report_memory's own default: cuda): the CPU's, or the CUDA
 * table's, whose flash-style attention keeps each row's log-sum-exp instead
 * of the [B, a, T, T] probabilities; on CUDA the backend's own workspace
 * beside the pool (cuda_ws.h) is added. No GPU is opened.
 */
#ifndef MEGAC_MEMCALC_MEGAC_MEM_H
#define MEGAC_MEMCALC_MEGAC_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/args.h"

struct kops;

struct megac_stage_mem {
	int pp_stage;
	int first_rank;         /* world rank of the stage's tensor/context/data-parallel rank 0 */
	size_t params;          /* the model's parameters of this rank (its TP slices of its stage):
				 * fp32, or 16-bit with --bf16/--fp16 */
	size_t grads;           /* fp32 gradients (Megatron's main grads) */
	size_t optimizer;       /* Adam's two moments of this rank's shard, and with --bf16/--fp16
				 * the shard's main weights, in their formats (16-bit with the
				 * precision-aware optimizer), less what --optimizer-cpu-offload
				 * keeps on the host */
	size_t activations;     /* activation slots, recompute scratch, workspaces, ring buffers,
				 * and the backend's workspace */
	size_t backend_ws;      /* of activations: the CUDA backend's scratch buffer and cuBLASLt
				 * workspace, outside train's pool (0 on the CPU) */
	size_t peak;            /* all of it, backend_ws too: train's "max allocated" */
	size_t expert_params;   /* of params: the experts' part, reduced over expert data
				 * parallelism (expert parallelism only; else 0) */
	size_t fp8_scratch;     /* of activations: the FP8 GEMM operands' codes and scales (--fp8-format) */
	size_t fp8_host;        /* host memory beside it: the delayed recipe's amax histories and scales */
};

/* The backend --device plans for: true for cuda (and auto: a planned job
 * runs on GPUs), false for cpu. */
bool megac_mem_cuda(const struct args *a);
/* The counting op tables report_memory builds models with (cuda: the CUDA
 * table's flash path): a model set up with one allocates nothing, and its
 * parameter registry says what each rank holds. */
const struct kops *megac_mem_plan_ops(bool cuda);

/* One entry per pipeline stage (tensor-parallel rank 0; the other TP ranks
 * hold the same sizes, data-parallel rank 0's shard is the largest). vocab:
 * the unpadded vocabulary. *out is malloc'd. -1 after error() when train
 * would refuse the flags. */
int megac_mem_predict(const struct args *a, int64_t vocab, struct megac_stage_mem **out, int *n);

#endif
