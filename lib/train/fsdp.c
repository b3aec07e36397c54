/*
 * fsdp.c - see fsdp.h. The model calls the two hooks; everything else is
 * the trainer's usual step on the optimizer's shard.
 */
#include "train/fsdp.h"

#include <string.h>

#include "base/error.h"

/* --megatron-fsdp-*-dtype: -1 (fp32, auto, none) or the rounding of bf16/fp16 */
static int round_kind(const char *v)
{
	if (v && !strcmp(v, "bf16"))
		return KOPS_ROUND_BF16;
	if (v && !strcmp(v, "fp16"))
		return KOPS_ROUND_FP16;
	return -1;
}

int fsdp_level(const struct args *a, int pp, int ep)
{
	static const char *const names[] = { "no_shard", "optim", "optim_grads", "optim_grads_params" };
	int level = a->use_distributed_optimizer ? 1 : 0;
	if (!a->use_megatron_fsdp) {
		if (a->data_parallel_sharding_strategy)
			return error("--data-parallel-sharding-strategy is Megatron-FSDP's; it needs --use-megatron-fsdp");
		return level;
	}
	const char *s = a->data_parallel_sharding_strategy ? a->data_parallel_sharding_strategy : "optim_grads_params";
	int want = -1;
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i]))
			want = i;
	if (want < 0)
		return error("--data-parallel-sharding-strategy '%s': expected no_shard, optim, optim_grads or "
			     "optim_grads_params", s);
	if (want > level)
		level = want;
	static const char *const flag[2] = { "--megatron-fsdp-grad-comm-dtype", "--megatron-fsdp-main-grads-dtype" };
	const char *v[2] = { a->megatron_fsdp_grad_comm_dtype, a->megatron_fsdp_main_grads_dtype };
	for (int i = 0; i < 2; i++)
		if (level < 2 && round_kind(v[i]) >= 0)
			return error("%s %s with --data-parallel-sharding-strategy %s: megac reduces 16-bit gradients "
				     "under optim_grads and optim_grads_params only",
				     flag[i], v[i], names[level]);
	if (level >= 2 && pp > 1)
		return error("--data-parallel-sharding-strategy %s with --pipeline-model-parallel-size %d: megac shards "
			     "gradients and weights on one pipeline stage only; use optim (the distributed optimizer) "
			     "with pipeline parallelism",
			     names[level], pp);
	if (level >= 2 && ep > 1)
		return error("--data-parallel-sharding-strategy %s with --expert-model-parallel-size %d: not in megac "
			     "yet; use optim (the distributed optimizer) with expert parallelism",
			     names[level], ep);
	if (level >= 2 && a->expert_tensor_parallel_size > 0 &&
	    a->expert_tensor_parallel_size != a->tensor_model_parallel_size)
		return error("--data-parallel-sharding-strategy %s with --expert-tensor-parallel-size %lld other than "
			     "--tensor-model-parallel-size %lld: not in megac yet; use optim (the distributed optimizer)",
			     names[level], (long long)a->expert_tensor_parallel_size,
			     (long long)a->tensor_model_parallel_size);
	if (level == 3 && a->optimizer_cpu_offload && !a->bf16 && !a->fp16)
		return error("--optimizer-cpu-offload with --data-parallel-sharding-strategy optim_grads_params on an "
			     "fp32 model: not in megac (its sharded weights are its main weights); use --bf16");
	return level;
}

/* Tensors [first, end) have this micro-batch's gradients in g: the norms
 * of a sequence-parallel model summed over TP first (each rank saw a
 * sequence shard), then all of it summed over the group, each rank keeping
 * its part, added to its gradient shard. */
