/*
 * nccl.c - see nccl.h: NCCL communicators for the groups of lib/dist, and
 * the NCCL form of its transfers, for buffers in GPU memory.
 *
 * Streams and ordering. The CUDA backend queues its kernels on the legacy
 * default stream ("stream 0"). Every communicator here has a stream of its
 * own, non-blocking (no implicit synchronisation with stream 0) and of the
 * highest priority (its kernels are a few CTAs that wait for a peer: they
 * should not queue behind our own compute while the peer waits). Before an
 * operation an event recorded on stream 0 is waited for on that stream, so
 * the operation sees what the kernels queued before it wrote, and kernels
 * queued before it that still read a receive buffer are done before it is
 * overwritten. After it, an event on the stream marks its end; dist.c polls
 * that event on the host (blocking calls, dist_wait, dist_test) and returns
 * only once it has fired, so when a dist call says "done" the host may read
 * or reuse the buffers and every kernel queued afterwards sees the result.
 * Stream 0 itself never waits for a transfer on the device: it always
 * makes progress, so waiting for it (the events before an operation) cannot
 * close a cycle through a peer.
 *
 * Collectives. Each group of more than one rank gets one communicator; its
 * collectives run in the order issued (NCCL orders all the operations of a
 * communicator), which MPI demands of them anyway. Uneven shards
 * (dist_shard: sizes differ by one) do not fit ncclReduceScatter and
 * ncclAllGather, which need equal counts: the range variants are one group
 * call of an ncclReduce (ncclBroadcast) per rank, each rooted at the rank
 * that owns the piece, issued in rank order on every rank.
 *
 * Point-to-point, and why channels. NCCL runs all the operations of one
 * communicator one after the other, whatever stream each was queued on
 * (each launch waits for the communicator's previous one), and an ncclSend
 * does not complete before the peer's matching ncclRecv runs. Sends and
 * receives on separate streams of one communicator would therefore still run
 * in posting order, and two ranks that each post "send to the other, then
 * receive from it" - the context-parallel ring with cp = 2 at every step, a
 * pipeline stage whose send_copy() is followed by recv_into() from the same
 * neighbour - would each sit in its send waiting for a receive queued
 * behind the peer's own send: a deadlock MPI does not have (MPI_Isend
 * returns at once and completes independently of what else is posted).
 * So a group made with channels (the pipeline and context-parallel groups)
 * gets a two-rank communicator, with its own stream on both sides, for
 * each ordered pair of neighbours (s -> s + 1 and s -> s - 1) and each lane
 * (tag parity, below): the channel s -> t carries only s's sends to t and
 * t's receives from s. On a channel the k-th send meets the k-th receive; a
 * send waits for nothing but its own receive (the earlier ones on the
 * channel were posted earlier by t), a receive for nothing but its own send,
 * and posting never blocks the host once the channel is connected: NCCL
 * connects a peer at the first transfer and blocks the host until the peer
 * posts its side, so every channel is connected when it is made
 * (connect_channel). A transfer between device buffers thus
 * completes under the same conditions as MPI's, provided
 *
 *   (1) on each channel both sides post the same sequence of tags: MPI
 *       matches by tag, NCCL by order. The lanes make this hold for our
 *       users: even and odd tags travel on separate channels. The pipeline
 *       (tag 2 chunk + kind) sends activations with even tags and gradients
 *       with odd ones; with pp = 2 and interleaving both kinds go between
 *       the same two ranks and the two sides interleave them differently,
 *       but each kind alone is in the same order on both sides (both walk
 *       the same schedule table; tests/unit/test_dist_lanes.c checks every
 *       schedule of pp <= 6, vpp <= 4, m <= 13). The ring (ring_attn.c)
 *       posts per step K, V, then dK/dV, the same on sender and receiver.
 *       Each transfer also sends a 16-byte header (tag, bytes) over MPI on
 *       the lane's own tag, which the receive checks while it waits for the
 *       data: a mismatch is a BUG naming both, not data silently landing in
 *       the wrong buffer or a receive waiting forever for bytes never sent;
 *   (2) kernels of different communicators can run at the same time on the
 *       GPU (a data-parallel all-reduce in flight while a pipeline channel
 *       waits): NCCL does not promise it, but its kernels take few CTAs and
 *       PyTorch and Megatron rely on it the same way (NCCL_LAUNCH_ORDER_
 *       IMPLICIT, which orders all NCCL launches of a GPU, must stay unset);
 *   (3) nothing synchronises the whole device while a transfer waits for
 *       its peer (cudaDeviceSynchronize, MEGAC_CUDA_SYNC=1, cudaFree): that
 *       would wait for the transfer, and the transfer for the peer.
 *
 * Creating the communicators cannot deadlock either: ncclCommInitRank
 * blocks until the communicator's other ranks call it, and every rank
 * creates the groups in the same order and within a group the channels in
 * one global order (sender, neighbour, lane); the smallest communicator
 * not yet made always has all its ranks at it.
 *
 * Transfers of a rank to itself (a group of one rank with a communicator
 * attached, for tests) are matched here by tag, as MPI would, and run as a
 * grouped ncclSend/ncclRecv on the group's communicator once both sides are
 * posted.
 */
