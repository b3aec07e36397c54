/*
 * rope_scaling.c - see rope_scaling.h.
 */
#include "kernels/rope_scaling.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/xalloc.h"

struct rope_scaling rope_scaling_llama3(float factor)
{
	struct rope_scaling s = { factor, 1.0f, 4.0f, 8192 };
	return s;
}

struct rope_yarn rope_yarn_defaults(void)
{
	struct rope_yarn y = { 1.0, 4096, 32.0, 1.0, 1.0, 0.0, true };
	return y;
}

static void check_rot(int rot)
{
	if (rot <= 0 || rot % 2 != 0)
		BUG("rope table: rotary dim %d must be positive and even", rot);
}

void rope_inv_freq(float *inv_freq, int rot, float base, const struct rope_scaling *sc)
{
	check_rot(rot);
	for (int i = 0; i < rot / 2; i++) {
		float f = 1.0f / powf(base, (float)(2 * i) / (float)rot);
		if (sc) {
			float old = (float)sc->original_max_positions;
			float low_wavelen = old / sc->low_freq_factor, high_wavelen = old / sc->high_freq_factor;
			float wavelen = (float)(2 * M_PI) / f;
			float scaled = wavelen > low_wavelen ? f / sc->factor : f;
			if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
				float s = (old / wavelen - sc->low_freq_factor) /
					  (sc->high_freq_factor - sc->low_freq_factor);
				scaled = (1 - s) * scaled / sc->factor + s * scaled;
			}
			f = scaled;
		}
		inv_freq[i] = f;
	}
}

/* the pair index whose wavelength fits `rotations` turns into the original
 * context (_yarn_find_correction_dim) */
static double yarn_dim(double rotations, int rot, double base, int original)
{
	return (rot * log(original / (rotations * 2 * M_PI))) / (2 * log(base));
}

void rope_yarn_range(const struct rope_yarn *y, int rot, double base, double *low, double *high)
{
	double lo = yarn_dim(y->beta_fast, rot, base, y->original_max_positions);
	double hi = yarn_dim(y->beta_slow, rot, base, y->original_max_positions);
	if (y->round_to_int) {
		lo = floor(lo);
		hi = ceil(hi);
	}
	*low = lo > 0 ? lo : 0;
	*high = hi < rot - 1 ? hi : rot - 1;
}

void rope_yarn_inv_freq(float *inv_freq, int rot, float base, const struct rope_yarn *y)
{
	check_rot(rot);
	double low, high;
	rope_yarn_range(y, rot, base, &low, &high);
	if (low == high)
		high += 0.001; /* the ramp's guard against a zero width */
	float lo = (float)low, width = (float)(high - low), factor = (float)y->factor;
	for (int i = 0; i < rot / 2; i++) {
		float pos = powf(base, (float)(2 * i) / (float)rot);
		float extra = 1.0f / pos, inter = 1.0f / (factor * pos);
		float ramp = ((float)i - lo) / width;
		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		float mask = 1.0f - ramp; /* the extrapolated share */
		inv_freq[i] = inter * (1.0f - mask) + extra * mask;
	}
}

double rope_yarn_mscale(double factor, double mscale)
{
	return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

double rope_yarn_concentration(const struct rope_yarn *y)
{
	return rope_yarn_mscale(y->factor, y->mscale) / rope_yarn_mscale(y->factor, y->mscale_all_dim);
}

int rope_yarn_check(const struct rope_yarn *y, const char *factor, const char *original, const char *beta_fast,
		    const char *beta_slow)
{
	if (!(y->factor > 0) || !isfinite(y->factor))
		return error("%s must be a positive number (got %g)", factor, y->factor);
	if (y->original_max_positions < 1)
		return error("%s must be at least 1 (got %d)", original, y->original_max_positions);
	if (!(y->beta_fast > 0) || !isfinite(y->beta_fast))
		return error("%s must be a positive number (got %g)", beta_fast, y->beta_fast);
	if (!(y->beta_slow > 0) || !isfinite(y->beta_slow))
		return error("%s must be a positive number (got %g)", beta_slow, y->beta_slow);
	double m = rope_yarn_concentration(y);
	if (!(m > 0) || !isfinite(m))
		return error("YaRN's concentration factor (0.1 mscale ln F + 1) / (0.1 mscale_all_dim ln F + 1) is %g "
			     "with mscale %g, mscale_all_dim %g and factor %g; it must be positive", m, y->mscale,
			     y->mscale_all_dim, y->factor);
	return 0;
}

void rope_table(float *cos, float *sin, int T, const struct rope_spec *sp)
{
	int rot = sp->rot, half = rot / 2;
	check_rot(rot);
	if (sp->llama3 && sp->yarn)
		BUG("rope table: Llama 3.x scaling and YaRN together");
	float *inv_freq = xmalloc((size_t)half * sizeof(float));
	float scale = 1.0f;
	if (sp->yarn) {
		rope_yarn_inv_freq(inv_freq, rot, sp->base, sp->yarn);
		scale = (float)rope_yarn_concentration(sp->yarn);
	} else {
		rope_inv_freq(inv_freq, rot, sp->base, sp->llama3);
	}
	for (int t = 0; t < T; t++) {
		float *c = cos + (size_t)t * rot, *s = sin + (size_t)t * rot;
		for (int i = 0; i < half; i++) {
			float angle = (float)t * inv_freq[i];
			float cv = cosf(angle), sv = sinf(angle);
			if (sp->yarn) { /* torch: cos(freqs) * mscale, in fp32 */
				cv *= scale;
				sv *= scale;
			}
			int i0 = sp->interleaved ? 2 * i : i, i1 = sp->interleaved ? 2 * i + 1 : i + half;
			c[i0] = c[i1] = cv;
			s[i0] = s[i1] = sv;
		}
	}
	free(inv_freq);
}

void rope_table_scaled(float *cos, float *sin, int T, int rot, float base, const struct rope_scaling *sc)
{
	struct rope_spec sp = { rot, base, sc, NULL, false };
	rope_table(cos, sin, T, &sp);
}
