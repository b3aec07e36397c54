/*
 * pipeline.h - one iteration's forward and backward passes on this rank, in
 * the order of its pipeline schedule (pp_sched.h): activations received from
 * the previous stage before a forward and sent on after it, gradients the
 * other way round. Without pipeline parallelism the schedule is forward,
 * backward, forward, backward..., so this is also the plain gradient
 * accumulation loop.
 *
 * Sends never block (a copy goes out with MPI_Isend and is reaped when
 * done); a pass blocks only on the receive it needs. pp_sched's simulation
 * shows the schedules cannot deadlock under exactly this rule.
 */
#ifndef MEGAC_TRAIN_PIPELINE_H
#define MEGAC_TRAIN_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "train/pp_sched.h"

struct trainer;

/*
 * The passes of one iteration of `split` from sample `consumed` on: forward
 * only (evaluation, train false) or forward and backward with the loss
 * gradient scaled by `scale`. On the rank with the head, *num and *den gain
 * the masked loss sum and the mask sum of its micro-batches (others add 0).
 * -1 after error() when a batch cannot be read.
 */
int pipeline_run(struct trainer *t, const struct pp_sched *s, int split, int64_t consumed, bool train,
		 double scale, double *num, double *den);
/* Wait for every send still in flight (end of the iteration) and free them. */
void pipeline_drain(struct trainer *t);
/* The staging buffers of pipeline sends, at the end of a run. */
void pipeline_free(struct trainer *t);

#endif
