/*
 * trainer.c - the training loop (see trainer.h). One iteration is
 * Megatron's train_step: num_micro forward/backward passes accumulate
 * gradients, then unscale + overflow check (fp16), grad norm, clip, Adam,
 * scheduler step. Then, in Megatron's order: log, evaluate, save, exit checks.
 */
#include "train/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/pyjson.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "kernels/cuda_ops.h"
#include "kernels/profile.h"
#include "train/pipeline.h"
#include "train/trainlog.h"

/* --exit-signal's arrival for --exit-signal-handler. A signal handler can
 * only talk through a global; this is the one piece of global mutable state. */
static volatile sig_atomic_t trainer_got_signal;

static void on_exit_signal(int sig)
{
	(void)sig;
	trainer_got_signal = 1;
}

/* The signals --exit-signal names (the flag's choices). */
static int exit_signal_number(const char *name)
{
	static const struct {
		const char *name;
		int sig;
	} sigs[] = { { "SIGTERM", SIGTERM }, { "SIGINT", SIGINT }, { "SIGUSR1", SIGUSR1 },
		     { "SIGUSR2", SIGUSR2 }, { "SIGHUP", SIGHUP }, { "SIGQUIT", SIGQUIT } };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (!strcmp(name, sigs[i].name))
			return sigs[i].sig;
	BUG("--exit-signal %s passed the flag's choices", name);
}

static double secs_since(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) + 1e-9 * (double)(now.tv_nsec - t0->tv_nsec);
}

/* The sum of squares of this rank's parameters or gradients, or the
 * gradients' zeros, in the optimizer's elements, every tensor of the model once
 * over the whole job: each part's shards over its group (distributed
 * optimizer), the dense part's slices over TP, the experts' over expert TP
 * and EP (Megatron's expert-tensor-and-model-parallel group: each EP rank
 * holds its own experts, each expert-TP rank its slices), stages over PP. */
enum trainer_stat { STAT_PARAMS_SUMSQ, STAT_GRADS_SUMSQ, STAT_GRADS_ZEROS };

static double trainer_stat(struct trainer *t, enum trainer_stat what)
{
	bool rep = t->dist.tp.rank == 0;
	double ss = 0;
	for (int i = 0; i < t->nparts; i++) {
		struct train_part *p = &t->part[i];
		double s = what == STAT_GRADS_SUMSQ ? adam_grad_sumsq(&p->opt, rep) :
			   what == STAT_GRADS_ZEROS ? adam_grad_zeros(&p->opt, rep) : adam_params_sumsq(&p->opt, rep);
		if (p->sharded)
			dist_allreduce_sum_f64(p->g, &s, 1);
		dist_allreduce_sum_f64(i == 1 ? &t->dist.etmp : &t->dist.tp, &s, 1);
		ss += s;
	}
	dist_allreduce_sum_f64(&t->dist.pp, &ss, 1);
	return ss;
}

/* L2 norm of all parameters. */
static double trainer_params_norm(struct trainer *t)
{
	return sqrt(trainer_stat(t, STAT_PARAMS_SUMSQ));
}

/* Megatron's check_for_nan_in_loss_and_grad, on this rank's own loss sum
 * (last pipeline stage) and gradients (each bucket before its reduction):
 * a rank that found one says what, and every rank stops naming the lowest
 * rank that did. Collective. */
static int nan_stop(struct trainer *t, double local_num)
{
	size_t grads = 0;
	for (int i = 0; i < t->nparts; i++)
		grads += t->part[i].gs.nonfinite;
	grads += t->fsdp.nonfinite;
	int me = t->dist.rank, W = t->dist.world;
	long long it = (long long)t->iteration + 1;
	bool bad_loss = !isfinite(local_num), bad_grad = grads > 0;
	if (bad_loss)
		error("iteration %lld: found %s in the local forward loss on rank %d", it, isnan(local_num) ? "NaN" : "Inf",
		      me);
	if (bad_grad)
		error("iteration %lld: found NaN or Inf in the local gradients on rank %d (%zu bucket%s)", it, me, grads,
		      grads == 1 ? "" : "s");
	/* the lowest rank of each kind: W - rank, maximised */
	double who[2] = { bad_loss ? W - me : 0, bad_grad ? W - me : 0 };
	dist_allreduce_max_f64(&t->dist.world_g, who, 2);
	if (who[0] == 0 && who[1] == 0)
		return 0;
	t->stopped_together = true;
	int r = who[0] > 0 ? W - (int)who[0] : W - (int)who[1];
	return error("iteration %lld: stopping: rank %d found %s (--no-check-for-nan-in-loss-and-grad trains on; "
		     "a too high --lr, or a bad batch?)", it, r,
		     who[0] > 0 ? "a non-finite local loss" : "non-finite local gradients");
}

/* One iteration. *loss is the iteration's lm loss; *skipped when the fp16
 * scaler found an overflow; *gnorm the pre-clip grad norm (NAN if skipped). */
