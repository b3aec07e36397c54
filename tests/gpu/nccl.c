/*
 * nccl.c - lib/dist's NCCL path (lib/dist/nccl.c) on a GPU: every
 * dist_* call that routes device buffers to NCCL, checked on device
 * buffers. Output is TAP ("ok N - ...", "not ok N - ..."), then "1..N" and
 * "N passed, M failed"; the exit status is 1 on failures.
 *
 *   build/gpu/nccl                 one process, no MPI launcher: one-rank NCCL
 *                                  communicators attached to groups of one rank
 *                                  (dist_nccl_attach_self), so every call takes
 *                                  the NCCL path and must give the one-rank result
 *                                  (all-reduce = identity, gathers = copies, the
 *                                  reduce-scatter ranges = the rank's shard,
 *                                  transfers to itself matched by tag, ...); the
 *                                  device-only copies of a group of one rank without
 *                                  a communicator; host buffers still on the host
 *                                  path; NCCL ordered after the kernels queued
 *                                  before it; counts beyond 2^31 elements
 *   mpirun -np N build/gpu/nccl    N ranks, rank r on GPU (local rank) % count:
 *                                  dist_use_device() on a layout with pp = N, then
 *                                  every call on device buffers against the same
 *                                  call on host copies through MPI, byte counters
 *                                  included; point-to-point on the pipeline
 *                                  group's channels (rings, both lanes, exchanges),
 *                                  and the transfers of pipeline.c (pp_sched's
 *                                  schedules, interleaved too) and ring_attn.c
 *                                  (forward, backward) with every message checked
 *   --no-gpu                       as on a machine without a GPU: "1..0 # SKIP no GPU"
 *   --no-big                       leave out the 2^31-element call (16 GB; the emulated
 *                                  device's memory is the host's)
 * The GPU is chosen before MPI_Init, as train does (a CUDA-aware MPI opens
 * a context on the current device inside it).
 *
 * Without a GPU (or in a build without CUDA) it prints "1..0 # SKIP ..." and
 * exits 0. Values are small integers, so sums are exact in any order and
 * the NCCL and MPI results must agree bit for bit.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "dist/dist.h"
#include "dist/nccl.h"
#include "kernels/device.h"
#include "train/pp_sched.h"

static struct dist D;

static int skip(const char *why)
{
	if (D.rank == 0) {
		printf("1..0 # SKIP %s\n", why);
		fflush(stdout);
	}
	dist_finalize(&D);
	return 0;
}

#ifdef MEGAC_CUDA

#include <cuda_runtime.h>
#include <mpi.h>

static int n_test, n_fail;

/* One TAP line; with several ranks every rank calls it and the line is
 * "ok" only when every rank's check held (rank 0 prints). */
static void tap(bool ok, const char *fmt, ...) MC_PRINTF(2, 3);
static void tap(bool ok, const char *fmt, ...)
{
	if (D.world > 1) {
		double bad = ok ? 0 : 1;
		dist_allreduce_max_f64(&D.world_g, &bad, 1);
		ok = bad == 0;
	}
	n_test++;
	n_fail += !ok;
	if (D.rank == 0) {
		va_list ap;
		va_start(ap, fmt);
		printf("%s %d - ", ok ? "ok" : "not ok", n_test);
		vprintf(fmt, ap);
		printf("\n");
		va_end(ap);
		fflush(stdout);
	}
}

static int finish(void)
{
	if (D.rank == 0) {
		printf("1..%d\n%d passed, %d failed\n", n_test, n_test - n_fail, n_fail);
		fflush(stdout);
	}
	dist_finalize(&D);
	return n_fail ? 1 : 0;
}

