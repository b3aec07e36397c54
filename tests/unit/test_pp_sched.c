/*
 * test_pp_sched.c - lib/train/pp_sched: Megatron's pipeline schedules.
 *
 * Checked: the warmup counts of get_pp_rank_microbatches; the forward order
 * of the two examples in Megatron's ModelParallelConfig documentation of
 * microbatch_group_size_per_vp_stage; for many layouts, that every rank runs
 * each (chunk, micro-batch) forward once and its backward once, after it;
 * and, by simulating all ranks of a pipeline with sends that never block
 * (megac's execution model: isend, blocking receive), that the ranks cannot
 * deadlock and that a forward never takes the activation slot
 * (micro-batch mod the schedule's in-flight count) of a micro-batch still
 * waiting for its backward.
 */
#include <stdbool.h>

#include "base/xalloc.h"
#include "train/pp_sched.h"
#include "test.h"

static void test_warmup(void)
{
	struct pp_sched s;
	for (int r = 0; r < 4; r++) { /* 1F1B: pp - rank - 1 */
		CHECK_INT(pp_sched_init(&s, 4, r, 1, 8, -1, false), 0);
		CHECK_INT(s.warmup, 3 - r);
		CHECK_INT(s.inflight[0], 4 - r);
		pp_sched_free(&s);
	}
	CHECK_INT(pp_sched_init(&s, 4, 0, 1, 2, -1, false), 0); /* capped at m */
	CHECK_INT(s.warmup, 2);
	pp_sched_free(&s);
	/* interleaved: (pp - rank - 1) * 2 + (vpp - 1) * group */
	CHECK_INT(pp_sched_init(&s, 4, 1, 2, 8, -1, false), 0);
	CHECK_INT(s.warmup, 2 * 2 + 4);
	pp_sched_free(&s);
	CHECK_INT(pp_sched_init(&s, 2, 0, 3, 4, -1, false), 0); /* capped at m * vpp */
	CHECK_INT(s.warmup, 2 + 2 * 2);
	pp_sched_free(&s);
	CHECK_INT(pp_sched_init(&s, 2, 0, 2, 2, -1, false), 0);
	CHECK_INT(s.warmup, 4);
	pp_sched_free(&s);
}

/* The forward passes of a schedule as "micro" digits and their chunks. */
static void forwards(const struct pp_sched *s, char *micro, char *chunk)
{
	int n = 0;
	for (int i = 0; i < s->nops; i++)
		if (s->ops[i].kind == PP_FORWARD) {
			micro[n] = (char)('0' + s->ops[i].micro);
			chunk[n++] = (char)('0' + s->ops[i].chunk);
		}
	micro[n] = chunk[n] = 0;
}

static void test_megatron_examples(void)
{
	struct pp_sched s;
	char micro[64], chunk[64];
	/* "for PP=2 VP=2, when microbatch_group_size_per_vp_stage=2, num_microbatches = 4,
	 * rank 0 | 0 1 0 1 2 3 2 3" */
	CHECK_INT(pp_sched_init(&s, 2, 0, 2, 4, 2, false), 0);
	forwards(&s, micro, chunk);
	CHECK_STR(micro, "01012323");
	CHECK_STR(chunk, "00110011");
	pp_sched_free(&s);
	/* "When microbatch_group_size_per_vp_stage=3, num_microbatches = 5,
	 * rank 0 | 0 1 2 0 1 2 3 4 3 4" (the schedule-table example PP2 N3M5 VP2) */
	CHECK_INT(pp_sched_init(&s, 2, 0, 2, 5, 3, false), 0);
	forwards(&s, micro, chunk);
	CHECK_STR(micro, "0120123434");
	CHECK_STR(chunk, "0001110011");
	pp_sched_free(&s);
	/* 1F1B on the first of 4 stages, 6 micro-batches: 3 warmup forwards, then
	 * one forward one backward, then the cooldown */
	CHECK_INT(pp_sched_init(&s, 4, 0, 1, 6, -1, false), 0);
	char order[32];
	for (int i = 0; i < s.nops; i++)
		order[i] = (char)((s.ops[i].kind == PP_FORWARD ? 'a' : 'A') + s.ops[i].micro);
	order[s.nops] = 0;
	CHECK_STR(order, "abcdAeBfCDEF");
	pp_sched_free(&s);
}

static void test_refusals(void)
{
	struct pp_sched s;
	/* 6 micro-batches in groups of 4 leave 2 < pp over */
	CHECK_INT(pp_sched_init(&s, 4, 0, 2, 6, -1, false), -1);
	CHECK_INT(pp_sched_init(&s, 4, 0, 2, 3, -1, false), -1); /* fewer micro-batches than stages */
	CHECK_INT(pp_sched_init(&s, 4, 0, 2, 8, 3, false), -1);  /* group below pp */
	CHECK_INT(pp_sched_init(&s, 4, 0, 2, 8, 6, false), -1);  /* 8 = 6 + 2, and 2 < pp */
	CHECK_INT(pp_sched_init(&s, 4, 0, 2, 10, 6, false), 0); /* 10 = 6 + 4 */
	pp_sched_free(&s);
}