static int train_step(struct trainer *t, double *loss, bool *skipped, double *gnorm)
{
	const struct kops *k = t->k;
	struct param_registry *reg = &t->model.reg;
	if (reg->grad) /* Megatron-FSDP levels 2 and 3 have none: fsdp_begin zeroes their shard */
		k->zero(reg->grad, reg->total);
	fsdp_begin(&t->fsdp);
	double scale = grad_scaler_scale(&t->scaler);
	double num = 0, den = 0;
	/* Megatron's check_for_nan_in_loss_and_grad, off while the loss is
	 * scaled (fp16: an overflow is then expected, and the scaler skips the
	 * step) */
	bool nan_check = t->a->check_for_nan_in_loss_and_grad && !grad_scaler_checks_overflow(&t->scaler);
	for (int i = 0; i < t->nparts; i++) {
		t->part[i].gs.check = nan_check;
		grad_sync_begin(&t->part[i].gs);
	}
	t->fsdp.check = nan_check;
	timers_start(&t->timers, "forward-backward", 1);
	/* on a failure this rank stops without waiting for its sends: a peer
	 * that failed too would never take them */
	if (pipeline_run(t, &t->pp_train, GPT_TRAIN, t->consumed_train, true, scale, &num, &den) < 0)
		return -1;
	pipeline_drain(t);
	timers_stop(&t->timers, "forward-backward");
	dist_watchdog_phase(&t->dist, "the reductions after backward", -1);
	for (int i = 0; i < t->nparts; i++) /* a rank without forward work still owes its gathers */
		param_gather_finish(&t->part[i].pg);
	timers_start(&t->timers, "layernorm-grads-all-reduce", 1);
	gpt_sp_sync_grads(&t->model); /* sequence parallelism: the norms' shard gradients */
	timers_stop(&t->timers, "layernorm-grads-all-reduce");
	timers_start(&t->timers, "embedding-grads-all-reduce", 1);
	/* tied embeddings over a pipeline: the first stage's word embeddings and
	 * the last stage's copy get the sum of both gradients (Megatron's
	 * _allreduce_word_embedding_grads), so the two stay equal */
	for (int i = 0; t->dist.emb.size > 1 && i < reg->n; i++)
		if (reg->p[i].flags & PARAM_TIED)
			dist_allreduce_sum_f32(&t->dist.emb, gpt_grad(&t->model, i), reg->p[i].numel);
	timers_stop(&t->timers, "embedding-grads-all-reduce");
	/* data parallelism: the loss sums and the gradients of all replicas; each
	 * replica's gradient is a mean over its micro-batches, so the sum over dp
	 * is scaled by 1/dp (Megatron's DDP gradient_scaling_factor). With context
	 * parallelism the CP ranks' gradients and loss sums are parts of the same
	 * micro-batches: everything sums over dp x cp, still scaled by 1/dp. The loss
	 * lives on the last pipeline stage; the sum over pp gives every rank the
	 * same verdict on it. */
	double local_num = num, sums[2] = { num, den };
	dist_allreduce_sum_f64(t->gdp, sums, 2);
	dist_allreduce_sum_f64(&t->dist.pp, sums, 2);
	num = sums[0];
	den = sums[1];
	/* From here on only each part's optimizer elements [lo, hi) matter: all
	 * of them, or this rank's shard with the distributed optimizer, whose
	 * gradients a reduce-scatter delivers (ZeRO-1). The buckets not started
	 * during backward, then those that waited for the sums above
	 * (grad_sync.h); the experts' gradients too are scaled by 1/dp, as
	 * Megatron's DDP scales them. */
	timers_start(&t->timers, "all-grads-sync", 1);
	dist_watchdog_phase(&t->dist, "the gradient reduction", -1);
	for (int i = 0; i < t->nparts; i++) {
		struct train_part *p = &t->part[i];
		grad_sync_finish(&p->gs);
		grad_sync_late(&p->gs);
		if (t->a->calculate_per_token_loss) /* Megatron's finalize_model_grads: sums over the tokens */
			k->scale(p->opt.grad, (float)(1.0 / fmax(1.0, den)), p->opt.hi - p->opt.lo);
		else if (t->gdp->size > 1)
			k->scale(p->opt.grad, 1.0f / (float)t->dist.dp.size, p->opt.hi - p->opt.lo);
	}
	timers_stop(&t->timers, "all-grads-sync");
	if (nan_check && nan_stop(t, local_num) < 0)
		return -1;
	/* A global batch with every token masked has no loss (Megatron: 0/0). */
	*loss = den > 0 ? num / den : NAN;
	timers_start(&t->timers, "optimizer", 1);
	for (int i = 0; scale != 1.0 && i < t->nparts; i++)
		k->scale(t->part[i].opt.grad, grad_scaler_inv_scale(&t->scaler), t->part[i].opt.hi - t->part[i].opt.lo);
	*skipped = false;
	*gnorm = NAN;
	t->num_zeros = NAN; /* a skipped step has none, as Megatron's */
	if (grad_scaler_checks_overflow(&t->scaler)) {
		double found = 0;
		for (int i = 0; i < t->nparts; i++)
			found += k->nonfinite(t->part[i].opt.grad, t->part[i].opt.hi - t->part[i].opt.lo) != 0;
		/* every rank checked its own elements: the verdict is the whole job's */
		dist_allreduce_max_f64(&t->dist.world_g, &found, 1);
		grad_scaler_update(&t->scaler, found > 0);
		if (found > 0) {
			if (t->model.soff) /* as after a step (below) */
				gpt_fp8_update(&t->model, t->gdp);
			*skipped = true;
			timers_stop(&t->timers, "optimizer");
			return 0;
		}
	}
	/* the global norm (each tensor once: the tied copy is left out) */
	double norm = sqrt(trainer_stat(t, STAT_GRADS_SUMSQ));
	/* and the reduced ones (the local checks above catch a NaN first) */
	if (nan_check && (!isfinite(norm) || !isfinite(num))) {
		t->stopped_together = true; /* every rank has the same norm and loss */
		return error("iteration %lld: the %s is %s (a too high --lr, or a bad batch?); stopping as "
			     "Megatron's NaN check does",
			     (long long)t->iteration + 1, isfinite(num) ? "gradient norm" : "loss",
			     isnan(isfinite(num) ? norm : num) ? "NaN" : "infinite");
	}
	*gnorm = norm;
	dist_watchdog_phase(&t->dist, "the optimizer step", -1);
	for (int i = 0; i < t->nparts; i++)
		adam_clip(&t->part[i].opt, norm, t->a->clip_grad);
	/* Megatron's count_zeros: after clipping, every tensor once */
	if (t->a->log_num_zeros_in_grad)
		t->num_zeros = trainer_stat(t, STAT_GRADS_ZEROS);
	/* --decoupled-lr: the embedding and output layer on their own schedule's
	 * peak and floor (Megatron's is_embedding_or_output_parameter group) */
	double lr = lr_sched_current_lr(&t->sched), emb_lr = lr;
	if (t->a->decoupled_lr >= 0)
		emb_lr = lr_sched_lr_group(&t->sched, t->sched.num_steps, t->a->decoupled_lr,
					   t->a->decoupled_min_lr >= 0 ? t->a->decoupled_min_lr : t->a->min_lr);
	for (int i = 0; i < t->nparts; i++)
		adam_step_lrs(&t->part[i].opt, lr, emb_lr, lr_sched_current_wd(&t->sched));
	if (t->model.soff) { /* FP8 weights: cast with the scales the delayed recipe's update gives now */
		gpt_fp8_update(&t->model, t->gdp);
		trainer_cast_fp8_weights(t, false);
	}
	timers_stop(&t->timers, "optimizer");
	timers_start(&t->timers, "params-all-gather", 1);
	for (int i = 0; i < t->nparts; i++) /* every rank's updated shard to every rank (or started, to land
					     * during the next forward) */
		if (t->part[i].sharded)
			param_gather_start(&t->part[i].pg);
	timers_stop(&t->timers, "params-all-gather");
	lr_sched_step(&t->sched, t->gbs);
	return 0;
}

