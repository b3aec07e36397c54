/*
 * test_dist_mapped.c - dist_iallgather_range_mapped (lib/dist/dist.c), the
 * all-gather of a range of elements stored with different byte sizes.
 *
 * The storage: "tensors" of 1- and 2-byte elements one after another, each
 * starting on a 16-byte boundary (the padding goes with a tensor's last
 * element), empty tensors among them; the map finds a tensor by bisection.
 * Every byte the owner of an element holds (its bytes and the padding after
 * it) has a value made from its position; every other byte a rank's own
 * marker. After a gather of elements [a, b), the bytes [at(a), at(b)) must
 * be the owners' values on every rank and every other byte untouched.
 *
 * Run alone (as tests/run.sh does): on a group of one rank the call moves
 * nothing, counts nothing and leaves an empty request.
 * Under mpirun (tests/prog/dist_mapped.sh, 2 and 3 ranks; the shards do not
 * fall on the tensors' edges): ranges over everything, inside one tensor,
 * across tensors, one element on a shard's edge, in one rank's shard only,
 * empty; three gathers in flight at once, completed by dist_test; the map's
 * storage scribbled over after the call returns (the call keeps what it
 * needs); the group's byte counter ((p - 1) / p of the range's bytes).
 * MEGAC_LONG=1 adds a buffer of more than DIST_PIECE elements, with an
 * element whose padding fills most of a piece, so the range goes in pieces
 * bounded by elements and by bytes (about 600 MB per rank).
 * Each check is one line from rank 0, "ok" when it held on every rank.
 */
#include "base/error.h"
#include "base/xalloc.h"
#include "dist/dist.h"
#include "test.h"

#include <stdbool.h>

static struct dist D;

/* ---- the storage ---- */

struct layout {
	int n;          /* tensors */
	size_t *first;  /* [n + 1]: element index of each tensor's start; first[n] = total */
	size_t *start;  /* [n + 1]: byte offset of each tensor; start[n] = the buffer's size */
	int *esize;     /* [n] */
};

/* tensors of len[i] elements of es[i] bytes, extra[i] bytes of padding after
 * each besides the rounding up to 16 */
static struct layout make_layout(int n, const size_t *len, const int *es, const size_t *extra)
{
	struct layout l = { n, xmalloc((size_t)(n + 1) * sizeof(size_t)), xmalloc((size_t)(n + 1) * sizeof(size_t)),
			    xmalloc((size_t)n * sizeof(int)) };
	size_t e = 0, off = 0;
	for (int i = 0; i < n; i++) {
		l.first[i] = e;
		l.start[i] = off;
		l.esize[i] = es[i];
		e += len[i];
		off = (off + len[i] * (size_t)es[i] + (extra ? extra[i] : 0) + 15) & ~(size_t)15;
	}
	l.first[n] = e;
	l.start[n] = off;
	return l;
}

static void free_layout(struct layout *l)
{
	free(l->first), free(l->start), free(l->esize);
}

/* the map: the last tensor whose first element is <= e (empty ones are skipped by taking the last) */
static size_t at(const void *ctx, size_t e)
{
	const struct layout *l = ctx;
	if (e >= l->first[l->n])
		return l->start[l->n];
	int lo = 0, hi = l->n; /* first[lo] <= e < first[hi] */
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		if (l->first[mid] <= e)
			lo = mid;
		else
			hi = mid;
	}
	return l->start[lo] + (e - l->first[lo]) * (size_t)l->esize[lo];
}

static uint8_t value_at(size_t byte)
{
	return (uint8_t)((byte * 131 + (byte >> 8) * 7 + 3) & 0xff);
}

/* this rank's buffer before a gather: its shard's bytes their values, the rest its marker */
static uint8_t *fill(const struct layout *l, struct dist_group *g)
{
	size_t total = l->first[l->n], size = l->start[l->n], lo, hi;
	dist_shard(total, g->size, g->rank, &lo, &hi);
	uint8_t *buf = xmalloc(size + 1);
	memset(buf, 0xe0 + g->rank, size + 1);
	for (size_t p = at(l, lo); p < at(l, hi); p++)
		buf[p] = value_at(p);
	return buf;
}

