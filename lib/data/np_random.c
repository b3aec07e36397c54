/*
 * np_random.c - numpy's RandomState (MT19937), SeedSequence, PCG64 and
 * Generator.integers, transcribed from numpy 1.24's C sources
 * (numpy/random/src/mt19937, src/pcg64, src/distributions/distributions.c,
 * bit_generator.pyx, _bounded_integers.pyx.in). See np_random.h.
 */
#include "data/np_random.h"

#include <inttypes.h>
#include <string.h>

#include "base/error.h"

/* ---- MT19937 --------------------------------------------------------------- */

#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfU
#define MT_UPPER 0x80000000U
#define MT_LOWER 0x7fffffffU

void np_mt_seed(struct np_mt19937 *mt, uint32_t seed)
{
	/* numpy's mt19937_seed = Matsumoto's init_genrand. */
	for (int pos = 0; pos < NP_MT_N; pos++) {
		mt->key[pos] = seed;
		seed = 1812433253U * (seed ^ (seed >> 30)) + (uint32_t)pos + 1;
	}
	mt->pos = NP_MT_N;
}

static void mt_gen(struct np_mt19937 *mt)
{
	uint32_t *k = mt->key, y;
	int i;
	for (i = 0; i < NP_MT_N - MT_M; i++) {
		y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
		k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1) & MT_MATRIX_A);
	}
	for (; i < NP_MT_N - 1; i++) {
		y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
		k[i] = k[i + (MT_M - NP_MT_N)] ^ (y >> 1) ^ (-(y & 1) & MT_MATRIX_A);
	}
	y = (k[NP_MT_N - 1] & MT_UPPER) | (k[0] & MT_LOWER);
	k[NP_MT_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1) & MT_MATRIX_A);
	mt->pos = 0;
}

uint32_t np_mt_next32(struct np_mt19937 *mt)
{
	if (mt->pos == NP_MT_N)
		mt_gen(mt);
	uint32_t y = mt->key[mt->pos++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680U;
	y ^= (y << 15) & 0xefc60000U;
	y ^= y >> 18;
	return y;
}

uint64_t np_mt_next64(struct np_mt19937 *mt)
{
	/* numpy writes `(uint64_t)next(s) << 32 | next(s)`, whose evaluation
	 * order C leaves open; numpy as built (gcc) draws the high word first,
	 * which RandomState.randint(2**40, dtype=np.int64) confirms. */
	uint64_t hi = np_mt_next32(mt);
	uint64_t lo = np_mt_next32(mt);
	return hi << 32 | lo;
}

uint64_t np_mt_interval(struct np_mt19937 *mt, uint64_t max)
{
	if (max == 0)
		return 0;
	uint64_t mask = max, v;
	mask |= mask >> 1;
	mask |= mask >> 2;
	mask |= mask >> 4;
	mask |= mask >> 8;
	mask |= mask >> 16;
	mask |= mask >> 32;
	if (max <= 0xffffffffU) {
		while ((v = (np_mt_next32(mt) & mask)) > max)
			;
	} else {
		while ((v = (np_mt_next64(mt) & mask)) > max)
			;
	}
	return v;
}

#define MT_SHUFFLE(name, type)                                            \
	void name(struct np_mt19937 *mt, type *a, size_t n)               \
	{                                                                 \
		for (size_t i = n ? n - 1 : 0; i >= 1; i--) {             \
			size_t j = (size_t)np_mt_interval(mt, i);         \
			type t = a[j];                                    \
			a[j] = a[i];                                      \
			a[i] = t;                                         \
		}                                                         \
	}

MT_SHUFFLE(np_mt_shuffle_i32, int32_t)
MT_SHUFFLE(np_mt_shuffle_u32, uint32_t)
MT_SHUFFLE(np_mt_shuffle_i64, int64_t)

void np_mt_shuffle(struct np_mt19937 *mt, void *a, size_t n, size_t itemsize)
{
	unsigned char tmp[64], *p = a;
	for (size_t i = n ? n - 1 : 0; i >= 1; i--) {
		size_t j = (size_t)np_mt_interval(mt, i);
		unsigned char *x = p + i * itemsize, *y = p + j * itemsize;
		for (size_t at = 0; at < itemsize; at += sizeof(tmp)) {
			size_t k = itemsize - at < sizeof(tmp) ? itemsize - at : sizeof(tmp);
			memcpy(tmp, y + at, k);
			memmove(y + at, x + at, k);
			memcpy(x + at, tmp, k);
		}
	}
}

/* ---- SeedSequence ---------------------------------------------------------- */

#define SS_INIT_A 0x43b0d7e5U
#define SS_MULT_A 0x931e8875U
#define SS_INIT_B 0x8b51f9ddU
#define SS_MULT_B 0x58f38dedU
#define SS_MIX_MULT_L 0xca01f9ddU
#define SS_MIX_MULT_R 0x4973f715U
#define SS_XSHIFT 16

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const)
{
	value ^= *hash_const;
	*hash_const *= SS_MULT_A;
	value *= *hash_const;
	value ^= value >> SS_XSHIFT;
	return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
	uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
	r ^= r >> SS_XSHIFT;
	return r;
}