static void reduce(void *ctx, int first, int end, float *g)
{
	struct fsdp *f = ctx;
	struct gpt_model *m = f->m;
	const struct param *p = m->reg.p;
	const struct kops *k = m->k;
	size_t a = p[first].offset, b = p[end - 1].offset + p[end - 1].numel;
	unsigned sum = m->par.tp_size < 2 ? 0 : PARAM_TP_SUM | (m->par.sp ? PARAM_SP : 0);
	for (int i = first; sum && i < end; i++)
		if (p[i].flags & sum)
			dist_allreduce_sum_f32(m->par.tp, g + (p[i].offset - a), p[i].numel);
	if (f->check)
		f->nonfinite += (size_t)k->nonfinite(g, b - a);
	size_t lo = m->shards.lo, hi = m->shards.hi;
	size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
	if (y > x && y - x > f->part_n)
		BUG("a unit's part of %zu elements in a buffer of %zu", y - x, f->part_n);
	if (f->comm_round >= 0) /* 16-bit gradients go into the reduction */
		k->round(g, g, b - a, (enum kops_round)f->comm_round);
	dist_reduce_scatter_part_f32(f->g, g, m->reg.total, a, b, f->part);
	if (y > x && f->comm_round >= 0) /* ... and come out of it */
		k->round(f->part, f->part, y - x, (enum kops_round)f->comm_round);
	if (y > x)
		k->add(f->grad + (x - lo), f->grad + (x - lo), f->part, y - x);
	if (y > x && f->main_round >= 0) /* the main gradients held in 16 bits */
		k->round(f->grad + (x - lo), f->grad + (x - lo), y - x, (enum kops_round)f->main_round);
}

/* Tensor idx whole, from every rank's shard of the weights. */
static void gather(void *ctx, int idx, void *dst)
{
	struct fsdp *f = ctx;
	struct gpt_model *m = f->m;
	const struct param *p = &m->reg.p[idx];
	const void *shard = m->w16 ? (const void *)m->w16 : (const void *)m->reg.data;
	dist_allgather_part(f->g, shard, m->w16 ? sizeof(uint16_t) : sizeof(float), m->reg.total, p->offset,
			    p->offset + p->numel, dst);
}

const struct gpt_shards *fsdp_prepare(struct fsdp *f, int level, struct dist_group *g, const struct args *a)
{
	memset(f, 0, sizeof(*f));
	f->level = level;
	f->g = g;
	f->comm_round = round_kind(a->megatron_fsdp_grad_comm_dtype);
	f->main_round = round_kind(a->megatron_fsdp_main_grads_dtype);
	if (level < 2)
		return NULL;
	f->hooks = (struct gpt_shards){ .level = level, .size = g->size, .rank = g->rank, .gather = gather,
					.reduce = reduce, .ctx = f };
	return &f->hooks;
}

void fsdp_alloc(struct fsdp *f, struct gpt_model *m, struct mem_pool *mem)
{
	f->m = m;
	f->mem = mem;
	if (f->level < 2)
		return;
	size_t n = m->shards.hi - m->shards.lo;
	f->grad = mem_alloc_f32(mem, n ? n : 1);
	/* a unit's part is at most a unit, and at most the shard */
	for (int u = 0; u < GPT_NUNITS; u++)
		f->part_n = m->unit_n[u] > f->part_n ? m->unit_n[u] : f->part_n;
	if (f->part_n > m->shards.hi - m->shards.lo)
		f->part_n = m->shards.hi - m->shards.lo;
	f->part = mem_alloc_f32(mem, f->part_n ? f->part_n : 1);
}

void fsdp_free(struct fsdp *f)
{
	if (f->grad) {
		size_t n = f->m->shards.hi - f->m->shards.lo;
		mem_free(f->mem, f->grad, (n ? n : 1) * sizeof(float));
		mem_free(f->mem, f->part, (f->part_n ? f->part_n : 1) * sizeof(float));
	}
	memset(f, 0, sizeof(*f));
}

void fsdp_begin(struct fsdp *f)
{
	f->nonfinite = 0;
	if (f->level >= 2)
		f->m->k->zero(f->grad, f->m->shards.hi - f->m->shards.lo);
}
