/*
 * test_dist_lanes.c - what lib/dist's NCCL channels assume of the pipeline
 * (lib/dist/nccl.c, "why channels"): NCCL matches the messages between two
 * ranks in the order posted, MPI by tag, so on device buffers the two agree
 * only if, on each channel, the sender posts its messages in the order the
 * receiver posts the receives. The channels keep even and odd tags apart
 * (two lanes); pipeline.c tags a message 2 chunk + kind (activations even,
 * gradients odd). Checked here for every pp_sched schedule of pp <= 6,
 * vpp <= 4, m <= 13 and every micro-batch group size: per ordered pair of
 * ranks and per lane, the sequence of (tag, micro-batch) a rank sends is
 * the sequence its peer receives. And that one lane would not do: with
 * pp = 2 and interleaving, activations and gradients travel between the
 * same two ranks in orders that differ between the two sides.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "test.h"
#include "train/pp_sched.h"

/* pipeline.c's tag_of() */
static int tag_of(int kind, int chunk)
{
	return 2 * chunk + kind;
}

#define MAXPP 6

/* One ordered pair and lane: messages as tag * 10000 + micro-batch. */
struct seq {
	int *v, n, cap;
};

static void add(struct seq *s, int tag, int micro)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->v = xrealloc(s->v, (size_t)s->cap * sizeof(int));
	}
	s->v[s->n++] = tag * 10000 + micro;
}

/* Whether every sender's sequence equals its receiver's, with `lanes`
 * lanes; -2 when pp_sched refuses the combination. */
static int orders_agree(int pp, int vpp, int m, int group, bool fwd_only, int lanes)
{
	struct pp_sched s[MAXPP];
	char buf[256];
	log_capture(buf, sizeof(buf)); /* refused combinations say why; not wanted here */
	int refused = 0;
	for (int r = 0; r < pp && !refused; r++)
		if (pp_sched_init(&s[r], pp, r, vpp, m, group, fwd_only) < 0) {
			refused = 1;
			for (int q = 0; q < r; q++)
				pp_sched_free(&s[q]);
		}
	log_capture(NULL, 0);
	if (refused)
		return -2;
	/* sent[a][b][lane]: what a sends to b; got[b][a][lane]: what b receives from a */
	struct seq sent[MAXPP][MAXPP][2] = { 0 }, got[MAXPP][MAXPP][2] = { 0 };
	for (int r = 0; r < pp; r++)
		for (int i = 0; i < s[r].nops; i++) {
			const struct pp_op *o = &s[r].ops[i];
			int kind = o->kind == PP_FORWARD ? 0 : 1, peer, pc, t;
			/* as pipeline.c: forward receives from prev, sends to next;
			 * backward receives from next, sends to prev */
			if (kind == 0 ? pp_sched_prev(&s[r], o->chunk, &peer, &pc) : pp_sched_next(&s[r], o->chunk, &peer, &pc)) {
				t = tag_of(kind, o->chunk);
				add(&got[r][peer][t % lanes], t, o->micro);
			}
			if (kind == 0 ? pp_sched_next(&s[r], o->chunk, &peer, &pc) : pp_sched_prev(&s[r], o->chunk, &peer, &pc)) {
				t = tag_of(kind, pc);
				add(&sent[r][peer][t % lanes], t, o->micro);
			}
		}
	int agree = 1;
	for (int a = 0; a < pp; a++)
		for (int b = 0; b < pp; b++)
			for (int l = 0; l < lanes; l++) {
				struct seq *x = &sent[a][b][l], *y = &got[b][a][l];
				if (x->n != y->n || (x->n && memcmp(x->v, y->v, (size_t)x->n * sizeof(int))))
					agree = 0;
				free(x->v);
				free(y->v);
			}
	for (int r = 0; r < pp; r++)
		pp_sched_free(&s[r]);
	return agree;
}

static void test_two_lanes_agree(void)
{
	int cases = 0, bad = 0;
	for (int pp = 2; pp <= MAXPP; pp++)
		for (int vpp = 1; vpp <= 4; vpp++)
			for (int m = 1; m <= 13; m++)
				for (int group = -1; group <= 13; group++)
					for (int fo = 0; fo < 2; fo++) {
						if ((vpp == 1 && group != -1) || group == 0)
							continue;
						int r = orders_agree(pp, vpp, m, group, fo, 2);
						if (r == -2)
							continue;
						cases++;
						if (!r) {
							if (bad++ < 5)
								printf("#   pp %d vpp %d m %d group %d%s: orders differ\n", pp,
								       vpp, m, group, fo ? " forward-only" : "");
						}
					}
	CHECK_INT(bad, 0);
	CHECK(cases > 1000);
}

static void test_one_lane_would_not(void)
{
	/* pp 2, vpp 2, 4 micro-batches in groups of 4: both kinds between
	 * ranks 0 and 1, interleaved differently on the two sides */
	CHECK_INT(orders_agree(2, 2, 4, 4, false, 1), 0);
	CHECK_INT(orders_agree(2, 2, 4, 4, false, 2), 1);
	/* without interleaving one kind per direction: one lane would do */
	CHECK_INT(orders_agree(4, 1, 8, -1, false, 1), 1);
}

int main(void)
{
	RUN(test_two_lanes_agree);
	RUN(test_one_lane_would_not);
	return test_summary();
}