void np_seedseq_init(struct np_seedseq *ss, const uint32_t *entropy, size_t n)
{
	uint32_t *m = ss->pool, hc = SS_INIT_A;
	for (size_t i = 0; i < NP_SEEDSEQ_POOL; i++)
		m[i] = ss_hashmix(i < n ? entropy[i] : 0, &hc);
	for (size_t s = 0; s < NP_SEEDSEQ_POOL; s++)
		for (size_t d = 0; d < NP_SEEDSEQ_POOL; d++)
			if (s != d)
				m[d] = ss_mix(m[d], ss_hashmix(m[s], &hc));
	for (size_t s = NP_SEEDSEQ_POOL; s < n; s++)
		for (size_t d = 0; d < NP_SEEDSEQ_POOL; d++)
			m[d] = ss_mix(m[d], ss_hashmix(entropy[s], &hc));
}

void np_seedseq_init_int(struct np_seedseq *ss, uint64_t seed)
{
	uint32_t w[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
	np_seedseq_init(ss, w, w[1] ? 2 : 1);
}

void np_seedseq_generate_state(const struct np_seedseq *ss, uint32_t *out, size_t n_words)
{
	uint32_t hc = SS_INIT_B;
	for (size_t i = 0; i < n_words; i++) {
		uint32_t v = ss->pool[i % NP_SEEDSEQ_POOL];
		v ^= hc;
		hc *= SS_MULT_B;
		v *= hc;
		v ^= v >> SS_XSHIFT;
		out[i] = v;
	}
}

/* ---- PCG64 ----------------------------------------------------------------- */

#define PCG_MULT_HI 2549297995355413924ULL
#define PCG_MULT_LO 4865540595714422341ULL

/* Full 64x64 -> 128-bit product. */
static void mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
#ifdef __SIZEOF_INT128__
	unsigned __int128 p = (unsigned __int128)a * b;
	*hi = (uint64_t)(p >> 64);
	*lo = (uint64_t)p;
#else
	uint64_t a0 = a & 0xffffffffU, a1 = a >> 32, b0 = b & 0xffffffffU, b1 = b >> 32;
	uint64_t w0 = a0 * b0, t = a1 * b0 + (w0 >> 32);
	uint64_t w1 = (t & 0xffffffffU) + a0 * b1;
	*hi = a1 * b1 + (t >> 32) + (w1 >> 32);
	*lo = (w1 << 32) | (w0 & 0xffffffffU);
#endif
}

static void pcg_step(struct np_pcg64 *g)
{
	uint64_t hi, lo;
	mul64(g->state_lo, PCG_MULT_LO, &hi, &lo);
	hi += g->state_hi * PCG_MULT_LO + g->state_lo * PCG_MULT_HI;
	g->state_lo = lo + g->inc_lo;
	g->state_hi = hi + g->inc_hi + (g->state_lo < lo);
}

void np_pcg64_seed_seq(struct np_pcg64 *g, const struct np_seedseq *ss)
{
	uint32_t w[8];
	np_seedseq_generate_state(ss, w, 8);
	/* generate_state(4, uint64): 64-bit word k = w[2k] | w[2k+1] << 32;
	 * pcg64_set_seed(seed = words 0,1 as (high, low), inc = words 2,3). */
	uint64_t v[4];
	for (int k = 0; k < 4; k++)
		v[k] = (uint64_t)w[2 * k] | (uint64_t)w[2 * k + 1] << 32;
	/* pcg_setseq_128_srandom_r */
	g->state_hi = g->state_lo = 0;
	g->inc_hi = v[2] << 1 | v[3] >> 63;
	g->inc_lo = v[3] << 1 | 1;
	pcg_step(g);
	uint64_t lo = g->state_lo + v[1];
	g->state_hi += v[0] + (lo < v[1]);
	g->state_lo = lo;
	pcg_step(g);
	g->has_uint32 = 0;
	g->uinteger = 0;
}