#include "dist/nccl.h"

#include "base/error.h"
#include "dist/dist.h"

#ifdef MEGAC_CUDA

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define CUDA_CHECK(call)                                                                                \
	do {                                                                                            \
		cudaError_t nccl_ce_ = (call);                                                          \
		if (nccl_ce_ != cudaSuccess)                                                            \
			die("%s failed (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(nccl_ce_)); \
	} while (0)

#define NCCL_CHECK(call)                                                                                \
	do {                                                                                            \
		ncclResult_t nccl_rc_ = (call);                                                         \
		if (nccl_rc_ != ncclSuccess)                                                            \
			die("%s failed (%s:%d): %s (%s)", #call, __FILE__, __LINE__,                     \
			    ncclGetErrorString(nccl_rc_), ncclGetLastError(NULL));                      \
	} while (0)

/* as dist.c's DIST_CHECK */
#define MPI_CHECK(call)                                                                                 \
	do {                                                                                            \
		int nccl_mrc_ = (call);                                                                 \
		if (nccl_mrc_ != MPI_SUCCESS) {                                                         \
			char nccl_msg_[MPI_MAX_ERROR_STRING];                                           \
			int nccl_len_ = 0;                                                              \
			MPI_Error_string(nccl_mrc_, nccl_msg_, &nccl_len_);                             \
			die("%s failed (%s:%d): %s", #call, __FILE__, __LINE__, nccl_msg_);             \
		}                                                                                       \
	} while (0)

#define MCOMM(g) ((MPI_Comm)(g)->comm)

/* Lanes per channel: a message with tag t travels on lane t % LANES. */
#define LANES 2
/* The MPI tags of the headers of lane 0 and 1 (dist.h reserves them). */
#define HDR_TAG 32700

/* After how many polls a waiting receive looks, once, for a host-memory
 * message with its tag (dist.c naps 50 us between polls after the first
 * 2000: about 5 s). */
#define HINT_POLLS 100000

/* One NCCL communicator and the stream its operations run on. */
struct nccl_comm {
	ncclComm_t comm;
	cudaStream_t stream;
	cudaEvent_t ready; /* recorded on stream 0 before each operation */
};

/* g->nccl */
struct dist_nccl {
	struct nccl_comm coll;              /* collectives, and transfers to itself */
	struct nccl_comm **to, **from;      /* [size * LANES]: the channel to / from group rank r, lane l at r * LANES + l */
	struct dist_nccl_op *self_q;        /* unmatched transfers to itself, oldest first */
};

enum op_kind { OP_COLL, OP_SEND, OP_RECV };

struct dist_nccl_op {
	enum op_kind kind;
	const char *what;
	struct dist_group *g;
	struct nccl_comm *c; /* where it runs; NULL: a transfer to itself not matched yet */
	cudaEvent_t done;
	/* transfers */
	void *buf;
	size_t bytes;
	int peer, tag;
	uint64_t hdr[2];     /* (tag, bytes), the header beside a transfer between two ranks */
	MPI_Request hdr_req;
	bool hdr_pending;
	long polls;
	struct dist_nccl_op *next; /* in the queue of transfers to itself */
};

/* Device mode (dist_nccl_enable): for the process, since a call sees only
 * its group. */
static bool active;

bool dist_nccl_built(void)
{
	return true;
}

int dist_nccl_enable(void)
{
	int n = 0, dev = -1;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e == cudaSuccess && n > 0)
		e = cudaGetDevice(&dev);
	if (e != cudaSuccess || n <= 0) {
		cudaGetLastError(); /* not sticky: clear it for later callers */
		return error("device buffers in lib/dist need a GPU: %s",
			     e != cudaSuccess ? cudaGetErrorString(e) : "CUDA sees no device");
	}
	active = true;
	return 0;
}

bool dist_nccl_active(void)
{
	return active;
}

bool dist_nccl_is_device(const void *p)
{
	if (!p)
		return false;
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError(); /* CUDA before 11 says "invalid value" for plain host memory */
		return false;
	}
	return a.type == cudaMemoryTypeDevice;
}

static void comm_open(struct nccl_comm *c, int nranks, ncclUniqueId id, int rank)
{
	int least, greatest;
	CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
	CUDA_CHECK(cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest));
	CUDA_CHECK(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
	NCCL_CHECK(ncclCommInitRank(&c->comm, nranks, id, rank));
}

static void comm_close(struct nccl_comm *c)
{
	CUDA_CHECK(cudaStreamSynchronize(c->stream));
	NCCL_CHECK(ncclCommDestroy(c->comm));
	CUDA_CHECK(cudaEventDestroy(c->ready));
	CUDA_CHECK(cudaStreamDestroy(c->stream));
}

/* A channel's connection, made now: NCCL connects a point-to-point peer at
 * the first send or receive between them, and the host waits in that call
 * until the peer reaches its matching one. Left to the first real
 * transfer, that wait closes a cycle whenever both ends first post a
 * receive on one channel and then a send on another (the context-parallel
 * ring: every rank receives from rank - 1 before sending to rank + 1; an
 * interleaved pipeline's first gradient and activation). Here both ends
 * have just made the channel together (ncclCommInitRank waits for both),
 * so one byte along its one direction connects it without waiting on
 * anything else. */
static void connect_channel(struct nccl_comm *c, bool sender)
{
	static void *byte; /* one device byte per process, never freed (cudaFree would wait for the device) */
	if (!byte)
		CUDA_CHECK(cudaMalloc(&byte, 16));
	if (sender)
		NCCL_CHECK(ncclSend(byte, 1, ncclUint8, 1, c->comm, c->stream));
	else
		NCCL_CHECK(ncclRecv(byte, 1, ncclUint8, 0, c->comm, c->stream));
	CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

/* The channels of a group, from its MPI communicator: each rank s makes the
 * ids of its outgoing channels (to s + 1 and, when that is another rank, to
 * s - 1, each lane), every rank learns all of them, and every rank walks the
 * list in the same order joining the ones it is an end of (the deadlock
 * argument at the top). */
static void open_channels(struct dist_group *g, struct dist_nccl *n)
{
	const int p = g->size, me = g->rank, nout = p > 2 ? 2 : 1, per = 2 * LANES;
	ncclUniqueId *all = xcalloc((size_t)p * per, sizeof(*all)), mine[2 * LANES];
	memset(mine, 0, sizeof(mine));
	for (int j = 0; j < nout * LANES; j++)
		NCCL_CHECK(ncclGetUniqueId(&mine[j]));
	MPI_CHECK(MPI_Allgather(mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, MCOMM(g)));
	n->to = xcalloc((size_t)p * LANES, sizeof(*n->to));
	n->from = xcalloc((size_t)p * LANES, sizeof(*n->from));
	for (int s = 0; s < p; s++)
		for (int j = 0; j < nout; j++)
			for (int l = 0; l < LANES; l++) {
				int t = j == 0 ? (s + 1) % p : (s + p - 1) % p;
				ncclUniqueId id = all[(size_t)s * per + (size_t)j * LANES + (size_t)l];
				if (s == me) {
					struct nccl_comm *c = xcalloc(1, sizeof(*c));
					comm_open(c, 2, id, 0);
					connect_channel(c, true);
					n->to[(size_t)t * LANES + (size_t)l] = c;
				} else if (t == me) {
					struct nccl_comm *c = xcalloc(1, sizeof(*c));
					comm_open(c, 2, id, 1);
					connect_channel(c, false);
					n->from[(size_t)s * LANES + (size_t)l] = c;
				}
			}
	free(all);
}

/* The channels of a group in the order open_channels made them (destroyed
 * in that order: NCCL requires one order on every rank). */
static void close_channels(struct dist_group *g, struct dist_nccl *n)
{
	const int p = g->size, me = g->rank, nout = p > 2 ? 2 : 1;
	for (int s = 0; s < p; s++)
		for (int j = 0; j < nout; j++)
			for (int l = 0; l < LANES; l++) {
				int t = j == 0 ? (s + 1) % p : (s + p - 1) % p;
				struct nccl_comm **c = s == me ? &n->to[(size_t)t * LANES + (size_t)l] :
						       t == me ? &n->from[(size_t)s * LANES + (size_t)l] :
								 NULL;
				if (c && *c) {
					comm_close(*c);
					free(*c);
					*c = NULL;
				}
			}
}

void dist_nccl_group_init(struct dist_group *g, bool channels)
{
	if (g->nccl)
		BUG("%s group: a second NCCL communicator", g->name);
	if (g->size <= 1)
		return;
	if (!g->comm)
		BUG("%s group of %d ranks without an MPI communicator", g->name, g->size);
	struct dist_nccl *n = xcalloc(1, sizeof(*n));
	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	if (g->rank == 0)
		NCCL_CHECK(ncclGetUniqueId(&id));
	MPI_CHECK(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MCOMM(g)));
	comm_open(&n->coll, g->size, id, g->rank);
	if (channels)
		open_channels(g, n);
	g->nccl = n;
	active = true;
}

void dist_nccl_attach_self(struct dist_group *g)
{
	if (g->size != 1 || g->nccl)
		BUG("%s group: a one-rank NCCL communicator for a group of %d ranks%s", g->name, g->size,
		    g->nccl ? " that already has one" : "");
	if (dist_nccl_enable() < 0)
		die("cannot attach an NCCL communicator to the %s group", g->name);
	struct dist_nccl *n = xcalloc(1, sizeof(*n));
	ncclUniqueId id;
	NCCL_CHECK(ncclGetUniqueId(&id));
	comm_open(&n->coll, 1, id, 0);
	g->nccl = n;
}

void dist_nccl_group_free(struct dist_group *g)
{
	struct dist_nccl *n = g->nccl;
	if (!n)
		return;
	if (n->self_q)
		warning("%s group: a %s of rank %d to itself (tag %d) was never matched", g->name, n->self_q->what,
			g->rank, n->self_q->tag);
	/* in creation order: the group's communicator, then its channels */
	comm_close(&n->coll);
	if (n->to)
		close_channels(g, n);
	free(n->to);
	free(n->from);
	free(n);
	g->nccl = NULL;
}

/* ---- operations ---- */

static struct dist_nccl *nccl_of(struct dist_group *g)
{
	if (!g->nccl)
		BUG("%s group: an NCCL operation without a communicator", g->name);
	return g->nccl;
}

/* After what stream 0 has queued so far. */
static void begin(struct nccl_comm *c)
{
	CUDA_CHECK(cudaEventRecord(c->ready, cudaStreamLegacy));
	CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->ready, 0));
}

