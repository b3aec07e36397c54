/*
 * train_command.c - the train program: builds a trainer from Megatron's
 * pretrain_gpt.py flags (tokenizer, datasets, model, optimizer, schedule,
 * loss scaler, checkpoint to resume), then runs it. Everything here is
 * set-up and validation; the loop is trainer.c.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "data/tok.h"
#include "kernels/device.h"
#include "kernels/profile.h"
#include "model/ckpt_args.h"
#include "train/pipeline.h"
#include "train/train_command.h"
#include "train/trainer.h"

const struct prog_info train_prog_info = {
	"train",
	PROG_TRAIN,
	"Pretrain a GPT or Llama-style model with Megatron-LM's flags, data pipeline, optimizer and\n"
	"schedules, logging Megatron's iteration lines and saving HDF5 checkpoints that h5py reads.",
	"train --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 64 "
	"--max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 8 --train-iters 100 "
	"--lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 10 --data-path data/kjv_text_document "
	"--split 98,2,0 --eval-interval 50 --eval-iters 5 --tokenizer-type GPT2BPETokenizer "
	"--vocab-file gpt2/vocab.json --merge-file gpt2/merges.txt --save ckpt --save-interval 50",
	0,
};

int train_check_layout(const struct args *a, const struct dist_layout *l)
{
	/* --reset-attention-mask works with --context-parallel-size: ring attention
	 * masks documents on global positions */
	return 0;
}

/* Megatron's precision-aware optimizer and optimizer offload: its checks
 * (arguments.py, optimizer_config.py, optimizer/__init__.py), then megac's. */
static int check_optimizer_precision(const struct args *a)
{
	static const struct {
		const char *flag;
		size_t off;
	} dtypes[] = {
		{ "--main-grads-dtype", offsetof(struct args, main_grads_dtype) },
		{ "--main-params-dtype", offsetof(struct args, main_params_dtype) },
		{ "--exp-avg-dtype", offsetof(struct args, exp_avg_dtype) },
		{ "--exp-avg-sq-dtype", offsetof(struct args, exp_avg_sq_dtype) },
	};
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
		const char *v = *(char *const *)((const char *)a + dtypes[i].off);
		if (v && strcmp(v, "fp32") && !a->use_precision_aware_optimizer)
			return error("%s %s needs --use-precision-aware-optimizer (as in Megatron: without it every "
				     "optimizer state is fp32)", dtypes[i].flag, v);
	}
	if (a->use_precision_aware_optimizer && !a->use_distributed_optimizer)
		return error("--use-precision-aware-optimizer is only supported with the distributed optimizer, as in "
			     "Megatron: give --use-distributed-optimizer too");
	if (a->main_params_dtype && !strcmp(a->main_params_dtype, "fp16") && !a->bf16 && !a->fp16)
		return error("--main-params-dtype fp16 needs a 16-bit model (--bf16 or --fp16): an fp32 model's "
			     "weights are its main weights");
	if (a->bf16 && a->accumulate_allreduce_grads_in_fp32 && a->main_grads_dtype &&
	    strcmp(a->main_grads_dtype, "fp32"))
		return error("--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set "
			     "(Megatron's check)");
	if (a->optimizer_cpu_offload && !a->use_precision_aware_optimizer)
		return error("--optimizer-cpu-offload must be used with --use-precision-aware-optimizer, as in "
			     "Megatron (its offload reuses that optimizer)");
	if (a->optimizer_cpu_offload && !(a->optimizer_offload_fraction >= 0 && a->optimizer_offload_fraction <= 1))
		return error("--optimizer-offload-fraction must be between 0 and 1 (got %g)", a->optimizer_offload_fraction);
	return 0;
}

void train_opt_part_init(struct adam *opt, struct gpt_model *m, const struct fsdp *fs, int level,
			 const struct kops *k, struct mem_pool *pool, const struct adam_options *o, size_t lo,
			 size_t hi)
{
	adam_init(opt, &m->reg, k, pool, o, lo, hi);
	if (level >= 2) { /* Megatron-FSDP: the shards are the model's */
		if (lo != m->shards.lo || hi != m->shards.hi)
			BUG("FSDP shard [%zu, %zu) against the optimizer's [%zu, %zu)", m->shards.lo, m->shards.hi, lo,
			    hi);
		bool w = level == 3;
		adam_use_shards(opt, fs->grad, w && !m->w16 ? m->reg.data : NULL, w ? m->w16 : NULL);
	}
	if (m->soff) { /* --fp8-param-gather: the model writes its weights from the main ones */
		adam_keep_main(opt);
		if (!k->counts_only) {
			float *host = xmalloc((m->reg.total ? m->reg.total : 1) * sizeof(float));
			gpt_main_values(m, host);
			adam_set_state(opt, ADAM_MAIN, host);
			free(host);
		}
	} else if (m->w16) { /* main weights of the shard, from the model's initial ones */
		adam_use_half(opt, m->w16, gpt_half_kind(m));
	}
}

