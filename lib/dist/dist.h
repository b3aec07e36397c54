/*
 * dist.h - the ranks of a job and their process groups (docs/design.md,
 * "One process per rank, explicit communication"):
 * every byte that moves between ranks goes through these calls, which wrap
 * MPI for host buffers and NCCL for device buffers (nccl.c), and count what
 * each group sends.
 *
 * A program started without an MPI launcher (no mpirun/srun environment)
 * runs as a single rank without initialising MPI at all: every group has
 * size 1 and every collective is a no-op, so one-process runs pay nothing.
 *
 * Byte counts follow the usual ring-algorithm volumes per rank: all-reduce of
 * n bytes over p ranks sends 2(p-1)/p n, all-gather and reduce-scatter
 * (p-1)/p n of the full buffer, broadcast n (root), point-to-point n. They
 * are the same whichever path a call takes.
 *
 * Device buffers. A process that computes on a GPU calls dist_use_device()
 * once, after dist_setup() (and after choosing its GPU). From then on every
 * call asks CUDA where its buffer lives: host memory (malloc'd or pinned)
 * goes through MPI exactly as before; device memory goes through the
 * group's NCCL communicator; device memory in a group of more than one rank
 * without one is a BUG, and a group of one rank copies on the device where
 * it would memcpy(). Before dist_use_device(), and in every CPU run, no CUDA
 * call is made and every buffer is taken for host memory. What changes for
 * callers on device buffers:
 *   - The calls keep their host semantics. A blocking call returns with the
 *     result in place; dist_wait() returns, and dist_test() says true, once
 *     the operation has completed on the GPU (the host waits for its event),
 *     so the buffers may then be read, reused or freed, and kernels queued
 *     after it see the result. (Making only the compute stream wait for the
 *     operation, on the device, would not do for the callers: pipeline.c
 *     frees a send's staging copy once dist_test() says done, grad_sync.c
 *     copies the reduced shard after dist_wait(), ring_attn.c receives into
 *     a buffer once the send that read it is waited for.) An operation
 *     starts after the kernels queued before the call (on the legacy default
 *     stream) and runs beside the ones queued after it: a non-blocking
 *     operation's buffers must stay untouched, by kernels too, until it has
 *     completed, as with MPI.
 *   - Point-to-point transfers go between neighbours (rank + 1, rank - 1) of
 *     the pipeline and context-parallel groups, or from a rank to itself.
 *     Between two ranks, messages are matched in the order posted within
 *     each tag parity (even tags, odd tags), not by tag: both ends must post
 *     them in the same order, and a receive must ask for exactly the size
 *     sent; both are checked (a BUG naming both). Both ends use device
 *     memory, or both host memory. MPI tags 32700 and 32701 are taken.
 *   - Nothing may synchronise the whole device (cudaDeviceSynchronize,
 *     MEGAC_CUDA_SYNC=1, cudaFree) while a transfer waits for a peer: it
 *     would wait for the transfer, which waits for the peer (nccl.c).
 */
#ifndef MEGAC_DIST_DIST_H
#define MEGAC_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/layout.h"

struct dist_watch; /* the stall watchdog (dist.c) */

struct dist_group {
	const char *name;   /* Megatron's name: "data-parallel", "tensor-model-parallel", ... */
	struct dist_watch *watch; /* NULL: not watched */
	void *comm;         /* the MPI communicator (NULL without MPI) */
	void *nccl;         /* its NCCL communicators (nccl.c), NULL: none */
	int rank, size;     /* this rank's index in the group, and the group's size */
	uint64_t bytes;     /* bytes this rank sent in the group's collectives */
	uint64_t calls;
};

struct dist {
	bool mpi;           /* MPI initialised (launched by mpirun, srun, ...) */
	int rank, world;
	struct dist_layout layout;
	int coords[DIST_NAXES];
	struct dist_group world_g, tp, cp, dp, dp_cp, pp, mp, emb;
	/* the expert generator's (layout.h): expert-model-parallel (the ranks
	 * that split a MoE layer's experts) and expert-data-parallel (the
	 * replicas of one set of experts, which sum its gradients); without
	 * expert parallelism ep is a group of one and edp the data-parallel
	 * ranks; expert-tensor-parallel (the ranks that split each expert's
	 * MLP, --expert-tensor-parallel-size) and expert-tensor-and-model-
	 * parallel (both: the ranks whose experts make up one replica, over
	 * which the experts' norms are summed) */
	struct dist_group ep, edp, etp, etmp;
	struct dist_watch *watch;
};

/* Join the job: MPI when a launcher started us, else one rank. Sets the
 * log prefix ("[rank R] train: ") when world > 1. error() and -1 on failure. */