#define CK(call)                                                                                  \
	do {                                                                                      \
		cudaError_t ck_ = (call);                                                         \
		if (ck_ != cudaSuccess)                                                           \
			die("%s failed (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(ck_)); \
	} while (0)

static float *dnew(size_t n)
{
	void *p = NULL;
	CK(cudaMalloc(&p, (n ? n : 1) * sizeof(float)));
	return p;
}

static float *hnew(size_t n)
{
	return calloc(n ? n : 1, sizeof(float));
}

static void up(float *d, const float *h, size_t n)
{
	CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}

static void down(float *h, const float *d, size_t n)
{
	CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

/* Small integers that differ by rank, index and a seed. */
static void fill_as(float *h, size_t n, int seed, int rank)
{
	for (size_t i = 0; i < n; i++)
		h[i] = (float)((long)((i * 7 + (size_t)seed * 13 + (size_t)rank * 29) % 23) - 11);
}

static void fill(float *h, size_t n, int seed)
{
	fill_as(h, n, seed, D.rank);
}

/* Bit-for-bit equal; the first difference goes to the log. */
static bool same(const char *what, const float *got, const float *want, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&got[i], &want[i], sizeof(float))) {
			printf("#   rank %d, %s: element %zu of %zu is %g, expected %g\n", D.rank, what, i, n,
			       (double)got[i], (double)want[i]);
			return false;
		}
	return true;
}

/* A device copy of h, and the host array its result comes back to. */
struct dbuf {
	float *d, *h;
	size_t n;
};

static struct dbuf dput(const float *h, size_t n)
{
	struct dbuf b = { dnew(n), hnew(n), n };
	up(b.d, h, n);
	return b;
}

static float *dtake(struct dbuf *b)
{
	down(b->h, b->d, b->n);
	CK(cudaFree(b->d));
	b->d = NULL;
	return b->h;
}

/* A byte map for dist_iallgather_range_mapped over a float buffer taken as
 * bytes: tensors of 100 elements, of 1 and 2 bytes in turn, each in a
 * 208-byte slot (16-byte aligned, the padding after its last element). */
#define MAP_SLOT 208
static size_t map_at(const void *ctx, size_t e)
{
	size_t t = e / 100, i = e % 100;
	return t * MAP_SLOT + i * (t % 2 ? 2 : 1);
}
static const struct dist_bytemap byte_map = { map_at, NULL };
/* the elements that fit n floats */
static size_t map_total(size_t n)
{
	return n * sizeof(float) / MAP_SLOT * 100;
}

/* ==== one rank: attached one-rank communicators ==== */

static void one_rank_collectives(struct dist_group *g)
{
	const size_t sizes[] = { 1, 1000, 4099, (size_t)1 << 22 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		float *h = hnew(n), *s = hnew(n);
		double *h64 = malloc(n * sizeof(double)), *r64 = malloc(n * sizeof(double));
		fill(h, n, (int)k);
		for (size_t i = 0; i < n; i++)
			h64[i] = h[i] * 0.5;
		bool ok = true;

		struct dbuf b = dput(h, n);
		dist_allreduce_sum_f32(g, b.d, n);
		dist_allreduce_max_f32(g, b.d, n);
		ok &= same("all-reduce f32", dtake(&b), h, n);
		free(b.h);

		double *d64;
		CK(cudaMalloc((void **)&d64, n * sizeof(double)));
		CK(cudaMemcpy(d64, h64, n * sizeof(double), cudaMemcpyHostToDevice));
		dist_allreduce_sum_f64(g, d64, n);
		dist_allreduce_max_f64(g, d64, n);
		CK(cudaMemcpy(r64, d64, n * sizeof(double), cudaMemcpyDeviceToHost));
		ok &= memcmp(r64, h64, n * sizeof(double)) == 0;
		CK(cudaFree(d64));
		tap(ok, "all-reduce sum and max, f32 and f64, n = %zu: the identity", n);

		b = dput(h, n);
		dist_bcast(g, b.d, n * sizeof(float), 0);
		tap(same("broadcast", dtake(&b), h, n), "broadcast of %zu bytes: the identity", n * sizeof(float));
		free(b.h);

		b = dput(h, n);
		struct dbuf sc = dput(s, n);
		dist_reduce_scatter_sum_f32(g, b.d, n, sc.d);
		ok = same("reduce-scatter buf", dtake(&b), h, n);
		ok &= same("reduce-scatter scratch", dtake(&sc), h, n);
		tap(ok, "reduce-scatter of %zu: the shard is everything, in buf and scratch", n);
		free(b.h), free(sc.h);

		b = dput(h, n);
		dist_allgather_f32(g, b.d, n);
		ok = same("all-gather", dtake(&b), h, n);
		free(b.h);
		b = dput(h, n);
		dist_gather_f32(g, b.d, n);
		ok &= same("gather", dtake(&b), h, n);
		free(b.h);
		tap(ok, "all-gather and gather of shards, n = %zu: the identity", n);

		b = dput(h, n);
		struct dbuf o1 = dput(s, n), o2 = dput(s, n), o3 = dput(s, n);
		dist_allgather_equal_f32(g, b.d, n, o1.d);
		dist_reduce_scatter_equal_f32(g, b.d, n, o2.d);
		dist_gather_equal_f32(g, b.d, n, o3.d);
		ok = same("all-gather equal", dtake(&o1), h, n);
		ok &= same("reduce-scatter equal", dtake(&o2), h, n);
		ok &= same("gather equal", dtake(&o3), h, n);
		ok &= same("equal input", dtake(&b), h, n);
		tap(ok, "all-gather, reduce-scatter and gather of equal blocks, n = %zu: copies", n);
		free(b.h), free(o1.h), free(o2.h), free(o3.h);

		b = dput(h, n);
		o1 = dput(s, n);
		size_t cnt[1] = { n };
		dist_alltoallv_f32(g, b.d, cnt, o1.d, cnt);
		ok = same("all-to-all", dtake(&o1), h, n);
		tap(ok, "all-to-all of %zu floats to itself: a copy", n);
		free(dtake(&b)), free(o1.h);
		free(h), free(s), free(h64), free(r64);
	}
}

static void one_rank_nonblocking(struct dist_group *g)
{
	const size_t n = 10007, a = 123, b = 9001;
	float *h = hnew(n), *sent = hnew(n), *want = hnew(n);
	fill(h, n, 5);
	for (size_t i = 0; i < n; i++)
		sent[i] = -1000;

	struct dist_req r;
	struct dbuf x = dput(h, n);
	dist_iallreduce_sum_f32(g, x.d + a, b - a, &r);
	long polls = 0;
	while (!dist_test(&r))
		polls++;
	dist_wait(&r); /* an empty request now */
	tap(same("iall-reduce", dtake(&x), h, n) && !r.dev, "iall-reduce of [%zu, %zu): the identity, completed by "
							  "dist_test (%ld polls)", a, b, polls);
	free(x.h);

	x = dput(h, n);
	struct dbuf sc = dput(sent, n);
	dist_ireduce_scatter_range_f32(g, x.d, n, a, b, sc.d, &r);
	dist_wait(&r);
	memcpy(want, sent, n * sizeof(float));
	memcpy(want + a, h + a, (b - a) * sizeof(float));
	bool ok = same("ireduce-scatter scratch", dtake(&sc), want, n);
	ok &= same("ireduce-scatter buf", dtake(&x), h, n);
	tap(ok, "ireduce-scatter of [%zu, %zu) of %zu: that range of scratch, the rest untouched", a, b, n);
	free(x.h), free(sc.h);

	x = dput(h, n);
	dist_iallgather_range_f32(g, x.d, n, a, b, &r);
	dist_wait(&r);
	tap(same("iall-gather", dtake(&x), h, n), "iall-gather of [%zu, %zu): the identity", a, b);
	free(x.h);

	x = dput(h, n);
	dist_iallgather_range_mapped(g, x.d, map_total(n), a, b, &byte_map, &r);
	dist_wait(&r);
	tap(same("mapped iall-gather", dtake(&x), h, n), "mapped iall-gather of [%zu, %zu): the identity", a, b);
	free(x.h);
	free(h), free(sent), free(want);
}

static void one_rank_transfers(struct dist_group *g)
{
	const size_t n = 3001;
	float *h1 = hnew(n), *h2 = hnew(n), *z = hnew(n);
	fill(h1, n, 1);
	fill(h2, n, 2);
	struct dbuf s1 = dput(h1, n), s2 = dput(h2, n), r1 = dput(z, n), r2 = dput(z, n);
	struct dist_req q[4];
	/* receive first, then send */
	dist_irecv_f32(g, r1.d, n, 0, 7, &q[0]);
	dist_isend_f32(g, s1.d, n, 0, 7, &q[1]);
	dist_wait(&q[1]);
	dist_wait(&q[0]);
	tap(same("to itself", dtake(&r1), h1, n), "irecv, then isend to itself: the data arrives");
	free(r1.h);

	/* sent with tags 8 then 9, received 9 then 8: matched by tag, as MPI */
	r1 = dput(z, n);
	dist_isend_f32(g, s1.d, n, 0, 8, &q[0]);
	dist_isend_f32(g, s2.d, n, 0, 9, &q[1]);
	dist_irecv_f32(g, r2.d, n, 0, 9, &q[2]);
	dist_irecv_f32(g, r1.d, n, 0, 8, &q[3]);
	bool done = false;
	while (!done) {
		done = true;
		for (int i = 0; i < 4; i++)
			done &= dist_test(&q[i]);
	}
	bool ok = same("tag 8", dtake(&r1), h1, n);
	ok &= same("tag 9", dtake(&r2), h2, n);
	tap(ok, "isend tags 8, 9 to itself, irecv 9, 8: matched by tag; dist_test completes them");
	free(r1.h), free(r2.h);

	r1 = dput(z, n);
	dist_sendrecv_f32(g, s1.d, n, 0, r1.d, n, 0, 3);
	tap(same("send-receive", dtake(&r1), h1, n), "send-receive with itself: a copy");
	free(r1.h);
	tap(g->bytes == 0 && g->calls == 0, "a group of one rank counts no bytes (%llu) and no calls (%llu), as on MPI",
	    (unsigned long long)g->bytes, (unsigned long long)g->calls);
	free(dtake(&s1)), free(dtake(&s2));
	free(h1), free(h2), free(z);
}

/* Device buffers in a group of one rank without a communicator: the copies
 * of the *_equal calls and send-receive happen on the device. */
static void one_rank_alone(struct dist_group *g)
{
	const size_t n = 777;
	float *h = hnew(2 * n), *z = hnew(n), *want = hnew(2 * n);
	fill(h, 2 * n, 9);
	struct dbuf in = dput(h, n), o1 = dput(z, n), o2 = dput(z, n), o3 = dput(z, n), o4 = dput(z, n);
	dist_allgather_equal_f32(g, in.d, n, o1.d);
	dist_reduce_scatter_equal_f32(g, in.d, n, o2.d);
	dist_gather_equal_f32(g, in.d, n, o3.d);
	dist_sendrecv_f32(g, in.d, n, 0, o4.d, n, 0, 1);
	dist_allreduce_sum_f32(g, in.d, n); /* a no-op */
	bool ok = same("all-gather equal", dtake(&o1), h, n);
	ok &= same("reduce-scatter equal", dtake(&o2), h, n);
	ok &= same("gather equal", dtake(&o3), h, n);
	ok &= same("send-receive", dtake(&o4), h, n);
	ok &= same("input", dtake(&in), h, n);
	tap(ok && !g->nccl, "%s group (one rank, no communicator): device copies", g->name);
	free(o1.h), free(o2.h), free(o3.h), free(o4.h), free(in.h);

	/* overlapping send-receive: memmove() semantics, both directions */
	for (int dir = 0; dir < 2; dir++) {
		struct dbuf b = dput(h, 2 * n);
		size_t shift = 3;
		memcpy(want, h, 2 * n * sizeof(float));
		if (dir == 0) {
			dist_sendrecv_f32(g, b.d + shift, n, 0, b.d, n, 0, 1);
			memmove(want, h + shift, n * sizeof(float));
		} else {
			dist_sendrecv_f32(g, b.d, n, 0, b.d + shift, n, 0, 1);
			memmove(want + shift, h, n * sizeof(float));
		}
		tap(same("overlap", dtake(&b), want, 2 * n), "overlapping send-receive %s, alone: as memmove()",
		    dir ? "upwards" : "downwards");
		free(b.h);
	}
	free(h), free(z), free(want);
}

/* Host buffers keep the host path even where the group has a communicator. */
static void one_rank_host(struct dist_group *g)
{
	const size_t n = 100;
	float *h = hnew(n), *o = hnew(n);
	fill(h, n, 3);
	bool ok = !dist_nccl_is_device(h) && !dist_nccl_is_device(NULL);
	float *pinned = NULL, *dev = dnew(n);
	CK(cudaMallocHost((void **)&pinned, n * sizeof(float)));
	ok &= !dist_nccl_is_device(pinned) && dist_nccl_is_device(dev);
	dist_allgather_equal_f32(g, h, n, o);
	ok &= same("host all-gather", o, h, n);
	memcpy(pinned, h, n * sizeof(float));
	dist_allreduce_sum_f32(g, pinned, n);
	ok &= same("pinned all-reduce", pinned, h, n);
	tap(ok, "host memory (malloc, pinned) is not device memory and keeps the host path; device memory is");
	CK(cudaFreeHost(pinned));
	CK(cudaFree(dev));
	free(h), free(o);
}

/* Kernels queued on stream 0 before a call are done before NCCL reads:
 * long memsets of the input, the last one setting the value, then an
 * out-of-place call at once. Without the event NCCL's non-blocking stream
 * would start early and copy zeros. */
static void ordering(struct dist_group *g, const char *what)
{
	const size_t n = ((size_t)1 << 26) / (size_t)g->size; /* 256 MiB in all */
	float *in = dnew(n), *out = dnew((size_t)g->size * n);
	for (int i = 0; i < 16; i++)
		CK(cudaMemsetAsync(in, 0, n * sizeof(float), cudaStreamLegacy));
	CK(cudaMemsetAsync(in, 0x40, n * sizeof(float), cudaStreamLegacy));
	dist_allgather_equal_f32(g, in, n, out);
	float last[4], want;
	memset(&want, 0x40, sizeof(want));
	bool ok = true;
	for (int r = 0; r < g->size; r++) {
		size_t at[] = { 0, n / 2, n - 1 };
		for (int k = 0; k < 3; k++) {
			down(last, out + (size_t)r * n + at[k], 1);
			ok &= same("ordered", last, &want, 1);
		}
	}
	tap(ok, "%s: an all-gather sees the memsets queued on stream 0 before it", what);
	CK(cudaFree(in));
	CK(cudaFree(out));
}

/* size_t counts: more than 2^31 elements in one call (MPI would go in pieces). */
static void big(struct dist_group *g)
{
	const size_t n = ((size_t)1 << 31) + 1001;
	float *in = NULL, *out = NULL;
	if (cudaMalloc((void **)&in, n * sizeof(float)) != cudaSuccess ||
	    cudaMalloc((void **)&out, n * sizeof(float)) != cudaSuccess) {
		cudaGetLastError();
		cudaFree(in);
		n_test++;
		printf("ok %d - all-gather of 2^31 + 1001 floats # SKIP not enough GPU memory\n", n_test);
		return;
	}
	CK(cudaMemset(in, 0x3f, n * sizeof(float)));
	CK(cudaMemset(out, 0, n * sizeof(float)));
	float tail[8] = { 0 }, want[8];
	memset(want, 0x3f, sizeof(want));
	CK(cudaMemcpy(in + n - 8, (float[8]){ 1, 2, 3, 4, 5, 6, 7, 8 }, sizeof(tail), cudaMemcpyHostToDevice));
	dist_allgather_equal_f32(g, in, n, out);
	bool ok = true;
	down(tail, out + ((size_t)1 << 31) - 4, 4);
	ok &= same("past 2^31", tail, want, 4);
	down(tail, out + n - 8, 8);
	ok &= same("tail", tail, (float[8]){ 1, 2, 3, 4, 5, 6, 7, 8 }, 8);
	tap(ok, "all-gather of 2^31 + 1001 floats in one call");
	CK(cudaFree(in));
	CK(cudaFree(out));
}

static bool no_big; /* --no-big */

static int one_rank_main(void)
{
	/* groups of one rank, as dist_setup makes them without MPI */
	struct dist_layout l = { .world = 1, .tp = 1, .pp = 1, .cp = 1, .ep = 1, .etp = 1, .dp = 1, .edp = 1,
				 .vpp = 1 };
	if (dist_setup(&D, &l) < 0 || dist_use_device(&D) < 0)
		die("could not set up the groups");
	tap(!D.world_g.nccl && !D.pp.nccl && dist_nccl_active(),
	    "dist_use_device on one rank: device mode, no communicators to make");
	dist_nccl_attach_self(&D.world_g);
	dist_nccl_attach_self(&D.pp);
	one_rank_collectives(&D.world_g);
	one_rank_nonblocking(&D.world_g);
	one_rank_transfers(&D.pp);
	one_rank_alone(&D.tp);
	one_rank_host(&D.world_g);
	ordering(&D.world_g, "one rank");
	if (!no_big)
		big(&D.world_g);
	return finish();
}

/* ==== several ranks: NCCL against MPI ==== */

/* The same call on host buffers (MPI) and on device copies (NCCL): results
 * and the group's byte and call counts must agree. */
struct twin {
	struct dist_group *g;
	uint64_t bytes, calls;
	uint64_t hbytes, hcalls; /* the host run's counts */
};

static void twin_mark(struct twin *t, struct dist_group *g)
{
	t->g = g;
	t->bytes = g->bytes;
	t->calls = g->calls;
}

static void twin_host_done(struct twin *t)
{
	t->hbytes = t->g->bytes - t->bytes;
	t->hcalls = t->g->calls - t->calls;
	t->bytes = t->g->bytes;
	t->calls = t->g->calls;
}

static bool twin_counts(struct twin *t, const char *what)
{
	uint64_t b = t->g->bytes - t->bytes, c = t->g->calls - t->calls;
	if (b == t->hbytes && c == t->hcalls)
		return true;
	printf("#   rank %d, %s: NCCL counted %llu bytes in %llu calls, MPI %llu in %llu\n", D.rank, what,
	       (unsigned long long)b, (unsigned long long)c, (unsigned long long)t->hbytes,
	       (unsigned long long)t->hcalls);
	return false;
}

static void multi_collectives(struct dist_group *g)
{
	const int p = g->size;
	const size_t sizes[] = { 1, (size_t)p - 1, 1000, 10007, (size_t)1 << 20 };
	struct twin t;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		if (!n)
			continue;
		float *h = hnew(n), *hs = hnew(n);
		fill(h, n, (int)k);

		/* all-reduce sum and max (f32, then f64 on a copy) */
		memcpy(hs, h, n * sizeof(float));
		struct dbuf b = dput(h, n);
		twin_mark(&t, g);
		dist_allreduce_sum_f32(g, hs, n);
		dist_allreduce_max_f32(g, hs, n);
		twin_host_done(&t);
		dist_allreduce_sum_f32(g, b.d, n);
		dist_allreduce_max_f32(g, b.d, n);
		bool ok = twin_counts(&t, "all-reduce") & same("all-reduce", dtake(&b), hs, n);
		free(b.h);
		double *h64 = malloc(n * sizeof(double)), *r64 = malloc(n * sizeof(double)), *d64;
		for (size_t i = 0; i < n; i++)
			h64[i] = h[i] * 0.25;
		CK(cudaMalloc((void **)&d64, n * sizeof(double)));
		CK(cudaMemcpy(d64, h64, n * sizeof(double), cudaMemcpyHostToDevice));
		twin_mark(&t, g);
		dist_allreduce_sum_f64(g, h64, n);
		dist_allreduce_max_f64(g, h64, n);
		twin_host_done(&t);
		dist_allreduce_sum_f64(g, d64, n);
		dist_allreduce_max_f64(g, d64, n);
		CK(cudaMemcpy(r64, d64, n * sizeof(double), cudaMemcpyDeviceToHost));
		ok &= twin_counts(&t, "all-reduce f64") && memcmp(r64, h64, n * sizeof(double)) == 0;
		CK(cudaFree(d64));
		free(h64), free(r64);
		tap(ok, "%s: all-reduce sum and max, f32 and f64, n = %zu: as MPI", g->name, n);

		/* broadcast from the last rank */
		memcpy(hs, h, n * sizeof(float));
		b = dput(h, n);
		twin_mark(&t, g);
		dist_bcast(g, hs, n * sizeof(float), p - 1);
		twin_host_done(&t);
		dist_bcast(g, b.d, n * sizeof(float), p - 1);
		tap(twin_counts(&t, "broadcast") & same("broadcast", dtake(&b), hs, n),
		    "%s: broadcast of %zu bytes from rank %d: as MPI", g->name, n * sizeof(float), p - 1);
		free(b.h);

		/* reduce-scatter of uneven shards, buf and scratch */
		size_t lo, hi;
		dist_shard(n, p, g->rank, &lo, &hi);
		float *hsc = hnew(hi - lo), *z = hnew(hi - lo);
		memcpy(hs, h, n * sizeof(float));
		b = dput(h, n);
		struct dbuf sc = dput(z, hi - lo);
		twin_mark(&t, g);
		dist_reduce_scatter_sum_f32(g, hs, n, hsc);
		twin_host_done(&t);
		dist_reduce_scatter_sum_f32(g, b.d, n, sc.d);
		ok = twin_counts(&t, "reduce-scatter") & same("reduce-scatter buf", dtake(&b), hs, n);
		ok &= same("reduce-scatter scratch", dtake(&sc), hsc, hi - lo);
		tap(ok, "%s: reduce-scatter of %zu over %d ranks (uneven shards): as MPI", g->name, n, p);
		free(b.h), free(sc.h), free(hsc), free(z);

		/* all-gather and gather of the shards, in place */
		memcpy(hs, h, n * sizeof(float));
		b = dput(h, n);
		twin_mark(&t, g);
		dist_allgather_f32(g, hs, n);
		twin_host_done(&t);
		dist_allgather_f32(g, b.d, n);
		ok = twin_counts(&t, "all-gather") & same("all-gather", dtake(&b), hs, n);
		free(b.h);
		memcpy(hs, h, n * sizeof(float));
		b = dput(h, n);
		twin_mark(&t, g);
		dist_gather_f32(g, hs, n);
		twin_host_done(&t);
		dist_gather_f32(g, b.d, n);
		ok &= twin_counts(&t, "gather") & same("gather", dtake(&b), hs, n);
		free(b.h);
		tap(ok, "%s: all-gather and gather of the shards of %zu: as MPI", g->name, n);

		/* equal blocks: n per rank */
		float *big_in = hnew((size_t)p * n), *ho = hnew((size_t)p * n), *zo = hnew((size_t)p * n);
		fill(big_in, (size_t)p * n, (int)k + 40);
		struct dbuf in = dput(big_in, (size_t)p * n), o = dput(zo, (size_t)p * n);
		twin_mark(&t, g);
		dist_allgather_equal_f32(g, big_in, n, ho);
		twin_host_done(&t);
		dist_allgather_equal_f32(g, in.d, n, o.d);
		ok = twin_counts(&t, "all-gather equal") & same("all-gather equal", dtake(&o), ho, (size_t)p * n);
		free(o.h);
		memset(ho, 0, (size_t)p * n * sizeof(float));
		o = dput(zo, n);
		twin_mark(&t, g);
		dist_reduce_scatter_equal_f32(g, big_in, n, ho);
		twin_host_done(&t);
		dist_reduce_scatter_equal_f32(g, in.d, n, o.d);
		ok &= twin_counts(&t, "reduce-scatter equal") & same("reduce-scatter equal", dtake(&o), ho, n);
		free(o.h);
		memset(ho, 0, (size_t)p * n * sizeof(float));
		o = dput(zo, (size_t)p * n);
		twin_mark(&t, g);
		dist_gather_equal_f32(g, big_in, n, g->rank == 0 ? ho : NULL);
		twin_host_done(&t);
		dist_gather_equal_f32(g, in.d, n, g->rank == 0 ? o.d : NULL);
		ok &= twin_counts(&t, "gather equal") &
		      (g->rank != 0 || same("gather equal", dtake(&o), ho, (size_t)p * n));
		if (o.d)
			CK(cudaFree(o.d));
		free(o.h);
		free(dtake(&in));
		tap(ok, "%s: all-gather, reduce-scatter, gather of equal blocks of %zu: as MPI", g->name, n);
		free(big_in), free(ho), free(zo);

		/* all-to-all with uneven blocks (some empty): rank r sends rank q
		 * (r + q + k) % 3 * n / 2 floats, the pattern of a MoE exchange */
		size_t *sc_n = malloc(2 * (size_t)p * sizeof(size_t)), *rc_n = sc_n + p, st = 0, rt = 0;
		for (int q = 0; q < p; q++) {
			sc_n[q] = (size_t)((g->rank + q + (int)k) % 3) * n / 2;
			rc_n[q] = (size_t)((q + g->rank + (int)k) % 3) * n / 2;
			st += sc_n[q];
			rt += rc_n[q];
		}
		float *ai = hnew(st + 1), *ao = hnew(rt + 1), *az = hnew(rt + 1);
		fill(ai, st + 1, (int)k + 60 + g->rank);
		struct dbuf di = dput(ai, st + 1), dz = dput(az, rt + 1);
		twin_mark(&t, g);
		dist_alltoallv_f32(g, ai, sc_n, ao, rc_n);
		twin_host_done(&t);
		dist_alltoallv_f32(g, di.d, sc_n, dz.d, rc_n);
		ok = twin_counts(&t, "all-to-all") & same("all-to-all", dtake(&dz), ao, rt);
		tap(ok, "%s: all-to-all of uneven blocks (n = %zu): as MPI", g->name, n);
		free(dtake(&di)), free(dz.h), free(ai), free(ao), free(az), free(sc_n);
		free(h), free(hs);
	}
}