static enum kops_dtype dtype_of(const char *v)
{
	return !v || !strcmp(v, "fp32") ? KOPS_F32 : !strcmp(v, "bf16") ? KOPS_BF16 : KOPS_FP16;
}

void train_adam_options(const struct args *a, bool on_host, struct adam_options *o)
{
	memset(o, 0, sizeof(*o));
	o->beta1 = (float)a->adam_beta1;
	o->beta2 = (float)a->adam_beta2;
	o->eps = (float)a->adam_eps;
	if (a->use_precision_aware_optimizer) {
		o->main = dtype_of(a->main_params_dtype);
		o->exp_avg = dtype_of(a->exp_avg_dtype);
		o->exp_avg_sq = dtype_of(a->exp_avg_sq_dtype);
	}
	if (a->optimizer_cpu_offload && !on_host)
		o->offload = a->optimizer_offload_fraction;
}

bool train_grads_bf16(const struct args *a)
{
	bool bf16_main = a->main_grads_dtype && !strcmp(a->main_grads_dtype, "bf16");
	return a->bf16 && (a->grad_reduce_in_bf16 || (bf16_main && !a->accumulate_allreduce_grads_in_fp32));
}

int train_check_flags(const struct args *a)
{
	if (a->ckpt_format && strcmp(a->ckpt_format, "hdf5") && strcmp(a->ckpt_format, "torch_dist") &&
	    strcmp(a->ckpt_format, "fsdp_dtensor"))
		return error("--ckpt-format %s: train saves megac's HDF5 checkpoint or Megatron's torch_dist or "
			     "fsdp_dtensor; --load takes Megatron's torch, torch_dist and fsdp_dtensor checkpoints as they "
			     "are (found from the files), and ckpt_convert --to megatron --ckpt-format torch writes the "
			     "legacy format",
			     a->ckpt_format);
	if (a->fp16 && a->bf16)
		return error("--fp16 and --bf16 are mutually exclusive");
	if (check_optimizer_precision(a) < 0)
		return -1;
	if (a->seed <= 0)
		return error("--seed must be positive (got %lld)", (long long)a->seed);
	if (a->full_validation)
		return error("--full-validation is not implemented yet; use --eval-iters");
	if (a->micro_batch_size < 1)
		return error("--micro-batch-size must be at least 1");
	if (a->log_memory_interval > 0 && a->log_memory_interval % (a->train_log_interval > 0 ? a->train_log_interval : 1))
		return error("--log-memory-interval %lld must be a multiple of --log-interval %lld",
			     (long long)a->log_memory_interval, (long long)a->train_log_interval);
	if (a->rampup_batch_size.n) { /* Megatron's calculator: deprecated, ignored */
		if (a->rampup_batch_size.n != 3)
			return error("--rampup-batch-size takes three values, START INCREMENT SAMPLES (got %d)",
				     a->rampup_batch_size.n);
		warning("--rampup-batch-size is deprecated and ignored, as in Megatron; use --step-batch-size-schedule");
	}
	return 0;
}

int train_opt_parts(size_t total, size_t expert_lo, bool ep, bool dist_opt, const int gsize[2], const int grank[2],
		    size_t base[2], size_t end[2], size_t lo[2], size_t hi[2])
{
	int n = ep && expert_lo < total ? 2 : 1;
	base[0] = 0;
	end[0] = n == 2 ? expert_lo : total;
	base[1] = end[1] = total;
	if (n == 2)
		base[1] = expert_lo;
	for (int i = 0; i < n; i++) {
		lo[i] = base[i];
		hi[i] = end[i];
		if (dist_opt && gsize[i] > 1) {
			dist_shard(end[i] - base[i], gsize[i], grank[i], &lo[i], &hi[i]);
			lo[i] += base[i];
			hi[i] += base[i];
		}
	}
	return n;
}

/* The layout on the ranks of this job: Megatron's checks, then what megac
 * does not do yet. */
static int setup_parallel(struct trainer *t)
{
	const struct args *a = t->a;
	struct dist_layout l;
	if (dist_layout_from_args(&l, a, t->dist.world) < 0 || train_check_layout(a, &l) < 0)
		return -1;
	if (dist_setup(&t->dist, &l) < 0)
		return -1;
	t->gdp = l.cp > 1 ? &t->dist.dp_cp : &t->dist.dp;
	dist_watchdog_start(&t->dist, a->distributed_timeout_minutes, a->hang_timeout_minutes);
	return 0;
}

