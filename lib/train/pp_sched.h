/*
 * pp_sched.h - the order in which a pipeline rank runs the forward and
 * backward passes of one iteration: Megatron's 1F1B schedule (warmup
 * forwards, steady one-forward-one-backward, cooldown backwards) and its
 * interleaved form over several model chunks per rank
 * (schedules.py: forward_backward_pipelining_without_interleaving and
 * _with_interleaving, get_schedule_table). A pure function of the layout, so
 * it is tested on its own, including that the ranks cannot deadlock.
 */
#ifndef MEGAC_TRAIN_PP_SCHED_H
#define MEGAC_TRAIN_PP_SCHED_H

#include <stdbool.h>

enum pp_kind { PP_FORWARD, PP_BACKWARD };

struct pp_op {
	enum pp_kind kind;
	int chunk;  /* model chunk on this rank (0..vpp) */
	int micro;  /* micro-batch of the iteration (0..m) */
};

struct pp_sched {
	int pp, rank, vpp, m, group;
	int warmup;        /* Megatron's num_warmup_microbatches */
	int nops;
	struct pp_op *ops; /* 2·m·vpp passes (m·vpp when forward_only) */
	int *inflight;     /* [vpp]: most micro-batches a chunk holds at once */
	int *last_bwd;     /* [vpp]: index in ops of the chunk's last backward (-1: none) */
};

/*
 * The schedule of pipeline rank `rank` of pp, vpp chunks per rank, m
 * micro-batches, `group` micro-batches per virtual stage (-1: pp, Megatron's
 * default; only used when vpp > 1). forward_only: evaluation, every forward
 * in order. error() naming the flag and -1 when Megatron refuses the
 * combination (interleaving with m not a multiple of the group, ...).
 */
int pp_sched_init(struct pp_sched *s, int pp, int rank, int vpp, int m, int group, bool forward_only);
void pp_sched_free(struct pp_sched *s);

/* Where a chunk's activations come from and go to: the previous stage's
 * same chunk, or for rank 0 the last rank's previous chunk (and back). *rank
 * gets the pipeline rank, *chunk its chunk; false at either end of the model. */
bool pp_sched_prev(const struct pp_sched *s, int chunk, int *rank, int *prev_chunk);
bool pp_sched_next(const struct pp_sched *s, int chunk, int *rank, int *next_chunk);

#endif