static struct dist_nccl_op *op_new(struct dist_group *g, enum op_kind kind, const char *what)
{
	struct dist_nccl_op *op = xcalloc(1, sizeof(*op));
	op->kind = kind;
	op->what = what;
	op->g = g;
	return op;
}

/* The end of what was just queued on c's stream is op's end. */
static struct dist_nccl_op *issued(struct dist_nccl_op *op, struct nccl_comm *c)
{
	op->c = c;
	CUDA_CHECK(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming));
	CUDA_CHECK(cudaEventRecord(op->done, c->stream));
	return op;
}

static ncclDataType_t nccl_type(enum dist_nccl_type t)
{
	return t == DIST_NCCL_F64 ? ncclFloat64 : ncclFloat32;
}

struct dist_nccl_op *dist_nccl_allreduce(struct dist_group *g, void *buf, size_t n, enum dist_nccl_type t,
					 enum dist_nccl_red red)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	begin(c);
	NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), red == DIST_NCCL_MAX ? ncclMax : ncclSum, c->comm,
				 c->stream));
	return issued(op_new(g, OP_COLL, "all-reduce"), c);
}

struct dist_nccl_op *dist_nccl_bcast(struct dist_group *g, void *buf, size_t bytes, int root)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	begin(c);
	NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->stream));
	return issued(op_new(g, OP_COLL, "broadcast"), c);
}