int dist_init(struct dist *d, const char *prog);
/* Build every group of the layout (collective over the world). */
int dist_setup(struct dist *d, const struct dist_layout *l);
/* Device buffers from now on (see the top of this file): an NCCL
 * communicator for every group of more than one rank, from MPI (collective
 * over the world, every rank calls it), on the GPU the caller chose with
 * cudaSetDevice(); the pipeline and context-parallel groups also get their
 * point-to-point channels. Call it whenever this process computes on a GPU,
 * a single rank too. error() and -1 in a build without CUDA or without a GPU;
 * CUDA and NCCL failures die naming the call. */
int dist_use_device(struct dist *d);
/* Also frees the NCCL communicators. */
void dist_finalize(struct dist *d);
/* --distributed-timeout-minutes: a collective of this rank that waits longer
 * than `minutes` ends the process (exit 128) with a message naming the rank,
 * the call and the group, and the launcher then ends the job (nothing to
 * watch without MPI). --hang-timeout-minutes (hang_minutes > 0): when
 * dist_watchdog_progress() has not been called for that long, the process
 * ends the same way, saying where it is: the phase last set with
 * dist_watchdog_phase() and the collective it waits in, if any. Every rank
 * runs its own detector, so each says where it stopped. One watchdog
 * thread for both; <= 0 turns either off. */
void dist_watchdog_start(struct dist *d, double minutes, double hang_minutes);
/* Progress (training starts, an iteration, an evaluation, a save
 * completed); the first call arms the hang detector. */
void dist_watchdog_progress(struct dist *d);
/* What this rank does now, for the hang detector's message: a static
 * string and a number shown after it (arg < 0: none). Cheap. */
void dist_watchdog_phase(struct dist *d, const char *phase, long long arg);
/* Excuse the waits that follow (ranks waiting while rank 0 alone builds the
 * index caches or writes a checkpoint, which may take longer than the
 * timeout), or watch again. */
void dist_watchdog_pause(struct dist *d, bool pause);

/* In-place sums over a group. */
void dist_allreduce_sum_f32(struct dist_group *g, float *buf, size_t n);
void dist_allreduce_sum_f64(struct dist_group *g, double *buf, size_t n);
void dist_allreduce_max_f64(struct dist_group *g, double *buf, size_t n);
void dist_allreduce_max_f32(struct dist_group *g, float *buf, size_t n);
void dist_barrier(struct dist_group *g);
/* Broadcast n bytes from group rank root. */
void dist_bcast(struct dist_group *g, void *buf, size_t n, int root);

/* The shard [lo, hi) of n elements that group rank `rank` of `size` owns
 * (contiguous, sizes differing by at most one). */
void dist_shard(size_t n, int size, int rank, size_t *lo, size_t *hi);
/* Sum buf[0..n) over the group, leaving this rank's shard of the sum in
 * buf[lo..hi) (the rest of buf is unchanged); scratch holds hi - lo floats. */
void dist_reduce_scatter_sum_f32(struct dist_group *g, float *buf, size_t n, float *scratch);
/* Every rank's shard of buf copied to every rank (the distributed optimizer's
 * parameter all-gather). */
void dist_allgather_f32(struct dist_group *g, float *buf, size_t n);
/* n floats from every rank into every rank's out[size * n], in rank order. */
void dist_allgather_equal_f32(struct dist_group *g, const float *in, size_t n, float *out);
/* in[size * n] summed over the group; this rank's n (block `rank`) into out. */
void dist_reduce_scatter_equal_f32(struct dist_group *g, const float *in, size_t n, float *out);
/* n floats from every rank into group rank 0's out[size * n], in rank order. */
void dist_gather_equal_f32(struct dist_group *g, const float *in, size_t n, float *out);
/* Every rank's block of in[] to every other: the scount[r] floats of in
 * that follow the blocks for ranks below r go to rank r; rank r's block of
 * rcount[r] floats lands in out after those of the ranks below r. Each
 * rank's scount[r] must equal rank r's rcount[self] (MPI's rule). */
void dist_alltoallv_f32(struct dist_group *g, const float *in, const size_t *scount, float *out,
			const size_t *rcount);
/* n int32s from every rank into every rank's out[size * n], in rank order;
 * host memory only. */
void dist_allgather_i32(struct dist_group *g, const int32_t *in, size_t n, int32_t *out);
/* Every rank's shard of buf[0..n) collected into group rank 0's buf. */
void dist_gather_f32(struct dist_group *g, float *buf, size_t n);

/* ---- point-to-point (pipeline stages, the context-parallel ring) ----
 * Ranks are group ranks; messages between two ranks with the same tag
 * arrive in the order sent. Bytes sent count for the group. */
