/*
 * mem.h - the accounting allocator for tensors. Every large buffer megac
 * holds (parameters, gradients, optimizer state, activations, scratch) is
 * taken through a mem_pool, so "allocated" and "max allocated" in the memory
 * log line are every byte of tensor memory this rank holds, on whichever
 * backend the pool's op table allocates from.
 */
#ifndef MEGAC_TENSOR_MEM_H
#define MEGAC_TENSOR_MEM_H

#include <stddef.h>

#include "kernels/ops.h"

struct mem_pool {
	const struct kops *k;
	size_t cur;   /* bytes held now */
	size_t peak;  /* most bytes ever held at once */
	size_t count; /* live allocations */
};

void mem_pool_init(struct mem_pool *m, const struct kops *k);
/* Zero-filled backend memory of `bytes` bytes (dies when out of memory). */
void *mem_alloc(struct mem_pool *m, size_t bytes);
float *mem_alloc_f32(struct mem_pool *m, size_t n);
/* Free a buffer taken from this pool with its size; NULL is fine. */
void mem_free(struct mem_pool *m, void *p, size_t bytes);

#endif