static void multi_nonblocking(struct dist_group *g)
{
	const int p = g->size;
	const size_t n = 10007;
	size_t lo1, hi1;
	dist_shard(n, p, 1 % p, &lo1, &hi1);
	/* ranges: everything, inside one shard, across a shard boundary, a
	 * single element on a boundary */
	const size_t ranges[][2] = { { 0, n }, { lo1 + 1, hi1 - 1 }, { lo1 - 5, lo1 + 5 }, { lo1, lo1 + 1 },
				     { 123, 9001 } };
	size_t mylo, myhi;
	dist_shard(n, p, g->rank, &mylo, &myhi);
	float *h = hnew(n), *hs = hnew(n), *sent = hnew(myhi - mylo), *hsc = hnew(myhi - mylo);
	for (size_t i = 0; i < myhi - mylo; i++)
		sent[i] = -1000;
	struct twin t;
	for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
		size_t a = ranges[k][0], b = ranges[k][1];
		fill(h, n, (int)k);
		struct dist_req r;

		memcpy(hs, h, n * sizeof(float));
		struct dbuf x = dput(h, n);
		twin_mark(&t, g);
		dist_iallreduce_sum_f32(g, hs + a, b - a, &r);
		dist_wait(&r);
		twin_host_done(&t);
		dist_iallreduce_sum_f32(g, x.d + a, b - a, &r);
		while (!dist_test(&r))
			;
		bool ok = twin_counts(&t, "iall-reduce") & same("iall-reduce", dtake(&x), hs, n);
		free(x.h);

		memcpy(hsc, sent, (myhi - mylo) * sizeof(float));
		x = dput(h, n);
		struct dbuf sc = dput(sent, myhi - mylo);
		twin_mark(&t, g);
		dist_ireduce_scatter_range_f32(g, h, n, a, b, hsc, &r);
		dist_wait(&r);
		twin_host_done(&t);
		dist_ireduce_scatter_range_f32(g, x.d, n, a, b, sc.d, &r);
		dist_wait(&r);
		ok &= twin_counts(&t, "ireduce-scatter") & same("ireduce-scatter", dtake(&sc), hsc, myhi - mylo);
		ok &= same("ireduce-scatter input", dtake(&x), h, n);
		free(x.h), free(sc.h);

		memcpy(hs, h, n * sizeof(float));
		x = dput(h, n);
		twin_mark(&t, g);
		dist_iallgather_range_f32(g, hs, n, a, b, &r);
		dist_wait(&r);
		twin_host_done(&t);
		dist_iallgather_range_f32(g, x.d, n, a, b, &r);
		dist_wait(&r);
		ok &= twin_counts(&t, "iall-gather") & same("iall-gather", dtake(&x), hs, n);
		free(x.h);

		/* mapped: elements of 1 and 2 bytes with padding (the same ranges, of more elements) */
		memcpy(hs, h, n * sizeof(float));
		x = dput(h, n);
		twin_mark(&t, g);
		dist_iallgather_range_mapped(g, hs, map_total(n), a, b, &byte_map, &r);
		dist_wait(&r);
		twin_host_done(&t);
		dist_iallgather_range_mapped(g, x.d, map_total(n), a, b, &byte_map, &r);
		dist_wait(&r);
		ok &= twin_counts(&t, "mapped iall-gather") & same("mapped iall-gather", dtake(&x), hs, n);
		free(x.h);
		tap(ok, "%s: iall-reduce, ireduce-scatter, iall-gather, mapped iall-gather of [%zu, %zu) of %zu: "
		    "as MPI", g->name, a, b, n);
	}
	free(h), free(hs), free(sent), free(hsc);
}

