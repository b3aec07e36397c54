/*
 * attn_bench.c - the attention micro-benchmark: the CUDA
 * table's flash-style block attention (attention_block_forward/backward on
 * positions 0..T-1, the path the model takes on a GPU), causal, forward and
 * backward, at head dims 64 and 128, in TFLOP/s by the usual count (forward
 * 4·B·a·T²·k/2 for the causal half, backward 2.5 times that), and once with
 * a sliding window of 512 (the count of the query-key pairs it holds) and once
 * with document masks (packed documents of 512 tokens: ops.h's doc; counted
 * as causal, since every causal tile is visited and masked), for the
 * fp32 table (kops_cuda: fp32 kernels on the CUDA cores) and the bf16 one
 * (kops_cuda_half: the tensor-core kernels of attn_tc.cuh, whose forward
 * runs on wgmma on an H100/H200, then again on mma.sync in blocks of 8 warps
 * and of 4). Prints one line per table and
 * case; without a GPU "1..0 # SKIP ..." and exit 0.
 *
 *   build/gpu/attn_bench [--reps N] [--cpu]   (--cpu: the CPU table, tiny
 *                                              sizes: a check of the program)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda_ops.h"
#include "kernels/ops.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* device buffers of n floats filled from a host pattern */
static float *fill(const struct kops *k, size_t n, unsigned seed)
{
	float *h = malloc(n * sizeof(float) + 1), *d = k->alloc(n * sizeof(float));
	if (!h) {
		fprintf(stderr, "attn_bench: out of host memory\n");
		exit(2);
	}
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		h[i] = (float)((seed >> 8) * (1.0 / 16777216.0) - 0.5);
	}
	k->to_device(d, h, n * sizeof(float));
	free(h);
	return d;
}

struct bench_case {
	int B, a, g, T, kd;
	int win; /* sliding window (ops.h); 0: none, causal */
	int doc; /* document length of packed sequences (ops.h's doc); 0: none */
};