void trainer_cast_fp8_weights(struct trainer *t, bool gather)
{
	if (!t->model.soff)
		return;
	for (int i = 0; i < t->nparts; i++) {
		struct train_part *p = &t->part[i];
		struct gpt_main_part pt = { .main = adam_main_f32(&p->opt), .lo = p->opt.lo, .hi = p->opt.hi,
					    .base = p->base, .end = p->end, .g = p->g };
		gpt_copy_main_to_model(&t->model, &pt);
	}
	for (int i = 0; gather && i < t->nparts; i++)
		if (t->part[i].sharded) {
			param_gather_start(&t->part[i].pg);
			param_gather_finish(&t->part[i].pg);
		}
	gpt_drop_initial_weights(&t->model);
}

/* What the backend holds beside the pool's buffers (the CUDA backend's
 * scratch buffers, the outgrown ones too, and cuBLASLt's workspace; 0 on
 * the CPU): counted in "allocated" and "max allocated", so the memory line
 * is everything megac holds on the device. It only grows, and report_memory
 * predicts it the same way (its backend workspace). */
static size_t trainer_backend_held(const struct trainer *t)
{
	if (t->cuda_device < 0)
		return 0;
	struct kops_cuda_stats st;
	kops_cuda_get_stats(&st);
	return st.held;
}

/* The memory split line (trainlog.h) of this rank. */
static void memory_split(struct trainer *t, struct sbuf *sb)
{
	const struct gpt_model *m = &t->model;
	size_t n = m->reg.total;
	/* Megatron-FSDP keeps only the shard's gradients (level 2) and weights (3) */
	size_t shard = m->shards.hi - m->shards.lo;
	size_t ng = t->fsdp.level >= 2 ? shard : n;
	struct trainlog_mem_split s = { .nparams = n, .grads = ng * sizeof(float), .peak = t->mem.peak + trainer_backend_held(t),
					.params = gpt_weight_bytes(m),
					.dtype = !m->w16 ? "fp32" : m->precision == GPT_FP16 ? "fp16" : m->soff ? "fp8+bf16" : "bf16" };
	/* what the pool holds: 16-bit states count 2 bytes, offloaded ones none */
	for (int i = 0; i < t->nparts; i++)
		s.optimizer += adam_device_bytes(&t->part[i].opt);
	if (t->fsdp.level >= 2) {
		for (int u = 0; u < GPT_NUNITS; u++)
			s.sharding += m->unit_n[u] * sizeof(float);
		s.sharding += t->fsdp.part_n * sizeof(float);
		if (t->fsdp.level == 3) {
			for (int v = 0; v < GPT_NVIEWS; v++)
				s.sharding += m->view_n[v] * sizeof(float);
			s.sharding += m->gather16 ? m->gather16_n * sizeof(uint16_t) : 0;
		}
	}
	trainlog_memory_split_line(sb, t->dist.rank, &s);
}

int trainer_evaluate(struct trainer *t, int split, int64_t *consumed, double *loss)
{
	double num = 0, den = 0;
	for (int64_t it = 0; it < t->a->eval_iters; it++) {
		if (pipeline_run(t, &t->pp_eval, split, *consumed, false, 1.0, &num, &den) < 0)
			return -1;
		pipeline_drain(t);
		*consumed += t->eval_gbs;
		dist_watchdog_progress(&t->dist);
	}
	double sums[2] = { num, den };
	dist_allreduce_sum_f64(t->gdp, sums, 2);
	dist_allreduce_sum_f64(&t->dist.pp, sums, 2);
	num = sums[0];
	den = sums[1];
	/* A global batch with every token masked has no loss (Megatron: 0/0). */
	*loss = den > 0 ? num / den : NAN;
	return 0;
}

