/*
 * batch_schedule.h - Megatron's --step-batch-size-schedule: a global batch
 * size that steps up as training consumes samples
 * (megatron/core/num_microbatches_calculator.py, StepBatchsize...).
 *
 * The text is "THRESHOLD:SIZE ..." (spaces or commas between entries);
 * numbers take the suffixes K, M, B, T (1e3 ... 1e12) and decimals, read as
 * Python's int(float(x) * multiplier). Thresholds are tokens, turned into
 * samples by integer division by the sequence length. The entries are
 * sorted by threshold; the first must be 0, the rest strictly increasing,
 * every size positive. The size in force after `consumed` samples is that of
 * the last entry whose threshold is at most `consumed`.
 */
#ifndef MEGAC_DATA_BATCH_SCHEDULE_H
#define MEGAC_DATA_BATCH_SCHEDULE_H

#include <stdint.h>

struct batch_schedule {
	int n;
	int64_t *threshold; /* samples, ascending, [0] == 0 */
	int64_t *size;      /* global batch size from that threshold on */
};

/* error() naming the entry and -1 on bad text. */
int batch_schedule_parse(struct batch_schedule *s, const char *text, int64_t seq_length);
void batch_schedule_free(struct batch_schedule *s);
/* The global batch size after `consumed` samples. */
int64_t batch_schedule_size(const struct batch_schedule *s, int64_t consumed);
/* The largest size of the schedule. */
int64_t batch_schedule_max(const struct batch_schedule *s);
/* Samples consumed by the first `iters` iterations. */
int64_t batch_schedule_samples(const struct batch_schedule *s, int64_t iters);
/* Iterations until at least `samples` are consumed (Megatron's
 * update_train_iters for --train-samples). */
int64_t batch_schedule_iters(const struct batch_schedule *s, int64_t samples);

#endif
