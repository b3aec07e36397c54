/*
 * cpu_rand.c - the counter-based random numbers of the op table: every draw
 * is a pure function of (seed, counter), so dropout masks are regenerated in
 * backward instead of stored, do not depend on thread count or device, and a
 * resumed run draws the same masks. The generator is Philox4x32-10, the one
 * cuRAND and torch's CUDA dropout use, so the CUDA backend can compute the
 * very same bits.
 *
 * Exact definitions (what a reference script must reproduce):
 *   block(seed, j)       = Philox4x32-10 with key (lo32(seed), hi32(seed)) on the
 *                          128-bit counter (lo32(j), hi32(j), 0, 0): words w0..w3
 *   kops_uniform(s, c)   = (w[c mod 4] >> 8) * 2^-24 of block(s, c / 4), in [0, 1)
 *                          with 24 random bits (every value exact in fp32)
 *   kops_normal(s, c)    = Box-Muller on u1 = kops_uniform(s, 2c), u2 = kops_uniform(s, 2c+1)
 *                          (words 0,1 or 2,3 of block(s, c / 2)), computed in double:
 *                          sqrt(-2 ln(1 - u1)) * cos(2 pi u2), rounded to fp32
 *                          (1 - u1 is in (0, 1], so the log is finite: |z| < 5.8)
 *   dropout keeps element c when kops_uniform(seed, offset + c) >= p and then
 *   multiplies it by 1.0f / (1.0f - p) (computed in fp32).
 */
#include "kernels/cpu.h"
#include "kernels/ops.h"

#include <math.h>

/* Philox4x32 constants: multipliers and the Weyl key increments (golden ratio, sqrt(3)-1). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void cpu_philox4x32(uint32_t out[4], const uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
	uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
	for (int round = 0; round < 10; round++) {
		if (round > 0) { /* the key is bumped before every round but the first */
			k0 += PHILOX_W0;
			k1 += PHILOX_W1;
		}
		uint64_t p0 = (uint64_t)PHILOX_M0 * x0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * x2;
		uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
		uint32_t y1 = (uint32_t)p1;
		uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
		uint32_t y3 = (uint32_t)p0;
		x0 = y0, x1 = y1, x2 = y2, x3 = y3;
	}
	out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* The four words of block(seed, j) (see the top of the file). */
static void cpu_block(uint32_t w[4], uint64_t seed, uint64_t j)
{
	const uint32_t ctr[4] = { (uint32_t)j, (uint32_t)(j >> 32), 0, 0 };
	cpu_philox4x32(w, ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Top 24 bits of a word as a float in [0, 1): exact, and never 1. */
static inline float cpu_word_to_uniform(uint32_t w)
{
	return (float)(w >> 8) * 0x1p-24f;
}

float kops_uniform(uint64_t seed, uint64_t counter)
{
	uint32_t w[4];
	cpu_block(w, seed, counter >> 2);
	return cpu_word_to_uniform(w[counter & 3]);
}

float kops_normal(uint64_t seed, uint64_t counter)
{
	uint32_t w[4];
	cpu_block(w, seed, counter >> 1);
	unsigned j = 2 * (unsigned)(counter & 1);
	double u1 = 1.0 - (double)cpu_word_to_uniform(w[j]); /* in (0, 1] */
	double u2 = (double)cpu_word_to_uniform(w[j + 1]);
	return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/*
 * Blocks j0 .. j0+CPU_LANES-1 at once, for the dropout loops: the same
 * rounds as cpu_philox4x32, written lane by lane so the compiler runs the
 * lanes side by side in vector registers (32x32->64-bit multiplies). The
 * words come out in counter order: w[4*l + i] is word i of block j0 + l.
 */
#define CPU_LANES 8
static void cpu_blocks(uint32_t w[4 * CPU_LANES], uint64_t seed, uint64_t j0)
{
	uint32_t x0[CPU_LANES], x1[CPU_LANES], x2[CPU_LANES], x3[CPU_LANES];
	for (int l = 0; l < CPU_LANES; l++) {
		uint64_t j = j0 + (uint64_t)l;
		x0[l] = (uint32_t)j, x1[l] = (uint32_t)(j >> 32), x2[l] = 0, x3[l] = 0;
	}
	uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
	for (int round = 0; round < 10; round++) {
		if (round > 0) {
			k0 += PHILOX_W0;
			k1 += PHILOX_W1;
		}
#pragma omp simd
		for (int l = 0; l < CPU_LANES; l++) {
			uint64_t p0 = (uint64_t)PHILOX_M0 * x0[l];
			uint64_t p1 = (uint64_t)PHILOX_M1 * x2[l];
			uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1[l] ^ k0;
			uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3[l] ^ k1;
			x1[l] = (uint32_t)p1;
			x3[l] = (uint32_t)p0;
			x0[l] = y0;
			x2[l] = y2;
		}
	}
	for (int l = 0; l < CPU_LANES; l++)
		w[4 * l] = x0[l], w[4 * l + 1] = x1[l], w[4 * l + 2] = x2[l], w[4 * l + 3] = x3[l];
}

/*
 * A Philox block yields the draws of four consecutive counters, and a row of
 * dropout starts at any counter: generate CPU_LANES blocks at a time from
 * the block holding c0 and use the words whose counters fall in [c0, c0+n).
 */
void cpu_dropout_scales(float *s, size_t n, float p, uint64_t seed, uint64_t c0)
{
	const float keep_scale = 1.0f / (1.0f - p);
	size_t i = 0;
	while (i < n) {
		const uint64_t c = c0 + i, first = c & ~(uint64_t)3; /* counter of w[0] */
		uint32_t w[4 * CPU_LANES];
		cpu_blocks(w, seed, c >> 2);
		size_t lo = (size_t)(c - first), hi = 4 * CPU_LANES;
		if (hi - lo > n - i)
			hi = lo + (n - i);
		float *out = s + i - lo;
#pragma omp simd
		for (size_t j = lo; j < hi; j++)
			out[j] = cpu_word_to_uniform(w[j]) >= p ? keep_scale : 0.0f;
		i += hi - lo;
	}
}
