/*
 * trainlog.h - the text train prints, field for field as Megatron's
 * training_log / evaluate_and_print_results (megatron/training/training.py)
 * and report_memory (megatron/training/utils/common_utils.py), so log
 * scrapers written for Megatron keep working. Pure formatting: the trainer
 * supplies the numbers.
 */
#ifndef MEGAC_TRAIN_TRAINLOG_H
#define MEGAC_TRAIN_TRAINLOG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/sbuf.h"

struct trainlog_iter {
	int64_t iteration, train_iters;
	int64_t consumed_samples, skipped_samples;
	double elapsed_ms;       /* per iteration over the interval */
	double tflops;           /* < 0: not printed (no --log-throughput) */
	double learning_rate;    /* NAN: not printed */
	int64_t global_batch_size;
	double lm_loss;          /* < 0 (or NAN): not printed, as Megatron omits negative averages */
	double loss_scale;
	double grad_norm;        /* NAN: not printed (skipped iteration) */
	double params_norm;      /* NAN: not printed */
	int skipped_iters, nan_iters;
	/* mixture of experts, after lm loss as Megatron prints them (its names),
	 * each where its flag is set: load_balancing_loss, seq_load_balancing_loss, z_loss */
	bool moe_lb_on, moe_seq_on, moe_z_on;
	double moe_lb, moe_seq_lb, moe_z;
	/* (megac) seconds until the last iteration at this interval's pace, as a
	 * last field "time to finish: H:MM:SS |" (Megatron has none); <= 0: not printed */
	double eta_s;
	/* --log-num-zeros-in-grad: " num zeros: N |" after the grad norm where
	 * Megatron prints it (not on a skipped iteration: NAN) */
	bool num_zeros_on;
	double num_zeros;
	/* multi-token prediction: " mtp_K loss: |" for each of the mtp depths,
	 * after the MoE losses, each mtp_loss[k] / mtp_div (Megatron's average
	 * over the advanced iterations; not printed when mtp_div is 0) */
	int mtp;
	const double *mtp_loss;
	int mtp_div;
};

#define TRAINLOG_TIME_MAX 40
/* Local wall time now as Python's datetime.now() prints it: "YYYY-MM-DD HH:MM:SS.ffffff". */
void trainlog_now(char out[TRAINLOG_TIME_MAX]);
/* Megatron's print_datetime: "[what] datetime: <now> " (no newline). */
void trainlog_datetime(struct sbuf *out, const char *what);

/* " [YYYY-MM-DD HH:MM:SS.ffffff] iteration ... |" (no newline); the time is local wall time now. */
void trainlog_iteration_line(struct sbuf *out, const struct trainlog_iter *it);

/* The three evaluation lines (dashes, text, dashes), each ending in "\n":
 * prefix is e.g. "iteration 100" or "iteration 100 on validation set". */
void trainlog_eval_lines(struct sbuf *out, const char *prefix, double lm_loss);

/* "[Rank 0] (after N iterations) memory (MB) | allocated: ... | max allocated: ... | ..." */
void trainlog_memory_line(struct sbuf *out, int rank, int64_t iteration, size_t allocated, size_t max_allocated);
/* What the tensor memory of a rank is made of (megac's line, beside the
 * memory line at its first report): the model's parameters (fp32, or 16-bit
 * with --bf16/--fp16), the fp32 gradients, the optimizer's state of this
 * rank's shard (moments, and fp32 main weights of a 16-bit model), and the
 * rest of the peak (activations, scratch, workspaces); with the bytes per
 * parameter of the first three, the number Megatron's memory formula gives
 * (e.g. 6 + 12/DP for bf16 with the distributed optimizer). */
struct trainlog_mem_split {
	size_t nparams;                  /* this rank's parameters */
	size_t params, grads, optimizer; /* bytes */
	size_t peak;                     /* max allocated */
	size_t sharding;                 /* of the rest: Megatron-FSDP's unit gradients, reduce-scatter part and
					  * fp32 weight views (0 without it) */
	const char *dtype;               /* the parameters': "fp32", "bf16", "fp16" */
};
void trainlog_memory_split_line(struct sbuf *out, int rank, const struct trainlog_mem_split *s);

#endif
