/*
 * np_random.h - numpy's random number generators, bit for bit (numpy 1.24),
 * for the parts Megatron's GPT datasets consume (megatron/core/datasets/gpt_dataset.py:
 * the shuffles of the indices, MockGPTDataset's sequence lengths):
 *
 *   - the legacy numpy.random.RandomState(seed): MT19937 seeded by
 *     init_genrand (numpy's mt19937_seed for an integer seed < 2^32; an
 *     *array* seed would go through init_by_array, which Megatron never
 *     uses), its masked-rejection bounded integer random_interval() and
 *     RandomState.shuffle on 1-D arrays. Megatron orders documents and
 *     samples with it.
 *
 *   - numpy.random.default_rng(seed) = Generator(PCG64(SeedSequence(seed))):
 *     SeedSequence's entropy pool and generate_state, PCG64 (128-bit LCG with
 *     the XSL-RR output, 32-bit draws served low half then high half of one
 *     64-bit output) and Generator.integers for int32 / int64 (Lemire's
 *     method). Megatron's mock dataset draws its sequence lengths with it.
 *
 * Every generator is a plain struct the caller owns; nothing is global.
 */
#ifndef MEGAC_DATA_NP_RANDOM_H
#define MEGAC_DATA_NP_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* ---- legacy RandomState (MT19937) -------------------------------------- */

#define NP_MT_N 624

struct np_mt19937 {
	uint32_t key[NP_MT_N];
	int pos;
};

/* numpy.random.RandomState(seed) for an integer seed (0 <= seed < 2^32). */
void np_mt_seed(struct np_mt19937 *mt, uint32_t seed);
/* One 32-bit draw (RandomState.randint(2**32, dtype=uint32) for one value). */
uint32_t np_mt_next32(struct np_mt19937 *mt);
/* numpy's mt19937_next64: two draws, the first one is the high word. */
uint64_t np_mt_next64(struct np_mt19937 *mt);
/* numpy's legacy random_interval(): uniform in [0, max] by masked rejection
 * (32-bit draws while max < 2^32, 64-bit draws above). */
uint64_t np_mt_interval(struct np_mt19937 *mt, uint64_t max);

/* RandomState.shuffle of a 1-D array: for i = n-1 down to 1, swap a[i] with
 * a[random_interval(i)]. Successive calls continue the same stream. */
void np_mt_shuffle_i32(struct np_mt19937 *mt, int32_t *a, size_t n);
void np_mt_shuffle_u32(struct np_mt19937 *mt, uint32_t *a, size_t n);
void np_mt_shuffle_i64(struct np_mt19937 *mt, int64_t *a, size_t n);
/* The same for elements of any size, e.g. the rows of a 2-D array, which
 * numpy shuffles along the first axis with the same draws. */
void np_mt_shuffle(struct np_mt19937 *mt, void *a, size_t n, size_t itemsize);

/* ---- SeedSequence -------------------------------------------------------- */

#define NP_SEEDSEQ_POOL 4

struct np_seedseq {
	uint32_t pool[NP_SEEDSEQ_POOL];
};

/* SeedSequence(entropy) where entropy is given as its uint32 words, lowest
 * first (numpy's _coerce_to_uint32_array of the integer), no spawn key. */
void np_seedseq_init(struct np_seedseq *ss, const uint32_t *entropy, size_t n);
/* SeedSequence(seed) for a non-negative integer seed: words of seed, lowest
 * first; seed 0 is the one word 0. */
void np_seedseq_init_int(struct np_seedseq *ss, uint64_t seed);
/* generate_state(n_words, np.uint32). (The uint64 form is the same words
 * paired little-endian: word 2k is the low half of 64-bit word k.) */
void np_seedseq_generate_state(const struct np_seedseq *ss, uint32_t *out, size_t n_words);

/* ---- PCG64 and Generator -------------------------------------------------- */

struct np_pcg64 {
	uint64_t state_hi, state_lo;
	uint64_t inc_hi, inc_lo;
	int has_uint32;      /* a buffered high half is waiting */
	uint32_t uinteger;   /* that high half */
};

/* PCG64(seed_seq): state from generate_state(4, uint64). */
void np_pcg64_seed_seq(struct np_pcg64 *g, const struct np_seedseq *ss);
/* numpy.random.default_rng(seed) for a non-negative integer seed. */
void np_pcg64_seed(struct np_pcg64 *g, uint64_t seed);
uint64_t np_pcg64_next64(struct np_pcg64 *g);
/* Low half of a fresh 64-bit output, then its high half on the next call. */
uint32_t np_pcg64_next32(struct np_pcg64 *g);

/* Generator.integers(low, high, size=n, dtype=np.int32 / np.int64) with
 * endpoint=False: n values in [low, high) into out. error() and -1 (nothing
 * drawn) when low >= high, as numpy raises ValueError. */
int np_gen_integers_i32(struct np_pcg64 *g, int32_t low, int32_t high, int32_t *out, size_t n);
int np_gen_integers_i64(struct np_pcg64 *g, int64_t low, int64_t high, int64_t *out, size_t n);

/* Megatron's mock sequence lengths:
 * numpy.random.default_rng(seed=seed).integers(low=low, high=high, size=n,
 * dtype=np.int32) (Megatron: seed 0, low 1, high 4096, n 100000). */
int np_mock_lengths(int32_t *out, size_t n, uint64_t seed, int32_t low, int32_t high);

#endif
