/*
 * megac_mem.c - see megac_mem.h.
 */
#include "memcalc/megac_mem.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "dist/layout.h"
#include "model/gpt.h"
#include "optim/adam.h"
#include "tensor/mem.h"
#include "train/pp_sched.h"
#include "train/train_command.h"

/* The counting backend: set-up only allocates and copies tables in, so
 * these five are all it needs; every buffer is the same unused address
 * (nothing reads or writes through it). */
static char plan_byte;

static void *plan_alloc(size_t bytes)
{
	(void)bytes;
	return &plan_byte;
}

static void plan_free(void *p)
{
	(void)p;
}

static void plan_copy(void *dst, const void *src, size_t bytes)
{
	(void)dst, (void)src, (void)bytes;
}

static void plan_zero(float *x, size_t n)
{
	(void)x, (void)n;
}

static const struct kops plan_ops = {
	.name = "plan",
	.counts_only = true,
	.alloc = plan_alloc,
	.free = plan_free,
	.to_host = plan_copy,
	.to_device = plan_copy,
	.zero = plan_zero,
};

int megac_mem_predict(const struct args *a, int64_t vocab, struct megac_stage_mem **out, int *n)
{
	*out = NULL;
	*n = 0;
	struct dist_layout l;
	if (train_check_flags(a) < 0 || dist_layout_from_args(&l, a, (int)a->world_size) < 0 ||
	    train_check_layout(a, &l) < 0)
		return -1;
	struct gpt_config cfg;
	if (gpt_config_from_args(&cfg, a, vocab) < 0)
		return -1;
	int64_t mbs = a->micro_batch_size, dp = l.dp;
	int64_t gbs = a->global_batch_size > 0 ? a->global_batch_size : mbs * dp;
	if (mbs < 1 || gbs % (mbs * dp))
		return error("--global-batch-size %lld is not divisible by --micro-batch-size %lld x data-parallel "
			     "size %lld", (long long)gbs, (long long)mbs, (long long)dp);
	int64_t m = gbs / (mbs * dp);
	if (m > (1 << 24))
		return error("%lld micro-batches per iteration is more than megac schedules", (long long)m);
	int group = a->microbatch_group_size_per_vp_stage > 0 ? (int)a->microbatch_group_size_per_vp_stage : -1;
	enum gpt_precision prec = a->bf16 ? GPT_BF16 : a->fp16 ? GPT_FP16 : GPT_FP32;
	struct megac_stage_mem *st = xcalloc((size_t)l.pp, sizeof(*st));
	for (int s = 0; s < l.pp; s++) {
		struct pp_sched ps;
		if (pp_sched_init(&ps, l.pp, s, l.vpp, (int)m, group, false) < 0) {
			free(st);
			return -1;
		}
		/* groups with their sizes only: set-up communicates nothing */
		struct dist_group tp = { .name = "tensor-model-parallel", .size = l.tp };
		struct dist_group cp = { .name = "context-parallel", .size = l.cp };
		struct dist_group ep = { .name = "expert-model-parallel", .size = l.ep };
		struct gpt_setup pipe = { .B = (int)mbs, .precision = prec, .tp = &tp, .sp = l.sp, .cp = &cp, .ep = &ep,
					  .pp = l.pp, .stage = s, .vpp = l.vpp, .nslots = ps.inflight,
					  .doc_masks = a->reset_attention_mask };
		struct mem_pool pool;
		mem_pool_init(&pool, &plan_ops);
		struct gpt_model model;
		int r = gpt_init_pipe(&model, &cfg, &plan_ops, &pool, &pipe);
		pp_sched_free(&ps);
		if (r < 0) {
			free(st);
			return -1;
		}
		/* train's optimizer parts: the distributed optimizer shards over data x
		 * context parallel, and the experts' part over expert data parallel
		 * (rank 0's shards, the largest) */
		size_t total = model.reg.total, scratch = 0, ostate = 0;
		size_t base[2], end[2], lo[2], hi[2];
		int gsize[2] = { (int)(dp * l.cp), l.edp }, grank[2] = { 0, 0 };
		int np = train_opt_parts(total, model.expert_lo, l.ep > 1, a->use_distributed_optimizer, gsize, grank, base,
					 end, lo, hi);
		/* the states' formats and offload as train sets them up: on a GPU
		 * unless --device cpu (whose run offloads nothing) */
		struct adam_options aopt;
		train_adam_options(a, a->device && !strcmp(a->device, "cpu"), &aopt);
		struct adam opt[2];
		for (int i = 0; i < np; i++) {
			adam_init(&opt[i], &model.reg, &plan_ops, &pool, &aopt, lo[i], hi[i]);
			if (model.w16) /* and the shard's main weights */
				adam_use_half(&opt[i], model.w16, gpt_half_kind(&model));
			ostate += adam_device_bytes(&opt[i]); /* moments and owned main weights in the pool */
		}
		struct megac_stage_mem *e = &st[s];
		e->pp_stage = s;
		e->first_rank = s * l.tp * l.cp * (int)dp;
		e->params = total * (model.w16 ? sizeof(uint16_t) : sizeof(float));
		e->grads = total * sizeof(float);
		e->half_weights = 0; /* bf16/fp16 weights are the parameters themselves now */
		e->optimizer = ostate;
		e->optimizer_scratch = scratch;
		e->peak = pool.peak;
		e->activations = pool.peak - e->params - e->grads - e->half_weights - e->optimizer - scratch;
		for (int i = 0; i < np; i++)
			adam_free(&opt[i]);
		gpt_free(&model);
	}
	*out = st;
	*n = l.pp;
	return 0;
}