/* The piece [*x, *y) of [a, b) that group rank r owns; false when empty. */
static bool piece(const struct dist_group *g, size_t total, size_t a, size_t b, int r, size_t *x, size_t *y)
{
	size_t lo, hi;
	dist_shard(total, g->size, r, &lo, &hi);
	*x = lo > a ? lo : a;
	*y = hi < b ? hi : b;
	return *y > *x;
}

struct dist_nccl_op *dist_nccl_reduce_scatter_range(struct dist_group *g, float *buf, size_t total,
						    size_t a, size_t b, float *scratch, bool copy_back)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	size_t mylo, myhi, x, y;
	dist_shard(total, g->size, g->rank, &mylo, &myhi);
	begin(c);
	/* one reduction per owner, rooted there; the others' receive buffer
	 * is not used (NULL is what NCCL expects off the root) */
	NCCL_CHECK(ncclGroupStart());
	for (int r = 0; r < g->size; r++)
		if (piece(g, total, a, b, r, &x, &y))
			NCCL_CHECK(ncclReduce(buf + x,
					      r != g->rank ? NULL :
					      scratch      ? (void *)(scratch + (x - mylo)) :
							     (void *)(buf + x), /* in place */
					      y - x, ncclFloat32, ncclSum, r, c->comm, c->stream));
	NCCL_CHECK(ncclGroupEnd());
	if (copy_back && scratch && myhi > mylo)
		CUDA_CHECK(cudaMemcpyAsync((float *)buf + mylo, scratch, (myhi - mylo) * sizeof(float),
					   cudaMemcpyDeviceToDevice, c->stream));
	return issued(op_new(g, OP_COLL, "reduce-scatter"), c);
}