static int eval_and_print(struct trainer *t, int split, const char *prefix, int64_t *consumed)
{
	bool present = t->a->sft ? t->sft.splits[split].present : t->data.splits[split].present;
	if (!present || t->a->eval_iters <= 0)
		return 0;
	double loss;
	if (trainer_evaluate(t, split, consumed, &loss) < 0)
		return -1;
	if (dist_is_last(&t->dist)) { /* Megatron's print_rank_last */
		struct sbuf sb = SBUF_INIT;
		trainlog_eval_lines(&sb, prefix, loss);
		fputs(sb.buf, stdout);
		fflush(stdout);
		sbuf_release(&sb);
	}
	if (t->have_tb) { /* Megatron writes the test pass under the same tags */
		double ppl = exp(fmin(20.0, loss));
		tboard_add_scalar(&t->tb, "lm loss validation", t->iteration, loss);
		tboard_add_scalar(&t->tb, "lm loss validation vs samples", t->consumed_train, loss);
		if (t->a->log_validation_ppl_to_tensorboard) {
			tboard_add_scalar(&t->tb, "lm loss validation ppl", t->iteration, ppl);
			tboard_add_scalar(&t->tb, "lm loss validation ppl vs samples", t->consumed_train, ppl);
		}
		tboard_flush(&t->tb);
	}
	if (t->have_mx) {
		struct metrics_field f[] = {
			METRICS_D(split == GPT_VALID ? "validation lm loss" : "test lm loss", loss),
			METRICS_D(split == GPT_VALID ? "validation lm loss PPL" : "test lm loss PPL",
				  exp(fmin(20.0, loss))),
			METRICS_I("consumed samples", t->consumed_train),
		};
		if (metrics_write(&t->mx, t->iteration, f, 3) < 0)
			return -1;
	}
	return 0;
}

/* --log-comm: bytes per iteration each group sent since the last line. */
#define COMM_GROUPS(t) { &(t)->dist.dp, &(t)->dist.dp_cp, &(t)->dist.tp, &(t)->dist.pp, &(t)->dist.cp, \
			  &(t)->dist.emb, &(t)->dist.world_g, &(t)->dist.ep, &(t)->dist.edp, &(t)->dist.etp }
#define COMM_DENSE 7 /* the groups before the expert ones, which are shown when the experts are apart only */

/* Start counting --log-comm volumes from now (set-up traffic excluded). */
static void trainer_comm_mark(struct trainer *t)
{
	struct dist_group *gs[] = COMM_GROUPS(t);
	for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
		t->comm_last[i] = gs[i]->bytes;
	t->comm_iteration = t->iteration;
}

/* --log-comm: bytes per iteration each group sent since the last such line. */
static void trainer_comm_line(struct trainer *t, struct sbuf *sb)
{
	struct dist_group *gs[] = COMM_GROUPS(t);
	uint64_t iters = (uint64_t)(t->iteration - t->comm_iteration);
	sbuf_addf(sb, "[Rank %d] communication per iteration (bytes sent by this rank)", t->dist.rank);
	for (size_t i = 0; i < (dist_experts_apart(&t->dist.layout) ? sizeof(gs) / sizeof(gs[0]) : COMM_DENSE); i++)
		sbuf_addf(sb, " | %s: %llu", gs[i]->name,
			  (unsigned long long)((gs[i]->bytes - t->comm_last[i]) / (iters ? iters : 1)));
	sbuf_addstr(sb, " |");
	trainer_comm_mark(t);
}

/* Megatron's training_log: a line every --log-interval iterations and after
 * the first iteration of a run. That first line does not reset the interval
 * (loss sums, counters, timer), so the next line covers iterations 1..N. */
