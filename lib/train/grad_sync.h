/*
 * grad_sync.h - the data-parallel gradient reduction in buckets (Megatron's
 * DistributedDataParallel with --overlap-grad-reduce): the flat gradient
 * buffer is cut into buckets of whole parameters, each summed over the group
 * (all-reduce, or reduce-scatter onto each rank's optimizer shard with the
 * distributed optimizer). With overlap, a bucket's non-blocking collective
 * starts as soon as the last micro-batch's backward has finished every
 * parameter in it, and runs while backward goes on; without, one bucket
 * covers everything and is reduced after backward, as before.
 *
 * With bf16 set, every bucket is rounded to bf16 before its reduction and
 * its result after it (Megatron's --grad-reduce-in-bf16, approximated: see
 * the field).
 *
 * Parameters that other groups still have to sum first (the norms under
 * sequence parallelism, the tied embeddings over a pipeline) are kept out of
 * the overlapped buckets: they form "late" buckets that grad_sync_late()
 * reduces after those sums, since a reduce-scatter leaves only this rank's
 * shard of a tensor valid.
 *
 * One reduction may cover a region of the flat buffers (grad_sync_init_part):
 * under expert parallelism the experts, which sit after every other tensor,
 * are summed over the expert-data-parallel group and everything else over
 * the data-parallel one, two reductions side by side, each sharding its
 * own region with the distributed optimizer.
 */
#ifndef MEGAC_TRAIN_GRAD_SYNC_H
#define MEGAC_TRAIN_GRAD_SYNC_H

#include <stdbool.h>
#include <stddef.h>

#include "dist/dist.h"
#include "kernels/ops.h"
#include "tensor/params.h"

struct grad_bucket {
	size_t lo, hi;   /* elements of the flat buffer */
	int pending;     /* parameters whose gradient is not final yet */
	bool late;       /* reduced by grad_sync_late() */
	bool started;
	struct dist_req req;
};

struct grad_sync {
	const struct kops *k; /* the backend holding the grads (copies of the shard) */
	struct dist_group *g;
	struct param_registry *reg;
	size_t base, end;     /* the region of the flat buffers this reduction covers */
	size_t lo, hi;        /* this rank's optimizer shard of it (all of it when not sharded) */
	bool sharded;
	bool overlap;
	int nb;
	struct grad_bucket *b;
	int *bucket_of;       /* [reg->n], -1 for a parameter outside this reduction */
	bool check;           /* count non-finite gradients of each bucket before it is reduced */
	/* gradients reduced in bf16 (--grad-reduce-in-bf16, Megatron's bf16 main
	 * grads): each bucket is rounded to bf16 before its reduction and the
	 * sum, this rank's part of it, after; the buffer stays fp32, so this is
	 * the bf16 wire's rounding, not its bytes, and the micro-batches still
	 * accumulate in fp32 */
	bool bf16;
	size_t nonfinite;     /* how many this iteration (Megatron's check_for_nan_in_grad) */
};

/*
 * Buckets of at most bucket_elems elements (a parameter larger than that is
 * a bucket of its own), in backward order (from the end of the buffer).
 * late_flags: parameter flags that make a parameter late. Sharded, each
 * bucket's sum lands in place, in this rank's shard reg->grad[lo, hi): no
 * shard-sized buffer is kept.
 */
void grad_sync_init(struct grad_sync *s, const struct kops *k, struct param_registry *reg, struct dist_group *g,
		    size_t lo, size_t hi, bool sharded, size_t bucket_elems, bool overlap, unsigned late_flags);
/* The same over the parameters in [base, end) of the flat buffers (whole
 * tensors); lo, hi: the shard inside it, sharded over that region. */
void grad_sync_init_part(struct grad_sync *s, const struct kops *k, struct param_registry *reg, struct dist_group *g,
			 size_t base, size_t end, size_t lo, size_t hi, bool sharded, size_t bucket_elems, bool overlap,
			 unsigned late_flags);
void grad_sync_free(struct grad_sync *s);
/* A zeroed grad_sync (never initialised) is a reduction with nothing to
 * do: every call below returns at once (Megatron-FSDP's levels 2 and 3,
 * which reduce in the model's hooks). */
/* Start of an iteration's backward passes: every bucket pending again
 * (and the non-finite count zero). */
void grad_sync_begin(struct grad_sync *s);
/* Parameter idx has its final gradient (overlap only; ignored otherwise,
 * and for a parameter outside this reduction). */
void grad_sync_param_ready(struct grad_sync *s, int idx);
/* After backward: start what has not started (all non-late buckets) and
 * wait for them. */
void grad_sync_finish(struct grad_sync *s);
/* The late buckets, after the other groups' sums; then the whole shard is
 * in reg->grad[lo, hi). */
void grad_sync_late(struct grad_sync *s);

#endif
