/*
 * test_rope_scaling.c - lib/kernels/rope_scaling: the RoPE tables of
 * --use-rope-scaling against a numpy transcription (fp32, as Megatron's
 * RotaryEmbedding._apply_scaling and transformers' rope_type llama3 compute
 * it) for several factors, bases and rotary dims; without scaling the table
 * is kops_rope_table's, bit for bit. YaRN (--position-embedding-type yarn)
 * against a numpy transcription of YaRN's definition (the correction range
 * in double, the frequencies in fp32, the concentration factor on cos and
 * sin), rounded and not, with and without mscale; and the interleaved
 * layout holds the rotate-half table's values, each frequency twice in
 * place.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static const char *YARN_REF =
	"import sys, math, numpy as np\n"
	"f32 = np.float32\n"
	"for line in open(sys.argv[1] + '/yarn.txt'):\n"
	"    d, base, factor, orig, fast, slow, ms, msa, rnd = line.split()\n"
	"    d, orig, rnd = int(d), int(orig), rnd == '1'\n"
	"    base, factor, fast, slow, ms, msa = map(float, (base, factor, fast, slow, ms, msa))\n"
	"    at = lambda r: d * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))\n"
	"    lo, hi = at(fast), at(slow)\n"
	"    if rnd: lo, hi = math.floor(lo), math.ceil(hi)\n"
	"    lo, hi = max(lo, 0), min(hi, d - 1)\n"
	"    if lo == hi: hi += 0.001\n"
	"    ramp = np.clip((np.arange(d // 2, dtype=f32) - f32(lo)) / f32(hi - lo), f32(0), f32(1))\n"
	"    pw = np.power(f32(base), np.arange(0, d, 2, dtype=f32) / f32(d))\n"
	"    ext, itp = f32(1) / pw, f32(1) / (f32(factor) * pw)\n"
	"    keep = f32(1) - ramp\n"
	"    inv = (itp * (f32(1) - keep) + ext * keep).astype(f32)\n"
	"    m = lambda x: 1.0 if factor <= 1 else 0.1 * x * math.log(factor) + 1.0\n"
	"    print(' '.join('%.9e' % x for x in inv), '%.17g' % (m(ms) / m(msa)))\n";

static void test_yarn(void)
{
	static const struct rope_yarn cases[] = {
		{ 40, 4096, 32, 1, 1, 0, true },      /* DeepSeek-like factor, defaults otherwise */
		{ 4, 4096, 32, 1, 1, 0, true },       /* mscale from the factor alone */
		{ 4, 16, 32, 1, 1, 0, true },         /* a short original context: the range moves down */
		{ 8, 2048, 16, 2, 0.707, 0.707, true }, /* mscale = mscale_all_dim: concentration 1 */
		{ 8, 2048, 16, 2, 1, 0.5, false },    /* fractional range ends */
		{ 1, 4096, 32, 1, 1, 0, true },       /* factor 1: plain RoPE */
	};
	static const struct { int rot; float base; } dims[] = { { 64, 10000 }, { 128, 500000 }, { 16, 10000 } };
	int n = (int)(sizeof(cases) / sizeof(cases[0])), nd = (int)(sizeof(dims) / sizeof(dims[0]));
	char *dir = test_tmpdir("rope_yarn");
	CHECK(dir != NULL);
	if (!dir)
		return;
	char path[4200];
	snprintf(path, sizeof(path), "%s/yarn.txt", dir);
	FILE *f = fopen(path, "w");
	for (int d = 0; d < nd; d++)
		for (int i = 0; i < n; i++) {
			const struct rope_yarn *y = &cases[i];
			fprintf(f, "%d %.1f %.17g %d %.17g %.17g %.17g %.17g %d\n", dims[d].rot, (double)dims[d].base,
				y->factor, y->original_max_positions, y->beta_fast, y->beta_slow, y->mscale,
				y->mscale_all_dim, y->round_to_int);
		}
	fclose(f);
	char *out = test_python(dir, "", YARN_REF);
	CHECK(out != NULL);
	if (!out)
		return;
	char *p = out;
	int extra = 0, inter = 0, blend = 0;
	for (int d = 0; d < nd; d++)
		for (int i = 0; i < n; i++) {
			int rot = dims[d].rot, half = rot / 2;
			float got[64], plain[64];
			rope_yarn_inv_freq(got, rot, dims[d].base, &cases[i]);
			rope_inv_freq(plain, rot, dims[d].base, NULL);
			double worst = 0;
			for (int j = 0; j < half; j++) {
				double want = strtod(p, &p);
				worst = fmax(worst, fabs(got[j] - want) / fabs(want));
				if (cases[i].factor > 1) {
					extra += got[j] == plain[j];
					inter += got[j] == 1.0f / ((float)cases[i].factor * (1.0f / plain[j])) ||
						 got[j] == plain[j] / (float)cases[i].factor;
					blend += got[j] != plain[j] && fabsf(got[j] - plain[j] / (float)cases[i].factor) >
										1e-6f * got[j];
				}
			}
			double m = strtod(p, &p), gm = rope_yarn_concentration(&cases[i]);
			if (worst > 2e-6 || fabs(m - gm) > 1e-15)
				printf("#   yarn case %d, rot %d: worst relative difference %.3g, concentration %.17g "
				       "(want %.17g)\n", i, rot, worst, gm, m);
			CHECK(worst <= 2e-6);
			CHECK(fabs(m - gm) <= 1e-15);
		}
	CHECK(extra > 0 && inter > 0 && blend > 0); /* all three bands reached */
	free(out);

	/* the table: cos/sin of t * inv_freq times the concentration, in both layouts */
	int T = 40, rot = 16;
	struct rope_yarn y = cases[1];
	float inv[8], *c = calloc((size_t)T * rot, 4), *s = calloc((size_t)T * rot, 4);
	float *ci = calloc((size_t)T * rot, 4), *si = calloc((size_t)T * rot, 4);
	rope_yarn_inv_freq(inv, rot, 10000.0f, &y);
	float m = (float)rope_yarn_concentration(&y);
	CHECK(m > 1.1f);
	struct rope_spec half = { rot, 10000.0f, NULL, &y, false }, il = { rot, 10000.0f, NULL, &y, true };
	rope_table(c, s, T, &half);
	rope_table(ci, si, T, &il);
	int bad = 0;
	for (int t = 0; t < T; t++)
		for (int j = 0; j < rot; j++) {
			float a = (float)t * inv[j % 8], b = (float)t * inv[j / 2];
			bad += c[t * rot + j] != cosf(a) * m || s[t * rot + j] != sinf(a) * m;
			bad += ci[t * rot + j] != cosf(b) * m || si[t * rot + j] != sinf(b) * m;
		}
	CHECK_INT(bad, 0);
	free(c), free(s), free(ci), free(si);
}

int main(void)
{
	RUN(test_tables);
	RUN(test_yarn);
	return test_summary();
}
