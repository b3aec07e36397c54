/*
 * test_grad_sync.c - lib/train/grad_sync: how the flat gradient buffer is cut
 * into buckets (whole parameters, from the end, late parameters apart) and
 * when each bucket's reduction starts: only once every parameter in it is
 * final, never for late buckets before grad_sync_late, and every bucket by
 * the end. (The reductions themselves run under mpirun in
 * tests/prog/train_pipe.sh, where overlapped layouts equal one rank.)
 */
#include "tensor/params.h"
#include "train/grad_sync.h"
#include "test.h"

static void add(struct param_registry *r, const char *name, int64_t n, unsigned flags)
{
	int64_t shape[1] = { n };
	params_add(r, name, 1, shape, -1, 1, 0, flags, PARAM_INIT_ZERO, 0);
}

static void test_buckets_and_readiness(void)
{
	struct param_registry reg = { 0 };
	add(&reg, "a", 100, PARAM_TIED); /* 0..100 */
	add(&reg, "b", 30, 0);           /* 100..130 */
	add(&reg, "c", 30, 0);           /* 130..160 */
	add(&reg, "d", 50, PARAM_SP);    /* 160..210 */
	add(&reg, "e", 20, 0);           /* 210..230 */
	add(&reg, "f", 200, 0);          /* 230..430: larger than a bucket, alone */
	struct dist_group one = { .name = "data-parallel", .size = 1 };
	struct grad_sync s;
	grad_sync_init(&s, kops_cpu(), &reg, &one, 0, reg.total, false, 64, true, PARAM_SP | PARAM_TIED);
	/* from the end: [f] [e] [d late] [b c] [a late] */
	CHECK_INT(s.nb, 5);
	size_t want[5][2] = { { 230, 430 }, { 210, 230 }, { 160, 210 }, { 100, 160 }, { 0, 100 } };
	bool late[5] = { false, false, true, false, true };
	for (int i = 0; i < 5 && i < s.nb; i++) {
		CHECK_INT(s.b[i].lo, want[i][0]);
		CHECK_INT(s.b[i].hi, want[i][1]);
		CHECK_INT(s.b[i].late, late[i]);
	}
	grad_sync_begin(&s);
	grad_sync_param_ready(&s, 5);
	CHECK(s.b[0].started);
	grad_sync_param_ready(&s, 2);
	CHECK(!s.b[3].started); /* b is still pending */
	grad_sync_param_ready(&s, 3);
	CHECK(!s.b[2].started); /* late: waits for grad_sync_late */
	grad_sync_param_ready(&s, 1);
	CHECK(s.b[3].started);
	CHECK(!s.b[1].started);
	grad_sync_finish(&s); /* e was never reported: started now */
	CHECK(s.b[1].started);
	CHECK(!s.b[2].started && !s.b[4].started);
	grad_sync_late(&s);
	CHECK(s.b[2].started && s.b[4].started);
	/* a second iteration starts from scratch */
	grad_sync_begin(&s);
	for (int i = 0; i < s.nb; i++)
		CHECK(!s.b[i].started);
	grad_sync_free(&s);

	/* without overlap: one bucket of everything, nothing late */
	grad_sync_init(&s, kops_cpu(), &reg, &one, 0, reg.total, false, 64, false, PARAM_SP | PARAM_TIED);
	CHECK_INT(s.nb, 1);
	CHECK_INT(s.b[0].lo, 0);
	CHECK_INT(s.b[0].hi, 430);
	CHECK(!s.b[0].late);
	grad_sync_free(&s);
	params_free(&reg);
}

int main(void)
{
	RUN(test_buckets_and_readiness);
	return test_summary();
}
