/*
 * train_command.h - the train program's entry points (see train_command.c).
 */
#ifndef MEGAC_TRAIN_TRAIN_COMMAND_H
#define MEGAC_TRAIN_TRAIN_COMMAND_H

#include <stdbool.h>
#include <stddef.h>

#include "base/args.h"

struct dist_layout;

extern const struct prog_info train_prog_info;
int train_command(const struct args *a);

/* train's refusals that do not depend on the ranks of the job, and those
 * that depend on its layout only; report_memory's prediction and --advise
 * run them too, so that what they plan is what train accepts. error() and
 * -1 naming the flags. */
int train_check_flags(const struct args *a);
/*
 * The optimizer's parts of a model's flat buffers of `total` elements
 * (trainer.h): one, or two under expert parallelism (ep) when there are
 * experts (from expert_lo on). Part i's region is [base[i], end[i]); its
 * shard on this rank [lo[i], hi[i]), the region split over gsize[i] ranks
 * with --use-distributed-optimizer (dist_opt), this rank being grank[i].
 * Returns the number of parts.
 */
int train_opt_parts(size_t total, size_t expert_lo, bool ep, bool dist_opt, const int gsize[2], const int grank[2],
		    size_t base[2], size_t end[2], size_t lo[2], size_t hi[2]);
/* Flags train refuses with the layout l (error() and -1); none at present, a
 * hook shared with report_memory. */
int train_check_layout(const struct args *a, const struct dist_layout *l);

struct adam_options;
/* The optimizer's options from the flags (Adam's betas and epsilon, the
 * precision-aware optimizer's dtypes, --optimizer-cpu-offload's fraction);
 * on_host: the run computes on the CPU backend, whose memory is the host's
 * already, so nothing is offloaded. The flags have passed train_check_flags. */
void train_adam_options(const struct args *a, bool on_host, struct adam_options *o);

struct adam;
struct fsdp;
struct gpt_model;
struct kops;
struct mem_pool;
/* One optimizer part over [lo, hi) of model m's flat buffers, as train sets
 * it up and report_memory counts it: adam_init, then at Megatron-FSDP
 * level >= 2 the shards' gradients (and at level 3 weights) taken from
 * fsdp, and for a 16-bit model fp32 main weights from its words. */
void train_opt_part_init(struct adam *opt, struct gpt_model *m, const struct fsdp *fs, int level,
			 const struct kops *k, struct mem_pool *pool, const struct adam_options *o, size_t lo,
			 size_t hi);
/* Whether the gradients are reduced in bf16 (Megatron's bf16 main grads:
 * --bf16 with --grad-reduce-in-bf16, or with --main-grads-dtype bf16 unless
 * --accumulate-allreduce-grads-in-fp32). */
bool train_grads_bf16(const struct args *a);

#endif