static int log_iteration(struct trainer *t, double loss, bool skipped, double lr, double gnorm, bool first)
{
	const struct args *a = t->a;
	int64_t interval = a->train_log_interval > 0 ? a->train_log_interval : 1;
	bool due = t->iteration % interval == 0 || first;
	if (!due)
		return 0;
	int iters = t->advanced + t->skipped_iters;
	double elapsed = secs_since(&t->interval_start) - t->paused;
	double per_iter = iters ? elapsed / iters : 0;
	double avg = t->advanced ? t->loss_sum / t->advanced : -1;
	struct trainlog_iter it = {
		.iteration = t->iteration,
		.train_iters = t->train_iters,
		.consumed_samples = t->consumed_train,
		.skipped_samples = t->skipped_train,
		.elapsed_ms = per_iter * 1000.0,
		.tflops = a->log_throughput && per_iter > 0
				  ? gpt_flops_per_iteration(&t->cfg, t->gbs) / (per_iter * 1e12)
				  : -1,
		.learning_rate = lr,
		.global_batch_size = t->gbs,
		.lm_loss = t->advanced ? avg : -1,
		.moe_lb_on = t->cfg.E > 0 && t->cfg.router.lb != MOE_LB_NONE,
		.moe_seq_on = t->cfg.E > 0 && t->cfg.router.lb == MOE_LB_SEQ_AUX,
		.moe_z_on = t->cfg.E > 0 && t->cfg.router.z_coeff > 0,
		/* Megatron sums the MoE losses of every iteration, skipped ones too,
		 * and divides by the advanced ones, as its lm loss */
		.moe_lb = t->advanced && t->cfg.router.lb == MOE_LB_AUX ? t->moe_lb_sum / t->advanced : 0,
		.moe_seq_lb = t->advanced ? t->moe_lb_sum / t->advanced : 0,
		.moe_z = t->advanced ? t->moe_z_sum / t->advanced : 0,
		.loss_scale = grad_scaler_scale(&t->scaler),
		.grad_norm = gnorm,
		.params_norm = t->params_norm,
		.skipped_iters = t->skipped_iters,
		.nan_iters = t->nan_iters,
		.eta_s = per_iter * (double)(t->train_iters - t->iteration),
		.num_zeros_on = a->log_num_zeros_in_grad,
		.num_zeros = t->num_zeros,
		.mtp = t->cfg.mtp,
		.mtp_loss = t->mtp_sum,
		.mtp_div = t->advanced,
	};
	struct sbuf sb = SBUF_INIT;
	if (dist_is_last(&t->dist)) { /* the iteration line: print_rank_last */
		trainlog_iteration_line(&sb, &it);
		puts(sb.buf);
		sbuf_reset(&sb);
	}
	/* Megatron reports memory at logged iterations until one past the first of
	 * the run (so that the optimizer state is in it), then every
	 * --log-memory-interval; each data-parallel rank 0 prints its own. */
	bool mem_due = a->log_memory_interval > 0 && t->iteration % a->log_memory_interval == 0;
	if (t->report_memory || mem_due) {
		if (t->dist.dp.rank == 0) {
			size_t held = trainer_backend_held(t);
			trainlog_memory_line(&sb, t->dist.rank, t->iteration, t->mem.cur + held, t->mem.peak + held);
			puts(sb.buf);
			if (t->iteration == t->start_iteration + 1) {
				sbuf_reset(&sb);
				memory_split(t, &sb);
				puts(sb.buf);
			}
		}
		if (t->iteration > t->start_iteration + 1)
			t->report_memory = false;
	}
	if (t->iteration % interval == 0) { /* Megatron's timers.log, normalised by the interval */
		sbuf_reset(&sb);
		timers_report(&t->timers, &t->dist, (double)interval, &sb);
		if (sb.len)
			puts(sb.buf);
		/* --log-timers-to-tensorboard: the same maxima, in seconds per iteration */
		if (t->have_tb && a->log_timers_to_tensorboard)
			for (int i = 0; i < t->timers.nlast; i++) {
				char tag[96];
				snprintf(tag, sizeof(tag), "%s-time", t->timers.last_name[i]);
				tboard_add_scalar(&t->tb, tag, t->iteration, t->timers.last_max_s[i]);
			}
	}
	/* Megatron's --log-timers-to-tensorboard scalars of the iteration line
	 * (not after the first iteration, whose time includes the set-up) */
	if (t->have_tb && a->log_timers_to_tensorboard && !first) {
		tboard_add_scalar(&t->tb, "iteration-time", t->iteration, per_iter);
		if (it.tflops >= 0)
			tboard_add_scalar(&t->tb, "throughput", t->iteration, it.tflops);
	}
	if (t->have_tb)
		tboard_flush(&t->tb);
	if (a->log_comm && t->dist.rank == 0) {
		sbuf_reset(&sb);
		trainer_comm_line(t, &sb);
		puts(sb.buf);
	}
	fflush(stdout);
	sbuf_release(&sb);
	if (t->have_mx) {
		struct metrics_field f[20 + 64];
		char mtp_names[64][24];
		size_t n = 0;
		f[n++] = METRICS_I("consumed samples", t->consumed_train);
		f[n++] = METRICS_D("elapsed time per iteration (ms)", per_iter * 1000.0);
		f[n++] = METRICS_D("learning rate", lr);
		f[n++] = METRICS_I("global batch size", t->gbs);
		if (t->advanced)
			f[n++] = METRICS_D("lm loss", avg);
		if (!skipped)
			f[n++] = METRICS_D("lm loss of the iteration", loss);
		if (it.moe_lb_on)
			f[n++] = METRICS_D("load_balancing_loss",
					   t->cfg.router.lb == MOE_LB_AUX ? t->moe_lb_iter : 0.0);
		if (it.moe_seq_on)
			f[n++] = METRICS_D("seq_load_balancing_loss", t->moe_lb_iter);
		if (it.moe_z_on)
			f[n++] = METRICS_D("z_loss", t->moe_z_iter);
		for (int k = 0; k < t->cfg.mtp && k < 64; k++) { /* this iteration's, as the MoE losses */
			snprintf(mtp_names[k], sizeof(mtp_names[k]), "mtp_%d loss", k + 1);
			f[n++] = METRICS_D(mtp_names[k], t->mtp_iter[k]);
		}
		f[n++] = METRICS_D("loss scale", grad_scaler_scale(&t->scaler));
		if (!isnan(gnorm))
			f[n++] = METRICS_D("grad norm", gnorm);
		if (it.num_zeros_on && !isnan(it.num_zeros))
			f[n++] = METRICS_I("num zeros", (int64_t)it.num_zeros);
		f[n++] = METRICS_I("number of skipped iterations", t->skipped_iters);
		f[n++] = METRICS_I("number of nan iterations", t->nan_iters);
		f[n++] = METRICS_I("max allocated bytes", (int64_t)(t->mem.peak + trainer_backend_held(t)));
		if (metrics_write(&t->mx, t->iteration, f, n) < 0)
			return -1;
	}
	if (first && t->iteration % interval)
		return 0;
	t->loss_sum = 0;
	t->moe_lb_sum = t->moe_z_sum = 0;
	for (int k = 0; k < t->cfg.mtp; k++)
		t->mtp_sum[k] = 0;
	t->advanced = t->skipped_iters = t->nan_iters = 0;
	t->paused = 0;
	clock_gettime(CLOCK_MONOTONIC, &t->interval_start);
	return 0;
}

/* Evaluation and checkpoint saves stop the interval timer, as Megatron's
 * timers('interval-time').stop()/start() around them. */
static void pause_begin(struct timespec *t0)
{
	clock_gettime(CLOCK_MONOTONIC, t0);
}

static void pause_end(struct trainer *t, const struct timespec *t0)
{
	t->paused += secs_since(t0);
}