/* buf after gathering [a, b): the values there, the rest as fill() left it */
static bool gathered(const struct layout *l, struct dist_group *g, const uint8_t *buf, size_t a, size_t b)
{
	size_t total = l->first[l->n], size = l->start[l->n], lo, hi;
	dist_shard(total, g->size, g->rank, &lo, &hi);
	const size_t ba = at(l, a), bb = at(l, b), mlo = at(l, lo), mhi = at(l, hi);
	for (size_t p = 0; p <= size; p++) {
		bool val = p < size && ((p >= ba && p < bb) || (p >= mlo && p < mhi));
		uint8_t want = val ? value_at(p) : (uint8_t)(0xe0 + g->rank);
		if (buf[p] != want) {
			printf("#   rank %d: byte %zu of %zu is 0x%02x, not 0x%02x (gather of [%zu, %zu), bytes [%zu, "
			       "%zu))\n", g->rank, p, size, buf[p], want, a, b, ba, bb);
			return false;
		}
	}
	return true;
}

/* ---- the cases ---- */

/* 37, 0, 100, 5, 64, 1 and 250 elements: total 457, not on any shard edge of 2 or 3 ranks */
static const size_t LEN[] = { 37, 0, 100, 5, 64, 1, 250 };
static const int ES[] = { 2, 1, 1, 2, 1, 2, 1 };
#define NT ((int)(sizeof LEN / sizeof LEN[0]))

static void test_one_rank(void)
{
	struct dist_group g = { .name = "test", .rank = 0, .size = 1 };
	struct layout l = make_layout(NT, LEN, ES, NULL);
	struct dist_bytemap map = { at, &l };
	uint8_t *buf = fill(&l, &g);
	struct dist_req r;
	dist_iallgather_range_mapped(&g, buf, l.first[NT], 3, 400, &map, &r);
	CHECK(!r.req && !r.dev && !r.extra);
	dist_wait(&r);
	CHECK(gathered(&l, &g, buf, 3, 400));
	CHECK_INT(g.bytes, 0);
	CHECK_INT(g.calls, 0);
	free(buf);
	free_layout(&l);
}

static struct layout L;

/* ranges that matter for this group size */
static int ranges(size_t (*rg)[2])
{
	struct dist_group *g = &D.world_g;
	const size_t total = L.first[NT];
	size_t lo1, hi1;
	dist_shard(total, g->size, 1, &lo1, &hi1);
	int n = 0;
	rg[n][0] = 0, rg[n++][1] = total;            /* everything */
	rg[n][0] = 40, rg[n++][1] = 130;             /* inside the third tensor */
	rg[n][0] = 30, rg[n++][1] = 210;             /* across tensors (the empty one too) */
	rg[n][0] = lo1, rg[n++][1] = lo1 + 1;        /* one element on a shard's edge */
	rg[n][0] = lo1 - 1, rg[n++][1] = lo1 + 1;    /* two ranks, one element each */
	rg[n][0] = lo1 + 1, rg[n++][1] = hi1 - 1;    /* rank 1's alone */
	rg[n][0] = 141, rg[n++][1] = 143;            /* the end of a tensor and the start of the next */
	rg[n][0] = 206, rg[n++][1] = 207;            /* the one-element tensor and its padding */
	rg[n][0] = 99, rg[n++][1] = 99;              /* empty */
	rg[n][0] = total - 3, rg[n++][1] = total;    /* the buffer's last elements and padding */
	return n;
}

static void test_ranges(void)
{
	struct dist_group *g = &D.world_g;
	struct dist_bytemap map = { at, &L };
	size_t rg[16][2];
	int n = ranges(rg);
	for (int i = 0; i < n; i++) {
		const size_t a = rg[i][0], b = rg[i][1];
		uint8_t *buf = fill(&L, g);
		uint64_t b0 = g->bytes, c0 = g->calls;
		struct dist_req r;
		dist_iallgather_range_mapped(g, buf, L.first[NT], a, b, &map, &r);
		dist_wait(&r);
		CHECK(gathered(&L, g, buf, a, b));
		CHECK_INT(g->bytes - b0, (uint64_t)(g->size - 1) * (at(&L, b) - at(&L, a)) / (uint64_t)g->size);
		CHECK_INT(g->calls - c0, a < b ? 1 : 0);
		free(buf);
	}
}

