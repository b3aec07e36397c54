/*
 * test_gpt_index.c - GPT dataset index arithmetic against worked examples
 * (split ranges, the document/sample/shuffle indices of a four-document
 * dataset, blending) whose numbers were produced by Megatron's own code
 * (megatron/core/datasets/gpt_dataset.py, helpers.cpp) and numpy. Megatron's real outputs on
 * real datasets are checked in tests/prog/megatron_gpt_index.sh.
 */
#include "base/error.h"
#include "data/gpt_index.h"
#include "test.h"

#include <fcntl.h>

static int same_i64(const int64_t *got, const int64_t *want, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i]) {
			printf("#   %s[%zu] = %lld, expected %lld\n", what, i, (long long)got[i], (long long)want[i]);
			return 0;
		}
	return 1;
}

static void test_split(void)
{
	double b[4];
	bool present[3];
	uint64_t lo, hi;
	CHECK_INT(gpt_split_parse("969,30,1", b, present), 0);
	CHECK(b[0] == 0 && b[1] == 0.969 && b[2] == 0.999 && b[3] == 1.0);
	gpt_split_range(b, 0, 1000, &lo, &hi);
	CHECK(lo == 0 && hi == 969);
	gpt_split_range(b, 1, 1000, &lo, &hi);
	CHECK(lo == 969 && hi == 999);
	gpt_split_range(b, 2, 12345, &lo, &hi);
	CHECK(lo == 12333 && hi == 12345);
	gpt_split_range(b, 1, 12345, &lo, &hi);
	CHECK(lo == 11962 && hi == 12333);
	gpt_split_range(b, 1, 7, &lo, &hi);
	CHECK(lo == 7 && hi == 7); /* a tiny dataset yields empty ranges */
	CHECK_INT(gpt_split_parse("99,1,0", b, present), 0);
	CHECK(present[0] && present[1] && !present[2]);
	/* round half to even: 0.5 * 5 = 2.5 -> 2 */
	CHECK_INT(gpt_split_parse("1,1", b, present), 0);
	gpt_split_range(b, 0, 5, &lo, &hi);
	CHECK(lo == 0 && hi == 2);
	int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
	dup2(devnull, 2);
	CHECK_INT(gpt_split_parse("0,0,0", b, present), -1);
	CHECK_INT(gpt_split_parse("train", b, present), -1);
	dup2(saved, 2);
	close(saved);
	close(devnull);
}

/* the worked example T: four documents of 5, 3, 7, 4 tokens, S = 4, seed 1234 */
static const int32_t sizes[] = { 5, 3, 7, 4 };

static void test_worked_example_n3(void)
{
	struct gpt_index ix;
	CHECK_INT(gpt_index_build(sizes, 0, 4, 3, 4, 1234, true, &ix), 0);
	CHECK_INT(ix.epochs, 1);
	CHECK(!ix.separate_final_epoch);
	const int64_t doc[] = { 0, 1, 2, 3 }, smp[] = { 0, 0, 0, 4, 2, 0, 2, 4, 3, 1 }, shf[] = { 1, 2, 3, 0 };
	CHECK_INT(ix.n_doc, 4);
	CHECK_INT(ix.n_samples, 4);
	CHECK(same_i64(ix.doc_idx, doc, 4, "doc_idx"));
	CHECK(same_i64(ix.sample_idx, smp, 10, "sample_idx"));
	CHECK(same_i64(ix.shuffle_idx, shf, 4, "shuffle_idx"));
	gpt_index_free(&ix);
}

static void test_worked_example_n6_separate(void)
{
	struct gpt_index ix;
	CHECK_INT(gpt_index_build(sizes, 0, 4, 6, 4, 1234, true, &ix), 0);
	CHECK_INT(ix.epochs, 2);
	CHECK(ix.separate_final_epoch);
	const int64_t doc[] = { 0, 1, 2, 3, 1, 2, 3, 0 };
	const int64_t smp[] = { 0, 0, 0, 4, 2, 0, 2, 4, 3, 1, 4, 1, 5, 2, 5, 6, 6, 3, 7, 3 };
	const int64_t shf[] = { 0, 2, 3, 1, 4, 8, 7, 6, 5 };
	CHECK_INT(ix.n_samples, 9);
	CHECK(same_i64(ix.doc_idx, doc, 8, "doc_idx"));
	CHECK(same_i64(ix.sample_idx, smp, 20, "sample_idx"));
	CHECK(same_i64(ix.shuffle_idx, shf, 9, "shuffle_idx"));
	gpt_index_free(&ix);
}

static void test_worked_example_n10(void)
{
	struct gpt_index ix;
	CHECK_INT(gpt_index_build(sizes, 0, 4, 10, 4, 1234, true, &ix), 0);
	CHECK_INT(ix.epochs, 3);
	CHECK(ix.separate_final_epoch);
	const int64_t doc[] = { 2, 1, 2, 0, 0, 1, 3, 3, 0, 2, 1, 3 };
	const int64_t shf[] = { 7, 3, 5, 1, 4, 8, 0, 2, 6, 13, 10, 12, 9, 11 };
	CHECK_INT(ix.n_samples, 14);
	CHECK(same_i64(ix.doc_idx, doc, 12, "doc_idx"));
	CHECK(same_i64(ix.shuffle_idx, shf, 14, "shuffle_idx"));
	gpt_index_free(&ix);
}

static void test_blending(void)
{
	int16_t di[10];
	int64_t si[10];
	const double w1[] = { 0.3, 0.7 };
	gpt_blend_build(w1, 2, 10, di, si);
	const int16_t want_d1[] = { 1, 0, 1, 1, 0, 1, 1, 0, 1, 1 };
	const int64_t want_s1[] = { 0, 0, 1, 2, 1, 3, 4, 2, 5, 6 };
	int ok = 1;
	for (int i = 0; i < 10; i++)
		ok &= di[i] == want_d1[i] && si[i] == want_s1[i];
	CHECK(ok);
	const double w2[] = { 0.5, 0.25, 0.25 };
	gpt_blend_build(w2, 3, 8, di, si);
	const int16_t want_d2[] = { 0, 1, 2, 0, 0, 1, 2, 0 };
	ok = 1;
	for (int i = 0; i < 8; i++)
		ok &= di[i] == want_d2[i];
	CHECK(ok);
	const int64_t n[] = { 2, 3 };
	gpt_blend_build_exhaustive(n, 2, di, si);
	const int16_t want_d3[] = { 1, 0, 1, 0, 1 };
	const int64_t want_s3[] = { 0, 0, 1, 1, 2 };
	ok = 1;
	for (int i = 0; i < 5; i++)
		ok &= di[i] == want_d3[i] && si[i] == want_s3[i];
	CHECK(ok);
}

int main(void)
{
	log_init("test_gpt_index", 0, 1);
	RUN(test_split);
	RUN(test_worked_example_n3);
	RUN(test_worked_example_n6_separate);
	RUN(test_worked_example_n10);
	RUN(test_blending);
	return test_summary();
}
