/*
 * mem.c - see mem.h. The pool only counts; the op table's alloc/free do the
 * work, so the CUDA backend gets the same accounting for free.
 */
#include "tensor/mem.h"

#include "base/error.h"

void mem_pool_init(struct mem_pool *m, const struct kops *k)
{
	m->k = k;
	m->cur = m->peak = m->count = 0;
}

void *mem_alloc(struct mem_pool *m, size_t bytes)
{
	if (!bytes)
		return NULL;
	void *p = m->k->alloc(bytes);
	m->cur += bytes;
	m->count++;
	if (m->cur > m->peak)
		m->peak = m->cur;
	return p;
}

float *mem_alloc_f32(struct mem_pool *m, size_t n)
{
	return mem_alloc(m, n * sizeof(float));
}

void mem_free(struct mem_pool *m, void *p, size_t bytes)
{
	if (!p)
		return;
	if (bytes > m->cur || !m->count)
		BUG("mem_free of %zu bytes with %zu held", bytes, m->cur);
	m->k->free(p);
	m->cur -= bytes;
	m->count--;
}