/* --sft: Megatron's SFT tokenizer and the checks of its dataset. */
static int setup_sft(struct trainer *t)
{
	const struct args *a = t->a;
	t->doc_masks = a->reset_attention_mask || a->sft;
	t->own_positions = a->reset_position_ids || a->sft;
	if (!a->sft)
		return 0;
	if (strcmp(a->tokenizer_type, "SFTTokenizer"))
		return error("--sft tokenizes conversations with --tokenizer-type SFTTokenizer (a Hugging Face tokenizer "
			     "folder as --tokenizer-model), not %s",
			     a->tokenizer_type);
	/* SFTDataset asserts both: its position ids and cu_seqlens are its own */
	if (a->reset_position_ids || a->reset_attention_mask)
		return error("--sft builds its own position ids and per-conversation attention: drop "
			     "--reset-position-ids and --reset-attention-mask");
	if (a->mtp_num_layers > 0)
		return error("--mtp-num-layers with --sft: multi-token prediction over packed conversations is not in "
			     "megac yet");
	if (a->eod_mask_loss && t->dist.rank == 0)
		warning("--eod-mask-loss has no effect with --sft: the SFT samples mask the prompt and the padding");
	t->sft_tok = sft_tokenizer_load(a->tokenizer_model, a->sft_tokenizer_prompt_format);
	if (!t->sft_tok)
		return -1;
	t->sft_sess = tok_session_new(sft_tok(t->sft_tok));
	if (t->dist.rank == 0)
		info("> SFT: %s", sft_describe(t->sft_tok));
	return 0;
}

/* Rank 0 builds the index caches while the others wait (as Megatron), then
 * the others load them; a failure on rank 0 stops every rank. */
static int setup_data(struct trainer *t)
{
	const struct args *a = t->a;
	if (gpt_data_config_from_args(a, t->tok, t->dist.dp.size, &t->dcfg) < 0)
		return -1;
	if (a->sft) /* every rank reads the JSONL itself: the samples depend on nothing else */
		return sft_data_build(&t->dcfg, t->sft_tok, t->dist.layout.cp, &t->sft);
	double failed = 0;
	dist_watchdog_pause(&t->dist, true); /* rank 0 alone may build for a long time */
	if (t->dist.rank == 0)
		failed = gpt_data_build(&t->dcfg, &t->data) < 0;
	dist_allreduce_max_f64(&t->dist.world_g, &failed, 1);
	dist_watchdog_pause(&t->dist, false);
	if (failed)
		return t->dist.rank == 0 ? -1 : error("rank 0 could not build the datasets");
	if (t->dist.rank != 0) {
		t->dcfg.write_cache = false;
		if (gpt_data_build(&t->dcfg, &t->data) < 0)
			return -1;
	}
	return 0;
}

static int setup_schedule(struct trainer *t)
{
	const struct args *a = t->a;
	struct lr_sched_flags f = LR_SCHED_FLAGS_INIT;
	if (args_given(a, "--train-iters"))
		f.train_iters = a->train_iters;
	if (args_given(a, "--train-samples"))
		f.train_samples = a->train_samples;
	f.global_batch_size = t->args_gbs; /* Megatron's args.global_batch_size, also with a batch schedule */
	f.lr_decay_iters = a->lr_decay_iters;
	f.lr_decay_samples = a->lr_decay_samples;
	if (args_given(a, "--lr-warmup-iters"))
		f.lr_warmup_iters = a->lr_warmup_iters;
	if (args_given(a, "--lr-warmup-samples"))
		f.lr_warmup_samples = a->lr_warmup_samples;
	if (args_given(a, "--lr-warmup-fraction"))
		f.lr_warmup_fraction = a->lr_warmup_fraction;
	f.lr_wsd_decay_iters = a->lr_wsd_decay_iters;
	f.lr_wsd_decay_samples = a->lr_wsd_decay_samples;
	struct lr_sched_steps st;
	if (lr_sched_derive_steps(&f, &st) < 0)
		return -1;
	struct lr_sched p;
	memset(&p, 0, sizeof(p));
	p.max_lr = a->lr;
	p.min_lr = a->min_lr;
	p.init_lr = a->lr_warmup_init;
	p.warmup_steps = st.warmup_steps;
	p.decay_steps = st.decay_steps;
	p.wsd_decay_steps = st.wsd_decay_steps;
	p.wd_incr_steps = st.wd_incr_steps;
	if (lr_sched_parse_style(a->lr_decay_style, &p.style) < 0 ||
	    lr_sched_parse_wsd_style(a->lr_wsd_decay_style, &p.wsd_style) < 0 ||
	    lr_sched_parse_wd_style(a->weight_decay_incr_style, &p.wd_style) < 0)
		return -1;
	if (p.wd_style == LR_SCHED_WD_CONSTANT) {
		if (a->start_weight_decay >= 0 || a->end_weight_decay >= 0)
			return error("--start-weight-decay and --end-weight-decay need --weight-decay-incr-style "
				     "linear or cosine (constant uses --weight-decay)");
		p.start_wd = p.end_wd = a->weight_decay;
	} else {
		if (a->start_weight_decay < 0 || a->end_weight_decay < 0)
			return error("--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay",
				     a->weight_decay_incr_style);
		p.start_wd = a->start_weight_decay;
		p.end_wd = a->end_weight_decay;
	}
	return lr_sched_init(&t->sched, p);
}

