/*
 * trainer.h - GPT pretraining on one process: Megatron's pretrain() loop
 * (training.py) with its data order, gradient accumulation, loss averaging,
 * optimizer step, schedules, loss scaling, evaluation, logging, exit rules
 * and checkpoints. The command (train_command.c) builds a trainer from the
 * flags; train_ckpt.c saves and restores its state.
 */
#ifndef MEGAC_TRAIN_TRAINER_H
#define MEGAC_TRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "base/args.h"
#include "data/gpt_data.h"
#include "data/sft_data.h"
#include "data/batch_schedule.h"
#include "data/tok.h"
#include "dist/dist.h"
#include "kernels/cuda_ops.h"
#include "kernels/device.h"
#include "model/gpt.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"
#include "optim/lr_sched.h"
#include "tensor/mem.h"
#include "train/batch.h"
#include "train/fsdp.h"
#include "train/grad_sync.h"
#include "train/health.h"
#include "train/metrics.h"
#include "train/param_gather.h"
#include "train/pp_sched.h"
#include "train/tboard.h"
#include "train/timers.h"

/*
 * The optimizer in parts: part 0 holds every parameter, or under expert
 * parallelism all but the experts, which part 1 holds (they sit after
 * everything else in the flat buffers, gpt.h). Each part is reduced over
 * its own group, data-parallel or expert-data-parallel, and with
 * --use-distributed-optimizer sharded over it and gathered back, as
 * Megatron keeps separate buffers for the experts.
 */
struct train_part {
	struct dist_group *g;   /* where its gradients are reduced and its shards live */
	size_t base, end;       /* its region of the flat buffers */
	bool sharded;           /* the distributed optimizer with more than one rank in g */
	struct adam opt;        /* Adam over its shard [opt.lo, opt.hi) */
	struct grad_sync gs;    /* the gradient reduction, in buckets */
	struct param_gather pg; /* the distributed optimizer's parameter all-gather, in buckets */
};

struct trainer {
	const struct args *a;
	/* --ckpt-format torch_dist or fsdp_dtensor: the flags as given (a: the same, saving its
	 * HDF5 checkpoints in a staging folder) and Megatron's folder, --save,
	 * which each committed save is exported to (train_megatron.c) */
	const struct args *user_args;
	const char *torch_dist_save;
	struct dist dist;
	struct dist_group *gdp; /* where gradients are reduced: data-parallel (with context-parallel under CP) */
	struct gpt_fp8_config fp8; /* --fp8-format and its recipe (off: fp8.on false) */
	const struct kops *k;
	struct mem_pool mem;
	struct tokenizer *tok;
	struct gpt_data_config dcfg;
	int cuda_device;       /* the GPU this rank computes on, -1 on the CPU */
	struct device_choice device; /* chosen before MPI_Init (setup) */
	struct kops_cuda_stats cuda_first; /* device allocations after the first iteration */
	struct gpt_data data;
	/* --sft: the conversations' datasets, their tokenizer and this rank's session (sft.data used instead of data) */
	struct sft_data sft;
	struct sft_tokenizer *sft_tok;
	struct tok_session *sft_sess;
	bool doc_masks;    /* attention within documents: --reset-attention-mask, or --sft's conversations */
	bool own_positions; /* the batch's position ids reach the model: --reset-position-ids, or --sft */
	struct gpt_config cfg;
	struct gpt_model model;
	struct train_part part[2];
	int nparts;
	struct fsdp fsdp;      /* Megatron-FSDP's sharding level (0: plain data parallelism) and state */
	struct lr_sched sched;
	struct grad_scaler scaler;
	struct batch batch;
	struct batch cp_batch; /* context parallelism: this rank's positions of batch */
	float *losses;         /* host, [mbs * S] */
	struct pp_sched pp_train, pp_eval; /* this rank's order of passes (pipeline.h) */
	float **pp_dloss;      /* per slot of the chunk with the head: dL/dloss kept for its backward */
	int pp_ndloss;
	struct trainer_send { struct dist_req req; float *buf; size_t n; } *sends; /* pipeline sends in flight */
	size_t nsends, cap_sends;
	struct trainer_send *spare; /* staging buffers of finished sends, for the next ones */
	size_t nspare, cap_spare;

	int64_t mbs, gbs, num_micro; /* micro-batch, global batch, micro-batches per iteration */
	/* --step-batch-size-schedule: gbs and num_micro follow it (trainer_update_batch);
	 * args_gbs is Megatron's args.global_batch_size (micro-batch x DP then),
	 * which its LR schedule and evaluation batches use */
	struct batch_schedule bss;
	bool have_bss;
	int64_t args_gbs, eval_gbs;
	int pp_micro;          /* the micro-batches pp_train was built for */
	int pp_group;          /* --microbatch-group-size-per-virtual-pipeline-stage, -1: the default */
	int64_t train_iters;
	uint64_t seed;

	/* state that checkpoints carry */
	int64_t iteration;
	int64_t consumed_train, consumed_valid, skipped_train;
	double flops_so_far;