/* elements of one size: element e at byte e x size */
static size_t linear_at(const void *ctx, size_t e)
{
	return e * *(const size_t *)ctx;
}

struct dist_nccl_op *dist_nccl_allgather_range(struct dist_group *g, void *buf, size_t esize, size_t total,
					       size_t a, size_t b)
{
	const struct dist_bytemap map = { .at = linear_at, .ctx = &esize };
	return dist_nccl_allgather_range_mapped(g, buf, total, a, b, &map);
}

struct dist_nccl_op *dist_nccl_allgather_range_mapped(struct dist_group *g, void *buf, size_t total, size_t a,
						      size_t b, const struct dist_bytemap *map)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	char *bytes = buf;
	size_t x, y;
	begin(c);
	NCCL_CHECK(ncclGroupStart());
	for (int r = 0; r < g->size; r++)
		if (piece(g, total, a, b, r, &x, &y)) {
			size_t bx = map->at(map->ctx, x), by = map->at(map->ctx, y);
			if (by > bx)
				NCCL_CHECK(ncclBroadcast(bytes + bx, bytes + bx, by - bx, ncclUint8, r, c->comm,
							 c->stream));
		}
	NCCL_CHECK(ncclGroupEnd());
	return issued(op_new(g, OP_COLL, "all-gather"), c);
}

struct dist_nccl_op *dist_nccl_reduce_scatter_part(struct dist_group *g, const float *in, size_t total, size_t a,
						   size_t b, float *out)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	size_t x, y;
	begin(c);
	NCCL_CHECK(ncclGroupStart());
	for (int r = 0; r < g->size; r++)
		if (piece(g, total, a, b, r, &x, &y))
			NCCL_CHECK(ncclReduce(in + (x - a), r == g->rank ? out : NULL, y - x, ncclFloat32, ncclSum, r,
					      c->comm, c->stream));
	NCCL_CHECK(ncclGroupEnd());
	return issued(op_new(g, OP_COLL, "reduce-scatter"), c);
}

struct dist_nccl_op *dist_nccl_allgather_part(struct dist_group *g, const void *mine, size_t esize, size_t total,
					      size_t a, size_t b, void *dst)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	char *d = dst;
	size_t x, y;
	begin(c);
	NCCL_CHECK(ncclGroupStart());
	for (int r = 0; r < g->size; r++)
		if (piece(g, total, a, b, r, &x, &y))
			NCCL_CHECK(ncclBroadcast(r == g->rank ? mine : NULL, d + (x - a) * esize, (y - x) * esize, ncclUint8,
						 r, c->comm, c->stream));
	NCCL_CHECK(ncclGroupEnd());
	return issued(op_new(g, OP_COLL, "all-gather"), c);
}

struct dist_nccl_op *dist_nccl_gather_shards(struct dist_group *g, float *buf, size_t n)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	size_t x, y;
	begin(c);
	NCCL_CHECK(ncclGroupStart());
	if (g->rank == 0) {
		for (int r = 1; r < g->size; r++)
			if (piece(g, n, 0, n, r, &x, &y))
				NCCL_CHECK(ncclRecv(buf + x, y - x, ncclFloat32, r, c->comm, c->stream));
	} else if (piece(g, n, 0, n, g->rank, &x, &y)) {
		NCCL_CHECK(ncclSend(buf + x, y - x, ncclFloat32, 0, c->comm, c->stream));
	}
	NCCL_CHECK(ncclGroupEnd());
	return issued(op_new(g, OP_COLL, "gather"), c);
}

struct dist_nccl_op *dist_nccl_allgather_equal(struct dist_group *g, const float *in, size_t n, float *out)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	begin(c);
	if (n)
		NCCL_CHECK(ncclAllGather(in, out, n, ncclFloat32, c->comm, c->stream));
	return issued(op_new(g, OP_COLL, "all-gather"), c);
}

