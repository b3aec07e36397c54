/*
 * cuda_ws.h - report_memory --device cuda: the device memory the CUDA
 * backend takes beside train's memory pool, predicted from the shapes of one
 * training iteration of a pipeline stage (docs/report-memory.md, "--device").
 *
 * Two buffers, both counted in train's "max allocated" beside its pool:
 *   - cuBLASLt's workspace, 32 MiB, taken at the first GEMM (gemm.cu,
 *     LT_WORKSPACE);
 *   - the scratch buffer (ops.cu, scratch_alloc): one device buffer that an
 *     op holds while it runs, for the bf16/fp16 copies of a GEMM's operands
 *     (gemm.cu), the tensor-core attention's half copies of q, k, v and dO
 *     (attn_tc.cu), attention's row sums (attn.cu), the norms' and the
 *     bias gradients' partial sums and the optimizer's piece tables (ops.cu).
 *     It grows to max(request, 2 x its size) when a request does not fit,
 *     and keeps every outgrown buffer until the process ends, so what it
 *     holds depends on the order of the requests: replayed here in train's
 *     order (the first micro-batch's forward through the stage's chunks, the
 *     output layer, the backward, then the optimizer; later micro-batches
 *     repeat the same requests and grow nothing).
 *
 * The request sizes mirror the kernels' scratch_alloc calls; runs on the
 * emulated device in tests/prog/report_memory.sh hold them to what train
 * takes ("GPU memory: ... scratch" at the end of a run). A routed expert's
 * rows depend on the routing: they are taken as the balanced share here.
 */
#ifndef MEGAC_MEMCALC_CUDA_WS_H
#define MEGAC_MEMCALC_CUDA_WS_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/ops.h"
#include "model/gpt.h"

struct cuda_ws {
	size_t lt_workspace;  /* cuBLASLt's workspace */
	size_t scratch_final; /* the scratch buffer after the first iteration */
	size_t scratch_total; /* it and the outgrown buffers it keeps */
	size_t largest;       /* the largest single request */
};

/* Start: nothing taken yet. */
void cuda_ws_init(struct cuda_ws *w);

/* The requests of one training micro-batch through model m (set up by
 * gpt_init_pipe for one pipeline stage with the GPU's flash attention),
 * forward and backward; half: the bf16/fp16 op table (kops_cuda_half),
 * else the fp32 one (kops_cuda). */
void cuda_ws_model(struct cuda_ws *w, const struct gpt_model *m, bool half);

/* The request of a whole-model op over segs (sumsq_segs when sums, with
 * its partial sums in front of the piece table; adamw_segs otherwise). */
void cuda_ws_segs(struct cuda_ws *w, const struct kops_seg *segs, int nsegs, bool sums);

#endif
