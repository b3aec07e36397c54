/*
 * philox.cuh - Philox4x32-10, the counter-based generator of cpu_rand.c,
 * for the CUDA kernels (through common.cuh) and for the tensor-core kernels
 * in the thread-block emulator (tests/emu, -DMEGAC_EMU), which compile it on
 * the host: block(seed, j) has key (lo32(seed), hi32(seed)) and counter
 * (lo32(j), hi32(j), 0, 0); word w of block j is the draw of counter 4j + w.
 */
#ifndef MEGAC_KERNELS_CUDA_PHILOX_CUH
#define MEGAC_KERNELS_CUDA_PHILOX_CUH

#include <stdint.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* the high 32 bits of a 32 x 32-bit product (__umulhi; mul.hi on the device) */
static __host__ __device__ __forceinline__ uint32_t philox_mulhi(uint32_t a, uint32_t b)
{
	return (uint32_t)(((uint64_t)a * b) >> 32);
}

static __host__ __device__ __forceinline__ uint4 philox4(uint64_t seed, uint64_t j)
{
	uint32_t x0 = (uint32_t)j, x1 = (uint32_t)(j >> 32), x2 = 0, x3 = 0;
	uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
	for (int round = 0; round < 10; round++) {
		if (round > 0) { /* the key is bumped before every round but the first */
			k0 += PHILOX_W0;
			k1 += PHILOX_W1;
		}
		uint32_t hi0 = philox_mulhi(PHILOX_M0, x0), lo0 = PHILOX_M0 * x0;
		uint32_t hi1 = philox_mulhi(PHILOX_M1, x2), lo1 = PHILOX_M1 * x2;
		uint32_t y0 = hi1 ^ x1 ^ k0, y1 = lo1;
		uint32_t y2 = hi0 ^ x3 ^ k1, y3 = lo0;
		x0 = y0, x1 = y1, x2 = y2, x3 = y3;
	}
	uint4 r;
	r.x = x0;
	r.y = x1;
	r.z = x2;
	r.w = x3;
	return r;
}

/* word w (0..3) of a block, and a word as a uniform draw in [0, 1) (2^-24 steps, exact) */
static __host__ __device__ __forceinline__ uint32_t philox_word(uint4 b, unsigned w)
{
	return w == 0 ? b.x : w == 1 ? b.y : w == 2 ? b.z : b.w;
}

static __host__ __device__ __forceinline__ float philox_u01(uint32_t word)
{
	return (float)(word >> 8) * 5.9604644775390625e-08f;
}

#endif