/* three gathers in flight, on a copy of the map that is scribbled over as soon as they are posted */
static void test_in_flight(void)
{
	struct dist_group *g = &D.world_g;
	size_t rg[16][2];
	ranges(rg);
	struct layout c = make_layout(NT, LEN, ES, NULL);
	struct dist_bytemap map = { at, &c };
	uint8_t *buf[3];
	struct dist_req r[3];
	for (int i = 0; i < 3; i++) {
		buf[i] = fill(&L, g);
		dist_iallgather_range_mapped(g, buf[i], L.first[NT], rg[i][0], rg[i][1], &map, &r[i]);
	}
	for (int i = 0; i <= NT; i++)
		c.first[i] = c.start[i] = (size_t)-1;
	map.at = NULL;
	for (bool done = false; !done;) {
		done = true;
		for (int i = 2; i >= 0; i--)
			done &= dist_test(&r[i]);
	}
	for (int i = 0; i < 3; i++) {
		CHECK(gathered(&L, g, buf[i], rg[i][0], rg[i][1]));
		free(buf[i]);
	}
	free_layout(&c);
}

/* more than DIST_PIECE (2^28) elements, and an element with most of a piece of padding after it */
static void test_pieces(void)
{
	struct dist_group *g = &D.world_g;
	const size_t piece = (size_t)1 << 28;
	const size_t len[] = { 1000, 1, (piece + 4000), 3, 50 };
	const int es[] = { 1, 2, 1, 1, 2 };
	const size_t extra[] = { 0, piece - 5000, 0, 0, 0 };
	struct layout l = make_layout(5, len, es, extra);
	struct dist_bytemap map = { at, &l };
	const size_t total = l.first[5];
	/* the first piece of each ends where its bytes reach DIST_PIECE, a few
	 * thousand elements into the long tensor; the second of the whole range
	 * after DIST_PIECE elements, just short of its end: 3 and 2 pieces */
	const size_t rg[][2] = { { 0, total }, { 500, total - 20 } };
	const int npieces[] = { 3, 2 };
	for (int i = 0; i < 2; i++) {
		uint8_t *buf = fill(&l, g);
		uint64_t b0 = g->bytes;
		struct dist_req r;
		dist_iallgather_range_mapped(g, buf, total, rg[i][0], rg[i][1], &map, &r);
		CHECK_INT(r.nreq, npieces[i]);
		dist_wait(&r);
		CHECK(gathered(&l, g, buf, rg[i][0], rg[i][1]));
		CHECK_INT(g->bytes - b0,
			  (uint64_t)(g->size - 1) * (at(&l, rg[i][1]) - at(&l, rg[i][0])) / (uint64_t)g->size);
		free(buf);
	}
	free_layout(&l);
}

/* one line per check from rank 0: ok when it held on every rank */
static void group_run(const char *name, void (*fn)(void))
{
	int before = t_checks_failed;
	fn();
	double bad = t_checks_failed - before;
	dist_allreduce_sum_f64(&D.world_g, &bad, 1);
	if (bad)
		t_tests_failed++;
	if (D.rank == 0)
		printf("%s - %d ranks: %s\n", bad ? "not ok" : "ok", D.world, name);
	fflush(stdout);
}

int main(void)
{
	if (dist_init(&D, "test_dist_mapped") < 0)
		return 1;
	if (D.world == 1) {
		RUN(test_one_rank);
		dist_finalize(&D);
		return test_summary();
	}
	L = make_layout(NT, LEN, ES, NULL);
	group_run("gathers of ranges of mixed 1- and 2-byte elements: every byte, the byte counter", test_ranges);
	group_run("three gathers in flight, the map gone after the calls", test_in_flight);
	const char *lg = getenv("MEGAC_LONG");
	if (lg && *lg)
		group_run("a range of more than DIST_PIECE elements, pieces bounded by elements and bytes",
			  test_pieces);
	free_layout(&L);
	dist_finalize(&D);
	return test_summary();
}