/* A save from the training loop. A failed save (disk full, permissions,
 * an I/O error: every rank has said why) costs the checkpoint, not the run:
 * nothing of it was committed, the tracker still names the last good one,
 * and training goes on, unless --exit-on-failed-save, or unless the run is
 * about to end (exiting: then the state would be lost, and the exit status
 * says so). */
static int save_failed(struct trainer *t, bool exiting)
{
	if (exiting || t->a->exit_on_failed_save)
		return -1;
	t->failed_saves++;
	if (t->dist.rank == 0)
		warning("the checkpoint was not saved (see above); training goes on (the latest checkpoint in %s is "
			"unchanged; --exit-on-failed-save stops instead)", t->a->save);
	return 0;
}

/* --async-save: commit the save being written once every writer is done
 * (each iteration; collective), or wait for it (exiting: the run ends
 * after it, so its failure is the run's). */
static int settle_save(struct trainer *t, bool wait, bool exiting)
{
	if (!t->pending_save)
		return 0;
	return train_ckpt_save_poll(t, wait) < 0 ? save_failed(t, exiting) : 0;
}

static int save_timed(struct trainer *t, bool exiting)
{
	struct timespec t0;
	pause_begin(&t0);
	int r = settle_save(t, true, exiting); /* one save at a time */
	if (r == 0 && train_ckpt_save(t, t->a->async_save && !exiting) < 0)
		r = save_failed(t, exiting);
	pause_end(t, &t0);
	return r;
}

/* Megatron's print_datetime, on stdout of rank 0. */
static void print_datetime(const struct trainer *t, const char *what)
{
	if (t->dist.rank != 0)
		return;
	struct sbuf sb = SBUF_INIT;
	trainlog_datetime(&sb, what);
	puts(sb.buf);
	fflush(stdout);
	sbuf_release(&sb);
}
/* Megatron's scalars (training_log), each also "vs samples". */
static void tensorboard_iteration(struct trainer *t, double loss, double lr, double gnorm)
{
	int64_t every = t->a->tensorboard_log_interval > 0 ? t->a->tensorboard_log_interval : 1;
	if (!t->have_tb || t->iteration % every)
		return;
	struct tboard *tb = &t->tb;
	int64_t it = t->iteration, n = t->consumed_train;
	double scale = grad_scaler_scale(&t->scaler);
	tboard_add_scalar(tb, "learning-rate", it, lr);
	tboard_add_scalar(tb, "learning-rate vs samples", n, lr);
	tboard_add_scalar(tb, "batch-size", it, (double)t->gbs);
	tboard_add_scalar(tb, "batch-size vs samples", n, (double)t->gbs);
	tboard_add_scalar(tb, "lm loss", it, loss);
	tboard_add_scalar(tb, "lm loss vs samples", n, loss);
	for (int k = 0; k < t->cfg.mtp; k++) { /* Megatron's MTPLossLoggingHelper: "mtp_K loss" */
		char name[32];
		snprintf(name, sizeof(name), "mtp_%d loss", k + 1);
		tboard_add_scalar(tb, name, it, t->mtp_iter[k]);
	}
	if (t->cfg.E > 0) { /* Megatron's MoE scalars, every iteration */
		if (t->cfg.router.lb != MOE_LB_NONE)
			tboard_add_scalar(tb, "load_balancing_loss", it, t->cfg.router.lb == MOE_LB_AUX ? t->moe_lb_iter : 0);
		if (t->cfg.router.lb == MOE_LB_SEQ_AUX)
			tboard_add_scalar(tb, "seq_load_balancing_loss", it, t->moe_lb_iter);
		if (t->cfg.router.z_coeff > 0)
			tboard_add_scalar(tb, "z_loss", it, t->moe_z_iter);
	}
	if (t->a->log_loss_scale_to_tensorboard) {
		tboard_add_scalar(tb, "loss-scale", it, scale);
		tboard_add_scalar(tb, "loss-scale vs samples", n, scale);
	}
	if (t->a->log_world_size_to_tensorboard) {
		tboard_add_scalar(tb, "world-size", it, t->dist.world);
		tboard_add_scalar(tb, "world-size vs samples", n, t->dist.world);
	}
	if (!isnan(gnorm)) {
		tboard_add_scalar(tb, "grad-norm", it, gnorm);
		tboard_add_scalar(tb, "grad-norm vs samples", n, gnorm);
	}
	if (t->a->log_num_zeros_in_grad && !isnan(t->num_zeros)) {
		tboard_add_scalar(tb, "num-zeros", it, t->num_zeros);
		tboard_add_scalar(tb, "num-zeros vs samples", n, t->num_zeros);
	}
	if (t->a->log_params_norm) {
		double pn = t->params_norm;
		tboard_add_scalar(tb, "params-norm", it, pn);
		tboard_add_scalar(tb, "params-norm vs samples", n, pn);
	}
	if (t->a->log_memory_to_tensorboard) { /* Megatron's CUDA allocator's numbers; megac's pool's */
		tboard_add_scalar(tb, "mem-reserved-bytes", it, (double)(t->mem.cur + trainer_backend_held(t)));
		tboard_add_scalar(tb, "mem-allocated-bytes", it, (double)(t->mem.cur + trainer_backend_held(t)));
		tboard_add_scalar(tb, "mem-max-allocated-bytes", it, (double)(t->mem.peak + trainer_backend_held(t)));
		tboard_add_scalar(tb, "mem-allocated-count", it, (double)t->mem.count);
	}
	tboard_flush(tb);
}

/* Megatron's MoE loss report (docs/moe-spec.md section 3): each layer's
 * value summed over the micro-batches, over the pipeline's stages and the
 * ranks that hold the same layers (then averaged over those), divided by
 * the micro-batches and averaged over the MoE layers. Collective. */
