/*
 * nccl.h - the device side of lib/dist: NCCL communicators for the
 * process groups, and the NCCL form of every dist_* transfer, for buffers
 * that live in GPU memory. dist.c decides which side a call takes (see
 * dist.h, "Device buffers"); nothing outside lib/dist calls these.
 *
 * Every operation is queued after the work already queued on the legacy
 * default stream (where the CUDA backend runs its kernels), on a stream of
 * its own communicator, and returns a handle that dist.c polls to
 * completion (dist_nccl_poll) with the watchdog watching, then frees.
 *
 * In a build without CUDA (no -DMEGAC_CUDA) the module is empty: nothing is
 * active, no pointer is device memory, dist_nccl_enable() says why not, and
 * the operations are never reached.
 */
#ifndef MEGAC_DIST_NCCL_H
#define MEGAC_DIST_NCCL_H

#include <stdbool.h>
#include <stddef.h>

struct dist_bytemap;
struct dist_group;
struct dist_nccl_op; /* an operation in flight */

enum dist_nccl_type { DIST_NCCL_F32, DIST_NCCL_F64 };
enum dist_nccl_red { DIST_NCCL_SUM, DIST_NCCL_MAX };

/* True when this build has the CUDA backend and with it NCCL. */
bool dist_nccl_built(void);
/* Device mode: from the first dist_nccl_enable() on, every dist call asks
 * whether its buffer is device memory. Before, and always in a CPU run, no
 * CUDA call is made and every buffer is host memory. */
int dist_nccl_enable(void);
bool dist_nccl_active(void);
/* Whether p is device memory (cudaMemoryTypeDevice); false for host memory,
 * pinned or not, for NULL, and without CUDA. */
bool dist_nccl_is_device(const void *p);

/* The group's NCCL communicator, made from its MPI communicator (collective
 * over the group: group rank 0 makes the unique id and broadcasts it), and
 * with `channels` the point-to-point channels to and from the neighbours
 * rank + 1 and rank - 1 (see nccl.c). Every rank of the job calls it for its
 * groups in the same order. Dies naming the call when CUDA or NCCL fails. */
void dist_nccl_group_init(struct dist_group *g, bool channels);
/* A one-rank communicator for a group of one rank (tests on one GPU, no MPI
 * launcher): every device call on g then goes through NCCL. */
void dist_nccl_attach_self(struct dist_group *g);
/* Waits for what is queued on the group's streams, then frees it all. */
void dist_nccl_group_free(struct dist_group *g);

/* ---- operations (the dist_* calls of the same name, on device buffers) ---- */
struct dist_nccl_op *dist_nccl_allreduce(struct dist_group *g, void *buf, size_t n, enum dist_nccl_type t,
					 enum dist_nccl_red red);
struct dist_nccl_op *dist_nccl_bcast(struct dist_group *g, void *buf, size_t bytes, int root);
/* The range [a, b) of buf[0..total) summed; this rank's part of it (the
 * intersection with its dist_shard() of total) at the matching place of
 * scratch, which holds the rank's whole shard, or in place in buf with
 * scratch NULL. copy_back: and then into buf at the same place
 * (dist_reduce_scatter_sum_f32, with a, b = 0, total). */
struct dist_nccl_op *dist_nccl_reduce_scatter_range(struct dist_group *g, float *buf, size_t total,
						    size_t a, size_t b, float *scratch, bool copy_back);
/* Every rank's part of [a, b) of buf[0..total) to every rank, in place. */
struct dist_nccl_op *dist_nccl_allgather_range(struct dist_group *g, void *buf, size_t esize, size_t total,
					       size_t a, size_t b);
/* The same with elements of varied sizes: rank r's part [x, y) goes as
 * the bytes [at(x), at(y)) of map (dist_iallgather_range_mapped). */
struct dist_nccl_op *dist_nccl_allgather_range_mapped(struct dist_group *g, void *buf, size_t total, size_t a,
						      size_t b, const struct dist_bytemap *map);
/* Megatron-FSDP's parts (dist_reduce_scatter_part_f32, dist_allgather_part):
 * in[0..b-a) summed, this rank's part into out; every rank's part (mine,
 * esize-byte elements) into dst[0..b-a). */
struct dist_nccl_op *dist_nccl_reduce_scatter_part(struct dist_group *g, const float *in, size_t total, size_t a,
						   size_t b, float *out);
struct dist_nccl_op *dist_nccl_allgather_part(struct dist_group *g, const void *mine, size_t esize, size_t total,
					      size_t a, size_t b, void *dst);
/* Every rank's shard of buf[0..n) into group rank 0's buf. */
struct dist_nccl_op *dist_nccl_gather_shards(struct dist_group *g, float *buf, size_t n);
struct dist_nccl_op *dist_nccl_allgather_equal(struct dist_group *g, const float *in, size_t n, float *out);
struct dist_nccl_op *dist_nccl_reduce_scatter_equal(struct dist_group *g, const float *in, size_t n, float *out);
struct dist_nccl_op *dist_nccl_gather_equal(struct dist_group *g, const float *in, size_t n, float *out);
/* in's blocks of scount[r] floats (in rank order) to rank r; rank r's
 * block of rcount[r] floats into out, in rank order (dist_alltoallv_f32). */
struct dist_nccl_op *dist_nccl_alltoallv(struct dist_group *g, const float *in, const size_t *scount, float *out,
					 const size_t *rcount);
/* Point-to-point, in bytes. Between two ranks, messages are matched in the
 * order posted whatever their tags; tags and sizes are checked (a BUG
 * when they differ). */
struct dist_nccl_op *dist_nccl_send(struct dist_group *g, const void *buf, size_t bytes, int dest, int tag);
struct dist_nccl_op *dist_nccl_recv(struct dist_group *g, void *buf, size_t bytes, int src, int tag);

/* Whether op has completed: its result is in place and its buffers free to
 * reuse. waiting: the caller blocks on it, so a transfer to this rank
 * itself that nothing can match any more is a BUG rather than a hang.
 * Dies when NCCL reports an asynchronous error (a peer failed). */
bool dist_nccl_poll(struct dist_nccl_op *op, bool waiting);
void dist_nccl_free(struct dist_nccl_op *op);

/* memmove() of device memory, queued on the legacy default stream (a group
 * of one rank without a communicator: the copies of the *_equal calls). */
void dist_nccl_copy(void *dst, const void *src, size_t bytes);

#endif
