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

void rope_inv_freq(float *inv_freq, int rot, float base, const struct rope_scaling *sc)
{
	if (rot <= 0 || rot % 2 != 0)
		BUG("rope table: rotary dim %d must be positive and even", rot);
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

void rope_table_scaled(float *cos, float *sin, int T, int rot, float base, const struct rope_scaling *sc)
{
	int half = rot / 2;
	float *inv_freq = xmalloc((size_t)(half > 0 ? half : 1) * sizeof(float));
	rope_inv_freq(inv_freq, rot, base, sc);
	for (int t = 0; t < T; t++) {
		float *c = cos + (size_t)t * rot, *s = sin + (size_t)t * rot;
		for (int i = 0; i < half; i++) {
			float angle = (float)t * inv_freq[i];
			c[i] = c[i + half] = cosf(angle);
			s[i] = s[i + half] = sinf(angle);
		}
	}
	free(inv_freq);
}