static int setup_scaler(struct trainer *t)
{
	const struct args *a = t->a;
	struct grad_scaler_flags f = GRAD_SCALER_FLAGS_INIT;
	f.fp16 = a->fp16;
	f.bf16 = a->bf16;
	f.loss_scale = a->loss_scale > 0 ? a->loss_scale : 0;
	f.initial_loss_scale = a->initial_loss_scale;
	f.min_loss_scale = a->min_loss_scale;
	f.loss_scale_window = a->loss_scale_window;
	f.hysteresis = (int)a->hysteresis;
	return grad_scaler_init_flags(&t->scaler, &f);
}

/*
 * Megatron's W&B logging without Python at run time: the run's scalars go
 * as TensorBoard event files to the folder Megatron gives wandb
 * (--wandb-save-dir, else SAVE/wandb), under tensorboard/<exp-name>, and
 * `wandb sync --sync-tensorboard` uploads them. With --tensorboard-dir too,
 * both folders get every scalar.
 */
static int open_wandb(struct trainer *t)
{
	const struct args *a = t->a;
	if (!a->wandb_exp_name || !*a->wandb_exp_name)
		return error("--wandb-project needs --wandb-exp-name (the run's name; Megatron asks for it too)");
	if (!a->wandb_save_dir && !a->save)
		return error("--wandb-project needs --wandb-save-dir DIR or --save DIR (the W&B folder is SAVE/wandb)");
	struct sbuf dir = SBUF_INIT;
	if (a->wandb_save_dir)
		sbuf_addstr(&dir, a->wandb_save_dir);
	else
		sbuf_addf(&dir, "%s/wandb", a->save);
	sbuf_addf(&dir, "/tensorboard/%s", a->wandb_exp_name);
	struct tboard *w = t->have_tb ? &t->tb_wandb : &t->tb;
	int rc = tboard_open(w, dir.buf);
	if (rc == 0) {
		if (t->have_tb)
			t->tb.mirror = w;
		t->have_tb = true;
		t->have_tb_wandb = w == &t->tb_wandb;
		info("W&B project '%s', run '%s': the metrics go to %s as TensorBoard events (megac runs no Python); "
		     "upload them with: wandb sync --sync-tensorboard -p %s%s%s %s", a->wandb_project,
		     a->wandb_exp_name, dir.buf, a->wandb_project, a->wandb_entity ? " -e " : "",
		     a->wandb_entity ? a->wandb_entity : "", dir.buf);
	}
	sbuf_release(&dir);
	return rc;
}

static void trainer_free(struct trainer *t)
{
	train_ckpt_save_drop(t); /* an async save an error left behind */
	if (t->have_tb)
		tboard_close(&t->tb);
	if (t->have_tb_wandb)
		tboard_close(&t->tb_wandb);
	if (t->have_mx)
		metrics_close(&t->mx);
	batch_free(&t->batch);
	batch_free(&t->cp_batch);
	for (int i = 0; i < t->pp_ndloss; i++)
		free(t->pp_dloss[i]);
	free(t->pp_dloss);
	free(t->mtp_iter);
	free(t->mtp_sum);
	pipeline_free(t);
	pp_sched_free(&t->pp_train);
	pp_sched_free(&t->pp_eval);
	batch_schedule_free(&t->bss);
	free(t->losses);
	for (int i = 0; i < t->nparts; i++) {
		struct train_part *p = &t->part[i];
		grad_sync_free(&p->gs);
		param_gather_free(&p->pg);
		adam_free(&p->opt);
	}
	fsdp_free(&t->fsdp);
	gpt_free(&t->model);
	gpt_data_free(&t->data);
	sft_data_free(&t->sft);
	if (t->sft_sess)
		tok_session_free(t->sft_sess);
	sft_tokenizer_free(t->sft_tok);
	gpt_data_config_release(&t->dcfg);
	if (t->tok)
		tok_free(t->tok);
}

/* The device, chosen before MPI_Init (from the launcher's local rank,
 * which needs no MPI): a CUDA-aware MPI opens a context on the current GPU
 * inside MPI_Init, so a rank that chose its GPU only afterwards would hold
 * a second context on GPU 0. */
static int choose_device(struct trainer *t, const struct args *a)
{
	enum device_precision dp = a->bf16 ? DEVICE_BF16 : a->fp16 ? DEVICE_FP16 : DEVICE_FP32;
	return device_choose(&t->device, a->device, device_local_rank((int)a->local_rank), dp);
}