/* Rings and exchanges between neighbours of the pipeline group. */
static void multi_transfers(struct dist_group *g)
{
	const int p = g->size, me = g->rank, next = (me + 1) % p, prev = (me + p - 1) % p;
	const size_t n = 65537;
	float *h[4], *z = hnew(n), *got[4];
	for (int i = 0; i < 4; i++) {
		h[i] = hnew(n);
		fill(h[i], n, 100 + i);
		got[i] = hnew(n);
	}
	struct twin t;
	struct dist_req q[8];

	/* a ring: three messages (tags 10, 11, 10) to the next rank, posted
	 * in the same order on both sides; receives first, as ring_attn */
	twin_mark(&t, g);
	for (int i = 0; i < 3; i++)
		dist_irecv_f32(g, got[i], n, prev, i == 1 ? 11 : 10, &q[i]);
	for (int i = 0; i < 3; i++)
		dist_isend_f32(g, h[i], n, next, i == 1 ? 11 : 10, &q[3 + i]);
	for (int i = 0; i < 6; i++)
		dist_wait(&q[i]);
	twin_host_done(&t);
	struct dbuf s[3], r[3];
	for (int i = 0; i < 3; i++) {
		s[i] = dput(h[i], n);
		r[i] = dput(z, n);
	}
	for (int i = 0; i < 3; i++)
		dist_irecv_f32(g, r[i].d, n, prev, i == 1 ? 11 : 10, &q[i]);
	for (int i = 0; i < 3; i++)
		dist_isend_f32(g, s[i].d, n, next, i == 1 ? 11 : 10, &q[3 + i]);
	for (int i = 5; i >= 0; i--) /* sends first: each completes on its own */
		dist_wait(&q[i]);
	bool ok = twin_counts(&t, "ring");
	for (int i = 0; i < 3; i++) {
		ok &= same("ring", dtake(&r[i]), got[i], n);
		free(r[i].h), free(dtake(&s[i]));
	}
	tap(ok, "%s: a ring of isend/irecv, tags 10, 11, 10: as MPI", g->name);

	/* the lanes: even and odd tags posted in opposite orders on the two
	 * sides (the pipeline's activations and gradients with pp = 2) */
	s[0] = dput(h[0], n), s[1] = dput(h[1], n), r[0] = dput(z, n), r[1] = dput(z, n);
	dist_isend_f32(g, s[0].d, n, next, 20, &q[0]);
	dist_isend_f32(g, s[1].d, n, next, 21, &q[1]);
	dist_irecv_f32(g, r[1].d, n, prev, 21, &q[2]);
	dist_irecv_f32(g, r[0].d, n, prev, 20, &q[3]);
	dist_wait(&q[2]);
	dist_wait(&q[3]);
	dist_wait(&q[0]);
	dist_wait(&q[1]);
	float *w0 = hnew(n), *w1 = hnew(n);
	/* what prev sent: its fill of seeds 100 and 101 (pp = world here, so
	 * group ranks are world ranks) */
	fill_as(w0, n, 100, prev);
	fill_as(w1, n, 101, prev);
	ok = same("even lane", dtake(&r[0]), w0, n);
	ok &= same("odd lane", dtake(&r[1]), w1, n);
	tap(ok, "%s: tags 20, 21 sent, received 21 then 20: each on its lane", g->name);
	free(r[0].h), free(r[1].h), free(dtake(&s[0])), free(dtake(&s[1])), free(w0), free(w1);

	/* an exchange: everyone sends to both neighbours before receiving
	 * (the cp = 2 ring, send_copy then recv_into); blocking waits on the
	 * receives first */
	twin_mark(&t, g);
	dist_isend_f32(g, h[0], n, next, 30, &q[0]);
	dist_isend_f32(g, h[1], n, prev, 31, &q[1]);
	dist_irecv_f32(g, got[0], n, prev, 30, &q[2]);
	dist_irecv_f32(g, got[1], n, next, 31, &q[3]);
	for (int i = 3; i >= 0; i--)
		dist_wait(&q[i]);
	twin_host_done(&t);
	s[0] = dput(h[0], n), s[1] = dput(h[1], n), r[0] = dput(z, n), r[1] = dput(z, n);
	dist_isend_f32(g, s[0].d, n, next, 30, &q[0]);
	dist_isend_f32(g, s[1].d, n, prev, 31, &q[1]);
	dist_irecv_f32(g, r[0].d, n, prev, 30, &q[2]);
	dist_irecv_f32(g, r[1].d, n, next, 31, &q[3]);
	for (int i = 3; i >= 0; i--)
		dist_wait(&q[i]);
	ok = twin_counts(&t, "exchange") & same("from prev", dtake(&r[0]), got[0], n);
	ok &= same("from next", dtake(&r[1]), got[1], n);
	tap(ok, "%s: send to both neighbours, then receive from both: no deadlock, as MPI", g->name);
	free(r[0].h), free(r[1].h), free(dtake(&s[0])), free(dtake(&s[1]));

	/* send-receive, a ring step */
	twin_mark(&t, g);
	dist_sendrecv_f32(g, h[2], n, next, got[2], n, prev, 40);
	twin_host_done(&t);
	s[0] = dput(h[2], n), r[0] = dput(z, n);
	dist_sendrecv_f32(g, s[0].d, n, next, r[0].d, n, prev, 40);
	tap(twin_counts(&t, "send-receive") & same("send-receive", dtake(&r[0]), got[2], n),
	    "%s: send-receive around the ring: as MPI", g->name);
	free(r[0].h), free(dtake(&s[0]));

	/* blocking bytes: even ranks to the next, odd ranks receive (p even
	 * or not, the last even rank of an odd group sends to rank 0) */
	memset(got[3], 0, n * sizeof(float));
	s[0] = dput(h[3], n), r[0] = dput(z, n);
	twin_mark(&t, g);
	bool sender = me % 2 == 0 && next != me && !(next == 0 && p % 2), receiver = me % 2 == 1;
	if (sender)
		dist_send_bytes(g, h[3], n * sizeof(float), next, 50);
	if (receiver)
		dist_recv_bytes(g, got[3], n * sizeof(float), prev, 50);
	twin_host_done(&t);
	if (sender)
		dist_send_bytes(g, s[0].d, n * sizeof(float), next, 50);
	if (receiver)
		dist_recv_bytes(g, r[0].d, n * sizeof(float), prev, 50);
	tap(twin_counts(&t, "bytes") & same("bytes", dtake(&r[0]), got[3], n),
	    "%s: blocking send/receive of bytes between neighbours: as MPI", g->name);
	free(r[0].h), free(dtake(&s[0]));
	for (int i = 0; i < 4; i++)
		free(h[i]), free(got[i]);
	free(z);
}