void np_pcg64_seed(struct np_pcg64 *g, uint64_t seed)
{
	struct np_seedseq ss;
	np_seedseq_init_int(&ss, seed);
	np_pcg64_seed_seq(g, &ss);
}

uint64_t np_pcg64_next64(struct np_pcg64 *g)
{
	pcg_step(g);
	uint64_t x = g->state_hi ^ g->state_lo;
	unsigned rot = (unsigned)(g->state_hi >> 58);
	return (x >> rot) | (x << ((-rot) & 63));
}

uint32_t np_pcg64_next32(struct np_pcg64 *g)
{
	if (g->has_uint32) {
		g->has_uint32 = 0;
		return g->uinteger;
	}
	uint64_t next = np_pcg64_next64(g);
	g->has_uint32 = 1;
	g->uinteger = (uint32_t)(next >> 32);
	return (uint32_t)next;
}

/* ---- Generator.integers ---------------------------------------------------- */

/* buffered_bounded_lemire_uint32: uniform in [0, rng], rng < 2^32 - 1. */
static uint32_t lemire32(struct np_pcg64 *g, uint32_t rng)
{
	const uint32_t excl = rng + 1;
	uint64_t m = (uint64_t)np_pcg64_next32(g) * excl;
	uint32_t leftover = (uint32_t)m;
	if (leftover < excl) {
		const uint32_t threshold = (UINT32_MAX - rng) % excl;
		while (leftover < threshold) {
			m = (uint64_t)np_pcg64_next32(g) * excl;
			leftover = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

/* bounded_lemire_uint64: uniform in [0, rng], rng < 2^64 - 1. */
static uint64_t lemire64(struct np_pcg64 *g, uint64_t rng)
{
	const uint64_t excl = rng + 1;
	uint64_t hi, leftover;
	mul64(np_pcg64_next64(g), excl, &hi, &leftover);
	if (leftover < excl) {
		const uint64_t threshold = (UINT64_MAX - rng) % excl;
		while (leftover < threshold)
			mul64(np_pcg64_next64(g), excl, &hi, &leftover);
	}
	return hi;
}

int np_gen_integers_i32(struct np_pcg64 *g, int32_t low, int32_t high, int32_t *out, size_t n)
{
	if (low >= high)
		return error("integers: low %" PRId32 " >= high %" PRId32, low, high);
	/* random_bounded_uint32_fill(off = low, rng = high - 1 - low, masked = 0) */
	uint32_t rng = (uint32_t)((int64_t)high - 1 - low), off = (uint32_t)low;
	for (size_t i = 0; i < n; i++) {
		uint32_t r;
		if (rng == 0)
			r = 0;
		else if (rng == UINT32_MAX)
			r = np_pcg64_next32(g);
		else
			r = lemire32(g, rng);
		out[i] = (int32_t)(off + r);
	}
	return 0;
}

int np_gen_integers_i64(struct np_pcg64 *g, int64_t low, int64_t high, int64_t *out, size_t n)
{
	if (low >= high)
		return error("integers: low %" PRId64 " >= high %" PRId64, low, high);
	/* random_bounded_uint64_fill(off = low, rng = high - 1 - low, masked = 0) */
	uint64_t rng = (uint64_t)high - 1 - (uint64_t)low, off = (uint64_t)low;
	for (size_t i = 0; i < n; i++) {
		uint64_t r;
		if (rng == 0)
			r = 0;
		else if (rng == UINT32_MAX)
			r = np_pcg64_next32(g);
		else if (rng < UINT32_MAX)
			r = lemire32(g, (uint32_t)rng);
		else if (rng == UINT64_MAX)
			r = np_pcg64_next64(g);
		else
			r = lemire64(g, rng);
		out[i] = (int64_t)(off + r);
	}
	return 0;
}

int np_mock_lengths(int32_t *out, size_t n, uint64_t seed, int32_t low, int32_t high)
{
	struct np_pcg64 g;
	np_pcg64_seed(&g, seed);
	return np_gen_integers_i32(&g, low, high, out, n);
}