/* The op table of the device chosen, said in the log by every rank on a
 * GPU (which GPU each rank took is what a user checks first when a job is
 * slow) and by rank 0 on the CPU. */
static int setup_device(struct trainer *t)
{
	const struct device_choice d = t->device;
	t->k = d.k;
	t->cuda_device = d.cuda_device;
	const char *prof = getenv("MEGAC_PROFILE_OPS"); /* profile.h: where a step's time goes */
	if (prof && *prof && strcmp(prof, "0"))
		t->k = kops_profile_wrap(t->k);
	if (d.cuda_device >= 0 || t->dist.rank == 0)
		info("compute on %s", d.what);
	/* every rank on a GPU or none: NCCL's set-up is collective, and a job
	 * half on CPUs would be a misconfigured node, not a plan */
	double on[2] = { d.cuda_device >= 0, d.cuda_device < 0 };
	dist_allreduce_max_f64(&t->dist.world_g, on, 2);
	if (on[0] > 0 && on[1] > 0)
		return error("some ranks found a usable GPU and others did not (this rank: %s); give --device cpu, "
			     "or check the nodes' GPUs and CUDA_VISIBLE_DEVICES", d.what);
	if (d.cuda_device >= 0 && dist_use_device(&t->dist) < 0)
		return -1;
	return 0;
}

/* What the precision-aware optimizer, bf16 gradients and offload do in
 * this run, once, on rank 0 (and what they do not: none is silently
 * without effect). */
static void say_optimizer_precision(const struct trainer *t)
{
	const struct args *a = t->a;
	bool bf16_grads_asked = a->grad_reduce_in_bf16 || (a->main_grads_dtype && !strcmp(a->main_grads_dtype, "bf16"));
	if (train_grads_bf16(a))
		info("gradients reduced in bf16 (%s): each rank's gradient is rounded to bf16 before the data-parallel "
		     "reduction and the sum after it; megac's gradient buffer stays fp32 (docs/mixed-precision.md)",
		     a->grad_reduce_in_bf16 ? "--grad-reduce-in-bf16" : "--main-grads-dtype bf16");
	else if (bf16_grads_asked && !a->bf16)
		warning("%s has no effect without --bf16, as in Megatron (the gradients stay in the model's precision, "
			"fp32 in megac)", a->grad_reduce_in_bf16 ? "--grad-reduce-in-bf16" : "--main-grads-dtype bf16");
	size_t dev = 0, host = 0;
	for (int i = 0; i < t->nparts; i++) {
		dev += adam_device_bytes(&t->part[i].opt);
		host += adam_host_bytes(&t->part[i].opt);
	}
	if (a->use_precision_aware_optimizer)
		info("precision-aware optimizer: main weights %s, exp_avg %s, exp_avg_sq %s; optimizer state on rank 0: "
		     "%.2f MB on the device, %.2f MB offloaded to the host", t->model.w16 ? a->main_params_dtype : "fp32 "
		     "(the model's)", a->exp_avg_dtype, a->exp_avg_sq_dtype, dev / 1048576.0, host / 1048576.0);
	if (a->optimizer_cpu_offload && t->cuda_device < 0)
		info("--optimizer-cpu-offload: nothing to offload on the CPU backend, whose memory is the host's; the "
		     "optimizer runs as without it");
}