/* A message's payload: who sent what, the same number in every element
 * but for a ripple by index. */
static void stamp(float *d, size_t n, float v)
{
	float *h = hnew(n);
	for (size_t i = 0; i < n; i++)
		h[i] = v + (float)(i % 7) * 0.125f;
	up(d, h, n);
	free(h);
}

static bool stamped(const char *what, const float *d, size_t n, float v)
{
	float *h = hnew(n), *w = hnew(n);
	down(h, d, n);
	for (size_t i = 0; i < n; i++)
		w[i] = v + (float)(i % 7) * 0.125f;
	bool ok = same(what, h, w, n);
	free(h), free(w);
	return ok;
}

/* pipeline.c's transfers, on device buffers: every pass of a pp_sched
 * schedule receives its input (forward from the previous stage, backward
 * from the next) with recv_into (irecv + wait), and sends its output with
 * send_copy (a staging copy, isend, kept until dist_test says done). The
 * staging copies come from a pool made beforehand: a cudaFree while a send
 * waits for its peer would synchronise the device (dist.h). */
static bool pipeline_pattern(struct dist_group *g, int vpp, int m, bool fwd_only)
{
	struct pp_sched s;
	if (pp_sched_init(&s, g->size, g->rank, vpp, m, -1, fwd_only) < 0)
		die("pipeline schedule pp %d vpp %d m %d", g->size, vpp, m);
	const size_t n = 4099;
	float *in = dnew(n);
	int nbuf = s.nops + 1;
	float **pool = malloc((size_t)nbuf * sizeof(*pool));
	struct dist_req *sends = calloc((size_t)nbuf, sizeof(*sends));
	bool *busy = calloc((size_t)nbuf, sizeof(*busy)), ok = true;
	for (int i = 0; i < nbuf; i++)
		pool[i] = dnew(n);
	for (int i = 0; i < s.nops; i++) {
		const struct pp_op *o = &s.ops[i];
		int kind = o->kind == PP_FORWARD ? 0 : 1, peer, pc;
		/* receive: forward from prev, backward from next */
		bool from = kind == 0 ? pp_sched_prev(&s, o->chunk, &peer, &pc) : pp_sched_next(&s, o->chunk, &peer, &pc);
		if (from) {
			struct dist_req r;
			dist_irecv_f32(g, in, n, peer, 2 * o->chunk + kind, &r);
			dist_wait(&r);
			char what[96];
			snprintf(what, sizeof(what), "pipeline %s of micro %d chunk %d", kind ? "gradient" : "activation",
				 o->micro, o->chunk);
			ok &= stamped(what, in, n, (float)(o->micro * 1000 + pc * 10 + kind));
		}
		/* send: forward to next, backward to prev */
		bool to = kind == 0 ? pp_sched_next(&s, o->chunk, &peer, &pc) : pp_sched_prev(&s, o->chunk, &peer, &pc);
		if (to) {
			for (int k = 0; k < nbuf; k++) /* reap */
				if (busy[k] && dist_test(&sends[k]))
					busy[k] = false;
			int k = 0;
			while (busy[k])
				k++;
			stamp(pool[k], n, (float)(o->micro * 1000 + o->chunk * 10 + kind));
			dist_isend_f32(g, pool[k], n, peer, 2 * pc + kind, &sends[k]);
			busy[k] = true;
		}
	}
	for (int k = 0; k < nbuf; k++)
		dist_wait(&sends[k]);
	for (int i = 0; i < nbuf; i++)
		CK(cudaFree(pool[i]));
	CK(cudaFree(in));
	free(pool), free(sends), free(busy);
	pp_sched_free(&s);
	return ok;
}