struct dist_nccl_op *dist_nccl_reduce_scatter_equal(struct dist_group *g, const float *in, size_t n, float *out)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	begin(c);
	if (n)
		NCCL_CHECK(ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, c->comm, c->stream));
	return issued(op_new(g, OP_COLL, "reduce-scatter"), c);
}

/* ncclGather is newer than the NCCL a GPU machine may bring: the
 * all-to-one pattern of send/receive in one group call instead. */
struct dist_nccl_op *dist_nccl_gather_equal(struct dist_group *g, const float *in, size_t n, float *out)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	begin(c);
	if (n) {
		NCCL_CHECK(ncclGroupStart());
		if (g->rank == 0)
			for (int r = 0; r < g->size; r++)
				NCCL_CHECK(ncclRecv(out + (size_t)r * n, n, ncclFloat32, r, c->comm, c->stream));
		NCCL_CHECK(ncclSend(in, n, ncclFloat32, 0, c->comm, c->stream));
		NCCL_CHECK(ncclGroupEnd());
	}
	return issued(op_new(g, OP_COLL, "gather"), c);
}

/* One group call of sends and receives: NCCL has no all-to-all. */
struct dist_nccl_op *dist_nccl_alltoallv(struct dist_group *g, const float *in, const size_t *scount, float *out,
					 const size_t *rcount)
{
	struct nccl_comm *c = &nccl_of(g)->coll;
	size_t so = 0, ro = 0;
	begin(c);
	NCCL_CHECK(ncclGroupStart());
	for (int r = 0; r < g->size; r++) {
		if (scount[r])
			NCCL_CHECK(ncclSend(in + so, scount[r], ncclFloat32, r, c->comm, c->stream));
		if (rcount[r])
			NCCL_CHECK(ncclRecv(out + ro, rcount[r], ncclFloat32, r, c->comm, c->stream));
		so += scount[r];
		ro += rcount[r];
	}
	NCCL_CHECK(ncclGroupEnd());
	return issued(op_new(g, OP_COLL, "all-to-all"), c);
}

/* ---- point-to-point ---- */

/* A matched pair of transfers of this rank to itself, as one group call. */
static void self_issue(struct dist_group *g, struct dist_nccl_op *s, struct dist_nccl_op *r)
{
	if (s->bytes != r->bytes)
		BUG("%s group: rank %d sent %zu bytes to itself with tag %d, and its receive asks for %zu", g->name,
		    g->rank, s->bytes, s->tag, r->bytes);
	struct nccl_comm *c = &nccl_of(g)->coll;
	begin(c);
	NCCL_CHECK(ncclGroupStart());
	NCCL_CHECK(ncclSend(s->buf, s->bytes, ncclUint8, g->rank, c->comm, c->stream));
	NCCL_CHECK(ncclRecv(r->buf, r->bytes, ncclUint8, g->rank, c->comm, c->stream));
	NCCL_CHECK(ncclGroupEnd());
	issued(s, c);
	issued(r, c);
}

/* MPI's rule for a rank's messages to itself: the oldest unmatched one of
 * the other side with the same tag. */
static void self_post(struct dist_group *g, struct dist_nccl_op *op)
{
	struct dist_nccl_op **pp = &nccl_of(g)->self_q;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->kind != op->kind && (*pp)->tag == op->tag) {
			struct dist_nccl_op *m = *pp;
			*pp = m->next;
			m->next = NULL;
			if (op->kind == OP_SEND)
				self_issue(g, op, m);
			else
				self_issue(g, m, op);
			return;
		}
	*pp = op;
}

static struct nccl_comm *channel(struct dist_group *g, struct nccl_comm **chans, int peer, int tag, bool out)
{
	struct nccl_comm *c = chans ? chans[(size_t)peer * LANES + (size_t)(tag % LANES)] : NULL;
	if (!c)
		BUG("%s group: no NCCL channel %s rank %d %s rank %d; device transfers go between neighbours (rank "
		    "+ 1, rank - 1) of the groups made with channels (pipeline, context-parallel)",
		    g->name, out ? "from" : "to", g->rank, out ? "to" : "from", peer);
	return c;
}

