/*
 * test_rope_scaling.c - lib/kernels/rope_scaling: the RoPE tables of
 * --use-rope-scaling against a numpy transcription (fp32, as Megatron's
 * RotaryEmbedding._apply_scaling and transformers' rope_type llama3 compute
 * it) for several factors, bases and rotary dims; without scaling the table
 * is kops_rope_table's, bit for bit.
 */
#include <math.h>

#include "kernels/ops.h"
#include "kernels/rope_scaling.h"
#include "test.h"

static const char *REF =
	"import sys, numpy as np\n"
	"f32 = np.float32\n"
	"def inv_freq(rot, base, factor):\n"
	"    f = f32(1) / np.power(f32(base), np.arange(0, rot, 2, dtype=f32) / f32(rot))\n"
	"    if factor is None:\n"
	"        return f.astype(f32)\n"
	"    low, high, old = f32(1), f32(4), f32(8192)\n"
	"    wl = f32(2 * np.pi) / f\n"
	"    out = np.where(wl > old / low, f / f32(factor), f).astype(f32)\n"
	"    s = (old / wl - low) / (high - low)\n"
	"    mixed = (f32(1) - s) * out / f32(factor) + s * out\n"
	"    medium = (wl >= old / high) & (wl <= old / low)\n"
	"    return np.where(medium, mixed, out).astype(f32)\n"
	"for line in open(sys.argv[1] + '/cases.txt'):\n"
	"    rot, base, factor = line.split()\n"
	"    f = inv_freq(int(rot), float(base), None if factor == '-' else float(factor))\n"
	"    print(' '.join('%.9e' % x for x in f))\n";

static void test_tables(void)
{
	static const struct { int rot; float base; float factor; } cases[] = {
		{ 128, 500000.0f, 8.0f }, { 64, 10000.0f, 8.0f }, { 128, 500000.0f, 32.0f },
		{ 16, 500000.0f, 4.0f },  { 128, 500000.0f, 0 },  { 2, 10000.0f, 8.0f },
	};
	int n = (int)(sizeof(cases) / sizeof(cases[0]));
	char *dir = test_tmpdir("rope_scaling");
	CHECK(dir != NULL);
	if (!dir)
		return;
	char path[4200];
	snprintf(path, sizeof(path), "%s/cases.txt", dir);
	FILE *f = fopen(path, "w");
	for (int i = 0; i < n; i++)
		if (cases[i].factor > 0)
			fprintf(f, "%d %.1f %.1f\n", cases[i].rot, (double)cases[i].base, (double)cases[i].factor);
		else
			fprintf(f, "%d %.1f -\n", cases[i].rot, (double)cases[i].base);
	fclose(f);
	char *out = test_python(dir, "", REF);
	CHECK(out != NULL);
	if (!out)
		return;
	char *p = out;
	int scaled_some = 0, kept_some = 0, mixed_some = 0;
	for (int i = 0; i < n; i++) {
		int half = cases[i].rot / 2;
		float got[64], plain[64];
		struct rope_scaling sc = rope_scaling_llama3(cases[i].factor);
		rope_inv_freq(got, cases[i].rot, cases[i].base, cases[i].factor > 0 ? &sc : NULL);
		rope_inv_freq(plain, cases[i].rot, cases[i].base, NULL);
		double worst = 0;
		for (int j = 0; j < half; j++) {
			double want = strtod(p, &p);
			worst = fmax(worst, fabs(got[j] - want) / fabs(want));
			if (cases[i].factor > 0) {
				scaled_some += got[j] == plain[j] / cases[i].factor;
				kept_some += got[j] == plain[j];
				mixed_some += got[j] != plain[j] && got[j] != plain[j] / cases[i].factor;
			}
		}
		if (worst > 2e-6)
			printf("#   case %d (rot %d, base %g, factor %g): worst relative difference %.3g\n", i,
			       cases[i].rot, (double)cases[i].base, (double)cases[i].factor, worst);
		CHECK(worst <= 2e-6);
	}
	/* the cases reach all three bands */
	CHECK(scaled_some > 0 && kept_some > 0 && mixed_some > 0);
	free(out);

	/* the tables: cos/sin of t * inv_freq, [f, f] across the channels; no scaling = kops_rope_table */
	int T = 50, rot = 64;
	float *c1 = calloc((size_t)T * rot, 4), *s1 = calloc((size_t)T * rot, 4);
	float *c2 = calloc((size_t)T * rot, 4), *s2 = calloc((size_t)T * rot, 4);
	kops_rope_table(c1, s1, T, rot, 10000.0f);
	rope_table_scaled(c2, s2, T, rot, 10000.0f, NULL);
	CHECK(!memcmp(c1, c2, (size_t)T * rot * 4) && !memcmp(s1, s2, (size_t)T * rot * 4));
	struct rope_scaling sc = rope_scaling_llama3(8);
	float inv[32];
	rope_inv_freq(inv, rot, 10000.0f, &sc);
	rope_table_scaled(c2, s2, T, rot, 10000.0f, &sc);
	int bad = 0;
	for (int t = 0; t < T; t++)
		for (int j = 0; j < rot; j++)
			bad += c2[t * rot + j] != cosf((float)t * inv[j % 32]) || s2[t * rot + j] != sinf((float)t * inv[j % 32]);
	CHECK_INT(bad, 0);
	free(c1), free(s1), free(c2), free(s2);
}

int main(void)
{
	RUN(test_tables);
	return test_summary();
}