/* ring_attn.c's transfers, on device buffers: the K/V ring (ring_kv_step:
 * wait for the block, wait for the sends that read the other buffer,
 * receive the next block into it, pass this one on) in the forward, and in
 * the backward the dK/dV accumulator travelling with it, each rank adding
 * its share (here rank j adds j + 1 to every element) before sending it on. */
enum { RING_K = 301, RING_V, RING_DKV };

static bool ring_pattern(struct dist_group *g, bool backward)
{
	const int cp = g->size, me = g->rank;
	const size_t n = 3001;
	float *own = dnew(2 * n), *kv[2] = { dnew(2 * n), dnew(2 * n) }, *dkv[2] = { dnew(2 * n), dnew(2 * n) };
	float *h = hnew(2 * n);
	bool ok = true;
	stamp(own, n, (float)(me * 100 + 1));     /* K of block me */
	stamp(own + n, n, (float)(me * 100 + 2)); /* V */
	struct dist_req send[2] = { 0 }, recv[2] = { 0 }, dsend = { 0 }, drecv = { 0 };
	for (int i = 0; i < cp; i++) {
		const float *K = own, *V = own + n;
		if (i > 0) {
			dist_wait(&recv[0]);
			dist_wait(&recv[1]);
			K = kv[i % 2], V = kv[i % 2] + n;
		}
		int src = (me - i + cp) % cp;
		ok &= stamped("ring K", K, n, (float)(src * 100 + 1)) & stamped("ring V", V, n, (float)(src * 100 + 2));
		if (i + 1 < cp) {
			float *next = kv[(i + 1) % 2];
			dist_wait(&send[0]);
			dist_wait(&send[1]);
			dist_irecv_f32(g, next, n, (me + cp - 1) % cp, RING_K, &recv[0]);
			dist_irecv_f32(g, next + n, n, (me + cp - 1) % cp, RING_V, &recv[1]);
			dist_isend_f32(g, K, n, (me + 1) % cp, RING_K, &send[0]);
			dist_isend_f32(g, V, n, (me + 1) % cp, RING_V, &send[1]);
		}
		if (!backward || i == 0)
			continue;
		float *acc = dkv[i % 2];
		if (i == 1)
			CK(cudaMemset(acc, 0, 2 * n * sizeof(float)));
		else
			dist_wait(&drecv);
		dist_wait(&dsend);
		dist_irecv_f32(g, dkv[(i + 1) % 2], 2 * n, (me + cp - 1) % cp, RING_DKV, &drecv);
		/* this rank's share of block src's gradient */
		down(h, acc, 2 * n);
		for (size_t j = 0; j < 2 * n; j++)
			h[j] += (float)(me + 1);
		up(acc, h, 2 * n);
		dist_isend_f32(g, acc, 2 * n, (me + 1) % cp, RING_DKV, &dsend);
	}
	if (backward && cp > 1) { /* the other ranks' shares of this rank's block */
		dist_wait(&drecv);
		float *w = hnew(2 * n);
		for (size_t j = 0; j < 2 * n; j++)
			w[j] = (float)(cp * (cp + 1) / 2 - (me + 1));
		down(h, dkv[cp % 2], 2 * n);
		ok &= same("ring dK/dV", h, w, 2 * n);
		free(w);
	}
	dist_wait(&dsend);
	dist_wait(&send[0]);
	dist_wait(&send[1]);
	CK(cudaFree(own));
	for (int i = 0; i < 2; i++) {
		CK(cudaFree(kv[i]));
		CK(cudaFree(dkv[i]));
	}
	free(h);
	return ok;
}