static struct dist_nccl_op *transfer(struct dist_group *g, enum op_kind kind, void *buf, size_t bytes, int peer,
				     int tag)
{
	if (peer < 0 || peer >= g->size || tag < 0)
		BUG("%s group: a transfer with rank %d (tag %d) in a group of %d", g->name, peer, tag, g->size);
	struct dist_nccl *n = nccl_of(g);
	struct dist_nccl_op *op = op_new(g, kind, kind == OP_SEND ? "send" : "receive");
	op->buf = buf;
	op->bytes = bytes;
	op->peer = peer;
	op->tag = tag;
	if (peer == g->rank) {
		self_post(g, op);
		return op;
	}
	struct nccl_comm *c = channel(g, kind == OP_SEND ? n->to : n->from, peer, tag, kind == OP_SEND);
	int htag = HDR_TAG + tag % LANES;
	if (kind == OP_SEND) {
		op->hdr[0] = (uint64_t)tag;
		op->hdr[1] = bytes;
		MPI_CHECK(MPI_Isend(op->hdr, 2, MPI_UINT64_T, peer, htag, MCOMM(g), &op->hdr_req));
	} else {
		MPI_CHECK(MPI_Irecv(op->hdr, 2, MPI_UINT64_T, peer, htag, MCOMM(g), &op->hdr_req));
	}
	op->hdr_pending = true;
	begin(c);
	/* the sender is rank 0 of a channel, the receiver rank 1 */
	if (kind == OP_SEND)
		NCCL_CHECK(ncclSend(buf, bytes, ncclUint8, 1, c->comm, c->stream));
	else
		NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, 0, c->comm, c->stream));
	return issued(op, c);
}

struct dist_nccl_op *dist_nccl_send(struct dist_group *g, const void *buf, size_t bytes, int dest, int tag)
{
	return transfer(g, OP_SEND, (void *)buf, bytes, dest, tag);
}

struct dist_nccl_op *dist_nccl_recv(struct dist_group *g, void *buf, size_t bytes, int src, int tag)
{
	return transfer(g, OP_RECV, buf, bytes, src, tag);
}

/* A receive into device memory that waits long while a host-memory message
 * with its tag from the same rank sits in MPI: the sender used the host
 * path. Only a hint (the same tag may legitimately carry both), once. */
static void host_sender_hint(struct dist_nccl_op *op)
{
	if (op->kind != OP_RECV || op->polls != HINT_POLLS)
		return;
	int flag = 0;
	MPI_CHECK(MPI_Iprobe(op->peer, op->tag, MCOMM(op->g), &flag, MPI_STATUS_IGNORE));
	if (flag)
		warning("%s group: a receive into device memory from rank %d (tag %d) is still waiting, and rank %d "
			"has sent a message with that tag from host memory: both ends of a transfer must use device "
			"memory (NCCL) or both host memory (MPI)",
			op->g->name, op->peer, op->tag, op->peer);
}

bool dist_nccl_poll(struct dist_nccl_op *op, bool waiting)
{
	if (!op->c) {
		if (waiting)
			BUG("%s group: waiting for a %s of rank %d to itself (tag %d) that nothing has matched: it could "
			    "never complete",
			    op->g->name, op->what, op->g->rank, op->tag);
		return false;
	}
	op->polls++;
	cudaError_t e = cudaEventQuery(op->done);
	if (e != cudaSuccess && e != cudaErrorNotReady)
		CUDA_CHECK(e);
	int flag = 0;
	if (op->hdr_pending) {
		MPI_CHECK(MPI_Test(&op->hdr_req, &flag, MPI_STATUS_IGNORE));
		if (flag) {
			op->hdr_pending = false;
			if (op->kind == OP_RECV && (op->hdr[0] != (uint64_t)op->tag || op->hdr[1] != op->bytes))
				BUG("%s group: rank %d's next device message to rank %d on lane %d has tag %llu and %llu "
				    "bytes, where this receive expects tag %d and %zu bytes: on device buffers the "
				    "messages between two ranks are matched in the order posted (per tag parity), so "
				    "both must post them in the same order and size",
				    op->g->name, op->peer, op->g->rank, op->tag % LANES, (unsigned long long)op->hdr[0],
				    (unsigned long long)op->hdr[1], op->tag, op->bytes);
		} else {
			host_sender_hint(op);
		}
	} else if (op->g->comm) {
		/* MPI moves messages only inside MPI calls (no progress thread in
		 * most builds): the headers this rank has sent must not wait for
		 * its next MPI call while it waits here for a peer that waits for
		 * one of them */
		MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, HDR_TAG, MCOMM(op->g), &flag, MPI_STATUS_IGNORE));
	}
	if (e == cudaSuccess && !op->hdr_pending)
		return true;
	ncclResult_t ae = ncclSuccess;
	NCCL_CHECK(ncclCommGetAsyncError(op->c->comm, &ae));
	if (ae != ncclSuccess && ae != ncclInProgress)
		die("%s group: NCCL failed during a %s: %s (%s)", op->g->name, op->what, ncclGetErrorString(ae),
		    ncclGetLastError(op->c->comm));
	return false;
}

