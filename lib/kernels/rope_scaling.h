/*
 * rope_scaling.h - RoPE tables with Llama 3.x's frequency scaling
 * (Megatron's --use-rope-scaling, RotaryEmbedding._apply_scaling; Hugging
 * Face's rope_type "llama3"). Each inverse frequency f = base^(-2i/rot) of
 * wavelength w = 2 pi / f is kept when w < original / high_freq_factor,
 * divided by factor when w > original / low_freq_factor, and in between
 * mixed: (1 - s) f / factor + s f with s = (original / w - low) / (high -
 * low). Megatron fixes low 1, high 4 and original 8192; only the factor is
 * a flag. All in fp32, as Megatron computes it. Host memory.
 */
#ifndef MEGAC_KERNELS_ROPE_SCALING_H
#define MEGAC_KERNELS_ROPE_SCALING_H

struct rope_scaling {
	float factor;          /* --rope-scaling-factor */
	float low_freq_factor; /* 1 */
	float high_freq_factor; /* 4 */
	int original_max_positions; /* 8192 */
};

/* Megatron's constants with factor f. */
struct rope_scaling rope_scaling_llama3(float factor);

/* inv_freq[rot / 2] of base, scaled by sc (NULL: plain RoPE). */
void rope_inv_freq(float *inv_freq, int rot, float base, const struct rope_scaling *sc);

/* kops_rope_table's cos/sin[T, rot] with the inverse frequencies of
 * rope_inv_freq (sc NULL: the same table as kops_rope_table). */
void rope_table_scaled(float *cos, float *sin, int T, int rot, float base, const struct rope_scaling *sc);

#endif