static void moe_iteration_stats(struct trainer *t)
{
	struct gpt_model *m = &t->model;
	if (t->cfg.E <= 0 || t->moe_layers <= 0)
		return;
	double v[2] = { m->moe.aux_sum, m->moe.zsq_sum };
	dist_allreduce_sum_f64(&t->dist.world_g, v, 2);
	double copies = (double)t->dist.world / t->dist.layout.pp; /* ranks per stage: each sums the stage's layers */
	double per = copies * (double)t->num_micro * t->moe_layers;
	t->moe_lb_iter = v[0] / per;
	t->moe_z_iter = v[1] / per;
	t->moe_lb_sum += t->moe_lb_iter;
	t->moe_z_sum += t->moe_z_iter;
	m->moe.aux_sum = m->moe.zsq_sum = 0;
	m->moe.calls = 0;
}

/* Megatron's MTP loss report: each depth's masked means summed over the
 * micro-batches of the last stage's ranks, averaged over the ranks that
 * compute them (data parallelism; TP ranks hold the same values; CP ranks
 * each their positions' share, which add up), divided by the micro-batches.
 * Collective. */
static void mtp_iteration_stats(struct trainer *t)
{
	struct gpt_model *m = &t->model;
	int D = t->cfg.mtp;
	if (D <= 0)
		return;
	double *v = xcalloc((size_t)D, sizeof(double));
	for (int k = 0; m->mtp_log && k < D; k++)
		v[k] = m->mtp_log[k];
	dist_allreduce_sum_f64(&t->dist.world_g, v, (size_t)D);
	/* the last stage's ranks, less the CP ranks that hold shares of one value */
	double copies = (double)t->dist.world / (t->dist.layout.pp * t->dist.layout.cp);
	for (int k = 0; k < D; k++) {
		t->mtp_iter[k] = v[k] / (copies * (double)t->num_micro);
		t->mtp_sum[k] += t->mtp_iter[k];
		if (m->mtp_log)
			m->mtp_log[k] = 0;
	}
	free(v);
}

/* --step-batch-size-schedule: the batch in force for the samples consumed,
 * and the pipeline schedule of its micro-batches (Megatron's
 * update_num_microbatches with its consistency check). */
int trainer_update_batch(struct trainer *t)
{
	int64_t size = t->have_bss ? batch_schedule_size(&t->bss, t->consumed_train) : t->gbs;
	int64_t per = t->mbs * t->dist.dp.size;
	if (size % per)
		return error("the global batch size %lld of --step-batch-size-schedule at %lld consumed samples is not "
			     "divisible by --micro-batch-size %lld x data-parallel size %lld", (long long)size,
			     (long long)t->consumed_train, (long long)t->mbs, (long long)t->dist.dp.size);
	if (size / per == t->pp_micro) {
		t->gbs = size;
		t->num_micro = size / per;
		return 0;
	}
	struct pp_sched s;
	if (pp_sched_init(&s, t->dist.layout.pp, t->dist.pp.rank, t->dist.layout.vpp, (int)(size / per), t->pp_group,
			  false) < 0)
		return -1;
	for (int v = 0; v < t->dist.layout.vpp; v++)
		if (s.inflight[v] > t->model.chunks[v].nslots)
			BUG("a batch of %lld holds %d micro-batches on chunk %d, whose model has %d slots", (long long)size,
			    s.inflight[v], v, t->model.chunks[v].nslots);
	pp_sched_free(&t->pp_train);
	t->pp_train = s;
	t->pp_micro = (int)(size / per);
	if (t->dist.rank == 0 && t->gbs != size)
		info("global batch size %lld from %lld consumed samples on (--step-batch-size-schedule)", (long long)size,
		     (long long)t->consumed_train);
	t->gbs = size;
	t->num_micro = size / per;
	return 0;
}