static void bench_table(const struct kops *k, const struct bench_case *cases, int ncase, int reps, int cpu)
{
	printf("# attention: causal, %s table, %d timed repetitions after a warm-up\n", k->name, reps);
	printf("%-34s %10s %10s %10s %10s\n", "case", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s");
	for (int c = 0; c < ncase; c++) {
		int B = cases[c].B, a = cases[c].a, g = cases[c].g, T = cases[c].T, kd = cases[c].kd;
		const int win = cases[c].win > 0 ? cases[c].win : -1;
		if (cpu)
			B = 1, T = 128;
		size_t nq = (size_t)B * a * T * kd, nkv = (size_t)B * g * T * kd;
		float *q = fill(k, nq, 1), *kk = fill(k, nkv, 2), *v = fill(k, nkv, 3), *dout = fill(k, nq, 4);
		float *out = k->alloc(nq * sizeof(float)), *lse = k->alloc((size_t)B * a * T * sizeof(float));
		float *dq = k->alloc(nq * sizeof(float)), *dk = k->alloc(nkv * sizeof(float));
		float *dv = k->alloc(nkv * sizeof(float));
		int32_t *hp = malloc((size_t)T * sizeof(int32_t)), *pos = k->alloc((size_t)T * sizeof(int32_t));
		for (int i = 0; hp && i < T; i++)
			hp[i] = i;
		k->to_device(pos, hp, (size_t)T * sizeof(int32_t));
		free(hp);
		int32_t *doc = NULL; /* ids [B, T]: position p in document p / len */
		if (cases[c].doc > 0) {
			int32_t *hd = malloc((size_t)B * T * sizeof(int32_t));
			doc = k->alloc((size_t)B * T * sizeof(int32_t));
			for (int i = 0; hd && i < B * T; i++)
				hd[i] = i % T / cases[c].doc;
			k->to_device(doc, hd, (size_t)B * T * sizeof(int32_t));
			free(hd);
		}
		float scale = 1.0f / sqrtf((float)kd), sync;
		double tf = 0, tb = 0;
		for (int r = 0; r <= reps; r++) {
			double t0 = now();
			k->attention_block_forward(out, lse, q, kk, v, pos, pos, doc, B, T, T, a, g, kd, T, scale, win,
						   0.0f, 1, 0, 0);
			k->to_host(&sync, lse, sizeof(float)); /* waits for the kernels */
			double t1 = now();
			k->attention_block_backward(dq, dk, dv, dout, out, lse, q, kk, v, pos, pos, doc, B, T, T, a, g,
						    kd, T, scale, win, 0.0f, 1, 0);
			k->to_host(&sync, dv, sizeof(float));
			double t2 = now();
			if (r > 0) { /* the first run warms up */
				tf += t1 - t0;
				tb += t2 - t1;
			}
		}
		tf /= reps;
		tb /= reps;
		double flops = 4.0 * B * a * (double)T * T * kd / 2; /* QK^T and PV, causal half */
		if (win >= 0 && win < T) /* the pairs the window holds: L(L+1)/2 + (T-L)(L+1) */
			flops = 4.0 * B * a * kd * ((double)win * (win + 1) / 2 + (double)(T - win) * (win + 1));
		char label[64], wl[24] = "";
		if (win >= 0)
			snprintf(wl, sizeof(wl), " window=%d", win);
		else if (doc)
			snprintf(wl, sizeof(wl), " doc=%d", cases[c].doc);
		snprintf(label, sizeof(label), "B=%d a=%d g=%d T=%d k=%d%s", B, a, g, T, kd, wl);
		printf("%-34s %10.3f %10.1f %10.3f %10.1f\n", label, tf * 1e3, flops / tf / 1e12, tb * 1e3,
		       2.5 * flops / tb / 1e12);
		float *bufs[] = { q, kk, v, dout, out, lse, dq, dk, dv };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
			k->free(bufs[i]);
		k->free(pos);
		if (doc)
			k->free(doc);
	}
}

int main(int argc, char **argv)
{
	int reps = 10;
	int cpu = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
		else if (!strcmp(argv[i], "--cpu"))
			cpu = 1;
		else {
			fprintf(stderr, "usage: %s [--reps N] [--cpu]\n", argv[0]);
			return 2;
		}
	}
	const char *why = NULL;
	const struct kops *tables[2] = { NULL, NULL };
	if (cpu)
		tables[0] = kops_cpu();
	else if ((tables[0] = kops_cuda(&why)))
		tables[1] = kops_cuda_half(KOPS_ROUND_BF16, &why);
	if (!tables[0] || !tables[0]->attention_block_forward || !tables[0]->attention_block_backward) {
		printf("1..0 # SKIP %s\n", why ? why : "no block attention in this table");
		return 0;
	}
	static const struct bench_case cases[] = {
		{ 4, 16, 16, 2048, 64, 0, 0 }, { 2, 16, 16, 4096, 64, 0, 0 }, { 2, 16, 16, 4096, 128, 0, 0 },
		{ 2, 32, 8, 4096, 128, 0, 0 }, { 2, 16, 16, 4096, 128, 512, 0 }, { 2, 16, 16, 4096, 128, 0, 512 }
	};
	int ncase = (int)(sizeof(cases) / sizeof(cases[0]));
	for (int t = 0; t < 2 && tables[t]; t++)
		bench_table(tables[t], cases, ncase, reps, cpu);
	if (tables[1]) { /* the tensor-core forward's other versions (attn_tc.cu) */
		setenv("MEGAC_TC_WGMMA", "0", 1);
		printf("# MEGAC_TC_WGMMA=0: the forward on mma.sync (on an H100/H200 the default is wgmma)\n");
		bench_table(tables[1], cases, ncase, reps, cpu);
		setenv("MEGAC_TC_WARPS", "4", 1);
		printf("# MEGAC_TC_WGMMA=0 MEGAC_TC_WARPS=4: mma.sync in blocks of 4 warps (64 queries)\n");
		bench_table(tables[1], cases, ncase, reps, cpu);
		unsetenv("MEGAC_TC_WARPS");
		unsetenv("MEGAC_TC_WGMMA");
	}
	return 0;
}
