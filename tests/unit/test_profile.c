/*
 * test_profile.c - the op profile (lib/kernels/profile.c) around the CPU
 * table: the wrapped ops compute what the table's do, every call is counted
 * with its flops or bytes, reset forgets, and the report lists the ops.
 */
#include "test.h"

#include "kernels/ops.h"
#include "kernels/profile.h"

static void test_wrap_counts_and_computes(void)
{
	const struct kops *cpu = kops_cpu();
	CHECK(!kops_profile_active());
	const struct kops *p = kops_profile_wrap(cpu);
	CHECK(kops_profile_active());
	CHECK(kops_profile_wrap(cpu) == p); /* one profile per process */
	CHECK(p != cpu && p->linear_forward != cpu->linear_forward && p->alloc == cpu->alloc);

	enum { N = 3, IC = 4, OC = 5 };
	float inp[N * IC], w[OC * IC], out[N * OC], ref[N * OC];
	for (int i = 0; i < N * IC; i++)
		inp[i] = 0.25f * (float)(i % 7) - 0.5f;
	for (int i = 0; i < OC * IC; i++)
		w[i] = 0.125f * (float)(i % 5) - 0.25f;
	cpu->linear_forward(ref, inp, w, NULL, N, IC, OC);
	kops_profile_reset();
	p->linear_forward(out, inp, w, NULL, N, IC, OC);
	p->linear_forward(out, inp, w, NULL, N, IC, OC);
	CHECK(memcmp(out, ref, sizeof out) == 0);
	float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	CHECK(p->sumsq(x, 8) == 204.0);
	p->scale(x, 2.0f, 8);
	CHECK(x[7] == 16.0f);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	kops_profile_report(f, 2, 0);
	fclose(f);
	printf("%s", buf);
	/* two iterations: one linear_forward call each, 2*3*4*5 = 120 flops per call */
	CHECK(strstr(buf, "op profile of rank 0 (cpu table") != NULL);
	const char *lf = strstr(buf, "linear_forward");
	CHECK(lf != NULL);
	double calls = lf ? strtod(lf + strlen("linear_forward"), NULL) : -1;
	CHECK(calls == 1.0);
	CHECK(strstr(buf, "sumsq") != NULL && strstr(buf, "scale") != NULL && strstr(buf, "all ops") != NULL);
	CHECK(strstr(buf, "layernorm_forward") == NULL); /* never called: no row */
	free(buf);

	kops_profile_reset();
	buf = NULL;
	f = open_memstream(&buf, &len);
	kops_profile_report(f, 1, 0);
	fclose(f);
	CHECK(strstr(buf, "linear_forward") == NULL); /* reset forgot it */
	free(buf);
}

int main(void)
{
	RUN(test_wrap_counts_and_computes);
	return test_summary();
}