int trainer_run(struct trainer *t)
{
	const struct args *a = t->a;
	t->exit_signal_name = a->exit_signal ? a->exit_signal : "SIGTERM";
	if (a->exit_signal_handler) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_exit_signal;
		sigaction(exit_signal_number(t->exit_signal_name), &sa, NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &t->interval_start);
	t->paused = 0;
	t->start_iteration = t->iteration;
	t->report_memory = true;
	trainer_comm_mark(t);
	dist_watchdog_progress(&t->dist); /* arms --hang-timeout-minutes */
	double lr = lr_sched_current_lr(&t->sched), gnorm = NAN;
	while (t->iteration < t->train_iters) {
		double loss;
		bool skipped;
		if (trainer_update_batch(t) < 0)
			return -1;
		if (train_step(t, &loss, &skipped, &gnorm) < 0) {
			/* a stop every rank took together (the NaN check) still commits
			 * the last good checkpoint an async save was writing */
			if (t->stopped_together)
				settle_save(t, true, true);
			return -1;
		}
		/* Megatron's finalize_model_grads: the expert bias from this
		 * iteration's counts, whether or not the step was skipped */
		gpt_update_expert_bias(&t->model, t->gdp);
		/* the delayed FP8 recipe's amax histories and scales, once per
		 * iteration (with FP8 weights in the step, before their cast) */
		if (!t->model.soff)
			gpt_fp8_update(&t->model, t->gdp);
		t->iteration++;
		dist_watchdog_progress(&t->dist);
		if (settle_save(t, false, false) < 0)
			return -1;
		dist_watchdog_phase(&t->dist, "the end of iteration", t->iteration);
		moe_iteration_stats(t);
		mtp_iteration_stats(t);
		if (t->cuda_device >= 0 && t->iteration == t->start_iteration + 1)
			kops_cuda_get_stats(&t->cuda_first); /* what set-up and one iteration took */
		if (t->iteration == t->start_iteration + 1)
			kops_profile_reset(); /* MEGAC_PROFILE_OPS: the first iteration's set-up stays out */
		t->consumed_train += t->gbs;
		t->flops_so_far += gpt_flops_per_iteration(&t->cfg, t->gbs);
		if (skipped) {
			t->skipped_iters++;
			if (!isfinite(loss))
				t->nan_iters++;
		} else {
			t->advanced++;
			t->loss_sum += (float)loss;
		}
		lr = lr_sched_current_lr(&t->sched);
		/* the overlapped parameter gather lands before anything reads the
		 * weights outside the next forward */
		if (a->log_params_norm || (a->eval_interval > 0 && t->iteration % a->eval_interval == 0) ||
		    (a->save && a->save_interval > 0 && t->iteration % a->save_interval == 0) || a->exit_signal_handler ||
		    a->exit_duration_in_mins > 0 || (a->exit_interval > 0 && t->iteration % a->exit_interval == 0) ||
		    t->iteration >= t->train_iters)
			for (int i = 0; i < t->nparts; i++)
				param_gather_finish(&t->part[i].pg);
		/* collective: every rank computes it, whoever prints it */
		t->params_norm = a->log_params_norm ? trainer_params_norm(t) : NAN;
		tensorboard_iteration(t, loss, lr, gnorm);
		if (log_iteration(t, loss, skipped, lr, gnorm, t->iteration == t->start_iteration + 1) < 0)
			return -1;

		if (a->eval_interval > 0 && t->iteration % a->eval_interval == 0 && a->eval_iters > 0) {
			char prefix[64];
			snprintf(prefix, sizeof(prefix), "iteration %lld", (long long)t->iteration);
			struct timespec t0;
			pause_begin(&t0);
			if (eval_and_print(t, GPT_VALID, prefix, &t->consumed_valid) < 0)
				return -1;
			pause_end(t, &t0);
			dist_watchdog_progress(&t->dist);
		}

		/* exit checks, in Megatron's order */
		bool saved = false;
		/* every rank must take the same decision: a signal anywhere stops all */
		double got = a->exit_signal_handler ? (double)trainer_got_signal : 0.0;
		if (a->exit_signal_handler)
			dist_allreduce_max_f64(&t->dist.world_g, &got, 1);
		if (got > 0) {
			if (a->save && save_timed(t, true) < 0)
				return -1;
			char msg[96];
			snprintf(msg, sizeof(msg), "exiting program after receiving %s.", t->exit_signal_name);
			print_datetime(t, msg);
			return 0;
		}
		/* whether this iteration ends the run, known before its save: the
		 * run's last save must not fail quietly (nor its async one) */
		double minutes = 0;
		if (a->exit_duration_in_mins > 0) {
			minutes = secs_since(&t->train_start) / 60.0;
			dist_allreduce_max_f64(&t->dist.world_g, &minutes, 1);
		}
		bool by_duration = a->exit_duration_in_mins > 0 && minutes > a->exit_duration_in_mins;
		bool by_interval = a->exit_interval > 0 && t->iteration % a->exit_interval == 0;
		bool last = by_duration || by_interval || t->iteration >= t->train_iters;
		if (a->save && a->save_interval > 0 && t->iteration % a->save_interval == 0) {
			if (save_timed(t, last) < 0)
				return -1;
			saved = true;
		}
		if (by_duration) {
			if ((a->save && !saved && save_timed(t, true) < 0) || settle_save(t, true, true) < 0)
				return -1;
			char msg[64 + PYJSON_FLOAT_MAX], num[PYJSON_FLOAT_MAX];
			pyjson_float_repr(minutes, num); /* Python's str(float), as Megatron prints it */
			snprintf(msg, sizeof(msg), "exiting program after %s minutes", num);
			print_datetime(t, msg);
			return 0;
		}
		if (by_interval) {
			/* an async save still pending is committed before the exit */
			if ((a->save && !saved && save_timed(t, true) < 0) || settle_save(t, true, true) < 0)
				return -1;
			char msg[64];
			snprintf(msg, sizeof(msg), "exiting program at iteration %lld", (long long)t->iteration);
			print_datetime(t, msg);
			return 0;
		}
	}
	if (kops_profile_active()) {
		kops_profile_report(stdout, t->iteration - t->start_iteration - 1, t->dist.rank);
		fflush(stdout);
	}
	/* the end of training: Megatron's final save (unless the interval just
	 * saved it), then validation and test once more */
	if (settle_save(t, true, true) < 0)
		return -1;
	if (a->save && t->iteration != 0 && t->iteration % a->save_interval != 0 && train_ckpt_save(t, false) < 0)
		return -1;
	return trainer_evaluate_final(t);
}

int trainer_evaluate_final(struct trainer *t)
{
	const struct args *a = t->a;
	char prefix[96];
	if (a->eval_iters > 0) {
		snprintf(prefix, sizeof(prefix), "iteration %lld on validation set", (long long)t->iteration);
		/* Megatron's --skip-train validation loader starts at sample 0 */
		int64_t consumed = a->skip_train ? 0 : t->consumed_valid;
		if (eval_and_print(t, GPT_VALID, prefix, &consumed) < 0)
			return -1;
		dist_watchdog_progress(&t->dist);
		snprintf(prefix, sizeof(prefix), "iteration %lld on test set", (long long)t->iteration);
		consumed = 0;
		if (eval_and_print(t, GPT_TEST, prefix, &consumed) < 0)
			return -1;
		dist_watchdog_progress(&t->dist);
	}
	return 0;
}