static int setup(struct trainer *t, const struct args *a)
{
	memset(t, 0, sizeof(*t));
	clock_gettime(CLOCK_MONOTONIC, &t->train_start); /* --exit-duration-in-mins counts set-up too */
	t->a = a;
	if (choose_device(t, a) < 0 || dist_init(&t->dist, "train") < 0 || setup_parallel(t) < 0)
		return -1;
	if (train_check_flags(a) < 0 ||
	    timers_init(&t->timers, (int)a->timing_log_level, a->timing_log_option) < 0)
		return -1;
	t->seed = (uint64_t)a->seed;
	/* a fault for the hang detector's test: MEGAC_FAULT_HANG=ITERATION:RANK */
	t->fault_hang_iter = -1;
	t->fault_hang_rank = -1;
	const char *hang = getenv("MEGAC_FAULT_HANG");
	long long hang_it;
	int hang_rank;
	if (hang && sscanf(hang, "%lld:%d", &hang_it, &hang_rank) == 2) {
		t->fault_hang_iter = hang_it;
		t->fault_hang_rank = hang_rank;
	}
	t->mbs = a->micro_batch_size;
	int64_t dp = t->dist.dp.size;
	t->gbs = a->global_batch_size > 0 ? a->global_batch_size : t->mbs * dp;
	t->args_gbs = t->eval_gbs = t->gbs;
	int64_t max_gbs = t->gbs;
	if (a->step_batch_size_schedule) {
		if (args_given(a, "--global-batch-size")) /* Megatron's own refusal */
			return error("cannot specify both --step-batch-size-schedule and --global-batch-size");
		if (batch_schedule_parse(&t->bss, a->step_batch_size_schedule, a->seq_length) < 0)
			return -1;
		t->have_bss = true;
		t->gbs = batch_schedule_size(&t->bss, 0); /* until a checkpoint says how far training got */
		max_gbs = batch_schedule_max(&t->bss);
	}
	if (t->gbs % (t->mbs * dp))
		return error("--global-batch-size %lld is not divisible by --micro-batch-size %lld x data-parallel "
			     "size %lld", (long long)t->gbs, (long long)t->mbs, (long long)dp);
	t->num_micro = t->gbs / (t->mbs * dp); /* micro-batches per replica per iteration */
	bool iters = args_given(a, "--train-iters"), samples = args_given(a, "--train-samples");
	if (iters == samples)
		return error("give exactly one of --train-iters and --train-samples");
	t->train_iters = iters ? a->train_iters :
		t->have_bss ? batch_schedule_iters(&t->bss, a->train_samples) : a->train_samples / t->gbs;
	if (t->train_iters < 0)
		return error("--train-iters must not be negative");
	bool training = t->train_iters > 0 && !a->skip_train;
	if (training && a->lr <= 0)
		return error("--lr is required for training (a positive peak learning rate)");
	if (a->save && training && a->save_interval <= 0)
		return error("--save needs --save-interval N (as in Megatron)");

	/* this rank's pipeline schedules (refusals before the data build); each
	 * model chunk holds as many micro-batches as the training schedule has in
	 * flight on it */
	int group = t->pp_group =
		a->microbatch_group_size_per_vp_stage > 0 ? (int)a->microbatch_group_size_per_vp_stage : -1;
	/* the model holds the slots of the largest batch a schedule reaches; the
	 * schedule of the batch in force is built before each iteration that needs
	 * another (trainer_update_batch) */
	int64_t max_micro = max_gbs / (t->mbs * dp) > 0 ? max_gbs / (t->mbs * dp) : 1;
	if (max_micro > (1 << 24))
		return error("%lld micro-batches per iteration is more than megac schedules", (long long)max_micro);
	if (pp_sched_init(&t->pp_train, t->dist.layout.pp, t->dist.pp.rank, t->dist.layout.vpp, (int)max_micro,
			  group, false) < 0 ||
	    pp_sched_init(&t->pp_eval, t->dist.layout.pp, t->dist.pp.rank, t->dist.layout.vpp,
			  (int)(t->eval_gbs / (t->mbs * dp)), group, true) < 0)
		return -1;
	t->pp_micro = (int)max_micro;

	struct tok_config tc = tok_config_from_args(a);
	t->tok = tok_load(&tc);
	if (!t->tok || setup_sft(t) < 0)
		return -1;
	if (gpt_config_from_args(&t->cfg, a, tok_vocab_size(t->tok)) < 0)
		return -1;
	/* the model must fit the layout: said now, before any data is built */
	const struct dist_layout *fl = &t->dist.layout;
	struct gpt_layout fit = { .tp = fl->tp, .pp = fl->pp, .vpp = fl->vpp, .cp = fl->cp, .ep = fl->ep,
				  .etp = fl->etp, .sp = fl->sp };
	if (gpt_config_check_layout(&t->cfg, &fit, NULL) < 0)
		return -1;
	if (t->dist.rank == 0 && t->cfg.Vp != t->cfg.V) /* Megatron's line */
		info(" > padded vocab (size: %d) with %d dummy tokens (new size: %d)", t->cfg.V, t->cfg.Vp - t->cfg.V,
		     t->cfg.Vp);
	if (t->train_iters > 0 && setup_data(t) < 0)
		return -1;
	enum gpt_precision prec = a->bf16 ? GPT_BF16 : a->fp16 ? GPT_FP16 : GPT_FP32;
	if (setup_device(t) < 0)
		return -1;
	mem_pool_init(&t->mem, t->k);
	const struct dist_layout *lay = &t->dist.layout;
	struct gpt_setup pipe = { .B = (int)t->mbs, .precision = prec, .tp = &t->dist.tp, .sp = lay->sp,
				  .cp = &t->dist.cp, .ep = &t->dist.ep, .etp = &t->dist.etp, .pp = lay->pp,
				  .stage = t->dist.pp.rank,
				  .vpp = lay->vpp, .nslots = t->pp_train.inflight, .doc_masks = t->doc_masks };
	int level = fsdp_level(a, lay->pp, lay->ep);
	if (level < 0)
		return -1;
	if (lay->etp != lay->tp && a->moe_router_force_load_balancing)
		return error("--moe-router-force-load-balancing with --expert-tensor-parallel-size %d other than "
			     "--tensor-model-parallel-size %d: not in megac yet", lay->etp, lay->tp);
	pipe.shards = fsdp_prepare(&t->fsdp, level, t->gdp, a);
	if (gpt_fp8_config_from_args(&t->fp8, a, t->cfg.L, lay->pp) < 0)
		return -1;
	pipe.fp8 = &t->fp8;
	if (gpt_init_pipe(&t->model, &t->cfg, t->k, &t->mem, &pipe) < 0)
		return -1;
	fsdp_alloc(&t->fsdp, &t->model, &t->mem);
	gpt_init_weights(&t->model, t->seed);
	for (int l = 0; t->cfg.E > 0 && l < t->cfg.L; l++)
		t->moe_layers += t->cfg.moe_layer[l];
	if (t->cfg.E > 0 && t->cfg.moe_layer[t->cfg.L - 1])
		t->moe_layers += t->cfg.mtp;
	t->mtp_iter = xcalloc((size_t)t->cfg.mtp + 1, sizeof(double));
	t->mtp_sum = xcalloc((size_t)t->cfg.mtp + 1, sizeof(double));
	/* the optimizer's parts (trainer.h), each reduced over its group and,
	 * with --use-distributed-optimizer, sharded over it */
	bool ep = dist_experts_apart(lay);
	struct dist_group *groups[2] = { t->gdp, &t->dist.edp };
	int gsize[2] = { t->gdp->size, t->dist.edp.size }, grank[2] = { t->gdp->rank, t->dist.edp.rank };
	size_t base[2], end[2], lo[2], hi[2];
	struct adam_options aopt;
	train_adam_options(a, t->cuda_device < 0, &aopt);
	t->nparts = train_opt_parts(t->model.reg.total, t->model.expert_lo, ep, level >= 1, gsize, grank, base, end, lo,
				    hi);
	/* gradient buckets (Megatron's default size; one bucket without overlap) */
	int64_t bucket = a->ddp_bucket_size > 0 ? a->ddp_bucket_size :
			 (40000000 > 1000000 * (int64_t)t->gdp->size ? 40000000 : 1000000 * (int64_t)t->gdp->size);
	if (bucket > (1 << 28))
		bucket = 1 << 28; /* MPI counts are ints */
	unsigned late = (lay->sp ? PARAM_SP : 0) | (lay->tp > 1 ? PARAM_TP_SUM : 0) |
			(t->dist.emb.size > 1 ? PARAM_TIED : 0);
	for (int i = 0; i < t->nparts; i++) {
		struct train_part *p = &t->part[i];
		p->g = groups[i];
		p->base = base[i];
		p->end = end[i];
		p->sharded = hi[i] - lo[i] != end[i] - base[i];
		train_opt_part_init(&p->opt, &t->model, &t->fsdp, level, t->k, &t->mem, &aopt, lo[i], hi[i]);
		bool multi = p->g->size > 1;
		/* levels 2 and 3 reduce in the model's hooks and gather per tensor:
		 * the bucketed reduction and gather are left empty (no-ops) */
		if (level < 2) {
			grad_sync_init_part(&p->gs, t->k, &t->model.reg, p->g, base[i], end[i], lo[i], hi[i],
					    p->sharded, (size_t)bucket, a->overlap_grad_reduce && multi, late);
			p->gs.bf16 = train_grads_bf16(a);
		}
		if (level < 3)
			param_gather_init(&p->pg, &t->model, p->g, base[i], end[i], (size_t)bucket,
					  a->overlap_param_gather && multi);
	}
	if (t->dist.rank == 0)
		say_optimizer_precision(t);
	if (training && setup_schedule(t) < 0)
		return -1;
	if (setup_scaler(t) < 0)
		return -1;
	batch_init(&t->batch, (int)t->mbs, t->cfg.S, t->doc_masks);
	if (lay->cp > 1)
		batch_init(&t->cp_batch, (int)t->mbs, t->model.lc.S, false);
	t->losses = xmalloc((size_t)t->mbs * t->cfg.S * sizeof(float));
	const struct gpt_chunk *last = &t->model.chunks[t->model.nchunks - 1];
	t->pp_ndloss = last->post ? last->nslots : 0;
	t->pp_dloss = xcalloc((size_t)t->pp_ndloss + 1, sizeof(float *));
	for (int i = 0; i < t->pp_ndloss; i++)
		t->pp_dloss[i] = xmalloc((size_t)t->mbs * t->cfg.S * sizeof(float));
	if (t->dist.rank == 0) {
		int64_t active, total = gpt_num_params(&t->cfg, &active);
		char experts[160] = "";
		if (t->cfg.E > 0)
			snprintf(experts, sizeof(experts), ", %d MoE layers of %d experts (top-%d, ffn %d)",
				 t->moe_layers, t->cfg.E, t->cfg.router.k, t->cfg.moe_f);
		char params[96];
		if (active != total)
			snprintf(params, sizeof(params), "%.2f M parameters (%.2f M active per token)", total / 1e6,
				 active / 1e6);
		else
			snprintf(params, sizeof(params), "%.2f M parameters", total / 1e6);
		char heads[160];
		if (t->cfg.mla)
			snprintf(heads, sizeof(heads), "%d heads (multi-latent attention: q/k %d + %d RoPE channels, v %d, "
				 "kv rank %d, q rank %d)", t->cfg.a, t->cfg.qk_head, t->cfg.qk_pos, t->cfg.v_head,
				 t->cfg.kv_lora, t->cfg.q_lora);
		else
			snprintf(heads, sizeof(heads), "%d heads (%d query groups, %d channels)", t->cfg.a, t->cfg.g,
				 t->cfg.k);
		char mtp[48] = ""; /* the MoE layers above count the depths' too, as Megatron's report */
		if (t->cfg.mtp)
			snprintf(mtp, sizeof(mtp), " and %d multi-token-prediction depth(s)", t->cfg.mtp);
		info("model: %d layers%s, hidden %d, %s, ffn %d%s%s, vocab %d, %s; %d data-parallel rank(s), %lld "
		     "micro-batches of %lld per rank per iteration",
		     t->cfg.L, mtp, t->cfg.h, heads, t->cfg.f, t->cfg.swiglu ? " (SwiGLU)" : "", experts, t->cfg.Vp, params,
		     t->dist.dp.size, (long long)t->num_micro, (long long)t->mbs);
		if (t->cfg.E > 0 && a->moe_token_dispatcher_type && !strcmp(a->moe_token_dispatcher_type, "flex"))
			info("--moe-token-dispatcher-type flex (%s backend): megac's all-to-all exchange of the routed rows, "
			     "the same numbers as Megatron's", a->moe_enable_deepep ? "deepep" :
			     a->moe_flex_dispatcher_backend ? a->moe_flex_dispatcher_backend : "deepep");
	}
	return 0;
}