/*
 * All pp ranks run their schedules; a forward waits for the activation of
 * the previous stage's forward of that micro-batch, a backward for the
 * gradient from the next stage's backward. Sends never block. Returns 0 if
 * every rank finished, -1 on a deadlock; checks in-flight counts.
 */
static int simulate(int pp, int vpp, int m, int group, bool fwd_only)
{
	struct pp_sched *s = xcalloc((size_t)pp, sizeof(*s));
	for (int r = 0; r < pp; r++)
		if (pp_sched_init(&s[r], pp, r, vpp, m, group, fwd_only) < 0)
			return -2;
	/* done[kind][rank][chunk][micro] */
	size_t cells = (size_t)pp * vpp * m;
	char *done = xcalloc(2 * cells, 1);
#define DONE(kind, r, v, i) done[(size_t)(kind) * cells + ((size_t)(r) * vpp + (v)) * m + (i)]
	int *pc = xcalloc((size_t)pp, sizeof(int));
	char *held = xcalloc((size_t)pp * vpp * m, 1); /* micro-batches in flight per rank and chunk */
	int finished = 0, ret = 0;
	while (finished < pp) {
		bool moved = false;
		for (int r = 0; r < pp; r++) {
			if (pc[r] == s[r].nops)
				continue;
			const struct pp_op *o = &s[r].ops[pc[r]];
			int pr, pv;
			bool ready;
			if (o->kind == PP_FORWARD)
				ready = !pp_sched_prev(&s[r], o->chunk, &pr, &pv) || DONE(PP_FORWARD, pr, pv, o->micro);
			else
				ready = DONE(PP_FORWARD, r, o->chunk, o->micro) &&
					(!pp_sched_next(&s[r], o->chunk, &pr, &pv) || DONE(PP_BACKWARD, pr, pv, o->micro));
			if (!ready)
				continue;
			if (DONE(o->kind, r, o->chunk, o->micro))
				ret = -3; /* a pass twice */
			DONE(o->kind, r, o->chunk, o->micro) = 1;
			/* the activation slot (micro % inflight) of a forward must not
			 * belong to another micro-batch of the chunk still waiting for
			 * its backward */
			int slots = s[r].inflight[o->chunk];
			char *h = &held[((size_t)r * vpp + o->chunk) * m];
			if (o->kind == PP_FORWARD && !fwd_only) {
				for (int j = 0; j < m; j++)
					if (h[j] && j % slots == o->micro % slots)
						ret = -4;
				h[o->micro] = 1;
			}
			if (o->kind == PP_BACKWARD)
				h[o->micro] = 0;
			moved = true;
			if (++pc[r] == s[r].nops)
				finished++;
		}
		if (!moved) {
			ret = -1;
			break;
		}
	}
	/* every pass ran exactly once */
	for (int r = 0; !ret && r < pp; r++)
		for (int v = 0; v < vpp; v++)
			for (int i = 0; i < m; i++)
				if (!DONE(PP_FORWARD, r, v, i) || DONE(PP_BACKWARD, r, v, i) == fwd_only)
					ret = -5;
#undef DONE
	for (int r = 0; r < pp; r++)
		pp_sched_free(&s[r]);
	free(s);
	free(done);
	free(pc);
	free(held);
	return ret;
}

static void test_no_deadlock(void)
{
	int cases = 0;
	for (int pp = 1; pp <= 6; pp++)
		for (int vpp = 1; vpp <= 4; vpp++)
			for (int m = 1; m <= 13; m++)
				for (int group = -1; group <= 7; group++) {
					if (vpp > 1 && pp == 1)
						continue;
					if (vpp == 1 && group != -1)
						continue;
					struct pp_sched probe;
					int ok = pp_sched_init(&probe, pp, 0, vpp, m, group == 0 ? -1 : group, false);
					if (ok < 0)
						continue;
					pp_sched_free(&probe);
					for (int fo = 0; fo < 2; fo++) {
						int r = simulate(pp, vpp, m, group == 0 ? -1 : group, fo);
						if (r != 0) {
							printf("#   pp %d vpp %d m %d group %d forward-only %d: %d\n", pp, vpp,
							       m, group, fo, r);
							CHECK(r == 0);
						}
						cases++;
					}
				}
	printf("#   %d schedules simulated\n", cases);
	CHECK(cases > 200);
}

int main(void)
{
	RUN(test_warmup);
	RUN(test_megatron_examples);
	RUN(test_refusals);
	RUN(test_no_deadlock);
	return test_summary();
}