void dist_nccl_free(struct dist_nccl_op *op)
{
	if (!op)
		return;
	if (!op->c || op->hdr_pending)
		BUG("%s group: freeing a %s that has not completed", op->g->name, op->what);
	CUDA_CHECK(cudaEventDestroy(op->done));
	free(op);
}

void dist_nccl_copy(void *dst, const void *src, size_t bytes)
{
	char *d = dst;
	const char *s = src;
	if (!bytes || d == s)
		return;
	size_t gap = d > s ? (size_t)(d - s) : (size_t)(s - d);
	if (gap >= bytes) {
		CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDefault, cudaStreamLegacy));
		return;
	}
	/* overlapping (cudaMemcpy's are undefined then): pieces no longer than
	 * the gap, in the direction memmove() goes, one after the other */
	if (d < s) {
		for (size_t off = 0; off < bytes; off += gap)
			CUDA_CHECK(cudaMemcpyAsync(d + off, s + off, bytes - off < gap ? bytes - off : gap,
						   cudaMemcpyDefault, cudaStreamLegacy));
	} else {
		for (size_t end = bytes; end > 0;) {
			size_t m = end < gap ? end : gap;
			end -= m;
			CUDA_CHECK(cudaMemcpyAsync(d + end, s + end, m, cudaMemcpyDefault, cudaStreamLegacy));
		}
	}
}

#else /* !MEGAC_CUDA: no device memory, nothing ever routed here */

bool dist_nccl_built(void)
{
	return false;
}

int dist_nccl_enable(void)
{
	return error("device buffers in lib/dist need NCCL, and this build has no CUDA backend (nvcc was not found)");
}

bool dist_nccl_active(void)
{
	return false;
}

bool dist_nccl_is_device(const void *p)
{
	return false;
}

static noreturn void no_nccl(const struct dist_group *g)
{
	BUG("%s group: an NCCL operation in a build without CUDA", g->name);
}

void dist_nccl_group_init(struct dist_group *g, bool channels)
{
	no_nccl(g);
}

void dist_nccl_attach_self(struct dist_group *g)
{
	die("cannot attach an NCCL communicator to the %s group: this build has no CUDA backend", g->name);
}

void dist_nccl_group_free(struct dist_group *g)
{
}

struct dist_nccl_op *dist_nccl_allreduce(struct dist_group *g, void *buf, size_t n, enum dist_nccl_type t,
					 enum dist_nccl_red red)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_bcast(struct dist_group *g, void *buf, size_t bytes, int root)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_reduce_scatter_range(struct dist_group *g, float *buf, size_t total,
						    size_t a, size_t b, float *scratch, bool copy_back)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_allgather_range(struct dist_group *g, void *buf, size_t esize, size_t total,
					       size_t a, size_t b)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_allgather_range_mapped(struct dist_group *g, void *buf, size_t total, size_t a,
						      size_t b, const struct dist_bytemap *map)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_reduce_scatter_part(struct dist_group *g, const float *in, size_t total, size_t a,
						   size_t b, float *out)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_allgather_part(struct dist_group *g, const void *mine, size_t esize, size_t total,
					      size_t a, size_t b, void *dst)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_gather_shards(struct dist_group *g, float *buf, size_t n)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_allgather_equal(struct dist_group *g, const float *in, size_t n, float *out)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_reduce_scatter_equal(struct dist_group *g, const float *in, size_t n, float *out)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_gather_equal(struct dist_group *g, const float *in, size_t n, float *out)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_alltoallv(struct dist_group *g, const float *in, const size_t *scount, float *out,
					 const size_t *rcount)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_send(struct dist_group *g, const void *buf, size_t bytes, int dest, int tag)
{
	no_nccl(g);
}

struct dist_nccl_op *dist_nccl_recv(struct dist_group *g, void *buf, size_t bytes, int src, int tag)
{
	no_nccl(g);
}

bool dist_nccl_poll(struct dist_nccl_op *op, bool waiting)
{
	BUG("an NCCL operation in a build without CUDA");
}

void dist_nccl_free(struct dist_nccl_op *op)
{
}

void dist_nccl_copy(void *dst, const void *src, size_t bytes)
{
	BUG("a device copy in a build without CUDA");
}

#endif