static int train_run(const struct args *a);

int train_command(const struct args *flags)
{
	/* --use-checkpoint-args: the model's flags from the checkpoint */
	struct args a = *flags;
	struct ckpt_args own;
	int ret = ckpt_args_apply(&a, &own);
	if (ret == 0)
		ret = train_run(&a);
	ckpt_args_release(&own);
	return ret;
}

static int train_run(const struct args *user)
{
	struct trainer t;
	int ret = -1;
	struct args run;
	int fmt = train_torch_dist_args(user, &run);
	if (fmt < 0)
		return -1;
	const struct args *a = &run;
	if (setup(&t, a) < 0)
		goto out;
	t.user_args = user;
	t.torch_dist_save = fmt == 0 ? user->save : NULL;
	if (a->load) {
		int r = train_ckpt_load_any(&t);
		if (r < 0)
			goto out;
	}
	trainer_cast_fp8_weights(&t, true);
	/* TensorBoard and the metrics file belong to the rank that prints the log line */
	if (a->tensorboard_dir && dist_is_last(&t.dist)) {
		if (tboard_open(&t.tb, a->tensorboard_dir) < 0)
			goto out;
		t.have_tb = true;
	}
	if (a->wandb_project && dist_is_last(&t.dist) && open_wandb(&t) < 0)
		goto out;
	if (a->metrics_file && dist_is_last(&t.dist)) {
		if (metrics_open(&t.mx, a->metrics_file) < 0)
			goto out;
		t.have_mx = true;
	}
	if (a->skip_train) {
		/* Megatron's --skip-train: only the final validation and test passes */
		if (t.dist.rank == 0)
			info("skipping training (--skip-train is on)");
		ret = trainer_evaluate_final(&t);
		goto out;
	}
	if (t.train_iters == 0) {
		/* --train-iters 0 --save DIR: write the initialised model as iteration 0 */
		if (a->save && train_ckpt_save(&t, false) < 0)
			goto out;
		ret = 0;
		goto out;
	}
	ret = trainer_run(&t);
	if (ret == 0 && t.cuda_device >= 0 && t.iteration > t.start_iteration) {
		/* every device buffer is taken at set-up: a count that grows after the
		 * first iteration is an allocation in the hot loop (tests/gpu checks it) */
		struct kops_cuda_stats st;
		kops_cuda_get_stats(&st);
		info("GPU memory: %lu device allocations (%.1f MiB) up to the end of the first iteration, %lu after it; "
		     "scratch %.1f MiB", t.cuda_first.mallocs, t.cuda_first.bytes / 1048576.0,
		     st.mallocs - t.cuda_first.mallocs, st.scratch_bytes / 1048576.0);
	}
out:
	trainer_free(&t);
	if (ret == 0)
		dist_finalize(&t.dist);
	/* on failure this rank exits without MPI_Finalize, and the launcher ends the others */
	return ret;
}
