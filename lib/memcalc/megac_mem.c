/*
 * megac_mem.c - see megac_mem.h. Two counting tables, one per backend
 * train can pick: they differ in what the model's set-up looks at (flash
 * and the presence of the block attention ops), never in the counting.
 */
#include "memcalc/megac_mem.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "dist/layout.h"
#include "memcalc/cuda_ws.h"
#include "model/gpt.h"
#include "optim/adam.h"
#include "tensor/mem.h"
#include "train/fsdp.h"
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

static const struct kops plan_cpu = {
	.name = "plan",
	.counts_only = true,
	.alloc = plan_alloc,
	.free = plan_free,
	.to_host = plan_copy,
	.to_device = plan_copy,
	.zero = plan_zero,
};

/* The CUDA table's block attention ops are what makes the model take the
 * flash path (gpt_init_pipe); set-up never calls them. */
static void plan_block_forward(float *out, float *lse, const float *q, const float *kk, const float *v,
			       const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
			       int a, int g, int k, int S, float scale, int window, float dropout_p, uint64_t seed,
			       uint64_t offset, int accumulate)
{
	BUG("report_memory's counting table computes nothing");
}

static void plan_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
				const float *q, const float *kk, const float *v, const int32_t *qpos,
				const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk, int a, int g, int k,
				int S, float scale, int window, float dropout_p, uint64_t seed, uint64_t offset)
{
	BUG("report_memory's counting table computes nothing");
}

static const struct kops plan_cuda = {
	.name = "plan-cuda",
	.counts_only = true,
	.flash = true, /* as kops_cuda() and kops_cuda_half() (lib/kernels/cuda/ops.cu) */
	.w16_direct = true, /* as kops_cuda_half(): a 16-bit model keeps no fp32 weight views */
	.alloc = plan_alloc,
	.free = plan_free,
	.to_host = plan_copy,
	.to_device = plan_copy,
	.zero = plan_zero,
	.attention_block_forward = plan_block_forward,
	.attention_block_backward = plan_block_backward,
};

const struct kops *megac_mem_plan_ops(bool cuda)
{
	return cuda ? &plan_cuda : &plan_cpu;
}

bool megac_mem_cuda(const struct args *a)
{
	return !a->device || strcmp(a->device, "cpu") != 0;
}

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
	bool cuda = megac_mem_cuda(a);
	const struct kops *plan_ops = cuda ? &plan_cuda : &plan_cpu;
	int level = fsdp_level(a, l.pp, l.ep); /* Megatron-FSDP's sharding, as train sets it up */
	if (level < 0)
		return -1;
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
		struct dist_group etp = { .name = "expert-tensor-parallel", .size = l.etp };
		struct gpt_setup pipe = { .B = (int)mbs, .precision = prec, .tp = &tp, .sp = l.sp, .cp = &cp, .ep = &ep,
					  .etp = &etp, .pp = l.pp, .stage = s, .vpp = l.vpp, .nslots = ps.inflight,
					  .doc_masks = a->reset_attention_mask || a->sft };
		struct dist_group dpg = { .name = "data-parallel", .size = (int)(dp * l.cp) };
		struct fsdp fs;
		pipe.shards = fsdp_prepare(&fs, level, &dpg, a);
		struct gpt_fp8_config f8;
		if (gpt_fp8_config_from_args(&f8, a, cfg.L, l.pp) < 0) {
			free(st);
			return -1;
		}
		pipe.fp8 = &f8;
		struct mem_pool pool;
		mem_pool_init(&pool, plan_ops);
		struct gpt_model model;
		int r = gpt_init_pipe(&model, &cfg, plan_ops, &pool, &pipe);
		pp_sched_free(&ps);
		if (r < 0) {
			free(st);
			return -1;
		}
		fsdp_alloc(&fs, &model, &pool);
		/* train's optimizer parts: the distributed optimizer shards over data x
		 * context parallel, and the experts' part over expert data parallel
		 * (rank 0's shards, the largest) */
		size_t total = model.reg.total, ostate = 0;
		size_t base[2], end[2], lo[2], hi[2];
		int gsize[2] = { (int)(dp * l.cp), l.edp }, grank[2] = { 0, 0 };
		int np = train_opt_parts(total, model.expert_lo, dist_experts_apart(&l), level >= 1, gsize, grank, base, end,
					 lo, hi);
		/* the states' formats and offload as train sets them up: on a GPU
		 * unless --device cpu (whose run offloads nothing) */
		struct adam_options aopt;
		train_adam_options(a, !cuda, &aopt);
		struct adam opt[2];
		for (int i = 0; i < np; i++) {
			train_opt_part_init(&opt[i], &model, &fs, level, plan_ops, &pool, &aopt, lo[i], hi[i]);
			ostate += adam_device_bytes(&opt[i]); /* moments and owned main weights in the pool */
		}
		struct megac_stage_mem *e = &st[s];
		e->pp_stage = s;
		e->first_rank = s * l.tp * l.cp * (int)dp;
		size_t shard = hi[0] - lo[0]; /* Megatron-FSDP keeps the shard's gradients (2) and weights (3) */
		e->params = gpt_weight_bytes(&model); /* the shard at level 3; FP8 weights 1 byte a value */
		e->grads = (level >= 2 ? shard : total) * sizeof(float);
		e->optimizer = ostate;
		e->expert_params = np == 2 ? gpt_store_at(&model, total) - gpt_store_at(&model, model.expert_lo) : 0;
		if (cuda) {
			/* the first iteration's requests: forward and backward, then the
			 * gradient norm and the step of each optimizer part */
			struct cuda_ws ws;
			cuda_ws_init(&ws);
			cuda_ws_model(&ws, &model, prec != GPT_FP32);
			for (int i = 0; i < np; i++)
				cuda_ws_segs(&ws, opt[i].norm_segs[1], opt[i].nnorm_segs[1], true);
			for (int i = 0; i < np; i++)
				cuda_ws_segs(&ws, opt[i].place[1].step_segs, opt[i].place[1].nstep_segs, false);
			e->backend_ws = ws.lt_workspace + ws.scratch_total;
		}
		e->peak = pool.peak + e->backend_ws;
		gpt_fp8_mem(&model, &e->fp8_scratch, &e->fp8_host);
		e->activations = e->peak - e->params - e->grads - e->optimizer;
		for (int i = 0; i < np; i++)
			adam_free(&opt[i]);
		fsdp_free(&fs);
		gpt_free(&model);
	}
	*out = st;
	*n = l.pp;
	return 0;
}