	/* mixture of experts: this iteration's logged losses (Megatron's
	 * reduction over layers, micro-batches and ranks), and their sums over
	 * the logging interval */
	double moe_lb_iter, moe_z_iter, moe_lb_sum, moe_z_sum;
	int moe_layers;        /* MoE layers in the whole model (the MTP depths' too, as Megatron counts) */
	/* multi-token prediction: each depth's logged loss of this iteration
	 * (Megatron's MTPLossLoggingHelper: the micro-batches' masked means,
	 * averaged over the data-parallel ranks, divided by the micro-batches)
	 * and its sum over the logging interval; [cfg.mtp] */
	double *mtp_iter, *mtp_sum;

	/* logging interval accumulators */
	double loss_sum;      /* sum of per-iteration lm losses over advanced iterations */
	int advanced, skipped_iters, nan_iters;
	int failed_saves;          /* saves that failed while training went on */
	bool stopped_together;     /* the last error was one every rank reached at once (the NaN check) */
	struct train_save *pending_save; /* --async-save: the one being written (train_ckpt.c) */
	struct health_spiky spiky; /* --check-for-spiky-loss */
	int64_t fault_hang_iter;   /* MEGAC_FAULT_HANG=ITER:RANK (tests of --hang-timeout-minutes): that rank */
	int fault_hang_rank;       /* stops in that iteration's first forward pass; -1: never */
	const char *exit_signal_name; /* --exit-signal, as Megatron names it in its exit line */
	struct timespec interval_start, train_start; /* train_start: process set-up, as Megatron */
	double paused;          /* seconds of evaluation and saving in this interval */
	double params_norm;     /* --log-params-norm: this iteration's, NAN otherwise */
	double num_zeros;       /* --log-num-zeros-in-grad: this iteration's, NAN when skipped */
	int64_t start_iteration; /* iteration the run started (or resumed) at */
	bool report_memory;
	struct tboard tb;
	bool have_tb;
	struct tboard tb_wandb; /* --wandb-project beside --tensorboard-dir: tb's mirror */
	bool have_tb_wandb;
	struct metrics mx;
	struct timers timers;  /* --timing-log-level */
	bool have_mx;
	uint64_t comm_last[12]; /* --log-comm: group byte counters at the last line */
	int64_t comm_iteration; /* ... and the iteration then */
};

/* The train program: flags in, exit status out (0, or -1 after error()). */
int train_command(const struct args *a);

/* Run the loop from t->iteration to t->train_iters (or an exit condition). */
/* The global batch in force (--step-batch-size-schedule) and its pipeline
 * schedule; error() and -1 when it does not divide into micro-batches. */
int trainer_update_batch(struct trainer *t);
int trainer_run(struct trainer *t);

/* One evaluation pass over eval_iters global batches of split, from sample
 * *consumed on (advanced): the token-weighted mean lm loss, as Megatron's
 * evaluate. -1 after error() when a batch cannot be read. */
int trainer_evaluate(struct trainer *t, int split, int64_t *consumed, double *loss);

/* The end of training: validation (continuing its sample stream) and test,
 * as Megatron prints them ("iteration N on validation set"). */
int trainer_evaluate_final(struct trainer *t);

/* Checkpoints (train_ckpt.c). Save the state of now (collective): written
 * at once, or with async by a thread of each writing rank while training
 * goes on, committed by a later train_ckpt_save_poll (a save still pending
 * is committed first). 0, or -1 after error() when it failed (nothing of it
 * is committed). */
int train_ckpt_save(struct trainer *t, bool async);
/* The pending async save, if any (collective): committed once every writer
 * is done, or with wait as soon as they are. 0 (also when nothing was
 * ready or pending), or -1 after error() when it failed. */
int train_ckpt_save_poll(struct trainer *t, bool wait);
/* On the way out after an error: wait for this rank's writing thread and
 * delete what it wrote (no collective; nothing was committed). */
void train_ckpt_save_drop(struct trainer *t);
/* Load from --load: 0 loaded, 1 nothing to load (fresh start), -1 error. */
int train_ckpt_load(struct trainer *t);
/* The same, also for a checkpoint Megatron-LM wrote (torch_dist,
 * fsdp_dtensor or legacy torch, imported through a staging folder:
 * train_megatron.c). */
int train_ckpt_load_any(struct trainer *t);
/* --ckpt-format torch_dist or fsdp_dtensor: the flags train runs with (*run: --save a
 * staging folder for its HDF5 checkpoints) and where Megatron's folder is;
 * 0, 1 when the format is megac's own (run untouched), -1 after error(). */
int train_torch_dist_args(const struct args *a, struct args *run);
/* After a committed save of iteration it (world rank 0): its export to
 * --save in Megatron's format, then the staging folder removed. */
int train_torch_dist_export(struct trainer *t, int64_t it);

/* --fp8-param-gather: every part's main weights into the model (its
 * 16-bit words and FP8 codes, gpt_copy_main_to_model), with gather the
 * sharded parts' all-gathered at once (set-up, after a load), and the
 * initial values the model kept for the optimizer dropped. Collective.
 * Nothing without FP8 weights. */
void trainer_cast_fp8_weights(struct trainer *t, bool gather);

#endif
