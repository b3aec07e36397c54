/*
 * cuda_ops.h - the CUDA backend of the op table (docs/cuda.md;
 * lib/kernels/cuda/ops.cu, compiled whenever nvcc exists). Same semantics
 * as kops_cpu(): every pointer argument of an op is device memory, alloc
 * returns device memory, to_host/to_device copy across. Ops the GPU does not
 * have yet are NULL in the table (callers check before use; the parity
 * tests list them).
 */
#ifndef MEGAC_KERNELS_CUDA_OPS_H
#define MEGAC_KERNELS_CUDA_OPS_H

#include "ops.h"

/* The table, or NULL when this build has no CUDA backend or no GPU is
 * usable (the reason, when there is one, goes to *why). It works on the
 * current device: choose it (cudaSetDevice) before the first call. The ops
 * run on one host thread at a time. MEGAC_CUDA_SYNC=1 in the environment
 * synchronises after every kernel, so a failing kernel is named. */
const struct kops *kops_cuda(const char **why);

/* The table for the --bf16/--fp16 modes (lib/kernels/cuda/gemm.cu):
 * kops_cuda() except
 *  - linear_forward/linear_backward, which convert their fp32 operands to
 *    bf16 (KOPS_ROUND_BF16) or fp16 (KOPS_ROUND_FP16), round to nearest
 *    even, and multiply them on the tensor cores with fp32 accumulation into
 *    the same fp32 outputs. The model rounds every input of a linear layer
 *    to that format already, so the conversion is exact and the result is
 *    the fp32 GEMM's up to the order of the sums;
 *  - attention_block_forward/backward at head dims 64 and 128 (attn_tc.cu):
 *    flash attention on the tensor cores, q, k, v, dO and the probabilities
 *    rounded to the format (about 2^-9 relative in bf16, see attn_tc.cuh).
 * Named "cuda-bf16" / "cuda-fp16"; NULL (reason in *why) when kops_cuda() is. */
const struct kops *kops_cuda_half(enum kops_round kind, const char **why);

/* What the backend took from the device so far: cudaMalloc calls and their
 * bytes (buffers are taken at set-up: a count that grows during training
 * means an allocation in the hot loop), cudaFree calls, and the scratch
 * buffer's size. */
struct kops_cuda_stats {
	unsigned long mallocs, frees;
	size_t bytes, scratch_bytes;
	size_t held; /* what the backend holds beside the buffers alloc returned: every scratch
		      * buffer (the ones it outgrew are kept too) and cuBLASLt's workspace */
	unsigned long fp8_lt_gemms; /* fp8_gemm calls that ran on cuBLASLt's FP8 matmul (the
				     * others dequantized their operands first) */
};
void kops_cuda_get_stats(struct kops_cuda_stats *st);

#endif