static void multi_patterns(struct dist_group *g)
{
	const int p = g->size;
	const int cases[][3] = { { 1, p, 0 }, { 1, 3 * p + 1, 0 }, { 1, 2, 1 }, { 2, 2 * p, 0 }, { 3, 3 * p, 0 },
				 { 2, 2 * p, 1 } };
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		tap(pipeline_pattern(g, cases[k][0], cases[k][1], cases[k][2]),
		    "%s: pipeline.c's transfers in the %s schedule of pp %d, vpp %d, %d micro-batches: every message "
		    "where it belongs",
		    g->name, cases[k][2] ? "forward-only" : "1F1B", p, cases[k][0], cases[k][1]);
	tap(ring_pattern(g, false), "%s: ring_attn.c's forward K/V ring of %d steps: every block where it belongs",
	    g->name, p);
	tap(ring_pattern(g, true), "%s: ring_attn.c's backward ring with the dK/dV accumulator: sums as expected",
	    g->name);
}

static int multi_rank_main(void)
{
	/* rank r on GPU (local rank) % count, chosen before MPI_Init (main);
	 * two ranks of one node on one GPU cannot share an NCCL communicator */
	MPI_Comm node;
	int local = 0, nlocal = 1, count = device_cuda_count(), skip_all;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, D.rank, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &local);
	MPI_Comm_size(node, &nlocal);
	MPI_Comm_free(&node);
	int mine = nlocal > count;
	MPI_Allreduce(&mine, &skip_all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (skip_all) {
		char why[160];
		snprintf(why, sizeof(why), "%d ranks on a node with %d GPU(s): NCCL needs a GPU per rank", nlocal, count);
		return skip(why);
	}
	int dev = -1;
	CK(cudaGetDevice(&dev));
	if (dev != local % count)
		die("rank %d chose GPU %d before MPI_Init, and its local rank says %d", D.rank, dev, local % count);
	struct dist_layout l = { .world = D.world, .tp = 1, .pp = D.world, .cp = 1, .ep = 1, .etp = 1, .dp = 1,
				 .edp = 1, .vpp = 1 };
	if (dist_setup(&D, &l) < 0 || dist_use_device(&D) < 0)
		die("could not set up the groups");
	dist_watchdog_start(&D, 3.0, 0); /* a hang ends the test */
	tap(D.world_g.nccl && D.pp.nccl && !D.tp.nccl, "dist_use_device: communicators for world and pipeline (%d "
							 "ranks), none for the groups of one", D.world);
	multi_collectives(&D.world_g);
	multi_collectives(&D.pp);
	multi_nonblocking(&D.pp);
	multi_transfers(&D.pp);
	multi_patterns(&D.pp);
	ordering(&D.pp, "pipeline group");
	return finish();
}

#endif /* MEGAC_CUDA */

int main(int argc, char **argv)
{
	bool no_gpu = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-gpu")) {
			no_gpu = true;
		} else if (!strcmp(argv[i], "--no-big")) {
#ifdef MEGAC_CUDA
			no_big = true;
#endif
		} else {
			fprintf(stderr, "usage: nccl [--no-gpu] [--no-big]\n");
			return 2;
		}
	}
#ifdef MEGAC_CUDA
	/* the GPU before MPI_Init: the launcher's local rank, as train */
	const int ndev = no_gpu ? 0 : device_cuda_count();
	if (ndev > 0)
		CK(cudaSetDevice(device_local_rank(-1) % ndev));
#endif
	if (dist_init(&D, "nccl") < 0)
		return 1;
	if (no_gpu || !device_cuda_built() || device_cuda_count() == 0)
		return skip(!device_cuda_built() ? "this build has no CUDA backend" : "no GPU");
#ifdef MEGAC_CUDA
	return D.world > 1 ? multi_rank_main() : one_rank_main();
#else
	return skip("this build has no CUDA backend");
#endif
}
