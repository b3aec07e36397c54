/*
 * cuda_ops.h - the CUDA backend of the op table (issue 8;
 * lib/kernels/cuda/ops.cu, compiled whenever nvcc exists). Same semantics
 * as kops_cpu(): every pointer argument of an op is device memory, alloc
 * returns device memory, to_host/to_device copy across. Ops the GPU does not
 * have yet are NULL in the table (callers check before use; the parity
 * tests list them).
 */
#ifndef MEGAC_KERNELS_CUDA_OPS_H
#define MEGAC_KERNELS_CUDA_OPS_H

#include "kernels/ops.h"

/* The table, or NULL when this build has no CUDA backend or no GPU is
 * usable (the reason, when there is one, goes to *why). It works on the
 * current device: choose it (cudaSetDevice) before the first call. The ops
 * run on one host thread at a time. MEGAC_CUDA_SYNC=1 in the environment
 * synchronises after every kernel, so a failing kernel is named. */
const struct kops *kops_cuda(const char **why);

#endif
