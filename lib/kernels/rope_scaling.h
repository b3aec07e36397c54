/*
 * rope_scaling.h - the RoPE tables of every RoPE variant megac has, built on
 * the host in fp32 as Megatron computes them, so that every backend (CPU,
 * CUDA, context-parallel, the serving cache) applies the same numbers.
 *
 * Llama 3.x frequency scaling (Megatron's --use-rope-scaling,
 * RotaryEmbedding._apply_scaling; Hugging Face's rope_type "llama3"). Each
 * inverse frequency f = base^(-2i/rot) of wavelength w = 2 pi / f is kept
 * when w < original / high_freq_factor, divided by factor when w > original
 * / low_freq_factor, and in between mixed: (1 - s) f / factor + s f with
 * s = (original / w - low) / (high - low). Megatron fixes low 1, high 4 and
 * original 8192; only the factor is a flag.
 *
 * YaRN (--position-embedding-type yarn, YarnRotaryEmbedding; Hugging Face's
 * rope_type "yarn"): every frequency is a blend of the extrapolated f and
 * the interpolated f / factor, weighted by a linear ramp over the
 * "correction range" of channel pairs [low, high], where low and high are
 * the pair indices whose wavelengths fit beta_fast and beta_slow rotations
 * into the original context (rounded outwards to whole pairs unless told
 * otherwise). Pairs below low keep f, pairs above high take f / factor.
 * cos and sin are then multiplied by the concentration factor ("mscale",
 * Hugging Face's attention_factor): m(mscale) / m(mscale_all_dim) with
 * m(x) = 0.1 x ln(factor) + 1 (1 when factor <= 1). The correction range
 * and the concentration are computed in double as Python does; the
 * frequencies in fp32 as torch does.
 *
 * Layouts: rotate-half (Megatron's default) repeats the frequencies [f, f]
 * across the rot channels, channel i pairing with i + rot/2; interleaved
 * (--rotary-interleaved) repeats each in place [f0, f0, f1, f1, ...],
 * channel 2i pairing with 2i + 1. The ops take the table as given
 * (qkv_split_forward in ops.h). Host memory.
 */
#ifndef MEGAC_KERNELS_ROPE_SCALING_H
#define MEGAC_KERNELS_ROPE_SCALING_H

#include <stdbool.h>

struct rope_scaling {
	float factor;          /* --rope-scaling-factor */
	float low_freq_factor; /* 1 */
	float high_freq_factor; /* 4 */
	int original_max_positions; /* 8192 */
};

/* YaRN's settings; Megatron's flags and defaults. */
struct rope_yarn {
	double factor;              /* --rotary-scaling-factor (1.0) */
	int original_max_positions; /* --yarn-original-max-position-embeddings (4096) */
	double beta_fast;           /* --yarn-beta-fast (32) */
	double beta_slow;           /* --yarn-beta-slow (1) */
	double mscale;              /* --mscale (1.0) */
	double mscale_all_dim;      /* --mscale-all-dim (0.0) */
	bool round_to_int;          /* --[no-]yarn-correction-range-round-to-int (true) */
};

/* One table: the rotated channels, the base and at most one of the
 * frequency scalings. */
struct rope_spec {
	int rot;
	float base;
	const struct rope_scaling *llama3; /* NULL: none */
	const struct rope_yarn *yarn;      /* NULL: none */
	bool interleaved;
};

/* Megatron's constants with factor f. */
struct rope_scaling rope_scaling_llama3(float factor);

/* Megatron's YaRN defaults (YarnRotaryEmbedding's and the training
 * arguments'): factor 1, original 4096, betas 32 and 1, mscale 1 and 0,
 * rounded correction range. */
struct rope_yarn rope_yarn_defaults(void);

/* inv_freq[rot / 2] of base, scaled by sc (NULL: plain RoPE). */
void rope_inv_freq(float *inv_freq, int rot, float base, const struct rope_scaling *sc);

/* YaRN's inv_freq[rot / 2] (YarnRotaryEmbedding.get_emb, with dim = rot). */
void rope_yarn_inv_freq(float *inv_freq, int rot, float base, const struct rope_yarn *y);

/* YaRN's correction range [*low, *high] in channel pairs (before the ramp's
 * singularity guard), for a rotary dim rot. */
void rope_yarn_range(const struct rope_yarn *y, int rot, double base, double *low, double *high);

/* error() naming the setting (by the names given, in the order factor,
 * original, beta_fast, beta_slow) and -1 when y cannot make a table: a
 * factor or betas not positive, an original context below 1, or a
 * concentration factor not positive and finite. */
int rope_yarn_check(const struct rope_yarn *y, const char *factor, const char *original, const char *beta_fast,
		    const char *beta_slow);

/* YaRN's m(factor, mscale) = 0.1 mscale ln(factor) + 1, 1 for a factor of
 * at most 1 (_yarn_get_mscale). */
double rope_yarn_mscale(double factor, double mscale);

/* The factor YaRN multiplies cos and sin by
 * (_yarn_get_concentration_factor). */
double rope_yarn_concentration(const struct rope_yarn *y);

/* cos/sin[T, rot] of the positions 0..T-1 as sp says. */
void rope_table(float *cos, float *sin, int T, const struct rope_spec *sp);

/* kops_rope_table's cos/sin[T, rot] with the inverse frequencies of
 * rope_inv_freq (sc NULL: the same table as kops_rope_table). */
void rope_table_scaled(float *cos, float *sin, int T, int rot, float base, const struct rope_scaling *sc);

#endif