struct dist_req {
	void *req;               /* nreq MPI_Requests (a large buffer goes in pieces), NULL when none is pending */
	int nreq;
	struct dist_group *g;
	const char *what;        /* "send", "receive", ..., for the watchdog */
	void *extra;             /* memory the transfer needs until it completes (freed then) */
	void *dev;               /* an NCCL operation in flight (nccl.c), NULL when none */
	void *moves;             /* copies to make once it completes (an in-place reduce-scatter) */
};
/* Start sending / receiving n floats; buf must stay untouched until
 * dist_wait(). With a group of one rank nothing happens. */
void dist_isend_f32(struct dist_group *g, const float *buf, size_t n, int dest, int tag, struct dist_req *r);
void dist_irecv_f32(struct dist_group *g, float *buf, size_t n, int src, int tag, struct dist_req *r);
/* Complete a started transfer (no-op for an empty request). On device
 * buffers the host waits until the GPU has finished it. */
void dist_wait(struct dist_req *r);
/* Whether a started transfer has completed (then the request is empty). */
bool dist_test(struct dist_req *r);
/* Send ns floats to dest while receiving nr from src (a ring step). */
void dist_sendrecv_f32(struct dist_group *g, const float *send, size_t ns, int dest, float *recv, size_t nr,
		       int src, int tag);

/* Non-blocking collectives (the bucketed gradient reduction), completed by
 * dist_wait/dist_test like the transfers above. In-place sum of buf[0..n). */
void dist_iallreduce_sum_f32(struct dist_group *g, float *buf, size_t n, struct dist_req *r);
/* Sum the range [a, b) of buf[0..total) over the group and leave this rank's
 * part of it, the intersection with its dist_shard() of total, at the
 * matching place of scratch (which holds the rank's whole shard), or with
 * scratch NULL in place: at its own place in buf (the rest of the range is
 * left undefined), so no shard-sized buffer is needed (Megatron's
 * reduce-scatter into the rank's view of the bucket). */
void dist_ireduce_scatter_range_f32(struct dist_group *g, float *buf, size_t total, size_t a, size_t b,
				    float *scratch, struct dist_req *r);

/* Every rank's part of the range [a, b) of buf[0..total) (the intersection
 * with its dist_shard() of total) to every rank, in place. */
void dist_iallgather_range_f32(struct dist_group *g, float *buf, size_t total, size_t a, size_t b,
			       struct dist_req *r);
/* The same for 16-bit elements (the bf16/fp16 model weights). */
void dist_iallgather_range_u16(struct dist_group *g, uint16_t *buf, size_t total, size_t a, size_t b,
			       struct dist_req *r);
/* A map from elements to bytes: element e (0 <= e <= total, of the
 * buffer passed with it) starts at byte at(ctx, e); at is
 * non-decreasing, and at(ctx, e + 1) - at(ctx, e) is the element's
 * size plus any padding after it. */
struct dist_bytemap {
	size_t (*at)(const void *ctx, size_t e);
	const void *ctx;
};
/* dist_iallgather_range_f32's all-gather for such storage: every rank's
 * part of the elements [a, b) of a buffer of total elements (its
 * dist_shard() of total, intersected with [a, b)) goes to every rank as
 * the bytes [at(x), at(y)) of that part [x, y), in place. The map is read
 * during the call only (at() is called a few times per rank and piece, with
 * the same answers on every rank); the bytes counted are those of [at(a),
 * at(b)), as an all-gather of that many bytes. */
void dist_iallgather_range_mapped(struct dist_group *g, void *buf, size_t total, size_t a, size_t b,
				  const struct dist_bytemap *map, struct dist_req *r);

/* Blocking transfers of n bytes, sent in pieces MPI's int counts allow
 * (the receiver must ask for the same n: a different size is a BUG). With a
 * group of one rank nothing happens. Bytes sent count for the group. */
void dist_send_bytes(struct dist_group *g, const void *buf, size_t n, int dest, int tag);
void dist_recv_bytes(struct dist_group *g, void *buf, size_t n, int src, int tag);

/* Megatron-FSDP (lib/train/fsdp.h): elements [a, b) of a buffer of total
 * elements sharded by dist_shard(total), each rank holding its shard
 * [lo, hi) apart. Blocking.
 * reduce_scatter_part: in[0..b-a) summed over the group; this rank's part
 * (its shard's intersection with [a, b)) into out[0..).
 * allgather_part: every rank's part from its shard storage (shard[0] is
 * its element lo) into dst[0..b-a), elements of esize bytes (2 or 4). */
void dist_reduce_scatter_part_f32(struct dist_group *g, const float *in, size_t total, size_t a, size_t b,
				  float *out);
void dist_allgather_part(struct dist_group *g, const void *shard, size_t esize, size_t total, size_t a, size_t b,
			 void *dst);

/* "Last rank" of Megatron's print_rank_last. */
bool dist_is_last(const struct dist *d);

#endif
